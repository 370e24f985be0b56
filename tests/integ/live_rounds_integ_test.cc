// The job supervisor's live rounds (job_supervisor.h, "Live rounds") with the real Spawner and
// real workers that speak the worker channel (channel_worker: hello(live), then "joined" for
// every round it is offered, printing each). Checked from outside the supervisor: its reports
// (round_ack and its live flag, workers_stopped), its worker rows (pids kept or new) and the
// workers' logs (the round each was told, and the log moved to the new round's file).
// Cases: a new round is offered to running live workers instead of restarting them; a crashed
// rank's replacement starts cold beside the kept one; an offer not joined in time falls back to
// a restart; plain commands (no hello) keep the stop-and-restart path; only the grow the workers
// were held for, with none of them failed, is offered as intact; hang detection from the
// workers' "alive" blames only the rank at fault (silent, or stuck in its own work), not the one
// waiting for it, until the whole group waited twice the timeout.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "daemon/node/job_supervisor.h"
#include "daemon/spawner/spawner.h"
#include "tests/support/process.h"
#include "tests/support/result_assertions.h"
#include "tests/support/supervisor_harness.h"
#include "tests/support/temp_dir.h"

namespace elastic::node {
namespace {

using namespace std::chrono_literals;
using rendezvous::RankAssignment;
using rendezvous::RoundReason;
using testing::contains;
using testing::now;
using testing::read_file;
using testing::TempDir;

constexpr const char* kSelf = "me";

class LiveRoundsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.node.name = kSelf;
    config_.node.state_dir = dir_ / "state";
    config_.control.socket = dir_ / "elasticd.sock";
    config_.spawner.stop_grace = 30s;
  }
  void TearDown() override {
    if (supervisor_) supervisor_->shutdown(100ms);
    supervisor_.reset();
  }

  void open() {
    spawner::SpawnerConfig sc;
    sc.stop_grace = config_.spawner.stop_grace;
    sc.state_dir = config_.node.state_dir;
    auto spawner = spawner::Spawner::open(sc);
    ASSERT_OK(spawner);
    current_ = std::make_unique<config::Current>(config_);
    supervisor_ = std::make_unique<JobSupervisor>(kSelf, *current_, std::move(spawner).value(),
                                                  testing::cpu_plan(2), nullptr);
  }

  // Round `round` of `job`: this node holds `slots` ranks from `first_rank` of `world`, after a
  // node "gone" was lost (the reason of a shrink).
  RoundStart round(std::uint64_t round, std::uint32_t slots, std::uint32_t first_rank,
                   std::uint32_t world, std::vector<std::string> command = {
                                            CHANNEL_WORKER_PATH}) const {
    RoundStart s;
    s.term = 3;
    s.round.job_id = "job-1";
    s.round.round = round;
    s.round.expected_prev_round = round - 1;
    s.round.ranks = {RankAssignment{kSelf, 1, slots, first_rank}};
    if (first_rank > 0) s.round.ranks.insert(s.round.ranks.begin(), {"a", 1, first_rank, 0});
    if (world > first_rank + slots) {
      s.round.ranks.push_back({"b", 1, world - first_rank - slots, first_rank + slots});
    }
    s.round.store_endpoint = "10.0.0.1:" + std::to_string(29500 + round);
    s.round.reason = round == 1 ? RoundReason::kSubmitted : RoundReason::kMemberLost;
    s.spec.name = "job";
    s.spec.command = std::move(command);
    s.spec.uid = ::getuid();
    s.spec.gid = ::getgid();
    s.spec.working_dir = dir_.path();
    return s;
  }

  // Pumps the supervisor until `done` holds or `timeout` passes, collecting its reports.
  bool pump_until(const std::function<bool()>& done, std::chrono::milliseconds timeout = 20s) {
    return testing::pump_until(
        *supervisor_,
        [&] {
          for (RoundReport& r : supervisor_->take_reports()) reports_.push_back(std::move(r));
          return done();
        },
        timeout);
  }

