#pragma once
// The Streamable HTTP transport: every message to the server is a POST to its MCP endpoint
// (Accept: application/json, text/event-stream), answered with one JSON message or an SSE
// stream of messages ending with the answer; 202 for a notification. Both eras:
//
// - 2025-11-25 and earlier: the `Mcp-Session-Id` the initialize answer gives is sent with every
//   later request; a GET stream carries the server's own requests and notifications (reopened
//   when it ends, unless the server has none: 405); DELETE ends the session at close.
//   notifications/cancelled is POSTed.
// - 2026-07-28: no session; every POST carries `MCP-Protocol-Version`, `Mcp-Method` and, for
//   tools/call, `Mcp-Name`. Cancelling a request closes its response stream (the spec's signal).
//
// The config's headers go with every request. An HTTP error answer to a request becomes a
// JSON-RPC error for it (its own when the body is one), so the waiting request ends with what
// the server said; a server that cannot be reached at all ends the channel.
#include <boost/asio/any_io_executor.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mcp/transport.hpp"

namespace sb::mcp {

struct HttpOptions {
  std::string name;  // the server's name, for log lines
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;
  std::chrono::milliseconds connect_timeout{10000};
  std::size_t max_message_bytes = 16 * 1024 * 1024;
};

std::unique_ptr<Transport> make_http_transport(boost::asio::any_io_executor executor,
                                               HttpOptions options);

}  // namespace sb::mcp
