// The control plane on the simulator: Raft + the replicated JobTable + the rendezvous planner +
// per-daemon round fencing, as one SimProcess per daemon, and ControlPlaneCluster, a scenario
// harness with clients and safety checkers.
//
// Model (a simplified daemon; daemon/node/round_service.cc and job_service.cc are the real ones):
//  - `daemons` daemons ("d<k>" at address "cp-<k>"); daemons 0 .. voters-1 run the real
//    consensus::Raft with their durable state in the simulator's storage (kept across crash and
//    restart, laid out by tests/sim/raft_storage.h, written in the Effects order: persist,
//    send, restore, apply). Every voter applies
//    the committed entries to its own rendezvous::JobTable and compacts every `compact_every`
//    applied entries with JobTable::snapshot() as the snapshot data, so restarts and lagging
//    voters rebuild the table through JobTable::restore. Non-voters hold no table (Raft has no
//    learners yet) but are job members like everyone.
//  - Liveness: every daemon sends a heartbeat (name, generation) to every voter each 100 ms of
//    virtual time; the leader counts a daemon alive if heard within 500 ms (itself always).
//    This is the leader's own view, NOT the simulator's up-state oracle, so partitions and
//    lost packets make it wrong exactly the way membership can be wrong. The leader answers
//    heartbeats with its address, which non-voters use to forward client submissions.
//  - The leader's planner loop (every 100 ms, like RoundService::lead): it plans only once it
//    applied an entry of its own term; per job at most one command in flight (until its index
//    is applied or the term changes); candidates are the alive daemons with the slots and a
//    store port that the daemon's own rendezvous::NodeLedger leaves the job (each daemon
//    offers slots_per_node; the table's rounds, the proposals in flight and each round decided
//    earlier in the pass hold theirs); rendezvous::plan() decides; after an
//    OpenRound is applied the leader sends RoundStart{term, committed round} to every member
//    not yet acknowledged (resent each second); once all members acknowledged it proposes
//    SetJobState(running); a job that ran `job_runtime` with nothing to fix is proposed
//    succeeded (its workers "exited 0"), which frees its nodes for the next jobs.
//  - Members: every RoundStart goes through the daemon's RoundFence (volatile: a restart is a
//    new generation); a stale one is ignored; otherwise, if the round names this daemon
//    (name, generation), the daemon ACTS on it (reported to the harness) and acknowledges.
//  - Clients (ControlPlaneCluster::submit/drive_clients): a client request goes to a random up
//    daemon as SubmitJob{client_id "d<k>/<call>", seq 1}; a voter that leads proposes it, any
//    other daemon forwards it to the leader it knows. The leader answers the daemon the client
//    called once the entry is applied at the (index, term) it proposed. Unacknowledged
//    requests are retried every second through a random up daemon with the same client id and
//    seq. Each request's job name is unique ("c<n>"), so the checkers can count creations.
//
// Checkers (simulator invariants after every event, plus end-of-run checks):
//  1. one (job, round) never has two rank maps in any voter's applied table, and a member acts
//     only on the committed rank map of that (job, round);
//  2. no daemon acts on a round older (round, then term) than one it has seen (per
//     generation) or acted on (per daemon name, across generations);
//  3. (final_problem) every acknowledged request's job exists in every live voter's table,
//     with the acknowledged id; no request created two jobs anywhere (per table, by name, and
//     per process lifetime by counting non-duplicate SubmitJob results);
//  4. voter tables are byte-identical (JobTable::snapshot(), by 64-bit FNV-1a digest) at
//     equal applied Raft index;
//  5. (settled) every acknowledged job is succeeded after having run, or running in a round
//     whose members are all up in the generation named;
//  6. never two workers on a slot: in no voter's applied table do the rounds of unfinished jobs
//     hold more of a node's slots than slots_per_node (a round's workers keep their slots
//     until the job's next round or its end).
// Thread safety: none (one simulator thread). Ownership: the cluster owns its Simulator and,
// through it, the processes. Errors: misuse and broken storage abort loudly.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "daemon/consensus/raft.h"
#include "daemon/rendezvous/fencing.h"
#include "daemon/rendezvous/job_table.h"
#include "daemon/rendezvous/planner.h"
#include "tests/sim/simulator.h"

