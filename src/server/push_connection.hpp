#pragma once
// The push connections under the streams of push.cpp: an SSE stream (HTTP chunks) and a
// WebSocket, both PushChannels (push.hpp) with the server's queue limit, keepalive and write
// timeout, registered for shutdown while they run (TrackedPush). Internal to src/server.
#include <boost/beast/websocket.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "server/access.hpp"
#include "server/push.hpp"
#include "util/log.hpp"

namespace sb::server {

namespace websocket = beast::websocket;
using Clock = std::chrono::steady_clock;
inline constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

inline std::chrono::milliseconds write_timeout(const ServerState& state) {
  return std::max(std::chrono::milliseconds(10000),
                  state.config.client_tools.keepalive_interval * 2);
}

// Registers a push connection for shutdown (which closes its channel) and removes it when the
// scope ends.
class TrackedPush {
 public:
  TrackedPush(ServerState& state, const std::shared_ptr<PushChannel>& channel)
      : state_(state), handle_(state.connections.add(channel)) {
    if (state.stopping) channel->close("server shutting down");
  }
  ~TrackedPush() { state_.connections.remove(handle_); }
  TrackedPush(const TrackedPush&) = delete;
  TrackedPush& operator=(const TrackedPush&) = delete;

 private:
  ServerState& state_;
  ConnectionSet::Handle handle_;
};

// ---- SSE ------------------------------------------------------------------------------------

// An SSE stream: frames go out as HTTP chunks. One timer per stream sends the keepalive frame
// every interval and notices a write that has hung for longer than the write timeout (a peer
// that stopped reading): the stream is then dropped, between one and two intervals late.
class SseConnection final : public PushChannel {
 public:
  SseConnection(tcp::socket socket, std::size_t limit, std::chrono::milliseconds interval,
                std::chrono::milliseconds write_timeout,
                std::shared_ptr<const std::string> keepalive)
      : PushChannel(socket.get_executor(), limit),
        socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        interval_(interval),
        write_timeout_(write_timeout),
        keepalive_(std::move(keepalive)) {}

  tcp::socket& socket() { return socket_; }

  // Writes the response head, then lets frames go out. False when the peer is gone.
  // `issued_token`, when not empty, goes out in the X-Switchboard-Client-Token header.
  // `ui_message_stream`: the AI SDK's UI message stream, which says so in a header of its own.
  asio::awaitable<bool> write_head(const ServerState& state, const Request& req,
                                   const std::string& issued_token,
                                   bool ui_message_stream = false) {
    http::response<http::empty_body> res{http::status::ok, req.version()};
    add_cors_headers(state, req, res);
    if (!issued_token.empty()) res.set(kClientTokenHeader, issued_token);
    if (ui_message_stream) res.set("x-vercel-ai-ui-message-stream", "v1");
    res.set(http::field::content_type, "text/event-stream");
    res.set(http::field::cache_control, "no-cache");
    // The stream owns the socket and closes it when it ends: a client told "keep-alive" would put
    // the socket back in its pool and could send its next request on it as the close arrives
    // (undici's "fetch failed" after a chat's answer).
    res.keep_alive(false);
    res.set("X-Accel-Buffering", "no");
    res.chunked(true);
    http::response_serializer<http::empty_body> sr{res};
    write_started_ = Clock::now();
    in_head_ = true;
    arm(std::min(interval_, std::chrono::milliseconds(10000)));
    auto [ec, n] = co_await http::async_write_header(socket_, sr, tuple_awaitable);
    in_head_ = false;
    if (ec) co_return false;
    arm(interval_);
    start();
    co_return true;
  }

 private:
  void start_write(std::shared_ptr<const std::string> frame) override {
    write_started_ = Clock::now();
    // One HTTP chunk: the size in hex, the frame, CRLF.
    asio::async_write(socket_, http::make_chunk(asio::buffer(*frame)),
                      [self = shared_from_this(), this, frame](boost::system::error_code ec,
                                                               std::size_t) { write_done(!ec); });
  }

  // Frames that queued while a write was in flight go out as one chunk: one system call, and a
  // stream that fell behind (a busy loop, a slow peer) catches up at once rather than a frame a
  // round of the loop, behind the answers written meanwhile.
  std::size_t batch_limit() const override { return 256; }
  void start_write_batch(std::vector<std::shared_ptr<const std::string>> frames) override {
    write_started_ = Clock::now();
    std::vector<asio::const_buffer> buffers;
    buffers.reserve(frames.size());
    for (const auto& f : frames)
      buffers.push_back(asio::buffer(*f));
    asio::async_write(socket_, http::make_chunk(buffers),
                      [self = shared_from_this(), this, frames = std::move(frames)](
                          boost::system::error_code ec, std::size_t) { write_done(!ec); });
  }

  void start_end() override {
    write_started_ = Clock::now();
    arm(std::chrono::seconds(2));  // the end of the stream gets two seconds, then the socket closes
    asio::async_write(socket_, http::make_chunk_last(),
                      [self = shared_from_this(), this](boost::system::error_code, std::size_t) {
                        disconnect();
                      });
  }

