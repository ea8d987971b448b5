#pragma once
// Files in prompts (OpenCode's FilePartInput: {type: "file", mime, url, filename?, source?}):
// their data: and file: URLs decoded and read once, when the prompt comes, into the parts of the
// user's message, and those parts into what the model gets. A text file (or a directory) becomes
// synthetic text parts with its content, as a `read` call would show it, beside its file part; an
// image (PNG, JPEG, GIF, WebP) or a PDF is its file part, with the bytes as a base64 data: URL,
// stored once and given to the model as an attachment. Pure functions apart from reading the
// files; thread-safe.
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "provider/types.hpp"
#include "session/types.hpp"
#include "util/error.hpp"
#include "util/json.hpp"

namespace sb::session {

// A file part of a prompt as decoded at the edge.
struct FileInput {
  std::string mime;
  std::string url;  // data:..., file://..., or a path (relative: to the project directory)
  std::string filename;
  json::object source;  // FilePartSource, kept as sent
};

// The `files` keys of the config (docs/configuration.md).
struct FileOptions {
  std::size_t max_file_bytes = std::size_t{5} << 20;     // files.maxBytes: one file's bytes
  std::size_t max_prompt_bytes = std::size_t{10} << 20;  // files.maxPromptBytes: a prompt's
};

// The most file parts one prompt may hold (docs/api.md, "Files in prompts"): each is a read or a
// directory scan when the prompt comes, so their number is bounded as their bytes are.
inline constexpr std::size_t kMaxPromptFiles = 100;

// Reads `files` of the merged config document; errors name the key.
Result<FileOptions> file_options(const json::object& config);

// The bytes of a data: URL (RFC 2397: "data:[MIME][;base64],DATA", the data percent-encoded
// unless base64). InvalidRequest for a malformed one; TooLarge past `max_bytes`, measured
// before anything is decoded.
Result<std::string> decode_data_url(std::string_view url, std::size_t max_bytes);

// The path a file: URL ("file:///p/a%20b.txt", host empty or localhost) or a plain path stands
// for, made absolute against `directory` and lexically normal. InvalidRequest for another scheme
// or a malformed URL.
Result<std::filesystem::path> file_url_path(std::string_view url,
                                            const std::filesystem::path& directory);

// What a file is to the model, by its mime type (parameters and case ignored): text (text/*,
// JSON, XML, YAML, scripts, ...), an image, a PDF, a directory (application/x-directory), or
// none of these (nullopt).
enum class FileKind { Text, Image, Pdf, Directory };
std::optional<FileKind> file_kind(std::string_view mime);

// The parts (without ids) that `files` become, a list per file, for a session in `directory`:
// for a text file or a directory two synthetic text parts (the read call it stands for and the
// content) and its file part; for an image or a PDF its file part with a data: URL. Errors name
// the part ("parts[0]"; `first_index` is the first file's place among the prompt's parts):
// InvalidRequest for a malformed URL, an unsupported mime type, bytes that are not what the mime
// type says, a missing file, a path outside the project (symlinks resolved) or a kind `accepts`
// lacks; TooLarge past FileOptions' limits (a directory's listing counts against
// files.maxPromptBytes as a file's bytes do), naming the key, or past kMaxPromptFiles files.
Result<std::vector<std::vector<Part>>> resolve_files(const std::vector<FileInput>& files,
                                                     const std::vector<std::size_t>& indices,
                                                     const std::filesystem::path& directory,
                                                     const FileOptions& options,
                                                     const provider::InputKinds& accepts);

// The attachment the model gets for a stored file part: images and PDFs with a data: URL; nullopt
// for anything else (a text file's content is in its synthetic text parts).
std::optional<provider::Attachment> attachment_of(const Part& part);

}  // namespace sb::session
