#pragma once
// SessionService: sessions (create, list, delete, which client owns them), their statuses and
// their turns: prompt() and prompt_async() start a turn that the Processor runs (processor.hpp),
// abort() ends it, shutdown() ends them all.
//
// What turns change is published on the bus at once and stored by the TurnWriter
// (turn_writer.hpp); the conversation as the model sees it is kept per session by the
// ConversationCache. Not thread-safe: turns run on the executor given at construction (the
// server's one executor) and every method is called there too (docs/development.md, "Threading
// model"); the table of running turns and a turn's messages are changed without a lock.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "bus/event_bus.hpp"
#include "permission/service.hpp"
#include "provider/provider.hpp"
#include "question/service.hpp"
#include "session/agent.hpp"
#include "session/conversation_cache.hpp"
#include "session/processor.hpp"
#include "session/store.hpp"
#include "session/turn.hpp"
#include "session/turn_writer.hpp"
#include "tool/builtin/task.hpp"
#include "tool/registry.hpp"

namespace sb::session {

struct ServiceDeps {
  boost::asio::any_io_executor executor;
  std::shared_ptr<bus::EventBus> bus;
  std::shared_ptr<SessionStore> store;
  provider::ProviderSet providers;
  std::shared_ptr<tool::ToolRegistry> tools;
  std::shared_ptr<permission::PermissionService> permissions;
  std::shared_ptr<question::QuestionService> questions;
  permission::Ruleset config_rules;  // "permission" of the config file
  std::map<std::string, Agent> agents;
};

// What recover() found: turns marked failed, turns that go on.
struct Recovered {
  std::size_t failed = 0;
  std::size_t resumed = 0;
};

struct CreateInput {
  std::string title;
  permission::Ruleset permission;  // the session's own rules
  std::string client_id;
  std::string parent_id;
};

// PATCH /session/{id}: what it changes (each field optional).
struct SessionUpdate {
  std::optional<std::string> title;
  // time.archived: a time sets it, nullopt inside clears it.
  std::optional<std::optional<std::int64_t>> archived;
  permission::Ruleset permission;  // rules appended to the session's own
  // Replaces what "always" answers approved (SessionInfo::approved); [] takes them back.
  std::optional<permission::Ruleset> approved;
};

// POST /session/{id}/shell: the user's own command, run with the bash tool.
struct ShellInput {
  std::string agent;
  std::optional<std::string> model;  // "PROVIDER/MODEL"; the agent's or the default when absent
  std::string command;
};

// Held while this node changes a session outside a turn (an edit, a revert, a turn's start): no
// turn or other change of the session begins on this node meanwhile (`ended` tells the service
// when the hold goes), and on a store that several nodes share no other node's turn can start on
// it either (SessionStore::claim, given back when the hold goes). Move-only.
class SessionHold {
 public:
  SessionHold() = default;
  SessionHold(std::string session_id, std::function<void()> ended)
      : session_id_(std::move(session_id)), ended_(std::move(ended)) {}
  SessionHold(SessionHold&& other) noexcept
      : store_(std::move(other.store_)),
        session_id_(std::move(other.session_id_)),
        ended_(std::exchange(other.ended_, nullptr)) {}
  SessionHold& operator=(SessionHold&& other) noexcept {
    if (this != &other) {
      give_back();
      store_ = std::move(other.store_);
      session_id_ = std::move(other.session_id_);
      ended_ = std::exchange(other.ended_, nullptr);
    }
    return *this;
  }
  ~SessionHold() { give_back(); }
  // The store's claim is taken: it is given back with the hold.
  void claimed(std::shared_ptr<SessionStore> store) { store_ = std::move(store); }
  // The claim outlives the hold: a turn keeps it to its end (SessionService::end_turn).
  void keep() {
    store_ = nullptr;
    end();
  }

