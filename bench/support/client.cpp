#include "support/client.hpp"

#include "support/run.hpp"

namespace bench {

std::exception_ptr run_to_end(asio::io_context& io, asio::awaitable<void> work) {
  std::exception_ptr failure;
  asio::co_spawn(io, std::move(work), [&](std::exception_ptr e) {
    failure = e;
    io.stop();
  });
  io.run();
  return failure;
}

asio::awaitable<void> sleep_for(Clock::duration d) {
  asio::steady_timer timer(co_await asio::this_coro::executor, d);
  co_await timer.async_wait(tuple_awaitable);
}

asio::awaitable<void> sleep_until(Clock::time_point t) {
  asio::steady_timer timer(co_await asio::this_coro::executor, t);
  co_await timer.async_wait(tuple_awaitable);
}

asio::awaitable<bool> Latch::wait(std::chrono::milliseconds timeout) {
  if (remaining_ == 0) co_return true;
  timer_.expires_after(timeout);
  co_await timer_.async_wait(tuple_awaitable);
  co_return remaining_ == 0;
}

Target Target::loopback(asio::io_context& io, unsigned short port,
                        std::chrono::milliseconds op_timeout) {
  return Target{io, tcp::endpoint(asio::ip::make_address_v4("127.0.0.1"), port),
                "127.0.0.1:" + std::to_string(port), op_timeout};
}

std::string assistant_text(const http::response<http::string_body>& res, std::string& text) {
  if (res.result() != http::status::ok)
    return "expected 200, got " + std::to_string(res.result_int()) + " " + clip(res.body());
  auto body = parse_json(res.body());
  if (!body) return "expected {info, parts}, got " + clip(res.body());
  return assistant_text(*body, text);
}

std::string assistant_text(const json::value& message, std::string& text) {
  const json::object* o = message.if_object();
  const json::value* info = o ? o->if_contains("info") : nullptr;
  const json::value* parts = o ? o->if_contains("parts") : nullptr;
  if (!info || !info->is_object() || !parts || !parts->is_array())
    return "expected {info, parts}, got " + clip(json::serialize(message));
  auto* role = string_field(*info, "role");
  auto* finish = string_field(*info, "finish");
  if (!role || *role != "assistant" || !finish || *finish != "stop" ||
      info->get_object().contains("error"))
    return "expected an assistant message with finish \"stop\" and no error, got " +
           clip(json::serialize(*info));
  text.clear();
  for (const auto& p : parts->get_array()) {
    auto* type = string_field(p, "type");
    auto* t = string_field(p, "text");
    if (type && *type == "text" && t) text += std::string_view(*t);
  }
  return {};
}

const json::string* string_field(const json::value& v, std::string_view key) {
  const auto* o = v.if_object();
  if (!o) return nullptr;
  const auto* f = o->if_contains(key);
  return f ? f->if_string() : nullptr;
}

std::optional<json::value> parse_json(std::string_view text) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec) return std::nullopt;
  return v;
}

http::request<http::string_body> make_request(http::verb verb, std::string_view target,
                                              const std::string& host, std::string body) {
  http::request<http::string_body> req{verb, target, 11};
  req.set(http::field::host, host);
  req.set(http::field::user_agent, program_name());
  if (!body.empty()) req.set(http::field::content_type, "application/json");
  req.keep_alive(true);
  req.body() = std::move(body);
  req.prepare_payload();
  return req;
}

asio::awaitable<HttpResult> http_call(beast::tcp_stream& stream, beast::flat_buffer& buffer,
                                      http::request<http::string_body>& req,
                                      std::chrono::milliseconds timeout) {
  HttpResult out;
  stream.expires_after(timeout);
  auto [wec, wn] = co_await http::async_write(stream, req, tuple_awaitable);
  if (wec) {
    out.error = "writing " + std::string(req.target()) + ": " + wec.message();
    co_return out;
  }
  http::response_parser<http::string_body> parser;
  parser.body_limit(256 * 1024 * 1024);  // a long session's message list is large
  auto [rec, rn] = co_await http::async_read(stream, buffer, parser, tuple_awaitable);
  if (rec) out.error = "reading the answer to " + std::string(req.target()) + ": " + rec.message();
  out.res = parser.release();
  stream.expires_never();
  co_return out;
}

