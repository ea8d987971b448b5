#include "provider/openai.hpp"

#include <boost/json/basic_parser_impl.hpp>

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <cstring>
#include <optional>

#include "provider/wire_util.hpp"
#include "util/ids.hpp"

namespace sb::provider {

// ---- Request ---------------------------------------------------------------------------------

namespace {

// The body is written as text, not built as a tree and then serialized: it holds the whole
// conversation, sent again at every step, and the strings are most of its bytes.
void append_key(std::string& out, std::string_view key) {
  out.push_back('"');
  out.append(key);
  out.append("\":");
}

void append_text_message(std::string& out, std::string_view role, std::string_view text) {
  out.append(R"({"role":")");
  out.append(role);
  out.append(R"(","content":)");
  append_json_string(out, text);
  out.push_back('}');
}

void write_message(std::string& out, const ModelMessage& m) {
  switch (m.role) {
    case Role::System:
    case Role::User:
      append_text_message(out, role_name(m.role), m.text);
      return;
    case Role::Assistant:
      // Content stays a string even when empty: OpenAI allows null beside tool_calls, but a
      // string is the form every compatible server's chat template accepts.
      out.append(R"({"role":"assistant","content":)");
      append_json_string(out, m.text);
      if (!m.tool_calls.empty()) {
        out.append(R"(,"tool_calls":[)");
        for (std::size_t i = 0; i < m.tool_calls.size(); ++i) {
          const auto& call = m.tool_calls[i];
          if (i) out.push_back(',');
          out.append(R"({"id":)");
          append_json_string(out, call.id);
          out.append(R"(,"type":"function","function":{"name":)");
          append_json_string(out, call.name);
          out.append(R"(,"arguments":)");
          append_json_string(out, tool_input_as_object_text(call.input));
          out.append("}}");
        }
        out.push_back(']');
      }
      break;
    case Role::Tool:
      out.append(R"({"role":"tool","tool_call_id":)");
      append_json_string(out, m.tool_call_id);
      out.append(R"(,"content":)");
      append_json_string(out, m.output);
      break;
  }
  out.push_back('}');
}

constexpr std::string_view kWireFormat = "openai";

// The message's JSON text, written on first use.
const std::string& message_text(const ModelMessage& m) {
  if (m.wire.format != kWireFormat) {
    m.wire.text.clear();
    write_message(m.wire.text, m);
    m.wire.format = kWireFormat;
  }
  return m.wire.text;
}

}  // namespace

json::array openai_tools(const std::vector<ToolSchema>& schemas) {
  json::array tools;
  tools.reserve(schemas.size());
  for (const auto& tool : schemas) {
    tools.push_back(json::object{
        {"type", "function"},
        {"function", json::object{{"name", tool.name},
                                  {"description", tool.description},
                                  {"parameters", openai_tool_schema(tool.parameters)}}}});
  }
  return tools;
}

std::string serialize_openai_request(const ModelRequest& request,
                                     const OpenAIRequestOptions& options) {
  // Sized once: the body is mostly the conversation's texts, known before it is written.
  std::size_t size = 512 + request.model.size() + request.system.size() * 2;
  for (const auto& m : request.messages)
    size += message_text(m).size() + 1;
  if (!request.tools.empty()) size += request.tools.serialized(kWireFormat, openai_tools).size();
  std::string out;
  out.reserve(size);
  out.append(R"({"model":)");
  append_json_string(out, request.model);
  out.append(R"(,"messages":[)");
  bool first = true;
  if (!request.system.empty()) {
    append_text_message(out, "system", request.system);
    first = false;
  }
  for (const auto& m : request.messages) {
    if (!first) out.push_back(',');
    out.append(message_text(m));
    first = false;
  }
  out.push_back(']');
  if (request.max_tokens) {
    out.push_back(',');
    append_key(out, options.use_max_completion_tokens ? "max_completion_tokens" : "max_tokens");
    out.append(std::to_string(*request.max_tokens));
  }
  if (request.temperature) {
    out.push_back(',');
    append_key(out, "temperature");
    out.append(json::serialize(json::value(*request.temperature)));
  }
  out.append(R"(,"stream":true)");
  if (options.include_usage) out.append(R"(,"stream_options":{"include_usage":true})");
  if (!request.tools.empty()) {
    out.append(R"(,"tools":)");
    out.append(request.tools.serialized(kWireFormat, openai_tools));
    if (request.no_tool_calls) out.append(R"(,"tool_choice":"none")");
  }
  out.push_back('}');
  return out;
}

// ---- Stream ----------------------------------------------------------------------------------
//
// Chunks are read with a SAX handler (json::basic_parser) that keeps only the fields below, not
// parsed into a json::value tree and then looked up: a chunk is mostly fields nobody reads (id,
// model, created, ...), and the tree was built and freed again for each one. In bench/agent_turns'
// read turn (11 chunks), OpenAIStreamParser::feed went from 107 k to 68 k instructions a turn
// (callgrind), reading a chunk from ~6.6 k to ~4 k, most of which is now the JSON parser's own
// validation of every byte. The handler reads the chunk whole before anything is acted on, and a
// field seen twice is overwritten, so the events are the ones the tree gave: a malformed chunk
// emits nothing, keys come in any order, and of duplicate keys the last wins. Only two values are
// built as trees, the rare ones consumed as trees: a chunk's "error" and tool-call arguments sent
// as an object (which are serialized again).

// What a tool-call delta says.
struct OpenAIStreamParser::ToolDeltaFields {
  std::size_t position = 0;  // in the tool_calls array: the index when none is given
  bool index_is_number = false;
  std::int64_t index = 0;
  std::string id;
  std::string name;
  std::string arguments;
  json::value arguments_object;  // arguments sent as an object instead of a string
};

// What a chunk says. Fields absent or of the wrong type are empty or 0 (read leniently, as
// wire_util.hpp's string_field and int_field read a tree).
struct OpenAIStreamParser::ChunkFields {
  struct Choice {
    std::int64_t index = 0;
    std::string content;
    std::string reasoning_content;
    std::string reasoning;
    std::string refusal;
    std::string finish_reason;
    std::vector<ToolDeltaFields> calls;
  };