namespace elastic::sim {

// Wire of the simulated control plane (std::any bodies of simulator packets).
struct CpRaft {
  consensus::Message message;
};
struct CpHeartbeat {
  std::string name;
  std::uint64_t generation = 0;
  std::string address;
};
struct CpHeartbeatAck {
  std::string leader_address;
};
struct CpSubmit {  // a client request forwarded to the leader
  std::string client_id;
  std::uint64_t client_seq = 0;
  rendezvous::JobSpec spec;
  std::string reply_to;
};
struct CpSubmitReply {
  std::string client_id;
  rendezvous::ApplyResult result;
};
struct CpRoundStart {
  std::uint64_t term = 0;
  rendezvous::JobState state = rendezvous::JobState::kRendezvous;
  rendezvous::OpenRound round;
};
struct CpRoundAck {
  std::string job_id;
  std::uint64_t round = 0;
  std::string node;
  std::uint64_t generation = 0;
};

struct ControlPlaneOptions {
  std::size_t daemons = 5;
  std::size_t voters = 3;
  std::size_t compact_every = 25;  // 0: never compact
  consensus::RaftConfig raft{};
  Duration heartbeat_interval = std::chrono::milliseconds(100);
  Duration alive_window = std::chrono::milliseconds(500);
  Duration plan_interval = std::chrono::milliseconds(100);
  Duration start_resend = std::chrono::seconds(1);
  Duration job_runtime = std::chrono::seconds(6);  // 0: jobs never succeed
  Duration client_retry = std::chrono::seconds(1);
  std::uint32_t slots_per_node = 1;  // worker slots every daemon offers
  config::RendezvousConfig rendezvous{};
  LinkModel link{};
};

// What processes report to the harness (the cluster implements it).
class ControlPlaneObserver {
 public:
  virtual ~ControlPlaneObserver() = default;
  // A voter applied the entry at `index` (a command or not) to `table`; `result` for commands.
  virtual void on_applied(NodeId node, consensus::Index index, const consensus::Entry& entry,
                          const std::optional<rendezvous::ApplyResult>& result,
                          const rendezvous::JobTable& table) = 0;
  // A voter reset its table from a snapshot ending at `index`.
  virtual void on_restored(NodeId node, consensus::Index index,
                           const rendezvous::JobTable& table) = 0;
  // A daemon received a RoundStart: `acted` when it passed the fence and names this daemon.
  virtual void on_round_start(NodeId node, std::uint64_t generation, const CpRoundStart& start,
                              rendezvous::RoundFence::Verdict verdict, bool acted) = 0;
  // A client's request was answered at the daemon it called.
  virtual void on_client_reply(const CpSubmitReply& reply) = 0;
  // The leader proposed `command` at (index, term).
  virtual void on_proposed(NodeId node, consensus::Index index, consensus::Term term,
                           const rendezvous::Command& command) = 0;
};

class ControlPlaneProcess : public SimProcess {
 public:
  ControlPlaneProcess(const NodeInfo& info, const ControlPlaneOptions& options,
                      ControlPlaneObserver* observer);

  void start(SimContext& ctx) override;
  void on_packet(SimContext& ctx, const Packet& packet) override;
  void on_timer(SimContext& ctx) override;
  TimePoint next_deadline() const override;

  // A client request at this daemon, outside any simulator event.
  void submit(SimContext& ctx, const std::string& client_id, std::uint64_t seq,
              const rendezvous::JobSpec& spec);

  bool is_voter() const { return raft_.has_value(); }
  // Voters only.
  const consensus::Raft& raft() const { return *raft_; }
  const rendezvous::JobTable& table() const { return table_; }
  bool leading() const { return raft_ && raft_->role() == consensus::Role::kLeader; }
  const std::string& name() const { return name_; }

