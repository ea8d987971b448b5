#include "session/conversation_cache.hpp"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

#include <algorithm>

#include "session/files.hpp"

namespace sb::session {

namespace asio = boost::asio;

namespace {
// Idle conversations kept in memory; the least recently used beyond this are dropped (and
// read from the store again when their session has another turn).
constexpr std::size_t kConversationsKept = 64;
}  // namespace

void append_history(const MessageWithParts& m, std::vector<provider::ModelMessage>& out) {
  std::string text;
  for (const auto& p : m.parts)
    if (p.type == Part::Type::Text) text += (text.empty() ? "" : "\n") + p.text;
  if (m.info.role == MessageInfo::Role::User) {
    bool asks_summary = std::any_of(m.parts.begin(), m.parts.end(),
                                    [](const Part& p) { return p.type == Part::Type::Compaction; });
    if (asks_summary && text.empty()) text = kSummaryQuestion;
    // A text file's content is in its synthetic text parts; images and PDFs go as themselves.
    std::vector<provider::Attachment> attachments;
    for (const auto& p : m.parts)
      if (auto a = attachment_of(p)) attachments.push_back(std::move(*a));
    out.push_back(provider::ModelMessage::user(text, std::move(attachments)));
    return;
  }
  std::vector<provider::ModelToolCall> calls;
  std::vector<provider::ModelMessage> results;
  for (const auto& p : m.parts) {
    if (p.type != Part::Type::Tool) continue;
    bool done = p.state.status == ToolState::Status::Completed;
    bool failed = p.state.status == ToolState::Status::Error;
    if (!done && !failed) continue;
    calls.push_back({p.call_id, p.tool, p.state.input});
    results.push_back(provider::ModelMessage::tool_result(
        p.call_id, done ? p.state.output : "Error: " + p.state.error, failed));
  }
  if (text.empty() && calls.empty()) return;
  out.push_back(provider::ModelMessage::assistant(text, std::move(calls)));
  for (auto& r : results)
    out.push_back(std::move(r));
}

std::size_t history_start(const std::vector<MessageWithParts>& stored) {
  for (std::size_t i = stored.size(); i-- > 0;) {
    const MessageInfo& info = stored[i].info;
    // The summary stands for everything before the question it answers; one that failed (or
    // was cut short) does not.
    if (info.role != MessageInfo::Role::Assistant || !info.summary || info.error || !info.completed)
      continue;
    for (std::size_t q = i; q-- > 0;)
      if (stored[q].info.id == info.parent_id) return q;
  }
  return 0;
}

asio::awaitable<Result<std::shared_ptr<Conversation>>> ConversationCache::get(
    std::string session_id) {
  if (auto it = conversations_.find(session_id); it != conversations_.end()) {
    std::shared_ptr<Conversation> kept = it->second;
    bool current = true;
    // Another node may have run a turn (or an edit) since this node's turn ended: the store says
    // whether it did. Once taken by a turn here, the version is unknown again (the turn changes
    // the conversation) until the turn's end is stored; meanwhile only that turn uses it.
    if (store_->shared()) {
      if (kept->version_pending) {
        current = false;
      } else if (kept->stored_version.empty()) {
        current = status_->running(session_id);
      } else {
        std::string was = std::exchange(kept->stored_version, {});
        auto version = co_await store_->call(&SessionStore::messages_version, session_id);
        if (!version) {
          kept->stored_version = std::move(was);
          co_return version.error();
        }
        current = *version == was;
      }
    }
    // The store was read meanwhile: the entry may have changed.
    it = conversations_.find(session_id);
    bool same = it != conversations_.end() && it->second == kept;
    if (current && same) {
      kept->used = ++uses_;
      co_return kept;
    }
    if (same) conversations_.erase(it);
  }
  auto stored = co_await store_->call(&SessionStore::list_messages, session_id, std::size_t{0});
  if (!stored) co_return stored.error();
  auto loaded = std::make_shared<Conversation>();
  for (std::size_t i = history_start(*stored); i < stored->size(); ++i)
    append_history((*stored)[i], loaded->messages);
  loaded->used = ++uses_;
  conversations_[session_id] = loaded;
  while (conversations_.size() > kConversationsKept) {
    // The least recently used one whose session is not running a turn.
    auto victim = conversations_.end();
    for (auto it = conversations_.begin(); it != conversations_.end(); ++it)
      if (!status_->running(it->first) &&
          (victim == conversations_.end() || it->second->used < victim->second->used))
        victim = it;
    if (victim == conversations_.end()) break;
    conversations_.erase(victim);
  }
  co_return loaded;
}

void ConversationCache::forget(const std::string& session_id) {
  conversations_.erase(session_id);
}

void ConversationCache::stored(const std::string& session_id) {
  auto it = conversations_.find(session_id);
  if (it == conversations_.end()) return;
  it->second->stored_version.clear();
  it->second->version_pending = true;
  // Read on the store's thread, set here (a conversation is the loop's); one that went meanwhile
  // is not kept.
  store_->post([session_id, conversation = std::weak_ptr<Conversation>(it->second),
                work = asio::make_work_guard(executor_)](SessionStore& store) mutable {
    auto version = store.messages_version(session_id);
    auto executor = work.get_executor();
    asio::post(executor, [conversation = std::move(conversation), version = std::move(version),
                          work = std::move(work)]() mutable {
      auto kept = conversation.lock();
      // Not read: it stays unknown, and the next turn reads the conversation again.
      if (!kept || !kept->version_pending || !version || version->empty()) return;
      kept->version_pending = false;
      kept->stored_version = std::move(*version);
    });
  });
}

}  // namespace sb::session
