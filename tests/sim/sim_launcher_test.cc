// SimLauncher's trainer model and worker channel (tests/sim/sim_launcher.h), driven directly: the
// test plays the daemon over the real sockets with the production WorkerEndpoint and WorkerLink
// (daemon/worker_channel/), on two launchers (two simulated nodes) that share one SimGroups.
// Covered: hello at start, a group forming only once every rank arrived, offers abandoning the
// group at once and joined{round, term} once the offered round's group formed (same worker id),
// the node woken for bytes either side wrote, stale offers ignored, unanswered offers and lost
// peers ending in exit 69, stop ending in exit 75, plain channel workers never speaking, and the
// keep_old_group bug keeping a worker in two groups. Virtual time; nothing sleeps.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "daemon/worker_channel/endpoint.h"
#include "daemon/worker_channel/worker_link.h"
#include "tests/sim/sim_groups.h"
#include "tests/sim/sim_launcher.h"
#include "tests/sim/simulator.h"

namespace elastic::sim {
namespace {

using namespace std::chrono_literals;
using worker_channel::ChannelInput;
using worker_channel::LinkState;

// A node that does nothing: SimGroups reschedules the nodes of a group's members.
class Idle final : public SimProcess {
 public:
  void start(SimContext&) override {}
  void on_packet(SimContext&, const Packet&) override {}
  void on_timer(SimContext&) override {}
  TimePoint next_deadline() const override { return kNever; }
};

struct Event {
  std::string what;  // "spawn", "exit", "offer", "reform", "train", "untrain"
  spawner::WorkerId id = 0;
  std::uint64_t round = 0;
  std::uint32_t rank = 0;
  int status = 0;
};

class Recorder final : public SimWorkerObserver {
 public:
  void on_spawn(const SimWorker& w) override { events.push_back({"spawn", w.id, w.round, w.rank}); }
  void on_exit(const SimWorker& w, const spawner::WorkerExit& exit) override {
    events.push_back({"exit", w.id, w.round, w.rank, exit.status});
  }
  void on_offer(const SimWorker& w, const worker_channel::RoundOffer& offer) override {
    events.push_back({"offer", w.id, offer.round, offer.rank});
  }
  void on_reform(const SimWorker& w, std::uint64_t old_round) override {
    events.push_back({"reform", w.id, w.round, w.rank, static_cast<int>(old_round)});
  }
  void on_training(const SimWorker& w, const SimSeat& seat, bool training) override {
    events.push_back({training ? "train" : "untrain", w.id, seat.round, seat.rank});
  }
  // The events of `what` so far, as "id:round" strings.
  std::vector<std::string> of(const std::string& what) const {
    std::vector<std::string> out;
    for (const Event& e : events) {
      if (e.what == what) out.push_back(std::to_string(e.id) + ":" + std::to_string(e.round));
    }
    return out;
  }
  std::vector<Event> events;
};

// The daemon's side of one worker: its endpoint and link, as the supervisor keeps them.
struct DaemonSide {
  std::unique_ptr<worker_channel::WorkerEndpoint> endpoint;
  worker_channel::WorkerLink link{TimePoint{}};
  // Reads what the worker wrote into the link; returns the inputs.
  std::vector<ChannelInput> read(TimePoint now) {
    std::vector<ChannelInput> inputs = endpoint->read();
    for (const ChannelInput& input : inputs) {
      if (input.kind == ChannelInput::Kind::kMessage) (void)link.on_message(now, input.message);
      if (input.kind == ChannelInput::Kind::kClosed) (void)link.on_closed(now);
    }
    return inputs;
  }
};

class SimLauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 2; ++i)
      sim.add_node("n" + std::to_string(i),
                   [](const NodeInfo&) { return std::make_unique<Idle>(); });
    options.groups = &groups;
    options.live_workers = 1;
    options.job_runtime = Duration::zero();
    options.reform_min = 50ms;
    options.reform_max = 300ms;
    options.reform_timeout = 10s;
  }
  void make_launchers() {
    for (NodeId n = 0; n < 2; ++n) {
      launchers.push_back(std::make_unique<SimLauncher>(n, 1, options, &recorder, sim, 7 + n));
    }
  }
  spawner::WorkerSpec spec(std::uint64_t round, std::uint32_t rank, std::uint32_t world,
                           bool channel = true) {
    spawner::WorkerSpec s;
    s.label = "j rank " + std::to_string(rank);
    s.env = {{"ELASTIC_JOB_ID", "j"},
             {"ELASTIC_ROUND", std::to_string(round)},
             {"ELASTIC_NODE", "d" + std::to_string(rank)},
             {"ELASTIC_SLOT", "0"},
             {"RANK", std::to_string(rank)},
             {"LOCAL_RANK", "0"},
             {"WORLD_SIZE", std::to_string(world)}};
    s.channel = channel;
    return s;
  }
  // Starts rank `rank` of round `round` (world `world`) on launcher `rank`.
  DaemonSide start(std::uint32_t rank, std::uint64_t round, std::uint32_t world,
                   spawner::WorkerId* id) {
    auto spawned = launchers[rank]->start(sim.now(), spec(round, rank, world));
    EXPECT_TRUE(spawned.ok());
    *id = spawned->id;
    DaemonSide side;
    side.endpoint = std::make_unique<worker_channel::WorkerEndpoint>(
        "j rank " + std::to_string(rank), std::move(spawned->channel));
    return side;
  }
  worker_channel::RoundOffer offer(std::uint64_t round, std::uint32_t rank, std::uint32_t world) {
    worker_channel::RoundOffer o;
    o.job = "j";
    o.round = round;
    o.term = 3;
    o.rank = rank;
    o.world_size = world;
    o.master_addr = "d0";
    o.master_port = 29500;
    return o;
  }
  void send_offer(DaemonSide& side, const worker_channel::RoundOffer& o) {
    const auto step = side.link.offer(sim.now(), o, 60s);
    ASSERT_TRUE(step.send.has_value());
    ASSERT_TRUE(side.endpoint->send(*step.send).ok());
  }
  // Runs both launchers' process() at `at`.
  std::vector<spawner::WorkerExit> process_at(TimePoint at) {
    sim.run_until(at);
    std::vector<spawner::WorkerExit> exits;
    for (auto& l : launchers) l->process(sim.now(), &exits);
    return exits;
  }

  Simulator sim{42};
  SimGroups groups{sim};
  Recorder recorder;
  SimLauncherOptions options;
  std::vector<std::unique_ptr<SimLauncher>> launchers;
};

