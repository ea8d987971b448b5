#pragma once
// Agents: a name, a system prompt, the tools and permissions it has, and its step limit.
// `build` (everything) and `plan` (no edits, no bash) are built in; the config file may change
// them or add more under "agent".
#include <map>
#include <optional>
#include <string>

#include "permission/ruleset.hpp"
#include "util/json.hpp"

namespace sb::session {

struct Agent {
  std::string name;
  std::string description;
  std::string prompt;                // replaces the default system prompt when set
  std::optional<std::string> model;  // "PROVIDER/MODEL"
  int max_steps = 100;
  std::map<std::string, bool> tools;  // tool id -> offered?; absent = offered
  permission::Ruleset permission;     // the agent's defaults, layered first
  // How many of `permission` are built in; the rest are the config's agent.NAME.permission,
  // which come after (and so win over) rules a turn adds to the built-in ones.
  std::size_t builtin_rules = 0;
  bool native = false;  // built in (build, plan), whether or not the config changed it
};

// OpenCode's Agent (GET /agent): {name, description, mode, native, permission, options, model?,
// prompt?, steps}. Every agent may run a turn and the task tool's sub-sessions: mode "all". A
// tool switched off (tools: {ID: false}) shows as a rule denying it, as OpenCode writes it.
json::object to_json(const Agent& agent);

// The built-in agents, with config `agent.NAME` applied over them. Errors start with the key
// path (config::Config::located adds the file).
Result<std::map<std::string, Agent>> load_agents(const json::object& config);

}  // namespace sb::session
