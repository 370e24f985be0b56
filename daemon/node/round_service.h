// RoundService: turns the replicated job table into rounds on real daemons. It has a leader
// half and a member half; every daemon runs the member half, the Raft leader also the leader
// half.
//
// Leader half (lead(), on every pass of the node loop while this node leads):
//  - for each active job, the planner (rendezvous/planner.h) decides from the applied job
//    record, the usable nodes and the wait list; an open-round, recover or fail decision
//    becomes a command proposed to Raft (one in flight per job). Usable nodes: members that are
//    alive or suspect in cluster membership and not declared lost for this round by the job
//    tier. A node's slots (its node_info) are shared by the jobs whose rounds hold them, and a
//    NodeLedger (rendezvous/node_ledger.h) counts them per pass: the table's rounds, this
//    leader's proposals in flight, and every round decided earlier in the same pass, so no slot
//    is given twice. A new leader plans only once it applied an entry of its own term (before,
//    an earlier leader's round may still commit), and plans a job only once every live member
//    of its round told it its slots (node_info; each node sends it when it learns of a new
//    leader), or kNodeInfoResend after it became leader: a member whose slots it has not heard
//    yet would look lost. The store port of a round is a port of
//    [store_port_min, store_port_max] that no other round holds on its rank-0 node, not the
//    job's current one (its store may still be bound), and not one that node reported in use.
//  - the rank-0 member checks its port before starting workers and reports "store_port_busy"
//    {job, round, port, detail} when another process holds it: the leader leaves that port out
//    of that node's rounds for kBusyPortMemory and reopens the round with the same members on
//    another port, costing no restart, at most kMaxPortMoves times until the job runs; after
//    that, or with no port left, the conflict is a worker failure of that node (a restart; the
//    job fails with it once its restarts are used up), so a held port range never makes a job
//    loop.
//  - a worker failure whose node is then quarantined (see Quarantine) is a worker failure
//    whether the job goes on without the node or must wait for it: it costs a restart, so a
//    worker that can never start fails its job after max_restarts with the failure as reason.
//  - re-placing a lost member's work waits for LeaseGranter::may_replace(): its workers may
//    still run under a lease until then (a partitioned node stops them itself when its lease
//    runs out);
//  - once a round is committed, RoundStart (the committed OpenRound command and the leader's
//    term) goes to every member until it acknowledges; when all have, the leader commits
//    SetJobState(running). Members of a job that ended or is recovering get a RoundStart
//    carrying that state, so they stop watching it.
//  - job-tier reports from members (peer_lost, round_ack) arrive through on_report().
// Member half:
//  - RoundStart passes the RoundFence (a stale round or a deposed leader's copy is ignored);
//    a member of the round watches its peers with JobWatch (keepalives, indirect probes) and
//    reports a declared loss to the leader (repeated each second while the round stands);
//  - while in an active round it holds a lease (LeaseHolder) renewed from the leader; when the
//    lease runs out it logs and marks its rounds fenced (the supervisor's spawner stops the
//    workers).
//
// Messages: RoundStart (kRoundStart), the job tier's (kJobKeepalive..kJobProbeReply, codec in
// rendezvous/job_codec.h) and leases (kLeaseRequest/kLeaseGrant). Reports to the leader are
// kRoundReport messages (round_report.h: round_ack, store_port_busy, peer_lost, node_info,
// node_leaving, ...). For incidents (incidents.h) the supervisor also reports workers_stopped
// (a round's local workers are all gone; sent to the leader this daemon believes in even when
// it no longer watches the job) and forwards workers' progress; peer_lost carries
// last_heard_ms (the reporter's wall time of the lost peer's last job-tier message) and
// worker_failed at_ms.
//
// Thread safety: none; the node's loop thread owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/config/config.h"
#include "daemon/core/clock.h"
#include "daemon/core/time.h"
#include "daemon/membership/membership.h"
#include "daemon/node/consensus_host.h"
#include "daemon/node/incidents.h"
#include "daemon/node/round_codec.h"
#include "daemon/node/round_report.h"
#include "daemon/rendezvous/fencing.h"
#include "daemon/rendezvous/job_table.h"
#include "daemon/rendezvous/job_watch.h"
#include "daemon/rendezvous/lease.h"
#include "daemon/rendezvous/node_ledger.h"
#include "daemon/rendezvous/planner.h"
#include "daemon/wire/messages.h"

