// mcp_calls: what a turn whose tool is an MCP server's costs Switchboard (issue 17), beside a
// client-tool turn and a built-in `read` turn.
//
// One run, one `switchboard serve` with the scripted model (no provider configured: the user
// message "/call TOOL {json}" makes it call TOOL once with that input, then answer "Tool
// results:\n" and the tool's output) and four MCP servers in its config, all from tests/mcp:
//
//  (a) stdio-legacy   server-everything over stdio (2025-11-25), tool `ev_stdio_echo`;
//  (b) stdio-modern   modern_server.mjs over stdio (2026-07-28), tool `modern_stdio_echo`;
//  (c) http-modern    modern_server.mjs --http, Streamable HTTP (2026-07-28), `modern_http_echo`;
//  (d) http-legacy    server-everything streamableHttp (2025-11-25, sessionful), `ev_http_echo`;
//  (e) client         a WebSocket client of this program (bench/support's WsEchoClient) that
//                     registered `echo` for every session and answers each request at once;
//  (f) read           the built-in `read` of a small file of the project directory.
//
// and two kinds that are not turns but single calls of a client tool, without a session or a
// model: another WsEchoClient registers `echo` for every session (an open tool) and answers;
//
//  (g) execute        POST /client-tools/execute {tool, input} of that tool;
//  (h) client-mcp     the same tool called as an MCP host calls it over /client-tools/mcp with
//                     protocol 2025-11-25: one `initialize` (its Mcp-Session-Id kept) and
//                     `notifications/initialized` before the first block, then one `tools/call`
//                     POST per call (no progressToken: a plain JSON answer) with Mcp-Session-Id
//                     and MCP-Protocol-Version. The answer must be 200, the request's id, one text
//                     content that is the echoed text, and isError false.
//
// (g) and (h) are blocks of --session-turns calls in the same rounds as the turn kinds, on the
// driver's connection, and are reported in a table of their own, (h) as a ratio to (g). The open
// tool is registered only when (g) or (h) runs; the sessions of the turn kinds then see it too.
//
// The two HTTP servers are started by this program (they are remote servers to Switchboard), the
// stdio ones by Switchboard. One driver on one keep-alive connection does the turns one after
// another (POST /session/{id}/message), in sessions of --session-turns turns; the kinds take turns
// a session at a time (a round is one session of each kind, every other round in reverse order),
// so that whatever else the machine does falls on all kinds alike. Each session is a block: the
// server's CPU time, the CPU time of the kind's MCP server process (node), this program's CPU
// and the machine's busy time are read before its POST /session and after its last turn, and
// added to the kind's totals. A process's CPU time is the sum of its threads' time on CPU
// (/proc/PID/task/*/schedstat, user + system in ns): a block takes about one 10 ms tick of
// /proc/PID/stat, which would make each block's reading off by up to a tick. utime + stime of
// /proc/PID/stat are read too, for the kernel's share and as a check over the whole run (the
// schedstat sum misses threads that ended; the two agree when none did). Turn latency is the
// POST's round trip. Every turn is checked: 200, an assistant message that finished with "stop",
// and the text "Tool results:\n" + what the tool must have answered (the echoed text; for `read`,
// a marker line of the file). Prints markdown on stdout, progress on stderr; exit status 0 only
// when there was no error.
#include <boost/json.hpp>

#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "server_process.hpp"
#include "support/client.hpp"
#include "support/run.hpp"

#ifndef SWITCHBOARD_SOURCE_DIR
#error "SWITCHBOARD_SOURCE_DIR must name the source tree (for tests/mcp)"
#endif

namespace {

using namespace bench;
using namespace std::chrono_literals;

constexpr std::string_view kUsage = R"(usage: mcp_calls [options]

  --server PATH           switchboard binary (default: the one beside this program,
                          else build/release/switchboard)
  --mcp-dir DIR           tests/mcp with its node_modules (default: the source tree's;
                          install with scripts/npm-deps.sh tests/mcp)
  --node PATH             node (default: node, looked up in PATH)
  --kinds LIST            stdio-legacy,stdio-modern,http-modern,http-legacy,client,read,
                          execute,client-mcp (default: all eight)
  --turns N               measured turns (calls, for execute and client-mcp) per kind
                          (default 2000)
  --session-turns N       turns per session, calls per block (default 20)
  --warmup-sessions N     sessions per kind before the measured ones (default 2)
  --connect-timeout MS    how long the MCP servers may take to connect (default 60000)
  --op-timeout MS         limit for every network operation (default 10000)
  --max-runtime SECONDS   the whole run is killed after this (default 1800)
  --keep-temp             keep the temporary directory (logs, configs, databases)
  --server-prefix "CMD ARGS"  run the server under a tool (figures then describe the tool)
)";

// ---- the kinds of turn ----------------------------------------------------------------------

enum class Kind {
  StdioLegacy,
  StdioModern,
  HttpModern,
  HttpLegacy,
  Client,
  Read,
  Execute,
  ServedMcp
};

struct KindSpec {
  Kind kind;
  std::string_view name;    // on the command line
  std::string_view label;   // in the report
  std::string_view server;  // the MCP server's name in the config; empty for client and read
  bool legacy = false;      // server-everything (input `message`, output "Echo: ...")
};

