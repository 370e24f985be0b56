// The job supervisor's file and machine decisions through the Host seam (daemon/node/host.h),
// on an in-memory FakeHost and a launcher that only records specs: no disk, no process, no
// clock. What a round start does to the worker log tree (the owner file, pruning old rounds, and
// what it refuses to believe or follow), the job's LATEST read as its user, the worker
// environment taken from the host (PATH, LANG, accounts, the home directory, python_dir), a
// non-root daemon refusing another uid, and the `logs` verbs reading through the same host.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "daemon/node/job_supervisor.h"
#include "daemon/node/worker_log_verbs.h"
#include "tests/unit/fake_host.h"

namespace elastic::node {
namespace {

using ::testing::ElementsAre;
using testing::FakeHost;
using ::testing::HasSubstr;

constexpr const char* kSelf = "me";
constexpr std::uint32_t kAlice = 1000;

// Records every spec; workers never exit.
class RecordingLauncher final : public spawner::Launcher {
 public:
  explicit RecordingLauncher(std::vector<spawner::WorkerSpec>* spawned) : spawned_(spawned) {}
  Result<spawner::WorkerId> spawn(TimePoint, const spawner::WorkerSpec& spec) override {
    spawned_->push_back(spec);
    return static_cast<spawner::WorkerId>(spawned_->size());
  }
  void stop(TimePoint, spawner::WorkerId) override {}
  void stop(TimePoint, spawner::WorkerId, int, Duration) override {}
  void kill(spawner::WorkerId) override {}
  Status hand_off(spawner::WorkerId, std::string_view, const std::string&,
                  const std::string&) override {
    return Error{"No standbys here."};
  }
  void note(spawner::WorkerId, std::string_view) override {}
  void set_limits(Duration, std::uint64_t, int) override {}
  int fd() const override { return -1; }
  void process(TimePoint, std::vector<spawner::WorkerExit>*) override {}
  TimePoint next_deadline() const override { return kNever; }
  std::optional<int> pid(spawner::WorkerId id) const override {
    return 4000 + static_cast<int>(id);
  }
  std::size_t running() const override { return spawned_->size(); }
  void shutdown(Duration, std::vector<spawner::WorkerExit>*) override {}

 private:
  std::vector<spawner::WorkerSpec>* spawned_;
};

class FixedClock final : public Clock {
 public:
  TimePoint now() const override { return TimePoint{}; }
  std::int64_t wall_ms() const override { return 1'800'000'000'000; }
  std::uint64_t seed() override { return 1; }
};

class SupervisorHostTest : public ::testing::Test {
 protected:
  SupervisorHostTest() {
    config_.node.name = kSelf;
    config_.node.state_dir = "/var/lib/elastic";
    config_.spawner.log_dir = "/logs";
    config_.spawner.log_rounds_kept = 2;
    config_.spawner.python_dir = "";
    config_.checkpoint.root = "/ck";
    config_.control.socket = "/run/elastic.sock";
    host_.accounts[kAlice] = control::Account{
        .name = "alice", .gid = kAlice, .home = "/home/alice", .shell = "/bin/zsh"};
  }

  JobSupervisor& open() {
    current_ = std::make_unique<config::Current>(config_);
    topology::Plan plan;
    for (std::uint32_t slot = 0; slot < 2; ++slot) {
      plan.slots.push_back(topology::Slot{});
      plan.slots.back().index = slot;
    }
    supervisor_ = std::make_unique<JobSupervisor>(kSelf, *current_,
                                                  std::make_unique<RecordingLauncher>(&spawned_),
                                                  std::move(plan), nullptr, clock_, host_);
    return *supervisor_;
  }

  // Round `round` of `job` owned by `uid`, this node alone with one rank.
  static RoundStart start(const std::string& job, std::uint64_t round, std::uint32_t uid = kAlice) {
    RoundStart s;
    s.term = 1;
    s.round.job_id = job;
    s.round.round = round;
    s.round.ranks = {
        rendezvous::RankAssignment{.node = kSelf, .generation = 1, .slots = 1, .first_rank = 0}};
    s.round.store_endpoint = "127.0.0.1:29500";
    s.spec.name = job;
    s.spec.command = {"/usr/bin/python3", "train.py"};
    s.spec.uid = uid;
    s.spec.gid = uid;
    return s;
  }

