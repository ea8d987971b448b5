#pragma once
// ClientToolRegistry: the tools that connected clients registered, the calls waiting for a
// client's result, and each client's live delivery channel (seed 001's registry, plus the
// guarantees of design.md: every call ends exactly once, cancels reach the client, results are
// bound to the call, reconnection within a grace period loses nothing).
//
// Not thread-safe: used on the server's executor (one thread) only, the one given at
// construction; it takes no lock. Sinks, bus subscribers and progress handlers are called once
// the registry's own state is consistent again, so they may call back into it; a call's
// completion handler is posted (util/complete.hpp), never run inside the registry. Deadlines (call
// timeouts, reconnect grace) are checked by one periodic ticker (kTick) on that executor, which
// runs only while a call is pending or a grace is running: a call times out, and a grace ends,
// up to kTick after its deadline. That costs a call nothing to arm and nothing to disarm.
#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "bus/event_bus.hpp"
#include "clienttool/types.hpp"

namespace sb::clienttool {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct RegistryOptions {
  milliseconds default_timeout{30000};  // a call's wait for its result when the caller names none
  milliseconds max_timeout{600000};     // cap for a caller's timeout and for progress extensions
  milliseconds reconnect_grace{5000};   // a dropped client keeps tools and calls this long
  std::int64_t rate_limit = 100;        // executions per client per minute; 0 = unlimited
  std::size_t max_pending_per_client = 64;   // calls waiting for one client; more are refused
  std::size_t max_pending_per_session = 64;  // calls of one session waiting; more are refused
  std::size_t remembered_results = 65536;    // ended request ids kept to answer repeats with 409
};

// A client's live connection (an SSE stream or a WebSocket), as the registry sees it.
class ClientSink {
 public:
  virtual ~ClientSink() = default;
  // Must not block: queue the message for the connection's writer. On the registry's executor.
  virtual void deliver(std::shared_ptr<const ClientMessage> message) = 0;
  // A newer connection of the same client took over; close this one. On the registry's executor.
  virtual void close(const std::string& reason) = 0;
};

// Who made a change to the registry: this node (its own clients, its callers), or another node of
// a cluster (told by cluster::ClientRelay). Another node's change publishes no events (that node
// did) and is not told to the mirror again.
enum class Origin { Here, OtherNode };

// What the other nodes of a cluster must know of this registry (cluster::ClientRelay): the
// changes made here, told once the registry is consistent again. A chat's own tools
// (plain_names) stay on the node that has the chat.
class RegistryMirror {
 public:
  virtual ~RegistryMirror() = default;
  virtual void registered(const std::string& client_id,
                          const std::vector<std::shared_ptr<const ToolDefinition>>& tools) = 0;
  virtual void unregistered(const std::string& client_id,
                            const std::vector<std::string>& tool_ids) = 0;
  virtual void attached(const std::string& client_id, std::shared_ptr<ClientSink> sink,
                        std::uint64_t last_seq, const std::string& transport) = 0;
  virtual void detached(const std::string& client_id) = 0;
  // A client of this node whose reconnect grace ended: its tools and calls are gone here.
  virtual void forgotten(const std::string& client_id) = 0;
};

struct ExecuteParams {
  std::string client_id;  // optional; when given, `tool` may be the client's own tool name
  std::string tool;       // full id client_{clientID}_{name}, or the name with client_id
  // The tool as the caller found it (a session's offer): `tool` is not looked up again, and
  // when `input_checked` the input was already validated against this definition's schema.
  std::shared_ptr<const ToolDefinition> definition;
  bool input_checked = false;
  json::object input;  // any storage: execute() serializes it and keeps no reference
  std::string session_id;
  std::string message_id;  // generated when empty
  std::string call_id;     // generated when empty
  std::optional<milliseconds> timeout;
  // Why the caller gave up, asked when the cancellation slot of the call's handler fires (the
  // client gets it with the cancel). Unset: "cancelled".
  std::function<std::string()> cancel_reason;
  // Told once the call is pending, before its request reaches the client: what to store so that
  // the wait outlives a restart.
  std::function<void(const WaitingCall&)> on_waiting;
  // A stored call to make pending again (after a restart): its request id, client, tool, event
  // id and deadlines are the stored ones and `input` is its input; nothing is looked up or
  // checked again (the client need not have registered its tools yet), and no limit applies.
  // Delivered when its client connects, unless the client's Last-Event-ID says it has it.
  std::optional<WaitingCall> resume;
};

// How a call ended: the client's response (success or its own error), or why the server gave up
// (Timeout, Unavailable: client disconnected / tool unregistered / cancelled / shutting down).
using ExecuteOutcome = Result<ToolResponse>;
using ExecuteSignature = void(ExecuteOutcome);
using ExecuteHandler = boost::asio::any_completion_handler<ExecuteSignature>;
struct Progress {
  json::object metadata;
  std::optional<std::string> title;
};
using ProgressHandler = std::function<void(const Progress&)>;

struct StartedCall {
  std::string request_id;
  std::string tool_id;
  std::string client_id;
};

class ClientToolRegistry : public std::enable_shared_from_this<ClientToolRegistry> {
 public:
  static std::shared_ptr<ClientToolRegistry> create(boost::asio::any_io_executor executor,
                                                    std::shared_ptr<bus::EventBus> bus,
                                                    RegistryOptions options = {});
  ~ClientToolRegistry();

