#include "session/agent.hpp"

namespace sb::session {
namespace {

permission::Ruleset defaults() {
  using permission::Action;
  return {{"*", "*", Action::Allow},
          {"external_directory", "*", Action::Ask},
          {"doom_loop", "*", Action::Ask}};
}

}  // namespace

Result<std::map<std::string, Agent>> load_agents(const json::object& config) {
  using permission::Action;
  std::map<std::string, Agent> agents;
  Agent build;
  build.name = "build";
  build.description = "The default agent: reads, edits, runs commands.";
  build.permission = defaults();
  build.builtin_rules = build.permission.size();
  build.native = true;
  agents["build"] = build;

  Agent plan;
  plan.name = "plan";
  plan.description = "Plans without changing anything: no edits, no shell commands.";
  plan.permission = defaults();
  plan.permission.push_back({"edit", "*", Action::Deny});
  plan.permission.push_back({"bash", "*", Action::Deny});
  plan.builtin_rules = plan.permission.size();
  plan.native = true;
  agents["plan"] = plan;

  auto section = get_object(config, "agent");
  if (!section) return section.error();
  if (!*section) return agents;
  for (const auto& [name_sv, value] : **section) {
    std::string name(name_sv);
    std::string at = "agent." + name;
    if (!value.is_object()) return make_error(ErrorCode::InvalidRequest, at + " must be an object");
    const auto& o = value.get_object();
    Agent& a = agents[name];
    if (a.name.empty()) {
      a.name = name;
      a.permission = defaults();
      a.builtin_rules = a.permission.size();
    }
    if (auto v = get_string(o, "description", at); !v)
      return v.error();
    else if (*v)
      a.description = **v;
    if (auto v = get_string(o, "prompt", at); !v)
      return v.error();
    else if (*v)
      a.prompt = **v;
    if (auto v = get_string(o, "model", at); !v)
      return v.error();
    else if (*v)
      a.model = **v;
    if (auto v = get_int(o, "steps", at); !v)
      return v.error();
    else if (*v) {
      if (**v < 1 || **v > 10000)
        return make_error(ErrorCode::InvalidRequest, at + ".steps must be 1-10000");
      a.max_steps = static_cast<int>(**v);
    }
    if (auto tools = get_object(o, "tools", at); !tools)
      return tools.error();
    else if (*tools)
      for (const auto& [tool, on] : **tools) {
        if (!on.is_bool())
          return make_error(ErrorCode::InvalidRequest,
                            at + ".tools." + std::string(tool) + " must be a boolean");
        a.tools[std::string(tool)] = on.get_bool();
      }
    if (auto it = o.find("permission"); it != o.end()) {
      auto rules = permission::parse_config(it->value(), at + ".permission");
      if (!rules) return rules.error();
      a.permission.insert(a.permission.end(), rules->begin(), rules->end());
    }
  }
  return agents;
}

json::object to_json(const Agent& agent) {
  json::array rules = permission::to_json(agent.permission);
  for (const auto& [tool, offered] : agent.tools)
    if (!offered)
      rules.push_back(permission::to_json(permission::Rule{tool, "*", permission::Action::Deny}));
  json::object out{
      {"name", agent.name},      {"description", agent.description}, {"mode", "all"},
      {"native", agent.native},  {"permission", std::move(rules)},   {"options", json::object{}},
      {"steps", agent.max_steps}};
  if (!agent.prompt.empty()) out["prompt"] = agent.prompt;
  if (agent.model)
    if (auto slash = agent.model->find('/'); slash != std::string::npos)
      out["model"] = json::object{{"providerID", agent.model->substr(0, slash)},
                                  {"modelID", agent.model->substr(slash + 1)}};
  return out;
}

}  // namespace sb::session
