#include "server/push.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/beast/websocket.hpp>

#include "clienttool/wire.hpp"
#include "server/access.hpp"
#include "util/log.hpp"

namespace sb::server {

namespace websocket = beast::websocket;
using namespace asio::experimental::awaitable_operators;
using asio::use_awaitable;
constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

// ---- PushChannel ----------------------------------------------------------------------------

PushChannel::PushChannel(asio::any_io_executor executor, std::size_t limit)
    : executor_(std::move(executor)), limit_(limit), wake_(executor_) {}

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
  if (closed_) return;
  if (queue_.size() >= limit_) {
    // The subscriber cannot keep up. Dropping it (it may reconnect and replay) is the only
    // choice that never stalls the publisher or grows memory without bound.
    log::warn("dropping a subscriber that fell ", limit_, " frames behind");
    queue_.clear();
    close_here("subscriber too slow");
    if (on_overflow) on_overflow();
    return;
  }
  queue_.push_back(std::move(frame));
  wake_.cancel();
}

void PushChannel::close_here(std::string reason) {
  if (closed_) return;
  closed_ = true;
  reason_ = std::move(reason);
  wake_.cancel();
}

asio::awaitable<std::shared_ptr<const std::string>> PushChannel::next() {
  co_await asio::this_coro::throw_if_cancelled(false);
  while (queue_.empty() && !closed_) {
    wake_.expires_at(asio::steady_timer::time_point::max());
    co_await wake_.async_wait(tuple_awaitable);
    auto cs = co_await asio::this_coro::cancellation_state;
    if (cs.cancelled() != asio::cancellation_type::none) co_return nullptr;
  }
  if (queue_.empty()) co_return nullptr;
  auto frame = std::move(queue_.front());
  queue_.pop_front();
  co_return frame;
}

namespace {

std::chrono::milliseconds write_timeout(const ServerState& state) {
  return std::max(std::chrono::milliseconds(10000),
                  state.config.client_tools.keepalive_interval * 2);
}

// Completes when the peer closes (or resets) the connection. Bytes a client sends on an SSE
// stream are ignored.
asio::awaitable<void> read_until_closed(tcp::socket& socket) {
  co_await asio::this_coro::throw_if_cancelled(false);
  std::array<char, 512> scratch;
  for (;;) {
    auto [ec, n] = co_await socket.async_read_some(asio::buffer(scratch), tuple_awaitable);
    if (ec) co_return;
  }
}

// Writes frames as HTTP chunks until the channel closes.
asio::awaitable<void> write_sse_frames(beast::tcp_stream& stream, PushChannel& channel,
                                       std::chrono::milliseconds timeout) {
  co_await asio::this_coro::throw_if_cancelled(false);
  for (;;) {
    auto frame = co_await channel.next();
    if (!frame && !channel.closed()) co_return;  // cancelled: the peer went away
    if (!frame) break;
    stream.expires_after(timeout);
    auto [ec, n] =
        co_await asio::async_write(stream, http::make_chunk(asio::buffer(*frame)), tuple_awaitable);
    if (ec) co_return;
  }
  stream.expires_after(std::chrono::seconds(2));
  co_await asio::async_write(stream, http::make_chunk_last(), tuple_awaitable);
}

asio::awaitable<void> keepalive(PushChannel& channel, std::chrono::milliseconds interval,
                                std::shared_ptr<const std::string> frame) {
  co_await asio::this_coro::throw_if_cancelled(false);
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (;;) {
    timer.expires_after(interval);
    auto [ec] = co_await timer.async_wait(tuple_awaitable);
    if (ec) co_return;
    channel.post(frame);
  }
}

// Writes the SSE response head. Chunked, so that proxies and HTTP/1.1 clients see a well-formed
// stream that can end cleanly.
asio::awaitable<bool> write_sse_head(const ServerState& state, beast::tcp_stream& stream,
                                     const Request& req, const std::string& issued_token) {
  http::response<http::empty_body> res{http::status::ok, req.version()};
  add_cors_headers(state, req, res);
  if (!issued_token.empty()) res.set(kClientTokenHeader, issued_token);
  res.set(http::field::content_type, "text/event-stream");
  res.set(http::field::cache_control, "no-cache");
  res.set(http::field::connection, "keep-alive");
  res.set("X-Accel-Buffering", "no");
  res.chunked(true);
  http::response_serializer<http::empty_body> sr{res};
  stream.expires_after(std::chrono::seconds(10));
  auto [ec, n] = co_await http::async_write_header(stream, sr, tuple_awaitable);
  co_return !ec;
}

std::string sse_frame_for(const clienttool::ClientMessage& m) {
  if (m.kind == clienttool::ClientMessage::Kind::Request)
    return "id: " + std::to_string(m.seq) + "\nevent: tool-request\ndata: " + m.request_json +
           "\n\n";
  return "event: tool-cancel\ndata: " +
         json::serialize(json::object{{"requestID", m.request_id}, {"reason", m.reason}}) + "\n\n";
}

std::string ws_frame_for(const clienttool::ClientMessage& m) {
  if (m.kind == clienttool::ClientMessage::Kind::Request)
    return "{\"type\":\"request\",\"request\":" + m.request_json + "}";
  return json::serialize(
      json::object{{"type", "cancel"}, {"requestID", m.request_id}, {"reason", m.reason}});
}

// A client's connection as the registry sees it; formats each message for its transport.
class ChannelSink : public clienttool::ClientSink {
 public:
  using Format = std::string (*)(const clienttool::ClientMessage&);
  ChannelSink(std::shared_ptr<PushChannel> channel, Format format)
      : channel_(std::move(channel)), format_(format) {}
  void deliver(std::shared_ptr<const clienttool::ClientMessage> message) override {
    channel_->post(std::make_shared<const std::string>(format_(*message)));
  }
  void close(const std::string& reason) override { channel_->close(reason); }

