#pragma once
// Server configuration: defaults, then ~/.config/switchboard/config.json, then
// ./.switchboard/config.json, then --config FILE, each merged over the previous (objects merge
// key by key, everything else replaces). A file that does not parse, or a known key with the
// wrong type or range, is an error that names the file and the key. Unknown keys, at every level
// whose keys are known (the top, clientTools, server, each provider, agent and command, retry,
// experimental), are warnings that name the file and the key.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "config/command.hpp"
#include "util/error.hpp"
#include "util/json.hpp"

namespace sb::config {

using std::chrono::milliseconds;

struct ClientToolsOptions {
  milliseconds default_timeout{30000};  // clientTools.defaultTimeout: per-call wait for a result
  milliseconds max_timeout{
      600000};  // clientTools.maxTimeout: cap for `timeout` and progress extensions
  milliseconds keepalive_interval{
      30000};  // clientTools.keepaliveInterval: SSE ping / WS ping period
  milliseconds reconnect_grace{
      5000};  // clientTools.reconnectGrace: how long a dropped client keeps tools and calls
  std::int64_t rate_limit =
      100;  // clientTools.rateLimit: executions per client per minute, 0 = off
  std::int64_t max_tools_per_client = 128;    // clientTools.maxToolsPerClient
  std::int64_t max_description_bytes = 8192;  // clientTools.maxDescriptionBytes: per tool
  std::int64_t max_schema_bytes = 65536;      // clientTools.maxSchemaBytes: a tool's schema as JSON
  std::int64_t max_connections_per_client =
      8;  // clientTools.maxConnectionsPerClient: SSE streams + WebSockets of one clientID at once
  std::int64_t max_pending_per_client =
      64;  // clientTools.maxPendingPerClient: calls waiting for one client's results
  std::int64_t max_pending_per_session =
      64;  // clientTools.maxPendingPerSession: client-tool calls of one session waiting at once
  bool client_tokens = true;  // clientTools.clientTokens: a clientID's first use issues a token
                              // that its later registrations, streams and answers must carry
};

struct ServerOptions {
  std::string hostname = "127.0.0.1";               // server.hostname (--hostname wins)
  std::uint16_t port = 4096;                        // server.port (--port wins)
  std::uint64_t max_body_bytes = 10 * 1024 * 1024;  // server.maxBodyBytes: larger bodies get 413
  std::uint64_t max_websocket_message_bytes =
      10 * 1024 * 1024;  // server.maxWebSocketMessageBytes: a larger message closes its WebSocket
                         // (1009); as large as a body, so a result fits as it would over HTTP
  std::size_t max_json_depth = 64;         // server.maxJsonDepth: nesting of request bodies and
                                           // WebSocket messages; deeper get 400
  std::uint32_t max_header_bytes = 16384;  // server.maxHeaderBytes: request line + fields; 413
  std::size_t max_header_count = 100;      // server.maxHeaderCount: header fields; more get 413
  std::size_t max_connections = 10000;  // server.maxConnections: open TCP connections (HTTP, SSE,
                                        // WebSocket); more get 429 (lowered at start-up to what
                                        // the open-file limit allows)
  std::uint64_t subscriber_queue_limit = 1024;  // server.subscriberQueueLimit: frames queued per
                                                // SSE/WS subscriber before it is dropped
  std::uint64_t event_replay_events = 1000;     // server.eventReplayEvents: /event frames kept for
                                                // clients that reconnect with Last-Event-ID
  std::uint64_t event_replay_bytes = 4u << 20;  // server.eventReplayBytes: their size in all
  milliseconds idle_timeout{
      60000};  // server.idleTimeout: an HTTP connection idle this long is closed
  milliseconds header_timeout{
      10000};            // server.headerTimeout: a request's head must arrive within this of its
                         // first byte, or the connection is closed (slowloris)
  std::string password;  // server.password (or $SWITCHBOARD_SERVER_PASSWORD): required by every
                         // route except the web page itself; empty = no password
  std::vector<std::string> cors;  // server.cors: other origins whose pages may call the API
  bool allow_remote = false;      // server.allowRemote (--allow-remote): listen on a non-loopback
                                  // address without a password
  bool check_api_doc = false;     // $SWITCHBOARD_CHECK_API_DOC=1 (the test command): every answer
                                  // is checked against GET /doc; a mismatch answers 500
};

// Where sessions, messages and client tokens are kept (docs/configuration.md, "Storage").
struct StorageOptions {
  enum class Type { Sqlite, Postgres };
  Type type = Type::Sqlite;  // storage.type: "sqlite" (<data dir>/switchboard.db) or "postgres"
  std::string url;           // storage.url (or $SWITCHBOARD_DATABASE_URL, which also makes the type
                             // postgres): postgresql://user:password@host:port/database?options
  milliseconds connect_timeout{5000};  // storage.connectTimeout: PostgreSQL's connection attempt
  // storage.statementTimeout: PostgreSQL cancels a statement that runs longer. Short: the event
  // loop waits for a statement, so a server that hangs holds it up this long (plus 2 s).
  milliseconds statement_timeout{5000};
};

// Several nodes on one PostgreSQL store and one Redis (docs/cluster.md). Off while `redis` is
// empty.
struct ClusterOptions {
  std::string
      redis;  // cluster.redis (or $SWITCHBOARD_REDIS_URL): redis://[:password@]host:port[/db]
  std::string node_id;  // cluster.nodeID (or $SWITCHBOARD_NODE_ID): unique in the cluster;
                        // default <hostname>-<process id>
  std::string key_prefix = "switchboard:";  // cluster.keyPrefix: of every Redis key and channel
  milliseconds lease{3000};  // cluster.lease: a node that stops renewing its lease is gone after it
  bool enabled() const { return !redis.empty(); }
};

struct Config {
  ClientToolsOptions client_tools;
  ServerOptions server;
  StorageOptions storage;
  ClusterOptions cluster;
  json::object raw;  // the merged document, for keys owned by later components
  std::map<std::string, Command> commands;  // `command`, from the merged document
  std::vector<std::string> sources;         // files that were read, in merge order
  std::vector<std::string> warnings;        // unknown keys and the like; start-up logs them
  // The file that set each key of `raw` (the last one, as merging goes), by key path
  // ("provider.local.models"), so that an error found later names the file the key is in.
  std::map<std::string, std::string, std::less<>> origins;

