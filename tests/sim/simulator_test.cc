// The simulator engine against a toy protocol: a node that sends a numbered "hello" to a random
// peer every tick and counts what it hears. Checks ordering, determinism, link faults,
// partitions, crash/restart with persisted state, new addresses, slow CPU and invariants.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "tests/sim/scenario_seed.h"
#include "tests/sim/simulator.h"

namespace elastic::sim {
namespace {

using namespace std::chrono_literals;

struct Hello {
  NodeId from;
  std::uint64_t generation;
  std::uint64_t number;
};

class ToyProcess : public SimProcess {
 public:
  ToyProcess(const NodeInfo& info, std::vector<std::string>* peers, Duration tick)
      : info_(info), rng_(info.seed), peers_(peers), tick_(tick) {}

  void start(SimContext& ctx) override {
    next_ = ctx.now() + tick_;
    auto& boots = ctx.storage()["boots"];
    boots = std::to_string(boots.empty() ? 1 : std::stoi(boots) + 1);
  }
  void on_packet(SimContext& ctx, const Packet& packet) override {
    const auto& hello = std::any_cast<const Hello&>(*packet.body);
    received.push_back(hello.number);
    last_receive = ctx.now();
    senders.insert(hello.from);
    EXPECT_EQ(packet.from, hello.from);
    EXPECT_EQ(packet.from_generation, hello.generation);
  }
  void on_timer(SimContext& ctx) override {
    timer_calls += 1;
    last_timer = ctx.now();
    if (ctx.now() < next_) return;
    next_ += tick_;
    if (!sending || peers_->empty()) return;
    const auto& to = (*peers_)[rng_.below(peers_->size())];
    if (to == ctx.address()) return;
    ctx.send(to, Hello{ctx.id(), ctx.generation(), sent++}, 100);
  }
  TimePoint next_deadline() const override { return next_; }

