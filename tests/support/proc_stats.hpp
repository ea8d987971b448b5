#pragma once
// Test and benchmark support: what Linux's /proc says about a process (CPU time, memory, open
// descriptors) and about the machine (busy CPU time, CPU model, load average). Every call reads
// the files anew. Thread-safe (no state).
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sb::test {

// CPU time in clock ticks (clock_ticks_per_second() a second).
struct CpuTicks {
  std::uint64_t user = 0, system = 0;
  std::uint64_t total() const { return user + system; }
};

long clock_ticks_per_second();

// utime and stime of a process (every thread, those that ended included), from /proc/PID/stat.
// Throws std::runtime_error when the file cannot be read.
CpuTicks process_cpu_ticks(pid_t pid);

// Time on CPU of the live threads of a process in nanoseconds (the first field of each
// /proc/PID/task/TID/schedstat): finer than the 10 ms ticks of /proc/PID/stat, but threads that
// ended are not counted. 0 when the process is gone.
std::uint64_t process_cpu_ns(pid_t pid);

// Busy ticks (everything but idle and iowait, steal included) over all CPUs, from /proc/stat.
std::uint64_t system_busy_ticks();

// This process's user + system CPU time in microseconds (getrusage).
std::int64_t self_cpu_us();

// A number of /proc/PID/status: "VmRSS" and "VmHWM" in KiB, "Threads" a count. Throws
// std::runtime_error when the field is not there.
std::uint64_t status_field(pid_t pid, std::string_view name);

// The resident set (VmRSS) in bytes.
std::uint64_t rss_bytes(pid_t pid);

// Open file descriptors of a process (entries of /proc/PID/fd).
std::size_t open_fds(pid_t pid);

// The "model name" of /proc/cpuinfo; "unknown" when there is none.
std::string cpu_model();

// The 1, 5 and 15 minute load averages of /proc/loadavg, as "0.12 0.34 0.56".
std::string load_average();

}  // namespace sb::test
