// Black-box tests of the processes that tools start, and the server's life: nothing a tool
// started outlives a server killed with SIGKILL (issue 15). The scripted model (the default with
// no model configured) calls the bash tool for "/call bash {...}".
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "blackbox_util.hpp"

namespace sb::test {
namespace {

namespace fs = std::filesystem;

std::optional<pid_t> pid_in(const fs::path& file) {
  std::ifstream in(file);
  pid_t pid = 0;
  if (in >> pid && pid > 0) return pid;
  return std::nullopt;
}

class ToolProcessTest : public ServerTest {
 protected:
  void start_server() {
    ServerProcess::Options options;
    options.config = test_config();
    options.data_dir = data_.path();
    options.directory = project_.path();
    server_.emplace(std::move(options));
  }

  // Restarts the server on the same data directory; returns once it serves requests.
  void restart_server() {
    server_.reset();
    start_server();
    // main() logs "listening" a moment before it handles SIGTERM: the fixture's SIGTERM at the
    // end of a short test could come in between.
    auto status = http_get(port(), "/session/status");
    if (status.status != 200) throw std::runtime_error("restart: " + status.describe());
  }

  // Starts a turn in which the scripted model runs `command` with the bash tool.
  void run_bash_async(const std::string& command) {
    auto created = http_post(port(), "/session", json::object{});
    if (created.status != 200)
      throw std::runtime_error("setup: POST /session: " + created.describe());
    std::string sid = string_at(created.json(), "/id");
    json::object input{{"command", command}, {"description", "Wait"}};
    json::object part{{"type", "text"}, {"text", "/call bash " + str(input)}};
    auto res = http_post(port(), "/session/" + sid + "/prompt_async",
                         json::object{{"parts", json::array{part}}});
    if (res.status != 204) throw std::runtime_error("setup: prompt_async: " + res.describe());
  }

  // Kills what a failed test left running; only sleeps and shells that it started.
  void TearDown() override {
    for (pid_t pid : started_)
      if (process_running(pid)) ::kill(pid, SIGKILL);
    ServerTest::TearDown();
  }

  TempDir data_{"switchboard-data"};
  TempDir project_{"switchboard-project"};
  std::vector<pid_t> started_;
};

TEST_F(ToolProcessTest, ABashCommandDoesNotOutliveAServerKilledWithSigkill) {
  start_server();
  // The shell writes down its background sleep's pid and its own, then waits for the sleep.
  run_bash_async(
      "sleep 300 & echo $! > sleep.pid; echo $$ > shell.tmp && mv shell.tmp shell.pid; wait");
  fs::path shell_file = project_.path() / "shell.pid";
  ASSERT_TRUE(wait_until([&] { return pid_in(shell_file).has_value(); }, 10s))
      << "the command did not start";
  pid_t shell = *pid_in(shell_file);
  auto sleep = pid_in(project_.path() / "sleep.pid");
  ASSERT_TRUE(sleep);
  started_ = {shell, *sleep};
  ASSERT_TRUE(process_running(shell) && process_running(*sleep));

  server().send_signal(SIGKILL);
  auto exited = server().wait_exit(5s);
  ASSERT_TRUE(exited && exited->signaled) << "SIGKILL did not end the server";
  EXPECT_TRUE(wait_until([&] { return !process_running(shell); }, 5s))
      << "the tool's shell outlived the server";

  // What the shell started lives on in its process group until the next start on this data
  // directory stops it.
  restart_server();
  EXPECT_TRUE(wait_until([&] { return !process_running(*sleep); }, 5s))
      << "the sleep that the tool started outlived the restart";
  EXPECT_TRUE(server().wait_for_log("that the last server left running", 1s)) << server().log();
}

// A command that ended is no longer the server's: what it left running in the background is
// not stopped at the next start.
TEST_F(ToolProcessTest, WhatAFinishedCommandLeftRunningIsLeftAlone) {
  start_server();
  run_bash_async("sleep 300 > /dev/null 2>&1 & echo $! > sleep.tmp && mv sleep.tmp sleep.pid");
  fs::path sleep_file = project_.path() / "sleep.pid";
  ASSERT_TRUE(wait_until([&] { return pid_in(sleep_file).has_value(); }, 10s))
      << "the command did not start";
  pid_t sleep = *pid_in(sleep_file);
  started_ = {sleep};
  ASSERT_TRUE(wait_until(
      [&] { return http_get(port(), "/session/status").json().as_object().empty(); }, 10s))
      << "the turn did not end";

  server().send_signal(SIGKILL);
  ASSERT_TRUE(server().wait_exit(5s));
  restart_server();
  EXPECT_TRUE(process_running(sleep)) << "a background process of a finished command was stopped";
}

}  // namespace
}  // namespace sb::test
