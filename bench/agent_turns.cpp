// agent_turns: benchmark of whole agent turns through Switchboard (issue 3).
//
// Starts the real `switchboard serve` binary with a temporary HOME, working directory, project
// directory (--directory), data directory and config whose only model provider is a fake
// OpenAI-compatible model that lives in this program on its own thread and answers at once:
// to a request whose last message is the user's prompt it streams one tool call, to the request
// that carries the tool result it streams the final text. The prompt is a small JSON document
// that tells the fake model which tool to call with which input, what the tool's result must
// contain and what to answer then, so that the fake model keeps no state and sixteen sessions can
// share it.
//
// Turn kinds:
//  * read     the model calls the built-in `read` on a small file of the project directory;
//  * client   the model calls `client_{clientID}_echo`, a tool that a WebSocket client of this
//             program registered for the session (the `register` message with its sessionID) and
//             answers at once;
//  * chat     the same client-tool turn as a useChat app of the Vercel AI SDK makes it through
//             POST /api/chat (docs/ai-sdk.md): the user's message with the app's tool `echo`,
//             which the model calls by that plain name; the response (a UI message stream) ends
//             at the call, and the app answers it in a second POST (its assistant message with
//             the tool's output), whose response streams the rest of the turn. A chat id names
//             a session: a driver moves to a new chat where the others move to a new session.
//
// Scenarios (all client work on one io_context thread, C++20 coroutines, Boost.Beast):
//  * latency     one driver, turns one after another: turn round trip (POST
//                /session/{id}/message) median / p95 and the server's CPU time per turn;
//  * throughput  on a fresh server: RSS when idle, then 16 drivers, each looping turns on its own
//                session, until 1,000 turns in all: turns/s, CPU per turn, RSS after;
//  * history     one session that is never changed, many turns: how the cost of a turn grows with
//                the length of the session's history;
//  * startup     time from fork() to the first 200 from GET /health, on an empty data directory
//                and on the data directory that the throughput run left behind.
// (Counts are the defaults.) The server sends the whole history to the model at every step, so a
// turn costs more the longer its session is: the latency and throughput drivers move to a new
// session every --session-turns turns (20), and the history scenario shows the growth.
//
// Every turn is verified: 200, an assistant message with finish "stop" and no error, whose text
// is exactly what the fake model sent (chat: both streams read to `[DONE]`, no error chunk, the
// first ending with the call of `echo` and finish "tool-calls", the second's text deltas exactly
// what the fake model sent); the fake model in turn checks that the tool result it was sent
// contains what the tool must have returned. Every network operation has a timeout
// (--op-timeout), except a WebSocket client's wait for its next request, which lasts as long as
// its scenario; --max-runtime kills the run if anything else hangs. Any error is counted.
// Prints markdown on stdout, progress on stderr; exit status 0 only when there was no error.
#include <boost/json.hpp>
#include <boost/json/basic_parser_impl.hpp>

#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "fake_model_server.hpp"
#include "provider/sse_decoder.hpp"
#include "server_process.hpp"
#include "support/client.hpp"
#include "support/loop_lag.hpp"
#include "support/run.hpp"

namespace {

using namespace bench;
using namespace std::chrono_literals;

constexpr std::string_view kUsage = R"(usage: agent_turns [options]

  --server PATH           switchboard binary (default: the one beside this program,
                          else build/release/switchboard)
  --scenarios LIST        latency,throughput,history,startup (default: all four)
  --kinds LIST            read,client,chat: the tool of each turn, and chat: a client tool
                          through /api/chat as a useChat app calls it (default: all three)
  --warmup-turns N        latency: turns before the measured ones (default 50)
  --turns N               latency: measured turns (default 500)
  --sessions N            throughput: concurrent sessions, one driver each (default 16)
  --total-turns N         throughput: turns in all, warm-up included (default 1000)
  --throughput-warmup N   throughput: the first N turns are not in the window (default 80)
  --session-turns N       latency and throughput: a driver moves to a new session after N
                          turns, so that history stays short (default 20; 0: never)
  --history-turns N       history: turns in one session (default 400)
  --history-bucket N      history: turns per row (default 50)
  --starts N              startup: starts per data directory (default 10)
  --op-timeout MS         limit for every network operation (default 10000)
  --max-runtime SECONDS   the whole run is killed after this (default 1200)
  --keep-temp             keep the temporary directory (server logs, configs, databases)
  --server-env NAME=VALUE an environment variable for the server (repeatable), e.g.
                          SWITCHBOARD_DATABASE_URL=postgresql://... for a PostgreSQL store
                          (each server of the run then uses that one store, one at a time)
  --server-prefix "CMD ARGS"  run the server under a tool, e.g.
                          "valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.%p"
                          (figures then describe the tool, not the server alone)
)";

// ---- options --------------------------------------------------------------------------------

enum class Kind { Read, Client, Chat };

std::string kind_name(Kind k) {
  return k == Kind::Read ? "read" : k == Kind::Client ? "client" : "chat";
}

struct Options {
  ServerCommand server;
  bool latency = true, throughput = true, history = true, startup = true;
  std::vector<Kind> kinds = {Kind::Read, Kind::Client, Kind::Chat};
  int warmup_turns = 50;
  int turns = 500;
  int sessions = 16;
  int total_turns = 1000;
  int throughput_warmup = 80;
  int session_turns = 20;
  int history_turns = 400;
  int history_bucket = 50;
  int starts = 10;
  std::chrono::milliseconds op_timeout{10000};
  int max_runtime_s = 1200;
  bool keep_temp = false;
};

Options parse_options(int argc, char** argv) {
  Options o;
  o.server.path = default_server_path().string();
  for_each_flag(argc, argv, kUsage, [&](std::string_view flag, const FlagValue& value) {
    if (flag == "--server") {
      // The server starts in a temporary directory: a relative path would not be found there.
      o.server.path = fs::absolute(std::string(value())).string();
    } else if (flag == "--scenarios") {
      o.latency = o.throughput = o.history = o.startup = false;
      for (const auto& s : split_list(value())) {
        if (s == "latency")
          o.latency = true;
        else if (s == "throughput")
          o.throughput = true;
        else if (s == "history")
          o.history = true;
        else if (s == "startup")
          o.startup = true;
        else
          throw std::invalid_argument("unknown scenario \"" + s + "\"");
      }
    } else if (flag == "--kinds") {
      o.kinds.clear();
      for (const auto& s : split_list(value())) {
        if (s == "read")
          o.kinds.push_back(Kind::Read);
        else if (s == "client")
          o.kinds.push_back(Kind::Client);
        else if (s == "chat")
          o.kinds.push_back(Kind::Chat);
        else
          throw std::invalid_argument("unknown kind \"" + s + "\" (read, client or chat)");
      }
    } else if (flag == "--warmup-turns") {
      o.warmup_turns = parse_count(flag, value(), 0, 1000000);
    } else if (flag == "--turns") {
      o.turns = parse_count(flag, value(), 1, 1000000);
    } else if (flag == "--sessions") {
      o.sessions = parse_count(flag, value(), 1, 1000);
    } else if (flag == "--total-turns") {
      o.total_turns = parse_count(flag, value(), 1, 10000000);
    } else if (flag == "--throughput-warmup") {
      o.throughput_warmup = parse_count(flag, value(), 0, 10000000);
    } else if (flag == "--session-turns") {
      o.session_turns = parse_count(flag, value(), 0, 10000000);
    } else if (flag == "--history-turns") {
      o.history_turns = parse_count(flag, value(), 1, 100000);
    } else if (flag == "--history-bucket") {
      o.history_bucket = parse_count(flag, value(), 1, 100000);
    } else if (flag == "--starts") {
      o.starts = parse_count(flag, value(), 1, 1000);
    } else if (flag == "--op-timeout") {
      o.op_timeout = std::chrono::milliseconds(parse_count(flag, value(), 1, 3600000));
    } else if (flag == "--max-runtime") {
      o.max_runtime_s = parse_count(flag, value(), 1, 86400);
    } else if (flag == "--server-prefix") {
      o.server.prefix = split_words(value());
    } else if (flag == "--server-env") {
      o.server.env.emplace_back(value());
    } else if (flag == "--keep-temp") {
      o.keep_temp = true;
    } else {
      return false;
    }
    return true;
  });
  if (o.throughput_warmup >= o.total_turns)
    throw std::invalid_argument("--throughput-warmup must be below --total-turns");
  if (o.kinds.empty()) throw std::invalid_argument("--kinds: name at least one kind");
  return o;
}

