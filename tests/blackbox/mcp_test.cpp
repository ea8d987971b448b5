// Black-box tests of the MCP client (issue 17): the real `switchboard serve` with MCP servers in
// its config (or added at run time) that it starts over stdio, or that the test runs itself and
// Switchboard reaches over Streamable HTTP (McpServeRemote), driven by the scripted model
// ("/call TOOL {json}" calls TOOL). The servers are the ones in tests/mcp (README.md there says
// exactly what each does): the reference `everything` and `filesystem` servers (legacy protocol),
// modern_server.mjs (the 2026-07-28 revision) and faulty_server.mjs (a server that misbehaves on
// request). What is checked is what a user sees: GET /mcp, GET /tool, the tool parts of a
// session, the events on /event, and the server's processes.
#include <gtest/gtest.h>

#include <signal.h>

#include <boost/asio/ip/tcp.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "blackbox_util.hpp"

#ifndef SWITCHBOARD_SOURCE_DIR
#error "SWITCHBOARD_SOURCE_DIR must name the source tree (for tests/mcp)"
#endif

namespace sb::test {
namespace {

namespace fs = std::filesystem;

long long elapsed_ms(Clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count();
}

// ---- the test servers ---------------------------------------------------------------------------

fs::path mcp_dir() {
  return fs::path(SWITCHBOARD_SOURCE_DIR) / "tests" / "mcp";
}

fs::path sdk_package(std::string_view name) {
  return mcp_dir() / "node_modules" / "@modelcontextprotocol" / name / "dist" / "index.js";
}

json::array everything_command() {
  return json::array{"node", sdk_package("server-everything").string(), "stdio"};
}

json::array filesystem_command(const fs::path& allowed) {
  return json::array{"node", sdk_package("server-filesystem").string(), allowed.string()};
}

json::array modern_command() {
  return json::array{"node", (mcp_dir() / "modern_server.mjs").string()};
}

json::array faulty_command(std::string_view flag = {}) {
  json::array out{"node", (mcp_dir() / "faulty_server.mjs").string()};
  if (!flag.empty()) out.emplace_back(flag);
  return out;
}

// A local (stdio) server entry of the config.
json::object local_server(json::array command, std::optional<int> timeout_ms = std::nullopt) {
  json::object out{{"type", "local"}, {"command", std::move(command)}};
  if (timeout_ms) out["timeout"] = *timeout_ms;
  return out;
}

// A remote (Streamable HTTP) server entry of the config.
json::object remote_server(const std::string& url, const json::object& headers = {}) {
  json::object out{{"type", "remote"}, {"url", url}};
  if (!headers.empty()) out["headers"] = headers;
  return out;
}

// A TCP port of 127.0.0.1 that nothing listens on at the moment (bound, then let go).
unsigned short free_port() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor acceptor(
      io, boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
  return acceptor.local_endpoint().port();
}

// Loaded into node with --import: writes the method and headers of every HTTP request the
// process receives to stderr, one line each, because neither test server shows them itself.
constexpr std::string_view kLogRequests =
    "data:text/javascript,import dc from \"node:diagnostics_channel\";"
    "dc.subscribe(\"http.server.request.start\", ({ request }) => process.stderr.write("
    "\"request \" + JSON.stringify({ method: request.method, headers: request.headers }) + "
    "\"\\n\"));";

// An MCP server over Streamable HTTP that the test runs as its own child process (stopped with
// the object): modern_server.mjs --http PORT or server-everything's streamableHttp, with
// kLogRequests loaded. Its stdout and stderr are kept (log()).
class HttpMcpServer {
 public:
  enum class Kind { Modern, Everything, Resumable };

  // Starts the server on `port` (0: any free port, for the modern server only) and waits until
  // it listens; throws (with its output) when it does not.
  HttpMcpServer(Kind kind, unsigned short port) : port_(port) {
    ServerProcess::Options o;
    o.prefix = {"node", "--import", std::string(kLogRequests)};
    if (kind == Kind::Modern) {
      o.command = {(mcp_dir() / "modern_server.mjs").string(), "--http", std::to_string(port)};
    } else if (kind == Kind::Resumable) {
      o.command = {(mcp_dir() / "resumable_server.mjs").string(), std::to_string(port)};
    } else {
      if (port == 0) throw std::logic_error("server-everything needs a port of its own");
      o.command = {sdk_package("server-everything").string(), "streamableHttp"};
      o.env = {"PORT=" + std::to_string(port)};
    }
    o.wait_listening = false;
    process_.emplace(std::move(o));
    std::string_view ready = kind == Kind::Everything ? "listening on port " : "listening on ";
    std::string text;
    std::size_t at = std::string::npos;
    auto listening = [&] {
      text = log();
      at = text.find(ready);
      return at != std::string::npos && text.find('\n', at) != std::string::npos;
    };
    if (!wait_until(listening, 15s))
      throw std::runtime_error("the MCP server did not listen within 15 s:\n" + text);
    if (port_ == 0) port_ = static_cast<unsigned short>(std::stoi(text.substr(at + ready.size())));
  }

  unsigned short port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/mcp"; }
  std::string log() const { return process_->log(); }

  // SIGKILL, and waits until the process is gone.
  void kill() {
    process_->send_signal(SIGKILL);
    process_->wait_exit(5s);
  }

  // The requests it received, as {method, headers}, in order.
  std::vector<json::value> requests() const {
    std::vector<json::value> out;
    std::istringstream lines(log());
    std::string line;
    while (std::getline(lines, line)) {
      if (!line.starts_with("request {")) continue;
      boost::system::error_code ec;
      json::value v = json::parse(std::string_view(line).substr(8), ec);
      if (!ec) out.push_back(std::move(v));
    }
    return out;
  }

