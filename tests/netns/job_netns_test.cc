// Jobs end to end: three real elasticd daemons, one per network namespace, all three
// Raft voters, running real elastic-trainer Gloo workers (Fashion-MNIST on CPU, a small subset so
// each case stays near a minute on 2 cores). Each case is one kind of incident:
//   DemoScenario              kill -9 of a daemon: its workers die with it, the survivors re-form
//                             in place (same processes, no checkpoint read, <= 1 step lost), the
//                             restarted daemon's new rank gets the state live (grow), success
//   WorkerCrashRestarts       kill -9 of one worker: a new round on the same nodes, 1 restart;
//                             the survivors re-form in place, the replacement gets the state live
//   LeaderHostLossReformsInPlace  kill -9 of the Raft leader's daemon: the survivors re-form in
//                             place under the new leader and train on
//   HungRankIsReplaced        SIGSTOP of one worker with a 5 s hang_timeout: its daemon reports
//                             it hung and ends it, the others re-form in place, its replacement
//                             joins live
//   StalledRankIsLeftOutAndGrowsBack  one rank stuck outside its collectives: only its daemon
//                             blames it; the others re-form without its node, which grows back
//   PreemptionShrinksAndGrowsBack  a higher-priority job takes two of a running job's three
//                             hosts: it shrinks in place, and grows back when the other ends
//   RequeuedAndSuspendedJobsResumeFromTheirCheckpoint  a preemptible job at its min is requeued
//                             whole, then suspended and resumed by its owner: each time it runs
//                             again from its checkpoint, no restart counted
//   ThroughputScalingSettlesWhereItPays  (4 hosts) a job with scale "throughput" whose trainer
//                             gains nothing beyond 2 ranks: 1 -> 2 -> 3 nodes, back to 2, settled
//   BriefSigstopIsNoIncident  a daemon stopped for 200 ms: same round, no restart
//   MinorityIsFenced          partition 1|2 cutting off rank 0 mid-checkpoint: the minority's
//                             worker stops within its lease, the majority re-forms in place, and
//                             LATEST only ever moves forward to the majority's checkpoints
//   TwoJobsUseDisjointSlots   two jobs on nodes with 2 CPU slots: distinct slots, disjoint cpus
//   CancelLeavesNoProcess     cancel: state cancelled and no worker process left
//   BadSpecsAreRejected       bad job specs: refused with their sentence, no job created
//   NonRootSubmitterRunsAsSelf  a job submitted as uid 65534 runs its workers as 65534
//   IncidentTimelineOfADaemonKill  kill -9 of a daemon: `elasticctl events JOB` shows the
//                             incident's complete timeline (the trainers report progress)
//   FailoverKeepsTheHistoryAndTheCurves  an incident and the job's samples/s and loss curves,
//                             replicated: the next leader (after the leader's kill -9) shows them
// What is checked is observed from outside the daemons: `elasticctl status JOB --json` (state,
// round, ranks, restarts, events), the trainers' JSON lines in the worker logs, and /proc (the
// workers are found by the ELASTIC_JOB_ID in their environment; uid and Cpus_allowed_list from
// their status). Timers are the tests' short ones (membership probes 500 ms, Raft election
// 300 ms; last call 1 s, stop grace 3 s); the job tier's keepalive and the 3 s lease are the
// daemon's defaults. Every wait is a poll with a deadline; the one timed action is the SIGSTOP
// fault itself. Needs root (skips otherwise, like the other namespace tests).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/netns/daemon_cluster.h"
#include "tests/netns/daemon_cluster_test.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace elastic::netns {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;

constexpr int kHosts = 3;
// Submit -> every worker running and training (the trainer loads the data set and meets its
// peers through the store first).
constexpr milliseconds kTrains = 90s;
// A lost node: detection (~0.4 s) + its 3 s lease + the new round's start and trainer startup.
constexpr milliseconds kRecovers = 90s;
constexpr uid_t kNobody = 65534;

// The trainer: small batches and a subset of Fashion-MNIST (quick to load), a checkpoint every
// 5 steps and a line per step, so every incident finds fresh checkpoints and progress is visible.
std::vector<std::string> trainer(const std::string& extra_steps_flag) {
  std::vector<std::string> argv = small_fmnist_trainer(ELASTIC_TRAINER_PATH, 5, 1000);
  if (!extra_steps_flag.empty()) {
    argv.push_back("--max-steps");
    argv.push_back(extra_steps_flag);
  }
  return argv;
}

class JobNetnsTest : public DaemonClusterTest {
 protected:
  // The work dir holds every host's control socket and the checkpoints: reachable and the
  // checkpoint root writable by the non-root submitter of NonRootSubmitterRunsAsSelf.
  explicit JobNetnsTest(int hosts = kHosts)
      : DaemonClusterTest({.hosts = hosts, .share_work_dir = true, .log_tail = 6000}) {}

  void SetUp() override {
    DaemonClusterTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    checkpoints_ = work_.path() + "/checkpoints";
    std::filesystem::create_directories(checkpoints_);
    ::chmod(checkpoints_.c_str(), 01777);
  }

  // Starts the three daemons with the tests' job settings plus `extra` overrides.
  void start(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> sets = {
        "rendezvous.last_call=1s",
        "spawner.stop_grace=3s",
        "checkpoint.root=" + checkpoints_,
    };
    sets.insert(sets.end(), extra.begin(), extra.end());
    daemons_->set_overrides(sets);
    start_converged();
    if (HasFatalFailure()) return;
    leader_ = daemons_->wait_leader(all_hosts(), kConverge);
    ASSERT_FALSE(leader_.empty()) << "no leader was elected:\n"
                                  << daemons_->describe_raft(all_hosts());
  }

  void failure_context(std::ostream& out) override {
    for (const auto& id : jobs_) {
      for (const int host : all_hosts()) {
        if (!daemons_->running(host)) continue;
        const auto view = daemons_->job(host, id);
        out << "---- job " << id << " through h" << host << ": "
            << (view.ok() ? view->json : view.error().message) << "\n";
        break;
      }
      for (const int host : all_hosts()) {
        out << "---- worker logs of " << id << " on h" << host << " (daemon lines):\n"
            << tail(daemons_->daemon_log_lines(host, id), 3000);
      }
      for (const auto& worker : find_workers(id)) {
        out << "---- worker left: pid " << worker.pid << " " << worker.node << " rank "
            << worker.rank << " round " << worker.round << "\n";
      }
    }
  }

  // Submits through `host`; fails the test unless accepted. Returns the id.
  std::string submit(int host, const std::vector<std::string>& args,
                     std::optional<uid_t> as_uid = std::nullopt) {
    const Submitted submitted = daemons_->submit_job(host, args, as_uid);
    EXPECT_EQ(submitted.exit_code, 0) << submitted.output;
    EXPECT_FALSE(submitted.id.empty()) << submitted.output;
    if (!submitted.id.empty()) jobs_.push_back(submitted.id);
    return submitted.id;
  }

  // The first host whose daemon runs (ctl calls go there).
  int any_running() const {
    for (const int host : all_hosts()) {
      if (daemons_->running(host)) return host;
    }
    return 0;
  }

  // The highest step of `job`'s round `round` in the trainer logs (-1 if none yet).
  std::int64_t last_step(const std::string& job, std::uint64_t round) const {
    std::int64_t step = -1;
    for (const auto& line : daemons_->trainer_lines(job)) {
      if (line.event == "step" && line.round == static_cast<std::int64_t>(round)) {
        step = std::max(step, line.step);
      }
    }
    return step;
  }

  // The trainer's line `event` of `job`'s round `round`, if there is one.
  std::optional<TrainerLine> line_of(const std::string& job, const std::string& event,
                                     std::uint64_t round) const {
    for (const auto& line : daemons_->trainer_lines(job)) {
      if (line.event == event && line.round == static_cast<std::int64_t>(round)) return line;
    }
    return std::nullopt;
  }

