// JobWatch scenarios on the simulator: one running round of 8 daemons, the real JobWatch state
// machine, kills, loss, pauses and stale-round traffic.
//
// Each scenario runs for each seed of scenario_seeds() (ELASTIC_SIM_SEED=<n> runs just <n>); a
// failure prints "SIM FAILED seed=<n> ..." with the rerun command. The bench
// (bench/consensus/job_watch_bench) measures the detection distribution over hundreds of seeds.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "tests/sim/job_watch_process.h"
#include "tests/sim/scenario_seed.h"

namespace elastic::sim {
namespace {

using namespace std::chrono_literals;

constexpr std::size_t kNodes = 8;

JobWatchClusterOptions options(double loss = 0.0) {
  JobWatchClusterOptions o;
  o.nodes = kNodes;
  o.link.loss = loss;
  return o;
}

// The worst case from a silent crash to a declaration: the victim's last keepalive left just
// before it died, so silence counts from then: peer_timeout + confirm_window, plus latency.
Duration silent_bound(const rendezvous::JobWatchConfig& c) {
  return c.peer_timeout + c.confirm_window + 10ms;
}

// Kills a random member after a random phase and checks every survivor declares it, once,
// within `bound`, with no false declaration. Returns the time until every survivor knew.
Duration kill_and_check(JobWatchCluster& c, std::optional<Duration> disconnect_after,
                        Duration bound) {
  auto& sim = c.sim();
  EXPECT_TRUE(sim.run_for(2s + Duration(sim.rng().below(1'000'000'000))));
  const NodeId victim = static_cast<NodeId>(sim.rng().below(kNodes));
  const TimePoint crashed_at = sim.now();
  c.crash(victim, disconnect_after);
  const bool all = sim.run_until_condition([&] { return c.all_survivors_declared(victim); },
                                           crashed_at + bound, 1ms);
  const Duration took = sim.now() - crashed_at;
  EXPECT_TRUE(all) << JobWatchCluster::name(victim) << " not declared by every survivor within "
                   << to_ms(bound) << " ms";
  // Nothing more happens: no second declaration, nobody else declared.
  EXPECT_TRUE(sim.run_for(5s));
  for (NodeId id = 0; id < kNodes; ++id) {
    if (id == victim) continue;
    EXPECT_EQ(c.declarations_of(victim, id), 1u) << JobWatchCluster::name(id);
    const auto* w = c.watch(id);
    EXPECT_EQ(w->stats().declared, 1u) << JobWatchCluster::name(id);
  }
  EXPECT_EQ(c.false_declarations(), 0u) << (c.false_log().empty() ? "" : c.false_log().front());
  return took;
}

TEST(JobWatchSim, SilentKillIsDeclaredByEverySurvivorWithinBound) {
  for (std::uint64_t seed : scenario_seeds({1, 2, 3, 4, 5, 6, 7, 8, 9, 10})) {
    SeedReport report(seed);
    JobWatchCluster c(seed, options());
    const Duration took = kill_and_check(c, std::nullopt, silent_bound(c.options().config));
    std::printf("seed %llu: every survivor declared the silent victim after %.0f ms\n",
                static_cast<unsigned long long>(seed), to_ms(took));
    EXPECT_LE(took, 1000ms + 10ms);  // the p99 target is 2 s; the design bound is 1 s
  }
}

TEST(JobWatchSim, KillWithDisconnectNoticesIsDeclaredWithinTheConfirmWindow) {
  for (std::uint64_t seed : scenario_seeds({11, 12, 13, 14, 15})) {
    SeedReport report(seed);
    JobWatchCluster c(seed, options());
    const auto& config = c.options().config;
    const Duration took = kill_and_check(c, 2ms, 2ms + config.confirm_window + 10ms);
    std::printf("seed %llu: kill -9 with disconnect notices declared everywhere after %.0f ms\n",
                static_cast<unsigned long long>(seed), to_ms(took));
  }
}

TEST(JobWatchSim, KillAtFivePercentLossIsDeclaredWithinBound) {
  for (std::uint64_t seed : scenario_seeds({21, 22, 23, 24, 25, 26, 27, 28})) {
    SeedReport report(seed);
    JobWatchCluster c(seed, options(0.05));
    // Loss can only make the victim's last keepalive older: the bound does not move.
    const Duration took = kill_and_check(c, std::nullopt, silent_bound(c.options().config));
    std::printf("seed %llu: at 5%% loss every survivor declared the victim after %.0f ms\n",
                static_cast<unsigned long long>(seed), to_ms(took));
  }
}

TEST(JobWatchSim, TenMinutesAtFivePercentLossDeclareNothing) {
  for (std::uint64_t seed : scenario_seeds({31, 32})) {
    SeedReport report(seed);
    JobWatchCluster c(seed, options(0.05));
    ASSERT_TRUE(c.sim().run_for(10min));
    EXPECT_TRUE(c.declarations().empty())
        << c.declarations().size()
        << " declarations, first: " << JobWatchCluster::name(c.declarations().front().observer)
        << " declared " << c.declarations().front().lost.peer;
    std::uint64_t suspicions = 0;
    std::uint64_t cleared = 0;
    for (NodeId id = 0; id < kNodes; ++id) {
      suspicions += c.watch(id)->stats().suspicions;
      cleared += c.watch(id)->stats().suspicions_cleared;
    }
    EXPECT_EQ(suspicions, cleared);
    std::printf("seed %llu: 10 min at 5%% loss: %llu suspicions, all cleared, 0 declarations\n",
                static_cast<unsigned long long>(seed), static_cast<unsigned long long>(suspicions));
    // And a kill afterwards is still found in time.
    kill_and_check(c, std::nullopt, silent_bound(c.options().config));
  }
}

TEST(JobWatchSim, PauseShorterThanTheTimeoutDeclaresNothing) {
  for (std::uint64_t seed : scenario_seeds({41, 42, 43})) {
    SeedReport report(seed);
    JobWatchCluster c(seed, options());
    const auto& config = c.options().config;
    ASSERT_TRUE(c.sim().run_for(2s));
    for (int i = 0; i < 10; ++i) {
      const NodeId paused = static_cast<NodeId>(c.sim().rng().below(kNodes));
      // Up to just under the timeout.
      const Duration d = config.peer_timeout - 10ms - Duration(c.sim().rng().below(300'000'000));
      c.pause(paused, d);
      ASSERT_TRUE(c.sim().run_for(3s));
    }
    EXPECT_TRUE(c.declarations().empty())
        << JobWatchCluster::name(c.declarations().front().observer) << " declared "
        << c.declarations().front().lost.peer;
  }
}

TEST(JobWatchSim, PauseLongerThanTheTimeoutButShorterThanTheWindowIsCleared) {
  for (std::uint64_t seed : scenario_seeds({51, 52, 53})) {
    SeedReport report(seed);
    JobWatchCluster c(seed, options());
    const auto& config = c.options().config;
    ASSERT_TRUE(c.sim().run_for(2s));
    const NodeId paused = 5;
    // Suspected (silence > peer_timeout) but back, and answering, before the window ends:
    // the earliest declaration is peer_timeout + confirm_window after its last keepalive, at
    // most a keepalive interval before the pause.
    c.pause(paused, config.peer_timeout + config.confirm_window - config.keepalive_interval - 20ms);
    ASSERT_TRUE(c.sim().run_for(5s));
    std::uint64_t suspicions = 0;
    for (NodeId id = 0; id < kNodes; ++id) suspicions += c.watch(id)->stats().suspicions;
    EXPECT_GT(suspicions, 0u);
    EXPECT_TRUE(c.declarations().empty())
        << JobWatchCluster::name(c.declarations().front().observer) << " declared "
        << c.declarations().front().lost.peer;
  }
}

TEST(JobWatchSim, StaleRoundMessagesInTheVictimsNameAreIgnored) {
  for (std::uint64_t seed : scenario_seeds({61, 62, 63})) {
    SeedReport report(seed);
    JobWatchCluster c(seed, options());
    const NodeId victim = 2;
    c.add_stale_ghost(victim, 20ms);
    ASSERT_TRUE(c.sim().run_for(2s));
    const TimePoint crashed_at = c.sim().now();
    c.crash(victim);
    const bool all =
        c.sim().run_until_condition([&] { return c.all_survivors_declared(victim); },
                                    crashed_at + silent_bound(c.options().config), 1ms);
    EXPECT_TRUE(all) << "stale messages kept the victim alive";
    std::uint64_t stale = 0;
    for (NodeId id = 0; id < kNodes; ++id) {
      if (id != victim) stale += c.watch(id)->stats().stale_dropped;
    }
    EXPECT_GT(stale, 500u);
    EXPECT_EQ(c.false_declarations(), 0u);
  }
}

// A large round (256 daemons: a ring of 3 watchers each, declarations spread by notices) at 5%
// loss: each daemon sends the same few keepalives a second as in a round of 4, a silent kill is
// declared by every survivor within the small round's bound (plus two notice hops), and a
// kill -9 that only its ring neighbours see (they had the connections) within the window.
TEST(JobWatchSim, ALargeRoundFindsAKillEverywhereAtAConstantLoadPerDaemon) {
  constexpr std::size_t kLarge = 256;
  for (std::uint64_t seed : scenario_seeds({71, 72, 73})) {
    for (const bool disconnect : {false, true}) {
      SeedReport report(seed);
      JobWatchClusterOptions o = options(0.05);
      o.nodes = kLarge;
      JobWatchCluster c(seed, o);
      auto& sim = c.sim();
      ASSERT_TRUE(sim.run_for(2s));
      std::vector<std::uint64_t> sent_before(kLarge);
      for (NodeId id = 0; id < kLarge; ++id) sent_before[id] = sim.counters(id).packets_sent;
      ASSERT_TRUE(sim.run_for(5s + Duration(sim.rng().below(200'000'000))));
      double busiest = 0;
      for (NodeId id = 0; id < kLarge; ++id) {
        busiest = std::max(
            busiest, static_cast<double>(sim.counters(id).packets_sent - sent_before[id]) / 5.0);
      }
      // 3 keepalives per 200 ms, and the odd probe after lost ones.
      EXPECT_LE(busiest, 20.0);
      const NodeId victim = static_cast<NodeId>(sim.rng().below(kLarge));
      const TimePoint crashed_at = sim.now();
      const auto& config = o.config;
      c.crash(victim, disconnect ? std::optional<Duration>(2ms) : std::nullopt);
      const Duration bound =
          disconnect ? 2ms + config.confirm_window + 10ms : silent_bound(config) + 5ms;
      const bool all = sim.run_until_condition([&] { return c.all_survivors_declared(victim); },
                                               crashed_at + bound, 1ms);
      const Duration took = sim.now() - crashed_at;
      EXPECT_TRUE(all) << JobWatchCluster::name(victim) << " not declared everywhere within "
                       << to_ms(bound) << " ms (disconnect " << disconnect << ")";
      ASSERT_TRUE(sim.run_for(3s));
      std::size_t first_hand = 0;
      for (NodeId id = 0; id < kLarge; ++id) {
        if (id == victim) continue;
        EXPECT_EQ(c.watch(id)->stats().declared, 1u) << JobWatchCluster::name(id);
        first_hand += c.watch(id)->stats().notices_received == 0 ? 1 : 0;
      }
      // Only its watchers (and a neighbour that saw the disconnect) declare first-hand.
      EXPECT_LE(first_hand, 2u * static_cast<std::size_t>(config.watchers));
      EXPECT_EQ(c.false_declarations(), 0u)
          << (c.false_log().empty() ? "" : c.false_log().front());
      std::printf("seed %llu (%s): %zu daemons declared the victim after %.0f ms, %zu first-hand; "
                  "busiest daemon sent %.1f msgs/s before\n",
                  static_cast<unsigned long long>(seed), disconnect ? "kill -9" : "silent",
                  kLarge - 1, to_ms(took), first_hand, busiest);
    }
  }
}

TEST(JobWatchSim, RunsReproduceFromTheirSeed) {
  auto run = [](std::uint64_t seed) {
    JobWatchCluster c(seed, options(0.05));
    EXPECT_TRUE(c.sim().run_for(20s));
    c.crash(3);
    EXPECT_TRUE(c.sim().run_for(5s));
    return c.sim().trace_hash();
  };
  EXPECT_EQ(run(77), run(77));
  EXPECT_NE(run(77), run(78));
}

}  // namespace
}  // namespace elastic::sim
