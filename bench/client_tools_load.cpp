// client_tools_load: load and memory benchmark for Switchboard's client tools (issue 2).
//
// Starts the real `switchboard serve` binary with a temporary HOME, working directory and config,
// then, from this one process (one io_context, one thread, C++20 coroutines):
//
//  * baseline   a bare Beast echo server (this program, re-executed as a child) answering HTTP
//               POSTs and WebSocket messages: the cost of a cross-process round trip and of one
//               HTTP / WebSocket message pair on this machine, in this run;
//  * latency    for each transport (websocket, sse) and client count N: N clients register a tool
//               `echo` that answers at once; N drivers, each on its own keep-alive connection, loop
//               POST /client-tools/execute for a warm-up and a measured window. Reports round-trip
//               p50/p99, executions/s and the server's CPU time per execution (/proc/PID/stat);
//  * memory     N idle clients (each with one registered tool) per transport, on a fresh server:
//               the growth of the server's VmRSS per client.
//
// Every network operation has a timeout (--op-timeout), except a client's wait for its next
// request, which lasts as long as its scenario; teardown closes every client within 10 s, and
// --max-runtime kills the run if anything else hangs. Every execute must answer 200 with the
// echoed text; any error is counted and reported.
// Prints markdown tables on stdout, progress on stderr. Exit status 0 only when there was no
// error at all.
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json.hpp>

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "provider/sse_decoder.hpp"
#include "server_process.hpp"
#include "support/client.hpp"
#include "support/loop_lag.hpp"
#include "support/run.hpp"

namespace {

using namespace bench;
using namespace std::chrono_literals;

constexpr std::string_view kUsage = R"(usage: client_tools_load [options]

  --server PATH             switchboard binary (default: the one beside this program,
                            else build/release/switchboard)
  --scenarios LIST          baseline,latency,memory,soak (default: the first three)
  --transports LIST         websocket,sse (default: both)
  --clients LIST            client counts for the latency scenarios (default: 1,64)
  --warmup SECONDS          before each measured window (default: 0.5)
  --duration SECONDS        measured window (default: 3)
  --idle-clients N          clients of the memory scenarios (default: 10000)
  --connect-concurrency N   connections being set up at once (default: 128)
  --soak-clients N          connected clients of the soak scenario (default: 10000)
  --soak-rate N             executions per second it sends, spread over all clients
                            (default: 1000)
  --soak-duration SECONDS   how long it sends them (default: 300)
  --soak-drivers N          connections the executions go over (default: 16)
  --op-timeout MS           limit for every network operation (default: 10000)
  --max-runtime SECONDS     the whole run is killed after this (default: 1800)
  --keep-temp               keep the temporary directory (server logs, configs)
  --server-prefix "CMD ARGS"  run the server under a tool, e.g.
                            "valgrind --tool=massif --massif-out-file=/tmp/massif.%p"
                            (figures then describe the tool, not the server alone)
)";

// ---- options --------------------------------------------------------------------------------

struct Options {
  ServerCommand server;
  bool baseline = true, latency = true, memory = true, soak = false;
  std::vector<std::string> transports = {"websocket", "sse"};
  std::vector<int> clients = {1, 64};
  double warmup_s = 0.5;
  double duration_s = 3.0;
  int idle_clients = 10000;
  int connect_concurrency = 128;
  int soak_clients = 10000;
  double soak_rate = 1000;
  double soak_duration_s = 300;
  int soak_drivers = 16;
  std::chrono::milliseconds op_timeout{10000};
  int max_runtime_s = 1800;
  bool keep_temp = false;
};

Options parse_options(int argc, char** argv) {
  Options o;
  o.server.path = default_server_path().string();
  for_each_flag(argc, argv, kUsage, [&](std::string_view flag, const FlagValue& value) {
    if (flag == "--server") {
      // Absolute: the server starts in a temporary working directory.
      o.server.path = fs::absolute(std::string(value())).string();
    } else if (flag == "--scenarios") {
      o.baseline = o.latency = o.memory = o.soak = false;
      for (const auto& s : split_list(value())) {
        if (s == "baseline")
          o.baseline = true;
        else if (s == "latency")
          o.latency = true;
        else if (s == "memory")
          o.memory = true;
        else if (s == "soak")
          o.soak = true;
        else
          throw std::invalid_argument("unknown scenario \"" + s + "\"");
      }
    } else if (flag == "--transports") {
      o.transports = split_list(value());
      for (const auto& t : o.transports)
        if (t != "websocket" && t != "sse")
          throw std::invalid_argument("unknown transport \"" + t + "\" (websocket or sse)");
    } else if (flag == "--clients") {
      o.clients.clear();
      for (const auto& s : split_list(value())) {
        int n = parse_number<int>(flag, s);
        if (n < 1 || n > 5000) throw std::invalid_argument("--clients: each count must be 1-5000");
        o.clients.push_back(n);
      }
    } else if (flag == "--warmup") {
      o.warmup_s = parse_seconds(flag, value());
    } else if (flag == "--duration") {
      o.duration_s = parse_seconds(flag, value());
    } else if (flag == "--idle-clients") {
      o.idle_clients = parse_number<int>(flag, value());
      if (o.idle_clients < 1) throw std::invalid_argument("--idle-clients must be at least 1");
    } else if (flag == "--connect-concurrency") {
      o.connect_concurrency = parse_number<int>(flag, value());
      if (o.connect_concurrency < 1)
        throw std::invalid_argument("--connect-concurrency must be at least 1");
    } else if (flag == "--soak-clients") {
      o.soak_clients = parse_number<int>(flag, value());
      if (o.soak_clients < 1) throw std::invalid_argument("--soak-clients must be at least 1");
    } else if (flag == "--soak-rate") {
      o.soak_rate = parse_number<int>(flag, value());
      if (o.soak_rate < 1) throw std::invalid_argument("--soak-rate must be at least 1");
    } else if (flag == "--soak-duration") {
      o.soak_duration_s = parse_seconds(flag, value());
    } else if (flag == "--soak-drivers") {
      o.soak_drivers = parse_number<int>(flag, value());
      if (o.soak_drivers < 1) throw std::invalid_argument("--soak-drivers must be at least 1");
    } else if (flag == "--op-timeout") {
      o.op_timeout = std::chrono::milliseconds(parse_number<int>(flag, value()));
      if (o.op_timeout.count() < 1) throw std::invalid_argument("--op-timeout must be positive");
    } else if (flag == "--max-runtime") {
      o.max_runtime_s = parse_number<int>(flag, value());
      if (o.max_runtime_s < 1) throw std::invalid_argument("--max-runtime must be positive");
    } else if (flag == "--server-prefix") {
      o.server.prefix = split_words(value());
    } else if (flag == "--keep-temp") {
      o.keep_temp = true;
    } else {
      return false;
    }
    return true;
  });
  return o;
}

