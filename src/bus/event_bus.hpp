#pragma once
// The event bus: every state change in the core is published here as {type, properties}; the
// /event SSE stream, the tests and (later) the session processor subscribe.
//
// Not thread-safe: use from the server's executor only (docs/development.md, "Threading model").
// publish() calls each subscriber synchronously; a subscriber must not block (push connections
// queue the frame for their own writer). The frame is serialized once per event and shared by
// every subscriber.
#include <boost/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sb::bus {

struct Event {
  std::uint64_t seq = 0;  // increases by one per published event
  std::string type;
  boost::json::object properties;
  std::string frame;  // {"type": ..., "properties": ...} serialized, built once
  // The node of a cluster the event happened on, when another (cluster/node.hpp relays them);
  // empty for this server's own.
  std::string origin;
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
  // Another node's event (Event::origin), for this server's subscribers.
  void publish_from(std::string origin, std::string_view type, boost::json::object properties);
  std::size_t subscriber_count() const;
  // For publishers that can skip building an event nobody will read.
  bool has_subscribers() const { return !subscribers_->empty(); }
  // The seq of the last event published (0 before the first), read or not.
  std::uint64_t last_seq() const { return seq_; }

 private:
  EventBus() = default;
  friend class Subscription;
  void unsubscribe(std::uint64_t id);

  struct Entry {
    std::uint64_t id;
    std::shared_ptr<Handler> handler;
  };
  using List = std::vector<Entry>;

  // Copy-on-write: publish() walks a snapshot, so a handler may subscribe or unsubscribe (itself
  // or another) while it runs; the change applies from the next event.
  std::shared_ptr<const List> subscribers_ = std::make_shared<const List>();
  std::uint64_t next_id_ = 1;
  std::uint64_t seq_ = 0;
};

}  // namespace sb::bus
