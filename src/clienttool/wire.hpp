#pragma once
// JSON <-> client-tool types, shared by the HTTP routes and the WebSocket handler so both accept
// and produce exactly the same shapes.
#include <optional>
#include <string>
#include <vector>

#include "clienttool/types.hpp"

namespace sb::clienttool {

// Client ids and tool names: 1-128 letters, digits, '_' or '-'.
bool valid_name(std::string_view name);

// `tools` as sent to /client-tools/register or a WebSocket "register": an array of
// {id, description, parameters}. Errors name the element ("tools[2].description must be a string").
Result<std::vector<ToolSpec>> parse_tool_specs(const json::value* tools, std::string_view path);
// A spec's optional fields as both shapes of tools write them: description, interactive.
Result<void> parse_spec_options(const json::object& tool, std::string_view at, ToolSpec& spec);

// What one client may register (clientTools.maxToolsPerClient, maxDescriptionBytes,
// maxSchemaBytes): a model's context and a server's memory are not for one client to fill.
struct SpecLimits {
  std::size_t max_tools_per_client = 128;
  std::size_t max_description_bytes = 8192;
  std::size_t max_schema_bytes = 65536;  // the schema serialized as JSON
};

// TooLarge when a spec's description or schema is over its limit, or when the client would own
// more tools than allowed; `registered` are the names the client has now (re-registering one
// replaces it and does not count twice). Errors name the element and the config key.
Result<void> check_spec_limits(const std::vector<ToolSpec>& specs,
                               const std::vector<std::string>& registered, const SpecLimits& limits,
                               std::string_view path);

// Optional array of strings (toolIDs of unregister). nullopt when absent.
Result<std::optional<std::vector<std::string>>> parse_string_list(const json::object& obj,
                                                                  std::string_view key);

// A result body: {result: {status, ...}} or the same fields flat beside requestID.
Result<ToolResponse> parse_tool_response(const json::object& body);

json::object to_json(const ToolDefinition& def);  // {id, description, parameters}
// {"type":"client-tool-request","requestID","sessionID","messageID","callID","tool","input"},
// serialized without building a tree: what every delivery sends.
std::string serialize(const ExecutionRequest& req, const json::object& input);
// The same as a tree (the bus event), parsed from serialize()'s text.
json::object to_json(const ExecutionRequest& req, const json::object& input);
// {"status":"success",title,output,metadata[,attachments]} | {"status":"error",error}: the
// execute route's answer.
std::string serialize(const ToolResponse& res);
json::array to_json(const std::vector<std::string>& strings);

// A waiting call as it is stored ({requestID, clientID, tool, sessionID, messageID, callID,
// interactive, seq, timeoutMs, deadline, hardDeadline}) and read back; InvalidRequest naming
// what a stored one lacks.
json::object to_json(const WaitingCall& call);
Result<WaitingCall> waiting_call_from_json(const json::object& o);

}  // namespace sb::clienttool
