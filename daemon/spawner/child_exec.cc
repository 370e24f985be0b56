#include "daemon/spawner/child_exec.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/close_range.h>
#include <linux/mempolicy.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "daemon/spawner/posix_files.h"
#include "daemon/spawner/read_as_user.h"

namespace elastic::spawner {
namespace {

// Bounds on what one spawn may ask for, so a hostile or mistaken index cannot make us allocate
// a huge mask; far above any real host.
constexpr unsigned kMaxCpuIndex = 1 << 16;
constexpr unsigned kMaxNodeIndex = 1 << 12;

// The argv[0] candidates execvp would try, computed before fork (getenv and malloc are not
// async-signal-safe in the child).
std::vector<std::string> exec_candidates(const std::string& file,
                                         const std::map<std::string, std::string>& env) {
  if (file.find('/') != std::string::npos) return {file};
  const auto path_it = env.find("PATH");
  const std::string path =
      path_it != env.end() ? path_it->second : std::string("/usr/local/bin:/usr/bin:/bin");
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const auto colon = path.find(':', start);
    std::string dir = path.substr(start, colon == std::string::npos ? colon : colon - start);
    if (dir.empty()) dir = ".";
    out.push_back(dir + "/" + file);
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return out;
}

// In the child: report the failed step to the parent and end.
[[noreturn]] void die(int report, ChildStep step, int error) {
  const ChildFailure failure{static_cast<int>(step), error};
  ssize_t ignored = ::write(report, &failure, sizeof failure);
  (void)ignored;
  ::_exit(127);
}

}  // namespace

void sort_unique(std::vector<unsigned>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

Status plan_child(const WorkerSpec& spec, ChildPlan* plan) {
  // Who the worker runs as.
  const uid_t my_uid = ::geteuid();
  const gid_t my_gid = ::getegid();
  plan->uid = my_uid;
  plan->gid = my_gid;
  if (spec.run_as) {
    const auto& as = *spec.run_as;
    if (my_uid == 0) {
      plan->switch_user = true;
      plan->groups = supplementary_groups(as);
    } else if (as.uid != my_uid || as.gid != my_gid) {
      return Error{"the daemon runs as uid " + std::to_string(my_uid) +
                   " and cannot start workers as uid " + std::to_string(as.uid) + " (gid " +
                   std::to_string(as.gid) + "); run elasticd as root to run jobs as their users."};
    }
    plan->uid = as.uid;
    plan->gid = as.gid;
  }

  // Bindings.
  plan->cpus = spec.cpus;
  plan->nodes = spec.mem_nodes;
  sort_unique(plan->cpus);
  sort_unique(plan->nodes);
  const auto& cpus = plan->cpus;
  const auto& nodes = plan->nodes;
  if (!cpus.empty() && cpus.back() >= kMaxCpuIndex) {
    return Error{"cpu index " + std::to_string(cpus.back()) + " is out of range."};
  }
  if (!nodes.empty() && nodes.back() >= kMaxNodeIndex) {
    return Error{"NUMA node index " + std::to_string(nodes.back()) + " is out of range."};
  }
  if (!cpus.empty()) {
    plan->cpu_set.reset(CPU_ALLOC(cpus.back() + 1));
    plan->cpu_set_size = CPU_ALLOC_SIZE(cpus.back() + 1);
    CPU_ZERO_S(plan->cpu_set_size, plan->cpu_set.get());
    for (unsigned c : cpus) CPU_SET_S(c, plan->cpu_set_size, plan->cpu_set.get());
  }
  constexpr unsigned kBitsPerWord = 8 * sizeof(unsigned long);
  if (!nodes.empty()) {
    plan->node_mask.assign(nodes.back() / kBitsPerWord + 1, 0);
    for (unsigned n : nodes) plan->node_mask[n / kBitsPerWord] |= 1UL << (n % kBitsPerWord);
    // The kernel reads maxnode - 1 bits (as libnuma passes it).
    plan->node_mask_bits = plan->node_mask.size() * kBitsPerWord + 1;
  }

  // argv, envp and the exec candidates as C arrays.
  plan->argv_strings = spec.argv;
  for (auto& s : plan->argv_strings) plan->argv.push_back(s.data());
  plan->argv.push_back(nullptr);
  for (const auto& [k, v] : spec.env) {
    if (k != kWorkerChannelVariable) plan->env_strings.push_back(k + "=" + v);
  }
  if (spec.channel) {
    plan->env_strings.push_back(std::string(kWorkerChannelVariable) + "=" +
                                std::to_string(kWorkerChannelFd));
  }
  for (auto& s : plan->env_strings) plan->envp.push_back(s.data());
  plan->envp.push_back(nullptr);
  plan->candidates = exec_candidates(spec.argv[0], spec.env);
  for (const auto& c : plan->candidates) plan->candidate_ptrs.push_back(c.c_str());
  plan->working_dir = spec.working_dir.empty() ? "/" : spec.working_dir;
  return ok_status();
}

pid_t fork_child(const ChildPlan& plan, int* fork_error) {
  // Block every signal across fork, so no handler of the daemon runs in the child before the
  // child has reset the dispositions to their defaults.
  sigset_t all_signals, old_mask, empty_mask;
  ::sigfillset(&all_signals);
  ::sigemptyset(&empty_mask);
  ::pthread_sigmask(SIG_SETMASK, &all_signals, &old_mask);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) exec_child(plan, parent, empty_mask);
  *fork_error = errno;
  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  return pid;
}

void exec_child(const ChildPlan& plan, pid_t parent, const sigset_t& no_signals) {
  int report = plan.report_write;
  if (::setpgid(0, 0) != 0) die(report, ChildStep::kSetpgid, errno);
  if (!plan.cgroup_procs.empty()) {
    const int fd = ::open(plan.cgroup_procs.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) die(report, ChildStep::kCgroup, errno);
    if (::write(fd, "0", 1) != 1) die(report, ChildStep::kCgroup, errno);
    ::close(fd);
  }
  if (plan.cpu_set != nullptr &&
      ::sched_setaffinity(0, plan.cpu_set_size, plan.cpu_set.get()) != 0) {
    die(report, ChildStep::kCpus, errno);
  }
  if (!plan.node_mask.empty() &&
      ::syscall(SYS_set_mempolicy, MPOL_BIND, plan.node_mask.data(), plan.node_mask_bits) != 0) {
    die(report, ChildStep::kMemory, errno);
  }
  if (plan.switch_user) {
    if (::setgroups(plan.groups.size(), plan.groups.data()) != 0) {
      die(report, ChildStep::kSetgroups, errno);
    }
    if (::setgid(plan.gid) != 0) die(report, ChildStep::kSetgid, errno);
    if (::setuid(plan.uid) != 0) die(report, ChildStep::kSetuid, errno);
  }
  // Armed only now: the kernel clears the parent-death signal on every change of euid, egid,
  // fsuid or fsgid, so armed before setuid it would end root's workers only, and every other
  // user's worker would train on as an orphan after a kill -9 of the daemon. A daemon that
  // died before this point is caught by the parent check (its child was reparented).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);
  if (::chdir(plan.working_dir.c_str()) != 0) die(report, ChildStep::kChdir, errno);
  if (::dup2(plan.dev_null, STDIN_FILENO) < 0 || ::dup2(plan.log_write, STDOUT_FILENO) < 0 ||
      ::dup2(plan.log_write, STDERR_FILENO) < 0) {
    die(report, ChildStep::kStdio, errno);
  }
  // The descriptors the worker keeps go above 4 first, so that placing the hand-off pipe at 3
  // and the channel at 4 cannot overwrite one of them (or the report pipe).
  constexpr int kFirstFree = kWorkerChannelFd + 1;
  if (report < kFirstFree) {
    report = ::fcntl(report, F_DUPFD_CLOEXEC, kFirstFree);
    if (report < 0) ::_exit(127);
  }
  int handoff_read = plan.handoff_read;
  if (handoff_read >= 0 && handoff_read < kFirstFree) {
    handoff_read = ::fcntl(handoff_read, F_DUPFD_CLOEXEC, kFirstFree);
    if (handoff_read < 0) die(report, ChildStep::kStdio, errno);
  }
  int channel = plan.channel;
  if (channel >= 0 && channel < kFirstFree) {
    channel = ::fcntl(channel, F_DUPFD_CLOEXEC, kFirstFree);
    if (channel < 0) die(report, ChildStep::kChannel, errno);
  }
  // Nothing of the daemon's leaks into the worker, whatever flags its fds were opened with.
  ::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
  // dup2 leaves the new descriptor without close-on-exec: these two survive exec.
  if (handoff_read >= 0 && ::dup2(handoff_read, kHandoffFd) < 0) {
    die(report, ChildStep::kStdio, errno);
  }
  if (channel >= 0 && ::dup2(channel, kWorkerChannelFd) < 0) {
    die(report, ChildStep::kChannel, errno);
  }
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &default_action, nullptr);
  ::sigprocmask(SIG_SETMASK, &no_signals, nullptr);
  int exec_error = ENOENT;
  bool saw_eacces = false;
  for (const char* candidate : plan.candidate_ptrs) {
    ::execve(candidate, plan.argv.data(), plan.envp.data());
    exec_error = errno;
    if (exec_error == EACCES) {
      saw_eacces = true;
    } else if (exec_error != ENOENT && exec_error != ENOTDIR && exec_error != ESTALE &&
               exec_error != ENODEV && exec_error != ETIMEDOUT) {
      break;  // as execvp: a real error with an existing file ends the search
    }
  }
  // As execvp: a candidate that exists but may not be executed beats "not found".
  die(report, ChildStep::kExec, saw_eacces && exec_error == ENOENT ? EACCES : exec_error);
}

