#pragma once
// A small Redis client for the cluster (issue 20, docs/cluster.md): RESP2 over a TCP connection
// of ours, driven by coroutines on the executor it is given. hiredis 0.14 (Debian 12) is used
// only as the codec (it has no timeouts, TLS or RESP3): its reader parses the replies and its
// formatter encodes the commands. No TLS (`rediss://` is refused).
//
// - RedisClient: commands from any number of coroutines, pipelined on one connection, replies
//   matched in order. Connects on the first command, again after a failure, with a 1 s backoff
//   after a failed connect. Every command has a deadline (command_timeout).
// - RedisSubscriber: a connection of its own in pub/sub mode that keeps its channels
//   subscribed across reconnects and notices a dead peer by PING.
//
// Not thread-safe: both are used on their executor (one thread) only. Both keep themselves
// alive while they have a connection or a waiting command: call close() to end them.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "util/error.hpp"

namespace sb::cluster {

// Where a Redis is, from `redis://[[user]:password@]host[:port][/db]`.
struct RedisUrl {
  std::string host;
  std::uint16_t port = 6379;
  std::string user, password;  // password empty: no AUTH
  int db = 0;
};

// Errors are InvalidRequest and say what is wrong; they never contain the password.
Result<RedisUrl> parse_redis_url(std::string_view url);

// One reply, RESP2's types. `str` holds String (a bulk string: any bytes, NUL and "\r\n"
// included), Status ("OK") and Error ("ERR ...") text; `elements` an Array's.
struct RedisReply {
  enum class Type { Nil, Integer, String, Status, Error, Array } type = Type::Nil;
  std::int64_t integer = 0;
  std::string str;
  std::vector<RedisReply> elements;
};

struct RedisOptions {
  std::string url;                                  // redis://..., parsed by create()
  std::chrono::milliseconds connect_timeout{2000};  // resolve + connect + AUTH/SELECT/SETNAME
  std::chrono::milliseconds command_timeout{2000};  // a command's reply; the subscriber's PING
  std::size_t max_waiting = 10000;                  // commands sent or queued, not answered
  std::string client_name;                          // CLIENT SETNAME on connect; empty: none
};

namespace detail {
struct RedisConnection;
}

// Commands on one pipelined connection. command() may be awaited by many coroutines at once;
// each gets the reply to its own command.
//
// Failures are values, all ErrorCode::Unavailable with a message starting "redis: " (those of
// the connection end with "(host:port)"): a failed connect (later commands fail at once with
// that error until 1 s has passed), a lost connection (every command waiting on it fails: whether
// it ran is unknown), "no reply within N ms" (the connection is closed, as later replies could not
// be matched with their commands, and every command waiting on it fails the same way), "too many
// commands waiting", "closed". An error reply of Redis ("-ERR ...") is a successful Result of type
// Error: the caller decides.
//
// A caller that stops waiting (its cancellation slot fires, e.g. `command() || timer`) gets
// Unavailable "redis: stopped waiting" at once. A command not yet written is dropped; one
// already written stays in the connection's queue, and its reply is read and thrown away when
// it comes (Redis may have run it), so the replies of the others stay matched.
class RedisClient : public std::enable_shared_from_this<RedisClient> {
 public:
  // Parses the URL (InvalidRequest when it is wrong); does not connect.
  static Result<std::shared_ptr<RedisClient>> create(boost::asio::any_io_executor executor,
                                                     RedisOptions options);
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  // `args` as Redis takes them: {"SET", key, value}. InvalidRequest when empty. GCC 12 refuses
  // a braced list inside a co_await expression ("array used as initializer"): name the vector
  // first, `std::vector<std::string> get{"GET", key}; co_await c->command(std::move(get));`.
  boost::asio::awaitable<Result<RedisReply>> command(std::vector<std::string> args);

  // Whether the connection is open and its opening commands were accepted.
  bool connected() const { return state_ == State::Connected; }
  // What ended the last connection or connect attempt; cleared by a successful connect.
  std::optional<std::string> last_error() const { return last_error_; }
  // Ends the connection; waiting commands complete with Unavailable "redis: closed", and so
  // does every later one.
  void close();

