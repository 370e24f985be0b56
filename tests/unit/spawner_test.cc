// The spawner against real processes, real pipes and real files: exit statuses, logs and their
// rotation, exec/chdir/binding errors, TERM -> KILL escalation, group kills, PDEATHSIG, leftover
// records, run_as and cgroups. No fixed sleeps: waits poll the spawner's fd with a deadline.
#include "daemon/spawner/spawner.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <regex>
#include <sstream>
#include <thread>

#include "tests/support/process.h"
#include "tests/support/result_assertions.h"
#include "tests/support/temp_dir.h"

namespace elastic::spawner {
namespace {

using namespace std::chrono_literals;
using testing::read_file;
using testing::TempDir;
using testing::wait_until;

TimePoint now() { return TimePoint(std::chrono::steady_clock::now().time_since_epoch()); }

SpawnerConfig config_in(const TempDir& dir) {
  SpawnerConfig config;
  config.stop_grace = 5s;
  config.log_max_bytes = 1 << 20;
  config.log_keep = 2;
  config.state_dir = dir / "state";
  // Raw output, so the cases below compare lines as the workers wrote them; the stamps have
  // their own case (EachLineOfOutputIsStampedWithTheTimeItWasRead).
  config.log_timestamps = false;
  return config;
}

WorkerSpec shell(const TempDir& dir, const std::string& script) {
  WorkerSpec spec;
  spec.label = "job-1 rank 0";
  spec.argv = {"/bin/sh", "-c", script};
  spec.env = {{"PATH", "/usr/bin:/bin"}};
  spec.working_dir = dir.path();
  spec.log_path = dir / "logs/job-1/rank-0.log";
  return spec;
}

std::unique_ptr<Spawner> open_spawner(const SpawnerConfig& config) {
  auto spawner = Spawner::open(config);
  if (!spawner.ok()) ADD_FAILURE() << spawner.error().message;
  return spawner.ok() ? std::move(spawner).value() : nullptr;
}

// Blocks on the spawner's fd (and its next deadline) until `done` holds or `timeout` passes;
// every exit reported meanwhile lands in *exits.
bool pump_until(Spawner& spawner, const std::function<bool()>& done,
                std::chrono::milliseconds timeout, std::vector<WorkerExit>* exits) {
  const TimePoint deadline = now() + timeout;
  while (true) {
    spawner.process(now(), exits);
    if (done()) return true;
    const TimePoint t = now();
    if (t >= deadline) return false;
    const TimePoint wake = std::min(deadline, spawner.next_deadline());
    const auto ms = std::clamp<std::int64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(wake - t).count() + 1, 0, 1000);
    pollfd fd{spawner.fd(), POLLIN, 0};
    ::poll(&fd, 1, static_cast<int>(ms));
  }
}

std::optional<WorkerExit> wait_exit(Spawner& spawner, WorkerId id,
                                    std::chrono::milliseconds timeout = 10s) {
  std::vector<WorkerExit> exits;
  auto found = [&] {
    return std::any_of(exits.begin(), exits.end(), [&](const auto& e) { return e.id == id; });
  };
  if (!pump_until(spawner, found, timeout, &exits)) return std::nullopt;
  return *std::find_if(exits.begin(), exits.end(), [&](const auto& e) { return e.id == id; });
}

bool wait_for_text(Spawner& spawner, const std::string& path, const std::string& needle) {
  std::vector<WorkerExit> ignored;
  return pump_until(
      spawner, [&] { return read_file(path).find(needle) != std::string::npos; }, 10s, &ignored);
}

// Gone = no such process, or a zombie (reaped here when it is ours: this test process may be
// a subreaper after an earlier test opened a Spawner).
bool process_gone(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, WNOHANG);
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z';
}

pid_t read_pid_file(const std::string& path) {
  pid_t pid = 0;
  wait_until(
      [&] {
        std::istringstream(read_file(path)) >> pid;
        return pid > 0;
      },
      10s);
  return pid;
}

std::string status_field(pid_t pid, const std::string& key) {
  std::istringstream in(read_file("/proc/" + std::to_string(pid) + "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) {
      auto value = line.substr(key.size() + 1);
      value.erase(0, value.find_first_not_of(" \t"));
      return value;
    }
  }
  return "";
}

std::uint64_t start_time_of(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  std::istringstream rest(stat.substr(stat.rfind(')') + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i) rest >> field;
  return std::stoull(field);
}

std::vector<std::string> worker_lines(const std::string& log) {
  std::vector<std::string> out;
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("[elasticd ", 0) != 0) out.push_back(line);
  }
  return out;
}