  static std::string name_for(NodeId id) { return "d" + std::to_string(id); }
  static std::string address_for(NodeId id) { return "cp-" + std::to_string(id); }

 private:
  struct LeaderJob {
    std::uint64_t round_seen = 0;
    std::set<std::pair<std::string, std::uint64_t>> acked;
    TimePoint next_start{};
  };
  struct Pending {
    consensus::Term term = 0;
    std::string client_id;
    std::string reply_to;
  };

  void carry_out(SimContext& ctx);
  void apply_entry(SimContext& ctx, const consensus::Entry& entry);
  void propose_submit(SimContext& ctx, const CpSubmit& submit);
  void reply(SimContext& ctx, const std::string& to, CpSubmitReply reply);
  bool propose_command(SimContext& ctx, const std::string& job_id,
                       const rendezvous::Command& command);
  void lead(SimContext& ctx);
  void send_starts(SimContext& ctx, const rendezvous::JobRecord& job, LeaderJob& state);
  void on_round_start(SimContext& ctx, const std::string& from, const CpRoundStart& start);
  void on_round_ack(const CpRoundAck& ack);
  rendezvous::WallTime wall(TimePoint now) const;

  NodeInfo info_;
  std::string name_;
  ControlPlaneOptions options_;
  ControlPlaneObserver* observer_;
  std::optional<consensus::Raft> raft_;
  consensus::Effects effects_;
  rendezvous::JobTable table_;
  rendezvous::RoundFence fence_;
  TimePoint next_heartbeat_{};
  TimePoint next_plan_ = kNever;
  std::string leader_address_;  // non-voters: from heartbeat acks
  // Leader: when each (daemon, generation) was first heard (the planner's waiter order).
  std::map<std::pair<std::string, std::uint64_t>, rendezvous::WallTime> first_seen_;
  // Voters: when each daemon was last heard, with the generation it announced.
  std::map<std::string, std::pair<std::uint64_t, TimePoint>> heard_;
  // Leader only (cleared when the term changes or leadership is lost).
  consensus::Term leading_term_ = 0;
  std::map<std::string, LeaderJob> leader_jobs_;
  // job -> its proposal's index, and for an OpenRound the ranks and store port it holds.
  struct InFlight {
    consensus::Index index = 0;
    rendezvous::RankMap ranks;
    std::uint16_t store_port = 0;
  };
  std::map<std::string, InFlight> in_flight_;
  std::map<consensus::Index, Pending> pending_;  // client proposals by index
};

struct ControlPlaneCounters {
  std::uint64_t requests = 0;       // distinct client requests
  std::uint64_t attempts = 0;       // submissions incl. retries
  std::uint64_t deduplicated = 0;   // SubmitJob applies answered from the client session
  std::uint64_t acknowledged = 0;   // requests a client saw acknowledged
  std::uint64_t rounds_opened = 0;  // distinct committed (job, round)
  std::uint64_t open_proposals = 0;
  std::uint64_t acts = 0;  // RoundStarts acted on (kNewer or kSame)
  std::uint64_t stale_starts = 0;
  std::uint64_t crashes = 0;
  std::uint64_t restarts = 0;
  std::uint64_t partitions = 0;
  std::uint64_t voters_lost = 0;
};

class ControlPlaneCluster : public ControlPlaneObserver {
 public:
  ControlPlaneCluster(std::uint64_t seed, ControlPlaneOptions options);

  Simulator& sim() { return sim_; }
  const ControlPlaneOptions& options() const { return options_; }
  ControlPlaneProcess* process(NodeId id);
  std::optional<NodeId> leader();  // the up leader in the highest term

  void crash(NodeId id);
  void restart(NodeId id);
  // Permanently: the node is never restarted (restart_all skips it).
  void lose(NodeId id);
  bool lost(NodeId id) const { return lost_.contains(id); }
  void partition(const std::vector<std::vector<NodeId>>& groups);
  void heal() { sim_.heal(); }
  void restart_all();

