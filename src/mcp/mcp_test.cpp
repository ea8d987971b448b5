// The MCP client's pieces in-process: the config's decoding, JSON-RPC messages, tool ids and
// results as the model sees them, and the client's protocol against a peer scripted here (a
// Transport that records what the client sends and answers as a server of either era would).
// The real servers (server-everything, server-filesystem, a v2 SDK server, a faulty one) are
// in tests/blackbox/mcp_test.cpp.
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <deque>
#include <optional>

#include "mcp/client.hpp"
#include "mcp/config.hpp"
#include "mcp/elicitation.hpp"
#include "mcp/framing.hpp"
#include "mcp/jsonrpc.hpp"
#include "mcp/tool.hpp"

namespace sb::mcp {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

json::object obj(std::string_view text) {
  return parse_json(text)->get_object();
}

// ---- config -------------------------------------------------------------------------------

Environment fake_env() {
  return
      [](const std::string& var) { return var == "TOKEN" ? std::string("s3cret") : std::string(); };
}

TEST(McpConfig, LocalAndRemoteServersInOpenCodesShape) {
  auto servers = parse_servers(obj(R"({"mcp": {
      "fs": {"type": "local", "command": ["node", "fs.js", "{env:TOKEN}"],
             "environment": {"KEY": "k-{env:TOKEN}"}, "timeout": 5000},
      "api": {"type": "remote", "url": "https://example.com/mcp",
              "headers": {"Authorization": "Bearer {env:TOKEN}"}, "enabled": false}}})"),
                               fake_env());
  ASSERT_TRUE(servers) << servers.error().message;
  ASSERT_EQ(servers->size(), 2u);
  const auto& api = (*servers)[0];  // name order
  EXPECT_EQ(api.name, "api");
  EXPECT_EQ(api.type, ServerType::Remote);
  EXPECT_FALSE(api.enabled);
  ASSERT_EQ(api.headers.size(), 1u);
  EXPECT_EQ(api.headers[0].second, "Bearer s3cret");
  const auto& fs = (*servers)[1];
  EXPECT_EQ(fs.command, (std::vector<std::string>{"node", "fs.js", "s3cret"}));
  EXPECT_EQ(fs.environment[0].second, "k-s3cret");
  EXPECT_EQ(fs.timeout, 5000ms);
  EXPECT_TRUE(fs.enabled);
}

TEST(McpConfig, MistakesAreErrorsNamingTheKey) {
  struct Case {
    const char* config;
    const char* names;
  } cases[] = {
      {R"({"mcp": {"fs": {"type": "local", "command": ["x"], "foo": 1}}})", "mcp.fs.foo"},
      {R"({"mcp": {"fs": {"type": "local"}}})", "mcp.fs.command"},
      {R"({"mcp": {"fs": {"type": "local", "command": []}}})", "mcp.fs.command"},
      {R"({"mcp": {"fs": {"type": "local", "command": ["x", 3]}}})", "mcp.fs.command[1]"},
      {R"({"mcp": {"fs": {"type": "stdio", "command": ["x"]}}})", "mcp.fs.type"},
      {R"({"mcp": {"fs": {"command": ["x"]}}})", "mcp.fs.type"},
      {R"({"mcp": {"fs": {"type": "remote", "url": "ftp://x"}}})", "mcp.fs.url"},
      {R"({"mcp": {"fs": {"type": "remote", "url": "http://x", "command": ["x"]}}})",
       "mcp.fs.command"},
      {R"({"mcp": {"fs": {"type": "local", "command": ["x"], "timeout": 0}}})", "mcp.fs.timeout"},
      {R"({"mcp": {"fs": {"type": "local", "command": ["x"], "environment": {"A": 1}}}})",
       "mcp.fs.environment.A"},
      {R"({"mcp": {"a b": {"type": "local", "command": ["x"]}}})", "mcp.a b"},
      {R"({"mcp": {"fs": 3}})", "mcp.fs"},
  };
  for (const auto& c : cases) {
    auto r = parse_servers(obj(c.config), fake_env());
    ASSERT_FALSE(r) << c.config;
    EXPECT_EQ(r.error().code, ErrorCode::InvalidRequest);
    EXPECT_TRUE(r.error().message.starts_with(c.names)) << r.error().message;
  }
}

TEST(McpConfig, EnvReferencesExpandAndAnUnsetOneIsEmpty) {
  EXPECT_EQ(expand_env("a{env:TOKEN}b{env:NOPE}c{env:", fake_env()), "as3cretbc{env:");
}

// ---- JSON-RPC -----------------------------------------------------------------------------

TEST(McpJsonRpc, DecodesEachKindAndRefusesWhatIsNotAMessage) {
  auto req = parse_message(R"({"jsonrpc":"2.0","id":"r1","method":"roots/list"})");
  ASSERT_TRUE(req);
  EXPECT_EQ(req->kind, Message::Kind::Request);
  EXPECT_EQ(id_text(req->id), "r1");
  auto note = parse_message(
      R"({"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}})");
  ASSERT_TRUE(note);
  EXPECT_EQ(note->kind, Message::Kind::Notification);
  auto err = parse_message(R"({"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"nope"}})");
  ASSERT_TRUE(err);
  ASSERT_TRUE(err->error);
  EXPECT_EQ(err->error->code, -32601);
  for (const char* bad : {"[1,2]", "{\"id\":1,\"result\":{}}", R"({"jsonrpc":"2.0","id":1})",
                          R"({"jsonrpc":"2.0","id":{},"result":{}})",
                          R"({"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1}})",
                          R"({"jsonrpc":"2.0","method":"x","params":[1]})", "not json"}) {
    auto r = parse_message(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_TRUE(r.error().message.starts_with("not a JSON-RPC 2.0 message")) << r.error().message;
  }
}

