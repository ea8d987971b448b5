// Black-box tests of the limits of issue 6 ("Limits"), each against the real binary with a small
// value: it answers with the error code of design.md and a message naming its config key, and
// the server goes on serving everyone else.
//  * registration: tools per client, description length and schema size (413 TOO_LARGE);
//  * requests: JSON depth (400), header size and field count (413), the head's timeout
//    (slowloris: closed); a 413 reaches a client that is still sending (no reset);
//  * WebSocket message size (the WebSocket closes with 1009 and says why);
//  * connections in total and per client, pending calls per client and per session, executions
//    per minute (429, with Retry-After where a time to retry is known).
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "blackbox_util.hpp"

namespace sb::test {
namespace {

constexpr auto npos = std::string::npos;

// GET /health with `fields` header fields in all (Host and X-Field-1...), the last one padded
// with `padding` bytes.
std::string health_request(int fields, std::size_t padding = 0) {
  std::string req = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  for (int i = 1; i < fields; ++i)
    req += "X-Field-" + std::to_string(i) + ": " +
           (i + 1 == fields ? std::string(padding, 'p') : std::string("v")) + "\r\n";
  return req + "\r\n";
}

// A WebSocket handshake request, for a client that then reads and answers nothing.
std::string websocket_upgrade(unsigned short port, std::string_view target) {
  return "GET " + std::string(target) + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) +
         "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
         "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";
}

// `depth` arrays, one inside the other, around a 1.
std::string nested_arrays(int depth) {
  return std::string(depth, '[') + "1" + std::string(depth, ']');
}

// Sends a request in `parts` with a pause after each, as a client streaming its body does,
// `attempts` times, each on a new connection; each must send all its parts and read a whole 413
// answer naming `key`. A client that is still sending when the server answers and closes loses its
// answer if the server drops unread input: the kernel then resets the connection, which fails the
// client's next write (Node's fetch reports that instead of the answer) or discards the answer
// before it is read. The pause lets the server catch up, so that it answers while the client has
// writes left to make: with 2 ms, 1-2 of 100 attempts hit that window; with 10 ms nearly all.
testing::AssertionResult EveryAttemptReadsIts413(unsigned short port,
                                                 const std::vector<std::string>& parts,
                                                 std::string_view key, int attempts) {
  int lost = 0;
  std::string first;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    RawConnection raw(port);
    std::string what;
    try {
      for (const auto& part : parts) {
        raw.send(part);
        std::this_thread::sleep_for(10ms);
      }
    } catch (const std::runtime_error& e) {
      what = e.what();
    }
    auto res = raw.read_response(5s);
    if (!res)
      what += (what.empty() ? "" : ", then ") + std::string("no answer: ") + raw.received();
    else if (auto is_413 = IsError(*res, 413, "TOO_LARGE", {key}); !is_413)
      what += (what.empty() ? "" : ", then ") + std::string(is_413.message());
    if (what.empty()) continue;
    if (++lost == 1) first = "attempt " + std::to_string(attempt + 1) + ": " + what;
  }
  if (lost == 0) return testing::AssertionSuccess();
  return testing::AssertionFailure()
         << lost << " of " << attempts << " attempts lost their answer; the first, " << first;
}

json::object result_message(const json::object& request, std::string_view output) {
  return json::object{{"type", "result"},
                      {"requestID", request.at("requestID")},
                      {"result", json::object{{"status", "success"}, {"output", output}}}};
}

// A WebSocket client with tools registered (for `session`, when given).
std::unique_ptr<WsClient> connect_client(unsigned short port, std::string_view client,
                                         json::array tools, std::string_view session = {}) {
  auto ws = std::make_unique<WsClient>(port, "/client-tools/ws/" + std::string(client));
  json::object msg{{"type", "register"}, {"tools", std::move(tools)}};
  if (!session.empty()) msg["sessionID"] = session;
  ws->send_json(msg);
  if (!ws->next_message_of_type("registered", 5s))
    throw std::runtime_error("setup: " + std::string(client) + " got no registered message");
  return ws;
}

