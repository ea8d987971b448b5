#include "net_client.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include <algorithm>
#include <cctype>
#include <functional>
#include <future>
#include <memory>
#include <stdexcept>

namespace sb::test {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::optional<std::string> find_header(const Headers& headers, std::string_view name) {
  for (const auto& [k, v] : headers)
    if (iequals(k, name)) return v;
  return std::nullopt;
}

tcp::endpoint loopback(unsigned short port) {
  return {asio::ip::address_v4::loopback(), port};
}

std::string clip(std::string_view s, std::size_t max = 2000) {
  if (s.size() <= max) return std::string(s);
  return std::string(s.substr(0, max)) + "... (" + std::to_string(s.size()) + " bytes)";
}

std::chrono::milliseconds remaining(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(left, 0ms);
}

// Runs one asynchronous operation on an io_context that nothing else runs, bounded by `timeout`.
// `start` receives a completion handler taking (error_code, bytes). On timeout the socket's
// operations are cancelled and asio::error::timed_out is returned.
error_code run_op(asio::io_context& ioc, tcp::socket& socket, std::chrono::milliseconds timeout,
                  std::size_t& bytes,
                  const std::function<void(std::function<void(error_code, std::size_t)>)>& start) {
  std::optional<std::pair<error_code, std::size_t>> result;
  start([&result](error_code ec, std::size_t n) { result.emplace(ec, n); });
  ioc.restart();
  ioc.run_for(timeout);
  if (!result) {
    error_code ignored;
    socket.cancel(ignored);
    ioc.restart();
    ioc.run();
    bytes = result ? result->second : 0;
    return asio::error::timed_out;
  }
  bytes = result->second;
  return result->first;
}

error_code connect_socket(asio::io_context& ioc, tcp::socket& socket, unsigned short port,
                          std::chrono::milliseconds timeout) {
  std::size_t ignored = 0;
  return run_op(ioc, socket, timeout, ignored, [&](auto handler) {
    socket.async_connect(loopback(port), [handler](error_code ec) { handler(ec, 0); });
  });
}

// Parses one complete HTTP response from the front of `buf` and removes it. nullopt when more
// bytes are needed; `eof` says no more will come (a body delimited by the end of the connection).
std::optional<HttpResponse> take_response(std::string& buf, bool eof) {
  http::response_parser<http::string_body> parser;
  parser.body_limit(boost::none);
  parser.eager(true);
  std::size_t used = 0;
  error_code ec;
  while (used < buf.size() && !parser.is_done()) {
    std::size_t n = parser.put(asio::buffer(buf.data() + used, buf.size() - used), ec);
    used += n;
    if (ec == http::error::need_more) {
      ec = {};
      if (n == 0) break;
      continue;
    }
    if (ec)
      throw std::runtime_error("malformed HTTP response (" + ec.message() + "): " + clip(buf));
    if (n == 0) break;
  }
  if (!parser.is_done() && eof && parser.is_header_done()) {
    parser.put_eof(ec);
    if (ec) return std::nullopt;
  }
  if (!parser.is_done()) return std::nullopt;
  auto res = parser.release();
  HttpResponse out;
  out.status = res.result_int();
  for (const auto& field : res)
    out.headers.emplace_back(field.name_string(), field.value());
  out.body = std::move(res.body());
  buf.erase(0, used);
  return out;
}

}  // namespace

// ---- HttpResponse -----------------------------------------------------------------------------

std::optional<std::string> HttpResponse::header(std::string_view name) const {
  return find_header(headers, name);
}

json::value HttpResponse::json() const {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec)
    throw std::runtime_error("response body is not JSON (" + ec.message() + "): " + describe());
  return v;
}

std::string HttpResponse::error_code() const {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec || !v.is_object()) return "";
  const auto* err = v.get_object().if_contains("error");
  if (!err || !err->is_object()) return "";
  const auto* code = err->get_object().if_contains("code");
  return code && code->is_string() ? std::string(code->get_string()) : "";
}

std::string HttpResponse::error_message() const {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec || !v.is_object()) return "";
  const auto* err = v.get_object().if_contains("error");
  if (!err || !err->is_object()) return "";
  const auto* msg = err->get_object().if_contains("message");
  return msg && msg->is_string() ? std::string(msg->get_string()) : "";
}

std::string HttpResponse::describe() const {
  return std::to_string(status) + " " + clip(body);
}

// ---- http_request -----------------------------------------------------------------------------

