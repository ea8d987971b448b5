#pragma once
// SessionStore: sessions, messages and parts in SQLite (one row per object, its JSON in `data`).
// Ids sort by creation time, so ORDER BY id is chronological.
//
// Thread-safe: the connection's mutex (store::Database::mutex()) around each use.
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "session/types.hpp"
#include "store/database.hpp"

namespace sb::session {

struct MessageWithParts {
  MessageInfo info;
  std::vector<Part> parts;
};

// Writes that belong together, stored in one transaction by SessionStore::write (a session,
// then messages, then parts, each an insert or replace).
struct StoreChanges {
  std::optional<SessionInfo> session;
  std::vector<MessageInfo> messages;
  std::vector<Part> parts;
  bool empty() const { return !session && messages.empty() && parts.empty(); }
};

class SessionStore {
 public:
  // Opens `<data_dir>/switchboard.db`, creating the schema when needed.
  static Result<std::unique_ptr<SessionStore>> open(const std::filesystem::path& data_dir);
  // The same on a Database that others may share (the server's client credentials).
  static Result<std::unique_ptr<SessionStore>> open(std::shared_ptr<store::Database> db);
  static Result<std::unique_ptr<SessionStore>> open_memory();

  Result<void> put_session(const SessionInfo& s);  // insert or replace
  Result<std::optional<SessionInfo>> get_session(const std::string& id);
  Result<std::vector<SessionInfo>> list_sessions();    // most recently updated first
  Result<bool> delete_session(const std::string& id);  // with its messages and parts

  Result<void> put_message(const MessageInfo& m);
  Result<std::optional<MessageInfo>> get_message(const std::string& session_id,
                                                 const std::string& id);
  Result<std::vector<MessageWithParts>> list_messages(const std::string& session_id);

  Result<void> put_part(const Part& p);
  Result<void> write(const StoreChanges& changes);  // all or nothing
  // Several turns' changes in one transaction (all or nothing), in order.
  Result<void> write(std::span<const StoreChanges* const> batch);
  Result<std::vector<Part>> list_parts(const std::string& session_id,
                                       const std::string& message_id);

  // A session's todo list (the todowrite tool's) as the JSON text of its array; "" when it has
  // none. Deleted with the session.
  Result<std::string> get_todos(const std::string& session_id);
  Result<void> put_todos(const std::string& session_id, std::string_view todos_json);

  // After a crash: every assistant message that never completed gets an error and a completion
  // time, and its pending/running tool parts become errors. Returns the messages it changed.
  Result<std::vector<MessageInfo>> fail_interrupted_turns(const std::string& reason);

 private:
  explicit SessionStore(std::shared_ptr<store::Database> db) : db_(std::move(db)) {}
  Result<void> migrate();
  Result<void> put_session_locked(const SessionInfo& s);
  Result<void> put_message_locked(const MessageInfo& m);
  Result<void> put_part_locked(const Part& p);

  std::shared_ptr<store::Database> db_;
};

}  // namespace sb::session
