// Spawner: fork/exec of training workers, their logs, their end. A thin I/O shell with no
// decisions of its own: the job supervisor (daemon/node) says what to start and what to stop,
// the Spawner does it and reports exits.
//
// What it guarantees:
//  - One process group per worker (setpgid in child and parent). stop() sends SIGTERM to the
//    group and SIGKILL at now + stop_grace; when the worker (the group leader) exits, the rest
//    of its group is SIGKILLed before the leader is reaped, so a worker's children never
//    outlive it and the group id cannot have been reused.
//  - PR_SET_PDEATHSIG(SIGKILL) in every worker: if the daemon dies, its workers die. The kernel
//    ties this to the THREAD that forked, so spawn() must be called from a thread that lives as
//    long as the daemon (the loop thread), never from a short-lived helper thread. The kernel
//    also clears it on a change of credentials, so the child arms it after switching to the
//    job's user, then checks that its parent is still the daemon. The exec of a set-user-ID
//    (or file-capability) command clears it again: such a worker is ended by its cgroup, or by
//    the next open() from its leftover record.
//  - open() makes the daemon a child subreaper (PR_SET_CHILD_SUBREAPER), so descendants of a
//    worker that double-fork are reparented to the daemon and reaped here, not by init.
//  - With cgroup_root set (a writable cgroup v2 directory): one cgroup per worker,
//    <cgroup_root>/w-<daemon pid>-<worker id>, joined by the child before exec; stop/kill/exit
//    also write "1" to its cgroup.kill (kernel >= 5.14), which reaches processes that left the
//    process group (setsid); the empty cgroup is removed. Without it, a descendant that leaves
//    its process group escapes the tree kill (PDEATHSIG still covers the worker itself).
//  - Leftovers: every running worker has a record <state_dir>/workers/<pid> holding
//    "<pgid> <start time>\n" (start time = /proc/<pid>/stat field 22, clock ticks since boot),
//    removed when the worker is reaped. open() ends the process group of each recorded pid that
//    still runs with the same start time (a reused pid is never killed) and deletes the records;
//    this ends the workers of a daemon that was killed hard. state_dir "" = no records.
//  - Logs: stdout and stderr of a worker go through a pipe into log_path (O_APPEND, created
//    0644 with parent directories 0755, owned by the daemon). A write that would make the file
//    exceed log_max_bytes rotates it first: path.(keep-1) -> path.keep ... path -> path.1 (keep
//    0: the file is truncated instead). Workers that share a log_path share one open file. The
//    daemon's own lines start with "[elasticd <UTC time>] " (note(), start and exit lines). The
//    pipe is drained before an exit is reported, so the worker's last lines are in the file.
//    With log_timestamps, each line of worker output starts with the UTC wall time at which
//    the daemon read its first bytes, "2026-11-26T21:47:31.123Z " (stdout and stderr share the
//    pipe, so their order is kept and the stamp does not tell them apart); a line the worker
//    writes in pieces is stamped once. The pipe is read as soon as the loop sees it readable,
//    so a line reaches the file (and `elasticctl logs`) moments after the worker wrote it; what
//    the worker still buffers itself (a block-buffered stdout) is its own business (the job
//    supervisor sets PYTHONUNBUFFERED).
//  - Hand-off (WorkerSpec::handoff): the worker also gets the read end of a pipe as fd 3
//    (kHandoffFd; the only descriptor besides 0-2 that it inherits). hand_off() writes one
//    payload into it, closes it (the worker reads to end of file) and from then on writes the
//    worker's output to another log under another label. Warm Python interpreters use it
//    (daemon/node/warm_standbys.h): started early, told what to run when a round comes.
//  - Worker channel (WorkerSpec::channel): a socketpair (AF_UNIX, SOCK_STREAM) per worker; the
//    worker's end is fd 4 (kWorkerChannelFd) and its environment says so in ELASTIC_WORKER_FD
//    (kWorkerChannelVariable); the daemon's end (close-on-exec, so no later worker inherits it)
//    comes back in Spawned::channel and belongs to the caller. It has no path in the
//    filesystem, so no other local user can connect to it, and end of file on it tells the
//    daemon that the worker (and every process it passed the descriptor to) is gone. The
//    messages are daemon/worker_channel/messages.h; a worker that does not know the variable
//    ignores the descriptor and runs as a plain command.
//
// Where each part lives: the child's side of fork/exec and its rules (async-signal-safe only)
// in child_exec.h, the log files and their rotation in log_file.h, the leftover records and
// cgroups in leftovers.h; this class composes them and owns the running workers.
//
// Reaping: each worker has a pidfd (pidfd_open) registered in the epoll set that fd() returns,
// next to its log pipe; a readable pidfd means the leader is a zombie. process() then also
// reaps every other exited child of the process (waitid(P_ALL) — descendants adopted through
// the subreaper), reporting only tracked workers. So the Spawner must be the only part of the
// process that forks children it waits for: in elasticd there is none (tests that fork helpers
// must not call process() while such a helper may exit).
//
// Thread safety: none; one thread (the daemon's loop thread) owns the Spawner. Nothing but
// shutdown() (and the destructor) blocks; spawn() blocks only until the child's exec succeeded
// or failed.
//
// Errors: Result with one sentence: "cannot start <label>: <step> failed: <strerror>", for
// example "cannot start fmnist-1 rank 0: exec of 'no-such-cmd' failed: No such file or
// directory". A failed spawn leaves no process, record or cgroup behind, and writes the error
// into the worker's log when the log could be opened.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/core/result.h"
#include "daemon/core/time.h"
#include "daemon/spawner/launcher.h"
#include "daemon/spawner/log_file.h"

