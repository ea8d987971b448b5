#pragma once
// The `invalid` tool: where the processor routes a call whose tool does not exist or whose
// arguments fail the schema (see tool/arguments.hpp), so that the model gets a result telling it
// what was wrong and how to fix it, instead of the turn failing. Never offered to the model as a
// tool of its own choosing (OpenCode's description is "Do not use").
#include <string>
#include <string_view>
#include <vector>

#include "tool/tool.hpp"

namespace sb::tool {

ToolPtr make_invalid_tool();

// The `error` for a call to a tool that does not exist: names it, suggests the available tool
// it most likely meant (a different letter case, or a close spelling), and lists the others.
//   unknown tool "Read": did you mean "read"? Available tools: bash, edit, read
std::string unknown_tool_error(std::string_view name, const std::vector<std::string>& available);

}  // namespace sb::tool
