// JobSupervisor: turns the rounds this daemon belongs to into local worker processes (the
// "job supervisor" layer of ARCHITECTURE.md). RoundMember decides which round stands (fence,
// leases); the supervisor carries it out through the Spawner and reports back what happened to
// the workers.
//
// Per job it keeps the workers of the current round and those of older rounds still stopping.
// A new round of a job first stops the old round's workers, then starts the new ones once they
// are gone (they must not write a checkpoint the new round resumes from, and their slots and
// store port must be free):
//   - a round opened to grow the job (kGrow), or a job cancelled by its owner: SIGTERM, then
//     SIGKILL after spawner.stop_grace: the round is healthy, so elastic-trainer's SIGTERM
//     handling can agree on a last step and checkpoint it (the "checkpoint boundary");
//   - any other reason (a member lost, a worker failed, the job recovering or failed, this
//     daemon no longer a member, its lease ran out): SIGKILL at once. A broken round's
//     collectives can never complete, so a TERM would only wait out the grace period (or an
//     NCCL timeout); the work since LATEST is lost either way.
// Live rounds (re-formation in place, daemon/worker_channel/): every worker gets a channel
// (WorkerSpec::channel); a worker that says hello(live) there (elastic-trainer, the Python
// module) can join the next round without leaving its process. When a new round of a job names
// this node and every running worker of the job's current round here is such a worker (ready,
// joined, or still answering an older offer), with no more of them than the new round gives this
// node, the round is offered to them instead of the stop above: each keeps its process and slot
// and takes the next local rank (in the order of their old ranks); local ranks the new round
// adds are started cold on free slots (a crashed rank's replacement). Their output moves to the
// new round's log files. The round is acknowledged (round_ack, live) once every offered worker
// said "joined" for it, which needs the whole new group formed; an offer not joined within
// rendezvous.reform_timeout, or a worker that stopped speaking the protocol, falls back to the
// stop and restart above. A worker that exits meanwhile is a failure of the new round as usual.
// A round that cannot be offered (a plain command, a worker still starting, more workers here
// than the new round keeps, rank 0's store port busy, or workers of a round older than the one
// the new round follows: they missed a round that may have trained and checkpointed without
// them) is started the old way. Once every
// running worker of a round started cold said hello(live), a round_ack with live = true tells
// the leader that this job's workers re-form in place (RoundLeader: no lease wait for a lost
// member of such a job). A grow round's RoundStart may say hold_live (round_codec.h): the
// running workers then keep training in their round, and the offer waits for the same round
// without it (the leader sends it once the joiners' workers are ready), so growing costs them
// only the re-formation. That offer says "intact" (worker_channel/messages.h) when no worker of
// the job failed here: the workers then leave their healthy group at an agreed step boundary
// instead of aborting it.
// Local slots (GPUs, or CPU slots) come from the topology plan; a round's workers take the
// lowest free ones, so two jobs on one node never share a slot.
//
// Worker environment: the torchrun-compatible variables and ELASTIC_* of ARCHITECTURE.md
// ("The worker contract"; TORCHELASTIC_RESTART_COUNT is this node's count in the rank map),
// CUDA_VISIBLE_DEVICES + CUDA_DEVICE_ORDER=PCI_BUS_ID on GPU slots (the plan numbers GPUs in
// PCI bus order), OMP_NUM_THREADS from the plan, HOME/USER/LOGNAME/SHELL of the user, the
// daemon's PATH and LANG, PYTHONUNBUFFERED=1 (Python output reaches the log line by line);
// then the submitter's exported_env (its PATH, PYTHONPATH, NCCL_*, OMP_NUM_THREADS,
// PYTHONUNBUFFERED... beat the daemon's defaults); then the job's env with its placeholders
// expanded (rendezvous/placeholders.h: {job_id}, {checkpoint_dir}, {round}), as are the
// command's arguments; last, spawner.python_dir (resolve_python_dir()) is appended to the end of
// PYTHONPATH, after the user's entries, so `import elastic_worker` works with no set-up. Neither
// may override the daemon's own variables (validate() refuses them). A placeholder that cannot be
// expanded ({checkpoint_dir} without a checkpoint root) fails the start like a command that cannot
// be run. Who runs the workers: the submitting user (the spec's uid/gid, from the control socket's
// peer credentials) when the daemon runs as root; a daemon that is not root runs workers only
// for its own uid (the spawner refuses any other, and that failure is reported like a crash).
// Working directory: the spec's, else the user's home, else "/". Checkpoints:
// ELASTIC_CHECKPOINT_DIR = <spec.checkpoint_root or checkpoint.root>/<job id>, absent when
// neither root is set; the workers create it (as the job's user; the daemon touches no path
// under a root the user chose).
// Logs: <base>/<job>/round-<R>/rank-<N>.log, every round kept up to spawner.log_rounds_kept,
// and the job's owner beside them (worker_logs.h; base: spawner.log_root, else log_dir).
//
// Warm jobs (JobSpec::warm, node/warm_standbys.h): kStandbyDelay after a round's workers
// started here, each slot they run on gets a standby interpreter of the job (its own log:
// WorkerLogs::standby_path). A later round of the job that starts a rank on such a
// slot hands the rank to the standby instead of starting a process (the slots holding the
// job's standbys are taken first); a hand-off that fails kills the standby and starts the rank
// cold. A standby that exits by itself is forgotten (its log says why; it is no worker failure).
// Standbys end: when the job ends or a round leaves this node out (stop_job with `final`),
// at drain, when another job's round takes their slot, and kStandbyLinger after any other
// stop_job (recovering, fenced) unless a new round of the job comes first.
//
// Reports (take_reports(), for the leader; typed RoundReports, round_report.h): round_ack once
// this round's workers run; worker_failed {job, round, rank, detail} for a worker that exited
// non-zero or could not start; workers_done {job, round} when every local worker of the round
// exited 0. Failure and
// done reports repeat every kReportResend while the round stands (reports may be lost; the
// leader deduplicates). The node of rank 0 runs the round's store: before starting workers it
// checks the store port (the PortProbe) and, when another process holds it, starts none
// and reports store_port_busy {job, round, port, detail} instead (re-sent like a failure, no
// ack): the leader moves the round to another port. For the leader's incident timelines
// (incidents.h): worker_failed also carries at_ms (the wall time the exit was reaped), and
// workers_stopped {job, round} goes out once when the last local worker of a round is gone,
// whatever ended it.
//
// Progress (the optional worker protocol, trainer/progress.h): on_progress() checks a worker's
// "progress" frame from the control socket and forwards it to the leader (a "progress"
// report); the newest "checkpoint" per job is kept for checkpoints(), which otherwise falls
// back to the job's <checkpoint dir>/LATEST (its step and mtime; read as the job's user, see
// spawner/read_as_user.h, since the user chose that path), so any worker using our checkpoint
// layout shows a checkpoint age. Forwarding is rate-limited per job and event kind,
// so a worker that reports every step (or every rank reporting) cannot flood the leader: the
// first "step" of a round goes at once (the incident timeline's "first step"), otherwise at
// most one report per kProgressInterval; a report inside the interval is held and replaced by
// newer ones, and the newest is sent when the interval ends or the round changes, so the leader
// never lags by more than one interval. Refusals are never held: they answer the worker.
//
// Hang detection, per worker, for workers that send "alive" over their channel (elastic-trainer
// does; daemon/worker_channel/liveness.h): a worker of the current round is hung when its
// process answers nothing, or it is stuck in its own work, for the timeout after its last
// step; one that waits for its peers in a collective is left to the peer's daemon until the
// whole group has waited twice the timeout. The timeout is the job's hang_timeout, or when the
// job sets none, ten of the worker's observed step times and at least 30 s; a hang_timeout of
// 0 turns it off. So the daemon of the rank at fault reports it, and the others' healthy
// workers re-form without it.
// For workers that send no "alive" (any other command; only when hang_timeout is set, 0 = off):
// once the current round's workers on this node have sent a "step" report, every accepted report
// (step, checkpoint or resume) restarts the timer; when none comes for hang_timeout, all of them
// are hung. Either way the round is failed here like a crash: "worker_failed" with a detail that
// names the rank, why it counts as hung and "(hang_timeout)", and the hung workers get SIGABRT
// (and SIGCONT, so a stopped process acts on it; a Python faulthandler, if the script enabled
// one, prints every thread's stack into the log), then SIGKILL kHangAbortGrace later; a new
// round does not cut that grace short (its workers start once the old ones are gone). Nor is a
// node one of whose workers already exited 0 hung (it is finishing). The timers run on the
// `now` of process() and next_deadline(): no thread of their own.
//
// Thread safety: none; the node's loop thread owns it (the Spawner's PDEATHSIG is tied to the
// forking thread, which must live as long as the daemon: the loop thread does).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "daemon/config/config.h"
#include "daemon/core/clock.h"
#include "daemon/core/result.h"
#include "daemon/core/time.h"
#include "daemon/node/host.h"
#include "daemon/node/round_codec.h"
#include "daemon/node/round_report.h"
#include "daemon/node/worker_logs.h"
#include "daemon/spawner/launcher.h"
#include "daemon/topology/topology.h"
#include "daemon/worker_channel/endpoint.h"
#include "daemon/worker_channel/worker_link.h"

