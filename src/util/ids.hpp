#pragma once
// Sortable, prefixed identifiers ("req_0192f3a1c2d4e5AbCdEfGhIjKlMn"): 12 hex digits of a
// monotonic (milliseconds << 12 | counter) stamp, then 14 random base62 characters so that ids
// cannot be guessed. Thread-safe.
#include <string>
#include <string_view>

namespace sb::ids {

std::string make(std::string_view prefix);

}  // namespace sb::ids
