// Integration tier: the Python progress module (python/elastic_worker.py) and hang detection,
// with real elasticd processes on 127.0.0.1 and real Python workers.
//  - A script that imports elastic_worker with no path set-up (the daemon appends
//    spawner.python_dir, here the source tree's python/, to PYTHONPATH) gives a crash's
//    incident a first step and the step it resumed from.
//  - A script that reports a step and then hangs, with hang_timeout = 5s, is restarted with
//    the reason in `events` and `status`, and its process is gone.
//  - Outside elasticd the module is a no-op; with the daemon down (no socket) or not answering,
//    a report costs at most its 100 ms timeout, one line on stderr, then 10 s of no-ops.
//  - examples/train_ddp.py trains under a daemon (2 workers, Gloo, CPU) and checkpoints.
// Python is /usr/bin/python3 (torch from python3-torch for the example); every wait polls
// with a deadline.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/integ/daemon_under_test.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace elastic::testing {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

constexpr auto kRecover = std::chrono::seconds(60);
const std::string kPythonDir = std::string(ELASTIC_SOURCE_DIR) + "/python";

// A daemon whose workers find the module in the source tree, as an installed one finds it in
// <prefix>/share/elastic/python.
std::unique_ptr<Daemon> daemon_with_module(const TempDir& dir) {
  auto daemon = std::make_unique<Daemon>(dir, "n1", std::vector<std::string>{});
  daemon->set("spawner.python_dir=" + kPythonDir);
  daemon->start();
  return daemon;
}

bool alive(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

// The test process's environment minus what makes the module report, plus `extra`.
std::map<std::string, std::string> plain_env(std::map<std::string, std::string> extra) {
  extra["PYTHONPATH"] = kPythonDir;
  extra["PATH"] = "/usr/bin:/bin";
  return extra;
}

TEST(PythonWorker, ACrashedScriptsRecoveryHasAFirstStepFromTheModule) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is not installed";
  TempDir dir;
  auto n1 = daemon_with_module(dir);
  // Round 1 reports steps, then crashes; round 2 "resumes from step 5" and reports on. No
  // sys.path set-up: the import works through the daemon's PYTHONPATH.
  const std::string script =
      "import os, sys, time\n"
      "import elastic_worker\n"
      "assert elastic_worker.enabled(), os.environ.get('PYTHONPATH')\n"
      "round = int(os.environ['ELASTIC_ROUND'])\n"
      "step = 0\n"
      "if round > 1:\n"
      "    step = 5\n"
      "    elastic_worker.resumed(5)\n"
      "start = time.monotonic()\n"
      "while True:\n"
      "    step += 1\n"
      "    elastic_worker.step(step)\n"
      "    if round == 1 and time.monotonic() - start > 1.0:\n"
      "        sys.exit(3)\n"
      "    time.sleep(0.05)\n";
  const RunResult submitted =
      elasticctl_on(*n1, {"submit", "--name", "py", "--max-restarts", "3", "--restart-backoff",
                          "0s", "--", kPython, "-c", script});
  ASSERT_TRUE(submitted.status.exited_with(0)) << submitted.err;
  const std::string id = "py-1";
  json incident;
  ASSERT_TRUE(wait_first_incident_complete(*n1, id, incident, kRecover)) << incident.dump() << "\n"
                                                                         << n1->process().err();
  EXPECT_EQ(incident["cause"], "worker_failed");
  EXPECT_EQ(incident["to_round"], 2);
  EXPECT_EQ(incident["progress_reports"], true) << incident.dump();
  EXPECT_TRUE(incident["first_step_s"].is_number()) << incident.dump();
  EXPECT_EQ(incident["resumed_from"], 5) << incident.dump();
  const RunResult human = elasticctl_on(*n1, {"events", id});
  EXPECT_THAT(human.out, HasSubstr("  first step    +")) << human.out;
  EXPECT_THAT(human.out, HasSubstr("(resumed from step 5; ")) << human.out;
  EXPECT_TRUE(elasticctl_on(*n1, {"cancel", id}).status.exited_with(0));
}

