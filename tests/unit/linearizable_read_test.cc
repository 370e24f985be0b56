// Linearizable reads through the daemon's layers: ConsensusHost::read (Raft's read index) and
// the JobService read verbs on top of it. Three (or one) voters run in memory: ConsensusHost
// over a store that keeps nothing (no voter restarts here), envelopes routed by the test, manual
// time. A leader cut off from the others that does not know it is deposed must never answer a
// read; once it learns, the read is redirected, and the new leader answers with the newer write.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/core/clock.h"
#include "daemon/node/consensus_host.h"
#include "daemon/node/job_service.h"

namespace elastic::node {
namespace {

using namespace std::chrono_literals;

// Durable enough for voters that never restart; `broken` makes every write fail (EIO).
class MemoryStore final : public consensus::RaftStore {
 public:
  explicit MemoryStore(const bool* broken) : broken_(broken) {}
  Status persist(const consensus::Persist&) override {
    if (*broken_) return Error{"The Raft log cannot be written (test: broken disk)."};
    return ok_status();
  }

 private:
  const bool* broken_;
};

struct Reply {
  ForwardOutcome outcome = ForwardOutcome::kError;
  std::string body;
};

class Voters {
 public:
  explicit Voters(std::vector<std::string> names)
      : names_(std::move(names)), clock_(TimePoint{} + 1h, 1'700'000'000'000, 5) {
    std::uint64_t seed = 11;
    for (const std::string& name : names_) {
      Voter& v = voters_[name];
      v.jobs = std::make_unique<JobService>(clock_);
      OpenFailure failure;
      v.host = ConsensusHost::start(
          name, names_, consensus::RaftConfig{}, 10000, consensus::Recovered{},
          std::make_unique<MemoryStore>(&v.broken), *v.jobs, seed++, clock_.now(), failure);
      EXPECT_NE(v.host, nullptr) << failure.message;
    }
  }

  ConsensusHost& host(const std::string& name) { return *voters_.at(name).host; }
  JobService& jobs(const std::string& name) { return *voters_.at(name).jobs; }
  void break_disk(const std::string& name) { voters_.at(name).broken = true; }
  TimePoint now() const { return clock_.now(); }

  // Advances time by `d` in 1 ms steps: ticks the voters that are not `frozen` (their timers do
  // not run: a node that does not notice anything) and delivers every message between voters
  // that are not `cut` off; messages to or from a cut-off voter are lost.
  void run(Duration d, const std::set<std::string>& cut = {},
           const std::set<std::string>& frozen = {}) {
    const TimePoint end = clock_.now() + d;
    while (clock_.now() < end) {
      clock_.advance(1ms);
      for (auto& [name, v] : voters_) {
        if (!frozen.contains(name) && v.host->next_deadline() <= clock_.now()) {
          v.host->tick(clock_.now());
        }
      }
      deliver(cut);
    }
  }
  // Delivers messages (and what they cause) among the voters not `cut` off, without time.
  void deliver(const std::set<std::string>& cut = {}) {
    bool sent = true;
    while (sent) {
      sent = false;
      for (auto& [name, v] : voters_) {
        for (ConsensusHost::Outgoing& out : v.host->take_sends()) {
          sent = true;
          if (cut.contains(name) || cut.contains(out.to) || !voters_.contains(out.to)) continue;
          out.envelope.sender = name;
          voters_.at(out.to).host->on_envelope(clock_.now(), out.envelope);
        }
      }
    }
  }
  std::optional<std::string> leader() {
    for (auto& [name, v] : voters_) {
      if (v.host->is_leader()) return name;
    }
    return std::nullopt;
  }

  // Serves one client request at `name`; the reply lands in the returned slot once answered.
  std::shared_ptr<std::optional<Reply>> serve(const std::string& name, const std::string& verb,
                                              const std::string& args = "{}") {
    auto reply = std::make_shared<std::optional<Reply>>();
    ClientRequest request{.verb = verb,
                          .args = args,
                          .uid = 0,
                          .gid = 0,
                          .admin = true,
                          .client_id = "test/1/" + std::to_string(++calls_),
                          .client_seq = 1};
    jobs(name).serve(now(), request, host(name), [reply](ForwardOutcome outcome, std::string body) {
      EXPECT_FALSE(reply->has_value()) << "answered twice";
      *reply = Reply{outcome, std::move(body)};
    });
    return reply;
  }

