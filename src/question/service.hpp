#pragma once
// QuestionService: questions the `question` tool puts to the person using a client, and their
// answers (OpenCode's question.asked / POST /question/{id}/reply). Every question ends exactly
// once: answered, rejected, cancelled with its session, or at shutdown. Not thread-safe: use from
// the server's executor only. A question leaves the table before its handler runs, so a handler may
// call back into the service.
#include <functional>
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
using AnswerHandler = std::function<void(Answer)>;

class QuestionService {
 public:
  explicit QuestionService(std::shared_ptr<bus::EventBus> bus) : bus_(std::move(bus)) {}
  ~QuestionService();

  // Publishes question.asked and waits; returns the question's id.
  std::string ask(Question q, AnswerHandler done);
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
  std::shared_ptr<bus::EventBus> bus_;
  std::map<std::string, Pending> pending_;
  bool shutting_down_ = false;
};

}  // namespace sb::question
