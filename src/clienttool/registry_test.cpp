#include "clienttool/registry.hpp"

#include <gtest/gtest.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "clienttool/wire.hpp"
#include "util/clock.hpp"

namespace sb {
// Readable failure messages: "NOT_FOUND" rather than a dump of the enum's bytes.
inline void PrintTo(ErrorCode code, std::ostream* os) {
  *os << error_code_name(code);
}

}  // namespace sb

namespace sb::clienttool {
namespace {

using namespace std::chrono_literals;
using MessagePtr = std::shared_ptr<const ClientMessage>;

// How long a test waits for something that should happen (much longer than any deadline used).
constexpr auto kWait = 5s;

::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

// The registry runs on the test's io_context, on the test's own thread, as the server runs it on
// its one executor: a helper that waits for something runs the context until it has happened (or
// `limit` has passed). The context keeps a work guard, so running it for a while really waits.
bool run_until(boost::asio::io_context& io, const std::function<bool()>& done,
               std::chrono::milliseconds limit = kWait) {
  auto deadline = Clock::now() + limit;
  while (!done() && Clock::now() < deadline)
    io.run_one_until(deadline);
  return done();
}

// A client connection that records what the registry sends it.
class FakeSink : public ClientSink {
 public:
  explicit FakeSink(boost::asio::io_context& io) : io_(&io) {}
  void deliver(std::shared_ptr<const ClientMessage> message) override {
    messages_.push_back(std::move(message));
  }
  void close(const std::string& reason) override { closes_.push_back(reason); }

  const std::vector<MessagePtr>& messages() const { return messages_; }
  std::vector<MessagePtr> of_kind(ClientMessage::Kind kind) const {
    std::vector<MessagePtr> out;
    for (auto& m : messages_)
      if (m->kind == kind) out.push_back(m);
    return out;
  }
  std::vector<MessagePtr> requests() const { return of_kind(ClientMessage::Kind::Request); }
  std::vector<MessagePtr> cancels() const { return of_kind(ClientMessage::Kind::Cancel); }
  const std::vector<std::string>& closes() const { return closes_; }

  // The first message of `kind` for `request_id`, running the context until it comes; null if it
  // did not come in time.
  MessagePtr wait_for(ClientMessage::Kind kind, const std::string& request_id) const {
    MessagePtr found;
    run_until(*io_, [&] {
      for (auto& m : messages_)
        if (m->kind == kind && m->request_id == request_id) {
          found = m;
          return true;
        }
      return false;
    });
    return found;
  }
  MessagePtr wait_cancel(const std::string& request_id) const {
    return wait_for(ClientMessage::Kind::Cancel, request_id);
  }

 private:
  boost::asio::io_context* io_;
  std::vector<MessagePtr> messages_;
  std::vector<std::string> closes_;
};

// Records every outcome a completion handler receives, so a test can wait for the first and
// check that there was exactly one.
class Completion {
 public:
  explicit Completion(boost::asio::io_context& io) : io_(&io) {}

  std::function<void(ExecuteOutcome)> handler() const {
    return
        [outcomes = outcomes_](ExecuteOutcome outcome) { outcomes->push_back(std::move(outcome)); };
  }
  // The first outcome, running the context until there is one (or `timeout` has passed).
  std::optional<ExecuteOutcome> wait(std::chrono::milliseconds timeout = kWait) const {
    if (!run_until(
            *io_, [this] { return !outcomes_->empty(); }, timeout))
      return std::nullopt;
    return outcomes_->front();
  }
  // How many outcomes there were, once every handler that is ready has run.
  std::size_t count() const {
    io_->poll();
    return outcomes_->size();
  }

 private:
  boost::asio::io_context* io_;
  std::shared_ptr<std::vector<ExecuteOutcome>> outcomes_ =
      std::make_shared<std::vector<ExecuteOutcome>>();
};

// Every event published on the bus.
class EventLog {
 public:
  EventLog(const std::shared_ptr<bus::EventBus>& bus, boost::asio::io_context& io)
      : io_(&io),
        subscription_(bus->subscribe([this](const bus::EventPtr& e) { events_.push_back(e); })) {}

  using Filter = std::function<bool(const json::object&)>;

  std::vector<bus::EventPtr> of_type(std::string_view type, const Filter& filter = {}) const {
    std::vector<bus::EventPtr> out;
    for (auto& e : events_)
      if (e->type == type && (!filter || filter(e->properties))) out.push_back(e);
    return out;
  }
  // The first event of `type` that passes `filter`, running the context until it is published;
  // null if it was not in time.
  bus::EventPtr wait_for(std::string_view type, const Filter& filter = {}) const {
    bus::EventPtr found;
    run_until(*io_, [&] {
      auto m = of_type(type, filter);
      if (m.empty()) return false;
      found = m.front();
      return true;
    });
    return found;
  }
  static Filter request(const std::string& request_id) {
    return [request_id](const json::object& p) {
      auto it = p.find("requestID");
      return it != p.end() && it->value() == json::value(request_id);
    };
  }

 private:
  boost::asio::io_context* io_;
  std::vector<bus::EventPtr> events_;
  bus::Subscription subscription_;  // last: unsubscribes before the rest goes away
};

ToolSpec spec(std::string name, json::value parameters = json::object{{"type", "object"}},
              std::string description = "a tool") {
  return ToolSpec{std::move(name), std::move(description), std::move(parameters)};
}

ExecuteParams params(std::string tool, json::object input = {},
                     std::optional<std::chrono::milliseconds> timeout = std::nullopt,
                     std::string client_id = {}) {
  ExecuteParams p;
  p.tool = std::move(tool);
  p.input = std::move(input);
  p.timeout = timeout;
  p.client_id = std::move(client_id);
  return p;
}

ToolResponse success(std::string output) {
  ToolResponse r;
  r.success = true;
  r.title = "done";
  r.output = std::move(output);
  r.metadata = json::object{{"k", 1}};
  return r;
}

ToolResponse failure(std::string error) {
  ToolResponse r;
  r.success = false;
  r.error = std::move(error);
  return r;
}

json::value schema(std::string_view text) {
  auto r = parse_json(text);
  EXPECT_TRUE(r.has_value()) << text;
  return r ? *r : json::value();
}

class RegistryTest : public ::testing::Test {
 protected:
  void SetUp() override { restart({}); }
  void TearDown() override {
    registry_.reset();
    io_.poll();  // the handlers the registry posted as it went
  }

  void restart(RegistryOptions options) {
    registry_ = ClientToolRegistry::create(io_.get_executor(), bus_, options);
  }

  void restart_with_grace(std::chrono::milliseconds grace) {
    RegistryOptions o;
    o.reconnect_grace = grace;
    restart(o);
  }

  void register_ok(const std::string& client, std::vector<ToolSpec> specs) {
    auto r = registry_->register_tools(client, std::move(specs));
    ASSERT_TRUE(r.has_value()) << r.error().message;
  }

  // Starts a call that must be accepted.
  StartedCall start(ExecuteParams p, const Completion& done, ProgressHandler progress = {}) {
    auto r = registry_->execute(std::move(p), done.handler(), std::move(progress));
    EXPECT_TRUE(r.has_value()) << r.error().message;
    return r ? *r : StartedCall{};
  }

  std::vector<std::string> tool_ids(const std::string& client) const {
    std::vector<std::string> ids;
    for (auto& def : registry_->get_tools(client))
      ids.push_back(def->id);
    return ids;
  }

  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_ =
      boost::asio::make_work_guard(io_);
  std::shared_ptr<bus::EventBus> bus_ = bus::EventBus::create();
  EventLog events_{bus_, io_};
  std::shared_ptr<ClientToolRegistry> registry_;
};

using Strings = std::vector<std::string>;

// ---- registration -----------------------------------------------------------------------------

TEST_F(RegistryTest, RegisterReturnsIdsInClientIdNameFormat) {
  json::value params = schema(R"({"type": "object", "properties": {"tz": {"type": "string"}}})");
  auto r = registry_->register_tools(
      "c1", {spec("get_time", params, "Get the local time"), spec("search-docs")});
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(*r, (Strings{"client_c1_get_time", "client_c1_search-docs"}));

  auto tools = registry_->get_tools("c1");
  ASSERT_EQ(tools.size(), 2u);
  const ToolDefinition* get_time = nullptr;
  for (auto& t : tools)
    if (t->id == "client_c1_get_time") get_time = t.get();
  ASSERT_NE(get_time, nullptr);
  EXPECT_EQ(get_time->name, "get_time");
  EXPECT_EQ(get_time->client_id, "c1");
  EXPECT_EQ(get_time->description, "Get the local time");
  EXPECT_EQ(get_time->parameters, params);
  EXPECT_NE(get_time->schema, nullptr);

  EXPECT_TRUE(registry_->get_tools("nobody").empty());
}

TEST_F(RegistryTest, GetAllToolsSpansClients) {
  register_ok("c1", {spec("a"), spec("b")});
  register_ok("c2", {spec("a")});
  auto all = registry_->get_all_tools();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all.at("client_c1_a")->client_id, "c1");
  EXPECT_EQ(all.at("client_c1_b")->client_id, "c1");
  EXPECT_EQ(all.at("client_c2_a")->client_id, "c2");
  EXPECT_EQ(all.at("client_c2_a")->id, "client_c2_a");
}

TEST_F(RegistryTest, GetToolFindsAToolByItsFullIdOnly) {
  register_ok("c1", {spec("a")});
  register_ok("my-client", {spec("search-docs")});
  ASSERT_TRUE(registry_->get_tool("client_c1_a"));
  EXPECT_EQ(registry_->get_tool("client_c1_a")->client_id, "c1");
  ASSERT_TRUE(registry_->get_tool("client_my-client_search-docs"));
  EXPECT_EQ(registry_->get_tool("client_my-client_search-docs")->client_id, "my-client");
  EXPECT_FALSE(registry_->get_tool("a"));  // a name is not an id
  EXPECT_FALSE(registry_->get_tool("client_c2_a"));
  EXPECT_FALSE(registry_->get_tool("read"));
  EXPECT_FALSE(registry_->get_tool("client_c1_b"));
}

TEST_F(RegistryTest, AToolIdOwnedByAnotherClientIsAConflict) {
  // client "a" + tool "b_c" and client "a_b" + tool "c" both spell client_a_b_c.
  register_ok("a", {spec("b_c", schema(R"({"type": "object"})"), "first")});
  auto r = registry_->register_tools("a_b", {spec("c")});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::Conflict);
  EXPECT_NE(r.error().message.find("client_a_b_c"), std::string::npos) << r.error().message;
  ASSERT_TRUE(registry_->get_tool("client_a_b_c"));
  EXPECT_EQ(registry_->get_tool("client_a_b_c")->client_id, "a");
  EXPECT_TRUE(registry_->get_tools("a_b").empty());
  ASSERT_EQ(registry_->get_tools("a").size(), 1u);
  EXPECT_EQ(registry_->get_tools("a")[0]->description, "first");
}

// Every client of an application registers the same tools: one compiled schema serves them
// all while any of them is registered.
TEST_F(RegistryTest, ClientsRegisteringTheSameSchemaShareItsCompiledForm) {
  json::value params = schema(R"({"type": "object", "properties": {"q": {"type": "string"}}})");
  register_ok("c1", {spec("search", params)});
  register_ok("c2", {spec("search", params)});
  register_ok("c3", {spec("other", schema(R"({"type": "object", "required": ["x"]})"))});
  auto c1 = registry_->get_tool("client_c1_search");
  auto c2 = registry_->get_tool("client_c2_search");
  auto c3 = registry_->get_tool("client_c3_other");
  ASSERT_TRUE(c1 && c2 && c3);
  EXPECT_EQ(c1->schema, c2->schema);
  EXPECT_NE(c1->schema, c3->schema);
}

