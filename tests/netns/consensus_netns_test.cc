// Raft inside real elasticd daemons, one per network namespace: five daemons, three voters
// (h0 h1 h2; h3 and h4 forward), the short test timers (300 ms election timeout, 50 ms
// heartbeats; 500 ms membership probes). kill -9 of the leader; kill -9 and restart of a
// follower voter that must catch up from its own log plus the leader; a 2|3 partition with the
// leader on the minority side, where nothing may be decided, and its heal; a full restart of all
// five. Jobs are submitted and listed with elasticctl, as an operator would. Deadlines are
// generous polls, never fixed sleeps. Needs root.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <future>
#include <set>

#include "tests/netns/daemon_cluster.h"
#include "tests/netns/daemon_cluster_test.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace elastic::netns {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;

constexpr int kHosts = 5;
// An election takes 300-600 ms plus a round trip; the slack is for a loaded 2-core machine.
constexpr milliseconds kElect = 20s;
// Replication to a follower is one heartbeat away; a restarted voter first rejoins.
constexpr milliseconds kReplicate = 20s;

std::vector<int> all_but(const std::vector<int>& excluded) {
  std::vector<int> hosts;
  for (int host = 0; host < kHosts; ++host) {
    if (std::find(excluded.begin(), excluded.end(), host) == excluded.end()) hosts.push_back(host);
  }
  return hosts;
}

bool has_prefix(const std::vector<std::string>& ids, const std::string& prefix) {
  return std::any_of(ids.begin(), ids.end(),
                     [&](const std::string& id) { return id.rfind(prefix, 0) == 0; });
}

class ConsensusNetnsTest : public DaemonClusterTest {
 protected:
  ConsensusNetnsTest() : DaemonClusterTest({.hosts = kHosts}) {}

  void SetUp() override {
    DaemonClusterTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_EQ(daemons_->voters(), (std::vector<int>{0, 1, 2}));
    start_converged();
    if (HasFatalFailure()) return;
    leader_ = daemons_->wait_leader(all_hosts(), kElect);
    ASSERT_FALSE(leader_.empty()) << "no leader was elected:\n"
                                  << daemons_->describe_raft(all_hosts());
  }

  void failure_context(std::ostream& out) override { out << daemons_->describe_raft(all_hosts()); }

  // Submits through `host`, expecting acceptance; returns the job id ("" on failure).
  std::string submit_ok(int host, const std::string& name) {
    const Submitted submitted = daemons_->submit(host, name);
    EXPECT_EQ(submitted.exit_code, 0) << "submit " << name << " through "
                                      << DaemonCluster::name(host) << ": " << submitted.output;
    EXPECT_FALSE(submitted.id.empty()) << submitted.output;
    return submitted.id;
  }

  // Every voter among `hosts` has applied exactly `jobs` jobs and all have one commit index.
  bool wait_replicated(const std::vector<int>& hosts, std::uint64_t jobs, milliseconds timeout) {
    return testing::wait_until(
        [&] {
          std::set<std::uint64_t> commits;
          for (const int host : hosts) {
            if (!daemons_->is_voter(host)) continue;
            const auto view = daemons_->raft(host);
            if (!view.ok() || view->jobs != jobs) return false;
            commits.insert(view->commit_index);
          }
          return commits.size() == 1;
        },
        timeout);
  }

  // The leader now (it may have moved since SetUp on a loaded machine); -1 if none agreed.
  int current_leader() {
    leader_ = daemons_->wait_leader(all_hosts(), kElect);
    return daemons_->host_of(leader_);
  }

  void kill_nine(int host) {
    daemons_->daemon(host).signal(SIGKILL);
    ASSERT_TRUE(daemons_->daemon(host).wait(10s).has_value());
  }

  std::string leader_;  // elected in SetUp
};

