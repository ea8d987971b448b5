// Tests of the batch tool with fake tools in a real ToolRegistry: calls run concurrently and
// report in order, failures stay contained, what cannot be batched is refused with the message
// the model needs, and each call gets a context derived from the batch's.
#include "tool/builtin/batch.hpp"

#include <gtest/gtest.h>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <stdexcept>

#include "bus/event_bus.hpp"
#include "clienttool/registry.hpp"
#include "tool/registry.hpp"
#include "tool/tool_test_helpers.hpp"

namespace sb::tool {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using namespace sb::tool::testing;

// How many fake calls run at the same time, and the most that ever did.
struct Concurrency {
  int now = 0;
  int peak = 0;
};

// echo {text, delay?}: waits `delay` ms, then answers `text` with the title "echo <text>".
class EchoTool final : public BasicTool {
 public:
  explicit EchoTool(Concurrency* c)
      : BasicTool("echo", "Echoes text", R"({"type": "object", "properties": {
          "text": {"type": "string"}, "delay": {"type": "integer"}}, "required": ["text"]})"),
        c_(c) {}
  asio::awaitable<Result<ToolResult>> execute(json::object args, ToolContext&) override {
    ++c_->now;
    c_->peak = std::max(c_->peak, c_->now);
    auto delay = get_int(args, "delay");
    if (delay && *delay) {
      asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(**delay));
      co_await t.async_wait(asio::use_awaitable);
    }
    --c_->now;
    std::string text(args.at("text").as_string());
    co_return ToolResult{"echo " + text, text, json::object{{"len", text.size()}}, {}};
  }

 private:
  Concurrency* c_;
};

class FailTool final : public BasicTool {
 public:
  FailTool() : BasicTool("fail", "Always fails", R"({"type": "object", "properties": {}})") {}
  asio::awaitable<Result<ToolResult>> execute(json::object, ToolContext&) override {
    co_return make_error(ErrorCode::InvalidRequest, "boom");
  }
};

class ThrowTool final : public BasicTool {
 public:
  ThrowTool() : BasicTool("thrower", "Throws", R"({"type": "object", "properties": {}})") {}
  asio::awaitable<Result<ToolResult>> execute(json::object, ToolContext&) override {
    throw std::runtime_error("bug in the tool");
    co_return ToolResult{};
  }
};

// Asks a permission, reports progress, and answers with what its context says.
class ContextTool final : public BasicTool {
 public:
  ContextTool()
      : BasicTool("ctx", "Shows its context", R"({"type": "object", "properties": {}})") {}
  asio::awaitable<Result<ToolResult>> execute(json::object, ToolContext& ctx) override {
    PermissionRequest request;
    request.permission = "ctx";
    request.patterns = {ctx.call_id};
    if (auto ok = co_await ctx.request_permission(std::move(request)); !ok) co_return ok.error();
    ctx.report(std::string("working on ") + ctx.call_id, json::object{{"progress", 50}});
    ctx.set_awaiting_person(true);
    seen_abort = ctx.abort.get();
    ToolResult r;
    r.title = "context";
    r.output = ctx.session_id + "|" + ctx.message_id + "|" + ctx.call_id + "|" + ctx.agent + "|" +
               ctx.directory.string();
    r.attachments.push_back(json::object{{"type", "file"}, {"url", "data:,x"}});
    co_return r;
  }
  AbortSignal* seen_abort = nullptr;
};

// Waits until the call is aborted.
class WaitTool final : public BasicTool {
 public:
  WaitTool() : BasicTool("wait", "Waits for an abort", R"({"type": "object", "properties": {}})") {}
  asio::awaitable<Result<ToolResult>> execute(json::object, ToolContext& ctx) override {
    auto executor = co_await asio::this_coro::executor;
    for (int i = 0; i < 500 && !ctx.abort->aborted(); ++i) {
      asio::steady_timer t(executor, 10ms);
      co_await t.async_wait(asio::use_awaitable);
    }
    if (ctx.abort->aborted()) co_return make_error(ErrorCode::Unavailable, "aborted");
    co_return ToolResult{"", "never aborted", {}, {}};
  }
};

class BatchTest : public ::testing::Test {
 protected:
  BatchTest() {
    registry_->add_builtin(make_batch_tool(registry_));
    registry_->add_builtin(std::make_shared<EchoTool>(&concurrency_));
    registry_->add_builtin(std::make_shared<FailTool>());
    registry_->add_builtin(std::make_shared<ThrowTool>());
    registry_->add_builtin(context_tool_);
    registry_->register_tool(std::make_shared<WaitTool>());  // a custom tool
  }