HttpResponse http_request(unsigned short port, std::string_view method, std::string_view target,
                          std::string_view body, const Headers& headers,
                          std::chrono::milliseconds timeout) {
  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  http::request<http::string_body> req;
  req.method_string(method);
  req.target(target);
  req.version(11);
  req.set(http::field::host, "127.0.0.1:" + std::to_string(port));
  for (const auto& [name, value] : headers)
    req.insert(name, value);
  if (!body.empty() && !find_header(headers, "content-type"))
    req.set(http::field::content_type, "application/json");
  req.body() = std::string(body);
  if (!find_header(headers, "content-length") && !find_header(headers, "transfer-encoding"))
    req.prepare_payload();

  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(boost::none);
  error_code connect_ec, write_ec, read_ec;
  bool read_done = false;

  auto on_read = [&](error_code ec, std::size_t) {
    read_ec = ec;
    read_done = true;
  };
  stream.expires_after(timeout);
  stream.async_connect(loopback(port), [&](error_code ec) {
    if (ec) {
      connect_ec = ec;
      return;
    }
    http::async_write(stream, req, [&](error_code ec, std::size_t) {
      // Even when the write fails (a server that answers 413 and closes before reading the
      // whole body), the response may already be there.
      write_ec = ec;
      http::async_read(stream, buffer, parser, on_read);
    });
  });
  ioc.run();

  std::string what = std::string(method) + " " + std::string(target);
  if (connect_ec) throw std::runtime_error(what + ": connect failed: " + connect_ec.message());
  if (!read_done || read_ec) {
    std::string msg = what + ": no response: " + (read_done ? read_ec.message() : "not read");
    if (write_ec) msg += " (the request write failed: " + write_ec.message() + ")";
    if (read_ec == beast::error::timeout)
      msg += " (timeout after " + std::to_string(timeout.count()) + " ms)";
    throw std::runtime_error(msg);
  }
  auto res = parser.release();
  HttpResponse out;
  out.status = res.result_int();
  for (const auto& field : res)
    out.headers.emplace_back(field.name_string(), field.value());
  out.body = std::move(res.body());
  error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  return out;
}

HttpResponse http_get(unsigned short port, std::string_view target,
                      std::chrono::milliseconds timeout) {
  return http_request(port, "GET", target, {}, {}, timeout);
}

HttpResponse http_post(unsigned short port, std::string_view target, const json::value& body,
                       std::chrono::milliseconds timeout) {
  return http_request(port, "POST", target, json::serialize(body), {}, timeout);
}

HttpResponse http_delete(unsigned short port, std::string_view target, const json::value& body,
                         std::chrono::milliseconds timeout) {
  return http_request(port, "DELETE", target, json::serialize(body), {}, timeout);
}

// ---- RawConnection ----------------------------------------------------------------------------

RawConnection::RawConnection(unsigned short port, std::chrono::milliseconds timeout) {
  if (auto ec = connect_socket(ioc_, socket_, port, timeout))
    throw std::runtime_error("raw connect to port " + std::to_string(port) +
                             " failed: " + ec.message());
}

RawConnection::~RawConnection() {
  close();
}

void RawConnection::send(std::string_view bytes, std::chrono::milliseconds timeout) {
  std::size_t n = 0;
  auto ec = run_op(ioc_, socket_, timeout, n, [&](auto handler) {
    asio::async_write(socket_, asio::buffer(bytes.data(), bytes.size()), handler);
  });
  if (ec) throw std::runtime_error("raw send failed: " + ec.message());
}

std::optional<HttpResponse> RawConnection::read_response(std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  for (;;) {
    if (auto res = take_response(received_, eof_)) return res;
    if (eof_) return std::nullopt;
    auto left = remaining(deadline);
    if (left.count() == 0) return std::nullopt;
    std::array<char, 8192> buf;
    std::size_t n = 0;
    auto ec = run_op(ioc_, socket_, left, n,
                     [&](auto handler) { socket_.async_read_some(asio::buffer(buf), handler); });
    received_.append(buf.data(), n);
    if (ec == asio::error::timed_out) return take_response(received_, eof_);
    if (ec) eof_ = true;
  }
}

bool RawConnection::wait_closed(std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (!eof_) {
    auto left = remaining(deadline);
    if (left.count() == 0) return false;
    std::array<char, 8192> buf;
    std::size_t n = 0;
    auto ec = run_op(ioc_, socket_, left, n,
                     [&](auto handler) { socket_.async_read_some(asio::buffer(buf), handler); });
    received_.append(buf.data(), n);
    if (ec == asio::error::timed_out) return false;
    if (ec) eof_ = true;
  }
  return true;
}

