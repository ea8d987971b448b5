#pragma once
// The stdio transport: the MCP server is a child process that reads newline-delimited JSON-RPC
// on its stdin and writes it on its stdout; its stderr goes to our log with its name. It runs in
// its own process group (written down in the data directory, so a server killed with SIGKILL
// has the next start stop it) and dies with us (PR_SET_PDEATHSIG, tool/process_spawn.hpp).
//
// A line that is not a JSON-RPC message is logged and skipped (a server's stray print must not
// end it); a line longer than max_message_bytes, or more than max_queued_bytes waiting for the
// child to read its input, ends the channel with a reason that says so.
#include <boost/asio/any_io_executor.hpp>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mcp/transport.hpp"

namespace sb::mcp {

struct StdioOptions {
  std::string name;                  // the server's name, for log lines
  std::vector<std::string> command;  // argv; argv[0] is looked up on PATH
  std::vector<std::pair<std::string, std::string>> environment;  // on top of ours
  std::filesystem::path cwd;                                     // the project directory
  std::filesystem::path group_record_dir;                        // empty: not written down
  std::size_t max_message_bytes = 16 * 1024 * 1024;
  std::size_t max_queued_bytes = 16 * 1024 * 1024;
  // After closing its input: how long the server has to exit before SIGTERM, and again before
  // SIGKILL, to its process group.
  std::chrono::milliseconds exit_grace{1000};
};

std::unique_ptr<Transport> make_stdio_transport(boost::asio::any_io_executor executor,
                                                StdioOptions options);

}  // namespace sb::mcp