  void close_socket() override {
    boost::system::error_code ignored;
    timer_.cancel();
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  void arm(std::chrono::milliseconds after) {
    // A wait that had already completed when disconnect() cancelled the timer still runs its
    // handler: it must not start another wait, which would keep the connection alive forever.
    if (disconnected()) return;
    timer_.expires_after(after);
    timer_.async_wait([self = shared_from_this(), this](boost::system::error_code ec) {
      if (!ec) on_timer();
    });
  }

  void on_timer() {
    if (in_head_ || ending() || (writing() && Clock::now() - write_started_ >= write_timeout_)) {
      log::warn("dropping an SSE subscriber whose write did not finish in time");
      return disconnect();
    }
    post(keepalive_);
    arm(interval_);
  }

  tcp::socket socket_;
  asio::steady_timer timer_;
  std::chrono::milliseconds interval_;
  std::chrono::milliseconds write_timeout_;
  std::shared_ptr<const std::string> keepalive_;
  Clock::time_point write_started_{};
  bool in_head_ = false;
};

// An SSE stream with the server's queue limit, keepalive interval and write timeout; `keepalive`
// is the frame it sends when idle.
inline std::shared_ptr<SseConnection> make_sse(const ServerState& state, tcp::socket socket,
                                               std::shared_ptr<const std::string> keepalive) {
  return std::make_shared<SseConnection>(
      std::move(socket), state.config.server.subscriber_queue_limit,
      state.config.client_tools.keepalive_interval, write_timeout(state), std::move(keepalive));
}

// An SSE comment: the keepalive of the streams whose events are all data.
inline const std::shared_ptr<const std::string>& comment_keepalive() {
  static const auto frame = std::make_shared<const std::string>(":\n\n");
  return frame;
}

// Completes when the peer closes (or resets) the connection, or disconnect() closes the socket.
// Bytes a client sends on an SSE stream are ignored. Waits for readability rather than reading,
// so that an idle stream holds no read buffer.
asio::awaitable<void> wait_until_closed(tcp::socket& socket);

// The WebSocket over the plain socket: Beast's own timeouts (handshake, idle with pings) need no
// basic_stream, and moving a basic_stream would allocate a second implementation.
using WsStream = websocket::stream<tcp::socket>;

class WsConnection final : public PushChannel {
 public:
  WsConnection(tcp::socket socket, std::size_t limit)
      : PushChannel(socket.get_executor(), limit), ws_(std::move(socket)) {}

  WsStream& ws() { return ws_; }

  // Ends the connection with `code` and `reason` in the close frame, after the queued frames.
  void close_with(websocket::close_code code, std::string reason) {
    if (closed()) return;
    code_ = code;
    close(std::move(reason));
  }

 private:
  void start_write(std::shared_ptr<const std::string> frame) override {
    ws_.text(true);
    ws_.async_write(asio::buffer(*frame),
                    [self = shared_from_this(), this, frame](boost::system::error_code ec,
                                                             std::size_t) { write_done(!ec); });
  }

  void start_end() override {
    websocket::close_reason reason(code_.value_or(websocket::close_code::going_away));
    if (!code_ && close_reason().starts_with("superseded"))
      reason.code = websocket::close_code::normal;
    reason.reason = close_reason().substr(0, 120);
    ws_.async_close(reason,
                    [self = shared_from_this(), this](boost::system::error_code) { disconnect(); });
  }

  void close_socket() override {
    boost::system::error_code ignored;
    ws_.next_layer().shutdown(tcp::socket::shutdown_both, ignored);
    ws_.next_layer().close(ignored);
  }

  WsStream ws_;
  std::optional<websocket::close_code> code_;
};

// A WebSocket before its handshake, with the server's timeouts (keep-alive pings at the
// keepalive interval). Its read loop enforces server.maxWebSocketMessageBytes itself: Beast's own
// limit would end the connection with code 1009 and no word of why.
inline std::shared_ptr<WsConnection> make_websocket(const ServerState& state, tcp::socket socket,
                                                    std::size_t min_queue = 0) {
  auto conn = std::make_shared<WsConnection>(
      std::move(socket),
      std::max<std::size_t>(state.config.server.subscriber_queue_limit, min_queue));
  websocket::stream_base::timeout timeouts;
  timeouts.handshake_timeout = std::chrono::seconds(30);
  timeouts.idle_timeout = state.config.client_tools.keepalive_interval;
  timeouts.keep_alive_pings = true;
  conn->ws().set_option(timeouts);
  conn->ws().read_message_max(0);
  return conn;
}

// Reads the peer's messages until the socket ends: each whole text message goes to `on_text`. A
// binary message is refused (`refuse` gets an InvalidRequest). One over
// server.maxWebSocketMessageBytes ends the connection: the peer hears why (`refuse` gets a
// TooLarge, then the close frame with code 1009, "message too big", and the reason), and the rest
// of what it sends is read and dropped until the close handshake ends (or its timeout does).
// `who` names the peer in the log.
using TextHandler = std::function<asio::awaitable<void>(std::string text)>;
using Refuse = std::function<void(const Error& why)>;
asio::awaitable<void> read_messages(WsConnection& conn, std::size_t max_message, std::string who,
                                    TextHandler on_text, Refuse refuse);

}  // namespace sb::server