  std::size_t count(ReportKind kind, std::uint64_t round, bool live = false) const {
    return std::count_if(reports_.begin(), reports_.end(), [&](const RoundReport& r) {
      return r.kind == kind && r.round == round && (!live || r.live);
    });
  }
  // Pids of the running workers of `round`.
  std::set<int> pids(std::uint64_t round) const {
    std::set<int> found;
    for (const WorkerRow& row : supervisor_->workers()) {
      if (row.round == round && row.state == "running") found.insert(row.pid);
    }
    return found;
  }
  std::string log(std::uint64_t round, std::uint32_t rank) const {
    const std::string path = supervisor_->logs().rank_path("job-1", round, rank);
    return std::filesystem::exists(path) ? read_file(path) : "";
  }
  // Round 2 growing the job to 3 ranks, held until its joiner is ready (RoundStart::hold_live).
  RoundStart held_grow() const {
    RoundStart grow = round(2, 2, 0, 3);
    grow.round.reason = RoundReason::kGrow;
    grow.hold_live = true;
    return grow;
  }
  // Starts round 1 with two live workers and waits until both said hello (the live ack).
  void start_live() {
    ASSERT_NO_FATAL_FAILURE(open());
    supervisor_->on_round(now(), round(1, 2, 0, 2));
    ASSERT_TRUE(pump_until([&] { return count(ReportKind::kRoundAck, 1, true) == 1; }))
        << log(1, 0) << log(1, 1);
    ASSERT_EQ(pids(1).size(), 2u);
  }

  TempDir dir_;
  config::DaemonConfig config_;
  std::unique_ptr<config::Current> current_;
  std::unique_ptr<JobSupervisor> supervisor_;
  std::vector<RoundReport> reports_;
};

TEST_F(LiveRoundsTest, RunningLiveWorkersAreOfferedTheNextRoundAndKeepTheirProcesses) {
  ASSERT_NO_FATAL_FAILURE(start_live());
  const std::set<int> before = pids(1);
  // Node "a" is lost and this node's ranks move to 1-2 of 3: no stop, an offer.
  EXPECT_FALSE(supervisor_->on_round(now(), round(2, 2, 1, 3)));
  ASSERT_TRUE(pump_until([&] { return count(ReportKind::kRoundAck, 2, true) == 1; }))
      << log(2, 1) << log(2, 2);
  EXPECT_EQ(pids(2), before) << "the workers were restarted instead of re-formed";
  EXPECT_EQ(supervisor_->live_reforms(), 2u);
  EXPECT_EQ(count(ReportKind::kWorkersStopped, 1), 1u) << "round 1's workers left it";
  // Each was told its new rank (in the order of the old ones) and the new store; its output
  // moved to the new round's log.
  ASSERT_TRUE(pump_until([&] {
    return contains(log(2, 1), "round 2 term 3 rank 1 of 3 local 0/2 group 1 store 10.0.0.1:29502") &&
           contains(log(2, 2), "round 2 term 3 rank 2 of 3 local 1/2 group 1 store 10.0.0.1:29502");
  })) << log(2, 1) << log(2, 2);
  EXPECT_TRUE(contains(log(1, 0), "now runs job-1 rank 1")) << log(1, 0);
  EXPECT_FALSE(contains(log(1, 0), "round 2 term 3")) << log(1, 0);
  // A node was lost: the old group is not whole, so the workers abort it.
  EXPECT_FALSE(contains(log(2, 1) + log(2, 2), "intact")) << log(2, 1) << log(2, 2);
  // A later round again: still the same processes.
  EXPECT_FALSE(supervisor_->on_round(now(), round(3, 2, 0, 2)));
  ASSERT_TRUE(pump_until([&] { return count(ReportKind::kRoundAck, 3, true) == 1; }));
  EXPECT_EQ(pids(3), before);
}