 private:
  unsigned short port_;
  std::optional<ServerProcess> process_;
};

// ---- reading JSON -------------------------------------------------------------------------------

const json::array& array_at(const json::value& v, std::string_view pointer) {
  static const json::array empty;
  const json::value* p = find(v, pointer);
  return p && p->is_array() ? p->get_array() : empty;
}

std::vector<std::string> strings_in(const json::array& a) {
  std::vector<std::string> out;
  for (const auto& v : a)
    if (v.is_string()) out.emplace_back(v.get_string());
  return out;
}

bool has(const std::vector<std::string>& list, std::string_view item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

bool any_starts_with(const std::vector<std::string>& list, std::string_view prefix) {
  return std::any_of(list.begin(), list.end(),
                     [&](const std::string& s) { return s.starts_with(prefix); });
}

std::string joined(const std::vector<std::string>& list) {
  std::string out;
  for (const auto& s : list)
    out += (out.empty() ? "" : ", ") + s;
  return out;
}

// ---- processes ----------------------------------------------------------------------------------

std::optional<pid_t> parent_of(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return std::nullopt;
  auto close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(close + 2));
  char state = 0;
  pid_t ppid = 0;
  if (!(rest >> state >> ppid)) return std::nullopt;
  return ppid;
}

std::string cmdline_of(pid_t pid) {
  std::string text = read_text("/proc/" + std::to_string(pid) + "/cmdline");
  std::replace(text.begin(), text.end(), '\0', ' ');
  return text;
}

// The running children of `parent` whose command line contains `needle`.
std::vector<pid_t> children_running(pid_t parent, std::string_view needle) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    pid_t pid = static_cast<pid_t>(std::stol(name));
    if (parent_of(pid) != parent || !process_running(pid)) continue;
    if (contains(cmdline_of(pid), needle)) out.push_back(pid);
  }
  return out;
}

// ---- the fixture --------------------------------------------------------------------------------

json::object text_prompt(std::string_view text) {
  return json::object{{"parts", json::array{json::object{{"type", "text"}, {"text", text}}}}};
}

// What one "/call" turn left: the tool part as GET /session/{id}/message shows it, and every
// event on /event from the prompt until the session was idle.
struct Call {
  std::string session;
  json::value part;  // null when the turn has no part of the tool
  std::vector<json::object> events;

  std::string status() const { return string_at(part, "/state/status"); }
  std::string output() const { return string_at(part, "/state/output"); }
  std::string error() const { return string_at(part, "/state/error"); }
  std::string dump() const { return str(part); }

  // The part has one attachment: a PNG image whose base64 data starts with `data_prefix`.
  testing::AssertionResult one_png(std::string_view data_prefix = {}) const {
    const json::value* attachments = find(part, "/state/attachments");
    if (!attachments || !attachments->is_array() || attachments->get_array().size() != 1)
      return testing::AssertionFailure() << "not one attachment: " << dump();
    const json::value& a = attachments->get_array()[0];
    if (string_at(a, "/mime") != "image/png" ||
        !string_at(a, "/url").starts_with("data:image/png;base64," + std::string(data_prefix)))
      return testing::AssertionFailure()
             << "not a PNG data: URL starting with " << data_prefix << ": " << dump();
    return testing::AssertionSuccess();
  }

  // Whether /event showed the server's progress while the call ran: a message.part.updated of
  // the running part with state.metadata.progress.
  testing::AssertionResult progressed() const {
    std::string call_id = string_at(part, "/callID");
    for (const auto& e : events) {
      json::value v(e);
      if (string_at(v, "/type") == "message.part.updated" &&
          string_at(v, "/properties/part/callID") == call_id &&
          string_at(v, "/properties/part/state/status") == "running" &&
          find(v, "/properties/part/state/metadata/progress/progress"))
        return testing::AssertionSuccess();
    }
    return testing::AssertionFailure()
           << "no message.part.updated with state.metadata.progress for " << call_id
           << " while it ran (" << events.size() << " events)";
  }
};

class McpServe : public ServerTest {
 protected:
  // The scripted model (nothing configured), the test's project and data directories, and
  // `mcp` as the config's MCP servers; `extra` entries on top.
  void start_server(json::object mcp, const json::object& extra = {}) {
    json::object config = test_config();
    if (!mcp.empty()) config["mcp"] = std::move(mcp);
    for (const auto& kv : extra)
      config[kv.key()] = kv.value();
    ServerProcess::Options options;
    options.config = std::move(config);
    options.data_dir = data_.path();
    options.directory = project_.path();
    server_.emplace(std::move(options));
  }

  json::object mcp_status() {
    auto res = http_get(port(), "/mcp");
    if (res.status != 200) throw std::runtime_error("GET /mcp: " + res.describe());
    return res.json().as_object();
  }

  // GET /mcp's entry of `name` once its status is `state` (null if it never is within the
  // timeout: the last answer is in `last_mcp_`).
  json::value wait_status(const std::string& name, std::string_view state,
                          std::chrono::milliseconds timeout = 20s) {
    json::value found;
    wait_until(
        [&] {
          json::object all = mcp_status();
          last_mcp_ = all;
          if (auto it = all.find(name);
              it != all.end() && string_at(it->value(), "/status") == state) {
            found = it->value();
            return true;
          }
          return false;
        },
        timeout);
    return found;
  }

  // The tools of `name` in GET /mcp.
  std::vector<std::string> mcp_tools(const std::string& name) {
    json::object all = mcp_status();
    auto it = all.find(name);
    return it == all.end() ? std::vector<std::string>{}
                           : strings_in(array_at(it->value(), "/tools"));
  }

  // The ids of GET /tool.
  std::vector<std::string> tool_ids() {
    auto res = http_get(port(), "/tool");
    if (res.status != 200) throw std::runtime_error("GET /tool: " + res.describe());
    std::vector<std::string> out;
    json::value tools = res.json();
    for (const auto& t : array_at(tools, ""))
      out.push_back(string_at(t, "/id"));
    return out;
  }

  std::string create_session() {
    auto res = http_post(port(), "/session", json::object{});
    if (res.status != 200) throw std::runtime_error("setup: POST /session: " + res.describe());
    return string_at(res.json(), "/id");
  }

  void prompt_async(const std::string& sid, std::string_view text) {
    auto res = http_post(port(), "/session/" + sid + "/prompt_async", text_prompt(text));
    if (res.status != 204)
      throw std::runtime_error("setup: prompt_async did not answer 204: " + res.describe());
  }

  json::array messages(const std::string& sid) {
    auto res = http_get(port(), "/session/" + sid + "/message");
    if (res.status != 200)
      throw std::runtime_error("GET /session/" + sid + "/message: " + res.describe());
    return res.json().as_array();
  }

  // The last part of `tool` in the session, or null.
  json::value tool_part(const std::string& sid, std::string_view tool) {
    json::value found;
    for (const auto& m : messages(sid))
      for (const auto& p : array_at(m, "/parts"))
        if (string_at(p, "/type") == "tool" && string_at(p, "/tool") == tool) found = p;
    return found;
  }

  // A turn of a new session in which the scripted model calls `tool` with `input`.
  Call call(const std::string& tool, const json::value& input,
            std::chrono::milliseconds timeout = 30s) {
    BusEvents bus(port());
    Call c;
    c.session = create_session();
    prompt_async(c.session, "/call " + tool + " " + str(input));
    c.events = bus.until_idle(c.session, timeout);
    c.part = tool_part(c.session, tool);
    return c;
  }

