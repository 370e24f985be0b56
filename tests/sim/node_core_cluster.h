// NodeCoreCluster: a scenario harness over NodeCoreProcess (node_core_process.h), so every
// daemon of the simulated cluster runs the production node::NodeCore, with clients and safety
// checkers.
//
// Clients (submit/drive_clients): each request (job name "c<n>") goes to a random up daemon as
// NodeCore::call("submit", {"spec": ...}), the JSON the control socket carries (ctl/submit.cc),
// from this process's uid, in the session elasticd gives it ("<daemon>/<generation>"). The core
// retries a call itself (forwards, redirects, new leaders) under one client id, so the job table
// applies a call once. A request whose call ended without an acknowledgement (an error reply,
// or none because the daemon crashed) is submitted again through a random up daemon as a new
// call named "c<n>.<k>": like a user re-running elasticctl submit, it may add a second job for
// the request, which is legitimate; every job in the table must still run and succeed.
// Workers: the daemons' SimLaunchers tell the cluster every spawn and exit (a job's workers exit
// 0 after options.core.launcher.job_runtime); crash_worker() makes a random live one exit 1, and
// a rank that leaves abnormally takes the other ranks of its round down with it
// (options.peer_loss_exit): plain ones exit 69, live ones (options.core.launcher.live_workers,
// which speak the worker channel) stop training and wait for an offer (SimLauncher::lose_peer).
//
// Checkers (after every simulator event; the first failure stops the run):
//  1. one rank map per (job, round) in every voter's applied table (NodeCore::jobs().table());
//  2. members act only on committed rank maps: a spawned worker's (job, round, rank, slot count,
//     world) is in the committed rank map for its daemon's (name, generation);
//  3. no daemon acts on a round older (round, then term: RoundFence's order) than one it saw
//     in a RoundStart (per generation) or acted on (per daemon name, across generations);
//  4. voter tables byte-identical at equal applied index (64-bit FNV-1a of JobTable::snapshot());
//  5. never two live workers on one slot of one daemon; and the committed rounds of jobs in a
//     round (rendezvous, running, recovering) never hold more of a daemon's slots than it has;
//  6. no worker of a superseded round still running once its lease is gone: a worker of (job,
//     round R) must be gone by the time a newer round (or the job's end) was first applied +
//     rendezvous.lease_duration + spawner.stop_grace + options.stale_slack, unless its daemon
//     still runs R as the job's current round, unfenced (no RoundStart told it otherwise, and
//     the lease it holds is the fence) or its supervisor holds the worker in R for a grow
//     round whose joiners are not ready yet (RoundStart::hold_live; the leader bounds the
//     hold); and a round its daemon marked fenced (its lease ran
//     out; RoundService::member_rounds) has no live worker there 200 ms later;
//  7. every call creates at most one job: no voter's table holds two jobs of one name;
//  8. job-table reads are linearizable (with options.check_reads; read() and read_random()
//     issue them): a read answered with data (the "jobs" list, one "job", or "No job" for an
//     id) must show the table as it stood after some committed index i, lo <= i <= hi. lo is
//     the furthest any daemon's table had applied (JobTable::applied_index) when the read was
//     called: every write committed by then (a submit acknowledged to anyone, a state change a
//     leader made) must show. hi is the furthest any had applied when the answer reached the
//     caller: nothing not yet committed may show. (Raft's read index answers from a table at
//     least at the leader's commit index on arrival, which covers everything applied anywhere
//     before.) Tables are compared as the control reply shows them (rendezvous::to_json of
//     each job); each daemon reports every apply and snapshot restore, and the cluster keeps
//     the committed states from the oldest outstanding read's lo on. The violation names the
//     seed. Other error replies claim nothing and are not checked;
//  9. groups and steps (the trainer model of sim_launcher.h and sim_groups.h). A group is a
//     (job, round) whose every rank 0..world-1 is held by a running worker that trains in it (a
//     cold-started worker once its round's group formed, a live one once it joined). At every
//     event: (a) at most one round of a job trains, so no two groups ever apply steps at once,
//     except that an older group may go on beside a newer one for options.group_overlap
//     (default: lease + 2 election timeouts + 200 ms) after the newer one formed: a member cut off
//     from the leader keeps its group until its lease runs out (a deposed leader on its side
//     may renew it until it steps down), and a leader whose kept members all re-form in place does not wait that lease
//     out (round_policy.h, survivors_re_form_in_place); the cut-off group's steps are lost
//     (c below keeps its state from coming back); (b) no round trains once a newer round of
//     its job has trained (the fence: a superseded group never comes back). Steps: a training group
//     applies one step every options.step_time from the step it continued from, its agreed step:
//     that of its members that carry live state, taking those whose state is of the newest round
//     any of them trained in and the smallest step among them (as trainer/live_state.h agrees it);
//     when every member started cold, the job's checkpoint (the newest multiple of
//     options.checkpoint_steps a group reached, published only by a round no older than the
//     checkpoint's: round-fenced). The job's steps form one line: each group continues it from its
//     agreed step (a cold restart from the checkpoint rolls back the steps after it: counted as
//     lost, not applied twice). (c) no group continues from live state of a round that a newer
//     round of the job superseded by training after it: that state's branch was left behind, and
//     continuing it would apply the steps after its step a second time. Violations name the seed.
// 10. a voter's leader half never skips a job as settled whose plan would not have been empty
//     (options.core.verify_leader_skips: it plans such jobs anyway and counts the misses).
// At the end (final_problem, after heal + restart_all + settling): every acknowledged job is in
// every live voter's table, and the live voters' tables are identical; unsettled() is nullopt
// once every request is acknowledged, the voters applied what the leader committed, and every
// job succeeded after running or runs its current round's workers on up daemons of the
// generation its rank map names (but see tolerate_known_stuck_rounds).
// Ownership: the cluster owns its Simulator (so the processes) and a temp directory for the
// daemons' state_dirs, removed with it. Thread safety: none. Errors: misuse aborts loudly.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "daemon/rendezvous/fencing.h"
#include "daemon/rendezvous/job_spec.h"
#include "daemon/rendezvous/job_table.h"
#include "tests/sim/node_core_process.h"
#include "tests/sim/simulator.h"
#include "tests/support/temp_dir.h"