 private:
  void end() {
    if (auto ended = std::exchange(ended_, nullptr)) ended();
  }
  void give_back() {
    end();
    // Not waited for: later calls to the store come after it.
    if (auto store = std::exchange(store_, nullptr))
      store->post([id = std::move(session_id_)](SessionStore& s) { s.release(id); });
  }
  std::shared_ptr<SessionStore> store_;
  std::string session_id_;
  std::function<void()> ended_;
};

class SessionService : public std::enable_shared_from_this<SessionService> {
 public:
  static std::shared_ptr<SessionService> create(ServiceDeps deps, ServiceOptions options);

  // What a stop or a crash left: turns whose step waited for client calls go on (their calls
  // are pending again, and the turn continues once they end: design.md decision 5); the others
  // are marked as failed (never left running). Call once at start, before the loop runs.
  Result<Recovered> recover();
  // A node of a cluster (a store that other nodes share, issue 20): what recover() does at
  // start, for the turns that other nodes left when they stopped (their sessions' claims were
  // given up with their connections) — they go on here, or are marked failed. Turns of this
  // node whose claim another node took while this one was cut off from the store are let go
  // (stopped here without storing their end; the other node has them). Call when a node went
  // away, and now and then.
  boost::asio::awaitable<Result<Recovered>> take_over();
  // A node of a cluster, now and then (each lease round): checks the store's connection (which
  // connects again if it broke) and lets go of turns whose claim another node took meanwhile,
  // so that a node whose turns only wait learns of it before their next write.
  boost::asio::awaitable<Result<void>> check_claims();

  const ServiceOptions& options() const { return options_; }

  // What reads or writes the store is a coroutine: on PostgreSQL the store answers on a thread of
  // its own (SessionStore::call) while the event loop goes on.
  boost::asio::awaitable<Result<SessionInfo>> create_session(CreateInput input);
  boost::asio::awaitable<Result<std::vector<SessionInfo>>> list_sessions();
  boost::asio::awaitable<Result<SessionInfo>> get_session(std::string id);
  boost::asio::awaitable<Result<void>> delete_session(std::string id);
  // Seed 000's validateClientSession: Forbidden when `session_id` belongs to another client.
  // Sessions created without a client, and ids that name no session, are open to every client.
  boost::asio::awaitable<Result<void>> validate_client_session(std::string client_id,
                                                               std::string session_id);
  // The same for a session read already.
  static Result<void> client_may_use(const std::string& client_id, const SessionInfo& session);
  // `limit` > 0: the newest `limit` messages only (oldest first still).
  boost::asio::awaitable<Result<std::vector<MessageWithParts>>> messages(std::string session_id,
                                                                         std::size_t limit = 0);

  // ---- editing sessions (service_edit.cpp) ----
  // Title, archive time, more rules; publishes session.updated. Rules and title changes do not
  // move the session in the list (its `updated` stays), as OpenCode's.
  boost::asio::awaitable<Result<SessionInfo>> update_session(std::string id, SessionUpdate update);
  // The sessions whose parentID is `id` (the task tool's sub-sessions), oldest first.
  boost::asio::awaitable<Result<std::vector<SessionInfo>>> children(std::string id);
  // NotFound for an unknown message or one of another session.
  boost::asio::awaitable<Result<MessageWithParts>> message(std::string session_id,
                                                           std::string message_id);
  // A new session with copies (new ids) of the messages before `message_id` (all when absent):
  // title "<title> (fork #N)", the source's client and rules, no parent. Of a running session
  // only what precedes the running turn's user message is copied.
  boost::asio::awaitable<Result<SessionInfo>> fork(std::string session_id,
                                                   std::optional<std::string> message_id);
  // Delete one stored message, or one part of it; Conflict while a turn runs.
  boost::asio::awaitable<Result<void>> delete_message(std::string session_id,
                                                      std::string message_id);
  boost::asio::awaitable<Result<void>> delete_part(std::string session_id, std::string message_id,
                                                   std::string part_id);
  // Replaces a stored part (same id, message and session); Conflict while a turn runs.
  boost::asio::awaitable<Result<Part>> update_part(Part part);

