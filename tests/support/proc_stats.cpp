#include "proc_stats.hpp"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace sb::test {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string proc_path(pid_t pid, std::string_view file) {
  return "/proc/" + std::to_string(pid) + "/" + std::string(file);
}

}  // namespace

long clock_ticks_per_second() {
  static const long ticks = ::sysconf(_SC_CLK_TCK);
  return ticks;
}

CpuTicks process_cpu_ticks(pid_t pid) {
  std::string stat = read_text(proc_path(pid, "stat"));
  // The command name (field 2) is in parentheses and may itself contain spaces and ')'.
  auto paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 > stat.size())
    throw std::runtime_error("cannot read " + proc_path(pid, "stat"));
  std::istringstream fields(stat.substr(paren + 2));
  // Fields 3.. of proc(5): state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt
  // cmajflt utime stime.
  std::string skip;
  for (int i = 0; i < 11; ++i)
    fields >> skip;
  CpuTicks t;
  fields >> t.user >> t.system;
  return t;
}

std::uint64_t process_cpu_ns(pid_t pid) {
  std::string dir = proc_path(pid, "task");
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  std::uint64_t total = 0;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::istringstream in(read_text(dir + "/" + e->d_name + "/schedstat"));
    std::uint64_t ns = 0;
    in >> ns;
    total += ns;
  }
  ::closedir(d);
  return total;
}

std::uint64_t system_busy_ticks() {
  std::istringstream in(read_text("/proc/stat"));
  std::string label;
  in >> label;
  std::uint64_t v[10] = {};
  for (auto& x : v)
    in >> x;
  // user nice system idle iowait irq softirq steal guest guest_nice (guest is inside user)
  return v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
}

std::int64_t self_cpu_us() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000LL + ru.ru_utime.tv_usec +
         ru.ru_stime.tv_usec;
}

std::uint64_t status_field(pid_t pid, std::string_view name) {
  std::istringstream in(read_text(proc_path(pid, "status")));
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > name.size() && line.compare(0, name.size(), name) == 0 &&
        line[name.size()] == ':') {
      std::istringstream rest(line.substr(name.size() + 1));
      std::uint64_t v = 0;
      rest >> v;
      return v;
    }
  }
  throw std::runtime_error("no " + std::string(name) + " in " + proc_path(pid, "status"));
}

std::uint64_t rss_bytes(pid_t pid) {
  return status_field(pid, "VmRSS") * 1024;
}

std::size_t open_fds(pid_t pid) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::size_t n = 0;
  for (fs::directory_iterator it(proc_path(pid, "fd"), ec), end; !ec && it != end; it.increment(ec))
    ++n;
  return n;
}

std::string cpu_model() {
  std::istringstream in(read_text("/proc/cpuinfo"));
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  return "unknown";
}

std::string load_average() {
  std::istringstream in(read_text("/proc/loadavg"));
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

}  // namespace sb::test
