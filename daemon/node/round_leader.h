// RoundLeader: the leader's half of round handling. It turns the replicated job table into
// rounds on real daemons; the Raft leader runs it on every pass of the node loop (lead()), and
// every daemon keeps one, idle while it follows (its member half is round_member.h; the two
// are composed by RoundService, round_service.h).
//
//  - for each active job, the planner (rendezvous/planner.h) decides from the applied job
//    record, the usable nodes and the wait list; an open-round, recover or fail decision
//    becomes a command proposed to Raft (one in flight per job). Which nodes are usable, when
//    a node is quarantined, when a round is running or succeeded and when a worker failure is
//    acted on are the pure functions of rendezvous/round_policy.h; this class gathers their
//    inputs. A node's slots (its node_info) are shared by the jobs whose rounds hold them, and
//    a NodeLedger (rendezvous/node_ledger.h) counts them per pass: the table's rounds, this
//    leader's proposals in flight, and every round decided earlier in the same pass, so no slot
//    is given twice. A new leader plans, and sends RoundStart, only once it applied an entry of
//    its own term (before, an earlier leader's round or a job's end may still commit), and
//    plans a job only once every live member of its round told it its slots (node_info; each
//    node sends it when it learns of a new leader), or kNodeInfoResend after it became leader:
//    a member whose slots it has not heard yet would look lost. The store port of a round is a
//    port of [store_port_min, store_port_max] that no other round holds on its rank-0 node, not
//    the job's current one (its store may still be bound), and not one that node reported in
//    use.
//  - the rank-0 member checks its port before starting workers and reports "store_port_busy"
//    {job, round, port, detail} when another process holds it: the leader leaves that port out
//    of that node's rounds for kBusyPortMemory and reopens the round with the same members on
//    another port, costing no restart, at most rendezvous::kMaxPortMoves times until the job
//    runs; after that, or with no port left, the conflict is a worker failure of that node (a
//    restart; the job fails with it once its restarts are used up), so a held port range never
//    makes a job loop.
//  - a worker failure whose node is then quarantined is a worker failure whether the job goes
//    on without the node or must wait for it: it costs a restart, so a worker that can never
//    start fails its job after max_restarts with the failure as reason. Quarantine records are
//    volatile: a new leader starts with none (the restart count, which bounds the job, is
//    replicated).
//  - re-placing a lost member's work waits for LeaseGranter::may_replace(): its workers may
//    still run under a lease until then (a partitioned node stops them itself when its lease
//    runs out). Leases (kLeaseRequest, on_lease_request()) go to members of active rounds that
//    this leader's job tier has not declared lost.
//  - once a round is committed, RoundStart (the committed OpenRound command and the leader's
//    term) goes to every member until it acknowledges; when all have, the leader commits
//    SetJobState(running). A member that confirmed it holds the round before (round_received
//    or round_ack) is sent the new one as a delta against it (round_codec.h: a few hundred
//    bytes instead of the whole rank map); a member that has not said it holds the new round
//    is sent it again, in full, kStartQuickResend after the last send; one that holds it but
//    whose workers do not run yet, every kStartResend as a delta against the round itself.
//    Members of a job that ended or is recovering get a RoundStart carrying that state, so
//    they stop watching it.
//  - members' reports (kRoundReport, round_report.h: node_info, node_leaving, round_ack,
//    workers_done, worker_failed, peer_lost, store_port_busy, and for incidents
//    workers_stopped and progress) arrive through on_report().
//
// Output: take_sends(), in the order it was made; a message to this daemon itself is for its
// member half (round_send.h). Proposals go straight to the ConsensusHost given to lead().
//
// Events and recovery incidents (incidents.h): the leader records incidents, their
// RecoveryStats and the round/drain/election events, and replicates the complete incidents and
// the events every kHistoryInterval through the job table (RecordHistory, with each job's
// training series: a point of samples/s and loss per kSeriesInterval from rank 0's progress
// reports). A new leader starts from the replicated history once it is caught up
// (IncidentLog::seed); open incidents are given up, and the log forgotten, when this node stops
// leading. Membership events are recorded on every daemon (record_event), so a new leader keeps
// what it saw as a follower after the history's newest event. rounds_opened is volatile.
//
// Thread safety: none; the node's loop thread owns it. Errors: a report that does not decode,
// or that throws while acted on, is dropped and counted (malformed_reports()).
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "daemon/config/config.h"
#include "daemon/core/clock.h"
#include "daemon/core/time.h"
#include "daemon/membership/membership.h"
#include "daemon/node/consensus_host.h"
#include "daemon/node/incidents.h"
#include "daemon/node/round_report.h"
#include "daemon/node/round_send.h"
#include "daemon/node/throughput.h"
#include "daemon/rendezvous/job_table.h"
#include "daemon/rendezvous/lease.h"
#include "daemon/rendezvous/node_ledger.h"
#include "daemon/rendezvous/planner.h"
#include "daemon/rendezvous/round_policy.h"
#include "daemon/rendezvous/scheduler.h"
#include "daemon/wire/messages.h"