  // Waits until `job` runs on `nodes` nodes in a round above `after_round` and its trainers
  // have logged a step of that round; returns that view (state "" on timeout, with a message).
  JobView wait_training(const std::string& job, std::size_t nodes, std::uint64_t after_round,
                        milliseconds timeout) {
    JobView view;
    const bool ok = testing::wait_until(
        [&] {
          auto seen = daemons_->job(any_running(), job);
          if (!seen.ok()) return false;
          view = std::move(seen).value();
          return view.state == "running" && view.round > after_round &&
                 view.ranks.size() == nodes && last_step(job, view.round) >= 1;
        },
        timeout);
    EXPECT_TRUE(ok) << "job " << job << " is not training on " << nodes << " nodes after round "
                    << after_round << "; last seen: " << view.summary();
    if (!ok) view.state.clear();
    return view;
  }

  // Waits until `job` has published a checkpoint (its LATEST file exists).
  void wait_checkpoint(const std::string& job) {
    const std::string latest = checkpoints_ + "/" + job + "/LATEST";
    ASSERT_TRUE(testing::wait_until([&] { return std::filesystem::exists(latest); }, kTrains))
        << "no checkpoint was published: " << latest;
  }

  // Submits job `name` on 2 to 3 nodes running the trainer (`max_steps` as trainer() takes it)
  // through host 0, and waits until it trains on all three and has published a checkpoint. Sets
  // `job` to its id and `first` to that first training view.
  void submit_training(const std::string& name, const std::string& max_steps, std::string* job,
                       JobView* first) {
    std::vector<std::string> args = {"--name", name, "--nodes", "2:3", "--"};
    for (auto& arg : trainer(max_steps)) args.push_back(arg);
    *job = submit(0, args);
    ASSERT_FALSE(job->empty());
    *first = wait_training(*job, 3, 0, kTrains);
    ASSERT_FALSE(first->state.empty());
    ASSERT_NO_FATAL_FAILURE(wait_checkpoint(*job));
  }

  // Every worker of `job` on `node` (all of them when node is "").
  std::vector<WorkerProc> workers_on(const std::string& job, const std::string& node) const {
    std::vector<WorkerProc> found;
    for (auto& worker : find_workers(job)) {
      if (node.empty() || worker.node == node) found.push_back(worker);
    }
    return found;
  }

  // Every worker of `job` that is not on `node`.
  std::vector<WorkerProc> workers_but(const std::string& job, const std::string& node) const {
    std::vector<WorkerProc> found;
    for (auto& worker : find_workers(job)) {
      if (worker.node != node) found.push_back(worker);
    }
    return found;
  }

  // kill -9 of `node`'s daemon. PR_SET_PDEATHSIG: its workers `victims` die with it instead of
  // training on as orphans.
  void kill_daemon(const std::string& node, const std::vector<WorkerProc>& victims) {
    const int host = daemons_->host_of(node);
    daemons_->daemon(host).signal(SIGKILL);
    ASSERT_TRUE(daemons_->daemon(host).wait(10s).has_value());
    EXPECT_TRUE(testing::wait_until([&] { return all_gone(victims); }, 5s))
        << "a worker of the killed daemon " << node << " survived it";
  }

  // kill -9 of `node`'s daemon while `job` trains in round `first` on three nodes (one worker
  // each): the other two re-form in place without it (expect_in_place), in a round that consumes
  // no restart and starts no process. Sets `shrunk` to that round's view and `lines` to its
  // reform lines.
  void lose_node(const std::string& job, const JobView& first, const std::string& node,
                 JobView* shrunk, std::vector<nlohmann::json>* lines) {
    const auto victims = workers_on(job, node);
    ASSERT_EQ(victims.size(), 1u) << "one worker per node (one CPU slot per host on this VM)";
    const std::vector<WorkerProc> survivors = workers_but(job, node);
    ASSERT_EQ(survivors.size(), 2u);
    ASSERT_NO_FATAL_FAILURE(kill_daemon(node, victims));
    const std::int64_t before = last_step(job, first.round);

    *shrunk = wait_training(job, 2, first.round, kRecovers);
    ASSERT_FALSE(shrunk->state.empty());
    EXPECT_FALSE(shrunk->has_node(node)) << shrunk->summary();
    EXPECT_EQ(shrunk->restarts, 0u) << "a lost node does not consume a restart";
    *lines = expect_in_place(job, shrunk->round, 2, survivors, before);
    EXPECT_EQ(workers_on(job, "").size(), 2u) << "a process was started for the new round";
  }

  static bool all_gone(const std::vector<WorkerProc>& workers) {
    return std::all_of(workers.begin(), workers.end(),
                       [](const WorkerProc& w) { return process_gone(w.pid); });
  }

  // A node of `view`'s round that is not the Raft leader.
  std::string non_leader(const JobView& view) {
    const std::string leader = daemons_->wait_leader(all_hosts(), kConverge);
    for (auto it = view.ranks.rbegin(); it != view.ranks.rend(); ++it) {
      if (it->node != leader) return it->node;
    }
    return "";
  }

  // The "reform" lines of `job`'s round `round` (one per rank that re-formed in place or joined
  // live), as JSON with "host" added (whose log it is in).
  std::vector<nlohmann::json> reform_lines(const std::string& job, std::uint64_t round) const {
    std::vector<nlohmann::json> found;
    for (const auto& line : daemons_->trainer_lines(job)) {
      if (line.event != "reform" || line.round != static_cast<std::int64_t>(round)) continue;
      nlohmann::json json = nlohmann::json::parse(line.text, nullptr, false);
      if (!json.is_object()) continue;
      json["host"] = line.host;
      found.push_back(std::move(json));
    }
    return found;
  }

  // Round `round` of `job` re-formed in place: every rank printed its "reform" line (the wait has
  // a deadline), no rank read a checkpoint ("resume"), and each of `survivors` still runs (the
  // same process) and re-formed from its own state at a step no more than one behind `before`
  // (the last step logged before the incident). Returns the reform lines.
  std::vector<nlohmann::json> expect_in_place(const std::string& job, std::uint64_t round,
                                              std::int64_t world,
                                              const std::vector<WorkerProc>& survivors,
                                              std::int64_t before) {
    std::vector<nlohmann::json> lines;
    EXPECT_TRUE(testing::wait_until(
        [&] {
          lines = reform_lines(job, round);
          return static_cast<std::int64_t>(lines.size()) >= world;
        },
        30s))
        << lines.size() << " of " << world << " ranks printed a reform line for round " << round;
    EXPECT_FALSE(line_of(job, "resume", round).has_value())
        << "a rank of round " << round << " read a checkpoint";
    for (const auto& line : lines) EXPECT_EQ(line.value("world_size", -1), world) << line.dump();
    const auto now = workers_on(job, "");
    for (const WorkerProc& s : survivors) {
      EXPECT_TRUE(
          std::any_of(now.begin(), now.end(), [&](const WorkerProc& w) { return w.pid == s.pid; }))
          << "the survivor pid " << s.pid << " on " << s.node << " was replaced";
      const int host = daemons_->host_of(s.node);
      const auto own = std::find_if(lines.begin(), lines.end(), [&](const nlohmann::json& l) {
        return l.value("host", -1) == host;
      });
      if (own == lines.end()) {
        ADD_FAILURE() << "the survivor on " << s.node << " printed no reform line";
        continue;
      }
      EXPECT_FALSE(own->value("joined", false))
          << "a survivor re-forms, it does not join: " << own->dump();
      EXPECT_GE(own->value("step", std::int64_t{-1}), before - 1) << own->dump();
    }
    return lines;
  }

  // The rank on `node` in the reform `lines` of a round is a new process (not `old_pid`) that
  // received the state live: it joined, and the plan lists it among the receivers, not as the
  // source.
  void expect_received(const std::vector<nlohmann::json>& lines, const std::string& job,
                       const std::string& node, pid_t old_pid) {
    const auto now = workers_on(job, node);
    ASSERT_EQ(now.size(), 1u) << "one worker on " << node;
    EXPECT_NE(now[0].pid, old_pid) << "the replaced worker on " << node << " still runs";
    const int host = daemons_->host_of(node);
    const auto own = std::find_if(lines.begin(), lines.end(), [&](const nlohmann::json& l) {
      return l.value("host", -1) == host;
    });
    ASSERT_NE(own, lines.end()) << "the replacement on " << node << " printed no reform line";
    EXPECT_TRUE(own->value("joined", false)) << own->dump();
    const int rank = own->value("rank", -1);
    EXPECT_NE(own->value("source", -1), rank) << own->dump();
    const auto receivers = own->value("receivers", std::vector<int>{});
    EXPECT_NE(std::find(receivers.begin(), receivers.end(), rank), receivers.end()) << own->dump();
  }

