#include "store/postgres.hpp"

#include <libpq-fe.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "util/log.hpp"
#include "util/text.hpp"

namespace sb::store {
namespace {

// Type OIDs of the integer columns a binary result may hold (PostgreSQL's pg_type.dat; they are
// fixed across versions).
constexpr Oid kBool = 16, kInt8 = 20, kInt2 = 21, kInt4 = 23;

using Clock = std::chrono::steady_clock;

// Between two tries to connect while the server is away.
constexpr std::chrono::seconds kRetryEvery{1};
// How long past statement_timeout a statement's answer may take: the server answers a statement
// it cancelled at once, so one that does not answer by then is gone (frozen, or cut off without a
// reset) and its connection is given up.
constexpr std::chrono::seconds kAnswerGrace{2};
// How often a statement's wait looks at what libpq holds (see send_and_read).
constexpr std::chrono::milliseconds kSlice{100};

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

enum class Waited { Ready, Late, Woken, Failed };

// Waits until `fd` is ready for `events`, `deadline` passes, or `wake` (an eventfd; -1: none) is
// signalled.
Waited wait_for_socket(int fd, short events, Clock::time_point deadline, int wake) {
  for (;;) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return Waited::Late;
    if (fd < 0) return Waited::Failed;
    // poll() skips a negative fd: without `wake` only the socket is watched.
    pollfd fds[2] = {{fd, events, 0}, {wake, POLLIN, 0}};
    int n = ::poll(fds, 2, static_cast<int>(std::min<long long>(left, INT_MAX)));
    if (n < 0 && errno != EINTR) return Waited::Failed;
    if (n <= 0) continue;
    if (fds[1].revents) return Waited::Woken;
    return Waited::Ready;  // also on an error or a hang-up: libpq's next call reports it
  }
}

// A statement's parameters as libpq takes them.
struct Parameters {
  int count = 0;
  const char* const* values = nullptr;
  const int* lengths = nullptr;
  const int* formats = nullptr;  // null: all text
  int result_format = 0;         // 0 text, 1 binary
};

// What a statement sent on a connection came to.
struct Reply {
  PGresult* result = nullptr;  // owned by the caller; null when `unusable`
  // The statement's results were not all read (it was not sent, the connection broke, or it was
  // `late`): the connection is out of step with the server, and is not used again.
  bool unusable = false;
  bool late = false;  // no answer by the deadline (or woken)
  bool ok() const {
    auto status = result ? PQresultStatus(result) : PGRES_FATAL_ERROR;
    return status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK;
  }
};

// Sends `sql` on `conn` (in non-blocking mode) and reads its results until `deadline`: libpq's
// asynchronous calls, so that a server that stopped answering costs at most the deadline, where
// PQexec would wait for the TCP timeouts (or, for a server that is frozen but whose machine
// answers, for ever). With `parameters` one statement is sent (the extended protocol);
// without, several separated by ';' may be (a schema). The result kept is the last one, as
// PQexec keeps it: after a statement that failed, none of the later ones runs.
Reply send_and_read(PGconn* conn, const std::string& sql, const Parameters* parameters,
                    Clock::time_point deadline, int wake) {
  Reply reply;
  auto give_up = [&] {
    if (reply.result) PQclear(reply.result);
    reply.result = nullptr;
    reply.unusable = true;
    return reply;
  };
  int sent = parameters ? PQsendQueryParams(conn, sql.c_str(), parameters->count, nullptr,
                                            parameters->values, parameters->lengths,
                                            parameters->formats, parameters->result_format)
                        : PQsendQuery(conn, sql.c_str());
  if (!sent) return give_up();
  // Waited for in slices: with TLS, libpq may hold bytes already decrypted that the socket no
  // longer shows, which only PQconsumeInput finds.
  auto waited = [&](short events) {
    auto w =
        wait_for_socket(PQsocket(conn), events, std::min(deadline, Clock::now() + kSlice), wake);
    if (w == Waited::Late && Clock::now() < deadline) w = Waited::Ready;
    reply.late = w == Waited::Late || w == Waited::Woken;
    return w == Waited::Ready;
  };
  // All of it sent first; while the socket takes no more, what the server sends is read (it may
  // be waiting for us to read before it reads on: libpq's documentation of PQflush).
  for (int left = PQflush(conn); left != 0; left = PQflush(conn))
    if (left < 0 || !waited(POLLIN | POLLOUT) || !PQconsumeInput(conn)) return give_up();
  for (;;) {
    while (PQisBusy(conn))
      if (!waited(POLLIN) || !PQconsumeInput(conn)) return give_up();
    PGresult* next = PQgetResult(conn);
    if (!next) return reply;
    if (reply.result) PQclear(reply.result);
    reply.result = next;
  }
}

// The error of a reply that is not a success, naming postgres and `what`. Unavailable exactly
// when the connection cannot go on (it broke, or the server did not answer in time).
Error reply_error(PGconn* conn, std::string_view what, const Reply& reply,
                  std::chrono::milliseconds waited) {
  if (reply.late)
    return make_error(ErrorCode::Unavailable, "postgres: " + std::string(what) +
                                                  ": no answer within " +
                                                  std::to_string(waited.count()) + " ms");
  const char* message = reply.result ? PQresultErrorMessage(reply.result) : nullptr;
  std::string text = trimmed(message && *message ? message : PQerrorMessage(conn));
  bool broken = reply.unusable || PQstatus(conn) != CONNECTION_OK;
  return make_error(broken ? ErrorCode::Unavailable : ErrorCode::Internal,
                    "postgres: " + std::string(what) + ": " + text);
}

// `sql` sent on `conn` and answered within `waited`: its result (the caller's to PQclear), or the
// error (reply_error).
Result<PGresult*> run_on(PGconn* conn, const std::string& sql, const Parameters* parameters,
                         std::chrono::milliseconds waited, std::string_view what, int wake) {
  Reply reply = send_and_read(conn, sql, parameters, Clock::now() + waited, wake);
  if (reply.ok()) return reply.result;
  auto error = reply_error(conn, what, reply, waited);
  if (reply.result) PQclear(reply.result);
  return error;
}

// How long a statement's answer may take, given the statement_timeout the server keeps (see
// kAnswerGrace). With none (0: the URL or the server's configuration turned it off), the option's.
std::chrono::milliseconds answer_time(std::chrono::milliseconds server_timeout,
                                      const PostgresOptions& options) {
  return (server_timeout.count() > 0 ? server_timeout : options.statement_timeout) + kAnswerGrace;
}

// A connection set up, and how long its statements' answers may take.
struct Connection {
  PGconn* conn = nullptr;
  std::chrono::milliseconds answer_within{0};
};

// The first column of the first row of `sql` with its parameters ($1, ...), as text (nullopt: no
// row); `what` names it in an error. `parameters` empty: sent as a simple query (it may be
// several statements).
Result<std::optional<std::string>> value_on(PGconn* conn, std::chrono::milliseconds waited,
                                            const std::string& sql,
                                            const std::vector<std::string>& parameters,
                                            std::string_view what, int wake = -1) {
  std::vector<const char*> values;
  for (const auto& p : parameters)
    values.push_back(p.c_str());
  Parameters bound{.count = static_cast<int>(values.size()), .values = values.data()};
  auto result = run_on(conn, sql, parameters.empty() ? nullptr : &bound, waited, what, wake);
  if (!result) return result.error();
  std::optional<std::string> out;
  if (PQntuples(*result) > 0) out = PQgetvalue(*result, 0, 0);
  PQclear(*result);
  return out;
}

// Runs an advisory lock function (pg_try_advisory_lock, ..._shared, pg_advisory_unlock) on the
// lock named `name` in this store; what it returned.
Result<bool> lock_call_on(PGconn* conn, std::chrono::milliseconds waited, std::string_view function,
                          const std::string& name, int wake = -1) {
  // The store's own lock keeps the key servers before the cluster used (a 32-bit hash of the
  // store alone), so that an older server and a newer one still exclude each other on one store.
  bool store = name == "store";
  std::string key = store ? "hashtext('switchboard:' || current_database() || ':' || "
                            "coalesce(current_schema(), ''))"
                          : lock_key_sql("$1");
  std::vector<std::string> parameters;
  if (!store) parameters.push_back(name);
  auto value = value_on(conn, waited, "SELECT " + std::string(function) + "(" + key + ")::int",
                        parameters, "lock", wake);
  if (!value) return value.error();
  return *value == "1";
}

// Connects and sets the connection up as the header says, holding the store's lock (and the
// node's): what open() and every reconnect make. `wake` (an eventfd; -1: none) ends a connect
// or a set-up statement that is still waiting. On a failure nothing is left open.
Result<Connection> open_connection(const PostgresOptions& options, int wake) {
  // Ours first, the URL last: what the URL says wins (libpq keeps the last value of a keyword).
  // Keepalives (idle 5 s, then 3 probes 2 s apart) and the TCP user timeout end a connection
  // whose server's machine vanished, which would otherwise hold a statement for many minutes.
  // connect_timeout is not libpq's to keep here (PQconnectPoll ignores it): the wait below is
  // bounded by it.
  const char* keys[] = {
      "application_name",    "keepalives",       "keepalives_idle", "keepalives_count",
      "keepalives_interval", "tcp_user_timeout", "dbname",          nullptr};
  const char* values[] = {"switchboard", "1", "5", "3", "2", "15000", options.url.c_str(), nullptr};
  PGconn* conn = PQconnectStartParams(keys, values, 1);
  if (!conn) return make_error(ErrorCode::Unavailable, "postgres: out of memory");
  auto fail = [&](Error e) -> Result<Connection> {
    PQfinish(conn);
    return e;
  };
  auto cannot = [&](std::string why) {
    return fail(make_error(ErrorCode::Unavailable, "postgres: cannot connect: " + why));
  };
  // libpq's own loop (PQconnectPoll: it may move on to another address or host, and with it to
  // another socket), waited for with a deadline and a way to be woken.
  auto deadline = Clock::now() + options.connect_timeout;
  auto polled = PQstatus(conn) == CONNECTION_BAD ? PGRES_POLLING_FAILED : PGRES_POLLING_WRITING;
  while (polled != PGRES_POLLING_OK) {
    if (polled == PGRES_POLLING_FAILED) return cannot(trimmed(PQerrorMessage(conn)));
    auto w = wait_for_socket(PQsocket(conn), polled == PGRES_POLLING_READING ? POLLIN : POLLOUT,
                             deadline, wake);
    if (w == Waited::Late) return cannot("timeout expired");
    if (w == Waited::Woken) return cannot("the server is stopping");
    if (w == Waited::Failed) return cannot("its socket failed");
    polled = PQconnectPoll(conn);
  }
  if (PQsetnonblocking(conn, 1) != 0) return cannot(trimmed(PQerrorMessage(conn)));
  PQsetNoticeProcessor(conn, on_notice, nullptr);
  Connection made{conn, answer_time(std::chrono::milliseconds(0), options)};
  auto one = [&](const std::string& sql) {
    return value_on(conn, made.answer_within, sql, {}, "setup", wake);
  };
  if (auto r = one("SELECT set_config('statement_timeout', '" +
                   std::to_string(options.statement_timeout.count()) +
                   "ms', false) WHERE current_setting('statement_timeout') = '0'");
      !r)
    return fail(r.error());
  // The timeout the server keeps (the URL's or its configuration's wins over ours), in ms: the
  // answers are waited for by it.
  auto kept = one("SELECT setting FROM pg_settings WHERE name = 'statement_timeout'");
  if (!kept) return fail(kept.error());
  made.answer_within =
      answer_time(std::chrono::milliseconds(*kept ? std::atoll((*kept)->c_str()) : 0), options);
  // The server's side of the keepalives too (unless the URL set them): a backend whose client
  // vanished would otherwise live on for hours, holding this node's locks against its next
  // connection.
  if (auto r =
          one("SELECT set_config(v.name, v.value, false) FROM (VALUES "
              "('tcp_keepalives_idle', '5'), ('tcp_keepalives_interval', '2'), "
              "('tcp_keepalives_count', '3'), ('tcp_user_timeout', '15000')) AS v(name, value) "
              "JOIN pg_settings s ON s.name = v.name WHERE s.source = 'default'");
      !r)
    return fail(r.error());
  // One server (or one cluster) per database and schema, one node per node ID (see the header);
  // held while the connection lives.
  auto refuse = [&](std::string why) {
    return fail(make_error(ErrorCode::Conflict, "postgres: " + why));
  };
  bool clustered = !options.node_id.empty();
  auto store = lock_call_on(conn, made.answer_within,
                            clustered ? "pg_try_advisory_lock_shared" : "pg_try_advisory_lock",
                            "store", wake);
  if (!store) return fail(store.error());
  if (!*store)
    return refuse(clustered ? "the store (this database and schema) is in use by a Switchboard "
                              "server that is not a node of a cluster"
                            : "the store (this database and schema) is in use by another "
                              "Switchboard server");
  if (clustered) {
    auto node = lock_call_on(conn, made.answer_within, "pg_try_advisory_lock",
                             "node:" + options.node_id, wake);
    if (!node) return fail(node.error());
    if (!*node)
      return refuse("another node of this store's cluster has the node ID \"" + options.node_id +
                    "\"; give each node its own cluster.nodeID");
    // The epochs of the named locks (take_lock). Nodes may start at once on a new store: the
    // table is made under a lock of its own. A failure closes the connection, and the
    // transaction with it.
    std::string lock_table =
        "BEGIN; SELECT pg_advisory_xact_lock(" + lock_key_sql("'schema'") +
        "); CREATE TABLE IF NOT EXISTS switchboard_lock (name TEXT COLLATE \"C\" "
        "PRIMARY KEY, epoch BIGINT NOT NULL); COMMIT";
    if (auto r = one(lock_table); !r) return fail(r.error());
  }
  return made;
}
}  // namespace

