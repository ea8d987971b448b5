#include "chat/stream.hpp"

namespace sb::chat {

// ---- ChatResponse ---------------------------------------------------------------------------

void ChatResponse::append(const json::object& chunk) {
  if (ended_) return;
  auto text = std::make_shared<const std::string>(json::serialize(chunk));
  chunks_.push_back(text);
  std::uint64_t sequence = chunks_.size() - 1;
  // A reader may stop following (or a new one start) from inside its call.
  auto readers = readers_;
  for (auto& [handle, reader] : readers)
    if (readers_.count(handle)) reader(sequence, text);
}

void ChatResponse::end() {
  if (ended_) return;
  ended_ = true;
  auto readers = std::exchange(readers_, {});
  for (auto& [handle, reader] : readers)
    reader(chunks_.size(), nullptr);
}

std::uint64_t ChatResponse::follow(std::uint64_t from, Reader reader) {
  std::uint64_t handle = ++next_reader_;
  for (std::uint64_t i = from; i < chunks_.size(); ++i)
    reader(i, chunks_[i]);
  if (ended_)
    reader(chunks_.size(), nullptr);
  else
    readers_.emplace(handle, std::move(reader));
  return handle;
}

void ChatResponse::unfollow(std::uint64_t handle) {
  readers_.erase(handle);
}

// ---- TurnStream -----------------------------------------------------------------------------

TurnStream::Effect TurnStream::on_event(const bus::Event& event) {
  const json::object& props = event.properties;
  const std::string& type = event.type;
  if (type == "message.part.delta") {
    if (string_or(props, "sessionID") != session_id_) return Effect::None;
    on_delta(props);
    return Effect::None;
  }
  if (type == "message.part.updated") {
    const json::object* part = object_at(props, "part");
    if (!part || string_or(*part, "sessionID") != session_id_) return Effect::None;
    on_part(*part);
  } else if (type == "message.updated") {
    const json::object* info = object_at(props, "info");
    if (!info || string_or(*info, "sessionID") != session_id_) return Effect::None;
    if (string_or(*info, "role") == "assistant") on_message(*info);
    return Effect::None;
  } else if (type == "permission.asked") {
    if (string_or(props, "sessionID") != session_id_) return Effect::None;
    const json::object* tool = object_at(props, "tool");
    std::string call_id = tool ? string_or(*tool, "callID") : std::string();
    auto it = calls_.find(call_id);
    if (it == calls_.end()) return Effect::None;
    it->second.approval_id = string_or(props, "id");
    emit_(json::object{{"type", "tool-approval-request"},
                       {"approvalId", it->second.approval_id},
                       {"toolCallId", call_id}});
  } else if (type == "permission.replied") {
    if (string_or(props, "sessionID") != session_id_) return Effect::None;
    std::string request_id = string_or(props, "requestID");
    for (auto& [id, c] : calls_)
      if (c.approval_id == request_id) c.approval_id.clear();
    return Effect::None;
  } else if (type == "client-tool.request") {
    const json::object* request = object_at(props, "request");
    if (!request || string_or(*request, "sessionID") != session_id_) return Effect::None;
    auto it = calls_.find(string_or(*request, "callID"));
    if (it == calls_.end() || !it->second.app) return Effect::None;
    it->second.request_id = string_or(*request, "requestID");
  } else if (type == "client-tool.completed" || type == "client-tool.failed") {
    if (string_or(props, "sessionID") != session_id_) return Effect::None;
    auto it = calls_.find(string_or(props, "callID"));
    if (it != calls_.end() && it->second.request_id == string_or(props, "requestID"))
      it->second.request_id.clear();
    return Effect::None;
  } else if (type == "session.status") {
    if (string_or(props, "sessionID") != session_id_) return Effect::None;
    const json::object* status = object_at(props, "status");
    if (status && string_or(*status, "type") != "idle")
      emit_(json::object{{"type", "data-status"}, {"data", *status}, {"transient", true}});
    return Effect::None;
  } else if (type == "question.asked") {
    if (string_or(props, "sessionID") != session_id_) return Effect::None;
    emit_(json::object{{"type", "data-question"}, {"id", string_or(props, "id")}, {"data", props}});
    return Effect::None;
  } else if (type == "session.idle") {
    if (string_or(props, "sessionID") != session_id_) return Effect::None;
    end_open_parts();
    if (step_open_) finish_step();
    json::object finish{{"type", "finish"}};
    if (!finish_reason_.empty()) finish["finishReason"] = finish_reason_;
    emit_(finish);
    return Effect::Ended;
  } else {
    return Effect::None;
  }
  if (should_suspend()) {
    suspend();
    return Effect::Suspended;
  }
  return Effect::None;
}

void TurnStream::suspend() {
  end_open_parts();
  if (step_open_) finish_step();
  emit_(json::object{{"type", "finish"}, {"finishReason", "tool-calls"}});
  suspended_ = true;
}

bool TurnStream::should_suspend() const {
  if (suspended_ || !step_streamed_) return false;
  bool waits = false;
  for (const auto& [id, c] : calls_) {
    if (c.message_id != step_message_ || c.status == CallView::Status::Done) continue;
    if (!c.waits_for_app()) return false;  // something else still runs, or has not yet asked
    waits = true;
  }
  return waits;
}

void TurnStream::start_step(const std::string& message_id) {
  emit_(json::object{{"type", "start-step"}});
  step_open_ = true;
  step_streamed_ = false;
  step_message_ = message_id;
}

void TurnStream::finish_step() {
  emit_(json::object{{"type", "finish-step"}});
  step_open_ = false;
}

void TurnStream::end_open_parts() {
  for (auto& [id, t] : texts_) {
    if (t.ended) continue;
    t.ended = true;
    emit_(json::object{{"type", t.reasoning ? "reasoning-end" : "text-end"}, {"id", id}});
  }
}

void TurnStream::on_message(const json::object& info) {
  std::string id = string_or(info, "id");
  if (steps_.insert(id).second) {
    if (step_open_) finish_step();
    start_step(id);
  }
  const json::object* time = object_at(info, "time");
  bool completed = time && time->contains("completed");
  if (!completed || id != step_message_) return;
  // The model's own reason ("stop", "length", ...: the names are the AI SDK's too).
  finish_reason_ = string_or(info, "finish");
  if (const json::object* error = object_at(info, "error")) {
    std::string name = string_or(*error, "name");
    const json::object* data = object_at(*error, "data");
    std::string message = data ? string_or(*data, "message") : std::string();
    if (name == "MessageAbortedError") {
      finish_reason_ = "interrupted";
      emit_(json::object{{"type", "abort"}, {"reason", message}});
    } else if (name != "PermissionRejectedError") {  // a person's no: the answer says why
      finish_reason_ = "error";
      emit_(json::object{{"type", "error"}, {"errorText", name + ": " + message}});
    }
  }
  end_open_parts();
  if (step_open_) finish_step();
}

void TurnStream::on_part(const json::object& part) {
  // The user's message is the app's own: only the answer's steps stream.
  if (!steps_.count(string_or(part, "messageID"))) return;
  std::string type = string_or(part, "type");
  if (type == "tool") return on_tool_part(part);
  if (type == "step-finish") {
    if (string_or(part, "messageID") == step_message_) step_streamed_ = true;
    return;
  }
  if (type != "text" && type != "reasoning") return;
  std::string id = string_or(part, "id");
  auto [it, fresh] = texts_.try_emplace(id);
  TextView& t = it->second;
  if (fresh) {
    t.reasoning = type == "reasoning";
    emit_(json::object{{"type", t.reasoning ? "reasoning-start" : "text-start"}, {"id", id}});
  }
  if (t.ended) return;
  std::string text = string_or(part, "text");
  if (text.size() > t.sent) {
    emit_(json::object{{"type", t.reasoning ? "reasoning-delta" : "text-delta"},
                       {"id", id},
                       {"delta", text.substr(t.sent)}});
    t.sent = text.size();
  }
  const json::object* time = object_at(part, "time");
  if (time && time->contains("end")) {
    t.ended = true;
    emit_(json::object{{"type", t.reasoning ? "reasoning-end" : "text-end"}, {"id", id}});
  }
}

void TurnStream::on_delta(const json::object& props) {
  auto it = texts_.find(string_or(props, "partID"));
  if (it == texts_.end() || it->second.ended) return;
  std::string delta = string_or(props, "delta");
  if (delta.empty()) return;
  it->second.sent += delta.size();
  emit_(json::object{{"type", it->second.reasoning ? "reasoning-delta" : "text-delta"},
                     {"id", it->first},
                     {"delta", std::move(delta)}});
}

CallView& TurnStream::call(const std::string& call_id, const json::object& part) {
  auto [it, fresh] = calls_.try_emplace(call_id);
  CallView& c = it->second;
  if (!fresh) return c;
  c.message_id = string_or(part, "messageID");
  c.tool = string_or(part, "tool");
  std::string named = c.tool;
  // A call whose input was refused runs as `invalid`, naming the tool the model called.
  if (c.tool == "invalid")
    if (const json::object* state = object_at(part, "state"))
      if (const json::object* input = object_at(*state, "input"))
        if (auto called = string_or(*input, "tool"); !called.empty()) named = called;
  auto app = app_tool_(named);
  c.app = app.has_value();
  c.ui_name = app.value_or(named);
  return c;
}

void TurnStream::on_tool_part(const json::object& part) {
  std::string call_id = string_or(part, "callID");
  CallView& c = call(call_id, part);
  const json::object* state = object_at(part, "state");
  std::string status = state ? string_or(*state, "status") : std::string();
  // Chunks of the server's tools say so: the app neither runs nor answers them.
  auto tagged = [&](json::object chunk) {
    if (!c.app) {
      chunk["dynamic"] = true;
      chunk["providerExecuted"] = true;
    }
    emit_(chunk);
  };
  if (started_.insert(call_id).second)
    tagged(json::object{
        {"type", "tool-input-start"}, {"toolCallId", call_id}, {"toolName", c.ui_name}});
  if (status == "pending") return;

  json::value input = json::object{};
  if (state)
    if (auto it = state->find("input"); it != state->end()) input = it->value();
  if (!c.input_sent) {
    c.input_sent = true;
    if (string_or(part, "tool") == "invalid") {
      c.invalid = true;
      const json::object* args = input.is_object() ? &input.get_object() : nullptr;
      tagged(json::object{{"type", "tool-input-error"},
                          {"toolCallId", call_id},
                          {"toolName", c.ui_name},
                          {"input", json::object{}},
                          {"errorText", args ? string_or(*args, "error") : std::string()}});
    } else {
      tagged(json::object{{"type", "tool-input-available"},
                          {"toolCallId", call_id},
                          {"toolName", c.ui_name},
                          {"input", std::move(input)}});
    }
  }
  if (status == "running") {
    c.status = CallView::Status::Running;
    return;
  }
  if (c.status == CallView::Status::Done) return;
  c.status = CallView::Status::Done;
  c.request_id.clear();
  c.approval_id.clear();
  // The app has what it answered itself; a refused input was reported as such.
  if (c.answered || c.invalid) return;
  if (status == "completed") {
    tagged(json::object{{"type", "tool-output-available"},
                        {"toolCallId", call_id},
                        {"output", string_or(*state, "output")}});
  } else if (c.denied) {
    emit_(json::object{{"type", "tool-output-denied"}, {"toolCallId", call_id}});
  } else {
    c.ended_how = state ? string_or(*state, "error") : std::string();
    tagged(json::object{
        {"type", "tool-output-error"}, {"toolCallId", call_id}, {"errorText", c.ended_how}});
  }
}

}  // namespace sb::chat