TEST_F(RegistryTest, RegisterPublishesRegisteredEvent) {
  register_ok("c1", {spec("a"), spec("b")});
  auto e = events_.wait_for("client-tool.registered");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->properties.at("clientID").as_string(), "c1");
  EXPECT_EQ(e->properties.at("toolIDs"), (json::value(json::array{"client_c1_a", "client_c1_b"})));
}

TEST_F(RegistryTest, RegisteringAnExistingIdReplacesIt) {
  register_ok("c1", {spec("t", schema(R"({"type": "object", "required": ["old"]})"), "old")});
  register_ok("c1", {spec("t", schema(R"({"type": "object", "required": ["new"]})"), "new")});
  auto tools = registry_->get_tools("c1");
  ASSERT_EQ(tools.size(), 1u);
  EXPECT_EQ(tools[0]->id, "client_c1_t");
  EXPECT_EQ(tools[0]->description, "new");

  // The new schema is the one that applies.
  Completion done(io_);
  auto old_input = registry_->execute(params("client_c1_t", {{"old", 1}}), done.handler());
  ASSERT_FALSE(old_input.has_value());
  EXPECT_EQ(old_input.error().code, ErrorCode::InvalidRequest);
  EXPECT_TRUE(registry_->execute(params("client_c1_t", {{"new", 1}}), done.handler()).has_value());
}

TEST_F(RegistryTest, RejectsBadToolNames) {
  const std::string bad[] = {"",         "has space", "dot.name",           "slash/name",
                             "\xc3\xbc", "a\nb",      std::string(129, 'a')};
  for (const auto& name : bad) {
    auto r = registry_->register_tools("c1", {spec(name)});
    ASSERT_FALSE(r.has_value()) << name;
    EXPECT_EQ(r.error().code, ErrorCode::InvalidRequest);
    EXPECT_TRUE(Contains(r.error().message, "tools[0].id")) << name;
  }
  EXPECT_TRUE(registry_->get_all_tools().empty());
  EXPECT_TRUE(events_.of_type("client-tool.registered").empty());

  // The longest allowed name, and every allowed character.
  register_ok("c1", {spec(std::string(128, 'a')), spec("Az09_-")});
  EXPECT_EQ(registry_->get_tools("c1").size(), 2u);
}

TEST_F(RegistryTest, RejectsBadClientIds) {
  for (const std::string& client :
       {std::string(), std::string("c 1"), std::string("c/1"), std::string(129, 'c')}) {
    auto r = registry_->register_tools(client, {spec("a")});
    ASSERT_FALSE(r.has_value()) << client;
    EXPECT_EQ(r.error().code, ErrorCode::InvalidRequest);
    EXPECT_TRUE(Contains(r.error().message, "clientID"));
  }
  EXPECT_TRUE(registry_->get_all_tools().empty());
}

TEST_F(RegistryTest, RejectsSchemasThatAreNotCompilableObjectSchemas) {
  const json::value bad[] = {
      json::value(json::array{}),
      json::value("object"),
      json::value(5),
      json::value(nullptr),
      schema(R"({"type": "string"})"),
      schema(R"({"type": ["object", "null"]})"),
      schema(R"({"type": "object", "properties": {"a": {"type": "notatype"}}})"),
      schema(R"({"type": "object", "required": "a"})"),
      schema(R"({"type": "object", "properties": {"a": {"minLength": "x"}}})"),
      schema(R"({"$ref": "http://example.com/schema.json"})"),
      // multipleOf must be > 0: valijson would divide by it (SIGFPE) when validating an integer.
      schema(R"({"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 0}}})"),
      schema(R"({"type": "object", "properties": {"n": {"anyOf": [{"multipleOf": -2}]}}})"),
      schema(R"({"multipleOf": 0.0})"),
  };
  for (const auto& parameters : bad) {
    auto r = registry_->register_tools("c1", {spec("ok"), spec("t", parameters)});
    ASSERT_FALSE(r.has_value()) << json::serialize(parameters);
    EXPECT_EQ(r.error().code, ErrorCode::InvalidRequest);
    EXPECT_TRUE(Contains(r.error().message, "tools[1].parameters")) << json::serialize(parameters);
  }
  EXPECT_TRUE(registry_->get_all_tools().empty());
}

TEST_F(RegistryTest, RegistrationIsAllOrNothing) {
  register_ok("c1", {spec("keep", json::object{{"type", "object"}}, "v1")});
  auto r = registry_->register_tools(
      "c1", {spec("keep", json::object{{"type", "object"}}, "v2"), spec("fresh"),
             spec("bad", schema(R"({"type": "string"})"))});
  ASSERT_FALSE(r.has_value());
  EXPECT_TRUE(Contains(r.error().message, "tools[2]"));

  auto tools = registry_->get_tools("c1");
  ASSERT_EQ(tools.size(), 1u);
  EXPECT_EQ(tools[0]->description, "v1");
  EXPECT_FALSE(registry_->get_tool("client_c1_fresh"));
  EXPECT_EQ(events_.of_type("client-tool.registered").size(), 1u);
}

// ---- unregistration ---------------------------------------------------------------------------

TEST_F(RegistryTest, UnregisterByFullIdOrByNameSkipsUnknownIds) {
  register_ok("c1", {spec("a"), spec("b"), spec("c")});
  auto removed = registry_->unregister(
      "c1", Strings{"client_c1_a", "b", "nope", "client_c1_nope", "client_c1_a"});
  EXPECT_EQ(removed, (Strings{"client_c1_a", "client_c1_b"}));
  EXPECT_EQ(tool_ids("c1"), (Strings{"client_c1_c"}));
  EXPECT_FALSE(registry_->get_tool("client_c1_a"));
  EXPECT_FALSE(registry_->get_tool("client_c1_b"));

  auto e = events_.wait_for("client-tool.unregistered");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->properties.at("clientID").as_string(), "c1");
  EXPECT_EQ(e->properties.at("toolIDs"), (json::value(json::array{"client_c1_a", "client_c1_b"})));
}

TEST_F(RegistryTest, UnregisterWithoutIdsRemovesAllOfTheClientsTools) {
  register_ok("c1", {spec("a"), spec("b")});
  register_ok("c2", {spec("a")});
  auto removed = registry_->unregister("c1", std::nullopt);
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, (Strings{"client_c1_a", "client_c1_b"}));
  EXPECT_TRUE(registry_->get_tools("c1").empty());
  EXPECT_FALSE(registry_->get_tool("client_c1_a"));
  EXPECT_EQ(tool_ids("c2"), (Strings{"client_c2_a"}));

  // Nothing left: nothing removed, no event.
  EXPECT_TRUE(registry_->unregister("c1", std::nullopt).empty());
  EXPECT_TRUE(registry_->unregister("never-registered", std::nullopt).empty());
  EXPECT_EQ(events_.of_type("client-tool.unregistered").size(), 1u);
}

TEST_F(RegistryTest, UnregisterCannotRemoveAnotherClientsTools) {
  register_ok("c1", {spec("a")});
  register_ok("c2", {spec("b")});
  EXPECT_TRUE(registry_->unregister("c2", Strings{"client_c1_a", "a"}).empty());
  EXPECT_TRUE(registry_->get_tool("client_c1_a"));
}

// ---- execute ----------------------------------------------------------------------------------

TEST_F(RegistryTest, ExecuteOfUnknownToolIsNotFound) {
  register_ok("c1", {spec("a")});
  Completion done(io_);
  const ExecuteParams cases[] = {params("client_c1_zzz"), params("a"),  // a name needs a client
                                 params("a", {}, std::nullopt, "c2"),
                                 params("client_c1_a", {}, std::nullopt, "c2")};
  for (const auto& p : cases) {
    auto r = registry_->execute(p, done.handler());
    ASSERT_FALSE(r.has_value()) << p.tool << " / " << p.client_id;
    EXPECT_EQ(r.error().code, ErrorCode::NotFound);
    EXPECT_TRUE(Contains(r.error().message, p.tool));
  }
  EXPECT_EQ(done.count(), 0u);
  EXPECT_EQ(registry_->pending_count(), 0u);
  EXPECT_TRUE(events_.of_type("client-tool.request").empty());
}

TEST_F(RegistryTest, ExecuteAcceptsFullIdOrNameWithClientId) {
  register_ok("c1", {spec("a")});
  Completion d1(io_), d2(io_), d3(io_);
  auto by_id = start(params("client_c1_a"), d1);
  auto by_name = start(params("a", {}, std::nullopt, "c1"), d2);
  auto by_both = start(params("client_c1_a", {}, std::nullopt, "c1"), d3);
  for (const auto& s : {by_id, by_name, by_both}) {
    EXPECT_EQ(s.tool_id, "client_c1_a");
    EXPECT_EQ(s.client_id, "c1");
    EXPECT_EQ(s.request_id.rfind("req_", 0), 0u) << s.request_id;
  }
  EXPECT_NE(by_id.request_id, by_name.request_id);
  EXPECT_EQ(registry_->pending_count(), 3u);
}