TEST(SpawnerTest, ExitStatusAndBothStreamsInTheLog) {
  TempDir dir;
  auto spawner = open_spawner(config_in(dir));
  const auto spec = shell(dir, "echo out; echo err >&2; exit 3");
  auto id = spawner->spawn(now(), spec);
  ASSERT_OK(id);
  EXPECT_EQ(spawner->running(), 1u);
  const auto exit = wait_exit(*spawner, *id);
  ASSERT_TRUE(exit);
  EXPECT_FALSE(exit->signaled);
  EXPECT_EQ(exit->status, 3);
  EXPECT_FALSE(exit->stopped);
  EXPECT_EQ(exit->describe(), "exited with status 3");
  EXPECT_EQ(spawner->running(), 0u);
  EXPECT_FALSE(spawner->pid(*id));
  const std::string log = read_file(spec.log_path);
  EXPECT_EQ(worker_lines(log), (std::vector<std::string>{"out", "err"}));
  EXPECT_NE(log.find("job-1 rank 0: started pid " + std::to_string(exit->pid) + " as uid " +
                     std::to_string(::geteuid()) + " in " + dir.path() +
                     ", cpus unbound, mem nodes unbound"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("] pid " + std::to_string(exit->pid) + " exited with status 3\n"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.rfind("[elasticd ", 0), 0u) << "the start line comes first: " << log;
}

TEST(SpawnerTest, MissingCommandIsAnErrorWithTheReason) {
  TempDir dir;
  auto spawner = open_spawner(config_in(dir));
  WorkerSpec spec = shell(dir, "");
  spec.label = "fmnist-1 rank 0";
  spec.argv = {"no-such-cmd", "--flag"};
  auto id = spawner->spawn(now(), spec);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.error().message,
            "cannot start fmnist-1 rank 0: exec of 'no-such-cmd' failed: No such file or "
            "directory.");
  EXPECT_EQ(spawner->running(), 0u);
  EXPECT_NE(read_file(spec.log_path).find(id.error().message), std::string::npos);
  EXPECT_TRUE(std::filesystem::is_empty(dir / "state/workers"));
}

TEST(SpawnerTest, PathSearchFindsTheCommandInTheGivenPath) {
  TempDir dir;
  auto spawner = open_spawner(config_in(dir));
  WorkerSpec spec = shell(dir, "");
  spec.argv = {"true"};
  spec.env = {{"PATH", dir.path() + "/nothing-here::/usr/bin:/bin"}};
  auto id = spawner->spawn(now(), spec);
  ASSERT_OK(id);
  const auto exit = wait_exit(*spawner, *id);
  ASSERT_TRUE(exit);
  EXPECT_EQ(exit->describe(), "exited with status 0");
}

TEST(SpawnerTest, BadWorkingDirectoryIsAnErrorNamingIt) {
  TempDir dir;
  auto spawner = open_spawner(config_in(dir));
  WorkerSpec spec = shell(dir, "exit 0");
  spec.working_dir = dir / "does-not-exist";
  auto id = spawner->spawn(now(), spec);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.error().message, "cannot start job-1 rank 0: changing to the working directory '" +
                                    spec.working_dir + "' failed: No such file or directory.");
}

TEST(SpawnerTest, EnvironmentIsExactlyTheGivenOne) {
  TempDir dir;
  auto spawner = open_spawner(config_in(dir));
  WorkerSpec spec = shell(dir, "");
  spec.argv = {"env"};
  spec.env = {{"PATH", "/usr/bin:/bin"}, {"RANK", "3"}, {"SPACED", "two words"}};
  auto id = spawner->spawn(now(), spec);
  ASSERT_OK(id);
  ASSERT_TRUE(wait_exit(*spawner, *id));
  auto lines = worker_lines(read_file(spec.log_path));
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, (std::vector<std::string>{"PATH=/usr/bin:/bin", "RANK=3", "SPACED=two words"}));
}

TEST(SpawnerTest, StopTerminatesAnObedientWorker) {
  TempDir dir;
  auto spawner = open_spawner(config_in(dir));
  auto id = spawner->spawn(now(), shell(dir, "exec sleep 1000"));
  ASSERT_OK(id);
  const TimePoint stopped_at = now();
  spawner->stop(stopped_at, *id);
  EXPECT_EQ(spawner->next_deadline(), stopped_at + 5s);
  const auto exit = wait_exit(*spawner, *id);
  ASSERT_TRUE(exit);
  EXPECT_TRUE(exit->stopped);
  EXPECT_TRUE(exit->signaled);
  EXPECT_EQ(exit->status, SIGTERM);
  EXPECT_EQ(exit->describe(), "killed by signal 15 (SIGTERM)");
  EXPECT_NE(spawner->next_deadline(), stopped_at + 5s);  // no KILL escalation pending
}

