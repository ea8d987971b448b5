#include "session/types.hpp"

#include <chrono>

namespace sb::session {

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string_view to_string(ToolState::Status s) {
  switch (s) {
    case ToolState::Status::Pending:
      return "pending";
    case ToolState::Status::Running:
      return "running";
    case ToolState::Status::Completed:
      return "completed";
    case ToolState::Status::Error:
      return "error";
  }
  return "error";
}

std::string_view to_string(Part::Type t) {
  switch (t) {
    case Part::Type::Text:
      return "text";
    case Part::Type::Reasoning:
      return "reasoning";
    case Part::Type::Tool:
      return "tool";
    case Part::Type::StepStart:
      return "step-start";
    case Part::Type::StepFinish:
      return "step-finish";
  }
  return "text";
}

namespace {

std::string str(const json::object& o, std::string_view key) {
  auto it = o.find(key);
  return it != o.end() && it->value().is_string() ? std::string(it->value().get_string())
                                                  : std::string();
}

std::int64_t num(const json::object& o, std::string_view key) {
  auto it = o.find(key);
  if (it == o.end()) return 0;
  if (it->value().is_int64()) return it->value().get_int64();
  if (it->value().is_uint64()) return static_cast<std::int64_t>(it->value().get_uint64());
  if (it->value().is_double()) return static_cast<std::int64_t>(it->value().get_double());
  return 0;
}

double real(const json::object& o, std::string_view key) {
  auto it = o.find(key);
  if (it == o.end()) return 0;
  if (it->value().is_double()) return it->value().get_double();
  if (it->value().is_int64()) return static_cast<double>(it->value().get_int64());
  return 0;
}

const json::object& obj(const json::object& o, std::string_view key) {
  static const json::object empty;
  auto it = o.find(key);
  return it != o.end() && it->value().is_object() ? it->value().get_object() : empty;
}

json::array arr(const json::object& o, std::string_view key) {
  auto it = o.find(key);
  return it != o.end() && it->value().is_array() ? it->value().get_array() : json::array{};
}

Tokens tokens_from(const json::object& t) {
  Tokens out;
  out.input = num(t, "input");
  out.output = num(t, "output");
  out.reasoning = num(t, "reasoning");
  const auto& cache = obj(t, "cache");
  out.cache_read = num(cache, "read");
  out.cache_write = num(cache, "write");
  return out;
}

}  // namespace

json::object to_json(const Tokens& t, json::storage_ptr sp) {
  return json::object(
      {{"input", t.input},
       {"output", t.output},
       {"reasoning", t.reasoning},
       {"cache", json::object({{"read", t.cache_read}, {"write", t.cache_write}}, sp)}},
      sp);
}

json::object to_json(const SessionInfo& s, json::storage_ptr sp) {
  json::object o({{"id", s.id},
                  {"title", s.title},
                  {"directory", s.directory},
                  {"version", SWITCHBOARD_VERSION},
                  {"time", json::object({{"created", s.created}, {"updated", s.updated}}, sp)}},
                 sp);
  if (!s.parent_id.empty()) o["parentID"] = s.parent_id;
  if (!s.client_id.empty()) o["clientID"] = s.client_id;
  if (!s.permission.empty()) o["permission"] = s.permission;
  return o;
}

Result<SessionInfo> session_from_json(const json::object& o) {
  SessionInfo s;
  s.id = str(o, "id");
  if (s.id.empty()) return make_error(ErrorCode::Internal, "stored session without an id");
  s.title = str(o, "title");
  s.directory = str(o, "directory");
  s.parent_id = str(o, "parentID");
  s.client_id = str(o, "clientID");
  s.permission = arr(o, "permission");
  const auto& time = obj(o, "time");
  s.created = num(time, "created");
  s.updated = num(time, "updated");
  return s;
}

json::object to_json(const MessageInfo& m, json::storage_ptr sp) {
  json::object time({{"created", m.created}}, sp);
  if (m.completed) time["completed"] = *m.completed;
  json::object o({{"id", m.id},
                  {"sessionID", m.session_id},
                  {"role", m.role == MessageInfo::Role::User ? "user" : "assistant"},
                  {"time", std::move(time)},
                  {"agent", m.agent}},
                 sp);
  if (m.role == MessageInfo::Role::User) {
    o["model"] = json::object({{"providerID", m.provider_id}, {"modelID", m.model_id}}, sp);
    return o;
  }
  o["parentID"] = m.parent_id;
  o["providerID"] = m.provider_id;
  o["modelID"] = m.model_id;
  o["mode"] = m.agent;
  o["path"] = json::object({{"cwd", m.cwd}, {"root", m.cwd}}, sp);
  o["cost"] = m.cost;
  o["tokens"] = to_json(m.tokens, sp);
  if (!m.finish.empty()) o["finish"] = m.finish;
  if (m.error) {
    json::object data(m.error->data, sp);
    data["message"] = m.error->message;
    o["error"] = json::object({{"name", m.error->name}, {"data", std::move(data)}}, sp);
  }
  return o;
}

Result<MessageInfo> message_from_json(const json::object& o) {
  MessageInfo m;
  m.id = str(o, "id");
  if (m.id.empty()) return make_error(ErrorCode::Internal, "stored message without an id");
  m.session_id = str(o, "sessionID");
  m.role = str(o, "role") == "assistant" ? MessageInfo::Role::Assistant : MessageInfo::Role::User;
  const auto& time = obj(o, "time");
  m.created = num(time, "created");
  if (time.contains("completed")) m.completed = num(time, "completed");
  m.agent = str(o, "agent");
  if (m.role == MessageInfo::Role::User) {
    const auto& model = obj(o, "model");
    m.provider_id = str(model, "providerID");
    m.model_id = str(model, "modelID");
    return m;
  }
  m.parent_id = str(o, "parentID");
  m.provider_id = str(o, "providerID");
  m.model_id = str(o, "modelID");
  m.cwd = str(obj(o, "path"), "cwd");
  m.cost = real(o, "cost");
  m.tokens = tokens_from(obj(o, "tokens"));
  m.finish = str(o, "finish");
  if (o.contains("error")) {
    const auto& e = obj(o, "error");
    NamedError err;
    err.name = str(e, "name");
    err.data = obj(e, "data");
    err.message = str(err.data, "message");
    err.data.erase("message");
    m.error = std::move(err);
  }
  return m;
}

json::object to_json(const Part& p, json::storage_ptr sp) {
  json::object o({{"id", p.id},
                  {"sessionID", p.session_id},
                  {"messageID", p.message_id},
                  {"type", to_string(p.type)}},
                 sp);
  switch (p.type) {
    case Part::Type::Text:
    case Part::Type::Reasoning: {
      o["text"] = p.text;
      json::object time({{"start", p.start}}, sp);
      if (p.end) time["end"] = p.end;
      o["time"] = std::move(time);
      break;
    }
    case Part::Type::Tool: {
      o["callID"] = p.call_id;
      o["tool"] = p.tool;
      const ToolState& s = p.state;
      json::object state({{"status", to_string(s.status)}, {"input", s.input}}, sp);
      switch (s.status) {
        case ToolState::Status::Pending:
          state["raw"] = s.raw;
          break;
        case ToolState::Status::Running:
          if (!s.title.empty()) state["title"] = s.title;
          state["metadata"] = s.metadata;
          state["time"] = json::object({{"start", s.start}}, sp);
          break;
        case ToolState::Status::Completed:
          state["output"] = s.output;
          state["title"] = s.title;
          state["metadata"] = s.metadata;
          state["time"] = json::object({{"start", s.start}, {"end", s.end}}, sp);
          if (!s.attachments.empty()) state["attachments"] = s.attachments;
          break;
        case ToolState::Status::Error:
          state["error"] = s.error;
          state["metadata"] = s.metadata;
          state["time"] = json::object({{"start", s.start}, {"end", s.end}}, sp);
          break;
      }
      o["state"] = std::move(state);
      break;
    }
    case Part::Type::StepStart:
      break;
    case Part::Type::StepFinish:
      o["reason"] = p.reason;
      o["cost"] = p.cost;
      o["tokens"] = to_json(p.tokens, sp);
      break;
  }
  return o;
}

Result<Part> part_from_json(const json::object& o) {
  Part p;
  p.id = str(o, "id");
  if (p.id.empty()) return make_error(ErrorCode::Internal, "stored part without an id");
  p.session_id = str(o, "sessionID");
  p.message_id = str(o, "messageID");
  std::string type = str(o, "type");
  if (type == "text")
    p.type = Part::Type::Text;
  else if (type == "reasoning")
    p.type = Part::Type::Reasoning;
  else if (type == "tool")
    p.type = Part::Type::Tool;
  else if (type == "step-start")
    p.type = Part::Type::StepStart;
  else if (type == "step-finish")
    p.type = Part::Type::StepFinish;
  else
    return make_error(ErrorCode::Internal, "stored part of unknown type \"" + type + "\"");
  p.text = str(o, "text");
  const auto& time = obj(o, "time");
  p.start = num(time, "start");
  p.end = num(time, "end");
  p.call_id = str(o, "callID");
  p.tool = str(o, "tool");
  if (p.type == Part::Type::Tool) {
    const auto& s = obj(o, "state");
    std::string status = str(s, "status");
    p.state.status = status == "running"     ? ToolState::Status::Running
                     : status == "completed" ? ToolState::Status::Completed
                     : status == "error"     ? ToolState::Status::Error
                                             : ToolState::Status::Pending;
    p.state.input = obj(s, "input");
    p.state.raw = str(s, "raw");
    p.state.title = str(s, "title");
    p.state.metadata = obj(s, "metadata");
    p.state.output = str(s, "output");
    p.state.error = str(s, "error");
    p.state.attachments = arr(s, "attachments");
    const auto& st = obj(s, "time");
    p.state.start = num(st, "start");
    p.state.end = num(st, "end");
  }
  p.reason = str(o, "reason");
  p.cost = real(o, "cost");
  p.tokens = tokens_from(obj(o, "tokens"));
  return p;
}

}  // namespace sb::session
