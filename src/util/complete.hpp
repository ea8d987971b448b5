#pragma once
// How a waiting operation of ours (a client-tool call, a question) ends: its handler is never
// run inside the code that ends it (a registry or service in the middle of its own work, maybe
// inside the handler's own cancellation callback), but posted to `executor` and from there
// dispatched to the handler's own executor (at once when that is the same one). Its
// cancellation slot is disconnected first: the slot points into the waiter's cancellation
// signal, which may be gone once the waiter has its outcome.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>

#include <utility>

namespace sb {

template <typename Handler, typename... Outcome>
void complete_later(const boost::asio::any_io_executor& executor, Handler handler,
                    Outcome... outcome) {
  if (!handler) return;
  if (auto slot = boost::asio::get_associated_cancellation_slot(handler); slot.is_connected())
    slot.clear();
  boost::asio::post(
      executor, [handler = std::move(handler), ... outcome = std::move(outcome)]() mutable {
        // Boost 1.81 cannot post to an any_completion_executor (it lacks blocking.never); dispatch
        // from here is the same, as this runs from the executor's queue.
        auto own = boost::asio::get_associated_executor(handler);
        boost::asio::dispatch(
            own, [handler = std::move(handler), ... outcome = std::move(outcome)]() mutable {
              std::move(handler)(std::move(outcome)...);
            });
      });
}

}  // namespace sb
