#include "daemon/node/round_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "daemon/node/round_codec.h"
#include "daemon/rendezvous/job_codec.h"
#include "daemon/rendezvous/planner.h"

namespace elastic::node {
namespace {

using json = nlohmann::json;
using rendezvous::JobState;

constexpr std::chrono::milliseconds kPlanInterval{100};
constexpr std::chrono::seconds kStartResend{1};
constexpr std::chrono::seconds kReportResend{1};
// How long the leader keeps telling an ended job's members that it ended.
constexpr std::chrono::seconds kEndNotice{10};
// How long a node the job tier declared lost stays out of the job (see LeaderJob::lost).
constexpr std::chrono::seconds kLostMemory{30};
// The longest a flapping node sits out a job (see RoundService::Quarantine).
constexpr std::chrono::seconds kMinQuarantine{10};
constexpr std::chrono::minutes kMaxQuarantine{10};
// A node re-sends its slots to the leader this often (and at once when the leader changes).
constexpr std::chrono::seconds kNodeInfoResend{10};
// A store port a node found in use stays out of its rounds this long (its holder may let go).
constexpr std::chrono::minutes kBusyPortMemory{10};
// Rounds reopened on another store port, at no restart, before a conflict counts as a failure.
constexpr std::uint32_t kMaxPortMoves = 3;
// A new leader that has not applied an entry of its own term looks again this soon.
constexpr std::chrono::milliseconds kCatchUpRetry{10};

rendezvous::WallTime wall_time(const Clock& clock) {
  return rendezvous::WallTime(std::chrono::milliseconds(clock.wall_ms()));
}

// "tcp://10.0.0.2:7946" -> "10.0.0.2" ("[::1]" keeps its brackets off: the planner adds them).
std::string host_of(const std::string& address) {
  std::string rest = address;
  if (rest.rfind("tcp://", 0) == 0) rest = rest.substr(6);
  const auto colon = rest.rfind(':');
  if (colon != std::string::npos) rest = rest.substr(0, colon);
  if (rest.size() >= 2 && rest.front() == '[' && rest.back() == ']') {
    rest = rest.substr(1, rest.size() - 2);
  }
  return rest;
}

// A "peer_lost" report to the leader; last_heard_ms: when this daemon last heard from the peer
// (wall ms), the incident's earliest evidence.
RoundReport lost_report(const rendezvous::PeerLost& lost, std::int64_t last_heard_ms) {
  RoundReport report = round_report(ReportKind::kPeerLost, lost.job, lost.round);
  report.peer = lost.peer;
  report.peer_generation = lost.generation;
  report.reason = rendezvous::to_string(lost.reason);
  if (last_heard_ms > 0) report.last_heard_ms = last_heard_ms;
  return report;
}

// The wall time (ms) at which steady time `then` was, seen from steady `now`.
std::int64_t wall_ms_at(const Clock& clock, TimePoint now, TimePoint then) {
  return clock.wall_ms() -
         std::chrono::duration_cast<std::chrono::milliseconds>(now - then).count();
}

bool is_active_round_state(JobState state) {
  return state == JobState::kRendezvous || state == JobState::kRunning;
}

// Whether a member of `job`'s round is alive in membership (the same daemon instance, not
// suspect, not declared lost by the job tier: `lost`) but has not told this leader its slots
// yet: a new leader hears them only once each node learns of it (node_info), and until then the
// planner would count that member as lost. A dead member (say the old leader) is not waited for.
bool member_slots_unknown(
    const rendezvous::JobRecord& job,
    const std::map<std::string, const membership::MemberView*>& alive,
    const std::map<std::string, std::pair<std::uint64_t, std::uint32_t>>& node_slots,
    const std::map<std::pair<std::string, std::uint64_t>, TimePoint>& lost) {
  return std::any_of(job.ranks.begin(), job.ranks.end(), [&](const auto& member) {
    const auto view = alive.find(member.node);
    if (view == alive.end() || view->second->generation != member.generation ||
        view->second->state != membership::MemberState::kAlive ||
        lost.contains({member.node, member.generation})) {
      return false;
    }
    const auto known = node_slots.find(member.node);
    return known == node_slots.end() || known->second.first != member.generation;
  });
}

}  // namespace

RoundService::RoundService(std::string self, std::uint64_t generation,
                           const config::Current& config, std::uint64_t seed, const Clock& clock)
    : clock_(&clock),
      self_(std::move(self)),
      generation_(generation),
      config_(config),
      seed_(seed),
      // The margin covers a deposed leader granting until CheckQuorum demotes it (one election
      // timeout) and clock-rate differences.
      granter_(config.get().rendezvous.lease_duration, config.get().consensus.election_timeout),
      holder_(self_, generation, config.get().rendezvous.lease_duration) {}

// ---------------------------------------------------------------------------------------------
// Leader half

void RoundService::lead(TimePoint now, bool leading, const rendezvous::JobTable& table,
                        const std::vector<membership::MemberView>& members,
                        ConsensusHost* consensus) {
  last_now_ = now;
  if (!leading || consensus == nullptr) {
    if (leading_) {
      granter_.step_down();
      incidents_.abandon_open();
      round_members_.clear();
      leader_jobs_.clear();
      proposed_.clear();
      in_rounds_.clear();
      leading_ = false;
    }
    return;
  }
  if (!leading_) {
    granter_.become_leader(consensus->term(), now);
    leading_ = true;
    leading_since_ = now;
    next_plan_ = now;
    drains_seen_ = table.drained();
    incidents_.record(ClusterEvent{.at_ms = wall_time(*clock_).time_since_epoch().count(),
                                   .kind = "leader_elected",
                                   .node = self_,
                                   .job = "",
                                   .detail = "term " + std::to_string(consensus->term())});
  }
  const rendezvous::WallTime wall = wall_time(*clock_);

  std::map<std::string, const membership::MemberView*> alive;
  std::map<std::string, std::string> addresses;
  // When this leader first saw each usable (node, generation): the wait list's order and the
  // start of its last-call window. Entries of nodes no longer usable are dropped.
  std::map<std::pair<std::string, std::uint64_t>, rendezvous::WallTime> seen;
  for (const membership::MemberView& m : members) {
    addresses[m.name] = m.address;
    if (m.state == membership::MemberState::kAlive ||
        m.state == membership::MemberState::kSuspect) {
      alive[m.name] = &m;
      const auto key = std::make_pair(m.name, m.generation);
      const auto earlier = first_seen_.find(key);
      seen.emplace(key, earlier == first_seen_.end() ? wall : earlier->second);
    }
  }
  first_seen_ = std::move(seen);
  left_.clear();
  for (const membership::MemberView& m : members) {
    if (m.state == membership::MemberState::kLeft) left_.emplace(m.name, m.generation);
  }
  // A drained node's entry goes once that daemon instance is no longer a member at all.
  std::erase_if(leaving_, [&](const auto& entry) {
    return std::none_of(members.begin(), members.end(), [&](const membership::MemberView& m) {
      return m.name == entry.first && m.generation == entry.second;
    });
  });
  // Slots and store ports: a node's are shared by the jobs whose rounds hold them; each job may
  // use what the others leave. Held: the table's rounds, this leader's proposals in flight, and
  // (plan_job) each round decided in this pass before the next job is planned.
  rendezvous::NodeLedger ledger;
  for (const auto& [name, known] : node_slots_) ledger.set_capacity(name, known.second);
  ledger.hold_table(table);
  for (const auto& [id, proposal] : proposed_) ledger.hold(id, proposal.first, proposal.second);
  // Lease eligibility: members of active rounds, except where this leader's job tier declared
  // the member lost. Such a member is often alive (cut off from its peers, not from the leader,
  // or the leader itself): renewing its lease would keep may_replace() false and the job could
  // never re-place its work. Unrenewed, it fences itself within a lease, and the job moves on.
  in_rounds_.clear();
  for (const auto& [id, job] : table.jobs()) {
    if (!is_active_round_state(job.state)) continue;
    const auto state = leader_jobs_.find(id);
    for (const auto& r : job.ranks) {
      bool lost = false;
      if (state != leader_jobs_.end()) {
        const auto mark = state->second.lost.find({r.node, r.generation});
        lost = mark != state->second.lost.end() && now < mark->second;
      }
      if (!lost) in_rounds_.insert(r.node);
    }
  }
  for (auto& [node, ports] : busy_ports_) {
    std::erase_if(ports, [now](const auto& entry) { return now >= entry.second; });
  }
  std::erase_if(busy_ports_, [](const auto& entry) { return entry.second.empty(); });

  // Until this leader applied an entry of its own term, its table may lack a round an earlier
  // leader proposed that still commits: planning now could give that round's slots again.
  const bool caught_up = consensus->applied_own_term();
  const bool plan_now = caught_up && now >= next_plan_;
  if (now >= next_plan_) next_plan_ = now + (caught_up ? Duration(kPlanInterval) : kCatchUpRetry);
  for (const auto& [id, job] : table.jobs()) {
    LeaderJob& state = leader_jobs_[id];
    if (state.round_seen != job.round) {
      const bool in_flight = state.in_flight;
      auto lost = std::move(state.lost);
      const std::uint32_t port_moves = state.port_moves;
      state = LeaderJob{};
      state.round_seen = job.round;
      state.in_flight = in_flight;
      state.lost = std::move(lost);
      state.port_moves = port_moves;
    }
    if (job.state == JobState::kRunning) state.port_moves = 0;
    std::erase_if(state.lost, [now](const auto& entry) { return now >= entry.second; });
    // Until caught up it tells members nothing either: an earlier leader may have committed a
    // newer round or the job's end that this table has not applied yet, and a member that
    // has forgotten the job (it ended there) would start the superseded round again.
    if (!caught_up) continue;
    if (rendezvous::is_terminal(job.state) || job.state == JobState::kRecovering) {
      if (job.round != 0 && state.ended_until == TimePoint{}) state.ended_until = now + kEndNotice;
      if (job.round != 0 && now < state.ended_until) {
        send_starts(now, job, state, addresses, consensus->term());
      }
      if (rendezvous::is_terminal(job.state)) {
        quarantine_.erase(id);
        continue;
      }
    }
    if (is_active_round_state(job.state)) {
      send_starts(now, job, state, addresses, consensus->term());
      bool all_acked = true;
      for (const auto& r : job.ranks) all_acked = all_acked && state.acked.contains(r.node);
      if (job.state == JobState::kRendezvous && all_acked && !state.in_flight) {
        rendezvous::SetJobState running{
            .job_id = id,
            .round = job.round,
            .state = JobState::kRunning,
            .cause = rendezvous::RoundReason::kMemberLost,
            .reason = "every daemon of round " + std::to_string(job.round) + " started it",
            .at = wall};
        state.in_flight = true;
        consensus->propose(now, rendezvous::encode_command(running),
                           [this, id](Result<std::string>) {
                             leader_jobs_[id].in_flight = false;
                             next_lead_ = TimePoint{};  // the table changed: act on it now
                           });
        continue;
      }
    }
    if (is_active_round_state(job.state) && !state.in_flight && !job.ranks.empty()) {
      bool all_done = true;
      for (const auto& r : job.ranks) all_done = all_done && state.done.contains(r.node);
      if (all_done) {
        rendezvous::SetJobState succeeded{
            .job_id = id,
            .round = job.round,
            .state = JobState::kSucceeded,
            .cause = rendezvous::RoundReason::kMemberLost,
            .reason = "every rank of round " + std::to_string(job.round) + " exited 0",
            .at = wall};
        state.in_flight = true;
        consensus->propose(now, rendezvous::encode_command(succeeded),
                           [this, id](Result<std::string>) {
                             leader_jobs_[id].in_flight = false;
                             next_lead_ = TimePoint{};
                           });
        continue;
      }
    }
    if (!plan_now || state.in_flight) continue;
    std::map<std::string, std::pair<const membership::MemberView*, std::uint32_t>> usable;
    for (const auto& [name, view] : alive) {
      // A drained node takes no new work; a job already on it keeps it.
      const bool member = std::any_of(job.ranks.begin(), job.ranks.end(),
                                      [&](const auto& r) { return r.node == name; });
      const auto leaving = leaving_.find(name);
      const bool draining = leaving != leaving_.end() && leaving->second == view->generation;
      if ((table.drained().contains(name) || draining) &&
          !(member && is_active_round_state(job.state))) {
        continue;
      }
      const auto known = node_slots_.find(name);
      if (known == node_slots_.end() || known->second.first != view->generation) continue;
      usable[name] = {view, ledger.free_slots(name, id)};
    }
    // A new leader waits for the slots of the job's live members (every node sends them when
    // it learns of the leader) rather than re-plan the job without them, but not beyond
    // kNodeInfoResend: a member that never reports is then treated as gone.
    if (now < leading_since_ + kNodeInfoResend &&
        member_slots_unknown(job, alive, node_slots_, state.lost)) {
      continue;
    }
    if (state.port_busy && is_active_round_state(job.state) &&
        on_port_conflict(now, job, state, ledger, *consensus)) {
      continue;
    }
    plan_job(now, job, usable, ledger, *consensus);
  }
  observe(now, table, members);
  next_lead_ = next_plan_;
  for (auto it = leader_jobs_.begin(); it != leader_jobs_.end();) {
    const rendezvous::JobRecord* job = table.job(it->first);
    if (job == nullptr) {
      it = leader_jobs_.erase(it);
      continue;
    }
    const LeaderJob& state = it->second;
    const bool notifying =
        is_active_round_state(job->state) || (job->round != 0 && now < state.ended_until);
    // (Not caught up: no RoundStart goes out; next_plan_ brings it back in kCatchUpRetry.)
    if (notifying && caught_up) next_lead_ = std::min(next_lead_, state.next_start);
    ++it;
  }
}

std::uint16_t RoundService::store_port_for(TimePoint now, const rendezvous::JobRecord& job,
                                           const std::string& node, std::uint64_t generation,
                                           const rendezvous::NodeLedger& ledger,
                                           bool strict) const {
  const auto& r = config_.get().rendezvous;
  const rendezvous::PortRange range{static_cast<std::uint16_t>(r.store_port_min),
                                    static_cast<std::uint16_t>(r.store_port_max)};
  std::set<std::uint16_t> busy;
  if (const auto found = busy_ports_.find({node, generation}); found != busy_ports_.end()) {
    for (const auto& [port, until] : found->second) {
      if (now < until) busy.insert(port);
    }
  }
  if (const std::uint16_t port = ledger.free_port(node, job.round + 1, range, busy); port != 0) {
    return port;
  }
  if (strict) return 0;
  // Every free port was reported in use: try one again (its holder may have let go; the member
  // checks it). With every port held by rounds (a range smaller than the node's slots), the
  // range's port for the round, as before: the member's check turns a clash into a failure.
  if (const std::uint16_t port = ledger.free_port(node, job.round + 1, range); port != 0) {
    return port;
  }
  const std::uint32_t size = std::uint32_t{range.max} - range.min + 1;
  return static_cast<std::uint16_t>(range.min + (job.round + 1) % size);
}

bool RoundService::on_port_conflict(TimePoint now, const rendezvous::JobRecord& job,
                                    LeaderJob& state, rendezvous::NodeLedger& ledger,
                                    ConsensusHost& consensus) {
  const LeaderJob::PortConflict conflict = std::move(*state.port_busy);
  state.port_busy.reset();
  // Only the node that runs the store can say its port is taken, and only about this round's.
  if (job.ranks.empty() || job.ranks.front().node != conflict.node ||
      job.ranks.front().generation != conflict.generation ||
      rendezvous::endpoint_port(job.store_endpoint) != conflict.port || state.failure) {
    return false;
  }
  busy_ports_[{conflict.node, conflict.generation}][conflict.port] = now + kBusyPortMemory;
  const std::string what = "store port " + std::to_string(conflict.port) + " on node " +
                           conflict.node + " is in use by another process";
  spdlog::info("rendezvous: job {} round {}: {} ({})", job.id, job.round, what, conflict.detail);
  const std::uint16_t port =
      store_port_for(now, job, conflict.node, conflict.generation, ledger, /*strict=*/true);
  if (port == 0 || state.port_moves >= kMaxPortMoves) {
    // No other port, or moved enough: a failure of that node's workers (it costs a restart, so
    // a job whose store can never start fails instead of moving for ever).
    spdlog::warn("rendezvous: job {} round {}: {} (a worker failure now)", job.id, job.round, what);
    state.failure = rendezvous::WorkerFailure{
        .round = job.round, .at = wall_time(*clock_), .detail = what, .node = conflict.node};
    state.failure_node = conflict.node;
    state.failure_seen = now - config_.get().rendezvous.job_peer_timeout;  // no crash to wait out
    return false;
  }
  ++state.port_moves;
  rendezvous::Decision decision;
  decision.kind = rendezvous::Decision::Kind::kOpenRound;
  decision.ranks = job.ranks;
  // The same members: no restart (kMemberLost counts none), the store on the new port.
  decision.reason = rendezvous::RoundReason::kMemberLost;
  decision.detail = what + "; the store moves to port " + std::to_string(port);
  const std::string& endpoint = job.store_endpoint;
  decision.store_endpoint = endpoint.substr(0, endpoint.rfind(':') + 1) + std::to_string(port);
  propose_decision(now, job, decision, ledger, consensus);
  return true;
}

void RoundService::plan_job(
    TimePoint now, const rendezvous::JobRecord& job,
    const std::map<std::string, std::pair<const membership::MemberView*, std::uint32_t>>& usable,
    rendezvous::NodeLedger& ledger, ConsensusHost& consensus) {
  LeaderJob& state = leader_jobs_[job.id];
  const rendezvous::WallTime wall = wall_time(*clock_);
  const auto& r = config_.get().rendezvous;

  rendezvous::PlannerInput input;
  input.job = &job;
  input.now = wall;
  input.config = r;
  // A worker failure waits out the job tier's detection time first: when a daemon dies, its
  // peers' workers crash on the broken connection (~0.2 s) before the job tier declares the
  // daemon lost (~0.4 s: the same reset drops the daemons' connection, so it is suspected at
  // once and confirmed by indirect probes), and a lost member must win (it costs no restart,
  // and the crashed survivors are not to blame). A silent death makes no worker crash early.
  const Duration failure_grace = r.job_peer_timeout;
  // A member that drains stops its workers on purpose: failures in its round are no one's fault
  // (the round is re-planned without it once it has left membership).
  const bool member_draining =
      std::any_of(job.ranks.begin(), job.ranks.end(), [&](const auto& member) {
        const auto leaving = leaving_.find(member.node);
        return leaving != leaving_.end() && leaving->second == member.generation;
      });
  const bool failure_due =
      state.failure && !member_draining && now >= state.failure_seen + failure_grace;
  if (state.failure && !failure_due && !member_draining) {
    next_plan_ = std::min(next_plan_, state.failure_seen + failure_grace);
  }
  input.worker_failure = failure_due ? state.failure : std::nullopt;
  // Quarantine: count this round's worker failure against the node that reported it, once.
  auto& quarantined = quarantine_[job.id];
  // Not when a member is lost: its peers' workers crash because of it, not their node.
  const bool members_alive =
      std::all_of(job.ranks.begin(), job.ranks.end(), [&](const auto& member) {
        const auto found = usable.find(member.node);
        return found != usable.end() && found->second.first->generation == member.generation &&
               !state.lost.contains({member.node, member.generation});
      });
  // Nor once the job recovers from a lost member: the failure stays the round's while the job
  // waits, and the member may be alive again (back in membership, or the job tier's loss
  // forgotten) before the round changes.
  const bool lost_member_to_blame = job.state == JobState::kRecovering &&
                                    job.recovery_cause != rendezvous::RoundReason::kWorkerFailed;
  if (failure_due && !state.failure_node.empty() && members_alive && !lost_member_to_blame &&
      job.restarts < job.spec.max_restarts) {
    Quarantine& q = quarantined[state.failure_node];
    if (q.counted_round != job.round) {
      q.counted_round = job.round;
      ++q.failures;
      if (q.failures >= 2) {
        const Duration base = std::max<Duration>(job.spec.restart_backoff, kMinQuarantine);
        const Duration out = std::min<Duration>(
            base * (std::int64_t{1} << std::min<std::uint32_t>(q.failures - 2, 20)),
            kMaxQuarantine);
        q.until = now + out;
        spdlog::warn("rendezvous: job {}: node {} quarantined for {} ms after {} worker failures",
                     job.id, state.failure_node,
                     std::chrono::duration_cast<std::chrono::milliseconds>(out).count(),
                     q.failures);
      }
    }
  }
  // A quarantined node stays out of the job while the job reaches min_nodes without it (it does
  // not grow back in to fail again); a job that needs it takes it back once its time out ends.
  // Only nodes that could join the job's next round count: with enough free slots and not
  // declared lost. Counting nodes whose slots other jobs hold, a job whose round keeps the
  // quarantined node's slot would wait for them for ever when those jobs wait the same way.
  std::set<std::string> sitting_out;
  for (const auto& [name, q] : quarantined) {
    if (q.failures >= 2 && usable.contains(name)) sitting_out.insert(name);
  }
  const std::uint32_t slots_needed = std::max<std::uint32_t>(1, job.spec.workers_per_node);
  const auto could_join = [&](const auto& entry) {
    const auto& [name, usable_node] = entry;
    return !sitting_out.contains(name) && usable_node.second >= slots_needed &&
           !state.lost.contains({name, usable_node.first->generation});
  };
  const auto could_join_count =
      static_cast<std::size_t>(std::count_if(usable.begin(), usable.end(), could_join));
  if (!sitting_out.empty() && could_join_count < job.spec.min_nodes) {
    std::erase_if(sitting_out,
                  [&](const std::string& name) { return now >= quarantined[name].until; });
  }
  for (const auto& [name, entry] : usable) {
    if (sitting_out.contains(name)) continue;
    const membership::MemberView* view = entry.first;
    // A member keeps the slots it has (the node's free count excludes other jobs only).
    const bool lost = state.lost.contains({name, view->generation});
    input.candidates.push_back(
        rendezvous::Candidate{.name = name,
                              .generation = view->generation,
                              .slots = entry.second,
                              .alive = !lost,
                              .address = host_of(view->address),
                              .store_port = store_port_for(now, job, name, view->generation, ledger,
                                                           /*strict=*/false)});
    const bool member = std::any_of(job.ranks.begin(), job.ranks.end(), [&](const auto& a) {
      return a.node == name && a.generation == view->generation;
    });
    if (!member && !lost) {
      input.wait_list.push_back(rendezvous::Waiter{.node = name,
                                                   .generation = view->generation,
                                                   .since = first_seen_[{name, view->generation}]});
    }
  }
  rendezvous::Decision decision = rendezvous::plan(input);
  // A member left out by quarantine looks lost to the planner; the round still replaces a
  // failed worker, so it consumes a restart like any other worker failure. So does a recovery
  // that waits for the quarantined node (were it counted as a lost node, a worker that can
  // never start would consume no restart and its job would never fail).
  if (failure_due && decision.reason == rendezvous::RoundReason::kMemberLost) {
    bool only_quarantine = true;
    bool any = false;
    if (decision.kind == rendezvous::Decision::Kind::kOpenRound) {
      for (const auto& member : job.ranks) {
        const bool kept = std::any_of(decision.ranks.begin(), decision.ranks.end(),
                                      [&](const auto& a) { return a.node == member.node; });
        if (kept) continue;
        any = true;
        only_quarantine = only_quarantine && sitting_out.contains(member.node);
      }
    } else if (decision.kind == rendezvous::Decision::Kind::kRecover) {
      // Every member is alive: the ones the planner misses are the quarantined ones.
      any = members_alive && std::any_of(job.ranks.begin(), job.ranks.end(), [&](const auto& m) {
              return sitting_out.contains(m.node);
            });
    }
    if (any && only_quarantine) {
      decision.reason = rendezvous::RoundReason::kWorkerFailed;
      decision.failed_node = state.failure_node;
      decision.detail =
          state.failure->detail + "; node " + state.failure_node + " is quarantined for this job";
    }
  }
  if (decision.kind == rendezvous::Decision::Kind::kNone ||
      decision.kind == rendezvous::Decision::Kind::kWaitUntil) {
    return;
  }
  // A member that is gone from the round may still run workers under its lease: its work is
  // placed elsewhere only once that lease has certainly run out. (Recovering places nothing;
  // a quarantined member is alive, and its lease is not renewed once the round has moved on,
  // so its leftover workers -- stuck on peers that are gone -- stop within a lease.)
  if (decision.kind == rendezvous::Decision::Kind::kOpenRound) {
    for (const auto& member : job.ranks) {
      const bool kept =
          std::any_of(decision.ranks.begin(), decision.ranks.end(), [&](const auto& a) {
            return a.node == member.node && a.generation == member.generation;
          });
      // A member that left gracefully stopped its workers before it left: nothing to wait for.
      const bool left = left_.contains({member.node, member.generation});
      if (!kept && !left && !sitting_out.contains(member.node) &&
          !granter_.may_replace(member.node, now)) {
        next_plan_ = std::min(next_plan_, granter_.replace_after(member.node));
        return;
      }
    }
  }
  propose_decision(now, job, decision, ledger, consensus);
}

void RoundService::propose_decision(TimePoint now, const rendezvous::JobRecord& job,
                                    const rendezvous::Decision& decision,
                                    rendezvous::NodeLedger& ledger, ConsensusHost& consensus) {
  LeaderJob& state = leader_jobs_[job.id];
  const rendezvous::WallTime wall = wall_time(*clock_);
  rendezvous::Command command;
  if (decision.kind == rendezvous::Decision::Kind::kOpenRound) {
    command = rendezvous::make_open_round(job, decision, wall);
  } else {
    command = rendezvous::make_set_state(job, decision, wall);
  }
  spdlog::info("rendezvous: job {} round {}: {} ({})", job.id, job.round,
               rendezvous::to_string(decision.kind), decision.detail);
  std::optional<Opened> opened;
  if (const auto* open = std::get_if<rendezvous::OpenRound>(&command)) {
    opened = Opened{.job = job.id,
                    .round = open->round,
                    .nodes = static_cast<std::uint32_t>(open->ranks.size()),
                    .reason = open->reason,
                    .detail = decision.detail};
    // Its slots and store port are taken from now on: by the next job of this pass, and by
    // later passes until the table holds them (the completion runs once it is applied).
    const std::uint16_t port = rendezvous::endpoint_port(open->store_endpoint);
    ledger.hold(job.id, open->ranks, port);
    proposed_[job.id] = std::make_pair(open->ranks, port);
  }
  state.in_flight = true;
  const std::string id = job.id;
  consensus.propose(now, rendezvous::encode_command(command),
                    [this, id, opened](Result<std::string> committed) {
                      if (committed.ok() && opened) on_round_opened(*opened, *committed);
                      leader_jobs_[id].in_flight = false;
                      proposed_.erase(id);
                      next_lead_ = TimePoint{};  // the table changed, or re-plan: act now
                      if (!committed.ok()) {
                        spdlog::info("rendezvous: job {}: proposal not committed: {}", id,
                                     committed.error().message);
                      }
                    });
}

void RoundService::send_starts(TimePoint now, const rendezvous::JobRecord& job, LeaderJob& state,
                               const std::map<std::string, std::string>& addresses,
                               std::uint64_t term) {
  if (now < state.next_start) return;
  state.next_start = now + kStartResend;
  RoundStart start{.term = term,
                   .state = job.state,
                   .round = rendezvous::OpenRound{.job_id = job.id,
                                                  .round = job.round,
                                                  .expected_prev_round = 0,
                                                  .ranks = job.ranks,
                                                  .store_endpoint = job.store_endpoint,
                                                  .reason = job.round_reason,
                                                  .detail = "",
                                                  .at = job.round_opened_at},
                   .spec = job.spec,
                   .restarts = job.restarts};
  const std::string body = encode_round_start(start);
  for (const auto& member : job.ranks) {
    if (is_active_round_state(job.state) && state.acked.contains(member.node)) continue;
    wire::Envelope envelope;
    envelope.type = wire::MsgType::kRoundStart;
    envelope.body = body;
    if (member.node == self_) {
      envelope.sender = self_;
      envelope.generation = generation_;
      on_round_start(now, envelope);
      continue;
    }
    const auto address = addresses.find(member.node);
    sends_.push_back(
        Send{member.node, address == addresses.end() ? "" : address->second, std::move(envelope)});
  }
}

void RoundService::on_report(TimePoint now, const wire::Envelope& envelope) {
  Result<RoundReport> decoded = decode_round_report(envelope.body);
  if (!decoded.ok()) {
    ++malformed_reports_;
    spdlog::debug("rendezvous: dropped a report from {} (gen {}): {}", envelope.sender,
                  envelope.generation, decoded.error().message);
    return;
  }
  on_report(now, envelope.sender, envelope.generation, *decoded);
}

void RoundService::on_report(TimePoint now, const std::string& from, std::uint64_t generation,
                             const RoundReport& report) {
  // The last line of defence: nothing in a report may stop the leader (and then the next).
  try {
    act_on_report(now, from, generation, report);
  } catch (const std::exception& e) {
    ++malformed_reports_;
    spdlog::error("rendezvous: a {} report from {} (gen {}) failed: {}", report_name(report.kind),
                  from, generation, e.what());
  }
}

void RoundService::act_on_report(TimePoint now, const std::string& from, std::uint64_t generation,
                                 const RoundReport& report) {
  // Slots are kept even before this node's first lead() pass: a node reports them once per
  // leader change (and every kNodeInfoResend), right when a new leader is elected.
  if (!leading_ && report.kind != ReportKind::kNodeInfo) return;
  const std::string& job = report.job;
  const std::uint64_t round = report.round;
  if (report.kind == ReportKind::kNodeInfo) {
    const std::uint32_t slots = report.slots;
    auto& known = node_slots_[from];
    if (known != std::make_pair(generation, slots)) {
      known = {generation, slots};
      spdlog::info("rendezvous: {} (gen {}) offers {} worker slot(s)", from, generation, slots);
      next_plan_ = now;
      next_lead_ = TimePoint{};
    }
    return;
  }
  if (report.kind == ReportKind::kNodeLeaving) {
    if (leaving_.insert_or_assign(from, generation).second) {
      spdlog::info("rendezvous: {} (gen {}) drains: no new work; its jobs go on without it", from,
                   generation);
      next_plan_ = now;
      next_lead_ = TimePoint{};
    }
    return;
  }
  // Incident reports are about rounds that may be over already: the log checks rounds itself.
  if (report.kind == ReportKind::kWorkersStopped) {
    incidents_.on_workers_stopped(now, job, round, from);
    return;
  }
  if (report.kind == ReportKind::kProgress) {
    incidents_.on_progress(now, job, round, report.event, report.step, report.resumed_from);
    return;
  }
  const auto it = leader_jobs_.find(job);
  if (it == leader_jobs_.end() || it->second.round_seen != round) return;  // stale report
  if (report.kind == ReportKind::kWorkerFailed || report.kind == ReportKind::kPeerLost) {
    const auto members = round_members_.find(job);
    const bool lost = report.kind == ReportKind::kPeerLost;
    const std::optional<std::int64_t> evidence = lost ? report.last_heard_ms : report.at_ms;
    if (members != round_members_.end() && members->second.first == round) {
      incidents_.on_loss(now, wall_time(*clock_).time_since_epoch().count(), job, round,
                         members->second.second, lost ? "node_lost" : "worker_failed",
                         lost ? report.peer : from, evidence);
    }
  }
  if (report.kind == ReportKind::kWorkerFailed) {
    if (!it->second.failure) {
      const std::string detail =
          report.detail.empty() ? "a worker of " + from + " failed" : report.detail;
      spdlog::warn("rendezvous: job {} round {}: {}", job, round, detail);
      it->second.failure = rendezvous::WorkerFailure{
          .round = round, .at = wall_time(*clock_), .detail = detail, .node = from};
      it->second.failure_node = from;
      it->second.failure_seen = now;
      next_plan_ = now;
      next_lead_ = TimePoint{};
    }
    return;
  }
  if (report.kind == ReportKind::kStorePortBusy) {
    // Acted on by the next lead() pass, which checks it came from the round's rank-0 node.
    if (!it->second.port_busy) {
      it->second.port_busy = LeaderJob::PortConflict{
          .node = from, .generation = generation, .port = report.port, .detail = report.detail};
      next_plan_ = now;
      next_lead_ = TimePoint{};
    }
    return;
  }
  if (report.kind == ReportKind::kWorkersDone) {
    if (it->second.done.insert(from).second) next_lead_ = TimePoint{};
    return;
  }
  if (report.kind == ReportKind::kRoundAck) {
    if (it->second.acked.insert(from).second) {
      next_lead_ = TimePoint{};  // the round may be complete: commit running now
      spdlog::debug("rendezvous: {} (gen {}) runs job {} round {}", from, generation, job, round);
      // The last ack completes the incident's rendezvous now: a worker's first step may be in
      // the same batch of messages, before the next lead() pass.
      const auto members = round_members_.find(job);
      if (members != round_members_.end() && members->second.first == round &&
          std::all_of(members->second.second.begin(), members->second.second.end(),
                      [&](const std::string& node) { return it->second.acked.contains(node); })) {
        incidents_.on_round_acked(now, job, round);
      }
    }
  } else if (report.kind == ReportKind::kPeerLost) {
    const std::string& peer = report.peer;
    const std::uint64_t peer_generation = report.peer_generation;
    if (it->second.lost.emplace(std::make_pair(peer, peer_generation), now + kLostMemory).second) {
      spdlog::info("rendezvous: {} reports {} (gen {}) lost for job {} round {} ({})", from, peer,
                   peer_generation, job, round, report.reason);
      next_plan_ = now;
      next_lead_ = TimePoint{};
    }
  }
}

void RoundService::observe(TimePoint now, const rendezvous::JobTable& table,
                           const std::vector<membership::MemberView>& members) {
  const std::int64_t wall = wall_time(*clock_).time_since_epoch().count();
  // Drains are replicated in the table; the leader logs them as it sees them change.
  const auto& drained = table.drained();
  if (drained != drains_seen_) {
    for (const auto& [node, drain] : drained) {
      if (!drains_seen_.contains(node)) {
        incidents_.record(ClusterEvent{.at_ms = drain.at.time_since_epoch().count(),
                                       .kind = "node_drained",
                                       .node = node,
                                       .job = "",
                                       .detail = drain.reason});
      }
    }
    for (const auto& [node, drain] : drains_seen_) {
      if (!drained.contains(node)) {
        incidents_.record(ClusterEvent{
            .at_ms = wall, .kind = "node_undrained", .node = node, .job = "", .detail = ""});
      }
    }
    drains_seen_ = drained;
  }
  std::map<std::string, const membership::MemberView*> views;
  for (const membership::MemberView& m : members) views[m.name] = &m;
  for (const auto& [id, job] : table.jobs()) {
    if (rendezvous::is_terminal(job.state)) {
      if (round_members_.erase(id) > 0) incidents_.on_job_ended(now, id);
      continue;
    }
    if (!is_active_round_state(job.state) || job.round == 0) continue;
    auto& [round, nodes] = round_members_[id];
    if (round != job.round) {
      // A new round in the table (seen here rather than in the proposal's completion, which
      // may run after the members' first acks).
      const std::uint64_t old_round = round;
      const std::set<std::string> old_nodes = std::move(nodes);
      round = job.round;
      nodes.clear();
      for (const auto& r : job.ranks) nodes.insert(r.node);
      if (old_round != 0) {
        incidents_.on_round_committed(
            now, wall, id, old_round, job.round, static_cast<std::uint32_t>(job.ranks.size()),
            job.round_reason == rendezvous::RoundReason::kGrow, old_nodes);
      }
    }
    const auto state = leader_jobs_.find(id);
    if (state != leader_jobs_.end() && state->second.round_seen == job.round) {
      bool all_acked = !job.ranks.empty();
      for (const auto& r : job.ranks) all_acked = all_acked && state->second.acked.contains(r.node);
      if (all_acked || job.state == JobState::kRunning) {
        incidents_.on_round_acked(now, id, job.round);
      }
    }
    // A member gone from cluster membership (dead, left, or back as a new generation) is
    // evidence of a loss even before the job tier reports it (a silent death of a lone member).
    for (const auto& r : job.ranks) {
      const auto found = views.find(r.node);
      const membership::MemberView* view = found == views.end() ? nullptr : found->second;
      std::optional<std::int64_t> evidence;
      std::string cause = "node_lost";
      if (view != nullptr && view->generation == r.generation) {
        if (view->state == membership::MemberState::kDead) {
          if (view->last_heard != TimePoint{})
            evidence = wall_ms_at(*clock_, now, view->last_heard);
        } else if (view->state == membership::MemberState::kLeft) {
          cause = "node_left";
          evidence = wall_ms_at(*clock_, now, view->state_since);
        } else {
          continue;
        }
      }
      incidents_.on_loss(now, wall, id, job.round, nodes, cause, r.node, evidence);
    }
  }
}

void RoundService::on_round_opened(const Opened& opened, const std::string& applied) {
  const json result = json::parse(applied, nullptr, /*allow_exceptions=*/false);
  if (!result.is_object() || result.value("code", -1) != 0) return;  // refused by the table
  ++rounds_opened_;
  const std::int64_t wall = wall_time(*clock_).time_since_epoch().count();
  incidents_.record(ClusterEvent{
      .at_ms = wall,
      .kind = "round_opened",
      .node = "",
      .job = opened.job,
      .detail = "round " + std::to_string(opened.round) + " (" +
                rendezvous::to_string(opened.reason) + ", " + std::to_string(opened.nodes) +
                (opened.nodes == 1 ? " node" : " nodes") + "): " + opened.detail});
}

// ---------------------------------------------------------------------------------------------
// Member half

void RoundService::on_envelope(TimePoint now, const wire::Envelope& envelope) {
  last_now_ = now;
  if (envelope.type == wire::MsgType::kRoundStart) {
    on_round_start(now, envelope);
    return;
  }
  if (rendezvous::is_job_type(envelope.type)) {
    auto message = rendezvous::decode_job(envelope.type, envelope.body);
    if (!message.ok()) return;
    const std::string& job =
        std::visit([](const auto& m) -> const std::string& { return m.ref.job; }, *message);
    const auto it = watched_.find(job);
    if (it == watched_.end() || !it->second.watch) return;
    it->second.heard[envelope.sender] = now;
    rendezvous::JobWatchEffects effects;
    it->second.watch->on_message(now, envelope.sender, envelope.generation, *message, effects);
    carry_out(now, effects);
    return;
  }
  if (rendezvous::is_lease_type(envelope.type)) {
    auto message = rendezvous::decode_lease(envelope.type, envelope.body);
    if (!message.ok()) return;
    if (const auto* request = std::get_if<rendezvous::LeaseRequest>(&*message)) {
      // Only the daemon itself may ask for its own lease.
      if (request->node != envelope.sender) return;
      const auto grant = granter_.on_request(now, *request, in_rounds_.contains(request->node));
      if (!grant) return;
      wire::Envelope reply;
      reply.type = wire::MsgType::kLeaseGrant;
      reply.body = rendezvous::encode_lease(*grant);
      if (envelope.sender == self_) {
        reply.sender = self_;
        reply.generation = generation_;
        on_envelope(now, reply);
      } else {
        sends_.push_back(Send{envelope.sender, envelope.sender_address, std::move(reply)});
      }
    } else if (const auto* grant = std::get_if<rendezvous::LeaseGrant>(&*message)) {
      rendezvous::LeaseHolderEffects effects;
      holder_.on_grant(now, *grant, effects);
      carry_out_lease(now, effects);
    }
  }
}

void RoundService::on_peer_disconnected(TimePoint now, const std::string& peer) {
  for (auto& [job, watched] : watched_) {
    if (!watched.watch || peer == self_) continue;
    rendezvous::JobWatchEffects effects;
    watched.watch->on_peer_event(now, peer, rendezvous::PeerEventKind::kDisconnected, effects);
    carry_out(now, effects);
  }
}

void RoundService::on_round_start(TimePoint now, const wire::Envelope& envelope) {
  auto start = decode_round_start(envelope.body);
  if (!start.ok()) {
    spdlog::debug("dropped a round start from {}: {}", envelope.sender, start.error().message);
    return;
  }
  const rendezvous::OpenRound& round = start->round;
  const rendezvous::RoundStamp stamp{.term = start->term, .round = round.round};
  if (!is_active_round_state(start->state)) {
    if (fence_.check(round.job_id, stamp) == rendezvous::RoundFence::Verdict::kStale) return;
    const auto it = watched_.find(round.job_id);
    if (it != watched_.end() && it->second.info.round <= round.round) {
      spdlog::info("job {} round {}: {}; this daemon stops watching it", round.job_id, round.round,
                   rendezvous::to_string(start->state));
      watched_.erase(it);
      update_lease_want(now);
    }
    // Cancelled by its owner: the round is healthy, so the workers get TERM and a grace period
    // to checkpoint; a recovering or failed round's collectives are broken: kill at once.
    orders_.push_back(
        WorkerOrder{.kind = WorkerOrder::Kind::kStop,
                    .start = std::nullopt,
                    .job = round.job_id,
                    .graceful = start->state == JobState::kCancelled,
                    .why = std::string("the job is ") + rendezvous::to_string(start->state),
                    .final = rendezvous::is_terminal(start->state)});
    if (rendezvous::is_terminal(start->state)) fence_.forget(round.job_id);
    return;
  }
  const auto verdict = fence_.observe(round.job_id, stamp);
  if (verdict == rendezvous::RoundFence::Verdict::kStale) {
    ++stale_starts_;
    spdlog::info("job {}: ignored a stale start of round {} (term {}) from {}", round.job_id,
                 round.round, start->term, envelope.sender);
    return;
  }
  const auto self = std::find_if(round.ranks.begin(), round.ranks.end(), [&](const auto& a) {
    return a.node == self_ && a.generation == generation_;
  });
  if (self == round.ranks.end()) {
    if (watched_.erase(round.job_id) > 0) update_lease_want(now);
    orders_.push_back(
        WorkerOrder{.kind = WorkerOrder::Kind::kStop,
                    .start = std::nullopt,
                    .job = round.job_id,
                    .graceful = false,
                    .why = "round " + std::to_string(round.round) + " does not include this node",
                    .final = true});
    return;
  }
  // The fence passed: the sender leads the newest term this daemon knows of.
  lease_leader_ = envelope.sender;
  lease_leader_address_ = envelope.sender_address;
  Watched& watched = watched_[round.job_id];
  watched.leader = envelope.sender;
  watched.leader_address = envelope.sender_address;
  if (watched.info.round != round.round || !watched.watch) {
    watched.info = MemberRound{.job = round.job_id,
                               .term = start->term,
                               .round = round.round,
                               .first_rank = self->first_rank,
                               .slots = self->slots,
                               .world = rendezvous::world_size(round.ranks),
                               .store_endpoint = round.store_endpoint,
                               .fenced = false,
                               .watch = {}};
    watched.declared.clear();
    const auto& r = config_.get().rendezvous;
    watched.watch = std::make_unique<rendezvous::JobWatch>(
        self_, generation_,
        rendezvous::JobWatchConfig::from(r.job_keepalive_interval, r.job_peer_timeout),
        seed_ ^ round.round);
    std::vector<rendezvous::JobPeer> peers;
    for (const auto& member : round.ranks) {
      peers.push_back(rendezvous::JobPeer{member.node, member.generation, ""});
    }
    rendezvous::JobWatchEffects effects;
    (void)watched.watch->set_round(now, round.job_id, start->term, round.round, peers, effects);
    spdlog::info("job {} round {} (term {}): ranks {}..{} of {} on this node, store {}",
                 round.job_id, round.round, start->term, self->first_rank,
                 self->first_rank + self->slots - 1, watched.info.world, round.store_endpoint);
    carry_out(now, effects);
  }
  update_lease_want(now);
  // The leader counts the round as started once the workers run; the supervisor acknowledges
  // later through report_for() when it must first stop an older round's workers.
  // A round this daemon fenced itself out of stays stopped: its lease may already count as run
  // out at the leader, which can re-place the work at any moment.
  if (watched.info.fenced) return;
  orders_.push_back(WorkerOrder{.kind = WorkerOrder::Kind::kRun,
                                .start = std::move(*start),
                                .job = round.job_id,
                                .graceful = false,
                                .why = "",
                                .final = false});
}

void RoundService::acknowledge(const RoundStart& start) {
  const auto it = watched_.find(start.round.job_id);
  if (it == watched_.end() || it->second.info.round != start.round.round ||
      it->second.info.fenced) {
    return;
  }
  report(it->second, round_report(ReportKind::kRoundAck, start.round.job_id, start.round.round));
}

void RoundService::announce_leaving() {
  for (const auto& [job, watched] : watched_) {
    report(watched, round_report(ReportKind::kNodeLeaving, job, watched.info.round));
  }
}

void RoundService::report_for(const RoundReport& report) {
  const auto it = watched_.find(report.job);
  if (it != watched_.end()) {
    this->report(it->second, report);
    return;
  }
  // A stop is reported after this daemon stopped watching the job (it ended, is recovering or
  // left this node out): to the leader it believes in.
  if (report.kind != ReportKind::kWorkersStopped || leader_.empty()) return;
  send_report(leader_, leader_address_, report);
}

void RoundService::set_leader(TimePoint now, const std::string& leader,
                              const std::string& address) {
  if (leader.empty()) return;
  if (leader != leader_ || (address != leader_address_ && !address.empty())) {
    leader_ = leader;
    leader_address_ = address;
    next_node_info_ = now;
  }
  if (now < next_node_info_) return;
  next_node_info_ = now + kNodeInfoResend;
  last_now_ = std::max(last_now_, now);
  RoundReport info = round_report(ReportKind::kNodeInfo, "", 0);
  info.slots = slots_;
  send_report(leader_, leader_address_, info);
}

void RoundService::report(const Watched& watched, const RoundReport& report) {
  send_report(watched.leader, watched.leader_address, report);
}

void RoundService::send_report(const std::string& leader, const std::string& address,
                               const RoundReport& report) {
  if (leader == self_) {
    on_report(last_now_, self_, generation_, report);
    return;
  }
  wire::Envelope envelope;
  envelope.type = wire::MsgType::kRoundReport;
  envelope.body = encode_round_report(report);
  sends_.push_back(Send{leader, address, std::move(envelope)});
}

void RoundService::carry_out(TimePoint now, rendezvous::JobWatchEffects& effects) {
  for (rendezvous::JobOutgoing& out : effects.sends) {
    wire::Envelope envelope;
    envelope.type = rendezvous::job_message_type(out.message);
    envelope.body = rendezvous::encode_job(out.message);
    sends_.push_back(Send{out.to, out.to_address, std::move(envelope)});
  }
  for (const rendezvous::PeerLost& lost : effects.lost) {
    const auto it = watched_.find(lost.job);
    if (it == watched_.end() || it->second.info.round != lost.round) continue;
    spdlog::warn("job {} round {}: peer {} (gen {}) lost ({})", lost.job, lost.round, lost.peer,
                 lost.generation, rendezvous::to_string(lost.reason));
    it->second.declared.push_back(lost);
    const auto heard = it->second.heard.find(lost.peer);
    report(it->second, lost_report(lost, heard == it->second.heard.end()
                                             ? 0
                                             : wall_ms_at(*clock_, now, heard->second)));
    next_report_ = now + kReportResend;
  }
}

void RoundService::tick(TimePoint now) {
  last_now_ = now;
  for (auto& [job, watched] : watched_) {
    if (!watched.watch) continue;
    rendezvous::JobWatchEffects effects;
    watched.watch->tick(now, effects);
    carry_out(now, effects);
  }
  if (now >= next_report_) {
    next_report_ = kNever;
    for (auto& [job, watched] : watched_) {
      for (const rendezvous::PeerLost& lost : watched.declared) {
        const auto heard = watched.heard.find(lost.peer);
        report(watched, lost_report(lost, heard == watched.heard.end()
                                              ? 0
                                              : wall_ms_at(*clock_, now, heard->second)));
        next_report_ = now + kReportResend;
      }
      // A round this daemon fenced itself out of (its lease ran out) has no workers here any
      // more, and no member may notice: the leader hears it as this node's worker failure, so
      // it opens a new round (which names this node again when it is usable) instead of keeping
      // a running job without workers. Repeated while the round stands, like other failures.
      if (watched.info.fenced) {
        RoundReport failed = round_report(ReportKind::kWorkerFailed, job, watched.info.round);
        failed.rank = watched.info.first_rank;
        failed.detail = "this node's lease from the leader ran out (no renewal for " +
                        std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                           config_.get().rendezvous.lease_duration)
                                           .count()) +
                        " ms); its workers were stopped (self-fencing)";
        failed.at_ms = clock_->wall_ms();
        report(watched, failed);
        next_report_ = now + kReportResend;
      }
    }
  }
  rendezvous::LeaseHolderEffects effects;
  holder_.tick(now, effects);
  carry_out_lease(now, effects);
  if (leading_) incidents_.tick(now);
}

