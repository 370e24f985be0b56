// On three namespaced hosts with real elasticd daemons: a torchrun-style
// script (torch.distributed with Gloo, env:// rendezvous, print() without flush) runs unchanged
// under `elasticctl submit` from a Python venv, with NCCL_*, GLOO_SOCKET_IFNAME and PYTHONPATH
// set in the submitter's shell:
//   - every worker runs the venv's python3 (sys.prefix) and sees the submitter's variables (the
//     script imports a module found only through PYTHONPATH);
//   - each rank's output is in `elasticctl logs` within a second of being printed;
//   - one host is killed (its daemon and its worker), the job recovers on the two others, and
//     `elasticctl logs --all` through a survivor shows the first round's output of every rank,
//     the dead host's included (spawner.log_root on a directory every namespace sees, since that
//     host stays dead), and the new round's.
// Needs root (the namespace harness) and torch for /usr/bin/python3 (Debian's python3-torch, in
// the Makefile's packages); skips without either. Every wait polls with a deadline.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tests/netns/daemon_cluster.h"
#include "tests/netns/daemon_cluster_test.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wall_clock.h"

namespace elastic::netns {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;

constexpr int kHosts = 3;
// Submit -> three workers past `import torch` and their first all-reduce.
constexpr milliseconds kRuns = 40s;
constexpr const char* kPython = "/usr/bin/python3";

// The user's script, as they would run it with torchrun (ELASTIC_ROUND only labels its lines).
constexpr const char* kScript = R"(import os, sys, time
import torch
import torch.distributed as dist
import user_helper  # found only through the submitter's PYTHONPATH

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
attempt = os.environ["ELASTIC_ROUND"]
print("start rank %d world %d round %s nccl_debug %s gloo_ifname %s helper %s prefix %s"
      % (rank, world, attempt, os.environ.get("NCCL_DEBUG"), os.environ.get("GLOO_SOCKET_IFNAME"),
         user_helper.NAME, sys.prefix))
dist.init_process_group("gloo")
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
print("allreduce rank %d world %d round %s sum %g at %r" % (rank, world, attempt, total.item(),
                                                            time.time()))
while True:
    time.sleep(60)
)";

class TorchrunScriptNetnsTest : public DaemonClusterTest {
 protected:
  // The work dir holds the control sockets, the venv and the script the workers run.
  TorchrunScriptNetnsTest()
      : DaemonClusterTest({.hosts = kHosts, .share_work_dir = true, .log_tail = 6000}) {}

  std::string missing_prerequisite() override {
    const testing::RunResult torch =
        testing::run({kPython, "-c", "import torch.distributed"}, {}, 60s);
    if (torch.status.exited_with(0)) return "";
    return std::string(kPython) + " cannot import torch.distributed (apt-get install " +
           "python3-torch): " + torch.err;
  }

  // elasticctl through `host` with the submitter's shell environment.
  testing::RunResult ctl_env(int host, const std::vector<std::string>& args,
                             const std::map<std::string, std::string>& env) const {
    std::vector<std::string> argv = {ELASTICCTL_PATH, "--config", "/dev/null", "--set",
                                     "control.socket=" + daemons_->socket(host)};
    argv.insert(argv.end(), args.begin(), args.end());
    return testing::run(argv, env, 30s);
  }
};

