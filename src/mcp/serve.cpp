#include "mcp/serve.hpp"

#include <algorithm>

namespace sb::mcp {

namespace {

bool visible(const clienttool::ToolDefinition& def, const std::optional<std::string>& client_id) {
  if (client_id) return def.client_id == *client_id;
  return def.session_id.empty();
}

void mark_complete(json::object& result, bool modern) {
  if (modern) result["resultType"] = "complete";
}

// 2026-07-28 list results say how long a host may cache them: not at all (tools come and go with
// their clients), and only for this caller (what it sees depends on ?clientID=).
void no_caching(json::object& result, bool modern) {
  if (!modern) return;
  result["ttlMs"] = 0;
  result["cacheScope"] = "private";
}

}  // namespace

bool served_version(std::string_view version) {
  return std::find(std::begin(kServedVersions), std::end(kServedVersions), version) !=
         std::end(kServedVersions);
}

json::object initialize_result(const json::object& params) {
  std::string asked;
  if (auto v = params.if_contains("protocolVersion"); v && v->is_string()) asked = v->get_string();
  std::string version = served_version(asked) && asked != kServedVersions[0]
                            ? asked
                            : std::string(kServedVersions[1]);
  return json::object{
      {"protocolVersion", version},
      {"capabilities", json::object{{"tools", json::object{{"listChanged", true}}}}},
      {"serverInfo", json::object{{"name", "switchboard-client-tools"}, {"version", "1.0.0"}}},
      {"instructions",
       "Tools of the applications connected to this Switchboard server; each call runs in the "
       "application that registered the tool."}};
}

json::object discover_result() {
  json::array versions;
  for (auto v : kServedVersions)
    versions.emplace_back(v);
  return json::object{
      {"resultType", "complete"},
      {"supportedVersions", std::move(versions)},
      {"capabilities", json::object{{"tools", json::object{{"listChanged", true}}}}},
      {"_meta",
       json::object{{"io.modelcontextprotocol/serverInfo",
                     json::object{{"name", "switchboard-client-tools"}, {"version", "1.0.0"}}}}}};
}

json::object list_result(const clienttool::ClientToolRegistry& registry,
                         const std::optional<std::string>& client_id, bool modern) {
  json::array tools;
  for (const auto& [id, def] : registry.get_all_tools()) {
    if (!visible(*def, client_id)) continue;
    json::object tool{{"name", id}, {"description", def->description}};
    tool["inputSchema"] = def->parameters.is_object() ? def->parameters : json::object{};
    if (def->interactive)
      tool["annotations"] = json::object{{"title", def->name + " (asks a person)"}};
    tools.push_back(std::move(tool));
  }
  json::object out{{"tools", std::move(tools)}};
  mark_complete(out, modern);
  no_caching(out, modern);
  return out;
}

Result<clienttool::ExecuteParams> call_params(const clienttool::ClientToolRegistry& registry,
                                              const json::object& params,
                                              const std::optional<std::string>& client_id) {
  auto name = params.if_contains("name");
  if (!name || !name->is_string() || name->get_string().empty())
    return make_error(ErrorCode::InvalidRequest, "params.name must be the tool's name");
  auto def = registry.get_tool(std::string(name->get_string()));
  if (!def || !visible(*def, client_id))
    return make_error(ErrorCode::NotFound, "Unknown tool: " + std::string(name->get_string()));
  clienttool::ExecuteParams out;
  out.tool = def->id;
  out.definition = def;
  if (auto args = params.if_contains("arguments"); args && !args->is_null()) {
    if (!args->is_object())
      return make_error(ErrorCode::InvalidRequest, "params.arguments must be an object");
    out.input = args->get_object();
  }
  return out;
}

json::object call_result(const clienttool::ExecuteOutcome& outcome, bool modern) {
  json::array content;
  bool is_error = false;
  if (!outcome) {
    is_error = true;
    content.push_back(json::object{{"type", "text"}, {"text", outcome.error().message}});
  } else if (!outcome->success) {
    is_error = true;
    content.push_back(json::object{{"type", "text"}, {"text", outcome->error}});
  } else {
    if (!outcome->output.empty() || outcome->attachments.empty())
      content.push_back(json::object{{"type", "text"}, {"text", outcome->output}});
    // data:MIME;base64,DATA attachments of images become image content; others are named.
    for (const auto& a : outcome->attachments) {
      if (!a.is_object()) continue;
      const auto& att = a.get_object();
      std::string url = att.contains("url") && att.at("url").is_string()
                            ? std::string(att.at("url").get_string())
                            : std::string();
      std::string mime = att.contains("mime") && att.at("mime").is_string()
                             ? std::string(att.at("mime").get_string())
                             : std::string();
      auto comma = url.find(";base64,");
      if (url.starts_with("data:") && comma != std::string::npos &&
          (mime.starts_with("image/") || mime.starts_with("audio/"))) {
        content.push_back(json::object{{"type", mime.starts_with("image/") ? "image" : "audio"},
                                       {"data", url.substr(comma + 8)},
                                       {"mimeType", mime}});
      } else {
        content.push_back(json::object{{"type", "text"}, {"text", "Attachment: " + url}});
      }
    }
  }
  json::object out{{"content", std::move(content)}, {"isError", is_error}};
  mark_complete(out, modern);
  return out;
}

Message progress_notification(const json::value& token, int n, const clienttool::Progress& p) {
  json::object params{{"progressToken", token}, {"progress", n}};
  if (p.title)
    params["message"] = *p.title;
  else if (auto m = p.metadata.if_contains("message"); m && m->is_string())
    params["message"] = *m;
  return notification("notifications/progress", std::move(params));
}

}  // namespace sb::mcp