TEST_F(RegistryTest, InputThatFailsTheSchemaIsInvalidAndNamesThePath) {
  register_ok("c1", {spec("t", schema(R"({
    "type": "object",
    "properties": {
      "loc": {"type": "object", "properties": {"city": {"type": "string"}}},
      "n": {"type": "array", "items": {"type": "integer"}}
    }})"))});
  Completion done(io_);
  struct Case {
    json::object input;
    const char* path;
  };
  const Case cases[] = {{json::object{{"loc", json::object{{"city", 5}}}}, "/loc/city"},
                        {json::object{{"n", json::array{1, "x"}}}, "/n/1"}};
  for (const auto& c : cases) {
    auto r = registry_->execute(params("client_c1_t", c.input), done.handler());
    ASSERT_FALSE(r.has_value()) << c.path;
    EXPECT_EQ(r.error().code, ErrorCode::InvalidRequest);
    EXPECT_TRUE(Contains(r.error().message, std::string("schema at ") + c.path));
  }
  EXPECT_EQ(done.count(), 0u);
  EXPECT_EQ(registry_->pending_count(), 0u);

  // Valid input is accepted.
  start(params("client_c1_t", {{"loc", json::object{{"city", "Oslo"}}}, {"n", json::array{1, 2}}}),
        done);
}

TEST_F(RegistryTest, ASchemaWithAnUnusablePatternIsRefusedAtRegistrationNamingIt) {
  auto r = registry_->register_tools("c1", {spec("t", schema(R"({"type": "object",
                                  "properties": {"s": {"type": "string", "pattern": "("}}})"))});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::InvalidRequest);
  EXPECT_TRUE(Contains(r.error().message, "tools[0].parameters")) << r.error().message;
  EXPECT_TRUE(Contains(r.error().message, "/properties/s/pattern")) << r.error().message;
  EXPECT_TRUE(registry_->get_all_tools().empty());
}

TEST_F(RegistryTest, ExecuteDeliversTheRequestToTheAttachedClient) {
  register_ok("c1", {spec("t")});
  auto sink = std::make_shared<FakeSink>(io_);
  registry_->attach("c1", sink, 0, "sse");

  ExecuteParams p = params("client_c1_t", {{"q", "hello"}});
  p.session_id = "ses_1";
  p.message_id = "msg_1";
  p.call_id = "call_1";
  Completion done(io_);
  auto call = start(p, done);

  auto msg = sink->wait_for(ClientMessage::Kind::Request, call.request_id);
  ASSERT_NE(msg, nullptr);
  EXPECT_GT(msg->seq, 0u);
  json::value sent = json::parse(msg->request_json);
  EXPECT_EQ(sent, schema(R"({"type": "client-tool-request",
      "requestID": ")" + call.request_id +
                         R"(", "sessionID": "ses_1", "messageID": "msg_1",
      "callID": "call_1", "tool": "client_c1_t", "input": {"q": "hello"}})"));

  auto request_event = events_.wait_for("client-tool.request");
  ASSERT_NE(request_event, nullptr);
  EXPECT_EQ(request_event->properties.at("clientID").as_string(), "c1");
  EXPECT_EQ(request_event->properties.at("request"), sent);

  auto executing = events_.wait_for("client-tool.executing", EventLog::request(call.request_id));
  ASSERT_NE(executing, nullptr);
  EXPECT_EQ(json::value(executing->properties),
            schema(R"({"sessionID": "ses_1", "messageID": "msg_1", "callID": "call_1",
                       "tool": "client_c1_t", "clientID": "c1", "requestID": ")" +
                   call.request_id + R"("})"));
  EXPECT_EQ(done.count(), 0u);
}

TEST_F(RegistryTest, MessageAndCallIdsAreGeneratedWhenEmpty) {
  register_ok("c1", {spec("t")});
  auto sink = std::make_shared<FakeSink>(io_);
  registry_->attach("c1", sink, 0, "ws");
  Completion done(io_);
  auto call = start(params("client_c1_t"), done);
  auto msg = sink->wait_for(ClientMessage::Kind::Request, call.request_id);
  ASSERT_NE(msg, nullptr);
  json::value sent = json::parse(msg->request_json);
  EXPECT_EQ(std::string(sent.at("messageID").as_string()).rfind("msg_", 0), 0u);
  EXPECT_EQ(std::string(sent.at("callID").as_string()).rfind("call_", 0), 0u);
}

TEST_F(RegistryTest, RequestWaitsForTheClientToConnect) {
  register_ok("c1", {spec("t")});
  Completion done(io_);
  auto call = start(params("client_c1_t"), done);
  EXPECT_EQ(registry_->pending_count(), 1u);
  EXPECT_TRUE(events_.of_type("client-tool.executing").empty());  // nobody to execute it yet

  auto sink = std::make_shared<FakeSink>(io_);
  registry_->attach("c1", sink, 0, "sse");
  ASSERT_NE(sink->wait_for(ClientMessage::Kind::Request, call.request_id), nullptr);
  EXPECT_NE(events_.wait_for("client-tool.executing", EventLog::request(call.request_id)), nullptr);

  ASSERT_TRUE(registry_->submit_result(call.request_id, "c1", success("ok")).has_value());
  auto outcome = done.wait();
  ASSERT_TRUE(outcome.has_value());
  ASSERT_TRUE(outcome->has_value());
}

// ---- results ----------------------------------------------------------------------------------

TEST_F(RegistryTest, SubmitResultCompletesTheCall) {
  register_ok("c1", {spec("t")});
  auto sink = std::make_shared<FakeSink>(io_);
  registry_->attach("c1", sink, 0, "sse");
  Completion done(io_);
  auto call = start(params("client_c1_t", {}, 300ms), done);

  ToolResponse response = success("12:00");
  response.attachments = json::array{json::object{{"type", "file"}}};
  ASSERT_TRUE(registry_->submit_result(call.request_id, "c1", response).has_value());

  auto outcome = done.wait();
  ASSERT_TRUE(outcome.has_value());
  ASSERT_TRUE(outcome->has_value()) << outcome->error().message;
  EXPECT_TRUE((*outcome)->success);
  EXPECT_EQ((*outcome)->title, "done");
  EXPECT_EQ((*outcome)->output, "12:00");
  EXPECT_EQ((*outcome)->metadata, (json::object{{"k", 1}}));
  EXPECT_EQ((*outcome)->attachments.size(), 1u);
  EXPECT_EQ(registry_->pending_count(), 0u);

  auto completed = events_.wait_for("client-tool.completed", EventLog::request(call.request_id));
  ASSERT_NE(completed, nullptr);
  EXPECT_EQ(completed->properties.at("success"), json::value(true));
  EXPECT_EQ(completed->properties.at("tool").as_string(), "client_c1_t");
  EXPECT_EQ(completed->properties.at("clientID").as_string(), "c1");
  EXPECT_TRUE(sink->cancels().empty());  // an answered call is not cancelled

  // The call's deadline passes without a second ending.
  io_.run_for(400ms);
  EXPECT_EQ(done.count(), 1u);
  EXPECT_TRUE(events_.of_type("client-tool.failed").empty());
}

TEST_F(RegistryTest, ResultWithoutClientIdIsAccepted) {
  register_ok("c1", {spec("t")});
  Completion done(io_);
  auto call = start(params("client_c1_t"), done);
  ASSERT_TRUE(registry_->submit_result(call.request_id, std::nullopt, success("x")).has_value());
  auto outcome = done.wait();
  ASSERT_TRUE(outcome.has_value());
  ASSERT_TRUE(outcome->has_value());
  EXPECT_EQ((*outcome)->output, "x");
}

TEST_F(RegistryTest, ClientErrorEndsTheCallWithTheClientsMessage) {
  register_ok("c1", {spec("t")});
  Completion done(io_);
  auto call = start(params("client_c1_t"), done);
  ASSERT_TRUE(registry_->submit_result(call.request_id, "c1", failure("disk full")).has_value());
  auto outcome = done.wait();
  ASSERT_TRUE(outcome.has_value());
  ASSERT_TRUE(outcome->has_value());  // the client answered; its answer is an error
  EXPECT_FALSE((*outcome)->success);
  EXPECT_EQ((*outcome)->error, "disk full");
  auto failed = events_.wait_for("client-tool.failed", EventLog::request(call.request_id));
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->properties.at("error").as_string(), "disk full");
  EXPECT_TRUE(events_.of_type("client-tool.completed").empty());
}

TEST_F(RegistryTest, SecondResultIsConflictAndChangesNothing) {
  register_ok("c1", {spec("t")});
  Completion done(io_);
  auto call = start(params("client_c1_t"), done);
  ASSERT_TRUE(registry_->submit_result(call.request_id, "c1", success("first")).has_value());
  auto again = registry_->submit_result(call.request_id, "c1", success("second"));
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code, ErrorCode::Conflict);
  EXPECT_TRUE(Contains(again.error().message, call.request_id));

  auto outcome = done.wait();
  ASSERT_TRUE(outcome.has_value());
  EXPECT_EQ((*outcome)->output, "first");
  EXPECT_EQ(done.count(), 1u);
  EXPECT_EQ(events_.of_type("client-tool.completed").size(), 1u);
}

TEST_F(RegistryTest, ResultFromAnotherClientIsForbidden) {
  register_ok("c1", {spec("t")});
  Completion done(io_);
  auto call = start(params("client_c1_t"), done);
  auto forged = registry_->submit_result(call.request_id, "c2", success("forged"));
  ASSERT_FALSE(forged.has_value());
  EXPECT_EQ(forged.error().code, ErrorCode::Forbidden);
  EXPECT_EQ(done.count(), 0u);
  EXPECT_EQ(registry_->pending_count(), 1u);

  // The real client can still answer.
  ASSERT_TRUE(registry_->submit_result(call.request_id, "c1", success("real")).has_value());
  auto outcome = done.wait();
  ASSERT_TRUE(outcome.has_value());
  EXPECT_EQ((*outcome)->output, "real");
}

TEST_F(RegistryTest, ResultForUnknownRequestIsNotFound) {
  auto r = registry_->submit_result("req_never_issued", std::nullopt, success("x"));
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::NotFound);
  EXPECT_TRUE(Contains(r.error().message, "req_never_issued"));
}

// ---- the awaitable ----------------------------------------------------------------------------

// async_execute awaited by a coroutine on the registry's executor, as the session's client tool
// and the execute route await it; `give_up`, when given, is bound to its cancellation slot. The
// outcome is set once the coroutine has it.
using Awaited = std::shared_ptr<std::optional<ExecuteOutcome>>;
Awaited awaited(std::shared_ptr<ClientToolRegistry> registry, ExecuteParams p,
                boost::asio::io_context& io,
                std::shared_ptr<boost::asio::cancellation_signal> give_up = {}) {
  auto call = [registry, p = std::move(p),
               give_up]() mutable -> boost::asio::awaitable<ExecuteOutcome> {
    ProgressHandler none;
    if (!give_up)
      co_return co_await registry->async_execute(std::move(p), std::move(none),
                                                 boost::asio::use_awaitable);
    auto token = boost::asio::bind_cancellation_slot(give_up->slot(), boost::asio::use_awaitable);
    co_return co_await registry->async_execute(std::move(p), std::move(none), token);
  };
  auto outcome = std::make_shared<std::optional<ExecuteOutcome>>();
  boost::asio::co_spawn(io, std::move(call), [outcome](std::exception_ptr e, ExecuteOutcome o) {
    if (!e) *outcome = std::move(o);
  });
  return outcome;
}

// The requests `sink` was sent, once there is one (running the context up to kWait).
std::vector<MessagePtr> first_requests(boost::asio::io_context& io, const FakeSink& sink) {
  run_until(io, [&] { return !sink.requests().empty(); });
  return sink.requests();
}

TEST_F(RegistryTest, AnAwaitedCallEndsWithTheClientsAnswer) {
  register_ok("c1", {spec("t")});
  auto sink = std::make_shared<FakeSink>(io_);
  registry_->attach("c1", sink, 0, "sse");
  auto outcome = awaited(registry_, params("client_c1_t", json::object{{"x", 1}}), io_);
  auto requests = first_requests(io_, *sink);
  ASSERT_EQ(requests.size(), 1u);
  ASSERT_TRUE(registry_->submit_result(requests[0]->request_id, "c1", success("42")));
  ASSERT_TRUE(run_until(io_, [&] { return outcome->has_value(); }));
  auto ended = **outcome;
  ASSERT_TRUE(ended.has_value()) << ended.error().message;
  EXPECT_EQ(ended->output, "42");
  EXPECT_EQ(registry_->pending_count(), 0u);
}

TEST_F(RegistryTest, AnAwaitedCallThatCannotStartEndsWithWhy) {
  auto outcome = awaited(registry_, params("client_c1_nothing"), io_);
  ASSERT_TRUE(run_until(io_, [&] { return outcome->has_value(); }));
  auto ended = **outcome;
  ASSERT_FALSE(ended.has_value());
  EXPECT_EQ(ended.error().code, ErrorCode::NotFound);
  EXPECT_TRUE(Contains(ended.error().message, "client_c1_nothing"));
}

TEST_F(RegistryTest, TheCallersSlotCancelsTheCallAndTheClientHearsWhy) {
  register_ok("c1", {spec("t")});
  auto sink = std::make_shared<FakeSink>(io_);
  registry_->attach("c1", sink, 0, "sse");
  auto give_up = std::make_shared<boost::asio::cancellation_signal>();
  auto p = params("client_c1_t");
  p.cancel_reason = [] { return std::string("the user pressed stop"); };
  auto outcome = awaited(registry_, std::move(p), io_, give_up);
  auto requests = first_requests(io_, *sink);
  ASSERT_EQ(requests.size(), 1u);
  std::string request_id = requests[0]->request_id;
  // Emitted from a handler of the registry's executor, as the execute route and the session do.
  boost::asio::post(io_, [give_up] { give_up->emit(boost::asio::cancellation_type::terminal); });
  ASSERT_TRUE(run_until(io_, [&] { return outcome->has_value(); }));
  auto ended = **outcome;
  ASSERT_FALSE(ended.has_value());
  EXPECT_EQ(ended.error().code, ErrorCode::Unavailable);
  EXPECT_EQ(ended.error().message, "Cancelled: the user pressed stop");
  auto cancel = sink->wait_cancel(request_id);
  ASSERT_NE(cancel, nullptr);
  EXPECT_EQ(cancel->reason, "the user pressed stop");
  EXPECT_EQ(registry_->pending_count(), 0u);
  // The call is over: a late answer is refused.
  EXPECT_EQ(registry_->submit_result(request_id, "c1", success("late")).error().code,
            ErrorCode::Conflict);
}

// ---- timeouts ---------------------------------------------------------------------------------

TEST_F(RegistryTest, TimeoutEndsTheCallAndCancelsItOnTheClient) {
  register_ok("c1", {spec("t")});
  auto sink = std::make_shared<FakeSink>(io_);
  registry_->attach("c1", sink, 0, "sse");
  Completion done(io_);
  auto begin = Clock::now();
  auto call = start(params("client_c1_t", {}, 100ms), done);

  auto outcome = done.wait();
  ASSERT_TRUE(outcome.has_value());
  auto elapsed = Clock::now() - begin;
  ASSERT_FALSE(outcome->has_value());
  EXPECT_EQ(outcome->error().code, ErrorCode::Timeout);
  EXPECT_TRUE(Contains(outcome->error().message, "timed out after 100ms"));
  EXPECT_GE(elapsed, 100ms);

  auto cancel = sink->wait_cancel(call.request_id);
  ASSERT_NE(cancel, nullptr);
  EXPECT_EQ(cancel->reason, "timeout");

  auto failed = events_.wait_for("client-tool.failed", EventLog::request(call.request_id));
  ASSERT_NE(failed, nullptr);
  EXPECT_TRUE(Contains(failed->properties.at("error").as_string().c_str(), "timed out"));

  auto late = registry_->submit_result(call.request_id, "c1", success("late"));
  ASSERT_FALSE(late.has_value());
  EXPECT_EQ(late.error().code, ErrorCode::Conflict);
  EXPECT_EQ(done.count(), 1u);
  EXPECT_EQ(registry_->pending_count(), 0u);
}

TEST_F(RegistryTest, EarlierDeadlineAfterALaterOneStillFiresOnTime) {
  register_ok("c1", {spec("t")});
  Completion slow(io_), fast(io_);
  start(params("client_c1_t", {}, 10s), slow);
  auto begin = Clock::now();
  start(params("client_c1_t", {}, 100ms), fast);
  auto outcome = fast.wait(3s);
  ASSERT_TRUE(outcome.has_value()) << "the 100ms call did not time out within 3s";
  EXPECT_EQ(outcome->error().code, ErrorCode::Timeout);
  EXPECT_LT(Clock::now() - begin, 3s);
  EXPECT_EQ(slow.count(), 0u);
}

TEST_F(RegistryTest, DefaultTimeoutAppliesWhenTheCallerGivesNone) {
  RegistryOptions o;
  o.default_timeout = 100ms;
  restart(o);
  register_ok("c1", {spec("t")});
  Completion done(io_);
  start(params("client_c1_t"), done);
  auto outcome = done.wait();
  ASSERT_TRUE(outcome.has_value());
  ASSERT_FALSE(outcome->has_value());
  EXPECT_EQ(outcome->error().code, ErrorCode::Timeout);
  EXPECT_TRUE(Contains(outcome->error().message, "100ms"));
}

TEST_F(RegistryTest, InteractiveToolWaitsMaxTimeoutForAPerson) {
  RegistryOptions o;
  o.default_timeout = 50ms;
  o.max_timeout = 400ms;
  restart(o);
  ToolSpec dialog = spec("confirm");
  dialog.interactive = true;
  register_ok("c1", {spec("t"), dialog});
  Completion program(io_), person(io_);
  start(params("client_c1_t"), program);
  start(params("client_c1_confirm"), person);
  auto quick = program.wait();
  ASSERT_TRUE(quick.has_value());
  ASSERT_FALSE(quick->has_value());
  EXPECT_TRUE(Contains(quick->error().message, "50ms"));
  EXPECT_FALSE(person.wait(150ms).has_value());  // still waiting well past the default
  auto slow = person.wait();
  ASSERT_TRUE(slow.has_value());
  ASSERT_FALSE(slow->has_value());
  EXPECT_EQ(slow->error().code, ErrorCode::Timeout);
  EXPECT_TRUE(Contains(slow->error().message, "400ms"));
}

TEST_F(RegistryTest, CallersTimeoutIsCappedByMaxTimeout) {
  RegistryOptions o;
  o.max_timeout = 100ms;
  restart(o);
  register_ok("c1", {spec("t")});
  Completion done(io_);
  start(params("client_c1_t", {}, 60s), done);
  auto outcome = done.wait();
  ASSERT_TRUE(outcome.has_value());
  ASSERT_FALSE(outcome->has_value());
  EXPECT_EQ(outcome->error().code, ErrorCode::Timeout);
  EXPECT_TRUE(Contains(outcome->error().message, "100ms"));
}

TEST_F(RegistryTest, NonPositiveTimeoutIsInvalid) {
  register_ok("c1", {spec("t")});
  Completion done(io_);
  for (auto t : {0ms, -5ms}) {
    auto r = registry_->execute(params("client_c1_t", {}, t), done.handler());
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, ErrorCode::InvalidRequest);
  }
  EXPECT_EQ(done.count(), 0u);
  EXPECT_EQ(registry_->pending_count(), 0u);
}

