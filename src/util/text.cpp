#include "util/text.hpp"

namespace sb {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

char lower_char(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

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

std::string_view trim(std::string_view text, std::string_view space) {
  std::size_t begin = text.find_first_not_of(space);
  if (begin == std::string_view::npos) return {};
  std::size_t end = text.find_last_not_of(space);
  return text.substr(begin, end - begin + 1);
}

std::string ascii_lower(std::string_view text) {
  std::string out(text);
  for (char& c : out)
    c = lower_char(c);
  return out;
}

bool ascii_iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (lower_char(a[i]) != lower_char(b[i])) return false;
  return true;
}

}  // namespace sb
