// SessionService's revert, unrevert and diff (declared in service.hpp; the work is in
// revert.cpp): a revert or an unrevert waits for no turn (Conflict while one runs, as OpenCode's
// SessionBusyError), and a turn's start makes a revert final.
#include "session/revert.hpp"
#include "session/service.hpp"

namespace sb::session {

Result<SessionInfo> SessionService::revert(const std::string& session_id,
                                           const std::string& message_id,
                                           const std::string& part_id) {
  auto idle = hold_idle(session_id);
  if (!idle) return idle.error();
  auto all = messages(session_id);  // NotFound for an unknown session
  if (!all) return all.error();
  auto point = revert_point(*all, message_id, part_id);
  if (!point) return point.error();
  auto session = get_session(session_id);
  if (!session) return session.error();
  return revert_files(*deps_.store, *deps_.bus, std::move(*session), *point);
}

Result<SessionInfo> SessionService::unrevert(const std::string& session_id) {
  auto idle = hold_idle(session_id);
  if (!idle) return idle.error();
  auto session = get_session(session_id);
  if (!session) return session.error();
  return unrevert_files(*deps_.store, *deps_.bus, std::move(*session));
}

Result<json::array> SessionService::diff(const std::string& session_id,
                                         const std::string& message_id) {
  auto all = messages(session_id);
  if (!all) return all.error();
  auto session = get_session(session_id);
  if (!session) return session.error();
  return session_diff(*deps_.store, *session, *all, message_id);
}

Result<SessionInfo> SessionService::settle_revert(SessionInfo session) {
  auto all = messages(session.id);
  if (!all) return all.error();
  auto settled = commit_revert(*deps_.store, *deps_.bus, std::move(session), *all);
  // The model must not see the messages that went.
  if (settled) conversations_->forget(settled->id);
  return settled;
}

}  // namespace sb::session
