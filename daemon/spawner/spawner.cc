#include "daemon/spawner/spawner.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/close_range.h>
#include <linux/mempolicy.h>
#include <sched.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <limits>
#include <sstream>
#include <utility>

#include "daemon/spawner/cgroup_root.h"
#include "daemon/spawner/read_as_user.h"

namespace elastic::spawner {
namespace {

// Bounds on what one spawn may ask for, so a hostile or mistaken index cannot make us allocate
// a huge mask; far above any real host.
constexpr unsigned kMaxCpuIndex = 1 << 16;
constexpr unsigned kMaxNodeIndex = 1 << 12;
// Bytes read from one worker's pipe per process() call, so one chatty worker cannot starve the
// loop; the epoll set stays readable and the next call continues.
constexpr std::size_t kPumpBudget = 1 << 20;
// Bytes read from the pipe of an exited worker before the exit is reported. Bounded because a
// descendant that escaped the group kill could keep writing forever.
constexpr std::size_t kFinalDrainBudget = 16 << 20;
// How often process() retries removing a worker cgroup whose processes are still dying.
constexpr Duration kCgroupRetry = std::chrono::milliseconds(50);
// After a worker exit, its group members die asynchronously and, adopted through the subreaper,
// become our zombies without waking the epoll set; process() sweeps for them this often for
// this long after each exit.
constexpr Duration kOrphanSweepEvery = std::chrono::milliseconds(50);
constexpr Duration kOrphanSweepFor = std::chrono::seconds(2);
// shutdown(): how long to wait for SIGKILLed workers to be reaped before giving up on them
// (a process stuck in uninterruptible sleep); their records let the next open() end them.
constexpr Duration kShutdownKillWait = std::chrono::seconds(5);

// Which step of the child failed; sent with errno through the CLOEXEC pipe.
enum class Step : int {
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
};

struct ChildFailure {
  int step;
  int error;
};

std::string errno_text(int error) { return std::strerror(error); }

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// "2026-11-26T21:47:31.123Z ": the wall time, to the millisecond, that starts each line of
// worker output (SpawnerConfig::log_timestamps).
std::string output_stamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()) %
                  std::chrono::seconds(1);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[40];
  const std::size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%03dZ ", static_cast<int>(ms.count()));
  return buf;
}

std::string daemon_line(std::string_view line) {
  std::string out = "[elasticd " + utc_now() + "] ";
  out.append(line);
  out.push_back('\n');
  return out;
}

// mkdir -p with mode 0755 for each directory it creates.
bool make_dirs(const std::string& dir, int* error) {
  if (dir.empty()) return true;
  std::string partial;
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    partial = dir.substr(0, pos);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      *error = errno;
      return false;
    }
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    *error = errno;
    return false;
  }
  if (!S_ISDIR(st.st_mode)) {
    *error = ENOTDIR;
    return false;
  }
  return true;
}

std::string parent_dir(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return "";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

bool write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

bool write_file(const std::string& path, std::string_view content, int* error) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = errno;
    return false;
  }
  const bool ok = write_all(fd, content.data(), content.size());
  if (!ok) *error = errno;
  ::close(fd);
  return ok;
}

std::optional<std::string> read_small_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buf[4096];
  while (out.size() < (1 << 16)) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

template <typename T>
std::optional<T> parse_number(std::string_view text) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

struct ProcStat {
  pid_t pgid = 0;
  std::uint64_t start_time = 0;
};

// Fields 5 (pgrp) and 22 (starttime) of /proc/<pid>/stat; the command name (field 2) may hold
// spaces and parentheses, so fields are counted after its last ')'.
std::optional<ProcStat> read_proc_stat(pid_t pid) {
  const auto text = read_small_file("/proc/" + std::to_string(pid) + "/stat");
  if (!text) return std::nullopt;
  const auto close = text->rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(text->substr(close + 1));
  std::vector<std::string> fields;  // fields[0] is field 3
  std::string field;
  while (rest >> field && fields.size() < 20) fields.push_back(field);
  if (fields.size() < 20) return std::nullopt;
  const auto pgid = parse_number<pid_t>(fields[2]);
  const auto start = parse_number<std::uint64_t>(fields[19]);
  if (!pgid || !start) return std::nullopt;
  return ProcStat{*pgid, *start};
}

void sort_unique(std::vector<unsigned>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

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

void cgroup_kill(const std::string& cgroup) {
  int error = 0;
  // ENOENT: the kernel predates cgroup.kill (< 5.14); the process-group kill still runs.
  (void)write_file(cgroup + "/cgroup.kill", "1", &error);
}

}  // namespace

