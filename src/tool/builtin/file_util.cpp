#include "tool/builtin/file_util.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <system_error>
#include <vector>

namespace sb::tool::fsutil {

namespace fs = std::filesystem;

std::string display_path(const ToolContext& ctx, const fs::path& path) {
  if (ctx.directory.empty()) return path.string();
  fs::path rel = path.lexically_normal().lexically_relative(ctx.directory.lexically_normal());
  if (rel.empty() || *rel.begin() == "..") return path.string();
  return rel.generic_string();
}

Result<void> check_not_aborted(const ToolContext& ctx) {
  if (!ctx.abort || !ctx.abort->aborted()) return {};
  std::string reason = ctx.abort->reason();
  return make_error(ErrorCode::Unavailable,
                    "the tool call was aborted" + (reason.empty() ? "" : ": " + reason));
}

namespace {

std::string errno_text(int err) {
  return std::system_category().message(err);
}

ErrorCode code_for_errno(int err) {
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return ErrorCode::NotFound;
    case EACCES:
    case EPERM:
    case EROFS:
      return ErrorCode::Forbidden;
    default:
      return ErrorCode::Internal;
  }
}

// Closes a descriptor on every path out of a function.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes now, so that a failing close (NFS, full disk) can be reported.
  int close() {
    int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

int write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return 0;
}

Error write_error(const fs::path& path, int err) {
  return make_error(code_for_errno(err), "cannot write " + path.string() + ": " + errno_text(err));
}

// Creates a file that did not exist. O_EXCL so that we never truncate a file that appeared
// meanwhile; mode 0666 so that the umask decides, as for any new file.
Result<bool> create_new(const fs::path& path, std::string_view content) {
  int raw = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (raw < 0) {
    if (errno == EEXIST) return false;  // lost a race: replace it instead
    return write_error(path, errno);
  }
  Fd fd(raw);
  int err = write_all(fd.get(), content);
  if (!err && fd.close() != 0) err = errno;
  if (err) {
    ::unlink(path.c_str());
    return write_error(path, err);
  }
  return true;
}

Result<void> overwrite_in_place(const fs::path& path, std::string_view content) {
  int raw = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (raw < 0) return write_error(path, errno);
  Fd fd(raw);
  int err = write_all(fd.get(), content);
  if (!err && fd.close() != 0) err = errno;
  if (err) return write_error(path, err);
  return {};
}

}  // namespace

Result<std::string> read_file(const fs::path& path, std::size_t max_bytes) {
  int raw = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (raw < 0) {
    int err = errno;
    if (err == ENOENT || err == ENOTDIR)
      return make_error(ErrorCode::NotFound, "File not found: " + path.string());
    return make_error(code_for_errno(err), "cannot read " + path.string() + ": " + errno_text(err));
  }
  Fd fd(raw);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    return make_error(ErrorCode::Internal,
                      "cannot read " + path.string() + ": " + errno_text(errno));
  if (S_ISDIR(st.st_mode))
    return make_error(ErrorCode::InvalidRequest,
                      "Path is a directory, not a file: " + path.string());
  // A FIFO or a device would block or never end; only regular files are files here.
  if (!S_ISREG(st.st_mode))
    return make_error(ErrorCode::InvalidRequest, "Not a regular file: " + path.string());
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes)
    return make_error(ErrorCode::TooLarge, path.string() + " is too large (" +
                                               std::to_string(st.st_size) + " bytes; at most " +
                                               std::to_string(max_bytes) + ")");
  std::string out;
  out.resize(static_cast<std::size_t>(st.st_size));
  std::size_t got = 0;
  while (true) {
    if (got == out.size()) out.resize(out.size() + 4096);  // the file grew since fstat
    ssize_t n = ::read(fd.get(), out.data() + got, out.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      return make_error(ErrorCode::Internal,
                        "cannot read " + path.string() + ": " + errno_text(errno));
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
    if (got > max_bytes)
      return make_error(ErrorCode::TooLarge, path.string() + " is too large (at most " +
                                                 std::to_string(max_bytes) + " bytes)");
  }
  out.resize(got);
  return out;
}

