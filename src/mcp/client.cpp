#include "mcp/client.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>

#include "clienttool/schema.hpp"
#include "util/complete.hpp"
#include "util/log.hpp"

namespace sb::mcp {

namespace asio = boost::asio;

namespace {

constexpr std::string_view kMetaVersion = "io.modelcontextprotocol/protocolVersion";
constexpr std::string_view kMetaClientInfo = "io.modelcontextprotocol/clientInfo";
constexpr std::string_view kMetaCapabilities = "io.modelcontextprotocol/clientCapabilities";
constexpr std::string_view kMetaServerInfo = "io.modelcontextprotocol/serverInfo";
constexpr std::string_view kMetaSubscription = "io.modelcontextprotocol/subscriptionId";
// Bounds on what a server may make us do.
constexpr int kMaxToolPages = 100;
constexpr std::size_t kMaxTools = 1000;
constexpr int kMaxInputRounds = 10;
// Requests of the server answered at once (ping aside).
constexpr int kMaxServing = 16;

bool known_legacy(std::string_view version) {
  return std::find(std::begin(kLegacyVersions), std::end(kLegacyVersions), version) !=
         std::end(kLegacyVersions);
}

// A version list of a discover result or an unsupported-version error.
std::vector<std::string> versions(const json::value* list) {
  std::vector<std::string> out;
  if (!list || !list->is_array()) return out;
  for (const auto& v : list->get_array())
    if (v.is_string()) out.emplace_back(v.get_string());
  return out;
}

std::optional<std::int64_t> integer_id(const json::value& id) {
  if (id.is_int64()) return id.get_int64();
  if (id.is_uint64()) return exact_int64(id.get_uint64());
  return std::nullopt;
}

}  // namespace

std::shared_ptr<Client> Client::create(asio::any_io_executor executor,
                                       std::unique_ptr<Transport> transport, ClientOptions options,
                                       Callbacks callbacks) {
  return std::shared_ptr<Client>(new Client(std::move(executor), std::move(transport),
                                            std::move(options), std::move(callbacks)));
}

Client::Client(asio::any_io_executor executor, std::unique_ptr<Transport> transport,
               ClientOptions options, Callbacks callbacks)
    : executor_(std::move(executor)),
      transport_(std::move(transport)),
      options_(std::move(options)),
      callbacks_(std::move(callbacks)) {}

Client::~Client() {
  if (!closed_) close();
}

Error Client::failure(ErrorCode code, const std::string& what) const {
  return make_error(code, "MCP server " + options_.name + " " + what);
}

json::object Client::capabilities() const {
  json::object caps;
  caps["roots"] = json::object{};
  if (options_.elicitation) caps["elicitation"] = json::object{};
  return caps;
}

void Client::add_meta(json::object& params) const {
  auto& meta = params["_meta"];
  if (!meta.is_object()) meta = json::object{};
  auto& m = meta.get_object();
  m[kMetaVersion] = version_.empty() ? std::string(kModernVersion) : version_;
  m[kMetaClientInfo] = json::object{{"name", "switchboard"}, {"version", options_.client_version}};
  m[kMetaCapabilities] = capabilities();
}

asio::awaitable<Result<void>> Client::connect() {
  std::weak_ptr<Client> weak = weak_from_this();
  Transport::Events events;
  events.message = [weak](Message m) {
    if (auto self = weak.lock()) self->on_message(std::move(m));
  };
  events.closed = [weak](const std::string& reason) {
    if (auto self = weak.lock()) self->on_closed(reason);
  };
  if (auto started = transport_->start(std::move(events)); !started) {
    closed_ = true;
    co_return failure(started.error().code, "cannot start: " + started.error().message);
  }
  // The probe of a dual-era client: a modern server answers server/discover.
  bool legacy = true;
  // Named, not temporaries in the co_await: GCC 12 destroys those twice.
  std::string discover = "server/discover";
  json::object no_params;
  auto probe = co_await request(std::move(discover), std::move(no_params), options_.probe_timeout);
  if (closed_)
    co_return failure(ErrorCode::Unavailable, close_reason_.empty()
                                                  ? std::string("stopped while connecting")
                                                  : "stopped while connecting: " + close_reason_);
  if (probe) {
    auto supported = versions(probe->if_contains("supportedVersions"));
    if (std::find(supported.begin(), supported.end(), kModernVersion) != supported.end()) {
      legacy = false;
      modern_ = true;
      version_ = std::string(kModernVersion);
      if (auto caps = object_at(*probe, "capabilities")) capabilities_ = *caps;
      if (auto meta = object_at(*probe, "_meta"))
        if (auto info = object_at(*meta, kMetaServerInfo)) server_info_ = string_or(*info, "name");
    } else if (std::none_of(supported.begin(), supported.end(), known_legacy)) {
      close();
      co_return failure(ErrorCode::Unavailable, "supports protocol versions Switchboard does not");
    }
  }
  if (legacy) {
    auto init = co_await initialize();
    if (!init) {
      close();
      co_return init.error();
    }
  }
  transport_->set_protocol_version(version_);
  connected_ = true;
  auto tools = object_at(capabilities_, "tools");
  if (modern_ && tools) {
    auto changed = tools->if_contains("listChanged");
    if (changed && changed->is_bool() && changed->get_bool()) listen_for_changes();
  }
  co_return Result<void>{};
}

asio::awaitable<Result<void>> Client::initialize() {
  json::object params{
      {"protocolVersion", kLegacyVersions[0]},
      {"capabilities", capabilities()},
      {"clientInfo", json::object{{"name", "switchboard"}, {"version", options_.client_version}}}};
  std::string method = "initialize";
  auto result = co_await request(std::move(method), std::move(params), options_.timeout);
  if (!result) co_return result.error();
  std::string version = string_or(*result, "protocolVersion");
  if (!known_legacy(version))
    co_return failure(ErrorCode::Unavailable,
                      "answered initialize with protocol version \"" + version +
                          "\", which Switchboard does not speak (it speaks 2026-07-28, 2025-11-25, "
                          "2025-06-18, 2025-03-26 and 2024-11-05)");
  version_ = std::move(version);
  if (auto caps = object_at(*result, "capabilities")) capabilities_ = *caps;
  if (auto info = object_at(*result, "serverInfo")) server_info_ = string_or(*info, "name");
  // The version goes on every request after initialize, this notification too (HTTP's
  // MCP-Protocol-Version header).
  transport_->set_protocol_version(version_);
  transport_->send(notification("notifications/initialized"));
  co_return Result<void>{};
}

void Client::listen_for_changes() {
  json::object params{{"notifications", json::object{{"toolsListChanged", true}}}};
  subscription_ = next_id_;
  // No deadline: the stream stays open until one side ends it.
  start_request("subscriptions/listen", std::move(params), {},
                ResponseHandler([weak = weak_from_this()](Result<json::object> r) {
                  if (auto self = weak.lock(); self && !r && !self->closed_)
                    log::warn("mcp ", self->options_.name,
                              ": its change notifications ended: ", r.error().message);
                }),
                std::chrono::milliseconds(0));
}

asio::awaitable<Result<json::object>> Client::request(std::string method, json::object params,
                                                      std::chrono::milliseconds timeout) {
  // Named, not a temporary in the co_await: GCC 12 destroys those twice.
  auto initiate = [self = shared_from_this(), timeout](auto handler, std::string method,
                                                       json::object params) {
    self->start_request(std::move(method), std::move(params), {},
                        ResponseHandler(std::move(handler)), timeout);
  };
  co_return co_await asio::async_initiate<const asio::use_awaitable_t<>&, ResponseSignature>(
      std::move(initiate), asio::use_awaitable, std::move(method), std::move(params));
}

asio::awaitable<Result<std::vector<ToolInfo>>> Client::list_tools() {
  std::vector<ToolInfo> out;
  if (!object_at(capabilities_, "tools")) co_return out;  // it offers none
  std::string cursor;
  for (int page = 0; page < kMaxToolPages; ++page) {
    json::object params;
    if (!cursor.empty()) params["cursor"] = cursor;
    std::string method = "tools/list";
    auto result = co_await request(std::move(method), std::move(params), options_.timeout);
    if (!result) co_return result.error();
    if (auto tools = result->if_contains("tools"); tools && tools->is_array()) {
      for (const auto& t : tools->get_array()) {
        if (!t.is_object()) continue;
        const auto& obj = t.get_object();
        ToolInfo info;
        info.name = string_or(obj, "name");
        info.title = string_or(obj, "title");
        info.description = string_or(obj, "description");
        auto schema = object_at(obj, "inputSchema");
        if (info.name.empty() || !schema) {
          log::warn("mcp ", options_.name, ": left out a tool without a name or inputSchema: ",
                    json::serialize(t).substr(0, 200));
          continue;
        }
        info.input_schema = *schema;
        if (out.size() == kMaxTools) {
          log::warn("mcp ", options_.name, ": offers over ", kMaxTools,
                    " tools; the rest are left out");
          co_return out;
        }
        out.push_back(std::move(info));
      }
    }
    cursor = string_or(*result, "nextCursor");
    if (cursor.empty()) co_return out;
  }
  log::warn("mcp ", options_.name, ": tools/list went on for ", kMaxToolPages,
            " pages; the rest are left out");
  co_return out;
}

asio::awaitable<Result<json::object>> Client::call_tool(std::string name, json::object arguments,
                                                        std::string call, ProgressHandler progress,
                                                        std::shared_ptr<AbortSignal> abort) {
  calls_.push_back(call);
  struct Forget {
    std::vector<std::string>& calls;
    const std::string& call;
    ~Forget() {
      if (auto it = std::find(calls.rbegin(), calls.rend(), call); it != calls.rend())
        calls.erase(std::next(it).base());
    }
  } forget{calls_, call};

  json::object params{{"name", name}, {"arguments", std::move(arguments)}};
  for (int round = 0; round <= kMaxInputRounds; ++round) {
    if (abort && abort->aborted()) co_return make_error(ErrorCode::Unavailable, "aborted");
    asio::cancellation_signal give_up;
    AbortSignal::Registration on_abort(
        abort, [&give_up] { give_up.emit(asio::cancellation_type::terminal); });
    auto token = asio::bind_cancellation_slot(give_up.slot(), asio::use_awaitable);
    // Named, not temporaries in the co_await: GCC 12 destroys those twice.
    std::string method = "tools/call";
    json::object round_params = params;
    ProgressHandler round_progress = progress;
    auto result = co_await async_request(std::move(method), std::move(round_params),
                                         std::move(round_progress), token);
    if (!result) co_return result;
    if (string_or(*result, "resultType") != "input_required") co_return result;
    // A modern server needs input first (MRTR): answer what it asks, then ask again with the
    // answers and its state, as a new request.
    json::object responses;
    if (auto requests = object_at(*result, "inputRequests")) {
      for (const auto& kv : *requests) {
        if (!kv.value().is_object()) continue;
        const auto& req = kv.value().get_object();
        json::object req_params;
        if (auto p = object_at(req, "params")) req_params = *p;
        std::string method = string_or(req, "method");
        auto answer = co_await answer_input(method, std::move(req_params), call);
        if (!answer) co_return answer.error();
        responses[kv.key()] = std::move(*answer);
      }
    }
    params["inputResponses"] = std::move(responses);
    if (auto state = result->if_contains("requestState"); state && state->is_string())
      params["requestState"] = *state;
    else
      params.erase("requestState");
  }
  co_return failure(
      ErrorCode::Unavailable,
      "asked for input more than " + std::to_string(kMaxInputRounds) + " times in a call");
}

asio::awaitable<Result<json::object>> Client::answer_input(const std::string& method,
                                                           json::object params,
                                                           const std::string& call) {
  if (method == "roots/list") {
    std::string dir = options_.root.string();
    co_return json::object{
        {"roots", json::array{json::object{{"uri", "file://" + dir},
                                           {"name", options_.root.filename().string()}}}}};
  }
  if (method == "elicitation/create" && callbacks_.input && options_.elicitation)
    co_return co_await callbacks_.input(method, std::move(params), call);
  if (method == "sampling/createMessage")
    co_return failure(ErrorCode::Forbidden,
                      "asked for sampling/createMessage (a model call on its behalf), which "
                      "Switchboard does not offer");
  co_return failure(ErrorCode::Forbidden,
                    "asked for " + method + ", which Switchboard does not offer");
}

void Client::start_request(std::string method, json::object params, ProgressHandler progress,
                           ResponseHandler done, std::chrono::milliseconds timeout) {
  if (closed_) {
    complete_later(executor_, std::move(done),
                   Result<json::object>(failure(ErrorCode::Unavailable, "is not connected")));
    return;
  }
  std::int64_t id = next_id_++;
  if (modern_ || method == "server/discover") add_meta(params);
  Pending p;
  p.method = method;
  p.timeout = timeout;
  if (progress) {
    p.progress_token = "sb-" + std::to_string(id);
    auto& meta = params["_meta"];
    if (!meta.is_object()) meta = json::object{};
    meta.get_object()["progressToken"] = p.progress_token;
    by_progress_token_.emplace(p.progress_token, id);
    p.progress = std::move(progress);
  }
  if (auto slot = asio::get_associated_cancellation_slot(done); slot.is_connected())
    slot.assign([weak = weak_from_this(), id](asio::cancellation_type) {
      if (auto self = weak.lock())
        self->finish(id, make_error(ErrorCode::Unavailable, "aborted"), "aborted");
    });
  // Swapped in: Boost 1.81's move assignment of an any_completion_handler wraps it in itself
  // without end.
  p.done.swap(done);
  pending_.emplace(id, std::move(p));
  if (timeout.count() > 0) arm(id, timeout);
  transport_->send(mcp::request(id, std::move(method), std::move(params)));
}

void Client::arm(std::int64_t id, std::chrono::milliseconds after) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  auto& timer = it->second.timer;
  if (!timer) timer = std::make_unique<asio::steady_timer>(executor_);
  timer->expires_after(after);  // a wait already running ends with operation_aborted
  timer->async_wait([weak = weak_from_this(), id](boost::system::error_code ec) {
    auto self = weak.lock();
    if (ec || !self) return;
    auto it = self->pending_.find(id);
    if (it == self->pending_.end()) return;
    std::string method = it->second.method;
    auto ms = std::to_string(it->second.timeout.count());
    self->finish(id,
                 self->failure(ErrorCode::Timeout, "did not answer " + method + " within " + ms +
                                                       " ms (its `timeout`)"),
                 method == "server/discover" ? "" : "timed out after " + ms + " ms");
  });
}

