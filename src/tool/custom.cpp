#include "tool/custom.hpp"

#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/this_coro.hpp>

#include <algorithm>
#include <cctype>
#include <map>
#include <memory>
#include <optional>
#include <system_error>

#include "clienttool/schema.hpp"
#include "tool/process.hpp"
#include "tool/process_groups.hpp"
#include "util/text.hpp"
#include "util/wait_group.hpp"

namespace sb::tool {

namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

// Error messages quote what a program wrote; a runaway one must not flood the log or the model.
constexpr std::size_t kMaxQuoted = 4000;

std::string quoted_output(std::string_view text) {
  text = trim(text);
  std::string out = repair_utf8(text.substr(0, kMaxQuoted));
  if (text.size() > kMaxQuoted) out += " [...]";
  return out;
}

std::string seconds_text(std::chrono::milliseconds ms) {
  if (ms.count() % 1000 == 0) return std::to_string(ms.count() / 1000) + " s";
  return std::to_string(ms.count()) + " ms";
}

// How a program ended, when it did not end well; nullopt when it exited with 0.
std::optional<std::string> failure(const ProcessResult& run, std::chrono::milliseconds timeout) {
  if (run.timed_out)
    return "timed out after " + seconds_text(timeout) +
           " and was killed, together with every process it started";
  if (run.signal) return "was killed by " + signal_name(*run.signal);
  if (run.exit_code && *run.exit_code != 0)
    return "failed with exit code " + std::to_string(*run.exit_code);
  if (!run.exit_code) return "ended without an exit code";
  return std::nullopt;
}

// Object schemas without "type" or "properties" are completed: model APIs want both.
struct Parameters {
  json::object schema;
  std::shared_ptr<const clienttool::CompiledSchema> compiled;
};
Result<Parameters> normalize_parameters(const json::value* given) {
  json::object schema;
  if (given && !given->is_null()) {
    if (!given->is_object())
      return make_error(ErrorCode::InvalidRequest, "parameters must be a JSON Schema object, got " +
                                                       std::string(kind_name(*given)));
    schema = given->get_object();
  }
  if (!schema.contains("type")) schema["type"] = "object";
  if (!schema.contains("properties")) schema["properties"] = json::object{};
  auto compiled = clienttool::CompiledSchema::compile(schema);
  if (!compiled)
    return make_error(ErrorCode::InvalidRequest, "parameters " + compiled.error().message);
  return Parameters{std::move(schema), std::move(*compiled)};
}

Result<CustomToolDefinition> parse_definition(std::string_view basename, const std::string& name,
                                              const json::value& value) {
  std::string where = name == "default" ? std::string(basename) : "\"" + name + "\"";
  if (!value.is_object())
    return make_error(ErrorCode::InvalidRequest, "the definition of " + where +
                                                     " must be an object {\"description\", "
                                                     "\"parameters\"}, got " +
                                                     std::string(kind_name(value)));
  const json::object& def = value.get_object();
  auto description = get_string(def, "description");
  if (!description || !*description || (*description)->empty())
    return make_error(ErrorCode::InvalidRequest,
                      "the definition of " + where + " has no description (a non-empty string)");
  CustomToolDefinition out;
  out.name = name;
  out.id = name == "default" ? std::string(basename) : std::string(basename) + "_" + name;
  if (!valid_tool_id(out.id))
    return make_error(
        ErrorCode::InvalidRequest,
        "\"" + out.id + "\" is not a valid tool id (1 to 64 letters, digits, _ or -)");
  out.description = std::move(**description);
  auto it = def.find("parameters");
  auto parameters = normalize_parameters(it == def.end() ? nullptr : &it->value());
  if (!parameters)
    return make_error(ErrorCode::InvalidRequest,
                      "the " + out.id + " tool's " + parameters.error().message);
  out.parameters = std::move(parameters->schema);
  out.schema = std::move(parameters->compiled);
  return out;
}

class CustomTool final : public Tool {
 public:
  CustomTool(fs::path executable, CustomToolDefinition def, CustomToolOptions options)
      : executable_(std::move(executable)), def_(std::move(def)), o_(options) {}

