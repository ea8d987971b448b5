#include "provider/sse_decoder.hpp"

#include <cstring>
#include <limits>

namespace sb::sse {

namespace {
constexpr std::string_view kBom = "\xEF\xBB\xBF";

// The first CR or LF at or after `from`, or npos. Two vectorized scans (LF, then CR only before
// that LF) instead of find_first_of's test of every byte against both.
std::size_t find_line_end(std::string_view s, std::size_t from) {
  const char* begin = s.data() + from;
  std::size_t n = s.size() - from;
  const auto* lf = static_cast<const char*>(std::memchr(begin, '\n', n));
  std::size_t before_lf = lf ? static_cast<std::size_t>(lf - begin) : n;
  const auto* cr = static_cast<const char*>(std::memchr(begin, '\r', before_lf));
  const char* end = cr ? cr : lf;
  return end ? static_cast<std::size_t>(end - s.data()) : std::string_view::npos;
}
}  // namespace

bool SseDecoder::too_large(std::size_t line_bytes) const {
  return line_bytes > options_.max_event_bytes ||
         data_.size() > options_.max_event_bytes - line_bytes;
}

Result<void> SseDecoder::feed(std::string_view chunk, std::vector<SseEvent>& out) {
  if (error_) return *error_;
  std::size_t i = 0;
  // A BOM may itself be split across chunks, so match it byte by byte before anything else.
  while (!bom_done_ && i < chunk.size()) {
    if (chunk[i] == kBom[bom_matched_]) {
      ++i;
      if (++bom_matched_ == kBom.size()) bom_done_ = true;
    } else {
      // Not a BOM after all: the bytes held back belong to the first line.
      line_.append(kBom.substr(0, bom_matched_));
      bom_done_ = true;
    }
  }
  while (i < chunk.size()) {
    if (after_cr_) {
      after_cr_ = false;
      if (chunk[i] == '\n') {
        ++i;
        continue;
      }
    }
    std::size_t end = find_line_end(chunk, i);
    std::size_t piece = (end == std::string_view::npos ? chunk.size() : end) - i;
    if (too_large(line_.size() + piece)) {
      error_ =
          make_error(ErrorCode::TooLarge, "SSE event larger than " +
                                              std::to_string(options_.max_event_bytes) + " bytes");
      return *error_;
    }
    if (end == std::string_view::npos) {
      line_.append(chunk.substr(i));
      break;
    }
    if (line_.empty()) {
      process_line(chunk.substr(i, piece), out);  // the common case: no copy
    } else {
      line_.append(chunk.substr(i, piece));
      process_line(line_, out);
      line_.clear();
    }
    after_cr_ = chunk[end] == '\r';
    i = end + 1;
  }
  return {};
}

void SseDecoder::process_line(std::string_view line, std::vector<SseEvent>& out) {
  if (line.empty()) {
    dispatch(out);
    return;
  }
  if (line.front() == ':') return;  // a comment (servers send them as keep-alives)
  std::string_view field = line, value;
  if (std::size_t colon = line.find(':'); colon != std::string_view::npos) {
    field = line.substr(0, colon);
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    data_.append(value);
    data_.push_back('\n');
  } else if (field == "event") {
    type_.assign(value);
  } else if (field == "id") {
    // WHATWG: an id containing NUL is ignored (it could not be sent back in a header).
    if (value.find('\0') == std::string_view::npos) last_event_id_.assign(value);
  } else if (field == "retry") {
    if (value.empty() || value.find_first_not_of("0123456789") != std::string_view::npos) return;
    std::uint64_t ms = 0;
    for (char c : value) {
      auto digit = static_cast<std::uint64_t>(c - '0');
      // Saturate rather than wrap: an absurd value must not become a small one.
      if (ms > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) {
        ms = std::numeric_limits<std::uint64_t>::max();
        break;
      }
      ms = ms * 10 + digit;
    }
    retry_ = ms;
    event_retry_ = ms;
  } else if (field == "error" && options_.error_field_as_event) {
    out.push_back(SseEvent{"error", std::string(value), last_event_id_, std::nullopt});
  }
  // Any other field is ignored, as the spec says.
}

void SseDecoder::dispatch(std::vector<SseEvent>& out) {
  if (data_.empty()) {
    // A block without data (only id/retry/event lines, or a lone blank line) dispatches nothing.
    type_.clear();
    event_retry_.reset();
    return;
  }
  data_.pop_back();  // the "\n" after the last data line
  SseEvent event;
  if (!type_.empty()) event.type = std::move(type_);
  event.data = std::move(data_);
  event.id = last_event_id_;
  event.retry = event_retry_;
  out.push_back(std::move(event));
  data_.clear();
  type_.clear();
  event_retry_.reset();
}

void SseDecoder::finish(std::vector<SseEvent>& out) {
  if (!error_) dispatch(out);
  // Ready for a new stream; the last event id and retry survive, as across a reconnection.
  line_.clear();
  data_.clear();
  type_.clear();
  event_retry_.reset();
  bom_matched_ = 0;
  bom_done_ = false;
  after_cr_ = false;
  error_.reset();
}

}  // namespace sb::sse
