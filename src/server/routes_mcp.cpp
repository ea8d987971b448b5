// The MCP servers' routes (their list: mcp_routes(), in route.hpp): their status, adding one at
// run time, connecting and disconnecting.
#include <cstdlib>

#include "mcp/config.hpp"
#include "server/route.hpp"

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

}  // namespace

std::vector<Route> mcp_routes() {
  return {
      {http::verb::get, {"mcp"}, &list_servers},
      {http::verb::post, {"mcp"}, &add_server},
      {http::verb::post, {"mcp", "{}", "connect"}, &connect_server},
      {http::verb::post, {"mcp", "{}", "disconnect"}, &disconnect_server},
  };
}

}  // namespace sb::server
