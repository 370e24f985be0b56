// The job supervisor against a real Spawner, real processes and real files: the worker
// environment (torchrun variables, slots, GPUs, checkpoint dir), reports to the leader (ack,
// done, failed, and their resend), how an old round is stopped before the next one starts
// (SIGKILL for a broken round, SIGTERM for grow), stop_job and shutdown, slot sharing between
// jobs, start errors, logs and owners. Workers are /bin/sh scripts that write what they see
// into files. No fixed sleeps: waits poll the supervisor's fd with a deadline; time-driven
// behaviour (report resend, TERM -> KILL escalation) is driven by passing a later `now`.
#include "daemon/node/job_supervisor.h"
#include "daemon/spawner/spawner.h"

#include <gtest/gtest.h>
#include <pwd.h>
#include <signal.h>
#include <sys/fsuid.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/process.h"
#include "tests/support/result_assertions.h"
#include "tests/support/supervisor_harness.h"
#include "tests/support/temp_dir.h"

namespace elastic::node {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;
using rendezvous::RankAssignment;
using rendezvous::RoundReason;
using testing::contains;
using testing::cpu_plan;
using testing::machine;
using testing::now;
using testing::plan_for;
using testing::read_file;
using testing::TempDir;

constexpr const char* kSelf = "me";

// Alive = exists and is not a zombie (a zombie has ended; only its exit status is left).
bool alive(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  return line[close + 2] != 'Z';
}

// A KEY=VALUE file written by `env` (values here hold no newlines).
std::map<std::string, std::string> read_env(const std::string& path) {
  std::map<std::string, std::string> env;
  std::istringstream in(read_file(path));
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

// Writes the worker's environment to $OUT/env-<job>-<round>-<rank>.txt (atomically).
const std::string kDumpEnv =
    "f=\"$OUT/env-$ELASTIC_JOB_ID-$ELASTIC_ROUND-$RANK\"; env > \"$f.tmp\" && mv \"$f.tmp\" "
    "\"$f.txt\"";

using Report = RoundReport;

class JobSupervisorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Workers of the run_as case (another uid) must reach $OUT: mkdtemp made dir_ 0700.
    ::chmod(dir_.path().c_str(), 0755);
    out_ = dir_ / "out";
    std::filesystem::create_directories(out_);
    ::chmod(out_.c_str(), 0777);
    config_.node.name = kSelf;
    config_.node.state_dir = dir_ / "state";
    config_.checkpoint.root = dir_ / "ck";
    config_.control.socket = dir_ / "elasticd.sock";
    // Long enough that a worker which is SIGKILLed "at once" can never be confused with one
    // killed when the grace ran out.
    config_.spawner.stop_grace = 30s;
  }

  void TearDown() override {
    if (supervisor_) supervisor_->shutdown(100ms);
    supervisor_.reset();
  }

  void open(topology::Plan plan) {
    spawner::SpawnerConfig sc;
    sc.stop_grace = config_.spawner.stop_grace;
    sc.log_max_bytes = 1 << 20;
    sc.log_keep = 2;
    sc.state_dir = config_.node.state_dir;
    auto spawner = spawner::Spawner::open(sc);
    ASSERT_OK(spawner);
    // The supervisor reads the running config from a config::Current, as in the daemon; the
    // tests set config_ before open().
    supervisor_.reset();
    current_ = std::make_unique<config::Current>(config_);
    supervisor_ = std::make_unique<JobSupervisor>(
        kSelf, *current_, std::move(spawner).value(), std::move(plan),
        [this](std::uint16_t port) { return port_in_use_ && port_in_use_(port); }, wall_clock_);
  }

  // Round `round` of `job` with this node alone holding `slots` ranks from 0.
  RoundStart start(const std::string& job, std::uint64_t round, std::uint32_t slots,
                   const std::string& script, RoundReason reason = RoundReason::kSubmitted) const {
    RoundStart s;
    s.term = 1;
    s.state = rendezvous::JobState::kRendezvous;
    s.round.job_id = job;
    s.round.round = round;
    s.round.expected_prev_round = round - 1;
    s.round.ranks = {RankAssignment{kSelf, 1, slots, 0}};
    s.round.store_endpoint = "127.0.0.1:29500";
    s.round.reason = reason;
    s.spec.name = job;
    s.spec.command = {"/bin/sh", "-c", script};
    s.spec.env = {{"OUT", out_}};
    s.spec.uid = ::getuid();
    s.spec.gid = ::getgid();
    s.spec.working_dir = dir_.path();
    return s;
  }

  // Pumps the supervisor until `done` holds or `timeout` passes.
  bool pump_until(const std::function<bool()>& done, std::chrono::milliseconds timeout = 10s) {
    return testing::pump_until(*supervisor_, done, timeout);
  }

  // Every report the supervisor made so far (taken from it on each call).
  std::vector<Report> reports(ReportKind kind, const std::string& job = "") {
    if (supervisor_) {
      for (Report& r : supervisor_->take_reports()) reports_.push_back(std::move(r));
    }
    std::vector<Report> out;
    for (const Report& r : reports_) {
      if (r.kind == kind && (job.empty() || r.job == job)) out.push_back(r);
    }
    return out;
  }
  bool acked(const std::string& job, std::uint64_t round) {
    for (const Report& r : reports(ReportKind::kRoundAck, job)) {
      if (r.round == round) return true;
    }
    return false;
  }

  std::vector<WorkerRow> rows(const std::string& job) const {
    std::vector<WorkerRow> out;
    for (const WorkerRow& row : supervisor_->workers()) {
      if (row.job == job) out.push_back(row);
    }
    return out;
  }
  std::size_t running(const std::string& job) const {
    std::size_t n = 0;
    for (const WorkerRow& row : rows(job)) n += row.state != "exited" ? 1 : 0;
    return n;
  }

  std::string env_file(const std::string& job, std::uint64_t round, std::uint32_t rank) const {
    return out_ + "/env-" + job + "-" + std::to_string(round) + "-" + std::to_string(rank) + ".txt";
  }
  std::map<std::string, std::string> wait_env(const std::string& job, std::uint64_t round,
                                              std::uint32_t rank) {
    const std::string path = env_file(job, round, rank);
    EXPECT_TRUE(pump_until([&] { return std::filesystem::exists(path); })) << path;
    return read_env(path);
  }
  bool exists(const std::string& name) const { return std::filesystem::exists(out_ + "/" + name); }

  TempDir dir_;
  std::string out_;
  config::DaemonConfig config_;
  std::unique_ptr<config::Current> current_;  // outlives supervisor_ (declared before it)
  // Wall time for the supervisor's reports: fixed, so a test can expect it exactly.
  static constexpr std::int64_t kWallMs = 1'790'000'000'000;
  ManualClock wall_clock_{TimePoint{}, kWallMs, 1};
  std::unique_ptr<JobSupervisor> supervisor_;
  std::vector<Report> reports_;
  std::function<bool(std::uint16_t)> port_in_use_;  // the store port check, when a test sets it
};

// --- 1. The worker environment ------------------------------------------------------------

TEST_F(JobSupervisorTest, TwoLocalSlotsStartTwoWorkersWithTheTorchrunEnvironment) {
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  // Node "a" holds ranks 0-2; this node is entry 1 (GROUP_RANK 1) with ranks 3-4.
  RoundStart s = start("fm-1", 4, 2, kDumpEnv + "; exec sleep 1000");
  // TORCHELASTIC_RESTART_COUNT is this node's count (2), not a's (4) nor the job's (6).
  s.round.ranks = {RankAssignment{"a", 7, 3, 0, 4}, RankAssignment{kSelf, 1, 2, 3, 2}};
  s.round.store_endpoint = "10.1.2.3:29400";
  s.restarts = 6;
  s.spec.max_restarts = 5;
  s.spec.env["MY_SETTING"] = "a value with spaces";
  const TimePoint t0 = now();
  EXPECT_TRUE(supervisor_->on_round(t0, s));
  ASSERT_EQ(reports(ReportKind::kRoundAck).size(), 1u);
  EXPECT_EQ(reports(ReportKind::kRoundAck)[0].job, "fm-1");
  EXPECT_EQ(reports(ReportKind::kRoundAck)[0], round_report(ReportKind::kRoundAck, "fm-1", 4));
  EXPECT_EQ(running("fm-1"), 2u);

  std::set<std::string> slots;
  for (std::uint32_t local = 0; local < 2; ++local) {
    const std::uint32_t rank = 3 + local;
    auto env = wait_env("fm-1", 4, rank);
    SCOPED_TRACE("rank " + std::to_string(rank));
    EXPECT_EQ(env["RANK"], std::to_string(rank));
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(local));
    EXPECT_EQ(env["WORLD_SIZE"], "5");
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
    EXPECT_EQ(env["GROUP_RANK"], "1");
    EXPECT_EQ(env["ROLE_RANK"], std::to_string(rank));
    EXPECT_EQ(env["ROLE_WORLD_SIZE"], "5");
    EXPECT_EQ(env["MASTER_ADDR"], "10.1.2.3");
    EXPECT_EQ(env["MASTER_PORT"], "29400");
    EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "2");
    EXPECT_EQ(env["TORCHELASTIC_MAX_RESTARTS"], "5");
    EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], "fm-1");
    EXPECT_EQ(env["ELASTIC_JOB_ID"], "fm-1");
    EXPECT_EQ(env["ELASTIC_ROUND"], "4");
    EXPECT_EQ(env["ELASTIC_NODE"], kSelf);
    EXPECT_EQ(env["ELASTIC_CONTROL_SOCKET"], config_.control.socket);
    EXPECT_EQ(env["OMP_NUM_THREADS"], "2");
    EXPECT_EQ(env["ELASTIC_CHECKPOINT_DIR"], config_.checkpoint.root + "/fm-1");
    EXPECT_EQ(env["MY_SETTING"], "a value with spaces");
    EXPECT_EQ(env["OUT"], out_);
    EXPECT_FALSE(env.contains("CUDA_VISIBLE_DEVICES"));
    EXPECT_FALSE(env.contains("CUDA_DEVICE_ORDER"));
    EXPECT_FALSE(env["PATH"].empty());
    EXPECT_FALSE(env["HOME"].empty());
    EXPECT_FALSE(env["USER"].empty());
    EXPECT_EQ(env["USER"], env["LOGNAME"]);
    slots.insert(env["ELASTIC_SLOT"]);
  }
  EXPECT_EQ(slots, (std::set<std::string>{"0", "1"}));
  // The worker creates it (as the job's user); the daemon does not.
  EXPECT_FALSE(std::filesystem::exists(config_.checkpoint.root + "/fm-1"));

  // A repeated start of the same round is a no-op that says "running".
  EXPECT_TRUE(supervisor_->on_round(now(), s));
  EXPECT_EQ(reports(ReportKind::kRoundAck).size(), 1u);
  EXPECT_EQ(rows("fm-1").size(), 2u);
  for (const WorkerRow& row : rows("fm-1")) {
    EXPECT_EQ(row.state, "running");
    EXPECT_EQ(row.round, 4u);
    EXPECT_GT(row.pid, 0);
    EXPECT_TRUE(alive(row.pid));
  }
  // An older round is refused once a newer one stands.
  RoundStart older = s;
  older.round.round = 3;
  EXPECT_FALSE(supervisor_->on_round(now(), older));
  EXPECT_EQ(running("fm-1"), 2u);
}