class RegistrationLimits : public ServerTest {
 protected:
  void SetUp() override {
    start(test_config(
        {{"maxToolsPerClient", 2}, {"maxDescriptionBytes", 16}, {"maxSchemaBytes", 200}}));
  }
  HttpResponse register_http(std::string_view client, json::array tools) {
    return http_post(port(), "/client-tools/register",
                     json::object{{"clientID", client}, {"tools", std::move(tools)}});
  }
  json::value tools_of(std::string_view client) {
    return http_get(port(), "/client-tools/tools/" + std::string(client)).json();
  }
};

TEST_F(RegistrationLimits, ToolsPerClient) {
  EXPECT_TRUE(IsError(register_http("c1", {tool_def("a"), tool_def("b"), tool_def("c")}), 413,
                      "TOO_LARGE", {"clientTools.maxToolsPerClient", "at most 2", "make 3"}));
  EXPECT_EQ(tools_of("c1"), json::array{}) << "all or nothing";
  ASSERT_TRUE(IsOk(register_http("c1", {tool_def("a"), tool_def("b")})));
  // Registering a tool again replaces it: still two.
  EXPECT_TRUE(IsOk(register_http("c1", {tool_def("a", "new text")})));
  EXPECT_TRUE(IsError(register_http("c1", {tool_def("c")}), 413, "TOO_LARGE", {"make 3"}));
  EXPECT_EQ(tools_of("c1").as_array().size(), 2u);
  // Another client has its own allowance.
  EXPECT_TRUE(IsOk(register_http("c2", {tool_def("a"), tool_def("b")})));
  // After an unregister there is room again.
  ASSERT_TRUE(IsOk(http_delete(port(), "/client-tools/unregister",
                               json::object{{"clientID", "c1"}, {"toolIDs", json::array{"b"}}})));
  EXPECT_TRUE(IsOk(register_http("c1", {tool_def("c")})));
}

TEST_F(RegistrationLimits, DescriptionAndSchemaSize) {
  EXPECT_TRUE(IsError(register_http("c1", {tool_def("a"), tool_def("b", "seventeen bytes!!")}), 413,
                      "TOO_LARGE",
                      {"tools[1].description", "17 bytes", "clientTools.maxDescriptionBytes"}));
  json::object big_schema{
      {"type", "object"},
      {"properties", json::object{{"text", json::object{{"type", "string"},
                                                        {"description", std::string(200, 'x')}}}}}};
  EXPECT_TRUE(IsError(register_http("c1", {tool_def("a", "fine", big_schema)}), 413, "TOO_LARGE",
                      {"tools[0].parameters", "clientTools.maxSchemaBytes"}));
  EXPECT_EQ(tools_of("c1"), json::array{});
  EXPECT_TRUE(IsOk(register_http("c1", {tool_def("a", "sixteen bytes!!!")})));
  EXPECT_TRUE(IsOk(http_get(port(), "/health"))) << "the server serves on";
}

TEST_F(RegistrationLimits, OverTheWebSocketToo) {
  WsClient ws(port(), "/client-tools/ws/c1");
  ws.send_json(json::object{{"type", "register"},
                            {"tools", json::array{tool_def("a"), tool_def("b"), tool_def("c")}}});
  auto error = ws.next_message_of_type("error", 5s);
  ASSERT_TRUE(error);
  EXPECT_EQ(string_at(*error, "/code"), "TOO_LARGE") << str(*error);
  EXPECT_NE(string_at(*error, "/error").find("clientTools.maxToolsPerClient"), std::string::npos);
  EXPECT_EQ(tools_of("c1"), json::array{});
  ws.send_json(json::object{{"type", "register"}, {"tools", json::array{tool_def("a")}}});
  EXPECT_TRUE(ws.next_message_of_type("registered", 5s)) << "the connection stays up";
}

