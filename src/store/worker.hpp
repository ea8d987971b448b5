#pragma once
// store::Worker: where a store's calls run, so that the event loop does not wait for them.
//
// PostgreSQL answers over the network: a round trip at best, up to the server's
// statement_timeout + 2 s when it is slow or hung (store/postgres.hpp). Calls then run on a
// thread of the worker's own, one at a time and in the order they were made (the store has one
// connection: they would queue on its mutex anyway, and the order keeps a read made after a
// write seeing it), and the caller resumes on its own executor with the result. SQLite answers
// from a local file in microseconds, less than a hop between threads costs: calls run inline.
//
// A call must touch only what is thread-safe (the store) and own what it uses (captured by
// value): the caller's coroutine may be destroyed while the call runs (its loop stopped). Calls
// cannot be cancelled: each is bounded by the store's own deadlines.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <exception>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "util/error.hpp"

namespace sb::store {

class Worker {
 public:
  // `own_thread`: the calls run on a thread of the worker's; inline otherwise.
  explicit Worker(bool own_thread) {
    if (own_thread) thread_.emplace(1);
  }
  // Runs what is queued (a claim given back) and waits for it. The server's loop has ended by
  // then: a call's result posted to it is dropped with its caller's coroutine.
  ~Worker() {
    if (thread_) thread_->join();
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  bool inline_calls() const { return !thread_; }

  // Runs `f` (returning a Result) and gives its result to the calling coroutine. An exception
  // `f` throws becomes an Internal error.
  template <class F>
  boost::asio::awaitable<std::invoke_result_t<F&>> run(F f) {
    using R = std::invoke_result_t<F&>;
    if (!thread_) co_return guarded(f);
    auto initiate = [this](auto handler, F call) {
      auto executor = boost::asio::get_associated_executor(handler);
      // The caller's loop does not run out of work while the call runs.
      auto work = boost::asio::make_work_guard(executor);
      boost::asio::post(*thread_, [call = std::move(call), handler = std::move(handler),
                                   work = std::move(work)]() mutable {
        auto executor = work.get_executor();
        boost::asio::post(executor, [handler = std::move(handler), result = guarded(call),
                                     work = std::move(work)]() mutable {
          std::move(handler)(std::move(result));
        });
      });
    };
    co_return co_await boost::asio::async_initiate<const boost::asio::use_awaitable_t<>, void(R)>(
        initiate, boost::asio::use_awaitable, std::move(f));
  }

  // Runs `f` after the calls made before it, and nobody waits for it (a claim given back): `f`
  // says what went wrong itself.
  template <class F>
  void post(F f) {
    if (!thread_) {
      f();
      return;
    }
    boost::asio::post(*thread_, std::move(f));
  }

 private:
  template <class F>
  static std::invoke_result_t<F&> guarded(F& f) {
    try {
      return f();
    } catch (const std::exception& e) {
      return make_error(ErrorCode::Internal, std::string("store: ") + e.what());
    }
  }

  std::optional<boost::asio::thread_pool> thread_;
};

}  // namespace sb::store