TEST(McpJsonRpc, EncodesOneLineThatDecodesBack) {
  auto text = encode(request(7, "tools/call", obj(R"({"name":"a\nb"})")));
  EXPECT_EQ(text.find('\n'), std::string::npos);
  auto back = parse_message(text);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->method, "tools/call");
  EXPECT_EQ(back->params.at("name").as_string(), "a\nb");
}

TEST(McpFraming, LinesComeWholeWhateverTheSplitAndALongOneFailsTheStream) {
  LineFramer framer(16);
  std::vector<std::string> lines;
  ASSERT_TRUE(framer.feed("{\"a\":1}\r", lines));
  ASSERT_TRUE(framer.feed("\n\n  \n{\"b\"", lines));
  ASSERT_TRUE(framer.feed(":2}\n{\"c", lines));
  EXPECT_EQ(lines, (std::vector<std::string>{"{\"a\":1}", "{\"b\":2}"}));
  auto failed = framer.feed("xxxxxxxxxxxxxxxxxxxxxxx\n", lines);
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().code, ErrorCode::TooLarge);
  EXPECT_EQ(failed.error().message, "it sent a message over 16 bytes");
  EXPECT_FALSE(framer.feed("{}\n", lines));  // sticky
  EXPECT_EQ(lines.size(), 2u);
}

// ---- tools --------------------------------------------------------------------------------

TEST(McpTool, IdsReplaceWhatToolNamesCannotHold) {
  EXPECT_EQ(tool_id("fs", "read_file"), "fs_read_file");
  EXPECT_EQ(tool_id("my.server", "get weather/now"), "my_server_get_weather_now");
  EXPECT_EQ(tool_id("everything", "get-sum"), "everything_get-sum");
}