// ---- JSON depth -------------------------------------------------------------------------------

class JsonDepthLimit : public ServerTest {
 protected:
  void SetUp() override { start(test_config({}, {{"maxJsonDepth", 8}})); }
};

TEST_F(JsonDepthLimit, DeeperBodiesAndWebSocketMessagesAre400NamingTheLimit) {
  // The body's object and eight arrays: nine levels.
  auto deep = http_request(port(), "POST", "/client-tools/register",
                           R"({"clientID": "c1", "tools": )" + nested_arrays(8) + "}");
  EXPECT_TRUE(IsError(deep, 400, "INVALID_REQUEST",
                      {"nested deeper than the limit of 8 levels", "server.maxJsonDepth"}));
  // Eight levels are parsed, and refused for what they say instead.
  auto at_limit = http_request(port(), "POST", "/client-tools/register",
                               R"({"clientID": "c1", "tools": )" + nested_arrays(7) + "}");
  EXPECT_EQ(at_limit.status, 400u);
  EXPECT_EQ(at_limit.error_message().find("maxJsonDepth"), npos) << at_limit.describe();

  WsClient ws(port(), "/client-tools/ws/c1");
  ws.send_text(R"({"type": "register", "tools": )" + nested_arrays(8) + "}");
  auto error = ws.next_message_of_type("error", 5s);
  ASSERT_TRUE(error);
  EXPECT_EQ(string_at(*error, "/code"), "INVALID_REQUEST") << str(*error);
  EXPECT_NE(string_at(*error, "/error").find("server.maxJsonDepth"), npos) << str(*error);
  // The connection stays up; an ordinary registration (six levels) goes through on it.
  ws.send_json(json::object{{"type", "register"}, {"tools", json::array{tool_def("a")}}});
  EXPECT_TRUE(ws.next_message_of_type("registered", 5s));
  register_tools(port(), "c2", {tool_def("a")});
}

// ---- header size and count ----------------------------------------------------------------------

class HeaderLimits : public ServerTest {
 protected:
  void SetUp() override {
    start(test_config({}, {{"maxHeaderBytes", 2048}, {"maxHeaderCount", 10}}));
  }
};

TEST_F(HeaderLimits, AHeadOverTheByteLimitIs413NamingIt) {
  RawConnection fits(port());
  fits.send(health_request(2, 1500));
  auto ok = fits.read_response();
  ASSERT_TRUE(ok);
  EXPECT_TRUE(IsOk(*ok));

  RawConnection over(port());
  over.send(health_request(2, 2100));
  auto res = over.read_response();
  ASSERT_TRUE(res) << "no answer: " << over.received();
  EXPECT_TRUE(IsError(*res, 413, "TOO_LARGE", {"2048 bytes", "server.maxHeaderBytes"}));
  EXPECT_TRUE(over.wait_closed(5s));
  EXPECT_TRUE(IsOk(http_get(port(), "/health")));
}

TEST_F(HeaderLimits, MoreFieldsThanTheCountLimitIs413NamingIt) {
  RawConnection at_limit(port());
  at_limit.send(health_request(10));
  auto ok = at_limit.read_response();
  ASSERT_TRUE(ok);
  EXPECT_TRUE(IsOk(*ok));

  RawConnection over(port());
  over.send(health_request(11));
  auto res = over.read_response();
  ASSERT_TRUE(res) << "no answer: " << over.received();
  EXPECT_TRUE(
      IsError(*res, 413, "TOO_LARGE", {"11 fields", "limit of 10", "server.maxHeaderCount"}));
  EXPECT_TRUE(over.wait_closed(5s));
  EXPECT_TRUE(IsOk(http_get(port(), "/health")));
}

