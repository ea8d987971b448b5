#include "switchboard/client_tools.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <boost/asio/detached.hpp>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <unordered_map>

#include "http.hpp"
#include "json_util.hpp"
#include "runtime.hpp"

namespace switchboard {

namespace asio = boost::asio;

namespace detail {

using namespace asio::experimental::awaitable_operators;
constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);
using Strand = asio::strand<asio::any_io_executor>;

std::string_view state_name(ConnectionState state) {
  switch (state) {
    case ConnectionState::closed:
      return "closed";
    case ConnectionState::connecting:
      return "connecting";
    case ConnectionState::connected:
      return "connected";
    case ConnectionState::reconnecting:
      return "reconnecting";
  }
  return "closed";
}

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 128) return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

// The part of a call that its handler's ToolContext shares.
struct CallShared {
  std::string session_id, message_id, call_id, request_id, tool_name, tool_id;
  std::weak_ptr<ToolsImpl> manager;
  std::stop_source stop;
  // Coroutine handlers: cancels the coroutine's awaited operation (set before it starts).
  std::function<void()> cancel_coroutine;

  std::mutex mutex;
  std::string stop_reason;

  void request_stop(std::string reason) {
    {
      std::lock_guard lock(mutex);
      if (!stop_reason.empty()) return;
      stop_reason = std::move(reason);
    }
    stop.request_stop();
    if (cancel_coroutine) cancel_coroutine();
  }
};

// How a handler ended.
struct Outcome {
  bool ok = false;
  ToolOutput output;
  std::string error;
};

Outcome failure(std::string message) {
  if (message.empty()) message = "Client tool failed";
  return Outcome{false, {}, std::move(message)};
}

Outcome run_handler(const ClientToolsManager::Handler& handler, const json::object& input,
                    ToolContext& ctx) {
  try {
    return Outcome{true, handler(input, ctx), {}};
  } catch (const std::exception& e) {
    return failure(e.what());
  } catch (...) {
    return failure("Client tool failed with an unknown exception");
  }
}

asio::awaitable<Outcome> run_async_handler(
    std::shared_ptr<const ClientToolsManager::AsyncHandler> handler, json::object input,
    ToolContext ctx) {
  try {
    ToolOutput output = co_await (*handler)(std::move(input), std::move(ctx));
    co_return Outcome{true, std::move(output), {}};
  } catch (const std::exception& e) {
    co_return failure(e.what());
  } catch (...) {
    co_return failure("Client tool failed with an unknown exception");
  }
}

json::object result_json(const Outcome& outcome, const std::string& tool_name) {
  if (!outcome.ok) return json::object{{"status", "error"}, {"error", valid_utf8(outcome.error)}};
  if (const auto* text = std::get_if<std::string>(&outcome.output))
    return json::object{{"status", "success"}, {"title", tool_name}, {"output", valid_utf8(*text)}};
  const auto& r = std::get<ToolResult>(outcome.output);
  return json::object{{"status", "success"},
                      {"title", valid_utf8(r.title)},
                      {"output", valid_utf8(r.output)},
                      {"metadata", r.metadata}};
}

class ToolsImpl : public std::enable_shared_from_this<ToolsImpl> {
 public:
  struct Tool {
    ToolDefinition definition;
    std::shared_ptr<const ClientToolsManager::Handler> handler;
    std::shared_ptr<const ClientToolsManager::AsyncHandler> async_handler;
  };

  ToolsImpl(asio::any_io_executor io, std::string client_id, Endpoint endpoint,
            ClientToolsOptions options)
      : client_id_(std::move(client_id)),
        endpoint_(std::move(endpoint)),
        options_(std::move(options)),
        strand_(asio::make_strand(io)),
        outbox_wake_(strand_),
        run_done_(strand_),
        sender_(endpoint_) {
    if (options_.handler_executor) {
      handler_executor_ = *options_.handler_executor;
    } else {
      pool_.emplace(std::max<std::size_t>(1, options_.handler_threads));
      handler_executor_ = pool_->get_executor();
    }
  }

  const std::string& client_id() const { return client_id_; }
  const Strand& strand() const { return strand_; }

  // Waits for running handlers to return (the manager is going away).
  void join_handlers() {
    if (pool_) pool_->join();
  }

  // ---- state, observable from any thread ----------------------------------------------------

  ConnectionState state() const { return state_.load(); }

  bool wait_for_state(ConnectionState wanted, std::chrono::milliseconds timeout) const {
    std::unique_lock lock(state_mutex_);
    return state_cv_.wait_for(lock, timeout, [&] { return state_.load() == wanted; });
  }