namespace elastic::node {

class RoundLeader {
 public:
  // Wall times it stamps on events, failures and commands come from `clock`. `config` is read
  // where used (a reload replaces it); it must outlive this object.
  RoundLeader(std::string self, std::uint64_t generation, const config::Current& config,
              const Clock& clock);

  std::vector<RoundSend> take_sends() { return std::exchange(sends_, {}); }

  // One planning pass. `leading` false (or no consensus) makes it forget leader state. Call it
  // when lead_due(): the caller builds the member list only then, since the loop runs on every
  // received message.
  void lead(TimePoint now, bool leading, const rendezvous::JobTable& table,
            const std::vector<membership::MemberView>& members, ConsensusHost* consensus);
  // True when lead() has work: leadership changed, planning or a RoundStart resend is due, or a
  // proposal of this leader was applied or a member reported since the last pass.
  bool lead_due(TimePoint now, bool leading) const {
    return leading != leading_ || (leading && now >= next_lead_);
  }

  // A kRoundReport envelope another daemon sent this leader. Its body is decoded first; one
  // that does not decode is dropped, logged at debug and counted: it comes from another daemon,
  // and nothing it holds may stop this one.
  void on_report(TimePoint now, const wire::Envelope& envelope);
  // A decoded report from daemon `from` (generation `generation`); ignored unless leading (but
  // node_info, kept at once). An exception while acting on it is caught, logged and counted.
  void on_report(TimePoint now, const std::string& from, std::uint64_t generation,
                 const RoundReport& report);
  std::uint64_t malformed_reports() const { return malformed_reports_; }

  // A kLeaseRequest envelope (the sender asks for its own lease): granted, as a kLeaseGrant
  // send, while this node leads and the sender is in an active round.
  void on_lease_request(TimePoint now, const wire::Envelope& envelope);

  // Incident time outs (only while leading).
  void tick(TimePoint now);
  // kNever while following.
  TimePoint next_deadline() const;

