#pragma once
// The Switchboard C++ SDK: Client (sessions, prompts, the /event stream, permission replies)
// and, through it or on its own, ClientToolsManager (tools that run in this program).
// docs/sdk-cpp.md has the guide.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "switchboard/client_tools.hpp"
#include "switchboard/errors.hpp"
#include "switchboard/types.hpp"

namespace switchboard {

namespace detail {
class EventStreamImpl;
struct Endpoint;
}  // namespace detail

struct ClientOptions {
  // Each request except prompt (which waits for the whole turn: PromptOptions::timeout).
  std::chrono::milliseconds request_timeout{30000};
  // The id of client_tools(); default "cpp-" and 12 random hex digits.
  std::string client_id;
  // The server's password (server.password), sent with every request. Empty: none.
  std::string password;
  // The token the server issued to client_id earlier (its first use: a session created for it,
  // a registration, a connection); later uses must present it. Empty: none yet.
  std::string client_token;
  // Called (must not block) when the server issues client_id's token, to keep it.
  std::function<void(const std::string&)> on_client_token;
  // For client_tools(); its password, client_token and on_client_token are the ones above.
  ClientToolsOptions tools;
};

struct CreateSessionOptions {
  std::string title;
  json::array permission;  // session rules [{permission, pattern, action}]
  std::string parent_id;
  std::string client_id;  // default: this client's id
};

struct PromptOptions {
  std::string model;                  // "PROVIDER/MODEL"; default: the server's
  std::string agent;                  // default: "build"
  std::map<std::string, bool> tools;  // per-prompt tool switches {"bash": false}
  // prompt() only: how long to wait for the turn to end.
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
};

// GET /event. Events are queued as they arrive (at most 10000; a consumer that falls further
// behind loses the stream, which then ends). The stream does not reconnect: open a new one with
// the last event's id (Client::events(id)), and the events missed come first, after a
// server.connected whose properties say {"resumed": true}; with {"resumed": false} the server
// could not replay the gap (too long, or it restarted): reload what you show. Thread-safe.
class EventStream {
 public:
  EventStream() = default;  // no stream, like a moved-from one; assign one from Client::events()
  // The next event; nullopt when none arrives within `timeout`. Throws ConnectionError once
  // the stream has ended and every queued event was taken.
  std::optional<Event> next(std::chrono::milliseconds timeout);
  boost::asio::awaitable<std::optional<Event>> async_next(std::chrono::milliseconds timeout);
  // The next event of `type` (others before it are dropped); nullopt on timeout.
  std::optional<Event> next_of_type(const std::string& type, std::chrono::milliseconds timeout);
  void close();
  ~EventStream();
  EventStream(EventStream&&) noexcept;
  EventStream& operator=(EventStream&&) noexcept;

