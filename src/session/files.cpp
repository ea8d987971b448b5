#include "session/files.hpp"

#include <boost/url/parse.hpp>
#include <boost/url/pct_string_view.hpp>

#include <algorithm>
#include <charconv>
#include <system_error>

#include "tool/builtin/file_util.hpp"
#include "tool/paths.hpp"
#include "util/base64.hpp"
#include "util/text.hpp"

namespace sb::session {

namespace fs = std::filesystem;

namespace {

Error invalid(std::string message) {
  return make_error(ErrorCode::InvalidRequest, std::move(message));
}

// "image/png" of "Image/PNG; charset=x".
std::string bare_mime(std::string_view mime) {
  return ascii_lower(trim(mime.substr(0, mime.find(';'))));
}

bool starts_with_ci(std::string_view text, std::string_view prefix) {
  return text.size() >= prefix.size() && ascii_iequals(text.substr(0, prefix.size()), prefix);
}

std::string size_text(std::size_t bytes) {
  return std::to_string(bytes) + " bytes";
}

// What the first bytes of an image or a PDF must be.
bool has_signature(std::string_view mime, std::string_view bytes) {
  if (mime == "image/png") return bytes.starts_with("\x89PNG\r\n\x1a\n");
  if (mime == "image/jpeg") return bytes.starts_with("\xff\xd8\xff");
  if (mime == "image/gif") return bytes.starts_with("GIF87a") || bytes.starts_with("GIF89a");
  if (mime == "image/webp")
    return bytes.size() >= 12 && bytes.starts_with("RIFF") && bytes.substr(8, 4) == "WEBP";
  if (mime == "application/pdf") return bytes.starts_with("%PDF-");
  return false;
}

// A text file as the read tool shows it: numbered lines inside <file>...</file>.
std::string numbered(std::string_view text) {
  std::string out = "<file>\n";
  std::size_t count = 0;
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t nl = std::min(text.find('\n', pos), text.size());
    std::string_view line = text.substr(pos, nl - pos);
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (count) out += '\n';
    char digits[24];
    auto end = std::to_chars(digits, digits + sizeof digits, ++count).ptr;
    auto width = static_cast<std::size_t>(end - digits);
    if (width < 5) out.append(5 - width, '0');
    out.append(digits, width);
    out += "| ";
    out += line;
    pos = nl + 1;
  }
  if (count == 0)
    out += "(This file exists but is empty.)";
  else
    out += "\n\n(End of file - total " + std::to_string(count) + " lines)";
  out += "\n</file>";
  return out;
}

// A directory's entries, sorted, subdirectories marked with a '/' (at most 1000 of them).
Result<std::string> listing(const fs::path& dir, const std::string& at) {
  constexpr std::size_t kMaxEntries = 1000;
  std::vector<std::string> names;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  std::size_t total = 0;
  for (; !ec && it != fs::directory_iterator(); it.increment(ec), ++total) {
    if (names.size() >= kMaxEntries) continue;
    std::error_code type_ec;
    names.push_back(it->path().filename().string() + (it->is_directory(type_ec) ? "/" : ""));
  }
  if (ec) return invalid(at + ": cannot list " + dir.string() + ": " + ec.message());
  std::sort(names.begin(), names.end());
  std::string out = "<directory>\n";
  for (const auto& n : names)
    out += repair_utf8(n) + "\n";
  out += "\n(" + std::to_string(total) + " entries" +
         (total > names.size() ? ", the first " + std::to_string(names.size()) + " shown" : "") +
         ")\n</directory>";
  return out;
}

// A synthetic text part.
Part synthetic_text(std::string text) {
  Part p;
  p.type = Part::Type::Text;
  p.synthetic = true;
  p.text = std::move(text);
  return p;
}

// The note that stands before a file's content: the read call its content is the output of.
Part read_note(const std::string& path) {
  return synthetic_text("Called the Read tool with the following input: " +
                        json::serialize(json::object{{"filePath", path}}));
}

// One file, its bytes in hand (`path` empty for a data: URL): its parts appended to `out`.
Result<void> file_parts(const FileInput& file, FileKind kind, std::string_view bytes,
                        const std::string& path, const std::string& at, std::vector<Part>& out) {
  Part part;
  part.type = Part::Type::File;
  part.mime = file.mime;
  part.url = file.url;
  part.filename = file.filename;
  part.source = file.source;
  std::string name = !path.empty() ? path : !file.filename.empty() ? file.filename : "file";
  if (kind == FileKind::Text) {
    if (bytes.find('\0') != std::string_view::npos)
      return invalid(at + ": " + name + " is not text (mime " + file.mime + ")");
    out.push_back(read_note(name));
    out.push_back(synthetic_text(numbered(repair_utf8(bytes))));
  } else {
    std::string mime = bare_mime(file.mime);
    if (!has_signature(mime, bytes))
      return invalid(at + ": " + name + " is not " +
                     (kind == FileKind::Pdf ? std::string("a PDF") : "a " + mime + " image") +
                     " (its bytes do not start as one does)");
    if (!path.empty()) out.push_back(read_note(name));
    part.mime = mime;
    part.url = "data:" + mime + ";base64," + base64_encode(bytes);
  }
  out.push_back(std::move(part));
  return {};
}

}  // namespace

