#pragma once
// For tests: runs a coroutine on an io_context until it has ended, and returns its result (what
// a server's handler would co_await). Other work on the io_context runs meanwhile.
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <optional>
#include <stdexcept>
#include <utility>

namespace sb {

template <class T>
T run_to_end(boost::asio::io_context& io, boost::asio::awaitable<T> work) {
  std::optional<T> out;
  bool ended = false;
  boost::asio::co_spawn(
      io, [&]() -> boost::asio::awaitable<void> { out.emplace(co_await std::move(work)); },
      // Ended here, not in the coroutine: this handler runs after it, and must not run later
      // than this call.
      [&](std::exception_ptr e) {
        ended = true;
        if (e) std::rethrow_exception(e);
      });
  io.restart();
  while (!ended)
    if (io.run_one() == 0) throw std::logic_error("run_to_end: the io_context ran out of work");
  if (!out) throw std::logic_error("run_to_end: the coroutine threw");
  return std::move(*out);
}

}  // namespace sb
