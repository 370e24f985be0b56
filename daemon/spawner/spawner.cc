#include "daemon/spawner/spawner.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>
#include <utility>

#include "daemon/spawner/cgroup_root.h"
#include "daemon/spawner/child_exec.h"
#include "daemon/spawner/leftovers.h"
#include "daemon/spawner/posix_files.h"

namespace elastic::spawner {
namespace {

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
    // Worker cgroups of daemons that are gone.
    cgroups_to_remove_ = end_leftover_cgroups(config_.cgroup_root, self_pid_);
    if (!cgroups_to_remove_.empty()) cgroup_retry_at_ = TimePoint{};
  }

  if (!config_.state_dir.empty()) {
    auto ended = end_leftover_workers(config_.state_dir);
    if (!ended.ok()) return ended.error();
    leftovers_ended_ = *ended;
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

namespace {

// The descriptors of one spawn. The child's ends go into its ChildPlan and are closed in the
// parent right after fork; the parent's ends are taken by the Worker. Whatever is still held
// when this goes out of scope is closed, so no early return of spawn() leaks a descriptor.
struct SpawnPipes {
  int log[2] = {-1, -1};
  int report[2] = {-1, -1};
  int handoff[2] = {-1, -1};
  int channel[2] = {-1, -1};  // [0] the daemon's end, [1] the worker's
  int dev_null = -1;

  SpawnPipes() = default;
  SpawnPipes(const SpawnPipes&) = delete;
  SpawnPipes& operator=(const SpawnPipes&) = delete;
  ~SpawnPipes() {
    for (int fd : {log[0], log[1], report[0], report[1], handoff[0], handoff[1], channel[0],
                   channel[1], dev_null}) {
      if (fd >= 0) ::close(fd);
    }
  }

  // An Error is a sentence without the "cannot start <label>: " prefix.
  Status open(bool with_handoff, bool with_channel, ChildPlan* plan) {
    if (::pipe2(log, O_CLOEXEC) != 0) {
      return Error{"creating the log pipe failed: " + errno_text(errno) + "."};
    }
    if (::pipe2(report, O_CLOEXEC) != 0) {
      return Error{"creating the report pipe failed: " + errno_text(errno) + "."};
    }
    if (with_handoff && ::pipe2(handoff, O_CLOEXEC) != 0) {
      return Error{"creating the hand-off pipe failed: " + errno_text(errno) + "."};
    }
    // Both ends close-on-exec: the child moves its end to kWorkerChannelFd (without the flag);
    // no other worker spawned later inherits the daemon's end.
    if (with_channel && ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, channel) != 0) {
      return Error{"creating the worker channel failed: " + errno_text(errno) + "."};
    }
    dev_null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (dev_null < 0) return Error{"opening /dev/null failed: " + errno_text(errno) + "."};
    plan->log_write = log[1];
    plan->report_write = report[1];
    plan->handoff_read = handoff[0];
    plan->channel = channel[1];
    plan->dev_null = dev_null;
    return ok_status();
  }

  // In the parent after fork: the child holds its own copies now.
  void close_child_ends() {
    for (int* fd : {&log[1], &report[1], &handoff[0], &channel[1], &dev_null}) {
      if (*fd >= 0) ::close(std::exchange(*fd, -1));
    }
  }
};

}  // namespace

Result<Spawned> Spawner::start(TimePoint now, const WorkerSpec& spec) {
  (void)now;  // exits and deadlines are stamped by the caller's clock; spawning needs none
  const std::string prefix = "cannot start " + spec.label + ": ";
  if (spec.argv.empty() || spec.argv[0].empty()) return Error{prefix + "the command is empty."};
  if (spec.log_path.empty()) return Error{prefix + "no log file was given."};
  ChildPlan plan;
  if (auto planned = plan_child(spec, &plan); !planned) {
    return Error{prefix + planned.error().message};
  }

  std::string log_error;
  std::shared_ptr<LogFile> log = logs_.open(spec.log_path, &log_error);
  if (!log) return Error{prefix + log_error + "."};
  // From here on a failure is also written into the worker's log.
  auto fail = [&](const std::string& sentence) -> Error {
    const std::string line = daemon_line(sentence);
    if (!log->at_line_start()) log->append("\n", 1, config_.log_max_bytes, config_.log_keep);
    log->append(line.data(), line.size(), config_.log_max_bytes, config_.log_keep);
    return Error{sentence};
  };

  const WorkerId id = next_id_++;
  if (!config_.cgroup_root.empty()) {
    plan.cgroup = worker_cgroup_path(config_.cgroup_root, self_pid_, id);
    if (::mkdir(plan.cgroup.c_str(), 0755) != 0 && errno != EEXIST) {
      return fail(prefix + "creating the cgroup " + plan.cgroup + " failed: " + errno_text(errno) +
                  ".");
    }
    plan.cgroup_procs = plan.cgroup + "/cgroup.procs";
  }
  auto drop_cgroup = [&] {
    if (!plan.cgroup.empty()) ::rmdir(plan.cgroup.c_str());
  };

  SpawnPipes pipes;
  if (auto opened = pipes.open(spec.handoff, spec.channel, &plan); !opened) {
    drop_cgroup();
    return fail(prefix + opened.error().message);
  }
  int fork_error = 0;
  const pid_t pid = fork_child(plan, &fork_error);
  pipes.close_child_ends();
  if (pid < 0) {
    drop_cgroup();
    return fail(prefix + "fork failed: " + errno_text(fork_error) + ".");
  }
  // Also in the parent, so a stop() right after spawn() finds the group whatever the order.
  ::setpgid(pid, pid);

  ChildFailure failure{};
  const bool child_failed = read_child_failure(pipes.report[0], &failure);
  ::close(std::exchange(pipes.report[0], -1));
  auto reap_child = [pid] {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  };
  if (child_failed) {
    reap_child();
    drop_cgroup();
    return fail(prefix + describe_child_failure(failure, plan, spec));
  }

  auto worker = std::make_unique<Worker>();
  worker->id = id;
  worker->label = spec.label;
  worker->pid = pid;
  worker->log = log;
  worker->cgroup = plan.cgroup;
  worker->pipe_fd = std::exchange(pipes.log[0], -1);
  if (pipes.handoff[1] >= 0) {
    worker->handoff_fd = std::exchange(pipes.handoff[1], -1);
    ::fcntl(worker->handoff_fd, F_SETFL, ::fcntl(worker->handoff_fd, F_GETFL) | O_NONBLOCK);
    // Best effort: where the kernel refuses (pipe-max-size), hand_off() reports a payload that
    // does not fit.
    ::fcntl(worker->handoff_fd, F_SETPIPE_SZ, static_cast<int>(kMaxHandoffBytes));
  }
  if (auto watched = watch(*worker); !watched) {
    ::kill(-pid, SIGKILL);
    if (!plan.cgroup.empty()) cgroup_kill(plan.cgroup);
    ::close(worker->pipe_fd);
    if (worker->pidfd >= 0) ::close(worker->pidfd);
    reap_child();
    drop_cgroup();
    return fail(prefix + watched.error().message);
  }

  std::string started = spec.label + ": started pid " + std::to_string(pid) + " as uid " +
                        std::to_string(plan.uid) + " in " + plan.working_dir + ", cpus " +
                        (plan.cpus.empty() ? "unbound" : format_index_list(plan.cpus)) +
                        ", mem nodes " +
                        (plan.nodes.empty() ? "unbound" : format_index_list(plan.nodes));
  if (!plan.cgroup.empty()) started += ", cgroup " + plan.cgroup;
  if (spec.channel) started += ", channel fd " + std::to_string(kWorkerChannelFd);
  workers_.emplace(id, std::move(worker));
  note(id, started);
  return Spawned{id, UniqueFd(std::exchange(pipes.channel[0], -1))};
}

Result<WorkerId> Spawner::spawn(TimePoint now, const WorkerSpec& spec) {
  Result<Spawned> started = start(now, spec);
  if (!started.ok()) return started.error();
  return started->id;
}

Status Spawner::watch(Worker& worker) {
  ::fcntl(worker.pipe_fd, F_SETFL, ::fcntl(worker.pipe_fd, F_GETFL) | O_NONBLOCK);
  worker.pidfd = static_cast<int>(::syscall(SYS_pidfd_open, worker.pid, 0));
  if (worker.pidfd < 0) return Error{"pidfd_open failed: " + errno_text(errno) + "."};
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = worker.id << 1;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, worker.pipe_fd, &event) != 0) {
    return Error{"watching the log pipe failed: " + errno_text(errno) + "."};
  }
  event.data.u64 = (worker.id << 1) | 1;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, worker.pidfd, &event) != 0) {
    const int error = errno;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, worker.pipe_fd, nullptr);
    return Error{"watching the process failed: " + errno_text(error) + "."};
  }
  if (!config_.state_dir.empty()) {
    auto record = record_worker(config_.state_dir, worker.pid);
    if (!record.ok()) {
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, worker.pipe_fd, nullptr);
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, worker.pidfd, nullptr);
      return record.error();
    }
    worker.record = *record;
  }
  return ok_status();
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
  std::shared_ptr<LogFile> log = logs_.open(log_path, &log_error);
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
  switch_log(*worker, label, log_path, std::move(log));
  note(id, label + ": handed to the started interpreter pid " + std::to_string(worker->pid));
  return ok_status();
}

