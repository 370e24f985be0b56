// The leader's scheduling glue (daemon/node/scheduling.h) and its samples/s window
// (daemon/node/throughput.h): what a job record gives the scheduler, the rounds a preemption or
// throughput scaling opens, the SetScale a measurement becomes, and how a window is measured.
// Pure functions and values: manual time, no clock.
#include "daemon/node/scheduling.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "daemon/node/throughput.h"

namespace elastic::node {
namespace {

using namespace std::chrono_literals;
using rendezvous::JobRecord;
using rendezvous::JobState;
using rendezvous::RankAssignment;
using rendezvous::RoundReason;
using rendezvous::ScaleMode;
using rendezvous::ScaleState;

constexpr TimePoint kStart = TimePoint{} + 1000s;

JobRecord running_job(std::vector<std::string> nodes, std::uint32_t min, std::uint32_t max) {
  JobRecord job;
  job.id = "t-1";
  job.state = JobState::kRunning;
  job.round = 4;
  job.spec.min_nodes = min;
  job.spec.max_nodes = max;
  std::uint32_t next = 0;
  for (std::string& n : nodes) {
    job.ranks.push_back(RankAssignment{std::move(n), 1, 2, next});
    next += 2;
  }
  job.store_endpoint = "10.0.0.1:29500";
  return job;
}

TEST(SchedulingGlue, ThroughputJobsAreCappedAtTheirCommittedSize) {
  JobRecord job = running_job({"a", "b"}, 1, 4);
  EXPECT_EQ(sched_job(job, nullptr).size_cap, 0u) << "a fixed job has no cap";
  job.spec.scale = ScaleMode::kThroughput;
  EXPECT_EQ(sched_job(job, nullptr).size_cap, 1u) << "before its first step: min_nodes";
  job.scale.size = 3;
  EXPECT_EQ(sched_job(job, nullptr).size_cap, 3u);
  job.state = JobState::kPending;
  job.ranks.clear();
  EXPECT_EQ(sched_job(job, nullptr).size_cap, 3u) << "a requeued job keeps its size";
}

TEST(SchedulingGlue, AScaleDownKeepsAPrefixWithoutARestart) {
  const JobRecord job = running_job({"a", "b", "c"}, 1, 4);
  const rendezvous::Decision d = scale_down_decision(job, 2, 29511, "throughput scaling");
  EXPECT_EQ(d.kind, rendezvous::Decision::Kind::kOpenRound);
  EXPECT_EQ(d.reason, RoundReason::kScaled);
  ASSERT_EQ(d.ranks.size(), 2u);
  EXPECT_EQ(d.ranks[0].node, "a");
  EXPECT_EQ(d.ranks[1].node, "b");
  EXPECT_EQ(d.ranks[1].first_rank, 2u);
  EXPECT_EQ(d.store_endpoint, "10.0.0.1:29511");
  EXPECT_EQ(d.detail, "throughput scaling");
}

TEST(SchedulingGlueDeathTest, AScaleDownThatShrinksNothingAborts) {
  const JobRecord job = running_job({"a", "b"}, 1, 4);
  EXPECT_DEATH((void)scale_down_decision(job, 2, 29511, ""), "shrinks nothing");
}

TEST(SchedulingGlue, AMeasurementBecomesASetScaleForTheCurrentRound) {
  JobRecord job = running_job({"a"}, 1, 3);
  job.spec.scale = ScaleMode::kThroughput;
  job.spec.scale_min_gain = 0.2;
  const rendezvous::WallTime at{std::chrono::milliseconds(5000)};
  // First pass: the size becomes min_nodes.
  auto step = scale_command(job, std::nullopt, false, false, at);
  ASSERT_TRUE(step.has_value());
  EXPECT_EQ(step->job_id, "t-1");
  EXPECT_EQ(step->round, 4u);
  EXPECT_EQ(step->state.size, 1u);
  EXPECT_EQ(step->reason, "starting at 1 node (min_nodes)");
  EXPECT_EQ(step->at, at);
  job.scale = step->state;
  // Nothing measured: nothing changes.
  EXPECT_FALSE(scale_command(job, std::nullopt, false, false, at).has_value());
  // A full window at 1 node: try 2.
  step = scale_command(job, 320.0, false, false, at);
  ASSERT_TRUE(step.has_value());
  EXPECT_EQ(step->state.size, 2u);
  EXPECT_EQ(step->state.good, 1u);
  EXPECT_EQ(step->state.rate.at(1), 320.0);
  job.scale = step->state;
  // Measured while still at 1 node (the grow has not happened): not the new size's measure.
  EXPECT_FALSE(scale_command(job, 330.0, false, false, at).has_value());
  // At 2 nodes, +100%: try 3; at 3, +1% against the 20% scale_min_gain: back to 2, settled.
  job.ranks = running_job({"a", "b"}, 1, 3).ranks;
  job.scale = scale_command(job, 640.0, false, false, at)->state;
  EXPECT_EQ(job.scale.size, 3u);
  job.ranks = running_job({"a", "b", "c"}, 1, 3).ranks;
  step = scale_command(job, 646.4, false, false, at);
  ASSERT_TRUE(step.has_value());
  EXPECT_EQ(step->state.size, 2u);
  EXPECT_TRUE(step->state.settled);
  EXPECT_NE(step->reason.find("back to 2 nodes"), std::string::npos) << step->reason;
  job.scale = step->state;
  // Settled: measurements change nothing; a changed cluster tries 3 again.
  EXPECT_FALSE(scale_command(job, 700.0, false, false, at).has_value());
  step = scale_command(job, std::nullopt, false, true, at);
  ASSERT_TRUE(step.has_value());
  EXPECT_EQ(step->state.size, 3u);
  EXPECT_FALSE(step->state.settled);
}

TEST(ThroughputWindowTest, AFullWindowIsTakenOnceAndTheNextStartsWhereItEnded) {
  ThroughputWindow w;
  EXPECT_FALSE(w.take(4, 10s).has_value());
  EXPECT_FALSE(w.rate(4).has_value());
  // Round 4's reports: 320 samples/s, a report every 100 ms.
  for (int i = 0; i <= 100; ++i) w.observe(kStart + i * 100ms, 4, 1000 + 32 * i);
  EXPECT_NEAR(*w.rate(4), 320.0, 1e-9) << "the rate so far, before a full window";
  EXPECT_FALSE(w.take(4, 11s).has_value()) << "10 s of reports is not 11 s";
  EXPECT_FALSE(w.take(3, 10s).has_value()) << "another round";
  const auto full = w.take(4, 10s);
  ASSERT_TRUE(full.has_value());
  EXPECT_NEAR(*full, 320.0, 1e-9);
  EXPECT_FALSE(w.take(4, 10s).has_value()) << "taken once";
  EXPECT_NEAR(*w.rate(4), 320.0, 1e-9) << "the metrics keep the last full window";
  // The next window starts at the last report: twice as fast now.
  for (int i = 1; i <= 100; ++i) w.observe(kStart + 10s + i * 100ms, 4, 4200 + 64 * i);
  EXPECT_NEAR(*w.take(4, 10s), 640.0, 1e-9);
}

TEST(ThroughputWindowTest, ARoundChangeOrACountGoingBackOpensANewWindow) {
  ThroughputWindow w;
  for (int i = 0; i <= 50; ++i) w.observe(kStart + i * 100ms, 4, 32 * i);
  // Round 5: a new window from its first report (the re-formation is not measured).
  w.observe(kStart + 9s, 5, 5000);
  EXPECT_EQ(w.round(), 5u);
  EXPECT_FALSE(w.rate(4).has_value());
  EXPECT_FALSE(w.rate(5).has_value()) << "one report is no rate";
  // A late report of round 4 changes nothing.
  w.observe(kStart + 9100ms, 4, 99999);
  EXPECT_EQ(w.round(), 5u);
  for (int i = 1; i <= 100; ++i) w.observe(kStart + 9s + i * 100ms, 5, 5000 + 10 * i);
  EXPECT_NEAR(*w.take(5, 10s), 100.0, 1e-9);
  // Another process counts from 0 (rank 0 was replaced): a new window, no negative rate.
  w.observe(kStart + 20s, 5, 40);
  EXPECT_FALSE(w.rate(5).has_value());
  w.observe(kStart + 21s, 5, 140);
  EXPECT_NEAR(*w.rate(5), 100.0, 1e-9);
}

TEST(SeriesSamplerTest, OnePointPerIntervalWithTheRateAndTheNewestLoss) {
  SeriesSampler s;
  const rendezvous::WallTime wall{std::chrono::milliseconds(1'700'000'000'000)};
  EXPECT_FALSE(s.take(kStart, wall, 10s).has_value()) << "nothing reported";
  for (int i = 0; i <= 50; ++i) {
    s.observe(kStart + i * 100ms, 4, 640 * i / 10, i == 50 ? std::optional<double>(0.75)
                                                         : std::optional<double>(1.5));
  }
  auto point = s.take(kStart + 5s, wall, 10s);
  ASSERT_TRUE(point.has_value());
  EXPECT_EQ(point->at, wall);
  EXPECT_NEAR(*point->samples_per_s, 640.0, 1e-9);
  EXPECT_EQ(point->loss, 0.75);
  EXPECT_FALSE(s.take(kStart + 6s, wall, 10s).has_value()) << "within the interval";
  // A loss without samples (a script that reports no count): a point with the loss alone.
  s.observe(kStart + 14s, 5, std::nullopt, 0.5);
  point = s.take(kStart + 15s, wall, 10s);
  ASSERT_TRUE(point.has_value());
  EXPECT_FALSE(point->samples_per_s.has_value());
  EXPECT_EQ(point->loss, 0.5);
  EXPECT_FALSE(s.take(kStart + 30s, wall, 10s).has_value()) << "nothing since";
}

}  // namespace
}  // namespace elastic::node