  // The slots each (node, generation) reported (for `elasticctl nodes`).
  const std::map<std::string, std::pair<std::uint64_t, std::uint32_t>>& node_slots() const {
    return node_slots_;
  }
  const std::deque<Incident>& incidents() const { return incidents_.incidents(); }
  const std::map<std::string, RecoveryStats>& recovery_stats() const {
    return incidents_.stats_by_cause();
  }
  // Rounds this leader committed since it started leading.
  std::uint64_t rounds_opened() const { return rounds_opened_; }
  // The scheduler's plan for `job` in the last planning pass (its queue position and why it
  // waits), or nullptr: not leading, not planned yet, or a held or ended job.
  const rendezvous::JobPlan* job_plan(const std::string& job) const {
    const auto it = schedule_.plans.find(job);
    return it == schedule_.plans.end() ? nullptr : &it->second;
  }
  // The samples/s of `job` that its rank 0 reports (ThroughputWindow::rate), or nullopt.
  std::optional<double> samples_per_second(const std::string& job) const {
    const auto it = scaling_.find(job);
    if (it == scaling_.end()) return std::nullopt;
    return it->second.window.rate(it->second.window.round());
  }
  // Jobs with a samples/s window (for the metrics).
  std::vector<std::string> measured_jobs() const {
    std::vector<std::string> ids;
    for (const auto& [id, watch] : scaling_) ids.push_back(id);
    return ids;
  }
  // Preemptions this leader proposed since it started leading.
  std::uint64_t preemptions() const { return preemptions_; }
  // Jobs with a queue position in the last scheduling pass.
  std::uint64_t queued_jobs() const {
    return static_cast<std::uint64_t>(std::count_if(
        schedule_.plans.begin(), schedule_.plans.end(),
        [](const auto& entry) { return entry.second.position > 0; }));
  }
  void record_event(ClusterEvent event) { incidents_.record(std::move(event)); }
  // Planning passes skip settled jobs (job_settled). For tests and benchmarks: plan them anyway
  // and count each whose plan was not "nothing to do" (an error is logged for each).
  void set_verify_skips(bool on) { verify_skips_ = on; }
  std::uint64_t skip_mismatches() const { return skip_mismatches_; }
  // Jobs a planning pass found settled (counted per pass; planned anyway under verify).
  std::uint64_t jobs_skipped() const { return jobs_skipped_; }
  std::uint64_t jobs_planned() const { return jobs_planned_; }  // ... and planned
  const IncidentLog& incident_log() const { return incidents_; }

 private:
  struct LeaderJob {
    std::uint64_t round_seen = 0;  // the round the fields below are about
    bool in_flight = false;        // a proposal for this job awaits its commit
    std::set<std::string> acked;   // members that acknowledged round_seen
    // Members (name -> generation) that said they hold round_seen (round_received or
    // round_ack), and those that held the round before it (base_round, its map base_ranks;
    // round_seen - 1, or empty): the first send of round_seen to them is a delta.
    std::map<std::string, std::uint64_t> received;
    std::map<std::string, std::uint64_t> holds_base;
    std::uint64_t base_round = 0;
    rendezvous::RankMap base_ranks;
    // When round_seen was first sent to each member: without an answer a quick resend later,
    // it may not read deltas (it restarted, or missed the round before) and is sent it in full.
    std::map<std::string, TimePoint> first_sent;
    // Members whose workers of round_seen re-form in place (a live round_ack or peer_lost):
    // such a job's survivors need not wait out a lost member's lease (see plan_job).
    std::set<std::string> live;
    // Some member of some round of the job acknowledged live: its workers speak the worker
    // channel and re-form in place (all members run the same program). Kept across rounds.
    bool speaks_channel = false;
    // A grow round: the previous round's live members, whose RoundStart says hold_live until
    // every new member's workers are ready (acknowledged live) or hold_until has passed.
    std::set<std::string> live_before;
    TimePoint hold_until{};
    // The rank map of round_seen, and the members of the round before that this one left out:
    // they are sent this round too (it tells them to stop) until left_out_until. Otherwise a
    // member that missed the change (cut off, or its starts lost) would run its old round for as
    // long as its lease is renewed, and another job's round renews it.
    rendezvous::RankMap ranks_seen;
    // Members of round_seen that were not live in the round before (joiners, cold starts) and
    // have not acknowledged live yet: a held grow goes on once the last one has.
    std::set<std::string> joiners_pending;
    bool hold_ran_out = false;  // hold_until passed with joiners pending (logged once)
    std::set<std::string> left_out;
    TimePoint left_out_until{};
    // Declared lost by the job tier -> until when it stays out of this job's rounds
    // (rendezvous::kLostMemory). Kept across rounds.
    std::map<std::pair<std::string, std::uint64_t>, TimePoint> lost;
    // The job was recovering at the last lead() pass (it waits for nodes: see alive_again).
    bool recovering = false;
    std::set<std::string> done;  // members whose workers all exited 0 in round_seen
    std::optional<rendezvous::WorkerFailure> failure;  // of round_seen
    std::string failure_node;                          // the node that reported it
    TimePoint failure_seen{};  // when; acted on only after the failure grace (see plan_job)
    TimePoint next_start{};    // when to send RoundStart again to members without it
    TimePoint next_all{};      // ... and to every member yet to acknowledge
    TimePoint ended_until{};   // keep telling members of an ended job until then
    // A "store_port_busy" report about round_seen.
    std::optional<rendezvous::PortConflict> port_busy;
    // Rounds reopened for a store port conflict since the job last ran (kept across rounds).
    std::uint32_t port_moves = 0;
    // Pending: when the scheduler first let the job start (its join_timeout counts from then);
    // zero while it waits in the queue.
    rendezvous::WallTime admitted{};
  };
  // An OpenRound this leader proposed: counted and logged once it is applied.
  struct Opened {
    std::string job;
    std::uint64_t round = 0;
    std::uint32_t nodes = 0;
    rendezvous::RoundReason reason = rendezvous::RoundReason::kSubmitted;
    std::string detail;
  };