// ---- the server ----------------------------------------------------------------------------

// Descriptors each side needs: one per idle client (SSE and WebSocket alike), two per SSE client
// that answers (its stream and its result connection), plus a few.
std::size_t descriptors_needed(const Options& opt) {
  std::size_t needed = static_cast<std::size_t>(opt.memory ? opt.idle_clients : 0) + 256;
  if (opt.soak) {
    bool sse =
        std::find(opt.transports.begin(), opt.transports.end(), "sse") != opt.transports.end();
    needed = std::max(needed, static_cast<std::size_t>(opt.soak_clients) * (sse ? 2 : 1) +
                                  static_cast<std::size_t>(opt.soak_drivers) + 256);
  }
  for (int n : opt.clients)
    needed = std::max(needed, static_cast<std::size_t>(n) * 3 + 256);
  return needed;
}

std::unique_ptr<ServerProcess> start_switchboard(const Options& opt, RunDirectory& temp,
                                                 const std::string& name) {
  // Rate limit off, queues that a burst cannot overflow, no keepalive traffic to speak of, and
  // room for every connection the run makes (the memory and soak scenarios hold 10,000 clients,
  // over the default server.maxConnections once the drivers are counted).
  json::object config{
      {"clientTools",
       json::object{{"rateLimit", 0},
                    {"keepaliveInterval", 30000},
                    {"defaultTimeout", 30000},
                    // The benchmark's clients are anonymous (no client tokens kept); with tokens
                    // a result over HTTP costs one SHA-256 of the token more (about 1 µs).
                    {"clientTokens", false}}},
      {"server", json::object{{"subscriberQueueLimit", 65536},
                              {"maxConnections",
                               std::min<std::size_t>(descriptors_needed(opt), 1'000'000)}}}};
  return start_server(opt.server, server_options(opt.server, temp.fresh(name), std::move(config)));
}

void set_nodelay(tcp::socket& socket) {
  boost::system::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
}

// ---- scenario context -----------------------------------------------------------------------

struct Ctx : Target {
  const Options& opt;
};

std::string client_name(int i) {
  return "bench-" + std::to_string(i);
}

// ---- clients: register `echo` and answer each request at once ----------------------------

class Client : public std::enable_shared_from_this<Client> {
 public:
  virtual ~Client() = default;
  virtual const std::string& id() const = 0;
  virtual std::size_t answered() const = 0;
  // Connects, registers the tool and attaches; "" or what went wrong.
  virtual asio::awaitable<std::string> setup() = 0;
  // Answers requests until the connection ends.
  virtual asio::awaitable<void> serve() = 0;
  virtual void close() = 0;
};

class WsClient : public Client {
 public:
  WsClient(Ctx& ctx, int index) : client_(ctx, client_name(index)) {}
  const std::string& id() const override { return client_.id(); }
  std::size_t answered() const override { return client_.answered(); }
  asio::awaitable<std::string> setup() override {
    if (auto err = co_await client_.connect(); !err.empty()) co_return err;
    co_return co_await client_.register_tool();
  }
  asio::awaitable<void> serve() override { return client_.serve(); }
  void close() override { client_.close(); }

 private:
  WsEchoClient client_;
};

// SSE + POST: registers over HTTP, then turns the same connection into its event stream; results
// go over a second keep-alive connection (opened only when the client is to answer requests).
class SseClient : public Client {
 public:
  SseClient(Ctx& ctx, int index, bool answers)
      : ctx_(ctx), id_(client_name(index)), answers_(answers), stream_(ctx.io.get_executor()) {
    on_chunk_ = [this](std::uint64_t, beast::string_view body, boost::system::error_code& ec) {
      if (!decoder_.feed(body, events_)) ec = asio::error::message_size;
      return body.size();
    };
  }

  const std::string& id() const override { return id_; }
  std::size_t answered() const override { return answered_; }

  asio::awaitable<std::string> setup() override {
    if (auto err = co_await connect_stream(stream_, ctx_.endpoint, ctx_.op_timeout); !err.empty())
      co_return err;
    if (answers_) {
      result_stream_.emplace(ctx_.io.get_executor());
      if (auto err = co_await connect_stream(*result_stream_, ctx_.endpoint, ctx_.op_timeout);
          !err.empty())
        co_return "result connection: " + err;
    }
    auto reg = make_request(
        http::verb::post, "/client-tools/register", ctx_.host,
        json::serialize(json::object{{"clientID", id_}, {"tools", echo_tool_specs()}}));
    auto r = co_await http_call(stream_, buffer_, reg, ctx_.op_timeout);
    if (!r.error.empty()) co_return r.error;
    auto body = parse_json(r.res.body());
    const json::array* ids = nullptr;
    if (body && body->is_object())
      if (auto* f = body->get_object().if_contains("registered")) ids = f->if_array();
    if (r.res.result() != http::status::ok || !ids || ids->size() != 1 || !(*ids)[0].is_string() ||
        (*ids)[0].get_string() != tool_id())
      co_return "POST /client-tools/register: expected 200 {registered: [" + tool_id() +
          "]}, got " + std::to_string(r.res.result_int()) + " " + clip(r.res.body());

    auto get = make_request(http::verb::get, "/client-tools/pending/" + id_, ctx_.host, "");
    get.set(http::field::accept, "text/event-stream");
    stream_.expires_after(ctx_.op_timeout);
    auto [wec, wn] = co_await http::async_write(stream_, get, tuple_awaitable);
    if (wec) co_return "writing GET /client-tools/pending: " + wec.message();
    parser_.body_limit(boost::none);
    parser_.on_chunk_body(on_chunk_);
    auto [rec, rn] = co_await http::async_read_header(stream_, buffer_, parser_, tuple_awaitable);
    stream_.expires_never();
    if (rec) co_return "reading the head of the pending stream: " + rec.message();
    const auto& head = parser_.get();
    if (head.result() != http::status::ok ||
        head[http::field::content_type].find("text/event-stream") == beast::string_view::npos)
      co_return "GET /client-tools/pending: expected 200 text/event-stream, got " +
          std::to_string(head.result_int()) + " " + std::string(head[http::field::content_type]);
    co_return "";  // attached: the server attaches the client before it sends the head
  }

  asio::awaitable<void> serve() override {
    for (;;) {
      std::vector<sb::sse::SseEvent> ready;
      ready.swap(events_);
      for (const auto& event : ready)
        if (!co_await handle_event(event)) co_return;
      if (parser_.is_done()) {
        problem("the server ended the event stream");
        co_return;
      }
      auto [ec, n] = co_await http::async_read_some(stream_, buffer_, parser_, tuple_awaitable);
      if (ec) {
        problem("event stream read: " + ec.message());
        co_return;
      }
    }
  }

