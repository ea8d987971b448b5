#include "tool/builtin/bash.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <system_error>

#include "tool/paths.hpp"
#include "tool/process.hpp"
#include "tool/process_groups.hpp"
#include "util/text.hpp"

namespace sb::tool {

namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kSchema = R"({
  "type": "object",
  "properties": {
    "command": {
      "type": "string",
      "description": "The command to run, exactly as you would type it in bash."
    },
    "timeout": {
      "type": "integer",
      "description": "Optional timeout in milliseconds (default 120000 = 2 minutes, at most 600000 = 10 minutes). When it passes, the command and every process it started are killed."
    },
    "workdir": {
      "type": "string",
      "description": "Optional directory to run the command in, absolute or relative to the project directory (the default). Use this instead of `cd <dir> && <command>`."
    },
    "description": {
      "type": "string",
      "description": "A clear, concise description of what the command does, in 5-10 words. Examples: `ls` -> \"Lists files in current directory\"; `git status` -> \"Shows working tree status\"; `npm install` -> \"Installs package dependencies\"."
    }
  },
  "required": ["command", "description"]
})";

std::string describe(const BashOptions& o) {
  return "Runs a bash command and returns its output (stdout and stderr interleaved, as a "
         "terminal shows them) and, when it is not zero, its exit code.\n"
         "\n"
         "Use it for terminal work: building, running tests, git, package managers, running "
         "programs. Do not use it to read, write, edit or search files when a dedicated tool "
         "exists (read, write, edit, glob, grep, list): those are faster and safer.\n"
         "\n"
         "Usage notes:\n"
         "- Each call runs in a fresh shell: `cd`, variables and functions do not carry over to "
         "the next call. Commands run in the project directory unless `workdir` says otherwise; "
         "prefer `workdir` to `cd <dir> && ...`.\n"
         "- The command has no terminal and no input: interactive programs (editors, pagers, "
         "prompts, `git rebase -i`) cannot work; pass flags that make them non-interactive.\n"
         "- Quote paths that contain spaces with double quotes: cat \"my file.txt\".\n"
         "- To run several commands, chain dependent ones with `&&` (`;` when later ones should "
         "run even if earlier ones fail); independent commands can be separate calls.\n"
         "- The timeout defaults to " +
         std::to_string(o.default_timeout.count()) + " ms and can be at most " +
         std::to_string(o.max_timeout.count()) +
         " ms. A command that times out is killed together with every process it started; "
         "start long-running servers in the background with their output redirected to a file "
         "(`cmd > out.log 2>&1 &`).\n"
         "- A non-zero exit code is not a failure of the tool: read the output and decide.\n"
         "- Very long output is cut and saved to a file that you can read in parts.\n"
         "- Each command may need the user's permission; if it is refused, do not retry the "
         "same command.";
}

// ---- permission patterns ------------------------------------------------------------------

struct Segment {
  std::string text;
  bool substitution = false;  // contains $(...), `...`, <(...) or >(...)
};

// Copies a parenthesised group starting at cmd[i] == '(' into `out` and returns the index of
// its closing parenthesis (or the last index when it is never closed).
std::size_t copy_group(std::string_view cmd, std::size_t i, std::string& out) {
  int depth = 0;
  for (; i < cmd.size(); ++i) {
    char c = cmd[i];
    out.push_back(c);
    if (c == '\\' && i + 1 < cmd.size()) {
      out.push_back(cmd[++i]);
    } else if (c == '\'') {
      while (++i < cmd.size()) {
        out.push_back(cmd[i]);
        if (cmd[i] == '\'') break;
      }
    } else if (c == '(') {
      ++depth;
    } else if (c == ')' && --depth == 0) {
      return i;
    }
  }
  return cmd.size() - 1;
}

// Same for a `...` substitution starting at cmd[i] == '`'.
std::size_t copy_backticks(std::string_view cmd, std::size_t i, std::string& out) {
  out.push_back('`');
  while (++i < cmd.size()) {
    char c = cmd[i];
    out.push_back(c);
    if (c == '\\' && i + 1 < cmd.size())
      out.push_back(cmd[++i]);
    else if (c == '`')
      return i;
  }
  return cmd.size() - 1;
}