  std::string_view kind;  // of the document: "object", or what it was instead
  json::value error;      // null when absent
  std::string object;
  // {"object": "error"} (vLLM) puts the error's fields in the chunk itself.
  std::string message;
  std::string type;
  std::string code;
  std::int64_t code_number = 0;
  bool has_usage = false;
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
  std::int64_t cached_tokens = 0;            // usage.prompt_tokens_details.cached_tokens
  std::int64_t prompt_cache_hit_tokens = 0;  // DeepSeek's name
  std::int64_t reasoning_tokens = 0;         // usage.completion_tokens_details.reasoning_tokens
  std::vector<Choice> choices;               // the objects among "choices", in order

  void clear() {
    kind = {};
    error = nullptr;
    object.clear();
    message.clear();
    type.clear();
    code.clear();
    code_number = 0;
    has_usage = false;
    choices.clear();
  }
};

namespace {

// Where a value in a chunk goes: the field it fills or, for an object or array, what it holds.
enum class Slot : std::uint8_t {
  Ignored,  // skipped, with everything inside it
  Chunk,    // the document
  Error,
  Object,
  Message,
  Type,
  Code,
  Usage,
  PromptTokens,
  CompletionTokens,
  CacheHitTokens,
  PromptDetails,
  CachedTokens,
  CompletionDetails,
  ReasoningTokens,
  Choices,
  Choice,
  ChoiceIndex,
  Delta,
  FinishReason,
  Content,
  ReasoningContent,
  Reasoning,
  Refusal,
  ToolCalls,
  ToolCall,
  CallIndex,
  CallId,
  Function,
  Name,
  Arguments,
};

// Whether `key` is `name`: a compare of known length, which the compiler writes out (a key is
// looked up at every member of every chunk).
template <std::size_t N>
bool is(std::string_view key, const char (&name)[N]) {
  return key.size() == N - 1 && std::memcmp(key.data(), name, N - 1) == 0;
}

// The slot of member `key` of an object in `container`.
Slot member_slot(Slot container, std::string_view key) {
  switch (container) {
    case Slot::Chunk:
      if (is(key, "choices")) return Slot::Choices;
      if (is(key, "usage")) return Slot::Usage;
      if (is(key, "object")) return Slot::Object;
      if (is(key, "error")) return Slot::Error;
      if (is(key, "message")) return Slot::Message;
      if (is(key, "type")) return Slot::Type;
      if (is(key, "code")) return Slot::Code;
      break;
    case Slot::Usage:
      if (is(key, "prompt_tokens")) return Slot::PromptTokens;
      if (is(key, "completion_tokens")) return Slot::CompletionTokens;
      if (is(key, "prompt_tokens_details")) return Slot::PromptDetails;
      if (is(key, "completion_tokens_details")) return Slot::CompletionDetails;
      if (is(key, "prompt_cache_hit_tokens")) return Slot::CacheHitTokens;
      break;
    case Slot::PromptDetails:
      if (is(key, "cached_tokens")) return Slot::CachedTokens;
      break;
    case Slot::CompletionDetails:
      if (is(key, "reasoning_tokens")) return Slot::ReasoningTokens;
      break;
    case Slot::Choice:
      if (is(key, "delta")) return Slot::Delta;
      if (is(key, "index")) return Slot::ChoiceIndex;
      if (is(key, "finish_reason")) return Slot::FinishReason;
      break;
    case Slot::Delta:
      if (is(key, "content")) return Slot::Content;
      if (is(key, "tool_calls")) return Slot::ToolCalls;
      if (is(key, "reasoning_content")) return Slot::ReasoningContent;
      if (is(key, "reasoning")) return Slot::Reasoning;
      if (is(key, "refusal")) return Slot::Refusal;
      break;
    case Slot::ToolCall:
      if (is(key, "index")) return Slot::CallIndex;
      if (is(key, "id")) return Slot::CallId;
      if (is(key, "function")) return Slot::Function;
      break;
    case Slot::Function:
      if (is(key, "arguments")) return Slot::Arguments;
      if (is(key, "name")) return Slot::Name;
      break;
    default:
      break;
  }
  return Slot::Ignored;
}

constexpr std::size_t kMaxChunkDepth = 64;

}  // namespace

// Reads a chunk's JSON text into ChunkFields: the handler of a json::basic_parser, which calls it
// for every token. Each value starts by resetting the field it fills, so the last of duplicate
// keys wins; objects and arrays that hold no field are skipped by counting their depth.
class OpenAIStreamParser::ChunkReader {
 public:
  ChunkReader() : parser_(options()) {}

