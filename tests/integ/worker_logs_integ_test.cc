// Integration tier: worker logs by round on real elasticd processes on
// 127.0.0.1, read with elasticctl as a user would:
//  - every round's file of every rank is kept and listed by the daemon that holds it
//    (log_files); `logs --round R` and `logs --all` read them from either daemon, the default
//    view stays the current round, and bad option values get one clear error;
//  - a member that does not answer is named in one warning line (exit 0) and its files come
//    back with its daemon; the owner check holds after that daemon restarted (the owner file);
//  - with spawner.log_root on a directory both daemons write, a dead daemon's output is served
//    by the other.
// Every node has one CPU slot, so a 2-node job puts rank 0 on one daemon and rank 1 on the
// other. Cases that run workers as another user need root (CI runs as root) and skip otherwise.
// Every wait polls with a deadline.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tests/integ/daemon_under_test.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace elastic::testing {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr auto kRuns = std::chrono::seconds(60);
constexpr int kAlice = 65531;
constexpr int kBob = 65530;

// Two daemons of one CPU slot each, n1 the voter, with untimestamped worker output (the lines
// are compared as printed) plus `extra` settings.
std::vector<std::string> pair_settings(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> settings = {"node.cpu_slots=1", "spawner.log_timestamps=false"};
  settings.insert(settings.end(), extra.begin(), extra.end());
  return settings;
}

// The job as `status JOB --json` shows it (null when it does not answer).
json job_of(const Daemon& daemon, const std::string& id) {
  return ctl_json(daemon, {"status", id, "--json"});
}

bool job_ended(const Daemon& daemon, const std::string& id) {
  const json job = job_of(daemon, id);
  return !job.is_null() && job.value("state", "") == "succeeded";
}

// Position of `needle` in `text`, or npos; for "this line comes before that one".
std::size_t at(const std::string& text, const std::string& needle) { return text.find(needle); }