// Splits a command line at the operators that separate simple commands (; & && || | |& newline
// and subshell parentheses), respecting quotes, escapes and substitutions. An approximation of
// the shell grammar that errs towards keeping text together.
std::vector<Segment> split_simple_commands(std::string_view cmd) {
  std::vector<Segment> out;
  Segment cur;
  auto flush = [&] {
    out.push_back(std::move(cur));
    cur = Segment{};
  };
  for (std::size_t i = 0; i < cmd.size(); ++i) {
    char c = cmd[i];
    char next = i + 1 < cmd.size() ? cmd[i + 1] : '\0';
    if (c == '\\') {
      cur.text.push_back(c);
      if (next) cur.text.push_back(cmd[++i]);
    } else if (c == '\'') {
      cur.text.push_back(c);
      while (++i < cmd.size()) {
        cur.text.push_back(cmd[i]);
        if (cmd[i] == '\'') break;
      }
    } else if (c == '"') {
      cur.text.push_back(c);
      while (++i < cmd.size()) {
        char d = cmd[i];
        if (d == '\\' && i + 1 < cmd.size()) {
          cur.text.push_back(d);
          cur.text.push_back(cmd[++i]);
        } else if (d == '$' && i + 1 < cmd.size() && cmd[i + 1] == '(') {
          cur.substitution = true;
          cur.text.push_back(d);
          i = copy_group(cmd, i + 1, cur.text);
        } else if (d == '`') {
          cur.substitution = true;
          i = copy_backticks(cmd, i, cur.text);
        } else {
          cur.text.push_back(d);
          if (d == '"') break;
        }
      }
    } else if ((c == '$' || c == '<' || c == '>') && next == '(') {
      cur.substitution = true;
      cur.text.push_back(c);
      i = copy_group(cmd, i + 1, cur.text);
    } else if (c == '`') {
      cur.substitution = true;
      i = copy_backticks(cmd, i, cur.text);
    } else if (c == '#' &&
               (cur.text.empty() || std::isspace(static_cast<unsigned char>(cur.text.back())))) {
      while (i + 1 < cmd.size() && cmd[i + 1] != '\n')
        ++i;  // a comment
    } else if (c == ';' || c == '\n' || c == '(' || c == ')') {
      flush();
    } else if (c == '&') {
      if (next == '&') {
        flush();
        ++i;
      } else if ((!cur.text.empty() && (cur.text.back() == '>' || cur.text.back() == '<')) ||
                 next == '>') {
        cur.text.push_back(c);  // a redirection: 2>&1, >&2, &> file
      } else {
        flush();  // background
      }
    } else if (c == '|') {
      if (next == '|') {
        flush();
        ++i;
      } else if (!cur.text.empty() && cur.text.back() == '>') {
        cur.text.push_back(c);  // >| file
      } else {
        if (next == '&') ++i;
        flush();
      }
    } else {
      cur.text.push_back(c);
    }
  }
  flush();
  return out;
}

std::string_view first_word(std::string_view s) {
  std::size_t end = 0;
  while (end < s.size() && !std::isspace(static_cast<unsigned char>(s[end])))
    ++end;
  return s.substr(0, end);
}

