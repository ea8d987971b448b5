// ToolRegistry (seed 004): the order the model is offered tools in, collisions (the earlier tool
// wins), custom tools replacing each other, the batch flag, and client tools scoped to a session.
#include "tool/registry.hpp"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include "bus/event_bus.hpp"

namespace sb::tool {
namespace {

class Named final : public BasicTool {
 public:
  Named(std::string id, std::string description)
      : BasicTool(std::move(id), std::move(description), R"({"type": "object"})") {}
  boost::asio::awaitable<Result<ToolResult>> execute(json::object, ToolContext&) override {
    co_return ToolResult{"", description(), {}, {}};
  }
};

ToolPtr named(std::string id, std::string description = "") {
  return std::make_shared<Named>(std::move(id), std::move(description));
}

std::vector<std::string> ids_of(const std::vector<ToolPtr>& tools) {
  std::vector<std::string> out;
  for (const auto& t : tools)
    out.push_back(t->id());
  return out;
}

class ToolRegistryTest : public ::testing::Test {
 protected:
  ToolRegistryTest() {
    registry_->add_builtin(named("read", "built-in read"));
    registry_->add_builtin(named("batch"));
    registry_->add_builtin(named("bash"));
  }

  boost::asio::io_context io_;
  std::shared_ptr<clienttool::ClientToolRegistry> clients_ =
      clienttool::ClientToolRegistry::create(io_.get_executor(), bus::EventBus::create());
  std::shared_ptr<ToolRegistry> registry_ =
      std::make_shared<ToolRegistry>(clients_, RegistryOptions{false});
};

TEST_F(ToolRegistryTest, BuiltInsThenCustomToolsThenTheSessionsClientTools) {
  registry_->register_tool(named("deploy"));
  clienttool::ToolSpec spec{"time", "Local time", json::object{{"type", "object"}}};
  ASSERT_TRUE(clients_->register_tools("app", {spec}));
  ASSERT_TRUE(clients_->register_tools("tab", {spec}, "ses_b"));

  // batch is behind experimental.batch_tool, off here.
  EXPECT_EQ(registry_->ids(), (std::vector<std::string>{"read", "bash", "deploy"}));
  EXPECT_EQ(ids_of(registry_->tools("", "ses_a")),
            (std::vector<std::string>{"read", "bash", "deploy", "client_app_time"}));
  EXPECT_EQ(
      ids_of(registry_->tools("", "ses_b")),
      (std::vector<std::string>{"read", "bash", "deploy", "client_app_time", "client_tab_time"}));
  EXPECT_EQ(registry_->find("batch", "ses_a"), nullptr);
  EXPECT_EQ(registry_->find("nope", "ses_a"), nullptr);
}

TEST_F(ToolRegistryTest, AnEarlierToolWinsAndACustomToolReplacesItsNamesake) {
  registry_->register_tool(named("read", "custom read"));  // collides with the built-in
  registry_->register_tool(named("deploy", "first"));
  registry_->register_tool(named("deploy", "second"));

  EXPECT_EQ(registry_->ids(), (std::vector<std::string>{"read", "bash", "deploy"}));
  EXPECT_EQ(registry_->find("read", "s")->description(), "built-in read");
  EXPECT_EQ(registry_->find("deploy", "s")->description(), "second");
}

TEST_F(ToolRegistryTest, FindReturnsAClientToolOnlyInTheSessionsItIsOfferedTo) {
  clienttool::ToolSpec spec{"time", "Local time", json::object{{"type", "object"}}};
  ASSERT_TRUE(clients_->register_tools("tab", {spec}, "ses_b"));

  auto found = registry_->find("client_tab_time", "ses_b");
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->description(), "Local time");
  EXPECT_EQ(registry_->find("client_tab_time", "ses_a"), nullptr);

  clients_->unregister("tab", std::nullopt);
  EXPECT_EQ(registry_->find("client_tab_time", "ses_b"), nullptr);
}

TEST(ToolRegistry, TheBatchToolIsOfferedWhenItsFlagIsOn) {
  ToolRegistry registry(nullptr, RegistryOptions{true});
  registry.add_builtin(named("read"));
  registry.add_builtin(named("batch"));
  EXPECT_EQ(registry.ids(), (std::vector<std::string>{"read", "batch"}));
  EXPECT_NE(registry.find("batch", "s"), nullptr);
}

}  // namespace
}  // namespace sb::tool
