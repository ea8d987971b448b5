#include "server/routes.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/url/parse.hpp>

#include <sys/socket.h>

#include <cerrno>
#include <charconv>

#include "clienttool/wire.hpp"
#include "server/access.hpp"
#include "server/decode.hpp"
#include "server/push.hpp"
#include "server/web_assets.hpp"
#include "util/log.hpp"

namespace sb::server {

// ---- the one place that maps errors to HTTP -------------------------------------------------

http::status http_status(ErrorCode code) {
  switch (code) {
    case ErrorCode::InvalidRequest:
      return http::status::bad_request;
    case ErrorCode::Unauthorized:
      return http::status::unauthorized;
    case ErrorCode::Forbidden:
      return http::status::forbidden;
    case ErrorCode::NotFound:
      return http::status::not_found;
    case ErrorCode::Conflict:
      return http::status::conflict;
    case ErrorCode::TooLarge:
      return http::status::payload_too_large;
    case ErrorCode::RateLimited:
      return http::status::too_many_requests;
    case ErrorCode::Internal:
      return http::status::internal_server_error;
    case ErrorCode::Unavailable:
      return http::status::service_unavailable;
    case ErrorCode::Timeout:
      return http::status::gateway_timeout;
  }
  return http::status::internal_server_error;
}

Response json_response(http::status status, const json::value& body, const Request& req) {
  return json_text_response(status, json::serialize(body), req);
}

Response json_text_response(http::status status, std::string body, const Request& req) {
  Response res{status, req.version()};
  res.set(http::field::server, "switchboard/" SWITCHBOARD_VERSION);
  res.set(http::field::content_type, "application/json");
  res.body() = std::move(body);
  res.keep_alive(req.keep_alive());
  res.prepare_payload();
  return res;
}

Response error_response(const Error& error, const Request& req) {
  auto res = json_response(http_status(error.code), error_body(error), req);
  if (error.retry_after)  // in whole seconds (RFC 9110 section 10.2.3)
    res.set(http::field::retry_after, std::to_string(error.retry_after->count()));
  return res;
}

Result<json::value> parse_request_json(const ServerState& state, std::string_view text,
                                       json::storage_ptr sp) {
  return parse_json(text, state.config.server.max_json_depth, std::move(sp), "server.maxJsonDepth");
}

namespace {

// What a handler sees of its request.
struct Call {
  ServerState& state;
  beast::tcp_stream& stream;
  Request& req;
  std::vector<std::string> params;  // the {…} segments of the route, decoded
  boost::urls::url_view url;
  TakeOver& take_over;  // set by a route that turns the connection into a push stream
};

using Reply = std::optional<Response>;
using Handler = asio::awaitable<Reply> (*)(Call&);

// `sp`: where the document lives; a route that is done with the body before it returns parses
// into a monotonic resource on its stack instead of the heap.
Result<json::object> body_object(const ServerState& state, const Request& req,
                                 json::storage_ptr sp = {}) {
  auto doc = parse_request_json(state, req.body(), std::move(sp));
  if (!doc) return doc.error();
  if (!doc->is_object())
    return make_error(ErrorCode::InvalidRequest,
                      "the body must be a JSON object, got " + std::string(kind_name(*doc)));
  return std::move(doc->get_object());
}

Reply fail(const Call& c, const Error& e) {
  return error_response(e, c.req);
}
Reply ok(const Call& c, const json::value& body) {
  return json_response(http::status::ok, body, c.req);
}
Reply ok_text(const Call& c, std::string body) {
  return json_text_response(http::status::ok, std::move(body), c.req);
}

// Client tokens (clientTools.clientTokens): the client's first use of its id issues one (returned
// here, to hand to the client); later uses must present it. Nothing when tokens are off.
Result<std::optional<std::string>> authenticate_client(const Call& c,
                                                       const std::string& client_id) {
  if (!c.state.credentials) return std::optional<std::string>();
  return c.state.credentials->authenticate(client_id, presented_client_token(c.req, c.url));
}

// For answers (results, progress, unregister): they must name their client and carry its token.
Result<void> verify_client(const Call& c, const std::optional<std::string>& client_id) {
  if (!c.state.credentials) return {};
  if (!client_id)
    return make_error(ErrorCode::Unauthorized,
                      "clientID is required: name the client that answers and send its token in "
                      "the X-Switchboard-Client-Token header");
  return c.state.credentials->verify(*client_id, presented_client_token(c.req, c.url));
}

// The ask of a session that a client created (a permission ask, a question of the `question`
// tool) is answered by that client only, with its token. `session_id`: the ask's session, nullopt
// when nothing waits under the id (the service answers that); `client_id`: who the answer says
// it comes from.
Result<void> verify_answerer(const Call& c, const std::optional<std::string>& session_id,
                             const std::optional<std::string>& client_id) {
  if (!session_id) return {};
  if (auto own = c.state.sessions->validate_client_session(client_id.value_or(""), *session_id);
      !own)
    return own.error();
  if (client_id) return verify_client(c, client_id);
  return {};
}

// Takes back a token issued for a request that then failed: the client never saw it.
void withdraw_issued(const Call& c, const std::string& client_id,
                     const std::optional<std::string>& issued) {
  if (issued && c.state.credentials) c.state.credentials->withdraw(client_id);
}

// ---- handlers -------------------------------------------------------------------------------

asio::awaitable<Reply> health(Call& c) {
  co_return ok(c, json::object{{"healthy", true}, {"version", SWITCHBOARD_VERSION}});
}

asio::awaitable<Reply> register_tools(Call& c) {
  auto body = body_object(c.state, c.req);
  if (!body) co_return fail(c, body.error());
  auto request = decode_register(*body);
  if (!request) co_return fail(c, request.error());
  if (!request->client_id)
    co_return fail(c, make_error(ErrorCode::InvalidRequest, "clientID is required"));
  const std::string& client_id = *request->client_id;
  if (auto r = check_registration_limits(c.state, client_id, request->tools); !r)
    co_return fail(c, r.error());
  auto issued = authenticate_client(c, client_id);
  if (!issued) co_return fail(c, issued.error());
  if (request->session_id) {
    if (auto own = c.state.sessions->validate_client_session(client_id, *request->session_id);
        !own) {
      withdraw_issued(c, client_id, *issued);
      co_return fail(c, own.error());
    }
  }
  auto ids = c.state.registry->register_tools(client_id, std::move(request->tools),
                                              request->session_id.value_or(""));
  if (!ids) {
    withdraw_issued(c, client_id, *issued);
    co_return fail(c, ids.error());
  }
  json::object out{{"registered", clienttool::to_json(*ids)}};
  if (*issued) out["clientToken"] = **issued;
  co_return ok(c, out);
}

asio::awaitable<Reply> unregister_tools(Call& c) {
  auto body = body_object(c.state, c.req);
  if (!body) co_return fail(c, body.error());
  auto request = decode_unregister(*body);
  if (!request) co_return fail(c, request.error());
  if (!request->client_id)
    co_return fail(c, make_error(ErrorCode::InvalidRequest, "clientID is required"));
  if (auto r = verify_client(c, request->client_id); !r) co_return fail(c, r.error());
  auto removed = c.state.registry->unregister(*request->client_id, request->tool_ids);
  co_return ok(c, json::object{{"success", true}, {"unregistered", clienttool::to_json(removed)}});
}

// A call's outcome on its way from the registry to the route waiting for it: one small object
// and a timer wait per execution, instead of a channel and two raced coroutines.
struct CallWaiter {
  explicit CallWaiter(asio::any_io_executor ex)
      : signal(std::move(ex), asio::steady_timer::time_point::max()) {}
  asio::steady_timer signal;  // never expires; cancelled when the outcome is in
  std::optional<clienttool::ExecuteOutcome> outcome;
  bool finished = false;     // the route has its outcome; the peer watch is moot
  bool peer_closed = false;  // the caller left before the outcome
};

// Parses the body of POST /client-tools/execute and starts the call. Plain function, so that
// the body's document lives in a buffer on this stack: only `input` is copied out (once, by
// the registry, when it serializes the request).
Result<clienttool::StartedCall> start_execution(ServerState& state, const Request& req,
                                                clienttool::CompletionHandler done) {
  unsigned char buffer[4096];
  json::monotonic_resource resource(buffer, sizeof buffer);
  json::storage_ptr sp(&resource);
  auto body = body_object(state, req, sp);
  if (!body) return body.error();
  auto params = decode_execute(*body, sp);
  if (!params) return params.error();
  return state.registry->execute(std::move(*params), std::move(done));
}

// Cancels the call when the HTTP caller closes its connection while it waits for the result.
void watch_caller(tcp::socket& socket, std::shared_ptr<CallWaiter> waiter,
                  std::shared_ptr<clienttool::ClientToolRegistry> registry,
                  std::string request_id) {
  socket.async_wait(tcp::socket::wait_read,
                    [&socket, waiter = std::move(waiter), registry = std::move(registry),
                     request_id = std::move(request_id)](boost::system::error_code ec) {
                      if (ec || waiter->finished) return;  // the outcome came first
                      char byte;
                      ssize_t n = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
                      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
                        waiter->peer_closed = true;
                        registry->cancel(request_id, "caller disconnected");
                      }
                      // Otherwise the caller pipelined another request: it is still there; wait for
                      // the result alone.
                    });
}

asio::awaitable<Reply> execute(Call& c) {
  auto waiter = std::make_shared<CallWaiter>(co_await asio::this_coro::executor);
  auto started = start_execution(c.state, c.req, [waiter](clienttool::ExecuteOutcome outcome) {
    // Any thread; the route continues on its own executor.
    asio::post(waiter->signal.get_executor(), [waiter, outcome = std::move(outcome)]() mutable {
      waiter->outcome = std::move(outcome);
      waiter->signal.cancel();
    });
  });
  if (!started) co_return fail(c, started.error());
  watch_caller(c.stream.socket(), waiter, c.state.registry, started->request_id);
  while (!waiter->outcome)
    co_await waiter->signal.async_wait(asio::as_tuple(asio::use_awaitable));
  waiter->finished = true;
  boost::system::error_code ignored;
  c.stream.socket().cancel(ignored);  // ends the watch
  if (waiter->peer_closed)
    co_return fail(c, make_error(ErrorCode::Unavailable, "caller disconnected"));
  const auto& outcome = *waiter->outcome;
  if (!outcome) co_return fail(c, outcome.error());
  co_return ok_text(c, clienttool::serialize(*outcome));
}

// Parses the body and hands the result over. Plain function: the document lives in a buffer on
// this stack, and only the result's fields are copied out.
Result<void> submit_result_body(const Call& c) {
  unsigned char buffer[4096];
  json::monotonic_resource resource(buffer, sizeof buffer);
  auto body = body_object(c.state, c.req, json::storage_ptr(&resource));
  if (!body) return body.error();
  auto request = decode_result(*body);
  if (!request) return request.error();
  if (auto v = verify_client(c, request->client_id); !v) return v.error();
  return c.state.registry->submit_result(request->request_id, request->client_id,
                                         std::move(request->response));
}

asio::awaitable<Reply> submit_result(Call& c) {
  auto r = submit_result_body(c);
  if (!r) co_return fail(c, r.error());
  co_return ok_text(c, R"({"success":true})");
}

asio::awaitable<Reply> report_progress(Call& c) {
  auto body = body_object(c.state, c.req);
  if (!body) co_return fail(c, body.error());
  auto request = decode_progress(*body);
  if (!request) co_return fail(c, request.error());
  if (auto v = verify_client(c, request->client_id); !v) co_return fail(c, v.error());
  auto r = c.state.registry->report_progress(request->request_id, request->client_id,
                                             std::move(request->progress));
  if (!r) co_return fail(c, r.error());
  co_return ok(c, json::object{{"success", true}});
}

asio::awaitable<Reply> client_tools_of(Call& c) {
  auto client_id = decode_client_id(c.params[0]);
  if (!client_id) co_return fail(c, client_id.error());
  json::array out;
  for (const auto& def : c.state.registry->get_tools(*client_id))
    out.push_back(clienttool::to_json(def));
  co_return ok(c, out);
}

asio::awaitable<Reply> all_client_tools(Call& c) {
  json::object out;
  for (const auto& [id, def] : c.state.registry->get_all_tools())
    out[id] = clienttool::to_json(def);
  co_return ok(c, out);
}

asio::awaitable<Reply> pending_stream(Call& c) {
  auto client_id = decode_client_id(c.params[0]);
  if (!client_id) co_return fail(c, client_id.error());
  std::string last;
  if (auto h = c.req.find("Last-Event-ID"); h != c.req.end()) last = std::string(h->value());
  if (auto q = c.url.params().find("lastEventID"); q != c.url.params().end() && (*q).has_value)
    last = (*q).value;
  std::uint64_t last_seq = 0;
  if (!last.empty()) {
    auto [ptr, ec] = std::from_chars(last.data(), last.data() + last.size(), last_seq);
    if (ec != std::errc{} || ptr != last.data() + last.size())
      co_return fail(c, make_error(ErrorCode::InvalidRequest,
                                   "Last-Event-ID must be a number, got \"" + last + "\""));
  }
  auto issued = authenticate_client(c, *client_id);
  if (!issued) co_return fail(c, issued.error());
  auto slot = open_client_stream(c.state, *client_id);
  if (!slot) {
    withdraw_issued(c, *client_id, *issued);
    co_return fail(c, slot.error());
  }
  c.take_over = [&state = c.state, client_id = std::move(*client_id), last_seq,
                 token = issued->value_or(""),
                 stream = std::move(*slot)](tcp::socket socket, Request req) mutable {
    return run_holding(std::move(stream),
                       run_client_sse(state, std::move(socket), std::move(req),
                                      std::move(client_id), last_seq, std::move(token)));
  };
  co_return std::nullopt;
}

asio::awaitable<Reply> client_websocket(Call& c) {
  auto client_id = decode_client_id(c.params[0]);
  if (!client_id) co_return fail(c, client_id.error());
  if (!beast::websocket::is_upgrade(c.req))
    co_return fail(c, make_error(ErrorCode::InvalidRequest,
                                 "this route is a WebSocket: send an Upgrade: websocket request"));
  auto issued = authenticate_client(c, *client_id);
  if (!issued) co_return fail(c, issued.error());
  // Refused before the upgrade: the client gets an HTTP answer it can read.
  auto slot = open_client_stream(c.state, *client_id);
  if (!slot) {
    withdraw_issued(c, *client_id, *issued);
    co_return fail(c, slot.error());
  }
  c.take_over = [&state = c.state, client_id = std::move(*client_id), token = issued->value_or(""),
                 stream = std::move(*slot)](tcp::socket socket, Request req) mutable {
    return run_holding(std::move(stream),
                       run_client_websocket(state, std::move(socket), std::move(req),
                                            std::move(client_id), std::move(token)));
  };
  co_return std::nullopt;
}

asio::awaitable<Reply> event_stream(Call& c) {
  c.take_over = [&state = c.state](tcp::socket socket, Request req) {
    return run_event_sse(state, std::move(socket), std::move(req));
  };
  co_return std::nullopt;
}

// ---- sessions (OpenCode's V1 API) -----------------------------------------------------------

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
    auto auth = authenticate_client(c, input.client_id);
    if (!auth) co_return fail(c, auth.error());
    issued = std::move(*auth);
  }
  std::string client_id = input.client_id;
  auto s = c.state.sessions->create_session(std::move(input));
  if (!s) {
    withdraw_issued(c, client_id, issued);
    co_return fail(c, s.error());
  }
  json::object out = session::to_json(*s);
  if (issued) out["clientToken"] = *issued;
  co_return ok(c, out);
}

