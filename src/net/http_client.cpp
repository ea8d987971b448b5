#include "net/http_client.hpp"

#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/url.hpp>

#include <charconv>
#include <map>
#include <memory>
#include <optional>

#include "util/text.hpp"

namespace sb::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

std::string HttpResponseHead::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (ascii_iequals(k, name)) return v;
  return {};
}

namespace {

struct Target {
  bool tls = false;
  std::string host;
  std::string port;
  std::string path;  // origin-form: path + query
};

Result<Target> parse_target(const std::string& url) {
  auto u = boost::urls::parse_absolute_uri(url);
  if (!u) return make_error(ErrorCode::InvalidRequest, "invalid URL: " + url);
  Target t;
  std::string scheme(u->scheme());
  if (scheme == "https")
    t.tls = true;
  else if (scheme != "http")
    return make_error(ErrorCode::InvalidRequest,
                      "unsupported URL scheme \"" + scheme + "\" (http or https)");
  t.host = std::string(u->host_name().empty() ? u->host() : u->host_name());
  if (u->host_type() == boost::urls::host_type::ipv6)
    t.host = std::string(u->host_ipv6_address().to_string());
  if (t.host.empty()) return make_error(ErrorCode::InvalidRequest, "URL without a host: " + url);
  t.port = u->has_port() ? std::string(u->port()) : (t.tls ? "443" : "80");
  t.path = std::string(u->encoded_path());
  if (t.path.empty()) t.path = "/";
  if (u->has_query()) t.path += "?" + std::string(u->encoded_query());
  return t;
}

ssl::context& tls_context() {
  static ssl::context ctx = [] {
    ssl::context c(ssl::context::tls_client);
    c.set_default_verify_paths();
    c.set_verify_mode(ssl::verify_peer);
    return c;
  }();
  return ctx;
}

// Runs `op` against a timer; whichever finishes first wins. The timer firing cancels `op`.
template <class Op>
auto with_timeout(Op op, std::chrono::milliseconds timeout)
    -> asio::awaitable<std::optional<typename decltype(op())::value_type>> {
  using namespace asio::experimental::awaitable_operators;
  asio::steady_timer timer(co_await asio::this_coro::executor, timeout);
  auto r = co_await (op() || timer.async_wait(tuple_awaitable));
  if (r.index() == 1) co_return std::nullopt;
  co_return std::get<0>(std::move(r));
}

// Closes `socket` once nothing has been sent or received for `idle`: the bound on every wait of
// an exchange, with one timer per request that is re-armed only when it fires (a timer per
// read cost more than the read). Runs on the socket's executor; inert once destroyed.
class Watchdog {
 public:
  Watchdog(tcp::socket& socket, std::chrono::milliseconds idle)
      : state_(std::make_shared<State>(socket, idle)) {
    state_->timer.expires_after(idle);
    arm(state_);
  }
  ~Watchdog() {
    state_->socket = nullptr;
    state_->timer.cancel();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void activity() { state_->last = std::chrono::steady_clock::now(); }
  bool fired() const { return state_->fired; }

 private:
  struct State {
    State(tcp::socket& s, std::chrono::milliseconds i)
        : timer(s.get_executor()), socket(&s), idle(i), last(std::chrono::steady_clock::now()) {}
    asio::steady_timer timer;
    tcp::socket* socket;
    std::chrono::milliseconds idle;
    std::chrono::steady_clock::time_point last;
    bool fired = false;
  };
  static void arm(std::shared_ptr<State> state) {
    auto& timer = state->timer;
    timer.async_wait([state = std::move(state)](boost::system::error_code ec) {
      if (ec || !state->socket) return;
      auto due = state->last + state->idle;
      if (std::chrono::steady_clock::now() < due) {
        state->timer.expires_at(due);
        arm(state);
        return;
      }
      state->fired = true;
      boost::system::error_code ignored;
      state->socket->close(ignored);
    });
  }
  std::shared_ptr<State> state_;
};

// Idle keep-alive connections to plain-http origins, one pool per io_context: a request that
// asks for keep-alive takes one instead of connecting, and gives it back when the response
// ended cleanly and the server keeps the connection open. A kept socket stays registered with
// the io_context's reactor (no epoll_ctl or ioctl per exchange), so the pool is an Asio service
// of that io_context: its shutdown() closes the kept sockets while the reactor still holds their
// state, and nothing else owns them. Not thread-safe: an io_context's pool is used by the thread
// that runs it (the server runs its one io_context on one thread).
class ConnectionPool final : public asio::execution_context::service {
 public:
  using key_type = ConnectionPool;
  static inline asio::execution_context::id id;

  explicit ConnectionPool(asio::execution_context& context) : service(context) {}