std::string format_index_list(std::vector<unsigned> indices) {
  sort_unique(indices);
  std::string out;
  for (std::size_t i = 0; i < indices.size();) {
    std::size_t j = i;
    while (j + 1 < indices.size() && indices[j + 1] == indices[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(indices[i]);
    if (j > i) out += "-" + std::to_string(indices[j]);
    i = j + 1;
  }
  return out;
}

std::string WorkerExit::describe() const {
  if (!signaled) return "exited with status " + std::to_string(status);
  const char* abbrev = ::sigabbrev_np(status);
  return "killed by signal " + std::to_string(status) +
         (abbrev != nullptr ? " (SIG" + std::string(abbrev) + ")" : std::string());
}

// One open log file, shared by the workers that write to the same path.
struct Spawner::LogFile {
  std::string path;
  int fd = -1;
  std::uint64_t size = 0;
  bool at_line_start = true;
  bool warned = false;

  ~LogFile() {
    if (fd >= 0) ::close(fd);
  }

  void rotate(int keep) {
    if (keep <= 0) {
      if (::ftruncate(fd, 0) != 0) warn("truncate", errno);
      size = 0;
      return;
    }
    for (int i = keep - 1; i >= 1; --i) {
      const std::string from = path + "." + std::to_string(i);
      const std::string to = path + "." + std::to_string(i + 1);
      if (::rename(from.c_str(), to.c_str()) != 0 && errno != ENOENT) warn("rotate", errno);
    }
    if (::rename(path.c_str(), (path + ".1").c_str()) != 0) warn("rotate", errno);
    const int fresh = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fresh < 0) {
      warn("reopen", errno);  // keep writing into the rotated file rather than losing output
      return;
    }
    ::close(fd);
    fd = fresh;
    size = 0;
  }

  void append(const char* data, std::size_t n, std::uint64_t max_bytes, int keep) {
    if (n == 0) return;
    at_line_start = data[n - 1] == '\n';
    while (n > 0) {
      if (max_bytes > 0 && size > 0 && size + n > max_bytes) rotate(keep);
      const std::size_t chunk = max_bytes > 0 ? std::min<std::uint64_t>(n, max_bytes) : n;
      if (!write_all(fd, data, chunk)) {
        warn("write", errno);
        return;  // output is dropped rather than blocking the loop on a broken disk
      }
      size += chunk;
      data += chunk;
      n -= chunk;
    }
  }

  void warn(const char* what, int error) {
    if (warned) return;  // once per file, so a full disk does not flood the daemon log
    warned = true;
    spdlog::warn("spawner: cannot {} worker log {}: {}", what, path, errno_text(error));
  }
};

struct Spawner::Worker {
  Worker() = default;
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  ~Worker() {
    if (handoff_fd >= 0) ::close(handoff_fd);
  }
  WorkerId id = 0;
  std::string label;
  pid_t pid = -1;
  int pidfd = -1;
  int pipe_fd = -1;
  int handoff_fd = -1;  // write end of the hand-off pipe until hand_off()
  std::shared_ptr<LogFile> log;
  std::string cgroup;         // "" = none
  std::string record;         // "" = none
  bool at_line_start = true;  // its next output byte starts a line (gets a timestamp)
  bool stopped = false;
  TimePoint kill_at = kNever;
};

Spawner::Spawner(SpawnerConfig config) : config_(std::move(config)) {}

Result<std::unique_ptr<Spawner>> Spawner::open(SpawnerConfig config) {
  std::unique_ptr<Spawner> spawner(new Spawner(std::move(config)));
  if (auto status = spawner->init(); !status) return status.error();
  return spawner;
}

Status Spawner::init() {
  self_pid_ = ::getpid();
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    return Error{"cannot make the daemon a child subreaper: " + errno_text(errno) + "."};
  }
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) return Error{"cannot create the spawner's epoll set: " + errno_text(errno)};

  if (!config_.cgroup_root.empty()) {
    // "auto" becomes the daemon's own (delegated) cgroup; elasticd checked it before starting.
    auto root = resolve_cgroup_root(config_.cgroup_root, this_process_cgroup_layout());
    if (!root.ok()) return Error{"spawner.cgroup_root " + root.error().message + "."};
    config_.cgroup_root = *root;
    // Worker cgroups of daemons that are gone (named w-<daemon pid>-<id>).
    if (DIR* dir = ::opendir(config_.cgroup_root.c_str())) {
      while (const dirent* entry = ::readdir(dir)) {
        const std::string name = entry->d_name;
        if (name.rfind("w-", 0) != 0) continue;
        const auto dash = name.find('-', 2);
        const auto owner = parse_number<pid_t>(name.substr(2, dash - 2));
        if (!owner || (*owner != self_pid_ && ::kill(*owner, 0) == 0)) continue;
        const std::string path = config_.cgroup_root + "/" + name;
        cgroup_kill(path);
        if (::rmdir(path.c_str()) != 0) cgroups_to_remove_.push_back(path);
      }
      ::closedir(dir);
    }
    if (!cgroups_to_remove_.empty()) cgroup_retry_at_ = TimePoint{};
  }

  if (!config_.state_dir.empty()) {
    const std::string dir = config_.state_dir + "/workers";
    int error = 0;
    if (!make_dirs(dir, &error)) {
      return Error{"cannot create the worker record directory " + dir + ": " + errno_text(error) +
                   "."};
    }
    DIR* handle = ::opendir(dir.c_str());
    if (handle == nullptr) {
      return Error{"cannot read the worker record directory " + dir + ": " + errno_text(errno) +
                   "."};
    }
    std::vector<std::string> names;
    while (const dirent* entry = ::readdir(handle)) {
      if (entry->d_name[0] != '.') names.push_back(entry->d_name);
    }
    ::closedir(handle);
    for (const auto& name : names) {
      const std::string path = dir + "/" + name;
      const auto pid = parse_number<pid_t>(name);
      const auto content = read_small_file(path);
      if (pid && *pid > 0 && content) {
        std::istringstream in(*content);
        long long pgid = 0;
        unsigned long long start = 0;
        if (in >> pgid >> start && pgid > 0) {
          const auto now = read_proc_stat(*pid);
          // Same pid and same start time: the very process the record was written for.
          if (now && now->start_time == start) {
            ::kill(-static_cast<pid_t>(pgid), SIGKILL);
            ::kill(*pid, SIGKILL);
            ++leftovers_ended_;
          }
        }
      }
      ::unlink(path.c_str());
    }
    if (leftovers_ended_ > 0) {
      spdlog::warn("spawner: ended {} worker(s) left running by an earlier elasticd",
                   leftovers_ended_);
    }
  }
  return ok_status();
}

