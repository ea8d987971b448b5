#include "switchboard/client.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <cctype>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>
#include <set>

#include "http.hpp"
#include "json_util.hpp"
#include "runtime.hpp"

namespace switchboard {

namespace asio = boost::asio;
using std::chrono::milliseconds;

namespace detail {

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

// Reads GET /event into a bounded queue that blocking and coroutine consumers take from.
class EventStreamImpl : public std::enable_shared_from_this<EventStreamImpl> {
 public:
  static constexpr std::size_t kQueueLimit = 10000;

  EventStreamImpl(asio::any_io_executor executor, std::unique_ptr<SseStream> stream,
                  milliseconds idle_timeout)
      : strand_(asio::make_strand(std::move(executor))),
        stream_(std::move(stream)),
        idle_timeout_(idle_timeout) {}

  void start() {
    auto self = shared_from_this();
    asio::co_spawn(strand_, read(self), asio::bind_cancellation_slot(stop_.slot(), asio::detached));
  }

  void close() {
    asio::post(strand_, [self = shared_from_this()] {
      self->stop_.emit(asio::cancellation_type::terminal);
      self->end("the stream was closed");
    });
  }

  std::optional<Event> next(milliseconds timeout) {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, timeout, [&] { return !queue_.empty() || ended_; });
    return take_locked();
  }

  static asio::awaitable<std::optional<Event>> async_next(std::shared_ptr<EventStreamImpl> self,
                                                          milliseconds timeout) {
    asio::steady_timer timer(self->strand_, timeout);
    for (;;) {
      {
        std::lock_guard lock(self->mutex_);
        if (!self->queue_.empty() || self->ended_) co_return self->take_locked();
      }
      if (timer.expiry() <= asio::steady_timer::clock_type::now()) co_return std::nullopt;
      self->waiters_.insert(&timer);
      auto [ec] = co_await timer.async_wait(tuple_awaitable);
      self->waiters_.erase(&timer);
      if (!ec) co_return std::nullopt;  // the timeout passed
      auto cs = co_await asio::this_coro::cancellation_state;
      if (cs.cancelled() != asio::cancellation_type::none) co_return std::nullopt;
      // Woken by push() or end(): look again, with the same deadline.
    }
  }

  const asio::strand<asio::any_io_executor>& strand() const { return strand_; }

 private:
  std::optional<Event> take_locked() {
    if (!queue_.empty()) {
      Event e = std::move(queue_.front());
      queue_.pop_front();
      return e;
    }
    if (ended_) throw ConnectionError("CONNECTION_FAILED", "the event stream ended: " + why_);
    return std::nullopt;
  }

  static asio::awaitable<void> read(std::shared_ptr<EventStreamImpl> self) {
    co_await asio::this_coro::throw_if_cancelled(false);
    for (;;) {
      auto frame = co_await self->stream_->next(self->idle_timeout_);
      if (!frame) {
        self->end(self->stream_->error());
        co_return;
      }
      boost::system::error_code ec;
      json::value v = json::parse(frame->data, ec);
      if (ec || !v.is_object()) continue;
      Event event;
      event.type = string_field(v.get_object(), "type");
      if (event.type == "server.heartbeat") continue;
      event.properties = object_field(v.get_object(), "properties");
      if (frame->id) event.id = *frame->id;
      if (!self->push(std::move(event))) {
        self->stream_->close();
        co_return;
      }
    }
  }

  bool push(Event event) {
    {
      std::lock_guard lock(mutex_);
      if (ended_) return false;
      if (queue_.size() >= kQueueLimit) {
        ended_ = true;
        why_ = "the consumer fell " + std::to_string(kQueueLimit) + " events behind";
      } else {
        queue_.push_back(std::move(event));
      }
    }
    wake();
    return !ended_;
  }

  void end(std::string why) {
    {
      std::lock_guard lock(mutex_);
      if (ended_) return;
      ended_ = true;
      why_ = std::move(why);
    }
    stream_->close();
    wake();
  }

  // On the strand.
  void wake() {
    changed_.notify_all();
    for (auto* timer : waiters_)
      timer->cancel();
  }

