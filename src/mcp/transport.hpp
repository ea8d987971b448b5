#pragma once
// A channel of JSON-RPC messages to one MCP server: stdio (a child process) or Streamable HTTP.
// The client (mcp/client.hpp) speaks the protocol over it; the transport only moves messages.
// Not thread-safe: use from the server's executor only.
#include <functional>
#include <string>

#include "mcp/jsonrpc.hpp"
#include "util/error.hpp"

namespace sb::mcp {

class Transport {
 public:
  struct Events {
    // Every message the server sent, in order.
    std::function<void(Message)> message;
    // The channel ended for good (the process exited, the stream broke, it misbehaved): once,
    // with why; nothing is delivered after it.
    std::function<void(const std::string& reason)> closed;
  };

  virtual ~Transport() = default;
  // Starts the channel (the stdio server's process). Errors: the program cannot be started.
  virtual Result<void> start(Events events) = 0;
  // Queues a message for the server. A notifications/cancelled for a request the transport can
  // cancel on its own (an HTTP request's stream) may be turned into that.
  virtual void send(const Message& message) = 0;
  // The protocol version chosen (HTTP sends it as a header on every later request).
  virtual void set_protocol_version(const std::string& version) { (void)version; }
  // Ends the channel: no events after this call. Gracefully when it can (stdio: closes the
  // server's input, then SIGTERM and SIGKILL to its process group if it does not exit).
  virtual void close() = 0;
};

}  // namespace sb::mcp
