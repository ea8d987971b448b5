#include "clienttool/registry.hpp"

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/post.hpp>

#include <algorithm>

#include "clienttool/wire.hpp"
#include "util/clock.hpp"
#include "util/complete.hpp"
#include "util/ids.hpp"
#include "util/log.hpp"

namespace sb::clienttool {
namespace {

std::string tool_id_for(const std::string& client_id, const std::string& name) {
  return "client_" + client_id + "_" + name;
}

json::object call_properties(const StartedCall& call, const ExecutionRequest& req) {
  return json::object{{"sessionID", req.session_id}, {"messageID", req.message_id},
                      {"callID", req.call_id},       {"tool", call.tool_id},
                      {"clientID", call.client_id},  {"requestID", call.request_id}};
}

}  // namespace

std::shared_ptr<ClientToolRegistry> ClientToolRegistry::create(
    boost::asio::any_io_executor executor, std::shared_ptr<bus::EventBus> bus,
    RegistryOptions options) {
  return std::shared_ptr<ClientToolRegistry>(
      new ClientToolRegistry(std::move(executor), std::move(bus), options));
}

ClientToolRegistry::ClientToolRegistry(boost::asio::any_io_executor executor,
                                       std::shared_ptr<bus::EventBus> bus, RegistryOptions options)
    : options_(options), bus_(std::move(bus)), executor_(std::move(executor)), timer_(executor_) {
  // Event ids outlive the process: a client that reconnects to a restarted server sends the old
  // process's Last-Event-ID. Starting from the clock (microseconds) keeps new ids above it as long
  // as fewer than a million requests a second were issued.
  next_seq_ = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                             std::chrono::system_clock::now().time_since_epoch())
                                             .count());
}

ClientToolRegistry::~ClientToolRegistry() {
  // Whoever still waits on a call hears that it ended, even when shutdown() was never called.
  for (auto& [request_id, call] : pending_)
    complete_later(executor_, std::move(call.done),
                   make_error(ErrorCode::Unavailable, "Server shutting down"));
}

// ---- tools ----------------------------------------------------------------------------------

Result<std::vector<std::string>> ClientToolRegistry::register_tools(const std::string& client_id,
                                                                    std::vector<ToolSpec> specs,
                                                                    const std::string& session_id,
                                                                    bool plain_names,
                                                                    Origin origin) {
  if (!valid_name(client_id))
    return make_error(
        ErrorCode::InvalidRequest,
        "clientID must be 1-128 letters, digits, '_' or '-', got \"" + client_id + "\"");
  std::vector<std::shared_ptr<ToolDefinition>> defs;
  defs.reserve(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    auto& spec = specs[i];
    std::string at = "tools[" + std::to_string(i) + "]";
    if (!valid_name(spec.name))
      return make_error(
          ErrorCode::InvalidRequest,
          at + ".id must be 1-128 letters, digits, '_' or '-', got \"" + spec.name + "\"");
    auto schema = shared_schema(spec.parameters);
    if (!schema)
      return make_error(ErrorCode::InvalidRequest, at + ".parameters " + schema.error().message);
    auto def = std::make_shared<ToolDefinition>();
    def->id = tool_id_for(client_id, spec.name);
    def->name = std::move(spec.name);
    def->client_id = client_id;
    def->description = std::move(spec.description);
    def->parameters = std::move(spec.parameters);
    def->schema = std::move(*schema);
    def->interactive = spec.interactive;
    def->session_id = session_id;
    def->plain_name = plain_names && !session_id.empty();
    defs.push_back(std::move(def));
  }

  // Ids are client_{clientID}_{name}, and both parts may contain '_': client "a" with tool "b_c"
  // and client "a_b" with tool "c" would share an id. The first owner keeps it.
  for (const auto& def : defs) {
    auto owner = tool_owner_.find(def->id);
    if (owner != tool_owner_.end() && owner->second != client_id)
      return make_error(ErrorCode::Conflict, "tool id " + def->id + " already belongs to client " +
                                                 owner->second + "; choose another tool name");
  }
  std::vector<std::string> ids;
  auto& client = clients_[client_id];
  for (const auto& def : defs) {
    ids.push_back(def->id);
    tool_owner_[def->id] = client_id;
    client.tools.insert_or_assign(def->id, def);
  }
  if (origin == Origin::OtherNode) return ids;
  bus_->publish("client-tool.registered",
                json::object{{"clientID", client_id}, {"toolIDs", to_json(ids)}});
  if (auto mirror = mirror_.lock(); mirror && !plain_names) {
    std::vector<Definition> shared(defs.begin(), defs.end());
    mirror->registered(client_id, shared);
  }
  return ids;
}