  const std::string& id() const override { return def_.id; }
  const std::string& description() const override { return def_.description; }
  const json::object& parameters() const override { return def_.parameters; }
  const clienttool::CompiledSchema& schema() const override { return *def_.schema; }

  asio::awaitable<Result<ToolResult>> execute(json::object args, ToolContext& ctx) override {
    json::object request{{"args", std::move(args)},     {"sessionID", ctx.session_id},
                         {"messageID", ctx.message_id}, {"callID", ctx.call_id},
                         {"agent", ctx.agent},          {"directory", ctx.directory.string()}};
    ProcessOptions p;
    p.argv = {executable_.string(), def_.name};
    p.cwd = ctx.directory;
    p.stdin_text = json::serialize(request);
    p.timeout = o_.call_timeout;
    p.abort = ctx.abort;
    p.mode = OutputMode::Separate;
    p.max_output = o_.max_output;
    p.kill_grace = o_.kill_grace;
    // What the tool starts in its group is stopped at the next start if the server dies first.
    if (!ctx.data_dir.empty()) p.group_record_dir = process_group_dir(ctx.data_dir);
    auto run = co_await run_process(std::move(p));
    if (!run)
      co_return make_error(run.error().code,
                           "custom tool " + def_.id + " could not start: " + run.error().message);
    if (run->aborted) co_return make_error(ErrorCode::Unavailable, "aborted");
    if (auto failed = failure(*run, o_.call_timeout)) {
      std::string said = quoted_output(run->error_output);
      if (said.empty()) said = quoted_output(run->output);
      co_return make_error(
          run->timed_out ? ErrorCode::Timeout : ErrorCode::InvalidRequest,
          "custom tool " + def_.id + " " + *failed + (said.empty() ? std::string() : ": " + said));
    }

    ToolResult result;  // empty title unless the tool gives one (seed 004's plugin tools)
    // A JSON object with a string "output" is a structured answer; anything else is the output
    // itself, so that a tool may simply print its result (JSON data included).
    std::optional<json::value> doc;
    std::string_view stdout_text = run->output;
    auto first = stdout_text.find_first_not_of(" \t\r\n");
    if (!run->truncated && first != std::string_view::npos && stdout_text[first] == '{') {
      if (auto parsed = parse_json(stdout_text); parsed && parsed->is_object()) doc = *parsed;
    }
    const json::object* answer = doc ? &doc->get_object() : nullptr;
    if (answer && answer->contains("error") && !answer->contains("output")) {
      auto message = get_string(*answer, "error");
      if (message && *message)
        co_return make_error(ErrorCode::InvalidRequest,
                             "custom tool " + def_.id + ": " + repair_utf8(**message));
    }
    if (answer && answer->contains("output")) {
      auto output = get_string(*answer, "output");
      auto title = get_string(*answer, "title");
      auto metadata = get_object(*answer, "metadata");
      std::optional<Error> bad;
      if (!output)
        bad = output.error();
      else if (!title)
        bad = title.error();
      else if (!metadata)
        bad = metadata.error();
      if (bad)
        co_return make_error(
            ErrorCode::InvalidRequest,
            "custom tool " + def_.id + " answered with a bad result: " + bad->message);
      result.output = repair_utf8(output->value_or(""));
      result.title = repair_utf8(title->value_or(""));
      if (*metadata) result.metadata = **metadata;
    } else {
      result.output = repair_utf8(run->output);
      if (run->truncated)
        result.output +=
            "\n\n(Output exceeded " + std::to_string(o_.max_output) + " bytes; the remaining " +
            std::to_string(run->output_bytes - run->output.size()) + " bytes were discarded.)";
    }
    co_return result;
  }