Spawner::~Spawner() {
  shutdown(Duration::zero());
  for (auto& [id, worker] : workers_) {
    // Only workers stuck in uninterruptible sleep get here; their records stay for open().
    if (worker->pidfd >= 0) ::close(worker->pidfd);
    if (worker->pipe_fd >= 0) ::close(worker->pipe_fd);
  }
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
}

std::shared_ptr<Spawner::LogFile> Spawner::open_log(const std::string& path, std::string* error) {
  if (auto it = logs_.find(path); it != logs_.end()) {
    if (auto shared = it->second.lock()) return shared;
  }
  int err = 0;
  const std::string dir = parent_dir(path);
  if (!make_dirs(dir, &err)) {
    *error = "creating the log directory " + dir + " failed: " + errno_text(err);
    return nullptr;
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = "opening the log file " + path + " failed: " + errno_text(errno);
    return nullptr;
  }
  auto log = std::make_shared<LogFile>();
  log->path = path;
  log->fd = fd;
  struct stat st {};
  if (::fstat(fd, &st) == 0) log->size = static_cast<std::uint64_t>(st.st_size);
  // Erase expired entries so the map does not grow with every job ever run.
  std::erase_if(logs_, [](const auto& entry) { return entry.second.expired(); });
  logs_[path] = log;
  return log;
}