TEST_F(RegistryTest, TimedOutCallIsNotDeliveredWhenTheClientConnectsLater) {
  register_ok("c1", {spec("t")});
  Completion done(io_);
  start(params("client_c1_t", {}, 50ms), done);
  ASSERT_TRUE(done.wait().has_value());
  auto sink = std::make_shared<FakeSink>(io_);
  registry_->attach("c1", sink, 0, "sse");
  EXPECT_TRUE(sink->messages().empty());
}

// ---- rate limit -------------------------------------------------------------------------------

TEST_F(RegistryTest, ExecutionsOverTheRateLimitAreRefused) {
  RegistryOptions o;
  o.rate_limit = 2;
  restart(o);
  register_ok("c1", {spec("t")});
  register_ok("c2", {spec("t")});
  Completion d1(io_), d2(io_), d3(io_), d4(io_);
  start(params("client_c1_t"), d1);
  start(params("client_c1_t"), d2);
  auto third = registry_->execute(params("client_c1_t"), d3.handler());
  ASSERT_FALSE(third.has_value());
  EXPECT_EQ(third.error().code, ErrorCode::RateLimited);
  EXPECT_TRUE(Contains(third.error().message, "c1"));
  EXPECT_EQ(d3.count(), 0u);
  EXPECT_EQ(registry_->pending_count(), 2u);

  start(params("client_c2_t"), d4);  // the limit is per client
}

TEST_F(RegistryTest, ARateLimitRefusalNamesItsKeyAndWhenTheWindowFreesASlot) {
  RegistryOptions o;
  o.rate_limit = 1;
  restart(o);
  register_ok("c1", {spec("t")});
  Completion d1(io_), d2(io_);
  start(params("client_c1_t"), d1);
  auto refused = registry_->execute(params("client_c1_t"), d2.handler());
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::RateLimited);
  EXPECT_TRUE(Contains(refused.error().message, "exceeded 1 executions per minute"));
  EXPECT_TRUE(Contains(refused.error().message, "clientTools.rateLimit"));
  // The window began a moment ago: its slot frees in just under a minute, rounded up.
  ASSERT_TRUE(refused.error().retry_after.has_value()) << refused.error().message;
  EXPECT_GE(*refused.error().retry_after, 50s);
  EXPECT_LE(*refused.error().retry_after, 60s);
}

// ---- pending-call limits ----------------------------------------------------------------------

ExecuteParams in_session(std::string tool, std::string session_id) {
  ExecuteParams p = params(std::move(tool));
  p.session_id = std::move(session_id);
  return p;
}

TEST_F(RegistryTest, CallsOverTheClientsPendingLimitAreRefusedUntilOneEnds) {
  RegistryOptions o;
  o.rate_limit = 0;
  o.max_pending_per_client = 2;
  restart(o);
  register_ok("c1", {spec("t")});
  register_ok("c2", {spec("t")});
  Completion d1(io_), d2(io_), d3(io_), d4(io_), d5(io_);
  auto first = start(params("client_c1_t"), d1);
  start(params("client_c1_t"), d2);
  auto third = registry_->execute(params("client_c1_t"), d3.handler());
  ASSERT_FALSE(third.has_value());
  EXPECT_EQ(third.error().code, ErrorCode::RateLimited);
  EXPECT_TRUE(Contains(third.error().message, "Client c1 already has 2 calls"));
  EXPECT_TRUE(Contains(third.error().message, "clientTools.maxPendingPerClient"));
  EXPECT_EQ(d3.count(), 0u) << "a refused call has no outcome to report";
  EXPECT_EQ(registry_->pending_count(), 2u);

  start(params("client_c2_t"), d4);  // the limit is per client

  ASSERT_TRUE(registry_->submit_result(first.request_id, "c1", success("ok")).has_value());
  start(params("client_c1_t"), d5);  // one ended: room for one more
  EXPECT_EQ(registry_->pending_count(), 3u);
}

TEST_F(RegistryTest, CallsOverTheSessionsPendingLimitAreRefusedWhateverTheirClient) {
  RegistryOptions o;
  o.rate_limit = 0;
  o.max_pending_per_session = 2;
  o.default_timeout = 100ms;
  restart(o);
  register_ok("c1", {spec("t")});
  register_ok("c2", {spec("t")});
  Completion d1(io_), d2(io_), d3(io_), d4(io_), d5(io_), d6(io_), d7(io_);
  auto first = start(in_session("client_c1_t", "ses_a"), d1);
  start(in_session("client_c2_t", "ses_a"), d2);
  auto third = registry_->execute(in_session("client_c1_t", "ses_a"), d3.handler());
  ASSERT_FALSE(third.has_value());
  EXPECT_EQ(third.error().code, ErrorCode::RateLimited);
  EXPECT_TRUE(Contains(third.error().message, "Session ses_a already has 2"));
  EXPECT_TRUE(Contains(third.error().message, "clientTools.maxPendingPerSession"));
  EXPECT_EQ(d3.count(), 0u);

  // Other sessions, and calls outside any session, are not affected.
  start(in_session("client_c1_t", "ses_b"), d4);
  start(params("client_c1_t"), d5);

  // Every way a call ends gives its place back: here a cancel, then the timeout of the rest.
  ASSERT_TRUE(registry_->cancel(first.request_id, "test"));
  start(in_session("client_c1_t", "ses_a"), d6);
  ASSERT_TRUE(d2.wait());
  ASSERT_TRUE(d6.wait());
  EXPECT_EQ(d6.wait()->error().code, ErrorCode::Timeout);
  auto fresh = registry_->execute(in_session("client_c2_t", "ses_a"), d7.handler());
  EXPECT_TRUE(fresh.has_value()) << fresh.error().message;
}