bool read_child_failure(int report_read, ChildFailure* failure) {
  *failure = ChildFailure{0, 0};
  std::size_t got = 0;
  while (got < sizeof *failure) {
    const ssize_t n =
        ::read(report_read, reinterpret_cast<char*>(failure) + got, sizeof *failure - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  return got != 0;
}

std::string describe_child_failure(const ChildFailure& failure, const ChildPlan& plan,
                                   const WorkerSpec& spec) {
  std::string step;
  switch (static_cast<ChildStep>(failure.step)) {
    case ChildStep::kSetpgid:
      step = "setpgid";
      break;
    case ChildStep::kCgroup:
      step = "joining the cgroup " + plan.cgroup;
      break;
    case ChildStep::kCpus:
      step = "binding to cpus " + format_index_list(plan.cpus);
      break;
    case ChildStep::kMemory:
      step = "binding memory to NUMA nodes " + format_index_list(plan.nodes);
      break;
    case ChildStep::kSetgroups:
      step = "setting the supplementary groups of " +
             (spec.run_as->user.empty() ? "gid " + std::to_string(spec.run_as->gid)
                                        : "user '" + spec.run_as->user + "'");
      break;
    case ChildStep::kSetgid:
      step = "setgid(" + std::to_string(spec.run_as->gid) + ")";
      break;
    case ChildStep::kSetuid:
      step = "setuid(" + std::to_string(spec.run_as->uid) + ")";
      break;
    case ChildStep::kChdir:
      step = "changing to the working directory '" + plan.working_dir + "'";
      break;
    case ChildStep::kStdio:
      step = "redirecting stdin/stdout/stderr";
      break;
    case ChildStep::kExec:
      step = "exec of '" + spec.argv[0] + "'";
      break;
    case ChildStep::kChannel:
      step = "passing the worker channel as fd " + std::to_string(kWorkerChannelFd);
      break;
    default:
      step = "an unknown step (" + std::to_string(failure.step) + ")";
      break;
  }
  return step + " failed: " + errno_text(failure.error) + ".";
}

}  // namespace elastic::spawner
