#pragma once
// A compiled JSON Schema (valijson) for a tool's parameters. Immutable after compile(), so one
// instance is shared by every concurrent validation.
#include <memory>
#include <string>

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
  // Compiled schemas are cached by their text: every client of an application registers the same
  // tools, and the agent prepares arguments against the same schemas for every call.
  static Result<std::shared_ptr<const CompiledSchema>> compile(const json::value& schema);
  static Result<std::shared_ptr<const CompiledSchema>> compile(const json::object& schema);

  // Ok, or InvalidRequest naming the JSON path of the first violation ("/location: ...").
  Result<void> validate(const json::value& input) const;

  ~CompiledSchema();

 private:
  CompiledSchema();
  static Result<std::shared_ptr<const CompiledSchema>> compile_uncached(const json::object& schema);
  std::unique_ptr<valijson::Schema> schema_;
};

}  // namespace sb::clienttool
