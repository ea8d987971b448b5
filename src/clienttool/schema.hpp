#pragma once
// A compiled JSON Schema (valijson) for a tool's parameters. Immutable after compile(), so one
// instance is shared by every concurrent validation.
#include <memory>
#include <string>
#include <vector>

#include "util/error.hpp"
#include "util/json.hpp"

namespace valijson {
class Schema;
}

namespace sb::clienttool {

class CompiledSchema {
 public:
  // Fails with InvalidRequest when the document is not an object schema valijson can compile.
  // The top-level "type", when given, must be "object": tool input is always an object.
  // Compiled once per tool, when it is made (registered, loaded, built in): every call of the
  // tool is checked with that one.
  static Result<std::shared_ptr<const CompiledSchema>> compile(const json::value& schema);
  static Result<std::shared_ptr<const CompiledSchema>> compile(const json::object& schema);

  // Ok, or InvalidRequest naming the JSON path of the first violation ("/location: ...").
  // "pattern", "patternProperties" and "format" are checked with RE2 (linear time, no
  // recursion), never with valijson's std::regex; a pattern RE2 cannot compile fails compile().
  Result<void> validate(const json::value& input) const;

  ~CompiledSchema();

  // One "patternProperties" (with its object's "properties" names and "additionalProperties"),
  // compiled when the schema is; defined in schema_rewrite.hpp.
  struct PatternProperties;

 private:
  CompiledSchema();
  std::unique_ptr<valijson::Schema> schema_;
  // Owned here because the compiled schema's constraints point at them.
  std::vector<std::unique_ptr<PatternProperties>> pattern_properties_;
};

}  // namespace sb::clienttool
