#include "permission/service.hpp"

#include <stdexcept>

#include "permission/wildcard.hpp"
#include "util/complete.hpp"
#include "util/ids.hpp"
#include "util/text.hpp"

namespace sb::permission {
namespace {

// The last rule over all layers that matches, or nullptr.
const Rule* last_match(std::string_view permission, std::string_view pattern,
                       const Layers& layers) {
  for (auto layer = layers.rbegin(); layer != layers.rend(); ++layer)
    for (auto rule = (*layer)->rbegin(); rule != (*layer)->rend(); ++rule)
      if (wildcard_match(permission, rule->permission) && wildcard_match(pattern, rule->pattern))
        return &*rule;
  return nullptr;
}

Action action_of(const Rule* rule) {
  return rule ? rule->action : Action::Ask;
}

// A UTF-8-safe cut, so that a huge command does not flood the message the model reads.
std::string clip(std::string_view text, std::size_t max = 200) {
  if (text.size() <= max) return std::string(text);
  return std::string(utf8_prefix(text, max)) + "…";
}

std::string quoted_patterns(const std::vector<std::string>& patterns) {
  std::string out;
  for (std::size_t i = 0; i < patterns.size(); ++i) {
    if (i > 0) out += ", ";
    out += "`" + clip(patterns[i]) + "`";
  }
  return out;
}

std::string what(const std::string& permission, const std::vector<std::string>& patterns) {
  return permission + " for " + quoted_patterns(patterns);
}

Rejection denied(const std::string& permission, const std::string& pattern, const Rule& rule) {
  Rejection r;
  r.kind = Rejection::Kind::Denied;
  r.permission = permission;
  r.patterns = {pattern};
  r.rule = rule;
  // The rule is shown the way it is written in the config file, so the model (and the person
  // reading the transcript) can see why.
  r.message = "Permission denied: a rule forbids using " + what(permission, r.patterns) +
              " (rule: " + json::serialize(json::string(rule.permission)) + ": {" +
              json::serialize(json::string(rule.pattern)) + ": \"deny\"}). Do not retry this call.";
  return r;
}

Rejection rejected(const PermissionRequest& req, std::optional<std::string> feedback,
                   bool cascaded) {
  Rejection r;
  r.kind = Rejection::Kind::Rejected;
  r.permission = req.permission;
  r.patterns = req.patterns;
  r.message = "The user rejected permission to use " + what(req.permission, req.patterns);
  if (feedback && !feedback->empty()) {
    r.message += ", with this feedback: " + *feedback;
    r.feedback = std::move(feedback);
  } else if (cascaded) {
    r.message += " (they rejected another request of this session).";
  } else {
    r.message += ".";
  }
  return r;
}

Rejection timed_out(const PermissionRequest& req, milliseconds timeout) {
  Rejection r;
  r.kind = Rejection::Kind::TimedOut;
  r.permission = req.permission;
  r.patterns = req.patterns;
  r.message = "Permission to use " + what(req.permission, req.patterns) +
              " was rejected: nobody answered within " + std::to_string(timeout.count()) + " ms.";
  return r;
}

Rejection cancelled(const std::string& permission, const std::vector<std::string>& patterns,
                    const std::string& reason) {
  Rejection r;
  r.kind = Rejection::Kind::Cancelled;
  r.permission = permission;
  r.patterns = patterns;
  r.message = "The permission request to use " + what(permission, patterns) +
              " was cancelled: " + reason + ".";
  return r;
}

json::array strings(const std::vector<std::string>& v) {
  json::array out;
  out.reserve(v.size());
  for (const auto& s : v)
    out.emplace_back(s);
  return out;
}

}  // namespace

// ---- small types ------------------------------------------------------------------------------

std::string_view reply_name(Reply reply) {
  switch (reply) {
    case Reply::Once:
      return "once";
    case Reply::Always:
      return "always";
    case Reply::Reject:
      return "reject";
  }
  return "reject";
}

std::optional<Reply> parse_reply(std::string_view name) {
  if (name == "once") return Reply::Once;
  if (name == "always") return Reply::Always;
  if (name == "reject") return Reply::Reject;
  return std::nullopt;
}

json::object to_json(const PermissionRequest& request) {
  json::object out{{"id", request.id},
                   {"sessionID", request.session_id},
                   {"permission", request.permission},
                   {"patterns", strings(request.patterns)},
                   {"metadata", request.metadata},
                   {"always", strings(request.always)}};
  if (request.message_id || request.call_id) {
    json::object tool;
    if (request.message_id) tool["messageID"] = *request.message_id;
    if (request.call_id) tool["callID"] = *request.call_id;
    out["tool"] = std::move(tool);
  }
  return out;
}

Result<PermissionRequest> permission_request_from_json(const json::object& o) {
  PermissionRequest r;
  for (auto [key, field] :
       {std::pair{"id", &r.id}, {"sessionID", &r.session_id}, {"permission", &r.permission}}) {
    auto text = require_string(o, key, "permission request");
    if (!text) return text.error();
    *field = std::move(*text);
  }
  for (auto [key, field] : {std::pair{"patterns", &r.patterns}, {"always", &r.always}}) {
    auto list = get_array(o, key, "permission request");
    if (!list) return list.error();
    if (!*list) continue;
    for (const auto& v : **list) {
      if (!v.is_string())
        return make_error(ErrorCode::InvalidRequest,
                          std::string("permission request.") + key + " must hold strings");
      field->emplace_back(v.get_string());
    }
  }
  auto metadata = get_object(o, "metadata", "permission request");
  if (!metadata) return metadata.error();
  if (*metadata) r.metadata = **metadata;
  auto tool = get_object(o, "tool", "permission request");
  if (!tool) return tool.error();
  if (*tool) {
    auto message = get_string(**tool, "messageID", "permission request.tool");
    if (!message) return message.error();
    r.message_id = std::move(*message);
    auto call = get_string(**tool, "callID", "permission request.tool");
    if (!call) return call.error();
    r.call_id = std::move(*call);
  }
  return r;
}

bool Rejection::halts_turn() const {
  switch (kind) {
    case Kind::Denied:
      return false;
    case Kind::Rejected:
      return !feedback;
    case Kind::TimedOut:
    case Kind::Cancelled:
      return true;
  }
  return true;
}

Error Rejection::error() const {
  switch (kind) {
    case Kind::Denied:
    case Kind::Rejected:
      return make_error(ErrorCode::Forbidden, message);
    case Kind::TimedOut:
      return make_error(ErrorCode::Timeout, message);
    case Kind::Cancelled:
      return make_error(ErrorCode::Unavailable, message);
  }
  return make_error(ErrorCode::Forbidden, message);
}

void throw_exception_from_error(const Rejection& r, const boost::source_location&) {
  throw std::runtime_error(r.message);
}

// ---- the service ------------------------------------------------------------------------------

std::shared_ptr<PermissionService> PermissionService::create(boost::asio::any_io_executor executor,
                                                             std::shared_ptr<bus::EventBus> bus,
                                                             PermissionOptions options) {
  return std::shared_ptr<PermissionService>(
      new PermissionService(std::move(executor), std::move(bus), options));
}

PermissionService::PermissionService(boost::asio::any_io_executor executor,
                                     std::shared_ptr<bus::EventBus> bus, PermissionOptions options)
    : options_(options), bus_(std::move(bus)), executor_(std::move(executor)), timer_(executor_) {}

PermissionService::~PermissionService() {
  // Nothing can reply any more: end what still waits so that no tool call hangs on it. No
  // events (the service is going away mid-publish otherwise), only the handlers.
  for (auto& [id, ask] : pending_)
    complete_later(executor_, std::move(ask.done),
                   AskOutcome(cancelled(ask.request.permission, ask.request.patterns,
                                        "the permission service stopped")));
}

PermissionService::Verdict PermissionService::evaluate(const AskParams& params,
                                                       Layers& layers) const {
  Verdict verdict;
  if (auto approved = approved_.find(params.session_id); approved != approved_.end())
    layers.push_back(&approved->second);
  // Every pattern is checked before anything waits: a denied pattern fails the call even when
  // an earlier one would have asked (OpenCode stops at the first ask and never sees the deny).
  // No patterns is treated as "*" rather than as nothing to check (OpenCode allows it): an ask
  // that names nothing must not slip through rules that ask or deny.
  static const std::vector<std::string> kAny{"*"};
  const auto& patterns = params.patterns.empty() ? kAny : params.patterns;
  for (const auto& pattern : patterns) {
    const Rule* rule = last_match(params.permission, pattern, layers);
    Action action = action_of(rule);
    if (action == Action::Deny) {
      verdict.denial = denied(params.permission, pattern, *rule);
      break;
    }
    if (action == Action::Ask) verdict.waits = true;
  }
  return verdict;
}

std::optional<AskOutcome> PermissionService::decide(const AskParams& params,
                                                    const Layers& layers) const {
  Layers all = layers;
  auto verdict = evaluate(params, all);
  if (verdict.denial) return AskOutcome(std::move(*verdict.denial));
  if (verdict.waits) return std::nullopt;
  return AskOutcome{};
}

void PermissionService::initiate_ask(AskParams params, Layers layers, AskHandler done) {
  if (params.patterns.empty()) params.patterns.push_back("*");
  const std::size_t caller_layers = layers.size();
  auto verdict = evaluate(params, layers);
  if (verdict.denial)
    return complete_later(executor_, std::move(done), AskOutcome(std::move(*verdict.denial)));
  if (!verdict.waits) return complete_later(executor_, std::move(done), AskOutcome{});
  if (shutting_down_)
    return complete_later(
        executor_, std::move(done),
        AskOutcome(cancelled(params.permission, params.patterns, "the server is shutting down")));

  PendingAsk pending;
  std::string id =
      params.id.empty() || pending_.count(params.id) ? ids::make("per") : std::move(params.id);
  pending.request.id = id;
  pending.request.session_id = std::move(params.session_id);
  pending.request.permission = std::move(params.permission);
  pending.request.patterns = std::move(params.patterns);
  pending.request.metadata = std::move(params.metadata);
  pending.request.always =
      params.always.empty() ? pending.request.patterns : std::move(params.always);
  pending.request.message_id = std::move(params.message_id);
  pending.request.call_id = std::move(params.call_id);
  // The caller's layers are copied (they may not outlive the ask); the approved rules are looked
  // up afresh whenever the ask is re-evaluated.
  pending.layers.reserve(caller_layers);
  for (std::size_t i = 0; i < caller_layers; ++i)
    pending.layers.push_back(*layers[i]);
  // Swapped in: Boost 1.81's move assignment of any_completion_handler wraps the handler in
  // itself, without end.
  pending.done.swap(done);
  pending.on_always = std::move(params.on_always);
  pending.timeout = params.timeout.value_or(options_.timeout);
  bool rearm = false;
  if (pending.timeout.count() > 0) {
    auto at = Clock::now() + pending.timeout;
    rearm = at < armed_for_;
    pending.deadline = deadlines_.emplace(at, id);
  }
  json::object asked = to_json(pending.request);
  if (params.on_waiting) params.on_waiting(pending.request);
  pending_.emplace(id, std::move(pending));
  if (rearm) arm_timer();
  // Last: a subscriber may answer at once.
  bus_->publish("permission.asked", std::move(asked));
}

void PermissionService::finish(std::map<std::string, PendingAsk>::iterator it, Reply reply,
                               AskOutcome outcome, Effects& effects) {
  PendingAsk ask = std::move(it->second);
  pending_.erase(it);
  if (ask.deadline) deadlines_.erase(*ask.deadline);
  json::object props{{"sessionID", ask.request.session_id},
                     {"requestID", ask.request.id},
                     {"reply", reply_name(reply)}};
  effects.push_back([bus = bus_, props = std::move(props)]() mutable {
    bus->publish("permission.replied", std::move(props));
  });
  complete_later(executor_, std::move(ask.done), std::move(outcome));
}

std::vector<std::string> PermissionService::session_asks(const std::string& session_id) const {
  std::vector<std::string> ids;
  for (const auto& [id, ask] : pending_)
    if (ask.request.session_id == session_id) ids.push_back(id);
  return ids;
}

Result<void> PermissionService::reply(const std::string& request_id, Reply reply,
                                      std::optional<std::string> message) {
  Effects effects;
  auto it = pending_.find(request_id);
  if (it == pending_.end())
    return make_error(ErrorCode::NotFound, "No permission request " + request_id +
                                               " is waiting (unknown, or already answered)");
  const std::string session_id = it->second.request.session_id;
  switch (reply) {
    case Reply::Once: {
      finish(it, Reply::Once, AskOutcome{}, effects);
      break;
    }
    case Reply::Reject: {
      AskOutcome outcome = rejected(it->second.request, std::move(message), false);
      finish(it, Reply::Reject, std::move(outcome), effects);
      for (const auto& other : session_asks(session_id)) {
        auto oit = pending_.find(other);
        AskOutcome cascaded = rejected(oit->second.request, std::nullopt, true);
        finish(oit, Reply::Reject, std::move(cascaded), effects);
      }
      break;
    }
    case Reply::Always: {
      Ruleset added;
      for (const auto& pattern : it->second.request.always)
        added.push_back({it->second.request.permission, pattern, Action::Allow});
      Ruleset& approved = approved_[session_id];
      approved.insert(approved.end(), added.begin(), added.end());
      if (it->second.on_always)
        effects.push_back([told = std::move(it->second.on_always), added] { told(added); });
      finish(it, Reply::Always, AskOutcome{}, effects);
      // Other asks of the session that the new rules settle need no second answer.
      for (const auto& other : session_asks(session_id)) {
        auto oit = pending_.find(other);
        const PendingAsk& ask = oit->second;
        Layers layers;
        for (const auto& layer : ask.layers)
          layers.push_back(&layer);
        layers.push_back(&approved);
        bool allowed = true;
        for (const auto& pattern : ask.request.patterns)
          if (action_of(last_match(ask.request.permission, pattern, layers)) != Action::Allow) {
            allowed = false;
            break;
          }
        if (allowed) finish(oit, Reply::Always, AskOutcome{}, effects);
      }
      break;
    }
  }
  for (auto& effect : effects)
    effect();
  return {};
}

std::size_t PermissionService::cancel_asks(const std::string& session_id, const std::string& reason,
                                           Effects& effects) {
  auto ids = session_asks(session_id);
  for (const auto& id : ids) {
    auto it = pending_.find(id);
    AskOutcome outcome =
        cancelled(it->second.request.permission, it->second.request.patterns, reason);
    finish(it, Reply::Reject, std::move(outcome), effects);
  }
  return ids.size();
}

std::size_t PermissionService::cancel_session(const std::string& session_id,
                                              const std::string& reason) {
  Effects effects;
  std::size_t count = cancel_asks(session_id, reason, effects);
  for (auto& effect : effects)
    effect();
  return count;
}

void PermissionService::forget_session(const std::string& session_id) {
  Effects effects;
  cancel_asks(session_id, "the session was deleted", effects);
  approved_.erase(session_id);
  for (auto& effect : effects)
    effect();
}

void PermissionService::replace_approved(const std::string& session_id, Ruleset rules) {
  if (rules.empty())
    approved_.erase(session_id);
  else
    approved_[session_id] = std::move(rules);
}

Ruleset PermissionService::session_rules(const std::string& session_id) const {
  auto it = approved_.find(session_id);
  return it == approved_.end() ? Ruleset{} : it->second;
}

std::vector<PermissionRequest> PermissionService::list() const {
  std::vector<PermissionRequest> out;
  out.reserve(pending_.size());
  for (const auto& [id, ask] : pending_)
    out.push_back(ask.request);
  return out;
}

std::vector<PermissionRequest> PermissionService::list(const std::string& session_id) const {
  std::vector<PermissionRequest> out;
  for (const auto& [id, ask] : pending_)
    if (ask.request.session_id == session_id) out.push_back(ask.request);
  return out;
}

std::size_t PermissionService::pending_count() const {
  return pending_.size();
}

void PermissionService::shutdown() {
  Effects effects;
  shutting_down_ = true;
  while (!pending_.empty()) {
    auto it = pending_.begin();
    AskOutcome outcome = cancelled(it->second.request.permission, it->second.request.patterns,
                                   "the server is shutting down");
    finish(it, Reply::Reject, std::move(outcome), effects);
  }
  for (auto& effect : effects)
    effect();
  timer_.cancel();
}

// ---- timeouts ---------------------------------------------------------------------------------

// Points the one timer at the earliest deadline.
void PermissionService::arm_timer() {
  Clock::time_point next =
      deadlines_.empty() ? Clock::time_point::max() : deadlines_.begin()->first;
  armed_for_ = next;
  if (next == Clock::time_point::max()) {
    timer_.cancel();
    return;
  }
  timer_.expires_at(next);
  timer_.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
    if (ec) return;  // re-armed or shut down
    if (auto self = weak.lock()) self->on_timer();
  });
}

// Rejects every ask whose deadline has passed, then re-arms.
void PermissionService::on_timer() {
  Effects effects;
  armed_for_ = Clock::time_point::max();
  auto now = Clock::now();
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    auto it = pending_.find(deadlines_.begin()->second);
    AskOutcome outcome = timed_out(it->second.request, it->second.timeout);
    finish(it, Reply::Reject, std::move(outcome), effects);
  }
  for (auto& effect : effects)
    effect();
  arm_timer();
}

}  // namespace sb::permission
