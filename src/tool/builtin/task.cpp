#include "tool/builtin/task.hpp"

namespace sb::tool {
namespace {

constexpr std::string_view kSchema = R"({
  "type": "object",
  "properties": {
    "description": {"type": "string", "description": "A short (3-5 words) description of the task."},
    "prompt": {"type": "string", "description": "The task for the agent, with everything it needs to know: it sees nothing of this conversation."},
    "subagent_type": {"type": "string", "description": "The agent to use."}
  },
  "required": ["description", "prompt", "subagent_type"]
})";

std::string describe(const std::map<std::string, std::string>& agents) {
  std::string text =
      "Start a sub-agent that works on a task on its own, in a new session, and returns its "
      "final answer. Use it for self-contained research or work whose details need not fill "
      "this conversation. The sub-agent sees only the prompt you give it.\n\nAvailable agents:";
  for (const auto& [name, description] : agents)
    text += "\n- " + name + ": " + description;
  return text;
}

class TaskTool final : public BasicTool {
 public:
  TaskTool(TaskRunner run, std::map<std::string, std::string> agents)
      : BasicTool("task", describe(agents), kSchema),
        run_(std::move(run)),
        agents_(std::move(agents)) {}

  boost::asio::awaitable<Result<ToolResult>> execute(json::object args, ToolContext& ctx) override {
    TaskRequest req;
    req.parent_session_id = ctx.session_id;
    req.agent = std::string(args.at("subagent_type").as_string());
    req.description = std::string(args.at("description").as_string());
    req.prompt = std::string(args.at("prompt").as_string());
    req.abort = ctx.abort;
    if (!agents_.count(req.agent)) {
      std::string names;
      for (const auto& [name, d] : agents_)
        names += (names.empty() ? "" : ", ") + name;
      co_return make_error(ErrorCode::InvalidRequest,
                           "Unknown agent \"" + req.agent + "\". Available: " + names);
    }
    std::string title = req.description;
    auto outcome = co_await run_(std::move(req));
    if (!outcome) co_return outcome.error();
    co_return ToolResult{title,
                         outcome->text + "\n\n<task_metadata>\nsession_id: " + outcome->session_id +
                             "\n</task_metadata>",
                         json::object{{"sessionId", outcome->session_id}},
                         {}};
  }

 private:
  TaskRunner run_;
  std::map<std::string, std::string> agents_;
};

}  // namespace

ToolPtr make_task_tool(TaskRunner run, std::map<std::string, std::string> agents) {
  return std::make_shared<TaskTool>(std::move(run), std::move(agents));
}

}  // namespace sb::tool
