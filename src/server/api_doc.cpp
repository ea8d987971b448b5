#include "server/api_doc.hpp"

#include <charconv>
#include <map>
#include <set>

#include "clienttool/schema.hpp"
#include "server/routes.hpp"
#include "util/log.hpp"
#include "util/text.hpp"

namespace sb::server {

// Generated from src/server/api/*.json (cmake/embed_api_schemas.cmake): {file name, text}.
const std::vector<std::pair<std::string_view, std::string_view>>& api_schema_files();

namespace {

// The components of every schema file, merged; what was wrong with them.
struct Components {
  json::object schemas;
  json::object parameters;
  std::vector<std::string> problems;
};

const Components& components() {
  static const Components merged = [] {
    Components c;
    for (auto [file, text] : api_schema_files()) {
      boost::system::error_code ec;
      json::value doc = json::parse(text, ec);
      if (ec || !doc.is_object()) {
        c.problems.push_back(std::string(file) + " is not a JSON object" +
                             (ec ? ": " + ec.message() : ""));
        continue;
      }
      for (const auto& [section, value] : doc.get_object()) {
        json::object* into = section == "schemas"      ? &c.schemas
                             : section == "parameters" ? &c.parameters
                                                       : nullptr;
        if (!into || !value.is_object()) {
          c.problems.push_back(std::string(file) + ": \"" + std::string(section) +
                               "\" is not a section (\"schemas\" or \"parameters\", objects)");
          continue;
        }
        for (const auto& [name, def] : value.get_object()) {
          if (into->contains(name))
            c.problems.push_back(std::string(file) + ": " + std::string(section) + "." +
                                 std::string(name) + " is defined twice");
          else
            into->emplace(name, def);
        }
      }
    }
    return c;
  }();
  return merged;
}

std::vector<std::string_view> words(std::string_view text) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    auto space = text.find(' ');
    if (space != 0) out.push_back(text.substr(0, space));
    if (space == std::string_view::npos) break;
    text.remove_prefix(space + 1);
  }
  return out;
}

json::object ref(std::string_view section, std::string_view name) {
  return json::object{{"$ref", "#/components/" + std::string(section) + "/" + std::string(name)}};
}

std::string path_of(const Route& route) {
  std::string path;
  for (auto segment : route.pattern)
    path.append("/").append(segment);
  return path.empty() ? "/" : path;
}

// Every status a route may answer: its success, the ones its doc names, and those of every route.
std::set<int> statuses_of(const RouteDoc& doc) {
  // 503: the store (PostgreSQL) cannot be reached, which any route that reads or writes it meets.
  std::set<int> out{doc.status, 401, 403, 500, 503};
  if (!doc.body.empty() || !doc.query.empty()) out.insert({400, 413});
  for (auto word : words(doc.statuses)) {
    int status = 0;
    std::from_chars(word.data(), word.data() + word.size(), status);
    out.insert(status);
  }
  return out;
}

json::object operation(const Route& route) {
  const RouteDoc& doc = route.doc;
  json::object op{{"operationId", doc.id},
                  {"summary", doc.summary},
                  {"tags", json::array{json::string(doc.id.substr(0, doc.id.find('.')))}}};
  json::array parameters;
  for (auto segment : route.pattern)
    if (segment.starts_with('{'))
      parameters.push_back(json::object{{"name", segment.substr(1, segment.size() - 2)},
                                        {"in", "path"},
                                        {"required", true},
                                        {"schema", {{"type", "string"}}}});
  for (auto name : words(doc.query))
    parameters.push_back(ref("parameters", name));
  if (!parameters.empty()) op["parameters"] = std::move(parameters);
  if (!doc.body.empty())
    op["requestBody"] = {
        {"required", !doc.body_optional},
        {"content", {{"application/json", {{"schema", ref("schemas", doc.body)}}}}}};
  json::object responses;
  for (int status : statuses_of(doc)) {
    json::object response;
    if (status == doc.status) {
      response["description"] = doc.summary;
      if (doc.media == "websocket") {
        response["description"] = std::string(doc.summary) + " (a WebSocket: see docs/api.md)";
      } else if (!doc.answer.empty()) {
        response["content"] = {{doc.media, {{"schema", ref("schemas", doc.answer)}}}};
      } else if (doc.media != "application/json") {
        response["content"] = {{doc.media, {{"schema", {{"type", "string"}}}}}};
      }
    } else {
      response["description"] = http::obsolete_reason(static_cast<http::status>(status));
      if (status >= 400)
        response["content"] = {{"application/json", {{"schema", ref("schemas", doc.error)}}}};
    }
    responses[std::to_string(status)] = std::move(response);
  }
  op["responses"] = std::move(responses);
  return op;
}

