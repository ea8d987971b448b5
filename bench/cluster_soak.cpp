// cluster_soak: the soak of a Switchboard cluster (issue 20).
//
// Starts its own PostgreSQL and Redis (scripts/test-services.sh, as the test command does: on
// loopback, in temporary directories, durability off) and --nodes `switchboard serve` processes
// on them, each with `cluster: {redis, nodeID: nK}` and SWITCHBOARD_DATABASE_URL. Then, from this
// one process (one io_context, one thread, C++20 coroutines):
//
//  * clients    --clients WebSocket clients; client i connects first to node i % N and registers
//               `echo` (for one session that no turn uses, so that turns are not offered 6,000
//               tools). A client whose connection ends reconnects after 0.1-1 s to the next node
//               that takes it and registers again, as an SDK behind a load balancer does;
//  * executions --drivers keep-alive connections, driver d on node d % N, send --rate
//               POST /client-tools/execute per second in all, round-robin over the clients. A
//               call is local when its client is connected to the driver's node at the time it
//               is sent, cross-node when it is connected to another;
//  * turns      --turn-drivers connections, driver d on node d % N, run --turn-rate turns per
//               second in all: a session made on the driver's node, prompted
//               `/call client_turn-d_echo {"text": ...}` (the built-in scripted model calls the
//               tool, then reports its output), the client `turn-d` connected to the next node;
//  * the kill   at --kill-at, kill -9 of node --kill-node; --down-for later it starts again on
//               the same port. Drivers whose node died go to the next node, and come back when
//               it is up again.
//
// Every call is accounted for: answered; refused with an error answer (its message counted);
// ended because its caller's own connection was on the killed node; for turns, completed (or
// failed, with the error the stored message carries) after another node took the turn over,
// read back from a live node; or lost: no answer within its timeout. Clients keep every request
// by its text, which is unique per call: the same text under a second request id is a doubled
// call (the same request again, after a reconnect, is a redelivery, and is counted as such).
// RSS and open descriptors of every node are read every 10 s.
//
// Prints markdown tables on stdout, progress on stderr. Exit status 0 only when nothing was lost
// or doubled and nothing went wrong outside the kill's window (from the kill to the restarted
// node's first healthy answer, plus the call timeout).
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json.hpp>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "support/client.hpp"
#include "support/run.hpp"
#include "test_services.hpp"

namespace {

using namespace bench;
using namespace std::chrono_literals;
using std::chrono::milliseconds;

constexpr std::string_view kUsage = R"(usage: cluster_soak [options]

  --server PATH             switchboard binary (default: the one beside this program,
                            else build/release/switchboard)
  --nodes N                 nodes (default: 3)
  --clients N               connected WebSocket clients, spread over the nodes (default: 6000)
  --rate N                  POST /client-tools/execute per second, over all clients
                            (default: 300)
  --drivers N               connections those go over, spread over the nodes (default: 12)
  --turn-rate N             turns per second that call a client tool (default: 6; 0: none)
  --turn-drivers N          connections those go over (default: 6)
  --turn-answer-delay MS    how long a turn's client takes to answer, as a person would
                            (default: 500): turns wait for it when the node dies
  --duration SECONDS        how long the load runs (default: 300)
  --kill-at SECONDS         kill -9 a node this long after the load starts (default: 120;
                            0: no kill)
  --kill-node K             which node, 1..N (default: N)
  --down-for SECONDS        how long it stays down before it starts again (default: 5)
  --lease MS                cluster.lease (default: 3000, the server's default)
  --call-timeout MS         clientTools.defaultTimeout (default: 30000)
  --connect-concurrency N   connections being set up at once (default: 128)
  --op-timeout MS           limit for every other network operation (default: 10000)
  --max-runtime SECONDS     the whole run is killed after this (default: 1800)
  --keep-temp               keep the temporary directory (server logs, configs)
)";

// ---- options --------------------------------------------------------------------------------

struct Options {
  ServerCommand server;
  int nodes = 3;
  int clients = 6000;
  int rate = 300;
  int drivers = 12;
  int turn_rate = 6;
  int turn_drivers = 6;
  int turn_answer_delay_ms = 500;
  double duration_s = 300;
  double kill_at_s = 120;  // 0: no kill
  int kill_node = 0;       // 1-based; 0: the last
  double down_s = 5;
  int lease_ms = 3000;
  int call_timeout_ms = 30000;
  int connect_concurrency = 128;
  milliseconds op_timeout{10000};
  int max_runtime_s = 1800;
  bool keep_temp = false;
};

Options parse_options(int argc, char** argv) {
  Options o;
  o.server.path = default_server_path().string();
  bool kill_given = false;
  for_each_flag(argc, argv, kUsage, [&](std::string_view flag, const FlagValue& value) {
    if (flag == "--server") {
      o.server.path = fs::absolute(std::string(value())).string();
    } else if (flag == "--nodes") {
      o.nodes = parse_count(flag, value(), 2, 9);
    } else if (flag == "--clients") {
      o.clients = parse_count(flag, value(), 1, 100000);
    } else if (flag == "--rate") {
      o.rate = parse_count(flag, value(), 1, 100000);
    } else if (flag == "--drivers") {
      o.drivers = parse_count(flag, value(), 1, 1000);
    } else if (flag == "--turn-rate") {
      o.turn_rate = parse_count(flag, value(), 0, 1000);
    } else if (flag == "--turn-drivers") {
      o.turn_drivers = parse_count(flag, value(), 1, 1000);
    } else if (flag == "--turn-answer-delay") {
      o.turn_answer_delay_ms = parse_count(flag, value(), 0, 600000);
    } else if (flag == "--duration") {
      o.duration_s = parse_seconds(flag, value());
    } else if (flag == "--kill-at") {
      std::string_view v = value();
      o.kill_at_s = v == "0" ? 0 : parse_seconds(flag, v);
    } else if (flag == "--kill-node") {
      o.kill_node = parse_count(flag, value(), 1, 9);
      kill_given = true;
    } else if (flag == "--down-for") {
      o.down_s = parse_seconds(flag, value());
    } else if (flag == "--lease") {
      o.lease_ms = parse_count(flag, value(), 300, 600000);
    } else if (flag == "--call-timeout") {
      o.call_timeout_ms = parse_count(flag, value(), 100, 3600000);
    } else if (flag == "--connect-concurrency") {
      o.connect_concurrency = parse_count(flag, value(), 1, 100000);
    } else if (flag == "--op-timeout") {
      o.op_timeout = milliseconds(parse_count(flag, value(), 1, 3600000));
    } else if (flag == "--max-runtime") {
      o.max_runtime_s = parse_count(flag, value(), 1, 86400);
    } else if (flag == "--keep-temp") {
      o.keep_temp = true;
    } else {
      return false;
    }
    return true;
  });
  if (!kill_given) o.kill_node = o.nodes;
  if (o.kill_node > o.nodes) throw std::invalid_argument("--kill-node must be at most --nodes");
  if (o.kill_at_s > 0 && o.kill_at_s + o.down_s >= o.duration_s)
    throw std::invalid_argument("--kill-at + --down-for must end before --duration");
  return o;
}

std::string node_id(int k) {
  return "n" + std::to_string(k + 1);
}

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// ---- the run's shared state -----------------------------------------------------------------

struct NodeState {
  std::unique_ptr<ServerProcess> server;
  fs::path data;  // its --data-dir, the same across the restart
  unsigned short port = 0;
  tcp::endpoint endpoint;
  std::string host;
  bool up = false;  // started and healthy; false from the kill until healthy again
  pid_t pid = -1;
  std::uint64_t rss_idle = 0, rss_max = 0, rss_end = 0;
  std::size_t fds_idle = 0, fds_end = 0;
};

// What every call ended as.
struct Tally {
  std::size_t sent = 0;
  std::size_t answered = 0;
  std::size_t error_answers = 0;    // an answer that is not the echo (its message in `errors`)
  std::size_t caller_died = 0;      // the caller's own connection was on the killed node
  std::size_t after_takeover = 0;   // turns: read back from a live node, with the echo
  std::size_t failed_takeover = 0;  // turns: read back from a live node, failed
  std::size_t never_stored = 0;     // turns: the node died before it stored the prompt
  std::size_t lost = 0;             // no answer at all within the timeout
  std::map<std::string, std::size_t> errors;
};

struct Sample {
  Clock::time_point end;
  std::int64_t ns;
  enum Where { Local, CrossNode, Reconnecting } where;
};

// Every request the clients got, by its text.
struct Ledger {
  std::unordered_map<std::string, std::string> request_of_text;
  std::size_t delivered = 0;    // requests received
  std::size_t redelivered = 0;  // the same request id again (after a reconnect)
  std::size_t doubled = 0;      // the same text under another request id
  std::size_t refused = 0;      // `error` answers to a client's result (its call was gone)
  std::size_t cancels = 0;
  std::map<std::string, std::size_t> refusals;

