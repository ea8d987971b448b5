#pragma once
// The `edit` tool (OpenCode's): replaces an exact piece of a file (oldString) by another
// (newString), once or everywhere (replaceAll). An empty oldString creates a new file. Line
// endings follow the file (a CRLF file keeps CRLF whatever the model sends). Asks `edit` with
// the path and the diff; the result's metadata has the diff and the added/removed line counts.
// Publishes `file.edited` {file} on the bus when given one.
#include <memory>
#include <string>
#include <string_view>

#include "bus/event_bus.hpp"
#include "tool/tool.hpp"
#include "util/error.hpp"

namespace sb::tool {

ToolPtr make_edit_tool(std::shared_ptr<bus::EventBus> bus = nullptr);

struct Replacement {
  std::string content;    // the new text
  std::size_t count = 0;  // how many places changed
};

// The pure part of the edit tool: `content` with `old_string` replaced by `new_string`.
// `old_string` and `new_string` are first given the file's line ending (CRLF when the content
// has any), so a model that sends "\n" can still edit a CRLF file. Errors (InvalidRequest) are
// the tool's messages: not found, several matches without replace_all, identical strings.
Result<Replacement> replace_exact(std::string_view content, std::string_view old_string,
                                  std::string_view new_string, bool replace_all);

}  // namespace sb::tool
