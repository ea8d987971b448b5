#include "store/sqlite.hpp"

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>

#include "util/log.hpp"

namespace sb::store {
namespace {
Error sqlite_error(sqlite3* db, std::string_view what) {
  return make_error(ErrorCode::Internal,
                    std::string("sqlite: ") + std::string(what) + ": " + sqlite3_errmsg(db));
}

}  // namespace

class SqliteDatabase::SqliteCursor final : public Cursor {
 public:
  SqliteCursor(sqlite3* db, sqlite3_stmt* stmt, bool cached)
      : Cursor(cached), db_(db), stmt_(stmt) {}
  ~SqliteCursor() override { sqlite3_finalize(stmt_); }

  void bind_text(int index, std::string_view text) override {
    sqlite3_bind_text(stmt_, index, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
  }
  void bind_integer(int index, std::int64_t value) override {
    sqlite3_bind_int64(stmt_, index, value);
  }
  void bind_blob(int index, std::string_view bytes) override {
    sqlite3_bind_blob(stmt_, index, bytes.data(), static_cast<int>(bytes.size()), SQLITE_TRANSIENT);
  }
  void bind_null(int index) override { sqlite3_bind_null(stmt_, index); }

  Result<bool> step() override {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return sqlite_error(db_, "step");
  }

  void reset() override {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }

  std::string text(int column) const override {
    // A blob column reads as its bytes (sqlite3_column_blob: no conversion to text).
    const void* p = sqlite3_column_type(stmt_, column) == SQLITE_BLOB
                        ? sqlite3_column_blob(stmt_, column)
                        : static_cast<const void*>(sqlite3_column_text(stmt_, column));
    int n = sqlite3_column_bytes(stmt_, column);
    return p ? std::string(static_cast<const char*>(p), static_cast<std::size_t>(n))
             : std::string();
  }
  std::int64_t integer(int column) const override { return sqlite3_column_int64(stmt_, column); }
  bool is_null(int column) const override {
    return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_;
};

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

// How long a write of the committing connection waits for another one, and in what steps.
constexpr std::chrono::seconds kBusyLimit{5};
constexpr std::chrono::microseconds kBusyPoll{100};
}  // namespace

// The checkpoint thread: its own connection to the file, used only on its thread. Woken by the
// WAL hook of the committing connection (wal_grew), never by a timer while nothing is written.
class Checkpointer {
 public:
  Checkpointer(sqlite3* db, DatabaseOptions options)
      : db_(db), options_(options), thread_([this] { run(); }) {}

  // A final copy and truncation of the log, then the thread ends.
  ~Checkpointer() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_one();
    thread_.join();
    sqlite3_close(db_);
  }

  // After each commit, on the committing thread (under the Database's mutex): the log now has
  // `pages` pages. Costs two atomic operations unless a copy is due.
  void wal_grew(sqlite3* writer, int pages) {
    commits_.fetch_add(1, std::memory_order_relaxed);
    int before = wal_pages_.exchange(pages, std::memory_order_relaxed);
    if (pages < before) started_over();
    // The thread has fallen far behind (starved of CPU by a busy machine): the writer copies
    // the log itself, as SQLite's own automatic checkpoint would, so that the log stays bounded
    // whatever the scheduler does; its next write then starts the log over.
    if (pages >= 2 * options_.restart_pages) {
      if (checkpoint(writer, SQLITE_CHECKPOINT_PASSIVE)) {
        std::lock_guard lock(mutex_);
        ++stats_.writer_copies;
      }
      return;
    }
    if (pages - copied_of(copied_.load(std::memory_order_relaxed)) < options_.checkpoint_pages &&
        pages < options_.restart_pages)
      return;
    if (due_.exchange(true, std::memory_order_acq_rel)) return;  // already asked
    {
      std::lock_guard lock(mutex_);  // so that the thread cannot miss the wake-up
    }
    wake_.notify_one();
  }

  CheckpointStats stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
  }

