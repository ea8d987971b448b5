// OpenCode's V1 session API: the event stream, sessions and their messages, permission asks,
// questions, the tool list (their list: session_routes(), in route.hpp).
#include "server/route.hpp"

#include <charconv>

#include "server/cluster_asks.hpp"
#include "server/decode.hpp"
#include "server/push.hpp"
#include "util/log.hpp"

namespace sb::server {

namespace {

// Last-Event-ID, or ?lastEventID= for clients that cannot send headers. Anything but a
// decimal number that fits 64 bits counts as no id: the stream starts afresh.
std::optional<std::uint64_t> last_event_id(const Call& c) {
  std::string_view text;
  if (auto h = c.req.find("Last-Event-ID"); h != c.req.end())
    text = std::string_view(h->value().data(), h->value().size());
  std::string query;
  if (auto q = c.url.params().find("lastEventID"); q != c.url.params().end() && (*q).has_value)
    text = query = (*q).value;
  std::uint64_t id = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return id;
}

// GET /event, and GET /global/event (`global`: OpenCode's GlobalEvent wrapping).
asio::awaitable<Reply> event_stream(Call& c, bool global) {
  c.take_over = [&state = c.state, global, last = last_event_id(c)](tcp::socket socket,
                                                                    Request req) {
    return run_event_sse(state, std::move(socket), std::move(req), global, last);
  };
  co_return std::nullopt;
}
asio::awaitable<Reply> instance_events(Call& c) {
  return event_stream(c, false);
}
asio::awaitable<Reply> global_events(Call& c) {
  return event_stream(c, true);
}

asio::awaitable<Reply> create_session(Call& c) {
  session::CreateInput input;
  if (!c.req.body().empty()) {
    auto body = body_object(c.state, c.req);
    if (!body) co_return fail(c, body.error());
    auto decoded = decode_create_session(*body);
    if (!decoded) co_return fail(c, decoded.error());
    input = std::move(*decoded);
  }
  // A session created for a client offers that client's tools: only that client may create it
  // (a first use of the id claims it, as a registration would).
  std::optional<std::string> issued;
  if (!input.client_id.empty()) {
    auto auth = co_await authenticate_client(c, input.client_id);
    if (!auth) co_return fail(c, auth.error());
    issued = std::move(*auth);
  }
  std::string client_id = input.client_id;
  auto s = co_await c.state.sessions->create_session(std::move(input));
  if (!s) {
    withdraw_issued(c, client_id, issued);
    co_return fail(c, s.error());
  }
  json::object out = session::to_json(*s);
  if (issued) out["clientToken"] = *issued;
  co_return ok(c, out);
}

asio::awaitable<Reply> list_sessions(Call& c) {
  auto list = co_await c.state.sessions->list_sessions();
  if (!list) co_return fail(c, list.error());
  json::array out;
  for (const auto& s : *list)
    out.push_back(session::to_json(s));
  co_return ok(c, out);
}

// A cluster's other nodes' lists too (what they could tell within the ask's time: a node that
// does not answer, or Redis away, leaves its part out, logged).
asio::awaitable<void> add_other_nodes(Call& c, std::string op, json::value& out) {
  if (auto r = co_await gather_from_other_nodes(c.state, std::move(op), out); !r)
    log::warn("cluster: the other nodes' part of a list is left out: ", r.error().message);
}

asio::awaitable<Reply> session_status(Call& c) {
  json::value status = c.state.sessions->status();
  co_await add_other_nodes(c, "session.status", status);
  co_return ok(c, status);
}

asio::awaitable<Reply> get_session(Call& c) {
  auto s = co_await c.state.sessions->get_session(c.params[0]);
  if (!s) co_return fail(c, s.error());
  co_return ok(c, session::to_json(*s));
}

asio::awaitable<Reply> delete_session(Call& c) {
  auto r = co_await c.state.sessions->delete_session(c.params[0]);
  if (!r) co_return fail(c, r.error());
  co_return ok(c, true);
}

// The body as a JSON object, or an empty object when the request has none.
Result<json::object> optional_body(const Call& c) {
  if (c.req.body().empty()) return json::object();
  return body_object(c.state, c.req);
}

// ?limit=N: the newest N messages (oldest first); 0 or none: all of them.
asio::awaitable<Reply> list_messages(Call& c) {
  std::size_t limit = 0;
  if (auto q = c.url.params().find("limit"); q != c.url.params().end()) {
    auto n = decode_message_limit((*q).value);
    if (!n) co_return fail(c, n.error());
    limit = *n;
  }
  auto list = co_await c.state.sessions->messages(c.params[0], limit);
  if (!list) co_return fail(c, list.error());
  std::string out = "[";
  for (const auto& m : *list) {
    if (out.size() > 1) out.push_back(',');
    session::append_json(out, m);
  }
  out.push_back(']');
  co_return ok_text(c, std::move(out));
}

asio::awaitable<Reply> get_message(Call& c) {
  auto m = co_await c.state.sessions->message(c.params[0], c.params[1]);
  if (!m) co_return fail(c, m.error());
  co_return ok_text(c, session::json_text(*m));
}

asio::awaitable<Reply> delete_message(Call& c) {
  auto r = co_await c.state.sessions->delete_message(c.params[0], c.params[1]);
  if (!r) co_return fail(c, r.error());
  co_return ok(c, true);
}

asio::awaitable<Reply> update_part(Call& c) {
  auto body = body_object(c.state, c.req);
  if (!body) co_return fail(c, body.error());
  auto part = decode_part_update(*body, c.params[0], c.params[1], c.params[2]);
  if (!part) co_return fail(c, part.error());
  auto r = co_await c.state.sessions->update_part(std::move(*part));
  if (!r) co_return fail(c, r.error());
  co_return ok_text(c, session::json_text(*r));
}

asio::awaitable<Reply> delete_part(Call& c) {
  auto r = co_await c.state.sessions->delete_part(c.params[0], c.params[1], c.params[2]);
  if (!r) co_return fail(c, r.error());
  co_return ok(c, true);
}

// PATCH /session/{id}: title, time.archived, more rules (a client's session: by its owner only).
asio::awaitable<Reply> update_session(Call& c) {
  auto body = body_object(c.state, c.req);
  if (!body) co_return fail(c, body.error());
  auto request = decode_session_update(*body);
  if (!request) co_return fail(c, request.error());
  std::optional<std::string> session_id = c.params[0];  // named: GCC 12 and co_await
  // What the session may do without asking: its owner's to change.
  if (!request->update.permission.empty() || request->update.approved)
    if (auto v = co_await verify_answerer(c, session_id, request->client_id); !v)
      co_return fail(c, v.error());
  auto s = co_await c.state.sessions->update_session(c.params[0], std::move(request->update));
  if (!s) co_return fail(c, s.error());
  co_return ok(c, session::to_json(*s));
}

asio::awaitable<Reply> session_children(Call& c) {
  auto list = co_await c.state.sessions->children(c.params[0]);
  if (!list) co_return fail(c, list.error());
  json::array out;
  for (const auto& s : *list)
    out.push_back(session::to_json(s));
  co_return ok(c, out);
}

asio::awaitable<Reply> fork_session(Call& c) {
  auto body = optional_body(c);
  if (!body) co_return fail(c, body.error());
  auto message_id = decode_fork(*body);
  if (!message_id) co_return fail(c, message_id.error());
  auto s = co_await c.state.sessions->fork(c.params[0], *message_id);
  if (!s) co_return fail(c, s.error());
  co_return ok(c, session::to_json(*s));
}

asio::awaitable<Reply> run_shell(Call& c) {
  auto body = body_object(c.state, c.req);
  if (!body) co_return fail(c, body.error());
  auto input = decode_shell(*body);
  if (!input) co_return fail(c, input.error());
  auto r = co_await c.state.sessions->shell(c.params[0], std::move(*input));
  co_await event_streams_caught_up(c.state);  // the turn's events before its answer
  if (!r) co_return fail(c, r.error());
  co_return ok_text(c, session::json_text(*r));
}

// Sharing is off in Switchboard: share fails as OpenCode's does with `"share": "disabled"`,
// unshare has nothing to undo and answers the session.
asio::awaitable<Reply> share_session(Call& c) {
  if (auto s = co_await c.state.sessions->get_session(c.params[0]); !s)
    co_return fail(c, s.error());
  co_return fail(c, make_error(ErrorCode::Internal,
                               "Sharing is disabled: this server does not share sessions"));
}

asio::awaitable<Reply> unshare_session(Call& c) {
  auto s = co_await c.state.sessions->get_session(c.params[0]);
  if (!s) co_return fail(c, s.error());
  co_return ok(c, session::to_json(*s));
}

asio::awaitable<Reply> list_todos(Call& c) {
  auto todos = co_await c.state.sessions->todos(c.params[0]);
  if (!todos) co_return fail(c, todos.error());
  co_return ok_text(c, std::move(*todos));
}

Result<session::PromptInput> prompt_input(const ServerState& state, const Request& req) {
  auto body = body_object(state, req);
  if (!body) return body.error();
  return decode_prompt(*body);
}

asio::awaitable<Reply> prompt(Call& c) {
  auto in = prompt_input(c.state, c.req);
  if (!in) co_return fail(c, in.error());
  auto r = co_await c.state.sessions->prompt(c.params[0], std::move(*in));
  co_await event_streams_caught_up(c.state);  // the turn's events before its answer
  if (!r) co_return fail(c, r.error());
  co_return ok_text(c, session::json_text(*r));
}

asio::awaitable<Reply> prompt_async(Call& c) {
  auto in = prompt_input(c.state, c.req);
  if (!in) co_return fail(c, in.error());
  auto r = co_await c.state.sessions->prompt_async(c.params[0], std::move(*in));
  if (!r) co_return fail(c, r.error());
  Response res{http::status::no_content, c.req.version()};
  res.set(http::field::server, "switchboard/" SWITCHBOARD_VERSION);
  res.keep_alive(c.req.keep_alive());
  res.prepare_payload();
  co_return res;
}

// POST /session/{id}/summarize: OpenCode's compaction; true once the summary is stored (false
// when the model failed: the summary message carries the error).
asio::awaitable<Reply> summarize_session(Call& c) {
  auto body = body_object(c.state, c.req);
  if (!body) co_return fail(c, body.error());
  auto request = decode_summarize(*body);
  if (!request) co_return fail(c, request.error());
  auto r = co_await c.state.sessions->summarize(c.params[0], std::move(request->model),
                                                request->auto_continue);
  co_await event_streams_caught_up(c.state);  // the summary's events before the answer
  if (!r) co_return fail(c, r.error());
  co_return ok(c, *r);
}

asio::awaitable<Reply> abort_session(Call& c) {
  if (auto s = co_await c.state.sessions->get_session(c.params[0]); !s)
    co_return fail(c, s.error());
  if (c.state.sessions->abort(c.params[0])) co_return ok(c, true);
  // Its turn may run on another node of the cluster.
  auto elsewhere = co_await abort_on_another_node(c.state, c.params[0]);
  if (!elsewhere) co_return fail(c, elsewhere.error());
  co_return ok(c, *elsewhere);
}

asio::awaitable<Reply> list_permissions(Call& c) {
  json::value out = json::array();
  for (const auto& r : c.state.permissions->list())
    out.get_array().push_back(permission::to_json(r));
  co_await add_other_nodes(c, "permission.list", out);
  co_return ok(c, out);
}

// The answer to the waiting ask `ask_id`, by the owner of its session (verify_answerer).
// `in_session`: the session the ask must belong to (the V1 route's path), NotFound otherwise.
asio::awaitable<Reply> answer_permission(Call& c, const std::string& ask_id,
                                         const PermissionReplyRequest& request,
                                         const std::optional<std::string>& in_session = {}) {
  std::optional<std::string> session_id;
  for (const auto& ask : c.state.permissions->list())
    if (ask.id == ask_id) session_id = ask.session_id;
  if (!session_id && c.state.cluster) {
    // The turn that asks may run on another node: that node checks whose session it is.
    if (request.client_id)
      if (auto v = co_await verify_client(c, request.client_id); !v) co_return fail(c, v.error());
    json::object args{{"id", ask_id}, {"reply", permission::reply_name(request.reply)}};
    if (request.message) args["message"] = *request.message;
    if (request.client_id) args["clientID"] = *request.client_id;
    if (in_session) args["sessionID"] = *in_session;
    auto r = co_await ask_the_node_that_has_it(
        c.state, "permission.reply", std::move(args),
        make_error(ErrorCode::NotFound, "Permission request not found: " + ask_id));
    if (!r) co_return fail(c, r.error());
    co_return ok(c, true);
  }
  if (in_session && session_id != in_session)
    co_return fail(c, make_error(ErrorCode::NotFound, "Permission request not found: " + ask_id +
                                                          " (in session " + *in_session + ")"));
  if (auto v = co_await verify_answerer(c, session_id, request.client_id); !v)
    co_return fail(c, v.error());
  auto r = c.state.permissions->reply(ask_id, request.reply, request.message);
  if (!r) co_return fail(c, r.error());
  co_return ok(c, true);
}

asio::awaitable<Reply> reply_permission(Call& c) {
  auto body = body_object(c.state, c.req);
  if (!body) co_return fail(c, body.error());
  auto request = decode_permission_reply(*body);
  if (!request) co_return fail(c, request.error());
  co_return co_await answer_permission(c, c.params[0], *request);
}

// OpenCode's V1 reply (deprecated there, still served; the V1 SDK's permission.respond).
asio::awaitable<Reply> respond_permission(Call& c) {
  auto body = body_object(c.state, c.req);
  if (!body) co_return fail(c, body.error());
  auto request = decode_permission_response(*body);
  if (!request) co_return fail(c, request.error());
  if (auto s = co_await c.state.sessions->get_session(c.params[0]); !s)
    co_return fail(c, s.error());
  co_return co_await answer_permission(c, c.params[1], *request, c.params[0]);
}

asio::awaitable<Reply> list_tools(Call& c) {
  std::string session_id, agent;
  if (auto q = c.url.params().find("sessionID"); q != c.url.params().end()) session_id = (*q).value;
  if (auto q = c.url.params().find("agent"); q != c.url.params().end()) agent = (*q).value;
  std::map<std::string, bool> switches;  // named: GCC 12 and co_await
  auto tools = co_await c.state.sessions->offered_tools(session_id, agent, std::move(switches));
  if (!tools) co_return fail(c, tools.error());
  json::array out;
  for (const auto& t : *tools)
    out.push_back(json::object{
        {"id", t->id()}, {"description", t->description()}, {"parameters", t->parameters()}});
  co_return ok(c, out);
}

asio::awaitable<Reply> list_questions(Call& c) {
  json::value out = json::array();
  for (const auto& q : c.state.questions->list())
    out.get_array().push_back(question::to_json(q));
  co_await add_other_nodes(c, "question.list", out);
  co_return ok(c, out);
}

// Whether the question waits on this node; when not, in a cluster, the node where it waits is
// asked to take `body` (what the answerer sent) as its answer ("question.reply" or
// "question.reject"): that node checks whose session it is. Its reply, or nullopt.
asio::awaitable<std::optional<Reply>> answer_question_elsewhere(
    Call& c, std::string op, json::object body, const std::optional<std::string>& client_id) {
  for (const auto& q : c.state.questions->list())
    if (q.id == c.params[0]) co_return std::nullopt;
  if (!c.state.cluster) co_return std::nullopt;
  if (client_id)
    if (auto v = co_await verify_client(c, client_id); !v) co_return fail(c, v.error());
  body["id"] = c.params[0];
  auto r = co_await ask_the_node_that_has_it(
      c.state, std::move(op), std::move(body),
      make_error(ErrorCode::NotFound, "Unknown question: " + c.params[0]));
  if (!r) co_return fail(c, r.error());
  co_return ok(c, true);
}

// Only the owner of the question's session answers it (verify_answerer). `client_id`: the
// clientID of the body.
asio::awaitable<Result<void>> verify_question_answerer(const Call& c,
                                                       std::optional<std::string> client_id) {
  std::optional<std::string> session_id;
  for (const auto& q : c.state.questions->list())
    if (q.id == c.params[0]) session_id = q.session_id;
  co_return co_await verify_answerer(c, session_id, client_id);
}

asio::awaitable<Reply> reply_question(Call& c) {
  auto body = body_object(c.state, c.req);
  if (!body) co_return fail(c, body.error());
  auto request = decode_question_reply(*body);
  if (!request) co_return fail(c, request.error());
  if (auto elsewhere =
          co_await answer_question_elsewhere(c, "question.reply", *body, request->client_id))
    co_return std::move(*elsewhere);
  if (auto v = co_await verify_question_answerer(c, request->client_id); !v)
    co_return fail(c, v.error());
  auto r = c.state.questions->reply(c.params[0], std::move(request->answers));
  if (!r) co_return fail(c, r.error());
  co_return ok(c, true);
}

// The body is optional: {clientID} for a question of a client's session.
asio::awaitable<Reply> reject_question(Call& c) {
  std::optional<std::string> client_id;
  if (!c.req.body().empty()) {
    auto body = body_object(c.state, c.req);
    if (!body) co_return fail(c, body.error());
    auto named = decode_answerer(*body);
    if (!named) co_return fail(c, named.error());
    client_id = std::move(*named);
  }
  json::object forwarded;
  if (client_id) forwarded["clientID"] = *client_id;
  if (auto elsewhere =
          co_await answer_question_elsewhere(c, "question.reject", std::move(forwarded), client_id))
    co_return std::move(*elsewhere);
  if (auto v = co_await verify_question_answerer(c, client_id); !v) co_return fail(c, v.error());
  auto r = c.state.questions->reject(c.params[0]);
  if (!r) co_return fail(c, r.error());
  co_return ok(c, true);
}

}  // namespace

std::vector<Route> session_routes() {
  return {
      {http::verb::get,
       {"event"},
       &instance_events,
       {.id = "event.subscribe",
        .summary = "The event stream: every change, as {type, properties} frames with ids",
        .answer = "Event",
        .query = "lastEventID lastEventIDHeader",
        .media = "text/event-stream"}},
      {http::verb::get,
       {"global", "event"},
       &global_events,
       {.id = "global.event",
        .summary = "The event stream with each event wrapped as {directory, project, payload}",
        .answer = "GlobalEvent",
        .query = "lastEventID lastEventIDHeader",
        .media = "text/event-stream"}},
      {http::verb::post,
       {"session"},
       &create_session,
       {.id = "session.create",
        .summary = "Create a session",
        .body = "SessionCreateRequest",
        .answer = "SessionCreated",
        .body_optional = true}},
      {http::verb::get,
       {"session"},
       &list_sessions,
       {.id = "session.list", .summary = "Every session", .answer = "SessionList"}},
      {http::verb::get,
       {"session", "status"},
       &session_status,
       {.id = "session.status",
        .summary = "The status of each session that is not idle",
        .answer = "SessionStatusMap"}},
      {http::verb::get,
       {"session", "{sessionID}"},
       &get_session,
       {.id = "session.get", .summary = "Get a session", .answer = "Session", .statuses = "404"}},
      {http::verb::delete_,
       {"session", "{sessionID}"},
       &delete_session,
       {.id = "session.delete",
        .summary = "Delete a session with its messages (its turn is aborted)",
        .answer = "OkTrue",
        .statuses = "404 409"}},
      {http::verb::patch,
       {"session", "{sessionID}"},
       &update_session,
       {.id = "session.update",
        .summary = "Change a session's title or archived time, or add rules",
        .body = "SessionUpdateRequest",
        .answer = "Session",
        .statuses = "404 409"}},
      {http::verb::get,
       {"session", "{sessionID}", "children"},
       &session_children,
       {.id = "session.children",
        .summary = "The sessions a session's task tool started",
        .answer = "SessionList",
        .statuses = "404"}},
      {http::verb::post,
       {"session", "{sessionID}", "fork"},
       &fork_session,
       {.id = "session.fork",
        .summary = "A new session with a copy of a session's messages (up to a message)",
        .body = "ForkRequest",
        .answer = "Session",
        .statuses = "404 409",
        .body_optional = true}},
      {http::verb::post,
       {"session", "{sessionID}", "shell"},
       &run_shell,
       {.id = "session.shell",
        .summary = "Run the user's own command with the bash tool, stored as a turn",
        .body = "ShellRequest",
        .answer = "MessageWithParts",
        .statuses = "404 409 503"}},
      {http::verb::post,
       {"session", "{sessionID}", "share"},
       &share_session,
       {.id = "session.share",
        .summary = "Share a session: sharing is disabled, so an existing session answers 500",
        .answer = "Session",
        .statuses = "404"}},
      {http::verb::delete_,
       {"session", "{sessionID}", "share"},
       &unshare_session,
       {.id = "session.unshare",
        .summary = "Stop sharing a session (nothing is shared): the session",
        .answer = "Session",
        .statuses = "404"}},
      {http::verb::post,
       {"session", "{sessionID}", "permissions", "{permissionID}"},
       &respond_permission,
       {.id = "permission.respond",
        .summary = "Answer a permission ask of the session (OpenCode's older route)",
        .body = "PermissionResponseRequest",
        .answer = "OkTrue",
        .statuses = "404"}},
      {http::verb::get,
       {"session", "{sessionID}", "message", "{messageID}"},
       &get_message,
       {.id = "session.message",
        .summary = "A message with its parts",
        .answer = "MessageWithParts",
        .statuses = "404"}},
      {http::verb::delete_,
       {"session", "{sessionID}", "message", "{messageID}"},
       &delete_message,
       {.id = "session.deleteMessage",
        .summary = "Delete a message of an idle session",
        .answer = "OkTrue",
        .statuses = "404 409"}},
      {http::verb::patch,
       {"session", "{sessionID}", "message", "{messageID}", "part", "{partID}"},
       &update_part,
       {.id = "part.update",
        .summary = "Replace a part of a message of an idle session",
        .body = "PartUpdateRequest",
        .answer = "Part",
        .statuses = "404 409"}},
      {http::verb::delete_,
       {"session", "{sessionID}", "message", "{messageID}", "part", "{partID}"},
       &delete_part,
       {.id = "part.delete",
        .summary = "Delete a part of a message of an idle session",
        .answer = "OkTrue",
        .statuses = "404 409"}},
      {http::verb::get,
       {"session", "{sessionID}", "message"},
       &list_messages,
       {.id = "session.messages",
        .summary = "A session's messages with their parts, oldest first",
        .answer = "MessageList",
        .statuses = "404",
        .query = "messageLimit"}},
      {http::verb::get,
       {"session", "{sessionID}", "todo"},
       &list_todos,
       {.id = "session.todo",
        .summary = "A session's todo list",
        .answer = "TodoList",
        .statuses = "404"}},
      {http::verb::post,
       {"session", "{sessionID}", "message"},
       &prompt,
       {.id = "session.prompt",
        .summary = "Send a message and run the turn: its last assistant message",
        .body = "PromptRequest",
        .answer = "MessageWithParts",
        .statuses = "404 409 503"}},
      {http::verb::post,
       {"session", "{sessionID}", "prompt_async"},
       &prompt_async,
       {.id = "session.prompt_async",
        .summary = "Send a message and start the turn without waiting for it",
        .body = "PromptRequest",
        .statuses = "404 409 503",
        .status = 204}},
      {http::verb::post,
       {"session", "{sessionID}", "summarize"},
       &summarize_session,
       {.id = "session.summarize",
        .summary = "Summarize the conversation: from then on the model sees it from the summary on",
        .body = "SummarizeRequest",
        .answer = "Summarized",
        .statuses = "404 409 503"}},
      {http::verb::post,
       {"session", "{sessionID}", "abort"},
       &abort_session,
       {.id = "session.abort",
        .summary = "Abort a session's turn",
        .answer = "Aborted",
        .statuses = "404"}},
      {http::verb::get,
       {"permission"},
       &list_permissions,
       {.id = "permission.list",
        .summary = "The permission asks that wait for a person",
        .answer = "PermissionRequestList"}},
      {http::verb::post,
       {"permission", "{requestID}", "reply"},
       &reply_permission,
       {.id = "permission.reply",
        .summary = "Answer a permission ask",
        .body = "PermissionReplyRequest",
        .answer = "OkTrue",
        .statuses = "404"}},
      {http::verb::get,
       {"tool"},
       &list_tools,
       // Not OpenCode's tool.list (GET /experimental/tool, for a provider and model).
       {.id = "tool.offered",
        .summary = "The tools an agent (in a session) is offered",
        .answer = "ToolList",
        .statuses = "404 409",
        .query = "toolSessionID toolAgent"}},
      {http::verb::get,
       {"question"},
       &list_questions,
       {.id = "question.list",
        .summary = "The questions that wait for an answer",
        .answer = "QuestionRequestList"}},
      {http::verb::post,
       {"question", "{requestID}", "reply"},
       &reply_question,
       {.id = "question.reply",
        .summary = "Answer a question",
        .body = "QuestionReplyRequest",
        .answer = "OkTrue",
        .statuses = "404"}},
      {http::verb::post,
       {"question", "{requestID}", "reject"},
       &reject_question,
       {.id = "question.reject",
        .summary = "Dismiss a question",
        .body = "QuestionRejectRequest",
        .answer = "OkTrue",
        .statuses = "404",
        .body_optional = true}},
  };
}

}  // namespace sb::server
