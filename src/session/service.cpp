#include "session/service.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <ctime>

#include "permission/doom_loop.hpp"
#include "tool/arguments.hpp"
#include "tool/builtin/invalid.hpp"
#include "tool/truncate.hpp"
#include "util/ids.hpp"
#include "util/log.hpp"
#include "util/wait_group.hpp"

namespace sb::session {

namespace asio = boost::asio;
constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

// A running turn: one per busy session.
struct SessionService::Turn {
  SessionInfo session;
  std::shared_ptr<AbortSignal> abort = AbortSignal::create();
  std::vector<permission::RecentCall> calls;  // every tool call of the turn, for the doom loop
  int awaiting = 0;                           // permission asks / interactive tools waiting
  Agent agent;
  permission::Ruleset session_rules;
  std::shared_ptr<Conversation> conversation;
  // The turn's messages as they are now (the user's, then one per step), each with its parts
  // in id order; those changed since the last write are stored by the next one (flush()).
  std::vector<MessageWithParts> messages;
  std::vector<std::size_t> unsaved;  // indices into `messages`
  std::optional<SessionInfo> unsaved_session;

  bool has_unsaved() const { return unsaved_session || !unsaved.empty(); }
  // What the next write stores; the turn starts over with nothing unsaved.
  StoreChanges take_unsaved() {
    StoreChanges changes;
    changes.session = std::exchange(unsaved_session, {});
    for (std::size_t i : unsaved)
      changes.add(messages[i]);
    unsaved.clear();
    return changes;
  }
  // The turn's message `id` (nullptr when it has none), marked as changed.
  MessageWithParts* change(const std::string& id) {
    for (std::size_t i = messages.size(); i-- > 0;) {
      if (messages[i].info.id != id) continue;
      if (std::find(unsaved.begin(), unsaved.end(), i) == unsaved.end()) unsaved.push_back(i);
      return &messages[i];
    }
    return nullptr;
  }
};

// The conversation of a session as the model sees it (history() of its stored messages), kept
// up to date as steps end so that a step does not read the whole session back from the store.
struct SessionService::Conversation {
  std::vector<provider::ModelMessage> messages;
  std::uint64_t used = 0;  // conversation_uses_ at the last turn, for eviction
};

namespace {
// Idle conversations kept in memory; the least recently used beyond this are dropped (and
// read from the store again when their session has another turn).
constexpr std::size_t kConversationsKept = 64;
// Distinct tool lists kept with their serialized forms (agents, per-session client tools).
constexpr std::size_t kToolSetsKept = 32;
// How long a turn's progress (its start, a waiting tool call) may wait to be stored; what a crash
// can lose of a turn that is still running.
constexpr std::chrono::milliseconds kWriteDelay{50};
}  // namespace

// One model step: one assistant message.
struct SessionService::Step {
  std::shared_ptr<Turn> turn;
  provider::ProviderPtr provider;
  MessageInfo message;
  provider::ModelRequest request;
  std::optional<Part> text;
  std::optional<Part> reasoning;
  std::map<std::string, Part> tools;  // by call id
  std::vector<std::string> tool_order;
  std::unique_ptr<WaitGroup> running;
  std::optional<provider::StepFinish> finish;
  std::optional<provider::StreamError> error;
  bool halt = false;  // a person rejected a permission: stop after this step
  bool emitted = false;
  // Streamed text not yet published as message.part.delta (see publish_delta).
  Part* delta_part = nullptr;
  std::string delta;
  bool delta_posted = false;
};

namespace {

std::string default_title() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "New session - %Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

constexpr std::string_view kLastStepNote =
    "\n\nThis is the last step of this turn (the agent's step limit): tools are not available "
    "now. Answer with text only: say what was done, what is left, and what the user could ask "
    "for next.";

std::string system_prompt(const Agent& agent, const std::filesystem::path& directory) {
  std::string prompt = agent.prompt;
  if (prompt.empty())
    prompt =
        "You are Switchboard, an agent that helps the user with tasks in their project. Use the "
        "tools you are given to look things up and make changes; some tools run on the user's own "
        "machine or in their browser. Be concise.";
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d", &tm);
  return prompt + "\n\n<env>\nWorking directory: " + directory.string() +
         "\nToday's date: " + date + "\n</env>";
}

NamedError named_error(const provider::StreamError& e) {
  if (e.message == "aborted") return {"MessageAbortedError", "The turn was aborted", {}};
  if (e.http_status == 401 || e.http_status == 403)
    return {"ProviderAuthError", e.message, json::object{{"statusCode", e.http_status}}};
  json::object data{{"isRetryable", e.retryable}};
  if (e.http_status) data["statusCode"] = e.http_status;
  return {"APIError", e.message, std::move(data)};
}

// One stored message as the model sees it, appended to `out`.
void append_history(const MessageWithParts& m, std::vector<provider::ModelMessage>& out) {
  std::string text;
  for (const auto& p : m.parts)
    if (p.type == Part::Type::Text) text += (text.empty() ? "" : "\n") + p.text;
  if (m.info.role == MessageInfo::Role::User) {
    out.push_back(provider::ModelMessage::user(text));
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

// A session whose stored rules an older build accepted but that do not decode runs nothing
// rather than run without the rules its creator set.
Result<void> readable_rules(const SessionInfo& session) {
  if (!session.unreadable_permission) return {};
  return make_error(ErrorCode::Conflict,
                    "session " + session.id + " has stored permission rules that cannot be read (" +
                        session.unreadable_permission->why +
                        "): it runs no turns and offers no tools without them; delete it and "
                        "create a new session");
}

}  // namespace

std::shared_ptr<SessionService> SessionService::create(ServiceDeps deps, ServiceOptions options) {
  return std::shared_ptr<SessionService>(new SessionService(std::move(deps), std::move(options)));
}

SessionService::SessionService(ServiceDeps deps, ServiceOptions options)
    : deps_(std::move(deps)), options_(std::move(options)), write_timer_(deps_.executor) {
  // As paths the tools resolve it (external_directory asks name real paths): once, for every
  // turn's rule that lets a session read its saved outputs.
  std::error_code ec;
  auto dir = tool::saved_outputs_dir(options_.data_dir);
  truncate_dir_ = std::filesystem::weakly_canonical(dir, ec);
  if (ec) truncate_dir_ = dir.lexically_normal();
}

SessionService::~SessionService() {
  write_pending();
}

Result<std::size_t> SessionService::recover() {
  auto failed = deps_.store->fail_interrupted_turns("The server stopped during this turn");
  if (!failed) return failed.error();
  return failed->size();
}

// ---- sessions -------------------------------------------------------------------------------

Result<SessionInfo> SessionService::create_session(CreateInput input) {
  if (!input.parent_id.empty()) {
    auto parent = deps_.store->get_session(input.parent_id);
    if (!parent) return parent.error();
    if (!*parent)
      return make_error(ErrorCode::InvalidRequest,
                        "parentID: there is no session " + input.parent_id);
    // A client's session has children of that client only.
    if (auto owned = validate_client_session(input.client_id, input.parent_id); !owned)
      return owned.error();
  }
  SessionInfo s;
  s.id = ids::make("ses");
  s.title = input.title.empty() ? default_title() : input.title;
  s.directory = options_.directory.string();
  s.client_id = std::move(input.client_id);
  s.parent_id = std::move(input.parent_id);
  s.permission = std::move(input.permission);
  s.created = s.updated = now_ms();
  if (auto r = deps_.store->put_session(s); !r) return r.error();
  deps_.bus->publish("session.created", json::object{{"info", to_json(s)}});
  return s;
}

Result<std::vector<SessionInfo>> SessionService::list_sessions() {
  return deps_.store->list_sessions();
}

Result<SessionInfo> SessionService::get_session(const std::string& id) {
  auto s = deps_.store->get_session(id);
  if (!s) return s.error();
  if (!*s) return make_error(ErrorCode::NotFound, "Session not found: " + id);
  return std::move(**s);
}

Result<void> SessionService::validate_client_session(const std::string& client_id,
                                                     const std::string& session_id) {
  auto s = deps_.store->get_session(session_id);
  if (!s) return s.error();
  // An unknown id protects nothing (ids are the server's, unguessable); a session without a
  // client is open to every client.
  if (!*s || (*s)->client_id.empty() || (*s)->client_id == client_id) return {};
  return make_error(ErrorCode::Forbidden,
                    "session " + session_id + " belongs to another client; " +
                        (client_id.empty() ? std::string("only that client may use it")
                                           : "client \"" + client_id + "\" may not use it"));
}

Result<void> SessionService::delete_session(const std::string& id) {
  auto s = get_session(id);
  if (!s) return s.error();
  {
    std::lock_guard lock(mutex_);
    deleted_.insert(id);
    conversations_.erase(id);
  }
  abort(id, "the session was deleted");
  deps_.permissions->forget_session(id);
  auto r = deps_.store->delete_session(id);
  if (!r) return r.error();
  deps_.bus->publish("session.deleted", json::object{{"info", to_json(*s)}});
  return {};
}

Result<std::vector<MessageWithParts>> SessionService::messages(const std::string& session_id) {
  if (auto s = get_session(session_id); !s) return s.error();
  write_pending();  // what turns have not stored yet (within the write delay), so it is listed
  return deps_.store->list_messages(session_id);
}

Result<std::string> SessionService::todos(const std::string& session_id) {
  if (auto s = get_session(session_id); !s) return s.error();
  auto text = deps_.store->get_todos(session_id);
  if (!text) return text.error();
  return text->empty() ? std::string("[]") : std::move(*text);
}

bool SessionService::is_deleted(const std::string& session_id) const {
  std::lock_guard lock(mutex_);
  return deleted_.count(session_id) > 0;
}

// ---- status ---------------------------------------------------------------------------------

void SessionService::set_status(const std::string& session_id, json::object status) {
  {
    std::lock_guard lock(mutex_);
    if (status.at("type").as_string() == "idle")
      status_.erase(session_id);
    else
      status_[session_id] = status;
  }
  bool idle = status.at("type").as_string() == "idle";
  deps_.bus->publish("session.status",
                     json::object{{"sessionID", session_id}, {"status", std::move(status)}});
  if (idle) deps_.bus->publish("session.idle", json::object{{"sessionID", session_id}});
}

json::object SessionService::status() const {
  std::lock_guard lock(mutex_);
  json::object out;
  for (const auto& [id, s] : status_)
    out[id] = s;
  return out;
}

void SessionService::publish_part(const Part& part) {
  // Parts are the largest events: not built when nobody listens.
  if (!deps_.bus->has_subscribers()) return;
  if (is_deleted(part.session_id)) return;  // an aborted turn of a deleted session winding down
  deps_.bus->publish("message.part.updated", json::object{{"part", to_json(part)}});
}

void SessionService::publish_delta(Step& step) {
  if (!step.delta_part || step.delta.empty()) return;
  const Part& part = *step.delta_part;
  step.delta_part = nullptr;
  std::string delta = std::exchange(step.delta, {});
  if (is_deleted(part.session_id)) return;
  deps_.bus->publish("message.part.delta", json::object{{"sessionID", part.session_id},
                                                        {"messageID", part.message_id},
                                                        {"partID", part.id},
                                                        {"field", "text"},
                                                        {"delta", std::move(delta)}});
}

void SessionService::stage_part(Turn& turn, const Part& part) {
  MessageWithParts* m = turn.change(part.message_id);
  if (!m) {
    log::error("a part of message ", part.message_id, " that its turn does not have");
    return;
  }
  // Parts are staged in the order they are made, so the place is nearly always the end.
  auto it = std::find_if(m->parts.rbegin(), m->parts.rend(),
                         [&](const Part& p) { return p.id <= part.id; });
  if (it != m->parts.rend() && it->id == part.id)
    *it = part;
  else
    m->parts.insert(it.base(), part);
  publish_part(part);
}

void SessionService::stage_message(Turn& turn, const MessageInfo& info) {
  if (MessageWithParts* m = turn.change(info.id)) {
    m->info = info;
  } else {
    turn.messages.push_back({info, {}});
    turn.unsaved.push_back(turn.messages.size() - 1);
  }
  if (deps_.bus->has_subscribers() && !is_deleted(info.session_id))
    deps_.bus->publish("message.updated", json::object{{"info", to_json(info)}});
}

void SessionService::flush(const std::shared_ptr<Turn>& turn, bool now) {
  bool arm = false;
  {
    std::lock_guard lock(mutex_);
    if (std::find(unsaved_turns_.begin(), unsaved_turns_.end(), turn) == unsaved_turns_.end())
      unsaved_turns_.push_back(turn);
    now = now || shutting_down_;
    if (!now && !write_armed_) arm = write_armed_ = true;
  }
  if (now) {
    write_pending();
    return;
  }
  if (!arm) return;
  // Stored a little later rather than at once: a turn that ends within the delay (a fast model,
  // a tool that answers at once) stores its start, its tool calls and its end in one transaction
  // at its end, each row once, instead of one transaction per step. A turn that takes longer has
  // its progress stored within the delay, in one transaction with every other turn's.
  write_timer_.expires_after(kWriteDelay);
  write_timer_.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
    auto self = weak.lock();
    if (!self || ec == asio::error::operation_aborted) return;
    {
      std::lock_guard lock(self->mutex_);
      self->write_armed_ = false;
    }
    self->write_pending();
  });
}

namespace {
// A write that keeps failing (not a passing full disk) is given up after this many tries, each
// made when the server stores something anyway.
constexpr int kMaxWriteFailures = 64;
}  // namespace

void SessionService::write_pending() {
  std::vector<PendingWrite> batch;
  {
    std::lock_guard lock(mutex_);
    batch = std::exchange(failed_writes_, {});
    for (auto& turn : unsaved_turns_)
      if (turn->has_unsaved()) batch.push_back(PendingWrite{turn, turn->take_unsaved()});
    unsaved_turns_.clear();
  }
  std::erase_if(batch, [&](const PendingWrite& w) { return is_deleted(w.turn->session.id); });
  if (batch.empty()) return;
  std::vector<const StoreChanges*> changes;
  changes.reserve(batch.size());
  for (const auto& w : batch)
    changes.push_back(&w.changes);
  auto r = deps_.store->write(changes);
  if (r) return;
  // One transaction per write instead, so that one that cannot succeed holds back no other turn.
  // What fails (nothing of a failed transaction is stored) is kept, in order, ahead of what turns
  // stage next, and tried again with the next write: a passing failure (a full disk that gets
  // space back) loses nothing, a turn's last changes included. A turn's later changes wait behind
  // its failed ones, so an older version of a row is never stored over a newer one.
  log::error("storing the changes of ", batch.size(),
             " turn steps (retried one by one): ", r.error().message);
  std::vector<PendingWrite> kept;
  std::set<const Turn*> held_back;
  for (auto& w : batch) {
    if (held_back.count(w.turn.get()) == 0) {
      auto one = deps_.store->write(w.changes);
      if (one) continue;
      if (++w.failures >= kMaxWriteFailures) {
        log::error("gave up storing changes of session ", w.turn->session.id, " after ",
                   kMaxWriteFailures, " tries: ", one.error().message);
        continue;
      }
      held_back.insert(w.turn.get());
    }
    kept.push_back(std::move(w));
  }
  if (kept.empty()) return;
  std::lock_guard lock(mutex_);
  failed_writes_.insert(failed_writes_.begin(), std::make_move_iterator(kept.begin()),
                        std::make_move_iterator(kept.end()));
}

Result<std::shared_ptr<SessionService::Conversation>> SessionService::conversation(
    const std::string& session_id) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = conversations_.find(session_id); it != conversations_.end()) {
      it->second->used = ++conversation_uses_;
      return it->second;
    }
  }
  auto stored = deps_.store->list_messages(session_id);
  if (!stored) return stored.error();
  auto loaded = std::make_shared<Conversation>();
  for (const auto& m : *stored)
    append_history(m, loaded->messages);
  std::lock_guard lock(mutex_);
  loaded->used = ++conversation_uses_;
  conversations_[session_id] = loaded;
  while (conversations_.size() > kConversationsKept) {
    // The least recently used one whose session is not running a turn (a running turn holds
    // its conversation and keeps it current).
    auto victim = conversations_.end();
    for (auto it = conversations_.begin(); it != conversations_.end(); ++it)
      if (!turns_.count(it->first) &&
          (victim == conversations_.end() || it->second->used < victim->second->used))
        victim = it;
    if (victim == conversations_.end()) break;
    conversations_.erase(victim);
  }
  return loaded;
}

