// ClientToolsManager against the real server: registration, answers over SSE and WebSocket,
// errors, cancellation, progress, and what happens when the network or the server goes away.
#include <gtest/gtest.h>

#include <signal.h>

#include <mutex>
#include <thread>
#include <vector>

#include "http.hpp"
#include "json_util.hpp"
#include "sdk_test_util.hpp"
#include "tcp_proxy.hpp"

namespace switchboard::test {
namespace {

using sb::test::await;
using sb::test::execute_async;
using sb::test::http_get;
using sb::test::IsError;
using sb::test::IsOk;

json::object execute_body(std::string tool, json::object input = {}, int timeout_ms = 10000) {
  return json::object{
      {"tool", std::move(tool)}, {"input", std::move(input)}, {"timeout", timeout_ms}};
}

// The tool ids the server lists for a client.
std::vector<std::string> server_tools(unsigned short port, const std::string& client) {
  auto res = http_get(port, "/client-tools/tools/" + client);
  std::vector<std::string> ids;
  if (res.status != 200) return ids;
  json::value list = res.json();
  for (const auto& t : list.as_array())
    ids.push_back(string_at(t, "/id"));
  return ids;
}

class Transports : public SdkTest, public testing::WithParamInterface<Transport> {};

std::string transport_name(const testing::TestParamInfo<Transport>& info) {
  return info.param == Transport::sse ? "Sse" : "WebSocket";
}

INSTANTIATE_TEST_SUITE_P(Sdk, Transports, testing::Values(Transport::sse, Transport::websocket),
                         transport_name);

// ---- answering ----------------------------------------------------------------------------------

TEST_P(Transports, RegistersAndAnswersWithTheCallsContext) {
  start(test_config());
  Collected<ToolContext> contexts;
  ClientToolsManager tools("c1", url(), fast_options(GetParam()));
  tools.register_tool("echo", text_tool("Echoes the text"),
                      [&](const json::object& input, ToolContext& ctx) -> ToolOutput {
                        contexts.add(ctx);
                        std::string text(input.at("text").as_string());
                        return ToolResult{"Echo", "echo: " + text, json::object{{"length", 5}}};
                      });
  tools.register_tool("plain", text_tool(),
                      [](const json::object&, ToolContext&) -> ToolOutput { return "just text"; });
  EXPECT_EQ(tools.state(), ConnectionState::closed);
  EXPECT_TRUE(server_tools(port(), "c1").empty()) << "registered before connect()";

  tools.connect();
  EXPECT_EQ(tools.state(), ConnectionState::connected);
  auto listed = http_get(port(), "/client-tools/tools/c1");
  ASSERT_TRUE(IsOk(listed));
  ASSERT_EQ(listed.json().as_array().size(), 2u) << listed.describe();
  EXPECT_EQ(string_at(listed.json(), "/0/id"), "client_c1_echo");
  EXPECT_EQ(string_at(listed.json(), "/0/description"), "Echoes the text");

  json::object body = execute_body("client_c1_echo", json::object{{"text", "hello"}});
  body["sessionID"] = "ses_given";
  body["messageID"] = "msg_given";
  body["callID"] = "call_given";
  auto call = execute_async(port(), body);
  auto res = await(call);
  ASSERT_TRUE(IsOk(res));
  json::value result = res.json();
  EXPECT_EQ(string_at(result, "/status"), "success") << res.describe();
  EXPECT_EQ(string_at(result, "/title"), "Echo");
  EXPECT_EQ(string_at(result, "/output"), "echo: hello");
  EXPECT_EQ(result.at_pointer("/metadata/length"), json::value(5)) << res.describe();

  ASSERT_EQ(contexts.size(), 1u);
  ToolContext ctx = contexts.values()[0];
  EXPECT_EQ(ctx.session_id, "ses_given");
  EXPECT_EQ(ctx.message_id, "msg_given");
  EXPECT_EQ(ctx.call_id, "call_given");
  EXPECT_EQ(ctx.tool_name, "echo");
  EXPECT_EQ(ctx.tool_id, "client_c1_echo");
  EXPECT_TRUE(ctx.request_id.starts_with("req_")) << ctx.request_id;
  EXPECT_FALSE(ctx.stop_requested());

  auto plain_call = execute_async(port(), execute_body("client_c1_plain"));
  auto plain = await(plain_call);
  ASSERT_TRUE(IsOk(plain));
  EXPECT_EQ(string_at(plain.json(), "/status"), "success");
  EXPECT_EQ(string_at(plain.json(), "/output"), "just text");
  EXPECT_EQ(string_at(plain.json(), "/title"), "plain");
}

TEST_P(Transports, AThrownErrorAndAnUnknownToolBecomeErrorResults) {
  start(test_config());
  // A tool registered for c1 behind the manager's back (by an earlier run of the program, which
  // kept the token): the manager has no handler for it.
  auto registered = sb::test::register_tools(port(), "c1", {sb::test::tool_def("ghost")});
  ClientToolsOptions options = fast_options(GetParam());
  options.client_token = string_at(registered, "/clientToken");
  ClientToolsManager tools("c1", url(), options);
  tools.register_tool("fails", text_tool(), [](const json::object&, ToolContext&) -> ToolOutput {
    throw std::runtime_error("disk on fire");
  });
  tools.connect();

  auto failing = execute_async(port(), execute_body("client_c1_fails"));
  auto ghost = execute_async(port(), execute_body("client_c1_ghost"));
  auto res = await(failing);
  ASSERT_TRUE(IsOk(res));
  EXPECT_EQ(string_at(res.json(), "/status"), "error") << res.describe();
  EXPECT_EQ(string_at(res.json(), "/error"), "disk on fire");
  res = await(ghost);
  ASSERT_TRUE(IsOk(res));
  EXPECT_EQ(string_at(res.json(), "/status"), "error") << res.describe();
  EXPECT_EQ(string_at(res.json(), "/error"), "No client handler for tool: ghost");
}

TEST_P(Transports, AServerCancelFiresTheStopToken) {
  start(test_config());
  Collected<Error> errors;
  StoppableTool slow;
  ClientToolsManager tools("c1", url(), fast_options(GetParam()));
  tools.on_error([&](const Error& e) { errors.add(e); });
  tools.register_tool("slow", text_tool(), slow.handler());
  tools.connect();

  auto call = execute_async(port(), execute_body("client_c1_slow", {}, 300));
  auto res = await(call);
  EXPECT_TRUE(IsError(res, 504, "TIMEOUT"));
  ASSERT_TRUE(slow.reasons.wait_for(2, 3s)) << "the handler was not stopped";
  EXPECT_TRUE(slow.reasons.values()[1].starts_with("cancelled by the server"))
      << slow.reasons.values()[1];
  // The handler's late answer is not sent: the server would refuse it.
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(errors.size(), 0u) << errors.values()[0].what();
}

TEST_F(SdkTest, ThePerCallTimeoutStopsTheHandlerAndAnswersAnError) {
  start(test_config());
  ClientToolsOptions options = fast_options();
  options.timeout = 300ms;
  StoppableTool slow;
  ClientToolsManager tools("c1", url(), options);
  tools.register_tool("slow", text_tool(), slow.handler());
  tools.connect();
  auto t0 = sb::test::Clock::now();
  auto call = execute_async(port(), execute_body("client_c1_slow"));
  auto res = await(call);
  ASSERT_TRUE(IsOk(res));
  EXPECT_EQ(string_at(res.json(), "/status"), "error") << res.describe();
  EXPECT_EQ(string_at(res.json(), "/error"), "Client tool handler timed out after 300 ms");
  EXPECT_LT(sb::test::Clock::now() - t0, 3s);
  ASSERT_TRUE(slow.reasons.wait_for(2));
  EXPECT_EQ(slow.reasons.values()[1], "timed out after 300 ms");
}

TEST_P(Transports, ProgressReachesTheEventStream) {
  start(test_config());
  sb::test::BusEvents bus(port());
  ClientToolsManager tools("c1", url(), fast_options(GetParam()));
  tools.register_tool("steps", text_tool(),
                      [](const json::object&, ToolContext& ctx) -> ToolOutput {
                        ctx.progress(json::object{{"step", 1}}, "halfway");
                        return "done";
                      });
  tools.connect();
  auto call = execute_async(port(), execute_body("client_c1_steps"));
  auto res = await(call);
  ASSERT_TRUE(IsOk(res));
  EXPECT_EQ(string_at(res.json(), "/output"), "done");
  auto progress = bus.next("client-tool.progress");
  ASSERT_TRUE(progress) << "no client-tool.progress event";
  json::value p(*progress);
  EXPECT_EQ(p.at_pointer("/properties/metadata/step"), json::value(1)) << sb::test::str(p);
  EXPECT_EQ(string_at(p, "/properties/title"), "halfway");
  EXPECT_EQ(string_at(p, "/properties/tool"), "client_c1_steps");
}

// ---- registration and state ---------------------------------------------------------------------

TEST_F(SdkTest, RegisteringWhileConnectedSyncsAtOnceAndServerRefusalsAreTyped) {
  start(test_config());
  ClientToolsManager tools("c1", url(), fast_options());
  auto answer = [](const json::object&, ToolContext&) -> ToolOutput { return "ok"; };
  tools.register_tool("a", text_tool(), answer);
  tools.connect();
  EXPECT_EQ(server_tools(port(), "c1"), (std::vector<std::string>{"client_c1_a"}));

  tools.register_tool("b", text_tool(), answer);
  EXPECT_EQ(server_tools(port(), "c1"), (std::vector<std::string>{"client_c1_a", "client_c1_b"}));
  tools.unregister_tool("a");
  EXPECT_EQ(server_tools(port(), "c1"), (std::vector<std::string>{"client_c1_b"}));

  ToolDefinition bad;
  bad.description = "not an object schema";
  bad.parameters = json::object{{"type", "string"}};
  try {
    tools.register_tool("bad", bad, answer);
    ADD_FAILURE() << "a schema the server refuses was accepted";
  } catch (const ServerError& e) {
    EXPECT_EQ(e.status(), 400u);
    EXPECT_EQ(e.code(), "INVALID_REQUEST");
    EXPECT_NE(e.message().find("object"), std::string::npos) << e.message();
  }
  EXPECT_EQ(server_tools(port(), "c1"), (std::vector<std::string>{"client_c1_b"}));
  EXPECT_THROW(tools.register_tool("no spaces", text_tool(), answer), std::invalid_argument);
  EXPECT_THROW(tools.register_tool("empty", text_tool(), ClientToolsManager::Handler{}),
               std::invalid_argument);
}

TEST_F(SdkTest, AConflictingToolIdMakesConnectThrowAndStayClosed) {
  start(test_config());
  auto answer = [](const json::object&, ToolContext&) -> ToolOutput { return "ok"; };
  ClientToolsManager first("a", url(), fast_options());
  first.register_tool("b_c", text_tool(), answer);  // id client_a_b_c
  first.connect();
  ClientToolsManager second("a_b", url(), fast_options());
  second.register_tool("c", text_tool(), answer);  // the same id
  try {
    second.connect();
    ADD_FAILURE() << "connect() succeeded with a tool id another client owns";
  } catch (const ServerError& e) {
    EXPECT_EQ(e.status(), 409u);
    EXPECT_EQ(e.code(), "CONFLICT");
  }
  EXPECT_EQ(second.state(), ConnectionState::closed);
  EXPECT_THROW(ClientToolsManager("not valid!", url()), std::invalid_argument);
  EXPECT_THROW(ClientToolsManager("c9", "https://example.com"), std::invalid_argument);
}

TEST_F(SdkTest, StateChangesAreObservableAndBlockingCallsFromCallbacksAreRefused) {
  start(test_config());
  Collected<ConnectionState> states;
  Collected<std::string> refusals;
  ClientToolsManager tools("c1", url(), fast_options());
  tools.on_state_change([&](ConnectionState s) {
    states.add(s);
    if (s != ConnectionState::connected) return;
    try {
      tools.unregister_tool("x");  // would wait for the thread it runs on
    } catch (const std::logic_error& e) {
      refusals.add(e.what());
    }
  });
  tools.connect();
  tools.disconnect();
  EXPECT_EQ(states.values(),
            (std::vector<ConnectionState>{ConnectionState::connecting, ConnectionState::connected,
                                          ConnectionState::closed}));
  EXPECT_EQ(refusals.size(), 1u);
  EXPECT_EQ(to_string(ConnectionState::reconnecting), "reconnecting");
}

TEST_P(Transports, DisconnectStopsHandlersAndRemovesTheTools) {
  start(test_config(json::object{{"reconnectGrace", 5000}}));
  StoppableTool slow;
  ClientToolsManager tools("c1", url(), fast_options(GetParam()));
  tools.register_tool("slow", text_tool(), slow.handler());
  tools.connect();
  auto call = execute_async(port(), execute_body("client_c1_slow"));
  ASSERT_TRUE(slow.reasons.wait_for(1));
  auto t0 = sb::test::Clock::now();
  tools.disconnect();
  EXPECT_EQ(tools.state(), ConnectionState::closed);
  ASSERT_TRUE(slow.reasons.wait_for(2));
  EXPECT_EQ(slow.reasons.values()[1], "disconnected");
  // The server does not wait out its 5 s grace: the tools are gone and the call ends now.
  auto res = await(call);
  EXPECT_TRUE(IsError(res, 503, "UNAVAILABLE", {"unregistered"}));
  EXPECT_LT(sb::test::Clock::now() - t0, 3s);
  EXPECT_TRUE(server_tools(port(), "c1").empty());
}

// ---- bad networks and restarts ------------------------------------------------------------------

// A handler that counts its calls and answers once the test opens the gate (or stops when its
// stop token fires, recording why).
struct CountingTool {
  std::atomic<int> calls{0};
  Collected<std::string> started;  // the input's text of each call
  Collected<std::string> stops;    // the stop reasons of calls that were stopped
  Gate gate;
  ClientToolsManager::Handler handler() {
    return [this](const json::object& input, ToolContext& ctx) -> ToolOutput {
      ++calls;
      started.add(std::string(input.contains("text") ? input.at("text").as_string() : ""));
      if (gate.wait_or_stop(ctx.stop_token())) stops.add(ctx.stop_reason());
      return "answered";
    };
  }
};

// Manager c1 with the counting tool "work", connected to the server through a proxy; errors
// reported to on_error are collected.
struct Proxied {
  Proxied(unsigned short server_port, Transport transport,
          ClientToolsOptions options = fast_options())
      : proxy(server_port), tools("c1", proxy.url(), with_transport(options, transport)) {
    tools.on_error([this](const Error& e) { errors.add(e); });
    tools.register_tool("work", text_tool(), tool.handler());
    tools.connect();
  }
  static ClientToolsOptions with_transport(ClientToolsOptions o, Transport t) {
    o.transport = t;
    return o;
  }
  // The network goes down: open connections break, new ones are refused.
  void go_down() {
    proxy.refuse(true);
    proxy.cut();
  }

