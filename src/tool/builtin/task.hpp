#pragma once
#include <boost/asio/awaitable.hpp>

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "tool/tool.hpp"

namespace sb::tool {

struct TaskRequest {
  std::string parent_session_id;
  std::string agent;
  std::string description;
  std::string prompt;
  std::shared_ptr<AbortSignal> abort;
};

struct TaskOutcome {
  std::string session_id;  // the sub-session
  std::string text;        // its final answer
};

using TaskRunner = std::function<boost::asio::awaitable<Result<TaskOutcome>>(TaskRequest)>;

// `task`: hands a self-contained piece of work to a sub-agent in a sub-session and returns its
// final answer. `agents` (name -> description) lists the agents it may use.
ToolPtr make_task_tool(TaskRunner run, std::map<std::string, std::string> agents);

}  // namespace sb::tool
