#pragma once
// The OpenAI Chat Completions streaming wire format, as spoken by OpenAI and the servers that
// copy it (vLLM, llama.cpp's server, Ollama, OpenRouter, DeepSeek, LM Studio, ...). Pure
// translation between bytes/JSON and the types of provider/types.hpp; the HTTP client lives
// elsewhere.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "provider/schema_transform.hpp"
#include "provider/types.hpp"
#include "provider/wire_util.hpp"

namespace sb::provider {

struct OpenAIRequestOptions {
  // OpenAI's reasoning models reject "max_tokens" and want "max_completion_tokens"; most
  // compatible servers know only "max_tokens". Default: "max_tokens".
  bool use_max_completion_tokens = false;
  // stream_options.include_usage makes the last chunk carry the token usage. Some older
  // compatible deployments refuse the field; turn it off for them. Default: sent.
  bool include_usage = true;
};

// The body of POST {baseURL}/chat/completions with stream: true and (unless turned off)
// stream_options.include_usage. Tools go out as
// {type: "function", function: {name, description, parameters}} with parameters adapted by
// openai_tool_schema(); "tools" is omitted when there are none (some servers reject []).
// Assistant tool calls carry their arguments serialized as a JSON string; tool results are
// role "tool" messages. OpenAI has no error flag for a tool result, so an error result is sent
// as its text alone (the tool's message says what went wrong). The tools array is serialized
// once per ToolSet and spliced in.
std::string serialize_openai_request(const ModelRequest& request,
                                     const OpenAIRequestOptions& options = {});
// The "tools" array of a request.
json::array openai_tools(const std::vector<ToolSchema>& schemas);

// Parses a streamed Chat Completions response body (SSE of chat.completion.chunk objects).
//
// Tool calls: a call's deltas are keyed by their `index` (several calls stream in parallel);
// the first delta of an index carries id and name (ToolInputStart), the arguments arrive spread
// over later deltas (ToolInputDelta). Complete ToolCall events are emitted when the step
// finishes (at finish_reason), in the order the calls started, because arguments for different
// indexes may interleave and only then is every call known to be complete. A delta that brings
// a new id for an index already in use starts a new call (some servers send every call as
// index 0). A call the server sent without an id gets a fresh unique one ("call_..."), because
// the caller keys tool parts by call id across the whole session.
//
// Finish: finish_reason maps stop → stop, tool_calls/function_call → tool-calls, length →
// length, content_filter → content-filter, anything else → other; a step that produced tool calls
// but says "stop" (older Ollama, some vLLM chat templates) is reported as tool-calls so the caller
// runs them. StepFinish comes at "data: [DONE]" so that it carries the usage of the final chunk
// (empty choices); a body that ends after a finish_reason without [DONE] still finishes
// (without usage if none came). [DONE] without any finish_reason finishes too, inferring
// tool-calls or stop. A body that ends with neither → StreamError(kStreamEndedEarly), retryable.
//
// Errors: an {"error": {...}} chunk (OpenAI, OpenRouter), {"object": "error", ...} (vLLM), an
// "event: error" or llama.cpp's "error: {...}" line → StreamError, retryable for rate limits,
// overload and server errors; a data line that is not a JSON object → StreamError (not
// retryable).
class OpenAIStreamParser final : public SseStreamParser {
 public:
  OpenAIStreamParser() : OpenAIStreamParser(sse::SseDecoder::Options{}) {}
  explicit OpenAIStreamParser(sse::SseDecoder::Options sse_options)
      : SseStreamParser(with_error_lines(sse_options)) {}

 private:
  struct PendingCall {
    std::string id;
    std::string name;
    std::string arguments;
    std::int64_t wire_index = 0;
    bool started = false;  // ToolInputStart emitted (it waits for a name)
    bool emitted = false;  // ToolCall emitted
  };

  static sse::SseDecoder::Options with_error_lines(sse::SseDecoder::Options options) {
    options.error_field_as_event = true;
    return options;
  }
  void handle_event(const sse::SseEvent& event, std::vector<StreamEvent>& out) override;
  bool step_complete() const override;
  void finish_step(std::vector<StreamEvent>& out) override;
  void handle_data(std::string_view data, std::vector<StreamEvent>& out);
  void handle_error_event(std::string_view data, std::vector<StreamEvent>& out);
  void handle_chunk(const json::object& chunk, std::vector<StreamEvent>& out);
  // `position`: the delta's place in its chunk's tool_calls array.
  void handle_tool_delta(const json::object& delta, std::size_t position,
                         std::vector<StreamEvent>& out);
  void emit_tool_calls(std::vector<StreamEvent>& out);

  std::vector<PendingCall> calls_;  // this step's calls, in the order they started
  std::optional<FinishReason> finish_reason_;
  std::string provider_reason_;
  Usage usage_;
};

}  // namespace sb::provider