  // The rank-0 steps of round `round` go on: `steps` more than `from` logged within the deadline.
  void expect_trains_on(const std::string& job, std::uint64_t round, std::int64_t from,
                        std::int64_t steps) {
    EXPECT_TRUE(testing::wait_until([&] { return last_step(job, round) >= from + steps; }, 60s))
        << "round " << round << " stopped at step " << last_step(job, round) << " (from " << from
        << ")";
  }

  // What `job`'s LATEST names now: the step dir's state.json (step, round, world_size); nullopt
  // when there is none, or it was replaced while being read (only the newest few are kept).
  struct Published {
    std::int64_t step = -1, round = -1, world_size = 0;
  };
  std::optional<Published> latest(const std::string& job) const {
    const std::string dir = checkpoints_ + "/" + job;
    std::string name = testing::read_file(dir + "/LATEST");
    while (!name.empty() && (name.back() == '\n' || name.back() == '\r')) name.pop_back();
    if (name.empty()) return std::nullopt;
    const auto json =
        nlohmann::json::parse(testing::read_file(dir + "/" + name + "/state.json"), nullptr, false);
    if (!json.is_object()) return std::nullopt;
    return Published{json.value("step", std::int64_t{-1}), json.value("round", std::int64_t{-1}),
                     json.value("world_size", std::int64_t{0})};
  }

  // The tmp dir of the checkpoint of `job` being written now (".tmp-<step>-r<round>"), or "".
  std::string in_flight(const std::string& job) const {
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(checkpoints_ + "/" + job, error)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind(".tmp-", 0) == 0) return name;
    }
    return "";
  }

  std::string checkpoints_;
  std::string leader_;
  std::vector<std::string> jobs_;  // submitted, for failure messages
};

// The demo, asserted: kill -9 of a daemon that is not the leader.
TEST_F(JobNetnsTest, DemoScenario) {
  ASSERT_NO_FATAL_FAILURE(start());
  // 600 steps: a few seconds of training on each side of each incident on a quiet machine,
  // yet the job is still running when the killed node is back.
  std::string job;
  JobView first;
  ASSERT_NO_FATAL_FAILURE(submit_training("demo", "600", &job, &first));

  const std::string victim = non_leader(first);
  ASSERT_FALSE(victim.empty());
  const int v = daemons_->host_of(victim);
  const auto victims = workers_on(job, victim);
  ASSERT_EQ(victims.size(), 1u) << "one worker per node (one CPU slot per host on this VM)";
  // The spawner's own line in the worker log names the pid, as /proc does.
  EXPECT_NE(daemons_->daemon_log_lines(v, job).find(std::to_string(victims[0].pid)),
            std::string::npos)
      << daemons_->daemon_log_lines(v, job);

  // The survivors re-form in place: same processes, state kept in memory, at most the step the
  // lost peer broke lost; no checkpoint is read.
  JobView shrunk;
  std::vector<nlohmann::json> reformed;
  ASSERT_NO_FATAL_FAILURE(lose_node(job, first, victim, &shrunk, &reformed));

  // Grow: the running ranks re-form in place once more, and the returning node's rank starts
  // cold and receives the state from one of them.
  const std::vector<WorkerProc> running = workers_on(job, "");
  const std::int64_t before_grow = last_step(job, shrunk.round);
  ASSERT_TRUE(daemons_->start(v).ok());
  const JobView grown = wait_training(job, 3, shrunk.round, kRecovers);
  ASSERT_FALSE(grown.state.empty());
  const auto regrow = expect_in_place(job, grown.round, 3, running, before_grow);
  ASSERT_NO_FATAL_FAILURE(expect_received(regrow, job, victim, victims[0].pid));

  JobView end;
  ASSERT_TRUE(daemons_->wait_job(
      0, job, [](const JobView& view) { return view.terminal(); }, 180s, &end))
      << end.summary();
  EXPECT_EQ(end.state, "succeeded") << end.summary();
  EXPECT_TRUE(testing::wait_until([&] { return find_workers(job).empty(); }, 10s));
  std::int64_t final_step = -1;
  for (const auto& line : daemons_->trainer_lines(job)) {
    if (line.event == "summary") final_step = std::max(final_step, line.step);
  }
  EXPECT_EQ(final_step, 600);
}

// The leader's incident timeline of a lost node, fed by the trainers' progress reports.
TEST_F(JobNetnsTest, IncidentTimelineOfADaemonKill) {
  ASSERT_NO_FATAL_FAILURE(start());
  std::string job;
  JobView first;
  ASSERT_NO_FATAL_FAILURE(submit_training("incident", "", &job, &first));
  const std::string victim = non_leader(first);
  ASSERT_FALSE(victim.empty());
  const int v = daemons_->host_of(victim);
  const int leader = daemons_->host_of(daemons_->wait_leader(all_hosts(), kConverge));
  daemons_->daemon(v).signal(SIGKILL);
  ASSERT_TRUE(daemons_->daemon(v).wait(10s).has_value());

  nlohmann::json incident;
  const bool complete = testing::wait_until(
      [&] {
        const auto r = daemons_->ctl(leader, {"events", job, "--json"});
        const auto reply = nlohmann::json::parse(r.out, nullptr, false);
        if (reply.is_discarded() || !reply.contains("incidents") || reply["incidents"].empty()) {
          return false;
        }
        incident = reply["incidents"][0];
        return incident.value("complete", false);
      },
      kRecovers);
  ASSERT_TRUE(complete) << incident.dump();
  EXPECT_EQ(incident["cause"], "node_lost") << incident.dump();
  EXPECT_EQ(incident["node"], victim) << incident.dump();
  EXPECT_EQ(incident["from_round"], first.round);
  EXPECT_EQ(incident["to_nodes"], 2);
  EXPECT_FALSE(incident["given_up"].get<bool>()) << incident.dump();
  double previous = 0;
  for (const char* point : {"detected_s", "stopped_s", "rendezvous_s", "first_step_s"}) {
    ASSERT_TRUE(incident[point].is_number()) << point << ": " << incident.dump();
    EXPECT_GE(incident[point].get<double>(), previous) << point << ": " << incident.dump();
    previous = incident[point].get<double>();
  }
  ASSERT_TRUE(incident["steps_lost"].is_number_integer()) << incident.dump();
  EXPECT_GE(incident["steps_lost"].get<std::int64_t>(), 0) << incident.dump();
  const auto human = daemons_->ctl(leader, {"events", job});
  EXPECT_NE(human.out.find("node_lost " + victim), std::string::npos) << human.out;
  std::cerr << human.out;  // the timeline, for the test log
}