TEST(PythonWorker, AScriptThatStopsReportingIsRestartedForItsHangTimeout) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is not installed";
  TempDir dir;
  auto n1 = daemon_with_module(dir);
  // Round 1: one step, then a hang. Later rounds never report, so they are never hung.
  const std::string script =
      "import os, time\n"
      "import elastic_worker\n"
      "round = os.environ['ELASTIC_ROUND']\n"
      "if round == '1':\n"
      "    elastic_worker.step(1)\n"
      "path = os.path.join(os.environ['OUT'], 'pid-' + round)\n"
      "with open(path + '.tmp', 'w') as f:\n"
      "    f.write(str(os.getpid()))\n"
      "os.rename(path + '.tmp', path)\n"
      "while True:\n"
      "    time.sleep(1000)\n";
  const RunResult submitted =
      elasticctl_on(*n1, {"submit", "--name", "hung", "--hang-timeout", "5s", "--max-restarts", "3",
                          "--restart-backoff", "0s", "--env", "OUT=" + dir.path(), "--env",
                          "PYTHONFAULTHANDLER=1", "--", kPython, "-c", script});
  ASSERT_TRUE(submitted.status.exited_with(0)) << submitted.err;
  const std::string id = "hung-1";
  const std::string pid_1 = dir.file("pid-1");
  ASSERT_TRUE(wait_until([&] { return std::filesystem::exists(pid_1); }, kRecover))
      << n1->process().err();
  const int pid = std::stoi(read_file(pid_1));
  json job;
  ASSERT_TRUE(wait_until(
      [&] {
        job = ctl_json(*n1, {"status", id, "--json"});
        return !job.is_null() && job["state"] == "running" && job["round"] == 2 &&
               std::filesystem::exists(dir.file("pid-2"));
      },
      kRecover))
      << job.dump(1) << "\n"
      << n1->process().err();
  EXPECT_FALSE(alive(pid)) << "the hung worker of round 1 is gone";
  EXPECT_EQ(job["restarts"], 1) << "a hang counts as a restart";
  // The restart's reason, in status (the job's state changes) and in events.
  const std::string reason =
      "round 2 opened (worker_failed, restart 1 of 3): no progress report for 5s (hang_timeout) "
      "from rank 0 on node n1; the last step reported was 1";
  bool in_status = false;
  for (const json& event : job["events"]) in_status = in_status || event["reason"] == reason;
  EXPECT_TRUE(in_status) << job.dump(1);
  EXPECT_THAT(elasticctl_on(*n1, {"status", id}).out, HasSubstr(reason));
  EXPECT_EQ(job["spec"]["hang_timeout"], "5s");
  const json events = ctl_json(*n1, {"events", id, "--json"});
  ASSERT_FALSE(events.is_null());
  ASSERT_FALSE(events["incidents"].empty()) << events.dump(1);
  EXPECT_EQ(events["incidents"][0]["cause"], "worker_failed");
  const RunResult human = elasticctl_on(*n1, {"events", id});
  EXPECT_THAT(human.out, HasSubstr(reason)) << human.out;
  EXPECT_TRUE(elasticctl_on(*n1, {"cancel", id}).status.exited_with(0));
}

// Bad values are refused at submit, naming the field and where it came from.
TEST(PythonWorker, ABadHangTimeoutIsRefusedAtSubmit) {
  TempDir dir;
  Daemon n1(dir, "n1", {});
  n1.start();
  const RunResult short_one =
      elasticctl_on(n1, {"submit", "--name", "x", "--hang-timeout", "1s", "--", "/bin/true"});
  EXPECT_TRUE(short_one.status.exited_with(65)) << short_one.out << short_one.err;
  EXPECT_THAT(short_one.err,
              HasSubstr("--hang-timeout: 1s is shorter than the minimum of 5s (0s turns hang "
                        "detection off)"));
  const RunResult bad =
      elasticctl_on(n1, {"submit", "--name", "x", "--hang-timeout", "forever", "--", "/bin/true"});
  EXPECT_TRUE(bad.status.exited_with(65)) << bad.out << bad.err;
  EXPECT_THAT(bad.err, HasSubstr("--hang-timeout: "));
}

// The same script outside elasticd: every call returns at once and nothing is printed.
TEST(PythonWorker, OutsideTheDaemonTheModuleIsANoOp) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is not installed";
  const std::string script =
      "import time, elastic_worker\n"
      "assert not elastic_worker.enabled()\n"
      "start = time.monotonic()\n"
      "elastic_worker.resumed(3)\n"
      "for step in range(100000):\n"
      "    elastic_worker.step(step)\n"
      "elastic_worker.checkpoint(10)\n"
      "print('seconds %.3f' % (time.monotonic() - start))\n";
  // torchrun's variables, but no ELASTIC_CONTROL_SOCKET (empty counts as unset).
  const RunResult r = run({kPython, "-c", script},
                          plain_env({{"RANK", "0"},
                                     {"WORLD_SIZE", "1"},
                                     {"ELASTIC_JOB_ID", "x"},
                                     {"ELASTIC_CONTROL_SOCKET", ""}}),
                          std::chrono::seconds(30));
  ASSERT_TRUE(r.status.exited_with(0)) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_LT(std::stod(r.out.substr(r.out.find(' ') + 1)), 2.0) << r.out;
}