  static ConnectionPool& of(const asio::any_io_executor& executor) {
    return asio::use_service<ConnectionPool>(asio::query(executor, asio::execution::context));
  }

  std::unique_ptr<beast::tcp_stream> take(const std::string& origin) {
    auto it = idle_.find(origin);
    if (it == idle_.end()) return nullptr;
    auto connection = std::move(it->second);
    idle_.erase(it);
    return connection;
  }

  void give_back(const std::string& origin, std::unique_ptr<beast::tcp_stream> connection) {
    if (shut_down_ || idle_.count(origin) >= kMaxIdlePerOrigin) return;  // closed on return
    idle_.emplace(origin, std::move(connection));
  }

 private:
  void shutdown() override {
    shut_down_ = true;
    idle_.clear();  // closes the kept sockets
  }

  static constexpr std::size_t kMaxIdlePerOrigin = 32;
  bool shut_down_ = false;
  std::multimap<std::string, std::unique_ptr<beast::tcp_stream>> idle_;
};

// How an exchange ended, beyond its result.
struct ExchangeState {
  bool answered = false;  // a response head arrived (a retry on a new connection is not safe)
  bool reusable = false;  // the whole response was read and the server keeps the connection
};

// Bytes asked of the socket per read of a response.
constexpr std::size_t kReadBytes = 16384;

// One exchange over a connected stream (plain or TLS).
template <class Stream>
asio::awaitable<Result<HttpResponseHead>> exchange(
    Stream& stream, const HttpRequestSpec& spec, const Target& target,
    const std::function<void(const HttpResponseHead&)>& on_head,
    const std::function<void(std::string_view)>& on_body, ExchangeState& state) {
  // The body is sent from the spec, not copied into the message: a model request holds the
  // whole conversation, tens of KB at every step.
  http::request<http::span_body<const char>> req{http::string_to_verb(spec.method), target.path,
                                                 11};
  req.set(http::field::host, target.host);
  req.set(http::field::user_agent, "switchboard/" SWITCHBOARD_VERSION);
  for (const auto& [k, v] : spec.headers)
    req.set(k, v);
  req.body() = {spec.body.data(), spec.body.size()};
  req.prepare_payload();

  Watchdog watchdog(beast::get_lowest_layer(stream).socket(), spec.read_timeout);
  auto [wec, wn] = co_await http::async_write(stream, req, tuple_awaitable);
  if (watchdog.fired())
    co_return make_error(ErrorCode::Timeout, "timed out sending the request to " + target.host);
  if (wec)
    co_return make_error(ErrorCode::Unavailable,
                         "sending to " + target.host + " failed: " + wec.message());
  watchdog.activity();

  // Room for a whole typical response at once: Beast reads at most the buffer's free capacity
  // (512 bytes when it is empty), and each read is a round through the event loop.
  beast::flat_buffer buffer;
  buffer.reserve(kReadBytes);
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);  // enforced below, so that long streams are not cut at 8 MB
  auto [hec, hn] = co_await http::async_read_header(stream, buffer, parser, tuple_awaitable);
  if (watchdog.fired()) co_return make_error(ErrorCode::Timeout, "no response from " + target.host);
  if (hec)
    co_return make_error(ErrorCode::Unavailable,
                         "reading the response of " + target.host + " failed: " + hec.message());
  watchdog.activity();
  state.answered = true;

  HttpResponseHead head;
  head.status = static_cast<int>(parser.get().result_int());
  for (const auto& f : parser.get())
    head.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  if (on_head) on_head(head);

