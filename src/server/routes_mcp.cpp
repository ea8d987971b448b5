// The MCP routes (their list: mcp_routes(), in route.hpp): the MCP servers Switchboard uses (their
// status, adding one at run time, connecting and disconnecting), and /client-tools/mcp, where
// Switchboard is an MCP server for the connected clients' tools (docs/mcp.md, part 2), over
// Streamable HTTP in both eras.
#include <cstdlib>

#include "mcp/config.hpp"
#include "mcp/serve.hpp"
#include "server/push.hpp"
#include "server/route.hpp"
#include "util/ids.hpp"

namespace sb::server {

namespace {

json::object status_body(const ServerState& state) {
  json::object out;
  for (const auto& [name, status] : state.mcp->status())
    out[name] = mcp::to_json(status);
  return out;
}

// GET /mcp: {NAME: {status, error?, tools: [ids], protocolVersion?}}.
asio::awaitable<Reply> list_servers(Call& c) {
  co_return ok(c, status_body(c.state));
}

// POST /mcp {name, config}: adds or replaces one server; the next step of every session sees its
// tools once it is connected. Answers with every server's status, this one `connecting` (or
// `disabled`).
asio::awaitable<Reply> add_server(Call& c) {
  auto body = body_object(c.state, c.req);
  if (!body) co_return fail(c, body.error());
  auto name = require_string(*body, "name");
  if (!name) co_return fail(c, name.error());
  if (!mcp::valid_server_name(*name))
    co_return fail(c, make_error(ErrorCode::InvalidRequest,
                                 "name must be 1 to 64 letters, digits, '_', '-' or '.', got \"" +
                                     *name + "\""));
  auto config = body->find("config");
  if (config == body->end())
    co_return fail(c, make_error(ErrorCode::InvalidRequest,
                                 "config is required: {\"type\": \"local\", \"command\": [...]} or "
                                 "{\"type\": \"remote\", \"url\": ...}"));
  auto env = [](const std::string& var) {
    const char* v = std::getenv(var.c_str());
    return std::string(v ? v : "");
  };
  auto server = mcp::parse_server(*name, config->value(), env, "config");
  if (!server) co_return fail(c, server.error());
  c.state.mcp->add(std::move(*server));
  co_return ok(c, status_body(c.state));
}

asio::awaitable<Reply> connect_server(Call& c) {
  if (auto r = c.state.mcp->connect(c.params[0]); !r) co_return fail(c, r.error());
  co_return ok(c, true);
}

asio::awaitable<Reply> disconnect_server(Call& c) {
  if (auto r = c.state.mcp->disconnect(c.params[0]); !r) co_return fail(c, r.error());
  co_return ok(c, true);
}

// ---- /client-tools/mcp ----------------------------------------------------------------------

// Legacy hosts' sessions kept at most; the oldest goes when one more opens.
constexpr std::size_t kMaxServedSessions = 10000;

Reply rpc_reply(const Call& c, http::status status, const mcp::Message& m) {
  return json_text_response(status, mcp::encode(m), c.req);
}

Reply rpc_error(const Call& c, http::status status, const json::value& id, std::int64_t code,
                const std::string& message) {
  return rpc_reply(c, status, mcp::error_response(id, code, message));
}

Reply accepted(const Call& c) {
  Response res{http::status::accepted, c.req.version()};
  res.prepare_payload();
  return res;
}

// The client whose tools the caller wants (`?clientID=`, with that client's token); none: the
// open tools.
asio::awaitable<Result<std::optional<std::string>>> served_client(const Call& c) {
  auto q = c.url.params().find("clientID");
  if (q == c.url.params().end() || !(*q).has_value) co_return std::optional<std::string>();
  std::optional<std::string> client_id = std::string((*q).value);
  if (auto r = co_await verify_client(c, client_id); !r) co_return r.error();
  co_return client_id;
}

std::string header(const Call& c, std::string_view name) {
  auto it = c.req.find(name);
  return it == c.req.end() ? std::string() : std::string(it->value());
}

std::string meta_version(const mcp::Message& m) {
  auto meta = m.params.if_contains("_meta");
  if (!meta || !meta->is_object()) return {};
  auto v = meta->get_object().if_contains("io.modelcontextprotocol/protocolVersion");
  return v && v->is_string() ? std::string(v->get_string()) : std::string();
}

std::string call_key(const std::string& session, const json::value& id) {
  return session + " " + mcp::id_text(id);
}

// A tools/call, answered when the client has answered. `send_progress` set: the answer is a
// stream and the client's progress reports go out on it first.
asio::awaitable<mcp::Message> served_call(ServerState& state, mcp::Message m,
                                          std::optional<std::string> client_id, bool modern,
                                          std::string session, asio::cancellation_slot left,
                                          SendMessage send_progress) {
  auto params = mcp::call_params(*state.registry, m.params, client_id);
  if (!params)
    co_return mcp::error_response(m.id, mcp::rpc_code::kInvalidParams, params.error().message);
  params->cancel_reason = [] { return std::string("the MCP host cancelled the call"); };
  // Given up when the host leaves, or (legacy) says notifications/cancelled.
  auto give_up = std::make_shared<asio::cancellation_signal>();
  if (left.is_connected()) left.assign([give_up](asio::cancellation_type t) { give_up->emit(t); });
  std::string key = session.empty() ? std::string() : call_key(session, m.id);
  if (!key.empty()) state.mcp_served_calls[key] = give_up;
  json::value token;
  if (auto meta = m.params.if_contains("_meta"); meta && meta->is_object())
    if (auto t = meta->get_object().if_contains("progressToken")) token = *t;
  clienttool::ProgressHandler progress;
  if (send_progress && !token.is_null())
    progress = [send_progress, token,
                reports = std::make_shared<int>(0)](const clienttool::Progress& p) {
      send_progress(mcp::encode(mcp::progress_notification(token, ++*reports, p)));
    };
  // Named, not temporaries in the co_await: GCC 12 destroys those twice.
  auto bound = asio::bind_cancellation_slot(give_up->slot(), asio::use_awaitable);
  auto outcome =
      co_await state.registry->async_execute(std::move(*params), std::move(progress), bound);
  // A host that reused the id meanwhile owns the entry now.
  if (auto it = state.mcp_served_calls.find(key);
      !key.empty() && it != state.mcp_served_calls.end() && it->second == give_up)
    state.mcp_served_calls.erase(it);
  if (left.is_connected()) left.clear();
  co_return mcp::response(m.id, mcp::call_result(outcome, modern));
}

// subscriptions/listen (2026-07-28) and a legacy session's GET stream: list_changed whenever a
// client registers or removes tools, until the host leaves.
asio::awaitable<void> served_changes(ServerState& state, SendMessage send,
                                     asio::cancellation_slot left,
                                     std::optional<json::value> subscription) {
  auto meta = [&] {
    json::object params;
    if (subscription)
      params["_meta"] = json::object{{"io.modelcontextprotocol/subscriptionId", *subscription}};
    return params;
  };
  if (subscription) {
    auto ack = meta();
    ack["notifications"] = json::object{{"toolsListChanged", true}};
    send(mcp::encode(mcp::notification("notifications/subscriptions/acknowledged", ack)));
  }
  std::string changed = mcp::encode(mcp::notification("notifications/tools/list_changed", meta()));
  auto sub = state.bus->subscribe([send, changed](const bus::EventPtr& e) {
    if (e->type == "client-tool.registered" || e->type == "client-tool.unregistered") send(changed);
  });
  // Waits for the host to leave (or the server to stop, which closes the stream).
  auto forever = std::make_shared<asio::steady_timer>(co_await asio::this_coro::executor,
                                                      std::chrono::steady_clock::time_point::max());
  if (left.is_connected()) left.assign([forever](asio::cancellation_type) { forever->cancel(); });
  auto [ec] = co_await forever->async_wait(asio::as_tuple(asio::use_awaitable));
  (void)ec;
  if (left.is_connected()) left.clear();
}

asio::awaitable<Reply> served_post(Call& c) {
  auto client_id = co_await served_client(c);
  if (!client_id) co_return fail(c, client_id.error());
  auto body = body_object(c.state, c.req);
  if (!body)
    co_return rpc_error(c, http::status::bad_request, nullptr, mcp::rpc_code::kParseError,
                        body.error().message);
  auto decoded = mcp::decode_message(json::value(std::move(*body)));
  if (!decoded)
    co_return rpc_error(c, http::status::bad_request, nullptr, mcp::rpc_code::kInvalidRequest,
                        decoded.error().message);
  mcp::Message m = std::move(*decoded);
  if (m.kind == mcp::Message::Kind::Response) co_return accepted(c);  // we ask hosts nothing

  std::string header_version = header(c, "mcp-protocol-version");
  std::string body_version = meta_version(m);
  bool modern = header_version == "2026-07-28" || body_version == "2026-07-28";
  std::string session;
  if (modern) {
    if (!header_version.empty() && !body_version.empty() && header_version != body_version)
      co_return rpc_error(c, http::status::bad_request, m.id, -32020,
                          "MCP-Protocol-Version (" + header_version +
                              ") does not match the request's _meta (" + body_version + ")");
  } else if (m.method == "initialize") {
    if (m.kind != mcp::Message::Kind::Request)
      co_return rpc_error(c, http::status::bad_request, nullptr, mcp::rpc_code::kInvalidRequest,
                          "initialize is a request");
    auto& sessions = c.state.mcp_sessions;
    if (sessions.size() >= kMaxServedSessions) {
      auto oldest = std::min_element(sessions.begin(), sessions.end(), [](auto& a, auto& b) {
        return a.second.opened < b.second.opened;
      });
      sessions.erase(oldest);
    }
    auto result = mcp::initialize_result(m.params);
    session = ids::make("mcp");
    sessions[session] = {std::string(result.at("protocolVersion").as_string()),
                         ++c.state.mcp_sessions_opened};
    auto reply = rpc_reply(c, http::status::ok, mcp::response(m.id, std::move(result)));
    reply->set("Mcp-Session-Id", session);
    co_return reply;
  } else if (m.method != "server/discover") {
    session = header(c, "mcp-session-id");
    if (session.empty())
      co_return rpc_error(c, http::status::bad_request, m.id.is_null() ? json::value() : m.id,
                          mcp::rpc_code::kInvalidRequest,
                          "no Mcp-Session-Id: initialize first, or speak protocol 2026-07-28");
    if (!c.state.mcp_sessions.contains(session))
      co_return rpc_error(c, http::status::not_found, m.id.is_null() ? json::value() : m.id,
                          mcp::rpc_code::kInvalidRequest,
                          "unknown or ended MCP session: initialize again");
  }

  if (m.kind == mcp::Message::Kind::Notification) {
    if (m.method == "notifications/cancelled" && !session.empty())
      if (auto id = m.params.if_contains("requestId"))
        if (auto it = c.state.mcp_served_calls.find(call_key(session, *id));
            it != c.state.mcp_served_calls.end())
          it->second->emit(asio::cancellation_type::terminal);
    co_return accepted(c);
  }
  if (m.method == "ping") co_return rpc_reply(c, http::status::ok, mcp::response(m.id, {}));
  if (m.method == "server/discover")
    co_return rpc_reply(c, http::status::ok, mcp::response(m.id, mcp::discover_result()));
  if (m.method == "tools/list")
    co_return rpc_reply(
        c, http::status::ok,
        mcp::response(m.id, mcp::list_result(*c.state.registry, *client_id, modern)));
  if (m.method == "tools/call") {
    bool wants_progress = false;
    if (auto meta = m.params.if_contains("_meta"); meta && meta->is_object())
      wants_progress = meta->get_object().contains("progressToken");
    if (!wants_progress) {
      // A plain JSON answer; the host's leaving gives the call up, as for /client-tools/execute.
      auto watch = std::make_shared<CallerWatch>();
      watch_caller(c.stream.socket(), watch);
      SendMessage none;
      auto answer = co_await served_call(c.state, std::move(m), *client_id, modern, session,
                                         watch->left.slot(), none);
      watch->finished = true;
      boost::system::error_code ignored;
      c.stream.socket().cancel(ignored);  // ends the watch
      co_return rpc_reply(c, http::status::ok, answer);
    }
    c.take_over = [&state = c.state, m = std::move(m), client = *client_id, modern, session](
                      tcp::socket socket, Request req) mutable {
      MessageStreamBody body = [&state, m = std::move(m), client, modern, session](
                                   SendMessage send,
                                   asio::cancellation_slot left) mutable -> asio::awaitable<void> {
        auto answer =
            co_await served_call(state, std::move(m), client, modern, session, left, send);
        send(mcp::encode(answer));
      };
      return run_message_stream(state, std::move(socket), std::move(req), std::move(body));
    };
    co_return std::nullopt;
  }
  if (m.method == "subscriptions/listen" && modern) {
    c.take_over = [&state = c.state, id = m.id](tcp::socket socket, Request req) {
      MessageStreamBody body = [&state, id](SendMessage send,
                                            asio::cancellation_slot left) -> asio::awaitable<void> {
        // Named, not a conversion in the co_await: GCC 12 destroys those twice.
        std::optional<json::value> subscription = id;
        co_await served_changes(state, std::move(send), left, std::move(subscription));
      };
      return run_message_stream(state, std::move(socket), std::move(req), std::move(body));
    };
    co_return std::nullopt;
  }
  co_return rpc_error(c, modern ? http::status::not_found : http::status::ok, m.id,
                      mcp::rpc_code::kMethodNotFound, "Method not found: " + m.method);
}

// GET: a legacy session's stream of the server's own messages (list_changed here). Without a
// session it is 405, which tells a host that there is no stream to open (the MCP transport's
// rule); either refusal has the usual error body.
asio::awaitable<Reply> served_get(Call& c) {
  std::string session = header(c, "mcp-session-id");
  if (session.empty()) {
    Response res = json_response(
        http::status::method_not_allowed,
        error_body(make_error(ErrorCode::InvalidRequest,
                              "GET /client-tools/mcp is a 2025 MCP session's stream: send its "
                              "Mcp-Session-Id (a 2026-07-28 host uses subscriptions/listen)")),
        c.req);
    res.set(http::field::allow, "POST, DELETE");
    co_return res;
  }
  if (!c.state.mcp_sessions.contains(session))
    co_return fail(
        c, make_error(ErrorCode::NotFound, "unknown or ended MCP session: initialize again"));
  c.take_over = [&state = c.state](tcp::socket socket, Request req) {
    MessageStreamBody body = [&state](SendMessage send,
                                      asio::cancellation_slot left) -> asio::awaitable<void> {
      std::optional<json::value> no_subscription;
      co_await served_changes(state, std::move(send), left, std::move(no_subscription));
    };
    return run_message_stream(state, std::move(socket), std::move(req), std::move(body));
  };
  co_return std::nullopt;
}

// DELETE: the host ends its session.
asio::awaitable<Reply> served_delete(Call& c) {
  std::string session = header(c, "mcp-session-id");
  if (!c.state.mcp_sessions.erase(session))
    co_return fail(c, make_error(ErrorCode::NotFound, "unknown MCP session"));
  co_return accepted(c);
}

}  // namespace

std::vector<Route> mcp_routes() {
  return {
      {http::verb::get,
       {"mcp"},
       &list_servers,
       {.id = "mcp.status", .summary = "Every MCP server's state", .answer = "McpStatusMap"}},
      {http::verb::post,
       {"mcp"},
       &add_server,
       {.id = "mcp.add",
        .summary = "Add (or replace) an MCP server and connect it",
        .body = "McpAddRequest",
        .answer = "McpStatusMap"}},
      {http::verb::post,
       {"mcp", "{name}", "connect"},
       &connect_server,
       {.id = "mcp.connect",
        .summary = "Connect (or reconnect) an MCP server",
        .answer = "McpConnectAnswer",
        .statuses = "404 503"}},
      {http::verb::post,
       {"mcp", "{name}", "disconnect"},
       &disconnect_server,
       {.id = "mcp.disconnect",
        .summary = "Disconnect an MCP server",
        .answer = "McpConnectAnswer",
        .statuses = "404"}},
      {http::verb::post,
       {"client-tools", "mcp"},
       &served_post,
       {.id = "mcp.served.post",
        .summary = "The client tools as an MCP server (Streamable HTTP): a host's JSON-RPC "
                   "message, answered as JSON or, for a tools/call with a progressToken and "
                   "subscriptions/listen, as text/event-stream",
        .body = "McpJsonRpcMessage",
        .answer = "McpJsonRpcResponse",
        .statuses = "202 404",
        .query = "mcpClientID",
        .error = "McpServedError"}},
      {http::verb::get,
       {"client-tools", "mcp"},
       &served_get,
       {.id = "mcp.served.get",
        .summary =
            "A 2025 MCP session's stream of the server's notifications (tools/list_changed); "
            "405 without Mcp-Session-Id",
        .answer = "McpServerNotification",
        .statuses = "404 405",
        .media = "text/event-stream"}},
      {http::verb::delete_,
       {"client-tools", "mcp"},
       &served_delete,
       {.id = "mcp.served.delete",
        .summary = "End the MCP session named by Mcp-Session-Id",
        .statuses = "404",
        .status = 202}},
  };
}

}  // namespace sb::server