TEST_F(TorchrunScriptNetnsTest, AVenvScriptRunsUnchangedAndEveryRoundsLogsOutliveAHostLoss) {
  const auto began = std::chrono::steady_clock::now();
  const auto elapsed = [&] {
    return std::to_string(
               std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count()) +
           " s";
  };
  // The user's environment: a venv, a PYTHONPATH entry with their own module, NCCL_* and the
  // Gloo interface in the shell.
  const std::string venv = work_.path() + "/venv";
  const testing::RunResult made =
      testing::run({kPython, "-m", "venv", "--system-site-packages", venv}, {}, 60s);
  ASSERT_TRUE(made.status.exited_with(0)) << made.err;
  const std::string pylib = work_.path() + "/pylib";
  std::filesystem::create_directories(pylib);
  std::ofstream(pylib + "/user_helper.py") << "NAME = 'from-pythonpath'\n";
  const std::string script = work_.path() + "/train_ddp.py";
  std::ofstream(script) << kScript;
  const char* path = std::getenv("PATH");
  const std::map<std::string, std::string> shell = {
      {"PATH", venv + "/bin:" + (path != nullptr ? path : "/usr/bin:/bin")},
      {"VIRTUAL_ENV", venv},
      {"PYTHONPATH", pylib},
      {"NCCL_DEBUG", "INFO"},
      {"NCCL_SOCKET_IFNAME", "eth0"},
      {"GLOO_SOCKET_IFNAME", "eth0"},
  };

  const std::string shared_logs = work_.path() + "/shared-logs";
  daemons_->set_overrides({"rendezvous.last_call=1s", "spawner.stop_grace=3s", "node.cpu_slots=1",
                           "spawner.log_root=" + shared_logs});
  ASSERT_NO_FATAL_FAILURE(start_converged());
  const std::string leader = daemons_->wait_leader(all_hosts(), kConverge);
  ASSERT_FALSE(leader.empty()) << daemons_->describe_raft(all_hosts());
  std::cerr << "daemons up after " << elapsed() << "\n";

  const testing::RunResult submitted = ctl_env(
      0, {"submit", "--json", "--name", "ddp", "--nodes", "2:3", "--", "python3", script}, shell);
  ASSERT_TRUE(submitted.status.exited_with(0)) << submitted.out << submitted.err;
  const auto reply = nlohmann::json::parse(submitted.out, nullptr, false);
  ASSERT_TRUE(reply.is_object()) << submitted.out;
  const std::string id = reply.value("job", nlohmann::json::object()).value("id", "");
  ASSERT_FALSE(id.empty()) << submitted.out;

  // Each rank's all-reduce line, in `logs` within a second of its print.
  const std::regex reduced(
      R"(\[rank (\d)\] \S+Z allreduce rank \d world (\d) round (\d+) sum (\S+) at ([0-9.]+)\n)");
  std::map<int, double> late;  // rank -> seconds from print to elasticctl logs
  std::string out;
  std::uint64_t first_round = 0;
  ASSERT_TRUE(testing::wait_until(
      [&] {
        const testing::RunResult r = daemons_->ctl(0, {"logs", id});
        const double seen = testing::wall_seconds();
        out = r.out;
        for (auto it = std::sregex_iterator(out.begin(), out.end(), reduced);
             it != std::sregex_iterator(); ++it) {
          const int rank = std::stoi((*it)[1]);
          if ((*it)[2] != "3" || (*it)[4] != "6" || late.contains(rank)) continue;
          late[rank] = seen - std::stod((*it)[5]);
          first_round = std::stoull((*it)[3]);
        }
        return late.size() == 3;
      },
      kRuns))
      << out << "\n"
      << daemons_->ctl(0, {"status", id}).out;
  std::cerr << "three ranks all-reduced after " << elapsed() << "\n";
  for (const auto& [rank, seconds] : late) {
    EXPECT_LT(seconds, 1.0) << "rank " << rank << "'s line reached elasticctl logs late";
  }
  // The workers ran the venv's interpreter with the submitter's variables.
  for (int rank = 0; rank < 3; ++rank) {
    const std::string start = "[rank " + std::to_string(rank) + "] ";
    const std::string expected =
        "start rank " + std::to_string(rank) + " world 3 round " + std::to_string(first_round) +
        " nccl_debug INFO gloo_ifname eth0 helper from-pythonpath prefix " + venv + "\n";
    EXPECT_NE(out.find(expected), std::string::npos) << expected << " in\n" << out;
  }

  // One host (not the leader's) is lost: its daemon and its worker.
  const auto first = daemons_->job(0, id);
  ASSERT_TRUE(first.ok()) << first.error().message;
  std::string victim;
  std::uint32_t victim_rank = 0;
  for (const RankView& entry : first->ranks) {
    if (entry.node != leader) {
      victim = entry.node;
      victim_rank = entry.first_rank;
    }
  }
  ASSERT_FALSE(victim.empty()) << first->summary();
  const int v = daemons_->host_of(victim);
  std::vector<pid_t> lost_workers;
  for (const WorkerProc& w : find_workers(id)) {
    if (w.node == victim) lost_workers.push_back(w.pid);
  }
  daemons_->daemon(v).signal(SIGKILL);
  for (const pid_t pid : lost_workers) ::kill(pid, SIGKILL);
  ASSERT_TRUE(daemons_->daemon(v).wait(10s).has_value());
  const int survivor = daemons_->host_of(leader);

  // The job recovers on the two others: a new round, all-reduced over two ranks.
  std::uint64_t second_round = 0;
  ASSERT_TRUE(testing::wait_until(
      [&] {
        const testing::RunResult r = daemons_->ctl(survivor, {"logs", id});
        out = r.out;
        std::map<std::uint64_t, std::set<int>> reduced_by_round;  // world 2, sum 1 + 2
        for (auto it = std::sregex_iterator(out.begin(), out.end(), reduced);
             it != std::sregex_iterator(); ++it) {
          const std::uint64_t round = std::stoull((*it)[3]);
          if ((*it)[2] == "2" && (*it)[4] == "3" && round > first_round) {
            reduced_by_round[round].insert(std::stoi((*it)[1]));
          }
        }
        for (const auto& [round, ranks] : reduced_by_round) {
          if (ranks.size() == 2) second_round = round;
        }
        return second_round != 0;
      },
      kRuns))
      << out << "\n"
      << daemons_->ctl(survivor, {"status", id}).out;
  std::cerr << "recovered on two hosts after " << elapsed() << "\n";

  // Every round's output of every rank, the dead host's included, through a survivor.
  const testing::RunResult all = daemons_->ctl(survivor, {"logs", id, "--all"});
  ASSERT_TRUE(all.status.exited_with(0)) << all.err;
  EXPECT_EQ(all.err, "") << "the shared log_root needs no other daemon";
  const std::string r1 = std::to_string(first_round);
  const std::string r2 = std::to_string(second_round);
  for (int rank = 0; rank < 3; ++rank) {
    const std::regex line("\\[round " + r1 + " rank " + std::to_string(rank) +
                          "\\] \\S+Z allreduce rank " + std::to_string(rank) + " world 3 round " +
                          r1 + " sum 6 at ");
    EXPECT_TRUE(std::regex_search(all.out, line))
        << "round " << r1 << " rank " << rank
        << (rank == static_cast<int>(victim_rank) ? " (the dead host's)" : "") << " in\n"
        << all.out;
  }
  for (int rank = 0; rank < 2; ++rank) {
    const std::regex line("\\[round " + r2 + " rank " + std::to_string(rank) +
                          "\\] \\S+Z allreduce rank " + std::to_string(rank) + " world 2 round " +
                          r2 + " sum 3 at ");
    EXPECT_TRUE(std::regex_search(all.out, line)) << "round " << r2 << " rank " << rank << " in\n"
                                                  << all.out;
  }
  // Round then rank order: the first round's lines come before the new round's.
  EXPECT_LT(all.out.find("[round " + r1 + " rank "), all.out.find("[round " + r2 + " rank "));
  const testing::RunResult dead =
      daemons_->ctl(survivor, {"logs", id, "--round", r1, "--rank", std::to_string(victim_rank)});
  ASSERT_TRUE(dead.status.exited_with(0)) << dead.err;
  EXPECT_NE(dead.out.find("helper from-pythonpath prefix " + venv), std::string::npos) << dead.out;
  std::cerr << "done after " << elapsed() << "\n";
  EXPECT_TRUE(daemons_->ctl(survivor, {"cancel", id}).status.exited_with(0));
}

}  // namespace
}  // namespace elastic::netns
