#include "mcp/framing.hpp"

namespace sb::mcp {

Result<void> LineFramer::feed(std::string_view chunk, std::vector<std::string>& out) {
  if (error_) return *error_;
  while (!chunk.empty()) {
    auto nl = chunk.find('\n');
    std::string_view piece = chunk.substr(0, nl);
    if (line_.size() + piece.size() > max_) {
      error_ = make_error(ErrorCode::TooLarge,
                          "it sent a message over " + std::to_string(max_) + " bytes");
      return *error_;
    }
    line_.append(piece);
    if (nl == std::string_view::npos) break;
    chunk.remove_prefix(nl + 1);
    if (!line_.empty() && line_.back() == '\r') line_.pop_back();
    if (line_.find_first_not_of(" \t") != std::string::npos) out.push_back(std::move(line_));
    line_.clear();
  }
  return {};
}

}  // namespace sb::mcp
