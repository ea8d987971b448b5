#include "server/access.hpp"

#include "clienttool/credentials.hpp"
#include "clienttool/wire.hpp"
#include "util/base64.hpp"
#include "util/text.hpp"

namespace sb::server {

namespace {

using clienttool::constant_time_equal;
using clienttool::sha256_hex;

// An Origin header names the same server as the Host header: the web page served from here.
bool same_origin(const Request& req, std::string_view origin) {
  auto scheme = origin.find("://");
  if (scheme == std::string_view::npos) return false;
  auto host = req[http::field::host];
  return !host.empty() && ascii_iequals(origin.substr(scheme + 3), host);
}

// The name of a Host header without its port: "127.0.0.1:4096" -> "127.0.0.1", "[::1]:80" ->
// "[::1]".
std::string_view host_name(std::string_view host) {
  if (host.starts_with('[')) {
    auto end = host.find(']');
    return end == std::string_view::npos ? host : host.substr(0, end + 1);
  }
  auto colon = host.rfind(':');
  return colon == std::string_view::npos ? host : host.substr(0, colon);
}

// A name that only ever means this machine: localhost (and *.localhost, RFC 6761), 127.x.y.z,
// [::1], or the address the server was told to listen on.
bool loopback_name(const ServerState& state, std::string_view name) {
  return ascii_iequals(name, "localhost") ||
         (name.size() > 10 && ascii_iequals(name.substr(name.size() - 10), ".localhost")) ||
         name.starts_with("127.") || name == "[::1]" ||
         ascii_iequals(name, state.config.server.hostname);
}

bool origin_allowed(const ServerState& state, std::string_view origin) {
  for (const auto& allowed : state.config.server.cors)
    if (allowed == "*" || allowed == origin) return true;
  return false;
}

// The password of `Authorization: Bearer P` or `Authorization: Basic base64(any-user:P)`.
std::optional<std::string> authorization_password(const Request& req) {
  auto h = req[http::field::authorization];
  auto space = h.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  auto scheme = h.substr(0, space);
  auto rest = h.substr(space + 1);
  while (!rest.empty() && rest.front() == ' ')
    rest.remove_prefix(1);
  if (ascii_iequals(scheme, "Bearer")) return std::string(rest);
  if (ascii_iequals(scheme, "Basic")) {
    auto decoded = base64_decode(rest);
    if (!decoded) return std::nullopt;
    auto colon = decoded->find(':');
    if (colon == std::string::npos) return std::nullopt;
    return decoded->substr(colon + 1);
  }
  return std::nullopt;
}

std::optional<std::string> cookie_value(const Request& req, std::string_view name) {
  for (auto it = req.find(http::field::cookie);
       it != req.end() && it->name() == http::field::cookie; ++it) {
    std::string_view cookies = it->value();
    while (!cookies.empty()) {
      auto end = cookies.find(';');
      auto pair = cookies.substr(0, end);
      while (!pair.empty() && pair.front() == ' ')
        pair.remove_prefix(1);
      if (pair.starts_with(name) && pair.size() > name.size() && pair[name.size()] == '=')
        return std::string(pair.substr(name.size() + 1));
      if (end == std::string_view::npos) break;
      cookies.remove_prefix(end + 1);
    }
  }
  return std::nullopt;
}

std::string cookie_secret(const ServerState& state) {
  // Not the password itself: a cookie that leaks (a proxy log, say) does not reveal it.
  return sha256_hex("switchboard-auth-cookie\n" + state.config.server.password);
}

// The web page (its HTML and assets) and the login route load without the password: the page
// asks for it and POSTs it to /auth.
bool open_route(const std::vector<std::string>& segments, http::verb method) {
  if (segments.empty()) return method == http::verb::get || method == http::verb::head;
  if (segments.size() == 2 && segments[0] == "assets") return true;
  return segments.size() == 1 && segments[0] == "auth";
}

// The CORS headers themselves are added with every other answer's (HttpSession).
Response preflight(const Request& req) {
  Response res{http::status::no_content, req.version()};
  res.set(http::field::server, "switchboard/" SWITCHBOARD_VERSION);
  res.set(http::field::access_control_allow_methods, "GET, POST, PATCH, DELETE, OPTIONS");
  res.set(http::field::access_control_allow_headers,
          "Authorization, Content-Type, Last-Event-ID, X-Switchboard-Client-Token");
  res.set(http::field::access_control_max_age, "600");
  res.keep_alive(req.keep_alive());
  res.prepare_payload();
  return res;
}

}  // namespace

bool password_matches(const ServerState& state, std::string_view presented) {
  const auto& password = state.config.server.password;
  if (password.empty()) return true;
  // Hashing both sides first makes the comparison's time independent of the length too.
  return constant_time_equal(sha256_hex(presented), sha256_hex(password));
}

std::string auth_cookie(const ServerState& state) {
  return std::string(kAuthCookie) + "=" + cookie_secret(state) +
         "; Path=/; HttpOnly; SameSite=Strict";
}

bool has_server_access(const ServerState& state, const Request& req,
                       const boost::urls::url_view& url) {
  if (state.config.server.password.empty()) return true;
  if (auto p = authorization_password(req); p && password_matches(state, *p)) return true;
  if (auto q = url.params().find("token"); q != url.params().end() && (*q).has_value)
    if (password_matches(state, (*q).value)) return true;
  if (auto c = cookie_value(req, kAuthCookie)) return constant_time_equal(*c, cookie_secret(state));
  return false;
}

Result<void> check_registration_limits(const ServerState& state, const std::string& client_id,
                                       const std::vector<clienttool::ToolSpec>& specs) {
  std::vector<std::string> registered;
  for (const auto& def : state.registry->get_tools(client_id))
    registered.push_back(def->name);
  return clienttool::check_spec_limits(specs, registered, spec_limits(state.config), "tools");
}

clienttool::SpecLimits spec_limits(const config::Config& config) {
  const auto& ct = config.client_tools;
  clienttool::SpecLimits limits;
  limits.max_tools_per_client = static_cast<std::size_t>(ct.max_tools_per_client);
  limits.max_description_bytes = static_cast<std::size_t>(ct.max_description_bytes);
  limits.max_schema_bytes = static_cast<std::size_t>(ct.max_schema_bytes);
  return limits;
}

Result<std::shared_ptr<ClientStreamSlot>> open_client_stream(ServerState& state,
                                                             const std::string& client_id) {
  auto limit = static_cast<std::size_t>(state.config.client_tools.max_connections_per_client);
  if (auto it = state.client_streams.find(client_id);
      it != state.client_streams.end() && it->second >= limit)
    return make_error(ErrorCode::RateLimited,
                      "client " + client_id + " already has " + std::to_string(it->second) +
                          " streams and WebSockets open, the limit "
                          "(clientTools.maxConnectionsPerClient); close one first");
  return std::make_shared<ClientStreamSlot>(state, client_id);
}

std::optional<std::string> presented_client_token(const Request& req,
                                                  const boost::urls::url_view& url) {
  if (auto h = req.find(kClientTokenHeader); h != req.end()) return std::string(h->value());
  if (auto q = url.params().find(kClientTokenQuery); q != url.params().end() && (*q).has_value)
    return std::string((*q).value);
  return std::nullopt;
}

void add_cors_headers(const ServerState& state, const Request& req, http::fields& res) {
  auto origin = req[http::field::origin];
  if (origin.empty() || same_origin(req, origin) || !origin_allowed(state, origin)) return;
  res.set(http::field::access_control_allow_origin, origin);
  res.set(http::field::vary, "Origin");
  // Retry-After is not CORS-safelisted: without this a page could not read when to retry a 429.
  res.set(http::field::access_control_expose_headers, "X-Switchboard-Client-Token, Retry-After");
}

std::optional<Response> check_access(const ServerState& state, const Request& req,
                                     const boost::urls::url_view& url,
                                     const std::vector<std::string>& segments) {
  // Without a password, the page of any site could reach a server on loopback by pointing its
  // own name at 127.0.0.1 (DNS rebinding): the browser then sends that name as Host and as
  // Origin, so the origin check below would see "the same origin". Such a server therefore
  // answers only requests addressed to a loopback name. (No Host at all is not a browser.)
  if (state.config.server.password.empty() && !state.config.server.allow_remote) {
    auto host = req[http::field::host];
    if (!host.empty() && !loopback_name(state, host_name(host)))
      return error_response(
          make_error(ErrorCode::Forbidden,
                     "this server has no password, so it answers only requests addressed to "
                     "localhost, 127.0.0.1 or [::1], not to \"" +
                         std::string(host) +
                         "\" (set server.password to serve other names, e.g. behind a proxy)"),
          req);
  }
  auto origin = req[http::field::origin];
  // A browser sends Origin on cross-origin requests and WebSocket handshakes. A page from an
  // origin not in server.cors is refused outright, not merely left unable to read the answer:
  // a "simple" cross-site POST would otherwise still act.
  if (!origin.empty() && !same_origin(req, origin) && !origin_allowed(state, origin))
    return error_response(
        make_error(ErrorCode::Forbidden, "requests from the origin " + std::string(origin) +
                                             " are not allowed (server.cors lists the origins "
                                             "whose pages may call this server)"),
        req);
  if (req.method() == http::verb::options && !origin.empty() &&
      req.find(http::field::access_control_request_method) != req.end())
    return preflight(req);
  if (open_route(segments, req.method()) || has_server_access(state, req, url)) return std::nullopt;
  auto res = error_response(
      make_error(ErrorCode::Unauthorized,
                 "this server needs its password: send Authorization: Bearer <password> (or HTTP "
                 "Basic with any user name), or the token query parameter on a stream"),
      req);
  res.set(http::field::www_authenticate, "Bearer realm=\"switchboard\"");
  return res;
}

}  // namespace sb::server