Result<WorkerId> Spawner::spawn(TimePoint now, const WorkerSpec& spec) {
  (void)now;  // exits and deadlines are stamped by the caller's clock; spawning needs none
  const std::string prefix = "cannot start " + spec.label + ": ";
  if (spec.argv.empty() || spec.argv[0].empty()) return Error{prefix + "the command is empty."};
  if (spec.log_path.empty()) return Error{prefix + "no log file was given."};

  // Who the worker runs as.
  const uid_t my_uid = ::geteuid();
  const gid_t my_gid = ::getegid();
  bool switch_user = false;
  std::vector<gid_t> groups;
  if (spec.run_as) {
    const auto& as = *spec.run_as;
    if (my_uid == 0) {
      switch_user = true;
      groups = supplementary_groups(as);
    } else if (as.uid != my_uid || as.gid != my_gid) {
      return Error{prefix + "the daemon runs as uid " + std::to_string(my_uid) +
                   " and cannot start workers as uid " + std::to_string(as.uid) + " (gid " +
                   std::to_string(as.gid) + "); run elasticd as root to run jobs as their users."};
    }
  }
  const uid_t worker_uid = spec.run_as ? spec.run_as->uid : my_uid;

  // Bindings, computed before fork.
  std::vector<unsigned> cpus = spec.cpus;
  std::vector<unsigned> nodes = spec.mem_nodes;
  sort_unique(cpus);
  sort_unique(nodes);
  if (!cpus.empty() && cpus.back() >= kMaxCpuIndex) {
    return Error{prefix + "cpu index " + std::to_string(cpus.back()) + " is out of range."};
  }
  if (!nodes.empty() && nodes.back() >= kMaxNodeIndex) {
    return Error{prefix + "NUMA node index " + std::to_string(nodes.back()) + " is out of range."};
  }
  cpu_set_t* cpu_set = nullptr;
  std::size_t cpu_set_size = 0;
  if (!cpus.empty()) {
    cpu_set = CPU_ALLOC(cpus.back() + 1);
    cpu_set_size = CPU_ALLOC_SIZE(cpus.back() + 1);
    CPU_ZERO_S(cpu_set_size, cpu_set);
    for (unsigned c : cpus) CPU_SET_S(c, cpu_set_size, cpu_set);
  }
  struct CpuSetFree {
    cpu_set_t* set;
    ~CpuSetFree() {
      if (set != nullptr) CPU_FREE(set);
    }
  } cpu_set_free{cpu_set};
  constexpr unsigned kBitsPerWord = 8 * sizeof(unsigned long);
  std::vector<unsigned long> node_mask;
  unsigned long node_mask_bits = 0;
  if (!nodes.empty()) {
    node_mask.assign(nodes.back() / kBitsPerWord + 1, 0);
    for (unsigned n : nodes) node_mask[n / kBitsPerWord] |= 1UL << (n % kBitsPerWord);
    // The kernel reads maxnode - 1 bits (as libnuma passes it).
    node_mask_bits = node_mask.size() * kBitsPerWord + 1;
  }

  // argv, envp and the exec candidates as C arrays.
  std::vector<std::string> argv_strings = spec.argv;
  std::vector<char*> argv;
  for (auto& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : spec.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  const std::vector<std::string> candidates = exec_candidates(spec.argv[0], spec.env);
  std::vector<const char*> candidate_ptrs;
  for (const auto& c : candidates) candidate_ptrs.push_back(c.c_str());
  const std::string working_dir = spec.working_dir.empty() ? "/" : spec.working_dir;

  std::string log_error;
  std::shared_ptr<LogFile> log = open_log(spec.log_path, &log_error);
  if (!log) return Error{prefix + log_error + "."};
  auto fail = [&](const std::string& sentence) -> Error {
    const std::string line = daemon_line(sentence);
    if (!log->at_line_start) log->append("\n", 1, config_.log_max_bytes, config_.log_keep);
    log->append(line.data(), line.size(), config_.log_max_bytes, config_.log_keep);
    return Error{sentence};
  };

  const WorkerId id = next_id_++;
  std::string cgroup;
  std::string cgroup_procs;
  if (!config_.cgroup_root.empty()) {
    cgroup = config_.cgroup_root + "/w-" + std::to_string(self_pid_) + "-" + std::to_string(id);
    if (::mkdir(cgroup.c_str(), 0755) != 0 && errno != EEXIST) {
      return fail(prefix + "creating the cgroup " + cgroup + " failed: " + errno_text(errno) + ".");
    }
    cgroup_procs = cgroup + "/cgroup.procs";
  }
  auto drop_cgroup = [&] {
    if (!cgroup.empty()) ::rmdir(cgroup.c_str());
  };

  int log_pipe[2];
  if (::pipe2(log_pipe, O_CLOEXEC) != 0) {
    drop_cgroup();
    return fail(prefix + "creating the log pipe failed: " + errno_text(errno) + ".");
  }
  int report_pipe[2];
  if (::pipe2(report_pipe, O_CLOEXEC) != 0) {
    const int error = errno;
    ::close(log_pipe[0]);
    ::close(log_pipe[1]);
    drop_cgroup();
    return fail(prefix + "creating the report pipe failed: " + errno_text(error) + ".");
  }
  int handoff_pipe[2] = {-1, -1};
  if (spec.handoff && ::pipe2(handoff_pipe, O_CLOEXEC) != 0) {
    const int error = errno;
    for (int fd : {log_pipe[0], log_pipe[1], report_pipe[0], report_pipe[1]}) ::close(fd);
    drop_cgroup();
    return fail(prefix + "creating the hand-off pipe failed: " + errno_text(error) + ".");
  }
  const int dev_null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (dev_null < 0) {
    const int error = errno;
    for (int fd : {log_pipe[0], log_pipe[1], report_pipe[0], report_pipe[1], handoff_pipe[0],
                   handoff_pipe[1]}) {
      if (fd >= 0) ::close(fd);
    }
    drop_cgroup();
    return fail(prefix + "opening /dev/null failed: " + errno_text(error) + ".");
  }
  const int handoff_read = handoff_pipe[0];

  // Block every signal across fork, so no handler of the daemon runs in the child before the
  // child has reset the dispositions to their defaults.
  sigset_t all_signals, old_mask, empty_mask;
  ::sigfillset(&all_signals);
  ::sigemptyset(&empty_mask);
  ::pthread_sigmask(SIG_SETMASK, &all_signals, &old_mask);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Child: async-signal-safe calls only until exec.
    int report = report_pipe[1];
    auto die = [&report](Step step, int error) {
      const ChildFailure failure{static_cast<int>(step), error};
      ssize_t ignored = ::write(report, &failure, sizeof failure);
      (void)ignored;
      ::_exit(127);
    };
    if (::setpgid(0, 0) != 0) die(Step::kSetpgid, errno);
    if (!cgroup_procs.empty()) {
      const int fd = ::open(cgroup_procs.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0) die(Step::kCgroup, errno);
      if (::write(fd, "0", 1) != 1) die(Step::kCgroup, errno);
      ::close(fd);
    }
    if (cpu_set != nullptr && ::sched_setaffinity(0, cpu_set_size, cpu_set) != 0) {
      die(Step::kCpus, errno);
    }
    if (!node_mask.empty() &&
        ::syscall(SYS_set_mempolicy, MPOL_BIND, node_mask.data(), node_mask_bits) != 0) {
      die(Step::kMemory, errno);
    }
    if (switch_user) {
      if (::setgroups(groups.size(), groups.data()) != 0) die(Step::kSetgroups, errno);
      if (::setgid(spec.run_as->gid) != 0) die(Step::kSetgid, errno);
      if (::setuid(spec.run_as->uid) != 0) die(Step::kSetuid, errno);
    }
    // Armed only now: the kernel clears the parent-death signal on every change of euid, egid,
    // fsuid or fsgid, so armed before setuid it would end root's workers only, and every other
    // user's worker would train on as an orphan after a kill -9 of the daemon. A daemon that
    // died before this point is caught by the parent check (its child was reparented).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    if (::chdir(working_dir.c_str()) != 0) die(Step::kChdir, errno);
    if (::dup2(dev_null, STDIN_FILENO) < 0 || ::dup2(log_pipe[1], STDOUT_FILENO) < 0 ||
        ::dup2(log_pipe[1], STDERR_FILENO) < 0) {
      die(Step::kStdio, errno);
    }
    // The hand-off pipe becomes fd 3 (without close-on-exec), out of the report pipe's way.
    if (handoff_read >= 0) {
      if (report == kHandoffFd) {
        report = ::fcntl(report, F_DUPFD_CLOEXEC, kHandoffFd + 1);
        if (report < 0) ::_exit(127);
      }
      if (handoff_read == kHandoffFd) {
        if (::fcntl(kHandoffFd, F_SETFD, 0) != 0) die(Step::kStdio, errno);
      } else if (::dup2(handoff_read, kHandoffFd) < 0) {
        die(Step::kStdio, errno);
      }
    }
    // Nothing of the daemon's leaks into the worker, whatever flags its fds were opened with.
    ::syscall(SYS_close_range, handoff_read >= 0 ? unsigned{kHandoffFd} + 1 : 3U, ~0U,
              CLOSE_RANGE_CLOEXEC);
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &default_action, nullptr);
    ::sigprocmask(SIG_SETMASK, &empty_mask, nullptr);
    int exec_error = ENOENT;
    bool saw_eacces = false;
    for (const char* candidate : candidate_ptrs) {
      ::execve(candidate, argv.data(), envp.data());
      exec_error = errno;
      if (exec_error == EACCES) {
        saw_eacces = true;
      } else if (exec_error != ENOENT && exec_error != ENOTDIR && exec_error != ESTALE &&
                 exec_error != ENODEV && exec_error != ETIMEDOUT) {
        break;  // as execvp: a real error with an existing file ends the search
      }
    }
    // As execvp: a candidate that exists but may not be executed beats "not found".
    die(Step::kExec, saw_eacces && exec_error == ENOENT ? EACCES : exec_error);
  }
  const int fork_error = errno;
  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  ::close(log_pipe[1]);
  ::close(report_pipe[1]);
  ::close(dev_null);
  if (handoff_read >= 0) ::close(handoff_read);
  // From here on the write end belongs to whoever holds this guard (the Worker, once made).
  struct FdGuard {
    int fd;
    ~FdGuard() {
      if (fd >= 0) ::close(fd);
    }
  } handoff_write{handoff_pipe[1]};
  if (pid < 0) {
    ::close(log_pipe[0]);
    ::close(report_pipe[0]);
    drop_cgroup();
    return fail(prefix + "fork failed: " + errno_text(fork_error) + ".");
  }
  // Also in the parent, so a stop() right after spawn() finds the group whatever the order.
  ::setpgid(pid, pid);

  ChildFailure failure{0, 0};
  std::size_t got = 0;
  while (got < sizeof failure) {
    const ssize_t n =
        ::read(report_pipe[0], reinterpret_cast<char*>(&failure) + got, sizeof failure - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(report_pipe[0]);

  auto reap_child = [pid] {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  };
  if (got != 0) {
    ::close(log_pipe[0]);
    reap_child();
    drop_cgroup();
    std::string step;
    switch (static_cast<Step>(failure.step)) {
      case Step::kSetpgid:
        step = "setpgid";
        break;
      case Step::kCgroup:
        step = "joining the cgroup " + cgroup;
        break;
      case Step::kCpus:
        step = "binding to cpus " + format_index_list(cpus);
        break;
      case Step::kMemory:
        step = "binding memory to NUMA nodes " + format_index_list(nodes);
        break;
      case Step::kSetgroups:
        step = "setting the supplementary groups of " +
               (spec.run_as->user.empty() ? "gid " + std::to_string(spec.run_as->gid)
                                          : "user '" + spec.run_as->user + "'");
        break;
      case Step::kSetgid:
        step = "setgid(" + std::to_string(spec.run_as->gid) + ")";
        break;
      case Step::kSetuid:
        step = "setuid(" + std::to_string(spec.run_as->uid) + ")";
        break;
      case Step::kChdir:
        step = "changing to the working directory '" + working_dir + "'";
        break;
      case Step::kStdio:
        step = "redirecting stdin/stdout/stderr";
        break;
      case Step::kExec:
        step = "exec of '" + spec.argv[0] + "'";
        break;
      default:
        step = "an unknown step (" + std::to_string(failure.step) + ")";
        break;
    }
    return fail(prefix + step + " failed: " + errno_text(failure.error) + ".");
  }
  auto worker = std::make_unique<Worker>();
  worker->id = id;
  worker->label = spec.label;
  worker->pid = pid;
  worker->log = log;
  worker->cgroup = cgroup;
  worker->pipe_fd = log_pipe[0];
  if (handoff_write.fd >= 0) {
    worker->handoff_fd = std::exchange(handoff_write.fd, -1);
    ::fcntl(worker->handoff_fd, F_SETFL, ::fcntl(worker->handoff_fd, F_GETFL) | O_NONBLOCK);
    // Best effort: where the kernel refuses (pipe-max-size), hand_off() reports a payload that
    // does not fit.
    ::fcntl(worker->handoff_fd, F_SETPIPE_SZ, static_cast<int>(kMaxHandoffBytes));
  }
  auto abandon = [&](const std::string& sentence) -> Error {
    ::kill(-pid, SIGKILL);
    if (!cgroup.empty()) cgroup_kill(cgroup);
    ::close(log_pipe[0]);
    if (worker->pidfd >= 0) ::close(worker->pidfd);
    reap_child();
    drop_cgroup();
    return fail(prefix + sentence);
  };
  ::fcntl(worker->pipe_fd, F_SETFL, ::fcntl(worker->pipe_fd, F_GETFL) | O_NONBLOCK);
  worker->pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (worker->pidfd < 0) return abandon("pidfd_open failed: " + errno_text(errno) + ".");
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = id << 1;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, worker->pipe_fd, &event) != 0) {
    return abandon("watching the log pipe failed: " + errno_text(errno) + ".");
  }
  event.data.u64 = (id << 1) | 1;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, worker->pidfd, &event) != 0) {
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, worker->pipe_fd, nullptr);
    return abandon("watching the process failed: " + errno_text(errno) + ".");
  }
  if (!config_.state_dir.empty()) {
    const auto stat = read_proc_stat(pid);
    const std::string record = config_.state_dir + "/workers/" + std::to_string(pid);
    int error = ESRCH;
    if (!stat ||
        !write_file(record, std::to_string(pid) + " " + std::to_string(stat->start_time) + "\n",
                    &error)) {
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, worker->pipe_fd, nullptr);
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, worker->pidfd, nullptr);
      ::unlink(record.c_str());
      return abandon("recording the worker in " + record + " failed: " + errno_text(error) + ".");
    }
    worker->record = record;
  }

  std::string started = spec.label + ": started pid " + std::to_string(pid) + " as uid " +
                        std::to_string(worker_uid) + " in " + working_dir + ", cpus " +
                        (cpus.empty() ? "unbound" : format_index_list(cpus)) + ", mem nodes " +
                        (nodes.empty() ? "unbound" : format_index_list(nodes));
  if (!cgroup.empty()) started += ", cgroup " + cgroup;
  workers_.emplace(id, std::move(worker));
  note(id, started);
  return id;
}

