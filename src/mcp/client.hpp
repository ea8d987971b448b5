#pragma once
// One MCP server as a client sees it: the protocol over a Transport. Speaks both eras of MCP:
// the stateless 2026-07-28 revision (no handshake; every request carries its version and our
// capabilities in `_meta`; server/discover; input requests embedded in results, MRTR) and the
// stateful revisions 2025-11-25 / 2025-06-18 (and 2025-03-26, 2024-11-05: initialize, then
// requests). Which one is settled at connect(): a server/discover probe first, as the
// 2026-07-28 stdio transport asks of dual-era clients; any answer but a modern one (an error, no
// answer within a few seconds) means the initialize handshake.
//
// Every request has a deadline (ClientOptions::timeout; a tool call's is pushed back by each
// progress notification) and a cancellation slot; both end the request at once and tell the
// server (notifications/cancelled). When the channel closes every waiting request ends with an
// error naming the server and why.
//
// Not thread-safe: use from the server's executor only.
#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mcp/transport.hpp"
#include "util/abort.hpp"

namespace sb::mcp {

// The revisions we speak, newest first.
inline constexpr std::string_view kModernVersion = "2026-07-28";
inline constexpr std::string_view kLegacyVersions[] = {"2025-11-25", "2025-06-18", "2025-03-26",
                                                       "2024-11-05"};

struct ToolInfo {
  std::string name;
  std::string title;
  std::string description;
  json::object input_schema;
};

// A tool call's progress: MCP's notifications/progress params.
struct Progress {
  double progress = 0;
  std::optional<double> total;
  std::string message;
};
using ProgressHandler = std::function<void(const Progress&)>;

// What a server asks of us while it works (a legacy server request, or an input request of a
// modern result): `method` is elicitation/create, sampling/createMessage or roots/list; the
// answer is the method's result, or an error the server is sent. `call` is the tool call it
// came with, when known (the id given to call_tool), for a question to the right session.
using InputHandler = std::function<boost::asio::awaitable<Result<json::object>>(
    const std::string& method, json::object params, const std::string& call)>;

struct ClientOptions {
  std::string name;  // the server's name in the config, for messages
  std::chrono::milliseconds timeout{30000};
  // How long the server/discover probe waits before taking the server for a legacy one.
  std::chrono::milliseconds probe_timeout{3000};
  std::filesystem::path root;  // roots/list answers this directory
  std::string client_version = "1.0.0";
  bool elicitation = true;  // offer elicitation (form mode) in our capabilities
};

using ResponseSignature = void(Result<json::object>);
using ResponseHandler = boost::asio::any_completion_handler<ResponseSignature>;

class Client : public std::enable_shared_from_this<Client> {
 public:
  struct Callbacks {
    std::function<void()> tools_changed;             // notifications/tools/list_changed
    std::function<void(const std::string&)> closed;  // the channel ended, with why (once)
    InputHandler input;                              // unset: such requests are refused
  };

  static std::shared_ptr<Client> create(boost::asio::any_io_executor executor,
                                        std::unique_ptr<Transport> transport, ClientOptions options,
                                        Callbacks callbacks);
  ~Client();

  // Starts the transport and settles the protocol (see above). Errors name the server and say
  // what went wrong; the client is then closed.
  boost::asio::awaitable<Result<void>> connect();
  // Every tool, through all pages of tools/list. Tools without a usable name or schema are
  // left out (and logged).
  boost::asio::awaitable<Result<std::vector<ToolInfo>>> list_tools();
  // tools/call: the CallToolResult (of the last round when a modern server asked for input).
  // `call` names the call for the InputHandler. An abort (the turn's) tells the server and ends
  // the call with Unavailable.
  boost::asio::awaitable<Result<json::object>> call_tool(std::string name, json::object arguments,
                                                         std::string call, ProgressHandler progress,
                                                         std::shared_ptr<AbortSignal> abort);

  // One request; the result object or an error. Exposed for call_tool and tests.
  template <typename CompletionToken>
  auto async_request(std::string method, json::object params, ProgressHandler progress,
                     CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, ResponseSignature>(
        [self = shared_from_this()](auto handler, std::string method, json::object params,
                                    ProgressHandler progress) {
          self->start_request(std::move(method), std::move(params), std::move(progress),
                              ResponseHandler(std::move(handler)), self->options_.timeout);
        },
        token, std::move(method), std::move(params), std::move(progress));
  }

  // Ends the channel; waiting requests end with Unavailable. No callbacks after this.
  void close(const std::string& reason = "disconnected");

  bool connected() const { return connected_; }
  bool modern() const { return modern_; }
  const std::string& protocol_version() const { return version_; }
  const json::object& server_capabilities() const { return capabilities_; }
  const std::string& server_name() const { return server_info_; }
  std::size_t pending_requests() const { return pending_.size(); }

 private:
  struct Pending {
    std::string method;
    ResponseHandler done;
    ProgressHandler progress;
    std::string progress_token;
    std::chrono::milliseconds timeout{0};
    std::unique_ptr<boost::asio::steady_timer> timer;
  };

  Client(boost::asio::any_io_executor executor, std::unique_ptr<Transport> transport,
         ClientOptions options, Callbacks callbacks);
  // `timeout` zero: no deadline (a subscription).
  void start_request(std::string method, json::object params, ProgressHandler progress,
                     ResponseHandler done, std::chrono::milliseconds timeout);
  void arm(std::int64_t id, std::chrono::milliseconds after);
  // Ends a waiting request with `outcome`; `cancel_reason` non-empty tells the server.
  void finish(std::int64_t id, Result<json::object> outcome, const std::string& cancel_reason = {});
  void on_message(Message message);
  void on_request(Message message);
  void on_closed(const std::string& reason);
  // Our version, identity and capabilities in `_meta`, as every modern request carries them.
  void add_meta(json::object& params) const;
  json::object capabilities() const;
  boost::asio::awaitable<Result<json::object>> request(std::string method, json::object params,
                                                       std::chrono::milliseconds timeout);
  Error failure(ErrorCode code, const std::string& what) const;
  boost::asio::awaitable<Result<void>> initialize();
  void listen_for_changes();
  boost::asio::awaitable<Result<json::object>> answer_input(const std::string& method,
                                                            json::object params,
                                                            const std::string& call);

  boost::asio::any_io_executor executor_;
  std::unique_ptr<Transport> transport_;
  ClientOptions options_;
  Callbacks callbacks_;
  std::map<std::int64_t, Pending> pending_;
  std::map<std::string, std::int64_t, std::less<>> by_progress_token_;
  std::int64_t next_id_ = 1;
  bool connected_ = false;
  bool closed_ = false;
  std::string close_reason_;  // why the channel ended, when it ended on the server's side
  bool modern_ = false;
  std::string version_;
  json::object capabilities_;
  std::string server_info_;
  // The calls in flight: a legacy server's elicitation goes to the call when there is one alone.
  std::vector<std::string> calls_;
  std::optional<std::int64_t> subscription_;
  int serving_ = 0;  // the server's requests being answered
};

}  // namespace sb::mcp
