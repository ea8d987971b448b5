// What OpenCode's clients read at start: the effective config, providers, agents, commands, the
// server's directories, the project and its branch, and the answers OpenCode gives for features
// Switchboard does not have (LSP, formatters, skills, workspaces, ...); and running a command
// (their list: project_routes(), in route.hpp).
#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "provider/catalog.hpp"
#include "server/decode.hpp"
#include "server/push.hpp"
#include "server/route.hpp"
#include "session/project.hpp"
#include "util/text.hpp"

namespace sb::server {

namespace {

namespace fs = std::filesystem;

// ---- the config, providers, agents -----------------------------------------------------------

// The login name of the user the server runs as (OpenCode's `username`); empty when unknown.
// Looked up once: the password database may be a file read, or a network service.
const std::string& user_name() {
  static const std::string name = [] {
    std::vector<char> buf(16384);
    passwd pw{};
    passwd* found = nullptr;
    if (::getpwuid_r(::geteuid(), &pw, buf.data(), buf.size(), &found) == 0 && found &&
        found->pw_name)
      return std::string(found->pw_name);
    const char* user = std::getenv("USER");
    return std::string(user ? user : "");
  }();
  return name;
}

asio::awaitable<Reply> get_config(Call& c) {
  json::object out = config::to_json(c.state.config);
  out["model"] = c.state.sessions->providers().default_model;  // with nothing set, the one used
  out["default_agent"] = "build";
  if (!user_name().empty()) out["username"] = user_name();
  co_return ok(c, out);
}

asio::awaitable<Reply> get_config_providers(Call& c) {
  co_return ok(c,
               provider::config_providers_json(c.state.sessions->providers(), c.state.config.raw));
}

asio::awaitable<Reply> get_providers(Call& c) {
  co_return ok(c, provider::provider_list_json(c.state.sessions->providers(), c.state.config.raw));
}

asio::awaitable<Reply> list_agents(Call& c) {
  json::array out;
  for (const auto& [name, agent] : c.state.sessions->agents())
    out.push_back(session::to_json(agent));
  co_return ok(c, out);
}

// ---- commands --------------------------------------------------------------------------------

json::object command_json(const config::Command& command) {
  json::array hints;
  for (auto& h : config::template_hints(command.template_text))
    hints.emplace_back(h);
  json::object out{{"name", command.name}, {"source", "command"}};
  if (!command.description.empty()) out["description"] = command.description;
  if (command.agent) out["agent"] = *command.agent;
  if (command.model) out["model"] = *command.model;
  out["template"] = command.template_text;
  out["hints"] = std::move(hints);
  return out;
}

asio::awaitable<Reply> list_commands(Call& c) {
  json::array out;
  for (const auto& [name, command] : c.state.config.commands)
    out.push_back(command_json(command));
  for (const auto& [name, command] : config::builtin_commands())
    if (!c.state.config.commands.count(name)) out.push_back(command_json(command));
  co_return ok(c, out);
}

// POST /session/{id}/command: the command's template with the arguments put in, prompted as
// OpenCode does: with the command's agent, else the request's; with the command's model, else
// its agent's, else the request's (else the agent's or the default). Answers as
// POST /session/{id}/message.
asio::awaitable<Result<session::MessageWithParts>> run_named_command(Call& c,
                                                                     CommandRequest request) {
  const config::Command* command = config::find_command(c.state.config.commands, request.command);
  if (!command)
    co_return make_error(
        ErrorCode::NotFound,
        "no command \"" + request.command + "\": the config's `command` key names the commands");
  session::PromptInput input;
  input.text = config::expand_template(command->template_text, request.arguments);
  input.agent = command->agent ? command->agent : request.agent;
  input.model = request.model;
  if (command->agent) {
    auto agent = c.state.sessions->agents().find(*command->agent);
    if (agent == c.state.sessions->agents().end())
      co_return make_error(ErrorCode::InvalidRequest, "Unknown agent: " + *command->agent +
                                                          " (command." + command->name + ".agent)");
    if (agent->second.model) input.model = agent->second.model;
  }
  if (command->model) input.model = command->model;
  std::string session_id = c.params[0];
  auto r = co_await c.state.sessions->prompt(session_id, std::move(input));
  if (r)
    c.state.bus->publish("command.executed", json::object{{"name", command->name},
                                                          {"sessionID", session_id},
                                                          {"arguments", request.arguments},
                                                          {"messageID", r->info.id}});
  co_await event_streams_caught_up(c.state);  // the turn's events, this one too, before the answer
  co_return r;
}

asio::awaitable<Reply> run_command(Call& c) {
  auto body = body_object(c.state, c.req);
  if (!body) co_return fail(c, body.error());
  auto request = decode_command(*body);
  if (!request) co_return fail(c, request.error());
  auto r = co_await run_named_command(c, std::move(*request));
  if (!r) co_return fail(c, r.error());
  co_return ok_text(c, session::json_text(*r));
}

// POST /session/{id}/init: the `init` command (built in, or the config's), as OpenCode's
// session.init; answers true once its turn has ended.
asio::awaitable<Reply> init_session(Call& c) {
  auto body = body_object(c.state, c.req);
  if (!body) co_return fail(c, body.error());
  auto model = decode_init(*body);
  if (!model) co_return fail(c, model.error());
  CommandRequest request;
  request.command = "init";
  request.model = std::move(*model);
  auto r = co_await run_named_command(c, std::move(request));
  if (!r) co_return fail(c, r.error());
  co_return ok(c, true);
}

// ---- directories, the project, its branch -----------------------------------------------------

// The project the server works in (OpenCode's Project): its id, the repository's top directory
// ("/" outside one), "git" when in one; created and updated as its sessions were (the server's
// start when it has none).
asio::awaitable<Reply> current_project_reply(Call& c, bool as_list) {
  const auto& project = c.state.project;
  auto sessions = co_await c.state.sessions->list_sessions();
  if (!sessions) co_return fail(c, sessions.error());
  std::int64_t created = c.state.started, updated = c.state.started;
  for (const auto& s : *sessions) {
    created = std::min(created, s.created);
    updated = std::max(updated, s.updated);
  }
  json::object out{{"id", project.id}, {"worktree", project.worktree}};
  if (!project.vcs.empty()) out["vcs"] = project.vcs;
  out["time"] = json::object{{"created", created}, {"updated", updated}};
  out["sandboxes"] = json::array{};
  if (as_list) co_return ok(c, json::array{out});
  co_return ok(c, out);
}

asio::awaitable<Reply> current_project(Call& c) {
  return current_project_reply(c, false);
}

asio::awaitable<Reply> list_projects(Call& c) {
  return current_project_reply(c, true);
}

// GET /path: the user's home, Switchboard's data directory (OpenCode's state), the directory of
// the user's config file, the project's repository and the project directory.
asio::awaitable<Reply> get_path(Call& c) {
  const char* home = std::getenv("HOME");
  fs::path config_dir = home ? fs::path(home) / ".config" / "switchboard" : fs::path();
  co_return ok(c, json::object{{"home", home ? home : ""},
                               {"state", c.state.data_dir.string()},
                               {"config", config_dir.string()},
                               {"worktree", c.state.project.worktree},
                               {"directory", c.state.directory.string()}});
}

// A small file of the repository (HEAD, a ref) without its surrounding spaces; "" when absent.
std::string git_file(const fs::path& file) {
  std::ifstream in(file);
  std::string text(std::istreambuf_iterator<char>(in), {});
  return std::string(trim(text));
}

// GET /vcs: {branch, default_branch} of the project's repository, read from its files (HEAD, and
// origin's HEAD for the default branch); null for what it does not have, both outside one.
asio::awaitable<Reply> get_vcs(Call& c) {
  json::object out{{"branch", nullptr}, {"default_branch", nullptr}};
  if (c.state.project.vcs != "git") co_return ok(c, out);
  fs::path git = fs::path(c.state.project.worktree) / ".git";
  std::error_code ec;
  if (fs::is_regular_file(git, ec)) {  // a linked worktree: "gitdir: PATH"
    std::string link = git_file(git);
    if (link.starts_with("gitdir: ")) git = fs::path(c.state.project.worktree) / link.substr(8);
  }
  fs::path common = git;
  if (auto shared = git_file(git / "commondir"); !shared.empty()) common = git / shared;
  constexpr std::string_view kHeads = "ref: refs/heads/", kOrigin = "ref: refs/remotes/origin/";
  std::string head = git_file(git / "HEAD");
  if (head.starts_with(kHeads))
    out["branch"] = head.substr(kHeads.size());
  else if (!head.empty())
    out["branch"] = "HEAD";  // detached, as `git rev-parse --abbrev-ref HEAD` says
  if (std::string origin = git_file(common / "refs" / "remotes" / "origin" / "HEAD");
      origin.starts_with(kOrigin))
    out["default_branch"] = origin.substr(kOrigin.size());
  co_return ok(c, out);
}

// ---- features Switchboard does not have: OpenCode's answers with them off ----------------------

asio::awaitable<Reply> empty_list(Call& c) {
  co_return ok(c, json::array{});
}

asio::awaitable<Reply> empty_object(Call& c) {
  co_return ok(c, json::object{});
}

asio::awaitable<Reply> capabilities(Call& c) {
  co_return ok(c, json::object{{"backgroundSubagents", false}});
}

asio::awaitable<Reply> console_state(Call& c) {
  co_return ok(c,
               json::object{{"consoleManagedProviders", json::array{}}, {"switchableOrgCount", 0}});
}

}  // namespace

std::vector<Route> project_routes() {
  return {
      {http::verb::get,
       {"config"},
       &get_config,
       {.id = "config.get",
        .summary = "The effective configuration, secrets redacted",
        .answer = "Config"}},
      {http::verb::get,
       {"config", "providers"},
       &get_config_providers,
       {.id = "config.providers",
        .summary = "The configured providers and each one's default model",
        .answer = "ConfigProviders"}},
      {http::verb::get,
       {"provider"},
       &get_providers,
       {.id = "provider.list",
        .summary = "The providers, each one's default model, and the usable ones",
        .answer = "ProviderList"}},
      {http::verb::get,
       {"provider", "auth"},
       &empty_object,
       {.id = "provider.auth",
        .summary = "The providers' login methods: none",
        .answer = "ProviderAuthMethods"}},
      {http::verb::get,
       {"agent"},
       &list_agents,
       {.id = "app.agents", .summary = "The agents a prompt may name", .answer = "AgentList"}},
      {http::verb::get,
       {"command"},
       &list_commands,
       {.id = "command.list",
        .summary = "The commands: the config's and the built-in init",
        .answer = "CommandList"}},
      {http::verb::post,
       {"session", "{sessionID}", "command"},
       &run_command,
       {.id = "session.command",
        .summary = "Run a command: prompt its template with the arguments and wait for the answer",
        .body = "CommandInput",
        .answer = "MessageWithParts",
        .statuses = "404 409 503"}},
      {http::verb::post,
       {"session", "{sessionID}", "init"},
       &init_session,
       {.id = "session.init",
        .summary = "Run the init command (write AGENTS.md for the project) and wait for its turn",
        .body = "InitRequest",
        .answer = "OkTrue",
        .statuses = "404 409 503"}},
      {http::verb::get,
       {"path"},
       &get_path,
       {.id = "path.get", .summary = "The server's directories", .answer = "Path"}},
      {http::verb::get,
       {"project"},
       &list_projects,
       {.id = "project.list",
        .summary = "The projects: the one the server works in",
        .answer = "ProjectList"}},
      {http::verb::get,
       {"project", "current"},
       &current_project,
       {.id = "project.current",
        .summary = "The project the server works in",
        .answer = "Project"}},
      {http::verb::get,
       {"project", "{projectID}", "directories"},
       &empty_list,
       {.id = "project.directories",
        .summary = "A project's sandbox directories: none",
        .answer = "ProjectDirectories"}},
      {http::verb::get,
       {"vcs"},
       &get_vcs,
       {.id = "vcs.get",
        .summary = "The project repository's branch and default branch",
        .answer = "VcsInfo"}},
      {http::verb::get,
       {"lsp"},
       &empty_list,
       {.id = "lsp.status", .summary = "The language servers: none", .answer = "LSPStatusList"}},
      {http::verb::get,
       {"formatter"},
       &empty_list,
       {.id = "formatter.status",
        .summary = "The formatters: none",
        .answer = "FormatterStatusList"}},
      {http::verb::get,
       {"skill"},
       &empty_list,
       {.id = "app.skills", .summary = "The skills: none", .answer = "SkillList"}},
      {http::verb::get,
       {"experimental", "capabilities"},
       &capabilities,
       {.id = "experimental.capabilities.get",
        .summary = "The experimental features the server has",
        .answer = "ExperimentalCapabilities"}},
      {http::verb::get,
       {"experimental", "console"},
       &console_state,
       {.id = "experimental.console.get",
        .summary = "OpenCode Console state: none",
        .answer = "ConsoleState"}},
      {http::verb::get,
       {"experimental", "resource"},
       &empty_object,
       {.id = "experimental.resource.list",
        .summary = "The MCP servers' resources: none are read",
        .answer = "McpResourceMap"}},
      {http::verb::get,
       {"experimental", "workspace"},
       &empty_list,
       {.id = "experimental.workspace.list",
        .summary = "The workspaces: none",
        .answer = "WorkspaceList"}},
      {http::verb::get,
       {"experimental", "workspace", "status"},
       &empty_list,
       {.id = "experimental.workspace.status",
        .summary = "The workspaces' connections: none",
        .answer = "WorkspaceStatusList"}},
  };
}

}  // namespace sb::server
