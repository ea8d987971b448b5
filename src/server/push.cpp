#include "server/push.hpp"

#include "server/api_doc.hpp"
#include "server/cluster_asks.hpp"

#include <optional>

#include "chat/service.hpp"
#include "clienttool/wire.hpp"
#include "server/access.hpp"
#include "server/decode.hpp"
#include "server/push_connection.hpp"
#include "util/log.hpp"

namespace sb::server {

namespace {

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
  // `check_as`: under $SWITCHBOARD_CHECK_API_DOC, the GET /doc schema each frame is checked
  // against ("" for none).
  ChannelSink(std::shared_ptr<PushChannel> channel, Format format, std::string_view check_as = {})
      : channel_(std::move(channel)), format_(format), check_as_(check_as) {}
  void deliver(std::shared_ptr<const clienttool::ClientMessage> message) override {
    auto frame = std::make_shared<const std::string>(format_(*message));
    if (!check_as_.empty()) check_stream_frame("GET /client-tools/pending", check_as_, *frame);
    channel_->post(std::move(frame));
  }
  void close(const std::string& reason) override { channel_->close(reason); }

 private:
  std::shared_ptr<PushChannel> channel_;
  Format format_;
  std::string_view check_as_;
};

}  // namespace

asio::awaitable<void> run_client_sse(ServerState& state, tcp::socket socket, Request req,
                                     std::string client_id, std::uint64_t last_event_id,
                                     std::string issued_token) {
  static const auto ping = std::make_shared<const std::string>("event: ping\ndata: \n\n");
  auto conn = make_sse(state, std::move(socket), ping);
  TrackedPush tracked(state, conn);
  // Attach before the head goes out: once a client sees the 200, its requests reach it.
  auto sink = std::make_shared<ChannelSink>(
      conn, &sse_frame_for,
      state.config.server.check_api_doc ? "ClientToolStreamEvent" : std::string_view());
  std::uint64_t connection = state.registry->attach(client_id, sink, last_event_id, "sse");
  sink.reset();
  log::debug("client ", client_id, " connected over SSE");
  bool head_ok = co_await conn->write_head(state, req, issued_token);
  req = Request();
  // The client never saw a token issued for a stream that did not start: take it back, or the
  // clientID would be locked to a token nobody has.
  if (!head_ok && !issued_token.empty() && state.credentials)
    state.credentials->post(
        [client_id](clienttool::ClientCredentials& k) { k.withdraw(client_id); });
  if (head_ok) co_await wait_until_closed(conn->socket());
  conn->disconnect();
  state.registry->detach(client_id, connection);
  log::debug("client ", client_id,
             " SSE stream ended: ", conn->closed() ? conn->close_reason() : "peer closed");
}

namespace {

// What a /global/event frame's data holds before its event: `{"directory": ..., "project": ...,
// "payload":` (OpenCode's GlobalEvent).
std::string global_prefix(const ServerState& state) {
  std::string directory, project = "global";
  if (state.sessions) {
    directory = state.sessions->options().directory.string();
    if (!state.sessions->options().project_id.empty())
      project = state.sessions->options().project_id;
  }
  std::string prefix = "{\"directory\":";
  append_json_string(prefix, directory);
  prefix += ",\"project\":";
  append_json_string(prefix, project);
  prefix += ",\"payload\":";
  return prefix;
}

// The log of /event's frames, made when the first stream opens (so that a server nobody watches
// builds no events).
bus::EventLog& event_log(ServerState& state) {
  if (state.event_log) return *state.event_log;
  bus::EventLog::Options o;
  o.max_events = static_cast<std::size_t>(state.config.server.event_replay_events);
  o.max_bytes = static_cast<std::size_t>(state.config.server.event_replay_bytes);
  o.global_prefix = global_prefix(state);
  state.event_log = bus::EventLog::create(state.bus, std::move(o));
  return *state.event_log;
}

// A frame of this stream's own (server.connected, server.heartbeat): no id, so that a client's
// Last-Event-ID stays the last event's. `prefix`: global_prefix() on /global/event, else "".
std::shared_ptr<const std::string> own_frame(std::string_view prefix, std::string_view type,
                                             std::string_view properties) {
  std::string event =
      "{\"type\":\"" + std::string(type) + "\",\"properties\":" + std::string(properties) + "}";
  return std::make_shared<const std::string>(
      "data: " + (prefix.empty() ? event : std::string(prefix) + event + "}") + "\n\n");
}

// Under $SWITCHBOARD_CHECK_API_DOC: the frame against what GET /doc says of the stream's events.
void check_event_frame(bool global, std::string_view frame) {
  check_stream_frame(global ? "GET /global/event" : "GET /event", global ? "GlobalEvent" : "Event",
                     frame);
}

// Detaches a stream's reader from the log however the stream ends.
struct LogReading {
  std::shared_ptr<bus::EventLog> log;
  std::uint64_t reader = 0;
  ~LogReading() { log->detach(reader); }
};

}  // namespace