  void close() override {
    stream_.close();
    if (result_stream_) result_stream_->close();
  }

 private:
  std::string tool_id() const { return "client_" + id_ + "_echo"; }
  void problem(const std::string& what) {
    if (!ctx_.stopping) problems().add("client " + id_ + ": " + what);
  }

  // False when the client cannot go on.
  asio::awaitable<bool> handle_event(const sb::sse::SseEvent& event) {
    if (event.type == "ping") co_return true;
    if (event.type != "tool-request") {
      problem("unexpected event " + event.type + ": " + clip(event.data));
      co_return true;
    }
    auto msg = parse_json(event.data);
    auto echo = msg ? echo_request(*msg) : std::nullopt;
    if (!echo) {
      problem("malformed tool-request " + clip(event.data));
      co_return true;
    }
    if (!result_stream_) {
      problem("a tool-request reached an idle client");
      co_return true;
    }
    auto req = make_request(http::verb::post, "/client-tools/result", ctx_.host,
                            json::serialize(json::object{{"requestID", echo->request_id},
                                                         {"clientID", id_},
                                                         {"result", echo_result(echo->text)}}));
    auto r = co_await http_call(*result_stream_, result_buffer_, req, ctx_.op_timeout);
    if (!r.error.empty()) {
      problem(r.error);
      co_return false;
    }
    if (r.res.result() != http::status::ok)
      problem("POST /client-tools/result: " + std::to_string(r.res.result_int()) + " " +
              clip(r.res.body()));
    else
      ++answered_;
    co_return true;
  }

  Ctx& ctx_;
  std::string id_;
  std::size_t answered_ = 0;
  bool answers_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  http::response_parser<http::string_body> parser_;
  std::function<std::size_t(std::uint64_t, beast::string_view, boost::system::error_code&)>
      on_chunk_;
  sb::sse::SseDecoder decoder_;
  std::vector<sb::sse::SseEvent> events_;  // decoded, not yet handled
  std::optional<beast::tcp_stream> result_stream_;
  beast::flat_buffer result_buffer_;
};

// The clients of one scenario: set up with bounded concurrency, then serving until closed.
class ClientSet {
 public:
  explicit ClientSet(Ctx& ctx) : ctx_(ctx), ended_(ctx.io.get_executor()) {}

  // Sets up `n` clients, `concurrency` at a time. Returns the number that failed.
  asio::awaitable<std::size_t> connect(const std::string& transport, int n, bool answers,
                                       int concurrency) {
    clients_.assign(static_cast<std::size_t>(n), nullptr);
    next_ = 0;
    failed_ = 0;
    int workers = std::min(n, concurrency);
    Latch done(ctx_.io.get_executor(), static_cast<std::size_t>(workers));
    for (int w = 0; w < workers; ++w)
      asio::co_spawn(ctx_.io, setup_worker(transport, n, answers), [&done](std::exception_ptr e) {
        if (e) problems().add("setup worker: " + describe(e));
        done.count_down();
      });
    // Each setup operation has its own timeout; this bound is a second line of defence.
    auto bound = ctx_.op_timeout * 4 + std::chrono::milliseconds(n) * 20;
    if (!co_await done.wait(std::chrono::duration_cast<std::chrono::milliseconds>(bound)))
      throw Fatal("setting up " + std::to_string(n) + " clients did not finish within " +
                  std::to_string(bound.count()) + " ms");
    co_return failed_;
  }

  // Closes every client and waits for their coroutines to end.
  asio::awaitable<void> close_all() {
    ctx_.stopping = true;
    for (auto& c : clients_)
      if (c) c->close();
    if (live_ == 0) co_return;
    ended_.expires_after(10s);
    co_await ended_.async_wait(tuple_awaitable);
    if (live_ != 0)
      throw Fatal(std::to_string(live_) + " client coroutines did not end within 10 s of close");
  }

  std::size_t answered() const {
    std::size_t total = 0;
    for (const auto& c : clients_)
      if (c) total += c->answered();
    return total;
  }

 private:
  asio::awaitable<void> setup_worker(std::string transport, int n, bool answers) {
    for (;;) {
      if (failed_ > 0) co_return;  // one failure ends the scenario; do not pile up more
      int i = next_++;
      if (i >= n) co_return;
      std::shared_ptr<Client> c;
      if (transport == "websocket")
        c = std::make_shared<WsClient>(ctx_, i);
      else
        c = std::make_shared<SseClient>(ctx_, i, answers);
      auto err = co_await c->setup();
      if (!err.empty()) {
        ++failed_;
        problems().add("client " + c->id() + " (" + transport + ") setup: " + err);
        c->close();
        continue;
      }
      clients_[static_cast<std::size_t>(i)] = c;
      ++live_;
      asio::co_spawn(ctx_.io, c->serve(), [this, c](std::exception_ptr e) {
        if (e) problems().add("client " + c->id() + ": " + describe(e));
        if (--live_ == 0) ended_.cancel();
      });
    }
  }

  Ctx& ctx_;
  std::vector<std::shared_ptr<Client>> clients_;
  int next_ = 0;
  std::size_t failed_ = 0;
  std::size_t live_ = 0;
  asio::steady_timer ended_;
};

// ---- drivers: loop a request on a keep-alive connection, timing each -----------------------

struct Sample {
  Clock::time_point end;
  std::int64_t ns;
};

struct RunState {
  Clock::time_point stop_at;
  std::vector<Sample> samples;  // successful round trips
  std::size_t failures = 0;
  std::size_t sent = 0;  // executions written
  std::size_t lost = 0;  // of which no answer came (timeout, connection lost)
};

// Which client a driver's k-th execution goes to, and when it is sent: client
// (first + k * stride) % clients, at start + k * interval (a zero interval: back to back).
struct Pacing {
  int first = 0;
  int stride = 0;
  int clients = 1;
  Clock::duration interval{};
};

// POST /client-tools/execute, expecting 200 with the echoed text. A paced driver (the soak)
// counts a call that gets no answer as lost and goes on over a new connection; the others stop.
class ExecuteDriver : public std::enable_shared_from_this<ExecuteDriver> {
 public:
  // Back to back, always to client `index`.
  ExecuteDriver(Ctx& ctx, RunState& run, int index)
      : ExecuteDriver(ctx, run, index, Pacing{index, 0, index + 1, {}}) {}
  ExecuteDriver(Ctx& ctx, RunState& run, int index, Pacing pacing)
      : ctx_(ctx),
        run_(run),
        id_("driver-" + std::to_string(index)),
        pacing_(pacing),
        stream_(ctx.io.get_executor()) {}

