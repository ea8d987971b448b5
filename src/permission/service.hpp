#pragma once
// PermissionService: the asks that wait for a person, and what the person approved (OpenCode's
// PermissionNext.ask / reply / list). A tool that needs a permission asks; the rules decide at
// once (allow, deny) or the ask waits for `reply` (HTTP: POST /permission/{id}/reply), with the
// `permission.asked` / `permission.replied` events on the bus in between.
//
// Guarantees (design.md decision 1): every ask ends exactly once, its handler posted (never run
// inside the service): at once when the rules decide, or on reply, session cancel, timeout,
// shutdown or destruction. An ask that nobody answers within its timeout is rejected so that a
// headless server never hangs.
//
// Not thread-safe: used on the server's executor (one thread) only, the one given at
// construction; it takes no lock. Bus subscribers and handlers may call back into the service.
// Timeouts run on one timer on that executor.
#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/system/result.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "bus/event_bus.hpp"
#include "permission/ruleset.hpp"

namespace sb::permission {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct PermissionOptions {
  milliseconds timeout{
      0};  // permission.timeout: an unanswered ask is rejected after this; 0 = never
};

// A person's answer: allow this call, allow it for the rest of the session, or refuse.
enum class Reply { Once, Always, Reject };
std::string_view reply_name(Reply reply);                 // "once", "always", "reject"
std::optional<Reply> parse_reply(std::string_view name);  // nullopt for anything else

struct PermissionRequest;

struct AskParams {
  std::string session_id;
  std::optional<std::string> message_id;  // the tool call that asks, shown to the person
  std::optional<std::string> call_id;
  std::string permission;             // "bash", "edit", "doom_loop", "client_tools", ...
  std::vector<std::string> patterns;  // what for: commands, paths, ...; empty means ["*"]
  json::object metadata;              // anything the person should see (diff, command, ...)
  std::vector<std::string> always;    // what "always" approves; empty means `patterns`
  std::optional<milliseconds>
      timeout;  // this ask's wait; default PermissionOptions::timeout; 0 = never
  // The ask's id when it waits: empty for a new one; a stored ask's after a restart (the person
  // answers it under the id they were shown).
  std::string id;
  // Told once the ask waits for a person, before it is published: what to store so that the
  // wait outlives a restart.
  std::function<void(const PermissionRequest&)> on_waiting;
  // Told when a person answers this ask "always", with the rules that answer added to the
  // session's: what to store with the session, so that a restart (or another node of a cluster)
  // asks no more either.
  std::function<void(const Ruleset&)> on_always;
};

// An ask that waits for a person: OpenCode's PermissionRequest.
struct PermissionRequest {
  std::string id;  // per_...
  std::string session_id;
  std::string permission;
  std::vector<std::string> patterns;
  json::object metadata;
  std::vector<std::string> always;
  std::optional<std::string> message_id;
  std::optional<std::string> call_id;
};

// {id, sessionID, permission, patterns, metadata, always, tool?: {messageID, callID}}: the
// properties of `permission.asked` and an element of GET /permission.
json::object to_json(const PermissionRequest& request);
// Reads to_json's form back (a stored ask); InvalidRequest naming what is wrong.
Result<PermissionRequest> permission_request_from_json(const json::object& o);

// Why an ask did not allow the call. `message` is written for the model: the tool call fails
// with it.
struct Rejection {
  enum class Kind {
    Denied,     // a rule denies it; nobody was asked
    Rejected,   // the person said no (with `feedback` when they said why)
    TimedOut,   // nobody answered within the timeout
    Cancelled,  // the session was aborted or the server is stopping
  };
  Kind kind = Kind::Rejected;
  std::string permission;
  std::vector<std::string> patterns;
  std::string message;
  std::optional<std::string> feedback;  // the person's words with a reject
  std::optional<Rule> rule;             // Denied: the rule that forbids it

  // Whether the turn should stop rather than let the model go on (OpenCode stops on a bare
  // reject; a denial by rule or a reject with feedback goes back to the model, which adapts).
  bool halts_turn() const;
  // As an Error: Forbidden (denied, rejected), Timeout, Unavailable (cancelled).
  Error error() const;
};

// boost::system::result calls this when value() is used on a rejection.
[[noreturn]] void throw_exception_from_error(const Rejection& r, const boost::source_location&);

using AskOutcome = boost::system::result<void, Rejection>;
using AskHandler = boost::asio::any_completion_handler<void(AskOutcome)>;
// Rulesets by address, earliest first: what an ask is evaluated against.
using Layers = std::vector<const Ruleset*>;

class PermissionService : public std::enable_shared_from_this<PermissionService> {
 public:
  static std::shared_ptr<PermissionService> create(boost::asio::any_io_executor executor,
                                                   std::shared_ptr<bus::EventBus> bus,
                                                   PermissionOptions options = {});
  // Asks still waiting are ended with Cancelled.
  ~PermissionService();
  PermissionService(const PermissionService&) = delete;
  PermissionService& operator=(const PermissionService&) = delete;

