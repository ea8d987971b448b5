#pragma once
// The state of a running turn and of its model steps, and the session statuses a turn sets.
// The lowest layer of the agent loop: TurnWriter stores and publishes a Turn's changes,
// ConversationCache holds its Conversation, Processor runs it, SessionService starts it.
// Single executor: a Turn and its Steps are changed only on the executor that runs the turn.
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "bus/event_bus.hpp"
#include "permission/doom_loop.hpp"
#include "permission/ruleset.hpp"
#include "provider/provider.hpp"
#include "session/agent.hpp"
#include "session/store.hpp"
#include "session/types.hpp"
#include "tool/tool.hpp"
#include "util/abort.hpp"
#include "util/wait_group.hpp"

namespace sb::session {

// The conversation of a session as the model sees it (history() of its stored messages), kept
// up to date as steps end so that a step does not read the whole session back from the store.
struct Conversation {
  std::vector<provider::ModelMessage> messages;
  std::uint64_t used = 0;  // ConversationCache's use count at the last turn, for eviction
  // On a shared store: SessionStore::messages_version() when the conversation was last known
  // to be what the store holds (a turn's end stored); "" while unknown.
  std::string stored_version;
  // The version is being read (ConversationCache::stored): until it arrives, unknown.
  bool version_pending = false;
};

struct Step;

// A running turn: one per busy session.
struct Turn {
  SessionInfo session;
  std::shared_ptr<AbortSignal> abort = AbortSignal::create();
  std::vector<permission::RecentCall> calls;  // every tool call of the turn, for the doom loop
  int awaiting = 0;                           // permission asks / interactive tools waiting
  Agent agent;
  permission::Ruleset session_rules;
  std::shared_ptr<Conversation> conversation;
  // What the model is offered in this turn; its calls are resolved here (a chat's own client
  // tools have plain names that no registry lookup knows).
  std::vector<tool::ToolPtr> offered;
  std::map<std::string, bool> switches;  // the prompt's tool switches
  // The turn's messages as they are now (the user's, then one per step), each with its parts
  // in id order; those changed since the last write are stored by the next one (TurnWriter).
  std::vector<MessageWithParts> messages;
  std::vector<std::size_t> unsaved;  // indices into `messages`
  std::optional<SessionInfo> unsaved_session;
  std::vector<FileChangeRow> unsaved_files;  // what its tools changed in files, not yet stored
  // Waits that began, and ones that ended, since the last write.
  std::vector<Wait> unsaved_waits;
  std::vector<std::string> ended_waits;
  // The step that runs now (none between steps).
  std::weak_ptr<Step> step;
  // The server stops and this turn goes on after its restart (SessionService::shutdown): its
  // waiting client calls end here without a result, and its open message stays open.
  bool suspended = false;
  // Another node of a cluster took this turn over while this one was cut off from the store
  // (SessionService::take_over): nothing more of it is stored here, since what the other node
  // stores since is newer.
  bool disowned = false;

  bool has_unsaved() const {
    return unsaved_session || !unsaved.empty() || !unsaved_files.empty() ||
           !unsaved_waits.empty() || !ended_waits.empty();
  }
  // What the next write stores; the turn starts over with nothing unsaved.
  StoreChanges take_unsaved();
  // The turn's message `id` (nullptr when it has none), marked as changed.
  MessageWithParts* change(const std::string& id);
};

// One model step: one assistant message.
struct Step {
  std::shared_ptr<Turn> turn;
  provider::ProviderPtr provider;
  MessageInfo message;
  provider::ModelRequest request;
  std::optional<Part> text;
  std::optional<Part> reasoning;
  std::map<std::string, Part> tools;  // by call id
  std::vector<std::string> tool_order;
  std::unique_ptr<WaitGroup> running;
  // The model's answer has ended (its calls are all known); then the step waits for its calls.
  bool streamed = false;
  // What calls wait for (a client's result, a person's answer; stored: TurnWriter::stage_wait),
  // by call id.
  std::map<std::string, Wait> waits;
  // Calls whose wait the server's stop ended (SessionService::shutdown): they wait again after
  // the restart.
  std::set<std::string> released;
  // Calls run again after a restart whose ask the person allowed then: their ask of the same
  // permission and patterns is allowed without asking again.
  std::map<std::string, permission::PermissionRequest> granted;
  // Calls run again after a restart: the id of the ask, or of the question, they waited for,
  // asked again under it.
  std::map<std::string, std::string> ask_again;
  std::map<std::string, std::string> question_again;
  std::optional<provider::StepFinish> finish;
  std::optional<provider::StreamError> error;
  // A person rejected a permission (or nobody answered in time): the turn stops after this step,
  // and its message says why (the first such rejection's words).
  std::optional<std::string> halt;
  bool emitted = false;
  // Streamed text not yet published as message.part.delta (Processor::publish_delta).
  Part* delta_part = nullptr;
  std::string delta;
  bool delta_posted = false;
};

// What each session that is not idle is doing ({type: "busy" | "retry" | "awaiting-input"}),
// published as session.status (and session.idle) when it changes. A session is not idle exactly
// while it runs a turn. Not thread-safe: use from the server's executor only.
class StatusBoard {
 public:
  explicit StatusBoard(std::shared_ptr<bus::EventBus> bus) : bus_(std::move(bus)) {}
  void set(const std::string& session_id, json::object status);
  // Drops the session's status without an event: another node runs its turn now and tells it.
  void forget(const std::string& session_id) { status_.erase(session_id); }
  // {sessionID: status} for the sessions that are not idle.
  json::object all() const;
  bool running(const std::string& session_id) const;

 private:
  std::shared_ptr<bus::EventBus> bus_;
  std::map<std::string, json::object> status_;
};

}  // namespace sb::session
