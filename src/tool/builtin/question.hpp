#pragma once
#include <memory>

#include "question/service.hpp"
#include "tool/tool.hpp"

namespace sb::tool {

// `question`: asks the person using the client one or more multiple-choice questions and waits
// for the answers (the session shows awaiting-input meanwhile).
ToolPtr make_question_tool(std::shared_ptr<question::QuestionService> questions);

}  // namespace sb::tool
