#include "mcp/http_transport.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <map>

#include "net/http_client.hpp"
#include "provider/sse_decoder.hpp"
#include "util/base64.hpp"
#include "util/log.hpp"

namespace sb::mcp {

namespace asio = boost::asio;

namespace {

// An Mcp-Name value as the 2026-07-28 transport wants it: as it is when it is a plain token,
// else in the base64 sentinel form.
std::string header_value(std::string_view value) {
  bool plain = !value.empty() && value.front() != ' ' && value.back() != ' ';
  for (unsigned char c : value)
    if (c < 0x20 || c > 0x7e) plain = false;
  if (plain && !value.starts_with("=?base64?")) return std::string(value);
  return "=?base64?" + base64_encode(value) + "?=";
}

class State : public std::enable_shared_from_this<State> {
 public:
  State(asio::any_io_executor ex, HttpOptions options)
      : ex_(std::move(ex)), o_(std::move(options)) {}

  void start(Transport::Events events) { events_ = std::move(events); }

  void send(const Message& m) {
    if (ended_) return;
    if (m.kind == Message::Kind::Notification && m.method == "notifications/cancelled" &&
        modern()) {
      // On 2026-07-28 closing the request's stream is the cancellation.
      auto id = m.params.if_contains("requestId");
      if (id)
        if (auto it = streams_.find(id_text(*id)); it != streams_.end())
          it->second->abort("cancelled");
      return;
    }
    asio::co_spawn(ex_, post(shared_from_this(), m), asio::detached);
    // A legacy session is set up once the server was told so: its GET stream opens after.
    if (m.method == "notifications/initialized" && !modern() && !session_id_.empty() &&
        !listening_) {
      listening_ = true;
      asio::co_spawn(ex_, listen(shared_from_this()), asio::detached);
    }
  }

  void set_version(const std::string& version) { version_ = version; }

  void close() {
    if (ended_) return;
    ended_ = true;
    events_ = {};
    for (auto& [id, abort] : streams_)
      abort->abort("closed");
    if (listen_abort_) listen_abort_->abort("closed");
    if (!session_id_.empty()) asio::co_spawn(ex_, end_session(shared_from_this()), asio::detached);
  }

 private:
  bool modern() const { return version_ == "2026-07-28"; }

  net::HttpRequestSpec spec(std::string method) const {
    net::HttpRequestSpec s;
    s.method = std::move(method);
    s.url = o_.url;
    s.headers = o_.headers;
    s.connect_timeout = o_.connect_timeout;
    // One connection for the many small requests of a session (plain http; https connects per
    // request): a connection each cost a quarter of an HTTP call's server CPU (docs/benchmarks.md).
    s.keep_alive = true;
    s.max_body_bytes = 256 * 1024 * 1024;
    if (!session_id_.empty()) s.headers.emplace_back("Mcp-Session-Id", session_id_);
    return s;
  }

  // Feeds a response body (JSON or SSE) and delivers each message in it.
  struct BodyReader {
    bool sse = false;
    sse::SseDecoder decoder{sse::SseDecoder::Options{16 * 1024 * 1024, false}};
    std::string json;
    std::size_t limit = 0;
    std::string failure;
    std::string answers;     // the id (id_text) of the request whose answer this is; "" for none
    bool answered = false;   // its response came
    bool delivered = false;  // an event came (since the flag was last cleared)
  };

  void deliver_text(BodyReader& r, std::string_view text) {
    r.delivered = true;
    if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) return;  // a priming event
    auto m = parse_message(text);
    if (!m) {
      log::warn("mcp ", o_.name, ": skipped a message: ", m.error().message);
      return;
    }
    if (m->kind == Message::Kind::Response && !r.answers.empty() && id_text(m->id) == r.answers)
      r.answered = true;
    if (events_.message) events_.message(std::move(*m));
  }

  void finish_stream(BodyReader& r) {
    std::vector<sse::SseEvent> rest;
    r.decoder.finish(rest);
    for (auto& e : rest)
      deliver_text(r, e.data);
  }

  void on_body(BodyReader& r, std::string_view chunk) {
    if (!r.failure.empty()) return;
    if (!r.sse) {
      if (r.json.size() + chunk.size() > r.limit) {
        r.failure = "it sent a message over " + std::to_string(r.limit) + " bytes";
        return;
      }
      r.json.append(chunk);
      return;
    }
    std::vector<sse::SseEvent> events;
    if (auto fed = r.decoder.feed(chunk, events); !fed) r.failure = fed.error().message;
    for (auto& e : events)
      deliver_text(r, e.data);
  }

  // The request's own answer, made up when the server's answer was no JSON-RPC message.
  void fail_request(const Message& m, const std::string& why) {
    if (m.kind != Message::Kind::Request || !events_.message) return;
    events_.message(error_response(m.id, rpc_code::kInternalError, why));
  }

