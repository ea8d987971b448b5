// The Redis client and subscriber against real redis-servers: the test command's fixture
// ($SWITCHBOARD_TEST_REDIS/redis.url, shared with tests running at the same time, so every key
// here is the test process's own), and servers of a test's own for outages and pauses, which
// the others must not see. Without $SWITCHBOARD_TEST_REDIS the tests that need Redis skip.
#include "cluster/redis.hpp"

#include "cluster/test_util.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>

namespace sb::cluster {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Type = RedisReply::Type;
using Args = std::vector<std::string>;

// A redis-server of the test's own (scripts/test-services.sh in a temp state dir).
class OwnRedis {
 public:
  OwnRedis() {
    char dir[] = "/tmp/sb-redis-test.XXXXXX";
    if (!::mkdtemp(dir)) throw std::runtime_error("mkdtemp failed");
    state_ = dir;
    if (!script("start")) throw std::runtime_error("could not start a redis-server");
    std::ifstream in(state_ + "/redis.url");
    std::getline(in, url_);
    port_ = url_.substr(url_.rfind(':') + 1);
  }
  ~OwnRedis() {
    script("stop");
    std::filesystem::remove_all(state_);
  }
  void down() { ASSERT_TRUE(script("down")); }
  void up() { ASSERT_TRUE(script("up")); }
  const std::string& url() const { return url_; }
  const std::string& port() const { return port_; }

 private:
  bool script(const std::string& action) {
    std::string command = std::string(SWITCHBOARD_SOURCE_DIR) + "/scripts/test-services.sh " +
                          action + " redis " + state_ + " 2>/dev/null";
    return std::system(command.c_str()) == 0;
  }
  std::string state_, url_, port_;
};

// A TCP server that accepts and never answers: a Redis that hangs, or a peer that vanished.
class SilentServer {
 public:
  explicit SilentServer(asio::io_context& io)
      : acceptor_(io, {asio::ip::make_address("127.0.0.1"), 0}) {
    accept();
  }
  std::string url() const {
    return "redis://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
  }
  std::size_t accepted() const { return sockets_.size(); }

 private:
  void accept() {
    acceptor_.async_accept([this](boost::system::error_code ec, asio::ip::tcp::socket s) {
      if (ec) return;
      sockets_.push_back(std::move(s));
      accept();
    });
  }
  asio::ip::tcp::acceptor acceptor_;
  std::vector<asio::ip::tcp::socket> sockets_;
};

std::shared_ptr<RedisClient> make_client(asio::io_context& io, std::string url,
                                         std::chrono::milliseconds command_timeout = 2000ms,
                                         std::size_t max_waiting = 10000,
                                         std::string client_name = "switchboard-test") {
  RedisOptions options;
  options.url = std::move(url);
  options.command_timeout = command_timeout;
  options.max_waiting = max_waiting;
  options.client_name = std::move(client_name);
  auto client = RedisClient::create(io.get_executor(), options);
  if (!client) throw std::runtime_error(client.error().message);
  return *client;
}

// What a subscriber saw.
struct Seen {
  std::vector<std::pair<std::string, std::string>> messages;
  std::vector<bool> states;
};

std::shared_ptr<RedisSubscriber> make_subscriber(
    asio::io_context& io, std::string url, std::shared_ptr<Seen> seen,
    std::chrono::milliseconds command_timeout = 2000ms) {
  RedisOptions options;
  options.url = std::move(url);
  options.command_timeout = command_timeout;
  auto subscriber = RedisSubscriber::create(
      io.get_executor(), options,
      [seen](std::string_view channel, std::string_view payload) {
        seen->messages.emplace_back(channel, payload);
      },
      [seen](bool connected) { seen->states.push_back(connected); });
  if (!subscriber) throw std::runtime_error(subscriber.error().message);
  return *subscriber;
}

// Each of many concurrent coroutines: its own SET, GET and INCRBY.
asio::awaitable<void> set_get_incr(std::shared_ptr<RedisClient> client, int i,
                                   std::shared_ptr<std::vector<std::string>> failures,
                                   std::shared_ptr<int> finished) {
  // Named vectors: GCC 12 fails on a braced list of strings inside a co_await expression
  // ("array used as initializer").
  const std::string k = key("k" + std::to_string(i)), c = key("c" + std::to_string(i));
  const std::string value = "value-" + std::to_string(i) + std::string(i % 7, '\0');
  Args set_args{"SET", k, value}, get_args{"GET", k}, incr_args{"INCRBY", c, std::to_string(i)},
      del_args{"DEL", k, c};
  auto set = co_await client->command(std::move(set_args));
  auto get = co_await client->command(std::move(get_args));
  auto incr = co_await client->command(std::move(incr_args));
  (void)co_await client->command(std::move(del_args));
  if (!set || set->type != Type::Status || set->str != "OK")
    failures->push_back("SET " + std::to_string(i));
  if (!get || get->type != Type::String || get->str != value)
    failures->push_back("GET " + std::to_string(i));
  if (!incr || incr->type != Type::Integer || incr->integer != i)
    failures->push_back("INCRBY " + std::to_string(i));
  ++*finished;
}

// ---------------------------------------------------------------------------------------------

TEST(RedisUrl, ParsesEveryForm) {
  auto a = parse_redis_url("redis://localhost");
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->host, "localhost");
  EXPECT_EQ(a->port, 6379);
  EXPECT_EQ(a->db, 0);
  EXPECT_TRUE(a->password.empty());

