// job_watch_bench: job-tier fast detection (rendezvous::JobWatch) measured on the deterministic
// simulator, one running round of N daemons.
//
// Prints Markdown tables (bench/RESULTS.md takes them verbatim):
//  1. detection: for each (loss, crash kind), `--seeds` runs each killing one random daemon at a
//     random phase; the time from the kill until EVERY surviving daemon of the round has
//     declared it lost, p50 / p99 / max, and false declarations in those runs. Crash kinds:
//     "silent" (no transport event: a power cut, the worst case) and "kill -9" (the kernel
//     closes the victim's connections; each survivor's transport reports a disconnect
//     --disconnect-ms later);
//  2. false declarations: `--long-runs` runs of `--minutes` simulated minutes at `--loss` on
//     every link, nobody killed: declarations (all false), suspicions, and messages and bytes
//     per daemon per second (sent and received, the mean and the busiest daemon's).
// Rounds of more than --watch-all-up-to daemons (besides oneself) watch through a ring with
// --watchers watchers each (JobWatchConfig; rendezvous/job_watch.h).
// Uses the JobWatchConfig defaults unless overridden. Not a test: it asserts nothing
// (STYLE.md 12).
//
// Usage: job_watch_bench [--nodes 8] [--seeds 200] [--loss 0.05] [--minutes 10] [--long-runs 10]
//                        [--interval-ms 200] [--timeout-ms 600] [--disconnect-ms 2]
//                        [--watchers 3] [--watch-all-up-to 8]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "bench/stats.h"
#include "tests/sim/job_watch_process.h"

namespace {

using elastic::bench::cpu_seconds;
using elastic::bench::percentile;

using namespace std::chrono_literals;
using elastic::Duration;
using elastic::TimePoint;
using elastic::to_ms;
using elastic::rendezvous::JobWatchConfig;
using elastic::sim::JobWatchCluster;
using elastic::sim::JobWatchClusterOptions;
using elastic::sim::NodeId;

struct Options {
  std::size_t nodes = 8;
  int seeds = 200;
  double loss = 0.05;
  double minutes = 10;
  int long_runs = 10;
  int interval_ms = 200;
  int timeout_ms = 600;
  int disconnect_ms = 2;
  int watchers = JobWatchConfig{}.watchers;
  std::size_t watch_all_up_to = JobWatchConfig{}.watch_all_up_to;
};

JobWatchClusterOptions cluster_options(const Options& o, double loss) {
  JobWatchClusterOptions c;
  c.nodes = o.nodes;
  c.config = JobWatchConfig::from(std::chrono::milliseconds(o.interval_ms),
                                  std::chrono::milliseconds(o.timeout_ms));
  c.config.watchers = o.watchers;
  c.config.watch_all_up_to = o.watch_all_up_to;
  c.link.loss = loss;
  return c;
}

struct DetectionRow {
  double loss = 0;
  const char* kind = "";
  int runs = 0;
  int undetected = 0;
  std::uint64_t false_declarations = 0;
  double p50 = NAN, p99 = NAN, max = NAN;
};

// Not inlined: GCC 12 warns falsely (free-nonheap-object) about `ms` when it is inlined in main.
[[gnu::noinline]] DetectionRow detection(const Options& o, double loss, bool disconnect_notices) {
  DetectionRow row;
  row.loss = loss;
  row.kind = disconnect_notices ? "kill -9 (disconnect seen)" : "silent (power cut)";
  std::vector<double> ms;
  for (int s = 0; s < o.seeds; ++s) {
    const std::uint64_t seed = 1000 + static_cast<std::uint64_t>(s);
    JobWatchCluster c(seed, cluster_options(o, loss));
    auto& sim = c.sim();
    // Warm up, then a random phase relative to the keepalive grid.
    sim.run_for(3s + Duration(sim.rng().below(1'000'000'000)));
    const NodeId victim = static_cast<NodeId>(sim.rng().below(o.nodes));
    const TimePoint crashed_at = sim.now();
    c.crash(victim, disconnect_notices
                        ? std::optional<Duration>(std::chrono::milliseconds(o.disconnect_ms))
                        : std::nullopt);
    const bool all = sim.run_until_condition([&] { return c.all_survivors_declared(victim); },
                                             crashed_at + 30s, 1ms);
    ++row.runs;
    if (!all) {
      ++row.undetected;
    } else {
      ms.push_back(to_ms(sim.now() - crashed_at));
    }
    sim.run_for(2s);
    row.false_declarations += c.false_declarations();
  }
  row.p50 = percentile(ms, 50);
  row.p99 = percentile(ms, 99);
  row.max = ms.empty() ? NAN : *std::max_element(ms.begin(), ms.end());
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--nodes") {
      o.nodes = std::strtoul(v, nullptr, 10);
    } else if (k == "--seeds") {
      o.seeds = std::atoi(v);
    } else if (k == "--loss") {
      o.loss = std::atof(v);
    } else if (k == "--minutes") {
      o.minutes = std::atof(v);
    } else if (k == "--long-runs") {
      o.long_runs = std::atoi(v);
    } else if (k == "--interval-ms") {
      o.interval_ms = std::atoi(v);
    } else if (k == "--timeout-ms") {
      o.timeout_ms = std::atoi(v);
    } else if (k == "--disconnect-ms") {
      o.disconnect_ms = std::atoi(v);
    } else if (k == "--watchers") {
      o.watchers = std::atoi(v);
    } else if (k == "--watch-all-up-to") {
      o.watch_all_up_to = std::strtoul(v, nullptr, 10);
    } else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 64;
    }
  }
  if (o.nodes < 2 || o.seeds < 1) {
    std::fprintf(stderr, "need --nodes >= 2 and --seeds >= 1\n");
    return 64;
  }
  const JobWatchConfig config = cluster_options(o, 0).config;
  if (auto s = config.validate(); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.error().message.c_str());
    return 64;
  }
  std::printf(
      "JobWatch: %zu daemons in one round; keepalive %d ms, peer timeout %d ms, confirm "
      "window %.0f ms, helper timeout %.0f ms, %d indirect probes x 2 attempts; %s\n\n",
      o.nodes, o.interval_ms, o.timeout_ms, to_ms(config.confirm_window),
      to_ms(config.helper_timeout), config.indirect_probes,
      o.nodes - 1 > config.watch_all_up_to
          ? ("a ring of " + std::to_string(config.watchers) + " watchers per daemon").c_str()
          : "every daemon watches every other");