// The history survives a failover: a daemon's kill -9 makes a complete incident, the trainers'
// progress makes the job's training curves (samples/s and loss points, every 10 s), the leader
// replicates both; the killed daemon comes back, then the leader's host is killed: the new
// leader shows the same incident, the old leader's election event and the same curve points.
TEST_F(JobNetnsTest, FailoverKeepsTheHistoryAndTheCurves) {
  ASSERT_NO_FATAL_FAILURE(start());
  std::string job;
  JobView first;
  ASSERT_NO_FATAL_FAILURE(submit_training("history", "", &job, &first));
  const std::string victim = non_leader(first);
  ASSERT_FALSE(victim.empty());
  const int v = daemons_->host_of(victim);
  const std::string old_leader = daemons_->wait_leader(all_hosts(), kConverge);
  const int leader = daemons_->host_of(old_leader);
  daemons_->daemon(v).signal(SIGKILL);
  ASSERT_TRUE(daemons_->daemon(v).wait(10s).has_value());

  // The incident, complete on the leader.
  const auto events_of = [&](int host) {
    const auto r = daemons_->ctl(host, {"events", job, "--json"});
    return nlohmann::json::parse(r.out, nullptr, false);
  };
  nlohmann::json incident;
  ASSERT_TRUE(testing::wait_until(
      [&] {
        const auto reply = events_of(leader);
        if (reply.is_discarded() || !reply.contains("incidents") || reply["incidents"].empty()) {
          return false;
        }
        incident = reply["incidents"][0];
        return incident.value("complete", false) && incident["first_step_s"].is_number();
      },
      kRecovers))
      << incident.dump();
  const double done_ms = incident["at_ms"].get<double>() +
                         1000.0 * incident["first_step_s"].get<double>();
  // A curve point stamped after the incident completed: the batch that carried it carried the
  // incident too (batches commit in order, each with everything not yet replicated).
  nlohmann::json series;
  ASSERT_TRUE(testing::wait_until(
      [&] {
        auto view = daemons_->job(leader, job);
        if (!view.ok()) return false;
        const auto reply = nlohmann::json::parse(view->json, nullptr, false);
        if (!reply.is_object() || !reply.contains("series")) return false;
        series = reply["series"];
        const auto& rates = series["samples_per_s"];
        return !rates.empty() && !series["loss"].empty() &&
               rates.back()[0].get<double>() > done_ms + 100;
      },
      40s))
      << series.dump();
  for (const auto& point : series["samples_per_s"]) {
    EXPECT_GT(point[1].get<double>(), 0) << series.dump();
  }
  for (const auto& point : series["loss"]) {
    EXPECT_TRUE(std::isfinite(point[1].get<double>())) << series.dump();
  }

  // The victim comes back (a majority must survive the next kill), then the leader dies.
  ASSERT_TRUE(daemons_->start(v).ok());
  ASSERT_FALSE(daemons_->wait_leader(all_hosts(), kConverge).empty())
      << daemons_->describe_raft(all_hosts());
  daemons_->daemon(leader).signal(SIGKILL);
  ASSERT_TRUE(daemons_->daemon(leader).wait(10s).has_value());
  std::vector<int> rest;
  for (const int host : all_hosts()) {
    if (host != leader) rest.push_back(host);
  }
  const std::string new_leader = daemons_->wait_leader(rest, kConverge);
  ASSERT_FALSE(new_leader.empty()) << daemons_->describe_raft(rest);
  ASSERT_NE(new_leader, old_leader);
  const int now_leading = daemons_->host_of(new_leader);

  nlohmann::json kept;
  ASSERT_TRUE(testing::wait_until(
      [&] {
        kept = events_of(now_leading);
        return !kept.is_discarded() && kept.contains("incidents") && !kept["incidents"].empty();
      },
      30s))
      << kept.dump();
  const nlohmann::json& again = kept["incidents"][0];
  EXPECT_EQ(again["cause"], "node_lost") << kept.dump();
  EXPECT_EQ(again["node"], victim) << kept.dump();
  EXPECT_EQ(again["from_round"], incident["from_round"]);
  EXPECT_EQ(again["first_step_s"], incident["first_step_s"]);
  EXPECT_EQ(again["at_ms"], incident["at_ms"]);
  bool elected = false;
  const auto all = daemons_->ctl(now_leading, {"events", "--json"});
  const auto every = nlohmann::json::parse(all.out, nullptr, false);
  ASSERT_TRUE(every.is_object()) << all.out;
  for (const auto& e : every["cluster"]) {
    elected |= e.value("kind", "") == "leader_elected" && e.value("node", "") == old_leader;
  }
  EXPECT_TRUE(elected) << "the old leader's election is not in the new leader's events: "
                       << every.dump();
  auto view = daemons_->job(now_leading, job);
  ASSERT_TRUE(view.ok());
  const auto reply = nlohmann::json::parse(view->json, nullptr, false);
  ASSERT_TRUE(reply.contains("series")) << view->json;
  const auto& rates = reply["series"]["samples_per_s"];
  ASSERT_GE(rates.size(), series["samples_per_s"].size()) << view->json;
  for (std::size_t i = 0; i < series["samples_per_s"].size(); ++i) {
    EXPECT_EQ(rates[i], series["samples_per_s"][i]) << "curve point " << i;
  }
}

// kill -9 of one worker: the next round keeps the nodes, the survivors re-form in place and the
// crashed rank's replacement starts cold and receives the state live.
TEST_F(JobNetnsTest, WorkerCrashRestarts) {
  ASSERT_NO_FATAL_FAILURE(start());
  // The default restart backoff: survivors that re-form in place skip it (no recovering
  // state, nothing stopped). 3:3, so the job cannot go on without the crashed rank's node: the
  // survivors wait in the re-formation for its replacement.
  std::vector<std::string> args = {"--name", "crash", "--nodes", "3:3", "--max-restarts", "3", "--"};
  for (auto& arg : trainer("")) args.push_back(arg);
  const std::string job = submit(0, args);
  ASSERT_FALSE(job.empty());
  const JobView first = wait_training(job, 3, 0, kTrains);
  ASSERT_FALSE(first.state.empty());
  ASSERT_EQ(first.restarts, 0u);
  ASSERT_NO_FATAL_FAILURE(wait_checkpoint(job));
  const auto before = workers_on(job, "");
  ASSERT_EQ(before.size(), 3u);
  const WorkerProc crashed = before[1];
  const std::vector<WorkerProc> survivors = {before[0], before[2]};
  ASSERT_EQ(::kill(crashed.pid, SIGKILL), 0);
  // No step of the round completes without the crashed rank.
  const std::int64_t last = last_step(job, first.round);

  const JobView again = wait_training(job, 3, first.round, kRecovers);
  ASSERT_FALSE(again.state.empty());
  EXPECT_EQ(again.restarts, 1u) << again.summary();
  EXPECT_EQ(again.nodes(), first.nodes()) << "the same nodes take the job again";
  const auto lines = expect_in_place(job, again.round, 3, survivors, last);
  ASSERT_NO_FATAL_FAILURE(expect_received(lines, job, crashed.node, crashed.pid));
  EXPECT_TRUE(process_gone(crashed.pid));
  // The round was opened for the crash, without a recovering state between.
  bool failure_event = false;
  for (const auto& event : again.events) {
    EXPECT_NE(event.to, "recovering") << again.json;
    failure_event |= event.round == again.round &&
                     event.reason.find("worker_failed") != std::string::npos &&
                     event.reason.find("on node " + crashed.node) != std::string::npos;
  }
  EXPECT_TRUE(failure_event) << again.json;
}

// kill -9 of the Raft leader's daemon (its worker dies with it): a new leader plans the next
// round at once and the survivors re-form in place, as for any other node.
TEST_F(JobNetnsTest, LeaderHostLossReformsInPlace) {
  ASSERT_NO_FATAL_FAILURE(start());
  std::string job;
  JobView first;
  ASSERT_NO_FATAL_FAILURE(submit_training("leaderloss", "", &job, &first));
  const std::string leader = daemons_->wait_leader(all_hosts(), kConverge);
  ASSERT_FALSE(leader.empty());
  ASSERT_TRUE(first.has_node(leader)) << first.summary();
  JobView shrunk;
  std::vector<nlohmann::json> lines;
  ASSERT_NO_FATAL_FAILURE(lose_node(job, first, leader, &shrunk, &lines));
  ASSERT_FALSE(lines.empty());
  expect_trains_on(job, shrunk.round, lines.front().value("step", std::int64_t{0}), 20);
}

