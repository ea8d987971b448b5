#include "mcp/tool.hpp"

namespace sb::mcp {

namespace {

class McpTool final : public tool::Tool {
 public:
  McpTool(std::string server, ToolInfo info,
          std::shared_ptr<const clienttool::CompiledSchema> schema, std::weak_ptr<Client> client,
          std::shared_ptr<ActiveCalls> calls)
      : server_(std::move(server)),
        id_(tool_id(server_, info.name)),
        info_(std::move(info)),
        schema_(std::move(schema)),
        client_(std::move(client)),
        calls_(std::move(calls)) {
    if (info_.description.empty())
      info_.description = info_.title.empty() ? info_.name : info_.title;
  }
  const std::string& id() const override { return id_; }
  const std::string& description() const override { return info_.description; }
  const json::object& parameters() const override { return info_.input_schema; }
  const clienttool::CompiledSchema& schema() const override { return *schema_; }

  boost::asio::awaitable<Result<tool::ToolResult>> execute(json::object args,
                                                           tool::ToolContext& ctx) override {
    tool::PermissionRequest request;
    request.permission = id_;
    request.patterns = {"*"};
    request.always = {"*"};
    request.metadata = json::object{{"tool", id_}, {"server", server_}};
    if (auto allowed = co_await ctx.request_permission(std::move(request)); !allowed)
      co_return allowed.error();
    auto client = client_.lock();
    if (!client || !client->connected())
      co_return make_error(ErrorCode::Unavailable, "MCP server " + server_ + " is not connected");
    // Named, not a temporary in the co_await: GCC 12 destroys those twice.
    ProgressHandler progress = [report = ctx.metadata](const Progress& p) {
      if (!report) return;
      json::object meta{{"progress", p.progress}};
      if (p.total) meta["total"] = *p.total;
      if (!p.message.empty()) meta["message"] = p.message;
      report(std::nullopt, json::object{{"progress", std::move(meta)}});
    };
    // Known while it runs, for a question the server may ask.
    struct Active {
      std::shared_ptr<ActiveCalls> calls;
      std::string id;
      ~Active() {
        if (calls) calls->erase(id);
      }
    } active{calls_, ctx.call_id};
    if (calls_) (*calls_)[ctx.call_id] = &ctx;
    auto result = co_await client->call_tool(info_.name, std::move(args), ctx.call_id,
                                             std::move(progress), ctx.abort);
    if (!result) co_return result.error();
    co_return to_tool_result(*result, server_);
  }

 private:
  std::string server_;
  std::string id_;
  ToolInfo info_;
  std::shared_ptr<const clienttool::CompiledSchema> schema_;
  std::weak_ptr<Client> client_;
  std::shared_ptr<ActiveCalls> calls_;
};

}  // namespace

std::string tool_id(std::string_view server, std::string_view tool) {
  std::string id;
  id.reserve(server.size() + 1 + tool.size());
  id.append(server).append("_").append(tool);
  for (auto& c : id) {
    auto u = static_cast<unsigned char>(c);
    if (!std::isalnum(u) && c != '_' && c != '-') c = '_';
  }
  return id;
}

Result<tool::ToolResult> to_tool_result(const json::object& result, const std::string& server) {
  tool::ToolResult out;
  std::string text;
  auto add = [&](const std::string& piece) {
    if (piece.empty()) return;
    if (!text.empty()) text += "\n";
    text += piece;
  };
  bool has_text = false;
  if (auto content = result.if_contains("content"); content && content->is_array()) {
    int n = 0;
    for (const auto& item : content->get_array()) {
      ++n;
      if (!item.is_object()) continue;
      const auto& c = item.get_object();
      std::string type = string_or(c, "type");
      if (type == "text") {
        has_text = true;
        add(string_or(c, "text"));
      } else if (type == "image" || type == "audio") {
        std::string mime = string_or(c, "mimeType");
        std::string data = string_or(c, "data");
        if (mime.empty() || data.empty()) continue;
        out.attachments.push_back(json::object{{"type", "file"},
                                               {"mime", mime},
                                               {"url", "data:" + mime + ";base64," + data},
                                               {"filename", type + "-" + std::to_string(n)}});
      } else if (type == "resource") {
        auto res = c.if_contains("resource");
        if (!res || !res->is_object()) continue;
        const auto& r = res->get_object();
        std::string uri = string_or(r, "uri");
        std::string body = string_or(r, "text");
        add(body.empty() ? "Resource: " + uri : "Resource " + uri + ":\n" + body);
        has_text = true;
      } else if (type == "resource_link") {
        std::string name = string_or(c, "name");
        std::string uri = string_or(c, "uri");
        add("Resource link: " + (name.empty() ? uri : name + " (" + uri + ")"));
        has_text = true;
      }
    }
  }
  if (!has_text)
    if (auto structured = result.if_contains("structuredContent");
        structured && !structured->is_null())
      add(json::serialize(*structured));
  auto is_error = result.if_contains("isError");
  if (is_error && is_error->is_bool() && is_error->get_bool())
    return make_error(ErrorCode::InvalidRequest,
                      text.empty() ? "the MCP server " + server + " reported an error" : text);
  if (text.empty() && !out.attachments.empty())
    text = std::to_string(out.attachments.size()) + " attachment(s) returned";
  out.output = std::move(text);
  out.metadata = json::object{{"server", server}};
  return out;
}

Result<tool::ToolPtr> make_tool(const std::string& server, const ToolInfo& info,
                                std::weak_ptr<Client> client, std::shared_ptr<ActiveCalls> calls) {
  auto schema = clienttool::CompiledSchema::compile(info.input_schema);
  if (!schema)
    return make_error(ErrorCode::InvalidRequest, "the input schema of " + server + "'s tool " +
                                                     info.name +
                                                     " is not usable: " + schema.error().message);
  return tool::ToolPtr(std::make_shared<McpTool>(server, info, std::move(*schema),
                                                 std::move(client), std::move(calls)));
}

}  // namespace sb::mcp
