// SessionService: what changes a session or its stored messages outside a turn (PATCH, fork,
// deleting a message or a part, editing a part), and the reads of one message or of children.
#include <algorithm>
#include <map>
#include <string_view>

#include "session/service.hpp"
#include "util/ids.hpp"

namespace sb::session {

namespace {

// "<title> (fork #N)" for a fork of `title`: a fork of a fork counts on from its number. Read by
// hand, not with std::regex, whose matcher recurses per character (a long title overflowed the
// stack).
std::string fork_title(const std::string& title) {
  static constexpr std::string_view kMark = " (fork #";
  std::string_view t = title;
  if (t.ends_with(')')) {
    auto at = t.rfind(kMark);
    if (at != std::string_view::npos) {
      auto digits = t.substr(at + kMark.size(), t.size() - 1 - at - kMark.size());
      if (!digits.empty() && digits.size() < 9 &&
          std::all_of(digits.begin(), digits.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
        return std::string(t.substr(0, at)) + std::string(kMark) +
               std::to_string(std::stoi(std::string(digits)) + 1) + ")";
    }
  }
  return title + " (fork #1)";
}

}  // namespace

Result<SessionHold> SessionService::hold_idle(const std::string& session_id) {
  if (running(session_id))
    return make_error(ErrorCode::Conflict, "Session " + session_id + " is busy with a turn");
  return hold_unless_running(session_id);
}

Result<SessionHold> SessionService::hold_unless_running(const std::string& session_id) {
  // This node's turn holds the claim: a hold would give it back when it goes.
  if (running(session_id)) return SessionHold();
  if (unstored_ends_.count(session_id))
    return make_error(ErrorCode::Unavailable,
                      "Session " + session_id +
                          ": the end of its last turn is not stored yet (the store failed); try "
                          "again when it is");
  auto claimed = deps_.store->claim(session_id);
  if (!claimed) return claimed.error();
  if (!*claimed)
    return make_error(ErrorCode::Conflict,
                      "Session " + session_id + " is busy with a turn on another node");
  return SessionHold(deps_.store, session_id);
}

Result<MessageWithParts> SessionService::stored_message(const std::string& session_id,
                                                        const std::string& message_id) {
  if (auto s = get_session(session_id); !s) return s.error();
  writer_->write_pending();
  auto m = deps_.store->get_message(session_id, message_id);
  if (!m) return m.error();
  if (!*m) return make_error(ErrorCode::NotFound, "Message not found: " + message_id);
  return std::move(**m);
}

Result<SessionInfo> SessionService::update_session(const std::string& id, SessionUpdate update) {
  // A turn running here takes the change (below); one on another node would store its own copy.
  auto hold = hold_unless_running(id);
  if (!hold) return hold.error();
  auto s = get_session(id);
  if (!s) return s.error();
  if (update.title) s->title = std::move(*update.title);
  if (update.archived) s->archived = *update.archived;
  if (!update.permission.empty()) {
    if (s->unreadable_permission)
      return make_error(ErrorCode::Conflict,
                        "session " + id + " has stored rules that do not read back (" +
                            s->unreadable_permission->why + "); rules cannot be added to them");
    s->permission.insert(s->permission.end(), update.permission.begin(), update.permission.end());
    // New rules change what the session may do: it moves up the list, as OpenCode's does.
    s->updated = now_ms();
  }
  // A write on the writer's thread may carry a running turn's older copy of the session: it
  // lands first, so that it does not cover this change.
  writer_->write_pending();
  // What a running turn's asks approved is the turn's to know (it may not be stored yet).
  if (auto t = turns_.find(id); t != turns_.end()) s->approved = t->second->session.approved;
  if (auto r = deps_.store->put_session(*s); !r) return r.error();
  // A running turn keeps the session it began with (and stores it at its end): it takes the
  // change too, so that its end does not write the old title back.
  if (auto t = turns_.find(id); t != turns_.end()) {
    t->second->session.title = s->title;
    t->second->session.archived = s->archived;
    t->second->session.permission = s->permission;
  }
  deps_.bus->publish("session.updated", json::object{{"sessionID", id}, {"info", to_json(*s)}});
  return std::move(*s);
}

Result<std::vector<SessionInfo>> SessionService::children(const std::string& id) {
  if (auto s = get_session(id); !s) return s.error();
  auto all = deps_.store->list_sessions();
  if (!all) return all.error();
  std::vector<SessionInfo> out;
  for (auto& s : *all)
    if (s.parent_id == id) out.push_back(std::move(s));
  std::sort(out.begin(), out.end(),
            [](const SessionInfo& a, const SessionInfo& b) { return a.id < b.id; });
  return out;
}

Result<MessageWithParts> SessionService::message(const std::string& session_id,
                                                 const std::string& message_id) {
  return stored_message(session_id, message_id);
}

Result<SessionInfo> SessionService::fork(const std::string& session_id,
                                         const std::optional<std::string>& message_id) {
  auto source = get_session(session_id);
  if (!source) return source.error();
  if (message_id)
    if (auto m = stored_message(session_id, *message_id); !m) return m.error();
  auto all = messages(session_id);
  if (!all) return all.error();
  // The running turn's messages start at its user message, the last one: not copied half done.
  std::optional<std::string> end = message_id;
  if (running(session_id)) {
    auto last_user = std::find_if(all->rbegin(), all->rend(), [](const MessageWithParts& m) {
      return m.info.role == MessageInfo::Role::User;
    });
    if (last_user != all->rend() && (!end || last_user->info.id < *end)) end = last_user->info.id;
  }

  // The rules are the source's: a fork must not run without rules its creator set.
  if (source->unreadable_permission)
    return make_error(ErrorCode::Conflict, "session " + session_id +
                                               " has stored rules that do not read back (" +
                                               source->unreadable_permission->why + ")");
  CreateInput input;
  input.title = fork_title(source->title);
  input.client_id = source->client_id;
  input.permission = source->permission;
  auto s = create_session(std::move(input));
  if (!s) return s.error();
  StoreChanges changes;
  std::vector<MessageWithParts> copies;
  std::map<std::string, std::string> new_ids;  // the source's message ids -> the copies'
  for (const auto& m : *all) {
    if (end && m.info.id >= *end) break;
    MessageWithParts copy = m;
    copy.info.id = new_ids[m.info.id] = ids::make("msg");
    copy.info.session_id = s->id;
    if (auto parent = new_ids.find(m.info.parent_id); parent != new_ids.end())
      copy.info.parent_id = parent->second;
    for (auto& p : copy.parts) {
      p.id = ids::make("prt");
      p.session_id = s->id;
      p.message_id = copy.info.id;
    }
    changes.add(copy);
    copies.push_back(std::move(copy));
  }
  if (auto r = deps_.store->write(changes); !r) {
    (void)deps_.store->delete_session(s->id);
    return r.error();
  }
  if (deps_.bus->has_subscribers())
    for (const auto& m : copies) {
      deps_.bus->publish("message.updated",
                         json::object{{"sessionID", s->id}, {"info", to_json(m.info)}});
      for (const auto& p : m.parts)
        deps_.bus->publish("message.part.updated",
                           json::object{{"sessionID", s->id}, {"part", to_json(p)}});
    }
  return std::move(*s);
}

Result<void> SessionService::delete_message(const std::string& session_id,
                                            const std::string& message_id) {
  if (auto m = stored_message(session_id, message_id); !m) return m.error();
  auto idle = hold_idle(session_id);
  if (!idle) return idle.error();
  if (auto r = deps_.store->delete_message(session_id, message_id); !r) return r.error();
  // The model must not see what was deleted.
  conversations_->forget(session_id);
  deps_.bus->publish("message.removed",
                     json::object{{"sessionID", session_id}, {"messageID", message_id}});
  return {};
}

Result<void> SessionService::delete_part(const std::string& session_id,
                                         const std::string& message_id,
                                         const std::string& part_id) {
  // Held before the message is read: it is written back whole.
  auto idle = hold_idle(session_id);
  if (!idle) return idle.error();
  auto m = stored_message(session_id, message_id);
  if (!m) return m.error();
  auto it = std::find_if(m->parts.begin(), m->parts.end(),
                         [&](const Part& p) { return p.id == part_id; });
  if (it == m->parts.end()) return make_error(ErrorCode::NotFound, "Part not found: " + part_id);
  m->parts.erase(it);
  if (auto r = deps_.store->put_message(*m); !r) return r.error();
  conversations_->forget(session_id);
  deps_.bus->publish(
      "message.part.removed",
      json::object{{"sessionID", session_id}, {"messageID", message_id}, {"partID", part_id}});
  return {};
}

Result<Part> SessionService::update_part(Part part) {
  // Held before the message is read: it is written back whole.
  auto idle = hold_idle(part.session_id);
  if (!idle) return idle.error();
  auto m = stored_message(part.session_id, part.message_id);
  if (!m) return m.error();
  auto it = std::find_if(m->parts.begin(), m->parts.end(),
                         [&](const Part& p) { return p.id == part.id; });
  if (it == m->parts.end()) return make_error(ErrorCode::NotFound, "Part not found: " + part.id);
  *it = part;
  if (auto r = deps_.store->put_message(*m); !r) return r.error();
  conversations_->forget(part.session_id);
  deps_.bus->publish("message.part.updated",
                     json::object{{"sessionID", part.session_id}, {"part", to_json(part)}});
  return part;
}

}  // namespace sb::session