 private:
  std::shared_ptr<PushChannel> channel_;
  Format format_;
};

// Registers a push connection for shutdown and removes it when the scope ends.
class TrackedPush {
 public:
  TrackedPush(ServerState& state, const std::shared_ptr<PushChannel>& channel)
      : state_(state),
        stopper_(std::make_shared<PushStopper>(channel)),
        handle_(state.connections.add(stopper_)) {
    if (state.stopping) channel->close("server shutting down");
  }
  ~TrackedPush() { state_.connections.remove(handle_); }
  TrackedPush(const TrackedPush&) = delete;
  TrackedPush& operator=(const TrackedPush&) = delete;

 private:
  ServerState& state_;
  std::shared_ptr<PushStopper> stopper_;
  ConnectionSet::Handle handle_;
};

}  // namespace

// ---- SSE ------------------------------------------------------------------------------------

asio::awaitable<void> run_client_sse(ServerState& state, beast::tcp_stream& stream,
                                     const Request& req, std::string client_id,
                                     std::uint64_t last_event_id, std::string issued_token) {
  auto executor = co_await asio::this_coro::executor;
  auto channel =
      std::make_shared<PushChannel>(executor, state.config.server.subscriber_queue_limit);
  channel->on_overflow = [&stream] {
    boost::system::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream.socket().close(ignored);
  };
  TrackedPush tracked(state, channel);
  // Attach before the head goes out: once a client sees the 200, its requests reach it.
  auto sink = std::make_shared<ChannelSink>(channel, &sse_frame_for);
  std::uint64_t connection = state.registry->attach(client_id, sink, last_event_id, "sse");
  log::debug("client ", client_id, " connected over SSE");
  if (co_await write_sse_head(state, stream, req, issued_token)) {
    static const auto ping = std::make_shared<const std::string>("event: ping\ndata: \n\n");
    co_await (read_until_closed(stream.socket()) ||
              write_sse_frames(stream, *channel, write_timeout(state)) ||
              keepalive(*channel, state.config.client_tools.keepalive_interval, ping));
  }
  channel->on_overflow = nullptr;
  state.registry->detach(client_id, connection);
  log::debug("client ", client_id,
             " SSE stream ended: ", channel->closed() ? channel->close_reason() : "peer closed");
}