TEST_F(SimLauncherTest, LiveWorkersReformInPlaceOnceEveryRankArrived) {
  make_launchers();
  spawner::WorkerId a = 0, b = 0;
  DaemonSide da = start(0, 1, 2, &a);
  EXPECT_TRUE(recorder.of("train").empty()) << "a group of one rank out of two trained";
  DaemonSide db = start(1, 1, 2, &b);
  EXPECT_EQ(recorder.of("train"), (std::vector<std::string>{"1:1", "1:1"}));
  // Each said hello(live); the node is woken for it.
  EXPECT_LE(launchers[0]->next_deadline(), sim.now());
  da.read(sim.now());
  db.read(sim.now());
  EXPECT_EQ(da.link.state(), LinkState::kReady);
  EXPECT_EQ(db.link.state(), LinkState::kReady);
  (void)process_at(sim.now() + 1s);
  EXPECT_EQ(launchers[0]->next_deadline(), kNever) << "nothing to do, nothing to wake for";

  // Round 2 is offered to rank 0 only: the daemon's bytes wake its node, the worker abandons
  // round 1's group at once, and waits in round 2 alone.
  send_offer(da, offer(2, 0, 2));
  EXPECT_EQ(launchers[0]->next_deadline(), sim.now());
  (void)process_at(sim.now());
  EXPECT_EQ(recorder.of("offer"), (std::vector<std::string>{"1:2"}));
  EXPECT_EQ(recorder.of("untrain"), (std::vector<std::string>{"1:1"}));
  const TimePoint arrive = launchers[0]->next_deadline();
  EXPECT_GE(arrive, sim.now() + options.reform_min);
  EXPECT_LE(arrive, sim.now() + options.reform_max);
  (void)process_at(arrive);
  EXPECT_EQ(recorder.of("reform"), std::vector<std::string>{}) << "formed without rank 1";
  da.read(sim.now());
  EXPECT_EQ(da.link.state(), LinkState::kOffered);

  // A repeated or older offer changes nothing.
  send_offer(db, offer(1, 1, 2));
  (void)process_at(sim.now());
  EXPECT_EQ(recorder.of("offer").size(), 1u);
  EXPECT_EQ(recorder.of("untrain").size(), 1u);

  // Rank 1 is offered round 2 too; once it arrives the group forms and both say joined.
  send_offer(db, offer(2, 1, 2));
  (void)process_at(sim.now());
  EXPECT_EQ(recorder.of("untrain"), (std::vector<std::string>{"1:1", "1:1"}));
  (void)process_at(launchers[1]->next_deadline());
  EXPECT_EQ(recorder.of("reform"), (std::vector<std::string>{"1:2", "1:2"}));
  EXPECT_EQ(recorder.of("train"), (std::vector<std::string>{"1:1", "1:1", "1:2", "1:2"}));
  da.read(sim.now());
  db.read(sim.now());
  EXPECT_EQ(da.link.state(), LinkState::kJoined);
  EXPECT_EQ(db.link.state(), LinkState::kJoined);
  ASSERT_TRUE(db.link.joined().has_value());
  EXPECT_EQ(db.link.joined()->round, 2u);
  EXPECT_EQ(db.link.joined()->term, 3u);
  // The same processes go on: no exit, same ids.
  EXPECT_TRUE(recorder.of("exit").empty());
  EXPECT_EQ(a, 1u);
  EXPECT_EQ(b, 1u);
  EXPECT_EQ(groups.formed(), 2u);
}