  // Reads `text` into chunk(); false, with `error` in parse_json's words, when it is not JSON.
  bool read(std::string_view text, std::string& error) {
    parser_.reset();
    parser_.handler().start();
    // As parse_json's stream_parser does it, so that errors are the same at the same place.
    boost::system::error_code ec;
    std::size_t used = parser_.write_some(true, text.data(), text.size(), ec);
    if (!ec && used < text.size()) ec = json::error::extra_data;
    if (!ec) parser_.write_some(false, nullptr, 0, ec);
    if (!ec) return true;
    error = json_error_message(text, used, ec, kMaxChunkDepth);
    return false;
  }

  ChunkFields& chunk() { return parser_.handler().chunk; }

 private:
  class Handler {
   public:
    // The limits of the tree's own handler (json::parser), which give the same errors.
    static constexpr std::size_t max_object_size = json::object::max_size();
    static constexpr std::size_t max_array_size = json::array::max_size();
    static constexpr std::size_t max_key_size = json::string::max_size();
    static constexpr std::size_t max_string_size = json::string::max_size();

    ChunkFields chunk;

    void start() {
      chunk.clear();
      depth_ = 0;
      skip_ = 0;
      capturing_ = false;
      in_string_ = false;
      key_.clear();
      string_ = nullptr;
      key_slot_ = Slot::Ignored;
    }

    bool on_document_begin(json::error_code&) { return true; }
    bool on_document_end(json::error_code&) { return true; }
    bool on_number_part(json::string_view, json::error_code&) { return true; }
    bool on_comment_part(json::string_view, json::error_code&) { return true; }
    bool on_comment(json::string_view, json::error_code&) { return true; }

