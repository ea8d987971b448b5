#include "tool/builtin/glob.hpp"

#include <algorithm>
#include <system_error>
#include <vector>

#include "util/text.hpp"

namespace sb::tool {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using namespace search_detail;

namespace {

constexpr std::size_t npos = std::string_view::npos;
constexpr std::size_t kMaxAlternatives = 256;  // brace expansions of one pattern, at most

// Index of the `]` that closes the character class opening at p[i] == '[', or npos. A `]`
// right after `[` or `[!` is a literal member, as in the shell.
std::size_t class_end(std::string_view p, std::size_t i) {
  std::size_t j = i + 1;
  if (j < p.size() && (p[j] == '!' || p[j] == '^')) ++j;
  if (j < p.size() && p[j] == ']') ++j;
  for (; j < p.size(); ++j) {
    if (p[j] == '\\') {
      ++j;
      continue;
    }
    if (p[j] == ']') return j;
  }
  return npos;
}

// Expands the first top-level {a,b} group and recurses, so that the matcher below never sees
// braces. Unbalanced braces are left literal (glob_error reports them first).
void expand_braces(std::string_view p, std::vector<std::string>& out) {
  if (out.size() >= kMaxAlternatives) return;
  std::size_t open = npos;
  for (std::size_t i = 0; i < p.size() && open == npos; ++i) {
    if (p[i] == '\\') {
      ++i;
    } else if (p[i] == '[') {
      std::size_t end = class_end(p, i);
      if (end != npos) i = end;
    } else if (p[i] == '{') {
      open = i;
    }
  }
  if (open == npos) {
    out.emplace_back(p);
    return;
  }
  std::vector<std::string_view> alternatives;
  std::size_t start = open + 1;
  std::size_t close = npos;
  int depth = 0;
  for (std::size_t i = open; i < p.size() && close == npos; ++i) {
    char c = p[i];
    if (c == '\\') {
      ++i;
    } else if (c == '[') {
      std::size_t end = class_end(p, i);
      if (end != npos) i = end;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}') {
      if (--depth == 0) {
        alternatives.push_back(p.substr(start, i - start));
        close = i;
      }
    } else if (c == ',' && depth == 1) {
      alternatives.push_back(p.substr(start, i - start));
      start = i + 1;
    }
  }
  if (close == npos) {
    out.emplace_back(p);
    return;
  }
  std::string_view prefix = p.substr(0, open);
  std::string_view suffix = p.substr(close + 1);
  for (auto alternative : alternatives) {
    std::string expanded;
    expanded.reserve(prefix.size() + alternative.size() + suffix.size());
    expanded.append(prefix).append(alternative).append(suffix);
    expand_braces(expanded, out);
  }
}

// Matches one brace-free pattern against a whole path. Memoised over (pattern index, text
// index), so `*` and `**` cannot make it exponential.
class Matcher {
 public:
  Matcher(std::string_view p, std::string_view t)
      : p_(p), t_(t), memo_((p.size() + 1) * (t.size() + 1), -1) {}

  bool match(std::size_t pi, std::size_t ti) {
    signed char& m = memo_[pi * (t_.size() + 1) + ti];
    if (m < 0) m = compute(pi, ti) ? 1 : 0;
    return m == 1;
  }

 private:
  bool compute(std::size_t pi, std::size_t ti) {
    if (pi == p_.size()) return ti == t_.size();
    char c = p_[pi];
    if (c == '*') {
      if (pi + 1 < p_.size() && p_[pi + 1] == '*') {
        std::size_t after = pi + 2;
        if (after < p_.size() && p_[after] == '/' && match(after + 1, ti)) return true;
        for (std::size_t k = ti; k <= t_.size(); ++k)
          if (match(after, k)) return true;
        return false;
      }
      for (std::size_t k = ti; k <= t_.size(); ++k) {
        if (match(pi + 1, k)) return true;
        if (k < t_.size() && t_[k] == '/') break;
      }
      return false;
    }
    if (ti == t_.size()) return false;
    char ch = t_[ti];
    if (c == '?') return ch != '/' && match(pi + 1, ti + 1);
    if (c == '[') {
      std::size_t end = class_end(p_, pi);
      if (end != npos) {
        if (ch == '/') return false;
        std::size_t j = pi + 1;
        bool negate = p_[j] == '!' || p_[j] == '^';
        if (negate) ++j;
        bool hit = false;
        while (j < end) {
          char lo = p_[j];
          if (lo == '\\' && j + 1 < end) lo = p_[++j];
          if (j + 2 < end && p_[j + 1] == '-') {
            std::size_t hi_at = j + 2;
            if (p_[hi_at] == '\\' && hi_at + 1 < end) ++hi_at;
            char hi = p_[hi_at];
            hit = hit || (ch >= lo && ch <= hi);
            j = hi_at + 1;
          } else {
            hit = hit || ch == lo;
            ++j;
          }
        }
        return hit != negate && match(end + 1, ti + 1);
      }
      // An unclosed `[` is a literal character.
    }
    if (c == '\\' && pi + 1 < p_.size()) return ch == p_[pi + 1] && match(pi + 2, ti + 1);
    return ch == c && match(pi + 1, ti + 1);
  }

