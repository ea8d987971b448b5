#pragma once
// ConversationCache: each session's conversation as the model sees it, kept in memory so that a
// turn does not read the whole session back from the store; read from the store on a session's
// first turn after a start (or after it was dropped). Not thread-safe: use from the server's
// executor only.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "session/store.hpp"
#include "session/turn.hpp"

namespace sb::session {

// One stored message as the model sees it, appended to `out`.
void append_history(const MessageWithParts& m, std::vector<provider::ModelMessage>& out);

class ConversationCache {
 public:
  // `status` tells which sessions run a turn: their conversations are never dropped (a running
  // turn holds its conversation and keeps it current).
  ConversationCache(std::shared_ptr<SessionStore> store, std::shared_ptr<const StatusBoard> status)
      : store_(std::move(store)), status_(std::move(status)) {}

  // The session's conversation, loaded from the store when it is not in memory.
  Result<std::shared_ptr<Conversation>> get(const std::string& session_id);
  void forget(const std::string& session_id);

 private:
  std::shared_ptr<SessionStore> store_;
  std::shared_ptr<const StatusBoard> status_;
  std::map<std::string, std::shared_ptr<Conversation>> conversations_;
  std::uint64_t uses_ = 0;
};

}  // namespace sb::session
