// Raft scenarios on the simulator: the real Raft core, 3 and 5 voters, a lossy, duplicating,
// reordering network, partitions, crashes and restarts, and a client proposing all along. Every
// node compacts its log every 20 applied entries (every 3 in the compaction scenario), so
// lagging and restarted nodes catch up by InstallSnapshot; voter changes 3 -> 4 -> 5 -> 4 -> 3
// (removing the leader on the way down) run under the same faults.
// RaftCluster checks election safety, log matching, leader completeness and state machine
// safety after every event; at the end every acknowledged proposal must be applied exactly once
// on every node (after all are restarted and the network healed). The read scenarios also ask
// every node that believes it leads for a read index at every step, deposed leaders included,
// and check each released read against what was committed before it began (raft_process.h).
//
// Each scenario runs for each seed of scenario_seeds() (ELASTIC_SIM_SEED=<n> runs just <n>); a
// failure prints "SIM FAILED seed=<n> ..." with the rerun command.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "tests/sim/raft_process.h"
#include "tests/sim/scenario_seed.h"

namespace elastic::sim {
namespace {

using namespace std::chrono_literals;

LinkModel faulty_link() {
  LinkModel link;
  link.base_latency = 500us;
  link.jitter = 2ms;
  link.loss = 0.05;
  link.duplicate = 0.05;
  link.reorder_probability = 0.2;
  link.reorder_delay = 30ms;
  return link;
}

struct Chaos {
  double crash = 0.0;         // per step: crash a random up node
  double crash_leader = 0.0;  // per step: crash the leader
  double restart = 0.3;       // per step: restart a random down node
  double partition = 0.0;     // per step: split into two random groups
  double heal = 0.3;          // per step: heal
  std::size_t max_down = 0;   // never more nodes down at once (crash, crash_leader)
  double crash_all = 0.0;     // per step: every voter down at once (a power cut)
};

// Drives a plan of voter changes: each step is "add sim node k" or "remove the leader" or
// "remove some follower"; a step is done when the leader's committed config shows it.
class VoterPlan {
 public:
  enum class Step { kAdd3, kAdd4, kRemoveLeader, kRemoveFollower };
  explicit VoterPlan(std::vector<Step> steps) : steps_(std::move(steps)) {}
  bool done() const { return next_ >= steps_.size(); }
  std::size_t completed() const { return next_; }
  std::size_t leader_removals() const { return leader_removals_; }

  // Called once per step of the scenario.
  void drive(RaftCluster& c) {
    if (done()) return;
    auto leader = c.leader();
    if (!leader) return;
    const auto& r = c.process(*leader)->raft();
    if (pending_ && r.voters() == *pending_ && r.commit_index() >= r.config_index()) {
      pending_.reset();
      ++next_;
      return;
    }
    if (pending_) {
      // Still in flight (or lost with a leader change): proposing again is refused while an
      // uncommitted change exists, and starts over if it was truncated.
      if (r.voters() != *pending_ && r.commit_index() >= r.config_index()) pending_.reset();
      return;
    }
    consensus::VoterChange change;
    switch (steps_[next_]) {
      case Step::kAdd3:
        change = {consensus::VoterChange::Kind::kAdd, 4};
        break;
      case Step::kAdd4:
        change = {consensus::VoterChange::Kind::kAdd, 5};
        break;
      case Step::kRemoveLeader:
        change = {consensus::VoterChange::Kind::kRemove, *leader + 1};
        break;
      case Step::kRemoveFollower:
        for (auto v : r.voters()) {
          if (v != *leader + 1) change = {consensus::VoterChange::Kind::kRemove, v};
        }
        break;
    }
    auto outcome = c.change_voters(change);
    if (!outcome.accepted) return;
    if (steps_[next_] == Step::kRemoveLeader) ++leader_removals_;
    pending_ = c.process(*leader)->raft().voters();
  }

