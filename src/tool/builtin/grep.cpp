#include "tool/builtin/grep.hpp"

#include <algorithm>
#include <map>
#include <system_error>

#include "util/text.hpp"

namespace sb::tool {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using namespace search_detail;

namespace {

constexpr std::string_view kSchema = R"({
  "type": "object",
  "properties": {
    "pattern": {
      "type": "string",
      "description": "The regular expression to search for in file contents (Rust regex syntax, like PCRE without look-around; escape literal characters such as `(`, `{`, `.`)."
    },
    "path": {
      "type": "string",
      "description": "Optional directory (or single file) to search, absolute or relative to the project directory. Defaults to the project directory."
    },
    "include": {
      "type": "string",
      "description": "Optional glob of the files to search, e.g. \"*.js\", \"*.{ts,tsx}\" or \"src/**/*.cpp\"."
    }
  },
  "required": ["pattern"]
})";

constexpr std::string_view kDescription =
    "Searches the contents of files with a regular expression (ripgrep) and lists the matching "
    "lines, grouped by file, most recently modified files first.\n"
    "\n"
    "- Fast on codebases of any size; files ignored by .gitignore are skipped.\n"
    "- `pattern` is a regular expression (e.g. \"log.*Error\", \"function\\s+\\w+\"); escape "
    "characters that are special in regexes to search for them literally.\n"
    "- Narrow the search with `include` (a file glob such as \"*.py\" or \"*.{ts,tsx}\") and "
    "`path` (a directory or file).\n"
    "- At most 100 matches are shown; use a more specific pattern, path or include when the "
    "results are cut.\n"
    "- Use it to find where something is defined or used. To find files by name, use glob; to "
    "read a file, use read. For an open-ended search that needs several rounds, combine "
    "glob, grep and read.";

constexpr std::size_t kMaxLineLength = 2000;  // longer match lines are cut (minified files)

struct Match {
  std::size_t line = 0;
  std::string text;
};

class GrepTool final : public BasicTool {
 public:
  explicit GrepTool(SearchOptions options)
      : BasicTool("grep", std::string(kDescription), kSchema), o_(std::move(options)) {}

