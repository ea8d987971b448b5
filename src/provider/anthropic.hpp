#pragma once
// Anthropic's Messages API streaming wire format. Pure translation between bytes/JSON and the
// types of provider/types.hpp; the HTTP client lives elsewhere.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "provider/schema_transform.hpp"
#include "provider/types.hpp"
#include "provider/wire_util.hpp"

namespace sb::provider {

// The "anthropic-version" header value the request and parser are written for.
inline constexpr std::string_view kAnthropicVersion = "2023-06-01";

// The API requires max_tokens; this is sent when ModelRequest::max_tokens is unset.
inline constexpr std::int64_t kAnthropicDefaultMaxTokens = 8192;

// The body of POST {baseURL}/v1/messages with stream: true.
// - The system prompt is the top-level "system" (the API has no system role); system messages
//   found in the conversation are appended to it, separated by a blank line.
// - Tools go out as {name, description, input_schema} with the schema adapted by
//   anthropic_tool_schema(); "tools" is omitted when there are none.
// - An assistant's calls are tool_use blocks {id, name, input}; tool results are tool_result
//   blocks {tool_use_id, content, is_error} in a user message.
// - Consecutive messages of the same role are merged into one (the API wants user and assistant
//   to alternate, and all results of a step in the one user message after it), with the
//   tool_result blocks first in a merged user message (the API requires them before any text).
// - Empty or whitespace-only text is left out (the API rejects empty text blocks), and a message
//   left with no content at all is dropped.
json::object build_anthropic_request(const ModelRequest& request);
// The same body as JSON text, with the tools array serialized once per ToolSet (what the HTTP
// provider sends).
std::string serialize_anthropic_request(const ModelRequest& request);
// The "tools" array of a request.
json::array anthropic_tools(const std::vector<ToolSchema>& schemas);

// Parses a streamed Messages response body: message_start (usage), content_block_start
// (text / tool_use / thinking), content_block_delta (text_delta, input_json_delta,
// thinking_delta; signature_delta ignored), content_block_stop (a tool_use block's ToolCall, its
// input parsed from the accumulated partial JSON; none means {}), message_delta (stop_reason,
// usage), message_stop (StepFinish), ping, error. Event kinds it does not know are ignored, as
// Anthropic asks of clients (new ones may be added).
//
// stop_reason maps end_turn/stop_sequence → stop, tool_use → tool-calls, max_tokens and
// model_context_window_exceeded → length, refusal → content-filter, anything else (pause_turn)
// → other. Usage: message_start's input/cache counts, overridden by message_delta's (cumulative)
// counts when present. An error event → StreamError, retryable for overloaded_error,
// rate_limit_error, api_error and timeout_error. A body that ends before message_stop →
// StreamError(kStreamEndedEarly), retryable; a data line that is not a JSON object → StreamError.
class AnthropicStreamParser final : public SseStreamParser {
 public:
  AnthropicStreamParser() = default;
  explicit AnthropicStreamParser(sse::SseDecoder::Options sse_options)
      : SseStreamParser(sse_options) {}

 private:
  struct Block {
    enum class Kind { Text, Thinking, ToolUse, Other };
    Kind kind = Kind::Other;
    std::string id;
    std::string name;
    std::string partial_json;
    json::value initial_input;  // content_block_start's "input" (normally {})
  };

  void handle_event(const sse::SseEvent& event, std::vector<StreamEvent>& out) override;
  bool step_complete() const override;
  void finish_step(std::vector<StreamEvent>& out) override;
  void handle_block_start(const json::object& event, std::vector<StreamEvent>& out);
  void handle_block_delta(const json::object& event, std::vector<StreamEvent>& out);
  void handle_block_stop(const json::object& event, std::vector<StreamEvent>& out);
  void emit_tool_call(Block& block, std::vector<StreamEvent>& out);

  std::map<std::int64_t, Block> open_blocks_;  // by content block index
  std::size_t tool_calls_ = 0;                 // tool_use blocks started so far
  std::optional<FinishReason> finish_reason_;
  std::string provider_reason_;
  Usage usage_;
};

}  // namespace sb::provider