// Makes connections on a thread of its own, so that a caller (the server's event loop) never
// waits for a connect: up to connect_timeout for a server that does not answer, tried again every
// kRetryEvery until one is made.
class PostgresDatabase::Connector {
 public:
  explicit Connector(PostgresOptions options)
      : options_(std::move(options)), wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
  ~Connector() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    // Ends a connect or a set-up statement in flight at once.
    std::uint64_t one = 1;
    if (wake_ >= 0 && ::write(wake_, &one, sizeof one) < 0) log::debug("postgres: wake failed");
    if (thread_.joinable()) thread_.join();
    if (ready_.conn) PQfinish(ready_.conn);
    if (wake_ >= 0) ::close(wake_);
  }
  Connector(const Connector&) = delete;
  Connector& operator=(const Connector&) = delete;

  // A connection is wanted (again): one is made unless one is being made or waits to be taken.
  void want() {
    std::lock_guard lock(mutex_);
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    wanted_ = true;
    changed_.notify_all();
  }
  // The connection made since it was wanted (conn null: none yet).
  Connection take() {
    std::lock_guard lock(mutex_);
    return std::exchange(ready_, Connection{});
  }
  // The error of the last try since the last connection was made (nullopt: none).
  std::optional<Error> last_error() {
    std::lock_guard lock(mutex_);
    return error_;
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return stop_ || (wanted_ && !ready_.conn); });
      if (stop_) return;
      lock.unlock();
      auto made = open_connection(options_, wake_);
      lock.lock();
      if (made) {
        ready_ = *made;
        wanted_ = false;
        error_.reset();
        continue;
      }
      // Said once per outage (and again when the reason changes), not every second.
      if (!error_ || error_->message != made.error().message) log::warn(made.error().message);
      error_ = made.error();
      changed_.wait_for(lock, kRetryEvery, [&] { return stop_; });
    }
  }

  const PostgresOptions options_;
  const int wake_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::thread thread_;
  bool stop_ = false;
  bool wanted_ = false;
  Connection ready_;
  std::optional<Error> error_;
};

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
    // What the connection is in: a transaction begins with a BEGIN that succeeded (one that
    // failed opened none, and its guard sends no ROLLBACK) and ends at COMMIT or ROLLBACK, failed
    // or not (the Transaction guard sends ROLLBACK after a failed COMMIT). A transaction whose
    // connection is gone ended with it: its ROLLBACK has nothing to do, and needs no server.
    bool begin = sql_ == "BEGIN" || sql_ == "BEGIN IMMEDIATE";
    if (sql_ == "ROLLBACK") {
      db_.in_transaction_ = false;
      if (!db_.connected()) return false;
    }
    if (auto r = db_.ensure_connected(sql_); !r) return r.error();
    std::vector<const char*> values(values_.size());
    std::vector<int> lengths(values_.size());
    for (std::size_t i = 0; i < values_.size(); ++i) {
      if (!values_[i]) continue;
      values[i] = values_[i]->data();
      lengths[i] = static_cast<int>(values_[i]->size());
    }
    Parameters bound{.count = static_cast<int>(values_.size()),
                     .values = values.data(),
                     .lengths = lengths.data(),
                     .formats = formats_.data(),
                     .result_format = 1};
    auto result = run_on(db_.conn_, sql_, &bound, db_.answer_within_, "statement", -1);
    if (!result) {
      db_.give_up_if_unusable(result.error());
      return result.error();
    }
    result_ = *result;
    db_.changes_ = std::atoll(PQcmdTuples(result_));
    if (begin) db_.in_transaction_ = true;
    if (sql_ == "COMMIT") db_.in_transaction_ = false;
    row_ = 0;
    return PQntuples(result_) > 0;
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
  // A connect_timeout in the URL wins over the option, as libpq's own would; the connects are
  // ours to time (open_connection).
  for (auto* o = parsed; o->keyword; ++o)
    if (std::string_view(o->keyword) == "connect_timeout" && o->val && std::atoi(o->val) > 0)
      options.connect_timeout = std::chrono::seconds(std::atoi(o->val));
  PQconninfoFree(parsed);
  // The first connection is made by the caller (a server that starts waits for its store).
  auto conn = open_connection(options, -1);
  if (!conn) return conn.error();
  std::unique_ptr<PostgresDatabase> db(new PostgresDatabase(std::move(options)));
  db->conn_ = conn->conn;
  db->answer_within_ = conn->answer_within;
  return db;
}