double mib(std::uint64_t kib) {
  return static_cast<double>(kib) / 1024.0;
}

// ---- the fake model -------------------------------------------------------------------------

// An answer of the fake model in OpenAI's Chat Completions streaming format, built in one string.
// The final text comes in two pieces as a real model would send it, a tool call's arguments too.
std::string text_response(std::string text, bool keep_alive) {
  sb::test::FakeResponse r = sb::test::FakeResponse::with_text(std::move(text));
  r.text_pieces = 2;
  return sb::test::whole_response(r, "m", false, keep_alive);
}

std::string tool_call_response(std::string id, std::string_view name, std::string arguments,
                               bool keep_alive) {
  auto r = sb::test::FakeResponse::with_tool_calls(
      {sb::test::FakeToolCall{std::move(id), std::string(name), std::move(arguments), 2}});
  return sb::test::whole_response(r, "m", false, keep_alive);
}

// What the fake model needs of a Chat Completions request: the role and content of the last
// message and the content of the last user message.
struct RequestSummary {
  bool has_messages = false;
  std::string last_role, last_content, last_user_content;
};

// A handler for json::basic_parser that fills a RequestSummary. A request carries the tool
// schemas (about 16 KB) and the whole history; building a DOM of it cost the fake model more CPU
// per turn than the target allows the server, on the same two vCPUs. This reads it in one pass
// and keeps only the strings of the top-level "messages" array's objects.
class SummaryHandler {
 public:
  static constexpr std::size_t max_object_size = std::size_t(-1);
  static constexpr std::size_t max_array_size = std::size_t(-1);
  static constexpr std::size_t max_key_size = std::size_t(-1);
  static constexpr std::size_t max_string_size = std::size_t(-1);
  using error_code = boost::system::error_code;
  using string_view = json::string_view;

  RequestSummary summary;

  bool on_document_begin(error_code&) { return true; }
  bool on_document_end(error_code&) { return true; }
  bool on_object_begin(error_code&) {
    ++depth_;
    if (in_message()) role_.clear(), content_.clear();
    return true;
  }
  bool on_object_end(std::size_t, error_code&) {
    if (in_message()) {
      summary.has_messages = true;
      summary.last_role = role_;
      summary.last_content = content_;
      if (role_ == "user") summary.last_user_content = content_;
    }
    --depth_;
    return true;
  }
  bool on_array_begin(error_code&) {
    // The key before a value of the root object is that value's key.
    if (depth_ == 1 && key_ == "messages") in_messages_ = true;
    ++depth_;
    return true;
  }
  bool on_array_end(std::size_t, error_code&) {
    --depth_;
    if (depth_ == 1) in_messages_ = false;
    return true;
  }
  bool on_key_part(string_view s, std::size_t, error_code&) {
    if (tracked()) key_part(s);
    return true;
  }
  bool on_key(string_view s, std::size_t, error_code&) {
    if (tracked()) {
      key_part(s);
      key_done_ = true;
      value_pending_ = true;
    }
    return true;
  }
  bool on_string_part(string_view s, std::size_t, error_code&) {
    string_part(s);
    return true;
  }
  bool on_string(string_view s, std::size_t, error_code&) {
    string_part(s);
    target_ = nullptr;
    return true;
  }
  bool on_number_part(string_view, error_code&) { return true; }
  bool on_int64(std::int64_t, string_view, error_code&) { return true; }
  bool on_uint64(std::uint64_t, string_view, error_code&) { return true; }
  bool on_double(double, string_view, error_code&) { return true; }
  bool on_bool(bool, error_code&) { return true; }
  bool on_null(error_code&) { return true; }
  bool on_comment_part(string_view, error_code&) { return true; }
  bool on_comment(string_view, error_code&) { return true; }

 private:
  // Directly inside an object of the messages array (depth: root 1, array 2, message 3).
  bool in_message() const { return in_messages_ && depth_ == 3; }
  bool tracked() const { return depth_ == 1 || in_message(); }
  void key_part(string_view s) {
    if (key_done_) key_.clear(), key_done_ = false;
    key_.append(s.data(), s.size());
  }
  void string_part(string_view s) {
    if (value_pending_ && in_message()) {
      if (key_ == "role")
        target_ = &role_;
      else if (key_ == "content")
        target_ = &content_;
      value_pending_ = false;  // the value of this key is being read
    }
    if (target_) target_->append(s.data(), s.size());
  }

  int depth_ = 0;
  bool in_messages_ = false;
  std::string key_;
  bool key_done_ = false;          // the next key part starts a new key
  bool value_pending_ = false;     // a tracked key was read and its value has not started
  std::string* target_ = nullptr;  // role_ or content_ while their string value is read
  std::string role_, content_;
};

// A fake OpenAI-compatible model on 127.0.0.1:0, on the thread of its FakeModelServer.
// Stateless: everything it needs is in the request (see respond()). Each response is built whole
// and written at once, so the model costs the server no waiting at all. Its own CPU time is read
// from its thread's CPU clock so that the report can show what it took from the shared vCPUs.
class FakeModel : public sb::test::FakeModelHandler {
 public:
  FakeModel() = default;
  FakeModel(const FakeModel&) = delete;
  FakeModel& operator=(const FakeModel&) = delete;

  unsigned short port() const { return server_.port(); }
  std::uint64_t requests() const { return requests_.load(std::memory_order_relaxed); }
  std::uint64_t request_bytes() const { return request_bytes_.load(std::memory_order_relaxed); }
  std::int64_t cpu_us() const { return server_.thread_cpu_us(); }
  // Moves the fake model's errors into the run's list (main thread).
  void collect_problems() {
    std::lock_guard lock(mutex_);
    for (const auto& p : problems_)
      problems().add("fake model: " + p);
    problems_.clear();
  }

 private:
  void problem(const std::string& what) {
    std::lock_guard lock(mutex_);
    if (problems_.size() < 50) problems_.push_back(what);
  }

  void connection_error(const std::string& what) override { problem(what); }

