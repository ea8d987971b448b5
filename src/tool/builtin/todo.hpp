#pragma once
// The todo tools (OpenCode's todowrite / todoread): the model keeps a task list per session.
// todowrite replaces the whole list and publishes `todo.updated` {sessionID, todos}; todoread
// returns it. Both answer with the list as JSON and the title "N todos" (N = not completed).
#include <boost/asio/awaitable.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bus/event_bus.hpp"
#include "tool/tool.hpp"
#include "util/error.hpp"
#include "util/json.hpp"

namespace sb::tool {

struct Todo {
  std::string content;   // what to do
  std::string status;    // pending | in_progress | completed | cancelled
  std::string priority;  // high | medium | low
  std::string id;        // the model's own identifier

  bool operator==(const Todo&) const = default;
};

json::object to_json(const Todo& todo);
json::array to_json(const std::vector<Todo>& todos);
// Checks every field (required, and status/priority among their values); errors name the item
// ("todos[2].status must be one of pending, in_progress, completed, cancelled, got \"done\"").
Result<std::vector<Todo>> todos_from_json(const json::array& items);

// Where the lists live. Called from the server's executor only; coroutines, so that a store
// that answers over the network (session::StoredTodos on PostgreSQL) does not hold the loop up.
class TodoStore {
 public:
  virtual ~TodoStore() = default;
  // The session's list; empty when it never had one.
  virtual boost::asio::awaitable<Result<std::vector<Todo>>> get(std::string session_id) = 0;
  // Replaces the session's list.
  virtual boost::asio::awaitable<Result<void>> set(std::string session_id,
                                                   std::vector<Todo> todos) = 0;
};

// Lists in memory, lost on restart. Not thread-safe: use from the server's executor only.
class InMemoryTodoStore : public TodoStore {
 public:
  boost::asio::awaitable<Result<std::vector<Todo>>> get(std::string session_id) override;
  boost::asio::awaitable<Result<void>> set(std::string session_id,
                                           std::vector<Todo> todos) override;

 private:
  std::map<std::string, std::vector<Todo>, std::less<>> lists_;
};

ToolPtr make_todowrite_tool(std::shared_ptr<TodoStore> store,
                            std::shared_ptr<bus::EventBus> bus = nullptr);
ToolPtr make_todoread_tool(std::shared_ptr<TodoStore> store);

}  // namespace sb::tool