TEST_F(ConsensusNetnsTest, KillNineOfTheLeaderElectsASurvivorAndLosesNoJob) {
  std::vector<std::string> ids;
  ids.push_back(submit_ok(4, "before"));
  ids.push_back(submit_ok(0, "before"));
  ids.push_back(submit_ok(3, "before"));
  ASSERT_TRUE(wait_replicated(all_hosts(), 3, kReplicate)) << daemons_->describe_raft(all_hosts());

  const int old_leader = current_leader();
  ASSERT_GE(old_leader, 0) << daemons_->describe_raft(all_hosts());
  kill_nine(old_leader);
  const auto survivors = all_but({old_leader});
  const std::string next = daemons_->wait_leader(survivors, kElect);
  ASSERT_FALSE(next.empty()) << "no new leader among the survivors:\n"
                             << daemons_->describe_raft(survivors);
  EXPECT_NE(next, leader_);

  // Every acknowledged job is still there, asked through a non-voter (forwarded to the leader).
  const auto listed = daemons_->job_ids(3);
  ASSERT_TRUE(listed.ok()) << listed.error().message;
  for (const auto& id : ids) {
    EXPECT_NE(std::find(listed->begin(), listed->end(), id), listed->end()) << id << " was lost";
  }
  // Submissions work again, through a non-voter and through each surviving voter.
  std::uint64_t expected = ids.size();
  for (const int host : survivors) {
    EXPECT_FALSE(submit_ok(host, "after").empty());
    ++expected;
  }
  EXPECT_TRUE(wait_replicated(survivors, expected, kReplicate))
      << daemons_->describe_raft(survivors);
}

TEST_F(ConsensusNetnsTest, RestartedVoterCatchesUpFromItsLogAndTheLeader) {
  const int leader = current_leader();
  ASSERT_GE(leader, 0) << daemons_->describe_raft(all_hosts());
  const int victim = leader == 1 ? 2 : 1;  // a follower voter
  submit_ok(4, "early");
  submit_ok(victim, "early");
  ASSERT_TRUE(wait_replicated(all_hosts(), 2, kReplicate)) << daemons_->describe_raft(all_hosts());
  const auto before = daemons_->raft(victim);
  ASSERT_TRUE(before.ok()) << before.error().message;
  ASSERT_GE(before->last_index, 2u);

  kill_nine(victim);
  // Two of three voters remain: a majority, so the cluster keeps deciding while it is down.
  for (const int host : {3, 4, leader}) submit_ok(host, "meanwhile");
  const auto others = all_but({victim});
  ASSERT_TRUE(wait_replicated(others, 5, kReplicate)) << daemons_->describe_raft(others);

  const auto restarted = daemons_->start(victim);
  ASSERT_TRUE(restarted.ok()) << restarted.error().message;
  // It reopened its own log (the same state dir) rather than bootstrapping a fresh one.
  const std::string log = daemons_->log(victim);
  EXPECT_EQ(log.find("raft: bootstrapped"), std::string::npos) << log;
  EXPECT_NE(log.find("raft: voter " + DaemonCluster::name(victim)), std::string::npos) << log;
  // Its table and commit index reach the leader's.
  EXPECT_TRUE(wait_replicated(all_hosts(), 5, kReplicate)) << daemons_->describe_raft(all_hosts());
  const auto after = daemons_->raft(victim);
  ASSERT_TRUE(after.ok()) << after.error().message;
  EXPECT_GT(after->commit_index, before->commit_index);
  EXPECT_EQ(after->role, "follower");
}