void RoundService::update_lease_want(TimePoint now) {
  const bool member = std::any_of(watched_.begin(), watched_.end(),
                                  [](const auto& w) { return !w.second.info.fenced; });
  if (member && !holder_.wanted()) {
    rendezvous::LeaseHolderEffects effects;
    holder_.want(now, effects);
    carry_out_lease(now, effects);
  } else if (!member && holder_.wanted()) {
    holder_.release();
  }
}

void RoundService::carry_out_lease(TimePoint now, rendezvous::LeaseHolderEffects& effects) {
  for (const rendezvous::LeaseRequest& request : effects.requests) {
    wire::Envelope envelope;
    envelope.type = wire::MsgType::kLeaseRequest;
    envelope.body = rendezvous::encode_lease(request);
    if (lease_leader_ == self_) {
      envelope.sender = self_;
      envelope.generation = generation_;
      on_envelope(now, envelope);
    } else if (!lease_leader_.empty()) {
      sends_.push_back(Send{lease_leader_, lease_leader_address_, std::move(envelope)});
    }
  }
  if (effects.stop_workers) {
    for (auto& [job, watched] : watched_) {
      if (watched.info.fenced) continue;
      watched.info.fenced = true;
      spdlog::warn(
          "job {} round {}: the leader's lease ran out; this daemon's workers must stop "
          "(self-fencing) until a new round names it",
          job, watched.info.round);
      orders_.push_back(WorkerOrder{.kind = WorkerOrder::Kind::kStop,
                                    .start = std::nullopt,
                                    .job = job,
                                    .graceful = false,
                                    .why = "the leader's lease ran out",
                                    .final = false});
      next_report_ = std::min(next_report_, now);  // the next tick tells the leader (see tick)
    }
  }
}

TimePoint RoundService::next_deadline() const {
  TimePoint deadline = std::min(holder_.next_deadline(), next_report_);
  if (leading_) deadline = std::min({deadline, next_lead_, incidents_.next_deadline()});
  for (const auto& [job, watched] : watched_) {
    if (watched.watch) deadline = std::min(deadline, watched.watch->next_deadline());
  }
  return deadline;
}

std::vector<MemberRound> RoundService::member_rounds() const {
  std::vector<MemberRound> rounds;
  for (const auto& [job, watched] : watched_) {
    rounds.push_back(watched.info);
    if (watched.watch) rounds.back().watch = watched.watch->stats();
  }
  return rounds;
}

}  // namespace elastic::node