  static asio::awaitable<void> post(std::shared_ptr<State> self, Message m) {
    auto s = self->spec("POST");
    s.headers.emplace_back("Content-Type", "application/json");
    s.headers.emplace_back("Accept", "application/json, text/event-stream");
    std::string version = self->version_;
    if (auto meta = m.params.if_contains("_meta"); meta && meta->is_object())
      if (auto v = meta->get_object().if_contains("io.modelcontextprotocol/protocolVersion");
          v && v->is_string())
        version = v->get_string();
    if (!version.empty()) s.headers.emplace_back("MCP-Protocol-Version", version);
    if (version == "2026-07-28" && m.kind != Message::Kind::Response) {
      s.headers.emplace_back("Mcp-Method", m.method);
      if (m.method == "tools/call" || m.method == "prompts/get")
        s.headers.emplace_back("Mcp-Name", header_value(string_or(m.params, "name")));
      else if (m.method == "resources/read")
        s.headers.emplace_back("Mcp-Name", header_value(string_or(m.params, "uri")));
    }
    s.body = encode(m);
    s.read_timeout = std::chrono::hours(24);  // the request's own deadline is the client's
    std::string key;
    if (m.kind == Message::Kind::Request) {
      key = id_text(m.id);
      s.abort = AbortSignal::create();
      self->streams_[key] = s.abort;
    }
    BodyReader reader;
    reader.limit = self->o_.max_message_bytes;
    reader.answers = key;
    int status = 0;
    std::string session;
    // Named, not temporaries in the co_await: GCC 12 destroys those twice.
    std::function<void(const net::HttpResponseHead&)> on_head =
        [&](const net::HttpResponseHead& h) {
          status = h.status;
          reader.sse = h.header("content-type").starts_with("text/event-stream");
          session = h.header("mcp-session-id");
        };
    std::function<void(std::string_view)> on_chunk = [&](std::string_view chunk) {
      self->on_body(reader, chunk);
    };
    auto result = co_await net::fetch_streaming(std::move(s), on_head, on_chunk);
    // An event stream that ends before the request's answer: a 2025-11-25 server may close it on
    // purpose (SEP-1699, "polling") and replay what follows to a GET with Last-Event-ID.
    if (!key.empty() && !self->ended_ && reader.sse && status == 200 && reader.failure.empty() &&
        !(!result && result.error().message.starts_with("aborted"))) {
      self->finish_stream(reader);
      if (!reader.answered && !self->modern() && !reader.decoder.last_event_id().empty()) {
        co_await resume(self, reader);
        if (!reader.answered && reader.failure.empty() && !self->ended_)
          reader.failure = "its event stream ended without the answer, and resuming it failed";
      }
      if (!reader.answered && !self->ended_) {
        self->streams_.erase(key);
        self->fail_request(m, !reader.failure.empty()
                                  ? reader.failure
                                  : "its event stream ended without the answer");
        co_return;
      }
    }
    if (!key.empty()) self->streams_.erase(key);
    if (self->ended_) co_return;
    if (!result) {
      bool cancelled = result.error().message.starts_with("aborted");
      if (cancelled) co_return;  // the client ended the request already
      if (status == 0) {
        // Not reachable at all: the channel is gone.
        self->end("cannot reach " + self->o_.url + ": " + result.error().message);
        co_return;
      }
      if (!reader.answered)
        self->fail_request(m, "its answer broke off: " + result.error().message);
      co_return;
    }
    if (!session.empty() && m.method == "initialize") self->session_id_ = session;
    if (status == 404 && !self->session_id_.empty() && m.method != "initialize") {
      self->end("it ended the session (HTTP 404)");
      co_return;
    }
    if (!reader.failure.empty()) {
      self->fail_request(m, reader.failure);
      co_return;
    }
    if (reader.sse) {
      if (key.empty()) self->finish_stream(reader);  // a request's stream was finished above
      co_return;
    }
    if (status == 202 || reader.json.empty()) {
      if (status >= 300) self->fail_request(m, "it answered HTTP " + std::to_string(status));
      co_return;
    }
    // A JSON body: the answer, or (on an HTTP error) a JSON-RPC error for it when it is one.
    auto parsed = parse_message(reader.json);
    if (parsed && parsed->kind == Message::Kind::Response && !parsed->id.is_null()) {
      if (self->events_.message) self->events_.message(std::move(*parsed));
      co_return;
    }
    std::string why = "it answered HTTP " + std::to_string(status);
    if (parsed && parsed->error)
      why += ": " + parsed->error->message;
    else if (status >= 300)
      why += ": " + reader.json.substr(0, 300);
    self->fail_request(m, why);
  }