TEST_F(HeaderLimits, AClientStillSendingAnOversizedHeadReadsIts413) {
  std::vector<std::string> parts{"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: "};
  for (int i = 0; i < 6; ++i)
    parts.emplace_back(64 * 1024, 'p');
  parts.emplace_back("\r\n\r\n");
  EXPECT_TRUE(EveryAttemptReadsIts413(port(), parts, "server.maxHeaderBytes", 50));
  EXPECT_TRUE(IsOk(http_get(port(), "/health")));
}

// ---- body size ----------------------------------------------------------------------------------

class BodyLimit : public ServerTest {
 protected:
  void SetUp() override { start(test_config({}, {{"maxBodyBytes", 256 * 1024}})); }
};

// The case reported: six 64 KiB chunks against a 256 KiB limit (Node's fetch lost 2-11 of 100
// answers).
TEST_F(BodyLimit, AClientStillSendingAnOversizedBodyReadsIts413) {
  std::vector<std::string> parts{
      "POST /client-tools/register HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"};
  for (int i = 0; i < 6; ++i)
    parts.push_back("10000\r\n" + std::string(64 * 1024, ' ') + "\r\n");
  parts.emplace_back("0\r\n\r\n");
  EXPECT_TRUE(EveryAttemptReadsIts413(port(), parts, "server.maxBodyBytes", 50));
  EXPECT_TRUE(IsOk(http_get(port(), "/health")));
}

// ---- the head's timeout (slowloris) -------------------------------------------------------------

class HeaderTimeout : public ServerTest {
 protected:
  void SetUp() override {
    start(test_config({}, {{"headerTimeout", 300}, {"idleTimeout", 10000}}));
  }
};

TEST_F(HeaderTimeout, AHeadTrickledForLongerIsClosedThoughNeverIdle) {
  RawConnection slow(port());
  slow.send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ");
  // A byte every 50 ms for up to 5 s: never idle for anything like idleTimeout (10 s), but the
  // head is still not complete when headerTimeout (300 ms) has passed.
  bool closed = false;
  for (int i = 0; i < 100 && !closed; ++i) {
    try {
      slow.send("a");
    } catch (const std::runtime_error&) {
      closed = true;  // the server had closed already
      break;
    }
    closed = slow.wait_closed(50ms);
  }
  EXPECT_TRUE(closed) << "a head trickled for 5 s is still open";
  EXPECT_EQ(slow.received(), "") << "a head that never ended got an answer";
  EXPECT_TRUE(IsOk(http_get(port(), "/health")));
}

TEST_F(HeaderTimeout, TheWaitBeforeARequestIsIdleTimeNotHeadTime) {
  RawConnection raw(port());
  // Longer than headerTimeout before the first request and between two requests on the same
  // connection: idleTimeout (10 s) governs those waits, so both are answered.
  std::this_thread::sleep_for(600ms);
  raw.send(health_request(1));
  auto first = raw.read_response();
  ASSERT_TRUE(first);
  EXPECT_TRUE(IsOk(*first));
  std::this_thread::sleep_for(600ms);
  raw.send(health_request(1));
  auto second = raw.read_response();
  ASSERT_TRUE(second) << "the keep-alive connection was closed between requests";
  EXPECT_TRUE(IsOk(*second));
}

// ---- WebSocket message size ---------------------------------------------------------------------

class WebSocketMessageLimit : public ServerTest {
 protected:
  void SetUp() override {
    start(test_config({{"reconnectGrace", 10000}}, {{"maxWebSocketMessageBytes", 1024}}));
  }
};

