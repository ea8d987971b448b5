#include "server/routes.hpp"

#include <boost/url/parse.hpp>

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "clienttool/wire.hpp"
#include "server/access.hpp"
#include "server/api_doc.hpp"
#include "server/decode.hpp"
#include "server/route.hpp"
#include "server/web_assets.hpp"
#include "util/log.hpp"
#include "util/text.hpp"

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

Result<json::object> body_object(const ServerState& state, const Request& req,
                                 json::storage_ptr sp) {
  auto doc = parse_request_json(state, req.body(), std::move(sp));
  if (!doc) return doc.error();
  if (!doc->is_object())
    return make_error(ErrorCode::InvalidRequest,
                      "the body must be a JSON object, got " + std::string(kind_name(*doc)));
  return std::move(doc->get_object());
}

void watch_caller(tcp::socket& socket, std::shared_ptr<CallerWatch> watch) {
  socket.async_wait(tcp::socket::wait_read,
                    [&socket, watch = std::move(watch)](boost::system::error_code ec) {
                      // Only while the route waits is the socket known to be alive.
                      if (ec || watch->finished) return;
                      char byte;
                      ssize_t n = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
                      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
                        watch->left.emit(asio::cancellation_type::terminal);
                      // Otherwise the caller pipelined another request: it is still there; wait for
                      // the result alone.
                    });
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

asio::awaitable<Result<std::optional<std::string>>> authenticate_client(const Call& c,
                                                                        std::string client_id) {
  if (!c.state.credentials) co_return std::optional<std::string>();
  auto credentials = c.state.credentials;
  // Named: GCC 12 and a lambda inside co_await (SessionStore::run).
  auto check = [client_id, token = presented_client_token(c.req, c.url)](
                   clienttool::ClientCredentials& k) { return k.authenticate(client_id, token); };
  co_return co_await credentials->run(std::move(check));
}

asio::awaitable<Result<void>> verify_client(const Call& c, std::optional<std::string> client_id) {
  if (!c.state.credentials) co_return Result<void>{};
  if (!client_id)
    co_return make_error(ErrorCode::Unauthorized,
                         "clientID is required: name the client that answers and send its token "
                         "in the X-Switchboard-Client-Token header");
  auto credentials = c.state.credentials;
  auto check = [client_id = *client_id, token = presented_client_token(c.req, c.url)](
                   clienttool::ClientCredentials& k) { return k.verify(client_id, token); };
  co_return co_await credentials->run(std::move(check));
}

asio::awaitable<Result<void>> verify_answerer(const Call& c, std::optional<std::string> session_id,
                                              std::optional<std::string> client_id) {
  if (!session_id) co_return Result<void>{};
  auto sessions = c.state.sessions;
  if (auto own = co_await sessions->validate_client_session(client_id.value_or(""), *session_id);
      !own)
    co_return own.error();
  if (client_id) co_return co_await verify_client(c, client_id);
  co_return Result<void>{};
}

void withdraw_issued(const Call& c, const std::string& client_id,
                     const std::optional<std::string>& issued) {
  if (issued && c.state.credentials)
    c.state.credentials->post(
        [client_id](clienttool::ClientCredentials& k) { k.withdraw(client_id); });
}

namespace {

// ---- handlers -------------------------------------------------------------------------------

// Whether the store answers a statement, and with what when it does not: what a load balancer
// needs to take a node out while its PostgreSQL is away (503). A node of a cluster also says
// whether Redis answers (in the body only).
asio::awaitable<Reply> health(Call& c) {
  json::object storage;
  Result<void> answered;
  if (auto& db = c.state.database) {
    storage["engine"] = store::engine_name(db->engine());
    auto sessions = c.state.store;
    if (sessions) answered = co_await sessions->call(&session::SessionStore::check_connection);
  }
  storage["ok"] = bool(answered);
  if (!answered) storage["error"] = answered.error().message;
  bool healthy = bool(answered);
  json::object body{
      {"healthy", false}, {"version", SWITCHBOARD_VERSION}, {"storage", std::move(storage)}};
  if (c.state.cluster) {
    auto status = c.state.cluster->status();
    json::array nodes;
    for (auto& id : status.nodes)
      nodes.emplace_back(std::move(id));
    json::object cluster{{"engine", "redis"},
                         {"ok", status.ok},
                         {"node", status.node_id},
                         {"nodes", std::move(nodes)}};
    if (status.error) cluster["error"] = *status.error;
    // Redis is not part of `healthy`: without it a node still serves sessions and turns (the
    // store's), and a Redis outage would otherwise take every node out of its load balancer at
    // once. A node that has not yet heard the cluster's clients is not ready, though: it would
    // refuse their tools.
    bool ready = !c.state.client_relay || c.state.client_relay->ready();
    cluster["ready"] = ready;
    if (!ready) {
      cluster["waitingFor"] = clienttool::to_json(c.state.client_relay->awaited());
      healthy = false;
    }
    body["cluster"] = std::move(cluster);
  }
  body["healthy"] = healthy;
  co_return json_response(healthy ? http::status::ok : http::status::service_unavailable, body,
                          c.req);
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

// Whether the request's Accept-Encoding takes gzip (RFC 9110 12.5.3): listed, or "*", without
// "q=0".
bool accepts_gzip(const Request& req) {
  auto h = req.find(http::field::accept_encoding);
  if (h == req.end()) return false;
  // RFC 9110 12.5.3: an entry naming gzip wins over `*`; q=0 (0.0, 0.00, 0.000) refuses.
  // (Beast 1.81's ext_list gives a later entry the parameters of the one before it.)
  std::optional<bool> gzip, any;
  std::string_view rest = h->value();
  while (!rest.empty()) {
    auto comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    auto semicolon = item.find(';');
    std::string coding = ascii_lower(trim(item.substr(0, semicolon)));
    if (coding != "gzip" && coding != "*") continue;
    std::string params = semicolon == std::string_view::npos
                             ? std::string()
                             : ascii_lower(item.substr(semicolon + 1));
    std::erase(params, ' ');
    bool refused =
        params.starts_with("q=") && params.find_first_not_of("0.", 2) == std::string::npos;
    (coding == "gzip" ? gzip : any) = !refused;
  }
  return gzip.value_or(any.value_or(false));
}

// Files under /assets/ have content hashes in their names, so browsers may keep them for good;
// the page itself is revalidated on each load so a new build shows at once. Text goes gzipped to
// browsers that take it (about a third of the bytes), with its own ETag, as a representation of
// its own.
Response web_asset_response(const WebAsset& asset, const Request& req, bool immutable) {
  bool gzipped = !asset.gzip.empty() && accepts_gzip(req);
  std::string etag(asset.etag);
  if (gzipped) etag.insert(etag.size() - 1, "-gzip");
  bool fresh = etag_matches(req, etag);
  Response res{fresh ? http::status::not_modified : http::status::ok, req.version()};
  res.set(http::field::server, "switchboard/" SWITCHBOARD_VERSION);
  res.set(http::field::etag, etag);
  res.set(http::field::cache_control,
          immutable ? "public, max-age=31536000, immutable" : "no-cache");
  if (!asset.gzip.empty()) res.set(http::field::vary, "Accept-Encoding");
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
    if (gzipped) res.set(http::field::content_encoding, "gzip");
    res.body() = std::string(gzipped ? asset.gzip : asset.body);
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

// GET /doc: the OpenAPI document (api_doc.cpp), built once.
asio::awaitable<Reply> api_doc(Call& c) {
  co_return ok_text(c, api_document_text());
}

bool matches(const Route& route, const std::vector<std::string>& segments,
             std::vector<std::string>& params) {
  if (route.pattern.size() != segments.size()) return false;
  params.clear();
  for (std::size_t i = 0; i < segments.size(); ++i) {
    if (route.pattern[i].starts_with('{')) {
      params.push_back(segments[i]);
    } else if (route.pattern[i] != segments[i]) {
      return false;
    }
  }
  return true;
}

}  // namespace

// ---- the route table ------------------------------------------------------------------------

// Areas in the order they are matched; no pattern of one area matches a path of another.
const std::vector<Route>& routes() {
  static const std::vector<Route> table = [] {
    std::vector<Route> all = {
        {http::verb::get,
         {"health"},
         &health,
         {.id = "health",
          .summary = "Whether the server is up and its store answers, and its version",
          .answer = "Health",
          .error = "HealthOrError"}},
        // Where OpenCode's clients (the V2 SDK's global.health) ask the same.
        {http::verb::get,
         {"global", "health"},
         &health,
         {.id = "global.health",
          .summary = "Whether the server is up and its store answers, and its version "
                     "(OpenCode's path)",
          .answer = "Health",
          .error = "HealthOrError"}},
        {http::verb::get,
         {"doc"},
         &api_doc,
         {.id = "doc.get", .summary = "This OpenAPI 3.1 document", .answer = "OpenApiDocument"}},
    };
    for (const auto& area : {client_tool_routes(), revert_routes(), session_routes(), mcp_routes(),
                             chat_routes(), project_routes()})
      all.insert(all.end(), area.begin(), area.end());
    std::vector<Route> rest = {
        {http::verb::get,
         {"auth"},
         &auth_status,
         {.id = "auth.status",
          .summary = "Whether the server asks for a password, and whether this caller has it",
          .answer = "AuthStatus"}},
        {http::verb::post,
         {"auth"},
         &log_in,
         {.id = "auth.login",
          .summary = "Check the server password and set the cookie that admits this browser",
          .body = "LoginRequest",
          .answer = "LoginAnswer"}},
        {http::verb::get,
         {},
         &web_page,
         {.id = "web.page",
          .summary = "The web page",
          .statuses = "304 404",
          .media = "text/html"}},
        {http::verb::get,
         {"assets", "{file}"},
         &web_asset,
         {.id = "web.asset",
          .summary = "A file of the web page (content-hashed name, cached for good)",
          .statuses = "304 404",
          .media = "*/*"}},
    };
    all.insert(all.end(), rest.begin(), rest.end());
    return all;
  }();
  return table;
}

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
    Reply reply = co_await route.handler(call);
    if (reply && state.config.server.check_api_doc)
      if (auto wrong = check_exchange(route, req, *reply)) co_return std::move(*wrong);
    co_return reply;
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
