#include "mcp/stdio_transport.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <signal.h>
#include <sys/wait.h>

#include <deque>

#include "mcp/framing.hpp"
#include "tool/process_groups.hpp"
#include "tool/process_spawn.hpp"
#include "util/log.hpp"

namespace sb::mcp {

namespace asio = boost::asio;

namespace {

// What a child's stderr line may take of a log line.
constexpr std::size_t kMaxLogLine = 2000;
// Stray lines on stdout logged before they are only counted.
constexpr int kLoggedStrayLines = 10;

std::string clip(std::string_view text, std::size_t max) {
  if (text.size() <= max) return std::string(text);
  return std::string(text.substr(0, max)) + "... (" + std::to_string(text.size()) + " bytes)";
}

// The child and its pipes. Handlers hold it by shared_ptr: it lives until the child is reaped,
// after the StdioTransport that made it may be gone.
class Child : public std::enable_shared_from_this<Child> {
 public:
  Child(asio::any_io_executor ex, StdioOptions options)
      : ex_(ex), o_(std::move(options)), out_(ex), err_(ex), in_(ex), timer_(ex) {}

  Result<void> start(Transport::Events events) {
    events_ = std::move(events);
    tool::ProcessOptions p;
    p.argv = o_.command;
    p.cwd = o_.cwd;
    p.env = o_.environment;
    p.stdin_text = std::string();  // a pipe for its input
    p.mode = tool::OutputMode::Separate;
    p.group_record_dir = o_.group_record_dir;
    auto started = tool::start_child(p);
    if (!started) return started.error();
    pid_ = started->pid;
    boost::system::error_code ec;
    out_.assign(started->out.release(), ec);
    if (!ec) err_.assign(started->err.release(), ec);
    if (!ec) in_.assign(started->in.release(), ec);
    if (!ec) out_.non_blocking(true, ec);
    if (!ec) err_.non_blocking(true, ec);
    if (!ec) in_.non_blocking(true, ec);
    if (ec) {
      end();
      return make_error(ErrorCode::Internal, "cannot watch the pipes of " + o_.command[0]);
    }
    read_out();
    read_err();
    return {};
  }

  void send(const Message& message) {
    if (ended_) return;
    std::string line = encode(message);
    line += '\n';
    queued_bytes_ += line.size();
    if (queued_bytes_ > o_.max_queued_bytes) {
      fail("it stopped reading its input (" + std::to_string(queued_bytes_) +
           " bytes waiting to be written)");
      return;
    }
    queue_.push_back(std::move(line));
    if (queue_.size() == 1) write_next();
  }

  // No events after this; the child is asked to exit and reaped.
  void close() {
    events_ = {};
    end();
  }

 private:
  void read_out() {
    out_buf_.resize(64 * 1024);
    out_.async_read_some(asio::buffer(out_buf_),
                         [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
                           self->on_out(ec, n);
                         });
  }

  void on_out(boost::system::error_code ec, std::size_t n) {
    if (ended_) return;
    if (ec) {
      fail(ec == asio::error::eof ? std::string() : "its output broke: " + ec.message());
      return;
    }
    std::vector<std::string> lines;
    auto fed = framer_.feed(std::string_view(out_buf_.data(), n), lines);
    for (const auto& line : lines) {
      on_line(line);
      if (ended_) return;
    }
    if (!fed) {
      fail(fed.error().message);
      return;
    }
    read_out();
  }

  void on_line(std::string_view line) {
    auto message = parse_message(line);
    if (!message) {
      if (++stray_lines_ <= kLoggedStrayLines)
        log::warn("mcp ", o_.name, ": skipped a line on its output: ", message.error().message,
                  ": ", clip(line, 200));
      return;
    }
    if (events_.message) events_.message(std::move(*message));
  }

  void read_err() {
    err_buf_.resize(8 * 1024);
    err_.async_read_some(asio::buffer(err_buf_),
                         [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
                           if (ec) return;  // its end, or our close
                           self->on_err(std::string_view(self->err_buf_.data(), n));
                           self->read_err();
                         });
  }

  void on_err(std::string_view chunk) {
    while (!chunk.empty()) {
      auto nl = chunk.find('\n');
      if (err_line_.size() < kMaxLogLine) err_line_.append(chunk.substr(0, nl));
      if (nl == std::string_view::npos) break;
      chunk.remove_prefix(nl + 1);
      if (!err_line_.empty()) {
        log::info("mcp ", o_.name, ": ", clip(err_line_, kMaxLogLine));
        last_err_line_ = clip(err_line_, 300);
      }
      err_line_.clear();
    }
  }