TEST_F(WebSocketMessageLimit, AnOversizedMessageClosesThatWebSocketWith1009AndTheClientMayReturn) {
  auto c1 = connect_client(port(), "c1", {tool_def("a")});
  auto c2 = connect_client(port(), "c2", {tool_def("a")});
  // Up to the limit a message is read as usual.
  json::object near{{"type", "register"},
                    {"tools", json::array{tool_def("b", std::string(850, 'd'))}}};
  ASSERT_LE(json::serialize(near).size(), 1024u);
  c1->send_json(near);
  ASSERT_TRUE(c1->next_message_of_type("registered", 5s));

  // Over it, the client hears why, then the connection closes with 1009 (message too big).
  c1->send_text(R"({"type": "unregister", "pad": ")" + std::string(2000, 'x') + R"("})");
  auto error = c1->next_message_of_type("error", 5s);
  ASSERT_TRUE(error);
  EXPECT_EQ(string_at(*error, "/code"), "TOO_LARGE") << str(*error);
  EXPECT_NE(string_at(*error, "/error").find("server.maxWebSocketMessageBytes"), npos)
      << str(*error);
  ASSERT_TRUE(c1->wait_closed(5s));
  EXPECT_NE(c1->close_description().find("close code 1009"), npos) << c1->close_description();
  EXPECT_NE(c1->close_description().find("over 1024 bytes (server.maxWebSocketMessageBytes)"), npos)
      << c1->close_description();

  // The other client's connection is untouched.
  c2->send_json(json::object{{"type", "register"}, {"tools", json::array{tool_def("b")}}});
  EXPECT_TRUE(c2->next_message_of_type("registered", 5s));
  // HTTP bodies have their own limit (server.maxBodyBytes).
  register_tools(port(), "c3", {tool_def("a", std::string(2000, 'd'))});

  // c1 comes back within its reconnect grace: it kept its tools, and calls reach it.
  auto back = std::make_unique<WsClient>(port(), "/client-tools/ws/c1");
  EXPECT_EQ(http_get(port(), "/client-tools/tools/c1").json().as_array().size(), 2u);
  auto call =
      execute_async(port(), json::object{{"tool", "client_c1_b"}, {"input", json::object{}}});
  auto request = next_ws_request(*back);
  EXPECT_EQ(string_at(json::value(request), "/tool"), "client_c1_b");
  back->send_json(result_message(request, "back again"));
  auto res = await(call);
  ASSERT_TRUE(IsOk(res));
  EXPECT_EQ(string_at(res.json(), "/output"), "back again");
}

// ---- connections --------------------------------------------------------------------------------

class ConnectionLimit : public ServerTest {
 protected:
  void SetUp() override { start(test_config({}, {{"maxConnections", 3}})); }
};

TEST_F(ConnectionLimit, ConnectionsOverTheLimitGet429AndTheOpenOnesAreServed) {
  RawConnection a(port()), b(port()), c(port());
  for (RawConnection* raw : {&a, &b, &c}) {  // each has been accepted once it has an answer
    raw->send(health_request(1));
    auto res = raw->read_response();
    ASSERT_TRUE(res);
    ASSERT_TRUE(IsOk(*res));
  }
  RawConnection over(port());
  auto refused = over.read_response();  // the answer comes without a request
  ASSERT_TRUE(refused) << "no answer: " << over.received();
  EXPECT_TRUE(
      IsError(*refused, 429, "RATE_LIMITED", {"connection limit of 3", "server.maxConnections"}));
  EXPECT_TRUE(over.wait_closed(5s));

  // The connections that are in keep being served.
  a.send(health_request(1));
  auto again = a.read_response();
  ASSERT_TRUE(again);
  EXPECT_TRUE(IsOk(*again));
  // Once one closes, there is room for a new one.
  c.close();
  EXPECT_TRUE(wait_until(
      [&] {
        try {
          return http_get(port(), "/health").status == 200;
        } catch (const std::runtime_error&) {
          return false;  // a refusal whose answer was lost: try again
        }
      },
      5s));
}

class ConnectionsPerClient : public ServerTest {
 protected:
  void SetUp() override {
    start(test_config({{"maxConnectionsPerClient", 2}, {"keepaliveInterval", 30000}}));
  }
};