    bool on_object_begin(json::error_code&) { return begin_container(json::kind::object); }
    bool on_array_begin(json::error_code&) { return begin_container(json::kind::array); }
    bool on_object_end(std::size_t n, json::error_code&) {
      if (capturing_) stack_.push_object(n);
      return end_container();
    }
    bool on_array_end(std::size_t n, json::error_code&) {
      if (capturing_) stack_.push_array(n);
      return end_container();
    }

    bool on_key_part(json::string_view s, std::size_t, json::error_code&) {
      if (capturing_)
        stack_.push_chars(s);
      else if (skip_ == 0)
        key_.append(s.data(), s.size());
      return true;
    }
    bool on_key(json::string_view s, std::size_t, json::error_code&) {
      if (capturing_) {
        stack_.push_key(s);
        return true;
      }
      if (skip_ > 0) return true;
      std::string_view key(s.data(), s.size());
      if (!key_.empty()) {
        key_.append(key);
        key = key_;
      }
      key_slot_ = member_slot(frames_[depth_ - 1].slot, key);
      key_.clear();
      return true;
    }

    bool on_string_part(json::string_view s, std::size_t, json::error_code&) {
      string_piece(s, false);
      return true;
    }
    bool on_string(json::string_view s, std::size_t, json::error_code&) {
      string_piece(s, true);
      return true;
    }

    bool on_int64(std::int64_t i, json::string_view, json::error_code&) {
      return number(i, [i](json::value_stack& st) { st.push_int64(i); });
    }
    bool on_uint64(std::uint64_t u, json::string_view, json::error_code&) {
      return number(exact_int64(u), [u](json::value_stack& st) { st.push_uint64(u); });
    }
    bool on_double(double d, json::string_view, json::error_code&) {
      return number(exact_int64(d), [d](json::value_stack& st) { st.push_double(d); });
    }
    bool on_bool(bool b, json::error_code&) {
      return scalar("boolean", [b](json::value_stack& st) { st.push_bool(b); });
    }
    bool on_null(json::error_code&) {
      return scalar("null", [](json::value_stack& st) { st.push_null(); });
    }

   private:
    struct Frame {
      Slot slot;
      std::size_t elements = 0;  // so far, in an array
    };
    // Chunk > choices > choice > delta > tool_calls > call > function: every other container
    // is skipped or captured.
    static constexpr std::size_t kMaxFrames = 7;

    ChunkFields::Choice& choice() { return chunk.choices.back(); }
    ToolDeltaFields& call() { return choice().calls.back(); }

    // The slot of the value that starts now.
    Slot next_slot() {
      if (depth_ == 0) return Slot::Chunk;
      Frame& frame = frames_[depth_ - 1];
      if (frame.slot == Slot::Choices) return Slot::Choice;
      if (frame.slot == Slot::ToolCalls) {
        position_ = frame.elements++;
        return Slot::ToolCall;
      }
      return key_slot_;
    }

    // A value of `kind` starts in `slot`: the field it fills is emptied (the last of duplicate
    // keys wins, whatever the earlier ones held).
    void reset(Slot slot, std::string_view kind) {
      if (slot == Slot::Ignored) return;  // most values: id, created, model, logprobs, ...
      switch (slot) {
        case Slot::Chunk:
          chunk.kind = kind;
          break;
        case Slot::Error:
          chunk.error = nullptr;
          break;
        case Slot::Code:
          chunk.code.clear();
          chunk.code_number = 0;
          break;
        case Slot::Usage:
          chunk.has_usage = false;
          chunk.prompt_tokens = chunk.completion_tokens = chunk.prompt_cache_hit_tokens = 0;
          chunk.cached_tokens = chunk.reasoning_tokens = 0;
          break;
        case Slot::PromptTokens:
          chunk.prompt_tokens = 0;
          break;
        case Slot::CompletionTokens:
          chunk.completion_tokens = 0;
          break;
        case Slot::CacheHitTokens:
          chunk.prompt_cache_hit_tokens = 0;
          break;
        case Slot::PromptDetails:
        case Slot::CachedTokens:
          chunk.cached_tokens = 0;
          break;
        case Slot::CompletionDetails:
        case Slot::ReasoningTokens:
          chunk.reasoning_tokens = 0;
          break;
        case Slot::Choices:
          chunk.choices.clear();
          break;
        case Slot::ChoiceIndex:
          choice().index = 0;
          break;
        case Slot::Delta: {
          auto& c = choice();
          c.content.clear();
          c.reasoning_content.clear();
          c.reasoning.clear();
          c.refusal.clear();
          c.calls.clear();
          break;
        }
        case Slot::ToolCalls:
          choice().calls.clear();
          break;
        case Slot::CallIndex:
          call().index_is_number = false;
          call().index = 0;
          break;
        case Slot::Function:
          call().name.clear();
          call().arguments.clear();
          call().arguments_object = nullptr;
          break;
        case Slot::Arguments:
          call().arguments.clear();
          call().arguments_object = nullptr;
          break;
        default:
          if (std::string* field = string_field(slot)) field->clear();
          break;
      }
    }

