#pragma once
// Push connections: the client-tool SSE stream, the /event SSE stream and the client-tool
// WebSocket. Each runs a reader and a writer on the connection's executor, with a bounded
// outbound queue and at most one write in flight; a subscriber that falls behind is dropped.
#include <boost/asio/awaitable.hpp>

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "server/http.hpp"

namespace sb::server {

// The outbound side of one push connection. post()/close() from any thread; next() on the
// connection's executor only.
class PushChannel : public std::enable_shared_from_this<PushChannel> {
 public:
  PushChannel(asio::any_io_executor executor, std::size_t limit);

  // Queues a frame. When the queue is full the connection is closed as too slow.
  void post(std::shared_ptr<const std::string> frame);
  // The writer finishes the frame in flight, then ends; later posts are dropped.
  void close(std::string reason);
  // The next frame, or nullptr once closed.
  asio::awaitable<std::shared_ptr<const std::string>> next();

  bool closed() const { return closed_; }
  // Called on the executor when the queue overflows: closes the socket at once, because the
  // write in flight may never finish for a peer that stopped reading.
  std::function<void()> on_overflow;
  const std::string& close_reason() const { return reason_; }
  asio::any_io_executor executor() const { return executor_; }

 private:
  void push_here(std::shared_ptr<const std::string> frame);
  void close_here(std::string reason);

  asio::any_io_executor executor_;
  std::size_t limit_;
  std::deque<std::shared_ptr<const std::string>> queue_;
  asio::steady_timer wake_;
  bool closed_ = false;
  std::string reason_;
};

// GET /client-tools/pending/{clientID}: attaches the client and streams its requests.
// `issued_token`, when not empty, is the client token this first use issued: it goes out in the
// X-Switchboard-Client-Token response header.
asio::awaitable<void> run_client_sse(ServerState& state, beast::tcp_stream& stream,
                                     const Request& req, std::string client_id,
                                     std::uint64_t last_event_id, std::string issued_token);

// GET /event: every bus event.
asio::awaitable<void> run_event_sse(ServerState& state, beast::tcp_stream& stream,
                                    const Request& req);

// GET /client-tools/ws/{clientID}: takes the stream over for a WebSocket session.
// `issued_token`, when not empty, is sent first: {"type": "credentials", clientID, clientToken}.
asio::awaitable<void> run_client_websocket(ServerState& state, beast::tcp_stream stream,
                                           Request req, std::string client_id,
                                           std::string issued_token);

// The connection-tracking entry of a push connection: shutdown closes its channel.
class PushStopper : public Stoppable {
 public:
  explicit PushStopper(std::shared_ptr<PushChannel> channel) : channel_(std::move(channel)) {}
  void stop() override { channel_->close("server shutting down"); }

 private:
  std::shared_ptr<PushChannel> channel_;
};

}  // namespace sb::server