  void record(const std::string& text, const std::string& request_id) {
    ++delivered;
    auto [it, fresh] = request_of_text.try_emplace(text, request_id);
    if (fresh) return;
    if (it->second == request_id)
      ++redelivered;
    else
      ++doubled;
  }
};

struct Soak {
  asio::io_context& io;
  const Options& opt;
  std::vector<NodeState> nodes;
  Ledger ledger;
  Tally executions, turns;
  std::vector<Sample> samples;        // answered executions
  std::vector<std::int64_t> turn_ns;  // turns answered on their own connection
  Clock::time_point start{}, kill_time = Clock::time_point::max(),
                             back_time = Clock::time_point::max();
  bool stopping = false;
  std::size_t reconnects = 0;
  std::vector<double> reconnect_s;  // connection lost -> registered again

  Target target(int k) const {
    return Target{io, nodes[static_cast<std::size_t>(k)].endpoint,
                  nodes[static_cast<std::size_t>(k)].host, opt.op_timeout};
  }
  // The kill's window: from the kill until the restarted node answered, plus two leases (the
  // others' rounds see it) and the reconnect grace (5 s). What happens to a call that was under
  // way at some time in it is the kill's doing and is reported as such; outside it, every
  // failure is a problem.
  Clock::time_point window_end() const {
    if (back_time == Clock::time_point::max()) return back_time;
    return back_time + milliseconds(2 * opt.lease_ms) + 5s;
  }
  bool disturbed(Clock::time_point from, Clock::time_point to) const {
    return to >= kill_time && from <= window_end();
  }
  bool disturbed(Clock::time_point t) const { return disturbed(t, t); }
  // The next node from `k` on (k itself included) that is up; -1 when none is.
  int live_node_from(int k) const {
    int n = static_cast<int>(nodes.size());
    for (int i = 0; i < n; ++i)
      if (nodes[static_cast<std::size_t>((k + i) % n)].up) return (k + i) % n;
    return -1;
  }
  void count_error(Tally& tally, const std::string& message, Clock::time_point sent) {
    ++tally.error_answers;
    ++tally.errors[clip(message, 300)];
    if (!disturbed(sent, Clock::now())) problems().add(message);
  }
  std::size_t next_client = 0;  // the executions' round-robin over the clients
  // Per turn driver: the node its turn is under way on, and since when; node -1: none is.
  struct UnderWay {
    int node = -1;
    Clock::time_point since;
  };
  std::vector<UnderWay> turns_under_way =
      std::vector<UnderWay>(static_cast<std::size_t>(opt.turn_drivers));
  // Turns on node `k` that have waited at least `d` (for their client, which takes
  // --turn-answer-delay to answer).
  int turns_waiting(int k, Clock::duration d) const {
    int n = 0;
    for (const auto& t : turns_under_way)
      if (t.node == k && Clock::now() - t.since >= d) ++n;
    return n;
  }
};

// ---- clients: register `echo`, answer every request, reconnect when the connection ends ----

class RoamingClient : public std::enable_shared_from_this<RoamingClient> {
 public:
  // `session`: the session its tool is offered to; none: every session. `delay`: how long it
  // takes to answer a request (a person confirming something); it reads nothing meanwhile.
  RoamingClient(Soak& soak, std::string id, int node, std::optional<std::string> session,
                milliseconds delay = {})
      : soak_(soak),
        id_(std::move(id)),
        node_(-1),
        last_node_(node),
        session_(std::move(session)),
        delay_(delay) {}

  const std::string& id() const { return id_; }
  // The node it is connected to; -1 while it reconnects.
  int node() const { return node_; }

