// switchboard: the agent server's command line. Thin by design: parse arguments, load the
// configuration, run the server until SIGINT/SIGTERM.
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>

#include "app/compose.hpp"
#include "config/config.hpp"
#include "server/http_server.hpp"
#include "util/log.hpp"

namespace {

// An io_context whose pending handlers can be destroyed before the objects they refer to: Asio
// does it only in its destructor, and the io_context is the first object main() makes and so
// the last it destroys.
class IoContext : public boost::asio::io_context {
 public:
  using boost::asio::execution_context::shutdown;
  using io_context::io_context;
};

constexpr std::string_view kUsage = R"(usage: switchboard serve [options]

  --port N          port to listen on (default 4096; 0 picks a free one)
  --hostname H      address to listen on (default 127.0.0.1)
  --config FILE     configuration merged over ~/.config/switchboard/config.json
                    and ./.switchboard/config.json
  --data-dir DIR    where sessions are stored (default ~/.local/share/switchboard)
  --directory DIR   the project directory tools work in (default: the current one)
  --log-level L     debug | info | warn | error (default info)
  --allow-remote    listen on a non-loopback address without a password
                    (server.allowRemote); set server.password or
                    SWITCHBOARD_SERVER_PASSWORD instead where you can

  switchboard --version    print the version
)";

struct Args {
  std::optional<std::uint16_t> port;
  std::optional<std::string> hostname;
  std::optional<std::string> config;
  std::optional<std::string> data_dir;
  std::optional<std::string> directory;
  bool allow_remote = false;
  sb::log::Level level = sb::log::Level::Info;
};