Result<FileOptions> file_options(const json::object& config) {
  FileOptions out;
  auto files = get_object(config, "files");
  if (!files) return files.error();
  if (!*files) return out;
  for (auto [key, field] : {std::pair{"maxBytes", &out.max_file_bytes},
                            std::pair{"maxPromptBytes", &out.max_prompt_bytes}}) {
    auto v = get_int(**files, key, "files");
    if (!v) return v.error();
    if (!*v) continue;
    if (**v < 1)
      return invalid(field_path("files", key) + " must be 1 or more, got " + std::to_string(**v));
    *field = static_cast<std::size_t>(**v);
  }
  return out;
}

Result<std::string> decode_data_url(std::string_view url, std::size_t max_bytes) {
  if (!starts_with_ci(url, "data:")) return invalid("not a data: URL");
  auto comma = url.find(',');
  if (comma == std::string_view::npos)
    return invalid("malformed data: URL: no ',' before the data (data:MIME;base64,DATA)");
  std::string_view meta = url.substr(5, comma - 5);
  std::string_view data = url.substr(comma + 1);
  bool base64 = meta.size() >= 7 && ascii_iequals(meta.substr(meta.size() - 7), ";base64");
  auto too_large = [&](std::size_t bytes) {
    return make_error(ErrorCode::TooLarge,
                      "the data is " + size_text(bytes) + ", over " + size_text(max_bytes));
  };
  // Percent-escapes decode to one byte each, base64 to 3 bytes per 4 characters: the most the
  // data can be, checked before it is decoded.
  if (!base64 && data.size() / 3 > max_bytes) return too_large(data.size() / 3);
  std::string text;
  auto escaped = boost::urls::make_pct_string_view(data);
  if (!escaped)
    return invalid("malformed data: URL: " + std::string(escaped.error().message()) +
                   " (a '%' must start an escape such as %20)");
  if (escaped->decoded_size() != data.size()) {
    text.reserve(escaped->decoded_size());
    escaped->decode({}, boost::urls::string_token::assign_to(text));
  } else {
    text.assign(data);
  }
  if (!base64) {
    if (text.size() > max_bytes) return too_large(text.size());
    return text;
  }
  // Line breaks and spaces are allowed in base64 and mean nothing.
  std::erase_if(text, [](char c) { return kAsciiSpace.find(c) != std::string_view::npos; });
  if (text.size() / 4 * 3 > max_bytes + 2) return too_large(text.size() / 4 * 3);
  auto bytes = base64_decode(text);
  if (!bytes)
    return invalid(
        "malformed data: URL: the data is not base64 (the standard alphabet, padded with '=')");
  if (bytes->size() > max_bytes) return too_large(bytes->size());
  return std::move(*bytes);
}

