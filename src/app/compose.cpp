#include "app/compose.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>

#include "app/loop_lag.hpp"
#include "cluster/node.hpp"
#include "mcp/config.hpp"
#include "mcp/manager.hpp"
#include "permission/ruleset.hpp"
#include "provider/provider.hpp"
#include "server/access.hpp"
#include "server/cluster_asks.hpp"
#include "session/agent.hpp"
#include "session/project.hpp"
#include "session/service.hpp"
#include "session/store.hpp"
#include "session/todos.hpp"
#include "store/postgres.hpp"
#include "store/sqlite.hpp"
#include "tool/builtin/bash.hpp"
#include "tool/builtin/batch.hpp"
#include "tool/builtin/edit.hpp"
#include "tool/builtin/glob.hpp"
#include "tool/builtin/grep.hpp"
#include "tool/builtin/invalid.hpp"
#include "tool/builtin/list.hpp"
#include "tool/builtin/question.hpp"
#include "tool/builtin/read.hpp"
#include "tool/builtin/task.hpp"
#include "tool/builtin/todo.hpp"
#include "tool/builtin/webfetch.hpp"
#include "tool/builtin/write.hpp"
#include "tool/custom.hpp"
#include "tool/process_groups.hpp"
#include "util/log.hpp"

namespace sb::app {

std::filesystem::path default_data_dir() {
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg)
    return std::filesystem::path(xdg) / "switchboard";
  if (const char* home = std::getenv("HOME"); home && *home)
    return std::filesystem::path(home) / ".local" / "share" / "switchboard";
  return std::filesystem::current_path() / ".switchboard-data";
}

namespace {
// The configured store, for the sessions and the client credentials to share. Each way holds the
// data directory's lock (switchboard.db.lock) for this process alone, so a second server on the
// same data directory stops here: SQLite's database holds it itself; with PostgreSQL (whose
// store the database's own lock keeps to one server) the server takes it, as the directory still
// holds tools' saved outputs and process groups.
Result<std::shared_ptr<store::Database>> open_store(const config::StorageOptions& options,
                                                    const config::ClusterOptions& cluster,
                                                    const std::filesystem::path& data_dir,
                                                    server::ServerState& state,
                                                    std::vector<std::string>& notes) {
  auto in_use = [&] {
    return make_error(ErrorCode::Conflict,
                      "the data directory " + data_dir.string() +
                          " is in use by another Switchboard server: stop that one, or give this "
                          "server its own --data-dir");
  };
  std::shared_ptr<store::Database> database;
  if (cluster.enabled() && options.type != config::StorageOptions::Type::Postgres)
    return make_error(ErrorCode::InvalidRequest,
                      "configuration error: cluster.redis is set but the nodes of a cluster share "
                      "a PostgreSQL store: set storage.type to \"postgres\" and storage.url (or "
                      "SWITCHBOARD_DATABASE_URL)");
  if (options.type == config::StorageOptions::Type::Sqlite) {
    auto db = store::SqliteDatabase::open(data_dir / "switchboard.db");
    if (!db && db.error().code == ErrorCode::Conflict) return in_use();
    if (!db) return db.error();
    database = std::move(*db);
  } else {
    if (options.url.empty())
      return make_error(ErrorCode::InvalidRequest,
                        "configuration error: storage.type is \"postgres\" but no storage.url "
                        "(or SWITCHBOARD_DATABASE_URL) is set");
    auto lock = store::FileLock::acquire(data_dir / "switchboard.db.lock");
    if (!lock && lock.error().code == ErrorCode::Conflict) return in_use();
    if (!lock) return lock.error();
    state.data_dir_lock = std::make_shared<store::FileLock>(std::move(*lock));
    store::PostgresOptions pg;
    pg.url = options.url;
    pg.connect_timeout = std::chrono::duration_cast<std::chrono::seconds>(options.connect_timeout);
    pg.statement_timeout = options.statement_timeout;
    // Shared with other nodes only in a cluster: a node ID alone (no Redis) keeps the store ours.
    if (cluster.enabled()) pg.node_id = cluster.node_id;
    auto db = store::PostgresDatabase::open(std::move(pg));
    if (!db) return db.error();
    database = std::move(*db);
    notes.push_back("storage: postgres at " + config::redact_url(options.url));
  }
  state.database = database;
  return database;
}
}  // namespace

