// Black-box tests of the server as a whole: health, unknown routes and methods, bytes that are
// not HTTP, idle connections, shutdown on SIGTERM/SIGINT, configuration errors at start-up, and
// one server per data directory.
#include <gtest/gtest.h>

#include <signal.h>

#include <cctype>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "blackbox_util.hpp"
#include "test_postgres.hpp"

namespace sb::test {
namespace {

class Server : public ServerTest {
 protected:
  void SetUp() override { start(test_config()); }
};

TEST_F(Server, HealthReportsHealthyTheVersionAndTheStore) {
  auto res = http_get(port(), "/health");
  ASSERT_TRUE(IsOk(res));
  std::string engine = test::storage_is_postgres() ? "postgres" : "sqlite";
  EXPECT_EQ(res.json(),
            (json::object{{"healthy", true},
                          {"version", SWITCHBOARD_VERSION},
                          {"storage", json::object{{"engine", engine}, {"ok", true}}}}));
  EXPECT_TRUE(contains(res.header("content-type").value_or(""), "application/json"))
      << "Content-Type: " << res.header("content-type").value_or("(none)");
}

TEST_F(Server, UnknownRouteIs404WithTheErrorBody) {
  for (const char* target : {"/nope", "/client-tools/nope", "/client-tools/tools/c1/extra"}) {
    SCOPED_TRACE(target);
    auto res = http_get(port(), target);
    EXPECT_TRUE(IsError(res, 404, "NOT_FOUND"));
    EXPECT_TRUE(contains(res.header("content-type").value_or(""), "application/json"));
  }
  auto post = http_post(port(), "/client-tools/nope", json::object{});
  EXPECT_TRUE(IsError(post, 404, "NOT_FOUND"));
}

TEST_F(Server, KnownPathWithTheWrongMethodIs405WithAllow) {
  struct Case {
    const char* method;
    const char* target;
    const char* allowed;
  };
  for (const Case& c :
       {Case{"GET", "/client-tools/register", "POST"},
        Case{"POST", "/client-tools/unregister", "DELETE"},
        Case{"GET", "/client-tools/execute", "POST"}, Case{"PUT", "/client-tools/result", "POST"},
        Case{"DELETE", "/health", "GET"}, Case{"POST", "/client-tools/tools", "GET"}}) {
    SCOPED_TRACE(std::string(c.method) + " " + c.target);
    auto res = http_request(port(), c.method, c.target);
    EXPECT_TRUE(IsError(res, 405, "INVALID_REQUEST"));
    EXPECT_TRUE(contains(res.header("allow").value_or(""), c.allowed))
        << "Allow: " << res.header("allow").value_or("(none)");
  }
}

// GET /doc documents every route there is (the unit tests hold it to the route table): each
// documented operation reaches its route, never the dispatcher's "no route" 404 or a 405; and
// its answer to an unknown id or an empty body is one it documents (every test server checks
// each answer against the document, so a mismatch would be a 500).
TEST_F(Server, DocDocumentsRoutesThatExist) {
  auto res = http_get(port(), "/doc");
  ASSERT_TRUE(IsOk(res));
  json::value doc = res.json();
  EXPECT_EQ(doc.at("openapi"), "3.1.0");
  const auto& paths = doc.at("paths").as_object();
  EXPECT_GT(paths.size(), 50u);
  std::size_t operations = 0;
  for (const auto& [path, item] : paths) {
    std::string target;
    for (std::size_t at = 1; at <= path.size(); ++at) {
      auto end = std::min(path.find('/', at), path.size());
      auto segment = std::string_view(path).substr(at, end - at);
      target += "/" + std::string(segment.starts_with('{') ? "zz-unknown" : segment);
      at = end;
    }
    if (path == "/") target = "/";
    for (const auto& [method_name, op] : item.as_object()) {
      std::string method(method_name);
      for (auto& ch : method)
        ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      SCOPED_TRACE(method + " " + target);
      ++operations;
      const auto& responses = op.at("responses").as_object();
      bool stream = false;
      for (const auto& [status, response] : responses)
        if (const auto* content = response.as_object().if_contains("content"))
          stream = stream ||
                   (status.starts_with("2") && content->as_object().contains("text/event-stream"));
      unsigned status = 0;
      std::string message;
      if (stream && method == "GET") {
        SseClient sse(port(), target);
        status = sse.status();
        sse.close();
      } else {
        bool body = method == "POST" || method == "PATCH" || method == "PUT";
        auto answer = http_request(port(), method, target, body ? "{}" : "");
        status = answer.status;
        message = answer.status >= 400 ? answer.error_message() : "";
        EXPECT_NE(status, 500u) << answer.describe();
      }
      // The dispatcher's 405 (a path without this method) is documented nowhere; a route may
      // document its own (GET /client-tools/mcp without a session: MCP's "no stream here").
      EXPECT_TRUE(status != 405u || responses.contains("405"));
      EXPECT_FALSE(status == 404 && message.starts_with("no route")) << message;
      EXPECT_TRUE(responses.contains(std::to_string(status)))
          << "answered " << status << ", documented: " << json::serialize(responses);
    }
  }
  EXPECT_GT(operations, 70u);
}

// The page's text files go gzipped to a browser that accepts it, as their own representation
// (ETag, Vary); as they are to one that does not. (Every browser test loads the page gzipped.)
TEST_F(Server, ThePageIsServedGzippedToClientsThatAcceptIt) {
  auto plain = http_request(port(), "GET", "/");
  ASSERT_EQ(plain.status, 200u) << plain.describe();
  EXPECT_FALSE(plain.header("content-encoding"));
  EXPECT_EQ(plain.header("vary").value_or(""), "Accept-Encoding");
  auto gzipped = http_request(port(), "GET", "/", "", {{"Accept-Encoding", "br, gzip;q=0.8"}});
  ASSERT_EQ(gzipped.status, 200u);
  EXPECT_EQ(gzipped.header("content-encoding").value_or(""), "gzip");
  EXPECT_EQ(gzipped.header("vary").value_or(""), "Accept-Encoding");
  ASSERT_GE(gzipped.body.size(), 2u);
  EXPECT_EQ(gzipped.body.substr(0, 2), "\x1f\x8b");  // gzip's magic
  EXPECT_LT(gzipped.body.size(), plain.body.size());
  EXPECT_EQ(gzipped.header("content-type"), plain.header("content-type"));
  EXPECT_NE(gzipped.header("etag"), plain.header("etag"));
  // Revalidation per representation.
  auto same =
      http_request(port(), "GET", "/", "",
                   {{"Accept-Encoding", "gzip"}, {"If-None-Match", *gzipped.header("etag")}});
  EXPECT_EQ(same.status, 304u);
  auto other = http_request(port(), "GET", "/", "", {{"If-None-Match", *gzipped.header("etag")}});
  EXPECT_EQ(other.status, 200u);
  // gzip named wins over `*` (RFC 9110): taken when named, or by `*`, unless refused by name.
  for (const char* taking : {"*;q=0, gzip", "*", "identity, *;q=0.5", "GZIP;Q=1"}) {
    SCOPED_TRACE(taking);
    auto res = http_request(port(), "GET", "/", "", {{"Accept-Encoding", taking}});
    EXPECT_EQ(res.header("content-encoding").value_or(""), "gzip");
  }
  // Refused with q=0: the plain bytes.
  for (const char* refusal :
       {"gzip;q=0", "gzip; q=0.000, identity", "deflate", "gzip;q=0, *", "*;q=0"}) {
    SCOPED_TRACE(refusal);
    auto res = http_request(port(), "GET", "/", "", {{"Accept-Encoding", refusal}});
    EXPECT_FALSE(res.header("content-encoding"));
    EXPECT_EQ(res.body, plain.body);
  }
  // A script under /assets/ too.
  auto script = plain.body.find("/assets/");
  ASSERT_NE(script, std::string::npos);
  std::string path = plain.body.substr(script, plain.body.find('"', script) - script);
  auto js = http_request(port(), "GET", path, "", {{"Accept-Encoding", "gzip"}});
  EXPECT_EQ(js.status, 200u);
  EXPECT_EQ(js.header("content-encoding").value_or(""), "gzip");
}

TEST_F(Server, BytesThatAreNotHttpAreRefusedAndTheServerGoesOn) {
  for (const char* garbage :
       {"HELLO THERE\r\n\r\n", "GET /health HTTP/1.1\r\nBad Header Line\r\n\r\n",
        "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"}) {
    SCOPED_TRACE(testing::PrintToString(std::string(garbage)));
    RawConnection raw(port());
    raw.send(garbage);
    auto res = raw.read_response(3s);
    if (res) {
      EXPECT_EQ(res->status, 400u) << res->describe();
    } else {
      // No answer is acceptable only when the server closed the connection.
      EXPECT_TRUE(raw.wait_closed(3s)) << "neither an answer nor a close; got: " << raw.received();
    }
  }
  EXPECT_TRUE(IsOk(http_get(port(), "/health")));
}

TEST_F(Server, SeveralRequestsOnOneConnection) {
  RawConnection raw(port());
  raw.send(
      "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /client-tools/tools HTTP/1.1\r\n"
      "Host: 127.0.0.1\r\n\r\n");
  auto first = raw.read_response();
  ASSERT_TRUE(first.has_value()) << raw.received();
  EXPECT_TRUE(IsOk(*first));
  auto second = raw.read_response();
  ASSERT_TRUE(second.has_value()) << raw.received();
  EXPECT_TRUE(IsOk(*second));
  EXPECT_EQ(second->json(), json::object{});
}

class ServerIdle : public ServerTest {
 protected:
  void SetUp() override {
    start(test_config({}, json::object{{"idleTimeout", 300}, {"headerTimeout", 300}}));
  }
};

TEST_F(ServerIdle, HalfWrittenRequestsDoNotBlockOthersAndAreClosedWhenIdle) {
  RawConnection silent(port());
  RawConnection half_head(port());
  half_head.send("POST /client-tools/register HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le");
  RawConnection half_body(port());
  half_body.send(
      "POST /client-tools/register HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
      "\r\nContent-Length: 100\r\n\r\n{\"clientID\": ");

  // Meanwhile the server answers everyone else.
  auto t0 = Clock::now();
  EXPECT_TRUE(IsOk(http_get(port(), "/health", 2s)));
  EXPECT_LT(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count(), 1000);

  // And closes the idle ones (idleTimeout is 300 ms; the half-written head is closed by
  // headerTimeout, also 300 ms), answering no half request.
  for (RawConnection* c : {&silent, &half_head, &half_body}) {
    EXPECT_TRUE(c->wait_closed(3s)) << "an idle connection is still open";
  }
  EXPECT_TRUE(IsOk(http_get(port(), "/health")));
}

// ---- shutdown --------------------------------------------------------------------------------

TEST_F(Server, SigtermEndsPendingCallsWith503AndExitsZero) {
  WsClient ws(port(), "/client-tools/ws/c1");
  ws.send_json(json::object{{"type", "register"}, {"tools", {tool_def("a")}}});
  ASSERT_TRUE(ws.next_message_of_type("registered", 5s));
  register_tools(port(), "c2", {tool_def("a")});
  SseClient sse(port(), "/client-tools/pending/c2");

  auto ws_call = execute_async(
      port(), json::object{{"tool", "client_c1_a"}, {"input", json::object{}}, {"timeout", 10000}});
  auto sse_call = execute_async(
      port(), json::object{{"tool", "client_c2_a"}, {"input", json::object{}}, {"timeout", 10000}});
  std::string ws_id(next_ws_request(ws).at("requestID").as_string());
  std::string sse_id = string_at(json::value(next_tool_request(sse)), "/requestID");

  auto t0 = Clock::now();
  server().send_signal(SIGTERM);

  auto ws_res = await(ws_call, 5s);
  auto sse_res = await(sse_call, 5s);
  EXPECT_TRUE(IsError(ws_res, 503, "UNAVAILABLE", {"shutting down"}));
  EXPECT_TRUE(IsError(sse_res, 503, "UNAVAILABLE", {"shutting down"}));

  // The clients are told, then their connections close.
  auto cancel = ws.next_message_of_type("cancel", 3s);
  ASSERT_TRUE(cancel.has_value()) << "the WebSocket client got no cancel";
  EXPECT_EQ(string_at(*cancel, "/requestID"), ws_id) << str(*cancel);
  auto tool_cancel = sse.next_event_named("tool-cancel", 3s);
  ASSERT_TRUE(tool_cancel.has_value()) << "the SSE client got no tool-cancel";
  EXPECT_EQ(string_at(tool_cancel->json(), "/requestID"), sse_id) << tool_cancel->data;
  EXPECT_TRUE(ws.wait_closed(3s));
  EXPECT_TRUE(sse.wait_closed(3s));

  auto status = server().wait_exit(5s);
  ASSERT_TRUE(status.has_value()) << "still running 5 s after SIGTERM";
  EXPECT_TRUE(status->exited && status->code == 0) << status->describe();
  EXPECT_LT(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count(), 5000);
}

TEST_F(Server, SigintExitsZero) {
  SseClient events(port(), "/event");
  server().send_signal(SIGINT);
  EXPECT_TRUE(events.wait_closed(3s)) << "the /event stream stayed open";
  auto status = server().wait_exit(5s);
  ASSERT_TRUE(status.has_value()) << "still running 5 s after SIGINT";
  EXPECT_TRUE(status->exited && status->code == 0) << status->describe();
}

// "listening on" is what supervisors and tests wait for; a SIGTERM sent the moment it appears
// is a clean stop (it was said before the signals were handled, and such a SIGTERM killed it).
TEST(ServerStart, ASigtermRightAfterTheListeningLineIsACleanStop) {
  for (int i = 0; i < 10; ++i) {
    ServerProcess server(test_config());
    server.send_signal(SIGTERM);
    auto status = server.wait_exit(10s);
    ASSERT_TRUE(status.has_value()) << "still running 10 s after SIGTERM";
    ASSERT_TRUE(status->exited && status->code == 0)
        << "start " << i << ": " << status->describe() << "\n"
        << server.log();
  }
}

// Push connections that outlive the shutdown deadline: WebSocket clients that never answer the
// server's close frame keep their connections open, so the server gives up waiting and stops
// with streams of every kind still open. Their coroutines must go while the server they refer
// to still exists: the sanitizer builds abort (exit code not 0) on a use after free, and
// TearDown looks for their reports in the log.
class ServerForcedExit : public ServerTest {};

TEST_F(ServerForcedExit, PushConnectionsStillOpenAtTheDeadlineAreCutAndItExitsZero) {
  // Long keepalives: no ping or idle timeout ends the silent clients before the deadline.
  start(test_config({{"keepaliveInterval", 60000}}));
  std::vector<std::unique_ptr<RawConnection>> silent;
  for (int i = 0; i < 16; ++i) {
    auto raw = std::make_unique<RawConnection>(port());
    raw->send(ws_upgrade_request("/client-tools/ws/silent" + std::to_string(i)));
    auto head = raw->read_response();
    ASSERT_TRUE(head && head->status == 101) << (head ? head->describe() : raw->received());
    silent.push_back(std::move(raw));
  }
  std::vector<std::unique_ptr<WsClient>> ws;
  std::vector<std::unique_ptr<SseClient>> sse;
  for (int i = 0; i < 8; ++i) {
    ws.push_back(std::make_unique<WsClient>(port(), "/client-tools/ws/ws" + std::to_string(i)));
    sse.push_back(
        std::make_unique<SseClient>(port(), "/client-tools/pending/sse" + std::to_string(i)));
    sse.push_back(std::make_unique<SseClient>(port(), "/event"));
  }

  server().send_signal(SIGTERM);
  auto status = server().wait_exit(15s);
  ASSERT_TRUE(status.has_value()) << "still running 15 s after SIGTERM";
  EXPECT_TRUE(status->exited && status->code == 0) << status->describe();
  EXPECT_TRUE(server().wait_for_log("closing the remaining connections", 1s))
      << "the silent clients were meant to hold the shutdown up to its deadline";
}

// ---- configuration ---------------------------------------------------------------------------

struct BadConfig {
  const char* text;
  const char* key;  // the message must name this key
};

// Names the case in test listings (and ctest names).
void PrintTo(const BadConfig& c, std::ostream* os) {
  *os << c.key;
}

class ServerConfigError : public testing::TestWithParam<BadConfig> {};

TEST_P(ServerConfigError, StopsStartUpNamingTheFileAndKey) {
  RunOptions options;
  options.config_text = GetParam().text;
  RunResult run = run_switchboard(options);
  ASSERT_TRUE(run.status.has_value()) << "the server started despite the bad config; stderr:\n"
                                      << run.stderr_text;
  EXPECT_FALSE(run.status->exited && run.status->code == 0) << run.status->describe();
  EXPECT_TRUE(run.status->exited) << run.status->describe();
  EXPECT_TRUE(contains(run.stderr_text, run.config_path.string()))
      << "stderr does not name " << run.config_path << ":\n"
      << run.stderr_text;
  EXPECT_TRUE(contains(run.stderr_text, GetParam().key))
      << "stderr does not name " << GetParam().key << ":\n"
      << run.stderr_text;
  // One style for every key, whichever component reads it.
  std::string expected =
      "switchboard: configuration error: " + run.config_path.string() + ": " + GetParam().key + " ";
  EXPECT_TRUE(contains(run.stderr_text, expected)) << "expected \"" << expected << "...\" in:\n"
                                                   << run.stderr_text;
  EXPECT_FALSE(contains(run.stderr_text, "listening on"));
}

const BadConfig kBadConfigs[] = {
    {R"({"clientTools": {"defaultTimeout": "soon"}})", "clientTools.defaultTimeout"},
    {R"({"clientTools": {"keepaliveInterval": true}})", "clientTools.keepaliveInterval"},
    {R"({"clientTools": {"reconnectGrace": -5}})", "clientTools.reconnectGrace"},
    {R"({"clientTools": {"rateLimit": 1.5}})", "clientTools.rateLimit"},
    {R"({"clientTools": {"maxTimeout": [1]}})", "clientTools.maxTimeout"},
    {R"({"clientTools": []})", "clientTools"},
    {R"({"server": {"maxBodyBytes": "10MB"}})", "server.maxBodyBytes"},
    {R"({"server": {"subscriberQueueLimit": {}}})", "server.subscriberQueueLimit"},
    {R"({"server": {"idleTimeout": "1m"}})", "server.idleTimeout"},
    {R"({"clientTools": {"defaultTimeout": 1000}, "server": "yes"})", "server"},
    // Keys that later components read (they were skipped silently, or a negative delay taken).
    {R"({"experimental": {"batch_tool": "yes"}})", "experimental.batch_tool"},
    {R"({"experimental": true})", "experimental"},
    {R"({"retry": {"initialDelay": -1}})", "retry.initialDelay"},
    {R"({"retry": {"attempts": "3"}})", "retry.attempts"},
    {R"({"retry": 3})", "retry"},
    {R"({"provider": {"local": {"baseURL": "http://127.0.0.1:9", "models": "mock-1"}}})",
     "provider.local.models"},
    {R"({"provider": {"local": {"baseUrl": "http://127.0.0.1:9", "models": ["m"]}}})",
     "provider.local.baseURL"},
    {R"({"provider": {"local": {"type": "openia", "models": ["m"]}}})", "provider.local.type"},
    {R"({"model": "gpt"})", "model"},
    {R"({"agent": {"build": {"steps": "many"}}})", "agent.build.steps"},
    {R"({"agent": {"review": {"tools": {"bash": "no"}}}})", "agent.review.tools.bash"},
    {R"({"permission": {"bash": "maybe"}})", "permission.bash"},
    {R"({"permission": {"timeout": -1}})", "permission.timeout"},
};

INSTANTIATE_TEST_SUITE_P(WrongTypes, ServerConfigError, testing::ValuesIn(kBadConfigs),
                         [](const testing::TestParamInfo<BadConfig>& info) {
                           std::string name =
                               std::string(info.param.key) + "_" + std::to_string(info.index);
                           for (char& ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return name;
                         });

TEST(ServerConfig, FileThatDoesNotParseStopsStartUpNamingTheFile) {
  RunOptions options;
  options.config_text = "{\"clientTools\": {\"defaultTimeout\": 1000,\n";
  RunResult run = run_switchboard(options);
  ASSERT_TRUE(run.status.has_value()) << "the server started; stderr:\n" << run.stderr_text;
  EXPECT_TRUE(run.status->exited && run.status->code != 0) << run.status->describe();
  EXPECT_TRUE(contains(run.stderr_text, run.config_path.string())) << run.stderr_text;
}

// A PostgreSQL store that cannot be used stops the start with what is wrong, before anything is
// served: no URL, a URL libpq cannot read, a server that is not there.
TEST(ServerConfig, AStoreThatCannotBeOpenedStopsStartUpSayingWhy) {
  for (auto [storage, says] : std::vector<std::pair<std::string, std::string>>{
           {R"({"type": "postgres"})", "no storage.url (or SWITCHBOARD_DATABASE_URL) is set"},
           {R"({"type": "postgres", "url": "postgresql://[::1"})", "the storage URL is not valid"},
           {R"({"type": "postgres", "url": "postgresql://sb@127.0.0.1:1/sb"})",
            "postgres: cannot connect"}}) {
    RunOptions options;
    options.config_text = R"({"storage": )" + storage + "}";
    RunResult run = run_switchboard(options);
    ASSERT_TRUE(run.status.has_value()) << "the server started; stderr:\n" << run.stderr_text;
    EXPECT_TRUE(run.status->exited && run.status->code == 1) << run.status->describe();
    EXPECT_TRUE(contains(run.stderr_text, says)) << storage << ":\n" << run.stderr_text;
  }
}

TEST(ServerConfig, BadKeyInTheUserConfigNamesThatFile) {
  RunOptions options;
  options.home_config_text = R"({"server": {"maxBodyBytes": "big"}})";
  RunResult run = run_switchboard(options);
  ASSERT_TRUE(run.status.has_value()) << "the server started; stderr:\n" << run.stderr_text;
  EXPECT_TRUE(run.status->exited && run.status->code != 0) << run.status->describe();
  auto file = (run.home / ".config" / "switchboard" / "config.json").string();
  EXPECT_TRUE(contains(run.stderr_text, file)) << "stderr does not name " << file << ":\n"
                                               << run.stderr_text;
  EXPECT_TRUE(contains(run.stderr_text, "server.maxBodyBytes")) << run.stderr_text;
}

TEST(ServerConfig, BadKeyInTheProjectConfigNamesThatFile) {
  RunOptions options;
  options.cwd_config_text = R"({"clientTools": {"rateLimit": "lots"}})";
  RunResult run = run_switchboard(options);
  ASSERT_TRUE(run.status.has_value()) << "the server started; stderr:\n" << run.stderr_text;
  EXPECT_TRUE(run.status->exited && run.status->code != 0) << run.status->describe();
  EXPECT_TRUE(contains(run.stderr_text, ".switchboard/config.json")) << run.stderr_text;
  EXPECT_TRUE(contains(run.stderr_text, "clientTools.rateLimit")) << run.stderr_text;
}

TEST(ServerConfig, ABadProviderKeyInTheUserConfigNamesThatFile) {
  RunOptions options;
  options.home_config_text = R"({"provider": {"local": {"models": "mock-1"}}})";
  options.config_text = R"({"provider": {"other": {"baseURL": "http://127.0.0.1:9"}}})";
  RunResult run = run_switchboard(options);
  ASSERT_TRUE(run.status.has_value()) << "the server started; stderr:\n" << run.stderr_text;
  EXPECT_TRUE(run.status->exited && run.status->code != 0) << run.status->describe();
  auto file = (run.home / ".config" / "switchboard" / "config.json").string();
  EXPECT_TRUE(contains(run.stderr_text,
                       "configuration error: " + file + ": provider.local.models must be an array"))
      << run.stderr_text;
}

TEST(ServerConfig, AMisspelledKeyInsideAProviderIsNamedAsUnknown) {
  RunOptions options;
  options.config_text = R"({"provider": {"local": {"baseUrl": "http://127.0.0.1:9"}}})";
  RunResult run = run_switchboard(options);
  ASSERT_TRUE(run.status.has_value()) << "the server started; stderr:\n" << run.stderr_text;
  EXPECT_TRUE(contains(run.stderr_text, run.config_path.string() +
                                            ": unknown key provider.local.baseUrl (ignored, "
                                            "did you mean baseURL?)"))
      << run.stderr_text;
  EXPECT_TRUE(contains(run.stderr_text, "provider.local.baseURL is required")) << run.stderr_text;
}

TEST(ServerConfig, MissingExplicitConfigFileStopsStartUp) {
  RunOptions options;
  options.args.push_back("--config");
  options.args.push_back("/nonexistent/switchboard.json");
  RunResult run = run_switchboard(options);
  ASSERT_TRUE(run.status.has_value()) << "the server started; stderr:\n" << run.stderr_text;
  EXPECT_TRUE(run.status->exited && run.status->code != 0) << run.status->describe();
  EXPECT_TRUE(contains(run.stderr_text, "/nonexistent/switchboard.json")) << run.stderr_text;
}

// ---- the data directory ----------------------------------------------------------------------

// A data directory serves one server at a time (the server holds its database for itself): a
// second server started on it stops at start-up with a message that names the directory, the
// first goes on, and once the first has stopped a server starts there and finds its sessions.
TEST(ServerDataDirectory, ASecondServerOnTheSameDataDirectoryStopsAtStartUp) {
  TempDir data("switchboard-data");
  ServerProcess::Options options;
  options.config = test_config();
  options.data_dir = data.path();
  std::optional<ServerProcess> first(std::in_place, options);
  auto created = http_post(first->port(), "/session", json::object{{"title", "kept"}});
  ASSERT_TRUE(IsOk(created));
  std::string sid = string_at(created.json(), "/id");

  RunOptions second;
  second.config_text = json::serialize(test_config());
  second.args.push_back("--data-dir");
  second.args.push_back(data.path().string());
  RunResult run = run_switchboard(second);
  ASSERT_TRUE(run.status.has_value()) << "the second server started; stderr:\n" << run.stderr_text;
  EXPECT_TRUE(run.status->exited && run.status->code != 0) << run.status->describe();
  EXPECT_TRUE(contains(run.stderr_text, "the data directory " + data.path().string() +
                                            " is in use by another Switchboard server"))
      << run.stderr_text;

  EXPECT_TRUE(IsOk(http_get(first->port(), "/session/" + sid))) << "the first server stopped";
  first->send_signal(SIGTERM);
  auto exited = first->wait_exit(10s);
  ASSERT_TRUE(exited && exited->exited && exited->code == 0)
      << (exited ? exited->describe() : "still running");
  first.reset();
  ServerProcess again(options);
  auto session = http_get(again.port(), "/session/" + sid);
  ASSERT_TRUE(IsOk(session));
  EXPECT_EQ(string_at(session.json(), "/title"), "kept");
}

}  // namespace
}  // namespace sb::test
