#pragma once
// Reverting a session to an earlier point (OpenCode's POST /session/{id}/revert and /unrevert,
// GET /session/{id}/diff), without snapshots of the project: the files that `edit` and `write`
// changed are known from the changes the turns stored (FileChangeRow: each file's content before
// and after each call), so a revert writes back each file's content from before its first change
// at or after the point, and keeps what the files held then (HeldFile) for unrevert. Both are
// stored, so a revert survives a restart. Files that `bash` (or anything else) changed are not
// known and stay as they are.
//
// A revert marks the session (SessionInfo::revert); its messages stay stored and listed (clients
// hide those from the point on) until the next prompt makes it final (commit_revert: those
// messages and their file changes deleted, the files stay as reverted) or unrevert takes it back.
// Whatever a file holds when it is reverted or unreverted is overwritten (a revert holds it for
// unrevert; unrevert writes back what the revert held, over any change made meanwhile).
//
// Free functions over the store and the bus; SessionService (service_revert.cpp) checks that no
// turn runs. Not thread-safe: the server's executor only, as the service.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bus/event_bus.hpp"
#include "session/store.hpp"
#include "session/types.hpp"

namespace sb::session {

// The point a session is reverted to: the message and everything after it, or, with a part, the
// message's parts from that part on and every later message.
struct RevertPoint {
  std::string message_id;
  std::string part_id;  // empty: the whole message
};

// OpenCode's point for a request to revert to `message_id` (and `part_id`): a part is kept only
// when a text or tool part of its message precedes it; otherwise the point is the user message
// that the message belongs to (an assistant message's turn goes with its question). NotFound when
// the session has no such message, or the message no such part.
Result<RevertPoint> revert_point(const std::vector<MessageWithParts>& messages,
                                 const std::string& message_id, const std::string& part_id);

// Whether the change was made at or after the point.
bool at_or_after(const FileChangeRow& change, const RevertPoint& point);

// path -> content to write back (nullopt: remove the file). For each path changed at or after
// the point, its content before its first change there; a path that an earlier revert holds
// (`held`) and that is not changed from the point on goes back to what it held then.
std::map<std::string, std::optional<std::string>> revert_targets(
    const std::vector<FileChangeRow>& changes, const RevertPoint& point,
    const std::vector<HeldFile>& held);

// The file's content now, nullopt when it does not exist.
Result<std::optional<std::string>> read_current(const std::string& path);
// Writes `content` to the file (nullopt: removes it; an absent file is fine).
Result<void> put_file(const std::string& path, const std::optional<std::string>& content);

// OpenCode's FileDiff (SnapshotFileDiff) of each file that `changes` (in order) left different:
// {file, patch, additions, deletions, status: added | deleted | modified}; `file` relative to
// `directory` when inside it.
json::array file_diffs(const std::vector<const FileChangeRow*>& changes,
                       const std::string& directory);

// Reverts the session's files to `point` and marks it reverted (stored, with what the files held:
// a second revert keeps what the first one held, so unrevert goes back to before the first).
// Publishes file.edited for each file written, session.diff and session.updated.
Result<SessionInfo> revert_files(SessionStore& store, bus::EventBus& bus, SessionInfo session,
                                 const RevertPoint& point);
// Writes back what the revert held and clears it; a session that is not reverted is returned as
// it is. Publishes file.edited for each file written and session.updated.
Result<SessionInfo> unrevert_files(SessionStore& store, bus::EventBus& bus, SessionInfo session);
// Makes the session's revert final: the messages (and parts) from the point on are deleted
// (message.removed, message.part.removed), with their file changes; the files stay as they are.
Result<SessionInfo> commit_revert(SessionStore& store, bus::EventBus& bus, SessionInfo session,
                                  const std::vector<MessageWithParts>& messages);
// The FileDiffs of the turn that `message_id` belongs to (from its user message to the next
// one), or with an empty id of the whole session (of a reverted session: before the point).
// NotFound for a message the session does not have.
Result<json::array> session_diff(SessionStore& store, const SessionInfo& session,
                                 const std::vector<MessageWithParts>& messages,
                                 const std::string& message_id);

}  // namespace sb::session
