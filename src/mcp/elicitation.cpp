#include "mcp/elicitation.hpp"

#include <charconv>

#include "clienttool/schema.hpp"

namespace sb::mcp {

namespace {

const json::object* properties_of(const json::object& params) {
  auto schema = params.if_contains("requestedSchema");
  if (!schema || !schema->is_object()) return nullptr;
  auto props = schema->get_object().if_contains("properties");
  return props && props->is_object() ? &props->get_object() : nullptr;
}

// The choices a property offers: enum, oneOf/anyOf of {const, title}, items.enum for a
// multi-select, yes/no for a boolean.
json::array options_of(const json::object& prop) {
  json::array out;
  auto add_values = [&](const json::value* list) {
    if (!list || !list->is_array()) return;
    for (const auto& v : list->get_array()) {
      if (v.is_string()) out.push_back(json::object{{"label", v.get_string()}});
      if (v.is_object()) {
        std::string label = string_or(v.get_object(), "const");
        if (label.empty()) continue;
        json::object option{{"label", label}};
        if (auto title = string_or(v.get_object(), "title"); !title.empty())
          option["description"] = title;
        out.push_back(std::move(option));
      }
    }
  };
  add_values(prop.if_contains("enum"));
  add_values(prop.if_contains("oneOf"));
  add_values(prop.if_contains("anyOf"));
  if (auto items = prop.if_contains("items"); items && items->is_object()) {
    add_values(items->get_object().if_contains("enum"));
    add_values(items->get_object().if_contains("anyOf"));
  }
  if (string_or(prop, "type") == "boolean") {
    out.push_back(json::object{{"label", "yes"}});
    out.push_back(json::object{{"label", "no"}});
  }
  return out;
}

}  // namespace

Result<json::array> elicitation_questions(const json::object& params) {
  auto props = properties_of(params);
  if (!props)
    return make_error(ErrorCode::InvalidRequest, "requestedSchema must be an object schema");
  std::string message = string_or(params, "message");
  json::array out;
  for (const auto& kv : *props) {
    if (!kv.value().is_object())
      return make_error(ErrorCode::InvalidRequest,
                        "requestedSchema.properties." + std::string(kv.key()) + " is not a schema");
    const auto& prop = kv.value().get_object();
    std::string type = string_or(prop, "type");
    if (type != "string" && type != "number" && type != "integer" && type != "boolean" &&
        type != "array")
      return make_error(ErrorCode::InvalidRequest, "requestedSchema.properties." +
                                                       std::string(kv.key()) + " has type \"" +
                                                       type + "\", which a form cannot ask");
    std::string title = string_or(prop, "title");
    std::string what = string_or(prop, "description");
    if (what.empty()) what = title.empty() ? std::string(kv.key()) : title;
    std::string question = out.empty() && !message.empty() ? message + "\n\n" + what : what;
    std::string header = title.empty() ? std::string(kv.key()) : title;
    if (header.size() > 30) header.resize(30);
    out.push_back(json::object{{"question", question},
                               {"header", header},
                               {"options", options_of(prop)},
                               {"multiple", type == "array"}});
  }
  if (out.empty() && !message.empty())
    out.push_back(json::object{{"question", message},
                               {"header", "Confirm"},
                               {"options", json::array{json::object{{"label", "ok"}}}},
                               {"multiple", false}});
  return out;
}

Result<json::object> elicitation_content(const json::object& params,
                                         const std::vector<std::vector<std::string>>& answers) {
  auto props = properties_of(params);
  json::object content;
  if (!props) return content;
  std::size_t i = 0;
  for (const auto& kv : *props) {
    if (i >= answers.size()) break;
    const auto& given = answers[i++];
    if (given.empty() || (given.size() == 1 && given[0].empty())) continue;
    const auto& prop = kv.value().get_object();
    std::string type = string_or(prop, "type");
    std::string key(kv.key());
    const std::string& text = given.front();
    auto refuse = [&](const std::string& want) {
      return make_error(ErrorCode::InvalidRequest,
                        "the answer \"" + text + "\" to " + key + " is not " + want);
    };
    if (type == "array") {
      json::array list;
      for (const auto& a : given)
        list.emplace_back(a);
      content[key] = std::move(list);
    } else if (type == "boolean") {
      if (text == "yes" || text == "true")
        content[key] = true;
      else if (text == "no" || text == "false")
        content[key] = false;
      else
        return refuse("yes or no");
    } else if (type == "integer") {
      std::int64_t v = 0;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (ec != std::errc() || end != text.data() + text.size()) return refuse("a whole number");
      content[key] = v;
    } else if (type == "number") {
      double v = 0;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (ec != std::errc() || end != text.data() + text.size()) return refuse("a number");
      content[key] = v;
    } else {
      content[key] = text;
    }
  }
  // What the schema asks beyond types (required, enum, lengths, formats) is checked as a tool's
  // input is.
  if (auto schema = params.if_contains("requestedSchema"); schema && schema->is_object()) {
    auto compiled = clienttool::CompiledSchema::compile(schema->get_object());
    if (compiled)
      if (auto valid = (*compiled)->validate(content); !valid) return valid.error();
  }
  return content;
}

}  // namespace sb::mcp
