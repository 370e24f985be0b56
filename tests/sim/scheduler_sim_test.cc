// The cluster scheduler (daemon/rendezvous/scheduler.h) as the Raft leader runs it, on the
// node-core simulator (node_core_cluster.h): 64 daemons (3 voters) of one slot each, and 20 jobs
// of priorities 0, 5 and 10, min_nodes 1..8, max_nodes up to 16, some preemptible, submitted
// over 40 s, whose workers run for a while (low priorities longest) and succeed; daemons crash
// and restart, and the network partitions and heals, in the first half of every 20 s of the
// first 60 s (each calm half starts healed, every daemon up). Every committed table
// state is checked as it commits (NodeCoreCluster::watch_committed), with S the committed state
// just before it and F(S) the free nodes of S: the up daemons in no rank map of a job in an
// active round state (rendezvous, running, recovering). No limits are configured, so every
// queued job is within its limits; "B ahead of A" is the scheduler's order: higher priority, or
// equal and submitted earlier (then the smaller id).
//  1. Backfill never delays the head: when a queued job A starts (an OpenRound of a job that
//     was pending in S), every job B pending in S and ahead of A still fits F(S) less the nodes
//     A took (|F \ A's nodes| >= min_B). With one slot per node a node fits a job exactly when
//     it is free, and the leader's F is this F less nodes held by rounds proposed but not
//     committed yet. A B ahead that could start was given its nodes first (they are in
//     F \ A's nodes); one that could not reserved every node that fitted it, so nothing was
//     left for A. Either way a B ahead that no longer fits what A left means A took nodes that
//     B was to have: the head was delayed by backfill (or a lower priority went first).
//  2. No job below its min because of preemption: every OpenRound with reason preempted keeps
//     at least min_nodes nodes, all of them nodes of the job's round in S.
//  3. Preemptions are undone: once the faults stop (healed, every daemon up) and every job of
//     priority above 0 ended, every job that a preemption shrank and that still runs is back
//     at its max_nodes or no node is free (checked 10 s after that point, when any grow round
//     has committed); at the end every job a preemption requeued opened a round after the
//     requeue and succeeded.
//  4. No slot given twice: NodeCoreCluster's checker 5 (never two live workers on a slot of a
//     daemon, no daemon's slots held twice by committed rounds) runs after every event.
//  5. Priority order: when a queued job A starts, every job B pending in S of strictly higher
//     priority that fits F(S) less A's nodes (|F \ A's nodes| >= min_B) starts within 3 s: the
//     scheduler visits B first, so it started in the same pass.
// A requeued job is checked like any other: it regathers its nodes as newcomers, without
// waiting for the leases of its old round's nodes, which other jobs' rounds renew. (It once
// waited for them, holding the nodes the scheduler allowed it; seed 1702 caught that.)
// Checks 1 and 5 apply only while the cluster has been calm for kCalm (no crash, restart,
// partition or heal; every daemon up), so the leader's usable nodes are the up daemons; and
// only to jobs B pending since at least kQueuedFor before A's start, so A's start was planned
// with B in the queue. A check 5 window that sees a fault is dropped. The run counts how many
// starts were checked.
//
// Each seed of scenario_seeds() runs once (ELASTIC_SIM_SEED=<n> runs just <n>).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/node/round_leader.h"
#include "daemon/rendezvous/round_policy.h"
#include "tests/sim/node_core_cluster.h"
#include "tests/sim/quiet_logs.h"
#include "tests/sim/scenario_seed.h"