void Client::finish(std::int64_t id, Result<json::object> outcome,
                    const std::string& cancel_reason) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  Pending p = std::move(it->second);
  pending_.erase(it);
  if (!p.progress_token.empty()) by_progress_token_.erase(p.progress_token);
  if (p.timer) p.timer->cancel();
  if (!cancel_reason.empty() && !closed_)
    transport_->send(notification("notifications/cancelled",
                                  json::object{{"requestId", id}, {"reason", cancel_reason}}));
  complete_later(executor_, std::move(p.done), std::move(outcome));
}

void Client::on_message(Message m) {
  if (closed_) return;
  switch (m.kind) {
    case Message::Kind::Response: {
      auto id = integer_id(m.id);
      if (!id || !pending_.contains(*id)) {
        log::warn("mcp ", options_.name, ": answered a request it was never sent (id ",
                  id_text(m.id), "); ignored");
        return;
      }
      if (m.error) {
        auto code = m.error->code == rpc_code::kInvalidParams ? ErrorCode::InvalidRequest
                                                              : ErrorCode::Unavailable;
        finish(*id, failure(code, "answered " + pending_.at(*id).method +
                                      " with an error: " + m.error->message + " (" +
                                      std::to_string(m.error->code) + ")"));
      } else {
        finish(*id, std::move(m.result));
      }
      return;
    }
    case Message::Kind::Notification: {
      if (m.method == "notifications/progress") {
        auto token = m.params.if_contains("progressToken");
        if (!token) return;
        std::string key =
            token->is_string() ? std::string(token->get_string()) : json::serialize(*token);
        auto found = by_progress_token_.find(key);
        if (found == by_progress_token_.end()) return;
        auto& p = pending_.at(found->second);
        Progress progress;
        if (auto v = m.params.if_contains("progress"); v && v->is_number())
          progress.progress = v->to_number<double>();
        if (auto v = m.params.if_contains("total"); v && v->is_number())
          progress.total = v->to_number<double>();
        progress.message = string_or(m.params, "message");
        // Progress shows the server is working: the deadline moves.
        if (p.timeout.count() > 0) arm(found->second, p.timeout);
        if (p.progress) p.progress(progress);
        return;
      }
      if (m.method == "notifications/tools/list_changed") {
        if (modern_) {
          // Only from our subscription's stream.
          auto meta = object_at(m.params, "_meta");
          auto sub = meta ? meta->if_contains(kMetaSubscription) : nullptr;
          if (!sub || !subscription_ || integer_id(*sub) != subscription_) return;
        }
        if (callbacks_.tools_changed) callbacks_.tools_changed();
        return;
      }
      if (m.method == "notifications/message") {
        log::debug("mcp ", options_.name, " [", string_or(m.params, "level", "info"), "]: ",
                   json::serialize(m.params.contains("data") ? m.params.at("data") : json::value())
                       .substr(0, 500));
        return;
      }
      return;  // other notifications change nothing we keep
    }
    case Message::Kind::Request:
      on_request(std::move(m));
      return;
  }
}

