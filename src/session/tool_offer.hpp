#pragma once
// The tool offer: which tools the model is offered in a session with an agent (what GET /tool
// lists and what each step's request carries), and the offered tools as a provider::ToolSet.
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "permission/ruleset.hpp"
#include "permission/service.hpp"
#include "provider/types.hpp"
#include "session/agent.hpp"
#include "session/types.hpp"
#include "tool/registry.hpp"

namespace sb::session {

// A session whose stored rules an older build accepted but that do not decode runs nothing
// rather than run without the rules its creator set: Conflict naming why.
Result<void> readable_rules(const SessionInfo& session);

// The registry's tools for `session` (nullptr: none) that `agent` offers: less the tools of
// other clients (a client's session offers that client's tools only), those switched off per
// prompt (`switches`) or by the agent, and those the rules disable wholly (the agent's, the
// config's, the session's own and what was approved in it, from `permissions`).
Result<std::vector<tool::ToolPtr>> offered_tools(const Agent& agent, const SessionInfo* session,
                                                 const permission::Ruleset& config_rules,
                                                 const permission::PermissionService& permissions,
                                                 const tool::ToolRegistry& registry,
                                                 const std::map<std::string, bool>& switches);

// The offered tools as ToolSets: the same object (with its serialized forms) as long as the
// tools are the same. Keeps the most recently made few. Not thread-safe: the Processor's, used
// on the server's executor only.
class ToolSetCache {
 public:
  provider::ToolSet get(const std::vector<tool::ToolPtr>& offered);

 private:
  struct KnownToolSet {
    std::vector<tool::ToolPtr> tools;  // what it was made from
    provider::ToolSet set;
  };
  std::deque<KnownToolSet> tool_sets_;  // most recently made first
};

}  // namespace sb::session
