#pragma once
// store::Database: one connection to the server's store, whatever engine holds it — SQLite, the
// embedded default (store/sqlite.hpp), or PostgreSQL (store/postgres.hpp). The session store and
// the client credentials are written once against this: statements with numbered parameters
// (`?1`, `?2`, ...; PostgreSQL's `$1` is made of them), run one at a time, rows read column by
// column, and transactions. What differs between the engines — the schema's column types, how
// the schema's version is kept — is asked of engine().
//
// Not thread-safe on its own: every user holds mutex() around its calls and the Statements it
// gets, the same mutex for all users of one Database (the server's event loop and the thread
// its turns are written on).
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "util/error.hpp"

namespace sb::store {

enum class Engine { Sqlite, Postgres };
std::string_view engine_name(Engine engine);  // "sqlite" | "postgres"

// One prepared statement of an engine, as a Statement hands it out: kept in its connection's
// cache, or a one-off copy for a statement run inside its own loop.
class Cursor {
 public:
  explicit Cursor(bool cached) : cached_(cached) {}
  virtual ~Cursor() = default;
  virtual void bind_text(int index, std::string_view text) = 0;
  virtual void bind_integer(int index, std::int64_t value) = 0;
  // Bytes that need not be text (file contents: NUL bytes, not UTF-8).
  virtual void bind_blob(int index, std::string_view bytes) = 0;
  virtual void bind_null(int index) = 0;
  virtual Result<bool> step() = 0;
  virtual void reset() = 0;
  virtual std::string text(int column) const = 0;
  virtual std::int64_t integer(int column) const = 0;
  virtual bool is_null(int column) const = 0;

  // Handed to a Statement: false when one has it already.
  bool take() { return !std::exchange(in_use_, true); }
  // The Statement is done with it: back to the cache, reset (which ends a read still open and
  // drops what the run bound), or deleted when it was a one-off.
  void done() {
    if (!cached_) {
      delete this;
      return;
    }
    reset();
    in_use_ = false;
  }

 private:
  bool cached_;
  bool in_use_ = false;
};

class Statement {
 public:
  explicit Statement(Cursor* cursor) : cursor_(cursor) {}
  Statement(Statement&& other) noexcept : cursor_(std::exchange(other.cursor_, nullptr)) {}
  Statement& operator=(Statement&&) = delete;
  Statement(const Statement&) = delete;
  ~Statement() {
    if (cursor_) cursor_->done();
  }

  Statement& bind(int index, std::string_view text) {
    cursor_->bind_text(index, text);
    return *this;
  }
  Statement& bind(int index, std::int64_t value) {
    cursor_->bind_integer(index, value);
    return *this;
  }
  Statement& bind_blob(int index, std::string_view bytes) {
    cursor_->bind_blob(index, bytes);
    return *this;
  }
  Statement& bind_null(int index) {
    cursor_->bind_null(index);
    return *this;
  }

  // Steps once: true while a row is available, false when done. Errors are Internal, or
  // Unavailable when the engine cannot be reached.
  Result<bool> step() { return cursor_->step(); }
  // Steps to the end (for statements without rows).
  Result<void> run();
  // For running it again with new bindings.
  void reset() { cursor_->reset(); }

  std::string text(int column) const { return cursor_->text(column); }
  std::int64_t integer(int column) const { return cursor_->integer(column); }
  bool is_null(int column) const { return cursor_->is_null(column); }

 private:
  Cursor* cursor_;
};

class Database {
 public:
  virtual ~Database() = default;
  virtual Engine engine() const = 0;
  // Runs statements without parameters or rows, several separated by `;` (a schema).
  virtual Result<void> exec(std::string_view sql) = 0;
  // The statement for `sql`, with parameters written `?1`, `?2`, ..., compiled on first use and
  // kept (compiling a statement can cost more than running it). A statement still in use (the
  // same SQL run inside its own loop) gets a fresh one-off copy.
  Result<Statement> prepare(std::string_view sql);
  // Rows the last INSERT, UPDATE or DELETE changed.
  virtual std::int64_t changes() const = 0;
  // Prepares and runs one statement without parameters or rows.
  Result<void> run(std::string_view sql);
  // Held around every use of this Database, by all who share it.
  std::mutex& mutex() { return mutex_; }

  // Named locks for servers that share one store (issue 20's cluster: a session's turn runs on
  // the node that holds its lock). Held by this connection until unlock() or until the
  // connection ends, so a server that dies gives its locks up. Re-entrant: taking a lock this
  // connection holds succeeds. An engine whose store is one process's (SQLite, with its lock
  // file) grants every one. The caller holds mutex().
  virtual Result<bool> try_lock(const std::string& name) {
    (void)name;
    return true;
  }
  virtual void unlock(const std::string& name) { (void)name; }
  // Whether this connection holds the lock, as far as it knows: after a reconnect that could not
  // take it again, no (a write guarded by it must not go ahead). The caller holds mutex().
  virtual bool holds(const std::string& name) const {
    (void)name;
    return true;
  }
  // Locks that this connection lost with a broken connection and could not take again (another
  // server took them meanwhile): what they guarded is no longer this server's. Emptied by the
  // call. The caller holds mutex().
  virtual std::vector<std::string> take_lost_locks() { return {}; }
  // Inside a transaction: waits for the lock named `name`, held until the transaction ends (for
  // schema changes, which servers sharing one store may start at once). SQLite's BEGIN
  // IMMEDIATE excludes every other writer already. The caller holds mutex().
  virtual Result<void> lock_until_commit(const std::string& name) {
    (void)name;
    return {};
  }

  // A transaction that takes the write lock at once (SQLite's BEGIN IMMEDIATE), COMMIT, or
  // ROLLBACK when the guard is destroyed uncommitted. Check begun() before writing: after a
  // failed BEGIN each statement would commit on its own.
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

 protected:
  virtual std::string_view begin_sql() const = 0;
  // A cursor for `sql`; `cached`: it goes into the cache.
  virtual Result<std::unique_ptr<Cursor>> compile(std::string_view sql, bool cached) = 0;
  // For the engine's destructor, before it closes its connection.
  void forget_statements() { statements_.clear(); }

 private:
  // Lets the cache be searched by string_view without building a std::string.
  struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::mutex mutex_;
  // By SQL text; node-based, so cursors never move while a Statement has one.
  std::unordered_map<std::string, std::unique_ptr<Cursor>, StringHash, std::equal_to<>> statements_;
};

}  // namespace sb::store
