#include "daemon/node/scheduling.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace elastic::node {
namespace {

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "scheduling: broken invariant: %s\n", what);
  std::abort();
}

}  // namespace

using rendezvous::JobState;

rendezvous::SchedJob sched_job(const rendezvous::JobRecord& job,
                               const rendezvous::RankMap* proposed) {
  rendezvous::SchedJob s;
  s.id = job.id;
  s.priority = job.spec.priority;
  s.submitted_at = job.submitted_at;
  switch (job.state) {
    case JobState::kPending:
      s.state = rendezvous::SchedState::kQueued;
      break;
    case JobState::kRendezvous:
    case JobState::kRunning:
    case JobState::kRecovering:
      s.state = rendezvous::SchedState::kRunning;
      break;
    default:
      s.state = rendezvous::SchedState::kHeld;
      break;
  }
  s.min_nodes = job.spec.min_nodes;
  s.max_nodes = job.spec.max_nodes;
  s.workers_per_node = job.spec.workers_per_node;
  s.preemptible = job.spec.preemptible;
  s.user = job.spec.user;
  s.gid = job.spec.gid;
  // Throughput scaling: the size its committed scale state allows (min_nodes before any step).
  if (job.spec.scale == rendezvous::ScaleMode::kThroughput) {
    s.size_cap = job.scale.size == 0 ? job.spec.min_nodes : job.scale.size;
  }
  if (s.state != rendezvous::SchedState::kRunning) return s;
  for (const auto& member : job.ranks) s.holdings.emplace_back(member.node, member.slots);
  if (proposed != nullptr) {
    for (const auto& member : *proposed) {
      const auto held = std::find_if(s.holdings.begin(), s.holdings.end(),
                                     [&](const auto& h) { return h.first == member.node; });
      if (held == s.holdings.end()) {
        s.holdings.emplace_back(member.node, member.slots);
      } else {
        held->second = std::max(held->second, member.slots);
      }
    }
  }
  return s;
}

rendezvous::Limits scheduler_limits(const config::LimitsConfig& limits) {
  const auto values = [](std::int64_t nodes, std::int64_t jobs) {
    return rendezvous::LimitValues{.max_nodes = static_cast<std::uint32_t>(nodes),
                                   .max_running_jobs = static_cast<std::uint32_t>(jobs)};
  };
  rendezvous::Limits out;
  out.per_user = values(limits.max_nodes_per_user, limits.max_running_jobs_per_user);
  out.per_group = values(limits.max_nodes_per_group, limits.max_running_jobs_per_group);
  for (const auto& [name, entry] : limits.users.entries) {
    out.users[name] = values(entry.max_nodes, entry.max_running_jobs);
  }
  for (const auto& [name, entry] : limits.groups.entries) {
    out.groups[entry.gid] = values(entry.max_nodes, entry.max_running_jobs);
    out.group_names[entry.gid] = name;
  }
  return out;
}

namespace {

// An OpenRound decision that keeps the first `keep` entries of `job`'s rank map, renumbered,
// with the store on `store_port` of the same node.
rendezvous::Decision prefix_round(const rendezvous::JobRecord& job, std::size_t keep,
                                  rendezvous::RoundReason reason, std::string detail,
                                  std::uint16_t store_port) {
  rendezvous::Decision d;
  d.kind = rendezvous::Decision::Kind::kOpenRound;
  d.reason = reason;
  d.detail = std::move(detail);
  std::uint32_t next_rank = 0;
  for (std::size_t i = 0; i < keep; ++i) {
    rendezvous::RankAssignment kept = job.ranks[i];
    kept.first_rank = next_rank;
    next_rank += kept.slots;
    d.ranks.push_back(kept);
  }
  const std::string& endpoint = job.store_endpoint;
  d.store_endpoint = endpoint.substr(0, endpoint.rfind(':') + 1) + std::to_string(store_port);
  return d;
}

}  // namespace

rendezvous::Decision shrink_decision(const rendezvous::JobRecord& job,
                                     const rendezvous::Preemption& preemption,
                                     std::uint16_t store_port) {
  if (preemption.victim != job.id || preemption.keep.empty() ||
      preemption.keep.size() > job.ranks.size()) {
    die("shrink_decision() for another job or an empty or larger rank map");
  }
  for (std::size_t i = 0; i < preemption.keep.size(); ++i) {
    if (job.ranks[i].node != preemption.keep[i]) die("a shrink that keeps no prefix of its ranks");
  }
  return prefix_round(job, preemption.keep.size(), rendezvous::RoundReason::kPreempted,
                      preemption.reason, store_port);
}

rendezvous::Decision scale_down_decision(const rendezvous::JobRecord& job, std::uint32_t size,
                                         std::uint16_t store_port, std::string detail) {
  if (size == 0 || size >= job.ranks.size()) die("scale_down_decision() that shrinks nothing");
  return prefix_round(job, size, rendezvous::RoundReason::kScaled, std::move(detail), store_port);
}

std::optional<rendezvous::SetScale> scale_command(const rendezvous::JobRecord& job,
                                                  std::optional<double> measured,
                                                  bool short_of_nodes, bool cluster_changed,
                                                  rendezvous::WallTime at) {
  rendezvous::ScaleInput in;
  in.state = job.scale;
  in.min_nodes = job.spec.min_nodes;
  in.max_nodes = job.spec.max_nodes;
  in.min_gain = job.spec.scale_min_gain;
  if (measured) in.measured = std::make_pair(static_cast<std::uint32_t>(job.ranks.size()), *measured);
  in.short_of_nodes = short_of_nodes;
  in.cluster_changed = cluster_changed;
  rendezvous::ScaleDecision d = rendezvous::scale_step(in);
  if (!d.changed) return std::nullopt;
  return rendezvous::SetScale{.job_id = job.id,
                              .round = job.round,
                              .state = std::move(d.next),
                              .reason = std::move(d.reason),
                              .at = at};
}

rendezvous::SetJobState requeue_command(const rendezvous::JobRecord& job,
                                        const rendezvous::Preemption& preemption,
                                        rendezvous::WallTime at) {
  if (preemption.victim != job.id) die("requeue_command() for another job");
  return rendezvous::SetJobState{.job_id = job.id,
                                 .round = job.round,
                                 .state = JobState::kPending,
                                 .cause = rendezvous::RoundReason::kPreempted,
                                 .reason = preemption.reason,
                                 .at = at,
                                 .failed_node = {}};
}

}  // namespace elastic::node
