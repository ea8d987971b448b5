#include "session/turn_writer.hpp"

#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <limits>

#include "util/complete.hpp"
#include "util/log.hpp"

namespace sb::session {

namespace asio = boost::asio;

namespace {
// How long a turn's progress (its start, a waiting tool call) may wait to be stored; what a crash
// can lose of a turn that is still running.
constexpr std::chrono::milliseconds kWriteDelay{50};
// A write that keeps failing (not a passing full disk) is given up after this many tries, each
// made when the server stores something anyway.
constexpr int kMaxWriteFailures = 64;
constexpr std::uint64_t kEveryWrite = std::numeric_limits<std::uint64_t>::max();
// A write that failed is tried again after this long when nothing else is stored sooner: a
// turn's last changes must not wait for traffic that may never come (and on a shared store its
// session stays claimed until they are stored).
constexpr std::chrono::milliseconds kRetryDelay{1000};
}  // namespace

std::shared_ptr<TurnWriter> TurnWriter::create(asio::any_io_executor executor,
                                               std::shared_ptr<SessionStore> store,
                                               std::shared_ptr<bus::EventBus> bus) {
  return std::shared_ptr<TurnWriter>(
      new TurnWriter(std::move(executor), std::move(store), std::move(bus)));
}

TurnWriter::TurnWriter(asio::any_io_executor executor, std::shared_ptr<SessionStore> store,
                       std::shared_ptr<bus::EventBus> bus)
    : executor_(executor),
      store_(std::move(store)),
      bus_(std::move(bus)),
      write_timer_(std::move(executor)) {}

TurnWriter::~TurnWriter() {
  closing_ = true;
  write_pending();
  // The write thread's last job may still be handing its flight back to the executor.
  thread_.join();
}

void TurnWriter::forget_session(const std::string& session_id) {
  deleted_.insert(session_id);
  // A write in flight may carry the session's row: it lands before the session's delete, or it
  // would bring the session back.
  if (auto flight = flight_) {
    settle(flight);
    if (std::exchange(again_, false)) start_write();
  }
}

bool TurnWriter::is_deleted(const std::string& session_id) const {
  return deleted_.count(session_id) > 0;
}

void TurnWriter::publish_part(const Part& part) {
  // Parts are the largest events: not built when nobody listens.
  if (!bus_->has_subscribers()) return;
  if (is_deleted(part.session_id)) return;  // an aborted turn of a deleted session winding down
  bus_->publish(
      "message.part.updated",
      json::object{{"sessionID", part.session_id}, {"part", to_json(part)}, {"time", now_ms()}});
}

void TurnWriter::stage_part(Turn& turn, const Part& part) {
  MessageWithParts* m = turn.change(part.message_id);
  if (!m) {
    log::error("a part of message ", part.message_id, " that its turn does not have");
    return;
  }
  // Parts are staged in the order they are made, so the place is nearly always the end.
  auto it = std::find_if(m->parts.rbegin(), m->parts.rend(),
                         [&](const Part& p) { return p.id <= part.id; });
  if (it != m->parts.rend() && it->id == part.id)
    *it = part;
  else
    m->parts.insert(it.base(), part);
  publish_part(part);
}

void TurnWriter::stage_message(Turn& turn, const MessageInfo& info) {
  if (MessageWithParts* m = turn.change(info.id)) {
    m->info = info;
  } else {
    turn.messages.push_back({info, {}});
    turn.unsaved.push_back(turn.messages.size() - 1);
  }
  if (bus_->has_subscribers() && !is_deleted(info.session_id))
    bus_->publish("message.updated",
                  json::object{{"sessionID", info.session_id}, {"info", to_json(info)}});
}

void TurnWriter::stage_wait(const std::shared_ptr<Turn>& turn, const Wait& wait) {
  turn->unsaved_waits.push_back(wait);
  flush(turn, false);
}

void TurnWriter::end_wait(const std::shared_ptr<Turn>& turn, const std::string& id) {
  // One that no write took yet is simply not stored; one that a write took (or that was stored
  // before a restart) is deleted after it.
  auto staged = std::find_if(turn->unsaved_waits.begin(), turn->unsaved_waits.end(),
                             [&](const Wait& w) { return w.id == id; });
  if (staged != turn->unsaved_waits.end())
    turn->unsaved_waits.erase(staged);
  else
    turn->ended_waits.push_back(id);
  flush(turn, false);
}

void TurnWriter::add(const std::shared_ptr<Turn>& turn) {
  if (std::find(unsaved_turns_.begin(), unsaved_turns_.end(), turn) == unsaved_turns_.end())
    unsaved_turns_.push_back(turn);
}

void TurnWriter::flush(const std::shared_ptr<Turn>& turn, bool now) {
  add(turn);
  if (now || at_once_) {
    write_pending();
    return;
  }
  // Stored a little later rather than at once: a turn that ends within the delay (a fast model,
  // a tool that answers at once) stores its start, its tool calls and its end in one transaction
  // at its end, each row once, instead of one transaction per step. A turn that takes longer has
  // its progress stored within the delay, in one transaction with every other turn's.
  arm(kWriteDelay);
}

asio::awaitable<void> TurnWriter::store(std::shared_ptr<Turn> turn) {
  add(turn);
  if (at_once_) {
    write_pending();
    co_return;
  }
  // The turn's changes go with the next write that starts: now, or after the one in flight.
  co_await next_write();
}

asio::awaitable<void> TurnWriter::store_pending() {
  if (at_once_ || store_->calls_inline()) {
    write_pending();
    co_return;
  }
  co_await next_write();
}

asio::awaitable<void> TurnWriter::next_write() {
  std::uint64_t after = started_ + 1;
  auto wait = [this, after](auto handler) {
    waiters_.push_back(Waiter{after, asio::any_completion_handler<void()>(std::move(handler))});
    start_write();
  };
  co_await asio::async_initiate<const asio::use_awaitable_t<>, void()>(wait, asio::use_awaitable);
}

void TurnWriter::arm(std::chrono::milliseconds delay) {
  auto due = std::chrono::steady_clock::now() + delay;
  if (write_armed_ && write_timer_.expiry() <= due) return;
  write_armed_ = true;
  write_timer_.expires_at(due);  // a later wait ends with operation_aborted
  write_timer_.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
    auto self = weak.lock();
    if (!self || ec == asio::error::operation_aborted) return;
    self->write_armed_ = false;
    self->start_write();
  });
}