TEST_F(LiveRoundsTest, AHeldGrowKeepsTheWorkersInTheirRoundUntilReleased) {
  ASSERT_NO_FATAL_FAILURE(start_live());
  const std::set<int> before = pids(1);
  RoundStart grow = held_grow();
  EXPECT_FALSE(supervisor_->on_round(now(), grow));
  EXPECT_FALSE(supervisor_->on_round(now(), grow));  // the leader's resend changes nothing
  // Nothing is offered: they stay in round 1.
  EXPECT_FALSE(pump_until([&] { return !pids(2).empty() || supervisor_->live_reforms() > 0; },
                          300ms));
  EXPECT_EQ(pids(1), before);
  EXPECT_FALSE(contains(log(1, 0) + log(1, 1), "round 2 term 3"));
  // The joiner is ready: the same round without the hold is offered.
  grow.hold_live = false;
  EXPECT_FALSE(supervisor_->on_round(now(), grow));
  ASSERT_TRUE(pump_until([&] { return count(ReportKind::kRoundAck, 2, true) == 1; }));
  EXPECT_EQ(pids(2), before);
  // Their group is whole and goes on: the offer says so, and they switch at a step boundary.
  ASSERT_TRUE(pump_until([&] {
    return contains(log(2, 0), "round 2 term 3 rank 0 of 3") &&
           contains(log(2, 1), "round 2 term 3 rank 1 of 3");
  })) << log(2, 0)
      << log(2, 1);
  EXPECT_TRUE(contains(log(2, 0), " intact\n")) << log(2, 0);
  EXPECT_TRUE(contains(log(2, 1), " intact\n")) << log(2, 1);
}

// A worker here that failed during the hold broke the group: the grow is offered to the one
// left, but not as intact (it must abort the group, not wait for a step boundary).
TEST_F(LiveRoundsTest, AHeldGrowAfterALocalFailureIsNotIntact) {
  ASSERT_NO_FATAL_FAILURE(start_live());
  RoundStart grow = held_grow();
  EXPECT_FALSE(supervisor_->on_round(now(), grow));
  std::vector<WorkerRow> rows = supervisor_->workers();
  ASSERT_EQ(rows.size(), 2u);
  const WorkerRow crashed = rows[0].rank == 0 ? rows[1] : rows[0];
  ASSERT_EQ(::kill(crashed.pid, SIGKILL), 0);
  ASSERT_TRUE(pump_until([&] { return count(ReportKind::kWorkerFailed, 1) >= 1; }));
  grow.hold_live = false;
  EXPECT_FALSE(supervisor_->on_round(now(), grow));
  ASSERT_TRUE(pump_until([&] { return contains(log(2, 0), "round 2 term 3 rank 0 of 3"); }))
      << log(2, 0);
  EXPECT_FALSE(contains(log(2, 0), "intact")) << log(2, 0);
}

// A grow round the workers were held for never trained without them: the round that replaces it
// (its joiner was lost) is offered to them, not restarted from the checkpoint.
TEST_F(LiveRoundsTest, TheRoundAfterAHeldGrowIsOfferedToo) {
  ASSERT_NO_FATAL_FAILURE(start_live());
  const std::set<int> before = pids(1);
  EXPECT_FALSE(supervisor_->on_round(now(), held_grow()));
  EXPECT_EQ(supervisor_->held_round("job-1"), 2u);
  RoundStart shrink = round(3, 2, 0, 2);  // follows round 2
  EXPECT_FALSE(supervisor_->on_round(now(), shrink));
  ASSERT_TRUE(pump_until([&] { return count(ReportKind::kRoundAck, 3, true) == 1; }));
  EXPECT_EQ(pids(3), before);
  EXPECT_EQ(supervisor_->held_round("job-1"), 0u);
  // Not the grow they were held for: whatever replaced it may follow a failure.
  ASSERT_TRUE(pump_until([&] { return contains(log(3, 0), "round 3 term 3 rank 0 of 2"); }))
      << log(3, 0);
  EXPECT_FALSE(contains(log(3, 0) + log(3, 1), "intact")) << log(3, 0) << log(3, 1);
}

