// The AI SDK's chat routes (docs/ai-sdk.md): POST /api/chat (DefaultChatTransport), the stream
// to resume and stop, and the WebSocket of WebSocketChatTransport.
#include <boost/beast/websocket.hpp>

#include "server/decode.hpp"
#include "server/push.hpp"
#include "server/route.hpp"

namespace sb::server {

namespace {

// Streams `response` on the connection; a reader that leaves early tells the chat (stop()).
void stream_response(Call& c, std::string chat_id, std::shared_ptr<chat::ChatResponse> response) {
  c.take_over = [&state = c.state, chat_id = std::move(chat_id), response = std::move(response)](
                    tcp::socket socket, Request req) {
    std::function<void()> left = [chats = std::weak_ptr<chat::ChatService>(state.chats), chat_id,
                                  response] {
      if (auto service = chats.lock()) service->reader_left(chat_id, response);
    };
    return run_ui_message_stream(state, std::move(socket), std::move(req), response,
                                 std::move(left));
  };
}

// POST /api/chat: what DefaultChatTransport sends; answers with the UI message stream.
asio::awaitable<Reply> post_chat(Call& c) {
  auto body = body_object(c.state, c.req);
  if (!body) co_return fail(c, body.error());
  // Over HTTP the app's own fields are in the same object.
  auto request = decode_chat_request(*body, *body);
  if (!request) co_return fail(c, request.error());
  if (request->client_id)
    if (auto verified = co_await verify_client(c, request->client_id); !verified)
      co_return fail(c, verified.error());
  std::string chat_id = request->chat_id;
  auto response = co_await c.state.chats->send(std::move(*request));
  if (!response) co_return fail(c, response.error());
  stream_response(c, std::move(chat_id), std::move(*response));
  co_return std::nullopt;
}

// GET /api/chat/{id}/stream: the answer streaming now, from its start (the AI SDK's resume).
asio::awaitable<Reply> resume_chat(Call& c) {
  auto active = co_await c.state.chats->active(c.params[0]);
  if (!active) co_return fail(c, active.error());
  if (!*active) {
    Response res{http::status::no_content, c.req.version()};
    res.keep_alive(c.req.keep_alive());
    res.prepare_payload();
    co_return res;
  }
  stream_response(c, c.params[0], std::move(*active));
  co_return std::nullopt;
}

// DELETE /api/chat/{id}/stream: stops the chat's turn (a resumable chat's stop()).
asio::awaitable<Reply> stop_chat(Call& c) {
  auto stopped = co_await c.state.chats->stop(c.params[0]);
  if (!stopped) co_return fail(c, stopped.error());
  co_return ok(c, json::object{{"stopped", *stopped}});
}

// GET /api/chat/ws: WebSocketChatTransport's socket.
asio::awaitable<Reply> chat_websocket(Call& c) {
  if (!beast::websocket::is_upgrade(c.req))
    co_return fail(c, make_error(ErrorCode::InvalidRequest,
                                 "this route is a WebSocket: send an Upgrade: websocket request"));
  c.take_over = [&state = c.state](tcp::socket socket, Request req) {
    return run_chat_websocket(state, std::move(socket), std::move(req));
  };
  co_return std::nullopt;
}

}  // namespace

std::vector<Route> chat_routes() {
  return {
      {http::verb::post,
       {"api", "chat"},
       &post_chat,
       {.id = "chat.send",
        .summary = "The AI SDK's chat request (DefaultChatTransport): answered with the UI message "
                   "stream (SSE)",
        .body = "ChatRequest",
        .answer = "UIMessageChunk",
        .statuses = "403 404 409 503",
        .media = "text/event-stream"}},
      {http::verb::get,
       {"api", "chat", "ws"},
       &chat_websocket,
       {.id = "chat.ws",
        .summary = "The AI SDK chat's WebSocket (WebSocketChatTransport)",
        .statuses = "400",
        .media = "websocket",
        .status = 101}},
      {http::verb::get,
       {"api", "chat", "{id}", "stream"},
       &resume_chat,
       {.id = "chat.resume",
        .summary = "The chat's answer streaming now, from its start (SSE); 204 when none streams",
        .answer = "UIMessageChunk",
        .statuses = "204 404",
        .media = "text/event-stream"}},
      {http::verb::delete_,
       {"api", "chat", "{id}", "stream"},
       &stop_chat,
       {.id = "chat.stop",
        .summary = "Stop the chat's turn",
        .answer = "ChatStopAnswer",
        .statuses = "404"}},
  };
}

}  // namespace sb::server
