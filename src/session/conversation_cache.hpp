#pragma once
// ConversationCache: each session's conversation as the model sees it, kept in memory so that a
// turn does not read the whole session back from the store; read from the store on a session's
// first turn after a start (or after it was dropped). Not thread-safe: use from the server's
// executor only.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "session/store.hpp"
#include "session/turn.hpp"

namespace sb::session {

// One stored message as the model sees it, appended to `out`. A user message that asked for a
// summary (a compaction part) reads as kSummaryQuestion: the summary that answers it follows.
void append_history(const MessageWithParts& m, std::vector<provider::ModelMessage>& out);
inline constexpr std::string_view kSummaryQuestion = "What did we do so far?";

// Where the model's view of `stored` (a session's messages, oldest first) starts: at the user
// message of the last summary that succeeded (OpenCode's compaction), else at the first message.
std::size_t history_start(const std::vector<MessageWithParts>& stored);

class ConversationCache {
 public:
  // `status` tells which sessions run a turn: their conversations are never dropped (a running
  // turn holds its conversation and keeps it current).
  ConversationCache(boost::asio::any_io_executor executor, std::shared_ptr<SessionStore> store,
                    std::shared_ptr<const StatusBoard> status)
      : executor_(std::move(executor)), store_(std::move(store)), status_(std::move(status)) {}

  // The session's conversation, loaded from the store when it is not in memory. On a store that
  // other nodes share, one kept while no turn ran here is used only when the store's version of
  // the session's messages is still the one it was kept at (stored()).
  boost::asio::awaitable<Result<std::shared_ptr<Conversation>>> get(std::string session_id);
  void forget(const std::string& session_id);
  // A shared store: the session's turn ended here and all of it is stored; the conversation is
  // kept with the store's version (dropped when that cannot be read). The version is read by a
  // store call made now, ahead of later ones (the claim given back after it); until it arrives
  // the conversation counts as unknown.
  void stored(const std::string& session_id);

 private:
  boost::asio::any_io_executor executor_;
  std::shared_ptr<SessionStore> store_;
  std::shared_ptr<const StatusBoard> status_;
  std::map<std::string, std::shared_ptr<Conversation>> conversations_;
  std::uint64_t uses_ = 0;
};

}  // namespace sb::session
