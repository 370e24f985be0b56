// SimLauncher: the simulator's spawner::Launcher (daemon/spawner/launcher.h). It runs no
// process: spawn() and start() record a simulated worker from the WorkerSpec the JobSupervisor
// built (its job, round, rank and slot come from the environment the supervisor sets:
// ELASTIC_JOB_ID, ELASTIC_ROUND, ELASTIC_NODE, ELASTIC_SLOT, RANK, LOCAL_RANK, WORLD_SIZE), and
// process() reports its exit when it is due:
//  - on its own: exit status 0 `job_runtime` after it started (never when job_runtime is 0), or,
//    for a worker that re-formed in place, `job_runtime` after it last re-formed; a job whose
//    environment sets SIM_RUNTIME_MS runs that many milliseconds instead (jobs of
//    different lengths in one cluster);
//  - fail(): exit with a status at a given time (a worker crash; a rank that lost a peer);
//  - stop(): SIGTERM; the worker exits `term_exit` later (a trainer checkpointing on SIGTERM),
//    or is SIGKILLed at the stop deadline if that comes first; stop() with another signal
//    (SIGABRT for a hung worker) likewise; kill(): SIGKILL, reported at the next process().
// next_deadline() is the earliest of those and of the trainer model's timers (below), so the
// node's timer wakes for it.
// Every spawn and every exit is also told to a SimWorkerObserver (the cluster's checkers);
// workers still running when the launcher is destroyed (the daemon crashed: PDEATHSIG) are told
// as killed then. Warm standbys are not simulated: hand_off() fails (the supervisor then starts
// the rank cold, as after any failed hand-off).
//
// The trainer model (with SimLauncherOptions::groups; see sim_groups.h). Every worker is a rank
// of a data-parallel group: it arrives in its round's group when it starts, and trains once
// every rank of the round has arrived (the group formed) until it leaves the group (exits, is
// SIGKILLed, or abandons the group for a newer round). The observer hears each start and stop
// of training (on_training). A rank whose group lost a peer is told so by lose_peer(): a plain
// worker exits 69 then, as elastic-trainer without a channel does; a live one stops training
// and waits for an offer.
//
// The worker channel (daemon/worker_channel/messages.h). start() of a spec that asks for a
// channel, with groups set, makes a real AF_UNIX socketpair: the daemon's end comes back in
// Spawned::channel, the simulated worker keeps its own (spawn() gives none: the contract's
// "closed at once"). A share `live_workers` of them, drawn from the launcher's seeded Rng, are
// live; the rest are plain commands that never read or write it. A live worker:
//  - writes hello{version 1, live true} when it starts;
//  - on a "round" offer newer than its round (another job's, or an older or equal round, is
//    ignored, as the trainer's round source does) abandons its group at once, and after a
//    re-formation delay drawn from [reform_min, reform_max] arrives in the offered round's group;
//    once that forms it writes joined{round, term}, and the same WorkerId goes on as the offered
//    rank (the observer hears on_reform). A newer offer before then supersedes it;
//  - exits 69 when it has waited `reform_timeout` for a group to form, or for an offer after
//    its group lost a peer (elastic-trainer's --reform-timeout);
//  - on "stop" exits 75 `term_exit` later, as elastic-trainer does when stopped.
// Whatever a worker writes wakes its node (next_deadline() is now), so the supervisor reads it
// on its next pass; bytes the daemon wrote to a live worker do the same, so the worker reads
// them on the next process(). Both ends are real sockets: everything stays deterministic, as
// nothing is read before the pass that the simulator runs for it.
// SimLauncherOptions::keep_old_group breaks the model on purpose (see there): a scenario
// checks with it that the cluster's group checker catches two groups of one job training.
//
// Ownership: the JobSupervisor owns it; the observer and the groups must outlive it. Thread
// safety: none (the simulator's thread). Errors: a spec without the worker variables is refused
// with a sentence; a socketpair that cannot be made fails the start with the system's reason.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/core/rng.h"
#include "daemon/core/time.h"
#include "daemon/core/unique_fd.h"
#include "daemon/spawner/launcher.h"
#include "daemon/worker_channel/messages.h"
#include "tests/sim/sim_groups.h"
#include "tests/sim/simulator.h"