  // A later component's error about a key of `raw` (its message starts with the key path, as
  // the util/json getters write it: "provider.local.models must be an array, got string") as a
  // configuration error that names the file that key came from.
  Error located(const Error& e) const;
};

// Every configuration error has this one form: "configuration error: FILE: KEY what was
// expected, got what" (InvalidRequest). `at` is the key path and what is wrong with it.
Error config_error(std::string_view file, std::string_view at);

struct LoadOptions {
  std::optional<std::filesystem::path> home;  // default: $HOME
  std::filesystem::path working_directory = std::filesystem::current_path();
  std::optional<std::filesystem::path> explicit_file;  // --config; must exist
};

// The effective configuration in OpenCode's Config shape (GET /config): the files' keys that
// OpenCode has too, `command` and `provider` in OpenCode's form, `server` and `clientTools` with
// every default filled in; every secret (API keys, passwords, tokens, header and environment
// values, URLs' userinfo and query values, MCP command arguments) reads "[redacted]"
// (config_json.cpp).
json::object to_json(const Config& cfg);

// A URL as it may be shown (GET /config, GET /provider): userinfo becomes "[redacted]@", each
// query parameter keeps its name with the value "[redacted]", a fragment reads "#[redacted]";
// scheme, host, port and path stay. A string that is not a URL is "[redacted]" whole.
std::string redact_url(std::string_view url);

// Reads and merges the files. Missing optional files are skipped.
Result<Config> load(const LoadOptions& options);

// Applies one parsed document over `into` (exposed for tests and for the fuzz target).
// `source` names the document in error messages.
Result<void> apply(Config& into, const json::value& document, const std::string& source);

}  // namespace sb::config