  // The prompt of the turn (the last user message) is a JSON object {tool, input, expect,
  // final}. If the request ends with that prompt, the answer is a call of `tool` with `input`;
  // if it ends with a tool result, the answer is `final` when the result contains `expect`, and
  // a text that names the mismatch otherwise (which the driver then reports).
  std::string respond(const Request& req, bool keep_alive) override {
    requests_.fetch_add(1, std::memory_order_relaxed);
    request_bytes_.fetch_add(req.body().size(), std::memory_order_relaxed);
    std::string_view target = req.target();
    if (req.method() != http::verb::post || !target.ends_with("/chat/completions"))
      return error_response(
          404, "unexpected " + std::string(req.method_string()) + " " + std::string(target),
          keep_alive);
    json::basic_parser<SummaryHandler> parser(json::parse_options{});
    boost::system::error_code ec;
    parser.write_some(false, req.body().data(), req.body().size(), ec);
    const RequestSummary& summary = parser.handler().summary;
    if (ec || !summary.has_messages)
      return error_response(400, "a request without messages", keep_alive);

    const json::object* prompt = nullptr;
    json::value prompt_doc = json::parse(summary.last_user_content, ec);
    if (!ec && prompt_doc.is_object()) prompt = &prompt_doc.get_object();
    auto field = [&](std::string_view key) -> std::string_view {
      const auto* v = prompt ? prompt->if_contains(key) : nullptr;
      return v && v->is_string() ? std::string_view(v->get_string()) : std::string_view();
    };
    const json::value* input = prompt ? prompt->if_contains("input") : nullptr;
    if (!prompt || field("tool").empty() || field("final").empty() || !input)
      return error_response(400, "the last user message is not a bench prompt", keep_alive);

    if (summary.last_role == "user")
      return tool_call_response("call_" + std::to_string(++calls_), field("tool"),
                                json::serialize(*input), keep_alive);
    if (summary.last_role == "tool") {
      std::string_view result = summary.last_content;
      if (result.find(field("expect")) == std::string_view::npos) {
        problem("the tool result does not contain \"" + std::string(field("expect")) +
                "\": " + std::string(result.substr(0, 300)));
        return text_response("fake model: unexpected tool result", keep_alive);
      }
      return text_response(std::string(field("final")), keep_alive);
    }
    return error_response(400, "the request ends with neither the prompt nor a tool result",
                          keep_alive);
  }

  // An error in the API's format; the server then fails the turn, which the driver reports.
  std::string error_response(unsigned status, const std::string& message, bool keep_alive) {
    problem(message);
    return sb::test::whole_response(sb::test::FakeResponse::http_error(status, message), "m", false,
                                    keep_alive);
  }

  std::atomic<std::uint64_t> requests_{0};
  std::atomic<std::uint64_t> request_bytes_{0};  // request bodies, for the report
  std::uint64_t calls_ = 0;                      // tool call ids (the fake model's thread only)
  std::mutex mutex_;
  std::vector<std::string> problems_;
  sb::test::FakeModelServer server_{*this};  // last: its thread stops before the rest goes
};

// ---- the run's context and the server's set-up ----------------------------------------------

// A scenario's server and the turns' shared state.
struct Ctx : Target {
  const Options& opt;
  FakeModel& model;
  fs::path read_file;  // the file that `read` turns read
};

// The file of the project directory that `read` turns read; the fake model checks that the tool
// result contains kReadMarker.
constexpr std::string_view kReadMarker = "agent_turns marker: the file was read";

// A server's files (HOME, cwd, config, log: ServerProcess), the project directory with the file
// to read, and the data directory, under the run's directory `name-N`.
struct ServerSetup {
  fs::path project, data;
  ServerProcess::Options options;
};

ServerSetup server_setup(const Options& opt, RunDirectory& temp, const std::string& name,
                         unsigned short model_port, const fs::path& data_dir = {}) {
  fs::path root = temp.fresh(name);
  ServerSetup s;
  s.project = root / "project";
  s.data = data_dir.empty() ? root / "data" : data_dir;
  for (const auto& p : {s.project, s.data})
    fs::create_directories(p);
  {
    std::ofstream file(s.project / "notes.txt");
    file << "Notes of the agent_turns benchmark project.\n" << kReadMarker << "\n";
    for (int i = 1; i <= 20; ++i)
      file << "line " << i << ": a short line of text that the read tool returns\n";
  }
  // The fake model is the only provider; the client-tool rate limit is off (16 sessions make
  // hundreds of client calls a second); queues that a burst cannot overflow.
  json::object config{
      {"provider",
       json::object{{"fake", json::object{{"type", "openai-compatible"},
                                          {"baseURL", "http://127.0.0.1:" +
                                                          std::to_string(model_port) + "/v1"},
                                          {"models", json::array{"m"}}}}}},
      {"model", "fake/m"},
      {"clientTools",
       json::object{{"rateLimit", 0},
                    {"keepaliveInterval", 30000},
                    {"defaultTimeout", 30000},
                    // The benchmark's clients are anonymous (no client tokens kept); with tokens
                    // a result over HTTP costs one SHA-256 of the token more (about 1 µs).
                    {"clientTokens", false}}},
      {"server", json::object{{"subscriberQueueLimit", 65536}}}};
  s.options = server_options(opt.server, root, std::move(config));
  s.options.data_dir = s.data;
  s.options.directory = s.project;
  return s;
}

struct Server {
  ServerSetup setup;
  std::unique_ptr<ServerProcess> process;
};

Server start_server(const Options& opt, RunDirectory& temp, FakeModel& model,
                    const std::string& name) {
  Server s{server_setup(opt, temp, name, model.port())};
  s.process = bench::start_server(opt.server, s.setup.options);
  return s;
}

Ctx make_ctx(asio::io_context& io, const Options& opt, FakeModel& model, const Server& s) {
  return Ctx{Target::loopback(io, s.process->port(), opt.op_timeout), opt, model,
             s.setup.project / "notes.txt"};
}

// ---- measuring ------------------------------------------------------------------------------

// Counters at one instant.
struct Snapshot {
  Clock::time_point at;
  CpuTicks server;
  std::uint64_t server_ns = 0;  // schedstat, live threads
  std::int64_t bench_us = 0;    // this process, fake model included
  std::int64_t model_us = 0;    // the fake model's thread
  std::uint64_t bench_ticks = 0;
  std::uint64_t busy_ticks = 0;
  std::uint64_t model_requests = 0;
  std::uint64_t model_request_bytes = 0;
  std::size_t turns_done = 0;
};

Snapshot snapshot(pid_t server, const FakeModel& model, std::size_t turns_done,
                  bool precise = false) {
  Snapshot s;
  s.at = Clock::now();
  s.server = process_cpu_ticks(server);
  if (precise) s.server_ns = process_cpu_ns(server);
  s.bench_us = self_cpu_us();
  s.model_us = model.cpu_us();
  s.bench_ticks = process_cpu_ticks(::getpid()).total();
  s.busy_ticks = system_busy_ticks();
  s.model_requests = model.requests();
  s.model_request_bytes = model.request_bytes();
  s.turns_done = turns_done;
  return s;
}

struct Window {
  double seconds = 0;
  std::size_t turns = 0;
  double turns_per_s = 0;
  double server_cpu_ms = 0;   // server CPU per turn
  double server_util = 0;     // server CPU / wall time (1.0 = one vCPU)
  double server_system = 0;   // the part of the server's CPU time spent in the kernel
  double model_cpu_us = 0;    // fake model CPU per turn
  double bench_cpu_us = 0;    // this program's CPU per turn, fake model excluded
  double other_load = 0;      // everything else, as a fraction of all vCPUs
  double model_requests = 0;  // per turn (2 expected)
  double request_kb = 0;      // mean size of a model request's body
};