  auto b = parse_redis_url("redis://:s3cret@10.0.0.7:7000/3");
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_EQ(b->host, "10.0.0.7");
  EXPECT_EQ(b->port, 7000);
  EXPECT_EQ(b->user, "");
  EXPECT_EQ(b->password, "s3cret");
  EXPECT_EQ(b->db, 3);

  auto c = parse_redis_url("redis://alice:p%40ss@[::1]:6380/");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->host, "::1");
  EXPECT_EQ(c->port, 6380);
  EXPECT_EQ(c->user, "alice");
  EXPECT_EQ(c->password, "p@ss");
  EXPECT_EQ(c->db, 0);
}

TEST(RedisUrl, RefusesWhatIsWrongWithoutEchoingThePassword) {
  for (const char* text :
       {"", "not a url", "http://hunter2@host", "rediss://:hunter2@host", "redis://",
        "redis://:hunter2@:6379", "redis://:hunter2@host:0", "redis://:hunter2@host:70000",
        "redis://:hunter2@host:port", "redis://hunter2@host", "redis://u:hunter2@host/x",
        "redis://u:hunter2@host/1/2", "redis://:hunter2@host/-1", "redis://:hunter2@host?db=1",
        "redis://:@host"}) {
    auto url = parse_redis_url(text);
    ASSERT_FALSE(url) << text;
    EXPECT_EQ(url.error().code, ErrorCode::InvalidRequest) << text;
    EXPECT_EQ(url.error().message.rfind("redis URL: ", 0), 0u) << url.error().message;
    EXPECT_EQ(url.error().message.find("hunter2"), std::string::npos) << url.error().message;
  }
  EXPECT_NE(parse_redis_url("rediss://h").error().message.find("TLS"), std::string::npos);
  EXPECT_NE(parse_redis_url("redis://h:99999").error().message.find("port"), std::string::npos);

  asio::io_context io;
  RedisOptions options;
  options.url = "redis://h:1/x";
  EXPECT_EQ(RedisClient::create(io.get_executor(), options).error().code,
            ErrorCode::InvalidRequest);
  options.url = "redis://h";
  options.client_name = "two words";
  EXPECT_EQ(RedisClient::create(io.get_executor(), options).error().code,
            ErrorCode::InvalidRequest);
  EXPECT_FALSE(RedisSubscriber::create(io.get_executor(), options, {}, {}));
}

TEST(Redis, SetGetDelAndNil) {
  REQUIRE_REDIS();
  asio::io_context io;
  auto client = make_client(io, fixture_url());
  EXPECT_FALSE(client->connected());  // lazily
  auto set = run(io, client->command({"SET", key("a"), "1"}));
  ASSERT_TRUE(set) << set.error().message;
  EXPECT_EQ(set->type, Type::Status);
  EXPECT_EQ(set->str, "OK");
  EXPECT_TRUE(client->connected());
  auto get = run(io, client->command({"GET", key("a")}));
  EXPECT_EQ(get->type, Type::String);
  EXPECT_EQ(get->str, "1");
  auto del = run(io, client->command({"DEL", key("a")}));
  EXPECT_EQ(del->type, Type::Integer);
  EXPECT_EQ(del->integer, 1);
  auto gone = run(io, client->command({"GET", key("a")}));
  EXPECT_EQ(gone->type, Type::Nil);
  EXPECT_FALSE(client->last_error());
  auto empty = run(io, client->command({}));
  EXPECT_EQ(empty.error().code, ErrorCode::InvalidRequest);
  client->close();
}

