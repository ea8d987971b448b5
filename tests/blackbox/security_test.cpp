// Black-box tests of who may do what (issue 6, "Authentication and ownership"; docs/security.md
// names the test behind each rule): the server password on every route (Bearer, Basic, the
// query token of streams, the web page's cookie), loopback-only without a password, browser
// origins (server.cors, preflight), client tokens (issued on a clientID's first use, required
// for its later registrations, streams, WebSockets, answers; kept across a restart), and session
// ownership (tools attach to and are offered in their client's sessions; permission and question
// replies come from the owner).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "blackbox_util.hpp"

namespace sb::test {
namespace {

constexpr std::string_view kPassword = "s3cret-pass";

std::string base64(std::string_view in) {
  static constexpr char table[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    unsigned n =
        (unsigned char)in[i] << 16 | (unsigned char)in[i + 1] << 8 | (unsigned char)in[i + 2];
    out += {table[n >> 18], table[(n >> 12) & 63], table[(n >> 6) & 63], table[n & 63]};
  }
  if (i + 1 == in.size()) {
    unsigned n = (unsigned char)in[i] << 16;
    out += {table[n >> 18], table[(n >> 12) & 63], '=', '='};
  } else if (i + 2 == in.size()) {
    unsigned n = (unsigned char)in[i] << 16 | (unsigned char)in[i + 1] << 8;
    out += {table[n >> 18], table[(n >> 12) & 63], table[(n >> 6) & 63], '='};
  }
  return out;
}

Headers bearer(std::string_view password = kPassword) {
  return {{"Authorization", "Bearer " + std::string(password)}};
}

Headers client_token(const std::string& token) {
  return {{"X-Switchboard-Client-Token", token}};
}

std::string body(const json::value& v) {
  return json::serialize(v);
}

json::object registration(std::string_view client, json::array tools,
                          std::string_view session = {}) {
  json::object out{{"clientID", client}, {"tools", std::move(tools)}};
  if (!session.empty()) out["sessionID"] = session;
  return out;
}

bool has_tool(const json::value& tools, std::string_view id) {
  if (!tools.is_array()) return false;
  return std::any_of(tools.get_array().begin(), tools.get_array().end(),
                     [&](const json::value& t) { return string_at(t, "/id") == id; });
}

// ---- the server password ------------------------------------------------------------------------

class ServerPassword : public ServerTest {
 protected:
  void SetUp() override { start(test_config({}, json::object{{"password", kPassword}})); }
};

TEST_F(ServerPassword, EveryApiRouteAnswers401WithoutIt) {
  for (auto [method, target] :
       std::vector<std::pair<std::string, std::string>>{{"GET", "/health"},
                                                        {"GET", "/session"},
                                                        {"POST", "/session"},
                                                        {"GET", "/event"},
                                                        {"GET", "/client-tools/tools"},
                                                        {"POST", "/client-tools/register"},
                                                        {"GET", "/client-tools/pending/c1"},
                                                        {"GET", "/permission"},
                                                        {"GET", "/no-such-route"}}) {
    auto res = http_request(port(), method, target, method == "POST" ? "{}" : "");
    EXPECT_TRUE(IsError(res, 401, "UNAUTHORIZED", {"password"})) << method << " " << target;
    EXPECT_EQ(res.header("WWW-Authenticate").value_or(""), "Bearer realm=\"switchboard\"");
  }
  // Nothing happened: no session was created by the refused POST.
  auto list = http_request(port(), "GET", "/session", {}, bearer());
  ASSERT_TRUE(IsOk(list));
  EXPECT_EQ(list.json(), json::array{});
}

TEST_F(ServerPassword, BearerAndBasicWithAnyUserNameAreAccepted) {
  EXPECT_TRUE(IsOk(http_request(port(), "GET", "/health", {}, bearer())));
  for (std::string user : {"switchboard", "anyone", ""})
    EXPECT_TRUE(IsOk(
        http_request(port(), "GET", "/health", {},
                     {{"Authorization", "Basic " + base64(user + ":" + std::string(kPassword))}})))
        << user;
  EXPECT_TRUE(
      IsError(http_request(port(), "GET", "/health", {}, bearer("wrong")), 401, "UNAUTHORIZED"));
  EXPECT_TRUE(IsError(http_request(port(), "GET", "/health", {},
                                   {{"Authorization", "Basic " + base64("switchboard:wrong")}}),
                      401, "UNAUTHORIZED"));
  EXPECT_TRUE(IsError(http_request(port(), "GET", "/health", {},
                                   {{"Authorization", "Basic " + base64(std::string(kPassword))}}),
                      401, "UNAUTHORIZED"))
      << "Basic needs user:password";
  // The query token is for streams, but any route takes it.
  EXPECT_TRUE(IsOk(http_get(port(), "/health?token=" + std::string(kPassword))));
  EXPECT_TRUE(IsError(http_get(port(), "/health?token=wrong"), 401, "UNAUTHORIZED"));
}

TEST_F(ServerPassword, StreamsAndWebSocketsTakeTheQueryToken) {
  SseClient events(port(), "/event?token=" + std::string(kPassword));
  EXPECT_EQ(events.status(), 200u);
  auto first = events.next_event(5s);
  ASSERT_TRUE(first);
  EXPECT_EQ(string_at(first->json(), "/type"), "server.connected");

  SseClient refused(port(), "/event");
  EXPECT_EQ(refused.status(), 401u);

  WsClient ws(port(), "/client-tools/ws/c1?token=" + std::string(kPassword));
  ws.send_json(json::object{{"type", "register"}, {"tools", json::array{tool_def("t")}}});
  EXPECT_TRUE(ws.next_message_of_type("registered", 5s));
  try {
    WsClient denied(port(), "/client-tools/ws/c2");
    ADD_FAILURE() << "a WebSocket without the password was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("401"), std::string::npos) << e.what();
  }
}

TEST_F(ServerPassword, TheWebPageLoadsAndItsLoginSetsACookie) {
  // The page itself (which asks for the password) and its status route load without it.
  auto page = http_get(port(), "/");
  EXPECT_NE(page.status, 401u) << page.describe();
  auto status = http_get(port(), "/auth");
  ASSERT_TRUE(IsOk(status));
  EXPECT_EQ(status.json(), (json::object{{"required", true}, {"authenticated", false}}));

  EXPECT_TRUE(IsError(http_post(port(), "/auth", json::object{{"password", "wrong"}}), 401,
                      "UNAUTHORIZED", {"wrong password"}));
  auto login = http_post(port(), "/auth", json::object{{"password", kPassword}});
  ASSERT_TRUE(IsOk(login));
  std::string set_cookie = login.header("Set-Cookie").value_or("");
  EXPECT_NE(set_cookie.find("HttpOnly"), std::string::npos) << set_cookie;
  EXPECT_NE(set_cookie.find("SameSite=Strict"), std::string::npos) << set_cookie;
  EXPECT_EQ(set_cookie.find(kPassword), std::string::npos) << "the cookie is not the password";
  std::string cookie = set_cookie.substr(0, set_cookie.find(';'));
  ASSERT_TRUE(cookie.starts_with("switchboard_auth=")) << set_cookie;

  Headers with_cookie{{"Cookie", "theme=dark; " + cookie}};
  EXPECT_TRUE(IsOk(http_request(port(), "GET", "/session", {}, with_cookie)));
  EXPECT_EQ(http_request(port(), "GET", "/auth", {}, with_cookie).json(),
            (json::object{{"required", true}, {"authenticated", true}}));
  SseClient::Options options;
  options.headers = with_cookie;
  SseClient events(port(), "/event", options);
  EXPECT_EQ(events.status(), 200u);
  EXPECT_TRUE(IsError(http_request(port(), "GET", "/session", {},
                                   {{"Cookie", "switchboard_auth=" + std::string(kPassword)}}),
                      401, "UNAUTHORIZED"));
}

TEST(ServerPasswordStart, TheEnvironmentVariableSetsIt) {
  ServerProcess::Options options;
  options.config = test_config();
  options.env.push_back("SWITCHBOARD_SERVER_PASSWORD=from-env");
  ServerProcess server(std::move(options));
  EXPECT_TRUE(IsError(http_get(server.port(), "/health"), 401, "UNAUTHORIZED"));
  EXPECT_TRUE(IsOk(http_request(server.port(), "GET", "/health", {}, bearer("from-env"))));
}

TEST(ServerPasswordStart, WithoutAPasswordOnlyLoopbackUnlessAllowed) {
  RunOptions refused;
  refused.config_text = body(test_config());
  refused.args = {"serve", "--hostname", "0.0.0.0", "--port", "0"};
  auto run = run_switchboard(refused);
  ASSERT_TRUE(run.status) << "it listened: " << run.stderr_text;
  EXPECT_TRUE(run.status->exited && run.status->code == 1) << run.status->describe();
  EXPECT_NE(run.stderr_text.find("refusing to listen on 0.0.0.0 without a password"),
            std::string::npos)
      << run.stderr_text;
  EXPECT_NE(run.stderr_text.find("--allow-remote"), std::string::npos) << run.stderr_text;

  RunOptions allowed = refused;
  allowed.args.push_back("--allow-remote");
  allowed.timeout = 1500ms;
  run = run_switchboard(allowed);
  EXPECT_FALSE(run.status) << "it should have kept listening: " << run.stderr_text;
  EXPECT_NE(run.stderr_text.find("WITHOUT A PASSWORD"), std::string::npos) << run.stderr_text;

  RunOptions by_config = refused;
  by_config.config_text = body(test_config({}, json::object{{"allowRemote", true}}));
  by_config.timeout = 1500ms;
  run = run_switchboard(by_config);
  EXPECT_FALSE(run.status) << "server.allowRemote should allow it: " << run.stderr_text;

  RunOptions with_password = refused;
  with_password.config_text = body(test_config({}, json::object{{"password", kPassword}}));
  with_password.timeout = 1500ms;
  run = run_switchboard(with_password);
  EXPECT_FALSE(run.status) << "a password allows it: " << run.stderr_text;
  EXPECT_EQ(run.stderr_text.find("WITHOUT A PASSWORD"), std::string::npos) << run.stderr_text;
}

// ---- browser origins ----------------------------------------------------------------------------

class Cors : public ServerTest {};

TEST_F(Cors, ByDefaultOnlyTheServersOwnPageMayCall) {
  start(test_config());
  std::string self = "http://127.0.0.1:" + std::to_string(port());
  auto same = http_request(port(), "GET", "/session", {}, {{"Origin", self}});
  ASSERT_TRUE(IsOk(same));
  EXPECT_FALSE(same.header("Access-Control-Allow-Origin"));

  EXPECT_TRUE(
      IsError(http_request(port(), "GET", "/session", {}, {{"Origin", "http://evil.example"}}), 403,
              "FORBIDDEN", {"http://evil.example", "server.cors"}));
  // A "simple" cross-site POST (no preflight) is refused before it acts.
  auto forged = http_request(port(), "POST", "/session", "{\"title\":\"forged\"}",
                             {{"Origin", "http://evil.example"}, {"Content-Type", "text/plain"}});
  EXPECT_TRUE(IsError(forged, 403, "FORBIDDEN"));
  EXPECT_EQ(http_get(port(), "/session").json(), json::array{});
  // So is a preflight, and a cross-site WebSocket handshake.
  EXPECT_TRUE(IsError(
      http_request(port(), "OPTIONS", "/session", {},
                   {{"Origin", "http://evil.example"}, {"Access-Control-Request-Method", "POST"}}),
      403, "FORBIDDEN"));
  RawConnection raw(port());
  raw.send(ws_upgrade_request("/client-tools/ws/c1", "Origin: http://evil.example\r\n"));
  auto ws = raw.read_response();
  ASSERT_TRUE(ws);
  EXPECT_EQ(ws->status, 403u) << ws->describe();
  EXPECT_TRUE(IsOk(http_get(port(), "/client-tools/tools/c1")));
  EXPECT_EQ(http_get(port(), "/client-tools/tools/c1").json(), json::array{});
}

// DNS rebinding: a page at http://evil.example:PORT points evil.example at 127.0.0.1; the
// browser then sends Host and Origin both naming evil.example, which look like "the same origin".
// Without a password the server answers only requests addressed to a loopback name.
TEST_F(Cors, WithoutAPasswordOnlyLoopbackNamesAreServed) {
  start(test_config());
  std::string port_text = std::to_string(port());
  auto raw_request = [&](const std::string& method, const std::string& host,
                         const std::string& extra) {
    RawConnection raw(port());
    raw.send(method + " /session HTTP/1.1\r\nHost: " + host + "\r\n" + extra +
             "Content-Length: 0\r\n\r\n");
    auto res = raw.read_response();
    if (!res) throw std::runtime_error("no answer for Host " + host + ": " + raw.received());
    return *res;
  };
  std::string evil = "evil.example:" + port_text;
  auto rebound = raw_request("GET", evil, "Origin: http://" + evil + "\r\n");
  EXPECT_TRUE(IsError(rebound, 403, "FORBIDDEN", {"evil.example", "localhost"}));
  auto post = raw_request("POST", evil, "Origin: http://" + evil + "\r\n");
  EXPECT_TRUE(IsError(post, 403, "FORBIDDEN"));
  auto no_origin = raw_request("POST", evil, "");
  EXPECT_TRUE(IsError(no_origin, 403, "FORBIDDEN"));
  EXPECT_EQ(http_get(port(), "/session").json(), json::array{}) << "a refused request acted";

  for (std::string host : {"localhost:" + port_text, "127.0.0.1:" + port_text, "[::1]:" + port_text,
                           "app.localhost:" + port_text}) {
    auto res = raw_request("GET", host, "");
    EXPECT_EQ(res.status, 200u) << host << ": " << res.describe();
  }
}

TEST_F(Cors, WithAPasswordOtherNamesAreServed) {
  start(test_config({}, json::object{{"password", kPassword}}));
  RawConnection raw(port());
  raw.send("GET /session HTTP/1.1\r\nHost: switchboard.internal:" + std::to_string(port()) +
           "\r\nAuthorization: Bearer " + std::string(kPassword) + "\r\n\r\n");
  auto res = raw.read_response();
  ASSERT_TRUE(res) << raw.received();
  EXPECT_TRUE(IsOk(*res)) << res->describe();
}

TEST_F(Cors, ConfiguredOriginsGetPreflightAndHeaders) {
  start(test_config(
      {}, json::object{{"cors", json::array{"http://app.example"}}, {"password", kPassword}}));
  // The preflight carries no credentials, and needs none.
  auto pre = http_request(port(), "OPTIONS", "/session", {},
                          {{"Origin", "http://app.example"},
                           {"Access-Control-Request-Method", "POST"},
                           {"Access-Control-Request-Headers", "authorization, content-type"}});
  EXPECT_EQ(pre.status, 204u) << pre.describe();
  EXPECT_EQ(pre.header("Access-Control-Allow-Origin").value_or(""), "http://app.example");
  EXPECT_NE(pre.header("Access-Control-Allow-Methods").value_or("").find("POST"),
            std::string::npos);
  std::string allowed_headers = pre.header("Access-Control-Allow-Headers").value_or("");
  for (auto h : {"Authorization", "Content-Type", "X-Switchboard-Client-Token"})
    EXPECT_NE(allowed_headers.find(h), std::string::npos) << allowed_headers;

  Headers from_app{{"Origin", "http://app.example"}, {"Authorization", "Bearer s3cret-pass"}};
  auto created = http_request(port(), "POST", "/session", "{}", from_app);
  ASSERT_TRUE(IsOk(created));
  EXPECT_EQ(created.header("Access-Control-Allow-Origin").value_or(""), "http://app.example");
  EXPECT_EQ(created.header("Vary").value_or(""), "Origin");
  for (auto h : {"X-Switchboard-Client-Token", "Retry-After"})
    EXPECT_NE(created.header("Access-Control-Expose-Headers").value_or("").find(h),
              std::string::npos)
        << h << " is readable by the page";
  // The password is still needed, and a 401 is readable by the page.
  auto no_password =
      http_request(port(), "GET", "/session", {}, {{"Origin", "http://app.example"}});
  EXPECT_TRUE(IsError(no_password, 401, "UNAUTHORIZED"));
  EXPECT_EQ(no_password.header("Access-Control-Allow-Origin").value_or(""), "http://app.example");
  // A stream's head carries the headers too.
  SseClient::Options options;
  options.headers = from_app;
  SseClient events(port(), "/event", options);
  EXPECT_EQ(events.status(), 200u);
  EXPECT_EQ(events.header("Access-Control-Allow-Origin").value_or(""), "http://app.example");
  // Other origins stay out.
  EXPECT_TRUE(IsError(
      http_request(port(), "GET", "/session", {},
                   {{"Origin", "http://other.example"}, {"Authorization", "Bearer s3cret-pass"}}),
      403, "FORBIDDEN"));
}

// A page of an allowed origin reads why a request failed: error answers carry the CORS headers
// too, whichever layer answers (the HTTP reader, the router, a route).
TEST_F(Cors, AnAllowedOriginCanReadEveryErrorAnswer) {
  start(test_config(
      {}, json::object{{"cors", json::array{"http://app.example"}}, {"maxBodyBytes", 1024}}));
  Headers from_app{{"Origin", "http://app.example"}};
  struct Case {
    const char* what;
    HttpResponse res;
    unsigned status;
    const char* code;
  };
  const Case cases[] = {
      {"no such route", http_request(port(), "GET", "/nowhere", {}, from_app), 404, "NOT_FOUND"},
      {"wrong method", http_request(port(), "DELETE", "/health", {}, from_app), 405,
       "INVALID_REQUEST"},
      {"a target that is not a path", http_request(port(), "GET", "nowhere", {}, from_app), 400,
       "INVALID_REQUEST"},
      {"a body that is not JSON", http_request(port(), "POST", "/session", "{", from_app), 400,
       "INVALID_REQUEST"},
      {"a body over server.maxBodyBytes",
       http_request(port(), "POST", "/session", std::string(2048, ' '), from_app), 413,
       "TOO_LARGE"},
      {"an unknown session", http_request(port(), "GET", "/session/ses_none", {}, from_app), 404,
       "NOT_FOUND"},
  };
  for (const auto& c : cases) {
    EXPECT_TRUE(IsError(c.res, c.status, c.code)) << c.what;
    EXPECT_EQ(c.res.header("Access-Control-Allow-Origin").value_or(""), "http://app.example")
        << c.what << ": " << c.res.describe();
    EXPECT_EQ(c.res.header("Vary").value_or(""), "Origin") << c.what;
  }
  // Without an Origin (not a browser) none are added.
  auto plain = http_get(port(), "/nowhere");
  EXPECT_EQ(plain.status, 404u);
  EXPECT_FALSE(plain.header("Access-Control-Allow-Origin"));
}

// ---- client tokens ------------------------------------------------------------------------------

class ClientTokens : public ServerTest {
 protected:
  void SetUp() override { start(tokens_config()); }
  static json::object tokens_config() { return test_config({{"clientTokens", true}}); }