  // Waits until `name` is connected and offers `tool` (servers may announce tools late).
  testing::AssertionResult connected_with(const std::string& name, const std::string& tool,
                                          std::chrono::milliseconds timeout = 20s) {
    json::value got;
    bool ok = wait_until(
        [&] {
          json::object all = mcp_status();
          last_mcp_ = all;
          auto it = all.find(name);
          if (it == all.end() || string_at(it->value(), "/status") != "connected") return false;
          got = it->value();
          return has(strings_in(array_at(got, "/tools")), tool);
        },
        timeout);
    if (ok) return testing::AssertionSuccess();
    return testing::AssertionFailure() << name << " is not connected with " << tool << " within "
                                       << timeout.count() << " ms; GET /mcp: " << str(last_mcp_);
  }

  // faulty_ok answers "ok": the server serves calls.
  void expect_faulty_ok() {
    Call ok = call("faulty_ok", json::object{});
    EXPECT_EQ(ok.status(), "completed") << ok.dump();
    EXPECT_EQ(ok.output(), "ok") << ok.dump();
  }

  // The tools of server-everything, connected as "everything", work: echo, get-tiny-image (an
  // attachment), trigger-long-running-operation with `long_running` (progress on /event) and
  // get-roots-list (the server asks Switchboard for roots/list: the project directory).
  void expect_everything_tools_work(const json::object& long_running) {
    Call echo = call("everything_echo", json::object{{"message", "hi"}});
    EXPECT_EQ(echo.status(), "completed") << echo.dump();
    EXPECT_TRUE(contains(echo.output(), "Echo: hi")) << echo.dump();

    Call image = call("everything_get-tiny-image", json::object{});
    EXPECT_EQ(image.status(), "completed") << image.dump();
    EXPECT_TRUE(image.one_png());

    Call slow = call("everything_trigger-long-running-operation", long_running);
    EXPECT_EQ(slow.status(), "completed") << slow.dump();
    EXPECT_TRUE(contains(slow.output(), "Long running operation completed")) << slow.dump();
    EXPECT_TRUE(slow.progressed());

    Call roots = call("everything_get-roots-list", json::object{});
    EXPECT_EQ(roots.status(), "completed") << roots.dump();
    EXPECT_TRUE(names_project(roots.output()))
        << "expected " << project_dir() << " in " << roots.dump();
  }

  // The tools of modern_server.mjs, connected as "modern", work: echo, slow (progress on
  // /event), add_tool (the new tool is announced, offered, and answers), picture (an
  // attachment and its caption), and fail (the part ends in error with the server's text).
  void expect_modern_tools_work() {
    Call echo = call("modern_echo", json::object{{"text", "hello modern"}});
    EXPECT_EQ(echo.status(), "completed") << echo.dump();
    EXPECT_EQ(echo.output(), "hello modern") << echo.dump();

    Call slow = call("modern_slow", json::object{{"steps", 3}, {"ms", 200}});
    EXPECT_EQ(slow.status(), "completed") << slow.dump();
    EXPECT_TRUE(contains(slow.output(), "done after 3 steps")) << slow.dump();
    EXPECT_TRUE(slow.progressed());

    Call added = call("modern_add_tool", json::object{{"name", "extra"}});
    EXPECT_EQ(added.status(), "completed") << added.dump();
    EXPECT_TRUE(contains(added.output(), "added extra")) << added.dump();
    EXPECT_TRUE(connected_with("modern", "modern_extra", 10s))
        << "the list_changed notification did not bring the new tool";
    EXPECT_TRUE(has(tool_ids(), "modern_extra"));
    Call extra = call("modern_extra", json::object{});
    EXPECT_EQ(extra.status(), "completed") << extra.dump();
    EXPECT_TRUE(contains(extra.output(), "this is extra")) << extra.dump();

    Call picture = call("modern_picture", json::object{});
    EXPECT_EQ(picture.status(), "completed") << picture.dump();
    EXPECT_TRUE(picture.one_png("iVBORw0KGgo"));
    EXPECT_TRUE(contains(picture.output(), "a 1x1 red pixel")) << picture.dump();

    Call fail = call("modern_fail", json::object{});
    EXPECT_EQ(fail.status(), "error") << fail.dump();
    EXPECT_TRUE(contains(fail.error(), "this tool always fails")) << fail.dump();
  }

  // Starts NAME_slow of a modern_server (50 steps, 200 ms apart) in a new session, waits for its
  // first progress, and aborts the turn: the part must end in error at once and the session be
  // idle; `server_heard()` must hold (the MCP server stopped the call: it says so on its stderr),
  // and the server must stay connected and answer NAME_echo.
  void expect_abort_stops_slow_call(const std::string& name,
                                    const std::function<bool()>& server_heard) {
    const std::string slow = name + "_slow";
    BusEvents bus(port());
    std::string sid = create_session();
    prompt_async(sid, "/call " + slow + " " + str(json::object{{"steps", 50}, {"ms", 200}}));
    // Running on the MCP server: its first progress arrived.
    bool progressing = false;
    auto deadline = Clock::now() + 10s;
    while (!progressing && Clock::now() < deadline) {
      auto e = bus.next("message.part.updated", 1s);
      if (e && string_at(json::value(*e), "/properties/part/tool") == slow &&
          find(json::value(*e), "/properties/part/state/metadata/progress"))
        progressing = true;
    }
    ASSERT_TRUE(progressing) << "no progress from " << slow;
    auto t0 = Clock::now();
    ASSERT_TRUE(IsOk(http_post(port(), "/session/" + sid + "/abort", json::object{})));
    bus.until_idle(sid, 5s);
    EXPECT_LT(elapsed_ms(t0), 3000) << "the abort took too long";
    json::value part = tool_part(sid, slow);
    EXPECT_EQ(string_at(part, "/state/status"), "error") << str(part);
    auto status = http_get(port(), "/session/status");
    EXPECT_FALSE(status.json().as_object().contains(sid))
        << "the session is not idle: " << status.describe();
    EXPECT_TRUE(server_heard()) << "the MCP server did not hear of the cancellation";

    EXPECT_TRUE(wait_status(name, "connected", 1s).is_object()) << str(last_mcp_);
    Call echo = call(name + "_echo", json::object{{"text", "still here"}});
    EXPECT_EQ(echo.status(), "completed") << echo.dump();
    EXPECT_EQ(echo.output(), "still here") << echo.dump();
  }

