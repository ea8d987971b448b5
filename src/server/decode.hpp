#pragma once
// Every request body and WebSocket message, decoded once where it enters into a typed value: one
// decoder per shape, shared by the HTTP routes and the WebSocket handler, so both accept exactly
// the same shapes. Errors are InvalidRequest and name the JSON path ("permission[0].pattern must
// be a string, got number"). Past this file the server holds no raw JSON it would parse again.
// Pure functions; thread-safe.
#include <optional>
#include <string>
#include <vector>

#include "chat/types.hpp"
#include "clienttool/registry.hpp"
#include "clienttool/types.hpp"
#include "permission/service.hpp"
#include "session/service.hpp"
#include "util/json.hpp"

namespace sb::server {

// A client id where the client names itself: 1-128 letters, digits, '_' or '-'. `where` names it
// in errors ("clientID").
Result<std::string> decode_client_id(std::string_view id, std::string_view where = "clientID");

// register: {clientID?, sessionID?, tools: [{id, description, parameters, interactive?}]}. Over
// HTTP clientID is required (the route says so); a WebSocket's client is its URL's.
struct RegisterRequest {
  std::optional<std::string> client_id;
  std::optional<std::string> session_id;  // offer the tools to this session only
  std::vector<clienttool::ToolSpec> tools;
};
Result<RegisterRequest> decode_register(const json::object& body);

// unregister: {clientID?, sessionID?, toolIDs?}; no toolIDs = every tool of the client.
struct UnregisterRequest {
  std::optional<std::string> client_id;
  std::optional<std::vector<std::string>> tool_ids;
};
Result<UnregisterRequest> decode_unregister(const json::object& body);

// result: {requestID, clientID?, result: {status, ...}} or the result's fields flat.
struct ResultRequest {
  std::string request_id;
  std::optional<std::string> client_id;
  clienttool::ToolResponse response;
};
Result<ResultRequest> decode_result(const json::object& body);

// progress: {requestID, clientID?, metadata?, title?}.
struct ProgressRequest {
  std::string request_id;
  std::optional<std::string> client_id;
  clienttool::Progress progress;
};
Result<ProgressRequest> decode_progress(const json::object& body);

// POST /client-tools/execute: {tool | toolID, clientID?, input?, sessionID?, messageID?,
// callID?, timeout? (ms, > 0)}. `input` is copied into `sp` (the caller's buffer: the registry
// serializes it once and keeps no reference).
Result<clienttool::ExecuteParams> decode_execute(const json::object& body,
                                                 json::storage_ptr sp = {});

// POST /session: {title?, permission? (rules), clientID?, parentID?}.
Result<session::CreateInput> decode_create_session(const json::object& body);

// POST /session/{id}/message and prompt_async: {parts: [{type: "text", text} | {type: "file",
// mime, url, filename?, source?}], model?: "P/M" |
// {providerID, modelID}, agent?, tools?: {ID: bool}, noReply?}.
Result<session::PromptInput> decode_prompt(const json::object& body);

// POST /permission/{id}/reply: {reply: "once" | "always" | "reject", message?, clientID?}.
struct PermissionReplyRequest {
  permission::Reply reply = permission::Reply::Once;
  std::optional<std::string> message;
  std::optional<std::string> client_id;
};
Result<PermissionReplyRequest> decode_permission_reply(const json::object& body);

// POST /session/{id}/permissions/{permissionID} (V1, deprecated in OpenCode): {response: "once" |
// "always" | "reject", message?, clientID?}.
Result<PermissionReplyRequest> decode_permission_response(const json::object& body);

// PATCH /session/{id}: {title?, time?: {archived?: number | null}, permission? (rules appended),
// clientID? (a client's session: its owner, for permission)}.
struct SessionUpdateRequest {
  session::SessionUpdate update;
  std::optional<std::string> client_id;
};
Result<SessionUpdateRequest> decode_session_update(const json::object& body);

// POST /session/{id}/fork: {messageID?}.
Result<std::optional<std::string>> decode_fork(const json::object& body);

// POST /session/{id}/shell: {agent, command, model?: "P/M" | {providerID, modelID}}.
Result<session::ShellInput> decode_shell(const json::object& body);

// PATCH /session/{id}/message/{messageID}/part/{partID}: a whole Part whose id, sessionID and
// messageID are the path's.
Result<session::Part> decode_part_update(const json::object& body, const std::string& session_id,
                                         const std::string& message_id, const std::string& part_id);

// ?limit= of GET /session/{id}/message: a non-negative integer (0: all).
Result<std::size_t> decode_message_limit(std::string_view text);

// POST /question/{id}/reply: {answers: [[label, ...], ...] (one per question), clientID?}.
struct QuestionReplyRequest {
  std::vector<std::vector<std::string>> answers;
  std::optional<std::string> client_id;
};
Result<QuestionReplyRequest> decode_question_reply(const json::object& body);

// The optional clientID of a body that carries nothing else (POST /question/{id}/reject).
Result<std::optional<std::string>> decode_answerer(const json::object& body);

// POST /auth: {password}.
Result<std::string> decode_login(const json::object& body);

// POST /session/{id}/revert: {messageID: "msg…", partID?: "prt…"}.
struct RevertRequest {
  std::string message_id;
  std::string part_id;  // empty when absent
};
Result<RevertRequest> decode_revert(const json::object& body);
// ?messageID= of GET /session/{id}/diff: "msg…".
Result<std::string> decode_message_id(std::string_view text, std::string_view where);

// A chat request of the AI SDK (POST /api/chat, a WebSocket `send`): `request` has {id,
// messages: UIMessage[], trigger, messageId?}; `body` the app's own fields {model?, agent?,
// clientID?, tools?: {NAME: {description?, inputSchema?, interactive?}}, resumable?} (over HTTP
// both are the one body). Only the last message is read for what it asks; every message must be
// {role, parts: [...]}.
Result<chat::ChatRequest> decode_chat_request(const json::object& request,
                                              const json::object& body);

// POST /session/{id}/command: {command, arguments?, agent?, model?: "PROVIDER/MODEL", parts?: []}
// (files with a command, and messageID, are refused).
struct CommandRequest {
  std::string command;
  std::string arguments;  // "" when absent
  std::optional<std::string> agent;
  std::optional<std::string> model;
};
Result<CommandRequest> decode_command(const json::object& body);

// POST /session/{id}/summarize: {providerID?, modelID? (both or neither), auto?}.
struct SummarizeRequest {
  std::optional<std::string> model;  // "PROVIDER/MODEL"
  bool auto_continue = false;
};
Result<SummarizeRequest> decode_summarize(const json::object& body);

// POST /session/{id}/init: {providerID?, modelID? (both or neither), messageID?}. OpenCode's
// clients send a messageID for the user message; the server names the messages it stores, so
// it is checked as an id and not used. The model, "PROVIDER/MODEL"; nullopt for the default.
Result<std::optional<std::string>> decode_init(const json::object& body);

}  // namespace sb::server
