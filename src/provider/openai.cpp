#include "provider/openai.hpp"

#include <algorithm>
#include <cstdint>
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

// A user message with files: content parts, the files first (an image as image_url with its
// data: URL, a PDF as a file part with file_data), then the text; a file the model does not take
// is its note as text.
void append_user_content(std::string& out, const ModelMessage& m, const InputKinds& input) {
  out.append(R"({"role":"user","content":[)");
  bool first = true;
  auto text_part = [&](std::string_view text) {
    if (!first) out.push_back(',');
    first = false;
    out.append(R"({"type":"text","text":)");
    append_json_string(out, text);
    out.push_back('}');
  };
  for (const auto& a : m.attachments) {
    if (!a.accepted_by(input)) {
      text_part(a.refused_note());
      continue;
    }
    if (!first) out.push_back(',');
    first = false;
    if (a.kind == Attachment::Kind::Image) {
      out.append(R"({"type":"image_url","image_url":{"url":)");
      append_json_string(out, *a.data_url);
      out.append("}}");
    } else {
      out.append(R"({"type":"file","file":{"filename":)");
      append_json_string(out, a.filename.empty() ? std::string_view("file.pdf") : a.filename);
      out.append(R"(,"file_data":)");
      append_json_string(out, *a.data_url);
      out.append("}}");
    }
  }
  if (!m.text.empty()) text_part(m.text);
  out.append("]}");
}