 private:
  void run() {
    {
      std::lock_guard lock(mutex_);
      stats_.thread = std::this_thread::get_id();
    }
    bool copied_since_truncate = false;
    std::unique_lock lock(mutex_);
    while (!stop_) {
      auto asked = [&] { return stop_ || due_.load(std::memory_order_acquire); };
      bool quiet = false;
      if (copied_since_truncate) {
        // Truncate the log once writes have stopped for a while.
        auto commits = commits_.load(std::memory_order_relaxed);
        if (!wake_.wait_for(lock, options_.idle_truncate, asked))
          quiet = commits_.load(std::memory_order_relaxed) == commits;
      } else {
        wake_.wait(lock, asked);
      }
      if (stop_) break;
      lock.unlock();
      if (due_.exchange(false, std::memory_order_acq_rel)) {
        if (wal_pages_.load(std::memory_order_relaxed) >= options_.restart_pages)
          // The writer is held off for one copy, and its next write starts the log over.
          checkpoint(db_, SQLITE_CHECKPOINT_RESTART);
        else
          checkpoint(db_, SQLITE_CHECKPOINT_PASSIVE);
        copied_since_truncate = true;
      } else if (quiet && checkpoint(db_, SQLITE_CHECKPOINT_TRUNCATE)) {
        copied_since_truncate = false;
      }
      lock.lock();
    }
    lock.unlock();
    // The last copy: the loop has stopped writing; wait a little for a writer all the same.
    sqlite3_busy_timeout(db_, 2000);
    checkpoint(db_, SQLITE_CHECKPOINT_TRUNCATE);
  }

  // The log's generation and how much of it the last copy took, in one word: a copy that ends
  // after the log started over (a commit on the other thread) must not claim pages of the new
  // log, or the next copy would wait until the new log outgrew the old one.
  static std::uint64_t pack(std::uint32_t generation, int copied) {
    return (std::uint64_t{generation} << 32) | static_cast<std::uint32_t>(copied);
  }
  static int copied_of(std::uint64_t v) { return static_cast<int>(v & 0xffffffffu); }
  static std::uint32_t generation_of(std::uint64_t v) {
    return static_cast<std::uint32_t>(v >> 32);
  }

  // Either thread: the log started over, nothing of it is copied.
  void started_over() {
    auto v = copied_.load(std::memory_order_relaxed);
    while (!copied_.compare_exchange_weak(v, pack(generation_of(v) + 1, 0),
                                          std::memory_order_relaxed)) {
    }
  }

  // One checkpoint in `mode` on `connection` (this thread's, or the writer's when the thread
  // fell behind); true when the whole log was copied.
  bool checkpoint(sqlite3* connection, int mode) {
    int log_pages = 0, copied = 0;
    auto before = copied_.load(std::memory_order_relaxed);
    int rc = sqlite3_wal_checkpoint_v2(connection, "main", mode, &log_pages, &copied);
    // BUSY: a RESTART or TRUNCATE that could not hold the writer off or wait for a reader, or a
    // copy while the other connection copies (what it could copy, it did); tried again later.
    if (rc != SQLITE_OK && rc != SQLITE_BUSY) {
      log::warn("sqlite: checkpoint: ", sqlite3_errmsg(connection));
      return false;
    }
    // Recorded only for the log it copied: if the log started over meanwhile, its generation
    // moved on and this count is not about it.
    auto expected = before;
    while (copied >= 0 && generation_of(expected) == generation_of(before) &&
           !copied_.compare_exchange_weak(expected, pack(generation_of(before), copied),
                                          std::memory_order_relaxed)) {
    }
    std::lock_guard lock(mutex_);
    ++stats_.passes;
    if (rc == SQLITE_OK && mode == SQLITE_CHECKPOINT_RESTART) ++stats_.restarts;
    if (rc == SQLITE_OK && mode == SQLITE_CHECKPOINT_TRUNCATE) ++stats_.truncations;
    return rc == SQLITE_OK && copied == log_pages;
  }

  sqlite3* const db_;
  const DatabaseOptions options_;
  std::atomic<int> wal_pages_{0};         // as the last commit left it
  std::atomic<std::uint64_t> copied_{0};  // pack(generation, pages the last copy took)
  std::atomic<std::uint64_t> commits_{0};
  std::atomic<bool> due_{false};  // a copy was asked for
  mutable std::mutex mutex_;      // stop_, stats_, and the wake-up
  std::condition_variable wake_;
  bool stop_ = false;
  CheckpointStats stats_;
  std::thread thread_;  // last: starts once the rest is ready
};

namespace {
// The WAL hook of the committing connection (sqlite3_wal_hook; it replaces SQLite's automatic
// checkpoint, which would run in the commit).
int on_wal_commit(void* checkpointer, sqlite3* writer, const char*, int pages) {
  static_cast<Checkpointer*>(checkpointer)->wal_grew(writer, pages);
  return SQLITE_OK;
}

sqlite3* open_connection(const std::filesystem::path& path, std::string& error) {
  sqlite3* raw = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &raw,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc == SQLITE_OK) return raw;
  error = raw ? sqlite3_errmsg(raw) : "out of memory";
  if (raw) sqlite3_close(raw);
  return nullptr;
}
}  // namespace

