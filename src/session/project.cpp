#include "session/project.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

extern char** environ;

namespace sb::session {

namespace {

// The lines `git -C directory ARGS...` printed, or nothing when it could not run or failed.
std::optional<std::vector<std::string>> git_lines(const std::string& directory,
                                                  std::vector<std::string> args) {
  args.insert(args.begin(), {"git", "-C", directory});
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);

  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return std::nullopt;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  pid_t pid = -1;
  int started = ::posix_spawnp(&pid, "git", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  std::string text;
  if (started == 0) {
    char buf[4096];
    for (;;) {
      ssize_t n = ::read(out[0], buf, sizeof buf);
      if (n > 0)
        text.append(buf, static_cast<std::size_t>(n));
      else if (n == 0 || errno != EINTR)
        break;
    }
  }
  ::close(out[0]);
  if (started != 0) return std::nullopt;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

std::string first_line_of(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  while (!line.empty() && (line.back() == '\r' || line.back() == ' '))
    line.pop_back();
  return line;
}

}  // namespace

ProjectInfo project_of(const std::string& directory) {
  ProjectInfo global{"global", "/", ""};
  auto where = git_lines(directory, {"rev-parse", "--show-toplevel", "--git-common-dir"});
  if (!where || where->size() < 2) return global;
  ProjectInfo p{"global", (*where)[0], "git"};
  std::filesystem::path common = (*where)[1];
  if (common.is_relative()) common = std::filesystem::path(directory) / common;
  std::error_code ec;
  if (std::filesystem::is_regular_file(common / "opencode", ec))
    if (auto id = first_line_of(common / "opencode"); !id.empty()) {
      p.id = id;
      return p;
    }
  auto roots = git_lines(directory, {"rev-list", "--max-parents=0", "--all"});
  if (roots && !roots->empty()) p.id = *std::min_element(roots->begin(), roots->end());
  return p;
}

std::string slug_of(const std::string& session_id) {
  static constexpr std::array<const char*, 32> kFirst = {
      "amber",  "bold",   "brave",  "bright", "calm",   "clever", "cosmic", "crisp",
      "eager",  "gentle", "golden", "happy",  "hidden", "lively", "lucky",  "misty",
      "nimble", "noble",  "proud",  "quick",  "quiet",  "rapid",  "silent", "silver",
      "steady", "sunny",  "swift",  "tidy",   "vivid",  "warm",   "wild",   "witty"};
  static constexpr std::array<const char*, 32> kSecond = {
      "anchor", "badger",  "beacon", "cabin",  "canyon",  "comet",   "falcon", "forest",
      "garden", "harbor",  "island", "lagoon", "lantern", "meadow",  "meteor", "orchid",
      "otter",  "panda",   "pebble", "pine",   "planet",  "prairie", "raven",  "river",
      "rocket", "sparrow", "summit", "tiger",  "tulip",   "valley",  "willow", "wolf"};
  // FNV-1a: stable across builds and platforms, unlike std::hash.
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : session_id) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return std::string(kFirst[h % kFirst.size()]) + "-" + kSecond[(h >> 32) % kSecond.size()];
}

}  // namespace sb::session
