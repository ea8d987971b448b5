#pragma once
// ClientToolsManager: registers tools that run in this program, keeps a connection to the
// server open (SSE or WebSocket) and answers the server's requests with the tools' handlers
// (seed 000's ClientToolsManager; docs/sdk-cpp.md).
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <variant>

#include "switchboard/errors.hpp"

namespace switchboard {

namespace json = boost::json;

namespace detail {
class Credentials;
struct CallShared;
class Runtime;
class ToolsImpl;
}  // namespace detail

enum class Transport { sse, websocket };

// closed -> connecting -> connected -> (connection lost) reconnecting -> connected | closed.
enum class ConnectionState { closed, connecting, connected, reconnecting };
std::string_view to_string(ConnectionState state);

struct ClientToolsOptions {
  // How long one handler may run. When it passes, the handler's stop token fires and the server
  // gets the error "Client tool handler timed out after N ms". 0: no limit of our own.
  std::chrono::milliseconds timeout{30000};
  Transport transport = Transport::sse;
  // Reconnection after a lost connection: waits reconnect_delay, doubling up to
  // max_reconnect_delay, at most max_reconnect_attempts times in a row; then the state becomes
  // closed and on_error hears "RECONNECT_FAILED". 0 attempts: no reconnection.
  int max_reconnect_attempts = 5;
  std::chrono::milliseconds reconnect_delay{1000};
  std::chrono::milliseconds max_reconnect_delay{30000};
  // Each HTTP request and each connection attempt (connect, handshake, response head).
  std::chrono::milliseconds request_timeout{10000};
  // A stream that brings nothing for this long counts as broken. The server pings every
  // clientTools.keepaliveInterval (30 s by default); keep this above it.
  std::chrono::milliseconds idle_timeout{75000};
  // Threads of the pool that runs handlers (blocking handlers occupy one each).
  std::size_t handler_threads = 4;
  // Run handlers on this executor instead of the manager's own pool (handler_threads unused).
  std::optional<boost::asio::any_io_executor> handler_executor;
  // The server's password (server.password), sent as Authorization: Bearer. Empty: none.
  std::string password;
  // The token the server issued to this client id earlier (docs/security.md): a program that
  // keeps its id across runs keeps its token too. Empty: the first connection gets one.
  std::string client_token;
  // Called (on the I/O strand; must not block) when the server issues this client's token.
  std::function<void(const std::string&)> on_client_token;
};

// What a handler returns: a string (the output) or a full result. Either is a success; a
// handler reports failure by throwing.
struct ToolResult {
  std::string title;
  std::string output;
  json::object metadata;
};
using ToolOutput = std::variant<std::string, ToolResult>;

// The tool's description as the model sees it.
struct ToolDefinition {
  std::string description;
  json::value parameters = json::object{{"type", "object"}};  // JSON Schema of the input
  bool interactive = false;  // a person answers it: the session shows awaiting-input meanwhile
};

// What a handler knows about its call. Copies share the call. Thread-safe.
class ToolContext {
 public:
  std::string session_id;
  std::string message_id;
  std::string call_id;
  std::string request_id;
  std::string tool_name;  // the name given to register_tool
  std::string tool_id;    // the server's id, client_{clientID}_{name}

  // Fires when the server cancels the call (the turn was aborted, the server's timeout passed,
  // the tool was unregistered, the server shuts down), when the manager's per-call timeout
  // passes, and on disconnect(). A coroutine handler's awaited operations are cancelled too.
  std::stop_token stop_token() const;
  bool stop_requested() const;
  // Why the stop token fired ("" before): "cancelled by the server: REASON",
  // "timed out after N ms", "disconnected", "connection lost".
  std::string stop_reason() const;

  // Reports progress: reaches the session's tool part and the event stream, and extends the
  // server's deadline for the call. Does not block; reports after the call ended are dropped.
  void progress(json::object metadata, std::optional<std::string> title = std::nullopt) const;

