// The leader's round policy (rendezvous/round_policy.h), one table per function: which nodes a
// job may use, who are the planner's candidates and waiters, quarantine (charging, time outs,
// who sits out, relabelling), round verdicts, when a worker failure is acted on, store ports
// and store port conflicts.
#include "daemon/rendezvous/round_policy.h"

#include <gtest/gtest.h>

#include <map>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace elastic::rendezvous {
namespace {

using namespace std::chrono_literals;
using Kind = Decision::Kind;

TimePoint at(std::int64_t ms) { return TimePoint(std::chrono::milliseconds(ms)); }
WallTime wall(std::int64_t ms) { return WallTime(std::chrono::milliseconds(ms)); }

// Members in rank order, one slot each, with their generations.
RankMap ranks(const std::vector<std::pair<std::string, std::uint64_t>>& members) {
  RankMap map;
  std::uint32_t next = 0;
  for (const auto& [node, generation] : members) map.push_back({node, generation, 1, next++});
  return map;
}

JobRecord job_on(const std::vector<std::pair<std::string, std::uint64_t>>& members,
                 JobState state = JobState::kRunning) {
  JobRecord job;
  job.id = "train-1";
  job.spec.min_nodes = 1;
  job.spec.max_nodes = 8;
  job.spec.max_restarts = 3;
  job.spec.restart_backoff = 5s;
  job.state = state;
  job.ranks = ranks(members);
  job.round = members.empty() ? 0 : 4;
  job.store_endpoint = members.empty() ? "" : "10.0.0.1:29501";
  return job;
}

// ---------------------------------------------------------------------------------------------
// usable_for_job

struct UsableRow {
  const char* name;
  NodeStanding node;
  bool usable;
};
void PrintTo(const UsableRow& row, std::ostream* os) { *os << row.name; }

class UsableTable : public ::testing::TestWithParam<UsableRow> {};

TEST_P(UsableTable, Decides) { EXPECT_EQ(usable_for_job(GetParam().node), GetParam().usable); }

INSTANTIATE_TEST_SUITE_P(
    RoundPolicy, UsableTable,
    ::testing::Values(
        UsableRow{"reachable_with_slots", {.reachable = true, .slots_known = true}, true},
        UsableRow{"unreachable", {.reachable = false, .slots_known = true}, false},
        UsableRow{"slots_not_reported", {.reachable = true, .slots_known = false}, false},
        UsableRow{
            "drained_new_work", {.reachable = true, .slots_known = true, .drained = true}, false},
        UsableRow{
            "drained_keeps_its_job",
            {.reachable = true, .slots_known = true, .drained = true, .in_active_round = true},
            true},
        UsableRow{
            "leaving_new_work", {.reachable = true, .slots_known = true, .leaving = true}, false},
        UsableRow{
            "leaving_keeps_its_job",
            {.reachable = true, .slots_known = true, .leaving = true, .in_active_round = true},
            true},
        UsableRow{"drained_and_leaving_keeps_its_job",
                  {.reachable = true,
                   .slots_known = true,
                   .drained = true,
                   .leaving = true,
                   .in_active_round = true},
                  true},
        UsableRow{"member_but_unreachable",
                  {.reachable = false, .slots_known = true, .in_active_round = true},
                  false},
        UsableRow{"member_slots_not_reported",
                  {.reachable = true, .slots_known = false, .in_active_round = true},
                  false}),
    [](const auto& row) { return std::string(row.param.name); });

// ---------------------------------------------------------------------------------------------
// candidates_for

UsableNode usable(std::string name, std::uint64_t generation, bool lost = false,
                  std::int64_t first_seen_ms = 0) {
  return UsableNode{.name = std::move(name),
                    .generation = generation,
                    .free_slots = 2,
                    .address = "10.0.0." + std::to_string(generation),
                    .store_port = static_cast<std::uint16_t>(29500 + generation),
                    .lost = lost,
                    .first_seen = wall(first_seen_ms)};
}

struct CandidateRow {
  const char* name;
  std::vector<UsableNode> usable;
  std::set<std::string> sitting_out;
  // name -> alive, in order.
  std::vector<std::pair<std::string, bool>> candidates;
  std::vector<std::string> waiters;
};
void PrintTo(const CandidateRow& row, std::ostream* os) { *os << row.name; }

class CandidateTable : public ::testing::TestWithParam<CandidateRow> {};

TEST_P(CandidateTable, CandidatesAndWaiters) {
  const CandidateRow& row = GetParam();
  // Members a and b (generation 1).
  const JobRecord job = job_on({{"a", 1}, {"b", 1}});
  const CandidateSet set = candidates_for(job, row.usable, row.sitting_out);
  std::vector<std::pair<std::string, bool>> candidates;
  for (const Candidate& c : set.candidates) candidates.emplace_back(c.name, c.alive);
  EXPECT_EQ(candidates, row.candidates);
  std::vector<std::string> waiters;
  for (const Waiter& w : set.wait_list) waiters.push_back(w.node);
  EXPECT_EQ(waiters, row.waiters);
}

INSTANTIATE_TEST_SUITE_P(
    RoundPolicy, CandidateTable,
    ::testing::Values(CandidateRow{"members_and_a_newcomer",
                                   {usable("a", 1), usable("b", 1), usable("c", 1)},
                                   {},
                                   {{"a", true}, {"b", true}, {"c", true}},
                                   {"c"}},
                      CandidateRow{"lost_member_is_a_dead_candidate",
                                   {usable("a", 1), usable("b", 1, /*lost=*/true)},
                                   {},
                                   {{"a", true}, {"b", false}},
                                   {}},
                      CandidateRow{"lost_newcomer_does_not_wait",
                                   {usable("a", 1), usable("c", 1, /*lost=*/true)},
                                   {},
                                   {{"a", true}, {"c", false}},
                                   {}},
                      CandidateRow{"restarted_member_waits_as_a_newcomer",
                                   {usable("a", 2), usable("b", 1)},
                                   {},
                                   {{"a", true}, {"b", true}},
                                   {"a"}},
                      CandidateRow{"sitting_out_is_neither",
                                   {usable("a", 1), usable("b", 1), usable("c", 1)},
                                   {"b", "c"},
                                   {{"a", true}},
                                   {}},
                      CandidateRow{"sitting_out_of_a_node_not_usable_changes_nothing",
                                   {usable("a", 1)},
                                   {"z"},
                                   {{"a", true}},
                                   {}},
                      CandidateRow{"nothing_usable", {}, {}, {}, {}}),
    [](const auto& row) { return std::string(row.param.name); });

TEST(RoundPolicy, CandidatesCarryTheNodesFacts) {
  const JobRecord job = job_on({{"a", 1}});
  const CandidateSet set =
      candidates_for(job, {usable("a", 1), usable("c", 3, false, 1234)}, /*sitting_out=*/{});
  ASSERT_EQ(set.candidates.size(), 2u);
  const Candidate& c = set.candidates[1];
  EXPECT_EQ(c.name, "c");
  EXPECT_EQ(c.generation, 3u);
  EXPECT_EQ(c.slots, 2u);
  EXPECT_EQ(c.address, "10.0.0.3");
  EXPECT_EQ(c.store_port, 29503);
  ASSERT_EQ(set.wait_list.size(), 1u);
  EXPECT_EQ(set.wait_list[0].generation, 3u);
  EXPECT_EQ(set.wait_list[0].since, wall(1234));
}

// ---------------------------------------------------------------------------------------------
// members_alive

struct AliveRow {
  const char* name;
  std::vector<std::pair<std::string, std::uint64_t>> members;
  std::map<std::string, std::uint64_t> usable;
  std::set<std::pair<std::string, std::uint64_t>> lost;
  bool alive;
};
void PrintTo(const AliveRow& row, std::ostream* os) { *os << row.name; }

class AliveTable : public ::testing::TestWithParam<AliveRow> {};

TEST_P(AliveTable, Decides) {
  const AliveRow& row = GetParam();
  EXPECT_EQ(members_alive(ranks(row.members), row.usable, row.lost), row.alive);
}

INSTANTIATE_TEST_SUITE_P(
    RoundPolicy, AliveTable,
    ::testing::Values(
        AliveRow{"all_usable", {{"a", 1}, {"b", 1}}, {{"a", 1}, {"b", 1}, {"c", 1}}, {}, true},
        AliveRow{"one_not_usable", {{"a", 1}, {"b", 1}}, {{"a", 1}}, {}, false},
        AliveRow{"one_restarted", {{"a", 1}, {"b", 1}}, {{"a", 1}, {"b", 2}}, {}, false},
        AliveRow{
            "one_declared_lost", {{"a", 1}, {"b", 1}}, {{"a", 1}, {"b", 1}}, {{"b", 1}}, false},
        AliveRow{"lost_mark_of_an_older_generation",
                 {{"a", 1}, {"b", 2}},
                 {{"a", 1}, {"b", 2}},
                 {{"b", 1}},
                 true},
        AliveRow{"no_members", {}, {}, {}, true}),
    [](const auto& row) { return std::string(row.param.name); });

// ---------------------------------------------------------------------------------------------
// Quarantine

TEST(RoundPolicy, OnlyAFailureOfAKnownNodeWithRestartsLeftCounts) {
  JobRecord job = job_on({{"a", 1}, {"b", 1}});
  job.restarts = 2;
  job.spec.max_restarts = 3;
  EXPECT_TRUE(counts_toward_quarantine(job, "a", /*members_alive=*/true));
  EXPECT_FALSE(counts_toward_quarantine(job, "", true)) << "unknown node";
  EXPECT_FALSE(counts_toward_quarantine(job, "a", false)) << "a member is lost: not a's fault";
  job.restarts = 3;
  EXPECT_FALSE(counts_toward_quarantine(job, "a", true)) << "the job fails anyway";
  job.restarts = 2;
  job.state = JobState::kRecovering;
  job.recovery_cause = RoundReason::kMemberLost;
  EXPECT_FALSE(counts_toward_quarantine(job, "a", true)) << "recovering from a lost member";
  job.recovery_cause = RoundReason::kWorkerFailed;
  EXPECT_TRUE(counts_toward_quarantine(job, "a", true)) << "recovering from the failure itself";
}

struct LengthRow {
  std::uint32_t failures;
  Duration backoff;
  Duration length;
};
void PrintTo(const LengthRow& row, std::ostream* os) {
  *os << row.failures << " failures, backoff " << row.backoff.count();
}

class QuarantineLength : public ::testing::TestWithParam<LengthRow> {};

TEST_P(QuarantineLength, DoublesFromTheBaseUpToTheCap) {
  EXPECT_EQ(quarantine_length(GetParam().failures, GetParam().backoff), GetParam().length);
}

INSTANTIATE_TEST_SUITE_P(RoundPolicy, QuarantineLength,
                         ::testing::Values(LengthRow{0, 5s, 0s},       // never failed
                                           LengthRow{1, 5s, 0s},       // first is forgiven
                                           LengthRow{2, 5s, 10s},      // the floor
                                           LengthRow{2, 0s, 10s},      // no backoff
                                           LengthRow{2, 30s, 30s},     // backoff above it
                                           LengthRow{3, 5s, 20s},      // doubles
                                           LengthRow{7, 5s, 320s},     // 10 s * 2^5
                                           LengthRow{8, 5s, 600s},     // 640 s: capped
                                           LengthRow{2, 15min, 600s},  // base above the cap
                                           LengthRow{100, 5s, 600s},   // the shift is bounded
                                           LengthRow{4'000'000'000u, 1ms, 600s}));

TEST(RoundPolicy, AFailureIsCountedOncePerRound) {
  QuarantineRecord q;
  q = count_failure(q, /*round=*/1, 5s, at(1000));
  EXPECT_EQ(q, (QuarantineRecord{.failures = 1, .counted_round = 1, .until = {}}))
      << "the first failure sets no time out";
  EXPECT_EQ(count_failure(q, 1, 5s, at(2000)), q) << "the same round again";
  q = count_failure(q, 2, 5s, at(3000));
  EXPECT_EQ(q, (QuarantineRecord{.failures = 2, .counted_round = 2, .until = at(13000)}));
  q = count_failure(q, 3, 5s, at(20000));
  EXPECT_EQ(q, (QuarantineRecord{.failures = 3, .counted_round = 3, .until = at(40000)}));
  EXPECT_EQ(count_failure(q, 3, 5s, at(90000)), q);
}

// A usable node for sitting_out, named by its first letter: "b" (2 free slots), "b-" (declared
// lost), "b0" (no free slot), "b1" (1 free slot).
UsableNode could_be(const std::string& spec) {
  UsableNode node = usable(spec.substr(0, 1), 1);
  if (spec.size() > 1 && spec[1] == '-') node.lost = true;
  if (spec.size() > 1 && spec[1] == '0') node.free_slots = 0;
  if (spec.size() > 1 && spec[1] == '1') node.free_slots = 1;
  return node;
}

struct SittingRow {
  const char* name;
  std::map<std::string, QuarantineRecord> records;
  std::vector<std::string> usable;  // could_be()
  std::uint32_t min_nodes;
  std::int64_t now_ms;
  std::set<std::string> out;
  std::uint32_t workers_per_node = 0;
  std::uint32_t restarts = 2;  // of max_restarts 3: one more failure would end the job
};
void PrintTo(const SittingRow& row, std::ostream* os) { *os << row.name; }

class SittingTable : public ::testing::TestWithParam<SittingRow> {};

TEST_P(SittingTable, Decides) {
  const SittingRow& row = GetParam();
  std::vector<UsableNode> nodes;
  for (const std::string& n : row.usable) nodes.push_back(could_be(n));
  JobSpec spec;
  spec.min_nodes = row.min_nodes;
  spec.workers_per_node = row.workers_per_node;
  spec.max_restarts = 3;
  EXPECT_EQ(sitting_out(row.records, nodes, spec, row.restarts, at(row.now_ms)), row.out);
}

QuarantineRecord failed(std::uint32_t failures, std::int64_t until_ms) {
  return QuarantineRecord{.failures = failures, .counted_round = 1, .until = at(until_ms)};
}

INSTANTIATE_TEST_SUITE_P(
    RoundPolicy, SittingTable,
    ::testing::Values(
        SittingRow{"one_failure_is_forgiven", {{"a", failed(1, 0)}}, {"a", "b"}, 1, 0, {}},
        SittingRow{
            "quarantined_while_not_needed", {{"a", failed(2, 5000)}}, {"a", "b", "c"}, 2, 0, {"a"}},
        SittingRow{"stays_out_past_its_time_out_while_not_needed",
                   {{"a", failed(2, 5000)}},
                   {"a", "b", "c"},
                   2,
                   9000,
                   {"a"}},
        SittingRow{
            "needed_waits_for_its_time_out", {{"a", failed(2, 5000)}}, {"a", "b"}, 2, 4999, {"a"}},
        SittingRow{
            "needed_comes_back_at_its_time_out", {{"a", failed(2, 5000)}}, {"a", "b"}, 2, 5000, {}},
        SittingRow{"not_usable_is_not_listed", {{"z", failed(3, 9000)}}, {"a"}, 1, 0, {}},
        SittingRow{"needed_only_the_expired_come_back",
                   {{"a", failed(2, 1000)}, {"b", failed(3, 8000)}},
                   {"a", "b", "c"},
                   2,
                   2000,
                   {"b"}},
        SittingRow{"nothing_usable", {{"a", failed(2, 1000)}}, {}, 1, 0, {}},
        // Only nodes that could join the next round count toward min_nodes.
        SittingRow{"a_lost_node_cannot_replace_it",
                   {{"a", failed(2, 5000)}},
                   {"a", "b", "c-"},
                   2,
                   5000,
                   {}},
        SittingRow{"a_full_node_cannot_replace_it",
                   {{"a", failed(2, 5000)}},
                   {"a", "b", "c0"},
                   2,
                   5000,
                   {}},
        SittingRow{
            "replaced_by_free_nodes", {{"a", failed(2, 5000)}}, {"a", "b", "c1"}, 2, 5000, {"a"}},
        SittingRow{"too_few_free_slots_for_the_job",
                   {{"a", failed(2, 5000)}},
                   {"a", "b", "c1"},
                   2,
                   5000,
                   {},
                   2},
        SittingRow{"a_lost_node_still_sits_out_before_its_time_out",
                   {{"a", failed(2, 5000)}},
                   {"a", "b", "c-"},
                   2,
                   4000,
                   {"a"}},
        // With restarts to spare the node comes back at its time out, needed or not.
        SittingRow{"spare_restarts_bring_it_back_at_its_time_out",
                   {{"a", failed(2, 5000)}},
                   {"a", "b", "c"},
                   2,
                   5000,
                   {},
                   0,
                   1},
        SittingRow{"spare_restarts_still_wait_for_the_time_out",
                   {{"a", failed(2, 5000)}},
                   {"a", "b", "c"},
                   2,
                   4999,
                   {"a"},
                   0,
                   0},
        SittingRow{"only_the_expired_come_back_with_spare_restarts",
                   {{"a", failed(2, 1000)}, {"b", failed(3, 8000)}},
                   {"a", "b", "c"},
                   1,
                   2000,
                   {"b"},
                   0,
                   0}),
    [](const auto& row) { return std::string(row.param.name); });

struct ChargeRow {
  const char* name;
  Decision decision;
  std::set<std::string> sitting_out;
  bool members_alive;
  bool charged;
};
void PrintTo(const ChargeRow& row, std::ostream* os) { *os << row.name; }

class ChargeTable : public ::testing::TestWithParam<ChargeRow> {};

TEST_P(ChargeTable, Decides) {
  const ChargeRow& row = GetParam();
  const RankMap members = ranks({{"a", 1}, {"b", 1}, {"c", 1}});
  EXPECT_EQ(charged_to_failed_worker(row.decision, members, row.sitting_out, row.members_alive),
            row.charged);
}

Decision open_on(std::vector<std::string> nodes, RoundReason reason = RoundReason::kMemberLost) {
  Decision d;
  d.kind = Kind::kOpenRound;
  d.reason = reason;
  std::uint32_t next = 0;
  for (std::string& n : nodes) d.ranks.push_back({std::move(n), 1, 1, next++});
  return d;
}
Decision of_kind(Kind kind, RoundReason reason = RoundReason::kMemberLost) {
  Decision d;
  d.kind = kind;
  d.reason = reason;
  return d;
}

INSTANTIATE_TEST_SUITE_P(
    RoundPolicy, ChargeTable,
    ::testing::Values(
        ChargeRow{"open_without_the_quarantined", open_on({"a", "b"}), {"c"}, true, true},
        ChargeRow{"open_without_quarantined_and_lost", open_on({"a"}), {"c"}, false, false},
        ChargeRow{"open_on_the_same_members", open_on({"a", "b", "c"}), {"c"}, true, false},
        ChargeRow{"open_without_a_lost_member_only", open_on({"a", "c"}), {}, false, false},
        ChargeRow{"open_already_worker_failed",
                  open_on({"a", "b"}, RoundReason::kWorkerFailed),
                  {"c"},
                  true,
                  false},
        ChargeRow{
            "recover_waiting_for_the_quarantined", of_kind(Kind::kRecover), {"c"}, true, true},
        ChargeRow{"recover_with_a_member_lost", of_kind(Kind::kRecover), {"c"}, false, false},
        ChargeRow{"recover_nobody_sits_out", of_kind(Kind::kRecover), {}, true, false},
        ChargeRow{"recover_someone_else_sits_out", of_kind(Kind::kRecover), {"z"}, true, false},
        ChargeRow{"fail", of_kind(Kind::kFail), {"c"}, true, false},
        ChargeRow{"wait", of_kind(Kind::kWaitUntil), {"c"}, true, false}),
    [](const auto& row) { return std::string(row.param.name); });

// Whether a shrink may skip the lost members' lease wait: members a, b, c of generation 1.
struct LiveRow {
  const char* name;
  Decision decision;
  std::set<std::string> live;
  bool skip;
};
void PrintTo(const LiveRow& row, std::ostream* os) { *os << row.name; }

class LiveSurvivorsTable : public ::testing::TestWithParam<LiveRow> {};

TEST_P(LiveSurvivorsTable, Decides) {
  const LiveRow& row = GetParam();
  const RankMap members = ranks({{"a", 1}, {"b", 1}, {"c", 1}});
  EXPECT_EQ(survivors_re_form_in_place(row.decision, members, row.live), row.skip);
}

Decision open_with_generation(std::uint64_t generation) {
  Decision d = open_on({"a", "b"});
  d.ranks[1].generation = generation;
  return d;
}

INSTANTIATE_TEST_SUITE_P(
    RoundPolicy, LiveSurvivorsTable,
    ::testing::Values(
        LiveRow{"every_kept_member_live", open_on({"a", "b"}), {"a", "b"}, true},
        LiveRow{"only_the_lost_member_live", open_on({"a", "b"}), {"c"}, false},
        LiveRow{"one_kept_member_plain", open_on({"a", "b"}), {"a", "c"}, false},
        LiveRow{"nobody_live", open_on({"a", "b"}), {}, false},
        LiveRow{"a_new_node_need_not_be_live", open_on({"a", "b", "d"}), {"a", "b"}, true},
        LiveRow{"no_member_kept", open_on({"d", "e"}), {"a", "b", "c"}, false},
        LiveRow{"a_kept_name_of_another_generation_is_new", open_with_generation(2), {"a"}, true},
        LiveRow{"recover_is_no_open_round", of_kind(Kind::kRecover), {"a", "b", "c"}, false},
        LiveRow{"fail_is_no_open_round", of_kind(Kind::kFail), {"a", "b", "c"}, false}),
    [](const auto& row) { return std::string(row.param.name); });

// Whether a grow's RoundStart still holds the running ranks' offer: members a, b (ran the
// previous round live) and c (new).
struct HoldRow {
  const char* name;
  bool rendezvous;
  RoundReason reason;
  std::set<std::string> live_before;
  std::set<std::string> live_now;
  bool in_time;
  bool hold;
};
void PrintTo(const HoldRow& row, std::ostream* os) { *os << row.name; }

class HoldTable : public ::testing::TestWithParam<HoldRow> {};

TEST_P(HoldTable, Decides) {
  const HoldRow& row = GetParam();
  const RankMap members = ranks({{"a", 1}, {"b", 1}, {"c", 1}});
  EXPECT_EQ(
      hold_for_joiners(row.rendezvous, row.reason, members, row.live_before, row.live_now, row.in_time),
      row.hold);
}

INSTANTIATE_TEST_SUITE_P(
    RoundPolicy, HoldTable,
    ::testing::Values(
        HoldRow{"joiner_not_ready", true, RoundReason::kGrow, {"a", "b"}, {}, true, true},
        HoldRow{"joiner_ready", true, RoundReason::kGrow, {"a", "b"}, {"c"}, true, false},
        HoldRow{"only_a_running_member_ready", true, RoundReason::kGrow, {"a", "b"}, {"a"}, true,
                true},
        HoldRow{"hold_time_over", true, RoundReason::kGrow, {"a", "b"}, {}, false, false},
        HoldRow{"round_running_already", false, RoundReason::kGrow, {"a", "b"}, {}, true, false},
        HoldRow{"not_a_grow", true, RoundReason::kMemberLost, {"a", "b"}, {}, true, false},
        HoldRow{"nobody_ran_live_before", true, RoundReason::kGrow, {}, {}, true, false},
        HoldRow{"everyone_ran_live_before", true, RoundReason::kGrow, {"a", "b", "c"}, {}, true,
                false}),
    [](const auto& row) { return std::string(row.param.name); });

// ---------------------------------------------------------------------------------------------
// Round verdicts and failure timing

struct VerdictRow {
  const char* name;
  JobState state;
  std::vector<std::pair<std::string, std::uint64_t>> members;
  std::set<std::string> acked;
  std::set<std::string> done;
  RoundVerdict verdict;
};
void PrintTo(const VerdictRow& row, std::ostream* os) { *os << row.name; }

class VerdictTable : public ::testing::TestWithParam<VerdictRow> {};

TEST_P(VerdictTable, Decides) {
  const VerdictRow& row = GetParam();
  EXPECT_EQ(round_verdict(row.state, ranks(row.members), row.acked, row.done), row.verdict);
}

INSTANTIATE_TEST_SUITE_P(
    RoundPolicy, VerdictTable,
    ::testing::Values(
        VerdictRow{"every_member_started",
                   JobState::kRendezvous,
                   {{"a", 1}, {"b", 1}},
                   {"a", "b"},
                   {},
                   RoundVerdict::kRunning},
        VerdictRow{"one_member_not_started",
                   JobState::kRendezvous,
                   {{"a", 1}, {"b", 1}},
                   {"a"},
                   {},
                   RoundVerdict::kNone},
        VerdictRow{"acks_of_others_do_not_count",
                   JobState::kRendezvous,
                   {{"a", 1}, {"b", 1}},
                   {"a", "c"},
                   {},
                   RoundVerdict::kNone},
        VerdictRow{"running_needs_no_more_acks",
                   JobState::kRunning,
                   {{"a", 1}, {"b", 1}},
                   {"a", "b"},
                   {"a"},
                   RoundVerdict::kNone},
        VerdictRow{"every_rank_exited_0",
                   JobState::kRunning,
                   {{"a", 1}, {"b", 1}},
                   {},
                   {"a", "b"},
                   RoundVerdict::kSucceeded},
        VerdictRow{"done_before_every_ack",
                   JobState::kRendezvous,
                   {{"a", 1}, {"b", 1}},
                   {"a"},
                   {"a", "b"},
                   RoundVerdict::kSucceeded},
        VerdictRow{"running_wins_over_succeeded",
                   JobState::kRendezvous,
                   {{"a", 1}, {"b", 1}},
                   {"a", "b"},
                   {"a", "b"},
                   RoundVerdict::kRunning},
        VerdictRow{"recovering_is_not_judged",
                   JobState::kRecovering,
                   {{"a", 1}},
                   {"a"},
                   {"a"},
                   RoundVerdict::kNone},
        VerdictRow{"pending_is_not_judged", JobState::kPending, {}, {}, {}, RoundVerdict::kNone},
        VerdictRow{
            "no_members_never_succeeds", JobState::kRunning, {}, {}, {}, RoundVerdict::kNone},
        // No acks are missing: the round counts as started (the planner never opens one).
        VerdictRow{"rendezvous_without_members",
                   JobState::kRendezvous,
                   {},
                   {},
                   {},
                   RoundVerdict::kRunning}),
    [](const auto& row) { return std::string(row.param.name); });

struct TimingRow {
  const char* name;
  bool failure_known;
  bool member_draining;
  std::int64_t now_ms;
  FailureTiming timing;
};
void PrintTo(const TimingRow& row, std::ostream* os) { *os << row.name; }

class TimingTable : public ::testing::TestWithParam<TimingRow> {};

TEST_P(TimingTable, Decides) {
  const TimingRow& row = GetParam();
  // Seen at 1 s, a 400 ms grace.
  const FailureTiming timing =
      failure_timing(row.failure_known, row.member_draining, at(1000), 400ms, at(row.now_ms));
  EXPECT_EQ(timing.due, row.timing.due);
  EXPECT_EQ(timing.wake_at, row.timing.wake_at);
}

INSTANTIATE_TEST_SUITE_P(
    RoundPolicy, TimingTable,
    ::testing::Values(TimingRow{"no_failure", false, false, 5000, {false, kNever}},
                      TimingRow{"within_the_grace", true, false, 1399, {false, at(1400)}},
                      TimingRow{"at_the_end_of_the_grace", true, false, 1400, {true, kNever}},
                      TimingRow{"long_after", true, false, 90000, {true, kNever}},
                      TimingRow{"a_member_drains", true, true, 90000, {false, kNever}},
                      TimingRow{"drains_within_the_grace", true, true, 1000, {false, kNever}}),
    [](const auto& row) { return std::string(row.param.name); });

// ---------------------------------------------------------------------------------------------
// Store ports

struct PortRow {
  const char* name;
  std::vector<std::uint16_t> held_by_others;  // ports other jobs' rounds hold on node a
  std::set<std::uint16_t> busy;               // reported in use by another process
  std::uint64_t round;
  bool strict;
  std::uint16_t port;
};
void PrintTo(const PortRow& row, std::ostream* os) { *os << row.name; }

class PortTable : public ::testing::TestWithParam<PortRow> {};

TEST_P(PortTable, Chooses) {
  const PortRow& row = GetParam();
  NodeLedger ledger;
  ledger.set_capacity("a", 8);
  int other = 0;
  for (const std::uint16_t port : row.held_by_others) {
    ledger.hold("other-" + std::to_string(other++), ranks({{"a", 1}}), port);
  }
  const PortRange range{29500, 29502};
  EXPECT_EQ(choose_store_port(ledger, "a", row.round, range, row.busy, row.strict), row.port);
}

INSTANTIATE_TEST_SUITE_P(
    RoundPolicy, PortTable,
    ::testing::Values(
        // The scan starts at min + round mod 3.
        PortRow{"free_from_the_rounds_start", {}, {}, 4, false, 29501},
        PortRow{"skips_a_held_port", {29501}, {}, 4, false, 29502},
        PortRow{"skips_a_busy_port", {}, {29501}, 4, false, 29502},
        PortRow{"wraps_around", {29502}, {29501}, 4, false, 29500},
        PortRow{"all_free_ones_busy_tries_one_again", {29500}, {29501, 29502}, 4, false, 29501},
        PortRow{"all_free_ones_busy_strict", {29500}, {29501, 29502}, 4, true, 0},
        PortRow{"all_held_the_rounds_port", {29500, 29501, 29502}, {}, 5, false, 29502},
        PortRow{"all_held_strict", {29500, 29501, 29502}, {}, 5, true, 0},
        PortRow{"strict_with_one_free", {29500, 29502}, {}, 5, true, 29501}),
    [](const auto& row) { return std::string(row.param.name); });

struct ConflictRow {
  const char* name;
  PortConflict conflict;
  bool failure_known;
  bool applies;
};
void PrintTo(const ConflictRow& row, std::ostream* os) { *os << row.name; }

class ConflictTable : public ::testing::TestWithParam<ConflictRow> {};

TEST_P(ConflictTable, Decides) {
  const ConflictRow& row = GetParam();
  // Rank 0 on a (generation 1), the store on port 29501.
  const JobRecord job = job_on({{"a", 1}, {"b", 1}});
  EXPECT_EQ(conflict_applies(job, row.conflict, row.failure_known), row.applies);
}

INSTANTIATE_TEST_SUITE_P(
    RoundPolicy, ConflictTable,
    ::testing::Values(ConflictRow{"rank_0_about_its_port", {"a", 1, 29501, "held"}, false, true},
                      ConflictRow{"another_member", {"b", 1, 29501, ""}, false, false},
                      ConflictRow{"an_older_instance_of_rank_0", {"a", 2, 29501, ""}, false, false},
                      ConflictRow{"another_port", {"a", 1, 29502, ""}, false, false},
                      ConflictRow{"a_failure_is_known", {"a", 1, 29501, ""}, true, false}),
    [](const auto& row) { return std::string(row.param.name); });

TEST(RoundPolicy, ConflictOfAJobWithoutRoundNeverApplies) {
  const JobRecord job = job_on({}, JobState::kPending);
  EXPECT_FALSE(conflict_applies(job, PortConflict{"a", 1, 29501, ""}, false));
}

TEST(RoundPolicy, TheStoreMovesToAFreePortAFewTimes) {
  EXPECT_TRUE(may_move_store(29502, 0));
  EXPECT_TRUE(may_move_store(29502, kMaxPortMoves - 1));
  EXPECT_FALSE(may_move_store(29502, kMaxPortMoves));
  EXPECT_FALSE(may_move_store(0, 0)) << "no free port";
}

}  // namespace
}  // namespace elastic::rendezvous
