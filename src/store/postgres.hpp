#pragma once
// store::Database on PostgreSQL (libpq): one connection, used by whoever holds mutex() as the
// SQLite one is. Statements are sent with their parameters (PQsendQueryParams: parameters as
// text, blobs as binary bytea) and read back in binary, so that a bytea column reads as its bytes
// and an integer column as its value; `?N` in the SQL is sent as `$N`.
//
// A store is one server's, or one cluster's (issue 20): session-level advisory locks named after
// the database and schema (search_path) keep a second server off it, as SQLite's lock file does.
// A single server takes the store's lock alone; the nodes of a cluster take it shared, and each
// its node's lock alone (so two nodes with one node ID refuse each other). try_lock()'s named
// locks are advisory locks too, each with an epoch (the table switchboard_lock) that taking it
// counts up. A connection that breaks fails the statement in flight with Unavailable
// ("postgres: ..."), and a new one is made in the background; the first statement after it is
// made takes every lock again: one that another server took meanwhile (held still, or taken and
// given up: its epoch moved) is reported by take_lost_locks(), so a server cut off for a while
// never writes over what another server did with the lock in between. Nothing is retried behind
// the caller's back, so a write that failed is the writer's to keep (session::TurnWriter keeps
// and retries it).
//
// What a caller (the server's event loop) may wait for: a statement's round trip (a fraction of a
// millisecond on loopback), and never longer than the server's statement_timeout (ours unless
// the URL or the server's configuration sets one) + 2 s: the server cancels a statement then, and
// one that has not answered 2 s later is gone (frozen, or its machine cut off), so its connection
// is given up (closed: a backend that is still alive ends when it notices). Never for a connect:
// connections are made on a thread of the database's own (connect_timeout for the connect, then
// a few set-up statements, each bounded as above; a host name's lookup is libpq's, unbounded),
// tried again every second while wanted, and until one is made a statement fails at once with
// Unavailable, naming the cause.
// TCP keepalives (unless the URL sets its own) end an idle connection whose server vanished
// within about 15 s.
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "store/database.hpp"

typedef struct pg_conn PGconn;

namespace sb::store {

struct PostgresOptions {
  std::string url;  // postgresql://user:password@host:port/dbname?options (libpq's URI)
  std::chrono::seconds connect_timeout{5};
  // Set on the connection unless the URL sets one (options=-c statement_timeout=...).
  std::chrono::milliseconds statement_timeout{5000};
  // A node of a cluster (issue 20): the store is shared with the other nodes, and this ID is
  // this node's alone. Empty: a single server, the store is its alone.
  std::string node_id;
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
  // Before `next` is sent: takes the connection the connector made when the last one broke;
  // Unavailable while there is none yet, or when it broke inside a transaction (only its ROLLBACK
  // may go on).
  Result<void> ensure_connected(std::string_view next);
  Result<bool> try_lock(const std::string& name) override;
  void unlock(const std::string& name) override;
  bool holds(const std::string& name) const override { return locks_.count(name) > 0; }
  std::vector<std::string> take_lost_locks() override;
  Result<void> lock_until_commit(const std::string& name) override;

 protected:
  std::string_view begin_sql() const override { return "BEGIN"; }
  Result<std::unique_ptr<Cursor>> compile(std::string_view sql, bool cached) override;

 private:
  class PgCursor;
  class Connector;
  explicit PostgresDatabase(PostgresOptions options);
  bool connected() const;
  // The connection is closed (it broke, or its server did not answer in time) and a new one is
  // wanted.
  void drop_connection();
  void give_up_if_unusable(const Error& error);
  // On a new connection: the locks the last one held (see the header).
  Result<void> take_locks_again();
  // An advisory lock function (pg_try_advisory_lock, ..._shared, pg_advisory_unlock) run on the
  // lock named `name` in this store, on the open connection; what it returned.
  Result<bool> lock_call(std::string_view function, const std::string& name);
  // The first column of the first row of `sql` with its parameters ($1, ...; none: sent as a
  // simple query, which may be several statements), as text (nullopt: no row); `what` names it
  // in an error. A failure that leaves the connection unusable gives it up.
  Result<std::optional<std::string>> value_of(const std::string& sql,
                                              const std::vector<std::string>& parameters,
                                              std::string_view what);
  // Takes the lock `name` on the open connection, with its epoch: when it was held before
  // (`epoch` set), only if its epoch is still that one; a new epoch otherwise. Nullopt: not taken.
  Result<std::optional<std::int64_t>> take_lock(const std::string& name,
                                                std::optional<std::int64_t> epoch);

  const PostgresOptions options_;
  std::unique_ptr<Connector> connector_;
  PGconn* conn_ = nullptr;  // null once given up, until the connector's next one is taken
  // How long conn_'s answers may take: its server's statement_timeout + 2 s.
  std::chrono::milliseconds answer_within_{0};
  std::int64_t changes_ = 0;
  // try_lock()'s, held (taken again after a reconnect), with the epoch this server took.
  std::map<std::string, std::int64_t> locks_;
  std::vector<std::string> lost_locks_;
  // Between a BEGIN and its ROLLBACK (or a COMMIT that worked).
  bool in_transaction_ = false;
};

}  // namespace sb::store