  void on_state_change(std::function<void(ConnectionState)> listener) {
    std::lock_guard lock(state_mutex_);
    state_listener_ = std::move(listener);
  }

  void on_error(std::function<void(const Error&)> listener) {
    std::lock_guard lock(state_mutex_);
    error_listener_ = std::move(listener);
  }

  // ---- the API, each run on the strand --------------------------------------------------------

  asio::awaitable<void> register_tool(std::string name, Tool tool) {
    auto self = shared_from_this();
    std::optional<Tool> previous;
    if (auto it = tools_.find(name); it != tools_.end()) previous = it->second;
    json::array definitions{definition_json(name, tool.definition)};
    tools_.insert_or_assign(name, std::move(tool));
    ++tools_version_;
    if (state_ != ConnectionState::connected) co_return;
    try {
      co_await post_register(std::move(definitions));
    } catch (const ServerError&) {
      if (previous)
        tools_.insert_or_assign(name, std::move(*previous));
      else
        tools_.erase(name);
      throw;
    }
  }

  asio::awaitable<void> unregister_tool(std::string name) {
    auto self = shared_from_this();
    if (!tools_.erase(name)) co_return;
    ++tools_version_;
    if (state_ != ConnectionState::connected) co_return;
    json::object body{{"clientID", client_id_}, {"toolIDs", json::array{json::value(name)}}};
    if (!session_id_.empty()) body["sessionID"] = session_id_;
    auto target = endpoint_.target("/client-tools/unregister");
    auto payload = json::serialize(body);
    auto res =
        co_await http_request(endpoint_, "DELETE", target, payload, options_.request_timeout);
    throw_if_error(res);
  }

  asio::awaitable<void> connect(std::string session_id) {
    auto self = shared_from_this();
    if (state_ != ConnectionState::closed)
      throw std::logic_error("switchboard: connect() while " +
                             std::string(state_name(state_.load())) + "; disconnect() first");
    co_await run_ended();
    session_id_ = std::move(session_id);
    last_event_id_.reset();
    std::uint64_t generation = ++generation_;
    set_state(ConnectionState::connecting);
    try {
      co_await open_connection();
    } catch (...) {
      close_connection();
      if (generation == generation_) set_state(ConnectionState::closed);
      throw;
    }
    if (generation != generation_) {
      close_connection();
      throw ConnectionError("CONNECTION_FAILED", "disconnect() was called while connecting");
    }
    set_state(ConnectionState::connected);
    running_ = true;
    asio::co_spawn(strand_, run_connection(self, generation),
                   asio::bind_cancellation_slot(run_cancel_.slot(), [self](std::exception_ptr) {
                     self->running_ = false;
                     self->run_done_.cancel();
                   }));
  }

  asio::awaitable<void> disconnect() {
    auto self = shared_from_this();
    bool was_open = state_ != ConnectionState::closed;
    ++generation_;
    stop_all_calls("disconnected");
    if (running_) run_cancel_.emit(asio::cancellation_type::terminal);
    co_await run_ended();
    if (was_open) {
      // The server waits for the results that are ready; then the tools go, so that calls
      // still pending on them end now instead of after the server's reconnect grace.
      co_await flush_outbox();
      json::object body{{"clientID", client_id_}};
      auto target = endpoint_.target("/client-tools/unregister");
      auto payload = json::serialize(body);
      try {
        co_await http_request(endpoint_, "DELETE", target, payload, short_timeout());
      } catch (const Error&) {
        // The server is gone; its grace period cleans up.
      }
      if (ws_) co_await ws_->close();
    }
    close_connection();
    outbox_.clear();
    sender_.close();
    set_state(ConnectionState::closed);
  }

  // From a handler's ToolContext, any thread.
  void queue_progress(const std::shared_ptr<CallShared>& call, json::object metadata,
                      std::optional<std::string> title) {
    asio::post(strand_, [self = shared_from_this(), call, metadata = std::move(metadata),
                         title = std::move(title)]() mutable {
      auto it = self->calls_.find(call->request_id);
      if (it == self->calls_.end() || it->second->shared != call) return;
      json::object body{{"metadata", std::move(metadata)}};
      if (title) body["title"] = valid_utf8(*title);
      self->queue(Outgoing::Kind::Progress, call->request_id, std::move(body));
    });
  }

 private:
  asio::awaitable<void> run_ended() {
    while (running_) {
      run_done_.expires_at(asio::steady_timer::time_point::max());
      co_await run_done_.async_wait(tuple_awaitable);
    }
  }

  struct Call {
    std::shared_ptr<CallShared> shared;
    std::unique_ptr<asio::steady_timer> timer;
  };

