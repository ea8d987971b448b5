#include "support/run.hpp"

#include <signal.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>

namespace bench {

using namespace std::chrono_literals;

void Problems::add(const std::string& message) {
  ++count;
  if (first.size() < 20) {
    first.push_back(message);
    std::cerr << "error: " << message << std::endl;
  } else if (first.size() == 20) {
    first.emplace_back("(further errors not shown)");
    std::cerr << "error: further errors are counted but not shown" << std::endl;
  }
}

Problems& problems() {
  static Problems list;
  return list;
}

namespace {

std::string& program() {
  static std::string name = "bench";
  return name;
}

// Written before the alarm can fire: the handler may only make async-signal-safe calls.
char g_alarm_message[160];
std::size_t g_alarm_message_size = 0;

void on_alarm(int) {
  ssize_t ignored = ::write(2, g_alarm_message, g_alarm_message_size);
  (void)ignored;
  ::_exit(3);
}

}  // namespace

void begin_run(std::string_view name, int max_runtime_s) {
  program() = std::string(name);
  int n = std::snprintf(g_alarm_message, sizeof g_alarm_message,
                        "%s: --max-runtime exceeded; killing the server\n", program().c_str());
  g_alarm_message_size =
      n > 0 ? std::min<std::size_t>(static_cast<std::size_t>(n), sizeof g_alarm_message - 1) : 0;
  std::signal(SIGPIPE, SIG_IGN);
  std::signal(SIGALRM, on_alarm);
  ::alarm(static_cast<unsigned>(max_runtime_s));
}

const std::string& program_name() {
  return program();
}

void leave(int status) {
  std::cout << std::flush;
  std::cerr << std::flush;
  std::_Exit(status);
}

// ---- the command line -----------------------------------------------------------------------

void for_each_flag(int argc, char** argv, std::string_view usage,
                   const std::function<bool(std::string_view flag, const FlagValue& value)>& each) {
  for (int i = 1; i < argc; ++i) {
    std::string_view flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::cout << usage;
      std::exit(0);
    }
    FlagValue value = [&]() -> std::string_view {
      if (i + 1 >= argc) throw std::invalid_argument(std::string(flag) + " needs a value");
      return argv[++i];
    };
    if (!each(flag, value)) throw std::invalid_argument("unknown option " + std::string(flag));
  }
}

std::vector<std::string> split_list(std::string_view s, char separator) {
  std::vector<std::string> out;
  while (!s.empty()) {
    auto comma = s.find(separator);
    auto item = s.substr(0, comma);
    if (!item.empty()) out.emplace_back(item);
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return out;
}

std::vector<std::string> split_words(std::string_view s) {
  std::istringstream words{std::string(s)};
  std::vector<std::string> out;
  for (std::string w; words >> w;)
    out.push_back(w);
  return out;
}

int parse_count(std::string_view flag, std::string_view text, int min, int max) {
  int value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || ptr != text.data() + text.size() || value < min || value > max)
    throw std::invalid_argument(std::string(flag) + " needs a number from " + std::to_string(min) +
                                " to " + std::to_string(max) + ", got \"" + std::string(text) +
                                "\"");
  return value;
}

double parse_seconds(std::string_view flag, std::string_view text) {
  char* end = nullptr;
  std::string s(text);
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !(v > 0) || v > 3600)
    throw std::invalid_argument(std::string(flag) + " needs a number of seconds (0 < s <= 3600)");
  return v;
}

fs::path default_server_path() {
  std::error_code ec;
  auto self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    auto beside = self.parent_path() / "switchboard";
    if (fs::exists(beside, ec)) return beside;
  }
  return fs::path("build/release/switchboard");
}

void raise_fd_limit(std::size_t needed, std::string_view advice) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) throw Fatal("getrlimit failed");
  // As root the hard limit can be raised too (up to fs.nr_open); otherwise this fails quietly
  // and the check below explains.
  if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max < needed) {
    rlimit higher{needed, needed};
    if (::setrlimit(RLIMIT_NOFILE, &higher) == 0) lim = higher;
  }
  lim.rlim_cur = lim.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &lim) != 0)
    throw Fatal(std::string("setrlimit(RLIMIT_NOFILE): ") + std::strerror(errno));

  if (lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < needed)
    throw Fatal("RLIMIT_NOFILE is " + std::to_string(lim.rlim_cur) + " (hard limit), " +
                std::to_string(needed) + " needed: " + std::string(advice));
  std::cerr << "open-file limit raised to " << lim.rlim_cur << " (the servers inherit it)"
            << std::endl;
}

// ---- the server under test ------------------------------------------------------------------

std::chrono::milliseconds ServerCommand::patience() const {
  return prefix.empty() ? 10s : 120s;
}

ServerProcess::Options server_options(const ServerCommand& command, const fs::path& dir,
                                      boost::json::object config) {
  ServerProcess::Options o;
  o.config = std::move(config);
  o.startup_timeout = command.patience();
  o.binary = command.path;
  o.prefix = command.prefix;
  o.files = dir;
  o.check_api_doc = false;  // the tests' check of every answer is not what a user's server does
  o.env.emplace_back("SWITCHBOARD_LOOP_LAG=1");
  o.env.insert(o.env.end(), command.env.begin(), command.env.end());
  return o;
}

void require_server(const ServerCommand& command) {
  if (!fs::exists(command.path))
    throw Fatal("no server binary at " + command.path + " (build it, or pass --server PATH)");
}

std::unique_ptr<ServerProcess> start_server(const ServerCommand& command,
                                            ServerProcess::Options options) {
  auto server = std::make_unique<ServerProcess>(std::move(options));
  std::cerr << "started " << command.path << " (pid " << server->pid() << ", port "
            << server->port() << ", log " << server->log_path().string() << ")" << std::endl;
  return server;
}

std::string log_tail(const ServerProcess& server, std::size_t bytes) {
  std::string text = server.log();
  if (text.size() > bytes) text = "..." + text.substr(text.size() - bytes);
  return text;
}

void stop_server(ServerProcess& server, std::chrono::milliseconds grace, const std::string& what) {
  if (!server.running()) {
    problems().add(what + " exited during the scenario (" +
                   server.wait_exit(0ms).value_or(sb::test::ExitStatus{}).describe() + "); log:\n" +
                   log_tail(server));
    return;
  }
  std::string error;
  if (auto status = server.terminate(grace); !status)
    error = "did not exit within " + std::to_string(grace.count()) + " ms of SIGTERM";
  else if (!status->exited || status->code != 0)
    error = "ended with " + status->describe() + " after SIGTERM";
  if (!error.empty()) problems().add(what + " " + error + "; log:\n" + log_tail(server));
}

RunDirectory::RunDirectory(std::string_view prefix, bool keep) : dir_(prefix) {
  if (keep) dir_.keep();
}

RunDirectory::~RunDirectory() {
  if (dir_.kept()) std::cerr << "temporary files kept in " << dir_.path().string() << std::endl;
}

fs::path RunDirectory::fresh(const std::string& name) {
  fs::path dir = dir_.path() / (name + "-" + std::to_string(++counter_));
  fs::create_directories(dir);
  return dir;
}

// ---- the report -----------------------------------------------------------------------------

std::string fmt(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string fmt_int(double v) {
  long long n = std::llround(v);
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out = n < 0 ? "-" : "";
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string clip(std::string_view s, std::size_t n) {
  return s.size() <= n ? std::string(s) : std::string(s.substr(0, n)) + "...";
}

std::string linux_release() {
  utsname u{};
  ::uname(&u);
  return u.release;
}

}  // namespace bench