// When a waiting call ends cannot be known (a person may answer a dialog in an hour): a refusal
// for the pending-call limits names no time to retry (no Retry-After).
TEST_F(RegistryTest, APendingLimitRefusalNamesNoTimeToRetry) {
  RegistryOptions o;
  o.rate_limit = 0;
  o.max_pending_per_client = 1;
  o.max_pending_per_session = 1;
  restart(o);
  register_ok("c1", {spec("t")});
  register_ok("c2", {spec("t")});
  Completion d1(io_), d2(io_), d3(io_);
  start(in_session("client_c1_t", "ses_a"), d1);
  auto per_client = registry_->execute(params("client_c1_t"), d2.handler());
  auto per_session = registry_->execute(in_session("client_c2_t", "ses_a"), d3.handler());
  for (auto* refused : {&per_client, &per_session}) {
    ASSERT_FALSE(refused->has_value());
    EXPECT_EQ(refused->error().code, ErrorCode::RateLimited);
    EXPECT_FALSE(refused->error().retry_after.has_value()) << refused->error().message;
  }
}

TEST_F(RegistryTest, ACallRefusedForThePendingLimitDoesNotCountAgainstTheRateLimit) {
  RegistryOptions o;
  o.rate_limit = 2;
  o.max_pending_per_client = 1;
  restart(o);
  register_ok("c1", {spec("t")});
  Completion d1(io_), d2(io_), d3(io_), d4(io_);
  auto first = start(params("client_c1_t"), d1);
  auto refused = registry_->execute(params("client_c1_t"), d2.handler());
  ASSERT_FALSE(refused.has_value());
  EXPECT_TRUE(Contains(refused.error().message, "maxPendingPerClient"));
  ASSERT_TRUE(registry_->submit_result(first.request_id, "c1", success("ok")).has_value());
  auto second = start(params("client_c1_t"), d3);  // the second execution of the minute
  ASSERT_TRUE(registry_->submit_result(second.request_id, "c1", success("ok")).has_value());
  auto third = registry_->execute(params("client_c1_t"), d4.handler());
  ASSERT_FALSE(third.has_value());
  EXPECT_TRUE(Contains(third.error().message, "executions per minute")) << third.error().message;
}

// ---- unregister, disconnect, reconnect --------------------------------------------------------

TEST_F(RegistryTest, UnregisterFailsCallsWaitingOnTheRemovedTool) {
  register_ok("c1", {spec("a"), spec("b")});
  auto sink = std::make_shared<FakeSink>(io_);
  registry_->attach("c1", sink, 0, "sse");
  Completion on_a(io_), on_b(io_);
  auto call_a = start(params("client_c1_a"), on_a);
  auto call_b = start(params("client_c1_b"), on_b);

  registry_->unregister("c1", Strings{"a"});
  auto outcome = on_a.wait();
  ASSERT_TRUE(outcome.has_value());
  ASSERT_FALSE(outcome->has_value());
  EXPECT_EQ(outcome->error().code, ErrorCode::Unavailable);
  EXPECT_TRUE(Contains(outcome->error().message, "Tool client_c1_a was unregistered"));
  auto cancel = sink->wait_cancel(call_a.request_id);
  ASSERT_NE(cancel, nullptr);
  EXPECT_EQ(cancel->reason, "tool unregistered");

  EXPECT_EQ(on_b.count(), 0u);
  EXPECT_EQ(sink->cancels().size(), 1u);
  ASSERT_TRUE(registry_->submit_result(call_b.request_id, "c1", success("b")).has_value());
  ASSERT_TRUE(on_b.wait().has_value());
  EXPECT_EQ(on_a.count(), 1u);
}

TEST_F(RegistryTest, DetachWithoutGraceFailsCallsAndRemovesTools) {
  restart_with_grace(0ms);
  register_ok("c1", {spec("t")});
  register_ok("c2", {spec("t")});
  auto sink = std::make_shared<FakeSink>(io_);
  auto conn = registry_->attach("c1", sink, 0, "sse");
  EXPECT_TRUE(registry_->is_connected("c1"));
  Completion done(io_), other(io_);
  start(params("client_c1_t"), done);
  start(params("client_c2_t"), other);

  registry_->detach("c1", conn);
  auto outcome = done.wait();
  ASSERT_TRUE(outcome.has_value());
  ASSERT_FALSE(outcome->has_value());
  EXPECT_EQ(outcome->error().code, ErrorCode::Unavailable);
  EXPECT_EQ(outcome->error().message, "Client disconnected");
  EXPECT_FALSE(registry_->is_connected("c1"));
  EXPECT_TRUE(registry_->get_tools("c1").empty());
  EXPECT_FALSE(registry_->get_tool("client_c1_t"));
  EXPECT_NE(events_.wait_for("client-tool.disconnected"), nullptr);
  auto unregistered = events_.wait_for("client-tool.unregistered");
  ASSERT_NE(unregistered, nullptr);
  EXPECT_EQ(unregistered->properties.at("toolIDs"), json::value(json::array{"client_c1_t"}));

  // Other clients are untouched.
  EXPECT_EQ(other.count(), 0u);
  EXPECT_TRUE(registry_->get_tool("client_c2_t"));
}

TEST_F(RegistryTest, CleanupFailsCallsAndRemovesTools) {
  register_ok("c1", {spec("t")});
  Completion done(io_);
  start(params("client_c1_t"), done);
  registry_->cleanup("c1");
  auto outcome = done.wait();
  ASSERT_TRUE(outcome.has_value());
  ASSERT_FALSE(outcome->has_value());
  EXPECT_EQ(outcome->error().code, ErrorCode::Unavailable);
  EXPECT_EQ(outcome->error().message, "Client disconnected");
  EXPECT_TRUE(registry_->get_tools("c1").empty());
  EXPECT_EQ(registry_->pending_count(), 0u);
  registry_->cleanup("c1");  // again: nothing to do
  registry_->cleanup("never-seen");
  EXPECT_EQ(done.count(), 1u);
}

TEST_F(RegistryTest, ReconnectWithinGraceReplaysPendingRequestsAfterLastSeq) {
  restart_with_grace(5s);
  register_ok("c1", {spec("t")});
  auto first = std::make_shared<FakeSink>(io_);
  auto conn = registry_->attach("c1", first, 0, "sse");
  Completion d1(io_), d2(io_), d3(io_);
  auto c1 = start(params("client_c1_t"), d1);
  auto c2 = start(params("client_c1_t"), d2);
  auto c3 = start(params("client_c1_t"), d3);
  auto requests = first->requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_LT(requests[0]->seq, requests[1]->seq);
  EXPECT_LT(requests[1]->seq, requests[2]->seq);
  ASSERT_TRUE(registry_->submit_result(c1.request_id, "c1", success("1")).has_value());

  registry_->detach("c1", conn);
  EXPECT_FALSE(registry_->is_connected("c1"));
  EXPECT_EQ(tool_ids("c1"), (Strings{"client_c1_t"}));  // kept during the grace
  EXPECT_EQ(d2.count(), 0u);

  // The client saw everything up to c2's request: only c3 comes again.
  auto second = std::make_shared<FakeSink>(io_);
  conn = registry_->attach("c1", second, requests[1]->seq, "sse");
  auto replayed = second->requests();
  ASSERT_EQ(replayed.size(), 1u);
  EXPECT_EQ(replayed[0]->request_id, c3.request_id);
  EXPECT_EQ(replayed[0]->seq, requests[2]->seq);  // same event id as the first delivery

  // Without a last id, every still-pending request comes again, in order.
  registry_->detach("c1", conn);
  auto third = std::make_shared<FakeSink>(io_);
  registry_->attach("c1", third, 0, "ws");
  replayed = third->requests();
  ASSERT_EQ(replayed.size(), 2u);
  EXPECT_EQ(replayed[0]->request_id, c2.request_id);
  EXPECT_EQ(replayed[1]->request_id, c3.request_id);

  // A replay is not a second execution.
  EXPECT_EQ(events_.of_type("client-tool.executing", EventLog::request(c3.request_id)).size(), 1u);

  ASSERT_TRUE(registry_->submit_result(c2.request_id, "c1", success("2")).has_value());
  ASSERT_TRUE(registry_->submit_result(c3.request_id, "c1", success("3")).has_value());
  ASSERT_TRUE(d2.wait().has_value());
  ASSERT_TRUE(d3.wait().has_value());
  EXPECT_EQ((*d3.wait())->output, "3");
}

// A client that reconnects to a restarted server sends the Last-Event-ID of the old process: the
// new process must not number its requests below it, or they would never be replayed.
TEST_F(RegistryTest, EventIdsOfARestartedServerStayAboveTheOldOnes) {
  register_ok("c1", {spec("t")});
  auto before = std::make_shared<FakeSink>(io_);
  registry_->attach("c1", before, 0, "sse");
  Completion d1(io_);
  start(params("client_c1_t"), d1);
  ASSERT_EQ(before->requests().size(), 1u);
  std::uint64_t old_id = before->requests()[0]->seq;

  restart({});
  register_ok("c1", {spec("t")});
  Completion d2(io_);
  auto queued = start(params("client_c1_t"), d2);  // queued before the client is back
  auto after = std::make_shared<FakeSink>(io_);
  registry_->attach("c1", after, old_id, "sse");
  auto replayed = after->requests();
  ASSERT_EQ(replayed.size(), 1u) << "the new request was hidden behind the old Last-Event-ID";
  EXPECT_EQ(replayed[0]->request_id, queued.request_id);
  EXPECT_GT(replayed[0]->seq, old_id);
}

TEST_F(RegistryTest, ReconnectWithinGraceKeepsToolsAndCallsAfterTheGraceWouldHaveEnded) {
  restart_with_grace(150ms);
  register_ok("c1", {spec("t")});
  auto conn = registry_->attach("c1", std::make_shared<FakeSink>(io_), 0, "sse");
  Completion done(io_);
  auto call = start(params("client_c1_t", {}, 10s), done);
  registry_->detach("c1", conn);
  auto sink = std::make_shared<FakeSink>(io_);
  registry_->attach("c1", sink, 0, "sse");

  io_.run_for(400ms);  // well past the grace that was stopped
  EXPECT_TRUE(registry_->is_connected("c1"));
  EXPECT_EQ(tool_ids("c1"), (Strings{"client_c1_t"}));
  EXPECT_EQ(done.count(), 0u);
  EXPECT_EQ(registry_->pending_count(), 1u);
  ASSERT_TRUE(registry_->submit_result(call.request_id, "c1", success("ok")).has_value());
  ASSERT_TRUE(done.wait().has_value());
  ASSERT_TRUE(done.wait()->has_value());
}

TEST_F(RegistryTest, GraceExpiryFailsCallsAndRemovesTools) {
  restart_with_grace(100ms);
  register_ok("c1", {spec("t")});
  auto conn = registry_->attach("c1", std::make_shared<FakeSink>(io_), 0, "sse");
  Completion done(io_);
  start(params("client_c1_t", {}, 10s), done);
  auto begin = Clock::now();
  registry_->detach("c1", conn);
  EXPECT_EQ(done.count(), 0u);

  auto outcome = done.wait();
  ASSERT_TRUE(outcome.has_value()) << "the grace never expired";
  EXPECT_GE(Clock::now() - begin, 100ms);
  ASSERT_FALSE(outcome->has_value());
  EXPECT_EQ(outcome->error().code, ErrorCode::Unavailable);
  EXPECT_EQ(outcome->error().message, "Client disconnected");
  ASSERT_NE(events_.wait_for("client-tool.unregistered"), nullptr);
  EXPECT_TRUE(registry_->get_tools("c1").empty());
  EXPECT_FALSE(registry_->get_tool("client_c1_t"));
}