asio::awaitable<std::string> connect_stream(beast::tcp_stream& stream, const tcp::endpoint& ep,
                                            std::chrono::milliseconds timeout) {
  stream.expires_after(timeout);
  auto [ec] = co_await stream.async_connect(ep, tuple_awaitable);
  stream.expires_never();
  if (ec) co_return "connect: " + ec.message();
  boost::system::error_code ignored;
  stream.socket().set_option(tcp::no_delay(true), ignored);
  co_return "";
}

asio::awaitable<std::string> check_health(const Target& target) {
  beast::tcp_stream stream(target.io.get_executor());
  if (auto err = co_await connect_stream(stream, target.endpoint, target.op_timeout); !err.empty())
    co_return "GET /health: " + err;
  beast::flat_buffer buffer;
  auto req = make_request(http::verb::get, "/health", target.host, "");
  auto r = co_await http_call(stream, buffer, req, target.op_timeout);
  if (!r.error.empty()) co_return r.error;
  auto body = parse_json(r.res.body());
  const json::value* healthy =
      body && body->is_object() ? body->get_object().if_contains("healthy") : nullptr;
  if (r.res.result() != http::status::ok || !healthy || !healthy->is_bool() || !healthy->get_bool())
    co_return "GET /health: expected 200 {healthy: true}, got " +
        std::to_string(r.res.result_int()) + " " + clip(r.res.body());
  co_return "";
}

json::array echo_tool_specs() {
  return json::array{json::object{
      {"id", "echo"},
      {"description", "Answers at once with input.text."},
      {"parameters",
       json::object{{"type", "object"},
                    {"properties", json::object{{"text", json::object{{"type", "string"}}}}},
                    {"required", json::array{"text"}}}}}};
}

std::optional<EchoRequest> echo_request(const json::value& request) {
  auto* request_id = string_field(request, "requestID");
  const json::value* input =
      request.is_object() ? request.get_object().if_contains("input") : nullptr;
  auto* text = input ? string_field(*input, "text") : nullptr;
  if (!request_id || !text) return std::nullopt;
  return EchoRequest{std::string(*request_id), std::string(*text)};
}

json::object echo_result(std::string_view text) {
  return json::object{{"status", "success"}, {"title", "echo"}, {"output", text}};
}

// ---- WsEchoClient -----------------------------------------------------------------------------

WsEchoClient::WsEchoClient(Target& target, std::string id)
    : target_(target),
      id_(std::move(id)),
      ws_(target.io.get_executor()),
      registered_(target.io.get_executor()) {}

asio::awaitable<std::string> WsEchoClient::connect() {
  auto& lowest = beast::get_lowest_layer(ws_);
  if (auto err = co_await connect_stream(lowest, target_.endpoint, target_.op_timeout);
      !err.empty())
    co_return err;
  lowest.expires_after(target_.op_timeout);
  auto [hec] =
      co_await ws_.async_handshake(target_.host, "/client-tools/ws/" + id_, tuple_awaitable);
  lowest.expires_never();
  if (hec) co_return "WebSocket handshake: " + hec.message();
  ws_.text(true);
  co_return "";
}