namespace elastic::sim {
namespace {

using namespace std::chrono_literals;
using rendezvous::JobRecord;
using rendezvous::JobState;

// Membership settles a restarted daemon (rejoin, slots reported to the leader) well within this.
constexpr Duration kCalm = 5s;
// Many planning passes (100 ms) and a commit: a job queued this long was in the pass that
// started another.
constexpr Duration kQueuedFor = 1s;
constexpr Duration kPriorityWindow = 3s;

bool ahead(const JobRecord& b, const JobRecord& a) {
  if (b.spec.priority != a.spec.priority) return b.spec.priority > a.spec.priority;
  if (b.submitted_at != a.submitted_at) return b.submitted_at < a.submitted_at;
  return b.id < a.id;
}

std::set<std::string> nodes_of(const JobRecord& job) {
  std::set<std::string> out;
  for (const auto& member : job.ranks) out.insert(member.node);
  return out;
}

struct SchedulerCounters {
  std::uint64_t starts = 0, starts_checked = 0, ahead_checked = 0, priority_waits = 0,
                priority_waits_dropped = 0, shrinks = 0, requeues = 0, shrunk_at_end = 0,
                requeued_ran_again = 0;
  void add(const SchedulerCounters& o) {
    starts += o.starts;
    starts_checked += o.starts_checked;
    ahead_checked += o.ahead_checked;
    priority_waits += o.priority_waits;
    priority_waits_dropped += o.priority_waits_dropped;
    shrinks += o.shrinks;
    requeues += o.requeues;
    shrunk_at_end += o.shrunk_at_end;
    requeued_ran_again += o.requeued_ran_again;
  }
};

std::string plans_text(NodeCoreCluster& c, const std::map<std::string, JobRecord>& jobs);

// Checks 1, 2 and 5 as states commit, check 3 on demand; the scenario tells it of every fault.
class SchedulerWatch {
 public:
  explicit SchedulerWatch(NodeCoreCluster& c) : c_(&c) {
    c.watch_committed([this](const rendezvous::JobTable& table) { on_committed(table); });
  }

  void fault() {
    last_fault_ = c_->sim().now();
    if (!waits_.empty()) counters_.priority_waits_dropped += waits_.size();
    waits_.clear();
  }
  void set_partitioned(bool partitioned) { partitioned_ = partitioned; }

  // Check 5's deadlines (call every step).
  void poll() {
    const TimePoint now = c_->sim().now();
    for (const Wait& wait : waits_) {
      const auto it = prev_.find(wait.job);
      if (it != prev_.end() && it->second.state == JobState::kPending && now >= wait.due) {
        c_->note_violation(seed_text() + "priority order: job " + wait.job + " (priority " +
                           std::to_string(it->second.spec.priority) + ", min_nodes " +
                           std::to_string(it->second.spec.min_nodes) + ") still waits " +
                           ms(now - wait.since) + " after lower-priority job " + wait.started +
                           " started while " + std::to_string(wait.free_after) +
                           " free nodes fitted it\n" + c_->describe_jobs() +
                           plans_text(*c_, prev_));
        return;
      }
    }
    std::erase_if(waits_, [&](const Wait& wait) {
      const auto it = prev_.find(wait.job);
      return it == prev_.end() || it->second.state != JobState::kPending;
    });
  }

  // Check 3's first half: every shrunk job that still runs is at its max, or no node is free.
  std::optional<std::string> shrunk_jobs_grew_back() {
    const std::set<std::string> free = free_nodes(prev_);
    for (const std::string& id : shrunk_) {
      const JobRecord& job = prev_.at(id);
      if (!rendezvous::is_active_round_state(job.state)) continue;
      ++counters_.shrunk_at_end;
      const std::size_t held = nodes_of(job).size();
      if (held < job.spec.max_nodes && !free.empty()) {
        return seed_text() + "preemption not undone: job " + id + " holds " + std::to_string(held) +
               " of its max_nodes " + std::to_string(job.spec.max_nodes) + " while " +
               std::to_string(free.size()) + " nodes are free";
      }
    }
    return std::nullopt;
  }

