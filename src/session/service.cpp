#include "session/service.hpp"

#include <boost/asio/co_spawn.hpp>

#include <algorithm>
#include <ctime>
#include <set>

#include "session/project.hpp"
#include "util/ids.hpp"
#include "util/log.hpp"

namespace sb::session {

namespace asio = boost::asio;

namespace {

// What the turn after an automatic summary starts with (a synthetic user message).
constexpr std::string_view kContinueAfterSummary =
    "Go on with the work if there is a next step; if it is unclear how to go on, stop and ask.";

std::string default_title() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "New session - %Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

std::shared_ptr<SessionService> SessionService::create(ServiceDeps deps, ServiceOptions options) {
  auto service =
      std::shared_ptr<SessionService>(new SessionService(std::move(deps), std::move(options)));
  service->writer_->on_written([weak = service->weak_from_this()] {
    auto self = weak.lock();
    if (self && !self->unstored_ends_.empty()) self->release_stored_ends();
  });
  return service;
}

SessionService::SessionService(ServiceDeps deps, ServiceOptions options)
    : deps_(std::move(deps)),
      options_(std::move(options)),
      status_(std::make_shared<StatusBoard>(deps_.bus)),
      writer_(TurnWriter::create(deps_.executor, deps_.store, deps_.bus)),
      conversations_(std::make_shared<ConversationCache>(deps_.executor, deps_.store, status_)) {
  ProcessorDeps processor;
  processor.bus = deps_.bus;
  processor.tools = deps_.tools;
  processor.permissions = deps_.permissions;
  processor.config_rules = deps_.config_rules;
  processor.writer = writer_;
  processor.conversations = conversations_;
  processor.status = status_;
  processor_ = Processor::create(std::move(processor), options_);
}

Result<Recovered> SessionService::recover() {
  // Before the loop runs: nothing else waits for it, and nothing runs or stores here yet.
  auto found = find_recoverable(*deps_.store, deps_.agents, deps_.providers,
                                "The server stopped during this turn", {});
  if (!found) return found.error();
  return start_recovered(std::move(*found));
}

asio::awaitable<Result<Recovered>> SessionService::take_over() {
  if (!deps_.store->shared() || shutting_down_) co_return Recovered{};
  auto self = shared_from_this();
  // Each lambda named before its co_await (SessionStore::run).
  auto read_lost = [](SessionStore& s) -> Result<std::vector<std::string>> {
    return s.lost_claims();
  };
  auto lost = co_await deps_.store->run(std::move(read_lost));
  if (lost) let_go_lost_claims(*lost);
  auto find = [agents = deps_.agents, providers = deps_.providers,
               skip = busy_here()](SessionStore& s) {
    return find_recoverable(s, agents, providers, "The node running this turn stopped", skip);
  };
  auto found = co_await deps_.store->run(std::move(find));
  if (!found) co_return found.error();
  if (shutting_down_) {
    for (const auto& [sid, r] : found->resumable)
      deps_.store->post([id = sid](SessionStore& s) { s.release(id); });
    co_return Recovered{};
  }
  co_return start_recovered(std::move(*found));
}

asio::awaitable<Result<void>> SessionService::check_claims() {
  if (!deps_.store->shared() || shutting_down_) co_return Result<void>{};
  auto self = shared_from_this();
  // Both in one store call: the claims a broken connection lost are known once it is checked.
  // (the connection's outcome, the claims lost)
  using Checked = std::pair<Result<void>, std::vector<std::string>>;
  auto check = [](SessionStore& s) -> Result<Checked> {
    auto connection = s.check_connection();
    return Checked{std::move(connection), s.lost_claims()};
  };
  auto checked = co_await deps_.store->run(std::move(check));
  if (!checked) co_return checked.error();
  let_go_lost_claims(checked->second);
  co_return checked->first;
}

void SessionService::let_go_lost_claims(const std::vector<std::string>& lost) {
  for (const auto& session_id : lost) {
    // A turn whose end waits to be stored held it: that write is refused now (the other node's).
    unstored_ends_.erase(session_id);
    if (!turns_.count(session_id)) continue;
    log::warn("session ", session_id,
              ": another node took its turn over while this node was cut off from the store");
    turns_.at(session_id)->disowned = true;
    let_go(session_id, "another node took this session's turn over");
  }
}

void SessionService::release_stored_ends() {
  for (auto it = unstored_ends_.begin(); it != unstored_ends_.end();) {
    if (writer_->unstored(*it)) {
      ++it;
      continue;
    }
    deps_.store->post([id = *it](SessionStore& s) { s.release(id); });
    it = unstored_ends_.erase(it);
  }
}

std::set<std::string> SessionService::busy_here() const {
  std::set<std::string> busy = unstored_ends_;
  for (const auto& [id, turn] : turns_)
    busy.insert(id);
  busy.insert(starting_.begin(), starting_.end());
  for (const auto& [id, holds] : held_)
    busy.insert(id);
  return busy;
}

Result<SessionService::Recoverable> SessionService::find_recoverable(
    SessionStore& store, const std::map<std::string, Agent>& agents,
    const provider::ProviderSet& providers, const std::string& reason,
    const std::set<std::string>& skip) {
  auto open = store.open_messages();
  if (!open) return open.error();
  auto waits = store.waits();
  if (!waits) return waits.error();
  // On a shared store, the sessions whose claim no node holds: those of nodes that stopped.
  std::optional<std::set<std::string>> mine;
  // Claims of sessions whose turn does not go on here are given back (on every way out).
  struct GiveBack {
    SessionStore& store;
    std::optional<std::set<std::string>>& sessions;
    ~GiveBack() {
      if (sessions)
        for (const auto& id : *sessions)
          store.release(id);
    }
  } give_back{store, mine};
  if (store.shared()) {
    mine.emplace();
    std::set<std::string> candidates;
    for (const auto& m : *open)
      candidates.insert(m.info.session_id);
    for (const auto& w : *waits)
      candidates.insert(w.session_id);
    for (const auto& session_id : candidates) {
      // This node's own turn (its claim is re-entrant), or one whose end waits to be stored.
      if (skip.count(session_id)) continue;
      auto claimed = store.claim(session_id);
      if (!claimed) return claimed.error();
      if (*claimed) mine->insert(session_id);
    }
    if (mine->empty()) return Recoverable{};
    // Read again now that they are claimed: what was read before may be of a turn that another
    // node ended (and gave up its claim) in between.
    open = store.open_messages();
    if (!open) return open.error();
    waits = store.waits();
    if (!waits) return waits.error();
    std::erase_if(*open,
                  [&](const MessageWithParts& m) { return !mine->count(m.info.session_id); });
    std::erase_if(*waits, [&](const Wait& w) { return !mine->count(w.session_id); });
  }
  Recoverable found;
  auto& resumable = found.resumable;  // by session: its newest open message
  for (auto& m : *open) {
    resumable.erase(m.info.session_id);
    if (m.info.role != MessageInfo::Role::Assistant || m.info.summary) continue;
    // A step goes on only when the model's answer had ended (all its calls are known) and one
    // of its calls waits for a client.
    bool answered = std::any_of(m.parts.begin(), m.parts.end(),
                                [](const Part& p) { return p.type == Part::Type::StepFinish; });
    std::vector<Wait> its;
    for (const auto& w : *waits)
      if (w.message_id == m.info.id && w.session_id == m.info.session_id) its.push_back(w);
    if (!answered || its.empty()) continue;
    auto session = store.get_session(m.info.session_id);
    // A sub-session's turn ends with its parent's (the task tool's call failed with the server).
    if (!session || !*session || !(*session)->parent_id.empty()) continue;
    PromptInput as_before;
    as_before.agent = m.info.agent;
    as_before.model = m.info.provider_id + "/" + m.info.model_id;
    auto prompt = resolve_prompt(agents, providers, as_before);
    if (!prompt) {
      log::warn("session ", m.info.session_id, ": its waiting turn cannot go on (",
                prompt.error().message, ")");
      continue;
    }
    auto stored = store.list_messages(m.info.session_id);
    if (!stored) return stored.error();
    int steps_done = static_cast<int>(
        std::count_if(stored->begin(), stored->end(), [&](const MessageWithParts& s) {
          return s.info.role == MessageInfo::Role::Assistant &&
                 s.info.parent_id == m.info.parent_id;
        }));
    auto asked = std::find_if(stored->begin(), stored->end(), [&](const MessageWithParts& s) {
      return s.info.id == m.info.parent_id;
    });
    auto switches = asked != stored->end() ? asked->info.tools : std::map<std::string, bool>{};
    auto turn = std::make_shared<Turn>();
    turn->session = std::move(**session);
    std::string session_id = m.info.session_id;  // named: the assignment moves `m` first
    resumable[session_id] = Resumable{std::move(turn), std::move(*prompt), std::move(m),
                                      std::move(its),  steps_done,         std::move(switches)};
  }
  std::set<std::string> keep, keep_waits;
  for (const auto& [sid, r] : resumable) {
    keep.insert(r.open.info.id);
    for (const auto& w : r.waits)
      keep_waits.insert(w.id);
  }
  auto failed = store.fail_interrupted_turns(reason, keep, keep_waits, mine);
  if (!failed) return failed.error();
  found.failed = failed->size();
  if (mine)
    for (const auto& [sid, r] : resumable)
      mine->erase(sid);  // claimed by its turn now, given back at its end
  return found;
}

Recovered SessionService::start_recovered(Recoverable found) {
  Recovered recovered{found.failed, 0};
  for (auto& [sid, r] : found.resumable) {
    // A turn or an edit began here while the store was read (take_over runs beside the loop):
    // it has the session now, and what the other node left stays open for a later round.
    if (busy(sid)) {
      if (deps_.store->shared()) deps_.store->post([id = sid](SessionStore& s) { s.release(id); });
      continue;
    }
    turns_[sid] = r.turn;
    status_->set(sid, json::object{{"type", "busy"}});
    ++recovered.resumed;
    asio::co_spawn(deps_.executor,
                   resume(std::move(r.turn), std::move(r.prompt), std::move(r.open),
                          std::move(r.waits), r.steps_done, std::move(r.switches)),
                   [](std::exception_ptr ex) {
                     if (ex) log::error("a resumed turn crashed");
                   });
  }
  return recovered;
}

asio::awaitable<void> SessionService::resume(std::shared_ptr<Turn> turn, ResolvedPrompt prompt,
                                             MessageWithParts open, std::vector<Wait> waits,
                                             int steps_done, std::map<std::string, bool> switches) {
  auto self = shared_from_this();
  std::string session_id = turn->session.id;
  auto done = co_await processor_->resume_turn(std::move(turn), std::move(prompt), std::move(open),
                                               std::move(waits), steps_done, std::move(switches));
  if (!done) log::info("session ", session_id, ": resumed turn ended: ", done.error().message);
  end_turn(session_id);
}

// ---- sessions -------------------------------------------------------------------------------

asio::awaitable<Result<SessionInfo>> SessionService::create_session(CreateInput input) {
  auto self = shared_from_this();
  if (!input.parent_id.empty()) {
    auto parent = co_await deps_.store->call(&SessionStore::get_session, input.parent_id);
    if (!parent) co_return parent.error();
    if (!*parent)
      co_return make_error(ErrorCode::InvalidRequest,
                           "parentID: there is no session " + input.parent_id);
    // A client's session has children of that client only.
    if (auto owned = client_may_use(input.client_id, **parent); !owned) co_return owned.error();
  }
  SessionInfo s;
  s.id = ids::make("ses");
  s.title = input.title.empty() ? default_title() : input.title;
  s.directory = options_.directory.string();
  s.slug = slug_of(s.id);
  s.project_id = options_.project_id;
  s.client_id = std::move(input.client_id);
  s.parent_id = std::move(input.parent_id);
  s.permission = std::move(input.permission);
  s.created = s.updated = now_ms();
  if (auto r = co_await deps_.store->call(&SessionStore::put_session, s); !r) co_return r.error();
  deps_.bus->publish("session.created", json::object{{"sessionID", s.id}, {"info", to_json(s)}});
  co_return s;
}

asio::awaitable<Result<std::vector<SessionInfo>>> SessionService::list_sessions() {
  co_return co_await deps_.store->call(&SessionStore::list_sessions);
}

asio::awaitable<Result<SessionInfo>> SessionService::get_session(std::string id) {
  auto s = co_await deps_.store->call(&SessionStore::get_session, id);
  if (!s) co_return s.error();
  if (!*s) co_return make_error(ErrorCode::NotFound, "Session not found: " + id);
  co_return std::move(**s);
}

asio::awaitable<Result<void>> SessionService::validate_client_session(std::string client_id,
                                                                      std::string session_id) {
  auto s = co_await deps_.store->call(&SessionStore::get_session, session_id);
  if (!s) co_return s.error();
  // An unknown id protects nothing (ids are the server's, unguessable).
  if (!*s) co_return Result<void>{};
  co_return client_may_use(client_id, **s);
}

Result<void> SessionService::client_may_use(const std::string& client_id, const SessionInfo& s) {
  // A session without a client is open to every client.
  if (s.client_id.empty() || s.client_id == client_id) return {};
  return make_error(ErrorCode::Forbidden,
                    "session " + s.id + " belongs to another client; " +
                        (client_id.empty() ? std::string("only that client may use it")
                                           : "client \"" + client_id + "\" may not use it"));
}

asio::awaitable<Result<void>> SessionService::delete_session(std::string id) {
  auto self = shared_from_this();
  // A turn running here is aborted below; one on another node would store the session again.
  auto hold = co_await hold_unless_running(id);
  if (!hold) co_return hold.error();
  auto s = co_await get_session(id);
  if (!s) co_return s.error();
  writer_->forget_session(id);
  conversations_->forget(id);
  abort(id, "the session was deleted");
  deps_.permissions->forget_session(id);
  auto r = co_await deps_.store->call(&SessionStore::delete_session, id);
  if (!r) co_return r.error();
  deps_.bus->publish("session.deleted", json::object{{"sessionID", id}, {"info", to_json(*s)}});
  co_return Result<void>{};
}

asio::awaitable<Result<std::vector<MessageWithParts>>> SessionService::messages(
    std::string session_id, std::size_t limit) {
  auto self = shared_from_this();
  if (auto s = co_await get_session(session_id); !s) co_return s.error();
  // What turns have not stored yet (within the write delay), so that it is listed.
  co_await writer_->store_pending();
  co_return co_await deps_.store->call(&SessionStore::list_messages, session_id, limit);
}

asio::awaitable<Result<std::string>> SessionService::todos(std::string session_id) {
  auto self = shared_from_this();
  if (auto s = co_await get_session(session_id); !s) co_return s.error();
  auto text = co_await deps_.store->call(&SessionStore::get_todos, session_id);
  if (!text) co_return text.error();
  co_return text->empty() ? std::string("[]") : std::move(*text);
}

// ---- status ---------------------------------------------------------------------------------

json::object SessionService::status() const {
  return status_->all();
}

// ---- turns ----------------------------------------------------------------------------------

asio::awaitable<Result<std::shared_ptr<Turn>>> SessionService::begin_turn(std::string session_id,
                                                                          Ready ready) {
  auto self = shared_from_this();
  if (shutting_down_) co_return make_error(ErrorCode::Unavailable, "Server shutting down");
  if (running(session_id))
    co_return make_error(ErrorCode::Conflict,
                         "Session " + session_id + " is busy with another turn");
  if (busy(session_id)) co_return busy_error(session_id);
  // Reserved while the store is read: a second prompt meanwhile is refused, not a second turn.
  starting_.insert(session_id);
  struct Unreserve {
    std::set<std::string>& starting;
    const std::string& id;
    std::map<std::string, std::string>& aborted;
    ~Unreserve() {
      starting.erase(id);
      aborted.erase(id);
    }
  } unreserve{starting_, session_id, aborted_while_starting_};
  // Another node's turn (a cluster's shared store); the claim goes with the turn (end_turn).
  // Claimed before the session is read: another node's turn that ended just now has stored it.
  auto hold = co_await claim(session_id);
  if (!hold) co_return hold.error();
  auto session = co_await get_session(session_id);
  if (!session) co_return session.error();
  // Refused here, not in the turn: prompt_async's caller hears it.
  if (auto rules = readable_rules(*session); !rules) co_return rules.error();
  auto turn = std::make_shared<Turn>();
  turn->session = std::move(*session);
  // Before the revert is made final: a request refused here must leave it to unrevert.
  if (ready)
    if (auto r = co_await ready(turn->session); !r) co_return r.error();
  if (turn->session.revert) {
    auto settled = co_await settle_revert(std::move(turn->session));
    if (!settled) co_return settled.error();
    turn->session = std::move(*settled);
  }
  if (shutting_down_) co_return make_error(ErrorCode::Unavailable, "Server shutting down");
  hold->keep();
  turns_[session_id] = turn;
  status_->set(session_id, json::object{{"type", "busy"}});
  if (auto aborted = aborted_while_starting_.find(session_id);
      aborted != aborted_while_starting_.end()) {
    std::string reason = std::move(aborted->second);
    aborted_while_starting_.erase(aborted);
    abort(session_id, reason);
  }
  co_return turn;
}

void SessionService::end_turn(const std::string& session_id) {
  auto it = turns_.find(session_id);
  bool disowned = it != turns_.end() && it->second->disowned;
  turns_.erase(session_id);
  // Another node runs this session now: its status is that node's to tell (an idle event from
  // here would contradict it), and this node's busy entry goes (GET /session/status merges
  // every node's).
  if (disowned) {
    status_->forget(session_id);
    return;
  }
  // Its end is stored (the turn waited for it): another node may run the next turn, after which
  // what this node keeps of the conversation would be old. An end whose write failed keeps the
  // claim until the retry stores it (release_stored_ends), or another node would run the next
  // turn without it and the retry would then write the old turn over the new one.
  bool unstored = deps_.store->shared() && writer_->unstored(session_id);
  // Kept with the store's version of the session (checked at the next turn), read while the
  // claim still keeps other nodes from changing it.
  if (deps_.store->shared()) {
    if (unstored)
      conversations_->forget(session_id);
    else
      conversations_->stored(session_id);
  }
  if (unstored)
    unstored_ends_.insert(session_id);
  else
    deps_.store->post([session_id](SessionStore& s) { s.release(session_id); });
  status_->set(session_id, json::object{{"type", "idle"}});
}

bool SessionService::abort(const std::string& session_id, const std::string& reason) {
  auto it = turns_.find(session_id);
  if (it == turns_.end()) {
    // Its store calls are under way: the turn is aborted as soon as it is registered.
    if (!starting_.count(session_id)) return false;
    aborted_while_starting_[session_id] = reason;
    return true;
  }
  // A copy: abort() runs the turn's callbacks, and the turn must outlive them whatever they do.
  std::shared_ptr<Turn> turn = it->second;
  turn->abort->abort(reason);
  deps_.permissions->cancel_session(session_id, reason);
  if (deps_.questions) deps_.questions->cancel_session(session_id, reason);
  return true;
}

void SessionService::shutdown() {
  shutting_down_ = true;
  // Copied first: abort() runs callbacks, and nothing they do may invalidate this loop.
  std::vector<std::string> ids;
  for (const auto& [id, t] : turns_)
    ids.push_back(id);
  // The turns store their ends at once from here on.
  writer_->store_at_once();
  for (const auto& id : ids)
    let_go(id, "the server is shutting down");
  // What waits for the write delay is stored now, so that no write timer holds the stop up.
  writer_->store_waiting();
}

void SessionService::let_go(const std::string& session_id, const std::string& reason) {
  auto it = turns_.find(session_id);
  if (it == turns_.end()) return;
  std::shared_ptr<Turn> turn = it->second;
  // A turn that only waits for clients goes on after the restart (design.md decision 5), or on
  // the node that took it: its calls end here unanswered, without a cancel (the clients may
  // answer the server that goes on with it), and what it stored stays open. A sub-session's
  // turn ends with its parent's.
  if (turn->session.parent_id.empty() && Processor::can_suspend(*turn)) {
    turn->suspended = true;
    const auto& clients = deps_.tools ? deps_.tools->client_tools() : nullptr;
    auto step = turn->step.lock();
    // What the stop ends here waits again after it: a client call released now (one whose
    // result is on its way is not), asks and questions that the stop cancels next.
    for (const auto& [call_id, wait] : step->waits)
      if (!wait.client || (clients && clients->release(wait.id))) step->released.insert(call_id);
    if (!shutting_down_) {
      // Cancelled here, not answered: the node that goes on with the turn asks again.
      deps_.permissions->cancel_session(session_id, reason);
      if (deps_.questions) deps_.questions->cancel_session(session_id, reason);
    }
    return;
  }
  abort(session_id, reason);
}

asio::awaitable<Result<MessageWithParts>> SessionService::prompt(std::string session_id,
                                                                 PromptInput input) {
  auto self = shared_from_this();
  // Looked up once the session is known to be free (a busy session is a Conflict whatever the
  // prompt names), and before a pending revert is made final (a refused prompt leaves it).
  std::optional<ResolvedPrompt> resolved;
  // Named: GCC 12 and a conversion inside co_await.
  Ready ready = [&](const SessionInfo& session) -> asio::awaitable<Result<void>> {
    auto found = resolve_prompt(deps_.agents, deps_.providers, input);
    if (!found) co_return found.error();
    if (auto read = read_prompt_files(input, session.directory, options_.files, *found); !read)
      co_return read.error();
    resolved = std::move(*found);
    co_return Result<void>{};
  };
  auto turn = co_await begin_turn(session_id, std::move(ready));
  if (!turn) co_return turn.error();
  auto result = co_await processor_->run_turn(*turn, std::move(input), std::move(*resolved));
  end_turn(session_id);
  co_return result;
}

asio::awaitable<Result<bool>> SessionService::summarize(std::string session_id,
                                                        std::optional<std::string> model,
                                                        bool auto_continue) {
  auto self = shared_from_this();
  PromptInput input;
  input.model = std::move(model);
  input.compact = true;
  input.auto_continue = auto_continue;
  // Looked up once the session is known to be free (a busy session is a Conflict whatever the
  // request names), as for a prompt.
  std::optional<ResolvedPrompt> resolved;
  Ready ready = [&](const SessionInfo&) -> asio::awaitable<Result<void>> {
    // The session's agent and model (its last prompt's) unless the request names a model:
    // the summary needs the context the conversation was held in, and the turn after it
    // goes on as the session did. A stored choice the config no longer has falls back to the
    // defaults.
    auto stored = co_await messages(session_id);
    if (!stored) co_return stored.error();
    auto last = std::find_if(stored->rbegin(), stored->rend(), [](const MessageWithParts& m) {
      return m.info.role == MessageInfo::Role::User && !m.info.provider_id.empty();
    });
    if (last != stored->rend()) {
      PromptInput as_before = input;
      as_before.agent = last->info.agent;
      if (!as_before.model) as_before.model = last->info.provider_id + "/" + last->info.model_id;
      if (auto found = resolve_prompt(deps_.agents, deps_.providers, as_before)) {
        input = std::move(as_before);
        resolved = std::move(*found);
        co_return Result<void>{};
      }
    }
    auto found = resolve_prompt(deps_.agents, deps_.providers, input);
    if (!found) co_return found.error();
    resolved = std::move(*found);
    co_return Result<void>{};
  };
  auto turn = co_await begin_turn(session_id, std::move(ready));
  if (!turn) co_return turn.error();
  auto summary = co_await processor_->run_turn(*turn, input, *resolved);
  // The conversation in memory holds everything before the summary and the request for it:
  // read again, it starts at the summary.
  conversations_->forget(session_id);
  bool summarized = summary && summary->info.summary && !summary->info.error;
  if (summarized) deps_.bus->publish("session.compacted", json::object{{"sessionID", session_id}});
  if (summarized && auto_continue && !(*turn)->abort->aborted()) {
    // The same turn for its clients (one busy period, one abort), a new one for the writer.
    auto next = std::make_shared<Turn>();
    next->session = (*turn)->session;
    next->abort = (*turn)->abort;
    turns_[session_id] = next;
    PromptInput go_on;
    go_on.text = std::string(kContinueAfterSummary);
    go_on.synthetic = true;
    go_on.model = input.model;
    go_on.agent = input.agent;
    auto r = co_await processor_->run_turn(next, std::move(go_on), std::move(*resolved));
    if (!r) log::warn("the turn after the summary of ", session_id, " failed: ", r.error().message);
  }
  end_turn(session_id);
  if (!summary) co_return summary.error();
  co_return summarized;
}

asio::awaitable<Result<void>> SessionService::prompt_async(std::string session_id,
                                                           PromptInput input) {
  auto self = shared_from_this();
  auto session = co_await get_session(session_id);
  if (!session) co_return session.error();
  // Checked before the turn starts: once prompt_async has answered 204, an unknown agent or
  // model (or an unreadable file) would reach nobody but the log.
  auto resolved = resolve_prompt(deps_.agents, deps_.providers, input);
  if (!resolved) co_return resolved.error();
  if (auto read = read_prompt_files(input, session->directory, options_.files, *resolved); !read)
    co_return read.error();
  Ready checked_above;
  auto turn = co_await begin_turn(session_id, std::move(checked_above));
  if (!turn) co_return turn.error();
  asio::co_spawn(
      deps_.executor,
      [self = shared_from_this(), turn = *turn, input = std::move(input),
       resolved = std::move(*resolved), session_id]() mutable -> asio::awaitable<void> {
        auto r = co_await self->processor_->run_turn(turn, std::move(input), std::move(resolved));
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
  co_return Result<void>{};
}

asio::awaitable<Result<std::string>> SessionService::remove_last_answer(std::string session_id) {
  auto self = shared_from_this();
  auto idle = co_await hold_idle(session_id);
  if (!idle) co_return idle.error();
  auto all = co_await messages(session_id);
  if (!all) co_return all.error();
  auto last_user = std::find_if(all->rbegin(), all->rend(), [](const MessageWithParts& m) {
    return m.info.role == MessageInfo::Role::User;
  });
  if (last_user == all->rend())
    co_return make_error(ErrorCode::NotFound,
                         "Session " + session_id + " has no message to answer");
  std::string answered = last_user->info.id;
  if (auto r =
          co_await deps_.store->call(&SessionStore::delete_messages_after, session_id, answered);
      !r)
    co_return r.error();
  // The model must not see the answer it is asked to replace.
  conversations_->forget(session_id);
  co_return answered;
}

asio::awaitable<Result<tool::TaskOutcome>> SessionService::run_subtask(tool::TaskRequest request) {
  CreateInput input;
  input.title = request.description + " (@" + request.agent + " subagent)";
  input.parent_id = request.parent_session_id;
  // The sub-session belongs to the parent's client, so it offers that client's tools only.
  if (auto parent = co_await get_session(request.parent_session_id))
    input.client_id = parent->client_id;
  auto child = co_await create_session(std::move(input));
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
  const auto& error = last->info.error;
  // A person stopping the sub-agent (a rejected ask) is an answer, not a failure: the parent's
  // model reads what the sub-agent said and why it stopped.
  bool stopped = error && error->name == "PermissionRejectedError";
  if (error && !stopped)
    co_return make_error(ErrorCode::Unavailable,
                         "The sub-agent failed: " + error->name + ": " + error->message);
  std::string text;
  for (const auto& p : last->parts)
    if (p.type == Part::Type::Text) text += (text.empty() ? "" : "\n") + p.text;
  if (stopped) text += (text.empty() ? "" : "\n\n") + ("The sub-agent stopped: " + error->message);
  co_return tool::TaskOutcome{child->id, text};
}

asio::awaitable<Result<std::vector<tool::ToolPtr>>> SessionService::offered_tools(
    std::string session_id, std::string agent_name, std::map<std::string, bool> switches) {
  auto self = shared_from_this();
  std::optional<SessionInfo> session;
  if (!session_id.empty()) {
    auto s = co_await get_session(session_id);
    if (!s) co_return s.error();
    session = std::move(*s);
  }
  auto agent = deps_.agents.find(agent_name.empty() ? "build" : agent_name);
  if (agent == deps_.agents.end())
    co_return make_error(ErrorCode::NotFound, "Unknown agent: " + agent_name);
  co_return session::offered_tools(agent->second, session ? &*session : nullptr, deps_.config_rules,
                                   *deps_.permissions, *deps_.tools, switches);
}

}  // namespace sb::session
