#pragma once
// Socket settings shared by the HTTP and WebSocket connections.
#include <boost/asio/ip/tcp.hpp>

namespace switchboard::detail {

// Small request/response messages: do not wait to coalesce them (Nagle).
inline void set_no_delay(boost::asio::ip::tcp::socket& socket) {
  boost::system::error_code ignored;
  socket.set_option(boost::asio::ip::tcp::no_delay(true), ignored);
}

}  // namespace switchboard::detail
