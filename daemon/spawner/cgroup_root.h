// spawner.cgroup_root: which cgroup v2 directory the spawner puts its workers under, found and
// checked before anything starts, so a wrong value is a configuration error (exit 78, which the
// unit does not restart) and not a daemon that exits 69 every RestartSec for ever.
//
// Where cgroup v2 lives depends on the host's layout:
//   unified  cgroup2 mounted at /sys/fs/cgroup (Debian >= 11, RHEL >= 9); the unit's delegated
//            cgroup is /sys/fs/cgroup/system.slice/elasticd.service;
//   hybrid   v1 controllers under /sys/fs/cgroup/<controller> and cgroup2 (no controllers) at
//            /sys/fs/cgroup/unified; the delegated cgroup is
//            /sys/fs/cgroup/unified/system.slice/elasticd.service;
//   legacy   v1 only: no cgroup2 at all, so no cgroup_root (process groups only).
// "auto" takes the daemon's own cgroup: the "0::" line of /proc/self/cgroup under the cgroup2
// mount of /proc/self/mountinfo (relative to that mount's root, so a cgroup namespace or a
// bind-mounted subtree resolves too). Under the unit (Delegate=yes) that is the unit's cgroup
// whatever the layout; the root cgroup (a daemon started outside any service manager) is refused.
//
// Errors: one sentence without the key (callers prefix "spawner.cgroup_root" and its source),
// e.g. "'/sys/fs/cgroup/system.slice/elasticd.service' is not a writable cgroup v2 directory:
// No such file or directory; this host mounts cgroup v2 at /sys/fs/cgroup/unified (hybrid
// layout): use \"auto\" or a path below it". Thread safety: plain functions; they read /proc and
// statfs() only.
#pragma once

#include <string>
#include <string_view>

#include "daemon/core/result.h"

namespace elastic::spawner {

inline constexpr std::string_view kCgroupRootAuto = "auto";

// The cgroup v2 hierarchy as this process sees it.
struct CgroupLayout {
  std::string mount;    // the cgroup2 mount point; "" = none (a v1-only host)
  bool hybrid = false;  // cgroup v1 hierarchies are mounted as well
  // This process's cgroup v2 directory (under `mount`); "" = not visible under it.
  std::string own;
  bool own_is_root = false;  // `own` is the mount's root (no service manager put us anywhere)
  // "unified", "hybrid" or "legacy", for messages.
  std::string name() const;
};

// Pure: the layout from the texts of /proc/self/mountinfo and /proc/self/cgroup. Never fails;
// what is missing stays "".
CgroupLayout parse_cgroup_layout(std::string_view mountinfo, std::string_view proc_self_cgroup);

// The layout of this process (reads the two files; unreadable files mean "none").
CgroupLayout this_process_cgroup_layout();

// The directory the spawner uses for `configured`: "" stays "" (no cgroups); "auto" becomes
// layout.own; a path is taken as written. The result must be a writable cgroup v2 directory.
Result<std::string> resolve_cgroup_root(const std::string& configured, const CgroupLayout& layout);

// For `elasticd --check-config`, which runs in the caller's cgroup and not the unit's: a path
// gets resolve_cgroup_root's checks; "auto" only needs a cgroup2 mount. Returns one line saying
// what the daemon will use, e.g. "auto: the daemon's own cgroup under /sys/fs/cgroup/unified
// (hybrid layout)".
Result<std::string> check_cgroup_root(const std::string& configured, const CgroupLayout& layout);

}  // namespace elastic::spawner
