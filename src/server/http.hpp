#pragma once
// Shared types of the HTTP edge. Only server/ includes Beast.
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <filesystem>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include "bus/event_bus.hpp"
#include "bus/event_log.hpp"
#include "chat/service.hpp"
#include "clienttool/credentials.hpp"
#include "clienttool/registry.hpp"
#include "cluster/client_relay.hpp"
#include "cluster/node.hpp"
#include "config/config.hpp"
#include "mcp/manager.hpp"
#include "permission/service.hpp"
#include "session/project.hpp"
#include "session/service.hpp"
#include "store/database.hpp"
#include "store/file_lock.hpp"
#include "tool/registry.hpp"

namespace sb::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

// What a route that turns its connection into a push stream (SSE, WebSocket) leaves to run: the
// HTTP session ends first, freeing its coroutine frames, read buffer and stream, and the push
// stream then runs on its own with the socket and the request (which it drops once it is done
// with the head or the handshake). So an idle push connection holds only what it needs.
using TakeOver = std::function<asio::awaitable<void>(tcp::socket, Request)>;

// Something the server must stop on shutdown: a connection. Used only on the I/O thread.
class PushChannel;

class Stoppable {
 public:
  virtual ~Stoppable() = default;
  virtual void stop() = 0;
};

// The live connections, so that shutdown can reach each one. I/O thread only.
class ConnectionSet {
 public:
  using Handle = std::list<std::weak_ptr<Stoppable>>::iterator;
  Handle add(std::weak_ptr<Stoppable> c) { return list_.insert(list_.end(), std::move(c)); }
  void remove(Handle h) {
    list_.erase(h);
    if (list_.empty() && on_empty) {
      auto callback = std::exchange(on_empty, nullptr);  // it may not outlive its own call
      callback();
    }
  }
  // Called when the last connection goes away (shutdown waits for it).
  std::function<void()> on_empty;
  std::size_t size() const { return list_.size(); }
  void stop_all() {
    auto copy = list_;  // stop() may remove entries
    for (auto& weak : copy)
      if (auto c = weak.lock()) c->stop();
  }

 private:
  std::list<std::weak_ptr<Stoppable>> list_;
};

// Counts what it holds while it lives: an open TCP connection against server.maxConnections.
// Move-only; the I/O thread only.
class ConnectionSlot {
 public:
  ConnectionSlot() = default;
  explicit ConnectionSlot(std::size_t& count) : count_(&count) { ++count; }
  ConnectionSlot(ConnectionSlot&& other) noexcept : count_(std::exchange(other.count_, nullptr)) {}
  ConnectionSlot& operator=(ConnectionSlot&& other) noexcept {
    if (this != &other) {
      release();
      count_ = std::exchange(other.count_, nullptr);
    }
    return *this;
  }
  ~ConnectionSlot() { release(); }

 private:
  void release() {
    if (count_) --*count_;
    count_ = nullptr;
  }
  std::size_t* count_ = nullptr;
};

// Runs `run` while `held` (a slot, say) lives: the push stream that a connection turns into
// keeps what the connection counted.
template <class Held>
asio::awaitable<void> run_holding([[maybe_unused]] Held held, asio::awaitable<void> run) {
  co_await std::move(run);
}

