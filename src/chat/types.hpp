#pragma once
// A chat of the AI SDK's UI layer (useChat, DefaultChatTransport, WebSocketChatTransport) as the
// core sees it: what one request asks for, decoded at the edge (server/decode.cpp) from the
// request and its UI messages. docs/ai-sdk.md describes the protocol.
#include <optional>
#include <string>
#include <vector>

#include "clienttool/types.hpp"
#include "util/json.hpp"

namespace sb::chat {

// A tool part of the app's last (assistant) message that carries the app's answer to a call.
struct ToolOutput {
  std::string call_id;  // toolCallId
  bool ok = true;       // output-available; false: output-error
  json::value output;   // ok: what the tool returned
  std::string error;    // !ok: errorText
};

// A tool part in `approval-responded`: a person's answer to an approval request.
struct ApprovalAnswer {
  std::string approval_id;
  std::string call_id;
  bool approved = false;
  std::optional<std::string> reason;
};

struct ChatRequest {
  std::string chat_id;  // the chat's `id`: names its session
  enum class Trigger { Submit, Regenerate };
  Trigger trigger = Trigger::Submit;
  std::optional<std::string> message_id;  // the app's messageId
  // The last message, when it is the user's: its text parts joined. The history before it is
  // the server's, not the app's.
  std::optional<std::string> user_text;
  // The last message, when it is an assistant's: the answers it carries.
  std::vector<ToolOutput> outputs;
  std::vector<ApprovalAnswer> approvals;
  // The app's `body` fields.
  std::optional<std::string> model;  // "PROVIDER/MODEL"
  std::optional<std::string> agent;
  std::optional<std::string> client_id;
  // The app's own tools, offered to the model in this chat by their names; nullopt: none sent.
  std::optional<std::vector<clienttool::ToolSpec>> tools;
  // A closed response does not stop the turn (DELETE /api/chat/{id}/stream does).
  bool resumable = false;
};

}  // namespace sb::chat
