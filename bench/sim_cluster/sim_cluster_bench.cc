// sim_cluster_bench: a large cluster of production daemon cores on the simulator.
//
// N daemons (3 Raft voters) each run node::NodeCore (tests/sim/node_core_process.h) with the
// shipped timing defaults, for H simulated hours, on links with moderate loss, duplication and
// reordering. A client submits a job every `submit_every` (1 to 8 nodes, one worker each, a
// `job_runtime` of work); every `crash_every` a random daemon crashes and comes back
// `down_for` later (a voter too); every `worker_crash_every` a random worker exits 1. The
// cluster's safety checkers (tests/sim/node_core_cluster.h) run after every event. At the end
// the network heals, every daemon is up, and the run settles (every acknowledged job succeeded
// or runs on up daemons).
// Prints the seed, the counters, events, simulated and wall time, and a verdict line
// ("verdict: ok" or "verdict: FAILED <why>"; exit status 1 then). Not a test (STYLE.md 12).
//
// Usage: sim_cluster_bench [--daemons 200] [--hours 1] [--seed 1] [--loss 0.01]
//                          [--submit-every-s 30] [--job-runtime-s 300] [--crash-every-s 120]
//                          [--down-for-s 30] [--worker-crash-every-s 300]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include <spdlog/spdlog.h>

#include "bench/stats.h"
#include "tests/sim/node_core_cluster.h"

