#pragma once
// The `batch` tool (OpenCode's, behind experimental.batch_tool; the ToolRegistry hides it unless
// the flag is set): runs 1 to 25 calls of other tools concurrently in one step and returns all of
// their results, in the order given.
//
// Each call is resolved in the ToolRegistry (built-in and custom tools only: client tools and
// unknown ids are refused, as are nested `batch` calls), its parameters go through
// prepare_arguments, and it runs with a ToolContext derived from the batch's: same session,
// message, agent, directories, abort signal, permission asks and awaiting-input reports; call id
// "<batch call id>_<n>"
// (n from 1). A call that fails is reported as failed; the others still run and report.
//
// The output has one section per call; the metadata lists each call's status and title, and is
// updated (ctx.metadata) as calls start and end. Attachments of every call are passed on.
// The processor truncates the batch's output like any tool's (2000 lines / 50 KB); so that one
// large result cannot push the others out of view, each call's output is first cut to an equal
// share of that budget, its full text saved under the data directory's truncate/ as the
// processor would save it.
#include <memory>

#include "tool/registry.hpp"
#include "tool/tool.hpp"

namespace sb::tool {

inline constexpr std::size_t kMaxBatchCalls = 25;

// Weak, because the registry owns the batch tool: a strong pointer would be a cycle.
ToolPtr make_batch_tool(std::weak_ptr<ToolRegistry> registry);

}  // namespace sb::tool