TEST(Redis, IntegerArrayAndErrorReplies) {
  REQUIRE_REDIS();
  asio::io_context io;
  auto client = make_client(io, fixture_url());
  EXPECT_EQ(run(io, client->command({"INCRBY", key("n"), "-42"}))->integer, -42);
  EXPECT_EQ(run(io, client->command({"RPUSH", key("l"), "a", "", "c"}))->integer, 3);
  auto range = run(io, client->command({"LRANGE", key("l"), "0", "-1"}));
  ASSERT_EQ(range->type, Type::Array);
  ASSERT_EQ(range->elements.size(), 3u);
  EXPECT_EQ(range->elements[0].str, "a");
  EXPECT_EQ(range->elements[1].type, Type::String);
  EXPECT_EQ(range->elements[1].str, "");
  EXPECT_EQ(range->elements[2].str, "c");
  auto none = run(io, client->command({"LRANGE", key("missing"), "0", "-1"}));
  EXPECT_EQ(none->type, Type::Array);
  EXPECT_TRUE(none->elements.empty());
  auto mget = run(io, client->command({"MGET", key("n"), key("missing")}));
  ASSERT_EQ(mget->elements.size(), 2u);
  EXPECT_EQ(mget->elements[0].str, "-42");
  EXPECT_EQ(mget->elements[1].type, Type::Nil);

  // Error replies are values; the connection goes on.
  auto wrong = run(io, client->command({"INCR", key("l")}));
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->type, Type::Error);
  EXPECT_EQ(wrong->str.rfind("WRONGTYPE", 0), 0u) << wrong->str;
  auto unknown = run(io, client->command({"NO-SUCH-COMMAND", "x"}));
  EXPECT_EQ(unknown->type, Type::Error);
  EXPECT_EQ(unknown->str.rfind("ERR unknown command", 0), 0u) << unknown->str;
  auto ping = run(io, client->command({"PING"}));
  EXPECT_EQ(ping->type, Type::Status);
  EXPECT_EQ(ping->str, "PONG");
  EXPECT_TRUE(client->connected());
  run(io, client->command({"DEL", key("n"), key("l")}));
  client->close();
}

TEST(Redis, BinaryValuesRoundTrip) {
  REQUIRE_REDIS();
  asio::io_context io;
  auto client = make_client(io, fixture_url());
  std::string all_bytes;
  for (int i = 0; i < 256; ++i)
    all_bytes.push_back(static_cast<char>(i));
  std::string big(1 << 20, 'x');  // many reads, and a reply split across them
  for (std::size_t i = 0; i < big.size(); i += 997)
    big[i] = static_cast<char>(i % 256);
  const std::vector<std::string> values = {
      std::string("a\0b", 3), "line\r\nnext\r\n", "$5\r\nhello\r\n*1\r\n", all_bytes, "", big};
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::string k = key("bin") + std::string("\0\r\n", 3) + std::to_string(i);
    auto set = run(io, client->command({"SET", k, values[i]}));
    ASSERT_EQ(set->str, "OK");
    auto get = run(io, client->command({"GET", k}));
    ASSERT_EQ(get->type, Type::String);
    EXPECT_EQ(get->str, values[i]) << "value " << i;
    EXPECT_EQ(run(io, client->command({"DEL", k}))->integer, 1);
  }
  client->close();
}

TEST(Redis, ThousandConcurrentCommandsEachGetTheirOwnReply) {
  REQUIRE_REDIS();
  asio::io_context io;
  auto client = make_client(io, fixture_url());
  auto failures = std::make_shared<std::vector<std::string>>();
  auto finished = std::make_shared<int>(0);
  constexpr int kCount = 1000;
  for (int i = 0; i < kCount; ++i)
    asio::co_spawn(io, set_get_incr(client, i, failures, finished), [](std::exception_ptr e) {
      if (e) std::rethrow_exception(e);
    });
  ASSERT_TRUE(run_until(
      io, [&] { return *finished == kCount; }, 30s))
      << *finished;
  EXPECT_TRUE(failures->empty()) << failures->size() << " wrong, first: " << failures->front();
  client->close();
}

