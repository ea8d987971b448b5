#pragma once
// Small text helpers shared by the server and the tools: UTF-8 repair and UTF-8-safe cuts, ASCII
// whitespace and case. Pure functions; thread-safe.
#include <cstddef>
#include <string>
#include <string_view>

namespace sb {

// ---- UTF-8 ------------------------------------------------------------------------------------

// What starts a UTF-8 text: a well-formed character of `size` bytes, or (`valid` false) `size`
// bytes that one U+FFFD replaces: the longest start of a well-formed sequence that breaks off, or
// the one byte that starts none (Unicode's "maximal subpart", as a browser's TextDecoder does).
struct Utf8Step {
  std::size_t size = 0;
  bool valid = false;
};

// One step of decoding at the start of `bytes` (not empty). Well-formed is RFC 3629's: no
// overlong forms, no surrogates, nothing above U+10FFFF. Inline: the JSON writer calls it for
// every byte above 0x7f it writes.
inline Utf8Step utf8_step(std::string_view bytes) {
  auto at = [&](std::size_t i) { return static_cast<unsigned char>(bytes[i]); };
  unsigned char lead = at(0);
  if (lead < 0x80) return {1, true};
  std::size_t size;
  unsigned char low = 0x80, high = 0xBF;  // the range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    size = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    size = 3;
    if (lead == 0xE0) low = 0xA0;   // overlong
    if (lead == 0xED) high = 0x9F;  // UTF-16 surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    size = 4;
    if (lead == 0xF0) low = 0x90;   // overlong
    if (lead == 0xF4) high = 0x8F;  // above U+10FFFF
  } else {
    return {1, false};
  }
  for (std::size_t i = 1; i < size; ++i) {
    if (i >= bytes.size()) return {i, false};
    unsigned char b = at(i);
    if (b < (i == 1 ? low : 0x80) || b > (i == 1 ? high : 0xBF)) return {i, false};
  }
  return {size, true};
}

// `bytes` with every ill-formed UTF-8 sequence replaced by U+FFFD (one per maximal subpart, see
// Utf8Step), so that process output, a Latin-1 file or a cut character can go to a model and
// into JSON. Valid input comes back unchanged.
std::string repair_utf8(std::string_view bytes);

// Whether `bytes` is well-formed UTF-8 (repair_utf8 would leave it as it is).
bool is_valid_utf8(std::string_view bytes);

// The longest prefix of `text` of at most `max_bytes` that does not end inside a UTF-8 sequence:
// a cut that keeps valid UTF-8 valid.
std::string_view utf8_prefix(std::string_view text, std::size_t max_bytes);

// ---- ASCII whitespace and case ----------------------------------------------------------------

// Whitespace as C's isspace sees it in the "C" locale.
inline constexpr std::string_view kAsciiSpace = " \t\n\v\f\r";
// JSON's whitespace (RFC 8259), which may stand around a JSON text.
inline constexpr std::string_view kJsonSpace = " \t\n\r";

// `text` without the characters of `space` at either end.
std::string_view trim(std::string_view text, std::string_view space = kAsciiSpace);

// `text` with A-Z made a-z; other bytes (UTF-8 included) as they are.
std::string ascii_lower(std::string_view text);

// Whether `a` and `b` are equal but for the case of A-Z (HTTP header names, URL schemes).
bool ascii_iequals(std::string_view a, std::string_view b);

}  // namespace sb
