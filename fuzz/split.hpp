#pragma once
// Shared by the stream fuzz targets: the streams' contract is that the same bytes give the same
// result however the network splits them, so each target feeds its input once whole and once cut
// into chunks whose sizes come from a hash of the input, and compares.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

namespace sb::fuzz {

// Chunks of 1..16 bytes, chosen by a small generator seeded from the input (so a crash input
// reproduces its own split).
inline std::vector<std::string_view> split(std::string_view input) {
  std::uint64_t state = 0x9e3779b97f4a7c15ull ^ input.size();
  for (unsigned char c : input.substr(0, 32))
    state = (state ^ c) * 0x100000001b3ull;
  std::vector<std::string_view> out;
  while (!input.empty()) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    std::size_t n = 1 + state % 16;
    if (n > input.size()) n = input.size();
    out.push_back(input.substr(0, n));
    input.remove_prefix(n);
  }
  return out;
}

// libFuzzer treats abort() as a finding and keeps the input.
[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
  std::abort();
}

}  // namespace sb::fuzz