namespace elastic::sim {

struct NodeCoreClusterOptions {
  NodeCoreOptions core;  // daemons, voters, slots, timings, worker behaviour
  LinkModel link{};
  Duration call_timeout = std::chrono::seconds(5);  // one client call; retried after
  Duration client_retry = std::chrono::seconds(1);  // after an error reply
  Duration stale_slack = std::chrono::seconds(3);   // checker 6 (RoundStart resends, loss)
  // A round's ranks depend on each other: when one leaves abnormally (killed, crashed, its
  // daemon gone), the others of that (job, round), and any that start in it later, exit 69 this
  // much later, as elastic-trainer does when a collective or the store loses a peer (a TCP
  // reset: round_leader.cc's failure grace assumes ~0.2 s). 0: ranks are independent.
  Duration peer_loss_exit = std::chrono::milliseconds(200);
  std::uint32_t max_restarts = 50;  // of every submitted job
  // Two liveness bugs of RoundService (rendezvous/leases) that these scenarios hit; while they
  // stand, unsettled() counts a job that has shown exactly one of these states for 60 s as
  // settled and lists it in known_stuck() (turn this off to see them fail):
  //  1. a member's lease ran out (it could not reach the leader for lease_duration) and it
  //     fenced itself out of the round "until a new round names it": SIGKILLed workers are no
  //     worker failure and the member stays alive, so no new round ever comes; the job stays
  //     running (or rendezvous, when it fenced before acknowledging) with those ranks gone;
  //  2. a member the job tier declared lost is re-placed only once LeaseGranter::may_replace()
  //     says its lease ran out, but leases are per node and the leader keeps renewing it (it
  //     is still in this or another active round; it may be the leader itself), and its peers
  //     re-report the loss every second, so the job waits forever with its workers failed.
  // A stuck round keeps its slots: once the stuck rounds are the only active ones, a job waiting
  // for a round (pending, recovering) that cannot get min_nodes nodes besides their slots passes
  // too.
  bool tolerate_known_stuck_rounds = false;
  // Checker 6's lease half reads every daemon with workers after every event; off, it runs in
  // drive_clients() only (large clusters).
  bool lease_check_every_event = true;
  // Checker 8: read() may be used, and every committed table state is kept while a read that
  // may show it is outstanding. Off, read() aborts and applied tables are not looked at.
  bool check_reads = false;
  // Checker 9a: how long an older group of a job may go on training after a newer one formed.
  // nullopt: rendezvous.lease_duration + 200 ms (the cut-off side's lease, and a pass to act on
  // its end); zero: never, not even for a moment.
  std::optional<Duration> group_overlap;
  // Checker 9's step model: a training group's step time, and the checkpoint interval in steps.
  Duration step_time = std::chrono::milliseconds(100);
  std::int64_t checkpoint_steps = 10;
};

// The settings the scenarios share: the netns tests' short timers (tests/integ).
NodeCoreClusterOptions default_cluster_options();

// The benches' large clusters (bench/sim_cluster): `daemons` daemons on the shipped timing
// defaults, 3 Raft voters that everyone joins through (as a deployment would), no per-user
// caps (one client submits everything), checker 6's lease half only in drive_clients(). The
// link and the workers are the caller's.
NodeCoreClusterOptions shipped_cluster_options(std::size_t daemons);

struct NodeCoreCounters {
  std::uint64_t requests = 0;        // distinct client requests
  std::uint64_t attempts = 0;        // calls incl. retries
  std::uint64_t error_replies = 0;   // calls answered with an error (then retried)
  std::uint64_t acknowledged = 0;    // requests a client saw acknowledged
  std::uint64_t rounds_opened = 0;   // distinct committed (job, round)
  std::uint64_t open_proposals = 0;  // OpenRound entries leaders appended
  std::uint64_t spawns = 0;
  std::uint64_t exits = 0;
  std::uint64_t worker_crashes = 0;  // injected
  std::uint64_t peer_losses = 0;     // peer-loss exits scheduled (options.peer_loss_exit)
  std::uint64_t round_starts = 0;    // RoundStarts delivered
  std::uint64_t round_start_bytes = 0;  // ... their bodies' bytes
  std::uint64_t stale_starts = 0;    // fence refusals of crashed processes (summary() adds up)
  std::uint64_t crashes = 0;
  std::uint64_t restarts = 0;
  std::uint64_t partitions = 0;
  std::uint64_t voters_lost = 0;
  std::uint64_t reads = 0;                // read calls (checker 8)
  std::uint64_t reads_at_deposed = 0;     // ... at a daemon that had led and led no more
  std::uint64_t reads_checked = 0;        // answered with data, found linearizable
  std::uint64_t reads_during_writes = 0;  // ... while the table moved (lo < hi)
  std::uint64_t read_errors = 0;          // answered with an error (nothing to check)
  // The worker channel and checker 9.
  std::uint64_t live_spawns = 0;        // workers started that speak the channel live
  std::uint64_t offers = 0;             // offers of a newer round a live worker read
  std::uint64_t reforms = 0;            // ... and joined in place (same worker id)
  std::uint64_t intact_offers = 0;      // offers read that said the worker's group is intact
  std::uint64_t intact_but_broken = 0;  // ... while a rank of that group had exited abnormally
                                        // (a race the trainer's safety abort covers)
  std::uint64_t groups_trained = 0;     // groups that formed and trained
  std::uint64_t steps_applied = 0;      // by all groups
  std::uint64_t steps_rolled_back = 0;  // lost at re-formations and cold restarts
  std::uint64_t group_overlaps = 0;     // an older group trained on beside a newer one ...
  Duration longest_overlap{};           // ... for at most this long
};

// What a request asks besides its sizes (rendezvous::JobSpec's fields of the same names).
struct SubmitExtras {
  std::int32_t priority = 0;
  bool preemptible = false;
  // How long its workers run before they exit 0 (SimLauncher's SIM_RUNTIME_MS); nullopt:
  // options.core.launcher.job_runtime.
  std::optional<Duration> runtime;
};

class NodeCoreCluster : public NodeCoreObserver {
 public:
  NodeCoreCluster(std::uint64_t seed, NodeCoreClusterOptions options);
  ~NodeCoreCluster() override;
  NodeCoreCluster(const NodeCoreCluster&) = delete;
  NodeCoreCluster& operator=(const NodeCoreCluster&) = delete;