  // The body: the bytes already buffered are parsed here, and the stream is read only when the
  // parser needs more. (http::async_read_some would complete once per chunk of the body, each
  // completion a round through the event loop, although the bytes are already here.)
  auto broke_off = [&](boost::system::error_code ec) {
    return make_error(ErrorCode::Unavailable,
                      "the response of " + target.host + " broke off: " + ec.message());
  };
  parser.eager(true);
  std::size_t total = 0;
  std::array<char, 16384> chunk;
  while (!parser.is_done()) {
    parser.get().body().data = chunk.data();
    parser.get().body().size = chunk.size();
    boost::system::error_code ec = http::error::need_more;
    if (buffer.size() > 0) buffer.consume(parser.put(buffer.data(), ec));
    std::size_t got = chunk.size() - parser.get().body().size;
    total += got;
    if (total > spec.max_body_bytes)
      co_return make_error(ErrorCode::TooLarge, "the response of " + target.host + " is over " +
                                                    std::to_string(spec.max_body_bytes) + " bytes");
    if (got && on_body) on_body(std::string_view(chunk.data(), got));
    if (!ec || ec == http::error::need_buffer) continue;
    if (ec != http::error::need_more) co_return broke_off(ec);

    auto [rec, n] = co_await stream.async_read_some(buffer.prepare(kReadBytes), tuple_awaitable);
    if (watchdog.fired())
      co_return make_error(ErrorCode::Timeout, target.host + " stopped sending for " +
                                                   std::to_string(spec.read_timeout.count()) +
                                                   " ms");
    if (rec == asio::error::eof) {
      // The end of a body that runs to the connection's close, or a message cut short.
      boost::system::error_code eof;
      parser.put_eof(eof);
      if (!eof && !parser.is_done()) eof = http::error::partial_message;
      if (eof) co_return broke_off(eof);
      continue;
    }
    if (rec) co_return broke_off(rec);
    buffer.commit(n);
    watchdog.activity();
  }
  // Bytes past the response would belong to no request: such a connection is not reused.
  state.reusable = parser.keep_alive() && buffer.size() == 0;
  co_return head;
}

// Closes `socket` when the abort signal fires. The close runs on the socket's executor and is
// skipped once this guard is gone, so a late abort never touches a destroyed socket.
class CloseOnAbort {
 public:
  CloseOnAbort(const std::shared_ptr<AbortSignal>& signal, tcp::socket& socket)
      : alive_(std::make_shared<bool>(true)), registration_(signal, [alive = alive_, &socket] {
          asio::post(socket.get_executor(), [alive, &socket] {
            boost::system::error_code ignored;
            if (*alive) socket.close(ignored);
          });
        }) {}
  ~CloseOnAbort() { *alive_ = false; }
  CloseOnAbort(const CloseOnAbort&) = delete;
  CloseOnAbort& operator=(const CloseOnAbort&) = delete;

 private:
  std::shared_ptr<bool> alive_;
  AbortSignal::Registration registration_;
};

// Connects `stream` to the target: directly for an IP address, through the resolver otherwise.
// Returns the endpoint it connected to.
asio::awaitable<Result<tcp::endpoint>> connect(beast::tcp_stream& stream,
                                               const HttpRequestSpec& spec, const Target& target) {
  auto executor = co_await asio::this_coro::executor;
  boost::system::error_code aec;
  auto address = asio::ip::make_address(target.host, aec);
  std::uint16_t port = 0;
  auto [end, pec] =
      std::from_chars(target.port.data(), target.port.data() + target.port.size(), port);
  if (!aec && pec == std::errc() && end == target.port.data() + target.port.size()) {
    tcp::endpoint endpoint(address, port);
    auto connected = co_await with_timeout(
        [&] { return stream.async_connect(endpoint, tuple_awaitable); }, spec.connect_timeout);
    if (!connected)
      co_return make_error(ErrorCode::Timeout,
                           "connecting to " + target.host + ":" + target.port + " timed out");
    if (auto [cec] = *connected; cec)
      co_return make_error(ErrorCode::Unavailable, "cannot connect to " + target.host + ":" +
                                                       target.port + ": " + cec.message());
    co_return endpoint;
  }
  tcp::resolver resolver(executor);
  auto resolved = co_await with_timeout(
      [&] { return resolver.async_resolve(target.host, target.port, tuple_awaitable); },
      spec.connect_timeout);
  if (!resolved)
    co_return make_error(ErrorCode::Timeout, "resolving " + target.host + " timed out");
  // Not a structured binding: the lambda below captures it, which clang before 16 refuses.
  auto& [rec, resolved_endpoints] = *resolved;
  const auto& endpoints = resolved_endpoints;
  if (rec)
    co_return make_error(ErrorCode::Unavailable,
                         "cannot resolve " + target.host + ": " + rec.message());
  auto connected = co_await with_timeout(
      [&] { return stream.async_connect(endpoints, tuple_awaitable); }, spec.connect_timeout);
  if (!connected)
    co_return make_error(ErrorCode::Timeout,
                         "connecting to " + target.host + ":" + target.port + " timed out");
  auto [cec, endpoint] = *connected;
  if (cec)
    co_return make_error(ErrorCode::Unavailable, "cannot connect to " + target.host + ":" +
                                                     target.port + ": " + cec.message());
  co_return endpoint;
}

asio::awaitable<Result<HttpResponseHead>> fetch_once(
    const HttpRequestSpec& spec, const Target& target,
    const std::function<void(const HttpResponseHead&)>& on_head,
    const std::function<void(std::string_view)>& on_body) {
  auto executor = co_await asio::this_coro::executor;
  const std::string origin = target.host + ":" + target.port;
  Result<HttpResponseHead> result = make_error(ErrorCode::Internal, "not run");
  if (!target.tls) {
    // A pooled connection the server has closed meanwhile fails before any answer; the request
    // then goes once more on a new connection.
    ConnectionPool* pool = spec.keep_alive ? &ConnectionPool::of(executor) : nullptr;
    for (int attempt = 0; attempt < 2; ++attempt) {
      std::unique_ptr<beast::tcp_stream> connection;
      if (pool && attempt == 0) connection = pool->take(origin);
      bool reused = connection != nullptr;
      if (!reused) {
        connection = std::make_unique<beast::tcp_stream>(executor);
        auto connected = co_await connect(*connection, spec, target);
        if (!connected) co_return connected.error();
      }
      ExchangeState state;
      {
        // An abort closes the socket, which ends whatever read or write is in flight.
        CloseOnAbort on_abort(spec.abort, connection->socket());
        result = co_await exchange(*connection, spec, target, on_head, on_body, state);
      }
      bool aborted = spec.abort && spec.abort->aborted();
      if (!result && reused && !state.answered && !aborted &&
          result.error().code == ErrorCode::Unavailable)
        continue;
      if (result && state.reusable && pool && !aborted && connection->socket().is_open())
        pool->give_back(origin, std::move(connection));
      break;
    }
  } else {
    beast::tcp_stream tcp_stream(executor);
    auto connected = co_await connect(tcp_stream, spec, target);
    if (!connected) co_return connected.error();
    beast::ssl_stream<beast::tcp_stream> tls(std::move(tcp_stream), tls_context());
    if (!SSL_set_tlsext_host_name(tls.native_handle(), target.host.c_str()))
      co_return make_error(ErrorCode::Unavailable,
                           "TLS: cannot set the server name for " + target.host);
    tls.set_verify_callback(ssl::host_name_verification(target.host));
    CloseOnAbort on_abort(spec.abort, beast::get_lowest_layer(tls).socket());
    auto hs = co_await with_timeout(
        [&] { return tls.async_handshake(ssl::stream_base::client, tuple_awaitable); },
        spec.connect_timeout);
    if (!hs)
      co_return make_error(ErrorCode::Timeout, "TLS handshake with " + target.host + " timed out");
    if (auto [hec] = *hs; hec)
      co_return make_error(ErrorCode::Unavailable,
                           "TLS handshake with " + target.host + " failed: " + hec.message());
    ExchangeState state;
    result = co_await exchange(tls, spec, target, on_head, on_body, state);
    boost::system::error_code ignored;
    beast::get_lowest_layer(tls).socket().close(ignored);
  }
  if (spec.abort && spec.abort->aborted())
    co_return make_error(ErrorCode::Unavailable, "aborted: " + spec.abort->reason());
  co_return result;
}

}  // namespace