  asio::awaitable<void> run() {
    if (auto err = co_await connect_stream(stream_, ctx_.endpoint, ctx_.op_timeout); !err.empty()) {
      fail(err);
      co_return;
    }
    auto req = make_request(http::verb::post, "/client-tools/execute", ctx_.host, "");
    req.set(http::field::content_type, "application/json");
    const bool paced = pacing_.interval > Clock::duration::zero();
    const auto start = Clock::now();
    for (std::uint64_t k = 0; Clock::now() < run_.stop_at; ++k) {
      if (paced) {
        co_await sleep_until(start + pacing_.interval * static_cast<std::int64_t>(k));
        if (Clock::now() >= run_.stop_at) break;
      }
      std::string client =
          client_name(static_cast<int>((static_cast<std::uint64_t>(pacing_.first) +
                                        k * static_cast<std::uint64_t>(pacing_.stride)) %
                                       static_cast<std::uint64_t>(pacing_.clients)));
      std::string text = "hello from " + id_ + " #" + std::to_string(k);
      req.body() =
          R"({"clientID":")" + client + R"(","tool":"echo","input":{"text":")" + text + R"("}})";
      req.prepare_payload();
      http::response<http::string_body> res;
      stream_.expires_after(ctx_.op_timeout);
      auto t0 = Clock::now();
      ++run_.sent;
      auto [wec, wn] = co_await http::async_write(stream_, req, tuple_awaitable);
      boost::system::error_code rec;
      if (!wec) {
        auto [ec, n] = co_await http::async_read(stream_, buffer_, res, tuple_awaitable);
        rec = ec;
      }
      auto t1 = Clock::now();
      if (wec || rec) {
        ++run_.lost;
        fail("execute to " + client + ": no answer (" + (wec ? wec : rec).message() + ")");
        if (!paced) co_return;
        stream_.close();  // connecting again opens a new socket
        buffer_.clear();
        if (auto err = co_await connect_stream(stream_, ctx_.endpoint, ctx_.op_timeout);
            !err.empty()) {
          fail(err);
          co_return;
        }
        continue;
      }
      auto body = res.result() == http::status::ok ? parse_json(res.body()) : std::nullopt;
      auto* status = body ? string_field(*body, "status") : nullptr;
      auto* output = body ? string_field(*body, "output") : nullptr;
      if (!status || *status != "success" || !output || *output != text) {
        fail("execute #" + std::to_string(k) + ": expected 200 {status: success, output: \"" +
             text + "\"}, got " + std::to_string(res.result_int()) + " " + clip(res.body()));
        continue;
      }
      run_.samples.push_back(
          {t1, std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()});
    }
    stream_.expires_never();
    stream_.close();
  }

 private:
  void fail(const std::string& what) {
    ++run_.failures;
    problems().add("driver " + id_ + ": " + what);
  }

  Ctx& ctx_;
  RunState& run_;
  std::string id_;
  Pacing pacing_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
};

// Baseline: the same loop against the bare echo server, over HTTP or a WebSocket.
class EchoDriver : public std::enable_shared_from_this<EchoDriver> {
 public:
  EchoDriver(Ctx& ctx, RunState& run, bool websocket)
      : ctx_(ctx), run_(run), websocket_(websocket), ws_(ctx.io.get_executor()) {}

  asio::awaitable<void> run() {
    auto& lowest = beast::get_lowest_layer(ws_);
    if (auto err = co_await connect_stream(lowest, ctx_.endpoint, ctx_.op_timeout); !err.empty()) {
      fail(err);
      co_return;
    }
    if (websocket_) {
      lowest.expires_after(ctx_.op_timeout);
      auto [hec] = co_await ws_.async_handshake(ctx_.host, "/echo", tuple_awaitable);
      if (hec) {
        fail("WebSocket handshake: " + hec.message());
        co_return;
      }
      ws_.text(true);
    }
    auto req = make_request(http::verb::post, "/echo", ctx_.host, "");
    req.set(http::field::content_type, "application/json");
    for (std::uint64_t k = 0; Clock::now() < run_.stop_at; ++k) {
      std::string text = R"({"text":"hello from the baseline #)" + std::to_string(k) + R"("})";
      std::string got;
      lowest.expires_after(ctx_.op_timeout);
      auto t0 = Clock::now();
      if (websocket_) {
        auto [wec, wn] = co_await ws_.async_write(asio::buffer(text), tuple_awaitable);
        if (wec) {
          fail("WebSocket write: " + wec.message());
          co_return;
        }
        auto [rec, rn] = co_await ws_.async_read(buffer_, tuple_awaitable);
        if (rec) {
          fail("WebSocket read: " + rec.message());
          co_return;
        }
        got = beast::buffers_to_string(buffer_.data());
        buffer_.consume(buffer_.size());
      } else {
        req.body() = text;
        req.prepare_payload();
        http::response<http::string_body> res;
        auto [wec, wn] = co_await http::async_write(lowest, req, tuple_awaitable);
        if (wec) {
          fail("HTTP write: " + wec.message());
          co_return;
        }
        auto [rec, rn] = co_await http::async_read(lowest, buffer_, res, tuple_awaitable);
        if (rec) {
          fail("HTTP read: " + rec.message());
          co_return;
        }
        got = std::move(res.body());
      }
      auto t1 = Clock::now();
      if (got != text) {
        fail("echo mismatch: sent " + text + ", got " + clip(got));
        continue;
      }
      run_.samples.push_back(
          {t1, std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()});
    }
    lowest.expires_never();
    lowest.close();
  }

 private:
  void fail(const std::string& what) {
    ++run_.failures;
    problems().add(std::string("baseline ") + (websocket_ ? "websocket" : "http") + ": " + what);
  }

  Ctx& ctx_;
  RunState& run_;
  bool websocket_;
  websocket::stream<beast::tcp_stream> ws_;
  beast::flat_buffer buffer_;
};

// ---- measurement ----------------------------------------------------------------------------

struct Measurement {
  double window_s = 0;
  std::size_t executions = 0;
  double per_second = 0;
  double p50_us = 0, p99_us = 0, max_us = 0;
  double server_cpu_us = 0;  // server CPU per execution
  double server_sys_us = 0;  // of which in the kernel
  double server_util = 0;    // server CPU / wall time (1.0 = one core)
  double bench_cpu_us = 0;   // this program's CPU per execution
  double other_load = 0;     // other processes (and steal), as a fraction of all CPUs
  std::size_t failures = 0;
};

std::string fmt_seconds(double s) {
  return std::to_string(static_cast<long long>(std::llround(s)));
}

// A percentile of sorted nanoseconds, in microseconds.
double percentile_us(const std::vector<std::int64_t>& sorted, double p) {
  return static_cast<double>(nearest_rank(sorted, p)) / 1000.0;
}

