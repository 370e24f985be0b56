// Scheduling glue: what the Raft leader (round_leader.h) gives the cluster scheduler
// (rendezvous/scheduler.h) from the replicated job table and its configuration, and the
// commands that carry out the scheduler's preemptions. Pure functions of their arguments.
//
//   - sched_job(): a job's class (queued: pending; running: rendezvous, running, recovering;
//     held: suspended or terminal), priority, sizes, owner and holdings. Holdings are the
//     current round's ranks, and where this leader proposed an OpenRound not applied yet, the
//     larger slot count of the two per node (the proposal may add nodes), so no pass gives a
//     slot that a round in flight will take. A job with scale "throughput" has its committed
//     scale state's size as size_cap (min_nodes before its first step).
//   - scale_down_decision(): a job with scale "throughput" whose round holds more nodes than its
//     size keeps the first `size` entries of its rank map (like a preemption's shrink, reason
//     scaled, no restart).
//   - shrink_decision(): a preemption that shrinks a running job becomes an OpenRound of the
//     kept entries (a prefix of the rank map: rank 0 and its store's host stay), ranks
//     renumbered from 0, the store on a new port of the same node, reason preempted. It costs
//     no restart; the kept workers re-form in place when they speak the worker channel.
//   - scale_command(): throughput scaling's step (scheduler.h scale_step()) as the SetScale the
//     leader proposes.
//   - requeue_command(): a preemption that suspends a preemptible job becomes
//     SetJobState(pending, cause preempted): its members stop its workers gracefully (they
//     checkpoint), and the job waits in the queue at its old position (submitted_at is kept).
//
// Errors: none. A Preemption whose victim is not `job` or whose kept nodes are not a prefix of
// its rank map is a broken invariant and aborts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "daemon/config/config.h"
#include "daemon/rendezvous/job_table.h"
#include "daemon/rendezvous/planner.h"
#include "daemon/rendezvous/scheduler.h"

namespace elastic::node {

rendezvous::SchedJob sched_job(const rendezvous::JobRecord& job,
                               const rendezvous::RankMap* proposed);

rendezvous::Limits scheduler_limits(const config::LimitsConfig& limits);

rendezvous::Decision shrink_decision(const rendezvous::JobRecord& job,
                                     const rendezvous::Preemption& preemption,
                                     std::uint16_t store_port);

rendezvous::Decision scale_down_decision(const rendezvous::JobRecord& job, std::uint32_t size,
                                         std::uint16_t store_port, std::string detail);

// Throughput scaling's next step for `job` (scale "throughput", running): scale_step() on its
// committed state with `measured` (a full window's samples/s at the round's node count), as a
// SetScale for its current round stamped `at`; nullopt when nothing changes.
std::optional<rendezvous::SetScale> scale_command(const rendezvous::JobRecord& job,
                                                  std::optional<double> measured,
                                                  bool short_of_nodes, bool cluster_changed,
                                                  rendezvous::WallTime at);

rendezvous::SetJobState requeue_command(const rendezvous::JobRecord& job,
                                        const rendezvous::Preemption& preemption,
                                        rendezvous::WallTime at);

}  // namespace elastic::node
