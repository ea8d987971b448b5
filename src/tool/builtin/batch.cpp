#include "tool/builtin/batch.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/this_coro.hpp>

#include <algorithm>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "tool/arguments.hpp"
#include "tool/truncate.hpp"
#include "util/log.hpp"
#include "util/text.hpp"
#include "util/wait_group.hpp"

namespace sb::tool {

namespace asio = boost::asio;

namespace {

constexpr std::string_view kDescription =
    R"txt(Runs several independent tool calls at once and returns all of their results.

Use it when you already know a set of calls that do not depend on each other: reading several files, searching for several patterns, running independent commands. They run concurrently, so the batch takes as long as its slowest call instead of the sum of all.

Usage notes:
- 1 to 25 calls per batch, each {"tool": "<tool name>", "parameters": {<that tool's parameters>}}.
- Calls run in parallel and in no particular order: do not batch calls where one needs the result of another (edit after read of the same file, a command after the one that creates its input).
- Only the server's own tools can be batched. "batch" itself cannot be nested, and tools provided by connected clients or external servers must be called directly.
- A call that fails does not stop the others; each result says whether it succeeded.
- The results come back in the order of the calls.)txt";

constexpr std::string_view kSchema = R"json({
  "type": "object",
  "properties": {
    "tool_calls": {
      "type": "array",
      "description": "The tool calls to run in parallel (1 to 25)",
      "minItems": 1,
      "maxItems": 25,
      "items": {
        "type": "object",
        "properties": {
          "tool": {"type": "string", "description": "The name of the tool to call"},
          "parameters": {"type": "object", "description": "The parameters of that tool call"}
        },
        "required": ["tool"]
      }
    }
  },
  "required": ["tool_calls"]
})json";

enum class Status { Pending, Running, Completed, Error };

std::string_view status_name(Status s) {
  switch (s) {
    case Status::Pending:
      return "pending";
    case Status::Running:
      return "running";
    case Status::Completed:
      return "completed";
    case Status::Error:
      return "error";
  }
  return "error";
}

struct CallOutcome {
  std::string tool;
  Status status = Status::Pending;
  std::string title;
  std::string output;
  std::string error;
  json::array attachments;
};

// What the concurrent calls of one batch share. Everything runs on the batch's executor (the
// calls are spawned there, and tools report progress on their caller's executor), so no lock.
struct BatchState {
  explicit BatchState(asio::any_io_executor executor) : group(std::move(executor)) {}

  std::vector<CallOutcome> calls;
  // The calls' file changes in the order they were made (the calls run concurrently).
  std::vector<FileChange> file_changes;
  // The batch's own ctx.metadata, copied: a late progress report must not touch a ToolContext
  // that has gone.
  std::function<void(std::optional<std::string>, json::object)> report;
  WaitGroup group;

