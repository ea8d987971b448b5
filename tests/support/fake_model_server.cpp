#include "fake_model_server.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include <pthread.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <exception>
#include <iostream>
#include <memory>

#include "describe.hpp"

namespace sb::test {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

namespace {

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

// A long session's history is sent whole at every step.
constexpr std::uint64_t kMaxRequestBytes = 256 * 1024 * 1024;

// Up to `n` pieces of about equal size, never splitting a UTF-8 sequence.
std::vector<std::string> split(std::string_view text, std::size_t n = 3) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  std::size_t size = std::max<std::size_t>(1, (text.size() + n - 1) / n);
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = std::min(text.size(), pos + size);
    while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80)
      ++end;
    out.emplace_back(text.substr(pos, end - pos));
    pos = end;
  }
  return out;
}

// The SSE events of one response, and where the cut points fall (as event counts).
struct Frames {
  std::vector<std::string> events;
  std::size_t finish_at = 0;  // the first event that finishes the message
  std::size_t mid_tool = 0;   // events up to the first piece of the first call's arguments
};

std::string data_frame(const json::value& data) {
  return "data: " + json::serialize(data) + "\n\n";
}

std::string named_frame(std::string_view event, const json::object& data) {
  return "event: " + std::string(event) + "\ndata: " + json::serialize(data) + "\n\n";
}

Frames openai_frames(const FakeResponse& r, const std::string& model) {
  Frames f;
  auto chunk = [&](json::object delta, json::value finish = nullptr) {
    return data_frame(json::object{
        {"id", "chatcmpl-fake"},
        {"object", "chat.completion.chunk"},
        {"created", 1700000000},
        {"model", model},
        {"choices", json::array{json::object{
                        {"index", 0}, {"delta", std::move(delta)}, {"finish_reason", finish}}}}});
  };
  f.events.push_back(chunk(json::object{{"role", "assistant"}, {"content", ""}}));
  for (const auto& piece : split(r.reasoning))
    f.events.push_back(chunk(json::object{{"reasoning_content", piece}}));
  for (const auto& piece : split(r.text, r.text_pieces))
    f.events.push_back(chunk(json::object{{"content", piece}}));
  for (std::size_t i = 0; i < r.tool_calls.size(); ++i) {
    const auto& call = r.tool_calls[i];
    f.events.push_back(chunk(json::object{
        {"tool_calls", json::array{json::object{
                           {"index", i},
                           {"id", call.id},
                           {"type", "function"},
                           {"function", json::object{{"name", call.name}, {"arguments", ""}}}}}}}));
    bool first = true;
    for (const auto& piece : split(call.arguments, call.pieces)) {
      f.events.push_back(chunk(json::object{
          {"tool_calls", json::array{json::object{
                             {"index", i}, {"function", json::object{{"arguments", piece}}}}}}}));
      if (i == 0 && first) f.mid_tool = f.events.size();
      first = false;
    }
    if (i == 0 && first) f.mid_tool = f.events.size();
  }
  f.finish_at = f.events.size();
  std::string finish = r.finish.value_or(r.tool_calls.empty() ? "stop" : "tool_calls");
  f.events.push_back(chunk(json::object{}, json::value(finish)));
  f.events.push_back(data_frame(json::object{
      {"id", "chatcmpl-fake"},
      {"object", "chat.completion.chunk"},
      {"created", 1700000000},
      {"model", model},
      {"choices", json::array{}},
      {"usage",
       json::object{{"prompt_tokens", 11}, {"completion_tokens", 7}, {"total_tokens", 18}}}}));
  f.events.push_back("data: [DONE]\n\n");
  return f;
}

