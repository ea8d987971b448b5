#pragma once
// SessionStore: sessions and messages in the store (SQLite, or PostgreSQL: store::Database), one
// row each, its JSON in `data`; a message's
// parts are in its row (`parts`, a JSON array in id order), so that storing a turn's step is one
// row, not one per part. Ids sort by creation time, so ORDER BY id is chronological.
//
// Thread-safe: the connection's mutex (store::Database::mutex()) around each use; the server
// writes its turns from a thread of their own (session::TurnWriter), and its event loop makes
// every other call through call(), run() or post(), which on PostgreSQL run them on the store's
// own thread (store::Worker) so that the loop never waits for the network.
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "clienttool/types.hpp"
#include "permission/service.hpp"
#include "session/types.hpp"
#include "store/database.hpp"
#include "store/worker.hpp"

namespace sb::session {

// A message as it is stored: its JSON texts, written when the change is staged (so that what is
// kept for a retry is a snapshot, and a write copies nothing).
struct MessageRow {
  std::string session_id;
  std::string id;
  bool open = false;  // an assistant message that has not completed (what a restart fails)
  std::string info;   // the MessageInfo
  std::string parts;  // its parts, a JSON array in id order
  static MessageRow of(const MessageWithParts& m);
};

// A file that a tool call changed (tool::FileChange), where the call was: what a revert of the
// session puts back (session/revert.hpp). nullopt content: the file did not exist.
struct FileChangeRow {
  std::string session_id;
  std::string message_id;
  std::string part_id;  // the tool part
  std::string path;     // absolute
  std::optional<std::string> before;
  std::optional<std::string> after;
};

// A file as it was when its session was reverted: what unrevert writes back.
struct HeldFile {
  std::string path;
  std::optional<std::string> content;  // nullopt: the file did not exist
};

// What a turn's tool call waits for, stored so that the wait outlives a restart (design.md
// decision 5): a client's result (`client`), a person's answer to a permission ask (`ask`; after
// a restart the ask waits again under its id, and once allowed the call runs), or to a question
// (neither: after a restart the call runs again and asks again under the id).
struct Wait {
  std::string id;  // the client call's request id, the ask's per_ id or the question's que_ id
  std::string session_id;
  std::string message_id;
  std::string call_id;
  std::optional<clienttool::WaitingCall> client;
  std::optional<permission::PermissionRequest> ask;
  static Wait of(const clienttool::WaitingCall& call);
  static Wait of(const permission::PermissionRequest& ask);
};
// {"client": WaitingCall}, {"ask": PermissionRequest} or {"question": {id, sessionID, messageID,
// callID}}, as stored; InvalidRequest naming what a stored one lacks.
json::object to_json(const Wait& wait);
Result<Wait> wait_from_json(const json::object& o);

// Writes that belong together, stored in one transaction by SessionStore::write (a session,
// then messages, each an insert or replace of the message with all of its parts, then the
// files the turn's tools changed).
struct StoreChanges {
  std::optional<SessionInfo> session;
  std::vector<MessageRow> messages;
  std::vector<FileChangeRow> files;
  // What calls now wait for, then the ids of waits that ended (a wait that began and ended
  // between two writes is in both, and ends up not stored).
  std::vector<Wait> waits;
  std::vector<std::string> waits_ended;
  // A turn's changes: the session whose claim the turn holds. On a shared store they are refused
  // (Conflict, nothing stored) when this node no longer holds it, as after a reconnect to the
  // store while another node took the session over.
  std::string claimed_session;
  void add(const MessageWithParts& m) { messages.push_back(MessageRow::of(m)); }
  bool empty() const {
    return !session && messages.empty() && files.empty() && waits.empty() && waits_ended.empty();
  }
};

class SessionStore {
 public:
  // Opens `<data_dir>/switchboard.db` (SQLite), creating the schema when needed.
  static Result<std::unique_ptr<SessionStore>> open(const std::filesystem::path& data_dir);
  // The same on a Database of either engine that others may share (the server's client
  // credentials).
  static Result<std::unique_ptr<SessionStore>> open(std::shared_ptr<store::Database> db);
  static Result<std::unique_ptr<SessionStore>> open_memory();