void RawConnection::shutdown_send() {
  error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_send, ignored);
}

void RawConnection::close() {
  error_code ignored;
  if (socket_.is_open()) {
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }
}

// ---- SseClient --------------------------------------------------------------------------------

json::value SseEvent::json() const {
  error_code ec;
  json::value v = json::parse(data, ec);
  if (ec) throw std::runtime_error("SSE data is not JSON (" + ec.message() + "): " + clip(data));
  return v;
}

SseClient::SseClient(unsigned short port, std::string target)
    : SseClient(port, std::move(target), Options{}) {}

SseClient::SseClient(unsigned short port, std::string target, Options options)
    : options_(std::move(options)) {
  auto deadline = Clock::now() + options_.connect_timeout;
  std::string what = "SSE GET " + target;
  socket_.open(tcp::v4());
  if (options_.receive_buffer > 0)
    socket_.set_option(asio::socket_base::receive_buffer_size(options_.receive_buffer));
  if (auto ec = connect_socket(ioc_, socket_, port, remaining(deadline)))
    throw std::runtime_error(what + ": connect failed: " + ec.message());

  std::string req = "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) +
                    "\r\nAccept: text/event-stream\r\nCache-Control: no-cache\r\n";
  if (options_.last_event_id) req += "Last-Event-ID: " + *options_.last_event_id + "\r\n";
  for (const auto& [k, v] : options_.headers)
    req += k + ": " + v + "\r\n";
  req += "\r\n";
  std::size_t n = 0;
  auto ec = run_op(ioc_, socket_, remaining(deadline), n,
                   [&](auto handler) { asio::async_write(socket_, asio::buffer(req), handler); });
  if (ec) throw std::runtime_error(what + ": request write failed: " + ec.message());

  std::string head;
  std::size_t end = std::string::npos;
  while ((end = head.find("\r\n\r\n")) == std::string::npos) {
    std::size_t got = 0;
    ec = run_op(ioc_, socket_, remaining(deadline), got,
                [&](auto handler) { socket_.async_read_some(asio::buffer(read_buf_), handler); });
    head.append(read_buf_.data(), got);
    if (ec)
      throw std::runtime_error(what + ": no response head (" + ec.message() +
                               "), got: " + clip(head));
  }
  std::string rest = head.substr(end + 4);
  head.resize(end + 2);
  parse_head(head);
  if (!rest.empty()) on_body(rest);
  if (options_.read) resume_reading();
}

SseClient::~SseClient() {
  close();
}

void SseClient::parse_head(const std::string& head) {
  std::size_t pos = head.find("\r\n");
  std::string status_line = head.substr(0, pos);
  // "HTTP/1.1 200 OK"
  auto sp = status_line.find(' ');
  if (sp == std::string::npos || status_line.compare(0, 5, "HTTP/") != 0)
    throw std::runtime_error("SSE: malformed status line: " + status_line);
  status_ = static_cast<unsigned>(std::stoul(status_line.substr(sp + 1, 3)));
  pos += 2;
  while (pos < head.size()) {
    std::size_t eol = head.find("\r\n", pos);
    if (eol == std::string::npos) eol = head.size();
    std::string line = head.substr(pos, eol - pos);
    pos = eol + 2;
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t'))
      value.pop_back();
    headers_.emplace_back(std::move(name), std::move(value));
  }
  if (auto te = header("transfer-encoding")) {
    std::string lower = *te;
    std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
    chunked_ = lower.find("chunked") != std::string::npos;
  }
  if (!chunked_) {
    if (auto cl = header("content-length")) content_left_ = std::stoull(*cl);
  }
}

std::optional<std::string> SseClient::header(std::string_view name) const {
  return find_header(headers_, name);
}

void SseClient::resume_reading() {
  if (reader_.joinable() || !socket_.is_open()) return;
  {
    std::lock_guard lock(mutex_);
    if (closed_) return;
  }
  reader_ = std::thread([this] {
    start_read();
    ioc_.restart();
    ioc_.run();
  });
}

void SseClient::start_read() {
  socket_.async_read_some(asio::buffer(read_buf_), [this](error_code ec, std::size_t n) {
    if (n > 0) on_body(std::string_view(read_buf_.data(), n));
    bool ended;
    {
      std::lock_guard lock(mutex_);
      ended = closed_;
    }
    if (ec || ended) {
      std::lock_guard lock(mutex_);
      closed_ = true;
      changed_.notify_all();
      return;
    }
    start_read();
  });
}

