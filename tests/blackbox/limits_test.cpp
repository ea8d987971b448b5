// Black-box tests of the registration limits (issue 6, "Limits"): tools per client, description
// length and schema size. Each answers 413 TOO_LARGE naming the key, registers nothing, and
// leaves the server serving everyone else.
#include <gtest/gtest.h>

#include <string>

#include "blackbox_util.hpp"

namespace sb::test {
namespace {

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

}  // namespace
}  // namespace sb::test