  Simulator& sim() { return sim_; }
  const NodeCoreClusterOptions& options() const { return options_; }
  std::size_t daemons() const { return options_.core.daemons; }
  std::size_t voters() const { return options_.core.voters; }
  NodeCoreProcess* process(NodeId id);  // nullptr while down
  std::optional<NodeId> leader();       // the up leader in the highest term
  // A voter's applied job table (nullptr while down or for a non-voter).
  const rendezvous::JobTable* table(NodeId id);

  void crash(NodeId id);
  void restart(NodeId id);
  void lose(NodeId id);  // for good: never restarted
  bool lost(NodeId id) const { return lost_.contains(id); }
  void partition(const std::vector<std::vector<NodeId>>& groups);
  void heal() { sim_.heal(); }
  void restart_all();

  // A new client request through a random up daemon; returns its index.
  std::size_t submit(std::uint32_t min_nodes, std::uint32_t max_nodes,
                     std::uint32_t workers_per_node = 1, SubmitExtras extras = {});
  // Retries due requests (call every ~100 ms of virtual time), and runs the polled checks.
  void drive_clients();
  // A read at up daemon `via`: "jobs", or "job" of `job` when not empty; checker 8 checks its
  // answer. Needs options.check_reads.
  void read(NodeId via, const std::string& job = "");
  // A read at a random up daemon: half of them at one that has led in its current generation
  // (the leader, or a deposed leader that may not know it yet), and one in three a "job" of a
  // random acknowledged job.
  void read_random();
  // A random live worker exits with status 1; false when none runs.
  bool crash_worker();
  // A live worker on daemon `node` exits with status 1 (the first by worker id); false when
  // none runs there.
  bool crash_worker_on(NodeId node);

