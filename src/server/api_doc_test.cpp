// The OpenAPI document against the route table it is built from.
#include "server/api_doc.hpp"

#include <gtest/gtest.h>

#include <set>

#include "util/text.hpp"

namespace sb::server {
namespace {

TEST(ApiDoc, IsWhole) {
  // Every route has an id and summary, every schema and parameter it names is defined, no name
  // is defined twice, every $ref resolves.
  for (const auto& problem : api_document_problems())
    ADD_FAILURE() << problem;
}

TEST(ApiDoc, DocumentsEveryRouteAndNothingElse) {
  std::set<std::pair<std::string, std::string>> table;
  for (const auto& route : routes()) {
    std::string path;
    for (auto segment : route.pattern)
      path.append("/").append(segment);
    table.emplace(ascii_lower(http::to_string(route.method)), path.empty() ? "/" : path);
  }
  std::set<std::pair<std::string, std::string>> documented;
  const auto& paths = api_document().at("paths").as_object();
  for (const auto& [path, item] : paths)
    for (const auto& [method, op] : item.as_object()) {
      documented.emplace(std::string(method), std::string(path));
      EXPECT_TRUE(op.as_object().contains("responses")) << method << " " << path;
    }
  EXPECT_EQ(documented, table);
  EXPECT_EQ(api_document().at("openapi"), "3.1.0");
}

TEST(ApiDoc, PathParametersAreNamedAsInThePath) {
  const auto& op = api_document().at("paths").at("/session/{sessionID}").at("get").as_object();
  const auto& params = op.at("parameters").as_array();
  ASSERT_FALSE(params.empty());
  EXPECT_EQ(params[0].at("name"), "sessionID");
  EXPECT_EQ(params[0].at("in"), "path");
  EXPECT_EQ(params[0].at("required"), true);
}

Request request(http::verb method, std::string target, std::string body = {}) {
  Request req{method, target, 11};
  req.body() = std::move(body);
  return req;
}

Response answer(http::status status, std::string body) {
  Response res{status, 11};
  res.set(http::field::content_type, "application/json");
  res.body() = std::move(body);
  return res;
}

const Route& route(std::string_view id) {
  for (const auto& r : routes())
    if (r.doc.id == id) return r;
  throw std::runtime_error("no route " + std::string(id));
}

TEST(ApiDoc, CheckPassesAnAnswerThatMatches) {
  auto req = request(http::verb::get, "/health");
  EXPECT_FALSE(check_exchange(
      route("global.health"), req,
      answer(http::status::ok,
             R"({"healthy":true,"version":"1","storage":{"engine":"sqlite","ok":true}})")));
  // A store that does not answer: the same shape with a 503.
  EXPECT_FALSE(check_exchange(
      route("global.health"), req,
      answer(
          http::status::service_unavailable,
          R"({"healthy":false,"version":"1","storage":{"engine":"postgres","ok":false,"error":"postgres: down"}})")));
}

TEST(ApiDoc, CheckCatchesAnAnswerThatDoesNotMatch) {
  auto req = request(http::verb::get, "/health");
  auto wrong =
      check_exchange(route("global.health"), req, answer(http::status::ok, R"({"healthy":"yes"})"));
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->result(), http::status::internal_server_error);
  EXPECT_NE(wrong->body().find("does not match Health"), std::string::npos) << wrong->body();
}

TEST(ApiDoc, CheckCatchesAnUndocumentedStatus) {
  auto req = request(http::verb::get, "/health");
  auto wrong = check_exchange(
      route("global.health"), req,
      answer(http::status::conflict, R"({"error":{"code":"CONFLICT","message":"x"}})"));
  ASSERT_TRUE(wrong);
  EXPECT_NE(wrong->body().find("409, which is not documented"), std::string::npos) << wrong->body();
}

TEST(ApiDoc, CheckHoldsErrorsToTheErrorSchema) {
  auto req = request(http::verb::post, "/auth", R"({"password":"x"})");
  EXPECT_FALSE(check_exchange(
      route("auth.login"), req,
      answer(http::status::unauthorized, R"({"error":{"code":"UNAUTHORIZED","message":"no"}})")));
  auto wrong = check_exchange(route("auth.login"), req,
                              answer(http::status::unauthorized, R"({"message":"no"})"));
  ASSERT_TRUE(wrong);
  EXPECT_NE(wrong->body().find("does not match Error"), std::string::npos) << wrong->body();
}

TEST(ApiDoc, CheckHoldsAnAcceptedBodyToTheBodySchema) {
  auto req = request(http::verb::post, "/auth", R"({"password":7})");
  auto wrong = check_exchange(route("auth.login"), req,
                              answer(http::status::ok, R"({"authenticated":true})"));
  ASSERT_TRUE(wrong);
  EXPECT_NE(wrong->body().find("the accepted body does not match LoginRequest"), std::string::npos)
      << wrong->body();
}

}  // namespace
}  // namespace sb::server
