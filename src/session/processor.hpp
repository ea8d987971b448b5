#pragma once
// Processor: the agent loop. A turn stores the user's message, then runs steps until the model
// stops calling tools: each step streams the model's answer into an assistant message (text,
// reasoning and tool parts), runs the tool calls (server tools concurrently, client tools
// delivered to their clients, permission asks and the doom loop on the way) and feeds their
// results to the next step. Runs on one executor (one thread), as the turns it runs.
#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "bus/event_bus.hpp"
#include "permission/service.hpp"
#include "provider/provider.hpp"
#include "session/agent.hpp"
#include "session/conversation_cache.hpp"
#include "session/files.hpp"
#include "session/tool_offer.hpp"
#include "session/turn.hpp"
#include "session/turn_writer.hpp"
#include "tool/registry.hpp"

namespace sb::session {

struct ServiceOptions {
  std::filesystem::path directory;                // the project directory
  std::string project_id;                         // project_of(directory).id; empty: "global"
  std::filesystem::path data_dir;                 // truncated outputs go to data_dir/truncate
  int retry_attempts = 4;                         // retry.attempts: tries after the first
  std::chrono::milliseconds retry_initial{1000};  // retry.initialDelay, doubled per attempt
  std::chrono::milliseconds retry_max{30000};     // retry.maxDelay
  FileOptions files;                              // files.*: limits of files in prompts
};

struct PromptInput {
  std::string text;
  // File parts (files.hpp), each with its place among the prompt's parts (`file_at`); the text
  // stands before the first file placed after `text_at`. SessionService reads them into
  // `file_parts` (one list per file) before the turn starts.
  std::vector<FileInput> files;
  std::vector<std::size_t> file_at;
  std::size_t text_at = 0;
  std::vector<std::vector<Part>> file_parts;
  std::optional<std::string> model;  // "PROVIDER/MODEL"
  std::optional<std::string> agent;
  std::map<std::string, bool> tools;  // per-prompt tool switches
  // The stored user message to answer again (SessionService::remove_last_answer): no new user
  // message, `text` unused.
  std::string answer_again;
  // noReply: the user's message is stored and no step runs; the turn answers that message.
  bool no_reply = false;
  // A summary of the conversation (POST /session/{id}/summarize) instead of `text`: the user's
  // message is a compaction part, the model is offered no tools and its answer is the summary
  // from which the model sees the conversation afterwards. `auto_continue`: recorded on the
  // part (the turn that goes on after it is SessionService::summarize's).
  bool compact = false;
  bool auto_continue = false;
  // The text is the server's, not the person's (the "go on" after an automatic summary).
  bool synthetic = false;
};

// A prompt's agent and model, looked up once per prompt (before a prompt_async answers, so that
// an unknown one is its caller's error).
struct ResolvedPrompt {
  std::string agent_name;
  Agent agent;  // as configured
  std::string provider_id;
  std::string model_id;
  provider::ProviderPtr provider;
};

// InvalidRequest naming an unknown agent, a model that is not "PROVIDER/MODEL" or an unknown
// provider. The model is the prompt's, else the agent's, else the default.
Result<ResolvedPrompt> resolve_prompt(const std::map<std::string, Agent>& agents,
                                      const provider::ProviderSet& providers,
                                      const PromptInput& input);

// A new message of a turn (of the prompt's agent and model) and a new part of a message, with
// fresh ids: the turns' and the shell's.
MessageInfo new_message(const std::string& session_id, MessageInfo::Role role,
                        const ResolvedPrompt& prompt);
Part new_part(const MessageInfo& message, Part::Type type);

// Reads the prompt's files (resolve_files, for a session in `directory` and the prompt's model)
// into input.file_parts. Errors name the part: 400, or 413 past a limit.
Result<void> read_prompt_files(PromptInput& input, const std::filesystem::path& directory,
                               const FileOptions& options, const ResolvedPrompt& prompt);

struct ProcessorDeps {
  std::shared_ptr<bus::EventBus> bus;
  std::shared_ptr<tool::ToolRegistry> tools;
  std::shared_ptr<permission::PermissionService> permissions;
  permission::Ruleset config_rules;  // "permission" of the config file
  std::shared_ptr<TurnWriter> writer;
  std::shared_ptr<ConversationCache> conversations;
  std::shared_ptr<StatusBoard> status;
};

class Processor : public std::enable_shared_from_this<Processor> {
 public:
  static std::shared_ptr<Processor> create(ProcessorDeps deps, ServiceOptions options);