  // Connects to node `k` and registers; "" or what went wrong.
  asio::awaitable<std::string> connect_to(int k) {
    Target target = soak_.target(k);
    ws_.emplace(soak_.io.get_executor());
    auto& lowest = beast::get_lowest_layer(*ws_);
    if (auto err = co_await connect_stream(lowest, target.endpoint, target.op_timeout);
        !err.empty())
      co_return err;
    lowest.expires_after(target.op_timeout);
    auto [hec] =
        co_await ws_->async_handshake(target.host, "/client-tools/ws/" + id_, tuple_awaitable);
    if (hec) co_return "WebSocket handshake: " + hec.message();
    ws_->text(true);
    json::object message{{"type", "register"}};
    if (session_) message["sessionID"] = *session_;
    message["tools"] = echo_tool_specs();
    std::string text = json::serialize(message);
    auto [wec, wn] = co_await ws_->async_write(asio::buffer(text), tuple_awaitable);
    if (wec) co_return "sending register: " + wec.message();
    // Requests it missed may come before `registered`: they are answered as they come.
    registered_.clear();
    while (registered_.empty()) {
      lowest.expires_after(target.op_timeout);
      auto [rec, rn] = co_await ws_->async_read(buffer_, tuple_awaitable);
      if (rec) co_return "waiting for registered: " + rec.message();
      if (auto err = co_await handle(); !err.empty()) co_return err;
    }
    lowest.expires_never();
    if (registered_ != "ok") co_return registered_;
    node_ = last_node_ = k;
    co_return "";
  }

  // Answers requests; when the connection ends, connects again until the run stops: to another
  // node, picked at random as a load balancer would, then to the ones after it in turn.
  asio::awaitable<void> run() {
    for (;;) {
      co_await serve();
      node_ = -1;
      if (soak_.stopping) co_return;
      ++soak_.reconnects;
      auto lost_at = Clock::now();
      static std::minstd_rand random(42);
      co_await sleep_for(milliseconds(100 + random() % 900));
      const int n = static_cast<int>(soak_.nodes.size());
      const int first = last_node_ + 1 + static_cast<int>(random() % static_cast<unsigned>(n - 1));
      for (int attempt = 0; !soak_.stopping; ++attempt) {
        int k = (first + attempt) % n;
        auto err = co_await connect_to(k);
        if (err.empty()) break;
        close();
        if ((attempt + 1) % n == 0) co_await sleep_for(500ms);
      }
      if (node_ >= 0) soak_.reconnect_s.push_back(seconds(Clock::now() - lost_at));
    }
  }

  void close() {
    if (!ws_) return;
    boost::system::error_code ignored;
    beast::get_lowest_layer(*ws_).socket().close(ignored);
  }

 private:
  asio::awaitable<void> serve() {
    for (;;) {
      auto [ec, n] = co_await ws_->async_read(buffer_, tuple_awaitable);
      if (ec) {
        // The killed node's clients lose their connection; anything else is a problem.
        if (!soak_.stopping && !soak_.disturbed(Clock::now()))
          problems().add("client " + id_ + ": WebSocket read: " + ec.message());
        co_return;
      }
      if (auto err = co_await handle(); !err.empty()) {
        if (!soak_.stopping) problems().add("client " + id_ + ": " + err);
        co_return;
      }
    }
  }

  // Handles the message in buffer_; "" or why the connection cannot go on.
  asio::awaitable<std::string> handle() {
    std::string text(static_cast<const char*>(buffer_.cdata().data()), buffer_.size());
    buffer_.consume(buffer_.size());
    auto msg = parse_json(text);
    auto* type = msg ? string_field(*msg, "type") : nullptr;
    if (type && *type == "request") {
      const json::value* req = msg->get_object().if_contains("request");
      auto echo = req ? echo_request(*req) : std::nullopt;
      if (!echo) co_return "malformed request " + clip(text);
      soak_.ledger.record(echo->text, echo->request_id);
      if (delay_ > milliseconds::zero()) co_await sleep_for(delay_);
      reply_ = json::serialize(json::object{{"type", "result"},
                                            {"requestID", echo->request_id},
                                            {"result", echo_result(echo->text)}});
      beast::get_lowest_layer(*ws_).expires_after(soak_.opt.op_timeout);
      auto [wec, wn] = co_await ws_->async_write(asio::buffer(reply_), tuple_awaitable);
      beast::get_lowest_layer(*ws_).expires_never();
      if (wec) co_return "WebSocket write: " + wec.message();
    } else if (type && *type == "registered") {
      const json::array* ids = nullptr;
      if (auto* f = msg->get_object().if_contains("toolIDs")) ids = f->if_array();
      bool ok = ids && ids->size() == 1 && (*ids)[0].is_string() &&
                (*ids)[0].get_string() == "client_" + id_ + "_echo";
      registered_ =
          ok ? "ok"
             : "expected {type: registered, toolIDs: [client_" + id_ + "_echo]}, got " + clip(text);
    } else if (type && *type == "error") {
      if (!registered_.empty()) {
        // A result the server refused: its call had ended (its caller's node died, or it
        // timed out). Counted; outside the kill's window it is a problem.
        ++soak_.ledger.refused;
        ++soak_.ledger.refusals[clip(text, 160)];
        if (!soak_.disturbed(Clock::now())) problems().add("client " + id_ + ": " + clip(text));
      } else {
        registered_ = "error: " + clip(text);
      }
    } else if (type && *type == "cancel") {
      ++soak_.ledger.cancels;
    } else if (!type || *type != "ping") {
      co_return "unexpected message " + clip(text);
    }
    co_return "";
  }

  Soak& soak_;
  std::string id_;
  int node_;       // connected to; -1: not connected
  int last_node_;  // where it was (or is to be) connected last
  std::optional<std::string> session_;
  milliseconds delay_;
  std::optional<websocket::stream<beast::tcp_stream>> ws_;
  beast::flat_buffer buffer_;
  std::string reply_;
  // While connecting: "" until the `registered` answer, then "ok" or what was wrong with it.
  std::string registered_ = "ok";
};

using Clients = std::vector<std::shared_ptr<RoamingClient>>;

// Connects every client to its first node, `concurrency` at a time, and starts its run().
asio::awaitable<void> connect_all(Soak& soak, Clients& clients, int concurrency) {
  std::size_t next = 0, failed = 0;
  int workers = std::min(static_cast<int>(clients.size()), concurrency);
  Latch done(soak.io.get_executor(), static_cast<std::size_t>(workers));
  auto worker = [&]() -> asio::awaitable<void> {
    while (next < clients.size() && failed == 0) {
      auto& c = clients[next];
      int k = static_cast<int>(next % soak.nodes.size());
      ++next;
      if (auto err = co_await c->connect_to(k); !err.empty()) {
        ++failed;
        problems().add("client " + c->id() + " setup on " + node_id(k) + ": " + err);
        co_return;
      }
      asio::co_spawn(soak.io, c->run(), [c](std::exception_ptr e) {
        if (e) problems().add("client " + c->id() + ": " + describe(e));
      });
    }
  };
  for (int w = 0; w < workers; ++w)
    asio::co_spawn(soak.io, worker(), [&done](std::exception_ptr e) {
      if (e) problems().add("setup worker: " + describe(e));
      done.count_down();
    });
  auto bound = soak.opt.op_timeout * 4 + milliseconds(clients.size()) * 20;
  if (!co_await done.wait(std::chrono::duration_cast<milliseconds>(bound)) || failed > 0)
    throw Fatal("setting up " + std::to_string(clients.size()) + " clients failed");
}

// ---- drivers --------------------------------------------------------------------------------

// A keep-alive connection to the driver's node; when that node dies it goes to the next live
// one, and back to its own once that answers again.
class Connection {
 public:
  Connection(Soak& soak, int home) : soak_(soak), home_(home), stream_(soak.io.get_executor()) {}
  int node() const { return node_; }