void write_message(std::string& out, const ModelMessage& m, const InputKinds& input) {
  switch (m.role) {
    case Role::System:
    case Role::User:
      if (m.role == Role::User && !m.attachments.empty())
        append_user_content(out, m, input);
      else
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

// Whether every file of `m` goes as itself to a model that takes `input`.
bool all_accepted(const ModelMessage& m, const InputKinds& input) {
  for (const auto& a : m.attachments)
    if (!a.accepted_by(input)) return false;
  return true;
}

// The message's JSON text, written on first use. A message with a file the model does not take
// (another model's turn) is written for each request instead: the kept text is what every model
// of this wire format reads.
const std::string& message_text(const ModelMessage& m, const InputKinds& input,
                                std::string& scratch) {
  if (!all_accepted(m, input)) {
    scratch.clear();
    write_message(scratch, m, input);
    return scratch;
  }
  if (m.wire.format != kWireFormat) {
    m.wire.text.clear();
    write_message(m.wire.text, m, input);
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
  std::string scratch;
  for (const auto& m : request.messages)
    size += message_text(m, request.input, scratch).size() + 1;
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
    out.append(message_text(m, request.input, scratch));
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

namespace {

FinishReason map_finish_reason(std::string_view reason) {
  if (reason == "stop") return FinishReason::Stop;
  if (reason == "tool_calls" || reason == "function_call") return FinishReason::ToolCalls;
  if (reason == "length") return FinishReason::Length;
  if (reason == "content_filter") return FinishReason::ContentFilter;
  return FinishReason::Other;
}

Usage parse_usage(const json::object& u) {
  std::int64_t prompt = int_field(u, "prompt_tokens");
  std::int64_t completion = int_field(u, "completion_tokens");
  std::int64_t cached = 0, reasoning = 0;
  if (auto* details = object_field(u, "prompt_tokens_details"))
    cached = int_field(*details, "cached_tokens");
  if (cached == 0) cached = int_field(u, "prompt_cache_hit_tokens");  // DeepSeek's name
  if (auto* details = object_field(u, "completion_tokens_details"))
    reasoning = int_field(*details, "reasoning_tokens");
  Usage usage;
  // OpenAI counts cached tokens inside prompt_tokens and reasoning inside completion_tokens;
  // Usage keeps its parts disjoint.
  usage.cache_read = cached;
  usage.input = std::max<std::int64_t>(0, prompt - cached);
  usage.reasoning = reasoning;
  usage.output = std::max<std::int64_t>(0, completion - reasoning);
  return usage;
}

// An error object: OpenAI's {message, type, code}, OpenRouter's {code: 502, message}, vLLM's
// {object: "error", message, type, code: 400}. `code` is a name when a string, a status when a
// number.
StreamError stream_error(const json::object& e) {
  std::string code;
  std::int64_t status = 0;
  if (auto it = e.find("code"); it != e.end()) {
    if (it->value().is_string())
      code = std::string(it->value().get_string());
    else
      status = int_field(e, "code");
  }
  std::string type = string_or(e, "type");
  std::string message = string_or(e, "message");
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
StreamError stream_error(const json::value& error) {
  if (error.is_string()) return StreamError{std::string(error.get_string()), false};
  if (!error.is_object())
    return StreamError{"the model stream reported an error: " + json::serialize(error), false};
  return stream_error(error.get_object());
}

}  // namespace

// The server closed without "[DONE]" after finishing: nothing is missing.
bool OpenAIStreamParser::step_complete() const {
  return finish_reason_.has_value();
}

void OpenAIStreamParser::handle_event(const sse::SseEvent& event, std::vector<StreamEvent>& out) {
  if (event.type == "error") {
    handle_error_event(event.data, out);
  } else {
    handle_data(event.data, out);
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
  StreamError e = stream_error(*error);
  fail(std::move(e.message), e.retryable, out);
}

void OpenAIStreamParser::handle_data(std::string_view data, std::vector<StreamEvent>& out) {
  data = trim_ascii_space(data);
  if (data.empty()) return;
  if (data == "[DONE]") {
    finish_step(out);
    return;
  }
  // Parsed whole before anything is acted on, so a malformed chunk emits nothing; keys come in
  // any order, and of duplicate keys the last wins (as Boost.JSON builds an object).
  alignas(16) unsigned char buffer[kStreamEventBuffer];
  json::monotonic_resource scratch(buffer, sizeof buffer);
  auto chunk = parse_stream_object(data, &scratch);
  if (!chunk) {
    fail("malformed chunk in the model stream: " + chunk.error().message, false, out);
    return;
  }
  handle_chunk(chunk->get_object(), out);
}

void OpenAIStreamParser::handle_chunk(const json::object& chunk, std::vector<StreamEvent>& out) {
  if (auto it = chunk.find("error"); it != chunk.end() && !it->value().is_null()) {
    StreamError error = stream_error(it->value());
    fail(std::move(error.message), error.retryable, out);
    return;
  }
  if (auto it = chunk.find("object");
      it != chunk.end() && it->value().is_string() && it->value().get_string() == "error") {
    StreamError error = stream_error(chunk);  // vLLM puts the error's fields in the chunk itself
    fail(std::move(error.message), error.retryable, out);
    return;
  }
  // Usage may come on the final chunk (OpenAI's include_usage, with empty choices), beside the
  // finish_reason (llama.cpp), or on every chunk as a running total (vLLM's continuous stats):
  // the latest one wins.
  if (auto* usage = object_field(chunk, "usage")) usage_ = parse_usage(*usage);

  auto choices = chunk.find("choices");
  if (choices == chunk.end() || !choices->value().is_array()) return;
  for (const auto& choice_value : choices->value().get_array()) {
    if (!choice_value.is_object()) continue;
    const json::object& choice = choice_value.get_object();
    if (int_field(choice, "index") != 0) continue;  // we ask for one choice (n = 1)
    if (auto* delta = object_field(choice, "delta")) {
      // llama.cpp, DeepSeek and older vLLM say reasoning_content; OpenRouter, Ollama and newer
      // vLLM say reasoning. A server sending both sends the same text twice: take one.
      std::string reasoning = string_or(*delta, "reasoning_content");
      if (reasoning.empty()) reasoning = string_or(*delta, "reasoning");
      if (!reasoning.empty()) out.push_back(ReasoningDelta{std::move(reasoning)});
      if (std::string text = string_or(*delta, "content"); !text.empty())
        out.push_back(TextDelta{std::move(text)});
      if (std::string refusal = string_or(*delta, "refusal"); !refusal.empty())
        out.push_back(TextDelta{std::move(refusal)});
      if (auto calls = delta->find("tool_calls");
          calls != delta->end() && calls->value().is_array()) {
        const json::array& array = calls->value().get_array();
        for (std::size_t i = 0; i < array.size(); ++i)
          if (array[i].is_object()) handle_tool_delta(array[i].get_object(), i, out);
      }
    }
    std::string reason = string_or(choice, "finish_reason");
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

void OpenAIStreamParser::handle_tool_delta(const json::object& delta, std::size_t position,
                                           std::vector<StreamEvent>& out) {
  // The index when none is given: the delta's place in the tool_calls array.
  std::int64_t index = static_cast<std::int64_t>(position);
  if (auto it = delta.find("index"); it != delta.end() && it->value().is_number())
    index = int_field(delta, "index");
  std::string id = string_or(delta, "id");
  std::string name, arguments;
  if (auto* function = object_field(delta, "function")) {
    name = string_or(*function, "name");
    if (auto args = function->find("arguments"); args != function->end()) {
      // A string by the spec; a few servers send the object itself.
      if (args->value().is_string())
        arguments = std::string(args->value().get_string());
      else if (args->value().is_object())
        arguments = json::serialize(args->value());
    }
  }

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
  out.push_back(
      StepFinish{step_finish_reason(finish_reason_, !calls_.empty()), usage_, provider_reason_});
  end_stream();
}

}  // namespace sb::provider
