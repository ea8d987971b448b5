#pragma once
// Who may reach the server: the server password (server.password) and the browser origins
// allowed to call it (server.cors). dispatch() applies both before any route; docs/security.md
// describes the rules.
#include <boost/url/url_view.hpp>

#include <optional>
#include <string>
#include <vector>

#include "server/http.hpp"

namespace sb::server {

// The cookie that POST /auth sets for the web page (its EventSource and WebSocket cannot send an
// Authorization header).
inline constexpr std::string_view kAuthCookie = "switchboard_auth";
// The header (and, for streams and WebSockets, the query parameter) that carries a client token.
inline constexpr std::string_view kClientTokenHeader = "X-Switchboard-Client-Token";
inline constexpr std::string_view kClientTokenQuery = "clientToken";

// nullopt when the request may go on to its route; otherwise the answer to send: the reply to a
// CORS preflight, 403 for an origin that server.cors does not allow, 401 without the password
// (the CORS headers of an allowed origin are added later, as to every answer).
std::optional<Response> check_access(const ServerState& state, const Request& req,
                                     const boost::urls::url_view& url,
                                     const std::vector<std::string>& segments);

// Adds the CORS headers that an allowed cross-origin request's answer needs (none otherwise).
// HttpSession adds them to every answer it writes, errors and preflights included; a push
// stream adds them to its head.
void add_cors_headers(const ServerState& state, const Request& req, http::fields& res);

// Whether `presented` is the server password (constant time). True when there is none.
bool password_matches(const ServerState& state, std::string_view presented);
// The Set-Cookie value that admits a browser after POST /auth.
std::string auth_cookie(const ServerState& state);
// True when the request carries the password (header, query `token` or cookie) or none is set.
bool has_server_access(const ServerState& state, const Request& req,
                       const boost::urls::url_view& url);

// What one client's tools may be (clientTools.maxToolsPerClient, maxDescriptionBytes,
// maxSchemaBytes): a chat's own tools have the same limits.
clienttool::SpecLimits spec_limits(const config::Config& config);
// The registration limits of clientTools.* for `client_id` registering `specs` (TooLarge).
Result<void> check_registration_limits(const ServerState& state, const std::string& client_id,
                                       const std::vector<clienttool::ToolSpec>& specs);

// A new SSE stream or WebSocket of `client_id`, counted until the slot goes; RateLimited when the
// client already has clientTools.maxConnectionsPerClient of them open.
Result<std::shared_ptr<ClientStreamSlot>> open_client_stream(ServerState& state,
                                                             const std::string& client_id);

// The client token a request presents: the X-Switchboard-Client-Token header, else (for
// EventSource and browser WebSockets, which cannot send headers) the clientToken query parameter.
std::optional<std::string> presented_client_token(const Request& req,
                                                  const boost::urls::url_view& url);

}  // namespace sb::server