constexpr KindSpec kKinds[] = {
    {Kind::StdioLegacy, "stdio-legacy", "(a) MCP stdio, legacy (server-everything)", "ev_stdio",
     true},
    {Kind::StdioModern, "stdio-modern", "(b) MCP stdio, modern (modern_server)", "modern_stdio"},
    {Kind::HttpModern, "http-modern", "(c) MCP HTTP, modern (modern_server --http)", "modern_http"},
    {Kind::HttpLegacy, "http-legacy", "(d) MCP HTTP, legacy (server-everything streamableHttp)",
     "ev_http", true},
    {Kind::Client, "client", "(e) client tool over WebSocket", ""},
    {Kind::Read, "read", "(f) built-in `read`", ""},
    {Kind::Execute, "execute", "(g) POST /client-tools/execute", ""},
    {Kind::ServedMcp, "client-mcp", "(h) tools/call on /client-tools/mcp (2025-11-25)", ""},
};
constexpr std::size_t kKindCount = std::size(kKinds);

const KindSpec& spec(Kind k) {
  return kKinds[static_cast<int>(k)];
}

bool is_mcp(Kind k) {
  return !spec(k).server.empty();
}

// A single call of the open client tool, not a turn: (g) and (h).
bool is_call(Kind k) {
  return k == Kind::Execute || k == Kind::ServedMcp;
}

// The protocol (h) speaks on /client-tools/mcp.
constexpr std::string_view kServedProtocol = "2025-11-25";

// ---- options --------------------------------------------------------------------------------

struct Options {
  ServerCommand server;
  fs::path mcp_dir = fs::path(SWITCHBOARD_SOURCE_DIR) / "tests" / "mcp";
  std::string node = "node";
  std::vector<Kind> kinds;
  int turns = 2000;
  int session_turns = 20;
  int warmup_sessions = 2;
  std::chrono::milliseconds connect_timeout{60000};
  std::chrono::milliseconds op_timeout{10000};
  int max_runtime_s = 1800;
  bool keep_temp = false;

  bool has(Kind k) const { return std::find(kinds.begin(), kinds.end(), k) != kinds.end(); }
};

Options parse_options(int argc, char** argv) {
  Options o;
  o.server.path = default_server_path().string();
  for (const auto& k : kKinds)
    o.kinds.push_back(k.kind);
  for_each_flag(argc, argv, kUsage, [&](std::string_view flag, const FlagValue& value) {
    if (flag == "--server") {
      o.server.path = fs::absolute(std::string(value())).string();
    } else if (flag == "--mcp-dir") {
      o.mcp_dir = fs::absolute(std::string(value()));
    } else if (flag == "--node") {
      o.node = std::string(value());
    } else if (flag == "--kinds") {
      o.kinds.clear();
      for (const auto& s : split_list(value())) {
        auto it = std::find_if(std::begin(kKinds), std::end(kKinds),
                               [&](const KindSpec& k) { return k.name == s; });
        if (it == std::end(kKinds)) throw std::invalid_argument("unknown kind \"" + s + "\"");
        if (!o.has(it->kind)) o.kinds.push_back(it->kind);
      }
    } else if (flag == "--turns") {
      o.turns = parse_count(flag, value(), 1, 10000000);
    } else if (flag == "--session-turns") {
      o.session_turns = parse_count(flag, value(), 1, 100000);
    } else if (flag == "--warmup-sessions") {
      o.warmup_sessions = parse_count(flag, value(), 0, 100000);
    } else if (flag == "--connect-timeout") {
      o.connect_timeout = std::chrono::milliseconds(parse_count(flag, value(), 1, 3600000));
    } else if (flag == "--op-timeout") {
      o.op_timeout = std::chrono::milliseconds(parse_count(flag, value(), 1, 3600000));
    } else if (flag == "--max-runtime") {
      o.max_runtime_s = parse_count(flag, value(), 1, 86400);
    } else if (flag == "--server-prefix") {
      o.server.prefix = split_words(value());
    } else if (flag == "--keep-temp") {
      o.keep_temp = true;
    } else {
      return false;
    }
    return true;
  });
  if (o.kinds.empty()) throw std::invalid_argument("--kinds: name at least one kind");
  return o;
}

// ---- the MCP servers' processes -------------------------------------------------------------

fs::path everything_script(const Options& opt) {
  return opt.mcp_dir / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" /
         "index.js";
}

fs::path modern_script(const Options& opt) {
  return opt.mcp_dir / "modern_server.mjs";
}

// A remote MCP server that this program runs: node on 127.0.0.1:port, its output in its log.
struct HttpMcpServer {
  std::unique_ptr<ServerProcess> process;
  unsigned short port = 0;
};

// A port that was free a moment ago (server-everything cannot say which port it got for 0).
unsigned short free_port(asio::io_context& io) {
  tcp::acceptor probe(io, tcp::endpoint(asio::ip::make_address_v4("127.0.0.1"), 0));
  return probe.local_endpoint().port();
}