TEST(McpTool, ResultsAsTheModelSeesThem) {
  auto r = to_tool_result(obj(R"({"content": [
      {"type": "text", "text": "one"},
      {"type": "image", "data": "AAAA", "mimeType": "image/png"},
      {"type": "audio", "data": "BBBB", "mimeType": "audio/wav"},
      {"type": "resource_link", "uri": "file:///a.txt", "name": "a"},
      {"type": "resource", "resource": {"uri": "file:///b.txt", "text": "bee"}},
      {"type": "text", "text": "two"}]})"),
                          "srv");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->output, "one\nResource link: a (file:///a.txt)\nResource file:///b.txt:\nbee\ntwo");
  ASSERT_EQ(r->attachments.size(), 2u);
  EXPECT_EQ(r->attachments[0].at("url").as_string(), "data:image/png;base64,AAAA");
  EXPECT_EQ(r->attachments[1].at("mime").as_string(), "audio/wav");

  auto structured = to_tool_result(obj(R"({"content": [], "structuredContent": {"n": 42}})"), "s");
  ASSERT_TRUE(structured);
  EXPECT_EQ(structured->output, R"({"n":42})");

  auto failed = to_tool_result(
      obj(R"({"isError": true, "content": [{"type": "text", "text": "it broke"}]})"), "s");
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().message, "it broke");
  auto silent = to_tool_result(obj(R"({"isError": true})"), "s");
  ASSERT_FALSE(silent);
  EXPECT_EQ(silent.error().message, "the MCP server s reported an error");
}

TEST(McpTool, AnUnusableInputSchemaIsRefusedNamingTheTool) {
  ToolInfo info;
  info.name = "bad";
  info.input_schema = obj(R"({"type": "object", "properties": {"a": {"pattern": "(a)\\1"}}})");
  auto made = make_tool("srv", info, {});
  ASSERT_FALSE(made);
  EXPECT_NE(made.error().message.find("srv's tool bad"), std::string::npos);
}

// ---- elicitation as questions ---------------------------------------------------------------

TEST(McpElicitation, EachPropertyIsAQuestionAndAnswersComeBackTyped) {
  auto params = obj(R"({"message": "About you", "requestedSchema": {"type": "object",
      "properties": {
        "name": {"type": "string", "title": "Name"},
        "age": {"type": "integer", "description": "Your age in years"},
        "ratio": {"type": "number"},
        "subscribe": {"type": "boolean"},
        "colour": {"type": "string", "enum": ["red", "blue"]},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}}},
      "required": ["name", "colour"]}})");
  auto questions = elicitation_questions(params);
  ASSERT_TRUE(questions) << questions.error().message;
  ASSERT_EQ(questions->size(), 6u);
  EXPECT_EQ(questions->at(0).at("question").as_string(), "About you\n\nName");
  EXPECT_EQ(questions->at(1).at("question").as_string(), "Your age in years");
  EXPECT_EQ(questions->at(3).at("options").as_array().size(), 2u);  // yes, no
  EXPECT_EQ(questions->at(4).at("options").at(1).at("label").as_string(), "blue");
  EXPECT_TRUE(questions->at(5).at("multiple").as_bool());

  auto content =
      elicitation_content(params, {{"Ada"}, {"36"}, {"0.5"}, {"yes"}, {"blue"}, {"a", "c"}});
  ASSERT_TRUE(content) << content.error().message;
  EXPECT_EQ(
      json::serialize(*content),
      R"({"name":"Ada","age":36,"ratio":5E-1,"subscribe":true,"colour":"blue","tags":["a","c"]})");
  // An empty answer to an optional property leaves it out.
  auto partial = elicitation_content(params, {{"Ada"}, {}, {""}, {}, {"red"}, {}});
  ASSERT_TRUE(partial);
  EXPECT_EQ(json::serialize(*partial), R"({"name":"Ada","colour":"red"})");
}

TEST(McpElicitation, AnswersThatDoNotFitAreRefusedNamingTheProperty) {
  auto params = obj(R"({"requestedSchema": {"type": "object", "properties": {
      "age": {"type": "integer"}, "colour": {"type": "string", "enum": ["red"]}},
      "required": ["colour"]}})");
  auto not_number = elicitation_content(params, {{"old"}, {"red"}});
  ASSERT_FALSE(not_number);
  EXPECT_NE(not_number.error().message.find("\"old\" to age is not a whole number"),
            std::string::npos);
  EXPECT_FALSE(elicitation_content(params, {{"3"}, {"green"}}));  // not in the enum
  EXPECT_FALSE(elicitation_content(params, {{"3"}, {}}));         // required, missing
  EXPECT_FALSE(elicitation_questions(obj(R"({"requestedSchema": {"type": "object",
      "properties": {"nested": {"type": "object"}}}})")));
}

// ---- the client against a scripted peer -----------------------------------------------------

