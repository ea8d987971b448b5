// SessionStore's tables of file changes (file_change: what a tool call changed, before and after)
// and of what a session's revert holds for unrevert (file_held). Declared in store.hpp.
#include "session/store.hpp"

namespace sb::session {

namespace {

void bind_content(store::Statement& st, int index, const std::optional<std::string>& content) {
  if (content)
    st.bind_blob(index, *content);
  else
    st.bind_null(index);
}

std::optional<std::string> content_at(const store::Statement& st, int column) {
  if (st.is_null(column)) return std::nullopt;
  return st.text(column);
}

// A file's path: any bytes but NUL on Linux, not always UTF-8, which PostgreSQL's TEXT refuses
// (its `path` columns are bytea); SQLite keeps what is bound as text.
void bind_path(store::Database& db, store::Statement& st, int index, const std::string& path) {
  if (db.engine() == store::Engine::Postgres)
    st.bind_blob(index, path);
  else
    st.bind(index, path);
}

Result<void> run_for_session(store::Database& db, std::string_view sql,
                             const std::string& session_id) {
  auto st = db.prepare(sql);
  if (!st) return st.error();
  st->bind(1, session_id);
  return st->run();
}

}  // namespace

Result<void> SessionStore::put_file_change_locked(const FileChangeRow& f) {
  auto st = db_->prepare(
      "INSERT INTO file_change(session_id, message_id, part_id, path, old_content, new_content) "
      "VALUES(?1, ?2, ?3, ?4, ?5, ?6)");
  if (!st) return st.error();
  st->bind(1, f.session_id).bind(2, f.message_id).bind(3, f.part_id);
  bind_path(*db_, *st, 4, f.path);
  bind_content(*st, 5, f.before);
  bind_content(*st, 6, f.after);
  return st->run();
}

Result<std::vector<FileChangeRow>> SessionStore::file_changes(const std::string& session_id) {
  std::lock_guard lock(db_->mutex());
  auto st = db_->prepare(
      "SELECT message_id, part_id, path, old_content, new_content FROM file_change "
      "WHERE session_id = ?1 ORDER BY seq");
  if (!st) return st.error();
  st->bind(1, session_id);
  std::vector<FileChangeRow> out;
  for (;;) {
    auto row = st->step();
    if (!row) return row.error();
    if (!*row) return out;
    out.push_back(FileChangeRow{session_id, st->text(0), st->text(1), st->text(2),
                                content_at(*st, 3), content_at(*st, 4)});
  }
}

Result<std::vector<HeldFile>> SessionStore::held_files(const std::string& session_id) {
  std::lock_guard lock(db_->mutex());
  auto st = db_->prepare("SELECT path, content FROM file_held WHERE session_id = ?1 ORDER BY path");
  if (!st) return st.error();
  st->bind(1, session_id);
  std::vector<HeldFile> out;
  for (;;) {
    auto row = st->step();
    if (!row) return row.error();
    if (!*row) return out;
    out.push_back(HeldFile{st->text(0), content_at(*st, 1)});
  }
}

Result<void> SessionStore::put_revert(const SessionInfo& s, const std::vector<HeldFile>& held) {
  std::lock_guard lock(db_->mutex());
  store::Database::Transaction tx(*db_);
  if (!tx.begun()) return tx.begun().error();
  if (auto r = put_session_locked(s); !r) return r.error();
  if (auto r = run_for_session(*db_, "DELETE FROM file_held WHERE session_id = ?1", s.id); !r)
    return r.error();
  for (const auto& h : held) {
    auto st = db_->prepare("INSERT INTO file_held(session_id, path, content) VALUES(?1, ?2, ?3)");
    if (!st) return st.error();
    st->bind(1, s.id);
    bind_path(*db_, *st, 2, h.path);
    bind_content(*st, 3, h.content);
    if (auto r = st->run(); !r) return r.error();
  }
  if (auto r = tx.commit(); !r) return r.error();
  remember_session(s);
  return {};
}

Result<void> SessionStore::commit_revert(const SessionInfo& s,
                                         const std::vector<std::string>& removed,
                                         const MessageWithParts* trimmed,
                                         const std::string& message_id,
                                         const std::string& part_id) {
  std::lock_guard lock(db_->mutex());
  store::Database::Transaction tx(*db_);
  if (!tx.begun()) return tx.begun().error();
  for (const auto& id : removed) {
    auto st = db_->prepare("DELETE FROM message WHERE session_id = ?1 AND id = ?2");
    if (!st) return st.error();
    st->bind(1, s.id).bind(2, id);
    if (auto r = st->run(); !r) return r.error();
  }
  if (trimmed)
    if (auto r = put_message_locked(MessageRow::of(*trimmed)); !r) return r.error();
  // From the point on: a later message, or the point's message from its part on (every part of
  // it when the point is the whole message: part_id >= '' holds for all).
  auto st = db_->prepare(
      "DELETE FROM file_change WHERE session_id = ?1 AND "
      "(message_id > ?2 OR (message_id = ?2 AND part_id >= ?3))");
  if (!st) return st.error();
  st->bind(1, s.id).bind(2, message_id).bind(3, part_id);
  if (auto r = st->run(); !r) return r.error();
  if (auto r = run_for_session(*db_, "DELETE FROM file_held WHERE session_id = ?1", s.id); !r)
    return r.error();
  if (auto r = put_session_locked(s); !r) return r.error();
  if (auto r = tx.commit(); !r) return r.error();
  remember_session(s);
  return {};
}

}  // namespace sb::session
