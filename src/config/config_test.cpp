#include "config/config.hpp"

#include <gtest/gtest.h>

#include <stdlib.h>

#include <fstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace sb {
// Readable failure messages: "NOT_FOUND" rather than a dump of the enum's bytes.
inline void PrintTo(ErrorCode code, std::ostream* os) {
  *os << error_code_name(code);
}

}  // namespace sb

namespace sb::config {
namespace {

namespace fs = std::filesystem;

::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

// A fresh home directory, working directory and scratch directory per test, removed afterwards.
class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "sb_config_test_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    home_ = root_ / "home";
    work_ = root_ / "work";
    fs::create_directories(home_);
    fs::create_directories(work_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  static void write(const fs::path& path, const std::string& text) {
    fs::create_directories(path.parent_path());
    std::ofstream out(path, std::ios::binary);
    out << text;
    ASSERT_TRUE(out.good()) << path;
  }
  fs::path home_file() const { return home_ / ".config" / "switchboard" / "config.json"; }
  fs::path work_file() const { return work_ / ".switchboard" / "config.json"; }
  fs::path explicit_file() const { return root_ / "explicit.json"; }

  LoadOptions options(bool with_explicit = false) const {
    LoadOptions o;
    o.home = home_;
    o.working_directory = work_;
    if (with_explicit) o.explicit_file = explicit_file();
    return o;
  }

  fs::path root_, home_, work_;
};

TEST_F(ConfigTest, DefaultsWhenNoFileExists) {
  auto cfg = load(options());
  ASSERT_TRUE(cfg.has_value()) << cfg.error().message;
  EXPECT_EQ(cfg->client_tools.default_timeout, milliseconds(30000));
  EXPECT_EQ(cfg->client_tools.max_timeout, milliseconds(600000));
  EXPECT_EQ(cfg->client_tools.keepalive_interval, milliseconds(30000));
  EXPECT_EQ(cfg->client_tools.reconnect_grace, milliseconds(5000));
  EXPECT_EQ(cfg->client_tools.rate_limit, 100);
  EXPECT_EQ(cfg->server.hostname, "127.0.0.1");
  EXPECT_EQ(cfg->server.port, 4096);
  EXPECT_EQ(cfg->server.max_body_bytes, 10u * 1024 * 1024);
  EXPECT_EQ(cfg->server.subscriber_queue_limit, 1024u);
  EXPECT_EQ(cfg->server.idle_timeout, milliseconds(60000));
  EXPECT_TRUE(cfg->raw.empty());
  EXPECT_TRUE(cfg->sources.empty());
  EXPECT_TRUE(cfg->warnings.empty());
}

TEST_F(ConfigTest, ReadsEveryKnownKey) {
  write(explicit_file(), R"({
    "clientTools": {"defaultTimeout": 1500, "maxTimeout": 90000, "keepaliveInterval": 250,
                    "reconnectGrace": 0, "rateLimit": 7},
    "server": {"hostname": "0.0.0.0", "port": 8080, "maxBodyBytes": 2048,
               "subscriberQueueLimit": 16, "idleTimeout": 1000}
  })");
  auto cfg = load(options(true));
  ASSERT_TRUE(cfg.has_value()) << cfg.error().message;
  EXPECT_EQ(cfg->client_tools.default_timeout, milliseconds(1500));
  EXPECT_EQ(cfg->client_tools.max_timeout, milliseconds(90000));
  EXPECT_EQ(cfg->client_tools.keepalive_interval, milliseconds(250));
  EXPECT_EQ(cfg->client_tools.reconnect_grace, milliseconds(0));
  EXPECT_EQ(cfg->client_tools.rate_limit, 7);
  EXPECT_EQ(cfg->server.hostname, "0.0.0.0");
  EXPECT_EQ(cfg->server.port, 8080);
  EXPECT_EQ(cfg->server.max_body_bytes, 2048u);
  EXPECT_EQ(cfg->server.subscriber_queue_limit, 16u);
  EXPECT_EQ(cfg->server.idle_timeout, milliseconds(1000));
  EXPECT_TRUE(cfg->warnings.empty());
  ASSERT_EQ(cfg->sources.size(), 1u);
  EXPECT_EQ(cfg->sources[0], explicit_file().string());
}

TEST_F(ConfigTest, MergesHomeThenWorkingDirectoryThenExplicitFile) {
  write(home_file(), R"({"clientTools": {"defaultTimeout": 1000, "rateLimit": 5},
                         "server": {"port": 1111, "hostname": "home.local"}})");
  write(work_file(), R"({"clientTools": {"defaultTimeout": 2000},
                         "server": {"port": 2222}})");
  write(explicit_file(), R"({"server": {"port": 3333}})");

  auto cfg = load(options(true));
  ASSERT_TRUE(cfg.has_value()) << cfg.error().message;
  EXPECT_EQ(cfg->client_tools.default_timeout, milliseconds(2000));  // working dir over home
  EXPECT_EQ(cfg->client_tools.rate_limit, 5);                        // only home sets it
  EXPECT_EQ(cfg->server.port, 3333);                                 // explicit over both
  EXPECT_EQ(cfg->server.hostname, "home.local");
  EXPECT_EQ(cfg->client_tools.max_timeout, milliseconds(600000));  // nobody sets it: default
  ASSERT_EQ(cfg->sources.size(), 3u);
  EXPECT_EQ(cfg->sources[0], home_file().string());
  EXPECT_EQ(cfg->sources[1], work_file().string());
  EXPECT_EQ(cfg->sources[2], explicit_file().string());
  EXPECT_EQ(cfg->raw.at("server").at("port").as_int64(), 3333);
  EXPECT_EQ(cfg->raw.at("clientTools").at("defaultTimeout").as_int64(), 2000);
}

