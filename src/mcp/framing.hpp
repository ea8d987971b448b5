#pragma once
// Newline-delimited messages as the stdio transport reads them from a server's stdout: bytes
// arrive in chunks split anywhere and whole lines come out (a trailing CR dropped, blank lines
// skipped). A line longer than the limit fails the stream (TooLarge, sticky): a server that
// never ends a line must not grow our memory without bound.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/error.hpp"

namespace sb::mcp {

class LineFramer {
 public:
  explicit LineFramer(std::size_t max_line_bytes) : max_(max_line_bytes) {}
  // Appends every line `chunk` completes to `out`.
  Result<void> feed(std::string_view chunk, std::vector<std::string>& out);

 private:
  std::size_t max_;
  std::string line_;
  std::optional<Error> error_;
};

}  // namespace sb::mcp