void Client::on_request(Message m) {
  if (m.method == "ping") {
    transport_->send(response(m.id, {}));
    return;
  }
  // A server that floods us with requests (each may become a question to a person) gets an
  // error for those beyond a few at once.
  if (serving_ >= kMaxServing) {
    transport_->send(error_response(
        m.id, rpc_code::kInternalError,
        "too many requests at once: " + std::to_string(kMaxServing) + " are being answered"));
    return;
  }
  ++serving_;
  // A legacy server's request names no call: it belongs to the one call in flight. With several
  // (maybe of different sessions) it could be any of them, and a question must not go to the
  // wrong person: it is answered without a call (an elicitation is declined).
  std::string call = calls_.size() == 1 ? calls_.front() : std::string();
  asio::co_spawn(
      executor_,
      [self = shared_from_this(), m = std::move(m), call]() mutable -> asio::awaitable<void> {
        auto answer = co_await self->answer_input(m.method, std::move(m.params), call);
        --self->serving_;
        if (self->closed_) co_return;
        if (answer)
          self->transport_->send(response(m.id, std::move(*answer)));
        else
          self->transport_->send(error_response(m.id,
                                                answer.error().code == ErrorCode::Forbidden
                                                    ? rpc_code::kMethodNotFound
                                                    : rpc_code::kInternalError,
                                                answer.error().message));
      },
      asio::detached);
}

void Client::on_closed(const std::string& reason) {
  if (closed_) return;
  closed_ = true;
  close_reason_ = reason;
  connected_ = false;
  auto callbacks = std::move(callbacks_);
  callbacks_ = {};
  auto ids = std::vector<std::int64_t>();
  for (auto& [id, p] : pending_)
    ids.push_back(id);
  for (auto id : ids)
    finish(id, failure(ErrorCode::Unavailable, "stopped: " + reason));
  if (callbacks.closed) callbacks.closed(reason);
}

void Client::close(const std::string& reason) {
  if (closed_) return;
  closed_ = true;
  connected_ = false;
  callbacks_ = {};
  std::vector<std::int64_t> ids;
  for (auto& [id, p] : pending_)
    ids.push_back(id);
  for (auto id : ids)
    finish(id, failure(ErrorCode::Unavailable, "was " + reason));
  transport_->close();
}

}  // namespace sb::mcp
