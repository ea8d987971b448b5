#pragma once
// A small RAII layer over SQLite: one connection, prepared statements, transactions. The store
// is opened with SQLite's default VFS in WAL mode: a commit appends to the log without a sync
// (synchronous=NORMAL), so a transaction is in the files when its commit returns and survives a
// crash of the process; the log is synced only when a checkpoint copies it into the database
// (a power failure may lose the commits since the last one).
//
// Statements are prepared once per SQL text and kept (compiling a statement cost more than
// running it): prepare() hands out the cached statement, which is reset and its bindings
// cleared when the Statement is destroyed.
//
// A file is used by one connection of one process (locking_mode=EXCLUSIVE): whoever uses it
// shares that Database (a shared_ptr), and no other program can read it meanwhile.
//
// Not thread-safe on its own: every user holds mutex() around its calls and the Statements it
// gets, the same mutex for all users of one Database. SQLite's own lock around every call is
// therefore left out (SQLITE_OPEN_NOMUTEX, and no global memory statistics, which take a
// process-wide lock on each allocation).
#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
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

class Database {
 public:
  // Opens (creating) the file for this process alone, with WAL and foreign keys. Conflict when
  // another process (another server, the sqlite3 shell) has it open.
  static Result<std::unique_ptr<Database>> open(const std::filesystem::path& path);
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
  explicit Database(sqlite3* db) : db_(db) {}
  sqlite3* db_;
  std::mutex mutex_;
  // By SQL text; node-based, so the `in_use` flags that Statements point to never move.
  std::unordered_map<std::string, Cached, StringHash, std::equal_to<>> statements_;
};

}  // namespace sb::store