// Spawns `drivers` (each stops issuing at run.stop_at), samples the CPU counters at the start and
// end of the measured window, waits for the drivers and summarises.
template <class Driver>
asio::awaitable<Measurement> measure(Ctx& ctx, pid_t server,
                                     const std::vector<std::shared_ptr<Driver>>& drivers,
                                     RunState& run) {
  auto start = Clock::now();
  auto window_start = start + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(ctx.opt.warmup_s));
  run.stop_at = window_start + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(ctx.opt.duration_s));
  run.samples.reserve(1 << 20);
  Latch done(ctx.io.get_executor(), drivers.size());
  for (const auto& d : drivers)
    asio::co_spawn(ctx.io, d->run(), [d, &done](std::exception_ptr e) {
      if (e) problems().add("driver: " + describe(e));
      done.count_down();
    });

  co_await sleep_until(window_start);
  auto t0 = Clock::now();
  auto server_cpu0 = process_cpu_ticks(server);
  auto server0 = server_cpu0.total();
  auto self0 = self_cpu_us();
  auto self_ticks0 = process_cpu_ticks(::getpid()).total();
  auto busy0 = system_busy_ticks();
  co_await sleep_until(run.stop_at);
  auto t1 = Clock::now();
  auto server_cpu1 = process_cpu_ticks(server);
  auto server1 = server_cpu1.total();
  auto self1 = self_cpu_us();
  auto self_ticks1 = process_cpu_ticks(::getpid()).total();
  auto busy1 = system_busy_ticks();

  if (!co_await done.wait(ctx.op_timeout + 5s))
    throw Fatal(std::to_string(done.remaining()) + " drivers did not stop");

  Measurement m;
  m.failures = run.failures;
  m.window_s = std::chrono::duration<double>(t1 - t0).count();
  std::vector<std::int64_t> lat;
  lat.reserve(run.samples.size());
  for (const auto& s : run.samples)
    if (s.end >= t0 && s.end <= t1) lat.push_back(s.ns);
  std::sort(lat.begin(), lat.end());
  m.executions = lat.size();
  m.per_second = static_cast<double>(m.executions) / m.window_s;
  m.p50_us = percentile_us(lat, 0.50);
  m.p99_us = percentile_us(lat, 0.99);
  m.max_us = lat.empty() ? 0 : static_cast<double>(lat.back()) / 1000.0;
  double tick_us = 1e6 / static_cast<double>(clock_ticks_per_second());
  double server_us = static_cast<double>(server1 - server0) * tick_us;
  if (m.executions > 0) {
    m.server_cpu_us = server_us / static_cast<double>(m.executions);
    m.server_sys_us = static_cast<double>(server_cpu1.system - server_cpu0.system) * tick_us /
                      static_cast<double>(m.executions);
    m.bench_cpu_us = static_cast<double>(self1 - self0) / static_cast<double>(m.executions);
  }
  m.server_util = server_us / 1e6 / m.window_s;
  double other_ticks = static_cast<double>(busy1 - busy0) - static_cast<double>(server1 - server0) -
                       static_cast<double>(self_ticks1 - self_ticks0);
  m.other_load = std::max(0.0, other_ticks * tick_us / 1e6 / m.window_s /
                                   static_cast<double>(std::thread::hardware_concurrency()));
  co_return m;
}

// ---- scenarios ------------------------------------------------------------------------------

struct LatencyRow {
  std::string transport;
  int clients = 0;
  Measurement m;
  std::size_t errors = 0;
  bool completed = false;
};

struct MemoryRow {
  std::string transport;
  int clients = 0;
  std::uint64_t rss_before = 0, rss_after = 0;
  double per_client = 0;
  double connect_s = 0;
  std::size_t errors = 0;
  bool completed = false;
};

// One reading of the soak scenario, taken every 10 s.
struct SoakSample {
  double at_s = 0;  // since the load started
  std::uint64_t rss = 0;
  std::size_t fds = 0;
  std::size_t executions = 0;  // answered so far
  double p99_us = 0;           // over the interval that ends here
};

struct SoakRow {
  std::string transport;
  int clients = 0;
  double rate = 0, duration_s = 0;
  std::size_t sent = 0, answered = 0, lost = 0, errors = 0, answered_by_clients = 0;
  double p50_us = 0, p99_us = 0, max_us = 0;
  std::uint64_t rss_idle = 0;  // all clients connected, before the load
  std::size_t fds_idle = 0;
  std::vector<SoakSample> samples;
  bench::LoopLag lag;  // the server's event-loop lag while the load ran
  bool completed = false;
};

struct BaselineRow {
  std::string transport;
  Measurement m;
  std::size_t errors = 0;
};

struct Results {
  std::vector<BaselineRow> baseline;
  std::vector<LatencyRow> latency;
  std::vector<MemoryRow> memory;
  std::vector<SoakRow> soak;
};

Ctx make_ctx(asio::io_context& io, const Options& opt, unsigned short port) {
  return Ctx{Target::loopback(io, port, opt.op_timeout), opt};
}

asio::awaitable<void> run_baseline(asio::io_context& io, const Options& opt, RunDirectory& temp,
                                   Results& results) {
  auto self = fs::read_symlink("/proc/self/exe");
  for (bool websocket : {false, true}) {
    const char* name = websocket ? "websocket" : "http";
    std::cerr << "baseline: bare Beast echo over " << name << ", 1 client" << std::endl;
    // A fresh echo server per transport, under --server-prefix too, so that a profiler's
    // totals can be compared with those of the switchboard scenarios.
    auto options = server_options(opt.server, temp.fresh(std::string("baseline-") + name), {});
    options.command = std::vector<std::string>{self.string(), "--baseline-server"};
    ServerProcess child(std::move(options));
    Ctx ctx = make_ctx(io, opt, child.port());
    auto errors_before = problems().count;
    RunState run;
    std::vector<std::shared_ptr<EchoDriver>> drivers{
        std::make_shared<EchoDriver>(ctx, run, websocket)};
    auto m = co_await measure(ctx, child.pid(), drivers, run);
    std::cerr << "  " << m.executions << " round trips in " << m.window_s << " s, "
              << run.samples.size() << " round trips in all (warm-up included)" << std::endl;
    results.baseline.push_back({name, m, problems().count - errors_before});
    stop_server(child, opt.server.patience(), "the baseline echo server");
  }
}

