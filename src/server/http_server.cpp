#include "server/http_server.hpp"

#include <boost/beast/websocket.hpp>

#include <sys/resource.h>

#include <array>

#include "server/access.hpp"
#include "server/routes.hpp"
#include "util/log.hpp"

namespace sb::server {

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

namespace {

void log_exception(std::exception_ptr e) {
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    log::error("connection ended with an exception: ", ex.what());
  }
}

// After an answer that ends the connection, the peer may still be sending (a body over the limit,
// a head too long): closing with its input unread would make the kernel reset the connection, and
// the reset fails the peer's next write or discards the answer before the peer reads it. So the
// connection closes in stages (RFC 9112 section 9.6): sending is shut down, then what the peer
// still sends is read and dropped until it closes its side, the stream's deadline (set by the
// caller) passes, or kLingerBytes have come. The bounds give a client time to finish sending a
// body a few MB over the limit and read the answer; past them the peer is not worth the
// connection's place under server.maxConnections (it may be sending without end on purpose), and
// the reset is its own doing.
constexpr std::size_t kLingerBytes = 4 * 1024 * 1024;
constexpr auto kLingerTime = std::chrono::seconds(3);

asio::awaitable<void> close_in_stages(beast::tcp_stream& stream) {
  boost::system::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
  std::array<char, 16384> scratch;
  for (std::size_t dropped = 0; dropped < kLingerBytes;) {
    auto [ec, n] = co_await stream.async_read_some(asio::buffer(scratch), tuple_awaitable);
    if (ec) break;
    dropped += n;
  }
}

// Writes a response: Beast's serializer makes the bytes, which go out in one write. (Beast's
// async_write hands its nested buffer sequences through every layer of the composed operation
// and the stream, which walk them again and again: 18 k instructions a small response, against
// 5 k with the bytes in one buffer.) Every response the routes build has its Content-Length set
// (prepare_payload), so what the serializer gives is the head and the body.
asio::awaitable<boost::system::error_code> write_response(beast::tcp_stream& stream,
                                                          const Response& res) {
  std::string bytes;
  bytes.reserve(256 + res.body().size());
  http::response_serializer<http::string_body> serializer(res);
  boost::system::error_code ec;
  while (!ec && !serializer.is_done()) {
    serializer.next(ec, [&](boost::system::error_code&, const auto& buffers) {
      std::size_t n = 0;
      for (asio::const_buffer b : beast::buffers_range_ref(buffers)) {
        bytes.append(static_cast<const char*>(b.data()), b.size());
        n += b.size();
      }
      serializer.consume(n);
    });
  }
  if (ec) co_return ec;
  auto [wec, n] = co_await asio::async_write(stream, asio::buffer(bytes), tuple_awaitable);
  co_return wec;
}

// One HTTP connection: reads requests one after another (keep-alive) until the peer leaves,
// the idle timeout passes, or a route takes the connection over.
class HttpSession : public Stoppable, public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(ServerState& state, tcp::socket socket, ConnectionSlot slot)
      : state_(state), stream_(std::move(socket)), slot_(std::move(slot)) {}

  asio::awaitable<void> run() {
    auto handle = state_.connections.add(weak_from_this());
    co_await serve();
    state_.connections.remove(handle);
  }

  // Shutdown: a connection waiting for its next request, or lingering after its last answer,
  // closes now; one in the middle of a request finishes it and then closes (see serve()).
  void stop() override {
    if ((!busy_ && !taken_over_) || lingering_) {
      boost::system::error_code ignored;
      stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
      stream_.socket().close(ignored);
    }
  }

 private:
  using Parser = http::request_parser<http::string_body>;