  std::string project_dir() const { return project_.path().string(); }
  // The project directory, as written or with symlinks resolved: both name it.
  bool names_project(std::string_view text, std::string_view prefix = {}) const {
    std::string plain = std::string(prefix) + project_.path().string();
    std::string real = std::string(prefix) + fs::canonical(project_.path()).string();
    return contains(text, plain) || contains(text, real);
  }

  TempDir data_{"switchboard-data"};
  TempDir project_{"switchboard-mcp-project"};
  json::object last_mcp_;
};

// ---- 1. server-everything -----------------------------------------------------------------------

TEST_F(McpServe, EverythingServerOverStdioOffersItsToolsAndTheyWork) {
  start_server(json::object{{"everything", local_server(everything_command())}});
  // get-roots-list is registered after initialization (the client declares roots).
  ASSERT_TRUE(connected_with("everything", "everything_get-roots-list"));
  json::value entry = wait_status("everything", "connected");
  EXPECT_EQ(string_at(entry, "/protocolVersion"), "2025-11-25") << str(entry);
  auto tools = strings_in(array_at(entry, "/tools"));
  EXPECT_TRUE(has(tools, "everything_echo")) << joined(tools);
  EXPECT_FALSE(find(entry, "/error")) << str(entry);
  auto offered = tool_ids();
  EXPECT_TRUE(has(offered, "everything_echo")) << joined(offered);
  // MCP tools come after the built-in ones.
  auto echo_at = std::find(offered.begin(), offered.end(), "everything_echo");
  auto bash_at = std::find(offered.begin(), offered.end(), "bash");
  EXPECT_LT(bash_at, echo_at) << joined(offered);

  expect_everything_tools_work(json::object{{"duration", 2}, {"steps", 4}});

  Call links = call("everything_get-resource-links", json::object{{"count", 2}});
  EXPECT_EQ(links.status(), "completed") << links.dump();
  EXPECT_TRUE(contains(links.output(), "Resource link: ")) << links.dump();
  EXPECT_TRUE(contains(links.output(), "(demo://resource/dynamic/")) << links.dump();
}

// ---- 2. server-filesystem and permissions -------------------------------------------------------

TEST_F(McpServe, AnAskRuleOnMcpToolsAsksWithTheToolIdAndOnceLetsTheCallRun) {
  write_file(project_.path() / "notes.txt", "the notes of the project\n");
  start_server(json::object{{"fs", local_server(filesystem_command(project_.path()))}},
               json::object{{"permission", json::object{{"fs_*", "ask"}}}});
  ASSERT_TRUE(connected_with("fs", "fs_read_text_file"));

  BusEvents bus(port());
  std::string sid = create_session();
  std::string file = (project_.path() / "notes.txt").string();
  prompt_async(sid, "/call fs_read_text_file " + str(json::object{{"path", file}}));
  auto asked = bus.next("permission.asked", 15s);
  ASSERT_TRUE(asked) << "no permission.asked event";
  json::value a(*asked);
  EXPECT_EQ(string_at(a, "/properties/permission"), "fs_read_text_file") << str(a);
  EXPECT_EQ(string_at(a, "/properties/sessionID"), sid) << str(a);
  std::string id = string_at(a, "/properties/id");
  ASSERT_TRUE(
      IsOk(http_post(port(), "/permission/" + id + "/reply", json::object{{"reply", "once"}})));
  bus.until_idle(sid, 30s);
  json::value part = tool_part(sid, "fs_read_text_file");
  EXPECT_EQ(string_at(part, "/state/status"), "completed") << str(part);
  EXPECT_TRUE(contains(string_at(part, "/state/output"), "the notes of the project")) << str(part);
}

TEST_F(McpServe, ADenyRuleOnMcpToolsKeepsThemOutOfTheToolList) {
  start_server(json::object{{"fs", local_server(filesystem_command(project_.path()))}},
               json::object{{"permission", json::object{{"fs_*", "deny"}}}});
  ASSERT_TRUE(connected_with("fs", "fs_read_text_file"));
  auto offered = tool_ids();
  EXPECT_FALSE(any_starts_with(offered, "fs_")) << joined(offered);
  EXPECT_TRUE(has(offered, "bash")) << joined(offered);
}

// ---- 3. modern_server (2026-07-28) --------------------------------------------------------------

TEST_F(McpServe, ModernServerSpeaksTheStatelessRevision) {
  start_server(json::object{{"modern", local_server(modern_command())}});
  ASSERT_TRUE(connected_with("modern", "modern_echo"));
  json::value entry = wait_status("modern", "connected");
  EXPECT_EQ(string_at(entry, "/protocolVersion"), "2026-07-28") << str(entry);

  expect_modern_tools_work();

  Call structured = call("modern_structured", json::object{});
  EXPECT_EQ(structured.status(), "completed") << structured.dump();
  EXPECT_TRUE(contains(structured.output(), "\"n\":42")) << structured.dump();

  // A failed call does not end the connection.
  EXPECT_TRUE(wait_status("modern", "connected", 1s).is_object()) << str(last_mcp_);
}

// ---- 4. faulty_server ---------------------------------------------------------------------------

TEST_F(McpServe, FaultyServerToolsOverTwoPagesAndStrayOutputAreHandled) {
  start_server(json::object{{"faulty", local_server(faulty_command())}});
  ASSERT_TRUE(connected_with("faulty", "faulty_ok"));
  auto tools = mcp_tools("faulty");
  std::vector<std::string> expected{
      "faulty_ok",       "faulty_crash", "faulty_hang",   "faulty_garbage", "faulty_huge",
      "faulty_wrong_id", "faulty_flood", "faulty_stderr", "faulty_roots",   "faulty_elicit"};
  EXPECT_EQ(tools.size(), expected.size()) << joined(tools);
  auto offered = tool_ids();
  for (const auto& t : expected) {
    EXPECT_TRUE(has(tools, t)) << t << " is not in GET /mcp: " << joined(tools);
    EXPECT_TRUE(has(offered, t)) << t << " is not in GET /tool: " << joined(offered);
  }

  expect_faulty_ok();

  Call garbage = call("faulty_garbage", json::object{});
  EXPECT_EQ(garbage.status(), "completed") << garbage.dump();
  EXPECT_EQ(garbage.output(), "after garbage") << garbage.dump();

  Call wrong_id = call("faulty_wrong_id", json::object{});
  EXPECT_EQ(wrong_id.status(), "completed") << wrong_id.dump();
  EXPECT_EQ(wrong_id.output(), "right id") << wrong_id.dump();

  Call flood = call("faulty_flood", json::object{}, 60s);
  EXPECT_EQ(flood.status(), "completed") << flood.dump();
  EXPECT_EQ(flood.output(), "after flood") << flood.dump();

  Call stderr_call = call("faulty_stderr", json::object{});
  EXPECT_EQ(stderr_call.status(), "completed") << stderr_call.dump();
  EXPECT_TRUE(server().wait_for_log("hello from stderr", 2s)) << "its stderr is not in the log";

  Call roots = call("faulty_roots", json::object{});
  EXPECT_EQ(roots.status(), "completed") << roots.dump();
  EXPECT_TRUE(names_project(roots.output(), "file://"))
      << "expected file://" << project_dir() << " in " << roots.dump();

  EXPECT_TRUE(wait_status("faulty", "connected", 1s).is_object())
      << "the server did not stay connected: " << str(last_mcp_);
}

