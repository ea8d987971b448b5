#include "tool/builtin/write.hpp"

#include "tool/builtin/file_util.hpp"
#include "tool/paths.hpp"
#include "util/text.hpp"

namespace sb::tool {

namespace {

namespace fs = std::filesystem;
using boost::asio::awaitable;

constexpr std::string_view kDescription =
    R"txt(Writes a file to the local filesystem, replacing it when it exists.

Usage:
- filePath should be an absolute path. A relative path is taken from the project directory. Missing parent directories are created.
- An existing file is replaced as a whole by content. Read it first, so that you know what you are replacing.
- To change part of an existing file, use the edit tool instead. Use write for new files and for complete rewrites.
- Do not create documentation files (*.md, README) unless the user asks for them.
- Do not put emojis in files unless the user asks for them.)txt";

constexpr std::string_view kSchema = R"json({
  "type": "object",
  "properties": {
    "filePath": {"type": "string",
                 "description": "The absolute path to the file to write (created if missing)"},
    "content": {"type": "string", "description": "The content to write to the file"}
  },
  "required": ["filePath", "content"]
})json";

// The diff shown to the person deciding; skipped for files too large or unreadable to diff.
constexpr std::size_t kMaxDiffBytes = 1u << 20;

struct Plan {
  bool exists = false;
  std::string diff;
};

// The write's diff; none when a side is too large to diff. The old file may not be valid UTF-8
// (Latin-1, binary); the diff goes out as JSON text.
std::optional<fsutil::LineDiff> diff_of(const std::string& shown, const std::string& before,
                                        const std::string& content) {
  if (before.size() > kMaxDiffBytes || content.size() > kMaxDiffBytes) return std::nullopt;
  fsutil::LineDiff diff = fsutil::unified_diff(shown, before, content);
  diff.patch = repair_utf8(diff.patch);
  return diff;
}

// What the write will change, checked before asking anyone.
Result<Plan> plan_write(const fs::path& path, const std::string& shown,
                        const std::string& content) {
  Plan plan;
  std::error_code ec;
  auto status = fs::status(path, ec);
  plan.exists = fs::exists(status);
  if (fs::is_directory(status))
    return make_error(ErrorCode::InvalidRequest,
                      "Cannot write " + path.string() + ": it is a directory, not a file");
  // A FIFO or a device is not a file to replace.
  if (plan.exists && !fs::is_regular_file(status))
    return make_error(ErrorCode::InvalidRequest,
                      "Cannot write " + path.string() + ": it is not a regular file");
  std::string before;
  if (plan.exists) {
    // Only for the diff: a file we cannot read (too large, write-only) is still replaced.
    auto old = fsutil::read_file(path, kMaxDiffBytes);
    if (!old) return plan;
    before = std::move(*old);
  }
  if (auto diff = diff_of(shown, before, content)) plan.diff = std::move(diff->patch);
  return plan;
}

class WriteTool final : public BasicTool {
 public:
  explicit WriteTool(std::shared_ptr<bus::EventBus> bus)
      : BasicTool("write", std::string(kDescription), kSchema), bus_(std::move(bus)) {}

  awaitable<Result<ToolResult>> execute(json::object args, ToolContext& ctx) override {
    auto file_path = get_string(args, "filePath");
    if (!file_path) co_return file_path.error();
    if (!*file_path || (*file_path)->empty())
      co_return make_error(ErrorCode::InvalidRequest, "filePath is required");
    auto content = get_string(args, "content");
    if (!content) co_return content.error();
    if (!*content)
      co_return make_error(ErrorCode::InvalidRequest,
                           "content is required (use \"\" for an empty file)");

    auto path = co_await resolve_path(ctx, **file_path);
    if (!path) co_return path.error();
    std::string shown = fsutil::display_path(ctx, *path);
    auto plan = plan_write(*path, shown, **content);
    if (!plan) co_return plan.error();

    if (auto allowed = co_await ctx.request_permission(permission_for(*path, shown, *plan));
        !allowed)
      co_return allowed.error();
    if (auto live = fsutil::check_not_aborted(ctx); !live) co_return live.error();

    co_return finish(*path, shown, **content, plan->exists);
  }

 private:
  static PermissionRequest permission_for(const fs::path& path, const std::string& shown,
                                          const Plan& plan) {
    PermissionRequest req;
    req.permission = "edit";
    req.patterns = {shown};
    req.always = {"*"};
    req.metadata = {{"filepath", path.string()}, {"exists", plan.exists}, {"diff", plan.diff}};
    return req;
  }

  Result<ToolResult> finish(const fs::path& path, const std::string& shown,
                            const std::string& content, bool existed) {
    // Synchronous, like edit's check-and-write: on the one executor no other call's write runs
    // in the middle of this one.
    FileChange change{path, std::nullopt, content};
    if (existed) {
      // What a revert writes back. A file that cannot be read whole is replaced all the same,
      // and the session cannot put it back.
      auto before = fsutil::read_file(path);
      if (before) change.before = std::move(*before);
    }
    if (auto written = fsutil::replace_file(path, content); !written) return written.error();
    if (bus_) bus_->publish("file.edited", {{"file", path.string()}});
    ToolResult result;
    result.title = shown;
    result.output = existed ? "Wrote file successfully (replaced the existing file)."
                            : "Wrote file successfully (created a new file).";
    result.metadata = {{"filepath", path.string()}, {"exists", existed}};
    // What it changed, as edit reports it (the page shows it as a diff): from what the file held
    // when it was replaced, which may differ from what the permission ask showed.
    if (!existed || change.before)
      if (auto diff = diff_of(shown, change.before.value_or(""), content)) {
        result.metadata["diff"] = std::move(diff->patch);
        result.metadata["additions"] = diff->additions;
        result.metadata["deletions"] = diff->deletions;
      }
    if (!existed || change.before) result.file_changes.push_back(std::move(change));
    return result;
  }

  std::shared_ptr<bus::EventBus> bus_;
};

}  // namespace

ToolPtr make_write_tool(std::shared_ptr<bus::EventBus> bus) {
  return std::make_shared<WriteTool>(std::move(bus));
}

}  // namespace sb::tool