asio::awaitable<Reply> list_sessions(Call& c) {
  auto list = c.state.sessions->list_sessions();
  if (!list) co_return fail(c, list.error());
  json::array out;
  for (const auto& s : *list)
    out.push_back(session::to_json(s));
  co_return ok(c, out);
}

asio::awaitable<Reply> session_status(Call& c) {
  co_return ok(c, c.state.sessions->status());
}

asio::awaitable<Reply> get_session(Call& c) {
  auto s = c.state.sessions->get_session(c.params[0]);
  if (!s) co_return fail(c, s.error());
  co_return ok(c, session::to_json(*s));
}

asio::awaitable<Reply> delete_session(Call& c) {
  auto r = c.state.sessions->delete_session(c.params[0]);
  if (!r) co_return fail(c, r.error());
  co_return ok(c, true);
}

asio::awaitable<Reply> list_messages(Call& c) {
  auto list = c.state.sessions->messages(c.params[0]);
  if (!list) co_return fail(c, list.error());
  std::string out = "[";
  for (const auto& m : *list) {
    if (out.size() > 1) out.push_back(',');
    session::append_json(out, m);
  }
  out.push_back(']');
  co_return ok_text(c, std::move(out));
}

asio::awaitable<Reply> list_todos(Call& c) {
  auto todos = c.state.sessions->todos(c.params[0]);
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
  if (!r) co_return fail(c, r.error());
  co_return ok_text(c, session::json_text(*r));
}