// ---- turns ----------------------------------------------------------------------------------

Result<std::shared_ptr<SessionService::Turn>> SessionService::begin_turn(
    const std::string& session_id) {
  auto session = get_session(session_id);
  if (!session) return session.error();
  // Refused here, not in the turn: prompt_async's caller hears it.
  if (auto rules = readable_rules(*session); !rules) return rules.error();
  auto turn = std::make_shared<Turn>();
  turn->session = std::move(*session);
  {
    std::lock_guard lock(mutex_);
    if (shutting_down_) return make_error(ErrorCode::Unavailable, "Server shutting down");
    if (turns_.count(session_id))
      return make_error(ErrorCode::Conflict,
                        "Session " + session_id + " is busy with another turn");
    turns_[session_id] = turn;
  }
  set_status(session_id, json::object{{"type", "busy"}});
  return turn;
}

void SessionService::end_turn(const std::string& session_id) {
  {
    std::lock_guard lock(mutex_);
    turns_.erase(session_id);
  }
  set_status(session_id, json::object{{"type", "idle"}});
}

bool SessionService::abort(const std::string& session_id, const std::string& reason) {
  std::shared_ptr<Turn> turn;
  {
    std::lock_guard lock(mutex_);
    auto it = turns_.find(session_id);
    if (it == turns_.end()) return false;
    turn = it->second;
  }
  turn->abort->abort(reason);
  deps_.permissions->cancel_session(session_id, reason);
  if (deps_.questions) deps_.questions->cancel_session(session_id, reason);
  return true;
}

