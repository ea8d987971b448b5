#include "mcp/config.hpp"

#include <algorithm>
#include <cctype>
#include <span>

namespace sb::mcp {

namespace {

Error bad(const std::string& path, const std::string& what) {
  return make_error(ErrorCode::InvalidRequest, path + " " + what);
}

// An object of strings ("environment", "headers"), each expanded.
Result<std::vector<std::pair<std::string, std::string>>> string_map(const json::object& entry,
                                                                    std::string_view key,
                                                                    const Environment& env,
                                                                    const std::string& path) {
  std::vector<std::pair<std::string, std::string>> out;
  auto obj = get_object(entry, key, path);
  if (!obj) return obj.error();
  if (!*obj) return out;
  for (const auto& kv : **obj) {
    std::string at = field_path(field_path(path, key), kv.key());
    if (!kv.value().is_string())
      return bad(at, "must be a string, got " + std::string(kind_name(kv.value())));
    out.emplace_back(std::string(kv.key()), expand_env(kv.value().get_string(), env));
  }
  return out;
}

}  // namespace

std::string expand_env(std::string_view text, const Environment& env) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    auto start = text.find("{env:");
    if (start == std::string_view::npos) break;
    auto end = text.find('}', start);
    if (end == std::string_view::npos) break;
    out.append(text.substr(0, start));
    std::string var(text.substr(start + 5, end - start - 5));
    if (env) out += env(var);
    text.remove_prefix(end + 1);
  }
  out.append(text);
  return out;
}

bool valid_server_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '_' || c == '-' || c == '.';
  });
}

Result<ServerConfig> parse_server(const std::string& name, const json::value& value,
                                  const Environment& env, const std::string& path) {
  if (!valid_server_name(name))
    return bad(path, "is not a usable server name: use 1 to 64 letters, digits, '_', '-' or '.'");
  if (!value.is_object())
    return bad(path, "must be an object, got " + std::string(kind_name(value)));
  const auto& entry = value.get_object();
  ServerConfig out;
  out.name = name;
  auto type = require_string(entry, "type", path);
  if (!type) return type.error();
  static constexpr std::string_view kLocal[] = {"type", "command", "environment", "enabled",
                                                "timeout"};
  static constexpr std::string_view kRemote[] = {"type", "url", "headers", "enabled", "timeout"};
  std::span<const std::string_view> known;
  if (*type == "local") {
    out.type = ServerType::Local;
    known = kLocal;
  } else if (*type == "remote") {
    out.type = ServerType::Remote;
    known = kRemote;
  } else {
    return bad(field_path(path, "type"), "must be \"local\" or \"remote\", got \"" + *type + "\"");
  }
  for (const auto& kv : entry)
    if (std::find(known.begin(), known.end(), kv.key()) == known.end())
      return bad(
          field_path(path, kv.key()), "is not a field of a " + *type + " MCP server (known: " +
                                          [&] {
                                            std::string list;
                                            for (auto k : known)
                                              list += (list.empty() ? "" : ", ") + std::string(k);
                                            return list;
                                          }() +
                                          ")");

  if (out.type == ServerType::Local) {
    auto command = get_array(entry, "command", path);
    if (!command) return command.error();
    if (!*command || (*command)->empty())
      return bad(field_path(path, "command"),
                 "is required: the program and its arguments, e.g. [\"npx\", \"-y\", \"pkg\"]");
    for (std::size_t i = 0; i < (*command)->size(); ++i) {
      const auto& arg = (**command)[i];
      if (!arg.is_string())
        return bad(field_path(path, "command") + "[" + std::to_string(i) + "]",
                   "must be a string, got " + std::string(kind_name(arg)));
      out.command.push_back(expand_env(arg.get_string(), env));
    }
    if (out.command.front().empty())
      return bad(field_path(path, "command") + "[0]", "must name a program");
    auto environment = string_map(entry, "environment", env, path);
    if (!environment) return environment.error();
    out.environment = std::move(*environment);
  } else {
    auto url = require_string(entry, "url", path);
    if (!url) return url.error();
    out.url = expand_env(*url, env);
    if (!out.url.starts_with("http://") && !out.url.starts_with("https://"))
      return bad(field_path(path, "url"),
                 "must be an http:// or https:// URL, got \"" + out.url + "\"");
    auto headers = string_map(entry, "headers", env, path);
    if (!headers) return headers.error();
    out.headers = std::move(*headers);
  }
  auto enabled = get_bool(entry, "enabled", path);
  if (!enabled) return enabled.error();
  out.enabled = enabled->value_or(true);
  auto timeout = get_int(entry, "timeout", path);
  if (!timeout) return timeout.error();
  if (*timeout) {
    constexpr std::int64_t kHour = 3600 * 1000;
    if (**timeout < 1 || **timeout > kHour)
      return bad(field_path(path, "timeout"),
                 "must be 1 to " + std::to_string(kHour) + " ms, got " + std::to_string(**timeout));
    out.timeout = std::chrono::milliseconds(**timeout);
  }
  return out;
}

Result<std::vector<ServerConfig>> parse_servers(const json::object& raw_config,
                                                const Environment& env) {
  std::vector<ServerConfig> out;
  auto mcp = get_object(raw_config, "mcp");
  if (!mcp) return mcp.error();
  if (!*mcp) return out;
  for (const auto& kv : **mcp) {
    std::string name(kv.key());
    auto server = parse_server(name, kv.value(), env, field_path("mcp", name));
    if (!server) return server.error();
    out.push_back(std::move(*server));
  }
  std::sort(out.begin(), out.end(),
            [](const ServerConfig& a, const ServerConfig& b) { return a.name < b.name; });
  return out;
}

}  // namespace sb::mcp