asio::awaitable<void> run_event_sse(ServerState& state, beast::tcp_stream& stream,
                                    const Request& req) {
  auto executor = co_await asio::this_coro::executor;
  auto channel =
      std::make_shared<PushChannel>(executor, state.config.server.subscriber_queue_limit);
  channel->on_overflow = [&stream] {
    boost::system::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream.socket().close(ignored);
  };
  TrackedPush tracked(state, channel);
  channel->post(std::make_shared<const std::string>(
      "data: {\"type\":\"server.connected\",\"properties\":{}}\n\n"));
  auto subscription = state.bus->subscribe(
      [weak = std::weak_ptr<PushChannel>(channel)](const bus::EventPtr& event) {
        if (auto ch = weak.lock())
          ch->post(std::make_shared<const std::string>("data: " + event->frame + "\n\n"));
      });
  const std::string no_token;
  if (co_await write_sse_head(state, stream, req, no_token)) {
    static const auto heartbeat = std::make_shared<const std::string>(
        "data: {\"type\":\"server.heartbeat\",\"properties\":{}}\n\n");
    co_await (read_until_closed(stream.socket()) ||
              write_sse_frames(stream, *channel, write_timeout(state)) ||
              keepalive(*channel, state.config.client_tools.keepalive_interval, heartbeat));
  }
  channel->on_overflow = nullptr;
}

// ---- WebSocket ------------------------------------------------------------------------------

namespace {

using WsStream = websocket::stream<beast::tcp_stream>;

std::shared_ptr<const std::string> ws_error(const Error& e, const std::string& request_id = {}) {
  json::object msg{{"type", "error"}, {"error", e.message}, {"code", error_code_name(e.code)}};
  if (!request_id.empty()) msg["requestID"] = request_id;
  return std::make_shared<const std::string>(json::serialize(msg));
}

// Handles one client -> server message; replies go through the channel (the one writer).
void handle_ws_message(ServerState& state, const std::string& client_id, PushChannel& channel,
                       std::string_view text) {
  auto doc = parse_json(text);
  if (!doc) return channel.post(ws_error(doc.error()));
  if (!doc->is_object())
    return channel.post(
        ws_error(make_error(ErrorCode::InvalidRequest, "a message must be a JSON object, got " +
                                                           std::string(kind_name(*doc)))));
  const json::object& msg = doc->get_object();
  auto type = get_string(msg, "type");
  if (!type) return channel.post(ws_error(type.error()));
  if (!*type)
    return channel.post(ws_error(make_error(ErrorCode::InvalidRequest, "type is required")));

  if (**type == "register") {
    auto it = msg.find("tools");
    auto specs = clienttool::parse_tool_specs(it == msg.end() ? nullptr : &it->value(), "tools");
    if (!specs) return channel.post(ws_error(specs.error()));
    auto session_id = get_string(msg, "sessionID");
    if (!session_id) return channel.post(ws_error(session_id.error()));
    if (*session_id)
      if (auto own = state.sessions->validate_client_session(client_id, **session_id); !own)
        return channel.post(ws_error(own.error()));
    if (auto r = check_registration_limits(state, client_id, *specs); !r)
      return channel.post(ws_error(r.error()));
    auto ids =
        state.registry->register_tools(client_id, std::move(*specs), session_id->value_or(""));
    if (!ids) return channel.post(ws_error(ids.error()));
    return channel.post(std::make_shared<const std::string>(json::serialize(
        json::object{{"type", "registered"}, {"toolIDs", clienttool::to_json(*ids)}})));
  }
  if (**type == "unregister") {
    auto ids = clienttool::parse_string_list(msg, "toolIDs");
    if (!ids) return channel.post(ws_error(ids.error()));
    auto removed = state.registry->unregister(client_id, *ids);
    return channel.post(std::make_shared<const std::string>(json::serialize(
        json::object{{"type", "unregistered"}, {"toolIDs", clienttool::to_json(removed)}})));
  }
  if (**type == "result" || **type == "progress") {
    auto request_id = require_string(msg, "requestID");
    if (!request_id) return channel.post(ws_error(request_id.error()));
    if (**type == "result") {
      auto response = clienttool::parse_tool_response(msg);
      if (!response) return channel.post(ws_error(response.error(), *request_id));
      auto r = state.registry->submit_result(*request_id, client_id, std::move(*response));
      if (!r) channel.post(ws_error(r.error(), *request_id));
      return;
    }
    auto metadata = get_object(msg, "metadata");
    if (!metadata) return channel.post(ws_error(metadata.error(), *request_id));
    auto title = get_string(msg, "title");
    if (!title) return channel.post(ws_error(title.error(), *request_id));
    clienttool::Progress progress{*metadata ? **metadata : json::object{}, *title};
    auto r = state.registry->report_progress(*request_id, client_id, std::move(progress));
    if (!r) channel.post(ws_error(r.error(), *request_id));
    return;
  }
  channel.post(ws_error(make_error(ErrorCode::InvalidRequest,
                                   "unknown message type \"" + **type +
                                       "\" (expected register, unregister, result or progress)")));
}

asio::awaitable<void> ws_reader(ServerState& state, WsStream& ws, const std::string& client_id,
                                PushChannel& channel) {
  co_await asio::this_coro::throw_if_cancelled(false);
  beast::flat_buffer buffer;
  for (;;) {
    auto [ec, n] = co_await ws.async_read(buffer, tuple_awaitable);
    if (ec) {
      if (ec == websocket::error::message_too_big)
        log::warn("client ", client_id, " sent a WebSocket message over the size limit");
      co_return;
    }
    if (!ws.got_text()) {
      channel.post(ws_error(
          make_error(ErrorCode::InvalidRequest, "binary frames are not accepted; send JSON text")));
    } else {
      auto data = buffer.cdata();
      handle_ws_message(state, client_id, channel,
                        std::string_view(static_cast<const char*>(data.data()), data.size()));
    }
    buffer.consume(buffer.size());
    // Keep an idle connection small: a large message must not pin its buffer forever.
    if (buffer.capacity() > 64 * 1024) buffer = beast::flat_buffer();
  }
}

asio::awaitable<void> ws_writer(WsStream& ws, PushChannel& channel) {
  co_await asio::this_coro::throw_if_cancelled(false);
  for (;;) {
    auto frame = co_await channel.next();
    if (!frame && !channel.closed()) co_return;  // cancelled: the peer went away
    if (!frame) break;
    ws.text(true);
    auto [ec, n] = co_await ws.async_write(asio::buffer(*frame), tuple_awaitable);
    if (ec) co_return;
  }
  websocket::close_reason reason(websocket::close_code::going_away);
  if (channel.close_reason() == "subscriber too slow")
    reason.code = websocket::close_code::policy_error;
  else if (channel.close_reason().starts_with("superseded"))
    reason.code = websocket::close_code::normal;
  reason.reason = channel.close_reason().substr(0, 120);
  co_await ws.async_close(reason, tuple_awaitable);
}

}  // namespace

