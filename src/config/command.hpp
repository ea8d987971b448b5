#pragma once
// Commands: prompt templates run by name (OpenCode's `command` config key). A command's template
// gets the caller's arguments through `$ARGUMENTS` (all of them, as written) and `$1`, `$2`, ...
// (one each; the highest-numbered placeholder takes the rest). Pure functions; thread-safe.
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/error.hpp"
#include "util/json.hpp"

namespace sb::config {

// One entry of `command: {NAME: {template, description?, agent?, model?, subtask?}}`.
struct Command {
  std::string name;
  std::string template_text;
  std::string description;
  std::optional<std::string> agent;  // the agent that runs it; the caller's (or build) when absent
  std::optional<std::string> model;  // "PROVIDER/MODEL"; the agent's or the default when absent
  bool subtask = false;              // OpenCode runs it as a sub-agent; Switchboard does not
};

// The merged document's `command` object, by name. Errors start with the key path
// ("command.review.template must be a non-empty string"); Config::located adds the file.
Result<std::map<std::string, Command>> parse_commands(const json::object& raw);

// The commands a server has without a config, as OpenCode has them: `init` (write an AGENTS.md
// for the project, what POST /session/{id}/init runs). A config's command of the same name
// replaces one.
const std::map<std::string, Command>& builtin_commands();
// The command `name`: the config's, else the built-in one; nullptr when there is none.
const Command* find_command(const std::map<std::string, Command>& configured,
                            const std::string& name);

// The template with the arguments put in, as OpenCode does: `arguments` is split into words
// (a "double-" or 'single-quoted' run is one word, its quotes dropped); `$N` becomes the Nth word
// (nothing when there are fewer; `$0` nothing), the highest `$N` of the template the Nth word and
// all after it, joined by spaces; `$ARGUMENTS` becomes `arguments` as given. A template with
// neither gets the arguments, when there are any, appended after a blank line.
std::string expand_template(std::string_view template_text, std::string_view arguments);

// The placeholders a template uses, as OpenCode's Command.hints lists them: `$1`, `$2`, ... each
// once, sorted as text (`$10` before `$2`), then `$ARGUMENTS` when present.
std::vector<std::string> template_hints(std::string_view template_text);

}  // namespace sb::config