namespace elastic::node {

// How the workers of a round that no longer stands are stopped (see the header comment).
enum class StopMode { kGraceful, kKill };

// The newest complete checkpoint of a job with workers on this node.
struct CheckpointInfo {
  std::string job;
  std::int64_t step = -1;
  std::int64_t at_ms = 0;  // wall ms of the newest complete checkpoint
};

// One local worker as `elasticctl status` shows it.
struct WorkerRow {
  std::string job;
  std::uint64_t round = 0;
  std::uint32_t rank = 0;
  std::uint32_t slot = 0;
  int pid = 0;
  std::string state;  // "running", "stopping", "exited"
  std::string detail;
};

class JobSupervisor {
 public:
  static constexpr std::chrono::seconds kReportResend{1};
  // At most one progress report per job and event kind per interval goes to the leader.
  static constexpr std::chrono::milliseconds kProgressInterval{100};
  // A warm job's standbys start this long after its round's workers (not competing with their
  // start-up), and wait this long for the job's next round after a stop that was not final.
  static constexpr std::chrono::seconds kStandbyDelay{3};
  static constexpr std::chrono::seconds kStandbyLinger{60};
  // A hung worker's SIGABRT -> SIGKILL grace: a faulthandler's stack dump takes milliseconds.
  static constexpr std::chrono::seconds kHangAbortGrace{2};

