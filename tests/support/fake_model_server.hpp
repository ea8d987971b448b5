#pragma once
// Test support: a fake language model over HTTP for black-box tests of the agent loop. It listens
// on 127.0.0.1:0 and runs on its own thread; it answers
//   POST …/chat/completions  in OpenAI's Chat Completions streaming format, and
//   POST …/messages          in Anthropic's Messages streaming format,
// replaying a queue of canned responses that the test sets (text, tool calls, an HTTP error, a
// stream cut mid-way, a delay), and it records every request it received so that tests can check
// what the server sent to the model (the tool schemas offered, the tool results sent back).
// A benchmark's model instead computes every answer with a FakeModelHandler.
//
// Thread-safe: every public function may be called from any thread.
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/json.hpp>

#include <time.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace sb::test {

// One tool call of a canned response. `arguments` is sent as it is (it may be invalid JSON on
// purpose), split over several chunks / input_json_delta events.
struct FakeToolCall {
  std::string id;
  std::string name;
  std::string arguments;
  std::size_t pieces = 3;  // how many chunks / events carry the arguments (about equal)
};

// One canned answer of the fake model.
struct FakeResponse {
  // Where a stream stops early: the connection is closed without the stream's proper end.
  enum class Cut {
    None,
    BeforeAnything,  // right after the response head: no event at all
    BeforeFinish,    // after all content, before the finish reason / message_delta
    MidToolCall,     // in the first tool call, after its name and the first piece of arguments
  };

  std::string reasoning;        // OpenAI: delta.reasoning_content; Anthropic: a thinking block
  std::string text;             // streamed in several pieces
  std::size_t text_pieces = 3;  // how many (about equal; all in one write without chunk_delay)
  std::vector<FakeToolCall> tool_calls;
  std::optional<std::string> finish;  // finish_reason / stop_reason; default from the content
  unsigned status = 200;              // anything else: an error answer in the API's error format
  std::string error_message;
  std::chrono::milliseconds delay{0};        // before the response head
  std::chrono::milliseconds chunk_delay{0};  // between two events
  Cut cut = Cut::None;
  // What becomes of the connection after a complete answer.
  enum class Connection {
    Close,               // "Connection: close", then closed
    KeepAlive,           // "Connection: keep-alive", and the next request may come on it
    KeepAliveThenClose,  // says keep-alive but closes (like a server dropping idle connections)
  };
  Connection connection = Connection::Close;

  static FakeResponse with_text(std::string text);
  static FakeResponse with_tool_call(std::string id, std::string name,
                                     const boost::json::value& input);
  static FakeResponse with_tool_calls(std::vector<FakeToolCall> calls);
  static FakeResponse http_error(unsigned status, std::string message);
};

// A request the fake model received.
struct RecordedRequest {
  std::string method;
  std::string target;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  boost::json::value json;  // the parsed body; null when it is not JSON

  std::optional<std::string> header(std::string_view name) const;  // case-insensitive
};

// A fake model that computes each answer from its request instead of replaying a queue: a
// benchmark's, which runs thousands of turns and must cost the machine little. Its functions
// run on the model server's thread.
class FakeModelHandler {
 public:
  using Request = boost::beast::http::request<boost::beast::http::string_body>;
  virtual ~FakeModelHandler() = default;
  // The whole HTTP response (head and body) to `request`, written in one go. `keep_alive`: the
  // request asks for it, and the connection stays open for another request if the response
  // says so too.
  virtual std::string respond(const Request& request, bool keep_alive) = 0;
  // A connection failed otherwise than by its peer closing it.
  virtual void connection_error(const std::string& what) = 0;
};

// The whole HTTP response that answers a streaming request with `response` for `model`, head
// and body in one string, as a FakeModelHandler returns it: its events in OpenAI's Chat
// Completions format (`anthropic`: Anthropic's Messages format), or its error when `status` is
// not 200. Of the connection fields only `keep_alive` applies (no cut, no delay).
std::string whole_response(const FakeResponse& response, std::string_view model, bool anthropic,
                           bool keep_alive);

class FakeModelServer {
 public:
  FakeModelServer();
  // Every request goes to `handler`, which must outlive the server; nothing is queued or
  // recorded (request_count() and requests() stay empty).
  explicit FakeModelServer(FakeModelHandler& handler);
  ~FakeModelServer();
  FakeModelServer(const FakeModelServer&) = delete;
  FakeModelServer& operator=(const FakeModelServer&) = delete;

  unsigned short port() const { return port_; }
  std::string base_url() const;  // "http://127.0.0.1:PORT", the provider's baseURL

  // Queues a response; requests take them in order. With the queue empty a request gets the
  // text "(fake model: no response queued)".
  void push(FakeResponse response);
  std::size_t queued() const;

  std::size_t request_count() const;
  std::size_t connection_count() const;  // connections accepted so far
  std::vector<RecordedRequest> requests() const;
  // Request number `index` (0-based) once it has arrived; nullopt if it does not within the
  // timeout.
  std::optional<RecordedRequest> wait_for_request(std::size_t index,
                                                  std::chrono::milliseconds timeout) const;

  // CPU time of the server's thread so far, in microseconds (what the model took from the
  // machine, for a benchmark's report); 0 where the thread's clock cannot be read.
  std::int64_t thread_cpu_us() const;

 private:
  struct Impl;
  friend struct Impl;

  void start();

  // The response for the next request, and records the request.
  FakeResponse take(RecordedRequest request);

  boost::asio::io_context ioc_{1};
  boost::asio::ip::tcp::acceptor acceptor_{ioc_};
  unsigned short port_ = 0;
  std::thread thread_;
  clockid_t thread_clock_{};
  bool has_thread_clock_ = false;
  FakeModelHandler* handler_ = nullptr;

  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::deque<FakeResponse> queue_;
  std::vector<RecordedRequest> requests_;
  std::size_t connections_ = 0;
};

}  // namespace sb::test