// Records what the client sends; the test answers through deliver() and close_from_server().
class ScriptedTransport : public Transport {
 public:
  struct Shared {
    std::vector<Message> sent;
    Events events;
    bool closed_by_client = false;
    std::function<void(const Message&)> on_send;  // answers as the server would
  };
  explicit ScriptedTransport(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}
  Result<void> start(Events events) override {
    shared_->events = std::move(events);
    return {};
  }
  void send(const Message& m) override {
    shared_->sent.push_back(m);
    if (shared_->on_send) shared_->on_send(m);
  }
  void close() override { shared_->closed_by_client = true; }

 private:
  std::shared_ptr<Shared> shared_;
};

class McpClientTest : public ::testing::Test {
 protected:
  std::shared_ptr<Client> make(ClientOptions options = {}) {
    options.name = "srv";
    options.root = "/work/project";
    Client::Callbacks callbacks;
    callbacks.tools_changed = [this] { ++tools_changed_; };
    callbacks.closed = [this](const std::string& why) { closed_ = why; };
    callbacks.input = input_;
    return Client::create(io_.get_executor(), std::make_unique<ScriptedTransport>(peer_),
                          std::move(options), std::move(callbacks));
  }

  // Answers `m` from the server's side, later (as a real peer would).
  void answer(const Message& m, json::object result) {
    asio::post(io_, [this, id = m.id, result = std::move(result)] {
      if (peer_->events.message) peer_->events.message(response(id, result));
    });
  }
  void fail(const Message& m, std::int64_t code, std::string text) {
    asio::post(io_, [this, id = m.id, code, text] {
      if (peer_->events.message) peer_->events.message(error_response(id, code, text));
    });
  }
  void push(Message m) {
    asio::post(io_, [this, m = std::move(m)] {
      if (peer_->events.message) peer_->events.message(m);
    });
  }

  // Runs `co` to its end on the io_context; what it returned.
  template <typename T>
  T run(asio::awaitable<T> co) {
    std::optional<T> out;
    asio::co_spawn(io_, std::move(co), [&](std::exception_ptr e, T value) {
      if (e) std::rethrow_exception(e);
      out = std::move(value);
    });
    io_.restart();
    io_.run_for(10s);
    EXPECT_TRUE(out) << "did not finish";
    return std::move(*out);
  }

  std::vector<std::string> methods() const {
    std::vector<std::string> out;
    for (const auto& m : peer_->sent)
      out.push_back(m.method);
    return out;
  }

  // A legacy server: no server/discover, initialize answered with `version`.
  void legacy_peer(std::string version = "2025-06-18") {
    peer_->on_send = [this, version](const Message& m) {
      if (m.method == "server/discover") fail(m, rpc_code::kMethodNotFound, "Method not found");
      if (m.method == "initialize")
        answer(m, json::object{{"protocolVersion", version},
                               {"capabilities", obj(R"({"tools": {"listChanged": true}})")},
                               {"serverInfo", obj(R"({"name": "old", "version": "1"})")}});
    };
  }

  asio::io_context io_;
  std::shared_ptr<ScriptedTransport::Shared> peer_ = std::make_shared<ScriptedTransport::Shared>();
  int tools_changed_ = 0;
  std::optional<std::string> closed_;
  InputHandler input_;  // what a person would answer an elicitation with
};

TEST_F(McpClientTest, ALegacyServerIsProbedThenInitialized) {
  legacy_peer();
  auto client = make();
  auto connected = run(client->connect());
  ASSERT_TRUE(connected) << connected.error().message;
  EXPECT_FALSE(client->modern());
  EXPECT_EQ(client->protocol_version(), "2025-06-18");
  EXPECT_EQ(client->server_name(), "old");
  EXPECT_EQ(methods(), (std::vector<std::string>{"server/discover", "initialize",
                                                 "notifications/initialized"}));
  const auto& init = peer_->sent[1].params;
  EXPECT_EQ(init.at("protocolVersion").as_string(), "2025-11-25");
  EXPECT_EQ(init.at("clientInfo").at("name").as_string(), "switchboard");
  // A legacy request carries no modern _meta.
  EXPECT_FALSE(init.contains("_meta"));
}