  // ---- from the event loop (store::Worker: inline on SQLite, on the store's thread otherwise)
  // ---- `co_await store.call(&SessionStore::get_session, id)`: the arguments are copied.
  template <class Method, class... Args>
  boost::asio::awaitable<std::invoke_result_t<Method, SessionStore&, Args&...>> call(Method method,
                                                                                     Args... args) {
    // SQLite: here and now, without the job (a turn makes a dozen of these calls); an exception
    // reaches the caller as from any call here (the worker's thread turns it into an error).
    if (worker_->inline_calls()) co_return (this->*method)(args...);
    auto job = [this, method, args = std::make_tuple(std::move(args)...)]() mutable {
      return std::apply([&](auto&... a) { return (this->*method)(a...); }, args);
    };
    co_return co_await worker_->run(std::move(job));
  }
  // Several calls in one go: `f(SessionStore&)`, owning what it uses (captured by value).
  // Name the lambda before the co_await (`auto job = [..](SessionStore& s) {..}; co_await
  // store.run(std::move(job))`): GCC 12 moves a lambda written inside a co_await expression
  // byte by byte, and a std::string it captured then points into the old place.
  template <class F>
  boost::asio::awaitable<std::invoke_result_t<F&, SessionStore&>> run(F f) {
    if (worker_->inline_calls()) co_return f(*this);
    auto job = [this, f = std::move(f)]() mutable { return f(*this); };
    co_return co_await worker_->run(std::move(job));
  }
  // After the calls made before it; nobody waits (a claim given back).
  template <class F>
  void post(F f) {
    worker_->post([this, f = std::move(f)]() mutable { f(*this); });
  }
  // Whether call() and run() run inline (SQLite): a caller may then skip what only guards the
  // time a call is away from the loop.
  bool calls_inline() const { return worker_->inline_calls(); }

  // ---- several servers on one store (issue 20's cluster) ----
  // Set before use when other nodes share the store: sessions read are no longer remembered (a
  // node cannot know when another changed one).
  void set_shared(bool shared) { shared_ = shared; }
  bool shared() const { return shared_; }
  // A session's turn runs on the node that claimed it (a lock of the store's connection, given
  // up when this server's connection ends, so a node that dies frees its sessions). False: another
  // node holds it. Always true on a store that is not shared. Re-entrant.
  Result<bool> claim(const std::string& session_id);
  void release(const std::string& session_id);
  // Sessions whose claim was lost with the store's connection and taken by another node meanwhile:
  // their turns are no longer this node's. Emptied by the call.
  std::vector<std::string> lost_claims();
  // Runs a statement: a node whose turns only wait sends nothing else, and would not learn that
  // its connection broke (a new one is made in the background, and the next call takes it) or of
  // claims it lost until its next write. Read lost_claims() after it.
  Result<void> check_connection();

  Result<void> put_session(const SessionInfo& s);  // insert or replace
  Result<std::optional<SessionInfo>> get_session(const std::string& id);
  Result<std::vector<SessionInfo>> list_sessions();    // most recently updated first
  Result<bool> delete_session(const std::string& id);  // with its messages and parts

  // Insert or replace the message with all of its parts.
  Result<void> put_message(const MessageWithParts& m);
  Result<std::optional<MessageWithParts>> get_message(const std::string& session_id,
                                                      const std::string& id);
  // In id order; `limit` > 0: only the newest `limit` (still oldest first).
  Result<std::vector<MessageWithParts>> list_messages(const std::string& session_id,
                                                      std::size_t limit = 0);
  // On a shared store (PostgreSQL): a value that changes whenever any of the session's messages
  // is written or deleted, by any node (each row version's transaction id, hashed with its id,
  // and the count). A node that keeps a session's conversation in memory compares it before
  // using it. "" on a store of this server's own.
  Result<std::string> messages_version(const std::string& session_id);
  // Deletes one message with its parts; false when the session has no such message.
  Result<bool> delete_message(const std::string& session_id, const std::string& id);

  Result<void> write(const StoreChanges& changes);  // all or nothing
  // Several turns' changes in one transaction (all or nothing), in order.
  Result<void> write(std::span<const StoreChanges* const> batch);