  const double cpu0 = cpu_seconds();
  std::printf("### Detection: kill to every surviving daemon of the round declaring it lost\n\n");
  std::printf("| loss | crash | runs | p50 ms | p99 ms | max ms | undetected | false decl. |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (double loss : {0.0, o.loss}) {
    for (bool notices : {false, true}) {
      const DetectionRow r = detection(o, loss, notices);
      std::printf("| %.0f%% | %s | %d | %.0f | %.0f | %.0f | %d | %llu |\n", loss * 100, r.kind,
                  r.runs, r.p50, r.p99, r.max, r.undetected,
                  static_cast<unsigned long long>(r.false_declarations));
      std::fflush(stdout);
    }
  }

  std::printf(
      "\n### False declarations: %d runs x %.0f simulated minutes at %.0f%% loss, no "
      "kills\n\n",
      o.long_runs, o.minutes, o.loss * 100);
  std::uint64_t declarations = 0, suspicions = 0, messages = 0, bytes = 0, received = 0;
  double busiest_sent = 0, busiest_received = 0;
  const double run_seconds = o.minutes * 60;
  for (int run = 0; run < o.long_runs; ++run) {
    JobWatchCluster c(5000 + static_cast<std::uint64_t>(run), cluster_options(o, o.loss));
    c.sim().run_for(
        std::chrono::duration_cast<Duration>(std::chrono::duration<double>(o.minutes * 60)));
    declarations += c.declarations().size();
    for (NodeId id = 0; id < o.nodes; ++id) {
      suspicions += c.watch(id)->stats().suspicions;
      const auto& counters = c.sim().counters(id);
      messages += counters.packets_sent;
      bytes += counters.bytes_sent;
      received += counters.packets_received;
      busiest_sent = std::max(busiest_sent, static_cast<double>(counters.packets_sent) / run_seconds);
      busiest_received =
          std::max(busiest_received, static_cast<double>(counters.packets_received) / run_seconds);
    }
  }
  const double daemon_seconds =
      static_cast<double>(o.long_runs) * o.minutes * 60 * static_cast<double>(o.nodes);
  std::printf(
      "| daemon-hours | false declarations | suspicions | msgs sent/daemon/s (busiest) | "
      "msgs received/daemon/s (busiest) | bytes sent/daemon/s |\n");
  std::printf("|---|---|---|---|---|---|\n");
  std::printf("| %.1f | %llu | %llu | %.1f (%.1f) | %.1f (%.1f) | %.0f |\n",
              daemon_seconds / 3600, static_cast<unsigned long long>(declarations),
              static_cast<unsigned long long>(suspicions),
              static_cast<double>(messages) / daemon_seconds, busiest_sent,
              static_cast<double>(received) / daemon_seconds, busiest_received,
              static_cast<double>(bytes) / daemon_seconds);
  std::printf("\nCPU: %.1f s for the whole bench\n", cpu_seconds() - cpu0);
  return 0;
}
