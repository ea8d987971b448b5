#include "util/text.hpp"

namespace sb {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// The length of the run of ASCII bytes at `from`: they need no decoding.
std::size_t ascii_run(std::string_view text, std::size_t from) {
  std::size_t end = from;
  while (end < text.size() && static_cast<unsigned char>(text[end]) < 0x80)
    ++end;
  return end - from;
}

}  // namespace

std::string repair_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  std::size_t i = 0;
  while (i < bytes.size()) {
    std::size_t ascii = ascii_run(bytes, i);
    out.append(bytes.substr(i, ascii));
    i += ascii;
    if (i == bytes.size()) break;
    Utf8Step step = utf8_step(bytes.substr(i));
    if (step.valid)
      out.append(bytes.substr(i, step.size));
    else
      out.append(kReplacement);
    i += step.size;
  }
  return out;
}

bool is_valid_utf8(std::string_view bytes) {
  std::size_t i = 0;
  while (i < bytes.size()) {
    i += ascii_run(bytes, i);
    if (i == bytes.size()) break;
    Utf8Step step = utf8_step(bytes.substr(i));
    if (!step.valid) return false;
    i += step.size;
  }
  return true;
}

std::string_view utf8_prefix(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  std::size_t cut = max_bytes;
  // text[cut] is the first byte left out; while it continues a sequence, that sequence started
  // inside the prefix and must go too.
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80)
    --cut;
  return text.substr(0, cut);
}

}  // namespace sb
