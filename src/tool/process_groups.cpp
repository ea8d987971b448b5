#include "tool/process_groups.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <charconv>
#include <cstdint>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "util/ids.hpp"
#include "util/log.hpp"

namespace sb::tool {

namespace fs = std::filesystem;

namespace {

// What /proc/PID/stat says about a process that matters here.
struct ProcessInfo {
  pid_t pid = 0;
  pid_t group = 0;
  std::uint64_t start = 0;  // clock ticks after boot
  bool zombie = false;
};

std::optional<pid_t> parse_pid(std::string_view text) {
  pid_t pid = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), pid);
  if (ec != std::errc{} || end != text.data() + text.size() || pid <= 0) return std::nullopt;
  return pid;
}

std::optional<ProcessInfo> read_process(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  // "PID (COMM) STATE PPID PGRP ...": COMM may hold spaces and parentheses, so fields are
  // counted from the last ')'. The start time is field 22, the 19th number after STATE.
  auto close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(line.substr(close + 1));
  char state = 0;
  long long number = 0;
  ProcessInfo info;
  info.pid = pid;
  fields >> state;
  for (int i = 0; i < 19 && fields >> number; ++i) {
    if (i == 1) info.group = static_cast<pid_t>(number);
    if (i == 18) info.start = static_cast<std::uint64_t>(number);
  }
  if (!fields) return std::nullopt;
  info.zombie = state == 'Z' || state == 'X';
  return info;
}

// Empty when unknown (no /proc): then nothing is recorded and nothing stopped.
const std::string& boot_id() {
  static const std::string id = [] {
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string text;
    in >> text;
    return text;
  }();
  return id;
}

// Whether the process's environment holds kToolGroupVariable=token (unreadable: no).
bool carries_token(pid_t pid, const std::string& token) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  std::string want = std::string(kToolGroupVariable) + "=" + token;
  for (std::string entry; std::getline(in, entry, '\0');)
    if (entry == want) return true;
  return false;
}

fs::path record_path(const fs::path& dir, pid_t pgid) {
  return dir / std::to_string(pgid);
}

}  // namespace

fs::path process_group_dir(const fs::path& data_dir) {
  return data_dir / "tool-processes";
}

std::string new_group_token() {
  return ids::make("tgr");
}

Result<void> record_process_group(const fs::path& dir, pid_t pgid, const std::string& token) {
  auto leader = read_process(pgid);
  if (boot_id().empty() || !leader)
    return make_error(ErrorCode::Internal, "cannot read /proc for process " + std::to_string(pgid));
  std::string text = boot_id() + " " + std::to_string(leader->start) + " " + token + "\n";
  fs::path path = record_path(dir, pgid);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 && errno == ENOENT) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  }
  bool written =
      fd >= 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  int err = errno;
  if (fd >= 0) ::close(fd);
  if (!written)
    return make_error(ErrorCode::Internal,
                      "cannot write " + path.string() + ": " + std::system_category().message(err));
  return {};
}

void forget_process_group(const fs::path& dir, pid_t pgid) {
  std::error_code ec;
  fs::remove(record_path(dir, pgid), ec);
}

std::size_t stop_recorded_process_groups(const fs::path& dir) {
  struct Record {
    pid_t pgid;
    std::string boot;
    std::uint64_t start = 0;
    std::string token;
  };
  std::vector<Record> records;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    auto pgid = parse_pid(entry.path().filename().string());
    Record r{pgid.value_or(0), {}, 0, {}};
    std::ifstream in(entry.path());
    // A record without a token (an older build's) names no process surely: nothing is killed.
    if (pgid && in >> r.boot >> r.start >> r.token) records.push_back(std::move(r));
    fs::remove(entry.path(), ec);
  }
  if (records.empty() || boot_id().empty()) return 0;

  std::map<pid_t, std::vector<ProcessInfo>> groups;  // live processes by group
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    auto pid = parse_pid(entry.path().filename().string());
    auto info = pid ? read_process(*pid) : std::nullopt;
    if (info && !info->zombie) groups[info->group].push_back(*info);
  }
  std::size_t stopped = 0;
  for (const auto& r : records) {
    if (r.boot != boot_id()) continue;  // a reboot ended that group
    std::vector<pid_t> ours;
    if (auto leader = read_process(r.pgid); leader && !leader->zombie && leader->group != r.pgid)
      groups[r.pgid].push_back(*leader);  // the leader moved to a group of its own
    for (const auto& m : groups[r.pgid])
      if (carries_token(m.pid, r.token)) ours.push_back(m.pid);
    if (ours.empty()) continue;
    for (pid_t pid : ours)
      ::kill(pid, SIGKILL);
    log::info("stopped tool process group ", r.pgid, " (", ours.size(),
              " process(es)) that the last server left running");
    ++stopped;
  }
  return stopped;
}

}  // namespace sb::tool
