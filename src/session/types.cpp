#include "session/types.hpp"

#include <chrono>

#include "session/project.hpp"
#include "util/log.hpp"

namespace sb::session {

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
    case Part::Type::File:
      return "file";
    case Part::Type::Compaction:
      return "compaction";
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
  if (it->value().is_double()) {
    // Out of range (1e300, NaN) a cast is undefined: such a number is no time or count.
    double d = it->value().get_double();
    return d >= -9.2e18 && d <= 9.2e18 ? static_cast<std::int64_t>(d) : 0;
  }
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

namespace {

void append_tokens(std::string& out, const Tokens& t) {
  ObjectWriter o(out);
  o.integer("input", t.input).integer("output", t.output).integer("reasoning", t.reasoning);
  ObjectWriter cache(o.key("cache"));
  cache.integer("read", t.cache_read).integer("write", t.cache_write);
  cache.close();
  o.close();
}

// A ruleset as OpenCode's PermissionRuleset: [{permission, pattern, action}].
void append_rules(std::string& out, const permission::Ruleset& rules) {
  out.push_back('[');
  for (const auto& r : rules) {
    if (out.back() != '[') out.push_back(',');
    ObjectWriter(out)
        .string("permission", r.permission)
        .string("pattern", r.pattern)
        .string("action", permission::action_name(r.action))
        .close();
  }
  out.push_back(']');
}

// The tree of a text that append_json wrote. Its values came from JSON parsed with a depth
// limit (tool inputs, metadata) and sit at most a few levels deeper here, hence the wider limit.
json::object tree_of(const std::string& text, json::storage_ptr sp) {
  auto doc = parse_json(text, 256, std::move(sp));
  if (!doc || !doc->is_object()) {
    log::error("a session object did not read back as JSON: ",
               doc ? std::string("not an object") : doc.error().message);
    return json::object();
  }
  return std::move(doc->get_object());
}

}  // namespace

void append_json(std::string& out, const SessionInfo& s) {
  ObjectWriter o(out);
  o.string("id", s.id).string("slug", s.slug.empty() ? slug_of(s.id) : s.slug);
  o.string("projectID", s.project_id.empty() ? std::string_view("global") : s.project_id);
  o.string("title", s.title).string("directory", s.directory);
  o.string("version", SWITCHBOARD_VERSION);
  ObjectWriter time(o.key("time"));
  time.integer("created", s.created).integer("updated", s.updated);
  if (s.archived) time.integer("archived", *s.archived);
  time.close();
  if (!s.parent_id.empty()) o.string("parentID", s.parent_id);
  if (!s.client_id.empty()) o.string("clientID", s.client_id);
  if (s.unreadable_permission) {
    o.value("permission", s.unreadable_permission->stored);
  } else if (!s.permission.empty()) {
    append_rules(o.key("permission"), s.permission);
  }
  if (!s.approved.empty()) append_rules(o.key("approved"), s.approved);
  if (s.revert) {
    ObjectWriter revert(o.key("revert"));
    revert.string("messageID", s.revert->message_id);
    if (!s.revert->part_id.empty()) revert.string("partID", s.revert->part_id);
    revert.string("diff", s.revert->diff);
    revert.close();
  }
  o.close();
}

json::object to_json(const SessionInfo& s, json::storage_ptr sp) {
  return tree_of(json_text(s), std::move(sp));
}

Result<SessionInfo> session_from_json(const json::object& o) {
  SessionInfo s;
  s.id = str(o, "id");
  if (s.id.empty()) return make_error(ErrorCode::Internal, "stored session without an id");
  s.title = str(o, "title");
  s.directory = str(o, "directory");
  // Sessions stored before slugs and project ids were kept get them now.
  s.slug = str(o, "slug");
  if (s.slug.empty()) s.slug = slug_of(s.id);
  s.project_id = str(o, "projectID");
  s.parent_id = str(o, "parentID");
  s.client_id = str(o, "clientID");
  if (auto it = o.find("permission"); it != o.end()) {
    auto rules = permission::parse_rules(it->value());
    if (rules)
      s.permission = std::move(*rules);
    else
      s.unreadable_permission = SessionInfo::UnreadableRules{it->value(), rules.error().message};
  }
  // Only ever written by this server from rules it read: one that does not read is dropped (the
  // session asks again), never a reason to refuse the session.
  if (auto it = o.find("approved"); it != o.end()) {
    auto rules = permission::parse_rules(it->value());
    if (rules)
      s.approved = std::move(*rules);
    else
      log::warn("session ", s.id, ": its approved rules do not read (", rules.error().message,
                "); they are asked again");
  }
  const auto& time = obj(o, "time");
  s.created = num(time, "created");
  s.updated = num(time, "updated");
  if (const auto& revert = obj(o, "revert"); !str(revert, "messageID").empty())
    s.revert =
        SessionInfo::Revert{str(revert, "messageID"), str(revert, "partID"), str(revert, "diff")};
  if (time.contains("archived")) s.archived = num(time, "archived");
  return s;
}

void append_json(std::string& out, const MessageInfo& m) {
  ObjectWriter o(out);
  o.string("id", m.id).string("sessionID", m.session_id);
  o.string("role", m.role == MessageInfo::Role::User ? "user" : "assistant");
  {
    ObjectWriter time(o.key("time"));
    time.integer("created", m.created);
    if (m.completed) time.integer("completed", *m.completed);
    time.close();
  }
  o.string("agent", m.agent);
  if (m.role == MessageInfo::Role::User) {
    ObjectWriter model(o.key("model"));
    model.string("providerID", m.provider_id).string("modelID", m.model_id);
    model.close();
    if (!m.tools.empty()) {
      ObjectWriter tools(o.key("tools"));
      for (const auto& [id, on] : m.tools)
        tools.value(id, on);
      tools.close();
    }
    o.close();
    return;
  }
  o.string("parentID", m.parent_id).string("providerID", m.provider_id);
  o.string("modelID", m.model_id).string("mode", m.agent);
  {
    ObjectWriter path(o.key("path"));
    path.string("cwd", m.cwd).string("root", m.cwd);
    path.close();
  }
  o.number("cost", m.cost);
  append_tokens(o.key("tokens"), m.tokens);
  if (!m.finish.empty()) o.string("finish", m.finish);
  if (m.summary) o.value("summary", true);
  if (m.error) {
    ObjectWriter error(o.key("error"));
    error.string("name", m.error->name);
    ObjectWriter data(error.key("data"));
    for (const auto& kv : m.error->data)
      if (kv.key() != "message") data.value(kv.key(), kv.value());
    data.string("message", m.error->message);
    data.close();
    error.close();
  }
  o.close();
}

json::object to_json(const MessageInfo& m, json::storage_ptr sp) {
  return tree_of(json_text(m), std::move(sp));
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
    for (const auto& [id, on] : obj(o, "tools"))
      if (on.is_bool()) m.tools[id] = on.get_bool();
    return m;
  }
  m.parent_id = str(o, "parentID");
  m.provider_id = str(o, "providerID");
  m.model_id = str(o, "modelID");
  m.cwd = str(obj(o, "path"), "cwd");
  m.cost = real(o, "cost");
  m.tokens = tokens_from(obj(o, "tokens"));
  m.finish = str(o, "finish");
  if (auto s = o.find("summary"); s != o.end() && s->value().is_bool())
    m.summary = s->value().get_bool();
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

void append_json(std::string& out, const Part& p) {
  ObjectWriter o(out);
  o.string("id", p.id).string("sessionID", p.session_id).string("messageID", p.message_id);
  o.string("type", to_string(p.type));
  switch (p.type) {
    case Part::Type::Text:
    case Part::Type::Reasoning: {
      o.string("text", p.text);
      if (p.synthetic) o.value("synthetic", true);
      if (p.type == Part::Type::Text && p.start == 0) break;  // a user's text has no time
      ObjectWriter time(o.key("time"));
      time.integer("start", p.start);
      if (p.end) time.integer("end", p.end);
      time.close();
      break;
    }
    case Part::Type::Tool: {
      o.string("callID", p.call_id).string("tool", p.tool);
      const ToolState& s = p.state;
      ObjectWriter state(o.key("state"));
      state.string("status", to_string(s.status)).value("input", s.input);
      switch (s.status) {
        case ToolState::Status::Pending:
          state.string("raw", s.raw);
          break;
        case ToolState::Status::Running:
          if (!s.title.empty()) state.string("title", s.title);
          state.value("metadata", s.metadata);
          break;
        case ToolState::Status::Completed:
          state.string("output", s.output).string("title", s.title).value("metadata", s.metadata);
          break;
        case ToolState::Status::Error:
          state.string("error", s.error).value("metadata", s.metadata);
          break;
      }
      if (s.status != ToolState::Status::Pending) {
        ObjectWriter time(state.key("time"));
        time.integer("start", s.start);
        if (s.status != ToolState::Status::Running) time.integer("end", s.end);
        time.close();
      }
      if (s.status == ToolState::Status::Completed && !s.attachments.empty())
        state.value("attachments", s.attachments);
      state.close();
      break;
    }
    case Part::Type::StepStart:
      break;
    case Part::Type::File:
      o.string("mime", p.mime);
      if (!p.filename.empty()) o.string("filename", p.filename);
      o.string("url", p.url);
      if (!p.source.empty()) o.value("source", p.source);
      break;
    case Part::Type::Compaction:
      o.value("auto", p.auto_continue);
      break;
    case Part::Type::StepFinish:
      o.string("reason", p.reason).number("cost", p.cost);
      append_tokens(o.key("tokens"), p.tokens);
      break;
  }
  o.close();
}

json::object to_json(const Part& p, json::storage_ptr sp) {
  return tree_of(json_text(p), std::move(sp));
}

void append_json(std::string& out, const std::vector<Part>& parts) {
  out.push_back('[');
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i) out.push_back(',');
    append_json(out, parts[i]);
  }
  out.push_back(']');
}

void append_json(std::string& out, const MessageWithParts& m) {
  ObjectWriter o(out);
  append_json(o.key("info"), m.info);
  append_json(o.key("parts"), m.parts);
  o.close();
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
  else if (type == "file")
    p.type = Part::Type::File;
  else if (type == "compaction")
    p.type = Part::Type::Compaction;
  else
    return make_error(ErrorCode::Internal, "stored part of unknown type \"" + type + "\"");
  p.text = str(o, "text");
  const auto& time = obj(o, "time");
  p.start = num(time, "start");
  p.end = num(time, "end");
  if (auto s = o.find("synthetic"); s != o.end() && s->value().is_bool())
    p.synthetic = s->value().get_bool();
  p.mime = str(o, "mime");
  p.url = str(o, "url");
  p.filename = str(o, "filename");
  p.source = obj(o, "source");
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
  if (auto a = o.find("auto"); a != o.end() && a->value().is_bool())
    p.auto_continue = a->value().get_bool();
  p.reason = str(o, "reason");
  p.cost = real(o, "cost");
  p.tokens = tokens_from(obj(o, "tokens"));
  return p;
}

}  // namespace sb::session
