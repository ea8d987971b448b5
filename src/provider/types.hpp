#pragma once
// Provider-neutral model types: what the session processor sends a language model (ModelRequest)
// and what a model's streamed answer is turned into (StreamEvent). Each wire format (openai.hpp,
// anthropic.hpp) translates to and from these; nothing here knows about HTTP.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "util/json.hpp"

namespace sb::provider {

// ---- What goes to the model ------------------------------------------------------------------

enum class Role { System, User, Assistant, Tool };

// "system", "user", "assistant", "tool".
std::string_view role_name(Role role);

// A tool call the assistant made earlier in the conversation, sent back as history.
struct ModelToolCall {
  std::string id;
  std::string name;
  // The arguments. Builders send an object as is and anything else (a call whose arguments did
  // not parse) as {}: servers that re-parse the history reject invalid JSON there.
  json::value input;

  friend bool operator==(const ModelToolCall&, const ModelToolCall&) = default;
};

// The JSON text a wire format wrote for a message, kept with the message: the conversation is
// sent again at every step, and escaping its strings again was most of a request's cost. Not part
// of the message's value: == ignores it, and a copy starts without it (a copy may be edited; the
// conversation itself is only ever moved, which keeps it). Written without a lock: a
// conversation is used by one turn on the server's one I/O thread.
struct WireText {
  std::string_view format;  // the writer that made `text` ("openai"); empty: none yet
  std::string text;

  WireText() = default;
  WireText(const WireText&) {}
  WireText& operator=(const WireText&) {
    format = {};
    text.clear();
    return *this;
  }
  WireText(WireText&&) = default;
  WireText& operator=(WireText&&) = default;
  friend bool operator==(const WireText&, const WireText&) { return true; }
};

// What a model takes besides text (provider.NAME.input, docs/configuration.md).
struct InputKinds {
  bool image = true;  // PNG, JPEG, GIF, WebP
  bool pdf = true;

  friend bool operator==(const InputKinds&, const InputKinds&) = default;
};

// A file of a user's message that goes to the model as itself (an image, a PDF), not as text.
// `data_url` ("data:MIME;base64,...") is shared: the conversation, its copies and the stored part
// it came from hold one copy of megabytes, not one each.
struct Attachment {
  enum class Kind { Image, Pdf };
  Kind kind = Kind::Image;
  std::string mime;
  std::string filename;
  std::shared_ptr<const std::string> data_url;

  // The base64 after the comma of data_url.
  std::string_view base64() const;
  // "image", "PDF".
  std::string_view kind_name() const { return kind == Kind::Image ? "image" : "PDF"; }
  bool accepted_by(const InputKinds& input) const {
    return kind == Kind::Image ? input.image : input.pdf;
  }
  // The text a model that does not take this kind reads instead.
  std::string refused_note() const;

  friend bool operator==(const Attachment& a, const Attachment& b) {
    return a.kind == b.kind && a.mime == b.mime && a.filename == b.filename &&
           (a.data_url == b.data_url || (a.data_url && b.data_url && *a.data_url == *b.data_url));
  }
};

// One message of the conversation. Which fields matter depends on the role:
//   System: text.  User: text and attachments (sent before the text).
//   Assistant: text and/or tool_calls.
//   Tool: the result of one call: tool_call_id, output, is_error.
struct ModelMessage {
  Role role = Role::User;
  std::string text;
  std::vector<Attachment> attachments;
  std::vector<ModelToolCall> tool_calls;
  std::string tool_call_id;
  std::string output;
  bool is_error = false;
  // Written by the request writers. A message is not changed once a request has been written
  // from it (a conversation only grows), so the text stays that of the fields above.
  mutable WireText wire;

  static ModelMessage system(std::string text);
  static ModelMessage user(std::string text, std::vector<Attachment> attachments = {});
  static ModelMessage assistant(std::string text, std::vector<ModelToolCall> calls = {});
  static ModelMessage tool_result(std::string call_id, std::string output, bool is_error = false);

  friend bool operator==(const ModelMessage&, const ModelMessage&) = default;
};

// A tool as offered to the model. `parameters` is the JSON Schema of the input object as the
// registry holds it; the builders adapt it per provider (see openai_tool_schema /
// anthropic_tool_schema).
struct ToolSchema {
  std::string name;
  std::string description;
  json::object parameters;
};

// The tools of a request: an immutable list shared by copies (every step of a turn offers the
// same), with each wire format's serialized tools array built once for it (`serialized`). Not
// thread-safe: copies share the cache, and a request is built on the server's executor only.
class ToolSet {
 public:
  ToolSet() = default;
  ToolSet(std::vector<ToolSchema> tools);  // NOLINT: implicit, a request's tools are a list
  ToolSet(std::initializer_list<ToolSchema> tools) : ToolSet(std::vector<ToolSchema>(tools)) {}

  const std::vector<ToolSchema>& schemas() const;
  bool empty() const { return schemas().empty(); }
  std::size_t size() const { return schemas().size(); }
  auto begin() const { return schemas().begin(); }
  auto end() const { return schemas().end(); }

  // The JSON text of `build(schemas())`, made on the first call for `format` and kept.
  const std::string& serialized(std::string_view format,
                                json::array (*build)(const std::vector<ToolSchema>&)) const;

