#pragma once
// SessionService: sessions and their turns. A prompt stores the user message, then runs steps
// until the model stops calling tools: each step streams the model's answer into an assistant
// message (text, reasoning and tool parts), runs the tool calls (server tools concurrently,
// client tools delivered to their clients) and feeds their results to the next step.
//
// Every change is published on the bus at once and stored (SQLite) whole message by message:
// what a restart must find (a step's open assistant message, a running tool call) within 50 ms,
// in one transaction with every other turn's, and everything at the turn's end, before its
// answer. The conversation as the model sees it is kept in memory per session and read from the
// store only on a session's first turn after a start. Turns run on the executor given at
// construction, which must be one thread: a turn's messages are changed there without a lock,
// and every method that writes (messages(), shutdown(), the prompts) must be called there too.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "bus/event_bus.hpp"
#include "permission/service.hpp"
#include "provider/provider.hpp"
#include "question/service.hpp"
#include "session/agent.hpp"
#include "session/store.hpp"
#include "tool/builtin/task.hpp"
#include "tool/registry.hpp"

namespace sb::session {

struct ServiceOptions {
  std::filesystem::path directory;                // the project directory
  std::filesystem::path data_dir;                 // truncated outputs go to data_dir/truncate
  int retry_attempts = 4;                         // retry.attempts: tries after the first
  std::chrono::milliseconds retry_initial{1000};  // retry.initialDelay, doubled per attempt
  std::chrono::milliseconds retry_max{30000};     // retry.maxDelay
};

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

struct PromptInput {
  std::string text;
  std::optional<std::string> model;  // "PROVIDER/MODEL"
  std::optional<std::string> agent;
  std::map<std::string, bool> tools;  // per-prompt tool switches
};

struct CreateInput {
  std::string title;
  permission::Ruleset permission;  // the session's own rules
  std::string client_id;
  std::string parent_id;
};

class SessionService : public std::enable_shared_from_this<SessionService> {
 public:
  static std::shared_ptr<SessionService> create(ServiceDeps deps, ServiceOptions options);
  // Stores what turns gathered and no round stored yet (a forced stop drops posted handlers).
  ~SessionService();

  // Marks turns that a crash interrupted as failed (never left running). Call once at start.
  Result<std::size_t> recover();

  Result<SessionInfo> create_session(CreateInput input);
  Result<std::vector<SessionInfo>> list_sessions();
  Result<SessionInfo> get_session(const std::string& id);
  Result<void> delete_session(const std::string& id);
  // Seed 000's validateClientSession: Forbidden when `session_id` belongs to another client.
  // Sessions created without a client, and ids that name no session, are open to every client.
  Result<void> validate_client_session(const std::string& client_id, const std::string& session_id);
  Result<std::vector<MessageWithParts>> messages(const std::string& session_id);
  // The session's todo list (todowrite's) as the JSON text of an array, "[]" for none.
  Result<std::string> todos(const std::string& session_id);

  // Runs a turn to its end and returns the last assistant message with its parts. Conflict
  // when the session is already running one.
  boost::asio::awaitable<Result<MessageWithParts>> prompt(std::string session_id,
                                                          PromptInput input);
  // Starts a turn and returns at once.
  Result<void> prompt_async(std::string session_id, PromptInput input);
  // Ends the running turn now: tools are cancelled, their parts end in error. False when idle.
  bool abort(const std::string& session_id, const std::string& reason = "aborted by the user");
  // {sessionID: {type: "busy" | "retry" | "awaiting-input", ...}} for sessions that are not idle.
  json::object status() const;
  // The task tool: runs `request.prompt` in a new sub-session with the named agent and returns
  // its final text. Aborting the parent turn aborts the sub-session's.
  boost::asio::awaitable<Result<tool::TaskOutcome>> run_subtask(tool::TaskRequest request);
  // Aborts every turn (server shutdown).
  void shutdown();