Result<void> replace_file(const fs::path& path, std::string_view content) {
  std::error_code ec;
  fs::path target = path;
  // Renaming over a symlink would replace the link with a plain file; write where it points.
  if (fs::is_symlink(path, ec)) {
    fs::path resolved = fs::weakly_canonical(path, ec);
    if (!ec) target = resolved;
  }
  fs::path dir = target.parent_path();
  if (!dir.empty()) {
    fs::create_directories(dir, ec);
    if (ec)
      return make_error(code_for_errno(ec.value()),
                        "cannot create directory " + dir.string() + ": " + ec.message());
  }

  struct stat st {};
  if (::stat(target.c_str(), &st) != 0) {
    if (errno != ENOENT) return write_error(target, errno);
    auto created = create_new(target, content);
    if (!created) return created.error();
    if (*created) return {};
    if (::stat(target.c_str(), &st) != 0) return write_error(target, errno);
  }
  if (S_ISDIR(st.st_mode))
    return make_error(ErrorCode::InvalidRequest,
                      "Path is a directory, not a file: " + target.string());
  if (!S_ISREG(st.st_mode)) return overwrite_in_place(target, content);

  std::string tmp = (dir / ("." + target.filename().string() + ".sb-XXXXXX")).string();
  int raw = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (raw < 0) {
    // A writable file in a directory we may not create files in: write it in place.
    if (errno == EACCES || errno == EPERM) return overwrite_in_place(target, content);
    return write_error(target, errno);
  }
  Fd fd(raw);
  int err = write_all(fd.get(), content);
  if (!err && ::fchmod(fd.get(), st.st_mode & 07777) != 0) err = errno;
  // Keeps the owner when we are allowed to (running as root); harmless when not.
  if (!err && ::fchown(fd.get(), st.st_uid, st.st_gid) != 0) err = 0;
  if (!err && fd.close() != 0) err = errno;
  if (!err && ::rename(tmp.c_str(), target.c_str()) != 0) err = errno;
  if (err) {
    ::unlink(tmp.c_str());
    return write_error(target, err);
  }
  return {};
}

std::size_t count_code_points(std::string_view text) {
  std::size_t n = 0;
  for (char c : text)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  return n;
}

std::string_view first_code_points(std::string_view text, std::size_t n) {
  std::size_t seen = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {
      if (seen == n) return text.substr(0, i);
      ++seen;
    }
  }
  return text;
}

// --- line diff ---------------------------------------------------------------------------------

namespace {

// Each line keeps its '\n' (the last may have none), so that "no newline at end of file" is a
// difference like any other.
std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t nl = text.find('\n', start);
    std::size_t end = nl == std::string_view::npos ? text.size() : nl + 1;
    out.push_back(text.substr(start, end - start));
    start = end;
  }
  return out;
}

enum class Op : std::uint8_t { Equal, Delete, Insert };
struct Step {
  Op op;
  std::size_t a;  // position in the old lines (the line itself for Equal/Delete)
  std::size_t b;  // position in the new lines (the line itself for Equal/Insert)
};

using Lines = std::vector<std::string_view>;

// Myers' O(ND) diff of old[a0, a0+n) and new[b0, b0+m), appended to `out`. Gives up (returns
// false, appends nothing) when more than `max_d` lines differ: the trace grows with D squared.
bool myers(const Lines& a, std::size_t a0, std::size_t n, const Lines& b, std::size_t b0,
           std::size_t m, std::ptrdiff_t max_d, std::vector<Step>& out) {
  using I = std::ptrdiff_t;
  const I N = static_cast<I>(n), M = static_cast<I>(m), MAX = N + M;
  if (MAX == 0) return true;
  const I dmax = std::min(MAX, max_d);
  const I off = MAX;
  std::vector<I> v(static_cast<std::size_t>(2 * MAX + 2), 0);
  std::vector<std::vector<I>> trace;  // trace[d][(k + d) / 2] = furthest x on diagonal k
  I found = -1;
  for (I d = 0; d <= dmax && found < 0; ++d) {
    for (I k = -d; k <= d; k += 2) {
      I x = (k == -d || (k != d && v[off + k - 1] < v[off + k + 1])) ? v[off + k + 1]
                                                                     : v[off + k - 1] + 1;
      I y = x - k;
      while (x < N && y < M && a[a0 + x] == b[b0 + y])
        ++x, ++y;
      v[off + k] = x;
      if (x >= N && y >= M) {
        found = d;
        break;
      }
    }
    std::vector<I> band(static_cast<std::size_t>(d + 1));
    for (I i = 0; i <= d; ++i)
      band[i] = v[off - d + 2 * i];
    trace.push_back(std::move(band));
  }
  if (found < 0) return false;

  std::vector<Step> rev;
  I x = N, y = M;
  for (I d = found; d > 0; --d) {
    const auto& prev = trace[d - 1];
    auto at = [&](I k) { return prev[(k + d - 1) / 2]; };
    I k = x - y;
    bool down = k == -d || (k != d && at(k - 1) < at(k + 1));  // down = an inserted line
    I prev_k = down ? k + 1 : k - 1;
    I prev_x = at(prev_k), prev_y = prev_x - prev_k;
    I mid_x = down ? prev_x : prev_x + 1;
    while (x > mid_x) {
      --x, --y;
      rev.push_back({Op::Equal, a0 + x, b0 + y});
    }
    rev.push_back({down ? Op::Insert : Op::Delete, a0 + prev_x, b0 + prev_y});
    x = prev_x, y = prev_y;
  }
  while (x > 0) {
    --x, --y;
    rev.push_back({Op::Equal, a0 + x, b0 + y});
  }
  out.insert(out.end(), rev.rbegin(), rev.rend());
  return true;
}

