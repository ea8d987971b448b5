#include "question/service.hpp"

#include "util/ids.hpp"

namespace sb::question {

json::object to_json(const Question& q) {
  return json::object{{"id", q.id},
                      {"sessionID", q.session_id},
                      {"questions", q.questions},
                      {"tool", json::object{{"messageID", q.message_id}, {"callID", q.call_id}}}};
}

QuestionService::~QuestionService() {
  shutdown();
}

std::string QuestionService::ask(Question q, AnswerHandler done) {
  q.id = ids::make("que");
  std::string id = q.id;
  json::object event = to_json(q);
  if (shutting_down_) {
    done(make_error(ErrorCode::Unavailable, "the server is shutting down"));
    return id;
  }
  pending_.emplace(id, Pending{std::move(q), std::move(done)});
  bus_->publish("question.asked", std::move(event));
  return id;
}

Result<void> QuestionService::reply(const std::string& id,
                                    std::vector<std::vector<std::string>> answers) {
  Pending p;
  auto it = pending_.find(id);
  if (it == pending_.end()) return make_error(ErrorCode::NotFound, "Unknown question: " + id);
  if (answers.size() != it->second.question.questions.size())
    return make_error(ErrorCode::InvalidRequest,
                      "answers must have one entry per question (" +
                          std::to_string(it->second.question.questions.size()) + "), got " +
                          std::to_string(answers.size()));
  p = std::move(it->second);
  pending_.erase(it);
  bus_->publish("question.replied",
                json::object{{"sessionID", p.question.session_id}, {"requestID", id}});
  p.done(std::move(answers));
  return {};
}

Result<void> QuestionService::reject(const std::string& id) {
  Pending p;
  auto it = pending_.find(id);
  if (it == pending_.end()) return make_error(ErrorCode::NotFound, "Unknown question: " + id);
  p = std::move(it->second);
  pending_.erase(it);
  bus_->publish("question.rejected",
                json::object{{"sessionID", p.question.session_id}, {"requestID", id}});
  p.done(make_error(ErrorCode::Forbidden, "The user dismissed this question"));
  return {};
}

std::size_t QuestionService::cancel_session(const std::string& session_id,
                                            const std::string& reason) {
  std::vector<Pending> ended;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.question.session_id == session_id) {
      ended.push_back(std::move(it->second));
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& p : ended) {
    bus_->publish("question.rejected",
                  json::object{{"sessionID", session_id}, {"requestID", p.question.id}});
    p.done(make_error(ErrorCode::Unavailable, "Cancelled: " + reason));
  }
  return ended.size();
}

std::vector<Question> QuestionService::list() const {
  std::vector<Question> out;
  for (const auto& [id, p] : pending_)
    out.push_back(p.question);
  return out;
}

void QuestionService::shutdown() {
  std::map<std::string, Pending> ended;
  shutting_down_ = true;
  ended.swap(pending_);
  for (auto& [id, p] : ended)
    p.done(make_error(ErrorCode::Unavailable, "the server is shutting down"));
}

}  // namespace sb::question