asio::awaitable<std::string> WsEchoClient::register_tool(std::optional<std::string> session_id) {
  got_registered_ = false;
  registered_error_.clear();
  json::object message{{"type", "register"}};
  if (session_id) message["sessionID"] = *session_id;
  message["tools"] = echo_tool_specs();
  outgoing_ = json::serialize(message);
  if (!serving_) {
    // Nothing reads the connection yet: the answer is read here.
    auto& lowest = beast::get_lowest_layer(ws_);
    lowest.expires_after(target_.op_timeout);
    auto [wec, wn] = co_await ws_.async_write(asio::buffer(outgoing_), tuple_awaitable);
    if (wec) co_return "sending register: " + wec.message();
    auto [rec, rn] = co_await ws_.async_read(buffer_, tuple_awaitable);
    lowest.expires_never();
    if (rec) co_return "waiting for registered: " + rec.message();
    std::string error = check_registered(
        std::string_view(static_cast<const char*>(buffer_.cdata().data()), buffer_.size()));
    buffer_.consume(buffer_.size());
    co_return error;
  }
  registered_.expires_after(target_.op_timeout);
  if (auto err = co_await write(outgoing_); !err.empty()) co_return "sending register: " + err;
  // The answer may have been read already, while the write completed.
  if (!got_registered_ && registered_error_.empty())
    co_await registered_.async_wait(tuple_awaitable);
  if (!registered_error_.empty()) co_return registered_error_;
  if (!got_registered_) co_return "no `registered` answer within the operation timeout";
  co_return "";
}

std::string WsEchoClient::check_registered(std::string_view text) const {
  auto msg = parse_json(text);
  auto* type = msg ? string_field(*msg, "type") : nullptr;
  const json::array* ids = nullptr;
  if (msg && msg->is_object())
    if (auto* f = msg->get_object().if_contains("toolIDs")) ids = f->if_array();
  if (!type || *type != "registered" || !ids || ids->size() != 1 || !(*ids)[0].is_string() ||
      (*ids)[0].get_string() != tool_id())
    return "expected {type: registered, toolIDs: [" + tool_id() + "]}, got " + clip(text);
  return "";
}

asio::awaitable<void> WsEchoClient::serve() {
  // Set now, not when the coroutine first runs: a register_tool() before that must not read too.
  serving_ = true;
  return answer_requests();
}

asio::awaitable<void> WsEchoClient::answer_requests() {
  for (;;) {
    auto [ec, n] = co_await ws_.async_read(buffer_, tuple_awaitable);
    if (ec) {
      problem("WebSocket read: " + ec.message());
      co_return;
    }
    std::string_view text(static_cast<const char*>(buffer_.cdata().data()), buffer_.size());
    auto msg = parse_json(text);
    auto* type = msg ? string_field(*msg, "type") : nullptr;
    if (type && *type == "request") {
      const json::value* req = msg->get_object().if_contains("request");
      auto echo = req ? echo_request(*req) : std::nullopt;
      if (!echo) {
        problem("malformed request " + clip(text));
      } else {
        reply_ = json::serialize(json::object{{"type", "result"},
                                              {"requestID", echo->request_id},
                                              {"result", echo_result(echo->text)}});
        buffer_.consume(buffer_.size());
        if (auto err = co_await write(reply_); !err.empty()) {
          problem("WebSocket write: " + err);
          co_return;
        }
        ++answered_;
        continue;
      }
    } else if (type && *type == "registered") {
      registered_error_ = check_registered(text);
      got_registered_ = true;
      registered_.cancel();
    } else {
      // An error (a refused result or registration), a cancel (the server gave up on a call),
      // or garbage.
      problem("unexpected message " + clip(text));
      if (type && *type == "error") {
        registered_error_ = "error: " + clip(text);
        registered_.cancel();
      }
    }
    buffer_.consume(buffer_.size());
  }
}

void WsEchoClient::close() {
  boost::system::error_code ignored;
  beast::get_lowest_layer(ws_).socket().close(ignored);
}

asio::awaitable<std::string> WsEchoClient::write(const std::string& text) {
  beast::get_lowest_layer(ws_).expires_after(target_.op_timeout);
  auto [ec, n] = co_await ws_.async_write(asio::buffer(text), tuple_awaitable);
  beast::get_lowest_layer(ws_).expires_never();
  co_return ec ? ec.message() : "";
}

void WsEchoClient::problem(const std::string& what) {
  if (!target_.stopping) problems().add("client " + id_ + ": " + what);
}

}  // namespace bench