asio::awaitable<void> run_latency(asio::io_context& io, const Options& opt, RunDirectory& temp,
                                  const std::string& transport, int n, Results& results) {
  std::cerr << "latency: " << transport << ", " << n << " client(s)" << std::endl;
  auto errors_before = problems().count;
  LatencyRow row{transport, n};
  auto server = start_switchboard(opt, temp, "latency-" + transport + "-" + std::to_string(n));
  Ctx ctx = make_ctx(io, opt, server->port());
  {
    ClientSet clients(ctx);
    auto failed = co_await clients.connect(transport, n, /*answers=*/true, opt.connect_concurrency);
    if (failed == 0) {
      RunState run;
      std::vector<std::shared_ptr<ExecuteDriver>> drivers;
      for (int i = 0; i < n; ++i)
        drivers.push_back(std::make_shared<ExecuteDriver>(ctx, run, i));
      row.m = co_await measure(ctx, server->pid(), drivers, run);
      row.completed = true;
      std::cerr << "  " << row.m.executions << " executions in " << row.m.window_s << " s, "
                << clients.answered() << " requests answered by the clients (warm-up included)"
                << std::endl;
    }
    co_await clients.close_all();
  }
  stop_server(*server, opt.server.patience());
  row.errors = problems().count - errors_before;
  results.latency.push_back(row);
}

asio::awaitable<void> run_memory(asio::io_context& io, const Options& opt, RunDirectory& temp,
                                 const std::string& transport, Results& results) {
  int n = opt.idle_clients;
  std::cerr << "memory: " << n << " idle " << transport << " clients" << std::endl;
  auto errors_before = problems().count;
  MemoryRow row{transport, n};
  auto server = start_switchboard(opt, temp, "memory-" + transport);
  Ctx ctx = make_ctx(io, opt, server->port());
  {
    // One request first, so that the lazily built parts of the server are in "before".
    if (auto err = co_await check_health(ctx); !err.empty()) throw Fatal(err);
  }
  co_await sleep_until(Clock::now() + 500ms);
  row.rss_before = rss_bytes(server->pid());
  {
    ClientSet clients(ctx);
    auto t0 = Clock::now();
    auto failed =
        co_await clients.connect(transport, n, /*answers=*/false, opt.connect_concurrency);
    row.connect_s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (failed == 0) {
      // Every client has had its `registered` answer (WebSocket) or its stream head (SSE): all
      // are attached. Let the server settle, then read its memory.
      co_await sleep_until(Clock::now() + 1s);
      row.rss_after = rss_bytes(server->pid());
      row.per_client =
          (static_cast<double>(row.rss_after) - static_cast<double>(row.rss_before)) / n;
      auto threads = status_field(server->pid(), "Threads");
      std::cerr << "  connected in " << row.connect_s << " s; RSS " << row.rss_before << " -> "
                << row.rss_after << " bytes; server threads: " << threads << std::endl;
      // Cross-check (after the reading: the answer is large): the server lists every tool.
      beast::tcp_stream probe(io.get_executor());
      beast::flat_buffer buffer;
      if (auto err = co_await connect_stream(probe, ctx.endpoint, opt.op_timeout); !err.empty()) {
        problems().add("GET /client-tools/tools: " + err);
      } else {
        auto list = make_request(http::verb::get, "/client-tools/tools", ctx.host, "");
        auto r = co_await http_call(probe, buffer, list, opt.op_timeout);
        auto body = r.error.empty() ? parse_json(r.res.body()) : std::nullopt;
        if (!body || !body->is_object() || body->get_object().size() != static_cast<std::size_t>(n))
          problems().add("GET /client-tools/tools: expected " + std::to_string(n) + " tools, got " +
                         (r.error.empty() ? clip(r.res.body(), 200) : r.error));
        probe.close();
      }
      row.completed = true;
    }
    co_await clients.close_all();
  }
  stop_server(*server, opt.server.patience());
  row.errors = problems().count - errors_before;
  results.memory.push_back(row);
}

// The soak: `--soak-clients` clients stay connected while `--soak-drivers` connections send
// `--soak-rate` executions per second, spread round-robin over all the clients, for
// `--soak-duration`. Every call must be answered (lost = no answer within --op-timeout); memory
// and open descriptors are read every 10 s and must stay flat.
asio::awaitable<void> run_soak(asio::io_context& io, const Options& opt, RunDirectory& temp,
                               const std::string& transport, Results& results) {
  int n = opt.soak_clients;
  std::cerr << "soak: " << n << " " << transport << " clients, " << opt.soak_rate
            << " executions/s for " << opt.soak_duration_s << " s" << std::endl;
  auto errors_before = problems().count;
  SoakRow row{transport, n, opt.soak_rate, opt.soak_duration_s};
  auto server = start_switchboard(opt, temp, "soak-" + transport);
  Ctx ctx = make_ctx(io, opt, server->port());
  {
    ClientSet clients(ctx);
    auto failed = co_await clients.connect(transport, n, /*answers=*/true, opt.connect_concurrency);
    if (failed == 0) {
      co_await sleep_until(Clock::now() + 1s);
      row.rss_idle = rss_bytes(server->pid());
      row.fds_idle = open_fds(server->pid());
      RunState run;
      bool lag_on = bench::measures_loop_lag(*server);
      bench::mark_loop_lag(server->pid(), lag_on);  // what came before the load is not counted
      auto start = Clock::now();
      run.stop_at = start + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(opt.soak_duration_s));
      run.samples.reserve(static_cast<std::size_t>(opt.soak_rate * opt.soak_duration_s) + 1024);
      int d = std::min(opt.soak_drivers, n);
      auto interval = std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(static_cast<double>(d) / opt.soak_rate));
      std::vector<std::shared_ptr<ExecuteDriver>> drivers;
      Latch done(io.get_executor(), static_cast<std::size_t>(d));
      for (int i = 0; i < d; ++i) {
        auto driver = std::make_shared<ExecuteDriver>(ctx, run, i, Pacing{i, d, n, interval});
        drivers.push_back(driver);
        asio::co_spawn(io, driver->run(), [driver, &done](std::exception_ptr e) {
          if (e) problems().add("driver: " + describe(e));
          done.count_down();
        });
      }
      std::size_t seen = 0;
      for (auto next = start + 10s; next <= run.stop_at + 1s; next += 10s) {
        co_await sleep_until(next);
        SoakSample sample;
        sample.at_s = std::chrono::duration<double>(Clock::now() - start).count();
        sample.rss = rss_bytes(server->pid());
        sample.fds = open_fds(server->pid());
        sample.executions = run.samples.size();
        std::vector<std::int64_t> lat;
        for (std::size_t i = seen; i < run.samples.size(); ++i)
          lat.push_back(run.samples[i].ns);
        seen = run.samples.size();
        std::sort(lat.begin(), lat.end());
        sample.p99_us = percentile_us(lat, 0.99);
        std::cerr << "  " << fmt_seconds(sample.at_s) << " s: " << sample.executions
                  << " answered, RSS " << sample.rss / 1024 << " KiB, " << sample.fds << " fds"
                  << std::endl;
        row.samples.push_back(sample);
      }
      if (!co_await done.wait(opt.op_timeout + 5s))
        throw Fatal(std::to_string(done.remaining()) + " soak drivers did not stop");
      bench::mark_loop_lag(server->pid(), lag_on);
      if (lag_on) row.lag = bench::read_loop_lag(*server, 2);
      std::vector<std::int64_t> lat;
      for (const auto& sm : run.samples)
        lat.push_back(sm.ns);
      std::sort(lat.begin(), lat.end());
      row.sent = run.sent;
      row.answered = run.samples.size();
      row.lost = run.lost;
      row.p50_us = percentile_us(lat, 0.50);
      row.p99_us = percentile_us(lat, 0.99);
      row.max_us = lat.empty() ? 0 : static_cast<double>(lat.back()) / 1000.0;
      row.answered_by_clients = clients.answered();
      row.completed = true;
    }
    co_await clients.close_all();
  }
  stop_server(*server, opt.server.patience());
  row.errors = problems().count - errors_before;
  results.soak.push_back(row);
}