TEST_F(ConfigTest, WorkingDirectoryFileAloneApplies) {
  write(work_file(), R"({"clientTools": {"reconnectGrace": 250}})");
  auto cfg = load(options());
  ASSERT_TRUE(cfg.has_value()) << cfg.error().message;
  EXPECT_EQ(cfg->client_tools.reconnect_grace, milliseconds(250));
  ASSERT_EQ(cfg->sources.size(), 1u);
  EXPECT_EQ(cfg->sources[0], work_file().string());
}

TEST_F(ConfigTest, NestedObjectsMergeKeyByKeyAndOtherValuesReplace) {
  write(home_file(), R"({"provider": {"openai": {"apiKey": "k1", "baseURL": "http://a"},
                                      "anthropic": {"apiKey": "k2"}},
                         "tools": ["a", "b"], "model": "m1"})");
  write(work_file(), R"({"provider": {"openai": {"baseURL": "http://b"}},
                         "tools": ["c"]})");
  auto cfg = load(options());
  ASSERT_TRUE(cfg.has_value()) << cfg.error().message;
  const auto& provider = cfg->raw.at("provider").as_object();
  EXPECT_EQ(provider.at("openai").at("apiKey").as_string(), "k1");
  EXPECT_EQ(provider.at("openai").at("baseURL").as_string(), "http://b");
  EXPECT_EQ(provider.at("anthropic").at("apiKey").as_string(), "k2");
  EXPECT_EQ(cfg->raw.at("tools"), json::value(json::array{"c"}));  // arrays replace
  EXPECT_EQ(cfg->raw.at("model").as_string(), "m1");
  EXPECT_TRUE(cfg->warnings.empty());
}

TEST_F(ConfigTest, KnownSectionsMergeKeyByKey) {
  write(home_file(), R"({"clientTools": {"defaultTimeout": 1234}})");
  write(work_file(), R"({"clientTools": {"maxTimeout": 5678}})");
  auto cfg = load(options());
  ASSERT_TRUE(cfg.has_value()) << cfg.error().message;
  EXPECT_EQ(cfg->client_tools.default_timeout, milliseconds(1234));
  EXPECT_EQ(cfg->client_tools.max_timeout, milliseconds(5678));
  EXPECT_EQ(cfg->raw.at("clientTools").as_object().size(), 2u);
}

