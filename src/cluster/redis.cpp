#include "cluster/redis.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/url/parse.hpp>

#include <hiredis/hiredis.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <exception>
#include <functional>
#include <utility>
#include <variant>

#include "util/log.hpp"

namespace sb::cluster {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
// After a failed connect: no new attempt before this, so a Redis that is down gets no storm.
constexpr std::chrono::seconds kBackoff{1};

Error unavailable(std::string what, const std::string& where) {
  return make_error(ErrorCode::Unavailable, "redis: " + what + " (" + where + ")");
}

Error bad_url(std::string what) {
  return make_error(ErrorCode::InvalidRequest, "redis URL: " + what);
}

// hiredis formats the command; the bytes are copied into a string of ours.
Result<std::string> encode(const std::vector<std::string>& args) {
  if (args.empty()) return make_error(ErrorCode::InvalidRequest, "redis: empty command");
  std::vector<const char*> argv;
  std::vector<std::size_t> lengths;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lengths.push_back(a.size());
  }
  char* out = nullptr;
  int n = redisFormatCommandArgv(&out, static_cast<int>(args.size()), argv.data(), lengths.data());
  if (n < 0 || !out) return make_error(ErrorCode::InvalidRequest, "redis: cannot encode command");
  std::string bytes(out, static_cast<std::size_t>(n));
  redisFreeCommand(out);
  return bytes;
}

RedisReply convert(const redisReply& r) {
  using T = RedisReply::Type;
  RedisReply out;
  out.type = r.type == REDIS_REPLY_INTEGER  ? T::Integer
             : r.type == REDIS_REPLY_STRING ? T::String
             : r.type == REDIS_REPLY_STATUS ? T::Status
             : r.type == REDIS_REPLY_ERROR  ? T::Error
             : r.type == REDIS_REPLY_ARRAY  ? T::Array
                                            : T::Nil;
  if (out.type == T::Integer) out.integer = r.integer;
  if (out.type == T::String || out.type == T::Status || out.type == T::Error)
    out.str.assign(r.str, r.len);
  for (std::size_t i = 0; out.type == T::Array && i < r.elements; ++i)
    out.elements.push_back(convert(*r.element[i]));
  return out;
}

// The URL, and a client name Redis would accept (checked now rather than at every connect).
Result<RedisUrl> check_options(const RedisOptions& options) {
  for (char ch : options.client_name)
    if (ch <= ' ' || ch > '~')
      return make_error(ErrorCode::InvalidRequest,
                        "redis: the client name may hold only printable characters, no spaces");
  return parse_redis_url(options.url);
}

}  // namespace

namespace detail {

// One TCP connection and its reply parser. close() ends every wait on it.
struct RedisConnection {
  RedisConnection(asio::any_io_executor executor, const RedisUrl& url)
      : socket(executor),
        resolver(executor),
        wake(executor),
        reader(redisReaderCreate()),
        where(url.host + ":" + std::to_string(url.port)) {
    if (!reader) throw std::bad_alloc();
  }
  ~RedisConnection() { redisReaderFree(reader); }

  void close() {
    closed = true;
    boost::system::error_code ignored;
    resolver.cancel();
    socket.close(ignored);
    wake.cancel();
  }

  tcp::socket socket;
  tcp::resolver resolver;
  asio::steady_timer wake;  // the writer sleeps on it while there is nothing to send
  redisReader* reader;
  std::string where;  // host:port, for messages
  bool closed = false;
  std::array<char, 16 * 1024> buffer;
};

}  // namespace detail