Spawner::Worker* Spawner::find(WorkerId id) {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : it->second.get();
}

const Spawner::Worker* Spawner::find(WorkerId id) const {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : it->second.get();
}

std::optional<int> Spawner::pid(WorkerId id) const {
  const Worker* worker = find(id);
  if (worker == nullptr) return std::nullopt;
  return worker->pid;
}

Status Spawner::hand_off(WorkerId id, std::string_view payload, const std::string& label,
                         const std::string& log_path) {
  const std::string prefix = "cannot hand " + label + " to a started interpreter: ";
  Worker* worker = find(id);
  if (worker == nullptr) return Error{prefix + "it has exited."};
  if (worker->handoff_fd < 0) return Error{prefix + "it has no hand-off pipe (any more)."};
  if (payload.size() > kMaxHandoffBytes) {
    return Error{prefix + "the hand-off is " + std::to_string(payload.size()) +
                 " bytes, more than the limit of " + std::to_string(kMaxHandoffBytes) + "."};
  }
  std::string log_error;
  std::shared_ptr<LogFile> log = open_log(log_path, &log_error);
  if (!log) return Error{prefix + log_error + "."};
  std::size_t written = 0;
  while (written < payload.size()) {
    const ssize_t n =
        ::write(worker->handoff_fd, payload.data() + written, payload.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = errno;
      return Error{
          prefix + "writing the hand-off failed after " + std::to_string(written) + " of " +
          std::to_string(payload.size()) + " bytes: " +
          (n < 0 && error == EAGAIN ? std::string("the pipe is full") : errno_text(error)) + "."};
    }
    written += static_cast<std::size_t>(n);
  }
  ::close(worker->handoff_fd);
  worker->handoff_fd = -1;
  // What it printed while waiting stays in the old log; the rest goes to the new one.
  pump(*worker, std::numeric_limits<std::size_t>::max());
  note(id, "pid " + std::to_string(worker->pid) + " now runs " + label + " (log " + log_path + ")");
  worker->label = label;
  worker->log = std::move(log);
  worker->at_line_start = true;
  note(id, label + ": handed to the started interpreter pid " + std::to_string(worker->pid));
  return ok_status();
}