// A 2-rank job whose rank 1 fails once: round 1's output (with its traceback) is kept when
// round 2 starts, and both rounds of both ranks are read from either daemon.
TEST(WorkerLogs, EveryRoundOfEveryRankIsReadableFromEitherDaemon) {
  TempDir dir;
  DaemonPair pair(dir, pair_settings());
  Daemon& n1 = pair.n1;
  Daemon& n2 = *pair.n2;
  const std::string marker = dir.file("failed-once");
  const std::string script =
      "echo \"hello round $ELASTIC_ROUND rank $RANK\"\n"
      "if [ \"$RANK\" = 1 ] && [ ! -e \"$MARKER\" ]; then\n"
      "  : > \"$MARKER\"; echo \"Traceback: boom in round $ELASTIC_ROUND\" >&2; exit 3\n"
      "fi\n"
      "exec sleep 600\n";
  const RunResult submitted = elasticctl_on(
      n1, {"submit", "--name", "rounds", "--nodes", "2:2", "--max-restarts", "3",
           "--restart-backoff", "0s", "--env", "MARKER=" + marker, "--", "/bin/sh", "-c", script});
  ASSERT_TRUE(submitted.status.exited_with(0)) << submitted.err;
  const std::string id = "rounds-1";
  // The failed round, then the one after it running both ranks.
  std::uint64_t failed = 0;
  std::uint64_t current = 0;
  std::string all;
  ASSERT_TRUE(wait_until(
      [&] {
        const json job = job_of(n1, id);
        if (job.is_null() || job.value("state", "") != "running") return false;
        current = job.value("round", std::uint64_t{0});
        const RunResult r = elasticctl_on(n1, {"logs", id, "--all"});
        all = r.out;
        const std::size_t boom = at(all, "Traceback: boom in round ");
        if (!r.status.exited_with(0) || boom == std::string::npos) return false;
        failed = std::stoull(all.substr(boom + std::strlen("Traceback: boom in round ")));
        return current > failed &&
               at(all, "hello round " + std::to_string(current) + " rank 1") != std::string::npos &&
               at(all, "hello round " + std::to_string(current) + " rank 0") != std::string::npos;
      },
      kRuns))
      << all << "\n"
      << n1.process().err();
  const std::string f = std::to_string(failed);
  const std::string c = std::to_string(current);
  // --all: round then rank, each line prefixed with both; the failed round's traceback kept.
  const std::vector<std::string> in_order = {
      "[round " + f + " rank 0] hello round " + f + " rank 0\n",
      "[round " + f + " rank 1] hello round " + f + " rank 1\n",
      "[round " + f + " rank 1] Traceback: boom in round " + f + "\n",
      "[round " + c + " rank 0] hello round " + c + " rank 0\n",
      "[round " + c + " rank 1] hello round " + c + " rank 1\n"};
  for (const Daemon* from : {&n1, &n2}) {
    SCOPED_TRACE("logs --all through " + from->name());
    const RunResult r = elasticctl_on(*from, {"logs", id, "--all"});
    ASSERT_TRUE(r.status.exited_with(0)) << r.err;
    EXPECT_EQ(r.err, "");
    std::size_t last = 0;
    for (const std::string& line : in_order) {
      const std::size_t pos = at(r.out, line);
      ASSERT_NE(pos, std::string::npos) << line << " in\n" << r.out;
      EXPECT_GE(pos, last) << line << " out of order in\n" << r.out;
      last = pos;
    }
  }
  // The daemon that ran each rank lists its files (round, rank, size).
  const json listed = ctl_json(n2, {"logs", id, "--all", "--json"});
  ASSERT_FALSE(listed.is_null());
  std::set<std::string> nodes;
  for (const json& reply : listed["logs"]) nodes.insert(reply.value("node", ""));
  EXPECT_EQ(nodes, (std::set<std::string>{"n1", "n2"})) << listed.dump(1);
  EXPECT_TRUE(listed["unanswered"].empty()) << listed.dump(1);

  // --round: that round only, prefixed by rank; with --rank, raw.
  RunResult r = elasticctl_on(n2, {"logs", id, "--round", f});
  ASSERT_TRUE(r.status.exited_with(0)) << r.err;
  EXPECT_THAT(r.out, HasSubstr("[rank 0] hello round " + f + " rank 0\n"));
  EXPECT_THAT(r.out, HasSubstr("[rank 1] Traceback: boom in round " + f + "\n"));
  EXPECT_THAT(r.out, Not(HasSubstr("hello round " + c)));
  r = elasticctl_on(n1, {"logs", id, "--round", f, "--rank", "1"});
  ASSERT_TRUE(r.status.exited_with(0)) << r.err;
  EXPECT_THAT(r.out, HasSubstr("hello round " + f + " rank 1\nTraceback: boom in round " + f));
  EXPECT_THAT(r.out, Not(HasSubstr("[rank")));
  // The default view is still the current round.
  r = elasticctl_on(n1, {"logs", id});
  ASSERT_TRUE(r.status.exited_with(0)) << r.err;
  EXPECT_THAT(r.out, HasSubstr("[rank 1] hello round " + c + " rank 1\n"));
  EXPECT_THAT(r.out, Not(HasSubstr("round " + f))) << r.out;

  // Bad values: one line each, nothing read.
  r = elasticctl_on(n1, {"logs", id, "--round", "1x"});
  EXPECT_TRUE(r.status.exited_with(64)) << r.err;
  EXPECT_EQ(r.err,
            "elasticctl: --round must be a round number (0, 1, 2, ...; elasticctl status JOB "
            "shows the current one), not \"1x\"\n");
  r = elasticctl_on(n1, {"logs", id, "--round", "-1"});
  EXPECT_TRUE(r.status.exited_with(64)) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--round must be a round number (0, 1, 2, ...; "));
  r = elasticctl_on(n1, {"logs", id, "--round", "99"});
  EXPECT_TRUE(r.status.exited_with(1)) << r.err;
  EXPECT_EQ(r.err, "elasticctl: job " + id + " has no worker logs of round 99\n");
  r = elasticctl_on(n1, {"logs", id, "--round", f, "--all"});
  EXPECT_TRUE(r.status.exited_with(64));
  EXPECT_EQ(r.err, "elasticctl: logs takes --round R or --all, not both\n");
  r = elasticctl_on(n1, {"logs", id, "--all", "--follow"});
  EXPECT_TRUE(r.status.exited_with(64));
  EXPECT_EQ(r.err,
            "elasticctl: --follow reads the current round; it does not combine with --all\n");
  // A job id that walks out of the log directory is not one.
  r = elasticctl_on(n1, {"logs", "../" + id, "--all"});
  EXPECT_TRUE(r.status.exited_with(1)) << r.err;
  EXPECT_TRUE(elasticctl_on(n1, {"cancel", id}).status.exited_with(0));
}

// A member that does not answer costs one warning line, not the command; its files are back
// with its daemon, and the owner check holds there after the restart (the owner file).
TEST(WorkerLogs, ALostMembersLogsReturnWithItsDaemonForTheOwnerOnly) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run workers as another user";
  TempDir dir;
  ::chmod(dir.path().c_str(), 0755);
  DaemonPair pair(dir, pair_settings());
  Daemon& n1 = pair.n1;
  const RunResult submitted = elasticctl_on(
      n1,
      {"submit", "--name", "own", "--nodes", "2:2", "--", "/bin/sh", "-c", "echo \"mine $RANK\""},
      kAlice);
  ASSERT_TRUE(submitted.status.exited_with(0)) << submitted.err;
  const std::string id = "own-1";
  ASSERT_TRUE(wait_until([&] { return job_ended(n1, id); }, kRuns)) << job_of(n1, id).dump();
  const auto both = [](const std::string& out) {
    return out.find("rank 0] mine 0\n") != std::string::npos &&
           out.find("rank 1] mine 1\n") != std::string::npos;
  };
  RunResult r = elasticctl_on(n1, {"logs", id, "--all"}, kAlice);
  ASSERT_TRUE(r.status.exited_with(0)) << r.err;
  EXPECT_TRUE(both(r.out)) << r.out;
  r = elasticctl_on(n1, {"logs", id, "--all"}, kBob);
  EXPECT_TRUE(r.status.exited_with(77)) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("Only the owner of job " + id));

  // n2 is stopped (SIGSTOP): it does not answer, which costs one warning line, not the command.
  pair.n2->process().signal(SIGSTOP);
  r = elasticctl_on(n1, {"logs", id, "--all"}, kAlice);
  pair.n2->process().signal(SIGCONT);
  EXPECT_TRUE(r.status.exited_with(0)) << r.err;
  EXPECT_TRUE(std::regex_match(
      r.err, std::regex("elasticctl: warning: no logs from n2 \\([^\n]+\\); what they hold is "
                        "not shown\n")))
      << r.err;
  EXPECT_FALSE(both(r.out)) << r.out;
  ASSERT_TRUE(wait_until([&] { return sees(n1, "n2", "alive"); }, kConverge));

  // n2 is killed: its files are missing, named in one warning line; exit 0.
  pair.n2->process().signal(SIGKILL);
  pair.n2->process().wait(std::chrono::seconds(10));
  ASSERT_TRUE(wait_until([&] { return sees(n1, "n2", "dead"); }, kConverge));
  r = elasticctl_on(n1, {"logs", id, "--all"}, kAlice);
  ASSERT_TRUE(r.status.exited_with(0)) << r.err;
  EXPECT_EQ(r.err,
            "elasticctl: warning: no logs from n2 (dead, not asked); what they hold is not "
            "shown\n");
  EXPECT_FALSE(both(r.out)) << r.out;
  EXPECT_NE(r.out, "") << "n1's rank is still shown";

  // n2's daemon is back (nothing of the job in its memory): the files are there for alice.
  pair.n2->start();
  ASSERT_TRUE(
      wait_until([&] { return sees(n1, "n2", "alive", pair.n2->generation()); }, kConverge));
  ASSERT_TRUE(wait_until(
      [&] {
        r = elasticctl_on(n1, {"logs", id, "--all"}, kAlice);
        return r.status.exited_with(0) && both(r.out) && r.err.empty();
      },
      kConverge))
      << r.out << r.err;
  r = elasticctl_on(*pair.n2, {"logs", id, "--all"}, kBob);
  EXPECT_TRUE(r.status.exited_with(77)) << r.out << r.err;
}