// Starts `script args` under node, in `dir`, and waits until its log says `ready`.
std::unique_ptr<ServerProcess> start_node(const Options& opt, const fs::path& dir,
                                          const fs::path& script, std::vector<std::string> args,
                                          std::vector<std::string> env, std::string_view ready) {
  ServerProcess::Options o;
  o.prefix = {opt.node};  // looked up in PATH
  o.command = std::vector<std::string>{script.string()};
  o.command->insert(o.command->end(), args.begin(), args.end());
  o.env = std::move(env);
  o.files = dir;
  o.wait_listening = false;  // it does not log "listening on http://..."
  auto p = std::make_unique<ServerProcess>(std::move(o));
  if (!p->wait_for_log(ready, 20s))
    throw Fatal(script.filename().string() + " did not say \"" + std::string(ready) +
                "\" within 20 s; log:\n" + log_tail(*p));
  std::cerr << "started " << script.filename().string() << " (pid " << p->pid() << ")" << std::endl;
  return p;
}

HttpMcpServer start_modern_http(const Options& opt, RunDirectory& temp) {
  HttpMcpServer s;
  s.process = start_node(opt, temp.fresh("modern-http"), modern_script(opt), {"--http", "0"}, {},
                         "listening on ");
  // "listening on PORT\n": the port it got, once the whole line is there.
  constexpr std::string_view kLine = "listening on ";
  for (auto deadline = Clock::now() + 5s; Clock::now() < deadline;) {
    std::string log = s.process->log();
    auto at = log.find(kLine);
    if (log.find('\n', at) != std::string::npos) {
      s.port = static_cast<unsigned short>(std::stoi(log.substr(at + kLine.size())));
      return s;
    }
    std::this_thread::sleep_for(10ms);
  }
  throw Fatal("modern_server.mjs did not finish its \"listening on\" line");
}