TEST_F(LiveRoundsTest, AHoldMeansNothingToWorkersThatStartCold) {
  ASSERT_NO_FATAL_FAILURE(open());
  RoundStart grow = round(1, 2, 0, 3);
  grow.round.reason = RoundReason::kGrow;
  grow.hold_live = true;
  EXPECT_TRUE(supervisor_->on_round(now(), grow));
  EXPECT_EQ(pids(1).size(), 2u);
}

TEST_F(LiveRoundsTest, ACrashedRanksReplacementStartsColdBesideTheKeptOne) {
  ASSERT_NO_FATAL_FAILURE(start_live());
  std::vector<WorkerRow> rows = supervisor_->workers();
  ASSERT_EQ(rows.size(), 2u);
  const WorkerRow crashed = rows[0].rank == 0 ? rows[0] : rows[1];
  const WorkerRow kept = rows[0].rank == 0 ? rows[1] : rows[0];
  ASSERT_EQ(::kill(crashed.pid, SIGKILL), 0);
  ASSERT_TRUE(pump_until([&] { return count(ReportKind::kWorkerFailed, 1) >= 1; }));
  EXPECT_FALSE(supervisor_->on_round(now(), round(2, 2, 0, 2)));
  // The kept worker takes local rank 0 (it held the lowest rank of those left); the cold one
  // starts as rank 1 and says hello; the ack waits for the kept one's "joined".
  ASSERT_TRUE(pump_until([&] { return count(ReportKind::kRoundAck, 2, true) == 1; }))
      << log(2, 0) << log(2, 1);
  const std::set<int> now_running = pids(2);
  ASSERT_EQ(now_running.size(), 2u);
  EXPECT_TRUE(now_running.contains(kept.pid));
  EXPECT_FALSE(now_running.contains(crashed.pid));
  EXPECT_TRUE(pump_until([&] { return contains(log(2, 0), "round 2 term 3 rank 0 of 2"); }))
      << log(2, 0);
  EXPECT_TRUE(pump_until([&] { return contains(log(2, 1), "said hello"); })) << log(2, 1);
}

TEST_F(LiveRoundsTest, AnOfferNotJoinedInTimeFallsBackToARestart) {
  config_.rendezvous.reform_timeout = 300ms;
  ASSERT_NO_FATAL_FAILURE(start_live());
  const std::set<int> before = pids(1);
  // A stopped worker cannot answer.
  const int stuck = *before.begin();
  ASSERT_EQ(::kill(stuck, SIGSTOP), 0);
  EXPECT_FALSE(supervisor_->on_round(now(), round(2, 2, 0, 2)));
  ASSERT_TRUE(pump_until([&] { return supervisor_->live_fallbacks() == 1; }));
  // Both are restarted the old way; the new ones are acknowledged like any cold round.
  ASSERT_TRUE(pump_until([&] { return count(ReportKind::kRoundAck, 2) >= 1 && pids(2).size() == 2; }));
  for (const int pid : before) EXPECT_FALSE(pids(2).contains(pid));
  EXPECT_EQ(count(ReportKind::kWorkerFailed, 2), 0u) << "a fallback is no worker failure";
}

TEST_F(LiveRoundsTest, WorkersThatMissedARoundStartAgainFromTheCheckpoint) {
  ASSERT_NO_FATAL_FAILURE(start_live());
  const std::set<int> before = pids(1);
  // Round 3 follows round 2, which trained without this node's workers (still in round 1).
  RoundStart later = round(3, 2, 0, 2);
  later.round.expected_prev_round = 2;
  supervisor_->on_round(now(), later);
  ASSERT_TRUE(pump_until([&] { return pids(3).size() == 2 && count(ReportKind::kRoundAck, 3) >= 1; }));
  for (const int pid : before) EXPECT_FALSE(pids(3).contains(pid));
  EXPECT_EQ(supervisor_->live_reforms(), 0u);
}