  // Connected to the home node if it is up, else to the next live node; "" or what went wrong.
  asio::awaitable<std::string> ensure() {
    int want = soak_.live_node_from(home_);
    if (want < 0) co_return "no node is up";
    if (node_ == want) co_return "";
    drop();
    auto target = soak_.target(want);
    if (auto err = co_await connect_stream(stream_, target.endpoint, target.op_timeout);
        !err.empty())
      co_return "connecting to " + node_id(want) + ": " + err;
    node_ = want;
    co_return "";
  }
  void drop() {
    stream_.close();
    buffer_.clear();
    node_ = -1;
  }
  // One request and its answer within `timeout`; an empty error when it answered.
  asio::awaitable<HttpResult> call(http::request<http::string_body>& req, milliseconds timeout) {
    req.set(http::field::host, soak_.nodes[static_cast<std::size_t>(node_)].host);
    co_return co_await http_call(stream_, buffer_, req, timeout);
  }

 private:
  Soak& soak_;
  int home_;
  int node_ = -1;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
};

// A paced driver's k-th call: its time (start + k × interval) has come and its connection is up
// (Go); the run is over (Stop); or no node could be reached: no call is made, which is a problem
// outside the kill's window (Skip).
enum class Slot { Go, Skip, Stop };
asio::awaitable<Slot> next_slot(Soak& soak, Connection& conn, Clock::duration interval,
                                std::uint64_t k, Clock::time_point stop_at, std::string who) {
  co_await sleep_until(soak.start + interval * static_cast<std::int64_t>(k));
  if (Clock::now() >= stop_at) co_return Slot::Stop;
  if (auto err = co_await conn.ensure(); !err.empty()) {
    if (!soak.disturbed(Clock::now())) problems().add(who + ": " + err);
    co_return Slot::Skip;
  }
  co_return Slot::Go;
}

// Why a call sent at `sent` got no answer until now: its caller's node died under it, or it is
// lost.
enum class NoAnswer { CallerDied, Lost };
NoAnswer classify(const Soak& soak, int node, Clock::time_point sent) {
  bool node_down = node >= 0 && !soak.nodes[static_cast<std::size_t>(node)].up;
  return node_down && soak.disturbed(sent, Clock::now()) ? NoAnswer::CallerDied : NoAnswer::Lost;
}

// POST /client-tools/execute at its share of --rate, round-robin over the clients.
asio::awaitable<void> execute_driver(Soak& soak, const Clients& clients, int index,
                                     Clock::time_point stop_at) {
  const auto& opt = soak.opt;
  Connection conn(soak, index % opt.nodes);
  auto interval = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(static_cast<double>(opt.drivers) / opt.rate));
  auto req = make_request(http::verb::post, "/client-tools/execute", "", "");
  req.set(http::field::content_type, "application/json");
  const auto timeout = milliseconds(opt.call_timeout_ms) + opt.op_timeout;
  for (std::uint64_t k = 0;; ++k) {
    auto slot =
        co_await next_slot(soak, conn, interval, k, stop_at, "driver " + std::to_string(index));
    if (slot == Slot::Stop) break;
    if (slot == Slot::Skip) continue;
    const auto& client = clients[soak.next_client++ % clients.size()];
    std::string text = "x" + std::to_string(index) + "#" + std::to_string(k);
    req.body() = R"({"clientID":")" + client->id() + R"(","tool":"echo","input":{"text":")" + text +
                 R"("}})";
    req.prepare_payload();
    int client_node = client->node();
    auto where = client_node < 0              ? Sample::Reconnecting
                 : client_node == conn.node() ? Sample::Local
                                              : Sample::CrossNode;
    int node = conn.node();
    ++soak.executions.sent;
    auto t0 = Clock::now();
    auto r = co_await conn.call(req, timeout);
    auto t1 = Clock::now();
    if (!r.error.empty()) {
      conn.drop();
      if (classify(soak, node, t0) == NoAnswer::CallerDied) {
        ++soak.executions.caller_died;
      } else {
        ++soak.executions.lost;
        problems().add("execute " + text + " on " + node_id(node) + ": no answer (" + r.error +
                       ")");
      }
      continue;
    }
    auto body = r.res.result() == http::status::ok ? parse_json(r.res.body()) : std::nullopt;
    auto* status = body ? string_field(*body, "status") : nullptr;
    auto* output = body ? string_field(*body, "output") : nullptr;
    if (!status || *status != "success" || !output || *output != text) {
      soak.count_error(soak.executions,
                       "execute on " + node_id(node) + ": " + std::to_string(r.res.result_int()) +
                           " " + clip(r.res.body(), 120),
                       t0);
      continue;
    }
    ++soak.executions.answered;
    soak.samples.push_back(
        {t1, std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count(), where});
  }
}

// A turn's end as a live node lists it, after its caller's node died: the assistant message the
// turn ended with (with the echo or with an error), read every 250 ms until `deadline`. A
// session with no message a second after the kill never had the prompt stored (the node died
// first): the caller's failed request is all there is to it, and nothing happens later.
asio::awaitable<void> follow_turn(Soak& soak, Connection& conn, const std::string& sid,
                                  const std::string& text, Clock::time_point deadline) {
  auto req = make_request(http::verb::get, "/session/" + sid + "/message", "", "");
  std::string last_seen = "nothing";
  while (Clock::now() < deadline) {
    co_await sleep_for(250ms);
    if (auto err = co_await conn.ensure(); !err.empty()) {
      last_seen = err;
      continue;
    }
    auto r = co_await conn.call(req, soak.opt.op_timeout);
    if (!r.error.empty()) {
      conn.drop();
      last_seen = r.error;
      continue;
    }
    auto list = parse_json(r.res.body());
    if (r.res.result() != http::status::ok || !list || !list->is_array()) {
      last_seen = std::to_string(r.res.result_int()) + " " + clip(r.res.body(), 120);
      continue;
    }
    if (list->get_array().empty()) {
      if (Clock::now() - soak.kill_time < 1s) continue;
      ++soak.turns.never_stored;
      co_return;
    }
    const auto& last = list->get_array().back();
    const json::value* info = last.is_object() ? last.get_object().if_contains("info") : nullptr;
    auto* role = info ? string_field(*info, "role") : nullptr;
    auto* finish = info ? string_field(*info, "finish") : nullptr;
    const json::value* error =
        info && info->is_object() ? info->get_object().if_contains("error") : nullptr;
    last_seen = clip(json::serialize(last), 160);
    if (!role || *role != "assistant" || (!error && (!finish || *finish == "tool-calls")))
      continue;  // not over yet
    std::string said;
    if (assistant_text(last, said).empty() && said.find(text) != std::string::npos) {
      ++soak.turns.after_takeover;
    } else {
      ++soak.turns.failed_takeover;
      ++soak.turns.errors["after the takeover: " +
                          clip(error ? json::serialize(*error) : last_seen, 160)];
    }
    co_return;
  }
  ++soak.turns.lost;
  problems().add("turn " + text + " (session " + sid + "): no end read back, last seen " +
                 last_seen);
}