namespace elastic::node {

// What a member knows of one job's round (for status and tests).
struct MemberRound {
  std::string job;
  std::uint64_t term = 0;
  std::uint64_t round = 0;
  std::uint32_t first_rank = 0;
  std::uint32_t slots = 0;
  std::uint64_t world = 0;
  std::string store_endpoint;
  bool fenced = false;              // the lease ran out: the workers must not run
  rendezvous::JobWatchStats watch;  // the job tier's counters for this round
};

class RoundService {
 public:
  // An envelope (type and body set) for a daemon, at `address` ("" = its last known one).
  struct Send {
    std::string to;
    std::string address;
    wire::Envelope envelope;
  };
  // What the member half asks of the job supervisor. kRun: a round naming this daemon passed
  // the fence (when its workers run, the caller acknowledges it: acknowledge()). kStop: the job
  // has no round for this daemon any more (ended, recovering, not a member, fenced); `final`
  // when it will have none again here (it ended, or its new round leaves this daemon out).
  struct WorkerOrder {
    enum class Kind { kRun, kStop } kind = Kind::kRun;
    std::optional<RoundStart> start;  // kRun
    std::string job;                  // kStop
    bool graceful = false;
    std::string why;
    bool final = false;
  };

  // Wall times it stamps on events and failures come from `clock` (core/clock.h).
  // `config` is read where used (a reload replaces it); it must outlive this service.
  RoundService(std::string self, std::uint64_t generation, const config::Current& config,
               std::uint64_t seed, const Clock& clock = system_clock());

  // Output of the calls since the last take, in the order it was made.
  std::vector<Send> take_sends() { return std::exchange(sends_, {}); }
  std::vector<WorkerOrder> take_orders() { return std::exchange(orders_, {}); }
  // The workers of `start`'s round run here (a kRun order was carried out): the leader is told
  // ("round_ack") while that round still stands for this daemon.
  void acknowledge(const RoundStart& start);

  // Leader half. `leading` false makes it forget leader state. Call it when lead_due(): the
  // caller builds the member list only then, since the loop runs on every received message.
  void lead(TimePoint now, bool leading, const rendezvous::JobTable& table,
            const std::vector<membership::MemberView>& members, ConsensusHost* consensus);
  // True when lead() has work: leadership changed, planning or a RoundStart resend is due, or a
  // proposal of this leader was applied or a member reported since the last pass.
  bool lead_due(TimePoint now, bool leading) const {
    return leading != leading_ || (leading && now >= next_lead_);
  }
  // A kRoundReport envelope another daemon sent this leader. Its body is decoded first
  // (round_report.h); one that does not decode is dropped, logged at debug and counted
  // (malformed_reports()): it comes from another daemon, and nothing it holds may stop this one.
  void on_report(TimePoint now, const wire::Envelope& envelope);
  // A decoded report from daemon `from` (generation `generation`); an exception while acting on
  // it is caught, logged and counted in malformed_reports() too.
  void on_report(TimePoint now, const std::string& from, std::uint64_t generation,
                 const RoundReport& report);
  std::uint64_t malformed_reports() const { return malformed_reports_; }

  // Member half.
  void on_envelope(TimePoint now, const wire::Envelope& envelope);
  // The transport saw the connection to `peer` drop: its round watches suspect it at once.
  void on_peer_disconnected(TimePoint now, const std::string& peer);
  void tick(TimePoint now);
  TimePoint next_deadline() const;

  // This daemon drains (SIGTERM): tells the leader of each of its rounds "node_leaving"; call
  // it again every second or so while draining (reports may be lost). The leader then places
  // no new work on this (node, generation), excuses worker failures of the rounds it is in (a
  // drain stops workers on purpose; elastic-trainer's other ranks exit 75 with it), keeps its
  // rounds until it leaves membership, and then re-plans them without it as a lost member
  // (no restart counted) without waiting for its lease: a node leaves only once its workers
  // are gone.
  void announce_leaving();

  // A report about `report.job` to the leader of its round (the job supervisor's round_ack,
  // worker_failed, workers_done, ...); dropped when this daemon has no round of that job, but
  // for workers_stopped, which goes to the leader it believes in.
  void report_for(const RoundReport& report);
  // The leader this daemon believes in, and this node's worker slots: the leader learns every
  // node's slots from a "node_info" report, sent when the leader changes and every
  // kNodeInfoResend.
  void set_leader(TimePoint now, const std::string& leader, const std::string& address);
  void set_slots(std::uint32_t slots) { slots_ = slots; }