// ---- report ---------------------------------------------------------------------------------

void print_report(const Options& opt, const Results& r) {
  std::cout << "## client_tools_load\n\n"
            << "- machine: " << std::thread::hardware_concurrency() << " CPUs, " << cpu_model()
            << ", Linux " << linux_release() << "\n"
            << "- server: `" << opt.server.path << "`\n"
            << "- warm-up " << opt.warmup_s << " s, measured window " << opt.duration_s
            << " s per latency scenario; " << opt.idle_clients
            << " idle clients per memory scenario\n\n";

  if (!r.baseline.empty()) {
    std::cout << "### Baseline: bare Beast echo server (1 client, same run)\n\n"
              << "| transport | round trips/s | p50 µs | p99 µs | echo server CPU µs/round trip |"
                 " of which kernel µs | errors |\n"
              << "|---|---:|---:|---:|---:|---:|---:|\n";
    for (const auto& b : r.baseline)
      std::cout << "| " << b.transport << " | " << fmt_int(b.m.per_second) << " | "
                << fmt(b.m.p50_us) << " | " << fmt(b.m.p99_us) << " | " << fmt(b.m.server_cpu_us)
                << " | " << fmt(b.m.server_sys_us) << " | " << b.errors << " |\n";
    std::cout << "\n";
  }
  if (!r.latency.empty()) {
    std::cout << "### Executions: POST /client-tools/execute round trips\n\n"
              << "| transport | clients | executions | exec/s | p50 µs | p99 µs | max µs |"
                 " server CPU µs/exec | of which kernel µs | server CPU % | bench CPU µs/exec |"
                 " other load % | errors |\n"
              << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for (const auto& l : r.latency) {
      if (!l.completed) {
        std::cout << "| " << l.transport << " | " << l.clients << " | failed | | | | | | | | | | "
                  << l.errors << " |\n";
        continue;
      }
      std::cout << "| " << l.transport << " | " << l.clients << " | " << fmt_int(l.m.executions)
                << " | " << fmt_int(l.m.per_second) << " | " << fmt(l.m.p50_us) << " | "
                << fmt(l.m.p99_us) << " | " << fmt_int(l.m.max_us) << " | "
                << fmt(l.m.server_cpu_us) << " | " << fmt(l.m.server_sys_us) << " | "
                << fmt(l.m.server_util * 100, 0) << " | " << fmt(l.m.bench_cpu_us) << " | "
                << fmt(l.m.other_load * 100, 0) << " | " << l.errors << " |\n";
    }
    std::cout << "\n";
  }
  if (!r.memory.empty()) {
    std::cout << "### Memory: idle connected clients (one registered tool each)\n\n"
              << "| transport | clients | server RSS before MiB | after MiB | bytes/client |"
                 " KiB/client | connect s | errors |\n"
              << "|---|---:|---:|---:|---:|---:|---:|---:|\n";
    for (const auto& m : r.memory) {
      if (!m.completed) {
        std::cout << "| " << m.transport << " | " << m.clients << " | failed | | | | | " << m.errors
                  << " |\n";
        continue;
      }
      std::cout << "| " << m.transport << " | " << fmt_int(m.clients) << " | "
                << fmt(static_cast<double>(m.rss_before) / 1048576.0) << " | "
                << fmt(static_cast<double>(m.rss_after) / 1048576.0) << " | "
                << fmt_int(m.per_client) << " | " << fmt(m.per_client / 1024.0) << " | "
                << fmt(m.connect_s, 2) << " | " << m.errors << " |\n";
    }
    std::cout << "\n";
  }

  for (const auto& k : r.soak) {
    std::cout << "### Soak: " << fmt_int(k.clients) << " connected " << k.transport << " clients, "
              << fmt_int(k.rate) << " executions/s for " << fmt_seconds(k.duration_s) << " s\n\n";
    if (!k.completed) {
      std::cout << "failed (" << k.errors << " errors)\n\n";
      continue;
    }
    std::cout << "| sent | answered | lost | errors | answered by the clients | p50 µs | p99 µs |"
                 " max µs | RSS idle MiB | RSS end MiB | fds idle | fds end |\n"
              << "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    const SoakSample* last = k.samples.empty() ? nullptr : &k.samples.back();
    std::cout << "| " << fmt_int(k.sent) << " | " << fmt_int(k.answered) << " | " << k.lost << " | "
              << k.errors << " | " << fmt_int(k.answered_by_clients) << " | " << fmt(k.p50_us)
              << " | " << fmt(k.p99_us) << " | " << fmt_int(k.max_us) << " | "
              << fmt(static_cast<double>(k.rss_idle) / 1048576.0) << " | "
              << (last ? fmt(static_cast<double>(last->rss) / 1048576.0) : "") << " | "
              << k.fds_idle << " | " << (last ? std::to_string(last->fds) : "") << " |\n\n";
    if (k.lag.found)
      std::cout << "Event-loop lag while the load ran (how late a 1 ms timer on the server's loop "
                   "fired, "
                << fmt_int(static_cast<double>(k.lag.ticks)) << " ticks): p50 "
                << fmt(k.lag.p50_us / 1000, 2) << " ms, p99 " << fmt(k.lag.p99_us / 1000, 2)
                << " ms, max " << fmt(k.lag.max_us / 1000, 2) << " ms\n\n";
    // Growth under load, from the first reading a minute in (buffers and caches have grown to
    // their working size by then) to the last.
    const SoakSample* minute = nullptr;
    for (const auto& sm : k.samples)
      if (!minute && sm.at_s >= 59) minute = &sm;
    if (minute && last && last != minute)
      std::cout << "RSS from " << fmt_seconds(minute->at_s) << " s to " << fmt_seconds(last->at_s)
                << " s: "
                << fmt((static_cast<double>(last->rss) - static_cast<double>(minute->rss)) /
                           1048576.0,
                       2)
                << " MiB; open descriptors: " << minute->fds << " -> " << last->fds << "\n\n";
    std::cout
        << "| s | answered | RSS MiB | fds | p99 µs (interval) |\n|---:|---:|---:|---:|---:|\n";
    for (const auto& sm : k.samples)
      std::cout << "| " << fmt_seconds(sm.at_s) << " | " << fmt_int(sm.executions) << " | "
                << fmt(static_cast<double>(sm.rss) / 1048576.0, 2) << " | " << sm.fds << " | "
                << fmt(sm.p99_us) << " |\n";
    std::cout << "\n";
  }

  // The targets of issue 2.
  struct Check {
    std::string what;
    double value;
    double limit;
    bool below;  // value must be below the limit (else above)
    std::string unit;
  };
  std::vector<Check> checks;
  for (const auto& l : r.latency) {
    if (!l.completed) continue;
    std::string at = l.transport + ", " + std::to_string(l.clients) + " client(s)";
    checks.push_back({"server CPU per execution (" + at + ")", l.m.server_cpu_us,
                      l.transport == "websocket" ? 30.0 : 50.0, true, "µs"});
    if (l.clients == 1)
      checks.push_back({"p50 round trip (" + at + ")", l.m.p50_us, 300.0, true, "µs"});
    if (l.transport == "websocket" && l.clients == 64)
      checks.push_back({"executions/s (" + at + ")", l.m.per_second, 15000.0, false, "/s"});
  }
  for (const auto& m : r.memory)
    if (m.completed)
      checks.push_back({"server memory per idle " + m.transport + " client", m.per_client / 1024.0,
                        16.0, true, "KiB"});
  if (!checks.empty()) {
    std::cout << "### Targets (issue 2)\n\n"
              << "| target | measured | limit | measured / limit | result |\n"
              << "|---|---:|---:|---:|---|\n";
    for (const auto& c : checks) {
      bool pass = c.below ? c.value < c.limit : c.value > c.limit;
      std::cout << "| " << c.what << " | " << fmt(c.value) << " " << c.unit << " | "
                << (c.below ? "< " : "> ") << fmt_int(c.limit) << " " << c.unit << " | "
                << fmt(c.value / c.limit, 2) << " | " << (pass ? "met" : "**missed**") << " |\n";
    }
    std::cout << "\n";
  }
  std::cout << "Errors: " << problems().count << "\n";
  for (const auto& p : problems().first)
    std::cout << "- " << clip(p, 500) << "\n";
  std::cout << std::flush;
}

