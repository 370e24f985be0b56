// The cluster scheduler: one table row per rule of scheduler.h, then a property test over
// random clusters (fixed seed) that checks the invariants on every output, then the
// throughput scaling steps.
#include "daemon/rendezvous/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace elastic::rendezvous {
namespace {

using Kind = Preemption::Kind;
using Names = std::set<std::string>;

WallTime at(std::int64_t t) { return WallTime(std::chrono::milliseconds(t)); }

// A job, built fluently: queued, 1 node, 1 worker per node, priority 0, submitted at 0.
struct J {
  SchedJob job;
  explicit J(std::string id) {
    job.id = std::move(id);
    job.user = "alice";
    job.gid = 100;
    job.workers_per_node = 1;
  }
  J& prio(std::int32_t p) { return job.priority = p, *this; }
  J& submitted(std::int64_t t) { return job.submitted_at = at(t), *this; }
  J& size(std::uint32_t min, std::uint32_t max) {
    job.min_nodes = min;
    job.max_nodes = max;
    return *this;
  }
  J& wpn(std::uint32_t n) { return job.workers_per_node = n, *this; }
  J& cap(std::uint32_t n) { return job.size_cap = n, *this; }
  J& avoid(std::set<std::string> nodes) { return job.avoid = std::move(nodes), *this; }
  J& owner(std::string user, std::uint32_t gid) {
    job.user = std::move(user);
    job.gid = gid;
    return *this;
  }
  J& held() { return job.state = SchedState::kHeld, *this; }
  J& preemptible() { return job.preemptible = true, *this; }
  // Running on these nodes (rank map order), `slots` each.
  J& on(std::vector<std::string> nodes, std::uint32_t slots = 1) {
    job.state = SchedState::kRunning;
    for (std::string& n : nodes) job.holdings.emplace_back(std::move(n), slots);
    return *this;
  }
  operator SchedJob() const { return job; }  // NOLINT: lets tables list builders
};

// Nodes named a, b, c, ... with `slots` each.
std::vector<SchedNode> nodes(std::size_t n, std::uint32_t slots = 1) {
  std::vector<SchedNode> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back({std::string(1, char('a' + i)), slots, true});
  return out;
}

// What a row expects of one job's plan ("" reason: not checked unless `reason_has` is set).
struct Expect {
  std::string job;
  Names allowed;
  std::uint32_t cap = 0;
  std::size_t position = 0;
  std::string reason_has = "";  // a substring the reason must contain ("-": must be empty)
  Names reserved = {};
};

struct ExpectPreemption {
  std::string victim;
  Kind kind;
  std::vector<std::string> keep;
  std::vector<std::string> released;
  std::string for_job;
};

struct Row {
  std::string name;
  std::vector<SchedJob> jobs;
  std::vector<SchedNode> nodes;
  Limits limits = {};
  std::vector<Expect> plans = {};
  std::vector<ExpectPreemption> preemptions = {};
};

void PrintTo(const Row& row, std::ostream* os) { *os << row.name; }

class SchedulerRule : public ::testing::TestWithParam<Row> {};

TEST_P(SchedulerRule, Plans) {
  const Row& row = GetParam();
  const SchedulerOutput out = schedule({row.jobs, row.nodes, row.limits});
  for (const Expect& e : row.plans) {
    SCOPED_TRACE(e.job);
    ASSERT_TRUE(out.plans.contains(e.job));
    const JobPlan& plan = out.plans.at(e.job);
    EXPECT_EQ(plan.allowed, e.allowed);
    EXPECT_EQ(plan.cap, e.cap);
    EXPECT_EQ(plan.position, e.position);
    EXPECT_EQ(plan.reserved, e.reserved);
    if (e.reason_has == "-") {
      EXPECT_EQ(plan.reason, "");
    } else {
      EXPECT_NE(plan.reason.find(e.reason_has), std::string::npos) << plan.reason;
    }
  }
  ASSERT_EQ(out.preemptions.size(), row.preemptions.size());
  for (std::size_t i = 0; i < row.preemptions.size(); ++i) {
    const ExpectPreemption& e = row.preemptions[i];
    const Preemption& p = out.preemptions[i];
    EXPECT_EQ(p.victim, e.victim);
    EXPECT_EQ(p.kind, e.kind);
    EXPECT_EQ(p.keep, e.keep);
    EXPECT_EQ(p.released, e.released);
    EXPECT_EQ(p.for_job, e.for_job);
    EXPECT_NE(p.reason.find("preempted for job " + e.for_job), std::string::npos) << p.reason;
  }
}

Limits user_limit(std::string user, std::uint32_t nodes, std::uint32_t jobs) {
  Limits l;
  l.users[std::move(user)] = {nodes, jobs};
  return l;
}

std::vector<Row> rows() {
  return {
      // --- queue order and positions ---
      {"order: priority, then submit time, then id; positions 1-based among queued",
       {J("low").prio(0).submitted(1), J("high-new").prio(5).submitted(9),
        J("high-old-b").prio(5).submitted(3), J("high-old-a").prio(5).submitted(3),
        J("run").on({"a"})},
       nodes(1),
       {},
       {{"high-old-a", {}, 0, 1, "(position 1 of 4)"},
        {"high-old-b", {}, 0, 2, "(position 2 of 4)"},
        {"high-new", {}, 0, 3, "(position 3 of 4)"},
        {"low", {}, 0, 4, "waiting for 1 node, 0 fit (position 4 of 4)"},
        {"run", {"a"}, 1, 0, "-"}}},
      {"held jobs are ignored: no plan, no slots",
       {J("gone").on({"a"}).held(), J("q").size(2, 2)},
       nodes(2),
       {},
       {{"q", {"a", "b"}, 2, 1, "-"}}},

      // --- starting and caps ---
      {"a queued job starts on min and is capped at max",
       {J("q").size(2, 3)},
       nodes(5),
       {},
       {{"q", {"a", "b", "c"}, 3, 1, "-"}}},
      {"size_cap caps a starting job below max",
       {J("q").size(1, 4).cap(2)},
       nodes(5),
       {},
       {{"q", {"a", "b"}, 2, 1, "-"}}},
      {"size_cap below min counts as min",
       {J("q").size(2, 4).cap(1)},
       nodes(5),
       {},
       {{"q", {"a", "b"}, 2, 1, "-"}}},
      {"the user's node limit caps a starting job",
       {J("q").size(1, 4)},
       nodes(5),
       user_limit("alice", 3, 0),
       {{"q", {"a", "b", "c"}, 3, 1, "-"}}},
      {"a job short of min waits and reserves what fits",
       {J("q").size(3, 3)},
       nodes(2),
       {},
       {{"q", {}, 0, 1, "waiting for 3 nodes, 2 fit (position 1 of 1)", {"a", "b"}}}},

      // --- reservations and backfill ---
      {"the head's reserved nodes are not taken by a smaller job after it",
       {J("head").size(3, 3).submitted(1), J("small").submitted(2), J("r").on({"c"})},
       nodes(3),
       {},
       {{"head", {}, 0, 1, "waiting for 3 nodes, 2 fit", {"a", "b"}},
        {"small", {}, 0, 2, "others reserved for job head ahead of it"}}},
      {"backfill onto a node the head cannot use (too few free slots for its workers_per_node)",
       {J("head").size(2, 2).wpn(2).submitted(1), J("small").submitted(2)},
       {{"a", 2, true}, {"b", 1, true}},
       {},
       {{"head", {}, 0, 1, "waiting for 2 nodes, 1 fits", {"a"}}, {"small", {"b"}, 1, 2, "-"}}},
      {"backfill onto nodes the head cannot use, next to its reservation",
       {J("r").on({"a", "b"}), J("head").size(3, 3).submitted(1).wpn(2),
        J("small").size(1, 2).submitted(2)},
       {{"a", 1, true}, {"b", 1, true}, {"c", 2, true}, {"d", 1, true}, {"e", 1, true}},
       {},
       {{"head", {}, 0, 1, "waiting for 3 nodes, 1 fits", {"c"}},
        {"small", {"d", "e"}, 2, 2, "-"}}},
      {"a shared node keeps the slots a reservation leaves",
       {J("r").on({"a"}, 1), J("head").size(2, 2).wpn(2).submitted(1),
        J("small").wpn(1).submitted(2)},
       {{"a", 4, true}},
       {},
       {{"head", {}, 0, 1, "waiting for 2 nodes, 1 fits", {"a"}}, {"small", {"a"}, 1, 2, "-"}}},

      // --- running jobs ---
      {"running jobs keep their holdings and grow into free nodes in priority order",
       {J("lo").prio(1).size(1, 3).on({"a"}), J("hi").prio(2).size(1, 3).on({"b"})},
       nodes(4),
       {},
       {{"hi", {"b", "c", "d"}, 3, 0, "-"},
        {"lo", {"a"}, 1, 0, "holds 1 of 3 nodes, no more free fits"}}},
      {"a running job after a waiting job does not grow into its reserved nodes",
       {J("head").prio(5).size(3, 3), J("r").size(1, 3).on({"c"})},
       nodes(3),
       {},
       {{"head", {}, 0, 1, "waiting for 3 nodes, 2 fit", {"a", "b"}},
        {"r", {"c"}, 1, 0, "holds 1 of 3 nodes, no more free fits, others reserved for job head"}}},
      {"a running job at its size_cap does not grow; above it, its cap shrinks it",
       {J("at").size(1, 4).cap(2).on({"a", "b"}), J("above").size(1, 4).cap(1).on({"c", "d"})},
       nodes(6),
       {},
       {{"at", {"a", "b"}, 2, 0, "-"}, {"above", {"c", "d"}, 1, 0, "-"}}},
      {"running growth stops at the node limit",
       {J("r").size(1, 5).on({"a"})},
       nodes(5),
       user_limit("alice", 3, 0),
       {{"r",
         {"a", "b", "c"},
         3,
         0,
         "user alice holds 3 nodes, the limit (limits.users.alice.max_nodes)"}}},
      {"workers_per_node 0 takes every free slot of a node",
       {J("whole").wpn(0).submitted(1), J("one").wpn(1).submitted(2)},
       {{"a", 4, true}},
       {},
       {{"whole", {"a"}, 1, 1, "-"}, {"one", {}, 0, 2, "waiting for 1 node, 0 fit"}}},
      {"workers_per_node 0 takes what is left after a running job's slots",
       {J("r").on({"a"}, 3), J("whole").wpn(0)},
       {{"a", 4, true}},
       {},
       {{"whole", {"a"}, 1, 1, "-"}}},
      {"slots are never given twice: wpn 1 and 2 on 4-slot nodes",
       {J("r").on({"a"}, 2), J("two").wpn(2).size(2, 2).submitted(1),
        J("one").wpn(1).size(1, 2).submitted(2), J("more").wpn(2).submitted(3)},
       {{"a", 4, true}, {"b", 4, true}},
       {},
       {{"two", {"a", "b"}, 2, 1, "-"},
        {"one", {"b"}, 1, 2, "-"},
        {"more", {}, 0, 3, "waiting for 1 node, 0 fit"}}},

      // --- limits ---
      {"the user's running-jobs limit holds a job back, which reserves nothing",
       {J("r").on({"a"}), J("q1").submitted(1).size(2, 2),
        J("other").owner("bob", 200).submitted(2)},
       nodes(3),
       {{0, 1}, {}, {}, {}, {}},
       {{"q1", {}, 0, 1, "user alice runs 1 job, the limit (limits.max_running_jobs_per_user)"},
        {"other", {"b"}, 1, 2, "-"}}},
      {"a job starting in the pass counts toward the running-jobs limit",
       {J("q1").submitted(1), J("q2").submitted(2)},
       nodes(3),
       user_limit("alice", 0, 1),
       {{"q1", {"a"}, 1, 1, "-"}, {"q2", {}, 0, 2, "(limits.users.alice.max_running_jobs)"}}},
      {"a user's entry overrides the default",
       {J("q1").submitted(1), J("q2").submitted(2)},
       nodes(3),
       []() {
         Limits l;
         l.per_user.max_running_jobs = 1;
         l.users["alice"] = {0, 2};
         return l;
       }(),
       {{"q1", {"a"}, 1, 1, "-"}, {"q2", {"b"}, 1, 2, "-"}}},
      {"the group's node limit: a min that would pass it waits",
       {J("r").owner("bob", 7).on({"a", "b"}), J("q").owner("carol", 7).size(2, 2)},
       nodes(5),
       []() {
         Limits l;
         l.groups[7] = {3, 0};
         l.group_names[7] = "physics";
         return l;
       }(),
       {{"q",
         {},
         0,
         1,
         "group physics holds 2 nodes and the job needs 2, past the limit of 3 "
         "(limits.groups.physics.max_nodes)"}}},
      {"the default group node limit caps growth",
       {J("q").size(1, 5)},
       nodes(5),
       []() {
         Limits l;
         l.per_group.max_nodes = 2;
         return l;
       }(),
       {{"q", {"a", "b"}, 2, 1, "-"}}},

      // --- preemption ---
      {"shrink the lowest priority first, last rank-map entries first, never below min",
       {J("big").prio(10).size(2, 2).submitted(5), J("lo").prio(0).size(1, 3).on({"a", "b", "c"}),
        J("mid").prio(5).size(1, 2).on({"d", "e"})},
       nodes(5),
       {},
       {{"big", {}, 0, 1, "waiting for job lo to release 2 nodes (preempted for it)", {"b", "c"}},
        {"lo", {"a"}, 1, 0, "shrinks to 1 node for job big"},
        {"mid", {"d", "e"}, 2, 0, "-"}},
       {{"lo", Kind::kShrink, {"a"}, {"b", "c"}, "big"}}},
      {"newest first among equal priorities, and no more than needed",
       {J("big").prio(10).size(1, 1).submitted(5), J("old").size(1, 2).submitted(1).on({"a", "b"}),
        J("new").size(1, 2).submitted(2).on({"c", "d"})},
       nodes(4),
       {},
       {{"big", {}, 0, 1, "waiting for job new to release 1 node", {"d"}},
        {"new", {"c"}, 1, 0, "shrinks to 1 node"},
        {"old", {"a", "b"}, 2, 0, "-"}},
       {{"new", Kind::kShrink, {"c"}, {"d"}, "big"}}},
      {"equal priority is not preempted, even when newer",
       {J("q").prio(1).size(1, 1).submitted(5),
        J("r").prio(1).size(1, 2).submitted(9).on({"a", "b"})},
       nodes(2),
       {},
       {{"q", {}, 0, 1, "waiting for 1 node, 0 fit"}, {"r", {"a", "b"}, 2, 0, "-"}}},
      {"suspension only of preemptible jobs and only after shrinks are not enough",
       {J("big").prio(10).size(3, 3).submitted(5),
        J("p").prio(0).size(1, 2).submitted(1).preemptible().on({"a", "b"}),
        J("s").prio(1).size(1, 2).submitted(2).on({"c", "d"})},
       nodes(4),
       {},
       {{"big", {}, 0, 1, "waiting for jobs p, s to release 3 nodes", {"a", "b", "d"}},
        {"p", {}, 0, 0, "suspended for job big"},
        {"s", {"c"}, 1, 0, "shrinks to 1 node"}},
       {{"p", Kind::kSuspend, {}, {"a", "b"}, "big"}, {"s", Kind::kShrink, {"c"}, {"d"}, "big"}}},
      {"shrinks first: a preemptible job is not suspended when shrinking is enough",
       {J("big").prio(10).size(1, 1).submitted(5),
        J("p").prio(0).size(1, 2).submitted(1).preemptible().on({"a", "b"})},
       nodes(2),
       {},
       {{"p", {"a"}, 1, 0, "shrinks to 1 node"}},
       {{"p", Kind::kShrink, {"a"}, {"b"}, "big"}}},
      {"nothing is preempted when even preemption cannot reach min; it reserves what fits",
       {J("big").prio(10).size(4, 4).submitted(5), J("lo").size(1, 2).on({"a", "b"})},
       nodes(3),
       {},
       {{"big", {}, 0, 1, "waiting for 4 nodes, 1 fits", {"c"}}, {"lo", {"a", "b"}, 2, 0, "-"}}},
      {"free nodes count toward min: it takes only the rest",
       {J("big").prio(10).size(2, 2).submitted(5), J("lo").size(1, 3).on({"a", "b"})},
       nodes(3),
       {},
       {{"big", {}, 0, 1, "release 1 node", {"b", "c"}}, {"lo", {"a"}, 1, 0, "shrinks"}},
       {{"lo", Kind::kShrink, {"a"}, {"b"}, "big"}}},
      {"a victim is preempted at most once per pass",
       {J("b1").prio(10).size(1, 1).submitted(1), J("b2").prio(10).size(1, 1).submitted(2),
        J("lo").size(1, 3).on({"a", "b", "c"})},
       nodes(3),
       {},
       {{"b1", {}, 0, 1, "waiting for job lo", {"c"}},
        {"b2", {}, 0, 2, "waiting for 1 node, 0 fit"},
        {"lo", {"a", "b"}, 2, 0, "shrinks to 2 nodes"}},
       {{"lo", Kind::kShrink, {"a", "b"}, {"c"}, "b1"}}},
      {"a limited job does not preempt",
       {J("big").prio(10).owner("bob", 1), J("r").owner("bob", 1).prio(5).on({"a"}),
        J("lo").size(1, 2).on({"b", "c"})},
       nodes(3),
       user_limit("bob", 0, 1),
       {{"big", {}, 0, 1, "user bob runs 1 job"}, {"lo", {"b", "c"}, 2, 0, "-"}}},
      {"a released node that the job cannot use does not count (workers_per_node)",
       {J("big").prio(10).wpn(2).size(1, 1).submitted(5), J("lo").size(1, 3).on({"a", "b", "c"})},
       {{"a", 2, true}, {"b", 2, true}, {"c", 1, true}},
       {},
       {{"big", {}, 0, 1, "waiting for job lo to release 1 node", {"b"}},
        {"lo", {"a"}, 1, 0, "shrinks"}},
       {{"lo", Kind::kShrink, {"a"}, {"b", "c"}, "big"}}},

      {"a victim whose nodes the job cannot use is left alone",
       {J("big").prio(10).wpn(2).size(1, 1).submitted(5),
        J("lo1").prio(0).size(1, 2).preemptible().on({"a", "b"}),
        J("lo2").prio(1).size(1, 2).on({"c", "d"}, 2)},
       {{"a", 1, true}, {"b", 1, true}, {"c", 2, true}, {"d", 2, true}},
       {},
       {{"big", {}, 0, 1, "waiting for job lo2 to release 1 node", {"d"}},
        {"lo1", {"a", "b"}, 2, 0, "-"},
        {"lo2", {"c"}, 1, 0, "shrinks"}},
       {{"lo2", Kind::kShrink, {"c"}, {"d"}, "big"}}},

      // --- unusable nodes ---
      {"an unusable node fits nobody, but a running job keeps holding it",
       {J("r").size(1, 2).on({"a"}), J("q")},
       {{"a", 1, false}, {"b", 1, false}},
       {},
       {{"r", {"a"}, 1, 0, "holds 1 of 2 nodes"}, {"q", {}, 0, 1, "waiting for 1 node, 0 fit"}}},
      {"a lost member's node does not count: its replacement is granted at once",
       {J("r").size(2, 3).on({"a", "b", "c"}), J("q").submitted(5)},
       {{"a", 1, true}, {"b", 1, true}, {"c", 1, false}, {"d", 1, true}},
       {},
       {{"r", {"a", "b", "c", "d"}, 3, 0, "-"}, {"q", {}, 0, 1, "waiting for 1 node, 0 fit"}}},
      {"a node the job's planner keeps out (lost memory, quarantine) is not granted to it",
       {J("r").size(1, 3).on({"a"}).avoid({"b"}), J("q").submitted(5)},
       nodes(2),
       {},
       {{"r", {"a"}, 1, 0, "holds 1 of 3 nodes, no more free fits"}, {"q", {"b"}, 1, 1, "-"}}},
      {"a drained member's node counts (its work runs on): no replacement is granted",
       {J("r").size(2, 3).on({"a", "b", "c"}), J("q").submitted(5)},
       {{"a", 1, true}, {"b", 1, true}, {"c", 1, false, true}, {"d", 1, true}},
       {},
       {{"r", {"a", "b", "c"}, 3, 0, "-"}, {"q", {"d"}, 1, 1, "-"}}},
  };
}

INSTANTIATE_TEST_SUITE_P(Rules, SchedulerRule, ::testing::ValuesIn(rows()),
                         [](const auto& row) { return "row" + std::to_string(row.index); });

TEST(Scheduler, SameInputInAnyOrderGivesTheSameOutput) {
  for (const Row& row : rows()) {
    SCOPED_TRACE(row.name);
    const SchedulerOutput want = schedule({row.jobs, row.nodes, row.limits});
    std::mt19937 rng(7);
    for (int i = 0; i < 10; ++i) {
      SchedulerInput in{row.jobs, row.nodes, row.limits};
      std::shuffle(in.jobs.begin(), in.jobs.end(), rng);
      std::shuffle(in.nodes.begin(), in.nodes.end(), rng);
      EXPECT_EQ(schedule(in), want);
    }
  }
}

TEST(SchedulerDeath, BrokenJobSizesAbort) {
  EXPECT_DEATH(schedule({{J("q").size(0, 1)}, nodes(1), {}}), "broken invariant");
  EXPECT_DEATH(schedule({{J("q").size(3, 2)}, nodes(1), {}}), "broken invariant");
}

// --- Invariants over random clusters ---

struct Cluster {
  SchedulerInput input;
  std::map<std::string, std::uint32_t> free;  // slots not held by a running job, by node
};

Cluster random_cluster(std::mt19937& rng) {
  auto pick = [&](std::uint32_t lo, std::uint32_t hi) {
    return std::uniform_int_distribution<std::uint32_t>(lo, hi)(rng);
  };
  Cluster c;
  const std::uint32_t node_count = pick(1, 64);
  for (std::uint32_t i = 0; i < node_count; ++i) {
    const std::string name = "n" + std::to_string(100 + i);
    c.input.nodes.push_back({name, pick(1, 4), pick(0, 9) != 0});
    c.free[name] = c.input.nodes.back().slots;
  }
  const std::uint32_t job_count = pick(0, 20);
  for (std::uint32_t i = 0; i < job_count; ++i) {
    SchedJob j;
    j.id = "j" + std::to_string(i);
    j.priority = static_cast<std::int32_t>(pick(0, 3));
    j.submitted_at = at(pick(0, 10));
    j.min_nodes = pick(1, 6);
    j.max_nodes = j.min_nodes + pick(0, 4);
    j.workers_per_node = pick(0, 4) == 0 ? 0 : pick(1, 2);
    j.preemptible = pick(0, 2) == 0;
    j.size_cap = pick(0, 2) == 0 ? pick(1, j.max_nodes) : 0;
    j.user = "u" + std::to_string(pick(0, 2));
    j.gid = pick(0, 1);
    const std::uint32_t state = pick(0, 9);
    j.state = state < 5   ? SchedState::kQueued
              : state < 9 ? SchedState::kRunning
                          : SchedState::kHeld;
    if (j.state != SchedState::kQueued) {
      // Holdings that the cluster's slots allow, in a random rank order.
      std::vector<SchedNode> order = c.input.nodes;
      std::shuffle(order.begin(), order.end(), rng);
      const std::uint32_t want = pick(1, j.max_nodes);
      for (const SchedNode& n : order) {
        std::uint32_t& left = c.free[n.name];
        const std::uint32_t need = j.workers_per_node == 0 ? left : j.workers_per_node;
        if (j.holdings.size() >= want || left == 0 || need > left) continue;
        j.holdings.emplace_back(n.name, need);
        if (j.state == SchedState::kRunning) left -= need;
      }
      if (j.state == SchedState::kHeld) j.holdings.clear();  // held: it holds nothing here
    }
    c.input.jobs.push_back(j);
  }
  // Limits in a quarter of the clusters each, so that most jobs meet contention, not limits.
  if (pick(0, 3) == 0) c.input.limits.per_user = {pick(0, 16), pick(0, 4)};
  if (pick(0, 3) == 0) c.input.limits.per_group = {pick(0, 24), pick(0, 6)};
  if (pick(0, 3) == 0) c.input.limits.users["u0"] = {pick(0, 8), pick(0, 2)};
  return c;
}

bool holds(const SchedJob& j, const std::string& node) {
  return std::any_of(j.holdings.begin(), j.holdings.end(),
                     [&](const auto& h) { return h.first == node; });
}

bool ahead_of(const SchedJob& a, const SchedJob& b) {
  return std::tie(b.priority, a.submitted_at, a.id) < std::tie(a.priority, b.submitted_at, b.id);
}

std::string debug(const Cluster& c, const SchedulerOutput& out) {
  std::string t = "\n";
  for (const SchedNode& n : c.input.nodes)
    t += n.name + " slots " + std::to_string(n.slots) + (n.usable ? "" : " unusable") + " free " +
         std::to_string(c.free.at(n.name)) + "\n";
  for (const SchedJob& j : c.input.jobs) {
    t += j.id + " st" + std::to_string(int(j.state)) + " p" + std::to_string(j.priority) + " min" +
         std::to_string(j.min_nodes) + " max" + std::to_string(j.max_nodes) + " wpn" +
         std::to_string(j.workers_per_node) + " holds";
    for (auto& h : j.holdings) t += " " + h.first + ":" + std::to_string(h.second);
    if (out.plans.count(j.id)) {
      const JobPlan& p = out.plans.at(j.id);
      t += " | allowed";
      for (auto& n : p.allowed) t += " " + n;
      t += " reserved";
      for (auto& n : p.reserved) t += " " + n;
      t += " cap " + std::to_string(p.cap) + " " + p.reason;
    }
    t += "\n";
  }
  for (const Preemption& p : out.preemptions) t += p.reason + "\n";
  return t;
}

// Every invariant of scheduler.h that can be read off one output.
void check_invariants(const Cluster& c, const SchedulerOutput& out) {
  std::map<std::string, const SchedJob*> jobs;
  for (const SchedJob& j : c.input.jobs) {
    if (j.state != SchedState::kHeld) jobs[j.id] = &j;
  }
  ASSERT_EQ(out.plans.size(), jobs.size());
  std::map<std::string, const SchedNode*> nodes;
  for (const SchedNode& n : c.input.nodes) nodes[n.name] = &n;

  // Preemptions: strictly lower priority, once per victim, shrinks keep min_nodes.
  std::set<std::string> victims;
  std::set<std::string> released;
  for (const Preemption& p : out.preemptions) {
    const SchedJob& v = *jobs.at(p.victim);
    const SchedJob& f = *jobs.at(p.for_job);
    EXPECT_LT(v.priority, f.priority) << p.reason;
    EXPECT_TRUE(victims.insert(p.victim).second) << p.victim << " preempted twice";
    EXPECT_EQ(p.keep.size() + p.released.size(), v.holdings.size());
    if (p.kind == Kind::kShrink) {
      EXPECT_GE(p.keep.size(), v.min_nodes) << p.reason;
      EXPECT_FALSE(p.released.empty());
    } else {
      EXPECT_TRUE(v.preemptible) << p.reason;
      EXPECT_TRUE(p.keep.empty());
    }
    released.insert(p.released.begin(), p.released.end());
  }
  // A preempting job waits this pass, reserving freed nodes; every victim frees one of them.
  for (const Preemption& p : out.preemptions) {
    const JobPlan& plan = out.plans.at(p.for_job);
    EXPECT_EQ(plan.cap, 0u);
    EXPECT_TRUE(plan.allowed.empty());
    EXPECT_TRUE(std::any_of(p.released.begin(), p.released.end(), [&](const std::string& n) {
      return plan.reserved.contains(n);
    })) << p.reason;
  }

  // Positions: 1..q over the queued jobs, in order.
  std::vector<const SchedJob*> queued;
  for (const auto& [id, j] : jobs) {
    if (j->state == SchedState::kQueued) queued.push_back(j);
  }
  std::sort(queued.begin(), queued.end(), [](auto* a, auto* b) { return ahead_of(*a, *b); });
  for (std::size_t i = 0; i < queued.size(); ++i) {
    EXPECT_EQ(out.plans.at(queued[i]->id).position, i + 1) << queued[i]->id;
  }

  for (const auto& [id, j] : jobs) {
    const JobPlan& plan = out.plans.at(id);
    if (j->state == SchedState::kRunning && !(victims.contains(id) && plan.cap == 0)) {
      EXPECT_GE(plan.cap, j->min_nodes) << id << ": " << plan.reason;
    }
  }

  // Slots: grants, and reservations of nodes no preemption frees, fit each node's free slots.
  // A workers_per_node 0 taker takes what the others left, at least one slot, so there is at
  // most one of it.
  for (const auto& [name, node] : nodes) {
    std::uint32_t taken = 0;
    std::size_t whole = 0;
    for (const auto& [id, j] : jobs) {
      const JobPlan& plan = out.plans.at(id);
      const bool granted = plan.allowed.contains(name) && !holds(*j, name);
      const bool reserved = plan.reserved.contains(name) && !released.contains(name);
      if (granted) {
        EXPECT_TRUE(node->usable) << id << " granted unusable " << name;
      }
      if (!granted && !reserved) continue;
      whole += j->workers_per_node == 0 ? 1 : 0;
      taken += std::max(1u, j->workers_per_node);
    }
    EXPECT_LE(taken, c.free.at(name)) << name << debug(c, out);
    EXPECT_LE(whole, 1u) << name << debug(c, out);
  }

  // Backfill: a queued job that starts never overlaps a reservation of a job ahead of it
  // beyond the node's free slots.
  for (const auto& [sid, s] : jobs) {
    const JobPlan& sp = out.plans.at(sid);
    if (s->state != SchedState::kQueued || sp.cap < s->min_nodes ||
        sp.allowed.size() < s->min_nodes) {
      continue;
    }
    for (const auto& [hid, h] : jobs) {
      const JobPlan& hp = out.plans.at(hid);
      if (h->state != SchedState::kQueued || !ahead_of(*h, *s) || hp.cap != 0) continue;
      for (const std::string& n : hp.reserved) {
        if (!sp.allowed.contains(n) || released.contains(n)) continue;
        // Both fit only where the reservation left a slot (a workers_per_node 0 reservation
        // leaves none).
        EXPECT_TRUE(h->workers_per_node != 0 &&
                    h->workers_per_node + std::max(1u, s->workers_per_node) <= c.free.at(n))
            << sid << " took " << n << " reserved by " << hid << debug(c, out);
      }
    }
  }
}

TEST(SchedulerProperty, InvariantsHoldOnRandomClusters) {
  std::mt19937 rng(20261127);
  for (int round = 0; round < 3000; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const Cluster c = random_cluster(rng);
    const SchedulerOutput out = schedule(c.input);
    check_invariants(c, out);

    // The same input in another order gives the same output.
    SchedulerInput shuffled = c.input;
    std::shuffle(shuffled.jobs.begin(), shuffled.jobs.end(), rng);
    std::shuffle(shuffled.nodes.begin(), shuffled.nodes.end(), rng);
    ASSERT_EQ(schedule(shuffled), out);

    // A queued job never changes the plan of a job ahead of it: make each one that starts
    // unable to start, and nothing ahead of it may differ.
    for (SchedJob& s : shuffled.jobs) {
      const JobPlan& sp = out.plans.count(s.id) ? out.plans.at(s.id) : JobPlan{};
      if (s.state != SchedState::kQueued || sp.cap == 0) continue;
      const SchedJob original = s;
      s.min_nodes = s.max_nodes = 1000;
      const SchedulerOutput without = schedule(shuffled);
      s = original;
      for (const auto& [id, plan] : out.plans) {
        const auto it = std::find_if(c.input.jobs.begin(), c.input.jobs.end(),
                                     [&](const SchedJob& j) { return j.id == id; });
        if (ahead_of(*it, original)) {
          EXPECT_EQ(without.plans.at(id), plan) << id << " vs " << s.id;
        }
      }
      if (HasFailure()) return;
    }
    if (HasFailure()) return;
  }
}

// --- Throughput scaling ---

struct ScaleRow {
  std::string name;
  ScaleInput in;
  ScaleState next;
  std::string reason;  // exact ("" when nothing changes)
};

void PrintTo(const ScaleRow& row, std::ostream* os) { *os << row.name; }

// A literal ScaleState (a function: GCC 12 warns wrongly about maps in nested braced tables).
ScaleState st(std::uint32_t size, std::uint32_t good, bool settled,
              std::map<std::uint32_t, double> rate) {
  ScaleState s;
  s.size = size;
  s.good = good;
  s.settled = settled;
  s.rate = std::move(rate);
  return s;
}

ScaleInput scale_in(ScaleState state, std::uint32_t min, std::uint32_t max) {
  ScaleInput in;
  in.state = std::move(state);
  in.min_nodes = min;
  in.max_nodes = max;
  return in;
}
ScaleInput measured(ScaleInput in, std::uint32_t size, double rate) {
  in.measured = {size, rate};
  return in;
}
ScaleInput short_of_nodes(ScaleInput in) {
  in.short_of_nodes = true;
  return in;
}
ScaleInput cluster_changed(ScaleInput in) {
  in.cluster_changed = true;
  return in;
}

std::vector<ScaleRow> scale_rows() {
  return {
      {"starts at min", scale_in(st(0, 0, false, {}), 2, 5), st(2, 0, false, {}),
       "starting at 2 nodes (min_nodes)"},
      {"the first window at min sets the baseline and tries one more",
       measured(scale_in(st(2, 0, false, {}), 2, 5), 2, 1000), st(3, 2, false, {{2, 1000}}),
       "samples/s 1000 at 2 nodes: trying 3"},
      {"a node that pays off is kept and the next one tried",
       measured(scale_in(st(2, 1, false, {{1, 1000}}), 1, 5), 2, 1790),
       st(3, 2, false, {{1, 1000}, {2, 1790}}),
       "samples/s 1790 at 2 nodes vs 1000 at 1 (+79%): trying 3"},
      {"a gain of exactly min_gain pays off",
       measured(scale_in(st(2, 1, false, {{1, 1000}}), 1, 5), 2, 1050),
       st(3, 2, false, {{1, 1000}, {2, 1050}}),
       "samples/s 1050 at 2 nodes vs 1000 at 1 (+5.0%): trying 3"},
      {"a node that does not pay off: back to the last good size, settled",
       measured(scale_in(st(3, 2, false, {{2, 1790}}), 1, 5), 3, 1840),
       st(2, 2, true, {{2, 1790}, {3, 1840}}),
       "samples/s 1840 at 3 nodes vs 1790 at 2 (+2.8%, below the 5% scale_min_gain): back to 2 "
       "nodes"},
      {"a slower size goes back too",
       measured(scale_in(st(3, 2, false, {{2, 1790}}), 1, 5), 3, 1500),
       st(2, 2, true, {{2, 1790}, {3, 1500}}),
       "samples/s 1500 at 3 nodes vs 1790 at 2 (-16%, below the 5% scale_min_gain): back to 2 "
       "nodes"},
      {"paying off at max: settled there",
       measured(scale_in(st(3, 2, false, {{2, 1000}}), 1, 3), 3, 2000),
       st(3, 3, true, {{2, 1000}, {3, 2000}}),
       "samples/s 2000 at 3 nodes vs 1000 at 2 (+100%): at max_nodes"},
      {"short of nodes for a window: back to the last good size, settled",
       short_of_nodes(scale_in(st(4, 3, false, {{3, 900}}), 1, 5)), st(3, 3, true, {{3, 900}}),
       "no node came for size 4 within a window: back to 3 nodes until the cluster changes"},
      {"short of nodes at min: stays there", short_of_nodes(scale_in(st(2, 0, false, {}), 2, 5)),
       st(2, 0, true, {}),
       "no node came for size 2 within a window: stays at 2 nodes until the cluster changes"},
      {"settled: measurements change nothing",
       measured(scale_in(st(3, 3, true, {{3, 900}}), 1, 5), 3, 5000), st(3, 3, true, {{3, 900}}),
       ""},
      {"settled: the cluster changed, so the next size is tried afresh",
       cluster_changed(scale_in(st(3, 3, true, {{3, 900}, {4, 910}}), 1, 5)),
       st(4, 3, false, {{3, 900}}), "the cluster changed: trying 4 nodes"},
      {"settled at min without a good size: the cluster changed tries min + 1",
       cluster_changed(scale_in(st(2, 0, true, {}), 2, 5)), st(3, 0, false, {}),
       "the cluster changed: trying 3 nodes"},
      {"settled at max: a cluster change has nothing to try",
       cluster_changed(scale_in(st(3, 3, true, {{3, 900}}), 1, 3)), st(3, 3, true, {{3, 900}}), ""},
      {"never beyond max: a size above it comes back", scale_in(st(5, 4, false, {}), 1, 3),
       st(3, 3, false, {}), "size 5 is outside min_nodes..max_nodes: now 3 nodes"},
      {"never below min", scale_in(st(1, 0, false, {}), 2, 3), st(2, 0, false, {}),
       "size 1 is outside min_nodes..max_nodes: now 2 nodes"},
      {"a window at another size is not this size's measurement",
       measured(scale_in(st(4, 3, false, {{3, 900}}), 1, 5), 3, 950), st(4, 3, false, {{3, 900}}),
       ""},
      {"a full window at the size wins over being short of nodes",
       short_of_nodes(measured(scale_in(st(2, 1, false, {{1, 100}}), 1, 5), 2, 300)),
       st(3, 2, false, {{1, 100}, {2, 300}}),
       "samples/s 300 at 2 nodes vs 100 at 1 (+200%): trying 3"},
      {"no window yet: nothing changes", scale_in(st(3, 2, false, {{2, 5}}), 1, 5),
       st(3, 2, false, {{2, 5}}), ""},
  };
}

class ScaleStep : public ::testing::TestWithParam<ScaleRow> {};

TEST_P(ScaleStep, Decides) {
  const ScaleRow& row = GetParam();
  const ScaleDecision d = scale_step(row.in);
  EXPECT_EQ(d.next, row.next);
  EXPECT_EQ(d.changed, row.next != row.in.state);
  EXPECT_EQ(d.reason, row.reason);
}

INSTANTIATE_TEST_SUITE_P(Steps, ScaleStep, ::testing::ValuesIn(scale_rows()),
                         [](const auto& row) { return "row" + std::to_string(row.index); });

// A job whose throughput stops improving beyond 3 nodes settles at 3, and tries 4 again only
// after the cluster changes.
TEST(ScaleStep, SettlesWhereThroughputStopsImproving) {
  auto rate_at = [](std::uint32_t n) { return n <= 3 ? 1000.0 * n : 3000.0 + 10 * n; };
  ScaleInput in = scale_in(st(0, 0, false, {}), 1, 8);
  for (int step = 0; step < 12; ++step) {
    const ScaleDecision d = scale_step(in);
    in.state = d.next;
    in.measured = std::pair{in.state.size, rate_at(in.state.size)};
  }
  EXPECT_EQ(in.state.size, 3u);
  EXPECT_TRUE(in.state.settled);
  in.measured.reset();
  in.cluster_changed = true;
  EXPECT_EQ(scale_step(in).next.size, 4u);
}

}  // namespace
}  // namespace elastic::rendezvous
