#pragma once
// The UI message stream of the AI SDK (the `ai` package's UIMessageChunk): one chat response as
// a log of chunks (ChatResponse), and the translation of a session's turn events on the bus into
// those chunks (TurnStream). Not thread-safe: the server's executor only.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "bus/event_bus.hpp"
#include "util/json.hpp"

namespace sb::chat {

// One response of a chat: its chunks (JSON texts) from `start` to `finish`, kept whole while it
// lives so that a reader may join late and replay from any sequence (resume). Readers are called
// synchronously as chunks come; one must only queue what it gets (a push connection's bounded
// queue).
class ChatResponse {
 public:
  using Chunk = std::shared_ptr<const std::string>;
  // (sequence, chunk) for each chunk in order; then (size(), nullptr) once, at the end.
  using Reader = std::function<void(std::uint64_t sequence, const Chunk& chunk)>;

  void append(const json::object& chunk);
  // No more chunks; readers hear the end. Idempotent.
  void end();
  bool ended() const { return ended_; }
  std::uint64_t size() const { return chunks_.size(); }
  // Replays the chunks from `from` on at once, then follows. Returns the reader's handle.
  std::uint64_t follow(std::uint64_t from, Reader reader);
  void unfollow(std::uint64_t handle);
  std::size_t readers() const { return readers_.size(); }

 private:
  std::vector<Chunk> chunks_;
  bool ended_ = false;
  std::map<std::uint64_t, Reader> readers_;
  std::uint64_t next_reader_ = 0;
};

// A tool call of the turn as the chat sees it.
struct CallView {
  std::string message_id;
  std::string tool;     // the part's tool (what the model called)
  std::string ui_name;  // toolName in the chunks
  bool app = false;     // the app answers it (a client-side tool): not providerExecuted
  enum class Status { Pending, Running, Done };
  Status status = Status::Pending;
  bool input_sent = false;
  bool invalid = false;        // the model's input was refused: tool-input-error was sent
  std::string request_id;      // the app's call waiting in the client-tool registry
  std::string approval_id;     // the permission ask waiting for the app's approval
  bool answered = false;       // its result came from the app
  bool denied = false;         // the app refused the approval
  std::string ended_how;       // how it ended when not by the app's answer
  bool reported_late = false;  // an output that came after it ended was answered with an error
  bool waits_for_app() const { return !request_id.empty() || !approval_id.empty(); }
};

// Translates one session's turn, event by event, into UI message chunks: each assistant message
// is a step (start-step / finish-step), text and reasoning parts stream as *-start/-delta/-end,
// tool parts as tool-input-* and tool-output-*, permission asks as tool-approval-request. The
// app's own tools (client-side) are static tool parts named as the app named them; the server's
// (built-in, MCP, connected clients') are dynamic and providerExecuted.
class TurnStream {
 public:
  using Emit = std::function<void(const json::object& chunk)>;
  // The UI name of a tool whose calls the app answers; nullopt for the server's tools.
  using AppTool = std::function<std::optional<std::string>(const std::string& tool)>;

  enum class Effect {
    None,
    Suspended,  // the step waits only for the app (outputs, approvals): the response may end
    Ended,      // the turn ended (session.idle): `finish` was emitted
  };

  TurnStream(std::string session_id, AppTool app_tool, Emit emit)
      : session_id_(std::move(session_id)),
        app_tool_(std::move(app_tool)),
        emit_(std::move(emit)) {}

  // One bus event (of any session: others are ignored).
  Effect on_event(const bus::Event& event);
  // Ends the response that is open now, for the app to answer what waits: open text ends, then
  // finish-step and finish {finishReason: "tool-calls"}.
  void suspend();

  std::map<std::string, CallView>& calls() { return calls_; }
  bool suspended() const { return suspended_; }
  // A continuation reopened the stream: what follows goes to a new response.
  void resume() { suspended_ = false; }
  // The model is done with the step and every call of it that has not ended waits for the app.
  bool should_suspend() const;

 private:
  void on_message(const json::object& info);
  void on_part(const json::object& part);
  void on_tool_part(const json::object& part);
  void on_delta(const json::object& props);
  void start_step(const std::string& message_id);
  void finish_step();
  void end_open_parts();
  CallView& call(const std::string& call_id, const json::object& part);

  struct TextView {
    bool reasoning = false;
    std::size_t sent = 0;  // bytes of its text sent as deltas
    bool ended = false;
  };

  std::string session_id_;
  AppTool app_tool_;
  Emit emit_;
  std::map<std::string, TextView> texts_;  // by part id
  std::map<std::string, CallView> calls_;  // by call id
  std::set<std::string> started_;          // calls whose tool-input-start went out
  std::string step_message_;               // the assistant message of the open step
  bool step_open_ = false;
  bool step_streamed_ = false;   // its model stream has ended (its step-finish part came)
  std::set<std::string> steps_;  // assistant messages seen
  std::string finish_reason_;    // the last step's, for `finish`
  bool suspended_ = false;
};

}  // namespace sb::chat
