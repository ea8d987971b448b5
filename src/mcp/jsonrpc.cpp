#include "mcp/jsonrpc.hpp"

namespace sb::mcp {

namespace {

Error malformed(const std::string& what) {
  return make_error(ErrorCode::InvalidRequest, "not a JSON-RPC 2.0 message: " + what);
}

bool usable_id(const json::value& id) {
  return id.is_string() || id.is_int64() || id.is_uint64();
}

}  // namespace

Result<Message> decode_message(const json::value& value) {
  if (!value.is_object())
    return malformed("an " + std::string(kind_name(value)) + ", not an object");
  const auto& obj = value.get_object();
  auto version = obj.find("jsonrpc");
  if (version == obj.end() || !version->value().is_string() ||
      version->value().get_string() != "2.0")
    return malformed("\"jsonrpc\" must be \"2.0\"");
  Message m;
  auto method = obj.find("method");
  auto id = obj.find("id");
  if (method != obj.end()) {
    if (!method->value().is_string() || method->value().get_string().empty())
      return malformed("\"method\" must be a non-empty string");
    m.method = method->value().get_string();
    if (auto params = obj.find("params"); params != obj.end() && !params->value().is_null()) {
      if (!params->value().is_object())
        return malformed("\"params\" of " + m.method + " must be an object, got " +
                         std::string(kind_name(params->value())));
      m.params = params->value().get_object();
    }
    if (id == obj.end()) {
      m.kind = Message::Kind::Notification;
      return m;
    }
    if (!usable_id(id->value())) return malformed("\"id\" must be a string or an integer");
    m.kind = Message::Kind::Request;
    m.id = id->value();
    return m;
  }
  if (id == obj.end()) return malformed("neither \"method\" nor \"id\"");
  // A response's id may be null only when the request could not be read at all.
  if (!usable_id(id->value()) && !id->value().is_null())
    return malformed("\"id\" must be a string or an integer");
  m.kind = Message::Kind::Response;
  m.id = id->value();
  auto result = obj.find("result");
  auto error = obj.find("error");
  if ((result == obj.end()) == (error == obj.end()))
    return malformed("a response has exactly one of \"result\" and \"error\"");
  if (result != obj.end()) {
    if (!result->value().is_object())
      return malformed("\"result\" must be an object, got " +
                       std::string(kind_name(result->value())));
    m.result = result->value().get_object();
    return m;
  }
  if (!error->value().is_object()) return malformed("\"error\" must be an object");
  const auto& e = error->value().get_object();
  RpcError err;
  auto code = e.find("code");
  if (code == e.end() || !code->value().is_int64())
    return malformed("\"error.code\" must be an integer");
  err.code = code->value().get_int64();
  if (auto msg = e.find("message"); msg != e.end() && msg->value().is_string())
    err.message = msg->value().get_string();
  if (auto data = e.find("data"); data != e.end()) err.data = data->value();
  m.error = std::move(err);
  return m;
}

Result<Message> parse_message(std::string_view text) {
  auto parsed = parse_json(text);
  if (!parsed) return malformed(parsed.error().message);
  return decode_message(*parsed);
}

std::string encode(const Message& m) {
  json::object obj;
  obj["jsonrpc"] = "2.0";
  switch (m.kind) {
    case Message::Kind::Request:
      obj["id"] = m.id;
      obj["method"] = m.method;
      obj["params"] = m.params;
      break;
    case Message::Kind::Notification:
      obj["method"] = m.method;
      if (!m.params.empty()) obj["params"] = m.params;
      break;
    case Message::Kind::Response:
      obj["id"] = m.id;
      if (m.error) {
        json::object e{{"code", m.error->code}, {"message", m.error->message}};
        if (!m.error->data.is_null()) e["data"] = m.error->data;
        obj["error"] = std::move(e);
      } else {
        obj["result"] = m.result;
      }
      break;
  }
  return json::serialize(obj);
}

Message request(std::int64_t id, std::string method, json::object params) {
  Message m;
  m.kind = Message::Kind::Request;
  m.id = id;
  m.method = std::move(method);
  m.params = std::move(params);
  return m;
}

Message notification(std::string method, json::object params) {
  Message m;
  m.kind = Message::Kind::Notification;
  m.method = std::move(method);
  m.params = std::move(params);
  return m;
}

Message response(json::value id, json::object result) {
  Message m;
  m.kind = Message::Kind::Response;
  m.id = std::move(id);
  m.result = std::move(result);
  return m;
}

Message error_response(json::value id, std::int64_t code, std::string message) {
  Message m;
  m.kind = Message::Kind::Response;
  m.id = std::move(id);
  m.error = RpcError{code, std::move(message), nullptr};
  return m;
}

std::string id_text(const json::value& id) {
  if (id.is_string()) return std::string(id.get_string());
  return json::serialize(id);
}

}  // namespace sb::mcp