  // A result or progress report on its way to the server; removed once the server has it.
  struct Outgoing {
    enum class Kind { Result, Progress };
    Kind kind;
    std::string request_id;
    json::object payload;  // result: {status, ...}; progress: {metadata, title?}
    std::uint64_t seq = 0;
    int attempts = 0;  // a repeat may find the server already has it
  };

  // A call that ended here: its result (to send again if the server asks again) or nullopt
  // when it was cancelled or stopped.
  struct Ended {
    std::optional<json::object> result;
    int sends = 0;
  };

  std::chrono::milliseconds short_timeout() const {
    return std::min(options_.request_timeout, std::chrono::milliseconds(2000));
  }

  static bool cancelled(const asio::cancellation_state& cs) {
    return cs.cancelled() != asio::cancellation_type::none;
  }

  void set_state(ConnectionState s) {
    std::function<void(ConnectionState)> listener;
    {
      std::lock_guard lock(state_mutex_);
      if (state_.load() == s) return;
      state_ = s;
      listener = state_listener_;
    }
    state_cv_.notify_all();
    if (listener) listener(s);
  }

  void emit_error(const Error& error) {
    std::function<void(const Error&)> listener;
    {
      std::lock_guard lock(state_mutex_);
      listener = error_listener_;
    }
    if (listener) listener(error);
  }

  json::object definition_json(const std::string& name, const ToolDefinition& d) const {
    json::object o{{"id", name}, {"description", d.description}, {"parameters", d.parameters}};
    if (d.interactive) o["interactive"] = true;
    return o;
  }

  asio::awaitable<void> post_register(json::array definitions) {
    json::object body{{"clientID", client_id_}, {"tools", std::move(definitions)}};
    if (!session_id_.empty()) body["sessionID"] = session_id_;
    auto target = endpoint_.target("/client-tools/register");
    auto payload = json::serialize(body);
    auto res = co_await http_request(endpoint_, "POST", target, payload, options_.request_timeout);
    throw_if_error(res);
    take_token(body_json(res));
  }

  // The token a first use issued ({"clientToken": ...} in an answer or a WebSocket message).
  void take_token(const json::value& answer) {
    if (!endpoint_.credentials || !answer.is_object()) return;
    if (auto* t = answer.get_object().if_contains("clientToken"); t && t->is_string())
      endpoint_.credentials->take(std::string(t->get_string()));
  }

 public:
  std::string client_token() const {
    return endpoint_.credentials ? endpoint_.credentials->token() : std::string();
  }

 private:
  asio::awaitable<void> register_all() {
    if (tools_.empty()) co_return;
    json::array definitions;
    for (const auto& [name, tool] : tools_)
      definitions.push_back(definition_json(name, tool.definition));
    co_await post_register(std::move(definitions));
  }

  // Registers every tool, then opens the stream. Throws on failure.
  asio::awaitable<void> open_connection() {
    std::uint64_t version = tools_version_;
    co_await register_all();
    if (options_.transport == Transport::sse) {
      Headers headers;
      if (last_event_id_) headers.emplace_back("Last-Event-ID", *last_event_id_);
      auto target = endpoint_.target("/client-tools/pending/" + client_id_);
      sse_ =
          co_await SseStream::open(endpoint_, target, std::move(headers), options_.request_timeout);
    } else {
      auto target = endpoint_.target("/client-tools/ws/" + client_id_);
      ws_ = co_await WsConnection::open(endpoint_, target, options_.request_timeout,
                                        options_.idle_timeout);
    }
    // A tool registered while this ran was only kept here (the state was not connected).
    while (version != tools_version_) {
      version = tools_version_;
      co_await register_all();
    }
  }

  void close_connection() {
    if (sse_) sse_->close();
    sse_.reset();
    ws_.reset();
  }

