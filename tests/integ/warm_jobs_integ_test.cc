// Integration tier: warm Python interpreters (JobSpec::warm) with a real elasticd on 127.0.0.1.
//  - A crashed rank's next round runs in the slot's started interpreter: same pid as the
//    standby the daemon logged, torch already imported, the script run as __main__ with the
//    argv, working directory, sys.path[0] and environment (the new round's) a cold start gives;
//    python -m MODULE likewise; nothing of the job is left running once it succeeded.
//  - A standby that died before the round came leaves the round to a cold start.
//  - A command a warm interpreter cannot run is refused at submit, naming why.
// Python is /usr/bin/python3 with Debian's python3-torch; every wait polls with a deadline.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "tests/integ/daemon_under_test.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace elastic::testing {
namespace {

using json = nlohmann::json;

constexpr auto kLong = std::chrono::seconds(90);

bool have_torch() {
  return ::access(kPython, X_OK) == 0 &&
         run({kPython, "-c", "import torch"}, {}, std::chrono::seconds(60)).status.exited_with(0);
}

json job_status(const Daemon& daemon, const std::string& id) {
  const RunResult r = elasticctl_on(daemon, {"status", id, "--json"});
  const json reply = json::parse(r.out, nullptr, false);
  if (reply.is_discarded()) return json::object();
  return reply.contains("job") ? reply["job"] : reply;
}

// Every process whose environment names job `id` (this test runs as root: it may read them).
std::vector<int> processes_of(const std::string& id) {
  std::vector<int> pids;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "environ", std::ios::binary);
    const std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (env.find(std::string("ELASTIC_JOB_ID=") + id + '\0') != std::string::npos) {
      pids.push_back(std::stoi(name));
    }
  }
  return pids;
}

// The pid of the standby the daemon logged for `id` on slot `slot`, once it has.
int standby_pid(Daemon& daemon, const std::string& id) {
  const std::regex started("job " + id + ": warm standby started on slot \\d+ \\(pid (\\d+)\\)");
  int pid = 0;
  wait_until(
      [&] {
        const std::string err = daemon.process().err();
        std::smatch match;
        if (!std::regex_search(err, match, started)) return false;
        pid = std::stoi(match[1]);
        return true;
      },
      kLong);
  return pid;
}

// A script that prints how it was started, crashes in round 1 once `go` exists, succeeds after.
std::string write_script(const TempDir& dir, const std::string& path) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << "import os, sys, time\n"
                         "warm = 'torch' in sys.modules\n"
                         "e = os.environ\n"
                         "print('started round=%s warm=%s pid=%d name=%s argv=%r cwd=%s path0=%s "
                         "rank=%s restarts=%s' % (e['ELASTIC_ROUND'], warm, os.getpid(), "
                         "__name__, sys.argv, os.getcwd(), sys.path[0], e['RANK'], "
                         "e['TORCHELASTIC_RESTART_COUNT']))\n"
                         "if e['ELASTIC_ROUND'] == '1':\n"
                         "    while not os.path.exists(e['GO']):\n"
                         "        time.sleep(0.05)\n"
                         "    sys.exit(3)\n";
  return path;
}

// A one-daemon cluster in a temporary directory with the test script at code/train.py.
struct OneDaemon {
  TempDir dir;
  Daemon n1{dir, "n1", {}};
  std::string script;
  OneDaemon() {
    std::filesystem::create_directories(dir.file("work"));
    n1.start();
    script = write_script(dir, dir.file("code/train.py"));
  }
};

struct WarmRun {
  json job;
  std::string logs;
  int standby = 0;
};

