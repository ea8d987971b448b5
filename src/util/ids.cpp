#include "util/ids.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <mutex>
#include <random>

namespace sb::ids {
namespace {

std::atomic<std::uint64_t> last_stamp{0};

std::uint64_t next_stamp() {
  auto now = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                            std::chrono::system_clock::now().time_since_epoch())
                                            .count());
  std::uint64_t candidate = now << 12;
  std::uint64_t prev = last_stamp.load(std::memory_order_relaxed);
  std::uint64_t next;
  do {
    next = candidate > prev ? candidate : prev + 1;
  } while (!last_stamp.compare_exchange_weak(prev, next, std::memory_order_relaxed));
  return next;
}

}  // namespace

std::string make(std::string_view prefix) {
  static constexpr char kBase62[] =
      "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  static constexpr char kHex[] = "0123456789abcdef";
  thread_local std::mt19937_64 rng{std::random_device{}()};

  // Filled in a buffer and copied once: ids are made several times per client-tool call.
  char tail[12 + 14];
  std::uint64_t stamp = next_stamp();
  for (int i = 0; i < 12; ++i)
    tail[i] = kHex[(stamp >> (44 - 4 * i)) & 0xf];
  // Ten base62 digits from one 64-bit draw (62^10 < 2^64), four from a second: 2 draws per id
  // instead of 14.
  std::uint64_t bits = rng();
  for (int i = 0; i < 14; ++i) {
    if (i == 10) bits = rng();
    tail[12 + i] = kBase62[bits % 62];
    bits /= 62;
  }
  std::string id;
  id.reserve(prefix.size() + 1 + sizeof tail);
  id.append(prefix);
  id.push_back('_');
  id.append(tail, sizeof tail);
  return id;
}

}  // namespace sb::ids