void TurnWriter::store_at_once() {
  at_once_ = true;
}

void TurnWriter::store_waiting() {
  write_armed_ = false;
  write_timer_.cancel();
  write_pending();
}

std::vector<TurnWriter::PendingWrite> TurnWriter::take_batch() {
  std::vector<PendingWrite> batch = std::exchange(failed_writes_, {});
  for (auto& turn : unsaved_turns_)
    if (turn->has_unsaved()) {
      batch.push_back(PendingWrite{turn, turn->session.id, turn->take_unsaved()});
      batch.back().changes.claimed_session = turn->session.id;
    }
  unsaved_turns_.clear();
  std::erase_if(batch, [&](const PendingWrite& w) {
    return is_deleted(w.session_id) || (w.turn && w.turn->disowned);
  });
  return batch;
}

void TurnWriter::start_write() {
  if (flight_) {
    again_ = true;
    return;
  }
  auto batch = take_batch();
  if (batch.empty()) {
    resume_waiters(kEveryWrite);  // nothing is left to store for anyone
    return;
  }
  auto flight = std::make_shared<Flight>();
  flight->number = ++started_;
  for (const auto& w : batch)
    flight->sessions.insert(w.session_id);
  flight->batch = std::move(batch);
  flight->done = flight->written.get_future();
  flight_ = flight;
  asio::post(thread_, [flight, store = store_, executor = executor_, weak = weak_from_this()] {
    flight->kept = write(*store, std::move(flight->batch));
    flight->written.set_value();
    asio::post(executor, [flight, weak] {
      auto self = weak.lock();
      // Gone, or settled already by write_pending().
      if (!self || self->flight_ != flight) return;
      self->settle(flight);
      if (std::exchange(self->again_, false)) self->start_write();
    });
  });
}

void TurnWriter::settle(const std::shared_ptr<Flight>& flight) {
  flight->done.wait();
  failed_writes_.insert(failed_writes_.begin(), std::make_move_iterator(flight->kept.begin()),
                        std::make_move_iterator(flight->kept.end()));
  flight_.reset();
  resume_waiters(flight->number);
  written();
}

void TurnWriter::written() {
  if (closing_) return;
  // Not once the server stops (store_at_once): the retry timer would hold its loop up.
  if (!failed_writes_.empty() && !at_once_) arm(kRetryDelay);
  if (on_written_) on_written_();
}

bool TurnWriter::unstored(const std::string& session_id) const {
  // A retry in flight has taken the failed writes out of failed_writes_.
  if (flight_ && flight_->sessions.count(session_id)) return true;
  return std::any_of(failed_writes_.begin(), failed_writes_.end(),
                     [&](const PendingWrite& w) { return w.session_id == session_id; });
}

void TurnWriter::resume_waiters(std::uint64_t written) {
  // Moved, never assigned (Boost 1.81's any_completion_handler move-assignment recurses).
  auto all = std::exchange(waiters_, {});
  for (auto& w : all) {
    if (w.after <= written)
      complete_later(executor_, std::move(w.handler));
    else
      waiters_.push_back(std::move(w));
  }
}

void TurnWriter::write_pending() {
  if (auto flight = flight_) settle(flight);
  again_ = false;
  auto batch = take_batch();
  if (!batch.empty()) failed_writes_ = write(*store_, std::move(batch));
  resume_waiters(kEveryWrite);
  written();
}

std::vector<TurnWriter::PendingWrite> TurnWriter::write(SessionStore& store,
                                                        std::vector<PendingWrite> batch) {
  std::vector<const StoreChanges*> changes;
  changes.reserve(batch.size());
  for (const auto& w : batch)
    changes.push_back(&w.changes);
  auto r = store.write(changes);
  if (r) return {};
  // One transaction per write instead, so that one that cannot succeed holds back no other turn.
  // What fails (nothing of a failed transaction is stored) is kept, in order, ahead of what turns
  // stage next, and tried again with the next write: a passing failure (a full disk that gets
  // space back) loses nothing, a turn's last changes included. A turn's later changes wait behind
  // its failed ones, so an older version of a row is never stored over a newer one.
  log::error("storing the changes of ", batch.size(),
             " turn steps (retried one by one): ", r.error().message);
  std::vector<PendingWrite> kept;
  std::set<const Turn*> held_back;
  for (auto& w : batch) {
    if (held_back.count(w.turn.get()) == 0) {
      auto one = store.write(w.changes);
      if (one) continue;
      // Another node runs the session now: what this node's turn did after losing it is not
      // stored over that node's (SessionService::check_claims disowns the turn).
      if (one.error().code == ErrorCode::Conflict) {
        log::warn("dropped changes of session ", w.session_id, ": ", one.error().message);
        continue;
      }
      if (++w.failures >= kMaxWriteFailures) {
        log::error("gave up storing changes of session ", w.session_id, " after ",
                   kMaxWriteFailures, " tries: ", one.error().message);
        continue;
      }
      held_back.insert(w.turn.get());
    }
    kept.push_back(std::move(w));
  }
  return kept;
}

}  // namespace sb::session