TEST_F(JobSupervisorTest, PythonWorkersAreUnbufferedUnlessTheJobSaysOtherwise) {
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  EXPECT_TRUE(supervisor_->on_round(now(), start("py-1", 1, 1, kDumpEnv)));
  EXPECT_EQ(wait_env("py-1", 1, 0)["PYTHONUNBUFFERED"], "1");
  RoundStart own = start("py-2", 1, 1, kDumpEnv);
  own.spec.env["PYTHONUNBUFFERED"] = "";
  EXPECT_TRUE(supervisor_->on_round(now(), own));
  auto env = wait_env("py-2", 1, 0);
  ASSERT_TRUE(env.contains("PYTHONUNBUFFERED"));
  EXPECT_EQ(env["PYTHONUNBUFFERED"], "");
}

// The submitter's exported environment beats the daemon's defaults (PATH, LANG,
// OMP_NUM_THREADS) and the job's env beats it; placeholders in env values and arguments are
// expanded per round; exported values are passed verbatim.
TEST_F(JobSupervisorTest, ExportedEnvironmentAndPlaceholdersReachTheWorker) {
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  RoundStart s = start("px-1", 5, 1, "export ARG0=\"$0\"; " + kDumpEnv + "; exec sleep 1000");
  s.spec.command.push_back("{job_id}/r{round}");  // $0 of sh -c
  s.spec.exported_env = {{"PATH", dir_ / "venv/bin" + ":/usr/bin:/bin"},
                         {"PYTHONPATH", "/home/alice/lib"},
                         {"NCCL_DEBUG", "INFO"},
                         {"OMP_NUM_THREADS", "7"},
                         {"VERBATIM", "{job_id}}"}};
  s.spec.env["NCCL_DEBUG"] = "WARN";
  s.spec.env["CKPT"] = "{checkpoint_dir}/mine";
  s.spec.env["TAG"] = "{job_id}-r{round}";
  s.spec.env["LITERAL"] = "{{job_id}} }}";
  EXPECT_TRUE(supervisor_->on_round(now(), s));
  auto env = wait_env("px-1", 5, 0);
  EXPECT_EQ(env["PATH"], dir_ / "venv/bin" + ":/usr/bin:/bin");
  EXPECT_EQ(env["PYTHONPATH"], "/home/alice/lib");
  EXPECT_EQ(env["NCCL_DEBUG"], "WARN");
  EXPECT_EQ(env["OMP_NUM_THREADS"], "7");
  EXPECT_EQ(env["VERBATIM"], "{job_id}}");
  EXPECT_EQ(env["CKPT"], config_.checkpoint.root + "/px-1/mine");
  EXPECT_EQ(env["TAG"], "px-1-r5");
  EXPECT_EQ(env["LITERAL"], "{job_id} }");
  EXPECT_EQ(env["ARG0"], "px-1/r5");
  EXPECT_EQ(env["RANK"], "0");  // the daemon's own variables stand
  EXPECT_EQ(env["ELASTIC_ROUND"], "5");
}

// {checkpoint_dir} without any checkpoint root fails the start with a sentence saying so,
// instead of expanding to "" (a script would then write to "/mine").
TEST_F(JobSupervisorTest, ACheckpointDirPlaceholderWithoutARootFailsTheStart) {
  config_.checkpoint.root = "";
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  RoundStart s = start("pc-1", 1, 1, "exit 0");
  s.spec.env["CKPT"] = "{checkpoint_dir}/mine";
  EXPECT_FALSE(supervisor_->on_round(now(), s));
  ASSERT_EQ(reports(ReportKind::kWorkerFailed).size(), 1u);
  const std::string detail = reports(ReportKind::kWorkerFailed)[0].detail;
  EXPECT_EQ(detail,
            "rank 0 on node " + std::string(kSelf) +
                " could not start: the value of CKPT uses {checkpoint_dir}, but neither the "
                "job's checkpoint_root nor this node's checkpoint.root is set");
  EXPECT_EQ(running("pc-1"), 0u);
}

TEST_F(JobSupervisorTest, AnIpv6StoreEndpointGivesABareMasterAddr) {
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  RoundStart s = start("v6-1", 1, 1, kDumpEnv);
  s.round.store_endpoint = "[::1]:29500";
  EXPECT_TRUE(supervisor_->on_round(now(), s));
  auto env = wait_env("v6-1", 1, 0);
  EXPECT_EQ(env["MASTER_ADDR"], "::1");
  EXPECT_EQ(env["MASTER_PORT"], "29500");
  EXPECT_EQ(env["GROUP_RANK"], "0");
  EXPECT_EQ(env["WORLD_SIZE"], "1");
}

TEST_F(JobSupervisorTest, TheSpecCheckpointRootWinsOverTheConfig) {
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  RoundStart s = start("ckp-1", 1, 1, kDumpEnv);
  s.spec.checkpoint_root = dir_ / "nfs/checkpoints";
  EXPECT_TRUE(supervisor_->on_round(now(), s));
  auto env = wait_env("ckp-1", 1, 0);
  EXPECT_EQ(env["ELASTIC_CHECKPOINT_DIR"], dir_ / "nfs/checkpoints/ckp-1");
}

TEST_F(JobSupervisorTest, NoCheckpointRootAnywhereLeavesTheVariableUnset) {
  config_.checkpoint.root = "";
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  EXPECT_TRUE(supervisor_->on_round(now(), start("nock-1", 1, 1, kDumpEnv)));
  auto env = wait_env("nock-1", 1, 0);
  EXPECT_FALSE(env.contains("ELASTIC_CHECKPOINT_DIR"));
}

TEST_F(JobSupervisorTest, GpuSlotsSetCudaVisibleDevicesInPciOrder) {
  open(plan_for(machine(4, 2), topology::PlanOptions{}));  // node.gpus = auto: GPUs 0 and 1
  ASSERT_TRUE(supervisor_);
  ASSERT_EQ(supervisor_->slots(), 2u);
  EXPECT_TRUE(supervisor_->on_round(now(), start("gpu-1", 1, 2, kDumpEnv)));
  for (std::uint32_t rank = 0; rank < 2; ++rank) {
    auto env = wait_env("gpu-1", 1, rank);
    SCOPED_TRACE("rank " + std::to_string(rank));
    ASSERT_TRUE(env.contains("ELASTIC_SLOT"));
    // Slot i holds CUDA index i on this plan; the slot and the device must agree.
    EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], env["ELASTIC_SLOT"]);
    EXPECT_EQ(env["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
    EXPECT_EQ(env["OMP_NUM_THREADS"], "2");
  }
}

