#include "tool/builtin/read.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <memory>
#include <system_error>
#include <vector>

#include "tool/builtin/file_util.hpp"
#include "tool/paths.hpp"
#include "util/base64.hpp"
#include "util/text.hpp"

namespace sb::tool {

namespace {

namespace fs = std::filesystem;
using boost::asio::awaitable;

constexpr std::string_view kDescription =
    R"txt(Reads a file from the local filesystem and returns its text with line numbers.

Usage:
- filePath should be an absolute path. A relative path is taken from the project directory.
- By default up to 2000 lines are returned, from the start of the file. For a long file, pass offset (the 0-based line to start at) and limit (how many lines) to read another part; the output ends with a note saying where to continue. Reading the whole file (no offset or limit) is usually best.
- Each line is shown as its number (from 1, padded to 5 digits), "| ", then the line's text, e.g. "00012| int main() {". The number and the "| " are not part of the file: never copy them into the edit tool's oldString or newString.
- Lines longer than 2000 characters are cut and end with "...".
- Binary files cannot be read. Images (PNG, JPEG, GIF, WebP, BMP) and PDF files are returned as attachments.
- Directories cannot be read; use the list tool for those.
- Reading a path that does not exist returns an error, with similarly named files from the same directory when there are any.
- You can call several tools in one response. When several files may be useful, read them all at once.)txt";

constexpr std::string_view kSchema = R"json({
  "type": "object",
  "properties": {
    "filePath": {"type": "string", "description": "The absolute path to the file to read"},
    "offset": {"type": "integer", "minimum": 0,
               "description": "The line number to start reading from (0-based)"},
    "limit": {"type": "integer", "minimum": 1,
              "description": "The number of lines to read (defaults to 2000)"}
  },
  "required": ["filePath"]
})json";

constexpr std::size_t kSampleBytes = 4096;
constexpr std::size_t kChunkBytes = 64 * 1024;

// Extensions that are never text, whatever their first bytes say (as in OpenCode).
bool binary_extension(const fs::path& path) {
  static constexpr std::string_view kExtensions[] = {
      ".zip", ".tar",  ".gz",  ".exe",  ".dll", ".so",   ".class", ".jar", ".war", ".7z",
      ".doc", ".docx", ".xls", ".xlsx", ".ppt", ".pptx", ".odt",   ".ods", ".odp", ".bin",
      ".dat", ".obj",  ".o",   ".a",    ".lib", ".wasm", ".pyc",   ".pyo"};
  std::string ext = ascii_lower(path.extension().string());
  return std::find(std::begin(kExtensions), std::end(kExtensions), ext) != std::end(kExtensions);
}

// A NUL byte, or more than 30% control characters other than whitespace, in the first bytes.
bool binary_content(std::string_view sample) {
  if (sample.empty()) return false;
  std::size_t control = 0;
  for (char ch : sample) {
    auto b = static_cast<unsigned char>(ch);
    if (b == 0) return true;
    if (b < 9 || (b > 13 && b < 32)) ++control;
  }
  return static_cast<double>(control) / static_cast<double>(sample.size()) > 0.3;
}

// Files returned as attachments rather than text.
std::optional<std::string> attachment_mime(const fs::path& path) {
  std::string ext = ascii_lower(path.extension().string());
  if (ext == ".png") return "image/png";
  if (ext == ".jpg" || ext == ".jpeg") return "image/jpeg";
  if (ext == ".gif") return "image/gif";
  if (ext == ".webp") return "image/webp";
  if (ext == ".bmp") return "image/bmp";
  if (ext == ".pdf") return "application/pdf";
  return std::nullopt;
}

// "File not found: /p/src/mian.cpp", plus up to three names from the same directory that contain
// the missing name or are contained in it (case-insensitive), as OpenCode suggests them.
Error not_found(const fs::path& path) {
  std::string message = "File not found: " + path.string();
  std::string base = ascii_lower(path.filename().string());
  std::vector<std::string> similar;
  std::error_code ec;
  fs::directory_iterator it(path.parent_path(), ec);
  std::size_t seen = 0;
  for (; !ec && it != fs::directory_iterator() && seen < 10000; it.increment(ec), ++seen) {
    std::string name = ascii_lower(it->path().filename().string());
    if (base.empty() || name.empty()) continue;
    if (name.find(base) != std::string::npos || base.find(name) != std::string::npos)
      similar.push_back(it->path().string());
  }
  std::sort(similar.begin(), similar.end());
  if (similar.size() > 3) similar.resize(3);
  if (!similar.empty()) {
    message += "\n\nDid you mean one of these?";
    for (const auto& s : similar)
      message += "\n" + s;
  }
  return make_error(ErrorCode::NotFound, std::move(message));
}

// Reads lines in chunks, so that a huge file or a huge single line costs a bounded amount of
// memory: only the first `cap` bytes of each line are kept.
class LineReader {
 public:
  explicit LineReader(int fd) : fd_(fd) {}