  // Check 3's second half (at the end): every requeued job ran again and succeeded.
  std::optional<std::string> requeued_jobs_ran_again() {
    for (const auto& [id, round] : requeued_) {
      const JobRecord& job = prev_.at(id);
      if (job.round <= round || job.state != JobState::kSucceeded) {
        return seed_text() + "requeued job " + id + " (at round " + std::to_string(round) +
               ") did not run again: round " + std::to_string(job.round) + ", state " +
               rendezvous::to_string(job.state);
      }
      ++counters_.requeued_ran_again;
    }
    return std::nullopt;
  }

  const std::map<std::string, JobRecord>& committed() const { return prev_; }
  const SchedulerCounters& counters() const { return counters_; }

 private:
  struct Wait {
    std::string job;      // B: strictly higher priority, fits what A left
    std::string started;  // A
    TimePoint since{};
    TimePoint due{};
    std::size_t free_after = 0;
  };

  std::string seed_text() const { return "(seed=" + std::to_string(c_->sim().seed()) + ") "; }
  static std::string ms(Duration d) {
    return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) + " ms";
  }

  bool calm() const {
    if (partitioned_ || c_->sim().now() - last_fault_ < kCalm) return false;
    for (NodeId id = 0; id < c_->daemons(); ++id) {
      if (!c_->sim().is_up(id)) return false;
    }
    return true;
  }

  std::set<std::string> free_nodes(const std::map<std::string, JobRecord>& state) const {
    std::set<std::string> free;
    for (NodeId id = 0; id < c_->daemons(); ++id) {
      if (c_->sim().is_up(id)) free.insert(NodeCoreProcess::name_for(id));
    }
    for (const auto& [id, job] : state) {
      if (!rendezvous::is_active_round_state(job.state)) continue;
      for (const auto& member : job.ranks) free.erase(member.node);
    }
    return free;
  }

  void on_committed(const rendezvous::JobTable& table) {
    const TimePoint now = c_->sim().now();
    const bool calm_now = calm();
    std::optional<std::set<std::string>> free;  // F(S), computed once when needed
    for (const auto& [id, job] : table.jobs()) {
      const auto before = prev_.find(id);
      if (before == prev_.end()) {
        if (job.state == JobState::kPending) pending_since_[id] = now;
        continue;
      }
      const JobRecord& was = before->second;
      if (job.preemptions > was.preemptions && job.state == JobState::kPending) {
        ++counters_.requeues;
        requeued_[id] = was.round;
        pending_since_[id] = now;
      }
      if (job.round <= was.round) continue;
      if (job.round_reason == rendezvous::RoundReason::kPreempted) {
        ++counters_.shrinks;
        shrunk_.insert(id);
        check_shrink(was, job);
      }
      if (was.state != JobState::kPending) continue;
      ++counters_.starts;
      if (!calm_now) continue;
      ++counters_.starts_checked;
      if (!free) free = free_nodes(prev_);
      check_start(job, *free, now);
    }
    prev_.clear();
    for (const auto& [id, job] : table.jobs()) prev_.emplace(id, job);
  }

  // Check 2.
  void check_shrink(const JobRecord& was, const JobRecord& job) {
    const std::set<std::string> kept = nodes_of(job);
    const std::set<std::string> before = nodes_of(was);
    std::string problem;
    if (kept.size() < job.spec.min_nodes) {
      problem = "keeps " + std::to_string(kept.size()) + " nodes, below its min_nodes " +
                std::to_string(job.spec.min_nodes);
    }
    for (const std::string& node : kept) {
      if (!before.contains(node))
        problem = "adds node " + node + " not in round " + std::to_string(was.round);
    }
    if (!problem.empty()) {
      c_->note_violation(seed_text() + "preemption below min: job " + job.id + " round " +
                         std::to_string(job.round) + " (reason preempted) " + problem);
    }
  }

