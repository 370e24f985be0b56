#include "daemon/node/round_leader.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <set>
#include <string_view>
#include <nlohmann/json.hpp>

#include "daemon/node/round_codec.h"
#include "daemon/node/scheduling.h"
#include "daemon/rendezvous/job_codec.h"

namespace elastic::node {
namespace {

using json = nlohmann::json;
using rendezvous::is_active_round_state;
using rendezvous::JobState;

constexpr std::chrono::milliseconds kPlanInterval{100};
constexpr std::chrono::seconds kStartResend{1};
// A member answers a RoundStart at once (round_received): one without an answer this long after
// the send has most likely lost it (or its answer).
constexpr std::chrono::milliseconds kStartQuickResend{250};
// How long the leader keeps telling an ended job's members that it ended.
constexpr std::chrono::seconds kEndNotice{10};
// A store port a node found in use stays out of its rounds this long (its holder may let go).
constexpr std::chrono::minutes kBusyPortMemory{10};
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

// Alive or suspect in membership: the members the leader may place work on.
bool reachable(const membership::MemberView& m) {
  return m.state == membership::MemberState::kAlive || m.state == membership::MemberState::kSuspect;
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

RoundLeader::RoundLeader(std::string self, std::uint64_t generation, const config::Current& config,
                         const Clock& clock)
    : clock_(&clock),
      self_(std::move(self)),
      generation_(generation),
      config_(config),
      // The margin covers a deposed leader granting until CheckQuorum demotes it (one election
      // timeout) and clock-rate differences.
      // A deposed leader grants until CheckQuorum makes it step down: up to two election
      // timeouts after it lost its majority (the check runs once per timeout), while a fast
      // election can elect its successor at once.
      granter_(config.get().rendezvous.lease_duration,
               2 * config.get().consensus.election_timeout) {}

void RoundLeader::lead(TimePoint now, bool leading, const rendezvous::JobTable& table,
                       const std::vector<membership::MemberView>& members,
                       ConsensusHost* consensus) {
  if (!leading || consensus == nullptr) {
    if (leading_) {
      granter_.step_down();
      incidents_.step_down();
      history_seeded_ = false;
      history_in_flight_ = false;
      round_members_.clear();
      quiet_rounds_.clear();
      leader_jobs_.clear();
      scaling_.clear();
      proposed_.clear();
      in_rounds_.clear();
      in_rounds_index_.reset();
      settled_.clear();
      schedule_key_.reset();
      ++proposals_epoch_;
      schedule_ = {};
      preemptions_ = 0;
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

  refresh_members(members, wall);
  const auto& alive = alive_;
  const auto& addresses = addresses_;
  // A drained node's entry goes once that daemon instance is no longer a member at all.
  std::erase_if(leaving_, [&](const auto& entry) {
    const auto view = views_.find(entry.first);
    const bool gone = view == views_.end() || view->second.generation != entry.second;
    if (gone) ++node_epoch_;
    return gone;
  });
  observe_drains(table, wall.time_since_epoch().count());
  refresh_in_rounds(now, table);
  for (auto& [node, ports] : busy_ports_) {
    std::erase_if(ports, [now](const auto& entry) { return now >= entry.second; });
  }
  std::erase_if(busy_ports_, [](const auto& entry) { return entry.second.empty(); });

  // Until this leader applied an entry of its own term, its table may lack a round an earlier
  // leader proposed that still commits: planning now could give that round's slots again.
  const bool caught_up = consensus->applied_own_term();
  // The replicated history, once this leader's table has every earlier leader's entries.
  if (caught_up && !history_seeded_) {
    incidents_.seed(table.history());
    history_seeded_ = true;
  }
  if (caught_up) record_history(now, wall, *consensus);
  const bool plan_now = caught_up && now >= next_plan_;
  if (now >= next_plan_) next_plan_ = now + (caught_up ? Duration(kPlanInterval) : kCatchUpRetry);
  // Slots and store ports: a node's are shared by the jobs whose rounds hold them; each job may
  // use what the others leave. Held: the table's rounds, this leader's proposals in flight, and
  // (plan_job) each round decided in this pass before the next job is planned. Only planning
  // reads it.
  // Built on first use: a pass that plans no job and preempts nothing never needs it.
  std::optional<rendezvous::NodeLedger> ledger_built;
  const std::function<rendezvous::NodeLedger&()> ledger_of_pass =
      [&]() -> rendezvous::NodeLedger& {
    if (!ledger_built) {
      ledger_built.emplace();
      for (const auto& [name, known] : node_slots_) ledger_built->set_capacity(name, known.second);
      ledger_built->hold_table(table);
      for (const auto& [id, proposal] : proposed_) {
        ledger_built->hold(id, proposal.first, proposal.second);
      }
    }
    return *ledger_built;
  };
  if (plan_now) schedule(now, table, alive, ledger_of_pass, *consensus);
  for (const auto& [id, job] : table.jobs()) {
    LeaderJob& state = leader_jobs_[id];
    if (state.round_seen != job.round) {
      const bool in_flight = state.in_flight;
      auto lost = std::move(state.lost);
      const std::uint32_t port_moves = state.port_moves;
      const bool speaks_channel = state.speaks_channel;
      std::set<std::string> live_before = std::move(state.live);
      std::set<std::string> left_out;
      std::set<std::string_view> kept;
      for (const auto& member : job.ranks) kept.insert(member.node);
      for (const auto& old : state.ranks_seen) {
        if (!kept.contains(old.node)) left_out.insert(old.node);
      }
      std::map<std::string, std::uint64_t> received = std::move(state.received);
      rendezvous::RankMap ranks_before = std::move(state.ranks_seen);
      const std::uint64_t round_before = state.round_seen;
      state = LeaderJob{};
      if (round_before != 0 && job.round == round_before + 1) {
        state.holds_base = std::move(received);
        state.base_round = round_before;
        state.base_ranks = std::move(ranks_before);
      }
      state.round_seen = job.round;
      state.ranks_seen = job.ranks;
      state.left_out = std::move(left_out);
      state.left_out_until = now + kEndNotice;
      for (const auto& member : job.ranks) {
        if (!live_before.contains(member.node)) state.joiners_pending.insert(member.node);
      }
      state.live_before = std::move(live_before);
      // The longest a grow keeps its running ranks training in the old round for the joiners
      // (their start-up: process, model, data; CUDA on GPUs).
      state.hold_until = now + config_.get().rendezvous.reform_timeout / 2;
      state.in_flight = in_flight;
      state.lost = std::move(lost);
      state.port_moves = port_moves;
      state.speaks_channel = speaks_channel;
    }
    if (job.state == JobState::kRunning) state.port_moves = 0;
    state.recovering = job.state == JobState::kRecovering;
    if (std::erase_if(state.lost, [now](const auto& entry) { return now >= entry.second; }) > 0) {
      ++lost_epoch_;
    }
    // Until caught up it tells members nothing either: an earlier leader may have committed a
    // newer round or the job's end that this table has not applied yet, and a member that
    // has forgotten the job (it ended there) would start the superseded round again.
    if (!caught_up) continue;
    // A round that ended without the job ending: suspended by its owner, or requeued by a
    // preemption (pending again after a round). Its members are told, and stop its workers.
    const bool round_put_away =
        job.round != 0 && (job.state == JobState::kSuspended || job.state == JobState::kPending);
    if (rendezvous::is_terminal(job.state) || job.state == JobState::kRecovering ||
        round_put_away) {
      if (job.round != 0 && state.ended_until == TimePoint{}) state.ended_until = now + kEndNotice;
      if (job.round != 0 && now < state.ended_until) {
        send_starts(now, job, state, addresses, consensus->term());
      }
      if (rendezvous::is_terminal(job.state)) {
        if (quarantine_.erase(id) > 0) ++quarantine_epoch_;
        continue;
      }
    }
    if (is_active_round_state(job.state)) {
      send_starts(now, job, state, addresses, consensus->term());
      const rendezvous::RoundVerdict verdict =
          state.in_flight
              ? rendezvous::RoundVerdict::kNone
              : rendezvous::round_verdict(job.state, job.ranks, state.acked, state.done);
      if (verdict == rendezvous::RoundVerdict::kRunning) {
        propose_state(now, wall, job, JobState::kRunning,
                      "every daemon of round " + std::to_string(job.round) + " started it",
                      *consensus);
        continue;
      }
      if (verdict == rendezvous::RoundVerdict::kSucceeded) {
        propose_state(now, wall, job, JobState::kSucceeded,
                      "every rank of round " + std::to_string(job.round) + " exited 0", *consensus);
        continue;
      }
    }
    if (!plan_now || state.in_flight) continue;
    if (job.state == JobState::kRunning && job.spec.scale == rendezvous::ScaleMode::kThroughput &&
        scale_job(now, wall, job, table, alive, ledger_of_pass(), *consensus)) {
      continue;
    }
    // The scheduler's plan: the nodes the job may use now and how many. A queued job it does
    // not start, and a held one (no plan), are not planned.
    const auto scheduled = schedule_.plans.find(id);
    if (scheduled == schedule_.plans.end()) continue;
    const rendezvous::JobPlan& allowance = scheduled->second;
    if (job.state == JobState::kPending && allowance.cap < job.spec.min_nodes) {
      state.admitted = {};
      continue;
    }
    // A preemption victim whose shrink could not be proposed this pass (no store port free on
    // its rank-0 node) waits for it: planned without its released nodes, it would read them as
    // lost members.
    if (is_active_round_state(job.state) &&
        std::any_of(job.ranks.begin(), job.ranks.end(), [&](const auto& member) {
          return !allowance.allowed.contains(member.node);
        })) {
      continue;
    }
    // A job whose round has every node it may have, all of them usable, and nothing reported
    // against it (a failure, a lost member, a busy store port) gets no decision from the
    // planner: it is not planned. What could change that bumps node_epoch_ or is checked here.
    const bool settled = job_settled(now, job, state, allowance, table, ledger_of_pass);
    if (settled) {
      ++jobs_skipped_;
      if (!verify_skips_) continue;
    } else {
      ++jobs_planned_;
    }
    // A queued job's join_timeout counts from when the scheduler first let it start, not from
    // its submission: waiting in the queue is not failing to gather.
    if (job.state == JobState::kPending && state.admitted == rendezvous::WallTime{}) {
      state.admitted = wall;
    }
    std::map<std::string, std::pair<const membership::MemberView*, std::uint32_t>> usable;
    // The round's members once per job, not a walk of its rank map per live node: a
    // 1,024-node job in a 1,027-node cluster made that a million name compares per pass.
    std::set<std::string_view> in_round;
    if (is_active_round_state(job.state)) {
      for (const auto& r : job.ranks) in_round.insert(r.node);
    }
    // Only the scheduler's allowed nodes can be usable: a walk of those (about the job's size),
    // not of every live node (a 10,000-node cluster with 100 jobs made that a million
    // standings per pass).
    for (const std::string& name : allowance.allowed) {
      const auto view = alive.find(name);
      if (view == alive.end()) continue;
      rendezvous::NodeStanding standing = node_standing(*view->second, table);
      standing.in_active_round = in_round.contains(name);
      if (rendezvous::usable_for_job(standing)) {
        usable[name] = {view->second, ledger_of_pass().free_slots(name, id)};
      }
    }
    // A new leader waits for the slots of the job's live members (every node sends them when
    // it learns of the leader) rather than re-plan the job without them, but not beyond
    // kNodeInfoResend: a member that never reports is then treated as gone.
    if (now < leading_since_ + kNodeInfoResend &&
        member_slots_unknown(job, alive, node_slots_, state.lost)) {
      continue;
    }
    if (state.port_busy && is_active_round_state(job.state) &&
        on_port_conflict(now, job, state, ledger_of_pass(), *consensus)) {
      continue;
    }
    // A running job's planner gets the scheduler's cap as its max (never below min_nodes: a
    // preemption shrinks it through its own round). A queued job keeps its max_nodes: the
    // planner's last call still waits for more nodes, which later passes grant as they come.
    const std::uint32_t cap =
        job.state == JobState::kPending
            ? job.spec.max_nodes
            : std::clamp(allowance.cap, job.spec.min_nodes, job.spec.max_nodes);
    const bool queued_longer = job.state == JobState::kPending && state.admitted > job.state_since;
    // A requeued job's last rank map was put away: its nodes join its next round as newcomers
    // (the planner gathers waiters, not old members).
    const bool put_away = job.state == JobState::kPending && !job.ranks.empty();
    rendezvous::Decision::Kind decided = rendezvous::Decision::Kind::kNone;
    if (cap == job.spec.max_nodes && !queued_longer && !put_away) {
      decided = plan_job(now, job, job.ranks, usable, ledger_of_pass(), *consensus);
    } else {
      rendezvous::JobRecord capped = job;
      capped.spec.max_nodes = cap;
      if (queued_longer) capped.state_since = state.admitted;
      if (put_away) capped.ranks.clear();
      decided = plan_job(now, capped, job.ranks, usable, ledger_of_pass(), *consensus);
    }
    if (settled && decided != rendezvous::Decision::Kind::kNone &&
        decided != rendezvous::Decision::Kind::kWaitUntil) {
      ++skip_mismatches_;
      spdlog::error("rendezvous: job {} round {} was taken as settled, but its plan is {}", id,
                    job.round, rendezvous::to_string(decided));
    }
  }
  observe(now, table);
  next_lead_ = next_plan_;
  for (auto it = leader_jobs_.begin(); it != leader_jobs_.end();) {
    const rendezvous::JobRecord* job = table.job(it->first);
    if (job == nullptr || rendezvous::is_terminal(job->state)) {
      scaling_.erase(it->first);
      settled_.erase(it->first);
    }
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

namespace {

// The parts of a member's view the leader's maps are built from (not last_heard, which moves
// with every message).
bool same_standing(const membership::MemberView& a, const membership::MemberView& b) {
  return a.name == b.name && a.generation == b.generation && a.state == b.state &&
         a.address == b.address;
}

}  // namespace

void RoundLeader::refresh_members(const std::vector<membership::MemberView>& members,
                                  rendezvous::WallTime wall) {
  // The list comes sorted by name (Membership::members()), as views_ iterates: a walk of both
  // finds the members whose standing changed, and only those are updated. A member added or
  // removed (or a list in another order) rebuilds the maps.
  bool same_names = members.size() == views_.size();
  std::vector<std::pair<membership::MemberView*, const membership::MemberView*>> changed;
  if (same_names) {
    auto known = views_.begin();
    for (const membership::MemberView& m : members) {
      if (known->first != m.name) {
        same_names = false;
        break;
      }
      if (!same_standing(known->second, m)) changed.emplace_back(&known->second, &m);
      ++known;
    }
  }
  if (same_names) {
    if (changed.empty()) return;
    ++node_epoch_;
    for (const auto& [held, fresh] : changed) {
      const membership::MemberView& m = *fresh;
      if (reachable(*held) && (!reachable(m) || held->generation != m.generation)) {
        first_seen_.erase({held->name, held->generation});
      }
      if (held->state == membership::MemberState::kLeft) left_.erase({held->name, held->generation});
      *held = m;
      addresses_[m.name] = m.address;
      if (reachable(m)) {
        alive_[m.name] = held;
        // When this leader first saw each usable (node, generation): the wait list's order and
        // the start of its last-call window.
        first_seen_.try_emplace({m.name, m.generation}, wall);
      } else {
        alive_.erase(m.name);
      }
      if (m.state == membership::MemberState::kLeft) left_.emplace(m.name, m.generation);
    }
    return;
  }
  ++node_epoch_;
  views_.clear();
  alive_.clear();
  addresses_.clear();
  left_.clear();
  // Entries of nodes no longer usable are dropped.
  std::map<std::pair<std::string, std::uint64_t>, rendezvous::WallTime> seen;
  for (const membership::MemberView& fresh : members) {
    const auto [it, inserted] = views_.insert_or_assign(fresh.name, fresh);
    const membership::MemberView& m = it->second;
    addresses_[m.name] = m.address;
    if (reachable(m)) {
      alive_[m.name] = &m;
      const auto key = std::make_pair(m.name, m.generation);
      const auto earlier = first_seen_.find(key);
      seen.emplace(key, earlier == first_seen_.end() ? wall : earlier->second);
    }
    if (m.state == membership::MemberState::kLeft) left_.emplace(m.name, m.generation);
  }
  first_seen_ = std::move(seen);
}

void RoundLeader::refresh_in_rounds(TimePoint now, const rendezvous::JobTable& table) {
  if (in_rounds_index_ == table.non_history_index() && in_rounds_lost_epoch_ == lost_epoch_ &&
      now < in_rounds_until_) {
    return;
  }
  in_rounds_index_ = table.non_history_index();
  in_rounds_lost_epoch_ = lost_epoch_;
  in_rounds_until_ = kNever;
  // Lease eligibility: members of active rounds, except where this leader's job tier declared
  // the member lost. Such a member is often alive (cut off from its peers, not from the leader,
  // or the leader itself): renewing its lease would keep may_replace() false and the job could
  // never re-place its work. Unrenewed, it fences itself within a lease, and the job moves on.
  // Rebuilt when the table or a job's lost members change, or a loss's memory runs out.
  in_rounds_.clear();
  for (const auto& [id, job] : table.jobs()) {
    if (!is_active_round_state(job.state)) continue;
    const auto state = leader_jobs_.find(id);
    for (const auto& r : job.ranks) {
      bool lost = false;
      if (state != leader_jobs_.end()) {
        const auto mark = state->second.lost.find({r.node, r.generation});
        lost = mark != state->second.lost.end() && now < mark->second;
        if (lost) in_rounds_until_ = std::min(in_rounds_until_, mark->second);
      }
      if (!lost) in_rounds_.insert(r.node);
    }
  }
}

bool RoundLeader::job_settled(TimePoint now, const rendezvous::JobRecord& job,
                              const LeaderJob& state, const rendezvous::JobPlan& allowance,
                              const rendezvous::JobTable& table,
                              const std::function<rendezvous::NodeLedger&()>& ledger) {
  if (!is_active_round_state(job.state) || job.ranks.empty()) return false;
  if (state.failure || state.port_busy) return false;
  // A member the job tier declared lost is for the planner to act on. A lost node that is not
  // a member any more (the round already left it out) changes nothing: the scheduler keeps it
  // out of the allowed nodes while the job remembers it (RoundLeader::schedule, `avoid`).
  for (const auto& [member, until] : state.lost) {
    if (std::any_of(job.ranks.begin(), job.ranks.end(), [&](const rendezvous::RankAssignment& r) {
          return r.node == member.first && r.generation == member.second;
        })) {
      return false;
    }
  }
  // A new leader still hears the members' slots (lead(): member_slots_unknown).
  if (now < leading_since_ + kNodeInfoResend) return false;
  if (job.spec.scale == rendezvous::ScaleMode::kThroughput) return false;
  if (const auto q = quarantine_.find(job.id); q != quarantine_.end() && !q->second.empty()) {
    return false;
  }
  const std::uint32_t cap = std::clamp(allowance.cap, job.spec.min_nodes, job.spec.max_nodes);
  SettledMemo& memo = settled_[job.id];
  if (memo.round == job.round && memo.state == job.state && memo.node_epoch == node_epoch_ &&
      memo.cap == cap && memo.allowed == allowance.allowed) {
    return memo.settled;
  }
  // Every member as the planner will see it: alive in membership (this instance), its slots
  // known, usable for a job it is in, allowed by the scheduler, with the slots it needs. (Those
  // stay free: other jobs can take only what this one does not hold; a node's capacity change
  // bumps node_epoch_. A store port is always found: choose_store_port's non-strict mode.)
  const std::uint32_t needs = std::max<std::uint32_t>(1, job.spec.workers_per_node);
  // A running job short of its nodes grows once the scheduler allows it a node it does not
  // have (a waiter); until then the planner has no node to add.
  const bool may_grow =
      job.state == JobState::kRunning && job.ranks.size() < cap &&
      std::any_of(allowance.allowed.begin(), allowance.allowed.end(), [&](const std::string& n) {
        return std::none_of(job.ranks.begin(), job.ranks.end(),
                            [&](const rendezvous::RankAssignment& r) { return r.node == n; });
      });
  const bool settled =
      !may_grow &&
      std::all_of(job.ranks.begin(), job.ranks.end(), [&](const rendezvous::RankAssignment& r) {
        const auto view = alive_.find(r.node);
        if (view == alive_.end() || view->second->generation != r.generation) return false;
        if (!allowance.allowed.contains(r.node)) return false;
        rendezvous::NodeStanding standing = node_standing(*view->second, table);
        standing.in_active_round = true;
        return rendezvous::usable_for_job(standing) &&
               ledger().free_slots(r.node, job.id) >= needs;
      });
  memo = SettledMemo{.round = job.round,
                     .state = job.state,
                     .node_epoch = node_epoch_,
                     .cap = cap,
                     .allowed = allowance.allowed,
                     .settled = settled};
  return settled;
}

std::uint16_t RoundLeader::store_port_for(TimePoint now, const rendezvous::JobRecord& job,
                                          const std::string& node, std::uint64_t generation,
                                          const rendezvous::NodeLedger& ledger, bool strict) const {
  const auto& r = config_.get().rendezvous;
  const rendezvous::PortRange range{static_cast<std::uint16_t>(r.store_port_min),
                                    static_cast<std::uint16_t>(r.store_port_max)};
  std::set<std::uint16_t> busy;
  if (const auto found = busy_ports_.find({node, generation}); found != busy_ports_.end()) {
    for (const auto& [port, until] : found->second) {
      if (now < until) busy.insert(port);
    }
  }
  return rendezvous::choose_store_port(ledger, node, job.round + 1, range, busy, strict);
}

bool RoundLeader::on_port_conflict(TimePoint now, const rendezvous::JobRecord& job,
                                   LeaderJob& state, rendezvous::NodeLedger& ledger,
                                   ConsensusHost& consensus) {
  const rendezvous::PortConflict conflict = std::move(*state.port_busy);
  state.port_busy.reset();
  // Only the node that runs the store can say its port is taken, and only about this round's.
  if (!rendezvous::conflict_applies(job, conflict, state.failure.has_value())) return false;
  busy_ports_[{conflict.node, conflict.generation}][conflict.port] = now + kBusyPortMemory;
  const std::string what = "store port " + std::to_string(conflict.port) + " on node " +
                           conflict.node + " is in use by another process";
  spdlog::info("rendezvous: job {} round {}: {} ({})", job.id, job.round, what, conflict.detail);
  const std::uint16_t port =
      store_port_for(now, job, conflict.node, conflict.generation, ledger, /*strict=*/true);
  if (!rendezvous::may_move_store(port, state.port_moves)) {
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
  propose_decision(now, job, job.ranks, decision, ledger, consensus);
  return true;
}

rendezvous::Decision::Kind RoundLeader::plan_job(
    TimePoint now, const rendezvous::JobRecord& job, const rendezvous::RankMap& base,
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
  // Workers that re-form in place never exit over a lost peer: a failure in a job whose members
  // are all live is the worker's own, and is acted on at once. So is one after which every
  // daemon of the round answered the reporter (RoundReport::peers_alive, act_on_report): no
  // member was lost.
  const bool all_live = !job.ranks.empty() &&
                        std::all_of(job.ranks.begin(), job.ranks.end(), [&](const auto& member) {
                          return state.live.contains(member.node);
                        });
  const Duration failure_grace = all_live ? Duration::zero() : r.job_peer_timeout;
  // A member that drains stops its workers on purpose: failures in its round are no one's fault
  // (the round is re-planned without it once it has left membership).
  const bool member_draining =
      std::any_of(job.ranks.begin(), job.ranks.end(), [&](const auto& member) {
        const auto leaving = leaving_.find(member.node);
        return leaving != leaving_.end() && leaving->second == member.generation;
      });
  const rendezvous::FailureTiming timing = rendezvous::failure_timing(
      state.failure.has_value(), member_draining, state.failure_seen, failure_grace, now);
  const bool failure_due = timing.due;
  next_plan_ = std::min(next_plan_, timing.wake_at);
  input.worker_failure = failure_due ? state.failure : std::nullopt;
  input.live = state.live;

  std::set<std::pair<std::string, std::uint64_t>> lost;
  for (const auto& [key, until] : state.lost) lost.insert(key);
  std::map<std::string, std::uint64_t> usable_generations;
  for (const auto& [name, entry] : usable)
    usable_generations.emplace(name, entry.first->generation);
  // Quarantine: count this round's worker failure against the node that reported it, once. Not
  // when a member is lost, or the job recovers from a lost member: its peers' workers crash
  // because of it, not their node.
  auto& quarantined = quarantine_[job.id];
  const bool members_alive = rendezvous::members_alive(job.ranks, usable_generations, lost);
  if (failure_due && rendezvous::counts_toward_quarantine(job, state.failure_node, members_alive)) {
    rendezvous::QuarantineRecord& record = quarantined[state.failure_node];
    const rendezvous::QuarantineRecord before = record;
    record = rendezvous::count_failure(record, job.round, job.spec.restart_backoff, now);
    ++quarantine_epoch_;
    if (record.failures >= 2 && record != before) {
      spdlog::warn("rendezvous: job {}: node {} sits the job out for {} ms after {} worker failures",
                   job.id, state.failure_node,
                   std::chrono::duration_cast<std::chrono::milliseconds>(
                       rendezvous::quarantine_length(record.failures, job.spec.restart_backoff))
                       .count(),
                   record.failures);
    }
  }
  std::vector<rendezvous::UsableNode> nodes;
  for (const auto& [name, entry] : usable) {
    const membership::MemberView* view = entry.first;
    const auto seen = first_seen_.find({name, view->generation});
    nodes.push_back(rendezvous::UsableNode{
        .name = name,
        .generation = view->generation,
        .free_slots = entry.second,
        .address = host_of(view->address),
        .store_port = store_port_for(now, job, name, view->generation, ledger, /*strict=*/false),
        .lost = lost.contains({name, view->generation}),
        .first_seen = seen == first_seen_.end() ? rendezvous::WallTime{} : seen->second});
  }
  // A quarantined node stays out of the job while the job reaches min_nodes without it (it does
  // not grow back in to fail again); a job that needs it takes it back once its time out ends.
  const std::set<std::string> sitting_out =
      rendezvous::sitting_out(quarantined, nodes, job.spec, job.restarts, now);
  rendezvous::CandidateSet candidates = rendezvous::candidates_for(job, nodes, sitting_out);
  input.candidates = std::move(candidates.candidates);
  input.wait_list = std::move(candidates.wait_list);
  rendezvous::Decision decision = rendezvous::plan(input);
  // A member left out by quarantine looks lost to the planner; the round still replaces a
  // failed worker, so it consumes a restart like any other worker failure. So does a recovery
  // that waits for the quarantined node (were it counted as a lost node, a worker that can
  // never start would consume no restart and its job would never fail).
  if (failure_due &&
      rendezvous::charged_to_failed_worker(decision, job.ranks, sitting_out, members_alive)) {
    decision.reason = rendezvous::RoundReason::kWorkerFailed;
    decision.failed_node = state.failure_node;
    decision.detail =
        state.failure->detail + "; node " + state.failure_node + " is quarantined for this job";
  }
  if (decision.kind == rendezvous::Decision::Kind::kNone ||
      decision.kind == rendezvous::Decision::Kind::kWaitUntil) {
    return decision.kind;
  }
  // A member that is gone from the round may still run workers under its lease: its work is
  // placed elsewhere only once that lease has certainly run out. (Recovering places nothing;
  // a quarantined member is alive, and its lease is not renewed once the round has moved on,
  // so its leftover workers -- stuck on peers that are gone -- stop within a lease.)
  // Not so for a job whose survivors all re-form in place (they reported live): its workers
  // publish checkpoints fenced by round, the new round has its own store endpoint and group,
  // and a cut-off member's workers can join nothing newer (they are offered no round and stop
  // with their lease), so nothing the lost member still runs can reach the new round (see
  // README.md, "What a cut-off member can still do").
  // Once a member acknowledged live (in any round this leader saw), the job's workers re-form in
  // place: every member runs the same program, so one not heard live in this round yet (a
  // joiner still starting, a survivor whose live acknowledgement was lost or comes after a held
  // grow) is one of them. Before, a loss soon after a grow round waited out the lease (sim test
  // NodeCoreSim.ALossRightAfterAGrowWaitsForNoLease; large_job_bench at 1% message loss).
  std::set<std::string> re_forming = state.live;
  if (state.speaks_channel) {
    for (const auto& member : job.ranks) re_forming.insert(member.node);
  }
  const bool survivors_live = rendezvous::survivors_re_form_in_place(decision, job.ranks, re_forming);
  if (decision.kind == rendezvous::Decision::Kind::kOpenRound && !survivors_live) {
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
        return decision.kind;
      }
    }
  }
  propose_decision(now, job, base, decision, ledger, consensus);
  return decision.kind;
}

void RoundLeader::propose_decision(TimePoint now, const rendezvous::JobRecord& job,
                                   const rendezvous::RankMap& base,
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
    ++proposals_epoch_;
  }
  state.in_flight = true;
  const std::string id = job.id;
  consensus.propose(now, rendezvous::encode_command_against(command, base),
                    [this, id, opened](Result<std::string> committed) {
                      if (committed.ok() && opened) on_round_opened(*opened, *committed);
                      leader_jobs_[id].in_flight = false;
                      if (proposed_.erase(id) > 0) ++proposals_epoch_;
                      next_lead_ = TimePoint{};  // the table changed, or re-plan: act now
                      if (!committed.ok()) {
                        spdlog::info("rendezvous: job {}: proposal not committed: {}", id,
                                     committed.error().message);
                      }
                    });
}

rendezvous::NodeStanding RoundLeader::node_standing(const membership::MemberView& view,
                                                   const rendezvous::JobTable& table) const {
  const auto leaving = leaving_.find(view.name);
  const auto known = node_slots_.find(view.name);
  return rendezvous::NodeStanding{
      .reachable = reachable(view),
      .slots_known = known != node_slots_.end() && known->second.first == view.generation,
      .drained = table.drained().contains(view.name),
      .leaving = leaving != leaving_.end() && leaving->second == view.generation,
      .in_active_round = false};
}

void RoundLeader::schedule(TimePoint now, const rendezvous::JobTable& table,
                           const std::map<std::string, const membership::MemberView*>& alive,
                           const std::function<rendezvous::NodeLedger&()>& ledger,
                           ConsensusHost& consensus) {
  rendezvous::SchedulerInput input;
  input.limits = scheduler_limits(config_.get().limits);
  // The scheduler is a function of its input alone: with nothing it is built from changed (the
  // table, the nodes, lost members, quarantines, this leader's proposals, the limits) and no
  // avoided node's time out run, the last plans stand (the preemptions are proposed again
  // below; one in flight is not).
  const ScheduleKey key{.table_index = table.non_history_index(),
                        .node_epoch = node_epoch_,
                        .lost_epoch = lost_epoch_,
                        .quarantine_epoch = quarantine_epoch_,
                        .proposals_epoch = proposals_epoch_};
  if (schedule_key_ != key || now >= schedule_until_ || input.limits != schedule_limits_) {
    schedule_key_ = key;
    schedule_limits_ = input.limits;
    schedule_until_ = kNever;
    schedule_ = rendezvous::schedule(scheduler_input(now, table, alive, std::move(input)));
  }
  for (const rendezvous::Preemption& preemption : schedule_.preemptions) {
    preempt(now, table, preemption, ledger(), consensus);
  }
}

rendezvous::SchedulerInput RoundLeader::scheduler_input(
    TimePoint now, const rendezvous::JobTable& table,
    const std::map<std::string, const membership::MemberView*>& alive,
    rendezvous::SchedulerInput input) {
  for (const auto& [id, job] : table.jobs()) {
    if (rendezvous::is_terminal(job.state)) continue;
    const auto proposal = proposed_.find(id);
    rendezvous::SchedJob sched =
        sched_job(job, proposal == proposed_.end() ? nullptr : &proposal->second.first);
    // Nodes this job's planner keeps out now: a lost member's daemon instance while the job
    // tier remembers it (the same node restarted is a new generation, welcome at once) and
    // quarantined nodes whose time out runs (plan_job's sitting_out may still take one back at
    // min_nodes).
    if (const auto state = leader_jobs_.find(id); state != leader_jobs_.end()) {
      for (const auto& [member, until] : state->second.lost) {
        const auto view = alive.find(member.first);
        if (now < until && view != alive.end() && view->second->generation == member.second) {
          sched.avoid.insert(member.first);
          schedule_until_ = std::min(schedule_until_, until);
        }
      }
    }
    if (const auto records = quarantine_.find(id); records != quarantine_.end()) {
      for (const auto& [node, record] : records->second) {
        if (record.failures >= 2 && now < record.until) {
          sched.avoid.insert(node);
          schedule_until_ = std::min(schedule_until_, record.until);
        }
      }
    }
    input.jobs.push_back(std::move(sched));
  }
  for (const auto& [name, known] : node_slots_) {
    // Usable for any job: a job's hold on a node it runs on is its holding (scheduler.h).
    const auto view = alive.find(name);
    const std::optional<rendezvous::NodeStanding> standing =
        view == alive.end() ? std::nullopt
                            : std::optional(node_standing(*view->second, table));
    const bool usable = standing && rendezvous::usable_for_job(*standing);
    // Drained: nothing new goes there, but its jobs run on (their holding counts).
    const bool working = standing && standing->reachable && standing->slots_known &&
                         standing->drained && !standing->leaving;
    input.nodes.push_back(rendezvous::SchedNode{
        .name = name, .slots = known.second, .usable = usable, .working = working});
  }
  return input;
}

void RoundLeader::preempt(TimePoint now, const rendezvous::JobTable& table,
                          const rendezvous::Preemption& preemption,
                          rendezvous::NodeLedger& ledger, ConsensusHost& consensus) {
  const rendezvous::JobRecord* job = table.job(preemption.victim);
  if (job == nullptr || job->ranks.empty() || leader_jobs_[job->id].in_flight) return;
  ++preemptions_;
  if (preemption.kind == rendezvous::Preemption::Kind::kSuspend) {
    spdlog::info("rendezvous: job {} round {}: requeued ({})", job->id, job->round,
                 preemption.reason);
    propose_set_state(now, requeue_command(*job, preemption, wall_time(*clock_)), consensus);
    return;
  }
  const rendezvous::RankAssignment& rank0 = job->ranks.front();
  const std::uint16_t port =
      store_port_for(now, *job, rank0.node, rank0.generation, ledger, /*strict=*/false);
  if (port == 0) return;  // no store port free on its rank-0 node: the next pass tries again
  propose_decision(now, *job, job->ranks, shrink_decision(*job, preemption, port), ledger,
                   consensus);
}

bool RoundLeader::scale_job(TimePoint now, rendezvous::WallTime wall,
                            const rendezvous::JobRecord& job, const rendezvous::JobTable& table,
                            const std::map<std::string, const membership::MemberView*>& alive,
                            rendezvous::NodeLedger& ledger, ConsensusHost& consensus) {
  ScaleWatch& watch = scaling_[job.id];
  const std::uint32_t size = job.scale.size == 0 ? job.spec.min_nodes : job.scale.size;
  const auto nodes = static_cast<std::uint32_t>(job.ranks.size());
  // Back to a smaller size: a round of the first `size` entries (rank 0 and its store stay).
  if (nodes > size) {
    const rendezvous::RankAssignment& rank0 = job.ranks.front();
    const std::uint16_t port =
        store_port_for(now, job, rank0.node, rank0.generation, ledger, /*strict=*/false);
    if (port == 0) return true;  // no store port free on its rank-0 node: the next pass tries
    propose_decision(now, job, job.ranks,
                     scale_down_decision(job, size, port,
                                         "throughput scaling: back to " + std::to_string(size) +
                                             (size == 1 ? " node" : " nodes")),
                     ledger, consensus);
    return true;
  }
  // What the cluster offers this job: the usable nodes no other job's round holds.
  std::set<std::string> held_by_others;
  for (const auto& [id, other] : table.jobs()) {
    if (id == job.id || !is_active_round_state(other.state)) continue;
    for (const auto& member : other.ranks) held_by_others.insert(member.node);
  }
  std::set<std::string> cluster;
  for (const auto& [name, view] : alive) {
    if (node_slots_.contains(name) && !held_by_others.contains(name) &&
        rendezvous::usable_for_job(node_standing(*view, table))) {
      cluster.insert(name);
    }
  }
  const bool cluster_changed = watch.cluster_known && cluster != watch.cluster;
  watch.cluster = std::move(cluster);
  watch.cluster_known = true;
  if (nodes >= size) {
    watch.short_since.reset();
  } else if (!watch.short_since) {
    watch.short_since = now;
  }
  const bool short_of_nodes = watch.short_since && now - *watch.short_since >= job.spec.scale_window;
  const std::optional<double> measured = watch.window.take(job.round, job.spec.scale_window);
  const std::optional<rendezvous::SetScale> command =
      scale_command(job, measured, short_of_nodes, cluster_changed, wall);
  if (!command) return false;
  spdlog::info("rendezvous: job {} round {}: throughput scaling: {}", job.id, job.round,
               command->reason);
  if (short_of_nodes) watch.short_since.reset();
  leader_jobs_[job.id].in_flight = true;
  const std::string id = job.id;
  consensus.propose(now, rendezvous::encode_command(*command), [this, id](Result<std::string>) {
    leader_jobs_[id].in_flight = false;
    next_lead_ = TimePoint{};  // the table changed: act on it now
  });
  return true;
}

void RoundLeader::record_history(TimePoint now, rendezvous::WallTime wall,
                                 ConsensusHost& consensus) {
  if (history_in_flight_ || now < next_history_) return;
  next_history_ = now + kHistoryInterval;
  rendezvous::RecordHistory command;
  for (auto& [id, watch] : scaling_) {
    if (command.points.size() >= rendezvous::kMaxHistoryBatch) break;
    if (auto point = watch.series.take(now, wall, kSeriesInterval)) {
      command.points.push_back(rendezvous::JobPoint{.job_id = id, .point = *point});
    }
  }
  IncidentLog::Unreplicated batch = incidents_.unreplicated();
  command.incidents = batch.incidents;
  command.events = batch.events;
  if (command.points.empty() && command.incidents.empty() && command.events.empty()) return;
  history_in_flight_ = true;
  consensus.propose(now, rendezvous::encode_command(command),
                    [this, batch = std::move(batch)](Result<std::string> committed) {
                      history_in_flight_ = false;
                      if (committed.ok()) incidents_.mark_replicated(batch);
                    });
}

void RoundLeader::propose_set_state(TimePoint now, const rendezvous::SetJobState& command,
                                    ConsensusHost& consensus) {
  leader_jobs_[command.job_id].in_flight = true;
  const std::string id = command.job_id;
  consensus.propose(now, rendezvous::encode_command(command), [this, id](Result<std::string>) {
    leader_jobs_[id].in_flight = false;
    next_lead_ = TimePoint{};  // the table changed: act on it now
  });
}

void RoundLeader::propose_state(TimePoint now, rendezvous::WallTime wall,
                                const rendezvous::JobRecord& job, JobState state,
                                std::string reason, ConsensusHost& consensus) {
  propose_set_state(now,
                    rendezvous::SetJobState{.job_id = job.id,
                                            .round = job.round,
                                            .state = state,
                                            .cause = rendezvous::RoundReason::kMemberLost,
                                            .reason = std::move(reason),
                                            .at = wall},
                    consensus);
}

void RoundLeader::send_starts(TimePoint now, const rendezvous::JobRecord& job, LeaderJob& state,
                              const std::map<std::string, std::string>& addresses,
                              std::uint64_t term) {
  if (now < state.next_start) return;
  const bool active = is_active_round_state(job.state);
  // An ended or recovering job's members are told once a kStartResend (they answer nothing).
  const bool to_all = !active || now >= state.next_all;
  if (to_all) state.next_all = now + kStartResend;
  // Sooner only while a member has not answered (the pass then costs a lead() per job).
  bool unanswered = false;
  RoundStart start{.term = term,
                   .state = job.state,
                   .round = rendezvous::OpenRound{.job_id = job.id,
                                                  .round = job.round,
                                                  // Rounds are numbered one by one
                                                  // (make_open_round): the round it follows.
                                                  .expected_prev_round = job.round - 1,
                                                  .ranks = job.ranks,
                                                  .store_endpoint = job.store_endpoint,
                                                  .reason = job.round_reason,
                                                  .detail = "",
                                                  .at = job.round_opened_at},
                   .spec = job.spec,
                   .restarts = job.restarts,
                   .hold_live = rendezvous::hold_for_joiners(
                       job.state == JobState::kRendezvous, job.round_reason, job.ranks,
                       state.live_before, state.live, now < state.hold_until)};
  if (!start.hold_live && !state.hold_ran_out && job.state == JobState::kRendezvous &&
      job.round_reason == rendezvous::RoundReason::kGrow && !state.joiners_pending.empty() &&
      now >= state.hold_until) {
    state.hold_ran_out = true;
    spdlog::info(
        "rendezvous: job {} round {}: the grow's running members go on without waiting "
        "longer for {} member(s) not live yet (first: {})",
        job.id, job.round, state.joiners_pending.size(), *state.joiners_pending.begin());
  }
  // The three bodies, each encoded when first needed: in full; as a delta against the round
  // before (a member's first send, when it holds that round); as a delta against this round
  // itself (a member that holds it, sent again because its workers do not run yet).
  std::optional<std::string> full, from_base, from_itself;
  std::optional<std::uint64_t> digest;
  const auto delta_body = [&](std::optional<std::string>& body, std::uint64_t base_round,
                              const rendezvous::RankMap& base) -> const std::string* {
    if (!body) {
      if (!digest) digest = spec_digest(job.spec);
      body = encode_round_start_delta(start, base_round, base, *digest).value_or("");
    }
    return body->empty() ? nullptr : &*body;
  };
  const auto holds = [](const std::map<std::string, std::uint64_t>& who,
                        const rendezvous::RankAssignment& member) {
    const auto found = who.find(member.node);
    return found != who.end() && found->second == member.generation;
  };
  const auto send = [&](const std::string& node, const std::string* body) {
    if (body == nullptr) {
      if (!full) full = encode_round_start(start);
      body = &*full;
    }
    wire::Envelope envelope;
    envelope.type = wire::MsgType::kRoundStart;
    envelope.body = *body;
    std::string address;
    if (node == self_) {
      // For this daemon's own member half (round_send.h).
      envelope.sender = self_;
      envelope.generation = generation_;
    } else if (const auto found = addresses.find(node); found != addresses.end()) {
      address = found->second;
    }
    sends_.push_back(RoundSend{.to = node,
                               .address = std::move(address),
                               .envelope = std::move(envelope),
                               .report = std::nullopt});
  };
  for (const auto& member : job.ranks) {
    if (!active) {
      send(member.node, nullptr);
      continue;
    }
    if (state.acked.contains(member.node)) continue;
    const TimePoint first_sent = state.first_sent.try_emplace(member.node, now).first->second;
    if (holds(state.received, member)) {
      if (to_all) send(member.node, delta_body(from_itself, job.round, job.ranks));
    } else if (now < first_sent + kStartQuickResend && holds(state.holds_base, member)) {
      // Sent again before an answer was due (the round's hold ended, say): still a delta.
      send(member.node, delta_body(from_base, state.base_round, state.base_ranks));
      unanswered = true;
    } else {
      send(member.node, nullptr);
      unanswered = true;
    }
  }
  state.next_start = unanswered ? now + kStartQuickResend : state.next_all;
  if (to_all && now < state.left_out_until) {
    for (const std::string& node : state.left_out) send(node, nullptr);
  }
}

void RoundLeader::on_report(TimePoint now, const wire::Envelope& envelope) {
  Result<RoundReport> decoded = decode_round_report(envelope.body);
  if (!decoded.ok()) {
    ++malformed_reports_;
    spdlog::debug("rendezvous: dropped a report from {} (gen {}): {}", envelope.sender,
                  envelope.generation, decoded.error().message);
    return;
  }
  on_report(now, envelope.sender, envelope.generation, *decoded);
}

void RoundLeader::on_report(TimePoint now, const std::string& from, std::uint64_t generation,
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

void RoundLeader::act_on_report(TimePoint now, const std::string& from, std::uint64_t generation,
                                const RoundReport& report) {
  // Slots are kept even before this node's first lead() pass: a node reports them once per
  // leader change (and every kNodeInfoResend), right when a new leader is elected.
  if (!leading_ && report.kind != ReportKind::kNodeInfo) return;
  const std::string& job = report.job;
  const std::uint64_t round = report.round;
  alive_again(now, from, generation);
  if (report.kind == ReportKind::kNodeInfo) {
    const std::uint32_t slots = report.slots;
    auto& known = node_slots_[from];
    if (known != std::make_pair(generation, slots)) {
      known = {generation, slots};
      ++node_epoch_;
      spdlog::info("rendezvous: {} (gen {}) offers {} worker slot(s)", from, generation, slots);
      next_plan_ = now;
      next_lead_ = TimePoint{};
    }
    return;
  }
  if (report.kind == ReportKind::kNodeLeaving) {
    if (leaving_.insert_or_assign(from, generation).second) {
      ++node_epoch_;
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
    // Rank 0's sample count: the job's samples/s (throughput scaling, metrics). Only for jobs
    // this leader knows, so a report cannot make it remember a job that is not in the table.
    if ((report.samples || report.loss) && report.rank.value_or(0) == 0 &&
        leader_jobs_.contains(job)) {
      ScaleWatch& watch = scaling_[job];
      if (report.samples) watch.window.observe(now, round, *report.samples);
      watch.series.observe(now, round, report.samples, report.loss);
    }
    return;
  }
  const auto it = leader_jobs_.find(job);
  if (it == leader_jobs_.end() || it->second.round_seen != round) return;  // stale report
  const bool live_report =
      report.live && (report.kind == ReportKind::kRoundAck || report.kind == ReportKind::kPeerLost);
  if (live_report) it->second.speaks_channel = true;
  if (live_report && it->second.live.insert(from).second) {
    // A loss that waited out a lease may not need to any more: plan at once then (not for
    // every live ack of a round: each would be a planning pass over every job and node).
    if (!it->second.lost.empty() || it->second.recovering || report.kind == ReportKind::kPeerLost) {
      next_plan_ = now;
    }
    next_lead_ = TimePoint{};
    // A held grow may go on once its last joiner is live: its members need the RoundStart
    // again now. Only then: a resend per live ack went to every member yet to ack, so n
    // members' acks cost ~n^2/2 RoundStarts (a 1,024-node round: ~500,000 of ~57 KB).
    if (it->second.joiners_pending.erase(from) > 0 && it->second.joiners_pending.empty()) {
      it->second.next_start = TimePoint{};
      it->second.next_all = TimePoint{};
    }
  }
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
    // Every daemon of the round answered the reporter after its worker failed: no member is
    // lost, so there is no loss to wait for. The failure counts as seen a grace ago, as a store
    // port conflict's does (plan_job's failure grace).
    const TimePoint graced = now - config_.get().rendezvous.job_peer_timeout;
    if (report.peers_alive && it->second.failure_seen > graced) {
      it->second.failure_seen = graced;
      next_plan_ = now;
      next_lead_ = TimePoint{};
    }
    return;
  }
  if (report.kind == ReportKind::kStorePortBusy) {
    // Acted on by the next lead() pass, which checks it came from the round's rank-0 node.
    if (!it->second.port_busy) {
      it->second.port_busy = rendezvous::PortConflict{
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
  if (report.kind == ReportKind::kRoundReceived || report.kind == ReportKind::kRoundAck) {
    it->second.received[from] = generation;
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
    if (it->second.lost
            .emplace(std::make_pair(peer, peer_generation), now + rendezvous::kLostMemory)
            .second) {
      ++lost_epoch_;
      spdlog::info("rendezvous: {} reports {} (gen {}) lost for job {} round {} ({})", from, peer,
                   peer_generation, job, round, report.reason);
      next_plan_ = now;
      next_lead_ = TimePoint{};
    }
  }
}

void RoundLeader::alive_again(TimePoint now, const std::string& node, std::uint64_t generation) {
  // The job tier's memory of a lost member (kLostMemory) keeps a daemon that was killed, but is
  // still alive in cluster membership for seconds, out of the job's rounds. A daemon that talks
  // to the leader is not dead: it was cut off (a partition that healed). A job that waits for
  // nodes (recovering) takes it back now instead of up to 30 s later; a job that runs without
  // it keeps it out for the memory's time (it might be cut off from its peers only, and every
  // grow back in would fail). A report sent before the declaration (still in flight) is not
  // such proof: only one at least job_peer_timeout after it counts.
  const Duration in_flight = config_.get().rendezvous.job_peer_timeout;
  for (auto& [id, state] : leader_jobs_) {
    if (!state.recovering) continue;
    const auto entry = state.lost.find({node, generation});
    if (entry == state.lost.end() || now < entry->second - rendezvous::kLostMemory + in_flight) {
      continue;
    }
    spdlog::info("rendezvous: job {}: {} (gen {}), declared lost, reports to the leader: the job "
                 "may take it back",
                 id, node, generation);
    state.lost.erase(entry);
    ++lost_epoch_;
    next_plan_ = now;
    next_lead_ = TimePoint{};
  }
}

void RoundLeader::observe_drains(const rendezvous::JobTable& table, std::int64_t wall) {
  // Drains are replicated in the table; the leader logs them as it sees them change.
  const auto& drained = table.drained();
  if (drained == drains_seen_) return;
  ++node_epoch_;
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

void RoundLeader::observe(TimePoint now, const rendezvous::JobTable& table) {
  const std::int64_t wall = wall_time(*clock_).time_since_epoch().count();
  const auto& views = views_;
  for (const auto& [id, job] : table.jobs()) {
    if (rendezvous::is_terminal(job.state)) {
      if (round_members_.erase(id) > 0) incidents_.on_job_ended(now, id);
      quiet_rounds_.erase(id);
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
      const auto acked = [&] {
        return !job.ranks.empty() &&
               std::all_of(job.ranks.begin(), job.ranks.end(), [&](const auto& r) {
                 return state->second.acked.contains(r.node);
               });
      };
      if (job.state == JobState::kRunning || acked()) incidents_.on_round_acked(now, id, job.round);
    }
    // A member gone from cluster membership (dead, left, or back as a new generation) is
    // evidence of a loss even before the job tier reports it (a silent death of a lone member).
    // A round whose members were all there at this member list is not walked again until the
    // list changes.
    auto& quiet = quiet_rounds_[id];
    if (quiet == std::make_pair(job.round, node_epoch_)) continue;
    bool any_gone = false;
    for (const auto& r : job.ranks) {
      const auto found = views.find(r.node);
      const membership::MemberView* view = found == views.end() ? nullptr : &found->second;
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
      any_gone = true;
      incidents_.on_loss(now, wall, id, job.round, nodes, cause, r.node, evidence);
    }
    quiet = any_gone ? std::make_pair(std::uint64_t{0}, std::uint64_t{0})
                     : std::make_pair(job.round, node_epoch_);
  }
}

void RoundLeader::on_round_opened(const Opened& opened, const std::string& applied) {
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

void RoundLeader::on_lease_request(TimePoint now, const wire::Envelope& envelope) {
  auto message = rendezvous::decode_lease(envelope.type, envelope.body);
  if (!message.ok()) return;
  const auto* request = std::get_if<rendezvous::LeaseRequest>(&*message);
  // Only the daemon itself may ask for its own lease.
  if (request == nullptr || request->node != envelope.sender) return;
  const auto grant = granter_.on_request(now, *request, in_rounds_.contains(request->node));
  if (!grant) return;
  wire::Envelope reply;
  reply.type = wire::MsgType::kLeaseGrant;
  reply.body = rendezvous::encode_lease(*grant);
  if (envelope.sender == self_) {
    reply.sender = self_;
    reply.generation = generation_;
  }
  sends_.push_back(RoundSend{.to = envelope.sender,
                             .address = envelope.sender_address,
                             .envelope = std::move(reply),
                             .report = std::nullopt});
}

void RoundLeader::tick(TimePoint now) {
  if (leading_) incidents_.tick(now);
}

TimePoint RoundLeader::next_deadline() const {
  return leading_ ? std::min(next_lead_, incidents_.next_deadline()) : kNever;
}

}  // namespace elastic::node