// Turns at its share of --turn-rate: a session on its node, a prompt that calls the tool of the
// client `turn-<index>`.
asio::awaitable<void> turn_driver(Soak& soak, int index, Clock::time_point stop_at) {
  const auto& opt = soak.opt;
  Connection conn(soak, index % opt.nodes);
  auto interval = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(static_cast<double>(opt.turn_drivers) / opt.turn_rate));
  const auto timeout = milliseconds(opt.call_timeout_ms) + opt.op_timeout * 2;
  const std::string tool = "client_turn-" + std::to_string(index) + "_echo";
  for (std::uint64_t k = 0;; ++k) {
    auto slot = co_await next_slot(soak, conn, interval, k, stop_at,
                                   "turn driver " + std::to_string(index));
    if (slot == Slot::Stop) break;
    if (slot == Slot::Skip) continue;
    auto create = make_request(http::verb::post, "/session", "", "{}");
    auto made = co_await conn.call(create, opt.op_timeout);
    auto made_body = made.error.empty() ? parse_json(made.res.body()) : std::nullopt;
    auto* sid = made_body ? string_field(*made_body, "id") : nullptr;
    if (!sid) {
      // No turn was started: not a turn of the tally.
      if (!made.error.empty()) conn.drop();
      if (!soak.disturbed(Clock::now()))
        problems().add("POST /session: " +
                       (made.error.empty()
                            ? std::to_string(made.res.result_int()) + " " + clip(made.res.body())
                            : made.error));
      continue;
    }
    std::string session(*sid);
    std::string text = "t" + std::to_string(index) + "#" + std::to_string(k);
    std::string prompt = "/call " + tool + " " + json::serialize(json::object{{"text", text}});
    auto req = make_request(
        http::verb::post, "/session/" + session + "/message", "",
        json::serialize(json::object{
            {"parts", json::array{json::object{{"type", "text"}, {"text", prompt}}}}}));
    int node = conn.node();
    ++soak.turns.sent;
    auto t0 = Clock::now();
    soak.turns_under_way[static_cast<std::size_t>(index)] = {node, t0};
    auto r = co_await conn.call(req, timeout);
    soak.turns_under_way[static_cast<std::size_t>(index)].node = -1;
    auto t1 = Clock::now();
    if (!r.error.empty()) {
      conn.drop();
      if (classify(soak, node, t0) == NoAnswer::CallerDied) {
        ++soak.turns.caller_died;
        // Its turn lives on in the store: another node takes it over.
        co_await follow_turn(soak, conn, session, text,
                             t1 + milliseconds(opt.call_timeout_ms) + 60s);
      } else {
        ++soak.turns.lost;
        problems().add("turn " + text + " on " + node_id(node) + ": no answer (" + r.error + ")");
      }
      continue;
    }
    std::string said;
    if (auto err = assistant_text(r.res, said);
        !err.empty() || said.find(text) == std::string::npos) {
      soak.count_error(soak.turns,
                       "turn on " + node_id(node) + ": " +
                           (err.empty() ? "the answer lacks the echo: " + clip(said, 300) : err),
                       t0);
      continue;
    }
    ++soak.turns.answered;
    soak.turn_ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
  }
}

// ---- the nodes ------------------------------------------------------------------------------

json::object node_config(const Options& opt, const std::string& redis, int k) {
  std::size_t connections =
      static_cast<std::size_t>(opt.clients + opt.drivers + opt.turn_drivers * 2) + 256;
  return json::object{
      {"clientTools", json::object{{"rateLimit", 0},
                                   {"keepaliveInterval", 30000},
                                   {"defaultTimeout", opt.call_timeout_ms},
                                   {"clientTokens", false}}},
      {"server", json::object{{"subscriberQueueLimit", 65536}, {"maxConnections", connections}}},
      {"cluster", json::object{{"redis", redis}, {"nodeID", node_id(k)}, {"lease", opt.lease_ms}}}};
}

ServerProcess::Options node_options(const Options& opt, RunDirectory& temp,
                                    const std::string& redis, const std::string& postgres,
                                    NodeState& node, int k) {
  auto options = server_options(opt.server, temp.fresh(node_id(k)), node_config(opt, redis, k));
  options.env.push_back("SWITCHBOARD_DATABASE_URL=" + postgres);
  options.data_dir = node.data;
  options.port = node.port;  // 0 the first time; its old port after a kill
  return options;
}

// GET /health of node `k` until it answers 200 with its cluster ok and `members` nodes listed.
asio::awaitable<std::string> wait_healthy(Soak& soak, int k, std::size_t members,
                                          Clock::duration within) {
  auto deadline = Clock::now() + within;
  std::string last;
  while (Clock::now() < deadline) {
    beast::tcp_stream stream(soak.io.get_executor());
    auto target = soak.target(k);
    if (auto err = co_await connect_stream(stream, target.endpoint, 1s); err.empty()) {
      beast::flat_buffer buffer;
      auto req = make_request(http::verb::get, "/health", target.host, "");
      auto r = co_await http_call(stream, buffer, req, soak.opt.op_timeout);
      auto body = r.error.empty() ? parse_json(r.res.body()) : std::nullopt;
      const json::value* cluster =
          body && body->is_object() ? body->get_object().if_contains("cluster") : nullptr;
      const json::value* ok =
          cluster && cluster->is_object() ? cluster->get_object().if_contains("ok") : nullptr;
      const json::value* list =
          cluster && cluster->is_object() ? cluster->get_object().if_contains("nodes") : nullptr;
      if (r.error.empty() && r.res.result() == http::status::ok && ok && ok->is_bool() &&
          ok->get_bool() && list && list->is_array() && list->get_array().size() == members)
        co_return "";
      last =
          r.error.empty() ? std::to_string(r.res.result_int()) + " " + clip(r.res.body()) : r.error;
    } else {
      last = err;
    }
    co_await sleep_for(100ms);
  }
  co_return "node " + node_id(k) + " was not healthy with " + std::to_string(members) +
      " nodes within the time: " + last;
}

