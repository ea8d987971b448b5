#pragma once
// What the route handlers share: the request as a handler sees it, replies, the checks of client
// tokens, and the route lists of each area (routes.cpp holds the table and dispatch; the
// client-tool routes are in routes_client_tools.cpp, the session API's in routes_session.cpp).
// Internal to src/server.
#include <boost/url/url_view.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/http.hpp"

namespace sb::server {

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

// What GET /doc (OpenAPI 3.1) says of a route. Schema names are components of the documents in
// src/server/api/*.json; the table and those documents are the one source of the API's shapes,
// and with $SWITCHBOARD_CHECK_API_DOC=1 every exchange is checked against them (api_doc.hpp).
struct RouteDoc {
  std::string_view id;           // operationId: OpenCode's, for the routes OpenCode has
  std::string_view summary;      // one line
  std::string_view body = {};    // schema of the JSON body it reads; "" when it reads none
  std::string_view answer = {};  // schema of its success answer; "" when the answer is no JSON
  // Other statuses it answers besides 401/403 (server.password, origins), 500 and the 400/413 of
  // any route that reads a body or query: "404 409". An error's body is the schema Error.
  std::string_view statuses = {};
  std::string_view query = {};  // query parameters: names in components.parameters, "limit"
  // The success answer: "application/json", "text/event-stream" (`answer` names one event's
  // schema), "websocket" (101, the protocol in docs/api.md), another media type, or "*/*".
  std::string_view media = "application/json";
  int status = 200;  // the success status
  // The schema of its error answers (400 and up). A route that answers another protocol's errors
  // (/client-tools/mcp: JSON-RPC error responses) names one that takes those too.
  std::string_view error = "Error";
  // The body may be left out (POST /session with no body creates a session with defaults).
  bool body_optional = false;
};

struct Route {
  http::verb method;
  std::vector<std::string_view> pattern;  // "{name}" matches one segment
  Handler handler;
  RouteDoc doc;
};

// Every route, in the order dispatch matches them (routes.cpp).
const std::vector<Route>& routes();

// The routes of each area, in the order they are matched.
std::vector<Route> client_tool_routes();  // /client-tools/...
std::vector<Route> session_routes();      // OpenCode's V1 API: /event, /session, /permission, ...
std::vector<Route> revert_routes();       // /session/{id}/revert, unrevert, diff
std::vector<Route> mcp_routes();          // /mcp: the MCP servers
std::vector<Route> chat_routes();         // /api/chat: the AI SDK's chats
// What OpenCode's clients read at start (/config, /provider, /agent, /command, /path, /project,
// /vcs, ...) and POST /session/{id}/command.
std::vector<Route> project_routes();

// The body as a JSON object. `sp`: where the document lives; a route that is done with the body
// before it returns parses into a monotonic resource on its stack instead of the heap.
Result<json::object> body_object(const ServerState& state, const Request& req,
                                 json::storage_ptr sp = {});

// A route that waits for an answer from elsewhere (a client tool's result) watches its caller:
// `left` fires when the caller's connection closes meanwhile, to give the wait up through its
// cancellation slot. The route sets `finished` when it has its outcome, then cancels the
// socket's wait.
struct CallerWatch {
  asio::cancellation_signal left;
  bool finished = false;  // the route has its outcome: a wake-up queued before then is moot
};
void watch_caller(tcp::socket& socket, std::shared_ptr<CallerWatch> watch);

Reply fail(const Call& c, const Error& e);
Reply ok(const Call& c, const json::value& body);
Reply ok_text(const Call& c, std::string body);  // a body serialized already

// Client tokens (clientTools.clientTokens): the client's first use of its id issues one (returned
// here, to hand to the client); later uses must present it. Nothing when tokens are off.
boost::asio::awaitable<Result<std::optional<std::string>>> authenticate_client(
    const Call& c, std::string client_id);

// For answers (results, progress, unregister): they must name their client and carry its token.
boost::asio::awaitable<Result<void>> verify_client(const Call& c,
                                                   std::optional<std::string> client_id);

// The ask of a session that a client created (a permission ask, a question of the `question`
// tool) is answered by that client only, with its token. `session_id`: the ask's session, nullopt
// when nothing waits under the id (the service answers that); `client_id`: who the answer says
// it comes from.
boost::asio::awaitable<Result<void>> verify_answerer(const Call& c,
                                                     std::optional<std::string> session_id,
                                                     std::optional<std::string> client_id);

// Takes back a token issued for a request that then failed: the client never saw it.
void withdraw_issued(const Call& c, const std::string& client_id,
                     const std::optional<std::string>& issued);

}  // namespace sb::server
