// Vocabulary of the rendezvous layer: job states, round reasons, rank maps and the replicated
// wall-clock time, shared by the job table (what is committed), the planner (what the leader
// decides) and the daemons that act on rounds.
//
// Time: replicated records carry wall-clock milliseconds stamped by the leader that proposed
// the command (WallTime). A steady clock is per host and means nothing to the next leader; the
// wall clock is the only frame every leader shares, so timeouts that outlive a leader (join
// timeout, restart backoff) are measured in it. Pure code never reads it; it comes in as a
// value.
//
// Plain values; thread safety as for any value type.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace elastic::rendezvous {

using Index = std::uint64_t;  // a Raft log index (the consensus library's Index)
using Term = std::uint64_t;   // a Raft term (the consensus library's Term)
using WallTime = std::chrono::sys_time<std::chrono::milliseconds>;

// Lifecycle of a job. Numbers are stored in snapshots and commands: append only.
//   pending     submitted, no round yet; waiting for min_nodes
//   rendezvous  a round is open; its daemons stop older rounds' workers and start this one's
//   running     every daemon of the round reported its workers started
//   recovering  the round broke (member lost, worker failed); its workers are being stopped
//               and the next round waits for nodes or for the restart backoff
//   succeeded   all ranks of the current round exited 0                       (terminal)
//   failed      restarts exhausted, too few nodes past join_timeout, ...     (terminal)
//   cancelled   by its owner or an admin                                     (terminal)
//   suspended   held by its owner or an admin: holds no node, its round has ended (its
//               daemons stop its workers), the scheduler leaves it alone until it is resumed
//               (back to pending); not terminal
enum class JobState : std::uint8_t {
  kPending = 0,
  kRendezvous = 1,
  kRunning = 2,
  kRecovering = 3,
  kSucceeded = 4,
  kFailed = 5,
  kCancelled = 6,
  kSuspended = 7,
};
inline constexpr std::uint8_t kMaxJobState = 7;

// "pending", "rendezvous", ... for logs, JSON and elasticctl.
const char* to_string(JobState state);
bool is_terminal(JobState state);

// Why a round was opened (or, on SetJobState recovering, why the round broke; on SetJobState
// pending, why a preemptible job was requeued). Only kWorkerFailed consumes a restart
// (membership changes and preemptions do not count).
enum class RoundReason : std::uint8_t {
  kSubmitted = 0,     // first round of a job
  kMemberLost = 1,    // a node of the round died or restarted (new generation)
  kWorkerFailed = 2,  // a worker of the round exited non-zero or hung
  kGrow = 3,          // new nodes wait and the round is below max_nodes
  kPreempted = 4,     // the scheduler took nodes for a job of higher priority
  kScaled = 5,        // throughput scaling went back to a smaller size (scheduler.h)
};
inline constexpr std::uint8_t kMaxRoundReason = 5;

// "submitted", "member_lost", "worker_failed", "grow", "preempted", "scaled".
const char* to_string(RoundReason reason);

// Throughput scaling's state of a job (`scale = "throughput"`; the decisions are scheduler.h's
// scale_step()), kept in the job table so a new leader goes on where the old one stopped.
struct ScaleState {
  std::uint32_t size = 0;  // the size the job may use now (size_cap); 0 = not started (min)
  std::uint32_t good = 0;  // the last size that paid off (0 = none measured yet)
  bool settled = false;    // stopped at `good` until the cluster changes
  std::map<std::uint32_t, double> rate;  // samples/s measured at each size
  bool operator==(const ScaleState&) const = default;
};

// One node of a round: its workers take ranks [first_rank, first_rank + slots). The generation
// pins the daemon instance: a restarted daemon is a new member, never the old one.
// restarts: TORCHELASTIC_RESTART_COUNT of this node's workers, counted per node as torchrun
// counts per agent (planner.h, make_open_round): it goes up when this daemon's workers are
// restarted because they failed or a member of their round was lost, never for a grow; a node
// new to the job (or a restarted daemon) starts at 0.
struct RankAssignment {
  std::string node;
  std::uint64_t generation = 0;
  std::uint32_t slots = 0;
  std::uint32_t first_rank = 0;
  std::uint32_t restarts = 0;
  bool operator==(const RankAssignment&) const = default;
};

// In rank order: entry i holds ranks after entry i-1's; entry 0 is GROUP_RANK 0 and hosts the
// store.
using RankMap = std::vector<RankAssignment>;

// WORLD_SIZE of a rank map.
std::uint64_t world_size(const RankMap& ranks);

}  // namespace elastic::rendezvous