Window window_between(const Snapshot& a, const Snapshot& b) {
  Window w;
  w.seconds = std::chrono::duration<double>(b.at - a.at).count();
  w.turns = b.turns_done - a.turns_done;
  if (w.seconds > 0) w.turns_per_s = static_cast<double>(w.turns) / w.seconds;
  double tick_us = 1e6 / static_cast<double>(clock_ticks_per_second());
  double server_ticks = static_cast<double>(b.server.total() - a.server.total());
  double server_us = server_ticks * tick_us;
  if (server_ticks > 0)
    w.server_system = static_cast<double>(b.server.system - a.server.system) / server_ticks;
  double turns = static_cast<double>(std::max<std::size_t>(w.turns, 1));
  w.server_cpu_ms = server_us / 1000.0 / turns;
  w.server_util = w.seconds > 0 ? server_us / 1e6 / w.seconds : 0;
  w.model_cpu_us = static_cast<double>(b.model_us - a.model_us) / turns;
  w.bench_cpu_us =
      static_cast<double>((b.bench_us - a.bench_us) - (b.model_us - a.model_us)) / turns;
  w.model_requests = static_cast<double>(b.model_requests - a.model_requests) / turns;
  if (b.model_requests > a.model_requests)
    w.request_kb = static_cast<double>(b.model_request_bytes - a.model_request_bytes) / 1024.0 /
                   static_cast<double>(b.model_requests - a.model_requests);
  double other = static_cast<double>(b.busy_ticks - a.busy_ticks) - server_ticks -
                 static_cast<double>(b.bench_ticks - a.bench_ticks);
  if (w.seconds > 0)
    w.other_load = std::max(0.0, other * tick_us / 1e6 / w.seconds /
                                     static_cast<double>(std::thread::hardware_concurrency()));
  return w;
}

// The turns of one scenario: claimed one by one by its drivers; the window opens when `warmup`
// turns have ended and closes when all `total` have.
struct TurnRun {
  bool lag_on = false;  // the server measures its loop lag: mark the window for it
  pid_t server = 0;
  std::size_t total = 0;
  std::size_t warmup = 0;
  std::size_t bucket = 0;  // > 0: a precise snapshot every `bucket` turns (history scenario)
  int session_turns = 0;   // > 0: each driver moves to a new session after this many turns
  std::size_t claimed = 0;
  std::size_t ended = 0;
  std::size_t failed = 0;
  std::size_t sessions = 0;  // sessions created
  std::optional<Snapshot> open, close;
  std::vector<Snapshot> buckets;
  std::vector<double> latency_ms;           // ok turns issued inside the window
  std::vector<double> bucket_latency_sums;  // history: per bucket, the sum of latencies
};

// ---- the AI SDK's chat protocol (chat turns) -----------------------------------------------

// A UI message stream as a useChat app reads it (docs/ai-sdk.md): the response of POST
// /api/chat, read whole (the server ends it). Its chunks go to `chunks`; returns "" or what is
// wrong: not 200 with `x-vercel-ai-ui-message-stream: v1`, an event that is not a JSON object,
// no `data: [DONE]` at the end, an `error` chunk.
std::string ui_message_chunks(const http::response<http::string_body>& res,
                              std::vector<json::value>& chunks) {
  if (res.result() != http::status::ok)
    return "expected 200, got " + std::to_string(res.result_int()) + " " + clip(res.body());
  if (res["x-vercel-ai-ui-message-stream"] != "v1")
    return "no x-vercel-ai-ui-message-stream: v1 header";
  sb::sse::SseDecoder decoder;
  std::vector<sb::sse::SseEvent> events;
  if (!decoder.feed(res.body(), events)) return "an event over the decoder's limit";
  decoder.finish(events);
  if (events.empty() || events.back().data != "[DONE]")
    return "the stream does not end with [DONE]: " + clip(res.body());
  chunks.clear();
  for (std::size_t i = 0; i + 1 < events.size(); ++i) {
    auto chunk = parse_json(events[i].data);
    if (!chunk || !chunk->is_object())
      return "a chunk that is not a JSON object: " + events[i].data;
    if (auto* type = string_field(*chunk, "type"); type && *type == "error")
      return "an error chunk: " + clip(events[i].data);
    chunks.push_back(std::move(*chunk));
  }
  if (chunks.empty()) return "a stream without chunks";
  return "";
}

// The `finish` chunk that ends a stream's chunks, with finishReason "tool-calls" or without it;
// "" or what is wrong.
std::string check_finish(const std::vector<json::value>& chunks, bool tool_calls) {
  const json::value& last = chunks.back();
  auto* type = string_field(last, "type");
  auto* reason = string_field(last, "finishReason");
  bool waits = reason && *reason == "tool-calls";
  if (!type || *type != "finish" || waits != tool_calls)
    return std::string("expected the stream to end with finish") +
           (tool_calls ? " {finishReason: \"tool-calls\"}" : " (not \"tool-calls\")") + ", got " +
           clip(json::serialize(last));
  return "";
}

// The first stream of a chat turn: its message id (of `start`) and the id of its one call, of
// `echo` with {text: `echo`}; "" or what is wrong.
std::string find_echo_call(const std::vector<json::value>& chunks, const std::string& echo,
                           std::string& message_id, std::string& call_id) {
  for (const auto& c : chunks) {
    auto* type = string_field(c, "type");
    if (type && *type == "start")
      if (auto* mid = string_field(c, "messageId")) message_id = *mid;
    if (!type || *type != "tool-input-available") continue;
    auto* name = string_field(c, "toolName");
    auto* cid = string_field(c, "toolCallId");
    auto* input = c.get_object().if_contains("input");
    auto* text = input ? string_field(*input, "text") : nullptr;
    if (!name || *name != "echo" || !cid || !text || *text != echo || !call_id.empty())
      return "expected one call of echo {text: \"" + echo + "\"}, got " + clip(json::serialize(c));
    call_id = *cid;
  }
  if (call_id.empty()) return "the first stream has no tool-input-available";
  return check_finish(chunks, true);
}

// The text of a stream's `text-delta` chunks.
std::string streamed_text(const std::vector<json::value>& chunks) {
  std::string text;
  for (const auto& c : chunks)
    if (auto* type = string_field(c, "type"); type && *type == "text-delta")
      if (auto* delta = string_field(c, "delta")) text += std::string_view(*delta);
  return text;
}

// The app's own tools of every chat request, as the transport's `body` carries them: the
// benchmark clients' `echo`, {echo: {description, inputSchema}}.
json::object chat_app_tools() {
  json::object tools;
  for (const auto& spec : echo_tool_specs()) {
    const json::object& s = spec.get_object();
    tools[s.at("id").get_string()] =
        json::object{{"description", s.at("description")}, {"inputSchema", s.at("parameters")}};
  }
  return tools;
}

// ---- drivers: one session at a time, turns one after another ------------------------------

class Driver {
 public:
  Driver(Ctx& ctx, TurnRun& run, Kind kind, int index)
      : ctx_(ctx),
        run_(run),
        kind_(kind),
        name_("d" + std::to_string(index)),
        stream_(ctx.io.get_executor()) {
    if (kind_ == Kind::Client)
      client_ = std::make_unique<WsEchoClient>(ctx, "bench-" + std::to_string(index));
  }

  // Connections and the first session, before the run starts. A chat turn's requests have no
  // kept connection: the server closes a UI message stream when it ends.
  asio::awaitable<std::string> setup(Latch& clients_ended) {
    if (kind_ != Kind::Chat)
      if (auto err = co_await connect_stream(stream_, ctx_.endpoint, ctx_.op_timeout); !err.empty())
        co_return err;
    if (client_) {
      if (auto err = co_await client_->connect(); !err.empty()) co_return err;
      clients_ended.add();
      asio::co_spawn(ctx_.io, client_->serve(), [this, &clients_ended](std::exception_ptr e) {
        if (e) problems().add("client " + client_->id() + ": " + describe(e));
        clients_ended.count_down();
      });
    }
    co_return co_await new_session();
  }

