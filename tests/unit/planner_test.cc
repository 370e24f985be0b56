// The rendezvous planner: one table row per rule, then a scenario that feeds its decisions
// through the job table.
#include "daemon/rendezvous/planner.h"

#include <gtest/gtest.h>

#include <limits>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace elastic::rendezvous {
namespace {

using namespace std::chrono_literals;
using Kind = Decision::Kind;

WallTime ms(std::int64_t t) { return WallTime(std::chrono::milliseconds(t)); }

config::RendezvousConfig test_config() {
  config::RendezvousConfig c;
  c.last_call = 10s;
  c.join_timeout = 60s;
  return c;
}

// A job record in a given state, built fluently.
struct JobBuilder {
  JobRecord job;

  JobBuilder(JobState state, std::uint32_t min, std::uint32_t max) {
    job.id = "train-1";
    job.spec.name = "train";
    job.spec.command = {"/bin/true"};
    job.spec.min_nodes = min;
    job.spec.max_nodes = max;
    job.spec.max_restarts = 3;
    job.spec.restart_backoff = 5s;
    job.state = state;
  }
  // Members in rank order, generation 1, 1 slot each; round 1.
  JobBuilder& members(std::vector<std::string> nodes) {
    std::uint32_t next = 0;
    for (std::string& n : nodes) job.ranks.push_back({std::move(n), 1, 1, next++});
    job.round = 1;
    return *this;
  }
  JobBuilder& since(std::int64_t t) {
    job.state_since = ms(t);
    return *this;
  }
  JobBuilder& restarts(std::uint32_t used, std::uint32_t max) {
    job.restarts = used;
    job.spec.max_restarts = max;
    return *this;
  }
  JobBuilder& backoff(Duration d) {
    job.spec.restart_backoff = d;
    return *this;
  }
  JobBuilder& last_call(Duration d) {
    job.spec.last_call = d;
    return *this;
  }
  JobBuilder& workers_per_node(std::uint32_t n) {
    job.spec.workers_per_node = n;
    return *this;
  }
  JobBuilder& cause(RoundReason r) {
    job.recovery_cause = r;
    return *this;
  }
};

Candidate node(std::string name, std::uint64_t generation = 1, std::uint32_t slots = 1,
               bool alive = true) {
  Candidate c;
  c.address = "10.0.0." + std::to_string(name.empty() ? 0 : name[0] - 'a' + 1);
  c.name = std::move(name);
  c.generation = generation;
  c.slots = slots;
  c.alive = alive;
  c.store_port = 29500;
  return c;
}
Candidate dead(std::string name) { return node(std::move(name), 1, 1, false); }
Candidate no_store_port(std::string name) {
  Candidate c = node(std::move(name), 1, 2);
  c.store_port = 0;
  return c;
}

struct PlanCase {
  const char* label;
  JobRecord job;
  std::vector<Candidate> candidates;
  std::vector<Waiter> wait_list;
  std::optional<WorkerFailure> worker_failure;
  std::int64_t now;
  Kind kind;
  std::vector<std::string> nodes = {};  // kOpenRound: rank order
  RoundReason reason = RoundReason::kSubmitted;
  std::int64_t wake_at = 0;  // kWaitUntil
  std::string detail = "";   // checked when not empty
  std::set<std::string> live = {};  // members whose workers re-form in place
};

std::vector<std::string> names(const RankMap& ranks) {
  std::vector<std::string> out;
  for (const RankAssignment& r : ranks) out.push_back(r.node);
  return out;
}

void PrintTo(const PlanCase& c, std::ostream* os) { *os << c.label; }

class PlannerRules : public ::testing::TestWithParam<PlanCase> {};

TEST_P(PlannerRules, Decide) {
  const PlanCase& c = GetParam();
  PlannerInput in;
  in.job = &c.job;
  in.candidates = c.candidates;
  in.wait_list = c.wait_list;
  in.worker_failure = c.worker_failure;
  in.live = c.live;
  in.now = ms(c.now);
  in.config = test_config();
  const Decision d = plan(in);
  EXPECT_EQ(to_string(d.kind), std::string(to_string(c.kind))) << d.detail;
  if (c.kind == Kind::kOpenRound || c.kind == Kind::kRecover) {
    EXPECT_EQ(to_string(d.reason), std::string(to_string(c.reason)));
  }
  if (c.kind == Kind::kOpenRound) {
    EXPECT_EQ(names(d.ranks), c.nodes);
  }
  if (c.kind == Kind::kWaitUntil) {
    EXPECT_EQ(d.wake_at, ms(c.wake_at));
  }
  if (!c.detail.empty()) {
    EXPECT_EQ(d.detail, c.detail);
  }
}

using S = JobState;
using R = RoundReason;

Waiter waits(std::string n, std::int64_t since, std::uint64_t generation = 1) {
  return Waiter{std::move(n), generation, ms(since)};
}

INSTANTIATE_TEST_SUITE_P(
    Rules, PlannerRules,
    ::testing::Values(
        // --- pending: gathering for the first round
        PlanCase{"PendingWithoutNodesWaitsForTheJoinTimeout",
                 JobBuilder(S::kPending, 2, 4).since(0).job,
                 {node("a")},
                 {waits("a", 100)},
                 {},
                 1000,
                 Kind::kWaitUntil,
                 {},
                 R::kSubmitted,
                 60000},
        PlanCase{"PendingPastTheJoinTimeoutFails",
                 JobBuilder(S::kPending, 2, 4).since(0).job,
                 {node("a")},
                 {waits("a", 100)},
                 {},
                 60000,
                 Kind::kFail,
                 {},
                 R::kSubmitted,
                 0,
                 "only 1 of the 2 nodes needed joined within 1m"},
        PlanCase{"PendingAtMinWaitsForTheLastCall",
                 JobBuilder(S::kPending, 2, 4).job,
                 {node("a"), node("b"), node("c")},
                 {waits("a", 100), waits("b", 200)},
                 {},
                 500,
                 Kind::kWaitUntil,
                 {},
                 R::kSubmitted,
                 10200},
        PlanCase{"PendingOpensAfterTheLastCall",
                 JobBuilder(S::kPending, 2, 4).job,
                 {node("a"), node("b"), node("c")},
                 {waits("b", 200), waits("a", 100), waits("c", 9000)},
                 {},
                 10200,
                 Kind::kOpenRound,
                 {"a", "b", "c"},
                 R::kSubmitted,
                 0,
                 "3 nodes joined"},
        PlanCase{"PendingAtMaxOpensAtOnceWithTheEarliest",
                 JobBuilder(S::kPending, 1, 2).job,
                 {node("a"), node("b"), node("c")},
                 {waits("a", 100), waits("b", 200), waits("c", 50)},
                 {},
                 300,
                 Kind::kOpenRound,
                 {"c", "a"}},
        PlanCase{"EqualJoinTimesRankByName",
                 JobBuilder(S::kPending, 3, 3).job,
                 {node("a"), node("b"), node("c")},
                 {waits("c", 100), waits("b", 100), waits("a", 100)},
                 {},
                 100,
                 Kind::kOpenRound,
                 {"a", "b", "c"}},
        PlanCase{"LastCallOverrideOfTheJob",
                 JobBuilder(S::kPending, 1, 4).last_call(0s).job,
                 {node("a")},
                 {waits("a", 100)},
                 {},
                 100,
                 Kind::kOpenRound,
                 {"a"}},
        PlanCase{"IneligibleWaitersDoNotCount",
                 JobBuilder(S::kPending, 1, 8).workers_per_node(2).last_call(0s).job,
                 {node("a", 1, 2), node("b", 2, 2), dead("c"), node("d", 1, 1), no_store_port("e"),
                  node("f", 1, 2)},
                 // b waits with an old generation, c is dead, d has too few slots, e has no
                 // store port, g is no candidate; f counts.
                 {waits("a", 1), waits("b", 1, 1), waits("c", 1), waits("d", 1), waits("e", 1),
                  waits("g", 1), waits("f", 2)},
                 {},
                 100,
                 Kind::kOpenRound,
                 {"a", "f"}},

        // --- rendezvous / running: losses, failures, growth
        PlanCase{"RunningWithEveryoneAliveDoesNothing",
                 JobBuilder(S::kRunning, 1, 3).members({"a", "b"}).job,
                 {node("a"), node("b")},
                 {},
                 {},
                 100,
                 Kind::kNone},
        PlanCase{"LostMemberSurvivorsKeepTheirOrder",
                 JobBuilder(S::kRunning, 2, 3).members({"c", "a", "b"}).job,
                 {node("a"), dead("b"), node("c")},
                 {},
                 {},
                 100,
                 Kind::kOpenRound,
                 {"c", "a"},
                 R::kMemberLost,
                 0,
                 "node b (generation 1) was lost"},
        PlanCase{"LostMemberNewcomersAppendedUpToMax",
                 JobBuilder(S::kRunning, 2, 3).members({"a", "b", "c"}).job,
                 {node("a"), node("c"), node("d"), node("e")},
                 {waits("d", 5), waits("e", 1)},
                 {},
                 100,
                 Kind::kOpenRound,
                 {"a", "c", "e"},
                 R::kMemberLost},
        PlanCase{"LostMemberInRendezvousToo",
                 JobBuilder(S::kRendezvous, 1, 3).members({"a", "b"}).job,
                 {node("b")},
                 {},
                 {},
                 100,
                 Kind::kOpenRound,
                 {"b"},
                 R::kMemberLost},
        PlanCase{"RestartedDaemonIsLostAndRejoinsAsNewcomer",
                 JobBuilder(S::kRunning, 2, 2).members({"b", "a"}).job,
                 {node("a"), node("b", 2)},
                 {waits("b", 50, 2)},
                 {},
                 100,
                 Kind::kOpenRound,
                 {"a", "b"},
                 R::kMemberLost},
        PlanCase{"LostMemberBelowMinRecovers",
                 JobBuilder(S::kRunning, 2, 2).members({"a", "b"}).job,
                 {node("a"), dead("b")},
                 {},
                 {},
                 100,
                 Kind::kRecover,
                 {},
                 R::kMemberLost,
                 0,
                 "node b (generation 1) was lost; 1 of the 2 nodes needed remain"},
        PlanCase{"WorkerFailureWithBackoffRecovers",
                 JobBuilder(S::kRunning, 1, 2).members({"a", "b"}).job,
                 {node("a"), node("b")},
                 {},
                 WorkerFailure{1, ms(90), "rank 1 on b exited with status 1"},
                 100,
                 Kind::kRecover,
                 {},
                 R::kWorkerFailed,
                 0,
                 "rank 1 on b exited with status 1"},
        PlanCase{"LiveWorkerFailureGoesOnWithoutTheFailedNodeAtOnce",
                 JobBuilder(S::kRunning, 2, 3).members({"a", "b", "c"}).job,
                 {node("a"), node("b"), node("c")},
                 {},
                 WorkerFailure{1, ms(90), "rank 1 on b exited with status 1", "b"},
                 100,
                 Kind::kOpenRound,
                 {"a", "c"},
                 R::kWorkerFailed,
                 0,
                 "rank 1 on b exited with status 1",
                 {"a", "b", "c"}},
        PlanCase{"LiveWorkerFailureAtMinKeepsTheFailedNode",
                 JobBuilder(S::kRunning, 3, 3).members({"a", "b", "c"}).job,
                 {node("a"), node("b"), node("c")},
                 {},
                 WorkerFailure{1, ms(90), "rank 1 on b exited with status 1", "b"},
                 100,
                 Kind::kOpenRound,
                 {"a", "b", "c"},
                 R::kWorkerFailed,
                 0,
                 "",
                 {"a", "c"}},
        PlanCase{"WorkerFailureWithOnePlainSurvivorBacksOff",
                 JobBuilder(S::kRunning, 2, 3).members({"a", "b", "c"}).job,
                 {node("a"), node("b"), node("c")},
                 {},
                 WorkerFailure{1, ms(90), "rank 1 on b exited with status 1", "b"},
                 100,
                 Kind::kRecover,
                 {},
                 R::kWorkerFailed,
                 0,
                 "",
                 {"a", "b"}},
        PlanCase{"LiveWorkerFailureOfAnUnknownNodeBacksOff",
                 JobBuilder(S::kRunning, 2, 3).members({"a", "b", "c"}).job,
                 {node("a"), node("b"), node("c")},
                 {},
                 WorkerFailure{1, ms(90), "a worker failed", ""},
                 100,
                 Kind::kRecover,
                 {},
                 R::kWorkerFailed,
                 0,
                 "",
                 {"a", "b", "c"}},
        PlanCase{"WorkerFailureWithoutBackoffOpensWithTheSameMembers",
                 JobBuilder(S::kRunning, 1, 2).members({"b", "a"}).backoff(0s).job,
                 {node("a"), node("b")},
                 {},
                 WorkerFailure{1, ms(90), "rank 0 hung"},
                 100,
                 Kind::kOpenRound,
                 {"b", "a"},
                 R::kWorkerFailed},
        PlanCase{"WorkerFailureWithRestartsExhaustedFails",
                 JobBuilder(S::kRunning, 1, 2).members({"a"}).restarts(3, 3).job,
                 {node("a")},
                 {},
                 WorkerFailure{1, ms(90), "rank 0 exited with status 2"},
                 100,
                 Kind::kFail,
                 {},
                 R::kSubmitted,
                 0,
                 "workers failed and the job has used all 3 restarts: rank 0 exited with status 2"},
        PlanCase{"WorkerFailureOfAnOlderRoundIsIgnored",
                 JobBuilder(S::kRunning, 1, 2).members({"a"}).job,
                 {node("a")},
                 {},
                 WorkerFailure{0, ms(90), "old"},
                 100,
                 Kind::kNone},
        PlanCase{"LostMemberWinsOverWorkerFailure",
                 JobBuilder(S::kRunning, 1, 2).members({"a", "b"}).restarts(3, 3).job,
                 {node("a"), dead("b")},
                 {},
                 WorkerFailure{1, ms(90), "NCCL error"},
                 100,
                 Kind::kOpenRound,
                 {"a"},
                 R::kMemberLost},
        PlanCase{"GrowWaitsForTheLastCall",
                 JobBuilder(S::kRunning, 1, 3).members({"a"}).job,
                 {node("a"), node("b")},
                 {waits("b", 1000)},
                 {},
                 2000,
                 Kind::kWaitUntil,
                 {},
                 R::kSubmitted,
                 11000},
        PlanCase{"GrowAfterTheLastCall",
                 JobBuilder(S::kRunning, 1, 3).members({"a"}).job,
                 {node("a"), node("b")},
                 {waits("b", 1000)},
                 {},
                 11000,
                 Kind::kOpenRound,
                 {"a", "b"},
                 R::kGrow,
                 0,
                 "1 node joined"},
        PlanCase{"GrowToMaxAtOnce",
                 JobBuilder(S::kRunning, 1, 2).members({"a"}).job,
                 {node("a"), node("b"), node("c")},
                 {waits("c", 1000), waits("b", 1500)},
                 {},
                 1500,
                 Kind::kOpenRound,
                 {"a", "c"},
                 R::kGrow},
        PlanCase{"NoGrowWhileTheRoundStarts",
                 JobBuilder(S::kRendezvous, 1, 3).members({"a"}).job,
                 {node("a"), node("b")},
                 {waits("b", 0)},
                 {},
                 100000,
                 Kind::kNone},
        PlanCase{"NoGrowAtMax",
                 JobBuilder(S::kRunning, 1, 2).members({"a", "b"}).job,
                 {node("a"), node("b"), node("c")},
                 {waits("c", 0)},
                 {},
                 100000,
                 Kind::kNone},

        // --- recovering
        PlanCase{
            "RecoveringFromWorkerFailureWaitsForTheBackoff",
            JobBuilder(S::kRecovering, 1, 2).members({"a"}).since(1000).cause(R::kWorkerFailed).job,
            {node("a")},
            {},
            {},
            2000,
            Kind::kWaitUntil,
            {},
            R::kSubmitted,
            6000},
        PlanCase{"RecoveringFromWorkerFailureOpensAfterTheBackoff",
                 JobBuilder(S::kRecovering, 1, 3)
                     .members({"b", "a"})
                     .since(1000)
                     .cause(R::kWorkerFailed)
                     .job,
                 {node("a"), node("b"), node("c")},
                 {waits("c", 10)},
                 {},
                 6000,
                 Kind::kOpenRound,
                 {"b", "a", "c"},
                 R::kWorkerFailed},
        PlanCase{"RecoveringWithRestartsExhaustedFails",
                 JobBuilder(S::kRecovering, 1, 2)
                     .members({"a"})
                     .restarts(1, 1)
                     .cause(R::kWorkerFailed)
                     .job,
                 {node("a")},
                 {},
                 {},
                 100000,
                 Kind::kFail},
        // A job recovering from a failure it can never get past (its
        // worker cannot start) fails with that failure, not with a bare count.
        PlanCase{"RecoveringWithRestartsExhaustedFailsWithTheFailure",
                 [] {
                   JobRecord j = JobBuilder(S::kRecovering, 1, 1)
                                     .members({"a"})
                                     .restarts(2, 2)
                                     .cause(R::kWorkerFailed)
                                     .job;
                   j.reason = "rank 0 on node a could not start: no such file";
                   return j;
                 }(),
                 {node("a")},
                 {},
                 {},
                 100000,
                 Kind::kFail,
                 {},
                 R::kSubmitted,
                 0,
                 "workers failed and the job has used all 2 restarts: rank 0 on node a could not "
                 "start: no such file"},
        PlanCase{"RecoveringBelowMinWaitsForTheJoinTimeout",
                 JobBuilder(S::kRecovering, 2, 2).members({"a", "b"}).since(1000).job,
                 {node("a"), dead("b")},
                 {},
                 {},
                 2000,
                 Kind::kWaitUntil,
                 {},
                 R::kSubmitted,
                 61000},
        PlanCase{"RecoveringBelowMinPastTheJoinTimeoutFails",
                 JobBuilder(S::kRecovering, 2, 2).members({"a", "b"}).since(1000).job,
                 {node("a"), dead("b")},
                 {},
                 {},
                 61000,
                 Kind::kFail,
                 {},
                 R::kSubmitted,
                 0,
                 "only 1 of the 2 nodes needed joined within 1m"},
        PlanCase{"RecoveringReachesMinThenLastCall",
                 JobBuilder(S::kRecovering, 2, 3).members({"a", "b"}).since(1000).job,
                 {node("a"), dead("b"), node("c")},
                 {waits("c", 3000)},
                 {},
                 4000,
                 Kind::kWaitUntil,
                 {},
                 R::kSubmitted,
                 13000},
        PlanCase{"RecoveringOpensAfterTheLastCallSurvivorsFirst",
                 JobBuilder(S::kRecovering, 2, 3).members({"b", "a"}).since(1000).job,
                 {node("a"), dead("b"), node("c")},
                 {waits("c", 3000)},
                 {},
                 13000,
                 Kind::kOpenRound,
                 {"a", "c"},
                 R::kMemberLost},
        PlanCase{"RecoveringWithEnoughSurvivorsOpensAtOnce",
                 JobBuilder(S::kRecovering, 1, 3).members({"a", "b"}).since(1000).job,
                 {node("a"), dead("b")},
                 {},
                 {},
                 1000,
                 Kind::kOpenRound,
                 {"a"},
                 R::kMemberLost},

        // --- terminal
        PlanCase{"SucceededDoesNothing",
                 JobBuilder(S::kSucceeded, 1, 2).members({"a"}).job,
                 {dead("a")},
                 {},
                 {},
                 100,
                 Kind::kNone},
        PlanCase{"CancelledDoesNothing",
                 JobBuilder(S::kCancelled, 1, 2).job,
                 {node("a")},
                 {waits("a", 0)},
                 {},
                 100,
                 Kind::kNone},
        // --- held: even with its old members dead and waiters ready
        PlanCase{"SuspendedDoesNothing",
                 JobBuilder(S::kSuspended, 1, 2).members({"a"}).job,
                 {dead("a"), node("b")},
                 {waits("b", 0)},
                 {},
                 100,
                 Kind::kNone}),
    [](const auto& param_info) { return std::string(param_info.param.label); });

PlannerInput input(const JobRecord& job, std::vector<Candidate> candidates,
                   std::vector<Waiter> wait_list, std::int64_t now) {
  PlannerInput in;
  in.job = &job;
  in.candidates = std::move(candidates);
  in.wait_list = std::move(wait_list);
  in.now = ms(now);
  in.config = test_config();
  return in;
}

TEST(PlannerTest, RanksFollowSlotsAndRankZeroHostsTheStore) {
  JobRecord job = JobBuilder(S::kPending, 2, 2).job;
  std::vector<Candidate> nodes = {node("a", 1, 4), node("b", 1, 2)};
  nodes[0].address = "fd00::1";
  nodes[0].store_port = 29517;
  const Decision d = plan(input(job, nodes, {waits("a", 1), waits("b", 2)}, 10));
  ASSERT_EQ(d.kind, Kind::kOpenRound);
  EXPECT_EQ(d.ranks, (RankMap{{"a", 1, 4, 0}, {"b", 1, 2, 4}}));
  EXPECT_EQ(d.store_endpoint, "[fd00::1]:29517");

  job.spec.workers_per_node = 2;
  const Decision fixed = plan(input(job, nodes, {waits("a", 1), waits("b", 2)}, 10));
  EXPECT_EQ(fixed.ranks, (RankMap{{"a", 1, 2, 0}, {"b", 1, 2, 2}}));
  nodes[0].address = "10.1.2.3";
  EXPECT_EQ(plan(input(job, nodes, {waits("a", 1), waits("b", 2)}, 10)).store_endpoint,
            "10.1.2.3:29517");
}

TEST(PlannerTest, HugeTimesSaturateInsteadOfOverflowing) {
  JobRecord job = JobBuilder(S::kPending, 2, 2).since(std::numeric_limits<std::int64_t>::max()).job;
  const Decision d = plan(input(job, {node("a")}, {waits("a", 0)}, 0));
  EXPECT_EQ(d.kind, Kind::kWaitUntil);
  EXPECT_EQ(d.wake_at.time_since_epoch().count(), std::numeric_limits<std::int64_t>::max());
}

// Decisions fed through the table, as the leader does: submit, gather, run, lose a node,
// recover on the survivors, grow back, fail a worker, exhaust the restarts.
TEST(PlannerTest, DecisionsApplyToTheJobTable) {
  JobTable table;
  Index index = 0;
  JobSpec spec = JobBuilder(S::kPending, 2, 3).job.spec;
  spec.max_restarts = 1;
  spec.restart_backoff = 0s;
  ASSERT_TRUE(table.apply(++index, SubmitJob{"ctl", 1, spec, ms(0)}).ok());
  const JobRecord* job = table.job("train-1");
  ASSERT_NE(job, nullptr);

  auto decide = [&](std::vector<Candidate> nodes, std::vector<Waiter> waiting, std::int64_t now,
                    std::optional<WorkerFailure> failure = std::nullopt) {
    PlannerInput in = input(*job, std::move(nodes), std::move(waiting), now);
    in.worker_failure = std::move(failure);
    return plan(in);
  };
  auto commit_open = [&](const Decision& d, std::int64_t now) {
    ASSERT_EQ(d.kind, Kind::kOpenRound) << d.detail;
    const ApplyResult r = table.apply(++index, make_open_round(*job, d, ms(now)));
    ASSERT_TRUE(r.ok()) << r.message;
    ASSERT_TRUE(table
                    .apply(++index, SetJobState{job->id, job->round, S::kRunning, R::kMemberLost,
                                                "all workers started", ms(now)})
                    .ok());
  };

  const std::vector<Candidate> abc = {node("a"), node("b"), node("c")};
  const std::vector<Waiter> all = {waits("a", 10), waits("b", 20), waits("c", 30)};
  commit_open(decide(abc, all, 40), 40);  // max reached: at once
  EXPECT_EQ(job->round, 1u);
  EXPECT_EQ(names(job->ranks), (std::vector<std::string>{"a", "b", "c"}));

  // b dies: a round on a and c at once, a stale copy of the decision is refused.
  const Decision lost = decide({node("a"), dead("b"), node("c")}, {}, 100);
  const OpenRound round2 = make_open_round(*job, lost, ms(100));
  commit_open(lost, 100);
  EXPECT_EQ(table.apply(++index, round2).code, ApplyCode::kRejected);
  EXPECT_EQ(names(job->ranks), (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(job->restarts, 0u);

  // b restarts (generation 2) and asks to join: grow after the last call.
  const std::vector<Candidate> back = {node("a"), node("b", 2), node("c")};
  EXPECT_EQ(decide(back, {waits("b", 200, 2)}, 300).kind, Kind::kOpenRound);  // max at once
  commit_open(decide(back, {waits("b", 200, 2)}, 300), 300);
  EXPECT_EQ(names(job->ranks), (std::vector<std::string>{"a", "c", "b"}));
  EXPECT_EQ(job->ranks[2].generation, 2u);

  // A worker fails: one restart (backoff 0), then the next failure fails the job.
  commit_open(decide(back, {}, 400, WorkerFailure{job->round, ms(390), "rank 0 exited"}), 400);
  EXPECT_EQ(job->restarts, 1u);
  const Decision fail = decide(back, {}, 500, WorkerFailure{job->round, ms(490), "again"});
  ASSERT_EQ(fail.kind, Kind::kFail);
  ASSERT_TRUE(table.apply(++index, make_set_state(*job, fail, ms(500))).ok());
  EXPECT_EQ(job->state, S::kFailed);
  EXPECT_EQ(job->reason, "workers failed and the job has used all 1 restarts: again");
  EXPECT_EQ(decide(back, {}, 600).kind, Kind::kNone);
}

TEST(PlannerTest, RecoverDecisionBecomesSetJobState) {
  JobRecord job = JobBuilder(S::kRunning, 2, 2).members({"a", "b"}).job;
  const Decision d = plan(input(job, {node("a"), dead("b")}, {}, 100));
  ASSERT_EQ(d.kind, Kind::kRecover);
  const SetJobState c = make_set_state(job, d, ms(100));
  EXPECT_EQ(c.state, S::kRecovering);
  EXPECT_EQ(c.cause, R::kMemberLost);
  EXPECT_EQ(c.round, 1u);
  EXPECT_EQ(c.reason, d.detail);
}

// TORCHELASTIC_RESTART_COUNT per node, torchrun's way: a worker crash counts
// on the crashed worker's node only, a lost member on every survivor, a grow or a port move on
// nobody; a new node or a restarted daemon starts at 0.
PlannerInput input(const JobRecord& job, std::vector<Candidate> candidates,
                   std::vector<Waiter> wait_list, std::int64_t now, WorkerFailure failure) {
  PlannerInput in = input(job, std::move(candidates), std::move(wait_list), now);
  in.worker_failure = std::move(failure);
  return in;
}

std::vector<std::uint32_t> counts(const OpenRound& c) {
  std::vector<std::uint32_t> out;
  for (const RankAssignment& r : c.ranks) out.push_back(r.restarts);
  return out;
}

TEST(PlannerTest, RestartCountsArePerNodeLikeTorchrunAgents) {
  JobRecord job = JobBuilder(S::kRunning, 2, 4).members({"a", "b", "c"}).backoff(0s).job;
  job.ranks[1].restarts = 1;  // b restarted once before
  const std::vector<Candidate> abc = {node("a"), node("b"), node("c")};

  // A worker of b fails: b counts, a and c restart uncounted.
  const Decision crash =
      plan(input(job, abc, {}, 100, WorkerFailure{1, ms(90), "rank 1 exited 1", "b"}));
  ASSERT_EQ(crash.kind, Kind::kOpenRound);
  EXPECT_EQ(crash.failed_node, "b");
  const OpenRound after_crash = make_open_round(job, crash, ms(100));
  EXPECT_EQ(after_crash.failed_node, "b");
  EXPECT_EQ(counts(after_crash), (std::vector<std::uint32_t>{0, 2, 0}));

  // c is lost: the survivors count.
  const Decision lost = plan(input(job, {node("a"), node("b"), dead("c")}, {}, 100));
  ASSERT_EQ(lost.kind, Kind::kOpenRound);
  EXPECT_EQ(counts(make_open_round(job, lost, ms(100))), (std::vector<std::uint32_t>{1, 2}));

  // c's daemon restarted (generation 2): a lost member; its new instance starts at 0.
  Decision restarted = lost;
  restarted.ranks.push_back({"c", 2, 1, 2});
  EXPECT_EQ(counts(make_open_round(job, restarted, ms(100))),
            (std::vector<std::uint32_t>{1, 2, 0}));

  // d joins: a grow counts nothing; d starts at 0.
  const Decision grow =
      plan(input(job, {node("a"), node("b"), node("c"), node("d")}, {waits("d", 0)}, 100'000));
  ASSERT_EQ(grow.kind, Kind::kOpenRound);
  ASSERT_EQ(grow.reason, R::kGrow);
  EXPECT_EQ(counts(make_open_round(job, grow, ms(100'000))),
            (std::vector<std::uint32_t>{0, 1, 0, 0}));

  // The same members on another store port (RoundLeader's port move): nobody counts.
  Decision moved;
  moved.kind = Kind::kOpenRound;
  moved.reason = R::kMemberLost;
  moved.ranks = job.ranks;
  moved.store_endpoint = "10.0.0.1:29501";
  EXPECT_EQ(counts(make_open_round(job, moved, ms(100))), (std::vector<std::uint32_t>{0, 1, 0}));

  // Recovering from a member loss, every member back (a partition healed): all count.
  JobRecord recovering = job;
  recovering.state = S::kRecovering;
  recovering.recovery_cause = R::kMemberLost;
  const Decision healed = plan(input(recovering, abc, {}, 100));
  ASSERT_EQ(healed.kind, Kind::kOpenRound);
  EXPECT_EQ(counts(make_open_round(recovering, healed, ms(100))),
            (std::vector<std::uint32_t>{1, 2, 1}));

  // A worker failure unknown by node (an older leader's report): every member counts.
  const Decision unknown = plan(input(job, abc, {}, 100, WorkerFailure{1, ms(90), "exited", ""}));
  EXPECT_EQ(counts(make_open_round(job, unknown, ms(100))), (std::vector<std::uint32_t>{1, 2, 1}));
}

// With a restart backoff the failed node survives the recovering state in the job table (a new
// leader opens the round): SetJobState carries it, the table keeps it, the round counts it.
TEST(PlannerTest, TheFailedNodeIsKeptThroughTheRecoveringState) {
  JobTable table;
  Index index = 0;
  JobSpec spec = JobBuilder(S::kPending, 2, 2).job.spec;
  spec.restart_backoff = 5s;
  ASSERT_TRUE(table.apply(++index, SubmitJob{"ctl", 1, spec, ms(0)}).ok());
  const JobRecord* job = table.job("train-1");
  ASSERT_NE(job, nullptr);
  const std::vector<Candidate> ab = {node("a"), node("b")};
  // Commands go through their encoding, as Raft carries them.
  const auto apply_encoded = [&](const Command& command) {
    const Result<Command> decoded = decode_command(encode_command(command));
    ASSERT_TRUE(decoded.ok()) << decoded.error().message;
    const ApplyResult applied = table.apply(++index, *decoded);
    ASSERT_TRUE(applied.ok()) << applied.message;
  };
  const Decision first = plan(input(*job, ab, {waits("a", 0), waits("b", 0)}, 10));
  ASSERT_TRUE(table.apply(++index, make_open_round(*job, first, ms(10))).ok());
  ASSERT_TRUE(
      table.apply(++index, SetJobState{job->id, 1, S::kRunning, R::kMemberLost, "up", ms(20)})
          .ok());
  PlannerInput in = input(*job, ab, {}, 100);
  in.worker_failure = WorkerFailure{1, ms(90), "rank 0 on node a exited with status 1", "a"};
  const Decision recover = plan(in);
  ASSERT_EQ(recover.kind, Kind::kRecover);
  const SetJobState set = make_set_state(*job, recover, ms(100));
  EXPECT_EQ(set.failed_node, "a");
  apply_encoded(set);
  EXPECT_EQ(job->failed_node, "a");
  // A snapshot keeps it.
  const Result<JobTable> restored = JobTable::restore(table.snapshot());
  ASSERT_TRUE(restored.ok()) << restored.error().message;
  EXPECT_EQ(restored->job("train-1")->failed_node, "a");
  const Decision again = plan(input(*job, ab, {}, 5200));
  ASSERT_EQ(again.kind, Kind::kOpenRound);
  const OpenRound round2 = make_open_round(*job, again, ms(5200));
  EXPECT_EQ(round2.failed_node, "a");
  apply_encoded(round2);
  EXPECT_EQ(job->ranks[0].restarts, 1u);
  EXPECT_EQ(job->ranks[1].restarts, 0u);
  EXPECT_EQ(job->failed_node, "");
  EXPECT_EQ(job->restarts, 1u);
}

}  // namespace
}  // namespace elastic::rendezvous
