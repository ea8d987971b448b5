#include "tool/process.hpp"
#include "tool/process_groups.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tool/tool_test_helpers.hpp"

namespace sb::tool {
namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using namespace sb::tool::testing;

ProcessResult run_ok(ProcessOptions options) {
  auto r = run_io(run_process(std::move(options)));
  if (!r) ADD_FAILURE() << "run_process failed: " << r.error().message;
  return r ? std::move(*r) : ProcessResult{};
}

ProcessOptions sh(std::string script) {
  ProcessOptions o;
  o.argv = {"/bin/sh", "-c", std::move(script)};
  return o;
}

std::vector<pid_t> pids_in(const std::string& text) {
  std::vector<pid_t> out;
  std::istringstream in(text);
  long v;
  while (in >> v)
    out.push_back(static_cast<pid_t>(v));
  return out;
}

// A server that is killed with SIGKILL: a forked copy of this test runs one command, passes
// what it prints to the test through a pipe, and is killed by kill().
class ForkedServer {
 public:
  explicit ForkedServer(ProcessOptions options) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(fds[0]);
      int out = fds[1];
      options.on_output = [out](std::string_view chunk) {
        if (::write(out, chunk.data(), chunk.size()) < 0) ::_exit(1);
      };
      run_io(run_process(std::move(options)));
      ::_exit(0);
    }
    ::close(fds[1]);
    output_fd_ = fds[0];
  }
  ~ForkedServer() {
    kill();
    ::close(output_fd_);
  }

  // The first `count` numbers the command printed; fewer if it printed them not within 10 s.
  std::vector<pid_t> read_pids(std::size_t count) {
    auto deadline = std::chrono::steady_clock::now() + 10s;
    std::string text;
    while (pids_in(text).size() < count && std::chrono::steady_clock::now() < deadline) {
      pollfd p{output_fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buffer[256];
      ssize_t n = ::read(output_fd_, buffer, sizeof buffer);
      if (n <= 0) break;
      text.append(buffer, static_cast<std::size_t>(n));
    }
    return pids_in(text);
  }

  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int output_fd_ = -1;
};

TEST(Process, ExitCodeZeroAndOutput) {
  auto r = run_ok(sh("echo hello"));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_FALSE(r.signal);
  EXPECT_EQ(r.output, "hello\n");
  EXPECT_FALSE(r.timed_out);
  EXPECT_FALSE(r.aborted);
  EXPECT_FALSE(r.truncated);
  EXPECT_EQ(r.output_bytes, 6u);
  EXPECT_GT(r.pid, 0);
  EXPECT_TRUE(no_children());
}

TEST(Process, NonZeroExitCode) {
  auto r = run_ok(sh("echo failing >&2; exit 3"));
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.output, "failing\n");
}

TEST(Process, KilledBySignalReportsTheSignal) {
  auto r = run_ok(sh("kill -9 $$"));
  EXPECT_FALSE(r.exit_code);
  EXPECT_EQ(r.signal, SIGKILL);
  EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
}

TEST(Process, MergedModeKeepsTheOrderTheChildWrote) {
  auto r = run_ok(sh("echo out1; echo err1 >&2; echo out2; echo err2 >&2; echo out3"));
  EXPECT_EQ(r.output, "out1\nerr1\nout2\nerr2\nout3\n");
  EXPECT_EQ(r.error_output, "");
}

TEST(Process, SeparateModeSplitsTheStreams) {
  auto o = sh("echo out1; echo err1 >&2; echo out2");
  o.mode = OutputMode::Separate;
  auto r = run_ok(std::move(o));
  EXPECT_EQ(r.output, "out1\nout2\n");
  EXPECT_EQ(r.error_output, "err1\n");
  EXPECT_EQ(r.output_bytes, 15u);
}

TEST(Process, RunsAProgramWithoutAShell) {
  ProcessOptions o;
  o.argv = {"printf", "%s|%s", "a b", "$HOME;"};  // no word splitting, no expansion
  auto r = run_ok(std::move(o));
  EXPECT_EQ(r.output, "a b|$HOME;");
}

TEST(Process, StdinIsWrittenThenClosed) {
  ProcessOptions o;
  o.argv = {"cat"};
  o.stdin_text = "line one\nline two\n";
  auto r = run_ok(std::move(o));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output, "line one\nline two\n");
}

