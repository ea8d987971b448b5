#include "session/store.hpp"

namespace sb::session {
namespace {

// Schema version 2 (PRAGMA user_version). Messages and parts are keyed by where they live
// (session, message) with one unique index each, and no separate index per id: every stored
// part or message then touches two b-tree pages, not four, which is most of the pages a turn
// writes to the WAL.
constexpr int kSchemaVersion = 2;
constexpr std::string_view kSchema = R"sql(
CREATE TABLE IF NOT EXISTS session (
  id TEXT PRIMARY KEY,
  updated INTEGER NOT NULL,
  data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS message (
  session_id TEXT NOT NULL REFERENCES session(id) ON DELETE CASCADE,
  id TEXT NOT NULL,
  completed INTEGER NOT NULL DEFAULT 1,
  data TEXT NOT NULL,
  UNIQUE(session_id, id)
);
CREATE INDEX IF NOT EXISTS message_open ON message(completed) WHERE completed = 0;
CREATE TABLE IF NOT EXISTS part (
  session_id TEXT NOT NULL,
  message_id TEXT NOT NULL,
  id TEXT NOT NULL,
  data TEXT NOT NULL,
  UNIQUE(session_id, message_id, id),
  FOREIGN KEY(session_id, message_id) REFERENCES message(session_id, id) ON DELETE CASCADE
);
CREATE TABLE IF NOT EXISTS todo (
  session_id TEXT PRIMARY KEY REFERENCES session(id) ON DELETE CASCADE,
  data TEXT NOT NULL
);
)sql";

// Version 1 (the first release) to 2: the rows move to tables of the new shape.
constexpr std::string_view kMigrateFrom1 = R"sql(
DROP INDEX IF EXISTS message_by_session;
DROP INDEX IF EXISTS message_open;
DROP INDEX IF EXISTS part_by_message;
DROP INDEX IF EXISTS part_by_session;
ALTER TABLE part RENAME TO part_v1;
ALTER TABLE message RENAME TO message_v1;
)sql";
constexpr std::string_view kCopyFrom1 = R"sql(
INSERT INTO message(session_id, id, completed, data)
  SELECT session_id, id, completed, data FROM message_v1;
INSERT INTO part(session_id, message_id, id, data)
  SELECT session_id, message_id, id, data FROM part_v1;
DROP TABLE part_v1;
DROP TABLE message_v1;
)sql";

// A stored row's JSON text. Its objects are built in a stack buffer and dropped once serialized:
// about 40 heap allocations a row fewer (a turn stores about a dozen rows). A row larger than the
// buffer (a long tool output) takes the rest from the heap.
template <class T>
std::string row_text(const T& item) {
  unsigned char buffer[8192];
  json::monotonic_resource scratch(buffer, sizeof buffer);
  return json::serialize(to_json(item, &scratch));
}

template <class T, class F>
Result<T> parse_row(const std::string& text, F from_json) {
  auto doc = parse_json(text);
  if (!doc || !doc->is_object())
    return make_error(ErrorCode::Internal, "corrupt row in the session store");
  return from_json(doc->get_object());
}

// Every row of a statement whose first column is a stored JSON document.
template <class T, class F>
Result<std::vector<T>> read_all(store::Statement& st, F from_json) {
  std::vector<T> out;
  for (;;) {
    auto row = st.step();
    if (!row) return row.error();
    if (!*row) return out;
    auto item = parse_row<T>(st.text(0), from_json);
    if (!item) return item.error();
    out.push_back(std::move(*item));
  }
}

}  // namespace

Result<std::unique_ptr<SessionStore>> SessionStore::open(const std::filesystem::path& data_dir) {
  auto db = store::Database::open(data_dir / "switchboard.db");
  if (!db) return db.error();
  return open(std::shared_ptr<store::Database>(std::move(*db)));
}

Result<std::unique_ptr<SessionStore>> SessionStore::open(std::shared_ptr<store::Database> db) {
  std::unique_ptr<SessionStore> s(new SessionStore(std::move(db)));
  std::lock_guard lock(s->db_->mutex());
  if (auto r = s->migrate(); !r) return r.error();
  return s;
}

Result<std::unique_ptr<SessionStore>> SessionStore::open_memory() {
  auto db = store::Database::open_memory();
  if (!db) return db.error();
  return open(std::shared_ptr<store::Database>(std::move(*db)));
}

namespace {
// The integer of a one-row query (0 when it has no row).
Result<std::int64_t> query_integer(store::Database& db, std::string_view sql) {
  auto st = db.prepare(sql);
  if (!st) return st.error();
  auto row = st->step();
  if (!row) return row.error();
  return *row ? st->integer(0) : 0;
}
}  // namespace