TEST_F(ConfigTest, FileThatDoesNotParseIsAnErrorNamingTheFile) {
  write(work_file(), "{\n  \"server\": {\"port\": 80,}\n}");
  auto cfg = load(options());
  ASSERT_FALSE(cfg.has_value());
  EXPECT_EQ(cfg.error().code, ErrorCode::InvalidRequest);
  EXPECT_TRUE(Contains(cfg.error().message, work_file().string()));
  EXPECT_TRUE(Contains(cfg.error().message, "line 2"));
}

TEST_F(ConfigTest, EmptyFileIsAnError) {
  write(home_file(), "");
  auto cfg = load(options());
  ASSERT_FALSE(cfg.has_value());
  EXPECT_TRUE(Contains(cfg.error().message, home_file().string()));
}

TEST_F(ConfigTest, TopLevelMustBeAnObject) {
  write(explicit_file(), "[1, 2]");
  auto cfg = load(options(true));
  ASSERT_FALSE(cfg.has_value());
  EXPECT_TRUE(Contains(cfg.error().message, explicit_file().string()));
  EXPECT_TRUE(Contains(cfg.error().message, "object"));
}

struct BadValue {
  const char* document;
  const char* key;
};

TEST_F(ConfigTest, KnownKeyWithWrongTypeOrRangeNamesFileAndKey) {
  const BadValue cases[] = {
      {R"({"clientTools": {"defaultTimeout": "x"}})", "clientTools.defaultTimeout"},
      {R"({"clientTools": {"defaultTimeout": 0}})", "clientTools.defaultTimeout"},
      {R"({"clientTools": {"defaultTimeout": 1.5}})", "clientTools.defaultTimeout"},
      {R"({"clientTools": {"maxTimeout": -1}})", "clientTools.maxTimeout"},
      {R"({"clientTools": {"keepaliveInterval": true}})", "clientTools.keepaliveInterval"},
      {R"({"clientTools": {"reconnectGrace": -5}})", "clientTools.reconnectGrace"},
      {R"({"clientTools": {"rateLimit": null}})", "clientTools.rateLimit"},
      {R"({"clientTools": {"rateLimit": -1}})", "clientTools.rateLimit"},
      {R"({"server": {"port": 70000}})", "server.port"},
      {R"({"server": {"port": "4096"}})", "server.port"},
      {R"({"server": {"hostname": 5}})", "server.hostname"},
      {R"({"server": {"maxBodyBytes": 10}})", "server.maxBodyBytes"},
      {R"({"server": {"subscriberQueueLimit": 0}})", "server.subscriberQueueLimit"},
      {R"({"server": {"idleTimeout": {}}})", "server.idleTimeout"},
      {R"({"clientTools": 5})", "clientTools"},
      {R"({"server": []})", "server"},
  };
  for (const auto& c : cases) {
    write(explicit_file(), c.document);
    auto cfg = load(options(true));
    ASSERT_FALSE(cfg.has_value()) << c.document;
    EXPECT_EQ(cfg.error().code, ErrorCode::InvalidRequest) << c.document;
    EXPECT_TRUE(Contains(cfg.error().message, explicit_file().string())) << c.document;
    EXPECT_TRUE(Contains(cfg.error().message, std::string(c.key) + " must be")) << c.document;
  }
}

TEST_F(ConfigTest, OutOfRangeMessageSaysTheRangeAndTheValue) {
  write(explicit_file(), R"({"server": {"port": 70000}})");
  auto cfg = load(options(true));
  ASSERT_FALSE(cfg.has_value());
  EXPECT_TRUE(Contains(cfg.error().message, "65535"));
  EXPECT_TRUE(Contains(cfg.error().message, "70000"));
}

TEST_F(ConfigTest, ErrorInHomeFileNamesTheHomeFile) {
  write(home_file(), R"({"clientTools": {"defaultTimeout": "x"}})");
  write(work_file(), R"({"clientTools": {"defaultTimeout": 10}})");
  auto cfg = load(options());
  ASSERT_FALSE(cfg.has_value());
  EXPECT_TRUE(Contains(cfg.error().message, home_file().string()));
  EXPECT_TRUE(Contains(cfg.error().message, "clientTools.defaultTimeout"));
}