asio::awaitable<Reply> prompt_async(Call& c) {
  auto in = prompt_input(c.state, c.req);
  if (!in) co_return fail(c, in.error());
  auto r = c.state.sessions->prompt_async(c.params[0], std::move(*in));
  if (!r) co_return fail(c, r.error());
  Response res{http::status::no_content, c.req.version()};
  res.set(http::field::server, "switchboard/" SWITCHBOARD_VERSION);
  res.keep_alive(c.req.keep_alive());
  res.prepare_payload();
  co_return res;
}

asio::awaitable<Reply> abort_session(Call& c) {
  if (auto s = c.state.sessions->get_session(c.params[0]); !s) co_return fail(c, s.error());
  co_return ok(c, c.state.sessions->abort(c.params[0]));
}

asio::awaitable<Reply> list_permissions(Call& c) {
  json::array out;
  for (const auto& r : c.state.permissions->list())
    out.push_back(permission::to_json(r));
  co_return ok(c, out);
}

asio::awaitable<Reply> reply_permission(Call& c) {
  auto body = body_object(c.state, c.req);
  if (!body) co_return fail(c, body.error());
  auto request = decode_permission_reply(*body);
  if (!request) co_return fail(c, request.error());
  std::optional<std::string> session_id;
  for (const auto& ask : c.state.permissions->list())
    if (ask.id == c.params[0]) session_id = ask.session_id;
  if (auto v = verify_answerer(c, session_id, request->client_id); !v) co_return fail(c, v.error());
  auto r = c.state.permissions->reply(c.params[0], request->reply, request->message);
  if (!r) co_return fail(c, r.error());
  co_return ok(c, true);
}