TEST_F(ConnectionsPerClient, AClientOverItsLimitGets429WhileOthersConnect) {
  // Two WebSockets of c1 that read nothing after the handshake: the second replaces the first,
  // whose closing handshake then waits for an answer that never comes. Both stay open.
  RawConnection first(port()), second(port());
  for (RawConnection* raw : {&first, &second}) {
    raw->send(websocket_upgrade(port(), "/client-tools/ws/c1"));
    auto res = raw->read_response();
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 101u) << res->describe();
  }

  EXPECT_TRUE(IsError(http_get(port(), "/client-tools/pending/c1"), 429, "RATE_LIMITED",
                      {"client c1 already has 2", "clientTools.maxConnectionsPerClient"}));
  try {  // a WebSocket is refused before the upgrade, with an answer the client can read
    WsClient third(port(), "/client-tools/ws/c1");
    ADD_FAILURE() << "a third connection of c1 was accepted";
  } catch (const std::runtime_error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("HTTP status 429"), npos) << what;
    EXPECT_NE(what.find("clientTools.maxConnectionsPerClient"), npos) << what;
  }

  // Other clients connect as usual.
  SseClient c2(port(), "/client-tools/pending/c2");
  EXPECT_EQ(c2.status(), 200u);
  auto c3 = connect_client(port(), "c3", {tool_def("a")});

  // When one of c1's connections ends, c1 may open another.
  first.close();
  std::unique_ptr<WsClient> back;
  EXPECT_TRUE(wait_until(
      [&] {
        try {
          back = std::make_unique<WsClient>(port(), "/client-tools/ws/c1");
          return true;
        } catch (const std::runtime_error&) {
          return false;
        }
      },
      5s));
}

// ---- pending calls ------------------------------------------------------------------------------

class PendingPerClient : public ServerTest {
 protected:
  void SetUp() override { start(test_config({{"maxPendingPerClient", 2}})); }
};

TEST_F(PendingPerClient, ExecutionsOverTheLimitAre429AtOnce) {
  auto c1 = connect_client(port(), "c1", {tool_def("a")});
  auto c2 = connect_client(port(), "c2", {tool_def("a")});
  auto call_c1 = [](std::string_view text) {
    return json::object{{"tool", "client_c1_a"}, {"input", json::object{{"text", text}}}};
  };
  auto first = execute_async(port(), call_c1("first"));
  auto second = execute_async(port(), call_c1("second"));
  // The two callers race: tell their requests apart by their input.
  json::object r1 = next_ws_request(*c1);
  json::object r2 = next_ws_request(*c1);
  if (string_at(json::value(r1), "/input/text") != "first") std::swap(r1, r2);

  // Refused at once, not after the call's timeout (5 s here, which would be 504).
  EXPECT_TRUE(IsError(http_post(port(), "/client-tools/execute", call_c1("refused")), 429,
                      "RATE_LIMITED",
                      {"Client c1 already has 2 calls", "clientTools.maxPendingPerClient"}));

  // Another client's calls go on.
  auto other =
      execute_async(port(), json::object{{"tool", "client_c2_a"}, {"input", json::object{}}});
  c2->send_json(result_message(next_ws_request(*c2), "from c2"));
  EXPECT_TRUE(IsOk(await(other)));

  // Once c1 answers one, there is room for another.
  c1->send_json(result_message(r1, "one"));
  EXPECT_TRUE(IsOk(await(first)));
  auto third = execute_async(port(), call_c1("third"));
  c1->send_json(result_message(next_ws_request(*c1), "three"));
  EXPECT_TRUE(IsOk(await(third)));
  c1->send_json(result_message(r2, "two"));
  EXPECT_TRUE(IsOk(await(second)));
}

// ---- executions per minute ----------------------------------------------------------------------

class ExecutionRateLimit : public ServerTest {
 protected:
  void SetUp() override { start(test_config({{"rateLimit", 2}})); }
};

