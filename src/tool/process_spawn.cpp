#include "tool/process_spawn.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <optional>
#include <system_error>
#include <vector>

#include "tool/process_groups.hpp"
#include "util/log.hpp"

extern char** environ;

namespace sb::tool {

namespace fs = std::filesystem;

std::string errno_text(int err) {
  return std::system_category().message(err);
}

namespace {

// A pipe whose ends are close-on-exec and numbered 3 or above. A server started with stdin
// closed can get fd 0 from pipe2(); dup2(0, 0) in the child would then keep close-on-exec set
// and the child would start without its stdin.
Result<std::pair<UniqueFd, UniqueFd>> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    return make_error(ErrorCode::Internal, "cannot create a pipe: " + errno_text(errno));
  std::array<UniqueFd, 2> ends{UniqueFd(fds[0]), UniqueFd(fds[1])};
  for (auto& end : ends) {
    if (end.get() >= 3) continue;
    int moved = ::fcntl(end.get(), F_DUPFD_CLOEXEC, 3);
    if (moved < 0)
      return make_error(ErrorCode::Internal, "cannot create a pipe: " + errno_text(errno));
    end.reset(moved);
  }
  return std::pair{std::move(ends[0]), std::move(ends[1])};
}

bool is_executable_file(const fs::path& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

std::vector<std::string> build_env(const std::vector<std::pair<std::string, std::string>>& extra) {
  std::vector<std::string> env;
  for (char** entry = environ; entry && *entry; ++entry) {
    std::string_view text(*entry);
    std::string_view name = text.substr(0, text.find('='));
    bool replaced =
        std::any_of(extra.begin(), extra.end(), [&](const auto& kv) { return kv.first == name; });
    if (!replaced) env.emplace_back(text);
  }
  for (const auto& [name, value] : extra)
    env.push_back(name + "=" + value);
  return env;
}

std::string search_path_of(const ProcessOptions& o) {
  for (const auto& [name, value] : o.env)
    if (name == "PATH") return value;
  const char* path = std::getenv("PATH");
  return path ? path : "/usr/local/bin:/usr/bin:/bin";
}

// What the child needs between vfork() and execve(), all of it prepared before: the child runs
// on the stack of the thread that called vfork(), in the server's memory, so it may only make
// system calls (no allocation, no locks, no exceptions).
struct ChildSetup {
  const char* exe;
  char* const* argv;
  char* const* envp;
  const char* cwd;  // null: the server's
  int stdin_fd;     // -1: /dev/null
  int out_fd;
  int err_fd;
  int report_fd;      // close-on-exec pipe; the child writes its errno here when it cannot exec
  pid_t server;       // getpid() of the server
  sigset_t defaults;  // signals set back to SIG_DFL even where the server ignores them
};

[[noreturn]] void child_failed(int report_fd) noexcept {
  int err = errno;
  while (::write(report_fd, &err, sizeof err) < 0 && errno == EINTR) {
  }
  ::_exit(127);
}

// The child side of spawn_child(): what posix_spawn's attributes and file actions did, plus
// PR_SET_PDEATHSIG, which posix_spawn has no attribute for.
[[noreturn]] void exec_child(const ChildSetup& s) noexcept {
  int report = s.report_fd;
  // A handler of the server's would run here, on the server's memory, if a signal came before
  // execve: every caught signal goes back to its default (all are blocked until then).
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction old {};
    if (sig == SIGKILL || sig == SIGSTOP || ::sigaction(sig, nullptr, &old) != 0) continue;
    bool caught = old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN;
    if (!caught && sigismember(&s.defaults, sig) != 1) continue;
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(sig, &dfl, nullptr);
  }
  if (::setpgid(0, 0) != 0) child_failed(report);
  // Die with the server, even when it is killed with SIGKILL and cannot stop us itself. The
  // signal comes when the thread that called vfork() ends: the server's event loop threads live
  // as long as the server. A server that died before this line sends nothing: we check.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) child_failed(report);
  if (::getppid() != s.server) ::_exit(127);
  if (s.stdin_fd >= 0) {
    if (::dup2(s.stdin_fd, 0) < 0) child_failed(report);
  } else {
    int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd < 0 || (null_fd != 0 && ::dup2(null_fd, 0) < 0)) child_failed(report);
    // Anything else it took (1 or 2, if they were closed) is replaced or closed below.
  }
  if (::dup2(s.out_fd, 1) < 0 || ::dup2(s.err_fd, 2) < 0) child_failed(report);
  // The server has sockets, the database and other children's pipes open; not all of them are
  // guaranteed to be close-on-exec (third-party code), so everything above stderr is closed but
  // the report pipe, which moves to 3 and stays close-on-exec.
  if (report != 3) {
    if (::dup2(report, 3) < 0 || ::fcntl(3, F_SETFD, FD_CLOEXEC) < 0) child_failed(report);
    report = 3;
  }
  ::closefrom(4);
  if (s.cwd && ::chdir(s.cwd) != 0) child_failed(report);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execve(s.exe, s.argv, s.envp);
  child_failed(report);
}

