#include "session/turn_writer.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <optional>

#include "store/database.hpp"
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
// A write that found the store busy (its checkpoint thread starting the log over: a few ms) is
// tried again this much later; one of a turn's end waits at most kBusyPatience that way, then
// waits in the store.
constexpr std::chrono::milliseconds kBusyRetry{1};
constexpr std::chrono::seconds kBusyPatience{1};
}  // namespace

std::shared_ptr<TurnWriter> TurnWriter::create(asio::any_io_executor executor,
                                               std::shared_ptr<SessionStore> store,
                                               std::shared_ptr<bus::EventBus> bus) {
  return std::shared_ptr<TurnWriter>(
      new TurnWriter(std::move(executor), std::move(store), std::move(bus)));
}

TurnWriter::TurnWriter(asio::any_io_executor executor, std::shared_ptr<SessionStore> store,
                       std::shared_ptr<bus::EventBus> bus)
    : store_(std::move(store)), bus_(std::move(bus)), write_timer_(std::move(executor)) {}

TurnWriter::~TurnWriter() {
  write_pending();
}

void TurnWriter::forget_session(const std::string& session_id) {
  deleted_.insert(session_id);
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

void TurnWriter::add(const std::shared_ptr<Turn>& turn) {
  if (std::find(unsaved_turns_.begin(), unsaved_turns_.end(), turn) == unsaved_turns_.end())
    unsaved_turns_.push_back(turn);
}

void TurnWriter::flush(const std::shared_ptr<Turn>& turn, bool now) {
  add(turn);
  now = now || at_once_;
  if (now) {
    write(true);
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
  auto deadline = std::chrono::steady_clock::now() + kBusyPatience;
  std::optional<asio::steady_timer> timer;
  while (write(false) == Written::Busy) {
    if (std::chrono::steady_clock::now() >= deadline) break;
    if (!timer) timer.emplace(co_await asio::this_coro::executor);
    timer->expires_after(kBusyRetry);
    auto [ec] = co_await timer->async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec) break;  // the executor stops: store it now
  }
  // Busy for too long (or stopping): wait in the store, as flush() does.
  write(true);
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
    if (self->write(false) == Written::Busy) self->arm(kBusyRetry);
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

void TurnWriter::write_pending() {
  write(true);
}

TurnWriter::Written TurnWriter::write(bool may_wait) {
  std::vector<PendingWrite> batch = std::exchange(failed_writes_, {});
  for (auto& turn : unsaved_turns_)
    if (turn->has_unsaved()) batch.push_back(PendingWrite{turn, turn->take_unsaved()});
  unsaved_turns_.clear();
  std::erase_if(batch, [&](const PendingWrite& w) { return is_deleted(w.turn->session.id); });
  if (batch.empty()) return Written::Stored;
  std::vector<const StoreChanges*> changes;
  changes.reserve(batch.size());
  for (const auto& w : batch)
    changes.push_back(&w.changes);
  Result<void> r;
  {
    // Only this write: the one-by-one retries below wait in the store as any write does.
    std::optional<store::WriteWithoutWaiting> without_waiting;
    if (!may_wait) without_waiting.emplace();
    r = store_->write(changes);
    if (!r && without_waiting && without_waiting->found_busy()) {
      // Nothing failed: all of it is kept, in order, for the next try.
      failed_writes_.insert(failed_writes_.begin(), std::make_move_iterator(batch.begin()),
                            std::make_move_iterator(batch.end()));
      return Written::Busy;
    }
  }
  if (r) return Written::Stored;
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
      auto one = store_->write(w.changes);
      if (one) continue;
      if (++w.failures >= kMaxWriteFailures) {
        log::error("gave up storing changes of session ", w.turn->session.id, " after ",
                   kMaxWriteFailures, " tries: ", one.error().message);
        continue;
      }
      held_back.insert(w.turn.get());
    }
    kept.push_back(std::move(w));
  }
  if (kept.empty()) return Written::Stored;
  failed_writes_.insert(failed_writes_.begin(), std::make_move_iterator(kept.begin()),
                        std::make_move_iterator(kept.end()));
  return Written::Failed;
}

}  // namespace sb::session
