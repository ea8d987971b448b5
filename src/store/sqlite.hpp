#pragma once
// store::Database on SQLite (the embedded default): one connection, prepared statements kept,
// transactions. The store is opened with SQLite's default VFS in WAL mode: a commit appends to the
// log without a sync (synchronous=NORMAL), so a transaction is in the files when its commit returns
// and survives a crash of the process; the log is synced only when a checkpoint copies it into the
// database (a power failure may lose the commits since the last one).
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

#include "store/database.hpp"
#include "store/file_lock.hpp"
#include "util/error.hpp"

namespace sb::store {

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

class SqliteDatabase final : public Database {
 public:
  // Opens (creating) the file for this Database alone, with WAL, foreign keys and a checkpoint
  // thread. Conflict when another Database (in this or another process) has it open.
  static Result<std::unique_ptr<SqliteDatabase>> open(const std::filesystem::path& path,
                                                      DatabaseOptions options = {});
  // An in-memory database, for tests.
  static Result<std::unique_ptr<SqliteDatabase>> open_memory();
  ~SqliteDatabase() override;

  Engine engine() const override { return Engine::Sqlite; }
  Result<void> exec(std::string_view sql) override;
  std::int64_t changes() const override;
  // Of the checkpoint thread; all zero for an in-memory database.
  CheckpointStats checkpoint_stats() const;

 protected:
  std::string_view begin_sql() const override { return "BEGIN IMMEDIATE"; }
  Result<std::unique_ptr<Cursor>> compile(std::string_view sql, bool cached) override;

 private:
  class SqliteCursor;
  explicit SqliteDatabase(sqlite3* db);  // out of line: Checkpointer is complete only there
  // The committing connection's busy handler: see the top of this file.
  static int on_busy(void* database, int tries);
  sqlite3* db_;
  std::chrono::steady_clock::time_point busy_since_;  // of the wait on_busy is in
  std::optional<FileLock> lock_;                      // of <file>.lock; none in memory
  std::unique_ptr<Checkpointer> checkpointer_;
};

}  // namespace sb::store