TEST_F(ExecutionRateLimit, AnExecutionOverTheLimitIs429NamingItAndWhenToRetry) {
  register_tools(port(), "c1", {tool_def("a")});
  json::object call{{"tool", "client_c1_a"}, {"input", json::object{}}, {"timeout", 50}};
  for (int i = 0; i < 2; ++i)  // accepted, then timed out (no client is connected)
    ASSERT_TRUE(IsError(http_post(port(), "/client-tools/execute", call), 504, "TIMEOUT"));
  auto limited = http_post(port(), "/client-tools/execute", call);
  EXPECT_TRUE(IsError(limited, 429, "RATE_LIMITED",
                      {"Client c1 exceeded 2 executions per minute", "clientTools.rateLimit"}));
  // The minute's window began a moment ago: a slot frees in just under a minute, in whole seconds.
  auto retry_after = limited.header("Retry-After");
  ASSERT_TRUE(retry_after) << limited.describe();
  int seconds = std::atoi(retry_after->c_str());
  EXPECT_EQ(*retry_after, std::to_string(seconds));
  EXPECT_GE(seconds, 50);
  EXPECT_LE(seconds, 60);
  EXPECT_NE(limited.error_message().find("try again in " + *retry_after + " s"), npos)
      << limited.describe();
}

class PendingPerSession : public ServerTest {
 protected:
  void SetUp() override {
    start(with_fake_model(test_config({{"maxPendingPerSession", 1}}), model_));
  }
  FakeModelServer model_;
};

TEST_F(PendingPerSession, ACallOverTheLimitIsAToolErrorTheModelSees) {
  auto created = http_post(port(), "/session", json::object{});
  ASSERT_TRUE(IsOk(created));
  std::string sid = string_at(created.json(), "/id");
  auto c1 = connect_client(port(), "c1", {tool_def("a")}, sid);

  model_.push(
      FakeResponse::with_tool_calls({FakeToolCall{"call_1", "client_c1_a", R"({"text": "one"})"},
                                     FakeToolCall{"call_2", "client_c1_a", R"({"text": "two"})"}}));
  model_.push(FakeResponse::with_text("Done."));
  auto prompted = http_post(
      port(), "/session/" + sid + "/prompt_async",
      json::object{{"parts", json::array{json::object{{"type", "text"}, {"text", "call twice"}}}}});
  ASSERT_EQ(prompted.status, 204u) << prompted.describe();

  // One call reaches the client; the other is refused.
  json::object delivered = next_ws_request(*c1);
  std::string delivered_id = string_at(json::value(delivered), "/callID");
  std::string refused_id = delivered_id == "call_1" ? "call_2" : "call_1";

  // The client's calls outside the session are served meanwhile.
  auto direct =
      execute_async(port(), json::object{{"tool", "client_c1_a"}, {"input", json::object{}}});
  json::object direct_request = next_ws_request(*c1);
  EXPECT_EQ(string_at(json::value(direct_request), "/sessionID"), "");
  c1->send_json(result_message(direct_request, "direct"));
  EXPECT_TRUE(IsOk(await(direct)));

  c1->send_json(result_message(delivered, "answered"));
  auto next = model_.wait_for_request(1, 10s);
  ASSERT_TRUE(next) << "the turn did not go on to the model";
  std::string refused_content, delivered_content;
  for (const auto& m : next->json.at("messages").as_array()) {
    if (string_at(m, "/role") != "tool") continue;
    if (string_at(m, "/tool_call_id") == refused_id) refused_content = string_at(m, "/content");
    if (string_at(m, "/tool_call_id") == delivered_id) delivered_content = string_at(m, "/content");
  }
  EXPECT_EQ(delivered_content, "answered") << next->body;
  EXPECT_NE(refused_content.find("clientTools.maxPendingPerSession"), npos) << next->body;
}

}  // namespace
}  // namespace sb::test
