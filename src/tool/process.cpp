#include "tool/process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <array>
#include <cerrno>

#include "tool/process_groups.hpp"
#include "tool/process_spawn.hpp"
#include "util/log.hpp"

namespace sb::tool {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

namespace {

// Writing to a pipe whose reader is gone raises SIGPIPE, which kills the server unless it
// ignores the signal (it does not, and a library should not change that). The signal raised by
// write() is sent to the calling thread, so blocking it around the call and consuming it if it
// became pending keeps it local to this write.
ssize_t write_without_sigpipe(int fd, const char* data, std::size_t size) {
  sigset_t pipe_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  sigset_t pending;
  sigpending(&pending);
  bool was_pending = sigismember(&pending, SIGPIPE) == 1;
  sigset_t old_mask;
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old_mask);
  ssize_t written = ::write(fd, data, size);
  int err = errno;
  if (written < 0 && err == EPIPE && !was_pending) {
    timespec zero{0, 0};
    while (sigtimedwait(&pipe_set, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  errno = err;
  return written;
}

int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

enum class StopReason { None, Timeout, Abort };

// One running child and everything that watches it. All members are used on one strand only:
// handlers run there, and the abort callback posts stop() there rather than run it inside
// abort(), which may be called from anywhere on the executor (one of our own handlers included).
// The callback holds only a weak pointer; its registration goes in finish() and in the
// destructor, and a posted stop that never runs (the io_context destroyed first) is destroyed
// with the io_context's other handlers.
// Handlers keep the object alive through shared_from_this(); after finish() they do nothing.
class ChildProcess : public std::enable_shared_from_this<ChildProcess> {
 public:
  ChildProcess(asio::any_io_executor ex, ProcessOptions options, pid_t pid)
      : ex_(ex),
        o_(std::move(options)),
        pid_(pid),
        out_(ex),
        err_(ex),
        stdin_(ex),
        pidfd_(ex),
        wake_(ex),
        deadline_(ex),
        kill_timer_(ex),
        drain_timer_(ex),
        poll_timer_(ex),
        flush_timer_(ex) {}

  ~ChildProcess() {
    // Reached without finish() only when the coroutine was destroyed mid-run (io_context torn
    // down): the child must not outlive us unreaped.
    if (!reaped_) {
      ::kill(-pid_, SIGKILL);
      forget_group();
      int status;
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
    }
  }

  void start(UniqueFd out, UniqueFd err, UniqueFd in) {
    out_.pipe.assign(out.release());
    out_.capture = &result_.output;
    read(out_);
    if (err) {
      err_.pipe.assign(err.release());
      err_.capture = &result_.error_output;
      read(err_);
    }
    if (in) {
      // Our end only: the child's read end is a separate open file description and stays
      // blocking.
      ::fcntl(in.get(), F_SETFL, ::fcntl(in.get(), F_GETFL) | O_NONBLOCK);
      stdin_.assign(in.release());
      write_stdin();
    }
    int pidfd = o_.use_pidfd ? open_pidfd(pid_) : -1;
    if (pidfd >= 0) {
      ::fcntl(pidfd, F_SETFD, FD_CLOEXEC);
      pidfd_.assign(pidfd);
    } else if (o_.use_pidfd) {
      log::debug("pidfd_open failed (", errno_text(errno), "): polling for the exit of ", pid_);
    }
    wait_exit();
    if (o_.timeout.count() > 0) {
      deadline_.expires_after(o_.timeout);
      deadline_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
        if (!ec && !self->finished_) self->stop(StopReason::Timeout);
      });
    }
    if (o_.abort) {
      abort_registration_.emplace(o_.abort, [weak = weak_from_this()] {
        if (auto self = weak.lock())
          asio::post(self->ex_, [self] { self->stop(StopReason::Abort); });
      });
    }
  }

  // The child has exited and its output has ended (or been given up on).
  bool done() const { return exited_ && !out_.pipe.is_open() && !err_.pipe.is_open(); }

  asio::steady_timer& wake() { return wake_; }

  void stop(StopReason reason) {
    if (finished_) return;
    if (exited_) {
      // Only background processes are left, holding the pipes: stop waiting for them.
      close_pipes();
      notify();
      return;
    }
    if (stop_reason_ != StopReason::None) return;
    stop_reason_ = reason;
    ::kill(-pid_, SIGTERM);
    kill_timer_.expires_after(o_.kill_grace);
    kill_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      // The leader is not reaped before finish(), so the group id cannot have been reused.
      if (!ec && !self->finished_) ::kill(-self->pid_, SIGKILL);
    });
  }

