#include "session/store.hpp"

#include <limits>
#include <optional>

#include "clienttool/wire.hpp"
#include "store/sqlite.hpp"
#include "util/log.hpp"

namespace sb::session {
namespace {

// Schema version 3 (PRAGMA user_version). Messages are keyed by where they live (session) with
// one unique index, and carry their parts: storing a step is one row and two b-tree pages, not a
// row and an index entry per part, which was most of what a turn wrote to the WAL.
constexpr int kSchemaVersion = 3;
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
  parts TEXT NOT NULL DEFAULT '[]',
  UNIQUE(session_id, id)
);
CREATE INDEX IF NOT EXISTS message_open ON message(completed) WHERE completed = 0;
CREATE TABLE IF NOT EXISTS todo (
  session_id TEXT PRIMARY KEY REFERENCES session(id) ON DELETE CASCADE,
  data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS chat (
  id TEXT PRIMARY KEY,
  session_id TEXT NOT NULL REFERENCES session(id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS chat_by_session ON chat(session_id);
-- Added within version 3 (store_files.cpp): what tools changed in files, what a revert holds.
CREATE TABLE IF NOT EXISTS file_change (
  seq INTEGER PRIMARY KEY,
  session_id TEXT NOT NULL REFERENCES session(id) ON DELETE CASCADE,
  message_id TEXT NOT NULL,
  part_id TEXT NOT NULL,
  path TEXT NOT NULL,
  old_content BLOB,
  new_content BLOB
);
CREATE INDEX IF NOT EXISTS file_change_by_session ON file_change(session_id, seq);
CREATE TABLE IF NOT EXISTS file_held (
  session_id TEXT NOT NULL REFERENCES session(id) ON DELETE CASCADE,
  path TEXT NOT NULL,
  content BLOB,
  PRIMARY KEY(session_id, path)
);
-- Added within version 3: the client calls that wait for their clients, so that a restart keeps
-- them (design.md decision 5), and permission asks; `data` is the wait (session::Wait) as JSON.
CREATE TABLE IF NOT EXISTS waiting_call (
  request_id TEXT PRIMARY KEY,
  session_id TEXT NOT NULL REFERENCES session(id) ON DELETE CASCADE,
  message_id TEXT NOT NULL,
  data TEXT NOT NULL
);
)sql";

// The same tables on PostgreSQL, whose schema version is kept in switchboard_schema. Ids compare
// bytewise (COLLATE "C"), as SQLite's do: ORDER BY id is creation order only byte by byte.
// Integers that hold milliseconds are BIGINT; file contents and paths are bytea (they need not be
// text, which PostgreSQL holds to UTF-8).
constexpr std::string_view kPostgresSchema = R"sql(
CREATE TABLE IF NOT EXISTS session (
  id TEXT COLLATE "C" PRIMARY KEY,
  updated BIGINT NOT NULL,
  data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS message (
  session_id TEXT COLLATE "C" NOT NULL REFERENCES session(id) ON DELETE CASCADE,
  id TEXT COLLATE "C" NOT NULL,
  completed INTEGER NOT NULL DEFAULT 1,
  data TEXT NOT NULL,
  parts TEXT NOT NULL DEFAULT '[]',
  PRIMARY KEY(session_id, id)
);
CREATE INDEX IF NOT EXISTS message_open ON message(completed) WHERE completed = 0;
CREATE TABLE IF NOT EXISTS todo (
  session_id TEXT COLLATE "C" PRIMARY KEY REFERENCES session(id) ON DELETE CASCADE,
  data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS chat (
  id TEXT COLLATE "C" PRIMARY KEY,
  session_id TEXT COLLATE "C" NOT NULL REFERENCES session(id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS chat_by_session ON chat(session_id);
CREATE TABLE IF NOT EXISTS file_change (
  seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  session_id TEXT COLLATE "C" NOT NULL REFERENCES session(id) ON DELETE CASCADE,
  message_id TEXT COLLATE "C" NOT NULL,
  part_id TEXT COLLATE "C" NOT NULL,
  path BYTEA NOT NULL,
  old_content BYTEA,
  new_content BYTEA
);
CREATE INDEX IF NOT EXISTS file_change_by_session ON file_change(session_id, seq);
CREATE TABLE IF NOT EXISTS file_held (
  session_id TEXT COLLATE "C" NOT NULL REFERENCES session(id) ON DELETE CASCADE,
  path BYTEA NOT NULL,
  content BYTEA,
  PRIMARY KEY(session_id, path)
);
CREATE TABLE IF NOT EXISTS waiting_call (
  request_id TEXT COLLATE "C" PRIMARY KEY,
  session_id TEXT COLLATE "C" NOT NULL REFERENCES session(id) ON DELETE CASCADE,
  message_id TEXT COLLATE "C" NOT NULL,
  data TEXT NOT NULL
);
)sql";

// Version 1 (the first release, every row keyed by its own id): the old tables are renamed, the
// current ones created, the messages copied and the parts embedded (embed_parts), the old dropped.
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
)sql";
constexpr std::string_view kDropFrom1 = R"sql(
DROP TABLE part_v1;
DROP TABLE message_v1;
)sql";
// Version 2 (a table of parts keyed by session, message and id): the message rows gain their
// parts, and the part table goes.
constexpr std::string_view kMigrateFrom2 =
    "ALTER TABLE message ADD COLUMN parts TEXT NOT NULL DEFAULT '[]'";

// Rows hold values parsed elsewhere with their own depth limits (tool inputs: 128), a few levels
// deeper in the row: read with a limit wide enough for all of them.
constexpr std::size_t kRowDepth = 256;

template <class T, class F>
Result<T> parse_row(const std::string& text, F from_json) {
  auto doc = parse_json(text, kRowDepth);
  if (!doc || !doc->is_object())
    return make_error(ErrorCode::Internal, "corrupt row in the session store");
  return from_json(doc->get_object());
}

// The message of a row whose first two columns are its data and its parts.
Result<MessageWithParts> message_row(store::Statement& st) {
  auto info = parse_row<MessageInfo>(st.text(0), message_from_json);
  if (!info) return info.error();
  MessageWithParts m{std::move(*info), {}};
  auto parts = parse_json(st.text(1), kRowDepth);
  if (!parts || !parts->is_array())
    return make_error(ErrorCode::Internal, "corrupt parts of message " + m.info.id);
  m.parts.reserve(parts->get_array().size());
  for (const auto& p : parts->get_array()) {
    if (!p.is_object()) return make_error(ErrorCode::Internal, "corrupt part in the session store");
    auto part = part_from_json(p.get_object());
    if (!part) return part.error();
    m.parts.push_back(std::move(*part));
  }
  return m;
}

// Every row of a statement whose first columns are a stored JSON document (for a message: and
// its parts).
template <class T, class F>
Result<std::vector<T>> read_all(store::Statement& st, F from_row) {
  std::vector<T> out;
  for (;;) {
    auto row = st.step();
    if (!row) return row.error();
    if (!*row) return out;
    auto item = from_row(st);
    if (!item) return item.error();
    out.push_back(std::move(*item));
  }
}

Result<SessionInfo> session_row(store::Statement& st) {
  return parse_row<SessionInfo>(st.text(0), session_from_json);
}

}  // namespace

Result<std::unique_ptr<SessionStore>> SessionStore::open(const std::filesystem::path& data_dir) {
  auto db = store::SqliteDatabase::open(data_dir / "switchboard.db");
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
  auto db = store::SqliteDatabase::open_memory();
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

Error newer_schema(std::int64_t version) {
  return make_error(ErrorCode::Internal,
                    "the session store was written by a newer Switchboard (schema version " +
                        std::to_string(version) + "; this one knows " +
                        std::to_string(kSchemaVersion) + ")");
}
}  // namespace

Result<void> SessionStore::migrate() {
  if (db_->engine() == store::Engine::Postgres) return migrate_postgres();
  auto version = query_integer(*db_, "PRAGMA user_version");
  if (!version) return version.error();
  // Tables added within a version are created by their IF NOT EXISTS.
  if (*version == kSchemaVersion) return db_->exec(kSchema);
  if (*version > kSchemaVersion) return newer_schema(*version);
  // Version 0 is a new database, or one of the first release, which had these tables without a
  // version: then `part` is keyed by its own id.
  auto from_v1 = query_integer(*db_,
                               "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND "
                               "name = 'part' AND sql LIKE '%id TEXT PRIMARY KEY%'");
  if (!from_v1) return from_v1.error();
  store::Database::Transaction tx(*db_);
  if (!tx.begun()) return tx.begun().error();
  if (*version == 2) {
    if (auto r = db_->exec(kMigrateFrom2); !r) return r.error();
    if (auto r = embed_parts("part"); !r) return r.error();
    if (auto r = db_->exec("DROP TABLE part"); !r) return r.error();
  } else if (*from_v1) {
    if (auto r = db_->exec(kMigrateFrom1); !r) return r.error();
  }
  if (auto r = db_->exec(kSchema); !r) return r.error();
  if (*version != 2 && *from_v1) {
    if (auto r = db_->exec(kCopyFrom1); !r) return r.error();
    if (auto r = embed_parts("part_v1"); !r) return r.error();
    if (auto r = db_->exec(kDropFrom1); !r) return r.error();
  }
  if (auto r = db_->exec("PRAGMA user_version = " + std::to_string(kSchemaVersion)); !r)
    return r.error();
  return tx.commit();
}

Result<void> SessionStore::migrate_postgres() {
  // The nodes of a cluster share the store and may start at once: one migrates while the others
  // wait for its transaction.
  store::Database::Transaction tx(*db_);
  if (!tx.begun()) return tx.begun().error();
  if (auto r = db_->lock_until_commit("schema"); !r) return r;
  if (auto r =
          db_->exec("CREATE TABLE IF NOT EXISTS switchboard_schema (version INTEGER NOT NULL)");
      !r)
    return r;
  auto version = query_integer(*db_, "SELECT coalesce(max(version), 0) FROM switchboard_schema");
  if (!version) return version.error();
  if (*version > kSchemaVersion) return newer_schema(*version);
  if (auto r = db_->exec(kPostgresSchema); !r) return r;
  if (*version != kSchemaVersion) {
    if (auto r = db_->exec("DELETE FROM switchboard_schema"); !r) return r;
    auto st = db_->prepare("INSERT INTO switchboard_schema(version) VALUES(?1)");
    if (!st) return st.error();
    st->bind(1, std::int64_t{kSchemaVersion});
    if (auto r = st->run(); !r) return r;
  }
  return tx.commit();
}

Result<void> SessionStore::embed_parts(std::string_view part_table) {
  // The stored parts are JSON objects already: each message's are joined into its array as they
  // are, in id order.
  auto parts = db_->prepare("SELECT session_id, message_id, data FROM " + std::string(part_table) +
                            " ORDER BY session_id, message_id, id");
  if (!parts) return parts.error();
  auto update = db_->prepare("UPDATE message SET parts = ?3 WHERE session_id = ?1 AND id = ?2");
  if (!update) return update.error();
  std::string session_id, message_id, array;
  auto store_array = [&]() -> Result<void> {
    if (message_id.empty()) return {};
    array.push_back(']');
    update->reset();  // the last run's bindings go (a bind after a run would be refused)
    update->bind(1, session_id).bind(2, message_id).bind(3, array);
    return update->run();
  };
  for (;;) {
    auto row = parts->step();
    if (!row) return row.error();
    if (!*row) break;
    if (parts->text(0) != session_id || parts->text(1) != message_id) {
      if (auto r = store_array(); !r) return r.error();
      session_id = parts->text(0);
      message_id = parts->text(1);
      array = "[";
    } else {
      array.push_back(',');
    }
    array += parts->text(2);
  }
  return store_array();
}

namespace {
constexpr std::size_t kSessionsRemembered = 256;
}

void SessionStore::remember_session(const SessionInfo& s) {
  if (shared_) return;
  std::lock_guard cache(cache_mutex_);
  auto it = sessions_.find(s.id);
  if (it != sessions_.end()) {
    it->second = s;
    return;
  }
  // Any one goes when full: a miss costs one SELECT, and recently used sessions come back.
  if (sessions_.size() >= kSessionsRemembered) sessions_.erase(sessions_.begin());
  sessions_.emplace(s.id, s);
}

namespace {
std::string claim_name(const std::string& session_id) {
  return "session:" + session_id;
}

// A turn's write refused: its node was cut off from the store, and another node took over.
Error claim_lost(const std::string& session_id) {
  return make_error(ErrorCode::Conflict, "session " + session_id +
                                             ": this node no longer holds its claim (another node "
                                             "took its turn over)");
}
}  // namespace

Result<bool> SessionStore::claim(const std::string& session_id) {
  if (!shared_) return true;
  std::lock_guard lock(db_->mutex());
  return db_->try_lock(claim_name(session_id));
}

void SessionStore::release(const std::string& session_id) {
  if (!shared_) return;
  std::lock_guard lock(db_->mutex());
  db_->unlock(claim_name(session_id));
}

std::vector<std::string> SessionStore::lost_claims() {
  if (!shared_) return {};
  std::vector<std::string> out;
  {
    std::lock_guard lock(db_->mutex());
    out = db_->take_lost_locks();
  }
  std::erase_if(out, [](const std::string& name) { return !name.starts_with("session:"); });
  for (auto& name : out)
    name.erase(0, std::string_view("session:").size());
  return out;
}

Result<void> SessionStore::check_connection() {
  std::lock_guard lock(db_->mutex());
  return db_->run("SELECT 1");
}

Result<void> SessionStore::put_session(const SessionInfo& s) {
  std::lock_guard lock(db_->mutex());
  auto r = put_session_locked(s);
  if (r) remember_session(s);
  return r;
}

Result<void> SessionStore::put_session_locked(const SessionInfo& s) {
  auto st = db_->prepare(
      "INSERT INTO session(id, updated, data) VALUES(?1, ?2, ?3) "
      "ON CONFLICT(id) DO UPDATE SET updated = excluded.updated, data = excluded.data");
  if (!st) return st.error();
  st->bind(1, s.id).bind(2, s.updated).bind(3, json_text(s));
  return st->run();
}

Result<std::optional<SessionInfo>> SessionStore::get_session(const std::string& id) {
  {
    // Without the connection's mutex: a hit does not wait for a write in progress.
    std::lock_guard cache(cache_mutex_);
    if (auto it = sessions_.find(id); it != sessions_.end())
      return std::optional<SessionInfo>{it->second};
  }
  // The row is read and remembered under the connection's mutex, so a write of the session
  // cannot land between the two and be covered by the older row.
  std::lock_guard lock(db_->mutex());
  auto st = db_->prepare("SELECT data FROM session WHERE id = ?1");
  if (!st) return st.error();
  st->bind(1, id);
  auto row = st->step();
  if (!row) return row.error();
  if (!*row) return std::optional<SessionInfo>{};
  auto s = session_row(*st);
  if (!s) return s.error();
  if (s->unreadable_permission)
    log::warn("session ", s->id, ": its stored permission rules cannot be read (",
              s->unreadable_permission->why,
              "); it refuses turns and tool lists until it is deleted");
  remember_session(*s);
  return std::optional<SessionInfo>{std::move(*s)};
}

Result<std::vector<SessionInfo>> SessionStore::list_sessions() {
  std::lock_guard lock(db_->mutex());
  auto st = db_->prepare("SELECT data FROM session ORDER BY updated DESC, id DESC");
  if (!st) return st.error();
  return read_all<SessionInfo>(*st, session_row);
}

Result<bool> SessionStore::delete_session(const std::string& id) {
  std::lock_guard lock(db_->mutex());
  {
    std::lock_guard cache(cache_mutex_);
    sessions_.erase(id);  // read again if the delete fails
  }
  store::Database::Transaction tx(*db_);
  if (!tx.begun()) return tx.begun().error();
  for (auto sql :
       {"DELETE FROM message WHERE session_id = ?1", "DELETE FROM todo WHERE session_id = ?1",
        "DELETE FROM chat WHERE session_id = ?1", "DELETE FROM file_change WHERE session_id = ?1",
        "DELETE FROM file_held WHERE session_id = ?1",
        "DELETE FROM waiting_call WHERE session_id = ?1"}) {
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

MessageRow MessageRow::of(const MessageWithParts& m) {
  MessageRow row;
  row.session_id = m.info.session_id;
  row.id = m.info.id;
  row.open = m.info.role == MessageInfo::Role::Assistant && !m.info.completed;
  row.info = json_text(m.info);
  row.parts = json_text(m.parts);
  return row;
}

Result<void> SessionStore::put_message(const MessageWithParts& m) {
  std::lock_guard lock(db_->mutex());
  return put_message_locked(MessageRow::of(m));
}

Result<void> SessionStore::put_message_locked(const MessageRow& m) {
  auto st = db_->prepare(
      "INSERT INTO message(id, session_id, completed, data, parts) VALUES(?1, ?2, ?3, ?4, ?5) "
      "ON CONFLICT(session_id, id) DO UPDATE SET completed = excluded.completed, "
      "data = excluded.data, parts = excluded.parts");
  if (!st) return st.error();
  st->bind(1, m.id).bind(2, m.session_id).bind(3, std::int64_t{m.open ? 0 : 1});
  st->bind(4, m.info).bind(5, m.parts);
  return st->run();
}

Result<std::optional<MessageWithParts>> SessionStore::get_message(const std::string& session_id,
                                                                  const std::string& id) {
  std::lock_guard lock(db_->mutex());
  auto st = db_->prepare("SELECT data, parts FROM message WHERE session_id = ?1 AND id = ?2");
  if (!st) return st.error();
  st->bind(1, session_id).bind(2, id);
  auto row = st->step();
  if (!row) return row.error();
  if (!*row) return std::optional<MessageWithParts>{};
  auto m = message_row(*st);
  if (!m) return m.error();
  return std::optional<MessageWithParts>{std::move(*m)};
}

Result<std::string> SessionStore::messages_version(const std::string& session_id) {
  if (!shared_ || db_->engine() != store::Engine::Postgres) return std::string();
  std::lock_guard lock(db_->mutex());
  // xmin: the transaction that wrote the row version (an update makes a new one). Summed as
  // 60-bit hashes in numeric, which does not overflow.
  auto st = db_->prepare(
      "SELECT count(*)::text || ':' || coalesce(sum(('x' || left(md5(id || ':' || "
      "xmin::text), 15))::bit(60)::bigint), 0)::text FROM message WHERE session_id = ?1");
  if (!st) return st.error();
  st->bind(1, session_id);
  auto row = st->step();
  if (!row) return row.error();
  return *row ? st->text(0) : std::string();
}

Result<std::vector<MessageWithParts>> SessionStore::list_messages(const std::string& session_id,
                                                                  std::size_t limit) {
  std::lock_guard lock(db_->mutex());
  // The newest `limit` rows, put back in id order by the outer query.
  auto st = db_->prepare(
      "SELECT data, parts FROM (SELECT id, data, parts FROM message WHERE session_id = ?1 "
      "ORDER BY id DESC LIMIT ?2) AS newest ORDER BY id");
  if (!st) return st.error();
  st->bind(1, session_id)
      .bind(2, limit == 0 ? std::numeric_limits<std::int64_t>::max()
                          : static_cast<std::int64_t>(limit));
  return read_all<MessageWithParts>(*st, message_row);
}

Result<bool> SessionStore::delete_message(const std::string& session_id, const std::string& id) {
  std::lock_guard lock(db_->mutex());
  auto st = db_->prepare("DELETE FROM message WHERE session_id = ?1 AND id = ?2");
  if (!st) return st.error();
  st->bind(1, session_id).bind(2, id);
  if (auto r = st->run(); !r) return r.error();
  return db_->changes() > 0;
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
  // After BEGIN, which connects again if the connection had broken (and finds the claims it lost).
  if (shared_)
    for (const StoreChanges* changes : batch)
      if (!changes->claimed_session.empty() && !db_->holds(claim_name(changes->claimed_session)))
        return claim_lost(changes->claimed_session);
  for (const StoreChanges* changes : batch) {
    if (changes->session)
      if (auto r = put_session_locked(*changes->session); !r) return r.error();
    for (const auto& m : changes->messages)
      if (auto r = put_message_locked(m); !r) return r.error();
    for (const auto& f : changes->files)
      if (auto r = put_file_change_locked(f); !r) return r.error();
    for (const auto& w : changes->waits)
      if (auto r = put_wait_locked(w); !r) return r.error();
    for (const auto& id : changes->waits_ended)
      if (auto r = delete_wait_locked(id); !r) return r.error();
  }
  if (auto r = tx.commit(); !r) return r;
  for (const StoreChanges* changes : batch)
    if (changes->session) remember_session(*changes->session);
  return {};
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
  // A turn's todowrite: on a shared store only while this node holds the session's claim,
  // checked after BEGIN (which connects again and finds the claims lost meanwhile), as a turn's
  // other writes are.
  std::optional<store::Database::Transaction> tx;
  if (shared_) {
    tx.emplace(*db_);
    if (!tx->begun()) return tx->begun().error();
    if (!db_->holds(claim_name(session_id))) return claim_lost(session_id);
  }
  auto st = db_->prepare(
      "INSERT INTO todo(session_id, data) VALUES(?1, ?2) "
      "ON CONFLICT(session_id) DO UPDATE SET data = excluded.data");
  if (!st) return st.error();
  st->bind(1, session_id).bind(2, todos_json);
  if (auto r = st->run(); !r) return r;
  return tx ? tx->commit() : Result<void>{};
}

Result<void> SessionStore::put_wait_locked(const Wait& w) {
  auto st = db_->prepare(
      "INSERT INTO waiting_call(request_id, session_id, message_id, data) VALUES(?1, ?2, ?3, ?4) "
      "ON CONFLICT(request_id) DO UPDATE SET data = excluded.data");
  if (!st) return st.error();
  st->bind(1, w.id).bind(2, w.session_id).bind(3, w.message_id);
  st->bind(4, json::serialize(to_json(w)));
  return st->run();
}

Wait Wait::of(const clienttool::WaitingCall& call) {
  return Wait{call.request_id, call.session_id, call.message_id, call.call_id, call, {}};
}

Wait Wait::of(const permission::PermissionRequest& ask) {
  return Wait{ask.id, ask.session_id, ask.message_id.value_or(""), ask.call_id.value_or(""), {},
              ask};
}

json::object to_json(const Wait& wait) {
  if (wait.client) return json::object{{"client", clienttool::to_json(*wait.client)}};
  if (wait.ask) return json::object{{"ask", permission::to_json(*wait.ask)}};
  return json::object{{"question", json::object{{"id", wait.id},
                                                {"sessionID", wait.session_id},
                                                {"messageID", wait.message_id},
                                                {"callID", wait.call_id}}}};
}

Result<Wait> wait_from_json(const json::object& o) {
  if (const auto* client = object_at(o, "client")) {
    auto call = clienttool::waiting_call_from_json(*client);
    if (!call) return call.error();
    return Wait::of(*call);
  }
  if (const auto* ask = object_at(o, "ask")) {
    auto request = permission::permission_request_from_json(*ask);
    if (!request) return request.error();
    if (!request->message_id || !request->call_id)
      return make_error(ErrorCode::InvalidRequest, "a stored ask names no tool call");
    return Wait::of(*request);
  }
  if (const auto* question = object_at(o, "question")) {
    Wait wait;
    for (auto [key, field] : {std::pair{"id", &wait.id},
                              {"sessionID", &wait.session_id},
                              {"messageID", &wait.message_id},
                              {"callID", &wait.call_id}}) {
      auto text = require_string(*question, key, "question");
      if (!text) return text.error();
      *field = std::move(*text);
    }
    return wait;
  }
  return make_error(ErrorCode::InvalidRequest,
                    "a stored wait is not a client call, an ask or a question");
}

Result<void> SessionStore::delete_wait_locked(const std::string& request_id) {
  auto st = db_->prepare("DELETE FROM waiting_call WHERE request_id = ?1");
  if (!st) return st.error();
  st->bind(1, request_id);
  return st->run();
}

Result<std::vector<Wait>> SessionStore::waits() {
  std::lock_guard lock(db_->mutex());
  auto st = db_->prepare("SELECT data FROM waiting_call ORDER BY request_id");
  if (!st) return st.error();
  std::vector<Wait> out;
  for (;;) {
    auto row = st->step();
    if (!row) return row.error();
    if (!*row) return out;
    // One that does not read back is left out: its call then fails as interrupted.
    auto doc = parse_json(st->text(0), kRowDepth);
    auto wait = doc && doc->is_object()
                    ? wait_from_json(doc->get_object())
                    : Result<Wait>(make_error(ErrorCode::Internal, "not a JSON object"));
    if (wait)
      out.push_back(std::move(*wait));
    else
      log::warn("a stored wait does not read back (", wait.error().message, ")");
  }
}

Result<std::vector<MessageWithParts>> SessionStore::open_messages() {
  std::lock_guard lock(db_->mutex());
  auto st = db_->prepare("SELECT data, parts FROM message WHERE completed = 0 ORDER BY id");
  if (!st) return st.error();
  return read_all<MessageWithParts>(*st, message_row);
}

Result<std::vector<MessageInfo>> SessionStore::fail_interrupted_turns(
    const std::string& reason, const std::set<std::string>& keep,
    const std::set<std::string>& keep_waits, const std::optional<std::set<std::string>>& sessions) {
  auto open = open_messages();
  if (!open) return open.error();
  auto stored = waits();
  if (!stored) return stored.error();
  std::lock_guard lock(db_->mutex());
  store::Database::Transaction tx(*db_);
  if (!tx.begun()) return tx.begun().error();
  auto now = now_ms();
  std::vector<MessageInfo> failed;
  auto theirs = [&](const std::string& session_id) {
    return sessions && !sessions->count(session_id);
  };
  for (auto& m : *open) {
    if (keep.count(m.info.id) || theirs(m.info.session_id)) continue;
    for (auto& p : m.parts) {
      if (p.type != Part::Type::Tool) continue;
      if (p.state.status != ToolState::Status::Pending &&
          p.state.status != ToolState::Status::Running)
        continue;
      p.state.status = ToolState::Status::Error;
      p.state.error = reason;
      if (!p.state.start) p.state.start = now;
      p.state.end = now;
    }
    m.info.completed = now;
    m.info.error = NamedError{"MessageAbortedError", reason, {}};
    if (auto r = put_message_locked(MessageRow::of(m)); !r) return r.error();
    failed.push_back(std::move(m.info));
  }
  // The waits of the turns that ended (and any left by a turn that ended without them).
  for (const auto& w : *stored)
    if (!keep_waits.count(w.id) && !theirs(w.session_id))
      if (auto r = delete_wait_locked(w.id); !r) return r.error();
  if (auto r = tx.commit(); !r) return r.error();
  return failed;
}

Result<std::size_t> SessionStore::delete_messages_after(const std::string& session_id,
                                                        const std::string& message_id) {
  std::lock_guard lock(db_->mutex());
  auto st = db_->prepare("DELETE FROM message WHERE session_id = ?1 AND id > ?2");
  if (!st) return st.error();
  st->bind(1, session_id).bind(2, message_id);
  if (auto r = st->run(); !r) return r.error();
  return static_cast<std::size_t>(db_->changes());
}

Result<std::optional<std::string>> SessionStore::get_chat(const std::string& chat_id) {
  std::lock_guard lock(db_->mutex());
  auto st = db_->prepare("SELECT session_id FROM chat WHERE id = ?1");
  if (!st) return st.error();
  st->bind(1, chat_id);
  auto row = st->step();
  if (!row) return row.error();
  if (!*row) return std::optional<std::string>{};
  return std::optional<std::string>{std::string(st->text(0))};
}

Result<void> SessionStore::put_chat(const std::string& chat_id, const std::string& session_id) {
  std::lock_guard lock(db_->mutex());
  auto st = db_->prepare(
      "INSERT INTO chat(id, session_id) VALUES(?1, ?2) "
      "ON CONFLICT(id) DO UPDATE SET session_id = excluded.session_id");
  if (!st) return st.error();
  st->bind(1, chat_id).bind(2, session_id);
  return st->run();
}

}  // namespace sb::session