  NodeInfo info_;
  Rng rng_;
  std::vector<std::string>* peers_;
  Duration tick_;
  TimePoint next_{};
  bool sending = true;
  std::uint64_t sent = 0;
  std::uint64_t timer_calls = 0;
  TimePoint last_timer{};
  TimePoint last_receive{};
  std::vector<std::uint64_t> received;
  std::set<NodeId> senders;
};

struct ToyCluster {
  explicit ToyCluster(std::uint64_t seed, std::size_t n, Duration tick = 100ms) : sim(seed) {
    for (std::size_t i = 0; i < n; ++i) peers.push_back("10.0.0." + std::to_string(i) + ":1");
    for (std::size_t i = 0; i < n; ++i) {
      sim.add_node(peers[i], [this, tick](const NodeInfo& info) {
        return std::make_unique<ToyProcess>(info, &peers, tick);
      });
    }
  }
  ToyProcess& toy(NodeId id) { return *static_cast<ToyProcess*>(sim.process(id)); }
  std::vector<std::string> peers;
  Simulator sim;
};

TEST(SimulatorTest, JumpsVirtualTimeAndDeliversInOrder) {
  ToyCluster c(1, 2, 1s);
  const TimePoint start = c.sim.now();
  ASSERT_TRUE(c.sim.run_for(std::chrono::hours(10)));
  EXPECT_EQ(c.sim.now(), start + std::chrono::hours(10));
  // One timer per second per node (the toy wakes only at its deadline).
  EXPECT_EQ(c.toy(0).timer_calls, 36000u);
  // Without reordering, packets a second apart cannot overtake each other (jitter < 1 ms).
  const auto& got = c.toy(1).received;
  ASSERT_GT(got.size(), 1000u);
  for (std::size_t i = 1; i < got.size(); ++i) ASSERT_LT(got[i - 1], got[i]);
}

TEST(SimulatorTest, SameSeedSameTraceDifferentSeedDifferentTrace) {
  auto run = [](std::uint64_t seed) {
    ToyCluster c(seed, 20);
    LinkModel lossy;
    lossy.loss = 0.1;
    lossy.duplicate = 0.05;
    lossy.reorder_probability = 0.2;
    c.sim.set_default_link(lossy);
    EXPECT_TRUE(c.sim.run_for(60s));
    c.sim.crash(3);
    EXPECT_TRUE(c.sim.run_for(10s));
    c.sim.restart(3, "10.9.9.9:1");
    EXPECT_TRUE(c.sim.run_for(10s));
    return c.sim.trace_hash();
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(SimulatorTest, LossAndDuplicationMatchTheirProbabilities) {
  for (std::uint64_t seed : scenario_seeds({1, 2})) {
    SeedReport report(seed);
    ToyCluster c(seed, 10);
    LinkModel link;
    link.loss = 0.05;
    link.duplicate = 0.02;
    c.sim.set_default_link(link);
    ASSERT_TRUE(c.sim.run_for(600s));
    const auto& net = c.sim.network_counters();
    ASSERT_GT(net.sent, 50000u);
    const double loss = static_cast<double>(net.lost) / static_cast<double>(net.sent);
    const double dup = static_cast<double>(net.duplicated) / static_cast<double>(net.sent);
    EXPECT_NEAR(loss, 0.05, 0.005);
    EXPECT_NEAR(dup, 0.02 * 0.95, 0.004);
    // A few packets are still in flight when the run stops.
    EXPECT_LE(net.delivered, net.sent - net.lost + net.duplicated);
    EXPECT_GE(net.delivered + 20, net.sent - net.lost + net.duplicated);
  }
}

TEST(SimulatorTest, ReorderingLetsLaterPacketsOvertake) {
  ToyCluster c(3, 2, 1ms);
  LinkModel link;
  link.reorder_probability = 0.5;
  link.reorder_delay = 20ms;
  c.sim.set_default_link(link);
  ASSERT_TRUE(c.sim.run_for(10s));
  const auto& got = c.toy(1).received;
  std::size_t inversions = 0;
  for (std::size_t i = 1; i < got.size(); ++i) inversions += got[i - 1] > got[i] ? 1 : 0;
  EXPECT_GT(inversions, got.size() / 10);
}

TEST(SimulatorTest, PartitionDropsAcrossGroupsUntilHealed) {
  ToyCluster c(4, 4);
  c.sim.partition({{0, 1}, {2, 3}});
  ASSERT_TRUE(c.sim.run_for(60s));
  for (NodeId id : {0u, 1u}) {
    for (NodeId s : c.toy(id).senders) EXPECT_LT(s, 2u);
  }
  for (NodeId id : {2u, 3u}) {
    for (NodeId s : c.toy(id).senders) EXPECT_GE(s, 2u);
  }
  EXPECT_GT(c.sim.network_counters().partitioned, 0u);
  c.sim.heal();
  ASSERT_TRUE(c.sim.run_for(60s));
  EXPECT_EQ(c.toy(0).senders.size(), 3u);

  c.sim.block(1, 0);  // one way only
  const auto before = c.toy(0).received.size();
  const auto senders_before = c.sim.counters(1).packets_sent;
  ASSERT_TRUE(c.sim.run_for(60s));
  EXPECT_GT(c.sim.counters(1).packets_sent, senders_before);
  EXPECT_GT(c.toy(0).received.size(), before);  // 2 and 3 still reach 0
  EXPECT_GT(c.toy(1).received.size(), 0u);
}

TEST(SimulatorTest, CrashDropsPendingPacketsAndRestartKeepsStorage) {
  ToyCluster c(5, 2, 10ms);
  LinkModel slow_link;
  slow_link.base_latency = 50ms;  // packets are always in flight
  slow_link.jitter = 0ms;
  c.sim.set_default_link(slow_link);
  ASSERT_TRUE(c.sim.run_for(1s));
  c.sim.crash(1);
  EXPECT_FALSE(c.sim.is_up(1));
  const auto unroutable = c.sim.network_counters().unroutable;
  c.sim.restart(1);  // immediately: the packets in flight to the old process must still vanish
  EXPECT_EQ(c.sim.info(1).generation, 2u);
  ASSERT_TRUE(c.sim.run_for(49ms));
  EXPECT_TRUE(c.toy(1).received.empty());
  EXPECT_GT(c.sim.network_counters().unroutable, unroutable);
  ASSERT_TRUE(c.sim.run_for(1s));
  EXPECT_FALSE(c.toy(1).received.empty());
  c.sim.crash(1);
  c.sim.restart(1);
  ASSERT_TRUE(c.sim.run_for(1s));
  EXPECT_EQ(c.sim.info(1).generation, 3u);
  SimContext ctx(c.sim, 1);
  EXPECT_EQ(ctx.storage()["boots"], "3");
}

TEST(SimulatorTest, RestartAtNewAddressMovesRouting) {
  ToyCluster c(6, 3);
  c.sim.crash(2);
  c.sim.restart(2, "10.1.1.1:1");
  EXPECT_EQ(c.sim.info(2).address, "10.1.1.1:1");
  ASSERT_TRUE(c.sim.run_for(30s));
  EXPECT_TRUE(c.toy(2).received.empty());  // peers still send to the old address
  c.peers[2] = "10.1.1.1:1";
  ASSERT_TRUE(c.sim.run_for(30s));
  EXPECT_FALSE(c.toy(2).received.empty());
}

TEST(SimulatorTest, SlowNodeHandlesEventsLate) {
  ToyCluster c(7, 2, 1s);
  c.sim.set_slow(0, 5.0, 50ms);  // packets wait 100..300 ms, timers 0..100 ms
  ASSERT_TRUE(c.sim.run_for(100s));
  auto& slow = c.toy(0);
  const auto timer_lag = slow.last_timer - (slow.next_deadline() - 1s);
  EXPECT_GE(timer_lag, 0ms);
  EXPECT_LT(timer_lag, 100ms);
  EXPECT_GT(slow.received.size(), 25u);  // half the ticks pick the node itself
  EXPECT_GT(c.toy(1).received.size(), 25u);
  // Packets to the slow node arrive 100..300 ms after they were sent (sent on node 1's tick).
  const auto packet_lag = (slow.last_receive - TimePoint{}) % 1s;
  EXPECT_GE(packet_lag, 100ms);
  EXPECT_LT(packet_lag, 302ms);
}

TEST(SimulatorTest, InvariantViolationStopsTheRun) {
  ToyCluster c(8, 3);
  c.sim.add_invariant([&]() -> std::optional<std::string> {
    if (c.sim.is_up(0) && c.toy(0).received.size() >= 5) return "node 0 heard five hellos";
    return std::nullopt;
  });
  EXPECT_FALSE(c.sim.run_for(1h));
  ASSERT_TRUE(c.sim.violation().has_value());
  EXPECT_EQ(*c.sim.violation(), "node 0 heard five hellos");
  EXPECT_LT(c.sim.now(), TimePoint{} + 2h);
  EXPECT_EQ(c.toy(0).received.size(), 5u);
}

TEST(SimulatorTest, RunUntilConditionPollsVirtualTime) {
  ToyCluster c(9, 3);
  const TimePoint start = c.sim.now();
  EXPECT_TRUE(
      c.sim.run_until_condition([&] { return c.toy(1).received.size() >= 10; }, start + 1h, 500ms));
  EXPECT_LT(c.sim.now(), start + 1min);
  EXPECT_FALSE(c.sim.run_until_condition([] { return false; }, c.sim.now() + 5s));
}

}  // namespace
}  // namespace elastic::sim
