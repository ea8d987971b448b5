// SessionService::shell (POST /session/{id}/shell): the user's own command, run with the bash
// tool in a turn of its own, stored as OpenCode stores it (a user message that says so, and an
// assistant message with one bash tool part), so that the model sees it in the next turn.
#include <boost/asio/this_coro.hpp>

#include "session/service.hpp"
#include "tool/truncate.hpp"
#include "util/ids.hpp"

namespace sb::session {

namespace asio = boost::asio;

namespace {

// What the shell's bash call is checked against, kept for as long as the call may ask.
struct ShellRules {
  permission::Ruleset agent;
  permission::Ruleset config;
  permission::Ruleset session;
};

// The bash tool's permission asks for the user's command: the rules decide; where they would
// ask a person, the person already asked (the command is theirs), so it is allowed.
asio::awaitable<Result<void>> shell_permission(
    std::shared_ptr<permission::PermissionService> permissions, std::shared_ptr<ShellRules> rules,
    permission::AskParams params) {
  auto settled = permissions->decide(
      params, permission::Layers{&rules->agent, &rules->config, &rules->session});
  if (settled && !*settled) co_return settled->error().error();
  co_return Result<void>{};
}

}  // namespace

asio::awaitable<Result<MessageWithParts>> SessionService::shell(std::string session_id,
                                                                ShellInput input) {
  auto self = shared_from_this();
  PromptInput named;
  named.agent = input.agent;
  named.model = input.model;
  // Checked before a pending revert is made final: a refused command leaves it.
  std::optional<ResolvedPrompt> resolved;
  tool::ToolPtr tool;
  Ready ready = [&](const SessionInfo&) -> asio::awaitable<Result<void>> {
    auto found = resolve_prompt(deps_.agents, deps_.providers, named);
    if (!found) co_return found.error();
    tool = deps_.tools->find("bash", session_id);
    if (!tool) co_return make_error(ErrorCode::Unavailable, "the bash tool is not available");
    resolved = std::move(*found);
    co_return Result<void>{};
  };
  auto begun = co_await begin_turn(session_id, std::move(ready));
  if (!begun) co_return begun.error();
  std::shared_ptr<Turn> turn = *begun;

  MessageInfo user = new_message(session_id, MessageInfo::Role::User, *resolved);
  writer_->stage_message(*turn, user);
  Part said = new_part(user, Part::Type::Text);
  said.text = "The following tool was executed by the user";
  writer_->stage_part(*turn, said);
  MessageInfo answer = new_message(session_id, MessageInfo::Role::Assistant, *resolved);
  answer.parent_id = user.id;
  answer.cwd = options_.directory.string();
  writer_->stage_message(*turn, answer);
  Part call = new_part(answer, Part::Type::Tool);
  call.call_id = ids::make("call");
  call.tool = "bash";
  call.state.status = ToolState::Status::Running;
  call.state.input = json::object{{"command", input.command}};
  call.state.start = now_ms();
  writer_->stage_part(*turn, call);
  turn->session.updated = now_ms();
  turn->unsaved_session = turn->session;
  writer_->flush(turn, false);

  tool::ToolContext ctx;
  ctx.session_id = session_id;
  ctx.message_id = answer.id;
  ctx.call_id = call.call_id;
  ctx.agent = resolved->agent_name;
  ctx.directory = options_.directory;
  ctx.data_dir = options_.data_dir;
  ctx.abort = turn->abort;
  auto rules = std::make_shared<ShellRules>(
      ShellRules{resolved->agent.permission, deps_.config_rules, turn->session.permission});
  ctx.ask = [permissions = deps_.permissions, rules, session_id, message_id = answer.id,
             call_id = call.call_id](tool::PermissionRequest r) {
    permission::AskParams params;
    params.session_id = session_id;
    params.message_id = message_id;
    params.call_id = call_id;
    params.permission = std::move(r.permission);
    params.patterns = std::move(r.patterns);
    params.always = std::move(r.always);
    params.metadata = std::move(r.metadata);
    return shell_permission(permissions, rules, std::move(params));
  };
  ctx.metadata = [this, &call](std::optional<std::string> title, json::object meta) {
    if (title) call.state.title = *title;
    for (auto& [k, v] : meta)
      call.state.metadata[k] = v;
    writer_->publish_part(call);
  };
  json::object args{{"command", input.command}, {"description", input.command}};
  auto result = co_await tool->execute(std::move(args), ctx);

  call.state.end = now_ms();
  if (!result) {
    call.state.status = ToolState::Status::Error;
    call.state.error = turn->abort->aborted() ? "Tool execution aborted" : result.error().message;
  } else {
    call.state.status = ToolState::Status::Completed;
    call.state.title = result->title;
    call.state.metadata = std::move(result->metadata);
    auto cut =
        tool::truncate_output(std::move(result->output), session_id, "bash",
                              tool::TruncateOptions{tool::saved_outputs_dir(options_.data_dir)});
    call.state.output = std::move(cut.content);
    if (cut.output_path) call.state.metadata["outputPath"] = cut.output_path->string();
    if (cut.truncated) call.state.metadata["truncated"] = true;
  }
  writer_->stage_part(*turn, call);
  answer.completed = now_ms();
  if (turn->abort->aborted())
    answer.error = NamedError{"MessageAbortedError", turn->abort->reason(), {}};
  writer_->stage_message(*turn, answer);
  co_await writer_->store(turn);
  // The next turn's model reads the command and its output from the store.
  conversations_->forget(session_id);
  end_turn(session_id);
  co_return MessageWithParts{answer, {call}};
}

}  // namespace sb::session