// Every client of an application registers the same tools: a schema that a registered tool
// already has compiled is shared, not compiled again (measured: 1.3 KB and 40 us a client). Only
// live definitions keep an entry alive; dead entries are swept when the table has doubled.
Result<std::shared_ptr<const CompiledSchema>> ClientToolRegistry::shared_schema(
    const json::value& parameters) {
  std::string key = parameters.is_object() ? json::serialize(parameters) : std::string();
  if (!key.empty())
    if (auto it = schemas_.find(key); it != schemas_.end())
      if (auto live = it->second.lock()) return live;
  auto compiled = CompiledSchema::compile(parameters);
  if (!compiled || key.empty()) return compiled;
  schemas_.insert_or_assign(std::move(key), *compiled);
  if (schemas_.size() >= 2 * swept_size_) {
    std::erase_if(schemas_, [](const auto& entry) { return entry.second.expired(); });
    swept_size_ = std::max<std::size_t>(schemas_.size(), 16);
  }
  return compiled;
}

std::vector<std::string> ClientToolRegistry::unregister(
    const std::string& client_id, const std::optional<std::vector<std::string>>& ids,
    Origin origin) {
  std::vector<std::string> removed;
  Effects effects;
  auto it = clients_.find(client_id);
  if (it == clients_.end()) return removed;
  ClientState& client = it->second;
  if (!ids) {
    for (auto& [id, def] : client.tools)
      removed.push_back(id);
  } else {
    for (const auto& given : *ids) {
      std::string id = client.tools.count(given) ? given : tool_id_for(client_id, given);
      if (client.tools.count(id) && std::find(removed.begin(), removed.end(), id) == removed.end())
        removed.push_back(id);
    }
  }
  for (const auto& id : removed) {
    client.tools.erase(id);
    tool_owner_.erase(id);
  }
  // Calls waiting on a tool that no longer exists can never be answered by it.
  std::vector<std::string> orphaned;
  for (const auto& [seq, request_id] : client.pending) {
    const auto& call = pending_.at(request_id);
    if (std::find(removed.begin(), removed.end(), call.call.tool_id) != removed.end())
      orphaned.push_back(request_id);
  }
  for (const auto& request_id : orphaned) {
    std::string tool = pending_.at(request_id).call.tool_id;
    finish(request_id, make_error(ErrorCode::Unavailable, "Tool " + tool + " was unregistered"),
           std::string("tool unregistered"), "failed: the tool was unregistered", effects);
  }
  if (client.tools.empty() && client.pending.empty() && !client.sink && !client.grace)
    clients_.erase(it);
  if (!removed.empty() && origin == Origin::Here) {
    bus_->publish("client-tool.unregistered",
                  json::object{{"clientID", client_id}, {"toolIDs", to_json(removed)}});
    if (auto mirror = mirror_.lock()) mirror->unregistered(client_id, removed);
  }
  for (auto& effect : effects)
    effect();
  return removed;
}

std::map<std::string, std::vector<ClientToolRegistry::Definition>> ClientToolRegistry::all_clients()
    const {
  std::map<std::string, std::vector<Definition>> out;
  for (const auto& [client_id, client] : clients_) {
    auto& tools = out[client_id];
    for (const auto& [id, def] : client.tools)
      tools.push_back(def);
  }
  return out;
}