  ToolPtr batch() const { return registry_->find("batch", "ses_test"); }

  Result<ToolResult> run(std::string_view json_args) {
    auto ctx = context(asks_, &reports_, "/project");
    return run_io(batch()->execute(args(json_args), ctx));
  }

  Concurrency concurrency_;
  std::shared_ptr<ContextTool> context_tool_ = std::make_shared<ContextTool>();
  std::shared_ptr<ToolRegistry> registry_ =
      std::make_shared<ToolRegistry>(nullptr, RegistryOptions{true});
  Asks asks_;
  Reports reports_;
};

TEST_F(BatchTest, SchemaLimitsTheNumberOfCalls) {
  auto tool = batch();
  ASSERT_TRUE(tool);
  const auto& calls = tool->parameters().at("properties").at("tool_calls").as_object();
  EXPECT_EQ(calls.at("minItems"), 1);
  EXPECT_EQ(calls.at("maxItems"), 25);
}

TEST_F(BatchTest, RegistryHidesBatchUnlessTheFlagIsSet) {
  auto off = std::make_shared<ToolRegistry>(nullptr, RegistryOptions{false});
  off->add_builtin(make_batch_tool(off));
  EXPECT_EQ(off->find("batch", "s"), nullptr);
  EXPECT_NE(batch(), nullptr);
}

TEST_F(BatchTest, RunsCallsConcurrentlyAndReportsThemInOrder) {
  auto start = std::chrono::steady_clock::now();
  auto r = run(R"({"tool_calls": [
      {"tool": "echo", "parameters": {"text": "one", "delay": 300}},
      {"tool": "echo", "parameters": {"text": "two", "delay": 100}},
      {"tool": "echo", "parameters": {"text": "three", "delay": 200}}]})");
  auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(concurrency_.peak, 3);
  EXPECT_LT(elapsed, 550ms);  // not 600 ms of calls one after the other
  EXPECT_EQ(r->title, "Batch execution (3/3 successful)");
  EXPECT_EQ(
      r->output,
      "All 3 tool calls succeeded.\n\n"
      "<result call=\"1\" tool=\"echo\" status=\"success\" title=\"echo one\">\none\n</result>"
      "\n\n"
      "<result call=\"2\" tool=\"echo\" status=\"success\" title=\"echo two\">\ntwo\n</result>"
      "\n\n"
      "<result call=\"3\" tool=\"echo\" status=\"success\" title=\"echo three\">\nthree\n"
      "</result>");
  EXPECT_EQ(r->metadata.at("totalCalls"), 3);
  EXPECT_EQ(r->metadata.at("successful"), 3);
  EXPECT_EQ(r->metadata.at("failed"), 0);
  EXPECT_EQ(r->metadata.at("truncated"), false);
  const auto& details = r->metadata.at("details").as_array();
  ASSERT_EQ(details.size(), 3u);
  EXPECT_EQ(details[2].at("status"), "completed");
  EXPECT_EQ(details[2].at("title"), "echo three");
}

TEST_F(BatchTest, AFailingCallDoesNotFailTheOthers) {
  auto r = run(R"({"tool_calls": [
      {"tool": "echo", "parameters": {"text": "a", "delay": 50}},
      {"tool": "fail", "parameters": {}},
      {"tool": "thrower"},
      {"tool": "echo", "parameters": {"text": "b"}}]})");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(Contains(r->output, "2 of 4 tool calls succeeded; 2 failed."));
  EXPECT_TRUE(Contains(
      r->output, "<result call=\"2\" tool=\"fail\" status=\"error\">\nError: boom\n</result>"));
  EXPECT_TRUE(Contains(r->output, "Error: internal error: bug in the tool"));
  EXPECT_TRUE(Contains(r->output, "status=\"success\" title=\"echo a\">\na\n</result>"));
  EXPECT_TRUE(Contains(r->output, "status=\"success\" title=\"echo b\">\nb\n</result>"));
  EXPECT_EQ(r->metadata.at("failed"), 2);
  const auto& details = r->metadata.at("details").as_array();
  EXPECT_EQ(details[1].at("status"), "error");
  EXPECT_EQ(details[1].at("error"), "boom");
  EXPECT_EQ(details[3].at("status"), "completed");
}

TEST_F(BatchTest, NestedBatchIsRefused) {
  auto r = run(R"({"tool_calls": [
      {"tool": "batch", "parameters": {"tool_calls": [{"tool": "echo", "parameters": {"text": "x"}}]}},
      {"tool": "echo", "parameters": {"text": "ok"}}]})");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(
      Contains(r->output, "Error: Tool 'batch' is not allowed in batch. Disallowed tools: batch"));
  EXPECT_TRUE(Contains(r->output, "title=\"echo ok\""));
}

