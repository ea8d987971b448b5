#include "tool/builtin/question.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "util/ids.hpp"

namespace sb::tool {
namespace {

constexpr std::string_view kSchema = R"({
  "type": "object",
  "properties": {
    "questions": {
      "type": "array",
      "minItems": 1,
      "maxItems": 8,
      "description": "The questions to ask, in order.",
      "items": {
        "type": "object",
        "properties": {
          "question": {"type": "string", "description": "The full question."},
          "header": {"type": "string", "description": "A very short label for it (at most 30 characters)."},
          "options": {
            "type": "array",
            "description": "The choices offered. The person may also type an answer of their own.",
            "items": {
              "type": "object",
              "properties": {
                "label": {"type": "string", "description": "The choice, in a few words."},
                "description": {"type": "string", "description": "What choosing it means."}
              },
              "required": ["label"]
            }
          },
          "multiple": {"type": "boolean", "description": "Whether several options may be chosen."}
        },
        "required": ["question", "options"]
      }
    }
  },
  "required": ["questions"]
})";

class QuestionTool final : public BasicTool {
 public:
  explicit QuestionTool(std::shared_ptr<question::QuestionService> questions)
      : BasicTool("question",
                  "Ask the user questions when you need their decision or information you cannot "
                  "find yourself: preferences, a choice between approaches, missing details. "
                  "Give clear options; the user may also answer in their own words. The turn "
                  "waits until they answer.",
                  kSchema),
        questions_(std::move(questions)) {}

  boost::asio::awaitable<Result<ToolResult>> execute(json::object args, ToolContext& ctx) override {
    question::Question q;
    q.session_id = ctx.session_id;
    q.message_id = ctx.message_id;
    q.call_id = ctx.call_id;
    q.id = ctx.question_id.empty() ? ids::make("que") : ctx.question_id;
    q.questions = args.at("questions").as_array();
    json::array asked = q.questions;
    // An abort of the turn withdraws the question (the page stops showing it).
    auto give_up = std::make_shared<boost::asio::cancellation_signal>();
    AbortSignal::Registration on_abort(
        ctx.abort, [give_up] { give_up->emit(boost::asio::cancellation_type::terminal); });
    if (ctx.abort->aborted()) co_return make_error(ErrorCode::Unavailable, "aborted");
    // Named, not a temporary in the co_await: GCC 12 destroys those twice.
    auto token = boost::asio::bind_cancellation_slot(give_up->slot(), boost::asio::use_awaitable);
    if (ctx.asking) ctx.asking(q.id);
    ctx.set_awaiting_person(true);
    auto answer = co_await questions_->async_ask(std::move(q), token);
    ctx.set_awaiting_person(false);
    if (ctx.abort->aborted()) co_return make_error(ErrorCode::Unavailable, "aborted");
    if (!answer) co_return answer.error();
    std::string output = "The user answered your questions:";
    json::array answers;
    for (std::size_t i = 0; i < answer->size(); ++i) {
      std::string text;
      json::array chosen;
      for (const auto& a : (*answer)[i]) {
        text += (text.empty() ? "" : ", ") + a;
        chosen.emplace_back(a);
      }
      answers.push_back(std::move(chosen));
      const auto& qo = asked[i].as_object();
      output += "\n\"" + std::string(qo.at("question").as_string()) + "\" = \"" +
                (text.empty() ? "(no answer)" : text) + "\"";
    }
    co_return ToolResult{
        "Asked " + std::to_string(asked.size()) + " question" + (asked.size() == 1 ? "" : "s"),
        output,
        json::object{{"answers", std::move(answers)}},
        {}};
  }

 private:
  std::shared_ptr<question::QuestionService> questions_;
};

}  // namespace

ToolPtr make_question_tool(std::shared_ptr<question::QuestionService> questions) {
  return std::make_shared<QuestionTool>(std::move(questions));
}

}  // namespace sb::tool
