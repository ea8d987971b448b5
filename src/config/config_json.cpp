// The effective configuration in OpenCode's Config shape (GET /config), secrets redacted.
#include <algorithm>
#include <array>
#include <cctype>

#include <boost/url/parse.hpp>

#include "config/config.hpp"

namespace sb::config {
namespace {

constexpr std::string_view kRedacted = "[redacted]";

std::int64_t ms(milliseconds d) {
  return d.count();
}

// Keys whose string values are secrets wherever they are.
bool secret_name(std::string_view key) {
  std::string lower(key);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  static constexpr std::array<std::string_view, 8> kWords = {
      "key", "token", "secret", "password", "passwd", "auth", "cookie", "credential"};
  return std::any_of(kWords.begin(), kWords.end(),
                     [&](std::string_view w) { return lower.find(w) != std::string::npos; });
}

// Every string value under a secret-sounding key, at any depth, becomes kRedacted. Permission
// rules, tool switches and commands hold patterns, tool ids and prompts, never credentials: a
// pattern "*.key" keeps its action.
void redact(json::value& v) {
  if (v.is_array()) {
    for (auto& item : v.get_array())
      redact(item);
    return;
  }
  if (!v.is_object()) return;
  for (auto& kv : v.get_object()) {
    if (kv.key() == "permission" || kv.key() == "tools" || kv.key() == "command") continue;
    if (secret_name(kv.key()) && kv.value().is_string())
      kv.value() = kRedacted;
    else
      redact(kv.value());
  }
}

// {K: V} whose every value may be a secret (request headers, environment variables).
json::object redact_values(const json::object& o) {
  json::object out;
  for (const auto& kv : o)
    out[kv.key()] = kRedacted;
  return out;
}

// provider.NAME as OpenCode's ProviderConfig: type -> npm, baseURL/apiKey/headers -> options,
// apiKeyEnv -> env, models [..] -> {ID: {}}; a scripted provider's script stays in options.
json::object provider_json(const json::object& p) {
  json::object out, options;
  std::string type = string_or(p, "type", "openai-compatible");
  if (type == "openai-compatible") out["npm"] = "@ai-sdk/openai-compatible";
  if (type == "anthropic") out["npm"] = "@ai-sdk/anthropic";
  out["type"] = type;  // Switchboard's own: the npm package stands for it in OpenCode
  if (auto name = string_or(p, "apiKeyEnv"); !name.empty()) out["env"] = json::array{name};
  for (std::string_view key : {"baseURL", "apiKey", "script", "scriptFile"})
    if (auto it = p.find(key); it != p.end()) options[key] = it->value();
  if (auto* url = options.if_contains("baseURL"); url && url->is_string())
    *url = redact_url(url->get_string());
  if (const auto* headers = object_at(p, "headers")) options["headers"] = redact_values(*headers);
  out["options"] = std::move(options);
  if (auto it = p.find("models"); it != p.end() && it->value().is_array()) {
    json::object models;
    for (const auto& m : it->value().get_array())
      if (m.is_string()) models[m.get_string()] = json::object{{"name", m.get_string()}};
    out["models"] = std::move(models);
  }
  return out;
}

// mcp.NAME with its secrets redacted: environment and header values, the url's userinfo and
// query values, and every argument of the command after the program (`--api-key sk-...`,
// `--token=...`, a connection string: which argument is a secret cannot be told in general).
json::object mcp_json(const json::object& servers) {
  json::object out;
  for (const auto& [name, entry] : servers) {
    json::value copy = entry;
    if (copy.is_object()) {
      auto& o = copy.get_object();
      for (std::string_view key : {"environment", "headers"})
        if (auto* v = o.if_contains(key); v && v->is_object()) *v = redact_values(v->get_object());
      if (auto* url = o.if_contains("url"); url && url->is_string())
        *url = redact_url(url->get_string());
      if (auto* command = o.if_contains("command"); command && command->is_array()) {
        auto& argv = command->get_array();
        for (std::size_t i = 1; i < argv.size(); ++i)
          argv[i] = kRedacted;
      } else if (command && command->is_string()) {
        *command = kRedacted;
      }
    }
    out[name] = std::move(copy);
  }
  return out;
}

json::object commands_json(const std::map<std::string, Command>& commands) {
  json::object out;
  for (const auto& [name, c] : commands) {
    json::object o{{"template", c.template_text}};
    if (!c.description.empty()) o["description"] = c.description;
    if (c.agent) o["agent"] = *c.agent;
    if (c.model) o["model"] = *c.model;
    if (c.subtask) o["subtask"] = true;
    out[name] = std::move(o);
  }
  return out;
}

json::object server_json(const ServerOptions& s) {
  json::array cors;
  for (const auto& origin : s.cors)
    cors.emplace_back(origin);
  json::object out{{"hostname", s.hostname},
                   {"port", s.port},
                   {"cors", std::move(cors)},
                   {"maxBodyBytes", s.max_body_bytes},
                   {"maxWebSocketMessageBytes", s.max_websocket_message_bytes},
                   {"maxJsonDepth", s.max_json_depth},
                   {"maxHeaderBytes", s.max_header_bytes},
                   {"maxHeaderCount", s.max_header_count},
                   {"maxConnections", s.max_connections},
                   {"subscriberQueueLimit", s.subscriber_queue_limit},
                   {"idleTimeout", ms(s.idle_timeout)},
                   {"headerTimeout", ms(s.header_timeout)},
                   {"allowRemote", s.allow_remote}};
  if (!s.password.empty()) out["password"] = kRedacted;
  return out;
}

json::object client_tools_json(const ClientToolsOptions& c) {
  return json::object{{"defaultTimeout", ms(c.default_timeout)},
                      {"maxTimeout", ms(c.max_timeout)},
                      {"keepaliveInterval", ms(c.keepalive_interval)},
                      {"reconnectGrace", ms(c.reconnect_grace)},
                      {"rateLimit", c.rate_limit},
                      {"maxToolsPerClient", c.max_tools_per_client},
                      {"maxDescriptionBytes", c.max_description_bytes},
                      {"maxSchemaBytes", c.max_schema_bytes},
                      {"maxConnectionsPerClient", c.max_connections_per_client},
                      {"maxPendingPerClient", c.max_pending_per_client},
                      {"maxPendingPerSession", c.max_pending_per_session},
                      {"clientTokens", c.client_tokens}};
}

}  // namespace

std::string redact_url(std::string_view text) {
  auto parsed = boost::urls::parse_uri_reference(text);
  if (!parsed) return std::string(kRedacted);
  const auto& url = *parsed;
  // Put back together from the parsed parts: "[redacted]" is not a valid userinfo or query value
  // (Boost.URL would percent-encode its brackets), and it is only ever shown, never requested.
  std::string out;
  if (url.has_scheme()) out += std::string(url.scheme()) + ":";
  if (url.has_authority()) {
    out += "//";
    if (url.has_userinfo()) out += std::string(kRedacted) + "@";
    out += url.encoded_host_and_port();
  }
  out += url.encoded_path();
  if (url.has_query()) {
    // Split here rather than with encoded_params(): Boost 1.81's gives an empty query's one
    // parameter a key that runs past the URL (an empty query before a fragment, "x:?#y", read
    // out of bounds; found by fuzz_config).
    out += '?';
    std::string_view query = url.encoded_query();
    for (bool first = true;; first = false) {
      auto amp = query.find('&');
      std::string_view param = query.substr(0, amp);
      if (!first) out += '&';
      auto eq = param.find('=');
      out += param.substr(0, eq);
      if (eq != std::string_view::npos) out += "=" + std::string(kRedacted);
      if (amp == std::string_view::npos) break;
      query.remove_prefix(amp + 1);
    }
  }
  if (url.has_fragment()) out += "#" + std::string(kRedacted);
  return out;
}

json::object to_json(const Config& cfg) {
  json::object out;
  // What OpenCode's Config has under the same name and shape, as the files give it.
  for (std::string_view key :
       {"$schema", "model", "agent", "permission", "tools", "experimental", "retry"})
    if (auto it = cfg.raw.find(key); it != cfg.raw.end()) out[key] = it->value();
  out["agent"] = out.contains("agent") ? out["agent"] : json::object{};
  out["command"] = commands_json(cfg.commands);
  json::object providers;
  if (const auto* section = object_at(cfg.raw, "provider"))
    for (const auto& [name, p] : *section)
      if (p.is_object()) providers[name] = provider_json(p.get_object());
  out["provider"] = std::move(providers);
  const auto* mcp = object_at(cfg.raw, "mcp");
  out["mcp"] = mcp ? mcp_json(*mcp) : json::object{};
  out["server"] = server_json(cfg.server);
  out["clientTools"] = client_tools_json(cfg.client_tools);
  const auto& st = cfg.storage;
  json::object storage{{"type", st.type == StorageOptions::Type::Postgres ? "postgres" : "sqlite"},
                       {"connectTimeout", st.connect_timeout.count()},
                       {"statementTimeout", st.statement_timeout.count()}};
  if (!st.url.empty()) storage["url"] = redact_url(st.url);
  out["storage"] = std::move(storage);
  if (cfg.cluster.enabled())
    out["cluster"] = json::object{{"redis", redact_url(cfg.cluster.redis)},
                                  {"nodeID", cfg.cluster.node_id},
                                  {"keyPrefix", cfg.cluster.key_prefix},
                                  {"lease", cfg.cluster.lease.count()}};
  json::value all = std::move(out);
  redact(all);
  return std::move(all.get_object());
}

}  // namespace sb::config
