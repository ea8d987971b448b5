// The server's whole edge, in process: the components `serve` builds (app::compose) behind the
// real HttpServer on a loopback port, fed over real sockets. The first input byte picks the way
// in, the rest is what a client sends:
//   even: raw bytes of HTTP requests (Beast's parser, the routes, every route body, the error
//         mapping); the connection is half-closed after them and read to the end;
//   odd:  one WebSocket text message on /client-tools/ws/fuzz-N, a new client each time (the
//         WebSocket message handler: register, result, progress, unregister and whatever else).
// Checks beyond sanitizers and hangs: anything the server answers over HTTP is an HTTP response
// (1.1, or 1.0 to a 1.0 request), and no input makes it answer 500 (bad input is the client's
// error, never the server's).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "app/compose.hpp"
#include "server/http_server.hpp"
#include "split.hpp"
#include "util/log.hpp"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Started once per process and never stopped: libFuzzer ends the process when it is done.
class InProcessServer {
 public:
  InProcessServer() {
    sb::log::set_level(sb::log::Level::Error);
    char dir[] = "/tmp/switchboard-fuzz-XXXXXX";
    if (!::mkdtemp(dir)) sb::fuzz::fail("mkdtemp");
    sb::app::Paths paths{fs::path(dir) / "data", fs::path(dir) / "project"};
    fs::create_directories(paths.directory);

    sb::config::Config cfg;
    cfg.server.port = 0;
    cfg.server.idle_timeout = 1000ms;
    // A head that never ends (the fuzzer's inputs often have none) holds its connection for
    // this long: as short as the idle wait, or thousands of inputs fill the connection limit.
    cfg.server.header_timeout = 1000ms;
    // Short waits, so that calls to tools nobody answers end within the fuzzer's time limit.
    cfg.client_tools.default_timeout = 200ms;
    cfg.client_tools.max_timeout = 500ms;
    cfg.client_tools.reconnect_grace = 0ms;
    cfg.client_tools.rate_limit = 0;
    cfg.raw["permission"] = sb::json::object{{"timeout", 200}};
    auto composed = sb::app::compose(io_, std::move(cfg), paths,
                                     [](const std::string&) { return std::string(); });
    if (!composed) sb::fuzz::fail("compose");
    server_ = std::make_unique<sb::server::HttpServer>(io_, std::move(composed->state));
    auto endpoint = server_->start();
    if (!endpoint) sb::fuzz::fail("start");
    port_ = endpoint->port();
    thread_ = std::thread([this] { io_.run(); });
    thread_.detach();
  }

  unsigned short port() const { return port_; }

 private:
  boost::asio::io_context io_{1};
  std::unique_ptr<sb::server::HttpServer> server_;
  unsigned short port_ = 0;
  std::thread thread_;
};

InProcessServer& server() {
  // Never destroyed: its thread runs the server until the process ends, and a static's
  // destructor at exit would tear the server down under that thread (it crashed in
  // ConnectionSet::remove when a WebSocket ended during exit).
  static InProcessServer* instance = new InProcessServer;
  return *instance;
}