TEST_F(ConsensusNetnsTest, MinorityWithTheOldLeaderDecidesNothingAndHealMergesOneTable) {
  ASSERT_FALSE(submit_ok(4, "before").empty());
  ASSERT_TRUE(wait_replicated(all_hosts(), 1, kReplicate)) << daemons_->describe_raft(all_hosts());

  // The leader and one non-voter on the small side; the two other voters form the majority.
  const int old_leader = current_leader();
  ASSERT_GE(old_leader, 0) << daemons_->describe_raft(all_hosts());
  const std::vector<int> minority{old_leader, 3};
  const std::vector<int> majority = all_but(minority);
  ASSERT_TRUE(hosts_->partition(minority, majority).ok());

  const std::string next = daemons_->wait_leader(majority, kElect);
  ASSERT_FALSE(next.empty()) << "the majority elected no leader:\n"
                             << daemons_->describe_raft(all_hosts());
  EXPECT_NE(next, leader_);

  // Minority submits run concurrently with the majority's (each refusal takes the daemon's 10 s
  // request timeout): through the non-voter and through the deposed leader itself.
  auto through_non_voter =
      std::async(std::launch::async, [&] { return daemons_->submit(3, "minority"); });
  auto through_old_leader =
      std::async(std::launch::async, [&] { return daemons_->submit(old_leader, "minority"); });
  for (const int host : majority) submit_ok(host, "majority");
  const Submitted refused_a = through_non_voter.get();
  const Submitted refused_b = through_old_leader.get();
  EXPECT_EQ(refused_a.exit_code, 1) << refused_a.output;
  EXPECT_EQ(refused_b.exit_code, 1) << refused_b.output;
  EXPECT_TRUE(wait_replicated(majority, 4, kReplicate)) << daemons_->describe_raft(all_hosts());
  // The old leader applied nothing while cut off.
  const auto cut_off = daemons_->raft(old_leader);
  ASSERT_TRUE(cut_off.ok()) << cut_off.error().message;
  EXPECT_EQ(cut_off->jobs, 1u);

  ASSERT_TRUE(hosts_->heal_all().ok());
  const std::string healed = daemons_->wait_leader(all_hosts(), kElect);
  EXPECT_FALSE(healed.empty()) << daemons_->describe_raft(all_hosts());
  // One table on every voter: the job from before and the majority's, nothing from the minority.
  EXPECT_TRUE(wait_replicated(all_hosts(), 4, kReplicate)) << daemons_->describe_raft(all_hosts());
  for (const int host : {3, 4}) {
    const auto listed = daemons_->job_ids(host);
    ASSERT_TRUE(listed.ok()) << listed.error().message;
    EXPECT_EQ(listed->size(), 4u);
    EXPECT_FALSE(has_prefix(*listed, "minority")) << "a minority submit was applied";
    EXPECT_TRUE(has_prefix(*listed, "before"));
  }
}

TEST_F(ConsensusNetnsTest, SubmittedJobsSurviveAFullRestart) {
  const std::string a = submit_ok(4, "durable");
  const std::string b = submit_ok(1, "durable");
  ASSERT_TRUE(wait_replicated(all_hosts(), 2, kReplicate)) << daemons_->describe_raft(all_hosts());

  for (int host = 0; host < kHosts; ++host) daemons_->daemon(host).signal(SIGTERM);
  for (int host = 0; host < kHosts; ++host) {
    const auto status = daemons_->daemon(host).wait(20s);
    ASSERT_TRUE(status.has_value()) << DaemonCluster::name(host) << " ignored SIGTERM";
    EXPECT_TRUE(status->exited_with(0))
        << DaemonCluster::name(host) << " exit " << status->code << " signal " << status->signal;
  }
  const auto started = daemons_->start_all();
  ASSERT_TRUE(started.ok()) << started.error().message;
  for (const int voter : daemons_->voters()) {
    EXPECT_EQ(daemons_->log(voter).find("raft: bootstrapped"), std::string::npos)
        << DaemonCluster::name(voter) << " lost its log";
  }
  ASSERT_FALSE(daemons_->wait_leader(all_hosts(), kElect).empty())
      << daemons_->describe_raft(all_hosts());
  EXPECT_TRUE(wait_replicated(all_hosts(), 2, kReplicate)) << daemons_->describe_raft(all_hosts());
  const auto listed = daemons_->job_ids(3);
  ASSERT_TRUE(listed.ok()) << listed.error().message;
  EXPECT_NE(std::find(listed->begin(), listed->end(), a), listed->end()) << a;
  EXPECT_NE(std::find(listed->begin(), listed->end(), b), listed->end()) << b;
  // And the restarted cluster decides again.
  EXPECT_FALSE(submit_ok(3, "after").empty());
}

}  // namespace
}  // namespace elastic::netns
