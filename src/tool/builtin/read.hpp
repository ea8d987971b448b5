#pragma once
// The `read` tool (OpenCode's): a text file with numbered lines ("00001| text") inside
// <file>...</file>, a window of it chosen by offset (0-based line) and limit, and a note telling
// the model how to read on. Images and PDFs come back as attachments (base64 data: URLs).
// Paths outside the project ask `external_directory`; every read asks `read` with the path.
#include <cstddef>

#include "tool/tool.hpp"

namespace sb::tool {

struct ReadOptions {
  std::size_t default_limit = 2000;   // lines per call when the model gives no limit
  std::size_t max_line_chars = 2000;  // longer lines are cut and end with "..."
  std::size_t max_bytes = 50 * 1024;  // of numbered output per call; the rest needs an offset
  std::size_t max_attachment_bytes = 5u << 20;  // images/PDFs larger than this are refused
};

ToolPtr make_read_tool(ReadOptions options = {});

}  // namespace sb::tool