  explicit ToolContext(std::shared_ptr<detail::CallShared> call);

 private:
  std::shared_ptr<detail::CallShared> call_;
};

// Thread-safe: every member may be called from any thread, except that the blocking members
// must not be called on the thread that runs the manager's I/O (its own thread, or the
// executor you gave it) nor from the on_state_change / on_error callbacks.
class ClientToolsManager {
 public:
  // Runs on the handler pool; throws to report an error to the model.
  using Handler = std::function<ToolOutput(const json::object& input, ToolContext& ctx)>;
  // A coroutine handler; runs on a strand of the handler pool.
  using AsyncHandler =
      std::function<boost::asio::awaitable<ToolOutput>(json::object input, ToolContext ctx)>;

  // `base_url` like "http://127.0.0.1:4096". `client_id`: 1-128 letters, digits, '_' or '-'.
  // The manager runs its I/O on a thread of its own.
  ClientToolsManager(std::string client_id, std::string base_url, ClientToolsOptions options = {});
  // The manager runs its I/O on `executor` (your io_context), for coroutine programs.
  ClientToolsManager(boost::asio::any_io_executor executor, std::string client_id,
                     std::string base_url, ClientToolsOptions options = {});
  // Disconnects and waits for running handlers to return.
  ~ClientToolsManager();
  ClientToolsManager(const ClientToolsManager&) = delete;
  ClientToolsManager& operator=(const ClientToolsManager&) = delete;

  const std::string& client_id() const;
  // The token the server issued to this client id ("" until its first use).
  std::string client_token() const;
  ConnectionState state() const;
  // Waits until the state is `state`; false on timeout.
  bool wait_for_state(ConnectionState state, std::chrono::milliseconds timeout) const;
  // Called on the manager's I/O strand at each change; must not block. Set before connect().
  void on_state_change(std::function<void(ConnectionState)> listener);
  // Failures nobody else hears of: reconnection given up ("RECONNECT_FAILED"), a result the
  // server refused, a server error on the WebSocket. Called on the I/O strand; must not block.
  void on_error(std::function<void(const Error&)> listener);

  // Adds (or replaces) a tool. While connected it is registered with the server at once; a
  // server rejection (invalid schema, a name another client owns) throws ServerError and the
  // tool is not kept. std::invalid_argument for an invalid name or an empty handler.
  void register_tool(const std::string& name, ToolDefinition definition, Handler handler);
  void register_tool(const std::string& name, ToolDefinition definition, AsyncHandler handler);
  // Removes a tool here and, while connected, on the server (its pending calls are cancelled).
  void unregister_tool(const std::string& name);
  // Registers every tool (offered only to `session_id`'s model when it is given) and opens the
  // stream. Throws ServerError / ConnectionError when that fails (no retries: the state goes
  // back to closed); std::logic_error when not closed.
  void connect(const std::string& session_id = {});
  // Stops every running handler (stop tokens fire), sends the results that are ready, removes
  // the tools from the server and closes the stream. The state becomes closed.
  void disconnect();

  // The same for coroutines: co_await them from any executor.
  boost::asio::awaitable<void> async_register_tool(std::string name, ToolDefinition definition,
                                                   Handler handler);
  boost::asio::awaitable<void> async_register_tool(std::string name, ToolDefinition definition,
                                                   AsyncHandler handler);
  boost::asio::awaitable<void> async_unregister_tool(std::string name);
  boost::asio::awaitable<void> async_connect();  // every session (an overload: see Client)
  boost::asio::awaitable<void> async_connect(std::string session_id);
  boost::asio::awaitable<void> async_disconnect();

 private:
  friend class Client;
  ClientToolsManager(std::shared_ptr<detail::Runtime> runtime, std::string client_id,
                     std::string base_url, ClientToolsOptions options,
                     std::shared_ptr<detail::Credentials> credentials);

  std::shared_ptr<detail::Runtime> runtime_;
  std::shared_ptr<detail::ToolsImpl> impl_;
};

}  // namespace switchboard
