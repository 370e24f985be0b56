// membership_bench: SWIM/Lifeguard membership measured on the deterministic simulator.
//
// Prints Markdown tables (bench/RESULTS.md takes them verbatim):
//  1. per loss rate (0%, 1%, 5%), N nodes for H simulated hours with one crash every
//     `crash_every` (the victim returns with a new generation once everyone marked it dead):
//     detection latency p50/p99 (crash -> every live node marks it dead), false suspicion and
//     false death episodes per 1,000 node-hours, bytes sent per node per second, CPU seconds
//     per simulated node-hour;
//  2. per cluster size N (100, 1,000, 10,000): every node starts knowing all N members (bulk
//     bootstrap, Membership::seed_members; no join storm), then, after a quiet steady-state
//     window that gives bytes sent per node per second and CPU seconds per simulated node-hour,
//     `repeats` single updates are injected one after another and timed until 99% and 99.99% of
//     the other live nodes hold them; plus the process's RSS after the bootstrap and its peak.
//     The update is a refutation by default (a member told it is suspected gossips alive at
//     incarnation + 1: one source) or, with --update join, a new node joining through the three
//     seeds (the joiner and the seeds all gossip it). Nodes are polled every 10 ms of virtual
//     time for the update, so times are exact to 10 ms.
// Uses the shipped MembershipConfig defaults. Not a test: it asserts nothing (STYLE.md 12).
//
// Usage: membership_bench [--nodes 200] [--hours 1] [--sizes 100,1000,10000] [--repeats 5]
//                         [--seed 1] [--crash-every-s 120] [--steady-s 60]
//                         [--update refute|join]
// (--hours 0 skips table 1; --sizes "" skips table 2.)
#include <malloc.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench/stats.h"
#include "tests/sim/membership_process.h"

namespace {

using elastic::bench::cpu_seconds;
using elastic::bench::percentile;

using namespace std::chrono_literals;
using elastic::Duration;
using elastic::TimePoint;
using elastic::to_ms;
using elastic::sim::ClusterOptions;
using elastic::sim::MembershipCluster;
using elastic::sim::NodeId;
using elastic::sim::ObservedEvent;
using elastic::wire::MemberState;

// Resident and peak resident memory of this process, in bytes (from /proc/self/status).
struct Memory {
  double rss = 0;
  double peak = 0;
};
Memory memory() {
  Memory m;
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    double kib = 0;
    if (key == "VmRSS:" && status >> kib) m.rss = kib * 1024;
    if (key == "VmHWM:" && status >> kib) m.peak = kib * 1024;
  }
  return m;
}

struct Options {
  std::size_t nodes = 200;
  double hours = 1.0;
  // Every node holds every member: 10,000 nodes are 10^8 records (about 7 GB here).
  std::vector<std::size_t> sizes = {100, 1000, 10000};
  int repeats = 5;
  std::uint64_t seed = 1;
  int crash_every_s = 120;
  int steady_s = 60;
  bool join = false;  // --update join
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
  std::vector<double> p99;      // per update: injection -> 99% of the other live nodes hold it
  std::vector<double> p9999;    // ... -> 99.99%
  double bootstrap_cpu = 0;     // CPU s of the bulk bootstrap
  double bytes_per_node_s = 0;  // steady state (no update in flight)
  double cpu_per_node_hour = 0;
  double rss_bootstrapped = 0;  // bytes, right after the bootstrap
  double rss_before = 0;        // bytes, before the cluster was built
  double peak = 0;              // process peak RSS after this size (sizes run in order)
};

