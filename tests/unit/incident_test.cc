// IncidentLog (daemon/node/incidents.h) with a fake clock: every timeline point, merged and
// out-of-order reports, give-up, grows, the histogram (pure; the trainer's progress client is in
// progress_reporter_test).
#include "daemon/node/incidents.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace elastic::node {
namespace {

using namespace std::chrono_literals;

constexpr std::int64_t kWall0 = 1'700'000'000'000;  // the leader's wall clock at t0
const TimePoint t0 = TimePoint{} + 1000s;

TimePoint at(Duration d) { return t0 + d; }
std::int64_t wall(Duration d) {
  return kWall0 + std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

const std::set<std::string> kMembers{"a", "b", "c"};

void expect_near(const std::optional<double>& value, double expected) {
  ASSERT_TRUE(value.has_value());
  EXPECT_NEAR(*value, expected, 1e-6);
}

TEST(IncidentLog, WorkerFailureTimelineHasEveryPoint) {
  IncidentLog log;
  log.on_progress(at(-5s), "j", 3, "step", 50, -1);
  // b's worker exited 200 ms before the leader heard of it.
  log.on_loss(at(0s), wall(0s), "j", 3, kMembers, "worker_failed", "b", wall(-200ms));
  ASSERT_EQ(log.incidents().size(), 1u);
  const Incident& i = log.incidents().back();
  EXPECT_EQ(i.id, 1u);
  EXPECT_EQ(i.cause, "worker_failed");
  EXPECT_EQ(i.node, "b");
  EXPECT_EQ(i.from_round, 3u);
  EXPECT_EQ(i.to_round, 0u);
  EXPECT_EQ(i.at_ms, wall(-200ms));
  expect_near(i.detected_s, 0.2);
  EXPECT_FALSE(i.stopped_s);
  log.on_workers_stopped(at(100ms), "j", 3, "a");
  log.on_workers_stopped(at(150ms), "j", 3, "b");
  EXPECT_FALSE(i.stopped_s) << "c has not reported yet";
  log.on_workers_stopped(at(300ms), "j", 3, "c");
  expect_near(i.stopped_s, 0.5);
  log.on_round_committed(at(1s), wall(1s), "j", 3, 4, 3, false, kMembers);
  EXPECT_EQ(i.to_round, 4u);
  EXPECT_EQ(i.to_nodes, 3u);
  EXPECT_FALSE(i.rendezvous_s);
  log.on_round_acked(at(2s), "j", 4);
  expect_near(i.rendezvous_s, 2.2);
  log.on_progress(at(2500ms), "j", 4, "checkpoint", 40, -1);  // not a step: no first step
  EXPECT_FALSE(i.first_step_s);
  log.on_progress(at(3s), "j", 4, "step", 41, 40);
  expect_near(i.first_step_s, 3.2);
  ASSERT_TRUE(i.steps_lost);
  EXPECT_EQ(*i.steps_lost, 10);
  EXPECT_EQ(i.resumed_from, 40);
  EXPECT_TRUE(i.complete);
  EXPECT_FALSE(i.given_up);
  EXPECT_EQ(log.stats().count, 1u);
  EXPECT_NEAR(log.stats().sum, 3.2, 1e-6);
  EXPECT_EQ(log.stats().counts[4], 1u);  // (3, 5]
  // By cause: every cause is there (zeros included), the observation under its own.
  const auto& by_cause = log.stats_by_cause();
  ASSERT_EQ(by_cause.size(), 3u);
  EXPECT_EQ(by_cause.at("worker_failed").count, 1u);
  EXPECT_EQ(by_cause.at("worker_failed").counts[4], 1u);
  EXPECT_EQ(by_cause.at("node_lost").count, 0u);
  EXPECT_EQ(by_cause.at("node_left").count, 0u);
  EXPECT_EQ(log.next_deadline(), kNever);
}

TEST(IncidentLog, NodeLossOverridesTheWorkerFailuresItCausedAndKeepsEarlyStops) {
  IncidentLog log;
  // c dies: a's and b's workers crash on the broken connection and are reaped before the job
  // tier declares c lost.
  log.on_workers_stopped(at(-100ms), "j", 7, "a");
  log.on_loss(at(0s), wall(0s), "j", 7, kMembers, "worker_failed", "a", wall(-150ms));
  log.on_workers_stopped(at(50ms), "j", 7, "b");
  const Incident& i = log.incidents().back();
  EXPECT_FALSE(i.stopped_s) << "c's report is due until c is known lost";
  log.on_loss(at(400ms), wall(400ms), "j", 7, kMembers, "node_lost", "c", wall(-300ms));
  ASSERT_EQ(log.incidents().size(), 1u);
  EXPECT_EQ(i.cause, "node_lost");
  EXPECT_EQ(i.node, "c");
  EXPECT_EQ(i.at_ms, wall(-300ms));
  expect_near(i.detected_s, 0.3);
  // Every survivor had reported by 50 ms after detection; the stop cannot precede detection.
  expect_near(i.stopped_s, 0.35);
  // A worker failure later does not take the cause back.
  log.on_loss(at(500ms), wall(500ms), "j", 7, kMembers, "worker_failed", "b", wall(0s));
  EXPECT_EQ(i.cause, "node_lost");
}

TEST(IncidentLog, DuplicateStaleAndOutOfOrderReportsAreHarmless) {
  IncidentLog log;
  log.on_loss(at(0s), wall(0s), "j", 2, kMembers, "node_lost", "c", std::nullopt);
  log.on_loss(at(1s), wall(1s), "j", 2, kMembers, "node_lost", "c", std::nullopt);
  ASSERT_EQ(log.incidents().size(), 1u);
  const Incident& i = log.incidents().back();
  expect_near(i.detected_s, 0);
  // Reports about the new round before it is committed mean nothing yet.
  log.on_round_acked(at(1s), "j", 3);
  log.on_progress(at(1s), "j", 3, "step", 5, 0);
  EXPECT_FALSE(i.rendezvous_s);
  EXPECT_FALSE(i.first_step_s);
  EXPECT_FALSE(i.complete);
  log.on_workers_stopped(at(1s), "j", 2, "a");
  log.on_workers_stopped(at(2s), "j", 2, "a");  // a duplicate keeps the first time
  log.on_workers_stopped(at(1500ms), "j", 2, "b");
  expect_near(i.stopped_s, 1.5);
  log.on_workers_stopped(at(1500ms), "j", 1, "b");  // an older round: ignored
  log.on_round_committed(at(2s), wall(2s), "j", 2, 3, 2, false, kMembers);
  log.on_round_committed(at(2100ms), wall(2100ms), "j", 2, 3, 2, false, kMembers);
  log.on_round_acked(at(3s), "j", 3);
  log.on_round_acked(at(4s), "j", 3);
  expect_near(i.rendezvous_s, 3);
  // Late evidence about the replaced round opens nothing.
  log.on_loss(at(4s), wall(4s), "j", 2, kMembers, "worker_failed", "a", std::nullopt);
  EXPECT_EQ(log.incidents().size(), 1u);
  log.on_progress(at(5s), "j", 3, "step", 6, -1);
  EXPECT_TRUE(i.complete);
  EXPECT_FALSE(i.steps_lost) << "no step of round 2 was ever reported";
  log.on_progress(at(6s), "j", 3, "step", 7, -1);
  expect_near(i.first_step_s, 5);
  // Evidence about the finished incident's round still opens nothing; the next round may.
  log.on_loss(at(7s), wall(7s), "j", 2, kMembers, "node_lost", "b", std::nullopt);
  EXPECT_EQ(log.incidents().size(), 1u);
  log.on_loss(at(8s), wall(8s), "j", 3, {"a", "b"}, "node_lost", "b", std::nullopt);
  ASSERT_EQ(log.incidents().size(), 2u);
  EXPECT_EQ(log.incidents().back().id, 2u);
  EXPECT_EQ(log.incidents().back().from_round, 3u);
  ASSERT_TRUE(log.incidents().back().steps_lost.has_value() ||
              !log.incidents().back().first_step_s.has_value());
}

TEST(IncidentLog, SkewedEvidenceFromTheFutureIsClampedToDetection) {
  IncidentLog log;
  log.on_loss(at(0s), wall(0s), "j", 1, kMembers, "worker_failed", "a", wall(2s));
  const Incident& i = log.incidents().back();
  EXPECT_EQ(i.at_ms, wall(0s));
  expect_near(i.detected_s, 0);
}

TEST(IncidentLog, GivesUpWithoutAFirstStepAndCountsNothing) {
  IncidentLog log;
  log.on_loss(at(0s), wall(0s), "j", 1, kMembers, "node_lost", "a", std::nullopt);
  log.on_round_committed(at(1s), wall(1s), "j", 1, 2, 2, false, kMembers);
  EXPECT_EQ(log.next_deadline(), at(IncidentLog::kGiveUp));
  log.tick(at(IncidentLog::kGiveUp - 1ms));
  EXPECT_FALSE(log.incidents().back().complete);
  log.tick(at(IncidentLog::kGiveUp));
  const Incident& i = log.incidents().back();
  EXPECT_TRUE(i.complete);
  EXPECT_TRUE(i.given_up);
  EXPECT_FALSE(i.first_step_s);
  EXPECT_EQ(log.stats().count, 0u);
  EXPECT_EQ(log.next_deadline(), kNever);
  // A first step after giving up changes nothing.
  log.on_progress(at(IncidentLog::kGiveUp + 1s), "j", 2, "step", 1, -1);
  EXPECT_FALSE(i.first_step_s);
}

TEST(IncidentLog, EndedJobsAndLostLeadershipCompleteOpenIncidents) {
  IncidentLog log;
  log.on_loss(at(0s), wall(0s), "j", 1, kMembers, "node_lost", "a", std::nullopt);
  log.on_loss(at(0s), wall(0s), "k", 4, kMembers, "worker_failed", "b", std::nullopt);
  log.on_job_ended(at(1s), "j");
  EXPECT_TRUE(log.incidents()[0].complete);
  EXPECT_TRUE(log.incidents()[0].given_up);
  EXPECT_FALSE(log.incidents()[1].complete);
  log.abandon_open();
  EXPECT_TRUE(log.incidents()[1].complete);
  EXPECT_EQ(log.stats().count, 0u);
}

TEST(IncidentLog, ANewLossInTheNewRoundSupersedesTheRecovery) {
  IncidentLog log;
  log.on_loss(at(0s), wall(0s), "j", 1, kMembers, "node_lost", "a", std::nullopt);
  log.on_round_committed(at(1s), wall(1s), "j", 1, 2, 2, false, kMembers);
  log.on_loss(at(2s), wall(2s), "j", 2, {"b", "c"}, "node_lost", "b", std::nullopt);
  ASSERT_EQ(log.incidents().size(), 2u);
  EXPECT_TRUE(log.incidents()[0].given_up);
  EXPECT_EQ(log.incidents()[1].from_round, 2u);
  // The stop of round 2 only needs c now.
  log.on_workers_stopped(at(2500ms), "j", 2, "c");
  expect_near(log.incidents()[1].stopped_s, 0.5);
}

// A host lost, the recovery round acknowledged at +2 s, the host back and a
// grow round at +50 s: the rendezvous stays the recovery round's; the grow is its own incident.
TEST(IncidentLog, AGrowAfterTheRecoveryRoundStoodIsNotPartOfTheRecovery) {
  IncidentLog log;
  log.on_loss(at(0s), wall(0s), "j", 1, kMembers, "node_lost", "c", std::nullopt);
  log.on_round_committed(at(1s), wall(1s), "j", 1, 2, 2, false, kMembers);
  log.on_round_acked(at(2s), "j", 2);
  log.on_round_committed(at(50s), wall(50s), "j", 2, 3, 3, /*grow=*/true, {"a", "b"});
  log.on_round_acked(at(51s), "j", 3);
  ASSERT_EQ(log.incidents().size(), 2u);
  const Incident& recovery = log.incidents()[0];
  EXPECT_EQ(recovery.to_round, 2u);
  EXPECT_EQ(recovery.to_nodes, 2u);
  expect_near(recovery.rendezvous_s, 2);
  EXPECT_TRUE(recovery.complete);
  EXPECT_FALSE(recovery.first_step_s);
  const Incident& grow = log.incidents()[1];
  EXPECT_EQ(grow.cause, "grow");
  EXPECT_EQ(grow.from_round, 2u);
  EXPECT_EQ(grow.to_round, 3u);
  expect_near(grow.rendezvous_s, 1);
  // A round replaced before its rendezvous still hands the wait on to the next one.
  log.on_loss(at(60s), wall(60s), "j", 3, kMembers, "node_lost", "a", std::nullopt);
  log.on_round_committed(at(61s), wall(61s), "j", 3, 4, 2, false, kMembers);
  log.on_round_committed(at(62s), wall(62s), "j", 4, 5, 3, /*grow=*/true, {"b", "c"});
  log.on_round_acked(at(63s), "j", 5);
  EXPECT_EQ(log.incidents().back().to_round, 5u);
  expect_near(log.incidents().back().rendezvous_s, 3);
}

// Whether the job ever reported progress, so a timeline without a first step
// can say why.
TEST(IncidentLog, IncidentsSayWhetherTheJobReportsProgress) {
  IncidentLog log;
  log.on_loss(at(0s), wall(0s), "quiet", 1, kMembers, "node_lost", "a", std::nullopt);
  EXPECT_FALSE(log.incidents().back().progress_reports);
  log.on_progress(at(-1s), "talks", 1, "step", 7, -1);
  log.on_loss(at(0s), wall(0s), "talks", 1, kMembers, "node_lost", "a", std::nullopt);
  EXPECT_TRUE(log.incidents().back().progress_reports);
  // A first report during the incident counts too.
  log.on_loss(at(0s), wall(0s), "late", 1, kMembers, "worker_failed", "b", std::nullopt);
  log.on_progress(at(1s), "late", 1, "checkpoint", 3, -1);
  EXPECT_TRUE(log.incidents().back().progress_reports);
  const auto json = nlohmann::json::parse(log.to_json("quiet", 10));
  EXPECT_EQ(json["incidents"][0]["progress_reports"], false);
}

TEST(IncidentLog, GrowRoundsGetATimelineButStayOutOfTheStats) {
  IncidentLog log;
  log.on_progress(at(-1s), "j", 1, "step", 30, -1);
  log.on_round_committed(at(0s), wall(0s), "j", 1, 2, 3, /*grow=*/true, {"a", "b"});
  ASSERT_EQ(log.incidents().size(), 1u);
  const Incident& i = log.incidents().back();
  EXPECT_EQ(i.cause, "grow");
  EXPECT_EQ(i.to_round, 2u);
  log.on_workers_stopped(at(1s), "j", 1, "a");
  log.on_workers_stopped(at(2s), "j", 1, "b");
  expect_near(i.stopped_s, 2);
  log.on_round_acked(at(3s), "j", 2);
  log.on_progress(at(4s), "j", 2, "step", 31, 30);
  EXPECT_TRUE(i.complete);
  EXPECT_FALSE(i.given_up);
  EXPECT_EQ(*i.steps_lost, 0);
  EXPECT_EQ(log.stats().count, 0u);
  // A first round (not a grow) opens nothing.
  log.on_round_committed(at(5s), wall(5s), "k", 0, 1, 2, false, {});
  EXPECT_EQ(log.incidents().size(), 1u);
}

TEST(RecoveryStats, BucketsAreUpperBoundsAndNotCumulative) {
  RecoveryStats stats;
  for (const double v : {0.0, 0.5, 0.51, 1.0, 7.5, 59.9, 60.0, 60.01, 3600.0}) stats.observe(v);
  EXPECT_EQ(stats.counts[0], 2u);   // <= 0.5
  EXPECT_EQ(stats.counts[1], 2u);   // (0.5, 1]
  EXPECT_EQ(stats.counts[5], 1u);   // (5, 7.5]
  EXPECT_EQ(stats.counts[9], 2u);   // (30, 60]
  EXPECT_EQ(stats.counts[10], 2u);  // above 60
  EXPECT_EQ(stats.count, 9u);
  EXPECT_NEAR(stats.sum, 0.5 + 0.51 + 1 + 7.5 + 59.9 + 60 + 60.01 + 3600, 1e-9);
}

TEST(IncidentLog, RingsAreBoundedAndJsonFiltersByJob) {
  IncidentLog log;
  for (std::uint64_t r = 1; r <= IncidentLog::kMaxIncidents + 5; ++r) {
    log.on_loss(at(std::chrono::seconds(r)), wall(std::chrono::seconds(r)), "j", r, kMembers,
                "worker_failed", "a", std::nullopt);
  }
  EXPECT_EQ(log.incidents().size(), IncidentLog::kMaxIncidents);
  EXPECT_EQ(log.incidents().back().id, IncidentLog::kMaxIncidents + 5);
  for (std::size_t n = 0; n < IncidentLog::kMaxEvents + 3; ++n) {
    log.record(
        ClusterEvent{.at_ms = 1, .kind = "member_dead", .node = "x", .job = "", .detail = ""});
  }
  EXPECT_EQ(log.events().size(), IncidentLog::kMaxEvents);
  log.on_loss(at(1000s), wall(1000s), "other", 1, kMembers, "node_lost", "b", std::nullopt);
  const auto all = nlohmann::json::parse(log.to_json("", 1000));
  const auto one = nlohmann::json::parse(log.to_json("other", 1000));
  EXPECT_EQ(all["incidents"].size(), IncidentLog::kMaxIncidents);
  ASSERT_EQ(one["incidents"].size(), 1u);
  EXPECT_EQ(one["incidents"][0]["cause"], "node_lost");
  EXPECT_EQ(one["incidents"][0]["node"], "b");
  EXPECT_TRUE(one["incidents"][0]["stopped_s"].is_null());
  ASSERT_EQ(one["cluster"].size(), 1u);  // its "incident" event only
  EXPECT_EQ(one["cluster"][0]["kind"], "incident");
  const auto newest = nlohmann::json::parse(log.to_json("", 2));
  EXPECT_EQ(newest["incidents"].size(), 2u);
  EXPECT_EQ(newest["incidents"][1]["job"], "other");
}

TEST(IncidentLog, AStepBeforeTheRendezvousCountsAtTheRendezvous) {
  IncidentLog log;
  log.on_loss(at(0s), wall(0s), "j", 1, kMembers, "worker_failed", "a", std::nullopt);
  log.on_round_committed(at(1s), wall(1s), "j", 1, 2, 3, false, kMembers);
  log.on_progress(at(1500ms), "j", 2, "step", 3, 2);  // before every member acknowledged
  log.on_progress(at(1600ms), "j", 2, "step", 4, 2);
  const Incident& i = log.incidents().back();
  EXPECT_FALSE(i.complete);
  log.on_round_acked(at(2s), "j", 2);
  EXPECT_TRUE(i.complete);
  expect_near(i.rendezvous_s, 2);
  expect_near(i.first_step_s, 2);
  EXPECT_EQ(i.resumed_from, 2);
  EXPECT_EQ(log.stats().count, 1u);
}

}  // namespace
}  // namespace elastic::node

