// The session client against the real server with its default scripted model ("/call TOOL
// {json}" calls a tool; tool results come back as text): sessions, prompts, a full turn that calls
// a client tool, the typed event stream, permission replies, and the coroutine API.
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include <thread>

#include "sdk_test_util.hpp"

namespace switchboard::test {
namespace {

namespace asio = boost::asio;

ClientOptions client_options(Transport transport = Transport::sse) {
  ClientOptions o;
  o.client_id = "app";
  o.request_timeout = 5s;
  o.tools = fast_options(transport);
  return o;
}

// Reads events until one of `type` about `session_id` arrives; throws after `timeout`.
Event wait_event(EventStream& events, const std::string& type, const std::string& session_id,
                 std::chrono::milliseconds timeout = 5s) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    auto e = left.count() > 0 ? events.next_of_type(type, left) : std::nullopt;
    if (!e) throw std::runtime_error("no " + type + " event for " + session_id);
    if (e->session_id() == session_id) return *e;
  }
}

std::optional<Part> tool_part(const std::vector<MessageWithParts>& messages,
                              const std::string& tool) {
  for (const auto& m : messages)
    for (const auto& p : m.parts)
      if (p.type == "tool" && p.tool == tool) return p;
  return std::nullopt;
}

TEST_F(SdkTest, SessionsAreCreatedListedReadAndDeleted) {
  start(test_config());
  Client client(url(), client_options());
  CreateSessionOptions options;
  options.title = "first";
  Session s = client.create_session(options);
  EXPECT_TRUE(s.id.starts_with("ses_")) << s.id;
  EXPECT_EQ(s.title, "first");
  EXPECT_EQ(s.client_id, "app");
  EXPECT_GT(s.created, 0);

  auto list = client.list_sessions();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].id, s.id);
  EXPECT_EQ(client.get_session(s.id).title, "first");

  client.delete_session(s.id);
  EXPECT_TRUE(client.list_sessions().empty());
  try {
    client.get_session(s.id);
    ADD_FAILURE() << "a deleted session was found";
  } catch (const ServerError& e) {
    EXPECT_EQ(e.status(), 404u);
    EXPECT_EQ(e.code(), "NOT_FOUND");
    EXPECT_FALSE(e.message().empty());
  }
}

TEST_F(SdkTest, PromptWaitsForTheTurnAndReturnsTheAssistantMessage) {
  start(test_config());
  Client client(url(), client_options());
  Session s = client.create_session();
  MessageWithParts answer = client.prompt(s.id, "hello there");
  EXPECT_EQ(answer.info.role, "assistant");
  EXPECT_EQ(answer.info.session_id, s.id);
  EXPECT_EQ(answer.text(), "Echo: hello there");
  EXPECT_EQ(answer.info.finish, "stop");
  EXPECT_FALSE(answer.info.error);
  auto history = client.messages(s.id);
  ASSERT_EQ(history.size(), 2u);
  EXPECT_EQ(history[0].info.role, "user");
  EXPECT_EQ(history[1].info.id, answer.info.id);
  EXPECT_TRUE(client.statuses().empty()) << "the session is still busy";
}

class SessionTransports : public SdkTest, public testing::WithParamInterface<Transport> {};

INSTANTIATE_TEST_SUITE_P(Sdk, SessionTransports,
                         testing::Values(Transport::sse, Transport::websocket),
                         [](const testing::TestParamInfo<Transport>& info) {
                           return std::string(info.param == Transport::sse ? "Sse" : "WebSocket");
                         });

// Seed 000's flow: register a tool, start_session(), prompt, close.
TEST_P(SessionTransports, AFullTurnCallsAClientToolRegisteredByTheSdk) {
  start(test_config());
  Collected<ToolContext> calls;
  Client client(url(), client_options(GetParam()));
  ToolDefinition definition;
  definition.description = "Get the current local time on the client machine";
  definition.parameters =
      json::parse(R"({"type": "object", "properties": {"timezone": {"type": "string"}}})");
  client.client_tools().register_tool(
      "get_local_time", definition, [&](const json::object& input, ToolContext& ctx) -> ToolOutput {
        calls.add(ctx);
        std::string tz(input.at("timezone").as_string());
        return ToolResult{"Local time (" + tz + ")", "12:00 in " + tz, json::object{{"tz", tz}}};
      });

  auto [session, prompt, close] = client.start_session();
  EXPECT_EQ(session.client_id, "app");
  EXPECT_EQ(client.client_tools().state(), ConnectionState::connected);
  MessageWithParts answer = prompt(R"(/call client_app_get_local_time {"timezone": "UTC"})");
  EXPECT_EQ(answer.text(), "Tool results:\n12:00 in UTC");

  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls.values()[0].session_id, session.id);
  EXPECT_FALSE(calls.values()[0].message_id.empty());
  EXPECT_FALSE(calls.values()[0].call_id.empty());
  auto history = client.messages(session.id);
  auto part = tool_part(history, "client_app_get_local_time");
  ASSERT_TRUE(part);
  EXPECT_EQ(part->state.status, "completed");
  EXPECT_EQ(part->state.title, "Local time (UTC)");
  EXPECT_EQ(part->state.output, "12:00 in UTC");
  EXPECT_EQ(part->state.input, (json::object{{"timezone", "UTC"}}));
  EXPECT_EQ(part->call_id, calls.values()[0].call_id);

  close();
  EXPECT_EQ(client.client_tools().state(), ConnectionState::closed);
}

