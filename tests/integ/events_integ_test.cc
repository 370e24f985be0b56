// Integration tier: events and recovery incident timelines in real elasticd processes on
// 127.0.0.1. Two daemons (n1 the only voter, so the leader; n2 forwards client requests) run a
// job of progress_worker processes, which report steps through the worker progress protocol;
// a worker crash makes an incident whose timeline `elasticctl events JOB` shows. Progress from
// a user who does not own the job is refused. Every wait polls with a deadline.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/integ/daemon_under_test.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace elastic::testing {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

constexpr auto kRecover = std::chrono::seconds(30);

std::vector<std::string> ctl_args(const Daemon& daemon, std::vector<std::string> args) {
  std::vector<std::string> argv = {"-c", "", "--set", "control.socket=" + daemon.socket()};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

double seconds(const json& incident, const char* key) {
  return incident[key].is_number() ? incident[key].get<double>() : -1.0;
}

TEST(EventsInteg, AWorkerCrashHasACompleteIncidentTimeline) {
  TempDir dir;
  DaemonPair p(dir);
  const RunResult submitted = elasticctl(ctl_args(
      *p.n2, {"submit", "--name", "steps", "--nodes", "2:2", "--max-restarts", "3",
              "--restart-backoff", "0s", "--env", "CRASH_RANK=1", "--", PROGRESS_WORKER_PATH}));
  ASSERT_TRUE(submitted.status.exited_with(0)) << submitted.err;
  const std::string id = "steps-1";
  // Round 1: rank 1 exits 3 after 1.5 s; round 2 (a restart on the same two nodes) resumes
  // "from step 5" and keeps reporting steps.
  json incident;
  ASSERT_TRUE(wait_first_incident_complete(*p.n2, id, incident, kRecover))
      << incident.dump() << "\n"
      << p.n1.process().err();
  EXPECT_EQ(incident["job"], id);
  EXPECT_EQ(incident["cause"], "worker_failed");
  EXPECT_EQ(incident["from_round"], 1);
  EXPECT_EQ(incident["to_round"], 2);
  EXPECT_EQ(incident["to_nodes"], 2);
  EXPECT_EQ(incident["given_up"], false) << incident.dump();
  // Every point is known and in order.
  const double detected = seconds(incident, "detected_s");
  const double stopped = seconds(incident, "stopped_s");
  const double rendezvous = seconds(incident, "rendezvous_s");
  const double first_step = seconds(incident, "first_step_s");
  EXPECT_GE(detected, 0) << incident.dump();
  EXPECT_GE(stopped, detected) << incident.dump();
  EXPECT_GE(rendezvous, stopped) << incident.dump();
  EXPECT_GE(first_step, rendezvous) << incident.dump();
  EXPECT_LT(first_step, 20) << incident.dump();
  EXPECT_EQ(incident["resumed_from"], 5);
  ASSERT_TRUE(incident["steps_lost"].is_number_integer()) << incident.dump();
  EXPECT_GE(incident["steps_lost"].get<std::int64_t>(), 0) << incident.dump();

  // The human view: job events, cluster events and the timeline.
  const RunResult human = elasticctl(ctl_args(*p.n2, {"events", id}));
  ASSERT_TRUE(human.status.exited_with(0)) << human.err;
  EXPECT_THAT(human.out,
              HasSubstr("incident " + incident["id"].dump() + "  job " + id + "  worker_failed"));
  EXPECT_THAT(human.out, HasSubstr("  first step    +"));
  EXPECT_THAT(human.out, HasSubstr("(resumed from step 5; "));
  EXPECT_THAT(human.out, HasSubstr("round_opened"));
  // Without a job: the cluster's events too (members joining, the election).
  const json all = ctl_json(*p.n2, {"events", "--json"});
  ASSERT_FALSE(all.is_null());
  std::set<std::string> kinds;
  for (const json& e : all["cluster"]) kinds.insert(e["kind"].get<std::string>());
  EXPECT_TRUE(kinds.contains("member_joined")) << all.dump();
  EXPECT_TRUE(kinds.contains("leader_elected")) << all.dump();
  EXPECT_TRUE(kinds.contains("round_opened")) << all.dump();
  EXPECT_TRUE(kinds.contains("incident")) << all.dump();
  EXPECT_TRUE(elasticctl(ctl_args(p.n1, {"cancel", id})).status.exited_with(0));
}

// A script that reports no progress (sleep) on three daemons; n3 is killed, the job recovers on
// n1 and n2 (round 2), n3 comes back and the job grows (round 3). The node loss's timeline ends
// at round 2's rendezvous with "no progress reports" (it once stayed "(in
// progress)" and its rendezvous named the grow round, "+54.65 s (round 3)", where round 2 had
// opened at +2.7 s).
TEST(EventsInteg, AHostLossOfAJobWithoutProgressEndsAtTheRecoveryRound) {
  TempDir dir;
  Daemon n1{dir, "n1", {}};
  n1.start();
  std::vector<std::unique_ptr<Daemon>> others;
  for (const char* name : {"n2", "n3"}) {
    others.push_back(std::make_unique<Daemon>(dir, name, std::vector<std::string>{n1.seed()}));
    others.back()->start();
  }
  Daemon& n3 = *others[1];
  ASSERT_TRUE(wait_until([&] { return all_alive({&n1, others[0].get(), &n3}); }, kConverge));
  const RunResult submitted = elasticctl(
      ctl_args(n1, {"submit", "--name", "quiet", "--nodes", "2:3", "--", "/bin/sleep", "600"}));
  ASSERT_TRUE(submitted.status.exited_with(0)) << submitted.err;
  const std::string id = "quiet-1";
  json job;
  const auto running_on = [&](std::size_t nodes, std::uint64_t round) {
    job = ctl_json(n1, {"status", id, "--json"});
    return !job.is_null() && job["state"] == "running" && job["ranks"].size() == nodes &&
           job["round"] == round;
  };
  ASSERT_TRUE(wait_until([&] { return running_on(3, 1); }, kRecover)) << job.dump();
  n3.process().signal(SIGKILL);
  n3.process().wait(std::chrono::seconds(10));
  ASSERT_TRUE(wait_until([&] { return running_on(2, 2); }, kRecover)) << job.dump();
  n3.start();
  ASSERT_TRUE(wait_until([&] { return running_on(3, 3); }, kRecover)) << job.dump();
  json incidents;
  ASSERT_TRUE(wait_until(
      [&] {
        const json reply = ctl_json(n1, {"events", id, "--json"});
        if (reply.is_null()) return false;
        incidents = reply["incidents"];
        return incidents.size() == 2 && incidents[1]["rendezvous_s"].is_number();
      },
      kRecover))
      << incidents.dump(1);
  const json& loss = incidents[0];
  EXPECT_EQ(loss["cause"], "node_lost") << loss.dump();
  EXPECT_EQ(loss["node"], "n3") << loss.dump();
  EXPECT_EQ(loss["from_round"], 1);
  EXPECT_EQ(loss["to_round"], 2) << loss.dump();
  EXPECT_EQ(loss["to_nodes"], 2) << loss.dump();
  EXPECT_TRUE(loss["rendezvous_s"].is_number()) << loss.dump();
  EXPECT_EQ(loss["complete"], true) << loss.dump();
  EXPECT_EQ(loss["progress_reports"], false) << loss.dump();
  EXPECT_EQ(incidents[1]["cause"], "grow") << incidents[1].dump();
  EXPECT_EQ(incidents[1]["to_round"], 3) << incidents[1].dump();
  const RunResult human = elasticctl(ctl_args(n1, {"events", id}));
  ASSERT_TRUE(human.status.exited_with(0)) << human.err;
  EXPECT_THAT(human.out, HasSubstr("(round 2, 2 nodes)")) << human.out;
  EXPECT_THAT(human.out, HasSubstr("(no progress reports: the workers started at the rendezvous)"))
      << human.out;
  EXPECT_THAT(human.out, ::testing::Not(HasSubstr("(in progress)"))) << human.out;
  EXPECT_TRUE(elasticctl(ctl_args(n1, {"cancel", id})).status.exited_with(0));
}

// Three voters and a non-voter (n4); the two voters that do not lead are drained (control
// plane only, as on the GPU machine's bench), so the job runs on the leader and n4. The
// leader's daemon is killed (its worker dies with it): the new leader, not a member of the job,
// must not count n4 as lost before it has heard n4's slots; it replaces the one lost node at
// once (it once said "node h1 (generation 1) and 2 more were lost; 0 of the 2 nodes needed
// remain").
TEST(EventsInteg, TheLeadersLossIsOneLostNodeInTheJobsReason) {
  TempDir dir;
  const std::vector<std::string> voters = {"n1", "n2", "n3"};
  std::vector<std::unique_ptr<Daemon>> daemons;
  daemons.push_back(std::make_unique<Daemon>(dir, "n1", std::vector<std::string>{}));
  daemons[0]->set_voters(voters);
  daemons[0]->start();
  for (const char* name : {"n2", "n3", "n4"}) {
    daemons.push_back(
        std::make_unique<Daemon>(dir, name, std::vector<std::string>{daemons[0]->seed()}));
    daemons.back()->set_voters(voters);
    daemons.back()->start();
  }
  std::vector<Daemon*> all;
  for (auto& d : daemons) all.push_back(d.get());
  ASSERT_TRUE(wait_until([&] { return all_alive(all); }, kConverge)) << describe(all);
  std::string leader;
  ASSERT_TRUE(wait_until(
      [&] {
        const json status = ctl_json(*all[3], {"status", "--json"});
        leader = status.is_null() ? "" : status["consensus"].value("leader", "");
        return !leader.empty();
      },
      kConverge));
  Daemon* victim = nullptr;
  for (Daemon* d : all) {
    if (d->name() == leader) {
      victim = d;
    } else if (d->name() != "n4") {
      ASSERT_TRUE(elasticctl(ctl_args(*all[3], {"drain", d->name(), "--reason", "control plane"}))
                      .status.exited_with(0));
    }
  }
  ASSERT_NE(victim, nullptr) << leader;
  const RunResult submitted = elasticctl(
      ctl_args(*all[3], {"submit", "--name", "pair", "--nodes", "1:2", "--", "/bin/sleep", "600"}));
  ASSERT_TRUE(submitted.status.exited_with(0)) << submitted.err;
  const std::string id = "pair-1";
  json job;
  const auto running_on = [&](std::size_t nodes, std::uint64_t after_round) {
    job = ctl_json(*all[3], {"status", id, "--json"});
    return !job.is_null() && job["state"] == "running" && job["ranks"].size() == nodes &&
           job["round"].get<std::uint64_t>() > after_round;
  };
  ASSERT_TRUE(wait_until([&] { return running_on(2, 0); }, kRecover)) << job.dump();
  const std::uint64_t round = job["round"].get<std::uint64_t>();
  victim->process().signal(SIGKILL);
  victim->process().wait(std::chrono::seconds(10));
  ASSERT_TRUE(wait_until([&] { return running_on(1, round); }, kRecover)) << job.dump();
  const std::string lost =
      "node " + leader + " (generation " + std::to_string(victim->generation()) + ") was lost";
  bool named = false;
  for (const json& event : job["events"]) {
    const std::string reason = event.value("reason", "");
    EXPECT_THAT(reason, ::testing::Not(HasSubstr("more were lost"))) << job.dump(1);
    EXPECT_THAT(reason, ::testing::Not(HasSubstr("needed remain"))) << job.dump(1);
    named = named || reason.find(lost) != std::string::npos;
  }
  EXPECT_TRUE(named) << lost << "\n" << job.dump(1);
  EXPECT_TRUE(elasticctl(ctl_args(*all[3], {"cancel", id})).status.exited_with(0));
}

TEST(EventsInteg, ProgressFromAUserWhoDoesNotOwnTheJobIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to send progress as another uid";
  TempDir dir;
  DaemonPair p(dir);
  const RunResult submitted = elasticctl(
      ctl_args(p.n1, {"submit", "--name", "mine", "--nodes", "1:1", "--", "/bin/sleep", "600"}));
  ASSERT_TRUE(submitted.status.exited_with(0)) << submitted.err;
  const std::string id = "mine-1";
  // Which daemon runs it, and its round.
  Daemon* host = nullptr;
  std::uint64_t round = 0;
  ASSERT_TRUE(wait_until(
      [&] {
        for (Daemon* d : {&p.n1, p.n2.get()}) {
          const json status = ctl_json(*d, {"status", "--json"});
          if (status.is_null()) continue;
          for (const json& w : status.value("workers", json::array())) {
            if (w["job"] == id && w["state"] == "running") {
              host = d;
              round = w["round"].get<std::uint64_t>();
            }
          }
        }
        return host != nullptr;
      },
      kRecover));
  // Other users must reach the control socket: open the test's own directories to them.
  if (const std::string closed = dir.share_with_others(host->socket()); !closed.empty()) {
    GTEST_SKIP() << closed << " does not let other users through (set TMPDIR to one that does)";
  }
  const std::map<std::string, std::string> env = {{"ELASTIC_CONTROL_SOCKET", host->socket()},
                                                  {"ELASTIC_JOB_ID", id},
                                                  {"ELASTIC_ROUND", std::to_string(round)},
                                                  {"RANK", "0"},
                                                  {"PROGRESS_ONCE", "1"}};
  const RunResult foreign = run({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534",
                                 "--clear-groups", PROGRESS_WORKER_PATH},
                                env, std::chrono::seconds(10));
  EXPECT_TRUE(foreign.status.exited_with(0)) << foreign.err;
  EXPECT_THAT(foreign.err, HasSubstr("Only the owner of job mine-1 (uid 0) or root may report "
                                     "its progress, not uid 65534."));
  // Root (the owner here) is accepted: nothing is logged.
  const RunResult owner = run({PROGRESS_WORKER_PATH}, env, std::chrono::seconds(10));
  EXPECT_TRUE(owner.status.exited_with(0));
  EXPECT_EQ(owner.err, "");
  // A job that has no workers on that daemon is refused too.
  auto elsewhere = env;
  elsewhere["ELASTIC_JOB_ID"] = "nosuch-9";
  const RunResult unknown = run({PROGRESS_WORKER_PATH}, elsewhere, std::chrono::seconds(10));
  EXPECT_THAT(unknown.err, HasSubstr("Job nosuch-9 runs no workers on node " + host->name()));
  EXPECT_TRUE(elasticctl(ctl_args(p.n1, {"cancel", id})).status.exited_with(0));
}

}  // namespace
}  // namespace elastic::testing