// SIGSTOP of one worker (its daemon runs on) with the shortest hang_timeout (5 s): its daemon
// reports it hung and ends it (SIGABRT, which a stopped process only gets when continued, then
// SIGKILL 2 s later); the other ranks re-form in place and the stopped rank's replacement starts
// cold and receives the state live.
TEST_F(JobNetnsTest, HungRankIsReplaced) {
  ASSERT_NO_FATAL_FAILURE(start());
  std::vector<std::string> args = {
      "--name", "hang",           "--nodes", "3:3", "--max-restarts", "3", "--restart-backoff",
      "0s",     "--hang-timeout", "5s",      "--"};
  for (auto& arg : trainer("")) args.push_back(arg);
  const std::string job = submit(0, args);
  ASSERT_FALSE(job.empty());
  const JobView first = wait_training(job, 3, 0, kTrains);
  ASSERT_FALSE(first.state.empty());
  const std::string node = non_leader(first);
  ASSERT_FALSE(node.empty());
  const auto stopped = workers_on(job, node);
  ASSERT_EQ(stopped.size(), 1u);
  const std::vector<WorkerProc> survivors = workers_but(job, node);
  ASSERT_EQ(survivors.size(), 2u);
  // Stopped in training, not within its first steps (that is a silence of the whole timeout).
  ASSERT_TRUE(testing::wait_until([&] { return last_step(job, first.round) >= 20; }, kTrains));
  // The stopped worker is this test's to end should the daemon not (it is never continued).
  struct KillStopped {
    pid_t pid;
    ~KillStopped() {
      if (!process_gone(pid)) ::kill(pid, SIGKILL);
    }
  } kill_stopped{stopped[0].pid};

  ASSERT_EQ(::kill(stopped[0].pid, SIGSTOP), 0);
  const auto stopped_at = std::chrono::steady_clock::now();
  // hang_timeout, the abort grace and a loaded 2-core machine.
  EXPECT_TRUE(testing::wait_until([&] { return process_gone(stopped[0].pid); }, 15s))
      << "the stopped worker pid " << stopped[0].pid << " on " << node << " was not ended";
  const auto ended_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped_at).count();
  // The timeout runs from the worker's last step, a step time (and at most one "alive" period)
  // before the SIGSTOP.
  EXPECT_GE(ended_s, 4.0) << "ended before its hang_timeout";
  const std::int64_t last = last_step(job, first.round);

  const JobView again = wait_training(job, 3, first.round, kRecovers);
  ASSERT_FALSE(again.state.empty());
  EXPECT_EQ(again.restarts, 1u) << again.summary();
  bool hang_reported = false;
  for (const auto& event : again.events) {
    hang_reported |= event.round == first.round + 1 &&
                     event.reason.find("is hung (hang_timeout") != std::string::npos &&
                     event.reason.find("on node " + node) != std::string::npos;
  }
  EXPECT_TRUE(hang_reported) << "round " << first.round + 1 << " was not opened for " << node
                             << "'s hang_timeout: " << again.json;
  const auto lines = expect_in_place(job, again.round, 3, survivors, last);
  ASSERT_NO_FATAL_FAILURE(expect_received(lines, job, node, stopped[0].pid));
  expect_trains_on(job, again.round, lines.front().value("step", std::int64_t{0}), 20);
}

// One rank stuck in its own work (--stall-at-step: it stops outside any collective, alive and
// answering its channel) while its peers wait for it in their next collective: its daemon, and
// no other, reports it hung within hang_timeout (5 s); with 2:3 nodes the others re-form in
// place without its node at once, and the node grows back with a fresh worker.
TEST_F(JobNetnsTest, StalledRankIsLeftOutAndGrowsBack) {
  ASSERT_NO_FATAL_FAILURE(start());
  std::vector<std::string> args = {"--name", "stall", "--nodes", "2:3", "--hang-timeout", "5s",
                                   "--"};
  for (auto& arg : trainer("")) args.push_back(arg);
  // Rank 2 stops at step 100: a few seconds of training on three ranks first.
  for (const char* arg : {"--stall-at-step", "100", "--stall-rank", "2"}) args.push_back(arg);
  const std::string job = submit(0, args);
  ASSERT_FALSE(job.empty());
  const JobView first = wait_training(job, 3, 0, kTrains);
  ASSERT_FALSE(first.state.empty());
  ASSERT_EQ(first.ranks.size(), 3u);
  const std::string node = first.ranks[2].node;
  const auto stalled = workers_on(job, node);
  ASSERT_EQ(stalled.size(), 1u);
  const std::vector<WorkerProc> survivors = workers_but(job, node);
  ASSERT_EQ(survivors.size(), 2u);
  ASSERT_TRUE(testing::wait_until([&] { return line_of(job, "stall", first.round).has_value(); },
                                  kTrains))
      << "rank 2 never reached step 100";

  // The next round is the two others, re-formed in place (world 2: without the stalled node).
  // It may be short: the node grows back as soon as its worker is gone, so the round is read
  // from the reform lines, not from a status poll that could miss it.
  const std::uint64_t shrunk = first.round + 1;
  const auto lines = expect_in_place(job, shrunk, 2, survivors, 100);
  ASSERT_FALSE(lines.empty());
  EXPECT_TRUE(testing::wait_until([&] { return process_gone(stalled[0].pid); }, 10s))
      << "the stalled worker pid " << stalled[0].pid << " was not ended";

  const JobView grown = wait_training(job, 3, shrunk, kRecovers);
  ASSERT_FALSE(grown.state.empty()) << "the stalled rank's node did not grow back";
  EXPECT_TRUE(grown.has_node(node)) << grown.summary();
  bool blamed = false;
  for (const auto& event : grown.events) {
    if (event.round != shrunk) continue;
    EXPECT_EQ(event.reason.find("no progress report"), std::string::npos)
        << "a daemon blamed its workers for a lack of progress: " << event.reason;
    blamed |= event.reason.find("rank 2 on node " + node + " is hung (hang_timeout 5s)") !=
                  std::string::npos &&
              event.reason.find("stuck in its own work") != std::string::npos;
  }
  EXPECT_TRUE(blamed) << "round " << shrunk << " does not blame rank 2 on " << node << ": "
                      << grown.json;
  expect_trains_on(job, grown.round, last_step(job, grown.round), 20);
}

// A low-priority job holds all three hosts; a 2-node job of higher priority arrives. The low job
// shrinks to its one-node min in place (its rank 0 keeps its process and state: no restart, no
// step lost), the high job runs on the two freed hosts and succeeds, and the low job grows back
// to three, its kept rank still the same process.
TEST_F(JobNetnsTest, PreemptionShrinksAndGrowsBack) {
  ASSERT_NO_FATAL_FAILURE(start());
  std::vector<std::string> low_args = {"--name", "low", "--nodes", "1:3", "--"};
  for (auto& arg : trainer("")) low_args.push_back(arg);
  const std::string low = submit(0, low_args);
  ASSERT_FALSE(low.empty());
  const JobView first = wait_training(low, 3, 0, kTrains);
  ASSERT_FALSE(first.state.empty());
  const std::string kept = first.ranks[0].node;
  const auto kept_worker = workers_on(low, kept);
  ASSERT_EQ(kept_worker.size(), 1u);
  const std::int64_t before = last_step(low, first.round);

  std::vector<std::string> high_args = {"--name", "high", "--nodes", "2", "--priority", "10",
                                        "--"};
  for (auto& arg : trainer("40")) high_args.push_back(arg);
  const std::string high = submit(1, high_args);
  ASSERT_FALSE(high.empty());

  // The shrink: a round of the low job on its rank-0 node alone, re-formed in place.
  const std::uint64_t shrunk = first.round + 1;
  const auto lines = expect_in_place(low, shrunk, 1, kept_worker, before);
  ASSERT_FALSE(lines.empty());
  const JobView high_done = [&] {
    JobView view;
    EXPECT_TRUE(testing::wait_until(
        [&] {
          auto seen = daemons_->job(any_running(), high);
          if (seen.ok()) view = std::move(seen).value();
          return seen.ok() && view.terminal();
        },
        kTrains + kRecovers))
        << "the high-priority job did not end: " << view.summary();
    return view;
  }();
  EXPECT_EQ(high_done.state, "succeeded") << high_done.summary();

  const JobView grown = wait_training(low, 3, shrunk, kRecovers);
  ASSERT_FALSE(grown.state.empty()) << "the low-priority job did not grow back";
  EXPECT_EQ(grown.restarts, 0u) << "a preemption or a grow consumed a restart";
  const auto now = workers_on(low, kept);
  ASSERT_EQ(now.size(), 1u);
  EXPECT_EQ(now[0].pid, kept_worker[0].pid) << "the kept rank was restarted";
  bool preempted = false;
  for (const auto& event : grown.events) {
    preempted |= event.round == shrunk &&
                 event.reason.find("preempted for job " + high) != std::string::npos;
  }
  EXPECT_TRUE(preempted) << "no event of round " << shrunk << " names the preemption: "
                         << grown.json;
  expect_trains_on(low, grown.round, last_step(low, grown.round), 20);
}