  json::array details() const {
    json::array out;
    for (const auto& c : calls) {
      json::object d{{"tool", c.tool}, {"status", status_name(c.status)}, {"title", c.title}};
      if (c.status == Status::Error) d["error"] = c.error;
      out.push_back(std::move(d));
    }
    return out;
  }
  void publish() const {
    if (report) report(std::nullopt, json::object{{"details", details()}});
  }
};

asio::awaitable<void> run_call(std::shared_ptr<BatchState> state, std::size_t index, ToolPtr tool,
                               json::object args, std::shared_ptr<ToolContext> ctx) {
  state->calls[index].status = Status::Running;
  state->publish();
  auto result = co_await tool->execute(std::move(args), *ctx);
  CallOutcome& call = state->calls[index];
  if (result) {
    call.status = Status::Completed;
    call.title = std::move(result->title);
    call.output = std::move(result->output);
    call.attachments = std::move(result->attachments);
    for (auto& change : result->file_changes)
      state->file_changes.push_back(std::move(change));
  } else {
    call.status = Status::Error;
    call.error = std::move(result.error().message);
  }
}

// The processor cuts a tool's output at 2000 lines / 50 KB. Cutting the batch's output as a
// whole would let one large result hide every result after it; so each call gets an equal share
// of that budget (less room for the result headers), and a call's output over its share keeps
// its head, with the full text saved to a file the model can read, as the processor would do.
// Without a data directory (tests, embedding) there is nowhere to save: outputs stay whole.
// Returns whether a call's output was cut.
bool share_output_budget(BatchState& state, const ToolContext& ctx) {
  if (ctx.data_dir.empty()) return false;
  std::size_t n = state.calls.size();
  TruncateLimits whole;
  TruncateOptions options{saved_outputs_dir(ctx.data_dir)};
  options.limits.max_bytes =
      std::max<std::size_t>(1024, whole.max_bytes > n * 512 ? (whole.max_bytes - n * 512) / n : 0);
  options.limits.max_lines =
      std::max<std::size_t>(20, whole.max_lines > n * 10 ? (whole.max_lines - n * 10) / n : 0);
  bool any_cut = false;
  for (auto& call : state.calls) {
    if (call.status != Status::Completed) continue;
    auto cut = truncate_output(std::move(call.output), ctx.session_id, call.tool, options);
    call.output = std::move(cut.content);
    any_cut = any_cut || cut.truncated;
  }
  return any_cut;
}

// A title goes into a result's header line: one line, and short (a tool may put its whole input
// in it), cut at a UTF-8 character boundary.
std::string quote_attribute(std::string_view s) {
  constexpr std::size_t kMaxTitle = 200;
  s = utf8_prefix(s, kMaxTitle);
  std::string out;
  for (char c : s) {
    if (c == '"')
      out += "&quot;";
    else if (c == '\n')
      out += ' ';
    else
      out += c;
  }
  return out;
}

class BatchTool final : public BasicTool {
 public:
  explicit BatchTool(std::weak_ptr<ToolRegistry> registry)
      : BasicTool("batch", std::string(kDescription), kSchema), registry_(std::move(registry)) {}

