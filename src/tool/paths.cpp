#include "tool/paths.hpp"

namespace sb::tool {

namespace fs = std::filesystem;

bool is_within(const fs::path& root, const fs::path& path) {
  std::error_code ec;
  fs::path r = fs::weakly_canonical(root, ec);
  if (ec) r = root.lexically_normal();
  fs::path p = fs::weakly_canonical(path, ec);
  if (ec) p = path.lexically_normal();
  auto rel = p.lexically_relative(r);
  if (rel.empty()) return false;
  auto first = *rel.begin();
  return first != ".." && !rel.is_absolute();
}

boost::asio::awaitable<Result<fs::path>> resolve_path(ToolContext& ctx, std::string_view given) {
  if (given.empty()) co_return make_error(ErrorCode::InvalidRequest, "the path is empty");
  fs::path p(given);
  if (p.is_relative()) p = ctx.directory / p;
  p = p.lexically_normal();
  if (!ctx.directory.empty() && !is_within(ctx.directory, p)) {
    fs::path dir = p.has_filename() ? p.parent_path() : p;
    std::string pattern = (dir / "*").string();
    PermissionRequest req{"external_directory",
                          {pattern},
                          {pattern},
                          json::object{{"filepath", p.string()}, {"parentDir", dir.string()}}};
    if (auto allowed = co_await ctx.request_permission(std::move(req)); !allowed)
      co_return allowed.error();
  }
  co_return p;
}

}  // namespace sb::tool