HttpMcpServer start_everything_http(const Options& opt, RunDirectory& temp, asio::io_context& io) {
  HttpMcpServer s;
  s.port = free_port(io);
  s.process =
      start_node(opt, temp.fresh("everything-http"), everything_script(opt), {"streamableHttp"},
                 {"PORT=" + std::to_string(s.port)}, "listening on port");
  return s;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// The processes whose parent is `parent` and whose command line contains `needle` (the MCP
// servers Switchboard started over stdio).
std::vector<pid_t> children_of(pid_t parent, std::string_view needle) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    // /proc/PID/stat: "PID (COMM) STATE PPID ..."; COMM may hold spaces and parentheses.
    std::string stat = read_text(entry.path() / "stat");
    auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    if (!(rest >> state >> ppid) || ppid != parent) continue;
    std::string cmdline = read_text(entry.path() / "cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(needle) != std::string::npos)
      out.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return out;
}

// ---- the switchboard server -----------------------------------------------------------------

constexpr std::string_view kReadMarker = "mcp_calls marker: the file was read";

struct Setup {
  fs::path project, data;
  ServerProcess::Options options;
};

Setup server_setup(const Options& opt, RunDirectory& temp, const json::object& mcp) {
  fs::path root = temp.fresh("switchboard");
  Setup s;
  s.project = root / "project";
  s.data = root / "data";
  for (const auto& p : {s.project, s.data})
    fs::create_directories(p);
  {
    std::ofstream file(s.project / "notes.txt");
    file << "Notes of the mcp_calls benchmark project.\n" << kReadMarker << "\n";
    for (int i = 1; i <= 20; ++i)
      file << "line " << i << ": a short line of text that the read tool returns\n";
  }
  // No provider: the scripted model. The client-tool settings are agent_turns'.
  json::object config{{"clientTools", json::object{{"rateLimit", 0},
                                                   {"keepaliveInterval", 30000},
                                                   {"defaultTimeout", 30000},
                                                   {"clientTokens", false}}},
                      {"server", json::object{{"subscriberQueueLimit", 65536}}}};
  if (!mcp.empty()) config["mcp"] = mcp;
  s.options = server_options(opt.server, root, std::move(config));
  s.options.data_dir = s.data;
  s.options.directory = s.project;
  return s;
}

// ---- measuring ------------------------------------------------------------------------------

// Counters at one instant.
struct Snapshot {
  Clock::time_point at;
  std::uint64_t server_ns = 0;  // schedstat of the live threads
  CpuTicks server;              // /proc/PID/stat
  std::uint64_t mcp_ns = 0;     // the kind's MCP server process; zero for client and read
  CpuTicks mcp;
  std::int64_t bench_us = 0;
  std::uint64_t bench_ticks = 0;
  std::uint64_t busy_ticks = 0;
};

Snapshot snapshot(pid_t server, pid_t mcp) {
  Snapshot s;
  s.at = Clock::now();
  s.server_ns = process_cpu_ns(server);
  s.server = process_cpu_ticks(server);
  if (mcp > 0) {
    s.mcp_ns = process_cpu_ns(mcp);
    s.mcp = process_cpu_ticks(mcp);
  }
  s.bench_us = self_cpu_us();
  s.bench_ticks = process_cpu_ticks(::getpid()).total();
  s.busy_ticks = system_busy_ticks();
  return s;
}

double tick_ms() {
  return 1000.0 / static_cast<double>(clock_ticks_per_second());
}

// A kind's totals over its measured sessions.
struct Tally {
  std::size_t sessions = 0, turns = 0, errors = 0;
  double seconds = 0;
  std::uint64_t server_ns = 0, server_user = 0, server_system = 0;
  std::uint64_t mcp_ns = 0, mcp_ticks = 0, bench_ticks = 0, busy_ticks = 0;
  std::int64_t bench_us = 0;
  std::vector<double> latency_ms;

  void add(const Snapshot& a, const Snapshot& b) {
    seconds += std::chrono::duration<double>(b.at - a.at).count();
    server_ns += b.server_ns - a.server_ns;
    server_user += b.server.user - a.server.user;
    server_system += b.server.system - a.server.system;
    mcp_ns += b.mcp_ns - a.mcp_ns;
    mcp_ticks += b.mcp.total() - a.mcp.total();
    bench_us += b.bench_us - a.bench_us;
    bench_ticks += b.bench_ticks - a.bench_ticks;
    busy_ticks += b.busy_ticks - a.busy_ticks;
  }
  double per_turn(double total) const {
    return total / static_cast<double>(std::max<std::size_t>(turns, 1));
  }
  double server_ms() const { return per_turn(static_cast<double>(server_ns) / 1e6); }
  double server_ticks_ms() const {
    return per_turn(static_cast<double>(server_user + server_system) * tick_ms());
  }
  double kernel_share() const {
    auto all = server_user + server_system;
    return all ? static_cast<double>(server_system) / static_cast<double>(all) : 0;
  }
  double mcp_ms() const { return per_turn(static_cast<double>(mcp_ns) / 1e6); }
  double bench_us_per_turn() const { return per_turn(static_cast<double>(bench_us)); }
  // What everything else on the machine used, in % of all vCPUs.
  double other_load() const {
    double other = static_cast<double>(busy_ticks) -
                   static_cast<double>(server_user + server_system + mcp_ticks + bench_ticks);
    if (seconds <= 0) return 0;
    return std::max(0.0, other * tick_ms() / 1000.0 / seconds /
                             static_cast<double>(std::thread::hardware_concurrency()));
  }
};

// ---- the driver -----------------------------------------------------------------------------

struct Run {
  Target& target;
  const Options& opt;
  pid_t server = 0;
  pid_t mcp_pid[4] = {0, 0, 0, 0};  // per MCP kind, its server's process
  fs::path read_file;
  std::unique_ptr<WsEchoClient> client;
  std::unique_ptr<WsEchoClient> open_client;  // (g) and (h): `echo` for every session
  Tally tally[kKindCount];
  std::optional<Snapshot> measured_begin, measured_end;  // the server, around all measured rounds
};

class Driver {
 public:
  explicit Driver(Run& run) : run_(run), stream_(run.target.io.get_executor()) {}

  asio::awaitable<std::string> connect() {
    co_return co_await connect_stream(stream_, run_.target.endpoint, run_.target.op_timeout);
  }

  // (h): initialize, keeping the Mcp-Session-Id, and notifications/initialized; "" or what went
  // wrong.
  asio::awaitable<std::string> initialize_served() {
    json::object init{
        {"jsonrpc", "2.0"},
        {"id", 0},
        {"method", "initialize"},
        {"params",
         json::object{{"protocolVersion", kServedProtocol},
                      {"capabilities", json::object{}},
                      {"clientInfo", json::object{{"name", program_name()}, {"version", "1"}}}}}};
    auto req = served_request(json::serialize(init));
    auto r = co_await http_call(stream_, buffer_, req, run_.target.op_timeout);
    if (!r.error.empty()) co_return "initialize: " + r.error;
    auto body = parse_json(r.res.body());
    const json::value* result =
        body && body->is_object() ? body->get_object().if_contains("result") : nullptr;
    auto* version = result ? string_field(*result, "protocolVersion") : nullptr;
    auto id = r.res.find("Mcp-Session-Id");
    if (r.res.result() != http::status::ok || !version || *version != kServedProtocol ||
        id == r.res.end() || id->value().empty())
      co_return "initialize: expected 200 with Mcp-Session-Id and protocolVersion " +
          std::string(kServedProtocol) + ", got " + std::to_string(r.res.result_int()) + " " +
          clip(r.res.body());
    mcp_session_ = std::string(id->value());
    auto note = served_request(
        json::serialize(json::object{{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}}));
    r = co_await http_call(stream_, buffer_, note, run_.target.op_timeout);
    if (!r.error.empty()) co_return "notifications/initialized: " + r.error;
    if (r.res.result() != http::status::accepted)
      co_return "notifications/initialized: expected 202, got " +
          std::to_string(r.res.result_int()) + " " + clip(r.res.body());
    co_return "";
  }

  // A session of `turns` turns of `kind`, or for (g) and (h) a block of `turns` calls; counted in
  // the kind's tally when `measured`. False when the connection broke.
  asio::awaitable<bool> session(Kind kind, int turns, bool measured) {
    Tally& t = run_.tally[static_cast<int>(kind)];
    pid_t mcp = is_mcp(kind) ? run_.mcp_pid[static_cast<int>(kind)] : 0;
    Snapshot a = snapshot(run_.server, mcp);
    std::size_t errors_before = problems().count;
    bool alive = true;
    if (is_call(kind)) {
      // No session: the calls only.
    } else if (auto err = co_await new_session(kind); !err.empty()) {
      problems().add(std::string(spec(kind).name) + ": a new session: " + err);
      alive = false;
    }
    std::vector<double> latency;
    for (int i = 0; alive && i < turns; ++i) {
      TurnOutcome outcome{};
      if (is_call(kind))
        outcome = co_await call(kind);
      else
        outcome = co_await turn(kind);
      auto [ok, ms, broken] = outcome;
      if (ok) latency.push_back(ms);
      if (broken) alive = false;
    }
    Snapshot b = snapshot(run_.server, mcp);
    if (measured) {
      t.add(a, b);
      ++t.sessions;
      t.turns += latency.size();
      t.latency_ms.insert(t.latency_ms.end(), latency.begin(), latency.end());
      t.errors += problems().count - errors_before;
    }
    co_return alive;
  }

  void close() { stream_.close(); }

 private:
  struct TurnOutcome {
    bool ok;
    double ms;
    bool broken;
  };

  asio::awaitable<std::string> new_session(Kind kind) {
    auto req = make_request(
        http::verb::post, "/session", run_.target.host,
        json::serialize(json::object{{"title", "mcp_calls " + std::string(spec(kind).name)}}));
    auto r = co_await http_call(stream_, buffer_, req, run_.target.op_timeout);
    if (!r.error.empty()) co_return r.error;
    auto body = parse_json(r.res.body());
    auto* id = body ? string_field(*body, "id") : nullptr;
    if (r.res.result() != http::status::ok || !id)
      co_return "POST /session: expected 200 {id}, got " + std::to_string(r.res.result_int()) +
          " " + clip(r.res.body());
    session_ = std::string(*id);
    if (kind == Kind::Client)
      if (auto err = co_await run_.client->register_tool(session_); !err.empty())
        co_return "register for " + session_ + ": " + err;
    co_return "";
  }

  asio::awaitable<TurnOutcome> turn(Kind kind) {
    std::string token = std::string(spec(kind).name) + " turn " + std::to_string(++turns_);
    std::string tool;
    json::object input;
    std::string expected;  // the tool's output
    if (kind == Kind::Read) {
      tool = "read";
      input = {{"filePath", run_.read_file.string()}};
      expected = kReadMarker;
    } else if (kind == Kind::Client) {
      tool = run_.client->tool_id();
      input = {{"text", token}};
      expected = token;
    } else if (spec(kind).legacy) {
      tool = std::string(spec(kind).server) + "_echo";
      input = {{"message", token}};
      expected = "Echo: " + token;
    } else {
      tool = std::string(spec(kind).server) + "_echo";
      input = {{"text", token}};
      expected = token;
    }
    std::string text = "/call " + tool + " " + json::serialize(input);
    auto req = make_request(
        http::verb::post, "/session/" + session_ + "/message", run_.target.host,
        json::serialize(
            json::object{{"parts", json::array{json::object{{"type", "text"}, {"text", text}}}}}));
    auto check = [&](const http::response<http::string_body>& res) {
      return check_turn(res, expected, kind == Kind::Read);
    };
    auto outcome = co_await timed(token, std::move(req), check);
    co_return outcome;
  }

  // Sends `req` and times its round trip; `check` says what is wrong with the answer ("" when
  // nothing is). A problem is counted under `token`.
  template <class Check>
  asio::awaitable<TurnOutcome> timed(std::string token, http::request<http::string_body> req,
                                     Check check) {
    auto t0 = Clock::now();
    auto r = co_await http_call(stream_, buffer_, req, run_.target.op_timeout);
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (!r.error.empty()) {
      problems().add(token + ": " + r.error);
      co_return TurnOutcome{false, ms, true};
    }
    if (auto err = check(r.res); !err.empty()) {
      problems().add(token + ": " + err);
      co_return TurnOutcome{false, ms, false};
    }
    co_return TurnOutcome{true, ms, false};
  }

  // One call of the open client tool: (g) POST /client-tools/execute, (h) tools/call.
  asio::awaitable<TurnOutcome> call(Kind kind) {
    std::string token = std::string(spec(kind).name) + " call " + std::to_string(++turns_);
    std::string tool = run_.open_client->tool_id();
    json::object input{{"text", token}};
    std::int64_t id = ++rpc_id_;
    http::request<http::string_body> req;
    if (kind == Kind::Execute)
      req = make_request(http::verb::post, "/client-tools/execute", run_.target.host,
                         json::serialize(json::object{{"tool", tool}, {"input", input}}));
    else
      req = served_request(json::serialize(
          json::object{{"jsonrpc", "2.0"},
                       {"id", id},
                       {"method", "tools/call"},
                       {"params", json::object{{"name", tool}, {"arguments", input}}}}));
    auto check = [&](const http::response<http::string_body>& res) {
      return kind == Kind::Execute ? check_execute(res, token) : check_served_call(res, id, token);
    };
    auto outcome = co_await timed(token, std::move(req), check);
    co_return outcome;
  }

  // A POST to /client-tools/mcp as a 2025-11-25 host sends it: after initialize, with the
  // session and the protocol version.
  http::request<http::string_body> served_request(std::string body) {
    auto req =
        make_request(http::verb::post, "/client-tools/mcp", run_.target.host, std::move(body));
    req.set(http::field::accept, "application/json, text/event-stream");
    if (!mcp_session_.empty()) {
      req.set("Mcp-Session-Id", mcp_session_);
      req.set("MCP-Protocol-Version", kServedProtocol);
    }
    return req;
  }

  // 200 {status: "success", output: the echoed text}.
  static std::string check_execute(const http::response<http::string_body>& res,
                                   const std::string& expected) {
    auto body = parse_json(res.body());
    auto* status = body ? string_field(*body, "status") : nullptr;
    auto* output = body ? string_field(*body, "output") : nullptr;
    if (res.result() != http::status::ok || !status || *status != "success" || !output ||
        *output != expected)
      return "POST /client-tools/execute: expected 200 {status: success, output: \"" +
             clip(expected, 100) + "\"}, got " + std::to_string(res.result_int()) + " " +
             clip(res.body());
    return "";
  }

  // 200 {jsonrpc, id, result: {content: [{type: text, text: the echoed text}], isError: false}}.
  static std::string check_served_call(const http::response<http::string_body>& res,
                                       std::int64_t id, const std::string& expected) {
    auto body = parse_json(res.body());
    const json::object* o = body ? body->if_object() : nullptr;
    const json::value* got_id = o ? o->if_contains("id") : nullptr;
    const json::value* result = o ? o->if_contains("result") : nullptr;
    const json::object* r = result ? result->if_object() : nullptr;
    const json::value* content = r ? r->if_contains("content") : nullptr;
    const json::value* is_error = r ? r->if_contains("isError") : nullptr;
    bool ok = res.result() == http::status::ok && got_id && got_id->is_int64() &&
              got_id->get_int64() == id && is_error && is_error->is_bool() &&
              !is_error->get_bool() && content && content->is_array() &&
              content->get_array().size() == 1;
    if (ok) {
      const json::value& part = content->get_array()[0];
      auto* type = string_field(part, "type");
      auto* text = string_field(part, "text");
      ok = type && *type == "text" && text && *text == expected;
    }
    if (!ok)
      return "tools/call: expected 200 {id: " + std::to_string(id) +
             ", result: {content: [{type: text, text: \"" + clip(expected, 100) +
             "\"}], isError: false}}, got " + std::to_string(res.result_int()) + " " +
             clip(res.body());
    return "";
  }

  // 200 {info, parts}: an assistant message that finished with "stop", no error, and the
  // scripted model's text for a tool result: "Tool results:\n" and the output (which for `read`
  // only has to contain `expected`).
  static std::string check_turn(const http::response<http::string_body>& res,
                                const std::string& expected, bool contains) {
    std::string text;
    if (auto wrong = assistant_text(res, text); !wrong.empty()) return wrong;
    constexpr std::string_view kPrefix = "Tool results:\n";
    bool ok = text.starts_with(kPrefix) &&
              (contains ? text.find(expected) != std::string::npos
                        : std::string_view(text).substr(kPrefix.size()) == expected);
    if (!ok)
      return "expected the text \"Tool results:\\n" + clip(expected, 100) + "\", got \"" +
             clip(text) + "\"";
    return "";
  }

  Run& run_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::string session_;
  std::string mcp_session_;  // (h)
  std::int64_t rpc_id_ = 0;
  int turns_ = 0;
};

// GET /mcp until every server in `names` is connected and offers NAME_echo.
asio::awaitable<void> wait_connected(Target& target, const std::vector<std::string>& names,
                                     std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  std::string last;
  for (;;) {
    beast::tcp_stream stream(target.io.get_executor());
    if (auto err = co_await connect_stream(stream, target.endpoint, target.op_timeout);
        !err.empty())
      throw Fatal("GET /mcp: " + err);
    beast::flat_buffer buffer;
    auto req = make_request(http::verb::get, "/mcp", target.host, "");
    auto r = co_await http_call(stream, buffer, req, target.op_timeout);
    if (!r.error.empty()) throw Fatal(r.error);
    last = r.res.body();
    auto body = parse_json(last);
    bool all = body && body->is_object();
    for (const auto& name : names) {
      if (!all) break;
      const json::value* entry = body->get_object().if_contains(name);
      auto* status = entry ? string_field(*entry, "status") : nullptr;
      const json::value* tools =
          entry && entry->is_object() ? entry->get_object().if_contains("tools") : nullptr;
      bool echo = false;
      if (tools && tools->is_array())
        for (const auto& t : tools->get_array())
          echo = echo || (t.is_string() && t.get_string() == name + "_echo");
      all = status && *status == "connected" && echo;
    }
    if (all) co_return;
    if (Clock::now() > deadline)
      throw Fatal("the MCP servers did not all connect within " + std::to_string(timeout.count()) +
                  " ms; GET /mcp: " + clip(last, 2000));
    co_await sleep_for(100ms);
  }
}

asio::awaitable<void> run_all(Run& run, const std::vector<std::string>& mcp_names) {
  const Options& opt = run.opt;
  co_await wait_connected(run.target, mcp_names, opt.connect_timeout);
  std::cerr << "MCP servers connected: " << mcp_names.size() << std::endl;
  // The stdio servers are Switchboard's children.
  for (Kind k : {Kind::StdioLegacy, Kind::StdioModern}) {
    if (!opt.has(k)) continue;
    auto found =
        children_of(run.server, k == Kind::StdioLegacy ? "server-everything" : "modern_server.mjs");
    if (found.size() != 1)
      throw Fatal("expected one " + std::string(spec(k).name) +
                  " process under the server, found " + std::to_string(found.size()));
    run.mcp_pid[static_cast<int>(k)] = found.front();
  }

  Latch client_ended(run.target.io.get_executor(), 0);
  if (opt.has(Kind::Client)) {
    run.client = std::make_unique<WsEchoClient>(run.target, "bench-0");
    if (auto err = co_await run.client->connect(); !err.empty()) throw Fatal("client: " + err);
    client_ended.add();
    asio::co_spawn(run.target.io, run.client->serve(), [&](std::exception_ptr e) {
      if (e) problems().add("client: " + describe(e));
      client_ended.count_down();
    });
  }

  if (opt.has(Kind::Execute) || opt.has(Kind::ServedMcp)) {
    run.open_client = std::make_unique<WsEchoClient>(run.target, "bench-open");
    if (auto err = co_await run.open_client->connect(); !err.empty())
      throw Fatal("open client: " + err);
    if (auto err = co_await run.open_client->register_tool(); !err.empty())
      throw Fatal("open client: register: " + err);
    client_ended.add();
    asio::co_spawn(run.target.io, run.open_client->serve(), [&](std::exception_ptr e) {
      if (e) problems().add("open client: " + describe(e));
      client_ended.count_down();
    });
  }

  Driver driver(run);
  if (auto err = co_await driver.connect(); !err.empty()) throw Fatal("driver: " + err);
  if (opt.has(Kind::ServedMcp))
    if (auto err = co_await driver.initialize_served(); !err.empty())
      throw Fatal("/client-tools/mcp: " + err);
  bool alive = true;
  std::cerr << "warm-up: " << opt.warmup_sessions << " sessions of " << opt.session_turns
            << " turns per kind" << std::endl;
  for (int s = 0; alive && s < opt.warmup_sessions; ++s)
    for (Kind k : opt.kinds)
      if (alive) alive = co_await driver.session(k, opt.session_turns, false);

  int rounds = (opt.turns + opt.session_turns - 1) / opt.session_turns;
  std::cerr << "measured: " << rounds << " rounds of one session per kind" << std::endl;
  run.measured_begin = snapshot(run.server, 0);
  for (int r = 0; alive && r < rounds; ++r) {
    int turns = std::min(opt.session_turns, opt.turns - r * opt.session_turns);
    std::vector<Kind> order = opt.kinds;
    if (r % 2 == 1) std::reverse(order.begin(), order.end());
    for (Kind k : order)
      if (alive) alive = co_await driver.session(k, turns, true);
    if ((r + 1) % 20 == 0) std::cerr << "  round " << r + 1 << " of " << rounds << std::endl;
  }
  run.measured_end = snapshot(run.server, 0);
  if (!alive) problems().add("the driver's connection broke; the run stopped early");
  driver.close();
  if (run.client || run.open_client) {
    run.target.stopping = true;
    for (auto* c : {&run.client, &run.open_client})
      if (*c) (*c)->close();
    if (!co_await client_ended.wait(10s)) throw Fatal("the WebSocket clients did not end");
    run.target.stopping = false;
  }
}

// ---- report ---------------------------------------------------------------------------------

std::string ratio(double v, double base) {
  return base > 0 ? fmt(v / base, 2) : "n/a";
}

// The turn kinds against (e), with their MCP server's CPU; or (`calls`) the single calls, (g) and
// (h), against (g).
void print_table(const Options& opt, const Run& run, bool calls) {
  Kind base_kind = calls ? Kind::Execute : Kind::Client;
  std::string b = calls ? "(g)" : "(e)", unit = calls ? "call" : "turn";
  const Tally& base = run.tally[static_cast<int>(base_kind)];
  bool have_base = opt.has(base_kind) && base.turns > 0;
  double base_cpu = have_base ? base.server_ms() : 0;
  double base_p50 = have_base ? percentile(base.latency_ms, 0.5) : 0;
  double base_p99 = have_base ? percentile(base.latency_ms, 0.99) : 0;
  std::cout << "| " << unit << " | " << unit << "s | server CPU ms/" << unit << " | x " << b
            << " | - " << b << " ms | of which kernel % | utime+stime ms/" << unit
            << " | p50 ms | x " << b << " | p99 ms | x " << b << " |"
            << (calls ? "" : " MCP server (node) CPU ms/turn |") << " bench µs/" << unit
            << " | other load % | errors |\n"
            << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" << (calls ? "" : "---:|")
            << "---:|---:|---:|\n";
  for (Kind k : opt.kinds) {
    if (is_call(k) != calls) continue;
    const Tally& t = run.tally[static_cast<int>(k)];
    if (t.turns == 0) {
      std::cout << "| " << spec(k).label << " | 0 | | | | | | | | | | |" << (calls ? "" : " |")
                << " | " << t.errors << " |\n";
      continue;
    }
    double p50 = percentile(t.latency_ms, 0.5), p99 = percentile(t.latency_ms, 0.99);
    std::cout << "| " << spec(k).label << " | " << fmt_int(static_cast<double>(t.turns)) << " | "
              << fmt(t.server_ms(), 3) << " | " << ratio(t.server_ms(), base_cpu) << " | "
              << (have_base ? fmt(t.server_ms() - base_cpu, 3) : "n/a") << " | "
              << fmt(t.kernel_share() * 100, 0) << " | " << fmt(t.server_ticks_ms(), 3) << " | "
              << fmt(p50, 2) << " | " << ratio(p50, base_p50) << " | " << fmt(p99, 2) << " | "
              << ratio(p99, base_p99) << " | ";
    if (!calls) std::cout << (is_mcp(k) ? fmt(t.mcp_ms(), 3) : "") << " | ";
    std::cout << fmt_int(t.bench_us_per_turn()) << " | " << fmt(t.other_load() * 100, 0) << " | "
              << t.errors << " |\n";
  }
}

void print_report(const Options& opt, const Run& run, const std::string& load_before) {
  std::cout << "### mcp_calls results\n\n"
            << "- machine: " << std::thread::hardware_concurrency() << " vCPUs, " << cpu_model()
            << ", Linux " << linux_release() << "\n"
            << "- load average before / after the run: " << load_before << " / " << load_average()
            << "\n"
            << "- server: `" << opt.server.path << "`"
            << (opt.server.prefix.empty() ? "" : " under a --server-prefix tool") << "\n"
            << "- " << opt.turns << " measured turns per kind in sessions of " << opt.session_turns
            << " (after " << opt.warmup_sessions
            << " warm-up sessions per kind), the kinds a session at a time\n\n";

  bool any_turn =
      std::any_of(opt.kinds.begin(), opt.kinds.end(), [](Kind k) { return !is_call(k); });
  if (any_turn) print_table(opt, run, false);
  if (opt.has(Kind::Execute) || opt.has(Kind::ServedMcp)) {
    std::cout << (any_turn ? "\n" : "")
              << "Single calls of an open client tool (no session, no model; not turns):\n\n";
    print_table(opt, run, true);
  }
  if (run.measured_begin && run.measured_end) {
    const Snapshot &a = *run.measured_begin, &b = *run.measured_end;
    std::cout << "\nThe server over all measured sessions: "
              << fmt(static_cast<double>(b.server_ns - a.server_ns) / 1e6, 0)
              << " ms on CPU by schedstat, "
              << fmt(static_cast<double>(b.server.total() - a.server.total()) * tick_ms(), 0)
              << " ms by utime + stime, in "
              << fmt(std::chrono::duration<double>(b.at - a.at).count(), 1) << " s.\n";
  }
  std::cout << "\nErrors: " << problems().count << "\n";
  for (const auto& p : problems().first)
    std::cout << "- " << clip(p, 500) << "\n";
  std::cout << std::flush;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt = parse_or_exit("mcp_calls", kUsage, [&] { return parse_options(argc, argv); });
  begin_run("mcp_calls", opt.max_runtime_s);
  std::string load_before = load_average();

  try {
    require_server(opt.server);
    if (!fs::exists(everything_script(opt)))
      throw Fatal("no " + everything_script(opt).string() +
                  " (install the MCP test servers: scripts/npm-deps.sh tests/mcp)");
    RunDirectory temp("mcp-calls", opt.keep_temp);
    asio::io_context io(1);

    // The remote servers first, then Switchboard with all four in its config.
    std::optional<HttpMcpServer> modern_http, everything_http;
    if (opt.has(Kind::HttpModern)) modern_http = start_modern_http(opt, temp);
    if (opt.has(Kind::HttpLegacy)) everything_http = start_everything_http(opt, temp, io);
    json::object mcp;
    std::vector<std::string> mcp_names;
    for (Kind k : opt.kinds) {
      if (!is_mcp(k)) continue;
      std::string name(spec(k).server);
      mcp_names.push_back(name);
      json::object entry;
      if (k == Kind::StdioLegacy)
        entry = {{"type", "local"},
                 {"command", json::array{"node", everything_script(opt).string(), "stdio"}}};
      else if (k == Kind::StdioModern)
        entry = {{"type", "local"}, {"command", json::array{"node", modern_script(opt).string()}}};
      else
        entry = {{"type", "remote"},
                 {"url", "http://127.0.0.1:" +
                             std::to_string(k == Kind::HttpModern ? modern_http->port
                                                                  : everything_http->port) +
                             "/mcp"}};
      mcp[name] = std::move(entry);
    }
    Setup setup = server_setup(opt, temp, mcp);
    auto server = start_server(opt.server, setup.options);

    Target target = Target::loopback(io, server->port(), opt.op_timeout);
    Run run{target, opt, server->pid()};
    if (modern_http) run.mcp_pid[static_cast<int>(Kind::HttpModern)] = modern_http->process->pid();
    if (everything_http)
      run.mcp_pid[static_cast<int>(Kind::HttpLegacy)] = everything_http->process->pid();
    run.read_file = setup.project / "notes.txt";

    std::exception_ptr failure = run_to_end(io, run_all(run, mcp_names));
    if (failure) {
      temp.keep();
      problems().add("the run stopped: " + describe(failure));
      std::cerr << "server log:\n" << log_tail(*server) << std::endl;
      print_report(opt, run, load_before);
      leave(1);
    }
    stop_server(*server, opt.server.patience());
    for (auto* s : {&modern_http, &everything_http})
      if (*s) (*s)->process->terminate(5s);
    if (problems().count > 0) temp.keep();
    print_report(opt, run, load_before);
    return problems().count == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "mcp_calls: " << e.what() << std::endl;
    return 1;
  }
}
