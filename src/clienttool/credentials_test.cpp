#include "clienttool/credentials.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "store/sqlite.hpp"

namespace sb::clienttool {
namespace {

TEST(ClientCredentials, FirstUseIssuesATokenThatLaterUsesMustPresent) {
  auto creds = ClientCredentials::open_memory();
  ASSERT_TRUE(creds);
  auto first = (*creds)->authenticate("app", std::nullopt);
  ASSERT_TRUE(first);
  ASSERT_TRUE(first->has_value());
  const std::string token = **first;
  EXPECT_TRUE(token.starts_with("sbct_"));
  EXPECT_EQ(token.size(), 5u + 64u);

  auto again = (*creds)->authenticate("app", token);
  ASSERT_TRUE(again);
  EXPECT_FALSE(again->has_value()) << "a known client gets no new token";

  auto missing = (*creds)->authenticate("app", std::nullopt);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::Unauthorized);
  auto wrong = (*creds)->authenticate("app", token + "x");
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().code, ErrorCode::Unauthorized);
  EXPECT_NE(wrong.error().message.find("wrong client token"), std::string::npos);

  auto other = (*creds)->authenticate("other", token);
  ASSERT_TRUE(other);
  ASSERT_TRUE(other->has_value()) << "another id gets its own token";
  EXPECT_NE(**other, token);
  EXPECT_FALSE((*creds)->verify("other", token)) << "one client's token is not another's";
}

TEST(ClientCredentials, VerifyNeverIssues) {
  auto creds = ClientCredentials::open_memory();
  ASSERT_TRUE(creds);
  EXPECT_TRUE((*creds)->verify("nobody", std::nullopt));
  EXPECT_FALSE((*creds)->has_token("nobody"));
  auto first = (*creds)->authenticate("nobody", std::nullopt);
  ASSERT_TRUE(first && first->has_value());
  EXPECT_TRUE((*creds)->verify("nobody", **first));
  EXPECT_FALSE((*creds)->verify("nobody", std::nullopt));
}

TEST(ClientCredentials, WithdrawnTokenFreesTheId) {
  auto creds = ClientCredentials::open_memory();
  ASSERT_TRUE(creds);
  auto first = (*creds)->authenticate("app", std::nullopt);
  ASSERT_TRUE(first && first->has_value());
  (*creds)->withdraw("app");
  auto second = (*creds)->authenticate("app", std::nullopt);
  ASSERT_TRUE(second && second->has_value());
  EXPECT_NE(**first, **second);
}

TEST(ClientCredentials, TokensSurviveAReopenAndOnlyTheirHashIsStored) {
  auto dir = std::filesystem::temp_directory_path() /
             ("sb-credentials-" + std::to_string(::getpid()) + "-" +
              std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  std::filesystem::create_directories(dir);
  std::string token;
  {
    auto db = store::SqliteDatabase::open(dir / "switchboard.db");
    ASSERT_TRUE(db) << db.error().message;
    auto creds = ClientCredentials::open(std::move(*db));
    ASSERT_TRUE(creds);
    auto first = (*creds)->authenticate("app", std::nullopt);
    ASSERT_TRUE(first && first->has_value());
    token = **first;
  }
  {
    auto db = store::SqliteDatabase::open(dir / "switchboard.db");
    ASSERT_TRUE(db) << db.error().message;
    auto creds = ClientCredentials::open(std::move(*db));
    ASSERT_TRUE(creds);
    auto again = (*creds)->authenticate("app", token);
    ASSERT_TRUE(again);
    EXPECT_FALSE(again->has_value());
    EXPECT_FALSE((*creds)->authenticate("app", std::nullopt));
  }
  // The file holds the hash, never the token.
  std::string bytes;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    bytes.append(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_EQ(bytes.find(token.substr(5)), std::string::npos);
  EXPECT_NE(bytes.find(sha256_hex(token)), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(ClientCredentials, ConstantTimeEqual) {
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_FALSE(constant_time_equal("abc", "abd"));
  EXPECT_FALSE(constant_time_equal("abc", "abcd"));
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

}  // namespace
}  // namespace sb::clienttool
