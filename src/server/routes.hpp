#pragma once
#include <boost/asio/awaitable.hpp>

#include <optional>

#include "server/http.hpp"

namespace sb::server {

// Routes one request. Returns the response to write, or nullopt when the route turns the
// connection into a push stream (SSE, WebSocket): it has then set `take_over`, which the caller
// runs with the socket and the request once its HTTP session has ended.
asio::awaitable<std::optional<Response>> dispatch(ServerState& state, beast::tcp_stream& stream,
                                                  Request& req, TakeOver& take_over);

}  // namespace sb::server