namespace elastic::sim {

// One simulated worker, as its spec described it.
struct SimWorker {
  NodeId node = 0;  // the simulator node of the daemon that spawned it
  std::uint64_t generation = 0;
  spawner::WorkerId id = 0;
  std::string daemon;  // ELASTIC_NODE
  std::string job;
  std::uint64_t round = 0;
  std::uint32_t rank = 0;
  std::uint32_t local_rank = 0;
  std::uint32_t slot = 0;
  std::uint64_t world = 0;
  TimePoint started{};
  bool live = false;  // it speaks the worker channel and re-forms in place
};

// A rank in a formed group: (SimWorker::job, round), rank `rank` of `world`.
struct SimSeat {
  std::uint64_t round = 0;
  std::uint32_t rank = 0;
  std::uint64_t world = 0;
};

class SimWorkerObserver {
 public:
  virtual ~SimWorkerObserver() = default;
  virtual void on_spawn(const SimWorker& worker) = 0;
  // `exit.at` is when it was reaped (for a crashed daemon: when the launcher went away).
  virtual void on_exit(const SimWorker& worker, const spawner::WorkerExit& exit) = 0;
  // The trainer model (see the header comment); these default to nothing.
  // It read an offer of a newer round from its channel (before acting on it).
  virtual void on_offer(const SimWorker& /*worker*/, const worker_channel::RoundOffer& /*offer*/) {}
  // It re-formed in place into worker.round (rank, local rank and world are the offer's now),
  // leaving `old_round`; on_training for the new round follows.
  virtual void on_reform(const SimWorker& /*worker*/, std::uint64_t /*old_round*/) {}
  // It started (`training`) or stopped training in the formed group `seat`. A worker that exits
  // stops training before on_exit.
  virtual void on_training(const SimWorker& /*worker*/, const SimSeat& /*seat*/,
                           bool /*training*/) {}
};

struct SimLauncherOptions {
  Duration job_runtime = std::chrono::seconds(6);  // 0: workers never exit on their own
  Duration term_exit = std::chrono::milliseconds(200);
  Duration stop_grace = std::chrono::seconds(10);  // spawner.stop_grace; set_limits changes it
  // The trainer model and the worker channel (see the header comment): the cluster's meeting
  // place of groups (nullptr: no groups are formed and no channel is made).
  SimGroups* groups = nullptr;
  // The share of workers started with a channel that speak it live; the others never do (a
  // plain command), so 0 keeps every worker on the stop-and-restart path.
  double live_workers = 0;
  // A live worker's re-formation (abort the old group, build the new one, agree on the step),
  // drawn uniformly; and how long it waits for a group or an offer (--reform-timeout).
  Duration reform_min = std::chrono::milliseconds(50);
  Duration reform_max = std::chrono::milliseconds(300);
  Duration reform_timeout = std::chrono::seconds(60);
  // A live worker's start-up (process, model, CUDA): its hello(live) comes this long after the
  // spawn (0: at once).
  Duration hello_delay = Duration::zero();
  // A bug, made on purpose: a live worker keeps training in its group when it is offered a newer
  // round, and stays in it after it joined the new one (it never aborts the old group).
  bool keep_old_group = false;
};

class SimLauncher final : public spawner::Launcher {
 public:
  // `now` is read at destruction (the crash time); it is the simulator's clock. `seed` drives the
  // launcher's own choices (which workers are live, re-formation delays).
  SimLauncher(NodeId node, std::uint64_t generation, SimLauncherOptions options,
              SimWorkerObserver* observer, const Simulator& sim, std::uint64_t seed = 0);
  ~SimLauncher() override;

  Result<spawner::WorkerId> spawn(TimePoint now, const spawner::WorkerSpec& spec) override;
  Result<spawner::Spawned> start(TimePoint now, const spawner::WorkerSpec& spec) override;
  void stop(TimePoint now, spawner::WorkerId id) override;
  void stop(TimePoint now, spawner::WorkerId id, int signal, Duration grace) override;
  void kill(spawner::WorkerId id) override;
  Status hand_off(spawner::WorkerId id, std::string_view payload, const std::string& label,
                  const std::string& log_path) override;
  void note(spawner::WorkerId /*id*/, std::string_view /*line*/) override {}
  void set_limits(Duration stop_grace, std::uint64_t log_max_bytes, int log_keep) override;
  int fd() const override { return -1; }
  void process(TimePoint now, std::vector<spawner::WorkerExit>* exits) override;
  TimePoint next_deadline() const override;
  std::optional<int> pid(spawner::WorkerId id) const override;
  std::size_t running() const override { return workers_.size(); }
  void shutdown(Duration grace, std::vector<spawner::WorkerExit>* exits) override;

