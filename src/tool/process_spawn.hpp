#pragma once
// Starting a tool's program (process.hpp's run_process): the checks before the start, the pipes,
// and vfork + exec with a child that makes only system calls. What watches the running child
// to its end is in process.cpp. Internal to src/tool.
#include <sys/types.h>
#include <unistd.h>

#include <string>
#include <utility>

#include "tool/process.hpp"

namespace sb::tool {

std::string errno_text(int err);

// A file descriptor, closed when this goes. Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// A child that start_child started: its pid (also its process group id) and our ends of its
// pipes.
struct StartedChild {
  pid_t pid = -1;
  UniqueFd out;  // its stdout (and its stderr with OutputMode::Merged)
  UniqueFd err;  // its stderr with OutputMode::Separate; empty otherwise
  UniqueFd in;   // its stdin when ProcessOptions::stdin_text is set; empty otherwise
};

// Checks the working directory, finds the program, makes the pipes and starts the child in its
// own process group, writing the group down when `o.group_record_dir` is set (which adds the
// group's token to `o.env`). The error is for failures to start (see run_process).
Result<StartedChild> start_child(ProcessOptions& o);

}  // namespace sb::tool