void SessionService::shutdown() {
  std::vector<std::string> ids;
  {
    std::lock_guard lock(mutex_);
    shutting_down_ = true;
    for (const auto& [id, t] : turns_)
      ids.push_back(id);
  }
  for (const auto& id : ids)
    abort(id, "the server is shutting down");
  // The turns store their ends at once from here on (flush); what waits is stored now, so that
  // no write timer holds the stop up.
  {
    std::lock_guard lock(mutex_);
    write_armed_ = false;
  }
  write_timer_.cancel();
  write_pending();
}

asio::awaitable<Result<MessageWithParts>> SessionService::prompt(std::string session_id,
                                                                 PromptInput input) {
  auto turn = begin_turn(session_id);
  if (!turn) co_return turn.error();
  auto self = shared_from_this();
  auto result = co_await run_turn(*turn, std::move(input));
  end_turn(session_id);
  co_return result;
}

namespace {

// What run_turn refuses before it starts (unknown agent or model provider), checked up front by
// prompt_async: once it has answered 204, a failure would reach nobody but the log.
Result<void> check_prompt(const std::map<std::string, Agent>& agents,
                          const provider::ProviderSet& providers, const PromptInput& input) {
  std::string agent_name = input.agent.value_or("build");
  auto agent = agents.find(agent_name);
  if (agent == agents.end())
    return make_error(ErrorCode::InvalidRequest, "Unknown agent: " + agent_name);
  std::string model = input.model.value_or(agent->second.model.value_or(providers.default_model));
  auto slash = model.find('/');
  if (slash == std::string::npos)
    return make_error(ErrorCode::InvalidRequest,
                      "model must be \"PROVIDER/MODEL\", got \"" + model + "\"");
  if (!providers.providers.count(model.substr(0, slash)))
    return make_error(ErrorCode::InvalidRequest,
                      "Unknown model provider: " + model.substr(0, slash));
  return {};
}

}  // namespace

