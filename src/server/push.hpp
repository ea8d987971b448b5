#pragma once
// Push connections: the client-tool SSE stream, the /event SSE stream and the client-tool
// WebSocket. Each is one coroutine that reads (or waits for the peer to leave) plus a writer
// driven by completion handlers, with a bounded outbound queue and at most one write in flight;
// a subscriber that falls behind is dropped. A push connection owns its socket on its own: the
// HTTP session that routed the request has ended (see TakeOver in http.hpp), so an idle
// connection holds only what it needs.
#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/http.hpp"

namespace sb::server {

// The outbound side of one push connection. post()/close() from any thread; the rest on the
// connection's executor.
class PushChannel : public Stoppable, public std::enable_shared_from_this<PushChannel> {
 public:
  PushChannel(asio::any_io_executor executor, std::size_t limit);

  // Queues a frame. When the queue is full the connection is closed as too slow.
  void post(std::shared_ptr<const std::string> frame);
  // Queued frames are still written, then the stream ends; later posts are dropped.
  void close(std::string reason);

  bool closed() const { return closed_; }
  // Every frame posted so far has been written (or the connection is over).
  bool flushed() const { return disconnected_ || (!writing_ && head_ == queue_.size()); }
  const std::string& close_reason() const { return reason_; }
  asio::any_io_executor executor() const { return executor_; }

  // Frames are written once start() was called (after the response head, or the handshake).
  void start();
  // The connection is over (the peer left, the stream ended, a write failed): closes the
  // socket, drops what is queued and ends every wait. Idempotent.
  void disconnect();
  // Shutdown: the stream ends after the frames already queued.
  void stop() override { close("server shutting down"); }

 protected:
  // Writes one frame and calls write_done() when finished. At most one at a time.
  virtual void start_write(std::shared_ptr<const std::string> frame) = 0;
  // Several frames queued at once, up to batch_limit(): a stream that can write them together
  // says how many it takes and writes them here (one write_done() for all).
  virtual std::size_t batch_limit() const { return 1; }
  virtual void start_write_batch(std::vector<std::shared_ptr<const std::string>> frames) {
    (void)frames;
  }
  // Every frame is written and the channel is closed: end the stream (last chunk, close frame)
  // and then call disconnect().
  virtual void start_end() = 0;
  // Closes the socket now (disconnect()).
  virtual void close_socket() = 0;
  void write_done(bool ok);
  bool writing() const { return writing_; }
  bool ending() const { return ending_; }
  bool disconnected() const { return disconnected_; }

 private:
  void push_here(std::shared_ptr<const std::string> frame);
  void close_here(std::string reason);
  void pump();

  asio::any_io_executor executor_;
  std::size_t limit_;
  // A vector with a read index rather than a std::deque, which allocates 576 bytes up front even
  // for the idle connection that never gets a frame.
  std::vector<std::shared_ptr<const std::string>> queue_;
  std::size_t head_ = 0;
  bool started_ = false;
  bool writing_ = false;
  bool ending_ = false;
  bool disconnected_ = false;
  bool closed_ = false;
  std::string reason_;
};

// GET /client-tools/pending/{clientID}: attaches the client and streams its requests.
// `issued_token`, when not empty, is the client token this first use issued: it goes out in the
// X-Switchboard-Client-Token response header.
asio::awaitable<void> run_client_sse(ServerState& state, tcp::socket socket, Request req,
                                     std::string client_id, std::uint64_t last_event_id,
                                     std::string issued_token);

// GET /event: every bus event, each frame with its id (bus/event_log.hpp); GET /global/event
// (`global`): the same, each wrapped as OpenCode's GlobalEvent {directory, project, payload}.
// The first frame is server.connected; with `last_event_id` (Last-Event-ID) its properties say
// whether the stream `resumed` (the frames after that id follow it) or not (the client should
// refetch what it shows).
asio::awaitable<void> run_event_sse(ServerState& state, tcp::socket socket, Request req,
                                    bool global, std::optional<std::uint64_t> last_event_id);

// Returns once every /event stream has written the frames posted before the call, or after
// kCatchUpLimit: the answer of a prompt waits for it, so that a client that reads the events of
// its turn and stops at the answer (`opencode run --attach`) has them all. Streams that are
// written to at once (the usual case) cost one check; one whose reader is slow holds the answer
// back by the limit at most.
inline constexpr std::chrono::milliseconds kCatchUpLimit{50};
asio::awaitable<void> event_streams_caught_up(ServerState& state);

// A response streamed as SSE events of JSON-RPC messages (MCP's Streamable HTTP): the head goes
// out, then `run` sends messages (each one `event: message`) until it returns, and the stream
// ends after what it sent. `left` fires when the peer goes away first (MCP's cancellation of the
// request the stream answers).
using SendMessage = std::function<void(std::string json)>;
using MessageStreamBody =
    std::function<asio::awaitable<void>(SendMessage send, asio::cancellation_slot left)>;
asio::awaitable<void> run_message_stream(ServerState& state, tcp::socket socket, Request req,
                                         MessageStreamBody run);

// A chat's response as the AI SDK's UI message stream (POST /api/chat, GET
// /api/chat/{id}/stream): `data: {chunk}` events from the first chunk on, then `data: [DONE]`.
// `left` is called when the peer goes before the end.
asio::awaitable<void> run_ui_message_stream(ServerState& state, tcp::socket socket, Request req,
                                            std::shared_ptr<chat::ChatResponse> response,
                                            std::function<void()> left);

// GET /api/chat/ws: the WebSocket of the AI SDK's WebSocketChatTransport (docs/ai-sdk.md): many
// chats' requests (send, resume, abort) on one socket, each answered by its chunks in sequence.
asio::awaitable<void> run_chat_websocket(ServerState& state, tcp::socket socket, Request req);

// GET /client-tools/ws/{clientID}: the WebSocket handshake, then the client's session.
// `issued_token`, when not empty, is sent first: {"type": "credentials", clientID, clientToken}.
asio::awaitable<void> run_client_websocket(ServerState& state, tcp::socket socket, Request req,
                                           std::string client_id, std::string issued_token);

}  // namespace sb::server