  asio::awaitable<void> run() {
    for (;;) {
      if (run_.claimed >= run_.total) break;
      ++run_.claimed;
      bool in_window = run_.open.has_value();
      if (run_.session_turns > 0 && session_turns_ >= run_.session_turns) {
        if (auto err = co_await new_session(); !err.empty()) {
          fail("a new session: " + err);
          finish_turn(false, 0);
          break;
        }
      }
      auto [ok, ms, broken] = co_await turn();
      finish_turn(ok, in_window ? ms : -1);
      if (broken) break;
    }
    stream_.close();
  }

  void close_client() {
    if (client_) client_->close();
  }

 private:
  struct TurnOutcome {
    bool ok;
    double ms;
    bool broken;  // the connection is unusable: the driver stops
  };

  // A chat turn's session is the chat's, created by its first request: a new chat id here.
  asio::awaitable<std::string> new_session() {
    if (kind_ == Kind::Chat) {
      chat_id_ = "agent-turns-" + name_ + "-" + std::to_string(run_.sessions + 1);
      chat_messages_.clear();
      session_turns_ = 0;
      ++run_.sessions;
      co_return "";
    }
    auto req = make_request(http::verb::post, "/session", ctx_.host,
                            json::serialize(json::object{{"title", "agent_turns " + name_}}));
    auto r = co_await http_call(stream_, buffer_, req, ctx_.op_timeout);
    if (!r.error.empty()) co_return r.error;
    auto body = parse_json(r.res.body());
    auto* id = body ? string_field(*body, "id") : nullptr;
    if (r.res.result() != http::status::ok || !id)
      co_return "POST /session: expected 200 {id}, got " + std::to_string(r.res.result_int()) +
          " " + clip(r.res.body());
    session_ = std::string(*id);
    session_turns_ = 0;
    ++run_.sessions;
    if (client_)
      if (auto err = co_await client_->register_tool(session_); !err.empty())
        co_return "register for " + session_ + ": " + err;
    co_return "";
  }

  asio::awaitable<TurnOutcome> turn() {
    ++session_turns_;
    std::string token = name_ + "-" + std::to_string(++turns_);
    std::string final_text = "final answer of turn " + token;
    if (kind_ == Kind::Chat) co_return co_await chat_turn(token, final_text);
    json::object prompt;
    if (kind_ == Kind::Read) {
      prompt = json::object{{"tool", "read"},
                            {"input", json::object{{"filePath", ctx_.read_file.string()}}},
                            {"expect", kReadMarker},
                            {"final", final_text}};
    } else {
      std::string echo = "echo of turn " + token;
      prompt = json::object{{"tool", client_->tool_id()},
                            {"input", json::object{{"text", echo}}},
                            {"expect", echo},
                            {"final", final_text}};
    }
    auto req = make_request(
        http::verb::post, "/session/" + session_ + "/message", ctx_.host,
        json::serialize(json::object{
            {"parts",
             json::array{json::object{{"type", "text"}, {"text", json::serialize(prompt)}}}}}));
    auto t0 = Clock::now();
    auto r = co_await http_call(stream_, buffer_, req, ctx_.op_timeout);
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (!r.error.empty()) {
      fail("turn " + token + ": " + r.error);
      co_return TurnOutcome{false, ms, true};
    }
    if (auto err = check_turn(r.res, final_text); !err.empty()) {
      fail("turn " + token + ": " + err);
      co_return TurnOutcome{false, ms, false};
    }
    co_return TurnOutcome{true, ms, false};
  }

  // The turn as a useChat app makes it: POST /api/chat with the user's message (the prompt) and
  // the app's tools; its stream ends with the model's call of `echo` and finish "tool-calls";
  // the app runs the tool and POSTs its messages again, the last one the assistant's with the
  // call's output, and that stream has the rest of the turn: the final text, then finish. The
  // round trip is from the first request to the end of the second stream.
  asio::awaitable<TurnOutcome> chat_turn(const std::string& token, const std::string& final_text) {
    std::string echo = "echo of turn " + token;
    json::object prompt{{"tool", "echo"},
                        {"input", json::object{{"text", echo}}},
                        {"expect", echo},
                        {"final", final_text}};
    chat_messages_.push_back(json::object{
        {"id", "user-" + token},
        {"role", "user"},
        {"parts", json::array{json::object{{"type", "text"}, {"text", json::serialize(prompt)}}}}});
    auto t0 = Clock::now();
    std::vector<json::value> chunks;
    std::string message_id, call_id;
    std::string err = co_await post_chat(chunks);
    if (err.empty()) err = find_echo_call(chunks, echo, message_id, call_id);
    if (!err.empty()) co_return chat_failed(token, err, t0);

    // What useChat holds after the tool ran (addToolOutput), sent with the next request.
    json::object tool_part{{"type", "tool-echo"},
                           {"toolCallId", call_id},
                           {"state", "output-available"},
                           {"input", json::object{{"text", echo}}},
                           {"output", echo}};
    chat_messages_.push_back(json::object{
        {"id", message_id},
        {"role", "assistant"},
        {"parts", json::array{json::object{{"type", "step-start"}}, std::move(tool_part)}}});
    err = co_await post_chat(chunks);
    if (!err.empty()) co_return chat_failed(token, "continuation: " + err, t0);
    err = check_finish(chunks, false);
    std::string text = streamed_text(chunks);
    if (err.empty() && text != final_text)
      err = "expected the text \"" + final_text + "\", got \"" + clip(text) + "\"";
    if (!err.empty()) co_return chat_failed(token, err, t0);
    auto& parts = chat_messages_.back().as_object()["parts"].as_array();
    parts.push_back(json::object{{"type", "step-start"}});
    parts.push_back(json::object{{"type", "text"}, {"text", text}, {"state", "done"}});
    co_return TurnOutcome{true, ms_since(t0), false};
  }

  TurnOutcome chat_failed(const std::string& token, const std::string& what, Clock::time_point t0) {
    fail("turn " + token + ": " + what);
    return TurnOutcome{false, ms_since(t0), false};
  }

  static double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  }

  // POST /api/chat {id, messages, trigger, tools} on a new connection, its stream read to the
  // end; "" or what is wrong.
  asio::awaitable<std::string> post_chat(std::vector<json::value>& chunks) {
    beast::tcp_stream stream(ctx_.io.get_executor());
    if (auto err = co_await connect_stream(stream, ctx_.endpoint, ctx_.op_timeout); !err.empty())
      co_return "POST /api/chat: " + err;
    beast::flat_buffer buffer;
    auto req = make_request(http::verb::post, "/api/chat", ctx_.host,
                            json::serialize(json::object{{"id", chat_id_},
                                                         {"messages", chat_messages_},
                                                         {"trigger", "submit-message"},
                                                         {"tools", app_tools_}}));
    auto r = co_await http_call(stream, buffer, req, ctx_.op_timeout);
    if (!r.error.empty()) co_return r.error;
    if (auto err = ui_message_chunks(r.res, chunks); !err.empty())
      co_return "POST /api/chat: " + err;
    co_return "";
  }

  // 200 {info, parts}: an assistant message that finished with "stop", no error, and whose text
  // parts say exactly what the fake model sent.
  static std::string check_turn(const http::response<http::string_body>& res,
                                const std::string& expected) {
    std::string text;
    if (auto wrong = assistant_text(res, text); !wrong.empty()) return wrong;
    if (text != expected)
      return "expected the text \"" + expected + "\", got \"" + clip(text) + "\"";
    return "";
  }

  void finish_turn(bool ok, double ms) {
    ++run_.ended;
    if (!ok) ++run_.failed;
    if (ok && ms >= 0) run_.latency_ms.push_back(ms);
    if (!run_.open && run_.ended >= run_.warmup) {
      run_.open = snapshot(run_.server, ctx_.model, run_.ended, run_.bucket > 0);
      bench::mark_loop_lag(run_.server, run_.lag_on);
    }
    if (run_.bucket > 0) {
      if (run_.bucket_latency_sums.size() <= (run_.ended - 1) / run_.bucket)
        run_.bucket_latency_sums.push_back(0);
      run_.bucket_latency_sums.back() += ok ? ms : 0;
      if (run_.ended % run_.bucket == 0)
        run_.buckets.push_back(snapshot(run_.server, ctx_.model, run_.ended, true));
    }
    if (run_.ended == run_.total) {
      run_.close = snapshot(run_.server, ctx_.model, run_.ended);
      bench::mark_loop_lag(run_.server, run_.lag_on);
    }
  }

  void fail(const std::string& what) { problems().add("driver " + name_ + ": " + what); }

  Ctx& ctx_;
  TurnRun& run_;
  Kind kind_;
  std::string name_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::unique_ptr<WsEchoClient> client_;
  std::string session_;
  std::string chat_id_;        // chat turns: the chat (and so the session)
  json::array chat_messages_;  // chat turns: the chat's UI messages, as useChat keeps them
  json::object app_tools_ = chat_app_tools();
  int session_turns_ = 0;
  int turns_ = 0;
};

