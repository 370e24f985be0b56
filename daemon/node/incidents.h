// IncidentLog: the leader's record of recoveries ("incidents") and of the cluster events it
// saw, for `elasticctl events` and the metrics endpoint. Pure: every input carries the leader's
// steady `now` (and, where a wall time is needed, its wall clock in ms since the epoch); it
// reads no clock and does no I/O.
//
// An incident is one recovery of one job, opened by the first evidence that a running round
// lost something:
//   cause "worker_failed"  a member reported a worker that exited non-zero (node = that member)
//   cause "node_lost"      the job tier declared a member lost, or cluster membership says it
//                          is dead or restarted (node = the lost member)
//   cause "node_left"      the member left the cluster gracefully (a drain or a stop)
//   cause "grow"           a round opened to take in new nodes: recorded with the same
//                          timeline, but not a recovery, so not counted in RecoveryStats
// Later evidence about the same round merges into the open incident: a node loss overrides a
// worker failure (survivors' workers crash because of the lost node), and the earliest
// evidence wins at_ms. Timeline (seconds after at_ms):
//   at_ms        the earliest evidence: a worker's exit time as its member reports it; for a
//                lost node the time the reporting member last heard from it (job tier), or
//                the leader's own last contact (membership); else the leader's receive time.
//                It is a member's wall clock: skewed clocks move detected_s (clamped at >= 0);
//                the later points are measured on the leader's steady clock from `detected`,
//                so they never depend on another host's clock.
//   detected     the leader had the evidence
//   stopped      every surviving member of the old round reported its old workers gone
//                ("workers_stopped"; reports that arrive before the incident are kept)
//   rendezvous   the new round was committed and every member of it acknowledged it
//   first_step   the first progress "step" report of the new round reached the leader (one
//                that came before the rendezvous counts at the rendezvous);
//                steps_lost = the newest step reported in the old round - the step the new
//                round resumed from (0 when it started fresh); unknown without progress
// Complete: at first_step, or given up kGiveUp after detection, or when the job ends, or when
// a newer loss supersedes it, or when a newer round (a grow) is committed after the new round's
// rendezvous (then first_step stays unknown and it is not counted; the rendezvous stays the
// recovery round's, the newer round gets an incident of its own). Only complete incidents with
// a first step are observed into RecoveryStats.
// Jobs without progress: a script that never reports progress never has a first step. Each
// incident says whether the job's workers had reported any progress to this leader
// (progress_reports), so a timeline can end at the rendezvous (the workers' start) instead of
// waiting for a step that will not come.
//
// Bounded: the newest kMaxIncidents incidents and kMaxEvents cluster events are kept. The leader
// replicates complete incidents and its events through the job table (RecordHistory), and a new
// leader seeds its log from there (seed()): a failover keeps the history but for what the old
// leader saw in its last moments (at most one batch interval).
//
// Thread safety: none; the node's loop thread owns it (through RoundLeader).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/core/time.h"
#include "daemon/rendezvous/history.h"

namespace elastic::node {

// The records themselves are the replicated history's (rendezvous/history.h).
using rendezvous::ClusterEvent;
using rendezvous::Incident;
using rendezvous::RecoveryStats;

class IncidentLog {
 public:
  static constexpr std::size_t kMaxIncidents = rendezvous::kMaxIncidents;
  static constexpr std::size_t kMaxEvents = rendezvous::kMaxEvents;
  static constexpr std::chrono::minutes kGiveUp{10};

  // Evidence that `job`'s round `round` (members `members`) lost `node` (see the causes).
  // `evidence_ms`: the earliest evidence's wall time when known.
  void on_loss(TimePoint now, std::int64_t wall_ms, const std::string& job, std::uint64_t round,
               const std::set<std::string>& members, const std::string& cause,
               const std::string& node, std::optional<std::int64_t> evidence_ms);
  // This leader committed round `round` of `job` (after `from_round`, whose members were
  // `old_members`) with `nodes` nodes; `grow` when it was opened to grow the job.
  void on_round_committed(TimePoint now, std::int64_t wall_ms, const std::string& job,
                          std::uint64_t from_round, std::uint64_t round, std::uint32_t nodes,
                          bool grow, const std::set<std::string>& old_members);
  // Every member of `job`'s round `round` acknowledged it.
  void on_round_acked(TimePoint now, const std::string& job, std::uint64_t round);
  // `node` reported that its workers of `job`'s round `round` are all gone.
  void on_workers_stopped(TimePoint now, const std::string& job, std::uint64_t round,
                          const std::string& node);
  // A worker's progress report ("step" or "checkpoint"); resumed_from -1: started fresh.
  void on_progress(TimePoint now, const std::string& job, std::uint64_t round,
                   const std::string& event, std::int64_t step, std::int64_t resumed_from);
  // The job ended (succeeded, failed, cancelled): its open incident completes unfinished.
  void on_job_ended(TimePoint now, const std::string& job);
  // Gives up incidents open for kGiveUp.
  void tick(TimePoint now);
  // This node stops leading: every open incident is given up (a new leader cannot finish it).
  void abandon_open();
  // This node stops leading: open incidents are given up, and incidents and durations are
  // forgotten (the next time it leads it starts from the replicated history, seed()). Events
  // stay: membership events are recorded while following too.
  void step_down();
  TimePoint next_deadline() const;

