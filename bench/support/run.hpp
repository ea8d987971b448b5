#pragma once
// Benchmark support: what the benchmark programs (agent_turns, client_tools_load) do besides
// their scenarios and reports: the run's list of errors, the watchdog, pieces of the command
// line, the run's temporary directory, starting and stopping the server under test (a
// tests/support ServerProcess), number formatting. Main thread only.
#include <boost/json.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <exception>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "describe.hpp"
#include "proc_stats.hpp"
#include "server_process.hpp"

namespace bench {

namespace fs = std::filesystem;
using sb::test::ServerProcess;
// What /proc says about the server and the machine.
using sb::test::clock_ticks_per_second;
using sb::test::cpu_model;
using sb::test::CpuTicks;
using sb::test::load_average;
using sb::test::open_fds;
using sb::test::process_cpu_ns;
using sb::test::process_cpu_ticks;
using sb::test::rss_bytes;
using sb::test::self_cpu_us;
using sb::test::status_field;
using sb::test::system_busy_ticks;

// A failure that ends the run: the server did not start, a scenario could not be set up.
struct Fatal : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Every error of the run; the first 20 are printed on stderr as they happen.
struct Problems {
  std::size_t count = 0;
  std::vector<std::string> first;
  void add(const std::string& message);
};
// The run's list.
Problems& problems();

using sb::test::describe;

// Names the program (in messages and as the User-Agent), ignores SIGPIPE, and ends the run with
// exit status 3 after `max_runtime_s` seconds, the server with it (PR_SET_PDEATHSIG).
void begin_run(std::string_view program, int max_runtime_s);
const std::string& program_name();

// Leaves at once with `status` after flushing the output: after a failure, coroutines may still
// reference scenario state, so nothing is unwound. A server still running dies with us
// (PR_SET_PDEATHSIG).
[[noreturn]] void leave(int status);

// ---- the command line -----------------------------------------------------------------------

// The program's `--flag [value]` arguments, one at a time: `each(flag, value)`, where value()
// takes the argument after the flag (std::invalid_argument when there is none) and `each`
// returns false for a flag it does not know (std::invalid_argument naming it). --help and -h
// print `usage` and exit with status 0.
using FlagValue = std::function<std::string_view()>;
void for_each_flag(int argc, char** argv, std::string_view usage,
                   const std::function<bool(std::string_view flag, const FlagValue& value)>& each);

std::vector<std::string> split_list(std::string_view s, char separator = ',');
// "--server-prefix" words.
std::vector<std::string> split_words(std::string_view s);

// A whole number from `min` to `max`, else std::invalid_argument naming the flag and the range.
int parse_count(std::string_view flag, std::string_view text, int min, int max);

// A whole number, else std::invalid_argument naming the flag.
template <class T>
T parse_number(std::string_view flag, std::string_view text) {
  T value{};
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || ptr != text.data() + text.size())
    throw std::invalid_argument(std::string(flag) + " needs a number, got \"" + std::string(text) +
                                "\"");
  return value;
}

// Seconds, 0 < s <= 3600, else std::invalid_argument.
double parse_seconds(std::string_view flag, std::string_view text);

// The switchboard beside this program, else build/release/switchboard.
fs::path default_server_path();

// What `parse` reads from the command line; on a usage error (std::invalid_argument, or any
// exception) its message and `usage` go to stderr and the program exits with status 2.
template <class Parse>
auto parse_or_exit(std::string_view program, std::string_view usage, Parse parse) {
  try {
    return parse();
  } catch (const std::exception& e) {
    std::cerr << program << ": " << e.what() << "\n\n" << usage;
    std::exit(2);
  }
}

// Raises RLIMIT_NOFILE to its hard limit (as root, the hard limit too) for at least `needed`
// descriptors; call it before any child starts, as children inherit it. Fatal, ending with
// `advice`, when it cannot.
void raise_fd_limit(std::size_t needed, std::string_view advice);

// ---- the server under test ------------------------------------------------------------------

// How to run the server: --server and --server-prefix.
struct ServerCommand {
  std::string path;
  std::vector<std::string> prefix;  // a profiler to run the server under
  std::vector<std::string> env;     // NAME=VALUE for the server (--server-env)
  // How long a start or a stop may take: longer under a tool.
  std::chrono::milliseconds patience() const;
};

// The options of a server of the run: `command`, its files (HOME, working directory, config,
// log) in `dir`, and SWITCHBOARD_LOOP_LAG, so that it measures how late its event loop runs a
// due timer (src/app/loop_lag.hpp).
ServerProcess::Options server_options(const ServerCommand& command, const fs::path& dir,
                                      boost::json::object config);

// Fatal unless the --server binary exists.
void require_server(const ServerCommand& command);

// Starts a server and says so on stderr ("started PATH (pid, port, log)").
std::unique_ptr<ServerProcess> start_server(const ServerCommand& command,
                                            ServerProcess::Options options);

// The end of a server's log.
std::string log_tail(const ServerProcess& server, std::size_t bytes = 4000);

// Stops a scenario's server, which must still be running (else the scenario counts an error
// with its log) and must then exit cleanly within `grace`. `what` names it in the error.
void stop_server(ServerProcess& server, std::chrono::milliseconds grace,
                 const std::string& what = "the server");

// The run's temporary directory, a sub-directory per server; removed at the end unless kept
// (--keep-temp, or the run had errors), which is then said on stderr.
class RunDirectory {
 public:
  RunDirectory(std::string_view prefix, bool keep);
  ~RunDirectory();
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;
  void keep() { dir_.keep(); }
  // A new sub-directory "NAME-N".
  fs::path fresh(const std::string& name);

 private:
  sb::test::TempDir dir_;
  int counter_ = 0;
};

// ---- the report -----------------------------------------------------------------------------

// `v` with `decimals` decimals.
std::string fmt(double v, int decimals = 1);
// `v` rounded, with thousands separators: "12,345".
std::string fmt_int(double v);
// At most `n` bytes of `s`, "..." after a cut.
std::string clip(std::string_view s, std::size_t n = 300);
// The release of the running Linux kernel.
std::string linux_release();

// The nearest-rank percentile `p` (0..1) of sorted values; T{} for none.
template <class T>
T nearest_rank(const std::vector<T>& sorted, double p) {
  if (sorted.empty()) return T{};
  auto rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  rank = std::clamp<std::size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

inline double percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  return nearest_rank(values, p);
}

}  // namespace bench