// Everything a route needs. Owned by HttpServer. Connections' coroutines refer to it until
// their frames are destroyed, so it must outlive every handler on the io_context: after run()
// was stopped with work left, shut the io_context down before destroying the server (main.cpp).
struct ServerState {
  config::Config config;
  std::shared_ptr<bus::EventBus> bus;
  std::shared_ptr<clienttool::ClientToolRegistry> registry;
  std::shared_ptr<permission::PermissionService> permissions;
  std::shared_ptr<question::QuestionService> questions;
  std::shared_ptr<tool::ToolRegistry> tools;
  std::shared_ptr<session::SessionService> sessions;
  std::shared_ptr<mcp::Manager> mcp;         // the MCP servers (GET /mcp)
  std::shared_ptr<chat::ChatService> chats;  // the AI SDK's chats (/api/chat)
  // Where the server works (GET /path, /project/current, /vcs): the project (found at start-up),
  // the project and data directories, and when the server started (ms since the epoch).
  session::ProjectInfo project;
  std::filesystem::path directory;
  std::filesystem::path data_dir;
  std::int64_t started = 0;
  std::shared_ptr<bus::EventLog> event_log;             // /event's frames; made by its first stream
  std::list<std::weak_ptr<PushChannel>> event_streams;  // open /event and /global/event streams
  // /client-tools/mcp: the MCP sessions of legacy hosts (Mcp-Session-Id -> the version agreed),
  // and their tool calls in flight, which notifications/cancelled ends ("SESSION ID" -> signal).
  struct McpServedSession {
    std::string version;
    std::uint64_t opened = 0;
  };
  std::unordered_map<std::string, McpServedSession> mcp_sessions;
  std::uint64_t mcp_sessions_opened = 0;
  std::unordered_map<std::string, std::shared_ptr<asio::cancellation_signal>> mcp_served_calls;
  // The store (GET /health asks whether it answers) and, when it is PostgreSQL, the lock of the
  // data directory (which a SQLite store holds itself).
  std::shared_ptr<store::Database> database;
  // The session store on it: /health's check is its call, off the loop on PostgreSQL.
  std::shared_ptr<session::SessionStore> store;
  std::shared_ptr<store::FileLock> data_dir_lock;
  // This node of a cluster (cluster.redis); null for a single server.
  std::shared_ptr<cluster::Node> cluster;
  // Its clients' tools, connections and requests shared with the other nodes; null as above.
  std::shared_ptr<cluster::ClientRelay> client_relay;
  // Client tokens (clientTools.clientTokens); null when they are switched off.
  std::shared_ptr<clienttool::ClientCredentials> credentials;
  ConnectionSet connections;
  bool stopping = false;
  // Open TCP connections (HTTP, SSE, WebSocket) and the most accepted at once:
  // server.maxConnections, lowered at start-up to what the open-file limit allows.
  std::size_t open_connections = 0;
  std::size_t connection_limit = 0;
  std::size_t refusing_connections = 0;  // over the limit, being answered 429
  // Open SSE streams and WebSockets per clientID (clientTools.maxConnectionsPerClient); an entry
  // goes when its count reaches zero.
  std::unordered_map<std::string, std::size_t> client_streams;
};

// One of a client's open streams (clientTools.maxConnectionsPerClient), counted while it lives.
// The I/O thread only.
class ClientStreamSlot {
 public:
  ClientStreamSlot(ServerState& state, std::string client_id)
      : state_(state), client_id_(std::move(client_id)) {
    ++state_.client_streams[client_id_];
  }
  ~ClientStreamSlot() {
    auto it = state_.client_streams.find(client_id_);
    if (it != state_.client_streams.end() && --it->second == 0) state_.client_streams.erase(it);
  }
  ClientStreamSlot(const ClientStreamSlot&) = delete;
  ClientStreamSlot& operator=(const ClientStreamSlot&) = delete;

 private:
  ServerState& state_;
  std::string client_id_;
};

// Builds a JSON response. One place maps error codes to statuses: error_response().
Response json_response(http::status status, const boost::json::value& body, const Request& req);
// The same with the body already serialized (replies built without a JSON tree).
Response json_text_response(http::status status, std::string body, const Request& req);
Response error_response(const Error& error, const Request& req);
http::status http_status(ErrorCode code);

// Parses a request body or a WebSocket message: nested at most server.maxJsonDepth deep (a
// deeper one is refused naming the setting).
Result<json::value> parse_request_json(const ServerState& state, std::string_view text,
                                       json::storage_ptr sp = {});

}  // namespace sb::server