// Throughput scaling on 4 hosts: the trainer paces its steps so that the job's samples/s grow
// with its world size up to 2 ranks and not beyond (--pace-ms 100 --pace-ranks 2). The job
// starts at its min (1 node), measures a window (10 s), tries 2 (+100%: pays), tries 3 (+0%:
// below the 20% scale_min_gain) and goes back to 2, where it stays: each step is an event with
// its measurement, the status shows the rates, and the kept ranks re-form in place (no
// restart).
class ThroughputNetnsTest : public JobNetnsTest {
 protected:
  ThroughputNetnsTest() : JobNetnsTest(4) {}
};

TEST_F(ThroughputNetnsTest, ThroughputScalingSettlesWhereItPays) {
  ASSERT_NO_FATAL_FAILURE(start());
  std::vector<std::string> args = {"--name",  "tput",  "--nodes", "1:4", "--scale",
                                   "throughput", "--scale-window", "10s", "--scale-min-gain",
                                   "0.2",     "--"};
  for (auto& arg : trainer("")) args.push_back(arg);
  for (const char* arg : {"--pace-ms", "100", "--pace-ranks", "2"}) args.emplace_back(arg);
  const std::string job = submit(0, args);
  ASSERT_FALSE(job.empty());
  const JobView first = wait_training(job, 1, 0, kTrains);
  ASSERT_FALSE(first.state.empty());

  // Settled: back at 2 nodes after measuring 1, 2 and 3.
  JobView view;
  nlohmann::json scale;
  const bool settled = testing::wait_until(
      [&] {
        auto seen = daemons_->job(any_running(), job);
        if (!seen.ok()) return false;
        view = std::move(seen).value();
        const auto reply = nlohmann::json::parse(view.json, nullptr, false);
        if (!reply.is_object() || !reply.contains("scale")) return false;
        scale = reply["scale"];
        return scale.value("settled", false) && view.state == "running" &&
               view.ranks.size() == 2;
      },
      kTrains + 3 * 10s + 3 * kRecovers);
  ASSERT_TRUE(settled) << "the job did not settle at 2 nodes: " << view.json;
  std::cout << "scale state: " << scale.dump() << "\n";
  EXPECT_EQ(scale.value("size", 0), 2) << scale.dump();
  EXPECT_EQ(scale.value("good", 0), 2) << scale.dump();
  const nlohmann::json rates = scale.value("samples_per_s", nlohmann::json::object());
  ASSERT_TRUE(rates.contains("1") && rates.contains("2") && rates.contains("3")) << scale.dump();
  // The pace: 32 samples per rank every 100 ms, up to 2 ranks.
  const double one = rates["1"].get<double>(), two = rates["2"].get<double>(),
               three = rates["3"].get<double>();
  EXPECT_NEAR(one, 320, 320 * 0.25) << scale.dump();
  EXPECT_NEAR(two / one, 2.0, 0.5) << scale.dump();
  EXPECT_LT(three, two * 1.2) << scale.dump();
  EXPECT_EQ(view.restarts, 0u) << "scaling consumed a restart";
  // The leader's live measure is in the status too, once the settled round's rank 0 has
  // reported over at least 100 ms (the window starts again with each round).
  std::string status = view.json;
  EXPECT_TRUE(testing::wait_until(
      [&] {
        auto seen = daemons_->job(any_running(), job);
        if (!seen.ok()) return false;
        status = seen.value().json;
        return nlohmann::json::parse(status, nullptr, false).contains("samples_per_s");
      },
      kRecovers))
      << status;

  // Every decision is an event with its measurement.
  std::vector<std::string> steps;
  for (const auto& event : view.events) {
    if (event.reason.rfind("scale: ", 0) == 0) steps.push_back(event.reason);
  }
  const auto has = [&](const std::string& text) {
    return std::any_of(steps.begin(), steps.end(),
                       [&](const std::string& s) { return s.find(text) != std::string::npos; });
  };
  EXPECT_TRUE(has("starting at 1 node (min_nodes)")) << view.json;
  EXPECT_TRUE(has("at 1 node: trying 2")) << view.json;
  EXPECT_TRUE(has("at 2 nodes vs ")) << view.json;
  EXPECT_TRUE(has("trying 3")) << view.json;
  EXPECT_TRUE(has("scale_min_gain): back to 2 nodes")) << view.json;
  bool scaled_round = false;
  for (const auto& event : view.events) {
    scaled_round |= event.reason.find("opened (scaled)") != std::string::npos;
  }
  EXPECT_TRUE(scaled_round) << "no round was opened to go back to 2 nodes: " << view.json;

  // It stays there: no more rounds while the cluster does not change, and it trains on.
  const std::uint64_t round = view.round;
  expect_trains_on(job, round, last_step(job, round), 20);
  auto later = daemons_->job(any_running(), job);
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(later->round, round) << later->json;
  EXPECT_EQ(later->ranks.size(), 2u) << later->json;
}

// A preemptible job that cannot shrink (min = max = 3) is requeued whole for a 2-node job of
// higher priority: its workers stop gracefully, it waits first in the queue (no restart
// counted), and once the other job succeeded it runs again from its checkpoint. Then its owner
// suspends it (every worker stops, the state says so) and resumes it: it trains again from its
// checkpoint.
TEST_F(JobNetnsTest, RequeuedAndSuspendedJobsResumeFromTheirCheckpoint) {
  ASSERT_NO_FATAL_FAILURE(start());
  std::vector<std::string> low_args = {"--name", "low", "--nodes", "3", "--preemptible", "--"};
  for (auto& arg : trainer("")) low_args.push_back(arg);
  const std::string low = submit(0, low_args);
  ASSERT_FALSE(low.empty());
  const JobView first = wait_training(low, 3, 0, kTrains);
  ASSERT_FALSE(first.state.empty());
  ASSERT_NO_FATAL_FAILURE(wait_checkpoint(low));
  const auto old_workers = workers_on(low, "");

  std::vector<std::string> high_args = {"--name", "high", "--nodes", "2", "--priority", "10",
                                        "--"};
  for (auto& arg : trainer("40")) high_args.push_back(arg);
  const std::string high = submit(1, high_args);
  ASSERT_FALSE(high.empty());

  // Requeued: pending again, in the queue, its workers gone.
  JobView queued;
  nlohmann::json queued_json;
  EXPECT_TRUE(testing::wait_until(
      [&] {
        auto seen = daemons_->job(any_running(), low);
        if (!seen.ok()) return false;
        queued = std::move(seen).value();
        queued_json = nlohmann::json::parse(queued.json, nullptr, false);
        return queued.state == "pending" && queued_json.is_object() &&
               queued_json.value("position", 0) > 0;
      },
      kRecovers))
      << "the low job was not requeued: " << queued.summary();
  EXPECT_EQ(queued_json.value("preemptions", 0), 1) << queued.json;
  EXPECT_EQ(queued.restarts, 0u) << "a requeue consumed a restart";
  EXPECT_TRUE(testing::wait_until([&] { return all_gone(old_workers); }, 30s))
      << "a worker of the requeued job still runs";
  const auto published = latest(low);
  ASSERT_TRUE(published.has_value()) << "no checkpoint before the requeue";

  // The high job runs and succeeds; the low one runs again from its checkpoint.
  EXPECT_TRUE(testing::wait_until(
      [&] {
        auto seen = daemons_->job(any_running(), high);
        return seen.ok() && seen->state == "succeeded";
      },
      kTrains + kRecovers))
      << "the high-priority job did not succeed";
  const JobView again = wait_training(low, 3, first.round, kTrains);
  ASSERT_FALSE(again.state.empty());
  const auto resumed = line_of(low, "resume", again.round);
  ASSERT_TRUE(resumed.has_value()) << "the requeued job did not read its checkpoint";
  EXPECT_GE(resumed->step, published->step) << "it went back past its last checkpoint";

  // Suspended by its owner: state suspended, no worker left; resumed: it trains again.
  ASSERT_NO_FATAL_FAILURE(wait_checkpoint(low));
  const auto running = workers_on(low, "");
  const testing::RunResult suspended = daemons_->ctl(any_running(), {"suspend", low});
  ASSERT_TRUE(suspended.status.exited_with(0)) << suspended.err;
  EXPECT_TRUE(testing::wait_until([&] { return all_gone(running); }, 30s))
      << "a worker of the suspended job still runs";
  const auto view = daemons_->job(any_running(), low);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->state, "suspended") << view->summary();
  const auto before_resume = latest(low);
  ASSERT_TRUE(before_resume.has_value());
  const testing::RunResult resumed_call = daemons_->ctl(any_running(), {"resume", low});
  ASSERT_TRUE(resumed_call.status.exited_with(0)) << resumed_call.err;
  const JobView third = wait_training(low, 3, again.round, kTrains);
  ASSERT_FALSE(third.state.empty());
  const auto resumed_again = line_of(low, "resume", third.round);
  ASSERT_TRUE(resumed_again.has_value()) << "the resumed job did not read its checkpoint";
  EXPECT_GE(resumed_again->step, before_resume->step);
  EXPECT_EQ(third.restarts, 0u);
}

