#include "store/postgres.hpp"

#include <libpq-fe.h>

#include <cstring>
#include <optional>
#include <vector>

#include "util/log.hpp"
#include "util/text.hpp"

namespace sb::store {
namespace {

// Type OIDs of the integer columns a binary result may hold (PostgreSQL's pg_type.dat; they are
// fixed across versions).
constexpr Oid kBool = 16, kInt8 = 20, kInt2 = 21, kInt4 = 23;

constexpr std::chrono::seconds kRetryEvery{1};

// libpq's messages end with a newline.
std::string trimmed(const char* message) {
  return std::string(trim(message ? message : ""));
}

// `?N` (and a bare `?`, numbered in order) become `$N`; quoted text is left alone.
std::string to_dollar_parameters(std::string_view sql, int& count) {
  std::string out;
  out.reserve(sql.size() + 8);
  int next = 0;
  char quote = 0;
  for (std::size_t i = 0; i < sql.size(); ++i) {
    char c = sql[i];
    if (quote) {
      if (c == quote) quote = 0;
      out.push_back(c);
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
      out.push_back(c);
      continue;
    }
    if (c != '?') {
      out.push_back(c);
      continue;
    }
    int n = 0;
    std::size_t j = i + 1;
    while (j < sql.size() && sql[j] >= '0' && sql[j] <= '9')
      n = n * 10 + (sql[j++] - '0');
    if (j == i + 1) n = ++next;
    i = j - 1;
    count = std::max(count, n);
    out += '$';
    out += std::to_string(n);
  }
  return out;
}

std::uint64_t big_endian(const char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// The 64-bit key of the lock named by the SQL expression `name` in this store: two names (or
// two stores in one database) share a key with a chance of 2^-64.
std::string lock_key_sql(std::string_view name) {
  return "('x' || left(md5('switchboard:' || current_database() || ':' || "
         "coalesce(current_schema(), '') || ':' || " +
         std::string(name) + "), 16))::bit(64)::bigint";
}

// What libpq's notices (a ROLLBACK with no transaction open, ...) become: debug lines, not
// stderr.
void on_notice(void*, const char* message) {
  log::debug("postgres: ", trimmed(message));
}
}  // namespace

// One statement's SQL (as sent) and what the current run bound and read.
class PostgresDatabase::PgCursor final : public Cursor {
 public:
  PgCursor(PostgresDatabase& db, std::string_view sql, bool cached) : Cursor(cached), db_(db) {
    int count = 0;
    sql_ = to_dollar_parameters(sql, count);
    values_.resize(static_cast<std::size_t>(count));
    formats_.assign(static_cast<std::size_t>(count), 0);
  }
  ~PgCursor() override { clear_result(); }

  // A text parameter goes as a C string: libpq would cut it at a NUL, and TEXT cannot hold one.
  // Such a value is refused (at step()) rather than stored cut short.
  void bind_text(int index, std::string_view text) override {
    if (text.find('\0') != std::string_view::npos) has_nul_ = true;
    set(index, text, 0);
  }
  void bind_integer(int index, std::int64_t value) override {
    set(index, std::to_string(value), 0);
  }
  void bind_blob(int index, std::string_view bytes) override { set(index, bytes, 1); }
  void bind_null(int index) override {
    if (auto* slot = at(index)) slot->reset();
  }

  Result<bool> step() override {
    if (result_) return ++row_ < PQntuples(result_);
    if (has_nul_)
      return make_error(ErrorCode::InvalidRequest,
                        "postgres: text with a NUL character cannot be stored");
    if (auto r = db_.ensure_connected(sql_); !r) return r.error();
    // What the connection is in: a transaction begins with a BEGIN that succeeded (one that
    // failed opened none, and its guard sends no ROLLBACK) and ends at COMMIT or ROLLBACK, failed
    // or not (the Transaction guard sends ROLLBACK after a failed COMMIT).
    bool begin = sql_ == "BEGIN" || sql_ == "BEGIN IMMEDIATE";
    if (sql_ == "ROLLBACK") db_.in_transaction_ = false;
    std::vector<const char*> values(values_.size());
    std::vector<int> lengths(values_.size());
    for (std::size_t i = 0; i < values_.size(); ++i) {
      if (!values_[i]) continue;
      values[i] = values_[i]->data();
      lengths[i] = static_cast<int>(values_[i]->size());
    }
    result_ = PQexecParams(db_.conn_, sql_.c_str(), static_cast<int>(values_.size()), nullptr,
                           values.data(), lengths.data(), formats_.data(), 1);
    auto status = result_ ? PQresultStatus(result_) : PGRES_FATAL_ERROR;
    if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) {
      db_.changes_ = std::atoll(PQcmdTuples(result_));
      if (begin) db_.in_transaction_ = true;
      if (sql_ == "COMMIT") db_.in_transaction_ = false;
      row_ = 0;
      return PQntuples(result_) > 0;
    }
    auto error = db_.failure("statement", result_ ? PQresultErrorMessage(result_) : nullptr);
    clear_result();
    return error;
  }