  std::string_view p_;
  std::string_view t_;
  std::vector<signed char> memo_;
};

// A pattern prepared once for matching many paths.
struct CompiledGlob {
  // `anchored`: match the whole relative path even when the pattern has no slash.
  explicit CompiledGlob(std::string_view pattern, bool anchored = false) {
    while (pattern.substr(0, 2) == "./")
      pattern.remove_prefix(2);
    name_only = !anchored && pattern.find('/') == npos;
    expand_braces(pattern, alternatives);
  }
  bool matches(std::string_view relative_path) const {
    std::string_view subject = relative_path;
    if (name_only) {
      auto slash = relative_path.rfind('/');
      if (slash != npos) subject = relative_path.substr(slash + 1);
    }
    return std::any_of(alternatives.begin(), alternatives.end(),
                       [&](const std::string& a) { return Matcher(a, subject).match(0, 0); });
  }
  bool name_only = true;
  std::vector<std::string> alternatives;
};

constexpr std::string_view kSchema = R"({
  "type": "object",
  "properties": {
    "pattern": {
      "type": "string",
      "description": "The glob to match file paths against, e.g. \"*.ts\" (any depth), \"src/**/*.test.ts\", \"*.{c,h}\"."
    },
    "path": {
      "type": "string",
      "description": "Optional directory to search in, absolute or relative to the project directory. Omit it to search the project directory (do not pass \"undefined\" or \"null\")."
    }
  },
  "required": ["pattern"]
})";

constexpr std::string_view kDescription =
    "Finds files whose path matches a glob pattern and returns their absolute paths, most "
    "recently modified first.\n"
    "\n"
    "- Patterns: `*` matches within a file or directory name, `**` across directories, "
    "`?` one character, `[a-z]` a character class, `{ts,tsx}` alternatives. A pattern without "
    "a slash matches file names at any depth (\"*.py\"); one with a slash matches paths "
    "relative to `path` (\"src/**/*.py\").\n"
    "- Files ignored by .gitignore are skipped; hidden files are included.\n"
    "- At most 100 files are returned; use a more specific pattern or path when the results "
    "are cut.\n"
    "- Use it to find files by name. To search file contents, use grep; to see a directory's "
    "layout, use list.";

class GlobTool final : public BasicTool {
 public:
  explicit GlobTool(SearchOptions options)
      : BasicTool("glob", std::string(kDescription), kSchema), o_(std::move(options)) {}

