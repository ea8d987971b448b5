#pragma once
// An MCP server's tool as the session processor runs it: id `{server}_{tool}`, its input schema
// checked as a client tool's is, the tool id as its permission (so `{"fs_*": "ask"}` works),
// progress into the tool part's metadata, and the turn's abort sent to the server as
// notifications/cancelled.
#include <map>
#include <memory>
#include <string>

#include "mcp/client.hpp"
#include "tool/tool.hpp"

namespace sb::mcp {

// The calls of MCP tools in flight, by call id: what a server asks of a person during a call
// (elicitation) goes to that call's session.
using ActiveCalls = std::map<std::string, tool::ToolContext*, std::less<>>;

// `{server}_{tool}` with every character outside [A-Za-z0-9_-] replaced by '_' (as OpenCode).
std::string tool_id(std::string_view server, std::string_view tool);

// A CallToolResult as the model sees it: text content joined, images and audio as attachments
// (data URLs), resources named by their URI, structuredContent as JSON when there is no text;
// isError becomes an error with the server's text.
Result<tool::ToolResult> to_tool_result(const json::object& result, const std::string& server);

// Null and an error naming the tool when its input schema is not one a client tool could have.
Result<tool::ToolPtr> make_tool(const std::string& server, const ToolInfo& info,
                                std::weak_ptr<Client> client,
                                std::shared_ptr<ActiveCalls> calls = {});

}  // namespace sb::mcp
