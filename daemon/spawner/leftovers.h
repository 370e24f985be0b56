// Leftovers: the workers and worker cgroups of an earlier elasticd that was killed hard (SIGKILL,
// OOM, a crash) while its workers ran. PR_SET_PDEATHSIG ends most of them, but not a worker
// that exec'd a set-user-ID command, nor a descendant that left its process group; these are
// ended when the next daemon starts (Spawner::open).
//
// Worker records: every running worker has a file <state_dir>/workers/<pid> holding
// "<pgid> <start time>\n" (start time = field 22 of /proc/<pid>/stat, clock ticks since boot),
// written after the worker's exec and removed when it is reaped. A record is acted on only
// while its pid runs with the same start time, so a pid the kernel has reused is never killed.
//
// Worker cgroups: <cgroup_root>/w-<daemon pid>-<worker id>. One whose daemon pid no longer runs,
// or is this process's own pid (an earlier daemon that had the same pid, as in a fresh PID
// namespace: this one has not started any worker yet), is killed (cgroup.kill) and removed.
//
// Thread safety: plain functions on files and /proc, none shared. Errors: Result with one
// complete sentence naming the path.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "daemon/core/result.h"

namespace elastic::spawner {

// <cgroup_root>/w-<daemon_pid>-<id>: the cgroup of worker `id` of the daemon `daemon_pid`.
std::string worker_cgroup_path(const std::string& cgroup_root, pid_t daemon_pid, std::uint64_t id);

// Writes the record of the running worker `pid` (the leader of process group `pid`). Returns
// the record's path, or "recording the worker in <path> failed: <strerror>." (ESRCH when the
// process is gone already); a failed write leaves no record behind.
Result<std::string> record_worker(const std::string& state_dir, pid_t pid);

// Creates <state_dir>/workers (0755) when missing, SIGKILLs the process group and the pid of
// every record that names a still running process (same start time), and deletes every record.
// Returns how many workers it ended.
Result<std::size_t> end_leftover_workers(const std::string& state_dir);

// Kills and removes the leftover worker cgroups under `cgroup_root` (see above; `self_pid` is
// this daemon's pid); returns those that could not be removed yet (their processes are still
// dying). An unreadable `cgroup_root` is nothing to do.
std::vector<std::string> end_leftover_cgroups(const std::string& cgroup_root, pid_t self_pid);

}  // namespace elastic::spawner