  // Whether a TCP port is taken on this host (port_probe.h's tcp_port_in_use in the daemon;
  // empty: never checked). See "store_port_busy" in the header comment.
  using PortProbe = std::function<bool(std::uint16_t port)>;
  // Wall times in its reports and checkpoint records come from `clock` (core/clock.h); who the
  // daemon runs as, its environment, users' accounts and every file it looks at (worker logs,
  // LATEST, the python_dir module) from `host` (host.h).
  // `config` is read where used (a reload replaces it); it, `clock` and `host` must outlive the
  // supervisor.
  JobSupervisor(std::string self, const config::Current& config,
                std::unique_ptr<spawner::Launcher> spawner, topology::Plan plan,
                PortProbe port_in_use, const Clock& clock = system_clock(),
                Host& host = posix_host());

  // The reports made since the last take, in order (see "Reports" in the header comment), each
  // for the leader of its job's round (RoundService::report_for carries it).
  std::vector<RoundReport> take_reports() { return std::exchange(reports_, {}); }

  // A round of `start.round.job_id` that names this daemon passed the fence (repeated starts of
  // the same round are no-ops). Returns true when this round's workers are running, so the
  // caller may acknowledge it at once; otherwise a "round_ack" report follows when they are.
  bool on_round(TimePoint now, const RoundStart& start);
  // The job no longer has a round for this daemon (ended, recovering, not a member, fenced).
  // `final`: the job will not run here again (ended, left out of its round): its warm standbys
  // go too; otherwise they wait kStandbyLinger for the job's next round.
  void stop_job(TimePoint now, const std::string& job, StopMode mode, const std::string& why,
                bool final = false);