TEST(Process, LargeStdinAndOutputFlowTogether) {
  // Bigger than both pipe buffers: writing must not wait for reading or the other way round.
  std::string input;
  for (int i = 0; i < 100000; ++i)
    input += "line " + std::to_string(i) + "\n";
  ProcessOptions o;
  o.argv = {"cat"};
  o.stdin_text = input;
  auto r = run_ok(std::move(o));
  EXPECT_EQ(r.output.size(), input.size());
  EXPECT_TRUE(r.output == input);
}

TEST(Process, StdinIgnoredByTheChildDoesNotRaiseSigpipe) {
  // `true` exits without reading; our write then fails with EPIPE. Were SIGPIPE raised, this
  // test binary would die.
  ProcessOptions o;
  o.argv = {"true"};
  o.stdin_text = std::string(4 * 1024 * 1024, 'x');
  auto r = run_ok(std::move(o));
  EXPECT_EQ(r.exit_code, 0);
}

TEST(Process, WithoutStdinTextStdinIsEmpty) {
  ProcessOptions o;
  o.argv = {"cat"};
  auto r = run_ok(std::move(o));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output, "");
}

TEST(Process, ExtraEnvironmentAddsAndReplaces) {
  ::setenv("SB_PROCESS_TEST_KEEP", "kept", 1);
  ::setenv("SB_PROCESS_TEST_REPLACE", "old", 1);
  auto o = sh("echo $SB_PROCESS_TEST_KEEP $SB_PROCESS_TEST_REPLACE $SB_PROCESS_TEST_NEW");
  o.env = {{"SB_PROCESS_TEST_REPLACE", "new"}, {"SB_PROCESS_TEST_NEW", "added"}};
  auto r = run_ok(std::move(o));
  EXPECT_EQ(r.output, "kept new added\n");
}

TEST(Process, PathFromTheExtraEnvironmentIsUsedForLookup) {
  ProcessOptions o;
  o.argv = {"sh", "-c", "true"};
  o.env = {{"PATH", "/nonexistent-dir"}};
  auto r = run_io(run_process(std::move(o)));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::NotFound);
  EXPECT_EQ(r.error().message, "command not found: sh");
}

TEST(Process, WorkingDirectory) {
  TempDir dir("sb_process");
  auto o = sh("pwd");
  o.cwd = dir.path();
  auto r = run_ok(std::move(o));
  EXPECT_EQ(r.output, fs::canonical(dir.path()).string() + "\n");
}

TEST(Process, MissingWorkingDirectoryIsAnError) {
  auto o = sh("pwd");
  o.cwd = "/nonexistent/sb-dir";
  auto r = run_io(run_process(std::move(o)));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::InvalidRequest);
  EXPECT_NE(r.error().message.find("does not exist"), std::string::npos) << r.error().message;
}

TEST(Process, CommandNotFound) {
  ProcessOptions o;
  o.argv = {"sb-no-such-command-xyz"};
  auto r = run_io(run_process(std::move(o)));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::NotFound);
  EXPECT_EQ(r.error().message, "command not found: sb-no-such-command-xyz");
  EXPECT_TRUE(no_children());
}

TEST(Process, MissingPathAndNotExecutable) {
  ProcessOptions o;
  o.argv = {"/nonexistent/prog"};
  auto r = run_io(run_process(o));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "no such file: /nonexistent/prog");

  TempDir dir("sb_process");
  std::ofstream(dir.path() / "script.sh") << "#!/bin/sh\necho hi\n";
  o.argv = {(dir.path() / "script.sh").string()};
  r = run_io(run_process(o));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Forbidden);
  EXPECT_NE(r.error().message.find("permission denied"), std::string::npos);

  fs::permissions(dir.path() / "script.sh", fs::perms::owner_exec, fs::perm_options::add);
  o.argv = {"./script.sh"};  // relative to the working directory
  o.cwd = dir.path();
  auto ok = run_ok(o);
  EXPECT_EQ(ok.output, "hi\n");
}

