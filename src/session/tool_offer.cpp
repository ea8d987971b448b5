#include "session/tool_offer.hpp"

namespace sb::session {

namespace {
// Distinct tool lists kept with their serialized forms (agents, per-session client tools).
constexpr std::size_t kToolSetsKept = 32;
}  // namespace

Result<void> readable_rules(const SessionInfo& session) {
  if (!session.unreadable_permission) return {};
  return make_error(ErrorCode::Conflict,
                    "session " + session.id + " has stored permission rules that cannot be read (" +
                        session.unreadable_permission->why +
                        "): it runs no turns and offers no tools without them; delete it and "
                        "create a new session");
}

Result<std::vector<tool::ToolPtr>> offered_tools(const Agent& agent, const SessionInfo* session,
                                                 const permission::Ruleset& config_rules,
                                                 const permission::PermissionService& permissions,
                                                 const tool::ToolRegistry& registry,
                                                 const std::map<std::string, bool>& switches) {
  permission::Ruleset session_rules;
  std::string owner;
  const std::string no_session;
  const std::string& session_id = session ? session->id : no_session;
  if (session) {
    if (auto rules = readable_rules(*session); !rules) return rules.error();
    owner = session->client_id;
    session_rules = session->permission;
    session_rules.insert(session_rules.end(), session->approved.begin(), session->approved.end());
    // Approved by a reply of a turn still running (stored with the session at its next write).
    auto approved = permissions.session_rules(session_id);
    session_rules.insert(session_rules.end(), approved.begin(), approved.end());
  }
  std::vector<tool::ToolPtr> out;
  for (auto& t : registry.tools("", session_id)) {
    const std::string& id = t->id();
    const auto* def = tool::client_definition(*t);
    // A session that a client created offers the model that client's tools only (and the tools
    // registered for the session itself: a chat's own).
    if (def && !owner.empty() && def->client_id != owner && def->session_id != session_id) continue;
    if (auto s = switches.find(id); s != switches.end() && !s->second) continue;
    if (auto s = agent.tools.find(id); s != agent.tools.end() && !s->second) continue;
    bool client = def != nullptr;
    if (permission::disabled(
            id, {std::cref(agent.permission), std::cref(config_rules), std::cref(session_rules)},
            client))
      continue;
    out.push_back(std::move(t));
  }
  return out;
}

provider::ToolSet ToolSetCache::get(const std::vector<tool::ToolPtr>& offered) {
  auto same = [&](const KnownToolSet& known) {
    if (known.tools.size() != offered.size()) return false;
    for (std::size_t i = 0; i < offered.size(); ++i) {
      // The same tool object has the same schema (built-in and custom tools are immutable);
      // client tools are new objects on every lookup, so theirs are compared.
      if (known.tools[i] == offered[i]) continue;
      const auto& schema = known.set.schemas()[i];
      const auto& tool = *offered[i];
      if (schema.name != tool.id() || schema.description != tool.description() ||
          schema.parameters != tool.parameters())
        return false;
    }
    return true;
  };
  for (const auto& known : tool_sets_)
    if (same(known)) return known.set;
  std::vector<provider::ToolSchema> schemas;
  schemas.reserve(offered.size());
  for (const auto& t : offered)
    schemas.push_back({t->id(), t->description(), t->parameters()});
  provider::ToolSet set(std::move(schemas));
  tool_sets_.push_front({offered, set});
  if (tool_sets_.size() > kToolSetsKept) tool_sets_.pop_back();
  return set;
}

}  // namespace sb::session