PostgresDatabase::PostgresDatabase(PostgresOptions options)
    : options_(std::move(options)), connector_(std::make_unique<Connector>(options_)) {}

PostgresDatabase::~PostgresDatabase() {
  forget_statements();
  connector_.reset();
  if (conn_) PQfinish(conn_);
}

bool PostgresDatabase::connected() const {
  return conn_ && PQstatus(conn_) == CONNECTION_OK;
}

void PostgresDatabase::give_up_if_unusable(const Error& error) {
  // Unavailable is what a broken connection, or one whose server did not answer in time, fails
  // with (reply_error); the latter's state is out of step with the server's, so it is not used
  // again either.
  if (error.code == ErrorCode::Unavailable) drop_connection();
}

void PostgresDatabase::drop_connection() {
  if (!conn_) return;
  PQfinish(conn_);
  conn_ = nullptr;
  connector_->want();
}

Result<void> PostgresDatabase::take_locks_again() {
  // What the last connection held before it broke; another server may have taken some
  // meanwhile, or taken and given up (their epoch moved on).
  for (auto it = locks_.begin(); it != locks_.end();) {
    auto again = take_lock(it->first, it->second);
    if (!again) return again.error();
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
    if (conn_) (void)lock_call("pg_advisory_unlock", name);
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
  if (!conn_)
    return make_error(ErrorCode::Unavailable,
                      "postgres: " + std::string(what) + ": the connection was lost");
  auto value = value_on(conn_, answer_within_, sql, parameters, what);
  if (!value) give_up_if_unusable(value.error());
  return value;
}

Result<bool> PostgresDatabase::lock_call(std::string_view function, const std::string& name) {
  if (!conn_) return make_error(ErrorCode::Unavailable, "postgres: lock: the connection was lost");
  auto called = lock_call_on(conn_, answer_within_, function, name);
  if (!called) give_up_if_unusable(called.error());
  return called;
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
  if (!connected()) return;
  if (auto r = lock_call("pg_advisory_unlock", name); !r)
    log::warn("postgres: could not give the lock ", name, " up: ", r.error().message);
}

std::vector<std::string> PostgresDatabase::take_lost_locks() {
  return std::exchange(lost_locks_, {});
}

Result<void> PostgresDatabase::ensure_connected(std::string_view next) {
  if (connected()) return {};
  drop_connection();
  // A connection that broke in a transaction took it with it (the server rolled it back): the
  // rest of it must not run on a new connection, each statement on its own, until it ends.
  if (in_transaction_ && next != "ROLLBACK")
    return make_error(ErrorCode::Unavailable,
                      "postgres: the connection was lost during a transaction");
  // Connecting is the connector's (on its thread): the caller takes a connection it made, or
  // fails at once, never waiting for the server.
  if (Connection made = connector_->take(); made.conn) {
    conn_ = made.conn;
    answer_within_ = made.answer_within;
    if (auto r = take_locks_again(); !r) {
      drop_connection();
      return r;
    }
    log::info("postgres: connected again");
    return {};
  }
  connector_->want();
  auto error = connector_->last_error();
  if (!error)
    return make_error(ErrorCode::Unavailable,
                      "postgres: the connection was lost; connecting again");
  // Another server took the store while this one was cut off: for this server's requests the
  // store is gone, not a conflict of theirs.
  if (error->code == ErrorCode::Conflict) error->code = ErrorCode::Unavailable;
  return *error;
}

Result<void> PostgresDatabase::exec(std::string_view sql) {
  if (auto r = ensure_connected(sql); !r) return r;
  // Without parameters, a simple query: it may be several statements separated by ';', as a
  // schema is.
  if (auto r = value_of(std::string(sql), {}, "exec"); !r) return r.error();
  return {};
}

Result<std::unique_ptr<Cursor>> PostgresDatabase::compile(std::string_view sql, bool cached) {
  // Sent with its parameters at each run (the server parses it each time; a round trip costs
  // more than that).
  return std::unique_ptr<Cursor>(new PgCursor(*this, sql, cached));
}

}  // namespace sb::store