// Sets up `n` drivers (sessions, connections, clients), runs `run.total` turns and tears down.
// Returns false when the set-up failed.
asio::awaitable<bool> drive(Ctx& ctx, TurnRun& run, Kind kind, int n) {
  std::vector<std::unique_ptr<Driver>> drivers;
  for (int i = 0; i < n; ++i)
    drivers.push_back(std::make_unique<Driver>(ctx, run, kind, i));
  Latch clients_ended(ctx.io.get_executor(), 0);  // serve() loops of the WebSocket clients
  bool ready = true;
  for (auto& d : drivers) {
    auto err = co_await d->setup(clients_ended);
    if (!err.empty()) {
      problems().add("set-up: " + err);
      ready = false;
      break;
    }
  }
  if (ready) {
    if (run.warmup == 0) {
      run.open = snapshot(run.server, ctx.model, 0, run.bucket > 0);
      bench::mark_loop_lag(run.server, run.lag_on);
    }
    Latch done(ctx.io.get_executor(), drivers.size());
    for (auto& d : drivers)
      asio::co_spawn(ctx.io, d->run(), [&done](std::exception_ptr e) {
        if (e) problems().add("driver: " + describe(e));
        done.count_down();
      });
    // Each operation has its own timeout; this bound is a second line of defence.
    auto bound = ctx.op_timeout * 2 + std::chrono::milliseconds(run.total) * 1000;
    if (!co_await done.wait(std::chrono::duration_cast<std::chrono::milliseconds>(bound)))
      throw Fatal(std::to_string(done.remaining()) + " drivers did not stop");
    if (!run.close) {
      run.close = snapshot(run.server, ctx.model, run.ended);
      bench::mark_loop_lag(run.server, run.lag_on);
    }
  }
  ctx.stopping = true;
  for (auto& d : drivers)
    d->close_client();
  if (!co_await clients_ended.wait(10s)) throw Fatal("WebSocket clients did not end within 10 s");
  ctx.stopping = false;
  co_return ready;
}

// ---- scenarios ------------------------------------------------------------------------------

// "p50 / p99 / max" of a window's loop lag in ms; "n/a" when the server did not measure it.
std::string lag_cell(const bench::LoopLag& lag) {
  if (!lag.found) return "n/a";
  return fmt(lag.p50_us / 1000, 2) + " / " + fmt(lag.p99_us / 1000, 2) + " / " +
         fmt(lag.max_us / 1000, 2);
}

struct LatencyRow {
  Kind kind;
  bool completed = false;
  Window w;
  double p50 = 0, p95 = 0, p99 = 0, max = 0;
  bench::LoopLag lag;  // over the measured turns
  std::size_t errors = 0;
};

struct ThroughputRow {
  Kind kind;
  int sessions = 0;
  bool completed = false;
  Window w;
  double p50 = 0, p95 = 0;
  bench::LoopLag lag;  // over the window
  std::size_t turns_run = 0;
  std::uint64_t rss_idle_kib = 0, rss_after_kib = 0, hwm_kib = 0;
  std::size_t errors = 0;
};

struct HistoryRow {
  std::size_t first = 0, last = 0;  // turn numbers in the session
  double server_cpu_ms = 0;
  double mean_ms = 0;
  double request_kb = 0;  // mean model request
};

struct StartupRow {
  std::string data;
  std::vector<double> ms;
  std::size_t errors = 0;
};

struct Results {
  std::vector<LatencyRow> latency;
  std::vector<ThroughputRow> throughput;
  std::vector<HistoryRow> history;
  bool history_completed = false;
  std::vector<StartupRow> startup;
  fs::path populated_data;  // the data directory of the throughput run (read turns)
  std::size_t populated_turns = 0, populated_sessions = 0;
};

asio::awaitable<void> run_latency(asio::io_context& io, const Options& opt, RunDirectory& temp,
                                  FakeModel& model, Kind kind, Results& results) {
  std::cerr << "latency: " << kind_name(kind) << " turns, 1 driver" << std::endl;
  auto errors_before = problems().count;
  LatencyRow row{kind};
  Server server = start_server(opt, temp, model, "latency-" + kind_name(kind));
  Ctx ctx = make_ctx(io, opt, model, server);
  TurnRun run;
  run.server = server.process->pid();
  run.warmup = static_cast<std::size_t>(opt.warmup_turns);
  run.total = run.warmup + static_cast<std::size_t>(opt.turns);
  run.session_turns = opt.session_turns;
  run.lag_on = bench::measures_loop_lag(*server.process);
  if (co_await drive(ctx, run, kind, 1) && run.open && run.close) {
    // The first window is the start and the warm-up; the second, the measured turns.
    if (run.lag_on) row.lag = bench::read_loop_lag(*server.process, 2);
    row.w = window_between(*run.open, *run.close);
    row.p50 = percentile(run.latency_ms, 0.50);
    row.p95 = percentile(run.latency_ms, 0.95);
    row.p99 = percentile(run.latency_ms, 0.99);
    row.max = percentile(run.latency_ms, 1.0);
    row.completed = true;
    std::cerr << "  " << row.w.turns << " turns in " << row.w.seconds << " s; "
              << row.w.model_requests << " model requests per turn" << std::endl;
    // Turns one after another: exactly two model requests each (the tool call, the final text).
    if (std::abs(row.w.model_requests - 2.0) > 1e-9)
      problems().add("expected 2 model requests per turn, got " + fmt(row.w.model_requests, 4));
  }
  stop_server(*server.process, opt.server.patience());
  model.collect_problems();
  row.errors = problems().count - errors_before;
  results.latency.push_back(row);
}