TEST(SpawnerTest, StopEscalatesToKillAfterTheGrace) {
  TempDir dir;
  SpawnerConfig config = config_in(dir);
  config.stop_grace = 300ms;
  auto spawner = open_spawner(config);
  const auto spec = shell(dir, "trap '' TERM; echo ready; while :; do sleep 1; done");
  auto id = spawner->spawn(now(), spec);
  ASSERT_OK(id);
  ASSERT_TRUE(wait_for_text(*spawner, spec.log_path, "ready\n"));
  const TimePoint stopped_at = now();
  spawner->stop(stopped_at, *id);
  spawner->stop(stopped_at + 200ms, *id);  // idempotent: the first deadline stays
  EXPECT_EQ(spawner->next_deadline(), stopped_at + 300ms);
  const auto exit = wait_exit(*spawner, *id);
  ASSERT_TRUE(exit);
  EXPECT_GE(exit->at - stopped_at, 300ms);
  EXPECT_GE(now() - stopped_at, 300ms);
  EXPECT_TRUE(exit->signaled);
  EXPECT_EQ(exit->status, SIGKILL);
  EXPECT_EQ(exit->describe(), "killed by signal 9 (SIGKILL)");
  EXPECT_NE(read_file(spec.log_path).find("killed by signal 9 (SIGKILL) (stopped by the daemon)"),
            std::string::npos);
}

TEST(SpawnerTest, KillEndsTheWorkerAtOnce) {
  TempDir dir;
  auto spawner = open_spawner(config_in(dir));
  auto id = spawner->spawn(now(), shell(dir, "trap '' TERM; exec sleep 1000"));
  ASSERT_OK(id);
  spawner->kill(*id);
  const auto exit = wait_exit(*spawner, *id, 5s);
  ASSERT_TRUE(exit);
  EXPECT_TRUE(exit->stopped);
  EXPECT_EQ(exit->status, SIGKILL);
}

TEST(SpawnerTest, StopAlsoEndsABackgroundChildThatIgnoresTerm) {
  TempDir dir;
  auto spawner = open_spawner(config_in(dir));  // grace 5 s: the group kill must not wait for it
  const std::string pid_file = dir / "child.pid";
  auto id = spawner->spawn(
      now(), shell(dir, "(trap '' TERM; exec sleep 1000) & echo $! > " + pid_file + "; wait"));
  ASSERT_OK(id);
  const pid_t child = read_pid_file(pid_file);
  ASSERT_GT(child, 0);
  const TimePoint stopped_at = now();
  spawner->stop(stopped_at, *id);
  const auto exit = wait_exit(*spawner, *id);
  ASSERT_TRUE(exit);
  EXPECT_EQ(exit->status, SIGTERM);
  EXPECT_LT(now() - stopped_at, 5s);
  EXPECT_TRUE(wait_until([&] { return process_gone(child); }, 5s));
}

TEST(SpawnerTest, ChildrenDoNotOutliveAWorkerThatExits) {
  TempDir dir;
  auto spawner = open_spawner(config_in(dir));
  const std::string pid_file = dir / "child.pid";
  auto id = spawner->spawn(now(), shell(dir, "sleep 1000 & echo $! > " + pid_file));
  ASSERT_OK(id);
  const pid_t child = read_pid_file(pid_file);
  const auto exit = wait_exit(*spawner, *id);
  ASSERT_TRUE(exit);
  EXPECT_EQ(exit->describe(), "exited with status 0");
  // The orphan was adopted by this process (subreaper) and reaped by process().
  std::vector<WorkerExit> ignored;
  EXPECT_TRUE(pump_until(
      *spawner, [&] { return ::kill(child, 0) != 0 && errno == ESRCH; }, 5s, &ignored));
  EXPECT_TRUE(ignored.empty());
}

TEST(SpawnerTest, LogRotationKeepsBoundedFiles) {
  TempDir dir;
  SpawnerConfig config = config_in(dir);
  config.log_max_bytes = 1000;
  config.log_keep = 2;
  auto spawner = open_spawner(config);
  const auto spec = shell(dir, "seq 1 3000");  // about 14 KB
  auto id = spawner->spawn(now(), spec);
  ASSERT_OK(id);
  ASSERT_TRUE(wait_exit(*spawner, *id));
  namespace fs = std::filesystem;
  for (const auto& path : {spec.log_path, spec.log_path + ".1", spec.log_path + ".2"}) {
    ASSERT_TRUE(fs::exists(path)) << path;
    EXPECT_LE(fs::file_size(path), 1000u) << path;
    EXPECT_GT(fs::file_size(path), 0u) << path;
  }
  EXPECT_FALSE(fs::exists(spec.log_path + ".3"));
  // The newest lines are at the end: the last numbers, then the exit line.
  const std::string tail = read_file(spec.log_path + ".1") + read_file(spec.log_path);
  EXPECT_NE(tail.find("\n2999\n3000\n[elasticd "), std::string::npos) << tail;
  EXPECT_NE(tail.find("exited with status 0"), std::string::npos) << tail;
}