// ---- the run --------------------------------------------------------------------------------

struct Interval {
  double at_s = 0;
  std::size_t answered = 0;  // executions answered in it
  double p99_us = 0;
  std::vector<std::uint64_t> rss;  // per node; 0 while it is down
};

struct Report {
  double connect_s = 0;
  std::vector<Interval> intervals;
  double kill_at_s = 0, back_after_s = 0;  // back_after: from the kill to the first healthy answer
  std::size_t clients_of_killed = 0;
  int turns_on_killed = 0;  // turns waiting for their client on it
  double all_back_s = 0;    // from the kill until every client was connected again
  bool completed = false;
};

double percentile_us(std::vector<std::int64_t> ns, double p) {
  std::sort(ns.begin(), ns.end());
  return static_cast<double>(nearest_rank(ns, p)) / 1000.0;
}

Clock::time_point after_start(const Soak& soak, double s) {
  return soak.start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// At --kill-at: kill -9 of the victim node; --down-for later it starts again on its port and
// data directory, and counts as up once it is healthy among all the nodes.
asio::awaitable<void> kill_and_restart(Soak& soak, RunDirectory& temp, const std::string& redis,
                                       const std::string& postgres, const Clients& clients,
                                       Report& report) {
  const auto& opt = soak.opt;
  const int victim = opt.kill_node - 1;
  auto& node = soak.nodes[static_cast<std::size_t>(victim)];
  co_await sleep_until(after_start(soak, opt.kill_at_s));
  // Mid-call: when a turn on the node has waited 200 ms for its client (which answers after
  // --turn-answer-delay), so that the takeover of a waiting turn is part of every run.
  const auto waited = std::min(200ms, milliseconds(opt.turn_answer_delay_ms) / 2);
  if (opt.turn_rate > 0) {
    auto give_up = Clock::now() + 10s;
    while (soak.turns_waiting(victim, waited) == 0 && Clock::now() < give_up)
      co_await sleep_for(5ms);
  }
  for (const auto& c : clients)
    if (c->node() == victim) ++report.clients_of_killed;
  soak.kill_time = Clock::now();
  report.kill_at_s = seconds(soak.kill_time - soak.start);
  report.turns_on_killed = soak.turns_waiting(victim, waited);
  node.up = false;
  node.server->send_signal(SIGKILL);
  node.server->wait_exit(5s);
  std::cerr << "  killed " << node_id(victim) << " (" << report.clients_of_killed
            << " clients were on it)" << std::endl;
  co_await sleep_until(soak.kill_time + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(opt.down_s)));
  auto options = node_options(opt, temp, redis, postgres, node, victim);
  options.wait_listening = false;  // this loop must go on: it waits for the health check below
  node.server = start_server(opt.server, std::move(options));
  node.pid = node.server->pid();
  if (auto err = co_await wait_healthy(soak, victim, static_cast<std::size_t>(opt.nodes), 30s);
      !err.empty())
    throw Fatal(err);
  soak.back_time = Clock::now();
  node.up = true;
  report.back_after_s = seconds(soak.back_time - soak.kill_time);
  std::cerr << "  " << node_id(victim) << " is back, " << fmt(report.back_after_s, 2)
            << " s after the kill" << std::endl;
}

// From the kill on: when every client is connected again.
asio::awaitable<void> watch_reconnects(Soak& soak, const Clients& clients, Report& report,
                                       Clock::time_point stop_at) {
  while (soak.kill_time == Clock::time_point::max() && Clock::now() < stop_at)
    co_await sleep_for(10ms);
  co_await sleep_for(100ms);
  while (Clock::now() < stop_at) {
    if (std::all_of(clients.begin(), clients.end(), [](const auto& c) { return c->node() >= 0; })) {
      report.all_back_s = seconds(Clock::now() - soak.kill_time);
      co_return;
    }
    co_await sleep_for(50ms);
  }
}

