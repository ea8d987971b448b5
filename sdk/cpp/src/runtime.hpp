#pragma once
// Where the SDK's I/O runs: an io_context on a thread of its own, or an executor the program
// gives. run_blocking() turns an awaitable into a blocking call for plain programs.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include <optional>
#include <stdexcept>
#include <thread>

namespace switchboard::detail {

namespace asio = boost::asio;

class Runtime {
 public:
  Runtime();  // its own io_context and thread
  explicit Runtime(asio::any_io_executor executor);
  // Stops the own thread (pending work is dropped); the caller finished its work before.
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const asio::any_io_executor& executor() const { return executor_; }
  bool owns_thread() const { return own_.has_value(); }
  // True on a thread that runs this runtime's io_context (where blocking would deadlock).
  bool on_io_thread() const;

 private:
  std::optional<asio::io_context> own_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  std::thread thread_;
  asio::any_io_executor executor_;
};

// Runs `op` on the runtime and waits for it; rethrows its exception.
template <class T>
T run_blocking(const Runtime& runtime, asio::awaitable<T> op) {
  if (runtime.on_io_thread())
    throw std::logic_error(
        "switchboard: a blocking call on the SDK's I/O thread would deadlock; co_await the "
        "async_ variant instead");
  return asio::co_spawn(runtime.executor(), std::move(op), asio::use_future).get();
}

}  // namespace switchboard::detail