namespace {

using detail::RedisConnection;

// The next reply on `c`, reading as much as it takes. An error when the connection ends or
// what came is not RESP (the parser cannot go on after that: the caller closes).
asio::awaitable<Result<RedisReply>> read_reply(RedisConnection& c) {
  for (;;) {
    void* raw = nullptr;
    if (redisReaderGetReply(c.reader, &raw) != REDIS_OK)
      co_return unavailable(std::string("protocol error: ") + c.reader->errstr, c.where);
    if (raw) {
      RedisReply reply = convert(*static_cast<redisReply*>(raw));
      freeReplyObject(raw);
      co_return reply;
    }
    auto [ec, n] = co_await c.socket.async_read_some(asio::buffer(c.buffer), kTuple);
    if (c.closed) co_return unavailable("connection closed", c.where);
    if (ec == asio::error::eof) co_return unavailable("the server closed the connection", c.where);
    if (ec) co_return unavailable("connection lost: " + ec.message(), c.where);
    if (redisReaderFeed(c.reader, c.buffer.data(), n) != REDIS_OK)
      co_return unavailable(std::string("protocol error: ") + c.reader->errstr, c.where);
  }
}

// Resolve, connect and the opening commands, without a deadline (open() gives it one).
asio::awaitable<Result<void>> open_unbounded(RedisConnection& c, const RedisUrl& url,
                                             const RedisOptions& options, bool select_db) {
  boost::system::error_code aec;
  auto address = asio::ip::make_address(url.host, aec);
  if (!aec) {  // an address: no resolver (its first use starts a thread)
    auto [ec] = co_await c.socket.async_connect(tcp::endpoint(address, url.port), kTuple);
    if (ec) co_return unavailable("cannot connect: " + ec.message(), c.where);
  } else {
    auto [rec, endpoints] =
        co_await c.resolver.async_resolve(url.host, std::to_string(url.port), kTuple);
    if (rec) co_return unavailable("cannot resolve the host: " + rec.message(), c.where);
    auto [ec, endpoint] = co_await asio::async_connect(c.socket, endpoints, kTuple);
    if (ec) co_return unavailable("cannot connect: " + ec.message(), c.where);
  }
  boost::system::error_code ignored;
  c.socket.set_option(tcp::no_delay(true), ignored);

  std::vector<std::vector<std::string>> opening;
  if (!url.password.empty())  // AUTH [user] password: the user only when the URL has one
    opening.push_back(url.user.empty() ? std::vector<std::string>{"AUTH", url.password}
                                       : std::vector<std::string>{"AUTH", url.user, url.password});
  if (select_db && url.db != 0) opening.push_back({"SELECT", std::to_string(url.db)});
  if (!options.client_name.empty()) opening.push_back({"CLIENT", "SETNAME", options.client_name});
  if (opening.empty()) co_return Result<void>();
  std::string bytes;
  for (const auto& command : opening)
    bytes += *encode(command);
  auto [wec, written] = co_await asio::async_write(c.socket, asio::buffer(bytes), kTuple);
  if (wec) co_return unavailable("connection lost: " + wec.message(), c.where);
  for (const auto& command : opening) {
    auto reply = co_await read_reply(c);
    if (!reply) co_return reply.error();
    if (reply->type == RedisReply::Type::Error) {
      // Names the command, never its arguments past the first (AUTH's are the secret).
      std::string name = command[0] == "SELECT" ? "SELECT " + command[1]
                         : command[0] == "AUTH" ? "AUTH"
                                                : "CLIENT SETNAME";
      co_return unavailable(name + " refused: " + reply->str, c.where);
    }
  }
  co_return Result<void>();
}

// The connection's opening, within connect_timeout.
asio::awaitable<Result<void>> open(RedisConnection& c, const RedisUrl& url,
                                   const RedisOptions& options, bool select_db) {
  using namespace asio::experimental::awaitable_operators;
  asio::steady_timer timer(c.socket.get_executor(), options.connect_timeout);
  // Both branches report errors as values: in Boost 1.81 a throwing branch would not end the
  // other. The timer's end cancels the opening's operation in flight.
  auto r = co_await (open_unbounded(c, url, options, select_db) || timer.async_wait(kTuple));
  if (r.index() == 1) {
    c.close();
    co_return unavailable(
        "no connection within " + std::to_string(options.connect_timeout.count()) + " ms", c.where);
  }
  co_return std::get<0>(std::move(r));
}

// Writes what `take` hands out (all that is queued, in one write), sleeping on conn.wake while
// there is nothing. Closes the connection when a write fails, which ends the reader's wait.
asio::awaitable<Error> write_loop(std::shared_ptr<RedisConnection> conn,
                                  std::function<std::string()> take) {
  for (;;) {
    if (conn->closed) co_return unavailable("connection closed", conn->where);
    std::string batch = take();
    if (batch.empty()) {
      conn->wake.expires_at(Clock::time_point::max());
      co_await conn->wake.async_wait(kTuple);  // cancelled when there is more, and by close()
      continue;
    }
    auto [ec, n] = co_await asio::async_write(conn->socket, asio::buffer(batch), kTuple);
    if (ec) {
      conn->close();
      co_return unavailable("connection lost: " + ec.message(), conn->where);
    }
  }
}

template <class... E>
Error first_error(std::variant<E...> v) {
  return std::visit([](Error& e) { return std::move(e); }, v);
}

void log_exception(std::exception_ptr e) {
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    log::error("redis: a connection's coroutine failed: ", ex.what());
  }
}

}  // namespace

