// The cluster's history as the job table replicates it (job_table.h, RecordHistory): recovery
// incidents, their durations by cause, the cluster events the leader saw, and each job's
// training series (samples per second and loss over time). The Raft leader observes them
// (daemon/node/incidents.h, round_leader.h) and commits what it saw in batches, so a new leader
// starts from the same history instead of an empty memory.
//
// Bounds (memory and snapshot size): the newest kMaxIncidents incidents and kMaxEvents events of
// the cluster; per job kMaxSeriesPoints points of 24 bytes (~8.6 KB): when a job's series is
// full, every second point is dropped (the older half's resolution halves each time: 10 s
// points for the first hour, then 20 s, 40 s, ...), so a long job's whole run stays visible.
//
// Pure values; appending is deterministic (every daemon applies the same commands to the same
// bytes). Thread safety: none.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "daemon/rendezvous/types.h"

namespace elastic::rendezvous {

struct Incident {        // one recovery of one job, newest last (see node/incidents.h)
  std::uint64_t id = 0;  // increasing; a new leader goes on after the newest replicated one
  std::string job;
  std::string cause;                           // "worker_failed", "node_lost", "node_left", "grow"
  std::string node;                            // the node the cause is about ("" for grow)
  std::uint64_t from_round = 0, to_round = 0;  // to_round 0 until the new round is committed
  std::int64_t at_ms = 0;  // wall clock (ms since the epoch) of the earliest evidence
  // seconds after at_ms; std::nullopt until known
  std::optional<double> detected_s, stopped_s, rendezvous_s, first_step_s;
  std::optional<std::int64_t> steps_lost;
  bool complete = false;  // first step seen, or given up (see node/incidents.h)
  // Beyond the metrics contract: for `elasticctl events`.
  std::uint32_t to_nodes = 0;                // nodes in to_round
  std::optional<std::int64_t> resumed_from;  // the step the new round resumed from
  bool given_up = false;                     // complete without a first step
  // The job's workers reported progress to the leader (before or during the incident); false:
  // no first step can be expected, the timeline ends at the rendezvous.
  bool progress_reports = false;
  bool operator==(const Incident&) const = default;
};

// One observation per complete incident with first_step_s (event -> first step); grows excluded.
struct RecoveryStats {
  static constexpr std::array<double, 10> kBuckets{0.5, 1, 2, 3, 5, 7.5, 10, 20, 30, 60};
  std::array<std::uint64_t, kBuckets.size() + 1> counts{};  // per bucket, NOT cumulative;
                                                            // last = above 60
  double sum = 0;
  std::uint64_t count = 0;
  void observe(double seconds);
  bool operator==(const RecoveryStats&) const = default;
};

// Something the leader saw happen in the cluster.
struct ClusterEvent {
  std::int64_t at_ms = 0;  // wall clock of the daemon that recorded it
  // "member_joined", "member_alive", "member_suspect", "member_dead", "member_left",
  // "leader_elected", "node_drained", "node_undrained", "round_opened", "incident"
  std::string kind;
  std::string node;
  std::string job;  // "" when not about a job
  std::string detail;
  bool operator==(const ClusterEvent&) const = default;
};

// One point of a job's training series: what its rank 0 reported over the interval before `at`.
struct SeriesPoint {
  WallTime at{};
  std::optional<double> samples_per_s;  // the samples/s over the interval
  std::optional<double> loss;           // the newest loss reported
  bool operator==(const SeriesPoint&) const = default;
};

inline constexpr std::size_t kMaxIncidents = 256;
inline constexpr std::size_t kMaxEvents = 512;
inline constexpr std::size_t kMaxSeriesPoints = 360;
// One RecordHistory carries at most this many of each (the leader sends more in later batches).
inline constexpr std::size_t kMaxHistoryBatch = 1024;

// The recovery causes whose durations are kept (zeros too, so planned leaves can be told from
// failures).
std::map<std::string, RecoveryStats> empty_recovery_stats();

struct History {
  std::vector<Incident> incidents;  // complete ones, oldest first, at most kMaxIncidents
  std::vector<ClusterEvent> events;  // oldest first, at most kMaxEvents
  std::map<std::string, RecoveryStats> stats = empty_recovery_stats();
  bool operator==(const History&) const = default;

  // Appends a complete incident (and observes its duration into stats), or an event, dropping
  // the oldest beyond the bounds.
  void add(Incident incident);
  void add(ClusterEvent event);
  // The newest incident id (0: none).
  std::uint64_t last_incident_id() const;
};

// Appends `point` to `series` unless it is not after the last point; thins a full series (see
// the header comment).
void add_point(std::vector<SeriesPoint>& series, const SeriesPoint& point);

}  // namespace elastic::rendezvous
