#include "tool/builtin/edit.hpp"

#include "tool/builtin/file_util.hpp"
#include "tool/paths.hpp"
#include "util/text.hpp"

namespace sb::tool {

namespace {

namespace fs = std::filesystem;
using boost::asio::awaitable;

constexpr std::string_view kDescription =
    R"txt(Performs an exact string replacement in a file.

Usage:
- Read the file with the read tool before editing it, and copy the text to replace from what it showed.
- oldString must match the file exactly, including indentation (tabs or spaces), whitespace and blank lines. The read tool shows each line as a line number, "| ", then the text: copy only what comes after "| ", never the line number.
- The edit FAILS with "oldString not found in content" when oldString is not in the file.
- The edit FAILS with "Found multiple matches for oldString. Provide more surrounding lines in oldString to identify the correct match." when oldString occurs more than once. Include more lines around the change so that it is unique, or set replaceAll to change every occurrence.
- Use replaceAll to rename a variable or replace a string throughout the file.
- With an empty oldString, a new file is created with newString as its content (the file must not exist yet, or be empty).
- Line endings follow the file: in a file with Windows (CRLF) line endings, plain newlines in oldString and newString are taken as CRLF.
- Prefer editing existing files to creating new ones. Do not put emojis in files unless the user asks for them.)txt";

constexpr std::string_view kSchema = R"json({
  "type": "object",
  "properties": {
    "filePath": {"type": "string", "description": "The absolute path to the file to modify"},
    "oldString": {"type": "string",
                  "description": "The exact text to replace (empty to create a new file)"},
    "newString": {"type": "string",
                  "description": "The text to replace it with (must be different from oldString)"},
    "replaceAll": {"type": "boolean",
                   "description": "Replace every occurrence of oldString (default false)"}
  },
  "required": ["filePath", "oldString", "newString"]
})json";

constexpr std::string_view kNotFound =
    "oldString not found in content. It must match the file exactly, including whitespace, "
    "indentation and line endings; read the file again to see its current text.";
constexpr std::string_view kMultiple =
    "Found multiple matches for oldString. Provide more surrounding lines in oldString to "
    "identify the correct match.";
constexpr std::string_view kIdentical =
    "No changes to apply: oldString and newString are identical.";

std::string to_lf(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') continue;
    out.push_back(text[i]);
  }
  return out;
}

std::string to_crlf(std::string_view lf_text) {
  std::string out;
  out.reserve(lf_text.size() + lf_text.size() / 16);
  for (char c : lf_text) {
    if (c == '\n') out.push_back('\r');
    out.push_back(c);
  }
  return out;
}

std::size_t count_occurrences(std::string_view content, std::string_view needle) {
  std::size_t n = 0;
  for (std::size_t at = content.find(needle); at != std::string_view::npos;
       at = content.find(needle, at + needle.size()))
    ++n;
  return n;
}

std::string replace_all_of(std::string_view content, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(content.size());
  std::size_t start = 0;
  for (std::size_t at = content.find(from); at != std::string_view::npos;
       at = content.find(from, start)) {
    out.append(content.substr(start, at - start));
    out.append(to);
    start = at + from.size();
  }
  out.append(content.substr(start));
  return out;
}

struct EditInput {
  std::string file_path;
  std::string old_string;
  std::string new_string;
  bool replace_all = false;
};

Result<EditInput> parse_input(const json::object& args) {
  EditInput in;
  auto file_path = get_string(args, "filePath");
  if (!file_path) return file_path.error();
  if (!*file_path || (*file_path)->empty())
    return make_error(ErrorCode::InvalidRequest, "filePath is required");
  in.file_path = std::move(**file_path);
  auto old_string = get_string(args, "oldString");
  if (!old_string) return old_string.error();
  if (!*old_string)
    return make_error(ErrorCode::InvalidRequest,
                      "oldString is required (use \"\" to create a new file)");
  in.old_string = std::move(**old_string);
  auto new_string = get_string(args, "newString");
  if (!new_string) return new_string.error();
  if (!*new_string) return make_error(ErrorCode::InvalidRequest, "newString is required");
  in.new_string = std::move(**new_string);
  auto replace_all = get_bool(args, "replaceAll");
  if (!replace_all) return replace_all.error();
  in.replace_all = replace_all->value_or(false);
  return in;
}