void SseClient::on_body(std::string_view bytes) {
  {
    std::lock_guard lock(mutex_);
    body_bytes_ += bytes.size();
  }
  if (!chunked_) {
    if (content_left_) {
      auto take = static_cast<std::size_t>(std::min<std::uint64_t>(*content_left_, bytes.size()));
      on_text(bytes.substr(0, take));
      *content_left_ -= take;
      if (*content_left_ == 0) {
        std::lock_guard lock(mutex_);
        closed_ = true;
        changed_.notify_all();
      }
      return;
    }
    on_text(bytes);
    return;
  }
  raw_.append(bytes);
  std::size_t pos = 0;
  for (;;) {
    if (chunk_state_ == ChunkState::Size) {
      std::size_t eol = raw_.find("\r\n", pos);
      if (eol == std::string::npos) break;
      std::string size_text = raw_.substr(pos, eol - pos);
      if (auto semi = size_text.find(';'); semi != std::string::npos) size_text.resize(semi);
      pos = eol + 2;
      chunk_left_ = std::stoull(size_text, nullptr, 16);
      if (chunk_left_ == 0) {
        chunk_state_ = ChunkState::Done;
        std::lock_guard lock(mutex_);
        closed_ = true;
        changed_.notify_all();
        break;
      }
      chunk_state_ = ChunkState::Data;
    } else if (chunk_state_ == ChunkState::Data) {
      if (pos >= raw_.size()) break;
      auto take = static_cast<std::size_t>(std::min<std::uint64_t>(chunk_left_, raw_.size() - pos));
      on_text(std::string_view(raw_).substr(pos, take));
      pos += take;
      chunk_left_ -= take;
      if (chunk_left_ == 0) chunk_state_ = ChunkState::DataEnd;
    } else if (chunk_state_ == ChunkState::DataEnd) {
      if (raw_.size() - pos < 2) break;
      pos += 2;  // the CRLF after the chunk data
      chunk_state_ = ChunkState::Size;
    } else {
      pos = raw_.size();
      break;
    }
  }
  raw_.erase(0, pos);
}

void SseClient::on_text(std::string_view text) {
  std::vector<sse::SseEvent> decoded;
  bool failed = !decoder_.feed(text, decoded);
  if (decoded.empty() && !failed) return;
  std::lock_guard lock(mutex_);
  for (auto& e : decoded)
    events_.push_back(SseEvent{e.id.empty() ? std::nullopt : std::optional<std::string>(e.id),
                               std::move(e.type), std::move(e.data)});
  if (failed) closed_ = true;
  changed_.notify_all();
}

std::optional<SseEvent> SseClient::next_event(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return !events_.empty() || closed_; });
  if (events_.empty()) return std::nullopt;
  SseEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

std::optional<SseEvent> SseClient::next_event_named(std::string_view event,
                                                    std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  for (;;) {
    auto e = next_event(remaining(deadline));
    if (!e) return std::nullopt;
    if (e->event == event) return e;
  }
}

bool SseClient::wait_closed(std::chrono::milliseconds timeout) {
  resume_reading();
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return closed_; });
}

bool SseClient::closed() const {
  std::lock_guard lock(mutex_);
  return closed_;
}

std::size_t SseClient::body_bytes() const {
  std::lock_guard lock(mutex_);
  return body_bytes_;
}

void SseClient::close() {
  if (reader_.joinable()) {
    asio::post(ioc_, [this] {
      error_code ignored;
      socket_.shutdown(tcp::socket::shutdown_both, ignored);
      socket_.close(ignored);
    });
    reader_.join();
  }
  error_code ignored;
  if (socket_.is_open()) {
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }
  std::lock_guard lock(mutex_);
  closed_ = true;
  changed_.notify_all();
}

// ---- WsClient ---------------------------------------------------------------------------------

WsClient::WsClient(unsigned short port, std::string target, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  std::string what = "WebSocket " + target;
  auto& socket = ws_.next_layer();
  if (auto ec = connect_socket(ioc_, socket, port, remaining(deadline)))
    throw std::runtime_error(what + ": connect failed: " + ec.message());
  websocket::response_type res;
  std::string host = "127.0.0.1:" + std::to_string(port);
  std::size_t ignored = 0;
  auto ec = run_op(ioc_, socket, remaining(deadline), ignored, [&](auto handler) {
    ws_.async_handshake(res, host, target, [handler](error_code ec) { handler(ec, 0); });
  });
  if (ec)
    throw std::runtime_error(what + ": handshake failed (" + ec.message() + "), HTTP status " +
                             std::to_string(res.result_int()) + ": " + clip(res.body()));
  ws_.text(true);
  reader_ = std::thread([this] {
    start_read();
    ioc_.restart();
    ioc_.run();
  });
}