namespace elastic::node {
namespace {

// A drained or stopped daemon's leave is planned: its recovery is counted apart from failures.
TEST(IncidentLog, APlannedLeaveIsCountedUnderItsOwnCause) {
  IncidentLog log;
  log.on_loss(at(0s), wall(0s), "j", 1, kMembers, "node_left", "c", std::nullopt);
  log.on_round_committed(at(1s), wall(1s), "j", 1, 2, 2, false, {"a", "b"});
  log.on_round_acked(at(2s), "j", 2);
  log.on_progress(at(3s), "j", 2, "step", 5, 4);
  ASSERT_TRUE(log.incidents().back().complete);
  EXPECT_EQ(log.incidents().back().cause, "node_left");
  EXPECT_EQ(log.stats_by_cause().at("node_left").count, 1u);
  EXPECT_EQ(log.stats_by_cause().at("worker_failed").count, 0u);
  EXPECT_EQ(log.stats_by_cause().at("node_lost").count, 0u);
  EXPECT_EQ(log.stats().count, 1u);
}

// Replication: what is not replicated yet goes out once; a new leader starts from the
// replicated history, keeps its own newer events and incidents (renumbered after the history's)
// and counts the history's durations.
TEST(IncidentLog, UnreplicatedHistoryGoesOutOnceAndSeedsTheNextLeader) {
  IncidentLog old_leader;
  old_leader.record(ClusterEvent{wall(0s), "leader_elected", "a", "", "term 2"});
  old_leader.on_loss(at(0s), wall(0s), "j", 1, kMembers, "node_lost", "c", std::nullopt);
  old_leader.on_round_committed(at(1s), wall(1s), "j", 1, 2, 2, false, {"a", "b"});
  old_leader.on_round_acked(at(2s), "j", 2);
  old_leader.on_loss(at(3s), wall(3s), "k", 1, kMembers, "worker_failed", "b", std::nullopt);
  IncidentLog::Unreplicated batch = old_leader.unreplicated();
  EXPECT_TRUE(batch.incidents.empty()) << "neither incident is complete";
  ASSERT_EQ(batch.events.size(), 3u) << "the election and two incidents opened";
  EXPECT_EQ(batch.events[0].kind, "leader_elected");
  old_leader.mark_replicated(batch);
  EXPECT_TRUE(old_leader.unreplicated().events.empty()) << "sent once";
  old_leader.on_progress(at(4s), "j", 2, "step", 5, 4);  // j's incident completes
  batch = old_leader.unreplicated();
  ASSERT_EQ(batch.incidents.size(), 1u);
  EXPECT_EQ(batch.incidents[0].job, "j");
  old_leader.mark_replicated(batch);
  EXPECT_TRUE(old_leader.unreplicated().incidents.empty());

  // What the table holds after those batches.
  rendezvous::History history;
  history.add(ClusterEvent{wall(0s), "leader_elected", "a", "", "term 2"});
  history.add(ClusterEvent{wall(3s), "incident", "b", "k", "incident 2 opened: worker_failed"});
  history.add(batch.incidents[0]);
  EXPECT_EQ(history.stats.at("node_lost").count, 1u);

  // The next leader saw membership change as a follower (one event before the history's newest,
  // one after) and opened an incident of its own before it was caught up.
  IncidentLog next;
  next.record(ClusterEvent{wall(-1s), "member_dead", "x", "", "old news"});
  next.record(ClusterEvent{wall(5s), "member_dead", "a", "", "the old leader"});
  next.on_loss(at(5s), wall(5s), "j", 2, {"a", "b"}, "node_lost", "a", std::nullopt);
  ASSERT_EQ(next.incidents().back().id, 1u);
  next.seed(history);
  // The history's two, then its own two newer ones (the loss and its incident).
  ASSERT_EQ(next.events().size(), 4u);
  EXPECT_EQ(next.events()[0].kind, "leader_elected");
  EXPECT_EQ(next.events()[2].detail, "the old leader");
  EXPECT_EQ(next.events()[3].detail, "incident 2 opened: node_lost in round 2")
      << "its incident's event names the new number";
  ASSERT_EQ(next.incidents().size(), 2u);
  EXPECT_EQ(next.incidents()[0], history.incidents[0]);
  EXPECT_EQ(next.incidents()[1].id, 2u) << "renumbered after the history's";
  EXPECT_EQ(next.stats_by_cause().at("node_lost").count, 1u);
  // Its own event and (once complete) its own incident go out; the history's do not.
  batch = next.unreplicated();
  ASSERT_EQ(batch.events.size(), 2u);
  EXPECT_EQ(batch.events[0].detail, "the old leader");
  EXPECT_TRUE(batch.incidents.empty());
  next.mark_replicated(batch);
  next.on_round_committed(at(6s), wall(6s), "j", 2, 3, 1, false, {"a", "b"});
  next.on_round_acked(at(7s), "j", 3);
  next.on_progress(at(8s), "j", 3, "step", 9, 8);
  batch = next.unreplicated();
  ASSERT_EQ(batch.incidents.size(), 1u);
  EXPECT_EQ(batch.incidents[0].id, 2u);
  EXPECT_TRUE(batch.incidents[0].complete);
  EXPECT_EQ(next.stats_by_cause().at("node_lost").count, 2u);

  // Stepping down forgets incidents and durations, keeps events.
  next.step_down();
  EXPECT_TRUE(next.incidents().empty());
  EXPECT_EQ(next.stats().count, 0u);
  EXPECT_EQ(next.events().size(), 4u);
}

}  // namespace
}  // namespace elastic::node
