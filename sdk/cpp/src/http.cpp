#include "http.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/json/parse.hpp>
#include <boost/url/parse.hpp>

#include <array>
#include <stdexcept>

#include "net.hpp"
#include "switchboard/errors.hpp"

namespace switchboard::detail {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);
constexpr std::size_t kMaxResponseBytes = 64 * 1024 * 1024;

// ---- Endpoint -------------------------------------------------------------------------------

Endpoint Endpoint::parse(const std::string& base_url) {
  auto url = boost::urls::parse_uri(base_url);
  if (!url)
    throw std::invalid_argument("switchboard: \"" + base_url +
                                "\" is not a URL (expected http://HOST:PORT)");
  if (url->scheme() != "http")
    throw std::invalid_argument("switchboard: \"" + base_url +
                                "\": only http:// URLs are supported");
  Endpoint e;
  e.host = url->host_address();
  if (e.host.empty())
    throw std::invalid_argument("switchboard: \"" + base_url + "\" names no host");
  e.port = url->has_port() ? std::string(url->port()) : "80";
  e.base_path = url->encoded_path();
  while (!e.base_path.empty() && e.base_path.back() == '/')
    e.base_path.pop_back();
  return e;
}

// ---- errors ---------------------------------------------------------------------------------

void throw_if_error(const HttpResponse& response) {
  if (response.status < 400) return;
  boost::system::error_code ec;
  json::value body = json::parse(response.body, ec);
  if (!ec && body.is_object()) {
    const json::value* error = body.get_object().if_contains("error");
    if (error && error->is_object()) {
      const json::value* code = error->get_object().if_contains("code");
      const json::value* message = error->get_object().if_contains("message");
      if (code && code->is_string() && message && message->is_string())
        throw ServerError(response.status, std::string(code->get_string()),
                          std::string(message->get_string()));
    }
  }
  throw ServerError(response.status, "HTTP_" + std::to_string(response.status),
                    response.body.substr(0, 500));
}

json::value body_json(const HttpResponse& response) {
  if (response.body.empty()) return nullptr;
  boost::system::error_code ec;
  json::value v = json::parse(response.body, ec);
  if (ec)
    throw ConnectionError("INVALID_RESPONSE", "the server's answer is not JSON (" + ec.message() +
                                                  "): " + response.body.substr(0, 200));
  return v;
}

namespace {

std::string where(const Endpoint& e) {
  return "http://" + e.host + ":" + e.port;
}

ConnectionError connection_error(const Endpoint& e, const boost::system::error_code& ec,
                                 milliseconds timeout) {
  if (ec == beast::error::timeout)
    return ConnectionError("TIMEOUT", "no answer from " + where(e) + " within " +
                                          std::to_string(timeout.count()) + " ms");
  return ConnectionError("CONNECTION_FAILED", where(e) + ": " + ec.message());
}

// Resolves and connects within `timeout`.
asio::awaitable<beast::tcp_stream> connect(const Endpoint& e, milliseconds timeout) {
  auto executor = co_await asio::this_coro::executor;
  tcp::resolver resolver(executor);
  auto [rec, results] = co_await resolver.async_resolve(e.host, e.port, tuple_awaitable);
  if (rec) throw connection_error(e, rec, timeout);
  beast::tcp_stream stream(executor);
  stream.expires_after(timeout);
  auto [cec, ep] = co_await stream.async_connect(results, tuple_awaitable);
  if (cec) throw connection_error(e, cec, timeout);
  set_no_delay(stream.socket());
  co_return stream;
}

http::request<http::string_body> make_request(const Endpoint& e, std::string_view method,
                                              std::string target, std::string body) {
  http::request<http::string_body> req;
  req.method_string(method);
  req.target(target);
  req.version(11);
  req.set(http::field::host, e.host + ":" + e.port);
  req.set(http::field::user_agent, "switchboard-sdk-cpp");
  if (e.credentials) {
    if (!e.credentials->password().empty())
      req.set(http::field::authorization, "Bearer " + e.credentials->password());
    if (auto token = e.credentials->token(); !token.empty())
      req.set("X-Switchboard-Client-Token", token);
  }
  if (!body.empty()) req.set(http::field::content_type, "application/json");
  req.body() = std::move(body);
  req.keep_alive(true);
  req.prepare_payload();
  return req;
}

bool peer_closed(const boost::system::error_code& ec) {
  return ec == http::error::end_of_stream || ec == asio::error::eof ||
         ec == asio::error::connection_reset || ec == asio::error::broken_pipe;
}

}  // namespace