  // usable: node -> (its member view, the slots other jobs leave it). A round it decides to open
  // is held in `ledger` at once. `job` may be a copy edited for the planner (a cap, a rank map
  // put away); `base` is the job table's own rank map of the job, which an OpenRound is encoded
  // against (encode_command_against: the log carries the change, not the whole map).
  // Returns the planner's decision (kOpenRound also when it waits for a lost member's lease).
  rendezvous::Decision::Kind plan_job(
      TimePoint now, const rendezvous::JobRecord& job, const rendezvous::RankMap& base,
      const std::map<std::string, std::pair<const membership::MemberView*, std::uint32_t>>& usable,
      rendezvous::NodeLedger& ledger, ConsensusHost& consensus);
  // Proposes the command that carries out `decision` for `job` (one in flight per job); `base`
  // as for plan_job.
  void propose_decision(TimePoint now, const rendezvous::JobRecord& job,
                        const rendezvous::RankMap& base, const rendezvous::Decision& decision,
                        rendezvous::NodeLedger& ledger, ConsensusHost& consensus);
  // The maps below from the member list (views_, alive_, addresses_, left_, first_seen_),
  // updated only where a member's generation, state or address changed (node_epoch_ then
  // moves): a pass over an unchanged 10,000-node list costs a comparison, not four maps.
  void refresh_members(const std::vector<membership::MemberView>& members,
                       rendezvous::WallTime wall);
  // in_rounds_, rebuilt when the table or a job's lost members changed, or a loss's memory ran
  // out.
  void refresh_in_rounds(TimePoint now, const rendezvous::JobTable& table);
  // Whether the planner can decide nothing for `job` (an active round with every node its
  // allowance lets it have, all usable, no failure, lost member, busy port or quarantine, not
  // a new leader's first kNodeInfoResend, not throughput-scaled). Memoised per job in
  // settled_ until its round, state, cap or allowed nodes change or node_epoch_ moves.
  bool job_settled(TimePoint now, const rendezvous::JobRecord& job, const LeaderJob& state,
                   const rendezvous::JobPlan& allowance, const rendezvous::JobTable& table,
                   const std::function<rendezvous::NodeLedger&()>& ledger);
  // What this leader knows of `view`'s node for placing any job on it (in_active_round false:
  // the caller sets it for one job).
  rendezvous::NodeStanding node_standing(const membership::MemberView& view,
                                         const rendezvous::JobTable& table) const;
  // One scheduler pass (rendezvous/scheduler.h) over the table's jobs and the nodes whose
  // slots are known; proposes its preemptions and keeps the plans for plan_job's callers.
  // alive: the members that are alive or suspect.
  // `ledger` builds the pass's ledger on first use. Skipped, keeping schedule_, while
  // schedule_key_ and the limits are unchanged and no avoided node's time out ran
  // (schedule_until_).
  void schedule(TimePoint now, const rendezvous::JobTable& table,
                const std::map<std::string, const membership::MemberView*>& alive,
                const std::function<rendezvous::NodeLedger&()>& ledger, ConsensusHost& consensus);
  // The scheduler's jobs and nodes (onto `input`, which has the limits); lowers
  // schedule_until_ to the first time out of a node a job avoids.
  rendezvous::SchedulerInput scheduler_input(
      TimePoint now, const rendezvous::JobTable& table,
      const std::map<std::string, const membership::MemberView*>& alive,
      rendezvous::SchedulerInput input);
  // Proposes what `preemption` asks of its victim: a shrink round or a requeue.
  void preempt(TimePoint now, const rendezvous::JobTable& table,
               const rendezvous::Preemption& preemption, rendezvous::NodeLedger& ledger,
               ConsensusHost& consensus);
  // Throughput scaling of a running job with scale "throughput" (one pass): back to its size
  // when its round holds more nodes (a scaled round), else scale_step() on its newest full
  // window (ThroughputWindow), whether it lacked nodes for its size a whole window, and whether
  // the nodes it could have changed; a changed state is proposed as SetScale. True when it
  // proposed something (the job is not planned in this pass).
  bool scale_job(TimePoint now, rendezvous::WallTime wall, const rendezvous::JobRecord& job,
                 const rendezvous::JobTable& table,
                 const std::map<std::string, const membership::MemberView*>& alive,
                 rendezvous::NodeLedger& ledger, ConsensusHost& consensus);
  // Every kHistoryInterval (one batch in flight): the series points due (kSeriesInterval per
  // job) and the incidents and events not replicated yet, as one RecordHistory.
  void record_history(TimePoint now, rendezvous::WallTime wall, ConsensusHost& consensus);
  // Proposes `command` (one in flight for its job).
  void propose_set_state(TimePoint now, const rendezvous::SetJobState& command,
                         ConsensusHost& consensus);
  // Proposes SetJobState(`state`) at `wall` for `job`'s round (running or succeeded), one in
  // flight.
  void propose_state(TimePoint now, rendezvous::WallTime wall, const rendezvous::JobRecord& job,
                     rendezvous::JobState state, std::string reason, ConsensusHost& consensus);
  // rendezvous::choose_store_port() for `job`'s next round on `node`, with the ports that node
  // reported in use.
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
  // A report from `node` (generation) proves it alive: recovering jobs forget its loss.
  void alive_again(TimePoint now, const std::string& node, std::uint64_t generation);
  void act_on_report(TimePoint now, const std::string& from, std::uint64_t generation,
                     const RoundReport& report);
  // Feeds the incident log from one lead() pass (losses seen in membership, acks, drains).
  void observe(TimePoint now, const rendezvous::JobTable& table);
  // Logs the drains that changed since the last pass (node_drained, node_undrained) and moves
  // node_epoch_ then; `wall` stamps an undrain.
  void observe_drains(const rendezvous::JobTable& table, std::int64_t wall);
  void on_round_opened(const Opened& opened, const std::string& applied);