SpreadResult run_spread(const Options& o, std::size_t n) {
  SpreadResult r;
  r.n = n;
  r.rss_before = memory().rss;
  ClusterOptions co;
  MembershipCluster c(o.seed * 7919 + n, co);
  double cpu = cpu_seconds();
  c.start_nodes_bulk(n);
  r.bootstrap_cpu = cpu_seconds() - cpu;
  r.rss_bootstrapped = memory().rss;

  // Steady state: let every probe cycle start, then count a quiet window.
  c.sim().run_for(5s);
  std::uint64_t bytes_before = 0;
  for (NodeId id = 0; id < n; ++id) bytes_before += c.sim().counters(id).bytes_sent;
  cpu = cpu_seconds();
  c.sim().run_for(std::chrono::seconds(o.steady_s));
  const double steady_cpu = cpu_seconds() - cpu;
  std::uint64_t bytes = 0;
  for (NodeId id = 0; id < n; ++id) bytes += c.sim().counters(id).bytes_sent;
  r.bytes_per_node_s = static_cast<double>(bytes - bytes_before) /
                       (static_cast<double>(n) * static_cast<double>(o.steady_s));
  r.cpu_per_node_hour =
      steady_cpu / (static_cast<double>(n) * static_cast<double>(o.steady_s) / 3600.0);

  for (int rep = 0; rep < o.repeats; ++rep) {
    // The subject and the nodes that must learn of it (every other live original node).
    std::string subject;
    std::uint32_t incarnation = 0;
    std::vector<NodeId> waiting;
    const TimePoint start = c.sim().now();
    if (o.join) {
      subject = c.name(static_cast<NodeId>(c.size()));
      for (NodeId id = 0; id < n; ++id) waiting.push_back(id);
      c.add_node();
    } else {
      // A non-seed, a different one each time, told by a random other node that it is suspected.
      const auto target = static_cast<NodeId>(3 + c.sim().rng().below(n - 3));
      auto accuser = static_cast<NodeId>(c.sim().rng().below(n - 1));
      if (accuser >= target) ++accuser;
      subject = c.name(target);
      incarnation = c.member(target)->member(subject)->incarnation + 1;
      for (NodeId id = 0; id < n; ++id) {
        if (id != target) waiting.push_back(id);
      }
      c.inject_suspicion(accuser, target);
    }
    const std::size_t others = waiting.size();
    const auto need99 = static_cast<std::size_t>(std::ceil(0.99 * static_cast<double>(others)));
    const auto need9999 = static_cast<std::size_t>(std::ceil(0.9999 * static_cast<double>(others)));
    std::size_t have = 0;
    double t99 = NAN, t9999 = NAN;
    const auto holds = [&](NodeId id) {
      const auto v = c.member(id)->member(subject);
      return v && v->state == MemberState::kAlive && v->incarnation >= incarnation;
    };
    c.sim().run_until_condition(
        [&] {
          std::erase_if(waiting, holds);
          have = others - waiting.size();
          const double t = to_ms(c.sim().now() - start) / 1000.0;
          if (std::isnan(t99) && have >= need99) t99 = t;
          if (std::isnan(t9999) && have >= need9999) t9999 = t;
          return have >= need9999;
        },
        start + 2min, 10ms);
    r.p99.push_back(t99);
    r.p9999.push_back(t9999);
    // Let the update's retransmissions finish before the next one.
    c.sim().run_for(20s);
  }
  r.peak = memory().peak;
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
    else if (a == "--steady-s")
      o.steady_s = std::atoi(argv[i + 1]);
    else if (a == "--update" && std::string(argv[i + 1]) == "join")
      o.join = true;
    else if (a == "--update" && std::string(argv[i + 1]) == "refute")
      o.join = false;
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
    std::printf(
        "### Dissemination: one %s reaching 99%% and 99.99%% of the other live nodes\n\n"
        "Bulk bootstrap at every size (each node starts knowing all N members alive, "
        "Membership::seed_members; no join storm); gossip every %.0f ms to %d members "
        "(Serf's model: 200 ms, fan-out 3); %d updates per size, one after another; steady "
        "state measured over %d quiet simulated seconds; times polled every 10 ms.\n\n",
        o.join ? "join (a new node, through 3 seeds)" : "refutation (alive, incarnation + 1)",
        to_ms(defaults.gossip_interval), defaults.gossip_fanout, o.repeats, o.steady_s);
    std::printf(
        "| N | 99%%: p50 (min-max) | 99.99%%: p50 (min-max) | Serf model | bytes/node/s | CPU s / "
        "node-h | bootstrap CPU s | RSS bootstrapped | bytes / member record | peak RSS "
        "|\n|---|---|---|---|---|---|---|---|---|---|\n");
    std::fflush(stdout);
    for (std::size_t n : o.sizes) {
      if (n < 10) {
        std::fprintf(stderr, "membership_bench: sizes must be at least 10\n");
        return 64;
      }
      const auto r = run_spread(o, n);
      const auto cell = [](const std::vector<double>& v) {
        std::vector<double> ok;
        for (double s : v) {
          if (!std::isnan(s)) ok.push_back(s);
        }
        char buf[96];
        if (ok.empty()) return std::string("never");
        std::snprintf(buf, sizeof buf, "%.2f s (%.2f-%.2f)%s", percentile(ok, 50),
                      *std::min_element(ok.begin(), ok.end()),
                      *std::max_element(ok.begin(), ok.end()),
                      ok.size() == v.size() ? "" : " (some never)");
        return std::string(buf);
      };
      const char* model = n == 1000 ? "2.2 s" : n == 10000 ? "2.6 s" : "-";
      const double per_record =
          (r.rss_bootstrapped - r.rss_before) / (static_cast<double>(n) * static_cast<double>(n));
      std::printf("| %zu | %s | %s | %s | %.0f | %.4f | %.1f | %.0f MiB | %.0f | %.0f MiB |\n", n,
                  cell(r.p99).c_str(), cell(r.p9999).c_str(), model, r.bytes_per_node_s,
                  r.cpu_per_node_hour, r.bootstrap_cpu, r.rss_bootstrapped / (1 << 20), per_record,
                  r.peak / (1 << 20));
      std::fflush(stdout);
      malloc_trim(0);  // give the freed cluster back, so the next size's RSS starts clean
    }
  }
  return 0;
}