asio::awaitable<void> run_client_websocket(ServerState& state, beast::tcp_stream stream,
                                           Request req, std::string client_id,
                                           std::string issued_token) {
  WsStream ws(std::move(stream));
  beast::get_lowest_layer(ws).expires_never();
  websocket::stream_base::timeout timeouts;
  timeouts.handshake_timeout = std::chrono::seconds(30);
  timeouts.idle_timeout = state.config.client_tools.keepalive_interval;
  timeouts.keep_alive_pings = true;
  ws.set_option(timeouts);
  ws.read_message_max(state.config.server.max_body_bytes);
  ws.set_option(websocket::stream_base::decorator([issued_token](websocket::response_type& res) {
    res.set(http::field::server, "switchboard/" SWITCHBOARD_VERSION);
    // For clients that can read the handshake's headers; browsers get the first message.
    if (!issued_token.empty()) res.set(kClientTokenHeader, issued_token);
  }));
  auto [ec] = co_await ws.async_accept(req, tuple_awaitable);
  if (ec) co_return;

  auto executor = co_await asio::this_coro::executor;
  auto channel =
      std::make_shared<PushChannel>(executor, state.config.server.subscriber_queue_limit);
  channel->on_overflow = [&ws] {
    boost::system::error_code ignored;
    beast::get_lowest_layer(ws).socket().shutdown(tcp::socket::shutdown_both, ignored);
    beast::get_lowest_layer(ws).socket().close(ignored);
  };
  TrackedPush tracked(state, channel);
  if (!issued_token.empty())  // first in the queue: before any request the client must answer
    channel->post(std::make_shared<const std::string>(json::serialize(json::object{
        {"type", "credentials"}, {"clientID", client_id}, {"clientToken", issued_token}})));
  auto sink = std::make_shared<ChannelSink>(channel, &ws_frame_for);
  // A WebSocket client that reconnects gets every still-pending request again.
  std::uint64_t connection = state.registry->attach(client_id, sink, 0, "websocket");
  log::debug("client ", client_id, " connected over WebSocket");
  co_await (ws_reader(state, ws, client_id, *channel) || ws_writer(ws, *channel));
  channel->on_overflow = nullptr;
  state.registry->detach(client_id, connection);
  log::debug("client ", client_id,
             " WebSocket ended: ", channel->closed() ? channel->close_reason() : "peer closed");
}

}  // namespace sb::server