TEST_F(BatchTest, ToolsOutsideTheRegistryAreRefused) {
  asio::io_context io;
  auto clients = clienttool::ClientToolRegistry::create(io.get_executor(), bus::EventBus::create());
  auto registry = std::make_shared<ToolRegistry>(clients, RegistryOptions{true});
  registry->add_builtin(make_batch_tool(registry));
  registry->add_builtin(std::make_shared<EchoTool>(&concurrency_));
  registry->add_builtin(std::make_shared<FailTool>());
  clienttool::ToolSpec spec{"time", "Local time", json::object{{"type", "object"}}};
  ASSERT_TRUE(clients->register_tools("app", {spec}));
  // The client tool is known to the registry, but is not a server tool.
  ASSERT_NE(registry->find("client_app_time", "ses_test"), nullptr);

  auto ctx = context(asks_);
  auto r = run_io(registry->find("batch", "ses_test")
                      ->execute(args(R"({"tool_calls": [{"tool": "client_app_time"},
                                                         {"tool": "nope", "parameters": {}}]})"),
                                ctx));
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(Contains(r->output,
                       "Error: Tool 'client_app_time' not in registry. External tools (MCP, "
                       "environment) cannot be batched - call them directly. Available tools: "
                       "echo, fail\n"));
  EXPECT_TRUE(Contains(r->output, "Error: Tool 'nope' not in registry."));
  EXPECT_EQ(r->metadata.at("failed"), 2);
  clients->shutdown();
}

TEST_F(BatchTest, ParametersArePreparedAgainstTheToolsSchema) {
  auto r = run(R"({"tool_calls": [
      {"tool": "echo", "parameters": {"text": 42}},
      {"tool": "echo", "parameters": {"delay": 1}},
      {"tool": "echo", "parameters": "{\"text\": \"from a string\"}"}]})");
  ASSERT_TRUE(r) << r.error().message;
  // A number where a string is wanted is repaired; a missing field is not.
  EXPECT_TRUE(Contains(r->output, "title=\"echo 42\""));
  EXPECT_TRUE(Contains(r->output,
                       "status=\"error\">\nError: the echo tool was called with "
                       "invalid arguments"));
  EXPECT_TRUE(Contains(r->output, "/text is required"));
  EXPECT_TRUE(Contains(r->output, "title=\"echo from a string\""));
}

TEST_F(BatchTest, AtMostTwentyFiveCalls) {
  auto calls = [](int n) {
    json::array list;
    for (int i = 0; i < n; ++i)
      list.push_back(json::object{{"tool", "echo"},
                                  {"parameters", json::object{{"text", std::to_string(i)}}}});
    return json::serialize(json::object{{"tool_calls", list}});
  };
  auto ok = run(calls(25));
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(ok->metadata.at("successful"), 25);
  auto too_many = run(calls(26));
  ASSERT_FALSE(too_many);
  EXPECT_TRUE(Contains(too_many.error().message, "at most 25 tool calls, got 26"));
  auto none = run(R"({"tool_calls": []})");
  ASSERT_FALSE(none);
  EXPECT_TRUE(Contains(none.error().message, "at least one call"));
  EXPECT_EQ(concurrency_.peak > 0, true);
}

TEST_F(BatchTest, EachCallGetsAContextDerivedFromTheBatch) {
  auto ctx = context(asks_, &reports_, "/project");
  int awaiting = 0;
  ctx.awaiting_person = [&](bool waiting) { awaiting += waiting ? 1 : -1; };
  auto r = run_io(batch()->execute(
      args(R"({"tool_calls": [{"tool": "echo", "parameters": {"text": "x"}}, {"tool": "ctx"}]})"),
      ctx));
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(Contains(r->output, ">\nses_test|msg_test|call_1_2|build|/project\n</result>"));
  // The batch's permission asks, abort signal and awaiting-input report are the call's.
  ASSERT_EQ(asks_.requests.size(), 1u);
  EXPECT_EQ(asks_.requests[0].permission, "ctx");
  EXPECT_EQ(asks_.requests[0].patterns, std::vector<std::string>{"call_1_2"});
  EXPECT_EQ(context_tool_->seen_abort, ctx.abort.get());
  EXPECT_EQ(awaiting, 1);
  // Attachments of the calls come with the batch's result.
  ASSERT_EQ(r->attachments.size(), 1u);
  EXPECT_EQ(r->attachments[0].at("url"), "data:,x");
}