Result<void> SessionService::prompt_async(std::string session_id, PromptInput input) {
  if (auto s = get_session(session_id); !s) return s.error();
  if (auto checked = check_prompt(deps_.agents, deps_.providers, input); !checked)
    return checked.error();
  auto turn = begin_turn(session_id);
  if (!turn) return turn.error();
  asio::co_spawn(
      deps_.executor,
      [self = shared_from_this(), turn = *turn, input = std::move(input),
       session_id]() mutable -> asio::awaitable<void> {
        auto r = co_await self->run_turn(turn, std::move(input));
        if (!r) log::warn("turn of ", session_id, " failed: ", r.error().message);
        self->end_turn(session_id);
      },
      [](std::exception_ptr e) {
        if (!e) return;
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& ex) {
          log::error("turn crashed: ", ex.what());
        }
      });
  return {};
}

asio::awaitable<Result<tool::TaskOutcome>> SessionService::run_subtask(tool::TaskRequest request) {
  CreateInput input;
  input.title = request.description + " (@" + request.agent + " subagent)";
  input.parent_id = request.parent_session_id;
  // The sub-session belongs to the parent's client, so it offers that client's tools only.
  if (auto parent = get_session(request.parent_session_id)) input.client_id = parent->client_id;
  auto child = create_session(std::move(input));
  if (!child) co_return child.error();
  AbortSignal::Registration on_abort(request.abort, [weak = weak_from_this(), id = child->id] {
    if (auto self = weak.lock()) self->abort(id, "the parent turn was aborted");
  });
  PromptInput prompt_input;
  prompt_input.text = std::move(request.prompt);
  prompt_input.agent = request.agent;
  prompt_input.tools["task"] = false;  // sub-agents do not start sub-agents of their own
  auto last = co_await prompt(child->id, std::move(prompt_input));
  if (!last) co_return last.error();
  if (last->info.error)
    co_return make_error(ErrorCode::Unavailable, "The sub-agent failed: " + last->info.error->name +
                                                     ": " + last->info.error->message);
  std::string text;
  for (const auto& p : last->parts)
    if (p.type == Part::Type::Text) text += (text.empty() ? "" : "\n") + p.text;
  co_return tool::TaskOutcome{child->id, text};
}

Result<std::vector<tool::ToolPtr>> SessionService::offered_tools(
    const std::string& session_id, const std::string& agent_name,
    const std::map<std::string, bool>& switches) {
  if (session_id.empty()) return offered_tools(nullptr, agent_name, switches);
  auto s = get_session(session_id);
  if (!s) return s.error();
  return offered_tools(&*s, agent_name, switches);
}

