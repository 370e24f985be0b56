// Integration tier: a plain Python script run as a job by real elasticd processes on 127.0.0.1,
// the way a torchrun user runs theirs.
//  - Output: a print() without flush, followed by a long sleep, reaches `elasticctl logs` within
//    a second while the script still runs (PYTHONUNBUFFERED=1 in the worker's environment; the
//    daemon reads the worker's pipe as it becomes readable and stamps each line).
//  - TORCHELASTIC_RESTART_COUNT follows torchrun: a worker crash counts only on the crashed
//    worker's node, a lost node counts on every survivor, a node that joins starts at 0.
// Python is /usr/bin/python3; every wait polls with a deadline.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "tests/integ/daemon_under_test.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wall_clock.h"

namespace elastic::testing {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

constexpr auto kRecover = std::chrono::seconds(60);

TEST(PythonJobs, APrintWithoutFlushIsInTheLogsWithinASecond) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is not installed";
  TempDir dir;
  Daemon n1(dir, "n1", {});
  n1.start();
  // print() without flush into a pipe: block-buffered by Python unless PYTHONUNBUFFERED is set.
  const std::string script =
      "import time\n"
      "print('printed at', repr(time.time()))\n"
      "time.sleep(600)\n";
  const RunResult submitted =
      elasticctl_on(n1, {"submit", "--name", "py", "--nodes", "1:1", "--", kPython, "-c", script});
  ASSERT_TRUE(submitted.status.exited_with(0)) << submitted.err;
  const std::string id = "py-1";
  const std::regex printed(R"((\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) printed at ([0-9.]+)\n)");
  std::smatch match;
  std::string logs;
  double seen_at = 0;
  ASSERT_TRUE(wait_until(
      [&] {
        const RunResult r = elasticctl_on(n1, {"logs", id, "--rank", "0"});
        seen_at = wall_seconds();
        logs = r.out;
        return r.status.exited_with(0) && std::regex_search(logs, match, printed);
      },
      std::chrono::seconds(20)))
      << logs << "\n"
      << n1.process().err();
  const double printed_at = std::stod(match[2]);
  EXPECT_LT(seen_at - printed_at, 1.0) << logs;
  // The script still sleeps: the line did not wait for its exit.
  const json status = ctl_json(n1, {"status", "--json"});
  ASSERT_FALSE(status.is_null());
  bool running = false;
  for (const json& w : status.value("workers", json::array())) {
    running = running || (w["job"] == id && w["state"] == "running");
  }
  EXPECT_TRUE(running) << status.dump();
  EXPECT_TRUE(elasticctl_on(n1, {"cancel", id}).status.exited_with(0));
}

// "restart_count node=N round=R count=C" lines the script prints, from every daemon's worker log
// files (<state_dir>/logs/<job>/round-<R>/rank-<N>.log) by (node, round).
std::map<std::pair<std::string, std::uint64_t>, std::string> restart_counts(
    const TempDir& dir, const std::string& job) {
  std::map<std::pair<std::string, std::uint64_t>, std::string> found;
  const std::regex line(R"(restart_count node=(\S+) round=(\d+) count=(\d+))");
  for (const char* node : {"n1", "n2"}) {
    std::error_code error;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(
             dir.file(node) + "/state/logs/" + job, error)) {
      if (!entry.is_regular_file()) continue;
      const std::string text = read_file(entry.path().string());
      for (auto it = std::sregex_iterator(text.begin(), text.end(), line);
           it != std::sregex_iterator(); ++it) {
        found[{(*it)[1], std::stoull((*it)[2])}] = (*it)[3];
      }
    }
  }
  return found;
}