  // Checks 1 and 5 for a job that starts (`a`, as it stands after its OpenRound).
  void check_start(const JobRecord& a, const std::set<std::string>& free, TimePoint now) {
    const std::set<std::string> took = nodes_of(a);
    std::size_t left = 0;
    for (const std::string& node : free) left += !took.contains(node);
    for (const auto& [id, b] : prev_) {
      if (id == a.id || b.state != JobState::kPending || !ahead(b, a)) continue;
      const auto since = pending_since_.find(id);
      if (since == pending_since_.end() || now - since->second < kQueuedFor) continue;
      ++counters_.ahead_checked;
      const std::size_t need = b.spec.min_nodes;
      if (left < need) {
        c_->note_violation(seed_text() + "backfill delayed job " + id + " (priority " +
                           std::to_string(b.spec.priority) + ", min_nodes " + std::to_string(need) +
                           "), ahead of job " + a.id + " (priority " +
                           std::to_string(a.spec.priority) + "): " + std::to_string(free.size()) +
                           " nodes were free, " + a.id + " took " + std::to_string(took.size()) +
                           " of them, leaving " + std::to_string(left));
        return;
      }
      if (b.spec.priority > a.spec.priority && left >= need) {
        ++counters_.priority_waits;
        waits_.push_back(Wait{.job = id,
                              .started = a.id,
                              .since = now,
                              .due = now + kPriorityWindow,
                              .free_after = left});
      }
    }
  }

