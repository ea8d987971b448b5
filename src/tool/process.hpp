#pragma once
// The subprocess runner behind every tool that starts a program (bash, grep, glob, list, custom
// tools). A child runs in its own process group with a clean set of file descriptors; its output
// is read asynchronously; a timeout, an abort or the cancellation of the awaiting coroutine ends
// the whole group (SIGTERM, then SIGKILL after a grace period). The child is always reaped: no
// path through run_process leaves a zombie behind, not even destroying the io_context while a
// child runs. The child dies with the server, even a server killed with SIGKILL
// (PR_SET_PDEATHSIG); what the child started lives on in its process group, which
// ProcessOptions::group_record_dir lets the next start stop (process_groups.hpp).
//
// Linux only: exit is awaited through a pidfd (Linux >= 5.3), with a polling fallback where
// pidfd_open is unavailable (old kernel, seccomp).
#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/abort.hpp"
#include "util/error.hpp"

namespace sb::tool {

enum class OutputMode {
  // stdout and stderr are the same pipe: `ProcessResult::output` has them in exactly the order
  // the child wrote them, as a terminal would show.
  Merged,
  // Two pipes: `output` is stdout, `error_output` is stderr.
  Separate,
};

// How to run one program. Defaults are written beside each field.
struct ProcessOptions {
  std::vector<std::string> argv;  // argv[0]: a path, or a name looked up on PATH; no shell
  std::filesystem::path cwd;      // working directory; empty = the server's
  // Set in the child's environment on top of the server's (same name: replaced).
  std::vector<std::pair<std::string, std::string>> env;
  std::optional<std::string> stdin_text;  // written to stdin, then closed; nullopt = /dev/null
  std::chrono::milliseconds timeout{0};   // 0 = none
  std::shared_ptr<AbortSignal> abort;     // null = none
  OutputMode mode = OutputMode::Merged;
  // Bytes kept per stream; the rest is counted (output_bytes) and dropped (truncated = true).
  std::size_t max_output = 10 * 1024 * 1024;
  // At the cap, close the pipe instead of draining it, as `| head -c N` would: a writer usually
  // dies of SIGPIPE then. For searches whose extra output is worthless.
  bool stop_at_cap = false;
  std::chrono::milliseconds kill_grace{500};  // between SIGTERM and SIGKILL to the group
  // After the child exits, how long to wait for the end of its output. Background processes it
  // started may hold the pipes open for ever; they are left running (they are not killed when
  // the command ends normally), but their later output is not waited for.
  std::chrono::milliseconds drain_grace{250};
  // Called with the output (both streams, as it arrives) for live progress; must not throw.
  // Runs on a strand of run_process's caller's executor, never concurrently with itself.
  std::function<void(std::string_view)> on_output;
  // When > 0, on_output calls are coalesced to at most one per interval (the last chunk is
  // always delivered before run_process returns).
  std::chrono::milliseconds output_interval{0};
  // Wait for the exit through a pidfd (true), or by polling waitid() with backoff — the
  // fallback used anyway when pidfd_open fails; false forces it (tests).
  bool use_pidfd = true;
  // Where the child's process group is written down while it runs (process_groups.hpp), so
  // that a server killed before it could stop the group has the next start stop it. Empty = not
  // written down.
  std::filesystem::path group_record_dir;
};

struct ProcessResult {
  int pid = 0;                   // the child's pid (also its process group id)
  std::optional<int> exit_code;  // set when the child exited
  std::optional<int> signal;     // set when a signal ended it
  bool timed_out = false;        // ended because of ProcessOptions::timeout
  bool aborted = false;          // ended by the abort signal or by cancellation
  std::string output;            // see OutputMode; raw bytes, maybe not UTF-8
  std::string error_output;      // OutputMode::Separate: stderr
  bool truncated = false;        // a stream went over max_output
  std::size_t output_bytes = 0;  // bytes read from the child (both streams), kept or not
  std::chrono::milliseconds elapsed{0};
};

// Runs a program to its end. The returned error is for failures to start it (command not found,
// not executable, working directory missing, out of file descriptors); everything that happens
// after the start — a non-zero exit, a signal, a timeout, an abort — is a ProcessResult. When
// the abort signal has already fired, nothing is started and the result says `aborted`.
//
// Asynchronous on the caller's executor (all of its work happens on a strand of it); never
// blocks the thread. Cancelling the awaiting operation (e.g. the loser of `a || b`) counts as
// an abort: the group is stopped and reaped before the coroutine completes.
boost::asio::awaitable<Result<ProcessResult>> run_process(ProcessOptions options);

// Looks `name` up like execvp: a name with a slash is taken as is (relative to `cwd`), any other
// in the directories of `search_path` (PATH syntax; empty entries mean `cwd`). Returns the
// executable regular file found, or nullopt.
std::optional<std::filesystem::path> find_executable(std::string_view name,
                                                     std::string_view search_path,
                                                     const std::filesystem::path& cwd = {});
// Same, with the server's PATH (a default of /usr/local/bin:/usr/bin:/bin when unset).
std::optional<std::filesystem::path> find_executable(std::string_view name);

// "SIGKILL" for 9; "signal 77" for numbers without a name.
std::string signal_name(int signal);

}  // namespace sb::tool
