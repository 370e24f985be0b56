// JobTable: commands and their rules, exactly-once for clients, bounds, snapshots, a model
// check against a small reference model, and hostile bytes.
#include "daemon/rendezvous/job_table.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "daemon/core/rng.h"
#include "daemon/rendezvous/planner.h"
#include "daemon/rendezvous/rank_delta.h"
#include "daemon/wire/codec.h"
#include "tests/support/result_assertions.h"

namespace elastic::rendezvous {
namespace {

using namespace std::chrono_literals;
using namespace std::string_literals;

WallTime ms(std::int64_t t) { return WallTime(std::chrono::milliseconds(t)); }

JobSpec spec(std::string name = "train", std::uint32_t min = 1, std::uint32_t max = 3,
             std::uint32_t uid = 1000, std::uint32_t max_restarts = 2) {
  JobSpec s;
  s.name = std::move(name);
  s.command = {"/usr/bin/python3", "train.py"};
  s.min_nodes = min;
  s.max_nodes = max;
  s.max_restarts = max_restarts;
  s.user = "alice";
  s.uid = uid;
  s.gid = uid;
  return s;
}

RankMap ranks(std::vector<std::string> nodes, std::uint32_t slots = 2) {
  RankMap map;
  std::uint32_t next = 0;
  for (std::string& n : nodes) {
    map.push_back(RankAssignment{std::move(n), 1, slots, next});
    next += slots;
  }
  return map;
}

OpenRound open(std::string job, std::uint64_t round, std::uint64_t prev, RankMap map,
               RoundReason reason = RoundReason::kSubmitted, std::int64_t at = 2000) {
  return OpenRound{std::move(job),   round,  prev, std::move(map),
                   "10.0.0.1:29500", reason, "",   ms(at)};
}

SetJobState set(std::string job, std::uint64_t round, JobState state,
                RoundReason cause = RoundReason::kMemberLost, std::int64_t at = 3000) {
  return SetJobState{std::move(job), round, state, cause, "because", ms(at)};
}

// A ScaleState and a SetScale built in functions: GCC 12 warns wrongly (maybe-uninitialized)
// about maps in nested braced temporaries.
ScaleState scale_state(std::uint32_t size, std::uint32_t good, bool settled,
                       const std::map<std::uint32_t, double>& rate) {
  ScaleState s;
  s.size = size;
  s.good = good;
  s.settled = settled;
  s.rate = rate;
  return s;
}

Command scale_command(std::string job, std::uint64_t round, ScaleState state, std::string reason,
                      std::int64_t at) {
  SetScale c;
  c.job_id = std::move(job);
  c.round = round;
  c.state = std::move(state);
  c.reason = std::move(reason);
  c.at = ms(at);
  return c;
}

// A RecordHistory with one of everything, every optional field set.
Command history_command() {
  RecordHistory c;
  c.points.push_back(JobPoint{"train-4", SeriesPoint{ms(90), 1.5, -0.25}});
  c.points.push_back(JobPoint{"train-5", SeriesPoint{ms(91), std::nullopt, std::nullopt}});
  Incident i;
  i.id = 7;
  i.job = "train-4";
  i.cause = "worker_failed";
  i.node = "gpu-3";
  i.from_round = 5;
  i.to_round = 6;
  i.at_ms = -3;
  i.detected_s = 0.25;
  i.stopped_s = 0.5;
  i.rendezvous_s = 0.75;
  i.first_step_s = 1.0;
  i.steps_lost = 2;
  i.complete = true;
  i.to_nodes = 3;
  i.resumed_from = 40;
  i.given_up = false;
  i.progress_reports = true;
  c.incidents.push_back(i);
  c.events.push_back(ClusterEvent{92, "node_drained", "gpu-3", "", "bad DIMM"});
  return c;
}

// Applies through the byte encoding, so every test also exercises the codec.
class TableTest : public ::testing::Test {
 protected:
  ApplyResult apply(const Command& c) { return table_.apply(++index_, encode_command(c)); }
  ApplyResult submit(const JobSpec& s, std::string client = "c1", std::uint64_t seq = 0) {
    return apply(SubmitJob{std::move(client), seq == 0 ? ++seq_ : seq, s, ms(1000)});
  }
  // An admin's drain (drained = true) or undrain from client "ops".
  ApplyResult drain(std::string node, bool drained = true, std::string reason = "bad DIMM",
                    bool is_admin = true, std::int64_t at = 4000) {
    return apply(DrainNode{"ops", ++drain_seq_, std::move(node), drained, std::move(reason), 0,
                           is_admin, ms(at)});
  }
  const JobRecord& job(const std::string& id) {
    const JobRecord* j = table_.job(id);
    EXPECT_NE(j, nullptr) << id;
    static const JobRecord kNone;
    return j == nullptr ? kNone : *j;
  }