Result<RedisUrl> parse_redis_url(std::string_view text) {
  auto parsed = boost::urls::parse_uri(text);
  if (!parsed) return bad_url("not a URL (expected redis://[[user]:password@]host[:port][/db])");
  const auto& u = *parsed;
  if (u.scheme() == "rediss") return bad_url("TLS (rediss://) is not supported");
  if (u.scheme() != "redis") return bad_url("the scheme must be redis://");
  RedisUrl url;
  url.host = u.host_address();
  if (url.host.empty()) return bad_url("no host");
  if (u.has_port()) {
    auto port = u.port();
    unsigned value = 0;
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535)
      return bad_url("the port must be a number from 1 to 65535");
    url.port = static_cast<std::uint16_t>(value);
  }
  if (u.has_userinfo()) {
    url.user = u.user();
    if (!u.has_password())
      return bad_url("a user without a password (expected redis://[user]:password@host)");
    url.password = u.password();
    if (url.password.empty()) return bad_url("an empty password");
  }
  std::string_view path(u.encoded_path().data(), u.encoded_path().size());
  if (!path.empty() && path != "/") {
    auto digits = path.substr(1);
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), url.db);
    if (path[0] != '/' || ec != std::errc() || end != digits.data() + digits.size() || url.db < 0)
      return bad_url("the path must be a database number, like /0");
  }
  if (u.has_query() || u.has_fragment()) return bad_url("no query or fragment is supported");
  return url;
}

// ---------------------------------------------------------------------------------------------
// RedisClient

// A command: its bytes until written, and its outcome once known. The timer is both the deadline
// and the wake-up: finish() cancels it after setting the outcome.
struct RedisClient::Op {
  Op(asio::any_io_executor executor, std::string b) : bytes(std::move(b)), timer(executor) {}
  std::string bytes;
  asio::steady_timer timer;
  std::optional<Result<RedisReply>> outcome;
};

Result<std::shared_ptr<RedisClient>> RedisClient::create(asio::any_io_executor executor,
                                                         RedisOptions options) {
  auto url = check_options(options);
  if (!url) return url.error();
  return std::shared_ptr<RedisClient>(
      new RedisClient(std::move(executor), std::move(options), std::move(*url)));
}

RedisClient::RedisClient(asio::any_io_executor executor, RedisOptions options, RedisUrl url)
    : executor_(std::move(executor)), options_(std::move(options)), url_(std::move(url)) {}