 private:
  struct Op;
  enum class State { Idle, Connecting, Connected, Closed };

  RedisClient(boost::asio::any_io_executor executor, RedisOptions options, RedisUrl url);
  void start_connecting();
  void finish(Op& op, Result<RedisReply> outcome);
  void drop(const Error& error);
  static boost::asio::awaitable<void> run(std::shared_ptr<RedisClient> self,
                                          std::shared_ptr<detail::RedisConnection> conn);
  static boost::asio::awaitable<Error> read_loop(std::shared_ptr<RedisClient> self,
                                                 std::shared_ptr<detail::RedisConnection> conn);

  boost::asio::any_io_executor executor_;
  RedisOptions options_;
  RedisUrl url_;
  State state_ = State::Idle;
  std::shared_ptr<detail::RedisConnection> conn_;  // while Connecting or Connected
  std::deque<std::shared_ptr<Op>> unsent_;         // waiting for the writer, bytes and all
  std::deque<std::shared_ptr<Op>> unanswered_;     // written, replies due in this order
  std::optional<std::string> last_error_;
  std::optional<std::chrono::steady_clock::time_point> failed_at_;  // last failed connect
};

// A connection in pub/sub mode (RESP2). on_message gets every message of a subscribed channel;
// on_state(true) once the connection is up and subscribed to every channel of the set,
// on_state(false) when such a connection drops (messages published until the next true are
// lost for this subscriber). Reconnects 1 s after a failure, forever, until close(). Sends
// PING every command_timeout / 2 and reconnects when no answer came within command_timeout.
// Both handlers run on the executor, never after close(); they may call subscribe(),
// unsubscribe() and close(). on_message's views are valid during the call only.
class RedisSubscriber : public std::enable_shared_from_this<RedisSubscriber> {
 public:
  using MessageHandler = std::function<void(std::string_view channel, std::string_view payload)>;
  using StateHandler = std::function<void(bool connected)>;

  static Result<std::shared_ptr<RedisSubscriber>> create(boost::asio::any_io_executor executor,
                                                         RedisOptions options,
                                                         MessageHandler on_message,
                                                         StateHandler on_state);
  RedisSubscriber(const RedisSubscriber&) = delete;
  RedisSubscriber& operator=(const RedisSubscriber&) = delete;

  // The set of channels, kept across reconnects. Before start() or while disconnected they
  // only change the set.
  void subscribe(std::string channel);
  void unsubscribe(std::string channel);
  void start();
  void close();
  // Whether on_state(true) was the last call (and close() was not).
  bool connected() const { return up_; }

 private:
  RedisSubscriber(boost::asio::any_io_executor executor, RedisOptions options, RedisUrl url,
                  MessageHandler on_message, StateHandler on_state);
  void send(std::vector<std::string> args);
  std::optional<Error> handle(const RedisReply& reply);
  static boost::asio::awaitable<void> run(std::shared_ptr<RedisSubscriber> self);
  static boost::asio::awaitable<Error> read_loop(std::shared_ptr<RedisSubscriber> self,
                                                 std::shared_ptr<detail::RedisConnection> conn);
  static boost::asio::awaitable<Error> ping_loop(std::shared_ptr<RedisSubscriber> self,
                                                 std::shared_ptr<detail::RedisConnection> conn);

  boost::asio::any_io_executor executor_;
  RedisOptions options_;
  RedisUrl url_;
  MessageHandler on_message_;
  StateHandler on_state_;
  std::set<std::string> channels_;
  std::shared_ptr<detail::RedisConnection> conn_;  // while connecting or connected
  bool ready_ = false;            // the connection's SUBSCRIBE of the whole set has been queued
  std::size_t confirms_due_ = 0;  // of that SUBSCRIBE, before on_state(true)
  bool up_ = false;               // on_state(true) was reported for this connection
  std::string outbox_;            // encoded commands for the writer
  std::optional<std::chrono::steady_clock::time_point> ping_sent_;  // unanswered PING
  bool started_ = false, closed_ = false;
  boost::asio::steady_timer backoff_;
};

}  // namespace sb::cluster