TEST_F(SdkTest, TheEventStreamIsTyped) {
  start(test_config());
  Client client(url(), client_options());
  client.client_tools().register_tool("lookup", text_tool(),
                                      [](const json::object&, ToolContext& ctx) -> ToolOutput {
                                        ctx.progress(json::object{{"found", 1}});
                                        return "a telephone exchange";
                                      });
  EventStream events = client.events();
  auto first = events.next(5s);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->type, "server.connected");

  auto [session, prompt, close] = client.start_session();
  client.prompt_async(session.id, R"(/call client_app_lookup {"text": "switchboard"})");
  Event busy = wait_event(events, "session.status", session.id);
  ASSERT_TRUE(busy.status());
  EXPECT_EQ(busy.status()->type, "busy");
  Event completed = wait_event(events, "client-tool.completed", session.id);
  EXPECT_EQ(string_at(json::value(completed.properties), "/tool"), "client_app_lookup");
  // The tool part's last update says completed, with the handler's output.
  std::optional<Part> tool;
  for (;;) {
    Event e = wait_event(events, "message.part.updated", session.id);
    ASSERT_TRUE(e.part());
    if (e.part()->type == "tool" && e.part()->state.status == "completed") {
      tool = e.part();
      break;
    }
  }
  EXPECT_EQ(tool->tool, "client_app_lookup");
  EXPECT_EQ(tool->state.output, "a telephone exchange");
  wait_event(events, "session.idle", session.id);
  EXPECT_EQ(client.messages(session.id).back().text(), "Tool results:\na telephone exchange");
  close();
  events.close();
}

TEST_F(SdkTest, AStreamOpenedWithTheLastIdResumesThere) {
  start(test_config());
  Client client(url(), client_options());
  EventStream events = client.events();
  auto first = events.next(5s);
  ASSERT_TRUE(first);
  EXPECT_TRUE(first->id.empty());
  EXPECT_TRUE(first->properties.empty());
  Session a = client.create_session();
  Event created = wait_event(events, "session.created", a.id);
  ASSERT_FALSE(created.id.empty());
  events.close();
  Session b = client.create_session();  // missed by the closed stream

  EventStream again = client.events(created.id);
  auto connected = again.next(5s);
  ASSERT_TRUE(connected);
  EXPECT_EQ(connected->type, "server.connected");
  EXPECT_EQ(json::value(connected->properties), json::parse(R"({"resumed": true})"));
  auto missed = again.next(5s);
  ASSERT_TRUE(missed);
  EXPECT_EQ(missed->type, "session.created");
  EXPECT_EQ(missed->session_id(), b.id);
  EXPECT_EQ(std::stoull(missed->id), std::stoull(created.id) + 1);
  again.close();

  EventStream stale = client.events("1");
  auto refused = stale.next(5s);
  ASSERT_TRUE(refused);
  EXPECT_EQ(json::value(refused->properties), json::parse(R"({"resumed": false})"));
  stale.close();
}

TEST_F(SdkTest, APermissionAskIsAnsweredThroughTheClient) {
  json::object config = test_config();
  config["permission"] = json::object{{"bash", "ask"}};
  start(config);
  Client client(url(), client_options());
  EventStream events = client.events();
  Session s = client.create_session();
  client.prompt_async(s.id,
                      R"(/call bash {"command": "echo asked-and-allowed", "description": "echo"})");
  Event asked = wait_event(events, "permission.asked", s.id);
  auto request = asked.permission();
  ASSERT_TRUE(request);
  EXPECT_EQ(request->permission, "bash");
  EXPECT_EQ(request->patterns, (std::vector<std::string>{"echo asked-and-allowed"}));
  auto waiting = client.permissions();
  ASSERT_EQ(waiting.size(), 1u);
  EXPECT_EQ(waiting[0].id, request->id);

  client.reply_permission(request->id, PermissionReply::once);
  wait_event(events, "session.idle", s.id);
  auto bash = tool_part(client.messages(s.id), "bash");
  ASSERT_TRUE(bash);
  EXPECT_EQ(bash->state.status, "completed");
  EXPECT_NE(bash->state.output.find("asked-and-allowed"), std::string::npos)
      << json::serialize(bash->raw);
  EXPECT_THROW(client.reply_permission(request->id, PermissionReply::once), ServerError);
}

