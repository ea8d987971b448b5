#include "config/command.hpp"

#include <algorithm>
#include <cctype>
#include <set>

namespace sb::config {
namespace {

Error bad(const std::string& at, const std::string& what) {
  return make_error(ErrorCode::InvalidRequest, at + " " + what);
}

bool is_space(char c) {
  return std::isspace(static_cast<unsigned char>(c)) != 0;
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// The words of a command's arguments: a quoted run ("a b" or 'a b') is one word without its
// quotes; otherwise words are runs of characters other than spaces and quotes (a quote that
// opens no closed run is dropped).
std::vector<std::string> split_arguments(std::string_view text) {
  std::vector<std::string> words;
  std::size_t i = 0;
  while (i < text.size()) {
    char c = text[i];
    if (is_space(c)) {
      ++i;
    } else if (c == '"' || c == '\'') {
      auto close = text.find(c, i + 1);
      if (close == std::string_view::npos) {
        ++i;
        continue;
      }
      words.emplace_back(text.substr(i + 1, close - i - 1));
      i = close + 1;
    } else {
      std::size_t end = i;
      while (end < text.size() && !is_space(text[end]) && text[end] != '"' && text[end] != '\'')
        ++end;
      words.emplace_back(text.substr(i, end - i));
      i = end;
    }
  }
  return words;
}

// Calls `on(pos, len, n)` for each `$N` of the template, N its number (0 when too long to be an
// argument's: it then stands for no argument).
template <class On>
void for_each_placeholder(std::string_view t, On on) {
  for (std::size_t i = 0; i + 1 < t.size(); ++i) {
    if (t[i] != '$' || !is_digit(t[i + 1])) continue;
    std::size_t end = i + 1;
    std::size_t n = 0;
    while (end < t.size() && is_digit(t[end])) {
      n = n < 100000 ? n * 10 + static_cast<std::size_t>(t[end] - '0') : 100000;
      ++end;
    }
    on(i, end - i, n);
    i = end - 1;
  }
}

// Appends `segment` of the template with its $ARGUMENTS filled. Only the template is searched:
// what the user wrote is never read for placeholders again (an argument made of "$ARGUMENTS"s
// would otherwise grow the prompt with the square of its length).
void append_filled(std::string& out, std::string_view segment, std::string_view arguments) {
  static constexpr std::string_view kAll = "$ARGUMENTS";
  for (auto pos = segment.find(kAll); pos != std::string_view::npos; pos = segment.find(kAll)) {
    out.append(segment.substr(0, pos));
    out.append(arguments);
    segment.remove_prefix(pos + kAll.size());
  }
  out.append(segment);
}

}  // namespace

Result<std::map<std::string, Command>> parse_commands(const json::object& raw) {
  std::map<std::string, Command> out;
  auto section = get_object(raw, "command");
  if (!section) return section.error();
  if (!*section) return out;
  for (const auto& [key, value] : **section) {
    std::string name(key);
    std::string at = field_path("command", name);
    if (name.empty() || name.size() > 128 ||
        std::any_of(name.begin(), name.end(), [](char c) { return is_space(c); }))
      return bad(at, "is not a usable command name: use 1 to 128 characters without spaces");
    if (!value.is_object())
      return bad(at, "must be an object {template, description?, agent?, model?, subtask?}, got " +
                         std::string(kind_name(value)));
    const auto& o = value.get_object();
    Command c;
    c.name = name;
    auto text = get_string(o, "template", at);
    if (!text) return text.error();
    if (!*text || (*text)->empty())
      return bad(field_path(at, "template"),
                 "is required: the prompt, with $ARGUMENTS or $1, $2, ... for the arguments");
    c.template_text = **text;
    auto description = get_string(o, "description", at);
    if (!description) return description.error();
    c.description = description->value_or("");
    auto agent = get_string(o, "agent", at);
    if (!agent) return agent.error();
    if (*agent && (*agent)->empty()) return bad(field_path(at, "agent"), "must name an agent");
    c.agent = *agent;
    auto model = get_string(o, "model", at);
    if (!model) return model.error();
    if (*model) {
      auto slash = (*model)->find('/');
      if (slash == std::string::npos || slash == 0 || slash + 1 == (*model)->size())
        return bad(field_path(at, "model"), "must be \"PROVIDER/MODEL\", got \"" + **model + "\"");
      c.model = *model;
    }
    auto subtask = get_bool(o, "subtask", at);
    if (!subtask) return subtask.error();
    c.subtask = subtask->value_or(false);
    out[name] = std::move(c);
  }
  return out;
}

std::string expand_template(std::string_view template_text, std::string_view arguments) {
  auto words = split_arguments(arguments);
  std::size_t last = 0;
  bool numbered = false;
  for_each_placeholder(template_text, [&](std::size_t, std::size_t, std::size_t n) {
    numbered = true;
    last = std::max(last, n);
  });
  std::string out;
  std::size_t copied = 0;
  for_each_placeholder(template_text, [&](std::size_t pos, std::size_t len, std::size_t n) {
    append_filled(out, template_text.substr(copied, pos - copied), arguments);
    copied = pos + len;
    if (n == 0 || n > words.size()) return;
    if (n != last) {
      out += words[n - 1];
      return;
    }
    for (std::size_t i = n - 1; i < words.size(); ++i)
      out += (i == n - 1 ? "" : " ") + words[i];
  });
  append_filled(out, template_text.substr(copied), arguments);
  bool all = template_text.find("$ARGUMENTS") != std::string_view::npos;
  bool blank = std::all_of(arguments.begin(), arguments.end(), is_space);
  if (!numbered && !all && !blank) out += "\n\n" + std::string(arguments);
  return out;
}

std::vector<std::string> template_hints(std::string_view template_text) {
  std::set<std::string, std::less<>> numbered;  // as OpenCode sorts them: as text ($10 before $2)
  for_each_placeholder(template_text, [&](std::size_t pos, std::size_t len, std::size_t) {
    numbered.emplace(template_text.substr(pos, len));
  });
  std::vector<std::string> out(numbered.begin(), numbered.end());
  if (template_text.find("$ARGUMENTS") != std::string_view::npos) out.push_back("$ARGUMENTS");
  return out;
}

const std::map<std::string, Command>& builtin_commands() {
  static const std::map<std::string, Command> commands = [] {
    Command init;
    init.name = "init";
    init.description = "create or update AGENTS.md";
    init.template_text =
        "Look through this project and write an AGENTS.md file at its top directory for the "
        "coding agents that will work in it (about 20 to 40 lines). Say:\n"
        "- how to build it, how to lint it, how to run all tests and how to run a single test;\n"
        "- the code style it follows: imports, formatting, types, naming, how errors are "
        "handled;\n"
        "- anything in .cursor/rules/, .cursorrules or .github/copilot-instructions.md that "
        "agents must follow.\n"
        "If there is an AGENTS.md already, improve it rather than starting over.\n"
        "$ARGUMENTS";
    return std::map<std::string, Command>{{init.name, init}};
  }();
  return commands;
}

const Command* find_command(const std::map<std::string, Command>& configured,
                            const std::string& name) {
  if (auto it = configured.find(name); it != configured.end()) return &it->second;
  const auto& builtin = builtin_commands();
  if (auto it = builtin.find(name); it != builtin.end()) return &it->second;
  return nullptr;
}

}  // namespace sb::config