  // Serves connections until disconnect() or until reconnection gives up.
  static asio::awaitable<void> run_connection(std::shared_ptr<ToolsImpl> self,
                                              std::uint64_t generation) {
    co_await asio::this_coro::throw_if_cancelled(false);
    asio::steady_timer backoff(self->strand_);
    for (;;) {
      std::string why = co_await self->serve();
      auto cs = co_await asio::this_coro::cancellation_state;
      if (cancelled(cs) || generation != self->generation_) co_return;  // disconnect() closes
      if (self->ws_ && self->ws_->close_reason().starts_with("superseded")) {
        self->give_up(Error("SUPERSEDED", "another connection of client " + self->client_id_ +
                                              " took over: " + self->ws_->close_reason()));
        co_return;
      }
      self->close_connection();

      self->set_state(ConnectionState::reconnecting);
      std::string last_error = why;
      bool connected = false;
      auto delay = self->options_.reconnect_delay;
      for (int attempt = 0; attempt < self->options_.max_reconnect_attempts; ++attempt) {
        backoff.expires_after(delay);
        co_await backoff.async_wait(tuple_awaitable);
        delay = std::min(delay * 2, self->options_.max_reconnect_delay);
        cs = co_await asio::this_coro::cancellation_state;
        if (cancelled(cs) || generation != self->generation_) co_return;
        try {
          co_await self->open_connection();
          connected = true;
        } catch (const std::exception& e) {
          last_error = e.what();
        }
        cs = co_await asio::this_coro::cancellation_state;
        if (cancelled(cs) || generation != self->generation_) {
          self->close_connection();
          co_return;
        }
        if (connected) break;
        self->close_connection();
      }
      if (!connected) {
        self->give_up(
            Error("RECONNECT_FAILED", "gave up after " +
                                          std::to_string(self->options_.max_reconnect_attempts) +
                                          " reconnection attempts: " + last_error));
        co_return;
      }
      self->set_state(ConnectionState::connected);
    }
  }

  void give_up(const Error& error) {
    close_connection();
    ++generation_;
    stop_all_calls("connection lost");
    outbox_.clear();
    set_state(ConnectionState::closed);
    emit_error(error);
  }

  // Reads the stream and sends the outbox until the connection ends; says why it ended.
  asio::awaitable<std::string> serve() {
    std::variant<std::string, std::string> ended;
    if (sse_)
      ended = co_await (read_sse() || send_http());
    else
      ended = co_await (read_ws() || send_ws());
    co_return std::visit([](std::string& why) { return std::move(why); }, ended);
  }

  asio::awaitable<std::string> read_sse() {
    co_await asio::this_coro::throw_if_cancelled(false);
    for (;;) {
      auto cs = co_await asio::this_coro::cancellation_state;
      if (cancelled(cs)) co_return "cancelled";
      auto event = co_await sse_->next(options_.idle_timeout);
      if (!event) co_return sse_->error();
      if (event->id) last_event_id_ = event->id;
      if (event->event == "tool-request" || event->event == "tool-cancel") {
        boost::system::error_code ec;
        json::value data = json::parse(event->data, ec);
        if (ec || !data.is_object()) continue;
        if (event->event == "tool-request")
          on_request(data.get_object());
        else
          on_cancel(data.get_object());
      }
    }
  }

  asio::awaitable<std::string> read_ws() {
    co_await asio::this_coro::throw_if_cancelled(false);
    for (;;) {
      auto cs = co_await asio::this_coro::cancellation_state;
      if (cancelled(cs)) co_return "cancelled";
      auto text = co_await ws_->read();
      if (!text) co_return ws_->error();
      boost::system::error_code ec;
      json::value message = json::parse(*text, ec);
      if (ec || !message.is_object()) continue;
      const json::object& m = message.get_object();
      std::string type = string_field(m, "type");
      if (type == "credentials") {
        take_token(message);
      } else if (type == "request") {
        on_request(object_field(m, "request"));
      } else if (type == "cancel") {
        on_cancel(m);
      } else if (type == "error") {
        on_ws_error(m);
      }
    }
  }

  // Waits until the outbox has something; false when cancelled.
  //
  // The loops of serve()'s branches look at their cancellation state before every new wait: a
  // cancellation that arrives while an operation is completing is recorded there but reaches
  // no operation, and a wait started after it would never end.
  asio::awaitable<bool> outbox_ready() {
    for (;;) {
      auto cs = co_await asio::this_coro::cancellation_state;
      if (cancelled(cs)) co_return false;
      if (!outbox_.empty()) co_return true;
      outbox_wake_.expires_at(asio::steady_timer::time_point::max());
      co_await outbox_wake_.async_wait(tuple_awaitable);
    }
  }

  // The item to send now (it leaves the outbox only once the server has it).
  Outgoing next_outgoing() {
    Outgoing item = outbox_.front();
    ++outbox_.front().attempts;
    return item;
  }

  asio::awaitable<std::string> send_http() {
    co_await asio::this_coro::throw_if_cancelled(false);
    for (;;) {
      if (!co_await outbox_ready()) co_return "cancelled";
      Outgoing item = next_outgoing();
      HttpResponse res;
      try {
        res = co_await send_http_once(item);
      } catch (const Error& e) {
        // The connection is down: the item stays and goes again after reconnecting.
        co_return "sending to the server failed: " + e.message();
      }
      settle(item, res.status);
      if (res.status >= 400) refused(item, res);
    }
  }

