#pragma once
// The event bus: every state change in the core is published here as {type, properties}; the
// /event SSE stream, the tests and (later) the session processor subscribe.
//
// Thread-safe. publish() calls each subscriber synchronously on the publishing thread, outside
// any lock; a subscriber must not block (push connections post the frame to their own executor
// and queue). The frame is serialized once per event and shared by every subscriber.
#include <boost/json.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace sb::bus {

struct Event {
  std::uint64_t seq = 0;  // increases by one per published event
  std::string type;
  boost::json::object properties;
  std::string frame;  // {"type": ..., "properties": ...} serialized, built once
};

using EventPtr = std::shared_ptr<const Event>;
using Handler = std::function<void(const EventPtr&)>;

class EventBus;

// Unsubscribes when destroyed. Movable.
class Subscription {
 public:
  Subscription() = default;
  Subscription(Subscription&& other) noexcept;
  Subscription& operator=(Subscription&& other) noexcept;
  Subscription(const Subscription&) = delete;
  Subscription& operator=(const Subscription&) = delete;
  ~Subscription();
  void reset();

 private:
  friend class EventBus;
  Subscription(std::weak_ptr<EventBus> bus, std::uint64_t id) : bus_(std::move(bus)), id_(id) {}
  std::weak_ptr<EventBus> bus_;
  std::uint64_t id_ = 0;
};

class EventBus : public std::enable_shared_from_this<EventBus> {
 public:
  static std::shared_ptr<EventBus> create() { return std::shared_ptr<EventBus>(new EventBus()); }

  Subscription subscribe(Handler handler);
  void publish(std::string_view type, boost::json::object properties);
  std::size_t subscriber_count() const;
  // Lock-free, for publishers that can skip building an event nobody will read.
  bool has_subscribers() const { return subscribers_n_.load(std::memory_order_relaxed) > 0; }

 private:
  EventBus() = default;
  friend class Subscription;
  void unsubscribe(std::uint64_t id);

  struct Entry {
    std::uint64_t id;
    std::shared_ptr<Handler> handler;
  };
  using List = std::vector<Entry>;

  mutable std::mutex mutex_;
  // Copy-on-write: publish() takes a snapshot under the lock and calls handlers without it.
  std::shared_ptr<const List> subscribers_ = std::make_shared<const List>();
  std::uint64_t next_id_ = 1;
  std::atomic<std::uint64_t> seq_{0};
  std::atomic<std::size_t> subscribers_n_{0};
};

}  // namespace sb::bus
