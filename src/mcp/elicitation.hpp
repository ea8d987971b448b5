#pragma once
// A server's elicitation/create (form mode) as a question to the person, through the same
// question flow as the `question` tool (question.asked; the web page and SDKs show it): one
// question per property of its requestedSchema, the server's message with the first. The answers
// become the ElicitResult's `content`, typed as the schema says.
#include <string>
#include <vector>

#include "util/error.hpp"
#include "util/json.hpp"

namespace sb::mcp {

// The questions for `params` (message, requestedSchema), in the question tool's shape:
// [{question, header, options: [{label}], multiple}]. InvalidRequest when the schema is not a
// flat object of strings, numbers, booleans and enums (what form mode allows).
Result<json::array> elicitation_questions(const json::object& params);

// The content for the person's answers (one list per question, as QuestionService gives them):
// numbers parsed, booleans from yes/no/true/false, an empty answer left out. InvalidRequest when
// an answer does not fit its property (the server is then told "decline").
Result<json::object> elicitation_content(const json::object& params,
                                         const std::vector<std::vector<std::string>>& answers);

}  // namespace sb::mcp
