// Raft scenarios on the simulator: the real Raft core, 3 and 5 voters, a lossy, duplicating,
// reordering network, partitions, crashes and restarts, and a client proposing all along.
// RaftCluster checks election safety, log matching, leader completeness and state machine
// safety after every event; at the end every acknowledged proposal must be applied exactly once
// on every node (after all are restarted and the network healed).
//
// Each scenario runs for each seed of scenario_seeds() (ELASTIC_SIM_SEED=<n> runs just <n>); a
// failure prints "SIM FAILED seed=<n> ..." with the rerun command.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
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

// Runs `duration` of chaos in steps of 100 ms with one client proposal per step, then heals,
// restarts everyone and waits for every acknowledged proposal to be applied everywhere.
void run_scenario(std::uint64_t seed, std::size_t voters, const Chaos& chaos, Duration duration) {
  RaftClusterOptions options;
  options.voters = voters;
  options.link = faulty_link();
  RaftCluster c(seed, options);
  Rng& rng = c.sim().rng();
  const TimePoint end = c.sim().now() + duration;
  std::size_t down = 0;
  std::size_t crashes = 0;
  std::size_t partitions = 0;
  while (c.sim().now() < end) {
    ASSERT_TRUE(c.sim().run_for(100ms)) << *c.sim().violation();
    c.propose();
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
  std::printf(
      "seed %llu: %zu voters, %zu proposals, %zu acknowledged, %zu crashes, %zu partitions, "
      "max term %llu, %llu events\n",
      static_cast<unsigned long long>(seed), voters, c.proposals(), c.acknowledged(), crashes,
      partitions, static_cast<unsigned long long>(c.max_term()),
      static_cast<unsigned long long>(c.sim().events_processed()));
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

}  // namespace
}  // namespace elastic::sim