  asio::awaitable<Result<ToolResult>> execute(json::object args, ToolContext& ctx) override {
    auto pattern = require_string(args, "pattern");
    if (!pattern) co_return pattern.error();
    auto path = get_string(args, "path");
    if (!path) co_return path.error();
    auto include = get_string(args, "include");
    if (!include) co_return include.error();

    auto root = co_await search_root(ctx, *path);
    if (!root) co_return root.error();

    PermissionRequest request{
        "grep",
        {*pattern},
        {"*"},
        json::object{
            {"pattern", *pattern}, {"path", root->string()}, {"include", include->value_or("")}}};
    if (auto allowed = co_await ctx.request_permission(std::move(request)); !allowed)
      co_return allowed.error();

    auto rg = locate_ripgrep(o_, "grep");
    if (!rg) co_return rg.error();

    std::vector<std::string> rg_args = {
        "--null",  // path\0line:text — file names may contain ':'
        "--line-number",
        "--no-heading",
        "--with-filename",
        "--color=never",
        "--hidden",       // dot-files are part of a project; .gitignore still applies
        "--no-messages",  // unreadable files are not the model's business
        "--max-columns=" + std::to_string(kMaxLineLength),
        "--max-columns-preview",
        "--glob=!.git/",
    };
    if (*include && !(*include)->empty()) {
      const std::string& glob = **include;
      // A file-name glob as a ripgrep type keeps .gitignore in force; a --glob would override
      // it and search ignored files. Globs with a directory part can only be --glob.
      if (glob.find('/') == std::string::npos && glob.front() != '!') {
        rg_args.push_back("--type-add=sbinclude:" + glob);
        rg_args.push_back("--type=sbinclude");
      } else {
        rg_args.push_back("--glob=" + glob);
      }
    }
    rg_args.push_back("--regexp=" + *pattern);
    rg_args.push_back("--");
    rg_args.push_back(root->string());

    std::error_code ec;
    fs::path cwd = fs::is_directory(*root, ec) ? *root : root->parent_path();
    auto run = co_await run_ripgrep(ctx, o_, *rg, std::move(rg_args), cwd);
    if (!run) co_return run.error();

    bool incomplete = run->truncated || run->timed_out;
    std::map<std::string, std::vector<Match>> by_file;
    std::size_t total = 0;
    for (std::string_view line : output_lines(run->output, incomplete)) {
      auto nul = line.find('\0');
      if (nul == std::string_view::npos) continue;
      std::string_view rest = line.substr(nul + 1);
      auto colon = rest.find(':');
      if (colon == std::string_view::npos) continue;
      Match m;
      for (char c : rest.substr(0, colon))
        m.line = m.line * 10 + static_cast<std::size_t>(c - '0');
      std::string_view text = rest.substr(colon + 1);
      if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
      m.text = repair_utf8(text);
      by_file[std::string(line.substr(0, nul))].push_back(std::move(m));
      ++total;
    }

    if (total == 0) {
      // Exit code 1 is "no match"; 2 is an error (a bad regex, say) unless it only concerned
      // some unreadable files.
      if (run->exit_code == 2 || (run->signal && !incomplete))
        co_return make_error(ErrorCode::InvalidRequest, "grep failed: " + ripgrep_error(*run));
      co_return ToolResult{
          *pattern, "No files found", json::object{{"matches", 0}, {"truncated", false}}, {}};
    }

    struct File {
      std::string path;
      fs::file_time_type mtime;
      std::vector<Match>* matches;
    };
    std::vector<File> files;
    files.reserve(by_file.size());
    for (auto& [file, matches] : by_file) {
      std::error_code mec;
      auto mtime = fs::last_write_time(file, mec);
      files.push_back({file, mec ? fs::file_time_type::min() : mtime, &matches});
    }
    // Newest first; the map's path order breaks ties so output is stable.
    std::stable_sort(files.begin(), files.end(),
                     [](const File& a, const File& b) { return a.mtime > b.mtime; });

    std::string out = "Found " + std::to_string(total) + (incomplete ? "+" : "") + " match" +
                      (total == 1 ? "" : "es") + "\n";
    std::size_t shown = 0;
    for (const auto& f : files) {
      if (shown == kGrepMatchLimit) break;
      auto& matches = *f.matches;
      std::sort(matches.begin(), matches.end(),
                [](const Match& a, const Match& b) { return a.line < b.line; });
      out += (shown == 0 ? "" : "\n") + repair_utf8(f.path) + ":\n";
      for (const auto& m : matches) {
        if (shown == kGrepMatchLimit) break;
        out += "  Line " + std::to_string(m.line) + ": " + m.text + "\n";
        ++shown;
      }
    }
    bool truncated = shown < total || incomplete;
    if (shown < total)
      out += "\n(Results are truncated: showing " + std::to_string(shown) + " of " +
             std::to_string(total) + (incomplete ? "+" : "") +
             " matches. Use a more specific pattern, path or include to see the rest.)\n";
    if (run->timed_out)
      out += "\n(The search was stopped after " + std::to_string(o_.timeout.count() / 1000) +
             " s; there may be more matches.)\n";
    else if (run->truncated)
      out +=
          "\n(The search was stopped early because it produced too much output; there may "
          "be more matches.)\n";
    if (!out.empty() && out.back() == '\n') out.pop_back();

    co_return ToolResult{
        *pattern,
        std::move(out),
        json::object{{"matches", total}, {"shown", shown}, {"truncated", truncated}},
        {}};
  }

 private:
  SearchOptions o_;
};

}  // namespace

ToolPtr make_grep_tool(SearchOptions options) {
  return std::make_shared<GrepTool>(std::move(options));
}

}  // namespace sb::tool