  // A request's event stream that the server closed before the answer, resumed (SEP-1699): after
  // its `retry:` (1 s when it gave none, at most 5 s), a GET with Last-Event-ID replays what came
  // after; again while the server keeps closing, until the answer, a refusal, 5 resumes in a row
  // that bring no event, or the request's end (its abort signal cancels the GET).
  static asio::awaitable<void> resume(std::shared_ptr<State> self, BodyReader& reader) {
    asio::steady_timer wait(self->ex_);
    auto it = self->streams_.find(reader.answers);
    if (it == self->streams_.end()) co_return;
    std::shared_ptr<AbortSignal> abort = it->second;
    for (int empty = 0; empty < 5 && !reader.answered && !self->ended_ && !abort->aborted();) {
      auto retry = std::min<std::uint64_t>(reader.decoder.retry().value_or(1000), 5000);
      wait.expires_after(std::chrono::milliseconds(retry));
      boost::system::error_code ec;
      co_await wait.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      if (self->ended_ || abort->aborted()) co_return;
      auto s = self->spec("GET");
      s.headers.emplace_back("Accept", "text/event-stream");
      s.headers.emplace_back("MCP-Protocol-Version", self->version_);
      s.headers.emplace_back("Last-Event-ID", reader.decoder.last_event_id());
      s.read_timeout = std::chrono::hours(24);
      s.abort = abort;
      int status = 0;
      reader.delivered = false;
      std::function<void(const net::HttpResponseHead&)> on_head =
          [&](const net::HttpResponseHead& h) { status = h.status; };
      std::function<void(std::string_view)> on_chunk = [&](std::string_view chunk) {
        if (status == 200) self->on_body(reader, chunk);
      };
      auto result = co_await net::fetch_streaming(std::move(s), on_head, on_chunk);
      if (self->ended_ || abort->aborted()) co_return;
      if (status != 200 && status != 0) {
        reader.failure =
            "its event stream ended without the answer, and it refused to resume it (HTTP " +
            std::to_string(status) + ")";
        co_return;
      }
      if (status == 200) self->finish_stream(reader);
      if (!reader.failure.empty()) co_return;
      empty = reader.delivered ? 0 : empty + 1;
      (void)result;
    }
  }

  // The GET stream of a legacy session: the server's own requests and notifications.
  static asio::awaitable<void> listen(std::shared_ptr<State> self) {
    asio::steady_timer wait(self->ex_);
    for (int failures = 0; !self->ended_ && failures < 5;) {
      auto s = self->spec("GET");
      s.headers.emplace_back("Accept", "text/event-stream");
      s.headers.emplace_back("MCP-Protocol-Version", self->version_);
      s.read_timeout = std::chrono::hours(24);
      s.abort = AbortSignal::create();
      self->listen_abort_ = s.abort;
      BodyReader reader;
      reader.sse = true;
      int status = 0;
      std::function<void(const net::HttpResponseHead&)> on_head =
          [&](const net::HttpResponseHead& h) { status = h.status; };
      std::function<void(std::string_view)> on_chunk = [&](std::string_view chunk) {
        if (status == 200) self->on_body(reader, chunk);
      };
      auto result = co_await net::fetch_streaming(std::move(s), on_head, on_chunk);
      if (self->ended_) co_return;
      if (status == 405 || status == 404) co_return;  // no stream offered
      failures = status == 200 ? 0 : failures + 1;
      (void)result;
      wait.expires_after(std::chrono::seconds(1 + failures));
      boost::system::error_code ec;
      co_await wait.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
  }

  static asio::awaitable<void> end_session(std::shared_ptr<State> self) {
    auto s = self->spec("DELETE");
    s.headers.emplace_back("MCP-Protocol-Version", self->version_);
    s.read_timeout = std::chrono::seconds(2);
    s.connect_timeout = std::chrono::seconds(2);
    co_await net::fetch(std::move(s));
  }

  void end(const std::string& why) {
    if (ended_) return;
    auto closed = std::move(events_.closed);
    close();
    if (closed) closed(why);
  }

  asio::any_io_executor ex_;
  HttpOptions o_;
  Transport::Events events_;
  bool ended_ = false;
  bool listening_ = false;
  std::string version_;
  std::string session_id_;
  std::map<std::string, std::shared_ptr<AbortSignal>> streams_;  // by request id
  std::shared_ptr<AbortSignal> listen_abort_;
};

class HttpTransport final : public Transport {
 public:
  HttpTransport(asio::any_io_executor ex, HttpOptions options)
      : state_(std::make_shared<State>(std::move(ex), std::move(options))) {}
  ~HttpTransport() override { state_->close(); }
  Result<void> start(Events events) override {
    state_->start(std::move(events));
    return {};
  }
  void send(const Message& message) override { state_->send(message); }
  void set_protocol_version(const std::string& version) override { state_->set_version(version); }
  void close() override { state_->close(); }

 private:
  std::shared_ptr<State> state_;
};

}  // namespace

std::unique_ptr<Transport> make_http_transport(asio::any_io_executor executor,
                                               HttpOptions options) {
  return std::make_unique<HttpTransport>(std::move(executor), std::move(options));
}

}  // namespace sb::mcp
