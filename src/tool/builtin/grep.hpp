#pragma once
// The `grep` tool (OpenCode's): searches file contents with a regular expression through
// ripgrep, honouring .gitignore; matches grouped by file, most recently modified files first.
#include "tool/builtin/ripgrep.hpp"
#include "tool/tool.hpp"

namespace sb::tool {

inline constexpr std::size_t kGrepMatchLimit = 100;  // matches shown at most

ToolPtr make_grep_tool(SearchOptions options = {});

}  // namespace sb::tool