  NodeCoreCluster* c_;
  std::map<std::string, JobRecord> prev_;  // the last committed state (S)
  std::map<std::string, TimePoint> pending_since_;
  std::set<std::string> shrunk_;
  std::map<std::string, std::uint64_t> requeued_;  // job -> its round when last requeued
  std::vector<Wait> waits_;
  TimePoint last_fault_{};
  bool partitioned_ = false;
  SchedulerCounters counters_;
};

// The leader's last scheduling pass: each job's sizes, cap, reservations and reason.
std::string plans_text(NodeCoreCluster& c, const std::map<std::string, JobRecord>& jobs) {
  const auto leader = c.leader();
  if (!leader) return "no leader\n";
  const node::RoundLeader& rounds = c.process(*leader)->core().rounds().leader();
  std::string out = "the leader's plans:\n";
  for (const auto& [id, job] : jobs) {
    const rendezvous::JobPlan* plan = rounds.job_plan(id);
    if (plan == nullptr) continue;
    out += "  " + id + " priority " + std::to_string(job.spec.priority) + " nodes " +
           std::to_string(job.spec.min_nodes) + ".." + std::to_string(job.spec.max_nodes) +
           " holds " + std::to_string(nodes_of(job).size()) + ": cap " + std::to_string(plan->cap) +
           ", allowed " + std::to_string(plan->allowed.size()) + ", reserved " +
           std::to_string(plan->reserved.size()) + ", position " + std::to_string(plan->position) +
           ": " + plan->reason + "\n";
  }
  return out;
}

struct JobDraw {
  std::int32_t priority = 0;
  std::uint32_t min_nodes = 1, max_nodes = 1;
  bool preemptible = false;
  Duration runtime{};
};

// The first six fill the cluster at priority 0 and run longest; the rest arrive later at mixed
// priorities, the higher ones shorter, so they preempt and end while the low ones still run.
JobDraw draw_job(Rng& rng, std::size_t index) {
  static constexpr std::int32_t kPriorities[] = {0, 5, 10};
  JobDraw d;
  d.priority = index < 6 ? 0 : kPriorities[rng.below(3)];
  d.min_nodes = 1 + static_cast<std::uint32_t>(rng.below(8));
  d.max_nodes = d.min_nodes + static_cast<std::uint32_t>(rng.below(16 - d.min_nodes + 1));
  d.preemptible = rng.below(3) == 0;
  const std::uint64_t base_s = d.priority == 0 ? 50 : d.priority == 5 ? 15 : 8;
  d.runtime = std::chrono::seconds(base_s + rng.below(base_s / 2 + 1));
  return d;
}

void run_scheduler_scenario(std::uint64_t seed, std::size_t daemons, SchedulerCounters& totals) {
  NodeCoreClusterOptions options = default_cluster_options();
  options.core.daemons = daemons;
  options.core.slots_per_node = 1;
  options.lease_check_every_event = false;
  // The scenario's client is one unprivileged user submitting every priority.
  options.core.config.limits.priority_ceiling = 10;
  NodeCoreCluster c(seed, options);
  SchedulerWatch watch(c);
  Rng& rng = c.sim().rng();
  ASSERT_TRUE(
      c.sim().run_until_condition([&] { return c.leader().has_value(); }, c.sim().now() + 30s))
      << c.sim().violation().value_or("no leader");
  const TimePoint start = c.sim().now();
  constexpr std::size_t kJobs = 20;
  std::size_t submitted = 0;
  bool quiet = false;  // in a calm half: healed and restarted at its start
  // Jobs over the first 40 s; faults for 60 s, in the first half of every 20 s, so that the
  // calm halves (checks 1 and 5) see jobs start while others queue.
  while (c.sim().now() < start + 60s) {
    ASSERT_TRUE(c.sim().run_for(100ms)) << *c.sim().violation();
    c.drive_clients();
    watch.poll();
    if (submitted < kJobs && c.sim().now() >= start + static_cast<int>(submitted) * 2s) {
      const JobDraw d = draw_job(rng, submitted++);
      c.submit(
          d.min_nodes, d.max_nodes, 1,
          SubmitExtras{.priority = d.priority, .preemptible = d.preemptible, .runtime = d.runtime});
    }
    if ((c.sim().now() - start) % 20s >= 10s) {
      if (!quiet) {
        c.heal();
        c.restart_all();
        watch.fault();
        watch.set_partitioned(false);
        quiet = true;
      }
      continue;
    }
    quiet = false;
    std::size_t down = 0;
    for (NodeId id = 0; id < daemons; ++id) down += !c.sim().is_up(id);
    if (down < 3 && rng.unit() < 0.04) {
      const NodeId victim = static_cast<NodeId>(rng.below(daemons));
      if (c.sim().is_up(victim)) {
        c.crash(victim);
        watch.fault();
      }
    }
    if (rng.unit() < 0.1) {
      const NodeId pick = static_cast<NodeId>(rng.below(daemons));
      if (!c.sim().is_up(pick)) {
        c.restart(pick);
        watch.fault();
      }
    }
    if (rng.unit() < 0.02) {
      // Either the leader with a few others cut off (a minority: a new leader elsewhere), or a
      // few random daemons.
      std::vector<std::vector<NodeId>> groups(2);
      const auto leader = c.leader();
      std::set<NodeId> cut;
      if (leader && rng.unit() < 0.5) cut.insert(*leader);
      while (cut.size() < 4) cut.insert(static_cast<NodeId>(rng.below(daemons)));
      for (NodeId id = 0; id < daemons; ++id) groups[cut.contains(id) ? 0 : 1].push_back(id);
      c.partition(groups);
      watch.fault();
      watch.set_partitioned(true);
    } else if (rng.unit() < 0.08) {
      c.heal();
      watch.fault();
      watch.set_partitioned(false);
    }
  }
  c.heal();
  c.restart_all();
  watch.fault();
  watch.set_partitioned(false);
  // Check 3: once every job above priority 0 ended, shrunk jobs grow back.
  // The first high-priority job not ended yet, or an unacknowledged request ("" when none).
  const auto high_running = [&]() -> std::string {
    if (!c.all_acknowledged()) return c.unsettled().value_or("a request not acknowledged");
    for (const auto& [id, job] : watch.committed()) {
      if (job.spec.priority > 0 && !rendezvous::is_terminal(job.state)) {
        return id + " " + rendezvous::to_string(job.state);
      }
    }
    return "";
  };
  while (!high_running().empty()) {
    ASSERT_LT(c.sim().now(), start + 600s)
        << "high-priority jobs never ended: " << high_running() << "\n"
        << c.describe_jobs();
    ASSERT_TRUE(c.sim().run_for(100ms)) << *c.sim().violation();
    c.drive_clients();
    watch.poll();
  }
  for (const TimePoint until = c.sim().now() + 10s; c.sim().now() < until;) {
    ASSERT_TRUE(c.sim().run_for(100ms)) << *c.sim().violation();
    c.drive_clients();
    watch.poll();
  }
  EXPECT_EQ(watch.shrunk_jobs_grew_back(), std::nullopt)
      << c.describe_jobs() << plans_text(c, watch.committed());
  const bool settled = c.settle(300s);
  ASSERT_FALSE(c.sim().violation().has_value()) << *c.sim().violation();
  ASSERT_TRUE(settled) << "not settled: " << c.unsettled().value_or("?") << "\n"
                       << c.describe_jobs();
  EXPECT_EQ(c.final_problem(), std::nullopt);
  // Settled lets a job still run; the low priorities run longest.
  const auto all_ended = [&] {
    return std::all_of(watch.committed().begin(), watch.committed().end(), [](const auto& entry) {
      return rendezvous::is_terminal(entry.second.state);
    });
  };
  // 600 s: at 3% message loss a member's lease renewals sometimes all fail even while calm, and
  // each such self-fencing restarts its job's round (seed 1703: a 15-node job restarted five
  // times after settling; the same happens at the previous commit, 292 lease expiries in that
  // seed's run, so it is the simulated loss against the 1 s lease, not the scheduler).
  for (const TimePoint until = c.sim().now() + 600s; !all_ended();) {
    ASSERT_LT(c.sim().now(), until) << "jobs never ended\n" << c.describe_jobs();
    ASSERT_TRUE(c.sim().run_for(100ms)) << *c.sim().violation();
    c.drive_clients();
    watch.poll();
  }
  EXPECT_EQ(watch.requeued_jobs_ran_again(), std::nullopt);
  EXPECT_EQ(c.counters().acknowledged, kJobs);
  const SchedulerCounters& k = watch.counters();
  std::printf(
      "seed %llu: %llu s simulated, %llu starts (%llu checked while calm, against %llu jobs "
      "ahead), %llu shrinks, %llu requeues, %llu priority waits "
      "checked (%llu dropped at a "
      "fault), %llu shrunk jobs running when checked for growing back; %s\n",
      static_cast<unsigned long long>(seed),
      static_cast<unsigned long long>(
          std::chrono::duration_cast<std::chrono::seconds>(c.sim().now() - start).count()),
      static_cast<unsigned long long>(k.starts), static_cast<unsigned long long>(k.starts_checked),
      static_cast<unsigned long long>(k.ahead_checked),
      static_cast<unsigned long long>(k.shrinks), static_cast<unsigned long long>(k.requeues),
      static_cast<unsigned long long>(k.priority_waits),
      static_cast<unsigned long long>(k.priority_waits_dropped),
      static_cast<unsigned long long>(k.shrunk_at_end), c.summary().c_str());
  totals.add(k);
}

TEST(SchedulerSim, PrioritiesPreemptionAndBackfillUnderFaults) {
  SchedulerCounters totals;
  for (std::uint64_t seed : scenario_seeds({1712, 1717, 1721})) {
    SeedReport report(seed);
    run_scheduler_scenario(seed, 64, totals);
  }
  // Over the default seeds the scenario exercises what it checks. A start while a job ahead has
  // waited kQueuedFor is rare (about one seed in three has one), so the seeds are ones that do.
  if (std::getenv("ELASTIC_SIM_SEED") == nullptr) {
    EXPECT_GT(totals.starts_checked, 0u);
    EXPECT_GT(totals.ahead_checked, 0u);
    EXPECT_GT(totals.shrinks + totals.requeues, 0u);
  }
}

}  // namespace
}  // namespace elastic::sim
