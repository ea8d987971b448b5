#include "store/file_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace sb::store {

Result<FileLock> FileLock::acquire(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return make_error(ErrorCode::Internal,
                      "cannot open " + path.string() + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK)
      return make_error(ErrorCode::Conflict, path.string() + " is held by another process");
    return make_error(ErrorCode::Internal,
                      "cannot lock " + path.string() + ": " + std::strerror(err));
  }
  return FileLock(fd);
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace sb::store