Result<std::vector<tool::ToolPtr>> SessionService::offered_tools(
    const SessionInfo* session, const std::string& agent_name,
    const std::map<std::string, bool>& switches) {
  auto agent_it = deps_.agents.find(agent_name.empty() ? "build" : agent_name);
  if (agent_it == deps_.agents.end())
    return make_error(ErrorCode::NotFound, "Unknown agent: " + agent_name);
  const Agent& agent = agent_it->second;
  permission::Ruleset session_rules;
  std::string owner;
  const std::string no_session;
  const std::string& session_id = session ? session->id : no_session;
  if (session) {
    if (auto rules = readable_rules(*session); !rules) return rules.error();
    owner = session->client_id;
    session_rules = session->permission;
    auto approved = deps_.permissions->session_rules(session_id);
    session_rules.insert(session_rules.end(), approved.begin(), approved.end());
  }
  std::vector<tool::ToolPtr> out;
  auto client_defs = deps_.tools->client_tools()->get_all_tools();
  for (auto& t : deps_.tools->tools("", session_id)) {
    const std::string& id = t->id();
    // A session that a client created offers the model that client's tools only.
    if (auto def = client_defs.find(id);
        def != client_defs.end() && !owner.empty() && def->second.client_id != owner)
      continue;
    if (auto s = switches.find(id); s != switches.end() && !s->second) continue;
    if (auto s = agent.tools.find(id); s != agent.tools.end() && !s->second) continue;
    bool client = client_defs.count(id) > 0;
    if (permission::disabled(
            id,
            {std::cref(agent.permission), std::cref(deps_.config_rules), std::cref(session_rules)},
            client))
      continue;
    out.push_back(std::move(t));
  }
  return out;
}

provider::ToolSet SessionService::tool_set_for(const std::vector<tool::ToolPtr>& offered) {
  auto same = [&](const KnownToolSet& known) {
    if (known.tools.size() != offered.size()) return false;
    for (std::size_t i = 0; i < offered.size(); ++i) {
      // The same tool object has the same schema (built-in and custom tools are immutable);
      // client tools are new objects on every lookup, so theirs are compared.
      if (known.tools[i] == offered[i]) continue;
      const auto& schema = known.set.schemas()[i];
      const auto& tool = *offered[i];
      if (schema.name != tool.id() || schema.description != tool.description() ||
          schema.parameters != tool.parameters())
        return false;
    }
    return true;
  };
  {
    std::lock_guard lock(mutex_);
    for (const auto& known : tool_sets_)
      if (same(known)) return known.set;
  }
  std::vector<provider::ToolSchema> schemas;
  schemas.reserve(offered.size());
  for (const auto& t : offered)
    schemas.push_back({t->id(), t->description(), t->parameters()});
  provider::ToolSet set(std::move(schemas));
  std::lock_guard lock(mutex_);
  tool_sets_.push_front({offered, set});
  if (tool_sets_.size() > kToolSetsKept) tool_sets_.pop_back();
  return set;
}

