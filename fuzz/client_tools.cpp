// What a client sends about its tools: a register body's `tools` (names, descriptions, JSON
// Schemas the server compiles), an input the server validates against those schemas before
// delegating a call, and a result body. Input: one JSON document
// {"tools": [...], "input": {...}, "result": {...}, "toolIDs": [...]}; every part is optional.
#include <boost/asio/io_context.hpp>

#include "bus/event_bus.hpp"
#include "clienttool/registry.hpp"
#include "clienttool/schema.hpp"
#include "clienttool/wire.hpp"
#include "split.hpp"
#include "util/json.hpp"

namespace {

// One registry for the whole run; its timers never fire here (nothing is executed).
sb::clienttool::ClientToolRegistry& registry() {
  static boost::asio::io_context io;
  static auto instance =
      sb::clienttool::ClientToolRegistry::create(io.get_executor(), sb::bus::EventBus::create());
  return *instance;
}

}  // namespace

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
    auto schema = sb::clienttool::CompiledSchema::compile(spec.parameters);
    if (!schema) continue;
    if (input) (void)(*schema)->validate(*input);
  }
  // The registry, which validates names and schemas: what it accepts is well formed, and it
  // accepts all or nothing.
  auto& reg = registry();
  std::size_t count = specs->size();
  auto ids = reg.register_tools("fuzz", std::move(*specs));
  auto registered = reg.get_tools("fuzz");
  if (ids) {
    if (ids->size() > count) sb::fuzz::fail("more tools registered than sent");
    for (const auto& def : registered)
      if (!sb::clienttool::valid_name(def->name)) sb::fuzz::fail("an invalid tool name accepted");
  } else if (!registered.empty()) {
    sb::fuzz::fail("a refused registration left tools behind");
  }
  reg.unregister("fuzz", std::nullopt);
  return 0;
}