 private:
  struct Voter {
    bool broken = false;
    std::unique_ptr<JobService> jobs;
    std::unique_ptr<ConsensusHost> host;
  };
  std::vector<std::string> names_;
  ManualClock clock_;
  std::map<std::string, Voter> voters_;
  std::uint64_t calls_ = 0;
};

// A settled three-voter cluster and its leader.
std::string settle(Voters& v) {
  v.run(2s);
  const auto leader = v.leader();
  EXPECT_TRUE(leader.has_value());
  return leader.value_or("");
}

std::vector<std::string> others(const std::string& leader) {
  std::vector<std::string> rest;
  for (const char* name : {"a", "b", "c"}) {
    if (name != leader) rest.push_back(name);
  }
  return rest;
}

TEST(LinearizableRead, ReadVerbsWaitForAMajorityAndSeeEarlierWrites) {
  Voters v({"a", "b", "c"});
  const std::string leader = settle(v);
  ASSERT_FALSE(leader.empty());
  auto drained = v.serve(leader, "drain", R"({"node":"n7","reason":"disk"})");
  v.deliver();
  ASSERT_TRUE(drained->has_value());
  ASSERT_EQ((*drained)->outcome, ForwardOutcome::kOk) << (*drained)->body;

  for (const std::string verb : {"drained", "jobs", "events", "voters"}) {
    SCOPED_TRACE(verb);
    auto read = v.serve(leader, verb);
    EXPECT_FALSE(read->has_value()) << "answered before a majority confirmed the leader";
    v.deliver();
    ASSERT_TRUE(read->has_value());
    EXPECT_EQ((*read)->outcome, ForwardOutcome::kOk) << (*read)->body;
    if (verb == "drained") {
      EXPECT_NE((*read)->body.find("n7"), std::string::npos) << (*read)->body;
    }
  }
  // Argument errors need no read: answered at once.
  auto bad = v.serve(leader, "job", R"({"job":7})");
  ASSERT_TRUE(bad->has_value());
  EXPECT_EQ((*bad)->outcome, ForwardOutcome::kError);
}

// The jobs and job replies carry each job's priority and preemptible flag, and what the queue
// hook (the leader's scheduler) says: "position" only when > 0, "waiting" only when not empty;
// without a hook neither.
TEST(JobReplies, CarryPriorityAndWhatTheQueueHookSays) {
  Voters v({"a"});
  const std::string leader = settle(v);
  ASSERT_FALSE(leader.empty());
  for (const char* name : {"first", "second"}) {
    auto submitted = v.serve(leader, "submit",
                             std::string(R"({"spec":{"name":")") + name +
                                 R"(","command":["/bin/true"],"min_nodes":2,"max_nodes":2,)" +
                                 R"("priority":-4,"preemptible":true}})");
    v.deliver();
    ASSERT_TRUE(submitted->has_value());
    ASSERT_EQ((*submitted)->outcome, ForwardOutcome::kOk) << (*submitted)->body;
  }
  const auto read = [&](const std::string& verb, const std::string& args) {
    auto reply = v.serve(leader, verb, args);
    v.deliver();
    EXPECT_TRUE(reply->has_value());
    EXPECT_EQ((*reply)->outcome, ForwardOutcome::kOk) << (*reply)->body;
    return nlohmann::json::parse(reply->has_value() ? (*reply)->body : "{}", nullptr, false);
  };

  nlohmann::json jobs = read("jobs", "{}")["jobs"];
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0]["priority"], -4);
  EXPECT_EQ(jobs[0]["preemptible"], true);
  EXPECT_FALSE(jobs[0].contains("position"));
  EXPECT_FALSE(jobs[0].contains("waiting"));

  v.jobs(leader).set_queue_info([](std::string_view id) -> std::optional<QueueInfo> {
    if (id == "first-1") {
      return QueueInfo{2, "waiting for 2 nodes, 1 free fits (position 2 of 2)", std::nullopt};
    }
    if (id == "second-2") return QueueInfo{0, "", std::nullopt};
    return std::nullopt;
  });
  jobs = read("jobs", "{}")["jobs"];
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0]["position"], 2);
  EXPECT_EQ(jobs[0]["waiting"], "waiting for 2 nodes, 1 free fits (position 2 of 2)");
  EXPECT_FALSE(jobs[1].contains("position"));
  EXPECT_FALSE(jobs[1].contains("waiting"));
  const nlohmann::json job = read("job", R"({"job":"first-1"})")["job"];
  EXPECT_EQ(job["position"], 2);
  EXPECT_EQ(job["priority"], -4);

  v.jobs(leader).set_queue_info(nullptr);
  EXPECT_FALSE(read("job", R"({"job":"first-1"})")["job"].contains("position"));
}

