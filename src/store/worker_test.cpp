// store::Worker: where the event loop's store calls run (inline, or on a thread of its own).
#include "store/worker.hpp"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "util/run_to_end.hpp"

namespace sb::store {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

// On a thread of its own, a call that takes long holds up neither the caller's loop (its timers
// fire meanwhile) nor its order: calls run one at a time as they were made, and each caller
// resumes on the loop's thread with its own result.
TEST(Worker, OwnThreadRunsCallsInOrderWhileTheLoopGoesOn) {
  asio::io_context io;
  Worker worker(true);
  EXPECT_FALSE(worker.inline_calls());
  auto loop = std::this_thread::get_id();
  std::vector<int> order;  // touched by the worker's thread only, one call at a time
  std::atomic<std::thread::id> ran_on{};
  int ticks = 0;
  asio::steady_timer tick(io);
  std::function<void()> arm = [&] {
    tick.expires_after(10ms);
    tick.async_wait([&](boost::system::error_code ec) {
      if (ec) return;
      ++ticks;
      arm();
    });
  };
  arm();
  auto slow = [&]() -> asio::awaitable<Result<int>> {
    co_return co_await worker.run([&]() -> Result<int> {
      ran_on = std::this_thread::get_id();
      std::this_thread::sleep_for(300ms);
      order.push_back(1);
      return 1;
    });
  };
  auto quick = [&]() -> asio::awaitable<Result<int>> {
    co_return co_await worker.run([&]() -> Result<int> {
      order.push_back(2);
      return 2;
    });
  };
  std::optional<Result<int>> first, second;
  std::thread::id resumed_on;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        first = co_await slow();
        resumed_on = std::this_thread::get_id();
      },
      asio::detached);
  asio::co_spawn(
      io, [&]() -> asio::awaitable<void> { second = co_await quick(); }, asio::detached);
  while (!first || !second)
    io.run_one();
  tick.cancel();
  ASSERT_TRUE(*first);
  ASSERT_TRUE(*second);
  EXPECT_EQ(**first, 1);
  EXPECT_EQ(**second, 2);
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_NE(ran_on.load(), loop) << "the call ran on the loop's thread";
  EXPECT_EQ(resumed_on, loop) << "the caller resumed off its loop";
  EXPECT_GE(ticks, 10) << "the loop waited for the call";
}

TEST(Worker, InlineRunsTheCallAtOnceOnTheCallersThread) {
  asio::io_context io;
  Worker worker(false);
  EXPECT_TRUE(worker.inline_calls());
  std::thread::id ran_on;
  auto r = run_to_end(io, worker.run([&]() -> Result<int> {
    ran_on = std::this_thread::get_id();
    return 7;
  }));
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, 7);
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

// A call that throws reaches its caller as an error, on both kinds; the thread goes on.
TEST(Worker, ACallThatThrowsIsAnInternalError) {
  for (bool own : {true, false}) {
    asio::io_context io;
    Worker worker(own);
    auto r = run_to_end(io, worker.run([]() -> Result<int> { throw std::runtime_error("boom"); }));
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::Internal);
    EXPECT_NE(r.error().message.find("boom"), std::string::npos) << r.error().message;
    auto next = run_to_end(io, worker.run([]() -> Result<int> { return 3; }));
    ASSERT_TRUE(next);
    EXPECT_EQ(*next, 3);
  }
}

// What is posted runs after the calls made before it, and the worker's end waits for it.
TEST(Worker, PostedWorkRunsInOrderBeforeTheWorkerEnds) {
  std::vector<int> order;
  {
    asio::io_context io;
    Worker worker(true);
    worker.post([&] {
      std::this_thread::sleep_for(50ms);
      order.push_back(1);
    });
    auto r = run_to_end(io, worker.run([&]() -> Result<int> {
      order.push_back(2);
      return 2;
    }));
    ASSERT_TRUE(r);
    worker.post([&] { order.push_back(3); });
  }
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

}  // namespace
}  // namespace sb::store