TEST(Redis, SelectsTheDatabaseOfTheUrl) {
  REQUIRE_REDIS();
  asio::io_context io;
  auto db3 = make_client(io, fixture_url() + "/3");
  auto db0 = make_client(io, fixture_url());
  ASSERT_EQ(run(io, db3->command({"SET", key("db"), "three"}))->str, "OK");
  EXPECT_EQ(run(io, db0->command({"GET", key("db")}))->type, Type::Nil);
  EXPECT_EQ(run(io, db3->command({"GET", key("db")}))->str, "three");
  auto again = make_client(io, fixture_url() + "/3");  // a new connection selects it too
  EXPECT_EQ(run(io, again->command({"GET", key("db")}))->str, "three");
  auto name = run(io, again->command({"CLIENT", "GETNAME"}));
  EXPECT_EQ(name->str, "switchboard-test");
  run(io, db3->command({"DEL", key("db")}));

  // A database Redis does not have fails the connect, saying why.
  auto bad = make_client(io, fixture_url() + "/999");
  auto refused = run(io, bad->command({"PING"}));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::Unavailable);
  EXPECT_NE(refused.error().message.find("SELECT 999 refused"), std::string::npos)
      << refused.error().message;
  for (auto& c : {db3, db0, again, bad})
    c->close();
}

TEST(Redis, AuthenticatesWithTheUrlsUserAndPassword) {
  REQUIRE_REDIS();
  OwnRedis redis;
  asio::io_context io;
  auto admin = make_client(io, redis.url());
  ASSERT_EQ(run(io, admin->command(
                        {"ACL", "SETUSER", "alice", "on", ">wonder land", "~*", "&*", "+@all"}))
                ->str,
            "OK");
  ASSERT_EQ(run(io, admin->command({"CONFIG", "SET", "requirepass", "hunter2"}))->str, "OK");

  auto by_password = make_client(io, "redis://:hunter2@127.0.0.1:" + redis.port() + "/2");
  EXPECT_EQ(run(io, by_password->command({"PING"}))->str, "PONG");
  auto by_user = make_client(io, "redis://alice:wonder%20land@127.0.0.1:" + redis.port());
  EXPECT_EQ(run(io, by_user->command({"ACL", "WHOAMI"}))->str, "alice");

  auto wrong = make_client(io, "redis://:hunter3@127.0.0.1:" + redis.port());
  auto refused = run(io, wrong->command({"PING"}));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::Unavailable);
  EXPECT_NE(refused.error().message.find("AUTH refused: WRONGPASS"), std::string::npos)
      << refused.error().message;
  EXPECT_EQ(refused.error().message.find("hunter3"), std::string::npos);
  EXPECT_FALSE(wrong->connected());

  // Without a password: the connect's CLIENT SETNAME is refused, or, without a name, each
  // command gets Redis's NOAUTH error reply.
  auto named = make_client(io, redis.url());
  auto unnamed = run(io, named->command({"GET", "x"}));
  ASSERT_FALSE(unnamed);
  EXPECT_NE(unnamed.error().message.find("CLIENT SETNAME refused: NOAUTH"), std::string::npos)
      << unnamed.error().message;
  auto anonymous = make_client(io, redis.url(), 2000ms, 10000, "");
  auto noauth = run(io, anonymous->command({"GET", "x"}));
  ASSERT_TRUE(noauth) << noauth.error().message;
  EXPECT_EQ(noauth->type, Type::Error);
  EXPECT_EQ(noauth->str.rfind("NOAUTH", 0), 0u) << noauth->str;
  for (auto& c : {admin, by_password, by_user, wrong, named, anonymous})
    c->close();
}