  asio::awaitable<HttpResponse> send_http_once(const Outgoing& item) {
    json::object body =
        item.kind == Outgoing::Kind::Result ? json::object{{"result", item.payload}} : item.payload;
    body["requestID"] = item.request_id;
    body["clientID"] = client_id_;
    auto target = endpoint_.target(item.kind == Outgoing::Kind::Result ? "/client-tools/result"
                                                                       : "/client-tools/progress");
    auto payload = json::serialize(body);
    co_return co_await sender_.request("POST", target, payload, options_.request_timeout);
  }

  asio::awaitable<std::string> send_ws() {
    co_await asio::this_coro::throw_if_cancelled(false);
    for (;;) {
      if (!co_await outbox_ready()) co_return "cancelled";
      Outgoing item = next_outgoing();
      json::object message = item.kind == Outgoing::Kind::Result
                                 ? json::object{{"type", "result"}, {"result", item.payload}}
                                 : item.payload;
      if (item.kind == Outgoing::Kind::Progress) message["type"] = "progress";
      message["requestID"] = item.request_id;
      bool written = co_await ws_->write(json::serialize(message));
      if (!written) co_return "the connection broke while sending";
      // Written is not received: if the connection dies now, the server sends the request
      // again on reconnection and on_request() answers it from `ended_`.
      settle(item, 200);
    }
  }

  // Sends what is in the outbox over plain HTTP, once each, within a short time.
  asio::awaitable<void> flush_outbox() {
    auto deadline = std::chrono::steady_clock::now() + short_timeout();
    while (!outbox_.empty() && std::chrono::steady_clock::now() < deadline) {
      Outgoing item = outbox_.front();
      outbox_.pop_front();
      if (item.kind != Outgoing::Kind::Result) continue;
      try {
        co_await send_http_once(item);
      } catch (const Error&) {
        co_return;
      }
    }
  }

  // The item reached the server: drop it from the outbox, count the send.
  void settle(const Outgoing& item, unsigned status) {
    for (auto it = outbox_.begin(); it != outbox_.end(); ++it)
      if (it->seq == item.seq) {
        outbox_.erase(it);
        break;
      }
    if (item.kind == Outgoing::Kind::Result && status < 400)
      if (auto e = ended_.find(item.request_id); e != ended_.end()) ++e->second.sends;
  }

  void refused(const Outgoing& item, const HttpResponse& res) {
    if (item.kind == Outgoing::Kind::Progress) return;  // the call ended meanwhile: nothing lost
    try {
      throw_if_error(res);
    } catch (const ServerError& e) {
      // A repeat that finds the call already answered is the expected end of a retry.
      if (e.code() == "CONFLICT" && (item.attempts > 0 || sent_before(item.request_id))) return;
      emit_error(
          ServerError(e.status(), e.code(),
                      "the server refused the result of " + item.request_id + ": " + e.message()));
    }
  }

  bool sent_before(const std::string& request_id) const {
    auto it = ended_.find(request_id);
    return it != ended_.end() && it->second.sends > 0;
  }

  void on_ws_error(const json::object& m) {
    std::string request_id = string_field(m, "requestID");
    std::string code = string_field(m, "code");
    if (!request_id.empty()) {
      if (calls_.count(request_id)) return;  // a progress report of a call that ended server-side
      auto it = ended_.find(request_id);
      if (code == "CONFLICT" && it != ended_.end() && it->second.sends > 1) return;  // a repeat
    }
    emit_error(ServerError(
        0, code.empty() ? "ERROR" : code,
        string_field(m, "error") + (request_id.empty() ? "" : " (request " + request_id + ")")));
  }

  void queue(Outgoing::Kind kind, std::string request_id, json::object payload, int attempts = 0) {
    outbox_.push_back(
        Outgoing{kind, std::move(request_id), std::move(payload), ++outbox_seq_, attempts});
    outbox_wake_.cancel();
  }

  void remember(const std::string& request_id, std::optional<json::object> result) {
    auto [it, inserted] = ended_.insert_or_assign(request_id, Ended{std::move(result), 0});
    if (!inserted) return;
    ended_order_.push_back(request_id);
    while (ended_order_.size() > kRememberedCalls) {
      ended_.erase(ended_order_.front());
      ended_order_.pop_front();
    }
  }

  void drop_queued(const std::string& request_id) {
    std::erase_if(outbox_, [&](const Outgoing& o) { return o.request_id == request_id; });
  }

  // ---- calls --------------------------------------------------------------------------------

