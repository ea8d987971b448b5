#include "tool/builtin/todo.hpp"

#include <algorithm>
#include <array>

namespace sb::tool {

namespace {

using boost::asio::awaitable;

constexpr std::string_view kWriteDescription =
    R"txt(Creates and updates the task list for this session. It helps you plan and track multi-step work, and shows the user how far along you are.

When to use it:
- A task needs three or more distinct steps, or careful planning.
- The user gives several tasks at once (a numbered or comma-separated list), or asks for a todo list.
- New instructions arrive: capture them as todos right away.
- You start a task (mark it in_progress) or finish one (mark it completed, and add any follow-up tasks you found).

When not to use it:
- There is a single, simple task, or the whole job takes fewer than three trivial steps.
- The request is only a question or a conversation, with no work to track.

How:
- Each call replaces the whole list: always send every todo, not only the changed ones.
- status is one of: pending (not started), in_progress (being worked on), completed (done), cancelled (no longer needed).
- Keep exactly one todo in_progress while you work. Mark a todo completed as soon as it is done; do not batch completions.
- priority is high, medium or low. Give each todo a short, specific content and a unique id.)txt";

constexpr std::string_view kWriteSchema = R"json({
  "type": "object",
  "properties": {
    "todos": {
      "type": "array",
      "description": "The updated todo list (the whole list, not only the changes)",
      "items": {
        "type": "object",
        "properties": {
          "content": {"type": "string", "description": "Brief description of the task"},
          "status": {"type": "string",
                     "enum": ["pending", "in_progress", "completed", "cancelled"],
                     "description": "Current status of the task: pending, in_progress, completed, cancelled"},
          "priority": {"type": "string", "enum": ["high", "medium", "low"],
                       "description": "Priority level of the task: high, medium, low"},
          "id": {"type": "string", "description": "Unique identifier for the todo item"}
        },
        "required": ["content", "status", "priority", "id"]
      }
    }
  },
  "required": ["todos"]
})json";

constexpr std::string_view kReadDescription =
    "Returns the current task list of this session (as written with todowrite). Use it to check "
    "what is left to do, for instance at the start of a turn or after a long piece of work.";

constexpr std::string_view kReadSchema = R"json({"type": "object", "properties": {}})json";

constexpr std::array<std::string_view, 4> kStatuses = {"pending", "in_progress", "completed",
                                                       "cancelled"};
constexpr std::array<std::string_view, 3> kPriorities = {"high", "medium", "low"};

template <std::size_t N>
Result<std::string> one_of(const json::object& item, std::string_view key,
                           const std::string& prefix,
                           const std::array<std::string_view, N>& options) {
  auto value = require_string(item, key, prefix);
  if (!value) return value.error();
  if (std::find(options.begin(), options.end(), *value) != options.end()) return *value;
  std::string names;
  for (auto o : options)
    names += (names.empty() ? "" : ", ") + std::string(o);
  return make_error(ErrorCode::InvalidRequest, field_path(prefix, key) + " must be one of " +
                                                   names + ", got \"" + *value + "\"");
}

// JSON with two-space indentation, as OpenCode shows the list (JSON.stringify(x, null, 2)):
// easier for the model and a person to read than one long line.
void pretty(std::string& out, const json::value& v, std::size_t indent) {
  std::string pad(indent + 2, ' ');
  if (v.is_object() && !v.get_object().empty()) {
    out += "{\n";
    bool first = true;
    for (const auto& [key, member] : v.get_object()) {
      if (!first) out += ",\n";
      first = false;
      out += pad + json::serialize(json::value(key)) + ": ";
      pretty(out, member, indent + 2);
    }
    out += "\n" + std::string(indent, ' ') + "}";
  } else if (v.is_array() && !v.get_array().empty()) {
    out += "[\n";
    bool first = true;
    for (const auto& member : v.get_array()) {
      if (!first) out += ",\n";
      first = false;
      out += pad;
      pretty(out, member, indent + 2);
    }
    out += "\n" + std::string(indent, ' ') + "]";
  } else {
    out += json::serialize(v);
  }
}