Result<void> SessionStore::migrate() {
  auto version = query_integer(*db_, "PRAGMA user_version");
  if (!version) return version.error();
  // Tables added within a version are created by their IF NOT EXISTS.
  if (*version == kSchemaVersion) return db_->exec(kSchema);
  if (*version > kSchemaVersion)
    return make_error(ErrorCode::Internal,
                      "the session store was written by a newer Switchboard (schema version " +
                          std::to_string(*version) + "; this one knows " +
                          std::to_string(kSchemaVersion) + ")");
  // Version 0 is a new database, or one of the first release, which had these tables without a
  // version: then `part` is keyed by its own id.
  auto from_v1 = query_integer(*db_,
                               "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND "
                               "name = 'part' AND sql LIKE '%id TEXT PRIMARY KEY%'");
  if (!from_v1) return from_v1.error();
  store::Database::Transaction tx(*db_);
  if (!tx.begun()) return tx.begun().error();
  if (*from_v1)
    if (auto r = db_->exec(kMigrateFrom1); !r) return r.error();
  if (auto r = db_->exec(kSchema); !r) return r.error();
  if (*from_v1)
    if (auto r = db_->exec(kCopyFrom1); !r) return r.error();
  if (auto r = db_->exec("PRAGMA user_version = " + std::to_string(kSchemaVersion)); !r)
    return r.error();
  return tx.commit();
}

Result<void> SessionStore::put_session(const SessionInfo& s) {
  std::lock_guard lock(db_->mutex());
  return put_session_locked(s);
}

Result<void> SessionStore::put_session_locked(const SessionInfo& s) {
  auto st = db_->prepare(
      "INSERT INTO session(id, updated, data) VALUES(?1, ?2, ?3) "
      "ON CONFLICT(id) DO UPDATE SET updated = excluded.updated, data = excluded.data");
  if (!st) return st.error();
  st->bind(1, s.id).bind(2, s.updated).bind(3, row_text(s));
  return st->run();
}

Result<std::optional<SessionInfo>> SessionStore::get_session(const std::string& id) {
  std::lock_guard lock(db_->mutex());
  auto st = db_->prepare("SELECT data FROM session WHERE id = ?1");
  if (!st) return st.error();
  st->bind(1, id);
  auto row = st->step();
  if (!row) return row.error();
  if (!*row) return std::optional<SessionInfo>{};
  auto s = parse_row<SessionInfo>(st->text(0), session_from_json);
  if (!s) return s.error();
  return std::optional<SessionInfo>{std::move(*s)};
}

Result<std::vector<SessionInfo>> SessionStore::list_sessions() {
  std::lock_guard lock(db_->mutex());
  auto st = db_->prepare("SELECT data FROM session ORDER BY updated DESC, id DESC");
  if (!st) return st.error();
  return read_all<SessionInfo>(*st, session_from_json);
}

Result<bool> SessionStore::delete_session(const std::string& id) {
  std::lock_guard lock(db_->mutex());
  store::Database::Transaction tx(*db_);
  if (!tx.begun()) return tx.begun().error();
  for (auto sql :
       {"DELETE FROM part WHERE session_id = ?1", "DELETE FROM message WHERE session_id = ?1",
        "DELETE FROM todo WHERE session_id = ?1"}) {
    auto st = db_->prepare(sql);
    if (!st) return st.error();
    st->bind(1, id);
    if (auto r = st->run(); !r) return r.error();
  }
  auto st = db_->prepare("DELETE FROM session WHERE id = ?1");
  if (!st) return st.error();
  st->bind(1, id);
  if (auto r = st->run(); !r) return r.error();
  bool deleted = db_->changes() > 0;
  if (auto r = tx.commit(); !r) return r.error();
  return deleted;
}

Result<void> SessionStore::put_message(const MessageInfo& m) {
  std::lock_guard lock(db_->mutex());
  return put_message_locked(m);
}

Result<void> SessionStore::put_message_locked(const MessageInfo& m) {
  auto st = db_->prepare(
      "INSERT INTO message(id, session_id, completed, data) VALUES(?1, ?2, ?3, ?4) "
      "ON CONFLICT(session_id, id) DO UPDATE SET completed = excluded.completed, "
      "data = excluded.data");
  if (!st) return st.error();
  bool open = m.role == MessageInfo::Role::Assistant && !m.completed;
  st->bind(1, m.id).bind(2, m.session_id).bind(3, std::int64_t{open ? 0 : 1});
  st->bind(4, row_text(m));
  return st->run();
}

Result<std::optional<MessageInfo>> SessionStore::get_message(const std::string& session_id,
                                                             const std::string& id) {
  std::lock_guard lock(db_->mutex());
  auto st = db_->prepare("SELECT data FROM message WHERE session_id = ?1 AND id = ?2");
  if (!st) return st.error();
  st->bind(1, session_id).bind(2, id);
  auto row = st->step();
  if (!row) return row.error();
  if (!*row) return std::optional<MessageInfo>{};
  auto m = parse_row<MessageInfo>(st->text(0), message_from_json);
  if (!m) return m.error();
  return std::optional<MessageInfo>{std::move(*m)};
}

