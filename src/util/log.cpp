#include "util/log.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>

namespace sb::log {
namespace {
std::atomic<Level> min_level{Level::Info};

const char* name(Level level) {
  switch (level) {
    case Level::Debug:
      return "DEBUG";
    case Level::Info:
      return "INFO";
    case Level::Warn:
      return "WARN";
    case Level::Error:
      return "ERROR";
  }
  return "?";
}
}  // namespace

void set_level(Level level) {
  min_level.store(level);
}
bool enabled(Level level) {
  return level >= min_level.load(std::memory_order_relaxed);
}

void write(Level level, const std::string& line) {
  auto now = std::chrono::system_clock::now();
  std::time_t secs = std::chrono::system_clock::to_time_t(now);
  auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
  // One fprintf per line keeps lines whole when several threads log at once.
  std::fprintf(stderr, "%s.%03dZ %-5s %s\n", stamp, static_cast<int>(ms), name(level),
               line.c_str());
}

}  // namespace sb::log