namespace elastic::spawner {

struct SpawnerConfig {
  Duration stop_grace = std::chrono::seconds(10);   // SIGTERM, then SIGKILL after this
  std::uint64_t log_max_bytes = 100 * 1024 * 1024;  // rotate a log before it grows past this
  int log_keep = 5;                                 // rotated files kept (path.1 .. path.keep)
  bool log_timestamps = true;                       // stamp each output line (see Logs above)
  // "" = process groups + PDEATHSIG only; "auto" = the daemon's own cgroup (cgroup_root.h).
  std::string cgroup_root;
  std::string state_dir;  // worker records go to <state_dir>/workers; "" = none
};

class Spawner final : public Launcher {
 public:
  // Makes the process a child subreaper, resolves and checks cgroup_root (an Error naming it
  // unless it is, or "auto" finds, a writable cgroup v2 directory), ends leftover workers (see
  // above) and leftover cgroups.
  static Result<std::unique_ptr<Spawner>> open(SpawnerConfig config);

  // SIGKILLs every worker still running and reaps it (blocking): nothing outlives the Spawner.
  ~Spawner();
  Spawner(const Spawner&) = delete;
  Spawner& operator=(const Spawner&) = delete;

  // Starts one worker; returns once its exec succeeded or failed (see Errors above), with the
  // daemon's end of its channel when the spec asks for one (see Worker channel).
  Result<Spawned> start(TimePoint now, const WorkerSpec& spec) override;
  // start() without the channel (closed at once when the spec asked for one).
  Result<WorkerId> spawn(TimePoint now, const WorkerSpec& spec) override;
  // SIGTERM to the worker's group now, SIGKILL at now + stop_grace. Idempotent: a second call
  // keeps the first deadline. Unknown or already reaped ids are ignored.
  void stop(TimePoint now, WorkerId id) override;
  // stop() with another first signal and grace: the job supervisor ends a hung worker with
  // SIGABRT (a Python faulthandler prints every thread's stack into the log) and SIGKILL at
  // now + grace. Idempotent like stop().
  void stop(TimePoint now, WorkerId id, int signal, Duration grace) override;
  // SIGKILL to the worker's group (and cgroup) now.
  void kill(WorkerId id) override;
  // Writes `payload` (at most kMaxHandoffBytes) to the hand-off pipe of worker `id` and closes
  // it; the worker's output so far stays in its old log, what it writes from now on goes to
  // `log_path`, and its lines are labelled `label`. Nothing blocks: a payload the pipe cannot
  // take at once is an Error, as are an unknown id, a worker without a hand-off pipe (or one
  // handed off already) and a log that cannot be opened; after an Error the caller should
  // kill() the worker (it may hold part of a payload).
  Status hand_off(WorkerId id, std::string_view payload, const std::string& label,
                  const std::string& log_path) override;
  // The worker's output from now on goes to `log_path` (opened like any log) under `label`; a
  // line in each log says where it went on. An Error names the worker and what failed (an
  // unknown id, a log that cannot be opened); the worker keeps its old log then.
  Status move_log(WorkerId id, const std::string& label, const std::string& log_path) override;
  // Appends "[elasticd <UTC time>] <line>\n" to the worker's log. Unknown ids are ignored.
  void note(WorkerId id, std::string_view line) override;
  // A configuration reload: later stop() calls use the new grace (a running escalation keeps its
  // deadline), later log writes the new rotation limits.
  void set_limits(Duration stop_grace, std::uint64_t log_max_bytes, int log_keep) override {
    config_.stop_grace = stop_grace;
    config_.log_max_bytes = log_max_bytes;
    config_.log_keep = log_keep;
  }

