// Integration tier: Raft and the job table in real elasticd processes on 127.0.0.1.
// Three voters (n1, n2, n3) elect a leader over the ZeroMQ transport; a fourth daemon (n4) is
// not a voter and forwards client requests. Jobs are submitted, listed and cancelled through
// elasticctl on any daemon; the leader is killed with SIGKILL; every daemon is restarted; a
// voter that lost its Raft directory or was given another voter list refuses to start; one
// whose log is damaged refuses (74) and is rebuilt from its peers; a voter whose first start
// failed starts on a retry. Nothing sleeps a fixed time: every expectation polls with a deadline.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tests/integ/daemon_under_test.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace elastic::testing {
namespace {

using ::testing::HasSubstr;

constexpr auto kElect = std::chrono::seconds(20);
const std::vector<std::string> kVoters = {"n1", "n2", "n3"};

std::vector<std::string> ctl_args(const Daemon& daemon, std::vector<std::string> args) {
  std::vector<std::string> argv = {"-c", "", "--set", "control.socket=" + daemon.socket()};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

// `elasticctl status --json` of one daemon; null when it does not answer.
nlohmann::json raft_of(const Daemon& daemon) {
  const RunResult r = elasticctl(ctl_args(daemon, {"status", "--json"}));
  if (!r.status.exited_with(0)) return nullptr;
  const auto reply = nlohmann::json::parse(r.out, nullptr, false);
  if (reply.is_discarded() || !reply.contains("consensus")) return nullptr;
  return reply["consensus"];
}

// The leader every voter of `daemons` names, when they all name the same live one.
std::string agreed_leader(const std::vector<Daemon*>& daemons) {
  std::set<std::string> named;
  for (const Daemon* d : daemons) {
    if (std::find(kVoters.begin(), kVoters.end(), d->name()) == kVoters.end()) continue;
    const nlohmann::json raft = raft_of(*d);
    if (raft.is_null() || raft["leader"].get<std::string>().empty()) return "";
    named.insert(raft["leader"].get<std::string>());
  }
  if (named.size() != 1) return "";
  for (const Daemon* d : daemons) {
    if (d->name() == *named.begin()) return *named.begin();
  }
  return "";  // a leader outside this set (a killed one some still believe in)
}

std::vector<std::string> job_ids(const Daemon& daemon) {
  const RunResult r = elasticctl(ctl_args(daemon, {"jobs", "--json"}));
  std::vector<std::string> ids;
  if (!r.status.exited_with(0)) return ids;
  const auto reply = nlohmann::json::parse(r.out, nullptr, false);
  if (reply.is_discarded()) return ids;
  for (const auto& job : reply.value("jobs", nlohmann::json::array())) {
    ids.push_back(job["id"].get<std::string>());
  }
  return ids;
}

// The workers sleep, so a job's rounds stay up until the test ends them (every daemon the
// test stops takes its workers with it).
std::string submit(const Daemon& daemon, const std::string& name, const std::string& nodes) {
  const RunResult r = elasticctl(
      ctl_args(daemon, {"submit", "--name", name, "--nodes", nodes, "--", "/bin/sleep", "600"}));
  EXPECT_TRUE(r.status.exited_with(0)) << r.out << r.err;
  const std::string prefix = "submitted ";
  if (r.out.rfind(prefix, 0) != 0) return "";
  return r.out.substr(prefix.size(), r.out.find('\n') - prefix.size());
}

struct Cluster {
  TempDir dir;
  Daemon n1{dir, "n1", {}};
  std::unique_ptr<Daemon> n2, n3, n4;

  Cluster() {
    n1.set_voters(kVoters);
    n1.start();
    n2 = std::make_unique<Daemon>(dir, "n2", std::vector<std::string>{n1.seed()});
    n3 = std::make_unique<Daemon>(dir, "n3", std::vector<std::string>{n1.seed()});
    n4 = std::make_unique<Daemon>(dir, "n4", std::vector<std::string>{n1.seed()});
    for (Daemon* d : {n2.get(), n3.get(), n4.get()}) {
      d->set_voters(kVoters);
      d->start();
    }
  }
  std::vector<Daemon*> all() { return {&n1, n2.get(), n3.get(), n4.get()}; }
  Daemon* by_name(const std::string& name) {
    for (Daemon* d : all()) {
      if (d->name() == name) return d;
    }
    return nullptr;
  }
  // SIGKILLs `victim`; returns the daemons left.
  std::vector<Daemon*> kill(Daemon* victim) {
    victim->process().signal(SIGKILL);
    victim->process().wait(std::chrono::seconds(10));
    std::vector<Daemon*> rest;
    for (Daemon* d : all()) {
      if (d != victim) rest.push_back(d);
    }
    return rest;
  }
  std::string wait_leader(const std::vector<Daemon*>& daemons) {
    std::string leader;
    EXPECT_TRUE(wait_until([&] { return !(leader = agreed_leader(daemons)).empty(); }, kElect))
        << describe(daemons);
    return leader;
  }
};

TEST(ConsensusInteg, VotersElectOneLeaderAndAnyDaemonServesJobs) {
  Cluster c;
  const std::string leader = c.wait_leader(c.all());
  ASSERT_FALSE(leader.empty());
  EXPECT_THAT(kVoters, ::testing::Contains(leader));
  EXPECT_FALSE(raft_of(*c.n4)["voter"].get<bool>());
  // The non-voter learns the leader from the hint every message carries (gossip).
  EXPECT_TRUE(wait_until([&] { return raft_of(*c.n4)["leader"] == leader; }, kElect))
      << raft_of(*c.n4).dump();

  // Through the non-voter (forwarded to the leader) and through a voter.
  const std::string a = submit(*c.n4, "alpha", "1:2");
  const std::string b = submit(*c.n2, "beta", "2");
  EXPECT_EQ(a, "alpha-1");
  EXPECT_EQ(b, "beta-2");
  for (Daemon* d : c.all()) {
    EXPECT_THAT(job_ids(*d), ::testing::ElementsAre("alpha-1", "beta-2")) << d->name();
  }
  // Every voter applies the committed entries.
  for (Daemon* d : {&c.n1, c.n2.get(), c.n3.get()}) {
    EXPECT_TRUE(wait_until([&] { return raft_of(*d)["jobs"] == 2; }, kElect)) << d->name();
  }

  // A bad spec is refused with one sentence naming the field; nothing is created.
  const RunResult bad = elasticctl(
      ctl_args(*c.n4, {"submit", "--name", "gamma", "--nodes", "3:2", "--", "/bin/true"}));
  // elasticctl checks the spec itself (exit 65) before anything is sent.
  EXPECT_TRUE(bad.status.exited_with(65));
  EXPECT_EQ(bad.err,
            "--nodes: min 3 is greater than max 2\nelasticctl: the job spec is invalid; nothing "
            "was submitted\n");
  const RunResult owned = elasticctl(
      ctl_args(*c.n3, {"submit", "--name", "delta", "--env", "RANK=3", "--", "/bin/true"}));
  EXPECT_TRUE(owned.status.exited_with(65));
  EXPECT_THAT(owned.err, HasSubstr("--env: RANK"));
  EXPECT_EQ(job_ids(c.n1).size(), 2u);

  // Status and cancel of a job, from any daemon.
  const RunResult status = elasticctl(ctl_args(*c.n3, {"status", "alpha-1", "--json"}));
  ASSERT_TRUE(status.status.exited_with(0)) << status.err;
  const auto job = nlohmann::json::parse(status.out, nullptr, false);
  EXPECT_EQ(job["id"], "alpha-1");
  EXPECT_EQ(job["spec"]["user"], "root");
  const RunResult cancel = elasticctl(ctl_args(*c.n4, {"cancel", "alpha-1"}));
  EXPECT_TRUE(cancel.status.exited_with(0)) << cancel.err;
  const RunResult again = elasticctl(ctl_args(*c.n2, {"cancel", "alpha-1"}));
  EXPECT_TRUE(again.status.exited_with(1));
  EXPECT_THAT(again.err, HasSubstr("alpha-1"));
  const RunResult unknown = elasticctl(ctl_args(*c.n2, {"status", "nosuch-9"}));
  EXPECT_TRUE(unknown.status.exited_with(1));
  EXPECT_EQ(unknown.err, "elasticctl: No job \"nosuch-9\" is known.\n");
}

TEST(ConsensusInteg, KillingTheLeaderElectsAnotherAndLosesNoJob) {
  Cluster c;
  const std::string first = c.wait_leader(c.all());
  ASSERT_FALSE(first.empty());
  const std::string id = submit(*c.n4, "survivor", "1");
  ASSERT_FALSE(id.empty());

  Daemon* old_leader = c.by_name(first);
  const std::vector<Daemon*> rest = c.kill(old_leader);
  const std::string second = c.wait_leader(rest);
  ASSERT_FALSE(second.empty());
  EXPECT_NE(second, first);
  for (Daemon* d : rest) EXPECT_THAT(job_ids(*d), ::testing::Contains(id)) << d->name();
  // The two remaining voters still commit.
  const std::string next = submit(*c.n4, "after", "1");
  EXPECT_FALSE(next.empty());

  // The old leader comes back (same Raft directory), follows and catches up from the log.
  old_leader->start();
  EXPECT_TRUE(wait_until(
      [&] {
        const nlohmann::json raft = raft_of(*old_leader);
        return !raft.is_null() && raft["role"] == "follower" && raft["jobs"] == 2;
      },
      kElect))
      << raft_of(*old_leader).dump();
}

TEST(ConsensusInteg, JobsSurviveARestartOfEveryDaemon) {
  Cluster c;
  ASSERT_FALSE(c.wait_leader(c.all()).empty());
  const std::string a = submit(c.n1, "one", "1");
  const std::string b = submit(*c.n4, "two", "1:3");
  for (Daemon* d : c.all()) {
    d->process().signal(SIGTERM);
    const auto stopped = d->process().wait(std::chrono::seconds(10));
    EXPECT_TRUE(stopped && stopped->exited_with(0)) << d->name();
  }
  for (Daemon* d : c.all()) d->start();
  ASSERT_FALSE(c.wait_leader(c.all()).empty());
  for (Daemon* d : c.all()) {
    EXPECT_THAT(job_ids(*d), ::testing::ElementsAre(a, b)) << d->name();
  }
  // Submissions go on numbering after the recovered ones.
  EXPECT_EQ(submit(*c.n2, "three", "1"), "three-3");
}

TEST(ConsensusInteg, VoterWithoutItsRaftStateOrWithOtherVotersRefusesToStart) {
  Cluster c;
  ASSERT_FALSE(c.wait_leader(c.all()).empty());
  Daemon& n3 = *c.n3;
  n3.process().signal(SIGTERM);
  n3.process().wait(std::chrono::seconds(10));

  // Another voter list than the one its Raft state was bootstrapped with.
  n3.set_voters({"n1", "n2", "n5"});
  Process other(n3.args(), {}, c.dir.file("n3"), "n3-other-voters");
  const auto refused = other.wait(std::chrono::seconds(10));
  EXPECT_TRUE(refused && refused->exited_with(78));
  EXPECT_THAT(other.err(),
              HasSubstr("consensus.voters: [n1, n2, n5] is not the voter set the Raft state in"));

  // Its Raft directory is gone, but it ran before: it must not vote again from nothing.
  n3.set_voters(kVoters);
  std::filesystem::remove_all(c.dir.file("n3") + "/state/raft");
  Process wiped(n3.args(), {}, c.dir.file("n3"), "n3-wiped");
  const auto refused_again = wiped.wait(std::chrono::seconds(10));
  EXPECT_TRUE(refused_again && refused_again->exited_with(78));
  EXPECT_THAT(wiped.err(), HasSubstr("holds no Raft state, but this node has run before"));
}

// A voter whose log is damaged before the end (the length of record 3 runs
// past the end of the file) refuses to start with exit 74 and a sentence naming the file, the
// offset and the record -- it used to cut everything after it as a "torn tail". Rebuilt from
// its peers (an empty `rebuild` file in its Raft directory), it catches up, keeps the damaged
// files aside, and takes part in the next election.
TEST(ConsensusInteg, ADamagedLogStopsAVoterThatIsThenRebuiltFromItsPeers) {
  Cluster c;
  const std::string leader = c.wait_leader(c.all());
  ASSERT_FALSE(leader.empty());
  std::vector<std::string> jobs;
  for (int i = 0; i < 5; ++i) jobs.push_back(submit(*c.n4, "job" + std::to_string(i), "1"));
  Daemon* victim = leader == "n3" ? c.n2.get() : c.n3.get();
  ASSERT_TRUE(wait_until([&] { return raft_of(*victim)["jobs"] == jobs.size(); }, kElect));
  victim->process().signal(SIGTERM);
  ASSERT_TRUE(victim->process().wait(std::chrono::seconds(10)));

  const std::string raft = c.dir.file(victim->name()) + "/state/raft";
  const std::string log_path = raft + "/raft-log";
  std::string bytes;
  {
    std::ifstream in(log_path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto u32_at = [&](std::size_t at) {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i)
      v |= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
    return v;
  };
  std::size_t record3 = 0;
  for (int k = 0; k < 2; ++k) record3 += 8 + u32_at(record3);
  ASSERT_LT(record3 + 8, bytes.size());
  for (int i = 0; i < 4; ++i) bytes[record3 + i] = i == 3 ? '\0' : '\xff';
  std::ofstream(log_path, std::ios::binary | std::ios::trunc) << bytes;

  Process damaged(victim->args(), {}, c.dir.file(victim->name()), victim->name() + "-damaged");
  const auto refused = damaged.wait(std::chrono::seconds(10));
  ASSERT_TRUE(refused.has_value()) << damaged.err();
  EXPECT_TRUE(refused->exited_with(74)) << damaged.err();
  EXPECT_THAT(damaged.err(), HasSubstr("Raft log " + log_path + " is corrupt at byte offset " +
                                       std::to_string(record3) + " (record 3): its length " +
                                       "16777215 runs past the end of the file"));
  EXPECT_THAT(damaged.err(), HasSubstr("make " + raft + "/rebuild an empty file"));
  EXPECT_EQ(std::filesystem::file_size(log_path), bytes.size()) << "nothing was cut";

  std::ofstream(raft + "/rebuild").flush();
  victim->start();
  EXPECT_TRUE(wait_until([&] { return raft_of(*victim)["jobs"] == jobs.size(); }, kElect))
      << raft_of(*victim).dump() << victim->process().err();
  EXPECT_THAT(victim->process().err(), HasSubstr("rebuilding this voter from its peers: moved"));
  bool kept = false;
  for (const auto& entry : std::filesystem::directory_iterator(raft)) {
    kept |= entry.path().filename().string().rfind("before-rebuild-", 0) == 0 &&
            std::filesystem::file_size(entry.path() / "raft-log") == bytes.size();
  }
  EXPECT_TRUE(kept) << "the damaged files stay aside for inspection";

  // The leader dies: the rebuilt voter and the third one elect a leader of a later term, which
  // needs the rebuilt voter's vote, and every job is still there.
  Daemon* old_leader = c.by_name(leader);
  const std::vector<Daemon*> rest = c.kill(old_leader);
  ASSERT_FALSE(c.wait_leader(rest).empty());
  EXPECT_TRUE(wait_until([&] { return !std::filesystem::exists(raft + "/rebuild"); }, kElect))
      << victim->process().err();
  EXPECT_THAT(job_ids(*victim), ::testing::ElementsAreArray(jobs));
  EXPECT_EQ(submit(*victim, "after", "1"), "after-" + std::to_string(jobs.size() + 1));
}

// A new voter whose first start fails (its transport port is taken) starts
// once the port is free -- the failed start used to spend generation 1, and the retry exited 78
// ("holds no Raft state, but this node has run before").
TEST(ConsensusInteg, ANewVoterWhoseFirstStartFailedStartsOnRetry) {
  TempDir dir;
  const int holder = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(holder, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(holder, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::listen(holder, 1), 0);
  socklen_t length = sizeof address;
  ASSERT_EQ(::getsockname(holder, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const std::string port = std::to_string(ntohs(address.sin_port));

  Daemon n1{dir, "n1", {}};
  n1.set("transport.bind=tcp://127.0.0.1:" + port);
  Process taken(n1.args(), {}, dir.file("n1"), "n1-port-taken");
  const auto failed = taken.wait(std::chrono::seconds(10));
  ::close(holder);
  ASSERT_TRUE(failed.has_value()) << taken.err();
  EXPECT_TRUE(failed->exited_with(69)) << taken.err();
  EXPECT_THAT(taken.err(), HasSubstr(port));

  n1.start();
  EXPECT_EQ(n1.generation(), 1u) << "the failed start did not count";
  EXPECT_TRUE(wait_until([&] { return raft_of(n1)["leader"] == "n1"; }, kElect))
      << n1.process().err();
  EXPECT_EQ(submit(n1, "first", "1"), "first-1");
}

// Ownership: a user sees the job's owner and cannot cancel another user's job; root can.
TEST(ConsensusInteg, OnlyTheOwnerOrAnAdminCancelsAJob) {
  Cluster c;
  ASSERT_FALSE(c.wait_leader(c.all()).empty());
  // Other users must reach the control socket: open the test's own directories to them.
  if (const std::string closed = c.dir.share_with_others(c.n4->socket()); !closed.empty()) {
    GTEST_SKIP() << closed << " does not let other users through (set TMPDIR to one that does)";
  }
  auto as_user = [&](int uid, std::vector<std::string> args) {
    std::vector<std::string> argv = {"/usr/bin/setpriv", "--reuid=" + std::to_string(uid),
                                     "--regid=" + std::to_string(uid), "--clear-groups",
                                     ELASTICCTL_PATH};
    for (const auto& a : ctl_args(*c.n4, std::move(args))) argv.push_back(a);
    return run(argv, {}, std::chrono::seconds(20));
  };
  // Sleeping workers keep the jobs active until they are cancelled.
  const RunResult submitted =
      as_user(65534, {"submit", "--name", "mine", "--workdir", "/", "--", "/bin/sleep", "600"});
  ASSERT_TRUE(submitted.status.exited_with(0)) << submitted.err;
  const RunResult foreign = as_user(65533, {"cancel", "mine-1"});
  EXPECT_TRUE(foreign.status.exited_with(77));
  EXPECT_THAT(foreign.err, HasSubstr("mine-1"));
  const RunResult owner = as_user(65534, {"cancel", "mine-1"});
  EXPECT_TRUE(owner.status.exited_with(0)) << owner.err;
  const RunResult root_job =
      elasticctl(ctl_args(*c.n4, {"submit", "--name", "rootjob", "--", "/bin/sleep", "600"}));
  ASSERT_TRUE(root_job.status.exited_with(0));
  EXPECT_TRUE(as_user(65534, {"cancel", "rootjob-2"}).status.exited_with(77));
  const RunResult voters = as_user(65534, {"voters", "remove", "n1"});
  EXPECT_TRUE(voters.status.exited_with(77));
  EXPECT_THAT(voters.err, HasSubstr("needs root or a member of control.admin_group"));
  EXPECT_TRUE(elasticctl(ctl_args(c.n1, {"cancel", "rootjob-2"})).status.exited_with(0));
}

// Snapshots: with a snapshot every 4 entries, a voter that was down while jobs were submitted
// catches up from the leader's snapshot (its log no longer holds those entries), and every
// daemon restarts from its own snapshot + log.
TEST(ConsensusInteg, SnapshotsCatchUpALaggingVoterAndSurviveRestarts) {
  Cluster cluster;
  // Restart everyone with frequent snapshots (the setting is local to each daemon).
  for (Daemon* d : cluster.all()) {
    d->process().signal(SIGTERM);
    d->process().wait(std::chrono::seconds(10));
    d->set("consensus.snapshot_every_entries=4");
  }
  for (Daemon* d : cluster.all()) d->start();
  const std::string leader = cluster.wait_leader(cluster.all());
  ASSERT_FALSE(leader.empty());
  Daemon* lagging = nullptr;
  for (Daemon* d : {&cluster.n1, cluster.n2.get(), cluster.n3.get()}) {
    if (d->name() != leader) lagging = d;
  }
  const std::vector<Daemon*> rest = cluster.kill(lagging);
  ASSERT_FALSE(cluster.wait_leader(rest).empty());
  for (int i = 0; i < 10; ++i) {
    EXPECT_FALSE(submit(*cluster.n4, "snap" + std::to_string(i), "1").empty());
  }
  lagging->start();
  EXPECT_TRUE(wait_until([&] { return raft_of(*lagging)["jobs"] == 10; }, kElect))
      << raft_of(*lagging).dump();
  EXPECT_NE(lagging->process().err().find("restored from the leader's snapshot"), std::string::npos)
      << "the lagging voter did not catch up by snapshot";
  for (Daemon* d : cluster.all()) {
    d->process().signal(SIGTERM);
    d->process().wait(std::chrono::seconds(10));
  }
  for (Daemon* d : cluster.all()) d->start();
  ASSERT_FALSE(cluster.wait_leader(cluster.all()).empty());
  for (Daemon* d : cluster.all()) EXPECT_EQ(job_ids(*d).size(), 10u) << d->name();
  EXPECT_EQ(submit(*cluster.n2, "after", "1"), "after-11");
}

std::vector<std::string> voters_of(const Daemon& daemon) {
  const RunResult r = elasticctl(ctl_args(daemon, {"voters", "--json"}));
  std::vector<std::string> voters;
  const auto reply = nlohmann::json::parse(r.out, nullptr, false);
  if (!r.status.exited_with(0) || reply.is_discarded()) return voters;
  for (const auto& v : reply.value("voters", nlohmann::json::array())) {
    voters.push_back(v.get<std::string>());
  }
  return voters;
}

// Replacing a voter one change at a time: n4 is added (it catches up and votes), n3 removed;
// then n3 and n1 die and {n2, n4} still form a majority of {n1, n2, n4}.
TEST(ConsensusInteg, VotersAreReplacedOneAtATime) {
  Cluster c;
  ASSERT_FALSE(c.wait_leader(c.all()).empty());
  const std::string first = submit(*c.n4, "before", "1");
  EXPECT_THAT(voters_of(*c.n4), ::testing::UnorderedElementsAre("n1", "n2", "n3"));

  const RunResult add = elasticctl(ctl_args(*c.n4, {"voters", "add", "n4"}));
  ASSERT_TRUE(add.status.exited_with(0)) << add.err;
  EXPECT_THAT(voters_of(*c.n2), ::testing::UnorderedElementsAre("n1", "n2", "n3", "n4"));
  EXPECT_TRUE(wait_until(
      [&] {
        const nlohmann::json raft = raft_of(*c.n4);
        return !raft.is_null() && raft["voter"] == true && raft["jobs"] == 1;
      },
      kElect))
      << raft_of(*c.n4).dump();
  const RunResult again = elasticctl(ctl_args(*c.n2, {"voters", "add", "n4"}));
  EXPECT_TRUE(again.status.exited_with(1));
  EXPECT_EQ(again.err, "elasticctl: n4 is already a voter.\n");
  const RunResult ghost = elasticctl(ctl_args(*c.n2, {"voters", "add", "ghost"}));
  EXPECT_TRUE(ghost.status.exited_with(1));
  EXPECT_THAT(ghost.err, HasSubstr("ghost is not an alive member"));

  const RunResult remove = elasticctl(ctl_args(c.n1, {"voters", "remove", "n3"}));
  ASSERT_TRUE(remove.status.exited_with(0)) << remove.err;
  EXPECT_THAT(voters_of(c.n1), ::testing::UnorderedElementsAre("n1", "n2", "n4"));
  for (Daemon* d : {c.n3.get(), &c.n1}) {
    d->process().signal(SIGKILL);
    d->process().wait(std::chrono::seconds(10));
  }
  std::string leader;
  ASSERT_TRUE(wait_until(
      [&] {
        leader = raft_of(*c.n2)["leader"].get<std::string>();
        return (leader == "n2" || leader == "n4") && raft_of(*c.n4)["leader"] == leader;
      },
      kElect))
      << raft_of(*c.n2).dump() << raft_of(*c.n4).dump();
  EXPECT_EQ(submit(*c.n4, "after", "1"), "after-2");
  EXPECT_THAT(job_ids(*c.n2), ::testing::UnorderedElementsAre(first, "after-2"));
}

// The job's record as `elasticctl status JOB --json` on `daemon` shows it; null if unanswered.
nlohmann::json job_of(const Daemon& daemon, const std::string& id) {
  const RunResult r = elasticctl(ctl_args(daemon, {"status", id, "--json"}));
  if (!r.status.exited_with(0)) return nullptr;
  const auto job = nlohmann::json::parse(r.out, nullptr, false);
  return job.is_discarded() ? nullptr : job;
}

std::vector<std::string> rank_nodes(const nlohmann::json& job) {
  std::vector<std::string> nodes;
  for (const auto& r : job.value("ranks", nlohmann::json::array())) {
    nodes.push_back(r["node"].get<std::string>());
  }
  return nodes;
}

// A job's rounds on real daemons: the first round takes max nodes, every member acknowledges
// (running); kill -9 of a member is declared by the job tier and the next round keeps the
// survivors in their rank order and adds the waiting node; the survivors log the loss.
TEST(ConsensusInteg, RoundsOpenRunAndReplaceALostNode) {
  Cluster c;
  const std::string leader = c.wait_leader(c.all());
  ASSERT_FALSE(leader.empty());
  const std::string id = submit(*c.n4, "rounds", "2:3");
  ASSERT_FALSE(id.empty());
  nlohmann::json job;
  ASSERT_TRUE(wait_until(
      [&] {
        job = job_of(*c.n4, id);
        return !job.is_null() && job["state"] == "running" && job["round"] == 1;
      },
      kElect))
      << job.dump();
  const std::vector<std::string> first = rank_nodes(job);
  ASSERT_EQ(first.size(), 3u);
  // Each member daemon shows its part of the round (ranks, world, store) in `status`.
  for (std::size_t rank = 0; rank < first.size(); ++rank) {
    Daemon* member = c.by_name(first[rank]);
    nlohmann::json rounds;
    EXPECT_TRUE(wait_until(
        [&] {
          const RunResult r = elasticctl(ctl_args(*member, {"status", "--json"}));
          rounds = nlohmann::json::parse(r.out, nullptr, false).value("rounds", nlohmann::json());
          return rounds.is_array() && rounds.size() == 1 && rounds[0]["round"] == 1;
        },
        kElect))
        << first[rank] << ": " << rounds.dump();
    EXPECT_EQ(rounds[0]["first_rank"], rank);
    EXPECT_EQ(rounds[0]["world"], 3);
    EXPECT_EQ(rounds[0]["fenced"], false);
    EXPECT_EQ(rounds[0]["store_endpoint"], job["store_endpoint"]);
  }
  EXPECT_EQ(job["store_endpoint"].get<std::string>().rfind("127.0.0.1:", 0), 0u);

  // Kill a member that is neither the leader nor n4 (the client).
  std::string victim;
  for (const auto& name : first) {
    if (name != leader && name != "n4") victim = name;
  }
  ASSERT_FALSE(victim.empty());
  Daemon* doomed = c.by_name(victim);
  doomed->process().signal(SIGKILL);
  doomed->process().wait(std::chrono::seconds(10));

  ASSERT_TRUE(wait_until(
      [&] {
        job = job_of(*c.n4, id);
        return !job.is_null() && job["round"] == 2 && job["state"] == "running";
      },
      kElect))
      << job.dump();
  std::vector<std::string> survivors;
  for (const auto& name : first) {
    if (name != victim) survivors.push_back(name);
  }
  std::vector<std::string> second = rank_nodes(job);
  ASSERT_EQ(second.size(), 3u) << job.dump();
  // Survivors first, in their old order; the newcomer last.
  EXPECT_EQ(std::vector<std::string>(second.begin(), second.begin() + 2), survivors);
  EXPECT_NE(second[2], victim);
  EXPECT_EQ(job["restarts"], 0);  // a lost node is not a worker failure
  bool logged = false;
  for (Daemon* d : c.all()) {
    if (d != doomed &&
        d->process().err().find("peer " + victim + " (gen 1) lost") != std::string::npos) {
      logged = true;
    }
  }
  EXPECT_TRUE(logged) << "no survivor declared " << victim << " lost for the job";
}

// Supervision on real daemons: a worker that exits non-zero costs a restart and the job restarts
// on the same nodes; the node whose workers failed twice is quarantined: the job goes on without
// it (it keeps min_nodes) and does not grow it back in to fail again.
TEST(ConsensusInteg, WorkerFailuresCostRestartsAndAFlappingNodeIsQuarantined) {
  Cluster c;
  ASSERT_FALSE(c.wait_leader(c.all()).empty());
  const RunResult r = elasticctl(
      ctl_args(*c.n4, {"submit", "--name", "flaky", "--nodes", "2:4", "--max-restarts", "5",
                       "--restart-backoff", "0s", "--", "/bin/sh", "-c",
                       "if [ \"$ELASTIC_NODE\" = n2 ]; then exit 3; fi; exec /bin/sleep 600"}));
  ASSERT_TRUE(r.status.exited_with(0)) << r.err;
  const std::string id = "flaky-1";
  nlohmann::json job;
  // Round 1 on 4 nodes, n2's worker fails -> round 2 on the same 4 (restart 1), fails again ->
  // n2 quarantined: round 3 on the other 3 (restart 2).
  ASSERT_TRUE(wait_until(
      [&] {
        job = job_of(*c.n4, id);
        const auto nodes = job.is_null() ? std::vector<std::string>{} : rank_nodes(job);
        return !job.is_null() && job["state"] == "running" && nodes.size() == 3 &&
               std::find(nodes.begin(), nodes.end(), "n2") == nodes.end();
      },
      kElect))
      << job.dump();
  EXPECT_EQ(job["restarts"], 2) << job.dump();
  const auto round = job["round"].get<std::uint64_t>();
  // n2 waits as a spare the whole time; the job would grow after last_call (1 s in these tests)
  // but for the quarantine. Watch well past that: the round and the restarts stay.
  const auto since = std::chrono::steady_clock::now();
  EXPECT_FALSE(wait_until(
      [&] {
        job = job_of(*c.n4, id);
        return job.is_null() || job["round"] != round || job["restarts"] != 2;
      },
      std::chrono::seconds(6)))
      << job.dump();
  EXPECT_GE(std::chrono::steady_clock::now() - since, std::chrono::seconds(6));
  const auto events = job.value("events", nlohmann::json::array());
  EXPECT_TRUE(std::any_of(events.begin(), events.end(), [](const nlohmann::json& e) {
    return e.value("reason", "").find("quarantined") != std::string::npos;
  })) << job.dump();
}

}  // namespace
}  // namespace elastic::testing