  // A session's todo list (the todowrite tool's) as the JSON text of its array; "" when it has
  // none. Deleted with the session.
  Result<std::string> get_todos(const std::string& session_id);
  Result<void> put_todos(const std::string& session_id, std::string_view todos_json);

  // Deletes the session's messages after `message_id` (ids sort by creation time): what a
  // regenerated answer replaces. Returns how many went.
  Result<std::size_t> delete_messages_after(const std::string& session_id,
                                            const std::string& message_id);

  // ---- files changed by tools, and what a revert holds (store_files.cpp) ----
  // The session's file changes in the order they were made.
  Result<std::vector<FileChangeRow>> file_changes(const std::string& session_id);
  // What the session's revert holds for unrevert; none when it is not reverted.
  Result<std::vector<HeldFile>> held_files(const std::string& session_id);
  // Stores the session (its revert set or cleared) and replaces what it holds with `held`.
  Result<void> put_revert(const SessionInfo& s, const std::vector<HeldFile>& held);
  // Makes a revert final (the next prompt): deletes the messages `removed`, stores `trimmed`
  // (the message of a revert to a part, with the parts before it), deletes the file changes from
  // (message_id, part_id) on and what the revert held, and stores the session. One transaction.
  Result<void> commit_revert(const SessionInfo& s, const std::vector<std::string>& removed,
                             const MessageWithParts* trimmed, const std::string& message_id,
                             const std::string& part_id);

  // A chat (POST /api/chat's `id`) names its session: nullopt when the chat was never used.
  // Deleted with the session.
  Result<std::optional<std::string>> get_chat(const std::string& chat_id);
  Result<void> put_chat(const std::string& chat_id, const std::string& session_id);

  // ---- what a restart finds ----
  // The assistant messages that never completed (turns a stop or a crash interrupted), by id.
  Result<std::vector<MessageWithParts>> open_messages();
  // What calls were stored waiting for (StoreChanges::waits); one that does not read back is left
  // out (logged).
  Result<std::vector<Wait>> waits();
  // After a stop or a crash: every open message but those in `keep` (turns that go on) gets an
  // error and a completion time, and its pending/running tool parts become errors; the stored
  // waits not in `keep_waits` are deleted. `sessions`, when given: only those sessions' (what a
  // node of a cluster claimed). Returns the messages it changed.
  Result<std::vector<MessageInfo>> fail_interrupted_turns(
      const std::string& reason, const std::set<std::string>& keep = {},
      const std::set<std::string>& keep_waits = {},
      const std::optional<std::set<std::string>>& sessions = std::nullopt);

 private:
  explicit SessionStore(std::shared_ptr<store::Database> db)
      : db_(std::move(db)),
        worker_(std::make_unique<store::Worker>(db_->engine() == store::Engine::Postgres)) {}
  Result<void> migrate();
  Result<void> migrate_postgres();
  Result<void> put_session_locked(const SessionInfo& s);
  Result<void> put_message_locked(const MessageRow& m);
  Result<void> put_file_change_locked(const FileChangeRow& f);
  Result<void> put_wait_locked(const Wait& w);
  Result<void> delete_wait_locked(const std::string& request_id);
  // Moves the rows of `part_table` (a schema before version 3) into their messages' rows.
  Result<void> embed_parts(std::string_view part_table);
  void remember_session(const SessionInfo& s);

  std::shared_ptr<store::Database> db_;
  // Sessions as last stored, by id: every turn looks its session up two or three times (a
  // SELECT and a JSON parse each, ~2 % of a turn's CPU). Coherent because this class is the
  // only writer of the session table; entries change only after their write committed. Read
  // under cache_mutex_ alone (a hit does not wait for a commit on the writer's thread); changed
  // under both it and the connection's mutex.
  std::mutex cache_mutex_;
  bool shared_ = false;
  std::unordered_map<std::string, SessionInfo> sessions_;
  // Last: destroyed first, so that the call it may be running finds the rest of this store.
  std::unique_ptr<store::Worker> worker_;
};

}  // namespace sb::session
