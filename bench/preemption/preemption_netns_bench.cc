// preemption_netns_bench: how long a job of higher priority waits for its first training step
// when a lower-priority job holds every node, in real elasticd daemons on three namespaced hosts
// (tests/netns) with elasticd's DEFAULT settings (only checkpoint.root is set) and real
// elastic-trainer Gloo workers (Fashion-MNIST, 1 worker per host). Per incident, a fresh
// low-priority job trains on all three hosts, then a 2-node job of priority 10 is submitted:
//   shrink    the low job has nodes 1:3: the leader shrinks it to its rank 0 (a round of reason
//             preempted; the kept rank re-forms in place, nothing is checkpointed)
//   requeue   the low job has nodes 3 and is preemptible: the leader requeues it whole (its
//             workers get TERM and write their checkpoint on the way out)
// Measured from the submit (this machine's clock, which every daemon and worker shares):
//   stopped     every worker of the low job that gives up its node is gone (/proc, every 10 ms)
//   first step  the high job's first "step" line (its start-up included: process, data set,
//               store, Gloo), read by polling the worker logs (wait_until's interval)
// The target: submit -> first step <= 5 s beyond the lower job's checkpoint time.
//
//   preemption_netns_bench [--incidents N]
//
// Prints Markdown tables on stdout, progress on stderr; exit 1 on a failed run. Needs root.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/stats.h"
#include "tests/netns/daemon_cluster.h"
#include "tests/netns/netns_cluster.h"
#include "tests/support/temp_dir.h"

namespace {

using elastic::bench::format;
using elastic::bench::quantile;
using elastic::netns::DaemonCluster;
using elastic::netns::NetnsCluster;
using elastic::netns::WorkerProc;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kHosts = 3;

std::atomic<bool> g_stop{false};
extern "C" void on_signal(int) { g_stop.store(true); }

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] void fail(const std::string& message) { throw Failure(message); }

std::vector<int> all_hosts() { return {0, 1, 2}; }

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

int leader_host(DaemonCluster& daemons) {
  const std::string leader = daemons.wait_leader(all_hosts(), 60s);
  if (leader.empty()) fail("no leader:\n" + daemons.describe_raft(all_hosts()));
  return daemons.host_of(leader);
}

std::string submit(DaemonCluster& daemons, std::vector<std::string> args,
                   const std::vector<std::string>& trainer) {
  args.push_back("--");
  args.insert(args.end(), trainer.begin(), trainer.end());
  const auto submitted = daemons.submit_job(leader_host(daemons), args);
  if (submitted.exit_code != 0 || submitted.id.empty()) fail("submit: " + submitted.output);
  return submitted.id;
}

// The highest step line of `job` (any round), -1 before the first.
std::int64_t last_step(const DaemonCluster& daemons, const std::string& job) {
  std::int64_t step = -1;
  for (const auto& line : daemons.trainer_lines(job)) {
    if (line.event == "step") step = std::max(step, line.step);
  }
  return step;
}

struct Incident {
  std::string kind;
  double stopped = -1, first_step = -1;
};

Incident measure(DaemonCluster& daemons, const std::string& kind, int serial) {
  const auto trainer = [](int max_steps) {
    auto argv = elastic::netns::small_fmnist_trainer(ELASTIC_TRAINER_PATH, 10, 100000);
    if (max_steps > 0) argv.insert(argv.end(), {"--max-steps", std::to_string(max_steps)});
    return argv;
  };
  std::vector<std::string> low_args = {"--name", "low" + std::to_string(serial), "--nodes",
                                       kind == "shrink" ? "1:3" : "3"};
  if (kind == "requeue") low_args.push_back("--preemptible");
  const std::string low = submit(daemons, low_args, trainer(0));
  const int through = leader_host(daemons);
  if (!elastic::testing::wait_until(
          [&] {
            auto view = daemons.job(through, low);
            return g_stop.load() || (view.ok() && view->state == "running" &&
                                     view->ranks.size() == 3 && last_step(daemons, low) >= 25);
          },
          120s) ||
      g_stop.load()) {
    fail("the low job " + low + " did not train on 3 nodes");
  }
  const auto before = daemons.job(through, low);
  if (!before.ok()) fail("job " + low + ": " + before.error().message);
  const std::string kept = before->ranks.front().node;
  std::vector<WorkerProc> leaving;
  for (const auto& w : elastic::netns::find_workers(low)) {
    if (kind == "requeue" || w.node != kept) leaving.push_back(w);
  }

  Incident incident{.kind = kind};
  const auto t0 = Clock::now();
  const std::string high = submit(daemons, {"--name", "high" + std::to_string(serial), "--nodes",
                                            "2", "--priority", "10"},
                                  trainer(60));
  const bool ok = elastic::testing::wait_until(
      [&] {
        if (incident.stopped < 0 &&
            std::all_of(leaving.begin(), leaving.end(),
                        [](const WorkerProc& w) { return elastic::netns::process_gone(w.pid); })) {
          incident.stopped = ms_since(t0);
        }
        if (incident.first_step < 0 && last_step(daemons, high) >= 0) {
          incident.first_step = ms_since(t0);
        }
        return g_stop.load() || (incident.stopped >= 0 && incident.first_step >= 0);
      },
      120s);
  if (!ok || g_stop.load()) {
    fail("job " + high + " did not step within 120 s (" + kind + ")");
  }
  for (const std::string& id : {high, low}) (void)daemons.ctl(leader_host(daemons), {"cancel", id});
  if (!elastic::testing::wait_until(
          [&] {
            return elastic::netns::find_workers(low).empty() &&
                   elastic::netns::find_workers(high).empty();
          },
          60s)) {
    fail("workers left 60 s after the cancel");
  }
  return incident;
}

