// Black-box tests of client tools with live clients: the SSE pending stream and the WebSocket,
// full round trips, timeouts and cancels, disconnects and the reconnect grace, duplicate and
// forged results, progress, the /event stream and slow consumers.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

#include "blackbox_util.hpp"

namespace sb::test {
namespace {

long long elapsed_ms(Clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count();
}

json::object success(std::string_view output, std::string_view title = "done") {
  return json::object{{"status", "success"},
                      {"title", title},
                      {"output", output},
                      {"metadata", json::object{{"source", "test"}}}};
}

HttpResponse post_result(unsigned short port, std::string_view request_id, json::object result,
                         std::optional<std::string> client_id = std::nullopt) {
  json::object body{{"requestID", request_id}, {"result", std::move(result)}};
  if (client_id) body["clientID"] = *client_id;
  return http_post(port, "/client-tools/result", body);
}

json::object execute_body(std::string_view tool, json::object input = {},
                          std::optional<int> timeout = std::nullopt) {
  json::object body{{"tool", tool}, {"input", std::move(input)}};
  if (timeout) body["timeout"] = *timeout;
  return body;
}

// The next tool-request on a pending stream, with its SSE event id.
struct Delivered {
  std::string event_id;
  json::object request;
  std::string request_id() const { return string_at(json::value(request), "/requestID"); }
};

Delivered next_delivered(SseClient& sse, std::chrono::milliseconds timeout = 5s) {
  auto e = sse.next_event_named("tool-request", timeout);
  if (!e)
    throw std::runtime_error("no tool-request event within " + std::to_string(timeout.count()) +
                             " ms");
  json::value v = e->json();
  if (!v.is_object()) throw std::runtime_error("tool-request data is not an object: " + e->data);
  return {e->id.value_or(""), v.get_object()};
}

class ClientToolsStream : public ServerTest {};

// ---- seed 001, integration cases 4-6 --------------------------------------------------------

TEST_F(ClientToolsStream, PendingStreamHasEventStreamHeaders) {
  start(test_config());
  SseClient sse(port(), "/client-tools/pending/c1");
  EXPECT_EQ(sse.status(), 200u);
  std::string content_type = sse.header("content-type").value_or("");
  EXPECT_EQ(content_type.rfind("text/event-stream", 0), 0u) << "Content-Type: " << content_type;
  EXPECT_TRUE(contains(sse.header("cache-control").value_or(""), "no-cache"))
      << "Cache-Control: " << sse.header("cache-control").value_or("(none)");
}

TEST_F(ClientToolsStream, PendingStreamSendsPingsEveryKeepaliveInterval) {
  start(test_config(json::object{{"keepaliveInterval", 100}}));
  auto t0 = Clock::now();
  SseClient sse(port(), "/client-tools/pending/c1");
  for (int i = 0; i < 3; ++i) {
    auto ping = sse.next_event_named("ping", 2s);
    ASSERT_TRUE(ping.has_value()) << "ping " << i + 1 << " did not come";
    EXPECT_EQ(ping->data, "");
  }
  auto ms = elapsed_ms(t0);
  EXPECT_GE(ms, 150) << "three pings at a 100 ms interval cannot all come at once";
  EXPECT_LT(ms, 2000);
}

TEST_F(ClientToolsStream, ToolsAreCleanedUpWhenTheStreamCloses) {
  start(test_config());
  BusEvents bus(port());
  register_tools(port(), "c1", {tool_def("a"), tool_def("b")});
  register_tools(port(), "c2", {tool_def("a")});
  {
    SseClient sse(port(), "/client-tools/pending/c1");
    ASSERT_EQ(sse.status(), 200u);
    ASSERT_TRUE(bus.next_where("client-tool.connected", "/properties/clientID", "c1"));
    sse.close();
  }
  auto gone = bus.next_where("client-tool.unregistered", "/properties/clientID", "c1");
  ASSERT_TRUE(gone.has_value()) << "no client-tool.unregistered for c1 after its stream closed";
  EXPECT_EQ(*find(json::value(*gone), "/properties/toolIDs"),
            (json::array{"client_c1_a", "client_c1_b"}));
  EXPECT_EQ(http_get(port(), "/client-tools/tools/c1").json(), json::array{});
  // Only the client that went away lost its tools.
  auto all = http_get(port(), "/client-tools/tools").json();
  EXPECT_NE(all.as_object().if_contains("client_c2_a"), nullptr) << str(all);
}

TEST_F(ClientToolsStream, ToolsAreCleanedUpWhenTheWebSocketCloses) {
  start(test_config());
  BusEvents bus(port());
  {
    WsClient ws(port(), "/client-tools/ws/c1");
    ws.send_json(json::object{{"type", "register"}, {"tools", {tool_def("a")}}});
    ASSERT_TRUE(ws.next_message_of_type("registered", 5s));
    ws.close();
  }
  ASSERT_TRUE(bus.next_where("client-tool.unregistered", "/properties/clientID", "c1"));
  EXPECT_EQ(http_get(port(), "/client-tools/tools/c1").json(), json::array{});
}

// ---- round trips -----------------------------------------------------------------------------

TEST_F(ClientToolsStream, RoundTripOverSseAndPost) {
  start(test_config());
  register_tools(port(), "c1", {tool_def("get_time")});
  SseClient sse(port(), "/client-tools/pending/c1");
  ASSERT_EQ(sse.status(), 200u);

  json::object body = execute_body("client_c1_get_time", {{"text", "UTC"}});
  body["sessionID"] = "ses_1";
  body["messageID"] = "msg_1";
  body["callID"] = "call_1";
  auto call = execute_async(port(), body);

  auto delivered = next_delivered(sse);
  json::value req(delivered.request);
  EXPECT_EQ(string_at(req, "/type"), "client-tool-request") << str(req);
  EXPECT_EQ(string_at(req, "/tool"), "client_c1_get_time") << str(req);
  EXPECT_EQ(string_at(req, "/sessionID"), "ses_1") << str(req);
  EXPECT_EQ(string_at(req, "/messageID"), "msg_1") << str(req);
  EXPECT_EQ(string_at(req, "/callID"), "call_1") << str(req);
  ASSERT_NE(find(req, "/input"), nullptr) << str(req);
  EXPECT_EQ(*find(req, "/input"), (json::object{{"text", "UTC"}})) << str(req);
  EXPECT_EQ(delivered.request_id().rfind("req_", 0), 0u) << str(req);
  EXPECT_FALSE(delivered.event_id.empty()) << "tool-request events carry an id for Last-Event-ID";

  json::object result = success("12:00", "Time");
  auto ack = post_result(port(), delivered.request_id(), result, "c1");
  ASSERT_TRUE(IsOk(ack));
  EXPECT_EQ(ack.json(), (json::object{{"success", true}}));

  auto res = await(call);
  ASSERT_TRUE(IsOk(res));
  EXPECT_EQ(res.json(), result) << "execute answers with the result as the client gave it";
}

TEST_F(ClientToolsStream, ExecuteGeneratesMessageAndCallIdsWhenNotGiven) {
  start(test_config());
  register_tools(port(), "c1", {tool_def("a")});
  SseClient sse(port(), "/client-tools/pending/c1");
  auto call = execute_async(port(), execute_body("client_c1_a"));
  auto delivered = next_delivered(sse);
  json::value req(delivered.request);
  EXPECT_FALSE(string_at(req, "/messageID").empty()) << str(req);
  EXPECT_FALSE(string_at(req, "/callID").empty()) << str(req);
  ASSERT_TRUE(IsOk(post_result(port(), delivered.request_id(), success("ok"))));
  EXPECT_TRUE(IsOk(await(call)));
}

TEST_F(ClientToolsStream, FlatResultFormIsAccepted) {
  start(test_config());
  register_tools(port(), "c1", {tool_def("a")});
  SseClient sse(port(), "/client-tools/pending/c1");
  auto call = execute_async(port(), execute_body("client_c1_a", {{"text", "x"}}));
  auto delivered = next_delivered(sse);
  auto ack = http_post(port(), "/client-tools/result",
                       json::object{{"requestID", delivered.request_id()},
                                    {"status", "success"},
                                    {"title", "Flat"},
                                    {"output", "flat output"}});
  ASSERT_TRUE(IsOk(ack));
  auto res = await(call);
  ASSERT_TRUE(IsOk(res));
  json::value body = res.json();
  EXPECT_EQ(string_at(body, "/status"), "success") << str(body);
  EXPECT_EQ(string_at(body, "/title"), "Flat") << str(body);
  EXPECT_EQ(string_at(body, "/output"), "flat output") << str(body);
}

TEST_F(ClientToolsStream, ClientErrorResultIsReturnedAsGiven) {
  start(test_config());
  register_tools(port(), "c1", {tool_def("a")});
  SseClient sse(port(), "/client-tools/pending/c1");
  auto call = execute_async(port(), execute_body("client_c1_a"));
  auto delivered = next_delivered(sse);
  json::object error{{"status", "error"}, {"error", "disk full"}};
  ASSERT_TRUE(IsOk(post_result(port(), delivered.request_id(), error)));
  auto res = await(call);
  ASSERT_TRUE(IsOk(res));
  EXPECT_EQ(res.json(), error);
}

TEST_F(ClientToolsStream, RoundTripOverWebSocket) {
  start(test_config());
  WsClient ws(port(), "/client-tools/ws/c1");
  ws.send_json(json::object{{"type", "register"}, {"tools", {tool_def("get_time")}}});
  auto registered = ws.next_message(5s);
  ASSERT_TRUE(registered.has_value());
  EXPECT_EQ(*registered,
            (json::object{{"type", "registered"}, {"toolIDs", json::array{"client_c1_get_time"}}}));
  EXPECT_EQ(string_at(http_get(port(), "/client-tools/tools/c1").json(), "/0/id"),
            "client_c1_get_time");

  // Nested result.
  auto call = execute_async(port(), execute_body("client_c1_get_time", {{"text", "UTC"}}));
  json::object req = next_ws_request(ws);
  EXPECT_EQ(string_at(json::value(req), "/type"), "client-tool-request") << str(req);
  EXPECT_EQ(string_at(json::value(req), "/tool"), "client_c1_get_time") << str(req);
  EXPECT_EQ(req.at("input"), (json::object{{"text", "UTC"}})) << str(req);
  json::object result = success("12:00", "Time");
  ws.send_json(
      json::object{{"type", "result"}, {"requestID", req.at("requestID")}, {"result", result}});
  auto res = await(call);
  ASSERT_TRUE(IsOk(res));
  EXPECT_EQ(res.json(), result);

  // Flat result, on the same connection.
  auto second = execute_async(port(), execute_body("client_c1_get_time"));
  req = next_ws_request(ws);
  ws.send_json(json::object{{"type", "result"},
                            {"requestID", req.at("requestID")},
                            {"status", "success"},
                            {"title", "Flat"},
                            {"output", "flat"}});
  res = await(second);
  ASSERT_TRUE(IsOk(res));
  EXPECT_EQ(string_at(res.json(), "/output"), "flat") << res.describe();

  // A client error.
  auto third = execute_async(port(), execute_body("client_c1_get_time"));
  req = next_ws_request(ws);
  json::object error{{"status", "error"}, {"error", "no clock"}};
  ws.send_json(
      json::object{{"type", "result"}, {"requestID", req.at("requestID")}, {"result", error}});
  res = await(third);
  ASSERT_TRUE(IsOk(res));
  EXPECT_EQ(res.json(), error);
}

TEST_F(ClientToolsStream, ConcurrentCallsEachGetTheirOwnResult) {
  start(test_config());
  WsClient ws(port(), "/client-tools/ws/c1");
  ws.send_json(json::object{{"type", "register"}, {"tools", {tool_def("echo")}}});
  ASSERT_TRUE(ws.next_message_of_type("registered", 5s));
  register_tools(port(), "c2", {tool_def("echo")});
  SseClient sse(port(), "/client-tools/pending/c2");

  // 16 calls to each client at once; each client answers in the reverse order of arrival, with
  // the call's own input as output.
  constexpr int kCalls = 16;
  std::vector<std::future<HttpResponse>> calls;
  for (int i = 0; i < kCalls; ++i) {
    std::string text = "call-" + std::to_string(i);
    calls.push_back(execute_async(port(), execute_body("client_c1_echo", {{"text", text}})));
    calls.push_back(execute_async(port(), execute_body("client_c2_echo", {{"text", text}})));
  }
  std::vector<json::object> ws_requests, sse_requests;
  for (int i = 0; i < kCalls; ++i)
    ws_requests.push_back(next_ws_request(ws));
  for (int i = 0; i < kCalls; ++i)
    sse_requests.push_back(next_delivered(sse).request);
  for (auto it = ws_requests.rbegin(); it != ws_requests.rend(); ++it) {
    ws.send_json(json::object{{"type", "result"},
                              {"requestID", it->at("requestID")},
                              {"result", success(string_at(json::value(*it), "/input/text"))}});
  }
  for (auto it = sse_requests.rbegin(); it != sse_requests.rend(); ++it) {
    ASSERT_TRUE(IsOk(post_result(port(), string_at(json::value(*it), "/requestID"),
                                 success(string_at(json::value(*it), "/input/text")))));
  }
  for (int i = 0; i < kCalls; ++i) {
    for (int client = 0; client < 2; ++client) {
      auto res = await(calls[static_cast<std::size_t>(2 * i + client)]);
      ASSERT_TRUE(IsOk(res));
      EXPECT_EQ(string_at(res.json(), "/output"), "call-" + std::to_string(i)) << res.describe();
    }
  }
}

TEST_F(ClientToolsStream, RequestIsQueuedUntilTheClientConnects) {
  start(test_config());
  BusEvents bus(port());
  register_tools(port(), "c1", {tool_def("a")});
  auto call = execute_async(port(), execute_body("client_c1_a", {{"text", "early"}}));
  ASSERT_TRUE(bus.next("client-tool.request"));  // the call exists before the client connects
  SseClient sse(port(), "/client-tools/pending/c1");
  auto delivered = next_delivered(sse);
  EXPECT_EQ(string_at(json::value(delivered.request), "/input/text"), "early");
  ASSERT_TRUE(IsOk(post_result(port(), delivered.request_id(), success("late but fine"))));
  auto res = await(call);
  ASSERT_TRUE(IsOk(res));
  EXPECT_EQ(string_at(res.json(), "/output"), "late but fine");
}

// ---- timeouts and cancels ------------------------------------------------------------------

TEST_F(ClientToolsStream, TimeoutIs504AndTheSseClientGetsToolCancel) {
  start(test_config());
  register_tools(port(), "c1", {tool_def("a")});
  SseClient sse(port(), "/client-tools/pending/c1");
  auto t0 = Clock::now();
  auto call = execute_async(port(), execute_body("client_c1_a", {}, 300));
  auto delivered = next_delivered(sse);
  auto res = await(call);
  auto ms = elapsed_ms(t0);
  EXPECT_TRUE(IsError(res, 504, "TIMEOUT"));
  EXPECT_GE(ms, 250);
  EXPECT_LT(ms, 3000);

  auto cancel = sse.next_event_named("tool-cancel", 3s);
  ASSERT_TRUE(cancel.has_value()) << "no tool-cancel after the timeout";
  json::value data = cancel->json();
  EXPECT_EQ(string_at(data, "/requestID"), delivered.request_id()) << cancel->data;
  EXPECT_TRUE(contains(string_at(data, "/reason"), "timeout")) << cancel->data;

  // The call has ended: a late answer changes nothing.
  EXPECT_TRUE(
      IsError(post_result(port(), delivered.request_id(), success("late")), 409, "CONFLICT"));
}

TEST_F(ClientToolsStream, TimeoutIs504AndTheWebSocketClientGetsCancel) {
  start(test_config());
  WsClient ws(port(), "/client-tools/ws/c1");
  ws.send_json(json::object{{"type", "register"}, {"tools", {tool_def("a")}}});
  ASSERT_TRUE(ws.next_message_of_type("registered", 5s));
  auto call = execute_async(port(), execute_body("client_c1_a", {}, 300));
  json::object req = next_ws_request(ws);
  EXPECT_TRUE(IsError(await(call), 504, "TIMEOUT"));

  auto cancel = ws.next_message_of_type("cancel", 3s);
  ASSERT_TRUE(cancel.has_value()) << "no cancel message after the timeout";
  EXPECT_EQ(string_at(*cancel, "/requestID"), string_at(json::value(req), "/requestID"))
      << str(*cancel);
  EXPECT_TRUE(contains(string_at(*cancel, "/reason"), "timeout")) << str(*cancel);

  // A late result over the socket gets an error naming the conflict.
  ws.send_json(json::object{
      {"type", "result"}, {"requestID", req.at("requestID")}, {"result", success("late")}});
  auto err = ws.next_message_of_type("error", 3s);
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(string_at(*err, "/code"), "CONFLICT") << str(*err);
  EXPECT_EQ(string_at(*err, "/requestID"), string_at(json::value(req), "/requestID")) << str(*err);
  EXPECT_FALSE(string_at(*err, "/error").empty()) << str(*err);
}

TEST_F(ClientToolsStream, CallerDisconnectCancelsTheCall) {
  start(test_config());
  register_tools(port(), "c1", {tool_def("a")});
  SseClient sse(port(), "/client-tools/pending/c1");
  std::string body = json::serialize(execute_body("client_c1_a", {}, 10000));
  Delivered delivered;
  {
    RawConnection caller(port());
    caller.send(
        "POST /client-tools/execute HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: application/json\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body);
    delivered = next_delivered(sse);
    caller.close();
  }
  auto cancel = sse.next_event_named("tool-cancel", 3s);
  ASSERT_TRUE(cancel.has_value()) << "the client was not told that the caller went away";
  EXPECT_EQ(string_at(cancel->json(), "/requestID"), delivered.request_id()) << cancel->data;
  EXPECT_EQ(string_at(cancel->json(), "/reason"), "caller disconnected") << cancel->data;
  EXPECT_TRUE(
      IsError(post_result(port(), delivered.request_id(), success("late")), 409, "CONFLICT"));
}

TEST_F(ClientToolsStream, UnregisteringAToolEndsItsPendingCalls) {
  start(test_config());
  register_tools(port(), "c1", {tool_def("a"), tool_def("b")});
  SseClient sse(port(), "/client-tools/pending/c1");
  auto call = execute_async(port(), execute_body("client_c1_a", {}, 10000));
  auto delivered = next_delivered(sse);
  auto t0 = Clock::now();
  ASSERT_TRUE(IsOk(http_delete(port(), "/client-tools/unregister",
                               json::object{{"clientID", "c1"}, {"toolIDs", {"a"}}})));
  auto res = await(call);
  EXPECT_TRUE(IsError(res, 503, "UNAVAILABLE", {"unregistered"}));
  EXPECT_LT(elapsed_ms(t0), 2000);
  auto cancel = sse.next_event_named("tool-cancel", 3s);
  ASSERT_TRUE(cancel.has_value());
  EXPECT_EQ(string_at(cancel->json(), "/requestID"), delivered.request_id()) << cancel->data;
}

// ---- disconnects and the reconnect grace ----------------------------------------------------

TEST_F(ClientToolsStream, SseDisconnectMidCallFailsAtOnceWithoutGrace) {
  start(test_config(json::object{{"reconnectGrace", 0}}));
  register_tools(port(), "c1", {tool_def("a")});
  SseClient sse(port(), "/client-tools/pending/c1");
  auto call = execute_async(port(), execute_body("client_c1_a", {}, 10000));
  next_delivered(sse);
  auto t0 = Clock::now();
  sse.close();
  auto res = await(call);
  EXPECT_TRUE(IsError(res, 503, "UNAVAILABLE", {"Client disconnected"}));
  EXPECT_LT(elapsed_ms(t0), 2000) << "with a grace of 0 the call fails at the disconnect";
  EXPECT_EQ(http_get(port(), "/client-tools/tools/c1").json(), json::array{});
}

TEST_F(ClientToolsStream, WebSocketDisconnectMidCallFailsAtOnceWithoutGrace) {
  start(test_config(json::object{{"reconnectGrace", 0}}));
  WsClient ws(port(), "/client-tools/ws/c1");
  ws.send_json(json::object{{"type", "register"}, {"tools", {tool_def("a")}}});
  ASSERT_TRUE(ws.next_message_of_type("registered", 5s));
  auto call = execute_async(port(), execute_body("client_c1_a", {}, 10000));
  next_ws_request(ws);
  auto t0 = Clock::now();
  ws.drop();
  auto res = await(call);
  EXPECT_TRUE(IsError(res, 503, "UNAVAILABLE", {"Client disconnected"}));
  EXPECT_LT(elapsed_ms(t0), 2000);
  EXPECT_EQ(http_get(port(), "/client-tools/tools/c1").json(), json::array{});
}

TEST_F(ClientToolsStream, DisconnectMidCallFailsWhenTheGraceEndsNotAtTheTimeout) {
  start(test_config(json::object{{"reconnectGrace", 1500}}));
  register_tools(port(), "c1", {tool_def("a")});
  SseClient sse(port(), "/client-tools/pending/c1");
  auto call = execute_async(port(), execute_body("client_c1_a", {}, 10000));
  next_delivered(sse);
  auto t0 = Clock::now();
  sse.close();
  auto res = await(call);
  auto ms = elapsed_ms(t0);
  EXPECT_TRUE(IsError(res, 503, "UNAVAILABLE", {"Client disconnected"}));
  EXPECT_GE(ms, 1300) << "failed before the grace ended";
  EXPECT_LT(ms, 5000) << "failed long after the grace (the call's timeout is 10 s)";
  EXPECT_EQ(http_get(port(), "/client-tools/tools/c1").json(), json::array{})
      << "the tools go when the grace ends";
}

// Drops the pending stream with call A delivered, starts call B while the client is away, then
// reconnects with the id of A's event (as a header or in the URL): B is sent, A is not sent again,
// both can be answered, and the client keeps its tools after the grace.
void reconnect_with_last_event_id(unsigned short port, bool as_header) {
  BusEvents bus(port);
  register_tools(port, "c1", {tool_def("a")});
  auto call_a = execute_async(port, execute_body("client_c1_a", {{"text", "A"}}, 10000));
  Delivered a;
  {
    SseClient first(port, "/client-tools/pending/c1");
    a = next_delivered(first);
    ASSERT_FALSE(a.event_id.empty());
    first.close();
  }
  ASSERT_TRUE(bus.next_where("client-tool.disconnected", "/properties/clientID", "c1"));
  auto call_b = execute_async(port, execute_body("client_c1_a", {{"text", "B"}}, 10000));
  auto b_event = bus.next_where("client-tool.request", "/properties/request/input/text", "B");
  ASSERT_TRUE(b_event.has_value());
  std::string b_id = string_at(json::value(*b_event), "/properties/request/requestID");

  SseClient::Options options;
  std::string target = "/client-tools/pending/c1";
  if (as_header)
    options.last_event_id = a.event_id;
  else
    target += "?lastEventID=" + a.event_id;
  SseClient second(port, target, options);
  ASSERT_EQ(second.status(), 200u);
  auto replayed = next_delivered(second);
  EXPECT_EQ(replayed.request_id(), b_id) << "expected only the request after Last-Event-ID "
                                         << a.event_id << ", got " << str(replayed.request);

  ASSERT_TRUE(IsOk(post_result(port, a.request_id(), success("answer A"), "c1")));
  ASSERT_TRUE(IsOk(post_result(port, b_id, success("answer B"), "c1")));
  auto res_a = await(call_a);
  auto res_b = await(call_b);
  ASSERT_TRUE(IsOk(res_a));
  ASSERT_TRUE(IsOk(res_b));
  EXPECT_EQ(string_at(res_a.json(), "/output"), "answer A");
  EXPECT_EQ(string_at(res_b.json(), "/output"), "answer B");

  // Let the grace that started at the disconnect run out: the reconnected client keeps its tools.
  std::this_thread::sleep_for(1300ms);
  EXPECT_EQ(string_at(http_get(port, "/client-tools/tools/c1").json(), "/0/id"), "client_c1_a");
}

TEST_F(ClientToolsStream, SseReconnectWithLastEventIdHeaderWithinGrace) {
  start(test_config(json::object{{"reconnectGrace", 1000}}));
  reconnect_with_last_event_id(port(), true);
}

TEST_F(ClientToolsStream, SseReconnectWithLastEventIdQueryWithinGrace) {
  start(test_config(json::object{{"reconnectGrace", 1000}}));
  reconnect_with_last_event_id(port(), false);
}

TEST_F(ClientToolsStream, SseReconnectWithoutLastEventIdResendsEveryPendingRequest) {
  start(test_config(json::object{{"reconnectGrace", 2000}}));
  register_tools(port(), "c1", {tool_def("a")});
  auto call = execute_async(port(), execute_body("client_c1_a", {}, 10000));
  std::string request_id;
  {
    SseClient first(port(), "/client-tools/pending/c1");
    request_id = next_delivered(first).request_id();
    first.close();
  }
  SseClient second(port(), "/client-tools/pending/c1");
  auto again = next_delivered(second);
  EXPECT_EQ(again.request_id(), request_id);
  ASSERT_TRUE(IsOk(post_result(port(), request_id, success("after reconnect"))));
  auto res = await(call);
  ASSERT_TRUE(IsOk(res));
  EXPECT_EQ(string_at(res.json(), "/output"), "after reconnect");
}

TEST_F(ClientToolsStream, WebSocketReconnectWithinGraceReplaysAndKeepsTools) {
  start(test_config(json::object{{"reconnectGrace", 1000}}));
  auto call_setup = [&] {
    WsClient first(port(), "/client-tools/ws/c1");
    first.send_json(json::object{{"type", "register"}, {"tools", {tool_def("a")}}});
    if (!first.next_message_of_type("registered", 5s))
      throw std::runtime_error("setup: no registered message");
    auto call = execute_async(port(), execute_body("client_c1_a", {}, 10000));
    std::string id(next_ws_request(first).at("requestID").as_string());
    first.drop();
    return std::make_pair(std::move(call), id);
  };
  auto [call, request_id] = call_setup();

  WsClient second(port(), "/client-tools/ws/c1");
  json::object replayed = next_ws_request(second);
  EXPECT_EQ(string_at(json::value(replayed), "/requestID"), request_id);
  second.send_json(json::object{
      {"type", "result"}, {"requestID", request_id}, {"result", success("after reconnect")}});
  auto res = await(call);
  ASSERT_TRUE(IsOk(res));
  EXPECT_EQ(string_at(res.json(), "/output"), "after reconnect");

  std::this_thread::sleep_for(1300ms);  // past the grace that began at the drop
  EXPECT_EQ(string_at(http_get(port(), "/client-tools/tools/c1").json(), "/0/id"), "client_c1_a");
  // And the tool still works over the new connection.
  auto next = execute_async(port(), execute_body("client_c1_a"));
  json::object req = next_ws_request(second);
  second.send_json(json::object{
      {"type", "result"}, {"requestID", req.at("requestID")}, {"result", success("again")}});
  EXPECT_TRUE(IsOk(await(next)));
}

TEST_F(ClientToolsStream, ASecondConnectionOfTheSameClientReplacesTheFirst) {
  start(test_config(json::object{{"reconnectGrace", 1000}}));
  register_tools(port(), "c1", {tool_def("a")});
  SseClient first(port(), "/client-tools/pending/c1");
  SseClient second(port(), "/client-tools/pending/c1");
  EXPECT_TRUE(first.wait_closed(3s)) << "the first stream was not closed";
  auto call = execute_async(port(), execute_body("client_c1_a"));
  auto delivered = next_delivered(second);
  ASSERT_TRUE(IsOk(post_result(port(), delivered.request_id(), success("ok"))));
  EXPECT_TRUE(IsOk(await(call)));

  WsClient ws1(port(), "/client-tools/ws/c2");
  WsClient ws2(port(), "/client-tools/ws/c2");
  EXPECT_TRUE(ws1.wait_closed(3s)) << "the first WebSocket was not closed";
  EXPECT_FALSE(ws2.closed());
}

// ---- results bound to the call ----------------------------------------------------------------

TEST_F(ClientToolsStream, DuplicateResultIs409AndChangesNothing) {
  start(test_config());
  BusEvents bus(port());
  register_tools(port(), "c1", {tool_def("a")});
  SseClient sse(port(), "/client-tools/pending/c1");
  auto call = execute_async(port(), execute_body("client_c1_a", {{"text", "first"}}));
  auto delivered = next_delivered(sse);
  ASSERT_TRUE(IsOk(post_result(port(), delivered.request_id(), success("one"))));
  auto again = post_result(port(), delivered.request_id(), success("two"));
  EXPECT_TRUE(IsError(again, 409, "CONFLICT"));
  auto flat_again = http_post(
      port(), "/client-tools/result",
      json::object{
          {"requestID", delivered.request_id()}, {"status", "error"}, {"error", "too late"}});
  EXPECT_TRUE(IsError(flat_again, 409, "CONFLICT"));
  auto res = await(call);
  ASSERT_TRUE(IsOk(res));
  EXPECT_EQ(string_at(res.json(), "/output"), "one");

  // On the bus: exactly one ending for the call, and the next call's request comes right after.
  auto marker = execute_async(port(), execute_body("client_c1_a", {{"text", "marker"}}));
  auto marker_request = next_delivered(sse);
  ASSERT_TRUE(IsOk(post_result(port(), marker_request.request_id(), success("m"))));
  ASSERT_TRUE(IsOk(await(marker)));
  auto completed = bus.next("client-tool.completed");
  ASSERT_TRUE(completed.has_value());
  EXPECT_EQ(string_at(json::value(*completed), "/properties/requestID"), delivered.request_id());
  for (;;) {
    auto e = bus.sse().next_event(5s);
    ASSERT_TRUE(e.has_value()) << "the marker call's events did not arrive";
    json::value v = e->json();
    std::string type = string_at(v, "/type");
    std::string id = string_at(v, "/properties/requestID");
    if (type == "client-tool.completed" || type == "client-tool.failed") {
      EXPECT_NE(id, delivered.request_id()) << "a second ending for the answered call: " << str(v);
    }
    if (type == "client-tool.completed" && id == marker_request.request_id()) break;
  }
}

TEST_F(ClientToolsStream, ResultFromAnotherClientIs403AndTheCallStaysOpen) {
  start(test_config());
  register_tools(port(), "c1", {tool_def("a")});
  register_tools(port(), "c2", {tool_def("a")});
  SseClient sse(port(), "/client-tools/pending/c1");
  auto call = execute_async(port(), execute_body("client_c1_a"));
  auto delivered = next_delivered(sse);

  auto forged = post_result(port(), delivered.request_id(), success("forged"), "c2");
  EXPECT_TRUE(IsError(forged, 403, "FORBIDDEN"));
  auto forged_progress = http_post(
      port(), "/client-tools/progress",
      json::object{{"requestID", delivered.request_id()}, {"clientID", "c2"}, {"title", "x"}});
  EXPECT_TRUE(IsError(forged_progress, 403, "FORBIDDEN"));

  ASSERT_TRUE(IsOk(post_result(port(), delivered.request_id(), success("real"), "c1")));
  auto res = await(call);
  ASSERT_TRUE(IsOk(res));
  EXPECT_EQ(string_at(res.json(), "/output"), "real");
}

TEST_F(ClientToolsStream, WebSocketResultForAnotherClientsRequestGetsAnError) {
  start(test_config());
  WsClient owner(port(), "/client-tools/ws/c1");
  owner.send_json(json::object{{"type", "register"}, {"tools", {tool_def("a")}}});
  ASSERT_TRUE(owner.next_message_of_type("registered", 5s));
  WsClient other(port(), "/client-tools/ws/c2");
  other.send_json(json::object{{"type", "register"}, {"tools", {tool_def("a")}}});
  ASSERT_TRUE(other.next_message_of_type("registered", 5s));

  auto call = execute_async(port(), execute_body("client_c1_a"));
  json::object req = next_ws_request(owner);
  std::string id(req.at("requestID").as_string());
  other.send_json(
      json::object{{"type", "result"}, {"requestID", id}, {"result", success("forged")}});
  auto err = other.next_message_of_type("error", 3s);
  ASSERT_TRUE(err.has_value()) << "the forged result got no error";
  EXPECT_EQ(string_at(*err, "/code"), "FORBIDDEN") << str(*err);
  EXPECT_EQ(string_at(*err, "/requestID"), id) << str(*err);

  owner.send_json(json::object{{"type", "result"}, {"requestID", id}, {"result", success("real")}});
  auto res = await(call);
  ASSERT_TRUE(IsOk(res));
  EXPECT_EQ(string_at(res.json(), "/output"), "real");
  EXPECT_FALSE(other.closed()) << "an error does not end the connection";
}

TEST_F(ClientToolsStream, MalformedResultsAre400AndLeaveTheCallPending) {
  start(test_config());
  register_tools(port(), "c1", {tool_def("a")});
  SseClient sse(port(), "/client-tools/pending/c1");
  auto call = execute_async(port(), execute_body("client_c1_a", {}, 10000));
  auto delivered = next_delivered(sse);
  std::string id = delivered.request_id();

  struct Bad {
    json::object body;
    const char* field;
  };
  std::vector<Bad> bad_results = {
      {{{"requestID", id}, {"result", "ok"}}, "result"},
      {{{"requestID", id}, {"result", json::object{}}}, "status"},
      {{{"requestID", id}, {"result", {{"status", 1}}}}, "result.status"},
      {{{"requestID", id}, {"result", {{"status", "maybe"}}}}, "result.status"},
      {{{"requestID", id}, {"result", {{"status", "success"}, {"output", 5}}}}, "result.output"},
      {{{"requestID", id}, {"result", {{"status", "success"}, {"title", false}}}}, "result.title"},
      {{{"requestID", id}, {"result", {{"status", "success"}, {"metadata", "x"}}}},
       "result.metadata"},
      {{{"requestID", id}, {"result", {{"status", "error"}, {"error", 42}}}}, "result.error"},
      {{{"requestID", id}, {"status", "success"}, {"output", json::array{}}}, "output"},
      {{{"requestID", id}}, "status"},
      {{{"requestID", id}, {"clientID", 5}, {"status", "success"}}, "clientID"},
  };
  for (const auto& b : bad_results) {
    auto res = http_post(port(), "/client-tools/result", b.body);
    EXPECT_TRUE(IsError(res, 400, "INVALID_REQUEST", {b.field})) << str(b.body);
  }
  std::vector<Bad> bad_progress = {
      {{{"requestID", id}, {"metadata", "x"}}, "metadata"},
      {{{"requestID", id}, {"title", 5}}, "title"},
      {{{"requestID", id}, {"clientID", 5}}, "clientID"},
  };
  for (const auto& b : bad_progress) {
    auto res = http_post(port(), "/client-tools/progress", b.body);
    EXPECT_TRUE(IsError(res, 400, "INVALID_REQUEST", {b.field})) << str(b.body);
  }

  EXPECT_EQ(call.wait_for(0s), std::future_status::timeout) << "a malformed result ended the call";
  ASSERT_TRUE(IsOk(post_result(port(), id, success("finally"))));
  auto res = await(call);
  ASSERT_TRUE(IsOk(res));
  EXPECT_EQ(string_at(res.json(), "/output"), "finally");
}

// ---- WebSocket protocol errors ---------------------------------------------------------------

TEST_F(ClientToolsStream, WebSocketBadFramesGetAnErrorAndTheConnectionStaysUp) {
  start(test_config());
  WsClient ws(port(), "/client-tools/ws/c1");
  auto expect_error = [&](const std::string& frame, std::string_view mentions = {}) {
    SCOPED_TRACE(frame);
    ws.send_text(frame);
    auto m = ws.next_message(3s);
    ASSERT_TRUE(m.has_value()) << "no answer";
    EXPECT_EQ(string_at(*m, "/type"), "error") << str(*m);
    std::string error = string_at(*m, "/error");
    EXPECT_FALSE(error.empty()) << str(*m);
    if (!mentions.empty()) {
      EXPECT_TRUE(contains(error, mentions)) << str(*m);
    }
    EXPECT_FALSE(ws.closed()) << ws.close_description();
  };
  expect_error("this is not json");
  expect_error("{\"type\": \"register\", ");
  expect_error("[1, 2, 3]");
  expect_error(R"({"type": "dance"})", "dance");
  expect_error(R"({"tools": []})", "type");
  expect_error(R"({"type": 7})", "type");
  expect_error(R"({"type": "register", "tools": "x"})", "tools");
  expect_error(R"({"type": "register", "tools": [{"id": "bad name", "description": "d"}]})",
               "tools[0].id");
  expect_error(R"({"type": "result", "result": {"status": "success"}})", "requestID");
  expect_error(R"({"type": "unregister", "toolIDs": "a"})", "toolIDs");

  ws.send_json(json::object{
      {"type", "result"}, {"requestID", "req_never_issued"}, {"result", success("x")}});
  auto unknown = ws.next_message(3s);
  ASSERT_TRUE(unknown.has_value());
  EXPECT_EQ(string_at(*unknown, "/type"), "error") << str(*unknown);
  EXPECT_EQ(string_at(*unknown, "/code"), "NOT_FOUND") << str(*unknown);

  // Still up, and still works.
  ws.send_json(json::object{{"type", "register"}, {"tools", {tool_def("a")}}});
  auto registered = ws.next_message(3s);
  ASSERT_TRUE(registered.has_value());
  EXPECT_EQ(string_at(*registered, "/type"), "registered") << str(*registered);
  auto call = execute_async(port(), execute_body("client_c1_a"));
  json::object req = next_ws_request(ws);
  ws.send_json(json::object{
      {"type", "result"}, {"requestID", req.at("requestID")}, {"result", success("fine")}});
  EXPECT_TRUE(IsOk(await(call)));
}

TEST_F(ClientToolsStream, WebSocketUnregister) {
  start(test_config());
  WsClient ws(port(), "/client-tools/ws/c1");
  ws.send_json(json::object{{"type", "register"}, {"tools", {tool_def("a"), tool_def("b")}}});
  ASSERT_TRUE(ws.next_message_of_type("registered", 5s));
  ws.send_json(json::object{{"type", "unregister"}, {"toolIDs", {"a"}}});
  auto m = ws.next_message(3s);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(*m, (json::object{{"type", "unregistered"}, {"toolIDs", json::array{"client_c1_a"}}}));
  auto tools = http_get(port(), "/client-tools/tools/c1").json();
  ASSERT_EQ(tools.as_array().size(), 1u) << str(tools);
  EXPECT_EQ(string_at(tools, "/0/id"), "client_c1_b");

  ws.send_json(json::object{{"type", "unregister"}});
  m = ws.next_message(3s);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(*m, (json::object{{"type", "unregistered"}, {"toolIDs", json::array{"client_c1_b"}}}));
  EXPECT_EQ(http_get(port(), "/client-tools/tools/c1").json(), json::array{});
}

TEST_F(ClientToolsStream, WebSocketThatDoesNotAnswerPingsIsClosed) {
  start(test_config(json::object{{"keepaliveInterval", 100}}));
  // A client that completes the handshake and then never reads, so never answers a ping.
  RawConnection mute(port());
  mute.send(ws_upgrade_request("/client-tools/ws/mute"));
  auto handshake = mute.read_response(3s);
  ASSERT_TRUE(handshake.has_value()) << mute.received();
  ASSERT_EQ(handshake->status, 101u) << handshake->describe();
  // A client that answers pings (the WebSocket library does it while reading).
  WsClient alive(port(), "/client-tools/ws/alive");

  EXPECT_TRUE(mute.wait_closed(3s)) << "a client that never answers pings was not closed";
  // It was pinged first: a ping frame (FIN + opcode 9) came before the end.
  EXPECT_NE(mute.received().find('\x89'), std::string::npos) << "closed without a ping";
  // Several intervals later the answering client is still connected, and still works.
  EXPECT_FALSE(alive.wait_closed(500ms))
      << "a client that answers pings was closed: " << alive.close_description();
  alive.send_json(json::object{{"type", "register"}, {"tools", {tool_def("a")}}});
  EXPECT_TRUE(alive.next_message_of_type("registered", 3s));
}

// ---- progress --------------------------------------------------------------------------------

TEST_F(ClientToolsStream, ProgressIsPublishedOverHttpAndWebSocket) {
  start(test_config());
  BusEvents bus(port());
  WsClient ws(port(), "/client-tools/ws/c1");
  ws.send_json(json::object{{"type", "register"}, {"tools", {tool_def("a")}}});
  ASSERT_TRUE(ws.next_message_of_type("registered", 5s));
  auto call = execute_async(port(), execute_body("client_c1_a"));
  std::string id(next_ws_request(ws).at("requestID").as_string());

  auto ack = http_post(port(), "/client-tools/progress",
                       json::object{{"requestID", id},
                                    {"clientID", "c1"},
                                    {"metadata", {{"percent", 50}}},
                                    {"title", "halfway"}});
  ASSERT_TRUE(IsOk(ack));
  EXPECT_EQ(ack.json(), (json::object{{"success", true}}));
  auto first = bus.next("client-tool.progress");
  ASSERT_TRUE(first.has_value());
  json::value p1(*first);
  EXPECT_EQ(string_at(p1, "/properties/requestID"), id) << str(p1);
  EXPECT_EQ(string_at(p1, "/properties/clientID"), "c1") << str(p1);
  EXPECT_EQ(string_at(p1, "/properties/title"), "halfway") << str(p1);
  ASSERT_NE(find(p1, "/properties/metadata/percent"), nullptr) << str(p1);
  EXPECT_EQ(*find(p1, "/properties/metadata/percent"), json::value(50)) << str(p1);

  ws.send_json(
      json::object{{"type", "progress"}, {"requestID", id}, {"metadata", {{"percent", 90}}}});
  auto second = bus.next("client-tool.progress");
  ASSERT_TRUE(second.has_value());
  ASSERT_NE(find(json::value(*second), "/properties/metadata/percent"), nullptr) << str(*second);
  EXPECT_EQ(*find(json::value(*second), "/properties/metadata/percent"), json::value(90))
      << str(*second);

  ws.send_json(json::object{{"type", "result"}, {"requestID", id}, {"result", success("done")}});
  EXPECT_TRUE(IsOk(await(call)));
}

TEST_F(ClientToolsStream, ProgressExtendsTheDeadlineUpToMaxTimeout) {
  start(test_config(json::object{{"maxTimeout", 1500}}));
  register_tools(port(), "c1", {tool_def("a")});
  SseClient sse(port(), "/client-tools/pending/c1");
  auto progress = [&](const std::string& id) {
    return http_post(port(), "/client-tools/progress",
                     json::object{{"requestID", id}, {"metadata", {{"alive", true}}}});
  };

  // Timeout 600 ms, progress every 250 ms, answer after 850 ms: still alive.
  auto call = execute_async(port(), execute_body("client_c1_a", {}, 600));
  std::string id = next_delivered(sse).request_id();
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(250ms);
    ASSERT_TRUE(IsOk(progress(id))) << "progress " << i + 1;
  }
  std::this_thread::sleep_for(100ms);
  ASSERT_TRUE(IsOk(post_result(port(), id, success("slow but steady"))));
  auto res = await(call);
  ASSERT_TRUE(IsOk(res));
  EXPECT_EQ(string_at(res.json(), "/output"), "slow but steady");

  // The hard cap: with progress every 250 ms the call still ends at maxTimeout (1500 ms).
  auto t0 = Clock::now();
  auto capped = execute_async(port(), execute_body("client_c1_a", {}, 500));
  id = next_delivered(sse).request_id();
  while (capped.wait_for(250ms) != std::future_status::ready && elapsed_ms(t0) < 5000)
    progress(id);
  auto ms = elapsed_ms(t0);
  EXPECT_TRUE(IsError(await(capped), 504, "TIMEOUT"));
  EXPECT_GE(ms, 1300);
  EXPECT_LT(ms, 3000);
}

// ---- /event ------------------------------------------------------------------------------------

TEST_F(ClientToolsStream, EventStreamCarriesTheClientToolEvents) {
  start(test_config());
  BusEvents bus(port());
  EXPECT_EQ(bus.sse().status(), 200u);
  EXPECT_EQ(bus.sse().header("content-type").value_or("").rfind("text/event-stream", 0), 0u);
  auto first = bus.sse().next_event(5s);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(string_at(first->json(), "/type"), "server.connected") << first->data;
  EXPECT_NE(find(first->json(), "/properties"), nullptr) << first->data;

  WsClient ws(port(), "/client-tools/ws/c1");
  ws.send_json(json::object{{"type", "register"}, {"tools", {tool_def("a")}}});
  ASSERT_TRUE(ws.next_message_of_type("registered", 5s));

  auto connected = bus.next("client-tool.connected");
  ASSERT_TRUE(connected.has_value());
  EXPECT_EQ(string_at(json::value(*connected), "/properties/clientID"), "c1");
  auto registered = bus.next("client-tool.registered");
  ASSERT_TRUE(registered.has_value());
  EXPECT_EQ(json::value(*registered).at_pointer("/properties"),
            (json::object{{"clientID", "c1"}, {"toolIDs", json::array{"client_c1_a"}}}));

  // A successful call: request, executing, completed, in that order.
  json::object body = execute_body("client_c1_a", {{"text", "hi"}});
  body["sessionID"] = "ses_1";
  body["messageID"] = "msg_1";
  body["callID"] = "call_1";
  auto call = execute_async(port(), body);
  json::object req = next_ws_request(ws);
  std::string id(req.at("requestID").as_string());
  ws.send_json(json::object{{"type", "result"}, {"requestID", id}, {"result", success("ok")}});
  ASSERT_TRUE(IsOk(await(call)));

  auto request = bus.next("client-tool.request");
  ASSERT_TRUE(request.has_value());
  json::value rq(*request);
  EXPECT_EQ(string_at(rq, "/properties/clientID"), "c1") << str(rq);
  EXPECT_EQ(string_at(rq, "/properties/request/requestID"), id) << str(rq);
  EXPECT_EQ(string_at(rq, "/properties/request/tool"), "client_c1_a") << str(rq);
  EXPECT_EQ(string_at(rq, "/properties/request/input/text"), "hi") << str(rq);

  auto expect_call_properties = [&](const json::value& e) {
    EXPECT_EQ(string_at(e, "/properties/sessionID"), "ses_1") << str(e);
    EXPECT_EQ(string_at(e, "/properties/messageID"), "msg_1") << str(e);
    EXPECT_EQ(string_at(e, "/properties/callID"), "call_1") << str(e);
    EXPECT_EQ(string_at(e, "/properties/tool"), "client_c1_a") << str(e);
    EXPECT_EQ(string_at(e, "/properties/clientID"), "c1") << str(e);
    EXPECT_EQ(string_at(e, "/properties/requestID"), id) << str(e);
  };
  auto executing = bus.next("client-tool.executing");
  ASSERT_TRUE(executing.has_value());
  expect_call_properties(json::value(*executing));
  auto completed = bus.next("client-tool.completed");
  ASSERT_TRUE(completed.has_value());
  expect_call_properties(json::value(*completed));
  EXPECT_EQ(json::value(*completed).at_pointer("/properties/success"), json::value(true))
      << str(*completed);

  // A call the client fails.
  auto failing = execute_async(port(), execute_body("client_c1_a"));
  std::string failing_id(next_ws_request(ws).at("requestID").as_string());
  ws.send_json(json::object{{"type", "result"},
                            {"requestID", failing_id},
                            {"result", {{"status", "error"}, {"error", "boom"}}}});
  ASSERT_TRUE(IsOk(await(failing)));
  auto failed = bus.next("client-tool.failed");
  ASSERT_TRUE(failed.has_value());
  EXPECT_EQ(string_at(json::value(*failed), "/properties/requestID"), failing_id) << str(*failed);
  EXPECT_EQ(string_at(json::value(*failed), "/properties/error"), "boom") << str(*failed);

  // A timed-out call fails too, with the reason.
  auto timing_out = execute_async(port(), execute_body("client_c1_a", {}, 100));
  std::string timeout_id(next_ws_request(ws).at("requestID").as_string());
  EXPECT_TRUE(IsError(await(timing_out), 504, "TIMEOUT"));
  auto timed_out =
      bus.next_where("client-tool.failed", "/properties/requestID", timeout_id.c_str());
  ASSERT_TRUE(timed_out.has_value());
  EXPECT_FALSE(string_at(json::value(*timed_out), "/properties/error").empty()) << str(*timed_out);

  ws.send_json(json::object{{"type", "unregister"}});
  ASSERT_TRUE(ws.next_message_of_type("unregistered", 5s));
  auto unregistered = bus.next("client-tool.unregistered");
  ASSERT_TRUE(unregistered.has_value());
  EXPECT_EQ(json::value(*unregistered).at_pointer("/properties"),
            (json::object{{"clientID", "c1"}, {"toolIDs", json::array{"client_c1_a"}}}));

  ws.close();
  auto disconnected = bus.next("client-tool.disconnected");
  ASSERT_TRUE(disconnected.has_value());
  EXPECT_EQ(string_at(json::value(*disconnected), "/properties/clientID"), "c1");
}

TEST_F(ClientToolsStream, EventStreamSendsHeartbeats) {
  start(test_config(json::object{{"keepaliveInterval", 100}}));
  BusEvents bus(port());
  auto t0 = Clock::now();
  ASSERT_TRUE(bus.next("server.heartbeat", 2s));
  ASSERT_TRUE(bus.next("server.heartbeat", 2s));
  EXPECT_LT(elapsed_ms(t0), 2000);
}

TEST_F(ClientToolsStream, EventStreamIdsResumeAndBadLastEventIdsCountAsNone) {
  start(test_config());
  SseClient first(port(), "/event");
  ASSERT_TRUE(first.next_event(5s));  // server.connected: the stream's log records from here
  WsClient tool_client(port(), "/client-tools/ws/c1");
  tool_client.send_json(json::object{{"type", "register"}, {"tools", {tool_def("echo")}}});
  ASSERT_TRUE(tool_client.next_message_of_type("registered", 5s));
  std::optional<SseEvent> registered;
  while (!registered || string_at(registered->json(), "/type") != "client-tool.registered")
    ASSERT_TRUE(registered = first.next_event(5s));
  ASSERT_TRUE(registered->id);

  auto connected = [&](std::optional<std::string> id) {
    SseClient::Options o;
    o.last_event_id = std::move(id);
    SseClient s(port(), "/event", o);
    EXPECT_EQ(s.status(), 200u);
    auto e = s.next_event(5s);
    EXPECT_TRUE(e);
    EXPECT_EQ(string_at(e->json(), "/type"), "server.connected");
    return json::value(e->json().at("properties"));
  };
  // Just before the registration: resumed, and the registration comes again.
  std::string before = std::to_string(std::stoull(*registered->id) - 1);
  {
    SseClient::Options o;
    o.last_event_id = before;
    SseClient again(port(), "/event", o);
    auto hello = again.next_event(5s);
    ASSERT_TRUE(hello);
    EXPECT_EQ(hello->json().at("properties"), json::parse(R"({"resumed": true})"));
    auto replayed = again.next_event(5s);
    ASSERT_TRUE(replayed);
    EXPECT_EQ(replayed->id, registered->id);
    EXPECT_EQ(replayed->data, registered->data);
  }
  EXPECT_EQ(connected("1"), json::parse(R"({"resumed": false})"));
  EXPECT_EQ(connected("18446744073709551615"), json::parse(R"({"resumed": false})"));
  for (const char* bad : {"abc", "-5", "1.5", "0x10", "99999999999999999999999", "12abc"})
    EXPECT_EQ(connected(std::string(bad)), json::parse("{}")) << bad;
  // The server is still well.
  EXPECT_EQ(connected(std::nullopt), json::parse("{}"));
}

// ---- slow consumers --------------------------------------------------------------------------

TEST_F(ClientToolsStream, SlowEventSubscriberIsDroppedWhileOthersReceiveEverything) {
  start(test_config({}, json::object{{"subscriberQueueLimit", 16}}));
  WsClient tool_client(port(), "/client-tools/ws/c1");
  tool_client.send_json(json::object{{"type", "register"}, {"tools", {tool_def("echo")}}});
  ASSERT_TRUE(tool_client.next_message_of_type("registered", 5s));

  BusEvents fast(port());
  ASSERT_TRUE(fast.next("server.connected"));
  SseClient::Options stalled;
  stalled.read = false;
  stalled.receive_buffer = 4096;
  SseClient slow(port(), "/event", stalled);
  ASSERT_EQ(slow.status(), 200u);

  // 48 calls with 200 KB inputs: each input goes out in a client-tool.request frame, about
  // 10 MB in all, far more than the socket buffers and 16 queued frames of the stalled reader.
  constexpr int kCalls = 48;
  const std::string payload(200 * 1024, 'x');
  std::vector<std::string> ids;
  auto t0 = Clock::now();
  for (int i = 0; i < kCalls; ++i) {
    auto call = execute_async(
        port(), execute_body("client_c1_echo", {{"text", payload + std::to_string(i)}}), 20s);
    json::object req = next_ws_request(tool_client, 10s);
    std::string id(req.at("requestID").as_string());
    ids.push_back(id);
    tool_client.send_json(
        json::object{{"type", "result"}, {"requestID", id}, {"result", success("ok")}});
    auto res = await(call);
    ASSERT_TRUE(IsOk(res)) << "call " << i;
  }
  auto ms = elapsed_ms(t0);
  EXPECT_LT(ms, 30000) << "the stalled subscriber slowed the server down";

  // The reading subscriber saw every request, with its full input, and every completion.
  std::set<std::string> requested, completed;
  while (requested.size() < ids.size() || completed.size() < ids.size()) {
    auto e = fast.sse().next_event(5s);
    ASSERT_TRUE(e.has_value()) << "the reading subscriber missed events: " << requested.size()
                               << " requests and " << completed.size() << " completions of "
                               << ids.size();
    json::value v = e->json();
    std::string type = string_at(v, "/type");
    if (type == "client-tool.request") {
      EXPECT_GT(string_at(v, "/properties/request/input/text").size(), payload.size())
          << "truncated input";
      requested.insert(string_at(v, "/properties/request/requestID"));
    } else if (type == "client-tool.completed") {
      completed.insert(string_at(v, "/properties/requestID"));
    }
  }
  EXPECT_EQ(requested, std::set<std::string>(ids.begin(), ids.end()));
  EXPECT_FALSE(fast.sse().closed());

  // The stalled subscriber was disconnected (reading it now reaches the end of the stream).
  EXPECT_TRUE(slow.wait_closed(10s))
      << "the stalled subscriber is still connected after " << slow.body_bytes() << " bytes";
  EXPECT_TRUE(IsOk(http_get(port(), "/health")));
}

}  // namespace
}  // namespace sb::test
