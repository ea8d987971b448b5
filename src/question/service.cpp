#include "question/service.hpp"

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/post.hpp>

#include "util/complete.hpp"
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

void QuestionService::ask(Question q, AnswerHandler done) {
  // The id the question was stored under before a restart, when it has one.
  if (q.id.empty() || pending_.count(q.id)) q.id = ids::make("que");
  std::string id = q.id;
  if (shutting_down_) {
    complete_later(executor_, std::move(done),
                   Answer(make_error(ErrorCode::Unavailable, "the server is shutting down")));
    return;
  }
  json::object event = to_json(q);
  auto slot = boost::asio::get_associated_cancellation_slot(done);
  pending_.emplace(id, Pending{std::move(q), std::move(done)});
  // The waiter gave up (its turn was aborted): posted, since ending the question completes the
  // handler, which must not happen inside the slot's own callback.
  if (slot.is_connected())
    slot.assign(
        [weak = weak_from_this(), id, executor = executor_](boost::asio::cancellation_type) {
          boost::asio::post(executor, [weak, id] {
            auto self = weak.lock();
            if (!self) return;
            if (auto it = self->pending_.find(id); it != self->pending_.end())
              self->end(it, "question.rejected", make_error(ErrorCode::Unavailable, "cancelled"));
          });
        });
  bus_->publish("question.asked", std::move(event));
}

void QuestionService::end(std::map<std::string, Pending>::iterator it, const char* event,
                          Answer answer) {
  // Out of the table before anything runs: a subscriber may call back into the service.
  AnswerHandler done(std::move(it->second.done));
  std::string session_id = std::move(it->second.question.session_id);
  std::string id = it->first;
  pending_.erase(it);
  json::object props{{"sessionID", std::move(session_id)}, {"requestID", id}};
  if (answer) {  // question.replied carries the answers, as OpenCode's
    json::array answers;
    for (const auto& one : *answer)
      answers.emplace_back(json::array(one.begin(), one.end()));
    props["answers"] = std::move(answers);
  }
  bus_->publish(event, std::move(props));
  complete_later(executor_, std::move(done), std::move(answer));
}

Result<void> QuestionService::reply(const std::string& id,
                                    std::vector<std::vector<std::string>> answers) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return make_error(ErrorCode::NotFound, "Unknown question: " + id);
  if (answers.size() != it->second.question.questions.size())
    return make_error(ErrorCode::InvalidRequest,
                      "answers must have one entry per question (" +
                          std::to_string(it->second.question.questions.size()) + "), got " +
                          std::to_string(answers.size()));
  end(it, "question.replied", std::move(answers));
  return {};
}

Result<void> QuestionService::reject(const std::string& id) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return make_error(ErrorCode::NotFound, "Unknown question: " + id);
  end(it, "question.rejected",
      make_error(ErrorCode::Forbidden, "The user dismissed this question"));
  return {};
}

std::size_t QuestionService::cancel_session(const std::string& session_id,
                                            const std::string& reason) {
  std::vector<std::string> ids;
  for (const auto& [id, p] : pending_)
    if (p.question.session_id == session_id) ids.push_back(id);
  for (const auto& id : ids)
    if (auto it = pending_.find(id); it != pending_.end())
      end(it, "question.rejected", make_error(ErrorCode::Unavailable, "Cancelled: " + reason));
  return ids.size();
}

std::vector<Question> QuestionService::list() const {
  std::vector<Question> out;
  for (const auto& [id, p] : pending_)
    out.push_back(p.question);
  return out;
}

void QuestionService::shutdown() {
  shutting_down_ = true;
  while (!pending_.empty()) {
    auto it = pending_.begin();
    AnswerHandler done(std::move(it->second.done));
    pending_.erase(it);
    complete_later(executor_, std::move(done),
                   Answer(make_error(ErrorCode::Unavailable, "the server is shutting down")));
  }
}

}  // namespace sb::question