// Submits `command` warm, waits for its standby (optionally kills it and waits until the
// daemon noticed), lets round 1 crash, and waits for the job to succeed.
WarmRun run_warm_job(TempDir& dir, Daemon& n1, const std::string& name,
                     const std::vector<std::string>& command, bool kill_standby) {
  WarmRun out;
  const std::string go = dir.file(name + ".go");
  std::vector<std::string> submit = {
      "submit",    "--name",         name,    "--nodes",           "1",  "--workers-per-node",
      "1",         "--max-restarts", "2",     "--restart-backoff", "0s", "--warm",
      "--workdir", dir.file("work"), "--env", "GO=" + go,          "--"};
  submit.insert(submit.end(), command.begin(), command.end());
  const RunResult submitted = elasticctl_on(n1, submit);
  EXPECT_TRUE(submitted.status.exited_with(0)) << submitted.err;
  const std::string id = name + "-1";
  out.standby = standby_pid(n1, id);
  EXPECT_GT(out.standby, 0) << n1.process().err();
  if (kill_standby && out.standby > 0) {
    ::kill(out.standby, SIGKILL);
    EXPECT_TRUE(wait_until(
        [&] {
          return n1.process().err().find("warm standby on slot") != std::string::npos &&
                 n1.process().err().find("before a round came") != std::string::npos;
        },
        kLong))
        << n1.process().err();
  }
  std::ofstream(go) << "go\n";
  EXPECT_TRUE(wait_until(
      [&] {
        out.job = job_status(n1, id);
        return out.job.value("state", "") == "succeeded" || out.job.value("state", "") == "failed";
      },
      kLong))
      << out.job.dump() << "\n"
      << n1.process().err();
  out.logs = elasticctl_on(n1, {"logs", id, "--rank", "0"}).out;
  // Nothing of the job is left: no worker, no standby.
  EXPECT_TRUE(wait_until([&] { return processes_of(id).empty(); }, kLong))
      << processes_of(id).size() << " processes left\n"
      << n1.process().err();
  return out;
}

TEST(WarmJobs, ACrashedRankRunsItsNextRoundInTheStartedInterpreter) {
  if (!have_torch()) GTEST_SKIP() << kPython << " with torch is not installed";
  OneDaemon c;
  const std::string& script = c.script;
  TempDir& dir = c.dir;
  const WarmRun run =
      run_warm_job(dir, c.n1, "warm", {kPython, "-u", script, "--lr", "0.1"}, false);
  EXPECT_EQ(run.job.value("state", ""), "succeeded") << run.job.dump();
  const std::string expected = "started round=2 warm=True pid=" + std::to_string(run.standby) +
                               " name=__main__ argv=['" + script +
                               "', '--lr', '0.1'] cwd=" + dir.file("work") +
                               " path0=" + dir.file("code") + " rank=0 restarts=1";
  EXPECT_NE(run.logs.find(expected), std::string::npos) << expected << "\n" << run.logs;
}

TEST(WarmJobs, AModuleRunsAsWithDashM) {
  if (!have_torch()) GTEST_SKIP() << kPython << " with torch is not installed";
  TempDir dir;
  Daemon n1(dir, "n1", {});
  n1.start();
  write_script(dir, dir.file("work/trainmod.py"));
  const WarmRun run = run_warm_job(dir, n1, "warmmod", {kPython, "-m", "trainmod", "x"}, false);
  EXPECT_EQ(run.job.value("state", ""), "succeeded") << run.job.dump();
  // runpy gives the module's file as argv[0], as python -m does.
  const std::string expected = "started round=2 warm=True pid=" + std::to_string(run.standby) +
                               " name=__main__ argv=['" + dir.file("work/trainmod.py") +
                               "', 'x'] cwd=" + dir.file("work") + " path0=" + dir.file("work");
  EXPECT_NE(run.logs.find(expected), std::string::npos) << expected << "\n" << run.logs;
}

TEST(WarmJobs, AStandbyThatDiedLeavesTheRoundToAColdStart) {
  if (!have_torch()) GTEST_SKIP() << kPython << " with torch is not installed";
  OneDaemon c;
  const WarmRun run = run_warm_job(c.dir, c.n1, "cold", {kPython, c.script}, true);
  EXPECT_EQ(run.job.value("state", ""), "succeeded") << run.job.dump();
  EXPECT_NE(run.logs.find("started round=2 warm=False"), std::string::npos) << run.logs;
  EXPECT_EQ(run.logs.find("pid=" + std::to_string(run.standby) + " "), std::string::npos)
      << run.logs;
}

TEST(WarmJobs, ACommandAWarmInterpreterCannotRunIsRefusedAtSubmit) {
  TempDir dir;
  Daemon n1(dir, "n1", {});
  n1.start();
  const RunResult r =
      elasticctl_on(n1, {"submit", "--name", "bad", "--warm", "--", "/bin/sh", "-c", "true"});
  EXPECT_FALSE(r.status.exited_with(0));
  EXPECT_NE(r.err.find("warm: needs a Python command: the command must start with a Python "
                       "interpreter (python, python3, python3.11 or a path to one), not "
                       "'/bin/sh'"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(job_status(n1, "bad-1").value("state", ""), "");
}

}  // namespace
}  // namespace elastic::testing