  asio::awaitable<Result<ToolResult>> execute(json::object args, ToolContext& ctx) override {
    auto pattern_arg = require_string(args, "pattern");
    if (!pattern_arg) co_return pattern_arg.error();
    auto path = get_string(args, "path");
    if (!path) co_return path.error();
    std::string pattern = *pattern_arg;
    if (auto problem = glob_error(pattern))
      co_return make_error(ErrorCode::InvalidRequest,
                           "invalid glob pattern \"" + pattern + "\": " + *problem);

    // Models often put the directory into the pattern ("/repo/src/**/*.ts"): its literal
    // leading directories become the search path, and the rest is matched from there
    // ("/repo/src/*.ts" means the files directly in src, not *.ts at any depth).
    std::optional<std::string> absolute_prefix;
    if (!pattern.empty() && pattern.front() == '/') {
      std::size_t meta = pattern.find_first_of("*?[{");
      std::size_t slash = pattern.rfind('/', meta == npos ? pattern.size() : meta);
      absolute_prefix = slash == 0 ? "/" : pattern.substr(0, slash);
      pattern = pattern.substr(slash + 1);
      if (!*path || (*path)->empty()) *path = absolute_prefix;
    }
    while (pattern.rfind("./", 0) == 0)
      pattern.erase(0, 2);
    if (pattern.empty()) pattern = "**";

    auto root = co_await search_root(ctx, *path);
    if (!root) co_return root.error();
    std::error_code ec;
    if (!fs::is_directory(*root, ec))
      co_return make_error(ErrorCode::InvalidRequest, "not a directory: " + root->string());
    std::string root_str = without_trailing_slash(root->string());
    if (absolute_prefix && *absolute_prefix != root_str) {
      // Both a path and an absolute pattern: the pattern's directory must lie inside the path.
      std::string inside = directory_prefix(root_str);
      if (absolute_prefix->rfind(inside, 0) != 0)
        co_return make_error(ErrorCode::InvalidRequest,
                             "the pattern's directory " + *absolute_prefix + " is not inside " +
                                 root_str + "; give a pattern relative to `path`");
      pattern = absolute_prefix->substr(inside.size()) + "/" + pattern;
    }

    PermissionRequest request{
        "glob", {pattern}, {"*"}, json::object{{"pattern", pattern}, {"path", root_str}}};
    if (auto allowed = co_await ctx.request_permission(std::move(request)); !allowed)
      co_return allowed.error();

    auto run = co_await list_files(ctx, o_, "glob", root_str);
    if (!run) co_return run.error();
    bool incomplete = run->truncated || run->timed_out;

    std::string prefix = directory_prefix(root_str);
    CompiledGlob glob(pattern, absolute_prefix.has_value());

    struct Found {
      std::string path;
      fs::file_time_type mtime;
    };
    std::vector<Found> found;
    for (std::string_view relative : listed_paths(*run, prefix)) {
      if (!glob.matches(relative)) continue;
      std::string path = prefix + std::string(relative);
      std::error_code mec;
      auto mtime = fs::last_write_time(path, mec);
      found.push_back({std::move(path), mec ? fs::file_time_type::min() : mtime});
    }

    std::string title = display_path(ctx, *root);
    if (found.empty())
      co_return ToolResult{
          title, "No files found", json::object{{"count", 0}, {"truncated", incomplete}}, {}};

    std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
      if (a.mtime != b.mtime) return a.mtime > b.mtime;
      return a.path < b.path;
    });
    std::size_t total = found.size();
    std::size_t shown = std::min(total, kGlobFileLimit);
    std::string out;
    for (std::size_t i = 0; i < shown; ++i)
      out += repair_utf8(found[i].path) + "\n";
    if (shown < total)
      out += "\n(Results are truncated: showing the " + std::to_string(shown) +
             " most recently modified of " + std::to_string(total) + (incomplete ? "+" : "") +
             " files. Use a more specific pattern or path.)\n";
    if (incomplete)
      out +=
          "\n(The file listing was stopped early (too many files or too slow); there may be "
          "more matches. Use a more specific path.)\n";
    out.pop_back();
    co_return ToolResult{
        title,
        std::move(out),
        json::object{
            {"count", shown}, {"total", total}, {"truncated", shown < total || incomplete}},
        {}};
  }

 private:
  SearchOptions o_;
};

}  // namespace

ToolPtr make_glob_tool(SearchOptions options) {
  return std::make_shared<GlobTool>(std::move(options));
}

bool glob_match(std::string_view pattern, std::string_view relative_path) {
  return CompiledGlob(pattern).matches(relative_path);
}

std::optional<std::string> glob_error(std::string_view p) {
  int depth = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\') {
      ++i;
    } else if (c == '[') {
      std::size_t end = class_end(p, i);
      if (end == npos) return "unclosed character class '['";
      i = end;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}') {
      if (depth == 0) return "'}' without a matching '{'";
      --depth;
    }
  }
  if (depth > 0) return "unclosed alternatives '{'";
  return std::nullopt;
}

}  // namespace sb::tool
