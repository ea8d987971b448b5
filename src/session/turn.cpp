#include "session/turn.hpp"

#include <algorithm>

namespace sb::session {

StoreChanges Turn::take_unsaved() {
  StoreChanges changes;
  changes.session = std::exchange(unsaved_session, {});
  for (std::size_t i : unsaved)
    changes.add(messages[i]);
  unsaved.clear();
  changes.files = std::exchange(unsaved_files, {});
  changes.waits = std::exchange(unsaved_waits, {});
  changes.waits_ended = std::exchange(ended_waits, {});
  return changes;
}

MessageWithParts* Turn::change(const std::string& id) {
  for (std::size_t i = messages.size(); i-- > 0;) {
    if (messages[i].info.id != id) continue;
    if (std::find(unsaved.begin(), unsaved.end(), i) == unsaved.end()) unsaved.push_back(i);
    return &messages[i];
  }
  return nullptr;
}

void StatusBoard::set(const std::string& session_id, json::object status) {
  bool idle = status.at("type").as_string() == "idle";
  if (idle)
    status_.erase(session_id);
  else
    status_[session_id] = status;
  bus_->publish("session.status",
                json::object{{"sessionID", session_id}, {"status", std::move(status)}});
  if (idle) bus_->publish("session.idle", json::object{{"sessionID", session_id}});
}

json::object StatusBoard::all() const {
  json::object out;
  for (const auto& [id, s] : status_)
    out[id] = s;
  return out;
}

bool StatusBoard::running(const std::string& session_id) const {
  return status_.count(session_id) > 0;
}

}  // namespace sb::session
