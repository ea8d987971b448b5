#include "mcp/manager.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "mcp/elicitation.hpp"
#include "mcp/http_transport.hpp"
#include "mcp/stdio_transport.hpp"
#include "mcp/tool.hpp"
#include "tool/process_groups.hpp"
#include "util/log.hpp"

namespace sb::mcp {

namespace asio = boost::asio;

namespace {
// Automatic reconnections of a remote server after it failed, 1, 2, 4, 8 and 16 s apart.
constexpr int kRemoteRetries = 5;
}  // namespace

std::string_view state_name(State state) {
  switch (state) {
    case State::Connecting:
      return "connecting";
    case State::Connected:
      return "connected";
    case State::Failed:
      return "failed";
    case State::Disabled:
      return "disabled";
  }
  return "failed";
}

json::object to_json(const ServerStatus& status) {
  json::object out{{"status", state_name(status.state)}};
  if (!status.error.empty()) out["error"] = status.error;
  json::array tools;
  for (const auto& id : status.tools)
    tools.emplace_back(id);
  out["tools"] = std::move(tools);
  if (!status.protocol_version.empty()) out["protocolVersion"] = status.protocol_version;
  return out;
}

std::shared_ptr<Manager> Manager::create(ManagerDeps deps) {
  return std::shared_ptr<Manager>(new Manager(std::move(deps)));
}

Manager::~Manager() {
  shutdown();
}

void Manager::start(std::vector<ServerConfig> servers) {
  for (auto& s : servers)
    add(std::move(s));
}

void Manager::add(ServerConfig config) {
  if (shut_down_) return;
  std::string name = config.name;
  auto [it, inserted] = servers_.try_emplace(name);
  Server& server = it->second;
  if (!inserted) end_connection(server);
  server.config = std::move(config);
  if (!server.config.enabled) {
    set_status(name, server, ServerStatus{State::Disabled, {}, {}, {}});
    return;
  }
  begin_connect(server);
}

Result<void> Manager::connect(const std::string& name) {
  auto it = servers_.find(name);
  if (it == servers_.end())
    return make_error(ErrorCode::NotFound, "no MCP server named \"" + name + "\"");
  if (shut_down_) return make_error(ErrorCode::Unavailable, "the server is shutting down");
  end_connection(it->second);
  it->second.retries = 0;  // a person asked: the automatic tries start over
  begin_connect(it->second);
  return {};
}

Result<void> Manager::disconnect(const std::string& name) {
  auto it = servers_.find(name);
  if (it == servers_.end())
    return make_error(ErrorCode::NotFound, "no MCP server named \"" + name + "\"");
  end_connection(it->second);
  set_status(name, it->second, ServerStatus{State::Disabled, {}, {}, {}});
  return {};
}

std::map<std::string, ServerStatus> Manager::status() const {
  std::map<std::string, ServerStatus> out;
  for (const auto& [name, server] : servers_)
    out.emplace(name, server.status);
  return out;
}

void Manager::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  for (auto& [name, server] : servers_)
    end_connection(server);
}

void Manager::begin_connect(Server& server) {
  ++server.generation;
  server.refreshing = server.refresh_again = false;
  set_status(server.config.name, server, ServerStatus{State::Connecting, {}, {}, {}});
  // The lambda holds the manager until the coroutine ends (co_spawn keeps it that long).
  asio::co_spawn(
      deps_.executor,
      [self = shared_from_this(), name = server.config.name, generation = server.generation] {
        return self->run_connect(name, generation);
      },
      asio::detached);
}

Manager::Server* Manager::find(const std::string& name, std::uint64_t generation) {
  auto it = servers_.find(name);
  if (it == servers_.end() || it->second.generation != generation || shut_down_) return nullptr;
  return &it->second;
}

