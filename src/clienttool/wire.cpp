#include "clienttool/wire.hpp"

#include <limits>
#include <set>
#include <unordered_map>

namespace sb::clienttool {

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 128) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

Result<void> parse_spec_options(const json::object& tool, std::string_view at, ToolSpec& spec) {
  auto description = get_string(tool, "description", at);
  if (!description) return description.error();
  spec.description = description->value_or("");
  auto interactive = get_bool(tool, "interactive", at);
  if (!interactive) return interactive.error();
  spec.interactive = interactive->value_or(false);
  return {};
}

Result<std::vector<ToolSpec>> parse_tool_specs(const json::value* tools, std::string_view path) {
  if (!tools || tools->is_null())
    return make_error(ErrorCode::InvalidRequest, std::string(path) + " is required");
  if (!tools->is_array())
    return make_error(ErrorCode::InvalidRequest, std::string(path) + " must be an array, got " +
                                                     std::string(kind_name(*tools)));
  std::vector<ToolSpec> specs;
  const json::array& arr = tools->get_array();
  specs.reserve(arr.size());
  std::unordered_map<std::string, std::size_t> seen;  // name -> its index
  for (std::size_t i = 0; i < arr.size(); ++i) {
    std::string at = std::string(path) + "[" + std::to_string(i) + "]";
    if (!arr[i].is_object())
      return make_error(ErrorCode::InvalidRequest,
                        at + " must be an object, got " + std::string(kind_name(arr[i])));
    const json::object& t = arr[i].get_object();
    ToolSpec spec;
    auto id = get_string(t, "id", at);
    if (!id) return id.error();
    if (!*id) return make_error(ErrorCode::InvalidRequest, at + ".id is required");
    // Twice in one registration is a mistake (the second silently replaced the first, and
    // the answer listed the id twice): say which.
    if (auto [first, fresh] = seen.try_emplace(**id, i); !fresh)
      return make_error(ErrorCode::InvalidRequest,
                        at + ".id \"" + **id + "\" is already " + std::string(path) + "[" +
                            std::to_string(first->second) + "].id: each tool once");
    spec.name = std::move(**id);
    if (auto r = parse_spec_options(t, at, spec); !r) return r.error();
    if (auto p = t.find("parameters"); p != t.end() && !p->value().is_null())
      spec.parameters = p->value();
    else
      spec.parameters = json::object{{"type", "object"}, {"properties", json::object{}}};
    specs.push_back(std::move(spec));
  }
  return specs;
}

Result<void> check_spec_limits(const std::vector<ToolSpec>& specs,
                               const std::vector<std::string>& registered, const SpecLimits& limits,
                               std::string_view path) {
  std::set<std::string> names(registered.begin(), registered.end());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    std::string at = std::string(path) + "[" + std::to_string(i) + "]";
    if (specs[i].description.size() > limits.max_description_bytes)
      return make_error(ErrorCode::TooLarge, at + ".description is " +
                                                 std::to_string(specs[i].description.size()) +
                                                 " bytes, over the limit of " +
                                                 std::to_string(limits.max_description_bytes) +
                                                 " (clientTools.maxDescriptionBytes)");
    std::size_t schema = json::serialize(specs[i].parameters).size();
    if (schema > limits.max_schema_bytes)
      return make_error(ErrorCode::TooLarge, at + ".parameters is " + std::to_string(schema) +
                                                 " bytes as JSON, over the limit of " +
                                                 std::to_string(limits.max_schema_bytes) +
                                                 " (clientTools.maxSchemaBytes)");
    names.insert(specs[i].name);
  }
  if (names.size() > limits.max_tools_per_client)
    return make_error(ErrorCode::TooLarge,
                      "a client may have at most " + std::to_string(limits.max_tools_per_client) +
                          " tools (clientTools.maxToolsPerClient); this registration would make " +
                          std::to_string(names.size()));
  return {};
}

Result<std::optional<std::vector<std::string>>> parse_string_list(const json::object& obj,
                                                                  std::string_view key) {
  auto arr = get_array(obj, key);
  if (!arr) return arr.error();
  if (!*arr) return std::optional<std::vector<std::string>>{};
  std::vector<std::string> out;
  for (std::size_t i = 0; i < (*arr)->size(); ++i) {
    const json::value& v = (**arr)[i];
    if (!v.is_string())
      return make_error(ErrorCode::InvalidRequest, std::string(key) + "[" + std::to_string(i) +
                                                       "] must be a string, got " +
                                                       std::string(kind_name(v)));
    out.emplace_back(v.get_string());
  }
  return std::optional<std::vector<std::string>>{std::move(out)};
}

