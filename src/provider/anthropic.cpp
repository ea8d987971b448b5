#include "provider/anthropic.hpp"

#include "provider/wire_util.hpp"
#include "util/ids.hpp"

namespace sb::provider {

// ---- Request ---------------------------------------------------------------------------------

namespace {

bool is_blank(std::string_view text) {
  return trim_ascii_space(text).empty();
}

struct Turn {
  std::string_view role;
  json::array content;
};

// The API requires tool_result blocks before any other content of a user message.
json::array results_first(json::array content) {
  json::array results, rest;
  for (auto& block : content) {
    bool is_result = block.is_object() && block.get_object().contains("tool_use_id");
    (is_result ? results : rest).push_back(std::move(block));
  }
  for (auto& block : rest)
    results.push_back(std::move(block));
  return results;
}

}  // namespace

json::array anthropic_tools(const std::vector<ToolSchema>& schemas) {
  json::array tools;
  tools.reserve(schemas.size());
  for (const auto& tool : schemas) {
    tools.push_back(json::object{{"name", tool.name},
                                 {"description", tool.description},
                                 {"input_schema", anthropic_tool_schema(tool.parameters)}});
  }
  return tools;
}

namespace {

// The request without its tools.
json::object anthropic_body(const ModelRequest& request) {
  std::string system = request.system;
  std::vector<Turn> turns;
  auto add = [&](std::string_view role, json::object block) {
    if (turns.empty() || turns.back().role != role) turns.push_back(Turn{role, {}});
    turns.back().content.push_back(std::move(block));
  };
  for (const auto& m : request.messages) {
    switch (m.role) {
      case Role::System:
        if (is_blank(m.text)) break;
        if (!system.empty()) system += "\n\n";
        system += m.text;
        break;
      case Role::User:
        // Files first (Anthropic's advice for images and documents), then the text.
        for (const auto& a : m.attachments) {
          if (!a.accepted_by(request.input)) {
            add("user", {{"type", "text"}, {"text", a.refused_note()}});
            continue;
          }
          json::object source{{"type", "base64"}, {"media_type", a.mime}, {"data", a.base64()}};
          json::object block{{"type", a.kind == Attachment::Kind::Image ? "image" : "document"},
                             {"source", std::move(source)}};
          if (a.kind == Attachment::Kind::Pdf && !a.filename.empty()) block["title"] = a.filename;
          add("user", std::move(block));
        }
        if (!is_blank(m.text)) add("user", {{"type", "text"}, {"text", m.text}});
        break;
      case Role::Assistant:
        if (!is_blank(m.text)) add("assistant", {{"type", "text"}, {"text", m.text}});
        for (const auto& call : m.tool_calls) {
          add("assistant",
              {{"type", "tool_use"},
               {"id", call.id},
               {"name", call.name},
               {"input", call.input.is_object() ? call.input : json::value(json::object{})}});
        }
        break;
      case Role::Tool: {
        json::object block{{"type", "tool_result"}, {"tool_use_id", m.tool_call_id}};
        // content is optional; an empty string would be an empty text block, which is refused.
        if (!m.output.empty()) block["content"] = m.output;
        if (m.is_error) block["is_error"] = true;
        add("user", std::move(block));
        break;
      }
    }
  }

  json::array messages;
  messages.reserve(turns.size());
  for (auto& turn : turns) {
    json::array content =
        turn.role == "user" ? results_first(std::move(turn.content)) : std::move(turn.content);
    messages.push_back(json::object{{"role", turn.role}, {"content", std::move(content)}});
  }

  json::object body;
  body["model"] = request.model;
  body["max_tokens"] = request.max_tokens.value_or(kAnthropicDefaultMaxTokens);
  if (!system.empty()) body["system"] = system;
  body["messages"] = std::move(messages);
  if (request.temperature) body["temperature"] = *request.temperature;
  body["stream"] = true;
  if (request.no_tool_calls && !request.tools.empty())
    body["tool_choice"] = json::object{{"type", "none"}};
  return body;
}

}  // namespace

json::object build_anthropic_request(const ModelRequest& request) {
  json::object body = anthropic_body(request);
  if (!request.tools.empty()) body["tools"] = anthropic_tools(request.tools.schemas());
  return body;
}

std::string serialize_anthropic_request(const ModelRequest& request) {
  return serialize_with_tools(anthropic_body(request), request.tools, "anthropic", anthropic_tools);
}

// ---- Stream ----------------------------------------------------------------------------------

namespace {

FinishReason map_stop_reason(std::string_view reason) {
  if (reason == "end_turn" || reason == "stop_sequence") return FinishReason::Stop;
  if (reason == "tool_use") return FinishReason::ToolCalls;
  if (reason == "max_tokens" || reason == "model_context_window_exceeded")
    return FinishReason::Length;
  if (reason == "refusal") return FinishReason::ContentFilter;
  return FinishReason::Other;
}

// Anthropic reports input_tokens without the cached part, which is already Usage's convention.
// Only the counts present are taken: message_delta may carry just output_tokens.
void apply_usage(Usage& usage, const json::object& counts) {
  auto take = [&](std::string_view key, std::int64_t& field) {
    auto value = get_int(counts, key);
    if (value && *value) field = **value;
  };
  take("input_tokens", usage.input);
  take("output_tokens", usage.output);
  take("cache_read_input_tokens", usage.cache_read);
  take("cache_creation_input_tokens", usage.cache_write);
}

}  // namespace

// message_delta came, only the empty message_stop is missing (and no tool call is cut short).
bool AnthropicStreamParser::step_complete() const {
  if (!finish_reason_) return false;
  for (const auto& [index, block] : open_blocks_)
    if (block.kind == Block::Kind::ToolUse) return false;
  return true;
}

void AnthropicStreamParser::handle_event(const sse::SseEvent& sse_event,
                                         std::vector<StreamEvent>& out) {
  std::string_view event_name = sse_event.type;
  std::string_view data = trim_ascii_space(sse_event.data);
  if (data.empty()) return;
  alignas(16) unsigned char buffer[kStreamEventBuffer];
  json::monotonic_resource scratch(buffer, sizeof buffer);
  auto parsed = parse_stream_object(data, &scratch);
  if (!parsed) {
    fail("malformed event in the model stream: " + parsed.error().message, false, out);
    return;
  }
  const json::object& event = parsed->get_object();
  // The data's "type" is authoritative; the SSE event name repeats it.
  std::string type = string_or(event, "type");
  if (type.empty() && event_name != "message") type = std::string(event_name);

  if (type == "content_block_delta") {
    handle_block_delta(event, out);
  } else if (type == "content_block_start") {
    handle_block_start(event, out);
  } else if (type == "content_block_stop") {
    handle_block_stop(event, out);
  } else if (type == "message_start") {
    if (auto* message = object_field(event, "message"))
      if (auto* usage = object_field(*message, "usage")) apply_usage(usage_, *usage);
  } else if (type == "message_delta") {
    if (auto* delta = object_field(event, "delta")) {
      if (std::string reason = string_or(*delta, "stop_reason"); !reason.empty()) {
        finish_reason_ = map_stop_reason(reason);
        provider_reason_ = std::move(reason);
      }
    }
    if (auto* usage = object_field(event, "usage")) apply_usage(usage_, *usage);
  } else if (type == "message_stop") {
    finish_step(out);
  } else if (type == "error") {
    const json::object* error = object_field(event, "error");
    std::string error_type = error ? string_or(*error, "type") : std::string();
    std::string message = error ? string_or(*error, "message") : std::string();
    if (message.empty()) message = "the model stream reported an error";
    fail(error_type.empty() ? message : error_type + ": " + message,
         is_transient_error_name(error_type), out);
  }
  // "ping" and event kinds added after this was written are ignored.
}

void AnthropicStreamParser::handle_block_start(const json::object& event,
                                               std::vector<StreamEvent>& out) {
  const json::object* content = object_field(event, "content_block");
  if (!content) return;
  std::string type = string_or(*content, "type");
  Block block;
  if (type == "text") {
    block.kind = Block::Kind::Text;
    if (std::string text = string_or(*content, "text"); !text.empty())
      out.push_back(TextDelta{std::move(text)});
  } else if (type == "thinking") {
    block.kind = Block::Kind::Thinking;
    if (std::string text = string_or(*content, "thinking"); !text.empty())
      out.push_back(ReasoningDelta{std::move(text)});
  } else if (type == "tool_use") {
    block.kind = Block::Kind::ToolUse;
    block.id = string_or(*content, "id");
    if (block.id.empty()) block.id = ids::make("call");
    block.name = string_or(*content, "name");
    // Assigned, not copy-constructed: the copy lives in the block's storage, not the event's.
    if (auto it = content->find("input"); it != content->end()) block.initial_input = it->value();
    out.push_back(ToolInputStart{tool_calls_++, block.id, block.name});
  }
  // Other kinds (redacted_thinking, server tools) carry nothing for the caller.
  open_blocks_[int_field(event, "index")] = std::move(block);
}

void AnthropicStreamParser::handle_block_delta(const json::object& event,
                                               std::vector<StreamEvent>& out) {
  const json::object* delta = object_field(event, "delta");
  if (!delta) return;
  std::string type = string_or(*delta, "type");
  if (type == "text_delta") {
    if (std::string text = string_or(*delta, "text"); !text.empty())
      out.push_back(TextDelta{std::move(text)});
  } else if (type == "thinking_delta") {
    if (std::string text = string_or(*delta, "thinking"); !text.empty())
      out.push_back(ReasoningDelta{std::move(text)});
  } else if (type == "input_json_delta") {
    auto it = open_blocks_.find(int_field(event, "index"));
    if (it == open_blocks_.end() || it->second.kind != Block::Kind::ToolUse) {
      // Input without its tool_use block would be a call with no name: say so rather than lose it.
      fail("malformed event in the model stream: input_json_delta outside a tool_use block", false,
           out);
      return;
    }
    if (std::string part = string_or(*delta, "partial_json"); !part.empty()) {
      it->second.partial_json += part;
      out.push_back(ToolInputDelta{it->second.id, std::move(part)});
    }
  }
  // signature_delta (the thinking block's signature) and citations are not used.
}

void AnthropicStreamParser::handle_block_stop(const json::object& event,
                                              std::vector<StreamEvent>& out) {
  auto it = open_blocks_.find(int_field(event, "index"));
  if (it == open_blocks_.end()) return;
  if (it->second.kind == Block::Kind::ToolUse) emit_tool_call(it->second, out);
  open_blocks_.erase(it);
}

void AnthropicStreamParser::emit_tool_call(Block& block, std::vector<StreamEvent>& out) {
  ToolCall call;
  call.id = std::move(block.id);
  call.name = std::move(block.name);
  call.raw_input = std::move(block.partial_json);
  // The input normally streams as deltas and the start's "input" is {}; should a server put the
  // whole input in the start instead, use it.
  if (is_blank(call.raw_input) && block.initial_input.is_object() &&
      !block.initial_input.get_object().empty())
    call.raw_input = json::serialize(block.initial_input);
  parse_tool_input(call);
  out.push_back(std::move(call));
}

void AnthropicStreamParser::finish_step(std::vector<StreamEvent>& out) {
  // The protocol closes every block before message_stop; a block a server left open is as
  // complete as the message is.
  for (auto& [index, block] : open_blocks_)
    if (block.kind == Block::Kind::ToolUse) emit_tool_call(block, out);
  open_blocks_.clear();
  out.push_back(
      StepFinish{step_finish_reason(finish_reason_, tool_calls_ > 0), usage_, provider_reason_});
  end_stream();
}

}  // namespace sb::provider