void Spawner::note(WorkerId id, std::string_view line) {
  Worker* worker = find(id);
  if (worker == nullptr) return;
  LogFile& log = *worker->log;
  // A daemon line never glues onto a half-written worker line.
  std::string text = log.at_line_start ? "" : "\n";
  text += daemon_line(line);
  log.append(text.data(), text.size(), config_.log_max_bytes, config_.log_keep);
  worker->at_line_start = true;  // the rest of a half-written line continues on a stamped line
}

void Spawner::kill_group(Worker& worker, int signal) {
  // The leader is not reaped yet (we reap only in handle_exit), so its pid still names this
  // group and cannot belong to anyone else.
  ::kill(-worker.pid, signal);
  if (signal == SIGKILL && !worker.cgroup.empty()) cgroup_kill(worker.cgroup);
}

void Spawner::stop(TimePoint now, WorkerId id) { stop(now, id, SIGTERM, config_.stop_grace); }

void Spawner::stop(TimePoint now, WorkerId id, int signal, Duration grace) {
  Worker* worker = find(id);
  if (worker == nullptr || worker->stopped) return;
  worker->stopped = true;
  kill_group(*worker, signal);
  worker->kill_at = now + grace;
}

void Spawner::kill(WorkerId id) {
  Worker* worker = find(id);
  if (worker == nullptr) return;
  worker->stopped = true;
  worker->kill_at = kNever;
  kill_group(*worker, SIGKILL);
}

