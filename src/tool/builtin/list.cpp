#include "tool/builtin/list.hpp"

#include <algorithm>
#include <map>
#include <system_error>
#include <vector>

#include "util/text.hpp"

namespace sb::tool {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using namespace search_detail;

namespace {

constexpr std::string_view kSchema = R"({
  "type": "object",
  "properties": {
    "path": {
      "type": "string",
      "description": "Optional directory to list, absolute or relative to the project directory. Defaults to the project directory."
    },
    "ignore": {
      "type": "array",
      "items": { "type": "string" },
      "description": "Optional globs of files or directories to leave out, e.g. [\"*.log\", \"fixtures/\"]."
    }
  }
})";

constexpr std::string_view kDescription =
    "Lists the files under a directory as an indented tree (directories end with `/`).\n"
    "\n"
    "- Files ignored by .gitignore are left out, and so are directories that are rarely worth "
    "reading: node_modules, .git, dist, build, target, vendor, bin, obj, caches, virtual "
    "environments and the like. Add your own with `ignore`.\n"
    "- At most 100 files are shown, those nearest to the top of the tree first.\n"
    "- Use it to get an overview of a project or a directory. To find files by name pattern, "
    "glob is better; to search contents, grep.";

struct Tree {
  std::map<std::string, Tree> dirs;
  std::vector<std::string> files;
};

void add(Tree& tree, std::string_view rel) {
  Tree* node = &tree;
  std::size_t start = 0;
  for (std::size_t slash; (slash = rel.find('/', start)) != std::string_view::npos;
       start = slash + 1)
    node = &node->dirs[std::string(rel.substr(start, slash - start))];
  node->files.emplace_back(rel.substr(start));
}

void render(const Tree& tree, std::size_t depth, std::string& out) {
  std::string indent(2 * depth, ' ');
  for (const auto& [name, sub] : tree.dirs) {
    out += indent + repair_utf8(name) + "/\n";
    render(sub, depth + 1, out);
  }
  std::vector<std::string> files = tree.files;
  std::sort(files.begin(), files.end());
  for (const auto& f : files)
    out += indent + repair_utf8(f) + "\n";
}

std::size_t depth_of(std::string_view rel) {
  return static_cast<std::size_t>(std::count(rel.begin(), rel.end(), '/'));
}

class ListTool final : public BasicTool {
 public:
  explicit ListTool(SearchOptions options)
      : BasicTool("list", std::string(kDescription), kSchema), o_(std::move(options)) {}

  asio::awaitable<Result<ToolResult>> execute(json::object args, ToolContext& ctx) override {
    auto path = get_string(args, "path");
    if (!path) co_return path.error();
    auto ignore = get_array(args, "ignore");
    if (!ignore) co_return ignore.error();
    std::vector<std::string> ignores;
    if (*ignore) {
      for (std::size_t i = 0; i < (*ignore)->size(); ++i) {
        const auto& v = (**ignore)[i];
        if (!v.is_string())
          co_return make_error(ErrorCode::InvalidRequest, "ignore[" + std::to_string(i) +
                                                              "] must be a string, got " +
                                                              std::string(kind_name(v)));
        if (!v.get_string().empty()) ignores.emplace_back(v.get_string());
      }
    }

    auto root = co_await search_root(ctx, *path);
    if (!root) co_return root.error();
    std::error_code ec;
    if (!fs::is_directory(*root, ec))
      co_return make_error(ErrorCode::InvalidRequest,
                           "not a directory: " + root->string() + " (use read for files)");
    std::string root_str = without_trailing_slash(root->string());

    PermissionRequest request{"list", {root_str}, {"*"}, json::object{{"path", root_str}}};
    if (auto allowed = co_await ctx.request_permission(std::move(request)); !allowed)
      co_return allowed.error();

    std::vector<std::string> excludes;
    // A trailing slash: these are directory names; a file called `build` or `env` stays.
    for (auto name : kListDefaultIgnores)
      excludes.push_back(std::string(name) + "/");
    excludes.insert(excludes.end(), ignores.begin(), ignores.end());
    auto run = co_await list_files(ctx, o_, "list", root_str, std::move(excludes));
    if (!run) co_return run.error();
    bool incomplete = run->truncated || run->timed_out;

    std::string prefix = directory_prefix(root_str);
    std::vector<std::string_view> files = listed_paths(*run, prefix);
    // Shallow files first: an overview shows the top of the tree rather than the first deep
    // directory in alphabetical order.
    std::sort(files.begin(), files.end(), [](std::string_view a, std::string_view b) {
      auto da = depth_of(a), db = depth_of(b);
      return da != db ? da < db : a < b;
    });
    std::size_t total = files.size();
    std::size_t shown = std::min(total, kListFileLimit);
    Tree tree;
    for (std::size_t i = 0; i < shown; ++i)
      add(tree, files[i]);

    std::string out = repair_utf8(prefix) + "\n";
    render(tree, 1, out);
    if (total == 0) out += "  (no files)\n";
    if (shown < total)
      out += "\n(Showing " + std::to_string(shown) + " of " + std::to_string(total) +
             (incomplete ? "+" : "") +
             " files, those nearest the top first. List a subdirectory, or use glob or the "
             "ignore parameter, to see the rest.)\n";
    else if (incomplete)
      out +=
          "\n(The listing was stopped early (too many files or too slow); list a "
          "subdirectory to see the rest.)\n";
    out.pop_back();

    co_return ToolResult{
        display_path(ctx, *root),
        std::move(out),
        json::object{
            {"count", shown}, {"total", total}, {"truncated", shown < total || incomplete}},
        {}};
  }

 private:
  SearchOptions o_;
};

}  // namespace

ToolPtr make_list_tool(SearchOptions options) {
  return std::make_shared<ListTool>(std::move(options));
}

}  // namespace sb::tool
