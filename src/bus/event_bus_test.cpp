#include "bus/event_bus.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "util/json.hpp"

namespace sb::bus {
namespace {

// Collects what a subscriber saw.
struct Recorder {
  std::vector<EventPtr> events;

  Handler handler() {
    return [this](const EventPtr& e) { events.push_back(e); };
  }
  std::vector<EventPtr> snapshot() { return events; }
};

TEST(EventBus, PublishReachesEverySubscriberWithTypeAndProperties) {
  auto bus = EventBus::create();
  Recorder a, b;
  auto sa = bus->subscribe(a.handler());
  auto sb = bus->subscribe(b.handler());
  EXPECT_EQ(bus->subscriber_count(), 2u);

  bus->publish("client-tool.registered",
               boost::json::object{{"clientID", "c1"}, {"toolIDs", boost::json::array{"t"}}});

  for (Recorder* r : {&a, &b}) {
    auto events = r->snapshot();
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0]->type, "client-tool.registered");
    EXPECT_EQ(events[0]->properties.at("clientID").as_string(), "c1");
    EXPECT_EQ(events[0]->properties.at("toolIDs").as_array().size(), 1u);
  }
  // One event object, serialized once, shared by every subscriber.
  EXPECT_EQ(a.snapshot()[0].get(), b.snapshot()[0].get());
}

TEST(EventBus, FrameParsesToTypeAndProperties) {
  auto bus = EventBus::create();
  Recorder r;
  auto sub = bus->subscribe(r.handler());
  boost::json::object props{{"sessionID", "ses_1"}, {"nested", boost::json::object{{"n", 3}}}};
  bus->publish("session.updated", props);

  auto events = r.snapshot();
  ASSERT_EQ(events.size(), 1u);
  auto frame = parse_json(events[0]->frame);
  ASSERT_TRUE(frame.has_value()) << frame.error().message;
  ASSERT_TRUE(frame->is_object());
  const auto& obj = frame->get_object();
  EXPECT_EQ(obj.size(), 2u);
  EXPECT_EQ(obj.at("type").as_string(), "session.updated");
  EXPECT_EQ(obj.at("properties"), boost::json::value(props));
}

TEST(EventBus, FrameOfTextWithQuotesAndNewlinesStaysValidJson) {
  auto bus = EventBus::create();
  Recorder r;
  auto sub = bus->subscribe(r.handler());
  bus->publish("x", boost::json::object{{"text", "line\n\"quoted\"\tend"}});
  auto events = r.snapshot();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]->frame.find('\n'), std::string::npos);  // one SSE data line
  auto frame = parse_json(events[0]->frame);
  ASSERT_TRUE(frame.has_value());
  EXPECT_EQ(frame->at("properties").at("text").as_string(), "line\n\"quoted\"\tend");
}

TEST(EventBus, SeqIncreasesByOnePerEvent) {
  auto bus = EventBus::create();
  Recorder r;
  auto sub = bus->subscribe(r.handler());
  for (int i = 0; i < 5; ++i)
    bus->publish("tick", boost::json::object{{"i", i}});
  auto events = r.snapshot();
  ASSERT_EQ(events.size(), 5u);
  for (std::size_t i = 1; i < events.size(); ++i) {
    EXPECT_EQ(events[i]->seq, events[i - 1]->seq + 1);
    EXPECT_EQ(events[i]->properties.at("i").as_int64(), static_cast<std::int64_t>(i));
  }
  EXPECT_GT(events[0]->seq, 0u);
}

TEST(EventBus, SeqCountsEventsPublishedWithoutSubscribers) {
  auto bus = EventBus::create();
  {
    Recorder r;
    auto sub = bus->subscribe(r.handler());
    bus->publish("a", {});
    ASSERT_EQ(r.snapshot().size(), 1u);
    std::uint64_t first = r.snapshot()[0]->seq;
    sub.reset();
    bus->publish("b", {});  // nobody listens
    auto sub2 = bus->subscribe(r.handler());
    bus->publish("c", {});
    auto events = r.snapshot();
    ASSERT_EQ(events.size(), 2u);
    EXPECT_EQ(events[1]->type, "c");
    EXPECT_EQ(events[1]->seq, first + 2);
  }
}

TEST(EventBus, DestroyingSubscriptionUnsubscribes) {
  auto bus = EventBus::create();
  Recorder kept, dropped;
  auto keep = bus->subscribe(kept.handler());
  {
    auto temp = bus->subscribe(dropped.handler());
    EXPECT_EQ(bus->subscriber_count(), 2u);
    bus->publish("one", {});
  }
  EXPECT_EQ(bus->subscriber_count(), 1u);
  bus->publish("two", {});
  EXPECT_EQ(dropped.snapshot().size(), 1u);
  EXPECT_EQ(kept.snapshot().size(), 2u);
}

