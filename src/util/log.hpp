#pragma once
// Minimal leveled logging to stderr, one line per call, safe from any thread.
#include <sstream>
#include <string>

namespace sb::log {

enum class Level { Debug, Info, Warn, Error };

void set_level(Level level);
bool enabled(Level level);
void write(Level level, const std::string& line);

template <class... Args>
void emit(Level level, const Args&... args) {
  if (!enabled(level)) return;
  std::ostringstream out;
  (out << ... << args);
  write(level, out.str());
}

template <class... Args>
void debug(const Args&... args) {
  emit(Level::Debug, args...);
}
template <class... Args>
void info(const Args&... args) {
  emit(Level::Info, args...);
}
template <class... Args>
void warn(const Args&... args) {
  emit(Level::Warn, args...);
}
template <class... Args>
void error(const Args&... args) {
  emit(Level::Error, args...);
}

}  // namespace sb::log