    // The string a string value in `slot` is kept in; nullptr when it is not kept.
    std::string* string_field(Slot slot) {
      switch (slot) {
        case Slot::Object:
          return &chunk.object;
        case Slot::Message:
          return &chunk.message;
        case Slot::Type:
          return &chunk.type;
        case Slot::Code:
          return &chunk.code;
        case Slot::FinishReason:
          return &choice().finish_reason;
        case Slot::Content:
          return &choice().content;
        case Slot::ReasoningContent:
          return &choice().reasoning_content;
        case Slot::Reasoning:
          return &choice().reasoning;
        case Slot::Refusal:
          return &choice().refusal;
        case Slot::CallId:
          return &call().id;
        case Slot::Name:
          return &call().name;
        case Slot::Arguments:
          return &call().arguments;
        default:
          return nullptr;
      }
    }

    // The integer a number value in `slot` is kept in; nullptr when it is not kept.
    std::int64_t* integer_field(Slot slot) {
      switch (slot) {
        case Slot::Code:
          return &chunk.code_number;
        case Slot::PromptTokens:
          return &chunk.prompt_tokens;
        case Slot::CompletionTokens:
          return &chunk.completion_tokens;
        case Slot::CacheHitTokens:
          return &chunk.prompt_cache_hit_tokens;
        case Slot::CachedTokens:
          return &chunk.cached_tokens;
        case Slot::ReasoningTokens:
          return &chunk.reasoning_tokens;
        case Slot::ChoiceIndex:
          return &choice().index;
        case Slot::CallIndex:
          call().index_is_number = true;
          return &call().index;
        default:
          return nullptr;
      }
    }

    bool begin_container(json::kind kind) {
      if (capturing_) {
        ++capture_depth_;
        return true;
      }
      if (skip_ > 0) {
        ++skip_;
        return true;
      }
      bool object = kind == json::kind::object;
      Slot slot = next_slot();
      reset(slot, object ? "object" : "array");
      switch (object ? slot : Slot::Ignored) {
        case Slot::Chunk:
        case Slot::PromptDetails:
        case Slot::CompletionDetails:
        case Slot::Delta:
        case Slot::Function:
          break;
        case Slot::Usage:
          chunk.has_usage = true;
          break;
        case Slot::Choice:
          chunk.choices.emplace_back();
          break;
        case Slot::ToolCall:
          choice().calls.emplace_back().position = position_;
          break;
        case Slot::Arguments:
          begin_capture(call().arguments_object);
          ++capture_depth_;
          return true;
        default:
          if (slot == Slot::Error) {
            begin_capture(chunk.error);
            ++capture_depth_;
            return true;
          }
          if (!object && (slot == Slot::Choices || slot == Slot::ToolCalls)) break;
          skip_ = 1;
          return true;
      }
      assert(depth_ < kMaxFrames);
      frames_[depth_++] = Frame{slot};
      return true;
    }

    bool end_container() {
      if (capturing_) {
        if (--capture_depth_ == 0) end_capture();
      } else if (skip_ > 0) {
        --skip_;
      } else {
        --depth_;
      }
      return true;
    }

