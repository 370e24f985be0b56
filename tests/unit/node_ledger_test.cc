// The leader's slot and store-port accounting (rendezvous/node_ledger.h), table-driven: each
// row is a planning pass (capacities, what holds the node, then jobs asking in order and
// claiming what they get) and what every job must see. One row is a pass that once gave a slot
// three times: three one-slot jobs asking in one pass for the one slot a running job leaves free.
#include "daemon/rendezvous/node_ledger.h"

#include <gtest/gtest.h>

#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace elastic::rendezvous {
namespace {

WallTime ms(std::int64_t t) { return WallTime(std::chrono::milliseconds(t)); }

RankMap on(const std::string& node, std::uint32_t slots) {
  return RankMap{RankAssignment{node, 1, slots, 0}};
}

RankMap two_nodes(const std::string& rank0, const std::string& other) {
  return RankMap{RankAssignment{rank0, 1, 1, 0}, RankAssignment{other, 1, 1, 1}};
}

struct Holding {
  std::string job;
  RankMap ranks;
  std::uint16_t port = 0;
};
// A job planned in the pass: it asks for `want` slots on `node` and holds them when they are
// free (what RoundLeader::lead does after each decision).
struct Ask {
  std::string job;
  std::string node;
  std::uint32_t want = 1;
  std::uint32_t expect_free = 0;  // what it sees before claiming
};
struct SlotRow {
  const char* name;
  std::map<std::string, std::uint32_t> capacity;
  std::vector<Holding> held;  // committed rounds and proposals in flight
  std::vector<Ask> pass;
  std::map<std::string, std::uint32_t> expect_held;  // node -> slots held after the pass
};

void PrintTo(const SlotRow& row, std::ostream* os) { *os << row.name; }

class SlotTable : public ::testing::TestWithParam<SlotRow> {};

TEST_P(SlotTable, EveryJobSeesOnlyWhatOthersLeave) {
  const SlotRow& row = GetParam();
  NodeLedger ledger;
  for (const auto& [node, slots] : row.capacity) ledger.set_capacity(node, slots);
  for (const Holding& h : row.held) ledger.hold(h.job, h.ranks, h.port);
  for (const Ask& ask : row.pass) {
    const std::uint32_t free = ledger.free_slots(ask.node, ask.job);
    EXPECT_EQ(free, ask.expect_free) << row.name << ": job " << ask.job;
    if (free >= ask.want) ledger.hold(ask.job, on(ask.node, ask.want), 0);
  }
  for (const auto& [node, slots] : row.expect_held) {
    EXPECT_EQ(ledger.held_slots(node), slots) << row.name << ": node " << node;
    EXPECT_LE(ledger.held_slots(node), row.capacity.at(node)) << row.name << ": " << node;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Rows, SlotTable,
    ::testing::Values(
        SlotRow{
            "an empty node offers all its slots", {{"a", 4}}, {}, {{"j", "a", 4, 4}}, {{"a", 4}}},
        SlotRow{"a node never reported has none", {}, {}, {{"j", "x", 1, 0}}, {}},
        SlotRow{"a job keeps its own slots; others see the rest",
                {{"a", 2}},
                {{"run", on("a", 1)}},
                {{"run", "a", 1, 2}, {"new", "a", 1, 1}},
                {{"a", 2}}},
        // The slots in use used to be computed only once per pass, so all three opened a
        // round on the one free slot (and the running job then looked lost).
        SlotRow{"three jobs in one pass share one free slot: only the first gets it",
                {{"a", 2}},
                {{"run", on("a", 1)}},
                {{"b", "a", 1, 1}, {"c", "a", 1, 0}, {"d", "a", 1, 0}, {"run", "a", 1, 1}},
                {{"a", 2}}},
        SlotRow{"one slot frees, two jobs pending: one gets it",
                {{"a", 1}},
                {},
                {{"p", "a", 1, 1}, {"q", "a", 1, 0}},
                {{"a", 1}}},
        SlotRow{"a proposal in flight holds its slots before it commits",
                {{"a", 2}},
                {{"proposed", on("a", 2)}},
                {{"other", "a", 1, 0}},
                {{"a", 2}}},
        SlotRow{"a job holding a node twice (round and proposal) holds the larger count",
                {{"a", 4}},
                {{"grow", on("a", 1)}, {"grow", on("a", 3)}},
                {{"other", "a", 1, 1}},
                {{"a", 4}}},
        SlotRow{"more held than the node has (it reported fewer slots) leaves 0, not a wrap",
                {{"a", 1}},
                {{"x", on("a", 2)}},
                {{"y", "a", 1, 0}},
                {}},
        SlotRow{"a multi-node round holds each of its nodes",
                {{"a", 1}, {"b", 1}, {"c", 1}},
                {{"wide", two_nodes("a", "b")}},
                {{"j", "a", 1, 0}, {"j", "b", 1, 0}, {"j", "c", 1, 1}},
                {{"a", 1}, {"b", 1}, {"c", 1}}}),
    [](const ::testing::TestParamInfo<SlotRow>& row) { return "row" + std::to_string(row.index); });

// Builds a job table one command at a time: jobs of one worker on node "a" (on()), each
// submitted by alice through client "c", their rounds numbered 1.
struct TableSteps {
  JobTable table;
  Index index = 0;

  std::string submit(const std::string& name, bool preemptible = false) {
    JobSpec s;
    s.name = name;
    s.command = {"/bin/true"};
    s.min_nodes = 1;
    s.max_nodes = 1;
    s.workers_per_node = 1;
    s.preemptible = preemptible;
    s.user = "alice";
    s.uid = 1000;
    s.gid = 1000;
    ++index;
    const ApplyResult r = table.apply(index, encode_command(SubmitJob{"c", index, s, ms(1)}));
    EXPECT_TRUE(r.ok()) << r.message;
    return r.job_id;
  }
  void open(const std::string& job, std::uint16_t port) {
    const ApplyResult r = table.apply(
        ++index, encode_command(OpenRound{job, 1, 0, on("a", 1), "10.0.0.1:" + std::to_string(port),
                                          RoundReason::kSubmitted, "", ms(2)}));
    EXPECT_TRUE(r.ok()) << r.message;
  }
  void set(const std::string& job, JobState state,
           RoundReason cause = RoundReason::kMemberLost) {
    const ApplyResult r =
        table.apply(++index, encode_command(SetJobState{job, 1, state, cause, "", ms(3)}));
    EXPECT_TRUE(r.ok()) << r.message;
  }
};

// Which jobs of the applied table hold slots: rounds of active and recovering jobs do;
// pending jobs (no round, or a round a preemption put away), suspended and ended jobs do not.
TEST(NodeLedger, TheTableHoldsOnlyUnfinishedJobsWithARound) {
  TableSteps steps;
  const std::string running = steps.submit("running");
  steps.open(running, 29500);
  steps.set(running, JobState::kRunning);
  const std::string recovering = steps.submit("recovering");
  steps.open(recovering, 29501);
  steps.set(recovering, JobState::kRecovering);
  const std::string ended = steps.submit("ended");
  steps.open(ended, 29502);
  steps.set(ended, JobState::kFailed);
  steps.submit("pending");
  // Put away: requeued by a preemption (pending with a round), suspended by its owner.
  const std::string requeued = steps.submit("requeued");
  steps.open(requeued, 29600);
  steps.set(requeued, JobState::kRunning);
  steps.set(requeued, JobState::kPending, RoundReason::kPreempted);
  ASSERT_EQ(steps.table.job(requeued)->state, JobState::kPending);
  const std::string suspended = steps.submit("suspended");
  steps.open(suspended, 29601);
  ASSERT_TRUE(steps.table
                  .apply(++steps.index, encode_command(SuspendJob{"c", steps.index, suspended,
                                                                  false, 1000, false, ms(4)}))
                  .ok());

  NodeLedger ledger;
  ledger.set_capacity("a", 8);
  ledger.hold_table(steps.table);
  EXPECT_EQ(ledger.held_slots("a"), 2u);
  EXPECT_EQ(ledger.free_slots("a", running), 7u);
  // The ended job's port is free again; the others' are not.
  const PortRange range{29500, 29503};
  EXPECT_EQ(ledger.free_port("a", 0, range), 29502);
  EXPECT_EQ(ledger.free_port("a", 3, range), 29503);
}

// A round put away (requeued by a preemption: pending again; or suspended) holds no slots, as
// the scheduler counts it: the preempting job must be able to use the nodes it frees. Its store
// port stays held while the old store may still be bound.
TEST(NodeLedger, ARoundPutAwayHoldsItsPortButNoSlots) {
  TableSteps steps;
  JobTable& table = steps.table;
  Index& index = steps.index;
  const std::string requeued = steps.submit("requeued", true);
  steps.open(requeued, 29500);
  steps.set(requeued, JobState::kRunning, RoundReason::kMemberLost);
  steps.set(requeued, JobState::kPending, RoundReason::kPreempted);
  ASSERT_EQ(table.job(requeued)->state, JobState::kPending);
  ASSERT_EQ(table.job(requeued)->round, 1u);
  const std::string suspended = steps.submit("suspended", true);
  steps.open(suspended, 29501);
  steps.set(suspended, JobState::kRunning, RoundReason::kMemberLost);
  const ApplyResult by_owner = table.apply(
      ++index, encode_command(SuspendJob{"s", 1, suspended, false, 1000, false, ms(4)}));
  EXPECT_TRUE(by_owner.ok()) << by_owner.message;
  ASSERT_EQ(table.job(suspended)->state, JobState::kSuspended);

  NodeLedger ledger;
  ledger.set_capacity("a", 1);
  ledger.hold_table(table);
  EXPECT_EQ(ledger.held_slots("a"), 0u);
  EXPECT_EQ(ledger.free_slots("a", "another"), 1u);
  const PortRange range{29500, 29502};
  EXPECT_EQ(ledger.free_port("a", 0, range), 29502);
}

struct PortRow {
  const char* name;
  std::vector<Holding> held;
  std::string node;
  std::uint64_t round = 0;
  PortRange range;
  std::set<std::uint16_t> avoid;
  std::uint16_t expect = 0;
};

void PrintTo(const PortRow& row, std::ostream* os) { *os << row.name; }

class PortTable : public ::testing::TestWithParam<PortRow> {};

TEST_P(PortTable, OnePortPerNodeAndJob) {
  const PortRow& row = GetParam();
  NodeLedger ledger;
  for (const Holding& h : row.held) ledger.hold(h.job, h.ranks, h.port);
  EXPECT_EQ(ledger.free_port(row.node, row.round, row.range, row.avoid), row.expect) << row.name;
}

INSTANTIATE_TEST_SUITE_P(
    Rows, PortTable,
    ::testing::Values(
        PortRow{"nothing held: the round picks the start", {}, "a", 2, {29500, 29599}, {}, 29502},
        PortRow{"the range wraps", {}, "a", 101, {29500, 29599}, {}, 29501},
        // Two jobs with rank 0 on one node once both got 29501.
        PortRow{"another job's store on the node is skipped",
                {{"x", on("a", 1), 29501}},
                "a",
                1,
                {29500, 29599},
                {},
                29502},
        PortRow{"a store on another node does not count",
                {{"x", on("b", 1), 29501}},
                "a",
                1,
                {29500, 29599},
                {},
                29501},
        PortRow{"only the rank-0 node of a round holds its port",
                {{"x", two_nodes("b", "a"), 29501}},
                "a",
                1,
                {29500, 29599},
                {},
                29501},
        PortRow{"the job's own current port is not reused by its next round",
                {{"self", on("a", 1), 29502}},
                "a",
                2,
                {29500, 29599},
                {},
                29503},
        PortRow{"ports a node reported in use are avoided",
                {},
                "a",
                0,
                {29500, 29502},
                {29500, 29501},
                29502},
        PortRow{"every port taken: none",
                {{"x", on("a", 1), 29500}},
                "a",
                0,
                {29500, 29501},
                {29501},
                0},
        PortRow{"an empty range: none", {}, "a", 0, {0, 0}, {}, 0}),
    [](const ::testing::TestParamInfo<PortRow>& row) { return "row" + std::to_string(row.index); });

TEST(NodeLedger, EndpointPortParsesOnlyAWholePort) {
  EXPECT_EQ(endpoint_port("10.0.0.1:29500"), 29500);
  EXPECT_EQ(endpoint_port("[fe80::1]:29501"), 29501);
  EXPECT_EQ(endpoint_port("host"), 0);
  EXPECT_EQ(endpoint_port("host:"), 0);
  EXPECT_EQ(endpoint_port("host:12a"), 0);
  EXPECT_EQ(endpoint_port("host:65536"), 0);
  EXPECT_EQ(endpoint_port(""), 0);
}

}  // namespace
}  // namespace elastic::rendezvous
