// membership_bench: SWIM/Lifeguard membership measured on the deterministic simulator.
//
// Prints Markdown tables (bench/RESULTS.md takes them verbatim):
//  1. per loss rate (0%, 1%, 5%), N nodes for H simulated hours with one crash every
//     `crash_every` (the victim returns with a new generation once everyone marked it dead):
//     detection latency p50/p99 (crash -> every live node marks it dead), false suspicion and
//     false death episodes per 1,000 node-hours, bytes sent per node per second, CPU seconds
//     per simulated node-hour;
//  2. per cluster size, the time for one update (a node joining) to reach 99.99% of nodes.
// Uses the shipped MembershipConfig defaults. Not a test: it asserts nothing (STYLE.md 12).
//
// Usage: membership_bench [--nodes 200] [--hours 1] [--sizes 100,1000] [--repeats 5]
//                         [--seed 1] [--crash-every-s 120]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "tests/sim/membership_process.h"

namespace {

using namespace std::chrono_literals;
using elastic::Duration;
using elastic::TimePoint;
using elastic::to_ms;
using elastic::sim::ClusterOptions;
using elastic::sim::MembershipCluster;
using elastic::sim::NodeId;
using elastic::sim::ObservedEvent;
using elastic::wire::MemberState;

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(rank));
  const auto hi = static_cast<std::size_t>(std::ceil(rank));
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

struct Options {
  std::size_t nodes = 200;
  double hours = 1.0;
  // 10,000 is possible (--sizes 100,1000,10000) but every node holds every member: the
  // bootstrap needs ~30 GB and CPU hours here, so it is not a default.
  std::vector<std::size_t> sizes = {100, 1000};
  int repeats = 5;
  std::uint64_t seed = 1;
  int crash_every_s = 120;
};

struct LossResult {
  double loss = 0;
  std::size_t crashes = 0;
  std::size_t detected = 0;
  double p50 = NAN, p99 = NAN, max = NAN;
  double node_hours = 0;
  std::uint64_t false_suspicion_episodes = 0;
  std::uint64_t false_death_episodes = 0;
  double bytes_per_node_s = 0;
  double cpu_per_node_hour = 0;
};

// Suspicion/death events about a live (name, generation) are merged into episodes: events about
// one subject less than 30 s apart are one episode (the gossip of one suspicion reaching every
// node), so the rate counts incidents, not N copies of each.
struct EpisodeCounter {
  std::unordered_map<std::string, TimePoint> last;
  std::uint64_t episodes = 0;
  void add(const std::string& subject, TimePoint t) {
    auto it = last.find(subject);
    if (it == last.end() || t - it->second > 30s) ++episodes;
    last[subject] = t;
  }
};