void append_line(std::string& out, char prefix, std::string_view line) {
  out.push_back(prefix);
  if (!line.empty() && line.back() == '\n') {
    out.append(line);
  } else {
    out.append(line);
    out.append("\n\\ No newline at end of file\n");
  }
}

}  // namespace

LineDiff unified_diff(std::string_view path, std::string_view before, std::string_view after,
                      std::size_t context) {
  LineDiff result;
  if (before == after) return result;
  Lines a = split_lines(before), b = split_lines(after);

  // Edits are local: strip what is common at both ends so that Myers only sees the middle.
  std::size_t prefix = 0;
  while (prefix < a.size() && prefix < b.size() && a[prefix] == b[prefix])
    ++prefix;
  std::size_t suffix = 0;
  while (suffix < a.size() - prefix && suffix < b.size() - prefix &&
         a[a.size() - 1 - suffix] == b[b.size() - 1 - suffix])
    ++suffix;

  std::vector<Step> steps;
  steps.reserve(a.size() + b.size());
  for (std::size_t i = 0; i < prefix; ++i)
    steps.push_back({Op::Equal, i, i});
  std::size_t n = a.size() - prefix - suffix, m = b.size() - prefix - suffix;
  if (!myers(a, prefix, n, b, prefix, m, 1000, steps)) {
    for (std::size_t i = 0; i < n; ++i)
      steps.push_back({Op::Delete, prefix + i, prefix});
    for (std::size_t j = 0; j < m; ++j)
      steps.push_back({Op::Insert, prefix + n, prefix + j});
  }
  for (std::size_t i = 0; i < suffix; ++i)
    steps.push_back({Op::Equal, a.size() - suffix + i, b.size() - suffix + i});

  for (const Step& s : steps) {
    if (s.op == Op::Insert) ++result.additions;
    if (s.op == Op::Delete) ++result.deletions;
  }

  std::string& out = result.patch;
  out += "--- " + std::string(path) + "\n+++ " + std::string(path) + "\n";
  std::size_t i = 0;
  while (i < steps.size()) {
    while (i < steps.size() && steps[i].op == Op::Equal)
      ++i;
    if (i == steps.size()) break;
    std::size_t start = i >= context ? i - context : 0;
    std::size_t end = i;
    // Changes separated by at most 2 * context unchanged lines share a hunk, as diff -u does.
    while (true) {
      while (end < steps.size() && steps[end].op != Op::Equal)
        ++end;
      std::size_t eq = end;
      while (eq < steps.size() && steps[eq].op == Op::Equal)
        ++eq;
      if (eq < steps.size() && eq - end <= 2 * context) {
        end = eq;
        continue;
      }
      break;
    }
    std::size_t stop = std::min(steps.size(), end + context);
    std::size_t old_len = 0, new_len = 0;
    for (std::size_t k = start; k < stop; ++k) {
      if (steps[k].op != Op::Insert) ++old_len;
      if (steps[k].op != Op::Delete) ++new_len;
    }
    // An empty range names the line before it, as in diff -u ("@@ -0,0 +1,2 @@").
    std::size_t old_start = steps[start].a + (old_len ? 1 : 0);
    std::size_t new_start = steps[start].b + (new_len ? 1 : 0);
    out += "@@ -" + std::to_string(old_start) + "," + std::to_string(old_len) + " +" +
           std::to_string(new_start) + "," + std::to_string(new_len) + " @@\n";
    for (std::size_t k = start; k < stop; ++k) {
      const Step& s = steps[k];
      if (s.op == Op::Equal) append_line(out, ' ', a[s.a]);
      if (s.op == Op::Delete) append_line(out, '-', a[s.a]);
      if (s.op == Op::Insert) append_line(out, '+', b[s.b]);
    }
    i = stop;
  }
  return result;
}

}  // namespace sb::tool::fsutil
