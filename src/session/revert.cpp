#include "session/revert.hpp"

#include <algorithm>
#include <filesystem>
#include <set>

#include "tool/builtin/file_util.hpp"
#include "util/log.hpp"
#include "util/text.hpp"

namespace sb::session {

namespace fs = std::filesystem;

namespace {

using Messages = std::vector<MessageWithParts>;

Messages::const_iterator find_message(const Messages& messages, const std::string& id) {
  return std::find_if(messages.begin(), messages.end(),
                      [&](const MessageWithParts& m) { return m.info.id == id; });
}

// The user message that `m` belongs to: the last one at or before it (itself when it has none).
Messages::const_iterator turn_start(const Messages& messages, Messages::const_iterator m) {
  for (auto it = m;; --it) {
    if (it->info.role == MessageInfo::Role::User) return it;
    if (it == messages.begin()) return m;
  }
}

Error not_found_message(const std::string& id) {
  return make_error(ErrorCode::NotFound, "Message not found: " + id);
}

std::string shown_path(const std::string& path, const std::string& directory) {
  tool::ToolContext ctx;
  ctx.directory = directory;
  return tool::fsutil::display_path(ctx, path);
}

void publish_session(bus::EventBus& bus, const SessionInfo& s) {
  bus.publish("session.updated", json::object{{"sessionID", s.id}, {"info", to_json(s)}});
}

// Writes each target whose content differs from the file's; file.edited for each. On an error,
// the files already written get back what they held (`current`) and the error is returned.
Result<void> write_targets(bus::EventBus& bus,
                           const std::map<std::string, std::optional<std::string>>& targets,
                           const std::map<std::string, std::optional<std::string>>& current) {
  std::vector<std::string> written;
  for (const auto& [path, content] : targets) {
    auto now = current.find(path);
    if (now != current.end() && now->second == content) continue;
    if (auto r = put_file(path, content); !r) {
      for (const auto& done : written) {
        auto before = current.find(done);
        if (before == current.end()) continue;  // not known: left as written
        if (put_file(done, before->second))
          bus.publish("file.edited", json::object{{"file", done}});
      }
      return r;
    }
    written.push_back(path);
    bus.publish("file.edited", json::object{{"file", path}});
  }
  return {};
}

// Conflict when the path is a symbolic link now: a revert neither reads nor writes through it
// (it may point out of the project).
Result<void> refuse_symlink(const std::string& path) {
  std::error_code ec;
  if (fs::is_symlink(fs::symlink_status(path, ec)))
    return make_error(ErrorCode::Conflict,
                      path +
                          " is a symbolic link now; the revert does not read or write "
                          "through it (replace the link with a file, or remove it)");
  return {};
}

}  // namespace

Result<RevertPoint> revert_point(const Messages& messages, const std::string& message_id,
                                 const std::string& part_id) {
  auto m = find_message(messages, message_id);
  if (m == messages.end()) return not_found_message(message_id);
  if (!part_id.empty()) {
    auto part = std::find_if(m->parts.begin(), m->parts.end(),
                             [&](const Part& p) { return p.id == part_id; });
    if (part == m->parts.end())
      return make_error(ErrorCode::NotFound,
                        "Part not found: " + part_id + " (in message " + message_id + ")");
    bool said_something = std::any_of(m->parts.begin(), part, [](const Part& p) {
      return p.type == Part::Type::Text || p.type == Part::Type::Tool;
    });
    if (said_something) return RevertPoint{message_id, part_id};
  }
  return RevertPoint{turn_start(messages, m)->info.id, ""};
}

bool at_or_after(const FileChangeRow& change, const RevertPoint& point) {
  // part_id >= "" holds for every part: a whole message's point takes all of it.
  return change.message_id > point.message_id ||
         (change.message_id == point.message_id && change.part_id >= point.part_id);
}

std::map<std::string, std::optional<std::string>> revert_targets(
    const std::vector<FileChangeRow>& changes, const RevertPoint& point,
    const std::vector<HeldFile>& held) {
  std::map<std::string, std::optional<std::string>> targets;
  for (const auto& c : changes)
    if (at_or_after(c, point)) targets.try_emplace(c.path, c.before);  // the first one wins
  for (const auto& h : held)
    targets.try_emplace(h.path, h.content);
  return targets;
}

Result<std::optional<std::string>> read_current(const std::string& path) {
  std::error_code ec;
  auto status = fs::symlink_status(path, ec);
  if (!fs::exists(status)) return std::optional<std::string>{};
  if (auto r = refuse_symlink(path); !r) return r.error();
  auto content = tool::fsutil::read_file(path);
  if (!content) return content.error();
  return std::optional<std::string>{std::move(*content)};
}

Result<void> put_file(const std::string& path, const std::optional<std::string>& content) {
  if (auto r = refuse_symlink(path); !r) return r;
  if (content) return tool::fsutil::replace_file(path, *content);
  std::error_code ec;
  fs::remove(path, ec);
  if (ec) return make_error(ErrorCode::Internal, "Cannot remove " + path + ": " + ec.message());
  return {};
}

json::array file_diffs(const std::vector<const FileChangeRow*>& changes,
                       const std::string& directory) {
  // Per path, in the order first changed: the content before the first change, after the last.
  std::vector<std::string> order;
  std::map<std::string, std::pair<std::optional<std::string>, std::optional<std::string>>> ends;
  for (const FileChangeRow* c : changes) {
    auto [it, first] = ends.try_emplace(c->path, c->before, c->after);
    if (first)
      order.push_back(c->path);
    else
      it->second.second = c->after;
  }
  json::array out;
  for (const auto& path : order) {
    const auto& [before, after] = ends[path];
    if (before == after) continue;
    std::string file = shown_path(path, directory);
    auto diff = tool::fsutil::unified_diff(file, before.value_or(""), after.value_or(""));
    out.push_back(json::object{
        {"file", file},
        {"patch", repair_utf8(diff.patch)},
        {"additions", diff.additions},
        {"deletions", diff.deletions},
        {"status", !before  ? "added"
                   : !after ? "deleted"
                            : "modified"},
    });
  }
  return out;
}

Result<json::array> session_diff(SessionStore& store, const SessionInfo& session,
                                 const Messages& messages, const std::string& message_id) {
  std::string from, to;  // message ids: [from, to), empty `to` for no end
  if (!message_id.empty()) {
    auto m = find_message(messages, message_id);
    if (m == messages.end()) return not_found_message(message_id);
    auto start = turn_start(messages, m);
    from = start->info.id;
    auto next = std::find_if(std::next(start), messages.end(), [](const MessageWithParts& x) {
      return x.info.role == MessageInfo::Role::User;
    });
    if (next != messages.end()) to = next->info.id;
  }
  auto changes = store.file_changes(session.id);
  if (!changes) return changes.error();
  std::vector<const FileChangeRow*> chosen;
  for (const auto& c : *changes) {
    if (!from.empty() && (c.message_id < from || (!to.empty() && c.message_id >= to))) continue;
    // The whole session as its files are: a reverted session without what is undone.
    if (from.empty() && session.revert &&
        at_or_after(c, RevertPoint{session.revert->message_id, session.revert->part_id}))
      continue;
    chosen.push_back(&c);
  }
  return file_diffs(chosen, session.directory);
}

Result<SessionInfo> revert_files(SessionStore& store, bus::EventBus& bus, SessionInfo session,
                                 const RevertPoint& point) {
  auto changes = store.file_changes(session.id);
  if (!changes) return changes.error();
  auto held = store.held_files(session.id);
  if (!held) return held.error();
  auto targets = revert_targets(*changes, point, *held);

  // What the files hold now: kept for unrevert (unless an earlier revert holds the file
  // already), and the diff's left side. Read before anything is written, so that a file that
  // cannot be read (a directory now) changes nothing.
  std::map<std::string, std::optional<std::string>> current;
  for (const auto& [path, content] : targets) {
    auto now = read_current(path);
    if (!now) return now.error();
    current.emplace(path, std::move(*now));
  }
  std::vector<HeldFile> keep = *held;
  std::set<std::string> kept;
  for (const auto& h : keep)
    kept.insert(h.path);
  std::string diff;
  for (const auto& [path, content] : targets) {
    const auto& now = current[path];
    if (!kept.count(path)) keep.push_back(HeldFile{path, now});
    std::string file = shown_path(path, session.directory);
    diff += tool::fsutil::unified_diff(file, now.value_or(""), content.value_or("")).patch;
  }

  const SessionInfo before = session;
  session.revert = SessionInfo::Revert{point.message_id, point.part_id, repair_utf8(diff)};
  session.updated = now_ms();
  // Stored first: once a file is written, what it held must be on disk for unrevert.
  if (auto r = store.put_revert(session, keep); !r) return r.error();
  if (auto r = write_targets(bus, targets, current); !r) {
    // The files are back as they were (write_targets); so is the session's revert state.
    if (auto back = store.put_revert(before, *held); !back)
      log::warn("revert of ", before.id,
                ": cannot restore the previous revert state: ", back.error().message);
    return r.error();
  }

  std::vector<MessageWithParts> none;
  auto now_diff = session_diff(store, session, none, "");
  bus.publish("session.diff", json::object{{"sessionID", session.id},
                                           {"diff", now_diff ? *now_diff : json::array()}});
  publish_session(bus, session);
  return session;
}

Result<SessionInfo> unrevert_files(SessionStore& store, bus::EventBus& bus, SessionInfo session) {
  if (!session.revert) return session;
  auto held = store.held_files(session.id);
  if (!held) return held.error();
  std::map<std::string, std::optional<std::string>> targets, current;
  for (auto& h : *held) {
    auto now = read_current(h.path);
    if (now) current.emplace(h.path, std::move(*now));
    targets.emplace(h.path, std::move(h.content));
  }
  // Files first: if storing the session then fails, it is still reverted and holds the same
  // contents, so another unrevert does the same again.
  if (auto r = write_targets(bus, targets, current); !r) return r.error();
  session.revert.reset();
  session.updated = now_ms();
  if (auto r = store.put_revert(session, {}); !r) return r.error();
  publish_session(bus, session);
  return session;
}

Result<SessionInfo> commit_revert(SessionStore& store, bus::EventBus& bus, SessionInfo session,
                                  const Messages& messages) {
  if (!session.revert) return session;
  const RevertPoint point{session.revert->message_id, session.revert->part_id};
  std::vector<std::string> removed;
  std::optional<MessageWithParts> trimmed;
  std::vector<std::string> removed_parts;
  for (const auto& m : messages) {
    if (m.info.id > point.message_id || (m.info.id == point.message_id && point.part_id.empty())) {
      removed.push_back(m.info.id);
    } else if (m.info.id == point.message_id) {
      trimmed = MessageWithParts{m.info, {}};
      for (const auto& p : m.parts)
        if (p.id < point.part_id)
          trimmed->parts.push_back(p);
        else
          removed_parts.push_back(p.id);
    }
  }
  session.revert.reset();
  session.updated = now_ms();
  if (auto r = store.commit_revert(session, removed, trimmed ? &*trimmed : nullptr,
                                   point.message_id, point.part_id);
      !r)
    return r.error();
  for (const auto& id : removed)
    bus.publish("message.removed", json::object{{"sessionID", session.id}, {"messageID", id}});
  for (const auto& id : removed_parts)
    bus.publish(
        "message.part.removed",
        json::object{{"sessionID", session.id}, {"messageID", point.message_id}, {"partID", id}});
  publish_session(bus, session);
  return session;
}

}  // namespace sb::session