// ---- the run --------------------------------------------------------------------------------

asio::awaitable<void> run_all(asio::io_context& io, const Options& opt, RunDirectory& temp,
                              Results& results) {
  if (opt.baseline) co_await run_baseline(io, opt, temp, results);
  if (opt.latency)
    for (const auto& t : opt.transports)
      for (int n : opt.clients)
        co_await run_latency(io, opt, temp, t, n, results);
  if (opt.memory)
    for (const auto& t : opt.transports)
      co_await run_memory(io, opt, temp, t, results);
  if (opt.soak)
    for (const auto& t : opt.transports)
      co_await run_soak(io, opt, temp, t, results);
}

// ---- the baseline echo server (this program run with --baseline-server) --------------------

asio::awaitable<void> echo_websocket(beast::tcp_stream stream,
                                     http::request<http::string_body> req) {
  websocket::stream<beast::tcp_stream> ws(std::move(stream));
  auto [ec] = co_await ws.async_accept(req, tuple_awaitable);
  if (ec) co_return;
  beast::flat_buffer buffer;
  for (;;) {
    auto [rec, rn] = co_await ws.async_read(buffer, tuple_awaitable);
    if (rec) co_return;
    ws.text(ws.got_text());
    auto [wec, wn] = co_await ws.async_write(buffer.data(), tuple_awaitable);
    if (wec) co_return;
    buffer.consume(buffer.size());
  }
}

asio::awaitable<void> echo_session(tcp::socket socket) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  for (;;) {
    http::request<http::string_body> req;
    auto [ec, n] = co_await http::async_read(stream, buffer, req, tuple_awaitable);
    if (ec) co_return;
    if (websocket::is_upgrade(req)) {
      co_await echo_websocket(std::move(stream), std::move(req));
      co_return;
    }
    http::response<http::string_body> res{http::status::ok, req.version()};
    res.set(http::field::content_type, "application/json");
    res.keep_alive(req.keep_alive());
    res.body() = std::move(req.body());
    res.prepare_payload();
    auto [wec, wn] = co_await http::async_write(stream, res, tuple_awaitable);
    if (wec || !res.keep_alive()) co_return;
  }
}

asio::awaitable<void> echo_accept(tcp::acceptor& acceptor) {
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(tuple_awaitable);
    if (ec) co_return;
    set_nodelay(socket);
    asio::co_spawn(acceptor.get_executor(), echo_session(std::move(socket)),
                   [](std::exception_ptr e) {
                     if (e) std::cerr << "echo session: " << describe(e) << std::endl;
                   });
  }
}

int run_baseline_server() {
  asio::io_context io(1);
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address_v4("127.0.0.1"), 0));
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&io](boost::system::error_code, int) { io.stop(); });
  asio::co_spawn(io, echo_accept(acceptor), asio::detached);
  std::cerr << "baseline echo server listening on http://127.0.0.1:"
            << acceptor.local_endpoint().port() << std::endl;
  io.run();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string_view(argv[1]) == "--baseline-server") return run_baseline_server();

  Options opt =
      parse_or_exit("client_tools_load", kUsage, [&] { return parse_options(argc, argv); });
  begin_run("client_tools_load", opt.max_runtime_s);

  try {
    require_server(opt.server);
    // Before any child starts: children inherit it. The server keeps 128 descriptors beyond
    // server.maxConnections for itself.
    raise_fd_limit(descriptors_needed(opt) + 128, "lower --idle-clients / --clients");
    RunDirectory temp("client-tools-load", opt.keep_temp);
    Results results;
    asio::io_context io(1);
    std::exception_ptr failure = run_to_end(io, run_all(io, opt, temp, results));
    if (failure) {
      temp.keep();
      print_report(opt, results);
      std::cerr << "client_tools_load: " << describe(failure) << std::endl;
      leave(1);
    }
    if (problems().count > 0) temp.keep();
    print_report(opt, results);
    return problems().count == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "client_tools_load: " << e.what() << std::endl;
    return 1;
  }
}
