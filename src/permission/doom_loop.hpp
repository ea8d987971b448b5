#pragma once
// Doom loop detection (seed 002): a model that calls the same tool with the same input again and
// again is stuck. The processor then asks the "doom_loop" permission (patterns: [tool],
// metadata: {tool, input}) before running the call. Pure function; thread-safe.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "util/json.hpp"

namespace sb::permission {

// A tool call as the processor recorded it.
struct RecentCall {
  std::string tool;
  json::value input;
  bool pending = false;  // still streaming its input: not a call yet
};

inline constexpr std::size_t kDoomLoopThreshold = 3;

// True when the last `threshold` entries of `history` are all calls of `tool` with `input` and
// none is pending. `history` is the tool calls in order, *including the call being checked* (it
// is running by then, as in OpenCode), so with the default the third identical call in a row
// trips it. Inputs compare as JSON values (object key order does not matter). A threshold of 0
// never trips.
bool is_doom_loop(const std::vector<RecentCall>& history, std::string_view tool,
                  const json::value& input, std::size_t threshold = kDoomLoopThreshold);

}  // namespace sb::permission
