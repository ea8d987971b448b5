#include "bus/event_bus.hpp"

namespace sb::bus {

Subscription::Subscription(Subscription&& other) noexcept
    : bus_(std::move(other.bus_)), id_(std::exchange(other.id_, 0)) {}

Subscription& Subscription::operator=(Subscription&& other) noexcept {
  if (this != &other) {
    reset();
    bus_ = std::move(other.bus_);
    id_ = std::exchange(other.id_, 0);
  }
  return *this;
}

Subscription::~Subscription() {
  reset();
}

void Subscription::reset() {
  if (id_ == 0) return;
  if (auto bus = bus_.lock()) bus->unsubscribe(id_);
  id_ = 0;
  bus_.reset();
}

Subscription EventBus::subscribe(Handler handler) {
  auto list = std::make_shared<List>(*subscribers_);
  std::uint64_t id = next_id_++;
  list->push_back({id, std::make_shared<Handler>(std::move(handler))});
  subscribers_ = std::move(list);
  return Subscription(weak_from_this(), id);
}

void EventBus::unsubscribe(std::uint64_t id) {
  auto list = std::make_shared<List>();
  list->reserve(subscribers_->size());
  for (const auto& e : *subscribers_)
    if (e.id != id) list->push_back(e);
  subscribers_ = std::move(list);
}

std::size_t EventBus::subscriber_count() const {
  return subscribers_->size();
}

void EventBus::publish(std::string_view type, boost::json::object properties) {
  publish_from({}, type, std::move(properties));
}

void EventBus::publish_from(std::string origin, std::string_view type,
                            boost::json::object properties) {
  // Keeps the list alive and unchanged while handlers (un)subscribe.
  std::shared_ptr<const List> snapshot = subscribers_;
  std::uint64_t seq = ++seq_;
  if (snapshot->empty()) return;

  auto event = std::make_shared<Event>();
  event->seq = seq;
  event->type = std::string(type);
  event->origin = std::move(origin);
  event->properties = std::move(properties);
  boost::json::object frame;
  frame["type"] = event->type;
  frame["properties"] = event->properties;
  event->frame = boost::json::serialize(frame);
  EventPtr shared = std::move(event);
  for (const auto& entry : *snapshot)
    (*entry.handler)(shared);
}

}  // namespace sb::bus