  JobTable table_;
  Index index_ = 0;
  std::uint64_t seq_ = 0;
  std::uint64_t drain_seq_ = 0;
};

TEST_F(TableTest, SubmitCreatesAPendingJob) {
  const ApplyResult r = submit(spec("fmnist"));
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.job_id, "fmnist-1");
  EXPECT_FALSE(r.duplicate);
  const JobRecord& j = job("fmnist-1");
  EXPECT_EQ(j.state, JobState::kPending);
  EXPECT_EQ(j.round, 0u);
  EXPECT_EQ(j.submitted_at, ms(1000));
  EXPECT_EQ(j.state_since, ms(1000));
  EXPECT_EQ(j.created_index, 1u);
  ASSERT_EQ(j.events.size(), 1u);
  EXPECT_EQ(j.events[0].reason, "submitted by alice (uid 1000)");
  EXPECT_EQ(submit(spec("fmnist")).job_id, "fmnist-2");
  EXPECT_EQ(table_.jobs_created(), 2u);
}

TEST_F(TableTest, InvalidSpecIsRejectedAndCreatesNothing) {
  const ApplyResult r = submit(spec("bad", 3, 2));
  EXPECT_EQ(r.code, ApplyCode::kRejected);
  EXPECT_EQ(r.message, "nodes: min 3 is greater than max 2");
  EXPECT_TRUE(table_.jobs().empty());
  EXPECT_EQ(table_.jobs_created(), 0u);
}

TEST_F(TableTest, RetriedSubmitIsAnsweredFromMemory) {
  const ApplyResult first = submit(spec(), "client-a", 7);
  ASSERT_TRUE(first.ok());
  // The same request again (e.g. retried through a new leader, stamped anew).
  const ApplyResult again = apply(SubmitJob{"client-a", 7, spec(), ms(99999)});
  EXPECT_TRUE(again.ok());
  EXPECT_TRUE(again.duplicate);
  EXPECT_EQ(again.job_id, first.job_id);
  // An older sequence number is also answered without applying.
  EXPECT_TRUE(submit(spec(), "client-a", 3).duplicate);
  EXPECT_EQ(table_.jobs().size(), 1u);
  // Another client with the same sequence number is independent.
  const ApplyResult other = submit(spec(), "client-b", 7);
  EXPECT_FALSE(other.duplicate);
  EXPECT_EQ(table_.jobs().size(), 2u);
  // Refusals are remembered too.
  const ApplyResult refused = submit(spec("x", 0, 1), "client-a", 8);
  EXPECT_EQ(refused.code, ApplyCode::kRejected);
  const ApplyResult refused_again = submit(spec("x", 1, 1), "client-a", 8);
  EXPECT_EQ(refused_again.code, ApplyCode::kRejected);
  EXPECT_TRUE(refused_again.duplicate);
  EXPECT_EQ(refused_again.message, refused.message);
  EXPECT_EQ(table_.jobs().size(), 2u);
}

TEST_F(TableTest, CommandsWithoutClientIdentityAreRejected) {
  EXPECT_EQ(apply(SubmitJob{"", 1, spec(), ms(1)}).code, ApplyCode::kRejected);
  EXPECT_EQ(apply(SubmitJob{"c", 0, spec(), ms(1)}).code, ApplyCode::kRejected);
  EXPECT_TRUE(table_.jobs().empty());
}

TEST_F(TableTest, CancelRules) {
  const std::string id = submit(spec("j", 1, 2, 1000)).job_id;
  const ApplyResult stranger = apply(CancelJob{"c2", 1, id, 1001, false, ms(5)});
  EXPECT_EQ(stranger.code, ApplyCode::kDenied);
  EXPECT_EQ(stranger.message,
            "uid 1001 may not cancel job j-1 of uid 1000; only its owner or an admin may.");
  EXPECT_EQ(job(id).state, JobState::kPending);
  EXPECT_EQ(apply(CancelJob{"c2", 2, "nope-9", 1000, false, ms(5)}).message,
            "There is no job nope-9.");

  const ApplyResult owner = apply(CancelJob{"c2", 3, id, 1000, false, ms(6)});
  ASSERT_TRUE(owner.ok()) << owner.message;
  EXPECT_EQ(job(id).state, JobState::kCancelled);
  EXPECT_EQ(job(id).reason, "cancelled by uid 1000");
  EXPECT_NE(job(id).ended_index, 0u);
  EXPECT_EQ(apply(CancelJob{"c2", 4, id, 0, true, ms(7)}).message,
            "Job j-1 has already been cancelled.");

  const std::string id2 = submit(spec("k", 1, 2, 1000)).job_id;
  EXPECT_TRUE(apply(CancelJob{"c3", 1, id2, 0, true, ms(8)}).ok());
  EXPECT_EQ(job(id2).reason, "cancelled by uid 0 (admin)");
}

// ---------------------------------------------------------------------------------------------
// Priorities, suspension and preemption

TEST_F(TableTest, PriorityRules) {
  const std::string id = submit(spec("j", 1, 2, 1000)).job_id;
  const auto priority = [&](std::int32_t p, std::uint32_t uid, bool admin, std::int32_t ceiling,
                            std::uint64_t seq) {
    return apply(SetPriority{"p", seq, id, p, ceiling, uid, admin, ms(10)});
  };
  const ApplyResult stranger = priority(5, 1001, false, 100, 1);
  EXPECT_EQ(stranger.code, ApplyCode::kDenied);
  EXPECT_EQ(stranger.message,
            "uid 1001 may not change the priority of job j-1 of uid 1000; only its owner or an "
            "admin may.");
  EXPECT_EQ(job(id).spec.priority, 0);

  ASSERT_TRUE(priority(10, 1000, false, 10, 2).ok());
  EXPECT_EQ(job(id).spec.priority, 10);
  EXPECT_EQ(job(id).state, JobState::kPending);
  EXPECT_EQ(job(id).events.back().reason, "priority 0 -> 10 by uid 1000");
  EXPECT_EQ(job(id).events.back().from, JobState::kPending);
  EXPECT_EQ(job(id).events.back().to, JobState::kPending);
  EXPECT_EQ(job(id).state_since, ms(1000)) << "a priority change is no state change";

  // Above the ceiling: only an admin may raise it there.
  const ApplyResult above = priority(11, 1000, false, 10, 3);
  EXPECT_EQ(above.code, ApplyCode::kDenied);
  EXPECT_EQ(above.message,
            "Priority 11 is above limits.priority_ceiling (10); only an admin may raise a job "
            "above it.");
  EXPECT_EQ(job(id).spec.priority, 10);
  ASSERT_TRUE(priority(50, 0, true, 10, 4).ok());
  EXPECT_EQ(job(id).events.back().reason, "priority 10 -> 50 by uid 0 (admin)");
  // The owner may lower it again, even while it stays above the ceiling, but not raise it.
  ASSERT_TRUE(priority(40, 1000, false, 10, 5).ok());
  EXPECT_EQ(priority(45, 1000, false, 10, 6).code, ApplyCode::kDenied);
  EXPECT_EQ(job(id).spec.priority, 40);
  ASSERT_TRUE(priority(-5, 1000, false, 10, 7).ok());
  // A retry is answered from memory and changes nothing.
  const std::size_t events = job(id).events.size();
  const ApplyResult again = priority(-5, 1000, false, 10, 7);
  EXPECT_TRUE(again.ok());
  EXPECT_TRUE(again.duplicate);
  EXPECT_EQ(job(id).events.size(), events);

  const ApplyResult out_of_range = priority(kMaxPriority + 1, 0, true, 10, 8);
  EXPECT_EQ(out_of_range.code, ApplyCode::kRejected);
  EXPECT_EQ(out_of_range.message, "Priority 1000001 is outside -1000000..1000000.");
  EXPECT_EQ(apply(SetPriority{"p", 9, "nope-3", 1, 10, 0, true, ms(10)}).message,
            "There is no job nope-3.");

  const ApplyResult refused_again = priority(1, 1000, false, 10, 9);
  EXPECT_EQ(refused_again.code, ApplyCode::kRejected);
  EXPECT_TRUE(refused_again.duplicate);
  EXPECT_EQ(job(id).events.size(), events);
  EXPECT_EQ(job(id).spec.priority, -5);

  ASSERT_TRUE(apply(CancelJob{"p", 10, id, 1000, false, ms(11)}).ok());
  EXPECT_EQ(priority(1, 1000, false, 10, 11).message, "Job j-1 has already cancelled.");
}

TEST_F(TableTest, SuspendAndResume) {
  const std::string id = submit(spec("j", 1, 2, 1000)).job_id;
  ASSERT_TRUE(apply(open(id, 1, 0, ranks({"a", "b"}))).ok());
  ASSERT_TRUE(apply(set(id, 1, JobState::kRunning)).ok());
  const auto suspend = [&](bool resume, std::uint32_t uid, bool admin, std::uint64_t seq) {
    return apply(SuspendJob{"s", seq, id, resume, uid, admin, ms(20 + seq)});
  };
  const ApplyResult stranger = suspend(false, 1001, false, 1);
  EXPECT_EQ(stranger.code, ApplyCode::kDenied);
  EXPECT_EQ(stranger.message,
            "uid 1001 may not suspend job j-1 of uid 1000; only its owner or an admin may.");
  EXPECT_EQ(suspend(true, 1000, false, 2).message, "Job j-1 is not suspended.");

  ASSERT_TRUE(suspend(false, 1000, false, 3).ok());
  const JobRecord held = job(id);
  EXPECT_EQ(held.state, JobState::kSuspended);
  EXPECT_FALSE(is_terminal(held.state));
  EXPECT_EQ(held.reason, "suspended by uid 1000");
  EXPECT_EQ(held.events.back().from, JobState::kRunning);
  EXPECT_EQ(held.round, 1u) << "round and rank map stay, as a terminal job keeps them";
  EXPECT_EQ(held.ranks, ranks({"a", "b"}));
  EXPECT_EQ(held.ended_index, 0u);

  // Nothing moves a suspended job but resume (or failing it).
  EXPECT_EQ(suspend(false, 0, true, 4).message, "Job j-1 is already suspended.");
  EXPECT_EQ(apply(open(id, 2, 1, ranks({"a"}))).message,
            "Cannot open round 2 of job j-1: the job is suspended.");
  EXPECT_EQ(apply(set(id, 1, JobState::kRunning)).code, ApplyCode::kRejected);
  EXPECT_EQ(apply(set(id, 1, JobState::kSucceeded)).code, ApplyCode::kRejected);
  EXPECT_EQ(apply(set(id, 1, JobState::kPending, RoundReason::kPreempted)).code,
            ApplyCode::kRejected);
  EXPECT_EQ(job(id), held);
  EXPECT_EQ(suspend(true, 1001, false, 5).code, ApplyCode::kDenied);

  // An admin resumes it: pending again, its round kept, and its next round opens from there.
  ASSERT_TRUE(suspend(true, 0, true, 6).ok());
  EXPECT_EQ(job(id).state, JobState::kPending);
  EXPECT_EQ(job(id).reason, "resumed by uid 0 (admin)");
  EXPECT_EQ(job(id).submitted_at, ms(1000));
  EXPECT_EQ(job(id).restarts, 0u);
  const ApplyResult reopened = apply(open(id, 2, 1, ranks({"b"})));
  ASSERT_TRUE(reopened.ok()) << reopened.message;
  EXPECT_EQ(job(id).state, JobState::kRendezvous);

  // A retried suspend is answered from memory.
  const ApplyResult again = suspend(false, 1000, false, 3);
  EXPECT_TRUE(again.ok());
  EXPECT_TRUE(again.duplicate);
  EXPECT_EQ(job(id).state, JobState::kRendezvous);

  // A pending job (no round yet) can be suspended too; a terminal one cannot.
  const std::string queued = submit(spec("q", 1, 2, 1000)).job_id;
  ASSERT_TRUE(apply(SuspendJob{"s2", 1, queued, false, 1000, false, ms(40)}).ok());
  ASSERT_TRUE(apply(CancelJob{"s2", 2, queued, 1000, false, ms(41)}).ok());
  EXPECT_EQ(apply(SuspendJob{"s2", 3, queued, true, 1000, false, ms(42)}).message,
            "Job q-2 has already cancelled.");
}

TEST_F(TableTest, APreemptionShrinksARoundWithoutARestart) {
  const std::string id = submit(spec("j", 1, 3, 1000)).job_id;
  ASSERT_TRUE(apply(open(id, 1, 0, ranks({"a", "b", "c"}))).ok());
  ASSERT_TRUE(apply(set(id, 1, JobState::kRunning)).ok());

  // Only nodes of the current round, same generation.
  RankMap moved = ranks({"a", "d"});
  EXPECT_EQ(apply(open(id, 2, 1, moved, RoundReason::kPreempted)).message,
            "Cannot open round 2 of job j-1: a preempted or scaled round only shrinks the current "
            "one, and node d (generation 1) is not in the current one.");
  RankMap restarted = ranks({"a"});
  restarted[0].generation = 2;
  EXPECT_EQ(apply(open(id, 2, 1, restarted, RoundReason::kPreempted)).code, ApplyCode::kRejected);
  EXPECT_EQ(job(id).round, 1u);

  const ApplyResult shrunk = apply(open(id, 2, 1, ranks({"a"}), RoundReason::kPreempted));
  ASSERT_TRUE(shrunk.ok()) << shrunk.message;
  EXPECT_EQ(job(id).state, JobState::kRendezvous);
  EXPECT_EQ(job(id).round_reason, RoundReason::kPreempted);
  EXPECT_EQ(job(id).restarts, 0u);
  EXPECT_EQ(job(id).events.back().reason, "round 2 opened (preempted)");

  // Not from recovering or pending: there is no round to shrink.
  ASSERT_TRUE(apply(set(id, 2, JobState::kRecovering)).ok());
  EXPECT_EQ(apply(open(id, 3, 2, ranks({"a"}), RoundReason::kPreempted)).message,
            "Cannot open round 3 of job j-1 (preempted): the job is recovering, not rendezvous "
            "or running.");
  const std::string queued = submit(spec("q", 1, 1, 1000)).job_id;
  EXPECT_EQ(apply(open(queued, 1, 0, ranks({"a"}), RoundReason::kPreempted)).code,
            ApplyCode::kRejected);
}

// Throughput scaling: SetScale keeps the leader's state for the job's current round (an event
// says why); a scaled round only shrinks, like a preemption, and costs no restart.
TEST_F(TableTest, ScaleStepsAreCommittedWithTheirReason) {
  JobSpec s = spec("t", 1, 4, 1000);
  s.scale = ScaleMode::kThroughput;
  const std::string id = submit(s).job_id;
  ASSERT_TRUE(apply(open(id, 1, 0, ranks({"a"}))).ok());
  ASSERT_TRUE(apply(set(id, 1, JobState::kRunning)).ok());
  ScaleState state;
  state.size = 2;
  state.good = 1;
  state.rate = {{1, 320.5}};
  const ApplyResult stepped =
      apply(SetScale{id, 1, state, "samples/s 320 at 1 node: trying 2", ms(5000)});
  ASSERT_TRUE(stepped.ok()) << stepped.message;
  EXPECT_EQ(job(id).scale, state);
  EXPECT_EQ(job(id).state, JobState::kRunning);
  EXPECT_EQ(job(id).events.back().reason, "scale: samples/s 320 at 1 node: trying 2");
  EXPECT_EQ(job(id).events.back().from, JobState::kRunning);
  EXPECT_EQ(job(id).events.back().to, JobState::kRunning);
  const auto j = nlohmann::json::parse(to_json(job(id)));
  EXPECT_EQ(j["scale"], nlohmann::json({{"size", 2},
                                        {"good", 1},
                                        {"settled", false},
                                        {"samples_per_s", {{"1", 320.5}}}}));

  // Refused: another round, sizes or rates out of range, a job that does not scale, an ended
  // one. Nothing changes.
  const auto refused = [&](const SetScale& c) {
    const JobRecord before = job(c.job_id);
    const ApplyResult r = apply(c);
    // Rules are apply()'s (kRejected); a non-finite number never decodes (kMalformed).
    EXPECT_NE(r.code, ApplyCode::kApplied) << r.message;
    EXPECT_EQ(job(c.job_id), before);
    return r.message;
  };
  EXPECT_EQ(refused(SetScale{id, 2, state, "x", ms(5001)}),
            "Cannot scale job t-1 for round 2: the job is at round 1.");
  ScaleState big = state;
  big.size = 5;
  EXPECT_EQ(refused(SetScale{id, 1, big, "x", ms(5001)}),
            "Cannot scale job t-1: size 5 or good size 1 is outside min_nodes 1 to max_nodes 4.");
  ScaleState bad_rate = state;
  bad_rate.rate = {{9, 1.0}};
  EXPECT_EQ(refused(SetScale{id, 1, bad_rate, "x", ms(5001)}),
            "Cannot scale job t-1: its rate at 9 nodes is not a finite number >= 0 for a size "
            "within min_nodes to max_nodes.");
  bad_rate.rate = {{2, -1.0}};
  refused(SetScale{id, 1, bad_rate, "x", ms(5001)});
  bad_rate.rate = {{2, std::numeric_limits<double>::infinity()}};
  refused(SetScale{id, 1, bad_rate, "x", ms(5001)});
  const std::string fixed = submit(spec("f", 1, 2, 1000)).job_id;
  const ScaleState none;
  EXPECT_EQ(refused(SetScale{fixed, 0, none, "x", ms(5001)}),
            "Cannot scale job f-2: its scale is not \"throughput\".");

  // The scaled round: a prefix of the current nodes, no restart; never a new node.
  ASSERT_TRUE(apply(open(id, 2, 1, ranks({"a", "b", "c"}), RoundReason::kGrow)).ok());
  ASSERT_TRUE(apply(set(id, 2, JobState::kRunning)).ok());
  EXPECT_EQ(apply(open(id, 3, 2, ranks({"a", "d"}), RoundReason::kScaled)).code,
            ApplyCode::kRejected);
  const ApplyResult scaled = apply(open(id, 3, 2, ranks({"a", "b"}), RoundReason::kScaled));
  ASSERT_TRUE(scaled.ok()) << scaled.message;
  EXPECT_EQ(job(id).restarts, 0u);
  EXPECT_EQ(job(id).events.back().reason, "round 3 opened (scaled)");
  EXPECT_EQ(job(id).scale, state) << "a round keeps the scale state";

  // Kept by snapshots; ended jobs take no step.
  Result<JobTable> back = JobTable::restore(table_.snapshot());
  ASSERT_OK(back);
  EXPECT_EQ(*back, table_);
  EXPECT_EQ(back->job(id)->scale, state);
  ASSERT_TRUE(apply(CancelJob{"c9", 1, id, 0, true, ms(6000)}).ok());
  EXPECT_EQ(refused(SetScale{id, 3, state, "x", ms(6001)}),
            "Cannot scale job t-1: it has already cancelled.");
}

// non_history_index(): every entry but a RecordHistory moves it (a refused one too); a restore
// starts it at the snapshot's index.
TEST_F(TableTest, OnlyEntriesOtherThanHistoryMoveTheNonHistoryIndex) {
  EXPECT_EQ(table_.non_history_index(), 0u);
  const std::string id = submit(spec("h", 1, 2, 1000)).job_id;
  EXPECT_EQ(table_.non_history_index(), index_);
  const Index after_submit = index_;
  RecordHistory batch;
  batch.points.push_back(JobPoint{id, SeriesPoint{ms(10'000), 320.0, 2.25}});
  ASSERT_TRUE(apply(batch).ok());
  EXPECT_EQ(table_.applied_index(), after_submit + 1);
  EXPECT_EQ(table_.non_history_index(), after_submit) << "a history batch moved it";
  EXPECT_FALSE(apply(CancelJob{"c1", ++seq_, "no-such-job", 0, true, ms(2000)}).ok());
  EXPECT_EQ(table_.non_history_index(), index_) << "a refused command moves it too";
  ASSERT_TRUE(table_.apply(++index_, "not a command").code == ApplyCode::kMalformed);
  EXPECT_EQ(table_.non_history_index(), index_);
  batch.points[0].point.at = ms(20'000);
  ASSERT_TRUE(apply(batch).ok());
  auto restored = JobTable::restore(table_.snapshot());
  ASSERT_TRUE(restored.ok()) << restored.error().message;
  EXPECT_EQ(restored->non_history_index(), table_.applied_index());
}

// The leader's history: series points join their jobs (bounded, thinned), complete incidents
// and events join the table's history (bounded) and count their durations; a snapshot keeps
// them; a bad point or an open incident refuses the whole batch.
TEST_F(TableTest, HistoryIsRecordedBoundedAndSnapshotted) {
  const std::string before = table_.snapshot();
  const std::string id = submit(spec("h", 1, 2, 1000)).job_id;
  RecordHistory batch;
  batch.points.push_back(JobPoint{id, SeriesPoint{ms(10'000), 320.0, 2.25}});
  batch.points.push_back(JobPoint{"gone-7", SeriesPoint{ms(10'000), 1.0, std::nullopt}});
  Incident incident;
  incident.id = 4;
  incident.job = id;
  incident.cause = "node_lost";
  incident.node = "b";
  incident.from_round = 1;
  incident.to_round = 2;
  incident.at_ms = 9'000;
  incident.detected_s = 0.4;
  incident.first_step_s = 1.2;
  incident.complete = true;
  batch.incidents.push_back(incident);
  batch.events.push_back(ClusterEvent{9'100, "member_dead", "b", "", "no ack"});
  ASSERT_TRUE(apply(batch).ok());
  ASSERT_EQ(job(id).series.size(), 1u);
  EXPECT_EQ(job(id).series[0].samples_per_s, 320.0);
  ASSERT_EQ(table_.history().incidents.size(), 1u);
  EXPECT_EQ(table_.history().incidents[0], incident);
  EXPECT_EQ(table_.history().events.size(), 1u);
  EXPECT_EQ(table_.history().stats.at("node_lost").count, 1u);
  const auto j = nlohmann::json::parse(to_json(job(id)));
  EXPECT_EQ(j["series"], nlohmann::json::parse(
                             R"({"samples_per_s":[[10000,320.0]],"loss":[[10000,2.25]]})"));

  // Refused whole: a negative rate, a non-finite loss, an open incident.
  const auto refused = [&](RecordHistory c) {
    const JobRecord was = job(id);
    const History history = table_.history();
    const ApplyResult r = apply(c);
    EXPECT_NE(r.code, ApplyCode::kApplied) << r.message;  // a NaN does not even decode
    EXPECT_EQ(job(id), was);
    EXPECT_TRUE(table_.history() == history);
  };
  RecordHistory bad;
  bad.events.push_back(ClusterEvent{1, "member_dead", "z", "", ""});
  bad.points.push_back(JobPoint{id, SeriesPoint{ms(20'000), -1.0, std::nullopt}});
  refused(bad);
  bad.points[0].point = SeriesPoint{ms(20'000), std::nullopt,
                                    std::numeric_limits<double>::quiet_NaN()};
  refused(bad);
  bad.points.clear();
  Incident open = incident;
  open.complete = false;
  bad.incidents.push_back(open);
  refused(bad);

  // A point not after the last one is dropped; a full series keeps every second point.
  RecordHistory stale;
  stale.points.push_back(JobPoint{id, SeriesPoint{ms(10'000), 1.0, std::nullopt}});
  ASSERT_TRUE(apply(stale).ok());
  EXPECT_EQ(job(id).series.size(), 1u);
  for (std::int64_t k = 1; k < static_cast<std::int64_t>(kMaxSeriesPoints) + 5; ++k) {
    RecordHistory more;
    more.points.push_back(
        JobPoint{id, SeriesPoint{ms(10'000 + 10'000 * k), static_cast<double>(k), std::nullopt}});
    ASSERT_TRUE(apply(more).ok());
  }
  EXPECT_LT(job(id).series.size(), kMaxSeriesPoints);
  EXPECT_GT(job(id).series.size(), kMaxSeriesPoints / 2);
  EXPECT_EQ(job(id).series.back().samples_per_s, static_cast<double>(kMaxSeriesPoints + 4))
      << "the newest point is kept";
  // Events are bounded.
  RecordHistory flood;
  for (std::size_t k = 0; k < kMaxEvents + 10; ++k) {
    flood.events.push_back(ClusterEvent{static_cast<std::int64_t>(k), "member_alive", "n", "", ""});
  }
  ASSERT_TRUE(apply(flood).ok());
  EXPECT_EQ(table_.history().events.size(), kMaxEvents);
  EXPECT_EQ(table_.history().events.back().at_ms, static_cast<std::int64_t>(kMaxEvents + 9));

  Result<JobTable> back = JobTable::restore(table_.snapshot());
  ASSERT_OK(back);
  EXPECT_TRUE(*back == table_);
  EXPECT_EQ(back->snapshot(), table_.snapshot());
  EXPECT_EQ(before.find("\xa2hi"), std::string::npos) << "no history, no key";
}

TEST_F(TableTest, APreemptedJobIsRequeuedInItsPlace) {
  const std::string id = submit(spec("j", 1, 2, 1000)).job_id;
  ASSERT_TRUE(apply(open(id, 1, 0, ranks({"a", "b"}))).ok());
  ASSERT_TRUE(apply(set(id, 1, JobState::kRunning)).ok());
  // Requeued only with cause preempted, and never as a recovery cause.
  EXPECT_EQ(apply(set(id, 1, JobState::kPending)).message,
            "Job j-1 cannot become pending with cause member_lost: only a preempted job is "
            "requeued.");
  EXPECT_EQ(apply(set(id, 1, JobState::kRecovering, RoundReason::kPreempted)).message,
            "Job j-1 cannot become recovering with cause preempted: a preempted job shrinks (a "
            "new round) or is requeued (pending).");
  EXPECT_EQ(apply(set(id, 0, JobState::kPending, RoundReason::kPreempted)).code,
            ApplyCode::kRejected)
      << "stale round";

  const ApplyResult requeued = apply(set(id, 1, JobState::kPending, RoundReason::kPreempted));
  ASSERT_TRUE(requeued.ok()) << requeued.message;
  EXPECT_EQ(job(id).state, JobState::kPending);
  EXPECT_EQ(job(id).preemptions, 1u);
  EXPECT_EQ(job(id).restarts, 0u);
  EXPECT_EQ(job(id).submitted_at, ms(1000));
  EXPECT_EQ(job(id).events.back().from, JobState::kRunning);
  EXPECT_EQ(job(id).events.back().reason, "because");
  // A pending job is not requeued again.
  EXPECT_EQ(apply(set(id, 1, JobState::kPending, RoundReason::kPreempted)).code,
            ApplyCode::kRejected);

  // It resumes with its next round, from rendezvous and from recovering alike.
  ASSERT_TRUE(apply(open(id, 2, 1, ranks({"b"}))).ok());
  ASSERT_TRUE(apply(set(id, 2, JobState::kRecovering)).ok());
  ASSERT_TRUE(apply(set(id, 2, JobState::kPending, RoundReason::kPreempted)).ok());
  EXPECT_EQ(job(id).preemptions, 2u);
  ASSERT_TRUE(apply(open(id, 3, 2, ranks({"a"}))).ok());
  EXPECT_EQ(job(id).state, JobState::kRendezvous);

  const auto j = nlohmann::json::parse(to_json(job(id)));
  EXPECT_EQ(j["preemptions"], 2);
  EXPECT_EQ(j["priority"], 0);
  EXPECT_EQ(j["preemptible"], false);
  EXPECT_FALSE(nlohmann::json::parse(to_json(job(submit(spec()).job_id))).contains("preemptions"));
}

// Suspended jobs, preemption counts and scheduling fields survive a snapshot; a table that uses
// none of them snapshots to the bytes it had before they existed.
TEST_F(TableTest, SnapshotsKeepSuspensionAndPreemptions) {
  JobSpec plain = spec("plain", 1, 2, 1000);
  const std::string plain_id = submit(plain).job_id;
  ASSERT_TRUE(apply(open(plain_id, 1, 0, ranks({"a"}))).ok());
  const std::string before = table_.snapshot();
  EXPECT_EQ(before.find("\xa2pe"), std::string::npos) << "no preemptions, no preemptible key";
  EXPECT_EQ(before.find("\xa2pr"), std::string::npos) << "no priority key";

  JobSpec fancy = spec("fancy", 1, 2, 1000);
  fancy.priority = 7;
  fancy.preemptible = true;
  fancy.scale = ScaleMode::kThroughput;
  const std::string fancy_id = submit(fancy).job_id;
  ASSERT_TRUE(apply(open(fancy_id, 1, 0, ranks({"b"}))).ok());
  ASSERT_TRUE(apply(set(fancy_id, 1, JobState::kPending, RoundReason::kPreempted)).ok());
  ASSERT_TRUE(apply(SuspendJob{"s", 1, plain_id, false, 1000, false, ms(50)}).ok());
  ASSERT_TRUE(apply(SetPriority{"s", 2, fancy_id, 3, 0, 1000, false, ms(51)}).ok());

  Result<JobTable> back = JobTable::restore(table_.snapshot());
  ASSERT_OK(back);
  EXPECT_EQ(*back, table_);
  EXPECT_EQ(back->snapshot(), table_.snapshot());
  EXPECT_EQ(back->job(plain_id)->state, JobState::kSuspended);
  EXPECT_EQ(back->job(fancy_id)->preemptions, 1u);
  EXPECT_EQ(back->job(fancy_id)->spec.priority, 3);
  EXPECT_TRUE(back->job(fancy_id)->spec.preemptible);
}

TEST(JobTableCodec, PriorityAndSuspendRoundTrip) {
  const std::vector<Command> commands = {
      SetPriority{"client", 13, "train-4", -1000000, 10, 1000, false, ms(81)},
      SetPriority{"client", 14, "train-4", 1000000, -3, 0, true, ms(82)},
      SuspendJob{"client", 15, "train-4", false, 1000, false, ms(83)},
      SuspendJob{"client", 16, "train-4", true, 0, true, ms(84)},
      SetJobState{"train-4", 3, JobState::kPending, RoundReason::kPreempted, "for big-2", ms(85)},
      OpenRound{"train-4", 4, 3, ranks({"a"}), "[::1]:29501", RoundReason::kPreempted,
                "preempted for big-2", ms(86)},
      OpenRound{"train-4", 5, 4, ranks({"a"}), "[::1]:29502", RoundReason::kScaled,
                "throughput scaling: back to 1 node", ms(87)},
      scale_command("train-4", 5, scale_state(3, 2, true, {{1, 100.25}, {2, 199.0}, {3, 0.0}}),
                    "samples/s 199 at 2 nodes vs 100 at 1 (+99%): trying 3", 88),
      scale_command("train-4", 6, ScaleState(), "", 89),
      history_command(),
  };
  for (const Command& c : commands) {
    const std::string bytes = encode_command(c);
    Result<Command> back = decode_command(bytes);
    ASSERT_OK(back);
    EXPECT_EQ(*back, c);
    EXPECT_EQ(encode_command(*back), bytes);
    for (std::size_t n = 0; n < bytes.size(); ++n) {
      EXPECT_FALSE(decode_command(bytes.substr(0, n)).ok()) << n;
    }
  }
  // Kind 6 (SetPriority) with nothing else names what is missing.
  const Result<Command> bare = decode_command(std::string("\x82\xa1v\x01\xa1k\x06", 7));
  ASSERT_FALSE(bare.ok());
  EXPECT_NE(bare.error().message.find("The job table command"), std::string::npos);
}

TEST_F(TableTest, OpenRoundIsACompareAndSetOnTheRound) {
  const std::string id = submit(spec("j", 2, 3)).job_id;
  const ApplyResult first = apply(open(id, 1, 0, ranks({"a", "b"})));
  ASSERT_TRUE(first.ok()) << first.message;
  EXPECT_EQ(job(id).state, JobState::kRendezvous);
  EXPECT_EQ(job(id).round, 1u);
  EXPECT_EQ(job(id).ranks, ranks({"a", "b"}));
  EXPECT_EQ(job(id).store_endpoint, "10.0.0.1:29500");

  // A second leader decided from the same state: refused, the first rank map stays.
  const ApplyResult rival = apply(open(id, 1, 0, ranks({"c", "d"})));
  EXPECT_EQ(rival.code, ApplyCode::kRejected);
  EXPECT_EQ(rival.message,
            "Cannot open round 1 of job j-1: it was decided at round 0 but the job is at round 1.");
  EXPECT_EQ(job(id).ranks, ranks({"a", "b"}));
  // Round numbers only increase.
  EXPECT_EQ(apply(open(id, 1, 1, ranks({"a", "b"}))).message,
            "Cannot open round 1 of job j-1: round numbers must increase past 1.");
  // Skipping numbers is allowed (the leader allocates them).
  EXPECT_TRUE(apply(open(id, 5, 1, ranks({"b", "a"}), RoundReason::kMemberLost)).ok());
  EXPECT_EQ(job(id).round, 5u);
  EXPECT_EQ(job(id).restarts, 0u);  // membership changes do not count
}

struct RankMapCase {
  const char* label;
  RankMap ranks;
  std::uint32_t workers_per_node;
  const char* message;
};

void PrintTo(const RankMapCase& c, std::ostream* os) { *os << c.label; }

class RankMapRules : public ::testing::TestWithParam<RankMapCase> {};

TEST_P(RankMapRules, BadRankMapsAreRefused) {
  JobTable table;
  JobSpec s = spec("j", 2, 3);
  s.workers_per_node = GetParam().workers_per_node;
  ASSERT_TRUE(table.apply(1, SubmitJob{"c", 1, s, ms(1)}).ok());
  const ApplyResult r = table.apply(2, open("j-1", 1, 0, GetParam().ranks));
  EXPECT_EQ(r.code, ApplyCode::kRejected);
  EXPECT_EQ(r.message, GetParam().message);
  EXPECT_EQ(table.job("j-1")->round, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Rules, RankMapRules,
    ::testing::Values(
        RankMapCase{"BelowMin", ranks({"a"}), 0,
                    "Cannot open round 1 of job j-1: its rank map has 1 nodes, outside the job's "
                    "2..3."},
        RankMapCase{"AboveMax", ranks({"a", "b", "c", "d"}), 0,
                    "Cannot open round 1 of job j-1: its rank map has 4 nodes, outside the job's "
                    "2..3."},
        RankMapCase{"DuplicateNode", ranks({"a", "a"}), 0,
                    "Cannot open round 1 of job j-1: its rank map names node a twice."},
        RankMapCase{"ZeroSlots", RankMap{{"a", 1, 1, 0}, {"b", 1, 0, 1}}, 0,
                    "Cannot open round 1 of job j-1: its rank map gives node b no slots."},
        RankMapCase{"RankGap", RankMap{{"a", 1, 1, 0}, {"b", 1, 1, 2}}, 0,
                    "Cannot open round 1 of job j-1: its rank map starts node b at rank 2 "
                    "instead of 1."},
        RankMapCase{"WrongWorkersPerNode", ranks({"a", "b"}, 2), 4,
                    "Cannot open round 1 of job j-1: its rank map gives node a 2 slots, not the "
                    "job's workers_per_node 4."}),
    [](const auto& param_info) { return std::string(param_info.param.label); });

TEST_F(TableTest, WorkerFailuresConsumeRestartsUntilExhausted) {
  const std::string id = submit(spec("j", 1, 2, 1000, /*max_restarts=*/2)).job_id;
  ASSERT_TRUE(apply(open(id, 1, 0, ranks({"a"}))).ok());
  ASSERT_TRUE(apply(open(id, 2, 1, ranks({"a"}), RoundReason::kWorkerFailed)).ok());
  EXPECT_EQ(job(id).restarts, 1u);
  ASSERT_TRUE(apply(open(id, 3, 2, ranks({"a"}), RoundReason::kGrow)).ok());
  ASSERT_TRUE(apply(open(id, 4, 3, ranks({"a"}), RoundReason::kWorkerFailed)).ok());
  EXPECT_EQ(job(id).restarts, 2u);
  const ApplyResult exhausted = apply(open(id, 5, 4, ranks({"a"}), RoundReason::kWorkerFailed));
  EXPECT_EQ(exhausted.code, ApplyCode::kRejected);
  EXPECT_EQ(exhausted.message, "Cannot open round 5 of job j-1: the job has used all 2 restarts.");
  EXPECT_EQ(job(id).round, 4u);
  EXPECT_EQ(job(id).restarts, 2u);
  EXPECT_TRUE(apply(open(id, 5, 4, ranks({"a"}), RoundReason::kMemberLost)).ok());
  EXPECT_EQ(job(id).events.back().reason, "round 5 opened (member_lost)");
}

// Every (from state, target state) pair of SetJobState.
struct TransitionCase {
  JobState from;
  JobState to;
  bool allowed;
};

void PrintTo(const TransitionCase& c, std::ostream* os) {
  *os << to_string(c.from) << " -> " << to_string(c.to);
}

class Transitions : public ::testing::TestWithParam<TransitionCase> {};

// Builds a table whose job "j-1" is in `state` (round 1 unless pending).
JobTable table_in(JobState state) {
  JobTable t;
  Index i = 0;
  EXPECT_TRUE(t.apply(++i, SubmitJob{"c", 1, spec("j", 1, 2), ms(1)}).ok());
  if (state == JobState::kPending) return t;
  EXPECT_TRUE(t.apply(++i, open("j-1", 1, 0, ranks({"a"}))).ok());
  switch (state) {
    case JobState::kRunning:
      EXPECT_TRUE(t.apply(++i, set("j-1", 1, JobState::kRunning)).ok());
      break;
    case JobState::kRecovering:
    case JobState::kSucceeded:
    case JobState::kFailed:
      EXPECT_TRUE(t.apply(++i, set("j-1", 1, state)).ok());
      break;
    case JobState::kCancelled:
      EXPECT_TRUE(t.apply(++i, CancelJob{"c", 2, "j-1", 1000, false, ms(3)}).ok());
      break;
    case JobState::kSuspended:
      EXPECT_TRUE(t.apply(++i, SuspendJob{"c", 2, "j-1", false, 1000, false, ms(3)}).ok());
      break;
    default:
      break;
  }
  EXPECT_EQ(t.job("j-1")->state, state);
  return t;
}

TEST_P(Transitions, FollowTheTable) {
  const TransitionCase c = GetParam();
  JobTable t = table_in(c.from);
  const JobRecord before = *t.job("j-1");
  const ApplyResult r = t.apply(100, set("j-1", before.round, c.to));
  EXPECT_EQ(r.ok(), c.allowed) << r.message;
  EXPECT_EQ(t.job("j-1")->state, c.allowed ? c.to : c.from);
  if (!c.allowed) {
    EXPECT_EQ(*t.job("j-1"), before);
    EXPECT_FALSE(r.message.empty());
  }
}

std::vector<TransitionCase> all_transitions() {
  using S = JobState;
  const std::set<std::pair<S, S>> allowed = {
      {S::kPending, S::kFailed},        {S::kRendezvous, S::kRunning},
      {S::kRendezvous, S::kRecovering}, {S::kRendezvous, S::kSucceeded},
      {S::kRendezvous, S::kFailed},     {S::kRunning, S::kRecovering},
      {S::kRunning, S::kSucceeded},     {S::kRunning, S::kFailed},
      {S::kRecovering, S::kFailed},     {S::kSuspended, S::kFailed},
  };
  std::vector<TransitionCase> cases;
  for (std::uint8_t f = 0; f <= kMaxJobState; ++f) {
    for (std::uint8_t t = 0; t <= kMaxJobState; ++t) {
      const auto from = static_cast<S>(f);
      const auto to = static_cast<S>(t);
      cases.push_back({from, to, allowed.contains({from, to})});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(All, Transitions, ::testing::ValuesIn(all_transitions()),
                         [](const auto& param_info) {
                           return std::string(to_string(param_info.param.from)) + "_to_" +
                                  to_string(param_info.param.to);
                         });

TEST_F(TableTest, SetJobStateRefusesStaleAndFutureRounds) {
  const std::string id = submit(spec()).job_id;
  ASSERT_TRUE(apply(open(id, 1, 0, ranks({"a"}))).ok());
  ASSERT_TRUE(apply(open(id, 2, 1, ranks({"a"}), RoundReason::kMemberLost)).ok());
  const ApplyResult stale = apply(set(id, 1, JobState::kRunning));
  EXPECT_EQ(stale.code, ApplyCode::kRejected);
  EXPECT_EQ(stale.message, "Job train-1 cannot become running for round 1: the job is at round 2.");
  EXPECT_EQ(apply(set(id, 3, JobState::kRunning)).code, ApplyCode::kRejected);
  EXPECT_TRUE(apply(set(id, 2, JobState::kRunning)).ok());
  ASSERT_TRUE(apply(set(id, 2, JobState::kRecovering, RoundReason::kWorkerFailed)).ok());
  EXPECT_EQ(job(id).recovery_cause, RoundReason::kWorkerFailed);
  EXPECT_EQ(job(id).state_since, ms(3000));
  // Terminal states are final, even for OpenRound.
  ASSERT_TRUE(apply(set(id, 2, JobState::kFailed)).ok());
  EXPECT_EQ(apply(open(id, 3, 2, ranks({"a"}))).message,
            "Cannot open round 3 of job train-1: the job is failed.");
}

TEST_F(TableTest, EveryChangeIsLoggedAndTheLogIsBounded) {
  const std::string id = submit(spec("j", 1, 1, 1000, 0)).job_id;
  ASSERT_TRUE(apply(open(id, 1, 0, ranks({"a"}), RoundReason::kSubmitted, 5)).ok());
  ASSERT_TRUE(apply(set(id, 1, JobState::kRunning, RoundReason::kMemberLost, 6)).ok());
  const std::vector<JobEvent>& ev = job(id).events;
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[1], (JobEvent{ms(5), 1, JobState::kPending, JobState::kRendezvous,
                             "round 1 opened (submitted)"}));
  EXPECT_EQ(ev[2], (JobEvent{ms(6), 1, JobState::kRendezvous, JobState::kRunning, "because"}));
  for (std::uint64_t r = 2; r < kMaxEventsPerJob + 50; ++r) {
    ASSERT_TRUE(apply(open(id, r, r - 1, ranks({"a"}), RoundReason::kGrow)).ok());
  }
  EXPECT_EQ(job(id).events.size(), kMaxEventsPerJob);
  EXPECT_EQ(job(id).events.back().round, kMaxEventsPerJob + 49);
}

TEST_F(TableTest, TerminalJobsAreBounded) {
  for (std::size_t i = 0; i < kMaxTerminalJobs + 2; ++i) {
    const std::string id = submit(spec("j")).job_id;
    ASSERT_TRUE(apply(CancelJob{"admin", i + 1, id, 0, true, ms(1)}).ok());
  }
  EXPECT_EQ(table_.jobs().size(), kMaxTerminalJobs);
  EXPECT_EQ(table_.job("j-1"), nullptr);  // the two that ended first are forgotten
  EXPECT_EQ(table_.job("j-2"), nullptr);
  EXPECT_NE(table_.job("j-3"), nullptr);
  // Active jobs are never forgotten.
  const std::string active = submit(spec("keep")).job_id;
  for (std::size_t i = 0; i < 5; ++i) {
    const std::string id = submit(spec("j")).job_id;
    ASSERT_TRUE(apply(CancelJob{"admin", 5000 + i, id, 0, true, ms(1)}).ok());
  }
  EXPECT_NE(table_.job(active), nullptr);
}

TEST_F(TableTest, ClientSessionsAreBounded) {
  for (std::size_t i = 0; i <= kMaxClientSessions; ++i) {
    // Refused cancels are remembered like any result, and cost no job.
    apply(CancelJob{"client-" + std::to_string(i), 1, "none-1", 0, true, ms(1)});
  }
  EXPECT_EQ(table_.clients().size(), kMaxClientSessions);
  EXPECT_EQ(table_.clients().count("client-0"), 0u);  // the least recently active
  EXPECT_EQ(table_.clients().count("client-1"), 1u);
}

TEST_F(TableTest, ActiveJobsAreBounded) {
  for (std::size_t i = 0; i < kMaxActiveJobs; ++i) ASSERT_TRUE(submit(spec()).ok());
  const ApplyResult r = submit(spec());
  EXPECT_EQ(r.code, ApplyCode::kRejected);
  EXPECT_EQ(r.message,
            "The cluster already has 10000 active jobs, the most it keeps; wait for some to "
            "finish.");
}

// ---------------------------------------------------------------------------------------------
// Drained nodes

TEST_F(TableTest, DrainAndUndrainAreApplied) {
  const ApplyResult r = apply(DrainNode{"ops-1", 1, "gpu-07", true, "bad DIMM", 0, true, ms(4000)});
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_FALSE(r.duplicate);
  ASSERT_EQ(table_.drained().size(), 1u);
  EXPECT_EQ(table_.drained().at("gpu-07"), (NodeDrain{"bad DIMM", ms(4000), 0}));
  ASSERT_TRUE(drain("gpu-08.cluster_a", true, "").ok());
  EXPECT_EQ(table_.drained().size(), 2u);

  const ApplyResult undrain = drain("gpu-07", false);
  ASSERT_TRUE(undrain.ok()) << undrain.message;
  EXPECT_EQ(table_.drained().count("gpu-07"), 0u);
  EXPECT_EQ(table_.drained().count("gpu-08.cluster_a"), 1u);
  // Drains touch no job and no job touches drains.
  EXPECT_TRUE(table_.jobs().empty());
  ASSERT_TRUE(submit(spec()).ok());
  EXPECT_EQ(table_.drained().size(), 1u);
}

TEST_F(TableTest, OnlyAdminsMayDrainOrUndrain) {
  const ApplyResult r = drain("gpu-07", true, "mine", /*is_admin=*/false);
  EXPECT_EQ(r.code, ApplyCode::kDenied);
  EXPECT_EQ(r.message, "Only root or members of control.admin_group may drain nodes.");
  EXPECT_TRUE(table_.drained().empty());
  ASSERT_TRUE(drain("gpu-07").ok());
  EXPECT_EQ(drain("gpu-07", false, "", /*is_admin=*/false).code, ApplyCode::kDenied);
  EXPECT_EQ(table_.drained().count("gpu-07"), 1u);
}

struct DrainRefusalCase {
  const char* label;
  std::string node;
  std::string reason;
  std::int64_t at;
  const char* message;
};

void PrintTo(const DrainRefusalCase& c, std::ostream* os) { *os << c.label; }

class DrainRefusals : public ::testing::TestWithParam<DrainRefusalCase> {};

TEST_P(DrainRefusals, LeaveTheTableAsItWas) {
  JobTable t;
  ASSERT_TRUE(t.apply(1, DrainNode{"ops", 1, "keep", true, "", 0, true, ms(1)}).ok());
  const std::map<std::string, NodeDrain> before = t.drained();
  const DrainRefusalCase& c = GetParam();
  // Decoded commands: the codec already refuses over-long reasons, and times before 1970
  // cannot be encoded (they encode as 0).
  const ApplyResult r = t.apply(2, DrainNode{"ops", 2, c.node, true, c.reason, 0, true, ms(c.at)});
  EXPECT_EQ(r.code, ApplyCode::kRejected);
  EXPECT_EQ(r.message, c.message);
  EXPECT_EQ(t.drained(), before);
  // Undrains get the same checks.
  EXPECT_EQ(t.apply(3, DrainNode{"ops", 3, c.node, false, c.reason, 0, true, ms(c.at)}).message,
            c.message);
}

INSTANTIATE_TEST_SUITE_P(
    Rules, DrainRefusals,
    ::testing::Values(
        DrainRefusalCase{"EmptyName", "", "", 1, "The node name is empty."},
        DrainRefusalCase{"LongName", std::string(kMaxDrainNodeBytes + 1, 'n'), "", 1,
                         "The node name is 257 bytes long, more than the 256 a node name may "
                         "have."},
        DrainRefusalCase{"Space", "gpu 07", "", 1,
                         "The node name may hold only letters, digits, '.', '_' and '-', as host "
                         "names do."},
        DrainRefusalCase{"Slash", "gpu/07", "", 1,
                         "The node name may hold only letters, digits, '.', '_' and '-', as host "
                         "names do."},
        DrainRefusalCase{"NonAscii", "gp\xc3\xbc", "", 1,
                         "The node name may hold only letters, digits, '.', '_' and '-', as host "
                         "names do."},
        DrainRefusalCase{"LongReason", "gpu-07", std::string(kMaxReasonBytes + 1, 'r'), 1,
                         "The drain reason is longer than 1024 bytes."},
        DrainRefusalCase{"Before1970", "gpu-07", "", -1, "The drain time is before 1970."}),
    [](const auto& param_info) { return std::string(param_info.param.label); });

TEST_F(TableTest, LimitsAreInclusive) {
  EXPECT_TRUE(
      drain(std::string(kMaxDrainNodeBytes, 'n'), true, std::string(kMaxReasonBytes, 'r')).ok());
  EXPECT_TRUE(drain("A-Za-z0-9._", true).ok());
  EXPECT_EQ(table_.drained().size(), 2u);
}

TEST_F(TableTest, RetriedDrainIsAnsweredOnce) {
  const DrainNode first{"ops-a", 4, "gpu-07", true, "fan", 0, true, ms(10)};
  ASSERT_TRUE(apply(first).ok());
  // Another admin undrains it; then the first drain arrives again through a new leader.
  ASSERT_TRUE(apply(DrainNode{"ops-b", 1, "gpu-07", false, "", 0, true, ms(11)}).ok());
  const ApplyResult again = apply(DrainNode{"ops-a", 4, "gpu-07", true, "fan", 0, true, ms(99)});
  EXPECT_TRUE(again.ok());
  EXPECT_TRUE(again.duplicate);
  EXPECT_TRUE(table_.drained().empty());  // not drained a second time
  // Older sequence numbers too.
  EXPECT_TRUE(apply(DrainNode{"ops-a", 2, "gpu-09", true, "", 0, true, ms(12)}).duplicate);
  EXPECT_TRUE(table_.drained().empty());
  // Refusals are remembered like any result.
  const ApplyResult refused = apply(DrainNode{"ops-a", 5, "gpu-07", true, "", 0, false, ms(13)});
  EXPECT_EQ(refused.code, ApplyCode::kDenied);  // not an admin
  const ApplyResult refused_again =
      apply(DrainNode{"ops-a", 5, "gpu-07", true, "", 0, true, ms(14)});
  EXPECT_EQ(refused_again.code, ApplyCode::kDenied);
  EXPECT_TRUE(refused_again.duplicate);
  EXPECT_EQ(refused_again.message, refused.message);
  EXPECT_TRUE(table_.drained().empty());
  EXPECT_EQ(table_.clients().at("ops-a").last_seq, 5u);
  // Without a client identity nothing can be applied exactly once.
  EXPECT_EQ(apply(DrainNode{"", 1, "gpu-07", true, "", 0, true, ms(1)}).code, ApplyCode::kRejected);
  EXPECT_EQ(apply(DrainNode{"ops-c", 0, "gpu-07", true, "", 0, true, ms(1)}).code,
            ApplyCode::kRejected);
  EXPECT_TRUE(table_.drained().empty());
}

TEST_F(TableTest, DrainAndUndrainAreIdempotent) {
  ASSERT_TRUE(drain("gpu-07", true, "fan", true, 100).ok());
  // Draining again applies and keeps the first reason and time: the node has been out of
  // service since then.
  const ApplyResult again = drain("gpu-07", true, "still the fan", true, 200);
  EXPECT_TRUE(again.ok());
  EXPECT_FALSE(again.duplicate);
  EXPECT_EQ(table_.drained().at("gpu-07"), (NodeDrain{"fan", ms(100), 0}));
  // Undraining a node that is not drained applies and changes nothing.
  const JobTable before = table_;
  const ApplyResult undrain = drain("gpu-99", false);
  EXPECT_TRUE(undrain.ok());
  EXPECT_EQ(table_.drained(), before.drained());
  ASSERT_TRUE(drain("gpu-07", false).ok());
  EXPECT_TRUE(drain("gpu-07", false).ok());
  EXPECT_TRUE(table_.drained().empty());
}

TEST_F(TableTest, DrainedNodesAreBounded) {
  for (std::size_t i = 0; i < kMaxDrainedNodes; ++i) {
    ASSERT_TRUE(table_
                    .apply(++index_, DrainNode{"bulk", i + 1, "n" + std::to_string(i), true,
                                               "rack 9", 0, true, ms(1)})
                    .ok());
  }
  const ApplyResult r = drain("one-more");
  EXPECT_EQ(r.code, ApplyCode::kRejected);
  EXPECT_EQ(r.message,
            "The cluster already has 100000 drained nodes, the most it keeps; undrain some "
            "first.");
  // Re-draining one that is drained and undraining still work at the bound.
  EXPECT_TRUE(drain("n7").ok());
  ASSERT_TRUE(drain("n7", false).ok());
  EXPECT_TRUE(drain("one-more").ok());
  EXPECT_EQ(table_.drained().size(), kMaxDrainedNodes);
  // A full table snapshots and restores (the list stays within the wire's array limit).
  const std::string snap = table_.snapshot();
  Result<JobTable> restored = JobTable::restore(snap);
  ASSERT_OK(restored);
  EXPECT_EQ(restored->drained(), table_.drained());
  EXPECT_EQ(restored->snapshot(), snap);
}

TEST_F(TableTest, SnapshotsKeepDrainedNodes) {
  ASSERT_TRUE(submit(spec()).ok());
  ASSERT_TRUE(drain("gpu-07", true, "fan", true, 100).ok());
  ASSERT_TRUE(drain("cpu-01", true, "", true, 200).ok());
  ASSERT_TRUE(drain("gpu-08", true, "psu", true, 300).ok());
  ASSERT_TRUE(drain("gpu-08", false).ok());
  const std::string snap = table_.snapshot();
  Result<JobTable> restored = JobTable::restore(snap);
  ASSERT_OK(restored);
  EXPECT_TRUE(*restored == table_);
  EXPECT_EQ(restored->snapshot(), snap);
  EXPECT_EQ(restored->drained(),
            (std::map<std::string, NodeDrain>{{"cpu-01", NodeDrain{"", ms(200), 0}},
                                              {"gpu-07", NodeDrain{"fan", ms(100), 0}}}));
  // The same commands in another table give the same bytes.
  JobTable twin;
  Index i = 0;
  ASSERT_TRUE(twin.apply(++i, SubmitJob{"c1", 1, spec(), ms(1000)}).ok());
  for (const DrainNode& d : {DrainNode{"ops", 1, "gpu-07", true, "fan", 0, true, ms(100)},
                             DrainNode{"ops", 2, "cpu-01", true, "", 0, true, ms(200)},
                             DrainNode{"ops", 3, "gpu-08", true, "psu", 0, true, ms(300)},
                             DrainNode{"ops", 4, "gpu-08", false, "bad DIMM", 0, true, ms(4000)}}) {
    ASSERT_TRUE(twin.apply(++i, d).ok());
  }
  EXPECT_EQ(twin.snapshot(), snap);
  // Undraining everything returns to the format without drained nodes.
  ASSERT_TRUE(drain("gpu-07", false).ok());
  ASSERT_TRUE(drain("cpu-01", false).ok());
  Result<JobTable> empty = JobTable::restore(table_.snapshot());
  ASSERT_OK(empty);
  EXPECT_TRUE(empty->drained().empty());
  EXPECT_EQ(empty->snapshot(), table_.snapshot());
}

// The bytes a daemon wrote before DrainNode existed: {"v":1,"ai":7,"nj":0,"jobs":[],"cl":[{"id":
// "c","s":1,"c":0,"j":"","m":"","i":3}]}, spelled out so a change to snapshot() cannot hide a
// break of the old format.
// (Octal escapes, so no letter after an escape is read as a digit.)
const std::string kSnapshotWithoutDrains =
    "\205"                  // a map of 5
    "\241v\001"             // "v": 1
    "\242ai\007"            // "ai": 7
    "\242nj\000"            // "nj": 0
    "\244jobs\220"          // "jobs": []
    "\242cl\221\206"        // "cl": [{ (6 keys)
    "\242id\241c\241s\001"  // "id": "c", "s": 1
    "\241c\000\241j\240"    // "c": 0, "j": ""
    "\241m\240\241i\003"s;  // "m": "", "i": 3 }]

TEST(JobTableSnapshot, RestoresSnapshotsWrittenBeforeDrains) {
  Result<JobTable> old = JobTable::restore(kSnapshotWithoutDrains);
  ASSERT_OK(old);
  EXPECT_EQ(old->applied_index(), 7u);
  EXPECT_TRUE(old->drained().empty());
  ASSERT_EQ(old->clients().size(), 1u);
  EXPECT_EQ(old->clients().at("c").last_index, 3u);
  // A table without drains still writes exactly the old bytes.
  EXPECT_EQ(old->snapshot(), kSnapshotWithoutDrains);
  // And it goes on applying, drains included.
  ASSERT_TRUE(old->apply(8, DrainNode{"c", 2, "gpu-07", true, "", 0, true, ms(1)}).ok());
  Result<JobTable> again = JobTable::restore(old->snapshot());
  ASSERT_OK(again);
  EXPECT_EQ(again->drained().size(), 1u);
}

TEST(JobTableSnapshot, BadDrainedSectionsAreRefused) {
  // Built from the old bytes: one more key in the top map (0x85 -> 0x86) and a "dr" value.
  auto with_drained = [](const std::string& dr_value) {
    std::string bytes = kSnapshotWithoutDrains;
    bytes[0] = '\x86';
    return bytes + "\242dr" + dr_value;
  };
  // {"n":"a","rs":"","at":1,"bu":0}
  const std::string entry_a = "\204\241n\241a\242rs\240\242at\001\242bu\000"s;
  ASSERT_OK(JobTable::restore(with_drained("\x91" + entry_a)));
  EXPECT_EQ(JobTable::restore(with_drained("\x91" + entry_a))->drained().count("a"), 1u);
  // An empty list is read as no drained nodes.
  ASSERT_OK(JobTable::restore(with_drained("\x90")));
  EXPECT_FALSE(JobTable::restore(with_drained("\x92" + entry_a + entry_a)).ok());  // twice
  EXPECT_FALSE(JobTable::restore(with_drained("\xc0")).ok());                      // not a list
  EXPECT_FALSE(JobTable::restore(with_drained("\x91\x80")).ok());                  // no fields
  std::string bad_name = entry_a;
  bad_name[4] = ' ';
  EXPECT_FALSE(JobTable::restore(with_drained("\x91" + bad_name)).ok());
}

TEST(JobTableJson, DrainedNodesAsJson) {
  JobTable t;
  EXPECT_EQ(drained_to_json(t), "{}");
  ASSERT_TRUE(t.apply(1, DrainNode{"c", 1, "gpu-07", true, "fan \"3\"", 0, true, ms(1234)}).ok());
  ASSERT_TRUE(t.apply(2, DrainNode{"c", 2, "cpu-01", true, "", 0, true, ms(5)}).ok());
  const auto j = nlohmann::json::parse(drained_to_json(t));
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j["gpu-07"]["reason"], "fan \"3\"");
  EXPECT_EQ(j["gpu-07"]["at_ms"], 1234);
  EXPECT_EQ(j["gpu-07"]["by_uid"], 0);
  EXPECT_EQ(j["cpu-01"]["reason"], "");
}

TEST(JobTableCodec, CommandsRoundTrip) {
  JobSpec s = spec();
  s.env["A"] = "b";
  s.last_call = 3s;
  const std::vector<Command> commands = {
      SubmitJob{"client", 9, s, ms(123456)},
      CancelJob{"client", 10, "train-4", 1000, true, ms(5)},
      OpenRound{"train-4", 3, 2, ranks({"a", "b"}), "[::1]:29501", RoundReason::kGrow,
                "2 nodes joined", ms(77)},
      SetJobState{"train-4", 3, JobState::kRecovering, RoundReason::kWorkerFailed, "rank 1",
                  ms(78)},
      DrainNode{"client", 11, "gpu-07", true, "bad DIMM", 1000, true, ms(79)},
      DrainNode{"client", 12, "gpu-07", false, "", 0, false, ms(80)},
  };
  for (const Command& c : commands) {
    const std::string bytes = encode_command(c);
    Result<Command> back = decode_command(bytes);
    ASSERT_OK(back);
    EXPECT_EQ(*back, c);
    EXPECT_EQ(encode_command(*back), bytes);
  }
}

TEST(JobTableCodec, TruncatedOrIncompleteDrainsAreMalformed) {
  const std::string bytes =
      encode_command(DrainNode{"client", 11, "gpu-07", true, "bad DIMM", 1000, true, ms(79)});
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(decode_command(bytes.substr(0, n)).ok()) << n;
  }
  // Version 1, kind 5 (DrainNode) and nothing else.
  const Result<Command> bare = decode_command(std::string("\x82\xa1v\x01\xa1k\x05", 7));
  ASSERT_FALSE(bare.ok());
  EXPECT_NE(bare.error().message.find("The job table command"), std::string::npos)
      << bare.error().message;
  // A node name beyond the wire's name limit is malformed, not merely refused.
  EXPECT_FALSE(
      decode_command(encode_command(DrainNode{"c", 1, std::string(wire::kMaxNameBytes + 1, 'n'),
                                              true, "", 0, true, ms(1)}))
          .ok());
  EXPECT_TRUE(decode_command(encode_command(DrainNode{"c", 1, std::string(wire::kMaxNameBytes, 'n'),
                                                      true, "", 0, true, ms(1)}))
                  .ok());
}

TEST(JobTableCodec, GarbageIsMalformedAndChangesNothing) {
  JobTable t;
  ASSERT_TRUE(t.apply(1, SubmitJob{"c", 1, spec(), ms(1)}).ok());
  const auto jobs = t.jobs();
  const auto clients = t.clients();
  const std::string good = encode_command(SubmitJob{"c", 2, spec(), ms(1)});
  const std::vector<std::string> garbage = {
      "",
      "\xc1",
      "hello",
      good.substr(0, good.size() - 1),
      good + "x",
      // version 2, kind 1
      std::string("\x82\xa1v\x02\xa1k\x01", 7),
      // version 1, kind 9
      std::string("\x82\xa1v\x01\xa1k\x0a", 7),
  };
  Index i = 1;
  for (const std::string& g : garbage) {
    const ApplyResult r = t.apply(++i, g);
    EXPECT_EQ(r.code, ApplyCode::kMalformed);
    EXPECT_FALSE(r.message.empty());
  }
  EXPECT_EQ(t.jobs(), jobs);
  EXPECT_EQ(t.clients(), clients);
  EXPECT_EQ(t.applied_index(), i);
  EXPECT_EQ(decode_command(garbage[5]).error().message,
            "The job table command has version 2, this daemon reads version 1.");
  EXPECT_EQ(decode_command(garbage[6]).error().message,
            "The job table command has an unknown kind 10.");
}

TEST(JobTableDeathTest, ApplyingAnIndexTwiceAborts) {
  JobTable t;
  ASSERT_TRUE(t.apply(5, SubmitJob{"c", 1, spec(), ms(1)}).ok());
  EXPECT_DEATH(t.apply(5, SubmitJob{"c", 2, spec(), ms(1)}), "broken invariant");
}

TEST(JobTableJson, RecordAsJson) {
  JobTable t;
  ASSERT_TRUE(t.apply(1, SubmitJob{"c", 1, spec(), ms(1)}).ok());
  ASSERT_TRUE(t.apply(2, open("train-1", 1, 0, ranks({"a", "b"}))).ok());
  const auto j = nlohmann::json::parse(to_json(*t.job("train-1"), 1));
  EXPECT_EQ(j["id"], "train-1");
  EXPECT_EQ(j["state"], "rendezvous");
  EXPECT_EQ(j["round"], 1);
  EXPECT_EQ(j["world_size"], 4);
  EXPECT_EQ(j["ranks"][1]["node"], "b");
  EXPECT_EQ(j["ranks"][1]["first_rank"], 2);
  EXPECT_EQ(j["spec"]["name"], "train");
  ASSERT_EQ(j["events"].size(), 1u);
  EXPECT_EQ(j["events"][0]["to"], "rendezvous");
}

// ---------------------------------------------------------------------------------------------
// Model check: random commands (with retries, duplicates, stale and rival OpenRounds) against a
// small reference model of the rules.

struct ModelJob {
  JobState state = JobState::kPending;
  std::uint64_t round = 0;
  std::uint32_t restarts = 0;
  std::uint32_t uid = 0;
  std::uint32_t min = 1, max = 1, max_restarts = 0;
  std::int32_t priority = 0;
  bool throughput = false;
};

struct Model {
  std::map<std::string, ModelJob> jobs;
  std::map<std::string, std::pair<std::uint64_t, ApplyResult>> clients;
  std::set<std::string> drained;
  std::uint64_t created = 0;

  static bool allowed(JobState from, JobState to) {
    using S = JobState;
    if (is_terminal(from)) return false;
    if (to == S::kRunning) return from == S::kRendezvous;
    if (to == S::kRecovering || to == S::kSucceeded) {
      return from == S::kRendezvous || from == S::kRunning;
    }
    return to == S::kFailed;
  }

  ApplyCode expect(const Command& command) {
    if (const auto* s = std::get_if<SubmitJob>(&command)) {
      if (clients.contains(s->client_id) && s->client_seq <= clients[s->client_id].first) {
        return clients[s->client_id].second.code;
      }
      const bool valid = validate(s->spec).ok();
      ApplyResult r{valid ? ApplyCode::kApplied : ApplyCode::kRejected, "", "", false};
      if (valid) {
        r.job_id = s->spec.name + "-" + std::to_string(++created);
        jobs[r.job_id] = ModelJob{JobState::kPending,
                                  0,
                                  0,
                                  s->spec.uid,
                                  s->spec.min_nodes,
                                  s->spec.max_nodes,
                                  s->spec.max_restarts,
                                  s->spec.priority,
                                  s->spec.scale == ScaleMode::kThroughput};
      }
      clients[s->client_id] = {s->client_seq, r};
      return r.code;
    }
    if (const auto* c = std::get_if<CancelJob>(&command)) {
      if (clients.contains(c->client_id) && c->client_seq <= clients[c->client_id].first) {
        return clients[c->client_id].second.code;
      }
      ApplyCode code = ApplyCode::kRejected;
      auto it = jobs.find(c->job_id);
      if (it != jobs.end() && !is_terminal(it->second.state)) {
        if (c->is_admin || c->by_uid == it->second.uid) {
          it->second.state = JobState::kCancelled;
          code = ApplyCode::kApplied;
        } else {
          code = ApplyCode::kDenied;  // a live job of someone else
        }
      }
      clients[c->client_id] = {c->client_seq, ApplyResult{code, c->job_id, "", false}};
      return code;
    }
    if (const auto* d = std::get_if<DrainNode>(&command)) {
      if (clients.contains(d->client_id) && d->client_seq <= clients[d->client_id].first) {
        return clients[d->client_id].second.code;
      }
      // The generator's only bad name is "bad node".
      const bool ok = d->is_admin && d->node != "bad node";
      if (ok && d->drained) drained.insert(d->node);
      if (ok && !d->drained) drained.erase(d->node);
      const ApplyCode code = ok             ? ApplyCode::kApplied
                             : !d->is_admin ? ApplyCode::kDenied
                                            : ApplyCode::kRejected;
      clients[d->client_id] = {d->client_seq, ApplyResult{code, "", "", false}};
      return code;
    }
    if (const auto* p = std::get_if<SetPriority>(&command)) {
      if (clients.contains(p->client_id) && p->client_seq <= clients[p->client_id].first) {
        return clients[p->client_id].second.code;
      }
      ApplyCode code = ApplyCode::kRejected;
      auto it = jobs.find(p->job_id);
      if (it != jobs.end() && !is_terminal(it->second.state)) {
        ModelJob& j = it->second;
        const bool in_range = p->priority >= kMinPriority && p->priority <= kMaxPriority;
        const bool raises_past_ceiling = p->priority > p->ceiling && p->priority > j.priority;
        if (!p->is_admin && p->by_uid != j.uid) {
          code = ApplyCode::kDenied;
        } else if (in_range && !p->is_admin && raises_past_ceiling) {
          code = ApplyCode::kDenied;
        } else if (in_range) {
          j.priority = p->priority;
          code = ApplyCode::kApplied;
        }
      }
      clients[p->client_id] = {p->client_seq, ApplyResult{code, p->job_id, "", false}};
      return code;
    }
    if (const auto* u = std::get_if<SuspendJob>(&command)) {
      if (clients.contains(u->client_id) && u->client_seq <= clients[u->client_id].first) {
        return clients[u->client_id].second.code;
      }
      ApplyCode code = ApplyCode::kRejected;
      auto it = jobs.find(u->job_id);
      if (it != jobs.end() && !is_terminal(it->second.state)) {
        ModelJob& j = it->second;
        if (!u->is_admin && u->by_uid != j.uid) {
          code = ApplyCode::kDenied;
        } else if (u->resume == (j.state == JobState::kSuspended)) {
          j.state = u->resume ? JobState::kPending : JobState::kSuspended;
          code = ApplyCode::kApplied;
        }
      }
      clients[u->client_id] = {u->client_seq, ApplyResult{code, u->job_id, "", false}};
      return code;
    }
    if (const auto* h = std::get_if<RecordHistory>(&command)) {
      bool ok = true;
      for (const JobPoint& p : h->points) ok = ok && p.point.samples_per_s.value_or(0) >= 0;
      for (const Incident& i : h->incidents) ok = ok && i.complete;
      return ok ? ApplyCode::kApplied : ApplyCode::kRejected;
    }
    if (const auto* c = std::get_if<SetScale>(&command)) {
      auto it = jobs.find(c->job_id);
      if (it == jobs.end()) return ApplyCode::kRejected;
      const ModelJob& j = it->second;
      const auto in_range = [&](std::uint32_t n) { return n >= j.min && n <= j.max; };
      bool ok = !is_terminal(j.state) && j.throughput && c->round == j.round &&
                (c->state.size == 0 || in_range(c->state.size)) &&
                (c->state.good == 0 || in_range(c->state.good));
      for (const auto& [n, rate] : c->state.rate) ok = ok && in_range(n) && rate >= 0;
      return ok ? ApplyCode::kApplied : ApplyCode::kRejected;
    }
    if (const auto* o = std::get_if<OpenRound>(&command)) {
      auto it = jobs.find(o->job_id);
      if (it == jobs.end()) return ApplyCode::kRejected;
      ModelJob& j = it->second;
      if (is_terminal(j.state) || j.state == JobState::kSuspended ||
          o->expected_prev_round != j.round || o->round <= j.round || o->ranks.size() < j.min ||
          o->ranks.size() > j.max) {
        return ApplyCode::kRejected;
      }
      if (o->reason == RoundReason::kWorkerFailed) {
        if (j.restarts >= j.max_restarts) return ApplyCode::kRejected;
        ++j.restarts;
      }
      j.round = o->round;
      j.state = JobState::kRendezvous;
      return ApplyCode::kApplied;
    }
    const auto& s = std::get<SetJobState>(command);
    auto it = jobs.find(s.job_id);
    if (it == jobs.end() || s.round != it->second.round || !allowed(it->second.state, s.state)) {
      return ApplyCode::kRejected;
    }
    it->second.state = s.state;
    return ApplyCode::kApplied;
  }
};

class CommandGenerator {
 public:
  explicit CommandGenerator(std::uint64_t seed) : rng_(seed) {}

  Command next(const JobTable& table) {
    const std::uint64_t dice = rng_.below(100);
    if (dice < 10 && last_client_command_) return *last_client_command_;  // a retry
    if (dice < 30) return remember(submit());
    if (dice < 40) return remember(cancel(table));
    if (dice < 62) return open_round(table);
    if (dice < 80) return set_state(table);
    if (dice < 86) return remember(drain());
    if (dice < 91) return remember(priority(table));
    if (dice < 95) return remember(suspend(table));
    if (dice < 98) return scale(table);
    return history(table);
  }

 private:
  Command remember(Command c) {
    last_client_command_ = c;
    return c;
  }

  std::string client() { return "client-" + std::to_string(rng_.below(3)); }

  Command submit() {
    const std::string c = client();
    JobSpec s = spec(rng_.below(2) ? "a" : "b", 1 + static_cast<std::uint32_t>(rng_.below(2)),
                     1 + static_cast<std::uint32_t>(rng_.below(4)),
                     1000 + static_cast<std::uint32_t>(rng_.below(2)),
                     static_cast<std::uint32_t>(rng_.below(3)));
    if (rng_.below(2) == 0) s.scale = ScaleMode::kThroughput;
    return SubmitJob{c, ++seq_[c], s, ms(static_cast<std::int64_t>(rng_.below(1000)))};
  }

  std::string some_job(const JobTable& table) {
    if (table.jobs().empty() || rng_.below(10) == 0) return "ghost-1";
    auto it = table.jobs().begin();
    std::advance(it, static_cast<long>(rng_.below(table.jobs().size())));
    return it->first;
  }

  Command cancel(const JobTable& table) {
    const std::string c = client();
    return CancelJob{c,
                     ++seq_[c],
                     some_job(table),
                     1000 + static_cast<std::uint32_t>(rng_.below(2)),
                     rng_.below(4) == 0,
                     ms(5)};
  }

  Command drain() {
    const std::string c = client();
    const std::string node = rng_.below(10) == 0 ? "bad node" : "n" + std::to_string(rng_.below(5));
    return DrainNode{c,
                     ++seq_[c],
                     node,
                     rng_.below(3) != 0,
                     "maintenance",
                     0,
                     rng_.below(4) != 0,
                     ms(static_cast<std::int64_t>(rng_.below(1000)))};
  }

  Command priority(const JobTable& table) {
    const std::string c = client();
    // Mostly within -10..10 around a ceiling of 0..5; sometimes out of range.
    const std::int32_t p =
        rng_.below(20) == 0 ? kMaxPriority + 1 : static_cast<std::int32_t>(rng_.below(21)) - 10;
    return SetPriority{c,
                       ++seq_[c],
                       some_job(table),
                       p,
                       static_cast<std::int32_t>(rng_.below(6)),
                       1000 + static_cast<std::uint32_t>(rng_.below(2)),
                       rng_.below(4) == 0,
                       ms(6)};
  }

  Command suspend(const JobTable& table) {
    const std::string c = client();
    return SuspendJob{c,
                      ++seq_[c],
                      some_job(table),
                      rng_.below(2) == 0,
                      1000 + static_cast<std::uint32_t>(rng_.below(2)),
                      rng_.below(4) == 0,
                      ms(7)};
  }

  // A throughput-scaling step: mostly for the current round with sizes that fit; sometimes
  // another round, a size beyond any max, a negative rate.
  Command scale(const JobTable& table) {
    const std::string id = some_job(table);
    const JobRecord* j = table.job(id);
    const std::uint64_t round = (j == nullptr || rng_.below(5) == 0) ? rng_.below(3) : j->round;
    ScaleState state;
    state.size = static_cast<std::uint32_t>(rng_.below(5));
    state.good = static_cast<std::uint32_t>(rng_.below(3));
    state.settled = rng_.below(2) == 0;
    if (rng_.below(2) == 0) state.rate[1 + static_cast<std::uint32_t>(rng_.below(2))] = 10.5;
    if (rng_.below(10) == 0) state.rate[1] = -1;
    return SetScale{id, round, state, "measured", ms(8)};
  }

  // The leader's history batch: mostly good; sometimes a negative rate or an open incident.
  Command history(const JobTable& table) {
    RecordHistory c;
    c.points.push_back(JobPoint{some_job(table),
                                SeriesPoint{ms(static_cast<std::int64_t>(rng_.below(100'000))),
                                            rng_.below(4) == 0 ? -1.0 : 10.0, 0.5}});
    Incident i;
    i.id = rng_.below(1000);
    i.job = some_job(table);
    i.cause = "node_lost";
    i.complete = rng_.below(4) != 0;
    i.first_step_s = 1.5;
    c.incidents.push_back(i);
    c.events.push_back(ClusterEvent{static_cast<std::int64_t>(rng_.below(1000)), "member_dead",
                                    "n1", "", ""});
    return c;
  }

  Command open_round(const JobTable& table) {
    const std::string id = some_job(table);
    const JobRecord* j = table.job(id);
    std::uint64_t current = j == nullptr ? 0 : j->round;
    // Mostly fresh decisions; sometimes a stale one from a deposed leader, or a rival.
    const std::uint64_t prev = rng_.below(4) == 0 && current > 0 ? rng_.below(current) : current;
    const std::uint64_t round = rng_.below(5) == 0 ? current : prev + 1 + rng_.below(2);
    std::vector<std::string> nodes;
    const std::uint64_t n = 1 + rng_.below(4);
    for (std::uint64_t k = 0; k < n; ++k) nodes.push_back("n" + std::to_string(rng_.below(100)));
    std::sort(nodes.begin(), nodes.end());
    nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
    return open(id, round, prev, ranks(nodes, 1), static_cast<RoundReason>(rng_.below(4)));
  }

  Command set_state(const JobTable& table) {
    const std::string id = some_job(table);
    const JobRecord* j = table.job(id);
    const std::uint64_t round = (j == nullptr || rng_.below(5) == 0) ? rng_.below(3) : j->round;
    static constexpr JobState kTargets[] = {JobState::kRunning, JobState::kRecovering,
                                            JobState::kSucceeded, JobState::kFailed};
    return set(id, round, kTargets[rng_.below(4)], static_cast<RoundReason>(rng_.below(4)));
  }

  Rng rng_;
  std::map<std::string, std::uint64_t> seq_;
  std::optional<Command> last_client_command_;
};

TEST(JobTableModel, RandomHistoriesMatchTheModel) {
  // (command kind, code, duplicate) -> count, so a vacuous run fails.
  std::map<std::tuple<std::size_t, ApplyCode, bool>, int> seen;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    CommandGenerator gen(seed);
    Model model;
    JobTable table;
    JobTable twin;  // gets the same bytes: must stay byte-identical
    std::map<std::pair<std::string, std::uint64_t>, RankMap> rank_maps;
    std::set<std::pair<std::string, std::uint64_t>> acknowledged;  // (client, seq) applied
    std::set<std::string> acknowledged_jobs;
    Index index = 0;
    for (int step = 0; step < 400; ++step) {
      const Command command = gen.next(table);
      const std::string bytes = encode_command(command);
      index += 1 + (step % 3 == 0 ? 1 : 0);  // Raft no-ops leave gaps
      const ApplyCode expected = model.expect(command);
      const ApplyResult r = table.apply(index, bytes);
      ASSERT_EQ(twin.apply(index, bytes), r);
      ASSERT_EQ(r.code, expected) << "step " << step << ": " << r.message;
      ++seen[{command.index(), r.code, r.duplicate}];

      if (const auto* s = std::get_if<SubmitJob>(&command)) {
        const auto key = std::make_pair(s->client_id, s->client_seq);
        if (r.ok() && !r.duplicate) {
          // No command applied twice.
          ASSERT_TRUE(acknowledged.insert(key).second) << "step " << step;
          acknowledged_jobs.insert(r.job_id);
        }
        if (acknowledged.contains(key)) {
          ASSERT_TRUE(r.ok());
        }
      }
      // Drained nodes follow the model.
      ASSERT_EQ(table.drained().size(), model.drained.size()) << "step " << step;
      for (const std::string& node : model.drained) {
        ASSERT_EQ(table.drained().count(node), 1u) << node << " at step " << step;
      }
      // Every acknowledged submission's job exists.
      for (const std::string& id : acknowledged_jobs) ASSERT_NE(table.job(id), nullptr) << id;
      ASSERT_EQ(table.jobs_created(), acknowledged_jobs.size());
      // Never two rank maps for one (job, round).
      for (const auto& [id, job] : table.jobs()) {
        if (job.round == 0) continue;
        auto [it, inserted] = rank_maps.try_emplace({id, job.round}, job.ranks);
        ASSERT_EQ(it->second, job.ranks) << id << " round " << job.round;
        const ModelJob& m = model.jobs.at(id);
        ASSERT_EQ(job.state, m.state) << id;
        ASSERT_EQ(job.round, m.round) << id;
        ASSERT_EQ(job.restarts, m.restarts) << id;
        ASSERT_EQ(job.spec.priority, m.priority) << id;
      }
      // Snapshots: deterministic, and a restored table continues identically.
      if (step % 50 == 49) {
        const std::string snap = table.snapshot();
        ASSERT_EQ(twin.snapshot(), snap);
        Result<JobTable> restored = JobTable::restore(snap);
        ASSERT_OK(restored);
        ASSERT_EQ(restored->snapshot(), snap);
        ASSERT_TRUE(*restored == table);
        twin = std::move(*restored);
      }
    }
  }
  for (std::size_t kind = 0; kind < std::variant_size_v<Command>; ++kind) {
    EXPECT_GT((seen[{kind, ApplyCode::kApplied, false}]), 50) << kind;
    EXPECT_GT((seen[{kind, ApplyCode::kRejected, false}]), 50) << kind;
  }
  EXPECT_GT((seen[{0, ApplyCode::kApplied, true}]), 50);   // retried submissions
  EXPECT_GT((seen[{1, ApplyCode::kRejected, true}]), 10);  // retried refused cancels
  EXPECT_GT((seen[{1, ApplyCode::kDenied, false}]), 10);   // someone else's job
  EXPECT_GT((seen[{4, ApplyCode::kDenied, false}]), 10);   // drains by non-admins
  EXPECT_GT((seen[{4, ApplyCode::kApplied, true}]), 10);   // retried drains
}

// ---------------------------------------------------------------------------------------------
// Rank deltas (rank_delta.h): an OpenRound's rank map in the log as a change of the job's
// current one.

// `map` with its first ranks contiguous from 0 again.
RankMap renumbered(RankMap map) {
  std::uint32_t next = 0;
  for (RankAssignment& r : map) {
    r.first_rank = next;
    next += r.slots;
  }
  return map;
}

// `count` nodes named as in a large cluster, each with a time-like generation and 8 slots.
RankMap cluster_map(std::uint32_t count) {
  RankMap map;
  for (std::uint32_t i = 0; i < count; ++i) {
    char name[40];
    std::snprintf(name, sizeof(name), "gpu-node-%04u.cluster.example", i);
    map.push_back(RankAssignment{name, 1'790'000'000'000'000'000ULL + i * 1'000'003ULL, 8, 0, 0});
  }
  return renumbered(map);
}

// `map` with `add` more restarts for every entry.
RankMap restarted(RankMap map, std::uint32_t add = 1) {
  for (RankAssignment& r : map) r.restarts += add;
  return map;
}

RankMap without(RankMap map, std::size_t index) {
  map.erase(map.begin() + static_cast<std::ptrdiff_t>(index));
  return renumbered(std::move(map));
}

OpenRound delta_open(std::string job, std::uint64_t round, std::uint64_t prev, RankDelta delta) {
  OpenRound c = open(std::move(job), round, prev, {}, RoundReason::kMemberLost);
  c.delta = std::move(delta);
  return c;
}

RankRun copy_run(std::uint32_t from, std::uint32_t count, std::uint32_t add_restarts = 0) {
  return RankRun{.from = from, .count = count, .add_restarts = add_restarts};
}
RankRun entry_run(const RankAssignment& a) {
  return RankRun{
      .node = a.node, .generation = a.generation, .slots = a.slots, .restarts = a.restarts};
}

// The OpenRound that `bytes` decode to.
OpenRound decoded_open(const std::string& bytes) {
  Result<Command> back = decode_command(bytes);
  EXPECT_TRUE(back.ok()) << (back.ok() ? "" : back.error().message);
  if (!back.ok() || !std::holds_alternative<OpenRound>(*back)) return {};
  return std::get<OpenRound>(*back);
}

TEST(JobTableDelta, DeltaCommandsRoundTrip) {
  const RankMap base = cluster_map(16);
  const OpenRound c = open("j-1", 2, 1, restarted(without(base, 7)), RoundReason::kMemberLost);
  const std::string bytes = encode_command_against(c, base);
  const OpenRound back = decoded_open(bytes);
  EXPECT_TRUE(back.ranks.empty());
  ASSERT_TRUE(back.delta.has_value());
  EXPECT_EQ(*back.delta, (RankDelta{1, 16, {copy_run(0, 7, 1), copy_run(8, 8, 1)}}));
  // Everything but the rank map is the command's own.
  OpenRound expected = c;
  expected.ranks.clear();
  expected.delta = back.delta;
  EXPECT_EQ(back, expected);
  // A decoded delta encodes back to the same bytes (with or without a base).
  EXPECT_EQ(encode_command(back), bytes);
  EXPECT_EQ(encode_command_against(back, base), bytes);
  // The full map is written as before: nothing new in the bytes of older daemons.
  EXPECT_EQ(decoded_open(encode_command(c)), c);
  // No base to copy from (the first round, or a job whose map is gone) or a map that shares
  // nothing with it: the full map.
  EXPECT_EQ(encode_command_against(c, RankMap{}), encode_command(c));
  EXPECT_EQ(encode_command_against(open("j-1", 2, 1, ranks({"a", "b"})), base),
            encode_command(open("j-1", 2, 1, ranks({"a", "b"}))));
  // A map whose first ranks are not contiguous is what no delta means: full (apply refuses it).
  RankMap gap = without(base, 7);
  gap[3].first_rank += 1;
  EXPECT_EQ(encode_command_against(open("j-1", 2, 1, gap), base),
            encode_command(open("j-1", 2, 1, gap)));
  // Other commands ignore the base.
  const Command s = set("j-1", 1, JobState::kRunning);
  EXPECT_EQ(encode_command_against(s, base), encode_command(s));
}

struct DeltaCase {
  const char* label;
  RankMap next;  // the next round's map, from cluster_map(16)
  RoundReason reason;
  std::vector<RankRun> runs;  // what make_rank_delta makes of it
};

void PrintTo(const DeltaCase& c, std::ostream* os) { *os << c.label; }

class DeltaCases : public ::testing::TestWithParam<DeltaCase> {};

// Each change applied as a delta leaves the table exactly as the full map does.
TEST_P(DeltaCases, ApplyAsTheFullMapDoes) {
  const RankMap base = cluster_map(16);
  const DeltaCase& c = GetParam();
  const std::optional<RankDelta> delta = make_rank_delta(1, base, c.next);
  ASSERT_TRUE(delta.has_value());
  EXPECT_EQ(delta->runs, c.runs);

  JobSpec s = spec("j", 1, 32);
  s.workers_per_node = 8;
  JobTable full;
  JobTable by_delta;
  for (JobTable* t : {&full, &by_delta}) {
    ASSERT_TRUE(t->apply(1, SubmitJob{"c", 1, s, ms(1)}).ok());
    ASSERT_TRUE(t->apply(2, encode_command(open("j-1", 1, 0, base))).ok());
    ASSERT_TRUE(t->apply(3, encode_command(set("j-1", 1, JobState::kRunning))).ok());
  }
  OpenRound next = open("j-1", 2, 1, c.next, c.reason);
  if (c.reason == RoundReason::kWorkerFailed) next.failed_node = base[3].node;
  const std::string bytes = encode_command_against(next, base);
  ASSERT_TRUE(decoded_open(bytes).delta.has_value()) << "the full map was smaller";
  EXPECT_LT(bytes.size(), encode_command(next).size());
  const ApplyResult a = full.apply(4, encode_command(next));
  const ApplyResult b = by_delta.apply(4, bytes);
  ASSERT_TRUE(a.ok()) << a.message;
  ASSERT_TRUE(b.ok()) << b.message;
  EXPECT_EQ(by_delta.job("j-1")->ranks, c.next);
  EXPECT_EQ(by_delta.snapshot(), full.snapshot());
}

RankMap one_joined() {
  RankMap next = cluster_map(17);
  RankMap map = cluster_map(16);
  map.push_back(next.back());
  return renumbered(map);
}
RankMap one_replaced() {
  RankMap map = restarted(cluster_map(16));
  map[5].generation += 7;  // the node's daemon restarted: a new member at the same place
  map[5].restarts = 0;
  return map;
}
RankMap one_failed() {
  RankMap map = cluster_map(16);
  map[3].restarts = 1;
  return map;
}

INSTANTIATE_TEST_SUITE_P(
    Changes, DeltaCases,
    ::testing::Values(
        // Every kept node's workers restart (planner.h): one run on each side of the gap.
        DeltaCase{"MiddleNodeLost",
                  restarted(without(cluster_map(16), 7)),
                  RoundReason::kMemberLost,
                  {copy_run(0, 7, 1), copy_run(8, 8, 1)}},
        DeltaCase{"NodeJoinedAtTheEnd",
                  one_joined(),
                  RoundReason::kGrow,
                  {copy_run(0, 16), entry_run(one_joined().back())}},
        DeltaCase{"NodeReplacedInPlace",
                  one_replaced(),
                  RoundReason::kMemberLost,
                  {copy_run(0, 5, 1), entry_run(one_replaced()[5]), copy_run(6, 10, 1)}},
        DeltaCase{"RestartsOfOneNode",
                  one_failed(),
                  RoundReason::kWorkerFailed,
                  {copy_run(0, 3), copy_run(3, 1, 1), copy_run(4, 12)}},
        // The store moves to the next node: ranks shift down by that node's slots.
        DeltaCase{"StoreHostLost",
                  restarted(without(cluster_map(16), 0)),
                  RoundReason::kMemberLost,
                  {copy_run(1, 15, 1)}}),
    [](const auto& param_info) { return std::string(param_info.param.label); });

// The rounds of a job's life applied as full maps and as deltas: byte-identical snapshots after
// every command, and deltas in the log for every round after the first.
TEST(JobTableDelta, SnapshotsAreThoseOfFullMaps) {
  JobSpec s = spec("j", 1, 64);
  s.workers_per_node = 8;
  std::vector<OpenRound> rounds;
  RankMap map = cluster_map(32);
  rounds.push_back(open("j-1", 1, 0, map));
  map = restarted(without(map, 10));
  rounds.push_back(open("j-1", 2, 1, map, RoundReason::kMemberLost));
  map.push_back(cluster_map(40)[35]);
  map = renumbered(map);
  rounds.push_back(open("j-1", 3, 2, map, RoundReason::kGrow));
  map[4].restarts += 1;
  rounds.push_back(open("j-1", 4, 3, map, RoundReason::kWorkerFailed));
  rounds.back().failed_node = map[4].node;
  map = restarted(without(map, 0));
  rounds.push_back(open("j-1", 5, 4, map, RoundReason::kMemberLost));
  std::reverse(map.begin(), map.end());
  rounds.push_back(open("j-1", 6, 5, renumbered(map), RoundReason::kMemberLost));

  JobTable full;
  JobTable by_delta;
  Index index = 0;
  auto both = [&](const Command& c, const RankMap& base) {
    ++index;
    const ApplyResult a = full.apply(index, encode_command(c));
    const std::string bytes = encode_command_against(c, base);
    const ApplyResult b = by_delta.apply(index, bytes);
    EXPECT_EQ(a, b);
    EXPECT_TRUE(a.ok()) << a.message;
    EXPECT_EQ(by_delta.snapshot(), full.snapshot()) << "index " << index;
    return bytes;
  };
  both(SubmitJob{"c", 1, s, ms(1)}, {});
  int deltas = 0;
  for (const OpenRound& round : rounds) {
    const RankMap base = by_delta.job("j-1")->ranks;
    const std::string bytes = both(round, base);
    deltas += decoded_open(bytes).delta.has_value() ? 1 : 0;
    both(set("j-1", round.round, JobState::kRunning), base);
  }
  EXPECT_EQ(deltas, 5);  // all but the first round
  Result<JobTable> restored = JobTable::restore(by_delta.snapshot());
  ASSERT_OK(restored);
  EXPECT_EQ(restored->snapshot(), full.snapshot());
}

struct BadDelta {
  const char* label;
  OpenRound command;
  const char* message;
  bool in_memory = false;  // applied as a Command: no encoding can carry it
};

void PrintTo(const BadDelta& c, std::ostream* os) { *os << c.label; }

class BadDeltas : public ::testing::TestWithParam<BadDelta> {};

// Round 1 of j-1 holds 4 cluster nodes (entry 0 with 1 restart); each delta of round 2 is
// refused with its sentence and changes nothing.
TEST_P(BadDeltas, AreRefusedAndChangeNothing) {
  JobTable table;
  JobSpec s = spec("j", 1, 8);
  ASSERT_TRUE(table.apply(1, SubmitJob{"c", 1, s, ms(1)}).ok());
  RankMap base = cluster_map(4);
  base[0].restarts = 1;
  ASSERT_TRUE(table.apply(2, open("j-1", 1, 0, base)).ok());
  const auto jobs = table.jobs();
  const BadDelta& c = GetParam();
  const ApplyResult r =
      c.in_memory ? table.apply(3, Command{c.command}) : table.apply(3, encode_command(c.command));
  EXPECT_EQ(r.code, ApplyCode::kRejected);
  EXPECT_EQ(r.message, c.message);
  EXPECT_EQ(table.jobs(), jobs);
}

RankDelta delta_of(std::vector<RankRun> runs, std::uint64_t base_round = 1,
                   std::uint32_t base_size = 4) {
  return RankDelta{base_round, base_size, std::move(runs)};
}

std::vector<RankRun> too_many_runs() {
  std::vector<RankRun> runs(kMaxNodesPerJob + 1);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    runs[i] = RankRun{.node = "n" + std::to_string(i), .generation = 1, .slots = 1};
  }
  return runs;
}

OpenRound with_both() {
  OpenRound c = delta_open("j-1", 2, 1, delta_of({copy_run(0, 4)}));
  c.ranks = cluster_map(4);
  return c;
}

INSTANTIATE_TEST_SUITE_P(
    Refusals, BadDeltas,
    ::testing::Values(
        BadDelta{"StaleRound", delta_open("j-1", 2, 0, delta_of({copy_run(0, 4)}, 0, 0)),
                 "Cannot open round 2 of job j-1: it was decided at round 0 but the job is at "
                 "round 1."},
        BadDelta{"OtherBaseRound", delta_open("j-1", 2, 1, delta_of({copy_run(0, 4)}, 0)),
                 "Cannot open round 2 of job j-1: its rank delta is against round 0, not the "
                 "job's round 1."},
        BadDelta{"OtherBaseSize", delta_open("j-1", 2, 1, delta_of({copy_run(0, 4)}, 1, 5)),
                 "Cannot open round 2 of job j-1: its rank delta is against a rank map of 5 "
                 "nodes, but round 1 has 4."},
        BadDelta{"CopyOutOfRange", delta_open("j-1", 2, 1, delta_of({copy_run(2, 3)})),
                 "Cannot open round 2 of job j-1: run 0 of its rank delta copies base entries "
                 "2..4, but round 1 has 4."},
        BadDelta{"CopyPastTheLargestIndex",
                 delta_open("j-1", 2, 1, delta_of({copy_run(4'294'967'295U, 1)})),
                 "Cannot open round 2 of job j-1: run 0 of its rank delta copies base entries "
                 "4294967295..4294967295, but round 1 has 4."},
        BadDelta{"OverlappingCopies",
                 delta_open("j-1", 2, 1, delta_of({copy_run(0, 2), copy_run(1, 2)})),
                 "Cannot open round 2 of job j-1: run 1 of its rank delta copies base entry 1 "
                 "again."},
        BadDelta{"EmptyRun", delta_open("j-1", 2, 1, delta_of({copy_run(0, 2), RankRun{}})),
                 "Cannot open round 2 of job j-1: run 1 of its rank delta is empty (it copies no "
                 "entries and names no node)."},
        BadDelta{"EmptyCopy", delta_open("j-1", 2, 1, delta_of({copy_run(2, 0, 1)})),
                 "Cannot open round 2 of job j-1: run 0 of its rank delta is empty (it copies no "
                 "entries and names no node)."},
        BadDelta{"CopyAndEntry",
                 delta_open("j-1", 2, 1,
                            delta_of({RankRun{.from = 0, .count = 1, .node = "x", .slots = 1}})),
                 "Cannot open round 2 of job j-1: run 0 of its rank delta is both a copy and a "
                 "new entry."},
        BadDelta{"RestartsPast32Bits",
                 delta_open("j-1", 2, 1, delta_of({copy_run(0, 1, 4'294'967'295U)})),
                 "Cannot open round 2 of job j-1: run 0 of its rank delta gives node "
                 "gpu-node-0000.cluster.example more restarts than fit in 32 bits."},
        // The resolved map is checked as a full one.
        BadDelta{"NodeTwice",
                 delta_open("j-1", 2, 1, delta_of({copy_run(0, 2), entry_run(cluster_map(1)[0])})),
                 "Cannot open round 2 of job j-1: its rank map names node "
                 "gpu-node-0000.cluster.example twice."},
        // Beyond what the codec carries (kMaxNodesPerJob runs), so in memory only.
        BadDelta{"TooManyEntries", delta_open("j-1", 2, 1, delta_of(too_many_runs())),
                 "Cannot open round 2 of job j-1: its rank delta makes more than 100000 "
                 "entries.",
                 true},
        BadDelta{"MapAndDelta", with_both(),
                 "Cannot open round 2 of job j-1: it has both a rank map and a delta.", true}),
    [](const auto& param_info) { return std::string(param_info.param.label); });

TEST(JobTableDelta, BadDeltaBytesAreMalformed) {
  const OpenRound c = delta_open("j-1", 2, 1, delta_of({copy_run(0, 4)}));
  const std::string bytes = encode_command(c);
  // The same command with an empty "rm" added to its map (fixmap of 10 keys -> 11).
  ASSERT_EQ(static_cast<unsigned char>(bytes[0]), 0x8au);
  const std::string both = "\x8b" + bytes.substr(1) + "\xa2rm\x90";
  const Result<Command> decoded = decode_command(both);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.error().message, "The job table command has both a rank map and a rank delta.");
  // More runs than a job has nodes.
  const std::string many = encode_command(delta_open("j-1", 2, 1, delta_of(too_many_runs())));
  JobTable table;
  EXPECT_EQ(table.apply(1, many).code, ApplyCode::kMalformed);
  // Every truncation.
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(decode_command(bytes.substr(0, n)).ok()) << n;
  }
}

// Issue 18: the bytes an OpenRound of a 1,024-node job costs the Raft log, as the full map
// (before) and as the leader writes it (after), for the round changes a large job sees. The
// restart counts are the planner's (make_open_round), so a member-lost round restarts every
// kept node.
TEST(JobTableDelta, RoundChangesOfA1024NodeJobFitIn4KiB) {
  JobSpec s = spec("big", 1, 2048);
  s.workers_per_node = 8;
  JobTable table;
  ASSERT_TRUE(table.apply(1, SubmitJob{"c", 1, s, ms(1)}).ok());
  const RankMap base = cluster_map(1024);
  ASSERT_TRUE(table.apply(2, encode_command(open("big-1", 1, 0, base))).ok());
  ASSERT_TRUE(table.apply(3, encode_command(set("big-1", 1, JobState::kRunning))).ok());
  const JobRecord job = *table.job("big-1");

  auto losing = [&](std::size_t every) {
    RankMap map;
    for (std::size_t i = 0; i < base.size(); ++i) {
      if (i % every != every / 2) map.push_back(base[i]);
    }
    return renumbered(map);
  };
  RankMap joined = base;
  joined.push_back(cluster_map(1025).back());
  RankMap reordered = base;
  Rng rng(18);
  for (std::size_t i = reordered.size() - 1; i > 0; --i) {
    std::swap(reordered[i], reordered[rng.below(i + 1)]);
  }
  struct Change {
    const char* name;
    RankMap ranks;
    RoundReason reason;
  };
  const std::vector<Change> changes = {
      {"one_loss", losing(1024), RoundReason::kMemberLost},
      {"one_join", renumbered(joined), RoundReason::kGrow},
      {"8_losses", losing(128), RoundReason::kMemberLost},
      {"64_losses", losing(16), RoundReason::kMemberLost},
      {"full_reorder", renumbered(reordered), RoundReason::kMemberLost},
  };
  std::printf("OpenRound bytes of a 1,024-node job (8 slots, 29-byte names, 64-bit generations)\n");
  for (const Change& change : changes) {
    Decision decision;
    decision.kind = Decision::Kind::kOpenRound;
    decision.ranks = change.ranks;
    decision.store_endpoint = "10.1.4.21:29500";
    decision.reason = change.reason;
    decision.detail =
        "node gpu-node-0512.cluster.example (generation 1790000000512000256) was lost";
    const OpenRound c = make_open_round(job, decision, ms(5000));
    const std::string before = encode_command(c);
    const std::string after = encode_command_against(c, job.ranks);
    RecordProperty(std::string(change.name) + "_bytes_before", static_cast<int>(before.size()));
    RecordProperty(std::string(change.name) + "_bytes_after", static_cast<int>(after.size()));
    std::printf("  %-13s before %6zu  after %6zu\n", change.name, before.size(), after.size());
    EXPECT_LE(after.size(), before.size()) << change.name;
    // Applied, the delta gives the table the full map's bytes.
    JobTable full = table;
    JobTable by_delta = table;
    const ApplyResult a = full.apply(4, before);
    const ApplyResult b = by_delta.apply(4, after);
    EXPECT_TRUE(a.ok()) << change.name << ": " << a.message;
    EXPECT_EQ(a, b) << change.name;
    EXPECT_EQ(by_delta.snapshot(), full.snapshot()) << change.name;
    if (std::string(change.name) == "one_loss") {
      EXPECT_GT(before.size(), 40'000u);
      EXPECT_LE(after.size(), 4096u);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Hostile bytes

std::vector<std::string> command_corpus() {
  JobSpec s = spec();
  s.env["X"] = "y";
  s.last_call = 1s;
  return {
      encode_command(SubmitJob{"c", 1, s, ms(1)}),
      encode_command(CancelJob{"c", 2, "train-1", 1000, false, ms(2)}),
      encode_command(open("train-1", 1, 0, ranks({"a", "b"}))),
      encode_command(set("train-1", 1, JobState::kRunning)),
      encode_command(DrainNode{"c", 3, "gpu-07", true, "bad DIMM", 0, true, ms(3)}),
      encode_command(SetPriority{"c", 4, "train-1", -20, 5, 1000, false, ms(4)}),
      encode_command(SuspendJob{"c", 5, "train-1", true, 1000, false, ms(5)}),
      encode_command(set("train-1", 1, JobState::kPending, RoundReason::kPreempted)),
      encode_command(scale_command("train-1", 1, scale_state(2, 1, false, {{1, 99.5}}), "m", 9)),
      encode_command(delta_open(
          "train-1", 2, 1, RankDelta{1, 2, {copy_run(1, 1, 1), entry_run({"c", 1, 2, 0, 0})}})),
  };
}

std::string mutate(Rng& rng, std::string bytes) {
  switch (rng.below(4)) {
    case 0:  // truncate
      return bytes.substr(0, rng.below(bytes.size() + 1));
    case 1: {  // flip a few bytes
      const std::uint64_t n = 1 + rng.below(4);
      for (std::uint64_t i = 0; i < n && !bytes.empty(); ++i) {
        bytes[rng.below(bytes.size())] = static_cast<char>(rng.below(256));
      }
      return bytes;
    }
    case 2: {  // random bytes
      std::string r(rng.below(300), '\0');
      for (char& c : r) c = static_cast<char>(rng.below(256));
      return r;
    }
    default: {  // splice two halves
      const std::size_t cut = rng.below(bytes.size() + 1);
      return bytes.substr(0, cut) + bytes.substr(rng.below(bytes.size() + 1));
    }
  }
}

TEST(JobTableHostile, ApplyNeverCrashesAndGarbageChangesNothing) {
  Rng rng(2024);
  const std::vector<std::string> corpus = command_corpus();
  JobTable table;
  Index index = 0;
  for (const std::string& c : corpus) (void)table.apply(++index, c);
  for (int i = 0; i < 5000; ++i) {
    const std::string bytes = mutate(rng, corpus[rng.below(corpus.size())]);
    const JobTable before = table;
    const ApplyResult r = table.apply(++index, bytes);
    if (r.code == ApplyCode::kMalformed) {
      ASSERT_EQ(table.jobs(), before.jobs());
      ASSERT_EQ(table.clients(), before.clients());
    }
    if (r.code == ApplyCode::kRejected) {
      ASSERT_EQ(table.jobs(), before.jobs());
    }
  }
  // Whatever was applied still snapshots and restores.
  Result<JobTable> restored = JobTable::restore(table.snapshot());
  ASSERT_OK(restored);
  EXPECT_EQ(restored->snapshot(), table.snapshot());
}

TEST(JobTableHostile, RestoreNeverCrashes) {
  JobTable table;
  Index index = 0;
  for (const std::string& c : command_corpus()) (void)table.apply(++index, c);
  (void)table.apply(++index, encode_command(SubmitJob{"d", 1, spec("other"), ms(9)}));
  const std::string snap = table.snapshot();
  for (std::size_t n = 0; n < snap.size(); ++n) {
    ASSERT_FALSE(JobTable::restore(snap.substr(0, n)).ok()) << n;
  }
  Rng rng(99);
  int restored = 0;
  for (int i = 0; i < 5000; ++i) {
    Result<JobTable> t = JobTable::restore(mutate(rng, snap));
    if (!t) continue;
    ++restored;
    // A table restored from flipped bytes must still be usable.
    (void)t->snapshot();
    (void)t->apply(t->applied_index() + 1, command_corpus()[2]);
  }
  EXPECT_GT(restored, 0);  // some flips land in values that stay valid
}

}  // namespace
}  // namespace elastic::rendezvous