  asio::awaitable<void> serve() {
    const auto& opts = state_.config.server;
    beast::flat_buffer buffer;
    for (;;) {
      if (state_.stopping) break;
      Parser parser;
      parser.body_limit(opts.max_body_bytes);
      parser.header_limit(opts.max_header_bytes);
      busy_ = false;
      auto ec = co_await read_head(parser, buffer);
      // Beast has no limit on the number of fields; the head is bounded (server.maxHeaderBytes),
      // so counting them once it is in costs little, and comes before any body is read.
      if (!ec && header_count(parser.get()) > opts.max_header_count) {
        busy_ = true;
        auto res = error_response(
            make_error(ErrorCode::TooLarge,
                       "request header has " + std::to_string(header_count(parser.get())) +
                           " fields, over the limit of " + std::to_string(opts.max_header_count) +
                           " (server.maxHeaderCount)"),
            parser.get());
        add_cors_headers(state_, parser.get(), res);
        co_await write_and_close(res);
        co_return;
      }
      if (!ec && !parser.is_done()) {
        // The body: within idleTimeout of the head.
        stream_.expires_after(opts.idle_timeout);
        std::tie(ec, std::ignore) =
            co_await http::async_read(stream_, buffer, parser, tuple_awaitable);
      }
      busy_ = true;
      if (ec == http::error::body_limit) {
        Request head = parser.release();
        auto res =
            error_response(make_error(ErrorCode::TooLarge, "request body over the limit of " +
                                                               std::to_string(opts.max_body_bytes) +
                                                               " bytes (server.maxBodyBytes)"),
                           head);
        add_cors_headers(state_, head, res);
        co_await write_and_close(res);
        co_return;
      }
      if (ec == http::error::header_limit) {
        Request head;
        auto res = error_response(
            make_error(ErrorCode::TooLarge, "request header over the limit of " +
                                                std::to_string(opts.max_header_bytes) +
                                                " bytes (server.maxHeaderBytes)"),
            head);
        co_await write_and_close(res);
        co_return;
      }
      if (ec) {
        // A malformed request gets an answer; a peer that left or went idle (or trickled its
        // head for longer than headerTimeout) does not.
        bool bad_input = ec.category() == make_error_code(http::error::end_of_stream).category() &&
                         ec != http::error::end_of_stream && ec != http::error::partial_message;
        if (bad_input) {
          Request head;
          auto res = error_response(
              make_error(ErrorCode::InvalidRequest, "malformed HTTP request: " + ec.message()),
              head);
          co_await write_and_close(res);
        }
        co_return;
      }
      Request req = parser.release();
      stream_.expires_never();

      std::optional<Response> res;
      try {
        taken_over_ = beast::websocket::is_upgrade(req);
        TakeOver take_over;
        res = co_await dispatch(state_, stream_, req, take_over);
        if (!res) {
          // An SSE stream or a WebSocket: it runs on its own from here, and this session, with
          // its frames, buffer and stream, ends now.
          taken_over_ = true;
          if (take_over) {
            tcp::socket socket = stream_.release_socket();
            auto executor = socket.get_executor();
            // The push stream keeps the connection's place under server.maxConnections.
            asio::co_spawn(
                executor,
                run_holding(std::move(slot_), take_over(std::move(socket), std::move(req))),
                log_exception);
          }
          co_return;
        }
        taken_over_ = false;
      } catch (const std::exception& e) {
        log::error("internal error on ", req.method_string(), " ", req.target(), ": ", e.what());
        res = error_response(make_error(ErrorCode::Internal, e.what()), req);
      }
      // Every answer, errors included: a page of an allowed origin can read why it failed.
      add_cors_headers(state_, req, *res);
      bool keep_alive = res->keep_alive() && !state_.stopping;
      res->keep_alive(keep_alive);
      stream_.expires_after(std::chrono::seconds(30));
      auto wec = co_await write_response(stream_, *res);
      if (wec || !keep_alive) break;
    }
    boost::system::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  }