TEST_F(RegistryTest, SecondConnectionReplacesAndClosesTheFirst) {
  RegistryOptions o;
  o.reconnect_grace = 0ms;  // so that a detach that counted would visibly clean up
  restart(o);
  register_ok("c1", {spec("t")});
  auto first = std::make_shared<FakeSink>(io_);
  auto second = std::make_shared<FakeSink>(io_);
  auto conn1 = registry_->attach("c1", first, 0, "sse");
  Completion d1(io_);
  auto call1 = start(params("client_c1_t"), d1);
  ASSERT_EQ(first->requests().size(), 1u);

  auto conn2 = registry_->attach("c1", second, 0, "ws");
  EXPECT_NE(conn1, conn2);
  EXPECT_EQ(first->closes().size(), 1u);
  EXPECT_TRUE(second->closes().empty());
  // The pending request goes to the new connection.
  ASSERT_EQ(second->requests().size(), 1u);
  EXPECT_EQ(second->requests()[0]->request_id, call1.request_id);

  // New requests go only to the new connection.
  Completion d2(io_);
  auto call2 = start(params("client_c1_t"), d2);
  EXPECT_EQ(first->requests().size(), 1u);
  EXPECT_NE(second->wait_for(ClientMessage::Kind::Request, call2.request_id), nullptr);

  // The old connection closing afterwards does not disconnect the client.
  registry_->detach("c1", conn1);
  EXPECT_TRUE(registry_->is_connected("c1"));
  EXPECT_TRUE(registry_->get_tool("client_c1_t"));
  EXPECT_EQ(d1.count(), 0u);

  registry_->detach("c1", conn2);
  EXPECT_FALSE(registry_->is_connected("c1"));
  ASSERT_TRUE(d1.wait().has_value());
  ASSERT_TRUE(d2.wait().has_value());
}

// ---- progress ---------------------------------------------------------------------------------

TEST_F(RegistryTest, ProgressExtendsTheDeadlineAndReachesTheHandler) {
  register_ok("c1", {spec("t")});
  std::vector<Progress> seen;
  Completion done(io_);
  auto begin = Clock::now();
  auto call =
      start(params("client_c1_t", {}, 150ms), done, [&](const Progress& p) { seen.push_back(p); });

  for (int i = 1; i <= 4; ++i) {
    io_.run_until(begin + i * 100ms);
    Progress p;
    p.metadata = json::object{{"step", i}};
    p.title = "step " + std::to_string(i);
    auto r = registry_->report_progress(call.request_id, "c1", p);
    ASSERT_TRUE(r.has_value()) << "progress " << i << ": " << r.error().message;
  }
  EXPECT_GE(Clock::now() - begin, 400ms);
  EXPECT_EQ(done.count(), 0u);  // alive well past two of its 150ms timeouts

  ASSERT_TRUE(registry_->submit_result(call.request_id, "c1", success("finished")).has_value());
  auto outcome = done.wait();
  ASSERT_TRUE(outcome.has_value());
  ASSERT_TRUE(outcome->has_value()) << outcome->error().message;
  EXPECT_EQ((*outcome)->output, "finished");

  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[2].metadata.at("step").as_int64(), 3);
  EXPECT_EQ(seen[2].title, "step 3");
  auto progress = events_.of_type("client-tool.progress", EventLog::request(call.request_id));
  ASSERT_EQ(progress.size(), 4u);
  EXPECT_EQ(progress[0]->properties.at("metadata"), json::value(json::object{{"step", 1}}));
  EXPECT_EQ(progress[0]->properties.at("title").as_string(), "step 1");
  EXPECT_EQ(progress[0]->properties.at("clientID").as_string(), "c1");
}

TEST_F(RegistryTest, ProgressCannotExtendBeyondMaxTimeout) {
  RegistryOptions o;
  o.max_timeout = 300ms;
  restart(o);
  register_ok("c1", {spec("t")});
  Completion done(io_);
  auto begin = Clock::now();
  auto call = start(params("client_c1_t", {}, 150ms), done);
  // Keep reporting until the call ends; the hard cap must end it.
  while (done.count() == 0 && Clock::now() - begin < kWait) {
    (void)registry_->report_progress(call.request_id, "c1", Progress{});
    io_.run_for(30ms);
  }
  auto outcome = done.wait();
  ASSERT_TRUE(outcome.has_value()) << "progress kept the call alive past the cap";
  auto elapsed = Clock::now() - begin;
  ASSERT_FALSE(outcome->has_value());
  EXPECT_EQ(outcome->error().code, ErrorCode::Timeout);
  EXPECT_GE(elapsed, 300ms);
  EXPECT_LT(elapsed, 3s);
}

TEST_F(RegistryTest, ProgressErrorsMatchResultErrors) {
  register_ok("c1", {spec("t")});
  Completion done(io_);
  auto call = start(params("client_c1_t"), done);

  auto unknown = registry_->report_progress("req_unknown", std::nullopt, Progress{});
  ASSERT_FALSE(unknown.has_value());
  EXPECT_EQ(unknown.error().code, ErrorCode::NotFound);

  auto forged = registry_->report_progress(call.request_id, "c2", Progress{});
  ASSERT_FALSE(forged.has_value());
  EXPECT_EQ(forged.error().code, ErrorCode::Forbidden);

  EXPECT_TRUE(registry_->report_progress(call.request_id, std::nullopt, Progress{}).has_value());
  ASSERT_TRUE(registry_->submit_result(call.request_id, "c1", success("x")).has_value());

  auto ended = registry_->report_progress(call.request_id, "c1", Progress{});
  ASSERT_FALSE(ended.has_value());
  EXPECT_EQ(ended.error().code, ErrorCode::Conflict);
}

// ---- cancel and shutdown ----------------------------------------------------------------------

TEST_F(RegistryTest, CancelEndsTheCallAndTellsTheClient) {
  register_ok("c1", {spec("t")});
  auto sink = std::make_shared<FakeSink>(io_);
  registry_->attach("c1", sink, 0, "sse");
  Completion done(io_);
  auto call = start(params("client_c1_t", {}, 200ms), done);

  EXPECT_TRUE(registry_->cancel(call.request_id, "caller disconnected"));
  auto outcome = done.wait();
  ASSERT_TRUE(outcome.has_value());
  ASSERT_FALSE(outcome->has_value());
  EXPECT_EQ(outcome->error().code, ErrorCode::Unavailable);
  EXPECT_TRUE(Contains(outcome->error().message, "caller disconnected"));
  auto cancel = sink->wait_cancel(call.request_id);
  ASSERT_NE(cancel, nullptr);
  EXPECT_EQ(cancel->reason, "caller disconnected");
  EXPECT_NE(events_.wait_for("client-tool.failed", EventLog::request(call.request_id)), nullptr);

  EXPECT_FALSE(registry_->cancel(call.request_id, "again"));
  EXPECT_FALSE(registry_->cancel("req_unknown", "x"));
  auto late = registry_->submit_result(call.request_id, "c1", success("late"));
  ASSERT_FALSE(late.has_value());
  EXPECT_EQ(late.error().code, ErrorCode::Conflict);

  io_.run_for(300ms);  // past the call's own deadline
  EXPECT_EQ(done.count(), 1u);
  EXPECT_EQ(sink->cancels().size(), 1u);
}

TEST_F(RegistryTest, CancelledCallIsNotDeliveredWhenTheClientConnectsLater) {
  register_ok("c1", {spec("t")});
  Completion done(io_);
  auto call = start(params("client_c1_t"), done);
  ASSERT_TRUE(registry_->cancel(call.request_id, "stop"));
  auto sink = std::make_shared<FakeSink>(io_);
  registry_->attach("c1", sink, 0, "sse");
  EXPECT_TRUE(sink->messages().empty());
  EXPECT_TRUE(done.wait().has_value()) << "the caller heard the call end";
  EXPECT_EQ(done.count(), 1u);
}

TEST_F(RegistryTest, ShutdownFailsEveryPendingCallAndRefusesNewOnes) {
  register_ok("c1", {spec("t")});
  register_ok("c2", {spec("t")});
  auto sink = std::make_shared<FakeSink>(io_);
  registry_->attach("c1", sink, 0, "sse");
  Completion d1(io_), d2(io_);
  auto call1 = start(params("client_c1_t"), d1);
  start(params("client_c2_t"), d2);  // never delivered: c2 has no connection

  registry_->shutdown();
  for (Completion* d : {&d1, &d2}) {
    auto outcome = d->wait();
    ASSERT_TRUE(outcome.has_value());
    ASSERT_FALSE(outcome->has_value());
    EXPECT_EQ(outcome->error().code, ErrorCode::Unavailable);
    EXPECT_EQ(outcome->error().message, "Server shutting down");
  }
  auto cancel = sink->wait_cancel(call1.request_id);
  ASSERT_NE(cancel, nullptr);
  EXPECT_EQ(cancel->reason, "server shutting down");
  EXPECT_EQ(registry_->pending_count(), 0u);

  Completion later(io_);
  auto refused = registry_->execute(params("client_c1_t"), later.handler());
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::Unavailable);
  EXPECT_EQ(later.count(), 0u);
  EXPECT_EQ(d1.count(), 1u);
  EXPECT_EQ(d2.count(), 1u);
}

// ---- lifecycle as a whole ---------------------------------------------------------------------

TEST_F(RegistryTest, EveryWayACallEndsCallsTheHandlerExactlyOnce) {
  restart_with_grace(0ms);
  register_ok("c1", {spec("a"), spec("b")});
  register_ok("c2", {spec("t")});
  auto sink = std::make_shared<FakeSink>(io_);
  registry_->attach("c1", sink, 0, "sse");
  // Deadlines are checked every 250 ms: the other calls' deadline lies well past the tick that
  // times out the 50ms call.
  const auto t = 1000ms;

  Completion answered(io_), errored(io_), timed_out(io_), cancelled(io_), unregistered(io_),
      disconnected(io_);
  auto a1 = start(params("client_c1_a", {}, t), answered);
  auto a2 = start(params("client_c1_a", {}, t), errored);
  start(params("client_c1_a", {}, 50ms), timed_out);
  auto a4 = start(params("client_c1_a", {}, t), cancelled);
  start(params("client_c1_b", {}, t), unregistered);
  start(params("client_c2_t", {}, t), disconnected);

  ASSERT_TRUE(registry_->submit_result(a1.request_id, "c1", success("ok")).has_value());
  ASSERT_TRUE(registry_->submit_result(a2.request_id, "c1", failure("no")).has_value());
  ASSERT_TRUE(timed_out.wait().has_value());
  ASSERT_TRUE(registry_->cancel(a4.request_id, "abort"));
  registry_->unregister("c1", Strings{"b"});
  registry_->cleanup("c2");

  // Give every original deadline time to pass, then end whatever could still be pending.
  io_.run_for(t + 200ms);
  registry_->shutdown();
  for (Completion* d : {&answered, &errored, &timed_out, &cancelled, &unregistered, &disconnected})
    EXPECT_EQ(d->count(), 1u);
  EXPECT_EQ(registry_->pending_count(), 0u);
  EXPECT_EQ(events_.of_type("client-tool.completed").size(), 1u);
  EXPECT_EQ(events_.of_type("client-tool.failed").size(), 5u);
}