// torchrun counts restarts per agent: TORCHELASTIC_RESTART_COUNT goes up on the node whose
// worker crashed (not on the others, whose workers restart uncounted), on every survivor of a
// lost node, and a node that (re)joins starts at 0 (a crash once counted on every
// node and a host loss on none).
TEST(PythonJobs, TheRestartCountIsPerNodeLikeTorchruns) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is not installed";
  TempDir dir;
  Daemon n1(dir, "n1", {});
  n1.start();
  auto n2 = std::make_unique<Daemon>(dir, "n2", std::vector<std::string>{n1.seed()});
  n2->start();
  ASSERT_TRUE(wait_until([&] { return all_alive({&n1, n2.get()}); }, kConverge));
  // n2's first worker crashes once (the marker file says it did).
  const std::string marker = dir.file("crashed");
  const std::string script =
      "import os, sys, time\n"
      "e = os.environ\n"
      "print('restart_count node=%s round=%s count=%s' % (e['ELASTIC_NODE'], e['ELASTIC_ROUND'],"
      " e['TORCHELASTIC_RESTART_COUNT']), flush=True)\n"
      "if e['ELASTIC_NODE'] == 'n2' and not os.path.exists(e['MARKER']):\n"
      "    open(e['MARKER'], 'w').close()\n"
      "    sys.exit(3)\n"
      "time.sleep(600)\n";
  const RunResult submitted = elasticctl_on(
      n1, {"submit", "--name", "count", "--nodes", "1:2", "--max-restarts", "5",
           "--restart-backoff", "0s", "--env", "MARKER=" + marker, "--", kPython, "-c", script});
  ASSERT_TRUE(submitted.status.exited_with(0)) << submitted.err;
  const std::string id = "count-1";
  json job;
  std::map<std::pair<std::string, std::uint64_t>, std::string> seen;
  // The round's lines of both nodes (or of `nodes`), once the job runs it.
  const auto running = [&](std::vector<std::string> nodes, std::uint64_t after_round) {
    job = ctl_json(n1, {"status", id, "--json"});
    if (job.is_null() || job["state"] != "running" || job["ranks"].size() != nodes.size() ||
        job["round"].get<std::uint64_t>() <= after_round) {
      return false;
    }
    seen = restart_counts(dir, id);
    const std::uint64_t round = job["round"].get<std::uint64_t>();
    return std::all_of(nodes.begin(), nodes.end(), [&](const std::string& n) {
      return seen.contains({n, round});
    });
  };
  // 1. n2's worker crashed: the round after it counts 1 on n2, 0 on n1.
  // n2's first line is of the round its worker crashed in.
  std::uint64_t crashed = 0;
  ASSERT_TRUE(wait_until(
      [&] {
        if (!std::filesystem::exists(marker)) return false;
        seen = restart_counts(dir, id);
        for (const auto& [key, count] : seen) {
          if (key.first == "n2") crashed = key.second;
          if (key.first == "n2") return true;
        }
        return false;
      },
      kRecover))
      << n1.process().err();
  ASSERT_TRUE(wait_until(
      [&] {
        return running({"n1", "n2"}, crashed);
      },
      kRecover))
      << job.dump() << "\n"
      << n1.process().err();
  std::uint64_t round = job["round"].get<std::uint64_t>();
  EXPECT_EQ((seen[{"n2", round}]), "1") << job.dump(1);
  EXPECT_EQ((seen[{"n1", round}]), "0") << job.dump(1);
  // 2. n2's daemon dies with its worker: the survivor n1 counts.
  n2->process().signal(SIGKILL);
  n2->process().wait(std::chrono::seconds(10));
  ASSERT_TRUE(wait_until([&] { return running({"n1"}, round); }, kRecover)) << job.dump();
  round = job["round"].get<std::uint64_t>();
  EXPECT_EQ((seen[{"n1", round}]), "1") << job.dump(1);
  // 3. n2 comes back (a new daemon instance) and the job grows: n1 keeps 1, n2 starts at 0.
  n2->start();
  ASSERT_TRUE(wait_until([&] { return running({"n1", "n2"}, round); }, kRecover)) << job.dump();
  round = job["round"].get<std::uint64_t>();
  EXPECT_EQ((seen[{"n1", round}]), "1") << job.dump(1);
  EXPECT_EQ((seen[{"n2", round}]), "0") << job.dump(1);
  EXPECT_TRUE(elasticctl_on(n1, {"cancel", id}).status.exited_with(0));
}

}  // namespace
}  // namespace elastic::testing