  asio::awaitable<Result<ToolResult>> execute(json::object args, ToolContext& ctx) override {
    auto list = get_array(args, "tool_calls");
    if (!list) co_return list.error();
    if (!*list || (*list)->empty())
      co_return make_error(ErrorCode::InvalidRequest,
                           "tool_calls must hold at least one call: [{\"tool\": ..., "
                           "\"parameters\": {...}}]");
    const json::array& items = **list;
    if (items.size() > kMaxBatchCalls)
      co_return make_error(ErrorCode::InvalidRequest,
                           "A batch holds at most " + std::to_string(kMaxBatchCalls) +
                               " tool calls, got " + std::to_string(items.size()) +
                               "; split them into several batches.");
    auto registry = registry_.lock();
    if (!registry) co_return make_error(ErrorCode::Unavailable, "the tool registry is gone");
    if (ctx.abort && ctx.abort->aborted()) co_return make_error(ErrorCode::Unavailable, "aborted");

    auto executor = co_await asio::this_coro::executor;
    auto state = std::make_shared<BatchState>(executor);
    state->calls.resize(items.size());
    state->report = ctx.metadata;

    // Only the server's tools: client tools live in another process and MCP tools are not
    // ours to run in parallel; unknown ids get the list of what exists.
    std::vector<std::string> ids = registry->ids();
    std::string available;
    for (const auto& id : ids) {
      if (id == "batch" || id == "invalid") continue;
      available += (available.empty() ? "" : ", ") + id;
    }

    struct Ready {
      std::size_t index;
      ToolPtr tool;
      json::object args;
    };
    std::vector<Ready> ready;
    for (std::size_t i = 0; i < items.size(); ++i) {
      CallOutcome& call = state->calls[i];
      auto fail = [&](std::string message) {
        call.status = Status::Error;
        call.error = std::move(message);
      };
      std::string where = "tool_calls[" + std::to_string(i) + "]";
      if (!items[i].is_object()) {
        fail(where + " must be an object {\"tool\": ..., \"parameters\": {...}}");
        continue;
      }
      const json::object& item = items[i].get_object();
      auto name = require_string(item, "tool", where);
      if (!name) {
        fail(name.error().message);
        continue;
      }
      call.tool = *name;
      json::value parameters = json::object{};
      if (auto it = item.find("parameters"); it != item.end() && !it->value().is_null())
        parameters = it->value();
      if (call.tool == "batch") {
        fail("Tool 'batch' is not allowed in batch. Disallowed tools: batch");
        continue;
      }
      ToolPtr tool;
      if (std::find(ids.begin(), ids.end(), call.tool) != ids.end())
        tool = registry->find(call.tool, ctx.session_id);
      if (!tool) {
        fail("Tool '" + call.tool +
             "' not in registry. External tools (MCP, environment) cannot be batched - call "
             "them directly. Available tools: " +
             available);
        continue;
      }
      auto prepared = prepare_arguments(*tool, std::move(parameters));
      if (!prepared) {
        fail(prepared.error().message);
        continue;
      }
      ready.push_back({i, std::move(tool), std::move(*prepared)});
    }

    state->publish();
    for (auto& r : ready) {
      auto sub = std::make_shared<ToolContext>();
      sub->session_id = ctx.session_id;
      sub->message_id = ctx.message_id;
      sub->call_id = ctx.call_id + "_" + std::to_string(r.index + 1);
      sub->agent = ctx.agent;
      sub->directory = ctx.directory;
      sub->data_dir = ctx.data_dir;
      sub->abort = ctx.abort;
      sub->ask = ctx.ask;
      sub->awaiting_person = ctx.awaiting_person;
      // A call's own progress (live output and the like) has no part of its own to go to; its
      // title is what the batch's metadata shows for it.
      sub->metadata = [state, index = r.index](std::optional<std::string> title, json::object) {
        if (!title || state->calls[index].title == *title) return;
        state->calls[index].title = std::move(*title);
        state->publish();
      };
      state->group.add();
      asio::co_spawn(executor,
                     run_call(state, r.index, std::move(r.tool), std::move(r.args), std::move(sub)),
                     [state, index = r.index](std::exception_ptr e) {
                       if (e) {
                         // A tool that throws is a bug in the tool; its call fails, the batch goes
                         // on.
                         CallOutcome& call = state->calls[index];
                         call.status = Status::Error;
                         try {
                           std::rethrow_exception(e);
                         } catch (const std::exception& ex) {
                           call.error = std::string("internal error: ") + ex.what();
                         } catch (...) {
                           call.error = "internal error";
                         }
                         log::error("batch: tool ", call.tool, " threw: ", call.error);
                       }
                       state->publish();
                       state->group.done();
                     });
    }
    co_await state->group.wait();

    std::size_t succeeded = 0;
    for (const auto& c : state->calls)
      if (c.status == Status::Completed) ++succeeded;
    bool cut = share_output_budget(*state, ctx);
    std::size_t failed = state->calls.size() - succeeded;

    ToolResult result;
    result.title = "Batch execution (" + std::to_string(succeeded) + "/" +
                   std::to_string(state->calls.size()) + " successful)";
    if (failed == 0)
      result.output = "All " + std::to_string(succeeded) + " tool calls succeeded.";
    else
      result.output = std::to_string(succeeded) + " of " + std::to_string(state->calls.size()) +
                      " tool calls succeeded; " + std::to_string(failed) + " failed.";
    json::array tools;
    for (std::size_t i = 0; i < state->calls.size(); ++i) {
      CallOutcome& c = state->calls[i];
      tools.push_back(json::string(c.tool));
      bool ok = c.status == Status::Completed;
      result.output += "\n\n<result call=\"" + std::to_string(i + 1) + "\" tool=\"" +
                       quote_attribute(c.tool) + "\" status=\"" + (ok ? "success" : "error") + "\"";
      if (ok && !c.title.empty()) result.output += " title=\"" + quote_attribute(c.title) + "\"";
      result.output += ">\n";
      result.output += ok ? c.output : "Error: " + c.error;
      if (!result.output.empty() && result.output.back() != '\n') result.output += '\n';
      result.output += "</result>";
      for (auto& a : c.attachments)
        result.attachments.push_back(std::move(a));
    }
    result.metadata = json::object{
        {"totalCalls", state->calls.size()}, {"successful", succeeded},     {"failed", failed},
        {"tools", std::move(tools)},         {"details", state->details()}, {"truncated", cut}};
    result.file_changes = std::move(state->file_changes);
    co_return result;
  }

 private:
  std::weak_ptr<ToolRegistry> registry_;
};

}  // namespace

ToolPtr make_batch_tool(std::weak_ptr<ToolRegistry> registry) {
  return std::make_shared<BatchTool>(std::move(registry));
}

}  // namespace sb::tool