  void reset() override {
    clear_result();
    for (auto& v : values_)
      v.reset();
    std::fill(formats_.begin(), formats_.end(), 0);
    has_nul_ = false;
  }

  std::string text(int column) const override {
    if (!result_ || PQgetisnull(result_, row_, column)) return {};
    return std::string(PQgetvalue(result_, row_, column),
                       static_cast<std::size_t>(PQgetlength(result_, row_, column)));
  }
  std::int64_t integer(int column) const override {
    if (!result_ || PQgetisnull(result_, row_, column)) return 0;
    const char* p = PQgetvalue(result_, row_, column);
    switch (PQftype(result_, column)) {
      case kInt8:
        return static_cast<std::int64_t>(big_endian(p, 8));
      case kInt4:
        return static_cast<std::int32_t>(big_endian(p, 4));
      case kInt2:
        return static_cast<std::int16_t>(big_endian(p, 2));
      case kBool:
        return p[0] ? 1 : 0;
      default:
        return 0;  // not an integer column: a mistake in the SQL, read as SQLite would
    }
  }
  bool is_null(int column) const override { return !result_ || PQgetisnull(result_, row_, column); }

 private:
  std::optional<std::string>* at(int index) {
    if (index < 1 || static_cast<std::size_t>(index) > values_.size()) return nullptr;
    return &values_[static_cast<std::size_t>(index) - 1];
  }
  void set(int index, std::string_view value, int format) {
    if (auto* slot = at(index)) {
      slot->emplace(value);
      formats_[static_cast<std::size_t>(index) - 1] = format;
    }
  }
  void clear_result() {
    if (result_) PQclear(result_);
    result_ = nullptr;
    row_ = 0;
  }

