#pragma once
// TurnWriter: what turns change becomes events at once and rows in the store a little later.
// Staged parts and messages are published on the bus when they are staged and stored (SQLite)
// whole message by message: a turn's progress (a step's open assistant message, a running tool
// call) within kWriteDelay, in one transaction with every other turn's, and everything at the
// turn's end. A write that fails is kept and tried again ahead of the next one. Writes that can
// wait do not block the thread while the store is busy (the store's checkpoint thread starting its
// log over): the timer's writes and store() try again a millisecond later (store::
// WriteWithoutWaiting). Not thread-safe: use from the server's executor only (the turns' one
// thread); the destructor stores what is left.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "bus/event_bus.hpp"
#include "session/store.hpp"
#include "session/turn.hpp"

namespace sb::session {

class TurnWriter : public std::enable_shared_from_this<TurnWriter> {
 public:
  static std::shared_ptr<TurnWriter> create(boost::asio::any_io_executor executor,
                                            std::shared_ptr<SessionStore> store,
                                            std::shared_ptr<bus::EventBus> bus);
  // Stores what turns gathered and no round stored yet (a forced stop drops posted handlers).
  ~TurnWriter();

  // Publish now; store at the turn's next flush().
  void stage_part(Turn& turn, const Part& part);
  void stage_message(Turn& turn, const MessageInfo& info);
  // Stores what the turn has staged. `now` false (a step's start, a tool that waits): within
  // kWriteDelay, in one transaction with what every other turn has staged by then; a turn that
  // ends sooner stores everything once, at its end. `now` (a turn's end, before its answer goes
  // out): at once, with everything other turns have staged, waiting for the store if another
  // connection writes (polls of 100 us: store::Database).
  void flush(const std::shared_ptr<Turn>& turn, bool now);
  // A turn's end, as flush(turn, true), without blocking the thread: while the store is busy it
  // tries again every kBusyRetry, for up to kBusyPatience, then writes waiting. Done when the
  // changes are stored (or their write failed, and they are kept as flush() keeps them).
  boost::asio::awaitable<void> store(std::shared_ptr<Turn> turn);
  // Stores what every turn has staged (and what failed to store before), waiting for the store
  // if it is busy. On the executor's thread, as everything that touches a turn's staged changes
  // (or after the executor has stopped, from the destructor).
  void write_pending();
  // message.part.updated only (a tool's progress), nothing stored.
  void publish_part(const Part& part);

  // The session was deleted: an aborted turn of it winding down publishes and stores nothing.
  void forget_session(const std::string& session_id);
  bool is_deleted(const std::string& session_id) const;
  // Server shutdown. From store_at_once() on, every flush() stores at once; store_waiting()
  // stores what waits for the write delay, so that no write timer holds the stop up.
  void store_at_once();
  void store_waiting();

 private:
  TurnWriter(boost::asio::any_io_executor executor, std::shared_ptr<SessionStore> store,
             std::shared_ptr<bus::EventBus> bus);
  enum class Written { Stored, Failed, Busy };
  // One write of everything waiting. `may_wait` false: a busy store leaves it all kept, in
  // order, and says Busy.
  Written write(bool may_wait);
  void add(const std::shared_ptr<Turn>& turn);
  // The write timer: a write within `delay` (sooner than one already armed, or none).
  void arm(std::chrono::milliseconds delay);

  std::shared_ptr<SessionStore> store_;
  std::shared_ptr<bus::EventBus> bus_;
  std::set<std::string> deleted_;
  bool at_once_ = false;
  // Turns with staged changes that a flush() asked to store; write_timer_ runs while any waits.
  std::vector<std::shared_ptr<Turn>> unsaved_turns_;
  boost::asio::steady_timer write_timer_;
  bool write_armed_ = false;
  // Changes whose write failed, in order, tried again ahead of the next write.
  struct PendingWrite {
    std::shared_ptr<Turn> turn;
    StoreChanges changes;
    int failures = 0;
  };
  std::vector<PendingWrite> failed_writes_;
};

}  // namespace sb::session