std::vector<ClientToolRegistry::Definition> ClientToolRegistry::get_tools(
    const std::string& client_id) const {
  std::vector<Definition> out;
  auto it = clients_.find(client_id);
  if (it == clients_.end()) return out;
  for (const auto& [id, def] : it->second.tools)
    out.push_back(def);
  return out;
}

std::map<std::string, ClientToolRegistry::Definition> ClientToolRegistry::get_all_tools() const {
  std::map<std::string, Definition> out;
  for (const auto& [client_id, client] : clients_)
    for (const auto& [id, def] : client.tools)
      out.emplace(id, def);
  return out;
}

ClientToolRegistry::Definition ClientToolRegistry::get_tool(const std::string& tool_id) const {
  auto owner = tool_owner_.find(tool_id);
  if (owner == tool_owner_.end()) return nullptr;
  auto client = clients_.find(owner->second);
  if (client == clients_.end()) return nullptr;
  auto def = client->second.tools.find(tool_id);
  if (def == client->second.tools.end()) return nullptr;
  return def->second;
}

std::optional<std::string> ClientToolRegistry::resolve(const std::string& tool,
                                                       const std::string& client_id) const {
  if (!client_id.empty()) {
    std::string full = tool_id_for(client_id, tool);
    if (tool_owner_.count(full)) return full;
    auto it = tool_owner_.find(tool);
    if (it != tool_owner_.end() && it->second == client_id) return tool;
    return std::nullopt;
  }
  if (tool_owner_.count(tool)) return tool;
  return std::nullopt;
}

// ---- calls ----------------------------------------------------------------------------------

void ClientToolRegistry::initiate_execute(ExecuteParams params, ProgressHandler progress,
                                          ExecuteHandler done) {
  auto started = start_call(params, progress, done);
  if (!started) complete_later(executor_, std::move(done), started.error());
}

Result<StartedCall> ClientToolRegistry::execute(ExecuteParams params, ExecuteHandler done,
                                                ProgressHandler progress) {
  return start_call(params, progress, done);
}