TEST_F(JobSupervisorTest, ASelectedGpuIsNamedByItsCudaIndexNotItsSlot) {
  topology::PlanOptions options;
  options.gpus.detect = false;
  options.gpus.indices = {1};  // node.gpus = [1]: slot 0 is CUDA device 1
  open(plan_for(machine(4, 2), options));
  ASSERT_TRUE(supervisor_);
  ASSERT_EQ(supervisor_->slots(), 1u);
  EXPECT_TRUE(supervisor_->on_round(now(), start("gpu-2", 1, 1, kDumpEnv)));
  auto env = wait_env("gpu-2", 1, 0);
  EXPECT_EQ(env["ELASTIC_SLOT"], "0");
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "1");
  EXPECT_EQ(env["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
}

TEST_F(JobSupervisorTest, AsRootWorkersRunAsTheSubmittingUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run workers as another user";
  const passwd* entry = ::getpwnam("nobody");
  if (entry == nullptr) GTEST_SKIP() << "no user 'nobody' on this host";
  const std::uint32_t uid = entry->pw_uid;
  const std::uint32_t gid = entry->pw_gid;
  const std::string home_dir = entry->pw_dir;
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  RoundStart s = start("user-1", 1, 1,
                       "id -u > \"$OUT/uid.tmp\"; id -g >> \"$OUT/uid.tmp\"; pwd >> "
                       "\"$OUT/uid.tmp\"; mv \"$OUT/uid.tmp\" \"$OUT/uid.txt\"; " +
                           kDumpEnv);
  s.spec.uid = uid;
  s.spec.gid = gid;
  s.spec.user = "nobody";
  s.spec.working_dir = "";  // the user's home, else "/"
  EXPECT_TRUE(supervisor_->on_round(now(), s));
  ASSERT_TRUE(pump_until([&] { return exists("uid.txt"); }));
  std::istringstream ids(read_file(out_ + "/uid.txt"));
  std::string seen_uid, seen_gid, cwd;
  ids >> seen_uid >> seen_gid >> cwd;
  EXPECT_EQ(seen_uid, std::to_string(uid));
  EXPECT_EQ(seen_gid, std::to_string(gid));
  struct stat home {};
  const bool home_exists = ::stat(home_dir.c_str(), &home) == 0 && S_ISDIR(home.st_mode);
  EXPECT_EQ(cwd, home_exists ? home_dir : "/");
  auto env = wait_env("user-1", 1, 0);
  EXPECT_EQ(env["USER"], "nobody");
  EXPECT_EQ(env["HOME"], home_dir);
  // The daemon leaves the checkpoint directory to the workers, which create it as the user.
  EXPECT_FALSE(std::filesystem::exists(config_.checkpoint.root + "/user-1"));
  EXPECT_EQ(supervisor_->job_owner("user-1"), uid);
}

// A root daemon never chowns (or creates) anything under a checkpoint root the user chose: a
// user who plants <their dir>/<next job id> as a symlink to a directory they do not own (job
// ids "<name>-<n>" are predictable) must not get that directory (e.g. /etc) handed to them.
TEST_F(JobSupervisorTest, AsRootTheCheckpointDirIsNeverChownedThroughASymlink) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run workers as another user";
  const passwd* entry = ::getpwnam("nobody");
  if (entry == nullptr) GTEST_SKIP() << "no user 'nobody' on this host";
  const std::uint32_t uid = entry->pw_uid;
  const std::uint32_t gid = entry->pw_gid;
  const std::string victim = dir_ / "root-owned";
  std::filesystem::create_directories(victim);
  std::filesystem::create_directories(dir_ / "user-root");
  std::filesystem::create_directory_symlink(victim, dir_ / "user-root/evil-1");
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  RoundStart s = start("evil-1", 1, 1, "exit 0");
  s.spec.uid = uid;
  s.spec.gid = gid;
  s.spec.checkpoint_root = dir_ / "user-root";
  supervisor_->on_round(now(), s);
  struct stat st {};
  ASSERT_EQ(::stat(victim.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u) << victim << " was chowned to uid " << st.st_uid << " via a symlink";
}

// The daemon reads a job's LATEST as the job's user: a checkpoint directory that is a symlink to
// a directory only root may read, or a checkpoint root inside such a directory, shows no step
// (the metrics showed the root-only directory's step), while the user's own directory, through a
// symlink as well, does. Afterwards the thread is root again, with root's groups.
TEST_F(JobSupervisorTest, AsRootLatestIsReadAsTheJobsUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run workers as another user";
  const passwd* entry = ::getpwnam("nobody");
  if (entry == nullptr) GTEST_SKIP() << "no user 'nobody' on this host";
  const std::uint32_t uid = entry->pw_uid;
  const std::uint32_t gid = entry->pw_gid;
  // Only root may enter <dir>/secret; what lies inside is readable to anyone who gets there.
  const std::string secret = dir_ / "secret";
  std::filesystem::create_directories(secret + "/inside/job-b");
  std::ofstream(secret + "/LATEST") << "step-000000042\n";
  std::ofstream(secret + "/inside/job-b/LATEST") << "step-000000043\n";
  ASSERT_EQ(::chmod(secret.c_str(), 0700), 0);
  // The user's own checkpoints, and the checkpoint root the user chose for jobs a and c.
  const std::string mine = dir_ / "mine";
  std::filesystem::create_directories(mine);
  std::ofstream(mine + "/LATEST") << "step-000000007\n";
  const std::string user_root = dir_ / "user-root";
  std::filesystem::create_directories(user_root);
  std::filesystem::create_directory_symlink(secret, user_root + "/job-a");
  std::filesystem::create_directory_symlink(mine, user_root + "/job-c");

  std::vector<gid_t> groups_before(static_cast<std::size_t>(::getgroups(0, nullptr)));
  ::getgroups(static_cast<int>(groups_before.size()), groups_before.data());
  const int dumpable_before = ::prctl(PR_GET_DUMPABLE);
  open(cpu_plan(3));
  ASSERT_TRUE(supervisor_);
  for (const auto& [job, root] : std::map<std::string, std::string>{
           {"job-a", user_root}, {"job-b", secret + "/inside"}, {"job-c", user_root}}) {
    RoundStart s = start(job, 1, 1, "exec sleep 1000");
    s.spec.uid = uid;
    s.spec.gid = gid;
    s.spec.working_dir = "/";
    s.spec.checkpoint_root = root;
    EXPECT_TRUE(supervisor_->on_round(now(), s)) << job;
  }
  const auto found = supervisor_->checkpoints();
  std::string shown;
  for (const CheckpointInfo& c : found) {
    shown += c.job + " at step " + std::to_string(c.step) + "; ";
  }
  ASSERT_EQ(found.size(), 1u) << "only job-c's LATEST may be read: " << shown;
  EXPECT_EQ(found[0].job, "job-c");
  EXPECT_EQ(found[0].step, 7);

  EXPECT_EQ(::setfsuid(static_cast<uid_t>(-1)), 0);
  EXPECT_EQ(::setfsgid(static_cast<gid_t>(-1)), 0);
  std::vector<gid_t> groups_after(static_cast<std::size_t>(::getgroups(0, nullptr)));
  ::getgroups(static_cast<int>(groups_after.size()), groups_after.data());
  EXPECT_EQ(groups_after, groups_before);
  EXPECT_EQ(::prctl(PR_GET_DUMPABLE), dumpable_before);
}

// --- 2. and 3. Reports ------------------------------------------------------------------

TEST_F(JobSupervisorTest, AllWorkersExitingZeroReportWorkersDoneOnceThenResend) {
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  EXPECT_TRUE(supervisor_->on_round(now(), start("done-1", 2, 2, "exit 0")));
  ASSERT_TRUE(pump_until([&] { return !reports(ReportKind::kWorkersDone).empty(); }));
  // Both exited (the report waits for the last one), and kept as "exited" rows.
  ASSERT_EQ(rows("done-1").size(), 2u);
  for (const WorkerRow& row : rows("done-1")) {
    EXPECT_EQ(row.state, "exited");
    EXPECT_EQ(row.detail, "exited with status 0");
  }
  ASSERT_EQ(reports(ReportKind::kWorkersDone).size(), 1u);
  EXPECT_EQ(reports(ReportKind::kWorkersDone)[0].job, "done-1");
  EXPECT_EQ(reports(ReportKind::kWorkersDone)[0],
            round_report(ReportKind::kWorkersDone, "done-1", 2));
  EXPECT_TRUE(reports(ReportKind::kWorkerFailed).empty());

  // Not again before kReportResend...
  supervisor_->process(now());
  EXPECT_EQ(reports(ReportKind::kWorkersDone).size(), 1u);
  EXPECT_LE(supervisor_->next_deadline(), now() + JobSupervisor::kReportResend);
  // ...but again after it, while the round stands (the leader may have lost the first).
  const TimePoint later = now() + JobSupervisor::kReportResend + 10ms;
  supervisor_->process(later);
  EXPECT_EQ(reports(ReportKind::kWorkersDone).size(), 2u);
  supervisor_->process(later + JobSupervisor::kReportResend + 10ms);
  EXPECT_EQ(reports(ReportKind::kWorkersDone).size(), 3u);

  // Once the job has no round here any more, nothing is re-sent.
  supervisor_->stop_job(now(), "done-1", StopMode::kKill, "job succeeded");
  supervisor_->process(later + 10 * JobSupervisor::kReportResend);
  EXPECT_EQ(reports(ReportKind::kWorkersDone).size(), 3u);
  EXPECT_TRUE(reports(ReportKind::kWorkerFailed).empty());
}

// A job whose workers had all exited before stop_job (succeeded, or failed and then ended) is
// forgotten: its "exited" rows leave workers() (elasticctl status) and the job leaves memory.
TEST_F(JobSupervisorTest, StopJobForgetsAJobWhoseWorkersAlreadyExited) {
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  EXPECT_TRUE(supervisor_->on_round(now(), start("end-1", 1, 1, "exit 0")));
  EXPECT_TRUE(supervisor_->on_round(now(), start("end-2", 1, 1, "exit 4")));
  ASSERT_TRUE(pump_until([&] {
    return !reports(ReportKind::kWorkersDone, "end-1").empty() &&
           !reports(ReportKind::kWorkerFailed, "end-2").empty();
  }));
  supervisor_->stop_job(now(), "end-1", StopMode::kKill, "job succeeded");
  supervisor_->stop_job(now(), "end-2", StopMode::kKill, "job failed");
  supervisor_->process(now());
  EXPECT_TRUE(rows("end-1").empty());
  EXPECT_TRUE(rows("end-2").empty());
  EXPECT_TRUE(supervisor_->workers().empty());
}

TEST_F(JobSupervisorTest, AWorkerExitingThreeReportsWorkerFailedWithItsRank) {
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  RoundStart s = start("fail-1", 1, 2, "if [ \"$LOCAL_RANK\" = 1 ]; then exit 3; fi; exit 0");
  s.round.ranks = {RankAssignment{kSelf, 1, 2, 6}};  // ranks 6 and 7
  EXPECT_TRUE(supervisor_->on_round(now(), s));
  ASSERT_TRUE(pump_until([&] { return !reports(ReportKind::kWorkerFailed).empty(); }));
  // Let rank 6 exit too: a failed round never turns into workers_done.
  ASSERT_TRUE(pump_until([&] { return running("fail-1") == 0; }));
  ASSERT_EQ(reports(ReportKind::kWorkerFailed).size(), 1u);
  const Report failed = reports(ReportKind::kWorkerFailed)[0];
  EXPECT_EQ(failed.job, "fail-1");
  EXPECT_EQ(failed.job, "fail-1");
  EXPECT_EQ(failed.round, 1u);
  EXPECT_EQ(failed.rank, 7u);
  const std::string detail = failed.detail;
  EXPECT_TRUE(contains(detail, "exited with status 3")) << detail;
  EXPECT_TRUE(contains(detail, "rank 7")) << detail;
  EXPECT_TRUE(reports(ReportKind::kWorkersDone).empty());
  // A repeated start of the failed round does not say "running".
  EXPECT_FALSE(supervisor_->on_round(now(), s));

  supervisor_->process(now() + JobSupervisor::kReportResend + 10ms);
  ASSERT_EQ(reports(ReportKind::kWorkerFailed).size(), 2u);
  EXPECT_EQ(reports(ReportKind::kWorkerFailed)[1], failed);
  EXPECT_TRUE(reports(ReportKind::kWorkersDone).empty());
}

TEST_F(JobSupervisorTest, AWorkerKilledByASignalIsAFailure) {
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  EXPECT_TRUE(supervisor_->on_round(now(), start("sig-1", 1, 1, "kill -USR1 $$")));
  ASSERT_TRUE(pump_until([&] { return !reports(ReportKind::kWorkerFailed).empty(); }));
  const std::string detail = reports(ReportKind::kWorkerFailed)[0].detail;
  EXPECT_TRUE(contains(detail, "killed by signal 10 (SIGUSR1)")) << detail;
  EXPECT_TRUE(reports(ReportKind::kWorkersDone).empty());
}

// --- 4. A new round of the same job -----------------------------------------------------

TEST_F(JobSupervisorTest, AMemberLostRoundKillsTheOldWorkersAtOnceThenStartsTheNew) {
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  // The old worker ignores SIGTERM (ignored dispositions survive exec): only SIGKILL ends it.
  EXPECT_TRUE(supervisor_->on_round(
      now(), start("ml-1", 1, 1, "trap '' TERM; touch \"$OUT/ready\"; exec sleep 1000")));
  ASSERT_TRUE(pump_until([&] { return exists("ready"); }));
  ASSERT_EQ(rows("ml-1").size(), 1u);
  const int old_pid = rows("ml-1")[0].pid;
  ASSERT_TRUE(alive(old_pid));

  // The new worker checks, from inside, that the old one is gone (reaped, not even a zombie).
  RoundStart next = start("ml-1", 2, 1,
                          "if kill -0 \"$OLD_PID\" 2>/dev/null; then r=alive; else r=gone; fi; "
                          "echo $r > \"$OUT/check.tmp\"; mv \"$OUT/check.tmp\" \"$OUT/check\"; "
                          "exec sleep 1000",
                          RoundReason::kMemberLost);
  next.spec.env["OLD_PID"] = std::to_string(old_pid);
  const TimePoint t0 = now();
  EXPECT_FALSE(supervisor_->on_round(t0, next)) << "the old worker cannot have been reaped yet";
  EXPECT_FALSE(acked("ml-1", 2));
  ASSERT_EQ(rows("ml-1").size(), 1u);
  EXPECT_EQ(rows("ml-1")[0].state, "stopping");
  EXPECT_EQ(rows("ml-1")[0].round, 1u);

  // stop_grace is 30 s: the new round starting within 10 s proves the old one got SIGKILL.
  ASSERT_TRUE(pump_until([&] { return acked("ml-1", 2); }, 10s));
  EXPECT_LT(now() - t0, Duration(10s));
  EXPECT_FALSE(alive(old_pid));
  ASSERT_EQ(rows("ml-1").size(), 1u);
  EXPECT_EQ(rows("ml-1")[0].round, 2u);
  EXPECT_NE(rows("ml-1")[0].pid, old_pid);
  ASSERT_TRUE(pump_until([&] { return exists("check"); }));
  EXPECT_EQ(read_file(out_ + "/check"), "gone\n");
  // The old worker's end is in its own round's file.
  const std::string log = read_file(supervisor_->logs().rank_path("ml-1", 1, 0));
  EXPECT_TRUE(contains(log, "pid " + std::to_string(old_pid) + " killed by signal 9")) << log;
  // Stopped workers are not failures.
  EXPECT_TRUE(reports(ReportKind::kWorkerFailed).empty());
}

TEST_F(JobSupervisorTest, AGrowRoundSendsTermFirstSoTheWorkerCanCheckpoint) {
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  // On SIGTERM the worker says so and exits 0 (as elastic-trainer does after checkpointing).
  EXPECT_TRUE(supervisor_->on_round(
      now(), start("grow-1", 1, 1,
                   "trap 'echo got TERM; exit 0' TERM; touch \"$OUT/ready\"; sleep 1000 & "
                   "wait $!")));
  ASSERT_TRUE(pump_until([&] { return exists("ready"); }));
  const int old_pid = rows("grow-1")[0].pid;

  RoundStart next = start("grow-1", 2, 2, kDumpEnv + "; exec sleep 1000", RoundReason::kGrow);
  EXPECT_FALSE(supervisor_->on_round(now(), next));
  EXPECT_EQ(rows("grow-1")[0].state, "stopping");
  ASSERT_TRUE(pump_until([&] { return acked("grow-1", 2); }, 10s));
  EXPECT_FALSE(alive(old_pid));
  const std::string log = read_file(supervisor_->logs().rank_path("grow-1", 1, 0));
  EXPECT_TRUE(contains(log, "got TERM")) << log;
  EXPECT_TRUE(contains(log, "pid " + std::to_string(old_pid) + " exited with status 0")) << log;
  EXPECT_EQ(running("grow-1"), 2u);
  EXPECT_EQ(wait_env("grow-1", 2, 1)["WORLD_SIZE"], "2");
  EXPECT_TRUE(reports(ReportKind::kWorkerFailed).empty());
}

TEST_F(JobSupervisorTest, AKillRoundDuringAGracefulStopKillsAtOnce) {
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  EXPECT_TRUE(supervisor_->on_round(
      now(), start("esc-1", 1, 1, "trap '' TERM; touch \"$OUT/ready\"; exec sleep 1000")));
  ASSERT_TRUE(pump_until([&] { return exists("ready"); }));
  const int old_pid = rows("esc-1")[0].pid;
  // Round 2 (grow) sends TERM, which this worker ignores; round 2 never starts...
  EXPECT_FALSE(supervisor_->on_round(now(), start("esc-1", 2, 1, "exit 0", RoundReason::kGrow)));
  supervisor_->process(now());
  EXPECT_TRUE(alive(old_pid));
  EXPECT_FALSE(acked("esc-1", 2));
  // ...because round 3 (a member lost) arrives first and must not wait out the grace.
  const TimePoint t0 = now();
  EXPECT_FALSE(supervisor_->on_round(
      t0, start("esc-1", 3, 1, kDumpEnv + "; exec sleep 1000", RoundReason::kMemberLost)));
  ASSERT_TRUE(pump_until([&] { return acked("esc-1", 3); }, 10s));
  EXPECT_LT(now() - t0, Duration(10s));
  EXPECT_FALSE(alive(old_pid));
  EXPECT_FALSE(acked("esc-1", 2));
  EXPECT_EQ(wait_env("esc-1", 3, 0)["ELASTIC_ROUND"], "3");
  EXPECT_EQ(running("esc-1"), 1u);
}

TEST_F(JobSupervisorTest, ANewRoundAfterTheOldWorkersExitedStartsAtOnce) {
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  EXPECT_TRUE(supervisor_->on_round(now(), start("re-1", 1, 1, "exit 5")));
  ASSERT_TRUE(pump_until([&] { return !reports(ReportKind::kWorkerFailed).empty(); }));
  RoundStart next = start("re-1", 2, 1, kDumpEnv, RoundReason::kWorkerFailed);
  next.restarts = 1;
  next.round.ranks[0].restarts = 1;  // this node's worker failed
  EXPECT_TRUE(supervisor_->on_round(now(), next));
  EXPECT_TRUE(acked("re-1", 2));
  EXPECT_EQ(wait_env("re-1", 2, 0)["TORCHELASTIC_RESTART_COUNT"], "1");
  // The failure belonged to round 1: it is no longer re-sent.
  const std::size_t failures = reports(ReportKind::kWorkerFailed).size();
  ASSERT_TRUE(pump_until([&] { return !reports(ReportKind::kWorkersDone).empty(); }));
  supervisor_->process(now() + JobSupervisor::kReportResend + 10ms);
  EXPECT_EQ(reports(ReportKind::kWorkerFailed).size(), failures);
  EXPECT_EQ(reports(ReportKind::kWorkersDone).back(),
            round_report(ReportKind::kWorkersDone, "re-1", 2));
}

// --- 5. stop_job and shutdown ---------------------------------------------------------------

TEST_F(JobSupervisorTest, StopJobGracefulSendsTermAndForgetsTheJob) {
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  EXPECT_TRUE(supervisor_->on_round(
      now(), start("stop-1", 1, 1,
                   "trap 'echo got TERM; exit 0' TERM; touch \"$OUT/ready\"; sleep 1000 & "
                   "wait $!")));
  ASSERT_TRUE(pump_until([&] { return exists("ready"); }));
  const int pid = rows("stop-1")[0].pid;
  supervisor_->stop_job(now(), "stop-1", StopMode::kGraceful, "cancelled by its owner");
  ASSERT_TRUE(pump_until([&] { return rows("stop-1").empty(); }, 10s));
  EXPECT_FALSE(alive(pid));
  const std::string log = read_file(supervisor_->logs().rank_path("stop-1", 1, 0));
  EXPECT_TRUE(contains(log, "got TERM")) << log;
  EXPECT_TRUE(contains(log, "exited with status 0 (stopped by the daemon)")) << log;
  EXPECT_TRUE(reports(ReportKind::kWorkerFailed).empty());
  EXPECT_TRUE(reports(ReportKind::kWorkersDone).empty());
}

TEST_F(JobSupervisorTest, StopJobGracefulKillsAWorkerThatIgnoresTermAfterTheGrace) {
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  EXPECT_TRUE(supervisor_->on_round(
      now(), start("stop-2", 1, 1, "trap '' TERM; touch \"$OUT/ready\"; exec sleep 1000")));
  ASSERT_TRUE(pump_until([&] { return exists("ready"); }));
  const int pid = rows("stop-2")[0].pid;
  const TimePoint t0 = now();
  supervisor_->stop_job(t0, "stop-2", StopMode::kGraceful, "cancelled by its owner");
  supervisor_->process(now());
  ASSERT_EQ(rows("stop-2").size(), 1u);
  EXPECT_EQ(rows("stop-2")[0].state, "stopping");
  EXPECT_TRUE(alive(pid));
  EXPECT_LE(supervisor_->next_deadline(), t0 + config_.spawner.stop_grace);
  // The grace runs out (time driven forward): SIGKILL.
  supervisor_->process(t0 + config_.spawner.stop_grace + 1ms);
  ASSERT_TRUE(pump_until([&] { return rows("stop-2").empty(); }, 10s));
  EXPECT_FALSE(alive(pid));
  const std::string log = read_file(supervisor_->logs().rank_path("stop-2", 1, 0));
  EXPECT_TRUE(contains(log, "killed by signal 9 (SIGKILL) (stopped by the daemon)")) << log;
  EXPECT_TRUE(reports(ReportKind::kWorkerFailed).empty());
}

TEST_F(JobSupervisorTest, StopJobKillEndsAWorkerThatIgnoresTermAtOnce) {
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  EXPECT_TRUE(supervisor_->on_round(
      now(), start("stop-3", 1, 2, "trap '' TERM; touch \"$OUT/ready-$RANK\"; exec sleep 1000")));
  ASSERT_TRUE(pump_until([&] { return exists("ready-0") && exists("ready-1"); }));
  std::vector<int> pids;
  for (const WorkerRow& row : rows("stop-3")) pids.push_back(row.pid);
  supervisor_->stop_job(now(), "stop-3", StopMode::kKill, "this node is no longer a member");
  ASSERT_TRUE(pump_until([&] { return rows("stop-3").empty(); }, 10s));
  for (int pid : pids) EXPECT_FALSE(alive(pid)) << pid;
  EXPECT_TRUE(reports(ReportKind::kWorkerFailed).empty());
  // Unknown jobs are ignored.
  supervisor_->stop_job(now(), "no-such-job", StopMode::kKill, "test");
}

TEST_F(JobSupervisorTest, ShutdownLeavesNothingRunning) {
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  // Each worker ignores TERM and has a child of its own in its process group.
  const std::string script =
      "trap '' TERM; sleep 1000 & echo $! > \"$OUT/child-$ELASTIC_JOB_ID.tmp\"; "
      "mv \"$OUT/child-$ELASTIC_JOB_ID.tmp\" \"$OUT/child-$ELASTIC_JOB_ID\"; exec sleep 1000";
  EXPECT_TRUE(supervisor_->on_round(now(), start("sd-1", 1, 1, script)));
  EXPECT_TRUE(supervisor_->on_round(now(), start("sd-2", 1, 1, script)));
  ASSERT_TRUE(pump_until([&] { return exists("child-sd-1") && exists("child-sd-2"); }));
  std::vector<int> pids;
  for (const WorkerRow& row : supervisor_->workers()) pids.push_back(row.pid);
  for (const char* job : {"child-sd-1", "child-sd-2"}) {
    pids.push_back(std::stoi(read_file(out_ + "/" + job)));
  }
  ASSERT_EQ(pids.size(), 4u);
  for (int pid : pids) ASSERT_TRUE(alive(pid)) << pid;
  supervisor_->shutdown(200ms);
  EXPECT_TRUE(supervisor_->workers().empty());
  // The workers are reaped by shutdown(); their children (reparented to this process, the
  // subreaper) die with the group. Neither may still run.
  for (int pid : pids) {
    EXPECT_TRUE(testing::wait_until([&] { return !alive(pid); }, 5000ms)) << pid;
  }
}

// --- 6. Slots shared by jobs ----------------------------------------------------------------

TEST_F(JobSupervisorTest, JobsGetDisjointSlotsAndAThirdWaitsForAFreeOne) {
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  // Each worker runs until its job's release file appears, then exits 0.
  const std::string script = kDumpEnv +
                             "; until [ -e \"$OUT/release-$ELASTIC_JOB_ID\" ]; do sleep 0.02; "
                             "done; exit 0";
  EXPECT_TRUE(supervisor_->on_round(now(), start("a-1", 1, 1, script)));
  EXPECT_TRUE(supervisor_->on_round(now(), start("b-1", 1, 1, script)));
  const std::string slot_a = wait_env("a-1", 1, 0)["ELASTIC_SLOT"];
  const std::string slot_b = wait_env("b-1", 1, 0)["ELASTIC_SLOT"];
  EXPECT_NE(slot_a, slot_b);
  EXPECT_EQ((std::set<std::string>{slot_a, slot_b}), (std::set<std::string>{"0", "1"}));

  // No slot is free: nothing starts, no ack.
  EXPECT_FALSE(supervisor_->on_round(now(), start("c-1", 1, 1, script)));
  supervisor_->process(now());
  EXPECT_TRUE(rows("c-1").empty());
  EXPECT_FALSE(acked("c-1", 1));
  EXPECT_TRUE(reports(ReportKind::kWorkerFailed).empty());
  EXPECT_FALSE(std::filesystem::exists(env_file("c-1", 1, 0)));

  // Job a's worker ends; c takes its slot.
  std::ofstream(out_ + "/release-a-1") << "";
  ASSERT_TRUE(pump_until([&] { return acked("c-1", 1); }));
  EXPECT_EQ(reports(ReportKind::kWorkersDone, "a-1").size(), 1u);
  EXPECT_EQ(wait_env("c-1", 1, 0)["ELASTIC_SLOT"], slot_a);
  EXPECT_EQ(running("b-1"), 1u);
  EXPECT_EQ(running("c-1"), 1u);
  EXPECT_TRUE(reports(ReportKind::kWorkerFailed).empty());
}

// --- 7. Start errors --------------------------------------------------------------------------

TEST_F(JobSupervisorTest, ACommandThatDoesNotExistIsAWorkerFailure) {
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  RoundStart s = start("nx-1", 1, 1, "");
  s.spec.command = {"elastic-no-such-command-for-tests", "--flag"};
  EXPECT_FALSE(supervisor_->on_round(now(), s));
  EXPECT_FALSE(acked("nx-1", 1));
  ASSERT_EQ(reports(ReportKind::kWorkerFailed).size(), 1u);
  const Report failed = reports(ReportKind::kWorkerFailed)[0];
  EXPECT_EQ(failed.rank, 0u);
  EXPECT_EQ(failed.round, 1u);
  const std::string detail = failed.detail;
  EXPECT_TRUE(contains(detail, "could not start")) << detail;
  EXPECT_TRUE(contains(detail, "elastic-no-such-command-for-tests")) << detail;
  EXPECT_EQ(running("nx-1"), 0u);
  supervisor_->process(now() + JobSupervisor::kReportResend + 10ms);
  EXPECT_EQ(reports(ReportKind::kWorkerFailed).size(), 2u);
  // The spawner wrote the reason into the rank's log too.
  const std::string log = read_file(supervisor_->logs().rank_path("nx-1", 1, 0));
  EXPECT_TRUE(contains(log, "elastic-no-such-command-for-tests")) << log;
}

TEST_F(JobSupervisorTest, AnAbsoluteCommandThatDoesNotExistIsAWorkerFailure) {
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  RoundStart s = start("nx-2", 1, 2, "");
  s.spec.command = {dir_ / "missing-binary"};
  EXPECT_FALSE(supervisor_->on_round(now(), s));
  ASSERT_EQ(reports(ReportKind::kWorkerFailed).size(), 1u);
  const std::string detail = reports(ReportKind::kWorkerFailed)[0].detail;
  EXPECT_TRUE(contains(detail, "could not start")) << detail;
  EXPECT_EQ(running("nx-2"), 0u);
}

// Rank 0's node finds the round's store port held by another process: it
// starts no worker and tells the leader (re-sent while the round stands), which moves the
// round to another port; it is no worker failure and no ack.
TEST_F(JobSupervisorTest, RankZeroWhoseStorePortIsTakenStartsNothingAndReportsIt) {
  std::vector<std::uint16_t> asked;
  port_in_use_ = [&](std::uint16_t port) {
    asked.push_back(port);
    return true;
  };
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  EXPECT_FALSE(supervisor_->on_round(now(), start("port-1", 1, 1, kDumpEnv)));
  EXPECT_EQ(asked, std::vector<std::uint16_t>{29500});
  EXPECT_FALSE(acked("port-1", 1));
  EXPECT_TRUE(reports(ReportKind::kWorkerFailed).empty());
  ASSERT_EQ(reports(ReportKind::kStorePortBusy).size(), 1u);
  const Report busy = reports(ReportKind::kStorePortBusy)[0];
  EXPECT_EQ(busy.port, std::uint16_t{29500});
  EXPECT_EQ(busy.round, 1u);
  EXPECT_TRUE(contains(busy.detail, "holds TCP port 29500"));
  supervisor_->process(now());
  EXPECT_TRUE(supervisor_->workers().empty());
  supervisor_->process(now() + JobSupervisor::kReportResend + 10ms);
  EXPECT_EQ(reports(ReportKind::kStorePortBusy).size(), 2u);
}

TEST_F(JobSupervisorTest, OnlyTheNodeOfRankZeroChecksTheStorePort) {
  bool asked = false;
  port_in_use_ = [&](std::uint16_t) {
    asked = true;
    return true;
  };
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  RoundStart s = start("port-2", 1, 1, kDumpEnv);
  s.round.ranks = {RankAssignment{"other", 1, 1, 0}, RankAssignment{kSelf, 1, 1, 1}};
  EXPECT_TRUE(supervisor_->on_round(now(), s));
  EXPECT_FALSE(asked);
  EXPECT_TRUE(reports(ReportKind::kStorePortBusy).empty());
  EXPECT_EQ(wait_env("port-2", 1, 1)["RANK"], "1");
}

TEST_F(JobSupervisorTest, ARoundAskingForMoreSlotsThanThePlanHasIsAWorkerFailure) {
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  EXPECT_FALSE(supervisor_->on_round(now(), start("big-1", 1, 3, kDumpEnv)));
  ASSERT_EQ(reports(ReportKind::kWorkerFailed).size(), 1u);
  const std::string detail = reports(ReportKind::kWorkerFailed)[0].detail;
  EXPECT_TRUE(contains(detail, "has 2 slots, not 3")) << detail;
  EXPECT_FALSE(acked("big-1", 1));
  supervisor_->process(now());
  EXPECT_TRUE(supervisor_->workers().empty());
  supervisor_->process(now() + JobSupervisor::kReportResend + 10ms);
  EXPECT_EQ(reports(ReportKind::kWorkerFailed).size(), 2u);
}

// --- 8. Logs and owners ---------------------------------------------------------------------

TEST_F(JobSupervisorTest, TheRankLogHoldsTheWorkersOutputAndTheOwnerIsKnown) {
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  RoundStart s = start("log-1", 1, 2, "echo \"hello from rank $RANK\"; echo oops >&2; exit 0");
  s.round.ranks = {RankAssignment{kSelf, 1, 2, 10}};
  EXPECT_TRUE(supervisor_->on_round(now(), s));
  ASSERT_TRUE(pump_until([&] { return !reports(ReportKind::kWorkersDone).empty(); }));
  EXPECT_EQ(supervisor_->logs().base(), config_.node.state_dir + "/logs");
  for (std::uint32_t rank : {10u, 11u}) {
    const std::string path = supervisor_->logs().rank_path("log-1", 1, rank);
    EXPECT_EQ(path,
              config_.node.state_dir + "/logs/log-1/round-1/rank-" + std::to_string(rank) + ".log");
    const std::string log = read_file(path);
    EXPECT_TRUE(contains(log, "hello from rank " + std::to_string(rank) + "\n")) << log;
    EXPECT_TRUE(contains(log, "oops\n")) << log;
    EXPECT_TRUE(contains(log, "[elasticd ")) << log;
    EXPECT_TRUE(contains(log, "exited with status 0")) << log;
  }
  const std::vector<WorkerLogFile> files = supervisor_->logs().files("log-1");
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0].round, 1u);
  EXPECT_EQ(files[0].rank, 10u);
  EXPECT_EQ(files[1].rank, 11u);
  EXPECT_GT(files[1].size, 0u);
  EXPECT_EQ(supervisor_->job_owner("log-1"), ::getuid());
  EXPECT_EQ(supervisor_->job_owner("no-such-job"), std::nullopt);
}