TEST_F(JobNetnsTest, BriefSigstopIsNoIncident) {
  ASSERT_NO_FATAL_FAILURE(start());
  std::vector<std::string> args = {"--name", "pause", "--nodes", "3:3", "--"};
  for (auto& arg : trainer("")) args.push_back(arg);
  const std::string job = submit(0, args);
  ASSERT_FALSE(job.empty());
  const JobView first = wait_training(job, 3, 0, kTrains);
  ASSERT_FALSE(first.state.empty());
  const std::string paused = non_leader(first);
  const int p = daemons_->host_of(paused);
  const auto workers = find_workers(job);

  daemons_->daemon(p).signal(SIGSTOP);
  // The fault itself lasts 200 ms (a scheduling hiccup or a short GC-like pause), below the job
  // tier's 600 ms peer timeout; this is the stimulus, not a wait for an outcome.
  std::this_thread::sleep_for(200ms);
  daemons_->daemon(p).signal(SIGCONT);
  const std::int64_t at_resume = last_step(job, first.round);

  // Training goes on in the same round: 40 more steps (2 s or more) with nothing changed.
  ASSERT_TRUE(
      testing::wait_until([&] { return last_step(job, first.round) >= at_resume + 40; }, 60s))
      << "training stopped after the pause";
  const auto view = daemons_->job(0, job);
  ASSERT_TRUE(view.ok()) << view.error().message;
  EXPECT_EQ(view->round, first.round) << view->json;
  EXPECT_EQ(view->state, "running");
  EXPECT_EQ(view->restarts, 0u);
  for (const auto& worker : workers) EXPECT_FALSE(process_gone(worker.pid)) << worker.pid;
}

// A 1|2 partition that cuts off rank 0's node while rank 0 is writing a checkpoint. The
// majority's workers re-form in place at once (the leader does not wait out the minority's
// lease), so both sides run until the minority's lease runs out; what keeps the old round from
// publishing over the new one is the round fence on the checkpoint dir. Checked: the minority's
// worker is gone within the lease (plus slack), the majority trains on in a new round with the
// same processes, LATEST never moves back, and every checkpoint published after the cut is the
// majority's (its round, world 2).
TEST_F(JobNetnsTest, MinorityIsFenced) {
  ASSERT_NO_FATAL_FAILURE(start());
  // Slow checkpoint writes: 600 ms after each file written (model, optimizer, state, LATEST; a
  // round's claim the first time). Cut as a write starts, its fence check comes after its three
  // data files (1.8 s on), when the majority's round (re-formed live about 1 s after the cut,
  // claiming the dir at its first checkpoint) has claimed the dir, and before the lease ends the
  // cut-off worker (2.4 s or later): the fence alone keeps it out. (A majority slower than 1.8 s
  // to claim would let it publish legitimately: its check would have passed before the claim.)
  std::vector<std::string> args = {"--name", "split", "--nodes", "2:3", "--"};
  for (auto& arg : trainer("")) args.push_back(arg);
  args.push_back("--checkpoint-write-delay-ms");
  args.push_back("600");
  const std::string job = submit(0, args);
  ASSERT_FALSE(job.empty());
  const JobView first = wait_training(job, 3, 0, kTrains);
  ASSERT_FALSE(first.state.empty());
  ASSERT_NO_FATAL_FAILURE(wait_checkpoint(job));
  std::string minority;
  for (const RankView& r : first.ranks) {
    if (r.first_rank == 0) minority = r.node;
  }
  ASSERT_FALSE(minority.empty()) << first.json;
  const int m = daemons_->host_of(minority);
  std::vector<int> majority;
  for (const int host : all_hosts()) {
    if (host != m) majority.push_back(host);
  }
  const auto fenced = workers_on(job, minority);
  ASSERT_EQ(fenced.size(), 1u);
  const std::vector<WorkerProc> survivors = workers_but(job, minority);
  ASSERT_EQ(survivors.size(), 2u);

  std::string writing;
  ASSERT_TRUE(testing::wait_until([&] { return !(writing = in_flight(job)).empty(); }, 30s))
      << "rank 0 wrote no checkpoint";
  ASSERT_TRUE(hosts_->partition({m}, majority).ok());
  const auto cut = std::chrono::steady_clock::now();
  const auto at_cut = latest(job);

  // Every LATEST seen from the cut on, until the minority's worker is gone and the majority has
  // published in its new round.
  std::vector<Published> seen;
  std::optional<double> gone_s;
  JobView view;
  const bool settled = testing::wait_until(
      [&] {
        if (auto now = latest(job); now && (seen.empty() || seen.back().step != now->step ||
                                            seen.back().round != now->round)) {
          seen.push_back(*now);
        }
        if (!gone_s && all_gone(fenced)) {
          gone_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - cut).count();
        }
        if (auto v = daemons_->job(majority[0], job); v.ok()) view = std::move(v).value();
        return gone_s && view.round > first.round && !seen.empty() &&
               seen.back().round >= static_cast<std::int64_t>(view.round);
      },
      kRecovers);
  ASSERT_TRUE(settled) << "minority gone: " << (gone_s ? "yes" : "no")
                       << "; majority: " << view.summary() << "; checkpoints seen: " << seen.size();
  // The lease (3 s, the daemon's default) stops the cut-off worker; the slack covers the last
  // renewal's age, the fence check's tick and a loaded machine.
  EXPECT_LE(*gone_s, 3.0 + 3.0) << "the minority's worker outlived its lease";
  EXPECT_TRUE(daemons_->running(m)) << "the minority's daemon fences its workers, it does not exit";
  EXPECT_EQ(view.state, "running");
  EXPECT_EQ(view.ranks.size(), 2u) << view.summary();
  EXPECT_FALSE(view.has_node(minority)) << view.summary();

  const auto lines = expect_in_place(job, view.round, 2, survivors, last_step(job, first.round));
  std::int64_t reformed_step = -1;
  for (const auto& line : lines) reformed_step = line.value("step", reformed_step);
  // LATEST only moves forward, and after the cut it names only the majority's checkpoints: the
  // old round's write in flight at the cut is refused by the fence (or its writer ended first).
  std::int64_t previous = at_cut ? at_cut->step : -1;
  for (const Published& p : seen) {
    EXPECT_GE(p.step, previous) << "LATEST moved back to step " << p.step << " of round "
                                << p.round;
    previous = p.step;
    if (at_cut && p.step == at_cut->step && p.round == at_cut->round) continue;
    EXPECT_GE(p.round, static_cast<std::int64_t>(view.round))
        << "round " << p.round << " published step " << p.step << " after the cut";
    EXPECT_EQ(p.world_size, 2) << "step " << p.step << " of round " << p.round;
  }
  // For the test log: what was published, and what became of the write in flight at the cut
  // (removed unpublished: the fence refused it; still there: its writer was killed first).
  std::cerr << "minority's worker gone " << *gone_s << " s after the cut; majority round "
            << view.round << " re-formed at step " << reformed_step
            << "; LATEST at the cut: " << (at_cut ? std::to_string(at_cut->step) : "none")
            << ", then (step/round):";
  for (const Published& p : seen) std::cerr << " " << p.step << "/" << p.round;
  std::cerr << "; the write in flight at the cut (" << writing << ") "
            << (std::filesystem::exists(checkpoints_ + "/" + job + "/" + writing)
                    ? "was left unfinished"
                    : "is gone")
            << "\n";
  ASSERT_TRUE(hosts_->heal_all().ok());
}

