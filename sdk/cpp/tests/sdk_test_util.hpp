#pragma once
// Shared by the SDK's tests: a server per test (blackbox_util's ServerTest checks its clean
// shutdown), SDK options with short delays, and small synchronization helpers for handlers.
#include <switchboard/client.hpp>

#include <condition_variable>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include "blackbox_util.hpp"

namespace switchboard {
// Names the transport in test output ("sse", not "4-byte object <00-00 00-00>").
inline void PrintTo(Transport transport, std::ostream* os) {
  *os << (transport == Transport::sse ? "sse" : "websocket");
}
}  // namespace switchboard

namespace switchboard::test {

using namespace std::chrono_literals;
using sb::test::find;
using sb::test::string_at;

// Reconnection within tenths of a second, so that the tests stay fast.
inline ClientToolsOptions fast_options(Transport transport = Transport::sse) {
  ClientToolsOptions o;
  o.transport = transport;
  o.timeout = 10s;
  o.reconnect_delay = 100ms;
  o.max_reconnect_delay = 400ms;
  o.max_reconnect_attempts = 30;
  o.request_timeout = 3s;
  o.idle_timeout = 5s;
  return o;
}

inline ToolDefinition text_tool(std::string description = "a test tool") {
  ToolDefinition d;
  d.description = std::move(description);
  d.parameters = sb::test::text_schema();
  return d;
}

// The black-box tests' configuration with client tokens on, as a server has them by default:
// every SDK test runs the token flow (the SDK keeps the token it was issued and sends it).
inline json::object test_config(const json::object& client_tools = {},
                                const json::object& server = {}) {
  json::object ct = client_tools;
  if (!ct.contains("clientTokens")) ct["clientTokens"] = true;
  return sb::test::test_config(ct, server);
}

class SdkTest : public sb::test::ServerTest {
 protected:
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port()); }
};

// A flag that handlers wait on; every wait is bounded.
class Gate {
 public:
  void open() {
    {
      std::lock_guard lock(mutex_);
      open_ = true;
    }
    cv_.notify_all();
  }
  // True when opened within the timeout.
  bool wait(std::chrono::milliseconds timeout = 10s) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, timeout, [&] { return open_; });
  }
  // Waits until the gate opens or `stop` fires; true when stopped first.
  bool wait_or_stop(std::stop_token stop, std::chrono::milliseconds timeout = 10s) {
    std::unique_lock lock(mutex_);
    bool opened = cv_.wait_for(lock, stop, timeout, [&] { return open_; });
    return !opened && stop.stop_requested();
  }

 private:
  std::mutex mutex_;
  std::condition_variable_any cv_;
  bool open_ = false;
};

// Collects values from any thread; waits for them with a timeout.
template <class T>
class Collected {
 public:
  void add(T value) {
    {
      std::lock_guard lock(mutex_);
      values_.push_back(std::move(value));
    }
    cv_.notify_all();
  }
  std::vector<T> values() const {
    std::lock_guard lock(mutex_);
    return values_;
  }
  std::size_t size() const { return values().size(); }
  // Waits until there are at least `n` values.
  bool wait_for(std::size_t n, std::chrono::milliseconds timeout = 5s) const {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, timeout, [&] { return values_.size() >= n; });
  }

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  std::vector<T> values_;
};

// A handler that runs until its stop token fires (or 10 s pass) and records why it stopped:
// reasons() holds "started", then the stop reason ("not stopped" after the 10 s).
struct StoppableTool {
  Collected<std::string> reasons;
  Gate never;
  ClientToolsManager::Handler handler() {
    return [this](const json::object&, ToolContext& ctx) -> ToolOutput {
      reasons.add("started");
      bool stopped = never.wait_or_stop(ctx.stop_token());
      reasons.add(stopped ? ctx.stop_reason() : "not stopped");
      return "too late";
    };
  }
  std::string stop_reason() { return reasons.wait_for(2) ? reasons.values()[1] : "(none)"; }
};

}  // namespace switchboard::test