  // An epoll descriptor that is readable when process() has work (log output, an exit).
  int fd() const override { return epoll_fd_; }
  // Pumps logs, escalates TERM -> KILL whose deadline is <= now, reaps, and appends the exits
  // of tracked workers to *exits. Never blocks.
  void process(TimePoint now, std::vector<WorkerExit>* exits) override;
  // The earliest pending KILL escalation, cgroup clean-up retry or sweep for the zombies of a
  // recently exited worker's group (every 50 ms for 2 s after an exit), or kNever.
  TimePoint next_deadline() const override;

  std::optional<int> pid(WorkerId id) const override;
  std::size_t running() const override { return workers_.size(); }
  // Workers of an earlier daemon that open() ended.
  std::size_t leftovers_ended() const { return leftovers_ended_; }

  // At daemon exit: SIGTERM every worker, wait up to `grace` (blocking) for them to exit,
  // SIGKILL the rest, reap them all. Their exits are appended to *exits when given.
  void shutdown(Duration grace, std::vector<WorkerExit>* exits) override;
  void shutdown(Duration grace) { shutdown(grace, nullptr); }

  struct Worker;

 private:
  explicit Spawner(SpawnerConfig config);
  Status init();
  void handle_exit(TimePoint now, Worker& worker, int wait_status, std::vector<WorkerExit>* exits);
  bool reap_one_worker(TimePoint now, WorkerId id, std::vector<WorkerExit>* exits);
  void reap_others(TimePoint now, std::vector<WorkerExit>* exits);
  void pump(Worker& worker, std::size_t budget);
  // Ends the worker's current log with what it wrote so far and a line saying where it goes
  // on; from then on its output goes to `log` (opened from `log_path`) under `label`.
  void switch_log(Worker& worker, const std::string& label, const std::string& log_path,
                  std::shared_ptr<LogFile> log);
  // Appends what the worker wrote to its log, each line that starts in `data` stamped.
  void write_output(Worker& worker, std::string_view data);
  void kill_group(Worker& worker, int signal);
  void retry_cgroup_removal();
  Worker* find(WorkerId id);
  const Worker* find(WorkerId id) const;
  // Registers a just started worker: opens its pidfd, adds it and the log pipe to the epoll
  // set, writes its leftover record. An Error (a sentence without the label) leaves nothing in
  // the epoll set and no record; the caller closes the pidfd and ends the process.
  Status watch(Worker& worker);

  SpawnerConfig config_;
  int epoll_fd_ = -1;
  pid_t self_pid_ = 0;
  WorkerId next_id_ = 1;
  std::size_t leftovers_ended_ = 0;
  std::map<WorkerId, std::unique_ptr<Worker>> workers_;
  LogFiles logs_;
  std::vector<std::string> cgroups_to_remove_;
  TimePoint cgroup_retry_at_ = kNever;
  TimePoint orphan_sweep_until_{};
  TimePoint orphan_sweep_at_ = kNever;
};

// "0-3,8,10-11" for {0,1,2,3,8,10,11}; "" for none.
std::string format_index_list(std::vector<unsigned> indices);

}  // namespace elastic::spawner