TEST_F(SdkTest, ABusySessionRefusesAPromptAndAbortCancelsTheClientCall) {
  start(test_config());
  StoppableTool slow;
  Client client(url(), client_options());
  client.client_tools().register_tool("wait", text_tool(), slow.handler());
  auto [session, prompt, close] = client.start_session();
  client.prompt_async(session.id, "/call client_app_wait {}");
  ASSERT_TRUE(slow.reasons.wait_for(1));
  EXPECT_EQ(client.statuses().at(session.id).type, "busy");
  try {
    client.prompt(session.id, "are you there?");
    ADD_FAILURE() << "a busy session took a second prompt";
  } catch (const ServerError& e) {
    EXPECT_EQ(e.status(), 409u);
    EXPECT_EQ(e.code(), "CONFLICT");
  }
  EXPECT_TRUE(client.abort(session.id));
  ASSERT_TRUE(slow.reasons.wait_for(2, 3s));
  EXPECT_TRUE(slow.reasons.values()[1].starts_with("cancelled by the server"))
      << slow.reasons.values()[1];
  auto part = tool_part(client.messages(session.id), "client_app_wait");
  ASSERT_TRUE(part);
  EXPECT_EQ(part->state.status, "error");
  close();
}

// ---- coroutines ---------------------------------------------------------------------------------

// Coroutine handlers: named functions (GCC 12 mishandles capturing lambda coroutines).
asio::awaitable<ToolOutput> double_it(json::object input, ToolContext ctx) {
  asio::steady_timer pause(co_await asio::this_coro::executor, 10ms);
  co_await pause.async_wait(asio::use_awaitable);
  std::int64_t n = input.at("n").as_int64();
  ctx.progress(json::object{{"doubling", n}});
  co_return std::to_string(2 * n);
}

std::atomic<bool> sleeper_cancelled{false};

asio::awaitable<ToolOutput> sleep_long(json::object, ToolContext) {
  asio::steady_timer forever(co_await asio::this_coro::executor, 30s);
  try {
    co_await forever.async_wait(asio::use_awaitable);
  } catch (const boost::system::system_error& e) {
    if (e.code() == asio::error::operation_aborted) sleeper_cancelled = true;
    throw;
  }
  co_return "woke up";
}

struct TurnResult {
  std::string text;
  std::string status;
};

asio::awaitable<TurnResult> coroutine_turn(Client& client) {
  ClientToolsManager& tools = client.client_tools();
  ToolDefinition doubler;
  doubler.description = "Doubles n";
  doubler.parameters =
      json::parse(R"({"type": "object", "properties": {"n": {"type": "integer"}}})");
  ClientToolsManager::AsyncHandler handler = &double_it;
  co_await tools.async_register_tool("double", doubler, handler);
  ClientToolsManager::AsyncHandler sleeper = &sleep_long;
  co_await tools.async_register_tool("sleep", text_tool(), sleeper);
  AsyncSessionHandle session = co_await client.async_start_session();
  MessageWithParts answer = co_await session.prompt(R"(/call client_app_double {"n": 21})");
  auto history = co_await client.async_messages(session.session.id);
  std::string status;
  for (const auto& m : history)
    for (const auto& p : m.parts)
      if (p.tool == "client_app_double") status = p.state.status;
  co_await session.close();
  co_return TurnResult{answer.text(), status};
}

TEST_F(SdkTest, TheAwaitableApiRunsOnTheProgramsOwnIoContext) {
  start(test_config());
  asio::io_context ioc;
  auto work = asio::make_work_guard(ioc);
  std::thread io([&] { ioc.run(); });
  {
    Client client(ioc.get_executor(), url(), client_options());
    auto turn = asio::co_spawn(ioc, coroutine_turn(client), asio::use_future);
    ASSERT_EQ(turn.wait_for(10s), std::future_status::ready);
    TurnResult result = turn.get();
    EXPECT_EQ(result.text, "Tool results:\n42");
    EXPECT_EQ(result.status, "completed");

    // A server cancel reaches the coroutine handler's awaited operation.
    client.client_tools().connect();
    auto call = sb::test::execute_async(
        port(),
        json::object{{"tool", "client_app_sleep"}, {"input", json::object{}}, {"timeout", 300}});
    EXPECT_TRUE(sb::test::IsError(sb::test::await(call), 504, "TIMEOUT"));
    auto deadline = std::chrono::steady_clock::now() + 3s;
    while (!sleeper_cancelled && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(10ms);
    EXPECT_TRUE(sleeper_cancelled) << "the coroutine handler's timer was not cancelled";
    auto done = asio::co_spawn(ioc, client.client_tools().async_disconnect(), asio::use_future);
    ASSERT_EQ(done.wait_for(5s), std::future_status::ready);
  }
  work.reset();
  io.join();
}

}  // namespace
}  // namespace switchboard::test
