#include "session/todos.hpp"

namespace sb::session {

boost::asio::awaitable<Result<std::vector<tool::Todo>>> StoredTodos::get(std::string session_id) {
  auto text = co_await store_->call(&SessionStore::get_todos, session_id);
  if (!text) co_return text.error();
  if (text->empty()) co_return std::vector<tool::Todo>{};
  auto doc = parse_json(*text);
  if (!doc || !doc->is_array())
    co_return make_error(ErrorCode::Internal, "corrupt todo list in the session store");
  co_return tool::todos_from_json(doc->get_array());
}

boost::asio::awaitable<Result<void>> StoredTodos::set(std::string session_id,
                                                      std::vector<tool::Todo> todos) {
  std::string text = json::serialize(tool::to_json(todos));
  co_return co_await store_->call(&SessionStore::put_todos, session_id, std::move(text));
}

}  // namespace sb::session
