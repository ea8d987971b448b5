// read_local_file: the model reads a file on this machine (seed 000, "File System Access Tool"),
// but only below --root (default: the current directory), and at most 1 MiB of it.
//
//   read_local_file [--root DIR] [--url URL] [--prompt TEXT]
//   read_local_file --prompt '/call client_example-files_read_local_file {"path": "notes.txt"}'
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "example_session.hpp"

namespace {

namespace fs = std::filesystem;
constexpr std::uintmax_t kMaxBytes = 1024 * 1024;

std::string read_below(const fs::path& root, const std::string& requested) {
  fs::path path = fs::weakly_canonical(root / requested);  // `requested` may be absolute
  auto [end, rest] = std::mismatch(root.begin(), root.end(), path.begin(), path.end());
  if (end != root.end()) throw std::runtime_error(requested + " is outside " + root.string());
  if (!fs::is_regular_file(path)) throw std::runtime_error(requested + " is not a file");
  if (fs::file_size(path) > kMaxBytes)
    throw std::runtime_error(requested + " is larger than 1 MiB");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream content;
  content << in.rdbuf();
  if (!in) throw std::runtime_error("cannot read " + requested);
  return content.str();
}

}  // namespace

int main(int argc, char** argv) {
  auto options = example::parse(argc, argv, {"root"}, "What does notes.txt say?", "[--root DIR]");
  fs::path root = fs::canonical(options.extra.count("root") ? fs::path(options.extra["root"])
                                                            : fs::current_path());
  auto client = example::client_with_tool(
      options, "example-files", "read_local_file",
      {"Read a file from the client's local filesystem",
       example::string_input("path", "Path of the file, relative to the client's root", true)},
      [root](const boost::json::object& input,
             switchboard::ToolContext&) -> switchboard::ToolOutput {
        std::string path(input.at("path").as_string());
        std::cerr << "read_local_file(" << path << ")\n";
        return switchboard::ToolResult{"Read " + path, read_below(root, path), {}};
      });
  return example::run_turn(*client, options.prompt);
}