  PostgresDatabase& db_;
  std::string sql_;
  std::vector<std::optional<std::string>> values_;
  std::vector<int> formats_;  // 0 text, 1 binary (a blob)
  bool has_nul_ = false;      // a text parameter of this run holds a NUL
  PGresult* result_ = nullptr;
  int row_ = 0;
};

Result<std::unique_ptr<PostgresDatabase>> PostgresDatabase::open(PostgresOptions options) {
  // libpq reads the URL itself; checked first so that a typo is not reported as an outage.
  char* parse_error = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(options.url.c_str(), &parse_error);
  if (!parsed) {
    std::string why = trimmed(parse_error ? parse_error : "out of memory");
    PQfreemem(parse_error);
    return make_error(ErrorCode::InvalidRequest, "postgres: the storage URL is not valid: " + why);
  }
  PQconninfoFree(parsed);
  std::unique_ptr<PostgresDatabase> db(new PostgresDatabase(std::move(options)));
  if (auto r = db->connect(); !r) return r.error();
  return db;
}

PostgresDatabase::PostgresDatabase(PostgresOptions options) : options_(std::move(options)) {}

PostgresDatabase::~PostgresDatabase() {
  forget_statements();
  if (conn_) PQfinish(conn_);
}

Result<void> PostgresDatabase::connect() {
  if (conn_) PQfinish(conn_);
  // Ours first, the URL last: what the URL says wins (libpq keeps the last value of a keyword).
  // Keepalives (idle 5 s, then 3 probes 2 s apart) and the TCP user timeout end a connection
  // whose server's machine vanished, which would otherwise hold a statement for many minutes.
  std::string timeout = std::to_string(options_.connect_timeout.count());
  const char* keys[] = {"connect_timeout",  "application_name", "keepalives",
                        "keepalives_idle",  "keepalives_count", "keepalives_interval",
                        "tcp_user_timeout", "dbname",           nullptr};
  const char* values[] = {timeout.c_str(), "switchboard",        "1",    "5", "3", "2",
                          "15000",         options_.url.c_str(), nullptr};
  conn_ = PQconnectdbParams(keys, values, 1);
  if (!conn_) return make_error(ErrorCode::Unavailable, "postgres: out of memory");
  if (PQstatus(conn_) != CONNECTION_OK)
    return make_error(ErrorCode::Unavailable,
                      "postgres: cannot connect: " + trimmed(PQerrorMessage(conn_)));
  PQsetNoticeProcessor(conn_, on_notice, nullptr);
  // The statements run below are not cached: a reconnect must not reuse results of the old one.
  auto one = [&](std::string_view sql) -> Result<std::string> {
    PGresult* res = PQexec(conn_, std::string(sql).c_str());
    auto status = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) {
      auto error = failure("setup", res ? PQresultErrorMessage(res) : nullptr);
      if (res) PQclear(res);
      return error;
    }
    std::string value = PQntuples(res) > 0 ? PQgetvalue(res, 0, 0) : "";
    PQclear(res);
    return value;
  };
  // A connection whose set-up failed half-way holds none of its locks: never used as it is.
  auto drop = [&](Error e) -> Result<void> {
    PQfinish(conn_);
    conn_ = nullptr;
    return e;
  };
  auto refuse = [&](std::string why) -> Result<void> {
    return drop(make_error(ErrorCode::Conflict, "postgres: " + why));
  };
  if (auto r = one("SELECT set_config('statement_timeout', '" +
                   std::to_string(options_.statement_timeout.count()) +
                   "ms', false) WHERE current_setting('statement_timeout') = '0'");
      !r)
    return drop(r.error());
  // The server's side of the keepalives too (unless the URL set them): a backend whose client
  // vanished would otherwise live on for hours, holding this node's locks against its next
  // connection.
  if (auto r =
          one("SELECT set_config(v.name, v.value, false) FROM (VALUES "
              "('tcp_keepalives_idle', '5'), ('tcp_keepalives_interval', '2'), "
              "('tcp_keepalives_count', '3'), ('tcp_user_timeout', '15000')) AS v(name, value) "
              "JOIN pg_settings s ON s.name = v.name WHERE s.source = 'default'");
      !r)
    return drop(r.error());
  // One server (or one cluster) per database and schema, one node per node ID (see the header);
  // held while the connection lives.
  bool clustered = !options_.node_id.empty();
  auto store =
      lock_call(clustered ? "pg_try_advisory_lock_shared" : "pg_try_advisory_lock", "store");
  if (!store) return drop(store.error());
  if (!*store)
    return refuse(clustered ? "the store (this database and schema) is in use by a Switchboard "
                              "server that is not a node of a cluster"
                            : "the store (this database and schema) is in use by another "
                              "Switchboard server");
  if (clustered) {
    auto node = lock_call("pg_try_advisory_lock", "node:" + options_.node_id);
    if (!node) return drop(node.error());
    if (!*node)
      return refuse("another node of this store's cluster has the node ID \"" + options_.node_id +
                    "\"; give each node its own cluster.nodeID");
  }
  if (clustered) {
    // The epochs of the named locks (take_lock). Nodes may start at once on a new store: the
    // table is made under a lock of its own.
    std::string made = "BEGIN; SELECT pg_advisory_xact_lock(" + lock_key_sql("'schema'") +
                       "); CREATE TABLE IF NOT EXISTS switchboard_lock (name TEXT COLLATE \"C\" "
                       "PRIMARY KEY, epoch BIGINT NOT NULL); COMMIT";
    if (auto r = one(made); !r) {
      (void)one("ROLLBACK");
      return drop(r.error());
    }
  }
  // What this connection held before it broke; another server may have taken some meanwhile,
  // or taken and given up (their epoch moved on).
  for (auto it = locks_.begin(); it != locks_.end();) {
    auto again = take_lock(it->first, it->second);
    if (!again) return drop(again.error());
    if (*again) {
      ++it;
      continue;
    }
    log::warn("postgres: the lock ", it->first,
              " was taken by another server while this one was cut off");
    lost_locks_.push_back(it->first);
    it = locks_.erase(it);
  }
  return {};
}

Result<std::optional<std::int64_t>> PostgresDatabase::take_lock(const std::string& name,
                                                                std::optional<std::int64_t> epoch) {
  auto taken = lock_call("pg_try_advisory_lock", name);
  if (!taken) return taken.error();
  if (!*taken) return std::optional<std::int64_t>{};
  auto value = epoch
                   ? value_of("SELECT epoch FROM switchboard_lock WHERE name = $1", {name}, "lock")
                   : value_of(
                         "INSERT INTO switchboard_lock(name, epoch) VALUES($1, 1) "
                         "ON CONFLICT(name) DO UPDATE SET epoch = switchboard_lock.epoch + 1 "
                         "RETURNING epoch",
                         {name}, "lock");
  if (!value) {
    // Not held without its epoch (a broken connection gave it up already).
    (void)lock_call("pg_advisory_unlock", name);
    return value.error();
  }
  std::int64_t now = *value ? std::atoll((*value)->c_str()) : 0;
  if (!epoch || now == *epoch) return std::optional<std::int64_t>{now};
  // Not ours to hold after all: what another server did under it came after our epoch.
  if (auto r = lock_call("pg_advisory_unlock", name); !r) return r.error();
  return std::optional<std::int64_t>{};
}