asio::awaitable<Result<RedisReply>> RedisClient::command(std::vector<std::string> args) {
  auto self = shared_from_this();  // the connection's loops may be all that holds it otherwise
  // Already cancelled: a value now (the wait below would throw operation_aborted instead).
  if ((co_await asio::this_coro::cancellation_state).cancelled() != asio::cancellation_type::none)
    co_return make_error(ErrorCode::Unavailable, "redis: stopped waiting");
  if (state_ == State::Closed) co_return make_error(ErrorCode::Unavailable, "redis: closed");
  auto bytes = encode(args);
  if (!bytes) co_return bytes.error();
  if (unsent_.size() + unanswered_.size() >= options_.max_waiting)
    co_return make_error(ErrorCode::Unavailable, "redis: too many commands waiting (" +
                                                     std::to_string(options_.max_waiting) + ")");
  if (state_ == State::Idle) {
    if (failed_at_ && Clock::now() - *failed_at_ < kBackoff && last_error_)
      co_return make_error(ErrorCode::Unavailable, *last_error_);
    start_connecting();
  }
  auto op = std::make_shared<Op>(executor_, std::move(*bytes));
  op->timer.expires_after(options_.command_timeout);
  unsent_.push_back(op);
  if (state_ == State::Connected) conn_->wake.cancel();

  auto [ec] = co_await op->timer.async_wait(kTuple);
  if (op->outcome) co_return std::move(*op->outcome);
  // No outcome: the deadline passed, or the caller stopped waiting (its cancellation slot).
  auto timed_out =
      unavailable("no reply within " + std::to_string(options_.command_timeout.count()) + " ms",
                  url_.host + ":" + std::to_string(url_.port));
  if (auto it = std::find(unsent_.begin(), unsent_.end(), op); it != unsent_.end()) {
    unsent_.erase(it);  // never written: nothing to match, the connection can go on
    if (ec) co_return make_error(ErrorCode::Unavailable, "redis: stopped waiting");
    co_return timed_out;
  }
  if (ec) {
    // Written: it stays in unanswered_, so its reply is read (and dropped) in its turn.
    co_return make_error(ErrorCode::Unavailable,
                         "redis: stopped waiting (the command may still run)");
  }
  // Written and not answered in time: whatever comes next on this connection could be this
  // command's late reply, so the connection goes and every command on it fails.
  drop(timed_out);
  co_return timed_out;
}

void RedisClient::start_connecting() {
  state_ = State::Connecting;
  conn_ = std::make_shared<RedisConnection>(executor_, url_);
  asio::co_spawn(executor_, run(shared_from_this(), conn_),
                 [](std::exception_ptr e) { log_exception(e); });
}

void RedisClient::finish(Op& op, Result<RedisReply> outcome) {
  if (op.outcome) return;
  op.outcome = std::move(outcome);
  op.timer.cancel();  // the waiting command() resumes (posted, never from in here)
}

// Ends the connection and fails every command: queued ones too, as a lost connection is what
// the caller wants to hear about at once, not after a reconnect that may fail again.
void RedisClient::drop(const Error& error) {
  if (conn_) {
    conn_->close();
    conn_.reset();
  }
  if (state_ != State::Closed) state_ = State::Idle;
  last_error_ = error.message;
  auto answered = std::move(unanswered_);
  auto queued = std::move(unsent_);
  unanswered_.clear();
  unsent_.clear();
  for (auto& op : answered)
    finish(*op, error);
  for (auto& op : queued)
    finish(*op, error);
}

void RedisClient::close() {
  if (state_ == State::Closed) return;
  state_ = State::Closed;
  drop(make_error(ErrorCode::Unavailable, "redis: closed"));
}

