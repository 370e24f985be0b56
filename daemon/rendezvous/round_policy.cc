#include "daemon/rendezvous/round_policy.h"

#include <algorithm>
#include <set>
#include <string_view>
#include <utility>

namespace elastic::rendezvous {

bool is_active_round_state(JobState state) {
  return state == JobState::kRendezvous || state == JobState::kRunning;
}

bool usable_for_job(const NodeStanding& node) {
  if (!node.reachable || !node.slots_known) return false;
  // A drained node takes no new work; a job already on it keeps it.
  return !(node.drained || node.leaving) || node.in_active_round;
}

CandidateSet candidates_for(const JobRecord& job, const std::vector<UsableNode>& usable,
                            const std::set<std::string>& sitting_out) {
  CandidateSet set;
  // The members once, not a walk of the rank map per usable node.
  std::set<std::pair<std::string_view, std::uint64_t>> members;
  for (const auto& a : job.ranks) members.emplace(a.node, a.generation);
  for (const UsableNode& node : usable) {
    if (sitting_out.contains(node.name)) continue;
    // A member keeps the slots it has (the node's free count excludes other jobs only).
    set.candidates.push_back(Candidate{.name = node.name,
                                       .generation = node.generation,
                                       .slots = node.free_slots,
                                       .alive = !node.lost,
                                       .address = node.address,
                                       .store_port = node.store_port});
    const bool member = members.contains({node.name, node.generation});
    if (!member && !node.lost) {
      set.wait_list.push_back(
          Waiter{.node = node.name, .generation = node.generation, .since = node.first_seen});
    }
  }
  return set;
}

bool members_alive(const RankMap& ranks, const std::map<std::string, std::uint64_t>& usable,
                   const std::set<std::pair<std::string, std::uint64_t>>& lost) {
  return std::all_of(ranks.begin(), ranks.end(), [&](const RankAssignment& member) {
    const auto found = usable.find(member.node);
    return found != usable.end() && found->second == member.generation &&
           !lost.contains({member.node, member.generation});
  });
}

bool counts_toward_quarantine(const JobRecord& job, const std::string& failure_node,
                              bool members_alive) {
  const bool lost_member_to_blame =
      job.state == JobState::kRecovering && job.recovery_cause != RoundReason::kWorkerFailed;
  return !failure_node.empty() && members_alive && !lost_member_to_blame &&
         job.restarts < job.spec.max_restarts;
}

Duration quarantine_length(std::uint32_t failures, Duration restart_backoff) {
  if (failures < 2) return Duration::zero();
  const Duration base = std::max<Duration>(restart_backoff, kMinQuarantine);
  // The shift stops at 2^20: any base is past kMaxQuarantine long before.
  return std::min<Duration>(base * (std::int64_t{1} << std::min<std::uint32_t>(failures - 2, 20)),
                            kMaxQuarantine);
}

QuarantineRecord count_failure(QuarantineRecord record, std::uint64_t round,
                               Duration restart_backoff, TimePoint now) {
  if (record.counted_round == round) return record;
  record.counted_round = round;
  ++record.failures;
  if (record.failures >= 2)
    record.until = now + quarantine_length(record.failures, restart_backoff);
  return record;
}

std::set<std::string> sitting_out(const std::map<std::string, QuarantineRecord>& records,
                                  const std::vector<UsableNode>& usable, const JobSpec& spec,
                                  std::uint32_t restarts, TimePoint now) {
  std::set<std::string> out;
  for (const UsableNode& node : usable) {
    const auto record = records.find(node.name);
    if (record != records.end() && record->second.failures >= 2) out.insert(node.name);
  }
  const std::uint32_t slots_needed = std::max<std::uint32_t>(1, spec.workers_per_node);
  const auto could_join = std::count_if(usable.begin(), usable.end(), [&](const UsableNode& n) {
    return !out.contains(n.name) && n.free_slots >= slots_needed && !n.lost;
  });
  // A job that needs a quarantined node takes it back once its time out ends; so does a job
  // that could afford one more failure of it (its capacity back, its restarts still spare).
  const bool affords_a_failure = std::uint64_t{restarts} + 1 < spec.max_restarts;
  if (!out.empty() &&
      (affords_a_failure || static_cast<std::size_t>(could_join) < spec.min_nodes)) {
    std::erase_if(out, [&](const std::string& name) { return now >= records.at(name).until; });
  }
  return out;
}

bool charged_to_failed_worker(const Decision& decision, const RankMap& ranks,
                              const std::set<std::string>& sitting_out, bool members_alive) {
  if (decision.reason != RoundReason::kMemberLost) return false;
  bool only_quarantine = true;
  bool any = false;
  if (decision.kind == Decision::Kind::kOpenRound) {
    for (const auto& member : ranks) {
      const bool kept = std::any_of(decision.ranks.begin(), decision.ranks.end(),
                                    [&](const auto& a) { return a.node == member.node; });
      if (kept) continue;
      any = true;
      only_quarantine = only_quarantine && sitting_out.contains(member.node);
    }
  } else if (decision.kind == Decision::Kind::kRecover) {
    // Every member is alive: the ones the planner misses are the quarantined ones.
    any = members_alive && std::any_of(ranks.begin(), ranks.end(),
                                       [&](const auto& m) { return sitting_out.contains(m.node); });
  }
  return any && only_quarantine;
}

bool survivors_re_form_in_place(const Decision& decision, const RankMap& ranks,
                                const std::set<std::string>& live) {
  if (decision.kind != Decision::Kind::kOpenRound) return false;
  bool any = false;
  for (const auto& member : ranks) {
    const bool kept = std::any_of(decision.ranks.begin(), decision.ranks.end(), [&](const auto& a) {
      return a.node == member.node && a.generation == member.generation;
    });
    if (!kept) continue;
    if (!live.contains(member.node)) return false;
    any = true;
  }
  return any;
}

bool hold_for_joiners(bool rendezvous, RoundReason reason, const RankMap& ranks,
                      const std::set<std::string>& live_before,
                      const std::set<std::string>& live_now, bool in_time) {
  if (!rendezvous || reason != RoundReason::kGrow || !in_time) return false;
  bool holder = false;
  bool waiting = false;
  for (const RankAssignment& member : ranks) {
    if (live_before.contains(member.node)) {
      holder = true;
    } else if (!live_now.contains(member.node)) {
      waiting = true;
    }
  }
  return holder && waiting;
}

RoundVerdict round_verdict(JobState state, const RankMap& ranks, const std::set<std::string>& acked,
                           const std::set<std::string>& done) {
  const auto every = [&](const std::set<std::string>& reported) {
    return std::all_of(ranks.begin(), ranks.end(),
                       [&](const RankAssignment& r) { return reported.contains(r.node); });
  };
  if (state == JobState::kRendezvous && every(acked)) return RoundVerdict::kRunning;
  if (is_active_round_state(state) && !ranks.empty() && every(done)) {
    return RoundVerdict::kSucceeded;
  }
  return RoundVerdict::kNone;
}

FailureTiming failure_timing(bool failure_known, bool member_draining, TimePoint seen,
                             Duration grace, TimePoint now) {
  if (!failure_known || member_draining) return FailureTiming{};
  if (now >= seen + grace) return FailureTiming{.due = true, .wake_at = kNever};
  return FailureTiming{.due = false, .wake_at = seen + grace};
}

std::uint16_t choose_store_port(const NodeLedger& ledger, const std::string& node,
                                std::uint64_t round, PortRange range,
                                const std::set<std::uint16_t>& busy, bool strict) {
  if (const std::uint16_t port = ledger.free_port(node, round, range, busy); port != 0) {
    return port;
  }
  if (strict) return 0;
  // Every free port was reported in use: try one again (its holder may have let go; the member
  // checks it). With every port held by rounds (a range smaller than the node's slots), the
  // range's port for the round: the member's check turns a clash into a failure.
  if (const std::uint16_t port = ledger.free_port(node, round, range); port != 0) return port;
  const std::uint32_t size = std::uint32_t{range.max} - range.min + 1;
  return static_cast<std::uint16_t>(range.min + round % size);
}

bool conflict_applies(const JobRecord& job, const PortConflict& conflict, bool failure_known) {
  return !job.ranks.empty() && job.ranks.front().node == conflict.node &&
         job.ranks.front().generation == conflict.generation &&
         endpoint_port(job.store_endpoint) == conflict.port && !failure_known;
}

bool may_move_store(std::uint16_t port, std::uint32_t moves) {
  return port != 0 && moves < kMaxPortMoves;
}

}  // namespace elastic::rendezvous