  const Clock* clock_;
  std::string self_;
  std::uint64_t generation_;
  const config::Current& config_;
  std::vector<RoundSend> sends_;

  rendezvous::LeaseGranter granter_;
  bool leading_ = false;
  std::map<std::string, LeaderJob> leader_jobs_;
  // Per job, across rounds: its samples/s window, and for throughput scaling since when its
  // round has fewer nodes than its size and the nodes it could have (usable, not in another
  // job's round) at the last pass.
  struct ScaleWatch {
    ThroughputWindow window;
    SeriesSampler series;
    std::optional<TimePoint> short_since;
    std::set<std::string> cluster;
    bool cluster_known = false;
  };
  std::map<std::string, ScaleWatch> scaling_;
  // The history's replication (record_history): seeded from the table once caught up.
  static constexpr std::chrono::seconds kHistoryInterval{2};
  static constexpr std::chrono::seconds kSeriesInterval{10};
  bool history_seeded_ = false;
  bool history_in_flight_ = false;
  TimePoint next_history_{};
  // job -> the OpenRound this leader proposed and has not seen applied: its ranks and store
  // port hold their nodes (NodeLedger) until the proposal's completion.
  std::map<std::string, std::pair<rendezvous::RankMap, std::uint16_t>> proposed_;
  std::map<std::pair<std::string, std::uint64_t>, rendezvous::WallTime> first_seen_;
  // The member list as of its last change (refresh_members), by name, and the maps into it:
  // alive or suspect members, and every member's address.
  std::map<std::string, membership::MemberView> views_;
  std::map<std::string, const membership::MemberView*> alive_;
  std::map<std::string, std::string> addresses_;
  // Moves whenever what makes a node usable may have changed: the member list, a node's slots,
  // a drain (observe_drains) or a node leaving. Settled jobs are checked again then.
  std::uint64_t node_epoch_ = 0;
  // Moves whenever a job's lost members change (in_rounds_ is rebuilt).
  std::uint64_t lost_epoch_ = 0;
  std::set<std::string> in_rounds_;  // nodes in an active round (lease eligibility)
  std::optional<rendezvous::Index> in_rounds_index_;  // the table it was built from
  std::uint64_t in_rounds_lost_epoch_ = 0;
  TimePoint in_rounds_until_{};  // when a lost mark it counted runs out
  struct SettledMemo {
    std::uint64_t round = 0;
    rendezvous::JobState state = rendezvous::JobState::kPending;
    std::uint64_t node_epoch = 0;
    std::uint32_t cap = 0;
    std::set<std::string> allowed;
    bool settled = false;
  };
  std::map<std::string, SettledMemo> settled_;  // job -> its last job_settled() verdict
  bool verify_skips_ = false;
  std::uint64_t skip_mismatches_ = 0;
  std::uint64_t jobs_skipped_ = 0;
  std::uint64_t jobs_planned_ = 0;
  std::map<std::string, std::map<std::string, rendezvous::QuarantineRecord>>
      quarantine_;  // job -> node
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
  rendezvous::SchedulerOutput schedule_;  // the last planning pass's
  // What schedule_ was computed from (see schedule()).
  struct ScheduleKey {
    rendezvous::Index table_index = 0;
    std::uint64_t node_epoch = 0;
    std::uint64_t lost_epoch = 0;
    std::uint64_t quarantine_epoch = 0;
    std::uint64_t proposals_epoch = 0;
    bool operator==(const ScheduleKey&) const = default;
  };
  std::optional<ScheduleKey> schedule_key_;
  rendezvous::Limits schedule_limits_;
  TimePoint schedule_until_{};
  std::uint64_t quarantine_epoch_ = 0;  // moves when a quarantine record changes
  std::uint64_t proposals_epoch_ = 0;   // moves when proposed_ changes
  // job -> (round, node_epoch_) at which observe() found every member of the round still in
  // membership: not walked again until one of them changes.
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> quiet_rounds_;
  std::uint64_t preemptions_ = 0;
  IncidentLog incidents_;
  std::uint64_t rounds_opened_ = 0;
  std::map<std::string, rendezvous::NodeDrain> drains_seen_;  // to log drain changes
  // job -> (round, its member nodes): who must report a stop when the round breaks.
  std::map<std::string, std::pair<std::uint64_t, std::set<std::string>>> round_members_;
  std::uint64_t malformed_reports_ = 0;  // not decoded, or acting on it threw
};

}  // namespace elastic::node
