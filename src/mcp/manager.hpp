#pragma once
// The MCP servers of the config (and those added at run time): each is connected in the
// background (start-up never waits for one), its tools are offered as plugin tools of the
// ToolRegistry while it is connected, and its status is kept for GET /mcp and published on the
// bus ("mcp.status", and "mcp.tools.changed" when its list changes). A server that exits or
// breaks its stream is `failed` with the reason; its tools leave the list and its calls in flight
// end with an error naming it. Reconnecting is by route (connect()), and automatic for a remote
// server (5 tries, 1 to 16 s apart).
//
// Not thread-safe: use from the server's executor only.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bus/event_bus.hpp"
#include "mcp/client.hpp"
#include "mcp/config.hpp"
#include "mcp/tool.hpp"
#include "question/service.hpp"
#include "tool/registry.hpp"

namespace sb::mcp {

enum class State { Connecting, Connected, Failed, Disabled };
std::string_view state_name(State state);

struct ServerStatus {
  State state = State::Disabled;
  std::string error;               // Failed: why
  std::vector<std::string> tools;  // Connected: its tool ids
  std::string protocol_version;    // Connected: the revision spoken
};

json::object to_json(const ServerStatus& status);

struct ManagerDeps {
  boost::asio::any_io_executor executor;
  std::shared_ptr<bus::EventBus> bus;
  std::shared_ptr<tool::ToolRegistry> tools;
  std::filesystem::path directory;  // the project: local servers' working directory, roots/list
  std::filesystem::path data_dir;   // where their process groups are written down
  // Asks the person what a server's elicitation/create wants to know; null: not offered.
  std::shared_ptr<question::QuestionService> questions;
};

class Manager : public std::enable_shared_from_this<Manager> {
 public:
  static std::shared_ptr<Manager> create(ManagerDeps deps);
  ~Manager();

  // Adds each server and starts connecting the enabled ones; returns at once.
  void start(std::vector<ServerConfig> servers);
  // Adds or replaces one server (its old connection ends first); connects it when enabled.
  void add(ServerConfig server);
  // NotFound for an unknown name. connect() of a connected server reconnects it.
  Result<void> connect(const std::string& name);
  Result<void> disconnect(const std::string& name);
  std::map<std::string, ServerStatus> status() const;
  // Every connection ends; nothing reconnects.
  void shutdown();

 private:
  struct Server {
    ServerConfig config;
    ServerStatus status;
    std::shared_ptr<Client> client;
    std::uint64_t generation = 0;  // bumped by every (re)connect and disconnect
    int retries = 0;               // automatic reconnections since it last connected
    bool refreshing = false;       // a tools/list is under way
    bool refresh_again = false;    // the list changed again meanwhile
  };

  explicit Manager(ManagerDeps deps) : deps_(std::move(deps)) {}
  void begin_connect(Server& server);
  boost::asio::awaitable<void> run_connect(std::string name, std::uint64_t generation);
  // Reads its tools again (coalesced: at most one tools/list at a time per server).
  void request_refresh(const std::string& name, std::uint64_t generation);
  boost::asio::awaitable<void> refresh_tools(std::string name, std::uint64_t generation);
  // Failed with `why`; a remote server is tried again a few times.
  void fail(const std::string& name, Server& server, const std::string& why);
  void end_connection(Server& server);
  void set_status(const std::string& name, Server& server, ServerStatus status);
  void publish_tools(const std::string& name, std::vector<tool::ToolPtr> tools);
  Server* find(const std::string& name, std::uint64_t generation);

  // A server's elicitation/create during a call: a question to that call's session.
  boost::asio::awaitable<Result<json::object>> elicit(json::object params, const std::string& call);

  ManagerDeps deps_;
  std::shared_ptr<ActiveCalls> calls_ = std::make_shared<ActiveCalls>();
  std::map<std::string, Server, std::less<>> servers_;
  bool shut_down_ = false;
};

}  // namespace sb::mcp