TEST_F(ConfigTest, BoundaryValuesAreAccepted) {
  write(explicit_file(), R"({"server": {"port": 65535, "maxBodyBytes": 1024},
                             "clientTools": {"reconnectGrace": 0, "rateLimit": 0,
                                             "defaultTimeout": 1}})");
  auto cfg = load(options(true));
  ASSERT_TRUE(cfg.has_value()) << cfg.error().message;
  EXPECT_EQ(cfg->server.port, 65535);
  EXPECT_EQ(cfg->server.max_body_bytes, 1024u);
  EXPECT_EQ(cfg->client_tools.reconnect_grace, milliseconds(0));
  EXPECT_EQ(cfg->client_tools.rate_limit, 0);
  EXPECT_EQ(cfg->client_tools.default_timeout, milliseconds(1));
}

TEST_F(ConfigTest, UnknownKeysAreWarningsNotErrors) {
  write(work_file(), R"({"colour": "blue",
                         "clientTools": {"defaultTimeout": 1000, "retries": 3},
                         "server": {"port": 5000, "tls": true, "cors": ["*"]},
                         "provider": {"local": {"baseUrl": "http://x", "models": ["m"],
                                                "headers": {"X-Any": "1"}}},
                         "agent": {"review": {"temperature": 0.2, "steps": 3}},
                         "retry": {"attempt": 2},
                         "permission": {"anytool": "allow"}})");
  auto cfg = load(options());
  ASSERT_TRUE(cfg.has_value()) << cfg.error().message;
  EXPECT_EQ(cfg->client_tools.default_timeout, milliseconds(1000));
  EXPECT_EQ(cfg->server.port, 5000);
  std::string all;
  for (const auto& w : cfg->warnings) {
    EXPECT_TRUE(Contains(w, work_file().string() + ": unknown key ")) << w;
    all += w + "\n";
  }
  EXPECT_EQ(cfg->warnings.size(), 6u) << all;
  EXPECT_TRUE(Contains(all, "unknown key colour (ignored)"));
  EXPECT_TRUE(Contains(all, "clientTools.retries"));
  EXPECT_TRUE(Contains(all, "server.tls"));
  // Every level whose keys are known, with the key that differs only in case.
  EXPECT_TRUE(Contains(all, "provider.local.baseUrl (ignored, did you mean baseURL?)")) << all;
  EXPECT_TRUE(Contains(all, "agent.review.temperature (ignored)")) << all;
  EXPECT_TRUE(Contains(all, "retry.attempt (ignored)")) << all;
  // Levels whose keys are names (tools, headers) take any key.
  EXPECT_FALSE(Contains(all, "anytool"));
  EXPECT_FALSE(Contains(all, "X-Any"));
  EXPECT_FALSE(Contains(all, "cors"));
  // Unknown keys are still kept in the merged document.
  EXPECT_EQ(cfg->raw.at("colour").as_string(), "blue");
}

TEST_F(ConfigTest, ALaterComponentsErrorNamesTheFileItsKeyCameFrom) {
  write(home_file(), R"({"provider": {"a": {"models": "m"}}, "agent": {"x": {"steps": 0}}})");
  write(work_file(), R"({"provider": {"ab": {"models": 1}}, "agent": {"x": {"prompt": 2}}})");
  auto cfg = load(options());
  ASSERT_TRUE(cfg.has_value()) << cfg.error().message;
  auto located = [&](std::string message) {
    return cfg->located(make_error(ErrorCode::InvalidRequest, std::move(message))).message;
  };
  EXPECT_EQ(located("provider.a.models must be an array, got string"),
            "configuration error: " + home_file().string() +
                ": provider.a.models must be an array, got string");
  // "provider.a" is not a prefix of the key "provider.ab".
  EXPECT_EQ(located("provider.ab.models must be an array, got number"),
            "configuration error: " + work_file().string() +
                ": provider.ab.models must be an array, got number");
  // Objects merge key by key: each key keeps its own file.
  EXPECT_TRUE(Contains(located("agent.x.steps must be 1-10000"), home_file().string()));
  EXPECT_TRUE(Contains(located("agent.x.prompt must be a string"), work_file().string()));
  // A key no file set (a default): the last file read.
  EXPECT_TRUE(Contains(located("permission.bash[\"x\"] must be"), work_file().string()));
}

