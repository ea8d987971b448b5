#pragma once
// The `mcp` configuration key, in OpenCode's shape (docs/mcp.md):
//
//   "mcp": {
//     NAME: {"type": "local", "command": [exe, args...], "environment": {K: V},
//            "enabled": true, "timeout": 30000},
//     NAME: {"type": "remote", "url": "https://...", "headers": {K: V},
//            "enabled": true, "timeout": 30000}
//   }
//
// `{env:VAR}` anywhere in a string value is replaced with the variable's value (empty when it is
// not set), so that secrets stay out of files. Decoded here, where the config enters: an unknown
// field, a wrong type or a missing required field is an error naming the key.
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "util/error.hpp"
#include "util/json.hpp"

namespace sb::mcp {

enum class ServerType { Local, Remote };

struct ServerConfig {
  std::string name;
  ServerType type = ServerType::Local;
  std::vector<std::string> command;                              // local: argv
  std::vector<std::pair<std::string, std::string>> environment;  // local: on top of the server's
  std::string url;                                               // remote
  std::vector<std::pair<std::string, std::string>> headers;      // remote: sent with every request
  bool enabled = true;
  // How long a request may go without its answer (or, for a tool call, without progress) before
  // it fails with a timeout and the server is told to stop it.
  std::chrono::milliseconds timeout{30000};
};

using Environment = std::function<std::string(const std::string&)>;

// `{env:VAR}` replaced with env(VAR); other text as it is.
std::string expand_env(std::string_view text, const Environment& env);

// One server's entry; `path` is where it is ("mcp.fs") for error messages.
Result<ServerConfig> parse_server(const std::string& name, const json::value& entry,
                                  const Environment& env, const std::string& path);

// The whole `mcp` object (absent: no servers), in name order.
Result<std::vector<ServerConfig>> parse_servers(const json::object& raw_config,
                                                const Environment& env);

// Server names are the first part of tool ids and a part of route paths: letters, digits, '_',
// '-' and '.', 1 to 64 of them.
bool valid_server_name(std::string_view name);

}  // namespace sb::mcp
