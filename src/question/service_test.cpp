// QuestionService in-process: questions awaited by coroutines on one io_context, as the
// question tool awaits them, answered, dismissed, withdrawn through the waiter's cancellation
// slot, cancelled with their session, and ended at shutdown.
#include "question/service.hpp"

#include <gtest/gtest.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <optional>
#include <string>
#include <vector>

namespace sb::question {
namespace {

class QuestionServiceTest : public ::testing::Test {
 protected:
  QuestionServiceTest() {
    subscription_ = bus_->subscribe([this](const bus::EventPtr& e) { events_.push_back(e->type); });
  }

  // What still waits ends, as at the server's stop: a waiting coroutine holds the service.
  void TearDown() override {
    service_->shutdown();
    io_.poll();
  }

  // Starts a coroutine that asks one question; what it is told is kept in what this returns
  // (shared: the coroutine may end after the test, at TearDown).
  using Told = std::shared_ptr<std::optional<Answer>>;
  Told ask(const std::string& session = "ses_1",
           std::shared_ptr<boost::asio::cancellation_signal> give_up = {}) {
    auto answer = std::make_shared<std::optional<Answer>>();
    Question q;
    q.session_id = session;
    q.questions = json::array{json::object{{"question", "Which?"}, {"options", json::array{}}}};
    boost::asio::co_spawn(
        io_,
        [service = service_, q = std::move(q), give_up,
         answer]() mutable -> boost::asio::awaitable<void> {
          if (give_up) {
            auto token =
                boost::asio::bind_cancellation_slot(give_up->slot(), boost::asio::use_awaitable);
            *answer = co_await service->async_ask(std::move(q), token);
          } else {
            *answer = co_await service->async_ask(std::move(q), boost::asio::use_awaitable);
          }
        },
        boost::asio::detached);
    io_.poll();
    return answer;
  }

  std::string only_id() const {
    auto listed = service_->list();
    EXPECT_EQ(listed.size(), 1u);
    return listed.empty() ? std::string() : listed[0].id;
  }

  boost::asio::io_context io_;
  // poll() runs what is ready; the guard keeps the context from stopping when nothing is.
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_ =
      boost::asio::make_work_guard(io_);
  std::shared_ptr<bus::EventBus> bus_ = bus::EventBus::create();
  std::shared_ptr<QuestionService> service_ =
      std::make_shared<QuestionService>(io_.get_executor(), bus_);
  std::vector<std::string> events_;
  bus::Subscription subscription_;
};

TEST_F(QuestionServiceTest, AnAnsweredQuestionGivesTheWaiterTheAnswers) {
  auto told = ask();
  EXPECT_FALSE(*told) << "it waits for the person";
  ASSERT_TRUE(service_->reply(only_id(), {{"A"}}));
  io_.poll();
  ASSERT_TRUE(*told);
  ASSERT_TRUE((*told)->has_value()) << (*told)->error().message;
  EXPECT_EQ(**(*told), (std::vector<std::vector<std::string>>{{"A"}}));
  EXPECT_TRUE(service_->list().empty());
  EXPECT_EQ(events_, (std::vector<std::string>{"question.asked", "question.replied"}));
}

TEST_F(QuestionServiceTest, AnswersThatDoNotFitAreRefusedAndTheQuestionStillWaits) {
  auto told = ask();
  auto wrong = service_->reply(only_id(), {{"A"}, {"B"}});
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().code, ErrorCode::InvalidRequest);
  io_.poll();
  EXPECT_FALSE(*told);
  EXPECT_EQ(service_->list().size(), 1u);
}

TEST_F(QuestionServiceTest, ADismissedQuestionTellsTheWaiterAndALaterReplyIsNotFound) {
  auto told = ask();
  std::string id = only_id();
  ASSERT_TRUE(service_->reject(id));
  io_.poll();
  ASSERT_TRUE(*told);
  ASSERT_FALSE((*told)->has_value());
  EXPECT_EQ((*told)->error().code, ErrorCode::Forbidden);
  EXPECT_EQ(service_->reply(id, {{"A"}}).error().code, ErrorCode::NotFound);
}

TEST_F(QuestionServiceTest, TheWaitersSlotWithdrawsTheQuestion) {
  auto give_up = std::make_shared<boost::asio::cancellation_signal>();
  auto told = ask("ses_1", give_up);
  std::string id = only_id();
  give_up->emit(boost::asio::cancellation_type::terminal);
  io_.poll();
  ASSERT_TRUE(*told);
  ASSERT_FALSE((*told)->has_value());
  EXPECT_EQ((*told)->error().code, ErrorCode::Unavailable);
  EXPECT_TRUE(service_->list().empty()) << "the page no longer shows it";
  EXPECT_EQ(events_.back(), "question.rejected");
  EXPECT_EQ(service_->reply(id, {{"A"}}).error().code, ErrorCode::NotFound);
}

TEST_F(QuestionServiceTest, CancellingASessionEndsItsQuestionsOnly) {
  auto mine = ask("ses_1");
  auto other = ask("ses_2");
  EXPECT_EQ(service_->cancel_session("ses_1", "aborted by the user"), 1u);
  io_.poll();
  ASSERT_TRUE(*mine);
  EXPECT_EQ((*mine)->error().message, "Cancelled: aborted by the user");
  EXPECT_FALSE(*other);
  ASSERT_EQ(service_->list().size(), 1u);
  EXPECT_EQ(service_->list()[0].session_id, "ses_2");
}

TEST_F(QuestionServiceTest, ShutdownEndsEveryQuestionAndRefusesNewOnes) {
  auto before = ask();
  service_->shutdown();
  io_.poll();
  ASSERT_TRUE(*before);
  EXPECT_EQ((*before)->error().code, ErrorCode::Unavailable);
  auto after = ask();
  io_.poll();
  ASSERT_TRUE(*after);
  EXPECT_EQ((*after)->error().code, ErrorCode::Unavailable);
  EXPECT_TRUE(service_->list().empty());
}

}  // namespace
}  // namespace sb::question