asio::awaitable<void> Manager::run_connect(std::string name, std::uint64_t generation) {
  auto self = shared_from_this();
  Server* server = find(name, generation);
  if (!server) co_return;
  const ServerConfig& config = server->config;
  std::unique_ptr<Transport> transport;
  if (config.type == ServerType::Local) {
    StdioOptions o;
    o.name = name;
    o.command = config.command;
    o.environment = config.environment;
    o.cwd = deps_.directory;
    if (!deps_.data_dir.empty()) o.group_record_dir = tool::process_group_dir(deps_.data_dir);
    transport = make_stdio_transport(deps_.executor, std::move(o));
  } else {
    HttpOptions o;
    o.name = name;
    o.url = config.url;
    o.headers = config.headers;
    o.connect_timeout =
        std::min<std::chrono::milliseconds>(config.timeout, std::chrono::seconds(10));
    transport = make_http_transport(deps_.executor, std::move(o));
  }
  ClientOptions options;
  options.name = name;
  options.timeout = config.timeout;
  options.probe_timeout = std::min(options.probe_timeout, config.timeout);
  options.root = deps_.directory;
  options.elicitation = deps_.questions != nullptr;
  Client::Callbacks callbacks;
  std::weak_ptr<Manager> weak = self;
  callbacks.tools_changed = [weak, name, generation] {
    if (auto m = weak.lock()) m->request_refresh(name, generation);
  };
  callbacks.closed = [weak, name, generation](const std::string& reason) {
    auto m = weak.lock();
    if (!m) return;
    Server* s = m->find(name, generation);
    // While connecting, run_connect reports the failure itself.
    if (!s || s->status.state == State::Connecting) return;
    log::warn("mcp ", name, ": stopped: ", reason);
    s->client.reset();
    m->fail(name, *s, reason);
  };
  callbacks.input = [weak](const std::string& method, json::object params,
                           const std::string& call) -> asio::awaitable<Result<json::object>> {
    auto m = weak.lock();
    if (!m || method != "elicitation/create")
      co_return make_error(ErrorCode::Forbidden, "Switchboard does not offer " + method);
    co_return co_await m->elicit(std::move(params), call);
  };
  auto client = Client::create(deps_.executor, std::move(transport), std::move(options),
                               std::move(callbacks));
  server->client = client;
  auto connected = co_await client->connect();
  server = find(name, generation);
  if (!server) co_return;  // replaced or disconnected meanwhile; the client closed with it
  if (!connected) {
    log::warn("mcp ", name, ": ", connected.error().message);
    server->client.reset();
    fail(name, *server, connected.error().message);
    co_return;
  }
  log::info("mcp ", name, ": connected (",
            client->server_name().empty() ? "" : client->server_name() + ", ", "protocol ",
            client->protocol_version(), ")");
  request_refresh(name, generation);
}

void Manager::request_refresh(const std::string& name, std::uint64_t generation) {
  Server* server = find(name, generation);
  if (!server) return;
  // One list at a time: change notices that come meanwhile make one more, not one each (a
  // server sending thousands must not make thousands of tools/list, published out of order).
  if (server->refreshing) {
    server->refresh_again = true;
    return;
  }
  server->refreshing = true;
  asio::co_spawn(
      deps_.executor,
      [self = shared_from_this(), name, generation]() -> asio::awaitable<void> {
        for (;;) {
          co_await self->refresh_tools(name, generation);
          Server* s = self->find(name, generation);
          if (!s) co_return;  // a new connection resets the flags
          if (!s->refresh_again) {
            s->refreshing = false;
            co_return;
          }
          s->refresh_again = false;
        }
      },
      asio::detached);
}

asio::awaitable<void> Manager::refresh_tools(std::string name, std::uint64_t generation) {
  auto self = shared_from_this();
  Server* server = find(name, generation);
  if (!server || !server->client) co_return;
  auto client = server->client;
  auto listed = co_await client->list_tools();
  server = find(name, generation);
  if (!server || server->client != client) co_return;
  if (!listed) {
    // Its tools cannot be known: the server is of no use as it is.
    std::string why = listed.error().message;
    log::warn("mcp ", name, ": ", why);
    end_connection(*server);
    fail(name, *server, why);
    co_return;
  }
  std::vector<tool::ToolPtr> tools;
  for (const auto& info : *listed) {
    auto made = make_tool(name, info, client, calls_);
    if (!made) {
      log::warn("mcp ", name, ": left out a tool: ", made.error().message);
      continue;
    }
    tools.push_back(std::move(*made));
  }
  server->retries = 0;
  ServerStatus status{State::Connected, {}, {}, client->protocol_version()};
  for (const auto& t : tools)
    status.tools.push_back(t->id());
  publish_tools(name, std::move(tools));
  set_status(name, *server, std::move(status));
}