asio::awaitable<void> run_throughput(asio::io_context& io, const Options& opt, RunDirectory& temp,
                                     FakeModel& model, Kind kind, Results& results) {
  std::cerr << "throughput: " << kind_name(kind) << " turns, " << opt.sessions << " sessions"
            << std::endl;
  auto errors_before = problems().count;
  ThroughputRow row{kind, opt.sessions};
  Server server = start_server(opt, temp, model, "throughput-" + kind_name(kind));
  Ctx ctx = make_ctx(io, opt, model, server);
  pid_t pid = server.process->pid();
  // Idle: after one answered request, so that what is built on the first one is included.
  if (auto err = co_await check_health(ctx); !err.empty()) throw Fatal(err);
  co_await sleep_for(500ms);
  row.rss_idle_kib = status_field(pid, "VmRSS");
  TurnRun run;
  run.server = pid;
  run.warmup = static_cast<std::size_t>(opt.throughput_warmup);
  run.total = static_cast<std::size_t>(opt.total_turns);
  run.session_turns = opt.session_turns;
  run.lag_on = bench::measures_loop_lag(*server.process);
  if (co_await drive(ctx, run, kind, opt.sessions) && run.open && run.close) {
    if (run.lag_on) row.lag = bench::read_loop_lag(*server.process, 2);
    row.w = window_between(*run.open, *run.close);
    row.p50 = percentile(run.latency_ms, 0.50);
    row.p95 = percentile(run.latency_ms, 0.95);
    row.turns_run = run.ended;
    // The clients have closed; the sessions and their history stay.
    co_await sleep_for(500ms);
    row.rss_after_kib = status_field(pid, "VmRSS");
    row.hwm_kib = status_field(pid, "VmHWM");
    row.completed = true;
    std::cerr << "  " << run.ended << " turns; window " << row.w.turns << " turns in "
              << row.w.seconds << " s; RSS " << row.rss_idle_kib << " -> " << row.rss_after_kib
              << " KiB" << std::endl;
    // The server is still healthy and answers at once.
    if (auto err = co_await check_health(ctx); !err.empty()) problems().add(err);
  }
  stop_server(*server.process, opt.server.patience());
  model.collect_problems();
  row.errors = problems().count - errors_before;
  if (kind == Kind::Read && row.completed && row.errors == 0) {
    results.populated_data = server.setup.data;
    results.populated_turns = run.ended;
    results.populated_sessions = run.sessions;
  }
  results.throughput.push_back(row);
}

asio::awaitable<void> run_history(asio::io_context& io, const Options& opt, RunDirectory& temp,
                                  FakeModel& model, Results& results) {
  std::cerr << "history: " << opt.history_turns << " read turns in one session" << std::endl;
  Server server = start_server(opt, temp, model, "history");
  Ctx ctx = make_ctx(io, opt, model, server);
  TurnRun run;
  run.server = server.process->pid();
  run.warmup = 0;
  run.total = static_cast<std::size_t>(opt.history_turns);
  run.bucket = static_cast<std::size_t>(opt.history_bucket);
  if (co_await drive(ctx, run, Kind::Read, 1) && run.open) {
    Snapshot prev = *run.open;
    for (std::size_t i = 0; i < run.buckets.size(); ++i) {
      const Snapshot& s = run.buckets[i];
      HistoryRow row;
      row.first = prev.turns_done + 1;
      row.last = s.turns_done;
      double turns = static_cast<double>(s.turns_done - prev.turns_done);
      row.server_cpu_ms = static_cast<double>(s.server_ns - prev.server_ns) / 1e6 / turns;
      row.mean_ms = run.bucket_latency_sums[i] / turns;
      row.request_kb = window_between(prev, s).request_kb;
      results.history.push_back(row);
      prev = s;
    }
    results.history_completed = true;
  }
  stop_server(*server.process, opt.server.patience());
  model.collect_problems();
}

// Starts the server `opt.starts` times; each time, from fork() to the first 200 of GET /health,
// polled on a fresh connection every 250 µs (the port is chosen here, so that nothing waits for
// the log).
asio::awaitable<void> run_startup(asio::io_context& io, const Options& opt, RunDirectory& temp,
                                  FakeModel& model, const std::string& label,
                                  const fs::path& data_dir, Results& results) {
  std::cerr << "startup: " << label << ", " << opt.starts << " starts" << std::endl;
  auto errors_before = problems().count;
  StartupRow row{label};
  auto deadline_after = opt.server.patience();
  for (int i = 0; i < opt.starts; ++i) {
    ServerSetup setup = server_setup(opt, temp, "startup", model.port(), data_dir);
    std::optional<double> ms;
    for (int attempt = 0; attempt < 3 && !ms; ++attempt) {
      unsigned short port = 0;
      {
        tcp::acceptor probe(io, tcp::endpoint(asio::ip::make_address_v4("127.0.0.1"), 0));
        port = probe.local_endpoint().port();
      }
      tcp::endpoint ep(asio::ip::make_address_v4("127.0.0.1"), port);
      std::string host = "127.0.0.1:" + std::to_string(port);
      ServerProcess::Options options = setup.options;
      options.port = port;
      options.wait_listening = false;  // timed from the fork
      ServerProcess child(std::move(options));
      auto deadline = child.started() + deadline_after;
      bool gave_up = false;
      for (;;) {
        beast::tcp_stream stream(io.get_executor());
        stream.expires_after(opt.op_timeout);
        auto [ec] = co_await stream.async_connect(ep, tuple_awaitable);
        if (!ec) {
          stream.expires_never();
          beast::flat_buffer buffer;
          auto req = make_request(http::verb::get, "/health", host, "");
          auto r = co_await http_call(stream, buffer, req, opt.op_timeout);
          if (r.error.empty() && r.res.result() == http::status::ok) {
            ms = std::chrono::duration<double, std::milli>(Clock::now() - child.started()).count();
            break;
          }
        }
        if (!child.running()) {
          // Most likely someone else took the port between our probe and the server's bind.
          std::cerr << "  the server exited at start (attempt " << attempt + 1
                    << "); log: " << clip(log_tail(child), 500) << std::endl;
          break;
        }
        if (Clock::now() > deadline) {
          gave_up = true;
          break;
        }
        co_await sleep_for(250us);
      }
      if (gave_up) {
        problems().add(
            "start-up: no healthy answer within " +
            std::to_string(
                std::chrono::duration_cast<std::chrono::seconds>(deadline_after).count()) +
            " s; log:\n" + log_tail(child));
        break;
      }
      if (ms) stop_server(child, opt.server.patience());
    }
    if (ms)
      row.ms.push_back(*ms);
    else if (problems().count == errors_before)
      problems().add("start-up: the server did not start in 3 attempts");
  }
  row.errors = problems().count - errors_before;
  results.startup.push_back(row);
}

// ---- report ---------------------------------------------------------------------------------

std::string kind_label(Kind k) {
  switch (k) {
    case Kind::Read:
      return "server tool (`read`)";
    case Kind::Client:
      return "client tool over WebSocket";
    case Kind::Chat:
      return "app tool through `/api/chat`";
  }
  return "";
}