Result<StartedCall> ClientToolRegistry::start_call(ExecuteParams& params, ProgressHandler& progress,
                                                   ExecuteHandler& done) {
  if (params.resume) return resume_call(params, progress, done);
  Definition def = std::move(params.definition);
  if (!def) {
    if (params.tool.empty()) return make_error(ErrorCode::InvalidRequest, "tool is required");
    if (shutting_down_) return make_error(ErrorCode::Unavailable, "Server shutting down");
    auto resolved = resolve(params.tool, params.client_id);
    if (!resolved) {
      std::string msg = "Unknown client tool: " + params.tool;
      if (!params.client_id.empty()) msg += " (client " + params.client_id + ")";
      return make_error(ErrorCode::NotFound, msg);
    }
    def = clients_.at(tool_owner_.at(*resolved)).tools.at(*resolved);
  }
  const std::string& tool_id = def->id;
  const std::string& client_id = def->client_id;
  // The input keeps the caller's storage (the execute route parses into a buffer on its stack):
  // moved into a value without a copy, validated, and serialized once into the request.
  json::value input(std::move(params.input));
  if (!params.input_checked)
    if (auto valid = def->schema->validate(input); !valid) return valid.error();

  // A person answers an interactive tool (a dialog, a form): they get the longest wait, not the
  // few seconds a program needs.
  milliseconds fallback = def->interactive ? options_.max_timeout : options_.default_timeout;
  milliseconds timeout = std::min(params.timeout.value_or(fallback), options_.max_timeout);
  if (timeout.count() <= 0)
    return make_error(ErrorCode::InvalidRequest, "timeout must be a positive number of ms");

  ExecutionRequest req;
  req.request_id = ids::make("req");
  req.session_id = std::move(params.session_id);
  req.message_id = params.message_id.empty() ? ids::make("msg") : std::move(params.message_id);
  req.call_id = params.call_id.empty() ? ids::make("call") : std::move(params.call_id);
  req.tool = tool_id;
  StartedCall started{req.request_id, tool_id, client_id};
  auto message = std::make_shared<ClientMessage>();
  message->kind = ClientMessage::Kind::Request;
  message->request_id = req.request_id;
  message->request_json = serialize(req, input.get_object());
  // The event's payload is built only for someone to read it.
  std::optional<json::object> request_event;
  if (bus_->has_subscribers())
    request_event =
        json::object{{"clientID", client_id}, {"request", to_json(req, input.get_object())}};

  if (shutting_down_) return make_error(ErrorCode::Unavailable, "Server shutting down");
  auto cit = clients_.find(client_id);
  // The tool may have gone since the caller found it.
  if (cit == clients_.end() || !cit->second.tools.count(tool_id))
    return make_error(ErrorCode::NotFound, "Unknown client tool: " + tool_id);
  ClientState& client = cit->second;
  // The pending-call limits count calls, not time: checked before the rate limit, so that a
  // refused call does not use up the client's executions of the minute.
  if (client.pending.size() >= options_.max_pending_per_client)
    return make_error(ErrorCode::RateLimited,
                      "Client " + client_id + " already has " +
                          std::to_string(client.pending.size()) +
                          " calls waiting for results, the limit "
                          "(clientTools.maxPendingPerClient); try again when some have ended");
  if (!req.session_id.empty()) {
    auto sit = pending_per_session_.find(req.session_id);
    if (sit != pending_per_session_.end() && sit->second >= options_.max_pending_per_session)
      return make_error(ErrorCode::RateLimited,
                        "Session " + req.session_id + " already has " +
                            std::to_string(sit->second) +
                            " client-tool calls waiting for results, the limit "
                            "(clientTools.maxPendingPerSession); try again when some have ended");
  }
  if (options_.rate_limit > 0) {
    auto now = Clock::now();
    if (now - client.window_start >= std::chrono::minutes(1)) {
      client.window_start = now;
      client.window_count = 0;
    }
    if (client.window_count >= options_.rate_limit) {
      // A fixed window: its first slot frees when the window ends (rounded up, at least 1 s).
      auto wait = std::max(std::chrono::ceil<std::chrono::seconds>(client.window_start +
                                                                   std::chrono::minutes(1) - now),
                           std::chrono::seconds(1));
      Error refused =
          make_error(ErrorCode::RateLimited,
                     "Client " + client_id + " exceeded " + std::to_string(options_.rate_limit) +
                         " executions per minute (clientTools.rateLimit); try again in " +
                         std::to_string(wait.count()) + " s");
      refused.retry_after = wait;
      return refused;
    }
    ++client.window_count;
  }

  // Above the last id, and the clock's microseconds: the nodes of a cluster each issue ids for
  // one client's stream (whose Last-Event-ID replays what came after it), and the clock keeps
  // theirs in the order they were issued as far as the nodes' clocks agree.
  next_seq_ =
      std::max(next_seq_ + 1,
               static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                              std::chrono::system_clock::now().time_since_epoch())
                                              .count()));
  message->seq = next_seq_;
  auto now = Clock::now();
  PendingCall call;
  call.call = started;
  call.message = message;
  call.timeout = timeout;
  call.hard_deadline = now + options_.max_timeout;
  call.deadline = now + timeout;
  call.request = std::move(req);
  if (params.on_waiting) {
    auto epoch_ms = [&](Clock::time_point at) {
      return now_ms() + std::chrono::duration_cast<milliseconds>(at - now).count();
    };
    // Told before the request goes out: what is stored of the wait is there before a client
    // can answer it.
    params.on_waiting(
        WaitingCall{call.request.request_id, client_id, tool_id, call.request.session_id,
                    call.request.message_id, call.request.call_id, def->interactive, message->seq,
                    timeout.count(), epoch_ms(call.deadline), epoch_ms(call.hard_deadline)});
  }
  add_pending(client, std::move(call), params, progress, done, std::move(request_event));
  return started;
}