TEST_F(JobSupervisorTest, SpawnerLogDirOverridesTheStateDir) {
  config_.spawner.log_dir = dir_ / "worker-logs";
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  EXPECT_TRUE(supervisor_->on_round(now(), start("log-2", 1, 1, "echo here")));
  ASSERT_TRUE(pump_until([&] { return !reports(ReportKind::kWorkersDone).empty(); }));
  EXPECT_EQ(supervisor_->logs().base(), dir_ / "worker-logs");
  EXPECT_EQ(supervisor_->logs().rank_path("log-2", 1, 0),
            dir_ / "worker-logs/log-2/round-1/rank-0.log");
  EXPECT_TRUE(contains(read_file(supervisor_->logs().rank_path("log-2", 1, 0)), "here\n"));
  // The owner outlives the job's workers (logs stay readable after the job ended).
  supervisor_->stop_job(now(), "log-2", StopMode::kKill, "job succeeded");
  supervisor_->process(now());
  EXPECT_EQ(supervisor_->job_owner("log-2"), ::getuid());
}

// spawner.log_root (shared storage) beats spawner.log_dir for the workers' logs.
TEST_F(JobSupervisorTest, SpawnerLogRootWinsOverLogDir) {
  config_.spawner.log_dir = dir_ / "worker-logs";
  config_.spawner.log_root = dir_ / "shared-logs";
  open(cpu_plan(1));
  ASSERT_TRUE(supervisor_);
  EXPECT_TRUE(supervisor_->on_round(now(), start("root-1", 4, 1, "echo shared")));
  ASSERT_TRUE(pump_until([&] { return !reports(ReportKind::kWorkersDone).empty(); }));
  EXPECT_EQ(supervisor_->logs().base(), dir_ / "shared-logs");
  EXPECT_TRUE(contains(read_file(dir_ / "shared-logs/root-1/round-4/rank-0.log"), "shared\n"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "worker-logs/root-1"));
}

