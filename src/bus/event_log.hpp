#pragma once
// The event log behind GET /event and GET /global/event: each bus event becomes one SSE frame
// with an `id:` line, built once and shared by every stream, and the most recent frames are kept
// (bounded by count and bytes) so that a client that reconnects with Last-Event-ID is sent what
// it missed.
//
// An event's id is the bus's sequence number plus a base taken from the clock when the log is
// made: microseconds since the epoch, less the events published before. Ids only grow, across
// restarts too (as long as fewer than a million events a second are published), so an id from
// before a restart is below every id this process hands out, and one above the last event was
// never ours: neither can be resumed.
//
// The log records only while a stream reads it and for `linger` after the last one left, so a
// server that nobody watches builds no event at all (EventBus::has_subscribers).
//
// Not thread-safe: the server's executor only, as the bus. A reader is called synchronously and
// must not block (push connections queue the frame).
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bus/event_bus.hpp"

namespace sb::bus {

class EventLog : public std::enable_shared_from_this<EventLog> {
 public:
  using Frame = std::shared_ptr<const std::string>;
  using Clock = std::chrono::steady_clock;

  // Event: `id: N\ndata: {"type", "properties"}`. Global: the same event wrapped as OpenCode's
  // GlobalEvent, `data: PREFIX{"type", "properties"}}` (Options::global_prefix).
  enum class Format { Event, Global };

  struct Options {
    std::size_t max_events = 1000;     // frames kept for replay
    std::size_t max_bytes = 4u << 20;  // their size in all (an Event frame and its Global twin)
    std::chrono::milliseconds linger{120000};  // recording goes on this long after the last reader
    // The Global frame's data up to the event: `{"directory": ..., "payload":`.
    std::string global_prefix = "{\"payload\":";
    std::optional<std::uint64_t> id_base;  // tests: ids are id_base + seq
    std::function<Clock::time_point()> now = [] { return Clock::now(); };
  };

  static std::shared_ptr<EventLog> create(std::shared_ptr<EventBus> bus, Options options);

  using Reader = std::function<void(const Frame&)>;
  struct Attached {
    std::uint64_t reader = 0;     // for detach()
    std::optional<bool> resumed;  // set when a last id was given: could its followers be sent?
    Frame missed;                 // when resumed: the frames after it, as one; null when none
  };
  // A new reader of every event from now on. `last_id`: the id of the last event the client
  // has (Last-Event-ID); the frames after it come back in `missed` when every one of them is
  // still kept.
  Attached attach(std::optional<std::uint64_t> last_id, Format format, Reader reader);
  void detach(std::uint64_t reader);

  std::uint64_t id_of(std::uint64_t seq) const { return base_ + seq; }
  bool recording() const { return recording_; }
  std::size_t kept() const { return entries_.size(); }
  std::size_t kept_bytes() const { return bytes_; }

 private:
  EventLog(std::shared_ptr<EventBus> bus, Options options);
  void record(const EventPtr& event);
  void stop_recording();
  const Frame& frame(std::size_t index, Format format);

  struct Entry {
    std::uint64_t seq = 0;
    Frame event;   // the Event format, built when recorded
    Frame global;  // the Global format, built when first asked for
  };
  struct ReaderEntry {
    std::uint64_t id;
    Format format;
    Reader read;
  };

  std::shared_ptr<EventBus> bus_;
  Options options_;
  std::uint64_t base_ = 0;
  Subscription subscription_;
  bool recording_ = false;
  std::deque<Entry> entries_;
  std::size_t bytes_ = 0;
  // While recording: every event from this seq on is in entries_.
  std::uint64_t first_kept_ = 0;
  std::vector<ReaderEntry> readers_;
  std::uint64_t next_reader_ = 1;
  std::optional<Clock::time_point> idle_since_;  // when the last reader left
};

}  // namespace sb::bus
