#pragma once
// What the search tools (grep, glob, list) share: finding ripgrep, running it for a tool call,
// and resolving the directory to search. ripgrep is what OpenCode uses too: it is fast, and it
// honours .gitignore, .ignore and .rgignore files the way a developer expects.
#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "tool/paths.hpp"
#include "tool/process.hpp"
#include "tool/tool.hpp"
#include "util/text.hpp"

namespace sb::tool {

// Options of the grep, glob and list tools. Defaults are written beside each field.
struct SearchOptions {
  std::string rg = "rg";                      // ripgrep: a name looked up on PATH, or a path
  std::chrono::milliseconds timeout{60000};   // a longer search is stopped; partial results
  std::size_t max_output = 10 * 1024 * 1024;  // rg output read at most; rg is stopped there
};

namespace search_detail {

inline Result<std::filesystem::path> locate_ripgrep(const SearchOptions& o, std::string_view tool) {
  if (auto found = find_executable(o.rg)) return *found;
  return make_error(ErrorCode::Unavailable,
                    "the " + std::string(tool) + " tool needs ripgrep, but `" + o.rg +
                        "` was not found on PATH; install ripgrep (the `ripgrep` package) and "
                        "try again, or use the bash tool meanwhile");
}

// Runs rg with stdout and stderr apart. An abort is an error ("aborted"); a timeout or the
// output cap end the search early with what was found (the result's timed_out / truncated).
inline boost::asio::awaitable<Result<ProcessResult>> run_ripgrep(ToolContext& ctx,
                                                                 const SearchOptions& o,
                                                                 const std::filesystem::path& rg,
                                                                 std::vector<std::string> args,
                                                                 const std::filesystem::path& cwd) {
  ProcessOptions p;
  p.argv.reserve(args.size() + 1);
  p.argv.push_back(rg.string());
  for (auto& a : args)
    p.argv.push_back(std::move(a));
  p.cwd = cwd;
  p.mode = OutputMode::Separate;
  p.timeout = o.timeout;
  p.abort = ctx.abort;
  p.max_output = o.max_output;
  p.stop_at_cap = true;
  auto run = co_await run_process(std::move(p));
  if (!run) co_return run.error();
  if (run->aborted) co_return make_error(ErrorCode::Unavailable, "aborted");
  co_return run;
}

// The directory (or file) a search tool works on: `given` resolved against the project
// directory (asking `external_directory` when outside it), or the project directory itself.
// It must exist.
inline boost::asio::awaitable<Result<std::filesystem::path>> search_root(
    ToolContext& ctx, const std::optional<std::string>& given) {
  std::filesystem::path root;
  if (given && !given->empty()) {
    auto resolved = co_await resolve_path(ctx, *given);
    if (!resolved) co_return resolved.error();
    root = std::move(*resolved);
  } else {
    root = ctx.directory.empty() ? std::filesystem::current_path() : ctx.directory;
  }
  std::error_code ec;
  if (!std::filesystem::exists(root, ec))
    co_return make_error(ErrorCode::NotFound, "path not found: " + root.string());
  co_return root;
}

// A path as the tool title shows it: relative to the project directory when inside it.
inline std::string display_path(const ToolContext& ctx, const std::filesystem::path& path) {
  if (!ctx.directory.empty() && is_within(ctx.directory, path)) {
    auto rel = path.lexically_relative(ctx.directory);
    if (!rel.empty()) return rel.string();
  }
  return path.string();
}

// The complete lines of `text`; a last line without its newline is dropped when the output
// was cut short (it may be a fragment).
inline std::vector<std::string_view> output_lines(std::string_view text, bool cut_short) {
  std::vector<std::string_view> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) {
      if (!cut_short) lines.push_back(text.substr(start));
      break;
    }
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// A directory path without its trailing slashes ("/" stays "/").
inline std::string without_trailing_slash(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/')
    dir.pop_back();
  return dir;
}

// What the paths under `dir` (given without a trailing slash) begin with.
inline std::string directory_prefix(const std::string& dir) {
  return dir == "/" ? "/" : dir + "/";
}

// rg's own words on stderr, trimmed, for an error message.
inline std::string ripgrep_error(const ProcessResult& run) {
  std::string err = repair_utf8(run.error_output);
  while (!err.empty() && (err.back() == '\n' || err.back() == ' '))
    err.pop_back();
  if (err.empty())
    err = "ripgrep failed" +
          (run.exit_code ? " with exit code " + std::to_string(*run.exit_code) : std::string());
  return err;
}

// Lists the files under `dir` (without a trailing slash) with `rg --files`, as glob and list
// do: hidden files included, .gitignore honoured, .git left out, and each of `excludes` left
// out as a `--glob=!` pattern. An rg error (exit code 2) that listed nothing fails the call as
// "<tool> failed: ...".
inline boost::asio::awaitable<Result<ProcessResult>> list_files(
    ToolContext& ctx, const SearchOptions& o, std::string_view tool, const std::string& dir,
    std::vector<std::string> excludes = {}) {
  auto rg = locate_ripgrep(o, tool);
  if (!rg) co_return rg.error();
  std::vector<std::string> args = {"--files", "--hidden", "--color=never", "--glob=!.git/"};
  for (const auto& g : excludes)
    args.push_back("--glob=!" + g);
  args.push_back("--");
  args.push_back(dir);
  std::filesystem::path cwd = dir;
  auto run = co_await run_ripgrep(ctx, o, *rg, std::move(args), cwd);
  if (!run) co_return run.error();
  if (run->exit_code == 2 && run->output.empty())
    co_return make_error(ErrorCode::InvalidRequest,
                         std::string(tool) + " failed: " + ripgrep_error(*run));
  co_return run;
}

// The paths of list_files' output, relative to the directory whose directory_prefix is
// `prefix`; they point into `run.output`.
inline std::vector<std::string_view> listed_paths(const ProcessResult& run,
                                                  const std::string& prefix) {
  std::vector<std::string_view> paths;
  for (std::string_view line : output_lines(run.output, run.truncated || run.timed_out))
    if (line.rfind(prefix, 0) == 0 && line.size() > prefix.size())
      paths.push_back(line.substr(prefix.size()));
  return paths;
}

}  // namespace search_detail
}  // namespace sb::tool