  const provider::ProviderSet& providers() const { return deps_.providers; }
  const std::map<std::string, Agent>& agents() const { return deps_.agents; }
  // The tools the model would be offered in this session with this agent (GET /tool).
  Result<std::vector<tool::ToolPtr>> offered_tools(
      const std::string& session_id, const std::string& agent,
      const std::map<std::string, bool>& switches = {});

 private:
  struct Turn;
  struct Step;
  // offered_tools for a session already read (nullptr: none), as a turn holds it.
  Result<std::vector<tool::ToolPtr>> offered_tools(const SessionInfo* session,
                                                   const std::string& agent,
                                                   const std::map<std::string, bool>& switches);
  struct Conversation;
  SessionService(ServiceDeps deps, ServiceOptions options);

  Result<std::shared_ptr<Turn>> begin_turn(const std::string& session_id);
  void end_turn(const std::string& session_id);
  boost::asio::awaitable<Result<MessageWithParts>> run_turn(std::shared_ptr<Turn> turn,
                                                            PromptInput input);
  boost::asio::awaitable<void> run_step(std::shared_ptr<Step> step);
  boost::asio::awaitable<void> run_tool(std::shared_ptr<Step> step, provider::ToolCall call);
  boost::asio::awaitable<Result<void>> ask(std::shared_ptr<Step> step, const std::string& call_id,
                                           tool::PermissionRequest request);
  void set_status(const std::string& session_id, json::object status);
  // The session's conversation, loaded from the store when it is not in memory.
  Result<std::shared_ptr<Conversation>> conversation(const std::string& session_id);
  // Publish now; store at the turn's next flush().
  void stage_part(Turn& turn, const Part& part);
  void stage_message(Turn& turn, const MessageInfo& info);
  // Stores what the turn has staged. `now` false (a step's start, a tool that waits): within
  // kWriteDelay, in one transaction with what every other turn has staged by then; a turn that
  // ends sooner stores everything once, at its end. `now` (a turn's end, before its answer goes
  // out): at once, with everything other turns have staged.
  void flush(const std::shared_ptr<Turn>& turn, bool now);
  // Stores what every turn has staged (and what failed to store before). On the executor's
  // thread, as everything that touches a turn's staged changes (or after the executor has
  // stopped, from the destructor).
  void write_pending();
  void publish_part(const Part& part);  // the event only
  // message.part.delta with the text streamed into a part since the last one.
  void publish_delta(Step& step);
  bool is_deleted(const std::string& session_id) const;
  // The offered tools as a ToolSet: the same object (with its serialized forms) as long as the
  // tools are the same.
  provider::ToolSet tool_set_for(const std::vector<tool::ToolPtr>& offered);

  ServiceDeps deps_;
  ServiceOptions options_;
  std::filesystem::path truncate_dir_;  // data_dir/truncate, symlinks resolved
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Turn>> turns_;
  std::map<std::string, json::object> status_;
  std::set<std::string> deleted_;  // so that an aborted turn winding down stores nothing
  std::map<std::string, std::shared_ptr<Conversation>> conversations_;
  std::uint64_t conversation_uses_ = 0;
  struct KnownToolSet {
    std::vector<tool::ToolPtr> tools;  // what it was made from
    provider::ToolSet set;
  };
  std::deque<KnownToolSet> tool_sets_;  // most recently made first
  bool shutting_down_ = false;
  // Turns with staged changes that a flush() asked to store; write_timer_ runs while any waits.
  std::vector<std::shared_ptr<Turn>> unsaved_turns_;
  boost::asio::steady_timer write_timer_;
  bool write_armed_ = false;
  // Changes whose write failed, in order, tried again ahead of the next write.
  struct PendingWrite {
    std::shared_ptr<Turn> turn;
    StoreChanges changes;
    int failures = 0;
  };
  std::vector<PendingWrite> failed_writes_;
};

}  // namespace sb::session