Result<std::optional<std::string>> PostgresDatabase::value_of(
    const std::string& sql, const std::vector<std::string>& parameters, std::string_view what) {
  std::vector<const char*> values;
  for (const auto& p : parameters)
    values.push_back(p.c_str());
  PGresult* res = PQexecParams(conn_, sql.c_str(), static_cast<int>(values.size()), nullptr,
                               values.data(), nullptr, nullptr, 0);
  if (!res || PQresultStatus(res) != PGRES_TUPLES_OK) {
    auto error = failure(what, res ? PQresultErrorMessage(res) : nullptr);
    if (res) PQclear(res);
    return error;
  }
  std::optional<std::string> out;
  if (PQntuples(res) > 0) out = PQgetvalue(res, 0, 0);
  PQclear(res);
  return out;
}

Result<bool> PostgresDatabase::lock_call(std::string_view function, const std::string& name) {
  // The store's own lock keeps the key servers before the cluster used (a 32-bit hash of the
  // store alone), so that an older server and a newer one still exclude each other on one store.
  bool store = name == "store";
  std::string key = store ? "hashtext('switchboard:' || current_database() || ':' || "
                            "coalesce(current_schema(), ''))"
                          : lock_key_sql("$1");
  std::vector<std::string> parameters;
  if (!store) parameters.push_back(name);
  auto value =
      value_of("SELECT " + std::string(function) + "(" + key + ")::int", parameters, "lock");
  if (!value) return value.error();
  return *value == "1";
}

Result<void> PostgresDatabase::lock_until_commit(const std::string& name) {
  if (auto r = ensure_connected("lock"); !r) return r;
  auto value =
      value_of("SELECT 1 FROM pg_advisory_xact_lock(" + lock_key_sql("$1") + ")", {name}, "lock");
  if (!value) return value.error();
  return {};
}

Result<bool> PostgresDatabase::try_lock(const std::string& name) {
  if (locks_.count(name)) return true;
  if (auto r = ensure_connected("lock"); !r) return r.error();
  auto taken = take_lock(name, std::nullopt);
  if (!taken) return taken.error();
  if (*taken) locks_.emplace(name, **taken);
  return taken->has_value();
}

void PostgresDatabase::unlock(const std::string& name) {
  if (!locks_.erase(name)) return;
  // A broken connection gave the lock up already; the next connection does not take it again.
  if (!conn_ || PQstatus(conn_) != CONNECTION_OK) return;
  if (auto r = lock_call("pg_advisory_unlock", name); !r)
    log::warn("postgres: could not give the lock ", name, " up: ", r.error().message);
}

std::vector<std::string> PostgresDatabase::take_lost_locks() {
  return std::exchange(lost_locks_, {});
}

Result<void> PostgresDatabase::ensure_connected(std::string_view next) {
  if (conn_ && PQstatus(conn_) == CONNECTION_OK) return {};
  // A connection that broke in a transaction took it with it (the server rolled it back): the
  // rest of it must not run on a new connection, each statement on its own, until it ends.
  if (in_transaction_ && next != "ROLLBACK")
    return make_error(ErrorCode::Unavailable,
                      "postgres: the connection was lost during a transaction");
  // While the server is away a statement fails at once, and connecting is tried again only so
  // often: each try blocks for up to connect_timeout (a refused connection returns at once).
  if (std::chrono::steady_clock::now() < retry_at_) return last_failure_;
  if (auto r = connect(); !r) {
    // From the failure on: a try that waited out connect_timeout is not followed by another at
    // once.
    retry_at_ = std::chrono::steady_clock::now() + kRetryEvery;
    last_failure_ = r.error();
    // Another server took the store while this one was cut off: for this server's requests the
    // store is gone, not a conflict of theirs.
    if (last_failure_.code == ErrorCode::Conflict) last_failure_.code = ErrorCode::Unavailable;
    log::warn(last_failure_.message);
    return last_failure_;
  }
  log::info("postgres: connected again");
  return {};
}

Error PostgresDatabase::failure(std::string_view what, const char* message) const {
  std::string text = trimmed(message && *message ? message : PQerrorMessage(conn_));
  bool broken = !conn_ || PQstatus(conn_) != CONNECTION_OK;
  return make_error(broken ? ErrorCode::Unavailable : ErrorCode::Internal,
                    "postgres: " + std::string(what) + ": " + text);
}

Result<void> PostgresDatabase::exec(std::string_view sql) {
  if (auto r = ensure_connected(sql); !r) return r;
  // PQexec runs several statements separated by ';' (the simple protocol), as a schema needs.
  PGresult* res = PQexec(conn_, std::string(sql).c_str());
  auto status = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
  Result<void> out;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK)
    out = failure("exec", res ? PQresultErrorMessage(res) : nullptr);
  if (res) PQclear(res);
  return out;
}

Result<std::unique_ptr<Cursor>> PostgresDatabase::compile(std::string_view sql, bool cached) {
  // Sent with its parameters at each run (the server parses it each time; a round trip costs
  // more than that).
  return std::unique_ptr<Cursor>(new PgCursor(*this, sql, cached));
}

}  // namespace sb::store
