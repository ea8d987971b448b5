#include "tool/truncate.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <system_error>

#include "util/ids.hpp"
#include "util/text.hpp"

namespace sb::tool {
namespace {

// Session ids and tool ids come from outside (a custom or MCP tool may be called anything): keep
// them to characters that cannot leave the directory or confuse a shell.
std::string safe_name(std::string_view name) {
  std::string out;
  out.reserve(std::min<std::size_t>(name.size(), 100));
  for (char c : name.substr(0, 100)) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.';
    out.push_back(ok ? c : '_');
  }
  if (out.empty() || out == "." || out == "..") out = "_";
  return out;
}

std::size_t count_lines(std::string_view text) {
  if (text.empty()) return 0;
  auto newlines = static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
  return text.back() == '\n' ? newlines : newlines + 1;
}

// 12458 -> "12,458"
std::string with_commas(std::size_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

std::string plural(std::size_t n, std::string_view one, std::string_view many) {
  return with_commas(n) + " " + std::string(n == 1 ? one : many);
}

// 524288 -> "512 KB", 1536 -> "1.5 KB", 900 -> "900 bytes"
std::string human_size(std::size_t bytes) {
  if (bytes < 1024) return plural(bytes, "byte", "bytes");
  double value = static_cast<double>(bytes) / 1024.0;
  const char* unit = "KB";
  if (value >= 1024.0) {
    value /= 1024.0;
    unit = "MB";
  }
  char buf[32];
  if (value < 10.0)
    std::snprintf(buf, sizeof buf, "%.1f %s", value, unit);
  else
    std::snprintf(buf, sizeof buf, "%.0f %s", value, unit);
  return buf;
}

struct Head {
  std::size_t bytes = 0;      // bytes of `output` the model sees (without the last newline)
  std::size_t lines = 0;      // whole lines among them
  bool hit_bytes = false;     // stopped by the byte limit rather than the line limit
  bool partial_line = false;  // the head is a cut of the first line
};

// Whole lines while both limits allow. Bytes are counted as the head is shown: lines joined by
// newlines, without a newline after the last one (as OpenCode counts them).
Head take_head(std::string_view output, const TruncateLimits& limits) {
  Head head;
  std::size_t next = 0;  // start of the next line
  while (head.lines < limits.max_lines && next < output.size()) {
    std::size_t nl = output.find('\n', next);
    std::size_t line_end = nl == std::string_view::npos ? output.size() : nl;
    if (line_end > limits.max_bytes) {
      head.hit_bytes = true;
      break;
    }
    head.bytes = line_end;
    ++head.lines;
    next = nl == std::string_view::npos ? output.size() : nl + 1;
  }
  if (head.lines == 0 && head.hit_bytes) {
    // One line longer than the whole budget (minified JSON, a base64 blob): a cut of it is more
    // use to the model than nothing.
    head.bytes = utf8_prefix(output, limits.max_bytes).size();
    head.partial_line = head.bytes > 0;
  }
  return head;
}

std::string errno_text(int err) {
  return std::error_code(err, std::generic_category()).message();
}

}  // namespace

Result<void> write_file(const std::filesystem::path& path, std::string_view content) {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec)
    return make_error(ErrorCode::Internal, "cannot create directory " +
                                               path.parent_path().string() + ": " + ec.message());
  // O_EXCL: the name is new by construction, so an existing file (or a planted symlink) is an error
  // rather than something to overwrite; it also means a failed file is ours to remove.
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return make_error(ErrorCode::Internal,
                      "cannot create " + path.string() + ": " + errno_text(errno));
  auto fail = [&](int err) -> Result<void> {
    ::close(fd);
    ::unlink(path.c_str());
    return make_error(ErrorCode::Internal,
                      "cannot write " + path.string() + ": " + errno_text(err));
  };
  const char* data = content.data();
  std::size_t left = content.size();
  while (left > 0) {
    ssize_t n = ::write(fd, data, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(errno);
    }
    data += n;
    left -= static_cast<std::size_t>(n);
  }
  // Some file systems report a full disk only when the file is closed.
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(path.c_str());
    return make_error(ErrorCode::Internal,
                      "cannot write " + path.string() + ": " + errno_text(err));
  }
  return {};
}

std::filesystem::path saved_outputs_dir(const std::filesystem::path& data_dir) {
  return data_dir / "truncate";
}

std::filesystem::path session_output_dir(const std::filesystem::path& dir,
                                         std::string_view session_id) {
  return dir / safe_name(session_id);
}

TruncateResult truncate_output(std::string output, std::string_view session_id,
                               std::string_view tool, const TruncateOptions& options) {
  TruncateResult result;
  const TruncateLimits& limits = options.limits;
  const std::size_t total_bytes = output.size();
  // A final newline is not shown text: an output of exactly max_bytes plus "\n" fits.
  const std::size_t shown_bytes =
      !output.empty() && output.back() == '\n' ? total_bytes - 1 : total_bytes;
  // Cheap test first: most outputs are small and need no line count.
  if (shown_bytes <= limits.max_bytes &&
      (total_bytes <= limits.max_lines || count_lines(output) <= limits.max_lines)) {
    result.content = std::move(output);
    return result;
  }
  const std::size_t total_lines = count_lines(output);

  Head head = take_head(output, limits);
  result.truncated = true;

  std::string note = "[Output truncated after ";
  if (head.partial_line)
    note += plural(head.bytes, "byte", "bytes") + " (part of line 1)";
  else if (head.hit_bytes)
    note += plural(head.bytes, "byte", "bytes") + " (" + plural(head.lines, "line", "lines") + ")";
  else
    note += plural(head.lines, "line", "lines");
  std::string whole =
      "(" + plural(total_lines, "line", "lines") + ", " + human_size(total_bytes) + ")";

  std::filesystem::path path =
      session_output_dir(options.dir, session_id) / (ids::make("tool_" + safe_name(tool)) + ".txt");
  auto saved = options.write ? options.write(path, output)
                             : Result<void>(make_error(ErrorCode::Internal, "no file writer"));
  if (saved) {
    std::string file = path.string();
    note += ". Full output " + whole + " written to:\n" + file + "\n\n" +
            "Use the read tool to view the rest, or grep to search it:\n" + "  read(filePath=\"" +
            file + "\", offset=" + std::to_string(head.lines) +
            ", limit=" + std::to_string(limits.max_lines) + ")\n]";
    result.output_path = std::move(path);
  } else {
    note += ". The full output " + whole + " could not be saved (" + saved.error().message +
            "), so the rest is not available. To see more, run the call again with narrower "
            "output (filter it, or ask for a smaller part).]";
    result.save_error = saved.error().message;
  }

  // The head, then a blank line and the note.
  output.resize(head.bytes);
  if (!output.empty()) output += "\n\n";
  output += note;
  result.content = std::move(output);
  return result;
}

}  // namespace sb::tool