  void on_request(const json::object& request) {
    std::string request_id = string_field(request, "requestID");
    if (request_id.empty() || calls_.count(request_id)) return;  // running: it will answer
    if (auto it = ended_.find(request_id); it != ended_.end()) {
      // The server asks again (a reconnection replay): the first answer may have been lost.
      bool queued = std::any_of(outbox_.begin(), outbox_.end(), [&](const Outgoing& o) {
        return o.request_id == request_id && o.kind == Outgoing::Kind::Result;
      });
      if (it->second.result && !queued)
        queue(Outgoing::Kind::Result, request_id, *it->second.result, 1);
      return;
    }
    auto shared = std::make_shared<CallShared>();
    shared->request_id = request_id;
    shared->session_id = string_field(request, "sessionID");
    shared->message_id = string_field(request, "messageID");
    shared->call_id = string_field(request, "callID");
    shared->tool_id = string_field(request, "tool");
    std::string prefix = "client_" + client_id_ + "_";
    shared->tool_name = shared->tool_id.starts_with(prefix) ? shared->tool_id.substr(prefix.size())
                                                            : shared->tool_id;
    shared->manager = weak_from_this();

    auto tool = tools_.find(shared->tool_name);
    if (tool == tools_.end()) {
      json::object result = result_json(failure("No client handler for tool: " + shared->tool_name),
                                        shared->tool_name);
      remember(request_id, result);
      queue(Outgoing::Kind::Result, request_id, std::move(result));
      return;
    }

    auto call = std::make_shared<Call>();
    call->shared = shared;
    calls_.emplace(request_id, call);
    if (options_.timeout.count() > 0) {
      call->timer = std::make_unique<asio::steady_timer>(strand_, options_.timeout);
      call->timer->async_wait([weak = weak_from_this(), call](boost::system::error_code ec) {
        if (auto self = weak.lock(); self && !ec) self->on_call_timeout(call);
      });
    }
    json::object input = object_field(request, "input");
    ToolContext ctx(shared);
    auto self = shared_from_this();
    if (tool->second.handler) {
      asio::post(handler_executor_, [self, call, handler = tool->second.handler,
                                     input = std::move(input), ctx]() mutable {
        Outcome outcome = run_handler(*handler, input, ctx);
        asio::post(self->strand_, [self, call, outcome = std::move(outcome)]() mutable {
          self->finish_call(call, std::move(outcome));
        });
      });
      return;
    }
    auto handler_strand = asio::make_strand(handler_executor_);
    auto signal = std::make_shared<asio::cancellation_signal>();
    shared->cancel_coroutine = [handler_strand, signal] {
      asio::post(handler_strand, [signal] { signal->emit(asio::cancellation_type::terminal); });
    };
    asio::co_spawn(handler_strand,
                   run_async_handler(tool->second.async_handler, std::move(input), std::move(ctx)),
                   asio::bind_cancellation_slot(
                       signal->slot(), [self, call, signal](std::exception_ptr, Outcome outcome) {
                         asio::post(self->strand_,
                                    [self, call, outcome = std::move(outcome)]() mutable {
                                      self->finish_call(call, std::move(outcome));
                                    });
                       }));
  }

  // True when `call` is still running here (not cancelled, timed out or stopped).
  bool take(const std::shared_ptr<Call>& call) {
    auto it = calls_.find(call->shared->request_id);
    if (it == calls_.end() || it->second != call) return false;
    calls_.erase(it);
    if (call->timer) call->timer->cancel();
    return true;
  }

  void finish_call(const std::shared_ptr<Call>& call, Outcome outcome) {
    if (!take(call)) return;  // it ended otherwise; the server has (or needs) no answer from it
    const std::string& id = call->shared->request_id;
    json::object result = result_json(outcome, call->shared->tool_name);
    remember(id, result);
    queue(Outgoing::Kind::Result, id, std::move(result));
  }

  void on_call_timeout(const std::shared_ptr<Call>& call) {
    if (!take(call)) return;
    std::string ms = std::to_string(options_.timeout.count());
    call->shared->request_stop("timed out after " + ms + " ms");
    const std::string& id = call->shared->request_id;
    json::object result =
        result_json(failure("Client tool handler timed out after " + ms + " ms"), "");
    remember(id, result);
    queue(Outgoing::Kind::Result, id, std::move(result));
  }

  void on_cancel(const json::object& message) {
    std::string request_id = string_field(message, "requestID");
    if (request_id.empty()) return;
    if (auto it = calls_.find(request_id); it != calls_.end()) {
      auto call = it->second;
      take(call);
      call->shared->request_stop("cancelled by the server: " + string_field(message, "reason"));
    }
    // The call is over on the server: an answer queued for it would only be refused.
    drop_queued(request_id);
    remember(request_id, std::nullopt);
  }