TEST(Process, AFileThatIsNotAProgramIsAnError) {
  // Executable, but neither a binary nor a script with "#!": execve() itself fails (ENOEXEC),
  // in the child, which must report it.
  TempDir dir("sb_process");
  fs::path text = dir.path() / "notes.txt";
  std::ofstream(text) << "just text\n";
  fs::permissions(text, fs::perms::owner_exec, fs::perm_options::add);
  ProcessOptions o;
  o.argv = {text.string()};
  auto r = run_io(run_process(o));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::InvalidRequest);
  EXPECT_EQ(r.error().message, "cannot execute " + text.string() + ": not a program");
  EXPECT_TRUE(no_children());
}

TEST(Process, EmptyArgvIsAnError) {
  auto r = run_io(run_process(ProcessOptions{}));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::InvalidRequest);
}

TEST(Process, ChildLeadsItsOwnProcessGroup) {
  auto r = run_ok(sh("echo $$; ps -o pgid= -p $$ 2>/dev/null || cut -d' ' -f5 /proc/$$/stat"));
  auto ids = pids_in(r.output);
  ASSERT_EQ(ids.size(), 2u) << r.output;
  EXPECT_EQ(ids[0], ids[1]);
  EXPECT_EQ(ids[0], r.pid);
  EXPECT_NE(ids[1], ::getpgrp());
}

TEST(Process, ServerFileDescriptorsAreNotInherited) {
  // A descriptor opened without O_CLOEXEC, as careless third-party code might.
  int fd = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(fd, 0);
  int high = ::dup2(fd, 77);
  ASSERT_EQ(high, 77);
  ::close(fd);
  auto r = run_ok(sh("ls /proc/$$/fd"));
  ::close(high);
  auto fds = pids_in(r.output);
  EXPECT_EQ(std::count(fds.begin(), fds.end(), 77), 0) << r.output;
  EXPECT_LE(fds.size(), 4u) << r.output;  // 0, 1, 2 and ls's own directory handle
}

TEST(Process, TimeoutKillsTheWholeGroupAndLeavesNoZombie) {
  // The shell starts a background sleep (a grandchild) and waits on a second one.
  auto o = sh("sleep 100 & echo $!; sleep 100");
  o.timeout = 300ms;
  auto start = std::chrono::steady_clock::now();
  auto r = run_ok(std::move(o));
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(r.timed_out);
  EXPECT_FALSE(r.aborted);
  EXPECT_FALSE(r.exit_code);
  EXPECT_EQ(r.signal, SIGTERM);
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 5s);
  auto ids = pids_in(r.output);
  ASSERT_EQ(ids.size(), 1u) << r.output;
  EXPECT_TRUE(stops_running(ids[0])) << "the background sleep survived";
  EXPECT_TRUE(no_children());
}

TEST(Process, SigkillAfterTheGraceWhenSigtermIsIgnored) {
  auto o = sh("trap '' TERM; sleep 100 & echo $!; while :; do sleep 1; done");
  o.timeout = 200ms;
  o.kill_grace = 300ms;
  auto start = std::chrono::steady_clock::now();
  auto r = run_ok(std::move(o));
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.signal, SIGKILL);
  EXPECT_GE(took, 500ms);
  EXPECT_LT(took, 5s);
  auto ids = pids_in(r.output);
  ASSERT_EQ(ids.size(), 1u) << r.output;
  EXPECT_TRUE(stops_running(ids[0])) << "the grandchild that ignores SIGTERM survived";
  EXPECT_TRUE(no_children());
}

TEST(Process, AbortStopsTheChild) {
  auto o = sh("echo started; sleep 100");
  auto signal = o.abort = AbortSignal::create();
  auto start = std::chrono::steady_clock::now();
  auto r = run_io(aborted_after(200ms, signal, "user stop", run_process(std::move(o))));
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->aborted);
  EXPECT_FALSE(r->timed_out);
  EXPECT_EQ(r->signal, SIGTERM);
  EXPECT_EQ(r->output, "started\n");  // what came before the abort is kept
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_TRUE(no_children());
}

