// A stateful black-box fuzzer of the API (issue 15): starts the real `switchboard serve` and runs
// seeded *sequences* of calls with random JSON at every field, reusing what earlier answers gave
// (session, message, request, permission and question ids, client ids and their tokens, tool
// names), with restarts of the server on the same data directory in the middle of a sequence.
// The libFuzzer targets parse one message at a time; this finds what needs two requests, such
// as a session rule accepted by POST /session that crashed the server at the session's first
// prompt.
//
// It asserts after every step that the server is alive, answers GET /health, and has written no
// sanitizer report; that every request got an answer and no answer was a 5xx other than the
// few that are a route's expected outcome (kExecute5xx below); that a SIGTERM ends the server
// with exit code 0. A failure prints the seed, the step and the whole sequence of requests so
// far, with a command that replays it, and writes the sequence unabridged to a file.
//
// Environment: API_FUZZ_SEED (first sequence's seed, default 1; sequence k uses SEED + k),
// API_FUZZ_SECONDS (time budget, default 60), API_FUZZ_SEQUENCES (at most this many),
// API_FUZZ_STEPS (steps per sequence, default 60), API_FUZZ_KEEP_GOING=1 (report every failing
// sequence instead of stopping at the first), API_FUZZ_VERBOSE=1 (print every sequence),
// API_FUZZ_OUT (directory for the transcripts of failures; default the working directory),
// API_FUZZ_BINARY (the server to run; default the one this build made).
// docs/fuzzing.md says how to run it long.
#include <gtest/gtest.h>

#include <boost/url/encode.hpp>
#include <boost/url/rfc/unreserved_chars.hpp>

#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "blackbox_util.hpp"

namespace sb::test {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

// ---- settings -------------------------------------------------------------------------------

struct Settings {
  std::uint64_t seed = 1;
  std::uint64_t sequences = std::numeric_limits<std::uint64_t>::max();
  std::chrono::seconds budget{60};
  int steps = 60;
  bool keep_going = false;
  bool verbose = false;  // print every sequence's transcript
  fs::path out_dir = ".";
  std::optional<fs::path> binary;  // the server to fuzz; default the one this build made
};

std::optional<std::uint64_t> env_number(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  unsigned long long n = std::strtoull(v, &end, 10);
  if (*end) throw std::runtime_error(std::string(name) + " must be a number, got \"" + v + "\"");
  return n;
}

Settings settings_from_env() {
  Settings s;
  if (auto n = env_number("API_FUZZ_SEED")) s.seed = *n;
  if (auto n = env_number("API_FUZZ_SEQUENCES")) s.sequences = *n;
  if (auto n = env_number("API_FUZZ_SECONDS")) s.budget = std::chrono::seconds(*n);
  if (auto n = env_number("API_FUZZ_STEPS")) s.steps = static_cast<int>(*n);
  if (auto n = env_number("API_FUZZ_KEEP_GOING")) s.keep_going = *n != 0;
  if (auto n = env_number("API_FUZZ_VERBOSE")) s.verbose = *n != 0;
  if (const char* d = std::getenv("API_FUZZ_OUT"); d && *d) s.out_dir = d;
  if (const char* b = std::getenv("API_FUZZ_BINARY"); b && *b) s.binary = b;
  return s;
}

// ---- random values --------------------------------------------------------------------------

// The sequence's only source of randomness: the same seed gives the same requests (the ids in
// them are whatever the server answered).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : engine_(seed) {}
  std::size_t below(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(engine_() % n); }
  bool chance(int percent) { return below(100) < static_cast<std::size_t>(percent); }
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[below(v.size())];
  }
  std::string pick(std::initializer_list<std::string_view> v) {
    return std::string(v.begin()[below(v.size())]);
  }

 private:
  std::mt19937_64 engine_;
};

// Strings that break parsers, paths, names and limits. None starts with "/call ", so a prompt
// made of one is echoed by the scripted model, never run.
std::string odd_string(Rng& rng) {
  switch (rng.below(14)) {
    case 0:
      return "";
    case 1:
      return rng.pick({" ", "\t", "\n", "  x  ", "\r\n\r\n"});
    case 2:
      return rng.pick({"\xC3\xA9", "\xE6\x97\xA5\xE6\x9C\xAC", "\xF0\x9F\x98\x80",
                       "\xE2\x80\xAE"
                       "abc",
                       "e\xCC\x81"});
    case 3:
      return std::string("a\0b", 3);
    case 4:
      return rng.pick({"\x01\x02\x7f", "\\", "\"", "'", "%00", "%zz", "&sessionID=x", "#x"});
    case 5:
      return rng.pick({"../../etc/passwd", "/", ".", "..", "*", "**", "?", "[", "{a,b}", "~"});
    case 6:
      return rng.pick({"%s%n%x", "${HOME}", "$(id)", "`id`", "' OR 1=1 --", "<script>x</script>",
                       "null", "true", "0", "-1", "1e999", "NaN"});
    case 7:
      return std::string(128, 'n');  // the longest valid name
    case 8:
      return std::string(129, 'n');  // one longer
    case 9:
      return std::string(1 + rng.below(4096), 'x');
    case 10:
      return std::string(rng.chance(50) ? 70000 : 20000, 'y');  // large, under every body limit
    case 11:
      return "\xff\xfe";  // not UTF-8: refused with the whole body
    case 12: {
      std::string s(1 + rng.below(40), ' ');
      for (char& c : s)
        c = static_cast<char>(' ' + rng.below(95));
      return s;
    }
    default:
      return rng.pick({"x", "test", "hello world", "build", "plan", "default", "scripted"});
  }
}

json::value any_number(Rng& rng) {
  switch (rng.below(10)) {
    case 0:
      return std::numeric_limits<std::int64_t>::max();
    case 1:
      return std::numeric_limits<std::int64_t>::min();
    case 2:
      return std::numeric_limits<std::uint64_t>::max();
    case 3:
      return 1e19;  // no integer type holds it
    case 4:
      return -0.0;
    case 5:
      return 0.5;
    case 6:
      return 1e308;
    default:
      return static_cast<std::int64_t>(rng.below(7)) - 2;
  }
}

// Arrays nested `depth` deep: around server.maxJsonDepth (64) they are refused.
json::value nested(std::size_t depth) {
  json::value v = json::array{};
  for (std::size_t i = 1; i < depth; ++i)
    v = json::array{std::move(v)};
  return v;
}

const std::vector<std::string_view> kFieldNames = {
    "sessionID", "clientID", "requestID", "messageID", "callID",   "tool",  "toolID",  "input",
    "timeout",   "status",   "output",    "error",     "metadata", "title", "parts",   "type",
    "text",      "model",    "agent",     "tools",     "id",       "reply", "answers", "result"};

// Any JSON value. `strings` false: no strings anywhere (for the input of a tool that acts on the
// machine: a wrong-kind value is refused by the tool's schema, a string might be run).
json::value any_value(Rng& rng, int depth, bool strings) {
  switch (rng.below(depth > 2 ? 5 : 8)) {
    case 0:
      return nullptr;
    case 1:
      return rng.chance(50);
    case 2:
      return any_number(rng);
    case 3:
    case 4:
      return strings ? json::value(odd_string(rng)) : any_number(rng);
    case 5: {
      json::array a;
      for (std::size_t i = rng.below(4); i > 0; --i)
        a.push_back(any_value(rng, depth + 1, strings));
      return a;
    }
    case 6: {
      json::object o;
      for (std::size_t i = rng.below(4); i > 0; --i)
        o[rng.chance(70) ? std::string(rng.pick(kFieldNames)) : odd_string(rng)] =
            any_value(rng, depth + 1, strings);
      return o;
    }
    default:
      return nested(60 + rng.below(10));
  }
}

// Percent-encodes everything but unreserved characters, for a path segment or a query value.
std::string pct(std::string_view s) {
  return boost::urls::encode(s, boost::urls::unreserved_chars);
}

std::string clip(std::string_view s, std::size_t max) {
  if (s.size() <= max) return std::string(s);
  return std::string(s.substr(0, max)) + "...(" + std::to_string(s.size()) + " bytes)";
}

// ---- what the sequence has learnt -------------------------------------------------------------

// Values from earlier answers, for later requests: where crashes hide.
struct Pools {
  std::vector<std::string> sessions, messages, parts, calls, permissions, questions, requests;
  std::vector<std::string> clients{"fz1", "fz2", "fz3"};
  std::map<std::string, std::string> tokens;                    // clientID -> token
  std::vector<std::pair<std::string, std::string>> tools;       // (clientID, name)
  std::vector<std::pair<std::string, std::string>> deliveries;  // (requestID, clientID)
  std::vector<std::string> accepted;                            // strings of accepted bodies
  std::map<std::string, json::array> asked_questions;           // question id -> questions

  static constexpr std::size_t kCap = 48;
  template <class T>
  static void add(std::vector<T>& pool, T value) {
    if (std::find(pool.begin(), pool.end(), value) != pool.end()) return;
    if (pool.size() >= kCap) pool.erase(pool.begin());
    pool.push_back(std::move(value));
  }

  // Every id in an answer or event, by its prefix.
  void harvest(const json::value& v) {
    if (v.is_string()) {
      std::string_view s = v.get_string();
      if (s.size() > 200) return;
      for (auto [prefix, pool] :
           {std::pair{"ses_", &sessions}, std::pair{"msg_", &messages}, std::pair{"prt_", &parts},
            std::pair{"call_", &calls}, std::pair{"per_", &permissions},
            std::pair{"que_", &questions}, std::pair{"req_", &requests}})
        if (s.starts_with(prefix)) add(*pool, std::string(s));
    } else if (v.is_array()) {
      for (const auto& e : v.get_array())
        harvest(e);
    } else if (v.is_object()) {
      const auto& o = v.get_object();
      // A question as GET /question lists it or question.asked carries it: its options make
      // answers that fit.
      if (auto id = o.if_contains("id"), qs = o.if_contains("questions");
          id && qs && id->is_string() && qs->is_array())
        asked_questions[std::string(id->get_string())] = qs->get_array();
      for (const auto& kv : o)
        harvest(kv.value());
    }
  }

  void remember_accepted(const json::value& v) {
    if (v.is_string() && !v.get_string().empty() && v.get_string().size() <= 256) {
      add(accepted, std::string(v.get_string()));
    } else if (v.is_array()) {
      for (const auto& e : v.get_array())
        remember_accepted(e);
    } else if (v.is_object()) {
      for (const auto& kv : v.get_object())
        remember_accepted(kv.value());
    }
  }
};

// ---- the transcript ---------------------------------------------------------------------------

