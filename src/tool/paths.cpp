#include "tool/paths.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <string_view>

namespace sb::tool {

namespace fs = std::filesystem;

namespace {

// The whole rule: both paths made absolute and free of symlinks and "..", then compared.
// weakly_canonical costs a readlink for every part of each path.
bool is_within_resolved(const fs::path& root, const fs::path& path) {
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

// Whether a part of `path` (split at '/') is `part`.
bool has_part(std::string_view path, std::string_view part) {
  for (std::size_t i = 0; i <= path.size();) {
    std::size_t end = std::min(path.find('/', i), path.size());
    if (path.substr(i, end - i) == part) return true;
    i = end + 1;
  }
  return false;
}

// The usual case, with the rule's answer at an lstat per part below the root: `path` is written
// as `root`/rest, neither has a "." or ".." part, and no part of rest that exists is a symlink.
// Then path resolves to what root resolves to, followed by rest, which is what the rule would
// find, whatever the root itself resolves to. False: not sure, ask the rule.
bool plainly_within(const fs::path& root, const fs::path& path) {
  std::string_view r = root.native();
  while (r.size() > 1 && r.back() == '/')
    r.remove_suffix(1);
  if (r.size() == 1) r = {};  // "/": every absolute path is below it
  const std::string& p = path.native();
  if (!root.is_absolute() || !path.is_absolute() || p.compare(0, r.size(), r) != 0 ||
      (p.size() > r.size() && p[r.size()] != '/') || has_part(r, ".") || has_part(r, ".."))
    return false;
  // Each prefix of path that ends after a part of rest, in turn: a copy of path cut there.
  std::string prefix = p;
  for (std::size_t i = r.size() + 1; i <= p.size();) {
    std::size_t end = std::min(p.find('/', i), p.size());
    std::string_view part = std::string_view(p).substr(i, end - i);
    i = end + 1;
    if (part.empty() || part == ".") continue;
    if (part == "..") return false;
    prefix[end] = '\0';
    struct stat st;
    int rc = ::lstat(prefix.c_str(), &st);
    if (end < p.size()) prefix[end] = '/';
    if (rc != 0) return errno == ENOENT || errno == ENOTDIR;  // nothing below exists (yet)
    if (S_ISLNK(st.st_mode)) return false;
  }
  return true;
}

}  // namespace

bool is_within(const fs::path& root, const fs::path& path) {
  return plainly_within(root, path) || is_within_resolved(root, path);
}

boost::asio::awaitable<Result<fs::path>> resolve_path(ToolContext& ctx, std::string_view given) {
  if (given.empty()) co_return make_error(ErrorCode::InvalidRequest, "the path is empty");
  fs::path p(given);
  if (p.is_relative()) p = ctx.directory / p;
  p = p.lexically_normal();
  if (!ctx.directory.empty() && !is_within(ctx.directory, p)) {
    // The ask names where the path really leads, not the way it is written: a link inside the
    // project to /etc/hostname asked for "<project>/*", and "always" on that let every other
    // link in the project lead anywhere. A directory (grep, list, glob, a bash workdir) is the
    // place itself: "/etc" asks for "/etc/*", not for "/*".
    std::error_code ec;
    fs::path target = fs::weakly_canonical(p, ec);
    if (ec) target = p;
    fs::path dir =
        fs::is_directory(target, ec) || !target.has_filename() ? target : target.parent_path();
    std::string pattern = (dir / "*").string();
    json::object metadata{{"filepath", p.string()}, {"parentDir", dir.string()}};
    if (target != p) metadata["target"] = target.string();
    PermissionRequest req{"external_directory", {pattern}, {pattern}, std::move(metadata)};
    if (auto allowed = co_await ctx.request_permission(std::move(req)); !allowed)
      co_return allowed.error();
    // The tool works on the place that was approved: a link changed while a person decided (a
    // bash call of the same step) does not lead it elsewhere.
    co_return target;
  }
  co_return p;
}

}  // namespace sb::tool