  // What the rules say at once, without asking anybody: allowed, or the denial; nullopt when a
  // person must decide (then async_ask). The path of every tool call, so it never waits.
  std::optional<AskOutcome> decide(const AskParams& params, const Layers& layers) const;
  // An ask as an Asio operation. Evaluates every pattern against `layers` (earliest first) with
  // this session's approved rules layered last (callers need not pass session_rules()). Any
  // pattern denied: completes with Denied; all allowed: completes allowed. Otherwise the ask
  // waits (it is listed and published as `permission.asked` as the operation starts) and
  // completes with the person's answer, with TimedOut when nobody answers in time, or with
  // Cancelled when the session is cancelled or the server stops. The handler is always posted to
  // the waiter's executor, never run inside async_ask or the service. `layers` are copied before
  // it returns.
  template <typename CompletionToken>
  auto async_ask(AskParams params, Layers layers, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(AskOutcome)>(
        [self = shared_from_this()](auto handler, AskParams params, Layers layers) {
          self->initiate_ask(std::move(params), std::move(layers), AskHandler(std::move(handler)));
        },
        token, std::move(params), std::move(layers));
  }

  // A person's answer to a waiting ask. NotFound when `request_id` is not waiting (unknown, or
  // already answered, timed out or cancelled).
  //  - once: the ask is allowed.
  //  - always: allow rules for the ask's `always` patterns join the session's approved rules; the
  //    ask and every other waiting ask of the session that they now allow are allowed.
  //  - reject: the ask is rejected, with `message` as feedback for the model; every other waiting
  //    ask of the session is rejected too (the person said stop).
  // Each ask that ends publishes `permission.replied` {sessionID, requestID, reply}.
  Result<void> reply(const std::string& request_id, Reply reply,
                     std::optional<std::string> message = std::nullopt);

  // Rejects the session's waiting asks with Cancelled (abort). Returns how many there were.
  std::size_t cancel_session(const std::string& session_id,
                             const std::string& reason = "the session was aborted");
  // cancel_session, and drops what the session approved (the session was deleted).
  void forget_session(const std::string& session_id);

  // What "always" replies approved in this session, to layer last in evaluate() / disabled().
  Ruleset session_rules(const std::string& session_id) const;
  // Replaces them (PATCH /session/{id} `approved`; [] takes them all back).
  void replace_approved(const std::string& session_id, Ruleset rules);

  // Waiting asks, oldest first (GET /permission); or only those of one session.
  std::vector<PermissionRequest> list() const;
  std::vector<PermissionRequest> list(const std::string& session_id) const;
  std::size_t pending_count() const;

  // Cancels every waiting ask; later asks that would wait are cancelled at once.
  void shutdown();

  const PermissionOptions& options() const { return options_; }

 private:
  using Deadlines = std::multimap<Clock::time_point, std::string>;  // -> request id

  struct PendingAsk {
    PermissionRequest request;
    std::vector<Ruleset> layers;  // kept to re-evaluate after an "always" of another ask
    AskHandler done;
    std::function<void(const Ruleset&)> on_always;
    milliseconds timeout{0};
    std::optional<Deadlines::iterator> deadline;
  };

  // Events gathered while the service's state is being changed and published once it is
  // consistent again: a subscriber may call back in.
  using Effects = std::vector<std::function<void()>>;

  PermissionService(boost::asio::any_io_executor executor, std::shared_ptr<bus::EventBus> bus,
                    PermissionOptions options);

  void initiate_ask(AskParams params, Layers layers, AskHandler done);
  // The rules' verdict on every pattern: a denial, or whether any pattern asks a person.
  struct Verdict {
    std::optional<Rejection> denial;
    bool waits = false;
  };
  Verdict evaluate(const AskParams& params, Layers& layers) const;
  // Removes a waiting ask, posts its handler and queues its `permission.replied` event.
  void finish(std::map<std::string, PendingAsk>::iterator it, Reply reply, AskOutcome outcome,
              Effects& effects);
  std::vector<std::string> session_asks(const std::string& session_id) const;
  std::size_t cancel_asks(const std::string& session_id, const std::string& reason,
                          Effects& effects);
  void arm_timer();
  void on_timer();

  const PermissionOptions options_;
  std::shared_ptr<bus::EventBus> bus_;
  boost::asio::any_io_executor executor_;  // where async_ask's handlers complete
  boost::asio::steady_timer timer_;

  std::map<std::string, PendingAsk> pending_;          // ids sort by creation time
  std::unordered_map<std::string, Ruleset> approved_;  // session id -> "always" rules
  Deadlines deadlines_;
  Clock::time_point armed_for_ = Clock::time_point::max();
  bool shutting_down_ = false;
};

}  // namespace sb::permission
