#pragma once
// Test support: runs the real `switchboard` binary (path from SWITCHBOARD_BINARY) as a child
// process with its own HOME and working directory, so no user configuration leaks in.
//
// ServerProcess starts `switchboard serve --hostname 127.0.0.1 --port 0 --config <tmp>/config.json`
// and waits for the "listening on http://127.0.0.1:PORT" log line; its stderr is drained on a
// thread into a buffer (so the pipe never blocks) that tests print when something fails. The
// benchmarks start it too, with their own files, under a profiler or on a port of their own.
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

// A fresh directory under $TMPDIR, removed with its contents on destruction unless kept.
class TempDir {
 public:
  explicit TempDir(std::string_view prefix = "switchboard-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  // Leaves the directory behind (for a look at what a failed run wrote).
  void keep() { keep_ = true; }
  bool kept() const { return keep_; }

 private:
  std::filesystem::path path_;
  bool keep_ = false;
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
    // A program to run the server under, with its arguments (a profiler: "valgrind
    // --tool=massif"); a name without a slash is looked up in PATH. Default: none.
    std::vector<std::string> prefix;
    // --port; 0: the server picks a free port, read from its log.
    unsigned short port = 0;
    // Whether the constructor waits until the server listens. When false it returns right after
    // the fork (a benchmark times the start from started()), and wait_listening() waits.
    bool wait_listening = true;
    // A directory that receives HOME (home/), the working directory (cwd/), config.json and the
    // server's stdout and stderr (server.log, which log() then reads), and stays when the server
    // is gone. Default: temporary directories removed with this object, the output in memory.
    std::optional<std::filesystem::path> files;
    // The whole command line after `prefix`, instead of `BINARY serve --hostname 127.0.0.1
    // --port … --config … [--data-dir …] [--directory …] EXTRA_ARGS`: for a program that is not
    // switchboard but logs "listening on http://127.0.0.1:PORT" as it does (a benchmark's echo
    // server). The config is still written, but passed only if the command names it.
    std::optional<std::vector<std::string>> command;
    // Every answer checked against the OpenAPI document (SWITCHBOARD_CHECK_API_DOC=1), as the
    // tests want; a benchmark measures the server as users run it, without.
    bool check_api_doc = true;
  };

  // Starts the server and (unless Options::wait_listening is false) waits until it listens.
  // Throws std::runtime_error (with the captured log) when it exits first or does not listen
  // within the timeout.
  explicit ServerProcess(boost::json::object config);
  explicit ServerProcess(Options options);
  // SIGTERM, then SIGKILL if it has not exited within 5 s.
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  pid_t pid() const { return pid_; }
  // The port it listens on (Options::port until wait_listening() has read it from the log).
  unsigned short port() const { return port_; }
  // When the process was forked.
  std::chrono::steady_clock::time_point started() const { return started_; }
  const std::filesystem::path& config_path() const { return config_path_; }
  const std::filesystem::path& home() const { return home_; }
  const std::filesystem::path& working_directory() const { return work_; }
  // The file that receives the output when Options::files is set; empty otherwise.
  const std::filesystem::path& log_path() const { return log_path_; }

  // Waits for the "listening on" line (which the constructor does unless told not to) and returns
  // the port. Throws std::runtime_error (with the log) when the server exits first or does not
  // listen within `timeout`.
  unsigned short wait_listening(std::chrono::milliseconds timeout);

  void send_signal(int signal);
  // Waits for the process to end and reaps it; nullopt if it is still running at the deadline.
  std::optional<ExitStatus> wait_exit(std::chrono::milliseconds timeout);
  bool running();
  // SIGTERM, and how the process ended if it did within `grace`; otherwise it is killed with
  // SIGKILL and the answer is nullopt. If it had ended before, how it ended.
  std::optional<ExitStatus> terminate(std::chrono::milliseconds grace);

  // Everything the server wrote to stdout and stderr so far. Any thread.
  std::string log() const;
  // Waits until the log contains `needle`. Any thread.
  bool wait_for_log(std::string_view needle, std::chrono::milliseconds timeout) const;

 private:
  void start();
  void stop();
  std::vector<std::string> command_line() const;
  // Waits until `done(log, ended)` holds or the deadline passes; `ended`: no more output will
  // come. True when it held.
  template <class Done>
  bool wait_log_until(std::chrono::steady_clock::time_point deadline, Done done) const;

  Options options_;
  std::optional<TempDir> own_home_, own_work_;  // without Options::files
  std::filesystem::path home_, work_;
  std::filesystem::path config_path_;
  std::filesystem::path log_path_;
  pid_t pid_ = -1;
  unsigned short port_ = 0;
  std::chrono::steady_clock::time_point started_;
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