  // The next OpenRound a leader appends crashes that leader right after the event, or, with
  // `after_commit`, right after the event in which it applied it.
  void arm_leader_crash_on_open(bool after_commit) { crash_arm_ = after_commit ? 2 : 1; }
  bool leader_crash_fired() const { return crash_fired_; }
  std::uint64_t open_proposals_by(NodeId id) const {
    const auto it = open_proposals_by_.find(id);
    return it == open_proposals_by_.end() ? 0 : it->second;
  }

  // Heals the network, restarts every daemon not lost for good and runs (clients driven) until
  // unsettled() is nullopt: true; false on a checker's violation or once `limit` has passed.
  bool settle(Duration limit, Duration poll = std::chrono::milliseconds(100));
  bool all_acknowledged() const;
  std::optional<std::string> unsettled();
  // Jobs the last unsettled() let pass as stuck in a known liveness bug -> which.
  const std::map<std::string, std::string>& known_stuck() const { return known_stuck_; }
  std::optional<std::string> final_problem();
  // The unfinished jobs of the leader's table, their rounds and rank maps (for failure messages).
  std::string describe_jobs();
  // Calls `watcher` with every committed table state, in log order, as the first daemon to
  // apply its index shows it (a scenario's own checks; a watcher may note_violation()).
  void watch_committed(std::function<void(const rendezvous::JobTable&)> watcher) {
    committed_watcher_ = std::move(watcher);
  }
  // Stops the run with `problem` (a scenario's own checker).
  void note_violation(std::string problem);
  // The job of request `name` in the leader's table.
  std::optional<rendezvous::JobRecord> job_by_name(const std::string& name);

  NodeCoreCounters& counters() { return counters_; }
  std::size_t live_workers() const { return live_.size(); }
  // Workers of job `job_id` started so far.
  std::uint64_t spawns_of(const std::string& job_id) const {
    const auto it = spawns_by_job_.find(job_id);
    return it == spawns_by_job_.end() ? 0 : it->second;
  }
  std::string summary();