  // Registers `client`'s tools for the first time and returns the token it was issued.
  std::string first_registration(std::string_view client, json::array tools,
                                 std::string_view session = {}) {
    auto res = http_post(port(), "/client-tools/register",
                         registration(client, std::move(tools), session));
    if (res.status != 200)
      throw std::runtime_error("setup: register " + std::string(client) + ": " + res.describe());
    std::string token = string_at(res.json(), "/clientToken");
    if (token.empty()) throw std::runtime_error("setup: no clientToken: " + res.describe());
    return token;
  }
};

TEST_F(ClientTokens, TheFirstRegistrationIssuesATokenThatLaterOnesNeed) {
  auto first = http_post(port(), "/client-tools/register", registration("c1", {tool_def("a")}));
  ASSERT_TRUE(IsOk(first));
  std::string token = string_at(first.json(), "/clientToken");
  EXPECT_TRUE(token.starts_with("sbct_")) << first.describe();

  auto again = body(registration("c1", {tool_def("b")}));
  EXPECT_TRUE(IsError(http_request(port(), "POST", "/client-tools/register", again), 401,
                      "UNAUTHORIZED", {"c1", "X-Switchboard-Client-Token"}));
  EXPECT_TRUE(IsError(
      http_request(port(), "POST", "/client-tools/register", again, client_token(token + "0")), 401,
      "UNAUTHORIZED", {"wrong client token"}));
  EXPECT_FALSE(has_tool(http_get(port(), "/client-tools/tools/c1").json(), "client_c1_b"))
      << "a refused registration registers nothing";
  auto ok = http_request(port(), "POST", "/client-tools/register", again, client_token(token));
  ASSERT_TRUE(IsOk(ok));
  EXPECT_FALSE(find(ok.json(), "/clientToken")) << "a token is issued once: " << ok.describe();
  EXPECT_TRUE(has_tool(http_get(port(), "/client-tools/tools/c1").json(), "client_c1_b"));

  // Another client's token does not open c1, and c1's does not open another client.
  std::string other = first_registration("c2", {tool_def("a")});
  EXPECT_NE(other, token);
  EXPECT_TRUE(
      IsError(http_request(port(), "POST", "/client-tools/register", again, client_token(other)),
              401, "UNAUTHORIZED"));
  EXPECT_TRUE(IsError(http_request(port(), "POST", "/client-tools/register",
                                   body(registration("c2", {tool_def("x")})), client_token(token)),
                      401, "UNAUTHORIZED"));
}

TEST_F(ClientTokens, AFailedFirstRegistrationIssuesNothing) {
  auto bad = http_post(port(), "/client-tools/register",
                       registration("c1", {tool_def("a", "d", json::object{{"type", 42}})}));
  EXPECT_EQ(bad.status, 400u) << bad.describe();
  EXPECT_FALSE(find(bad.json(), "/clientToken"));
  // The id is still free: the next registration is its first use.
  EXPECT_FALSE(first_registration("c1", {tool_def("a")}).empty());
}

TEST_F(ClientTokens, TheStreamAndTheWebSocketNeedTheToken) {
  std::string token = first_registration("c1", {tool_def("a")});
  SseClient no_token(port(), "/client-tools/pending/c1");
  EXPECT_EQ(no_token.status(), 401u);
  SseClient::Options wrong;
  wrong.headers = client_token("sbct_wrong");
  EXPECT_EQ(SseClient(port(), "/client-tools/pending/c1", wrong).status(), 401u);
  SseClient::Options right;
  right.headers = client_token(token);
  SseClient by_header(port(), "/client-tools/pending/c1", right);
  EXPECT_EQ(by_header.status(), 200u);
  EXPECT_FALSE(by_header.header("X-Switchboard-Client-Token")) << "issued once only";
  by_header.close();
  SseClient by_query(port(), "/client-tools/pending/c1?clientToken=" + token);
  EXPECT_EQ(by_query.status(), 200u);
  by_query.close();

  try {
    WsClient denied(port(), "/client-tools/ws/c1");
    ADD_FAILURE() << "a WebSocket without the client token was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("401"), std::string::npos) << e.what();
  }
  WsClient ws(port(), "/client-tools/ws/c1?clientToken=" + token);
  ws.send_json(json::object{{"type", "register"}, {"tools", json::array{tool_def("b")}}});
  auto registered = ws.next_message_of_type("registered", 5s);
  ASSERT_TRUE(registered);
  EXPECT_EQ(string_at(*registered, "/toolIDs/0"), "client_c1_b");
}

TEST_F(ClientTokens, AStreamOrWebSocketCanBeTheFirstUse) {
  SseClient sse(port(), "/client-tools/pending/s1");
  ASSERT_EQ(sse.status(), 200u);
  std::string sse_token = sse.header("X-Switchboard-Client-Token").value_or("");
  ASSERT_TRUE(sse_token.starts_with("sbct_"));
  auto reg = body(registration("s1", {tool_def("a")}));
  EXPECT_TRUE(
      IsError(http_request(port(), "POST", "/client-tools/register", reg), 401, "UNAUTHORIZED"));
  EXPECT_TRUE(
      IsOk(http_request(port(), "POST", "/client-tools/register", reg, client_token(sse_token))));

  WsClient ws(port(), "/client-tools/ws/w1");
  auto credentials = ws.next_message(5s);
  ASSERT_TRUE(credentials);
  EXPECT_EQ(string_at(*credentials, "/type"), "credentials") << str(*credentials);
  EXPECT_EQ(string_at(*credentials, "/clientID"), "w1");
  std::string ws_token = string_at(*credentials, "/clientToken");
  ASSERT_TRUE(ws_token.starts_with("sbct_")) << str(*credentials);
  EXPECT_TRUE(
      IsOk(http_request(port(), "POST", "/client-tools/register",
                        body(registration("w1", {tool_def("a")})), client_token(ws_token))));
}

TEST_F(ClientTokens, OnlyTheCallsClientWithItsTokenMayAnswer) {
  std::string token = first_registration("c1", {tool_def("echo")});
  std::string other = first_registration("c2", {tool_def("other")});
  SseClient::Options options;
  options.headers = client_token(token);
  SseClient sse(port(), "/client-tools/pending/c1", options);
  ASSERT_EQ(sse.status(), 200u);
  auto call = execute_async(
      port(), json::object{{"tool", "client_c1_echo"}, {"input", json::object{{"text", "hi"}}}});
  std::string request_id(next_tool_request(sse).at("requestID").as_string());

  auto answer = [&](json::object fields, const Headers& headers) {
    fields["requestID"] = request_id;
    fields["result"] = json::object{{"status", "success"}, {"output", "forged"}};
    return http_request(port(), "POST", "/client-tools/result", body(fields), headers);
  };
  EXPECT_TRUE(IsError(answer({}, client_token(token)), 401, "UNAUTHORIZED", {"clientID"}))
      << "an answer must name its client";
  EXPECT_TRUE(IsError(answer({{"clientID", "c1"}}, {}), 401, "UNAUTHORIZED"));
  EXPECT_TRUE(IsError(answer({{"clientID", "c1"}}, client_token(other)), 401, "UNAUTHORIZED"));
  EXPECT_TRUE(IsError(answer({{"clientID", "c2"}}, client_token(other)), 403, "FORBIDDEN"))
      << "c2 with its own token still may not answer c1's call";
  auto progress = json::object{{"requestID", request_id}, {"clientID", "c1"}, {"title", "x"}};
  EXPECT_TRUE(IsError(http_request(port(), "POST", "/client-tools/progress", body(progress)), 401,
                      "UNAUTHORIZED"));
  EXPECT_TRUE(IsOk(
      http_request(port(), "POST", "/client-tools/progress", body(progress), client_token(token))));

  json::object real{{"requestID", request_id},
                    {"clientID", "c1"},
                    {"result", json::object{{"status", "success"}, {"output", "hi back"}}}};
  EXPECT_TRUE(
      IsOk(http_request(port(), "POST", "/client-tools/result", body(real), client_token(token))));
  auto done = await(call);
  ASSERT_TRUE(IsOk(done));
  EXPECT_EQ(string_at(done.json(), "/output"), "hi back") << done.describe();
}

TEST_F(ClientTokens, UnregisterNeedsTheToken) {
  std::string token = first_registration("c1", {tool_def("a")});
  auto all = json::object{{"clientID", "c1"}};
  EXPECT_TRUE(IsError(http_request(port(), "DELETE", "/client-tools/unregister", body(all)), 401,
                      "UNAUTHORIZED"));
  EXPECT_TRUE(has_tool(http_get(port(), "/client-tools/tools/c1").json(), "client_c1_a"));
  EXPECT_TRUE(IsOk(
      http_request(port(), "DELETE", "/client-tools/unregister", body(all), client_token(token))));
  EXPECT_EQ(http_get(port(), "/client-tools/tools/c1").json(), json::array{});
}

TEST_F(ClientTokens, TokensSurviveARestart) {
  TempDir data("switchboard-data");
  auto start_with_data = [&] {
    server_.reset();
    ServerProcess::Options options;
    options.config = tokens_config();
    options.data_dir = data.path();
    server_.emplace(std::move(options));
  };
  start_with_data();
  std::string token = first_registration("c1", {tool_def("a")});
  start_with_data();
  auto again = body(registration("c1", {tool_def("a")}));
  EXPECT_TRUE(
      IsError(http_request(port(), "POST", "/client-tools/register", again), 401, "UNAUTHORIZED"));
  EXPECT_TRUE(
      IsOk(http_request(port(), "POST", "/client-tools/register", again, client_token(token))));
}

// ---- session ownership --------------------------------------------------------------------------

class SessionOwnership : public ClientTokens {
 protected:
  // POST /session for `client` (its first use: returns the session id and the issued token).
  std::pair<std::string, std::string> owned_session(std::string_view client) {
    auto res = http_post(port(), "/session", json::object{{"clientID", client}});
    if (res.status != 200) throw std::runtime_error("setup: POST /session: " + res.describe());
    return {string_at(res.json(), "/id"), string_at(res.json(), "/clientToken")};
  }