asio::awaitable<Result<json::object>> Manager::elicit(json::object params,
                                                      const std::string& call) {
  auto self = shared_from_this();
  json::object decline{{"action", "decline"}};
  auto it = calls_->find(call);
  // Outside a call there is no session to ask in; a URL to visit is not something we show.
  if (it == calls_->end() || !deps_.questions || params.contains("url")) co_return decline;
  tool::ToolContext& ctx = *it->second;
  auto questions = elicitation_questions(params);
  if (!questions) {
    log::warn("mcp: declined an elicitation: ", questions.error().message);
    co_return decline;
  }
  question::Question q;
  q.session_id = ctx.session_id;
  q.message_id = ctx.message_id;
  q.call_id = ctx.call_id;
  q.questions = std::move(*questions);
  // An abort of the turn withdraws the question.
  auto give_up = std::make_shared<asio::cancellation_signal>();
  AbortSignal::Registration on_abort(
      ctx.abort, [give_up] { give_up->emit(asio::cancellation_type::terminal); });
  auto abort = ctx.abort;
  // Named, not a temporary in the co_await: GCC 12 destroys those twice.
  auto token = asio::bind_cancellation_slot(give_up->slot(), asio::use_awaitable);
  ctx.set_awaiting_person(true);
  auto answer = co_await deps_.questions->async_ask(std::move(q), token);
  // The call (and its context) may have ended meanwhile: look it up again.
  if (auto again = calls_->find(call); again != calls_->end())
    again->second->set_awaiting_person(false);
  if (!answer)
    co_return json::object{
        {"action", answer.error().code == ErrorCode::Forbidden ? "decline" : "cancel"}};
  auto content = elicitation_content(params, *answer);
  if (!content) {
    log::warn("mcp: declined an elicitation: ", content.error().message);
    co_return decline;
  }
  co_return json::object{{"action", "accept"}, {"content", std::move(*content)}};
}

void Manager::fail(const std::string& name, Server& server, const std::string& why) {
  set_status(name, server, ServerStatus{State::Failed, why, {}, {}});
  // A remote server may be back in a moment (a restart, a network blip): a few tries, further
  // apart each time. A local one that failed would most likely fail again the same way.
  if (server.config.type != ServerType::Remote || server.retries >= kRemoteRetries) return;
  auto delay = std::chrono::seconds(1 << server.retries);
  ++server.retries;
  auto timer = std::make_shared<asio::steady_timer>(deps_.executor, delay);
  timer->async_wait([weak = weak_from_this(), timer, name,
                     generation = server.generation](boost::system::error_code ec) {
    auto self = weak.lock();
    if (ec || !self) return;
    if (Server* s = self->find(name, generation); s && s->status.state == State::Failed) {
      log::info("mcp ", name, ": trying again (", s->retries, " of ", kRemoteRetries, ")");
      self->begin_connect(*s);
    }
  });
}

void Manager::end_connection(Server& server) {
  ++server.generation;
  server.refreshing = server.refresh_again = false;
  if (server.client) {
    auto client = std::move(server.client);
    client->close("disconnected");
  }
  if (!server.status.tools.empty()) {
    publish_tools(server.config.name, {});
    server.status.tools.clear();
  }
}

void Manager::publish_tools(const std::string& name, std::vector<tool::ToolPtr> tools) {
  deps_.tools->set_plugin_tools(name, std::move(tools));
  if (deps_.bus) deps_.bus->publish("mcp.tools.changed", json::object{{"server", name}});
}

void Manager::set_status(const std::string& name, Server& server, ServerStatus status) {
  // A server no longer connected takes its tools with it.
  if (status.state != State::Connected && !server.status.tools.empty()) publish_tools(name, {});
  server.status = std::move(status);
  if (!deps_.bus) return;
  json::object props = to_json(server.status);
  props["name"] = name;
  deps_.bus->publish("mcp.status", std::move(props));
}

}  // namespace sb::mcp
