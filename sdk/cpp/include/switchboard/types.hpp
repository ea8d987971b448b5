#pragma once
// The data the Switchboard API exchanges, as C++ values: sessions, messages, parts, permission
// asks and /event events (docs/api.md). Each keeps the JSON it came from in `raw`, so fields this
// SDK does not name are still at hand. Plain values: copy and share them freely.
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace switchboard {

namespace json = boost::json;

struct Session {
  std::string id;
  std::string title;
  std::string directory;     // the project directory the server's tools work in
  std::string parent_id;     // set for sub-sessions of the task tool
  std::string client_id;     // the client that created it, when one did
  std::int64_t created = 0;  // ms since the epoch
  std::int64_t updated = 0;
  json::object raw;
};

struct TokenUsage {
  std::int64_t input = 0;
  std::int64_t output = 0;
  std::int64_t reasoning = 0;
  std::int64_t cache_read = 0;
  std::int64_t cache_write = 0;
};

// Why a turn failed or stopped: ProviderAuthError, APIError, MessageAbortedError,
// PermissionRejectedError, ...
struct MessageError {
  std::string name;
  std::string message;
  json::object data;
};

struct MessageInfo {
  std::string id;
  std::string session_id;
  std::string role;  // "user" | "assistant"
  std::string agent;
  std::string provider_id;
  std::string model_id;
  std::string finish;  // assistant: "stop", "tool-calls", "length", ...
  std::int64_t created = 0;
  std::optional<std::int64_t> completed;
  TokenUsage tokens;
  double cost = 0;
  std::optional<MessageError> error;
  json::object raw;
};

// The state of a tool part: pending -> running -> completed | error.
struct ToolState {
  std::string status;
  json::object input;
  std::string title;
  std::string output;  // completed
  std::string error;   // error
  json::object metadata;
};

struct Part {
  std::string id;
  std::string session_id;
  std::string message_id;
  std::string type;     // "text", "reasoning", "tool", "step-start", "step-finish"
  std::string text;     // text, reasoning
  std::string call_id;  // tool
  std::string tool;     // tool: the tool id
  ToolState state;      // tool
  json::object raw;
};

struct MessageWithParts {
  MessageInfo info;
  std::vector<Part> parts;
  // The text parts joined, as a person would read the answer.
  std::string text() const;
};

// A permission ask waiting for a person (GET /permission, the permission.asked event).
struct PermissionRequest {
  std::string id;
  std::string session_id;
  std::string permission;  // "bash", "edit", "client_tools", ...
  std::vector<std::string> patterns;
  json::object metadata;
  std::string message_id;  // the tool call that asked, when one did
  std::string call_id;
  json::object raw;
};

enum class PermissionReply { once, always, reject };

// session.status: "idle", "busy", "retry" or "awaiting-input".
struct SessionStatus {
  std::string session_id;
  std::string type;
  json::object raw;
};

// One frame of GET /event: {"type": "...", "properties": {...}} with typed views of the common
// kinds. A view that does not fit the event's type is nullopt.
struct Event {
  std::string type;  // "session.status", "message.part.updated", "client-tool.completed", ...
  json::object properties;
  // The frame's id ("" for server.connected): Client::events(id) of the last one resumes there.
  std::string id;

  // The session the event is about, when it names one ("" otherwise).
  std::string session_id() const;
  std::optional<Session> session() const;               // session.created|updated|deleted
  std::optional<SessionStatus> status() const;          // session.status
  std::optional<MessageInfo> message() const;           // message.updated
  std::optional<Part> part() const;                     // message.part.updated
  std::optional<PermissionRequest> permission() const;  // permission.asked
};

// Conversions from the server's JSON; missing fields stay empty. Throw ConnectionError
// ("INVALID_RESPONSE") when the value is not an object.
Session session_from_json(const json::value& v);
MessageInfo message_info_from_json(const json::value& v);
Part part_from_json(const json::value& v);
MessageWithParts message_with_parts_from_json(const json::value& v);
PermissionRequest permission_request_from_json(const json::value& v);

}  // namespace switchboard