TEST(LinearizableRead, DeposedLeaderThatDoesNotKnowItNeverAnswers) {
  Voters v({"a", "b", "c"});
  const std::string old_leader = settle(v);
  ASSERT_FALSE(old_leader.empty());
  // Cut off and frozen (its CheckQuorum never runs), it still believes it leads while the
  // others elect a new leader and commit a write it never sees.
  v.run(2s, {old_leader}, {old_leader});
  ASSERT_TRUE(v.host(old_leader).is_leader());
  std::string new_leader;
  for (const std::string& name : others(old_leader)) {
    if (v.host(name).is_leader()) new_leader = name;
  }
  ASSERT_FALSE(new_leader.empty());
  auto write = v.serve(new_leader, "drain", R"({"node":"n9"})");
  v.deliver({old_leader});
  ASSERT_TRUE(write->has_value());
  ASSERT_EQ((*write)->outcome, ForwardOutcome::kOk) << (*write)->body;

  auto stale = v.serve(old_leader, "drained");
  v.run(1s, {old_leader}, {old_leader});
  EXPECT_FALSE(stale->has_value()) << "a deposed leader answered: " << (*stale)->body;
  // Healed (and its timers running again), it learns of the newer term and steps down: the read
  // is redirected.
  v.run(1s);
  ASSERT_TRUE(stale->has_value());
  EXPECT_EQ((*stale)->outcome, ForwardOutcome::kRedirect);
  EXPECT_EQ((*stale)->body, "Leadership was lost before the read was confirmed; retry.");
  EXPECT_FALSE(v.host(old_leader).is_leader());

  auto fresh = v.serve(new_leader, "drained");
  v.deliver();
  ASSERT_TRUE(fresh->has_value());
  EXPECT_EQ((*fresh)->outcome, ForwardOutcome::kOk);
  EXPECT_NE((*fresh)->body.find("n9"), std::string::npos) << (*fresh)->body;
}

TEST(LinearizableRead, HostRefusalsTable) {
  struct Case {
    const char* name;
    std::size_t voters;
    bool at_follower;
    bool break_disk;                   // the leader's disk fails while the read waits
    bool answered_at_once;             // done() ran before read() returned
    std::optional<std::string> error;  // nullopt: ok
  };
  const std::vector<Case> cases = {
      {"a single voter answers at once", 1, false, false, true, std::nullopt},
      {"a follower refuses and names the leader", 3, true, false, true,
       "Not the leader; the leader is LEADER."},
      {"a leader whose disk fails fails the waiting read", 3, false, true, false,
       "This voter cannot write its Raft log."},
  };
  for (const auto& k : cases) {
    SCOPED_TRACE(k.name);
    Voters v(k.voters == 1 ? std::vector<std::string>{"a"}
                           : std::vector<std::string>{"a", "b", "c"});
    const std::string leader = settle(v);
    ASSERT_FALSE(leader.empty());
    const std::string at = k.at_follower ? others(leader).front() : leader;
    std::optional<Status> result;
    v.host(at).read(v.now(), [&result](Status s) {
      EXPECT_FALSE(result.has_value()) << "answered twice";
      result = std::move(s);
    });
    EXPECT_EQ(result.has_value(), k.answered_at_once);
    if (k.break_disk) {
      v.break_disk(leader);
      // The next write (a proposal) fails to persist: the voter stops and fails what waits.
      v.host(leader).propose(v.now(), "x", [](Result<std::string>) {});
      EXPECT_TRUE(v.host(leader).failed());
    }
    ASSERT_TRUE(result.has_value());
    if (!k.error) {
      EXPECT_TRUE(result->ok());
    } else {
      ASSERT_FALSE(result->ok());
      std::string expected = *k.error;
      if (const auto at_marker = expected.find("LEADER"); at_marker != std::string::npos) {
        expected.replace(at_marker, 6, leader);
      }
      EXPECT_EQ(result->error().message, expected);
    }
  }
}

}  // namespace
}  // namespace elastic::node
