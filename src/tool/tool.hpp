#pragma once
// The tool interface of seed 002: an id, a description, a JSON Schema for the input, and
// execute(args, ctx) -> {title, output, metadata, attachments}. Built-in tools, custom tools and
// client tools all implement it; the session processor runs them.
//
// A tool's execute() is a coroutine on the server's io_context. It must not block the thread
// for long: file I/O on small files is fine, subprocesses go through tool/process.hpp.
#include <boost/asio/awaitable.hpp>

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "clienttool/schema.hpp"
#include "clienttool/types.hpp"
#include "util/abort.hpp"
#include "util/error.hpp"
#include "util/json.hpp"

namespace sb::tool {

// A file that a tool changed, as it was before and after: what a session's revert puts back
// (session/revert.hpp). Absent content: the file did not exist (before) or no longer does (after).
struct FileChange {
  std::filesystem::path path;  // absolute
  std::optional<std::string> before;
  std::optional<std::string> after;
};

struct ToolResult {
  std::string title;
  std::string output;
  json::object metadata;
  json::array attachments;  // file parts: {type: "file", mime, url, filename}
  // The tool kept its output within its own limits and told the model how to get the rest
  // (read's offset): the processor's truncation leaves it alone. Cut again, a read of 2,000
  // lines plus its frame lost its last lines and its note, and the model was pointed at a saved
  // copy instead of the file. metadata.truncated then says what the tool said.
  bool bounded = false;
  // The files the call changed, in the order it changed them (edit, write; batch: its calls').
  // Kept by the session, never sent to clients; bash's changes are not known here.
  std::vector<FileChange> file_changes;
};

// What a tool asks the permission system (seed 002's ctx.ask).
struct PermissionRequest {
  std::string permission;             // "bash", "edit", "read", "external_directory", ...
  std::vector<std::string> patterns;  // what exactly: a command, a path
  std::vector<std::string> always;    // patterns that "always" would allow from now on
  json::object metadata;              // shown to the person deciding
};

struct ToolContext {
  std::string session_id;
  std::string message_id;
  std::string call_id;
  std::string agent;
  std::filesystem::path directory;  // the project directory; relative paths resolve here
  std::filesystem::path data_dir;   // the server's data directory
  std::shared_ptr<AbortSignal> abort = AbortSignal::create();

  // Resolves when allowed; an error (Forbidden, with a message for the model) when denied or
  // rejected. Unset means "allow everything" (tests).
  std::function<boost::asio::awaitable<Result<void>>(PermissionRequest)> ask;
  // Progress while running: a new title and/or metadata for the tool part.
  std::function<void(std::optional<std::string> title, json::object metadata)> metadata;
  // The call now waits for a person (true) or no longer does (false): the session's status
  // shows awaiting-input meanwhile.
  std::function<void(bool)> awaiting_person;
  // A client tool's call is pending with its client: what the session stores so that the wait
  // outlives a restart (design.md decision 5). Unset: not stored.
  std::function<void(const clienttool::WaitingCall&)> waiting;
  // A person is asked a question under `id` for this call: stored, so that after a restart the
  // call runs again and asks again under that id (`question_id`), where the person's answer to
  // it is taken. Unset: not stored.
  std::function<void(const std::string& id)> asking;
  std::string question_id;  // the id to ask under; empty: a new one

  boost::asio::awaitable<Result<void>> request_permission(PermissionRequest request) {
    if (!ask) co_return Result<void>{};
    co_return co_await ask(std::move(request));
  }
  void report(std::optional<std::string> title, json::object meta) {
    if (metadata) metadata(std::move(title), std::move(meta));
  }
  void set_awaiting_person(bool waiting) {
    if (awaiting_person) awaiting_person(waiting);
  }
};

class Tool {
 public:
  virtual ~Tool() = default;
  virtual const std::string& id() const = 0;
  virtual const std::string& description() const = 0;
  virtual const json::object& parameters() const = 0;  // JSON Schema of the input object
  // parameters(), compiled once when the tool is made: every call's input is checked with it.
  virtual const clienttool::CompiledSchema& schema() const = 0;
  // Errors are values: Result::error().message is what the model sees.
  virtual boost::asio::awaitable<Result<ToolResult>> execute(json::object args,
                                                             ToolContext& ctx) = 0;
};

using ToolPtr = std::shared_ptr<Tool>;

// Base for tools whose id, description and schema are fixed at construction.
class BasicTool : public Tool {
 public:
  // `schema_json` is the parameters schema as JSON text; it must parse and compile (a
  // programming error otherwise, so it throws).
  BasicTool(std::string id, std::string description, std::string_view schema_json)
      : id_(std::move(id)), description_(std::move(description)) {
    auto doc = parse_json(schema_json);
    if (!doc || !doc->is_object()) throw std::logic_error("bad schema for tool " + id_);
    parameters_ = std::move(doc->get_object());
    auto compiled = clienttool::CompiledSchema::compile(parameters_);
    if (!compiled)
      throw std::logic_error("bad schema for tool " + id_ + ": " + compiled.error().message);
    schema_ = std::move(*compiled);
  }
  const std::string& id() const override { return id_; }
  const std::string& description() const override { return description_; }
  const json::object& parameters() const override { return parameters_; }
  const clienttool::CompiledSchema& schema() const override { return *schema_; }

 private:
  std::string id_;
  std::string description_;
  json::object parameters_;
  std::shared_ptr<const clienttool::CompiledSchema> schema_;
};

}  // namespace sb::tool