TEST(Process, AbortCallbackOutlivingTheRunIsHarmless) {
  // The signal outlives the run and its io_context. First the stop that the abort posts to the
  // run's strand never runs: the handler that aborts also stops the io_context, which is then
  // destroyed with the stop still queued; the child is reaped all the same. Then a run that
  // ended is aborted after its io_context is gone: its callback must have been removed (ASan
  // reports a use-after-free if it ran, or if anything held the dead io_context's strand).
  auto signal = AbortSignal::create();
  auto o = sh("sleep 100");
  o.abort = signal;
  {
    asio::io_context io;
    bool finished = false;
    asio::co_spawn(io, run_process(o),
                   [&](std::exception_ptr, Result<ProcessResult>) { finished = true; });
    io.run_for(100ms);  // the child runs and the run's abort callback is registered
    asio::post(io, [&] {
      signal->abort("stop");
      io.stop();
    });
    io.run();
    EXPECT_TRUE(signal->aborted());
    EXPECT_FALSE(finished);
  }
  EXPECT_TRUE(no_children());

  auto later = AbortSignal::create();
  auto quick = sh("true");
  quick.abort = later;
  auto r = run_ok(std::move(quick));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_FALSE(r.aborted);
  later->abort("stop");
  EXPECT_TRUE(no_children());
}

TEST(Process, AlreadyAbortedDoesNotStartAnything) {
  TempDir dir("sb_process");
  auto o = sh("touch ran");
  o.cwd = dir.path();
  o.abort = AbortSignal::create();
  o.abort->abort("stop");
  auto r = run_ok(std::move(o));
  EXPECT_TRUE(r.aborted);
  EXPECT_FALSE(r.exit_code);
  EXPECT_FALSE(fs::exists(dir.path() / "ran"));
}

asio::awaitable<Result<ProcessResult>> race_with_timer(ProcessOptions o,
                                                       std::chrono::milliseconds after,
                                                       bool* timer_won) {
  using namespace asio::experimental::awaitable_operators;
  asio::steady_timer timer(co_await asio::this_coro::executor, after);
  auto outcome = co_await (run_process(std::move(o)) || timer.async_wait(asio::use_awaitable));
  *timer_won = outcome.index() == 1;
  co_return make_error(ErrorCode::Timeout, "timer won");
}

TEST(Process, CancellingTheAwaiterStopsAndReapsTheChild) {
  bool timer_won = false;
  auto start = std::chrono::steady_clock::now();
  auto r = run_io(race_with_timer(sh("sleep 100 & sleep 100"), 200ms, &timer_won));
  EXPECT_TRUE(timer_won);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_TRUE(no_children());
}

TEST(Process, DestroyingTheIoContextMidRunReapsTheChild) {
  {
    asio::io_context io;
    asio::co_spawn(io, run_process(sh("sleep 100")), asio::detached);
    io.run_for(200ms);
    EXPECT_FALSE(no_children());  // it is running now
  }
  EXPECT_TRUE(no_children());
}

TEST(Process, OutputCapKeepsTheHeadAndCountsTheRest) {
  auto o = sh("head -c 100000 /dev/zero | tr '\\0' a; echo done >&2");
  o.max_output = 1000;
  auto r = run_ok(std::move(o));
  EXPECT_EQ(r.exit_code, 0);  // drained to the end: the child finished normally
  EXPECT_TRUE(r.truncated);
  EXPECT_EQ(r.output, std::string(1000, 'a'));
  EXPECT_EQ(r.output_bytes, 100005u);
}

TEST(Process, StopAtCapClosesThePipe) {
  ProcessOptions o;
  o.argv = {"yes"};  // endless output
  o.max_output = 10000;
  o.stop_at_cap = true;
  o.timeout = 10s;
  auto r = run_ok(std::move(o));
  EXPECT_FALSE(r.timed_out);
  EXPECT_TRUE(r.truncated);
  EXPECT_EQ(r.output.size(), 10000u);
  EXPECT_EQ(r.signal, SIGPIPE);
}

TEST(Process, OutputCallbackSeesEverythingInOrder) {
  auto o = sh("for i in 1 2 3 4 5; do echo line $i; echo err $i >&2; done");
  std::string streamed;
  o.on_output = [&](std::string_view chunk) { streamed.append(chunk); };
  auto r = run_ok(std::move(o));
  EXPECT_EQ(streamed, r.output);
  EXPECT_EQ(streamed.substr(0, 14), "line 1\nerr 1\nl");
}

