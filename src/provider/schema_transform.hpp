#pragma once
// Seed 002's ProviderTransform.schema: a tool's JSON Schema adapted to what each provider's API
// accepts. The request builders apply these; GET /tool can show the same result.
//
// Relaxing a schema here costs no safety: the server validates every call's input against the
// tool's original schema before running it (an `invalid` result tells the model what to fix).
#include "util/json.hpp"

namespace sb::provider {

// For OpenAI-compatible servers:
// - top-level "type": "object" and "properties" (OpenAI rejects an object schema without
//   properties);
// - "$schema" removed from every subschema (Gemini's OpenAI-compatible endpoint, and proxies in
//   front of Gemini, reject the keyword);
// - no "anyOf" / "oneOf" / "allOf" / "enum" / "not" at the top level (OpenAI rejects them there):
//   see merge_top_level_alternatives().
json::object openai_tool_schema(const json::object& parameters);

// For Anthropic's input_schema:
// - top-level "type": "object" (required) and "properties";
// - no "anyOf" / "oneOf" / "allOf" at the top level ("input_schema does not support oneOf,
//   allOf, or anyOf at the top level"): see merge_top_level_alternatives().
json::object anthropic_tool_schema(const json::object& parameters);

// Removes top-level "allOf", "anyOf" and "oneOf", folding their alternatives into the top-level
// object: each alternative's properties are added (a property the top level already has, or an
// earlier alternative added, wins); "required" keeps what must hold in every case (all of allOf's
// requirements, only those common to every alternative of anyOf/oneOf). Nested combiners, which
// the APIs accept, are left alone.
void merge_top_level_alternatives(json::object& schema);

// Removes `keyword` from the schema and from every subschema in it (properties, items, $defs,
// combiners, ...), but not from places where it is data: a property *named* `keyword` stays.
void remove_schema_keyword(json::object& schema, std::string_view keyword);

}  // namespace sb::provider