// Every round keeps its own file (a crashed round's output survives the restart), and at most
// spawner.log_rounds_kept rounds of a job stay: the oldest go when a new round starts.
TEST_F(JobSupervisorTest, EachRoundHasItsOwnFileAndOnlyTheNewestRoundsAreKept) {
  config_.spawner.log_rounds_kept = 2;
  open(cpu_plan(1));
  ASSERT_TRUE(supervisor_);
  for (std::uint64_t round = 1; round <= 3; ++round) {
    (void)supervisor_->on_round(
        now(), start("keep-1", round, 1, "echo \"round $ELASTIC_ROUND\"; exec sleep 1000"));
    ASSERT_TRUE(pump_until([&] { return acked("keep-1", round); }, 10s)) << round;
    const std::string path = supervisor_->logs().rank_path("keep-1", round, 0);
    ASSERT_TRUE(pump_until([&] {
      return contains(read_file(path), "round " + std::to_string(round));
    })) << path;
  }
  const std::string job_dir = config_.node.state_dir + "/logs/keep-1";
  EXPECT_FALSE(std::filesystem::exists(job_dir + "/round-1"));
  EXPECT_TRUE(contains(read_file(job_dir + "/round-2/rank-0.log"), "round 2\n"));
  EXPECT_TRUE(contains(read_file(job_dir + "/round-3/rank-0.log"), "round 3\n"));
  // Round 2's file also tells how its worker ended (killed for round 3).
  EXPECT_TRUE(contains(read_file(job_dir + "/round-2/rank-0.log"), "killed by signal 9"));
  std::vector<std::uint64_t> rounds;
  for (const WorkerLogFile& file : supervisor_->logs().files("keep-1"))
    rounds.push_back(file.round);
  EXPECT_EQ(rounds, (std::vector<std::uint64_t>{2, 3}));
  EXPECT_EQ(supervisor_->logs().files("keep-1", 3).size(), 1u);
}

