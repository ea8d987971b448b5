#pragma once
// A small RAII layer over SQLite: one connection, prepared statements, transactions. The store
// is opened with SQLite's default VFS in WAL mode: a commit appends to the log without a sync
// (synchronous=NORMAL), so a transaction is in the files when its commit returns and survives a
// crash of the process; the log is synced only when a checkpoint copies it into the database
// (a power failure may lose the commits since the last one).
//
// Checkpoints (and their syncs, two or three fdatasyncs of 2-5 ms each on our VMs) never run in
// a commit: a thread of the Database's own, with a connection of its own, copies the log into
// the database (PRAGMA wal_checkpoint(PASSIVE), which does not block the writer) once
// `checkpoint_pages` have been written since the last copy. A log starts over only at a write
// that finds it fully copied, and that write syncs the new log header (SQLite's guard against
// out-of-order writes after a restart). A writer that never pauses keeps the log from being
// fully copied, so past `restart_pages` the thread makes a RESTART copy, which holds the writer
// off while it copies the rest, and the writer's next write starts the log over. Once writes stop
// for `idle_truncate` the log is truncated. Should the thread fall behind anyway (a machine so busy
// it is not scheduled), the writer copies the log itself at twice `restart_pages`, so the log stays
// bounded. The server commits its turns on a thread of their own (session::TurnWriter), so neither
// the checkpoints nor the commits' own writes stall its event loop; docs/benchmarks.md has the lag.
//
// A write of the committing connection that finds another one writing (the checkpoint thread's
// first write of a new log, a RESTART copy, another program) polls every 100 us, up to 5 s,
// instead of SQLite's default sleeps (1, 2, 5, 10 ms, ...), so it goes on as soon as it can.
//
// Statements are prepared once per SQL text and kept (compiling a statement cost more than
// running it): prepare() hands out the cached statement, which is reset and its bindings
// cleared when the Statement is destroyed.
//
// A file is used by one Database of one process: whoever uses it shares that Database (a
// shared_ptr). An flock()ed `<file>.lock` beside it keeps a second Database (another server on
// the same data directory) off it.
//
// Not thread-safe on its own: every user holds mutex() around its calls and the Statements it
// gets, the same mutex for all users of one Database. SQLite's own lock around every call is
// therefore left out (SQLITE_OPEN_NOMUTEX, and no global memory statistics, which take a
// process-wide lock on each allocation).
#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "util/error.hpp"

namespace sb::store {

class Statement {
 public:
  // `in_use`: the statement belongs to the Database's cache and is only reset at the end.
  Statement(sqlite3* db, sqlite3_stmt* stmt, bool* in_use = nullptr)
      : db_(db), stmt_(stmt), in_use_(in_use) {}
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&&) = delete;
  Statement(const Statement&) = delete;
  ~Statement();

  Statement& bind(int index, std::string_view text);
  Statement& bind(int index, std::int64_t value);
  Statement& bind_null(int index);

  // Steps once: true while a row is available, false when done. Errors are Internal.
  Result<bool> step();
  // Steps to the end (for statements without rows).
  Result<void> run();
  void reset();

  std::string text(int column) const;
  std::int64_t integer(int column) const;
  bool is_null(int column) const;

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_;
  bool* in_use_;  // the cache's flag for this statement; null for one the Statement owns
};

// How the checkpoint thread keeps the log short. Pages are SQLite pages (4 KiB).
struct DatabaseOptions {
  // Log pages written since the last copy that start a copy (SQLite's own automatic
  // checkpoint starts at 1,000).
  int checkpoint_pages = 1000;
  // A log this long (64 MiB) is copied with the writer held off (RESTART), so that it starts over.
  int restart_pages = 16384;
  // Quiet this long after a copy: the log is truncated to nothing.
  std::chrono::milliseconds idle_truncate{1000};
};

// What the checkpoint thread has done, for tests.
struct CheckpointStats {
  std::uint64_t passes = 0;         // copies of the log into the database
  std::uint64_t restarts = 0;       // RESTART copies that held the writer off
  std::uint64_t truncations = 0;    // the log truncated while quiet
  std::uint64_t writer_copies = 0;  // copies by the writer: the thread was 2 x restart_pages behind
  std::thread::id thread;           // the thread that ran them
};

class Checkpointer;

class Database {
 public:
  // Opens (creating) the file for this Database alone, with WAL, foreign keys and a checkpoint
  // thread. Conflict when another Database (in this or another process) has it open.
  static Result<std::unique_ptr<Database>> open(const std::filesystem::path& path,
                                                DatabaseOptions options = {});
  // An in-memory database, for tests.
  static Result<std::unique_ptr<Database>> open_memory();
  ~Database();

  Result<void> exec(std::string_view sql);
  // The statement for `sql`, compiled on first use. A statement still in use (the same SQL run
  // inside its own loop) gets a fresh one-off copy.
  Result<Statement> prepare(std::string_view sql);
  // Prepares (cached) and runs one statement without parameters or rows.
  Result<void> run(std::string_view sql);
  std::int64_t changes() const;
  // Of the checkpoint thread; all zero for an in-memory database.
  CheckpointStats checkpoint_stats() const;
  // Held around every use of this Database, by all who share it.
  std::mutex& mutex() { return mutex_; }

  // BEGIN IMMEDIATE ... COMMIT, or ROLLBACK when the guard is destroyed uncommitted. Check
  // begun() before writing: after a failed BEGIN each statement would commit on its own.
  class Transaction {
   public:
    explicit Transaction(Database& db);
    ~Transaction();
    const Result<void>& begun() const { return begun_; }
    Result<void> commit();

   private:
    Database& db_;
    Result<void> begun_;  // BEGIN's outcome: a transaction that did not begin cannot commit
    bool done_ = false;
  };

 private:
  // Lets the cache be searched by string_view without building a std::string.
  struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Cached {
    sqlite3_stmt* stmt = nullptr;
    bool in_use = false;
  };
  explicit Database(sqlite3* db);  // out of line: Checkpointer is complete only there
  // The committing connection's busy handler: see the top of this file.
  static int on_busy(void* database, int tries);
  sqlite3* db_;
  std::chrono::steady_clock::time_point busy_since_;  // of the wait on_busy is in
  int lock_fd_ = -1;                                  // the flock()ed <file>.lock; -1 in memory
  std::unique_ptr<Checkpointer> checkpointer_;
  std::mutex mutex_;
  // By SQL text; node-based, so the `in_use` flags that Statements point to never move.
  std::unordered_map<std::string, Cached, StringHash, std::equal_to<>> statements_;
};

}  // namespace sb::store
