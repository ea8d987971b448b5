#pragma once
// The `glob` tool (OpenCode's): finds files by name pattern under a directory, honouring
// .gitignore (the file list comes from ripgrep), most recently modified first.
#include <optional>
#include <string>
#include <string_view>

#include "tool/builtin/ripgrep.hpp"
#include "tool/tool.hpp"

namespace sb::tool {

inline constexpr std::size_t kGlobFileLimit = 100;  // paths shown at most

ToolPtr make_glob_tool(SearchOptions options = {});

// Glob patterns as .gitignore and ripgrep read them: `*` and `?` stay within one path
// component, `**` spans components (`**/` also matches no directory at all), `[abc]`, `[a-z]`
// and `[!a]` / `[^a]` match one character, `{a,b}` is either alternative (nestable), and `\`
// escapes. A pattern without a slash matches the file name at any depth ("*.ts" finds
// "src/a/b.ts"); one with a slash matches the whole relative path ("src/*.ts" does not).
// Case-sensitive. Pure functions; thread-safe.
bool glob_match(std::string_view pattern, std::string_view relative_path);
// Why `pattern` is not a valid glob (an unclosed `[` or `{`), or nullopt when it is.
std::optional<std::string> glob_error(std::string_view pattern);

}  // namespace sb::tool