TEST(SpawnerTest, LogRotationWithKeepZeroTruncates) {
  TempDir dir;
  SpawnerConfig config = config_in(dir);
  config.log_max_bytes = 500;
  config.log_keep = 0;
  auto spawner = open_spawner(config);
  const auto spec = shell(dir, "seq 1 2000");
  auto id = spawner->spawn(now(), spec);
  ASSERT_OK(id);
  ASSERT_TRUE(wait_exit(*spawner, *id));
  EXPECT_LE(std::filesystem::file_size(spec.log_path), 500u);
  EXPECT_FALSE(std::filesystem::exists(spec.log_path + ".1"));
}

TEST(SpawnerTest, NoteAddsDaemonLinesOnTheirOwnLine) {
  TempDir dir;
  auto spawner = open_spawner(config_in(dir));
  const std::string fifo = dir / "go";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Blocks in the open of the fifo until the test opens it too, after its note.
  const auto spec = shell(dir, "printf 'partial'; read x < " + fifo);
  auto id = spawner->spawn(now(), spec);
  ASSERT_OK(id);
  ASSERT_TRUE(wait_for_text(*spawner, spec.log_path, "partial"));
  spawner->note(*id, "round 2 opened");
  { std::ofstream release(fifo); }
  ASSERT_TRUE(wait_exit(*spawner, *id));
  const std::string log = read_file(spec.log_path);
  EXPECT_NE(log.find("partial\n[elasticd "), std::string::npos) << log;
  EXPECT_NE(log.find("] round 2 opened\n"), std::string::npos) << log;
}

TEST(SpawnerTest, EachLineOfOutputIsStampedWithTheTimeItWasRead) {
  TempDir dir;
  SpawnerConfig config = config_in(dir);
  config.log_timestamps = true;
  auto spawner = open_spawner(config);
  const std::string fifo = dir / "go";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // A line written in two pieces (the second after the test's note), then two whole lines, one
  // of them on stderr.
  const auto spec =
      shell(dir, "printf 'half'; read x < " + fifo + "; echo ' done'; echo out; echo err >&2");
  const auto before = std::chrono::system_clock::now();
  auto id = spawner->spawn(now(), spec);
  ASSERT_OK(id);
  ASSERT_TRUE(wait_for_text(*spawner, spec.log_path, "half"));
  { std::ofstream release(fifo); }
  ASSERT_TRUE(wait_exit(*spawner, *id));
  const auto after = std::chrono::system_clock::now();
  const std::string log = read_file(spec.log_path);
  // The daemon's own lines keep their "[elasticd" start; every worker line is stamped once.
  std::vector<std::string> stamped;
  std::istringstream in(log);
  std::string line;
  const std::regex format(R"(^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z (.*)$)");
  while (std::getline(in, line)) {
    if (line.rfind("[elasticd ", 0) == 0) continue;
    std::smatch match;
    ASSERT_TRUE(std::regex_match(line, match, format)) << line << "\n" << log;
    std::tm tm{};
    std::istringstream(match[1].str()) >> std::get_time(&tm, "%Y-%m-%dT%H:%M:%S");
    const auto stamp = std::chrono::system_clock::from_time_t(::timegm(&tm)) +
                       std::chrono::milliseconds(std::stoi(match[1].str().substr(20)));
    EXPECT_GE(stamp, std::chrono::floor<std::chrono::milliseconds>(before)) << line;
    EXPECT_LE(stamp, after) << line;
    stamped.push_back(match[2]);
  }
  EXPECT_EQ(stamped, (std::vector<std::string>{"half done", "out", "err"})) << log;
}

TEST(SpawnerTest, CpuBindingIsApplied) {
  TempDir dir;
  auto spawner = open_spawner(config_in(dir));
  WorkerSpec spec = shell(dir, "exec sleep 1000");
  spec.cpus = {0};
  auto id = spawner->spawn(now(), spec);
  ASSERT_OK(id);
  EXPECT_EQ(status_field(*spawner->pid(*id), "Cpus_allowed_list"), "0");
  EXPECT_NE(read_file(spec.log_path).find("cpus 0,"), std::string::npos);
  spawner->kill(*id);
  ASSERT_TRUE(wait_exit(*spawner, *id));
}

TEST(SpawnerTest, CpuBindingToAMissingCpuIsAnError) {
  TempDir dir;
  auto spawner = open_spawner(config_in(dir));
  WorkerSpec spec = shell(dir, "exit 0");
  spec.cpus = {4000};
  auto id = spawner->spawn(now(), spec);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.error().message,
            "cannot start job-1 rank 0: binding to cpus 4000 failed: Invalid argument.");
}

