// Membership scenarios on the simulator: the real Membership state machine, many nodes, faults.
//
// Each scenario runs for each seed of scenario_seeds() (ELASTIC_SIM_SEED=<n> runs just <n>); a
// failure prints "SIM FAILED seed=<n> ..." with the rerun command. Sizes are kept small (30-100
// nodes) so the suite stays within about a minute in Release; the bench (bench/membership)
// runs the thousands.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "tests/sim/membership_process.h"
#include "tests/sim/scenario_seed.h"

namespace elastic::sim {
namespace {

using namespace std::chrono_literals;

ClusterOptions default_options() {
  ClusterOptions o;
  o.config = config::MembershipConfig{};  // the shipped defaults (1 s probes, 200 ms gossip)
  o.start_window = 5s;
  return o;
}

// Starts `n` nodes and waits for one consistent view; fails the test (returns false) if the
// cluster does not converge within `bound` of the last start.
bool start_and_converge(MembershipCluster& c, std::size_t n, Duration bound = 60s) {
  c.start_nodes(n);
  const bool ok =
      c.sim().run_until_condition([&] { return c.converged(); }, c.sim().now() + bound, 500ms);
  EXPECT_TRUE(ok) << "no convergence: " << c.convergence_problem();
  return ok;
}

TEST(MembershipSim, ConvergesFromSeeds) {
  for (std::uint64_t seed : scenario_seeds({1, 2, 3})) {
    SeedReport report(seed);
    MembershipCluster c(seed, default_options());
    const TimePoint begin = c.sim().now();
    if (!start_and_converge(c, 100, 30s)) continue;
    std::printf("seed %llu: 100 nodes converged %.1f s after the first start\n",
                static_cast<unsigned long long>(seed), to_ms(c.sim().now() - begin) / 1000);
    EXPECT_EQ(c.tally().false_deaths, 0u) << c.false_death_log().front();
    // And it stays converged.
    ASSERT_TRUE(c.sim().run_for(60s));
    EXPECT_TRUE(c.converged()) << c.convergence_problem();
    EXPECT_EQ(c.tally().false_deaths, 0u);
  }
}

TEST(MembershipSim, CrashIsDetectedWithinTheLifeguardBound) {
  for (std::uint64_t seed : scenario_seeds({11, 12, 13})) {
    SeedReport report(seed);
    MembershipCluster c(seed, default_options());
    if (!start_and_converge(c, 100)) continue;
    const NodeId victim = 3 + static_cast<NodeId>(c.sim().rng().below(97));
    const std::uint64_t generation = c.sim().info(victim).generation;
    const auto bound = lifeguard_detection_bound(c.options().config, 100);
    const TimePoint crashed_at = c.sim().now();
    c.crash(victim);
    const bool detected = c.sim().run_until_condition(
        [&] { return c.all_see_dead(victim, generation); }, crashed_at + bound, 100ms);
    EXPECT_TRUE(detected) << "n" << victim << " not dead everywhere within " << to_ms(bound) / 1000
                          << " s";
    std::printf("seed %llu: crash of n%u dead everywhere after %.1f s (bound %.1f s)\n",
                static_cast<unsigned long long>(seed), victim,
                to_ms(c.sim().now() - crashed_at) / 1000, to_ms(bound) / 1000);
    EXPECT_EQ(c.tally().false_deaths, 0u);
    EXPECT_TRUE(c.converged()) << c.convergence_problem();
  }
}

TEST(MembershipSim, FivePercentLossCausesNoFalseDeaths) {
  for (std::uint64_t seed : scenario_seeds({21, 22})) {
    SeedReport report(seed);
    auto options = default_options();
    options.link.loss = 0.05;
    MembershipCluster c(seed, options);
    if (!start_and_converge(c, 50)) continue;
    c.reset_tally();
    ASSERT_TRUE(c.sim().run_for(30min));
    std::printf("seed %llu: 50 nodes, 5%% loss, 30 min: %llu false suspicions, %llu false deaths\n",
                static_cast<unsigned long long>(seed),
                static_cast<unsigned long long>(c.tally().false_suspicions),
                static_cast<unsigned long long>(c.tally().false_deaths));
    EXPECT_EQ(c.tally().false_deaths, 0u)
        << (c.false_death_log().empty() ? "" : c.false_death_log().front());
    EXPECT_TRUE(c.converged()) << c.convergence_problem();
  }
}

TEST(MembershipSim, SlowProberDoesNotKillOthers) {
  // 5x: half the slow node's direct probes time out; 20x: its local health climbs and it raises
  // suspicions of its own. Neither may kill a healthy node.
  for (std::uint64_t seed : scenario_seeds({31, 32})) {
    for (double slowdown : {5.0, 20.0}) {
      SeedReport report(seed);
      MembershipCluster c(seed, default_options());
      if (!start_and_converge(c, 50)) continue;
      const NodeId slow = 7;
      std::uint64_t false_deaths_of_others = 0;
      std::vector<std::string> log;
      c.set_observer([&](const ObservedEvent& e) {
        if (e.event.state != MemberState::kDead || e.event.name == c.name(slow)) return;
        const auto id = MembershipCluster::id_of(e.event.name);
        if (id && c.sim().is_up(*id) && c.sim().info(*id).generation == e.event.generation) {
          ++false_deaths_of_others;
          if (log.size() < 5) log.push_back(c.name(e.observer) + " declared " + e.event.name);
        }
      });
      c.sim().set_slow(slow, slowdown);
      ASSERT_TRUE(c.sim().run_for(5min));
      const auto& st = c.member(slow)->stats();
      std::printf(
          "x%.0f seed %llu: slow n%u: %llu probes, %llu timed out, %llu suspicions raised, local "
          "health %d; %llu false deaths of others\n",
          slowdown, static_cast<unsigned long long>(seed), slow,
          static_cast<unsigned long long>(st.probes),
          static_cast<unsigned long long>(st.probe_timeouts),
          static_cast<unsigned long long>(st.suspicions), st.local_health,
          static_cast<unsigned long long>(false_deaths_of_others));
      EXPECT_EQ(false_deaths_of_others, 0u) << (log.empty() ? "" : log.front());
      EXPECT_GT(st.probe_timeouts, 0u) << "the slow node never missed an ack: not starved";
    }
  }
}

TEST(MembershipSim, PartitionHealsIntoOneView) {
  for (std::uint64_t seed : scenario_seeds({41, 42})) {
    SeedReport report(seed);
    MembershipCluster c(seed, default_options());
    if (!start_and_converge(c, 60)) continue;
    std::vector<NodeId> even, odd;
    for (NodeId id = 0; id < 60; ++id) (id % 2 == 0 ? even : odd).push_back(id);
    c.sim().partition({even, odd});
    // Long enough for each side to declare the whole other side dead.
    auto sides_split = [&] {
      for (NodeId a = 0; a < 60; ++a) {
        for (const auto& v : c.member(a)->members()) {
          const auto b = MembershipCluster::id_of(v.name);
          if (b && *b % 2 != a % 2 && v.state != MemberState::kDead) return false;
        }
      }
      return true;
    };
    ASSERT_TRUE(c.sim().run_until_condition(sides_split, c.sim().now() + 5min, 1s))
        << "the sides never declared each other dead";
    c.sim().heal();
    const TimePoint healed = c.sim().now();
    const bool one_view =
        c.sim().run_until_condition([&] { return c.converged(); }, healed + 5min, 1s);
    EXPECT_TRUE(one_view) << "no single view 5 min after heal: " << c.convergence_problem();
    std::printf("seed %llu: one view %.1f s after heal\n", static_cast<unsigned long long>(seed),
                to_ms(c.sim().now() - healed) / 1000);
  }
}

TEST(MembershipSim, MassRestartWithinAMinuteConverges) {
  for (std::uint64_t seed : scenario_seeds({51, 52})) {
    SeedReport report(seed);
    MembershipCluster c(seed, default_options());
    if (!start_and_converge(c, 60)) continue;
    // Every node crashes at a random moment of one minute and comes back 1-10 s later.
    struct Step {
      TimePoint at;
      NodeId id;
      bool up;
    };
    std::vector<Step> steps;
    const TimePoint begin = c.sim().now();
    for (NodeId id = 0; id < 60; ++id) {
      const auto down_at = begin + Duration{static_cast<Duration::rep>(c.sim().rng().below(
                                       static_cast<std::uint64_t>(Duration(60s).count())))};
      const auto up_at = down_at + 1s +
                         Duration{static_cast<Duration::rep>(c.sim().rng().below(
                             static_cast<std::uint64_t>(Duration(9s).count())))};
      steps.push_back({down_at, id, false});
      steps.push_back({up_at, id, true});
    }
    std::sort(steps.begin(), steps.end(), [](const Step& a, const Step& b) {
      return a.at != b.at ? a.at < b.at : a.id < b.id;
    });
    for (const auto& s : steps) {
      ASSERT_TRUE(c.sim().run_until(s.at));
      s.up ? c.restart(s.id) : c.crash(s.id);
    }
    const TimePoint last = c.sim().now();
    const bool one_view =
        c.sim().run_until_condition([&] { return c.converged(); }, last + 3min, 1s);
    EXPECT_TRUE(one_view) << "after a mass restart: " << c.convergence_problem();
    std::printf("seed %llu: one view %.1f s after the last restart\n",
                static_cast<unsigned long long>(seed), to_ms(c.sim().now() - last) / 1000);
    for (NodeId id = 0; id < 60; ++id) EXPECT_EQ(c.sim().info(id).generation, 2u);
  }
}

TEST(MembershipSim, NodeReturnsWithANewAddress) {
  for (std::uint64_t seed : scenario_seeds({61, 62})) {
    SeedReport report(seed);
    MembershipCluster c(seed, default_options());
    if (!start_and_converge(c, 50)) continue;
    const NodeId mover = 17;
    c.crash(mover);
    // Down long enough to be declared dead, then back elsewhere with generation 2.
    ASSERT_TRUE(c.sim().run_until_condition([&] { return c.all_see_dead(mover, 1); },
                                            c.sim().now() + 3min, 1s));
    c.restart(mover, /*new_address=*/true);
    const TimePoint back = c.sim().now();
    const bool one_view =
        c.sim().run_until_condition([&] { return c.converged(); }, back + 1min, 500ms);
    EXPECT_TRUE(one_view) << c.convergence_problem();
    EXPECT_NE(c.sim().info(mover).address, MembershipCluster::address_for(mover, 0));
    std::printf("seed %llu: n%u alive at %s everywhere after %.1f s\n",
                static_cast<unsigned long long>(seed), mover, c.sim().info(mover).address.c_str(),
                to_ms(c.sim().now() - back) / 1000);
    // And immediately, without waiting for the old generation to be declared dead.
    c.crash(mover);
    c.restart(mover, /*new_address=*/true);
    const TimePoint again = c.sim().now();
    EXPECT_TRUE(c.sim().run_until_condition([&] { return c.converged(); }, again + 2min, 500ms))
        << "quick restart at a new address: " << c.convergence_problem();
    EXPECT_EQ(c.tally().false_deaths, 0u);
  }
}

// Regression: gossip runs on the gossip_interval grid. It once did not after an idle spell
// (next_gossip_ went stale while the queue was empty, so the first update queued was gossiped at
// once): every node forwarded news the moment it heard it, and a join reached ~85% of 300 nodes
// within 3 ms instead of over several 200 ms rounds.
TEST(MembershipSim, GossipIsPacedByTheGossipInterval) {
  for (std::uint64_t seed : scenario_seeds({5})) {
    SeedReport report(seed);
    auto options = default_options();
    options.start_window = 3s;
    MembershipCluster c(seed, options);
    if (!start_and_converge(c, 300)) continue;
    ASSERT_TRUE(c.sim().run_for(30s));
    const std::string subject = c.name(300);
    std::size_t seen = 0;
    TimePoint half{};
    c.set_observer([&](const ObservedEvent& e) {
      if (e.event.name == subject && e.event.state == MemberState::kAlive && ++seen == 150) {
        half = e.time;
      }
    });
    const TimePoint start = c.sim().now();
    c.add_node();
    ASSERT_TRUE(c.sim().run_for(10s));
    ASSERT_GE(seen, 150u);
    std::printf("seed %llu: half of 300 nodes heard of the join after %.0f ms\n",
                static_cast<unsigned long long>(seed), to_ms(half - start));
    // Paced gossip needs several hops of up to one gossip interval each to reach half of 300
    // nodes (fan-out 3: at least log4(150) > 3 hops); one interval is a generous floor.
    EXPECT_GE(half - start, c.options().config.gossip_interval)
        << "half the cluster heard of the join after " << to_ms(half - start) << " ms";
  }
}

// Bulk bootstrap (Membership::seed_members): 2,000 nodes start converged without a join storm,
// and one refutation (a single source, incarnation + 1) reaches every live node within an
// epidemic bound: fan-out f every gossip_interval needs about log_{f+1}(N) + ln(N) / f rounds
// (Pittel); allowed twice that, since a hop waits up to one interval for the next grid point,
// plus a probe interval for the refutation to start.
TEST(MembershipSim, BulkBootstrappedClusterSpreadsOneUpdateToEveryNodeInLogNRounds) {
  constexpr std::size_t kNodes = 2000;
  for (std::uint64_t seed : scenario_seeds({81, 82})) {
    SeedReport report(seed);
    MembershipCluster c(seed, default_options());
    c.start_nodes_bulk(kNodes);
    EXPECT_EQ(c.sim().network_counters().sent, 0u) << "the bulk bootstrap sent messages";
    ASSERT_TRUE(c.converged()) << c.convergence_problem();
    ASSERT_TRUE(c.sim().run_for(5s));

    const auto& config = c.options().config;
    const double n = static_cast<double>(kNodes);
    const double f = static_cast<double>(config.gossip_fanout);
    const double rounds = std::log(n) / std::log(f + 1) + std::log(n) / f;
    const Duration bound =
        config.gossip_interval * static_cast<int>(std::ceil(2 * rounds)) + config.probe_interval;

    const NodeId target = 1234;
    const std::string subject = c.name(target);
    std::vector<NodeId> waiting;
    for (NodeId id = 0; id < kNodes; ++id) {
      if (id != target) waiting.push_back(id);
    }
    const TimePoint start = c.sim().now();
    c.inject_suspicion(17, target);
    const bool everywhere = c.sim().run_until_condition(
        [&] {
          std::erase_if(waiting, [&](NodeId id) {
            const auto v = c.member(id)->member(subject);
            return v && v->state == MemberState::kAlive && v->incarnation == 1;
          });
          return waiting.empty();
        },
        start + bound, 10ms);
    EXPECT_TRUE(everywhere) << waiting.size() << " nodes still without the refutation after "
                            << to_ms(bound) / 1000 << " s";
    std::printf(
        "seed %llu: %zu bulk-bootstrapped nodes: refutation everywhere after %.2f s "
        "(bound %.1f s)\n",
        static_cast<unsigned long long>(seed), kNodes, to_ms(c.sim().now() - start) / 1000,
        to_ms(bound) / 1000);
    EXPECT_EQ(c.tally().false_deaths, 0u);
    EXPECT_TRUE(c.converged()) << c.convergence_problem();
  }
}

// The same seed gives the same run, event for event.
TEST(MembershipSim, SameSeedSameTrace) {
  auto run = [](std::uint64_t seed) {
    auto options = default_options();
    options.link.loss = 0.02;
    options.link.duplicate = 0.01;
    options.link.reorder_probability = 0.05;
    MembershipCluster c(seed, options);
    c.start_nodes(30);
    EXPECT_TRUE(c.sim().run_for(30s));
    c.crash(9);
    EXPECT_TRUE(c.sim().run_for(60s));
    c.restart(9, true);
    EXPECT_TRUE(c.sim().run_for(30s));
    return std::pair{c.sim().trace_hash(), c.tally().events};
  };
  for (std::uint64_t seed : scenario_seeds({71})) {
    SeedReport report(seed);
    const auto first = run(seed);
    const auto second = run(seed);
    EXPECT_EQ(first, second);
    EXPECT_GT(first.second, 0u);
    EXPECT_NE(run(seed + 1).first, first.first);
  }
}

}  // namespace
}  // namespace elastic::sim