  int fd() const;
  void process(TimePoint now);
  TimePoint next_deadline() const;
  // SIGTERM to every worker, up to `grace` for them to exit, SIGKILL to the rest (blocks).
  void shutdown(Duration grace);
  // The daemon drains (SIGTERM): every job's workers are stopped like a graceful stop_job
  // (SIGTERM now, SIGKILL after spawner.stop_grace; an exit then is no worker failure), without
  // blocking; process() reaps them. kill_all() SIGKILLs whatever still runs (the drain's grace
  // is over, or a second signal came; a hung worker already SIGABRTed keeps its SIGKILL at the
  // end of its kHangAbortGrace).
  void drain(TimePoint now);
  void kill_all(TimePoint now);
  // Worker processes not reaped yet.
  std::size_t running_workers() const { return spawner_->running(); }
  // A configuration reload changed spawner.stop_grace, log_max_bytes or log_keep: the
  // launcher takes them from the current config.
  void reload_spawner_limits() {
    const config::SpawnerConfig& spawner = config_.get().spawner;
    spawner_->set_limits(spawner.stop_grace, spawner.log_max_bytes, spawner.log_keep);
  }

  std::uint32_t slots() const { return static_cast<std::uint32_t>(plan_.slots.size()); }
  const topology::Plan& plan() const { return plan_; }
  std::vector<WorkerRow> workers() const;
  // The directory appended to the workers' PYTHONPATH ("" = none), see resolve_python_dir().
  const std::string& python_dir() const { return python_dir_; }
  // Where this node's workers' logs are (worker_logs.h).
  const WorkerLogs& logs() const { return logs_; }
  // The uid that owns `job`: from the rounds this daemon ran since it started, else from the
  // owner file beside the job's logs (it outlives a daemon restart).
  std::optional<std::uint32_t> job_owner(const std::string& job) const;

  // A "progress" request (trainer/progress.h) from a local peer with uid `uid`: accepted only
  // for a job whose current round runs workers here, from its owner or root, for that round,
  // then forwarded (or held, see the header comment) as "progress" {job, round, rank, event,
  // step, resumed_from}. Errors are one sentence for the worker.
  Status on_progress(TimePoint now, std::uint32_t uid, const std::string& request);
  // Progress reports sent to the leader, and those the rate limit dropped for a newer one.
  std::uint64_t progress_forwarded() const { return progress_forwarded_; }
  std::uint64_t progress_coalesced() const { return progress_coalesced_; }
  // Jobs with workers on this node and their newest checkpoint (progress, else LATEST); jobs
  // without any are left out.
  std::vector<CheckpointInfo> checkpoints() const;
  // Local workers by state ("running", "stopping", "exited").
  std::map<std::string, int> worker_state_counts() const;
  // Warm standbys waiting for a round, and rounds handed to one (a warm start) since start-up.
  std::size_t standbys() const { return standbys_.size(); }
  std::uint64_t warm_starts() const { return warm_starts_; }
  // Local workers that joined a round offered over their channel (re-formed in place), and
  // offers that ran past rendezvous.reform_timeout (the workers were restarted instead).
  std::uint64_t live_reforms() const { return live_reforms_; }
  // The grow round whose offer `job`'s workers here wait for (RoundStart::hold_live), or 0.
  std::uint64_t held_round(const std::string& job) const {
    const auto it = jobs_.find(job);
    return it == jobs_.end() ? 0 : it->second.held;
  }
  std::uint64_t live_fallbacks() const { return live_fallbacks_; }
  // Workers found hung and ended (hang detection) since start-up.
  std::uint64_t hung_workers() const { return hung_workers_; }

