#pragma once
// The arguments a model sends with a tool call, made ready for Tool::execute: checked against the
// tool's JSON Schema, with the slips models often make repaired first.
//
// Models regularly send `"todos": "[{...}]"` (an array serialized into a string), `"limit": "50"`
// or `"replaceAll": "true"`, or `"id": 3` where a string is wanted. Failing those calls wastes a
// step; OpenCode repairs them the same way. What cannot be repaired comes back as an error that
// names each JSON path, says what was expected and what was sent, so the model can fix its call
// (the processor routes it to the `invalid` tool).
//
// Thread-safe: compiled schemas are cached behind a mutex, keyed by the schema's text.
#include "tool/tool.hpp"
#include "util/error.hpp"
#include "util/json.hpp"

namespace sb::tool {

// Validates `args` against `tool.parameters()` and returns them as an object. When they do not
// validate as sent, coerces and validates again:
//   - a string holding JSON of the array/object the schema wants is parsed and substituted;
//   - a string holding a number or boolean ("42", "2.5", "true") becomes one where the schema
//     wants number, integer or boolean (and "null" becomes null where only null fits);
//   - a number or boolean becomes its text where the schema wants a string and nothing else;
//   - arguments sent as a whole as a JSON string are parsed; null or "" means {}.
// Errors are InvalidRequest with a message for the model, e.g.
//   the read tool was called with invalid arguments: /offset must be an integer, got the
//   string "ten"; /filePath is required (a string: The absolute path to the file to read)
// A tool whose own schema cannot be compiled is an Internal error.
Result<json::object> prepare_arguments(const Tool& tool, json::value args);

}  // namespace sb::tool