TEST_F(McpServe, ACallNotAnsweredInTimeFailsAndTheServerStaysConnected) {
  start_server(json::object{{"faulty", local_server(faulty_command(), 1500)}});
  ASSERT_TRUE(connected_with("faulty", "faulty_hang"));
  auto t0 = Clock::now();
  Call hang = call("faulty_hang", json::object{});
  EXPECT_EQ(hang.status(), "error") << hang.dump();
  EXPECT_TRUE(contains(hang.error(), "MCP server faulty did not answer tools/call within 1500 ms"))
      << hang.dump();
  EXPECT_LT(elapsed_ms(t0), 10000) << "the timeout took far longer than 1500 ms";

  json::value entry = wait_status("faulty", "connected", 1s);
  EXPECT_TRUE(entry.is_object()) << "the server did not stay connected: " << str(last_mcp_);
  expect_faulty_ok();
}

TEST_F(McpServe, AServerThatCrashesFailsItsCallLosesItsToolsAndCanBeReconnected) {
  start_server(json::object{{"faulty", local_server(faulty_command())}});
  ASSERT_TRUE(connected_with("faulty", "faulty_crash"));

  Call crash = call("faulty_crash", json::object{});
  EXPECT_EQ(crash.status(), "error") << crash.dump();
  EXPECT_TRUE(contains(crash.error(), "MCP server faulty stopped")) << crash.dump();

  json::value entry = wait_status("faulty", "failed", 5s);
  ASSERT_TRUE(entry.is_object()) << str(last_mcp_);
  EXPECT_TRUE(contains(string_at(entry, "/error"), "code 3")) << str(entry);
  EXPECT_TRUE(array_at(entry, "/tools").empty()) << str(entry);
  auto offered = tool_ids();
  EXPECT_FALSE(any_starts_with(offered, "faulty_")) << joined(offered);

  auto connect = http_post(port(), "/mcp/faulty/connect", json::object{});
  ASSERT_TRUE(IsOk(connect));
  ASSERT_TRUE(connected_with("faulty", "faulty_ok"));
  EXPECT_TRUE(has(tool_ids(), "faulty_ok"));
  expect_faulty_ok();
}

TEST_F(McpServe, AMessageOverTheSizeLimitEndsTheCallAndTheConnection) {
  start_server(json::object{{"faulty", local_server(faulty_command())}});
  ASSERT_TRUE(connected_with("faulty", "faulty_huge"));
  Call huge = call("faulty_huge", json::object{});
  EXPECT_EQ(huge.status(), "error") << huge.dump();
  EXPECT_TRUE(contains(huge.error(), "faulty")) << huge.dump();

  json::value entry = wait_status("faulty", "failed", 5s);
  ASSERT_TRUE(entry.is_object()) << str(last_mcp_);
  std::string error = string_at(entry, "/error");
  EXPECT_TRUE(contains(error, "it sent a message over 16777216 bytes"))
      << "the reason does not name the size limit: " << str(entry);
  EXPECT_FALSE(any_starts_with(tool_ids(), "faulty_"));
}

// A server that asks the person for input (elicitation/create) gets the person's answer: the
// request becomes a question in the session (question.asked), and the reply is the server's
// "accept" with the answer as its content.
TEST_F(McpServe, AServerAskingForInputAsksThePerson) {
  start_server(json::object{{"faulty", local_server(faulty_command())}});
  ASSERT_TRUE(connected_with("faulty", "faulty_elicit"));
  BusEvents bus(port());
  std::string sid = create_session();
  prompt_async(sid, "/call faulty_elicit {}");
  auto asked = bus.next_where("question.asked", "/properties/sessionID", json::value(sid), 15s);
  ASSERT_TRUE(asked) << "no question.asked for the server's elicitation/create; the part: "
                     << str(tool_part(sid, "faulty_elicit"));
  json::value q(*asked);
  EXPECT_TRUE(contains(str(q), "Your name?")) << str(q);
  EXPECT_EQ(string_at(json::value(http_get(port(), "/session/status").json()), "/" + sid + "/type"),
            "awaiting-input");
  std::string id = string_at(q, "/properties/id");
  ASSERT_TRUE(IsOk(http_post(port(), "/question/" + id + "/reply",
                             json::object{{"answers", json::array{json::array{"Ann"}}}})));
  bus.until_idle(sid, 15s);
  json::value part = tool_part(sid, "faulty_elicit");
  EXPECT_EQ(string_at(part, "/state/status"), "completed") << str(part);
  EXPECT_EQ(string_at(part, "/state/output"), "hello Ann") << str(part);
  EXPECT_TRUE(wait_status("faulty", "connected", 1s).is_object()) << str(last_mcp_);
}

TEST_F(McpServe, AServerThatCannotStartFailsSayingWhy) {
  start_server(json::object{
      {"faulty", local_server(faulty_command("--exit-at-start"))},
      {"missing", local_server(json::array{"switchboard-test-no-such-program", "--stdio"})}});
  json::value entry = wait_status("faulty", "failed", 15s);
  ASSERT_TRUE(entry.is_object()) << str(last_mcp_);
  std::string error = string_at(entry, "/error");
  EXPECT_TRUE(contains(error, "code 1")) << str(entry);
  EXPECT_TRUE(contains(error, "boom"))
      << "its stderr's last line is not in the reason: " << str(entry);
  EXPECT_TRUE(array_at(entry, "/tools").empty()) << str(entry);

  json::value missing = wait_status("missing", "failed", 5s);
  ASSERT_TRUE(missing.is_object()) << str(last_mcp_);
  EXPECT_TRUE(contains(string_at(missing, "/error"), "command not found")) << str(missing);
  EXPECT_TRUE(contains(string_at(missing, "/error"), "switchboard-test-no-such-program"))
      << str(missing);
}

