#pragma once
// Preparing a client's JSON Schema for valijson, which schema.cpp then compiles: the checks that
// keep valijson from crashing or hanging the server on a hostile schema, and the move of the
// keywords that valijson would evaluate with std::regex to keywords of ours. Internal to
// src/clienttool.

// Without this valijson reports a schema it cannot compile by printing and calling abort(): a
// client's bad schema would kill the server instead of getting a 400.
#define VALIJSON_USE_EXCEPTIONS 1
#include <re2/re2.h>
#include <valijson/schema.hpp>

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "clienttool/schema.hpp"

namespace sb::clienttool {

// valijson 1.0 evaluates "pattern", "patternProperties" and "format" with std::regex, whose
// libstdc++ matcher backtracks by recursion: "^(a|b)*$" against a 50 KB string overflows the
// stack, and "^(a*)*b$" against 30 characters runs for minutes. A client's schema and a model's
// input would stop or hang the server (found by fuzz_client_tools). So those keywords are moved
// out of valijson's sight before it compiles the schema, under names of ours that custom
// constraints read, and are checked with RE2, which matches in linear time without recursion.
inline constexpr const char* kPatternKey = "x-switchboard-pattern";
inline constexpr const char* kFormatKey = "x-switchboard-format";
inline constexpr const char* kPatternPropertiesKey = "x-switchboard-patternProperties";

using Regex = std::shared_ptr<const re2::RE2>;

// A pattern of the schema at `at`, compiled with RE2; InvalidRequest naming `at` when RE2 cannot
// compile it or it is too large.
Result<Regex> compile_regex(std::string_view pattern, const std::string& at);

// An object schema's "patternProperties", with the names its "properties" lists and its
// "additionalProperties": a member whose name RE2 matches with a pattern validates against that
// pattern's schema; one that no pattern and no listed name takes validates against
// "additionalProperties" (any value when absent). The subschemas are compiled from the whole
// document with a "$ref" to their place, so their own "$ref"s resolve as in the document.
struct CompiledSchema::PatternProperties {
  struct Entry {
    Regex re;                                  // null for additionalProperties
    std::string pattern;                       // as the schema writes it
    std::string ref;                           // "#/..." of the subschema in the rewritten document
    std::optional<bool> constant;              // a boolean schema
    std::unique_ptr<valijson::Schema> schema;  // otherwise
  };
  std::set<std::string, std::less<>> listed;
  std::vector<Entry> patterns;
  std::optional<Entry> additional;
};

// "multipleOf" must be greater than 0 everywhere in the schema: InvalidRequest naming where it is
// not.
Result<void> check_multiple_of(const json::object& schema);

// Rewrites `document` in place for valijson (see the Rewriter in schema_rewrite.cpp): our keywords
// instead of "pattern", "format" and "patternProperties", whose rules go to `rules`; every "$ref"
// resolved; the limits on what valijson may be made to do. InvalidRequest naming the place.
Result<void> rewrite_for_valijson(
    json::value& document, std::vector<std::unique_ptr<CompiledSchema::PatternProperties>>& rules);

}  // namespace sb::clienttool