TEST_F(McpClientTest, AServerThatNeverAnswersTheProbeIsTakenForLegacyAfterItsTimeout) {
  peer_->on_send = [this](const Message& m) {
    if (m.method == "initialize")
      answer(m, json::object{{"protocolVersion", "2025-11-25"}, {"capabilities", json::object{}}});
  };
  ClientOptions o;
  o.probe_timeout = 50ms;
  auto client = make(o);
  auto connected = run(client->connect());
  ASSERT_TRUE(connected) << connected.error().message;
  EXPECT_EQ(client->protocol_version(), "2025-11-25");
  // The probe is not cancelled with a notification: a legacy server knows nothing of it.
  EXPECT_EQ(methods(), (std::vector<std::string>{"server/discover", "initialize",
                                                 "notifications/initialized"}));
}

TEST_F(McpClientTest, AnUnknownLegacyVersionIsRefusedNamingIt) {
  legacy_peer("1999-01-01");
  auto client = make();
  auto connected = run(client->connect());
  ASSERT_FALSE(connected);
  EXPECT_NE(connected.error().message.find("\"1999-01-01\""), std::string::npos);
  EXPECT_TRUE(peer_->closed_by_client);
}

TEST_F(McpClientTest, AModernServerSkipsTheHandshakeAndEveryRequestCarriesMeta) {
  peer_->on_send = [this](const Message& m) {
    if (m.method == "server/discover")
      answer(m, obj(R"({"resultType": "complete", "supportedVersions": ["2026-07-28"],
                        "capabilities": {"tools": {"listChanged": true}},
                        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "new"}}})"));
    if (m.method == "tools/list")
      answer(m, obj(R"({"resultType": "complete", "tools": [
                         {"name": "t", "inputSchema": {"type": "object"}}]})"));
  };
  auto client = make();
  ASSERT_TRUE(run(client->connect()));
  EXPECT_TRUE(client->modern());
  EXPECT_EQ(client->server_name(), "new");
  auto tools = run(client->list_tools());
  ASSERT_TRUE(tools);
  ASSERT_EQ(tools->size(), 1u);
  // discover, then the subscription for list changes (listChanged), then tools/list.
  EXPECT_EQ(methods(),
            (std::vector<std::string>{"server/discover", "subscriptions/listen", "tools/list"}));
  for (const auto& m : peer_->sent) {
    const auto& meta = m.params.at("_meta").as_object();
    EXPECT_EQ(meta.at("io.modelcontextprotocol/protocolVersion").as_string(), "2026-07-28");
    EXPECT_TRUE(meta.at("io.modelcontextprotocol/clientCapabilities").is_object());
  }
  EXPECT_TRUE(peer_->sent[1].params.at("notifications").at("toolsListChanged").as_bool());

  // A change notice counts only on the subscription's stream.
  auto sub = peer_->sent[1].id;
  Message other = notification("notifications/tools/list_changed");
  push(other);
  Message changed = notification("notifications/tools/list_changed");
  changed.params["_meta"] = json::object{{"io.modelcontextprotocol/subscriptionId", sub}};
  push(changed);
  io_.restart();
  io_.poll();
  EXPECT_EQ(tools_changed_, 1);
}

TEST_F(McpClientTest, ToolsListFollowsEveryPage) {
  legacy_peer();
  peer_->on_send = [this, legacy = peer_->on_send](const Message& m) {
    legacy(m);
    if (m.method != "tools/list") return;
    auto cursor = m.params.if_contains("cursor");
    if (!cursor)
      answer(m, obj(R"({"tools": [{"name": "a", "inputSchema": {"type": "object"}},
                                  {"name": "", "inputSchema": {}}], "nextCursor": "p2"})"));
    else
      answer(m, obj(R"({"tools": [{"name": "b", "inputSchema": {"type": "object"}},
                                  {"name": "no-schema"}]})"));
  };
  auto client = make();
  ASSERT_TRUE(run(client->connect()));
  auto tools = run(client->list_tools());
  ASSERT_TRUE(tools);
  ASSERT_EQ(tools->size(), 2u);  // the nameless and the schemaless are left out
  EXPECT_EQ((*tools)[0].name, "a");
  EXPECT_EQ((*tools)[1].name, "b");
}

