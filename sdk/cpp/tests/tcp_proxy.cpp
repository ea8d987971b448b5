#include "tcp_proxy.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <future>

namespace switchboard::test {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// Two sockets and the bytes between them; each direction relays until either side ends.
struct TcpProxy::Pipe : std::enable_shared_from_this<Pipe> {
  explicit Pipe(tcp::socket c) : client(std::move(c)), server(client.get_executor()) {}
  tcp::socket client;
  tcp::socket server;
  std::array<char, 16384> up{}, down{};
  bool closed = false;

  void close() {
    if (closed) return;
    closed = true;
    boost::system::error_code ignored;
    client.shutdown(tcp::socket::shutdown_both, ignored);
    server.shutdown(tcp::socket::shutdown_both, ignored);
    client.close(ignored);
    server.close(ignored);
  }

  void relay(tcp::socket& from, tcp::socket& to, std::array<char, 16384>& buf,
             std::function<void()> done) {
    from.async_read_some(asio::buffer(buf), [self = shared_from_this(), &from, &to, &buf, done](
                                                boost::system::error_code ec, std::size_t n) {
      if (ec) return done();
      asio::async_write(to, asio::buffer(buf.data(), n),
                        [self, &from, &to, &buf, done](boost::system::error_code ec, std::size_t) {
                          if (ec) return done();
                          self->relay(from, to, buf, done);
                        });
    });
  }
};

TcpProxy::TcpProxy(unsigned short target_port) : target_port_(target_port) {
  tcp::endpoint endpoint(asio::ip::make_address("127.0.0.1"), 0);
  acceptor_.open(endpoint.protocol());
  acceptor_.set_option(tcp::acceptor::reuse_address(true));
  acceptor_.bind(endpoint);
  acceptor_.listen();
  port_ = acceptor_.local_endpoint().port();
  accept_loop();
  thread_ = std::thread([this] { ioc_.run(); });
}

TcpProxy::~TcpProxy() {
  asio::post(ioc_, [this] {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    for (auto& pipe : pipes_)
      pipe->close();
    pipes_.clear();
  });
  thread_.join();
}

void TcpProxy::accept_loop() {
  acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
    if (ec) return;
    ++accepted_;
    auto pipe = std::make_shared<Pipe>(std::move(socket));
    if (refusing_) {
      pipe->close();
    } else {
      pipes_.insert(pipe);
      tcp::endpoint target(asio::ip::make_address("127.0.0.1"), target_port_);
      pipe->server.async_connect(target, [this, pipe](boost::system::error_code ec) {
        auto done = [this, pipe] {
          pipe->close();
          pipes_.erase(pipe);
        };
        if (ec || pipe->closed) return done();
        pipe->relay(pipe->client, pipe->server, pipe->up, done);
        pipe->relay(pipe->server, pipe->client, pipe->down, done);
      });
    }
    accept_loop();
  });
}

void TcpProxy::cut() {
  std::promise<void> done;
  asio::post(ioc_, [this, &done] {
    for (auto& pipe : pipes_)
      pipe->close();
    pipes_.clear();
    done.set_value();
  });
  done.get_future().wait();
}

}  // namespace switchboard::test