 private:
  struct Shared;
  std::shared_ptr<Shared> shared_;
};

struct ModelRequest {
  std::string model;
  std::string system;  // the system prompt; empty for none
  std::vector<ModelMessage> messages;
  ToolSet tools;
  // The tools are described (a history with tool calls needs them: Anthropic refuses tool_use
  // blocks without tools) but may not be called: tool_choice "none".
  bool no_tool_calls = false;
  std::optional<std::int64_t> max_tokens;  // Anthropic requires one: kAnthropicDefaultMaxTokens
  std::optional<double> temperature;
  // What the model takes: an attachment of another kind in the history (sent when another
  // model answered) goes as Attachment::refused_note() instead.
  InputKinds input;
};

// ---- What comes back ---------------------------------------------------------------------------

// Token counts of one step. The fields are disjoint, so their sum is everything the step cost:
// `input` excludes tokens read from or written to the prompt cache, `output` excludes tokens the
// provider reported as reasoning. A provider that does not break a count down reports 0 for the
// part (Anthropic's output_tokens include thinking, so its `reasoning` is 0).
struct Usage {
  std::int64_t input = 0;
  std::int64_t output = 0;
  std::int64_t reasoning = 0;
  std::int64_t cache_read = 0;
  std::int64_t cache_write = 0;

  friend bool operator==(const Usage&, const Usage&) = default;
};

enum class FinishReason { Stop, ToolCalls, Length, ContentFilter, Other };

// "stop", "tool-calls", "length", "content-filter", "other" (the names of seed 002 / AI SDK).
std::string_view finish_reason_name(FinishReason reason);

// A piece of the answer's text.
struct TextDelta {
  std::string text;
  friend bool operator==(const TextDelta&, const TextDelta&) = default;
};

// A piece of the model's visible reasoning ("thinking").
struct ReasoningDelta {
  std::string text;
  friend bool operator==(const ReasoningDelta&, const ReasoningDelta&) = default;
};

// The model began a tool call; its input streams next. `index` counts the step's calls from 0.
struct ToolInputStart {
  std::size_t index = 0;
  std::string id;
  std::string name;
  friend bool operator==(const ToolInputStart&, const ToolInputStart&) = default;
};

// A piece of a started call's input, as raw JSON text (not parseable on its own).
struct ToolInputDelta {
  std::string id;
  std::string delta;
  friend bool operator==(const ToolInputDelta&, const ToolInputDelta&) = default;
};

// A complete tool call. Always preceded by the ToolInputStart of the same id.
struct ToolCall {
  std::string id;
  std::string name;
  // The parsed arguments: an object when input_valid. Empty arguments mean {}.
  json::value input;
  // The arguments exactly as the model sent them.
  std::string raw_input;
  // False when raw_input is not a JSON object: the caller should answer the call with an
  // `invalid` tool result built from input_error rather than run the tool.
  bool input_valid = true;
  std::string input_error;
  friend bool operator==(const ToolCall&, const ToolCall&) = default;
};

// The step ended normally. Every ToolCall of the step has been emitted before this.
struct StepFinish {
  FinishReason reason = FinishReason::Stop;
  Usage usage;
  std::string provider_reason;  // the provider's own word ("end_turn", "tool_calls"), for logs
  friend bool operator==(const StepFinish&, const StepFinish&) = default;
};

// The step ended in failure. `retryable` says the cause is transient (the provider is overloaded
// or rate limited, a server error, a stream cut short by the network); a malformed stream or a
// rejected request is not. Output already emitted stays emitted: whether a retry is appropriate
// after partial output is the caller's policy.
struct StreamError {
  std::string message;
  bool retryable = false;
  int http_status = 0;  // the provider's HTTP status when it refused the request, else 0
  friend bool operator==(const StreamError&, const StreamError&) = default;
};

using StreamEvent = std::variant<TextDelta, ReasoningDelta, ToolInputStart, ToolInputDelta,
                                 ToolCall, StepFinish, StreamError>;

// One line for logs and test failures, e.g. `tool-call call_1 read {"path":"a"}`.
std::string describe(const StreamEvent& event);

// Turns the raw bytes of one streamed model response into StreamEvents. The contract every
// implementation keeps: events come out in the order the model produced them; the same bytes give
// the same events however they are split into chunks (ids a parser has to make up for calls the
// server sent without one aside); once finish() has been called the stream
// has produced exactly one terminal event (StepFinish or StreamError), after which the parser is
// done() and ignores further input. Not thread-safe: one parser per response.
class StreamParser {
 public:
  virtual ~StreamParser() = default;

  // Feeds the next bytes of the response body; appends the events they complete to `out`.
  virtual void feed(std::string_view bytes, std::vector<StreamEvent>& out) = 0;

  // The body ended (the connection closed cleanly). A stream that had not finished its step
  // yields StreamError("stream ended before the model finished").
  virtual void finish(std::vector<StreamEvent>& out) = 0;

  // A terminal event has been emitted.
  virtual bool done() const = 0;
};

// The message of the StreamError for a body that ends before the model finished its step.
inline constexpr std::string_view kStreamEndedEarly = "stream ended before the model finished";

// Parses the accumulated argument text of a tool call into ToolCall::input / input_valid /
// input_error. Shared by the wire formats so both treat odd arguments alike: empty or
// whitespace-only text is {} (models call parameterless tools that way); an object encoded
// twice (a JSON string holding an object, which some models emit) is unwrapped.
void parse_tool_input(ToolCall& call);

}  // namespace sb::provider
