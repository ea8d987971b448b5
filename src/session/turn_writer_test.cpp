// session::TurnWriter against a store on a file that another connection holds (as the store's
// checkpoint thread does for a RESTART copy): the writes (the write timer's, store() at a turn's
// end) run on the writer's thread and do not block the turns' thread, what they carry is stored
// once the store is free, and a newer version of a row is never overwritten by an older one.
#include "session/turn_writer.hpp"

#include <sqlite3.h>

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

#include "util/ids.hpp"

namespace sb::session {
namespace {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

class TurnWriterBusyStore : public ::testing::Test {
 protected:
  TurnWriterBusyStore() {
    std::random_device rd;
    dir_ = std::filesystem::temp_directory_path() / ("sb-turn-writer-" + std::to_string(rd()));
    auto store = SessionStore::open(dir_);
    EXPECT_TRUE(store) << store.error().message;
    store_ = std::move(*store);
    session_.id = ids::make("ses");
    session_.title = "t";
    session_.directory = "/project";
    session_.created = session_.updated = now_ms();
    EXPECT_TRUE(store_->put_session(session_));
    writer_ = TurnWriter::create(io_.get_executor(), store_, bus::EventBus::create());
    turn_ = std::make_shared<Turn>();
    turn_->session = session_;
    message_.id = ids::make("msg");
    message_.session_id = session_.id;
    message_.role = MessageInfo::Role::Assistant;
    message_.created = now_ms();
    message_.agent = "build";
    message_.provider_id = "scripted";
    message_.model_id = "default";
    writer_->stage_message(*turn_, message_);
  }
  ~TurnWriterBusyStore() override {
    if (other_.joinable()) other_.join();
    writer_.reset();
    store_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // Another connection holds the writer lock for `hold`, from a thread of its own; returns once
  // it holds it.
  void hold_the_store(milliseconds hold) {
    std::atomic<bool> holding{false};
    other_ = std::thread([this, hold, &holding] {
      sqlite3* conn = nullptr;
      ASSERT_EQ(sqlite3_open((dir_ / "switchboard.db").c_str(), &conn), SQLITE_OK);
      ASSERT_EQ(sqlite3_exec(conn, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
      holding = true;
      std::this_thread::sleep_for(hold);
      EXPECT_EQ(sqlite3_exec(conn, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
      sqlite3_close(conn);
    });
    while (!holding)
      std::this_thread::sleep_for(milliseconds(1));
  }

  // Runs the loop until `done`, with a 1 ms timer on it; the most it fired late.
  Clock::duration run_until(const std::atomic<bool>& done) {
    Clock::duration worst{};
    asio::steady_timer tick(io_);
    std::function<void()> arm = [&] {
      auto due = Clock::now() + milliseconds(1);
      tick.expires_at(due);
      tick.async_wait([&, due](boost::system::error_code ec) {
        if (ec) return;
        worst = std::max(worst, Clock::now() - due);
        if (!done) arm();
      });
    };
    arm();
    auto deadline = Clock::now() + std::chrono::seconds(10);
    while (!done && Clock::now() < deadline)
      io_.run_for(milliseconds(5));
    tick.cancel();
    io_.run_for(milliseconds(5));
    return worst;
  }

  bool stored(std::string_view agent = "build") {
    auto messages = store_->list_messages(session_.id);
    EXPECT_TRUE(messages) << messages.error().message;
    return messages && messages->size() == 1 && (*messages)[0].info.id == message_.id &&
           (*messages)[0].info.agent == agent;
  }

  asio::io_context io_;
  std::filesystem::path dir_;
  std::shared_ptr<SessionStore> store_;
  std::shared_ptr<TurnWriter> writer_;
  SessionInfo session_;
  MessageInfo message_;
  std::shared_ptr<Turn> turn_;
  std::thread other_;
};

asio::awaitable<void> store_turn(std::shared_ptr<TurnWriter> writer, std::shared_ptr<Turn> turn,
                                 std::atomic<bool>& done) {
  co_await writer->store(std::move(turn));
  done = true;
}

// A turn's end while the store is held: store() waits without blocking the loop (its timer
// keeps firing on time) and is done once the turn's changes are stored, after the release.
TEST_F(TurnWriterBusyStore, ATurnsEndWaitsForAHeldStoreWithoutBlockingTheLoop) {
  hold_the_store(milliseconds(150));
  std::atomic<bool> done{false};
  asio::co_spawn(io_, store_turn(writer_, turn_, done), asio::detached);
  auto worst = run_until(done);
  ASSERT_TRUE(done);
  other_.join();
  EXPECT_TRUE(stored());
  // Blocked, the loop would wait out the hold (150 ms); a machine busy with other tests delays
  // it a few tens of ms anyway (24 ms seen beside the full suite on 2 cores).
  EXPECT_LT(worst, milliseconds(75))
      << "the loop was blocked for " << std::chrono::duration<double, std::milli>(worst).count()
      << " ms";
}

// The write timer's write (a running turn's progress) while the store is held: tried again
// without blocking the loop, and stored once the store is free.
TEST_F(TurnWriterBusyStore, ProgressWrittenWhileTheStoreIsHeldIsStoredAfterwards) {
  hold_the_store(milliseconds(150));
  writer_->flush(turn_, false);
  std::atomic<bool> done{false};
  // Done once the store is free again and a little time has passed for the retry.
  asio::steady_timer after(io_, milliseconds(250));
  after.async_wait([&](boost::system::error_code) { done = true; });
  auto worst = run_until(done);
  other_.join();
  EXPECT_TRUE(stored());
  // Blocked, the loop would wait out the hold (150 ms); a machine busy with other tests delays
  // it a few tens of ms anyway (24 ms seen beside the full suite on 2 cores).
  EXPECT_LT(worst, milliseconds(75))
      << "the loop was blocked for " << std::chrono::duration<double, std::milli>(worst).count()
      << " ms";
}

// A turn's end is being written (on the writer's thread, the store held) when the turn changes
// its message again and a reader asks for everything stored (write_pending(), as listing the
// messages does): the older write lands first and the newer version is what stays.
TEST_F(TurnWriterBusyStore, ANewerVersionStoredWhileAnOlderOneIsInFlightIsTheOneThatStays) {
  hold_the_store(milliseconds(100));
  std::atomic<bool> done{false};
  asio::co_spawn(io_, store_turn(writer_, turn_, done), asio::detached);
  io_.run_for(milliseconds(10));  // the write of the first version starts and waits
  ASSERT_FALSE(done);
  MessageInfo newer = message_;
  newer.agent = "plan";
  writer_->stage_message(*turn_, newer);
  writer_->flush(turn_, false);
  writer_->write_pending();
  EXPECT_TRUE(stored("plan"));
  run_until(done);
  EXPECT_TRUE(done) << "the turn's end waited for a write that write_pending() settled";
  other_.join();
  EXPECT_TRUE(stored("plan"));
}

// A session deleted while a write of its turn is on the writer's thread (the service forgets it
// in the writer, then deletes it): the write lands first, so the delete leaves nothing behind
// and the session does not come back.
TEST_F(TurnWriterBusyStore, ASessionDeletedWhileItsWriteIsInFlightStaysDeleted) {
  for (int round = 0; round < 20; ++round) {
    SCOPED_TRACE(round);
    io_.restart();  // the last round ran it out of work
    SessionInfo session = session_;
    session.id = ids::make("ses");
    ASSERT_TRUE(store_->put_session(session));
    auto turn = std::make_shared<Turn>();
    turn->session = session;
    turn->unsaved_session = session;  // the turn stores its session's row too
    MessageInfo message = message_;
    message.id = ids::make("msg");
    message.session_id = session.id;
    writer_->stage_message(*turn, message);
    std::atomic<bool> done{false};
    asio::co_spawn(io_, store_turn(writer_, turn, done), asio::detached);
    io_.poll();  // the write starts on the writer's thread
    writer_->forget_session(session.id);
    ASSERT_TRUE(store_->delete_session(session.id));
    auto deadline = Clock::now() + std::chrono::seconds(5);
    while (!done && Clock::now() < deadline)
      io_.run_for(milliseconds(1));
    ASSERT_TRUE(done);
    writer_->write_pending();
    auto found = store_->get_session(session.id);
    ASSERT_TRUE(found);
    EXPECT_FALSE(found->has_value()) << "the deleted session came back";
    auto messages = store_->list_messages(session.id);
    ASSERT_TRUE(messages);
    EXPECT_TRUE(messages->empty());
  }
}

}  // namespace
}  // namespace sb::session
