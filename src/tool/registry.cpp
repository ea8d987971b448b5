#include "tool/registry.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
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

void ToolRegistry::merge() {
  server_.clear();
  std::set<std::string_view> seen;
  for (const auto* list : {&builtin_, &custom_})
    for (const auto& t : *list) {
      if (t->id() == "batch" && !options_.batch_tool) continue;
      if (seen.insert(t->id()).second) server_.push_back(t);
    }
}

std::vector<std::string> ToolRegistry::ids() const {
  std::vector<std::string> out;
  for (const auto& t : server_)
    out.push_back(t->id());
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
      if (!def.session_id.empty() && def.session_id != session_id) continue;
      if (!server_ids.count(id)) out.push_back(make_client_tool(client_tools_, std::move(def)));
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
  return make_client_tool(client_tools_, std::move(*def));
}

namespace {

class ClientTool final : public Tool {
 public:
  ClientTool(std::shared_ptr<clienttool::ClientToolRegistry> registry,
             clienttool::ToolDefinition def)
      : registry_(std::move(registry)), def_(std::move(def)) {
    if (def_.parameters.is_object()) parameters_ = def_.parameters.get_object();
  }
  const std::string& id() const override { return def_.id; }
  const std::string& description() const override { return def_.description; }
  const json::object& parameters() const override { return parameters_; }

  boost::asio::awaitable<Result<ToolResult>> execute(json::object args, ToolContext& ctx) override {
    using Channel = boost::asio::experimental::concurrent_channel<void(boost::system::error_code,
                                                                       clienttool::ExecuteOutcome)>;
    auto channel = std::make_shared<Channel>(co_await boost::asio::this_coro::executor, 1);
    clienttool::ExecuteParams params;
    params.tool = def_.id;
    params.input = std::move(args);
    params.session_id = ctx.session_id;
    params.message_id = ctx.message_id;
    params.call_id = ctx.call_id;
    auto started = registry_->execute(
        std::move(params),
        [channel](clienttool::ExecuteOutcome outcome) {
          channel->try_send(boost::system::error_code{}, std::move(outcome));
        },
        [&ctx](const clienttool::Progress& p) { ctx.report(p.title, p.metadata); });
    if (!started) co_return started.error();
    // An abort of the turn becomes a cancel for the client; the call then ends at once.
    AbortSignal::Registration on_abort(
        ctx.abort, [registry = registry_, id = started->request_id, signal = ctx.abort] {
          registry->cancel(id, signal->reason().empty() ? "aborted" : signal->reason());
        });
    auto [ec, outcome] =
        co_await channel->async_receive(boost::asio::as_tuple(boost::asio::use_awaitable));
    if (ec) co_return make_error(ErrorCode::Internal, "client tool channel: " + ec.message());
    if (!outcome) co_return outcome.error();
    if (!outcome->success) co_return make_error(ErrorCode::InvalidRequest, outcome->error);
    co_return ToolResult{outcome->title, outcome->output, outcome->metadata, outcome->attachments};
  }

 private:
  std::shared_ptr<clienttool::ClientToolRegistry> registry_;
  clienttool::ToolDefinition def_;
  json::object parameters_;
};

}  // namespace

ToolPtr make_client_tool(std::shared_ptr<clienttool::ClientToolRegistry> registry,
                         clienttool::ToolDefinition definition) {
  return std::make_shared<ClientTool>(std::move(registry), std::move(definition));
}

}  // namespace sb::tool