 private:
  const Clock* clock_;
  Host* host_;
  struct Worker {
    spawner::WorkerId id = 0;
    std::uint64_t round = 0;
    std::uint32_t rank = 0;
    std::uint32_t slot = 0;
    int pid = 0;
    bool stopping = false;
    bool aborting = false;  // SIGABRTed as hung: the spawner SIGKILLs it after kHangAbortGrace
    std::optional<spawner::WorkerExit> exit;
    // Its worker channel (nullptr: the Launcher gave it none) and what is known of the worker
    // on it. Shared so a Worker stays copyable; one Worker owns it.
    struct Channel {
      worker_channel::WorkerEndpoint endpoint;
      worker_channel::WorkerLink link;
      bool epoll_out = false;  // registered for writability too
    };
    std::shared_ptr<Channel> channel;
  };
  struct Job {
    std::optional<RoundStart> current;   // the round to run (nullopt: stop everything)
    bool started = false;                // current's workers were spawned
    std::vector<Worker> workers;         // current round's and older rounds' (stopping) workers
    std::optional<RoundReport> failure;  // worker_failed or store_port_busy, re-sent while the
                                         // round stands
    bool done = false;                   // every worker of current exited 0
    std::map<std::uint64_t, std::uint32_t> live;  // round -> its workers not reaped yet
    std::optional<CheckpointInfo> checkpoint;     // the newest one a worker reported
    // Progress forwarding of the current round, by event kind ("step", "checkpoint", "resume").
    struct ProgressOut {
      TimePoint last_sent = TimePoint::min();  // + kProgressInterval cannot overflow
      std::optional<RoundReport> held;  // the newest report inside the interval, not sent yet
    };
    std::map<std::string, ProgressOut> progress;
    bool first_step_sent = false;
    // Hang detection: the newest accepted report of the current round, once it sent a step.
    std::optional<TimePoint> last_report;
    std::int64_t last_step = -1;
    TimePoint standbys_at = kNever;  // when the current round's slots get their standbys
    // Re-formation in place (see "Live rounds"): the offered workers whose "joined" the ack of
    // `current` waits for, and whether a live round_ack for `current` went out.
    std::set<spawner::WorkerId> joining;
    bool live_acked = false;
    // A grow round whose offer waits for its joiners (RoundStart::hold_live): its number. The
    // workers keep training in `current` meanwhile.
    std::uint64_t held = 0;
  };
  // A warm job's started interpreter on a slot, waiting for the job's next round.
  struct Standby {
    std::string job;
    spawner::WorkerId id = 0;
    int pid = 0;
    TimePoint linger_until = kNever;  // kNever while the job has a round here
  };
  // A worker offered a round over its channel and not yet joined: the offer's deadline
  // (rendezvous.reform_timeout) watches it, not hang detection; the watched set still holds it,
  // so the job's progress-report fallback does not apply meanwhile.
  static bool re_forming(const Worker& w);
  // When the current round of `job` counts as hung (kNever: not watched).
  TimePoint hang_deadline(const Job& job) const;
  // The current round's running workers here that send "alive" (watched one by one): their
  // indices in job.workers, and the timeout each is watched with.
  std::vector<std::pair<std::size_t, Duration>> watched_workers(const Job& job) const;
  // Fails the current round as hung and aborts its local workers (see the header comment).
  void hang(TimePoint now, const std::string& id, Job& job);
  // Sends the held progress reports of `job` whose interval is over (all with `all`).
  void flush_progress(TimePoint now, Job& job, bool all);
  // Sends `out.held` to the leader now and starts its interval.
  void forward_held(TimePoint now, Job::ProgressOut& out);
  // The round of `job` ends on this node: what is held goes out, the limits start over.
  void end_progress_round(TimePoint now, Job& job);
  // A worker of `round` is gone: the round's last one sends "workers_stopped".
  void worker_gone(const std::string& id, Job& job, std::uint64_t round);