LossResult run_loss(const Options& o, double loss) {
  ClusterOptions co;
  co.link.loss = loss;
  co.start_window = 10s;
  MembershipCluster c(o.seed + static_cast<std::uint64_t>(loss * 1000), co);
  c.start_nodes(o.nodes);
  c.sim().run_until_condition([&] { return c.converged(); }, c.sim().now() + 5min, 1s);

  LossResult r;
  r.loss = loss;
  EpisodeCounter suspicions, deaths;
  // Current crash under watch: victim, generation, crash time, observers that marked it dead.
  struct Watch {
    bool active = false;
    NodeId victim = 0;
    std::uint64_t generation = 0;
    TimePoint crashed_at{};
    std::vector<char> seen;
    std::size_t remaining = 0;
    TimePoint done_at{};
  } watch;
  c.set_observer([&](const ObservedEvent& e) {
    const auto id = MembershipCluster::id_of(e.event.name);
    if (!id) return;
    const bool up = c.sim().is_up(*id) && c.sim().info(*id).generation == e.event.generation;
    if (up && e.event.state == MemberState::kSuspect) suspicions.add(e.event.name, e.time);
    if (up && e.event.state == MemberState::kDead) deaths.add(e.event.name, e.time);
    if (watch.active && watch.remaining > 0 && *id == watch.victim &&
        e.event.generation == watch.generation && e.event.state == MemberState::kDead &&
        !watch.seen[e.observer] && c.sim().is_up(e.observer) && e.observer != watch.victim) {
      watch.seen[e.observer] = 1;
      if (--watch.remaining == 0) watch.done_at = e.time;
    }
  });

  const Duration total =
      std::chrono::duration_cast<Duration>(std::chrono::duration<double>(o.hours * 3600.0));
  const Duration crash_every = std::chrono::seconds(o.crash_every_s);
  const TimePoint begin = c.sim().now();
  std::uint64_t bytes_before = 0;
  for (NodeId id = 0; id < c.size(); ++id) bytes_before += c.sim().counters(id).bytes_sent;
  const double cpu_before = cpu_seconds();
  std::vector<double> latencies;
  while (c.sim().now() < begin + total) {
    const TimePoint slot_end = std::min(c.sim().now() + crash_every, begin + total);
    // A victim that is not a seed, so rejoins always have a seed to go through.
    watch = Watch{};
    watch.active = true;
    watch.victim = static_cast<NodeId>(3 + c.sim().rng().below(o.nodes - 3));
    watch.generation = c.sim().info(watch.victim).generation;
    watch.crashed_at = c.sim().now();
    watch.seen.assign(c.size(), 0);
    watch.remaining = c.up_nodes().size() - 1;
    c.crash(watch.victim);
    ++r.crashes;
    c.sim().run_until_condition([&] { return watch.remaining == 0; }, slot_end, 100ms);
    if (watch.remaining == 0) {
      latencies.push_back(to_ms(watch.done_at - watch.crashed_at) / 1000.0);
      ++r.detected;
    }
    watch.active = false;
    c.restart(watch.victim);
    c.sim().run_until(slot_end);
  }
  const double cpu = cpu_seconds() - cpu_before;
  std::uint64_t bytes = 0;
  for (NodeId id = 0; id < c.size(); ++id) bytes += c.sim().counters(id).bytes_sent;
  const double seconds = to_ms(c.sim().now() - begin) / 1000.0;
  r.node_hours = static_cast<double>(o.nodes) * seconds / 3600.0;
  r.p50 = percentile(latencies, 50);
  r.p99 = percentile(latencies, 99);
  r.max = latencies.empty() ? NAN : *std::max_element(latencies.begin(), latencies.end());
  r.false_suspicion_episodes = suspicions.episodes;
  r.false_death_episodes = deaths.episodes;
  r.bytes_per_node_s =
      static_cast<double>(bytes - bytes_before) / (static_cast<double>(o.nodes) * seconds);
  r.cpu_per_node_hour = cpu / r.node_hours;
  return r;
}

struct SpreadResult {
  std::size_t n = 0;
  std::vector<double> seconds;  // per repeat: join -> 99.99% of nodes see it alive
  double bootstrap_cpu = 0;
  double measure_cpu = 0;
};

SpreadResult run_spread(const Options& o, std::size_t n) {
  SpreadResult r;
  r.n = n;
  ClusterOptions co;
  co.start_window = std::chrono::milliseconds(static_cast<long>(10 * n));  // 100 joins/s
  MembershipCluster c(o.seed * 7919 + n, co);
  double cpu = cpu_seconds();
  c.start_nodes(n);
  // Converged when every node knows all n (checked cheaply through alive_count()).
  c.sim().run_until_condition(
      [&] {
        for (NodeId id = 0; id < n; ++id) {
          if (c.member(id)->alive_count() != n) return false;
        }
        return true;
      },
      c.sim().now() + 30min, 1s);
  c.sim().run_for(30s);
  r.bootstrap_cpu = cpu_seconds() - cpu;
  cpu = cpu_seconds();
  const auto needed = static_cast<std::size_t>(std::ceil(0.9999 * static_cast<double>(n)));
  for (int rep = 0; rep < o.repeats; ++rep) {
    std::string subject;
    std::size_t seen = 0;
    TimePoint reached{};
    std::vector<char> saw(n + static_cast<std::size_t>(o.repeats), 0);
    c.set_observer([&](const ObservedEvent& e) {
      if (e.event.name != subject || e.event.state != MemberState::kAlive || saw[e.observer]) {
        return;
      }
      saw[e.observer] = 1;
      if (e.observer < n && ++seen == needed) reached = e.time;
    });
    const TimePoint start = c.sim().now();
    subject = c.name(static_cast<NodeId>(c.size()));
    c.add_node();
    c.sim().run_until_condition([&] { return seen >= needed; }, start + 2min, 50ms);
    r.seconds.push_back(seen >= needed ? to_ms(reached - start) / 1000.0 : NAN);
    c.set_observer(nullptr);
    c.sim().run_for(20s);
  }
  r.measure_cpu = cpu_seconds() - cpu;
  return r;
}