TEST_F(McpServe, StartUpDoesNotWaitForServersAndASilentOneFailsAfterItsTimeout) {
  start_server(json::object{{"silent", local_server(faulty_command("--no-answer"), 1500)},
                            {"mute", local_server(faulty_command("--no-answer"), 600000)}});
  auto started = server().started();
  // The server answers at once although neither MCP server has answered anything.
  auto t0 = Clock::now();
  auto health = http_get(port(), "/health");
  EXPECT_EQ(health.status, 200u) << health.describe();
  EXPECT_LT(elapsed_ms(t0), 1000) << "GET /health was slow while servers were connecting";
  json::object all = mcp_status();
  EXPECT_EQ(string_at(json::value(all), "/mute/status"), "connecting") << str(all);

  json::value entry = wait_status("silent", "failed", 15s);
  ASSERT_TRUE(entry.is_object()) << str(last_mcp_);
  EXPECT_LT(elapsed_ms(started), 10000)
      << "a 1500 ms timeout took too long to fail: " << str(entry);
  EXPECT_TRUE(contains(string_at(entry, "/error"), "did not answer")) << str(entry);
  EXPECT_EQ(string_at(json::value(mcp_status()), "/mute/status"), "connecting");
  EXPECT_EQ(http_get(port(), "/health").status, 200u);
}

// ---- 5. the routes ------------------------------------------------------------------------------

TEST_F(McpServe, ServersCanBeAddedConnectedAndDisconnectedAtRunTime) {
  start_server(json::object{});
  EXPECT_TRUE(mcp_status().empty()) << str(mcp_status());

  auto added = http_post(
      port(), "/mcp", json::object{{"name", "faulty"}, {"config", local_server(faulty_command())}});
  ASSERT_TRUE(IsOk(added));
  std::string state = string_at(added.json(), "/faulty/status");
  EXPECT_TRUE(state == "connecting" || state == "connected") << added.describe();
  ASSERT_TRUE(connected_with("faulty", "faulty_ok"));
  EXPECT_TRUE(has(tool_ids(), "faulty_ok"));
  Call ok = call("faulty_ok", json::object{});
  EXPECT_EQ(ok.status(), "completed") << ok.dump();

  // Bad configs are refused with the field named, and change nothing.
  auto no_command = http_post(
      port(), "/mcp", json::object{{"name", "bad"}, {"config", json::object{{"type", "local"}}}});
  EXPECT_EQ(no_command.status, 400u) << no_command.describe();
  EXPECT_TRUE(contains(no_command.error_message(), "command")) << no_command.describe();
  json::object unknown = local_server(faulty_command());
  unknown["foo"] = 1;
  auto unknown_field =
      http_post(port(), "/mcp", json::object{{"name", "bad"}, {"config", unknown}});
  EXPECT_EQ(unknown_field.status, 400u) << unknown_field.describe();
  EXPECT_TRUE(contains(unknown_field.error_message(), "foo")) << unknown_field.describe();
  auto no_config = http_post(port(), "/mcp", json::object{{"name", "bad"}});
  EXPECT_EQ(no_config.status, 400u) << no_config.describe();
  EXPECT_FALSE(mcp_status().contains("bad")) << str(mcp_status());

  EXPECT_EQ(http_post(port(), "/mcp/nope/connect", json::object{}).status, 404u);
  EXPECT_EQ(http_post(port(), "/mcp/nope/disconnect", json::object{}).status, 404u);

  BusEvents bus(port());
  ASSERT_TRUE(IsOk(http_post(port(), "/mcp/faulty/disconnect", json::object{})));
  json::value entry = wait_status("faulty", "disabled", 5s);
  ASSERT_TRUE(entry.is_object()) << str(last_mcp_);
  EXPECT_TRUE(array_at(entry, "/tools").empty()) << str(entry);
  EXPECT_FALSE(any_starts_with(tool_ids(), "faulty_"));
  auto event = bus.next_where("mcp.status", "/properties/name", json::value("faulty"), 5s);
  ASSERT_TRUE(event) << "no mcp.status event for the disconnect";
  EXPECT_EQ(string_at(json::value(*event), "/properties/status"), "disabled") << str(*event);
}

// ---- 6. the config ------------------------------------------------------------------------------

TEST(McpServeConfig, AnUnknownFieldOfAServerStopsStartUpNamingIt) {
  RunOptions options;
  options.config_text =
      str(json::object{{"mcp", json::object{{"tools", json::object{{"type", "local"},
                                                                   {"command", json::array{"node"}},
                                                                   {"foo", 1}}}}}});
  RunResult run = run_switchboard(options);
  ASSERT_TRUE(run.status.has_value()) << "the server started despite the bad config; stderr:\n"
                                      << run.stderr_text;
  EXPECT_TRUE(run.status->exited && run.status->code != 0) << run.status->describe();
  EXPECT_TRUE(contains(run.stderr_text, "mcp.tools.foo")) << run.stderr_text;
  EXPECT_FALSE(contains(run.stderr_text, "listening on")) << run.stderr_text;
}

// ---- 7. batch -----------------------------------------------------------------------------------

TEST_F(McpServe, TheBatchToolRefusesMcpTools) {
  start_server(json::object{{"everything", local_server(everything_command())}},
               json::object{{"experimental", json::object{{"batch_tool", true}}}});
  ASSERT_TRUE(connected_with("everything", "everything_echo"));
  json::object input{
      {"tool_calls", json::array{json::object{{"tool", "everything_echo"},
                                              {"parameters", json::object{{"message", "x"}}}}}}};
  Call batch = call("batch", input);
  EXPECT_TRUE(contains(batch.output(), "External tools (MCP, environment) cannot be batched"))
      << batch.dump();
  EXPECT_FALSE(contains(batch.output(), "Echo: x")) << batch.dump();
}

// ---- 8. the servers' processes ------------------------------------------------------------------

