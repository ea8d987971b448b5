#include "tool/builtin/invalid.hpp"

#include <algorithm>

#include "util/text.hpp"

namespace sb::tool {

namespace {

using boost::asio::awaitable;

constexpr std::string_view kDescription =
    "Do not use. The server answers with this tool when a tool call names a tool that does not "
    "exist or has arguments that do not match the tool's parameters.";

constexpr std::string_view kSchema = R"json({
  "type": "object",
  "properties": {
    "tool": {"type": "string", "description": "The name of the tool the model tried to call"},
    "error": {"type": "string", "description": "What was wrong with the call"}
  },
  "required": ["tool", "error"]
})json";

// Edit distance, for "did you mean": tool names are short, so the quadratic table is cheap.
std::size_t distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

class InvalidTool final : public BasicTool {
 public:
  InvalidTool() : BasicTool("invalid", std::string(kDescription), kSchema) {}

  awaitable<Result<ToolResult>> execute(json::object args, ToolContext&) override {
    auto tool = get_string(args, "tool");
    if (!tool) co_return tool.error();
    auto error = get_string(args, "error");
    if (!error) co_return error.error();
    std::string name = tool->value_or("");
    std::string problem = error->value_or("");
    if (problem.empty()) problem = "(no details were given)";

    ToolResult result;
    result.title = "Invalid Tool";
    result.output = "The arguments provided to the tool are invalid: " + problem +
                    "\n\nCorrect the call and make it again: use the exact name of one of the "
                    "tools you were given, with arguments that match its parameters (every "
                    "required parameter present, each value of the type its schema asks for).";
    result.metadata = {{"tool", name}, {"error", problem}};
    co_return result;
  }
};

}  // namespace

ToolPtr make_invalid_tool() {
  return std::make_shared<InvalidTool>();
}

std::string unknown_tool_error(std::string_view name, const std::vector<std::string>& available) {
  // `invalid` is the server's own; suggesting it would only produce another invalid call.
  std::vector<std::string> tools;
  for (const auto& t : available)
    if (t != "invalid") tools.push_back(t);
  std::sort(tools.begin(), tools.end());

  std::string best;
  std::string wanted = ascii_lower(name);
  std::size_t best_distance = std::max<std::size_t>(1, name.size() / 3) + 1;
  for (const auto& t : tools) {
    std::size_t d = distance(wanted, ascii_lower(t));
    if (d < best_distance) {
      best_distance = d;
      best = t;
    }
  }

  std::string message =
      "unknown tool \"" + std::string(name) + "\": there is no tool with that name.";
  if (!best.empty()) message += " Did you mean \"" + best + "\"?";
  if (tools.empty()) {
    message += " No tools are available.";
  } else {
    message += " Available tools: ";
    for (std::size_t i = 0; i < tools.size(); ++i)
      message += (i ? ", " : "") + tools[i];
  }
  return message;
}

}  // namespace sb::tool
