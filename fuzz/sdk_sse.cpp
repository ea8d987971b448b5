// The C++ SDK's event-stream parser: what a client reads from the server (or from whatever
// answers at the URL it was given). Invariant: the events do not depend on how bytes are split.
#include "../sdk/cpp/src/http.hpp"
#include "split.hpp"

namespace {

using Events = std::vector<switchboard::detail::SseEvent>;

bool same(const Events& a, const Events& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].id != b[i].id || a[i].event != b[i].event || a[i].data != b[i].data) return false;
  return true;
}

Events parse(const std::vector<std::string_view>& chunks) {
  switchboard::detail::SseParser parser;
  Events events;
  for (auto chunk : chunks)
    parser.feed(chunk, events);
  return events;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  if (!same(parse({input}), parse(sb::fuzz::split(input))))
    sb::fuzz::fail("SDK SSE events depend on how the bytes are split");
  return 0;
}