// The frames on the wire, read by a small server in the script itself: the fields of the
// protocol, the first step at once and then at most one step per 100 ms, every checkpoint and
// resume; only rank 0 reports unless configure(all_ranks=True).
TEST(PythonWorker, TheModuleSpeaksTheProgressProtocolAtTheTrainersRate) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is not installed";
  TempDir dir;
  const std::string script =
      "import json, os, socket, struct, threading, time\n"
      "server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
      "server.bind(os.environ['ELASTIC_CONTROL_SOCKET'])\n"
      "server.listen(64)\n"
      "frames = []\n"
      "def serve():\n"
      "    while True:\n"
      "        c, _ = server.accept()\n"
      "        size = struct.unpack('>I', c.recv(4, socket.MSG_WAITALL))[0]\n"
      "        frames.append(json.loads(c.recv(size, socket.MSG_WAITALL)))\n"
      "        reply = b'{\"ok\":true}'\n"
      "        c.sendall(struct.pack('>I', len(reply)) + reply)\n"
      "        c.close()\n"
      "threading.Thread(target=serve, daemon=True).start()\n"
      "import elastic_worker\n"
      "elastic_worker.resumed(40)\n"
      "start = time.monotonic()\n"
      "step = 40\n"
      "while time.monotonic() - start < 0.55:\n"
      "    step += 1\n"
      "    elastic_worker.step(step)\n"
      "    time.sleep(0.001)\n"
      "elastic_worker.checkpoint(step)\n"
      "other = elastic_worker.Reporter(dict(os.environ, RANK='1'))\n"
      "assert not other.enabled\n"
      "other.step(1)\n"
      "every = elastic_worker.configure(all_ranks=True, environ=dict(os.environ, RANK='1'))\n"
      "every.step(step, samples=1234)\n"
      "print(json.dumps(frames))\n";
  const RunResult r = run({kPython, "-c", script},
                          plain_env({{"RANK", "0"},
                                     {"ELASTIC_JOB_ID", "j-1"},
                                     {"ELASTIC_ROUND", "4"},
                                     {"ELASTIC_CONTROL_SOCKET", dir.file("ctl.sock")}}),
                          std::chrono::seconds(30));
  ASSERT_TRUE(r.status.exited_with(0)) << r.err;
  EXPECT_EQ(r.err, "");
  const json frames = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(frames.is_array()) << r.out;
  ASSERT_GE(frames.size(), 5u) << r.out;
  EXPECT_EQ(frames[0], json::parse(R"({"verb":"progress","job":"j-1","round":4,"rank":0,
                                       "event":"resume","step":40})"));
  EXPECT_EQ(frames[1], json::parse(R"({"verb":"progress","job":"j-1","round":4,"rank":0,
                                       "event":"step","step":41,"resumed_from":40,
                                       "first":true})"));
  std::size_t steps = 0;
  for (std::size_t i = 1; i + 2 < frames.size(); ++i) {
    EXPECT_EQ(frames[i]["event"], "step") << frames[i];
    EXPECT_EQ(frames[i]["first"], i == 1) << frames[i];
    ++steps;
  }
  // 0.55 s of steps every millisecond or so: the first, then one per 100 ms at most.
  EXPECT_GE(steps, 3u) << r.out;
  EXPECT_LE(steps, 7u) << r.out;
  const json& checkpoint = frames[frames.size() - 2];
  EXPECT_EQ(checkpoint["event"], "checkpoint") << checkpoint;
  EXPECT_FALSE(checkpoint.contains("resumed_from"));
  EXPECT_EQ(frames.back()["rank"], 1) << "all_ranks lets rank 1 report";
  EXPECT_EQ(frames.back()["first"], true);
  EXPECT_EQ(frames.back()["samples"], 1234) << "a sample count goes with the step";
  EXPECT_FALSE(frames[1].contains("samples")) << "none when the script counts none";
}