  asio::strand<asio::any_io_executor> strand_;
  std::unique_ptr<SseStream> stream_;
  milliseconds idle_timeout_;
  asio::cancellation_signal stop_;
  std::set<asio::steady_timer*> waiters_;  // async_next() callers, on the strand

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Event> queue_;
  bool ended_ = false;
  std::string why_;
};

std::string random_client_id() {
  std::random_device device;
  std::mt19937_64 generator(device());
  static const char* digits = "0123456789abcdef";
  std::string id = "cpp-";
  for (int i = 0; i < 12; ++i)
    id += digits[generator() % 16];
  return id;
}

// A path segment with everything but unreserved characters percent-encoded.
std::string segment(const std::string& text) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

json::object prompt_body(const std::string& text, const PromptOptions& options) {
  json::object body{
      {"parts", json::array{json::object{{"type", "text"}, {"text", valid_utf8(text)}}}}};
  if (!options.model.empty()) body["model"] = options.model;
  if (!options.agent.empty()) body["agent"] = options.agent;
  if (!options.tools.empty()) {
    json::object tools;
    for (const auto& [id, on] : options.tools)
      tools[id] = on;
    body["tools"] = std::move(tools);
  }
  return body;
}

template <class T, class F>
std::vector<T> list_of(const json::value& v, F convert) {
  std::vector<T> out;
  if (!v.is_array())
    throw ConnectionError("INVALID_RESPONSE",
                          "expected a JSON array, got " + json::serialize(v).substr(0, 200));
  for (const auto& item : v.get_array())
    out.push_back(convert(item));
  return out;
}

}  // namespace detail

// ---- EventStream ----------------------------------------------------------------------------

EventStream::EventStream(std::shared_ptr<detail::Runtime> runtime,
                         std::shared_ptr<detail::EventStreamImpl> impl)
    : runtime_(std::move(runtime)), impl_(std::move(impl)) {}

EventStream::~EventStream() {
  close();
}

EventStream::EventStream(EventStream&&) noexcept = default;

EventStream& EventStream::operator=(EventStream&& other) noexcept {
  if (this != &other) {
    close();
    runtime_ = std::move(other.runtime_);
    impl_ = std::move(other.impl_);
  }
  return *this;
}

std::optional<Event> EventStream::next(milliseconds timeout) {
  return impl_->next(timeout);
}

asio::awaitable<std::optional<Event>> EventStream::async_next(milliseconds timeout) {
  return asio::co_spawn(
      impl_->strand(),
      [impl = impl_, timeout] { return detail::EventStreamImpl::async_next(impl, timeout); },
      asio::use_awaitable);
}

std::optional<Event> EventStream::next_of_type(const std::string& type, milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left =
        std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    auto event = next(left);
    if (!event) return std::nullopt;
    if (event->type == type) return event;
  }
}

void EventStream::close() {
  if (impl_) impl_->close();
}

// ---- Client ---------------------------------------------------------------------------------

Client::Client(std::string base_url, ClientOptions options)
    : Client(asio::any_io_executor(), std::move(base_url), std::move(options)) {}

Client::Client(asio::any_io_executor executor, std::string base_url, ClientOptions options)
    : runtime_(executor ? std::make_shared<detail::Runtime>(std::move(executor))
                        : std::make_shared<detail::Runtime>()),
      base_url_(std::move(base_url)),
      options_(std::move(options)) {
  if (options_.client_id.empty()) options_.client_id = detail::random_client_id();
  // One set of credentials for the sessions this client creates and its tools: a session
  // created for the id may be its first use, and the tools then need that token.
  auto credentials = std::make_shared<detail::Credentials>(options_.password, options_.client_token,
                                                           options_.on_client_token);
  auto endpoint = detail::Endpoint::parse(base_url_);
  endpoint.credentials = credentials;
  endpoint_ = std::make_shared<const detail::Endpoint>(std::move(endpoint));
  tools_.reset(new ClientToolsManager(runtime_, options_.client_id, base_url_, options_.tools,
                                      std::move(credentials)));
}

std::string Client::client_token() const {
  return endpoint_->credentials->token();
}

Client::~Client() {
  tools_.reset();  // disconnects while the I/O still runs
}

ClientToolsManager& Client::client_tools() {
  return *tools_;
}

