// Round policy: the leader's decisions about a job's rounds that sit around the planner
// (planner.h): which nodes it may place the job on, when a node whose workers keep failing sits
// the job out (quarantine), when a round counts as started or succeeded and when a worker
// failure is acted on, and which store port a round's rank 0 gets. The leader's half of round
// handling (daemon/node/round_leader.h) gathers the facts and carries out the answers.
//
// Candidate filtering, in the order the leader applies it:
//   1. usable_for_job(): reachable in cluster membership (alive or suspect), its slots reported
//      by this very daemon instance, and not drained or draining -- unless it is a member of
//      the job's active round (a job already on a drained node keeps it);
//   2. sitting_out(): quarantined nodes, while the job reaches min_nodes without them
//      (counting the nodes that could join its next round);
//   3. candidates_for(): every other usable node is a planner candidate, alive unless the job
//      tier declared it lost for this job; a usable node that is neither a member nor lost is a
//      waiter since the leader first saw it.
// Quarantine: a node whose workers of one job failed is charged once per round
// (count_failure); the first failure is forgiven (it may be a peer's fault), from the second on
// the node sits out the job until a time out that doubles with each failure from
// max(restart_backoff, kMinQuarantine) up to kMaxQuarantine, and then comes back (grows back
// in) unless one more failure of it would exhaust the job's restarts: then it stays out while
// the job reaches min_nodes without it. A recovery or round that only leaves quarantined nodes out still
// replaces a failed worker and costs a restart (charged_to_failed_worker).
//
// Thread safety: pure functions of their arguments; no clock, no member state. Errors: none.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "daemon/core/time.h"
#include "daemon/rendezvous/job_table.h"
#include "daemon/rendezvous/node_ledger.h"
#include "daemon/rendezvous/planner.h"
#include "daemon/rendezvous/types.h"