  // NodeCoreObserver.
  void on_spawn(const SimWorker& worker) override;
  void on_exit(const SimWorker& worker, const spawner::WorkerExit& exit) override;
  void on_offer(const SimWorker& worker, const worker_channel::RoundOffer& offer) override;
  void on_reform(const SimWorker& worker, std::uint64_t old_round) override;
  void on_training(const SimWorker& worker, const SimSeat& seat, bool training) override;
  void on_reply(NodeId node, std::uint64_t generation, const node::CallReply& reply) override;
  void on_round_start(NodeId node, std::uint64_t generation, const node::RoundStartStamp& start,
                      std::size_t bytes, bool taken) override;
  void on_persist(NodeId node, const consensus::Persist& persist) override;
  void on_applied(NodeId node, const rendezvous::JobTable& table) override;

 private:
  struct Request {
    rendezvous::JobSpec spec;  // attempt k > 0 submits it as "<name>.<k>"
    std::uint32_t attempts = 0;
    TimePoint next_try{};
    std::optional<std::string> job_id;  // acknowledged
    std::string acknowledged_name;      // the name of the attempt acknowledged
    std::string last_error;
  };
  using WorkerKey = std::pair<NodeId, spawner::WorkerId>;
  using CallKey = std::tuple<NodeId, std::uint64_t, std::uint64_t>;  // (daemon, generation, call)
  // Checker 8: a read called and not answered yet.
  struct Read {
    std::string verb;  // "jobs" or "job"
    std::string job;   // the id a "job" read asks for
    std::string who;   // "d<k> (gen <g>)"
    TimePoint invoked{};
    consensus::Index lo = 0;  // the newest committed state when it was called
  };
  // A job as one committed table state holds it, shared by the states it did not change in,
  // with its JSON as the "jobs" and "job" replies show it (made when first compared).
  struct ViewedJob {
    rendezvous::JobRecord record;
    mutable std::optional<std::string> listed;
    mutable std::optional<std::string> shown;
  };
  using TableView = std::map<std::string, std::shared_ptr<const ViewedJob>>;

  void attempt(std::size_t index, NodeId via);
  bool fail_live_worker(WorkerKey worker);  // exits 1 (crash_worker, crash_worker_on)
  std::optional<std::string> check();
  void record_table(NodeId id, const rendezvous::JobTable& table);
  void check_spawn(const SimWorker& worker);
  // Checker 2 for a worker started (`what`: "started") or re-formed into its round.
  void check_committed(const SimWorker& worker, const std::string& what);
  // Checker 9: a group became complete, or stopped being.
  void group_trains(const std::string& job, std::uint64_t round);
  void group_stops(const std::string& job, std::uint64_t round);
  Duration group_overlap_allowed() const;
  void check_overlaps();
  std::string seed_text() const { return "(seed=" + std::to_string(sim_.seed()) + ")"; }
  void check_stale_workers();
  void check_leases(NodeId id);
  void count_stale_starts(NodeId id);
  void check_read(const Read& read, const node::CallReply& reply);
  void prune_reads();