// vfork() in a function of its own, so that nothing of the caller's lives in registers or stack
// slots that the child could overwrite.
[[gnu::noinline]] pid_t vfork_exec(const ChildSetup& setup) {
  pid_t pid = ::vfork();
  if (pid == 0) exec_child(setup);
  return pid;
}

// vfork() and a careful child, as posix_spawn does internally (and Python's subprocess, Go's
// os/exec): the server's page tables are not copied, the child makes only system calls (safe
// in a multi-threaded process), and a failure to start is reported back, through a pipe. Not
// posix_spawn itself: it cannot set PR_SET_PDEATHSIG, and a launcher program re-executed for
// every tool call would cost an extra exec. (Under TSan vfork() is a fork(); the pipe works
// for both.)
Result<pid_t> spawn_child(const fs::path& exe, const ProcessOptions& o, int stdin_fd, int out_fd,
                          int err_fd) {
  std::vector<std::string> env = build_env(o.env);
  std::vector<char*> envp;
  envp.reserve(env.size() + 1);
  for (auto& e : env)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = o.argv;
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  auto report = make_pipe();
  if (!report) return report.error();

  ChildSetup setup{exe.c_str(), argv.data(), envp.data(), o.cwd.empty() ? nullptr : o.cwd.c_str(),
                   stdin_fd,    out_fd,      err_fd,      report->second.get(),
                   ::getpid(),  {}};
  // Signals the server ignores would be inherited: reset them, or `yes | head` (SIGPIPE) and
  // Ctrl-C-style stops (SIGINT, SIGTERM) misbehave in the child.
  sigemptyset(&setup.defaults);
  for (int sig : {SIGPIPE, SIGINT, SIGQUIT, SIGTERM, SIGHUP, SIGCHLD, SIGTSTP, SIGTTIN, SIGTTOU,
                  SIGXFSZ, SIGXCPU, SIGUSR1, SIGUSR2, SIGALRM})
    sigaddset(&setup.defaults, sig);

  sigset_t all, old_mask;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old_mask);
  pid_t pid = vfork_exec(setup);
  int vfork_err = errno;
  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  report->second.reset();
  std::string what = o.argv[0];
  if (pid < 0)
    return make_error(ErrorCode::Internal, "cannot start " + what + ": " + errno_text(vfork_err));

  int rc = 0;
  ssize_t n;
  while ((n = ::read(report->first.get(), &rc, sizeof rc)) < 0 && errno == EINTR) {
  }
  if (n != static_cast<ssize_t>(sizeof rc)) return pid;  // end of file: the exec closed the pipe
  int status;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (rc == EACCES) return make_error(ErrorCode::Forbidden, "permission denied: " + what);
  if (rc == ENOEXEC)
    return make_error(ErrorCode::InvalidRequest, "cannot execute " + what + ": not a program");
  if (rc == ENOENT)
    return make_error(ErrorCode::NotFound, "cannot start " + what + ": " + errno_text(rc));
  return make_error(ErrorCode::Internal, "cannot start " + what + ": " + errno_text(rc));
}

}  // namespace