Result<StartedCall> ClientToolRegistry::resume_call(ExecuteParams& params,
                                                    ProgressHandler& progress,
                                                    ExecuteHandler& done) {
  const WaitingCall& stored = *params.resume;
  if (shutting_down_) return make_error(ErrorCode::Unavailable, "Server shutting down");
  if (pending_.count(stored.request_id) || ended_.count(stored.request_id))
    return make_error(ErrorCode::Conflict, "Request " + stored.request_id + " was made already");
  ExecutionRequest req;
  req.request_id = stored.request_id;
  req.session_id = stored.session_id;
  req.message_id = stored.message_id;
  req.call_id = stored.call_id;
  req.tool = stored.tool;
  auto message = std::make_shared<ClientMessage>();
  message->kind = ClientMessage::Kind::Request;
  message->request_id = req.request_id;
  message->request_json = serialize(req, params.input);
  message->seq = stored.seq;
  // New ids stay above the ones restored (the clock starts them above them anyway, unless the
  // clock went back).
  next_seq_ = std::max(next_seq_, stored.seq);
  // The stored deadlines are wall-clock times: as far from now as they were from the epoch.
  auto now = Clock::now();
  auto epoch_now = now_ms();
  PendingCall call;
  call.call = StartedCall{req.request_id, req.tool, stored.client_id};
  call.message = message;
  call.timeout =
      milliseconds(std::clamp<std::int64_t>(stored.timeout_ms, 1, options_.max_timeout.count()));
  // Clamped: a stored value is outside input (a deadline years away would overflow the clock).
  auto left = [&](std::int64_t at) {
    return milliseconds(std::clamp<std::int64_t>(at - epoch_now, -1, options_.max_timeout.count()));
  };
  call.deadline = now + left(stored.deadline);
  call.hard_deadline = now + left(stored.hard_deadline);
  call.resumed = true;
  call.request = std::move(req);
  StartedCall started = call.call;
  std::optional<json::object> request_event;
  if (bus_->has_subscribers())
    request_event = json::object{{"clientID", stored.client_id},
                                 {"request", to_json(call.request, params.input)}};
  add_pending(clients_[stored.client_id], std::move(call), params, progress, done,
              std::move(request_event));
  return started;
}

void ClientToolRegistry::add_pending(ClientState& client, PendingCall call, ExecuteParams& params,
                                     ProgressHandler& progress, ExecuteHandler& done,
                                     std::optional<json::object> request_event) {
  if (!call.request.session_id.empty()) ++pending_per_session_[call.request.session_id];
  // Swapped in: Boost 1.81's move assignment of any_completion_handler wraps the handler in
  // itself, without end.
  call.done.swap(done);
  call.progress = std::move(progress);
  std::string request_id = call.call.request_id;
  client.pending.emplace(call.message->seq, request_id);
  auto [pit, inserted] = pending_.emplace(request_id, std::move(call));
  // The caller gives up through the handler's slot. The cancel is posted: it completes the
  // handler, which must not happen inside the slot's own callback.
  if (auto slot = boost::asio::get_associated_cancellation_slot(pit->second.done);
      slot.is_connected())
    slot.assign([weak = weak_from_this(), request_id, reason = std::move(params.cancel_reason),
                 executor = executor_](boost::asio::cancellation_type) {
      boost::asio::post(executor, [weak, request_id, why = reason ? reason() : "cancelled"] {
        if (auto self = weak.lock()) self->cancel(request_id, why);
      });
    });
  Effects effects;
  if (client.sink) deliver(client, pit->second, effects);
  ensure_ticking();
  if (request_event) bus_->publish("client-tool.request", std::move(*request_event));
  for (auto& effect : effects)
    effect();
}

