#include "permission/ruleset.hpp"

#include <cstdlib>
#include <tuple>

#include "permission/wildcard.hpp"

namespace sb::permission {
namespace {

Error bad(const std::string& where, const std::string& what) {
  return make_error(ErrorCode::InvalidRequest, where + " " + what);
}

// A pattern can hold anything (spaces, dots, quotes), so it is shown as a JSON string in brackets.
std::string pattern_path(const std::string& key_path, std::string_view pattern) {
  return key_path + "[" + json::serialize(json::string(pattern)) + "]";
}

std::string describe(const json::value& v) {
  if (v.is_string()) return json::serialize(v);
  return std::string(kind_name(v));
}

Result<Action> read_action(const json::value& v, const std::string& where) {
  if (v.is_string())
    if (auto a = parse_action(v.get_string())) return *a;
  return bad(where, "must be \"allow\", \"ask\" or \"deny\", got " + describe(v));
}

std::string expand_home(std::string pattern) {
  const char* home = std::getenv("HOME");
  if (!home || !*home) return pattern;
  if (pattern == "~") return home;
  if (pattern.starts_with("~/")) return home + pattern.substr(1);
  if (pattern == "$HOME" || pattern.starts_with("$HOME/")) return home + pattern.substr(5);
  return pattern;
}

// The ask timeout shares the "permission" object with the rules (OpenCode has no such option);
// a number cannot be a rule, so a numeric "timeout" is the option.
bool is_timeout_entry(std::string_view key, const json::value& v) {
  return key == "timeout" && (v.is_number() || v.is_null());
}

template <class Layers>
const Rule* find_last(std::string_view permission, std::string_view pattern, const Layers& layers) {
  // Walk backwards: the first hit is the last match, and most lookups stop early.
  for (auto layer = std::rbegin(layers); layer != std::rend(layers); ++layer) {
    const Ruleset& rules = *layer;
    for (auto rule = rules.rbegin(); rule != rules.rend(); ++rule)
      if (wildcard_match(permission, rule->permission) && wildcard_match(pattern, rule->pattern))
        return &*rule;
  }
  return nullptr;
}

template <class Layers>
bool disabled_in(std::string_view tool, const Layers& layers, bool client_tool) {
  std::string permission = permission_for_tool(tool, client_tool);
  for (auto layer = std::rbegin(layers); layer != std::rend(layers); ++layer) {
    const Ruleset& rules = *layer;
    for (auto rule = rules.rbegin(); rule != rules.rend(); ++rule)
      if (wildcard_match(permission, rule->permission))
        return rule->pattern == "*" && rule->action == Action::Deny;
  }
  return false;
}

}  // namespace

std::string_view action_name(Action action) {
  switch (action) {
    case Action::Allow:
      return "allow";
    case Action::Ask:
      return "ask";
    case Action::Deny:
      return "deny";
  }
  return "ask";
}

std::optional<Action> parse_action(std::string_view name) {
  if (name == "allow") return Action::Allow;
  if (name == "ask") return Action::Ask;
  if (name == "deny") return Action::Deny;
  return std::nullopt;
}

Result<Ruleset> parse_config(const json::value& permission, std::string_view path) {
  Ruleset rules;
  std::string at(path);
  if (permission.is_null()) return rules;
  if (permission.is_string()) {
    auto action = read_action(permission, at);
    if (!action) return action.error();
    rules.push_back({"*", "*", *action});
    return rules;
  }
  if (!permission.is_object())
    return bad(
        at, "must be an object of permission: action, or an action, got " + describe(permission));
  for (const auto& kv : permission.get_object()) {
    if (is_timeout_entry(kv.key(), kv.value())) continue;
    std::string key_path = field_path(at, kv.key());
    const json::value& v = kv.value();
    if (v.is_string()) {
      auto action = read_action(v, key_path);
      if (!action) return action.error();
      rules.push_back({std::string(kv.key()), "*", *action});
    } else if (v.is_object()) {
      for (const auto& entry : v.get_object()) {
        auto action = read_action(entry.value(), pattern_path(key_path, entry.key()));
        if (!action) return action.error();
        rules.push_back({std::string(kv.key()), expand_home(std::string(entry.key())), *action});
      }
    } else {
      return bad(key_path,
                 "must be \"allow\", \"ask\", \"deny\" or an object of pattern: action, got " +
                     describe(v));
    }
  }
  return rules;
}

Result<Ruleset> parse_rules(const json::value& rules, std::string_view path) {
  auto invalid = [](std::string message) {
    return make_error(ErrorCode::InvalidRequest, std::move(message));
  };
  if (rules.is_null()) return Ruleset{};
  if (!rules.is_array())
    return invalid(std::string(path) + " must be an array of {permission, pattern, action}, got " +
                   describe(rules));
  const auto& array = rules.get_array();
  if (array.size() > kMaxSessionRules)
    return invalid(std::string(path) + " has " + std::to_string(array.size()) + " rules; at most " +
                   std::to_string(kMaxSessionRules) + " are allowed");
  Ruleset out;
  out.reserve(array.size());
  for (std::size_t i = 0; i < array.size(); ++i) {
    std::string at = std::string(path) + "[" + std::to_string(i) + "]";
    if (!array[i].is_object())
      return invalid(at + " must be an object {permission, pattern, action}, got " +
                     describe(array[i]));
    const auto& o = array[i].get_object();
    Rule rule;
    for (auto [key, field, fallback] : {std::tuple{"permission", &rule.permission, ""},
                                        std::tuple{"pattern", &rule.pattern, "*"}}) {
      auto v = get_string(o, key, at);
      if (!v) return v.error();
      if (!*v && !*fallback) return invalid(field_path(at, key) + " is required");
      *field = v->value_or(fallback);
      if (field->empty()) return invalid(field_path(at, key) + " must not be empty");
      if (field->size() > kMaxRuleBytes)
        return invalid(field_path(at, key) + " is over " + std::to_string(kMaxRuleBytes) +
                       " bytes");
    }
    auto action = o.find("action");
    std::optional<Action> parsed;
    if (action != o.end() && action->value().is_string())
      parsed = parse_action(action->value().get_string());
    if (!parsed)
      return invalid(field_path(at, "action") + " must be \"allow\", \"ask\" or \"deny\", got " +
                     (action == o.end() ? std::string("nothing") : describe(action->value())));
    rule.action = *parsed;
    out.push_back(std::move(rule));
  }
  return out;
}

Result<std::chrono::milliseconds> parse_timeout(const json::value& permission,
                                                std::string_view path) {
  if (!permission.is_object()) return std::chrono::milliseconds{0};
  // A string or object under "timeout" is the rule of a tool called "timeout", not this option.
  auto it = permission.get_object().find("timeout");
  if (it == permission.get_object().end() || !it->value().is_number())
    return std::chrono::milliseconds{0};
  auto n = get_int(permission.get_object(), "timeout", path);
  if (!n) return n.error();
  if (!*n) return std::chrono::milliseconds{0};
  if (**n < 0)
    return bad(field_path(path, "timeout"),
               "must be 0 (no timeout) or a positive number of ms, got " + std::to_string(**n));
  return std::chrono::milliseconds{**n};
}

const Rule* find_rule(std::string_view permission, std::string_view pattern,
                      std::span<const Ruleset> layers) {
  return find_last(permission, pattern, layers);
}

const Rule* find_rule(std::string_view permission, std::string_view pattern, RulesetRefs layers) {
  return find_last(permission, pattern, layers);
}

Action evaluate(std::string_view permission, std::string_view pattern,
                std::span<const Ruleset> layers) {
  const Rule* rule = find_rule(permission, pattern, layers);
  return rule ? rule->action : Action::Ask;
}

Action evaluate(std::string_view permission, std::string_view pattern, RulesetRefs layers) {
  const Rule* rule = find_rule(permission, pattern, layers);
  return rule ? rule->action : Action::Ask;
}

std::string permission_for_tool(std::string_view tool, bool client_tool) {
  if (client_tool) return "client_tools";
  if (tool == "edit" || tool == "write" || tool == "patch" || tool == "multiedit") return "edit";
  return std::string(tool);
}

bool disabled(std::string_view tool, std::span<const Ruleset> layers, bool client_tool) {
  return disabled_in(tool, layers, client_tool);
}

bool disabled(std::string_view tool, RulesetRefs layers, bool client_tool) {
  return disabled_in(tool, layers, client_tool);
}

json::object to_json(const Rule& rule) {
  return json::object{{"permission", rule.permission},
                      {"pattern", rule.pattern},
                      {"action", action_name(rule.action)}};
}

json::array to_json(const Ruleset& rules) {
  json::array out;
  out.reserve(rules.size());
  for (const auto& rule : rules)
    out.push_back(to_json(rule));
  return out;
}

}  // namespace sb::permission