asio::awaitable<void> RedisClient::run(std::shared_ptr<RedisClient> self,
                                       std::shared_ptr<RedisConnection> conn) {
  auto opened = co_await open(*conn, self->url_, self->options_, /*select_db=*/true);
  if (self->conn_ != conn) co_return;  // closed meanwhile
  if (!opened) {
    self->failed_at_ = Clock::now();
    self->drop(opened.error());
    co_return;
  }
  self->state_ = State::Connected;
  self->last_error_.reset();
  self->failed_at_.reset();
  // Takes the queued commands: they wait for their replies from here on, in this order. A named
  // function, not a lambda in the co_await expression below (a GCC 12 bug, design.md).
  std::function<std::string()> take = [self] {
    std::string batch;
    for (auto& op : self->unsent_) {
      batch += op->bytes;
      op->bytes = {};
      self->unanswered_.push_back(std::move(op));
    }
    self->unsent_.clear();
    return batch;
  };
  using namespace asio::experimental::awaitable_operators;
  auto ended = co_await (read_loop(self, conn) || write_loop(conn, std::move(take)));
  if (self->conn_ == conn) self->drop(first_error(std::move(ended)));
}

// Closes the connection when it fails, which ends the writer's wait.
asio::awaitable<Error> RedisClient::read_loop(std::shared_ptr<RedisClient> self,
                                              std::shared_ptr<RedisConnection> conn) {
  for (;;) {
    auto reply = co_await read_reply(*conn);
    if (!reply || self->conn_ != conn) {
      conn->close();
      co_return reply ? unavailable("connection closed", conn->where) : reply.error();
    }
    if (self->unanswered_.empty()) {
      conn->close();
      co_return unavailable("a reply came for no command", conn->where);
    }
    auto op = std::move(self->unanswered_.front());
    self->unanswered_.pop_front();
    self->finish(*op, std::move(*reply));
  }
}

// ---------------------------------------------------------------------------------------------
// RedisSubscriber

Result<std::shared_ptr<RedisSubscriber>> RedisSubscriber::create(asio::any_io_executor executor,
                                                                 RedisOptions options,
                                                                 MessageHandler on_message,
                                                                 StateHandler on_state) {
  auto url = check_options(options);
  if (!url) return url.error();
  return std::shared_ptr<RedisSubscriber>(
      new RedisSubscriber(std::move(executor), std::move(options), std::move(*url),
                          std::move(on_message), std::move(on_state)));
}

RedisSubscriber::RedisSubscriber(asio::any_io_executor executor, RedisOptions options, RedisUrl url,
                                 MessageHandler on_message, StateHandler on_state)
    : executor_(executor),
      options_(std::move(options)),
      url_(std::move(url)),
      on_message_(std::move(on_message)),
      on_state_(std::move(on_state)),
      backoff_(executor) {}

void RedisSubscriber::subscribe(std::string channel) {
  if (!channels_.insert(channel).second) return;
  if (ready_) send({"SUBSCRIBE", std::move(channel)});
}

void RedisSubscriber::unsubscribe(std::string channel) {
  if (channels_.erase(channel) == 0) return;
  if (ready_) send({"UNSUBSCRIBE", std::move(channel)});
}

void RedisSubscriber::start() {
  if (started_ || closed_) return;
  started_ = true;
  asio::co_spawn(executor_, run(shared_from_this()),
                 [](std::exception_ptr e) { log_exception(e); });
}

void RedisSubscriber::close() {
  if (closed_) return;
  closed_ = true;
  up_ = false;
  if (conn_) conn_->close();
  backoff_.cancel();
}

void RedisSubscriber::send(std::vector<std::string> args) {
  if (!conn_) return;
  auto bytes = encode(args);
  if (!bytes) return;  // a channel name always encodes
  outbox_ += *bytes;
  conn_->wake.cancel();
}

