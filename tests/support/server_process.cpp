#include "server_process.hpp"

#include "test_postgres.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#ifndef SWITCHBOARD_BINARY
#error "SWITCHBOARD_BINARY must name the switchboard executable"
#endif

extern char** environ;

namespace sb::test {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr std::string_view kListening = "listening on http://127.0.0.1:";

std::runtime_error sys_error(const std::string& what) {
  return std::runtime_error(what + ": " + std::strerror(errno));
}

// The parent's environment without anything that could point the server at a user's files or
// a real model's keys; with `check_api_doc`, every answer checked against the server's OpenAPI
// document (GET /doc: a mismatch is a 500).
std::vector<std::string> child_environment(const fs::path& home, bool check_api_doc = true) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    auto name = kv.substr(0, kv.find('='));
    if (name == "HOME" || name.starts_with("XDG_") || name.starts_with("SWITCHBOARD_") ||
        name.starts_with("OPENAI_") || name.starts_with("ANTHROPIC_"))
      continue;
    env.emplace_back(kv);
  }
  env.push_back("HOME=" + home.string());
  if (check_api_doc) env.push_back("SWITCHBOARD_CHECK_API_DOC=1");
  return env;
}

// fork + exec with stdin from /dev/null and stdout/stderr on the given descriptors. Everything
// the child needs is prepared before fork(): between fork and exec only async-signal-safe calls.
// `forked_at`, when given, receives the time just before the fork.
pid_t spawn(const std::vector<std::string>& args, const fs::path& cwd,
            const std::vector<std::string>& env, int out_fd, int err_fd,
            rlim_t max_file_bytes = RLIM_INFINITY, Clock::time_point* forked_at = nullptr) {
  std::vector<char*> argv;
  for (const auto& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : env)
    envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const std::string dir = cwd.string();
  const pid_t parent = getpid();

  if (forked_at) *forked_at = Clock::now();
  pid_t pid = fork();
  if (pid < 0) throw sys_error("fork");
  if (pid == 0) {
    // A crashed or killed test run must not leave servers behind. (The signal follows the
    // forking thread: servers are started from the test's main thread.)
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, 0);
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    if (chdir(dir.c_str()) != 0) _exit(126);
    syscall(SYS_close_range, 3u, ~0u, 0u);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGPIPE, &dfl, nullptr);
    sigaction(SIGTERM, &dfl, nullptr);
    sigaction(SIGINT, &dfl, nullptr);
    if (max_file_bytes != RLIM_INFINITY) {
      struct rlimit limit {
        max_file_bytes, max_file_bytes
      };
      setrlimit(RLIMIT_FSIZE, &limit);
      struct sigaction ignore {};
      ignore.sa_handler = SIG_IGN;  // stays ignored across execve
      sigaction(SIGXFSZ, &ignore, nullptr);
    }
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  return pid;
}

ExitStatus decode(int status) {
  ExitStatus s;
  if (WIFEXITED(status)) {
    s.exited = true;
    s.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    s.signaled = true;
    s.signal = WTERMSIG(status);
  }
  return s;
}

// Polls waitpid until the child ends or the deadline passes.
std::optional<ExitStatus> reap(pid_t pid, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  for (;;) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return decode(status);
    if (r < 0 && errno != EINTR) throw sys_error("waitpid");
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(5ms);
  }
}

std::string config_args_hint(const std::vector<std::string>& args) {
  std::string out;
  for (const auto& a : args)
    out += (out.empty() ? "" : " ") + a;
  return out;
}

// An executable named without a slash, looked up in PATH (execve does not).
std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string_view dirs = path ? path : "/usr/bin:/bin";
  while (!dirs.empty()) {
    auto colon = dirs.find(':');
    auto dir = dirs.substr(0, colon);
    if (!dir.empty()) {
      fs::path candidate = fs::path(dir) / name;
      if (access(candidate.c_str(), X_OK) == 0) return candidate.string();
    }
    if (colon == std::string_view::npos) break;
    dirs.remove_prefix(colon + 1);
  }
  throw std::runtime_error(name + " not found in PATH");
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// The port of a complete "listening on http://127.0.0.1:PORT" line of `log`.
std::optional<unsigned short> listening_port(const std::string& log) {
  std::size_t at = log.find(kListening);
  // The whole line must have arrived before the port is read.
  if (at == std::string::npos || log.find('\n', at) == std::string::npos) return std::nullopt;
  std::size_t p = at + kListening.size();
  unsigned long port = 0;
  std::size_t digits = 0;
  while (p < log.size() && log[p] >= '0' && log[p] <= '9' && digits < 6) {
    port = port * 10 + static_cast<unsigned long>(log[p] - '0');
    ++p;
    ++digits;
  }
  if (digits == 0 || port == 0 || port >= 65536) return std::nullopt;
  return static_cast<unsigned short>(port);
}

}  // namespace