Frames anthropic_frames(const FakeResponse& r, const std::string& model) {
  Frames f;
  f.events.push_back(named_frame(
      "message_start",
      json::object{{"type", "message_start"},
                   {"message", json::object{{"id", "msg_fake"},
                                            {"type", "message"},
                                            {"role", "assistant"},
                                            {"model", model},
                                            {"content", json::array{}},
                                            {"stop_reason", nullptr},
                                            {"stop_sequence", nullptr},
                                            {"usage", json::object{{"input_tokens", 11},
                                                                   {"output_tokens", 1}}}}}}));
  std::int64_t index = 0;
  auto block = [&](json::object content, std::string_view delta_type, std::string_view field,
                   const std::string& text, bool mark_mid_tool, std::size_t pieces = 3) {
    f.events.push_back(
        named_frame("content_block_start", json::object{{"type", "content_block_start"},
                                                        {"index", index},
                                                        {"content_block", std::move(content)}}));
    bool first = true;
    for (const auto& piece : split(text, pieces)) {
      f.events.push_back(
          named_frame("content_block_delta",
                      json::object{{"type", "content_block_delta"},
                                   {"index", index},
                                   {"delta", json::object{{"type", delta_type}, {field, piece}}}}));
      if (mark_mid_tool && first) f.mid_tool = f.events.size();
      first = false;
    }
    if (mark_mid_tool && first) f.mid_tool = f.events.size();
    f.events.push_back(named_frame("content_block_stop",
                                   json::object{{"type", "content_block_stop"}, {"index", index}}));
    ++index;
  };
  if (!r.reasoning.empty())
    block(json::object{{"type", "thinking"}, {"thinking", ""}}, "thinking_delta", "thinking",
          r.reasoning, false);
  if (!r.text.empty())
    block(json::object{{"type", "text"}, {"text", ""}}, "text_delta", "text", r.text, false);
  for (std::size_t i = 0; i < r.tool_calls.size(); ++i) {
    const auto& call = r.tool_calls[i];
    block(
        json::object{
            {"type", "tool_use"}, {"id", call.id}, {"name", call.name}, {"input", json::object{}}},
        "input_json_delta", "partial_json", call.arguments, i == 0, call.pieces);
  }
  f.finish_at = f.events.size();
  std::string finish = r.finish.value_or(r.tool_calls.empty() ? "end_turn" : "tool_use");
  f.events.push_back(named_frame(
      "message_delta",
      json::object{{"type", "message_delta"},
                   {"delta", json::object{{"stop_reason", finish}, {"stop_sequence", nullptr}}},
                   {"usage", json::object{{"output_tokens", 7}}}}));
  f.events.push_back(named_frame("message_stop", json::object{{"type", "message_stop"}}));
  return f;
}

// The body of an error answer in the API's format.
std::string error_body(const FakeResponse& r, bool anthropic) {
  json::object body =
      anthropic ? json::object{{"type", "error"},
                               {"error",
                                json::object{{"type", "api_error"}, {"message", r.error_message}}}}
                : json::object{{"error", json::object{{"message", r.error_message},
                                                      {"type", "server_error"},
                                                      {"code", nullptr}}}};
  return json::serialize(body);
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

// ---- FakeResponse -----------------------------------------------------------------------------

FakeResponse FakeResponse::with_text(std::string text) {
  FakeResponse r;
  r.text = std::move(text);
  return r;
}

FakeResponse FakeResponse::with_tool_call(std::string id, std::string name,
                                          const json::value& input) {
  return with_tool_calls({FakeToolCall{std::move(id), std::move(name), json::serialize(input)}});
}

FakeResponse FakeResponse::with_tool_calls(std::vector<FakeToolCall> calls) {
  FakeResponse r;
  r.tool_calls = std::move(calls);
  return r;
}

FakeResponse FakeResponse::http_error(unsigned status, std::string message) {
  FakeResponse r;
  r.status = status;
  r.error_message = std::move(message);
  return r;
}

std::string whole_response(const FakeResponse& r, std::string_view model, bool anthropic,
                           bool keep_alive) {
  std::string connection = keep_alive ? "keep-alive" : "close";
  if (r.status != 200) {
    std::string body = error_body(r, anthropic);
    return "HTTP/1.1 " + std::to_string(r.status) +
           " Error\r\nContent-Type: application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\nConnection: " + connection + "\r\n\r\n" + body;
  }
  std::string out =
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
      "Transfer-Encoding: chunked\r\nConnection: " +
      connection + "\r\n\r\n";
  Frames frames =
      anthropic ? anthropic_frames(r, std::string(model)) : openai_frames(r, std::string(model));
  // Each event one chunk of the chunked body.
  for (const auto& event : frames.events) {
    char size[16];
    auto [end, ec] = std::to_chars(size, size + sizeof size, event.size(), 16);
    (void)ec;
    out.append(size, end).append("\r\n").append(event).append("\r\n");
  }
  out += "0\r\n\r\n";
  return out;
}

std::optional<std::string> RecordedRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (iequals(k, name)) return v;
  return std::nullopt;
}

// ---- the server -------------------------------------------------------------------------------

struct FakeModelServer::Impl {
  static void report(FakeModelServer& self, const std::string& what) {
    if (self.handler_)
      self.handler_->connection_error(what);
    else
      std::cerr << "fake model server: " << what << "\n";
  }