TEST_F(LiveRoundsTest, PlainCommandsKeepTheStopAndRestartPath) {
  ASSERT_NO_FATAL_FAILURE(open());
  const std::vector<std::string> plain = {"/bin/sh", "-c", "exec sleep 1000"};
  EXPECT_TRUE(supervisor_->on_round(now(), round(1, 2, 0, 2, plain)));
  ASSERT_TRUE(pump_until([&] { return pids(1).size() == 2; }));
  const std::set<int> before = pids(1);
  supervisor_->on_round(now(), round(2, 2, 0, 2, plain));
  ASSERT_TRUE(pump_until([&] { return pids(2).size() == 2 && count(ReportKind::kRoundAck, 2) == 1; }));
  for (const int pid : before) EXPECT_FALSE(pids(2).contains(pid));
  EXPECT_EQ(count(ReportKind::kRoundAck, 1, true) + count(ReportKind::kRoundAck, 2, true), 0u)
      << "a worker that never said hello(live) is not reported live";
  EXPECT_EQ(supervisor_->live_reforms(), 0u);
}

class HangTest : public LiveRoundsTest {
 protected:
  // Starts two workers playing `modes` with a 1 s hang_timeout (shorter than a job may set: the
  // supervisor takes what the spec says) and pumps until the first worker_failed report.
  std::optional<RoundReport> run_until_failed(const std::string& modes,
                                              std::chrono::milliseconds within = 15s) {
    open();
    RoundStart start = round(1, 2, 0, 2);
    start.spec.env["CHANNEL_WORKER_ALIVE"] = modes;
    start.spec.hang_timeout = 1s;
    supervisor_->on_round(now(), start);
    pump_until([&] { return count(ReportKind::kWorkerFailed, 1) > 0; }, within);
    for (const RoundReport& r : reports_) {
      if (r.kind == ReportKind::kWorkerFailed) return r;
    }
    return std::nullopt;
  }
};

TEST_F(HangTest, ASilentRankIsBlamedNotThePeerWaitingForIt) {
  const auto failed = run_until_failed("wait,silent");
  ASSERT_TRUE(failed.has_value()) << log(1, 0) << log(1, 1);
  EXPECT_EQ(failed->rank, 1u);
  EXPECT_NE(failed->detail.find("rank 1 on node me is hung (hang_timeout 1s)"), std::string::npos)
      << failed->detail;
  EXPECT_NE(failed->detail.find("answered nothing"), std::string::npos) << failed->detail;
  EXPECT_EQ(failed->detail.find("more rank"), std::string::npos) << failed->detail;
  // Rank 1 is ended (SIGABRT), rank 0 keeps running.
  ASSERT_TRUE(pump_until([&] { return log(1, 1).find("SIGABRT") != std::string::npos; }));
  EXPECT_EQ(log(1, 0).find("SIGABRT"), std::string::npos) << log(1, 0);
  EXPECT_EQ(supervisor_->hung_workers(), 1u);
  bool rank0_running = false;
  for (const WorkerRow& row : supervisor_->workers()) {
    rank0_running |= row.rank == 0 && row.state == "running";
  }
  EXPECT_TRUE(rank0_running);
}

TEST_F(HangTest, ARankStuckInItsOwnWorkIsBlamed) {
  const auto failed = run_until_failed("wait,busy");
  ASSERT_TRUE(failed.has_value()) << log(1, 0) << log(1, 1);
  EXPECT_EQ(failed->rank, 1u);
  EXPECT_NE(failed->detail.find("stuck in its own work"), std::string::npos) << failed->detail;
}

TEST_F(HangTest, WhenEveryRankWaitsAllAreBlamedAfterTwiceTheTimeout) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto failed = run_until_failed("wait,wait");
  ASSERT_TRUE(failed.has_value()) << log(1, 0) << log(1, 1);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 2s);
  EXPECT_NE(failed->detail.find("every rank of the group"), std::string::npos) << failed->detail;
}

TEST_F(HangTest, HealthyStepsAreNeverBlamed) {
  const auto failed = run_until_failed("step,step", 5s);
  // The pump gave up at its deadline (five timeouts) without a failure.
  EXPECT_FALSE(failed.has_value()) << failed->detail;
  EXPECT_EQ(supervisor_->hung_workers(), 0u);
}

}  // namespace
}  // namespace elastic::node
