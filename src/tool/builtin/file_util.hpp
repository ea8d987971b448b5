#pragma once
// Helpers shared by the file tools (read, write, edit): reading and replacing whole files with
// errors a model can act on, path display, code point counts and a small line diff. Stateless.
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

#include "tool/tool.hpp"

namespace sb::tool::fsutil {

// How a path is shown to the model and in permission patterns: relative to the project
// directory when inside it ("src/main.cpp"), absolute otherwise.
std::string display_path(const ToolContext& ctx, const std::filesystem::path& path);

// An error for the model when the call was aborted (the turn was stopped while the tool waited
// for a permission, say); ok otherwise. Tools check it before they change anything.
Result<void> check_not_aborted(const ToolContext& ctx);

// The whole file. Errors (NotFound, Forbidden, TooLarge, Internal) name the path and say why.
Result<std::string> read_file(const std::filesystem::path& path, std::size_t max_bytes = 64u << 20);

// Replaces (or creates) the file with `content`, creating missing parent directories. The new
// content goes to a temporary file beside the target that is then renamed over it, so a failed
// write (full disk) leaves the old file intact; the old file's mode bits are kept, and a symlink
// keeps pointing at the file it pointed at. Falls back to writing in place when the directory
// does not let us create the temporary file.
Result<void> replace_file(const std::filesystem::path& path, std::string_view content);

// The number of code points in valid UTF-8 `text`.
std::size_t count_code_points(std::string_view text);

// The first `n` code points of valid UTF-8 `text`.
std::string_view first_code_points(std::string_view text, std::size_t n);

struct LineDiff {
  std::string patch;  // unified diff ("--- path", "+++ path", "@@ -a,b +c,d @@" hunks); "" if equal
  std::size_t additions = 0;  // lines added
  std::size_t deletions = 0;  // lines removed
};

// A unified diff of two texts, line by line (Myers' algorithm), with `context` unchanged lines
// around each change. A last line without a newline is marked "\ No newline at end of file".
// Very different texts (more than a few thousand changed lines) come out as one hunk that
// removes the old lines and adds the new ones: still correct, only less minimal.
LineDiff unified_diff(std::string_view path, std::string_view before, std::string_view after,
                      std::size_t context = 3);

}  // namespace sb::tool::fsutil
