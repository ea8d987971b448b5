#pragma once
// The connected clients' tools served over MCP (/client-tools/mcp): what an MCP host sees of the
// client-tool registry, in both eras of the protocol. The JSON-RPC side only; the HTTP edge
// (server/routes_mcp.cpp) carries it over Streamable HTTP.
//
// - tools: the tools the caller may see: the open ones (registered for every session), or, for a
//   caller that names a client (and proves it with the client's token), that client's own. A
//   tool's MCP name is its full client-tool id (client_{clientID}_{name}).
// - tools/call runs as POST /client-tools/execute does (the same registry call: timeouts,
//   cancellation reaching the client, exactly one result); the client's answer becomes a
//   CallToolResult (output as text, image attachments as image content, its error as isError).
#include <optional>
#include <string>

#include "clienttool/registry.hpp"
#include "mcp/jsonrpc.hpp"

namespace sb::mcp {

// The revisions this server speaks, newest first.
inline constexpr std::string_view kServedVersions[] = {"2026-07-28", "2025-11-25", "2025-06-18",
                                                       "2025-03-26"};
bool served_version(std::string_view version);

// initialize (legacy): the version asked for when we speak it, else our newest legacy one.
json::object initialize_result(const json::object& params);
// server/discover (2026-07-28).
json::object discover_result();
// tools/list.
json::object list_result(const clienttool::ClientToolRegistry& registry,
                         const std::optional<std::string>& client_id, bool modern);
// tools/call's params as an execution; InvalidRequest (-32602) when they are not one, NotFound
// for a tool the caller may not see.
Result<clienttool::ExecuteParams> call_params(const clienttool::ClientToolRegistry& registry,
                                              const json::object& params,
                                              const std::optional<std::string>& client_id);
// How the call ended, as a CallToolResult (an error of the server's own, a timeout say, too:
// the host's model reads it as the tool's failure).
json::object call_result(const clienttool::ExecuteOutcome& outcome, bool modern);
// A client's progress report as notifications/progress (`n`: the how-many-th report).
Message progress_notification(const json::value& token, int n, const clienttool::Progress& p);

}  // namespace sb::mcp