void Spawner::write_output(Worker& worker, std::string_view data) {
  LogFile& log = *worker.log;
  if (!config_.log_timestamps) {
    log.append(data.data(), data.size(), config_.log_max_bytes, config_.log_keep);
    return;
  }
  // One stamp per read: the lines of one read arrived together. Each line that starts here
  // gets it; a line the worker had begun earlier continues without one.
  const std::string stamp = output_stamp();
  std::string text;
  text.reserve(data.size() + stamp.size() * 4);
  while (!data.empty()) {
    if (worker.at_line_start) {
      // Another writer of a shared file left half a line: never glue a stamp onto it.
      if (text.empty() && !log.at_line_start) text.push_back('\n');
      text += stamp;
    }
    const auto newline = data.find('\n');
    const std::size_t take = newline == std::string_view::npos ? data.size() : newline + 1;
    text.append(data.substr(0, take));
    worker.at_line_start = newline != std::string_view::npos;
    data.remove_prefix(take);
  }
  log.append(text.data(), text.size(), config_.log_max_bytes, config_.log_keep);
}

void Spawner::pump(Worker& worker, std::size_t budget) {
  std::array<char, 65536> buffer;
  std::size_t total = 0;
  while (worker.pipe_fd >= 0 && total < budget) {
    const ssize_t n = ::read(worker.pipe_fd, buffer.data(), buffer.size());
    if (n > 0) {
      write_output(worker, std::string_view(buffer.data(), static_cast<std::size_t>(n)));
      total += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    // EOF (every writer closed it) or an error: nothing more will come through this pipe.
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, worker.pipe_fd, nullptr);
    ::close(worker.pipe_fd);
    worker.pipe_fd = -1;
  }
}

void Spawner::handle_exit(TimePoint now, Worker& worker, int wait_status,
                          std::vector<WorkerExit>* exits) {
  WorkerExit exit;
  exit.id = worker.id;
  exit.pid = worker.pid;
  exit.signaled = WIFSIGNALED(wait_status);
  exit.status = exit.signaled ? WTERMSIG(wait_status) : WEXITSTATUS(wait_status);
  exit.stopped = worker.stopped;
  exit.at = now;
  if (worker.pipe_fd >= 0) {
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, worker.pipe_fd, nullptr);
    ::close(worker.pipe_fd);
  }
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, worker.pidfd, nullptr);
  ::close(worker.pidfd);
  note(worker.id, "pid " + std::to_string(worker.pid) + " " + exit.describe() +
                      (worker.stopped ? " (stopped by the daemon)" : ""));
  if (!worker.record.empty()) ::unlink(worker.record.c_str());
  if (!worker.cgroup.empty() && ::rmdir(worker.cgroup.c_str()) != 0 && errno != ENOENT) {
    cgroups_to_remove_.push_back(worker.cgroup);
    cgroup_retry_at_ = std::min(cgroup_retry_at_, now + kCgroupRetry);
  }
  orphan_sweep_until_ = now + kOrphanSweepFor;
  if (exits != nullptr) exits->push_back(exit);
  workers_.erase(worker.id);  // destroys `worker`
}

