#include "provider/types.hpp"

#include <map>

namespace sb::provider {

struct ToolSet::Shared {
  std::vector<ToolSchema> schemas;
  // By wire format; entries are never removed, so references to them stay valid.
  std::map<std::string, std::string, std::less<>> serialized;
};

ToolSet::ToolSet(std::vector<ToolSchema> tools) : shared_(std::make_shared<Shared>()) {
  shared_->schemas = std::move(tools);
}

const std::vector<ToolSchema>& ToolSet::schemas() const {
  static const std::vector<ToolSchema> none;
  return shared_ ? shared_->schemas : none;
}

const std::string& ToolSet::serialized(std::string_view format,
                                       json::array (*build)(const std::vector<ToolSchema>&)) const {
  static const std::string none = "[]";
  if (!shared_) return none;
  auto it = shared_->serialized.find(format);
  if (it == shared_->serialized.end())
    it = shared_->serialized.emplace(std::string(format), json::serialize(build(shared_->schemas)))
             .first;
  return it->second;
}

std::string_view role_name(Role role) {
  switch (role) {
    case Role::System:
      return "system";
    case Role::User:
      return "user";
    case Role::Assistant:
      return "assistant";
    case Role::Tool:
      return "tool";
  }
  return "user";
}

ModelMessage ModelMessage::system(std::string text) {
  ModelMessage m;
  m.role = Role::System;
  m.text = std::move(text);
  return m;
}

ModelMessage ModelMessage::user(std::string text, std::vector<Attachment> attachments) {
  ModelMessage m;
  m.role = Role::User;
  m.text = std::move(text);
  m.attachments = std::move(attachments);
  return m;
}

std::string_view Attachment::base64() const {
  if (!data_url) return {};
  std::string_view url = *data_url;
  auto comma = url.find(',');
  return comma == std::string_view::npos ? std::string_view() : url.substr(comma + 1);
}

std::string Attachment::refused_note() const {
  return "[The user attached " + std::string(kind == Kind::Image ? "an image" : "a PDF") +
         (filename.empty() ? std::string() : " (" + filename + ")") +
         ", which this model cannot read: tell the user so.]";
}

ModelMessage ModelMessage::assistant(std::string text, std::vector<ModelToolCall> calls) {
  ModelMessage m;
  m.role = Role::Assistant;
  m.text = std::move(text);
  m.tool_calls = std::move(calls);
  return m;
}

ModelMessage ModelMessage::tool_result(std::string call_id, std::string output, bool is_error) {
  ModelMessage m;
  m.role = Role::Tool;
  m.tool_call_id = std::move(call_id);
  m.output = std::move(output);
  m.is_error = is_error;
  return m;
}

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::Stop:
      return "stop";
    case FinishReason::ToolCalls:
      return "tool-calls";
    case FinishReason::Length:
      return "length";
    case FinishReason::ContentFilter:
      return "content-filter";
    case FinishReason::Other:
      return "other";
  }
  return "other";
}

namespace {

// Model text may hold anything; serializing it as a JSON string keeps a log line on one line.
std::string quoted(std::string_view text) {
  return json::serialize(json::string_view(text));
}

struct Describer {
  std::string operator()(const TextDelta& e) const { return "text " + quoted(e.text); }
  std::string operator()(const ReasoningDelta& e) const { return "reasoning " + quoted(e.text); }
  std::string operator()(const ToolInputStart& e) const {
    return "tool-input-start #" + std::to_string(e.index) + " " + e.id + " " + e.name;
  }
  std::string operator()(const ToolInputDelta& e) const {
    return "tool-input-delta " + e.id + " " + quoted(e.delta);
  }
  std::string operator()(const ToolCall& e) const {
    std::string out = "tool-call " + e.id + " " + e.name + " ";
    if (e.input_valid) return out + json::serialize(e.input);
    return out + "invalid " + quoted(e.raw_input) + " (" + e.input_error + ")";
  }
  std::string operator()(const StepFinish& e) const {
    const Usage& u = e.usage;
    return "finish " + std::string(finish_reason_name(e.reason)) + " (" + e.provider_reason +
           ") input=" + std::to_string(u.input) + " output=" + std::to_string(u.output) +
           " reasoning=" + std::to_string(u.reasoning) +
           " cache_read=" + std::to_string(u.cache_read) +
           " cache_write=" + std::to_string(u.cache_write);
  }
  std::string operator()(const StreamError& e) const {
    return std::string("error ") + (e.retryable ? "(retryable) " : "") + e.message;
  }
};

}  // namespace

std::string describe(const StreamEvent& event) {
  return std::visit(Describer{}, event);
}

void parse_tool_input(ToolCall& call) {
  call.input_valid = true;
  call.input_error.clear();
  if (call.raw_input.find_first_not_of(" \t\r\n") == std::string::npos) {
    call.input = json::object{};
    return;
  }
  // Deeper than any sensible tool input, shallow enough that a hostile one cannot hurt.
  constexpr std::size_t kMaxDepth = 128;
  auto parsed = parse_json(call.raw_input, kMaxDepth);
  if (!parsed) {
    call.input = nullptr;
    call.input_valid = false;
    call.input_error = "the arguments are " + parsed.error().message;  // "invalid JSON at ..."
    return;
  }
  if (parsed->is_string()) {
    // Double-encoded: "{\"path\": \"a\"}". Unwrap only when the inner text is an object, so that
    // a plain string argument still reports the honest "not an object" below.
    auto inner = parse_json(parsed->get_string(), kMaxDepth);
    if (inner && inner->is_object()) parsed = std::move(inner);
  }
  if (!parsed->is_object()) {
    call.input_valid = false;
    call.input_error =
        "the arguments must be a JSON object, got " + std::string(kind_name(*parsed));
    call.input = std::move(*parsed);
    return;
  }
  call.input = std::move(*parsed);
}

}  // namespace sb::provider