TEST_F(McpServe, TheServersProcessesEndWithTheServer) {
  start_server(json::object{{"faulty", local_server(faulty_command())},
                            {"modern", local_server(modern_command())}});
  ASSERT_TRUE(connected_with("faulty", "faulty_ok"));
  ASSERT_TRUE(connected_with("modern", "modern_echo"));
  auto faulty = children_running(server().pid(), "faulty_server.mjs");
  auto modern = children_running(server().pid(), "modern_server.mjs");
  ASSERT_EQ(faulty.size(), 1u) << "the faulty server is not a child of the server";
  ASSERT_EQ(modern.size(), 1u) << "the modern server is not a child of the server";

  server().send_signal(SIGTERM);
  ASSERT_TRUE(exits_zero(10s));
  for (pid_t pid : {faulty[0], modern[0]})
    EXPECT_TRUE(wait_until([&] { return !process_running(pid); }, 5s))
        << "MCP server process " << pid << " (" << cmdline_of(pid) << ") outlived the server";
  for (pid_t pid : {faulty[0], modern[0]})
    if (process_running(pid)) ::kill(pid, SIGKILL);  // not left behind by a failed test
}

// ---- 9. abort -----------------------------------------------------------------------------------

TEST_F(McpServe, AbortEndsARunningCallAndTheServerStaysConnected) {
  start_server(json::object{{"modern", local_server(modern_command())}});
  ASSERT_TRUE(connected_with("modern", "modern_slow"));
  // The server's stderr is in Switchboard's log.
  expect_abort_stops_slow_call("modern",
                               [&] { return server().wait_for_log("slow: cancelled after", 5s); });
}

// ---- 10. remote servers over Streamable HTTP ----------------------------------------------------

// The MCP servers run as the test's own children, at http://127.0.0.1:PORT/mcp, and are stopped
// at its end; a failing test prints their output after Switchboard's log.
class McpServeRemote : public McpServe {
 protected:
  void TearDown() override {
    McpServe::TearDown();
    if (HasFailure())
      for (const auto& s : mcp_servers_)
        std::cerr << "--- MCP server on port " << s->port() << " ---\n"
                  << s->log() << "--- end of MCP server log ---\n";
    mcp_servers_.clear();
  }

  HttpMcpServer& start_mcp(HttpMcpServer::Kind kind, unsigned short port) {
    return *mcp_servers_.emplace_back(std::make_unique<HttpMcpServer>(kind, port));
  }
  HttpMcpServer& start_modern(unsigned short port = 0) {
    return start_mcp(HttpMcpServer::Kind::Modern, port);
  }
  HttpMcpServer& start_everything(unsigned short port) {
    return start_mcp(HttpMcpServer::Kind::Everything, port);
  }

  // Every request `mcp` received carried `header` (lower case) with `value`.
  testing::AssertionResult every_request_has(const HttpMcpServer& mcp, const std::string& header,
                                             std::string_view value) {
    auto requests = mcp.requests();
    if (requests.empty()) return testing::AssertionFailure() << "the server logged no requests";
    for (const auto& r : requests)
      if (string_at(r, "/headers/" + header) != value)
        return testing::AssertionFailure() << "a request without " << header << ": " << value
                                           << ": " << str(r) << " (of " << requests.size() << ")";
    return testing::AssertionSuccess();
  }

  // Runs an MCP server of `kind`, connected as `name`, and kills it while it is idle; then
  // NAME_echo (with `echo_input`) must end in an error naming the server, and GET /mcp must show
  // the server failed, "cannot reach". Then the MCP server starts again on the same port, and
  // Switchboard must reconnect by itself within 20 s (its automatic retries), or, if the retries
  // were used up by then, on POST /mcp/NAME/connect.
  void expect_kill_then_reconnect(HttpMcpServer::Kind kind, const std::string& name,
                                  const json::object& echo_input) {
    unsigned short mcp_port = kind == HttpMcpServer::Kind::Everything ? free_port() : 0;
    HttpMcpServer& mcp = start_mcp(kind, mcp_port);
    mcp_port = mcp.port();
    const std::string echo = name + "_echo";
    start_server(json::object{{name, remote_server(mcp.url())}});
    ASSERT_TRUE(connected_with(name, echo));

    mcp.kill();
    Call after = call(echo, echo_input);
    EXPECT_EQ(after.status(), "error") << after.dump();
    EXPECT_TRUE(contains(after.error(), "MCP server " + name)) << after.dump();

    json::value failed = wait_status(name, "failed", 5s);
    ASSERT_TRUE(failed.is_object()) << str(last_mcp_);
    EXPECT_TRUE(contains(string_at(failed, "/error"), "cannot reach")) << str(failed);
    EXPECT_TRUE(array_at(failed, "/tools").empty()) << str(failed);
    EXPECT_FALSE(any_starts_with(tool_ids(), name + "_"));

    start_mcp(kind, mcp_port);
    auto t0 = Clock::now();
    bool back = connected_with(name, echo, 20s);
    if (!back && contains(server().log(), "mcp " + name + ": trying again (5 of 5)")) {
      ASSERT_TRUE(wait_status(name, "failed", 5s).is_object()) << str(last_mcp_);
      ASSERT_TRUE(IsOk(http_post(port(), "/mcp/" + name + "/connect", json::object{})));
      back = connected_with(name, echo, 10s);
    }
    ASSERT_TRUE(back) << "not reconnected " << elapsed_ms(t0)
                      << " ms after the restart; GET /mcp: " << str(last_mcp_);
    Call again = call(echo, echo_input);
    EXPECT_EQ(again.status(), "completed") << again.dump();
  }

  std::vector<std::unique_ptr<HttpMcpServer>> mcp_servers_;
};

TEST_F(McpServeRemote, ModernServerOverHttpSpeaksTheStatelessRevision) {
  HttpMcpServer& mcp = start_modern();
  json::object headers{{"X-Switchboard-Test", "modern-header"}};
  start_server(json::object{{"modern", remote_server(mcp.url(), headers)}});
  ASSERT_TRUE(connected_with("modern", "modern_echo"));
  json::value entry = wait_status("modern", "connected");
  EXPECT_EQ(string_at(entry, "/protocolVersion"), "2026-07-28") << str(entry);
  EXPECT_FALSE(find(entry, "/error")) << str(entry);
  EXPECT_TRUE(has(tool_ids(), "modern_slow"));

  expect_modern_tools_work();

  EXPECT_TRUE(wait_status("modern", "connected", 1s).is_object()) << str(last_mcp_);
  // The config's headers, on every request; and the revision's own headers.
  EXPECT_TRUE(every_request_has(mcp, "x-switchboard-test", "modern-header"));
  EXPECT_TRUE(every_request_has(mcp, "mcp-protocol-version", "2026-07-28"));
}