TEST(Process, OutputCallbackIsCoalescedButComplete) {
  auto o = sh("for i in $(seq 1 50); do echo $i; sleep 0.01; done");
  std::vector<std::string> chunks;
  o.on_output = [&](std::string_view chunk) { chunks.emplace_back(chunk); };
  o.output_interval = 200ms;
  auto start = std::chrono::steady_clock::now();
  auto r = run_ok(std::move(o));
  auto elapsed = std::chrono::steady_clock::now() - start;
  std::string all;
  for (auto& c : chunks)
    all += c;
  EXPECT_EQ(all, r.output);
  // At most one call per 200 ms of the run (plus the first and the last), not one per line: the
  // bound follows the run's own length, which a loaded machine stretches well past 0.5 s.
  auto intervals = static_cast<std::size_t>(elapsed / 200ms);
  EXPECT_LE(chunks.size(), intervals + 2) << "over " << intervals << " intervals";
  EXPECT_LT(chunks.size(), 50u);
  EXPECT_GE(chunks.size(), 2u);
}

TEST(Process, OutputCallbackArrivesWhileTheChildStillRuns) {
  auto o = sh("echo early; sleep 0.5; echo late");
  std::chrono::steady_clock::time_point first_chunk;
  auto start = std::chrono::steady_clock::now();
  o.on_output = [&](std::string_view) {
    if (first_chunk == std::chrono::steady_clock::time_point{})
      first_chunk = std::chrono::steady_clock::now();
  };
  o.output_interval = 100ms;
  auto r = run_ok(std::move(o));
  EXPECT_EQ(r.output, "early\nlate\n");
  EXPECT_LT(first_chunk - start, 400ms);
}

TEST(Process, BackgroundProcessHoldingThePipeDoesNotHoldTheResult) {
  // The shell exits at once, but its background child keeps stdout open for 30 s.
  auto o = sh("sleep 30 & echo $!; echo done");
  o.drain_grace = 200ms;
  auto start = std::chrono::steady_clock::now();
  auto r = run_ok(std::move(o));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  EXPECT_EQ(r.exit_code, 0);
  auto ids = pids_in(r.output);
  ASSERT_FALSE(ids.empty());
  EXPECT_NE(r.output.find("done\n"), std::string::npos);
  ::kill(ids[0], SIGKILL);  // tidy up: it was deliberately left running
  EXPECT_TRUE(no_children());
}

TEST(Process, PollingFallbackWithoutPidfd) {
  auto o = sh("echo polled; exit 4");
  o.use_pidfd = false;
  auto r = run_ok(o);
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_EQ(r.output, "polled\n");

  o = sh("sleep 100 & echo $!; sleep 100");
  o.use_pidfd = false;
  o.timeout = 200ms;
  auto start = std::chrono::steady_clock::now();
  r = run_ok(o);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_TRUE(r.timed_out);
  auto ids = pids_in(r.output);
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_TRUE(stops_running(ids[0]));
  EXPECT_TRUE(no_children());
}

TEST(Process, ManyRunsInParallelOnOneContext) {
  asio::io_context io;
  int finished = 0;
  for (int i = 0; i < 20; ++i) {
    asio::co_spawn(io, run_process(sh("echo " + std::to_string(i))),
                   [&, i](std::exception_ptr e, Result<ProcessResult> r) {
                     ASSERT_FALSE(e);
                     ASSERT_TRUE(r);
                     EXPECT_EQ(r->output, std::to_string(i) + "\n");
                     ++finished;
                   });
  }
  io.run();
  EXPECT_EQ(finished, 20);
  EXPECT_TRUE(no_children());
}

TEST(Process, TheChildDiesWithAServerKilledBySigkill) {
  ForkedServer server(sh("echo $$; exec sleep 100"));
  auto ids = server.read_pids(1);
  ASSERT_EQ(ids.size(), 1u) << "the command did not start";
  ASSERT_TRUE(running(ids[0]));
  server.kill();
  EXPECT_TRUE(stops_running(ids[0])) << "the child outlived the server";
  if (running(ids[0])) ::kill(ids[0], SIGKILL);
}