// The owner is written beside the logs, so a restarted daemon (a new supervisor, nothing in
// memory) still knows whose logs they are; an owner file the daemon did not write is ignored.
TEST_F(JobSupervisorTest, TheOwnerOfALogOutlivesTheDaemon) {
  open(cpu_plan(1));
  ASSERT_TRUE(supervisor_);
  RoundStart s = start("own-1", 1, 1, "echo mine");
  EXPECT_TRUE(supervisor_->on_round(now(), s));
  ASSERT_TRUE(pump_until([&] { return !reports(ReportKind::kWorkersDone).empty(); }));
  supervisor_->shutdown(100ms);
  open(cpu_plan(1));  // the daemon restarted
  ASSERT_TRUE(supervisor_);
  EXPECT_EQ(supervisor_->job_owner("own-1"), ::getuid());
  const std::string owner_file = config_.node.state_dir + "/logs/own-1/owner";
  EXPECT_EQ(read_file(owner_file), std::to_string(::getuid()) + "\n");
  EXPECT_EQ(supervisor_->job_owner("../own-1"), std::nullopt);
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(owner_file.c_str(), 65534, 65534), 0);
    EXPECT_EQ(supervisor_->job_owner("own-1"), std::nullopt) << "a file the daemon did not write";
  }
}

}  // namespace
}  // namespace elastic::node

// --- Incidents and progress ---------------------------------------------------------------

namespace elastic::node {
namespace {

TEST_F(JobSupervisorTest, TheLastWorkerOfAStoppedRoundReportsWorkersStoppedOnce) {
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  EXPECT_TRUE(supervisor_->on_round(now(), start("st-1", 1, 2, "exec sleep 1000")));
  ASSERT_EQ(running("st-1"), 2u);
  EXPECT_TRUE(reports(ReportKind::kWorkersStopped).empty());
  // A new round after a lost member: both old workers are killed; one report when both are gone.
  supervisor_->on_round(now(), start("st-1", 2, 2, "exec sleep 1000", RoundReason::kMemberLost));
  ASSERT_TRUE(pump_until([&] { return acked("st-1", 2); }));
  ASSERT_EQ(reports(ReportKind::kWorkersStopped).size(), 1u);
  EXPECT_EQ(reports(ReportKind::kWorkersStopped)[0],
            round_report(ReportKind::kWorkersStopped, "st-1", 1));
  // Stopping the job reports round 2 once its workers are reaped.
  supervisor_->stop_job(now(), "st-1", StopMode::kKill, "test");
  ASSERT_TRUE(pump_until([&] { return reports(ReportKind::kWorkersStopped).size() == 2; }));
  EXPECT_EQ(reports(ReportKind::kWorkersStopped)[1],
            round_report(ReportKind::kWorkersStopped, "st-1", 2));
  EXPECT_TRUE(pump_until([&] { return supervisor_->workers().empty(); }));
  EXPECT_EQ(reports(ReportKind::kWorkersStopped).size(), 2u);
}

// The exit time is the injected clock's wall time (core/clock.h), not the system's.
TEST_F(JobSupervisorTest, AFailedWorkerReportCarriesItsExitTime) {
  open(cpu_plan(1));
  ASSERT_TRUE(supervisor_);
  supervisor_->on_round(now(), start("f-1", 1, 1, "exit 3"));
  ASSERT_TRUE(pump_until([&] { return !reports(ReportKind::kWorkerFailed).empty(); }));
  const Report failed = reports(ReportKind::kWorkerFailed)[0];
  EXPECT_EQ(failed.at_ms, std::optional<std::int64_t>(kWallMs));
  // The round's only worker is gone: the stop is reported too (the leader matches it later).
  ASSERT_TRUE(pump_until([&] { return !reports(ReportKind::kWorkersStopped).empty(); }));
}

TEST_F(JobSupervisorTest, ProgressIsCheckedAndTheNewestCheckpointKept) {
  open(cpu_plan(1));
  ASSERT_TRUE(supervisor_);
  const auto uid = static_cast<std::uint32_t>(::getuid());
  auto refused =
      supervisor_->on_progress(now(), uid, R"({"job":"p-1","round":1,"event":"step","step":1})");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().message, "Job p-1 runs no workers on node me.");
  supervisor_->on_round(now(), start("p-1", 1, 1, "exec sleep 1000"));
  EXPECT_TRUE(supervisor_->checkpoints().empty()) << "no progress and no LATEST yet";

