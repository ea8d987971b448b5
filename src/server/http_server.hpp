#pragma once
// The HTTP/SSE/WebSocket server: accepts connections, reads requests (with body, header and
// idle limits), routes them, and shuts down cleanly. All connections run on the io_context it
// is given, one strand each.
#include <memory>

#include "server/http.hpp"

namespace sb::server {

class HttpServer {
 public:
  // `state` holds the core components, built by app/compose. Destroy the server after the
  // io_context's pending handlers (see ServerState).
  HttpServer(asio::io_context& io, std::unique_ptr<ServerState> state);
  ~HttpServer();

  // Binds server.hostname:server.port (port 0 picks a free one) and starts accepting.
  Result<tcp::endpoint> start();

  // Stops accepting, fails pending client-tool calls ("Server shutting down"), closes push
  // connections and idle keep-alive connections; requests in progress finish. Idempotent.
  void shutdown();

  // Calls `done` once shutdown has begun and every connection has ended (at once if none is
  // left). The caller uses it to stop waiting for signals so that io_context::run() returns.
  void when_drained(std::function<void()> done);

  ServerState& state() { return *state_; }

 private:
  asio::awaitable<void> accept_loop();

  asio::io_context& io_;
  std::unique_ptr<ServerState> state_;
  tcp::acceptor acceptor_;
};

}  // namespace sb::server
