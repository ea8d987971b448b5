#pragma once
// Custom tools (seed 004's config-directory tools, as executables instead of JS modules): every
// executable file in a `tool/` or `tools/` directory of ~/.config/switchboard/ or of the
// project's .switchboard/ provides tools. The protocol is in docs/custom-tools.md:
//
//   <file> --describe        prints {"description", "parameters"} (one tool, id = file name
//                            without extension) or {"<name>": {"description", "parameters"},
//                            ...} (id = "<file>_<name>"; the name "default" gives id = file)
//   <file> <name>            runs one call: stdin {"args", "sessionID", "messageID", "callID",
//                            "agent", "directory"}, stdout {"output", "title"?, "metadata"?}
//                            or plain text; a non-zero exit is an error (stderr is the message)
//
// A call runs in the project directory with a timeout (120 s); timeout and abort kill its
// process group (tool/process.hpp). Like seed 004's plugin tools, the title is empty unless the
// tool gives one, and the output is truncated as every tool output is (the session processor
// applies truncation to all results).
//
// Loading never fails: a file that cannot be described, prints bad JSON, has a schema that does
// not compile or a name that is not a valid tool id is skipped with a warning for the log.
#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "tool/tool.hpp"
#include "util/error.hpp"
#include "util/json.hpp"

namespace sb::tool {

struct CustomToolOptions {
  std::chrono::milliseconds describe_timeout{5000};  // for `<file> --describe`
  std::chrono::milliseconds call_timeout{120000};    // for one call
  std::chrono::milliseconds kill_grace{500};         // SIGTERM to SIGKILL on timeout or abort
  std::size_t max_output = 10 * 1024 * 1024;         // bytes of stdout kept (memory bound)
};

// One tool a file provides.
struct CustomToolDefinition {
  std::string id;           // what the model calls: "<file>" or "<file>_<name>"
  std::string name;         // argv[1] of a call: "default" or the definition's key
  std::string description;  // for the model
  json::object parameters;  // JSON Schema of the input, an object schema that compiles
  std::shared_ptr<const clienttool::CompiledSchema> schema;  // `parameters`, compiled
};

struct CustomToolLoad {
  std::vector<ToolPtr> tools;                // in directory order, then file name order
  std::vector<std::filesystem::path> files;  // the file each of `tools` runs
  std::vector<std::string> warnings;         // one line each, naming the file
};

// The directories to scan, in order (later ones override earlier ones on an id collision):
// <user_config>/tool, <user_config>/tools, <project>/.switchboard/tool, .../tools.
std::vector<std::filesystem::path> custom_tool_directories(
    const std::filesystem::path& user_config_dir, const std::filesystem::path& project_dir);

// Describes every executable in `dirs` (concurrently, on the caller's executor) and returns
// their tools. Directories that do not exist are skipped silently. When two files define the
// same id, the later one wins (a project's tool replaces a user's) and a warning says so.
boost::asio::awaitable<CustomToolLoad> load_custom_tools(std::vector<std::filesystem::path> dirs,
                                                         CustomToolOptions options = {});

// The same on a private io_context, blocking the calling thread: for start-up, before the
// server's io_context runs. Bounded by describe_timeout (the files are described in parallel).
CustomToolLoad load_custom_tools_sync(std::vector<std::filesystem::path> dirs,
                                      CustomToolOptions options = {});

// Parses what `<file> --describe` printed, for the file whose name without extension is
// `basename`. Definitions that are wrong are skipped, each with a warning appended to
// `warnings`; an error when the document as a whole is unusable (not a JSON object, no tools).
Result<std::vector<CustomToolDefinition>> parse_custom_tool_description(
    std::string_view basename, std::string_view text, std::vector<std::string>& warnings);

// A tool backed by `executable`, as load_custom_tools makes them.
ToolPtr make_custom_tool(std::filesystem::path executable, CustomToolDefinition definition,
                         CustomToolOptions options = {});

// Whether `id` can be a tool id: 1 to 64 of [A-Za-z0-9_-] (what model APIs accept).
bool valid_tool_id(std::string_view id);

}  // namespace sb::tool
