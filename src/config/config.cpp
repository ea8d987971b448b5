#include "config/config.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <span>
#include <sstream>

#include "util/text.hpp"

namespace sb::config {

Error config_error(std::string_view file, std::string_view at) {
  return make_error(ErrorCode::InvalidRequest,
                    "configuration error: " + std::string(file) + ": " + std::string(at));
}

Error Config::located(const Error& e) const {
  // The longest recorded key path that the message starts with, as a whole key: "provider.a"
  // is not taken for "provider.ab ...".
  const std::string* file = nullptr;
  std::size_t best = 0;
  for (const auto& [path, source] : origins) {
    if (path.size() < best || !e.message.starts_with(path)) continue;
    if (e.message.size() > path.size() &&
        std::string_view(" .[").find(e.message[path.size()]) == std::string_view::npos)
      continue;
    best = path.size();
    file = &source;
  }
  if (file) return config_error(*file, e.message);
  return config_error(sources.empty() ? "the configuration" : sources.back(), e.message);
}

namespace {

Error bad_key(const std::string& source, const std::string& key, const std::string& what) {
  return config_error(source, key + " " + what);
}

// Reads an integer key in [min, max]; absent keys leave `out` unchanged.
Result<void> read_int(const json::object& obj, std::string_view key, const std::string& prefix,
                      const std::string& source, std::int64_t min, std::int64_t max,
                      std::int64_t& out) {
  auto it = obj.find(key);
  if (it == obj.end()) return {};
  std::string path = field_path(prefix, key);
  const json::value& v = it->value();
  std::optional<std::int64_t> n;
  if (v.is_int64()) n = v.get_int64();
  if (v.is_uint64() && v.get_uint64() <= static_cast<std::uint64_t>(INT64_MAX))
    n = static_cast<std::int64_t>(v.get_uint64());
  if (!n) return bad_key(source, path, "must be an integer, got " + std::string(kind_name(v)));
  if (*n < min || *n > max)
    return bad_key(source, path,
                   "must be between " + std::to_string(min) + " and " + std::to_string(max) +
                       ", got " + std::to_string(*n));
  out = *n;
  return {};
}

// read_int for an unsigned or narrower field.
template <class T>
Result<void> read_count(const json::object& obj, std::string_view key, const std::string& prefix,
                        const std::string& source, std::int64_t min, std::int64_t max, T& out) {
  auto n = static_cast<std::int64_t>(out);
  if (auto r = read_int(obj, key, prefix, source, min, max, n); !r) return r;
  out = static_cast<T>(n);
  return {};
}

Result<void> read_ms(const json::object& obj, std::string_view key, const std::string& prefix,
                     const std::string& source, std::int64_t min, milliseconds& out) {
  std::int64_t n = out.count();
  if (auto r = read_int(obj, key, prefix, source, min, 24LL * 3600 * 1000, n); !r) return r;
  out = milliseconds{n};
  return {};
}

Result<void> read_bool(const json::object& obj, std::string_view key, const std::string& prefix,
                       const std::string& source, bool& out) {
  auto v = get_bool(obj, key, prefix);
  if (!v) return bad_key(source, field_path(prefix, key), "must be true or false");
  if (*v) out = **v;
  return {};
}

// server.cors: ["https://app.example.com", ...]. An origin is scheme://host[:port], compared
// exactly with the browser's Origin header, so a typo (a trailing slash, a path) would never
// match: it is refused here instead.
Result<std::vector<std::string>> read_origins(const json::value& v, const std::string& source) {
  if (!v.is_array())
    return bad_key(source, "server.cors",
                   "must be an array of origins, got " + std::string(kind_name(v)));
  std::vector<std::string> out;
  for (std::size_t i = 0; i < v.get_array().size(); ++i) {
    const auto& item = v.get_array()[i];
    std::string at = "server.cors[" + std::to_string(i) + "]";
    if (!item.is_string()) return bad_key(source, at, "must be a string");
    std::string origin(item.get_string());
    auto scheme = origin.find("://");
    bool ok =
        origin == "*" || (scheme != std::string::npos && scheme > 0 && origin.size() > scheme + 3 &&
                          origin.find('/', scheme + 3) == std::string::npos);
    if (!ok)
      return bad_key(source, at,
                     "must be an origin like \"https://app.example.com\" (scheme://host[:port], "
                     "no path) or \"*\", got \"" +
                         origin + "\"");
    out.push_back(std::move(origin));
  }
  return out;
}

Result<const json::object*> section(const json::object& doc, std::string_view key,
                                    const std::string& source) {
  auto it = doc.find(key);
  if (it == doc.end()) return static_cast<const json::object*>(nullptr);
  if (!it->value().is_object())
    return bad_key(source, std::string(key),
                   "must be an object, got " + std::string(kind_name(it->value())));
  return &it->value().get_object();
}

// Records where every key of `value` (at `path`) came from.
void record_origins(Config& cfg, const std::string& path, const json::value& value,
                    const std::string& source) {
  cfg.origins[path] = source;
  if (value.is_object())
    for (const auto& kv : value.get_object())
      record_origins(cfg, field_path(path, kv.key()), kv.value(), source);
}

void merge_into(Config& cfg, json::object& dst, const json::object& src, const std::string& prefix,
                const std::string& source) {
  for (const auto& kv : src) {
    std::string path = field_path(prefix, kv.key());
    auto it = dst.find(kv.key());
    if (it != dst.end() && it->value().is_object() && kv.value().is_object()) {
      cfg.origins[path] = source;
      merge_into(cfg, it->value().get_object(), kv.value().get_object(), path, source);
    } else {
      dst[kv.key()] = kv.value();
      record_origins(cfg, path, kv.value(), source);
    }
  }
}

// The keys of each level whose keys are fixed, "*" standing for any name (a provider's, an
// agent's). Other levels take any key: permission (tool names), tools, a provider's headers.
struct KnownLevel {
  std::vector<std::string_view> at;  // the path's segments; empty: the top level
  std::vector<std::string_view> keys;
};

const std::vector<KnownLevel>& known_levels() {
  static const std::vector<KnownLevel> levels = {
      {{},
       {"$schema", "clientTools", "server", "provider", "model", "permission", "agent",
        "experimental", "tools", "mcp", "retry", "command", "files", "storage", "cluster"}},
      {{"storage"}, {"type", "url", "connectTimeout", "statementTimeout"}},
      {{"cluster"}, {"redis", "nodeID", "keyPrefix", "lease"}},
      {{"clientTools"},
       {"defaultTimeout", "maxTimeout", "keepaliveInterval", "reconnectGrace", "rateLimit",
        "clientTokens", "maxToolsPerClient", "maxDescriptionBytes", "maxSchemaBytes",
        "maxConnectionsPerClient", "maxPendingPerClient", "maxPendingPerSession"}},
      {{"server"},
       {"hostname", "port", "maxBodyBytes", "maxWebSocketMessageBytes", "maxJsonDepth",
        "maxHeaderBytes", "maxHeaderCount", "maxConnections", "subscriberQueueLimit", "idleTimeout",
        "headerTimeout", "password", "cors", "allowRemote", "eventReplayEvents",
        "eventReplayBytes"}},
      {{"provider", "*"},
       {"type", "models", "baseURL", "apiKey", "apiKeyEnv", "headers", "script", "scriptFile",
        "input"}},
      {{"agent", "*"}, {"description", "prompt", "model", "steps", "tools", "permission"}},
      {{"retry"}, {"attempts", "initialDelay", "maxDelay"}},
      {{"files"}, {"maxBytes", "maxPromptBytes"}},
      {{"command", "*"}, {"template", "description", "agent", "model", "subtask"}},
      {{"experimental"}, {"batch_tool"}},
  };
  return levels;
}

// Warns about each key of the objects at `at` (below `obj`, which is at `path`) that `keys`
// lacks, with the known key it differs from only in case, if any (baseUrl: baseURL).
void warn_unknown(Config& cfg, const json::object& obj, std::span<const std::string_view> at,
                  const std::string& path, const std::vector<std::string_view>& keys,
                  const std::string& source) {
  if (!at.empty()) {
    for (const auto& kv : obj) {
      if (at.front() != "*" && kv.key() != at.front()) continue;
      if (kv.value().is_object())
        warn_unknown(cfg, kv.value().get_object(), at.subspan(1), field_path(path, kv.key()), keys,
                     source);
    }
    return;
  }
  for (const auto& kv : obj) {
    if (std::find(keys.begin(), keys.end(), kv.key()) != keys.end()) continue;
    std::string hint;
    for (auto k : keys)
      if (ascii_iequals(k, kv.key())) hint = ", did you mean " + std::string(k) + "?";
    cfg.warnings.push_back(source + ": unknown key " + field_path(path, kv.key()) + " (ignored" +
                           hint + ")");
  }
}

}  // namespace

Result<void> apply(Config& cfg, const json::value& document, const std::string& source) {
  if (!document.is_object())
    return config_error(source,
                        "the top level must be an object, got " + std::string(kind_name(document)));
  const json::object& doc = document.get_object();
  for (const auto& level : known_levels())
    warn_unknown(cfg, doc, level.at, "", level.keys, source);

  auto ct = section(doc, "clientTools", source);
  if (!ct) return ct.error();
  if (*ct) {
    const json::object& o = **ct;
    const std::string p = "clientTools";
    auto& c = cfg.client_tools;
    if (auto r = read_ms(o, "defaultTimeout", p, source, 1, c.default_timeout); !r) return r;
    if (auto r = read_ms(o, "maxTimeout", p, source, 1, c.max_timeout); !r) return r;
    if (auto r = read_ms(o, "keepaliveInterval", p, source, 10, c.keepalive_interval); !r) return r;
    if (auto r = read_ms(o, "reconnectGrace", p, source, 0, c.reconnect_grace); !r) return r;
    if (auto r = read_int(o, "rateLimit", p, source, 0, 1'000'000'000, c.rate_limit); !r) return r;
    if (auto r = read_bool(o, "clientTokens", p, source, c.client_tokens); !r) return r;
    if (auto r = read_int(o, "maxToolsPerClient", p, source, 1, 100'000, c.max_tools_per_client);
        !r)
      return r;
    if (auto r = read_int(o, "maxDescriptionBytes", p, source, 1, 1 << 24, c.max_description_bytes);
        !r)
      return r;
    if (auto r = read_int(o, "maxSchemaBytes", p, source, 64, 1 << 26, c.max_schema_bytes); !r)
      return r;
    if (auto r = read_int(o, "maxConnectionsPerClient", p, source, 1, 10'000,
                          c.max_connections_per_client);
        !r)
      return r;
    if (auto r =
            read_int(o, "maxPendingPerClient", p, source, 1, 1'000'000, c.max_pending_per_client);
        !r)
      return r;
    if (auto r =
            read_int(o, "maxPendingPerSession", p, source, 1, 1'000'000, c.max_pending_per_session);
        !r)
      return r;
  }

  auto sv = section(doc, "server", source);
  if (!sv) return sv.error();
  if (*sv) {
    const json::object& o = **sv;
    const std::string p = "server";
    auto& s = cfg.server;
    auto host = get_string(o, "hostname", p);
    if (!host) return bad_key(source, "server.hostname", "must be a string");
    if (*host) s.hostname = **host;
    if (auto r = read_count(o, "port", p, source, 0, 65535, s.port); !r) return r;
    if (auto r = read_count(o, "maxBodyBytes", p, source, 1024, 1LL << 32, s.max_body_bytes); !r)
      return r;
    if (auto r = read_count(o, "maxWebSocketMessageBytes", p, source, 1024, 1LL << 32,
                            s.max_websocket_message_bytes);
        !r)
      return r;
    if (auto r = read_count(o, "maxJsonDepth", p, source, 1, 1000, s.max_json_depth); !r) return r;
    if (auto r = read_count(o, "maxHeaderBytes", p, source, 1024, 1 << 20, s.max_header_bytes); !r)
      return r;
    if (auto r = read_count(o, "maxHeaderCount", p, source, 1, 10'000, s.max_header_count); !r)
      return r;
    if (auto r = read_count(o, "maxConnections", p, source, 1, 1'000'000, s.max_connections); !r)
      return r;
    if (auto r = read_count(o, "subscriberQueueLimit", p, source, 1, 1'000'000,
                            s.subscriber_queue_limit);
        !r)
      return r;
    if (auto r = read_count(o, "eventReplayEvents", p, source, 0, 1'000'000, s.event_replay_events);
        !r)
      return r;
    if (auto r = read_count(o, "eventReplayBytes", p, source, 0, 1LL << 32, s.event_replay_bytes);
        !r)
      return r;
    if (auto r = read_ms(o, "idleTimeout", p, source, 100, s.idle_timeout); !r) return r;
    if (auto r = read_ms(o, "headerTimeout", p, source, 100, s.header_timeout); !r) return r;
    auto password = get_string(o, "password", p);
    if (!password) return bad_key(source, "server.password", "must be a string");
    if (*password) s.password = **password;
    if (auto it = o.find("cors"); it != o.end()) {
      auto origins = read_origins(it->value(), source);
      if (!origins) return origins.error();
      s.cors = std::move(*origins);
    }
    if (auto r = read_bool(o, "allowRemote", p, source, s.allow_remote); !r) return r;
  }

  auto st = section(doc, "storage", source);
  if (!st) return st.error();
  if (*st) {
    const json::object& o = **st;
    const std::string p = "storage";
    auto& s = cfg.storage;
    auto type = get_string(o, "type", p);
    if (!type || (*type && **type != "sqlite" && **type != "postgres"))
      return bad_key(source, "storage.type", "must be \"sqlite\" or \"postgres\"");
    if (*type)
      s.type = **type == "postgres" ? StorageOptions::Type::Postgres : StorageOptions::Type::Sqlite;
    auto url = get_string(o, "url", p);
    if (!url) return bad_key(source, "storage.url", "must be a string");
    if (*url) s.url = **url;
    if (auto r = read_ms(o, "connectTimeout", p, source, 1000, s.connect_timeout); !r) return r;
    if (auto r = read_ms(o, "statementTimeout", p, source, 1, s.statement_timeout); !r) return r;
  }

  auto cl = section(doc, "cluster", source);
  if (!cl) return cl.error();
  if (*cl) {
    const json::object& o = **cl;
    const std::string p = "cluster";
    auto& c = cfg.cluster;
    auto text = [&](std::string_view key, std::string& into, bool may_be_empty) -> Result<void> {
      auto v = get_string(o, key, p);
      if (!v) return bad_key(source, p + "." + std::string(key), "must be a string");
      if (!*v) return {};
      if (!may_be_empty && (*v)->empty())
        return bad_key(source, p + "." + std::string(key), "must not be empty");
      into = **v;
      return {};
    };
    if (auto r = text("redis", c.redis, true); !r) return r;
    if (auto r = text("nodeID", c.node_id, false); !r) return r;
    if (auto r = text("keyPrefix", c.key_prefix, true); !r) return r;
    if (auto r = read_ms(o, "lease", p, source, 1000, c.lease); !r) return r;
  }

  merge_into(cfg, cfg.raw, doc, "", source);
  // Commands are read from the merged document: a later file may change one field of a command.
  auto commands = parse_commands(cfg.raw);
  if (!commands) return cfg.located(commands.error());
  for (const auto& [name, command] : *commands) {
    auto origin = cfg.origins.find("command." + name + ".subtask");
    if (command.subtask && origin != cfg.origins.end() && origin->second == source)
      cfg.warnings.push_back(source + ": " + origin->first +
                             " is not supported: the command runs in the session itself");
  }
  cfg.commands = std::move(*commands);
  return {};
}

namespace {
Result<void> apply_file(Config& cfg, const std::filesystem::path& path, bool required) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (!required) return {};
    return config_error(path.string(), "cannot be read");
  }
  std::ostringstream text;
  text << in.rdbuf();
  auto doc = parse_json(text.str());
  if (!doc) return config_error(path.string(), doc.error().message);
  if (auto r = apply(cfg, *doc, path.string()); !r) return r;
  cfg.sources.push_back(path.string());
  return {};
}
}  // namespace

Result<Config> load(const LoadOptions& options) {
  Config cfg;
  std::optional<std::filesystem::path> home = options.home;
  if (!home) {
    if (const char* h = std::getenv("HOME"); h && *h) home = h;
  }
  if (home) {
    if (auto r = apply_file(cfg, *home / ".config" / "switchboard" / "config.json", false); !r)
      return r.error();
  }
  if (auto r = apply_file(cfg, options.working_directory / ".switchboard" / "config.json", false);
      !r)
    return r.error();
  if (options.explicit_file) {
    if (auto r = apply_file(cfg, *options.explicit_file, true); !r) return r.error();
  }
  return cfg;
}

}  // namespace sb::config