std::string cell(std::vector<double> values) {
  std::erase_if(values, [](double v) { return v < 0; });
  if (values.empty()) return "-";
  return format(quantile(values, 0.5) / 1000, 2) + " / " +
         format(*std::min_element(values.begin(), values.end()) / 1000, 2) + "-" +
         format(*std::max_element(values.begin(), values.end()) / 1000, 2);
}

int run(int incidents) {
  if (::geteuid() != 0) fail("needs root (network namespaces)");
  if (const auto env = NetnsCluster::check_environment(); !env.ok()) fail(env.error().message);
  auto hosts = NetnsCluster::create(kHosts);
  if (!hosts.ok()) fail(hosts.error().message);
  elastic::testing::TempDir work;
  const std::string checkpoints = work.path() + "/checkpoints";
  std::filesystem::create_directories(checkpoints);
  DaemonCluster daemons(**hosts, ELASTICD_PATH, ELASTICCTL_PATH, work.path(),
                        elastic::netns::default_timers(), elastic::netns::default_raft_timers());
  daemons.set_overrides({"checkpoint.root=" + checkpoints});
  if (const auto started = daemons.start_all(60s); !started.ok()) fail(started.error().message);
  if (!daemons.wait_all_see(all_hosts(), all_hosts(), "alive", 120s)) {
    fail("the daemons did not converge:\n" + daemons.describe(all_hosts()));
  }
  std::vector<Incident> done;
  std::string failed;
  int serial = 0;
  for (const std::string kind : {"shrink", "requeue"}) {
    for (int i = 0; i < incidents && !g_stop.load() && failed.empty(); ++i) {
      std::cerr << kind << " " << i + 1 << "/" << incidents << "\n";
      try {
        done.push_back(measure(daemons, kind, ++serial));
        const Incident& last = done.back();
        std::cerr << "  first step " << format(last.first_step / 1000, 2) << " s, stopped "
                  << format(last.stopped / 1000, 2) << " s\n";
      } catch (const Failure& failure) {
        failed = failure.what();
        std::cerr << "preemption_netns_bench: " << failed << "\n";
      }
    }
  }
  std::cout << "| preemption | incidents | submit -> high job's first step (s): p50 / min-max | "
               "submit -> the low job's leaving workers gone |\n"
               "|---|---|---|---|\n";
  for (const std::string kind : {"shrink", "requeue"}) {
    std::vector<double> first, stopped;
    for (const Incident& i : done) {
      if (i.kind != kind) continue;
      first.push_back(i.first_step);
      stopped.push_back(i.stopped);
    }
    std::cout << "| " << kind << " | " << first.size() << " | " << cell(first) << " | "
              << cell(stopped) << " |\n";
  }
  if (!failed.empty()) {
    std::cout << "\nINCOMPLETE: " << done.size() << " incidents measured, then: " << failed << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int incidents = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--incidents" && i + 1 < argc) {
      incidents = std::atoi(argv[++i]);
    } else {
      std::cerr << "usage: preemption_netns_bench [--incidents N]\n";
      return 64;
    }
  }
  ::signal(SIGINT, on_signal);
  ::signal(SIGTERM, on_signal);
  try {
    return run(incidents);
  } catch (const Failure& failure) {
    std::cerr << "preemption_netns_bench: " << failure.what() << "\n";
    return 1;
  }
}