TEST_F(ConfigTest, AccessKeysHaveSafeDefaults) {
  auto cfg = load(options());
  ASSERT_TRUE(cfg.has_value()) << cfg.error().message;
  EXPECT_EQ(cfg->server.password, "");
  EXPECT_TRUE(cfg->server.cors.empty());
  EXPECT_FALSE(cfg->server.allow_remote);
  EXPECT_TRUE(cfg->client_tools.client_tokens);
}

TEST_F(ConfigTest, AccessKeysAreRead) {
  write(work_file(), R"({"server": {"password": "pw", "allowRemote": true,
                                    "cors": ["https://app.example.com", "http://localhost:5173"]},
                         "clientTools": {"clientTokens": false}})");
  auto cfg = load(options());
  ASSERT_TRUE(cfg.has_value()) << cfg.error().message;
  EXPECT_EQ(cfg->server.password, "pw");
  EXPECT_TRUE(cfg->server.allow_remote);
  EXPECT_EQ(cfg->server.cors,
            (std::vector<std::string>{"https://app.example.com", "http://localhost:5173"}));
  EXPECT_FALSE(cfg->client_tools.client_tokens);
  EXPECT_TRUE(cfg->warnings.empty());
}

TEST_F(ConfigTest, BadAccessKeysNameTheKey) {
  for (auto [text, key] : std::vector<std::pair<std::string, std::string>>{
           {R"({"server": {"password": 42}})", "server.password"},
           {R"({"server": {"allowRemote": "yes"}})", "server.allowRemote"},
           {R"({"server": {"cors": "https://a.example"}})", "server.cors"},
           {R"({"server": {"cors": [1]}})", "server.cors[0]"},
           {R"({"server": {"cors": ["https://a.example/"]}})", "server.cors[0]"},
           {R"({"server": {"cors": ["a.example"]}})", "server.cors[0]"},
           {R"({"clientTools": {"clientTokens": 1}})", "clientTools.clientTokens"},
           {R"({"clientTools": {"maxToolsPerClient": 0}})", "clientTools.maxToolsPerClient"},
           {R"({"clientTools": {"maxDescriptionBytes": "1k"}})", "clientTools.maxDescriptionBytes"},
           {R"({"clientTools": {"maxSchemaBytes": 1}})", "clientTools.maxSchemaBytes"}}) {
    write(work_file(), text);
    auto cfg = load(options());
    ASSERT_FALSE(cfg.has_value()) << text;
    EXPECT_EQ(cfg.error().code, ErrorCode::InvalidRequest);
    EXPECT_TRUE(Contains(cfg.error().message, key)) << text;
  }
}

TEST_F(ConfigTest, StorageIsSqliteUnlessSetAndItsUrlIsShownWithoutSecrets) {
  write(work_file(), "{}");
  auto plain = load(options());
  ASSERT_TRUE(plain.has_value()) << plain.error().message;
  EXPECT_EQ(plain->storage.type, StorageOptions::Type::Sqlite);
  EXPECT_EQ(
      to_json(*plain).at("storage"),
      (json::object{{"type", "sqlite"}, {"connectTimeout", 5000}, {"statementTimeout", 5000}}));

  write(work_file(), R"({"storage": {"type": "postgres", "statementTimeout": 2500,
                          "url": "postgresql://sb:S3cret@db:5432/sb?sslpassword=S4"}})");
  auto cfg = load(options());
  ASSERT_TRUE(cfg.has_value()) << cfg.error().message;
  EXPECT_EQ(cfg->storage.type, StorageOptions::Type::Postgres);
  EXPECT_EQ(cfg->storage.url, "postgresql://sb:S3cret@db:5432/sb?sslpassword=S4");
  EXPECT_EQ(cfg->storage.statement_timeout, std::chrono::milliseconds(2500));
  EXPECT_TRUE(cfg->warnings.empty());
  auto shown = to_json(*cfg).at("storage");
  EXPECT_EQ(shown.at("url"), "postgresql://[redacted]@db:5432/sb?sslpassword=[redacted]");
  EXPECT_EQ(shown.at("type"), "postgres");

  for (auto [text, key] : std::vector<std::pair<std::string, std::string>>{
           {R"({"storage": {"type": "mysql"}})", "storage.type"},
           {R"({"storage": {"type": 1}})", "storage.type"},
           {R"({"storage": {"url": ["x"]}})", "storage.url"},
           {R"({"storage": {"connectTimeout": 10}})", "storage.connectTimeout"},
           {R"({"storage": "postgres"})", "storage"}}) {
    write(work_file(), text);
    auto bad = load(options());
    ASSERT_FALSE(bad.has_value()) << text;
    EXPECT_TRUE(Contains(bad.error().message, key)) << text << ": " << bad.error().message;
  }
  write(work_file(), R"({"storage": {"kind": "postgres"}})");
  auto unknown = load(options());
  ASSERT_TRUE(unknown.has_value());
  ASSERT_EQ(unknown->warnings.size(), 1u);
  EXPECT_TRUE(Contains(unknown->warnings[0], "storage.kind"));
}

