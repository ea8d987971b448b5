#pragma once
// ChatService: Switchboard as the server of an AI SDK chat app (useChat, docs/ai-sdk.md). A chat
// id names a session (stored, so found again after a restart); a request of the app starts a
// turn (submit, regenerate) or continues the one that waits for it (tool outputs, approvals),
// and answers with a ChatResponse, the turn's UI message chunks. The response ends when the turn
// ends or when the step waits only for the app: its client-side tools (the chat's own, declared
// in the request, or those of its clientID without a live connection) and approvals (permission
// asks). The next request carries the answers, each given to its call exactly once, and streams
// the rest of the turn.
//
// Not thread-safe: the server's executor only.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "bus/event_bus.hpp"
#include "chat/stream.hpp"
#include "chat/types.hpp"
#include "clienttool/registry.hpp"
#include "clienttool/wire.hpp"
#include "permission/service.hpp"
#include "session/service.hpp"
#include "session/store.hpp"
#include "tool/registry.hpp"

namespace sb::chat {

struct ChatDeps {
  boost::asio::any_io_executor executor;
  std::shared_ptr<bus::EventBus> bus;
  std::shared_ptr<session::SessionService> sessions;
  std::shared_ptr<session::SessionStore> store;  // chat id -> session id
  std::shared_ptr<clienttool::ClientToolRegistry> client_tools;
  std::shared_ptr<tool::ToolRegistry> tools;
  std::shared_ptr<permission::PermissionService> permissions;
};

struct ChatOptions {
  // A new message while the turn waits for the app ends that turn first; it gets this long to
  // wind down.
  std::chrono::milliseconds supersede_wait{10000};
  // Chats kept in memory between turns (their session found, their tools registered); the least
  // recently used beyond this go, and are found again in the store.
  std::size_t kept_chats = 4096;
  // What a chat's own tools may be (clientTools.maxToolsPerClient, maxDescriptionBytes,
  // maxSchemaBytes), as a client's registration.
  clienttool::SpecLimits tool_limits;
};

class ChatService : public std::enable_shared_from_this<ChatService> {
 public:
  static std::shared_ptr<ChatService> create(ChatDeps deps, ChatOptions options = {});

  // A request of the app. Errors: InvalidRequest (an unknown model or agent, a tool named as a
  // server tool, nothing to answer), Forbidden (the chat's session belongs to another client),
  // Conflict (a response of the chat is streaming, or a turn runs that does not wait for the
  // app). What the request carries that cannot be used (an output for a call that has ended or
  // was never made) is said in the response, as `error` chunks.
  boost::asio::awaitable<Result<std::shared_ptr<ChatResponse>>> send(ChatRequest request);

  // The response streaming now, to resume: NotFound for a chat never used, nullptr when nothing
  // streams.
  boost::asio::awaitable<Result<std::shared_ptr<ChatResponse>>> active(std::string chat_id);
  // The reader of `response` left before its end. A chat that is not resumable stops its turn:
  // over HTTP, a closed response is the app's stop().
  void reader_left(const std::string& chat_id, const std::shared_ptr<ChatResponse>& response);
  // Stops the chat's turn. NotFound for a chat never used; false when no turn runs.
  boost::asio::awaitable<Result<bool>> stop(std::string chat_id);
  // The session that a chat names, when it was used.
  boost::asio::awaitable<Result<std::optional<std::string>>> session_of(std::string chat_id);

 private:
  struct Chat {
    std::string id;
    std::string session_id;
    std::string app_client;                 // the client id its own tools are registered under
    std::map<std::string, bool> app_tools;  // its own tools (name -> interactive)
    std::string app_tools_key;              // what they were registered from
    bool resumable = false;
    std::string message_id;  // the UI message of the answer
    std::shared_ptr<ChatResponse> response;
    std::vector<json::object> backlog;  // chunks made while no response was open
    std::unique_ptr<TurnStream> stream;
    std::vector<std::shared_ptr<boost::asio::steady_timer>> idle_waiters;
    // A request of the chat is starting a turn (its store calls under way): another is refused.
    bool starting = false;
  };

  ChatService(ChatDeps deps, ChatOptions options);

  // The request outlives the call (send() owns it).
  boost::asio::awaitable<Result<std::shared_ptr<Chat>>> open_chat(const ChatRequest& request);
  Result<void> register_app_tools(Chat& chat, const ChatRequest& request);
  // A turn for a new message `text`, or one that answers the stored message `answer_again`.
  boost::asio::awaitable<Result<std::shared_ptr<ChatResponse>>> start_turn(
      std::shared_ptr<Chat> chat, const ChatRequest& request, std::string text,
      std::string answer_again = {});
  std::shared_ptr<ChatResponse> continue_turn(Chat& chat, const ChatRequest& request);
  // A response of answers that reach no waiting call: the reasons, then finish.
  std::shared_ptr<ChatResponse> answer_late(Chat& chat, const ChatRequest& request);
  std::shared_ptr<ChatResponse> new_response(Chat& chat);
  void emit(Chat& chat, const json::object& chunk);
  void on_event(const bus::EventPtr& event);
  // The chat's turn ended (or did not start): it is kept for the next one, within
  // ChatOptions::kept_chats.
  void rest(const std::shared_ptr<Chat>& chat);
  // The chat goes from memory, with its tools (the session keeps the conversation).
  void forget(const std::string& chat_id);
  void set_streaming(Chat& chat, std::unique_ptr<TurnStream> stream);

  ChatDeps deps_;
  ChatOptions options_;
  std::map<std::string, std::shared_ptr<Chat>> chats_;  // by chat id
  // Chats that a request is opening (reading or creating their session): another is refused.
  std::set<std::string> opening_;
  std::map<std::string, std::string> by_session_;  // session id -> chat id
  std::list<std::string> idle_;     // chats without a turn, least recently used first
  std::size_t streaming_ = 0;       // chats with a turn
  bus::Subscription subscription_;  // while any chat has a turn
};

}  // namespace sb::chat