  // Runs `turn` (begun by its caller, who ends it) to its end and returns the last assistant
  // message with its parts. Everything is stored when it returns.
  boost::asio::awaitable<Result<MessageWithParts>> run_turn(std::shared_ptr<Turn> turn,
                                                            PromptInput input,
                                                            ResolvedPrompt prompt);

  // ---- durable waits (resume.cpp; design.md decision 5) ----
  // Whether `turn` may stop with the server and go on after its restart: its step's model answer
  // has ended, and every call of the step that has not ended waits for a client or for a
  // person's answer to an ask (stored).
  static bool can_suspend(const Turn& turn);
  // Goes on with a turn that a stop or a crash left waiting: `open` is its step's message as
  // stored, `waits` what the step's calls waited for, `steps_done` how many steps the turn had
  // made, `switches` its prompt's tool switches. Client calls are pending again under their request
  // ids; asks wait again under their ids, and a call whose ask is allowed runs from its start; a
  // call of the step that was running without a stored wait failed with the server. Once every call
  // has ended, the step ends and the turn goes on as if nothing had happened. `turn` is begun by
  // its caller, who ends it.
  boost::asio::awaitable<Result<MessageWithParts>> resume_turn(
      std::shared_ptr<Turn> turn, ResolvedPrompt prompt, MessageWithParts open,
      std::vector<Wait> waits, int steps_done, std::map<std::string, bool> switches);

 private:
  Processor(ProcessorDeps deps, ServiceOptions options);

  // The turn's agent, tools and rules (`switches`: the prompt's tool switches).
  Result<void> prepare(Turn& turn, ResolvedPrompt& prompt,
                       const std::map<std::string, bool>& switches);
  // The model steps of a turn from `first_step` on, answering the user's message `user_id`.
  // Returns the last step's message (its index in turn->messages), none when no step ran.
  boost::asio::awaitable<Result<std::optional<std::size_t>>> run_steps(std::shared_ptr<Turn> turn,
                                                                       const PromptInput& input,
                                                                       const ResolvedPrompt& prompt,
                                                                       std::string user_id,
                                                                       int first_step);
  // The step's end (its error, its completion time), staged; `index`: its message in
  // turn.messages. Whether the turn goes on with another step.
  bool end_step(Turn& turn, Step& step, bool compact, std::size_t& index);

  boost::asio::awaitable<void> run_step(std::shared_ptr<Step> step);
  boost::asio::awaitable<void> run_tool(std::shared_ptr<Step> step, provider::ToolCall call);
  // A stored client call of a resumed step, pending again until it ends.
  boost::asio::awaitable<void> resume_call(std::shared_ptr<Step> step,
                                           clienttool::WaitingCall wait);
  // A call of the step waits for `wait` (stored with the turn's next write; a call's earlier
  // wait ends), and no longer does.
  void begin_wait(Step& step, const std::string& call_id, Wait wait);
  void end_wait(Step& step, std::map<std::string, Wait>::iterator wait);
  // A stored ask of a resumed step, waiting again under its id; once allowed the call runs
  // (run_tool), otherwise it fails as the ask did.
  boost::asio::awaitable<void> resume_ask(std::shared_ptr<Step> step,
                                          permission::PermissionRequest ask);
  // A call of a resumed step runs again from its start (its tool looked up among what is offered
  // now); a question it asks is asked under `question_id` when that is not empty.
  boost::asio::awaitable<void> run_again(std::shared_ptr<Step> step, std::string call_id,
                                         std::string question_id);
  // What a tool call of the step runs with (its session, abort, asks, progress, waits).
  tool::ToolContext tool_context(const std::shared_ptr<Step>& step, const std::string& call_id);
  // A call's end: its part gets the result (output truncated and saved when long) or the error.
  void finish_call(Step& step, const std::string& call_id, const std::string& tool_name,
                   Result<tool::ToolResult> result);
  boost::asio::awaitable<Result<void>> ask(std::shared_ptr<Step> step, const std::string& call_id,
                                           tool::PermissionRequest request);
  // A person answered an ask of the turn "always": `added` joins the turn's rules and its
  // session's approved ones (stored).
  void approve(const std::shared_ptr<Turn>& turn, const permission::Ruleset& added);
  // A permission ask or an interactive tool starts (`waiting`) or stops waiting for a person:
  // the session awaits input while any does.
  void awaiting_person(Turn& turn, bool waiting);
  // message.part.delta with the text streamed into a part since the last one.
  void publish_delta(Step& step);

  ProcessorDeps deps_;
  ServiceOptions options_;
  std::filesystem::path truncate_dir_;  // data_dir/truncate, symlinks resolved
  ToolSetCache tool_sets_;
};

}  // namespace sb::session