// ---- TempDir ----------------------------------------------------------------------------------

TempDir::TempDir(std::string_view prefix) {
  std::string pattern = (fs::temp_directory_path() / (std::string(prefix) + "-XXXXXX")).string();
  if (!mkdtemp(pattern.data())) throw sys_error("mkdtemp " + pattern);
  path_ = pattern;
}

TempDir::~TempDir() {
  if (keep_) return;
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string ExitStatus::describe() const {
  if (exited) return "exit code " + std::to_string(code);
  if (signaled) return "killed by signal " + std::to_string(signal);
  return "unknown status";
}

void write_file(const fs::path& path, std::string_view text) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

// ---- ServerProcess ----------------------------------------------------------------------------

ServerProcess::ServerProcess(boost::json::object config)
    : ServerProcess(Options{std::move(config), {}, std::chrono::milliseconds{10000}}) {}

ServerProcess::ServerProcess(Options options) : options_(std::move(options)) {
  try {
    start();
    if (options_.wait_listening) wait_listening(options_.startup_timeout);
  } catch (...) {
    stop();
    throw;
  }
}

ServerProcess::~ServerProcess() {
  stop();
}

std::vector<std::string> ServerProcess::command_line() const {
  std::vector<std::string> args = options_.prefix;
  if (!args.empty()) args[0] = find_program(args[0]);
  if (options_.command) {
    args.insert(args.end(), options_.command->begin(), options_.command->end());
    return args;
  }
  std::vector<std::string> serve = {options_.binary.value_or(SWITCHBOARD_BINARY).string(),
                                    "serve",
                                    "--hostname",
                                    "127.0.0.1",
                                    "--port",
                                    std::to_string(options_.port),
                                    "--config",
                                    config_path_.string()};
  args.insert(args.end(), serve.begin(), serve.end());
  if (options_.data_dir) {
    args.push_back("--data-dir");
    args.push_back(options_.data_dir->string());
  }
  if (options_.directory) {
    args.push_back("--directory");
    args.push_back(options_.directory->string());
  }
  args.insert(args.end(), options_.extra_args.begin(), options_.extra_args.end());
  return args;
}

void ServerProcess::start() {
  if (options_.files) {
    home_ = *options_.files / "home";
    work_ = *options_.files / "cwd";
    fs::create_directories(home_);
    fs::create_directories(work_);
    config_path_ = *options_.files / "config.json";
    log_path_ = *options_.files / "server.log";
  } else {
    home_ = own_home_.emplace("switchboard-home").path();
    work_ = own_work_.emplace("switchboard-cwd").path();
    config_path_ = work_ / "config.json";
  }
  port_ = options_.port;
  write_file(config_path_, boost::json::serialize(options_.config));
  std::vector<std::string> args = command_line();
  auto env = child_environment(home_, options_.check_api_doc);
  // The suites' PostgreSQL pass: the server keeps its store in a schema named after its data
  // directory (a restart on the same directory finds what it stored), fresh for a server of its
  // own home. Not for a test that names a store of its own.
  bool own_store = std::any_of(options_.env.begin(), options_.env.end(), [](const std::string& e) {
    return e.rfind("SWITCHBOARD_DATABASE_URL=", 0) == 0;
  });
  if (storage_is_postgres() && !own_store)
    env.push_back("SWITCHBOARD_DATABASE_URL=" +
                  postgres_schema_url(
                      schema_name_for((options_.data_dir ? *options_.data_dir : home_).string()),
                      !options_.data_dir));
  env.insert(env.end(), options_.env.begin(), options_.env.end());
  rlim_t max_file_bytes = options_.max_file_bytes.value_or(RLIM_INFINITY);

  if (!log_path_.empty()) {
    // The output goes to the file as it is written; log() reads the file.
    int fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw sys_error("cannot create " + log_path_.string());
    try {
      pid_ = spawn(args, work_, env, fd, fd, max_file_bytes, &started_);
    } catch (...) {
      close(fd);
      throw;
    }
    close(fd);
    return;
  }

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw sys_error("pipe2");
  try {
    pid_ = spawn(args, work_, env, fds[1], fds[1], max_file_bytes, &started_);
  } catch (...) {
    close(fds[0]);
    close(fds[1]);
    throw;
  }
  close(fds[1]);

  // stdout and stderr share the pipe; one thread drains it for the whole life of the process.
  drain_ = std::thread([this, fd = fds[0]] {
    char buf[4096];
    for (;;) {
      ssize_t n = read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      std::lock_guard lock(mutex_);
      if (n <= 0) {
        log_closed_ = true;
        changed_.notify_all();
        break;
      }
      log_.append(buf, static_cast<std::size_t>(n));
      changed_.notify_all();
    }
    close(fd);
  });
}

template <class Done>
bool ServerProcess::wait_log_until(Clock::time_point deadline, Done done) const {
  if (!log_path_.empty()) {
    // A file has no end to wait on: poll it.
    for (;;) {
      if (done(read_file(log_path_), false)) return true;
      if (Clock::now() >= deadline) return false;
      std::this_thread::sleep_for(2ms);
    }
  }
  std::unique_lock lock(mutex_);
  return changed_.wait_until(lock, deadline, [&] { return done(log_, log_closed_); });
}

unsigned short ServerProcess::wait_listening(std::chrono::milliseconds timeout) {
  std::optional<unsigned short> port;
  bool ended = false;
  bool ok = wait_log_until(Clock::now() + timeout, [&](const std::string& log, bool closed) {
    port = listening_port(log);
    // Output to a file does not close: the process's exit says no more will come (and once it
    // has exited, everything it wrote is in the file).
    if (!port && !closed && !log_path_.empty() && !running()) port = listening_port(this->log());
    ended = closed || exit_.has_value();
    return port || ended;
  });
  if (port) {
    port_ = *port;
    return port_;
  }
  std::string why = !ok ? "no \"" + std::string(kListening) + "PORT\" line within " +
                              std::to_string(timeout.count()) + " ms"
                        : "it exited (or closed stderr) before listening";
  if (exit_) why += " (" + exit_->describe() + ")";
  throw std::runtime_error("switchboard did not start (" + config_args_hint(command_line()) +
                           "): " + why + "\n--- server log ---\n" + log() +
                           "--- end of server log ---");
}

std::optional<ExitStatus> ServerProcess::terminate(std::chrono::milliseconds grace) {
  if (pid_ <= 0 || exit_) return exit_;
  ::kill(pid_, SIGTERM);
  exit_ = reap(pid_, grace);
  if (exit_) return exit_;
  ::kill(pid_, SIGKILL);
  exit_ = reap(pid_, 5000ms);
  return std::nullopt;
}

void ServerProcess::stop() {
  terminate(5000ms);
  if (drain_.joinable()) drain_.join();
}

void ServerProcess::send_signal(int signal) {
  if (pid_ > 0 && !exit_) ::kill(pid_, signal);
}

std::optional<ExitStatus> ServerProcess::wait_exit(std::chrono::milliseconds timeout) {
  if (!exit_ && pid_ > 0) exit_ = reap(pid_, timeout);
  return exit_;
}

bool ServerProcess::running() {
  if (exit_ || pid_ <= 0) return false;
  exit_ = reap(pid_, 0ms);
  return !exit_;
}

std::string ServerProcess::log() const {
  if (!log_path_.empty()) return read_file(log_path_);
  std::lock_guard lock(mutex_);
  return log_;
}

bool ServerProcess::wait_for_log(std::string_view needle, std::chrono::milliseconds timeout) const {
  bool found = false;
  wait_log_until(Clock::now() + timeout, [&](const std::string& log, bool closed) {
    found = log.find(needle) != std::string::npos;
    return found || closed;
  });
  return found;
}

// ---- run_switchboard --------------------------------------------------------------------------

RunResult run_switchboard(const RunOptions& options) {
  TempDir home("switchboard-home");
  TempDir work("switchboard-cwd");
  RunResult result;
  result.home = home.path();
  std::vector<std::string> args = {SWITCHBOARD_BINARY};
  args.insert(args.end(), options.args.begin(), options.args.end());
  if (options.config_text) {
    result.config_path = work.path() / "config.json";
    write_file(result.config_path, *options.config_text);
    args.push_back("--config");
    args.push_back(result.config_path.string());
  }
  if (options.home_config_text)
    write_file(home.path() / ".config" / "switchboard" / "config.json", *options.home_config_text);
  if (options.cwd_config_text)
    write_file(work.path() / ".switchboard" / "config.json", *options.cwd_config_text);

  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) throw sys_error("pipe2");
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    throw sys_error("pipe2");
  }
  pid_t pid = -1;
  try {
    pid = spawn(args, work.path(), child_environment(home.path()), out[1], err[1]);
  } catch (...) {
    for (int fd : {out[0], out[1], err[0], err[1]})
      close(fd);
    throw;
  }
  close(out[1]);
  close(err[1]);

  // Drain both pipes until both close or the deadline passes.
  auto deadline = Clock::now() + options.timeout;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.stdout_text, &result.stderr_text};
  int open_count = 2;
  while (open_count > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    int r = poll(fds, 2, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_count;
      }
    }
  }
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  result.status = reap(pid, std::max(left, 0ms));
  if (!result.status) {
    ::kill(pid, SIGKILL);
    reap(pid, 5000ms);
  }
  for (auto& f : fds)
    if (f.fd >= 0) close(f.fd);
  return result;
}

}  // namespace sb::test
