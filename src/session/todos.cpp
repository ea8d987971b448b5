#include "session/todos.hpp"

namespace sb::session {

Result<std::vector<tool::Todo>> StoredTodos::get(const std::string& session_id) {
  auto text = store_->get_todos(session_id);
  if (!text) return text.error();
  if (text->empty()) return std::vector<tool::Todo>{};
  auto doc = parse_json(*text);
  if (!doc || !doc->is_array())
    return make_error(ErrorCode::Internal, "corrupt todo list in the session store");
  return tool::todos_from_json(doc->get_array());
}

Result<void> StoredTodos::set(const std::string& session_id, std::vector<tool::Todo> todos) {
  return store_->put_todos(session_id, json::serialize(tool::to_json(todos)));
}

}  // namespace sb::session