  // Reads the first chunk (for the binary check) without consuming it.
  Result<std::string_view> peek(std::size_t n) {
    if (size_ == 0 && !eof_) {
      if (auto filled = fill(); !filled) return filled.error();
    }
    return chunk().substr(pos_, n);
  }

  // False at the end of the file. `line` gets the line without its "\n" (and without a "\r"
  // before it), at most `cap` bytes of it; `cut` says whether bytes were dropped.
  Result<bool> next(std::string& line, bool& cut, std::size_t cap) {
    line.clear();
    cut = false;
    bool any = false;
    while (true) {
      if (pos_ == size_) {
        if (eof_) break;
        if (auto filled = fill(); !filled) return filled.error();
        if (eof_) break;
      }
      any = true;
      std::string_view buf = chunk();
      std::size_t nl = buf.find('\n', pos_);
      std::size_t end = nl == std::string_view::npos ? size_ : nl;
      std::size_t room = cap > line.size() ? cap - line.size() : 0;
      std::size_t take = std::min(end - pos_, room);
      line.append(buf.data() + pos_, take);
      if (take < end - pos_) cut = true;
      if (nl != std::string_view::npos) {
        pos_ = nl + 1;
        break;
      }
      pos_ = size_;
    }
    if (!cut && !line.empty() && line.back() == '\r') line.pop_back();
    return any;
  }

 private:
  std::string_view chunk() const { return {buf_.get(), size_}; }

  Result<void> fill() {
    pos_ = 0;
    size_ = 0;
    while (true) {
      ssize_t n = ::read(fd_, buf_.get(), kChunkBytes);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        int err = errno;
        return make_error(ErrorCode::Internal,
                          "cannot read the file: " + std::system_category().message(err));
      }
      size_ = static_cast<std::size_t>(n);
      if (n == 0) eof_ = true;
      return {};
    }
  }

  int fd_;
  // Not zeroed: read() fills what is used (zeroing 64 KB cost more than reading a small file).
  std::unique_ptr<char[]> buf_ = std::make_unique_for_overwrite<char[]>(kChunkBytes);
  std::size_t size_ = 0;  // bytes of buf_ that the last read filled
  std::size_t pos_ = 0;
  bool eof_ = false;
};

// The characters append_line_number writes for n.
std::size_t number_width(std::size_t n) {
  char digits[24];
  auto end = std::to_chars(digits, digits + sizeof digits, n).ptr;
  return std::max<std::size_t>(static_cast<std::size_t>(end - digits), 5);
}

// At least five digits, zero-padded ("00042"). Written by hand: snprintf cost more than the
// rest of a line's handling.
void append_line_number(std::string& out, std::size_t n) {
  char digits[24];
  auto end = std::to_chars(digits, digits + sizeof digits, n).ptr;
  auto count = static_cast<std::size_t>(end - digits);
  if (count < 5) out.append(5 - count, '0');
  out.append(digits, count);
}

Result<ToolResult> read_attachment(const fs::path& path, const std::string& title,
                                   const std::string& mime, std::size_t max_bytes) {
  auto bytes = fsutil::read_file(path, max_bytes);
  if (!bytes) {
    if (bytes.error().code == ErrorCode::TooLarge)
      return make_error(ErrorCode::TooLarge, "Cannot attach " + path.string() +
                                                 ": it is larger than " +
                                                 std::to_string(max_bytes / 1024) + " KB");
    return bytes.error();
  }
  std::string what = mime == "application/pdf" ? "PDF" : "Image";
  ToolResult result;
  result.title = title;
  result.output = what + " read successfully";
  result.metadata = {{"preview", result.output}, {"truncated", false}};
  result.bounded = true;
  result.attachments.push_back(json::object{
      {"type", "file"},
      {"mime", mime},
      {"url", "data:" + mime + ";base64," + base64_encode(*bytes)},
      {"filename", path.filename().string()},
  });
  return result;
}