TEST(SpawnerTest, MemoryBindingIsAppliedAndABadNodeIsAnError) {
  TempDir dir;
  auto spawner = open_spawner(config_in(dir));
  WorkerSpec spec = shell(dir, "exec sleep 1000");
  spec.mem_nodes = {0};
  auto id = spawner->spawn(now(), spec);
  ASSERT_OK(id);
  const std::string numa_maps =
      read_file("/proc/" + std::to_string(*spawner->pid(*id)) + "/numa_maps");
  if (!numa_maps.empty()) {
    EXPECT_NE(numa_maps.find("bind:0"), std::string::npos) << numa_maps;
  }
  spawner->kill(*id);
  ASSERT_TRUE(wait_exit(*spawner, *id));

  spec.mem_nodes = {999};
  auto bad = spawner->spawn(now(), spec);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message,
            "cannot start job-1 rank 0: binding memory to NUMA nodes 999 failed: Invalid "
            "argument.");
}

TEST(SpawnerTest, WorkerRecordLivesAsLongAsTheWorker) {
  TempDir dir;
  auto spawner = open_spawner(config_in(dir));
  auto id = spawner->spawn(now(), shell(dir, "exec sleep 1000"));
  ASSERT_OK(id);
  const pid_t pid = *spawner->pid(*id);
  const std::string record = dir / ("state/workers/" + std::to_string(pid));
  EXPECT_EQ(read_file(record),
            std::to_string(pid) + " " + std::to_string(start_time_of(pid)) + "\n");
  spawner->stop(now(), *id);
  ASSERT_TRUE(wait_exit(*spawner, *id));
  EXPECT_FALSE(std::filesystem::exists(record));
}

// A forked "daemon": opens a Spawner with `config`, spawns `spec`, publishes the worker's pid,
// then waits to be SIGKILLed. Returns the helper's pid; *worker gets the worker's (0: none came).
pid_t spawn_in_a_daemon(const TempDir& dir, const SpawnerConfig& config, const WorkerSpec& spec,
                        pid_t* worker) {
  const std::string pid_file = dir / "worker.pid";
  const pid_t helper = ::fork();
  if (helper == 0) {
    auto spawner = Spawner::open(config);
    if (!spawner.ok()) ::_exit(2);
    auto id = (*spawner)->spawn(now(), spec);
    if (!id.ok()) ::_exit(3);
    std::ofstream(pid_file + ".tmp") << *(*spawner)->pid(*id) << "\n";
    std::filesystem::rename(pid_file + ".tmp", pid_file);
    while (true) ::pause();
  }
  *worker = helper > 0 ? read_pid_file(pid_file) : 0;
  return helper;
}

// SIGKILLs the "daemon" and reaps it; then its worker must be gone within a deadline.
void expect_the_worker_dies_with_its_daemon(pid_t helper, pid_t worker) {
  EXPECT_FALSE(process_gone(worker));
  ::kill(helper, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(helper, &status, 0), helper);
  EXPECT_TRUE(wait_until([&] { return process_gone(worker); }, 5s))
      << "worker " << worker << " outlived its daemon (PPid " << status_field(worker, "PPid")
      << ", Uid " << status_field(worker, "Uid") << ")";
  if (!process_gone(worker)) ::kill(worker, SIGKILL);
}

TEST(SpawnerTest, WorkersDieWithTheSpawningProcess) {
  TempDir dir;
  SpawnerConfig config;
  config.state_dir = dir / "helper-state";
  pid_t worker = 0;
  const pid_t helper = spawn_in_a_daemon(dir, config, shell(dir, "exec sleep 1000"), &worker);
  ASSERT_GT(helper, 0);
  ASSERT_GT(worker, 0);
  expect_the_worker_dies_with_its_daemon(helper, worker);
}

// The kernel clears PR_SET_PDEATHSIG on every change of euid/egid/fsuid/fsgid: armed before the
// switch to the job's user, it protected only root's workers, and every other user's worker
// trained on as an orphan (PPid 1) after a kill -9 of the daemon.
TEST(SpawnerTest, AWorkerOfAnotherUserDiesWithTheSpawningProcess) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run workers as another user";
  TempDir dir;
  SpawnerConfig config;
  config.state_dir = dir / "helper-state";
  WorkerSpec spec = shell(dir, "exec sleep 1000");
  spec.working_dir = "/";  // the TempDir is 0700 root
  spec.run_as = RunAs{65534, 65534, "nobody"};
  pid_t worker = 0;
  const pid_t helper = spawn_in_a_daemon(dir, config, spec, &worker);
  ASSERT_GT(helper, 0);
  ASSERT_GT(worker, 0);
  EXPECT_EQ(status_field(worker, "Uid").substr(0, 6), "65534\t");
  expect_the_worker_dies_with_its_daemon(helper, worker);
}

