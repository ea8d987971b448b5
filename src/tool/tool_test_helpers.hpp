#pragma once
// Helpers shared by the tests of tool/ (one test binary): run a coroutine to its end on a
// private io_context (and abort it from a timer there), build arguments from JSON text, record
// permission asks and progress, a temporary directory, files read whole, and whether processes
// still run.
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "tool/tool.hpp"

namespace sb {
inline void PrintTo(ErrorCode code, std::ostream* os) {
  *os << error_code_name(code);
}
}  // namespace sb

namespace sb::tool::testing {

// Runs `task` to its end on an io_context of its own and returns its value.
template <class T>
T run_io(boost::asio::awaitable<T> task) {
  boost::asio::io_context io;
  std::optional<T> value;
  std::exception_ptr error;
  boost::asio::co_spawn(io, std::move(task), [&](std::exception_ptr e, T v) {
    error = e;
    if (!e) value.emplace(std::move(v));
  });
  io.run();
  if (error) std::rethrow_exception(error);
  if (!value) throw std::runtime_error("the coroutine never finished");
  return std::move(*value);
}

// `task`, with `signal` fired (`reason`) `after` its start by a timer on the task's executor, as
// the server aborts a turn: on its executor, between two handlers. The timer is cancelled when
// the task ends first.
template <class T>
boost::asio::awaitable<T> aborted_after(std::chrono::milliseconds after,
                                        std::shared_ptr<AbortSignal> signal, std::string reason,
                                        boost::asio::awaitable<T> task) {
  boost::asio::steady_timer timer(co_await boost::asio::this_coro::executor, after);
  timer.async_wait([signal, reason](boost::system::error_code ec) {
    if (!ec) signal->abort(reason);
  });
  T value = co_await std::move(task);
  timer.cancel();
  co_return value;
}

inline ::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "\"" << text.substr(0, 3000) << "\"\ndoes not contain\n\"" << part << "\"";
}

inline json::object args(std::string_view text) {
  auto v = parse_json(text);
  if (!v || !v->is_object()) throw std::runtime_error("bad test args: " + std::string(text));
  return v->get_object();
}

// A permission system stand-in: records every ask; denies the permissions listed in `deny`.
struct Asks {
  std::vector<PermissionRequest> requests;
  std::vector<std::string> deny;

  std::vector<std::string> permissions() const {
    std::vector<std::string> out;
    for (const auto& r : requests)
      out.push_back(r.permission);
    return out;
  }
};

inline boost::asio::awaitable<Result<void>> record_ask(Asks* asks, PermissionRequest request) {
  std::string permission = request.permission;
  asks->requests.push_back(std::move(request));
  if (std::find(asks->deny.begin(), asks->deny.end(), permission) != asks->deny.end())
    co_return make_error(ErrorCode::Forbidden,
                         "The user has specifically denied the " + permission + " permission");
  co_return Result<void>{};
}

struct Reports {
  std::vector<std::optional<std::string>> titles;
  std::vector<json::object> metadata;
};

// A context for a session "ses_test" in `directory`, recording asks and progress reports.
inline ToolContext context(Asks& asks, Reports* reports = nullptr,
                           std::filesystem::path directory = {}) {
  ToolContext ctx;
  ctx.session_id = "ses_test";
  ctx.message_id = "msg_test";
  ctx.call_id = "call_1";
  ctx.agent = "build";
  ctx.directory = std::move(directory);
  ctx.ask = [a = &asks](PermissionRequest r) { return record_ask(a, std::move(r)); };
  if (reports)
    ctx.metadata = [reports](std::optional<std::string> title, json::object meta) {
      reports->titles.push_back(std::move(title));
      reports->metadata.push_back(std::move(meta));
    };
  return ctx;
}

// A fresh directory under the system's temporary directory, removed with its contents at the end.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "sb_tool_test") {
    std::string templ = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    path_ = ::mkdtemp(templ.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

  // Writes the file `rel` (creating its directories), dated `age` in the past, and returns its
  // path. The date orders what glob and grep list, newest first.
  std::filesystem::path write(const std::string& rel, const std::string& content,
                              std::chrono::seconds age = std::chrono::seconds(1000)) const {
    std::filesystem::path p = path_ / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << content;
    std::filesystem::last_write_time(p, std::filesystem::file_time_type::clock::now() - age);
    return p;
  }

 private:
  std::filesystem::path path_;
};

inline std::string read_all(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// True when this process has no child at all, running or zombie: nothing was left behind.
inline bool no_children() {
  siginfo_t info{};
  return ::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) < 0 && errno == ECHILD;
}

// Whether `pid` is still running (a zombie, waiting for its parent to reap it, is not).
inline bool running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  std::string line;
  std::getline(stat, line);
  auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  char state = line[close + 2];
  return state != 'Z' && state != 'X';
}

// Waits up to 2 s for `pid` to stop running (it may be a grandchild that init reaps later).
inline bool stops_running(pid_t pid) {
  for (int i = 0; i < 200 && running(pid); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return !running(pid);
}

}  // namespace sb::tool::testing