TEST(ProcessGroups, WrittenDownWhileTheChildRuns) {
  TempDir data("sb_process");
  fs::path dir = process_group_dir(data.path());
  // The record is written right after the exec (the pid is known only then), so the command
  // gives it a moment before it looks; without the wait this raced on a loaded machine.
  std::string d = "'" + dir.string() + "'";
  auto o = sh("echo $$; for i in $(seq 200); do [ -e " + d +
              "/$$ ] && break; sleep 0.01; done; ls " + d);
  o.group_record_dir = dir;
  auto r = run_ok(o);
  auto ids = pids_in(r.output);
  ASSERT_EQ(ids.size(), 2u) << r.output;  // $$, then the record named after it
  EXPECT_EQ(ids[0], ids[1]);
  EXPECT_TRUE(fs::is_empty(dir)) << "the record outlived the run";
}

TEST(ProcessGroups, WhatAKilledServerLeftRunningIsStoppedAtTheNextStart) {
  TempDir data("sb_process");
  fs::path dir = process_group_dir(data.path());
  auto o = sh("sleep 100 & echo $!; sleep 100");
  o.group_record_dir = dir;
  ForkedServer server(o);
  auto ids = server.read_pids(1);
  ASSERT_EQ(ids.size(), 1u) << "the command did not start";
  // The server writes the record right after the exec; a kill before that would test nothing.
  auto recorded = [&] {
    std::error_code ec;  // the folder is made with the first record
    bool empty = fs::is_empty(dir, ec);
    return !ec && !empty;
  };
  for (int i = 0; i < 500 && !recorded(); ++i)
    std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(recorded()) << "the server never wrote the record";
  server.kill();
  // PR_SET_PDEATHSIG reaches the shell, not what it started.
  ASSERT_TRUE(running(ids[0]));
  EXPECT_EQ(stop_recorded_process_groups(dir), 1u);
  EXPECT_TRUE(stops_running(ids[0])) << "the background sleep survived";
  EXPECT_TRUE(fs::is_empty(dir));
  EXPECT_EQ(stop_recorded_process_groups(dir), 0u);
  if (running(ids[0])) ::kill(ids[0], SIGKILL);
}

TEST(ProcessGroups, AGroupIdTakenByAnotherProcessIsLeftAlone) {
  TempDir data("sb_process");
  fs::path dir = process_group_dir(data.path());
  pid_t other = ::fork();  // not a tool's: in a group of its own
  if (other == 0) {
    ::setpgid(0, 0);
    ::execlp("sleep", "sleep", "100", nullptr);
    ::_exit(127);
  }
  ::setpgid(other, other);
  struct Reap {  // also when an assertion ends the test early
    pid_t pid;
    int status = 0;
    ~Reap() {
      if (pid <= 0) return;
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
    }
  } reap{other};
  // The group is the recorded one in every way the kernel shows (boot, leader, start time), but
  // its process does not carry the token: an id reused by something that is not a tool's.
  ASSERT_TRUE(record_process_group(dir, other, new_group_token()));
  fs::path record = dir / std::to_string(other);
  ASSERT_TRUE(fs::exists(record));
  EXPECT_EQ(stop_recorded_process_groups(dir), 0u);
  EXPECT_TRUE(running(other));
  EXPECT_FALSE(fs::exists(record));
  // An older build's record (no token) and a record of another boot stop nothing either.
  std::string boot;
  std::uint64_t start = 0;
  ASSERT_TRUE(record_process_group(dir, other, "t"));
  ASSERT_TRUE(std::ifstream(record) >> boot >> start);
  std::ofstream(record) << boot << " " << start << "\n";
  EXPECT_EQ(stop_recorded_process_groups(dir), 0u);
  std::ofstream(record) << "0f8a2c44-5f2b-4a0e-9d34-0123456789ab " << start << " t\n";
  EXPECT_EQ(stop_recorded_process_groups(dir), 0u);
  EXPECT_TRUE(running(other));
}

TEST(Process, FindExecutable) {
  auto sh_path = find_executable("sh", "/nonexistent:/bin:/usr/bin");
  ASSERT_TRUE(sh_path);
  EXPECT_EQ(sh_path->filename(), "sh");
  EXPECT_FALSE(find_executable("sh", "/nonexistent"));
  EXPECT_FALSE(find_executable("", "/bin"));
  EXPECT_TRUE(find_executable("/bin/sh", ""));
  EXPECT_FALSE(find_executable("/etc/passwd", ""));  // not executable
  EXPECT_FALSE(find_executable("/bin", ""));         // a directory
}

}  // namespace
}  // namespace sb::tool