struct Exchange {
  int step = 0;
  std::string what;  // "POST /session", "WS> /client-tools/ws/fz1", "restart (SIGKILL)"
  std::string body;
  std::string outcome;  // "200 {...}", "no answer: ...", "(in flight)"
};

std::string render(const std::vector<Exchange>& exchanges, std::size_t max_body) {
  std::string out;
  for (const auto& e : exchanges) {
    out += "  #" + std::to_string(e.step) + " " + e.what;
    if (!e.body.empty()) out += " " + clip(e.body, max_body);
    if (!e.outcome.empty()) out += "\n      -> " + clip(e.outcome, max_body);
    out += "\n";
  }
  return out;
}

// ---- requests -------------------------------------------------------------------------------

// 5xx answers that are a route's expected outcome, not a fault. Only POST /client-tools/execute
// waits for someone outside the server: 503 (UNAVAILABLE) when the call ends without a result
// because its client disconnected, its tool was unregistered or the caller left, 504 (TIMEOUT)
// when no result came within its timeout (no client connected, or one that does not answer).
// Every other route answers from the server's own state, so any 5xx there is a defect. A
// request in flight when the fuzzer restarts the server may also get 503 ("shutting down") or
// no answer at all (see Sequence::judge).
const std::vector<unsigned> kExecute5xx = {503, 504};

struct Call {
  std::string method;
  std::string target;
  std::string body;  // "" sends none
  Headers headers;
  std::vector<unsigned> expected_5xx;
  milliseconds timeout{15000};
  std::string client_id;          // whose token a 200 may carry
  std::string chat;               // a chat's UI message stream: the chat it is of
  std::string stop;               // a DELETE target that ends the turn the request waits for
  std::vector<unsigned> allowed;  // when not empty: the only statuses it may get
};

// What the AI SDK's chat routes may answer: a stream or nothing to resume, a request refused
// (malformed, a client's token, a chat of another client, an unknown chat, one answering now, a
// body over the limit, the rate limit). Never a 5xx: every one answers from the server's state.
const std::vector<unsigned> kChatStatuses = {200, 204, 400, 401, 403, 404, 409, 413, 429};

// The chunks of a UI message stream (the `data:` lines of an event stream), as JSON; `done`
// tells whether it ended with `data: [DONE]`.
std::vector<json::value> ui_chunks(std::string_view body, bool* done = nullptr) {
  std::vector<json::value> chunks;
  if (done) *done = false;
  std::size_t at = 0;
  while (at < body.size()) {
    std::size_t end = body.find('\n', at);
    if (end == std::string_view::npos) break;  // a line not complete yet
    std::string_view line = body.substr(at, end - at);
    at = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.starts_with("data: ")) continue;
    line.remove_prefix(6);
    if (done) *done = line == "[DONE]";
    boost::system::error_code ec;
    json::value v = json::parse(line, ec);
    if (!ec) chunks.push_back(std::move(v));
  }
  return chunks;
}

struct Answer {
  std::optional<HttpResponse> response;
  std::string error;  // when no response
};