asio::awaitable<void> run_event_sse(ServerState& state, tcp::socket socket, Request req,
                                    bool global, std::optional<std::uint64_t> last_event_id) {
  static const auto heartbeat = own_frame({}, "server.heartbeat", "{}");
  const std::string prefix = global ? global_prefix(state) : std::string();
  auto conn_heartbeat = global ? own_frame(prefix, "server.heartbeat", "{}") : heartbeat;
  auto conn = make_sse(state, std::move(socket), conn_heartbeat);
  TrackedPush tracked(state, conn);
  auto listed = state.event_streams.insert(state.event_streams.end(), conn);
  struct Unlist {
    std::list<std::weak_ptr<PushChannel>>& list;
    std::list<std::weak_ptr<PushChannel>>::iterator at;
    ~Unlist() { list.erase(at); }
  } unlist{state.event_streams, listed};
  bus::EventLog& log = event_log(state);
  auto attached = log.attach(
      last_event_id, global ? bus::EventLog::Format::Global : bus::EventLog::Format::Event,
      [weak = std::weak_ptr<PushChannel>(conn), check = state.config.server.check_api_doc,
       global](const bus::EventLog::Frame& frame) {
        if (check) check_event_frame(global, *frame);
        if (auto ch = weak.lock()) ch->post(frame);
      });
  LogReading reading{state.event_log, attached.reader};
  std::string_view resumed = !attached.resumed   ? "{}"
                             : *attached.resumed ? "{\"resumed\":true}"
                                                 : "{\"resumed\":false}";
  auto connected = own_frame(prefix, "server.connected", resumed);
  if (state.config.server.check_api_doc) {
    check_event_frame(global, *connected);
    check_event_frame(global, *conn_heartbeat);
    if (attached.missed) check_event_frame(global, *attached.missed);
  }
  conn->post(std::move(connected));
  // What the client missed, as one frame: a replay longer than the subscriber queue is no sign
  // of a slow reader.
  if (attached.missed) conn->post(std::move(attached.missed));
  const std::string no_token;
  bool head_ok = co_await conn->write_head(state, req, no_token);
  req = Request();
  if (head_ok) co_await wait_until_closed(conn->socket());
  conn->disconnect();
}