TEST_F(McpClientTest, ProgressReachesTheCallAndPushesItsDeadlineBack) {
  legacy_peer();
  std::vector<double> seen;
  // Four reports 40 ms apart against an 80 ms timeout: 160 ms in all, answered only if each
  // report moved the deadline.
  asio::steady_timer timer(io_);
  std::function<void(const Message&, int)> step = [&](const Message& m, int n) {
    if (n == 4) {
      answer(m, obj(R"({"content": [{"type": "text", "text": "done"}]})"));
      return;
    }
    timer.expires_after(40ms);
    timer.async_wait([&, m, n](boost::system::error_code) {
      push(notification("notifications/progress",
                        json::object{{"progressToken", m.params.at("_meta").at("progressToken")},
                                     {"progress", n + 1},
                                     {"total", 4}}));
      step(m, n + 1);
    });
  };
  peer_->on_send = [&, legacy = peer_->on_send](const Message& m) {
    legacy(m);
    if (m.method == "tools/call") step(m, 0);
  };
  ClientOptions o;
  o.timeout = 80ms;
  auto client = make(o);
  ASSERT_TRUE(run(client->connect()));
  auto result = run(client->call_tool("t", {}, "call_1",
                                      [&](const Progress& p) { seen.push_back(p.progress); }, {}));
  ASSERT_TRUE(result) << result.error().message;
  EXPECT_EQ(seen, (std::vector<double>{1, 2, 3, 4}));
}

TEST_F(McpClientTest, ATimeoutEndsTheCallAndTellsTheServer) {
  legacy_peer();
  ClientOptions o;
  o.timeout = 50ms;
  auto client = make(o);
  ASSERT_TRUE(run(client->connect()));
  auto result = run(client->call_tool("hang", {}, "call_1", {}, {}));
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, ErrorCode::Timeout);
  EXPECT_EQ(result.error().message,
            "MCP server srv did not answer tools/call within 50 ms (its `timeout`)");
  const auto& cancel = peer_->sent.back();
  EXPECT_EQ(cancel.method, "notifications/cancelled");
  EXPECT_EQ(cancel.params.at("requestId"), peer_->sent[peer_->sent.size() - 2].id);
  // A late answer to it is ignored.
  answer(peer_->sent[peer_->sent.size() - 2], json::object{});
  io_.restart();
  io_.poll();
  EXPECT_TRUE(client->connected());
}

TEST_F(McpClientTest, AnAbortCancelsTheCallAtOnce) {
  legacy_peer();
  auto client = make();
  ASSERT_TRUE(run(client->connect()));
  auto abort = AbortSignal::create();
  asio::steady_timer later(io_, 20ms);
  later.async_wait([&](boost::system::error_code) { abort->abort("user stop"); });
  auto result = run(client->call_tool("hang", {}, "call_1", {}, abort));
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().message, "aborted");
  EXPECT_EQ(peer_->sent.back().method, "notifications/cancelled");
  EXPECT_EQ(client->pending_requests(), 0u);
}

TEST_F(McpClientTest, WhenTheChannelClosesWaitingCallsEndNamingTheServer) {
  legacy_peer();
  peer_->on_send = [this, legacy = peer_->on_send](const Message& m) {
    legacy(m);
    if (m.method == "tools/call")
      asio::post(io_, [this] { peer_->events.closed("it exited with code 3"); });
  };
  auto client = make();
  ASSERT_TRUE(run(client->connect()));
  auto result = run(client->call_tool("crash", {}, "call_1", {}, {}));
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().message, "MCP server srv stopped: it exited with code 3");
  EXPECT_EQ(closed_, "it exited with code 3");
  EXPECT_FALSE(client->connected());
}