  // Validates every spec (name of letters, digits, '_' and '-'; a compilable object schema) and
  // registers all or none. An id that exists is replaced. Returns the tool ids.
  // `session_id`, when not empty, offers the tools to that session only; with `plain_names`
  // too, the model is offered them by their names (ToolDefinition::plain_name).
  Result<std::vector<std::string>> register_tools(const std::string& client_id,
                                                  std::vector<ToolSpec> specs,
                                                  const std::string& session_id = {},
                                                  bool plain_names = false,
                                                  Origin origin = Origin::Here);
  // Removes the named tools (full ids or the client's names), or all when `ids` is nullopt.
  // Calls waiting on a removed tool fail. Returns the ids that were removed.
  std::vector<std::string> unregister(const std::string& client_id,
                                      const std::optional<std::vector<std::string>>& ids,
                                      Origin origin = Origin::Here);
  // Told of every change made here from now on (held weakly).
  void set_mirror(std::weak_ptr<RegistryMirror> mirror) { mirror_ = std::move(mirror); }
  // Every client known here (registered tools, a connection, or calls waiting) with its tools.
  std::map<std::string, std::vector<std::shared_ptr<const ToolDefinition>>> all_clients() const;

  // Definitions are shared, never copied: a registration replaces them, it does not change them.
  using Definition = std::shared_ptr<const ToolDefinition>;
  std::vector<Definition> get_tools(const std::string& client_id) const;
  std::map<std::string, Definition> get_all_tools() const;
  // One registered tool by its full id; null when there is none.
  Definition get_tool(const std::string& tool_id) const;

  // A call to a client tool, as an Asio operation completing with the call's outcome: the
  // client's response, or why it could not be made or the server gave up (below). Emitting on
  // the handler's cancellation slot ends the call with Unavailable "Cancelled: <reason>" and
  // sends the client a cancel. `progress` is called for each progress report before the end.
  template <typename CompletionToken>
  auto async_execute(ExecuteParams params, ProgressHandler progress, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, ExecuteSignature>(
        [self = shared_from_this()](auto handler, ExecuteParams params, ProgressHandler progress) {
          self->initiate_execute(std::move(params), std::move(progress),
                                 ExecuteHandler(std::move(handler)));
        },
        token, std::move(params), std::move(progress));
  }

  // Starts a call: resolves the tool (NotFound), validates the input against its schema
  // (InvalidRequest naming the path), applies the pending-call limits and the rate limit
  // (RateLimited), then queues the request for the client. On success `done` is completed
  // exactly once, as async_execute's handler is; on an error it is dropped uncalled.
  Result<StartedCall> execute(ExecuteParams params, ExecuteHandler done,
                              ProgressHandler progress = {});

  // A client's answer. NotFound for an id never issued, Conflict for one that already ended,
  // Forbidden when `from_client` is given and is not the client the request went to.
  Result<void> submit_result(const std::string& request_id,
                             const std::optional<std::string>& from_client, ToolResponse response);
  // Progress before the result; extends the deadline by the call's timeout, up to max_timeout
  // after the start.
  Result<void> report_progress(const std::string& request_id,
                               const std::optional<std::string>& from_client, Progress progress);
  // The caller gave up: the call ends with Unavailable and the client gets a cancel.
  bool cancel(const std::string& request_id, const std::string& reason);

  // Removes the client's tools and fails its calls with "Client disconnected" (on this node
  // alone: a chat's own client; from another node: its reconnect grace ended there).
  void cleanup(const std::string& client_id, Origin origin = Origin::Here);

  // A connection of `client_id` opened (here, or on another node: `origin`). Replays its pending
  // requests that it has not had (seq > last_seq, or never delivered; from another node also a
  // call resumed after a restart and not delivered since), closes the connection it replaces,
  // and stops a running reconnect grace. Returns a connection id.
  std::uint64_t attach(const std::string& client_id, std::shared_ptr<ClientSink> sink,
                       std::uint64_t last_seq, const std::string& transport,
                       Origin origin = Origin::Here);
  // The connection closed. Starts the reconnect grace (or cleans up at once when it is 0).
  // `adopt`: a connection on another node that went away with that node; this node speaks for
  // the client from now on (its disconnect, the end of its grace).
  void detach(const std::string& client_id, std::uint64_t connection, bool adopt = false);