asio::awaitable<void> run(Soak& soak, RunDirectory& temp, const std::string& redis,
                          const std::string& postgres, Report& report) {
  const auto& opt = soak.opt;
  // The nodes: started one after another (each waits for the store's schema), then all must
  // see each other.
  for (int k = 0; k < opt.nodes; ++k) {
    auto& node = soak.nodes[static_cast<std::size_t>(k)];
    node.data = temp.fresh(node_id(k) + "-data");
    node.server = start_server(opt.server, node_options(opt, temp, redis, postgres, node, k));
    node.port = node.server->port();
    node.pid = node.server->pid();
    node.endpoint = tcp::endpoint(asio::ip::make_address_v4("127.0.0.1"), node.port);
    node.host = "127.0.0.1:" + std::to_string(node.port);
  }
  for (int k = 0; k < opt.nodes; ++k) {
    if (auto err = co_await wait_healthy(soak, k, static_cast<std::size_t>(opt.nodes), 20s);
        !err.empty())
      throw Fatal(err);
    soak.nodes[static_cast<std::size_t>(k)].up = true;
  }

  // The session the execution clients' tools are offered to (no turn runs in it).
  std::string parked;
  {
    beast::tcp_stream stream(soak.io.get_executor());
    auto target = soak.target(0);
    if (auto err = co_await connect_stream(stream, target.endpoint, opt.op_timeout); !err.empty())
      throw Fatal("POST /session: " + err);
    beast::flat_buffer buffer;
    auto req = make_request(http::verb::post, "/session", target.host, "{}");
    auto r = co_await http_call(stream, buffer, req, opt.op_timeout);
    auto body = r.error.empty() ? parse_json(r.res.body()) : std::nullopt;
    auto* id = body ? string_field(*body, "id") : nullptr;
    if (!id) throw Fatal("POST /session: " + (r.error.empty() ? clip(r.res.body()) : r.error));
    parked = *id;
  }

  Clients clients, turn_clients;
  for (int i = 0; i < opt.clients; ++i)
    clients.push_back(
        std::make_shared<RoamingClient>(soak, "bench-" + std::to_string(i), i % opt.nodes, parked));
  std::cerr << "connecting " << opt.clients << " clients over " << opt.nodes << " nodes"
            << std::endl;
  auto t0 = Clock::now();
  co_await connect_all(soak, clients, opt.connect_concurrency);
  if (opt.turn_rate > 0) {
    // Turn client d on the node after its driver's: every turn's call crosses nodes.
    for (int d = 0; d < opt.turn_drivers; ++d)
      turn_clients.push_back(
          std::make_shared<RoamingClient>(soak, "turn-" + std::to_string(d), (d + 1) % opt.nodes,
                                          std::nullopt, milliseconds(opt.turn_answer_delay_ms)));
    for (int d = 0; d < opt.turn_drivers; ++d) {
      auto& c = turn_clients[static_cast<std::size_t>(d)];
      if (auto err = co_await c->connect_to((d + 1) % opt.nodes); !err.empty())
        throw Fatal("turn client " + c->id() + ": " + err);
      asio::co_spawn(soak.io, c->run(), [c](std::exception_ptr e) {
        if (e) problems().add("client " + c->id() + ": " + describe(e));
      });
    }
  }
  report.connect_s = seconds(Clock::now() - t0);
  std::cerr << "  connected in " << fmt(report.connect_s) << " s" << std::endl;
  co_await sleep_for(2s);  // the relay's announcements settle
  for (auto& node : soak.nodes) {
    node.rss_idle = rss_bytes(node.pid);
    node.fds_idle = open_fds(node.pid);
  }

  // The load.
  soak.start = Clock::now();
  auto stop_at = soak.start + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(opt.duration_s));
  std::size_t drivers_left = static_cast<std::size_t>(opt.drivers) +
                             static_cast<std::size_t>(opt.turn_rate > 0 ? opt.turn_drivers : 0);
  Latch done(soak.io.get_executor(), drivers_left);
  auto finished = [&done](std::exception_ptr e) {
    if (e) problems().add("driver: " + describe(e));
    done.count_down();
  };
  for (int d = 0; d < opt.drivers; ++d)
    asio::co_spawn(soak.io, execute_driver(soak, clients, d, stop_at), finished);
  if (opt.turn_rate > 0)
    for (int d = 0; d < opt.turn_drivers; ++d)
      asio::co_spawn(soak.io, turn_driver(soak, d, stop_at), finished);
  std::cerr << "load: " << opt.rate << " executions/s and " << opt.turn_rate << " turns/s for "
            << opt.duration_s << " s" << std::endl;

  if (opt.kill_at_s > 0) {
    asio::co_spawn(soak.io, kill_and_restart(soak, temp, redis, postgres, clients, report),
                   [](std::exception_ptr e) {
                     if (e) problems().add("the kill: " + describe(e));
                   });
    asio::co_spawn(soak.io, watch_reconnects(soak, clients, report, stop_at), asio::detached);
  }

  // Readings every 10 s.
  std::size_t seen = 0;
  for (auto next = soak.start + 10s; next <= stop_at + 1s; next += 10s) {
    co_await sleep_until(next);
    Interval in;
    in.at_s = seconds(Clock::now() - soak.start);
    std::vector<std::int64_t> lat;
    for (std::size_t i = seen; i < soak.samples.size(); ++i)
      lat.push_back(soak.samples[i].ns);
    in.answered = soak.samples.size() - seen;
    seen = soak.samples.size();
    in.p99_us = percentile_us(std::move(lat), 0.99);
    for (auto& node : soak.nodes) {
      std::uint64_t rss = node.up ? rss_bytes(node.pid) : 0;
      in.rss.push_back(rss);
      node.rss_max = std::max(node.rss_max, rss);
    }
    std::cerr << "  " << fmt(in.at_s, 0) << " s: " << soak.executions.answered << " executions, "
              << soak.turns.answered << " turns answered; RSS";
    for (auto rss : in.rss)
      std::cerr << " " << rss / 1024 << " KiB";
    std::cerr << std::endl;
    report.intervals.push_back(std::move(in));
  }
  auto wait_for = milliseconds(opt.call_timeout_ms) + opt.op_timeout * 3 + 60s;
  if (!co_await done.wait(wait_for))
    throw Fatal(std::to_string(done.remaining()) + " drivers did not stop");
  for (auto& node : soak.nodes) {
    node.rss_end = rss_bytes(node.pid);
    node.fds_end = open_fds(node.pid);
  }
  report.completed = true;

  soak.stopping = true;
  for (auto& c : clients)
    c->close();
  for (auto& c : turn_clients)
    c->close();
  co_await sleep_for(200ms);
}

// ---- report ---------------------------------------------------------------------------------

void print_tally(const char* what, const Tally& t) {
  std::cout << "| " << what << " | " << fmt_int(static_cast<double>(t.sent)) << " | "
            << fmt_int(static_cast<double>(t.answered)) << " | "
            << fmt_int(static_cast<double>(t.error_answers)) << " | "
            << fmt_int(static_cast<double>(t.caller_died)) << " | "
            << fmt_int(static_cast<double>(t.after_takeover)) << " | "
            << fmt_int(static_cast<double>(t.failed_takeover)) << " | "
            << fmt_int(static_cast<double>(t.never_stored)) << " | "
            << fmt_int(static_cast<double>(t.lost)) << " |\n";
}

