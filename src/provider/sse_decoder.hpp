#pragma once
// An incremental Server-Sent Events decoder following the WHATWG HTML "event stream
// interpretation" rules: bytes arrive in chunks split anywhere (inside a line, between the CR and
// LF of a CRLF, inside a UTF-8 sequence or the BOM) and complete events come out.
//
// Standalone on purpose (depends only on util/error.hpp): the model providers use it for LLM
// streams, the black-box tests and the benchmarks for the server's own event streams (/event,
// the client-tool streams). The C++ client SDK ships on its own and keeps its own parser.
// Not thread-safe: one decoder per stream.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/error.hpp"

namespace sb::sse {

struct SseEvent {
  std::string type = "message";        // the `event:` field; "message" when the block had none
  std::string data;                    // the `data:` lines joined with "\n"
  std::string id;                      // the last event id seen on the stream so far (it persists)
  std::optional<std::uint64_t> retry;  // a valid `retry:` field inside this event's block

  friend bool operator==(const SseEvent&, const SseEvent&) = default;
};

class SseDecoder {
 public:
  struct Options {
    // A line or an event's accumulated data longer than this fails the stream: a peer that never
    // ends a line must not grow memory without bound. Tool inputs (a file to write) can be big.
    std::size_t max_event_bytes = 16 * 1024 * 1024;
    // llama.cpp's server reports a failure mid-stream as an `error: {...}` line, a field the
    // standard ignores. When set, such a line is dispatched at once as an event of type "error"
    // whose data is the line's value (the block being built is not affected). Default: off.
    bool error_field_as_event = false;
  };

  SseDecoder() : SseDecoder(Options{}) {}
  explicit SseDecoder(Options options) : options_(options) {}

  // Decodes `chunk`, appending every event it completes to `out`. Fails (TooLarge) when an event
  // exceeds max_event_bytes; the failure is sticky, later calls return it again.
  Result<void> feed(std::string_view chunk, std::vector<SseEvent>& out);

  // The stream ended. WHATWG discards an event whose blank line never came; this still dispatches
  // it when all of its lines are complete, because some LLM servers end the body after the last
  // "data: [DONE]\n" without the blank line. An unterminated last line is a line cut short by
  // the connection and is dropped. The decoder can be fed again afterwards as a new stream
  // (the last event id and retry persist, as for a reconnection).
  void finish(std::vector<SseEvent>& out);

  // The last `id:` seen (the value to send as Last-Event-ID when reconnecting).
  const std::string& last_event_id() const { return last_event_id_; }
  // The last valid `retry:` seen, in milliseconds, even if its block dispatched no event.
  std::optional<std::uint64_t> retry() const { return retry_; }

 private:
  void process_line(std::string_view line, std::vector<SseEvent>& out);
  void dispatch(std::vector<SseEvent>& out);
  bool too_large(std::size_t line_bytes) const;

  Options options_;
  std::string line_;             // the current line, not yet terminated
  std::size_t bom_matched_ = 0;  // bytes of a leading UTF-8 BOM matched so far
  bool bom_done_ = false;        // past the point where a BOM may appear
  bool after_cr_ = false;        // the previous byte ended a line with CR: a LF next belongs to it
  std::string data_;             // WHATWG "data buffer": every data line followed by "\n"
  std::string type_;             // WHATWG "event type buffer"
  std::optional<std::uint64_t> event_retry_;
  std::string last_event_id_;
  std::optional<std::uint64_t> retry_;
  std::optional<Error> error_;
};

}  // namespace sb::sse