json::object build_document() {
  json::object paths;
  for (const auto& route : routes()) {
    std::string method = ascii_lower(http::to_string(route.method));
    json::value& item = paths[path_of(route)];
    if (!item.is_object()) item = json::object();
    item.as_object()[method] = operation(route);
  }
  const Components& c = components();
  json::object info{{"title", "Switchboard"},
                    {"version", SWITCHBOARD_VERSION},
                    {"description",
                     "An agent server whose tools may run on its clients. The session API follows "
                     "OpenCode's; docs/api.md describes every route in prose."}};
  // server.password, when it is set (docs/security.md): as a bearer token or HTTP Basic with
  // any user name; `{}` in `security`: a server without a password needs neither.
  json::object schemes{
      {"bearer", {{"type", "http"}, {"scheme", "bearer"}, {"description", "server.password"}}},
      {"basic",
       {{"type", "http"}, {"scheme", "basic"}, {"description", "server.password, any user"}}}};
  json::object parts{{"schemas", c.schemas},
                     {"parameters", c.parameters},
                     {"securitySchemes", std::move(schemes)}};
  json::array security{json::object{{"bearer", json::array()}},
                       json::object{{"basic", json::array()}}, json::object()};
  return json::object{{"openapi", "3.1.0"},
                      {"info", std::move(info)},
                      {"security", std::move(security)},
                      {"paths", std::move(paths)},
                      {"components", std::move(parts)}};
}

// Every "$ref" inside `value`.
void collect_refs(const json::value& value, std::set<std::string>& out) {
  if (const auto* obj = value.if_object()) {
    for (const auto& [key, v] : *obj) {
      if (key == "$ref" && v.is_string()) out.insert(std::string(v.get_string()));
      collect_refs(v, out);
    }
  } else if (const auto* arr = value.if_array()) {
    for (const auto& v : *arr)
      collect_refs(v, out);
  }
}

// ---- the check ---------------------------------------------------------------------------------

// `value` with each "$ref" to a component schema pointing into "$defs" instead, where the
// compiler looks for what a "$ref" names.
void rebase_refs(json::value& value) {
  static constexpr std::string_view from = "#/components/schemas/";
  if (auto* obj = value.if_object()) {
    for (auto& [key, v] : *obj) {
      if (key == "$ref" && v.is_string() && v.get_string().starts_with(from))
        v = "#/$defs/" + std::string(v.get_string().subview(from.size()));
      else
        rebase_refs(v);
    }
  } else if (auto* arr = value.if_array()) {
    for (auto& v : *arr)
      rebase_refs(v);
  }
}

// One compiled validator per schema name, made when first needed (only under the check). Used on
// the server's one executor (and by the unit tests' one thread): no lock.
Result<std::shared_ptr<const clienttool::CompiledSchema>> validator(std::string_view name) {
  static std::map<std::string, std::shared_ptr<const clienttool::CompiledSchema>, std::less<>> made;
  if (auto it = made.find(name); it != made.end()) return it->second;
  // The schema and those it names (only those: a check compiles what it uses, not the whole
  // document, on its first call).
  const std::string_view prefix = "#/components/schemas/";
  json::object defs;
  std::vector<std::string> todo{std::string(name)};
  while (!todo.empty()) {
    std::string next = std::move(todo.back());
    todo.pop_back();
    const json::value* schema = components().schemas.if_contains(next);
    if (!schema || defs.contains(next)) continue;
    std::set<std::string> refs;
    collect_refs(*schema, refs);
    for (const auto& r : refs)
      if (r.starts_with(prefix)) todo.push_back(r.substr(prefix.size()));
    json::value copy = *schema;
    rebase_refs(copy);
    defs.emplace(next, std::move(copy));
  }
  json::object root{{"$ref", "#/$defs/" + std::string(name)}, {"$defs", std::move(defs)}};
  auto compiled = clienttool::CompiledSchema::compile(root);
  if (!compiled) return compiled.error();
  made.emplace(std::string(name), *compiled);
  return *compiled;
}

// Empty when `text` is JSON that matches the schema `name`; else what is wrong.
std::string schema_mismatch(std::string_view text, std::string_view name, std::string_view what) {
  boost::system::error_code ec;
  json::value value = json::parse(text, ec);
  if (ec) return std::string(what) + " is not JSON: " + ec.message();
  auto v = validator(name);
  if (!v) return "the schema " + std::string(name) + " does not compile: " + v.error().message;
  if (auto valid = (*v)->validate(value); !valid)
    return std::string(what) + " does not match " + std::string(name) + ": " +
           valid.error().message;
  return {};
}