Result<std::unique_ptr<SqliteDatabase>> SqliteDatabase::open(const std::filesystem::path& path,
                                                             DatabaseOptions options) {
  configure_sqlite_once();
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  if (ec)
    return make_error(ErrorCode::Internal,
                      "cannot create " + path.parent_path().string() + ": " + ec.message());
  // The lock first: a second Database on the file (another server on the data directory) stops
  // here, before it touches the database.
  auto lock = FileLock::acquire(path.string() + ".lock");
  if (!lock && lock.error().code == ErrorCode::Conflict)
    return make_error(ErrorCode::Conflict, path.string() + " is in use by another process");
  if (!lock) return lock.error();
  std::string error;
  sqlite3* raw = open_connection(path, error);
  if (!raw) {
    return make_error(ErrorCode::Internal, "cannot open " + path.string() + ": " + error);
  }
  std::unique_ptr<SqliteDatabase> db(new SqliteDatabase(raw));
  db->lock_ = std::move(*lock);
  // A writer waits for the checkpoint thread only while its first write of a new log, a RESTART
  // or a TRUNCATE holds the writer lock (rare, and short), or for another program that opened
  // the file (the sqlite3 shell).
  sqlite3_busy_handler(raw, &SqliteDatabase::on_busy, db.get());
  for (auto sql :
       {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL", "PRAGMA foreign_keys=ON"})
    if (auto r = db->exec(sql); !r) return r.error();
  sqlite3* copier = open_connection(path, error);
  if (!copier)
    return make_error(ErrorCode::Internal, "cannot open " + path.string() + ": " + error);
  // Its syncs are those of a checkpoint at synchronous=NORMAL (the log, then the database).
  if (sqlite3_exec(copier, "PRAGMA synchronous=NORMAL", nullptr, nullptr, nullptr) != SQLITE_OK) {
    std::string msg = sqlite3_errmsg(copier);
    sqlite3_close(copier);
    return make_error(ErrorCode::Internal, "sqlite: " + msg);
  }
  db->checkpointer_ = std::make_unique<Checkpointer>(copier, options);
  sqlite3_wal_hook(raw, on_wal_commit, db->checkpointer_.get());
  return db;
}

Result<std::unique_ptr<SqliteDatabase>> SqliteDatabase::open_memory() {
  configure_sqlite_once();
  sqlite3* raw = nullptr;
  if (sqlite3_open_v2(":memory:", &raw,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                      nullptr) != SQLITE_OK) {
    if (raw) sqlite3_close(raw);
    return make_error(ErrorCode::Internal, "cannot open an in-memory database");
  }
  std::unique_ptr<SqliteDatabase> db(new SqliteDatabase(raw));
  if (auto r = db->exec("PRAGMA foreign_keys=ON"); !r) return r.error();
  return db;
}

SqliteDatabase::SqliteDatabase(sqlite3* db) : db_(db) {}

SqliteDatabase::~SqliteDatabase() {
  if (checkpointer_) sqlite3_wal_hook(db_, nullptr, nullptr);
  // The checkpoint thread's last copy first; then this connection, the last one, which SQLite
  // closes with a checkpoint of what is left (nothing) and the log's removal.
  checkpointer_.reset();
  forget_statements();
  sqlite3_close(db_);
}

CheckpointStats SqliteDatabase::checkpoint_stats() const {
  return checkpointer_ ? checkpointer_->stats() : CheckpointStats{};
}

int SqliteDatabase::on_busy(void* database, int tries) {
  auto* self = static_cast<SqliteDatabase*>(database);
  auto now = std::chrono::steady_clock::now();
  if (tries == 0)
    self->busy_since_ = now;
  else if (now - self->busy_since_ >= kBusyLimit)
    return 0;
  std::this_thread::sleep_for(kBusyPoll);
  return 1;
}

Result<void> SqliteDatabase::exec(std::string_view sql) {
  char* err = nullptr;
  std::string owned(sql);
  if (sqlite3_exec(db_, owned.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return make_error(ErrorCode::Internal, "sqlite: " + msg);
  }
  return {};
}

Result<std::unique_ptr<Cursor>> SqliteDatabase::compile(std::string_view sql, bool cached) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                         cached ? SQLITE_PREPARE_PERSISTENT : 0, &stmt, nullptr) != SQLITE_OK)
    return sqlite_error(db_, "prepare");
  return std::unique_ptr<Cursor>(new SqliteCursor(db_, stmt, cached));
}

std::int64_t SqliteDatabase::changes() const {
  return sqlite3_changes64(db_);
}

}  // namespace sb::store