  void stop_all_calls(const std::string& reason) {
    auto calls = std::move(calls_);
    calls_.clear();
    for (auto& [id, call] : calls) {
      if (call->timer) call->timer->cancel();
      call->shared->request_stop(reason);
      remember(id, std::nullopt);
    }
  }

  static constexpr std::size_t kRememberedCalls = 4096;

  const std::string client_id_;
  const Endpoint endpoint_;
  const ClientToolsOptions options_;
  Strand strand_;
  std::optional<asio::thread_pool> pool_;
  asio::any_io_executor handler_executor_;

  std::atomic<ConnectionState> state_{ConnectionState::closed};
  mutable std::mutex state_mutex_;
  mutable std::condition_variable state_cv_;
  std::function<void(ConnectionState)> state_listener_;
  std::function<void(const Error&)> error_listener_;

  // Everything below is used on strand_ only.
  std::map<std::string, Tool> tools_;
  std::string session_id_;
  std::uint64_t generation_ = 0;     // bumped by connect, disconnect and giving up
  std::uint64_t tools_version_ = 0;  // bumped by each change of tools_
  std::optional<std::string> last_event_id_;
  std::unique_ptr<SseStream> sse_;
  std::unique_ptr<WsConnection> ws_;
  bool running_ = false;  // run_connection is alive
  asio::cancellation_signal run_cancel_;
  asio::steady_timer outbox_wake_;
  asio::steady_timer run_done_;
  std::map<std::string, std::shared_ptr<Call>> calls_;
  std::unordered_map<std::string, Ended> ended_;
  std::deque<std::string> ended_order_;
  std::deque<Outgoing> outbox_;
  std::uint64_t outbox_seq_ = 0;
  HttpConnection sender_;  // results and progress over SSE
};

}  // namespace detail

std::string_view to_string(ConnectionState state) {
  return detail::state_name(state);
}

// ---- ToolContext ------------------------------------------------------------------------------

ToolContext::ToolContext(std::shared_ptr<detail::CallShared> call)
    : session_id(call->session_id),
      message_id(call->message_id),
      call_id(call->call_id),
      request_id(call->request_id),
      tool_name(call->tool_name),
      tool_id(call->tool_id),
      call_(std::move(call)) {}

std::stop_token ToolContext::stop_token() const {
  return call_->stop.get_token();
}

bool ToolContext::stop_requested() const {
  return call_->stop.stop_requested();
}

std::string ToolContext::stop_reason() const {
  std::lock_guard lock(call_->mutex);
  return call_->stop_reason;
}

void ToolContext::progress(json::object metadata, std::optional<std::string> title) const {
  if (auto manager = call_->manager.lock())
    manager->queue_progress(call_, std::move(metadata), std::move(title));
}

// ---- ClientToolsManager -----------------------------------------------------------------------

namespace {

// `op(impl)` on the manager's strand, as an awaitable that any executor's coroutine can await.
// The impl stays alive until the operation ends.
template <class Op>
asio::awaitable<void> on_strand(const std::shared_ptr<detail::ToolsImpl>& impl, Op op) {
  return asio::co_spawn(
      impl->strand(), [impl, op = std::move(op)]() mutable { return op(*impl); },
      asio::use_awaitable);
}

void check_tool(const std::string& name, bool has_handler) {
  if (!detail::valid_name(name))
    throw std::invalid_argument("switchboard: tool name \"" + name +
                                "\" must be 1-128 letters, digits, '_' or '-'");
  if (!has_handler) throw std::invalid_argument("switchboard: tool " + name + " has no handler");
}

}  // namespace

ClientToolsManager::ClientToolsManager(std::string client_id, std::string base_url,
                                       ClientToolsOptions options)
    : ClientToolsManager(std::make_shared<detail::Runtime>(), std::move(client_id),
                         std::move(base_url), std::move(options), nullptr) {}

ClientToolsManager::ClientToolsManager(boost::asio::any_io_executor executor, std::string client_id,
                                       std::string base_url, ClientToolsOptions options)
    : ClientToolsManager(std::make_shared<detail::Runtime>(std::move(executor)),
                         std::move(client_id), std::move(base_url), std::move(options), nullptr) {}

