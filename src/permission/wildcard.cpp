#include "permission/wildcard.hpp"

#include <cstddef>

namespace sb::permission {
namespace {

// OpenCode replaces every backslash with a slash before matching.
char normalized(char c) {
  return c == '\\' ? '/' : c;
}

// Index just after the UTF-8 character that starts at `i`. A byte that does not start a complete,
// well-formed sequence is a character of its own, so matching never stalls on bad input.
std::size_t next_char(std::string_view s, std::size_t i) {
  auto lead = static_cast<unsigned char>(s[i]);
  std::size_t len = lead < 0x80           ? 1
                    : (lead >> 5) == 0x6  ? 2
                    : (lead >> 4) == 0xE  ? 3
                    : (lead >> 3) == 0x1E ? 4
                                          : 1;
  if (len == 1 || i + len > s.size()) return i + 1;
  for (std::size_t k = 1; k < len; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return i + 1;
  return i + len;
}

// Greedy matching with backtracking to the last `*`: linear in practice, O(text * pattern) at
// worst, no recursion and no regex (a pattern comes from a config file or a session and must not
// be able to blow up the matcher).
bool match_whole(std::string_view text, std::string_view pattern) {
  constexpr std::size_t kNone = std::string_view::npos;
  std::size_t t = 0, p = 0;
  std::size_t star = kNone, star_text = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      star_text = t;
    } else if (p < pattern.size() && pattern[p] == '?') {
      t = next_char(text, t);
      ++p;
    } else if (p < pattern.size() && normalized(pattern[p]) == normalized(text[t])) {
      ++t;
      ++p;
    } else if (star != kNone) {
      // Let the last `*` swallow one more character and retry the rest of the pattern there.
      p = star + 1;
      star_text = next_char(text, star_text);
      t = star_text;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*')
    ++p;
  return p == pattern.size();
}

}  // namespace

bool wildcard_match(std::string_view text, std::string_view pattern) {
  if (match_whole(text, pattern)) return true;
  // OpenCode turns a trailing " *" into an optional group: "ls *" is "ls" or "ls <anything>".
  if (pattern.size() >= 2 && pattern.substr(pattern.size() - 2) == " *")
    return match_whole(text, pattern.substr(0, pattern.size() - 2));
  return false;
}

}  // namespace sb::permission
