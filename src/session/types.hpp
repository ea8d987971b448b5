#pragma once
// Sessions, messages and parts: the shapes of seed 002 and OpenCode's V1 API, as C++ types with
// one JSON conversion each, used for storage and for the wire alike: append_json writes the text
// (to_json is that text as a tree, for documents that embed it), *_from_json reads it back.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "permission/ruleset.hpp"
#include "util/clock.hpp"
#include "util/error.hpp"
#include "util/json.hpp"

namespace sb::session {

// Times (every `time` field) are milliseconds since the epoch: sb::now_ms().

struct SessionInfo {
  std::string id;
  std::string title;
  std::string directory;           // the project directory tools resolve relative paths from
  std::string slug;                // a short readable name (project.hpp's slug_of)
  std::string project_id;          // projectID (project.hpp); empty: "global"
  std::string parent_id;           // set for sub-sessions of the task tool
  std::string client_id;           // the client that created it, when one did
  permission::Ruleset permission;  // the session's own rules, as created
  // What a person allowed with "always" in this session: kept with it, so that a restart or
  // another node of a cluster does not ask again.
  permission::Ruleset approved;
  std::int64_t created = 0;
  std::int64_t updated = 0;
  std::optional<std::int64_t> archived;  // time.archived: when it was archived (PATCH)
  // Rules stored by an older build that do not decode (a number as a pattern was accepted):
  // kept and written back as stored, and the session refuses turns and tool lists (Conflict,
  // naming `why`) rather than run without rules its creator set.
  struct UnreadableRules {
    json::value stored;
    std::string why;
  };
  std::optional<UnreadableRules> unreadable_permission;
  // Set while the session is reverted (POST /session/{id}/revert, session/revert.hpp): the
  // messages from this point on are undone, their files put back, until unrevert or the next
  // prompt (which deletes them).
  struct Revert {
    std::string message_id;
    std::string part_id;  // empty: the whole message
    std::string diff;     // what the revert did to the files, a unified diff
  };
  std::optional<Revert> revert;
};

struct Tokens {
  std::int64_t input = 0;
  std::int64_t output = 0;
  std::int64_t reasoning = 0;
  std::int64_t cache_read = 0;
  std::int64_t cache_write = 0;
};

// A failure that ended a turn, named as OpenCode names them (ProviderAuthError, APIError,
// MessageAbortedError, UnknownError, ...), with `message` and any extra data.
struct NamedError {
  std::string name;
  std::string message;
  json::object data;
};

struct MessageInfo {
  enum class Role { User, Assistant };
  std::string id;
  std::string session_id;
  Role role = Role::User;
  std::int64_t created = 0;
  std::optional<std::int64_t> completed;  // assistant: when the turn ended
  std::string agent;
  std::string provider_id;
  std::string model_id;
  // Assistant messages only.
  std::string parent_id;  // the user message this answers
  Tokens tokens;
  double cost = 0;
  std::string finish;  // "stop", "tool-calls", "length", ...
  std::optional<NamedError> error;
  std::string cwd;
  // The summary of the conversation before it (POST /session/{id}/summarize): the model sees
  // the conversation from the last one on.
  bool summary = false;
  // User messages only: the prompt's tool switches (OpenCode's `tools`), none when empty.
  std::map<std::string, bool> tools;
};

struct ToolState {
  enum class Status { Pending, Running, Completed, Error };
  Status status = Status::Pending;
  json::object input;
  std::string raw;  // pending: the input as streamed so far
  std::string title;
  json::object metadata;
  std::string output;
  std::string error;
  json::array attachments;
  std::int64_t start = 0;
  std::int64_t end = 0;
};

struct Part {
  enum class Type { Text, Reasoning, Tool, StepStart, StepFinish, File, Compaction };
  std::string id;
  std::string session_id;
  std::string message_id;
  Type type = Type::Text;
  // text, reasoning
  std::string text;
  std::int64_t start = 0;
  std::int64_t end = 0;
  bool synthetic = false;  // text: written by the server (an attached file's content)
  // file (OpenCode's FilePart): an image's or PDF's url is a base64 data: URL, its one copy
  std::string mime;
  std::string url;
  std::string filename;
  json::object source;  // FilePartSource as the client sent it; empty for none
  // tool
  std::string call_id;
  std::string tool;
  ToolState state;
  // step-finish
  std::string reason;
  Tokens tokens;
  double cost = 0;
  // compaction (a user message that asks for a summary of the conversation, OpenCode's
  // CompactionPart): the turn goes on after the summary
  bool auto_continue = false;
};

std::string_view to_string(ToolState::Status s);
std::string_view to_string(Part::Type t);

struct MessageWithParts {
  MessageInfo info;
  std::vector<Part> parts;  // in id order
};

void append_json(std::string& out, const SessionInfo& s);
void append_json(std::string& out, const MessageInfo& m);
void append_json(std::string& out, const Part& p);
void append_json(std::string& out, const std::vector<Part>& parts);  // [...]
void append_json(std::string& out, const MessageWithParts& m);  // {"info": ..., "parts": [...]}

template <class T>
std::string json_text(const T& item) {
  std::string out;
  append_json(out, item);
  return out;
}

// The same as a tree (events, answers that embed it); `sp`: where its objects live.
json::object to_json(const SessionInfo& s, json::storage_ptr sp = {});
json::object to_json(const MessageInfo& m, json::storage_ptr sp = {});
json::object to_json(const Part& p, json::storage_ptr sp = {});

Result<SessionInfo> session_from_json(const json::object& o);
Result<MessageInfo> message_from_json(const json::object& o);
Result<Part> part_from_json(const json::object& o);

}  // namespace sb::session