TEST_F(RegistryTest, EventsFollowACallFromRequestToCompletion) {
  register_ok("c1", {spec("t")});
  auto sink = std::make_shared<FakeSink>(io_);
  registry_->attach("c1", sink, 0, "ws");
  auto connected = events_.wait_for("client-tool.connected");
  ASSERT_NE(connected, nullptr);
  EXPECT_EQ(connected->properties.at("clientID").as_string(), "c1");
  EXPECT_EQ(connected->properties.at("transport").as_string(), "ws");

  ExecuteParams p = params("client_c1_t");
  p.session_id = "ses_9";
  Completion done(io_);
  auto call = start(p, done);
  ASSERT_TRUE(registry_->submit_result(call.request_id, "c1", success("ok")).has_value());
  ASSERT_TRUE(done.wait().has_value());

  // The order a subscriber sees for one call.
  for (const char* type : {"client-tool.request", "client-tool.executing", "client-tool.completed"})
    ASSERT_NE(events_.wait_for(type), nullptr) << type;
  std::vector<std::uint64_t> seqs;
  for (const char* type : {"client-tool.request", "client-tool.executing", "client-tool.completed"})
    seqs.push_back(events_.of_type(type).front()->seq);
  EXPECT_LT(seqs[0], seqs[1]);
  EXPECT_LT(seqs[1], seqs[2]);
  auto completed = events_.of_type("client-tool.completed").front();
  EXPECT_EQ(completed->properties.at("sessionID").as_string(), "ses_9");
  EXPECT_EQ(completed->properties.at("requestID").as_string(), call.request_id);
}

// ---- interleaving -----------------------------------------------------------------------------

// A client connection whose requests the test's "client" stream picks up and answers later.
class QueueSink : public ClientSink {
 public:
  explicit QueueSink(std::string client) : client_(std::move(client)) {}
  void deliver(std::shared_ptr<const ClientMessage> message) override {
    if (message->kind == ClientMessage::Kind::Request) requests_.push_back(message->request_id);
  }
  void close(const std::string&) override {}
  std::vector<std::string> take() { return std::exchange(requests_, {}); }
  const std::string& client() const { return client_; }

 private:
  std::string client_;
  std::vector<std::string> requests_;
};

// Executes, the client's answers (some twice, some from an intruder) and connection churn
// (attach, detach, re-register, unregister, cleanup), with deadlines and graces passing, all
// interleaved on the one executor: streams of steps, each step a handler of its own.
TEST_F(RegistryTest, InterleavedRegisterExecuteSubmitAndCleanup) {
  RegistryOptions o;
  o.reconnect_grace = 20ms;
  o.rate_limit = 0;
  o.remembered_results = 64;  // also exercises forgetting old request ids under load
  restart(o);

  constexpr int kClients = 4;
  constexpr int kExecutors = 3;
  constexpr int kCallsPerExecutor = 400;
  auto client_name = [](int i) { return "c" + std::to_string(i); };

  struct Call {
    std::shared_ptr<int> ended = std::make_shared<int>(0);
  };
  std::vector<Call> started;  // accepted executes
  std::vector<Call> refused;  // executes that returned an error
  int total_ended = 0;
  int answered = 0;  // ended by the client's result rather than by the server
  std::vector<std::shared_ptr<QueueSink>> sinks;

  for (int i = 0; i < kClients; ++i)
    register_ok(client_name(i), {spec("t"), spec("u")});

  bool stop = false;
  int executors_left = kExecutors;
  int others_left = 2;
  // Runs `step` on the registry's executor until it returns false, `pause` after each step.
  auto stream = [this](std::function<bool()> step, std::chrono::milliseconds pause) {
    auto next = std::make_shared<std::function<void()>>();
    *next = [this, step = std::move(step), pause, weak = std::weak_ptr(next)] {
      auto self = weak.lock();
      if (!self || !step()) return;
      if (pause.count() == 0) return boost::asio::post(io_, [self] { (*self)(); });
      auto timer = std::make_shared<boost::asio::steady_timer>(io_, pause);
      timer->async_wait([timer, self](boost::system::error_code) { (*self)(); });
    };
    boost::asio::post(io_, [next] { (*next)(); });
    return next;  // the caller keeps it: the stream ends when it is gone
  };
  std::vector<std::shared_ptr<std::function<void()>>> streams;

  // Executors.
  for (int e = 0; e < kExecutors; ++e) {
    auto rng = std::make_shared<std::mt19937>(static_cast<unsigned>(e));
    auto i = std::make_shared<int>(0);
    streams.push_back(stream(
        [&, rng, i] {
          if (*i == kCallsPerExecutor) {
            --executors_left;
            return false;
          }
          Call call;
          std::string client = client_name(static_cast<int>((*rng)() % kClients));
          // Long enough that some calls are answered before they time out.
          auto timeout = std::chrono::milliseconds(10 + (*rng)() % 300);
          auto r = registry_->execute(
              params((*rng)() % 2 ? "t" : "u", {{"i", *i}}, timeout, client),
              [ended = call.ended, &total_ended, &answered](ExecuteOutcome outcome) {
                ++*ended;
                if (outcome.has_value()) ++answered;
                ++total_ended;
              });
          (r ? started : refused).push_back(call);
          ++*i;
          return true;
        },
        0ms));
  }
  // The clients answering what they were sent, sometimes twice or as the wrong client.
  auto answer_rng = std::make_shared<std::mt19937>(99);
  streams.push_back(stream(
      [&, answer_rng] {
        if (stop) {
          --others_left;
          return false;
        }
        for (auto& sink : sinks) {
          for (auto& id : sink->take()) {
            switch ((*answer_rng)() % 4) {
              case 0:
                (void)registry_->report_progress(id, sink->client(), Progress{});
                break;
              case 1:
                (void)registry_->submit_result(id, "intruder", success("x"));
                break;
              default:
                break;
            }
            (void)registry_->submit_result(id, sink->client(), success("ok"));
            (void)registry_->submit_result(id, sink->client(), success("again"));
          }
        }
        return true;
      },
      0ms));
  // Connection churn.
  auto churn_rng = std::make_shared<std::mt19937>(7);
  std::vector<std::uint64_t> connections(kClients, 0);
  streams.push_back(stream(
      [&, churn_rng] {
        if (stop) {
          --others_left;
          return false;
        }
        int i = static_cast<int>((*churn_rng)() % kClients);
        std::string client = client_name(i);
        switch ((*churn_rng)() % 6) {
          case 0:
          case 1: {
            auto sink = std::make_shared<QueueSink>(client);
            sinks.push_back(sink);
            connections[i] = registry_->attach(client, sink, 0, "sse");
            break;
          }
          case 2:
            registry_->detach(client, connections[i]);
            break;
          case 3:
            (void)registry_->register_tools(client, {spec("t"), spec("u")});
            break;
          case 4:
            registry_->unregister(client, Strings{"u"});
            break;
          case 5:
            registry_->cleanup(client);
            (void)registry_->register_tools(client, {spec("t"), spec("u")});
            break;
        }
        (void)registry_->get_all_tools();
        (void)registry_->pending_count();
        return true;
      },
      1ms));

  ASSERT_TRUE(run_until(
      io_, [&] { return executors_left == 0; }, 60s));
  // The executors may finish before the client got to answer anything: give the client and the
  // churn a bounded while longer, so the answering path really is exercised.
  run_until(
      io_, [&] { return answered > 0; }, 3s);
  stop = true;
  ASSERT_TRUE(run_until(io_, [&] { return others_left == 0; }));
  streams.clear();

  // End whatever is still waiting, then every accepted call must have ended exactly once.
  registry_->shutdown();
  std::size_t expected = started.size();
  EXPECT_EQ(started.size() + refused.size(),
            static_cast<std::size_t>(kExecutors * kCallsPerExecutor));
  EXPECT_TRUE(run_until(io_, [&] { return static_cast<std::size_t>(total_ended) >= expected; }))
      << total_ended << " of " << expected << " calls ended";
  io_.run_for(100ms);  // nothing may end twice
  EXPECT_GT(started.size(), 0u);
  EXPECT_GT(answered, 0);  // the answering path really ran alongside the others
  int not_once = 0, refused_called = 0;
  for (auto& c : started)
    not_once += *c.ended != 1;
  for (auto& c : refused)
    refused_called += *c.ended != 0;
  EXPECT_EQ(not_once, 0);
  EXPECT_EQ(refused_called, 0);
  EXPECT_EQ(static_cast<std::size_t>(total_ended), started.size());
  EXPECT_EQ(registry_->pending_count(), 0u);
}

// ---- durable waits: what a restart keeps --------------------------------------------------------

// What a session stores of a call (ExecuteParams::on_waiting), told before the request reaches
// the client, and read back as it was written.
TEST_F(RegistryTest, AStartedCallTellsWhatToStoreBeforeItIsDelivered) {
  registry_->register_tools("c1",
                            {ToolSpec{"ask", "asks a person", json::object{{"type", "object"}},
                                      /*interactive=*/true}});
  auto sink = std::make_shared<FakeSink>(io_);
  registry_->attach("c1", sink, 0, "ws");
  ExecuteParams p = params("client_c1_ask", {}, 2000ms);
  p.session_id = "ses_1";
  p.message_id = "msg_1";
  p.call_id = "call_1";
  std::optional<WaitingCall> told;
  std::size_t delivered_before = 0;
  p.on_waiting = [&](const WaitingCall& w) {
    told = w;
    delivered_before = sink->messages().size();
  };
  Completion done(io_);
  auto before = now_ms();
  auto call = start(p, done);
  ASSERT_TRUE(told);
  EXPECT_EQ(delivered_before, 0u) << "the client had the request before it was stored";
  EXPECT_EQ(told->request_id, call.request_id);
  EXPECT_EQ(told->client_id, "c1");
  EXPECT_EQ(told->tool, "client_c1_ask");
  EXPECT_EQ(told->session_id, "ses_1");
  EXPECT_EQ(told->message_id, "msg_1");
  EXPECT_EQ(told->call_id, "call_1");
  EXPECT_TRUE(told->interactive);
  ASSERT_EQ(sink->requests().size(), 1u);
  EXPECT_EQ(told->seq, sink->requests()[0]->seq);
  EXPECT_EQ(told->timeout_ms, 2000);
  EXPECT_GE(told->deadline, before + 2000);
  EXPECT_LE(told->deadline, now_ms() + 2000);
  EXPECT_GE(told->hard_deadline, told->deadline);

  auto read = waiting_call_from_json(to_json(*told));
  ASSERT_TRUE(read) << read.error().message;
  EXPECT_EQ(to_json(*read), to_json(*told));
  json::object broken = to_json(*told);
  broken.erase("deadline");
  auto refused = waiting_call_from_json(broken);
  ASSERT_FALSE(refused);
  EXPECT_TRUE(Contains(refused.error().message, "deadline"));
}