asio::awaitable<Reply> list_tools(Call& c) {
  std::string session_id, agent;
  if (auto q = c.url.params().find("sessionID"); q != c.url.params().end()) session_id = (*q).value;
  if (auto q = c.url.params().find("agent"); q != c.url.params().end()) agent = (*q).value;
  auto tools = c.state.sessions->offered_tools(session_id, agent);
  if (!tools) co_return fail(c, tools.error());
  json::array out;
  for (const auto& t : *tools)
    out.push_back(json::object{
        {"id", t->id()}, {"description", t->description()}, {"parameters", t->parameters()}});
  co_return ok(c, out);
}

asio::awaitable<Reply> list_providers(Call& c) {
  json::array providers;
  for (const auto& [id, p] : c.state.sessions->providers().providers) {
    json::array models;
    for (const auto& m : p->models())
      models.emplace_back(m);
    providers.push_back(
        json::object{{"id", id}, {"type", p->type()}, {"models", std::move(models)}});
  }
  json::array agents;
  for (const auto& [name, a] : c.state.sessions->agents())
    agents.push_back(json::object{{"name", name}, {"description", a.description}});
  co_return ok(c, json::object{{"providers", std::move(providers)},
                               {"default", c.state.sessions->providers().default_model},
                               {"agents", std::move(agents)}});
}