Status Spawner::move_log(WorkerId id, const std::string& label, const std::string& log_path) {
  Worker* worker = find(id);
  if (worker == nullptr) return Error{"cannot move the log of " + label + ": it has exited."};
  std::string log_error;
  std::shared_ptr<LogFile> log = logs_.open(log_path, &log_error);
  if (!log) return Error{"cannot move the log of " + label + ": " + log_error + "."};
  const std::string old_label = worker->label;
  switch_log(*worker, label, log_path, std::move(log));
  note(id, label + ": re-formed in place by pid " + std::to_string(worker->pid) + " (was " +
               old_label + ")");
  return ok_status();
}

void Spawner::switch_log(Worker& worker, const std::string& label, const std::string& log_path,
                         std::shared_ptr<LogFile> log) {
  // What it wrote until now stays in the old log; the rest goes to the new one.
  pump(worker, std::numeric_limits<std::size_t>::max());
  note(worker.id,
       "pid " + std::to_string(worker.pid) + " now runs " + label + " (log " + log_path + ")");
  worker.label = label;
  worker.log = std::move(log);
  worker.at_line_start = true;
}

void Spawner::note(WorkerId id, std::string_view line) {
  Worker* worker = find(id);
  if (worker == nullptr) return;
  LogFile& log = *worker->log;
  // A daemon line never glues onto a half-written worker line.
  std::string text = log.at_line_start() ? "" : "\n";
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
  // A stopped process (SIGSTOP, a debugger, a hung worker's stop) acts on the signal only once
  // it runs again; without this it would wait out the grace for its SIGKILL.
  if (signal != SIGKILL && signal != SIGCONT) kill_group(*worker, SIGCONT);
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
      if (text.empty() && !log.at_line_start()) text.push_back('\n');
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