// A stored call made pending again on a registry that never saw its client's tools: its client
// gets it (same request id, event id and input) when it connects, unless its Last-Event-ID says
// it has it; its answer ends it once; it times out at the stored deadline.
TEST_F(RegistryTest, AResumedCallIsPendingAgainUnderItsOwnIds) {
  WaitingCall stored{"req_stored",     "c1",  "client_c1_t", "ses_1", "msg_1",
                     "call_1",         false, 4242,          60000,   now_ms() + 60000,
                     now_ms() + 600000};
  ExecuteParams p;
  p.input = json::object{{"q", "again"}};
  p.resume = stored;
  Completion done(io_);
  auto call = start(p, done);
  EXPECT_EQ(call.request_id, "req_stored");
  EXPECT_EQ(registry_->pending_count(), 1u);

  auto had_it = std::make_shared<FakeSink>(io_);
  registry_->attach("c1", had_it, 4242, "sse");
  io_.poll();
  EXPECT_TRUE(had_it->requests().empty()) << "re-sent to a client that has it";
  auto fresh = std::make_shared<FakeSink>(io_);
  registry_->attach("c1", fresh, 0, "sse");
  auto msg = fresh->wait_for(ClientMessage::Kind::Request, "req_stored");
  ASSERT_NE(msg, nullptr);
  EXPECT_EQ(msg->seq, 4242u);
  EXPECT_EQ(json::parse(msg->request_json), schema(R"({"type": "client-tool-request",
      "requestID": "req_stored", "sessionID": "ses_1", "messageID": "msg_1", "callID": "call_1",
      "tool": "client_c1_t", "input": {"q": "again"}})"));

  ASSERT_TRUE(registry_->submit_result("req_stored", std::string("c1"), success("answered")));
  auto outcome = done.wait();
  ASSERT_TRUE(outcome && *outcome);
  EXPECT_EQ((*outcome)->output, "answered");
  auto again = registry_->submit_result("req_stored", std::string("c1"), success("twice"));
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::Conflict);
  // Made once: the same id cannot be resumed twice.
  ExecuteParams twice;
  twice.resume = stored;
  Completion refused(io_);
  auto r = registry_->execute(std::move(twice), refused.handler());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Conflict);

  // A new call's event id is above the restored one's.
  register_ok("c1", {spec("t")});
  Completion later(io_);
  start(params("client_c1_t"), later);
  auto requests = fresh->requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_GT(requests[1]->seq, 4242u);
}

// Stored deadlines are outside input: absurd ones are clamped to the registry's cap, not
// overflowed (UBSan would stop the test), and the call waits as any other.
TEST_F(RegistryTest, AResumedCallWithAbsurdDeadlinesWaitsWithinTheCap) {
  ExecuteParams p;
  p.resume = WaitingCall{"req_far", "c1", "client_c1_t", "ses_1",   "msg_1",  "call_1",
                         false,     9,    INT64_MAX,     INT64_MAX, INT64_MAX};
  Completion done(io_);
  start(p, done);
  EXPECT_EQ(registry_->pending_count(), 1u);
  EXPECT_TRUE(registry_->cancel("req_far", "test over"));
  ASSERT_TRUE(done.wait());
}

TEST_F(RegistryTest, AResumedCallWhoseDeadlinePassedTimesOut) {
  ExecuteParams p;
  p.resume = WaitingCall{"req_late", "c1", "client_c1_t", "ses_1",       "msg_1",        "call_1",
                         false,      7,    1500,          now_ms() - 10, now_ms() + 1000};
  Completion done(io_);
  start(p, done);
  auto outcome = done.wait();
  ASSERT_TRUE(outcome);
  ASSERT_FALSE(*outcome);
  EXPECT_EQ(outcome->error().code, ErrorCode::Timeout);
  EXPECT_TRUE(Contains(outcome->error().message, "timed out after 1500ms"));
}

// At a stop, a call that goes on after the restart ends here without a word to its client.
TEST_F(RegistryTest, AReleasedCallEndsWithoutACancelToItsClient) {
  register_ok("c1", {spec("t")});
  auto sink = std::make_shared<FakeSink>(io_);
  registry_->attach("c1", sink, 0, "ws");
  Completion kept(io_), other(io_);
  auto call = start(params("client_c1_t"), kept);
  auto call2 = start(params("client_c1_t"), other);
  EXPECT_TRUE(registry_->release(call.request_id));
  EXPECT_FALSE(registry_->release(call.request_id));
  auto outcome = kept.wait();
  ASSERT_TRUE(outcome && !*outcome);
  EXPECT_EQ(outcome->error().code, ErrorCode::Unavailable);
  registry_->shutdown();
  ASSERT_TRUE(other.wait());
  io_.poll();
  auto cancels = sink->cancels();
  ASSERT_EQ(cancels.size(), 1u) << "only the call that ends with the server is cancelled";
  EXPECT_EQ(cancels[0]->request_id, call2.request_id);
  // Watchers are not told that the released call failed: it goes on after the restart.
  EXPECT_TRUE(events_.of_type("client-tool.failed", EventLog::request(call.request_id)).empty());
  EXPECT_EQ(events_.of_type("client-tool.failed", EventLog::request(call2.request_id)).size(), 1u);
}

// ---- a cluster's other nodes (cluster::ClientRelay) ------------------------------------------

// What the mirror was told, in order ("registered c1 client_c1_t", "attached c1 0", ...).
class RecordingMirror : public RegistryMirror {
 public:
  void registered(const std::string& client_id,
                  const std::vector<std::shared_ptr<const ToolDefinition>>& tools) override {
    std::string line = "registered " + client_id;
    for (const auto& def : tools)
      line += " " + def->id;
    told.push_back(line);
  }
  void unregistered(const std::string& client_id, const std::vector<std::string>& ids) override {
    std::string line = "unregistered " + client_id;
    for (const auto& id : ids)
      line += " " + id;
    told.push_back(line);
  }
  void attached(const std::string& client_id, std::shared_ptr<ClientSink>, std::uint64_t last_seq,
                const std::string& transport) override {
    told.push_back("attached " + client_id + " " + std::to_string(last_seq) + " " + transport);
  }
  void detached(const std::string& client_id) override { told.push_back("detached " + client_id); }
  void forgotten(const std::string& client_id) override {
    told.push_back("forgotten " + client_id);
  }
  std::vector<std::string> told;
};

// Changes made here are told to the mirror and announced on the bus; what another node did
// (Origin::OtherNode) changes this registry as well, quietly: its node announced it. A chat's
// own tools (plain names) stay here.
TEST_F(RegistryTest, ChangesOfThisNodeAreMirroredAndThoseOfAnotherNodeAreQuiet) {
  restart_with_grace(5s);
  auto mirror = std::make_shared<RecordingMirror>();
  registry_->set_mirror(mirror);

  register_ok("c1", {spec("t")});
  auto here = std::make_shared<FakeSink>(io_);
  auto conn = registry_->attach("c1", here, 7, "sse");
  registry_->detach("c1", conn);
  registry_->unregister("c1", std::nullopt);
  ASSERT_TRUE(registry_->register_tools("chat", {spec("app")}, "ses_1", true));
  EXPECT_EQ(mirror->told, (Strings{"registered c1 client_c1_t", "attached c1 7 sse", "detached c1",
                                   "unregistered c1 client_c1_t"}));
  EXPECT_EQ(events_.of_type("client-tool.connected").size(), 1u);
  EXPECT_EQ(events_.of_type("client-tool.disconnected").size(), 1u);
  EXPECT_EQ(events_.of_type("client-tool.registered").size(), 2u);
  EXPECT_EQ(events_.of_type("client-tool.unregistered").size(), 1u);

  mirror->told.clear();
  ASSERT_TRUE(
      registry_->register_tools("c2", {spec("t"), spec("u")}, {}, false, Origin::OtherNode));
  auto elsewhere = std::make_shared<FakeSink>(io_);
  auto remote = registry_->attach("c2", elsewhere, 0, "ws", Origin::OtherNode);
  EXPECT_TRUE(registry_->is_connected("c2"));
  EXPECT_EQ(tool_ids("c2"), (Strings{"client_c2_t", "client_c2_u"}));
  // A call of this node goes to the client through the other node's connection.
  Completion done(io_);
  auto call = start(params("client_c2_t"), done);
  ASSERT_EQ(elsewhere->requests().size(), 1u);
  EXPECT_EQ(elsewhere->requests()[0]->request_id, call.request_id);
  EXPECT_EQ(events_.of_type("client-tool.request").size(), 1u);  // the call's, of this node
  registry_->unregister("c2", Strings{"u"}, Origin::OtherNode);
  EXPECT_EQ(tool_ids("c2"), (Strings{"client_c2_t"}));
  registry_->detach("c2", remote);
  EXPECT_TRUE(mirror->told.empty());
  EXPECT_EQ(events_.of_type("client-tool.connected").size(), 1u);
  EXPECT_EQ(events_.of_type("client-tool.disconnected").size(), 1u);
  EXPECT_EQ(events_.of_type("client-tool.registered").size(), 2u);
  EXPECT_EQ(events_.of_type("client-tool.unregistered").size(), 1u);
  EXPECT_EQ(done.count(), 0u);  // its grace runs, as for a client of this node
  EXPECT_EQ(tool_ids("c2"), (Strings{"client_c2_t"}));
}

// A call made while its client was away is delivered when the client comes back, whatever
// Last-Event-ID it sends: another node's clock may have numbered the events it saw since above it.
TEST_F(RegistryTest, ACallMadeWhileTheClientWasAwayIsDeliveredWhateverItsLastEventId) {
  register_ok("c1", {spec("t")});
  Completion done(io_);
  auto call = start(params("client_c1_t"), done);
  auto sink = std::make_shared<FakeSink>(io_);
  registry_->attach("c1", sink, std::numeric_limits<std::uint64_t>::max(), "sse");
  ASSERT_EQ(sink->requests().size(), 1u);
  EXPECT_EQ(sink->requests()[0]->request_id, call.request_id);
}

// The end of a client's reconnect grace is its home node's to tell: the other nodes forget it
// then (quietly: the home announced it), with its tools and the calls that waited for it.
TEST_F(RegistryTest, TheGraceOfAClientEndsOnItsHomeNodeAndIsToldToTheOthers) {
  restart_with_grace(100ms);
  auto mirror = std::make_shared<RecordingMirror>();
  registry_->set_mirror(mirror);
  register_ok("c1", {spec("t")});
  registry_->detach("c1", registry_->attach("c1", std::make_shared<FakeSink>(io_), 0, "ws"));
  ASSERT_TRUE(run_until(io_, [&] { return tool_ids("c1").empty(); }));
  EXPECT_EQ(mirror->told.back(), "forgotten c1");

  // Another node's client: forgotten when its home says so, without an event of this node's.
  ASSERT_TRUE(registry_->register_tools("c2", {spec("t")}, {}, false, Origin::OtherNode));
  Completion done(io_);
  start(params("client_c2_t"), done);
  auto unregistered = events_.of_type("client-tool.unregistered").size();
  registry_->cleanup("c2", Origin::OtherNode);
  ASSERT_TRUE(done.wait());
  EXPECT_FALSE(done.wait()->has_value());
  EXPECT_TRUE(tool_ids("c2").empty());
  EXPECT_EQ(events_.of_type("client-tool.unregistered").size(), unregistered);
  EXPECT_EQ(mirror->told.back(), "forgotten c1");  // nothing told back
}

// A call resumed after a restart and not delivered since goes to its client when another node
// announces the client's connection, whatever Last-Event-ID that node can give (it cannot know
// what this node's calls were); a connection of this node's own keeps the Last-Event-ID rule.
TEST_F(RegistryTest, AResumedCallGoesToAClientThatAnotherNodeAnnounces) {
  WaitingCall stored{"req_stored",     "c1",  "client_c1_t", "ses_1", "msg_1",
                     "call_1",         false, 4242,          60000,   now_ms() + 60000,
                     now_ms() + 600000};
  ExecuteParams p;
  p.resume = stored;
  Completion done(io_);
  start(p, done);
  auto here = std::make_shared<FakeSink>(io_);
  registry_->attach("c1", here, 5000, "sse");
  EXPECT_TRUE(here->requests().empty());
  auto elsewhere = std::make_shared<FakeSink>(io_);
  registry_->attach("c1", elsewhere, std::numeric_limits<std::uint64_t>::max(), "relay",
                    Origin::OtherNode);
  ASSERT_EQ(elsewhere->requests().size(), 1u);
  EXPECT_EQ(elsewhere->requests()[0]->request_id, "req_stored");
}

}  // namespace
}  // namespace sb::clienttool
