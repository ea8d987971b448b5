#pragma once
// The process groups of running tool processes, written down in a directory of the data
// directory, so that the next server started on it can stop what a server killed with SIGKILL
// left running. PR_SET_PDEATHSIG (see process_spawn.cpp) takes each tool's own process with the
// server, but not what that process started (`sleep 100 &` under `bash -c`): those stay in the
// tool's process group, which the next start stops.
//
// One file per group, named by its id (the leader's pid), holding the boot id, the leader's start
// time (/proc/PID/stat, field 22) and a random token as "BOOT_ID START TOKEN\n". The tool's process
// gets the token in its environment (kToolGroupVariable), which everything it starts inherits;
// the next start kills only processes of the group that carry it. A group id reused by an
// unrelated process (whose group may have lost its leader and hold only younger processes) is
// left alone, in this boot or after a reboot.
//
// Plain functions on the file system; they may be called from any thread. No fsync: the
// records matter only until the next start, and a crash of the machine ends the groups anyway.
#include <sys/types.h>

#include <cstddef>
#include <filesystem>
#include <string>

#include "util/error.hpp"

namespace sb::tool {

// `data_dir`/tool-processes.
std::filesystem::path process_group_dir(const std::filesystem::path& data_dir);

// The environment variable that marks a recorded tool's processes, and a new token for it.
inline constexpr const char* kToolGroupVariable = "SWITCHBOARD_TOOL_GROUP";
std::string new_group_token();

// Writes down the group whose leader is the running child `pgid`, started with `token` in
// kToolGroupVariable (creating `dir` when needed).
Result<void> record_process_group(const std::filesystem::path& dir, pid_t pgid,
                                  const std::string& token);

// Removes the record: the group is no longer ours to stop (its leader is about to be reaped).
void forget_process_group(const std::filesystem::path& dir, pid_t pgid);

// Sends SIGKILL to every process of a group recorded in `dir` that carries the record's token (in
// the same boot), then removes every record. Logs each group it stops and returns how many. For the
// start of a server, while the data directory is its alone.
std::size_t stop_recorded_process_groups(const std::filesystem::path& dir);

}  // namespace sb::tool
