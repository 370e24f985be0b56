// SimLauncher: the simulator's spawner::Launcher (daemon/spawner/launcher.h). It runs no
// process: spawn() records a simulated worker from the WorkerSpec the JobSupervisor built (its
// job, round, rank and slot come from the environment the supervisor sets: ELASTIC_JOB_ID,
// ELASTIC_ROUND, ELASTIC_NODE, ELASTIC_SLOT, RANK, LOCAL_RANK, WORLD_SIZE), and process()
// reports its exit when it is due:
//  - on its own: exit status 0 `job_runtime` after it started (never when job_runtime is 0);
//  - fail(): exit with a status at a given time (a worker crash; a rank that lost a peer);
//  - stop(): SIGTERM; the worker exits `term_exit` later (a trainer checkpointing on SIGTERM),
//    or is SIGKILLed at the stop deadline if that comes first; stop() with another signal
//    (SIGABRT for a hung worker) likewise; kill(): SIGKILL, reported at the next process().
// next_deadline() is the earliest of those, so the node's timer wakes for it.
// Every spawn and every exit is also told to a SimWorkerObserver (the cluster's checkers);
// workers still running when the launcher is destroyed (the daemon crashed: PDEATHSIG) are told
// as killed then. Warm standbys are not simulated: hand_off() fails (the supervisor then starts
// the rank cold, as after any failed hand-off).
// Ownership: the JobSupervisor owns it; the observer must outlive it. Thread safety: none (the
// simulator's thread). Errors: a spec without the worker variables is refused with a sentence.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/core/time.h"
#include "daemon/spawner/launcher.h"
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
};

class SimWorkerObserver {
 public:
  virtual ~SimWorkerObserver() = default;
  virtual void on_spawn(const SimWorker& worker) = 0;
  // `exit.at` is when it was reaped (for a crashed daemon: when the launcher went away).
  virtual void on_exit(const SimWorker& worker, const spawner::WorkerExit& exit) = 0;
};

struct SimLauncherOptions {
  Duration job_runtime = std::chrono::seconds(6);  // 0: workers never exit on their own
  Duration term_exit = std::chrono::milliseconds(200);
  Duration stop_grace = std::chrono::seconds(10);  // spawner.stop_grace; set_limits changes it
};

class SimLauncher final : public spawner::Launcher {
 public:
  // `now` is read at destruction (the crash time); it is the simulator's clock.
  SimLauncher(NodeId node, std::uint64_t generation, SimLauncherOptions options,
              SimWorkerObserver* observer, const Simulator& sim);
  ~SimLauncher() override;

  Result<spawner::WorkerId> spawn(TimePoint now, const spawner::WorkerSpec& spec) override;
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

 private:
  struct Running {
    SimWorker worker;
    TimePoint exit_at = kNever;  // when it exits (as `exit` says)
    spawner::WorkerExit exit;
  };
  void reap(TimePoint now, Running& running, std::vector<spawner::WorkerExit>* exits);
  // Moves the exit earlier (never later): `at`, by signal or status.
  static void schedule(Running& running, TimePoint at, bool signaled, int status);

  NodeId node_;
  std::uint64_t generation_;
  SimLauncherOptions options_;
  SimWorkerObserver* observer_;
  const Simulator* sim_;
  std::map<spawner::WorkerId, Running> workers_;
  spawner::WorkerId next_id_ = 1;
};

}  // namespace elastic::sim