std::string check(const Route& route, const Request& req, const Response& res) {
  const RouteDoc& doc = route.doc;
  int status = static_cast<int>(res.result_int());
  if (!statuses_of(doc).contains(status))
    return "answered " + std::to_string(status) + ", which is not documented";
  if (status >= 400) return schema_mismatch(res.body(), doc.error, "the error");
  if (status != doc.status) return {};  // a documented redirect or 304 has no body
  if (!doc.body.empty() && !req.body().empty())
    if (auto bad = schema_mismatch(req.body(), doc.body, "the accepted body"); !bad.empty())
      return bad;
  auto type = res[http::field::content_type];
  if (doc.media == "application/json") {
    if (!type.starts_with("application/json"))
      return doc.answer.empty() && res.body().empty()
                 ? std::string()
                 : "answered " + std::string(type) + " instead of application/json";
    if (doc.answer.empty()) return "answered JSON but documents no answer";
    return schema_mismatch(res.body(), doc.answer, "the answer");
  }
  if (doc.media != "*/*" && !type.starts_with(doc.media))
    return "answered " + std::string(type) + " instead of " + std::string(doc.media);
  return {};
}

}  // namespace

const json::object& api_document() {
  static const json::object document = build_document();
  return document;
}

const std::string& api_document_text() {
  static const std::string text = json::serialize(api_document());
  return text;
}

std::vector<std::string> api_document_problems() {
  const Components& c = components();
  std::vector<std::string> out = c.problems;
  std::set<std::string_view> ids;
  std::set<std::string> refs;
  for (const auto& route : routes()) {
    std::string where = std::string(http::to_string(route.method)) + " " + path_of(route);
    const RouteDoc& doc = route.doc;
    if (doc.id.empty() || doc.summary.empty()) out.push_back(where + " has no id or summary");
    if (!doc.id.empty() && !ids.insert(doc.id).second)
      out.push_back(where + ": the operationId " + std::string(doc.id) + " is used twice");
    for (auto segment : route.pattern)
      if (segment.starts_with('{') && (segment.size() < 3 || !segment.ends_with('}')))
        out.push_back(where + ": a path parameter needs a name, {name}");
    for (auto name : {doc.body, doc.answer, doc.error})
      if (!name.empty()) refs.insert("#/components/schemas/" + std::string(name));
    for (auto name : words(doc.query))
      refs.insert("#/components/parameters/" + std::string(name));
    for (auto word : words(doc.statuses)) {
      int status = 0;
      auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), status);
      if (ec != std::errc() || end != word.data() + word.size() || status < 100 || status > 599)
        out.push_back(where + ": \"" + std::string(word) + "\" is not a status");
    }
  }
  refs.insert("#/components/schemas/Error");
  collect_refs(c.schemas, refs);
  collect_refs(c.parameters, refs);
  for (const auto& r : refs) {
    std::string_view rest = r;
    const json::object* section = nullptr;
    if (rest.starts_with("#/components/schemas/")) {
      rest.remove_prefix(std::string_view("#/components/schemas/").size());
      section = &c.schemas;
    } else if (rest.starts_with("#/components/parameters/")) {
      rest.remove_prefix(std::string_view("#/components/parameters/").size());
      section = &c.parameters;
    }
    if (!section || !section->contains(rest)) out.push_back(r + " is named but not defined");
  }
  return out;
}

std::optional<Response> check_exchange(const Route& route, const Request& req,
                                       const Response& res) {
  std::string problem = check(route, req, res);
  if (problem.empty()) return std::nullopt;
  std::string message = "API doc check: " + std::string(req.method_string()) + " " +
                        std::string(req.target()) + " (" + std::string(route.doc.id) + ") " +
                        problem;
  log::error(message);
  return error_response(make_error(ErrorCode::Internal, std::move(message)), req);
}

void check_stream_frame(std::string_view where, std::string_view name, std::string_view frame) {
  for (std::size_t at = 0; at < frame.size();) {
    auto end = std::min(frame.find("\n\n", at), frame.size());
    std::string_view event = frame.substr(at, end - at);
    at = end + 2;
    // Each event here has one data line (the server writes JSON on one line).
    auto data = event.find("data: ");
    if (data == std::string_view::npos || (data != 0 && event[data - 1] != '\n')) continue;
    std::string_view text = event.substr(data + 6);
    text = text.substr(0, text.find('\n'));
    if (auto bad = schema_mismatch(text, name, "an event"); !bad.empty())
      log::error("API doc check: ", where, " ", bad, ": ", text.substr(0, 2000));
  }
}

}  // namespace sb::server