  ASSERT_OK(supervisor_->on_progress(
      now(), uid,
      R"({"verb":"progress","job":"p-1","round":1,"rank":0,"event":"step","step":12,)"
      R"("resumed_from":10,"first":true,"samples":384,"loss":1.25})"));
  ASSERT_EQ(reports(ReportKind::kProgress).size(), 1u)
      << "the first step goes to the leader at once";
  EXPECT_EQ(reports(ReportKind::kProgress)[0].job, "p-1");
  Report step = round_report(ReportKind::kProgress, "p-1", 1);
  step.rank = 0;
  step.event = "step";
  step.step = 12;
  step.resumed_from = 10;
  step.samples = 384;
  step.loss = 1.25;
  EXPECT_EQ(reports(ReportKind::kProgress)[0], step);
  // Another user (root may report for anyone), an old round, hostile or incomplete bodies.
  auto other = supervisor_->on_progress(now(), uid + 1,
                                        R"({"job":"p-1","round":1,"event":"step","step":1})");
  ASSERT_FALSE(other.ok());
  if (uid != 0) {
    EXPECT_EQ(other.error().message, "Only the owner of job p-1 (uid " + std::to_string(uid) +
                                         ") or root may report its progress, not uid " +
                                         std::to_string(uid + 1) + ".");
  }
  auto old =
      supervisor_->on_progress(now(), uid, R"({"job":"p-1","round":0,"event":"step","step":1})");
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(old.error().message, "Round 0 of job p-1 is over; node me runs round 1.");
  for (const char* bad : {"", "[]", "{\"job\":1}", R"({"job":"p-1"})",
                          R"({"job":"p-1","round":1,"event":"x","step":1})",
                          R"({"job":"p-1","round":1,"event":"step","step":-1})",
                          R"({"job":"p-1","round":1,"event":"step","step":"1"})",
                          R"({"job":"p-1","round":1,"event":"step","step":1,"samples":-3})",
                          R"({"job":"p-1","round":1,"event":"step","step":1,"samples":1.5})",
                          R"({"job":"p-1","round":1,"event":"step","step":1,"loss":"x"})"}) {
    EXPECT_FALSE(supervisor_->on_progress(now(), uid, bad).ok()) << bad;
  }
  EXPECT_EQ(supervisor_->on_progress(
                    now(), uid, R"({"job":"p-1","round":1,"event":"step","step":1,"samples":"x"})")
                .error()
                .message,
            "The progress request for job p-1 has a \"samples\" that is not a whole number >= 0 "
            "(samples trained on so far).");

  // Without a checkpoint report, LATEST in the job's checkpoint dir is read (step and mtime).
  const std::string job_dir = config_.checkpoint.root + "/p-1";
  std::filesystem::create_directories(job_dir);
  std::ofstream(job_dir + "/LATEST") << "step-000000120\n";
  auto found = supervisor_->checkpoints();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].job, "p-1");
  EXPECT_EQ(found[0].step, 120);
  struct stat st {};
  ASSERT_EQ(::stat((job_dir + "/LATEST").c_str(), &st), 0);
  EXPECT_EQ(found[0].at_ms, st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1'000'000);
  // A LATEST that is not ours to trust (a FIFO, a symlink, garbage) is ignored, never blocks.
  std::filesystem::remove(job_dir + "/LATEST");
  ASSERT_EQ(::mkfifo((job_dir + "/LATEST").c_str(), 0600), 0);
  EXPECT_TRUE(supervisor_->checkpoints().empty());
  std::filesystem::remove(job_dir + "/LATEST");
  std::filesystem::create_symlink("/etc/hostname", job_dir + "/LATEST");
  EXPECT_TRUE(supervisor_->checkpoints().empty());
  std::filesystem::remove(job_dir + "/LATEST");
  std::ofstream(job_dir + "/LATEST") << "garbage";
  EXPECT_TRUE(supervisor_->checkpoints().empty());

  // A checkpoint report wins.
  ASSERT_OK(supervisor_->on_progress(now(), uid,
                                     R"({"job":"p-1","round":1,"event":"checkpoint","step":130})"));
  found = supervisor_->checkpoints();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].step, 130);
  EXPECT_GT(found[0].at_ms, 0);
  const auto counts = supervisor_->worker_state_counts();
  EXPECT_EQ(counts.at("running"), 1);
  EXPECT_EQ(counts.at("stopping"), 0);
  // The job gone from this node: no checkpoint row.
  supervisor_->stop_job(now(), "p-1", StopMode::kKill, "test");
  ASSERT_TRUE(pump_until([&] { return supervisor_->workers().empty(); }));
  EXPECT_TRUE(supervisor_->checkpoints().empty());
}

// A worker reporting far more often than the leader needs (every step, every rank) is
// coalesced: the first step of a round at once, then one report per job and event kind per
// 100 ms, always the newest; what is held goes out when its interval ends or the round changes.
TEST_F(JobSupervisorTest, ProgressReportsAreCoalescedToOnePerIntervalAndKind) {
  open(cpu_plan(1));
  ASSERT_TRUE(supervisor_);
  const auto uid = static_cast<std::uint32_t>(::getuid());
  const TimePoint t0 = now();
  supervisor_->on_round(t0, start("c-1", 1, 1, "exec sleep 1000"));
  auto report = [&](TimePoint at, const std::string& event, int step) {
    ASSERT_OK(supervisor_->on_progress(
        at, uid,
        json{{"job", "c-1"}, {"round", 1}, {"event", event}, {"step", step}, {"resumed_from", -1}}
            .dump()));
  };
  auto steps_sent = [&](const std::string& event) {
    std::vector<int> out;
    for (const Report& r : reports(ReportKind::kProgress, "c-1")) {
      if (r.event == event) out.push_back(static_cast<int>(r.step));
    }
    return out;
  };
  // 1,000 step reports within 50 ms: the first goes, the rest are held, newest wins.
  for (int step = 1; step <= 1000; ++step)
    report(t0 + std::chrono::microseconds(50 * step), "step", step);
  EXPECT_EQ(steps_sent("step"), std::vector<int>{1});
  // A checkpoint is another kind: not held behind the steps.
  report(t0 + 60ms, "checkpoint", 900);
  EXPECT_EQ(steps_sent("checkpoint"), std::vector<int>{900});
  EXPECT_EQ(supervisor_->next_deadline(),
            t0 + std::chrono::microseconds(50) + JobSupervisor::kProgressInterval)
      << "the held step is due when its interval ends";
  supervisor_->process(t0 + 99ms);
  EXPECT_EQ(steps_sent("step"), std::vector<int>{1}) << "inside the interval nothing more goes";
  supervisor_->process(t0 + 101ms);
  EXPECT_EQ(steps_sent("step"), (std::vector<int>{1, 1000})) << "then the newest held one";
  EXPECT_EQ(supervisor_->progress_forwarded(), 3u);
  EXPECT_EQ(supervisor_->progress_coalesced(), 998u);
  // A report after the interval goes at once; one soon after it is held until the round
  // changes, and the new round's first step is not held behind the old round's.
  report(t0 + 250ms, "step", 1001);
  report(t0 + 260ms, "step", 1002);
  EXPECT_EQ(steps_sent("step"), (std::vector<int>{1, 1000, 1001}));
  RoundStart second = start("c-1", 2, 1, "exec sleep 1000", RoundReason::kWorkerFailed);
  supervisor_->on_round(t0 + 270ms, second);
  EXPECT_EQ(steps_sent("step"), (std::vector<int>{1, 1000, 1001, 1002}))
      << "the old round's newest step is sent before the round changes";
  ASSERT_TRUE(pump_until([&] {
    const auto now_rows = rows("c-1");
    return std::any_of(now_rows.begin(), now_rows.end(),
                       [](const WorkerRow& w) { return w.round == 2 && w.state == "running"; });
  }));
  ASSERT_OK(supervisor_->on_progress(
      t0 + 275ms, uid, R"({"job":"c-1","round":2,"event":"step","step":1003,"resumed_from":900})"));
  EXPECT_EQ(steps_sent("step"), (std::vector<int>{1, 1000, 1001, 1002, 1003}));
  EXPECT_EQ(reports(ReportKind::kProgress, "c-1").back().round, 2u);
}

}  // namespace
}  // namespace elastic::node

// --- Hang detection and the Python module's directory -------------------------------------