 private:
  friend class Client;
  EventStream(std::shared_ptr<detail::Runtime> runtime,
              std::shared_ptr<detail::EventStreamImpl> impl);
  std::shared_ptr<detail::Runtime> runtime_;
  std::shared_ptr<detail::EventStreamImpl> impl_;
};

// Seed 000's startSession(): `auto [session, prompt, close] = client.start_session();`
struct SessionHandle {
  Session session;
  std::function<MessageWithParts(const std::string& text)> prompt;
  std::function<void()> close;  // disconnects the client tools
};
struct AsyncSessionHandle {
  Session session;
  std::function<boost::asio::awaitable<MessageWithParts>(std::string text)> prompt;
  std::function<boost::asio::awaitable<void>()> close;
};
struct StartSessionOptions {
  bool tools = true;  // connect client_tools() to the new session
  std::string title;
};

// A client of one Switchboard server. Thread-safe; the blocking members must not be called on
// the thread that runs the client's I/O (see ClientToolsManager).
class Client {
 public:
  // I/O on a thread of the client's own.
  explicit Client(std::string base_url, ClientOptions options = {});
  // I/O on `executor`, for coroutine programs.
  Client(boost::asio::any_io_executor executor, std::string base_url, ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const std::string& base_url() const { return base_url_; }
  // The token the server issued to this client's id ("" until its first use); client_tools()
  // shares it.
  std::string client_token() const;
  // This client's tools, with ClientOptions::client_id and ClientOptions::tools.
  ClientToolsManager& client_tools();

  Session create_session(const CreateSessionOptions& options = {});
  std::vector<Session> list_sessions();
  Session get_session(const std::string& id);
  void delete_session(const std::string& id);
  // Sends the text and waits for the turn; returns the last assistant message with its parts.
  // ServerError CONFLICT when the session is busy.
  MessageWithParts prompt(const std::string& session_id, const std::string& text,
                          const PromptOptions& options = {});
  // Starts the turn and returns at once.
  void prompt_async(const std::string& session_id, const std::string& text,
                    const PromptOptions& options = {});
  // True when a turn was running.
  bool abort(const std::string& session_id);
  std::vector<MessageWithParts> messages(const std::string& session_id);
  // Sessions that are not idle, by id.
  std::map<std::string, SessionStatus> statuses();
  std::vector<PermissionRequest> permissions();
  void reply_permission(const std::string& permission_id, PermissionReply reply,
                        const std::string& message = {});
  // Opens GET /event; returns once the server accepted the stream. `last_event_id`: the id of
  // the last event of an earlier stream, to resume after it (see EventStream).
  EventStream events(const std::string& last_event_id = {});
  // Creates a session owned by this client and connects client_tools() to it.
  SessionHandle start_session(const StartSessionOptions& options = {});

  // The async_ members have overloads instead of default arguments: GCC 12 miscompiles a
  // braced default argument inside a co_await expression.
  boost::asio::awaitable<Session> async_create_session();
  boost::asio::awaitable<Session> async_create_session(CreateSessionOptions options);
  boost::asio::awaitable<std::vector<Session>> async_list_sessions();
  boost::asio::awaitable<Session> async_get_session(std::string id);
  boost::asio::awaitable<void> async_delete_session(std::string id);
  boost::asio::awaitable<MessageWithParts> async_prompt(std::string session_id, std::string text);
  boost::asio::awaitable<MessageWithParts> async_prompt(std::string session_id, std::string text,
                                                        PromptOptions options);
  boost::asio::awaitable<void> async_prompt_async(std::string session_id, std::string text);
  boost::asio::awaitable<void> async_prompt_async(std::string session_id, std::string text,
                                                  PromptOptions options);
  boost::asio::awaitable<bool> async_abort(std::string session_id);
  boost::asio::awaitable<std::vector<MessageWithParts>> async_messages(std::string session_id);
  boost::asio::awaitable<std::map<std::string, SessionStatus>> async_statuses();
  boost::asio::awaitable<std::vector<PermissionRequest>> async_permissions();
  boost::asio::awaitable<void> async_reply_permission(std::string permission_id,
                                                      PermissionReply reply);
  boost::asio::awaitable<void> async_reply_permission(std::string permission_id,
                                                      PermissionReply reply, std::string message);
  boost::asio::awaitable<EventStream> async_events();
  boost::asio::awaitable<EventStream> async_events(std::string last_event_id);
  boost::asio::awaitable<AsyncSessionHandle> async_start_session();
  boost::asio::awaitable<AsyncSessionHandle> async_start_session(StartSessionOptions options);

 private:
  // One request; the answer's JSON (null for an empty body). Throws ServerError on 4xx/5xx.
  boost::asio::awaitable<json::value> call(std::string method, std::string path, json::value body,
                                           std::chrono::milliseconds timeout) const;

  std::shared_ptr<detail::Runtime> runtime_;
  std::string base_url_;
  std::shared_ptr<const detail::Endpoint> endpoint_;
  ClientOptions options_;
  std::unique_ptr<ClientToolsManager> tools_;
};

}  // namespace switchboard