  static asio::awaitable<void> accept_loop(FakeModelServer& self) {
    for (;;) {
      auto [ec, socket] = co_await self.acceptor_.async_accept(tuple_awaitable);
      if (ec) {
        // Closed: the server is stopping. Anything else leaves the model deaf: say so.
        if (ec != asio::error::operation_aborted) report(self, "accept: " + ec.message());
        co_return;
      }
      // A model streams small events: Nagle's algorithm would hold them back.
      socket.set_option(tcp::no_delay(true), ec);
      asio::co_spawn(self.ioc_, serve(self, std::move(socket)), [&self](std::exception_ptr e) {
        if (e) report(self, "connection: " + describe(e));
      });
    }
  }

  // Requests on one connection: by default one, and the response ends with the connection
  // (Connection: close); a response with keep_alive leaves it open for the next request.
  static asio::awaitable<void> serve(FakeModelServer& self, tcp::socket socket) {
    {
      std::lock_guard lock(self.mutex_);
      ++self.connections_;
    }
    if (self.handler_) {
      co_await serve_handled(self, beast::tcp_stream(std::move(socket)));
      co_return;
    }
    beast::flat_buffer buffer;
    for (;;) {
      bool again = co_await serve_one(self, socket, buffer);
      if (!again) co_return;
    }
  }

  // Requests answered by the handler, each in one write, while they ask for keep-alive. A
  // connection idle for a minute is closed (the server under test connects again).
  static asio::awaitable<void> serve_handled(FakeModelServer& self, beast::tcp_stream stream) {
    beast::flat_buffer buffer;
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(kMaxRequestBytes);
      stream.expires_after(60s);
      auto [ec, n] = co_await http::async_read(stream, buffer, parser, tuple_awaitable);
      if (ec) {
        if (ec != http::error::end_of_stream && ec != beast::error::timeout &&
            ec != asio::error::connection_reset && ec != asio::error::operation_aborted)
          report(self, "reading a request: " + ec.message());
        co_return;
      }
      bool keep_alive = parser.get().keep_alive();
      // Owned by this coroutine while it is written.
      std::string out = self.handler_->respond(parser.get(), keep_alive);
      stream.expires_after(60s);
      auto [wec, wn] = co_await asio::async_write(stream, asio::buffer(out), tuple_awaitable);
      if (wec) {
        report(self, "writing a response: " + wec.message());
        co_return;
      }
      if (!keep_alive) {
        stream.socket().shutdown(tcp::socket::shutdown_send, ec);
        co_return;
      }
    }
  }

  // One request; true when the connection stays open for another.
  static asio::awaitable<bool> serve_one(FakeModelServer& self, tcp::socket& socket,
                                         beast::flat_buffer& buffer) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(kMaxRequestBytes);
    auto [rec, read_bytes] = co_await http::async_read(socket, buffer, parser, tuple_awaitable);
    (void)read_bytes;
    if (rec) co_return false;
    auto& req = parser.get();

    RecordedRequest recorded;
    recorded.method = std::string(req.method_string());
    recorded.target = std::string(req.target());
    for (const auto& field : req)
      recorded.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    recorded.body = req.body();
    boost::system::error_code jec;
    recorded.json = json::parse(recorded.body, jec);
    if (jec) recorded.json = nullptr;
    std::string model;
    if (recorded.json.is_object())
      if (auto* m = recorded.json.get_object().if_contains("model"); m && m->is_string())
        model = std::string(m->get_string());
    std::string path = recorded.target.substr(0, recorded.target.find('?'));
    bool anthropic = ends_with(path, "/messages");
    bool openai = ends_with(path, "/chat/completions");

    FakeResponse r = self.take(std::move(recorded));
    asio::steady_timer timer(socket.get_executor());
    if (r.delay.count() > 0) {
      timer.expires_after(r.delay);
      co_await timer.async_wait(tuple_awaitable);
    }

    boost::system::error_code ec;
    if (req.method() != http::verb::post || (!anthropic && !openai)) {
      r = FakeResponse::http_error(404,
                                   "the fake model answers POST /chat/completions and "
                                   "POST /messages, not " +
                                       std::string(req.method_string()) + " " + path);
    }
    if (r.status != 200) {
      http::response<http::string_body> res{static_cast<http::status>(r.status), 11};
      res.set(http::field::content_type, "application/json");
      res.set(http::field::connection, "close");
      res.body() = error_body(r, anthropic);
      res.prepare_payload();
      co_await http::async_write(socket, res, tuple_awaitable);
      socket.shutdown(tcp::socket::shutdown_both, ec);
      co_return false;
    }

    Frames frames = anthropic ? anthropic_frames(r, model) : openai_frames(r, model);
    std::size_t count = frames.events.size();
    switch (r.cut) {
      case FakeResponse::Cut::None:
        break;
      case FakeResponse::Cut::BeforeAnything:
        count = 0;
        break;
      case FakeResponse::Cut::BeforeFinish:
        count = frames.finish_at;
        break;
      case FakeResponse::Cut::MidToolCall:
        count = frames.mid_tool ? frames.mid_tool : frames.finish_at;
        break;
    }

    http::response<http::empty_body> head{http::status::ok, 11};
    head.set(http::field::content_type, "text/event-stream");
    head.set(http::field::cache_control, "no-cache");
    bool keep_alive =
        r.connection != FakeResponse::Connection::Close && r.cut == FakeResponse::Cut::None;
    head.set(http::field::connection, keep_alive ? "keep-alive" : "close");
    head.chunked(true);
    http::response_serializer<http::empty_body> serializer{head};
    auto [hec, head_bytes] = co_await http::async_write_header(socket, serializer, tuple_awaitable);
    (void)head_bytes;
    if (hec) co_return false;
    for (std::size_t i = 0; i < count; ++i) {
      if (i > 0 && r.chunk_delay.count() > 0) {
        timer.expires_after(r.chunk_delay);
        co_await timer.async_wait(tuple_awaitable);
      }
      auto [wec, n] = co_await asio::async_write(
          socket, http::make_chunk(asio::buffer(frames.events[i])), tuple_awaitable);
      (void)n;
      if (wec) co_return false;
    }
    if (count == frames.events.size())
      co_await asio::async_write(socket, http::make_chunk_last(), tuple_awaitable);
    if (r.connection == FakeResponse::Connection::KeepAlive && keep_alive) co_return true;
    // A cut stream ends here too: the connection closes without the last chunk. So does a
    // KeepAliveThenClose one, after promising to stay open.
    socket.shutdown(tcp::socket::shutdown_both, ec);
    co_return false;
  }
};