  // ---- shell (shell.cpp) ----
  // Runs the user's command with the bash tool as a turn of its own: a user message and an
  // assistant message with one bash tool part, no model call; returns the assistant message.
  // Rules apply as to the model's calls, except that an `ask` counts as answered (the person
  // asked for this command); a denied command's part ends in error. Conflict when busy.
  boost::asio::awaitable<Result<MessageWithParts>> shell(std::string session_id, ShellInput input);
  // ---- revert (service_revert.cpp; session/revert.hpp) ----
  // Reverts the session to a message (or a part of it): files that edit/write changed from
  // there on are put back, the session is marked reverted. Conflict while a turn runs,
  // NotFound for a message or part the session does not have.
  boost::asio::awaitable<Result<SessionInfo>> revert(std::string session_id, std::string message_id,
                                                     std::string part_id);
  // Undoes the revert (files as they were before it); a session not reverted is returned as is.
  boost::asio::awaitable<Result<SessionInfo>> unrevert(std::string session_id);
  // OpenCode's FileDiff list of a message's turn (empty id: the whole session).
  boost::asio::awaitable<Result<json::array>> diff(std::string session_id, std::string message_id);

  // The session's todo list (todowrite's) as the JSON text of an array, "[]" for none.
  boost::asio::awaitable<Result<std::string>> todos(std::string session_id);

  // Runs a turn to its end and returns the last assistant message with its parts. Conflict
  // when the session is already running one.
  boost::asio::awaitable<Result<MessageWithParts>> prompt(std::string session_id,
                                                          PromptInput input);
  // Starts a turn and returns at once.
  boost::asio::awaitable<Result<void>> prompt_async(std::string session_id, PromptInput input);
  // Summarizes the conversation (OpenCode's compaction) with the model (`model`, else the
  // default agent's or the default): a user message with a compaction part, answered by an
  // assistant message with `summary: true`; from then on the model sees the conversation from
  // that question on. `auto_continue`: the turn goes on after the summary (a synthetic user
  // message asks the model to continue). Runs as a turn: Conflict when the session is busy.
  // False when the summary failed (its message carries the error).
  boost::asio::awaitable<Result<bool>> summarize(std::string session_id,
                                                 std::optional<std::string> model,
                                                 bool auto_continue);
  // Takes back the last answer to have it made again (a chat's regenerate): the messages after
  // the last user message are deleted, as a revert, and that message's id is returned for
  // PromptInput::answer_again. Conflict while a turn runs; NotFound without a user message.
  boost::asio::awaitable<Result<std::string>> remove_last_answer(std::string session_id);
  // A turn runs, or is starting (its session is being read).
  bool running(const std::string& session_id) const {
    return turns_.count(session_id) > 0 || starting_.count(session_id) > 0;
  }
  // A turn runs or starts, or this node is changing the session (SessionHold): no other turn or
  // change begins.
  bool busy(const std::string& session_id) const {
    return running(session_id) || held_.count(session_id) > 0;
  }
  // Ends the running turn now (one that is starting, once it has started): tools are cancelled,
  // their parts end in error. False when idle.
  bool abort(const std::string& session_id, const std::string& reason = "aborted by the user");
  // {sessionID: {type: "busy" | "retry" | "awaiting-input", ...}} for sessions that are not idle.
  json::object status() const;
  // The task tool: runs `request.prompt` in a new sub-session with the named agent and returns
  // its final text. Aborting the parent turn aborts the sub-session's.
  boost::asio::awaitable<Result<tool::TaskOutcome>> run_subtask(tool::TaskRequest request);
  // Server shutdown: aborts every turn, except those that only wait for clients (they go on
  // after the restart, recover()).
  void shutdown();

  const provider::ProviderSet& providers() const { return deps_.providers; }
  const std::map<std::string, Agent>& agents() const { return deps_.agents; }
  // The tools the model would be offered in this session with this agent (GET /tool).
  boost::asio::awaitable<Result<std::vector<tool::ToolPtr>>> offered_tools(
      std::string session_id, std::string agent, std::map<std::string, bool> switches);

 private:
  SessionService(ServiceDeps deps, ServiceOptions options);

