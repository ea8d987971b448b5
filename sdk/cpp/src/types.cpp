#include "switchboard/types.hpp"

#include <boost/json/serialize.hpp>

#include "json_util.hpp"
#include "switchboard/errors.hpp"

namespace switchboard {

using detail::int_field;
using detail::object_field;
using detail::string_field;

namespace {

const json::object& as_object(const json::value& v, const char* what) {
  if (!v.is_object())
    throw ConnectionError("INVALID_RESPONSE", std::string(what) + " is not a JSON object: " +
                                                  json::serialize(v).substr(0, 200));
  return v.get_object();
}

// A view that fits only when the event is of `type` and its properties hold `key`.
const json::value* property(const Event& e, std::initializer_list<std::string_view> types,
                            std::string_view key) {
  for (auto t : types)
    if (e.type == t) return e.properties.if_contains(key);
  return nullptr;
}

}  // namespace

Session session_from_json(const json::value& v) {
  const json::object& o = as_object(v, "a session");
  Session s;
  s.id = string_field(o, "id");
  s.title = string_field(o, "title");
  s.directory = string_field(o, "directory");
  s.parent_id = string_field(o, "parentID");
  s.client_id = string_field(o, "clientID");
  const json::object& time = object_field(o, "time");
  s.created = int_field(time, "created");
  s.updated = int_field(time, "updated");
  s.raw = o;
  return s;
}

MessageInfo message_info_from_json(const json::value& v) {
  const json::object& o = as_object(v, "a message");
  MessageInfo m;
  m.id = string_field(o, "id");
  m.session_id = string_field(o, "sessionID");
  m.role = string_field(o, "role");
  m.agent = string_field(o, "agent");
  m.provider_id = string_field(o, "providerID");
  m.model_id = string_field(o, "modelID");
  if (m.role == "user") {
    const json::object& model = object_field(o, "model");
    m.provider_id = string_field(model, "providerID");
    m.model_id = string_field(model, "modelID");
  }
  m.finish = string_field(o, "finish");
  const json::object& time = object_field(o, "time");
  m.created = int_field(time, "created");
  if (time.contains("completed")) m.completed = int_field(time, "completed");
  const json::object& tokens = object_field(o, "tokens");
  m.tokens.input = int_field(tokens, "input");
  m.tokens.output = int_field(tokens, "output");
  m.tokens.reasoning = int_field(tokens, "reasoning");
  m.tokens.cache_read = int_field(object_field(tokens, "cache"), "read");
  m.tokens.cache_write = int_field(object_field(tokens, "cache"), "write");
  if (const json::value* cost = o.if_contains("cost"); cost && cost->is_number())
    m.cost = cost->to_number<double>();
  if (const json::value* error = o.if_contains("error"); error && error->is_object()) {
    MessageError e;
    e.name = string_field(error->get_object(), "name");
    e.data = object_field(error->get_object(), "data");
    e.message = string_field(e.data, "message");
    m.error = std::move(e);
  }
  m.raw = o;
  return m;
}

Part part_from_json(const json::value& v) {
  const json::object& o = as_object(v, "a part");
  Part p;
  p.id = string_field(o, "id");
  p.session_id = string_field(o, "sessionID");
  p.message_id = string_field(o, "messageID");
  p.type = string_field(o, "type");
  p.text = string_field(o, "text");
  p.call_id = string_field(o, "callID");
  p.tool = string_field(o, "tool");
  const json::object& state = object_field(o, "state");
  p.state.status = string_field(state, "status");
  p.state.input = object_field(state, "input");
  p.state.title = string_field(state, "title");
  p.state.output = string_field(state, "output");
  p.state.error = string_field(state, "error");
  p.state.metadata = object_field(state, "metadata");
  p.raw = o;
  return p;
}

MessageWithParts message_with_parts_from_json(const json::value& v) {
  const json::object& o = as_object(v, "a message with parts");
  MessageWithParts m;
  m.info = message_info_from_json(o.contains("info") ? o.at("info") : json::value(nullptr));
  if (const json::value* parts = o.if_contains("parts"); parts && parts->is_array())
    for (const auto& p : parts->get_array())
      m.parts.push_back(part_from_json(p));
  return m;
}

PermissionRequest permission_request_from_json(const json::value& v) {
  const json::object& o = as_object(v, "a permission request");
  PermissionRequest r;
  r.id = string_field(o, "id");
  r.session_id = string_field(o, "sessionID");
  r.permission = string_field(o, "permission");
  if (const json::value* patterns = o.if_contains("patterns"); patterns && patterns->is_array())
    for (const auto& p : patterns->get_array())
      if (p.is_string()) r.patterns.emplace_back(p.get_string());
  r.metadata = object_field(o, "metadata");
  const json::object& tool = object_field(o, "tool");
  r.message_id = string_field(tool, "messageID");
  r.call_id = string_field(tool, "callID");
  r.raw = o;
  return r;
}

std::string MessageWithParts::text() const {
  std::string out;
  for (const auto& p : parts)
    if (p.type == "text") out += p.text;
  return out;
}

// ---- Event ----------------------------------------------------------------------------------

std::string Event::session_id() const {
  if (auto id = string_field(properties, "sessionID"); !id.empty()) return id;
  const json::object& info = object_field(properties, "info");
  if (type.starts_with("session.")) return string_field(info, "id");
  if (auto id = string_field(info, "sessionID"); !id.empty()) return id;
  return string_field(object_field(properties, "part"), "sessionID");
}

std::optional<Session> Event::session() const {
  const json::value* info =
      property(*this, {"session.created", "session.updated", "session.deleted"}, "info");
  if (!info || !info->is_object()) return std::nullopt;
  return session_from_json(*info);
}

std::optional<SessionStatus> Event::status() const {
  const json::value* status = property(*this, {"session.status"}, "status");
  if (!status || !status->is_object()) return std::nullopt;
  return SessionStatus{string_field(properties, "sessionID"),
                       string_field(status->get_object(), "type"), status->get_object()};
}

std::optional<MessageInfo> Event::message() const {
  const json::value* info = property(*this, {"message.updated"}, "info");
  if (!info || !info->is_object()) return std::nullopt;
  return message_info_from_json(*info);
}

std::optional<Part> Event::part() const {
  const json::value* part = property(*this, {"message.part.updated"}, "part");
  if (!part || !part->is_object()) return std::nullopt;
  return part_from_json(*part);
}

std::optional<PermissionRequest> Event::permission() const {
  if (type != "permission.asked") return std::nullopt;
  return permission_request_from_json(properties);
}

// ---- UTF-8 ----------------------------------------------------------------------------------

namespace detail {

std::string valid_utf8(std::string text) {
  auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  // Length of the valid sequence at i, or 0 (the ranges of RFC 3629, table 3-7 of Unicode).
  auto sequence = [&](std::size_t i) -> std::size_t {
    unsigned char c = byte(i);
    if (c < 0x80) return 1;
    std::size_t n = c >= 0xC2 && c <= 0xDF   ? 2
                    : c >= 0xE0 && c <= 0xEF ? 3
                    : c >= 0xF0 && c <= 0xF4 ? 4
                                             : 0;
    if (n == 0 || i + n > text.size()) return 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
    if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
    for (std::size_t k = 2; k < n; ++k)
      if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
    return n;
  };
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t n = sequence(i);
    if (n == 0) break;
    i += n;
  }
  if (i == text.size()) return text;  // the common case: nothing to repair
  std::string out = text.substr(0, i);
  while (i < text.size()) {
    std::size_t n = sequence(i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(text, i, n);
      i += n;
    }
  }
  return out;
}

}  // namespace detail
}  // namespace switchboard
