// Reading a file of a job the way the job's user would. elasticd runs as root, but some paths it
// reads are chosen by a user (a job's checkpoint_root): opened with root's rights, a symlink
// anywhere in such a path (or a directory the user may not enter) would show the daemon, and
// through it the user, what only root may read. So the open happens with the user's file-system
// identity: its fsuid and fsgid and its supplementary groups, which also takes away root's
// capabilities to override file permissions (the kernel drops CAP_DAC_OVERRIDE and friends
// from the effective set while the fsuid is not 0). Every permission the kernel checks on the
// way (search on each directory, read on the file, symlinks, ACLs, LSMs) is then the user's.
//
// How: setgroups/setfsgid/setfsuid as raw system calls, which the kernel applies to the calling
// thread only (glibc's setgroups() would change every thread of the daemon), around the open(),
// restored before returning; the open file is read after the restore. Such a change also marks
// the process non-dumpable; the previous setting is put back. A daemon that is not root reads
// only as itself (its jobs run as its own uid). Nothing is created or written.
//
// Thread safety: safe from any thread; the identity of the calling thread changes only for the
// duration of one open(). A restore that fails (which the kernel does not do for root) aborts:
// the thread would otherwise go on with the user's identity.
// Errors: Result with one sentence naming the path and the reason (permission, not a regular
// file, a symlink, the daemon's securebits keeping capabilities, ...).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "daemon/core/result.h"
#include "daemon/spawner/spawner.h"

namespace elastic::spawner {

struct FileBytes {
  std::string bytes;          // at most the max_bytes asked for
  std::int64_t mtime_ms = 0;  // the file's modification time, ms since the epoch
};

// Reads up to `max_bytes` of the regular file `path` as `user` would. The last component is
// opened without following a symlink and without blocking (a FIFO planted there must not hang
// the daemon); symlinks before it are followed with the user's rights only.
Result<FileBytes> read_file_as(const RunAs& user, const std::string& path, std::size_t max_bytes);

// The supplementary groups `user` gets when a process runs as it: getgrouplist() of its name
// with its gid, or just its gid when the name is empty.
std::vector<gid_t> supplementary_groups(const RunAs& user);

}  // namespace elastic::spawner