  // The worker exits with `status` at `at` (or at the next process() after it): the scenario's
  // worker crash (status 1, now), or a rank whose peer died (elastic-trainer exits 69 when a
  // collective loses a peer). One due to exit 0 before `at` exits with `status` then instead
  // (the round's last steps need every rank); one stopping keeps its stop. False when `id` is
  // not running.
  bool fail(spawner::WorkerId id, TimePoint at, int status);
  // A peer of the worker's group in `round` is gone: at `at` a plain worker exits 69 (fail()), a
  // live one still in that round stops training there and waits for an offer. False when `id`
  // is not running.
  bool lose_peer(spawner::WorkerId id, std::uint64_t round, TimePoint at);
  // SimGroups: the group (job, round) that `id` arrived in formed; it trains in it from now.
  void formed(spawner::WorkerId id, const std::string& job, std::uint64_t round);

 private:
  // A worker's trainer (see the header comment).
  struct Trainer {
    UniqueFd end;  // its end of the channel (invalid: none, or the daemon closed its own)
    worker_channel::FrameReader frames;
    std::string outbox;                                // bytes the socket did not take yet
    std::map<std::uint64_t, SimSeat> seats;            // round -> where it trains
    std::optional<worker_channel::RoundOffer> target;  // the offered round it re-forms into
    std::optional<std::uint64_t> arrived;              // the round it waits in for a group
    TimePoint arrive_at = kNever;                      // end of its re-formation delay
    TimePoint give_up_at = kNever;                     // exits 69 then (reform_timeout)
    std::optional<std::uint64_t> lost_round;           // lose_peer() of that round, due at
    TimePoint lost_at = kNever;                        // ... this time
    TimePoint wake_at = kNever;                        // it wrote: the daemon reads next pass
    TimePoint hello_at = kNever;                       // its hello is due (hello_delay)
    bool dead = false;                                 // SIGKILLed, not reaped yet
  };
  struct Running {
    SimWorker worker;
    TimePoint exit_at = kNever;  // when it exits (as `exit` says)
    spawner::WorkerExit exit;
    Trainer trainer;
    Duration runtime{};  // job_runtime, or the job's SIM_RUNTIME_MS
  };
  Result<spawner::Spawned> launch(TimePoint now, const spawner::WorkerSpec& spec, bool channel);
  void reap(TimePoint now, Running& running, std::vector<spawner::WorkerExit>* exits);
  // Moves the exit earlier (never later): `at`, by signal or status.
  static void schedule(Running& running, TimePoint at, bool signaled, int status);
  // A clean exit still ahead is called off (a trainer without a group does not finish).
  static void cancel_clean_exit(Running& running);
  SimWorkerKey key(const Running& running) const {
    return SimWorkerKey{node_, generation_, running.worker.id};
  }
  // The trainer model's steps (see the header comment).
  void run_trainer(TimePoint now, Running& running);
  void read_channel(TimePoint now, Running& running);
  void on_offer(TimePoint now, Running& running, const worker_channel::RoundOffer& offer);
  void stop_training(Running& running, std::uint64_t round);
  // Leaves every group it is in or waits in (it exits, or is killed).
  void leave_all(Running& running);
  void write(TimePoint now, Running& running, const worker_channel::WorkerMessage& message);
  void flush(TimePoint now, Running& running);  // what the socket did not take before
  bool unread(const Running& running) const;    // the daemon wrote what it has not read

  NodeId node_;
  std::uint64_t generation_;
  SimLauncherOptions options_;
  SimWorkerObserver* observer_;
  const Simulator* sim_;
  Rng rng_;
  std::map<spawner::WorkerId, Running> workers_;
  spawner::WorkerId next_id_ = 1;
};

}  // namespace elastic::sim
