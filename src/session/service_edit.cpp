// SessionService: what changes a session or its stored messages outside a turn (PATCH, fork,
// deleting a message or a part, editing a part), and the reads of one message or of children.
#include <algorithm>
#include <map>
#include <string_view>

#include "session/service.hpp"
#include "util/ids.hpp"

namespace sb::session {

namespace asio = boost::asio;

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

Error SessionService::busy_error(const std::string& session_id) const {
  if (running(session_id))
    return make_error(ErrorCode::Conflict, "Session " + session_id + " is busy with a turn");
  return make_error(ErrorCode::Conflict, "Session " + session_id +
                                             " is being changed (an edit or a revert); try again "
                                             "when that is done");
}

asio::awaitable<Result<SessionHold>> SessionService::hold_idle(std::string session_id) {
  if (busy(session_id)) co_return busy_error(session_id);
  co_return co_await claim(std::move(session_id));
}

asio::awaitable<Result<SessionHold>> SessionService::hold_unless_running(std::string session_id) {
  // This node's turn holds the claim: a hold would give it back when it goes.
  if (turns_.count(session_id)) co_return SessionHold();
  // One that starts, or another change: this one would read what that one is about to write.
  if (busy(session_id)) co_return busy_error(session_id);
  co_return co_await claim(std::move(session_id));
}

asio::awaitable<Result<SessionHold>> SessionService::claim(std::string session_id) {
  auto self = shared_from_this();
  if (unstored_ends_.count(session_id))
    co_return make_error(ErrorCode::Unavailable,
                         "Session " + session_id +
                             ": the end of its last turn is not stored yet (the store failed); "
                             "try again when it is");
  // Counted from here, before the store is asked: what begins meanwhile finds the session busy.
  ++held_[session_id];
  SessionHold hold(session_id, [weak = weak_from_this(), session_id] {
    auto service = weak.lock();
    if (!service) return;
    auto it = service->held_.find(session_id);
    if (it != service->held_.end() && --it->second == 0) service->held_.erase(it);
  });
  auto claimed = co_await deps_.store->call(&SessionStore::claim, session_id);
  if (!claimed) co_return claimed.error();
  if (!*claimed)
    co_return make_error(ErrorCode::Conflict,
                         "Session " + session_id + " is busy with a turn on another node");
  hold.claimed(deps_.store);
  co_return hold;
}

asio::awaitable<Result<MessageWithParts>> SessionService::stored_message(std::string session_id,
                                                                         std::string message_id) {
  auto self = shared_from_this();
  if (auto s = co_await get_session(session_id); !s) co_return s.error();
  co_await writer_->store_pending();
  auto m = co_await deps_.store->call(&SessionStore::get_message, session_id, message_id);
  if (!m) co_return m.error();
  if (!*m) co_return make_error(ErrorCode::NotFound, "Message not found: " + message_id);
  co_return std::move(**m);
}

asio::awaitable<Result<SessionInfo>> SessionService::update_session(std::string id,
                                                                    SessionUpdate update) {
  auto self = shared_from_this();
  // A turn running here takes the change (below); one on another node would store its own copy.
  auto hold = co_await hold_unless_running(id);
  if (!hold) co_return hold.error();
  auto s = co_await get_session(id);
  if (!s) co_return s.error();
  if (update.title) s->title = std::move(*update.title);
  if (update.archived) s->archived = *update.archived;
  if (!update.permission.empty()) {
    if (s->unreadable_permission)
      co_return make_error(ErrorCode::Conflict,
                           "session " + id + " has stored rules that do not read back (" +
                               s->unreadable_permission->why + "); rules cannot be added to them");
    s->permission.insert(s->permission.end(), update.permission.begin(), update.permission.end());
    // New rules change what the session may do: it moves up the list, as OpenCode's does.
    s->updated = now_ms();
  }
  // A write on the writer's thread may carry a running turn's older copy of the session: it
  // lands first, so that it does not cover this change.
  co_await writer_->store_pending();
  // A running turn keeps the session it began with (and stores it at its end): it takes the
  // change too, so that its end does not write the old title back. Taken before the write is
  // sent: a write of the turn's that the writer starts meanwhile carries the change.
  if (auto t = turns_.find(id); t != turns_.end()) {
    Turn& turn = *t->second;
    // What a running turn's asks approved is the turn's to know (it may not be stored yet),
    // unless this change replaces it: then the turn's next asks go by the new approvals.
    if (update.approved) {
      turn.session.approved = *update.approved;
      turn.session_rules = s->permission;
      turn.session_rules.insert(turn.session_rules.end(), update.approved->begin(),
                                update.approved->end());
    }
    s->approved = turn.session.approved;
    turn.session.title = s->title;
    turn.session.archived = s->archived;
    turn.session.permission = s->permission;
  } else if (update.approved) {
    s->approved = *update.approved;
  }
  // The approvals the permission service keeps for the session's asks (memory) follow.
  if (update.approved) deps_.permissions->replace_approved(id, *update.approved);
  if (auto r = co_await deps_.store->call(&SessionStore::put_session, *s); !r) co_return r.error();
  deps_.bus->publish("session.updated", json::object{{"sessionID", id}, {"info", to_json(*s)}});
  co_return std::move(*s);
}

asio::awaitable<Result<std::vector<SessionInfo>>> SessionService::children(std::string id) {
  auto self = shared_from_this();
  if (auto s = co_await get_session(id); !s) co_return s.error();
  auto all = co_await deps_.store->call(&SessionStore::list_sessions);
  if (!all) co_return all.error();
  std::vector<SessionInfo> out;
  for (auto& s : *all)
    if (s.parent_id == id) out.push_back(std::move(s));
  std::sort(out.begin(), out.end(),
            [](const SessionInfo& a, const SessionInfo& b) { return a.id < b.id; });
  co_return out;
}

asio::awaitable<Result<MessageWithParts>> SessionService::message(std::string session_id,
                                                                  std::string message_id) {
  co_return co_await stored_message(std::move(session_id), std::move(message_id));
}

asio::awaitable<Result<SessionInfo>> SessionService::fork(std::string session_id,
                                                          std::optional<std::string> message_id) {
  auto self = shared_from_this();
  auto source = co_await get_session(session_id);
  if (!source) co_return source.error();
  if (message_id)
    if (auto m = co_await stored_message(session_id, *message_id); !m) co_return m.error();
  // A turn that runs before the messages are read has its user message among them; one that
  // begins while they are read has nothing there yet.
  bool turn_runs = turns_.count(session_id) > 0;
  auto all = co_await messages(session_id);
  if (!all) co_return all.error();
  // The running turn's messages start at its user message, the last one: not copied half done.
  std::optional<std::string> end = message_id;
  if (turn_runs) {
    auto last_user = std::find_if(all->rbegin(), all->rend(), [](const MessageWithParts& m) {
      return m.info.role == MessageInfo::Role::User;
    });
    if (last_user != all->rend() && (!end || last_user->info.id < *end)) end = last_user->info.id;
  }

  // The rules are the source's: a fork must not run without rules its creator set.
  if (source->unreadable_permission)
    co_return make_error(ErrorCode::Conflict, "session " + session_id +
                                                  " has stored rules that do not read back (" +
                                                  source->unreadable_permission->why + ")");
  CreateInput input;
  input.title = fork_title(source->title);
  input.client_id = source->client_id;
  input.permission = source->permission;
  auto s = co_await create_session(std::move(input));
  if (!s) co_return s.error();
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
  // Named before the co_await (SessionStore::run).
  auto write = [changes = std::move(changes), id = s->id](SessionStore& store) -> Result<void> {
    auto r = store.write(changes);
    if (!r) (void)store.delete_session(id);
    return r;
  };
  auto written = co_await deps_.store->run(std::move(write));
  if (!written) co_return written.error();
  if (deps_.bus->has_subscribers())
    for (const auto& m : copies) {
      deps_.bus->publish("message.updated",
                         json::object{{"sessionID", s->id}, {"info", to_json(m.info)}});
      for (const auto& p : m.parts)
        deps_.bus->publish("message.part.updated",
                           json::object{{"sessionID", s->id}, {"part", to_json(p)}});
    }
  co_return std::move(*s);
}

asio::awaitable<Result<void>> SessionService::delete_message(std::string session_id,
                                                             std::string message_id) {
  auto self = shared_from_this();
  if (auto m = co_await stored_message(session_id, message_id); !m) co_return m.error();
  auto idle = co_await hold_idle(session_id);
  if (!idle) co_return idle.error();
  if (auto r = co_await deps_.store->call(&SessionStore::delete_message, session_id, message_id);
      !r)
    co_return r.error();
  // The model must not see what was deleted.
  conversations_->forget(session_id);
  deps_.bus->publish("message.removed",
                     json::object{{"sessionID", session_id}, {"messageID", message_id}});
  co_return Result<void>{};
}

asio::awaitable<Result<void>> SessionService::delete_part(std::string session_id,
                                                          std::string message_id,
                                                          std::string part_id) {
  auto self = shared_from_this();
  // Held before the message is read: it is written back whole.
  auto idle = co_await hold_idle(session_id);
  if (!idle) co_return idle.error();
  auto m = co_await stored_message(session_id, message_id);
  if (!m) co_return m.error();
  auto it = std::find_if(m->parts.begin(), m->parts.end(),
                         [&](const Part& p) { return p.id == part_id; });
  if (it == m->parts.end()) co_return make_error(ErrorCode::NotFound, "Part not found: " + part_id);
  m->parts.erase(it);
  if (auto r = co_await deps_.store->call(&SessionStore::put_message, *m); !r) co_return r.error();
  conversations_->forget(session_id);
  deps_.bus->publish(
      "message.part.removed",
      json::object{{"sessionID", session_id}, {"messageID", message_id}, {"partID", part_id}});
  co_return Result<void>{};
}

asio::awaitable<Result<Part>> SessionService::update_part(Part part) {
  auto self = shared_from_this();
  // Held before the message is read: it is written back whole.
  auto idle = co_await hold_idle(part.session_id);
  if (!idle) co_return idle.error();
  auto m = co_await stored_message(part.session_id, part.message_id);
  if (!m) co_return m.error();
  auto it = std::find_if(m->parts.begin(), m->parts.end(),
                         [&](const Part& p) { return p.id == part.id; });
  if (it == m->parts.end()) co_return make_error(ErrorCode::NotFound, "Part not found: " + part.id);
  *it = part;
  if (auto r = co_await deps_.store->call(&SessionStore::put_message, *m); !r) co_return r.error();
  conversations_->forget(part.session_id);
  deps_.bus->publish("message.part.updated",
                     json::object{{"sessionID", part.session_id}, {"part", to_json(part)}});
  co_return part;
}

}  // namespace sb::session