Result<std::vector<MessageWithParts>> SessionStore::list_messages(const std::string& session_id) {
  std::lock_guard lock(db_->mutex());
  auto st = db_->prepare("SELECT data FROM message WHERE session_id = ?1 ORDER BY id");
  if (!st) return st.error();
  st->bind(1, session_id);
  auto infos = read_all<MessageInfo>(*st, message_from_json);
  if (!infos) return infos.error();
  std::vector<MessageWithParts> out;
  out.reserve(infos->size());
  for (auto& info : *infos)
    out.push_back({std::move(info), {}});
  // Every part of the session in one query, in message order, merged into `out` (also sorted
  // by message id); a part whose message is gone is skipped.
  auto parts = db_->prepare(
      "SELECT message_id, data FROM part WHERE session_id = ?1 ORDER BY message_id, id");
  if (!parts) return parts.error();
  parts->bind(1, session_id);
  auto m = out.begin();
  for (;;) {
    auto row = parts->step();
    if (!row) return row.error();
    if (!*row) break;
    auto message_id = parts->text(0);
    while (m != out.end() && m->info.id < message_id)
      ++m;
    if (m == out.end()) break;
    if (m->info.id != message_id) continue;
    auto part = parse_row<Part>(parts->text(1), part_from_json);
    if (!part) return part.error();
    m->parts.push_back(std::move(*part));
  }
  return out;
}

Result<void> SessionStore::put_part(const Part& p) {
  std::lock_guard lock(db_->mutex());
  return put_part_locked(p);
}

Result<void> SessionStore::write(const StoreChanges& changes) {
  const StoreChanges* one = &changes;
  return write(std::span<const StoreChanges* const>(&one, 1));
}

Result<void> SessionStore::write(std::span<const StoreChanges* const> batch) {
  bool any = false;
  for (const StoreChanges* changes : batch)
    any = any || !changes->empty();
  if (!any) return {};
  std::lock_guard lock(db_->mutex());
  store::Database::Transaction tx(*db_);
  if (!tx.begun()) return tx.begun().error();
  for (const StoreChanges* changes : batch) {
    if (changes->session)
      if (auto r = put_session_locked(*changes->session); !r) return r.error();
    for (const auto& m : changes->messages)
      if (auto r = put_message_locked(m); !r) return r.error();
    for (const auto& p : changes->parts)
      if (auto r = put_part_locked(p); !r) return r.error();
  }
  return tx.commit();
}

Result<void> SessionStore::put_part_locked(const Part& p) {
  auto st = db_->prepare(
      "INSERT INTO part(id, message_id, session_id, data) VALUES(?1, ?2, ?3, ?4) "
      "ON CONFLICT(session_id, message_id, id) DO UPDATE SET data = excluded.data");
  if (!st) return st.error();
  st->bind(1, p.id).bind(2, p.message_id).bind(3, p.session_id);
  st->bind(4, row_text(p));
  return st->run();
}

Result<std::vector<Part>> SessionStore::list_parts(const std::string& session_id,
                                                   const std::string& message_id) {
  std::lock_guard lock(db_->mutex());
  auto st =
      db_->prepare("SELECT data FROM part WHERE session_id = ?1 AND message_id = ?2 ORDER BY id");
  if (!st) return st.error();
  st->bind(1, session_id).bind(2, message_id);
  return read_all<Part>(*st, part_from_json);
}

Result<std::string> SessionStore::get_todos(const std::string& session_id) {
  std::lock_guard lock(db_->mutex());
  auto st = db_->prepare("SELECT data FROM todo WHERE session_id = ?1");
  if (!st) return st.error();
  st->bind(1, session_id);
  auto row = st->step();
  if (!row) return row.error();
  return *row ? st->text(0) : std::string();
}

Result<void> SessionStore::put_todos(const std::string& session_id, std::string_view todos_json) {
  std::lock_guard lock(db_->mutex());
  auto st = db_->prepare(
      "INSERT INTO todo(session_id, data) VALUES(?1, ?2) "
      "ON CONFLICT(session_id) DO UPDATE SET data = excluded.data");
  if (!st) return st.error();
  st->bind(1, session_id).bind(2, todos_json);
  return st->run();
}

Result<std::vector<MessageInfo>> SessionStore::fail_interrupted_turns(const std::string& reason) {
  std::vector<MessageInfo> open;
  {
    std::lock_guard lock(db_->mutex());
    auto st = db_->prepare("SELECT data FROM message WHERE completed = 0 ORDER BY id");
    if (!st) return st.error();
    auto rows = read_all<MessageInfo>(*st, message_from_json);
    if (!rows) return rows.error();
    open = std::move(*rows);
  }
  auto now = now_ms();
  for (auto& m : open) {
    auto parts = list_parts(m.session_id, m.id);
    if (!parts) return parts.error();
    for (auto& p : *parts) {
      if (p.type != Part::Type::Tool) continue;
      if (p.state.status != ToolState::Status::Pending &&
          p.state.status != ToolState::Status::Running)
        continue;
      p.state.status = ToolState::Status::Error;
      p.state.error = reason;
      if (!p.state.start) p.state.start = now;
      p.state.end = now;
      if (auto r = put_part(p); !r) return r.error();
    }
    m.completed = now;
    m.error = NamedError{"MessageAbortedError", reason, {}};
    if (auto r = put_message(m); !r) return r.error();
  }
  return open;
}

}  // namespace sb::session