asio::awaitable<Result<HttpResponseHead>> fetch_streaming(
    HttpRequestSpec spec, std::function<void(const HttpResponseHead&)> on_head,
    std::function<void(std::string_view)> on_body) {
  for (int hop = 0;; ++hop) {
    if (spec.abort && spec.abort->aborted())
      co_return make_error(ErrorCode::Unavailable, "aborted: " + spec.abort->reason());
    auto target = parse_target(spec.url);
    if (!target) co_return target.error();
    // Redirects are followed only when asked; their bodies are not passed on.
    std::string location;
    bool redirect = false;
    auto head_hook = [&](const HttpResponseHead& h) {
      redirect = hop < spec.max_redirects && h.status >= 300 && h.status < 400 &&
                 !h.header("location").empty();
      if (redirect)
        location = h.header("location");
      else if (on_head) {
        HttpResponseHead copy = h;
        copy.final_url = spec.url;
        on_head(copy);
      }
    };
    auto body_hook = [&](std::string_view b) {
      if (!redirect && on_body) on_body(b);
    };
    auto r = co_await fetch_once(spec, *target, head_hook, body_hook);
    if (!r || !redirect) {
      if (r) r->final_url = spec.url;
      co_return r;
    }
    auto base = boost::urls::parse_absolute_uri(spec.url);
    boost::urls::url resolved;
    auto rel = boost::urls::parse_uri_reference(location);
    if (!base || !rel || !boost::urls::resolve(*base, *rel, resolved))
      co_return make_error(ErrorCode::Unavailable, "bad redirect location: " + location);
    spec.url = std::string(resolved.buffer());
    if (spec.method == "POST") {
      spec.method = "GET";
      spec.body.clear();
    }
  }
}

asio::awaitable<Result<HttpResponse>> fetch(HttpRequestSpec spec) {
  HttpResponse out;
  std::size_t limit = spec.max_body_bytes;
  auto r = co_await fetch_streaming(std::move(spec), nullptr, [&](std::string_view b) {
    if (out.body.size() + b.size() <= limit) out.body.append(b);
  });
  if (!r) co_return r.error();
  out.head = std::move(*r);
  co_return out;
}

}  // namespace sb::net