TEST_F(ConfigTest, LimitKeysHaveSafeDefaults) {
  auto cfg = load(options());
  ASSERT_TRUE(cfg.has_value()) << cfg.error().message;
  EXPECT_EQ(cfg->server.max_json_depth, 64u);
  EXPECT_EQ(cfg->server.max_header_bytes, 16384u);
  EXPECT_EQ(cfg->server.max_header_count, 100u);
  EXPECT_EQ(cfg->server.header_timeout, milliseconds(10000));
  EXPECT_EQ(cfg->server.max_websocket_message_bytes, 10u * 1024 * 1024);
  EXPECT_EQ(cfg->server.max_connections, 10000u);
  EXPECT_EQ(cfg->client_tools.max_connections_per_client, 8);
  EXPECT_EQ(cfg->client_tools.max_pending_per_client, 64);
  EXPECT_EQ(cfg->client_tools.max_pending_per_session, 64);
}

TEST_F(ConfigTest, LimitKeysAreRead) {
  write(work_file(), R"({"server": {"maxJsonDepth": 8, "maxHeaderBytes": 2048, "maxHeaderCount": 5,
                                    "headerTimeout": 250, "maxWebSocketMessageBytes": 4096,
                                    "maxConnections": 20},
                         "clientTools": {"maxConnectionsPerClient": 2, "maxPendingPerClient": 3,
                                         "maxPendingPerSession": 4}})");
  auto cfg = load(options());
  ASSERT_TRUE(cfg.has_value()) << cfg.error().message;
  EXPECT_EQ(cfg->server.max_json_depth, 8u);
  EXPECT_EQ(cfg->server.max_header_bytes, 2048u);
  EXPECT_EQ(cfg->server.max_header_count, 5u);
  EXPECT_EQ(cfg->server.header_timeout, milliseconds(250));
  EXPECT_EQ(cfg->server.max_websocket_message_bytes, 4096u);
  EXPECT_EQ(cfg->server.max_connections, 20u);
  EXPECT_EQ(cfg->client_tools.max_connections_per_client, 2);
  EXPECT_EQ(cfg->client_tools.max_pending_per_client, 3);
  EXPECT_EQ(cfg->client_tools.max_pending_per_session, 4);
  EXPECT_TRUE(cfg->warnings.empty()) << cfg->warnings.front();
}

