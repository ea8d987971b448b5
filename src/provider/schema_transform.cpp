#include "provider/schema_transform.hpp"

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <vector>

namespace sb::provider {

namespace {

// Deeper than any real tool schema; keeps a hostile one from exhausting the stack.
constexpr int kMaxSchemaDepth = 64;

// Keywords whose value is one subschema (or, for draft-4 "items", an array of them).
constexpr std::array<std::string_view, 12> kSubschemaKeywords = {"items",
                                                                 "additionalItems",
                                                                 "additionalProperties",
                                                                 "unevaluatedItems",
                                                                 "not",
                                                                 "if",
                                                                 "then",
                                                                 "else",
                                                                 "contains",
                                                                 "propertyNames",
                                                                 "unevaluatedProperties",
                                                                 "contentSchema"};
// Keywords whose value is an array of subschemas.
constexpr std::array<std::string_view, 4> kSubschemaArrayKeywords = {"allOf", "anyOf", "oneOf",
                                                                     "prefixItems"};
// Keywords whose value maps names to subschemas.
constexpr std::array<std::string_view, 5> kSubschemaMapKeywords = {
    "properties", "patternProperties", "$defs", "definitions", "dependentSchemas"};

void remove_keyword(json::object& schema, std::string_view keyword, int depth) {
  if (depth > kMaxSchemaDepth) return;
  schema.erase(keyword);
  auto visit = [&](json::value& v) {
    if (v.is_object()) remove_keyword(v.get_object(), keyword, depth + 1);
  };
  for (auto key : kSubschemaKeywords) {
    auto it = schema.find(key);
    if (it == schema.end()) continue;
    if (it->value().is_array()) {
      for (auto& item : it->value().get_array())
        visit(item);
    } else {
      visit(it->value());
    }
  }
  for (auto key : kSubschemaArrayKeywords) {
    auto it = schema.find(key);
    if (it == schema.end() || !it->value().is_array()) continue;
    for (auto& item : it->value().get_array())
      visit(item);
  }
  for (auto key : kSubschemaMapKeywords) {
    auto it = schema.find(key);
    if (it == schema.end() || !it->value().is_object()) continue;
    for (auto& entry : it->value().get_object())
      visit(entry.value());
  }
}

std::vector<std::string> string_list(const json::object& schema, std::string_view key) {
  std::vector<std::string> out;
  auto it = schema.find(key);
  if (it == schema.end() || !it->value().is_array()) return out;
  for (const auto& v : it->value().get_array())
    if (v.is_string()) out.emplace_back(v.get_string());
  return out;
}

json::object& object_member(json::object& schema, std::string_view key) {
  json::value& v = schema[key];
  if (!v.is_object()) v = json::object{};
  return v.get_object();
}

void add_required(json::object& schema, const std::vector<std::string>& names) {
  if (names.empty()) return;
  std::vector<std::string> required = string_list(schema, "required");
  json::value& slot = schema["required"];
  if (!slot.is_array()) slot = json::array{};
  json::array& array = slot.get_array();
  for (const auto& name : names) {
    if (std::find(required.begin(), required.end(), name) != required.end()) continue;
    required.push_back(name);
    array.emplace_back(name);
  }
}

void ensure_object_type(json::object& schema) {
  schema["type"] = "object";
  object_member(schema, "properties");
}

}  // namespace

void remove_schema_keyword(json::object& schema, std::string_view keyword) {
  remove_keyword(schema, keyword, 0);
}

void merge_top_level_alternatives(json::object& schema) {
  for (std::string_view keyword : {"allOf", "anyOf", "oneOf"}) {
    auto it = schema.find(keyword);
    if (it == schema.end()) continue;
    json::value alternatives = std::move(it->value());
    schema.erase(it);
    if (!alternatives.is_array()) continue;
    const bool all_apply = keyword == "allOf";
    std::optional<std::vector<std::string>> common;  // required in every alternative so far
    for (auto& alternative : alternatives.get_array()) {
      if (!alternative.is_object()) continue;
      json::object& alt = alternative.get_object();
      if (auto props = alt.find("properties"); props != alt.end() && props->value().is_object()) {
        json::object& target = object_member(schema, "properties");
        for (auto& entry : props->value().get_object())
          if (!target.contains(entry.key())) target.emplace(entry.key(), std::move(entry.value()));
      }
      std::vector<std::string> required = string_list(alt, "required");
      if (all_apply) {
        add_required(schema, required);
      } else if (!common) {
        common = std::move(required);
      } else {
        std::erase_if(*common, [&](const std::string& name) {
          return std::find(required.begin(), required.end(), name) == required.end();
        });
      }
    }
    if (common) add_required(schema, *common);
  }
}

json::object openai_tool_schema(const json::object& parameters) {
  json::object schema = parameters;
  remove_schema_keyword(schema, "$schema");
  merge_top_level_alternatives(schema);
  // An object schema cannot sensibly carry these at the top; OpenAI refuses them there.
  schema.erase("enum");
  schema.erase("not");
  ensure_object_type(schema);
  return schema;
}

json::object anthropic_tool_schema(const json::object& parameters) {
  json::object schema = parameters;
  merge_top_level_alternatives(schema);
  ensure_object_type(schema);
  return schema;
}

}  // namespace sb::provider