  TcpProxy proxy;
  Collected<Error> errors;
  CountingTool tool;
  ClientToolsManager tools;  // last: it goes first, while what its callbacks use still exists
};

TEST_P(Transports, ACallInFlightWhenTheConnectionIsCutIsAnsweredOnceAfterReconnecting) {
  start(test_config(json::object{{"reconnectGrace", 5000}}));
  Proxied c1(port(), GetParam());

  auto call = execute_async(port(), execute_body("client_c1_work", {}, 15000));
  ASSERT_TRUE(c1.tool.started.wait_for(1));
  c1.go_down();
  ASSERT_TRUE(c1.tools.wait_for_state(ConnectionState::reconnecting, 3s));
  c1.tool.gate.open();  // the answer is ready while the connection is down
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(c1.tools.state(), ConnectionState::reconnecting);
  c1.proxy.refuse(false);
  ASSERT_TRUE(c1.tools.wait_for_state(ConnectionState::connected, 5s));

  auto res = await(call);
  ASSERT_TRUE(IsOk(res));
  EXPECT_EQ(string_at(res.json(), "/output"), "answered") << res.describe();
  std::this_thread::sleep_for(200ms);  // a duplicate run would show now
  EXPECT_EQ(c1.tool.calls.load(), 1);
  EXPECT_EQ(c1.errors.size(), 0u) << c1.errors.values()[0].what();
}

TEST_P(Transports, ARequestSentWhileTheConnectionIsDownIsAnsweredOnce) {
  start(test_config(json::object{{"reconnectGrace", 5000}}));
  Proxied c1(port(), GetParam());
  c1.tool.gate.open();
  // One answered call first, so that an SSE reconnection carries a Last-Event-ID.
  auto first_call = execute_async(port(), execute_body("client_c1_work", {{"text", "first"}}));
  ASSERT_TRUE(IsOk(await(first_call)));

  c1.go_down();
  ASSERT_TRUE(c1.tools.wait_for_state(ConnectionState::reconnecting, 3s));
  auto call = execute_async(port(), execute_body("client_c1_work", {{"text", "second"}}, 15000));
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(c1.tool.calls.load(), 1);
  c1.proxy.refuse(false);

  auto res = await(call);
  ASSERT_TRUE(IsOk(res));
  EXPECT_EQ(string_at(res.json(), "/output"), "answered") << res.describe();
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(c1.tool.started.values(), (std::vector<std::string>{"first", "second"}));
  EXPECT_EQ(c1.errors.size(), 0u) << c1.errors.values()[0].what();
}

TEST_F(SdkTest, WhenTheGracePassesTheCallFailsCleanlyAndTheToolsComeBack) {
  start(test_config(json::object{{"reconnectGrace", 300}}));
  Proxied c1(port(), Transport::sse);
  auto& [proxy, errors, tool, tools] = c1;

  auto call = execute_async(port(), execute_body("client_c1_work", {}, 15000));
  ASSERT_TRUE(tool.started.wait_for(1));
  c1.go_down();
  auto res = await(call, 5s);
  EXPECT_TRUE(IsError(res, 503, "UNAVAILABLE", {"Client disconnected"}));
  EXPECT_TRUE(server_tools(port(), "c1").empty()) << "the grace passed: the tools should be gone";

  tool.gate.open();
  proxy.refuse(false);
  ASSERT_TRUE(tools.wait_for_state(ConnectionState::connected, 5s));
  EXPECT_EQ(server_tools(port(), "c1"), (std::vector<std::string>{"client_c1_work"}));
  // The late answer is refused by the server, and the program hears of it.
  ASSERT_TRUE(errors.wait_for(1));
  EXPECT_EQ(errors.values()[0].code(), "CONFLICT") << errors.values()[0].what();
  // The tool works again.
  auto again = execute_async(port(), execute_body("client_c1_work"));
  res = await(again);
  ASSERT_TRUE(IsOk(res));
  EXPECT_EQ(string_at(res.json(), "/output"), "answered");
  EXPECT_EQ(tool.calls.load(), 2);
}

TEST_P(Transports, AServerRestartCancelsTheCallThenTheToolsAreRegisteredAgain) {
  json::object config = test_config();
  start(config);
  unsigned short fixed_port = port();
  Collected<ConnectionState> states;
  StoppableTool slow;
  ClientToolsManager tools("c1", url(), fast_options(GetParam()));
  tools.on_state_change([&](ConnectionState s) { states.add(s); });
  tools.register_tool("slow", text_tool(), slow.handler());
  tools.register_tool("quick", text_tool(),
                      [](const json::object&, ToolContext&) -> ToolOutput { return "fresh"; });
  tools.connect();
  auto call = execute_async(port(), execute_body("client_c1_slow", {}, 15000));
  ASSERT_TRUE(slow.reasons.wait_for(1));

  server().send_signal(SIGTERM);
  auto res = await(call);
  EXPECT_TRUE(IsError(res, 503, "UNAVAILABLE", {"shutting down"}));
  ASSERT_TRUE(slow.reasons.wait_for(2, 3s));
  EXPECT_TRUE(slow.reasons.values()[1].starts_with("cancelled by the server"))
      << slow.reasons.values()[1];
  auto exited = server().wait_exit(10s);
  ASSERT_TRUE(exited && exited->exited && exited->code == 0);
  ASSERT_TRUE(tools.wait_for_state(ConnectionState::reconnecting, 3s));

  server_.reset();
  sb::test::ServerProcess::Options restart;
  restart.config = config;
  restart.extra_args = {"--port", std::to_string(fixed_port)};
  server_.emplace(restart);
  ASSERT_TRUE(tools.wait_for_state(ConnectionState::connected, 10s));
  EXPECT_EQ(server_tools(port(), "c1"),
            (std::vector<std::string>{"client_c1_quick", "client_c1_slow"}));
  auto again = execute_async(port(), execute_body("client_c1_quick"));
  res = await(again);
  ASSERT_TRUE(IsOk(res));
  EXPECT_EQ(string_at(res.json(), "/output"), "fresh");
  auto seen = states.values();
  ASSERT_GE(seen.size(), 4u);
  EXPECT_EQ(seen[2], ConnectionState::reconnecting);
  EXPECT_EQ(seen.back(), ConnectionState::connected);
}

TEST_F(SdkTest, ToolsChangedWhileReconnectingReachTheServerOnReconnection) {
  start(test_config(json::object{{"reconnectGrace", 5000}}));
  Proxied c1(port(), Transport::sse);
  c1.go_down();
  ASSERT_TRUE(c1.tools.wait_for_state(ConnectionState::reconnecting, 3s));
  c1.tools.register_tool("late", text_tool(), [](const json::object&, ToolContext&) -> ToolOutput {
    return "late but here";
  });
  EXPECT_EQ(server_tools(port(), "c1"), (std::vector<std::string>{"client_c1_work"}));
  c1.proxy.refuse(false);
  ASSERT_TRUE(c1.tools.wait_for_state(ConnectionState::connected, 5s));
  EXPECT_EQ(server_tools(port(), "c1"),
            (std::vector<std::string>{"client_c1_late", "client_c1_work"}));
  auto call = execute_async(port(), execute_body("client_c1_late"));
  auto res = await(call);
  ASSERT_TRUE(IsOk(res));
  EXPECT_EQ(string_at(res.json(), "/output"), "late but here");
}

TEST_F(SdkTest, ASecondWebSocketOfTheSameClientSupersedesTheFirst) {
  start(test_config());
  Collected<Error> errors;
  ClientToolsManager first("c1", url(), fast_options(Transport::websocket));
  first.on_error([&](const Error& e) { errors.add(e); });
  first.connect();
  // The same program's second connection: it has the client's token.
  ClientToolsOptions options = fast_options(Transport::websocket);
  options.client_token = first.client_token();
  ClientToolsManager second("c1", url(), options);
  second.connect();
  ASSERT_TRUE(errors.wait_for(1)) << "the replaced connection did not hear of it";
  EXPECT_EQ(errors.values()[0].code(), "SUPERSEDED");
  EXPECT_EQ(first.state(), ConnectionState::closed);
  // The first does not come back to replace the second in turn.
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(second.state(), ConnectionState::connected);
  EXPECT_EQ(first.state(), ConnectionState::closed);
}

TEST_F(SdkTest, ReconnectionGivesUpAfterMaxAttemptsWithAnErrorEvent) {
  start(test_config(json::object{{"reconnectGrace", 5000}}));
  ClientToolsOptions options = fast_options();
  options.max_reconnect_attempts = 2;
  options.reconnect_delay = 50ms;
  Proxied c1(port(), Transport::sse, options);
  auto call = execute_async(port(), execute_body("client_c1_work", {}, 2000));
  ASSERT_TRUE(c1.tool.started.wait_for(1));
  c1.go_down();
  ASSERT_TRUE(c1.errors.wait_for(1, 3s)) << "no error after the last attempt";
  Error error = c1.errors.values()[0];
  EXPECT_EQ(error.code(), "RECONNECT_FAILED");
  EXPECT_NE(std::string(error.what()).find("2 reconnection attempts"), std::string::npos)
      << error.what();
  EXPECT_EQ(c1.tools.state(), ConnectionState::closed);
  ASSERT_TRUE(c1.tool.stops.wait_for(1));
  EXPECT_EQ(c1.tool.stops.values()[0], "connection lost");
  EXPECT_GE(c1.proxy.accepted(), 4u);  // the first connection (2) and the two attempts
  await(call);

  // A closed manager connects again on request.
  c1.proxy.refuse(false);
  c1.tools.connect();
  EXPECT_EQ(c1.tools.state(), ConnectionState::connected);
}

// ---- the SSE parser -----------------------------------------------------------------------------

// ---- access (docs/security.md) ------------------------------------------------------------------

TEST_P(Transports, TheTokenOfTheFirstConnectionIsKeptAndAnImpostorIsRefused) {
  start(test_config());
  std::vector<std::string> issued;
  std::mutex issued_mutex;
  ClientToolsOptions options = fast_options(GetParam());
  options.on_client_token = [&](const std::string& t) {
    std::lock_guard lock(issued_mutex);
    issued.push_back(t);
  };
  std::string token;
  {
    ClientToolsManager first("c1", url(), options);
    first.register_tool("echo", text_tool(),
                        [](const json::object&, ToolContext&) -> ToolOutput { return "first"; });
    EXPECT_EQ(first.client_token(), "");
    first.connect();
    token = first.client_token();
    EXPECT_TRUE(token.starts_with("sbct_")) << token;
    first.disconnect();
  }
  {
    std::lock_guard lock(issued_mutex);
    EXPECT_EQ(issued, std::vector<std::string>{token});
  }

  ClientToolsManager impostor("c1", url(), fast_options(GetParam()));
  impostor.register_tool("echo", text_tool(),
                         [](const json::object&, ToolContext&) -> ToolOutput { return "forged"; });
  try {
    impostor.connect();
    ADD_FAILURE() << "a second program without the token connected as c1";
  } catch (const ServerError& e) {
    EXPECT_EQ(e.code(), "UNAUTHORIZED");
    EXPECT_EQ(e.status(), 401u);
  }
  EXPECT_EQ(impostor.state(), ConnectionState::closed);
  EXPECT_TRUE(server_tools(port(), "c1").empty());

  ClientToolsOptions again_options = fast_options(GetParam());
  again_options.client_token = token;
  ClientToolsManager again("c1", url(), again_options);
  again.register_tool("echo", text_tool(),
                      [](const json::object&, ToolContext&) -> ToolOutput { return "again"; });
  again.connect();
  auto call = execute_async(port(), execute_body("client_c1_echo", json::object{{"text", "x"}}));
  auto res = await(call);
  ASSERT_TRUE(IsOk(res));
  EXPECT_EQ(string_at(res.json(), "/output"), "again");
  EXPECT_EQ(again.client_token(), token);
}

TEST_F(SdkTest, AClientWithoutToolsGetsItsTokenFromTheWebSocket) {
  start(test_config());
  ClientToolsManager tools("bare", url(), fast_options(Transport::websocket));
  tools.connect();
  for (int i = 0; i < 100 && tools.client_token().empty(); ++i)
    std::this_thread::sleep_for(20ms);
  EXPECT_TRUE(tools.client_token().starts_with("sbct_"));
  tools.register_tool("late", text_tool(),
                      [](const json::object&, ToolContext&) -> ToolOutput { return "late"; });
  auto call = execute_async(port(), execute_body("client_bare_late", json::object{{"text", "x"}}));
  auto res = await(call);
  ASSERT_TRUE(IsOk(res));
  EXPECT_EQ(string_at(res.json(), "/output"), "late");
}

TEST_P(Transports, AServerWithAPasswordTakesTheClientsPassword) {
  start(test_config({}, json::object{{"password", "pw-cpp"}}));
  {
    Client without(url());
    try {
      without.list_sessions();
      ADD_FAILURE() << "a client without the password was served";
    } catch (const ServerError& e) {
      EXPECT_EQ(e.code(), "UNAUTHORIZED");
    }
  }
  ClientOptions options;
  options.client_id = "owner";
  options.password = "pw-cpp";
  options.tools = fast_options(GetParam());
  Client client(url(), options);
  client.client_tools().register_tool(
      "echo", text_tool(),
      [](const json::object&, ToolContext&) -> ToolOutput { return "locked"; });
  auto handle = client.start_session();
  // Creating the session was the id's first use: its tools got the same token.
  EXPECT_TRUE(client.client_token().starts_with("sbct_"));
  EXPECT_EQ(client.client_tools().client_token(), client.client_token());
  EXPECT_EQ(handle.session.client_id, "owner");
  EventStream events = client.events();
  auto res = sb::test::http_request(
      port(), "POST", "/client-tools/execute",
      json::serialize(execute_body("client_owner_echo", json::object{{"text", "x"}})),
      {{"Authorization", "Bearer pw-cpp"}});
  ASSERT_TRUE(IsOk(res));
  EXPECT_EQ(string_at(res.json(), "/output"), "locked");
  handle.close();
}

TEST(SseParser, SplitsEventsAcrossChunksAndLineEnds) {
  detail::SseParser parser;
  std::vector<detail::SseEvent> events;
  std::string stream =
      ": a comment\r\nid: 7\r\nevent: tool-request\r\ndata: {\"a\":\r\ndata:1}\r\n\r\n"
      "event: ping\rdata\r\r"
      "data: no event name\n\n"
      "id: 8\nevent: unfinished\n";
  for (char c : stream)  // byte by byte: every split point
    parser.feed(std::string_view(&c, 1), events);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].id, "7");
  EXPECT_EQ(events[0].event, "tool-request");
  EXPECT_EQ(events[0].data, "{\"a\":\n1}");
  EXPECT_EQ(events[1].event, "ping");
  EXPECT_EQ(events[1].data, "");
  EXPECT_FALSE(events[1].id);
  EXPECT_EQ(events[2].event, "message");
  EXPECT_EQ(events[2].data, "no event name");
  parser.feed("\n", events);
  EXPECT_EQ(events.size(), 3u) << "an event without data is not dispatched";
}

TEST(ValidUtf8, RepairsOnlyWhatIsInvalid) {
  EXPECT_EQ(detail::valid_utf8("plain"), "plain");
  EXPECT_EQ(detail::valid_utf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"),
            "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
  EXPECT_EQ(detail::valid_utf8("a\xFF"
                               "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(detail::valid_utf8("cut \xE2\x82"), "cut \xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(detail::valid_utf8("\xED\xA0\x80"),  // an encoded surrogate
            "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(Endpoint, ParsesBaseUrls) {
  auto e = detail::Endpoint::parse("http://127.0.0.1:4096/");
  EXPECT_EQ(e.host, "127.0.0.1");
  EXPECT_EQ(e.port, "4096");
  EXPECT_EQ(e.target("/session"), "/session");
  e = detail::Endpoint::parse("http://example.com/api");
  EXPECT_EQ(e.port, "80");
  EXPECT_EQ(e.target("/session"), "/api/session");
  EXPECT_THROW(detail::Endpoint::parse("example.com"), std::invalid_argument);
}

}  // namespace
}  // namespace switchboard::test