// The change, computed before anyone is asked.
struct Plan {
  bool create = false;  // an empty oldString: the file is created with newString
  bool exists = false;
  std::string before;
  std::string after;
  std::size_t replacements = 0;
};

Result<Plan> plan_edit(const fs::path& path, const EditInput& in) {
  Plan plan;
  std::error_code ec;
  auto status = fs::status(path, ec);
  plan.exists = fs::exists(status);
  if (fs::is_directory(status))
    return make_error(ErrorCode::InvalidRequest,
                      "Cannot edit " + path.string() + ": it is a directory, not a file");

  if (in.old_string.empty()) {
    // Creating a file. OpenCode would overwrite an existing one here; refusing keeps a model
    // that forgot oldString from wiping a file. An empty existing file loses nothing.
    if (plan.exists) {
      auto current = fsutil::read_file(path);
      if (!current) return current.error();
      if (!current->empty())
        return make_error(ErrorCode::Conflict,
                          "Cannot create " + path.string() +
                              ": the file already exists and is not empty. To change it, put "
                              "the text to replace in oldString; to replace all of it, use the "
                              "write tool.");
    }
    plan.create = true;
    plan.after = in.new_string;
    plan.replacements = 1;
    return plan;
  }

  if (!plan.exists)
    return make_error(ErrorCode::NotFound,
                      "File not found: " + path.string() +
                          ". To create a new file, use an empty oldString or the write tool.");
  auto current = fsutil::read_file(path);
  if (!current) return current.error();
  plan.before = std::move(*current);
  auto replaced = replace_exact(plan.before, in.old_string, in.new_string, in.replace_all);
  if (!replaced) return replaced.error();
  plan.after = std::move(replaced->content);
  plan.replacements = replaced->count;
  return plan;
}

class EditTool final : public BasicTool {
 public:
  explicit EditTool(std::shared_ptr<bus::EventBus> bus)
      : BasicTool("edit", std::string(kDescription), kSchema), bus_(std::move(bus)) {}

  awaitable<Result<ToolResult>> execute(json::object args, ToolContext& ctx) override {
    auto in = parse_input(args);
    if (!in) co_return in.error();
    // Checked first: nothing to ask anyone about.
    if (in->old_string == in->new_string)
      co_return make_error(ErrorCode::InvalidRequest, std::string(kIdentical));

    auto path = co_await resolve_path(ctx, in->file_path);
    if (!path) co_return path.error();
    std::string shown = fsutil::display_path(ctx, *path);
    auto plan = plan_edit(*path, *in);
    if (!plan) co_return plan.error();
    // Diffs are shown with "\n" line endings, as OpenCode does: "\r" is noise to a reader.
    fsutil::LineDiff diff = fsutil::unified_diff(shown, to_lf(plan->before), to_lf(plan->after));
    diff.patch = repair_utf8(diff.patch);

    if (auto allowed = co_await ctx.request_permission(permission_for(*path, shown, diff));
        !allowed)
      co_return allowed.error();
    if (auto live = fsutil::check_not_aborted(ctx); !live) co_return live.error();

    co_return finish(*path, shown, *plan, std::move(diff));
  }

 private:
  static PermissionRequest permission_for(const fs::path& path, const std::string& shown,
                                          const fsutil::LineDiff& diff) {
    PermissionRequest req;
    req.permission = "edit";
    req.patterns = {shown};
    req.always = {"*"};
    req.metadata = {{"filepath", path.string()}, {"diff", diff.patch}};
    return req;
  }