TEST_F(JobNetnsTest, TwoJobsUseDisjointSlots) {
  // Two CPU slots per host; the workers only sleep, as slot placement is what is under test (six
  // trainers would only slow the 2-core machine down).
  ASSERT_NO_FATAL_FAILURE(start({"node.cpu_slots=2"}));
  const std::vector<std::string> sleeper = {"--nodes",    "3:3", "--workers-per-node", "1", "--",
                                            "/bin/sleep", "1000"};
  std::vector<std::string> first_args = {"--name", "left"}, second_args = {"--name", "right"};
  first_args.insert(first_args.end(), sleeper.begin(), sleeper.end());
  second_args.insert(second_args.end(), sleeper.begin(), sleeper.end());
  const std::string a = submit(0, first_args);
  const std::string b = submit(1, second_args);
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  for (const auto& job : {a, b}) {
    JobView view;
    EXPECT_TRUE(daemons_->wait_job(
        0, job, [](const JobView& v) { return v.state == "running" && v.ranks.size() == 3; },
        kTrains, &view))
        << view.summary();
  }
  ASSERT_TRUE(testing::wait_until(
      [&] { return workers_on(a, "").size() == 3 && workers_on(b, "").size() == 3; }, 30s));
  for (const int host : all_hosts()) {
    const auto left = workers_on(a, DaemonCluster::name(host));
    const auto right = workers_on(b, DaemonCluster::name(host));
    ASSERT_EQ(left.size(), 1u);
    ASSERT_EQ(right.size(), 1u);
    EXPECT_NE(left[0].slot, right[0].slot) << "h" << host;
    EXPECT_FALSE(left[0].slot.empty());
    const auto cpus_left = parse_cpu_list(left[0].cpus);
    const auto cpus_right = parse_cpu_list(right[0].cpus);
    ASSERT_FALSE(cpus_left.empty()) << left[0].cpus;
    ASSERT_FALSE(cpus_right.empty()) << right[0].cpus;
    std::vector<int> shared;
    std::set_intersection(cpus_left.begin(), cpus_left.end(), cpus_right.begin(), cpus_right.end(),
                          std::back_inserter(shared));
    EXPECT_TRUE(shared.empty()) << "h" << host << ": job " << a << " on cpus " << left[0].cpus
                                << ", job " << b << " on cpus " << right[0].cpus;
  }
}

TEST_F(JobNetnsTest, CancelLeavesNoProcess) {
  ASSERT_NO_FATAL_FAILURE(start());
  std::vector<std::string> args = {"--name", "stopme", "--nodes", "3:3", "--"};
  for (auto& arg : trainer("")) args.push_back(arg);
  const std::string job = submit(0, args);
  ASSERT_FALSE(job.empty());
  ASSERT_FALSE(wait_training(job, 3, 0, kTrains).state.empty());
  const auto workers = find_workers(job);
  ASSERT_EQ(workers.size(), 3u);

  const auto cancelled = daemons_->ctl(1, {"cancel", job});
  ASSERT_TRUE(cancelled.status.exited_with(0)) << cancelled.out << cancelled.err;
  JobView view;
  EXPECT_TRUE(daemons_->wait_job(
      0, job, [](const JobView& v) { return v.state == "cancelled"; }, 30s, &view))
      << view.summary();
  // SIGTERM, then SIGKILL after the 3 s stop grace: gone well within 15 s.
  EXPECT_TRUE(
      testing::wait_until([&] { return all_gone(workers) && find_workers(job).empty(); }, 15s))
      << find_workers(job).size() << " worker(s) left";
}

TEST_F(JobNetnsTest, BadSpecsAreRejected) {
  ASSERT_NO_FATAL_FAILURE(start());
  // The sentence of rendezvous::validate(); elasticctl validates first and names the flag where
  // the daemon would name the JSON field ("--nodes: must be at least 1" for min_nodes), so the
  // expected text is the part both share.
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--name", "a", "--nodes", "3:2", "--", "/bin/true"}, "nodes: min 3 is greater than max 2"},
      {{"--name", "a", "--nodes", "0", "--", "/bin/true"}, "nodes: must be at least 1"},
      {{"--name", "bad name", "--nodes", "1", "--", "/bin/true"},
       "name: 'bad name' may contain only letters, digits, '.', '_' and '-'"},
      {{"--name", "a", "--nodes", "1", "--env", "RANK=7", "--", "/bin/true"},
       "env: RANK is set by the daemon for every worker and cannot be overridden"},
      {{"--name", "a", "--nodes", "1", "--workers-per-node", "5000", "--", "/bin/true"},
       "workers-per-node: 5000 is more than the limit of 1024"},
      {{"--name", "a", "--nodes", "1", "--restart-backoff", "2h", "--", "/bin/true"},
       "2h is longer than the limit of 1h"},
  };
  for (const auto& c : cases) {
    const Submitted refused = daemons_->submit_job(1, c.args);
    // 1: the daemon refused it; 64/65: elasticctl found it first (command line / job spec).
    EXPECT_TRUE(refused.exit_code == 1 || refused.exit_code == 64 || refused.exit_code == 65)
        << "exit " << refused.exit_code << ": " << refused.output;
    EXPECT_NE(refused.output.find(c.message), std::string::npos)
        << "expected \"" << c.message << "\" in: " << refused.output;
  }
  const auto ids = daemons_->job_ids(0);
  ASSERT_TRUE(ids.ok()) << ids.error().message;
  EXPECT_TRUE(ids->empty()) << "a refused spec created a job";
}

TEST_F(JobNetnsTest, NonRootSubmitterRunsAsSelf) {
  ASSERT_NO_FATAL_FAILURE(start());
  // The job's own checkpoint root and working dir, both the user's to write.
  const std::string home = work_.path() + "/nobody";
  std::filesystem::create_directories(home);
  ASSERT_EQ(::chown(home.c_str(), kNobody, kNobody), 0);
  std::vector<std::string> args = {"--name",     "user",      "--nodes", "3:3", "--checkpoint-root",
                                   checkpoints_, "--workdir", home,      "--"};
  for (auto& arg : trainer("")) args.push_back(arg);
  const std::string job = submit(2, args, kNobody);
  ASSERT_FALSE(job.empty());
  ASSERT_FALSE(wait_training(job, 3, 0, kTrains).state.empty());
  const auto workers = find_workers(job);
  ASSERT_EQ(workers.size(), 3u);
  for (const auto& worker : workers) {
    EXPECT_EQ(worker.uid, kNobody) << "pid " << worker.pid << " on " << worker.node;
    EXPECT_EQ(worker.gid, kNobody) << "pid " << worker.pid << " on " << worker.node;
  }
  // Its checkpoints are the user's files.
  ASSERT_TRUE(testing::wait_until(
      [&] { return std::filesystem::exists(checkpoints_ + "/" + job + "/LATEST"); }, 30s));
  struct stat latest {};
  ASSERT_EQ(::stat((checkpoints_ + "/" + job + "/LATEST").c_str(), &latest), 0);
  EXPECT_EQ(latest.st_uid, kNobody);
  // The owner may cancel it.
  const auto cancelled = daemons_->ctl_as(kNobody, kNobody, 2, {"cancel", job});
  EXPECT_TRUE(cancelled.status.exited_with(0)) << cancelled.out << cancelled.err;
}

}  // namespace
}  // namespace elastic::netns
