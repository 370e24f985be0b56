// Launcher: the seam between the job supervisor's decisions and the processes that carry them
// out. The supervisor (daemon/node/job_supervisor.h) says which worker to start, stop, kill or
// hand a rank to; a Launcher does it and reports exits from process(). elasticd's Launcher is
// the Spawner (spawner.h: fork/exec, process groups, cgroups, logs); the simulator's runs no
// process at all (tests/sim/sim_launcher.h), so the same supervisor code runs in both.
//
// Contract every Launcher keeps (the supervisor relies on it):
//  - spawn() and start() return a new id or an Error sentence; a failed one leaves nothing
//    running;
//  - a worker whose spec asks for a channel gets one when the Launcher has channels (the
//    Spawner: a socketpair, see spawner.h "Worker channel"); the daemon's end comes back in
//    Spawned::channel, invalid when the Launcher has none (the simulator). A worker without a
//    channel is reached by signals alone, as every worker was before channels;
//  - every id returned by spawn() or start() is reported exactly once by process() as a
//    WorkerExit, unless the Launcher is destroyed first (then nothing of it outlives it);
//  - stop()/kill() of an unknown or reaped id is ignored; stop() is idempotent (the first
//    deadline stands); WorkerExit::stopped tells an exit after stop()/kill() from one on its own;
//  - nothing but shutdown() blocks.
// Thread safety: none; the supervisor's thread owns it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/core/result.h"
#include "daemon/core/time.h"
#include "daemon/core/unique_fd.h"

namespace elastic::spawner {

// The user a worker runs as. `user` is the name for the supplementary groups
// (getgrouplist); "" = only `gid`.
struct RunAs {
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
  std::string user;
};

struct WorkerSpec {
  std::string label;                       // e.g. "fmnist-1 rank 3", for log lines and errors
  std::vector<std::string> argv;           // argv[0] searched in env's PATH like execvp, or a path
  std::map<std::string, std::string> env;  // the COMPLETE environment (the caller builds it)
  std::string working_dir;                 // must exist; "" = "/"
  std::optional<RunAs> run_as;             // nullopt = the daemon's own uid/gid
  std::vector<unsigned> cpus;              // OS cpu indices (sched_setaffinity); empty = unbound
  std::vector<unsigned> mem_nodes;         // OS NUMA nodes (set_mempolicy MPOL_BIND); empty = none
  std::string log_path;                    // stdout+stderr appended here
  bool handoff = false;                    // give it a hand-off pipe as fd 3 (see Hand-off)
  bool channel = false;  // give it a worker channel as fd 4 (see spawner.h, Worker channel)
};

// The descriptor on which a worker started with WorkerSpec::handoff reads its hand-off.
inline constexpr int kHandoffFd = 3;
// The largest payload hand_off() takes (the pipe is enlarged to hold it unread).
inline constexpr std::size_t kMaxHandoffBytes = 1024 * 1024;

// The descriptor of a worker's channel, and the variable that names it in the worker's
// environment (set by the Launcher for a worker with WorkerSpec::channel, removed from the
// environment of any other, so a worker never believes a stale number).
inline constexpr int kWorkerChannelFd = 4;
inline constexpr const char* kWorkerChannelVariable = "ELASTIC_WORKER_FD";

using WorkerId = std::uint64_t;

// A started worker, and the daemon's end of its channel (invalid without one).
struct Spawned {
  WorkerId id = 0;
  UniqueFd channel;
};

struct WorkerExit {
  WorkerId id = 0;
  int pid = 0;
  bool signaled = false;  // killed by a signal (status is the signal) or exited (exit code)
  int status = 0;
  bool stopped = false;  // stop() or kill() had been called for this worker
  TimePoint at{};        // the `now` of the process() call that reaped it
  // "exited with status 3" / "killed by signal 9 (SIGKILL)".
  std::string describe() const;
};

class Launcher {
 public:
  virtual ~Launcher() = default;

  // Starts one worker (see the contract above). A channel the spec asks for is closed at once
  // (the worker reads end of file on it): a caller that talks to its workers uses start().
  virtual Result<WorkerId> spawn(TimePoint now, const WorkerSpec& spec) = 0;
  // spawn(), and the daemon's end of the worker's channel when the spec asks for one. This
  // default is a Launcher's without channels (the simulator's, test doubles): no channel.
  virtual Result<Spawned> start(TimePoint now, const WorkerSpec& spec) {
    Result<WorkerId> id = spawn(now, spec);
    if (!id.ok()) return id.error();
    return Spawned{*id, UniqueFd()};
  }
  // SIGTERM now, SIGKILL at now + stop_grace; a second call keeps the first deadline.
  virtual void stop(TimePoint now, WorkerId id) = 0;
  // stop() with another first signal and grace (a hung worker: SIGABRT, then SIGKILL). Both
  // send SIGCONT after the first signal, so a stopped process acts on it.
  virtual void stop(TimePoint now, WorkerId id, int signal, Duration grace) = 0;
  // SIGKILL now.
  virtual void kill(WorkerId id) = 0;
  // Gives a worker started with WorkerSpec::handoff the rank it runs (warm_standbys.h); its
  // output from now on goes to `log_path` under `label`.
  virtual Status hand_off(WorkerId id, std::string_view payload, const std::string& label,
                          const std::string& log_path) = 0;
  // A worker re-formed into another round in place (worker channel): its output from now on goes
  // to `log_path` under `label`, what it wrote so far stays in the old log. A Launcher without
  // log files (the simulator, test doubles) has nothing to move.
  virtual Status move_log(WorkerId /*id*/, const std::string& /*label*/,
                          const std::string& /*log_path*/) {
    return ok_status();
  }
  // One line of the daemon's own into the worker's log.
  virtual void note(WorkerId id, std::string_view line) = 0;
  // A configuration reload of the stop grace and the log rotation limits.
  virtual void set_limits(Duration stop_grace, std::uint64_t log_max_bytes, int log_keep) = 0;

  // A descriptor readable when process() has work; -1 when there is none to wait on (the
  // caller then relies on next_deadline()).
  virtual int fd() const = 0;
  // Escalations due at `now`, and the exits of tracked workers appended to *exits.
  virtual void process(TimePoint now, std::vector<WorkerExit>* exits) = 0;
  virtual TimePoint next_deadline() const = 0;

  virtual std::optional<int> pid(WorkerId id) const = 0;
  // Workers not reaped yet.
  virtual std::size_t running() const = 0;
  // SIGTERM to every worker, up to `grace` for them to exit, SIGKILL to the rest (blocks).
  virtual void shutdown(Duration grace, std::vector<WorkerExit>* exits) = 0;
};

}  // namespace elastic::spawner
