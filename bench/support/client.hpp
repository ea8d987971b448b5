#pragma once
// Benchmark support: the client side of a benchmark, on one io_context thread with C++20
// coroutines (Boost.Beast): timers, a latch, HTTP requests on keep-alive connections, and the
// WebSocket client-tool client that both benchmarks use. Every network operation is bounded by
// the target's op_timeout, except a client's wait for its next request. One thread.
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json.hpp>

#include <chrono>
#include <cstddef>
#include <exception>
#include <optional>
#include <string>
#include <string_view>

namespace bench {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace json = boost::json;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
inline constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

// Runs `work` on `io` to its end and returns the exception that ended it, if any; the io_context
// then stops at once (clients may still be waiting on their connections).
std::exception_ptr run_to_end(asio::io_context& io, asio::awaitable<void> work);

asio::awaitable<void> sleep_for(Clock::duration d);
asio::awaitable<void> sleep_until(Clock::time_point t);

// Counts down to zero; wait() returns false when its timeout passes first.
class Latch {
 public:
  Latch(asio::any_io_executor ex, std::size_t count) : remaining_(count), timer_(ex) {}
  void add() { ++remaining_; }
  void count_down() {
    if (remaining_ > 0 && --remaining_ == 0) timer_.cancel();
  }
  std::size_t remaining() const { return remaining_; }
  asio::awaitable<bool> wait(std::chrono::milliseconds timeout);

 private:
  std::size_t remaining_;
  asio::steady_timer timer_;
};

// The server a scenario talks to.
struct Target {
  asio::io_context& io;
  tcp::endpoint endpoint;
  std::string host;  // the Host header
  std::chrono::milliseconds op_timeout;
  bool stopping = false;  // set at teardown: connection errors are expected from then on

  static Target loopback(asio::io_context& io, unsigned short port,
                         std::chrono::milliseconds op_timeout);
};

const json::string* string_field(const json::value& v, std::string_view key);
std::optional<json::value> parse_json(std::string_view text);

// A prompt's answer as the benches check it: 200 {info, parts}, an assistant message that
// finished with "stop" and no error. Its text parts, joined, go to `text`; returns "" or what is
// wrong.
std::string assistant_text(const http::response<http::string_body>& res, std::string& text);
// The same check of one message {info, parts} (an element of GET /session/{id}/message).
std::string assistant_text(const json::value& message, std::string& text);

// A keep-alive request with the program's User-Agent, and a JSON Content-Type if it has a body.
http::request<http::string_body> make_request(http::verb verb, std::string_view target,
                                              const std::string& host, std::string body);

struct HttpResult {
  std::string error;  // "" on success (any status)
  http::response<http::string_body> res;
};

// One request/response on a keep-alive connection, bounded by `timeout`.
asio::awaitable<HttpResult> http_call(beast::tcp_stream& stream, beast::flat_buffer& buffer,
                                      http::request<http::string_body>& req,
                                      std::chrono::milliseconds timeout);

// Connects (TCP_NODELAY); "" or what went wrong.
asio::awaitable<std::string> connect_stream(beast::tcp_stream& stream, const tcp::endpoint& ep,
                                            std::chrono::milliseconds timeout);

// GET /health on a fresh connection; "" when the server answered 200 {healthy: true}.
asio::awaitable<std::string> check_health(const Target& target);

// The tool every benchmark client registers: `echo`, which answers with input.text.
json::array echo_tool_specs();

// What an `echo` request asks: its requestID and input.text; nullopt when either is missing.
struct EchoRequest {
  std::string request_id;
  std::string text;
};
std::optional<EchoRequest> echo_request(const json::value& request);
// The result that answers it.
json::object echo_result(std::string_view text);

// A client over /client-tools/ws/{id} that registers `echo` and answers each request at once.
// One reader (serve()) and at most one write at a time: register_tool() while serve() runs must
// come when no request of this client is outstanding.
class WsEchoClient {
 public:
  WsEchoClient(Target& target, std::string id);

  const std::string& id() const { return id_; }
  std::string tool_id() const { return "client_" + id_ + "_echo"; }
  std::size_t answered() const { return answered_; }

  // TCP and the WebSocket handshake; "" or what went wrong.
  asio::awaitable<std::string> connect();
  // Registers `echo` (for one session, replacing the registration for an earlier one, when
  // `session_id` is given) and waits for the server's `registered`: read here, or by serve()
  // when it runs.
  asio::awaitable<std::string> register_tool(std::optional<std::string> session_id = {});
  // Answers requests until the connection ends. From the call on, register_tool() leaves the
  // reading to it.
  asio::awaitable<void> serve();
  void close();

 private:
  asio::awaitable<void> answer_requests();
  asio::awaitable<std::string> write(const std::string& text);
  // "" when `text` is {type: registered, toolIDs: [tool_id()]}.
  std::string check_registered(std::string_view text) const;
  void problem(const std::string& what);

  Target& target_;
  std::string id_;
  websocket::stream<beast::tcp_stream> ws_;
  beast::flat_buffer buffer_;
  std::string reply_, outgoing_;
  std::size_t answered_ = 0;
  bool serving_ = false;
  asio::steady_timer registered_;  // cancelled when serve() reads `registered` (or an error)
  bool got_registered_ = false;
  std::string registered_error_;
};

}  // namespace bench