TEST_F(McpClientTest, AnswersServerRequestsForPingAndRootsAndRefusesSampling) {
  legacy_peer();
  auto client = make();
  ASSERT_TRUE(run(client->connect()));
  Message ping;
  ping.kind = Message::Kind::Request;
  ping.id = "p1";
  ping.method = "ping";
  push(ping);
  Message roots = ping;
  roots.id = 0;  // may collide with our own ids: it is theirs
  roots.method = "roots/list";
  push(roots);
  Message sampling = ping;
  sampling.id = "s1";
  sampling.method = "sampling/createMessage";
  push(sampling);
  io_.restart();
  io_.run_for(200ms);
  std::map<std::string, const Message*> answers;
  for (const auto& m : peer_->sent)
    if (m.kind == Message::Kind::Response) answers[id_text(m.id)] = &m;
  ASSERT_EQ(answers.size(), 3u);
  EXPECT_TRUE(answers["p1"]->result.empty());
  EXPECT_EQ(answers["0"]->result.at("roots").at(0).at("uri").as_string(), "file:///work/project");
  ASSERT_TRUE(answers["s1"]->error);
  EXPECT_NE(answers["s1"]->error->message.find("does not offer"), std::string::npos);
}

TEST_F(McpClientTest, AFloodOfServerRequestsIsAnsweredSixteenAtATimeAndRefusedBeyond) {
  legacy_peer();
  // A person takes 300 ms to answer each question.
  input_ = [this](const std::string&, json::object,
                  const std::string&) -> asio::awaitable<Result<json::object>> {
    asio::steady_timer person(io_, 300ms);
    co_await person.async_wait(asio::use_awaitable);
    co_return json::object{{"action", "decline"}};
  };
  auto client = make();
  ASSERT_TRUE(run(client->connect()));
  asio::post(io_, [this] {
    for (int i = 0; i < 20; ++i) {
      Message ask;
      ask.kind = Message::Kind::Request;
      ask.id = "e" + std::to_string(i);
      ask.method = "elicitation/create";
      ask.params = obj(R"({"message": "?", "requestedSchema": {"type": "object"}})");
      peer_->events.message(ask);
    }
  });
  io_.restart();
  io_.run_for(1s);
  int answered = 0, refused = 0;
  for (const auto& m : peer_->sent) {
    if (m.kind != Message::Kind::Response) continue;
    if (m.error) {
      ++refused;
      EXPECT_NE(m.error->message.find("too many requests at once"), std::string::npos);
    } else {
      ++answered;
    }
  }
  EXPECT_EQ(answered, 16);
  EXPECT_EQ(refused, 4);
}

TEST_F(McpClientTest, AModernServerAskingForInputIsAskedAgainWithTheAnswersAndItsState) {
  int calls = 0;
  peer_->on_send = [this, &calls](const Message& m) {
    if (m.method == "server/discover")
      answer(m, obj(R"({"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}}})"));
    if (m.method != "tools/call") return;
    if (++calls == 1) {
      answer(m, obj(R"({"resultType": "input_required", "requestState": "opaque-1",
                        "inputRequests": {"where": {"method": "roots/list", "params": {}}}})"));
      return;
    }
    EXPECT_EQ(m.params.at("requestState").as_string(), "opaque-1");
    auto uri = m.params.at("inputResponses").at("where").at("roots").at(0).at("uri").as_string();
    answer(m,
           json::object{{"resultType", "complete"},
                        {"content", json::array{json::object{{"type", "text"}, {"text", uri}}}}});
  };
  auto client = make();
  ASSERT_TRUE(run(client->connect()));
  auto result = run(client->call_tool("t", {}, "call_1", {}, {}));
  ASSERT_TRUE(result) << result.error().message;
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(result->at("content").at(0).at("text").as_string(), "file:///work/project");
  // Two requests with two ids: the retry is a new request.
  std::vector<json::value> ids;
  for (const auto& m : peer_->sent)
    if (m.method == "tools/call") ids.push_back(m.id);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_NE(ids[0], ids[1]);
}

TEST_F(McpClientTest, AnAnswerToARequestNeverSentIsIgnored) {
  legacy_peer();
  auto client = make();
  ASSERT_TRUE(run(client->connect()));
  push(response(json::value(999), json::object{}));
  push(response(json::value("x"), json::object{}));
  io_.restart();
  io_.poll();
  EXPECT_TRUE(client->connected());
}

}  // namespace
}  // namespace sb::mcp
