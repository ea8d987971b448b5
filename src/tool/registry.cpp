#include "tool/registry.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <set>

namespace sb::tool {

void ToolRegistry::add_builtin(ToolPtr tool) {
  builtin_.push_back(std::move(tool));
  merge();
}

void ToolRegistry::register_tool(ToolPtr tool) {
  auto same = std::find_if(custom_.begin(), custom_.end(),
                           [&](const ToolPtr& t) { return t->id() == tool->id(); });
  if (same != custom_.end())
    *same = std::move(tool);
  else
    custom_.push_back(std::move(tool));
  merge();
}

void ToolRegistry::set_plugin_tools(const std::string& source, std::vector<ToolPtr> tools) {
  if (tools.empty())
    plugins_.erase(source);
  else
    plugins_.insert_or_assign(source, std::move(tools));
  merge();
}

void ToolRegistry::merge() {
  server_.clear();
  std::set<std::string_view> seen;
  auto add = [&](const std::vector<ToolPtr>& list) {
    for (const auto& t : list) {
      if (t->id() == "batch" && !options_.batch_tool) continue;
      if (seen.insert(t->id()).second) server_.push_back(t);
    }
  };
  add(builtin_);
  add(custom_);
  local_count_ = server_.size();
  for (const auto& [source, list] : plugins_)
    add(list);
}

std::vector<std::string> ToolRegistry::ids() const {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < local_count_; ++i)
    out.push_back(server_[i]->id());
  return out;
}

std::vector<ToolPtr> ToolRegistry::tools(const std::string& /*provider_id*/,
                                         const std::string& session_id) const {
  std::vector<ToolPtr> out = server_;
  if (client_tools_) {
    // Client tool ids are unique among themselves; a server tool of the same id wins.
    std::set<std::string_view> server_ids;  // views of ids the tools own
    for (const auto& t : out)
      server_ids.insert(t->id());
    for (auto& [id, def] : client_tools_->get_all_tools()) {
      if (!def->session_id.empty() && def->session_id != session_id) continue;
      if (!server_ids.count(def->plain_name ? def->name : id))
        out.push_back(make_client_tool(client_tools_, std::move(def)));
    }
  }
  return out;
}

ToolPtr ToolRegistry::find(const std::string& id, const std::string& session_id) const {
  for (const auto& t : server_)
    if (t->id() == id) return t;
  if (!client_tools_) return nullptr;
  auto def = client_tools_->get_tool(id);
  if (!def || (!def->session_id.empty() && def->session_id != session_id)) return nullptr;
  return make_client_tool(client_tools_, std::move(def));
}

boost::asio::awaitable<Result<ToolResult>> run_client_call(clienttool::ClientToolRegistry& registry,
                                                           clienttool::ExecuteParams params,
                                                           bool interactive, ToolContext& ctx) {
  params.session_id = ctx.session_id;
  params.message_id = ctx.message_id;
  params.call_id = ctx.call_id;
  params.cancel_reason = [abort = ctx.abort] {
    return abort->reason().empty() ? std::string("aborted") : abort->reason();
  };
  params.on_waiting = ctx.waiting;
  // An abort of the turn becomes a cancel for the client; the call then ends at once.
  auto give_up = std::make_shared<boost::asio::cancellation_signal>();
  AbortSignal::Registration on_abort(
      ctx.abort, [give_up] { give_up->emit(boost::asio::cancellation_type::terminal); });
  // Named, not temporaries in the co_await: GCC 12 destroys those twice.
  clienttool::ProgressHandler progress = [report = ctx.metadata](const clienttool::Progress& p) {
    if (report) report(p.title, p.metadata);
  };
  auto token = boost::asio::bind_cancellation_slot(give_up->slot(), boost::asio::use_awaitable);
  if (interactive) ctx.set_awaiting_person(true);
  auto outcome = co_await registry.async_execute(std::move(params), std::move(progress), token);
  if (interactive) ctx.set_awaiting_person(false);
  if (!outcome) co_return outcome.error();
  if (!outcome->success) co_return make_error(ErrorCode::InvalidRequest, outcome->error);
  co_return ToolResult{outcome->title, outcome->output, outcome->metadata, outcome->attachments};
}

namespace {

class ClientTool final : public Tool {
 public:
  ClientTool(std::shared_ptr<clienttool::ClientToolRegistry> registry,
             clienttool::ClientToolRegistry::Definition def)
      : registry_(std::move(registry)), def_(std::move(def)) {}
  const std::string& id() const override { return def_->plain_name ? def_->name : def_->id; }
  const std::string& description() const override { return def_->description; }
  // Registration accepts object schemas only.
  const json::object& parameters() const override { return def_->parameters.get_object(); }
  const clienttool::CompiledSchema& schema() const override { return *def_->schema; }
  const clienttool::ToolDefinition& definition() const { return *def_; }

  boost::asio::awaitable<Result<ToolResult>> execute(json::object args, ToolContext& ctx) override {
    PermissionRequest request;
    request.permission = "client_tools";
    request.patterns = {def_->id};
    request.always = {def_->id};
    request.metadata = json::object{{"tool", def_->id}};
    if (auto allowed = co_await ctx.request_permission(std::move(request)); !allowed)
      co_return allowed.error();
    if (ctx.abort->aborted()) co_return make_error(ErrorCode::Unavailable, "aborted");

    clienttool::ExecuteParams params;
    params.definition = def_;
    params.input_checked = true;  // the session checked it against this definition's schema
    params.input = std::move(args);
    co_return co_await run_client_call(*registry_, std::move(params), def_->interactive, ctx);
  }

 private:
  std::shared_ptr<clienttool::ClientToolRegistry> registry_;
  clienttool::ClientToolRegistry::Definition def_;
};

}  // namespace

ToolPtr make_client_tool(std::shared_ptr<clienttool::ClientToolRegistry> registry,
                         clienttool::ClientToolRegistry::Definition definition) {
  return std::make_shared<ClientTool>(std::move(registry), std::move(definition));
}

const clienttool::ToolDefinition* client_definition(const Tool& tool) {
  auto* client = dynamic_cast<const ClientTool*>(&tool);
  return client ? &client->definition() : nullptr;
}

}  // namespace sb::tool