void print_report(const Soak& soak, const Report& r) {
  const auto& opt = soak.opt;
  std::cout << "## Cluster soak: " << opt.nodes << " nodes, " << fmt_int(opt.clients)
            << " WebSocket clients, " << opt.rate << " executions/s and " << opt.turn_rate
            << " turns/s for " << fmt(opt.duration_s, 0) << " s";
  if (opt.kill_at_s > 0)
    std::cout << "; kill -9 of " << node_id(opt.kill_node - 1) << " at " << fmt(opt.kill_at_s, 0)
              << " s, restarted " << fmt(opt.down_s, 0) << " s later";
  std::cout << "\n\n";
  std::cout << "Server " << opt.server.path << "; lease " << opt.lease_ms << " ms, call timeout "
            << opt.call_timeout_ms << " ms; " << cpu_model() << ", Linux " << linux_release()
            << ". Clients connected in " << fmt(r.connect_s) << " s.\n\n";

  std::cout << "| calls | sent | answered | error answers | caller's node died | completed "
               "after takeover | failed after takeover | prompt never stored | lost "
               "|\n|---|---|---|---|---|---|---|---|---|\n";
  print_tally("executions", soak.executions);
  print_tally("turns", soak.turns);
  const auto& l = soak.ledger;
  std::cout << "\nClients: " << fmt_int(static_cast<double>(l.delivered)) << " requests received, "
            << fmt_int(static_cast<double>(l.redelivered)) << " of them again after a reconnect, **"
            << l.doubled << " doubled**; " << l.refused
            << " results refused (their call had ended), " << l.cancels << " cancels; "
            << soak.reconnects << " reconnects.\n";
  for (const auto* m : {&soak.executions.errors, &soak.turns.errors, &l.refusals})
    for (const auto& [message, count] : *m)
      std::cout << "- " << count << " x `" << message << "`\n";

  // Latency: local against cross-node, before the kill (steady) and over the whole run.
  std::cout << "\n| executions | count | p50 | p99 | max |\n|---|---|---|---|---|\n";
  auto row = [&](const std::string& label, auto keep) {
    std::vector<std::int64_t> ns;
    for (const auto& s : soak.samples)
      if (keep(s)) ns.push_back(s.ns);
    std::sort(ns.begin(), ns.end());
    double max = ns.empty() ? 0 : static_cast<double>(ns.back()) / 1000.0;
    std::cout << "| " << label << " | " << fmt_int(static_cast<double>(ns.size())) << " | "
              << fmt(static_cast<double>(nearest_rank(ns, 0.5)) / 1000.0, 0) << " µs | "
              << fmt(static_cast<double>(nearest_rank(ns, 0.99)) / 1000.0, 0) << " µs | "
              << fmt(max, 0) << " µs |\n";
  };
  auto before = [&](const Sample& s) { return s.end < soak.kill_time; };
  auto sent = [](const Sample& s) { return s.end - std::chrono::nanoseconds(s.ns); };
  auto after = [&](const Sample& s) { return sent(s) > soak.window_end(); };
  row("local, before the kill",
      [&](const Sample& s) { return before(s) && s.where == Sample::Local; });
  row("cross-node, before the kill",
      [&](const Sample& s) { return before(s) && s.where == Sample::CrossNode; });
  if (opt.kill_at_s > 0) {
    row("under way in the kill's window",
        [&](const Sample& s) { return soak.disturbed(sent(s), s.end); });
    row("local, after the window",
        [&](const Sample& s) { return after(s) && s.where == Sample::Local; });
    row("cross-node, after the window",
        [&](const Sample& s) { return after(s) && s.where == Sample::CrossNode; });
  }
  row("all", [](const Sample&) { return true; });
  if (!soak.turn_ns.empty()) {
    auto ns = soak.turn_ns;
    std::sort(ns.begin(), ns.end());
    std::cout << "| turns (session + prompt + cross-node call) | "
              << fmt_int(static_cast<double>(ns.size())) << " | "
              << fmt(static_cast<double>(nearest_rank(ns, 0.5)) / 1e6, 1) << " ms | "
              << fmt(static_cast<double>(nearest_rank(ns, 0.99)) / 1e6, 1) << " ms | "
              << fmt(static_cast<double>(ns.back()) / 1e6, 1) << " ms |\n";
  }

  if (opt.kill_at_s > 0)
    std::cout << "\nThe kill, at " << fmt(r.kill_at_s, 2) << " s: " << r.clients_of_killed
              << " clients and " << r.turns_on_killed << " turns waiting for their client were on "
              << node_id(opt.kill_node - 1) << "; every client was connected again "
              << fmt(r.all_back_s, 2) << " s after the kill (" << soak.reconnect_s.size()
              << " reconnects, p50 " << fmt(percentile(soak.reconnect_s, 0.5), 2) << " s, max "
              << fmt(soak.reconnect_s.empty() ? 0 : percentile(soak.reconnect_s, 1.0), 2)
              << " s from losing the connection to registered again); the node answered again "
              << fmt(r.back_after_s, 2) << " s after the kill.\n";

  std::cout << "\n| node | RSS, clients connected | RSS at the end | max | fds, connected | fds "
               "at the end |\n|---|---|---|---|---|---|\n";
  for (std::size_t k = 0; k < soak.nodes.size(); ++k) {
    const auto& n = soak.nodes[k];
    std::cout << "| " << node_id(static_cast<int>(k)) << " | " << n.rss_idle / 1024 << " KiB | "
              << n.rss_end / 1024 << " KiB | " << n.rss_max / 1024 << " KiB | " << n.fds_idle
              << " | " << n.fds_end << " |\n";
  }
  std::cout << "\n| s | executions answered | p99 |";
  for (std::size_t k = 0; k < soak.nodes.size(); ++k)
    std::cout << " RSS " << node_id(static_cast<int>(k)) << " |";
  std::cout << "\n|---|---|---|";
  for (std::size_t k = 0; k < soak.nodes.size(); ++k)
    std::cout << "---|";
  std::cout << "\n";
  for (const auto& in : r.intervals) {
    std::cout << "| " << fmt(in.at_s, 0) << " | " << fmt_int(static_cast<double>(in.answered))
              << " | " << fmt(in.p99_us / 1000.0, 1) << " ms |";
    for (auto rss : in.rss)
      std::cout << " " << (rss ? std::to_string(rss / 1024) + " KiB" : "down") << " |";
    std::cout << "\n";
  }
  std::cout << "\nErrors outside the kill's window (problems): " << problems().count << "\n"
            << std::flush;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt = parse_or_exit("cluster_soak", kUsage, [&] { return parse_options(argc, argv); });
  begin_run("cluster_soak", opt.max_runtime_s);
  try {
    require_server(opt.server);
    // This process holds every client; each node at most all of them (after a kill).
    raise_fd_limit(static_cast<std::size_t>(opt.clients) * 2 + 1024, "lower --clients");
    RunDirectory temp("cluster-soak", opt.keep_temp);
    std::cerr << "starting PostgreSQL and Redis (scripts/test-services.sh)" << std::endl;
    sb::test::OwnService postgres("postgres"), redis("redis");
    asio::io_context io(1);
    Soak soak{io, opt, std::vector<NodeState>(static_cast<std::size_t>(opt.nodes))};
    Report report;
    std::exception_ptr failure =
        run_to_end(io, run(soak, temp, redis.url(), postgres.url(), report));
    for (std::size_t k = 0; k < soak.nodes.size(); ++k)
      if (soak.nodes[k].server)
        stop_server(*soak.nodes[k].server, opt.server.patience(),
                    "node " + node_id(static_cast<int>(k)));
    bool ok = !failure && problems().count == 0 && soak.executions.lost == 0 &&
              soak.turns.lost == 0 && soak.ledger.doubled == 0;
    if (!ok) temp.keep();
    print_report(soak, report);
    if (failure) std::cerr << "cluster_soak: " << describe(failure) << std::endl;
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "cluster_soak: " << e.what() << std::endl;
    return 1;
  }
}
