#pragma once
// Small helpers shared by the wire formats (internal to provider/). Model streams are read
// leniently: a field of the wrong type is treated as absent rather than failing a stream whose
// meaning is still clear, which is why these do not use util/json.hpp's strict getters.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "provider/sse_decoder.hpp"
#include "provider/types.hpp"
#include "util/json.hpp"

namespace sb::provider {

// The integer at `key`, or 0 when absent, null or not an integral number.
inline std::int64_t int_field(const json::object& obj, std::string_view key) {
  auto value = get_int(obj, key);
  return value && *value ? **value : 0;
}

// The object at `key`, or nullptr when absent or not an object.
inline const json::object* object_field(const json::object& obj, std::string_view key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->value().is_object()) return nullptr;
  return &it->value().get_object();
}

// A stream event's JSON is parsed into a buffer of this size on the parser's stack (a
// json::monotonic_resource over it; a larger event takes the rest from the heap): it is read and
// dropped, and what the parser keeps is copied out of it.
inline constexpr std::size_t kStreamEventBuffer = 4096;

// One event of a model stream, which must be a JSON object, parsed into `sp`. The error says what
// is wrong: parse_json's words, or the kind of value that came instead of an object.
inline Result<json::value> parse_stream_object(std::string_view data, json::storage_ptr sp) {
  auto parsed = parse_json(data, 64, std::move(sp));
  if (parsed && !parsed->is_object())
    return Error{ErrorCode::InvalidRequest,
                 "expected an object, got " + std::string(kind_name(*parsed))};
  return parsed;
}

inline std::string_view trim_ascii_space(std::string_view text) {
  std::size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) return {};
  std::size_t end = text.find_last_not_of(" \t\r\n");
  return text.substr(begin, end - begin + 1);
}

// A history tool call's input as the JSON text of an object ({} for anything else; see
// ModelToolCall::input).
inline std::string tool_input_as_object_text(const json::value& input) {
  return input.is_object() ? json::serialize(input) : std::string("{}");
}

// Error types/codes that name a transient condition worth retrying.
inline bool is_transient_error_name(std::string_view name) {
  return name == "rate_limit_error" || name == "rate_limit_exceeded" ||
         name == "overloaded_error" || name == "api_error" || name == "server_error" ||
         name == "timeout_error" || name == "service_unavailable" || name == "internal_error";
}

// `body` serialized, with the member "tools" (the tools array as JSON text, made once per tool
// set) added unless the set is empty: the tools are most of a request body and the same at every
// step, so they are not rebuilt and serialized again each time.
inline std::string serialize_with_tools(const json::object& body, const ToolSet& tools,
                                        std::string_view format,
                                        json::array (*build)(const std::vector<ToolSchema>&)) {
  std::string out = json::serialize(body);
  if (tools.empty()) return out;
  const std::string& array = tools.serialized(format, build);
  // `out` is an object, so it ends with '}'; the new member goes in front of it.
  out.pop_back();
  out.reserve(out.size() + array.size() + 11);
  if (!body.empty()) out += ',';
  out += "\"tools\":";
  out += array;
  out += '}';
  return out;
}

// The reason a step finished: the stream's own, or without one stop, or tool-calls when the step
// made tool calls. A step that made calls but says "stop" (older Ollama, some vLLM chat templates)
// is reported as tool-calls so that the caller runs them.
inline FinishReason step_finish_reason(std::optional<FinishReason> given, bool made_tool_calls) {
  FinishReason reason =
      given.value_or(made_tool_calls ? FinishReason::ToolCalls : FinishReason::Stop);
  if (reason == FinishReason::Stop && made_tool_calls) reason = FinishReason::ToolCalls;
  return reason;
}

// The part of a StreamParser that both wire formats share, as both stream server-sent events:
// the body's bytes go through the SSE decoder and each complete event to handle_event, until the
// stream is done. The events decoded before a decoding failure still count; the failure then ends
// the stream (not retryable). A body that ends before the stream is done finishes the step if
// step_complete() says nothing the step needs is missing, else it ends with
// StreamError(kStreamEndedEarly), retryable. Not thread-safe: one parser per response.
class SseStreamParser : public StreamParser {
 public:
  void feed(std::string_view bytes, std::vector<StreamEvent>& out) final {
    if (done_) return;
    sse_events_.clear();
    auto fed = sse_.feed(bytes, sse_events_);
    handle_events(out);  // the events before a decoding failure still count
    if (!fed && !done_) fail(fed.error().message, false, out);
  }

  void finish(std::vector<StreamEvent>& out) final {
    if (done_) return;
    sse_events_.clear();
    sse_.finish(sse_events_);
    handle_events(out);
    if (done_) return;
    if (step_complete()) {
      finish_step(out);
    } else {
      fail(std::string(kStreamEndedEarly), true, out);
    }
  }

  bool done() const final { return done_; }

 protected:
  explicit SseStreamParser(sse::SseDecoder::Options sse_options = {}) : sse_(sse_options) {}

  virtual void handle_event(const sse::SseEvent& event, std::vector<StreamEvent>& out) = 0;
  // Whether the body may end here, before the format's last event, with the step complete.
  virtual bool step_complete() const = 0;
  // Emits what the step still owes and its StepFinish, then end_stream().
  virtual void finish_step(std::vector<StreamEvent>& out) = 0;

  // The terminal event has been emitted: nothing more is parsed.
  void end_stream() { done_ = true; }
  void fail(std::string message, bool retryable, std::vector<StreamEvent>& out) {
    out.push_back(StreamError{std::move(message), retryable});
    end_stream();
  }

 private:
  void handle_events(std::vector<StreamEvent>& out) {
    for (const auto& event : sse_events_) {
      if (done_) return;
      handle_event(event, out);
    }
  }

  sse::SseDecoder sse_;
  std::vector<sse::SseEvent> sse_events_;  // scratch, reused between feeds
  bool done_ = false;
};

}  // namespace sb::provider