  void record(ClusterEvent event);

  // Replication (job_table.h RecordHistory). A new leader starts from the replicated `history`:
  // its incidents, events and durations, plus the events this daemon recorded itself after the
  // history's newest one (as a follower it saw membership change too) and the incidents it
  // opened since it leads (renumbered after the history's newest id).
  void seed(const rendezvous::History& history);
  // What this log holds that is not replicated yet: complete incidents and events, oldest first,
  // at most rendezvous::kMaxHistoryBatch of each. mark_replicated() once it is committed.
  struct Unreplicated {
    std::vector<Incident> incidents;
    std::vector<ClusterEvent> events;
    std::uint64_t events_through = 0;  // the sequence number of the last event taken
  };
  Unreplicated unreplicated() const;
  void mark_replicated(const Unreplicated& batch);

  const std::deque<Incident>& incidents() const { return incidents_; }
  // Recovery durations by cause ("worker_failed", "node_lost", "node_left": every cause is
  // present, zeros included, so planned leaves can be told from failures), and their sum.
  const std::map<std::string, RecoveryStats>& stats_by_cause() const { return stats_; }
  RecoveryStats stats() const;
  const std::deque<ClusterEvent>& events() const { return events_; }

  // {"cluster":[...],"incidents":[...]}, oldest first, the newest `limit` of each; with a job,
  // only that job's incidents and cluster events.
  std::string to_json(const std::string& job, std::size_t limit) const;

 private:
  struct Open {
    std::uint64_t id = 0;
    TimePoint detected{};
    std::int64_t detected_wall = 0;
    std::set<std::string> members;  // of from_round
    std::set<std::string> lost;     // members the causes are about
    std::map<std::string, TimePoint> stopped;
    std::optional<TimePoint> stopped_at, rendezvous_at, first_step_at;
    std::optional<std::int64_t> last_step;  // newest step reported in from_round or before
    // A step of the new round reported before every member acknowledged it (a worker that
    // steps without its peers): counted at the rendezvous. Its resumed_from.
    std::optional<std::int64_t> early_step_resumed_from;
  };

  Incident* find(std::uint64_t id);
  void open(TimePoint now, std::int64_t wall_ms, const std::string& job, std::uint64_t round,
            const std::set<std::string>& members, const std::string& cause, const std::string& node,
            std::optional<std::int64_t> evidence_ms);
  // Recomputes the incident's *_s fields from the open state's time points.
  void refresh(Incident& incident, const Open& state) const;
  void check_stopped(Open& state);
  void first_step(TimePoint now, const std::string& job, std::int64_t resumed_from);
  void finish(const std::string& job, bool given_up);

  std::uint64_t next_id_ = 0;
  std::deque<Incident> incidents_;
  std::deque<ClusterEvent> events_;
  std::uint64_t events_recorded_ = 0;  // sequence number of the newest event in events_
  std::uint64_t events_replicated_ = 0;  // events up to this sequence number are replicated
  std::set<std::uint64_t> replicated_incidents_;  // ids (of incidents_ only)
  std::map<std::string, RecoveryStats> stats_ = rendezvous::empty_recovery_stats();
  std::map<std::string, Open> open_;  // job -> its open incident (one per job at a time)
  // job -> the newest round an incident was opened for: older evidence is stale.
  std::map<std::string, std::uint64_t> last_from_round_;
  // job -> (round, step) of the newest progress report.
  std::map<std::string, std::pair<std::uint64_t, std::int64_t>> last_step_;
  // job -> round -> node -> when: stop reports not yet matched to an incident (a worker may
  // crash, and its node report the stop, before the loss reaches the leader).
  std::map<std::string, std::map<std::uint64_t, std::map<std::string, TimePoint>>> early_stops_;
};

}  // namespace elastic::node
