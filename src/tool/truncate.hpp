#pragma once
// Output truncation (seed 002): a tool output over the line or byte limit keeps its head, the
// full text goes to a file under the data directory, and the output ends with a note that tells
// the model how big the whole was and how to read the rest with the read tool. Writing the file
// may fail (full disk, read-only directory); the call is not lost then: the head comes back with
// a note that says the rest could not be saved, and why.
//
// Stateless; thread-safe as long as the FileWriter is (the default one is).
#include <cstddef>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "util/error.hpp"

namespace sb::tool {

struct TruncateLimits {
  std::size_t max_lines = 2000;   // lines of output the model sees at most
  std::size_t max_bytes = 51200;  // bytes of output the model sees at most (50 KB)
};

// Writes `content` to a new file at `path`, creating the parent directories. Fails (and leaves
// no partial file behind) when the directory cannot be created, the file exists, or a write
// fails; the message names the path and the system's reason ("No space left on device").
using FileWriter = std::function<Result<void>(const std::filesystem::path&, std::string_view)>;
Result<void> write_file(const std::filesystem::path& path, std::string_view content);

struct TruncateOptions {
  std::filesystem::path dir;      // where full outputs go: the data directory's truncate/
  TruncateLimits limits;          // defaults as in seed 002
  FileWriter write = write_file;  // replaced in tests
};

struct TruncateResult {
  std::string content;     // what the model sees: the output, or its head and the note
  bool truncated = false;  // the output was over a limit
  std::optional<std::filesystem::path> output_path;  // the full output, when it was saved
  std::optional<std::string> save_error;             // why it could not be saved
};

// Applies the limits to one tool output. Under both limits, `output` comes back unchanged (moved,
// not copied); a final newline counts as neither a line nor a byte. Over a limit, the head keeps
// whole lines up to both limits; only when not even the first line fits is that line cut, at a
// UTF-8 character boundary. The full output goes to
// `<dir>/<sessionID>/tool_<tool>_<unique id>.txt` (both names reduced to safe file-name
// characters).
TruncateResult truncate_output(std::string output, std::string_view session_id,
                               std::string_view tool, const TruncateOptions& options);

// The directory of saved full outputs in a data directory (TruncateOptions::dir).
std::filesystem::path saved_outputs_dir(const std::filesystem::path& data_dir);

// Where truncate_output saves the full outputs of a session's tools below `dir`.
std::filesystem::path session_output_dir(const std::filesystem::path& dir,
                                         std::string_view session_id);

}  // namespace sb::tool