  void stop_workers(TimePoint now, Job& job, StopMode mode);
  void try_start(TimePoint now, const std::string& id, Job& job);
  // Starts local rank `local` of the job's current round on `slot` (in the job's standby there
  // when it has one); false after reporting a failure.
  bool start_rank(TimePoint now, const std::string& id, Job& job, std::uint32_t local,
                  std::uint32_t slot);
  // Live rounds: offers `start` to the job's running workers instead of restarting them, when
  // all of them can re-form in place (see the header comment); false: restart as before.
  bool offer_round(TimePoint now, const std::string& id, Job& job, const RoundStart& start);
  // Whether `start` can be offered to the job's running workers here: those workers (sorted by
  // rank), the free slots for the local ranks that start cold, and this daemon's entry in the
  // rank map of `start` (it points into `start`) and its group rank; nullopt: restart instead.
  struct OfferPlan {
    std::vector<Worker*> keep;
    std::vector<std::uint32_t> free;
    const rendezvous::RankAssignment* entry = nullptr;
    std::uint32_t group_rank = 0;
  };
  std::optional<OfferPlan> plan_offer(Job& job, const RoundStart& start);
  // Reads every worker channel and acts on what the workers said and on offers that ran late.
  void pump_channels(TimePoint now);
  void on_link_step(const std::string& id, Job& job, Worker& w,
                    const worker_channel::LinkStep& step);
  // Sends the live round_ack of the current round once its local workers can all re-form.
  void ack_if_live(const std::string& id, Job& job);
  // Registers a new channel descriptor with the supervisor's epoll set (created on first use),
  // or updates what it waits for (writable too while the endpoint has bytes pending).
  void watch_channel(Worker::Channel& channel, bool added);
  void on_exit(TimePoint now, const spawner::WorkerExit& exit);
  Result<spawner::WorkerSpec> worker_spec(const RoundStart& start, std::uint32_t local,
                                          std::uint32_t slot) const;
  std::set<std::uint32_t> busy_slots() const;
  // Warm standbys (see the header comment): start the missing ones for `job`'s current round;
  // end one (or all of a job's, or those whose linger is over).
  void start_standbys(TimePoint now, const std::string& id, Job& job);
  void end_standby(std::uint32_t slot, const std::string& why);
  void end_standbys(const std::string& job, const std::string& why);
  void expire_standbys(TimePoint now);
  // Starts `spec` in the job's standby on `slot` if there is one; nullopt when there is none or
  // the hand-off failed (the standby is gone then, and the caller starts the rank cold).
  std::optional<spawner::WorkerId> hand_to_standby(const std::string& id, std::uint32_t slot,
                                                   const spawner::WorkerSpec& spec);
  // Records the round's worker failure (re-sent until the round changes) and reports it now.
  void fail(TimePoint now, const std::string& id, Job& job, std::uint64_t round, std::uint32_t rank,
            const std::string& detail);
  void send_reports(TimePoint now);

  std::string self_;
  const config::Current& config_;
  std::unique_ptr<spawner::Launcher> spawner_;
  topology::Plan plan_;
  PortProbe port_in_use_;
  std::vector<RoundReport> reports_;
  WorkerLogs logs_;
  std::string python_dir_;
  std::map<std::string, Job> jobs_;
  std::map<std::string, std::uint32_t> owners_;  // job -> uid, for log access (bounded)
  TimePoint next_report_ = kNever;
  TimePoint next_progress_ = kNever;  // the earliest end of an interval with a held report
  std::uint64_t progress_forwarded_ = 0;
  std::uint64_t progress_coalesced_ = 0;
  std::map<std::uint32_t, Standby> standbys_;  // by slot
  std::uint64_t warm_starts_ = 0;
  // An epoll set of the Spawner's descriptor and every worker channel, created with the first
  // channel (a Launcher without channels is polled through its own fd()).
  UniqueFd epoll_;
  std::uint64_t live_reforms_ = 0;
  std::uint64_t live_fallbacks_ = 0;
  std::uint64_t hung_workers_ = 0;
};

// This daemon's entry in the rank map of `start` (nullptr when it has none) and its index there
// (GROUP_RANK).
const rendezvous::RankAssignment* self_entry(const RoundStart& start, const std::string& self,
                                             std::uint32_t* group_rank);

// spawner.python_dir as the workers get it: "" stays off, a path is kept as is, and "auto" is
// <dir of `exe`>/../share/elastic/python (make install's place for the module) when that holds
// elastic_worker.py, else "" (a daemon run from its build tree). `exe`: the daemon's binary
// (Host::executable()), `host` where the module is looked for. The daemon's own files only:
// nothing a user chose is looked at.
std::string resolve_python_dir(const std::string& setting, const std::string& exe,
                               const Host& host = posix_host());

}  // namespace elastic::node