 private:
  fs::path executable_;
  CustomToolDefinition def_;
  CustomToolOptions o_;
};

// What one file provided.
struct FileLoad {
  fs::path path;
  std::vector<CustomToolDefinition> definitions;
  std::vector<std::string> warnings;
};

asio::awaitable<void> describe_file(FileLoad* file, CustomToolOptions options) {
  const std::string shown = file->path.string();
  ProcessOptions p;
  p.argv = {file->path.string(), "--describe"};
  p.cwd = file->path.parent_path();
  p.timeout = options.describe_timeout;
  p.mode = OutputMode::Separate;
  p.max_output = 1024 * 1024;  // a description is a few kilobytes
  p.kill_grace = options.kill_grace;
  auto run = co_await run_process(std::move(p));
  if (!run) {
    file->warnings.push_back(shown + ": cannot run it: " + run.error().message + "; skipped");
    co_return;
  }
  if (auto failed = failure(*run, options.describe_timeout)) {
    std::string said = quoted_output(run->error_output);
    file->warnings.push_back(shown + " --describe " + *failed +
                             (said.empty() ? std::string() : ": " + said) + "; skipped");
    co_return;
  }
  if (run->truncated) {
    file->warnings.push_back(shown + " --describe printed more than 1 MiB; skipped");
    co_return;
  }
  std::vector<std::string> warnings;
  auto defs = parse_custom_tool_description(file->path.stem().string(), run->output, warnings);
  for (auto& w : warnings)
    file->warnings.push_back(shown + ": " + w + "; skipped");
  if (!defs) {
    file->warnings.push_back(shown + ": " + defs.error().message + "; skipped");
    co_return;
  }
  file->definitions = std::move(*defs);
}

bool skipped_silently(const std::string& name) {
  // Hidden files (editor swap files, .DS_Store) and backups are never tools.
  return name.empty() || name.front() == '.' || name.back() == '~';
}

bool documentation(const fs::path& path) {
  std::string ext = ascii_lower(path.extension().string());
  return ext == ".md" || ext == ".txt" || ext == ".json";
}

// The executables of one directory, sorted by name; the rest is warned about or ignored.
std::vector<fs::path> executables_in(const fs::path& dir, std::vector<std::string>& warnings) {
  std::vector<fs::path> out;
  std::error_code ec;
  auto status = fs::status(dir, ec);
  if (!fs::exists(status)) return out;
  if (!fs::is_directory(status)) {
    warnings.push_back(dir.string() + " is not a directory; no custom tools read from it");
    return out;
  }
  fs::directory_iterator it(dir, ec);
  if (ec) {
    warnings.push_back("cannot read " + dir.string() + ": " + ec.message());
    return out;
  }
  std::vector<fs::path> entries;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) {
      warnings.push_back("cannot read " + dir.string() + ": " + ec.message());
      break;
    }
    entries.push_back(it->path());
  }
  std::sort(entries.begin(), entries.end());
  for (const auto& path : entries) {
    if (skipped_silently(path.filename().string())) continue;
    std::error_code sec;
    if (!fs::is_regular_file(fs::status(path, sec))) continue;  // symlinks are followed
    if (::access(path.c_str(), X_OK) != 0) {
      if (!documentation(path))
        warnings.push_back(path.string() +
                           " is not executable (chmod +x makes it a tool provider); skipped");
      continue;
    }
    out.push_back(path);
  }
  return out;
}

}  // namespace