  // Prompts the scripted model with `text` in session `sid` and returns the id of the ask that
  // the `asked` event (permission.asked, question.asked) announces.
  std::string prompt_until_asked(BusEvents& bus, const std::string& sid, std::string_view text,
                                 std::string_view asked) {
    auto prompt =
        json::object{{"parts", json::array{json::object{{"type", "text"}, {"text", text}}}}};
    auto res = http_post(port(), "/session/" + sid + "/prompt_async", prompt);
    if (res.status != 204) throw std::runtime_error("setup: prompt_async: " + res.describe());
    auto event = bus.next(asked, 10s);
    if (!event) throw std::runtime_error("setup: no " + std::string(asked));
    return string_at(json::value(*event), "/properties/id");
  }
};

TEST_F(SessionOwnership, CreatingASessionForAClientNeedsItsToken) {
  auto [sid, token] = owned_session("owner");
  EXPECT_TRUE(token.starts_with("sbct_")) << "creating the session was owner's first use";
  EXPECT_EQ(string_at(http_get(port(), "/session/" + sid).json(), "/clientID"), "owner");
  auto again = body(json::object{{"clientID", "owner"}});
  EXPECT_TRUE(IsError(http_request(port(), "POST", "/session", again), 401, "UNAUTHORIZED"));
  auto ok = http_request(port(), "POST", "/session", again, client_token(token));
  ASSERT_TRUE(IsOk(ok));
  EXPECT_FALSE(find(ok.json(), "/clientToken"));
  EXPECT_TRUE(
      IsOk(http_request(port(), "POST", "/client-tools/register",
                        body(registration("owner", {tool_def("a")}, sid)), client_token(token))));
}

// A child session of a client's session belongs to that client: another client (or none) may
// not create one under it (the child would offer the owner's tools to whoever made it).
TEST_F(SessionOwnership, OnlyTheOwnerCreatesChildrenOfItsSession) {
  auto [sid, owner_token] = owned_session("owner");
  EXPECT_TRUE(IsError(http_post(port(), "/session", json::object{{"parentID", sid}}), 403,
                      "FORBIDDEN", {sid, "another client"}));
  auto [other, other_token] = owned_session("intruder");
  EXPECT_TRUE(IsError(http_request(port(), "POST", "/session",
                                   body(json::object{{"clientID", "intruder"}, {"parentID", sid}}),
                                   client_token(other_token)),
                      403, "FORBIDDEN", {sid}));
  auto child = http_request(port(), "POST", "/session",
                            body(json::object{{"clientID", "owner"}, {"parentID", sid}}),
                            client_token(owner_token));
  ASSERT_TRUE(IsOk(child));
  EXPECT_EQ(string_at(child.json(), "/parentID"), sid);
}

TEST_F(SessionOwnership, AClientAttachesToolsOnlyToItsOwnSessions) {
  auto [sid, owner_token] = owned_session("owner");
  auto refused =
      http_post(port(), "/client-tools/register", registration("intruder", {tool_def("spy")}, sid));
  EXPECT_TRUE(IsError(refused, 403, "FORBIDDEN", {sid, "another client"}));
  EXPECT_FALSE(find(refused.json(), "/clientToken"));
  EXPECT_EQ(http_get(port(), "/client-tools/tools/intruder").json(), json::array{});

  WsClient ws(port(), "/client-tools/ws/intruder");
  ASSERT_TRUE(ws.next_message_of_type("credentials", 5s));
  ws.send_json(json::object{
      {"type", "register"}, {"sessionID", sid}, {"tools", json::array{tool_def("spy")}}});
  auto error = ws.next_message_of_type("error", 5s);
  ASSERT_TRUE(error);
  EXPECT_EQ(string_at(*error, "/code"), "FORBIDDEN") << str(*error);
  EXPECT_EQ(http_get(port(), "/client-tools/tools/intruder").json(), json::array{});

  // A session created without a client is open to every client.
  auto open = http_post(port(), "/session", json::object{});
  ASSERT_TRUE(IsOk(open));
  std::string open_id = string_at(open.json(), "/id");
  ws.send_json(json::object{
      {"type", "register"}, {"sessionID", open_id}, {"tools", json::array{tool_def("helper")}}});
  EXPECT_TRUE(ws.next_message_of_type("registered", 5s));
}

TEST_F(SessionOwnership, ASessionOffersOnlyItsOwnClientsTools) {
  auto [sid, owner_token] = owned_session("owner");
  EXPECT_TRUE(IsOk(http_request(port(), "POST", "/client-tools/register",
                                body(registration("owner", {tool_def("mine")})),
                                client_token(owner_token))));
  first_registration("other", {tool_def("theirs")});
  auto open = http_post(port(), "/session", json::object{});
  ASSERT_TRUE(IsOk(open));

  auto offered = http_get(port(), "/tool?sessionID=" + sid);
  ASSERT_TRUE(IsOk(offered));
  EXPECT_TRUE(has_tool(offered.json(), "client_owner_mine")) << offered.body;
  EXPECT_FALSE(has_tool(offered.json(), "client_other_theirs")) << offered.body;
  EXPECT_TRUE(has_tool(offered.json(), "bash")) << "server tools stay";

  auto in_open = http_get(port(), "/tool?sessionID=" + string_at(open.json(), "/id"));
  EXPECT_TRUE(has_tool(in_open.json(), "client_owner_mine")) << in_open.body;
  EXPECT_TRUE(has_tool(in_open.json(), "client_other_theirs")) << in_open.body;
}

TEST_F(SessionOwnership, OnlyTheOwnerAnswersItsSessionsPermissionAsks) {
  server_.reset();
  json::object cfg = tokens_config();
  cfg["permission"] = json::object{{"bash", "ask"}};
  start(cfg);
  auto [sid, token] = owned_session("owner");
  std::string other = first_registration("other", {tool_def("a")});
  BusEvents bus(port());
  std::string id = prompt_until_asked(
      bus, sid, "/call bash {\"command\": \"echo hi\", \"description\": \"echo\"}",
      "permission.asked");
  std::string route = "/permission/" + id + "/reply";

  EXPECT_TRUE(IsError(http_post(port(), route, json::object{{"reply", "once"}}), 403, "FORBIDDEN",
                      {"another client"}));
  EXPECT_TRUE(IsError(http_request(port(), "POST", route,
                                   body(json::object{{"reply", "once"}, {"clientID", "other"}}),
                                   client_token(other)),
                      403, "FORBIDDEN"));
  EXPECT_TRUE(
      IsError(http_post(port(), route, json::object{{"reply", "once"}, {"clientID", "owner"}}), 401,
              "UNAUTHORIZED"));
  EXPECT_EQ(http_get(port(), "/permission").json().as_array().size(), 1u) << "still waiting";
  EXPECT_TRUE(IsOk(http_request(port(), "POST", route,
                                body(json::object{{"reply", "once"}, {"clientID", "owner"}}),
                                client_token(token))));
  EXPECT_TRUE(bus.next_where("session.idle", "/properties/sessionID", json::value(sid), 10s));
}

TEST_F(SessionOwnership, OnlyTheOwnerAnswersItsSessionsQuestions) {
  auto [sid, token] = owned_session("owner");
  std::string other = first_registration("other", {tool_def("a")});
  BusEvents bus(port());
  const std::string_view ask =
      "/call question {\"questions\": [{\"question\": \"Which color?\", \"options\": "
      "[{\"label\": \"red\"}, {\"label\": \"blue\"}]}]}";
  std::string id = prompt_until_asked(bus, sid, ask, "question.asked");
  std::string reply = "/question/" + id + "/reply";
  std::string reject = "/question/" + id + "/reject";
  json::array answers{json::array{"blue"}};

  // Unnamed, another client (with its own token), the owner without its token: refused, both
  // the reply and the dismissal.
  EXPECT_TRUE(IsError(http_post(port(), reply, json::object{{"answers", answers}}), 403,
                      "FORBIDDEN", {"another client"}));
  EXPECT_TRUE(IsError(http_request(port(), "POST", reject, {}), 403, "FORBIDDEN"));
  EXPECT_TRUE(IsError(http_request(port(), "POST", reply,
                                   body(json::object{{"answers", answers}, {"clientID", "other"}}),
                                   client_token(other)),
                      403, "FORBIDDEN"));
  EXPECT_TRUE(IsError(http_request(port(), "POST", reject,
                                   body(json::object{{"clientID", "other"}}), client_token(other)),
                      403, "FORBIDDEN"));
  EXPECT_TRUE(
      IsError(http_post(port(), reply, json::object{{"answers", answers}, {"clientID", "owner"}}),
              401, "UNAUTHORIZED"));
  EXPECT_EQ(http_get(port(), "/question").json().as_array().size(), 1u) << "still waiting";

  EXPECT_TRUE(IsOk(http_request(port(), "POST", reply,
                                body(json::object{{"answers", answers}, {"clientID", "owner"}}),
                                client_token(token))));
  EXPECT_TRUE(bus.next_where("session.idle", "/properties/sessionID", json::value(sid), 10s));

  // The owner may dismiss one too; a session without an owner takes answers from anyone.
  std::string second = prompt_until_asked(bus, sid, ask, "question.asked");
  EXPECT_TRUE(IsOk(http_request(port(), "POST", "/question/" + second + "/reject",
                                body(json::object{{"clientID", "owner"}}), client_token(token))));
  EXPECT_TRUE(bus.next_where("session.idle", "/properties/sessionID", json::value(sid), 10s));
  auto open = http_post(port(), "/session", json::object{});
  ASSERT_TRUE(IsOk(open));
  std::string open_id = string_at(open.json(), "/id");
  std::string third = prompt_until_asked(bus, open_id, ask, "question.asked");
  EXPECT_TRUE(
      IsOk(http_post(port(), "/question/" + third + "/reply", json::object{{"answers", answers}})));
}

}  // namespace
}  // namespace sb::test