std::vector<std::size_t> parse_sizes(const char* s) {
  std::vector<std::size_t> out;
  for (const char* p = s; *p != '\0';) {
    char* end = nullptr;
    out.push_back(std::strtoull(p, &end, 10));
    p = *end == ',' ? end + 1 : end;
    if (end == p && *p != '\0') break;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--nodes")
      o.nodes = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--hours")
      o.hours = std::strtod(argv[i + 1], nullptr);
    else if (a == "--sizes")
      o.sizes = parse_sizes(argv[i + 1]);
    else if (a == "--repeats")
      o.repeats = std::atoi(argv[i + 1]);
    else if (a == "--seed")
      o.seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--crash-every-s")
      o.crash_every_s = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "membership_bench: unknown option %s\n", a.c_str());
      return 64;
    }
  }
  if (o.nodes < 10) {
    std::fprintf(stderr, "membership_bench: --nodes must be at least 10\n");
    return 64;
  }

  const elastic::config::MembershipConfig defaults{};
  std::printf(
      "Config: shipped MembershipConfig defaults (probe %.0f ms, timeout %.0f ms, gossip "
      "%.0f ms x %d, suspicion %d/%d, retransmit %d); links 0.2-0.5 ms.\n\n",
      to_ms(defaults.probe_interval), to_ms(defaults.probe_timeout),
      to_ms(defaults.gossip_interval), defaults.gossip_fanout, defaults.suspicion_multiplier,
      defaults.suspicion_max_multiplier, defaults.retransmit_multiplier);

  if (o.hours > 0) {
    std::printf(
        "### Failure detection, N = %zu, %.2g simulated h per loss rate, a crash every "
        "%d s\n\n",
        o.nodes, o.hours, o.crash_every_s);
    std::printf(
        "| loss | crashes (detected) | detection p50 | detection p99 | max | false "
        "suspicions / 1k node-h | false deaths / 1k node-h | bytes/node/s | CPU s / "
        "node-h |\n|---|---|---|---|---|---|---|---|---|\n");
    std::fflush(stdout);
    for (double loss : {0.0, 0.01, 0.05}) {
      const auto r = run_loss(o, loss);
      std::printf("| %.0f%% | %zu (%zu) | %.1f s | %.1f s | %.1f s | %.0f | %.1f | %.0f | %.4f |\n",
                  loss * 100, r.crashes, r.detected, r.p50, r.p99, r.max,
                  static_cast<double>(r.false_suspicion_episodes) * 1000.0 / r.node_hours,
                  static_cast<double>(r.false_death_episodes) * 1000.0 / r.node_hours,
                  r.bytes_per_node_s, r.cpu_per_node_hour);
      std::fflush(stdout);
    }
    std::printf("\n");
  }

  if (!o.sizes.empty()) {
    std::printf("### Dissemination: a join reaching 99.99%% of nodes (%d joins per size)\n\n",
                o.repeats);
    std::printf(
        "| N | median | min | max | Serf model (200 ms, fan-out 3) | bootstrap CPU s | "
        "measure CPU s |\n|---|---|---|---|---|---|---|\n");
    std::fflush(stdout);
    for (std::size_t n : o.sizes) {
      const auto r = run_spread(o, n);
      std::vector<double> ok;
      for (double s : r.seconds) {
        if (!std::isnan(s)) ok.push_back(s);
      }
      const char* model = n == 1000 ? "2.2 s" : n == 10000 ? "2.6 s" : "-";
      std::printf("| %zu | %.2f s | %.2f s | %.2f s | %s | %.1f | %.1f |%s\n", n,
                  percentile(ok, 50), ok.empty() ? NAN : *std::min_element(ok.begin(), ok.end()),
                  ok.empty() ? NAN : *std::max_element(ok.begin(), ok.end()), model,
                  r.bootstrap_cpu, r.measure_cpu,
                  ok.size() == r.seconds.size() ? "" : " (some joins never reached 99.99%)");
      std::fflush(stdout);
    }
  }
  return 0;
}