// spawner.log_root on a directory both daemons write: each daemon serves the other's output
// from its own list, and the dead n2's is read through n1 while n2 stays down (only the local
// daemon is asked: no warning for the dead member).
TEST(WorkerLogs, ASharedLogRootServesADeadDaemonsOutput) {
  TempDir dir;
  const std::string shared = dir.file("shared-logs");
  DaemonPair pair(dir, pair_settings({"spawner.log_root=" + shared}));
  Daemon& n1 = pair.n1;
  const RunResult submitted =
      elasticctl_on(n1, {"submit", "--name", "shared", "--nodes", "2:2", "--", "/bin/sh", "-c",
                         "echo \"from $ELASTIC_NODE rank $RANK\""});
  ASSERT_TRUE(submitted.status.exited_with(0)) << submitted.err;
  const std::string id = "shared-1";
  ASSERT_TRUE(wait_until([&] { return job_ended(n1, id); }, kRuns)) << job_of(n1, id).dump();
  EXPECT_TRUE(std::filesystem::exists(shared + "/" + id + "/owner"));
  // Through n2 as well: its own list holds n1's rank too, so only n2 is asked.
  const json through_n2 = ctl_json(*pair.n2, {"logs", id, "--all", "--json"});
  ASSERT_FALSE(through_n2.is_null());
  std::string text;
  for (const json& reply : through_n2["logs"]) {
    EXPECT_EQ(reply.value("node", ""), "n2") << reply.dump();
    text += reply.value("data", "");
  }
  EXPECT_THAT(text, HasSubstr("from n1 rank "));
  EXPECT_THAT(text, HasSubstr("from n2 rank "));
  pair.n2->process().signal(SIGKILL);
  pair.n2->process().wait(std::chrono::seconds(10));
  ASSERT_TRUE(wait_until([&] { return sees(n1, "n2", "dead"); }, kConverge));
  const RunResult r = elasticctl_on(n1, {"logs", id, "--all"});
  ASSERT_TRUE(r.status.exited_with(0)) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_THAT(r.out, HasSubstr("from n1 rank "));
  EXPECT_THAT(r.out, HasSubstr("from n2 rank ")) << "the dead daemon's output, through n1";
  const json listed = ctl_json(n1, {"logs", id, "--all", "--json"});
  ASSERT_FALSE(listed.is_null());
  for (const json& reply : listed["logs"]) {
    EXPECT_EQ(reply.value("node", ""), "n1");
    EXPECT_EQ(reply.value("path", "").rfind(shared + "/" + id + "/round-", 0), 0u) << reply.dump();
  }
}

}  // namespace
}  // namespace elastic::testing