asio::awaitable<Reply> list_questions(Call& c) {
  json::array out;
  for (const auto& q : c.state.questions->list())
    out.push_back(question::to_json(q));
  co_return ok(c, out);
}

// Only the owner of the question's session answers it (verify_answerer). `client_id`: the
// clientID of the body.
Result<void> verify_question_answerer(const Call& c, const std::optional<std::string>& client_id) {
  std::optional<std::string> session_id;
  for (const auto& q : c.state.questions->list())
    if (q.id == c.params[0]) session_id = q.session_id;
  return verify_answerer(c, session_id, client_id);
}

asio::awaitable<Reply> reply_question(Call& c) {
  auto body = body_object(c.state, c.req);
  if (!body) co_return fail(c, body.error());
  auto request = decode_question_reply(*body);
  if (!request) co_return fail(c, request.error());
  if (auto v = verify_question_answerer(c, request->client_id); !v) co_return fail(c, v.error());
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
  if (auto v = verify_question_answerer(c, client_id); !v) co_return fail(c, v.error());
  auto r = c.state.questions->reject(c.params[0]);
  if (!r) co_return fail(c, r.error());
  co_return ok(c, true);
}

// ---- the server password (server.password) -----------------------------------------------------

// GET /auth: whether the page must ask for the password before it calls the API.
asio::awaitable<Reply> auth_status(Call& c) {
  co_return ok(c, json::object{{"required", !c.state.config.server.password.empty()},
                               {"authenticated", has_server_access(c.state, c.req, c.url)}});
}