TEST(SpawnerTest, OpenEndsLeftoversOfAnEarlierDaemonButNeverAReusedPid) {
  TempDir dir;
  const SpawnerConfig config = config_in(dir);
  std::filesystem::create_directories(dir / "state/workers");
  testing::Process leftover({"/bin/sleep", "1000"}, {}, dir.path(), "leftover");
  testing::Process innocent({"/bin/sleep", "1000"}, {}, dir.path(), "innocent");
  ASSERT_TRUE(wait_until([&] { return status_field(innocent.pid(), "Name") == "sleep"; }, 5s));
  ASSERT_TRUE(wait_until([&] { return status_field(leftover.pid(), "Name") == "sleep"; }, 5s));
  const auto record = [&](pid_t pid) { return dir / ("state/workers/" + std::to_string(pid)); };
  dir.write(
      "state/workers/" + std::to_string(leftover.pid()),
      std::to_string(leftover.pid()) + " " + std::to_string(start_time_of(leftover.pid())) + "\n");
  // Same pid, other start time: a pid that was reused since the record was written.
  dir.write("state/workers/" + std::to_string(innocent.pid()),
            std::to_string(innocent.pid()) + " " +
                std::to_string(start_time_of(innocent.pid()) + 1) + "\n");
  dir.write("state/workers/garbage", "not a record");

  auto spawner = open_spawner(config);
  ASSERT_TRUE(spawner);
  EXPECT_EQ(spawner->leftovers_ended(), 1u);
  const auto status = leftover.wait(5s);
  ASSERT_TRUE(status);
  EXPECT_EQ(status->signal, SIGKILL);
  EXPECT_TRUE(innocent.running());
  EXPECT_FALSE(std::filesystem::exists(record(leftover.pid())));
  EXPECT_FALSE(std::filesystem::exists(record(innocent.pid())));
  EXPECT_TRUE(std::filesystem::is_empty(dir / "state/workers"));
}

TEST(SpawnerTest, ShutdownTermsThenKillsEveryWorker) {
  TempDir dir;
  auto spawner = open_spawner(config_in(dir));
  WorkerSpec obedient = shell(dir, "exec sleep 1000");
  WorkerSpec stubborn = shell(dir, "trap '' TERM; echo ready; while :; do sleep 1; done");
  stubborn.log_path = dir / "logs/job-1/rank-1.log";
  auto a = spawner->spawn(now(), obedient);
  auto b = spawner->spawn(now(), stubborn);
  ASSERT_OK(a);
  ASSERT_OK(b);
  ASSERT_TRUE(wait_for_text(*spawner, stubborn.log_path, "ready\n"));
  std::vector<WorkerExit> exits;
  const TimePoint started = now();
  spawner->shutdown(200ms, &exits);
  EXPECT_GE(now() - started, 200ms);
  EXPECT_EQ(spawner->running(), 0u);
  ASSERT_EQ(exits.size(), 2u);
  std::sort(exits.begin(), exits.end(), [](const auto& x, const auto& y) { return x.id < y.id; });
  EXPECT_EQ(exits[0].status, SIGTERM);
  EXPECT_EQ(exits[1].status, SIGKILL);
  EXPECT_TRUE(std::filesystem::is_empty(dir / "state/workers"));
}

TEST(SpawnerTest, DestructorLeavesNothingRunning) {
  TempDir dir;
  pid_t pid = 0;
  {
    auto spawner = open_spawner(config_in(dir));
    auto id = spawner->spawn(now(), shell(dir, "trap '' TERM; exec sleep 1000"));
    ASSERT_OK(id);
    pid = *spawner->pid(*id);
  }
  EXPECT_TRUE(process_gone(pid));
}

TEST(SpawnerTest, RunsAsTheGivenUserWhenRoot) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  TempDir dir;
  auto spawner = open_spawner(config_in(dir));
  WorkerSpec spec = shell(dir, "id -u; id -g; id -G");
  spec.working_dir = "/";  // the TempDir is 0700 root
  spec.run_as = RunAs{65534, 65534, "nobody"};
  auto id = spawner->spawn(now(), spec);
  ASSERT_OK(id);
  const auto exit = wait_exit(*spawner, *id);
  ASSERT_TRUE(exit);
  EXPECT_EQ(exit->status, 0);
  const auto lines = worker_lines(read_file(spec.log_path));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "65534");
  EXPECT_EQ(lines[1], "65534");
  EXPECT_EQ(lines[2].find('0'), std::string::npos) << "no root group left: " << lines[2];
  EXPECT_NE(read_file(spec.log_path).find("as uid 65534 in /"), std::string::npos);
}