asio::awaitable<json::value> Client::call(std::string method, std::string path, json::value body,
                                          milliseconds timeout) const {
  std::string payload = body.is_null() ? std::string() : json::serialize(body);
  auto target = endpoint_->target(path);
  auto response = co_await detail::http_request(*endpoint_, method, target, payload, timeout);
  detail::throw_if_error(response);
  co_return detail::body_json(response);
}

// The overloads without options: a named default built outside any co_await expression.
asio::awaitable<Session> Client::async_create_session() {
  return async_create_session(CreateSessionOptions());
}

asio::awaitable<MessageWithParts> Client::async_prompt(std::string session_id, std::string text) {
  return async_prompt(std::move(session_id), std::move(text), PromptOptions());
}

asio::awaitable<void> Client::async_prompt_async(std::string session_id, std::string text) {
  return async_prompt_async(std::move(session_id), std::move(text), PromptOptions());
}

asio::awaitable<void> Client::async_reply_permission(std::string permission_id,
                                                     PermissionReply reply) {
  return async_reply_permission(std::move(permission_id), reply, std::string());
}

asio::awaitable<AsyncSessionHandle> Client::async_start_session() {
  return async_start_session(StartSessionOptions());
}

asio::awaitable<Session> Client::async_create_session(CreateSessionOptions options) {
  json::object body;
  if (!options.title.empty()) body["title"] = options.title;
  if (!options.permission.empty()) body["permission"] = options.permission;
  if (!options.parent_id.empty()) body["parentID"] = options.parent_id;
  body["clientID"] = options.client_id.empty() ? options_.client_id : options.client_id;
  json::value v = co_await call("POST", "/session", std::move(body), options_.request_timeout);
  // Creating the session may have been the client id's first use.
  if (auto* t = v.is_object() ? v.get_object().if_contains("clientToken") : nullptr;
      t && t->is_string())
    endpoint_->credentials->take(std::string(t->get_string()));
  co_return session_from_json(v);
}

asio::awaitable<std::vector<Session>> Client::async_list_sessions() {
  json::value v = co_await call("GET", "/session", nullptr, options_.request_timeout);
  co_return detail::list_of<Session>(v, session_from_json);
}

asio::awaitable<Session> Client::async_get_session(std::string id) {
  json::value v =
      co_await call("GET", "/session/" + detail::segment(id), nullptr, options_.request_timeout);
  co_return session_from_json(v);
}

asio::awaitable<void> Client::async_delete_session(std::string id) {
  co_await call("DELETE", "/session/" + detail::segment(id), nullptr, options_.request_timeout);
}

asio::awaitable<MessageWithParts> Client::async_prompt(std::string session_id, std::string text,
                                                       PromptOptions options) {
  json::object body = detail::prompt_body(text, options);
  json::value v = co_await call("POST", "/session/" + detail::segment(session_id) + "/message",
                                std::move(body), options.timeout);
  co_return message_with_parts_from_json(v);
}

asio::awaitable<void> Client::async_prompt_async(std::string session_id, std::string text,
                                                 PromptOptions options) {
  json::object body = detail::prompt_body(text, options);
  co_await call("POST", "/session/" + detail::segment(session_id) + "/prompt_async",
                std::move(body), options_.request_timeout);
}

asio::awaitable<bool> Client::async_abort(std::string session_id) {
  json::object body;
  json::value v = co_await call("POST", "/session/" + detail::segment(session_id) + "/abort",
                                std::move(body), options_.request_timeout);
  co_return v.is_bool() && v.get_bool();
}

asio::awaitable<std::vector<MessageWithParts>> Client::async_messages(std::string session_id) {
  json::value v = co_await call("GET", "/session/" + detail::segment(session_id) + "/message",
                                nullptr, options_.request_timeout);
  co_return detail::list_of<MessageWithParts>(v, message_with_parts_from_json);
}

asio::awaitable<std::map<std::string, SessionStatus>> Client::async_statuses() {
  json::value v = co_await call("GET", "/session/status", nullptr, options_.request_timeout);
  std::map<std::string, SessionStatus> out;
  if (v.is_object())
    for (const auto& [id, status] : v.get_object())
      if (status.is_object())
        out[std::string(id)] =
            SessionStatus{std::string(id), detail::string_field(status.get_object(), "type"),
                          status.get_object()};
  co_return out;
}