TEST_F(ConfigTest, BadLimitKeysNameTheKeyAndTheRange) {
  for (auto [text, key, range] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {R"({"server": {"maxJsonDepth": 0}})", "server.maxJsonDepth", "between 1 and 1000"},
           {R"({"server": {"maxJsonDepth": "64"}})", "server.maxJsonDepth", "integer"},
           {R"({"server": {"maxHeaderBytes": 100}})", "server.maxHeaderBytes",
            "between 1024 and 1048576"},
           {R"({"server": {"maxHeaderCount": 0}})", "server.maxHeaderCount", "between 1 and 10000"},
           {R"({"server": {"headerTimeout": 10}})", "server.headerTimeout", "between 100 and"},
           {R"({"server": {"maxWebSocketMessageBytes": 1.5}})", "server.maxWebSocketMessageBytes",
            "integer"},
           {R"({"server": {"maxConnections": 0}})", "server.maxConnections",
            "between 1 and 1000000"},
           {R"({"clientTools": {"maxConnectionsPerClient": 0}})",
            "clientTools.maxConnectionsPerClient", "between 1 and 10000"},
           {R"({"clientTools": {"maxPendingPerClient": -1}})", "clientTools.maxPendingPerClient",
            "between 1 and 1000000"},
           {R"({"clientTools": {"maxPendingPerSession": true}})",
            "clientTools.maxPendingPerSession", "integer"}}) {
    write(work_file(), text);
    auto cfg = load(options());
    ASSERT_FALSE(cfg.has_value()) << text;
    EXPECT_EQ(cfg.error().code, ErrorCode::InvalidRequest);
    EXPECT_TRUE(Contains(cfg.error().message, key + " must be")) << cfg.error().message;
    EXPECT_TRUE(Contains(cfg.error().message, range)) << cfg.error().message;
  }
}

TEST_F(ConfigTest, MissingExplicitFileIsAnError) {
  auto cfg = load(options(true));  // explicit.json was never written
  ASSERT_FALSE(cfg.has_value());
  EXPECT_EQ(cfg.error().code, ErrorCode::InvalidRequest);
  EXPECT_TRUE(Contains(cfg.error().message, explicit_file().string()));
}

TEST_F(ConfigTest, MissingOptionalFilesAreSkipped) {
  LoadOptions o;
  o.home = root_ / "no-such-home";
  o.working_directory = root_ / "no-such-dir";
  auto cfg = load(o);
  ASSERT_TRUE(cfg.has_value()) << cfg.error().message;
  EXPECT_TRUE(cfg->sources.empty());
  EXPECT_EQ(cfg->server.port, 4096);
}

TEST(ConfigApply, AppliesOneDocumentOverAnother) {
  Config cfg;
  auto first = parse_json(R"({"clientTools": {"rateLimit": 3}, "mcp": {"a": {"x": 1}}})");
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(apply(cfg, *first, "first").has_value());
  auto second = parse_json(R"({"clientTools": {"maxTimeout": 1000}, "mcp": {"a": {"y": 2}}})");
  ASSERT_TRUE(second.has_value());
  ASSERT_TRUE(apply(cfg, *second, "second").has_value());
  EXPECT_EQ(cfg.client_tools.rate_limit, 3);
  EXPECT_EQ(cfg.client_tools.max_timeout, milliseconds(1000));
  EXPECT_EQ(cfg.raw.at("mcp").at("a").at("x").as_int64(), 1);
  EXPECT_EQ(cfg.raw.at("mcp").at("a").at("y").as_int64(), 2);

  auto bad = parse_json(R"({"server": {"port": -1}})");
  ASSERT_TRUE(bad.has_value());
  auto r = apply(cfg, *bad, "third");
  ASSERT_FALSE(r.has_value());
  EXPECT_TRUE(Contains(r.error().message, "third"));
  EXPECT_TRUE(Contains(r.error().message, "server.port"));
}