namespace {

using namespace std::chrono_literals;
using elastic::Duration;
using elastic::TimePoint;
using elastic::sim::NodeCoreCluster;
using elastic::sim::NodeCoreClusterOptions;
using elastic::sim::NodeId;

struct Options {
  std::size_t daemons = 200;
  double hours = 1.0;
  std::uint64_t seed = 1;
  double loss = 0.01;
  int submit_every_s = 30;
  int job_runtime_s = 300;
  int crash_every_s = 120;
  int down_for_s = 30;
  int worker_crash_every_s = 300;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "sim_cluster_bench: %s\nusage: sim_cluster_bench [--daemons N] [--hours H] "
               "[--seed S] [--loss P] [--submit-every-s S] [--job-runtime-s S] "
               "[--crash-every-s S] [--down-for-s S] [--worker-crash-every-s S]\n",
               why);
  std::exit(64);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage(("missing value after " + flag).c_str());
    const char* value = argv[++i];
    if (flag == "--daemons") {
      o.daemons = std::strtoull(value, nullptr, 10);
    } else if (flag == "--hours") {
      o.hours = std::strtod(value, nullptr);
    } else if (flag == "--seed") {
      o.seed = std::strtoull(value, nullptr, 10);
    } else if (flag == "--loss") {
      o.loss = std::strtod(value, nullptr);
    } else if (flag == "--submit-every-s") {
      o.submit_every_s = std::atoi(value);
    } else if (flag == "--job-runtime-s") {
      o.job_runtime_s = std::atoi(value);
    } else if (flag == "--crash-every-s") {
      o.crash_every_s = std::atoi(value);
    } else if (flag == "--down-for-s") {
      o.down_for_s = std::atoi(value);
    } else if (flag == "--worker-crash-every-s") {
      o.worker_crash_every_s = std::atoi(value);
    } else {
      usage(("unknown flag " + flag).c_str());
    }
  }
  if (o.daemons < 5) usage("--daemons must be at least 5");
  if (o.submit_every_s <= 0 || o.crash_every_s <= 0 || o.worker_crash_every_s <= 0) {
    usage("the --*-every-s values must be positive");
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  spdlog::set_level(spdlog::level::warn);  // 200 daemons log every round
  NodeCoreClusterOptions options = elastic::sim::shipped_cluster_options(o.daemons);
  options.core.launcher.job_runtime = std::chrono::seconds(o.job_runtime_s);
  options.core.config.consensus.snapshot_every_entries = 1000;
  options.link.base_latency = 200us;
  options.link.jitter = 1ms;
  options.link.loss = o.loss;
  options.link.duplicate = o.loss;
  options.link.reorder_probability = 0.05;
  options.link.reorder_delay = 20ms;

  std::printf(
      "sim_cluster_bench: seed %llu, %zu daemons (3 voters), %.2f simulated hours, "
      "%.1f%% loss / %.1f%% duplication / 5%% reordering, a job every %d s (%d s of "
      "work), a daemon crash every %d s (down %d s), a worker crash every %d s\n",
      static_cast<unsigned long long>(o.seed), o.daemons, o.hours, o.loss * 100, o.loss * 100,
      o.submit_every_s, o.job_runtime_s, o.crash_every_s, o.down_for_s, o.worker_crash_every_s);
  std::fflush(stdout);
  const auto wall_start = std::chrono::steady_clock::now();
  const double cpu_start = elastic::bench::cpu_seconds();

  NodeCoreCluster c(o.seed, options);
  elastic::Rng& rng = c.sim().rng();
  const TimePoint start = c.sim().now();
  const TimePoint end =
      start + std::chrono::duration_cast<Duration>(std::chrono::duration<double>(o.hours * 3600.0));
  TimePoint next_submit = start + 10s;
  TimePoint next_crash = start + std::chrono::seconds(o.crash_every_s);
  TimePoint next_worker_crash = start + std::chrono::seconds(o.worker_crash_every_s);
  std::map<NodeId, TimePoint> down;  // crashed daemon -> when it comes back
  TimePoint next_report = start + 5min;
  bool ok = true;
  while (c.sim().now() < end) {
    if (!c.sim().run_for(1s)) {
      ok = false;
      break;
    }
    const TimePoint now = c.sim().now();
    c.drive_clients();
    if (now >= next_submit) {
      const auto nodes = static_cast<std::uint32_t>(1 + rng.below(8));
      c.submit(std::max<std::uint32_t>(1, nodes / 2), nodes);
      next_submit = now + std::chrono::seconds(o.submit_every_s);
    }
    if (now >= next_crash) {
      const NodeId victim = static_cast<NodeId>(rng.below(o.daemons));
      // At most one voter down at a time: the bench measures a cluster that keeps its quorum.
      const bool voter_down =
          std::any_of(down.begin(), down.end(), [](const auto& d) { return d.first < 3; });
      if (c.sim().is_up(victim) && !(victim < 3 && voter_down)) {
        c.crash(victim);
        down[victim] = now + std::chrono::seconds(o.down_for_s);
      }
      next_crash = now + std::chrono::seconds(o.crash_every_s);
    }
    for (auto it = down.begin(); it != down.end();) {
      if (now >= it->second) {
        c.restart(it->first);
        it = down.erase(it);
      } else {
        ++it;
      }
    }
    if (now >= next_worker_crash) {
      c.crash_worker();
      next_worker_crash = now + std::chrono::seconds(o.worker_crash_every_s);
    }
    if (now >= next_report) {
      const double wall =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
      std::printf("  %5.0f simulated s, %.0f s wall: %llu events, %zu live workers\n",
                  std::chrono::duration<double>(now - start).count(), wall,
                  static_cast<unsigned long long>(c.sim().events_processed()), c.live_workers());
      std::fflush(stdout);
      next_report = now + 5min;
    }
  }
  std::string verdict = "ok";
  if (!ok) {
    verdict = "FAILED " + c.sim().violation().value_or("?");
  } else {
    const bool settled = c.settle(10min, 1s);
    if (c.sim().violation()) {
      verdict = "FAILED " + *c.sim().violation();
    } else if (!settled) {
      verdict = "FAILED not settled: " + c.unsettled().value_or("?");
    } else if (const auto problem = c.final_problem()) {
      verdict = "FAILED " + *problem;
    }
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  const double simulated = std::chrono::duration<double>(c.sim().now() - start).count();
  std::printf("seed %llu: %s\n", static_cast<unsigned long long>(o.seed), c.summary().c_str());
  // Settled, but only because NodeCoreClusterOptions::tolerate_known_stuck_rounds let them pass.
  for (const auto& [job, why] : c.known_stuck()) {
    std::printf("job %s stuck in a known liveness bug: %s\n", job.c_str(), why.c_str());
  }
  std::printf("%zu jobs stuck in a known liveness bug\n", c.known_stuck().size());
  const auto& net = c.sim().network_counters();
  std::printf(
      "network: %llu sent, %llu delivered, %llu lost, %llu duplicated, %llu partitioned, "
      "%llu unroutable\n",
      static_cast<unsigned long long>(net.sent), static_cast<unsigned long long>(net.delivered),
      static_cast<unsigned long long>(net.lost), static_cast<unsigned long long>(net.duplicated),
      static_cast<unsigned long long>(net.partitioned),
      static_cast<unsigned long long>(net.unroutable));
  std::printf(
      "%.0f simulated s (settling included) in %.1f s wall, %.1f s CPU; %llu events, "
      "%.0f events per wall second\n",
      simulated, wall, elastic::bench::cpu_seconds() - cpu_start,
      static_cast<unsigned long long>(c.sim().events_processed()),
      static_cast<double>(c.sim().events_processed()) / wall);
  std::printf("verdict: %s (rerun: sim_cluster_bench --seed %llu ...)\n", verdict.c_str(),
              static_cast<unsigned long long>(o.seed));
  return verdict == "ok" ? 0 : 1;
}