// ---- HttpConnection -------------------------------------------------------------------------

struct HttpConnection::State {
  Endpoint endpoint;
  std::optional<beast::tcp_stream> stream;
  beast::flat_buffer buffer;
};

HttpConnection::HttpConnection(Endpoint endpoint) : state_(std::make_unique<State>()) {
  state_->endpoint = std::move(endpoint);
}

HttpConnection::~HttpConnection() = default;

void HttpConnection::close() {
  if (!state_->stream) return;
  boost::system::error_code ignored;
  state_->stream->socket().shutdown(tcp::socket::shutdown_both, ignored);
  state_->stream->socket().close(ignored);
  state_->stream.reset();
  state_->buffer.clear();
}

asio::awaitable<HttpResponse> HttpConnection::request(std::string_view method, std::string target,
                                                      std::string body, milliseconds timeout) {
  State& s = *state_;
  for (int attempt = 0;; ++attempt) {
    bool reused = s.stream.has_value();
    if (!reused) s.stream.emplace(co_await connect(s.endpoint, timeout));
    auto req = make_request(s.endpoint, method, target, body);
    s.stream->expires_after(timeout);
    auto [wec, written] = co_await http::async_write(*s.stream, req, tuple_awaitable);
    boost::system::error_code ec = wec;
    bool answered = false;
    if (!ec) {
      http::response_parser<http::string_body> parser;
      parser.body_limit(kMaxResponseBytes);
      auto [rec, read] = co_await http::async_read(*s.stream, s.buffer, parser, tuple_awaitable);
      ec = rec;
      answered = parser.got_some();
      if (!ec) {
        auto res = parser.release();
        s.stream->expires_never();
        if (!res.keep_alive()) close();
        co_return HttpResponse{res.result_int(), std::move(res.body())};
      }
    }
    close();
    if (reused && attempt == 0 && !answered && peer_closed(ec)) continue;
    throw connection_error(s.endpoint, ec, timeout);
  }
}

asio::awaitable<HttpResponse> http_request(const Endpoint& endpoint, std::string_view method,
                                           std::string target, std::string body,
                                           milliseconds timeout) {
  HttpConnection connection(endpoint);
  co_return co_await connection.request(method, std::move(target), std::move(body), timeout);
}

// ---- SseParser ------------------------------------------------------------------------------

void SseParser::feed(std::string_view bytes, std::vector<SseEvent>& out) {
  std::size_t start = 0;
  if (skip_lf_ && !bytes.empty() && bytes.front() == '\n') start = 1;
  skip_lf_ = false;
  for (std::size_t i = start; i < bytes.size(); ++i) {
    char c = bytes[i];
    if (c != '\n' && c != '\r') continue;
    partial_.append(bytes.substr(start, i - start));
    line(partial_, out);
    partial_.clear();
    if (c == '\r') {
      if (i + 1 < bytes.size()) {
        if (bytes[i + 1] == '\n') ++i;
      } else {
        skip_lf_ = true;
      }
    }
    start = i + 1;
  }
  partial_.append(bytes.substr(start));
}

void SseParser::line(std::string_view text, std::vector<SseEvent>& out) {
  if (text.empty()) {
    if (has_data_) {
      if (!current_.data.empty() && current_.data.back() == '\n') current_.data.pop_back();
      out.push_back(std::move(current_));
    }
    current_ = SseEvent{};
    has_data_ = false;
    return;
  }
  if (text.front() == ':') return;  // a comment
  auto colon = text.find(':');
  std::string_view field = text.substr(0, colon);
  std::string_view value;
  if (colon != std::string_view::npos) {
    value = text.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    current_.data.append(value);
    current_.data.push_back('\n');
    has_data_ = true;
  } else if (field == "event") {
    current_.event = value.empty() ? "message" : std::string(value);
  } else if (field == "id") {
    if (value.find('\0') == std::string_view::npos) current_.id = std::string(value);
  }
}

