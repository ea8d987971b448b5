#pragma once
// JSON-RPC 2.0 messages as MCP uses them (one object per message; no batches since 2025-06-18),
// decoded into typed values where they enter: a line from a stdio server, an HTTP body, an SSE
// event. Anything else is an error that says what is wrong with the message.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "util/error.hpp"
#include "util/json.hpp"

namespace sb::mcp {

// JSON-RPC's and MCP's error codes that we send or look at.
namespace rpc_code {
inline constexpr std::int64_t kParseError = -32700;
inline constexpr std::int64_t kInvalidRequest = -32600;
inline constexpr std::int64_t kMethodNotFound = -32601;
inline constexpr std::int64_t kInvalidParams = -32602;
inline constexpr std::int64_t kInternalError = -32603;
inline constexpr std::int64_t kUnsupportedProtocolVersion = -32022;  // 2026-07-28
}  // namespace rpc_code

struct RpcError {
  std::int64_t code = rpc_code::kInternalError;
  std::string message;
  json::value data;  // null when absent
};

struct Message {
  enum class Kind { Request, Notification, Response };
  Kind kind = Kind::Notification;
  json::value id;                 // Request and Response: a string or an integer
  std::string method;             // Request and Notification
  json::object params;            // Request and Notification; empty when absent
  json::object result;            // Response without error
  std::optional<RpcError> error;  // Response that failed
};

// InvalidRequest naming what is wrong ("not a JSON-RPC 2.0 message: ...").
Result<Message> decode_message(const json::value& value);
// Parses then decodes one message's text.
Result<Message> parse_message(std::string_view text);

// The wire text of a message, without a line break.
std::string encode(const Message& message);
Message request(std::int64_t id, std::string method, json::object params);
Message notification(std::string method, json::object params = {});
Message response(json::value id, json::object result);
Message error_response(json::value id, std::int64_t code, std::string message);

// An id as text, for logs and error messages.
std::string id_text(const json::value& id);

}  // namespace sb::mcp