void ClientToolRegistry::deliver(ClientState& client, PendingCall& call, Effects& effects) {
  bool first = !call.delivered;
  call.delivered = true;
  effects.push_back([sink = client.sink, message = call.message] { sink->deliver(message); });
  if (first && bus_->has_subscribers())
    effects.push_back([bus = bus_, props = call_properties(call.call, call.request)]() mutable {
      bus->publish("client-tool.executing", std::move(props));
    });
}

void ClientToolRegistry::remember_ended(const std::string& request_id, std::string how) {
  ended_.insert_or_assign(request_id, std::move(how));
  ended_order_.push_back(request_id);
  while (ended_order_.size() > options_.remembered_results) {
    ended_.erase(ended_order_.front());
    ended_order_.pop_front();
  }
}

void ClientToolRegistry::finish(const std::string& request_id, ExecuteOutcome outcome,
                                std::optional<std::string> cancel_reason, std::string ended_how,
                                Effects& effects, bool announce) {
  auto it = pending_.find(request_id);
  if (it == pending_.end()) return;
  PendingCall call = std::move(it->second);
  pending_.erase(it);
  remember_ended(request_id, std::move(ended_how));
  if (!call.request.session_id.empty()) {
    auto sit = pending_per_session_.find(call.request.session_id);
    if (sit != pending_per_session_.end() && --sit->second == 0) pending_per_session_.erase(sit);
  }

  std::shared_ptr<ClientSink> sink;
  if (auto cit = clients_.find(call.call.client_id); cit != clients_.end()) {
    cit->second.pending.erase({call.message->seq, request_id});
    sink = cit->second.sink;
  }
  if (cancel_reason && sink && call.delivered) {
    auto cancel = std::make_shared<ClientMessage>();
    cancel->kind = ClientMessage::Kind::Cancel;
    cancel->request_id = request_id;
    cancel->reason = *cancel_reason;
    effects.push_back([sink, cancel] { sink->deliver(cancel); });
  }

  if (announce && bus_->has_subscribers()) {
    json::object props = call_properties(call.call, call.request);
    const char* type = "client-tool.completed";
    if (!outcome) {
      type = "client-tool.failed";
      props["error"] = outcome.error().message;
    } else if (!outcome->success) {
      type = "client-tool.failed";
      props["error"] = outcome->error;
    } else {
      props["success"] = true;
    }
    effects.push_back([bus = bus_, type, props = std::move(props)]() mutable {
      bus->publish(type, std::move(props));
    });
  }
  // Posted: the handler never runs inside the registry.
  complete_later(executor_, std::move(call.done), std::move(outcome));
}

Result<ClientToolRegistry::PendingCall*> ClientToolRegistry::answerable(
    const std::string& request_id, const std::optional<std::string>& from_client) {
  auto it = pending_.find(request_id);
  if (it == pending_.end()) {
    if (auto ended = ended_.find(request_id); ended != ended_.end())
      return make_error(ErrorCode::Conflict,
                        "Request " + request_id + " already ended (" + ended->second + ")");
    return make_error(ErrorCode::NotFound, "Unknown request ID: " + request_id);
  }
  if (from_client && *from_client != it->second.call.client_id)
    return make_error(ErrorCode::Forbidden,
                      "Request " + request_id + " was not sent to client " + *from_client);
  return &it->second;
}

Result<void> ClientToolRegistry::submit_result(const std::string& request_id,
                                               const std::optional<std::string>& from_client,
                                               ToolResponse response) {
  if (auto call = answerable(request_id, from_client); !call) return call.error();
  Effects effects;
  std::string how = response.success ? "answered" : "answered with an error";
  finish(request_id, std::move(response), std::nullopt, std::move(how), effects);
  for (auto& effect : effects)
    effect();
  return {};
}