// ---- SseStream ------------------------------------------------------------------------------

struct SseStream::State {
  explicit State(beast::tcp_stream s) : stream(std::move(s)) {}
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  std::array<char, 16384> chunk{};
};

SseStream::SseStream(std::unique_ptr<State> state) : state_(std::move(state)) {}
SseStream::~SseStream() = default;

void SseStream::close() {
  boost::system::error_code ignored;
  state_->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  state_->stream.socket().close(ignored);
}

asio::awaitable<std::unique_ptr<SseStream>> SseStream::open(const Endpoint& endpoint,
                                                            std::string target, Headers headers,
                                                            milliseconds timeout) {
  auto state = std::make_unique<State>(co_await connect(endpoint, timeout));
  auto req = make_request(endpoint, "GET", std::move(target), {});
  req.set(http::field::accept, "text/event-stream");
  req.set(http::field::cache_control, "no-cache");
  for (const auto& [name, value] : headers)
    req.set(name, value);
  state->stream.expires_after(timeout);
  auto [wec, written] = co_await http::async_write(state->stream, req, tuple_awaitable);
  if (wec) throw connection_error(endpoint, wec, timeout);
  state->parser.body_limit(boost::none);  // a stream is as long as the connection lives
  auto [hec, read] = co_await http::async_read_header(state->stream, state->buffer, state->parser,
                                                      tuple_awaitable);
  if (hec) throw connection_error(endpoint, hec, timeout);
  unsigned status = state->parser.get().result_int();
  if (status != 200) {
    // An error answer is small and complete: read it for its code and message.
    std::string body;
    while (!state->parser.is_done() && body.size() < 65536) {
      state->parser.get().body().data = state->chunk.data();
      state->parser.get().body().size = state->chunk.size();
      auto [ec, n] =
          co_await http::async_read(state->stream, state->buffer, state->parser, tuple_awaitable);
      body.append(state->chunk.data(), state->chunk.size() - state->parser.get().body().size);
      if (ec && ec != http::error::need_buffer) break;
    }
    throw_if_error(HttpResponse{status, body});
    throw ConnectionError("INVALID_RESPONSE",
                          "expected an event stream, got status " + std::to_string(status));
  }
  // A stream that was the client id's first use carries the token it was issued.
  if (auto it = state->parser.get().find("X-Switchboard-Client-Token");
      it != state->parser.get().end() && endpoint.credentials)
    endpoint.credentials->take(std::string(it->value()));
  state->stream.expires_never();
  co_return std::unique_ptr<SseStream>(new SseStream(std::move(state)));
}

asio::awaitable<std::optional<SseEvent>> SseStream::next(milliseconds idle_timeout) {
  State& s = *state_;
  while (next_ready_ >= ready_.size()) {
    ready_.clear();
    next_ready_ = 0;
    if (s.parser.is_done()) {
      error_ = "the server ended the stream";
      co_return std::nullopt;
    }
    s.parser.get().body().data = s.chunk.data();
    s.parser.get().body().size = s.chunk.size();
    s.stream.expires_after(idle_timeout);
    auto [ec, n] = co_await http::async_read_some(s.stream, s.buffer, s.parser, tuple_awaitable);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      if (ec == beast::error::timeout)
        error_ = "nothing arrived for " + std::to_string(idle_timeout.count()) + " ms";
      else if (peer_closed(ec) || ec == http::error::partial_message)
        error_ = "the connection was closed";
      else
        error_ = ec.message();
      co_return std::nullopt;
    }
    std::size_t got = s.chunk.size() - s.parser.get().body().size;
    parser_.feed(std::string_view(s.chunk.data(), got), ready_);
  }
  co_return std::move(ready_[next_ready_++]);
}

}  // namespace switchboard::detail
