#include "server/cluster_asks.hpp"

#include "cluster/node.hpp"
#include "permission/service.hpp"
#include "question/service.hpp"
#include "server/decode.hpp"
#include "session/service.hpp"
#include "util/log.hpp"

namespace sb::server {

namespace {

std::optional<ErrorCode> error_code_of(std::string_view name) {
  for (auto code :
       {ErrorCode::InvalidRequest, ErrorCode::Unauthorized, ErrorCode::Forbidden,
        ErrorCode::NotFound, ErrorCode::Conflict, ErrorCode::TooLarge, ErrorCode::RateLimited,
        ErrorCode::Internal, ErrorCode::Unavailable, ErrorCode::Timeout})
    if (error_code_name(code) == name) return code;
  return std::nullopt;
}

json::value answer_of(const Result<void>& r) {
  if (r) return json::object{{"ok", true}};
  return json::object{{"error", json::object{{"code", error_code_name(r.error().code)},
                                             {"message", r.error().message}}}};
}

// The outcome another node sent (answer_of); one that does not read as one is an internal error.
Result<void> outcome_of(const json::value& reply) {
  const json::object* o = reply.if_object();
  if (o && o->if_contains("ok")) return {};
  const json::value* error = o ? o->if_contains("error") : nullptr;
  const json::object* e = error ? error->if_object() : nullptr;
  const json::value* code = e ? e->if_contains("code") : nullptr;
  const json::value* message = e ? e->if_contains("message") : nullptr;
  std::optional<ErrorCode> known =
      code && code->is_string() ? error_code_of(code->get_string()) : std::nullopt;
  if (!known || !message || !message->is_string())
    return make_error(ErrorCode::Internal,
                      "cluster: another node answered what does not read as "
                      "an outcome");
  return make_error(*known, std::string(message->get_string()));
}

std::optional<std::string> text_arg(const json::object& args, std::string_view key) {
  const json::value* v = args.if_contains(key);
  if (!v || !v->is_string()) return std::nullopt;
  return std::string(v->get_string());
}

// The session whose permission ask / question `id` waits here; nullopt when none does.
std::optional<std::string> ask_session(const ServerState& state, const std::string& id) {
  for (const auto& ask : state.permissions->list())
    if (ask.id == id) return ask.session_id;
  return std::nullopt;
}
std::optional<std::string> question_session(const ServerState& state, const std::string& id) {
  if (!state.questions) return std::nullopt;
  for (const auto& q : state.questions->list())
    if (q.id == id) return q.session_id;
  return std::nullopt;
}

// args: the HTTP body ({reply, message?, clientID?}) with the ask's `id` and, from the V1 route,
// the `sessionID` it must belong to.
asio::awaitable<json::value> reply_permission(ServerState& state, json::object args) {
  auto id = text_arg(args, "id");
  if (!id) co_return nullptr;
  auto session_id = ask_session(state, *id);
  if (!session_id) co_return nullptr;
  auto request = decode_permission_reply(args);
  if (!request) co_return answer_of(request.error());
  if (auto in = text_arg(args, "sessionID"); in && *in != *session_id)
    co_return answer_of(make_error(
        ErrorCode::NotFound, "Permission request not found: " + *id + " (in session " + *in + ")"));
  auto sessions = state.sessions;
  if (auto own =
          co_await sessions->validate_client_session(request->client_id.value_or(""), *session_id);
      !own)
    co_return answer_of(own.error());
  co_return answer_of(state.permissions->reply(*id, request->reply, request->message));
}

// args: the HTTP body ({answers, clientID?} or {clientID?} for a reject) with the question's id.
asio::awaitable<json::value> answer_question(ServerState& state, json::object args, bool reject) {
  auto id = text_arg(args, "id");
  if (!id) co_return nullptr;
  auto session_id = question_session(state, *id);
  if (!session_id) co_return nullptr;
  std::optional<std::string> client_id;
  std::vector<std::vector<std::string>> answers;
  if (reject) {
    auto named = decode_answerer(args);
    if (!named) co_return answer_of(named.error());
    client_id = std::move(*named);
  } else {
    auto request = decode_question_reply(args);
    if (!request) co_return answer_of(request.error());
    client_id = std::move(request->client_id);
    answers = std::move(request->answers);
  }
  auto sessions = state.sessions;
  if (auto own = co_await sessions->validate_client_session(client_id.value_or(""), *session_id);
      !own)
    co_return answer_of(own.error());
  co_return answer_of(reject ? state.questions->reject(*id)
                             : state.questions->reply(*id, std::move(answers)));
}

// args: a client's result or progress as it sent it to another node (which checked its token).
// Not here (null) when this node sent no such request.
json::value take_client_answer(ServerState& state, const json::object& args, bool result) {
  Result<void> r;
  if (result) {
    auto request = decode_result(args);
    if (!request) return nullptr;  // the node it came to decoded it: not for this node's decoder
    r = state.registry->submit_result(request->request_id, request->client_id,
                                      std::move(request->response));
  } else {
    auto request = decode_progress(args);
    if (!request) return nullptr;
    r = state.registry->report_progress(request->request_id, request->client_id,
                                        std::move(request->progress));
  }
  if (!r && r.error().code == ErrorCode::NotFound) return nullptr;
  return answer_of(r);
}

// Nothing found where every node answered: `missing`. Where some did not, one of them may have
// it: the caller may try again.
Error not_found_or_silent(const cluster::Answers& answers, Error missing) {
  if (answers.silent.empty()) return missing;
  std::string names;
  for (const auto& node : answers.silent)
    names += (names.empty() ? "" : ", ") + node;
  return make_error(ErrorCode::Unavailable, "cluster: node(s) " + names +
                                                " did not answer in time and may have it (" +
                                                missing.message + "); try again");
}

}  // namespace

void answer_cluster_asks(ServerState& state) {
  // The node is the state's: it and its handler go together.
  state.cluster->on_ask(
      [&state](std::string op, json::object args) -> asio::awaitable<json::value> {
        if (op == "permission.reply") co_return co_await reply_permission(state, std::move(args));
        if (op == "question.reply")
          co_return co_await answer_question(state, std::move(args), false);
        if (op == "question.reject")
          co_return co_await answer_question(state, std::move(args), true);
        if (op == "client.result") co_return take_client_answer(state, args, true);
        if (op == "client.progress") co_return take_client_answer(state, args, false);
        if (op == "abort") {
          auto session_id = text_arg(args, "sessionID");
          if (!session_id || !state.sessions->abort(*session_id)) co_return nullptr;
          co_return true;
        }
        if (op == "permission.list") {
          json::array out;
          for (const auto& r : state.permissions->list())
            out.push_back(permission::to_json(r));
          co_return out;
        }
        if (op == "question.list") {
          json::array out;
          if (state.questions)
            for (const auto& q : state.questions->list())
              out.push_back(question::to_json(q));
          co_return out;
        }
        if (op == "session.status") co_return state.sessions->status();
        log::warn("cluster: another node asked for \"", op, "\", which this node does not know");
        co_return nullptr;
      });
}

asio::awaitable<Result<void>> ask_the_node_that_has_it(ServerState& state, std::string op,
                                                       json::object args, Error missing) {
  if (!state.cluster) co_return missing;
  auto answers = co_await state.cluster->ask(std::move(op), std::move(args), true);
  if (!answers) co_return answers.error();
  if (answers->replies.empty()) co_return not_found_or_silent(*answers, std::move(missing));
  co_return outcome_of(answers->replies.front());
}

asio::awaitable<Result<bool>> abort_on_another_node(ServerState& state,
                                                    const std::string& session_id) {
  if (!state.cluster) co_return false;
  // Named first: GCC 12 cannot compile a literal or a braced list inside co_await.
  std::string op = "abort";
  json::object args{{"sessionID", session_id}};
  auto answers = co_await state.cluster->ask(std::move(op), std::move(args), true);
  if (!answers) co_return answers.error();
  if (!answers->replies.empty()) co_return true;
  if (!answers->silent.empty())
    co_return not_found_or_silent(
        *answers, make_error(ErrorCode::NotFound, "no turn of session " + session_id + " runs"));
  co_return false;
}

asio::awaitable<Result<void>> gather_from_other_nodes(ServerState& state, std::string op,
                                                      json::value& out) {
  if (!state.cluster) co_return Result<void>{};
  json::object args;
  auto answers = co_await state.cluster->ask(std::move(op), std::move(args));
  if (!answers) co_return answers.error();
  if (!answers->silent.empty())
    log::warn("cluster: node(s) ", answers->silent.front(),
              answers->silent.size() > 1 ? " and others" : "",
              " did not answer in time: their part of a list is left out");
  for (auto& reply : answers->replies) {
    if (auto* list = reply.if_array(); list && out.is_array())
      for (auto& item : *list)
        out.get_array().push_back(std::move(item));
    if (auto* map = reply.if_object(); map && out.is_object())
      for (auto& [key, value] : *map)
        out.get_object()[key] = std::move(value);
  }
  co_return Result<void>{};
}

}  // namespace sb::server