asio::awaitable<Result<MessageWithParts>> SessionService::run_turn(std::shared_ptr<Turn> turn,
                                                                   PromptInput input) {
  const std::string& session_id = turn->session.id;
  std::string agent_name = input.agent.value_or("build");
  auto agent_it = deps_.agents.find(agent_name);
  if (agent_it == deps_.agents.end())
    co_return make_error(ErrorCode::InvalidRequest, "Unknown agent: " + agent_name);
  turn->agent = agent_it->second;
  // The truncation note tells the model to read the full output where it was saved: this
  // session's saved outputs are read without an ask (a headless server rejected it). As an
  // agent default (after the built-in rules, before the config's for this agent), so that the
  // config file or the session may still deny it.
  auto& rules = turn->agent.permission;
  rules.insert(
      rules.begin() +
          static_cast<std::ptrdiff_t>(std::min(turn->agent.builtin_rules, rules.size())),
      {"external_directory", (tool::session_output_dir(truncate_dir_, session_id) / "*").string(),
       permission::Action::Allow});
  std::string model =
      input.model.value_or(turn->agent.model.value_or(deps_.providers.default_model));
  auto slash = model.find('/');
  if (slash == std::string::npos)
    co_return make_error(ErrorCode::InvalidRequest,
                         "model must be \"PROVIDER/MODEL\", got \"" + model + "\"");
  std::string provider_id = model.substr(0, slash), model_id = model.substr(slash + 1);
  auto provider_it = deps_.providers.providers.find(provider_id);
  if (provider_it == deps_.providers.providers.end())
    co_return make_error(ErrorCode::InvalidRequest, "Unknown model provider: " + provider_id);

  auto offered = offered_tools(&turn->session, agent_name, input.tools);
  if (!offered) co_return offered.error();
  turn->session_rules = turn->session.permission;

  // Read before the user's message is added to it.
  auto conversation = this->conversation(session_id);
  if (!conversation) co_return conversation.error();
  turn->conversation = *conversation;

  // The user's message.
  MessageInfo user;
  user.id = ids::make("msg");
  user.session_id = session_id;
  user.role = MessageInfo::Role::User;
  user.created = now_ms();
  user.agent = agent_name;
  user.provider_id = provider_id;
  user.model_id = model_id;
  stage_message(*turn, user);
  Part text;
  text.id = ids::make("prt");
  text.session_id = session_id;
  text.message_id = user.id;
  text.type = Part::Type::Text;
  text.text = input.text;
  text.start = text.end = user.created;
  stage_part(*turn, text);
  turn->conversation->messages.push_back(provider::ModelMessage::user(input.text));
  turn->session.updated = now_ms();
  turn->unsaved_session = turn->session;
  if (deps_.bus->has_subscribers())
    deps_.bus->publish("session.updated", json::object{{"info", to_json(turn->session)}});

  provider::ToolSet tool_set = tool_set_for(*offered);

  std::optional<std::size_t> last;  // the last step's message in turn->messages
  for (int step_no = 0; step_no < turn->agent.max_steps; ++step_no) {
    if (turn->abort->aborted()) break;

    auto step = std::make_shared<Step>();
    step->turn = turn;
    step->provider = provider_it->second;
    step->running = std::make_unique<WaitGroup>(co_await asio::this_coro::executor);
    step->request.model = model_id;
    step->request.system = system_prompt(turn->agent, options_.directory);
    step->request.tools = tool_set;
    // The agent's last step may call no tools, and the model is told why: the turn ends with
    // its account of what it did instead of with a tool call whose result nobody reads.
    if (step_no + 1 >= turn->agent.max_steps) {
      step->request.no_tool_calls = true;
      step->request.system += kLastStepNote;
    }
    MessageInfo& m = step->message;
    m.id = ids::make("msg");
    m.session_id = session_id;
    m.role = MessageInfo::Role::Assistant;
    m.created = now_ms();
    m.agent = agent_name;
    m.provider_id = provider_id;
    m.model_id = model_id;
    m.parent_id = user.id;
    m.cwd = options_.directory.string();
    stage_message(*turn, m);
    Part start;
    start.id = ids::make("prt");
    start.session_id = session_id;
    start.message_id = m.id;
    start.type = Part::Type::StepStart;
    stage_part(*turn, start);
    // The open assistant message is what a restart marks as interrupted.
    flush(turn, false);

    {
      // The step's request holds the conversation while the model answers; it comes back
      // however the step ends.
      Conversation& conv = *turn->conversation;
      step->request.messages = std::move(conv.messages);
      struct GiveBack {
        Conversation& conv;
        provider::ModelRequest& request;
        ~GiveBack() { conv.messages = std::move(request.messages); }
      } give_back{conv, step->request};
      co_await run_step(step);
    }

    // The step's end: usage, finish reason, errors.
    Part finish;
    finish.id = ids::make("prt");
    finish.session_id = session_id;
    finish.message_id = m.id;
    finish.type = Part::Type::StepFinish;
    if (step->finish) {
      const auto& u = step->finish->usage;
      m.tokens = {u.input, u.output, u.reasoning, u.cache_read, u.cache_write};
      m.finish = std::string(provider::finish_reason_name(step->finish->reason));
      finish.reason = m.finish;
      finish.tokens = m.tokens;
      stage_part(*turn, finish);
    }
    if (turn->abort->aborted()) {
      m.error = NamedError{"MessageAbortedError", turn->abort->reason(), {}};
    } else if (step->error) {
      m.error = named_error(*step->error);
      // The same error as on the message: name, message and the rest (statusCode, isRetryable).
      json::object data = m.error->data;
      data["message"] = m.error->message;
      deps_.bus->publish("session.error",
                         json::object{{"sessionID", session_id},
                                      {"error", json::object{{"name", m.error->name},
                                                             {"data", std::move(data)}}}});
    }
    m.completed = now_ms();
    stage_message(*turn, m);

    // The message with its parts as stored, which the conversation gains.
    const MessageWithParts* stored = turn->change(m.id);
    append_history(*stored, turn->conversation->messages);
    last = static_cast<std::size_t>(stored - turn->messages.data());
    bool called_tools = !step->tools.empty();
    if (m.error || step->halt || !called_tools) break;
  }
  flush(turn, true);
  // Stored (as text) by now: the message can leave the turn.
  co_return last ? std::move(turn->messages[*last]) : MessageWithParts{};
}

