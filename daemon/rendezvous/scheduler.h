// The cluster scheduler: which jobs may use which nodes now, who waits and why, and which
// lower-priority jobs give nodes up. A pure function of the jobs (from the replicated table),
// the usable nodes, the limits and the time; the Raft leader (daemon/node/round_leader.h) calls
// it once per planning pass, before the per-job planner (planner.h), and
//   - gives each job's planner only the nodes the job's plan allows and at most its cap;
//   - carries out each preemption (a shrink round, or a suspension of a preemptible job) as a
//     committed command whose reason names the job it makes room for;
//   - answers `elasticctl jobs`/`job` with each queued job's position and reason.
//
// Terms:
//   queued    a job in state pending: it holds no node and starts when its min fits.
//   running   a job in state rendezvous, running or recovering: it holds the nodes of its
//             current round (holdings) and keeps them.
//   held      a job the scheduler ignores: suspended by its owner, or terminal.
//   need      the slots a job takes on one node: workers_per_node, or every free slot of the
//             node when workers_per_node is 0 (so a node such a job takes is full).
//   fits      a usable node fits a job when its free slots (slots less every running job's
//             holding there, less what this pass gave away or reserved) are >= max(1,
//             workers_per_node), and the job does not already hold it.
//   order     jobs by priority (higher first), then submitted_at (older first), then id.
//
// Rules (table-driven tests in tests/unit/scheduler_test.cc):
//   1. Every running job keeps its holdings (less what a preemption below takes).
//   2. Jobs that want nodes -- queued jobs, and running jobs holding fewer than their want
//      (min(max_nodes, size_cap when set but never below min_nodes, the limits' room)) -- are
//      visited in order. The first queued job that cannot start is the head; every queued job
//      that cannot start reserves the nodes that fit it (up to its min_nodes, in node name
//      order) so that no job after it in the order can take them: backfill never delays a job
//      ahead of it. A job after it may still start, or grow, on nodes nobody reserved (ones the
//      blocked job cannot use) and on the slots a reservation leaves: a reservation takes only
//      the slots the job would take there (every free one when its workers_per_node is 0).
//   3. A queued job starts when at least min_nodes nodes fit it: its plan allows up to its want
//      of them (node name order) and caps it there. A running job below its want may grow into
//      the nodes that fit it (same order); a job preempted in this pass does not grow in it.
//   4. Limits: a queued job whose user or primary group is at its running-jobs limit, or whose
//      min_nodes would take the user or group past its node limit, waits with that reason and
//      reserves nothing (it is not the head: jobs after it are not delayed by it). A running
//      job grows only up to the node limits' room (and keeps what it holds beyond it). A job
//      started or grown in this pass counts toward the limits of the jobs after it.
//   5. Preemption: a queued job that cannot start from free nodes (and is within its limits)
//      takes nodes from running jobs of strictly lower priority, lowest priority first, then
//      newest (submitted_at later first), then id: first what each holds above its min_nodes
//      (a shrink, the newest-joined nodes of its rank map first: the last entries), then, from
//      preemptible jobs in the same order, all of it (a suspension; a job already picked for a
//      shrink is suspended instead). A released node counts for the job once it fits it with
//      the slots freed there; a victim is not made to give up what the job cannot use (a shrink
//      stops at the last entry that gives the job a node, a suspension that gives none is not
//      made). It preempts only when the nodes that fit it plus what it can take
//      reach its min_nodes, and stops taking as soon as they do; otherwise nothing is
//      preempted for it and it reserves as in rule 2. A job is preempted at most once per pass.
//      The preempting job does not start in the same pass: its plan reserves the nodes that
//      fit it and those being freed, and its reason says whom it waits for; it starts in a
//      later pass once the victims' rounds released them. A victim keeps a prefix of its rank
//      map, so a shrink may release nodes the preempting job cannot use; they stay taken for
//      the rest of the pass. Until a victim's round commits, its holdings still name the
//      released nodes, so the next pass decides the same preemption again: the caller treats
//      a preemption already under way as carried out.
//   6. Slots are never given twice: a node's free slots go down with each grant and
//      reservation of the pass.
//
// Determinism: the output depends only on the input (no clock, no randomness, no container
// iteration order that is not sorted).
//
// Thread safety: a pure function. Errors: none; jobs with min_nodes 0 or max_nodes < min_nodes
// are a broken invariant (the table validated them) and abort.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/rendezvous/types.h"