  std::vector<MemberRound> member_rounds() const;
  // Leader half: the slots each (node, generation) reported (for `elasticctl nodes`).
  const std::map<std::string, std::pair<std::uint64_t, std::uint32_t>>& node_slots() const {
    return node_slots_;
  }
  std::uint64_t stale_starts() const { return stale_starts_; }

  // Events and recovery incidents (incidents.h). Incidents, their RecoveryStats, rounds_opened
  // and the round/drain/election events are this leader's volatile memory: a new leader starts
  // empty (open incidents are given up when this node stops leading). Membership events are
  // recorded on every daemon (record_event), so a new leader keeps what it saw as a follower.
  using Incident = node::Incident;
  using RecoveryStats = node::RecoveryStats;
  const std::deque<Incident>& incidents() const { return incidents_.incidents(); }
  const std::map<std::string, RecoveryStats>& recovery_stats() const {
    return incidents_.stats_by_cause();
  }
  // Rounds this leader committed since it started leading.
  std::uint64_t rounds_opened() const { return rounds_opened_; }
  void record_event(ClusterEvent event) { incidents_.record(std::move(event)); }
  const IncidentLog& incident_log() const { return incidents_; }

 private:
  const Clock* clock_;
  struct LeaderJob {
    std::uint64_t round_seen = 0;  // the round the fields below are about
    bool in_flight = false;        // a proposal for this job awaits its commit
    std::set<std::string> acked;   // members that acknowledged round_seen
    // Declared lost by the job tier -> until when it stays out of this job's rounds. Kept
    // across rounds: a daemon killed a moment ago is still alive in cluster membership for
    // seconds, and must not be taken back in as a newcomer (a restarted daemon is a new
    // generation and may). Expires after kLostMemory, for a false declaration.
    std::map<std::pair<std::string, std::uint64_t>, TimePoint> lost;
    std::set<std::string> done;  // members whose workers all exited 0 in round_seen
    std::optional<rendezvous::WorkerFailure> failure;  // of round_seen
    std::string failure_node;                          // the node that reported it
    TimePoint failure_seen{};  // when; acted on only after the failure grace (see plan_job)
    TimePoint next_start{};    // when to (re)send RoundStart to unacked members
    TimePoint ended_until{};   // keep telling members of an ended job until then
    // A "store_port_busy" report about round_seen: who sent it, the port, what holds it.
    struct PortConflict {
      std::string node;
      std::uint64_t generation = 0;
      std::uint16_t port = 0;
      std::string detail;
    };
    std::optional<PortConflict> port_busy;
    // Rounds reopened for a store port conflict since the job last ran (kept across rounds).
    std::uint32_t port_moves = 0;
  };
  struct Watched {
    MemberRound info;
    std::unique_ptr<rendezvous::JobWatch> watch;
    std::vector<rendezvous::PeerLost> declared;  // re-reported while the round stands
    std::map<std::string, TimePoint> heard;      // peer -> its last job-tier message (incidents)
    std::string leader;
    std::string leader_address;
  };

  // usable: node -> (its member view, the slots other jobs leave it). A round it decides to open
  // is held in `ledger` at once.
  void plan_job(
      TimePoint now, const rendezvous::JobRecord& job,
      const std::map<std::string, std::pair<const membership::MemberView*, std::uint32_t>>& usable,
      rendezvous::NodeLedger& ledger, ConsensusHost& consensus);
  // Proposes the command that carries out `decision` for `job` (one in flight per job).
  void propose_decision(TimePoint now, const rendezvous::JobRecord& job,
                        const rendezvous::Decision& decision, rendezvous::NodeLedger& ledger,
                        ConsensusHost& consensus);
  // A store port for `job`'s next round on `node` (generation `generation`) as rank 0: free in
  // `ledger` and not reported in use, else free in `ledger` (the member checks it), else the
  // range's port for that round.
  std::uint16_t store_port_for(TimePoint now, const rendezvous::JobRecord& job,
                               const std::string& node, std::uint64_t generation,
                               const rendezvous::NodeLedger& ledger, bool strict) const;
  // Acts on a "store_port_busy" report of `job`'s rank-0 member: remembers the ports in use
  // and proposes the round again on another port, or records the conflict as that node's
  // worker failure. True when it proposed.
  bool on_port_conflict(TimePoint now, const rendezvous::JobRecord& job, LeaderJob& state,
                        rendezvous::NodeLedger& ledger, ConsensusHost& consensus);
  void send_starts(TimePoint now, const rendezvous::JobRecord& job, LeaderJob& state,
                   const std::map<std::string, std::string>& addresses, std::uint64_t term);
  void on_round_start(TimePoint now, const wire::Envelope& envelope);
  void carry_out(TimePoint now, rendezvous::JobWatchEffects& effects);
  void report(const Watched& watched, const RoundReport& report);
  // To the leader at `address` as a kRoundReport, or straight to on_report() on the leader.
  void send_report(const std::string& leader, const std::string& address,
                   const RoundReport& report);
  void carry_out_lease(TimePoint now, rendezvous::LeaseHolderEffects& effects);
  void update_lease_want(TimePoint now);

