#pragma once
// Shared by the provider stream targets: runs a StreamParser over the bytes whole and split and
// checks the contract of provider/types.hpp: the same events either way (ids the parser made up
// aside), exactly one terminal event after finish(), nothing after it.
#include <map>
#include <string>
#include <variant>

#include "provider/types.hpp"
#include "split.hpp"

namespace sb::fuzz {

// Renames call ids in order of first appearance, so ids a parser generated compare equal.
inline void canonical_ids(std::vector<provider::StreamEvent>& events) {
  std::map<std::string, std::string> names;
  auto rename = [&](std::string& id) {
    auto [it, fresh] = names.emplace(id, "id" + std::to_string(names.size()));
    id = it->second;
  };
  for (auto& e : events) {
    if (auto* s = std::get_if<provider::ToolInputStart>(&e)) rename(s->id);
    if (auto* d = std::get_if<provider::ToolInputDelta>(&e)) rename(d->id);
    if (auto* c = std::get_if<provider::ToolCall>(&e)) rename(c->id);
  }
}

inline bool terminal(const provider::StreamEvent& e) {
  return std::holds_alternative<provider::StepFinish>(e) ||
         std::holds_alternative<provider::StreamError>(e);
}

template <typename Parser>
std::vector<provider::StreamEvent> parse(const std::vector<std::string_view>& chunks) {
  Parser parser;
  std::vector<provider::StreamEvent> events;
  for (auto chunk : chunks)
    parser.feed(chunk, events);
  parser.finish(events);
  if (!parser.done()) fail("parser not done after finish()");
  std::size_t terminals = 0;
  for (const auto& e : events)
    terminals += terminal(e) ? 1 : 0;
  if (terminals != 1) fail("not exactly one terminal event");
  if (!terminal(events.back())) fail("an event after the terminal one");
  canonical_ids(events);
  return events;
}

template <typename Parser>
int check_stream(const std::uint8_t* data, std::size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  auto whole = parse<Parser>({input});
  auto pieces = parse<Parser>(split(input));
  if (whole != pieces) fail("model stream events depend on how the bytes are split");
  return 0;
}

}  // namespace sb::fuzz
