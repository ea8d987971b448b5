// The SSE decoder the model providers read LLM streams with: bytes straight from a model server.
// Invariant: the events (and a too-large failure) do not depend on how the bytes are split.
#include "provider/sse_decoder.hpp"
#include "split.hpp"

namespace {

struct Outcome {
  std::vector<sb::sse::SseEvent> events;
  bool failed = false;
  std::string last_id;
  bool operator==(const Outcome&) const = default;
};

Outcome decode(const std::vector<std::string_view>& chunks, bool error_lines) {
  sb::sse::SseDecoder::Options options;
  options.max_event_bytes = 4096;  // small, so the limit is reached too
  options.error_field_as_event = error_lines;
  sb::sse::SseDecoder decoder(options);
  Outcome o;
  for (auto chunk : chunks) {
    if (!decoder.feed(chunk, o.events)) o.failed = true;
  }
  if (!o.failed) decoder.finish(o.events);
  o.last_id = decoder.last_event_id();
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  bool error_lines = size > 0 && (data[0] & 1);
  Outcome whole = decode({input}, error_lines);
  Outcome pieces = decode(sb::fuzz::split(input), error_lines);
  if (!(whole == pieces)) sb::fuzz::fail("SSE events depend on how the bytes are split");
  return 0;
}