Result<void> ClientToolRegistry::report_progress(const std::string& request_id,
                                                 const std::optional<std::string>& from_client,
                                                 Progress progress) {
  auto found = answerable(request_id, from_client);
  if (!found) return found.error();
  PendingCall& call = **found;
  // A client that reports progress is alive and working: give it another full timeout, but
  // never beyond the hard cap. The timer notices a later deadline when it fires.
  auto extended = std::min(Clock::now() + call.timeout, call.hard_deadline);
  if (extended > call.deadline) call.deadline = extended;
  // Copied: a subscriber may end the call.
  ProgressHandler handler = call.progress;
  json::object props = call_properties(call.call, call.request);
  props["metadata"] = progress.metadata;
  if (progress.title) props["title"] = *progress.title;
  bus_->publish("client-tool.progress", std::move(props));
  if (handler) handler(progress);
  return {};
}

bool ClientToolRegistry::cancel(const std::string& request_id, const std::string& reason) {
  Effects effects;
  if (!pending_.count(request_id)) return false;
  finish(request_id, make_error(ErrorCode::Unavailable, "Cancelled: " + reason), reason,
         "cancelled: " + reason, effects);
  for (auto& effect : effects)
    effect();
  return true;
}

std::size_t ClientToolRegistry::pending_count() const {
  return pending_.size();
}

// ---- connections ----------------------------------------------------------------------------

std::uint64_t ClientToolRegistry::attach(const std::string& client_id,
                                         std::shared_ptr<ClientSink> sink, std::uint64_t last_seq,
                                         const std::string& transport, Origin origin) {
  Effects effects;
  ClientState& client = clients_[client_id];
  std::shared_ptr<ClientSink> replaced = std::exchange(client.sink, sink);
  std::uint64_t connection = client.connection = ++next_connection_;
  client.elsewhere = origin == Origin::OtherNode;
  if (client.grace) {
    client.grace.reset();
    --graces_;
  }
  // What it has not had: after its Last-Event-ID, or never sent by this process (a call made
  // while it was away, whose id another node's clock may have put below what it saw since). A
  // call resumed after a restart may have reached it before: its Last-Event-ID says, unless it
  // is announced by another node, which cannot tell what this node's calls were.
  for (const auto& [seq, request_id] : client.pending) {
    auto& call = pending_.at(request_id);
    bool unsent = !call.delivered && (!call.resumed || origin == Origin::OtherNode);
    if (seq > last_seq || unsent) deliver(client, call, effects);
  }
  if (replaced) replaced->close("superseded by a newer connection of client " + client_id);
  if (origin == Origin::Here) {
    bus_->publish("client-tool.connected",
                  json::object{{"clientID", client_id}, {"transport", transport}});
    if (auto mirror = mirror_.lock()) mirror->attached(client_id, sink, last_seq, transport);
  }
  for (auto& effect : effects)
    effect();
  return connection;
}

void ClientToolRegistry::detach(const std::string& client_id, std::uint64_t connection,
                                bool adopt) {
  Effects effects;
  auto it = clients_.find(client_id);
  if (it == clients_.end() || it->second.connection != connection || !it->second.sink) return;
  ClientState& client = it->second;
  client.sink.reset();
  if (adopt) client.elsewhere = false;
  bool here = !client.elsewhere;
  if (options_.reconnect_grace.count() == 0 || shutting_down_) {
    cleanup_client(client_id, effects);
  } else {
    client.grace = Clock::now() + options_.reconnect_grace;
    ++graces_;
    ensure_ticking();
  }
  if (here) {
    bus_->publish("client-tool.disconnected", json::object{{"clientID", client_id}});
    if (auto mirror = mirror_.lock()) mirror->detached(client_id);
  }
  for (auto& effect : effects)
    effect();
}

void ClientToolRegistry::cleanup(const std::string& client_id, Origin origin) {
  Effects effects;
  cleanup_client(client_id, effects, origin == Origin::OtherNode);
  for (auto& effect : effects)
    effect();
}