ClientToolsManager::ClientToolsManager(std::shared_ptr<detail::Runtime> runtime,
                                       std::string client_id, std::string base_url,
                                       ClientToolsOptions options,
                                       std::shared_ptr<detail::Credentials> credentials)
    : runtime_(std::move(runtime)) {
  if (!detail::valid_name(client_id))
    throw std::invalid_argument("switchboard: client id \"" + client_id +
                                "\" must be 1-128 letters, digits, '_' or '-'");
  auto endpoint = detail::Endpoint::parse(base_url);
  endpoint.credentials = credentials
                             ? std::move(credentials)
                             : std::make_shared<detail::Credentials>(
                                   options.password, options.client_token, options.on_client_token);
  impl_ = std::make_shared<detail::ToolsImpl>(runtime_->executor(), std::move(client_id),
                                              std::move(endpoint), std::move(options));
}

std::string ClientToolsManager::client_token() const {
  return impl_->client_token();
}

ClientToolsManager::~ClientToolsManager() {
  // Waiting needs the I/O to run: only the manager's own thread is sure to.
  if (runtime_->owns_thread() && !runtime_->on_io_thread()) {
    try {
      disconnect();
    } catch (const std::exception&) {
      // Nothing to tell anyone any more.
    }
  } else {
    asio::co_spawn(impl_->strand(),
                   on_strand(impl_, [](detail::ToolsImpl& impl) { return impl.disconnect(); }),
                   asio::detached);
  }
  impl_->join_handlers();
}

const std::string& ClientToolsManager::client_id() const {
  return impl_->client_id();
}

ConnectionState ClientToolsManager::state() const {
  return impl_->state();
}

bool ClientToolsManager::wait_for_state(ConnectionState state,
                                        std::chrono::milliseconds timeout) const {
  return impl_->wait_for_state(state, timeout);
}

void ClientToolsManager::on_state_change(std::function<void(ConnectionState)> listener) {
  impl_->on_state_change(std::move(listener));
}

void ClientToolsManager::on_error(std::function<void(const Error&)> listener) {
  impl_->on_error(std::move(listener));
}

void ClientToolsManager::register_tool(const std::string& name, ToolDefinition definition,
                                       Handler handler) {
  detail::run_blocking(*runtime_,
                       async_register_tool(name, std::move(definition), std::move(handler)));
}

void ClientToolsManager::register_tool(const std::string& name, ToolDefinition definition,
                                       AsyncHandler handler) {
  detail::run_blocking(*runtime_,
                       async_register_tool(name, std::move(definition), std::move(handler)));
}

void ClientToolsManager::unregister_tool(const std::string& name) {
  detail::run_blocking(*runtime_, async_unregister_tool(name));
}

void ClientToolsManager::connect(const std::string& session_id) {
  detail::run_blocking(*runtime_, async_connect(session_id));
}

void ClientToolsManager::disconnect() {
  detail::run_blocking(*runtime_, async_disconnect());
}

asio::awaitable<void> ClientToolsManager::async_register_tool(std::string name,
                                                              ToolDefinition definition,
                                                              Handler handler) {
  check_tool(name, static_cast<bool>(handler));
  return on_strand(
      impl_, [name = std::move(name),
              tool = detail::ToolsImpl::Tool{std::move(definition),
                                             std::make_shared<const Handler>(std::move(handler)),
                                             nullptr}](detail::ToolsImpl& impl) mutable {
        return impl.register_tool(std::move(name), std::move(tool));
      });
}

asio::awaitable<void> ClientToolsManager::async_register_tool(std::string name,
                                                              ToolDefinition definition,
                                                              AsyncHandler handler) {
  check_tool(name, static_cast<bool>(handler));
  return on_strand(
      impl_,
      [name = std::move(name),
       tool = detail::ToolsImpl::Tool{std::move(definition), nullptr,
                                      std::make_shared<const AsyncHandler>(std::move(handler))}](
          detail::ToolsImpl& impl) mutable {
        return impl.register_tool(std::move(name), std::move(tool));
      });
}

asio::awaitable<void> ClientToolsManager::async_unregister_tool(std::string name) {
  return on_strand(impl_, [name = std::move(name)](detail::ToolsImpl& impl) mutable {
    return impl.unregister_tool(std::move(name));
  });
}

asio::awaitable<void> ClientToolsManager::async_connect() {
  return async_connect(std::string());
}

asio::awaitable<void> ClientToolsManager::async_connect(std::string session_id) {
  return on_strand(impl_, [session_id = std::move(session_id)](detail::ToolsImpl& impl) mutable {
    return impl.connect(std::move(session_id));
  });
}

asio::awaitable<void> ClientToolsManager::async_disconnect() {
  return on_strand(impl_, [](detail::ToolsImpl& impl) { return impl.disconnect(); });
}

}  // namespace switchboard