  // A new client request through a random up daemon; returns its index.
  std::size_t submit(std::uint32_t min_nodes, std::uint32_t max_nodes,
                     std::uint32_t workers_per_node = 1);
  // Retries due requests (call every ~100 ms of virtual time).
  void drive_clients();

  // After this, any proposal of an OpenRound (or its apply, `after_commit`) by the leader
  // crashes that leader right after the event (once).
  void arm_leader_crash_on_open(bool after_commit) { crash_arm_ = after_commit ? 2 : 1; }
  bool leader_crash_fired() const { return crash_fired_; }

  // Every request acknowledged?
  bool all_acknowledged() const;
  // Check 5 plus every live voter caught up with the leader: nullopt when settled.
  std::optional<std::string> unsettled();
  // Check 3 and the table identity of live voters; nullopt if it holds.
  std::optional<std::string> final_problem();

  // OpenRound entries applied by `node` (this process lifetime included in the table).
  std::uint64_t open_rounds_in_table(NodeId node);
  // OpenRound proposals made by `node` (any of its lifetimes).
  std::uint64_t open_proposals_by(NodeId node) const {
    const auto it = open_proposals_by_.find(node);
    return it == open_proposals_by_.end() ? 0 : it->second;
  }
  ControlPlaneCounters& counters() { return counters_; }
  std::string summary() const;

  // ControlPlaneObserver.
  void on_applied(NodeId node, consensus::Index index, const consensus::Entry& entry,
                  const std::optional<rendezvous::ApplyResult>& result,
                  const rendezvous::JobTable& table) override;
  void on_restored(NodeId node, consensus::Index index, const rendezvous::JobTable& table) override;
  void on_round_start(NodeId node, std::uint64_t generation, const CpRoundStart& start,
                      rendezvous::RoundFence::Verdict verdict, bool acted) override;
  void on_client_reply(const CpSubmitReply& reply) override;
  void on_proposed(NodeId node, consensus::Index index, consensus::Term term,
                   const rendezvous::Command& command) override;

 private:
  struct Request {
    std::string client_id;
    rendezvous::JobSpec spec;
    TimePoint next_try{};
    std::optional<std::string> job_id;  // acknowledged
  };
  void note_violation(std::string problem);
  void record_table(NodeId node, consensus::Index index, const rendezvous::JobTable& table);
  std::optional<std::string> check_events();

  ControlPlaneOptions options_;
  Simulator sim_;
  std::vector<Request> requests_;
  std::map<std::string, std::size_t> request_by_client_;
  std::uint64_t calls_ = 0;
  std::set<NodeId> lost_;
  std::optional<std::string> violation_;
  // Check 1: committed rank maps.
  std::map<std::pair<std::string, std::uint64_t>, rendezvous::RankMap> ranks_;
  // Check 2: per (daemon, generation, job) the newest stamp seen; per (daemon, job) acted.
  std::map<std::tuple<NodeId, std::uint64_t, std::string>, rendezvous::RoundStamp> seen_;
  std::map<std::pair<NodeId, std::string>, rendezvous::RoundStamp> acted_;
  // Check 3: non-duplicate creations per (daemon, process generation, client).
  std::map<std::tuple<NodeId, std::uint64_t, std::string>, int> creates_;
  // Check 4: digest of the table at each applied index.
  std::map<consensus::Index, std::pair<std::uint64_t, NodeId>> digests_;
  int crash_arm_ = 0;  // 0 off, 1 on proposal, 2 on apply
  std::optional<std::pair<NodeId, consensus::Index>> crash_watch_;
  std::optional<NodeId> crash_now_;
  bool crash_fired_ = false;
  std::map<NodeId, std::uint64_t> open_proposals_by_;
  ControlPlaneCounters counters_;
};

}  // namespace elastic::sim
