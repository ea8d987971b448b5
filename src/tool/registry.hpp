#pragma once
// ToolRegistry (seed 004): built-in tools in their fixed order, then custom tools, then plugin
// tools (MCP servers'), then the client tools of the session. On an id collision the earlier tool
// wins. Not thread-safe: use from the server's executor only (the custom-tool loader registers on
// the main thread before the server's loop starts).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "clienttool/registry.hpp"
#include "tool/tool.hpp"

namespace sb::tool {

struct RegistryOptions {
  bool batch_tool = false;  // experimental.batch_tool
};

class ToolRegistry {
 public:
  ToolRegistry(std::shared_ptr<clienttool::ClientToolRegistry> client_tools,
               RegistryOptions options)
      : client_tools_(std::move(client_tools)), options_(options) {}

  // Built-in tools, in seed 004's order; called at start-up.
  void add_builtin(ToolPtr tool);
  // Custom tools; a tool with an existing custom id replaces it.
  void register_tool(ToolPtr tool);
  // The tools of one plugin source (an MCP server), replacing what it had; an empty list removes
  // them. Offered after the custom tools; the next step of every session sees the change.
  void set_plugin_tools(const std::string& source, std::vector<ToolPtr> tools);

  // Ids of the built-in and custom tools, in order, without duplicates: the tools of this
  // server (batch runs only these; plugin tools are external, seed 004).
  std::vector<std::string> ids() const;
  // What the model is offered in `session_id` with `provider_id`: built-ins, custom tools, then
  // the client tools registered for that session (or for every session).
  std::vector<ToolPtr> tools(const std::string& provider_id, const std::string& session_id) const;
  // One tool by id, as tools() would offer it; nullptr when unknown.
  ToolPtr find(const std::string& id, const std::string& session_id) const;

  const RegistryOptions& options() const { return options_; }
  const std::shared_ptr<clienttool::ClientToolRegistry>& client_tools() const {
    return client_tools_;
  }

 private:
  void merge();

  std::shared_ptr<clienttool::ClientToolRegistry> client_tools_;
  RegistryOptions options_;
  std::vector<ToolPtr> builtin_;
  std::vector<ToolPtr> custom_;
  std::map<std::string, std::vector<ToolPtr>, std::less<>> plugins_;  // by source, in name order
  // builtin_, custom_ then plugins_, collisions and the flagged-off batch tool left out: made when
  // either list changes (start-up, a custom tool's registration), read at every step and tool call.
  std::vector<ToolPtr> server_;
  std::size_t local_count_ = 0;  // how many of server_ are built-in or custom
};

// A call to a client tool as a session's tool call: the request goes to the client (or, with
// params.resume, a stored call is pending again), the turn's abort cancels it, its progress
// reaches ctx.metadata, ctx.waiting hears of it once it is pending, and an `interactive` call
// has the session await a person meanwhile. The client's error is the model's error.
boost::asio::awaitable<Result<ToolResult>> run_client_call(clienttool::ClientToolRegistry& registry,
                                                           clienttool::ExecuteParams params,
                                                           bool interactive, ToolContext& ctx);

// A client tool as the session processor runs it. It asks the `client_tools` permission, then
// runs the call (run_client_call) with the definition it was made from (no lookup, no second
// validation).
ToolPtr make_client_tool(std::shared_ptr<clienttool::ClientToolRegistry> registry,
                         clienttool::ClientToolRegistry::Definition definition);
// The definition a client tool was made from; null for every other tool.
const clienttool::ToolDefinition* client_definition(const Tool& tool);

}  // namespace sb::tool