// A unix socket that listens but never accepts: connect succeeds, the reply never comes.
class SilentSocket {
 public:
  explicit SilentSocket(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
    EXPECT_EQ(::listen(fd_, 64), 0);
  }
  ~SilentSocket() { ::close(fd_); }

 private:
  int fd_ = -1;
};

// The daemon down (no socket) or stuck (no reply): training goes on. The first report fails
// within its 100 ms timeout, one line goes to stderr, and the next 10 s of reports are
// skipped, so 2,000 steps take well under a second.
TEST(PythonWorker, ADaemonThatIsDownOrStuckCostsOneTimeoutAndOneLine) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is not installed";
  TempDir dir;
  SilentSocket stuck(dir.file("stuck.sock"));
  const std::string script =
      "import time, elastic_worker\n"
      "assert elastic_worker.enabled()\n"
      "start = time.monotonic()\n"
      "elastic_worker.step(1)\n"
      "first = time.monotonic() - start\n"
      "for step in range(2, 2001):\n"
      "    elastic_worker.step(step)\n"
      "    elastic_worker.checkpoint(step)\n"
      "print('first %.3f all %.3f' % (first, time.monotonic() - start))\n";
  for (const std::string& socket : {dir.file("missing.sock"), dir.file("stuck.sock")}) {
    const RunResult r = run({kPython, "-c", script},
                            plain_env({{"RANK", "0"},
                                       {"ELASTIC_JOB_ID", "j-1"},
                                       {"ELASTIC_ROUND", "1"},
                                       {"ELASTIC_CONTROL_SOCKET", socket}}),
                            std::chrono::seconds(30));
    ASSERT_TRUE(r.status.exited_with(0)) << socket << "\n" << r.err;
    double first = 0;
    double all = 0;
    ASSERT_EQ(std::sscanf(r.out.c_str(), "first %lf all %lf", &first, &all), 2) << r.out;
    EXPECT_LT(first, 0.5) << socket;
    EXPECT_LT(all, 1.0) << socket;
    EXPECT_THAT(r.err, HasSubstr("elastic_worker: progress report to " + socket + " failed ("));
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

// examples/train_ddp.py, unchanged, as a job of two workers on one node over Gloo: it trains,
// checkpoints in the daemon's layout and succeeds.
TEST(PythonWorker, TheDdpExampleTrainsUnderADaemon) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is not installed";
  if (!run({kPython, "-c", "import torch.distributed"}, {}, std::chrono::seconds(60))
           .status.exited_with(0)) {
    GTEST_SKIP() << "torch is not importable by " << kPython << " (package python3-torch)";
  }
  TempDir dir;
  auto n1 = std::make_unique<Daemon>(dir, "n1", std::vector<std::string>{});
  n1->set("spawner.python_dir=" + kPythonDir);
  n1->set("node.cpu_slots=2");
  n1->start();
  const auto started = std::chrono::steady_clock::now();
  const RunResult submitted =
      elasticctl_on(*n1, {"submit", "--name", "ddp", "--workers-per-node", "2", "--checkpoint-root",
                          dir.file("ck"), "--hang-timeout", "30s", "--", kPython,
                          std::string(ELASTIC_SOURCE_DIR) + "/examples/train_ddp.py", "--steps",
                          "60", "--checkpoint-every", "25", "--log-every", "10"});
  ASSERT_TRUE(submitted.status.exited_with(0)) << submitted.err;
  const std::string id = "ddp-1";
  json job;
  ASSERT_TRUE(wait_until(
      [&] {
        job = ctl_json(*n1, {"status", id, "--json"});
        return !job.is_null() && (job["state"] == "succeeded" || job["state"] == "failed");
      },
      kRecover))
      << job.dump(1) << "\n"
      << elasticctl_on(*n1, {"logs", id}).out;
  const RunResult logs = elasticctl_on(*n1, {"logs", id, "--rank", "0"});
  ASSERT_EQ(job["state"], "succeeded") << job.dump(1) << "\n" << logs.out;
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(60));
  EXPECT_THAT(logs.out, HasSubstr("rank 0 of 2: cpu, starting fresh"));
  EXPECT_THAT(logs.out, HasSubstr("done: step 60 loss "));
  EXPECT_EQ(read_file(dir.file("ck/" + id + "/LATEST")), "step-000000060\n");
  EXPECT_TRUE(std::filesystem::exists(dir.file("ck/" + id + "/step-000000060/model.pt")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("ck/" + id + "/step-000000025")))
      << "older checkpoints are pruned";
}

}  // namespace
}  // namespace elastic::testing