namespace elastic::rendezvous {

// How long a node the job tier declared lost stays out of the job's rounds: a daemon killed a
// moment ago is still alive in cluster membership for seconds and must not come back in as a
// newcomer (a restarted daemon is a new generation and may); a false declaration expires.
inline constexpr std::chrono::seconds kLostMemory{30};
// A quarantine's first time out is max(restart_backoff, kMinQuarantine); it doubles up to
// kMaxQuarantine.
inline constexpr std::chrono::seconds kMinQuarantine{10};
inline constexpr std::chrono::minutes kMaxQuarantine{10};
// Rounds reopened on another store port, at no restart, before a conflict counts as a failure.
inline constexpr std::uint32_t kMaxPortMoves = 3;

// Rendezvous and running jobs have a round whose members run (or start) workers.
bool is_active_round_state(JobState state);

// ---------------------------------------------------------------------------------------------
// Candidate filtering

// What the leader knows of one node, for one job.
struct NodeStanding {
  bool reachable = false;        // alive or suspect in cluster membership
  bool slots_known = false;      // this generation reported its worker slots (node_info)
  bool drained = false;          // drained in the job table
  bool leaving = false;          // this generation announced it drains (node_leaving)
  bool in_active_round = false;  // a member (by name) of the job's round, the job active
};
// Whether the leader may place the job on the node at all (step 1 above).
bool usable_for_job(const NodeStanding& node);

// A usable node (step 1 passed), as the planner sees it.
struct UsableNode {
  std::string name;
  std::uint64_t generation = 0;
  std::uint32_t free_slots = 0;  // what other jobs leave it (the job's own slots included)
  std::string address;           // host of the store endpoint
  std::uint16_t store_port = 0;  // the port its rank 0 would get (choose_store_port)
  bool lost = false;             // declared lost for this job by the job tier (kLostMemory)
  WallTime first_seen{};         // when the leader first saw this (name, generation)
};

struct CandidateSet {
  std::vector<Candidate> candidates;
  std::vector<Waiter> wait_list;
};
// The planner's candidates and wait list for `job` from the usable nodes, in their order,
// leaving out those in `sitting_out` (steps 2 and 3 above).
CandidateSet candidates_for(const JobRecord& job, const std::vector<UsableNode>& usable,
                            const std::set<std::string>& sitting_out);

// Whether every member of `job`'s round is usable as the same daemon instance (`usable`:
// name -> generation) and not declared lost (`lost`: (name, generation)). Then a worker failure
// is the failing node's own, not the crash of a peer's collective.
bool members_alive(const RankMap& ranks, const std::map<std::string, std::uint64_t>& usable,
                   const std::set<std::pair<std::string, std::uint64_t>>& lost);

// ---------------------------------------------------------------------------------------------
// Quarantine

// One node's record for one job.
struct QuarantineRecord {
  std::uint32_t failures = 0;
  std::uint64_t counted_round = 0;  // the round whose failure was counted last
  TimePoint until{};                // the time out, once failures >= 2
  bool operator==(const QuarantineRecord&) const = default;
};

// Whether a worker failure that is due is charged to `failure_node`: known, no member lost
// (members_alive), not while the job recovers from a lost member (the failure stays the
// round's while the job waits, and the member may be alive again before the round changes),
// and restarts left (a job that fails anyway needs no quarantine).
bool counts_toward_quarantine(const JobRecord& job, const std::string& failure_node,
                              bool members_alive);
// The time out after `failures` counted failures: zero below 2, else
// max(restart_backoff, kMinQuarantine) * 2^(failures - 2), at most kMaxQuarantine.
Duration quarantine_length(std::uint32_t failures, Duration restart_backoff);
// `record` after a failure of `round` charged at `now`: counted once per round.
QuarantineRecord count_failure(QuarantineRecord record, std::uint64_t round,
                               Duration restart_backoff, TimePoint now);
// The usable nodes that sit `spec`'s job out: quarantined (2 failures or more) until their time
// out ends at `now`; past it, still out while the job could not afford one more failure of
// the node (`restarts` + 1 >= spec.max_restarts: it would end the job) and the nodes that
// could join its next round instead reach spec.min_nodes. Could join: usable, not sitting out, not lost,
// and with free slots for the job (spec.workers_per_node, at least 1). Counting nodes whose
// slots other jobs hold, a job that keeps its quarantined node's slot would wait for them for
// ever while those jobs wait the same way.
std::set<std::string> sitting_out(const std::map<std::string, QuarantineRecord>& records,
                                  const std::vector<UsableNode>& usable, const JobSpec& spec,
                                  std::uint32_t restarts, TimePoint now);
// Whether the planner's `decision` (reason member_lost) only leaves quarantined members of
// `ranks` out: an open round whose missing members all sit out, or a recovery while every
// member is alive and one sits out. Such a round replaces a failed worker, so it is relabelled
// worker_failed and costs a restart (a worker that can never start then fails its job).
bool charged_to_failed_worker(const Decision& decision, const RankMap& ranks,
                              const std::set<std::string>& sitting_out, bool members_alive);
// Whether the open round of `decision` may start without waiting out the leases of the members
// of `ranks` it leaves out: it keeps at least one of them (same node and generation), and every
// one it keeps is in `live` (its workers re-form in place: they publish checkpoints fenced by
// round and join no round but one they are offered). False for any other decision.
bool survivors_re_form_in_place(const Decision& decision, const RankMap& ranks,
                                const std::set<std::string>& live);
// Whether the RoundStart of a grow round still tells members to hold their live workers'
// offer (node/round_codec.h, RoundStart::hold_live): the round is still gathering
// (`rendezvous`), some member of it ran the previous round live (`live_before`: it keeps its
// workers training meanwhile), some member is new to the job or was not live (it starts cold),
// and not every such member has acknowledged live yet (`live_now`: its workers are loaded and
// waiting for their peers), and the hold's time is not over (`in_time`).
bool hold_for_joiners(bool rendezvous, RoundReason reason, const RankMap& ranks,
                      const std::set<std::string>& live_before,
                      const std::set<std::string>& live_now, bool in_time);

// ---------------------------------------------------------------------------------------------
// Round outcomes

enum class RoundVerdict {
  kNone,       // nothing to commit
  kRunning,    // every member acknowledged the rendezvous round: commit running
  kSucceeded,  // every member's workers exited 0: commit succeeded
};
// What a job's round has come to from its members' reports: `acked` (round_ack) and `done`
// (workers_done) are the member names that reported about the current round. Running wins
// over succeeded; a round without members never succeeds.
RoundVerdict round_verdict(JobState state, const RankMap& ranks, const std::set<std::string>& acked,
                           const std::set<std::string>& done);

// When a worker failure reported at `seen` is acted on: after `grace` (the job tier's detection
// time: a dead daemon's peers crash before it is declared lost, and a lost member must win),
// and never while a member of the round drains (its stop is on purpose).
struct FailureTiming {
  bool due = false;
  TimePoint wake_at = kNever;  // not due yet: when it will be
};
FailureTiming failure_timing(bool failure_known, bool member_draining, TimePoint seen,
                             Duration grace, TimePoint now);

// ---------------------------------------------------------------------------------------------
// Store ports

// The store port of round `round` on `node` as rank 0: free in `ledger` and not in `busy`
// (ports the node reported in use by another process); unless `strict`, else free in `ledger`
// (the member checks it), else the range's port for the round. 0 only when `strict` and none
// is free.
std::uint16_t choose_store_port(const NodeLedger& ledger, const std::string& node,
                                std::uint64_t round, PortRange range,
                                const std::set<std::uint16_t>& busy, bool strict);

// A member's report that the store port of the job's round is held by another process.
struct PortConflict {
  std::string node;
  std::uint64_t generation = 0;
  std::uint16_t port = 0;
  std::string detail;
};
// Whether `conflict` is about `job`'s current round: only its rank-0 daemon instance runs the
// store, only about the round's own port, and not once a worker failure is known.
bool conflict_applies(const JobRecord& job, const PortConflict& conflict, bool failure_known);
// Whether the store may move to `port` (0 = none free) after `moves` moves since the job last
// ran; otherwise the conflict is a worker failure of the rank-0 node.
bool may_move_store(std::uint16_t port, std::uint32_t moves);

}  // namespace elastic::rendezvous