Result<ToolResponse> parse_tool_response(const json::object& body) {
  const json::object* fields = &body;
  std::string prefix;
  auto nested = get_object(body, "result");
  if (!nested) return nested.error();
  if (*nested) {
    fields = *nested;
    prefix = "result";
  }
  auto status = get_string(*fields, "status", prefix);
  if (!status) return status.error();
  if (!*status)
    return make_error(ErrorCode::InvalidRequest,
                      field_path(prefix, "status") + " is required (\"success\" or \"error\")");
  ToolResponse res;
  if (**status == "error") {
    res.success = false;
    auto error = get_string(*fields, "error", prefix);
    if (!error) return error.error();
    res.error = error->value_or("");
    if (res.error.empty()) res.error = "Client tool failed without a message";
    return res;
  }
  if (**status != "success")
    return make_error(ErrorCode::InvalidRequest, field_path(prefix, "status") +
                                                     " must be \"success\" or \"error\", got \"" +
                                                     **status + "\"");
  auto title = get_string(*fields, "title", prefix);
  if (!title) return title.error();
  auto output = get_string(*fields, "output", prefix);
  if (!output) return output.error();
  auto metadata = get_object(*fields, "metadata", prefix);
  if (!metadata) return metadata.error();
  auto attachments = get_array(*fields, "attachments", prefix);
  if (!attachments) return attachments.error();
  res.title = title->value_or("");
  res.output = output->value_or("");
  if (*metadata) res.metadata = **metadata;
  if (*attachments) res.attachments = **attachments;
  return res;
}

json::object to_json(const ToolDefinition& def) {
  json::object out{
      {"id", def.id}, {"description", def.description}, {"parameters", def.parameters}};
  if (def.interactive) out["interactive"] = true;
  if (!def.session_id.empty()) out["sessionID"] = def.session_id;
  return out;
}

namespace {
// Appends `"key":` and the JSON string of `value`.
void append_field(std::string& out, std::string_view key, std::string_view value) {
  out.push_back('"');
  out.append(key);
  out.append("\":");
  append_json_string(out, value);
}
}  // namespace

std::string serialize(const ExecutionRequest& req, const json::object& input) {
  std::string out = R"({"type":"client-tool-request",)";
  append_field(out, "requestID", req.request_id);
  out.push_back(',');
  append_field(out, "sessionID", req.session_id);
  out.push_back(',');
  append_field(out, "messageID", req.message_id);
  out.push_back(',');
  append_field(out, "callID", req.call_id);
  out.push_back(',');
  append_field(out, "tool", req.tool);
  out.append(R"(,"input":)");
  out.append(json::serialize(input));
  out.push_back('}');
  return out;
}

// The tree for the bus event is read back from the text, so that the shape has one writer. The
// input was a tree already: no depth limit, and bytes that are not UTF-8 pass as they did.
json::object to_json(const ExecutionRequest& req, const json::object& input) {
  json::parse_options opts;
  opts.max_depth = std::numeric_limits<std::size_t>::max();
  opts.allow_invalid_utf8 = true;
  return std::move(json::parse(serialize(req, input), {}, opts).as_object());
}

std::string serialize(const ToolResponse& res) {
  std::string out = res.success ? R"({"status":"success",)" : R"({"status":"error",)";
  if (!res.success) {
    append_field(out, "error", res.error);
    out.push_back('}');
    return out;
  }
  append_field(out, "title", res.title);
  out.push_back(',');
  append_field(out, "output", res.output);
  out.append(R"(,"metadata":)");
  out.append(json::serialize(res.metadata));
  if (!res.attachments.empty()) {
    out.append(R"(,"attachments":)");
    out.append(json::serialize(res.attachments));
  }
  out.push_back('}');
  return out;
}

json::array to_json(const std::vector<std::string>& strings) {
  json::array out;
  out.reserve(strings.size());
  for (const auto& s : strings)
    out.emplace_back(s);
  return out;
}

json::object to_json(const WaitingCall& call) {
  return json::object{{"requestID", call.request_id},
                      {"clientID", call.client_id},
                      {"tool", call.tool},
                      {"sessionID", call.session_id},
                      {"messageID", call.message_id},
                      {"callID", call.call_id},
                      {"interactive", call.interactive},
                      {"seq", call.seq},
                      {"timeoutMs", call.timeout_ms},
                      {"deadline", call.deadline},
                      {"hardDeadline", call.hard_deadline}};
}

Result<WaitingCall> waiting_call_from_json(const json::object& o) {
  WaitingCall call;
  for (auto [key, field] : {std::pair{"requestID", &call.request_id},
                            {"clientID", &call.client_id},
                            {"tool", &call.tool},
                            {"sessionID", &call.session_id},
                            {"messageID", &call.message_id},
                            {"callID", &call.call_id}}) {
    auto text = require_string(o, key, "waiting call");
    if (!text) return text.error();
    *field = std::move(*text);
  }
  auto interactive = get_bool(o, "interactive", "waiting call");
  if (!interactive) return interactive.error();
  call.interactive = interactive->value_or(false);
  for (auto [key, field] : {std::pair{"timeoutMs", &call.timeout_ms},
                            {"deadline", &call.deadline},
                            {"hardDeadline", &call.hard_deadline}}) {
    auto number = get_int(o, key, "waiting call");
    if (!number) return number.error();
    if (!*number)
      return make_error(ErrorCode::InvalidRequest,
                        std::string("waiting call: ") + key + " is required");
    *field = **number;
  }
  auto seq = get_int(o, "seq", "waiting call");
  if (!seq) return seq.error();
  if (!*seq || **seq < 0)
    return make_error(ErrorCode::InvalidRequest, "waiting call: seq must be a number >= 0");
  call.seq = static_cast<std::uint64_t>(**seq);
  return call;
}

}  // namespace sb::clienttool
