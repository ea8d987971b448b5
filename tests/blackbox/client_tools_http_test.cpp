// Black-box tests of the client-tools HTTP routes that need no live client connection:
// registration and read-back (seed 001's integration cases 1-3), unregistration, execute's
// error answers and timeouts, unknown and missing request ids, malformed bodies on every route,
// body size limits and the rate limit.
#include <gtest/gtest.h>

#include <cctype>
#include <ostream>
#include <string>
#include <vector>

#include "blackbox_util.hpp"

namespace sb::test {
namespace {

long long elapsed_ms(Clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count();
}

class ClientToolsHttp : public ServerTest {
 protected:
  void SetUp() override { start(test_config()); }
};

// ---- seed 001, integration cases 1-3 --------------------------------------------------------

TEST_F(ClientToolsHttp, EmptyToolListsWhenNothingIsRegistered) {
  auto one = http_get(port(), "/client-tools/tools/nobody");
  ASSERT_TRUE(IsOk(one));
  EXPECT_EQ(one.json(), json::array{}) << one.describe();
  EXPECT_TRUE(contains(one.header("content-type").value_or(""), "application/json"))
      << "Content-Type: " << one.header("content-type").value_or("(none)");

  auto all = http_get(port(), "/client-tools/tools");
  ASSERT_TRUE(IsOk(all));
  EXPECT_EQ(all.json(), json::object{}) << all.describe();
}

TEST_F(ClientToolsHttp, RegisteredToolsCanBeReadBack) {
  json::value time_schema =
      json::object{{"type", "object"},
                   {"properties", json::object{{"zone", json::object{{"type", "string"}}}}},
                   {"required", json::array{"zone"}}};
  auto res = http_post(
      port(), "/client-tools/register",
      json::object{{"sessionID", "ses_1"},
                   {"clientID", "c1"},
                   {"tools", json::array{tool_def("get_time", "Current time", time_schema),
                                         tool_def("search-docs", "Search the docs")}}});
  ASSERT_TRUE(IsOk(res));
  EXPECT_EQ(
      res.json(),
      (json::object{{"registered", json::array{"client_c1_get_time", "client_c1_search-docs"}}}));

  auto tools = http_get(port(), "/client-tools/tools/c1");
  ASSERT_TRUE(IsOk(tools));
  json::value body = tools.json();
  ASSERT_TRUE(body.is_array()) << tools.describe();
  ASSERT_EQ(body.get_array().size(), 2u) << tools.describe();
  bool saw_time = false, saw_search = false;
  for (const auto& t : body.get_array()) {
    std::string id = string_at(t, "/id");
    if (id == "client_c1_get_time") {
      saw_time = true;
      EXPECT_EQ(string_at(t, "/description"), "Current time");
      ASSERT_NE(find(t, "/parameters"), nullptr) << str(t);
      EXPECT_EQ(*find(t, "/parameters"), time_schema) << str(t);
    } else if (id == "client_c1_search-docs") {
      saw_search = true;
      EXPECT_EQ(string_at(t, "/description"), "Search the docs");
      ASSERT_NE(find(t, "/parameters"), nullptr) << str(t);
      EXPECT_EQ(*find(t, "/parameters"), text_schema()) << str(t);
    } else {
      ADD_FAILURE() << "unexpected tool " << str(t);
    }
  }
  EXPECT_TRUE(saw_time && saw_search) << tools.describe();

  // Another client's list is unaffected.
  auto other = http_get(port(), "/client-tools/tools/c2");
  ASSERT_TRUE(IsOk(other));
  EXPECT_EQ(other.json(), json::array{});
}

TEST_F(ClientToolsHttp, AllToolsAcrossClientsIsAMapById) {
  register_tools(port(), "c1", {tool_def("get_time", "c1 time")});
  register_tools(port(), "c2", {tool_def("get_time", "c2 time"), tool_def("search", "c2 search")});

  auto all = http_get(port(), "/client-tools/tools");
  ASSERT_TRUE(IsOk(all));
  json::value body = all.json();
  ASSERT_TRUE(body.is_object()) << all.describe();
  const auto& map = body.get_object();
  EXPECT_EQ(map.size(), 3u) << all.describe();
  for (const char* id : {"client_c1_get_time", "client_c2_get_time", "client_c2_search"}) {
    const json::value* t = map.if_contains(id);
    ASSERT_NE(t, nullptr) << id << " missing from " << all.describe();
    EXPECT_EQ(string_at(*t, "/id"), id);
    EXPECT_NE(find(*t, "/parameters"), nullptr) << str(*t);
  }
  EXPECT_EQ(string_at(map.at("client_c1_get_time"), "/description"), "c1 time");
  EXPECT_EQ(string_at(map.at("client_c2_get_time"), "/description"), "c2 time");
}

TEST_F(ClientToolsHttp, RegisteringAnExistingIdReplacesIt) {
  register_tools(port(), "c1", {tool_def("get_time", "v1")});
  auto again = http_post(port(), "/client-tools/register",
                         json::object{{"clientID", "c1"}, {"tools", {tool_def("get_time", "v2")}}});
  ASSERT_TRUE(IsOk(again));
  EXPECT_EQ(again.json(), (json::object{{"registered", json::array{"client_c1_get_time"}}}));

  auto tools = http_get(port(), "/client-tools/tools/c1");
  ASSERT_TRUE(IsOk(tools));
  ASSERT_EQ(tools.json().as_array().size(), 1u) << tools.describe();
  EXPECT_EQ(string_at(tools.json(), "/0/description"), "v2");
}

TEST_F(ClientToolsHttp, ToolWithoutParametersGetsAnObjectSchema) {
  register_tools(port(), "c1", {json::object{{"id", "ping"}, {"description", "no input"}}});
  auto tools = http_get(port(), "/client-tools/tools/c1");
  ASSERT_TRUE(IsOk(tools));
  EXPECT_EQ(string_at(tools.json(), "/0/id"), "client_c1_ping") << tools.describe();
  EXPECT_EQ(string_at(tools.json(), "/0/parameters/type"), "object") << tools.describe();
}

TEST_F(ClientToolsHttp, OneInvalidToolRejectsTheWholeRegistration) {
  struct Case {
    json::value bad_tool;
    std::string mentions;
  };
  std::vector<Case> cases = {
      {json::object{{"id", "has space"}, {"description", "d"}}, "tools[1].id"},
      {json::object{{"id", ""}, {"description", "d"}}, "tools[1].id"},
      {json::object{{"id", std::string(129, 'x')}, {"description", "d"}}, "tools[1].id"},
      {tool_def("strings", "d", json::object{{"type", "string"}}), "tools[1].parameters"},
      {tool_def("broken", "d",
                json::object{{"type", "object"},
                             {"properties", json::object{{"a", json::object{{"type", 12}}}}}}),
       "tools[1].parameters"},
      {tool_def("good", "the same id again"), "tools[1].id \"good\" is already tools[0].id"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(str(c.bad_tool));
    auto res =
        http_post(port(), "/client-tools/register",
                  json::object{{"clientID", "c1"}, {"tools", {tool_def("good"), c.bad_tool}}});
    EXPECT_TRUE(IsError(res, 400, "INVALID_REQUEST", {c.mentions}));
  }
  auto tools = http_get(port(), "/client-tools/tools/c1");
  ASSERT_TRUE(IsOk(tools));
  EXPECT_EQ(tools.json(), json::array{}) << "the good tool must not be registered either";

  auto bad_client = http_post(port(), "/client-tools/register",
                              json::object{{"clientID", "c 1"}, {"tools", {tool_def("good")}}});
  EXPECT_TRUE(IsError(bad_client, 400, "INVALID_REQUEST", {"clientID"}));
}

TEST_F(ClientToolsHttp, InvalidClientIdInAPathIs400) {
  const std::string long_id(129, 'x');
  for (const std::string& id : {std::string("bad%20id"), std::string("semi;colon"), long_id}) {
    SCOPED_TRACE(id);
    EXPECT_TRUE(IsError(http_get(port(), "/client-tools/tools/" + id), 400, "INVALID_REQUEST",
                        {"clientID"}));
    EXPECT_TRUE(IsError(http_get(port(), "/client-tools/pending/" + id), 400, "INVALID_REQUEST",
                        {"clientID"}));
    auto upgrade = http_request(port(), "GET", "/client-tools/ws/" + id, {},
                                {{"Upgrade", "websocket"},
                                 {"Connection", "Upgrade"},
                                 {"Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="},
                                 {"Sec-WebSocket-Version", "13"}});
    EXPECT_TRUE(IsError(upgrade, 400, "INVALID_REQUEST", {"clientID"}));
  }
}

// ---- unregister ------------------------------------------------------------------------------

TEST_F(ClientToolsHttp, UnregisterByFullIdOrNameAndSkipsUnknownIds) {
  register_tools(port(), "c1", {tool_def("a"), tool_def("b"), tool_def("c")});
  auto res = http_delete(
      port(), "/client-tools/unregister",
      json::object{
          {"sessionID", "ses_1"}, {"clientID", "c1"}, {"toolIDs", {"client_c1_a", "b", "nope"}}});
  ASSERT_TRUE(IsOk(res));
  EXPECT_EQ(res.json(),
            (json::object{{"success", true},
                          {"unregistered", json::array{"client_c1_a", "client_c1_b"}}}));

  auto tools = http_get(port(), "/client-tools/tools/c1");
  ASSERT_TRUE(IsOk(tools));
  ASSERT_EQ(tools.json().as_array().size(), 1u) << tools.describe();
  EXPECT_EQ(string_at(tools.json(), "/0/id"), "client_c1_c");
}

TEST_F(ClientToolsHttp, UnregisterWithoutToolIdsRemovesAllOfTheClientsTools) {
  register_tools(port(), "c1", {tool_def("a"), tool_def("b")});
  register_tools(port(), "c2", {tool_def("a")});
  auto res = http_delete(port(), "/client-tools/unregister", json::object{{"clientID", "c1"}});
  ASSERT_TRUE(IsOk(res));
  EXPECT_EQ(res.json(),
            (json::object{{"success", true},
                          {"unregistered", json::array{"client_c1_a", "client_c1_b"}}}));
  EXPECT_EQ(http_get(port(), "/client-tools/tools/c1").json(), json::array{});
  auto all = http_get(port(), "/client-tools/tools").json();
  ASSERT_TRUE(all.is_object());
  EXPECT_EQ(all.get_object().size(), 1u) << str(all);
  EXPECT_NE(all.get_object().if_contains("client_c2_a"), nullptr) << str(all);

  // Nothing left: still a success, with an empty list.
  auto again = http_delete(port(), "/client-tools/unregister", json::object{{"clientID", "c1"}});
  ASSERT_TRUE(IsOk(again));
  EXPECT_EQ(again.json(), (json::object{{"success", true}, {"unregistered", json::array{}}}));
}

// ---- execute ---------------------------------------------------------------------------------

TEST_F(ClientToolsHttp, ExecuteUnknownToolIs404) {
  auto res = http_post(port(), "/client-tools/execute",
                       json::object{{"tool", "client_c1_nope"}, {"input", json::object{}}});
  EXPECT_TRUE(IsError(res, 404, "NOT_FOUND", {"client_c1_nope"}));

  register_tools(port(), "c1", {tool_def("a")});
  // The name of another client's tool does not resolve.
  auto other =
      http_post(port(), "/client-tools/execute",
                json::object{{"clientID", "c2"}, {"tool", "a"}, {"input", json::object{}}});
  EXPECT_TRUE(IsError(other, 404, "NOT_FOUND"));
}

TEST_F(ClientToolsHttp, ExecuteInputThatFailsTheSchemaIs400WithThePath) {
  json::value schema = json::object{
      {"type", "object"},
      {"properties",
       json::object{
           {"location", json::object{{"type", "string"}}},
           {"options",
            json::object{
                {"type", "object"},
                {"properties",
                 json::object{{"units", json::object{{"enum", json::array{"c", "f"}}}}}}}}}},
      {"required", json::array{"location"}}};
  register_tools(port(), "c1", {tool_def("weather", "Weather", schema)});
  BusEvents bus(port());

  auto wrong_type = http_post(
      port(), "/client-tools/execute",
      json::object{{"tool", "client_c1_weather"}, {"input", json::object{{"location", 5}}}});
  EXPECT_TRUE(IsError(wrong_type, 400, "INVALID_REQUEST", {"/location"}));

  auto nested = http_post(
      port(), "/client-tools/execute",
      json::object{{"tool", "client_c1_weather"},
                   {"input", json::object{{"location", "Oslo"}, {"options", {{"units", "k"}}}}}});
  EXPECT_TRUE(IsError(nested, 400, "INVALID_REQUEST", {"/options/units"}));

  auto missing = http_post(port(), "/client-tools/execute",
                           json::object{{"tool", "client_c1_weather"}, {"input", json::object{}}});
  EXPECT_TRUE(IsError(missing, 400, "INVALID_REQUEST", {"schema"}));

  // None of them reached the client: the first request event is the valid call below.
  auto valid = http_post(port(), "/client-tools/execute",
                         json::object{{"tool", "client_c1_weather"},
                                      {"input", json::object{{"location", "Oslo"}}},
                                      {"timeout", 100}});
  EXPECT_TRUE(IsError(valid, 504, "TIMEOUT"));
  auto first = bus.next("client-tool.request");
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(string_at(json::value(*first), "/properties/request/input/location"), "Oslo")
      << str(*first);
}

TEST_F(ClientToolsHttp, ExecuteWithoutAnyClientTimesOutWith504) {
  register_tools(port(), "c1", {tool_def("a")});
  auto t0 = Clock::now();
  auto res =
      http_post(port(), "/client-tools/execute",
                json::object{{"tool", "client_c1_a"}, {"input", json::object{}}, {"timeout", 300}});
  auto ms = elapsed_ms(t0);
  EXPECT_TRUE(IsError(res, 504, "TIMEOUT"));
  EXPECT_GE(ms, 250) << "answered before the timeout";
  EXPECT_LT(ms, 3000) << "answered long after the timeout";
}

TEST_F(ClientToolsHttp, ExecuteAcceptsToolIDAndAClientsOwnToolName) {
  register_tools(port(), "c1", {tool_def("a")});
  // Each resolves (a 504 for want of a client, not a 404 or 400).
  auto by_tool_id = http_post(
      port(), "/client-tools/execute",
      json::object{{"toolID", "client_c1_a"}, {"input", json::object{}}, {"timeout", 50}});
  EXPECT_TRUE(IsError(by_tool_id, 504, "TIMEOUT"));
  auto by_name = http_post(
      port(), "/client-tools/execute",
      json::object{{"clientID", "c1"}, {"tool", "a"}, {"input", json::object{}}, {"timeout", 50}});
  EXPECT_TRUE(IsError(by_name, 504, "TIMEOUT"));
}

class ClientToolsHttpShortTimeouts : public ServerTest {
 protected:
  void SetUp() override {
    start(test_config(json::object{{"defaultTimeout", 300}, {"maxTimeout", 700}}));
  }
};

TEST_F(ClientToolsHttpShortTimeouts, DefaultTimeoutAppliesAndMaxTimeoutCapsTheCallersTimeout) {
  register_tools(port(), "c1", {tool_def("a")});
  auto t0 = Clock::now();
  auto by_default = http_post(port(), "/client-tools/execute",
                              json::object{{"tool", "client_c1_a"}, {"input", json::object{}}});
  auto ms = elapsed_ms(t0);
  EXPECT_TRUE(IsError(by_default, 504, "TIMEOUT"));
  EXPECT_GE(ms, 250);
  EXPECT_LT(ms, 650) << "defaultTimeout is 300 ms";

  t0 = Clock::now();
  auto capped = http_post(
      port(), "/client-tools/execute",
      json::object{{"tool", "client_c1_a"}, {"input", json::object{}}, {"timeout", 60000}});
  ms = elapsed_ms(t0);
  EXPECT_TRUE(IsError(capped, 504, "TIMEOUT"));
  EXPECT_GE(ms, 650);
  EXPECT_LT(ms, 3000) << "maxTimeout is 700 ms";
}

// ---- result and progress without a live call ---------------------------------------------------

TEST_F(ClientToolsHttp, ResultForAnUnknownRequestIdIs404) {
  auto nested = http_post(port(), "/client-tools/result",
                          json::object{{"requestID", "req_never_issued"},
                                       {"result", {{"status", "success"}, {"output", "x"}}}});
  EXPECT_TRUE(IsError(nested, 404, "NOT_FOUND", {"req_never_issued"}));
  auto flat = http_post(
      port(), "/client-tools/result",
      json::object{{"requestID", "req_never_issued"}, {"status", "success"}, {"output", "x"}});
  EXPECT_TRUE(IsError(flat, 404, "NOT_FOUND"));
  auto progress = http_post(port(), "/client-tools/progress",
                            json::object{{"requestID", "req_never_issued"}, {"title", "half"}});
  EXPECT_TRUE(IsError(progress, 404, "NOT_FOUND"));
}

TEST_F(ClientToolsHttp, ResultWithoutRequestIdIs400) {
  auto res = http_post(port(), "/client-tools/result",
                       json::object{{"result", {{"status", "success"}, {"output", "x"}}}});
  EXPECT_TRUE(IsError(res, 400, "INVALID_REQUEST", {"requestID"}));
  auto empty = http_post(port(), "/client-tools/result",
                         json::object{{"requestID", ""}, {"status", "success"}});
  EXPECT_TRUE(IsError(empty, 400, "INVALID_REQUEST", {"requestID"}));
  auto progress = http_post(port(), "/client-tools/progress", json::object{{"title", "half"}});
  EXPECT_TRUE(IsError(progress, 400, "INVALID_REQUEST", {"requestID"}));
}

// ---- malformed bodies on every POST/DELETE route ------------------------------------------------

struct Route {
  const char* method;
  const char* target;
};
const Route kBodyRoutes[] = {{"POST", "/client-tools/register"},
                             {"DELETE", "/client-tools/unregister"},
                             {"POST", "/client-tools/execute"},
                             {"POST", "/client-tools/result"},
                             {"POST", "/client-tools/progress"}};

TEST_F(ClientToolsHttp, MalformedJsonIs400WithItsPositionOnEveryRoute) {
  for (const auto& r : kBodyRoutes) {
    SCOPED_TRACE(std::string(r.method) + " " + r.target);
    auto truncated =
        http_request(port(), r.method, r.target, "{\"clientID\": \"c1\",\n \"tools\": [");
    EXPECT_TRUE(IsError(truncated, 400, "INVALID_REQUEST", {"line 2"}));
    auto garbage = http_request(port(), r.method, r.target, "{\"requestID\": nope}");
    EXPECT_TRUE(IsError(garbage, 400, "INVALID_REQUEST", {"line 1", "column"}));
    auto not_object = http_request(port(), r.method, r.target, "[1, 2]");
    EXPECT_TRUE(IsError(not_object, 400, "INVALID_REQUEST"));
    auto empty = http_request(port(), r.method, r.target, "");
    EXPECT_TRUE(IsError(empty, 400, "INVALID_REQUEST"));
  }
  // The server is fine afterwards.
  EXPECT_TRUE(IsOk(http_get(port(), "/health")));
}

// A body with one field missing or of the wrong type, and the field the message must name.
struct BadBody {
  const char* method;
  const char* target;
  const char* body;
  const char* field;
};

// Names the case in test listings (and ctest names).
void PrintTo(const BadBody& b, std::ostream* os) {
  *os << b.method << " " << b.target << " (" << b.field << ")";
}

class ClientToolsWrongTypes : public ServerTest, public testing::WithParamInterface<BadBody> {
 protected:
  void SetUp() override {
    start(test_config());
    // The tool exists, so the type error is the only thing wrong with an execute body.
    register_tools(port(), "c1", {tool_def("a")});
  }
};

TEST_P(ClientToolsWrongTypes, Is400NamingTheField) {
  const BadBody& b = GetParam();
  auto res = http_request(port(), b.method, b.target, b.body);
  EXPECT_TRUE(IsError(res, 400, "INVALID_REQUEST", {b.field})) << b.body;
}

const BadBody kBadBodies[] = {
    {"POST", "/client-tools/register", R"({"clientID": 5, "tools": []})", "clientID"},
    {"POST", "/client-tools/register", R"({"tools": [{"id": "a", "description": "d"}]})",
     "clientID"},
    {"POST", "/client-tools/register", R"({"clientID": "c1"})", "tools"},
    {"POST", "/client-tools/register", R"({"clientID": "c1", "tools": {"id": "a"}})", "tools"},
    {"POST", "/client-tools/register", R"({"clientID": "c1", "tools": [5]})", "tools[0]"},
    {"POST", "/client-tools/register",
     R"({"clientID": "c1", "tools": [{"id": 7, "description": "d"}]})", "tools[0].id"},
    {"POST", "/client-tools/register", R"({"clientID": "c1", "tools": [{"description": "d"}]})",
     "tools[0].id"},
    {"POST", "/client-tools/register",
     R"({"clientID": "c1", "tools": [{"id": "a", "description": 7}]})", "tools[0].description"},
    {"POST", "/client-tools/register",
     R"({"clientID": "c1", "tools": [{"id": "a", "description": "d", "parameters": "x"}]})",
     "tools[0].parameters"},
    {"POST", "/client-tools/register", R"({"sessionID": 5, "clientID": "c1", "tools": []})",
     "sessionID"},
    {"DELETE", "/client-tools/unregister", R"({"clientID": 5})", "clientID"},
    {"DELETE", "/client-tools/unregister", R"({"toolIDs": ["a"]})", "clientID"},
    {"DELETE", "/client-tools/unregister", R"({"clientID": "c1", "toolIDs": "a"})", "toolIDs"},
    {"DELETE", "/client-tools/unregister", R"({"clientID": "c1", "toolIDs": [1]})", "toolIDs[0]"},
    {"DELETE", "/client-tools/unregister", R"({"sessionID": [], "clientID": "c1"})", "sessionID"},
    {"POST", "/client-tools/execute", R"({"tool": 5, "input": {}})", "tool"},
    {"POST", "/client-tools/execute", R"({"input": {}})", "tool"},
    {"POST", "/client-tools/execute", R"({"toolID": 5, "input": {}})", "toolID"},
    {"POST", "/client-tools/execute", R"({"tool": "client_c1_a", "input": "x"})", "input"},
    {"POST", "/client-tools/execute", R"({"tool": "client_c1_a", "input": {}, "timeout": "soon"})",
     "timeout"},
    {"POST", "/client-tools/execute", R"({"tool": "client_c1_a", "input": {}, "timeout": 0})",
     "timeout"},
    {"POST", "/client-tools/execute", R"({"tool": "client_c1_a", "input": {}, "timeout": -5})",
     "timeout"},
    {"POST", "/client-tools/execute", R"({"tool": "client_c1_a", "input": {}, "clientID": 5})",
     "clientID"},
    {"POST", "/client-tools/execute", R"({"tool": "client_c1_a", "input": {}, "sessionID": 5})",
     "sessionID"},
    {"POST", "/client-tools/execute", R"({"tool": "client_c1_a", "input": {}, "messageID": 5})",
     "messageID"},
    {"POST", "/client-tools/execute", R"({"tool": "client_c1_a", "input": {}, "callID": true})",
     "callID"},
    {"POST", "/client-tools/result", R"({"requestID": 5, "result": {"status": "success"}})",
     "requestID"},
    {"POST", "/client-tools/result", R"({"requestID": ["req_1"], "status": "success"})",
     "requestID"},
    {"POST", "/client-tools/progress", R"({"requestID": 5, "title": "half"})", "requestID"},
};

INSTANTIATE_TEST_SUITE_P(EveryRoute, ClientToolsWrongTypes, testing::ValuesIn(kBadBodies),
                         [](const testing::TestParamInfo<BadBody>& info) {
                           std::string name = std::string(info.param.method) + "_" +
                                              std::string(info.param.target).substr(14) + "_" +
                                              std::to_string(info.index);
                           for (char& ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return name;
                         });

// ---- body size limit -------------------------------------------------------------------------

class ClientToolsBodyLimit : public ServerTest {
 protected:
  void SetUp() override { start(test_config({}, json::object{{"maxBodyBytes", 4096}})); }
};

TEST_F(ClientToolsBodyLimit, BodiesOverMaxBodyBytesAre413) {
  auto big = http_post(
      port(), "/client-tools/register",
      json::object{{"clientID", "c1"}, {"tools", {tool_def("a", std::string(8000, 'd'))}}});
  EXPECT_TRUE(IsError(big, 413, "TOO_LARGE", {"4096 bytes", "server.maxBodyBytes"}));
  EXPECT_EQ(http_get(port(), "/client-tools/tools/c1").json(), json::array{})
      << "the oversized registration must not take effect";

  auto big_execute = http_post(
      port(), "/client-tools/execute",
      json::object{{"tool", "client_c1_a"}, {"input", {{"text", std::string(8000, 'x')}}}});
  EXPECT_TRUE(IsError(big_execute, 413, "TOO_LARGE"));

  // Under the limit is fine: the limit is the configured one, not something smaller.
  auto fits = http_post(
      port(), "/client-tools/register",
      json::object{{"clientID", "c1"}, {"tools", {tool_def("a", std::string(3000, 'd'))}}});
  EXPECT_TRUE(IsOk(fits));
}

TEST_F(ClientToolsBodyLimit, DeclaredLengthOverTheLimitIsRefusedWithoutWaitingForTheBody) {
  RawConnection raw(port());
  raw.send(
      "POST /client-tools/register HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Content-Type: application/json\r\nContent-Length: 100000000\r\n\r\n{\"clientID\":");
  auto res = raw.read_response(3s);
  ASSERT_TRUE(res.has_value()) << "no answer before the body was sent; got: " << raw.received();
  EXPECT_TRUE(IsError(*res, 413, "TOO_LARGE"));
}

TEST_F(ClientToolsBodyLimit, ChunkedBodyOverTheLimitIs413) {
  std::string chunk(3000, ' ');
  std::string request =
      "POST /client-tools/register HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 3; ++i)
    request += "bb8\r\n" + chunk + "\r\n";
  request += "0\r\n\r\n";
  RawConnection raw(port());
  try {
    raw.send(request);
  } catch (const std::exception&) {
    // The server may answer and close before reading everything; the answer is what counts.
  }
  auto res = raw.read_response(3s);
  ASSERT_TRUE(res.has_value()) << "no answer; got: " << raw.received();
  EXPECT_TRUE(IsError(*res, 413, "TOO_LARGE"));
}

// ---- rate limit ------------------------------------------------------------------------------

class ClientToolsRateLimit : public ServerTest {
 protected:
  void SetUp() override { start(test_config(json::object{{"rateLimit", 3}})); }
};

TEST_F(ClientToolsRateLimit, ExecutionsOverTheLimitAre429PerClient) {
  register_tools(port(), "c1", {tool_def("a")});
  register_tools(port(), "c2", {tool_def("a")});
  json::object call{{"tool", "client_c1_a"}, {"input", json::object{}}, {"timeout", 50}};
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE("execution " + std::to_string(i + 1));
    // Accepted (and then timed out, as no client is connected).
    EXPECT_TRUE(IsError(http_post(port(), "/client-tools/execute", call), 504, "TIMEOUT"));
  }
  auto t0 = Clock::now();
  auto limited = http_post(port(), "/client-tools/execute", call);
  EXPECT_TRUE(IsError(limited, 429, "RATE_LIMITED"));
  EXPECT_LT(elapsed_ms(t0), 1000) << "a refused call is answered at once";

  // Another client's tool is not limited by c1's use.
  json::object other{{"tool", "client_c2_a"}, {"input", json::object{}}, {"timeout", 50}};
  EXPECT_TRUE(IsError(http_post(port(), "/client-tools/execute", other), 504, "TIMEOUT"));
}

}  // namespace
}  // namespace sb::test
