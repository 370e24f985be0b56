// The rendezvous planner: what the leader should commit next for one job. A pure function of
// the job's replicated record, the nodes the leader can use for it, the wait list and the
// time; the leader turns an open_round into an OpenRound command (make_open_round), a recover
// or fail into a SetJobState, and calls again at wake_at or when any input changes.
//
// Terms:
//   member     an entry of the job's current rank map.
//   alive      a member whose (name, generation) is a candidate with alive = true. A daemon
//              that restarted (new generation) is a lost member, and may join again from the
//              wait list as a newcomer.
//   eligible   a candidate that is alive, advertises a store port, and has enough slots
//              (slots >= 1, and >= spec.workers_per_node when that is not 0).
//   waiter     a wait-list entry whose (node, generation) is an eligible candidate and not a
//              member. Waiters enter rounds in (since, name) order.
// Worker counts: spec.workers_per_node, or the candidate's slots when it is 0.
//
// Rules, by state (table-driven tests in tests/unit/planner_test.cc):
//   terminal, suspended   none (a suspended job waits for its owner or an admin to resume it).
//   pending               gathering: with >= max_nodes waiters open at once (the first max);
//                         with >= min_nodes open at (the time the min-th waiter arrived +
//                         last call) with every waiter up to max; with fewer wait, and fail
//                         once join_timeout has passed since state_since. Reason submitted.
//   rendezvous, running   a member not alive -> member lost: if the alive members plus
//                         waiters reach min_nodes, open now with the alive members in their
//                         old order and waiters appended up to max (no last call: survivors
//                         should resume at once); otherwise recover (cause member_lost).
//                         Else a worker failure of the current round -> fail when restarts
//                         reached max_restarts; when every alive member but the failed node
//                         is live (re-forms in place), open now without the failed node if
//                         the others reach min_nodes (it grows back as a waiter), else with
//                         it; otherwise open now with the same members (plus
//                         waiters up to max: the round restarts anyway) when
//                         restart_backoff is 0; otherwise recover (cause worker_failed).
//                         A lost member wins over a worker failure, so a dead node's peers
//                         crashing in NCCL never consumes a restart.
//                         Else (running only) waiters and fewer than max members -> grow:
//                         open at (the first waiter's since + last call), or at once when
//                         the waiters fill the job to max.
//   recovering            cause worker_failed: fail when restarts reached max_restarts (the
//                         detail ends with the recovery's reason, the failure); wait
//                         until state_since + restart_backoff; then as member lost below.
//                         cause member_lost: alive members (kept in order) + waiters; with
//                         >= min_nodes of them open (alive members >= min_nodes: at once;
//                         else like pending, the last call counted from when the min-th
//                         node was there, members counting from state_since); fewer: wait,
//                         and fail once join_timeout has passed since state_since.
// A decision to wait returns the earliest time at which the answer can change by time alone.
// Rank 0's advertised address and store port form the store endpoint ("host:port", IPv6
// addresses in brackets).
//
// Thread safety: a pure function. Errors: none. Duplicate candidate names: the first wins.
// A null job, or a record whose spec never passed validate() (min_nodes 0), is a broken
// invariant and aborts.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/config/config.h"
#include "daemon/rendezvous/job_table.h"
#include "daemon/rendezvous/types.h"

namespace elastic::rendezvous {

// A node the leader could place this job on (cluster members not drained or quarantined).
struct Candidate {
  std::string name;
  std::uint64_t generation = 0;
  std::uint32_t slots = 0;       // GPUs, or CPU slots on hosts without GPUs
  bool alive = true;             // alive for this job (the fast job tier's verdict included)
  std::string address;           // host or IP the workers use to reach this node's store
  std::uint16_t store_port = 0;  // 0 = none advertised (not eligible)
};

// A node that asked to join the job, and since when.
struct Waiter {
  std::string node;
  std::uint64_t generation = 0;
  WallTime since{};
};

// A worker of the job's current round exited non-zero or hung (the leader's volatile
// knowledge; a failure of an older round is ignored).
struct WorkerFailure {
  std::uint64_t round = 0;
  WallTime at{};
  std::string detail;  // "rank 3 on node b exited with status 1"
  std::string node{};  // the node whose worker failed ("" = unknown)
};

struct PlannerInput {
  const JobRecord* job = nullptr;  // required
  std::vector<Candidate> candidates;
  std::vector<Waiter> wait_list;
  std::optional<WorkerFailure> worker_failure;
  // Members whose workers of the current round re-form in place (they reported live).
  std::set<std::string> live;
  WallTime now{};
  config::RendezvousConfig config;
};

struct Decision {
  enum class Kind {
    kNone,       // nothing to do until an input changes
    kOpenRound,  // commit OpenRound(ranks, store_endpoint, reason)
    kRecover,    // commit SetJobState(recovering, cause = reason) for the current round
    kWaitUntil,  // call again at wake_at (or when an input changes)
    kFail,       // commit SetJobState(failed, detail)
  };
  Kind kind = Kind::kNone;
  RankMap ranks;                                 // kOpenRound
  std::string store_endpoint;                    // kOpenRound
  RoundReason reason = RoundReason::kSubmitted;  // kOpenRound, kRecover
  std::string detail;  // a sentence for the event log (every kind but kNone)
  WallTime wake_at{};  // kWaitUntil
  // kOpenRound and kRecover with reason kWorkerFailed: the node whose worker failed.
  std::string failed_node{};
  bool operator==(const Decision&) const = default;
};

const char* to_string(Decision::Kind kind);

Decision plan(const PlannerInput& input);

// The commands that carry out a decision for `job` at `at` (round = job.round + 1).
// make_open_round also sets each node's restart count (RankAssignment::restarts) the way
// torchrun's agents count theirs (TORCHELASTIC_RESTART_COUNT = max_restarts - remaining, per
// agent): a member of the old round (same name and generation) keeps its count, plus one when
//   worker_failed  it is the node whose worker failed (decision.failed_node, else the job's
//                  failed_node; both unknown: every kept member, as an older leader counted);
//                  torchrun restarts the other agents' workers without counting
//                  (num_nodes_waiting > 0 is a membership change);
//   member_lost    a member of the old round is missing from the new one, or the job was
//                  recovering: the survivors' workers broke with the lost node (torchrun: their
//                  group failed). A round on the same members (the store moved to another
//                  port) counts nothing;
//   grow           never (torchrun: membership changes do not count as retries).
// A node new to the job, or a restarted daemon (new generation), starts at 0, like a new agent.
OpenRound make_open_round(const JobRecord& job, const Decision& decision, WallTime at);
SetJobState make_set_state(const JobRecord& job, const Decision& decision, WallTime at);

}  // namespace elastic::rendezvous
