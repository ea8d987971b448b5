#pragma once
// WaitGroup: a coroutine waits until every started task has finished. Single executor only
// (add/done/wait all run on the executor that owns it).
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace sb {

class WaitGroup {
 public:
  explicit WaitGroup(boost::asio::any_io_executor executor) : timer_(std::move(executor)) {}
  void add() { ++count_; }
  void done() {
    if (--count_ == 0) timer_.cancel();
  }
  std::size_t count() const { return count_; }
  boost::asio::awaitable<void> wait() {
    while (count_ > 0) {
      timer_.expires_at(boost::asio::steady_timer::time_point::max());
      co_await timer_.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
    }
  }

 private:
  boost::asio::steady_timer timer_;
  std::size_t count_ = 0;
};

}  // namespace sb