// POST /auth {password}: checks it and sets the cookie that admits this browser (its
// EventSource and WebSocket cannot send an Authorization header).
asio::awaitable<Reply> log_in(Call& c) {
  auto body = body_object(c.state, c.req);
  if (!body) co_return fail(c, body.error());
  auto password = decode_login(*body);
  if (!password) co_return fail(c, password.error());
  if (!password_matches(c.state, *password))
    co_return fail(c, make_error(ErrorCode::Unauthorized, "wrong password"));
  auto res = json_response(http::status::ok, json::object{{"authenticated", true}}, c.req);
  if (!c.state.config.server.password.empty())
    res.set(http::field::set_cookie, auth_cookie(c.state));
  co_return res;
}

// ---- the web page (embedded at build time) ---------------------------------------------------

const WebAsset* find_web_asset(std::string_view path) {
  for (const auto& asset : web_assets())
    if (asset.path == path) return &asset;
  return nullptr;
}

bool etag_matches(const Request& req, std::string_view etag) {
  auto h = req.find(http::field::if_none_match);
  return h != req.end() && (h->value() == "*" || h->value().find(etag) != std::string_view::npos);
}

// Files under /assets/ have content hashes in their names, so browsers may keep them for good;
// the page itself is revalidated on each load so a new build shows at once.
Response web_asset_response(const WebAsset& asset, const Request& req, bool immutable) {
  bool fresh = etag_matches(req, asset.etag);
  Response res{fresh ? http::status::not_modified : http::status::ok, req.version()};
  res.set(http::field::server, "switchboard/" SWITCHBOARD_VERSION);
  res.set(http::field::etag, asset.etag);
  res.set(http::field::cache_control,
          immutable ? "public, max-age=31536000, immutable" : "no-cache");
  res.set("X-Content-Type-Options", "nosniff");
  if (!immutable) {
    // The page talks only to this server: nothing else may be loaded or contacted.
    res.set("Content-Security-Policy",
            "default-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; "
            "form-action 'none'; frame-ancestors 'none'");
    res.set("Referrer-Policy", "no-referrer");
  }
  if (!fresh) {
    res.set(http::field::content_type, asset.content_type);
    res.body() = std::string(asset.body);
  }
  res.keep_alive(req.keep_alive());
  res.prepare_payload();
  return res;
}

asio::awaitable<Reply> web_page(Call& c) {
  const WebAsset* page = find_web_asset("/index.html");
  if (!page)
    co_return fail(c, make_error(ErrorCode::NotFound,
                                 "this switchboard was built without its web page "
                                 "(SWITCHBOARD_WEB=OFF); the API is served as usual"));
  co_return web_asset_response(*page, c.req, false);
}

asio::awaitable<Reply> web_asset(Call& c) {
  std::string path = "/assets/" + c.params[0];
  const WebAsset* asset = find_web_asset(path);
  if (!asset) co_return fail(c, make_error(ErrorCode::NotFound, "no web asset " + path));
  co_return web_asset_response(*asset, c.req, true);
}

// ---- the route table ------------------------------------------------------------------------

struct Route {
  http::verb method;
  std::vector<std::string_view> pattern;  // "{}" matches one segment
  Handler handler;
};

