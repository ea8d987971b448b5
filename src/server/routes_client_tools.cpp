// The client-tool routes: registration, execution and its results, the tool lists, and the
// client's SSE stream and WebSocket (their list: client_tool_routes(), in route.hpp).
#include "server/route.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/beast/websocket.hpp>

#include <charconv>

#include "clienttool/wire.hpp"
#include "server/access.hpp"
#include "server/cluster_asks.hpp"
#include "server/decode.hpp"
#include "server/push.hpp"

namespace sb::server {

namespace {

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
  auto issued = co_await authenticate_client(c, client_id);
  if (!issued) co_return fail(c, issued.error());
  if (request->session_id) {
    if (auto own =
            co_await c.state.sessions->validate_client_session(client_id, *request->session_id);
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
  if (auto r = co_await verify_client(c, request->client_id); !r) co_return fail(c, r.error());
  auto removed = c.state.registry->unregister(*request->client_id, request->tool_ids);
  co_return ok(c, json::object{{"success", true}, {"unregistered", clienttool::to_json(removed)}});
}

asio::awaitable<Reply> execute(Call& c) {
  // The body's document lives in a buffer in this frame: only `input` is copied out (once, by
  // the registry, when it serializes the request).
  unsigned char buffer[4096];
  json::monotonic_resource resource(buffer, sizeof buffer);
  json::storage_ptr sp(&resource);
  auto body = body_object(c.state, c.req, sp);
  if (!body) co_return fail(c, body.error());
  auto params = decode_execute(*body, sp);
  if (!params) co_return fail(c, params.error());
  params->cancel_reason = [] { return std::string("caller disconnected"); };
  auto watch = std::make_shared<CallerWatch>();
  watch_caller(c.stream.socket(), watch);
  // Named, not temporaries in the co_await: GCC 12 destroys those twice.
  clienttool::ProgressHandler no_progress;
  auto token = asio::bind_cancellation_slot(watch->left.slot(), asio::use_awaitable);
  auto outcome =
      co_await c.state.registry->async_execute(std::move(*params), std::move(no_progress), token);
  watch->finished = true;
  boost::system::error_code ignored;
  c.stream.socket().cancel(ignored);  // ends the watch
  if (!outcome) co_return fail(c, outcome.error());
  co_return ok_text(c, clienttool::serialize(*outcome));
}

// Parses the body. Plain function: the document lives in a buffer on this stack, and only the
// result's fields are copied out.
Result<ResultRequest> result_body(const Call& c) {
  unsigned char buffer[4096];
  json::monotonic_resource resource(buffer, sizeof buffer);
  auto body = body_object(c.state, c.req, json::storage_ptr(&resource));
  if (!body) return body.error();
  return decode_result(*body);
}

// Hands the body's result over, once its client is verified.
asio::awaitable<Result<void>> submit_result_body(const Call& c) {
  auto request = result_body(c);
  if (!request) co_return request.error();
  if (auto v = co_await verify_client(c, request->client_id); !v) co_return v.error();
  co_return c.state.registry->submit_result(request->request_id, request->client_id,
                                            std::move(request->response));
}

// A result or progress for a request that this node did not send: in a cluster, the node whose
// turn sent it takes it (op "client.result" / "client.progress", the body as the client sent it,
// its token checked here already). The body is read again: this path is rare, the common one
// reads it on the stack.
asio::awaitable<Result<void>> to_the_node_that_sent_it(Call& c, std::string op, Result<void> here) {
  if (here || here.error().code != ErrorCode::NotFound || !c.state.cluster) co_return here;
  auto body = body_object(c.state, c.req);
  if (!body) co_return body.error();
  co_return co_await ask_the_node_that_has_it(c.state, std::move(op), std::move(*body),
                                              here.error());
}

asio::awaitable<Reply> submit_result(Call& c) {
  auto here = co_await submit_result_body(c);
  auto r = co_await to_the_node_that_sent_it(c, "client.result", std::move(here));
  if (!r) co_return fail(c, r.error());
  co_return ok_text(c, R"({"success":true})");
}

asio::awaitable<Reply> report_progress(Call& c) {
  auto body = body_object(c.state, c.req);
  if (!body) co_return fail(c, body.error());
  auto request = decode_progress(*body);
  if (!request) co_return fail(c, request.error());
  if (auto v = co_await verify_client(c, request->client_id); !v) co_return fail(c, v.error());
  auto r = c.state.registry->report_progress(request->request_id, request->client_id,
                                             std::move(request->progress));
  r = co_await to_the_node_that_sent_it(c, "client.progress", std::move(r));
  if (!r) co_return fail(c, r.error());
  co_return ok(c, json::object{{"success", true}});
}

asio::awaitable<Reply> client_tools_of(Call& c) {
  auto client_id = decode_client_id(c.params[0]);
  if (!client_id) co_return fail(c, client_id.error());
  json::array out;
  for (const auto& def : c.state.registry->get_tools(*client_id))
    out.push_back(clienttool::to_json(*def));
  co_return ok(c, out);
}

asio::awaitable<Reply> all_client_tools(Call& c) {
  json::object out;
  for (const auto& [id, def] : c.state.registry->get_all_tools())
    out[id] = clienttool::to_json(*def);
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
  auto issued = co_await authenticate_client(c, *client_id);
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
  auto issued = co_await authenticate_client(c, *client_id);
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

}  // namespace

std::vector<Route> client_tool_routes() {
  return {
      {http::verb::post,
       {"client-tools", "register"},
       &register_tools,
       {.id = "clientTools.register",
        .summary = "Register a client's tools (for every session, or for one)",
        .body = "ClientToolRegisterRequest",
        .answer = "ClientToolRegisterAnswer",
        .statuses = "403 409"}},
      {http::verb::delete_,
       {"client-tools", "unregister"},
       &unregister_tools,
       {.id = "clientTools.unregister",
        .summary = "Remove some or all of a client's tools; calls waiting on them end with 503",
        .body = "ClientToolUnregisterRequest",
        .answer = "ClientToolUnregisterAnswer"}},
      {http::verb::post,
       {"client-tools", "execute"},
       &execute,
       {.id = "clientTools.execute",
        .summary = "Run a client tool and wait for its client's result",
        .body = "ClientToolExecuteRequest",
        .answer = "ClientToolResult",
        .statuses = "404 429 503 504"}},
      {http::verb::post,
       {"client-tools", "result"},
       &submit_result,
       {.id = "clientTools.result",
        .summary = "A client's result of a call it was sent",
        .body = "ClientToolResultRequest",
        .answer = "ClientToolAck",
        .statuses = "403 404 409"}},
      {http::verb::post,
       {"client-tools", "progress"},
       &report_progress,
       {.id = "clientTools.progress",
        .summary = "A client's progress report of a call it was sent",
        .body = "ClientToolProgressRequest",
        .answer = "ClientToolAck",
        .statuses = "403 404 409"}},
      {http::verb::get,
       {"client-tools", "pending", "{clientID}"},
       &pending_stream,
       {.id = "clientTools.pending",
        .summary = "A client's stream of calls to run and cancels (SSE; attaches the client)",
        .answer = "ClientToolStreamEvent",
        .statuses = "429",
        .query = "clientToolsLastEventID clientToolsClientToken",
        .media = "text/event-stream"}},
      {http::verb::get,
       {"client-tools", "ws", "{clientID}"},
       &client_websocket,
       {.id = "clientTools.ws",
        .summary = "A client's WebSocket: registrations, calls, results and progress",
        .statuses = "400 429",
        .query = "clientToolsClientToken",
        .media = "websocket",
        .status = 101}},
      {http::verb::get,
       {"client-tools", "tools"},
       &all_client_tools,
       {.id = "clientTools.list",
        .summary = "Every registered client tool, by id",
        .answer = "ClientToolMap"}},
      {http::verb::get,
       {"client-tools", "tools", "{clientID}"},
       &client_tools_of,
       {.id = "clientTools.listClient",
        .summary = "One client's registered tools",
        .answer = "ClientToolList",
        .statuses = "400"}},
  };
}

}  // namespace sb::server