  ProcessResult finish() {
    finished_ = true;
    flush_output();
    for (auto* timer : {&deadline_, &kill_timer_, &drain_timer_, &poll_timer_, &flush_timer_})
      timer->cancel();
    close_pipes();
    boost::system::error_code ignored;
    stdin_.close(ignored);
    pidfd_.close(ignored);
    abort_registration_.reset();
    // After a timeout or abort, whatever of the group outlived SIGTERM goes now (a grandchild
    // that ignores SIGTERM would otherwise run on unsupervised).
    if (stop_reason_ != StopReason::None) ::kill(-pid_, SIGKILL);
    // What the command left running in the background when it ended is left alone (see
    // ProcessOptions::drain_grace), at the next start too.
    forget_group();
    int status = 0;
    pid_t r;
    while ((r = ::waitpid(pid_, &status, 0)) < 0 && errno == EINTR) {
    }
    reaped_ = true;
    if (r == pid_) {
      if (WIFEXITED(status)) result_.exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) result_.signal = WTERMSIG(status);
    }
    result_.pid = pid_;
    result_.timed_out = stop_reason_ == StopReason::Timeout;
    result_.aborted = stop_reason_ == StopReason::Abort;
    return std::move(result_);
  }

 private:
  struct Pipe {
    explicit Pipe(const asio::any_io_executor& ex) : pipe(ex) {}
    asio::posix::stream_descriptor pipe;
    std::string* capture = nullptr;
    std::array<char, 64 * 1024> buffer;
  };

  void notify() { wake_.cancel(); }

  void forget_group() {
    if (!o_.group_record_dir.empty()) forget_process_group(o_.group_record_dir, pid_);
  }

  void read(Pipe& p) {
    p.pipe.async_read_some(
        asio::buffer(p.buffer),
        [self = shared_from_this(), &p](boost::system::error_code ec, std::size_t n) {
          if (self->finished_) return;
          if (n > 0) self->on_data(p, n);
          if (ec) {
            boost::system::error_code ignored;
            p.pipe.close(ignored);
            self->notify();
            return;
          }
          if (p.pipe.is_open()) self->read(p);
        });
  }

  void on_data(Pipe& p, std::size_t n) {
    std::string_view chunk(p.buffer.data(), n);
    result_.output_bytes += n;
    std::string& capture = *p.capture;
    std::size_t room = o_.max_output - std::min(capture.size(), o_.max_output);
    capture.append(chunk.substr(0, room));
    deliver(chunk);
    if (n > room) {
      result_.truncated = true;
      if (o_.stop_at_cap) {
        boost::system::error_code ignored;
        p.pipe.close(ignored);
        notify();
      }
    }
  }

  void deliver(std::string_view chunk) {
    if (!o_.on_output) return;
    if (o_.output_interval.count() <= 0) {
      call_on_output(chunk);
      return;
    }
    pending_output_.append(chunk);
    auto now = Clock::now();
    if (now - last_flush_ >= o_.output_interval || pending_output_.size() >= kMaxPendingOutput) {
      flush_output();
      return;
    }
    if (flush_armed_) return;
    flush_armed_ = true;
    flush_timer_.expires_at(last_flush_ + o_.output_interval);
    flush_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      self->flush_armed_ = false;
      if (!ec && !self->finished_) self->flush_output();
    });
  }

  void flush_output() {
    if (pending_output_.empty()) return;
    std::string chunk;
    chunk.swap(pending_output_);
    last_flush_ = Clock::now();
    call_on_output(chunk);
  }

  void call_on_output(std::string_view chunk) {
    // An exception here would escape through io_context::run() and take the server down.
    try {
      o_.on_output(chunk);
    } catch (const std::exception& e) {
      log::warn("process output callback threw: ", e.what());
    } catch (...) {
      log::warn("process output callback threw");
    }
  }

  void write_stdin() {
    const std::string& text = *o_.stdin_text;
    while (stdin_written_ < text.size()) {
      std::size_t n = std::min<std::size_t>(text.size() - stdin_written_, 64 * 1024);
      ssize_t w = write_without_sigpipe(stdin_.native_handle(), text.data() + stdin_written_, n);
      if (w > 0) {
        stdin_written_ += static_cast<std::size_t>(w);
        continue;
      }
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        stdin_.async_wait(asio::posix::descriptor_base::wait_write,
                          [self = shared_from_this()](boost::system::error_code ec) {
                            if (ec || self->finished_) return;
                            self->write_stdin();
                          });
        return;
      }
      break;  // EPIPE: the child stopped reading; not our error to report
    }
    boost::system::error_code ignored;
    stdin_.close(ignored);  // end of input
  }

  void wait_exit() {
    if (!pidfd_.is_open()) {
      poll_exit();
      return;
    }
    pidfd_.async_wait(asio::posix::descriptor_base::wait_read,
                      [self = shared_from_this()](boost::system::error_code ec) {
                        if (self->finished_ || ec == asio::error::operation_aborted) return;
                        if (ec) {
                          boost::system::error_code ignored;
                          self->pidfd_.close(ignored);
                          self->poll_exit();
                          return;
                        }
                        if (self->check_exited())
                          self->on_exited();
                        else
                          self->wait_exit();
                      });
  }

  // Without a pidfd: look every few milliseconds, backing off to 100 ms.
  void poll_exit() {
    if (check_exited()) {
      on_exited();
      return;
    }
    poll_interval_ = std::min(poll_interval_ * 2, std::chrono::milliseconds(100));
    poll_timer_.expires_after(poll_interval_);
    poll_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (!ec && !self->finished_) self->poll_exit();
    });
  }

  // WNOWAIT: the zombie is kept until finish() so that the process group id stays reserved
  // while we may still signal the group.
  bool check_exited() {
    siginfo_t info{};
    int r = ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT);
    if (r == 0 && info.si_pid == pid_) return true;
    if (r < 0 && errno == ECHILD) return true;  // someone else reaped it (SIGCHLD ignored)
    return false;
  }

  void on_exited() {
    exited_ = true;
    deadline_.cancel();
    boost::system::error_code ignored;
    pidfd_.close(ignored);
    if (out_.pipe.is_open() || err_.pipe.is_open()) {
      drain_timer_.expires_after(o_.drain_grace);
      drain_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
        if (ec || self->finished_) return;
        self->close_pipes();
        self->notify();
      });
    }
    notify();
  }

  void close_pipes() {
    boost::system::error_code ignored;
    out_.pipe.close(ignored);
    err_.pipe.close(ignored);
  }

  static constexpr std::size_t kMaxPendingOutput = 1024 * 1024;

  asio::any_io_executor ex_;
  ProcessOptions o_;
  pid_t pid_;
  ProcessResult result_;
  Pipe out_;
  Pipe err_;
  asio::posix::stream_descriptor stdin_;
  std::size_t stdin_written_ = 0;
  asio::posix::stream_descriptor pidfd_;
  asio::steady_timer wake_;
  asio::steady_timer deadline_;
  asio::steady_timer kill_timer_;
  asio::steady_timer drain_timer_;
  asio::steady_timer poll_timer_;
  std::chrono::milliseconds poll_interval_{1};
  asio::steady_timer flush_timer_;
  bool flush_armed_ = false;
  std::string pending_output_;
  Clock::time_point last_flush_{};
  std::optional<AbortSignal::Registration> abort_registration_;
  StopReason stop_reason_ = StopReason::None;
  bool exited_ = false;
  bool finished_ = false;
  bool reaped_ = false;
};