const std::vector<Route>& routes() {
  static const std::vector<Route> table = {
      {http::verb::get, {"health"}, &health},
      {http::verb::post, {"client-tools", "register"}, &register_tools},
      {http::verb::delete_, {"client-tools", "unregister"}, &unregister_tools},
      {http::verb::post, {"client-tools", "execute"}, &execute},
      {http::verb::post, {"client-tools", "result"}, &submit_result},
      {http::verb::post, {"client-tools", "progress"}, &report_progress},
      {http::verb::get, {"client-tools", "pending", "{}"}, &pending_stream},
      {http::verb::get, {"client-tools", "ws", "{}"}, &client_websocket},
      {http::verb::get, {"client-tools", "tools"}, &all_client_tools},
      {http::verb::get, {"client-tools", "tools", "{}"}, &client_tools_of},
      {http::verb::get, {"event"}, &event_stream},
      {http::verb::post, {"session"}, &create_session},
      {http::verb::get, {"session"}, &list_sessions},
      {http::verb::get, {"session", "status"}, &session_status},
      {http::verb::get, {"session", "{}"}, &get_session},
      {http::verb::delete_, {"session", "{}"}, &delete_session},
      {http::verb::get, {"session", "{}", "message"}, &list_messages},
      {http::verb::get, {"session", "{}", "todo"}, &list_todos},
      {http::verb::post, {"session", "{}", "message"}, &prompt},
      {http::verb::post, {"session", "{}", "prompt_async"}, &prompt_async},
      {http::verb::post, {"session", "{}", "abort"}, &abort_session},
      {http::verb::get, {"permission"}, &list_permissions},
      {http::verb::post, {"permission", "{}", "reply"}, &reply_permission},
      {http::verb::get, {"tool"}, &list_tools},
      {http::verb::get, {"question"}, &list_questions},
      {http::verb::post, {"question", "{}", "reply"}, &reply_question},
      {http::verb::post, {"question", "{}", "reject"}, &reject_question},
      {http::verb::get, {"provider"}, &list_providers},
      {http::verb::get, {"auth"}, &auth_status},
      {http::verb::post, {"auth"}, &log_in},
      {http::verb::get, {}, &web_page},
      {http::verb::get, {"assets", "{}"}, &web_asset},
  };
  return table;
}

bool matches(const Route& route, const std::vector<std::string>& segments,
             std::vector<std::string>& params) {
  if (route.pattern.size() != segments.size()) return false;
  params.clear();
  for (std::size_t i = 0; i < segments.size(); ++i) {
    if (route.pattern[i] == "{}") {
      params.push_back(segments[i]);
    } else if (route.pattern[i] != segments[i]) {
      return false;
    }
  }
  return true;
}

}  // namespace

asio::awaitable<std::optional<Response>> dispatch(ServerState& state, beast::tcp_stream& stream,
                                                  Request& req, TakeOver& take_over) {
  auto url = boost::urls::parse_origin_form(req.target());
  if (!url)
    co_return error_response(make_error(ErrorCode::InvalidRequest,
                                        "invalid request target: " + std::string(req.target())),
                             req);
  std::vector<std::string> segments;
  for (auto seg : url->segments())
    segments.push_back(seg);
  if (!segments.empty() && segments.back().empty()) segments.pop_back();  // trailing slash

  if (auto denied = check_access(state, req, *url, segments)) co_return std::move(*denied);

  std::vector<std::string> params;
  std::string allowed;
  for (const auto& route : routes()) {
    if (!matches(route, segments, params)) continue;
    if (route.method != req.method()) {
      if (!allowed.empty()) allowed += ", ";
      allowed += std::string(http::to_string(route.method));
      continue;
    }
    Call call{state, stream, req, std::move(params), *url, take_over};
    co_return co_await route.handler(call);
  }
  if (!allowed.empty()) {
    auto res = json_response(
        http::status::method_not_allowed,
        error_body(make_error(ErrorCode::InvalidRequest,
                              std::string(req.method_string()) + " is not allowed on " +
                                  std::string(url->path()) + " (allowed: " + allowed + ")")),
        req);
    res.set(http::field::allow, allowed);
    co_return res;
  }
  co_return error_response(
      make_error(ErrorCode::NotFound, "no route for " + std::string(req.method_string()) + " " +
                                          std::string(url->path())),
      req);
}

}  // namespace sb::server
