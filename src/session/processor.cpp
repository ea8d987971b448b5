#include "session/processor.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <ctime>

#include "permission/doom_loop.hpp"
#include "tool/arguments.hpp"
#include "tool/builtin/invalid.hpp"
#include "tool/truncate.hpp"
#include "util/ids.hpp"
#include "util/log.hpp"

namespace sb::session {

namespace asio = boost::asio;
constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

namespace {

constexpr std::string_view kLastStepNote =
    "\n\nThis is the last step of this turn (the agent's step limit): tools are not available "
    "now. Answer with text only: say what was done, what is left, and what the user could ask "
    "for next.";

// What the model is asked for a summary (as its system prompt and as the last user message),
// in words of our own: the summary replaces the conversation for every later step, so it must
// carry what a model needs to go on.
constexpr std::string_view kSummarySystem =
    "You write summaries of conversations between a user and a coding agent. The summary "
    "replaces the conversation: the agent that continues the work sees only the summary and what "
    "comes after it.";
constexpr std::string_view kSummaryRequest =
    "Summarize our conversation so far for the agent that will continue it. Do not call tools; "
    "answer with the summary only, under these headings:\n"
    "## Goal\nWhat the user wants done.\n"
    "## Instructions\nWhat the user asked for or ruled out that still holds, and any plan.\n"
    "## Findings\nWhat was learned that the next agent needs.\n"
    "## Progress\nWhat is done, what is under way and what is left.\n"
    "## Files\nThe files and directories read, changed or created that matter for the work.";

std::string system_prompt(const Agent& agent, const std::filesystem::path& directory) {
  std::string prompt = agent.prompt;
  if (prompt.empty())
    prompt =
        "You are Switchboard, an agent that helps the user with tasks in their project. Use the "
        "tools you are given to look things up and make changes; some tools run on the user's own "
        "machine or in their browser. Be concise.";
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d", &tm);
  return prompt + "\n\n<env>\nWorking directory: " + directory.string() +
         "\nToday's date: " + date + "\n</env>";
}

NamedError named_error(const provider::StreamError& e) {
  if (e.message == "aborted") return {"MessageAbortedError", "The turn was aborted", {}};
  if (e.http_status == 401 || e.http_status == 403)
    return {"ProviderAuthError", e.message, json::object{{"statusCode", e.http_status}}};
  json::object data{{"isRetryable", e.retryable}};
  if (e.http_status) data["statusCode"] = e.http_status;
  return {"APIError", e.message, std::move(data)};
}

}  // namespace

// A new message of a turn, of the prompt's agent and model.
MessageInfo new_message(const std::string& session_id, MessageInfo::Role role,
                        const ResolvedPrompt& prompt) {
  MessageInfo m;
  m.id = ids::make("msg");
  m.session_id = session_id;
  m.role = role;
  m.created = now_ms();
  m.agent = prompt.agent_name;
  m.provider_id = prompt.provider_id;
  m.model_id = prompt.model_id;
  return m;
}

// A new part of `message`.
Part new_part(const MessageInfo& message, Part::Type type) {
  Part p;
  p.id = ids::make("prt");
  p.session_id = message.session_id;
  p.message_id = message.id;
  p.type = type;
  return p;
}

Result<ResolvedPrompt> resolve_prompt(const std::map<std::string, Agent>& agents,
                                      const provider::ProviderSet& providers,
                                      const PromptInput& input) {
  ResolvedPrompt out;
  out.agent_name = input.agent.value_or("build");
  auto agent = agents.find(out.agent_name);
  if (agent == agents.end())
    return make_error(ErrorCode::InvalidRequest, "Unknown agent: " + out.agent_name);
  out.agent = agent->second;
  std::string model = input.model.value_or(out.agent.model.value_or(providers.default_model));
  auto slash = model.find('/');
  if (slash == std::string::npos)
    return make_error(ErrorCode::InvalidRequest,
                      "model must be \"PROVIDER/MODEL\", got \"" + model + "\"");
  out.provider_id = model.substr(0, slash);
  out.model_id = model.substr(slash + 1);
  auto provider = providers.providers.find(out.provider_id);
  if (provider == providers.providers.end())
    return make_error(ErrorCode::InvalidRequest, "Unknown model provider: " + out.provider_id);
  out.provider = provider->second;
  return out;
}

Result<void> read_prompt_files(PromptInput& input, const std::filesystem::path& directory,
                               const FileOptions& options, const ResolvedPrompt& prompt) {
  if (input.files.empty()) return {};
  auto parts =
      resolve_files(input.files, input.file_at, directory, options, prompt.provider->input());
  if (!parts) return parts.error();
  input.file_parts = std::move(*parts);
  return {};
}

std::shared_ptr<Processor> Processor::create(ProcessorDeps deps, ServiceOptions options) {
  return std::shared_ptr<Processor>(new Processor(std::move(deps), std::move(options)));
}

Processor::Processor(ProcessorDeps deps, ServiceOptions options)
    : deps_(std::move(deps)), options_(std::move(options)) {
  // As paths the tools resolve it (external_directory asks name real paths): once, for every
  // turn's rule that lets a session read its saved outputs.
  std::error_code ec;
  auto dir = tool::saved_outputs_dir(options_.data_dir);
  truncate_dir_ = std::filesystem::weakly_canonical(dir, ec);
  if (ec) truncate_dir_ = dir.lexically_normal();
}

void Processor::awaiting_person(Turn& turn, bool waiting) {
  if (waiting && ++turn.awaiting == 1)
    deps_.status->set(turn.session.id, json::object{{"type", "awaiting-input"}});
  if (!waiting && --turn.awaiting == 0 && !turn.abort->aborted())
    deps_.status->set(turn.session.id, json::object{{"type", "busy"}});
}

void Processor::publish_delta(Step& step) {
  if (!step.delta_part || step.delta.empty()) return;
  const Part& part = *step.delta_part;
  step.delta_part = nullptr;
  std::string delta = std::exchange(step.delta, {});
  if (deps_.writer->is_deleted(part.session_id)) return;
  deps_.bus->publish("message.part.delta", json::object{{"sessionID", part.session_id},
                                                        {"messageID", part.message_id},
                                                        {"partID", part.id},
                                                        {"field", "text"},
                                                        {"delta", std::move(delta)}});
}

Result<void> Processor::prepare(Turn& turn, ResolvedPrompt& prompt,
                                const std::map<std::string, bool>& switches) {
  const std::string& session_id = turn.session.id;
  // Offered as the agent is configured, before this turn's rule below.
  auto offered = offered_tools(prompt.agent, &turn.session, deps_.config_rules, *deps_.permissions,
                               *deps_.tools, switches);
  turn.agent = std::move(prompt.agent);
  // The truncation note tells the model to read the full output where it was saved: this
  // session's saved outputs are read without an ask (a headless server rejected it). As an
  // agent default (after the built-in rules, before the config's for this agent), so that the
  // config file or the session may still deny it.
  auto& rules = turn.agent.permission;
  rules.insert(
      rules.begin() + static_cast<std::ptrdiff_t>(std::min(turn.agent.builtin_rules, rules.size())),
      {"external_directory", (tool::session_output_dir(truncate_dir_, session_id) / "*").string(),
       permission::Action::Allow});
  if (!offered) return offered.error();
  turn.offered = std::move(*offered);
  turn.switches = switches;
  turn.session_rules = turn.session.permission;
  turn.session_rules.insert(turn.session_rules.end(), turn.session.approved.begin(),
                            turn.session.approved.end());
  return {};
}

asio::awaitable<Result<MessageWithParts>> Processor::run_turn(std::shared_ptr<Turn> turn,
                                                              PromptInput input,
                                                              ResolvedPrompt prompt) {
  const std::string& session_id = turn->session.id;
  if (auto prepared = prepare(*turn, prompt, input.tools); !prepared) co_return prepared.error();

  // Read before the user's message is added to it.
  auto conversation = co_await deps_.conversations->get(session_id);
  if (!conversation) co_return conversation.error();
  turn->conversation = *conversation;

  // The user's message: a new one, or the stored one whose answer is made again (the
  // conversation read above has it).
  MessageInfo user = new_message(session_id, MessageInfo::Role::User, prompt);
  user.tools = input.tools;  // kept: a turn that goes on after a restart offers what it did
  if (input.compact) {
    deps_.writer->stage_message(*turn, user);
    Part ask = new_part(user, Part::Type::Compaction);
    ask.auto_continue = input.auto_continue;
    deps_.writer->stage_part(*turn, ask);
    // Asked in full here; once answered, the stored question reads as kSummaryQuestion.
    turn->conversation->messages.push_back(
        provider::ModelMessage::user(std::string(kSummaryRequest), {}));
  } else if (!input.answer_again.empty()) {
    user.id = input.answer_again;
  } else {
    deps_.writer->stage_message(*turn, user);
    Part text = new_part(user, Part::Type::Text);
    text.text = input.text;  // no time: OpenCode's CLI prints a text part with time.end as output
    text.synthetic = input.synthetic;
    // The parts in the prompt's order: the files' (files.hpp) with the text among them.
    // Ids in that order too: the message's parts are listed by id.
    MessageWithParts asked{user, {}};
    bool text_placed = false;
    for (std::size_t i = 0; i <= input.file_parts.size(); ++i) {
      if (!text_placed && (i == input.file_parts.size() || input.file_at[i] > input.text_at)) {
        text_placed = true;
        text.id = ids::make("prt");
        // A prompt of files alone has no text part.
        if (!input.text.empty() || input.file_parts.empty()) asked.parts.push_back(std::move(text));
      }
      if (i == input.file_parts.size()) break;
      for (auto& p : input.file_parts[i]) {
        p.id = ids::make("prt");
        p.session_id = session_id;
        p.message_id = user.id;
        asked.parts.push_back(std::move(p));
      }
    }
    for (const auto& p : asked.parts)
      deps_.writer->stage_part(*turn, p);
    append_history(asked, turn->conversation->messages);
  }
  turn->session.updated = now_ms();
  turn->unsaved_session = turn->session;
  if (deps_.bus->has_subscribers())
    deps_.bus->publish("session.updated",
                       json::object{{"sessionID", session_id}, {"info", to_json(turn->session)}});
  if (input.no_reply) {
    co_await deps_.writer->store(turn);
    co_return turn->messages.front();
  }

  auto last = co_await run_steps(turn, input, prompt, user.id, 0);
  if (!last) co_return last.error();
  // Stored (as text) by now: the message can leave the turn.
  co_return *last ? std::move(turn->messages[**last]) : MessageWithParts{};
}

asio::awaitable<Result<std::optional<std::size_t>>> Processor::run_steps(
    std::shared_ptr<Turn> turn, const PromptInput& input, const ResolvedPrompt& prompt,
    std::string user_id, int first_step) {
  const std::string& session_id = turn->session.id;
  provider::ToolSet tool_set = input.compact ? provider::ToolSet() : tool_sets_.get(turn->offered);

  std::optional<std::size_t> last;  // the last step's message in turn->messages
  for (int step_no = first_step; step_no < turn->agent.max_steps; ++step_no) {
    if (turn->abort->aborted()) break;

    auto step = std::make_shared<Step>();
    step->turn = turn;
    step->provider = prompt.provider;
    step->running = std::make_unique<WaitGroup>(co_await asio::this_coro::executor);
    step->request.model = prompt.model_id;
    step->request.input = prompt.provider->input();
    step->request.system = system_prompt(turn->agent, options_.directory);
    step->request.tools = tool_set;
    // The agent's last step may call no tools, and the model is told why: the turn ends with
    // its account of what it did instead of with a tool call whose result nobody reads.
    if (input.compact) {
      step->request.no_tool_calls = true;
      step->request.system = kSummarySystem;
    } else if (step_no + 1 >= turn->agent.max_steps) {
      step->request.no_tool_calls = true;
      step->request.system += kLastStepNote;
    }
    MessageInfo& m = step->message;
    m = new_message(session_id, MessageInfo::Role::Assistant, prompt);
    if (input.compact) {
      m.agent = "compaction";  // OpenCode's name for the summary's agent and mode
      m.summary = true;
    }
    m.parent_id = user_id;
    m.cwd = options_.directory.string();
    deps_.writer->stage_message(*turn, m);
    deps_.writer->stage_part(*turn, new_part(m, Part::Type::StepStart));
    // The open assistant message is what a restart marks as interrupted.
    deps_.writer->flush(turn, false);

    turn->step = step;
    {
      // The step's request holds the conversation while the model answers; it comes back
      // however the step ends.
      Conversation& conv = *turn->conversation;
      step->request.messages = std::move(conv.messages);
      struct GiveBack {
        Conversation& conv;
        provider::ModelRequest& request;
        ~GiveBack() { conv.messages = std::move(request.messages); }
      } give_back{conv, step->request};
      co_await run_step(step);
    }
    turn->step.reset();
    if (turn->suspended) {
      // Its open message and waiting calls are stored as they are: the restarted server goes on.
      co_await deps_.writer->store(turn);
      co_return make_error(ErrorCode::Unavailable,
                           "Server shutting down: the turn goes on when the server is back");
    }
    std::size_t index = 0;
    bool go_on = end_step(*turn, *step, input.compact, index);
    last = index;
    if (!go_on) break;
  }
  // Everything of the turn is stored before its answer; while the checkpoint thread holds the
  // store, the turn waits on a timer, not the thread.
  co_await deps_.writer->store(turn);
  co_return last;
}

bool Processor::end_step(Turn& turn, Step& step, bool compact, std::size_t& index) {
  const std::string& session_id = turn.session.id;
  MessageInfo& m = step.message;
  if (turn.abort->aborted()) {
    m.error = NamedError{"MessageAbortedError", turn.abort->reason(), {}};
  } else if (step.error) {
    m.error = named_error(*step.error);
    // The same error as on the message: name, message and the rest (statusCode, isRetryable).
    json::object data = m.error->data;
    data["message"] = m.error->message;
    deps_.bus->publish(
        "session.error",
        json::object{{"sessionID", session_id},
                     {"error", json::object{{"name", m.error->name}, {"data", std::move(data)}}}});
  } else if (step.halt) {
    // Not the session's failure (no session.error), but the turn's answer must say why it
    // stopped: otherwise a rejected ask leaves a reply without a word about it.
    m.error = NamedError{"PermissionRejectedError", *step.halt, {}};
  }
  if (compact && !m.error) {
    // A summary that says nothing, or that the length limit cut off, would replace the
    // conversation with less than it held: it counts as failed, and the conversation stays.
    const MessageWithParts* so_far = turn.change(m.id);
    bool said =
        so_far && std::any_of(so_far->parts.begin(), so_far->parts.end(), [](const Part& p) {
          return p.type == Part::Type::Text &&
                 p.text.find_first_not_of(" \t\r\n") != std::string::npos;
        });
    if (!said || m.finish == "length")
      m.error = NamedError{"SummaryError",
                           !said ? "the model's summary was empty"
                                 : "the model's summary was cut off at its length limit",
                           {}};
  }
  m.completed = now_ms();
  deps_.writer->stage_message(turn, m);

  // The message with its parts as stored, which the conversation gains (a resumed turn reads
  // its conversation afterwards, from the store).
  const MessageWithParts* stored = turn.change(m.id);
  if (turn.conversation) append_history(*stored, turn.conversation->messages);
  index = static_cast<std::size_t>(stored - turn.messages.data());
  bool called_tools = !step.tools.empty();
  return !(m.error || step.halt || !called_tools || compact);
}

asio::awaitable<void> Processor::run_step(std::shared_ptr<Step> step) {
  auto executor = co_await asio::this_coro::executor;
  auto& turn = *step->turn;
  const std::string& session_id = turn.session.id;
  auto self = shared_from_this();

  auto on_event = [&](provider::StreamEvent event) {
    bool is_delta = std::holds_alternative<provider::TextDelta>(event) ||
                    std::holds_alternative<provider::ReasoningDelta>(event);
    if (!is_delta) publish_delta(*step);  // what streamed so far goes out before what follows
    std::visit(
        [&](auto& e) {
          using E = std::decay_t<decltype(e)>;
          if constexpr (std::is_same_v<E, provider::TextDelta> ||
                        std::is_same_v<E, provider::ReasoningDelta>) {
            bool reasoning = std::is_same_v<E, provider::ReasoningDelta>;
            auto& slot = reasoning ? step->reasoning : step->text;
            // Text of the other part (reasoning, then text) goes out first, as its own delta
            // and before this part is announced.
            if (step->delta_part && (!slot || step->delta_part != &*slot)) publish_delta(*step);
            if (!slot) {
              Part p =
                  new_part(step->message, reasoning ? Part::Type::Reasoning : Part::Type::Text);
              p.start = now_ms();
              slot = p;
              deps_.writer->stage_part(turn, *slot);
            }
            slot->text += e.text;
            step->emitted = true;
            if (deps_.bus->has_subscribers()) {
              // Gathered and published once the stream's current read is handled: a fast model
              // sends hundreds of deltas in one read, and an event each overflowed the queue of
              // every /event subscriber (1,024 frames) before one frame could be written.
              step->delta_part = &*slot;
              step->delta += e.text;
              if (!step->delta_posted) {
                step->delta_posted = true;
                asio::post(executor, [self, step] {
                  step->delta_posted = false;
                  self->publish_delta(*step);
                });
              }
            }
          } else if constexpr (std::is_same_v<E, provider::ToolInputStart>) {
            Part p = new_part(step->message, Part::Type::Tool);
            p.call_id = e.id;
            p.tool = e.name;
            p.state.status = ToolState::Status::Pending;
            step->tools[e.id] = p;
            step->tool_order.push_back(e.id);
            step->emitted = true;
            deps_.writer->stage_part(turn, p);
          } else if constexpr (std::is_same_v<E, provider::ToolInputDelta>) {
            if (auto it = step->tools.find(e.id); it != step->tools.end())
              it->second.state.raw += e.delta;
          } else if constexpr (std::is_same_v<E, provider::ToolCall>) {
            step->emitted = true;
            step->running->add();
            asio::co_spawn(executor, self->run_tool(step, std::move(e)),
                           [step](std::exception_ptr ex) {
                             if (ex) {
                               try {
                                 std::rethrow_exception(ex);
                               } catch (const std::exception& what) {
                                 log::error("tool call crashed: ", what.what());
                               }
                             }
                           });
          } else if constexpr (std::is_same_v<E, provider::StepFinish>) {
            step->finish = std::move(e);
          } else if constexpr (std::is_same_v<E, provider::StreamError>) {
            step->error = std::move(e);
          }
        },
        event);
  };

  // Shared with the abort callback's posted handler, which may run after this frame is gone.
  auto backoff = std::make_shared<asio::steady_timer>(executor);
  for (int attempt = 0;; ++attempt) {
    step->error.reset();
    step->finish.reset();
    co_await step->provider->stream(step->request, on_event, turn.abort);
    if (!step->error || !step->error->retryable || step->emitted || turn.abort->aborted() ||
        attempt >= options_.retry_attempts)
      break;
    std::chrono::milliseconds delay = std::min<std::chrono::milliseconds>(
        options_.retry_initial * (1LL << std::min(attempt, 20)), options_.retry_max);
    deps_.status->set(session_id,
                      json::object{{"type", "retry"},
                                   {"attempt", attempt + 1},
                                   {"message", step->error->message},
                                   {"next", static_cast<std::int64_t>(now_ms() + delay.count())}});
    backoff->expires_after(delay);
    {
      AbortSignal::Registration reg(turn.abort, [backoff, executor] {
        asio::post(executor, [backoff] { backoff->cancel(); });
      });
      co_await backoff->async_wait(tuple_awaitable);
    }
    deps_.status->set(session_id, json::object{{"type", "busy"}});
  }

  publish_delta(*step);
  // The model's stream has ended: its text and reasoning are whole. They end before the step's
  // finish, as OpenCode orders them (its CLI prints a text part when it ends, and stops reading
  // at the turn's end).
  for (auto* slot : {&step->text, &step->reasoning}) {
    if (!*slot) continue;
    (*slot)->end = now_ms();
    deps_.writer->stage_part(turn, **slot);
  }
  // The model is done with the step: its usage and finish reason go out now, before the tools'
  // results, so that a watcher (a chat's stream) knows that no more calls come in this step.
  if (step->finish) {
    MessageInfo& m = step->message;
    const auto& u = step->finish->usage;
    m.tokens = {u.input, u.output, u.reasoning, u.cache_read, u.cache_write};
    m.finish = std::string(provider::finish_reason_name(step->finish->reason));
    Part finish = new_part(m, Part::Type::StepFinish);
    finish.reason = m.finish;
    finish.tokens = m.tokens;
    deps_.writer->stage_part(turn, finish);
  }
  step->streamed = true;
  // A step whose calls wait has its end of the model's answer stored meanwhile: a restart goes
  // on only with a step whose calls are all known.
  if (step->running->count() > 0) deps_.writer->flush(step->turn, false);
  // Server tools run concurrently and client calls wait for their clients; the step ends when
  // every call has its result (design.md decision 7).
  co_await step->running->wait();

  if (turn.suspended) co_return;
  auto now = now_ms();
  // A call whose input never finished streaming cannot run: it fails rather than hang.
  for (const auto& id : step->tool_order) {
    Part& p = step->tools[id];
    if (p.state.status != ToolState::Status::Pending) continue;
    p.state.status = ToolState::Status::Error;
    p.state.error = turn.abort->aborted() ? "Tool execution aborted"
                                          : "The model did not finish this tool call";
    p.state.start = p.state.end = now;
    deps_.writer->stage_part(turn, p);
  }
}

void Processor::approve(const std::shared_ptr<Turn>& turn, const permission::Ruleset& added) {
  // Later asks of this turn see them in its rules; the session's row keeps them (stored within
  // the write delay, with the turn's other changes).
  turn->session.approved.insert(turn->session.approved.end(), added.begin(), added.end());
  turn->session_rules.insert(turn->session_rules.end(), added.begin(), added.end());
  turn->unsaved_session = turn->session;
  deps_.writer->flush(turn, false);
}

asio::awaitable<Result<void>> Processor::ask(std::shared_ptr<Step> step, const std::string& call_id,
                                             tool::PermissionRequest request) {
  Turn& turn = *step->turn;
  permission::AskParams params;
  params.session_id = turn.session.id;
  params.message_id = step->message.id;
  params.call_id = call_id;
  params.permission = request.permission;
  params.patterns = request.patterns;
  params.always = request.always;
  params.metadata = request.metadata;
  permission::Layers layers{&turn.agent.permission, &deps_.config_rules, &turn.session_rules};
  // Settled by the rules (allowed or denied at once) without giving up the executor, so a tool
  // that needs no person runs on (and ends without waiting, see run_tool).
  auto settled = deps_.permissions->decide(params, layers);
  // A call run again after a restart, whose ask the person allowed then.
  if (auto grant = step->granted.find(call_id); !settled && grant != step->granted.end() &&
                                                grant->second.permission == params.permission &&
                                                grant->second.patterns == params.patterns) {
    step->granted.erase(grant);
    co_return Result<void>{};
  }
  // Asked under the id it had before a restart (resume_ask), once, whether it waits or not.
  auto again = step->ask_again.find(call_id);
  if (again != step->ask_again.end()) {
    if (!settled) params.id = std::move(again->second);
    step->ask_again.erase(again);
  }
  if (!settled) {
    // The ask is stored while it waits: a restart asks it again (resume_ask).
    auto self = shared_from_this();
    params.on_waiting = [self, step, call_id](const permission::PermissionRequest& r) {
      self->begin_wait(*step, call_id, Wait::of(r));
    };
    params.on_always = [self, step](const permission::Ruleset& added) {
      self->approve(step->turn, added);
    };
    awaiting_person(turn, true);
    settled = co_await deps_.permissions->async_ask(std::move(params), std::move(layers),
                                                    asio::use_awaitable);
    awaiting_person(turn, false);
    // A suspended turn's ask that the stop cancelled waits again after the restart: nothing of
    // it ends here. (One answered before the stop ends as answered.)
    if (turn.suspended && !*settled &&
        settled->error().kind == permission::Rejection::Kind::Cancelled)
      co_return make_error(ErrorCode::Unavailable, "Server shutting down");
  }
  // The ask has its answer: its stored wait (this one's, or a resumed one's that the rules now
  // settle) ends.
  if (auto wait = step->waits.find(call_id); wait != step->waits.end() && wait->second.ask)
    end_wait(*step, wait);
  const permission::AskOutcome& outcome = *settled;
  if (!outcome) {
    if (outcome.error().halts_turn() && !step->halt) step->halt = outcome.error().error().message;
    co_return outcome.error().error();
  }
  co_return Result<void>{};
}

asio::awaitable<void> Processor::run_tool(std::shared_ptr<Step> step, provider::ToolCall call) {
  Turn& turn = *step->turn;
  const std::string& session_id = turn.session.id;
  auto& parts = step->tools;
  if (!parts.count(call.id)) {
    Part p = new_part(step->message, Part::Type::Tool);
    p.call_id = call.id;
    p.tool = call.name;
    parts[call.id] = p;
    step->tool_order.push_back(call.id);
  }
  // Route what cannot run as asked to the `invalid` tool, whose output tells the model what to fix.
  std::string tool_name = call.name;
  json::value input = call.input;
  tool::ToolPtr tool;
  std::optional<std::string> invalid_reason;
  // The tools of this step's request (none on the agent's last step), as the turn offered them:
  // a chat's own tools are offered by their plain names, which only the offer resolves.
  std::vector<std::string> available;
  for (const auto& t : step->request.tools)
    available.push_back(t.name);
  if (!call.input_valid) {
    invalid_reason = call.input_error;
  } else if (std::find(available.begin(), available.end(), call.name) != available.end()) {
    auto offered = std::find_if(turn.offered.begin(), turn.offered.end(),
                                [&](const tool::ToolPtr& t) { return t->id() == call.name; });
    if (offered != turn.offered.end()) tool = *offered;
  }
  if (!invalid_reason && !tool) invalid_reason = tool::unknown_tool_error(call.name, available);
  json::object args;
  if (!invalid_reason) {
    auto prepared = tool::prepare_arguments(*tool, input);
    if (!prepared)
      invalid_reason = prepared.error().message;
    else
      args = std::move(*prepared);
  }
  if (invalid_reason) {
    tool = deps_.tools->find("invalid", session_id);
    tool_name = "invalid";
    args = json::object{{"tool", call.name}, {"error", *invalid_reason}};
  }

  Part& part = parts[call.id];
  part.tool = tool_name;
  part.state.status = ToolState::Status::Running;
  part.state.input = args;
  part.state.start = now_ms();
  deps_.writer->stage_part(turn, part);
  // A restart must find a call that was running (and then mark it failed): one that still runs
  // when the write delay ends is stored as running then. One that ends sooner (a file read) is
  // stored once, with its result.
  deps_.writer->flush(step->turn, false);

  auto finish = [&](Result<tool::ToolResult> result) {
    finish_call(*step, call.id, tool_name, std::move(result));
  };

  if (!tool) {
    finish(make_error(ErrorCode::Internal, "the invalid tool is not registered"));
    co_return;
  }
  // The third identical call in a row asks before it runs (seed 002's doom loop).
  turn.calls.push_back({tool_name, json::value(args), false});
  if (permission::is_doom_loop(turn.calls, tool_name, json::value(args))) {
    // Named, not braced in the co_await: GCC 12 miscompiles braced temporaries there.
    tool::PermissionRequest request;
    request.permission = "doom_loop";
    request.patterns = {tool_name};
    request.always = {tool_name};
    request.metadata = json::object{{"tool", tool_name}, {"input", args}};
    auto ok = co_await ask(step, call.id, std::move(request));
    if (!ok) {
      finish(ok.error());
      co_return;
    }
  }

  tool::ToolContext ctx = tool_context(step, call.id);
  auto result = co_await tool->execute(std::move(args), ctx);
  finish(std::move(result));
}

void Processor::begin_wait(Step& step, const std::string& call_id, Wait wait) {
  auto it = step.waits.find(call_id);
  // Stored already: a resumed call's own wait, waiting again under its id.
  if (it != step.waits.end() && it->second.id == wait.id) return;
  if (it != step.waits.end()) end_wait(step, it);
  deps_.writer->stage_wait(step.turn, wait);
  step.waits.emplace(call_id, std::move(wait));
}

void Processor::end_wait(Step& step, std::map<std::string, Wait>::iterator wait) {
  step.released.erase(wait->first);
  deps_.writer->end_wait(step.turn, wait->second.id);
  step.waits.erase(wait);
}

tool::ToolContext Processor::tool_context(const std::shared_ptr<Step>& step,
                                          const std::string& call_id) {
  Turn& turn = *step->turn;
  tool::ToolContext ctx;
  ctx.session_id = turn.session.id;
  ctx.message_id = step->message.id;
  ctx.call_id = call_id;
  ctx.agent = turn.agent.name;
  ctx.directory = options_.directory;
  ctx.data_dir = options_.data_dir;
  ctx.abort = turn.abort;
  auto self = shared_from_this();
  ctx.ask = [self, step, call_id](tool::PermissionRequest r) {
    return self->ask(step, call_id, std::move(r));
  };
  ctx.metadata = [self, step, call_id](std::optional<std::string> title, json::object meta) {
    Part& p = step->tools[call_id];
    if (p.state.status != ToolState::Status::Running) return;
    if (title) p.state.title = *title;
    for (auto& [k, v] : meta)
      p.state.metadata[k] = v;
    self->deps_.writer->publish_part(p);
  };
  ctx.awaiting_person = [self, step](bool waiting) { self->awaiting_person(*step->turn, waiting); };
  ctx.waiting = [self, step, call_id](const clienttool::WaitingCall& call) {
    self->begin_wait(*step, call_id, Wait::of(call));
  };
  ctx.asking = [self, step, call_id](const std::string& id) {
    Wait wait;
    wait.id = id;
    wait.session_id = step->turn->session.id;
    wait.message_id = step->message.id;
    wait.call_id = call_id;
    self->begin_wait(*step, call_id, std::move(wait));
  };
  if (auto again = step->question_again.find(call_id); again != step->question_again.end()) {
    ctx.question_id = std::move(again->second);
    step->question_again.erase(again);
  }
  return ctx;
}

void Processor::finish_call(Step& step, const std::string& call_id, const std::string& tool_name,
                            Result<tool::ToolResult> result) {
  Turn& turn = *step.turn;
  const std::string& session_id = turn.session.id;
  if (auto wait = step.waits.find(call_id); wait != step.waits.end()) {
    // A suspended turn's call that the stop ended goes on after the restart: its part stays
    // running, its wait stored. (A result that was on its way before the stop is taken.)
    if (turn.suspended && step.released.count(call_id) && !result &&
        result.error().code == ErrorCode::Unavailable) {
      step.running->done();
      return;
    }
    end_wait(step, wait);
  }
  Part& p = step.tools[call_id];
  p.state.end = now_ms();
  if (turn.abort->aborted() && !result) {
    p.state.status = ToolState::Status::Error;
    p.state.error = "Tool execution aborted";
  } else if (!result) {
    p.state.status = ToolState::Status::Error;
    p.state.error = result.error().message;
  } else {
    p.state.status = ToolState::Status::Completed;
    p.state.title = result->title;
    p.state.metadata = std::move(result->metadata);
    // What the tool cut itself (glob's first 100 files, bash past its capture limit) stays
    // said when the output is within the limits here.
    auto said = p.state.metadata.find("truncated");
    bool cut =
        said != p.state.metadata.end() && said->value().is_bool() && said->value().get_bool();
    if (result->bounded) {
      p.state.output = std::move(result->output);
    } else {
      auto truncated = tool::truncate_output(std::move(result->output), session_id, tool_name,
                                             tool::TruncateOptions{truncate_dir_});
      p.state.output = std::move(truncated.content);
      cut = cut || truncated.truncated;
      if (truncated.output_path) p.state.metadata["outputPath"] = truncated.output_path->string();
    }
    p.state.metadata["truncated"] = cut;
    p.state.attachments = std::move(result->attachments);
    for (auto& f : result->file_changes)
      turn.unsaved_files.push_back(FileChangeRow{session_id, p.message_id, p.id, f.path.string(),
                                                 std::move(f.before), std::move(f.after)});
  }
  deps_.writer->stage_part(turn, p);
  step.running->done();
}

}  // namespace sb::session
