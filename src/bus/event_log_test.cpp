#include "bus/event_log.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sb::bus {
namespace {

constexpr std::uint64_t kBase = 1000;

struct Fixture {
  std::shared_ptr<EventBus> bus = EventBus::create();
  EventLog::Clock::time_point now{};
  std::shared_ptr<EventLog> log;

  explicit Fixture(EventLog::Options options = {}) {
    options.id_base = kBase;
    options.global_prefix = R"({"directory":"/p","payload":)";
    options.now = [this] { return now; };
    log = EventLog::create(bus, std::move(options));
  }
  void publish(int n) { bus->publish("tick", boost::json::object{{"n", n}}); }
};

std::string event_frame(std::uint64_t id, int n) {
  return "id: " + std::to_string(id) +
         "\ndata: {\"type\":\"tick\",\"properties\":{\"n\":" + std::to_string(n) + "}}\n\n";
}

TEST(EventLog, FramesCarryIdsAndReachEveryReaderOnce) {
  Fixture f;
  std::vector<EventLog::Frame> a, b;
  auto ra =
      f.log->attach(std::nullopt, EventLog::Format::Event, [&](auto& fr) { a.push_back(fr); });
  auto rb =
      f.log->attach(std::nullopt, EventLog::Format::Event, [&](auto& fr) { b.push_back(fr); });
  EXPECT_FALSE(ra.resumed.has_value());
  EXPECT_EQ(ra.missed, nullptr);
  f.publish(1);
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(*a[0], event_frame(kBase + 1, 1));
  EXPECT_EQ(a[0].get(), b[0].get());  // built once, shared
}

TEST(EventLog, GlobalFramesWrapTheEvent) {
  Fixture f;
  std::vector<EventLog::Frame> got;
  f.log->attach(std::nullopt, EventLog::Format::Global, [&](auto& fr) { got.push_back(fr); });
  f.publish(7);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(*got[0],
            "id: 1001\ndata: {\"directory\":\"/p\",\"payload\":{\"type\":\"tick\","
            "\"properties\":{\"n\":7}}}\n\n");
}

TEST(EventLog, ReconnectGetsExactlyTheMissedFrames) {
  Fixture f;
  auto first = f.log->attach(std::nullopt, EventLog::Format::Event, [](auto&) {});
  for (int i = 1; i <= 5; ++i)
    f.publish(i);
  f.log->detach(first.reader);  // the client saw up to id 1002, then dropped
  std::vector<EventLog::Frame> live;
  auto again =
      f.log->attach(kBase + 2, EventLog::Format::Event, [&](auto& fr) { live.push_back(fr); });
  ASSERT_TRUE(again.resumed.has_value());
  EXPECT_TRUE(*again.resumed);
  ASSERT_NE(again.missed, nullptr);
  EXPECT_EQ(*again.missed,
            event_frame(kBase + 3, 3) + event_frame(kBase + 4, 4) + event_frame(kBase + 5, 5));
  f.publish(6);
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(*live[0], event_frame(kBase + 6, 6));

  // Up to date: resumed, nothing to send; the Global twin of a kept frame is made on demand.
  auto current = f.log->attach(kBase + 6, EventLog::Format::Global, [](auto&) {});
  EXPECT_TRUE(*current.resumed);
  EXPECT_EQ(current.missed, nullptr);
  auto global = f.log->attach(kBase + 5, EventLog::Format::Global, [](auto&) {});
  ASSERT_NE(global.missed, nullptr);
  EXPECT_EQ(*global.missed,
            "id: 1006\ndata: {\"directory\":\"/p\",\"payload\":{\"type\":\"tick\","
            "\"properties\":{\"n\":6}}}\n\n");
}

TEST(EventLog, IdsOlderThanTheBufferOrNotOursAreNotResumed) {
  EventLog::Options o;
  o.max_events = 3;
  Fixture f(o);
  auto r = f.log->attach(std::nullopt, EventLog::Format::Event, [](auto&) {});
  for (int i = 1; i <= 10; ++i)
    f.publish(i);
  EXPECT_EQ(f.log->kept(), 3u);  // 8, 9, 10
  EXPECT_TRUE(*f.log->attach(kBase + 7, EventLog::Format::Event, [](auto&) {}).resumed);
  EXPECT_FALSE(*f.log->attach(kBase + 6, EventLog::Format::Event, [](auto&) {}).resumed);
  EXPECT_FALSE(*f.log->attach(kBase + 11, EventLog::Format::Event, [](auto&) {}).resumed);
  EXPECT_FALSE(*f.log->attach(5, EventLog::Format::Event, [](auto&) {}).resumed);  // below base
  EXPECT_FALSE(*f.log->attach(~0ull, EventLog::Format::Event, [](auto&) {}).resumed);
}

TEST(EventLog, BytesBoundTheBuffer) {
  EventLog::Options o;
  o.max_bytes = 3 * event_frame(kBase + 1, 1).size();
  Fixture f(o);
  f.log->attach(std::nullopt, EventLog::Format::Event, [](auto&) {});
  for (int i = 1; i <= 9; ++i)
    f.publish(i);
  EXPECT_EQ(f.log->kept(), 3u);
  EXPECT_LE(f.log->kept_bytes(), o.max_bytes);
}

TEST(EventLog, NothingIsBuiltUntilAReaderComesAndRecordingStopsAfterTheLinger) {
  EventLog::Options o;
  o.linger = std::chrono::seconds(10);
  Fixture f(o);
  f.publish(1);
  EXPECT_FALSE(f.bus->has_subscribers());  // no reader yet: the bus builds no event
  EXPECT_FALSE(f.log->recording());

  // A first reader: only an id naming the last event published can be resumed (nothing missed).
  auto r = f.log->attach(kBase + 1, EventLog::Format::Event, [](auto&) {});
  EXPECT_TRUE(*r.resumed);
  EXPECT_EQ(r.missed, nullptr);
  EXPECT_TRUE(f.bus->has_subscribers());
  f.publish(2);
  f.log->detach(r.reader);
  f.now += std::chrono::seconds(5);
  f.publish(3);  // within the linger: kept
  auto back = f.log->attach(kBase + 2, EventLog::Format::Event, [](auto&) {});
  EXPECT_TRUE(*back.resumed);
  EXPECT_EQ(*back.missed, event_frame(kBase + 3, 3));
  f.log->detach(back.reader);

  f.now += std::chrono::seconds(11);
  f.publish(4);  // past it: recording stops, and the bus has no subscriber again
  EXPECT_FALSE(f.log->recording());
  EXPECT_FALSE(f.bus->has_subscribers());
  f.publish(5);
  auto late = f.log->attach(kBase + 3, EventLog::Format::Event, [](auto&) {});
  EXPECT_FALSE(*late.resumed);
}

}  // namespace
}  // namespace sb::bus