asio::awaitable<std::vector<PermissionRequest>> Client::async_permissions() {
  json::value v = co_await call("GET", "/permission", nullptr, options_.request_timeout);
  co_return detail::list_of<PermissionRequest>(v, permission_request_from_json);
}

asio::awaitable<void> Client::async_reply_permission(std::string permission_id,
                                                     PermissionReply reply, std::string message) {
  const char* name = reply == PermissionReply::once     ? "once"
                     : reply == PermissionReply::always ? "always"
                                                        : "reject";
  // Named, so that the asks of this client's own sessions are accepted (only the owner answers).
  json::object body{{"reply", name}, {"clientID", options_.client_id}};
  if (!message.empty()) body["message"] = message;
  co_await call("POST", "/permission/" + detail::segment(permission_id) + "/reply", std::move(body),
                options_.request_timeout);
}

asio::awaitable<EventStream> Client::async_events() {
  return async_events(std::string());
}

asio::awaitable<EventStream> Client::async_events(std::string last_event_id) {
  auto target = endpoint_->target("/event");
  detail::Headers headers;
  if (!last_event_id.empty()) headers.emplace_back("Last-Event-ID", std::move(last_event_id));
  auto stream = co_await detail::SseStream::open(*endpoint_, target, std::move(headers),
                                                 options_.request_timeout);
  auto impl = std::make_shared<detail::EventStreamImpl>(runtime_->executor(), std::move(stream),
                                                        options_.tools.idle_timeout);
  impl->start();
  co_return EventStream(runtime_, std::move(impl));
}

asio::awaitable<AsyncSessionHandle> Client::async_start_session(StartSessionOptions options) {
  CreateSessionOptions create;
  create.title = options.title;
  Session session = co_await async_create_session(std::move(create));
  if (options.tools) co_await tools_->async_connect(session.id);
  AsyncSessionHandle handle;
  handle.session = session;
  handle.prompt = [this, id = session.id](std::string text) {
    return async_prompt(id, std::move(text));
  };
  handle.close = [this] { return tools_->async_disconnect(); };
  co_return handle;
}

// ---- blocking ------------------------------------------------------------------------------

Session Client::create_session(const CreateSessionOptions& options) {
  return detail::run_blocking(*runtime_, async_create_session(options));
}

std::vector<Session> Client::list_sessions() {
  return detail::run_blocking(*runtime_, async_list_sessions());
}

Session Client::get_session(const std::string& id) {
  return detail::run_blocking(*runtime_, async_get_session(id));
}

void Client::delete_session(const std::string& id) {
  detail::run_blocking(*runtime_, async_delete_session(id));
}

MessageWithParts Client::prompt(const std::string& session_id, const std::string& text,
                                const PromptOptions& options) {
  return detail::run_blocking(*runtime_, async_prompt(session_id, text, options));
}

void Client::prompt_async(const std::string& session_id, const std::string& text,
                          const PromptOptions& options) {
  detail::run_blocking(*runtime_, async_prompt_async(session_id, text, options));
}

bool Client::abort(const std::string& session_id) {
  return detail::run_blocking(*runtime_, async_abort(session_id));
}

std::vector<MessageWithParts> Client::messages(const std::string& session_id) {
  return detail::run_blocking(*runtime_, async_messages(session_id));
}

std::map<std::string, SessionStatus> Client::statuses() {
  return detail::run_blocking(*runtime_, async_statuses());
}

std::vector<PermissionRequest> Client::permissions() {
  return detail::run_blocking(*runtime_, async_permissions());
}

void Client::reply_permission(const std::string& permission_id, PermissionReply reply,
                              const std::string& message) {
  detail::run_blocking(*runtime_, async_reply_permission(permission_id, reply, message));
}

EventStream Client::events(const std::string& last_event_id) {
  return detail::run_blocking(*runtime_, async_events(last_event_id));
}

SessionHandle Client::start_session(const StartSessionOptions& options) {
  CreateSessionOptions create;
  create.title = options.title;
  Session session = create_session(create);
  if (options.tools) tools_->connect(session.id);
  SessionHandle handle;
  handle.session = session;
  handle.prompt = [this, id = session.id](const std::string& text) { return prompt(id, text); };
  handle.close = [this] { tools_->disconnect(); };
  return handle;
}

}  // namespace switchboard
