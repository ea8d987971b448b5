#include "bus/event_log.hpp"

#include <string_view>

namespace sb::bus {

namespace {

constexpr std::string_view kData = "\ndata: ";

std::uint64_t clock_base(std::uint64_t published) {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                std::chrono::system_clock::now().time_since_epoch())
                .count();
  return static_cast<std::uint64_t>(us) - published;
}

}  // namespace

std::shared_ptr<EventLog> EventLog::create(std::shared_ptr<EventBus> bus, Options options) {
  return std::shared_ptr<EventLog>(new EventLog(std::move(bus), std::move(options)));
}

EventLog::EventLog(std::shared_ptr<EventBus> bus, Options options)
    : bus_(std::move(bus)), options_(std::move(options)) {
  base_ = options_.id_base ? *options_.id_base : clock_base(bus_->last_seq());
}

EventLog::Attached EventLog::attach(std::optional<std::uint64_t> last_id, Format format,
                                    Reader reader) {
  if (!recording_) {
    recording_ = true;
    entries_.clear();
    bytes_ = 0;
    first_kept_ = bus_->last_seq() + 1;
    subscription_ = bus_->subscribe([weak = weak_from_this()](const EventPtr& event) {
      if (auto self = weak.lock()) self->record(event);
    });
  }
  idle_since_.reset();

  Attached out;
  if (last_id) {
    // The client has every event up to `last`: it may go on if all after it are here.
    std::uint64_t last = *last_id - base_;
    bool ours = *last_id >= base_ && last <= bus_->last_seq();
    out.resumed = ours && last + 1 >= first_kept_;
    if (*out.resumed && last < bus_->last_seq()) {
      std::string missed;
      std::size_t from = static_cast<std::size_t>(last + 1 - first_kept_);
      for (std::size_t i = from; i < entries_.size(); ++i)
        missed += *frame(i, format);
      out.missed = std::make_shared<const std::string>(std::move(missed));
    }
  }
  out.reader = next_reader_++;
  readers_.push_back({out.reader, format, std::move(reader)});
  return out;
}

void EventLog::detach(std::uint64_t reader) {
  std::erase_if(readers_, [&](const ReaderEntry& r) { return r.id == reader; });
  if (readers_.empty()) idle_since_ = options_.now();
}

void EventLog::stop_recording() {
  recording_ = false;
  subscription_.reset();  // the bus allows it from inside its own call
  entries_ = {};
  bytes_ = 0;
}

const EventLog::Frame& EventLog::frame(std::size_t index, Format format) {
  Entry& e = entries_[index];
  if (format == Format::Event) return e.event;
  if (!e.global) {
    // The event's JSON is the Event frame's between "data: " and the blank line.
    std::string_view text = *e.event;
    std::size_t at = text.find(kData);
    std::string_view json = text.substr(at + kData.size(), text.size() - at - kData.size() - 2);
    std::string out;
    out.reserve(text.size() + options_.global_prefix.size() + 1);
    out.append(text.substr(0, at + kData.size()));
    out.append(options_.global_prefix).append(json).append("}\n\n");
    e.global = std::make_shared<const std::string>(std::move(out));
    bytes_ += e.global->size();
  }
  return e.global;
}

void EventLog::record(const EventPtr& event) {
  if (readers_.empty() && idle_since_ && options_.now() - *idle_since_ >= options_.linger)
    return stop_recording();

  std::string text;
  std::string id = std::to_string(id_of(event->seq));
  text.reserve(event->frame.size() + id.size() + 14);
  text.append("id: ").append(id).append(kData).append(event->frame).append("\n\n");
  bytes_ += text.size();
  entries_.push_back({event->seq, std::make_shared<const std::string>(std::move(text)), nullptr});

  bool global = false;
  for (const auto& r : readers_) {
    if (r.format == Format::Global) {
      global = true;
      continue;
    }
    r.read(entries_.back().event);
  }
  if (global) {
    const Frame& g = frame(entries_.size() - 1, Format::Global);
    for (const auto& r : readers_)
      if (r.format == Format::Global) r.read(g);
  }

  while (!entries_.empty() &&
         (entries_.size() > options_.max_events || bytes_ > options_.max_bytes)) {
    const Entry& old = entries_.front();
    bytes_ -= old.event->size() + (old.global ? old.global->size() : 0);
    first_kept_ = old.seq + 1;
    entries_.pop_front();
  }
}

}  // namespace sb::bus
