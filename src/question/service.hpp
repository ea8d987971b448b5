#pragma once
// QuestionService: questions the `question` tool puts to the person using a client, and their
// answers (OpenCode's question.asked / POST /question/{id}/reply). Every question ends exactly
// once: answered, rejected, cancelled with its session, or at shutdown. Not thread-safe: use from
// the server's executor only. A question leaves the table before its handler runs, so a handler may
// call back into the service.
#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bus/event_bus.hpp"
#include "util/error.hpp"
#include "util/json.hpp"

namespace sb::question {

struct Question {
  std::string id;  // que_...
  std::string session_id;
  std::string message_id;
  std::string call_id;
  json::array questions;  // [{question, header, options: [{label, description}], multiple}]
};

json::object to_json(const Question& q);

// The person's answers: one list of chosen labels (or free text) per question; or an error
// (Forbidden "dismissed", Unavailable "cancelled").
using Answer = Result<std::vector<std::vector<std::string>>>;
using AnswerSignature = void(Answer);
using AnswerHandler = boost::asio::any_completion_handler<AnswerSignature>;

class QuestionService : public std::enable_shared_from_this<QuestionService> {
 public:
  // Handlers without an executor of their own complete on `executor`.
  QuestionService(boost::asio::any_io_executor executor, std::shared_ptr<bus::EventBus> bus)
      : executor_(std::move(executor)), bus_(std::move(bus)) {}
  ~QuestionService();

  // Publishes question.asked and completes with the person's answers, or why there are none.
  // The question keeps its id when it has one (asked again after a restart) that is not waiting.
  // Emitting the handler's cancellation slot rejects the question (as if dismissed), and the
  // operation ends with Unavailable "cancelled".
  template <typename CompletionToken>
  auto async_ask(Question q, CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, AnswerSignature>(
        [self = shared_from_this()](auto handler, Question q) {
          self->ask(std::move(q), AnswerHandler(std::move(handler)));
        },
        token, std::move(q));
  }
  // NotFound for an unknown id; InvalidRequest when the answers do not fit the questions.
  Result<void> reply(const std::string& id, std::vector<std::vector<std::string>> answers);
  Result<void> reject(const std::string& id);
  std::size_t cancel_session(const std::string& session_id, const std::string& reason);
  std::vector<Question> list() const;
  void shutdown();

 private:
  struct Pending {
    Question question;
    AnswerHandler done;
  };
  void ask(Question q, AnswerHandler done);
  // Ends a waiting question: its event, then its handler (posted).
  void end(std::map<std::string, Pending>::iterator it, const char* event, Answer answer);

  boost::asio::any_io_executor executor_;
  std::shared_ptr<bus::EventBus> bus_;
  std::map<std::string, Pending> pending_;
  bool shutting_down_ = false;
};

}  // namespace sb::question