TEST_F(McpServeRemote, EverythingServerOverHttpKeepsItsSessionAndAsksForRoots) {
  HttpMcpServer& mcp = start_everything(free_port());
  json::object headers{{"X-Switchboard-Test", "legacy-header"}};
  start_server(json::object{{"everything", remote_server(mcp.url(), headers)}});
  ASSERT_TRUE(connected_with("everything", "everything_echo"));
  json::value entry = wait_status("everything", "connected");
  EXPECT_EQ(string_at(entry, "/protocolVersion"), "2025-11-25") << str(entry);

  // get-roots-list is registered after initialization, and its call makes the server ask
  // Switchboard for roots/list: a request of the server's own, over the session's streams.
  ASSERT_TRUE(connected_with("everything", "everything_get-roots-list", 10s));
  expect_everything_tools_work(json::object{{"duration", 1}, {"steps", 2}});

  EXPECT_TRUE(wait_status("everything", "connected", 1s).is_object()) << str(last_mcp_);
  EXPECT_TRUE(every_request_has(mcp, "x-switchboard-test", "legacy-header"));
  // The server/discover probe (answered 400: no session), the initialize, then one session:
  // every later request carries the Mcp-Session-Id the initialize answer gave, and (as the
  // transport's spec says: MUST, on all requests after initialization) MCP-Protocol-Version.
  auto requests = mcp.requests();
  ASSERT_GE(requests.size(), 4u);
  EXPECT_EQ(string_at(requests[0], "/headers/mcp-method"), "server/discover") << str(requests[0]);
  EXPECT_EQ(string_at(requests[1], "/headers/mcp-session-id"), "") << str(requests[1]);
  std::string session = string_at(requests[2], "/headers/mcp-session-id");
  EXPECT_FALSE(session.empty()) << str(requests[2]);
  bool listened = false;
  for (std::size_t i = 2; i < requests.size(); ++i) {
    EXPECT_EQ(string_at(requests[i], "/headers/mcp-session-id"), session) << str(requests[i]);
    EXPECT_EQ(string_at(requests[i], "/headers/mcp-protocol-version"), "2025-11-25")
        << "request " << i << ": " << str(requests[i]);
    if (string_at(requests[i], "/method") == "GET") listened = true;
  }
  EXPECT_TRUE(listened) << "no GET stream for the server's own messages";
}

// A 2025-11-25 server may close a request's event stream before its answer and replay the rest
// to a GET with Last-Event-ID (SEP-1699; the v1 SDK's closeSSEStream): the call still completes
// with the answer, instead of waiting out its timeout; a stream with nothing to resume fails it.
TEST_F(McpServeRemote, ARequestStreamTheServerClosesEarlyIsResumedForItsAnswer) {
  HttpMcpServer& mcp = start_mcp(HttpMcpServer::Kind::Resumable, 0);
  start_server(json::object{{"resumable", remote_server(mcp.url())}});
  ASSERT_TRUE(connected_with("resumable", "resumable_poll"));
  Call polled = call("resumable_poll", json::object{{"word", "twice"}});
  EXPECT_EQ(polled.status(), "completed") << polled.dump();
  EXPECT_EQ(polled.output(), "polled twice") << polled.dump();
  // It was the server's closing and the resume that brought the answer.
  EXPECT_TRUE(contains(mcp.log(), "closed the stream of a poll call")) << mcp.log();
  EXPECT_TRUE(contains(mcp.log(), "resumed after ")) << mcp.log();
  // And again: the session goes on.
  Call again = call("resumable_poll", json::object{{"word", "again"}});
  EXPECT_EQ(again.output(), "polled again") << again.dump();

  // A stream that ends with no answer and no event id to resume from fails the call at once
  // (not with the timeout error mcp.NAME.timeout would give after 30 s).
  Call vanished = call("resumable_vanish", json::object{});
  EXPECT_EQ(vanished.status(), "error") << vanished.dump();
  EXPECT_TRUE(contains(vanished.error(), "ended without the answer")) << vanished.dump();
  EXPECT_TRUE(contains(mcp.log(), "ended the stream of a vanish call")) << mcp.log();
  Call after = call("resumable_poll", json::object{{"word", "still"}});
  EXPECT_EQ(after.output(), "polled still") << after.dump();
}

TEST_F(McpServeRemote, AbortEndsARunningRemoteCallAndTheServerStaysUsable) {
  HttpMcpServer& mcp = start_modern();
  start_server(json::object{{"modern", remote_server(mcp.url())}});
  ASSERT_TRUE(connected_with("modern", "modern_slow"));
  // Over HTTP the server hears of it as its response stream closing; its stderr is its own.
  expect_abort_stops_slow_call("modern", [&] {
    return wait_until([&] { return contains(mcp.log(), "slow: cancelled after"); }, 5s);
  });
}

TEST_F(McpServeRemote, AModernServerThatDiesFailsTheNextCallAndIsReconnectedWhenBack) {
  expect_kill_then_reconnect(HttpMcpServer::Kind::Modern, "modern", {{"text", "hi"}});
}

TEST_F(McpServeRemote, ALegacyServerThatDiesFailsTheNextCallAndIsReconnectedWhenBack) {
  expect_kill_then_reconnect(HttpMcpServer::Kind::Everything, "everything", {{"message", "hi"}});
}

TEST_F(McpServeRemote, AUrlWhereNothingListensFailsWithCannotReach) {
  unsigned short nowhere = free_port();
  std::string url = "http://127.0.0.1:" + std::to_string(nowhere) + "/mcp";
  start_server(json::object{{"nowhere", remote_server(url)}});
  json::value entry = wait_status("nowhere", "failed", 10s);
  ASSERT_TRUE(entry.is_object()) << str(last_mcp_);
  EXPECT_TRUE(contains(string_at(entry, "/error"), "cannot reach")) << str(entry);
  EXPECT_TRUE(contains(string_at(entry, "/error"), url)) << str(entry);
  EXPECT_TRUE(array_at(entry, "/tools").empty()) << str(entry);
  EXPECT_EQ(http_get(port(), "/health").status, 200u);

  // A server there now: POST /mcp/NAME/connect connects to it.
  start_modern(nowhere);
  ASSERT_TRUE(IsOk(http_post(port(), "/mcp/nowhere/connect", json::object{})));
  ASSERT_TRUE(connected_with("nowhere", "nowhere_echo", 10s));
  Call echo = call("nowhere_echo", json::object{{"text", "found"}});
  EXPECT_EQ(echo.status(), "completed") << echo.dump();
  EXPECT_EQ(echo.output(), "found") << echo.dump();
}

}  // namespace
}  // namespace sb::test