  // Declared first: destroyed after the processes, which write under it.
  testing::TempDir dir_;
  NodeCoreClusterOptions options_;
  std::vector<Request> requests_;
  // (daemon, generation, call id) -> (request, the job name that call submitted).
  std::map<std::tuple<NodeId, std::uint64_t, std::uint64_t>, std::pair<std::size_t, std::string>>
      calls_;
  std::set<NodeId> lost_;
  std::optional<std::string> violation_;
  // Checker 1: committed rank maps, and when each (job, round) was first seen applied.
  std::map<std::pair<std::string, std::uint64_t>, rendezvous::RankMap> ranks_;
  // Checker 6: per job its newest committed round and when it was first seen; when it ended.
  std::map<std::string, std::pair<std::uint64_t, TimePoint>> newest_round_;
  std::map<std::string, TimePoint> ended_;
  std::map<std::tuple<NodeId, std::uint64_t, std::string, std::uint64_t>, TimePoint> fenced_;
  bool stale_dirty_ = true;
  TimePoint stale_due_ = kNever;
  // Checker 3, in RoundFence's order (round, then term): per (node, generation, job) the
  // newest RoundStart received, and the highest term each round came with; per (daemon, job)
  // the newest acted on. A spawn is stamped with the highest term its round came with.
  std::map<std::tuple<NodeId, std::uint64_t, std::string>, rendezvous::RoundStamp> seen_;
  std::map<std::tuple<NodeId, std::uint64_t, std::string, std::uint64_t>, std::uint64_t>
      round_terms_;
  std::map<std::pair<std::string, std::string>, rendezvous::RoundStamp> acted_;
  // Checker 4: per voter the (generation, applied index) last recorded; digests by index.
  std::map<NodeId, std::pair<std::uint64_t, consensus::Index>> recorded_;
  std::map<consensus::Index, std::pair<std::uint64_t, NodeId>> digests_;
  // Checker 5 and the worker ledger.
  std::map<WorkerKey, SimWorker> live_;
  std::map<std::pair<NodeId, std::uint32_t>, spawner::WorkerId> slots_;
  std::map<std::string, std::uint64_t> spawns_by_job_;
  std::vector<SimWorker> unchecked_spawns_;  // checker 2 runs after the event's table records
  std::vector<SimWorker> unchecked_reforms_;
  // Live workers that accepted an offer of a round they have not joined yet -> that round
  // (checker 6 counts them in it: their daemon moved them there).
  std::map<WorkerKey, std::uint64_t> offered_;
  // (job, round)s one of whose ranks left abnormally, and workers spawned into one this event
  // (with that round).
  std::set<std::pair<std::string, std::uint64_t>> broken_;
  std::vector<std::pair<WorkerKey, std::uint64_t>> pending_peer_loss_;
  // Checker 9. Per (job, round) the ranks held by training workers; per job its line of steps;
  // per live worker the state it carries (its step, and the round it trained that in).
  struct TrainingGroup {
    std::uint64_t world = 0;
    std::map<std::uint32_t, WorkerKey> held;
    bool training = false;  // every rank held
    TimePoint since{};      // when it became complete
    std::int64_t base = 0;  // the step it continued from
  };
  struct JobSteps {
    std::uint64_t newest_trained = 0;  // the newest round that trained
    std::int64_t top = 0;              // the step the job's line of steps reached ...
    std::uint64_t top_round = 0;       // ... in the round that trained last
    std::int64_t checkpoint = 0;
    std::uint64_t checkpoint_round = 0;
  };
  struct Carried {
    std::int64_t step = 0;
    std::uint64_t round = 0;
  };
  std::map<std::pair<std::string, std::uint64_t>, TrainingGroup> training_;
  std::map<std::string, JobSteps> steps_;
  std::map<WorkerKey, Carried> carried_;
  // Checker 9a: (job, older round, newer round) training side by side -> since when.
  std::map<std::tuple<std::string, std::uint64_t, std::uint64_t>, TimePoint> overlaps_;
  int crash_arm_ = 0;  // 0 off, 1 on append, 2 on apply
  std::optional<std::pair<NodeId, consensus::Index>> crash_watch_;
  std::optional<NodeId> crash_now_;
  bool crash_fired_ = false;
  std::map<NodeId, std::uint64_t> open_proposals_by_;
  std::map<NodeId, std::uint64_t> stale_counted_;  // RoundService::stale_starts counted so far
  NodeCoreCounters counters_;
  std::map<std::string, std::string> known_stuck_;
  std::map<std::string, TimePoint> stuck_since_;  // job -> since when it shows a known signature
  // Checker 8: committed table states by applied index (from the oldest outstanding read's lo
  // on), reads not answered yet, replies that came out of the call that made them, and the
  // (daemon, generation)s that have led.
  std::map<consensus::Index, TableView> views_;
  std::map<CallKey, Read> reads_;
  bool in_read_call_ = false;
  std::vector<std::pair<CallKey, node::CallReply>> early_replies_;
  std::set<std::pair<NodeId, std::uint64_t>> led_;
  std::function<void(const rendezvous::JobTable&)> committed_watcher_;
  consensus::Index watched_index_ = 0;  // the newest index committed_watcher_ was shown
  // The simulated trainers' groups; the launchers detach from it when the processes go.
  SimGroups groups_;
  // Declared last: destroyed first, while everything its processes report to still exists.
  Simulator sim_;
};

}  // namespace elastic::sim