 private:
  std::vector<Step> steps_;
  std::size_t next_ = 0;
  std::optional<std::vector<consensus::NodeId>> pending_;
  std::size_t leader_removals_ = 0;
};

struct Scenario {
  std::size_t voters = 3;
  std::size_t nodes = 0;
  std::size_t compact_every = 20;
  std::vector<VoterPlan::Step> plan;
  bool reads = false;  // a read at every node in the leader role, every step
};

struct ReadCounts {
  std::size_t started = 0;
  std::size_t released = 0;
  std::size_t failed = 0;
  std::size_t at_deposed_leaders = 0;
};

// Runs `duration` of chaos in steps of 100 ms with one client proposal per step, then heals,
// restarts everyone and waits for every acknowledged proposal to be applied everywhere.
void run_scenario(std::uint64_t seed, const Scenario& scenario, const Chaos& chaos,
                  Duration duration, ReadCounts* reads = nullptr) {
  RaftClusterOptions options;
  options.voters = scenario.voters;
  options.nodes = scenario.nodes;
  options.compact_every = scenario.compact_every;
  options.link = faulty_link();
  RaftCluster c(seed, options);
  VoterPlan plan(scenario.plan);
  const std::size_t voters = c.size();
  Rng& rng = c.sim().rng();
  const TimePoint end = c.sim().now() + duration;
  std::size_t down = 0;
  std::size_t crashes = 0;
  std::size_t partitions = 0;
  while (c.sim().now() < end) {
    ASSERT_TRUE(c.sim().run_for(100ms)) << *c.sim().violation();
    c.propose();
    if (scenario.reads) c.read_at_leaders();
    plan.drive(c);
    if (down < chaos.max_down && rng.unit() < chaos.crash) {
      const NodeId victim = static_cast<NodeId>(rng.below(voters));
      if (c.sim().is_up(victim)) {
        c.crash(victim);
        ++down;
        ++crashes;
      }
    }
    if (down < chaos.max_down && rng.unit() < chaos.crash_leader) {
      if (auto leader = c.leader()) {
        c.crash(*leader);
        ++down;
        ++crashes;
      }
    }
    if (rng.unit() < chaos.crash_all) {
      for (NodeId id = 0; id < voters; ++id) {
        if (c.sim().is_up(id)) {
          c.crash(id);
          ++down;
          ++crashes;
        }
      }
    }
    if (down > 0 && rng.unit() < chaos.restart) {
      const NodeId pick = static_cast<NodeId>(rng.below(voters));
      if (!c.sim().is_up(pick)) {
        c.restart(pick);
        --down;
      }
    }
    if (rng.unit() < chaos.partition) {
      std::vector<std::vector<NodeId>> groups(2);
      for (NodeId id = 0; id < voters; ++id) groups[rng.below(2)].push_back(id);
      c.sim().partition(groups);
      ++partitions;
    } else if (rng.unit() < chaos.heal) {
      c.sim().heal();
    }
  }
  c.sim().heal();
  for (NodeId id = 0; id < voters; ++id) {
    if (!c.sim().is_up(id)) c.restart(id);
  }
  // The rest of the voter plan in a calm cluster.
  const bool planned = c.sim().run_until_condition(
      [&] {
        plan.drive(c);
        return plan.done();
      },
      c.sim().now() + 60s);
  ASSERT_FALSE(c.sim().violation().has_value()) << *c.sim().violation();
  EXPECT_TRUE(planned) << "voter changes done: " << plan.completed();
  // A last proposal in a stable cluster so the final leader commits (and everyone learns) all.
  ASSERT_TRUE(c.sim().run_until_condition([&] { return c.propose(); }, c.sim().now() + 30s))
      << c.sim().violation().value_or("no leader after healing");
  const bool settled = c.sim().run_until_condition([&] { return c.all_acknowledged_applied(); },
                                                   c.sim().now() + 30s);
  ASSERT_FALSE(c.sim().violation().has_value()) << *c.sim().violation();
  EXPECT_TRUE(settled) << "acknowledged proposals not applied everywhere: "
                       << c.acknowledged_problem().value_or("(still catching up)");
  EXPECT_EQ(c.acknowledged_problem(), std::nullopt);
  EXPECT_GT(c.acknowledged(), 0u);
  if (scenario.reads) {
    // A last read in the calm cluster; every read still held by a live node then resolves.
    ASSERT_TRUE(
        c.sim().run_until_condition([&] { return c.read_at_leaders() > 0; }, c.sim().now() + 30s));
    const bool resolved =
        c.sim().run_until_condition([&] { return c.reads_waiting() == 0; }, c.sim().now() + 30s);
    ASSERT_FALSE(c.sim().violation().has_value()) << *c.sim().violation();
    EXPECT_TRUE(resolved) << c.reads_waiting() << " reads never resolved";
    EXPECT_GT(c.reads_released(), 0u);
    std::printf("seed %llu: %zu reads, %zu released, %zu failed, %zu at deposed leaders\n",
                static_cast<unsigned long long>(seed), c.reads_started(), c.reads_released(),
                c.reads_failed(), c.reads_at_deposed_leaders());
    if (reads != nullptr) {
      reads->started += c.reads_started();
      reads->released += c.reads_released();
      reads->failed += c.reads_failed();
      reads->at_deposed_leaders += c.reads_at_deposed_leaders();
    }
  }
  std::size_t installs = 0;
  for (NodeId id = 0; id < voters; ++id) installs += c.process(id)->installed_snapshots();
  std::printf(
      "seed %llu: %zu nodes, %zu proposals, %zu acknowledged, %zu crashes, %zu partitions, "
      "%zu voter changes, %zu snapshot installs since the last restarts, final config of %zu, "
      "max term %llu, %llu events\n",
      static_cast<unsigned long long>(seed), voters, c.proposals(), c.acknowledged(), crashes,
      partitions, plan.completed(), installs, c.leader_config().size(),
      static_cast<unsigned long long>(c.max_term()),
      static_cast<unsigned long long>(c.sim().events_processed()));
}

void run_scenario(std::uint64_t seed, std::size_t voters, const Chaos& chaos, Duration duration) {
  run_scenario(seed, Scenario{voters, 0, 20, {}}, chaos, duration);
}

TEST(RaftSim, ThreeVotersLossyNetwork) {
  for (std::uint64_t seed : scenario_seeds({1, 2, 3})) {
    SeedReport report(seed);
    run_scenario(seed, 3, Chaos{}, 30s);
  }
}

TEST(RaftSim, ThreeVotersCrashRestartAndPartitions) {
  Chaos chaos;
  chaos.crash = 0.05;
  chaos.restart = 0.2;
  chaos.partition = 0.03;
  chaos.heal = 0.1;
  chaos.max_down = 1;
  for (std::uint64_t seed : scenario_seeds({11, 12, 13, 14, 15, 16, 17, 18})) {
    SeedReport report(seed);
    run_scenario(seed, 3, chaos, 150s);
  }
}

TEST(RaftSim, FiveVotersCrashRestartAndPartitions) {
  Chaos chaos;
  chaos.crash = 0.05;
  chaos.restart = 0.15;
  chaos.partition = 0.03;
  chaos.heal = 0.1;
  chaos.max_down = 2;
  for (std::uint64_t seed : scenario_seeds({21, 22, 23, 24, 25, 26, 27, 28})) {
    SeedReport report(seed);
    run_scenario(seed, 5, chaos, 150s);
  }
}

TEST(RaftSim, LeaderCrashesRepeatedly) {
  Chaos chaos;
  chaos.crash_leader = 0.05;
  chaos.restart = 0.3;
  chaos.max_down = 2;
  for (std::uint64_t seed : scenario_seeds({31, 32, 33, 34, 35, 36})) {
    SeedReport report(seed);
    run_scenario(seed, 5, chaos, 150s);
  }
}

TEST(RaftSim, EverythingCrashesAtOnce) {
  // Power cuts: every voter down together, then back one by one; acknowledged entries survive
  // on disk and are applied again (exactly once per process) after the restarts.
  Chaos chaos;
  chaos.crash_all = 0.02;
  chaos.restart = 0.5;
  for (std::uint64_t seed : scenario_seeds({41, 42, 43, 44, 45})) {
    SeedReport report(seed);
    run_scenario(seed, 3, chaos, 120s);
  }
}

TEST(RaftSim, FrequentCompactionWithCrashesAndPartitions) {
  // A snapshot every 3 applied entries: nearly every catch-up goes through InstallSnapshot,
  // and restarts rebuild from a snapshot plus a short log.
  Chaos chaos;
  chaos.crash = 0.08;
  chaos.restart = 0.2;
  chaos.partition = 0.04;
  chaos.heal = 0.1;
  chaos.max_down = 1;
  for (std::uint64_t seed : scenario_seeds({51, 52, 53, 54, 55, 56, 57, 58, 59, 60})) {
    SeedReport report(seed);
    run_scenario(seed, Scenario{3, 0, 3, {}}, chaos, 60s);
  }
}

TEST(RaftSim, RestartedNodeCatchesUpByInstallSnapshot) {
  for (std::uint64_t seed : scenario_seeds({61, 62, 63, 64})) {
    SeedReport report(seed);
    RaftClusterOptions options;
    options.voters = 3;
    options.compact_every = 10;
    options.link = faulty_link();
    RaftCluster c(seed, options);
    ASSERT_TRUE(
        c.sim().run_until_condition([&] { return c.leader().has_value(); }, c.sim().now() + 30s));
    const NodeId down = (*c.leader() + 1) % 3;
    c.crash(down);
    for (int i = 0; i < 100; ++i) {
      ASSERT_TRUE(c.sim().run_for(100ms)) << *c.sim().violation();
      c.propose();
    }
    const auto leader = c.leader();
    ASSERT_TRUE(leader.has_value());
    ASSERT_GT(c.process(*leader)->raft().snapshot_index(), 0u);
    c.restart(down);
    const bool caught_up = c.sim().run_until_condition(
        [&] {
          return c.process(down)->raft().commit_index() >=
                     c.process(*leader)->raft().snapshot_index() &&
                 c.all_acknowledged_applied();
        },
        c.sim().now() + 30s);
    ASSERT_FALSE(c.sim().violation().has_value()) << *c.sim().violation();
    EXPECT_TRUE(caught_up);
    EXPECT_GE(c.process(down)->installed_snapshots(), 1u);
    EXPECT_EQ(c.acknowledged_problem(), std::nullopt);
  }
}

// Reads under partitions: a leader cut off into a minority keeps believing it leads for up to an
// election timeout while the majority elects another and commits more; it is asked for reads
// all along and must never release one (its commit index is below what the new leader
// committed), only fail them once it steps down.
void run_read_scenario(std::size_t voters, std::initializer_list<std::uint64_t> seeds,
                       const Chaos& chaos) {
  ReadCounts reads;
  for (std::uint64_t seed : scenario_seeds(seeds)) {
    SeedReport report(seed);
    Scenario scenario{voters, 0, 20, {}};
    scenario.reads = true;
    run_scenario(seed, scenario, chaos, 60s, &reads);
  }
  std::printf("%zu reads, %zu released, %zu failed, %zu at deposed leaders\n", reads.started,
              reads.released, reads.failed, reads.at_deposed_leaders);
  EXPECT_GT(reads.released, 0u);
  EXPECT_GT(reads.failed, 0u);
  if (scenario_seeds(seeds).size() > 1) {
    EXPECT_GT(reads.at_deposed_leaders, 0u) << "no read ever reached a deposed leader";
  }
}

Chaos partitions() {
  return Chaos{.crash = 0.02, .restart = 0.3, .partition = 0.08, .heal = 0.08, .max_down = 1};
}

TEST(RaftSim, ReadsAreLinearizableUnderPartitionsThreeVoters) {
  run_read_scenario(3, {101, 102, 103, 104, 105, 106, 107, 108, 109, 110,
                        111, 112, 113, 114, 115, 116, 117, 118, 119, 120},
                    partitions());
}

TEST(RaftSim, ReadsAreLinearizableUnderPartitionsFiveVoters) {
  Chaos chaos = partitions();
  chaos.max_down = 2;
  run_read_scenario(5, {201, 202, 203, 204, 205, 206, 207, 208, 209, 210, 211, 212}, chaos);
}

// Voter changes 3 -> 4 -> 5 -> 4 -> 3 (removing the leader on the way) and their faults.
Scenario three_four_five_four_three() {
  using S = VoterPlan::Step;
  return Scenario{3, 5, 20, {S::kAdd3, S::kAdd4, S::kRemoveLeader, S::kRemoveFollower}};
}
Chaos voter_change_faults() {
  Chaos chaos;
  chaos.crash = 0.03;
  chaos.restart = 0.2;
  chaos.partition = 0.02;
  chaos.heal = 0.15;
  chaos.max_down = 1;
  return chaos;
}

TEST(RaftSim, VoterChangesThreeFourFiveFourThreeUnderFaults) {
  for (std::uint64_t seed : scenario_seeds({71, 72, 73, 74, 75, 76, 77, 78})) {
    SeedReport report(seed);
    run_scenario(seed, three_four_five_four_three(), voter_change_faults(), 60s);
  }
}

TEST(RaftSim, ReadsAreLinearizableThroughVoterChanges) {
  // A leader outside its own config (removing itself) confirms reads with the others' echoes
  // only, and a read's quorum is that of the config in force when it is confirmed.
  Scenario scenario = three_four_five_four_three();
  scenario.reads = true;
  ReadCounts reads;
  for (std::uint64_t seed : scenario_seeds({301, 302, 303, 304, 305, 306})) {
    SeedReport report(seed);
    run_scenario(seed, scenario, voter_change_faults(), 60s, &reads);
  }
  EXPECT_GT(reads.released, 0u);
}

TEST(RaftSim, VoterChangesWithLeaderCrashes) {
  using S = VoterPlan::Step;
  // 3 -> 4 -> 3 -> 4 -> 3, both removals of the leader, while leaders also crash.
  const Scenario scenario{3, 5, 20, {S::kAdd3, S::kRemoveLeader, S::kAdd4, S::kRemoveLeader}};
  Chaos chaos;
  chaos.crash_leader = 0.03;
  chaos.restart = 0.3;
  chaos.max_down = 1;
  for (std::uint64_t seed : scenario_seeds({81, 82, 83, 84, 85, 86})) {
    SeedReport report(seed);
    run_scenario(seed, scenario, chaos, 60s);
  }
}

}  // namespace
}  // namespace elastic::sim
