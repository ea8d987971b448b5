// What an MCP server writes on its stdout, as the stdio transport reads it: lines framed from
// chunks split anywhere, each decoded into a JSON-RPC message. Invariants: the lines (and a
// too-long failure) do not depend on how the bytes are split, and a decoded message encodes to
// one line that decodes to the same message.
#include "mcp/framing.hpp"
#include "mcp/jsonrpc.hpp"
#include "split.hpp"

namespace {

struct Outcome {
  std::vector<std::string> lines;
  bool failed = false;
  bool operator==(const Outcome&) const = default;
};

Outcome frame(const std::vector<std::string_view>& chunks) {
  sb::mcp::LineFramer framer(4096);  // small, so the limit is reached too
  Outcome o;
  for (auto chunk : chunks)
    if (!framer.feed(chunk, o.lines)) {
      o.failed = true;
      break;
    }
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  Outcome whole = frame({input});
  Outcome pieces = frame(sb::fuzz::split(input));
  if (!(whole == pieces)) sb::fuzz::fail("lines depend on how the bytes are split");
  for (const auto& line : whole.lines) {
    auto message = sb::mcp::parse_message(line);
    if (!message) continue;
    std::string text = sb::mcp::encode(*message);
    if (text.find('\n') != std::string::npos) sb::fuzz::fail("an encoded message spans lines");
    auto again = sb::mcp::parse_message(text);
    if (!again) sb::fuzz::fail("an encoded message does not decode");
    if (again->kind != message->kind || again->method != message->method ||
        again->id != message->id || again->params != message->params ||
        again->result != message->result || again->error.has_value() != message->error.has_value())
      sb::fuzz::fail("a message changed on its way through encode");
  }
  return 0;
}
