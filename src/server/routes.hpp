#pragma once
#include <boost/asio/awaitable.hpp>

#include <optional>

#include "server/http.hpp"

namespace sb::server {

// Routes one request. Returns the response to write, or nullopt when the route took the
// connection over (SSE, WebSocket) and is done with it; the caller then closes nothing.
asio::awaitable<std::optional<Response>> dispatch(ServerState& state, beast::tcp_stream& stream,
                                                  Request& req);

}  // namespace sb::server