namespace elastic::rendezvous {

enum class SchedState : std::uint8_t {
  kQueued,   // pending
  kRunning,  // rendezvous, running or recovering
  kHeld,     // suspended by its owner, or terminal: ignored
};

struct SchedJob {
  std::string id;
  std::int32_t priority = 0;
  WallTime submitted_at{};
  SchedState state = SchedState::kQueued;
  std::uint32_t min_nodes = 1;
  std::uint32_t max_nodes = 1;
  std::uint32_t workers_per_node = 0;  // 0 = every free slot of a node
  bool preemptible = false;
  // Throughput scaling's current size (0 = none: the job may use max_nodes).
  std::uint32_t size_cap = 0;
  std::string user;
  std::uint32_t gid = 0;
  // Nodes its own planner will not take now (a member the job tier declared lost, for its
  // memory of 30 s; a node quarantined for it): never granted, reserved or freed for it, so no
  // node waits unused in its plan while another job could have it.
  std::set<std::string> avoid;
  // Running: the nodes of its current round and the slots it holds on each, in rank map order
  // (the last entries joined last).
  std::vector<std::pair<std::string, std::uint32_t>> holdings;
};

struct SchedNode {
  std::string name;
  std::uint32_t slots = 0;  // the node's worker slots
  // Alive (or suspect) in membership, slots known, not drained, not leaving. A running job's
  // holding on a node that is not usable still counts for rule 1 (the job keeps it until its
  // own planner replaces it), but the node fits nobody.
  bool usable = true;
  // Not usable, but the work placed on it goes on: drained (a drain places nothing new, and the
  // jobs already there keep running). A running job's holding counts toward its want on a usable
  // or working node only, so a lost or leaving node's replacement is granted at once and a
  // drained one's is not.
  bool working = false;
};

// Per-user and per-group caps (0 = no limit). A user's or group's own entry wins over the
// defaults. Root's jobs (uid 0) are not exempt: an admin sets a root entry if it must be.
struct LimitValues {
  std::uint32_t max_nodes = 0;         // nodes held by the running jobs of the user or group
  std::uint32_t max_running_jobs = 0;  // running jobs of the user or group
  bool operator==(const LimitValues&) const = default;
};
struct Limits {
  LimitValues per_user;                         // for every user without an entry in users
  LimitValues per_group;                        // for every group without an entry in groups
  std::map<std::string, LimitValues> users;     // by user name
  std::map<std::uint32_t, LimitValues> groups;  // by gid
  // gid -> group name, for the config keys reasons name ("limits.groups.physics.max_nodes");
  // a gid without a name is named by its number.
  std::map<std::uint32_t, std::string> group_names;
  bool operator==(const Limits&) const = default;
};

struct SchedulerInput {
  std::vector<SchedJob> jobs;
  std::vector<SchedNode> nodes;
  Limits limits;
};

struct JobPlan {
  // The nodes the job's planner may place it on: its holdings (minus preempted nodes) plus the
  // nodes granted in this pass. Empty for a queued job that does not start.
  std::set<std::string> allowed;
  // The most nodes the job may have now (0: it may not start, or is suspended). A queued job
  // that starts: the nodes granted. A running job: its allowed nodes, at least min_nodes and
  // at most min(max_nodes, size_cap) (below its holdings when size_cap went down: its planner
  // shrinks it). A shrunk victim: the nodes it keeps.
  std::uint32_t cap = 0;
  // A queued job that waits: the nodes it keeps the jobs after it off (rules 2 and 5: those
  // that fit it, and those its preemptions free), for `elasticctl job` and invariant tests.
  std::set<std::string> reserved;
  // Queued: 1-based position among the queued jobs in order (limits ignored); 0 otherwise.
  std::size_t position = 0;
  // One sentence on why the job waits or is held below its want ("" when nothing holds it
  // back), e.g. "waiting for 3 nodes, 1 fits, others reserved for job big-3 ahead of it
  // (position 2 of 4)", "user alice runs 2 jobs, the limit (limits.users.alice.max_running_jobs)
  // (position 3 of 4)", "waiting for job small-7 to release 2 nodes (preempted for it)",
  // "holds 2 of 4 nodes, no more free fits", "shrinks to 1 node for job big-3 (preempted)".
  std::string reason;
  bool operator==(const JobPlan&) const = default;
};

struct Preemption {
  enum class Kind : std::uint8_t {
    kShrink,   // keep `keep` (a prefix of the rank map: at least min_nodes), release the rest
    kSuspend,  // a preemptible job gives up every node and is requeued
  };
  std::string victim;
  Kind kind = Kind::kShrink;
  std::vector<std::string> keep;      // kShrink: the nodes it keeps, in rank map order
  std::vector<std::string> released;  // the nodes it gives up, in rank map order
  std::string for_job;
  // One sentence for the event log: "preempted for job big-3 (priority 10 > 0): gives up
  // nodes c, d and keeps 1 (its min_nodes)".
  std::string reason;
  bool operator==(const Preemption&) const = default;
};

struct SchedulerOutput {
  std::map<std::string, JobPlan> plans;  // every queued and running job of the input
  std::vector<Preemption> preemptions;   // in the order they were decided
  bool operator==(const SchedulerOutput&) const = default;
};

SchedulerOutput schedule(const SchedulerInput& input);

// Throughput-driven scaling (`scale = "throughput"`): the job starts at min_nodes and adds one
// node at a time while the samples per second measured over a full window at the new size beat
// the last good size's by at least min_gain (0.05 = 5%); when an added node does not pay off,
// or the node for the next size stays unavailable for a whole window, the job goes back to (or
// stays at) the last good size and stops there until the cluster changes (a node joins or
// leaves the usable set), when it tries the next size again. Details:
//   - the first full window (at min_nodes) only sets the baseline; the gain of a size is
//     counted per node added since the last good size, and a gain of exactly min_gain pays;
//   - a window measured at a size other than state.size is not that size's measurement and
//     changes nothing; a full window at state.size wins over short_of_nodes;
//   - a good size at max_nodes settles there (a cluster change has nothing to try);
//   - when settled, measurements change nothing; a cluster change tries the size after the
//     last good one (min_nodes when none) and forgets that size's old rate;
//   - a size outside min_nodes..max_nodes (the spec changed) is brought back into it first.
// ScaleState: rendezvous/types.h (the job table keeps it, committed).

struct ScaleInput {
  ScaleState state;
  std::uint32_t min_nodes = 1;
  std::uint32_t max_nodes = 1;
  double min_gain = 0.05;
  // A full window measured at the job's current size (nodes in its round), or none yet.
  std::optional<std::pair<std::uint32_t, double>> measured;
  // The job asked for `state.size` nodes for a whole window and still has fewer.
  bool short_of_nodes = false;
  bool cluster_changed = false;
};

struct ScaleDecision {
  ScaleState next;  // == input.state when nothing changes
  bool changed = false;
  // For the event log and the metrics: "samples/s 1840 at 3 nodes vs 1790 at 2 (+2.8%, below
  // the 5% scale_min_gain): back to 2 nodes", "samples/s 1790 at 2 nodes vs 1000 at 1
  // (+79%): trying 3". Empty when nothing changes.
  std::string reason;
  bool operator==(const ScaleDecision&) const = default;
};

ScaleDecision scale_step(const ScaleInput& input);

}  // namespace elastic::rendezvous