  config::DaemonConfig config_;
  FakeHost host_;
  FixedClock clock_;
  std::vector<spawner::WorkerSpec> spawned_;
  std::unique_ptr<config::Current> current_;
  std::unique_ptr<JobSupervisor> supervisor_;
};

TEST_F(SupervisorHostTest, ARoundStartRecordsTheOwnerAndPrunesTheOldestRounds) {
  host_.put_dir("/logs/job-1/round-1");
  host_.put_dir("/logs/job-1/round-2");
  host_.put_dir("/logs/job-1/round-3");
  // Neither a symlink named like a round nor a file is a round: never counted, never removed.
  host_.put_symlink("/logs/job-1/round-0", "/etc");
  host_.put_file("/logs/job-1/round-9", "");
  JobSupervisor& supervisor = open();
  EXPECT_TRUE(supervisor.on_round(TimePoint{}, start("job-1", 4)));
  // Two rounds kept, round 4's among them.
  EXPECT_THAT(host_.changes, ElementsAre("remove /logs/job-1/round-1", "remove /logs/job-1/round-2",
                                         "write /logs/job-1/owner"));
  EXPECT_EQ(host_.content("/logs/job-1/owner"), "1000\n");
  EXPECT_EQ(host_.stat("/logs/job-1/round-0", Follow::kNo)->kind, FileInfo::Kind::kSymlink);
  ASSERT_EQ(spawned_.size(), 1u);
  EXPECT_EQ(spawned_[0].log_path, "/logs/job-1/round-4/rank-0.log");

  EXPECT_EQ(supervisor.job_owner("job-1"), kAlice);

  // A job whose owner is recorded already (by a daemon sharing the log_root, or before a
  // restart): nothing is written.
  host_.put_file("/logs/job-3/owner", "1000\n");
  host_.changes.clear();
  EXPECT_TRUE(supervisor.on_round(TimePoint{}, start("job-3", 1)));
  EXPECT_THAT(host_.changes, ElementsAre());
}

TEST_F(SupervisorHostTest, ANewLogBaseIsMadeAndOnlyAnOwnerFileOfTheDaemonsUidIsBelieved) {
  JobSupervisor& supervisor = open();
  EXPECT_TRUE(supervisor.on_round(TimePoint{}, start("job-1", 1)));
  EXPECT_THAT(host_.changes,
              ElementsAre("mkdir /logs", "mkdir /logs/job-1", "write /logs/job-1/owner"));

  // Owner files of jobs this daemon never ran (since a restart, say).
  host_.put_file("/logs/own/owner", "42\n");
  host_.put_file("/logs/forged/owner", "42\n", /*uid=*/kAlice);  // not the daemon's
  host_.put_file("/logs/target/owner", "7\n");
  host_.put_symlink("/logs/linked/owner", "/logs/target/owner");  // never followed
  host_.put_file("/logs/garbled/owner", "42");                    // no newline
  EXPECT_EQ(supervisor.job_owner("own"), 42u);
  EXPECT_EQ(supervisor.job_owner("forged"), std::nullopt);
  EXPECT_EQ(supervisor.job_owner("linked"), std::nullopt);
  EXPECT_EQ(supervisor.job_owner("garbled"), std::nullopt);
  EXPECT_EQ(supervisor.job_owner("../own"), std::nullopt);

  // A round of a job whose owner file someone else planted gets the daemon's own.
  host_.changes.clear();
  host_.put_file("/logs/job-2/owner", "0\n", /*uid=*/kAlice);
  EXPECT_TRUE(supervisor.on_round(TimePoint{}, start("job-2", 1)));
  EXPECT_THAT(host_.changes, ElementsAre("write /logs/job-2/owner"));
  EXPECT_EQ(host_.content("/logs/job-2/owner"), "1000\n");
  EXPECT_EQ(host_.stat("/logs/job-2/owner", Follow::kNo)->uid, host_.daemon_uid);
}

TEST_F(SupervisorHostTest, TheLatestCheckpointIsReadAsTheJobsUser) {
  host_.now_ms = 1'700'000'000'000;
  host_.put_file("/ck/job-1/LATEST", "step-000001200\n", kAlice);
  JobSupervisor& supervisor = open();
  ASSERT_TRUE(supervisor.on_round(TimePoint{}, start("job-1", 1)));
  const std::vector<CheckpointInfo> found = supervisor.checkpoints();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].job, "job-1");
  EXPECT_EQ(found[0].step, 1200);
  EXPECT_EQ(found[0].at_ms, 1'700'000'000'000);
  ASSERT_FALSE(host_.read_as_users.empty());
  EXPECT_EQ(host_.read_as_users.back().uid, kAlice);
  EXPECT_EQ(host_.read_as_users.back().gid, kAlice);
  EXPECT_EQ(host_.read_as_users.back().user, "alice");

  // Another user's file is not the job's to show (the read as alice is refused).
  host_.put_file("/ck/job-1/LATEST", "step-000009999\n", /*uid=*/0);
  EXPECT_TRUE(supervisor.checkpoints().empty());
}