Result<fs::path> file_url_path(std::string_view url, const fs::path& directory) {
  fs::path path;
  if (starts_with_ci(url, "file:")) {
    auto parsed = boost::urls::parse_uri(url);
    if (!parsed)
      return invalid("malformed file: URL: " + std::string(parsed.error().message()) +
                     " (file:///absolute/path, with %20 for a space)");
    if (parsed->has_authority() && !parsed->encoded_host().empty() &&
        parsed->encoded_host() != "localhost")
      return invalid("a file: URL of another host (" + std::string(parsed->encoded_host()) +
                     ") cannot be read");
    path = std::string(parsed->path());
    if (!path.is_absolute()) return invalid("a file: URL needs an absolute path (file:///...)");
  } else {
    // A scheme ("https:", "s3:") is letters, digits, '+', '-' or '.' before a ':'.
    auto colon = url.find(':');
    if (colon != std::string_view::npos && colon > 1 &&
        std::all_of(url.begin(), url.begin() + static_cast<std::ptrdiff_t>(colon), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.';
        }))
      return invalid("URLs of scheme \"" + std::string(url.substr(0, colon)) +
                     ":\" are not read: send a data: URL, a file: URL or a path in the project");
    if (url.empty()) return invalid("the url is empty");
    path = fs::path(url);
    if (path.is_relative()) path = directory / path;
  }
  return path.lexically_normal();
}

std::optional<FileKind> file_kind(std::string_view mime) {
  std::string m = bare_mime(mime);
  if (m == "image/png" || m == "image/jpeg" || m == "image/gif" || m == "image/webp")
    return FileKind::Image;
  if (m == "application/pdf") return FileKind::Pdf;
  if (m == "application/x-directory") return FileKind::Directory;
  if (m.starts_with("text/") || m.ends_with("+json") || m.ends_with("+xml")) return FileKind::Text;
  static constexpr std::string_view kTextApplications[] = {
      "json",     "xml",     "javascript",    "x-javascript", "ecmascript", "x-yaml", "yaml",
      "toml",     "x-sh",    "x-shellscript", "sql",          "graphql",    "x-tex",  "x-httpd-php",
      "x-ndjson", "ld+json", "typescript",    "x-python",     "x-ruby",     "x-perl"};
  if (m.starts_with("application/")) {
    std::string_view sub = std::string_view(m).substr(12);
    if (std::find(std::begin(kTextApplications), std::end(kTextApplications), sub) !=
        std::end(kTextApplications))
      return FileKind::Text;
  }
  return std::nullopt;
}