void print_report(const Options& opt, const Results& r, const std::string& load_before) {
  std::cout << "### agent_turns results\n\n"
            << "- machine: " << std::thread::hardware_concurrency() << " vCPUs, " << cpu_model()
            << ", Linux " << linux_release() << "\n"
            << "- load average before / after the run: " << load_before << " / " << load_average()
            << "\n"
            << "- server: `" << opt.server.path << "`"
            << (opt.server.prefix.empty() ? "" : " under a --server-prefix tool") << "\n"
            << "- sessions change every " << opt.session_turns
            << " turns in the latency and throughput scenarios (0: never)\n\n";

  if (!r.latency.empty()) {
    std::cout
        << "#### One driver, turns one after another\n\n"
        << "| turn | turns | server CPU ms/turn | of which kernel % | p50 ms | p95 ms |"
           " p99 ms | max ms | turns/s | server CPU % | model request KB |"
           " fake model µs/turn | bench µs/turn | other load % | loop lag p50 / p99 / max ms |"
           " errors |\n"
        << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for (const auto& l : r.latency) {
      if (!l.completed) {
        std::cout << "| " << kind_label(l.kind) << " | failed | | | | | | | | | | | | | | "
                  << l.errors << " |\n";
        continue;
      }
      std::cout << "| " << kind_label(l.kind) << " | " << fmt_int(l.w.turns) << " | "
                << fmt(l.w.server_cpu_ms, 3) << " | " << fmt(l.w.server_system * 100, 0) << " | "
                << fmt(l.p50, 2) << " | " << fmt(l.p95, 2) << " | " << fmt(l.p99, 2) << " | "
                << fmt(l.max, 1) << " | " << fmt_int(l.w.turns_per_s) << " | "
                << fmt(l.w.server_util * 100, 0) << " | " << fmt(l.w.request_kb) << " | "
                << fmt_int(l.w.model_cpu_us) << " | " << fmt_int(l.w.bench_cpu_us) << " | "
                << fmt(l.w.other_load * 100, 0) << " | " << lag_cell(l.lag) << " | " << l.errors
                << " |\n";
    }
    std::cout << "\n";
  }
  if (!r.throughput.empty()) {
    std::cout
        << "#### Concurrent sessions (one driver per session), fresh server\n\n"
        << "| turn | sessions | turns run | turns in window | turns/s | server CPU ms/turn |"
           " server CPU % | p50 ms | p95 ms | RSS idle MiB | RSS after MiB | peak RSS MiB |"
           " model request KB | fake model µs/turn | other load % | loop lag p50 / p99 / max ms |"
           " errors |\n"
        << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
           "\n";
    for (const auto& t : r.throughput) {
      if (!t.completed) {
        std::cout << "| " << kind_label(t.kind) << " | " << t.sessions
                  << " | failed | | | | | | | | | | | | | | " << t.errors << " |\n";
        continue;
      }
      std::cout << "| " << kind_label(t.kind) << " | " << t.sessions << " | "
                << fmt_int(t.turns_run) << " | " << fmt_int(t.w.turns) << " | "
                << fmt_int(t.w.turns_per_s) << " | " << fmt(t.w.server_cpu_ms, 3) << " | "
                << fmt(t.w.server_util * 100, 0) << " | " << fmt(t.p50, 2) << " | " << fmt(t.p95, 2)
                << " | " << fmt(mib(t.rss_idle_kib)) << " | " << fmt(mib(t.rss_after_kib)) << " | "
                << fmt(mib(t.hwm_kib)) << " | " << fmt(t.w.request_kb) << " | "
                << fmt_int(t.w.model_cpu_us) << " | " << fmt(t.w.other_load * 100, 0) << " | "
                << lag_cell(t.lag) << " | " << t.errors << " |\n";
    }
    std::cout << "\n";
  }
  if (r.history_completed) {
    std::cout << "#### History: `read` turns in one session that is never changed\n\n"
              << "| turns of the session | server CPU ms/turn | mean turn ms | model request KB |\n"
              << "|---|---:|---:|---:|\n";
    for (const auto& h : r.history)
      std::cout << "| " << h.first << "-" << h.last << " | " << fmt(h.server_cpu_ms, 3) << " | "
                << fmt(h.mean_ms, 2) << " | " << fmt(h.request_kb) << " |\n";
    std::cout << "\n";
  }
  if (!r.startup.empty()) {
    std::cout << "#### Start to first healthy answer (fork() to 200 from GET /health)\n\n"
              << "| data directory | starts | median ms | min ms | max ms | errors |\n"
              << "|---|---:|---:|---:|---:|---:|\n";
    for (const auto& s : r.startup) {
      if (s.ms.empty()) {
        std::cout << "| " << s.data << " | failed | | | | " << s.errors << " |\n";
        continue;
      }
      std::cout << "| " << s.data << " | " << s.ms.size() << " | " << fmt(percentile(s.ms, 0.5), 1)
                << " | " << fmt(percentile(s.ms, 0.0), 1) << " | " << fmt(percentile(s.ms, 1.0), 1)
                << " | " << s.errors << " |\n";
    }
    std::cout << "\n";
  }

  // The targets of issue 3.
  struct Check {
    std::string what;
    double value;
    double limit;
    bool below;
    std::string unit;
  };
  std::vector<Check> checks;
  for (const auto& l : r.latency)
    if (l.completed)
      checks.push_back({"server CPU per turn, " + kind_label(l.kind) + ", one driver",
                        l.w.server_cpu_ms, 0.5, true, "ms"});
  for (const auto& t : r.throughput)
    if (t.completed) {
      std::string at = kind_label(t.kind) + ", " + std::to_string(t.sessions) + " sessions";
      checks.push_back({"server CPU per turn, " + at, t.w.server_cpu_ms, 0.5, true, "ms"});
      checks.push_back({"turns/s, " + at, t.w.turns_per_s, 400, false, "/s"});
      checks.push_back({"RSS after " + fmt_int(static_cast<double>(t.turns_run)) + " turns, " +
                            kind_label(t.kind),
                        mib(t.rss_after_kib), 40, true, "MiB"});
    }
  for (const auto& s : r.startup)
    if (!s.ms.empty())
      checks.push_back({"start to first healthy answer (median), " + s.data, percentile(s.ms, 0.5),
                        50, true, "ms"});
  if (!checks.empty()) {
    std::cout << "#### Targets (issue 3)\n\n"
              << "| target | measured | limit | result |\n"
              << "|---|---:|---:|---|\n";
    for (const auto& c : checks) {
      bool pass = c.below ? c.value < c.limit : c.value > c.limit;
      std::cout << "| " << c.what << " | " << fmt(c.value, c.unit == "ms" ? 2 : 1) << " " << c.unit
                << " | " << (c.below ? "< " : "> ") << fmt(c.limit, c.limit < 1 ? 1 : 0) << " "
                << c.unit << " | " << (pass ? "met" : "**missed**") << " |\n";
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
                              FakeModel& model, Results& results) {
  if (opt.latency)
    for (Kind k : opt.kinds)
      co_await run_latency(io, opt, temp, model, k, results);
  if (opt.throughput)
    for (Kind k : opt.kinds)
      co_await run_throughput(io, opt, temp, model, k, results);
  if (opt.history) co_await run_history(io, opt, temp, model, results);
  if (opt.startup) {
    // Named arguments, not temporaries in the co_await expression (design.md: GCC 12 traps).
    const fs::path fresh_data;
    const std::string empty_label = "empty";
    co_await run_startup(io, opt, temp, model, empty_label, fresh_data, results);
    if (!results.populated_data.empty()) {
      const std::string label = "after " + fmt_int(static_cast<double>(results.populated_turns)) +
                                " turns in " + std::to_string(results.populated_sessions) +
                                " sessions";
      co_await run_startup(io, opt, temp, model, label, results.populated_data, results);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options opt = parse_or_exit("agent_turns", kUsage, [&] { return parse_options(argc, argv); });
  begin_run("agent_turns", opt.max_runtime_s);
  std::string load_before = load_average();

  try {
    require_server(opt.server);
    RunDirectory temp("agent-turns", opt.keep_temp);
    FakeModel model;
    std::cerr << "fake model on http://127.0.0.1:" << model.port() << "/v1" << std::endl;
    Results results;
    asio::io_context io(1);
    std::exception_ptr failure = run_to_end(io, run_all(io, opt, temp, model, results));
    model.collect_problems();
    if (failure) {
      temp.keep();
      problems().add("the run stopped: " + describe(failure));
      print_report(opt, results, load_before);
      leave(1);
    }
    if (problems().count > 0) temp.keep();
    print_report(opt, results, load_before);
    return problems().count == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "agent_turns: " << e.what() << std::endl;
    return 1;
  }
}