TEST_F(SupervisorHostTest, TheWorkerEnvironmentComesFromTheHost) {
  host_.environment = {{"PATH", "/opt/bin:/usr/bin"}};
  JobSupervisor& supervisor = open();
  ASSERT_TRUE(supervisor.on_round(TimePoint{}, start("job-1", 1)));
  ASSERT_EQ(spawned_.size(), 1u);
  const spawner::WorkerSpec& w = spawned_[0];
  EXPECT_EQ(w.env.at("PATH"), "/opt/bin:/usr/bin");
  EXPECT_FALSE(w.env.contains("LANG"));
  EXPECT_EQ(w.env.at("HOME"), "/home/alice");
  EXPECT_EQ(w.env.at("USER"), "alice");
  EXPECT_EQ(w.env.at("SHELL"), "/bin/zsh");
  EXPECT_EQ(w.working_dir, "/") << "alice's home does not exist on this host";
  ASSERT_TRUE(w.run_as.has_value()) << "a root daemon runs alice's workers as alice";
  EXPECT_EQ(w.run_as->uid, kAlice);

  // Her home exists, LANG is set, PATH is not: the default PATH.
  host_.put_dir("/home/alice", kAlice);
  host_.environment = {{"LANG", "C.UTF-8"}};
  ASSERT_TRUE(supervisor.on_round(TimePoint{}, start("job-2", 1)));
  ASSERT_EQ(spawned_.size(), 2u);
  EXPECT_EQ(spawned_[1].working_dir, "/home/alice");
  EXPECT_EQ(spawned_[1].env.at("LANG"), "C.UTF-8");
  EXPECT_EQ(spawned_[1].env.at("PATH"), "/usr/local/bin:/usr/bin:/bin");
}

TEST_F(SupervisorHostTest, PythonDirAutoLooksNextToTheDaemonsBinary) {
  config_.spawner.python_dir = "auto";
  host_.exe = "/opt/elastic/bin/elasticd";
  EXPECT_EQ(open().python_dir(), "") << "no module installed";
  host_.put_file("/opt/elastic/share/elastic/python/elastic_worker.py", "");
  JobSupervisor& supervisor = open();
  EXPECT_EQ(supervisor.python_dir(), "/opt/elastic/share/elastic/python");
  ASSERT_TRUE(supervisor.on_round(TimePoint{}, start("job-1", 1)));
  EXPECT_EQ(spawned_.back().env.at("PYTHONPATH"), "/opt/elastic/share/elastic/python");
}

TEST_F(SupervisorHostTest, ADaemonThatIsNotRootStartsNoWorkerOfAnotherUid) {
  host_.daemon_uid = 2000;
  host_.daemon_gid = 2000;
  JobSupervisor& supervisor = open();
  EXPECT_FALSE(supervisor.on_round(TimePoint{}, start("job-1", 1, kAlice)));
  EXPECT_TRUE(spawned_.empty());
  const std::vector<RoundReport> reports = supervisor.take_reports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].kind, ReportKind::kWorkerFailed);
  EXPECT_THAT(reports[0].detail, HasSubstr("elasticd runs as uid 2000 and cannot start workers "
                                           "for uid 1000"));
  // Its own uid's job runs as itself (no identity change).
  EXPECT_TRUE(supervisor.on_round(TimePoint{}, start("job-2", 1, 2000)));
  ASSERT_EQ(spawned_.size(), 1u);
  EXPECT_FALSE(spawned_[0].run_as.has_value());
}

TEST_F(SupervisorHostTest, TheLogsVerbsReadThroughTheHost) {
  JobSupervisor& supervisor = open();
  ASSERT_TRUE(supervisor.on_round(TimePoint{}, start("job-1", 1)));
  host_.now_ms = 1'700'000'000'123;
  host_.put_file("/logs/job-1/round-1/rank-0.log", "hello from rank 0\n");
  host_.put_symlink("/logs/job-1/round-1/rank-1.log", "/etc/shadow");  // not listed
  bool denied = false;
  auto listed = serve_worker_log_verb("log_files", R"({"job":"job-1"})", supervisor, kSelf, false,
                                      LogCaller{.uid = kAlice, .admin = false}, &denied);
  ASSERT_TRUE(listed.ok()) << listed.error().message;
  const auto files = nlohmann::json::parse(*listed)["files"];
  ASSERT_EQ(files.size(), 1u) << *listed;
  EXPECT_EQ(files[0]["rank"], 0);
  EXPECT_EQ(files[0]["size"], 18);
  EXPECT_EQ(files[0]["modified_ms"], 1'700'000'000'123);

  auto tail =
      serve_worker_log_verb("logs", R"({"job":"job-1","rank":0,"max_bytes":7})", supervisor, kSelf,
                            false, LogCaller{.uid = kAlice, .admin = false}, &denied);
  ASSERT_TRUE(tail.ok()) << tail.error().message;
  const auto reply = nlohmann::json::parse(*tail);
  EXPECT_EQ(reply["data"], "rank 0\n");
  EXPECT_EQ(reply["offset"], 18);

  auto other = serve_worker_log_verb("logs", R"({"job":"job-1","rank":0})", supervisor, kSelf,
                                     false, LogCaller{.uid = 2000, .admin = false}, &denied);
  EXPECT_FALSE(other.ok());
  EXPECT_TRUE(denied);
}

}  // namespace
}  // namespace elastic::node