TEST_F(BatchTest, ProgressIsReportedPerCall) {
  auto r =
      run(R"({"tool_calls": [{"tool": "ctx"}, {"tool": "echo", "parameters": {"text": "e"}}]})");
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_FALSE(reports_.metadata.empty());
  // The first report lists both calls before they run; a call's own title shows as it works.
  const auto& first = reports_.metadata.front().at("details").as_array();
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].at("status"), "pending");
  bool saw_running = false, saw_title = false;
  for (const auto& m : reports_.metadata) {
    const auto& d = m.at("details").as_array();
    saw_running |= d[0].at("status") == "running";
    saw_title |= d[0].at("title") == "working on call_1_1";
  }
  EXPECT_TRUE(saw_running);
  EXPECT_TRUE(saw_title);
  const auto& last = reports_.metadata.back().at("details").as_array();
  EXPECT_EQ(last[0].at("status"), "completed");
  EXPECT_EQ(last[1].at("status"), "completed");
  for (const auto& t : reports_.titles)
    EXPECT_FALSE(t.has_value());  // the batch's own title is left alone
}

TEST_F(BatchTest, AbortReachesEveryCall) {
  auto ctx = context(asks_);
  auto start = std::chrono::steady_clock::now();
  auto r = run_io(aborted_after(
      100ms, ctx.abort, "stop",
      batch()->execute(args(R"({"tool_calls": [{"tool": "wait"}, {"tool": "wait"}, {"tool": "echo",
               "parameters": {"text": "quick"}}]})"),
                       ctx)));
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  EXPECT_TRUE(Contains(r->output, "1 of 3 tool calls succeeded; 2 failed."));
  EXPECT_TRUE(Contains(r->output, "tool=\"wait\" status=\"error\">\nError: aborted\n"));
}

TEST_F(BatchTest, AlreadyAbortedRunsNothing) {
  auto ctx = context(asks_);
  ctx.abort->abort("stop");
  auto r = run_io(batch()->execute(
      args(R"({"tool_calls": [{"tool": "echo", "parameters": {"text": "x"}}]})"), ctx));
  ASSERT_FALSE(r);
  EXPECT_EQ(concurrency_.peak, 0);
}

TEST_F(BatchTest, LargeOutputsShareTheOutputBudget) {
  std::string templ = (std::filesystem::temp_directory_path() / "sb_batch_XXXXXX").string();
  std::filesystem::path data_dir = ::mkdtemp(templ.data());
  auto ctx = context(asks_);
  ctx.data_dir = data_dir;
  std::string big(40000, 'a'), small = "tiny";
  auto r = run_io(batch()->execute(
      json::object{
          {"tool_calls",
           json::array{
               json::object{{"tool", "echo"}, {"parameters", json::object{{"text", big}}}},
               json::object{{"tool", "echo"}, {"parameters", json::object{{"text", big}}}},
               json::object{{"tool", "echo"}, {"parameters", json::object{{"text", small}}}}}}},
      ctx));
  ASSERT_TRUE(r) << r.error().message;
  // Every call's result is visible within what the processor keeps of one tool output.
  EXPECT_LT(r->output.size(), 51200u);
  EXPECT_TRUE(Contains(r->output,
                       "call=\"3\" tool=\"echo\" status=\"success\" title=\"echo "
                       "tiny\">\ntiny\n</result>"));
  std::size_t notes = 0;
  for (auto at = r->output.find("[Output truncated"); at != std::string::npos;
       at = r->output.find("[Output truncated", at + 1))
    ++notes;
  EXPECT_EQ(notes, 2u);
  EXPECT_EQ(r->metadata.at("truncated"), true);  // something was left out
  // The full outputs were saved where the processor saves them.
  std::size_t saved = 0;
  for (const auto& e :
       std::filesystem::recursive_directory_iterator(data_dir / "truncate" / "ses_test")) {
    ++saved;
    EXPECT_EQ(std::filesystem::file_size(e.path()), big.size());
  }
  EXPECT_EQ(saved, 2u);
  std::filesystem::remove_all(data_dir);
}

TEST_F(BatchTest, RegistryGoneIsAnError) {
  ToolPtr orphan;
  {
    auto registry = std::make_shared<ToolRegistry>(nullptr, RegistryOptions{true});
    orphan = make_batch_tool(registry);
  }
  auto ctx = context(asks_);
  auto r =
      run_io(orphan->execute(args(R"({"tool_calls": [{"tool": "echo", "parameters": {}}]})"), ctx));
  ASSERT_FALSE(r);
  EXPECT_TRUE(Contains(r.error().message, "registry"));
}

}  // namespace
}  // namespace sb::tool
