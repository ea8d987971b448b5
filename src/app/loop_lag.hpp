#pragma once
// How late the event loop runs a timer that is due: a measure of how long the loop was kept
// from its clients (a blocking call on the loop thread shows up here, whatever it was). Off
// unless SWITCHBOARD_LOOP_LAG is set (docs/configuration.md): it wakes the loop every
// millisecond, which an idle server should not pay for.
//
// It says so at start ("loop lag: measuring every 1 ms"). The figures since the last report are
// logged on SIGUSR1 (and the window starts again) and when the server stops: "loop lag: N ticks in
// S s, p50 A us, p99 B us, max C us". The benchmarks read that line. The I/O thread only.
#include <boost/asio/io_context.hpp>

namespace sb::server {
struct ServerState;
}

namespace sb::app {

// Starts the timer on `io`; it stops (and logs its last window) once `state.stopping` is set,
// so that it never keeps a stopping server's run() from returning.
void start_loop_lag_monitor(boost::asio::io_context& io, const server::ServerState& state);

}  // namespace sb::app