  std::string self_;
  std::uint64_t generation_;
  const config::Current& config_;
  std::uint64_t seed_;
  std::vector<Send> sends_;
  std::vector<WorkerOrder> orders_;

  // Leader half.
  rendezvous::LeaseGranter granter_;
  bool leading_ = false;
  std::map<std::string, LeaderJob> leader_jobs_;
  // job -> the OpenRound this leader proposed and has not seen applied: its ranks and store
  // port hold their nodes (NodeLedger) until the proposal's completion.
  std::map<std::string, std::pair<rendezvous::RankMap, std::uint16_t>> proposed_;
  std::map<std::pair<std::string, std::uint64_t>, rendezvous::WallTime> first_seen_;
  std::set<std::string> in_rounds_;  // nodes in an active round (lease eligibility)
  // A node whose workers of one job failed repeatedly sits out that job (quarantine):
  // the first failure is forgiven (it may be a peer's fault); from the second on the node is
  // left out of the job's rounds for as long as the job reaches min_nodes without it, and when
  // the job does need it, only after a time out that doubles with each failure, from
  // max(restart_backoff, 10 s) up to 10 minutes. Volatile: a new leader starts with none (the
  // restart count, which bounds the job, is replicated).
  struct Quarantine {
    std::uint32_t failures = 0;
    std::uint64_t counted_round = 0;  // the round whose failure was counted last
    TimePoint until{};
  };
  std::map<std::string, std::map<std::string, Quarantine>> quarantine_;  // job -> node
  // node -> (generation, worker slots) from node_info reports; only nodes with known slots are
  // placed.
  std::map<std::string, std::pair<std::uint64_t, std::uint32_t>> node_slots_;
  TimePoint leading_since_{};  // when this node last became the leader
  // Store ports a (node, generation) reported in use by another process -> until when they are
  // left out of its rounds (kBusyPortMemory; a holder may let go).
  std::map<std::pair<std::string, std::uint64_t>, std::map<std::uint16_t, TimePoint>> busy_ports_;
  // Draining nodes (node_leaving reports): name -> generation; and the (name, generation) of
  // members that left membership gracefully, refreshed by lead().
  std::map<std::string, std::uint64_t> leaving_;
  std::set<std::pair<std::string, std::uint64_t>> left_;
  TimePoint next_plan_{};
  TimePoint next_lead_{};  // when lead() next has work (see lead_due)
  // Incidents and cluster events (leader memory, see incidents()).
  IncidentLog incidents_;
  std::uint64_t rounds_opened_ = 0;
  std::map<std::string, rendezvous::NodeDrain> drains_seen_;  // to log drain changes
  // job -> (round, its member nodes): who must report a stop when the round breaks.
  std::map<std::string, std::pair<std::uint64_t, std::set<std::string>>> round_members_;
  // Feeds the incident log from one lead() pass (losses seen in membership, acks, drains).
  void observe(TimePoint now, const rendezvous::JobTable& table,
               const std::vector<membership::MemberView>& members);
  // An OpenRound this leader proposed: counted and logged once it is applied.
  struct Opened {
    std::string job;
    std::uint64_t round = 0;
    std::uint32_t nodes = 0;
    rendezvous::RoundReason reason = rendezvous::RoundReason::kSubmitted;
    std::string detail;
  };
  void on_round_opened(const Opened& opened, const std::string& applied);

  // Member half.
  rendezvous::RoundFence fence_;
  std::map<std::string, Watched> watched_;
  rendezvous::LeaseHolder holder_;
  std::string lease_leader_;
  std::string lease_leader_address_;
  std::uint64_t stale_starts_ = 0;
  std::uint64_t malformed_reports_ = 0;  // not decoded, or acting on it threw
  void act_on_report(TimePoint now, const std::string& from, std::uint64_t generation,
                     const RoundReport& report);
  TimePoint next_report_{};
  std::uint32_t slots_ = 0;
  TimePoint last_now_{};  // the latest time this service was given (reports to itself)
  std::string leader_;
  std::string leader_address_;
  TimePoint next_node_info_{};
};

}  // namespace elastic::node