    void string_piece(json::string_view s, bool last) {
      if (!capturing_ && skip_ == 0 && !in_string_) {
        in_string_ = true;
        Slot slot = next_slot();
        reset(slot, "string");
        if (slot == Slot::Error) begin_capture(chunk.error);
        string_ = capturing_ ? nullptr : string_field(slot);
      }
      if (capturing_) {
        if (!last) {
          stack_.push_chars(s);
          return;
        }
        stack_.push_string(s);
        in_string_ = false;  // a string that was the capture itself ("error": "text") ends here
        if (capture_depth_ == 0) end_capture();
        return;
      }
      if (string_) string_->append(s.data(), s.size());
      if (last) {
        in_string_ = false;
        string_ = nullptr;
      }
    }

    // A number: `integer` is what it is as an int_field, nullopt when not an integer.
    template <class Push>
    bool number(std::optional<std::int64_t> integer, Push push) {
      if (capturing_ || skip_ > 0) return scalar("number", push);
      Slot slot = next_slot();
      reset(slot, "number");
      if (slot == Slot::Error) return captured_scalar(push);
      if (std::int64_t* field = integer_field(slot)) *field = integer.value_or(0);
      return true;
    }

    template <class Push>
    bool scalar(std::string_view kind, Push push) {
      if (capturing_) {
        push(stack_);
        if (capture_depth_ == 0) end_capture();
        return true;
      }
      if (skip_ > 0) return true;
      Slot slot = next_slot();
      reset(slot, kind);
      if (slot == Slot::Error) return captured_scalar(push);
      return true;
    }

    template <class Push>
    bool captured_scalar(Push push) {
      begin_capture(chunk.error);
      push(stack_);
      end_capture();
      return true;
    }

    void begin_capture(json::value& target) {
      stack_.reset();
      capture_ = &target;
      capture_depth_ = 0;
      capturing_ = true;
    }
    void end_capture() {
      *capture_ = stack_.release();
      capturing_ = false;
    }

    Frame frames_[kMaxFrames];
    std::size_t depth_ = 0;          // frames in use
    std::size_t skip_ = 0;           // depth inside a skipped container
    Slot key_slot_ = Slot::Ignored;  // of the member whose key came last
    std::size_t position_ = 0;       // of the tool call that starts now, in its array
    std::string key_;                // a key that came in parts
    bool in_string_ = false;
    std::string* string_ = nullptr;  // where the string being read goes
    // A value built as a tree (json::value_stack is what json::parser builds with).
    json::value_stack stack_;
    json::value* capture_ = nullptr;
    std::size_t capture_depth_ = 0;
    bool capturing_ = false;
  };

  static json::parse_options options() {
    json::parse_options options;
    options.max_depth = kMaxChunkDepth;
    return options;
  }