Result<std::vector<std::vector<Part>>> resolve_files(const std::vector<FileInput>& files,
                                                     const std::vector<std::size_t>& indices,
                                                     const fs::path& directory,
                                                     const FileOptions& options,
                                                     const provider::InputKinds& accepts) {
  if (files.size() > kMaxPromptFiles)
    return make_error(ErrorCode::TooLarge,
                      "the prompt has " + std::to_string(files.size()) + " file parts, over the " +
                          std::to_string(kMaxPromptFiles) + " a prompt may hold");
  std::vector<std::vector<Part>> all;
  std::size_t total = 0;
  auto over_prompt_bytes = [&](const std::string& at) {
    return make_error(ErrorCode::TooLarge, at + ": the prompt's files come to " + size_text(total) +
                                               ", over files.maxPromptBytes (" +
                                               size_text(options.max_prompt_bytes) + ")");
  };
  for (std::size_t i = 0; i < files.size(); ++i) {
    const FileInput& file = files[i];
    std::vector<Part>& out = all.emplace_back();
    std::string at = "parts[" + std::to_string(i < indices.size() ? indices[i] : i) + "]";
    std::string name = file.filename.empty() ? std::string() : " (" + file.filename + ")";
    auto kind = file_kind(file.mime);
    if (!kind)
      return invalid(at + name + ": files of type \"" + file.mime +
                     "\" are not taken: send text (text/*, JSON, ...), an image (image/png, "
                     "image/jpeg, image/gif, image/webp) or a PDF (application/pdf)");
    if ((*kind == FileKind::Image && !accepts.image) || (*kind == FileKind::Pdf && !accepts.pdf))
      return invalid(at + name + ": this prompt's model does not take " +
                     (*kind == FileKind::Image ? "images" : "PDFs") +
                     " (provider.NAME.input in the config says what a provider's models take)");
    std::string bytes, path;
    if (starts_with_ci(file.url, "data:")) {
      if (*kind == FileKind::Directory)
        return invalid(at + name + ": a directory cannot be sent as a data: URL");
      auto decoded = decode_data_url(file.url, options.max_file_bytes);
      if (!decoded) {
        if (decoded.error().code == ErrorCode::TooLarge)
          return make_error(ErrorCode::TooLarge,
                            at + name + ": " + decoded.error().message + " (files.maxBytes)");
        return invalid(at + name + ".url: " + decoded.error().message);
      }
      bytes = std::move(*decoded);
    } else {
      auto resolved = file_url_path(file.url, directory);
      if (!resolved) return invalid(at + name + ".url: " + resolved.error().message);
      path = resolved->string();
      if (!tool::is_within(directory, *resolved))
        return invalid(at + name + ": " + path + " is outside the project directory " +
                       directory.string() +
                       " (symlinks followed); send its content as a data: " + "URL instead");
      std::error_code ec;
      auto status = fs::status(*resolved, ec);
      if (ec || !fs::exists(status)) return invalid(at + name + ": no file at " + path);
      if (fs::is_directory(status)) {
        auto list = listing(*resolved, at);
        if (!list) return list.error();
        total += list->size();
        if (total > options.max_prompt_bytes) return over_prompt_bytes(at + name);
        out.push_back(read_note(path));
        out.push_back(synthetic_text(std::move(*list)));
        Part part;
        part.type = Part::Type::File;
        part.mime = "application/x-directory";
        part.url = file.url;
        part.filename = file.filename.empty() ? resolved->filename().string() : file.filename;
        part.source = file.source;
        out.push_back(std::move(part));
        continue;
      }
      if (*kind == FileKind::Directory) return invalid(at + name + ": " + path + " is a file");
      if (!fs::is_regular_file(status))
        return invalid(at + name + ": " + path + " is not a regular file");
      auto read = tool::fsutil::read_file(*resolved, options.max_file_bytes);
      if (!read) {
        if (read.error().code == ErrorCode::TooLarge)
          return make_error(ErrorCode::TooLarge, at + name + ": " + path +
                                                     " is over files.maxBytes (" +
                                                     size_text(options.max_file_bytes) + ")");
        return invalid(at + name + ": " + read.error().message);
      }
      bytes = std::move(*read);
    }
    total += bytes.size();
    if (total > options.max_prompt_bytes) return over_prompt_bytes(at + name);
    FileInput named = file;
    if (named.filename.empty() && !path.empty()) named.filename = fs::path(path).filename();
    if (auto r = file_parts(named, *kind, bytes, path, at + name, out); !r) return r.error();
  }
  return all;
}

std::optional<provider::Attachment> attachment_of(const Part& part) {
  if (part.type != Part::Type::File || !starts_with_ci(part.url, "data:")) return std::nullopt;
  auto kind = file_kind(part.mime);
  if (kind != FileKind::Image && kind != FileKind::Pdf) return std::nullopt;
  provider::Attachment a;
  a.kind =
      kind == FileKind::Image ? provider::Attachment::Kind::Image : provider::Attachment::Kind::Pdf;
  a.mime = bare_mime(part.mime);
  a.filename = part.filename;
  a.data_url = std::make_shared<const std::string>(part.url);
  return a;
}

}  // namespace sb::session