  // Reads a request's head: its first bytes within idleTimeout (the wait between requests), the
  // rest of the head within headerTimeout of them, so that a peer that trickles its head a byte
  // at a time is closed although it is never idle. Usually the whole request comes with its first
  // bytes and is parsed here without another read.
  asio::awaitable<boost::system::error_code> read_head(Parser& parser, beast::flat_buffer& buffer) {
    const auto& opts = state_.config.server;
    if (buffer.size() == 0) {
      stream_.expires_after(opts.idle_timeout);
      auto [ec, n] = co_await stream_.async_read_some(
          buffer.prepare(beast::read_size(buffer, 65536)), tuple_awaitable);
      if (ec) co_return ec;  // the peer left or stayed idle: nothing to answer
      buffer.commit(n);
    }
    parser.eager(true);
    while (!parser.is_done()) {
      boost::system::error_code ec;
      std::size_t used = parser.put(buffer.data(), ec);
      buffer.consume(used);
      if (ec == http::error::need_more || (!ec && used == 0)) break;
      if (ec) co_return ec;
    }
    if (!parser.is_header_done()) {
      stream_.expires_after(opts.header_timeout);
      auto [ec, n] = co_await http::async_read_header(stream_, buffer, parser, tuple_awaitable);
      if (ec) co_return ec;
    }
    co_return boost::system::error_code{};
  }

  static std::size_t header_count(const Request& req) {
    return static_cast<std::size_t>(std::distance(req.begin(), req.end()));
  }

  // For an answer to a request whose rest is not read (over a limit, malformed).
  asio::awaitable<void> write_and_close(Response& res) {
    res.keep_alive(false);
    stream_.expires_after(std::chrono::seconds(10));
    // (Not `if (co_await …) co_return;`: g++ 12 built that into a trap (ud2) at the resume.)
    auto ec = co_await write_response(stream_, res);
    if (!ec) {
      stream_.expires_after(kLingerTime);
      lingering_ = true;
      co_await close_in_stages(stream_);
    }
  }

  ServerState& state_;
  beast::tcp_stream stream_;
  ConnectionSlot slot_;  // this connection under server.maxConnections
  bool busy_ = false;
  bool taken_over_ = false;
  bool lingering_ = false;  // answered, reading what the peer still sends before closing
};

// Descriptors kept free of connections for the database, the log, model connections and tool
// processes.
constexpr std::size_t kReservedDescriptors = 128;
// Refusals in flight at once (each holds its socket for up to a second); beyond that a refused
// connection is closed without an answer.
constexpr std::size_t kMaxRefusing = 32;

// server.maxConnections, within the open-file limit: the soft limit is raised as far as the hard
// one allows, and if that is still too low, fewer connections are accepted (and the log says why),
// so that the server keeps descriptors for everything else instead of failing to accept.
std::size_t fit_connection_limit(std::size_t wanted) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return wanted;
  const rlim_t needed = static_cast<rlim_t>(wanted + kReservedDescriptors);
  if (lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < needed) {
    rlimit raised = lim;
    raised.rlim_cur =
        lim.rlim_max == RLIM_INFINITY || lim.rlim_max >= needed ? needed : lim.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  if (lim.rlim_cur == RLIM_INFINITY || lim.rlim_cur >= needed) return wanted;
  auto fits = static_cast<std::size_t>(lim.rlim_cur > 2 * kReservedDescriptors
                                           ? lim.rlim_cur - kReservedDescriptors
                                           : lim.rlim_cur / 2);
  log::warn("server.maxConnections is ", wanted, " but the open-file limit (ulimit -n) is ",
            lim.rlim_cur, ": at most ", fits, " connections are accepted, ", kReservedDescriptors,
            " descriptors stay for the database, model connections and tool processes");
  return std::max<std::size_t>(fits, 1);
}

// A connection over server.maxConnections: answered 429 without reading its request, then closed
// in stages within a second of its acceptance. `slot` counts the refusals in flight.
asio::awaitable<void> refuse_connection(tcp::socket socket, std::size_t limit,
                                        [[maybe_unused]] ConnectionSlot slot) {
  beast::tcp_stream stream(std::move(socket));
  Request none;
  auto res =
      error_response(make_error(ErrorCode::RateLimited,
                                "server at its connection limit of " + std::to_string(limit) +
                                    " (server.maxConnections); try again later"),
                     none);
  res.keep_alive(false);
  stream.expires_after(std::chrono::seconds(1));
  if (!co_await write_response(stream, res)) co_await close_in_stages(stream);
}

}  // namespace

HttpServer::HttpServer(asio::io_context& io, std::unique_ptr<ServerState> state)
    : io_(io), state_(std::move(state)), acceptor_(io) {}

