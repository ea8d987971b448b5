#pragma once
// The `bash` tool (OpenCode's): runs a shell command in the project directory (or `workdir`)
// with a timeout, and gives the model its interleaved stdout and stderr and its exit code. The
// command's process group is killed on timeout or abort.
#include <chrono>
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "tool/tool.hpp"

namespace sb::tool {

struct BashOptions {
  std::filesystem::path shell;                        // empty: /bin/bash, else /bin/sh
  std::chrono::milliseconds default_timeout{120000};  // when the call gives none (2 min)
  std::chrono::milliseconds max_timeout{600000};      // a larger `timeout` is lowered to this
  std::size_t max_output = 10 * 1024 * 1024;  // memory cap; the processor truncates for the model
  std::size_t metadata_output = 30000;        // bytes of output in metadata, for live display
  std::chrono::milliseconds progress_interval{100};  // at most one progress update per interval
  std::chrono::milliseconds kill_grace{500};         // SIGTERM to SIGKILL on timeout or abort
};

ToolPtr make_bash_tool(BashOptions options = {});

// What the `bash` permission is asked for. Each simple command of a list or pipeline
// ("git add . && git commit" → "git add .", "git commit") is a pattern of its own, so that a
// rule such as {"git *": "allow"} cannot let "git status; rm -rf ~" through, and a deny rule
// for "rm *" catches "cd x && rm -rf y". `always` holds what "always allow" would approve: the
// command's first word + " *" ("git *"), or the exact simple command when it contains a command
// substitution ($(...), `...`, <(...)), whose inside would otherwise ride along.
struct BashPermission {
  std::vector<std::string> patterns;
  std::vector<std::string> always;
};
BashPermission bash_permission(std::string_view command);

}  // namespace sb::tool