namespace elastic::node {
namespace {

// A Python worker that reported a step and then went silent for hang_timeout: the round fails
// like a crash (worker_failed with the reason), and the worker gets SIGABRT, so the
// faulthandler the script enabled prints its stack into the log. A checkpoint report after the
// first step counts as a sign of life; nothing before the first step does.
TEST_F(JobSupervisorTest, AWorkerSilentForTheHangTimeoutIsAbortedAndReportedAsFailed) {
  if (::access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "/usr/bin/python3 is missing";
  open(cpu_plan(1));
  ASSERT_TRUE(supervisor_);
  const auto uid = static_cast<std::uint32_t>(::getuid());
  RoundStart s = start("hang-1", 1, 1, "");
  s.spec.command = {"/usr/bin/python3", "-c",
                    "import faulthandler, os, time\n"
                    "faulthandler.enable()\n"
                    "open(os.environ['OUT'] + '/ready.tmp', 'w').close()\n"
                    "os.rename(os.environ['OUT'] + '/ready.tmp', os.environ['OUT'] + '/ready')\n"
                    "def stuck_in_a_collective():\n"
                    "    time.sleep(1000)\n"
                    "stuck_in_a_collective()\n"};
  s.spec.hang_timeout = 5s;
  const TimePoint t0 = now();
  ASSERT_TRUE(supervisor_->on_round(t0, s));
  ASSERT_TRUE(pump_until([&] { return exists("ready"); }));
  EXPECT_GT(supervisor_->next_deadline(), t0 + 1h) << "no step yet: not watched";
  supervisor_->process(t0 + 1h);
  EXPECT_TRUE(reports(ReportKind::kWorkerFailed).empty())
      << "a worker that never reported is never hung";

  const auto report = [&](TimePoint at, const std::string& event, int step) {
    ASSERT_OK(supervisor_->on_progress(
        at, uid, json{{"job", "hang-1"}, {"round", 1}, {"event", event}, {"step", step}}.dump()));
  };
  const TimePoint t1 = t0 + 2h;
  report(t1, "step", 7);
  report(t1 + 3s, "checkpoint", 7);
  EXPECT_EQ(supervisor_->next_deadline(), t1 + 8s) << "the checkpoint restarted the timer";
  supervisor_->process(t1 + 8s - 1ms);
  EXPECT_TRUE(reports(ReportKind::kWorkerFailed).empty());
  supervisor_->process(t1 + 8s);
  ASSERT_EQ(reports(ReportKind::kWorkerFailed).size(), 1u);
  const Report failed = reports(ReportKind::kWorkerFailed)[0];
  EXPECT_EQ(failed.round, 1u);
  EXPECT_EQ(failed.rank, 0u);
  EXPECT_EQ(failed.detail,
            "no progress report for 5s (hang_timeout) from rank 0 on node me; the last step "
            "reported was 7");
  // SIGABRT: the faulthandler's dump is in the rank's log, then Python dies of the signal.
  ASSERT_TRUE(pump_until([&] { return running("hang-1") == 0; }));
  const std::string log = read_file(supervisor_->logs().rank_path("hang-1", 1, 0));
  EXPECT_TRUE(contains(log, "Fatal Python error: Aborted")) << log;
  EXPECT_TRUE(contains(log, "in stuck_in_a_collective")) << log;
  EXPECT_TRUE(contains(log, "no progress report for 5s (hang_timeout)")) << log;
  EXPECT_TRUE(contains(log, "killed by signal 6 (SIGABRT)")) << log;
  // Re-sent like any failure while the round stands.
  supervisor_->process(t1 + 8s + JobSupervisor::kReportResend);
  ASSERT_EQ(reports(ReportKind::kWorkerFailed).size(), 2u);
  EXPECT_EQ(reports(ReportKind::kWorkerFailed)[1], failed);
}

// A worker that ignores SIGABRT is SIGKILLed after kHangAbortGrace; the next round (a kill
// round) does not cut that grace short, and its workers start once the hung one is gone.
TEST_F(JobSupervisorTest, AHungWorkerIgnoringAbortIsKilledAfterTheGrace) {
  open(cpu_plan(1));
  ASSERT_TRUE(supervisor_);
  const auto uid = static_cast<std::uint32_t>(::getuid());
  const std::string script =
      "trap '' ABRT; echo $$ > \"$OUT/pid.tmp\"; mv \"$OUT/pid.tmp\" \"$OUT/pid-$ELASTIC_ROUND\"; "
      "exec sleep 1000";
  RoundStart s = start("deaf-1", 1, 1, script);
  s.spec.hang_timeout = 5s;
  const TimePoint t0 = now();
  ASSERT_TRUE(supervisor_->on_round(t0, s));
  ASSERT_TRUE(pump_until([&] { return exists("pid-1"); }));
  const int pid = std::stoi(read_file(out_ + "/pid-1"));
  ASSERT_OK(
      supervisor_->on_progress(t0, uid, R"({"job":"deaf-1","round":1,"event":"step","step":1})"));
  supervisor_->process(t0 + 5s);
  ASSERT_EQ(reports(ReportKind::kWorkerFailed).size(), 1u);
  // The leader's next round asks for a kill at once: the hung worker keeps its grace.
  RoundStart next = start("deaf-1", 2, 1, script, RoundReason::kWorkerFailed);
  next.spec.hang_timeout = 5s;
  EXPECT_FALSE(supervisor_->on_round(t0 + 5s + 10ms, next));
  EXPECT_FALSE(pump_until([&] { return !alive(pid); }, 300ms)) << "SIGKILLed before the grace";
  EXPECT_EQ(rows("deaf-1").size(), 1u) << "round 2 waits for the hung worker";
  supervisor_->process(t0 + 5s + JobSupervisor::kHangAbortGrace);
  ASSERT_TRUE(pump_until([&] { return exists("pid-2"); }));
  EXPECT_FALSE(alive(pid));
  EXPECT_TRUE(
      contains(read_file(supervisor_->logs().rank_path("deaf-1", 1, 0)), "killed by signal 9"));
  EXPECT_TRUE(acked("deaf-1", 2));
}

// hang_timeout 0 (the default) watches nothing; a node one of whose workers already exited 0 is
// finishing, not hung; a new round is unwatched until its own first step.
TEST_F(JobSupervisorTest, HangDetectionIsOffByDefaultPerRoundAndNotForAFinishingNode) {
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  const auto uid = static_cast<std::uint32_t>(::getuid());
  const auto step = [&](TimePoint at, const std::string& job, int round) {
    ASSERT_OK(supervisor_->on_progress(
        at, uid, json{{"job", job}, {"round", round}, {"event", "step"}, {"step", 1}}.dump()));
  };
  const TimePoint t0 = now();
  ASSERT_TRUE(supervisor_->on_round(t0, start("off-1", 1, 1, "exec sleep 1000")));
  step(t0, "off-1", 1);
  supervisor_->process(t0 + 24h);
  EXPECT_TRUE(reports(ReportKind::kWorkerFailed).empty());
  supervisor_->stop_job(t0, "off-1", StopMode::kKill, "test");
  ASSERT_TRUE(pump_until([&] { return supervisor_->workers().empty(); }));

  // Rank 0 exits 0 at once, rank 1 runs on without reporting.
  RoundStart two =
      start("fin-1", 1, 2, "if [ \"$LOCAL_RANK\" = 0 ]; then exit 0; fi; exec sleep 1000");
  two.spec.hang_timeout = 5s;
  ASSERT_TRUE(supervisor_->on_round(t0, two));
  step(t0, "fin-1", 1);
  ASSERT_TRUE(pump_until([&] { return running("fin-1") == 1; }));
  supervisor_->process(t0 + 1h);
  EXPECT_TRUE(reports(ReportKind::kWorkerFailed).empty());

  // A new round: the old round's step does not arm it; its own first step does.
  RoundStart again = start("fin-1", 2, 1, "exec sleep 1000", RoundReason::kWorkerFailed);
  again.spec.hang_timeout = 5s;
  supervisor_->on_round(t0 + 1h, again);
  ASSERT_TRUE(pump_until([&] { return acked("fin-1", 2); }));
  supervisor_->process(t0 + 3h);
  EXPECT_TRUE(reports(ReportKind::kWorkerFailed).empty());
  step(t0 + 3h, "fin-1", 2);
  supervisor_->process(t0 + 3h + 5s);
  EXPECT_EQ(reports(ReportKind::kWorkerFailed).size(), 1u);
}

// spawner.python_dir goes to the end of the workers' PYTHONPATH, after the user's own entries
// (exported or the job's env); "" adds nothing.
TEST_F(JobSupervisorTest, ThePythonDirIsAppendedToTheWorkersPythonPath) {
  config_.spawner.python_dir = "/opt/elastic/python";
  open(cpu_plan(2));
  ASSERT_TRUE(supervisor_);
  EXPECT_TRUE(supervisor_->on_round(now(), start("pp-1", 1, 1, kDumpEnv)));
  EXPECT_EQ(wait_env("pp-1", 1, 0)["PYTHONPATH"], "/opt/elastic/python");
  RoundStart own = start("pp-2", 1, 1, kDumpEnv);
  own.spec.exported_env["PYTHONPATH"] = "/home/alice/lib:/home/alice/venv";
  EXPECT_TRUE(supervisor_->on_round(now(), own));
  EXPECT_EQ(wait_env("pp-2", 1, 0)["PYTHONPATH"],
            "/home/alice/lib:/home/alice/venv:/opt/elastic/python");
  RoundStart env = start("pp-3", 1, 1, kDumpEnv);
  env.spec.env["PYTHONPATH"] = "/job/{job_id}";
  supervisor_->shutdown(100ms);
  supervisor_.reset();
  config_.spawner.python_dir = "";
  open(cpu_plan(2));
  EXPECT_TRUE(supervisor_->on_round(now(), env));
  EXPECT_EQ(wait_env("pp-3", 1, 0)["PYTHONPATH"], "/job/pp-3");
  EXPECT_TRUE(supervisor_->on_round(now(), start("pp-4", 1, 1, kDumpEnv)));
  EXPECT_FALSE(wait_env("pp-4", 1, 0).contains("PYTHONPATH"));
}

// "auto": <prefix>/share/elastic/python beside <prefix>/sbin/elasticd, only when it holds the
// module; a path is kept, "" stays off.
TEST(ResolvePythonDir, AutoFindsTheInstalledModuleNextToTheBinary) {
  TempDir dir;
  const std::string exe = dir.path() + "/usr/local/sbin/elasticd";
  EXPECT_EQ(resolve_python_dir("auto", exe), "") << "nothing installed";
  std::filesystem::create_directories(dir.path() + "/usr/local/share/elastic/python");
  EXPECT_EQ(resolve_python_dir("auto", exe), "") << "a directory without the module";
  std::ofstream(dir.path() + "/usr/local/share/elastic/python/elastic_worker.py") << "\n";
  EXPECT_EQ(resolve_python_dir("auto", exe), dir.path() + "/usr/local/share/elastic/python");
  EXPECT_EQ(resolve_python_dir("auto", ""), "");
  EXPECT_EQ(resolve_python_dir("", exe), "");
  EXPECT_EQ(resolve_python_dir("/srv/py", exe), "/srv/py");
}

}  // namespace
}  // namespace elastic::node
