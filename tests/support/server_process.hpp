#pragma once
// Test support: runs the real `switchboard` binary (path from SWITCHBOARD_BINARY) as a child
// process with its own HOME and working directory, so no user configuration leaks in.
//
// ServerProcess starts `switchboard serve --hostname 127.0.0.1 --port 0 --config <tmp>/config.json`
// and waits for the "listening on http://127.0.0.1:PORT" log line; its stderr is drained on a
// thread into a buffer (so the pipe never blocks) that tests print when something fails.
// run_switchboard() runs the binary to completion and captures its output, for start-up errors.
//
// Not thread-safe except where noted: use one object from one test thread (log() and
// wait_for_log() may be called from any thread).
#include <boost/json.hpp>

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace sb::test {

using namespace std::chrono_literals;

// A fresh directory under $TMPDIR, removed with its contents on destruction.
class TempDir {
 public:
  explicit TempDir(std::string_view prefix = "switchboard-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// How a child process ended.
struct ExitStatus {
  bool exited = false;  // normal exit: `code` is valid
  int code = -1;
  bool signaled = false;  // killed by `signal`
  int signal = 0;
  std::string describe() const;  // "exit code 0", "killed by signal 9"
};

// Writes `text` to `path`, creating parent directories.
void write_file(const std::filesystem::path& path, std::string_view text);

class ServerProcess {
 public:
  struct Options {
    boost::json::object config;  // written to <tmp>/config.json and passed with --config
    std::vector<std::string> extra_args;
    std::chrono::milliseconds startup_timeout{10000};
    // --data-dir; default: the server's own (~/.local/share/switchboard under the temporary HOME).
    // A test that restarts a server passes the same directory to both.
    std::optional<std::filesystem::path> data_dir;
    // --directory, the project directory tools work in; default: the server's working directory.
    std::optional<std::filesystem::path> directory;
    // RLIMIT_FSIZE for the server, with SIGXFSZ ignored: a write past this many bytes of one file
    // fails (EFBIG) as a full disk would, instead of killing the process. Default: no limit.
    std::optional<std::uint64_t> max_file_bytes;
    // NAME=VALUE entries added to the server's environment (which has no SWITCHBOARD_ variables
    // of the test's own).
    std::vector<std::string> env;
    // The executable to start; default: SWITCHBOARD_BINARY, the one this build made.
    std::optional<std::filesystem::path> binary;
  };

  // Starts the server and waits until it listens. Throws std::runtime_error (with the captured
  // log) when it exits first or does not listen within the timeout.
  explicit ServerProcess(boost::json::object config);
  explicit ServerProcess(Options options);
  // SIGTERM, then SIGKILL if it has not exited within 5 s.
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  pid_t pid() const { return pid_; }
  unsigned short port() const { return port_; }
  const std::filesystem::path& config_path() const { return config_path_; }
  const std::filesystem::path& home() const { return home_.path(); }
  const std::filesystem::path& working_directory() const { return work_.path(); }

  void send_signal(int signal);
  // Waits for the process to end and reaps it; nullopt if it is still running at the deadline.
  std::optional<ExitStatus> wait_exit(std::chrono::milliseconds timeout);
  bool running();

  // Everything the server wrote to stderr so far. Any thread.
  std::string log() const;
  // Waits until the log contains `needle`. Any thread.
  bool wait_for_log(std::string_view needle, std::chrono::milliseconds timeout) const;

 private:
  void start();
  void stop();

  Options options_;
  TempDir home_{"switchboard-home"};
  TempDir work_{"switchboard-cwd"};
  std::filesystem::path config_path_;
  pid_t pid_ = -1;
  unsigned short port_ = 0;
  std::optional<ExitStatus> exit_;

  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::string log_;
  bool log_closed_ = false;
  std::thread drain_;  // reads the child's stdout+stderr pipe into log_
};

struct RunResult {
  std::optional<ExitStatus> status;  // nullopt: still running at the deadline (then killed)
  std::string stderr_text;
  std::string stdout_text;
  std::filesystem::path config_path;  // the --config file, when one was written
  std::filesystem::path home;         // $HOME of the run (removed after the call)
};

struct RunOptions {
  std::optional<std::string> config_text;       // written to <tmp>/config.json, passed as --config
  std::optional<std::string> home_config_text;  // written to $HOME/.config/switchboard/config.json
  std::optional<std::string> cwd_config_text;   // written to <cwd>/.switchboard/config.json
  std::vector<std::string> args = {"serve", "--hostname", "127.0.0.1", "--port", "0"};
  std::chrono::milliseconds timeout{10000};
};

// Runs the binary to completion (killing it at the deadline) and captures its output.
RunResult run_switchboard(const RunOptions& options);

}  // namespace sb::test