asio::awaitable<void> RedisSubscriber::run(std::shared_ptr<RedisSubscriber> self) {
  using namespace asio::experimental::awaitable_operators;
  std::string logged;  // a failure is logged once, not every second while Redis is down
  while (!self->closed_) {
    auto conn = std::make_shared<RedisConnection>(self->executor_, self->url_);
    self->conn_ = conn;
    // SELECT does not matter: pub/sub channels are the same in every database.
    auto opened = co_await open(*conn, self->url_, self->options_, /*select_db=*/false);
    Error ended = opened ? Error{} : opened.error();
    if (opened && !self->closed_) {
      logged.clear();
      self->ready_ = true;
      self->confirms_due_ = self->channels_.size();
      if (!self->channels_.empty()) {
        std::vector<std::string> args{"SUBSCRIBE"};
        args.insert(args.end(), self->channels_.begin(), self->channels_.end());
        self->send(std::move(args));
      } else {
        self->up_ = true;
        if (self->on_state_) self->on_state_(true);
      }
      std::function<std::string()> take = [self] { return std::exchange(self->outbox_, {}); };
      ended = first_error(co_await (read_loop(self, conn) || write_loop(conn, std::move(take)) ||
                                    ping_loop(self, conn)));
    }
    conn->close();
    self->conn_.reset();
    self->ready_ = false;
    self->outbox_.clear();
    self->ping_sent_.reset();
    if (self->closed_) break;
    if (ended.message != logged) log::warn(ended.message, "; the subscriber reconnects");
    logged = std::move(ended.message);
    if (self->up_) {
      self->up_ = false;
      if (self->on_state_) self->on_state_(false);
      if (self->closed_) break;
    }
    self->backoff_.expires_after(kBackoff);
    co_await self->backoff_.async_wait(kTuple);
  }
}

// One reply in pub/sub mode: a message, a (un)subscribe confirmation or a PING's answer.
std::optional<Error> RedisSubscriber::handle(const RedisReply& reply) {
  if (reply.type == RedisReply::Type::Error)
    return unavailable("subscriber: " + reply.str, conn_->where);
  if (reply.type == RedisReply::Type::Status && reply.str == "PONG") {  // not subscribed to any
    ping_sent_.reset();
    return std::nullopt;
  }
  if (reply.type != RedisReply::Type::Array || reply.elements.empty()) return std::nullopt;
  const auto& e = reply.elements;
  const std::string& kind = e[0].str;
  if (kind == "message" && e.size() == 3) {
    if (on_message_) on_message_(e[1].str, e[2].str);
  } else if (kind == "pong") {  // PING while subscribed: ["pong", ""]
    ping_sent_.reset();
  } else if (kind == "subscribe" && confirms_due_ > 0 && --confirms_due_ == 0) {
    up_ = true;
    if (on_state_) on_state_(true);
  }
  return std::nullopt;
}

asio::awaitable<Error> RedisSubscriber::read_loop(std::shared_ptr<RedisSubscriber> self,
                                                  std::shared_ptr<RedisConnection> conn) {
  for (;;) {
    auto reply = co_await read_reply(*conn);
    if (!reply) {
      conn->close();
      co_return reply.error();
    }
    // A handler may have closed the subscriber (or this connection).
    auto failed = self->conn_ == conn ? self->handle(*reply) : std::nullopt;
    if (failed || conn->closed) {
      conn->close();
      co_return failed ? *failed : unavailable("connection closed", conn->where);
    }
  }
}

// A subscriber only reads, so a peer that vanished without a FIN (a machine gone, a network
// cut) would never be noticed: a PING must be answered within command_timeout.
asio::awaitable<Error> RedisSubscriber::ping_loop(std::shared_ptr<RedisSubscriber> self,
                                                  std::shared_ptr<RedisConnection> conn) {
  const auto timeout = self->options_.command_timeout;
  asio::steady_timer timer(self->executor_);
  for (;;) {
    timer.expires_after(std::max(timeout / 2, std::chrono::milliseconds(1)));
    auto [ec] = co_await timer.async_wait(kTuple);
    if (ec || conn->closed) co_return unavailable("connection closed", conn->where);
    if (!self->ping_sent_) {
      self->ping_sent_ = Clock::now();
      self->send({"PING"});
    } else if (Clock::now() - *self->ping_sent_ >= timeout) {
      conn->close();
      co_return unavailable(
          "subscriber: no PING reply within " + std::to_string(timeout.count()) + " ms",
          conn->where);
    }
  }
}

}  // namespace sb::cluster