ToolResult list_result(const std::vector<Todo>& todos) {
  auto open = std::count_if(todos.begin(), todos.end(),
                            [](const Todo& t) { return t.status != "completed"; });
  ToolResult result;
  result.title = std::to_string(open) + " todos";
  json::array list = to_json(todos);
  pretty(result.output, list, 0);
  result.metadata = {{"todos", std::move(list)}};
  return result;
}

class TodoWriteTool final : public BasicTool {
 public:
  TodoWriteTool(std::shared_ptr<TodoStore> store, std::shared_ptr<bus::EventBus> bus)
      : BasicTool("todowrite", std::string(kWriteDescription), kWriteSchema),
        store_(std::move(store)),
        bus_(std::move(bus)) {}

  awaitable<Result<ToolResult>> execute(json::object args, ToolContext& ctx) override {
    auto items = get_array(args, "todos");
    if (!items) co_return items.error();
    if (!*items) co_return make_error(ErrorCode::InvalidRequest, "todos is required");
    auto todos = todos_from_json(**items);
    if (!todos) co_return todos.error();
    std::string session_id = ctx.session_id;
    if (auto stored = co_await store_->set(session_id, *todos); !stored) co_return stored.error();
    if (bus_)
      bus_->publish("todo.updated", {{"sessionID", session_id}, {"todos", to_json(*todos)}});
    co_return list_result(*todos);
  }

 private:
  std::shared_ptr<TodoStore> store_;
  std::shared_ptr<bus::EventBus> bus_;
};

class TodoReadTool final : public BasicTool {
 public:
  explicit TodoReadTool(std::shared_ptr<TodoStore> store)
      : BasicTool("todoread", std::string(kReadDescription), kReadSchema),
        store_(std::move(store)) {}

  awaitable<Result<ToolResult>> execute(json::object, ToolContext& ctx) override {
    auto todos = co_await store_->get(ctx.session_id);
    if (!todos) co_return todos.error();
    co_return list_result(*todos);
  }

 private:
  std::shared_ptr<TodoStore> store_;
};

}  // namespace

json::object to_json(const Todo& todo) {
  return {{"content", todo.content},
          {"status", todo.status},
          {"priority", todo.priority},
          {"id", todo.id}};
}

json::array to_json(const std::vector<Todo>& todos) {
  json::array out;
  out.reserve(todos.size());
  for (const auto& t : todos)
    out.push_back(to_json(t));
  return out;
}

Result<std::vector<Todo>> todos_from_json(const json::array& items) {
  std::vector<Todo> out;
  out.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    std::string prefix = "todos[" + std::to_string(i) + "]";
    if (!items[i].is_object())
      return make_error(ErrorCode::InvalidRequest,
                        prefix + " must be an object, got " + std::string(kind_name(items[i])));
    const json::object& item = items[i].get_object();
    Todo todo;
    auto content = require_string(item, "content", prefix);
    if (!content) return content.error();
    todo.content = std::move(*content);
    auto status = one_of(item, "status", prefix, kStatuses);
    if (!status) return status.error();
    todo.status = std::move(*status);
    auto priority = one_of(item, "priority", prefix, kPriorities);
    if (!priority) return priority.error();
    todo.priority = std::move(*priority);
    auto id = require_string(item, "id", prefix);
    if (!id) return id.error();
    todo.id = std::move(*id);
    out.push_back(std::move(todo));
  }
  return out;
}

awaitable<Result<std::vector<Todo>>> InMemoryTodoStore::get(std::string session_id) {
  auto it = lists_.find(session_id);
  if (it == lists_.end()) co_return std::vector<Todo>{};
  co_return it->second;
}

awaitable<Result<void>> InMemoryTodoStore::set(std::string session_id, std::vector<Todo> todos) {
  // An empty list is the same as none; dropping it keeps ended sessions from piling up.
  if (todos.empty())
    lists_.erase(session_id);
  else
    lists_[session_id] = std::move(todos);
  co_return Result<void>{};
}

ToolPtr make_todowrite_tool(std::shared_ptr<TodoStore> store, std::shared_ptr<bus::EventBus> bus) {
  return std::make_shared<TodoWriteTool>(std::move(store), std::move(bus));
}

ToolPtr make_todoread_tool(std::shared_ptr<TodoStore> store) {
  return std::make_shared<TodoReadTool>(std::move(store));
}

}  // namespace sb::tool
