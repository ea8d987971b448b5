#pragma once
// Test support: blocking HTTP, SSE and WebSocket clients for black-box tests. Each client owns its
// io_context, and every operation is bounded by a timeout, so a test can fail but never hang.
//
// Not thread-safe: use each client object from one test thread at a time. http_request() is a
// free function and may be called from any thread (each call has its own io_context).
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket/stream.hpp>
#include <boost/json.hpp>

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "provider/sse_decoder.hpp"

namespace sb::test {

using namespace std::chrono_literals;
namespace json = boost::json;

using Headers = std::vector<std::pair<std::string, std::string>>;

struct HttpResponse {
  unsigned status = 0;
  Headers headers;
  std::string body;

  // Case-insensitive header lookup.
  std::optional<std::string> header(std::string_view name) const;
  // The body as JSON; throws std::runtime_error quoting the body when it is not JSON.
  json::value json() const;
  // error.code / error.message of an error body, "" when absent.
  std::string error_code() const;
  std::string error_message() const;
  // "STATUS BODY", for assertion messages.
  std::string describe() const;
};

// Sends one request on a fresh connection and reads the response. A non-empty body gets
// `Content-Type: application/json` unless `headers` names a Content-Type. Throws
// std::runtime_error when the connection fails, closes early, or the timeout passes.
HttpResponse http_request(unsigned short port, std::string_view method, std::string_view target,
                          std::string_view body = {}, const Headers& headers = {},
                          std::chrono::milliseconds timeout = 10s);
HttpResponse http_get(unsigned short port, std::string_view target,
                      std::chrono::milliseconds timeout = 10s);
HttpResponse http_post(unsigned short port, std::string_view target, const json::value& body,
                       std::chrono::milliseconds timeout = 10s);
HttpResponse http_delete(unsigned short port, std::string_view target, const json::value& body,
                         std::chrono::milliseconds timeout = 10s);

// A plain TCP connection for bytes that no well-behaved client would send (malformed or
// half-written requests).
class RawConnection {
 public:
  explicit RawConnection(unsigned short port, std::chrono::milliseconds timeout = 5s);
  ~RawConnection();
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  // Throws on error or timeout.
  void send(std::string_view bytes, std::chrono::milliseconds timeout = 5s);
  // Reads one HTTP response; nullopt when the server closes first or the timeout passes.
  std::optional<HttpResponse> read_response(std::chrono::milliseconds timeout = 5s);
  // Reads (and keeps in received()) until the server closes the connection. False on timeout.
  bool wait_closed(std::chrono::milliseconds timeout);
  // Half-close: the server sees end of stream on its read side.
  void shutdown_send();
  void close();
  const std::string& received() const { return received_; }

 private:
  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::socket socket_{ioc_};
  std::string received_;  // bytes read and not yet consumed by read_response()
  bool eof_ = false;
};

// One Server-Sent Event. `event` is "message" when the frame has no `event:` field; `id` is the
// stream's last event id when the event came (a browser's `lastEventId`), nullopt while the
// stream has sent none.
struct SseEvent {
  std::optional<std::string> id;
  std::string event = "message";
  std::string data;
  // `data` as JSON; throws std::runtime_error quoting it when it is not JSON.
  json::value json() const;
};

// A client of an SSE endpoint. The constructor connects, sends the GET and reads the response
// head (throws on failure or timeout); after that a reader thread parses events into a queue
// (unless Options::read is false, which simulates a consumer that stops reading).
class SseClient {
 public:
  struct Options {
    std::optional<std::string> last_event_id;  // sent as the Last-Event-ID header
    Headers headers;
    bool read = true;        // false: read nothing after the response head
    int receive_buffer = 0;  // SO_RCVBUF in bytes before connecting; 0 = system default
    std::chrono::milliseconds connect_timeout{5000};
  };

  SseClient(unsigned short port, std::string target);
  SseClient(unsigned short port, std::string target, Options options);
  ~SseClient();
  SseClient(const SseClient&) = delete;
  SseClient& operator=(const SseClient&) = delete;

  unsigned status() const { return status_; }
  std::optional<std::string> header(std::string_view name) const;

  // The next event, or nullopt when none arrives within the timeout or the stream ended.
  std::optional<SseEvent> next_event(std::chrono::milliseconds timeout);
  // The next event named `event`; events with other names before it are discarded.
  std::optional<SseEvent> next_event_named(std::string_view event,
                                           std::chrono::milliseconds timeout);
  // Starts the reader of a client created with read = false.
  void resume_reading();
  // True once the server closed the stream (reading it to the end). Starts the reader if needed.
  bool wait_closed(std::chrono::milliseconds timeout);
  bool closed() const;
  // Body bytes that did not form a complete event yet plus all events' data (for diagnostics).
  std::size_t body_bytes() const;
  // Closes the connection from this side (abruptly, like a client that goes away).
  void close();

 private:
  void start_read();
  void on_body(std::string_view bytes);  // decodes chunked framing, then the event stream
  void on_text(std::string_view text);
  void parse_head(const std::string& head);

  Options options_;
  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::socket socket_{ioc_};
  std::thread reader_;
  std::array<char, 16384> read_buf_{};

  unsigned status_ = 0;
  Headers headers_;
  bool chunked_ = false;
  std::optional<std::uint64_t> content_left_;

  // Chunked decoding state (reader thread only).
  std::string raw_;
  enum class ChunkState { Size, Data, DataEnd, Done } chunk_state_ = ChunkState::Size;
  std::uint64_t chunk_left_ = 0;

  // The server's own decoder of model streams (reader thread only). A stream it cannot decode
  // (an event over its size limit) counts as closed.
  sse::SseDecoder decoder_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<SseEvent> events_;
  bool closed_ = false;
  std::size_t body_bytes_ = 0;
};

// A WebSocket client. The constructor connects and completes the handshake (throws with the
// server's status on failure); a reader thread queues text messages and answers pings.
class WsClient {
 public:
  WsClient(unsigned short port, std::string target, std::chrono::milliseconds timeout = 5s);
  ~WsClient();
  WsClient(const WsClient&) = delete;
  WsClient& operator=(const WsClient&) = delete;

  // Throws when the write fails or does not finish in time.
  void send_text(std::string text, std::chrono::milliseconds timeout = 5s);
  void send_json(const json::value& message, std::chrono::milliseconds timeout = 5s);

  // The next text message; nullopt on timeout or when the connection ended.
  std::optional<std::string> next_text(std::chrono::milliseconds timeout);
  // The next message as JSON; throws std::runtime_error quoting it when it is not JSON.
  std::optional<json::value> next_message(std::chrono::milliseconds timeout);
  // The next message whose "type" is `type`; others before it are discarded.
  std::optional<json::value> next_message_of_type(std::string_view type,
                                                  std::chrono::milliseconds timeout);

  // True once the server closed the connection (close frame or TCP end) within the timeout.
  bool wait_closed(std::chrono::milliseconds timeout);
  bool closed() const;
  // What ended the connection ("" while it is open): the error and any close reason.
  std::string close_description() const;

  // WebSocket close handshake, then the socket is closed.
  void close();
  // Closes the TCP connection without a close frame (a client that vanishes).
  void drop();

 private:
  void start_read();
  void stop_reader();

  boost::asio::io_context ioc_;
  boost::beast::websocket::stream<boost::asio::ip::tcp::socket> ws_{ioc_};
  boost::beast::flat_buffer buffer_;
  std::thread reader_;
  bool broken_ = false;  // a write timed out; no further writes are safe

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::string> messages_;
  bool closed_ = false;
  std::string close_description_;
};

}  // namespace sb::test