HttpServer::~HttpServer() = default;

Result<tcp::endpoint> HttpServer::start() {
  const auto& opts = state_->config.server;
  boost::system::error_code ec;
  auto address = asio::ip::make_address(opts.hostname, ec);
  tcp::endpoint endpoint;
  if (ec) {
    tcp::resolver resolver(io_);
    auto results = resolver.resolve(opts.hostname, std::to_string(opts.port), ec);
    if (ec || results.empty())
      return make_error(ErrorCode::InvalidRequest,
                        "cannot resolve hostname \"" + opts.hostname + "\": " + ec.message());
    endpoint = results.begin()->endpoint();
  } else {
    endpoint = tcp::endpoint(address, opts.port);
  }
  // Without a password anyone who reaches the port can run tools on this machine: only
  // loopback, unless the operator says otherwise (and then they hear about it).
  if (opts.password.empty() && !endpoint.address().is_loopback()) {
    if (!opts.allow_remote)
      return make_error(ErrorCode::InvalidRequest,
                        "refusing to listen on " + opts.hostname +
                            " without a password: anyone who reaches it could run tools here. "
                            "Set server.password (or SWITCHBOARD_SERVER_PASSWORD), or pass "
                            "--allow-remote (server.allowRemote) if a proxy in front guards it");
    log::warn("WARNING: listening on ", opts.hostname,
              " WITHOUT A PASSWORD (--allow-remote): anyone who can reach this port can use the "
              "server and every tool it offers. Set server.password.");
  }
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return make_error(ErrorCode::Internal, "cannot listen on " + opts.hostname + ":" +
                                               std::to_string(opts.port) + ": " + ec.message());
  state_->connection_limit = fit_connection_limit(opts.max_connections);
  asio::co_spawn(io_, accept_loop(), log_exception);
  return acceptor_.local_endpoint();
}

asio::awaitable<void> HttpServer::accept_loop() {
  asio::steady_timer backoff(io_);
  for (;;) {
    // The server runs one thread (io_context(1)), so connections need no strand of their own;
    // the core posts to their executor, which runs handlers on that one thread in order.
    auto [ec, socket] = co_await acceptor_.async_accept(io_, tuple_awaitable);
    if (ec) {
      if (!acceptor_.is_open() || ec == asio::error::operation_aborted) co_return;
      // Out of file descriptors and the like: wait a little instead of spinning.
      log::warn("accept failed: ", ec.message());
      backoff.expires_after(std::chrono::milliseconds(100));
      co_await backoff.async_wait(tuple_awaitable);
      continue;
    }
    boost::system::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    auto executor = socket.get_executor();
    if (state_->open_connections >= state_->connection_limit) {
      if (state_->refusing_connections < kMaxRefusing)
        asio::co_spawn(executor,
                       refuse_connection(std::move(socket), state_->connection_limit,
                                         ConnectionSlot(state_->refusing_connections)),
                       log_exception);
      continue;  // (a socket not handed on closes here)
    }
    auto session = std::make_shared<HttpSession>(*state_, std::move(socket),
                                                 ConnectionSlot(state_->open_connections));
    // The completion handler owns the session until its coroutine ends.
    asio::co_spawn(executor, session->run(), [session](std::exception_ptr e) { log_exception(e); });
  }
}

void HttpServer::shutdown() {
  if (state_->stopping) return;
  state_->stopping = true;
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  // Pending calls end first, so that their waiting callers and clients hear why.
  if (state_->sessions) state_->sessions->shutdown();
  if (state_->permissions) state_->permissions->shutdown();
  if (state_->questions) state_->questions->shutdown();
  if (state_->mcp) state_->mcp->shutdown();
  state_->registry->shutdown();
  state_->connections.stop_all();
  // Last: the others take this node's waiting turns over once it has left.
  if (state_->cluster) asio::co_spawn(io_, state_->cluster->stop(), log_exception);
}

void HttpServer::when_drained(std::function<void()> done) {
  if (state_->connections.size() == 0) {
    done();
    return;
  }
  state_->connections.on_empty = std::move(done);
}

}  // namespace sb::server
