#pragma once
// The `list` tool (OpenCode's ls): the files under a directory as an indented tree, honouring
// .gitignore and skipping directories that are rarely worth reading (node_modules, .git,
// build output, virtual environments, caches).
#include <string_view>

#include "tool/builtin/ripgrep.hpp"
#include "tool/tool.hpp"

namespace sb::tool {

inline constexpr std::size_t kListFileLimit = 100;  // files shown at most

// Directory names skipped unless the call lists one of them directly.
inline constexpr std::string_view kListDefaultIgnores[] = {
    "node_modules", "__pycache__", ".git",     "dist",  "build",   "target",
    "vendor",       "bin",         "obj",      ".idea", ".vscode", ".zig-cache",
    "zig-out",      ".coverage",   "coverage", "tmp",   "temp",    ".cache",
    "cache",        "logs",        ".venv",    "venv",  "env",
};

ToolPtr make_list_tool(SearchOptions options = {});

}  // namespace sb::tool