// GET /config's document: OpenCode's shape where keys correspond, and no secret in it.
TEST(ConfigJson, OpenCodeShapeWithoutSecrets) {
  Config cfg;
  ASSERT_TRUE(apply(cfg,
                    parse_json(R"({
      "provider": {"p": {"type": "anthropic", "apiKey": "S1", "apiKeyEnv": "P_KEY",
                         "baseURL": "https://x/v1", "models": ["m"], "headers": {"X": "S2"}}},
      "mcp": {"r": {"type": "remote", "url": "https://m", "headers": {"Authorization": "S3"}}},
      "server": {"password": "S4", "port": 5000},
      "agent": {"a": {"description": "d", "options": {"token": "S5"}}},
      "permission": {"read": {"*.key": "ask"}},
      "command": {"c": {"template": "t $1", "agent": "plan"}}})")
                        .value(),
                    "f.json"));
  json::object out = to_json(cfg);
  std::string text = json::serialize(out);
  for (const char* secret : {"S1", "S2", "S3", "S4", "S5"})
    EXPECT_EQ(text.find(std::string("\"") + secret + "\""), std::string::npos) << secret << text;
  EXPECT_EQ(out.at("provider").at("p").at("npm"), "@ai-sdk/anthropic");
  EXPECT_EQ(out.at("provider").at("p").at("env").at(0), "P_KEY");
  EXPECT_EQ(out.at("provider").at("p").at("options").at("baseURL"), "https://x/v1");
  EXPECT_EQ(out.at("provider").at("p").at("options").at("apiKey"), "[redacted]");
  EXPECT_TRUE(out.at("provider").at("p").at("models").as_object().contains("m"));
  EXPECT_EQ(out.at("mcp").at("r").at("url"), "https://m");
  EXPECT_EQ(out.at("server").at("port"), 5000);
  EXPECT_EQ(out.at("server").at("password"), "[redacted]");
  EXPECT_EQ(out.at("permission").at("read").at("*.key"), "ask");  // a pattern, not a secret
  EXPECT_EQ(out.at("command").at("c").at("agent"), "plan");
  EXPECT_EQ(out.at("clientTools").at("defaultTimeout"), 30000);
  Config plain;
  EXPECT_FALSE(to_json(plain).at("server").as_object().contains("password"));
}

// Secrets inside URLs and MCP command lines: userinfo and query values, arguments after the
// program.
TEST(ConfigJson, UrlsAndMcpCommandsLoseTheirSecrets) {
  Config cfg;
  ASSERT_TRUE(apply(cfg,
                    parse_json(R"({
      "provider": {"p": {"type": "openai-compatible",
                         "baseURL": "https://user:S6@host:8443/v1?key=S7&flag&v=2#S8"}},
      "mcp": {"r": {"type": "remote", "url": "http://u:S9@m/mcp?token=S10"},
              "l": {"type": "local", "command": ["server", "--api-key", "S11", "--x=S12"]}}})")
                        .value(),
                    "f.json"));
  json::object out = to_json(cfg);
  std::string text = json::serialize(out);
  for (const char* secret : {"S6", "S7", "S8", "S9", "S10", "S11", "S12", "user"})
    EXPECT_EQ(text.find(secret), std::string::npos) << secret << text;
  EXPECT_EQ(out.at("provider").at("p").at("options").at("baseURL"),
            "https://[redacted]@host:8443/v1?key=[redacted]&flag&v=[redacted]#[redacted]");
  EXPECT_EQ(out.at("mcp").at("r").at("url"), "http://[redacted]@m/mcp?token=[redacted]");
  EXPECT_EQ(out.at("mcp").at("l").at("command"),
            (json::array{"server", "[redacted]", "[redacted]", "[redacted]"}));
}

TEST(RedactUrl, KeepsWhatIsNoSecret) {
  EXPECT_EQ(redact_url("https://api.openai.com/v1"), "https://api.openai.com/v1");
  EXPECT_EQ(redact_url("http://127.0.0.1:9/v1/"), "http://127.0.0.1:9/v1/");
  EXPECT_EQ(redact_url(""), "");
  EXPECT_EQ(redact_url("http://[::1]:80/x?a=%20b"), "http://[::1]:80/x?a=[redacted]");
  EXPECT_EQ(redact_url("not a url at all"), "[redacted]");
  // An empty query before a fragment (fuzz_config found Boost.URL's parameter view reading past
  // the URL there), and empty parameters.
  EXPECT_EQ(redact_url("httr:?#127.0."), "httr:?#[redacted]");
  EXPECT_EQ(redact_url("http://h/?&a&=b&"), "http://h/?&a&=[redacted]&");
}

}  // namespace
}  // namespace sb::config
