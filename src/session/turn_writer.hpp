#pragma once
// TurnWriter: what turns change becomes events at once and rows in the store a little later.
// Staged parts and messages are published on the bus when they are staged and stored (SQLite)
// whole message by message: a turn's progress (a step's open assistant message, a running tool
// call) within kWriteDelay, in one transaction with every other turn's, and everything at the
// turn's end. A write that fails is kept and tried again ahead of the next one.
//
// The writes run on a thread of the writer's own, one at a time and in order, so that the event
// loop never waits for the disk (a commit's log append can wait milliseconds for the kernel, a
// checkpoint's syncs tens of them): store() awaits its write, the write timer's run on their own.
// That thread touches only the SessionStore (thread-safe) and the snapshot of changes a write
// took; everything else is not thread-safe: use from the server's executor only (the turns' one
// thread). write_pending() and the destructor store on the calling thread, after the write in
// flight.
#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
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
  // ends sooner stores everything once, at its end. `now` (after store_at_once()): at once, on
  // this thread.
  void flush(const std::shared_ptr<Turn>& turn, bool now);
  // A turn's end: stores what it staged, with what every other turn staged, on the writer's
  // thread. Done when the changes are stored (or their write failed, and they are kept as
  // flush() keeps them).
  boost::asio::awaitable<void> store(std::shared_ptr<Turn> turn);
  // Stores what every turn has staged (and what failed to store before) now, on this thread,
  // after the write in flight: what reads the store next sees it all. On the executor's thread,
  // as everything that touches a turn's staged changes (or after the executor has stopped, from
  // the destructor).
  void write_pending();
  // The same for the event loop: on a store whose calls run on a thread of their own
  // (PostgreSQL), the write is the writer thread's and the caller waits for it without holding
  // the loop up; on SQLite, write_pending().
  boost::asio::awaitable<void> store_pending();
  // A call of the turn waits for a client or a person / no longer does: stored at the turn's
  // next flush() (with the running part that it belongs to), so that a restart finds it.
  void stage_wait(const std::shared_ptr<Turn>& turn, const Wait& wait);
  void end_wait(const std::shared_ptr<Turn>& turn, const std::string& id);
  // message.part.updated only (a tool's progress), nothing stored.
  void publish_part(const Part& part);

  // The session is being deleted: an aborted turn of it winding down publishes and stores
  // nothing, and a write in flight has ended when this returns (call it before the delete).
  void forget_session(const std::string& session_id);
  bool is_deleted(const std::string& session_id) const;
  // Server shutdown. From store_at_once() on, every flush() stores at once; store_waiting()
  // stores what waits for the write delay, so that no write timer holds the stop up.
  void store_at_once();
  void store_waiting();
  // Whether changes of the session failed to store and wait to be tried again.
  bool unstored(const std::string& session_id) const;
  // Called on the executor after each write (stored or not; see unstored()).
  void on_written(std::function<void()> f) { on_written_ = std::move(f); }

 private:
  TurnWriter(boost::asio::any_io_executor executor, std::shared_ptr<SessionStore> store,
             std::shared_ptr<bus::EventBus> bus);
  // Changes of one turn, as a write took them.
  struct PendingWrite {
    std::shared_ptr<Turn> turn;  // only its address is used off the executor
    std::string session_id;
    StoreChanges changes;
    int failures = 0;
  };
  // A write on the writer's thread: what it carries, and what of it failed (kept for the next).
  struct Flight {
    std::uint64_t number = 0;
    std::vector<PendingWrite> batch;
    std::vector<PendingWrite> kept;
    std::set<std::string> sessions;  // of `batch`: not stored until the flight has settled
    std::promise<void> written;      // set on the writer's thread once `kept` is final
    std::future<void> done;          // of `written`, for the executor
  };
  // Writes `batch` (one transaction, or one per turn when that fails); returns what failed.
  static std::vector<PendingWrite> write(SessionStore& store, std::vector<PendingWrite> batch);
  // What failed before, then what turns staged since.
  std::vector<PendingWrite> take_batch();
  // Starts a write on the writer's thread, or asks for one after the write in flight.
  void start_write();
  // Waits for the next write that starts (now, or after the one in flight): it takes everything
  // staged so far.
  boost::asio::awaitable<void> next_write();
  // The write in flight is done: what failed is kept, waiters of it are resumed.
  void settle(const std::shared_ptr<Flight>& flight);
  void resume_waiters(std::uint64_t written);
  void add(const std::shared_ptr<Turn>& turn);
  // The write timer: a write within `delay` (sooner than one already armed, or none).
  void arm(std::chrono::milliseconds delay);
  // After a write: a retry is armed while writes failed, and on_written_ is told.
  void written();

  boost::asio::any_io_executor executor_;
  std::shared_ptr<SessionStore> store_;
  std::shared_ptr<bus::EventBus> bus_;
  std::set<std::string> deleted_;
  bool at_once_ = false;
  // Turns with staged changes that a flush() asked to store; write_timer_ runs while any waits.
  std::vector<std::shared_ptr<Turn>> unsaved_turns_;
  boost::asio::steady_timer write_timer_;
  bool write_armed_ = false;
  // Changes whose write failed, in order, tried again ahead of the next write.
  std::vector<PendingWrite> failed_writes_;
  // The write on the writer's thread (none: null); writes are numbered from 1.
  std::shared_ptr<Flight> flight_;
  std::uint64_t started_ = 0;
  bool again_ = false;  // a write was asked for while one was in flight
  // store() calls waiting for the write numbered `after` (or any later one) to end.
  struct Waiter {
    std::uint64_t after;
    boost::asio::any_completion_handler<void()> handler;
  };
  std::vector<Waiter> waiters_;
  std::function<void()> on_written_;
  bool closing_ = false;  // in the destructor: no retry is armed, nobody is told
  // Last: its thread ends (joined) before the rest goes.
  boost::asio::thread_pool thread_{1};
};

}  // namespace sb::session