  // Registers the session's turn (Conflict while one runs or starts). `ready` (when set) checks
  // the request once the session is known to be free, before anything changes: a refused
  // request (its error returned) leaves a pending revert as it is; otherwise the revert is made
  // final.
  using Ready = std::function<boost::asio::awaitable<Result<void>>(const SessionInfo&)>;
  boost::asio::awaitable<Result<std::shared_ptr<Turn>>> begin_turn(std::string session_id,
                                                                   Ready ready);
  void end_turn(const std::string& session_id);
  // A turn recover() found waiting (begun there), run on until it ends.
  boost::asio::awaitable<void> resume(std::shared_ptr<Turn> turn, ResolvedPrompt prompt,
                                      MessageWithParts open, std::vector<Wait> waits,
                                      int steps_done, std::map<std::string, bool> switches);
  // A prompt to a reverted session first makes the revert final (service_revert.cpp).
  boost::asio::awaitable<Result<SessionInfo>> settle_revert(SessionInfo session);
  // Conflict while the session runs a turn, here or on another node (edits of its stored
  // messages, reverts); held, no other node's turn starts on it until the hold goes.
  boost::asio::awaitable<Result<SessionHold>> hold_idle(std::string session_id);
  // The same for a change that a turn running here takes in (a title, a delete): no hold then.
  boost::asio::awaitable<Result<SessionHold>> hold_unless_running(std::string session_id);
  // The hold itself (SessionStore::claim), whatever runs here.
  boost::asio::awaitable<Result<SessionHold>> claim(std::string session_id);
  // The Conflict of a busy() session.
  Error busy_error(const std::string& session_id) const;
  // Lost claims (SessionStore::lost_claims): their turns stop here, disowned.
  void let_go_lost_claims(const std::vector<std::string>& lost);
  // Gives back the claims of ended turns whose last write is stored now.
  void release_stored_ends();
  // recover() and take_over(): the open turns of the sessions this node can claim (all of them
  // on a store of its own), found by find_recoverable (store calls only: on the store's thread
  // for take_over) and started by start_recovered. `skip`: sessions that run or wait to store
  // their end here.
  struct Resumable {
    std::shared_ptr<Turn> turn;
    ResolvedPrompt prompt;
    MessageWithParts open;
    std::vector<Wait> waits;
    int steps_done = 0;
    std::map<std::string, bool> switches;
  };
  struct Recoverable {
    std::map<std::string, Resumable> resumable;  // by session
    std::size_t failed = 0;
  };
  static Result<Recoverable> find_recoverable(SessionStore& store,
                                              const std::map<std::string, Agent>& agents,
                                              const provider::ProviderSet& providers,
                                              const std::string& reason,
                                              const std::set<std::string>& skip);
  Recovered start_recovered(Recoverable found);
  std::set<std::string> busy_here() const;
  // Stops a running turn without failing what it stored when it only waits (it goes on after a
  // restart, or on the node that took it over); aborts it otherwise.
  void let_go(const std::string& session_id, const std::string& reason);
  // A stored message, what turns have staged written first.
  boost::asio::awaitable<Result<MessageWithParts>> stored_message(std::string session_id,
                                                                  std::string message_id);

  ServiceDeps deps_;
  ServiceOptions options_;
  std::shared_ptr<StatusBoard> status_;
  std::shared_ptr<TurnWriter> writer_;
  std::shared_ptr<ConversationCache> conversations_;
  std::shared_ptr<Processor> processor_;
  std::map<std::string, std::shared_ptr<Turn>> turns_;
  // Sessions whose turn begin_turn() is starting (reading the store): a second one is refused.
  std::set<std::string> starting_;
  // An abort() that came while the turn started, by session: its reason.
  std::map<std::string, std::string> aborted_while_starting_;
  // Holds (SessionHold) of each session: what changes it outside a turn is under way.
  std::map<std::string, int> held_;
  // Sessions whose turn ended while its last changes failed to store (a shared store): their
  // claim is kept until the writer's retry stores them.
  std::set<std::string> unstored_ends_;
  bool shutting_down_ = false;
};

}  // namespace sb::session