bool is_assignment(std::string_view word) {
  auto eq = word.find('=');
  if (eq == std::string_view::npos || eq == 0) return false;
  if (std::isdigit(static_cast<unsigned char>(word[0]))) return false;
  return std::all_of(word.begin(), word.begin() + static_cast<std::ptrdiff_t>(eq), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

void add_unique(std::vector<std::string>& list, std::string value) {
  if (std::find(list.begin(), list.end(), value) == list.end()) list.push_back(std::move(value));
}

// ---- output ------------------------------------------------------------------------------

std::string mib(std::size_t bytes) {
  if (bytes % (1024 * 1024) == 0) return std::to_string(bytes / (1024 * 1024)) + " MiB";
  return std::to_string(bytes) + " bytes";
}

class BashTool final : public BasicTool {
 public:
  explicit BashTool(BashOptions options)
      : BasicTool("bash", describe(options), kSchema), o_(std::move(options)) {}

  asio::awaitable<Result<ToolResult>> execute(json::object args, ToolContext& ctx) override {
    auto command = require_string(args, "command");
    if (!command) co_return command.error();
    auto description = get_string(args, "description");
    if (!description) co_return description.error();
    auto workdir = get_string(args, "workdir");
    if (!workdir) co_return workdir.error();
    auto timeout_ms = get_int(args, "timeout");
    if (!timeout_ms) co_return timeout_ms.error();

    std::chrono::milliseconds timeout = o_.default_timeout;
    if (*timeout_ms) {
      if (**timeout_ms <= 0)
        co_return make_error(ErrorCode::InvalidRequest,
                             "timeout must be a positive number of milliseconds, got " +
                                 std::to_string(**timeout_ms));
      timeout = std::min(std::chrono::milliseconds(**timeout_ms), o_.max_timeout);
    }

    fs::path cwd = ctx.directory.empty() ? fs::current_path() : ctx.directory;
    if (*workdir && !(*workdir)->empty()) {
      auto resolved = co_await resolve_path(ctx, **workdir);
      if (!resolved) co_return resolved.error();
      cwd = std::move(*resolved);
      std::error_code ec;
      if (!fs::is_directory(cwd, ec))
        co_return make_error(ErrorCode::InvalidRequest,
                             "workdir " + cwd.string() +
                                 (fs::exists(cwd, ec) ? " is not a directory" : " does not exist"));
    }

    BashPermission permission = bash_permission(*command);
    PermissionRequest request{
        "bash", std::move(permission.patterns), std::move(permission.always),
        json::object{{"command", *command}, {"description", description->value_or("")}}};
    if (auto allowed = co_await ctx.request_permission(std::move(request)); !allowed)
      co_return allowed.error();

    std::string desc = description->value_or("");
    std::string head;  // the start of the output, for live display
    bool head_full = false;
    auto report = [&] {
      ctx.report(std::nullopt, json::object{{"output", repair_utf8(head)}, {"description", desc}});
    };
    report();

    ProcessOptions p;
    p.argv = {shell().string(), "-c", *command};
    p.cwd = cwd;
    // The server's PWD is stale in another directory; shells and `pwd` trust a valid PWD.
    p.env = {{"PWD", cwd.string()}};
    p.timeout = timeout;
    p.abort = ctx.abort;
    p.max_output = o_.max_output;
    p.kill_grace = o_.kill_grace;
    p.output_interval = o_.progress_interval;
    if (!ctx.data_dir.empty()) p.group_record_dir = process_group_dir(ctx.data_dir);
    p.on_output = [&](std::string_view chunk) {
      if (head_full) return;
      // A few bytes past the limit, so that the cut can find a character boundary.
      std::size_t want = o_.metadata_output + 4;
      head.append(chunk.substr(0, want - std::min(head.size(), want)));
      if (head.size() > o_.metadata_output) {
        head = std::string(utf8_prefix(head, o_.metadata_output));
        head_full = true;
      }
      report();
    };
    auto run = co_await run_process(std::move(p));
    if (!run) co_return run.error();
    if (run->aborted) co_return make_error(ErrorCode::Unavailable, "aborted");

    std::string output = repair_utf8(run->output);
    std::vector<std::string> notes;
    if (run->truncated)
      notes.push_back("(Output exceeded " + mib(o_.max_output) + "; the remaining " +
                      std::to_string(run->output_bytes - run->output.size()) +
                      " bytes were discarded.)");
    if (run->timed_out)
      notes.push_back("(Command timed out after " + std::to_string(timeout.count()) +
                      " ms and was killed, together with every process it started.)");
    else if (run->signal)
      notes.push_back("(Command was killed by " + signal_name(*run->signal) + ".)");
    if (run->exit_code && *run->exit_code != 0)
      notes.push_back("(Exit code " + std::to_string(*run->exit_code) + ".)");
    for (const auto& note : notes) {
      if (!output.empty()) output += output.back() == '\n' ? "\n" : "\n\n";
      output += note;
    }
    if (output.empty()) output = "(no output)";

    json::object meta{
        {"output", repair_utf8(utf8_prefix(run->output, o_.metadata_output))},
        {"exit", run->exit_code ? json::value(*run->exit_code) : json::value(nullptr)},
        {"description", desc},
    };
    if (run->signal) meta["signal"] = signal_name(*run->signal);
    if (run->timed_out) meta["timedOut"] = true;
    if (run->truncated) meta["truncated"] = true;

    co_return ToolResult{desc.empty() ? *command : desc, std::move(output), std::move(meta), {}};
  }

 private:
  fs::path shell() const {
    if (!o_.shell.empty()) return o_.shell;
    if (::access("/bin/bash", X_OK) == 0) return "/bin/bash";
    return "/bin/sh";
  }

  BashOptions o_;
};

}  // namespace

BashPermission bash_permission(std::string_view command) {
  static constexpr std::array<std::string_view, 10> kLeadingKeywords = {
      "if", "then", "else", "elif", "do", "while", "until", "!", "{", "time"};
  static constexpr std::array<std::string_view, 4> kClosers = {"fi", "done", "esac", "}"};
  auto is_one_of = [](std::string_view w, const auto& list) {
    return std::find(list.begin(), list.end(), w) != list.end();
  };

  BashPermission out;
  for (auto& segment : split_simple_commands(command)) {
    std::string_view text = trim(segment.text);
    while (!text.empty() && is_one_of(first_word(text), kLeadingKeywords))
      text = trim(text.substr(first_word(text).size()));
    if (text.empty() || is_one_of(text, kClosers)) continue;
    add_unique(out.patterns, std::string(text));

    std::string_view rest = text;
    std::string_view word = first_word(rest);
    while (!word.empty() && is_assignment(word)) {
      rest = trim(rest.substr(word.size()));
      word = first_word(rest);
    }
    // A command word that is computed ("$CMD", `which x`) says nothing about what runs.
    bool literal = !word.empty() && word.find_first_of("$`'\"\\") == std::string_view::npos;
    if (segment.substitution || !literal)
      add_unique(out.always, std::string(text));
    else
      add_unique(out.always, std::string(word) + " *");
  }
  if (out.patterns.empty()) {
    std::string whole(trim(command));
    out.patterns.push_back(whole);
    out.always.push_back(whole);
  }
  return out;
}

ToolPtr make_bash_tool(BashOptions options) {
  return std::make_shared<BashTool>(std::move(options));
}

}  // namespace sb::tool