Result<StartedChild> start_child(ProcessOptions& o) {
  if (!o.cwd.empty()) {
    std::error_code ec;
    if (!fs::is_directory(o.cwd, ec))
      return make_error(ErrorCode::InvalidRequest,
                        "working directory " + o.cwd.string() +
                            (fs::exists(o.cwd, ec) ? " is not a directory" : " does not exist"));
  }
  const std::string& name = o.argv[0];
  auto exe = find_executable(name, search_path_of(o), o.cwd);
  if (!exe) {
    if (name.find('/') == std::string::npos)
      return make_error(ErrorCode::NotFound, "command not found: " + name);
    fs::path p = fs::path(name).is_absolute() || o.cwd.empty() ? fs::path(name) : o.cwd / name;
    std::error_code ec;
    if (fs::exists(p, ec)) return make_error(ErrorCode::Forbidden, "permission denied: " + name);
    return make_error(ErrorCode::NotFound, "no such file: " + name);
  }

  auto out = make_pipe();
  if (!out) return out.error();
  std::optional<std::pair<UniqueFd, UniqueFd>> err;
  if (o.mode == OutputMode::Separate) {
    auto p = make_pipe();
    if (!p) return p.error();
    err = std::move(*p);
  }
  std::optional<std::pair<UniqueFd, UniqueFd>> in;
  if (o.stdin_text) {
    auto p = make_pipe();
    if (!p) return p.error();
    in = std::move(*p);
  }
  int out_write = out->second.get();
  std::string group_token;
  if (!o.group_record_dir.empty()) {
    group_token = new_group_token();
    o.env.emplace_back(kToolGroupVariable, group_token);
  }
  auto pid = spawn_child(*exe, o, in ? in->first.get() : -1, out_write,
                         err ? err->second.get() : out_write);
  if (!pid) return pid.error();
  if (!o.group_record_dir.empty())
    if (auto recorded = record_process_group(o.group_record_dir, *pid, group_token); !recorded)
      log::warn("process group ", *pid, " is not written down (", recorded.error().message,
                "): a server killed with SIGKILL would leave what it starts running");
  // The child has its copies; ours must go so that end of output is seen.
  out->second.reset();
  if (err) err->second.reset();
  if (in) in->first.reset();
  return StartedChild{*pid, std::move(out->first), err ? std::move(err->first) : UniqueFd(),
                      in ? std::move(in->second) : UniqueFd()};
}

std::optional<fs::path> find_executable(std::string_view name, std::string_view search_path,
                                        const fs::path& cwd) {
  if (name.empty()) return std::nullopt;
  auto anchored = [&](const fs::path& p) { return p.is_absolute() || cwd.empty() ? p : cwd / p; };
  if (name.find('/') != std::string_view::npos) {
    fs::path p = anchored(fs::path(name));
    if (is_executable_file(p)) return p;
    return std::nullopt;
  }
  std::size_t start = 0;
  while (start <= search_path.size()) {
    std::size_t end = search_path.find(':', start);
    if (end == std::string_view::npos) end = search_path.size();
    std::string_view dir = search_path.substr(start, end - start);
    fs::path candidate = anchored(dir.empty() ? fs::path(".") : fs::path(dir)) / name;
    if (is_executable_file(candidate)) return candidate;
    start = end + 1;
  }
  return std::nullopt;
}

std::optional<fs::path> find_executable(std::string_view name) {
  const char* path = std::getenv("PATH");
  return find_executable(name, path ? path : "/usr/local/bin:/usr/bin:/bin");
}

}  // namespace sb::tool
