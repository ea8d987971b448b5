// What an AI SDK chat app sends (POST /api/chat, a `send` frame of /api/chat/ws): the request
// {id, messages: UIMessage[], trigger, messageId?} with the app's fields {model, agent, clientID,
// tools, resumable}, decoded by server/decode's decode_chat_request. Input: one JSON document,
// decoded as HTTP does (the app's fields in the same object) and as the WebSocket does (the app's
// fields in its `body`).
#include "clienttool/wire.hpp"
#include "server/decode.hpp"
#include "split.hpp"
#include "util/json.hpp"

namespace {

void check(const sb::Result<sb::chat::ChatRequest>& request, const sb::json::object& doc) {
  if (!request) {
    if (request.error().message.empty()) sb::fuzz::fail("an empty error message");
    return;
  }
  if (request->chat_id.size() > 256) sb::fuzz::fail("a chat id over 256 characters accepted");
  if (request->chat_id.find('\0') != std::string::npos)
    sb::fuzz::fail("a chat id with a NUL character accepted");
  // The last message is the user's (its text is what it asks) or the app's answers.
  const auto* messages = doc.if_contains("messages");
  if (!messages || !messages->is_array()) sb::fuzz::fail("a request without messages accepted");
  const auto& list = messages->get_array();
  if (!list.empty()) {
    const auto* role = list.back().as_object().if_contains("role");
    if (!role || !role->is_string()) sb::fuzz::fail("a last message without a role accepted");
    if (role->get_string() == "user" && !request->user_text)
      sb::fuzz::fail("a user's last message without its text");
    if (role->get_string() != "user" && request->user_text)
      sb::fuzz::fail("text taken from a message that is not the user's");
    if (role->get_string() != "assistant" &&
        (!request->outputs.empty() || !request->approvals.empty()))
      sb::fuzz::fail("tool answers taken from a message that is not the assistant's");
  }
  if (request->tools)
    for (const auto& spec : *request->tools)
      if (!sb::clienttool::valid_name(spec.name)) sb::fuzz::fail("an invalid tool name accepted");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto doc = sb::parse_json(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!doc || !doc->is_object()) return 0;
  const auto& obj = doc->get_object();
  check(sb::server::decode_chat_request(obj, obj), obj);
  if (const auto* body = obj.if_contains("body"); body && body->is_object())
    check(sb::server::decode_chat_request(obj, body->get_object()), obj);
  return 0;
}
