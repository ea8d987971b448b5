#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/websocket.hpp>

#include "http.hpp"
#include "net.hpp"
#include "switchboard/errors.hpp"

namespace switchboard::detail {

namespace beast = boost::beast;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

struct WsConnection::State {
  explicit State(asio::any_io_executor executor) : ws(std::move(executor)) {}
  websocket::stream<beast::tcp_stream> ws;
  beast::flat_buffer buffer;
};

WsConnection::WsConnection(std::unique_ptr<State> state) : state_(std::move(state)) {}
WsConnection::~WsConnection() = default;

asio::awaitable<std::unique_ptr<WsConnection>> WsConnection::open(const Endpoint& endpoint,
                                                                  std::string target,
                                                                  milliseconds timeout,
                                                                  milliseconds idle_timeout) {
  auto executor = co_await asio::this_coro::executor;
  std::string where = "ws://" + endpoint.host + ":" + endpoint.port;
  auto fail = [&](const boost::system::error_code& ec) {
    if (ec == beast::error::timeout)
      return ConnectionError("TIMEOUT", "no answer from " + where + " within " +
                                            std::to_string(timeout.count()) + " ms");
    return ConnectionError("CONNECTION_FAILED", where + ": " + ec.message());
  };
  tcp::resolver resolver(executor);
  auto [rec, results] =
      co_await resolver.async_resolve(endpoint.host, endpoint.port, tuple_awaitable);
  if (rec) throw fail(rec);
  auto state = std::make_unique<State>(executor);
  auto& lowest = beast::get_lowest_layer(state->ws);
  lowest.expires_after(timeout);
  auto [cec, ep] = co_await lowest.async_connect(results, tuple_awaitable);
  if (cec) throw fail(cec);
  set_no_delay(lowest.socket());
  lowest.expires_never();

  websocket::stream_base::timeout timeouts;
  timeouts.handshake_timeout = timeout;
  timeouts.idle_timeout = idle_timeout;
  timeouts.keep_alive_pings = true;
  state->ws.set_option(timeouts);
  std::string password, token;
  if (endpoint.credentials) {
    password = endpoint.credentials->password();
    token = endpoint.credentials->token();
  }
  state->ws.set_option(
      websocket::stream_base::decorator([password, token](websocket::request_type& req) {
        req.set(beast::http::field::user_agent, "switchboard-sdk-cpp");
        if (!password.empty()) req.set(beast::http::field::authorization, "Bearer " + password);
        if (!token.empty()) req.set("X-Switchboard-Client-Token", token);
      }));
  state->ws.read_message_max(64 * 1024 * 1024);
  websocket::response_type res;
  auto [hec] = co_await state->ws.async_handshake(res, endpoint.host + ":" + endpoint.port,
                                                  std::move(target), tuple_awaitable);
  if (hec) {
    if (hec == websocket::error::upgrade_declined) {
      throw_if_error(HttpResponse{res.result_int(), res.body()});
      throw ConnectionError("INVALID_RESPONSE", where + " declined the WebSocket upgrade (status " +
                                                    std::to_string(res.result_int()) + ")");
    }
    throw fail(hec);
  }
  // A connection that was the client id's first use carries the token it was issued (also sent
  // as the first message, for browsers that cannot read these headers).
  if (auto it = res.find("X-Switchboard-Client-Token"); it != res.end() && endpoint.credentials)
    endpoint.credentials->take(std::string(it->value()));
  state->ws.text(true);
  co_return std::unique_ptr<WsConnection>(new WsConnection(std::move(state)));
}

asio::awaitable<std::optional<std::string>> WsConnection::read() {
  State& s = *state_;
  s.buffer.clear();
  auto [ec, n] = co_await s.ws.async_read(s.buffer, tuple_awaitable);
  if (ec) {
    if (ec == websocket::error::closed) {
      close_reason_ = std::string(s.ws.reason().reason.data(), s.ws.reason().reason.size());
      error_ = "the server closed the connection" +
               (close_reason_.empty() ? std::string() : " (" + close_reason_ + ")");
    } else if (ec == beast::error::timeout) {
      error_ = "the server stopped answering pings";
    } else {
      error_ = ec.message();
    }
    co_return std::nullopt;
  }
  auto data = s.buffer.cdata();
  co_return std::string(static_cast<const char*>(data.data()), data.size());
}

asio::awaitable<bool> WsConnection::write(std::string text) {
  auto [ec, n] = co_await state_->ws.async_write(asio::buffer(text), tuple_awaitable);
  co_return !ec;
}

asio::awaitable<void> WsConnection::close() {
  if (state_->ws.is_open()) {
    websocket::close_reason reason(websocket::close_code::normal);
    co_await state_->ws.async_close(reason, tuple_awaitable);
  }
  boost::system::error_code ignored;
  beast::get_lowest_layer(state_->ws).socket().close(ignored);
}

}  // namespace switchboard::detail
