#pragma once
// The `write` tool (OpenCode's): creates or replaces a whole file, creating missing parent
// directories. Asks `edit` with the path (relative to the project when inside it) and shows
// the diff to the person deciding; publishes `file.edited` {file} on the bus when given one.
#include <memory>

#include "bus/event_bus.hpp"
#include "tool/tool.hpp"

namespace sb::tool {

ToolPtr make_write_tool(std::shared_ptr<bus::EventBus> bus = nullptr);

}  // namespace sb::tool