Answer perform(unsigned short port, const Call& call) {
  try {
    return {http_request(port, call.method, call.target, call.body, call.headers, call.timeout),
            {}};
  } catch (const std::exception& e) {
    return {std::nullopt, e.what()};
  }
}

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The built-in tools a prompt makes the model call; those that ask (bash when configured so, a
// path outside the project, a question) more often, for the permission and question flows.
const std::vector<std::string_view> kBuiltinTools = {
    "bash", "bash", "bash", "read",     "read",      "question", "question", "write", "edit",
    "list", "glob", "grep", "todoread", "todowrite", "task",     "webfetch", "batch", "invalid"};

// Tools whose input may act on the machine: their inputs come from fixed safe values, and a
// mutation puts no strings in them.
bool acts_on_machine(std::string_view tool) {
  for (std::string_view t :
       {"bash", "read", "write", "edit", "list", "glob", "grep", "webfetch", "batch", "task"})
    if (tool == t) return true;
  return false;
}

// ---- one sequence -----------------------------------------------------------------------------

// What the fuzzer knows of a chat from its latest response: what it left to the app.
struct ChatState {
  std::vector<std::pair<std::string, std::string>> calls;      // (toolCallId, toolName)
  std::vector<std::pair<std::string, std::string>> approvals;  // (approvalId, toolCallId)
  std::vector<std::string> earlier_calls;                      // every call seen (stale ids)
};

// A frame sent on a chat WebSocket, as the server reads it.
struct ChatFrame {
  std::string request_id;           // what the server answers with: "" when it cannot read one
  std::optional<std::string> type;  // none when it has none, or not a string
  std::string chat;                 // its id: the chat a send or resume names
};

class Sequence {
 public:
  Sequence(std::uint64_t seed, const Settings& settings, Clock::time_point deadline)
      : seed_(seed), settings_(settings), deadline_(deadline), rng_(seed) {}

  // Runs the sequence; nullopt when it passed, the report of the failure otherwise.
  std::optional<std::string> run() {
    try {
      config_ = make_config();
      write_file(project_.path() / "a.txt", "hi there\nsecond line\n");
      write_file(project_.path() / "sub" / "b.txt", "bee\n");
      start_server();
      started_ = true;
      for (step_ = 1; step_ <= steps_ && Clock::now() < deadline_; ++step_) {
        one_step();
        after_step();
      }
      step_ = std::min(step_, steps_);
      finish();
      return std::nullopt;
    } catch (const std::exception& e) {
      return report(e.what());
    }
  }
  int steps_done() const { return step_; }
  // What the sequence sent and got, each body and answer cut at `max_body` bytes.
  std::string transcript(std::size_t max_body) const { return render(transcript_, max_body); }
  // Whether the failure was the server's first start: nothing else will start either.
  bool failed_to_start() const { return !started_; }

 private:
  // ---- the server ----

  json::object make_config() {
    // Sometimes a body limit that a large chat message passes (413).
    json::object server;
    if (rng_.chance(30)) server["maxBodyBytes"] = 200000;
    json::object cfg = test_config(json::object{{"defaultTimeout", 1500},
                                                {"maxTimeout", 3000},
                                                {"reconnectGrace", rng_.chance(50) ? 0 : 1000},
                                                {"rateLimit", rng_.chance(80) ? 0 : 30},
                                                {"maxPendingPerClient", rng_.chance(80) ? 64 : 3},
                                                {"clientTokens", rng_.chance(30)}},
                                   server);
    json::object permission{{"timeout", 1500}};  // a headless run: asks end
    if (rng_.chance(50)) permission["bash"] = "ask";
    cfg["permission"] = permission;
    if (rng_.chance(30)) cfg["experimental"] = json::object{{"batch_tool", true}};
    return cfg;
  }

  void start_server() {
    ServerProcess::Options options{config_, {}, milliseconds(30000), data_.path(), project_.path()};
    options.binary = settings_.binary;
    server_.emplace(std::move(options));
    log_checked_ = 0;
    events_.reset();
    open_events();
  }

  void open_events() {
    try {
      events_ = std::make_unique<SseClient>(server_->port(), "/event");
    } catch (const std::exception& e) {
      ensure_alive("while opening /event", 2000ms);
      throw Failure(std::string("GET /event failed: ") + e.what());
    }
  }

  unsigned short port() const { return server_->port(); }

  // Throws when the server process has ended, or ends within `grace` (a request that got no
  // answer is usually a server on its way down).
  void ensure_alive(const std::string& when, milliseconds grace = 0ms) {
    auto status = server_->wait_exit(grace);
    if (!status) return;
    throw Failure("the server died " + when + " (" + status->describe() + ")");
  }

  void check_log() {
    std::string log = server_->log();
    std::size_t from = log_checked_ > 64 ? log_checked_ - 64 : 0;
    for (const char* report :
         {"AddressSanitizer", "LeakSanitizer", "ThreadSanitizer", "runtime error:"})
      if (log.find(report, from) != std::string::npos)
        throw Failure(std::string("the server's log has a ") + report + " report");
    log_checked_ = log.size();
  }

  // SIGTERM must end the server cleanly (exit code 0: no leak report, no crash on the way out).
  void stop_server(bool kill) {
    for (auto& f : in_flight_)
      f.interrupted = true;
    sockets_.clear();
    streams_.clear();
    close_chat_ws();
    events_.reset();
    server_->send_signal(kill ? SIGKILL : SIGTERM);
    auto status = server_->wait_exit(20000ms);
    if (!kill && !(status && status->exited && status->code == 0))
      throw Failure("the server did not stop cleanly on SIGTERM: " +
                    (status ? status->describe() : std::string("still running 20 s later")));
    if (!kill) check_log();
    earlier_logs_ += server_->log() + "--- (server stopped) ---\n";
    collect(true);
  }

  void restart() {
    bool kill = rng_.chance(40);
    record("restart (" + std::string(kill ? "SIGKILL" : "SIGTERM") + ")", "", "");
    stop_server(kill);
    start_server();
  }

  // ---- requests ----

  std::size_t record(std::string what, std::string body, std::string outcome) {
    transcript_.push_back({step_, std::move(what), std::move(body), std::move(outcome)});
    return transcript_.size() - 1;
  }

  static std::string describe(const Answer& a) {
    if (!a.response) return "no answer: " + a.error;
    return std::to_string(a.response->status) + " " + a.response->body;
  }

  // Checks one answer and learns from it. `interrupted`: a restart happened while it waited.
  void judge(const Call& call, const Answer& a, bool interrupted) {
    std::string what = call.method + " " + clip(call.target, 200);
    if (!a.response) {
      if (interrupted) return;
      ensure_alive("while answering " + what, 2000ms);
      throw Failure("no answer to " + what + ": " + a.error);
    }
    unsigned status = a.response->status;
    if (status >= 500) {
      bool expected = std::find(call.expected_5xx.begin(), call.expected_5xx.end(), status) !=
                          call.expected_5xx.end() ||
                      (interrupted && status == 503);
      if (!expected)
        throw Failure(std::to_string(status) + " from " + what + ": " +
                      clip(a.response->body, 2000));
    }
    if (!call.allowed.empty() &&
        std::find(call.allowed.begin(), call.allowed.end(), status) == call.allowed.end() &&
        !(interrupted && status == 503))
      throw Failure("an unexpected " + std::to_string(status) + " from " + what + ": " +
                    clip(a.response->body, 2000));
    if (!call.chat.empty() && status == 200) {
      // A UI message stream read to its end: the server ends every one with [DONE], unless a
      // restart cut it.
      bool done = false;
      learn_chat(call.chat, ui_chunks(a.response->body, &done));
      if (!done && !interrupted)
        throw Failure("the UI message stream of " + what +
                      " ended without data: [DONE]: " + clip(a.response->body, 2000));
      return;
    }
    boost::system::error_code ec;
    json::value answer = json::parse(a.response->body, ec);
    if (ec) return;
    pools_.harvest(answer);
    if (status / 100 != 2) return;
    if (const json::value* token = find(answer, "/clientToken");
        token && token->is_string() && !call.client_id.empty())
      pools_.tokens[call.client_id] = std::string(token->get_string());
    if (!call.client_id.empty()) Pools::add(pools_.clients, call.client_id);
    json::value sent = json::parse(call.body, ec);
    if (!ec) pools_.remember_accepted(sent);
  }

  Answer send(Call call) {
    std::size_t entry = record(call.method + " " + call.target, call.body, "");
    Answer a = perform(port(), call);
    transcript_[entry].outcome = describe(a);
    judge(call, a, false);
    return a;
  }

  // "/session/ID/abort" for a target under "/session/ID/", else "".
  static std::string abort_target(const std::string& target) {
    constexpr std::string_view prefix = "/session/";
    if (!target.starts_with(prefix)) return "";
    auto end = target.find('/', prefix.size());
    return end == std::string::npos ? "" : target.substr(0, end) + "/abort";
  }

  // The request that ends the turn `call` waits for: its chat's stop, or its session's abort.
  static std::optional<Call> stopper(const Call& call) {
    if (!call.stop.empty())
      return Call{"DELETE", call.stop, "", {}, {}, 15000ms, {}, {}, {}, kChatStatuses};
    if (auto abort = abort_target(call.target); !abort.empty()) return Call{"POST", abort, "{}"};
    return std::nullopt;
  }

  // Starts a request that may wait long (a prompt, an execution) on its own thread.
  void launch(Call call) {
    collect(false);
    if (in_flight_.size() >= 6) {
      // The oldest may be a turn waiting for a person's answer: end it rather than wait.
      if (auto stop = stopper(in_flight_.front().call)) send(*stop);
      in_flight_.front().answer.wait();
      collect(false);
    }
    std::size_t entry = record(call.method + " " + call.target, call.body, "(in flight)");
    auto answer =
        std::async(std::launch::async, [port = port(), call] { return perform(port, call); });
    in_flight_.push_back({entry, std::move(call), std::move(answer), false});
  }

  // Judges the requests in flight that have finished (all of them, waiting, with `wait`).
  void collect(bool wait) {
    for (auto it = in_flight_.begin(); it != in_flight_.end();) {
      if (!wait && it->answer.wait_for(0ms) != std::future_status::ready) {
        ++it;
        continue;
      }
      Answer a = it->answer.get();
      InFlight done = std::move(*it);
      it = in_flight_.erase(it);
      transcript_[done.entry].outcome = describe(a) + " (at step " + std::to_string(step_) + ")";
      judge(done.call, a, done.interrupted);
    }
  }

  Headers token_for(const std::string& client_id) {
    auto it = pools_.tokens.find(client_id);
    if (it == pools_.tokens.end()) return {};
    if (rng_.chance(8)) return {{"X-Switchboard-Client-Token", "forged"}};
    return {{"X-Switchboard-Client-Token", it->second}};
  }

  std::string token_query(const std::string& client_id) {
    auto it = pools_.tokens.find(client_id);
    return it == pools_.tokens.end() ? "" : "?clientToken=" + pct(it->second);
  }

  // ---- values ----

  // An id: mostly one the server gave, sometimes a near miss or junk.
  std::string id_from(const std::vector<std::string>& pool, std::string_view prefix) {
    std::size_t roll = rng_.below(100);
    if (!pool.empty() && roll < 85) return rng_.pick(pool);
    if (!pool.empty() && roll < 92) {
      std::string id = rng_.pick(pool);
      id.back() = id.back() == 'A' ? 'B' : 'A';  // the same shape, nobody's
      return id;
    }
    if (roll < 96) return std::string(prefix) + "01FUZZ" + std::to_string(rng_.below(1000));
    return clip(odd_string(rng_), 2000);  // paths stay under server.maxHeaderBytes
  }
  std::string session_id() { return id_from(pools_.sessions, "ses_"); }
  std::string client_id() {
    if (rng_.chance(85)) return rng_.pick(pools_.clients);
    if (rng_.chance(60)) return "fz" + std::to_string(4 + rng_.below(6));
    return clip(odd_string(rng_), 2000);  // it goes into paths too
  }
  std::string any_id() {
    switch (rng_.below(6)) {
      case 0:
        return session_id();
      case 1:
        return id_from(pools_.messages, "msg_");
      case 2:
        return id_from(pools_.calls, "call_");
      case 3:
        return id_from(pools_.permissions, "per_");
      case 4:
        return id_from(pools_.questions, "que_");
      default:
        return id_from(pools_.requests, "req_");
    }
  }
  std::string text() {
    if (!pools_.accepted.empty() && rng_.chance(30)) return rng_.pick(pools_.accepted);
    return rng_.chance(50) ? rng_.pick({"hi", "hello", "a title", "x"}) : odd_string(rng_);
  }

  // ---- mutation: a valid-shaped body with one thing wrong finds what a random one does not ----

  struct Slot {
    json::value* value;
    json::object* object = nullptr;  // holds it under `key`
    std::string key;
    json::array* array = nullptr;  // holds it at `index`
    std::size_t index = 0;
  };

  static void slots_of(json::value& v, std::vector<Slot>& out) {
    if (v.is_object()) {
      for (auto& kv : v.get_object()) {
        out.push_back({&kv.value(), &v.get_object(), std::string(kv.key())});
        slots_of(kv.value(), out);
      }
    } else if (v.is_array()) {
      auto& a = v.get_array();
      for (std::size_t i = 0; i < a.size(); ++i) {
        out.push_back({&a[i], nullptr, {}, &a, i});
        slots_of(a[i], out);
      }
    }
  }

  json::value replacement(bool strings) {
    switch (rng_.below(4)) {
      case 0:
        return any_value(rng_, 1, strings);
      case 1:
        return strings ? json::value(odd_string(rng_)) : any_number(rng_);
      case 2:
        return strings ? json::value(any_id()) : json::value(nullptr);
      default:
        return any_number(rng_);
    }
  }

  // Changes one place of `doc`: removes it, gives it a value of another kind or a junk one, or
  // adds a field or an element beside it.
  void mutate(json::value& doc, bool strings) {
    std::vector<Slot> slots;
    slots_of(doc, slots);
    if (slots.empty()) {
      if (doc.is_object())
        doc.get_object()[std::string(rng_.pick(kFieldNames))] = replacement(strings);
      return;
    }
    Slot s = rng_.pick(slots);
    switch (rng_.below(5)) {
      case 0:
        if (s.object) s.object->erase(s.key);
        if (s.array) s.array->erase(s.array->begin() + static_cast<std::ptrdiff_t>(s.index));
        return;
      case 1:
        if (s.value->is_object()) {
          s.value->get_object()[rng_.chance(70) ? std::string(rng_.pick(kFieldNames)) : "unknown"] =
              replacement(strings);
          return;
        }
        if (s.value->is_array()) {
          json::array& a = s.value->get_array();
          json::value element = rng_.chance(50) && !a.empty() ? a.front() : replacement(strings);
          a.push_back(std::move(element));  // a copy: push_back may move the array's elements
          return;
        }
        [[fallthrough]];
      default:
        *s.value = replacement(strings);
    }
  }

  // A body as sent: usually `valid`, often with one place changed, now and then worse.
  std::string body_text(json::value valid) {
    std::size_t roll = rng_.below(100);
    if (roll < 65) return json::serialize(valid);
    if (roll < 93) {
      mutate(valid, true);
      return json::serialize(valid);
    }
    if (roll < 97) {
      for (std::size_t i = 2 + rng_.below(3); i > 0; --i)
        mutate(valid, true);
      return json::serialize(valid);
    }
    if (rng_.chance(50)) return json::serialize(any_value(rng_, 0, true));
    return rng_.pick({"{", "[1,2", "nul", "{\"a\":}", "\"", "{}{}", " "});
  }

  // ---- tool inputs ----

  // The input of a built-in tool: values that are safe to run here (commands, paths inside the
  // project, local URLs), then perhaps one place changed to a value of another kind.
  json::object builtin_input(std::string_view tool) {
    json::object in;
    if (tool == "bash") {
      in = {{"command", rng_.pick({"echo hi", "true", "false", "ls", "pwd", "sleep 0.3",
                                   "echo err >&2; exit 3", "seq 1 3000", "cat a.txt",
                                   "head -c 60000 /dev/zero | tr '\\0' a"})},
            {"description", "fuzz"}};
      if (rng_.chance(20)) in["timeout"] = rng_.chance(50) ? json::value(200) : any_number(rng_);
      if (rng_.chance(15)) in["workdir"] = rng_.pick({".", "sub", "missing", "a.txt"});
    } else if (tool == "read") {
      in = {{"filePath", rng_.pick({"a.txt", "sub/b.txt", "missing.txt", "sub", "/etc/hostname",
                                    "/etc/hostname"})}};
      if (rng_.chance(20)) in["offset"] = any_number(rng_);
      if (rng_.chance(20)) in["limit"] = any_number(rng_);
    } else if (tool == "write") {
      in = {{"filePath", rng_.pick({"a.txt", "new.txt", "sub/c.txt", "sub"})},
            {"content", clip(text(), 3000)}};
    } else if (tool == "edit") {
      in = {{"filePath", rng_.pick({"a.txt", "sub/b.txt", "missing.txt"})},
            {"oldString", rng_.pick({"hi", "bee", "", "nothing like it"})},
            {"newString", clip(text(), 3000)}};
      if (rng_.chance(30)) in["replaceAll"] = rng_.chance(50);
    } else if (tool == "list") {
      if (rng_.chance(60)) in["path"] = rng_.pick({".", "sub", "missing", "/etc"});
      if (rng_.chance(30)) in["ignore"] = json::array{"*.txt"};
    } else if (tool == "glob") {
      in = {{"pattern", rng_.pick({"*", "**/*.txt", "*.{c,h}", "[", "sub/*"})}};
      if (rng_.chance(30)) in["path"] = rng_.pick({".", "sub"});
    } else if (tool == "grep") {
      in = {{"pattern", rng_.pick({"hi", "(", ".*", "b+e", "a{1000}"})}};
      if (rng_.chance(30)) in["path"] = rng_.pick({".", "a.txt", "sub"});
      if (rng_.chance(30)) in["include"] = "*.txt";
    } else if (tool == "webfetch") {
      in = {{"url", rng_.pick({"http://127.0.0.1:1/", "not a url", "ftp://127.0.0.1/x",
                               "file:///etc/hostname"})}};
      if (rng_.chance(30))
        in["url"] = "http://127.0.0.1:" + std::to_string(port()) +
                    rng_.pick({"/health", "/session", "/nope"});
      if (rng_.chance(30)) in["format"] = rng_.pick({"text", "markdown", "html", "pdf"});
    } else if (tool == "todowrite") {
      json::array todos;
      for (std::size_t i = rng_.below(3); i > 0; --i)
        todos.push_back(json::object{
            {"content", text()},
            {"status", rng_.pick({"pending", "in_progress", "completed", "cancelled"})},
            {"priority", rng_.pick({"high", "medium", "low"})},
            {"id", std::to_string(rng_.below(3))}});
      in = {{"todos", todos}};
    } else if (tool == "question") {
      json::array questions;
      for (std::size_t i = 1 + rng_.below(2); i > 0; --i)
        questions.push_back(json::object{
            {"question", text()},
            {"options", json::array{json::object{{"label", "yes"}}, json::object{{"label", "no"}}}},
            {"multiple", rng_.chance(30)}});
      in = {{"questions", questions}};
    } else if (tool == "task") {
      in = {
          {"description", "fuzz task"},
          {"prompt",
           rng_.pick(
               {"hi", "/call todoread {}",
                R"(/call bash {"command": "echo hi", "description": "d"})",
                R"(/call read {"filePath": "/etc/hostname"})",
                R"(/call question {"questions": [{"question": "Q?", "options": [{"label": "yes"}]}]})",
                R"(/call client_fz1_t1 {"text": "x"})"})},
          {"subagent_type", rng_.pick({"plan", "build", "general", "nope"})}};
    } else if (tool == "batch") {
      json::array calls;
      for (std::size_t i = 1 + rng_.below(3); i > 0; --i) {
        std::string inner = rng_.pick({"read", "glob", "todoread", "bash", "batch", "nope"});
        calls.push_back(json::object{{"tool", inner}, {"parameters", builtin_input(inner)}});
      }
      in = {{"tool_calls", calls}};
    } else if (tool == "invalid") {
      in = {{"tool", "x"}, {"error", "y"}};
    }
    json::value v = std::move(in);
    if (rng_.chance(40)) mutate(v, !acts_on_machine(tool));
    return v.is_object() ? v.get_object() : json::object{};
  }

  json::value client_tool_input() {
    switch (rng_.below(4)) {
      case 0:
        return json::object{{"text", text()}};
      case 1:
        return json::object{{"n", any_number(rng_)}};
      case 2:
        return json::object{};
      default:
        return any_value(rng_, 1, true);
    }
  }

  // A registered tool (client, name), mostly of a client connected now: its calls reach it.
  std::optional<std::pair<std::string, std::string>> registered_tool() {
    if (pools_.tools.empty()) return std::nullopt;
    std::vector<std::pair<std::string, std::string>> connected;
    for (const auto& t : pools_.tools)
      if (sockets_.count(t.first) || streams_.count(t.first)) connected.push_back(t);
    return !connected.empty() && rng_.chance(80) ? rng_.pick(connected) : rng_.pick(pools_.tools);
  }

  std::string client_tool_name() {
    if (auto tool = registered_tool(); tool && rng_.chance(85))
      return "client_" + tool->first + "_" + tool->second;
    return "client_" + client_id() + "_" + rng_.pick({"t1", "t2", "nope"});
  }

  // The text of a prompt: "/call TOOL {json}" makes the scripted model call TOOL.
  std::string prompt_text() {
    std::size_t roll = rng_.below(100);
    if (roll < 20) return text();
    if (roll < 45)
      return "/call " + client_tool_name() + " " + json::serialize(client_tool_input());
    if (roll < 93) {
      std::string tool(rng_.pick(kBuiltinTools));
      return "/call " + tool + " " + json::serialize(builtin_input(tool));
    }
    return rng_.pick({"/call", "/call ", "/call nope {}", "/call read {not json", "/call bash [1]",
                      "/call  {}"});
  }

  json::value prompt_body() {
    json::array parts{json::object{{"type", "text"}, {"text", prompt_text()}}};
    if (rng_.chance(10)) parts.push_back(json::object{{"type", "text"}, {"text", text()}});
    json::object body{{"parts", parts}};
    if (rng_.chance(20))
      body["model"] =
          rng_.chance(50)
              ? json::value("scripted/default")
              : json::value(json::object{{"providerID", "scripted"}, {"modelID", "default"}});
    if (rng_.chance(20)) body["agent"] = rng_.pick({"build", "plan"});
    if (rng_.chance(15))
      body["tools"] = json::object{{std::string(rng_.pick(kBuiltinTools)), rng_.chance(50)}};
    return body;
  }

  json::value tool_schema() {
    switch (rng_.below(10)) {
      case 0:
        return text_schema();
      case 1:
        return json::object{{"type", "object"}};
      case 2:
        return json::parse(
            R"({"type":"object","properties":{"n":{"type":"integer","minimum":0,"maximum":10}},"required":["n"]})");
      case 3:
        return json::parse(
            R"({"type":"object","properties":{"text":{"type":"string","pattern":"^[a-z]+$","maxLength":5}}})");
      case 4:
        return json::parse(
            R"({"type":"object","properties":{"e":{"enum":["a",1,null]}},"additionalProperties":false})");
      case 5:
        return json::parse(R"({"type":"object","properties":{"t":{"$ref":"#"}}})");
      case 6:
        return json::parse(R"({"type":"string"})");
      case 7:
        return json::parse(
            R"({"type":"object","properties":{"d":{"type":"string","format":"date-time"}}})");
      case 8:
        return json::parse(rng_.chance(50) ? R"({"type":"object","multipleOf":0})"
                                           : R"({"type":"object","allOf":[{"$ref":"#"}]})");
      default:
        return any_value(rng_, 1, true);
    }
  }

  json::array tool_specs() {
    json::array tools;
    for (std::size_t i = rng_.below(3) + (rng_.chance(90) ? 1 : 0); i > 0; --i) {
      json::object t{{"id", rng_.pick({"t1", "t2", "echo", "slow", "t1"})}};
      if (rng_.chance(70)) t["description"] = text();
      if (rng_.chance(80)) t["parameters"] = tool_schema();
      if (rng_.chance(15)) t["interactive"] = true;
      tools.push_back(std::move(t));
    }
    return tools;
  }

  // The ids a registration answered ("registered" over HTTP, "toolIDs" over the WebSocket):
  // their names go into the pool.
  void remember_tools(const std::string& client, const json::value* ids) {
    if (!ids || !ids->is_array()) return;
    std::string prefix = "client_" + client + "_";
    for (const auto& id : ids->get_array())
      if (id.is_string() && id.get_string().starts_with(prefix))
        Pools::add(pools_.tools, {client, std::string(id.get_string().subview(prefix.size()))});
  }

  json::object result_fields() {
    json::object r;
    if (rng_.chance(80)) {
      r["status"] = "success";
      if (rng_.chance(80)) r["output"] = text();
      if (rng_.chance(30)) r["title"] = text();
      if (rng_.chance(30)) r["metadata"] = json::object{{"k", any_value(rng_, 1, true)}};
      if (rng_.chance(30)) r["attachments"] = json::array{any_value(rng_, 1, true)};
    } else {
      r["status"] = "error";
      if (rng_.chance(70)) r["error"] = text();
    }
    return r;
  }

  // A request delivered to one of our clients (mostly) or a forged one: (requestID, clientID).
  std::pair<std::string, std::string> request_to_answer() {
    if (!pools_.deliveries.empty() && rng_.chance(75)) {
      // The newest deliveries are the ones still waiting.
      std::size_t n = pools_.deliveries.size();
      return pools_.deliveries[n - 1 - rng_.below(std::min<std::size_t>(n, 4))];
    }
    return {id_from(pools_.requests, "req_"), client_id()};
  }

  // ---- the steps ----

  void one_step() {
    static const std::vector<std::pair<int, void (Sequence::*)()>> kSteps = {
        {12, &Sequence::create_session},
        {12, &Sequence::prompt},
        {10, &Sequence::prompt_async},
        {4, &Sequence::list_tools},
        {5, &Sequence::read_sessions},
        {8, &Sequence::register_tools},
        {2, &Sequence::unregister_tools},
        {7, &Sequence::execute},
        {7, &Sequence::answer_request},
        {3, &Sequence::report_progress},
        {6, &Sequence::answer_permission},
        {4, &Sequence::answer_question},
        {3, &Sequence::abort_session},
        {4, &Sequence::history_operation},
        {2, &Sequence::delete_session},
        {3, &Sequence::open_websocket},
        {6, &Sequence::send_websocket},
        {1, &Sequence::open_pending_stream},
        {3, &Sequence::wait},
        {2, &Sequence::restart},
        {2, &Sequence::other_get},
        {8, &Sequence::chat_post},
        {3, &Sequence::chat_resume},
        {3, &Sequence::chat_stop},
        {3, &Sequence::chat_websocket}};
    static const int total = [] {
      int t = 0;
      for (const auto& s : kSteps)
        t += s.first;
      return t;
    }();
    if (pools_.sessions.empty() && rng_.chance(60)) return create_session();
    int roll = static_cast<int>(rng_.below(static_cast<std::size_t>(total)));
    for (const auto& [weight, action] : kSteps) {
      if (roll < weight) return (this->*action)();
      roll -= weight;
    }
  }

  void create_session() {
    if (rng_.chance(5)) {
      send({"POST", "/session"});
      return;
    }
    json::object body;
    if (rng_.chance(60)) body["title"] = text();
    if (rng_.chance(60)) {
      json::array rules;
      for (std::size_t i = 1 + rng_.below(3); i > 0; --i)
        rules.push_back(
            json::object{{"permission",
                          rng_.pick({"*", "bash", "edit", "read", "external_directory", "doom_loop",
                                     "client_tools", "question", "task", "webfetch", "todowrite"})},
                         {"pattern", rng_.pick({"*", "echo *", "*.txt", "/etc/*", "client_*"})},
                         {"action", rng_.pick({"allow", "ask", "deny"})}});
      body["permission"] = rules;
    }
    std::string client;
    if (rng_.chance(40)) body["clientID"] = client = client_id();
    if (rng_.chance(25)) body["parentID"] = session_id();
    Call call{"POST", "/session", body_text(body), token_for(client)};
    call.client_id = client;
    send(call);
  }

  void prompt() {
    Call call{"POST", "/session/" + pct(session_id()) + "/message", body_text(prompt_body())};
    call.timeout = 30000ms;  // a turn waits at most for a client's result, an ask, a question
    launch(call);
    if (rng_.chance(50)) {
      in_flight_.back().answer.wait_for(4000ms);
      collect(false);
    }
  }

  void prompt_async() {
    send({"POST", "/session/" + pct(session_id()) + "/prompt_async", body_text(prompt_body())});
  }

  void list_tools() {
    std::string target = "/tool";
    if (rng_.chance(90)) target += "?sessionID=" + pct(session_id());
    if (rng_.chance(20))
      target += std::string(target.find('?') == std::string::npos ? "?" : "&") +
                "agent=" + pct(rng_.pick({"build", "plan", "nope", ""}));
    send({"GET", target});
  }

  void read_sessions() {
    std::string sid = pct(session_id());
    send({"GET", rng_.pick({"/session", "/session/status", "/session/" + sid,
                            "/session/" + sid + "/message", "/session/" + sid + "/message",
                            "/session/" + sid + "/todo"})});
  }

  void register_tools() {
    std::string client =
        !sockets_.empty() && rng_.chance(60)
            ? std::next(sockets_.begin(), static_cast<std::ptrdiff_t>(rng_.below(sockets_.size())))
                  ->first
            : client_id();
    json::object body{{"clientID", client}, {"tools", tool_specs()}};
    if (rng_.chance(25)) body["sessionID"] = session_id();
    Call call{"POST", "/client-tools/register", body_text(body), token_for(client)};
    call.client_id = client;
    Answer a = send(call);
    if (a.response && a.response->status == 200) {
      boost::system::error_code ec;
      json::value answer = json::parse(a.response->body, ec);
      if (!ec) remember_tools(client, find(answer, "/registered"));
      // As a client does: register, then connect for the calls.
      if (!sockets_.count(client) && sockets_.size() < 3 && rng_.chance(60)) connect(client);
    }
  }

  void unregister_tools() {
    std::string client = client_id();
    json::object body{{"clientID", client}};
    if (rng_.chance(70)) body["toolIDs"] = json::array{rng_.pick({"t1", "t2", "echo", "nope"})};
    send({"DELETE", "/client-tools/unregister", body_text(body), token_for(client)});
  }

  void execute() {
    json::object body;
    if (auto tool = registered_tool(); tool && rng_.chance(85)) {
      const auto& [owner, name] = *tool;
      if (rng_.chance(50)) {
        body["clientID"] = owner;
        body["tool"] = name;
      } else {
        body["tool"] = "client_" + owner + "_" + name;
      }
    } else {
      body["tool"] = client_tool_name();
    }
    body["input"] = client_tool_input();
    if (rng_.chance(20)) body["sessionID"] = session_id();
    if (rng_.chance(10)) body["messageID"] = id_from(pools_.messages, "msg_");
    if (rng_.chance(10)) body["callID"] = id_from(pools_.calls, "call_");
    body["timeout"] = rng_.chance(70) ? json::value(300 + 300 * rng_.below(4)) : any_number(rng_);
    Call call{"POST", "/client-tools/execute", body_text(body), {}, kExecute5xx, 20000ms};
    launch(call);
  }

  // A result for a delivered (or forged) request, over HTTP or the client's WebSocket.
  void answer_request() {
    auto [request_id, client] = request_to_answer();
    answer(request_id, client);
  }

  void answer(const std::string& request_id, const std::string& client) {
    json::object fields = result_fields();
    auto socket = sockets_.find(client);
    if (socket != sockets_.end() && rng_.chance(40)) {
      fields["type"] = "result";
      fields["requestID"] = request_id;
      send_ws(client, *socket->second, body_text(fields));
      return;
    }
    json::object body{{"requestID", request_id}};
    if (rng_.chance(85)) body["clientID"] = client;
    if (rng_.chance(30)) {
      body["result"] = fields;
    } else {
      for (auto& kv : fields)
        body[kv.key()] = kv.value();
    }
    send({"POST", "/client-tools/result", body_text(body), token_for(client)});
  }

  void report_progress() {
    auto [request_id, client] = request_to_answer();
    json::object body{{"requestID", request_id}};
    if (rng_.chance(85)) body["clientID"] = client;
    if (rng_.chance(60)) body["metadata"] = json::object{{"done", rng_.below(100)}};
    if (rng_.chance(40)) body["title"] = text();
    send({"POST", "/client-tools/progress", body_text(body), token_for(client)});
  }

  void answer_permission() {
    send({"GET", "/permission"});
    if (rng_.chance(80)) reply_permission(id_from(pools_.permissions, "per_"));
  }

  void reply_permission(const std::string& id) {
    json::object body{{"reply", rng_.pick({"once", "always", "reject", "once"})}};
    if (rng_.chance(20)) body["message"] = text();
    std::string client;
    if (rng_.chance(30)) body["clientID"] = client = client_id();
    send({"POST", "/permission/" + pct(id) + "/reply", body_text(body), token_for(client)});
  }

  void answer_question() {
    send({"GET", "/question"});
    reply_question(id_from(pools_.questions, "que_"));
  }

  // Answers with the first option of each question when the question is known, or dismisses it.
  void reply_question(const std::string& id) {
    std::string client;
    json::object body;
    if (rng_.chance(30)) body["clientID"] = client = client_id();
    if (rng_.chance(25)) {
      send({"POST", "/question/" + pct(id) + "/reject",
            body.empty() && rng_.chance(50) ? "" : body_text(body), token_for(client)});
      return;
    }
    json::array answers;
    if (auto it = pools_.asked_questions.find(id); it != pools_.asked_questions.end()) {
      for (const auto& q : it->second) {
        const json::value* label = find(q, "/options/0/label");
        answers.push_back(json::array{label ? *label : json::value(text())});
      }
    } else {
      answers.push_back(json::array{"yes"});
    }
    body["answers"] = answers;
    send({"POST", "/question/" + pct(id) + "/reply", body_text(body), token_for(client)});
  }

  void abort_session() {
    send({"POST", "/session/" + pct(session_id()) + "/abort",
          rng_.chance(70) ? "{}" : body_text(json::object{})});
  }

  void delete_session() { send({"DELETE", "/session/" + pct(session_id())}); }

  // OpenCode's operations on a session's history: a summary (a turn of its own), init (the
  // built-in command's turn), a fork, a revert and its undo, with ids that exist or not.
  void history_operation() {
    std::string base = "/session/" + pct(session_id());
    json::object model{{"providerID", "scripted"}, {"modelID", "default"}};
    switch (rng_.below(5)) {
      case 0: {
        json::object body = rng_.chance(50) ? model : json::object{};
        if (rng_.chance(30)) body["auto"] = rng_.chance(50);
        Call call{"POST", base + "/summarize", body_text(body)};
        call.timeout = 30000ms;
        launch(call);
        return;
      }
      case 1: {
        json::object body = rng_.chance(50) ? model : json::object{};
        if (rng_.chance(50)) body["messageID"] = id_from(pools_.messages, "msg_");
        Call call{"POST", base + "/init", body_text(body)};
        call.timeout = 30000ms;
        launch(call);
        return;
      }
      case 2: {
        json::object body;
        if (rng_.chance(50)) body["messageID"] = id_from(pools_.messages, "msg_");
        send({"POST", base + "/fork", body_text(body)});
        return;
      }
      case 3:
        send({"POST", base + "/revert",
              body_text(json::object{{"messageID", id_from(pools_.messages, "msg_")}})});
        return;
      default:
        send({"POST", base + "/unrevert", rng_.chance(70) ? "{}" : body_text(json::object{})});
    }
  }

  // A client that registered tools, mostly: the calls of its tools reach it.
  std::string tool_owner() {
    if (!pools_.tools.empty() && rng_.chance(70)) return rng_.pick(pools_.tools).first;
    return client_id();
  }

  void open_websocket() {
    std::string client = tool_owner();
    if (sockets_.size() >= 3 || sockets_.count(client)) {
      // Closes this client's socket (it may connect again later), or another one.
      auto victim = sockets_.find(client);
      if (victim == sockets_.end())
        victim =
            std::next(sockets_.begin(), static_cast<std::ptrdiff_t>(rng_.below(sockets_.size())));
      record("WS close /client-tools/ws/" + victim->first, "", "");
      if (rng_.chance(50))
        victim->second->close();
      else
        victim->second->drop();
      sockets_.erase(victim);
      return;
    }
    connect(client);
  }

  void connect(const std::string& client) {
    std::string target = "/client-tools/ws/" + pct(client) + token_query(client);
    std::size_t entry = record("WS open " + target, "", "");
    try {
      sockets_[client] = std::make_unique<WsClient>(port(), target, 10000ms);
      transcript_[entry].outcome = "101";
    } catch (const std::exception& e) {
      transcript_[entry].outcome = e.what();
      refused_upgrade(target, e.what());
    }
  }

  // A refused WebSocket or SSE stream: the refusal must be a 4xx, and come.
  void refused_upgrade(const std::string& target, std::string_view error) {
    ensure_alive("while answering " + target, 2000ms);
    auto at = error.find("HTTP status ");
    unsigned status = 0;
    if (at != std::string_view::npos)
      status = static_cast<unsigned>(std::atoi(std::string(error.substr(at + 12, 3)).c_str()));
    if (status < 400 || status >= 500)
      throw Failure("GET " + target + " was refused without a 4xx: " + std::string(error));
  }

  void send_ws(const std::string& client, WsClient& ws, std::string text) {
    std::size_t entry = record("WS> /client-tools/ws/" + client, text, "");
    try {
      ws.send_text(std::move(text), 5000ms);
    } catch (const std::exception& e) {
      transcript_[entry].outcome = std::string("not sent: ") + e.what();
      sockets_.erase(client);
    }
  }

  void send_websocket() {
    if (sockets_.empty()) return open_websocket();
    auto it = sockets_.begin();
    std::advance(it, static_cast<std::ptrdiff_t>(rng_.below(sockets_.size())));
    std::string client = it->first;
    json::object msg;
    switch (rng_.below(5)) {
      case 0:
        msg = {{"type", "register"}, {"tools", tool_specs()}};
        if (rng_.chance(25)) msg["sessionID"] = session_id();
        break;
      case 1:
        msg = {{"type", "unregister"}, {"toolIDs", json::array{rng_.pick({"t1", "t2", "nope"})}}};
        break;
      case 2:
        msg = result_fields();
        msg["type"] = "result";
        msg["requestID"] = request_to_answer().first;
        break;
      case 3:
        msg = {{"type", "progress"},
               {"requestID", request_to_answer().first},
               {"metadata", json::object{{"done", 1}}}};
        break;
      default:
        msg = {{"type", rng_.pick({"ping", "request", "", "REGISTER"})}};
    }
    send_ws(client, *it->second, body_text(msg));
  }

  void open_pending_stream() {
    std::string client = tool_owner();
    if (streams_.size() >= 2) streams_.erase(streams_.begin());
    std::string target = "/client-tools/pending/" + pct(client) + token_query(client);
    std::size_t entry = record("SSE open " + target, "", "");
    try {
      SseClient::Options options;
      options.connect_timeout = 10000ms;
      auto sse = std::make_unique<SseClient>(port(), target, options);
      transcript_[entry].outcome = std::to_string(sse->status());
      if (sse->status() >= 500)
        throw Failure(std::to_string(sse->status()) + " from GET " + target);
      if (sse->status() == 200) streams_[client] = std::move(sse);
    } catch (const Failure&) {
      throw;
    } catch (const std::exception& e) {
      transcript_[entry].outcome = e.what();
      ensure_alive("while answering GET " + target, 2000ms);
      throw Failure("no answer to GET " + target + ": " + e.what());
    }
  }

  void wait() {
    auto ms = milliseconds(50 + 100 * rng_.below(5));
    record("(wait " + std::to_string(ms.count()) + " ms)", "", "");
    std::this_thread::sleep_for(ms);
  }

  void other_get() {
    send({"GET", rng_.pick({"/provider", "/client-tools/tools",
                            "/client-tools/tools/" + pct(client_id()), "/question", "/permission",
                            "/auth", "/nope", "/session/" + pct(session_id()) + "/nope"})});
  }

  // ---- the AI SDK's chat (POST /api/chat, its stream, its WebSocket) ----

  // A chat id: mostly one named before (a chat used, or one never sent), sometimes junk.
  std::string chat_id() {
    if (!chat_ids_.empty() && rng_.chance(65)) return rng_.pick(chat_ids_);
    if (rng_.chance(85)) {
      std::string id = "chat-" + std::to_string(++chat_counter_);
      Pools::add(chat_ids_, id);
      return id;
    }
    if (rng_.chance(30)) return rng_.chance(50) ? std::string(257, 'c') : std::string(256, 'c');
    return rng_.chance(30) ? any_id() : clip(odd_string(rng_), 2000);  // it goes into paths
  }

  // The app's own tools ({NAME: {description, inputSchema, interactive}}): mostly well named,
  // sometimes a server tool's name (refused), a bad name or not an object.
  json::object app_tools(std::vector<std::string>& names) {
    json::object tools;
    for (std::size_t i = 1 + rng_.below(3); i > 0; --i) {
      std::string name;
      std::size_t roll = rng_.below(100);
      if (roll < 70)
        name = rng_.pick({"getLocation", "askUser", "confirm", "t1"});
      else if (roll < 85)
        name = rng_.pick({"bash", "read", "question", "todowrite", "task"});
      else if (roll < 92)
        name = client_tool_name();
      else
        name = clip(odd_string(rng_), 300);
      if (rng_.chance(5)) {
        tools[name] = any_value(rng_, 1, true);
        continue;
      }
      json::object t;
      if (rng_.chance(70)) t["description"] = text();
      if (rng_.chance(75)) t["inputSchema"] = tool_schema();
      if (rng_.chance(20))
        t["interactive"] = rng_.chance(70) ? json::value(true) : any_value(rng_, 1, true);
      tools[name] = std::move(t);
      names.push_back(name);
    }
    return tools;
  }

  json::object user_message(std::string text) {
    return {{"id", "u" + std::to_string(rng_.below(1000))},
            {"role", "user"},
            {"parts", json::array{json::object{{"type", "text"}, {"text", std::move(text)}}}}};
  }

  // A tool part of an assistant message with the app's answer: for a call the chat waits for
  // (mostly), or any call id.
  json::object tool_part(const std::string& call_id, const std::string& tool) {
    json::object part{{"type", rng_.chance(80) ? "tool-" + tool : std::string("dynamic-tool")},
                      {"toolCallId", call_id},
                      {"input", json::object{}}};
    if (part["type"].as_string() == "dynamic-tool") part["toolName"] = tool;
    switch (rng_.below(10)) {
      case 0:
        part["state"] = rng_.pick({"input-available", "input-streaming", "output-denied", "odd"});
        break;
      case 1:
      case 2:
        part["state"] = "output-error";
        if (rng_.chance(80)) part["errorText"] = text();
        break;
      default:
        part["state"] = "output-available";
        if (rng_.chance(90))
          part["output"] = rng_.chance(50) ? json::value(text()) : any_value(rng_, 1, true);
    }
    return part;
  }

  json::object approval_part(const std::string& approval_id, const std::string& call_id) {
    json::object approval{{"id", approval_id}, {"approved", rng_.chance(60)}};
    if (rng_.chance(20)) approval["reason"] = text();
    return {{"type", "dynamic-tool"},        {"toolName", "bash"},      {"toolCallId", call_id},
            {"state", "approval-responded"}, {"input", json::object{}}, {"approval", approval}};
  }

  // The last message of an app that answers what its chat waits for: outputs of its calls,
  // answers to its approvals; sometimes of calls and asks of other chats, or made up.
  json::object answers_message(const std::string& chat) {
    json::array parts{json::object{{"type", "step-start"}}};
    auto it = chats_.find(chat);
    if (it != chats_.end()) {
      for (const auto& [call, tool] : it->second.calls)
        if (rng_.chance(85)) parts.push_back(tool_part(call, tool));
      for (const auto& [approval, call] : it->second.approvals)
        if (rng_.chance(85)) parts.push_back(approval_part(approval, call));
      if (!it->second.earlier_calls.empty() && rng_.chance(15))
        parts.push_back(tool_part(rng_.pick(it->second.earlier_calls), "getLocation"));
    }
    if (parts.size() == 1 || rng_.chance(20)) {
      if (rng_.chance(60))
        parts.push_back(tool_part(id_from(pools_.calls, "call_"), "getLocation"));
      else
        parts.push_back(
            approval_part(id_from(pools_.permissions, "per_"), id_from(pools_.calls, "call_")));
    }
    if (rng_.chance(20))
      parts.push_back(json::object{{"type", "text"}, {"text", text()}, {"state", "done"}});
    return {{"id", "a" + std::to_string(rng_.below(1000))},
            {"role", "assistant"},
            {"parts", std::move(parts)}};
  }

  // What DefaultChatTransport sends: {id, messages, trigger, messageId?}, and the app's fields
  // (in the same object over HTTP; a WebSocket's send frame has them in `body`). `client` gets
  // the clientID it names.
  json::object chat_body(const std::string& chat, bool ws, std::string& client) {
    json::object app;
    std::vector<std::string> tools;
    if (rng_.chance(50)) app["tools"] = app_tools(tools);
    if (rng_.chance(20))
      app["model"] = rng_.pick({"scripted/default", "scripted/default", "nope/x", ""});
    if (rng_.chance(15)) app["agent"] = rng_.pick({"build", "plan", "nope"});
    if (rng_.chance(30)) app["clientID"] = client = client_id();
    if (rng_.chance(30)) app["resumable"] = rng_.chance(70);

    json::array messages;
    if (rng_.chance(30)) {  // history the app keeps (the server reads only the last message)
      messages.push_back(user_message(text()));
      messages.push_back(
          json::object{{"id", "a0"},
                       {"role", "assistant"},
                       {"parts", json::array{json::object{{"type", "text"}, {"text", text()}}}}});
    }
    std::string trigger = "submit-message";
    std::size_t roll = rng_.below(100);
    bool waits =
        chats_.count(chat) && (!chats_[chat].calls.empty() || !chats_[chat].approvals.empty());
    if (roll < (waits ? 25u : 50u)) {
      std::string prompt = prompt_text();
      if (!tools.empty() && rng_.chance(40))  // the app's own tool: the response ends for it
        prompt = "/call " + rng_.pick(tools) + " " + json::serialize(client_tool_input());
      if (rng_.chance(2)) prompt = std::string(210000, 'z');  // over server.maxBodyBytes
      messages.push_back(user_message(std::move(prompt)));
    } else if (roll < 85) {
      messages.push_back(answers_message(chat));
    } else if (roll < 92) {
      trigger = "regenerate-message";
      if (messages.empty()) messages.push_back(user_message(text()));
    } else {
      switch (rng_.below(5)) {
        case 0:
          trigger = rng_.pick({"resume-stream", "", "SUBMIT-MESSAGE"});
          messages.push_back(user_message(text()));
          break;
        case 1:
          break;  // no messages
        case 2:
          messages.push_back(json::object{
              {"role", "system"},
              {"parts", json::array{json::object{{"type", "text"}, {"text", "be brief"}}}}});
          break;
        case 3:
          messages.push_back(json::object{
              {"role", "user"},
              {"parts", json::array{json::object{{"type", "file"},
                                                 {"mediaType", "text/plain"},
                                                 {"url", "data:text/plain;base64,aGk="}}}}});
          break;
        default:
          messages.push_back(json::object{{"role", "user"}, {"parts", json::array{}}});
      }
    }
    json::object body{{"id", chat}, {"messages", std::move(messages)}};
    if (rng_.chance(90)) body["trigger"] = trigger;
    if (rng_.chance(20))
      body["messageId"] = rng_.chance(70) ? id_from(pools_.messages, "msg_") : text();
    if (ws) {
      body["body"] = std::move(app);
    } else {
      for (auto& kv : app)
        body[kv.key()] = kv.value();
    }
    return body;
  }

  // What a chat's response said: the calls and approvals it left to the app.
  void learn_chat(const std::string& chat, const std::vector<json::value>& chunks) {
    if (chunks.empty()) return;
    ChatState& state = chats_[chat];
    ChatState now;
    now.earlier_calls = state.earlier_calls;
    std::set<std::string> ended;
    for (const auto& chunk : chunks) {
      pools_.harvest(chunk);
      std::string type = string_at(chunk, "/type");
      std::string call = string_at(chunk, "/toolCallId");
      if (type == "tool-input-available") {
        const json::value* server = find(chunk, "/providerExecuted");
        if (!(server && server->is_bool() && server->get_bool()))
          now.calls.emplace_back(call, string_at(chunk, "/toolName"));
        if (now.earlier_calls.size() < 16) now.earlier_calls.push_back(call);
      } else if (type == "tool-approval-request") {
        now.approvals.emplace_back(string_at(chunk, "/approvalId"), call);
      } else if (type.starts_with("tool-output-")) {
        ended.insert(call);
      }
    }
    std::erase_if(now.calls, [&](const auto& c) { return ended.count(c.first) > 0; });
    std::erase_if(now.approvals, [&](const auto& a) { return ended.count(a.second) > 0; });
    state = std::move(now);
  }

  Call chat_call(std::string method, std::string target, std::string body, std::string chat) {
    Call call{std::move(method), std::move(target), std::move(body)};
    call.chat = std::move(chat);
    call.allowed = kChatStatuses;
    return call;
  }

  // Sends `call` and leaves once its answer's head (and perhaps a little of its stream) came: an
  // app that closes the response (useChat's stop()). The head must come, and not be a 5xx.
  void send_and_leave(const Call& call) {
    std::size_t entry = record(call.method + " " + call.target + " (leaves early)", call.body, "");
    std::string bytes = call.method + " " + call.target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    for (const auto& [name, value] : call.headers)
      bytes += name + ": " + value + "\r\n";
    if (!call.body.empty())
      bytes +=
          "Content-Type: application/json\r\nContent-Length: " + std::to_string(call.body.size()) +
          "\r\n";
    bytes += "\r\n" + call.body;
    std::string received;
    try {
      RawConnection conn(port(), 5000ms);
      try {
        conn.send(bytes, 10000ms);
      } catch (const std::exception&) {
        // A server that refuses a large body may close before reading it: its answer counts.
      }
      auto deadline = Clock::now() + call.timeout;
      while (conn.received().find("\r\n\r\n") == std::string::npos && Clock::now() < deadline)
        if (conn.wait_closed(50ms)) break;
      if (conn.received().starts_with("HTTP/1.1 200"))
        conn.wait_closed(milliseconds(rng_.below(4) * 300));
      received = conn.received();
      if (rng_.chance(50)) conn.close();  // else the destructor's
    } catch (const std::exception& e) {
      transcript_[entry].outcome = std::string("no answer: ") + e.what();
      ensure_alive("while answering " + call.method + " " + clip(call.target, 200), 2000ms);
      throw Failure("no answer to " + call.method + " " + clip(call.target, 200) + ": " + e.what());
    }
    transcript_[entry].outcome = clip(received, 4000);
    std::string what = call.method + " " + clip(call.target, 200);
    if (received.find("\r\n\r\n") == std::string::npos) {
      ensure_alive("while answering " + what, 2000ms);
      throw Failure("no answer to " + what + " within " + std::to_string(call.timeout.count()) +
                    " ms: " + clip(received, 2000));
    }
    unsigned status = received.size() > 12 && received.starts_with("HTTP/1.")
                          ? static_cast<unsigned>(std::atoi(received.substr(9, 3).c_str()))
                          : 0;
    if (status == 0 || status >= 500 ||
        std::find(call.allowed.begin(), call.allowed.end(), status) == call.allowed.end())
      throw Failure("an unexpected answer to " + what + ": " + clip(received, 2000));
    if (status == 200 && !call.chat.empty()) {
      auto body = received.find("\r\n\r\n");
      for (const auto& chunk : ui_chunks(std::string_view(received).substr(body + 4)))
        pools_.harvest(chunk);
    }
  }

  // POST /api/chat: read to its end (in the background, like a prompt), or left early.
  void chat_post() {
    std::string chat = chat_id();
    std::string client;
    json::object body = chat_body(chat, false, client);
    Call call = chat_call("POST", "/api/chat", body_text(body), chat);
    call.headers = token_for(client);
    call.client_id = client;
    call.stop = "/api/chat/" + pct(chat) + "/stream";
    // A turn waits at most for a client's result, an ask, or a question the fuzzer ends within
    // 8 steps; a new message to a chat that waits for the app waits up to 10 s for its turn.
    run_chat_call(std::move(call), 20, 4000ms);
  }

  // Sends a chat request that may stream long (60 s at most): left early `leave` percent of the
  // time, else in the background, its answer awaited up to `wait` now and then.
  void run_chat_call(Call call, int leave, milliseconds wait) {
    call.timeout = 60000ms;
    if (rng_.chance(leave)) {
      call.timeout = 20000ms;
      return send_and_leave(call);
    }
    launch(std::move(call));
    if (rng_.chance(60)) {
      in_flight_.back().answer.wait_for(wait);
      collect(false);
    }
  }

  // GET /api/chat/{id}/stream: the response streaming now (200), none (204), no chat (404).
  void chat_resume() {
    std::string chat = chat_id();
    Call call = chat_call("GET", "/api/chat/" + pct(chat) + "/stream", "", chat);
    call.stop = call.target;
    run_chat_call(std::move(call), 25, 2000ms);
  }

  // DELETE /api/chat/{id}/stream: stop.
  void chat_stop() {
    Call call = chat_call("DELETE", "/api/chat/" + pct(chat_id()) + "/stream",
                          rng_.chance(90) ? "" : body_text(json::object{}), "");
    send(call);
  }

  // WebSocketChatTransport's frames: send, resume, abort, with request ids that repeat.
  void chat_websocket() {
    if (!chat_ws_) {
      std::size_t entry = record("WS open /api/chat/ws", "", "");
      try {
        chat_ws_ = std::make_unique<WsClient>(port(), "/api/chat/ws", 10000ms);
        transcript_[entry].outcome = "101";
      } catch (const std::exception& e) {
        transcript_[entry].outcome = e.what();
        refused_upgrade("/api/chat/ws", e.what());
        return;
      }
    }
    if (rng_.chance(8)) {
      record("WS close /api/chat/ws", "", "");
      if (rng_.chance(50))
        chat_ws_->close();
      else
        chat_ws_->drop();
      close_chat_ws();
      return;
    }
    std::string request_id;
    if (!ws_streams_.empty() && rng_.chance(40))  // refused: it is in use
      request_id = std::next(ws_streams_.begin(),
                             static_cast<std::ptrdiff_t>(rng_.below(ws_streams_.size())))
                       ->first;
    else if (rng_.chance(30))
      request_id = "r" + std::to_string(rng_.below(3));
    else
      request_id = "r" + std::to_string(100 + ++ws_request_counter_);
    json::object frame;
    std::string chat;
    std::size_t roll = rng_.below(100);
    if (roll < 60) {
      chat = chat_id();
      std::string client;
      frame = chat_body(chat, true, client);
      frame["type"] = "send";
    } else if (roll < 80) {
      chat = chat_id();
      frame = {{"type", "resume"}, {"id", chat}};
      if (rng_.chance(40))
        frame["lastSequence"] = rng_.chance(70)
                                    ? json::value(static_cast<std::int64_t>(rng_.below(8)) - 1)
                                    : any_number(rng_);
    } else if (roll < 95) {
      frame = {{"type", "abort"}};
    } else {
      frame = {{"type", rng_.pick({"ping", "", "SEND", "stop"})}};
    }
    frame["requestId"] = request_id;
    std::string text = body_text(frame);
    std::size_t entry = record("WS> /api/chat/ws", text, "");
    ws_sent_.push_back(as_read(text));
    try {
      chat_ws_->send_text(std::move(text), 5000ms);
    } catch (const std::exception& e) {
      transcript_[entry].outcome = std::string("not sent: ") + e.what();
      close_chat_ws();
      return;
    }
    // Let the frame be answered (a new message to a chat that waits may take its time).
    if (chat_ws_ && rng_.chance(50))
      if (auto answer = chat_ws_->next_text(1500ms)) on_chat_frame(*answer);
  }

  // A frame as the server reads it (the same parser and depth limit): the requestId it answers
  // with ("" when it cannot read one), its type, and the chat a send or resume names.
  static ChatFrame as_read(const std::string& text) {
    ChatFrame frame;
    json::parse_options options;
    options.max_depth = 64;  // server.maxJsonDepth
    boost::system::error_code ec;
    json::value v = json::parse(text, ec, {}, options);
    if (ec || !v.is_object()) return frame;
    const json::object& o = v.get_object();
    if (const auto* id = o.if_contains("requestId"); id && id->is_string())
      frame.request_id = id->get_string();
    if (const auto* type = o.if_contains("type"); type && type->is_string())
      frame.type = std::string(type->get_string());
    if (const auto* chat = o.if_contains("id"); chat && chat->is_string())
      frame.chat = chat->get_string();
    return frame;
  }

  static bool gets_no_answer(const ChatFrame& frame) {
    return frame.type == "abort" && !frame.request_id.empty();
  }

  void close_chat_ws() {
    chat_ws_.reset();
    ws_sent_.clear();
    ws_streams_.clear();
  }

  // The server reads a socket's frames one at a time and answers each (but an abort) with
  // `start`, `error` or `no-active` before it reads the next; a started request's chunks follow
  // until its `end`, or until an abort of its requestId. So the fuzzer knows, at each answer,
  // which frame it answers and which requestIds the server has streaming, and checks both.
  void on_chat_frame(const std::string& text) {
    boost::system::error_code ec;
    json::value v = json::parse(text, ec);
    if (ec) throw Failure("a chat WebSocket frame that is not JSON: " + clip(text, 2000));
    std::string type = string_at(v, "/type");
    std::string request_id = string_at(v, "/requestId");
    auto stream = ws_streams_.find(request_id);
    if (type == "chunk") {
      if (stream == ws_streams_.end())
        throw Failure("a chunk for requestId \"" + clip(request_id, 200) +
                      "\", which streams nothing: " + clip(text, 2000));
      if (const json::value* chunk = find(v, "/chunk")) stream->second.chunks.push_back(*chunk);
      return;
    }
    record("WS< /api/chat/ws", "", clip(text, 2000));
    if (type == "end") {
      if (stream == ws_streams_.end())
        throw Failure("an end for requestId \"" + clip(request_id, 200) +
                      "\", which streams nothing: " + clip(text, 2000));
      learn_chat(stream->second.chat, stream->second.chunks);
      ws_streams_.erase(stream);
      return;
    }
    if (type != "start" && type != "error" && type != "no-active")
      throw Failure("a chat WebSocket frame of an unknown type: " + clip(text, 2000));
    // The aborts before the frame this answers have been read: their streams ended there.
    while (!ws_sent_.empty() && gets_no_answer(ws_sent_.front())) {
      ws_streams_.erase(ws_sent_.front().request_id);
      ws_sent_.pop_front();
    }
    if (ws_sent_.empty()) throw Failure("a chat WebSocket answer to no frame: " + clip(text, 2000));
    ChatFrame frame = std::move(ws_sent_.front());
    ws_sent_.pop_front();
    if (request_id != frame.request_id)
      throw Failure("a chat WebSocket answer with requestId \"" + clip(request_id, 200) +
                    "\" to the frame of requestId \"" + clip(frame.request_id, 200) +
                    "\": " + clip(text, 2000));
    std::string error_text = string_at(v, "/errorText");
    if (type == "error" && error_text.empty())
      throw Failure("a chat WebSocket error without its errorText: " + clip(text, 2000));
    // A requestId streaming now is refused (with the frame's type read, unless it is an abort).
    bool in_use = frame.type && ws_streams_.count(frame.request_id) > 0;
    bool refused_in_use = type == "error" && error_text.ends_with(" is in use");
    if (in_use != refused_in_use)
      throw Failure(in_use ? "a frame with requestId \"" + clip(frame.request_id, 200) +
                                 "\", which streams now, was not refused: " + clip(text, 2000)
                           : "a frame refused as in use when its requestId streams nothing: " +
                                 clip(text, 2000));
    if (type == "start") {
      if (frame.type != "send" && frame.type != "resume")
        throw Failure("a chat WebSocket frame of type \"" + clip(frame.type.value_or(""), 200) +
                      "\" started a stream: " + clip(text, 2000));
      ws_streams_[request_id] = {frame.chat, {}};
    }
  }

  // ---- after each step ----

  // Reads what the server pushed: ids from /event, requests delivered to our clients.
  void drain_pushes() {
    if (events_) {
      while (auto e = events_->next_event(0ms)) {
        boost::system::error_code ec;
        json::value v = json::parse(e->data, ec);
        if (ec) continue;
        pools_.harvest(v);
        std::string type = string_at(v, "/type");
        if (type == "question.asked") {
          open_questions_[string_at(v, "/properties/id")] = {string_at(v, "/properties/sessionID"),
                                                             step_};
          fresh_asks_.emplace_back(type, string_at(v, "/properties/id"));
        }
        if (type == "permission.asked")
          fresh_asks_.emplace_back(type, string_at(v, "/properties/id"));
      }
      if (events_->closed()) open_events();  // dropped (a slow reader) or closed: read anew
    }
    for (auto it = sockets_.begin(); it != sockets_.end();) {
      while (auto text = it->second->next_text(0ms))
        on_ws_message(it->first, *text);
      if (it->second->closed()) {
        record("WS closed /client-tools/ws/" + it->first, "", it->second->close_description());
        it = sockets_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = streams_.begin(); it != streams_.end();) {
      while (auto e = it->second->next_event(0ms))
        if (e->event == "tool-request") on_delivery(it->first, e->data);
      it = it->second->closed() ? streams_.erase(it) : std::next(it);
    }
    if (chat_ws_) {
      while (auto text = chat_ws_->next_text(0ms))
        on_chat_frame(*text);
      if (chat_ws_->closed()) {
        record("WS closed /api/chat/ws", "", chat_ws_->close_description());
        close_chat_ws();
      }
    }
  }

  void on_delivery(const std::string& client, std::string_view data) {
    boost::system::error_code ec;
    json::value v = json::parse(data, ec);
    if (ec) return;
    std::string id = string_at(v, "/requestID");
    if (id.empty()) id = string_at(v, "/request/requestID");
    if (!id.empty()) {
      Pools::add(pools_.deliveries, {id, client});
      fresh_deliveries_.emplace_back(id, client);
    }
    pools_.harvest(v);
  }

  void on_ws_message(const std::string& client, const std::string& text) {
    boost::system::error_code ec;
    json::value v = json::parse(text, ec);
    std::string type = ec ? "" : string_at(v, "/type");
    if (type == "request" || type == "credentials" || type == "error" || type == "cancel")
      record("WS< /client-tools/ws/" + client, "", text);
    if (type == "request") on_delivery(client, text);
    if (type == "registered") remember_tools(client, find(v, "/toolIDs"));
    if (type == "credentials" && !string_at(v, "/clientToken").empty())
      pools_.tokens[client] = string_at(v, "/clientToken");
    // The WebSocket's counterpart of a 5xx: an internal error caused by a client's message.
    if (type == "error" && string_at(v, "/code") == "INTERNAL_ERROR")
      throw Failure("an INTERNAL_ERROR on the WebSocket of " + client + ": " + text);
  }

  // The fuzzer is also the person who answers questions: one left open for 8 steps is ended by
  // aborting its session, so no turn waits beyond the sequence.
  void end_stale_questions() {
    for (auto it = open_questions_.begin(); it != open_questions_.end();) {
      if (step_ - it->second.second < 8) {
        ++it;
        continue;
      }
      std::string session = it->second.first;
      it = open_questions_.erase(it);
      send({"POST", "/session/" + pct(session) + "/abort", "{}"});
    }
  }

  void after_step() {
    collect(false);
    drain_pushes();
    // Half of what our clients are asked is answered at once, as a client would; the rest is
    // left to the steps that answer at random (late, twice, forged) or to time out.
    auto fresh = std::move(fresh_deliveries_);
    fresh_deliveries_.clear();
    for (const auto& [request_id, client] : fresh)
      if (rng_.chance(50)) answer(request_id, client);
    // So are half of the permission asks and questions, as a person at the screen would.
    auto asks = std::move(fresh_asks_);
    fresh_asks_.clear();
    for (const auto& [type, id] : asks)
      if (rng_.chance(50)) type == "question.asked" ? reply_question(id) : reply_permission(id);
    end_stale_questions();
    ensure_alive("after this step");
    Call probe{"GET", "/health"};
    probe.timeout = 10000ms;
    Answer health = perform(port(), probe);
    if (!health.response || health.response->status != 200) {
      record("GET /health", "", describe(health));
      ensure_alive("while answering GET /health", 2000ms);
      throw Failure("GET /health after the step: " + describe(health));
    }
    check_log();
  }

  // Ends every turn (so nothing waits for a person), judges what is in flight, and stops the
  // server: it must exit cleanly.
  void finish() {
    std::vector<Call> stops;
    for (const auto& f : in_flight_)
      if (auto stop = stopper(f.call)) stops.push_back(*stop);
    for (const auto& [id, asked] : open_questions_)
      stops.push_back({"POST", "/session/" + pct(asked.first) + "/abort", "{}"});
    for (const auto& stop : stops)
      send(stop);
    collect(true);
    ensure_alive("at the end of the sequence");
    record("stop (SIGTERM)", "", "");
    stop_server(false);
  }

  std::string report(const std::string& reason) {
    std::string log = earlier_logs_;
    if (server_) {
      log += server_->log();
      server_->send_signal(SIGKILL);  // what is in flight ends now
    }
    for (auto& f : in_flight_)
      f.answer.wait();
    in_flight_.clear();
    std::string head =
        "API fuzzer failure: " + reason + "\n  seed " + std::to_string(seed_) + ", step " +
        std::to_string(step_) + " of " + std::to_string(steps_) + "\n  replay: " +
        (settings_.binary ? "API_FUZZ_BINARY=" + settings_.binary->string() + " " : std::string()) +
        "API_FUZZ_SEED=" + std::to_string(seed_) +
        " API_FUZZ_SEQUENCES=1 API_FUZZ_STEPS=" + std::to_string(steps_) +
        " switchboard_api_fuzz\n  config: " + json::serialize(config_) + "\n";
    fs::path file = settings_.out_dir / ("api-fuzz-failure-" + std::to_string(seed_) + ".txt");
    {
      std::ofstream out(file, std::ios::binary | std::ios::trunc);
      out << head << "  requests (step, request, body, answer):\n"
          << render(transcript_, std::string::npos) << "--- server log ---\n"
          << log << "--- end of server log ---\n";
    }
    // The interesting part of the log: a sanitizer's report, else its end.
    std::size_t at = std::string::npos;
    for (const char* marker : {"ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer"})
      at = std::min(at, log.find(marker));
    std::string tail = at != std::string::npos
                           ? log.substr(at > 2000 ? at - 2000 : 0, 14000)
                           : log.substr(log.size() > 6000 ? log.size() - 6000 : 0);
    return head + "  requests so far (step, request, body, answer; whole in " + file.string() +
           "):\n" + render(transcript_, 600) + "--- server log (part) ---\n" + tail +
           "\n--- end of server log ---\n";
  }

  struct InFlight {
    std::size_t entry;  // in transcript_
    Call call;
    std::future<Answer> answer;
    bool interrupted;  // the server was restarted while it waited
  };

  const std::uint64_t seed_;
  const Settings& settings_;
  const int steps_ = settings_.steps;
  const Clock::time_point deadline_;
  Rng rng_;
  TempDir data_{"api-fuzz-data"};
  TempDir project_{"api-fuzz-project"};
  json::object config_;
  std::optional<ServerProcess> server_;
  std::string earlier_logs_;  // of the server's earlier runs in this sequence
  std::size_t log_checked_ = 0;
  std::unique_ptr<SseClient> events_;
  std::map<std::string, std::unique_ptr<WsClient>> sockets_;   // by clientID
  std::map<std::string, std::unique_ptr<SseClient>> streams_;  // pending streams by clientID
  std::map<std::string, ChatState> chats_;                     // by chat id
  std::vector<std::string> chat_ids_;                          // chats named so far
  int chat_counter_ = 0;
  std::unique_ptr<WsClient> chat_ws_;  // a WebSocketChatTransport's socket
  std::deque<ChatFrame> ws_sent_;      // its frames not answered yet, in order (aborts too)
  struct ChatStream {
    std::string chat;
    std::vector<json::value> chunks;
  };
  std::map<std::string, ChatStream> ws_streams_;  // its requests streaming now, by requestId
  int ws_request_counter_ = 0;
  std::vector<InFlight> in_flight_;
  std::map<std::string, std::pair<std::string, int>> open_questions_;  // id -> (session, step)
  std::vector<std::pair<std::string, std::string>> fresh_deliveries_;  // (requestID, clientID)
  std::vector<std::pair<std::string, std::string>> fresh_asks_;        // (event type, ask id)
  Pools pools_;
  std::vector<Exchange> transcript_;
  int step_ = 0;
  bool started_ = false;
};

TEST(ApiFuzz, SequencesOfCallsNeitherKillTheServerNorGetA5xx) {
  Settings settings = settings_from_env();
  auto start = Clock::now();
  auto deadline = start + settings.budget;
  std::uint64_t ran = 0;
  long steps = 0;
  int failures = 0;
  for (std::uint64_t k = 0; k < settings.sequences && Clock::now() < deadline; ++k) {
    Sequence sequence(settings.seed + k, settings, deadline);
    auto failure = sequence.run();
    ++ran;
    steps += sequence.steps_done();
    if (settings.verbose)
      std::cout << "sequence " << settings.seed + k << ":\n" << sequence.transcript(300);
    if (failure) {
      ++failures;
      ADD_FAILURE() << *failure;
      if (!settings.keep_going || sequence.failed_to_start()) break;
    }
  }
  auto seconds = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - start).count();
  std::cout << "api fuzz: " << ran << " sequences (seeds " << settings.seed << ".."
            << settings.seed + ran - 1 << "), " << steps << " steps, " << failures
            << " failing, in " << seconds << " s\n";
  EXPECT_GT(ran, 0u);
}

}  // namespace
}  // namespace sb::test