  void write_next() {
    asio::async_write(in_, asio::buffer(queue_.front()),
                      [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                        if (self->ended_) return;
                        if (ec) {
                          self->fail("its input closed: " + ec.message());
                          return;
                        }
                        self->queued_bytes_ -= self->queue_.front().size();
                        self->queue_.pop_front();
                        if (!self->queue_.empty()) self->write_next();
                      });
  }

  // The channel ends on the child's side: `why` empty when its output just ended (it exited).
  // The reason is reported once the child's exit status is known (or it had a moment to exit).
  void fail(const std::string& why) {
    if (ended_) return;
    reason_handler_ = std::move(events_.closed);
    failure_ = why;
    events_ = {};
    end();
  }

  void end() {
    if (ended_) return;
    ended_ = true;
    boost::system::error_code ignored;
    in_.close(ignored);  // its end of input: a well-behaved server exits now
    out_.close(ignored);
    if (pid_ > 0) co_spawn(ex_, reap(shared_from_this()), asio::detached);
  }

  // Waits for the child's exit, SIGTERM then SIGKILL to its group when it takes too long, and
  // reports why the channel closed when someone is waiting for that.
  static asio::awaitable<void> reap(std::shared_ptr<Child> self) {
    using clock = std::chrono::steady_clock;
    auto start = clock::now();
    bool termed = false, killed = false;
    std::string status;
    for (;;) {
      int wstatus = 0;
      pid_t r = ::waitpid(self->pid_, &wstatus, WNOHANG);
      if (r == self->pid_) {
        if (WIFEXITED(wstatus))
          status = "exited with code " + std::to_string(WEXITSTATUS(wstatus));
        else if (WIFSIGNALED(wstatus))
          status = "was killed by signal " + std::to_string(WTERMSIG(wstatus));
        break;
      }
      if (r < 0 && errno != EINTR) break;  // not ours any more
      auto waited = clock::now() - start;
      // A failure report waits only briefly for the exit status; the rest goes on quietly.
      if (self->reason_handler_ && waited > std::chrono::milliseconds(200)) self->report(status);
      if (!termed && waited > self->o_.exit_grace) {
        termed = true;
        ::kill(-self->pid_, SIGTERM);
      } else if (!killed && waited > 2 * self->o_.exit_grace) {
        killed = true;
        ::kill(-self->pid_, SIGKILL);
      }
      self->timer_.expires_after(std::chrono::milliseconds(20));
      boost::system::error_code ec;
      co_await self->timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    // What the server started may still run in its group; it is not ours to keep.
    ::kill(-self->pid_, SIGKILL);
    if (!self->o_.group_record_dir.empty())
      tool::forget_process_group(self->o_.group_record_dir, self->pid_);
    boost::system::error_code ignored;
    self->err_.close(ignored);
    self->report(status);
  }

  void report(const std::string& status) {
    if (!reason_handler_) return;
    auto handler = std::move(reason_handler_);
    reason_handler_ = nullptr;
    std::string reason = failure_;
    if (reason.empty())
      reason = status.empty() ? "its output ended" : "it " + status;
    else if (!status.empty())
      reason += " (it " + status + ")";
    if (!last_err_line_.empty() && failure_.empty())
      reason += "; its last words: " + last_err_line_;
    handler(reason);
  }

  asio::any_io_executor ex_;
  StdioOptions o_;
  asio::posix::stream_descriptor out_, err_, in_;
  asio::steady_timer timer_;
  Transport::Events events_;
  pid_t pid_ = -1;
  bool ended_ = false;
  LineFramer framer_{o_.max_message_bytes};
  std::string out_buf_, err_buf_, err_line_, last_err_line_;
  std::deque<std::string> queue_;
  std::size_t queued_bytes_ = 0;
  int stray_lines_ = 0;
  std::function<void(const std::string&)> reason_handler_;
  std::string failure_;
};

class StdioTransport final : public Transport {
 public:
  StdioTransport(asio::any_io_executor ex, StdioOptions options)
      : child_(std::make_shared<Child>(std::move(ex), std::move(options))) {}
  ~StdioTransport() override { close(); }

  Result<void> start(Events events) override { return child_->start(std::move(events)); }
  void send(const Message& message) override { child_->send(message); }
  void close() override { child_->close(); }

 private:
  std::shared_ptr<Child> child_;
};

}  // namespace

std::unique_ptr<Transport> make_stdio_transport(asio::any_io_executor executor,
                                                StdioOptions options) {
  return std::make_unique<StdioTransport>(std::move(executor), std::move(options));
}

}  // namespace sb::mcp