// A blocking loopback connection whose reads give up after a few seconds.
class Connection {
 public:
  explicit Connection(unsigned short port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    if (fd_ < 0) sb::fuzz::fail("socket");
    timeval timeout{3, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    // Closed with a reset, not a FIN: thousands of connections a second would otherwise fill
    // the loopback's ports with TIME_WAIT and make connect() fail for want of a port.
    linger reset{1, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    // libFuzzer's timer signal (every second with -timeout) interrupts a call on a socket with
    // a timeout set, which then fails with EINTR whatever SA_RESTART says (signal(7)); the
    // connection itself goes on, so a connect is finished rather than taken for a refusal.
    int rc = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    for (int tries = 0; rc != 0 && (errno == EINTR || errno == EALREADY) && tries < 300; ++tries) {
      pollfd ready{fd_, POLLOUT, 0};
      ::poll(&ready, 1, 10);
      rc = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    }
    if (rc != 0 && errno != EISCONN) {
      std::string why = "the server does not accept connections any more: ";
      why += std::strerror(errno);
      sb::fuzz::fail(why.c_str());
    }
  }
  ~Connection() { ::close(fd_); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // False when the server closed the connection first (it may, after an error response).
  bool send(std::string_view bytes) {
    auto deadline = std::chrono::steady_clock::now() + 3s;
    while (!bytes.empty()) {
      ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      // The timer signal, as in connect (with a deadline, as in read).
      if (n < 0 && errno == EINTR && std::chrono::steady_clock::now() < deadline) continue;
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }
  void finish_sending() { ::shutdown(fd_, SHUT_WR); }

  // Reads until `stop` appears, the server closes, or a read times out.
  std::string read(std::string_view stop = {}) {
    std::string received;
    char buf[16384];
    auto deadline = std::chrono::steady_clock::now() + 3s;
    for (;;) {
      if (!stop.empty() && received.find(stop) != std::string::npos) break;
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      // The timer signal, as in connect; each call starts the socket's timeout again, hence
      // the read's own deadline (a stream the server holds open ends the read at it).
      if (n < 0 && errno == EINTR && std::chrono::steady_clock::now() < deadline) continue;
      if (n <= 0) break;
      received.append(buf, static_cast<std::size_t>(n));
      if (received.size() > (8u << 20)) break;
    }
    return received;
  }

 private:
  int fd_;
};

// An HTTP/1.0 request is answered in HTTP/1.0, the rest in HTTP/1.1.
bool status_line_at(std::string_view answer, std::size_t at) {
  return answer.substr(at, 9) == "HTTP/1.1 " || answer.substr(at, 9) == "HTTP/1.0 ";
}

void check_http_answer(std::string_view answer) {
  if (answer.empty()) return;  // closed without a word: allowed for bytes that are not HTTP
  if (!status_line_at(answer, 0)) sb::fuzz::fail("an answer that is not HTTP");
  // Every response in the answer (keep-alive: several requests in one input).
  for (std::size_t at = answer.find("HTTP/1."); at != std::string_view::npos;
       at = answer.find("HTTP/1.", at + 1)) {
    if (status_line_at(answer, at) && answer.substr(at + 9, 3) == "500")
      sb::fuzz::fail("a 500 for a client's input");
  }
}

void fuzz_http(std::string_view bytes) {
  Connection c(server().port());
  if (c.send(bytes)) c.finish_sending();
  check_http_answer(c.read());
}

// A client frame: FIN + text, masked with a zero key (valid, and leaves the payload as is).
std::string ws_client_frame(unsigned char opcode, std::string_view payload) {
  std::string frame;
  frame.push_back(static_cast<char>(0x80 | opcode));
  if (payload.size() < 126) {
    frame.push_back(static_cast<char>(0x80 | payload.size()));
  } else if (payload.size() < 65536) {
    frame.push_back(static_cast<char>(0x80 | 126));
    frame.push_back(static_cast<char>(payload.size() >> 8));
    frame.push_back(static_cast<char>(payload.size() & 0xff));
  } else {
    frame.push_back(static_cast<char>(0x80 | 127));
    for (int shift = 56; shift >= 0; shift -= 8)
      frame.push_back(static_cast<char>((payload.size() >> shift) & 0xff));
  }
  frame.append(4, '\0');
  frame.append(payload);
  return frame;
}

void fuzz_websocket(std::string_view message) {
  // A new clientID each time: its first connection needs no client token (it is issued one).
  static unsigned long next_client = 0;
  Connection c(server().port());
  c.send("GET /client-tools/ws/fuzz-" + std::to_string(next_client++) +
         " HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
         "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
         "Sec-WebSocket-Version: 13\r\n\r\n");
  std::string head = c.read("\r\n\r\n");
  // On a busy disk a handshake can go unanswered for seconds: storing the new client's token may
  // run SQLite's WAL checkpoint (fdatasync) on the server's one thread (docs/fuzzing.md, "Open").
  // The message is then not sent.
  if (!head.starts_with("HTTP/1.1 101")) return;
  // The message, then a close: the server answers the message (or not), then closes.
  if (c.send(ws_client_frame(0x1, message))) c.send(ws_client_frame(0x8, {}));
  c.read();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1)
    fuzz_websocket(rest);
  else
    fuzz_http(rest);
  return 0;
}