TEST(SpawnerTest, NonRootDaemonCannotRunWorkersAsAnotherUser) {
  TempDir dir;
  const std::string result_file = dir / "result";
  ::chmod(dir.path().c_str(), 0777);
  const pid_t helper = ::fork();
  ASSERT_GE(helper, 0);
  if (helper == 0) {
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(2);
    auto spawner = Spawner::open(SpawnerConfig{});
    if (!spawner.ok()) ::_exit(3);
    WorkerSpec spec = shell(dir, "exit 0");
    spec.log_path = dir / "nonroot.log";
    spec.run_as = RunAs{::geteuid() + 1, ::getegid(), ""};
    auto id = (*spawner)->spawn(now(), spec);
    std::ofstream(result_file) << (id.ok() ? std::string("spawned") : id.error().message);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(helper, &status, 0), helper);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  const std::string message = read_file(result_file);
  EXPECT_NE(message.find("cannot start job-1 rank 0: the daemon runs as uid "), std::string::npos)
      << message;
  EXPECT_NE(message.find("run elasticd as root"), std::string::npos) << message;
}

TEST(SpawnerTest, CgroupRootMustBeAWritableCgroup2Directory) {
  TempDir dir;
  SpawnerConfig config = config_in(dir);
  config.cgroup_root = dir.path();
  auto spawner = Spawner::open(config);
  ASSERT_FALSE(spawner.ok());
  EXPECT_EQ(spawner.error().message, "spawner.cgroup_root '" + dir.path() +
                                         "' is not a writable cgroup v2 directory: it is not on "
                                         "a cgroup2 file system.");
}

// A writable cgroup v2 directory for this test, or "" (the test skips).
std::string make_test_cgroup() {
  for (const char* base : {"/sys/fs/cgroup/unified", "/sys/fs/cgroup"}) {
    struct statfs fs {};
    if (::statfs(base, &fs) != 0 || fs.f_type != 0x63677270) continue;
    const std::string dir =
        std::string(base) + "/elastic-spawner-test-" + std::to_string(::getpid()) + "-" +
        std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
    if (::mkdir(dir.c_str(), 0755) == 0) return dir;
  }
  return "";
}

TEST(SpawnerTest, CgroupKillReachesProcessesThatLeftTheGroup) {
  const std::string root = make_test_cgroup();
  if (root.empty()) GTEST_SKIP() << "no writable cgroup v2 hierarchy";
  if (!std::filesystem::exists(root + "/cgroup.kill")) {
    ::rmdir(root.c_str());
    GTEST_SKIP() << "kernel without cgroup.kill";
  }
  TempDir dir;
  SpawnerConfig config = config_in(dir);
  config.cgroup_root = root;
  {
    auto spawner = open_spawner(config);
    ASSERT_TRUE(spawner);
    const std::string pid_file = dir / "escaped.pid";
    // setsid: the child leaves the worker's process group (and session), so only the cgroup
    // still holds it.
    auto id = spawner->spawn(
        now(), shell(dir, "setsid sleep 1000 & echo $! > " + pid_file + "; exec sleep 1000"));
    ASSERT_OK(id);
    const pid_t worker = *spawner->pid(*id);
    const pid_t escaped = read_pid_file(pid_file);
    ASSERT_TRUE(wait_until([&] { return status_field(escaped, "Name") == "sleep"; }, 5s));
    EXPECT_NE(read_file("/proc/" + std::to_string(worker) + "/cgroup").find("/w-"),
              std::string::npos);
    EXPECT_NE(::getpgid(escaped), worker);
    spawner->stop(now(), *id);
    const auto exit = wait_exit(*spawner, *id);
    ASSERT_TRUE(exit);
    EXPECT_EQ(exit->status, SIGTERM);
    std::vector<WorkerExit> ignored;
    EXPECT_TRUE(pump_until(
        *spawner, [&] { return ::kill(escaped, 0) != 0 && errno == ESRCH; }, 5s, &ignored));
    // The worker's cgroup is removed once empty.
    EXPECT_TRUE(pump_until(
        *spawner,
        [&] {
          for (const auto& entry : std::filesystem::directory_iterator(root)) {
            if (entry.is_directory()) return false;
          }
          return true;
        },
        5s, &ignored));
  }
  EXPECT_EQ(::rmdir(root.c_str()), 0) << std::strerror(errno);
}