asio::awaitable<void> event_streams_caught_up(ServerState& state) {
  auto behind = [&state] {
    for (const auto& weak : state.event_streams)
      if (auto ch = weak.lock(); ch && !ch->flushed()) return true;
    return false;
  };
  // A write in flight completes on a later turn of the loop: yield to it once (the loop runs the
  // completions queued before this continuation), then, for a stream whose reader is slow, wait
  // on a 1 ms timer rather than spin the one I/O thread until the limit.
  if (!behind()) co_return;
  auto until = std::chrono::steady_clock::now() + kCatchUpLimit;
  auto executor = co_await asio::this_coro::executor;
  co_await asio::post(executor, asio::use_awaitable);
  asio::steady_timer tick(executor);
  while (behind() && std::chrono::steady_clock::now() < until) {
    tick.expires_after(std::chrono::milliseconds(1));
    boost::system::error_code ec;
    co_await tick.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

asio::awaitable<void> run_message_stream(ServerState& state, tcp::socket socket, Request req,
                                         MessageStreamBody run) {
  auto conn = make_sse(state, std::move(socket), comment_keepalive());
  TrackedPush tracked(state, conn);
  const std::string no_token;
  bool head_ok = co_await conn->write_head(state, req, no_token);
  req = Request();
  if (!head_ok) {
    conn->disconnect();
    co_return;
  }
  // The peer's leaving, watched beside the body; shared, as the watch may end after it.
  struct Watch {
    asio::cancellation_signal left;
    bool over = false;
  };
  auto watch = std::make_shared<Watch>();
  asio::co_spawn(
      conn->executor(),
      [conn, watch]() -> asio::awaitable<void> {
        co_await wait_until_closed(conn->socket());
        if (!watch->over) watch->left.emit(asio::cancellation_type::terminal);
      },
      asio::detached);
  SendMessage send = [weak = std::weak_ptr<PushChannel>(conn)](std::string json) {
    if (auto ch = weak.lock())
      ch->post(std::make_shared<const std::string>("event: message\ndata: " + json + "\n\n"));
  };
  co_await run(std::move(send), watch->left.slot());
  watch->over = true;
  conn->close("answered");
}

asio::awaitable<void> run_ui_message_stream(ServerState& state, tcp::socket socket, Request req,
                                            std::shared_ptr<chat::ChatResponse> response,
                                            std::function<void()> left) {
  auto conn = make_sse(state, std::move(socket), comment_keepalive());
  TrackedPush tracked(state, conn);
  const std::string no_token;
  bool head_ok = co_await conn->write_head(state, req, no_token, true);
  req = Request();
  // Chunks made in one turn of the loop go out as one frame (a write each was most of a chat
  // turn's system calls), and so does a replay (a resumed answer has more chunks than a
  // subscriber's queue may hold).
  struct Reading {
    bool finished = false;
    bool flush_posted = false;
    std::string batch;
  };
  auto reading = std::make_shared<Reading>();
  auto weak = std::weak_ptr<PushChannel>(conn);
  auto flush = [reading, weak] {
    reading->flush_posted = false;
    if (reading->batch.empty()) return;
    if (auto ch = weak.lock())
      ch->post(std::make_shared<const std::string>(std::exchange(reading->batch, {})));
  };
  std::uint64_t reader = 0;
  if (head_ok) {
    auto executor = conn->executor();
    reader = response->follow(
        0, [reading, weak, flush, executor, check = state.config.server.check_api_doc](
               std::uint64_t, const chat::ChatResponse::Chunk& chunk) {
          if (!chunk) {
            reading->finished = true;
            reading->batch += "data: [DONE]\n\n";
            flush();
            if (auto ch = weak.lock()) ch->close("answered");
            return;
          }
          if (check)
            check_stream_frame("the UI message stream", "UIMessageChunk", "data: " + *chunk);
          reading->batch += "data: ";
          reading->batch += *chunk;
          reading->batch += "\n\n";
          if (!reading->flush_posted) {
            reading->flush_posted = true;
            asio::post(executor, flush);
          }
        });
  }
  if (head_ok) co_await wait_until_closed(conn->socket());
  conn->disconnect();
  if (!reading->finished) {
    response->unfollow(reader);
    if (left) left();
  }
}

// ---- WebSocket ------------------------------------------------------------------------------

namespace {

std::shared_ptr<const std::string> ws_error(const Error& e, const std::string& request_id = {}) {
  json::object msg{{"type", "error"}, {"error", e.message}, {"code", error_code_name(e.code)}};
  if (!request_id.empty()) msg["requestID"] = request_id;
  return std::make_shared<const std::string>(json::serialize(msg));
}

// The requestID of a message that did not decode, when it has one, so that its error names it.
std::string request_id_of(const json::object& msg) {
  auto it = msg.find("requestID");
  return it != msg.end() && it->value().is_string() ? std::string(it->value().get_string())
                                                    : std::string();
}

// A client's answer that this node's registry did not send: in a cluster, the node whose turn
// sent it takes it (cluster_asks.cpp), as for one posted over HTTP.
struct ForwardAnswer {
  std::string op;  // "client.result" | "client.progress"
  json::object body;
  Error missing;  // this node's NotFound, when no node has it
};

// Posts `frame` and forwards nothing: handle_ws_message's own answers.
std::optional<ForwardAnswer> post_nothing(PushChannel& channel,
                                          std::shared_ptr<const std::string> frame) {
  channel.post(std::move(frame));
  return std::nullopt;
}

// The answer as forwarded, when `here` says this node does not know its request.
std::optional<ForwardAnswer> forward_if_unknown(const ServerState& state, const Result<void>& here,
                                                std::string op, const json::object& msg,
                                                const std::string& client_id) {
  if (here || here.error().code != ErrorCode::NotFound || !state.cluster) return std::nullopt;
  json::object body(msg, json::storage_ptr());  // out of the message's buffer
  body["clientID"] = client_id;
  return ForwardAnswer{std::move(op), std::move(body), here.error()};
}

// Handles one client -> server message; replies go through the channel (the one writer). An
// answer for another node is returned, to be forwarded.
asio::awaitable<std::optional<ForwardAnswer>> handle_ws_message(ServerState& state,
                                                                const std::string& client_id,
                                                                PushChannel& channel,
                                                                std::string_view text) {
  // The message is read and dropped here: its document lives in a buffer of this call, and
  // what outlives the call is copied out (into the heap) field by field.
  unsigned char buffer[4096];
  json::monotonic_resource resource(buffer, sizeof buffer);
  auto doc = parse_request_json(state, text, json::storage_ptr(&resource));
  if (!doc) co_return post_nothing(channel, ws_error(doc.error()));
  if (!doc->is_object())
    co_return post_nothing(channel, ws_error(make_error(ErrorCode::InvalidRequest,
                                                        "a message must be a JSON object, got " +
                                                            std::string(kind_name(*doc)))));
  const json::object& msg = doc->get_object();
  auto type = get_string(msg, "type");
  if (!type) co_return post_nothing(channel, ws_error(type.error()));
  if (!*type)
    co_return post_nothing(channel,
                           ws_error(make_error(ErrorCode::InvalidRequest, "type is required")));

  if (**type == "register") {
    auto request = decode_register(msg);
    if (!request) co_return post_nothing(channel, ws_error(request.error()));
    if (request->session_id)
      if (auto own =
              co_await state.sessions->validate_client_session(client_id, *request->session_id);
          !own)
        co_return post_nothing(channel, ws_error(own.error()));
    if (auto r = check_registration_limits(state, client_id, request->tools); !r)
      co_return post_nothing(channel, ws_error(r.error()));
    auto ids = state.registry->register_tools(client_id, std::move(request->tools),
                                              request->session_id.value_or(""));
    if (!ids) co_return post_nothing(channel, ws_error(ids.error()));
    co_return post_nothing(channel,
                           std::make_shared<const std::string>(json::serialize(json::object{
                               {"type", "registered"}, {"toolIDs", clienttool::to_json(*ids)}})));
  }
  if (**type == "unregister") {
    auto request = decode_unregister(msg);
    if (!request) co_return post_nothing(channel, ws_error(request.error()));
    auto removed = state.registry->unregister(client_id, request->tool_ids);
    co_return post_nothing(
        channel, std::make_shared<const std::string>(json::serialize(json::object{
                     {"type", "unregistered"}, {"toolIDs", clienttool::to_json(removed)}})));
  }
  if (**type == "result") {
    auto request = decode_result(msg);
    // An answer that names its request hears about its own failure under that id.
    if (!request) co_return post_nothing(channel, ws_error(request.error(), request_id_of(msg)));
    auto r =
        state.registry->submit_result(request->request_id, client_id, std::move(request->response));
    if (auto forward = forward_if_unknown(state, r, "client.result", msg, client_id))
      co_return forward;
    if (!r) channel.post(ws_error(r.error(), request->request_id));
    co_return std::nullopt;
  }
  if (**type == "progress") {
    auto request = decode_progress(msg);
    if (!request) co_return post_nothing(channel, ws_error(request.error(), request_id_of(msg)));
    auto r = state.registry->report_progress(request->request_id, client_id,
                                             std::move(request->progress));
    if (auto forward = forward_if_unknown(state, r, "client.progress", msg, client_id))
      co_return forward;
    if (!r) channel.post(ws_error(r.error(), request->request_id));
    co_return std::nullopt;
  }
  channel.post(ws_error(make_error(ErrorCode::InvalidRequest,
                                   "unknown message type \"" + **type +
                                       "\" (expected register, unregister, result or progress)")));
  co_return std::nullopt;
}

// handle_ws_message as read_messages calls it.
asio::awaitable<void> handle_client_text(ServerState& state, const std::string& client_id,
                                         WsConnection& conn, std::string text) {
  auto forward = co_await handle_ws_message(state, client_id, conn, text);
  if (!forward) co_return;
  // Awaited here: the client's next message is read after it, so its answers stay in order.
  std::string request_id = request_id_of(forward->body);
  auto r = co_await ask_the_node_that_has_it(state, std::move(forward->op),
                                             std::move(forward->body), std::move(forward->missing));
  if (!r) conn.post(ws_error(r.error(), request_id));
}

}  // namespace

asio::awaitable<void> run_client_websocket(ServerState& state, tcp::socket socket, Request req,
                                           std::string client_id, std::string issued_token) {
  auto conn = make_websocket(state, std::move(socket));
  WsStream& ws = conn->ws();
  ws.set_option(websocket::stream_base::decorator([issued_token](websocket::response_type& res) {
    res.set(http::field::server, "switchboard/" SWITCHBOARD_VERSION);
    // For clients that can read the handshake's headers; browsers get the first message.
    if (!issued_token.empty()) res.set(kClientTokenHeader, issued_token);
  }));
  auto [ec] = co_await ws.async_accept(req, tuple_awaitable);
  req = Request();  // the upgrade request's headers are not needed any more
  if (ec) {
    // As for SSE: a token issued for a handshake that failed never reached the client.
    if (!issued_token.empty() && state.credentials)
      state.credentials->post(
          [client_id](clienttool::ClientCredentials& k) { k.withdraw(client_id); });
    conn->disconnect();
    co_return;
  }

  TrackedPush tracked(state, conn);
  if (!issued_token.empty())  // first in the queue: before any request the client must answer
    conn->post(std::make_shared<const std::string>(json::serialize(json::object{
        {"type", "credentials"}, {"clientID", client_id}, {"clientToken", issued_token}})));
  auto sink = std::make_shared<ChannelSink>(conn, &ws_frame_for);
  // A WebSocket client that reconnects gets every still-pending request again.
  std::uint64_t connection = state.registry->attach(client_id, sink, 0, "websocket");
  sink.reset();
  log::debug("client ", client_id, " connected over WebSocket");
  conn->start();

  // This coroutine reads; writes are driven by the channel. When the channel ends the stream
  // (close frame, overflow, write error), the read fails and the loop ends. A client that went
  // for a message too big may connect again within its reconnect grace and keeps its tools.
  TextHandler on_text = [&state, &client_id, &conn = *conn](std::string text) {
    return handle_client_text(state, client_id, conn, std::move(text));
  };
  Refuse refuse = [&conn = *conn](const Error& why) { conn.post(ws_error(why)); };
  co_await read_messages(*conn, state.config.server.max_websocket_message_bytes,
                         "client " + client_id, std::move(on_text), std::move(refuse));
  conn->disconnect();
  state.registry->detach(client_id, connection);
  log::debug("client ", client_id,
             " WebSocket ended: ", conn->closed() ? conn->close_reason() : "peer closed");
}

// ---- the AI SDK's chat WebSocket ------------------------------------------------------------

// The frames a chat socket may have queued (at least server.subscriberQueueLimit).
constexpr std::size_t kChatSocketQueue = 65536;

namespace {

// The requests of one chat socket that are being answered: requestId -> what it reads.
struct ChatRequestStream {
  std::string chat_id;
  std::shared_ptr<chat::ChatResponse> response;
  std::uint64_t reader = 0;
};
using ChatRequests = std::map<std::string, ChatRequestStream>;

std::shared_ptr<const std::string> chat_frame(std::string_view type, const std::string& request_id,
                                              const std::string& error_text = {}) {
  json::object frame{{"type", type}, {"requestId", request_id}};
  if (!error_text.empty()) frame["errorText"] = error_text;
  return std::make_shared<const std::string>(json::serialize(frame));
}

// Follows `response` from `from` for the request: each chunk as {type: "chunk", requestId,
// sequence, chunk}, then {type: "end"}.
void follow_chat(WsConnection& conn, ChatRequests& requests, const std::string& request_id,
                 std::string chat_id, std::shared_ptr<chat::ChatResponse> response,
                 std::uint64_t from) {
  conn.post(chat_frame("start", request_id));
  std::string prefix = "{\"type\":\"chunk\",\"requestId\":";
  append_json_string(prefix, request_id);
  prefix += ",\"sequence\":";
  requests[request_id] = ChatRequestStream{std::move(chat_id), response, 0};
  // A response that has ended is replayed whole at once, and its request is over on return.
  auto reader = response->follow(
      from, [weak = std::weak_ptr<PushChannel>(conn.shared_from_this()), &requests, request_id,
             prefix](std::uint64_t sequence, const chat::ChatResponse::Chunk& chunk) {
        auto ch = weak.lock();
        if (!chunk) {
          requests.erase(request_id);
          if (ch) ch->post(chat_frame("end", request_id));
          return;
        }
        if (ch)
          ch->post(std::make_shared<const std::string>(prefix + std::to_string(sequence) +
                                                       ",\"chunk\":" + *chunk + "}"));
      });
  if (auto it = requests.find(request_id); it != requests.end()) it->second.reader = reader;
}

asio::awaitable<void> handle_chat_frame(ServerState& state, WsConnection& conn,
                                        ChatRequests& requests, std::string text) {
  auto doc = parse_request_json(state, text);
  if (!doc || !doc->is_object()) {
    conn.post(chat_frame("error", "", doc ? "a frame must be a JSON object" : doc.error().message));
    co_return;
  }
  const json::object& frame = doc->get_object();
  std::string request_id;
  if (auto it = frame.find("requestId"); it != frame.end() && it->value().is_string())
    request_id = std::string(it->value().get_string());
  auto type = get_string(frame, "type");
  if (!type || !*type || request_id.empty()) {
    conn.post(chat_frame("error", request_id, "a frame needs a string type and requestId"));
    co_return;
  }
  if (**type == "abort") {
    auto it = requests.find(request_id);
    if (it == requests.end()) co_return;
    ChatRequestStream stream = std::move(it->second);
    requests.erase(it);
    stream.response->unfollow(stream.reader);
    // The app's stop(): the turn stops, unless the response had ended (it waits for the app).
    if (!stream.response->ended()) (void)co_await state.chats->stop(stream.chat_id);
    co_return;
  }
  // Each request id names one stream of chunks; a second use while the first streams would leave
  // the first's reader without its entry.
  if (requests.count(request_id)) {
    conn.post(chat_frame("error", request_id, "requestId " + request_id + " is in use"));
    co_return;
  }
  auto chat_id = get_string(frame, "id");
  if (!chat_id || !*chat_id) {
    conn.post(chat_frame("error", request_id, "id (the chat's id) is required"));
    co_return;
  }
  if (**type == "resume") {
    auto last = get_int(frame, "lastSequence");
    if (!last || (*last && **last < -1)) {
      conn.post(chat_frame("error", request_id, "lastSequence must be a sequence number"));
      co_return;
    }
    auto active = co_await state.chats->active(**chat_id);
    if (!active) {
      conn.post(chat_frame("error", request_id, active.error().message));
      co_return;
    }
    if (!*active) {
      conn.post(chat_frame("no-active", request_id));
      co_return;
    }
    std::uint64_t from = *last ? static_cast<std::uint64_t>(**last + 1) : 0;
    follow_chat(conn, requests, request_id, **chat_id, std::move(*active), from);
    co_return;
  }
  if (**type != "send") {
    conn.post(chat_frame("error", request_id,
                         "unknown frame type \"" + **type + "\" (expected send, resume or abort)"));
    co_return;
  }
  static const json::object no_body;
  auto body = get_object(frame, "body");
  if (!body) {
    conn.post(chat_frame("error", request_id, body.error().message));
    co_return;
  }
  auto request = decode_chat_request(frame, *body ? **body : no_body);
  if (!request) {
    conn.post(chat_frame("error", request_id, request.error().message));
    co_return;
  }
  std::string id = request->chat_id;
  auto response = co_await state.chats->send(std::move(*request));
  if (!response) {
    conn.post(chat_frame("error", request_id, response.error().message));
    co_return;
  }
  follow_chat(conn, requests, request_id, std::move(id), std::move(*response), 0);
}

}  // namespace

asio::awaitable<void> run_chat_websocket(ServerState& state, tcp::socket socket, Request req) {
  // A resumed answer is replayed at once, a chunk a message: the queue holds a long answer's.
  auto conn = make_websocket(state, std::move(socket), kChatSocketQueue);
  WsStream& ws = conn->ws();
  ws.set_option(websocket::stream_base::decorator([](websocket::response_type& res) {
    res.set(http::field::server, "switchboard/" SWITCHBOARD_VERSION);
  }));
  auto [ec] = co_await ws.async_accept(req, tuple_awaitable);
  req = Request();
  if (ec) {
    conn->disconnect();
    co_return;
  }
  TrackedPush tracked(state, conn);
  conn->start();
  ChatRequests requests;
  TextHandler on_text = [&state, &conn = *conn, &requests](std::string text) {
    return handle_chat_frame(state, conn, requests, std::move(text));
  };
  Refuse refuse = [&conn = *conn](const Error& why) {
    conn.post(chat_frame("error", "", why.message));
  };
  co_await read_messages(*conn, state.config.server.max_websocket_message_bytes, "a chat socket",
                         std::move(on_text), std::move(refuse));
  conn->disconnect();
  // A dropped socket does not stop the chats it carried: `resume` on a new one picks them up.
  for (auto& [id, stream] : requests)
    stream.response->unfollow(stream.reader);
}

}  // namespace sb::server
