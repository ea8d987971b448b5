#pragma once
// store::Database on PostgreSQL (libpq): one connection, used by whoever holds mutex() as the
// SQLite one is. Statements are sent with their parameters (PQexecParams: parameters as text,
// blobs as binary bytea) and read back in binary, so that a bytea column reads as its bytes and
// an integer column as its value; `?N` in the SQL is sent as `$N`.
//
// A store is one server's: a session-level advisory lock named after the database and schema
// (search_path) keeps a second server off it, as SQLite's lock file does, until several nodes
// can share one (issue 20's cluster). A connection that breaks fails the statement in flight
// with Unavailable ("postgres: ..."), and the next statement connects again (and takes the lock
// again); nothing is retried behind the caller's back, so a write that failed is the writer's to
// keep (session::TurnWriter keeps and retries it).
//
// libpq's calls block: a statement waits for its round trip (a fraction of a millisecond on
// loopback), a reconnect for up to `connect_timeout`. Statements run longer than
// `statement_timeout` are cancelled by the server.
#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>

#include "store/database.hpp"

typedef struct pg_conn PGconn;

namespace sb::store {

struct PostgresOptions {
  std::string url;  // postgresql://user:password@host:port/dbname?options (libpq's URI)
  std::chrono::seconds connect_timeout{5};
  // Set on the connection unless the URL sets one (options=-c statement_timeout=...).
  std::chrono::milliseconds statement_timeout{30000};
};

class PostgresDatabase final : public Database {
 public:
  // Connects and takes the store's lock: Conflict when another server holds it, Unavailable when
  // the server cannot be reached, InvalidRequest when the URL is not one libpq reads.
  static Result<std::unique_ptr<PostgresDatabase>> open(PostgresOptions options);
  ~PostgresDatabase() override;

  Engine engine() const override { return Engine::Postgres; }
  Result<void> exec(std::string_view sql) override;
  std::int64_t changes() const override { return changes_; }
  // Before `next` is sent: connects again when the connection broke; Unavailable when it cannot,
  // or when it broke inside a transaction (only its ROLLBACK may go on).
  Result<void> ensure_connected(std::string_view next);

 protected:
  std::string_view begin_sql() const override { return "BEGIN"; }
  Result<std::unique_ptr<Cursor>> compile(std::string_view sql, bool cached) override;

 private:
  class PgCursor;
  explicit PostgresDatabase(PostgresOptions options);
  Result<void> connect();
  // The error of the connection's last failure: Unavailable when it broke.
  Error failure(std::string_view what, const char* message) const;

  PostgresOptions options_;
  PGconn* conn_ = nullptr;
  std::int64_t changes_ = 0;
  bool in_transaction_ = false;
  // After a failed reconnect: until when statements fail at once, and with what.
  std::chrono::steady_clock::time_point retry_at_;
  Error last_failure_{ErrorCode::Unavailable,
                      ""};  // between a BEGIN and its ROLLBACK (or a COMMIT that worked)
};

}  // namespace sb::store
