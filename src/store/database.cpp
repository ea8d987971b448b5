#include "store/database.hpp"

namespace sb::store {
namespace {
Error sqlite_error(sqlite3* db, std::string_view what) {
  return make_error(ErrorCode::Internal,
                    std::string("sqlite: ") + std::string(what) + ": " + sqlite3_errmsg(db));
}

}  // namespace

Statement::Statement(Statement&& other) noexcept
    : db_(other.db_),
      stmt_(std::exchange(other.stmt_, nullptr)),
      in_use_(std::exchange(other.in_use_, nullptr)) {}

Statement::~Statement() {
  if (!stmt_) return;
  if (!in_use_) {
    sqlite3_finalize(stmt_);
    return;
  }
  // Back to the cache: a reset ends any read still open (and its lock), and the cleared
  // bindings release the text this run bound.
  reset();
  *in_use_ = false;
}

Statement& Statement::bind(int index, std::string_view text) {
  sqlite3_bind_text(stmt_, index, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
  return *this;
}

Statement& Statement::bind(int index, std::int64_t value) {
  sqlite3_bind_int64(stmt_, index, value);
  return *this;
}

Statement& Statement::bind_null(int index) {
  sqlite3_bind_null(stmt_, index);
  return *this;
}

Result<bool> Statement::step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return sqlite_error(db_, "step");
}

Result<void> Statement::run() {
  for (;;) {
    auto r = step();
    if (!r) return r.error();
    if (!*r) return {};
  }
}

void Statement::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

std::string Statement::text(int column) const {
  auto p = sqlite3_column_text(stmt_, column);
  int n = sqlite3_column_bytes(stmt_, column);
  return p ? std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(n))
           : std::string();
}

std::int64_t Statement::integer(int column) const {
  return sqlite3_column_int64(stmt_, column);
}

bool Statement::is_null(int column) const {
  return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}

namespace {
// Before SQLite's first use in the process (later it is refused, and changes nothing): the
// statistics behind sqlite3_memory_used(), which nothing here reads, lock a global mutex on each
// allocation.
void configure_sqlite_once() {
  static const bool configured = [] {
    sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
    return true;
  }();
  (void)configured;
}
}  // namespace

Result<std::unique_ptr<Database>> Database::open(const std::filesystem::path& path) {
  configure_sqlite_once();
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  if (ec)
    return make_error(ErrorCode::Internal,
                      "cannot create " + path.parent_path().string() + ": " + ec.message());
  sqlite3* raw = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &raw,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = raw ? sqlite3_errmsg(raw) : "out of memory";
    if (raw) sqlite3_close(raw);
    return make_error(ErrorCode::Internal, "cannot open " + path.string() + ": " + msg);
  }
  std::unique_ptr<Database> db(new Database(raw));
  // The locking mode first: a WAL that an exclusive connection opens keeps its index in this
  // process's memory (no -shm mapping), and no statement takes or drops a file lock. The lock is
  // also what keeps a second server (or the sqlite3 shell) off a data directory in use. The first
  // statements take it, at once or not at all (no busy timeout: another process holding the
  // file does not let go by waiting).
  for (auto sql :
       {"PRAGMA locking_mode=EXCLUSIVE", "PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL",
        "PRAGMA foreign_keys=ON", "BEGIN IMMEDIATE", "COMMIT"})
    if (auto r = db->exec(sql); !r) {
      if (sqlite3_errcode(raw) == SQLITE_BUSY || sqlite3_errcode(raw) == SQLITE_LOCKED)
        return make_error(ErrorCode::Conflict, path.string() + " is in use by another process");
      return r.error();
    }
  return db;
}

Result<std::unique_ptr<Database>> Database::open_memory() {
  configure_sqlite_once();
  sqlite3* raw = nullptr;
  if (sqlite3_open_v2(":memory:", &raw,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                      nullptr) != SQLITE_OK) {
    if (raw) sqlite3_close(raw);
    return make_error(ErrorCode::Internal, "cannot open an in-memory database");
  }
  std::unique_ptr<Database> db(new Database(raw));
  if (auto r = db->exec("PRAGMA foreign_keys=ON"); !r) return r.error();
  return db;
}

Database::~Database() {
  for (auto& [sql, cached] : statements_)
    sqlite3_finalize(cached.stmt);
  sqlite3_close(db_);
}

Result<void> Database::exec(std::string_view sql) {
  char* err = nullptr;
  std::string owned(sql);
  if (sqlite3_exec(db_, owned.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return make_error(ErrorCode::Internal, "sqlite: " + msg);
  }
  return {};
}

Result<Statement> Database::prepare(std::string_view sql) {
  auto it = statements_.find(sql);
  if (it != statements_.end() && !it->second.in_use) {
    it->second.in_use = true;
    return Statement(db_, it->second.stmt, &it->second.in_use);
  }
  bool keep = it == statements_.end();
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                         keep ? SQLITE_PREPARE_PERSISTENT : 0, &stmt, nullptr) != SQLITE_OK)
    return sqlite_error(db_, "prepare");
  if (!keep) return Statement(db_, stmt);
  auto& cached = statements_.emplace(std::string(sql), Cached{stmt, true}).first->second;
  return Statement(db_, stmt, &cached.in_use);
}

std::int64_t Database::changes() const {
  return sqlite3_changes64(db_);
}

Result<void> Database::run(std::string_view sql) {
  auto st = prepare(sql);
  if (!st) return st.error();
  return st->run();
}

Database::Transaction::Transaction(Database& db) : db_(db), begun_(db_.run("BEGIN IMMEDIATE")) {}

Database::Transaction::~Transaction() {
  // After a failed COMMIT too: SQLite rolls some failures back itself and not others (a full
  // disk may leave the transaction open), and a ROLLBACK with none open is harmless.
  if (!done_ && begun_) (void)db_.run("ROLLBACK");
}

Result<void> Database::Transaction::commit() {
  if (!begun_) return begun_.error();
  auto committed = db_.run("COMMIT");
  if (committed) done_ = true;
  return committed;
}

}  // namespace sb::store