int usage_error(const std::string& message) {
  std::cerr << "switchboard: " << message << "\n\n" << kUsage;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string_view> argv_list(argv + 1, argv + argc);
  if (argv_list.empty()) return usage_error("missing command");
  if (argv_list[0] == "--version" || argv_list[0] == "version") {
    std::cout << "switchboard " << SWITCHBOARD_VERSION << "\n";
    return 0;
  }
  if (argv_list[0] == "--help" || argv_list[0] == "-h" || argv_list[0] == "help") {
    std::cout << kUsage;
    return 0;
  }
  if (argv_list[0] != "serve")
    return usage_error("unknown command \"" + std::string(argv_list[0]) + "\"");

  Args args;
  for (std::size_t i = 1; i < argv_list.size(); ++i) {
    std::string_view flag = argv_list[i];
    auto value = [&]() -> std::optional<std::string> {
      if (i + 1 >= argv_list.size()) return std::nullopt;
      return std::string(argv_list[++i]);
    };
    if (flag == "--help" || flag == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (flag == "--allow-remote") {
      args.allow_remote = true;
      continue;
    }
    auto v = value();
    if (!v) return usage_error(std::string(flag) + " needs a value");
    if (flag == "--port") {
      unsigned port = 0;
      auto [ptr, ec] = std::from_chars(v->data(), v->data() + v->size(), port);
      if (ec != std::errc{} || ptr != v->data() + v->size() || port > 65535)
        return usage_error("--port must be a number from 0 to 65535, got \"" + *v + "\"");
      args.port = static_cast<std::uint16_t>(port);
    } else if (flag == "--hostname") {
      args.hostname = *v;
    } else if (flag == "--config") {
      args.config = *v;
    } else if (flag == "--data-dir") {
      args.data_dir = *v;
    } else if (flag == "--directory") {
      args.directory = *v;
    } else if (flag == "--log-level") {
      if (*v == "debug")
        args.level = sb::log::Level::Debug;
      else if (*v == "info")
        args.level = sb::log::Level::Info;
      else if (*v == "warn")
        args.level = sb::log::Level::Warn;
      else if (*v == "error")
        args.level = sb::log::Level::Error;
      else
        return usage_error("--log-level must be debug, info, warn or error");
    } else {
      return usage_error("unknown option " + std::string(flag));
    }
  }
  sb::log::set_level(args.level);

  sb::config::LoadOptions load;
  if (args.config) load.explicit_file = *args.config;
  auto cfg = sb::config::load(load);
  if (!cfg) {
    std::cerr << "switchboard: " << cfg.error().message << "\n";
    return 1;
  }
  for (const auto& w : cfg->warnings)
    sb::log::warn("config: ", w);
  for (const auto& s : cfg->sources)
    sb::log::info("config: read ", s);
  if (args.port) cfg->server.port = *args.port;
  if (args.hostname) cfg->server.hostname = *args.hostname;
  if (args.allow_remote) cfg->server.allow_remote = true;
  if (const char* password = std::getenv("SWITCHBOARD_SERVER_PASSWORD"); password && *password)
    cfg->server.password = password;
  if (const char* url = std::getenv("SWITCHBOARD_DATABASE_URL"); url && *url) {
    cfg->storage.type = sb::config::StorageOptions::Type::Postgres;
    cfg->storage.url = url;
  }
  if (const char* url = std::getenv("SWITCHBOARD_REDIS_URL"); url && *url) cfg->cluster.redis = url;
  if (const char* node = std::getenv("SWITCHBOARD_NODE_ID"); node && *node)
    cfg->cluster.node_id = node;
  if (const char* check = std::getenv("SWITCHBOARD_CHECK_API_DOC"); check && *check == '1')
    cfg->server.check_api_doc = true;

  sb::app::Paths paths;
  std::error_code ec;
  // Absolute: paths below it (saved tool outputs) are given to the model, whose tools resolve a
  // relative path against the project directory, not the server's working directory.
  paths.data_dir = std::filesystem::absolute(
      args.data_dir ? std::filesystem::path(*args.data_dir) : sb::app::default_data_dir(), ec);
  if (ec) {
    std::cerr << "switchboard: cannot use the data directory: " << ec.message() << "\n";
    return 1;
  }
  paths.directory = std::filesystem::absolute(
      args.directory ? std::filesystem::path(*args.directory) : std::filesystem::current_path(),
      ec);
  if (ec || !std::filesystem::is_directory(paths.directory)) {
    std::cerr << "switchboard: the project directory " << paths.directory << " does not exist\n";
    return 1;
  }

  IoContext io(1);
  auto composed = sb::app::compose(io, std::move(*cfg), paths, [](const std::string& name) {
    const char* v = std::getenv(name.c_str());
    return std::string(v ? v : "");
  });
  if (!composed) {
    std::cerr << "switchboard: " << composed.error().message << "\n";
    return 1;
  }
  for (const auto& note : composed->notes)
    sb::log::info(note);
  for (const auto& warning : composed->warnings)
    sb::log::warn(warning);
  sb::server::HttpServer server(io, std::move(composed->state));
  auto endpoint = server.start();
  if (!endpoint) {
    std::cerr << "switchboard: " << endpoint.error().message << "\n";
    return 1;
  }
  std::string host = endpoint->address().is_v6() ? "[" + endpoint->address().to_string() + "]"
                                                 : endpoint->address().to_string();
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  boost::asio::steady_timer deadline(io);
  bool stopping = false;
  std::function<void(boost::system::error_code, int)> on_signal = [&](boost::system::error_code ec,
                                                                      int signo) {
    if (ec) return;
    if (stopping) {
      sb::log::warn("second signal: exiting now");
      io.stop();
      return;
    }
    stopping = true;
    sb::log::info("received ", signo == SIGINT ? "SIGINT" : "SIGTERM", ", shutting down");
    server.shutdown();
    // Connections get a few seconds to finish what they are writing.
    deadline.expires_after(std::chrono::seconds(5));
    deadline.async_wait([&](boost::system::error_code e) {
      if (e) return;
      sb::log::warn("shutdown took too long: closing the remaining connections");
      io.stop();
    });
    signals.async_wait(on_signal);
    // Once every connection has ended, nothing but these two waits is left: cancel them
    // and run() returns.
    server.when_drained([&] {
      signals.cancel();
      deadline.cancel();
    });
  };
  signals.async_wait(on_signal);
  // Said once SIGTERM and SIGINT are handled: whoever waits for this line (a supervisor, a test)
  // may stop the server at once and gets a clean shutdown, not a kill by the signal.
  sb::log::info("switchboard ", SWITCHBOARD_VERSION, " listening on http://", host, ":",
                endpoint->port());

  io.run();
  // A forced stop (a second signal, or connections still open at the deadline) leaves
  // connections' coroutines suspended, and their frames refer to the server's state. Destroy
  // them now, while the server exists; ~io_context would do it after `server` is gone.
  io.shutdown();
  sb::log::info("stopped");
  return 0;
}