  Result<ToolResult> finish(const fs::path& path, const std::string& shown, const Plan& plan,
                            fsutil::LineDiff diff) {
    // A permission ask can wait for minutes: do not overwrite what changed meanwhile. The check
    // and the write have no suspension point between them and the tools run on the server's one
    // executor, so two edits of one file in the same step (parallel calls) cannot both pass the
    // check: keep this function synchronous.
    std::error_code ec;
    bool exists_now = fs::exists(path, ec);
    if (plan.exists) {
      auto current = fsutil::read_file(path);
      if (!current || *current != plan.before)
        return make_error(ErrorCode::Conflict,
                          "The file " + path.string() +
                              " changed while the edit waited for permission. Read it again and "
                              "redo the edit.");
    } else if (exists_now) {
      return make_error(ErrorCode::Conflict, "The file " + path.string() +
                                                 " was created while the edit waited for "
                                                 "permission. Read it and redo the edit.");
    }
    if (auto written = fsutil::replace_file(path, plan.after); !written) return written.error();
    if (bus_) bus_->publish("file.edited", {{"file", path.string()}});

    ToolResult result;
    result.title = shown;
    result.output = plan.create ? "Created the file with newString as its content."
                                : "Edit applied successfully.";
    if (plan.replacements > 1)
      result.output += " Replaced " + std::to_string(plan.replacements) + " occurrences.";
    result.metadata = {
        {"filepath", path.string()},
        {"diff", std::move(diff.patch)},
        {"additions", diff.additions},
        {"deletions", diff.deletions},
        {"replacements", plan.replacements},
        // OpenCode's shape, for clients that show a per-file summary.
        {"filediff",
         {{"file", path.string()}, {"additions", diff.additions}, {"deletions", diff.deletions}}},
    };
    result.file_changes.push_back(
        {path, plan.exists ? std::optional<std::string>(plan.before) : std::nullopt, plan.after});
    return result;
  }

  std::shared_ptr<bus::EventBus> bus_;
};

}  // namespace

Result<Replacement> replace_exact(std::string_view content, std::string_view old_string,
                                  std::string_view new_string, bool replace_all) {
  if (old_string == new_string)
    return make_error(ErrorCode::InvalidRequest, std::string(kIdentical));
  if (old_string.empty())
    return make_error(ErrorCode::InvalidRequest, "oldString must not be empty");

  // Models write "\n"; a CRLF file has "\r\n". Give both strings the file's line ending.
  bool crlf = content.find("\r\n") != std::string_view::npos;
  std::string from = crlf ? to_crlf(to_lf(old_string)) : std::string(old_string);
  std::string to = crlf ? to_crlf(to_lf(new_string)) : std::string(new_string);
  std::size_t count = count_occurrences(content, from);
  if (count == 0 && from != old_string) {
    // A file with mixed line endings: the text may be there exactly as sent.
    from = std::string(old_string);
    to = std::string(new_string);
    count = count_occurrences(content, from);
  }
  if (count == 0) return make_error(ErrorCode::InvalidRequest, std::string(kNotFound));
  if (from == to) return make_error(ErrorCode::InvalidRequest, std::string(kIdentical));
  if (count > 1 && !replace_all)
    return make_error(ErrorCode::InvalidRequest,
                      std::string(kMultiple) + " (oldString occurs " + std::to_string(count) +
                          " times; set replaceAll to true to replace every occurrence.)");

  Replacement out;
  if (replace_all) {
    out.content = replace_all_of(content, from, to);
    out.count = count;
  } else {
    std::size_t at = content.find(from);
    out.content.reserve(content.size() - from.size() + to.size());
    out.content.append(content.substr(0, at));
    out.content.append(to);
    out.content.append(content.substr(at + from.size()));
    out.count = 1;
  }
  return out;
}

ToolPtr make_edit_tool(std::shared_ptr<bus::EventBus> bus) {
  return std::make_shared<EditTool>(std::move(bus));
}

}  // namespace sb::tool