FakeModelServer::FakeModelServer() {
  start();
}

FakeModelServer::FakeModelServer(FakeModelHandler& handler) : handler_(&handler) {
  start();
}

void FakeModelServer::start() {
  tcp::endpoint endpoint{asio::ip::address_v4::loopback(), 0};
  acceptor_.open(endpoint.protocol());
  acceptor_.set_option(tcp::acceptor::reuse_address(true));
  acceptor_.bind(endpoint);
  acceptor_.listen();
  port_ = acceptor_.local_endpoint().port();
  asio::co_spawn(ioc_, Impl::accept_loop(*this), [this](std::exception_ptr e) {
    if (e) Impl::report(*this, "accept loop: " + describe(e));
  });
  thread_ = std::thread([this] { ioc_.run(); });
  has_thread_clock_ = pthread_getcpuclockid(thread_.native_handle(), &thread_clock_) == 0;
}

std::int64_t FakeModelServer::thread_cpu_us() const {
  timespec ts{};
  if (!has_thread_clock_ || clock_gettime(thread_clock_, &ts) != 0) return 0;
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

FakeModelServer::~FakeModelServer() {
  // Connections still waiting (a delay, a hung model) are not waited for: their coroutines are
  // destroyed with the io_context.
  ioc_.stop();
  if (thread_.joinable()) thread_.join();
  boost::system::error_code ec;
  acceptor_.close(ec);
}

std::string FakeModelServer::base_url() const {
  return "http://127.0.0.1:" + std::to_string(port_);
}

void FakeModelServer::push(FakeResponse response) {
  std::lock_guard lock(mutex_);
  queue_.push_back(std::move(response));
}

std::size_t FakeModelServer::queued() const {
  std::lock_guard lock(mutex_);
  return queue_.size();
}

std::size_t FakeModelServer::connection_count() const {
  std::lock_guard lock(mutex_);
  return connections_;
}

std::size_t FakeModelServer::request_count() const {
  std::lock_guard lock(mutex_);
  return requests_.size();
}

std::vector<RecordedRequest> FakeModelServer::requests() const {
  std::lock_guard lock(mutex_);
  return requests_;
}

std::optional<RecordedRequest> FakeModelServer::wait_for_request(
    std::size_t index, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  if (!changed_.wait_for(lock, timeout, [&] { return requests_.size() > index; }))
    return std::nullopt;
  return requests_[index];
}

FakeResponse FakeModelServer::take(RecordedRequest request) {
  std::lock_guard lock(mutex_);
  requests_.push_back(std::move(request));
  changed_.notify_all();
  if (queue_.empty()) return FakeResponse::with_text("(fake model: no response queued)");
  FakeResponse r = std::move(queue_.front());
  queue_.pop_front();
  return r;
}

}  // namespace sb::test