Result<Composed> compose(boost::asio::io_context& io, config::Config config, Paths paths,
                         const std::function<std::string(const std::string&)>& env) {
  Composed out;
  auto state = std::make_unique<server::ServerState>();
  // The components read their keys from the merged document; their errors start with the key
  // path, and `located` names the file that key came from.
  auto providers = provider::load_providers(config.raw, env);
  if (!providers) return config.located(providers.error());
  out.warnings = providers->warnings;
  auto agents = session::load_agents(config.raw);
  if (!agents) return config.located(agents.error());
  permission::Ruleset config_rules;
  permission::PermissionOptions permission_options;
  if (auto it = config.raw.find("permission"); it != config.raw.end()) {
    auto rules = permission::parse_config(it->value());
    if (!rules) return config.located(rules.error());
    config_rules = std::move(*rules);
    auto timeout = permission::parse_timeout(it->value());
    if (!timeout) return config.located(timeout.error());
    permission_options.timeout = *timeout;
  }
  auto mcp_servers = mcp::parse_servers(config.raw, env);
  if (!mcp_servers) return config.located(mcp_servers.error());
  bool batch = false;
  {
    auto ex = get_object(config.raw, "experimental");
    if (!ex) return config.located(ex.error());
    Result<std::optional<bool>> b = std::optional<bool>();
    if (*ex) b = get_bool(**ex, "batch_tool", "experimental");
    if (!b) return config.located(b.error());
    batch = b->value_or(false);
  }

  std::error_code ec;
  std::filesystem::create_directories(paths.data_dir, ec);
  if (ec)
    return make_error(ErrorCode::Internal, "cannot create the data directory " +
                                               paths.data_dir.string() + ": " + ec.message());
  if (config.cluster.enabled() && config.cluster.node_id.empty()) {
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) != 0 || !*host) std::strcpy(host, "node");
    config.cluster.node_id = std::string(host) + "-" + std::to_string(getpid());
  }
  // The ID names Redis keys and the node's Redis connection, and heads its relayed events (up to
  // a newline): a character Redis refuses there would fail only later, and obscurely.
  if (config.cluster.enabled()) {
    const auto& id = config.cluster.node_id;
    bool plain = !id.empty() && id.size() <= 128 && std::all_of(id.begin(), id.end(), [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '-' ||
             ch == ':';
    });
    if (!plain)
      return make_error(ErrorCode::InvalidRequest,
                        "configuration error: cluster.nodeID (or SWITCHBOARD_NODE_ID) \"" + id +
                            "\" must be 1 to 128 letters, digits, '.', '_', '-' or ':'");
  }
  auto database = open_store(config.storage, config.cluster, paths.data_dir, *state, out.notes);
  if (!database) return database.error();
  // The data directory is ours now: stop what tools of a server killed on it left running.
  tool::stop_recorded_process_groups(tool::process_group_dir(paths.data_dir));
  auto opened = session::SessionStore::open(*database);
  if (!opened) return opened.error();
  std::shared_ptr<session::SessionStore> store = std::move(*opened);
  store->set_shared(config.cluster.enabled());
  state->store = store;
  if (config.client_tools.client_tokens) {
    auto credentials = clienttool::ClientCredentials::open(*database);
    if (!credentials) return credentials.error();
    state->credentials = std::move(*credentials);
  }

  state->bus = bus::EventBus::create();
  const auto& ct = config.client_tools;
  clienttool::RegistryOptions options;
  options.default_timeout = ct.default_timeout;
  options.max_timeout = ct.max_timeout;
  options.reconnect_grace = ct.reconnect_grace;
  options.rate_limit = ct.rate_limit;
  options.max_pending_per_client = static_cast<std::size_t>(ct.max_pending_per_client);
  options.max_pending_per_session = static_cast<std::size_t>(ct.max_pending_per_session);
  state->registry = clienttool::ClientToolRegistry::create(io.get_executor(), state->bus, options);
  state->permissions =
      permission::PermissionService::create(io.get_executor(), state->bus, permission_options);
  state->questions = std::make_shared<question::QuestionService>(io.get_executor(), state->bus);

  // Built-in tools in seed 004's order.
  auto tools = std::make_shared<tool::ToolRegistry>(state->registry, tool::RegistryOptions{batch});
  auto todos = std::make_shared<session::StoredTodos>(store);
  tools->add_builtin(tool::make_invalid_tool());
  tools->add_builtin(tool::make_question_tool(state->questions));
  tools->add_builtin(tool::make_bash_tool());
  tools->add_builtin(tool::make_read_tool());
  tools->add_builtin(tool::make_glob_tool());
  tools->add_builtin(tool::make_grep_tool());
  tools->add_builtin(tool::make_list_tool());
  tools->add_builtin(tool::make_edit_tool(state->bus));
  tools->add_builtin(tool::make_write_tool(state->bus));
  // The task tool runs sub-sessions through the session service, which is created below and
  // owns the tool registry: the runner holds it weakly.
  auto service_slot = std::make_shared<std::weak_ptr<session::SessionService>>();
  std::map<std::string, std::string> agent_list;
  for (const auto& [name, agent] : *agents)
    agent_list[name] = agent.description;
  tools->add_builtin(tool::make_task_tool(
      [service_slot](tool::TaskRequest req) -> boost::asio::awaitable<Result<tool::TaskOutcome>> {
        auto service = service_slot->lock();
        if (!service) co_return make_error(ErrorCode::Unavailable, "the server is shutting down");
        co_return co_await service->run_subtask(std::move(req));
      },
      agent_list));
  tools->add_builtin(tool::make_webfetch_tool());
  tools->add_builtin(tool::make_todowrite_tool(todos, state->bus));
  tools->add_builtin(tool::make_todoread_tool(todos));
  tools->add_builtin(tool::make_batch_tool(tools));  // offered only with experimental.batch_tool
  // Custom tools last (seed 004). Describing them blocks start-up for at most a few seconds.
  std::string home = env("HOME");
  std::filesystem::path user_config;
  if (!home.empty()) user_config = std::filesystem::path(home) / ".config" / "switchboard";
  auto custom =
      tool::load_custom_tools_sync(tool::custom_tool_directories(user_config, paths.directory));
  for (const auto& t : custom.tools)
    tools->register_tool(t);
  state->tools = tools;
  // MCP servers connect in the background once the loop runs: start-up never waits for one.
  state->mcp = mcp::Manager::create(mcp::ManagerDeps{
      io.get_executor(), state->bus, tools, paths.directory, paths.data_dir, state->questions});
  std::vector<std::string> mcp_notes;
  for (const auto& s : *mcp_servers)
    mcp_notes.push_back("mcp server " + s.name + (s.enabled ? ": connecting" : ": disabled"));
  state->mcp->start(std::move(*mcp_servers));

  session::ServiceDeps deps;
  deps.executor = io.get_executor();
  deps.bus = state->bus;
  deps.store = store;
  deps.providers = std::move(*providers);
  deps.tools = tools;
  deps.permissions = state->permissions;
  deps.questions = state->questions;
  deps.config_rules = std::move(config_rules);
  deps.agents = std::move(*agents);
  session::ServiceOptions service_options;
  service_options.directory = paths.directory;
  // The project, found once (it runs git): sessions carry its id, /project/current and /vcs say
  // the rest.
  state->project = session::project_of(paths.directory.string());
  state->directory = paths.directory;
  state->data_dir = paths.data_dir;
  state->started = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  service_options.project_id = state->project.id;
  service_options.data_dir = paths.data_dir;
  auto files = session::file_options(config.raw);
  if (!files) return config.located(files.error());
  service_options.files = *files;
  auto retry = get_object(config.raw, "retry");
  if (!retry) return config.located(retry.error());
  if (*retry) {
    // Each a count or ms, 0 or more: a negative delay would retry at once, forever.
    auto read = [&](std::string_view key, std::int64_t max) -> Result<std::optional<std::int64_t>> {
      auto v = get_int(**retry, key, "retry");
      if (!v) return config.located(v.error());
      if (*v && (**v < 0 || **v > max))
        return config.located(make_error(ErrorCode::InvalidRequest,
                                         field_path("retry", key) + " must be 0 to " +
                                             std::to_string(max) + ", got " + std::to_string(**v)));
      return *v;
    };
    constexpr std::int64_t kDay = 24 * 3600 * 1000;
    auto attempts = read("attempts", 100);
    if (!attempts) return attempts.error();
    if (*attempts) service_options.retry_attempts = static_cast<int>(**attempts);
    auto initial = read("initialDelay", kDay);
    if (!initial) return initial.error();
    if (*initial) service_options.retry_initial = std::chrono::milliseconds(**initial);
    auto max_delay = read("maxDelay", kDay);
    if (!max_delay) return max_delay.error();
    if (*max_delay) service_options.retry_max = std::chrono::milliseconds(**max_delay);
  }
  out.notes = deps.providers.notes;
  out.notes.push_back("default model: " + deps.providers.default_model);
  out.notes.push_back("data directory: " + paths.data_dir.string());
  out.notes.push_back("project directory: " + paths.directory.string());
  out.notes.insert(out.notes.end(), mcp_notes.begin(), mcp_notes.end());
  for (const auto& w : custom.warnings)
    out.warnings.push_back("custom tools: " + w);
  if (!custom.tools.empty()) {
    std::string loaded = "custom tools:";
    for (std::size_t i = 0; i < custom.tools.size(); ++i)
      loaded += (i ? ", " : " ") + custom.tools[i]->id() + " (" + custom.files[i].string() + ")";
    out.notes.push_back(loaded);
  }
  auto chat_store = deps.store;
  state->sessions = session::SessionService::create(std::move(deps), std::move(service_options));
  *service_slot = state->sessions;
  chat::ChatOptions chat_options;
  chat_options.tool_limits = server::spec_limits(config);
  state->chats = chat::ChatService::create(
      chat::ChatDeps{io.get_executor(), state->bus, state->sessions, std::move(chat_store),
                     state->registry, state->tools, state->permissions},
      chat_options);
  auto recovered = state->sessions->recover();
  if (!recovered) return recovered.error();
  if (recovered->failed)
    out.notes.push_back(std::to_string(recovered->failed) +
                        " turn(s) interrupted by the last stop were marked as failed");
  if (recovered->resumed)
    out.notes.push_back(std::to_string(recovered->resumed) +
                        " turn(s) waiting for a client or a person go on (what they wait for "
                        "waits again)");
  if (config.cluster.enabled()) {
    cluster::NodeOptions node;
    node.redis_url = config.cluster.redis;
    node.node_id = config.cluster.node_id;
    node.key_prefix = config.cluster.key_prefix;
    node.lease = config.cluster.lease;
    auto made = cluster::Node::create(io.get_executor(), std::move(node), state->bus);
    if (!made) return made.error();
    state->cluster = std::move(*made);
    server::answer_cluster_asks(*state);
    state->client_relay = cluster::ClientRelay::create(state->cluster, state->registry);
    // A round's store calls run beside the loop; a round that finds the last one's still running
    // (a store slow to answer) skips them rather than queueing more.
    auto round_running = std::make_shared<bool>(false);
    state->cluster->start([weak = std::weak_ptr<session::SessionService>(state->sessions),
                           executor = io.get_executor(), round_running](bool take_over) {
      auto sessions = weak.lock();
      if (!sessions || *round_running) return;
      *round_running = true;
      boost::asio::co_spawn(
          executor,
          [sessions, take_over, round_running]() -> boost::asio::awaitable<void> {
            struct Done {
              bool& running;
              ~Done() { running = false; }
            } done{*round_running};
            if (!take_over) {
              // A store that does not answer is logged by the store (once per try to connect).
              (void)co_await sessions->check_claims();
              co_return;
            }
            auto taken = co_await sessions->take_over();
            if (!taken)
              log::warn("cluster: taking turns over failed: ", taken.error().message);
            else if (taken->failed || taken->resumed)
              log::info("cluster: took over the turns of a node that went away: ", taken->resumed,
                        " go on here, ", taken->failed, " were marked as failed");
          },
          boost::asio::detached);
    });
    out.notes.push_back("cluster: node " + config.cluster.node_id + ", redis at " +
                        config::redact_url(config.cluster.redis));
  }
  state->config = std::move(config);
  // Only when asked for: its timer wakes the loop every millisecond (docs/configuration.md).
  if (!env("SWITCHBOARD_LOOP_LAG").empty()) start_loop_lag_monitor(io, *state);
  out.state = std::move(state);
  return out;
}

}  // namespace sb::app
