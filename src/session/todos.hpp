#pragma once
// The todo lists of the todowrite / todoread tools, kept in the session store: they survive a
// restart and are deleted with their session.
#include <memory>
#include <string>
#include <vector>

#include "session/store.hpp"
#include "tool/builtin/todo.hpp"

namespace sb::session {

// Thread-safe as the store is.
class StoredTodos : public tool::TodoStore {
 public:
  explicit StoredTodos(std::shared_ptr<SessionStore> store) : store_(std::move(store)) {}
  boost::asio::awaitable<Result<std::vector<tool::Todo>>> get(std::string session_id) override;
  boost::asio::awaitable<Result<void>> set(std::string session_id,
                                           std::vector<tool::Todo> todos) override;

 private:
  std::shared_ptr<SessionStore> store_;
};

}  // namespace sb::session