TEST_F(SimLauncherTest, UnansweredOfferEndsInExit69AtTheReformTimeout) {
  make_launchers();
  spawner::WorkerId a = 0, b = 0;
  DaemonSide da = start(0, 1, 2, &a);
  DaemonSide db = start(1, 1, 2, &b);
  da.read(sim.now());
  send_offer(da, offer(2, 0, 2));
  const TimePoint offered = sim.now();
  (void)process_at(offered);
  (void)process_at(launchers[0]->next_deadline());  // arrived in round 2, alone
  EXPECT_EQ(launchers[0]->next_deadline(), offered + options.reform_timeout);
  const auto exits = process_at(offered + options.reform_timeout);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].id, a);
  EXPECT_FALSE(exits[0].signaled);
  EXPECT_EQ(exits[0].status, 69);
  // Its end closed with it: the daemon reads end of file.
  da.read(sim.now());
  EXPECT_EQ(da.link.state(), LinkState::kGone);
}

TEST_F(SimLauncherTest, StopEndsInExit75AfterTheTermExit) {
  make_launchers();
  spawner::WorkerId a = 0;
  DaemonSide da = start(0, 1, 1, &a);
  da.read(sim.now());
  const auto step = da.link.stop(sim.now(), "the job was cancelled");
  ASSERT_TRUE(step.send.has_value());
  ASSERT_TRUE(da.endpoint->send(*step.send).ok());
  const TimePoint sent = sim.now();
  EXPECT_TRUE(process_at(sent).empty());
  EXPECT_EQ(launchers[0]->next_deadline(), sent + options.term_exit);
  const auto exits = process_at(sent + options.term_exit);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].status, 75);
  EXPECT_EQ(recorder.of("untrain"), (std::vector<std::string>{"1:1"}));
}

TEST_F(SimLauncherTest, LostPeerStopsALiveWorkerAndEndsAPlainOne) {
  options.live_workers = 0;
  launchers.push_back(std::make_unique<SimLauncher>(0, 1, options, &recorder, sim, 1));
  options.live_workers = 1;
  launchers.push_back(std::make_unique<SimLauncher>(1, 1, options, &recorder, sim, 2));
  spawner::WorkerId plain = 0, live = 0;
  DaemonSide dp = start(0, 1, 2, &plain);
  DaemonSide dl = start(1, 1, 2, &live);
  // A plain command never speaks: its link stays unknown.
  dp.read(sim.now());
  dl.read(sim.now());
  EXPECT_EQ(dp.link.state(), LinkState::kUnknown);
  EXPECT_EQ(dl.link.state(), LinkState::kReady);
  const TimePoint lost = sim.now() + 200ms;
  EXPECT_TRUE(launchers[0]->lose_peer(plain, 1, lost));
  EXPECT_TRUE(launchers[1]->lose_peer(live, 1, lost));
  auto exits = process_at(lost);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].id, plain);
  EXPECT_EQ(exits[0].status, 69);
  // The live one left the group and waits for an offer, then gives up.
  EXPECT_EQ(recorder.of("untrain"), (std::vector<std::string>{"1:1", "1:1"}));
  EXPECT_EQ(launchers[1]->next_deadline(), lost + options.reform_timeout);
  exits = process_at(lost + options.reform_timeout);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].status, 69);
}

TEST_F(SimLauncherTest, SpawnGivesNoChannelAndKillLeavesTheGroupAtOnce) {
  make_launchers();
  auto spawned = launchers[0]->spawn(sim.now(), spec(1, 0, 1));
  ASSERT_TRUE(spawned.ok());
  EXPECT_EQ(recorder.of("train"), (std::vector<std::string>{"1:1"}));
  launchers[0]->kill(*spawned);
  EXPECT_EQ(recorder.of("untrain"), (std::vector<std::string>{"1:1"}));
  const auto exits = process_at(sim.now());
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_TRUE(exits[0].signaled);
}

TEST_F(SimLauncherTest, KeepOldGroupBugStaysInBothGroups) {
  options.keep_old_group = true;
  make_launchers();
  spawner::WorkerId a = 0, b = 0;
  DaemonSide da = start(0, 1, 2, &a);
  DaemonSide db = start(1, 1, 2, &b);
  da.read(sim.now());
  db.read(sim.now());
  send_offer(da, offer(2, 0, 2));
  send_offer(db, offer(2, 1, 2));
  (void)process_at(sim.now());
  EXPECT_TRUE(recorder.of("untrain").empty()) << "the buggy trainer left its old group";
  (void)process_at(sim.now() + options.reform_max);
  EXPECT_EQ(recorder.of("train"), (std::vector<std::string>{"1:1", "1:1", "1:2", "1:2"}));
  EXPECT_TRUE(recorder.of("untrain").empty());
}

}  // namespace
}  // namespace elastic::sim
