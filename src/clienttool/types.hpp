#pragma once
// The client-tools data model of seeds 000/001, as C++ types.
#include <cstdint>
#include <memory>
#include <string>

#include "clienttool/schema.hpp"
#include "util/json.hpp"

namespace sb::clienttool {

// A tool as a client describes it at registration.
struct ToolSpec {
  std::string name;  // the client's own name, e.g. "get_local_time"
  std::string description;
  json::value parameters;    // JSON Schema of the input object
  bool interactive = false;  // a person answers it: the session shows awaiting-input meanwhile
};

// A registered tool. `id` is client_{clientID}_{name}.
struct ToolDefinition {
  std::string id;
  std::string name;
  std::string client_id;
  std::string description;
  json::value parameters;
  std::shared_ptr<const CompiledSchema> schema;
  bool interactive = false;
  std::string session_id;  // offered only to this session; empty = to every session
  // Offered to the model by `name` rather than `id`: a chat's own tools (one session each), named
  // as the app named them.
  bool plain_name = false;
};

// What the server sends a client to run ("client-tool-request"), besides the input (which is
// serialized into the request once and not kept: see ClientMessage::request_json).
struct ExecutionRequest {
  std::string request_id;
  std::string session_id;
  std::string message_id;
  std::string call_id;
  std::string tool;  // the full tool id
};

// What a client answers: a success with output, or an error message the model will see.
struct ToolResponse {
  bool success = true;
  std::string title;
  std::string output;
  json::object metadata;
  json::array attachments;
  std::string error;  // when !success
};

// A call waiting for its client's result, as it is stored so that the wait outlives a restart of
// the server (design.md decision 5): ExecuteParams::resume makes it pending again, under the same
// request id and event id, with the same deadlines.
struct WaitingCall {
  std::string request_id;
  std::string client_id;
  std::string tool;  // the full tool id
  std::string session_id;
  std::string message_id;
  std::string call_id;
  bool interactive = false;
  // Its event id: a client that reconnects with this one or a later Last-Event-ID has it.
  std::uint64_t seq = 0;
  std::int64_t timeout_ms = 0;     // what progress extends the deadline by
  std::int64_t deadline = 0;       // ms since the epoch: the call times out then
  std::int64_t hard_deadline = 0;  // ms since the epoch: progress extends it no further
};

// A message on a client's delivery channel (SSE stream or WebSocket).
struct ClientMessage {
  enum class Kind { Request, Cancel };
  Kind kind = Kind::Request;
  std::uint64_t seq = 0;  // requests only: the SSE event id, for Last-Event-ID replay
  std::string request_id;
  std::string reason;        // cancels only
  std::string request_json;  // requests only: the wire form, serialized once for every delivery
};

}  // namespace sb::clienttool