TEST(EventBus, ResetUnsubscribesAndIsIdempotent) {
  auto bus = EventBus::create();
  Recorder r;
  auto sub = bus->subscribe(r.handler());
  sub.reset();
  sub.reset();
  EXPECT_EQ(bus->subscriber_count(), 0u);
  bus->publish("x", {});
  EXPECT_TRUE(r.snapshot().empty());
}

TEST(EventBus, MovedSubscriptionKeepsTheSubscription) {
  auto bus = EventBus::create();
  Recorder r;
  auto original = bus->subscribe(r.handler());
  Subscription moved(std::move(original));
  original.reset();  // the moved-from object owns nothing any more
  { Subscription destroyed_empty(std::move(original)); }
  EXPECT_EQ(bus->subscriber_count(), 1u);
  bus->publish("still-here", {});
  EXPECT_EQ(r.snapshot().size(), 1u);

  std::vector<Subscription> holder;
  holder.push_back(std::move(moved));
  EXPECT_EQ(bus->subscriber_count(), 1u);
  holder.clear();
  EXPECT_EQ(bus->subscriber_count(), 0u);
  bus->publish("gone", {});
  EXPECT_EQ(r.snapshot().size(), 1u);
}

TEST(EventBus, MoveAssignmentReleasesTheOldSubscription) {
  auto bus = EventBus::create();
  Recorder first, second;
  auto a = bus->subscribe(first.handler());
  auto b = bus->subscribe(second.handler());
  a = std::move(b);  // `a` drops the first handler and takes the second
  EXPECT_EQ(bus->subscriber_count(), 1u);
  bus->publish("x", {});
  EXPECT_TRUE(first.snapshot().empty());
  EXPECT_EQ(second.snapshot().size(), 1u);

  auto& self = a;
  a = std::move(self);  // self-move keeps it
  EXPECT_EQ(bus->subscriber_count(), 1u);
}

TEST(EventBus, SubscriptionMayOutliveTheBus) {
  Recorder r;
  Subscription sub;
  {
    auto bus = EventBus::create();
    sub = bus->subscribe(r.handler());
  }
  sub.reset();  // must not touch the destroyed bus
  SUCCEED();
}

TEST(EventBus, HandlerMaySubscribeAndUnsubscribeDuringPublish) {
  auto bus = EventBus::create();
  Recorder late;
  Subscription self_sub, late_sub;
  int calls = 0;
  self_sub = bus->subscribe([&](const EventPtr&) {
    ++calls;
    self_sub.reset();  // no lock is held while handlers run, so this does not deadlock
    late_sub = bus->subscribe(late.handler());
  });
  bus->publish("first", {});
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(late.snapshot().empty());  // subscribed after the snapshot was taken
  bus->publish("second", {});
  EXPECT_EQ(calls, 1);
  ASSERT_EQ(late.snapshot().size(), 1u);
  EXPECT_EQ(late.snapshot()[0]->type, "second");
}

// Subscriptions come and go between publishes and from inside handlers: every event reaches the
// steady subscriber once, seq counts 1..n, and every churned subscription goes away.
TEST(EventBus, ChurnBetweenAndDuringPublishesKeepsSeqAndSubscribers) {
  auto bus = EventBus::create();
  constexpr int kEvents = 2000;

  std::vector<std::uint64_t> seqs;
  auto steady = bus->subscribe([&](const EventPtr& e) { seqs.push_back(e->seq); });

  int churn_events = 0;
  Subscription inner;  // replaced from inside a handler on every event
  auto churner = bus->subscribe(
      [&](const EventPtr&) { inner = bus->subscribe([&](const EventPtr&) { ++churn_events; }); });
  for (int i = 0; i < kEvents; ++i) {
    Subscription between = bus->subscribe([&](const EventPtr&) { ++churn_events; });
    Subscription moved = std::move(between);
    bus->publish("load", boost::json::object{{"i", i}});
  }

  ASSERT_EQ(seqs.size(), static_cast<std::size_t>(kEvents));
  for (std::size_t i = 0; i < seqs.size(); ++i)
    EXPECT_EQ(seqs[i], i + 1);
  // Each event reached the subscription made just before it, and the one the previous event's
  // handler made (none for the first).
  EXPECT_EQ(churn_events, 2 * kEvents - 1);
  EXPECT_EQ(bus->subscriber_count(), 3u);  // steady, churner, the last inner
  churner.reset();
  inner.reset();
  EXPECT_EQ(bus->subscriber_count(), 1u);
  EXPECT_TRUE(bus->has_subscribers());
  steady.reset();
  EXPECT_FALSE(bus->has_subscribers());
}

}  // namespace
}  // namespace sb::bus