void ClientToolRegistry::cleanup_client(const std::string& client_id, Effects& effects,
                                        bool quiet) {
  auto it = clients_.find(client_id);
  if (it == clients_.end()) return;
  std::vector<std::string> requests;
  for (const auto& [seq, request_id] : it->second.pending)
    requests.push_back(request_id);
  for (const auto& request_id : requests)
    finish(request_id, make_error(ErrorCode::Unavailable, "Client disconnected"), std::nullopt,
           "failed: the client disconnected", effects);
  ClientState& client = it->second;
  std::vector<std::string> removed;
  for (const auto& [id, def] : client.tools) {
    removed.push_back(id);
    tool_owner_.erase(id);
  }
  client.tools.clear();
  if (client.grace) {
    client.grace.reset();
    --graces_;
  }
  // Its home node tells those who watch that its tools went (every node ends its grace).
  bool here = !client.elsewhere && !quiet;
  if (!client.sink) clients_.erase(it);
  if (!removed.empty() && here)
    effects.push_back([bus = bus_, client_id, removed] {
      bus->publish("client-tool.unregistered",
                   json::object{{"clientID", client_id}, {"toolIDs", to_json(removed)}});
    });
}

bool ClientToolRegistry::is_connected(const std::string& client_id) const {
  auto it = clients_.find(client_id);
  return it != clients_.end() && it->second.sink != nullptr;
}

bool ClientToolRegistry::release(const std::string& request_id) {
  if (!pending_.count(request_id)) return false;
  Effects effects;
  finish(request_id, make_error(ErrorCode::Unavailable, "Server shutting down"), std::nullopt,
         "kept for the restarted server", effects, /*announce=*/false);
  for (auto& effect : effects)
    effect();
  return true;
}

void ClientToolRegistry::shutdown() {
  Effects effects;
  shutting_down_ = true;
  std::vector<std::string> requests;
  for (const auto& [request_id, call] : pending_)
    requests.push_back(request_id);
  for (const auto& request_id : requests)
    finish(request_id, make_error(ErrorCode::Unavailable, "Server shutting down"),
           std::string("server shutting down"), "failed: the server shut down", effects);
  for (auto& effect : effects)
    effect();
  timer_.cancel();
}

// ---- deadlines ------------------------------------------------------------------------------

void ClientToolRegistry::ensure_ticking() {
  if (ticking_ || shutting_down_) return;
  ticking_ = true;
  arm_tick();
}

void ClientToolRegistry::arm_tick() {
  timer_.expires_after(kTick);
  timer_.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
    if (ec) return;  // shut down
    if (auto self = weak.lock()) self->on_tick();
  });
}

// End every call and grace whose deadline has passed; tick again while any is left.
void ClientToolRegistry::on_tick() {
  Effects effects;
  auto now = Clock::now();
  std::vector<std::string> expired;
  for (const auto& [request_id, call] : pending_)
    if (call.deadline <= now) expired.push_back(request_id);
  for (const auto& request_id : expired) {
    std::string msg = "Client tool execution timed out after " +
                      std::to_string(pending_.at(request_id).timeout.count()) + "ms";
    finish(request_id, make_error(ErrorCode::Timeout, msg), std::string("timeout"),
           "failed: timed out", effects);
  }
  if (graces_ > 0) {
    std::vector<std::string> ended;
    for (const auto& [client_id, client] : clients_)
      if (client.grace && *client.grace <= now) ended.push_back(client_id);
    for (const auto& client_id : ended) {
      auto it = clients_.find(client_id);
      it->second.grace.reset();
      --graces_;
      if (it->second.sink) continue;
      bool here = !it->second.elsewhere;
      cleanup_client(client_id, effects);
      if (here)
        if (auto mirror = mirror_.lock())
          effects.push_back([mirror, client_id] { mirror->forgotten(client_id); });
    }
  }
  bool again = !pending_.empty() || graces_ > 0;
  if (shutting_down_ && pending_.empty()) again = false;
  ticking_ = again;
  for (auto& effect : effects)
    effect();
  if (again) arm_tick();
}

}  // namespace sb::clienttool
