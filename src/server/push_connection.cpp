#include "server/push_connection.hpp"

#include <sys/socket.h>

#include <cerrno>

#include "util/log.hpp"

namespace sb::server {

// ---- PushChannel ----------------------------------------------------------------------------

PushChannel::PushChannel(asio::any_io_executor executor, std::size_t limit)
    : executor_(std::move(executor)), limit_(limit) {}

void PushChannel::post(std::shared_ptr<const std::string> frame) {
  asio::dispatch(executor_, [self = shared_from_this(), frame = std::move(frame)]() mutable {
    self->push_here(std::move(frame));
  });
}

void PushChannel::close(std::string reason) {
  asio::dispatch(executor_, [self = shared_from_this(), reason = std::move(reason)]() mutable {
    self->close_here(std::move(reason));
  });
}

void PushChannel::push_here(std::shared_ptr<const std::string> frame) {
  if (closed_ || disconnected_) return;
  if (queue_.size() - head_ >= limit_) {
    // The subscriber cannot keep up. Dropping it (it may reconnect and replay) is the only
    // choice that never stalls the publisher or grows memory without bound. The socket closes
    // at once, because the write in flight may never finish for a peer that stopped reading.
    log::warn("dropping a subscriber that fell ", limit_, " frames behind");
    closed_ = true;
    reason_ = "subscriber too slow";
    disconnect();
    return;
  }
  queue_.push_back(std::move(frame));
  pump();
}

void PushChannel::close_here(std::string reason) {
  if (closed_) return;
  closed_ = true;
  reason_ = std::move(reason);
  pump();
}

void PushChannel::start() {
  started_ = true;
  pump();
}

void PushChannel::pump() {
  if (!started_ || writing_ || ending_ || disconnected_) return;
  if (head_ < queue_.size()) {
    std::size_t n = std::min(queue_.size() - head_, batch_limit());
    std::shared_ptr<const std::string> frame;
    std::vector<std::shared_ptr<const std::string>> batch;
    if (n == 1) {
      frame = std::move(queue_[head_++]);
    } else {
      batch.reserve(n);
      for (std::size_t i = 0; i < n; ++i)
        batch.push_back(std::move(queue_[head_++]));
    }
    if (head_ == queue_.size()) {
      head_ = 0;
      // Keep the vector for the next burst, unless a burst made it large.
      if (queue_.capacity() > 64)
        queue_ = {};
      else
        queue_.clear();
    } else if (head_ >= 64 && head_ * 2 >= queue_.size()) {
      // A queue that never quite drains: drop the written slots in front.
      queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
    }
    writing_ = true;
    if (frame)
      start_write(std::move(frame));
    else
      start_write_batch(std::move(batch));
  } else if (closed_) {
    ending_ = true;
    start_end();
  }
}

void PushChannel::write_done(bool ok) {
  writing_ = false;
  if (!ok) return disconnect();
  pump();
}

void PushChannel::disconnect() {
  if (disconnected_) return;
  disconnected_ = true;
  queue_ = {};
  head_ = 0;
  close_socket();
}

namespace {

// Reads and drops what the peer sent. False once the peer has closed or reset the connection.
bool drain(tcp::socket& socket) {
  char scratch[512];
  ssize_t n = ::recv(socket.native_handle(), scratch, sizeof scratch, MSG_DONTWAIT);
  if (n == 0) return false;
  return n > 0 || errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

}  // namespace

asio::awaitable<void> wait_until_closed(tcp::socket& socket) {
  for (;;) {
    auto [ec] = co_await socket.async_wait(tcp::socket::wait_read, tuple_awaitable);
    if (ec || !socket.is_open() || !drain(socket)) co_return;
  }
}

asio::awaitable<void> read_messages(WsConnection& conn, std::size_t max_message, std::string who,
                                    TextHandler on_text, Refuse refuse) {
  WsStream& ws = conn.ws();
  beast::flat_buffer buffer;
  for (;;) {
    // A message arrives in pieces of at most what the limit leaves (a frame may announce any
    // length), so that the buffer never grows past one byte over it.
    auto [ec, n] =
        co_await ws.async_read_some(buffer, max_message + 1 - buffer.size(), tuple_awaitable);
    if (ec) co_return;
    if (buffer.size() > max_message) break;
    if (!ws.is_message_done()) continue;
    if (!ws.got_text()) {
      refuse(
          make_error(ErrorCode::InvalidRequest, "binary frames are not accepted; send JSON text"));
    } else {
      auto data = buffer.cdata();
      co_await on_text(std::string(static_cast<const char*>(data.data()), data.size()));
    }
    // An idle connection keeps no read buffer: the next message gets a fresh one.
    buffer = beast::flat_buffer();
  }
  log::warn(who, " sent a WebSocket message over ", max_message,
            " bytes (server.maxWebSocketMessageBytes): closing it");
  std::string why =
      "message over " + std::to_string(max_message) + " bytes (server.maxWebSocketMessageBytes)";
  refuse(make_error(ErrorCode::TooLarge, "WebSocket " + why + "; the connection closes"));
  conn.close_with(websocket::close_code::too_big, why);
  beast::flat_buffer discard;
  for (;;) {
    auto [ec, n] = co_await ws.async_read_some(discard, 65536, tuple_awaitable);
    if (ec) break;
    discard.clear();
  }
}

}  // namespace sb::server