asio::awaitable<void> SessionService::run_step(std::shared_ptr<Step> step) {
  auto executor = co_await asio::this_coro::executor;
  auto& turn = *step->turn;
  const std::string& session_id = turn.session.id;
  auto self = shared_from_this();

  auto on_event = [&](provider::StreamEvent event) {
    bool is_delta = std::holds_alternative<provider::TextDelta>(event) ||
                    std::holds_alternative<provider::ReasoningDelta>(event);
    if (!is_delta) publish_delta(*step);  // what streamed so far goes out before what follows
    std::visit(
        [&](auto& e) {
          using E = std::decay_t<decltype(e)>;
          if constexpr (std::is_same_v<E, provider::TextDelta> ||
                        std::is_same_v<E, provider::ReasoningDelta>) {
            bool reasoning = std::is_same_v<E, provider::ReasoningDelta>;
            auto& slot = reasoning ? step->reasoning : step->text;
            // Text of the other part (reasoning, then text) goes out first, as its own delta
            // and before this part is announced.
            if (step->delta_part && (!slot || step->delta_part != &*slot)) publish_delta(*step);
            if (!slot) {
              Part p;
              p.id = ids::make("prt");
              p.session_id = session_id;
              p.message_id = step->message.id;
              p.type = reasoning ? Part::Type::Reasoning : Part::Type::Text;
              p.start = now_ms();
              slot = p;
              stage_part(turn, *slot);
            }
            slot->text += e.text;
            step->emitted = true;
            if (deps_.bus->has_subscribers()) {
              // Gathered and published once the stream's current read is handled: a fast model
              // sends hundreds of deltas in one read, and an event each overflowed the queue of
              // every /event subscriber (1,024 frames) before one frame could be written.
              step->delta_part = &*slot;
              step->delta += e.text;
              if (!step->delta_posted) {
                step->delta_posted = true;
                asio::post(executor, [self, step] {
                  step->delta_posted = false;
                  self->publish_delta(*step);
                });
              }
            }
          } else if constexpr (std::is_same_v<E, provider::ToolInputStart>) {
            Part p;
            p.id = ids::make("prt");
            p.session_id = session_id;
            p.message_id = step->message.id;
            p.type = Part::Type::Tool;
            p.call_id = e.id;
            p.tool = e.name;
            p.state.status = ToolState::Status::Pending;
            step->tools[e.id] = p;
            step->tool_order.push_back(e.id);
            step->emitted = true;
            stage_part(turn, p);
          } else if constexpr (std::is_same_v<E, provider::ToolInputDelta>) {
            if (auto it = step->tools.find(e.id); it != step->tools.end())
              it->second.state.raw += e.delta;
          } else if constexpr (std::is_same_v<E, provider::ToolCall>) {
            step->emitted = true;
            step->running->add();
            asio::co_spawn(executor, self->run_tool(step, std::move(e)),
                           [step](std::exception_ptr ex) {
                             if (ex) {
                               try {
                                 std::rethrow_exception(ex);
                               } catch (const std::exception& what) {
                                 log::error("tool call crashed: ", what.what());
                               }
                             }
                           });
          } else if constexpr (std::is_same_v<E, provider::StepFinish>) {
            step->finish = std::move(e);
          } else if constexpr (std::is_same_v<E, provider::StreamError>) {
            step->error = std::move(e);
          }
        },
        event);
  };

  asio::steady_timer backoff(executor);
  for (int attempt = 0;; ++attempt) {
    step->error.reset();
    step->finish.reset();
    co_await step->provider->stream(step->request, on_event, turn.abort);
    if (!step->error || !step->error->retryable || step->emitted || turn.abort->aborted() ||
        attempt >= options_.retry_attempts)
      break;
    std::chrono::milliseconds delay = std::min<std::chrono::milliseconds>(
        options_.retry_initial * (1LL << std::min(attempt, 20)), options_.retry_max);
    set_status(session_id,
               json::object{{"type", "retry"},
                            {"attempt", attempt + 1},
                            {"message", step->error->message},
                            {"next", static_cast<std::int64_t>(now_ms() + delay.count())}});
    backoff.expires_after(delay);
    {
      AbortSignal::Registration reg(turn.abort, [&backoff, executor] {
        asio::post(executor, [&backoff] { backoff.cancel(); });
      });
      co_await backoff.async_wait(tuple_awaitable);
    }
    set_status(session_id, json::object{{"type", "busy"}});
  }

  publish_delta(*step);
  // Server tools run concurrently and client calls wait for their clients; the step ends when
  // every call has its result (design.md decision 7).
  co_await step->running->wait();

  auto now = now_ms();
  for (auto* slot : {&step->text, &step->reasoning}) {
    if (!*slot) continue;
    (*slot)->end = now;
    stage_part(turn, **slot);
  }
  // A call whose input never finished streaming cannot run: it fails rather than hang.
  for (const auto& id : step->tool_order) {
    Part& p = step->tools[id];
    if (p.state.status != ToolState::Status::Pending) continue;
    p.state.status = ToolState::Status::Error;
    p.state.error = turn.abort->aborted() ? "Tool execution aborted"
                                          : "The model did not finish this tool call";
    p.state.start = p.state.end = now;
    stage_part(turn, p);
  }
}

asio::awaitable<Result<void>> SessionService::ask(std::shared_ptr<Step> step,
                                                  const std::string& call_id,
                                                  tool::PermissionRequest request) {
  using Channel = asio::experimental::concurrent_channel<void(boost::system::error_code,
                                                              permission::AskOutcome)>;
  auto channel = std::make_shared<Channel>(co_await asio::this_coro::executor, 1);
  Turn& turn = *step->turn;
  permission::AskParams params;
  params.session_id = turn.session.id;
  params.message_id = step->message.id;
  params.call_id = call_id;
  params.permission = request.permission;
  params.patterns = request.patterns;
  params.always = request.always;
  params.metadata = request.metadata;
  auto waiting =
      deps_.permissions->ask(std::move(params),
                             {std::cref(turn.agent.permission), std::cref(deps_.config_rules),
                              std::cref(turn.session_rules)},
                             [channel](permission::AskOutcome outcome) {
                               channel->try_send(boost::system::error_code{}, std::move(outcome));
                             });
  // Settled by the rules (allowed or denied at once): the answer is taken from the channel
  // without giving up the executor, so a tool that needs no person runs on (and ends without
  // waiting, see run_tool).
  std::optional<permission::AskOutcome> settled;
  if (!waiting)
    channel->try_receive([&settled](boost::system::error_code, permission::AskOutcome outcome) {
      settled = std::move(outcome);
    });
  if (!settled) {
    if (waiting && ++turn.awaiting == 1)
      set_status(turn.session.id, json::object{{"type", "awaiting-input"}});
    auto [ec, received] = co_await channel->async_receive(tuple_awaitable);
    if (waiting && --turn.awaiting == 0 && !turn.abort->aborted())
      set_status(turn.session.id, json::object{{"type", "busy"}});
    if (ec) co_return make_error(ErrorCode::Internal, "permission channel: " + ec.message());
    settled = std::move(received);
  }
  const permission::AskOutcome& outcome = *settled;
  if (!outcome) {
    if (outcome.error().halts_turn()) step->halt = true;
    co_return outcome.error().error();
  }
  co_return Result<void>{};
}

