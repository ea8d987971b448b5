#include "app/loop_lag.hpp"

#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <memory>
#include <vector>

#include "server/http.hpp"
#include "util/log.hpp"

namespace sb::app {
namespace {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

// 1 ms: fine enough to see a stall of a few milliseconds, and about 1,000 wake-ups a second
// (a few microseconds each) while it is on.
constexpr auto kPeriod = std::chrono::milliseconds(1);

class LoopLagMonitor : public std::enable_shared_from_this<LoopLagMonitor> {
 public:
  LoopLagMonitor(asio::io_context& io, const server::ServerState& state)
      : state_(state), timer_(io), signals_(io, SIGUSR1), window_start_(Clock::now()) {
    lags_us_.reserve(1 << 16);
  }

  void start() {
    log::info("loop lag: measuring every ", kPeriod.count(), " ms (SWITCHBOARD_LOOP_LAG)");
    arm();
    wait_signal();
  }

 private:
  void arm() {
    timer_.expires_after(kPeriod);
    timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (!ec) self->tick();
    });
  }

  void tick() {
    auto late = Clock::now() - timer_.expiry();
    lags_us_.push_back(static_cast<std::uint32_t>(std::max<std::int64_t>(
        0, std::chrono::duration_cast<std::chrono::microseconds>(late).count())));
    if (state_.stopping) {
      report();
      signals_.cancel();  // nothing of ours keeps run() from returning
      return;
    }
    arm();
  }

  void wait_signal() {
    signals_.async_wait([self = shared_from_this()](boost::system::error_code ec, int) {
      if (ec) return;
      self->report();
      self->wait_signal();
    });
  }

  // Logs the window's figures and starts a new window.
  void report() {
    auto now = Clock::now();
    double seconds = std::chrono::duration<double>(now - window_start_).count();
    std::uint32_t p50 = 0, p99 = 0, max = 0;
    if (!lags_us_.empty()) {
      auto at = [&](double q) {
        auto i = static_cast<std::size_t>(q * static_cast<double>(lags_us_.size() - 1));
        std::nth_element(lags_us_.begin(), lags_us_.begin() + static_cast<std::ptrdiff_t>(i),
                         lags_us_.end());
        return lags_us_[i];
      };
      p50 = at(0.50);
      p99 = at(0.99);
      max = *std::max_element(lags_us_.begin(), lags_us_.end());
    }
    log::info("loop lag: ", lags_us_.size(), " ticks in ", seconds, " s, p50 ", p50, " us, p99 ",
              p99, " us, max ", max, " us");
    lags_us_.clear();
    window_start_ = now;
  }

  const server::ServerState& state_;
  asio::steady_timer timer_;
  asio::signal_set signals_;
  Clock::time_point window_start_;
  std::vector<std::uint32_t> lags_us_;  // one per tick of the window
};

}  // namespace

void start_loop_lag_monitor(asio::io_context& io, const server::ServerState& state) {
  std::make_shared<LoopLagMonitor>(io, state)->start();
}

}  // namespace sb::app