asio::awaitable<Result<ProcessResult>> run_on_strand(ProcessOptions o) {
  // Cancellation is handled below (it becomes an abort); it must not throw out of a co_await
  // while a child runs.
  co_await asio::this_coro::throw_if_cancelled(false);
  auto ex = co_await asio::this_coro::executor;
  auto started = Clock::now();

  if (o.argv.empty() || o.argv[0].empty())
    co_return make_error(ErrorCode::InvalidRequest, "no command given");
  if (o.abort && o.abort->aborted()) {
    ProcessResult r;
    r.aborted = true;
    co_return r;
  }
  auto started_child = start_child(o);
  if (!started_child) co_return started_child.error();
  StartedChild& spawned = *started_child;

  auto child = std::make_shared<ChildProcess>(ex, std::move(o), spawned.pid);
  child->start(std::move(spawned.out), std::move(spawned.err), std::move(spawned.in));
  bool cancellation_seen = false;
  while (!child->done()) {
    child->wake().expires_at(Clock::time_point::max());
    co_await child->wake().async_wait(asio::as_tuple(asio::use_awaitable));
    if (!cancellation_seen) {
      asio::cancellation_state state = co_await asio::this_coro::cancellation_state;
      if (state.cancelled() != asio::cancellation_type::none) {
        cancellation_seen = true;
        child->stop(StopReason::Abort);
      }
    }
  }
  ProcessResult result = child->finish();
  result.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
  co_return result;
}

}  // namespace

asio::awaitable<Result<ProcessResult>> run_process(ProcessOptions options) {
  auto ex = co_await asio::this_coro::executor;
  co_return co_await asio::co_spawn(asio::make_strand(ex), run_on_strand(std::move(options)),
                                    asio::use_awaitable);
}

std::string signal_name(int signal) {
  if (const char* abbrev = ::sigabbrev_np(signal)) return std::string("SIG") + abbrev;
  return "signal " + std::to_string(signal);
}

}  // namespace sb::tool