WsClient::~WsClient() {
  stop_reader();
}

void WsClient::start_read() {
  ws_.async_read(buffer_, [this](error_code ec, std::size_t) {
    std::lock_guard lock(mutex_);
    if (ec) {
      closed_ = true;
      close_description_ = ec.message();
      if (ws_.reason().code != websocket::close_code::none || !ws_.reason().reason.empty())
        close_description_ += " (close code " + std::to_string(ws_.reason().code) + ": " +
                              std::string(ws_.reason().reason.c_str()) + ")";
      changed_.notify_all();
      return;
    }
    messages_.push_back(beast::buffers_to_string(buffer_.data()));
    buffer_.consume(buffer_.size());
    changed_.notify_all();
    start_read();
  });
}

void WsClient::send_text(std::string text, std::chrono::milliseconds timeout) {
  if (broken_) throw std::runtime_error("WebSocket: an earlier write timed out");
  if (closed())
    throw std::runtime_error("WebSocket: send on a closed connection (" + close_description() +
                             ")");
  auto payload = std::make_shared<std::string>(std::move(text));
  auto done = std::make_shared<std::promise<error_code>>();
  auto result = done->get_future();
  asio::post(ioc_, [this, payload, done] {
    ws_.async_write(asio::buffer(*payload),
                    [payload, done](error_code ec, std::size_t) { done->set_value(ec); });
  });
  if (result.wait_for(timeout) != std::future_status::ready) {
    broken_ = true;
    throw std::runtime_error("WebSocket: write did not finish within " +
                             std::to_string(timeout.count()) + " ms");
  }
  if (auto ec = result.get()) throw std::runtime_error("WebSocket: write failed: " + ec.message());
}

void WsClient::send_json(const json::value& message, std::chrono::milliseconds timeout) {
  send_text(json::serialize(message), timeout);
}

std::optional<std::string> WsClient::next_text(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return !messages_.empty() || closed_; });
  if (messages_.empty()) return std::nullopt;
  std::string m = std::move(messages_.front());
  messages_.pop_front();
  return m;
}

std::optional<json::value> WsClient::next_message(std::chrono::milliseconds timeout) {
  auto text = next_text(timeout);
  if (!text) return std::nullopt;
  error_code ec;
  json::value v = json::parse(*text, ec);
  if (ec)
    throw std::runtime_error("WebSocket message is not JSON (" + ec.message() +
                             "): " + clip(*text));
  return v;
}

std::optional<json::value> WsClient::next_message_of_type(std::string_view type,
                                                          std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  for (;;) {
    auto m = next_message(remaining(deadline));
    if (!m) return std::nullopt;
    if (const auto* obj = m->if_object()) {
      if (const auto* t = obj->if_contains("type"); t && t->is_string() && t->get_string() == type)
        return m;
    }
  }
}

bool WsClient::wait_closed(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return closed_; });
}

bool WsClient::closed() const {
  std::lock_guard lock(mutex_);
  return closed_;
}

std::string WsClient::close_description() const {
  std::lock_guard lock(mutex_);
  return close_description_;
}

void WsClient::close() {
  if (!reader_.joinable()) return;
  if (!closed() && !broken_) {
    auto done = std::make_shared<std::promise<void>>();
    auto result = done->get_future();
    asio::post(ioc_, [this, done] {
      ws_.async_close(websocket::close_code::normal, [done](error_code) { done->set_value(); });
    });
    result.wait_for(2s);
  }
  stop_reader();
}

void WsClient::drop() {
  stop_reader();
}

void WsClient::stop_reader() {
  if (reader_.joinable()) {
    asio::post(ioc_, [this] {
      error_code ignored;
      ws_.next_layer().shutdown(tcp::socket::shutdown_both, ignored);
      ws_.next_layer().close(ignored);
    });
    reader_.join();
  }
  error_code ignored;
  if (ws_.next_layer().is_open()) {
    ws_.next_layer().shutdown(tcp::socket::shutdown_both, ignored);
    ws_.next_layer().close(ignored);
  }
  std::lock_guard lock(mutex_);
  if (!closed_) {
    closed_ = true;
    close_description_ = "closed by the test";
  }
  changed_.notify_all();
}

}  // namespace sb::test
