// Durable waits (design.md decision 5): a turn whose step waits for client calls stops with the
// server and goes on after its restart, from what is stored (the step's open message and its
// waiting calls, session/store.hpp).
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/this_coro.hpp>

#include <algorithm>

#include "session/processor.hpp"
#include "tool/registry.hpp"
#include "util/log.hpp"

namespace sb::session {

namespace asio = boost::asio;

namespace {
bool is_open(const Part& p) {
  return p.type == Part::Type::Tool && (p.state.status == ToolState::Status::Pending ||
                                        p.state.status == ToolState::Status::Running);
}
}  // namespace

bool Processor::can_suspend(const Turn& turn) {
  auto step = turn.step.lock();
  if (!step || !step->streamed || step->error || step->halt || step->waits.empty() ||
      step->message.summary || turn.abort->aborted())
    return false;
  // Every call still running waits (a call whose tool has not started yet has no part: it
  // counts here, and must not start during the stop).
  if (step->running->count() != step->waits.size()) return false;
  return std::all_of(step->tools.begin(), step->tools.end(), [&](const auto& entry) {
    return !is_open(entry.second) || step->waits.count(entry.first) > 0;
  });
}

asio::awaitable<Result<MessageWithParts>> Processor::resume_turn(
    std::shared_ptr<Turn> turn, ResolvedPrompt prompt, MessageWithParts open,
    std::vector<Wait> waits, int steps_done, std::map<std::string, bool> switches) {
  const std::string& session_id = turn->session.id;
  std::string user_id = open.info.parent_id;
  auto step = std::make_shared<Step>();
  step->turn = turn;
  step->provider = prompt.provider;
  step->running = std::make_unique<WaitGroup>(co_await asio::this_coro::executor);
  step->message = open.info;
  step->streamed = true;
  for (const auto& p : open.parts) {
    // The model's usage and finish reason reached the message only at the step's end.
    if (p.type == Part::Type::StepFinish) {
      step->message.finish = p.reason;
      step->message.tokens = p.tokens;
    }
    if (p.type != Part::Type::Tool) continue;
    step->tools[p.call_id] = p;
    step->tool_order.push_back(p.call_id);
  }
  // The step's message is the turn's, as stored (its changes are staged on it).
  turn->messages.push_back(std::move(open));

  auto prepared = prepare(*turn, prompt, switches);
  // What a call that runs again (after its ask) is looked up in.
  if (prepared) step->request.tools = tool_sets_.get(turn->offered);
  auto now = now_ms();
  for (const auto& id : step->tool_order) {
    Part& p = step->tools[id];
    if (!is_open(p)) continue;
    auto wait =
        std::find_if(waits.begin(), waits.end(), [&](const Wait& w) { return w.call_id == id; });
    if (prepared && wait != waits.end()) {
      step->waits.emplace(id, *wait);  // stored already
      step->running->add();
      auto resumed = wait->client ? resume_call(step, *wait->client)
                     : wait->ask  ? resume_ask(step, *wait->ask)
                                  : run_again(step, id, wait->id);
      asio::co_spawn(co_await asio::this_coro::executor, std::move(resumed),
                     [](std::exception_ptr ex) {
                       if (ex) log::error("a resumed tool call crashed");
                     });
      continue;
    }
    // What ran on this server (a command, a file read) ended with it.
    p.state.status = ToolState::Status::Error;
    p.state.error = prepared ? "The server stopped during this call" : prepared.error().message;
    if (!p.state.start) p.state.start = now;
    p.state.end = now;
    deps_.writer->stage_part(*turn, p);
  }
  // A stored wait that no call waits on any more (its call ended, or cannot go on) is deleted.
  for (const auto& w : waits)
    if (auto it = step->waits.find(w.call_id); it == step->waits.end() || it->second.id != w.id)
      deps_.writer->end_wait(turn, w.id);
  turn->step = step;
  co_await step->running->wait();
  turn->step.reset();
  if (turn->suspended) {
    co_await deps_.writer->store(turn);
    co_return make_error(ErrorCode::Unavailable,
                         "Server shutting down: the turn goes on when the server is back");
  }
  if (!prepared) {
    // The turn cannot go on here (its session's rules no longer read): it ends with the reason.
    step->message.error = NamedError{"MessageAbortedError", prepared.error().message, {}};
    step->message.completed = now_ms();
    deps_.writer->stage_message(*turn, step->message);
    co_await deps_.writer->store(turn);
    co_return prepared.error();
  }
  std::size_t index = 0;
  bool go_on = end_step(*turn, *step, false, index);
  // Stored first: the conversation that the next step is sent is read back with this step.
  co_await deps_.writer->store(turn);
  if (go_on && !turn->abort->aborted()) {
    deps_.conversations->forget(session_id);
    auto conversation = co_await deps_.conversations->get(session_id);
    if (!conversation) co_return conversation.error();
    turn->conversation = *conversation;
    PromptInput input;
    auto last = co_await run_steps(turn, input, prompt, user_id, steps_done);
    if (!last) co_return last.error();
    if (*last) index = **last;
  }
  co_return std::move(turn->messages[index]);
}

asio::awaitable<void> Processor::resume_call(std::shared_ptr<Step> step,
                                             clienttool::WaitingCall wait) {
  std::string call_id = wait.call_id;
  const Part& part = step->tools[call_id];
  std::string tool_name = part.tool;
  const auto& clients = deps_.tools->client_tools();
  if (!clients) {
    finish_call(*step, call_id, tool_name,
                make_error(ErrorCode::Unavailable, "this server has no client tools"));
    co_return;
  }
  tool::ToolContext ctx = tool_context(step, call_id);
  clienttool::ExecuteParams params;
  params.input = part.state.input;
  bool interactive = wait.interactive;
  params.resume = std::move(wait);
  auto result = co_await tool::run_client_call(*clients, std::move(params), interactive, ctx);
  finish_call(*step, call_id, tool_name, std::move(result));
}

asio::awaitable<void> Processor::resume_ask(std::shared_ptr<Step> step,
                                            permission::PermissionRequest stored) {
  std::string call_id = stored.call_id.value_or("");
  Part part = step->tools[call_id];  // its tool and input, as the model called it
  // Asked again under the id the person was shown: their answer to it counts.
  step->ask_again[call_id] = stored.id;
  tool::PermissionRequest request;
  request.permission = stored.permission;
  request.patterns = stored.patterns;
  request.always = stored.always;
  request.metadata = stored.metadata;
  auto allowed = co_await ask(step, call_id, std::move(request));
  if (!allowed) {
    finish_call(*step, call_id, part.tool, allowed.error());
    co_return;
  }
  // The call runs from its start, and is not asked the same again.
  step->granted.insert_or_assign(call_id, std::move(stored));
  co_await run_again(step, call_id, {});
}

asio::awaitable<void> Processor::run_again(std::shared_ptr<Step> step, std::string call_id,
                                           std::string question_id) {
  Turn& turn = *step->turn;
  if (!question_id.empty()) step->question_again[call_id] = std::move(question_id);
  // What is offered now: a client that reconnected since the turn resumed has its tools again.
  auto offered = offered_tools(turn.agent, &turn.session, deps_.config_rules, *deps_.permissions,
                               *deps_.tools, turn.switches);
  if (offered) {
    turn.offered = std::move(*offered);
    step->request.tools = tool_sets_.get(turn.offered);
  }
  const Part& part = step->tools[call_id];
  provider::ToolCall call;
  call.id = call_id;
  call.name = part.tool;
  call.input = json::value(part.state.input);
  co_await run_tool(step, std::move(call));
}

}  // namespace sb::session
