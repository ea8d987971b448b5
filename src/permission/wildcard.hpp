#pragma once
// OpenCode's wildcard patterns for permission rules (util/wildcard.ts, Wildcard.match): `*` is
// any run of characters (slashes and newlines included), `?` exactly one character, everything
// else literal, and the pattern must cover the whole string. A pattern that ends in " *" also
// matches the bare command ("git *" matches "git"), so a rule for a command with arguments
// covers the command without them. Backslashes count as slashes on both sides, as in OpenCode,
// so a rule written with Windows separators still matches. Case-sensitive.
//
// Characters are UTF-8 code points: `?` consumes a whole multi-byte sequence (a stray byte that
// is not valid UTF-8 counts as one character). Pure function; thread-safe.
#include <string_view>

namespace sb::permission {

bool wildcard_match(std::string_view text, std::string_view pattern);

}  // namespace sb::permission
