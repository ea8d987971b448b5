#pragma once
// Builds the server's components from the configuration: the store, the event bus, the client
// tool registry, permissions, providers, agents, the tool registry with the built-in tools, and
// the session service. main() and the in-process tests use it.
#include <boost/asio/io_context.hpp>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/http.hpp"

namespace sb::app {

struct Paths {
  std::filesystem::path data_dir;   // SQLite database, truncated outputs
  std::filesystem::path directory;  // the project directory tools work in
};

// The default data directory: $XDG_DATA_HOME/switchboard or ~/.local/share/switchboard.
std::filesystem::path default_data_dir();

struct Composed {
  std::unique_ptr<server::ServerState> state;
  std::vector<std::string> notes;     // what was set up, for the start-up log (info)
  std::vector<std::string> warnings;  // what looks wrong but does not stop start-up
};

Result<Composed> compose(boost::asio::io_context& io, config::Config config, Paths paths,
                         const std::function<std::string(const std::string&)>& env);

}  // namespace sb::app