// Reaps worker `id` if its leader has exited: first SIGKILL the rest of its group (the zombie
// leader still pins the group id), then drain its pipe, then reap.
bool Spawner::reap_one_worker(TimePoint now, WorkerId id, std::vector<WorkerExit>* exits) {
  Worker* worker = find(id);
  if (worker == nullptr) return false;
  siginfo_t info{};
  if (::waitid(P_PIDFD, static_cast<id_t>(worker->pidfd), &info, WEXITED | WNOHANG | WNOWAIT) !=
          0 ||
      info.si_pid == 0) {
    return false;
  }
  kill_group(*worker, SIGKILL);
  pump(*worker, kFinalDrainBudget);
  int status = 0;
  pid_t reaped;
  do {
    reaped = ::waitpid(worker->pid, &status, WNOHANG);
  } while (reaped < 0 && errno == EINTR);
  if (reaped != worker->pid) return false;
  handle_exit(now, *worker, status, exits);
  return true;
}

void Spawner::reap_others(TimePoint now, std::vector<WorkerExit>* exits) {
  while (true) {
    siginfo_t info{};
    if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return;
    const pid_t pid = info.si_pid;
    WorkerId tracked = 0;
    for (const auto& [id, worker] : workers_) {
      if (worker->pid == pid) tracked = id;
    }
    if (tracked != 0) {
      if (!reap_one_worker(now, tracked, exits)) return;  // cannot happen; never spin
      continue;
    }
    // A descendant adopted through the subreaper (or, see the header, any other child).
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) <= 0) return;
  }
}

void Spawner::retry_cgroup_removal() {
  std::erase_if(cgroups_to_remove_, [](const std::string& path) {
    return ::rmdir(path.c_str()) == 0 || errno == ENOENT;
  });
}

void Spawner::process(TimePoint now, std::vector<WorkerExit>* exits) {
  std::array<epoll_event, 128> events;
  const int n = ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), 0);
  std::vector<WorkerId> exited;
  for (int i = 0; i < n; ++i) {
    const WorkerId id = events[static_cast<std::size_t>(i)].data.u64 >> 1;
    const bool is_pidfd = (events[static_cast<std::size_t>(i)].data.u64 & 1) != 0;
    if (is_pidfd) {
      exited.push_back(id);
    } else if (Worker* worker = find(id)) {
      pump(*worker, kPumpBudget);
    }
  }
  for (auto& [id, worker] : workers_) {
    if (worker->kill_at <= now) {
      worker->kill_at = kNever;
      kill_group(*worker, SIGKILL);
    }
  }
  for (WorkerId id : exited) reap_one_worker(now, id, exits);
  reap_others(now, exits);
  orphan_sweep_at_ = now < orphan_sweep_until_ ? now + kOrphanSweepEvery : kNever;
  if (cgroup_retry_at_ <= now) {
    retry_cgroup_removal();
    cgroup_retry_at_ = cgroups_to_remove_.empty() ? kNever : now + kCgroupRetry;
  }
}

TimePoint Spawner::next_deadline() const {
  TimePoint next = std::min(cgroup_retry_at_, orphan_sweep_at_);
  for (const auto& [id, worker] : workers_) next = std::min(next, worker->kill_at);
  return next;
}

void Spawner::shutdown(Duration grace, std::vector<WorkerExit>* exits) {
  using Clock = std::chrono::steady_clock;
  auto clock_now = [] { return TimePoint(Clock::now().time_since_epoch()); };
  TimePoint now = clock_now();
  for (auto& [id, worker] : workers_) {
    if (!worker->stopped) {
      worker->stopped = true;
      kill_group(*worker, SIGTERM);
    }
    worker->kill_at = std::min(worker->kill_at, now + grace);
  }
  const TimePoint give_up = now + grace + kShutdownKillWait;
  while (true) {
    now = clock_now();
    process(now, exits);
    if (workers_.empty() || now >= give_up) break;
    const TimePoint wake = std::min(next_deadline(), give_up);
    const auto wait_ms = std::clamp<std::int64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count() + 1, 1, 100);
    epoll_event event;
    ::epoll_wait(epoll_fd_, &event, 1, static_cast<int>(wait_ms));
  }
  if (!workers_.empty()) {
    spdlog::error(
        "spawner: {} worker(s) did not die within {} ms of SIGKILL; their records "
        "stay for the next start",
        workers_.size(),
        std::chrono::duration_cast<std::chrono::milliseconds>(kShutdownKillWait).count());
  }
  retry_cgroup_removal();
}

}  // namespace elastic::spawner
