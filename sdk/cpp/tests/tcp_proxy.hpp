#pragma once
// A TCP proxy on loopback for fault injection: the SDK talks to the proxy, the proxy to the
// server, and a test cuts every connection or refuses new ones, as a bad network would.
// Thread-safe; runs its own I/O thread.
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <atomic>
#include <memory>
#include <set>
#include <thread>

namespace switchboard::test {

class TcpProxy {
 public:
  explicit TcpProxy(unsigned short target_port);
  ~TcpProxy();
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  unsigned short port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // Closes every connection that passes through now.
  void cut();
  // While refusing, a new connection is closed as soon as it is accepted.
  void refuse(bool on) { refusing_ = on; }
  // Connections accepted so far (refused ones included).
  std::size_t accepted() const { return accepted_; }

 private:
  struct Pipe;
  void accept_loop();

  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::acceptor acceptor_{ioc_};
  unsigned short target_port_;
  unsigned short port_ = 0;
  std::atomic<bool> refusing_{false};
  std::atomic<std::size_t> accepted_{0};
  std::set<std::shared_ptr<Pipe>> pipes_;  // on the I/O thread only
  std::thread thread_;
};

}  // namespace switchboard::test
