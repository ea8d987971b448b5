#include "runtime.hpp"

#include <boost/asio/strand.hpp>

namespace switchboard::detail {

Runtime::Runtime() : own_(std::in_place, 1), work_(own_->get_executor()) {
  executor_ = own_->get_executor();
  thread_ = std::thread([this] { own_->run(); });
}

Runtime::Runtime(asio::any_io_executor executor) : executor_(std::move(executor)) {}

Runtime::~Runtime() {
  if (!own_) return;
  work_.reset();
  own_->stop();
  if (thread_.joinable()) thread_.join();
}

bool Runtime::on_io_thread() const {
  if (own_) return std::this_thread::get_id() == thread_.get_id();
  using IoExecutor = asio::io_context::executor_type;
  if (const auto* ex = executor_.target<IoExecutor>()) return ex->running_in_this_thread();
  if (const auto* strand = executor_.target<asio::strand<IoExecutor>>())
    return strand->get_inner_executor().running_in_this_thread();
  return false;  // an executor of another kind: the caller knows what it does
}

}  // namespace switchboard::detail