asio::awaitable<void> SessionService::run_tool(std::shared_ptr<Step> step,
                                               provider::ToolCall call) {
  Turn& turn = *step->turn;
  const std::string& session_id = turn.session.id;
  auto& parts = step->tools;
  if (!parts.count(call.id)) {
    Part p;
    p.id = ids::make("prt");
    p.session_id = session_id;
    p.message_id = step->message.id;
    p.type = Part::Type::Tool;
    p.call_id = call.id;
    p.tool = call.name;
    parts[call.id] = p;
    step->tool_order.push_back(call.id);
  }
  // Route what cannot run as asked to the `invalid` tool, whose output tells the model what to fix.
  std::string tool_name = call.name;
  json::value input = call.input;
  tool::ToolPtr tool;
  std::optional<std::string> invalid_reason;
  bool client_tool = false;
  std::vector<std::string> available;
  for (const auto& t : step->request.tools)
    available.push_back(t.name);
  if (!call.input_valid) {
    invalid_reason = call.input_error;
  } else if (std::find(available.begin(), available.end(), call.name) == available.end() ||
             !(tool = deps_.tools->find(call.name, session_id))) {
    invalid_reason = tool::unknown_tool_error(call.name, available);
  }
  json::object args;
  if (!invalid_reason) {
    auto prepared = tool::prepare_arguments(*tool, input);
    if (!prepared)
      invalid_reason = prepared.error().message;
    else
      args = std::move(*prepared);
  }
  if (invalid_reason) {
    tool = deps_.tools->find("invalid", session_id);
    tool_name = "invalid";
    args = json::object{{"tool", call.name}, {"error", *invalid_reason}};
  }
  auto client_def = deps_.tools->client_tools()->get_tool(tool_name);
  client_tool = client_def.has_value();

  Part& part = parts[call.id];
  part.tool = tool_name;
  part.state.status = ToolState::Status::Running;
  part.state.input = args;
  part.state.start = now_ms();
  stage_part(turn, part);
  // A restart must find a call that was running (and then mark it failed): one that still runs
  // when the write delay ends is stored as running then. One that ends sooner (a file read) is
  // stored once, with its result.
  flush(step->turn, false);

  auto finish = [&](Result<tool::ToolResult> result) {
    Part& p = step->tools[call.id];
    p.state.end = now_ms();
    if (turn.abort->aborted() && (!result || p.state.status == ToolState::Status::Running) &&
        !result) {
      p.state.status = ToolState::Status::Error;
      p.state.error = "Tool execution aborted";
    } else if (!result) {
      p.state.status = ToolState::Status::Error;
      p.state.error = result.error().message;
    } else {
      p.state.status = ToolState::Status::Completed;
      p.state.title = result->title;
      p.state.metadata = std::move(result->metadata);
      // What the tool cut itself (glob's first 100 files, bash past its capture limit) stays
      // said when the output is within the limits here.
      auto said = p.state.metadata.find("truncated");
      bool cut =
          said != p.state.metadata.end() && said->value().is_bool() && said->value().get_bool();
      if (result->bounded) {
        p.state.output = std::move(result->output);
      } else {
        auto truncated = tool::truncate_output(std::move(result->output), session_id, tool_name,
                                               tool::TruncateOptions{truncate_dir_});
        p.state.output = std::move(truncated.content);
        cut = cut || truncated.truncated;
        if (truncated.output_path) p.state.metadata["outputPath"] = truncated.output_path->string();
      }
      p.state.metadata["truncated"] = cut;
      p.state.attachments = std::move(result->attachments);
    }
    stage_part(turn, p);
    step->running->done();
  };

  if (!tool) {
    finish(make_error(ErrorCode::Internal, "the invalid tool is not registered"));
    co_return;
  }
  // The third identical call in a row asks before it runs (seed 002's doom loop).
  turn.calls.push_back({tool_name, json::value(args), false});
  if (permission::is_doom_loop(turn.calls, tool_name, json::value(args))) {
    // Named, not braced in the co_await: GCC 12 miscompiles braced temporaries there.
    tool::PermissionRequest request;
    request.permission = "doom_loop";
    request.patterns = {tool_name};
    request.always = {tool_name};
    request.metadata = json::object{{"tool", tool_name}, {"input", args}};
    auto ok = co_await ask(step, call.id, std::move(request));
    if (!ok) {
      finish(ok.error());
      co_return;
    }
  }
  if (client_tool) {
    tool::PermissionRequest request;
    request.permission = "client_tools";
    request.patterns = {tool_name};
    request.always = {tool_name};
    request.metadata = json::object{{"tool", tool_name}};
    auto ok = co_await ask(step, call.id, std::move(request));
    if (!ok) {
      finish(ok.error());
      co_return;
    }
  }

  tool::ToolContext ctx;
  ctx.session_id = session_id;
  ctx.message_id = step->message.id;
  ctx.call_id = call.id;
  ctx.agent = turn.agent.name;
  ctx.directory = options_.directory;
  ctx.data_dir = options_.data_dir;
  ctx.abort = turn.abort;
  auto self = shared_from_this();
  ctx.ask = [self, step, call_id = call.id](tool::PermissionRequest r) {
    return self->ask(step, call_id, std::move(r));
  };
  ctx.metadata = [self, step, call_id = call.id](std::optional<std::string> title,
                                                 json::object meta) {
    Part& p = step->tools[call_id];
    if (p.state.status != ToolState::Status::Running) return;
    if (title) p.state.title = *title;
    for (auto& [k, v] : meta)
      p.state.metadata[k] = v;
    self->publish_part(p);
  };
  ctx.awaiting_person = [self, step](bool waiting) {
    Turn& t = *step->turn;
    if (waiting && ++t.awaiting == 1)
      self->set_status(t.session.id, json::object{{"type", "awaiting-input"}});
    if (!waiting && --t.awaiting == 0 && !t.abort->aborted())
      self->set_status(t.session.id, json::object{{"type", "busy"}});
  };
  bool interactive = client_tool && client_def->interactive;
  if (interactive) ctx.set_awaiting_person(true);
  auto result = co_await tool->execute(std::move(args), ctx);
  if (interactive) ctx.set_awaiting_person(false);
  finish(std::move(result));
}

}  // namespace sb::session
