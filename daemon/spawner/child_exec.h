// The child side of Spawner::spawn: what a worker's process does between fork() and exec().
//
// Why so little may happen there: elasticd is multi-threaded (ZeroMQ's I/O threads, spdlog),
// and fork() copies only the calling thread. A lock that another thread held at that moment
// (malloc's, stdio's, the logger's, the dynamic loader's) stays locked in the child for ever,
// so until exec the child may call only async-signal-safe functions (signal-safety(7)): system
// calls on memory that exists already. No malloc or new (no std::string, no vector growth, no
// lambda that allocates), no getenv, no stdio or spdlog, no exceptions. Therefore everything the
// child uses is computed before fork into a ChildPlan: argv and envp as C arrays, the exec
// candidates (execvp would search PATH itself, with getenv and malloc), the cpu set, the NUMA
// node mask, the supplementary groups (getgrouplist reads files), the cgroup.procs path and the
// descriptors it inherits.
//
// What the child does, in this order (exec_child); a step that fails writes a ChildFailure
// {step, errno} into the close-on-exec report pipe and _exit(127)s, so the parent reads either
// that or end of file (the exec succeeded and closed the pipe):
//   1. setpgid(0, 0): its own process group, the unit stop() and kill() signal.
//   2. writes "0" to <cgroup>/cgroup.procs (when a cgroup is planned): joined before anything
//      runs as the user, so nothing it starts can be outside.
//   3. sched_setaffinity, 4. set_mempolicy(MPOL_BIND), while it still has the daemon's rights.
//   5. setgroups, setgid, setuid (when it switches user): groups first, since after setuid the
//      child may no longer change them.
//   6. PR_SET_PDEATHSIG(SIGKILL) only now, because the kernel clears it on every change of
//      credentials: armed before setuid it would cover root's workers only. Then getppid() must
//      still be the daemon (a daemon that died before this point left an orphan: _exit).
//   7. chdir to the working directory; 8. stdin from /dev/null, stdout and stderr into the log
//      pipe.
//   9. The report pipe, the hand-off pipe and the channel are moved above fd 4 (when they are
//      at 3 or 4), so placing one cannot overwrite another.
//  10. close_range(3, ~0, CLOSE_RANGE_CLOEXEC): no other descriptor of the daemon (sockets,
//      the Raft files, whatever flags they were opened with) survives exec, while the report
//      pipe stays open until exec succeeds. Then, without close-on-exec, the hand-off pipe's
//      read end becomes fd 3 (kHandoffFd) and the worker's end of its channel fd 4
//      (kWorkerChannelFd), each only when planned.
//  11. Default disposition for every signal, then an empty signal mask: the parent blocks every
//      signal across fork (fork_child), so no handler of the daemon runs in the child.
//  12. execve of each candidate in turn, with execvp's rules for which errors go on searching.
//
// Thread safety: fork_child may be called from one thread at a time (the Spawner's); the
// PR_SET_PDEATHSIG of the child is tied to that thread (see spawner.h).
#pragma once

#include <sched.h>
#include <signal.h>
#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "daemon/core/result.h"
#include "daemon/spawner/spawner.h"

namespace elastic::spawner {

// Which step of the child failed; sent with errno through the report pipe.
enum class ChildStep : int {
  kSetpgid = 1,
  kCgroup,
  kCpus,
  kMemory,
  kSetgroups,
  kSetgid,
  kSetuid,
  kChdir,
  kStdio,
  kExec,
  kChannel,
};

struct ChildFailure {
  int step;
  int error;
};

// Everything the child reads, made before fork. The char* arrays point into the strings next to
// them, so a plan is neither copied nor moved: make it where it is used.
struct ChildPlan {
  ChildPlan() = default;
  ChildPlan(const ChildPlan&) = delete;
  ChildPlan& operator=(const ChildPlan&) = delete;

  std::vector<std::string> argv_strings;
  std::vector<char*> argv;  // null-terminated
  std::vector<std::string> env_strings;
  std::vector<char*> envp;              // null-terminated
  std::vector<std::string> candidates;  // the paths execvp would try for argv[0]
  std::vector<const char*> candidate_ptrs;
  std::string working_dir;  // never ""

  bool switch_user = false;  // setgroups/setgid/setuid to the following
  std::vector<gid_t> groups;
  uid_t uid = 0;  // the worker's uid and gid (the daemon's own when it does not switch)
  gid_t gid = 0;

  std::vector<unsigned> cpus;   // sorted, unique; empty = unbound
  std::vector<unsigned> nodes;  // sorted, unique; empty = unbound
  struct CpuSetFree {
    void operator()(cpu_set_t* set) const { CPU_FREE(set); }
  };
  std::unique_ptr<cpu_set_t, CpuSetFree> cpu_set;  // null = unbound
  std::size_t cpu_set_size = 0;
  std::vector<unsigned long> node_mask;  // empty = unbound
  unsigned long node_mask_bits = 0;

  // Set by the Spawner once the cgroup and pipes exist. The descriptors stay the Spawner's.
  std::string cgroup;        // "" = none
  std::string cgroup_procs;  // <cgroup>/cgroup.procs
  int dev_null = -1;
  int log_write = -1;
  int report_write = -1;
  int handoff_read = -1;  // -1 = no hand-off pipe
  int channel = -1;       // the worker's end of its channel socket; -1 = none
};

// Fills `plan` from `spec` (the exec part, the user, the bindings; the environment gets
// kWorkerChannelVariable=kWorkerChannelFd when spec.channel and loses that variable otherwise).
// An Error is a sentence without the "cannot start <label>: " prefix: a user the daemon cannot
// switch to (it is not root), a cpu or NUMA node index out of range.
Status plan_child(const WorkerSpec& spec, ChildPlan* plan);

// Sorts `v` and drops repeats (cpu and NUMA node lists; format_index_list too).
void sort_unique(std::vector<unsigned>& v);

// Forks with every signal blocked; the child runs exec_child and never returns. Returns the
// child's pid, or -1 with *fork_error set.
pid_t fork_child(const ChildPlan& plan, int* fork_error);

// The child, after fork (see the steps above): only async-signal-safe calls. `parent` is the
// daemon's pid, `no_signals` an empty signal set (both made before fork).
[[noreturn]] void exec_child(const ChildPlan& plan, pid_t parent, const sigset_t& no_signals);

// Reads the child's report until end of file: true with *failure when the child wrote one (it
// failed and exited), false when its exec succeeded.
bool read_child_failure(int report_read, ChildFailure* failure);

// "<step> failed: <strerror>." for a failure of the child of `spec` planned as `plan`.
std::string describe_child_failure(const ChildFailure& failure, const ChildPlan& plan,
                                   const WorkerSpec& spec);

}  // namespace elastic::spawner