TEST(Redis, SubscriberGetsTheExactBytesPublished) {
  REQUIRE_REDIS();
  asio::io_context io;
  auto client = make_client(io, fixture_url());
  auto seen = std::make_shared<Seen>();
  // PINGs every 150 ms: answered ["pong", ""] while subscribed, +PONG after the last
  // unsubscribe; either must keep the connection.
  auto subscriber = make_subscriber(io, fixture_url(), seen, 300ms);
  const std::string first = key("ch1"), second = key("ch2") + std::string("\0\n", 2);
  subscriber->subscribe(first);
  subscriber->start();
  ASSERT_TRUE(run_until(io, [&] { return !seen->states.empty(); }));
  EXPECT_EQ(seen->states, std::vector<bool>{true});
  EXPECT_TRUE(subscriber->connected());

  const std::string payload = std::string("node-1\n{\"x\":\0}\r\n", 17) + std::string(100000, 'p');
  auto published = run(io, client->command({"PUBLISH", first, payload}));
  EXPECT_EQ(published->integer, 1);  // one subscriber: ours
  ASSERT_TRUE(run_until(io, [&] { return seen->messages.size() == 1; }));
  EXPECT_EQ(seen->messages[0].first, first);
  EXPECT_EQ(seen->messages[0].second, payload);

  // A channel added while connected is subscribed at once; one removed is let go.
  subscriber->subscribe(second);
  subscriber->unsubscribe(first);
  ASSERT_TRUE(run_until(io, [&] {
    auto n = run(io, client->command({"PUBSUB", "NUMSUB", first, second}));
    return n->elements.size() == 4 && n->elements[1].integer == 0 && n->elements[3].integer == 1;
  }));
  EXPECT_EQ(run(io, client->command({"PUBLISH", first, "lost"}))->integer, 0);
  EXPECT_EQ(run(io, client->command({"PUBLISH", second, "two"}))->integer, 1);
  ASSERT_TRUE(run_until(io, [&] { return seen->messages.size() == 2; }));
  EXPECT_EQ(seen->messages[1], std::make_pair(second, std::string("two")));

  subscriber->unsubscribe(second);
  run_for(io, 700ms);
  EXPECT_EQ(seen->states, std::vector<bool>{true});
  subscriber->close();
  run_for(io, 100ms);
  EXPECT_EQ(seen->states, std::vector<bool>{true});  // close() is not reported
  client->close();
}

TEST(Redis, AnOutageFailsCommandsFastAndBothRecover) {
  REQUIRE_REDIS();
  OwnRedis redis;
  asio::io_context io;
  auto client = make_client(io, redis.url());
  auto seen = std::make_shared<Seen>();
  auto subscriber = make_subscriber(io, redis.url(), seen);
  subscriber->subscribe("events");
  subscriber->start();
  ASSERT_EQ(run(io, client->command({"PING"}))->str, "PONG");
  ASSERT_TRUE(run_until(io, [&] { return seen->states == std::vector<bool>{true}; }));

  redis.down();
  // The command on the dropped connection, then the reconnect: each fails fast, naming Redis.
  std::string message;
  for (int attempt = 0; attempt < 2 && message.find("cannot connect") == std::string::npos;
       ++attempt) {
    auto t0 = Clock::now();
    auto failed = run(io, client->command({"PING"}));
    ASSERT_FALSE(failed);
    EXPECT_EQ(failed.error().code, ErrorCode::Unavailable);
    EXPECT_LT(Clock::now() - t0, 1s);
    message = failed.error().message;
    EXPECT_EQ(message.rfind("redis: ", 0), 0u) << message;
    EXPECT_NE(message.find("(127.0.0.1:" + redis.port() + ")"), std::string::npos) << message;
  }
  EXPECT_NE(message.find("cannot connect"), std::string::npos) << message;
  EXPECT_FALSE(client->connected());
  EXPECT_EQ(client->last_error(), message);
  // Within the backoff: the same error at once, no new attempt.
  auto t0 = Clock::now();
  auto again = run(io, client->command({"PING"}));
  EXPECT_LT(Clock::now() - t0, 50ms);
  EXPECT_EQ(again.error().message, message);
  ASSERT_TRUE(run_until(io, [&] { return seen->states.size() == 2; }));
  EXPECT_EQ(seen->states, (std::vector<bool>{true, false}));

  redis.up();
  ASSERT_TRUE(run_until(
      io,
      [&] {
        auto r = run(io, client->command({"PING"}));
        if (!r) run_for(io, 100ms);
        return r && r->str == "PONG";
      },
      5s));
  EXPECT_TRUE(client->connected());
  EXPECT_FALSE(client->last_error());
  ASSERT_TRUE(run_until(
      io, [&] { return seen->states.size() == 3; }, 5s));
  EXPECT_EQ(seen->states, (std::vector<bool>{true, false, true}));
  EXPECT_EQ(run(io, client->command({"PUBLISH", "events", "after"}))->integer, 1);
  ASSERT_TRUE(run_until(io, [&] { return seen->messages.size() == 1; }));
  EXPECT_EQ(seen->messages[0].second, "after");
  subscriber->close();
  client->close();
}

