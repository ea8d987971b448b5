#pragma once
// Test support for the cluster's tests (redis_test.cpp, node_test.cpp): running an io_context
// until something happened, and the test command's Redis ($SWITCHBOARD_TEST_REDIS).
#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

namespace sb::cluster {

namespace asio = boost::asio;
using namespace std::chrono_literals;

// Runs `io` until `done()` or `limit`; whether done.
inline bool run_until(asio::io_context& io, const std::function<bool()>& done,
                      std::chrono::milliseconds limit = 10s) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    if (io.stopped()) io.restart();
    io.run_one_for(10ms);
  }
  return done();
}

// Runs `io` for `duration`, whatever happens.
inline void run_for(asio::io_context& io, std::chrono::milliseconds duration) {
  run_until(
      io, [] { return false; }, duration);
}

// Runs `co` to its end on `io`; what it returned.
template <typename T>
T run(asio::io_context& io, asio::awaitable<T> co, std::chrono::milliseconds limit = 10s) {
  auto out = std::make_shared<std::optional<T>>();
  asio::co_spawn(io, std::move(co), [out](std::exception_ptr e, T value) {
    if (e) std::rethrow_exception(e);
    *out = std::move(value);
  });
  if (!run_until(
          io, [&] { return out->has_value(); }, limit))
    throw std::runtime_error("the coroutine did not finish in time");
  return std::move(**out);
}

inline void run(asio::io_context& io, asio::awaitable<void> co,
                std::chrono::milliseconds limit = 10s) {
  auto done = std::make_shared<bool>(false);
  asio::co_spawn(io, std::move(co), [done](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
    *done = true;
  });
  if (!run_until(
          io, [&] { return *done; }, limit))
    throw std::runtime_error("the coroutine did not finish in time");
}

// The fixture's URL, or "" when the test command did not start one.
inline std::string fixture_url() {
  const char* dir = std::getenv("SWITCHBOARD_TEST_REDIS");
  if (!dir || !*dir) return "";
  std::ifstream in(std::string(dir) + "/redis.url");
  std::string url;
  std::getline(in, url);
  return url;
}

#define REQUIRE_REDIS()                                                                     \
  if (fixture_url().empty())                                                                \
  GTEST_SKIP() << "no Redis: SWITCHBOARD_TEST_REDIS is not set (ctest starts the fixture, " \
                  "or scripts/test-services.sh start redis DIR)"

// A key of this test process's own in the shared Redis.
inline std::string key(const std::string& name) {
  return "sbtest:" + std::to_string(::getpid()) + ":" + name;
}

}  // namespace sb::cluster