  // The server stops and a stored call goes on after its restart (ExecuteParams::resume): the
  // call ends here with Unavailable "Server shutting down" and its client is not told (no
  // cancel: it may still answer, to the restarted server). False when it is not pending.
  bool release(const std::string& request_id);
  // Fails every pending call with "Server shutting down"; later executes are refused.
  void shutdown();

  std::size_t pending_count() const;
  bool is_connected(const std::string& client_id) const;
  const RegistryOptions& options() const { return options_; }

 private:
  static constexpr milliseconds kTick{250};

  struct PendingCall {
    StartedCall call;
    std::shared_ptr<const ClientMessage> message;
    ExecutionRequest request;
    ExecuteHandler done;
    ProgressHandler progress;
    milliseconds timeout;
    Clock::time_point hard_deadline;
    Clock::time_point deadline;
    bool delivered = false;
    bool resumed = false;  // made before a restart: its client may have had it then
  };

  struct ClientState {
    std::map<std::string, Definition> tools;
    std::shared_ptr<ClientSink> sink;
    std::uint64_t connection = 0;
    std::optional<Clock::time_point> grace;  // when a dropped client's grace ends
    bool elsewhere = false;                  // its connection (the last one) is on another node
    std::set<std::pair<std::uint64_t, std::string>> pending;  // (seq, request id)
    Clock::time_point window_start{};
    std::int64_t window_count = 0;
  };

  // What a change must tell others (sinks, the bus), gathered while the registry's state is
  // being changed and done once it is consistent again: whoever is told may call back in.
  using Effects = std::vector<std::function<void()>>;

  ClientToolRegistry(boost::asio::any_io_executor executor, std::shared_ptr<bus::EventBus> bus,
                     RegistryOptions options);

  void initiate_execute(ExecuteParams params, ProgressHandler progress, ExecuteHandler done);
  Result<std::shared_ptr<const CompiledSchema>> shared_schema(const json::value& parameters);
  // execute(), taking `done` (and `progress`) only when the call starts.
  Result<StartedCall> start_call(ExecuteParams& params, ProgressHandler& progress,
                                 ExecuteHandler& done);

  // start_call() of a stored call (ExecuteParams::resume).
  Result<StartedCall> resume_call(ExecuteParams& params, ProgressHandler& progress,
                                  ExecuteHandler& done);
  // Makes `call` pending for `client`, wires the handler's cancellation slot, delivers it when
  // the client is connected.
  void add_pending(ClientState& client, PendingCall call, ExecuteParams& params,
                   ProgressHandler& progress, ExecuteHandler& done,
                   std::optional<json::object> request_event);
  std::optional<std::string> resolve(const std::string& tool, const std::string& client_id) const;
  // The waiting call a client's message is about. NotFound for an id never issued, Conflict for
  // one that ended, Forbidden when `from_client` is given and the request went to another.
  Result<PendingCall*> answerable(const std::string& request_id,
                                  const std::optional<std::string>& from_client);
  // Ends a call (already looked up); posts the handler, queues the events and the cancel.
  // `announce` false: no client-tool.completed/failed event (a released call has not ended for
  // those who watch it: it goes on after the restart).
  void finish(const std::string& request_id, ExecuteOutcome outcome,
              std::optional<std::string> cancel_reason, std::string ended_how, Effects& effects,
              bool announce = true);
  void remember_ended(const std::string& request_id, std::string how);
  // `quiet`: no event (another node's client, or told by another node).
  void cleanup_client(const std::string& client_id, Effects& effects, bool quiet = false);
  void deliver(ClientState& client, PendingCall& call, Effects& effects);
  // Starts the ticker unless it runs already (or the registry is shutting down).
  void ensure_ticking();
  void arm_tick();
  void on_tick();

  const RegistryOptions options_;
  std::shared_ptr<bus::EventBus> bus_;
  boost::asio::any_io_executor executor_;  // where handlers without an executor of their own run
  boost::asio::steady_timer timer_;        // the ticker

  std::map<std::string, ClientState> clients_;
  std::unordered_map<std::string, std::string> tool_owner_;  // tool id -> client id
  std::unordered_map<std::string, PendingCall> pending_;
  std::unordered_map<std::string, std::size_t> pending_per_session_;  // sessions with calls only
  std::unordered_map<std::string, std::string> ended_;                // request id -> how it ended
  std::deque<std::string> ended_order_;
  // Compiled schemas of registered tools by their text (shared_schema()).
  std::unordered_map<std::string, std::weak_ptr<const CompiledSchema>> schemas_;
  std::size_t swept_size_ = 16;
  std::size_t graces_ = 0;  // clients whose grace is running
  bool ticking_ = false;
  std::uint64_t next_seq_ = 0;
  std::uint64_t next_connection_ = 0;
  bool shutting_down_ = false;
  std::weak_ptr<RegistryMirror> mirror_;
};

}  // namespace sb::clienttool