TEST(Redis, ACommandWithoutReplyInTimeClosesTheConnection) {
  REQUIRE_REDIS();
  OwnRedis redis;  // paused: the others must not see that
  asio::io_context io;
  auto client = make_client(io, redis.url(), 300ms);
  auto other = make_client(io, redis.url());
  ASSERT_EQ(run(io, client->command({"PING"}))->str, "PONG");
  ASSERT_EQ(run(io, other->command({"CLIENT", "PAUSE", "1500", "ALL"}))->str, "OK");

  auto t0 = Clock::now();
  std::vector<Result<RedisReply>> outcomes;
  for (int i = 0; i < 3; ++i)
    asio::co_spawn(io, client->command({"GET", "x" + std::to_string(i)}),
                   [&](std::exception_ptr, Result<RedisReply> r) { outcomes.push_back(r); });
  ASSERT_TRUE(run_until(io, [&] { return outcomes.size() == 3; }));
  EXPECT_LT(Clock::now() - t0, 1000ms);
  for (const auto& r : outcomes) {
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::Unavailable);
    EXPECT_EQ(r.error().message.rfind("redis: no reply within 300 ms", 0), 0u) << r.error().message;
  }
  EXPECT_FALSE(client->connected());

  // Once Redis answers again, so does the client, on a new connection.
  run_for(io, 1300ms);
  ASSERT_TRUE(run_until(
      io,
      [&] {
        auto r = run(io, client->command({"PING"}));
        return r && r->str == "PONG";
      },
      5s));
  client->close();
  other->close();
}

TEST(Redis, ACallerThatStopsWaitingDoesNotShiftTheReplies) {
  REQUIRE_REDIS();
  asio::io_context io;
  auto client = make_client(io, fixture_url());

  // Given up after it was written: its reply (BLPOP's nil after 300 ms) must not go to the
  // commands pipelined behind it.
  ASSERT_EQ(run(io, client->command({"PING"}))->str, "PONG");
  asio::cancellation_signal late;
  std::optional<Result<RedisReply>> blocked;
  asio::co_spawn(
      io, client->command({"BLPOP", key("empty"), "0.3"}),
      asio::bind_cancellation_slot(late.slot(), [&](std::exception_ptr e, Result<RedisReply> r) {
        if (e) std::rethrow_exception(e);
        blocked = r;
      }));
  std::optional<Result<RedisReply>> set, get;
  asio::co_spawn(io, client->command({"SET", key("after"), "mine"}),
                 [&](std::exception_ptr, Result<RedisReply> r) { set = r; });
  asio::co_spawn(io, client->command({"GET", key("after")}),
                 [&](std::exception_ptr, Result<RedisReply> r) { get = r; });
  run_for(io, 50ms);
  late.emit(asio::cancellation_type::terminal);
  ASSERT_TRUE(run_until(io, [&] { return blocked && set && get; }));
  ASSERT_FALSE(*blocked);
  EXPECT_NE(blocked->error().message.find("stopped waiting"), std::string::npos);
  ASSERT_TRUE(*set);
  EXPECT_EQ((*set)->str, "OK");
  ASSERT_TRUE(*get);
  EXPECT_EQ((*get)->type, Type::String);
  EXPECT_EQ((*get)->str, "mine");
  EXPECT_EQ(run(io, client->command({"DEL", key("after")}))->integer, 1);
  EXPECT_TRUE(client->connected());
  client->close();
}

// The cases below need no Redis: a server that never answers, or none at all.

