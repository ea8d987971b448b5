#pragma once
// An flock()ed file, held until the FileLock goes: what keeps a second server off a data
// directory (and its SQLite file). flock() locks belong to the open file, so a second lock in
// this process is refused too; the kernel drops the lock when the process dies.
#include <filesystem>
#include <utility>

#include "util/error.hpp"

namespace sb::store {

class FileLock {
 public:
  // Conflict when another holds it.
  static Result<FileLock> acquire(const std::filesystem::path& path);
  FileLock(FileLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FileLock& operator=(FileLock&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  FileLock(const FileLock&) = delete;
  ~FileLock();

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace sb::store
