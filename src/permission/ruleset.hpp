#pragma once
// Permission rules as OpenCode's PermissionNext has them: a rule says what to do (allow, ask,
// deny) when a permission ("bash", "edit", "client_tools", ...) is wanted for a pattern (a
// command, a path, a URL, a tool id). Both the permission and the pattern of a rule are wildcard
// patterns (permission/wildcard.hpp).
//
// Rulesets are layered, earliest first: agent defaults, then the config file, then the session
// (its own rules, then what the user approved with "always"). The last rule that matches, across
// all layers, decides; nothing matching means Ask. Pure functions; thread-safe.
#include <chrono>
#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "util/error.hpp"
#include "util/json.hpp"

namespace sb::permission {

enum class Action { Allow, Ask, Deny };

// "allow", "ask", "deny".
std::string_view action_name(Action action);
std::optional<Action> parse_action(std::string_view name);

struct Rule {
  std::string permission;  // wildcard pattern over permission names
  std::string pattern;     // wildcard pattern over what the permission is for
  Action action = Action::Ask;

  bool operator==(const Rule&) const = default;
};

using Ruleset = std::vector<Rule>;

// Layers by reference, so that `evaluate(p, x, {agent, config, session})` copies nothing.
using RulesetRefs = std::initializer_list<std::reference_wrapper<const Ruleset>>;

// Reads a `"permission"` config value:
//   {"bash": {"git *": "allow", "*": "ask"}, "edit": "ask", "*": "allow"}
// into rules in document order (so that later keys override earlier ones, as the user wrote
// them). A string value means pattern "*"; a whole-value string ("permission": "ask") means
// {"*": "ask"}, as in OpenCode. Patterns starting with "~/" or "$HOME/" get the home directory
// (OpenCode does this so that path rules can be written portably). A numeric "timeout" key is
// the ask timeout (parse_timeout), not a permission, and is skipped here.
// Errors are InvalidRequest and start with the key path (config::Config::located adds the file):
//   "permission.bash[\"git *\"] must be \"allow\", \"ask\" or \"deny\", got \"yes\"".
// `path` is where the value sits in the document ("permission", "agent.plan.permission").
Result<Ruleset> parse_config(const json::value& permission, std::string_view path = "permission");

// A session's own rules, as POST /session takes them and the store keeps them: an array of
// OpenCode's PermissionRule {permission, pattern, action}, `pattern` "*" when absent. Errors are
// InvalidRequest and name the element and field ("permission[0].pattern must be a string, got
// number"); at most kMaxSessionRules rules of strings up to kMaxRuleBytes (every tool call
// matches against each). `path`: where the array sits.
inline constexpr std::size_t kMaxSessionRules = 1000;
inline constexpr std::size_t kMaxRuleBytes = 4096;
Result<Ruleset> parse_rules(const json::value& rules, std::string_view path = "permission");

// `permission.timeout` in ms: how long an ask waits for a person before it is rejected.
// Absent, null or 0 = wait forever (interactive use). Negative or non-integer is an error.
Result<std::chrono::milliseconds> parse_timeout(const json::value& permission,
                                                std::string_view path = "permission");

// The rule that decides (the last match over all layers), or nullptr when none matches.
const Rule* find_rule(std::string_view permission, std::string_view pattern,
                      std::span<const Ruleset> layers);
const Rule* find_rule(std::string_view permission, std::string_view pattern, RulesetRefs layers);

// The action for `permission` on `pattern`: the last matching rule's, else Ask.
Action evaluate(std::string_view permission, std::string_view pattern,
                std::span<const Ruleset> layers);
Action evaluate(std::string_view permission, std::string_view pattern, RulesetRefs layers);

// The permission that gates a tool: edit/write/patch/multiedit -> "edit", client tools ->
// "client_tools", every other tool its own id ("bash", "read", "webfetch", ...).
std::string permission_for_tool(std::string_view tool, bool client_tool = false);

// Whether a tool is hidden from the model (OpenCode's PermissionNext.disabled): the last rule
// whose permission matches the tool's permission has pattern "*" and denies. A tool whose
// permission is denied only for some patterns stays visible; its calls fail when they match.
bool disabled(std::string_view tool, std::span<const Ruleset> layers, bool client_tool = false);
bool disabled(std::string_view tool, RulesetRefs layers, bool client_tool = false);

// {"permission": ..., "pattern": ..., "action": ...}, OpenCode's PermissionRule shape.
json::object to_json(const Rule& rule);
json::array to_json(const Ruleset& rules);

}  // namespace sb::permission
