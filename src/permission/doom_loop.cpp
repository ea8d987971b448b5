#include "permission/doom_loop.hpp"

namespace sb::permission {

bool is_doom_loop(const std::vector<RecentCall>& history, std::string_view tool,
                  const json::value& input, std::size_t threshold) {
  if (threshold == 0 || history.size() < threshold) return false;
  for (auto it = history.end() - static_cast<std::ptrdiff_t>(threshold); it != history.end(); ++it)
    if (it->pending || it->tool != tool || it->input != input) return false;
  return true;
}

}  // namespace sb::permission