TEST(RedisClient, CloseCompletesTheWaitingCommands) {
  asio::io_context io;
  SilentServer server(io);
  auto client = make_client(io, server.url(), 10s);
  std::vector<Result<RedisReply>> outcomes;
  for (int i = 0; i < 3; ++i)
    asio::co_spawn(io, client->command({"PING"}),
                   [&](std::exception_ptr, Result<RedisReply> r) { outcomes.push_back(r); });
  ASSERT_TRUE(run_until(io, [&] { return server.accepted() == 1; }));
  run_for(io, 50ms);
  EXPECT_TRUE(outcomes.empty());
  client->close();
  ASSERT_TRUE(run_until(
      io, [&] { return outcomes.size() == 3; }, 1s));
  for (const auto& r : outcomes)
    EXPECT_EQ(r.error().message, "redis: closed");
  auto after = run(io, client->command({"PING"}));
  EXPECT_EQ(after.error().message, "redis: closed");
}

TEST(RedisClient, ACommandGivenUpBeforeItWasWrittenIsDropped) {
  asio::io_context io;
  SilentServer server(io);  // never answers CLIENT SETNAME: the connect stays unfinished
  auto client = make_client(io, server.url(), 10s);
  asio::cancellation_signal signal;
  std::optional<Result<RedisReply>> outcome;
  asio::co_spawn(
      io, client->command({"PING"}),
      asio::bind_cancellation_slot(signal.slot(), [&](std::exception_ptr e, Result<RedisReply> r) {
        if (e) std::rethrow_exception(e);
        outcome = r;
      }));
  ASSERT_TRUE(run_until(io, [&] { return server.accepted() == 1; }));
  run_for(io, 50ms);
  EXPECT_FALSE(outcome);
  signal.emit(asio::cancellation_type::terminal);
  ASSERT_TRUE(run_until(
      io, [&] { return outcome.has_value(); }, 1s));
  ASSERT_FALSE(*outcome);
  EXPECT_EQ(outcome->error().message, "redis: stopped waiting");
  client->close();
}

TEST(RedisClient, RefusesMoreThanMaxWaiting) {
  asio::io_context io;
  SilentServer server(io);
  auto client = make_client(io, server.url(), 10s, 5);
  int completed = 0;
  for (int i = 0; i < 5; ++i)
    asio::co_spawn(io, client->command({"PING"}),
                   [&](std::exception_ptr, Result<RedisReply>) { ++completed; });
  run_for(io, 50ms);
  auto refused = run(io, client->command({"PING"}));
  EXPECT_EQ(refused.error().code, ErrorCode::Unavailable);
  EXPECT_EQ(refused.error().message, "redis: too many commands waiting (5)");
  EXPECT_EQ(completed, 0);
  client->close();
  ASSERT_TRUE(run_until(io, [&] { return completed == 5; }));
}

TEST(RedisClient, AFailedConnectBacksOff) {
  asio::io_context io;
  std::uint16_t port;
  {
    asio::ip::tcp::acceptor probe(io, {asio::ip::make_address("127.0.0.1"), 0});
    port = probe.local_endpoint().port();
  }  // closed: nothing listens there now
  auto client = make_client(io, "redis://127.0.0.1:" + std::to_string(port));
  auto failed = run(io, client->command({"PING"}));
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().message,
            "redis: cannot connect: Connection refused (127.0.0.1:" + std::to_string(port) + ")");
  auto t0 = Clock::now();
  EXPECT_EQ(run(io, client->command({"PING"})).error().message, failed.error().message);
  EXPECT_LT(Clock::now() - t0, 50ms);
  client->close();
}

TEST(RedisSubscriber, NoticesAPeerThatStoppedAnswering) {
  asio::io_context io;
  SilentServer server(io);
  auto seen = std::make_shared<Seen>();
  auto subscriber = make_subscriber(io, server.url(), seen, 200ms);
  subscriber->start();  // no channel: up as soon as connected
  ASSERT_TRUE(run_until(io, [&] { return seen->states.size() == 1; }));
  auto t0 = Clock::now();
  ASSERT_TRUE(run_until(
      io, [&] { return seen->states.size() == 2; }, 2s));
  EXPECT_LT(Clock::now() - t0, 600ms);  // PING unanswered for 200 ms, checked every 100 ms
  EXPECT_EQ(seen->states, (std::vector<bool>{true, false}));
  // And it tries again after its backoff.
  ASSERT_TRUE(run_until(
      io, [&] { return seen->states.size() == 3; }, 3s));
  EXPECT_TRUE(run_until(io, [&] { return server.accepted() == 2; }));
  subscriber->close();
  run_for(io, 50ms);
  EXPECT_EQ(seen->states.size(), 3u);
}

}  // namespace
}  // namespace sb::cluster