// Also with cgroup_root: the worker of another user joins its cgroup as root, then switches
// user; PDEATHSIG must still end it when the daemon is SIGKILLed.
TEST(SpawnerTest, AWorkerOfAnotherUserInACgroupDiesWithTheSpawningProcess) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run workers as another user";
  const std::string root = make_test_cgroup();
  if (root.empty()) GTEST_SKIP() << "no writable cgroup v2 hierarchy";
  TempDir dir;
  SpawnerConfig config;
  config.state_dir = dir / "helper-state";
  config.cgroup_root = root;
  WorkerSpec spec = shell(dir, "exec sleep 1000");
  spec.working_dir = "/";
  spec.run_as = RunAs{65534, 65534, "nobody"};
  pid_t worker = 0;
  const pid_t helper = spawn_in_a_daemon(dir, config, spec, &worker);
  ASSERT_GT(helper, 0);
  ASSERT_GT(worker, 0);
  EXPECT_NE(read_file("/proc/" + std::to_string(worker) + "/cgroup").find("/w-"),
            std::string::npos);
  expect_the_worker_dies_with_its_daemon(helper, worker);
  // The dead daemon left its worker's (now empty) cgroup; a new daemon would remove it.
  EXPECT_TRUE(wait_until(
      [&] {
        for (const auto& entry : std::filesystem::directory_iterator(root)) {
          if (entry.is_directory()) ::rmdir(entry.path().c_str());
        }
        return ::rmdir(root.c_str()) == 0;
      },
      5s))
      << root << ": " << std::strerror(errno);
}

// Hand-off (warm interpreters): the worker reads its payload from fd 3 to end of file; what it
// printed before stays in the first log, the rest goes to the second under the new label; a
// second hand-off, one to a worker without the pipe, and one to an unknown id are errors.
TEST(SpawnerTest, AHandOffReachesFdThreeAndMovesTheLog) {
  TempDir dir;
  auto spawner = open_spawner(config_in(dir));
  ASSERT_NE(spawner, nullptr);
  WorkerSpec spec = shell(dir,
                          "ls /proc/self/fd; echo waiting; "
                          "payload=$(cat <&3); echo \"got $payload\"");
  spec.label = "job-1 standby slot 0";
  spec.log_path = dir / "logs/job-1/standby.log";
  spec.handoff = true;
  auto id = spawner->spawn(now(), spec);
  ASSERT_OK(id);
  ASSERT_TRUE(wait_for_text(*spawner, spec.log_path, "waiting\n"));
  const std::string rank_log = dir / "logs/job-1/rank-0.log";
  ASSERT_OK(spawner->hand_off(*id, "round 2", "job-1 rank 0", rank_log));
  const auto exit = wait_exit(*spawner, *id);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->status, 0);
  const std::string before = read_file(spec.log_path);
  const std::string after = read_file(rank_log);
  EXPECT_NE(before.find("waiting\n"), std::string::npos) << before;
  EXPECT_NE(before.find("now runs job-1 rank 0"), std::string::npos) << before;
  EXPECT_EQ(before.find("got"), std::string::npos) << before;
  EXPECT_NE(after.find("got round 2\n"), std::string::npos) << after;
  // The hand-off pipe is the one descriptor beyond 0-2 the worker inherits (4 is ls's own, for
  // the directory it lists; a pipeline in the shell would race its pipes into the list).
  EXPECT_NE(before.find("0\n1\n2\n3\n4\nwaiting\n"), std::string::npos) << before;
  EXPECT_NE(after.find("exited with status 0"), std::string::npos) << after;

  WorkerSpec plain = shell(dir, "cat <&3 2>/dev/null; sleep 30");
  auto cold = spawner->spawn(now(), plain);
  ASSERT_OK(cold);
  Status refused = spawner->hand_off(*cold, "x", "job-1 rank 0", rank_log);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().message,
            "cannot hand job-1 rank 0 to a started interpreter: it has no hand-off pipe (any "
            "more).");
  Status gone = spawner->hand_off(*id, "x", "job-1 rank 0", rank_log);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().message,
            "cannot hand job-1 rank 0 to a started interpreter: it has exited.");
  spawner->kill(*cold);
  ASSERT_TRUE(wait_exit(*spawner, *cold).has_value());
}

TEST(SpawnerTest, DescribeAndIndexLists) {
  WorkerExit exit;
  exit.status = 0;
  EXPECT_EQ(exit.describe(), "exited with status 0");
  exit.signaled = true;
  exit.status = SIGSEGV;
  EXPECT_EQ(exit.describe(), "killed by signal 11 (SIGSEGV)");
  EXPECT_EQ(format_index_list({}), "");
  EXPECT_EQ(format_index_list({3, 0, 1, 2, 8, 10, 11, 2}), "0-3,8,10-11");
  EXPECT_EQ(format_index_list({5}), "5");
}

}  // namespace
}  // namespace elastic::spawner