// Everything after the permission checks: plain code, so the coroutine stays small.
Result<ToolResult> read_text(const fs::path& path, const std::string& title, std::size_t offset,
                             std::size_t limit, const ReadOptions& options) {
  std::error_code ec;
  auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) {
    if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory)
      return make_error(ErrorCode::Internal, "cannot read " + path.string() + ": " + ec.message());
    return not_found(path);
  }
  if (fs::is_directory(status))
    return make_error(ErrorCode::InvalidRequest,
                      "Cannot read " + path.string() +
                          ": it is a directory, not a file. Use the list tool to see what it "
                          "contains.");
  // A FIFO or a device would block or never end.
  if (!fs::is_regular_file(status))
    return make_error(ErrorCode::InvalidRequest,
                      "Cannot read " + path.string() + ": it is not a regular file");

  if (auto mime = attachment_mime(path))
    return read_attachment(path, title, *mime, options.max_attachment_bytes);
  if (binary_extension(path))
    return make_error(ErrorCode::InvalidRequest, "Cannot read binary file: " + path.string());

  // O_NONBLOCK: should the path have become a FIFO since the check, open must not hang.
  int raw = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (raw < 0) {
    int err = errno;
    ErrorCode code = err == EACCES || err == EPERM ? ErrorCode::Forbidden : ErrorCode::Internal;
    return make_error(code,
                      "cannot read " + path.string() + ": " + std::system_category().message(err));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{raw};

  LineReader reader(raw);
  auto sample = reader.peek(kSampleBytes);
  if (!sample) return sample.error();
  if (binary_content(*sample))
    return make_error(ErrorCode::InvalidRequest, "Cannot read binary file: " + path.string());

  // Bytes enough for max_line_chars characters of up to 4 bytes each, and one more character
  // so that an over-long line is recognised.
  const std::size_t cap = options.max_line_chars * 4 + 4;
  std::vector<std::string> lines;
  std::size_t count = 0, bytes = 0;
  bool more = false, byte_limited = false;
  std::string line;
  bool cut = false;
  while (true) {
    auto got = reader.next(line, cut, count < offset ? 0 : cap);
    if (!got) return got.error();
    if (!*got) break;
    ++count;
    if (count <= offset) continue;
    if (lines.size() >= limit) {
      more = true;
      break;
    }
    std::string text = repair_utf8(line);
    if (cut || fsutil::count_code_points(text) > options.max_line_chars)
      text = std::string(fsutil::first_code_points(text, options.max_line_chars)) + "...";
    // As the line will be written: its number, "| ", the text and the newline before it.
    std::size_t size = number_width(count) + 2 + text.size() + (lines.empty() ? 0 : 1);
    if (bytes + size > options.max_bytes && !lines.empty()) {
      more = byte_limited = true;
      break;
    }
    bytes += size;
    lines.push_back(std::move(text));
  }

  if (offset > 0 && count <= offset)
    return make_error(ErrorCode::InvalidRequest,
                      "Offset " + std::to_string(offset) + " is out of range for this file (" +
                          std::to_string(count) + " lines). The offset is the 0-based line to " +
                          "start at, so it must be below the number of lines.");

  std::string output = "<file>\n";
  if (count == 0) {
    output += "(This file exists but is empty.)";
  } else {
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (i) output += '\n';
      append_line_number(output, offset + i + 1);
      output += "| ";
      output += lines[i];
    }
    std::size_t last = offset + lines.size();
    if (byte_limited)
      output += "\n\n(Output truncated at " + std::to_string(options.max_bytes) +
                " bytes. Use 'offset' parameter to read beyond line " + std::to_string(last) + ")";
    else if (more)
      output += "\n\n(File has more lines. Use 'offset' parameter to read beyond line " +
                std::to_string(last) + ")";
    else
      output += "\n\n(End of file - total " + std::to_string(count) + " lines)";
  }
  output += "\n</file>";

  std::string preview;
  for (std::size_t i = 0; i < lines.size() && i < 20; ++i) {
    if (i) preview += '\n';
    preview += lines[i];
  }
  ToolResult result;
  result.title = title;
  result.output = std::move(output);
  result.metadata = {{"preview", std::move(preview)}, {"truncated", more}};
  // Within the processor's limits (2000 lines, 50 KB) unless the model asked for more lines.
  result.bounded = lines.size() <= options.default_limit;
  return result;
}

class ReadTool final : public BasicTool {
 public:
  explicit ReadTool(ReadOptions options)
      : BasicTool("read", std::string(kDescription), kSchema), options_(options) {}

  awaitable<Result<ToolResult>> execute(json::object args, ToolContext& ctx) override {
    auto file_path = get_string(args, "filePath");
    if (!file_path) co_return file_path.error();
    if (!*file_path || (*file_path)->empty())
      co_return make_error(ErrorCode::InvalidRequest, "filePath is required");
    auto offset = get_int(args, "offset");
    if (!offset) co_return offset.error();
    if (*offset && **offset < 0)
      co_return make_error(ErrorCode::InvalidRequest,
                           "offset must be 0 or more (it is the 0-based line to start at)");
    auto limit = get_int(args, "limit");
    if (!limit) co_return limit.error();
    if (*limit && **limit < 1)
      co_return make_error(ErrorCode::InvalidRequest, "limit must be 1 or more");

    auto path = co_await resolve_path(ctx, **file_path);
    if (!path) co_return path.error();
    if (auto allowed = co_await ctx.request_permission(permission_for(*path)); !allowed)
      co_return allowed.error();
    if (auto live = fsutil::check_not_aborted(ctx); !live) co_return live.error();

    co_return read_text(
        *path, fsutil::display_path(ctx, *path), static_cast<std::size_t>(offset->value_or(0)),
        limit->has_value() ? static_cast<std::size_t>(**limit) : options_.default_limit, options_);
  }

 private:
  static PermissionRequest permission_for(const fs::path& path) {
    PermissionRequest req;
    req.permission = "read";
    req.patterns = {path.string()};
    // As OpenCode: "always" for one read allows reading anything for the rest of the session.
    req.always = {"*"};
    req.metadata = {{"filepath", path.string()}};
    return req;
  }

  ReadOptions options_;
};

}  // namespace

ToolPtr make_read_tool(ReadOptions options) {
  return std::make_shared<ReadTool>(options);
}

}  // namespace sb::tool
