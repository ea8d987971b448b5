// What a client sends about its tools: a register body's `tools` (names, descriptions, JSON
// Schemas the server compiles), an input the server validates against those schemas before
// delegating a call, and a result body. Input: one JSON document
// {"tools": [...], "input": {...}, "result": {...}, "toolIDs": [...]}; every part is optional.
#include "clienttool/schema.hpp"
#include "clienttool/wire.hpp"
#include "split.hpp"
#include "util/json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto doc = sb::parse_json(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!doc || !doc->is_object()) return 0;
  const auto& body = doc->get_object();
  (void)sb::clienttool::parse_string_list(body, "toolIDs");
  if (auto r = body.find("result"); r != body.end() && r->value().is_object())
    (void)sb::clienttool::parse_tool_response(r->value().get_object());
  (void)sb::clienttool::parse_tool_response(body);

  auto specs = sb::clienttool::parse_tool_specs(body.if_contains("tools"), "tools");
  if (!specs) {
    if (specs.error().message.empty()) sb::fuzz::fail("an empty error message");
    return 0;
  }
  const sb::json::value* input = body.if_contains("input");
  for (const auto& spec : *specs) {
    if (!sb::clienttool::valid_name(spec.name)) sb::fuzz::fail("an invalid tool name accepted");
    auto schema = sb::clienttool::CompiledSchema::compile(spec.parameters);
    if (!schema) continue;
    if (input) (void)(*schema)->validate(*input);
  }
  return 0;
}