bool valid_tool_id(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

std::vector<fs::path> custom_tool_directories(const fs::path& user_config_dir,
                                              const fs::path& project_dir) {
  std::vector<fs::path> out;
  for (const fs::path& base :
       {user_config_dir, project_dir.empty() ? fs::path() : project_dir / ".switchboard"}) {
    if (base.empty()) continue;
    out.push_back(base / "tool");
    out.push_back(base / "tools");
  }
  return out;
}

Result<std::vector<CustomToolDefinition>> parse_custom_tool_description(
    std::string_view basename, std::string_view text, std::vector<std::string>& warnings) {
  auto doc = parse_json(text);
  if (!doc)
    return make_error(ErrorCode::InvalidRequest,
                      "--describe did not print JSON (" + doc.error().message + ")");
  if (!doc->is_object())
    return make_error(ErrorCode::InvalidRequest,
                      "--describe must print a JSON object, got " + std::string(kind_name(*doc)));
  const json::object& obj = doc->get_object();
  std::vector<CustomToolDefinition> out;
  // A string "description" at the top marks a single definition; in an object of named
  // definitions every value is an object, so the two cannot be confused.
  if (auto it = obj.find("description"); it != obj.end() && it->value().is_string()) {
    auto def = parse_definition(basename, "default", *doc);
    if (!def) return def.error();
    out.push_back(std::move(*def));
    return out;
  }
  for (const auto& [key, value] : obj) {
    std::string name(key);
    if (name != "default" && !valid_tool_id(name)) {
      warnings.push_back("the tool name \"" + name +
                         "\" is not valid (letters, digits, _ or - only)");
      continue;
    }
    auto def = parse_definition(basename, name, value);
    if (!def) {
      warnings.push_back(def.error().message);
      continue;
    }
    out.push_back(std::move(*def));
  }
  if (out.empty() && warnings.empty())
    return make_error(ErrorCode::InvalidRequest,
                      "--describe printed no tool definitions (expected {\"description\", "
                      "\"parameters\"} or {\"<name>\": {\"description\", \"parameters\"}})");
  return out;
}

ToolPtr make_custom_tool(fs::path executable, CustomToolDefinition definition,
                         CustomToolOptions options) {
  return std::make_shared<CustomTool>(std::move(executable), std::move(definition), options);
}

asio::awaitable<CustomToolLoad> load_custom_tools(std::vector<fs::path> dirs,
                                                  CustomToolOptions options) {
  CustomToolLoad out;
  // unique_ptr: the describing coroutines hold pointers to their FileLoad.
  std::vector<std::unique_ptr<FileLoad>> files;
  for (const auto& dir : dirs)
    for (auto& path : executables_in(dir, out.warnings)) {
      files.push_back(std::make_unique<FileLoad>());
      files.back()->path = std::move(path);
    }

  auto executor = co_await asio::this_coro::executor;
  // The describing coroutines run concurrently (a slow file costs its own timeout, not the sum
  // of all); their handlers run while this frame waits on the group.
  auto group = std::make_shared<WaitGroup>(executor);
  for (auto& file : files) {
    group->add();
    FileLoad* f = file.get();
    asio::co_spawn(executor, describe_file(f, options), [group, f](std::exception_ptr e) {
      if (e) {
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& ex) {
          f->warnings.push_back(f->path.string() + ": " + ex.what() + "; skipped");
        } catch (...) {
          f->warnings.push_back(f->path.string() + ": unknown error; skipped");
        }
      }
      group->done();
    });
  }
  co_await group->wait();

  std::map<std::string, std::pair<std::size_t, fs::path>> by_id;  // id -> index in out.tools
  for (auto& file : files) {
    for (auto& w : file->warnings)
      out.warnings.push_back(std::move(w));
    for (auto& def : file->definitions) {
      std::string id = def.id;
      ToolPtr tool = make_custom_tool(file->path, std::move(def), options);
      if (auto it = by_id.find(id); it != by_id.end()) {
        out.warnings.push_back("custom tool " + id + " of " + file->path.string() +
                               " replaces the one of " + it->second.second.string());
        out.tools[it->second.first] = std::move(tool);
        out.files[it->second.first] = file->path;
        it->second.second = file->path;
        continue;
      }
      by_id.emplace(id, std::make_pair(out.tools.size(), file->path));
      out.tools.push_back(std::move(tool));
      out.files.push_back(file->path);
    }
  }
  co_return out;
}

CustomToolLoad load_custom_tools_sync(std::vector<fs::path> dirs, CustomToolOptions options) {
  asio::io_context io(1);
  CustomToolLoad out;
  asio::co_spawn(io, load_custom_tools(std::move(dirs), options),
                 [&out](std::exception_ptr e, CustomToolLoad loaded) {
                   if (!e) {
                     out = std::move(loaded);
                     return;
                   }
                   try {
                     std::rethrow_exception(e);
                   } catch (const std::exception& ex) {
                     out.warnings.push_back(std::string("custom tools not loaded: ") + ex.what());
                   } catch (...) {
                     out.warnings.push_back("custom tools not loaded: unknown error");
                   }
                 });
  io.run();
  return out;
}

}  // namespace sb::tool
