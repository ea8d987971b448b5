#pragma once
// The server's event-loop lag over a window of a benchmark (how late a 1 ms timer on its loop
// ran; src/app/loop_lag.hpp), read from the "loop lag:" lines that a server started with
// SWITCHBOARD_LOOP_LAG logs at each SIGUSR1. A server that does not measure it (an older build)
// does not say "loop lag: measuring" at start, and is sent no SIGUSR1 (which would kill it).
#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>
#include <thread>

#include "server_process.hpp"

namespace bench {

struct LoopLag {
  bool found = false;
  std::size_t ticks = 0;
  double p50_us = 0, p99_us = 0, max_us = 0;
};

inline constexpr std::string_view kLagLine = "loop lag: ";
inline constexpr std::string_view kLagOn = "loop lag: measuring";

// Whether the server's log says it measures its loop lag (it does so before "listening on").
inline bool measures_loop_lag(const sb::test::ServerProcess& server) {
  return server.log().find(kLagOn) != std::string::npos;
}

// Ends the server's current lag window: the server logs it and starts the next.
inline void mark_loop_lag(pid_t server, bool on) {
  if (on) ::kill(server, SIGUSR1);
}

// The `nth` (1-based) window the server logged, waiting up to 2 s for it; not found when the
// line does not come.
inline LoopLag read_loop_lag(const sb::test::ServerProcess& server, int nth) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (;;) {
    std::string text = server.log();
    int seen = 0;
    for (auto at = text.find(kLagLine); at != std::string::npos; at = text.find(kLagLine, at + 1)) {
      std::string line = text.substr(at, text.find('\n', at) - at);
      if (line.starts_with(kLagOn) || ++seen < nth) continue;
      LoopLag lag;
      double seconds = 0;
      unsigned long long ticks = 0;
      if (std::sscanf(line.c_str(),
                      "loop lag: %llu ticks in %lf s, p50 %lf us, p99 %lf us, max %lf us", &ticks,
                      &seconds, &lag.p50_us, &lag.p99_us, &lag.max_us) == 5) {
        lag.found = true;
        lag.ticks = ticks;
      }
      return lag;
    }
    if (std::chrono::steady_clock::now() > deadline) return {};
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace bench
