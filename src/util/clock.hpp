#pragma once
// Wall-clock time as the API and the store carry it: milliseconds since the Unix epoch.
#include <chrono>
#include <cstdint>

namespace sb {

inline std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace sb