  json::basic_parser<Handler> parser_;
};

OpenAIStreamParser::OpenAIStreamParser(sse::SseDecoder::Options sse_options)
    : sse_(with_error_lines(sse_options)), reader_(std::make_unique<ChunkReader>()) {}

OpenAIStreamParser::~OpenAIStreamParser() = default;

namespace {

FinishReason map_finish_reason(std::string_view reason) {
  if (reason == "stop") return FinishReason::Stop;
  if (reason == "tool_calls" || reason == "function_call") return FinishReason::ToolCalls;
  if (reason == "length") return FinishReason::Length;
  if (reason == "content_filter") return FinishReason::ContentFilter;
  return FinishReason::Other;
}

// An error's fields: OpenAI's {message, type, code}, OpenRouter's {code: 502, message}, vLLM's
// {object: "error", message, type, code: 400}. `code` when a string, `status` when a number.
StreamError stream_error(std::string message, const std::string& type, const std::string& code,
                         std::int64_t status) {
  StreamError out;
  out.retryable = status == 429 || status >= 500 || is_transient_error_name(type) ||
                  is_transient_error_name(code);
  std::string label = !type.empty() ? type : code;
  if (label.empty() && status != 0) label = std::to_string(status);
  if (message.empty()) message = "the model stream reported an error";
  out.message = label.empty() ? std::move(message) : label + ": " + message;
  return out;
}

// An error value in a stream: an error object, or a string.
StreamError openai_stream_error(const json::value& error) {
  if (error.is_string()) return StreamError{std::string(error.get_string()), false};
  if (!error.is_object())
    return StreamError{"the model stream reported an error: " + json::serialize(error), false};
  const json::object& e = error.get_object();
  std::string code;
  std::int64_t status = 0;
  if (auto it = e.find("code"); it != e.end()) {
    if (it->value().is_string())
      code = std::string(it->value().get_string());
    else
      status = int_field(e, "code");
  }
  return stream_error(string_field(e, "message"), string_field(e, "type"), code, status);
}

}  // namespace

void OpenAIStreamParser::feed(std::string_view bytes, std::vector<StreamEvent>& out) {
  if (done_) return;
  sse_events_.clear();
  auto fed = sse_.feed(bytes, sse_events_);
  handle_events(out);  // the events before a decoding failure still count
  if (!fed && !done_) fail(fed.error().message, false, out);
}

void OpenAIStreamParser::finish(std::vector<StreamEvent>& out) {
  if (done_) return;
  sse_events_.clear();
  sse_.finish(sse_events_);
  handle_events(out);
  if (done_) return;
  if (finish_reason_) {
    finish_step(out);  // the server closed without "[DONE]" after finishing: nothing is missing
  } else {
    fail(std::string(kStreamEndedEarly), true, out);
  }
}

void OpenAIStreamParser::handle_events(std::vector<StreamEvent>& out) {
  for (const auto& event : sse_events_) {
    if (done_) return;
    if (event.type == "error") {
      handle_error_event(event.data, out);
    } else {
      handle_data(event.data, out);
    }
  }
}

void OpenAIStreamParser::handle_error_event(std::string_view data, std::vector<StreamEvent>& out) {
  auto parsed = parse_json(trim_ascii_space(data));
  if (!parsed) {
    // Not JSON: the text itself is the best description there is.
    fail(data.empty() ? std::string("the model stream reported an error") : std::string(data),
         false, out);
    return;
  }
  const json::value* error = &*parsed;
  if (parsed->is_object()) {
    if (auto it = parsed->get_object().find("error"); it != parsed->get_object().end())
      error = &it->value();
  }
  StreamError e = openai_stream_error(*error);
  fail(std::move(e.message), e.retryable, out);
}

void OpenAIStreamParser::handle_data(std::string_view data, std::vector<StreamEvent>& out) {
  data = trim_ascii_space(data);
  if (data.empty()) return;
  if (data == "[DONE]") {
    finish_step(out);
    return;
  }
  std::string error;
  if (!reader_->read(data, error)) {
    fail("malformed chunk in the model stream: " + error, false, out);
    return;
  }
  ChunkFields& chunk = reader_->chunk();
  if (chunk.kind != "object") {
    fail("malformed chunk in the model stream: expected an object, got " + std::string(chunk.kind),
         false, out);
    return;
  }
  handle_chunk(chunk, out);
}

void OpenAIStreamParser::handle_chunk(ChunkFields& chunk, std::vector<StreamEvent>& out) {
  if (!chunk.error.is_null()) {
    StreamError error = openai_stream_error(chunk.error);
    fail(std::move(error.message), error.retryable, out);
    return;
  }
  if (chunk.object == "error") {
    StreamError error =
        stream_error(std::move(chunk.message), chunk.type, chunk.code, chunk.code_number);
    fail(std::move(error.message), error.retryable, out);
    return;
  }
  // Usage may come on the final chunk (OpenAI's include_usage, with empty choices), beside the
  // finish_reason (llama.cpp), or on every chunk as a running total (vLLM's continuous stats):
  // the latest one wins.
  if (chunk.has_usage) {
    std::int64_t cached = chunk.cached_tokens;
    if (cached == 0) cached = chunk.prompt_cache_hit_tokens;
    // OpenAI counts cached tokens inside prompt_tokens and reasoning inside completion_tokens;
    // Usage keeps its parts disjoint.
    usage_ = Usage{};
    usage_.cache_read = cached;
    usage_.input = std::max<std::int64_t>(0, chunk.prompt_tokens - cached);
    usage_.reasoning = chunk.reasoning_tokens;
    usage_.output = std::max<std::int64_t>(0, chunk.completion_tokens - chunk.reasoning_tokens);
  }

  for (auto& choice : chunk.choices) {
    if (choice.index != 0) continue;  // we ask for one choice (n = 1)
    // llama.cpp, DeepSeek and older vLLM say reasoning_content; OpenRouter, Ollama and newer
    // vLLM say reasoning. A server sending both sends the same text twice: take one.
    std::string& reasoning =
        choice.reasoning_content.empty() ? choice.reasoning : choice.reasoning_content;
    if (!reasoning.empty()) out.push_back(ReasoningDelta{std::move(reasoning)});
    if (!choice.content.empty()) out.push_back(TextDelta{std::move(choice.content)});
    if (!choice.refusal.empty()) out.push_back(TextDelta{std::move(choice.refusal)});
    for (auto& call : choice.calls)
      handle_tool_delta(call, out);
    std::string reason = std::move(choice.finish_reason);
    if (reason.empty()) continue;
    if (reason == "error") {
      // OpenRouter's way of ending a stream that failed upstream when no error object came.
      fail("the model stream ended with finish_reason \"error\"", true, out);
      return;
    }
    finish_reason_ = map_finish_reason(reason);
    provider_reason_ = std::move(reason);
    emit_tool_calls(out);
  }
}

void OpenAIStreamParser::handle_tool_delta(ToolDeltaFields& delta, std::vector<StreamEvent>& out) {
  std::int64_t index =
      delta.index_is_number ? delta.index : static_cast<std::int64_t>(delta.position);
  std::string id = std::move(delta.id);
  std::string name = std::move(delta.name);
  // A string by the spec; a few servers send the object itself.
  std::string arguments = delta.arguments_object.is_object()
                              ? json::serialize(delta.arguments_object)
                              : std::move(delta.arguments);

  PendingCall* call = nullptr;
  for (auto it = calls_.rbegin(); it != calls_.rend(); ++it) {
    if (it->wire_index == index) {
      call = &*it;
      break;
    }
  }
  if (!call || call->emitted || (!id.empty() && !call->id.empty() && id != call->id)) {
    calls_.push_back(PendingCall{});
    call = &calls_.back();
    call->wire_index = index;
  }
  if (!call->started) {
    if (call->id.empty()) call->id = std::move(id);
    if (call->name.empty()) call->name = std::move(name);
  }
  if (!arguments.empty()) {
    call->arguments += arguments;
    if (call->started) out.push_back(ToolInputDelta{call->id, std::move(arguments)});
  }
  if (!call->started && !call->name.empty()) {
    call->started = true;
    std::size_t ordinal = static_cast<std::size_t>(call - calls_.data());
    if (call->id.empty()) call->id = ids::make("call");
    out.push_back(ToolInputStart{ordinal, call->id, call->name});
    // Arguments that came before the name were held back until the start could be announced.
    if (!call->arguments.empty()) out.push_back(ToolInputDelta{call->id, call->arguments});
  }
}

void OpenAIStreamParser::emit_tool_calls(std::vector<StreamEvent>& out) {
  for (std::size_t i = 0; i < calls_.size(); ++i) {
    PendingCall& call = calls_[i];
    if (call.emitted) continue;
    if (!call.started) {
      // Never named: announce it anyway so every ToolCall has its start; the caller answers a
      // call to "" with an `invalid` result.
      call.started = true;
      if (call.id.empty()) call.id = ids::make("call");
      out.push_back(ToolInputStart{i, call.id, call.name});
      if (!call.arguments.empty()) out.push_back(ToolInputDelta{call.id, call.arguments});
    }
    call.emitted = true;
    ToolCall tool_call;
    tool_call.id = call.id;
    tool_call.name = call.name;
    tool_call.raw_input = std::move(call.arguments);
    parse_tool_input(tool_call);
    out.push_back(std::move(tool_call));
  }
}

void OpenAIStreamParser::finish_step(std::vector<StreamEvent>& out) {
  emit_tool_calls(out);
  FinishReason reason =
      finish_reason_.value_or(calls_.empty() ? FinishReason::Stop : FinishReason::ToolCalls);
  if (reason == FinishReason::Stop && !calls_.empty()) reason = FinishReason::ToolCalls;
  out.push_back(StepFinish{reason, usage_, provider_reason_});
  done_ = true;
}

void OpenAIStreamParser::fail(std::string message, bool retryable, std::vector<StreamEvent>& out) {
  out.push_back(StreamError{std::move(message), retryable});
  done_ = true;
}

}  // namespace sb::provider
