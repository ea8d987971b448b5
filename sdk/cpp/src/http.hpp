#pragma once
// The SDK's HTTP side: the server's address, requests on keep-alive connections, Server-Sent
// Event streams, and the mapping of error answers to ServerError. Beast stays in http.cpp.
#include <boost/asio/awaitable.hpp>
#include <boost/json/value.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace switchboard::detail {

namespace asio = boost::asio;
namespace json = boost::json;
using std::chrono::milliseconds;

// The server password and a client's token (docs/security.md), shared by a Client and the
// manager of its client id: every request carries them. Thread-safe.
class Credentials {
 public:
  Credentials(std::string password, std::string token,
              std::function<void(const std::string&)> on_issued)
      : password_(std::move(password)),
        token_(std::move(token)),
        on_issued_(std::move(on_issued)) {}
  const std::string& password() const { return password_; }
  std::string token() const {
    std::lock_guard lock(mutex_);
    return token_;
  }
  // Keeps a token the server issued (a register or session answer, a stream's header, a
  // WebSocket message) and tells the program's listener.
  void take(const std::string& token) {
    {
      std::lock_guard lock(mutex_);
      if (token.empty() || token == token_) return;
      token_ = token;
    }
    if (on_issued_) on_issued_(token);
  }

 private:
  const std::string password_;
  mutable std::mutex mutex_;
  std::string token_;
  const std::function<void(const std::string&)> on_issued_;
};

// Where the server is: from a base URL like "http://127.0.0.1:4096" or "http://host/prefix".
struct Endpoint {
  std::string host;
  std::string port;
  std::string base_path;                     // "" or "/prefix"
  std::shared_ptr<Credentials> credentials;  // null: none

  // Throws std::invalid_argument for anything but an http:// URL with a host.
  static Endpoint parse(const std::string& base_url);
  std::string target(std::string_view path) const { return base_path + std::string(path); }
};

struct HttpResponse {
  unsigned status = 0;
  std::string body;
};

// Throws ServerError for a status of 400 or more, with the code and message of the body
// {"error": {"code", "message"}} (or the status and body when it is not that shape).
void throw_if_error(const HttpResponse& response);
// The body as JSON (null when empty). Throws ConnectionError "INVALID_RESPONSE".
json::value body_json(const HttpResponse& response);

using Headers = std::vector<std::pair<std::string, std::string>>;

// One keep-alive HTTP/1.1 connection used for one request at a time; (re)opened on demand.
// Not thread-safe: use it from one strand.
class HttpConnection {
 public:
  explicit HttpConnection(Endpoint endpoint);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // Throws ConnectionError when the server cannot be reached, the connection breaks, or the
  // answer is not complete within `timeout`. A request that fails on a reused connection
  // before any answer arrived is sent once more on a new one (the server may have closed an
  // idle connection).
  asio::awaitable<HttpResponse> request(std::string_view method, std::string target,
                                        std::string body, milliseconds timeout);
  void close();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// One request on a connection of its own.
asio::awaitable<HttpResponse> http_request(const Endpoint& endpoint, std::string_view method,
                                           std::string target, std::string body,
                                           milliseconds timeout);

// One Server-Sent Event.
struct SseEvent {
  std::optional<std::string> id;
  std::string event = "message";
  std::string data;
};

// Splits an event stream into events (the WHATWG rules: LF, CRLF or CR line ends, comments,
// multi-line data, an optional space after the colon).
class SseParser {
 public:
  // Appends the events completed by `bytes` to `out`.
  void feed(std::string_view bytes, std::vector<SseEvent>& out);

 private:
  void line(std::string_view text, std::vector<SseEvent>& out);
  std::string partial_;
  bool skip_lf_ = false;  // the last chunk ended with CR: a LF that follows belongs to it
  SseEvent current_;
  bool has_data_ = false;
};

// A GET that answers with an event stream. Not thread-safe.
class SseStream {
 public:
  // Sends the request and reads the answer's head within `timeout`. Throws ServerError when the
  // server answers anything but 200, ConnectionError when it cannot be reached.
  static asio::awaitable<std::unique_ptr<SseStream>> open(const Endpoint& endpoint,
                                                          std::string target, Headers headers,
                                                          milliseconds timeout);
  ~SseStream();
  // The next event; nullopt when the stream ended, broke, or brought nothing (not even a
  // ping) for `idle_timeout` (error() says which). Never throws.
  asio::awaitable<std::optional<SseEvent>> next(milliseconds idle_timeout);
  const std::string& error() const { return error_; }
  void close();

 private:
  struct State;
  explicit SseStream(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
  SseParser parser_;
  std::vector<SseEvent> ready_;
  std::size_t next_ready_ = 0;
  std::string error_;
};

// A WebSocket text connection. One read and one write may be in flight at once.
class WsConnection {
 public:
  // Connects and completes the handshake within `timeout`. Throws ServerError when the server
  // refuses the upgrade with an error body, ConnectionError otherwise. The connection pings
  // the server and counts as broken when nothing comes back for `idle_timeout`.
  static asio::awaitable<std::unique_ptr<WsConnection>> open(const Endpoint& endpoint,
                                                             std::string target,
                                                             milliseconds timeout,
                                                             milliseconds idle_timeout);
  ~WsConnection();
  // The next text message; nullopt when the connection ended (error() says why). Never throws.
  asio::awaitable<std::optional<std::string>> read();
  // False when the connection is gone. Never throws.
  asio::awaitable<bool> write(std::string text);
  // The close handshake (bounded by a short timeout), then the socket closes.
  asio::awaitable<void> close();
  const std::string& error() const { return error_; }
  // The reason in the server's close frame ("" when it sent none).
  const std::string& close_reason() const { return close_reason_; }

 private:
  struct State;
  explicit WsConnection(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
  std::string error_;
  std::string close_reason_;
};

}  // namespace switchboard::detail
