// large_job_bench: one large job on a simulated cluster of production daemon cores (issue 18's
// control-plane numbers).
//
// N daemons (3 Raft voters, everyone joining through them) each run node::NodeCore
// (tests/sim/node_core_process.h) with the shipped defaults; one job asks for --job-nodes nodes
// (one live worker each: it speaks the worker channel and re-forms in place) and may shrink by
// --losses. Once it runs on every node it asked for, the bench loses --losses plain hosts (not
// a voter), one at a time: each is a silent crash (a power cut: no transport event), waited out
// until the job runs again. For each loss it measures, on the simulator's clock:
//   detected    kill -> the Raft leader holds the first loss report (the leader's incident,
//               rendezvous/history.h: the job tier's declaration plus one message);
//   committed   detected -> the new round's OpenRound is applied (committed) at the leader;
//   at members  detected -> the last member of the new round received its RoundStart;
//   log bytes   the OpenRound entry the leader appended to the Raft log for that round.
// Prints the seed, the setting, a Markdown table of the losses (median / p99 / max where there
// are several) and the wall time. The cluster's safety checkers run after every event as in
// the sim tier; a violation ends the run ("verdict: FAILED ...", exit 1). Not a test (STYLE.md
// 12).
//
// Usage: large_job_bench [--daemons 1027] [--job-nodes 1024] [--losses 5] [--seed 1]
//                        [--loss 0.0]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "bench/stats.h"
#include "daemon/rendezvous/job_table.h"
#include "tests/sim/node_core_cluster.h"

namespace {

using namespace std::chrono_literals;
using elastic::Duration;
using elastic::TimePoint;
using elastic::to_ms;
using elastic::bench::percentile;
using elastic::sim::NodeCoreCluster;
using elastic::sim::NodeCoreClusterOptions;
using elastic::sim::NodeId;

struct Options {
  std::size_t daemons = 1027;
  std::uint32_t job_nodes = 1024;
  int losses = 5;
  std::uint64_t seed = 1;
  double loss = 0.0;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "large_job_bench: %s\nusage: large_job_bench [--daemons N] [--job-nodes N] "
               "[--losses K] [--seed S] [--loss P]\n",
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
    } else if (flag == "--job-nodes") {
      o.job_nodes = static_cast<std::uint32_t>(std::strtoul(value, nullptr, 10));
    } else if (flag == "--losses") {
      o.losses = std::atoi(value);
    } else if (flag == "--seed") {
      o.seed = std::strtoull(value, nullptr, 10);
    } else if (flag == "--loss") {
      o.loss = std::strtod(value, nullptr);
    } else {
      usage(("unknown flag " + flag).c_str());
    }
  }
  if (o.daemons < 5) usage("--daemons must be at least 5");
  if (o.job_nodes < 2 || o.job_nodes > o.daemons) usage("--job-nodes must be 2..--daemons");
  if (o.losses < 1 || static_cast<std::uint32_t>(o.losses) >= o.job_nodes) {
    usage("--losses must be 1..--job-nodes - 1");
  }
  return o;
}

// The cluster, plus what the bench times: RoundStarts per (node, round) of the job and the
// moment each round of it was first applied anywhere (the leader applies a commit first).
class Bench : public NodeCoreCluster {
 public:
  using NodeCoreCluster::NodeCoreCluster;

  void on_round_start(NodeId node, std::uint64_t generation,
                      const elastic::node::RoundStartStamp& start, std::size_t bytes,
                      bool taken) override {
    NodeCoreCluster::on_round_start(node, generation, start, bytes, taken);
    if (start.job != job_) return;
    ++starts_of_[start.round];
    bytes_of_[start.round] += bytes;
    if (!start.delta) ++full_of_[start.round];
    // "At the member": the first start of the round it could read and act on.
    if (taken) starts_[start.round].emplace(node, sim().now());
  }
  void on_applied(NodeId node, const elastic::rendezvous::JobTable& table) override {
    NodeCoreCluster::on_applied(node, table);
    const auto job = table.jobs().find(job_);
    if (job == table.jobs().end()) return;
    committed_.emplace(job->second.round, sim().now());
  }
  void on_persist(NodeId node, const elastic::consensus::Persist& persist) override {
    NodeCoreCluster::on_persist(node, persist);
    const auto* p = process(node);
    if (p == nullptr || !p->started() || !p->core().leading()) return;
    for (const auto& entry : persist.append) {
      const auto command = elastic::rendezvous::decode_command(entry.data);
      if (!command.ok()) continue;
      const auto* open = std::get_if<elastic::rendezvous::OpenRound>(&*command);
      if (open != nullptr && open->job_id == job_) {
        open_bytes_[open->round] = entry.data.size();
      }
    }
  }

  void follow(std::string job) { job_ = std::move(job); }
  const std::map<NodeId, TimePoint>& starts(std::uint64_t round) { return starts_[round]; }
  std::optional<TimePoint> committed(std::uint64_t round) const {
    const auto it = committed_.find(round);
    return it == committed_.end() ? std::nullopt : std::optional<TimePoint>(it->second);
  }
  std::optional<std::size_t> open_bytes(std::uint64_t round) const {
    const auto it = open_bytes_.find(round);
    return it == open_bytes_.end() ? std::nullopt : std::optional<std::size_t>(it->second);
  }

 private:
  std::string job_;
  std::map<std::uint64_t, std::map<NodeId, TimePoint>> starts_;
  std::map<std::uint64_t, TimePoint> committed_;
  std::map<std::uint64_t, std::size_t> open_bytes_;

 public:
  std::map<std::uint64_t, std::uint64_t> starts_of_;  // RoundStarts of the job per round
  std::map<std::uint64_t, std::uint64_t> bytes_of_;   // ... their bodies' bytes
  std::map<std::uint64_t, std::uint64_t> full_of_;    // ... those in full (not a delta)
};

struct LossRow {
  NodeId victim = 0;
  std::uint64_t from_round = 0, to_round = 0;
  double detected_ms = 0, committed_ms = 0, members_ms = 0, total_ms = 0;
  std::size_t members = 0;
  std::size_t log_bytes = 0;
  std::uint64_t ran_in = 0;  // the round the job ran again in (to_round, or a grow after it)
};

std::string stat_cell(std::vector<double> v) {
  if (v.empty()) return "-";
  char buf[96];
  if (v.size() == 1) {
    std::snprintf(buf, sizeof buf, "%.0f", v[0]);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f / %.0f / %.0f", percentile(v, 50), percentile(v, 99),
                  *std::max_element(v.begin(), v.end()));
  }
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  // A thousand daemons log every round: errors only, unless ELASTIC_SIM_LOG names a level.
  const char* log_level = std::getenv("ELASTIC_SIM_LOG");
  spdlog::set_level(log_level != nullptr ? spdlog::level::from_str(log_level) : spdlog::level::err);
  NodeCoreClusterOptions options = elastic::sim::shipped_cluster_options(o.daemons);
  options.core.launcher.job_runtime = Duration::zero();  // workers train until told otherwise
  options.core.launcher.live_workers = 1.0;
  options.core.verify_leader_skips = false;  // the leader's step time is measured
  options.link.base_latency = 200us;
  options.link.jitter = 300us;
  options.link.loss = o.loss;
  std::printf(
      "large_job_bench: seed %llu, %zu daemons (3 voters), a job of %u nodes (one live worker "
      "each, may shrink by %d), %d silent host losses, %.1f%% message loss\n",
      static_cast<unsigned long long>(o.seed), o.daemons, o.job_nodes, o.losses, o.losses,
      o.loss * 100);
  std::fflush(stdout);
  const auto wall_start = std::chrono::steady_clock::now();
  const double cpu_start = elastic::bench::cpu_seconds();
  const auto wall_now = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  };

  Bench c(o.seed, options);
  auto& sim = c.sim();
  const TimePoint started = sim.now();
  const auto fail = [&](const std::string& why) {
    std::printf("verdict: FAILED %s (simulated %.1f s, wall %.0f s)\n", why.c_str(),
                std::chrono::duration<double>(sim.now() - started).count(), wall_now());
    return 1;
  };
  // Membership first: a 1,000-node job waits until its nodes are members.
  if (!sim.run_for(20s)) return fail(sim.violation().value_or("?"));
  c.submit(o.job_nodes - static_cast<std::uint32_t>(o.losses), o.job_nodes);
  std::optional<elastic::rendezvous::JobRecord> job;
  const auto running_on = [&](std::size_t nodes) {
    job = c.job_by_name("c0");
    return job && job->state == elastic::rendezvous::JobState::kRunning &&
           job->ranks.size() == nodes;
  };
  const TimePoint submitted = sim.now();
  while (!running_on(o.job_nodes)) {
    if (sim.now() - submitted > 10min) return fail("the job never ran on every node: " +
                                                   c.describe_jobs());
    if (!sim.run_for(1s)) return fail(sim.violation().value_or("?"));
    c.drive_clients();
  }
  c.follow(job->id);
  std::printf("running on %zu nodes (round %llu) %.1f simulated s after the submit, %.0f s wall\n",
              job->ranks.size(), static_cast<unsigned long long>(job->round),
              std::chrono::duration<double>(sim.now() - submitted).count(), wall_now());
  std::fflush(stdout);
  if (!sim.run_for(5s)) return fail(sim.violation().value_or("?"));

  // SimClock's wall time is a fixed origin plus the simulated time.
  const elastic::sim::SimClock clock(sim, 0);
  // The daemons' own CPU (real time in NodeCore::step) over the loss phase.
  const auto step_seconds = [&] {
    std::vector<double> out(o.daemons, 0.0);
    for (NodeId id = 0; id < o.daemons; ++id) {
      if (const auto* p = c.process(id); p != nullptr) out[id] = p->step_seconds();
    }
    return out;
  };
  const std::vector<double> cpu_before = step_seconds();
  const TimePoint phase_start = sim.now();
  const std::optional<NodeId> phase_leader = c.leader();
  std::vector<LossRow> rows;
  for (int k = 0; k < o.losses; ++k) {
    job = c.job_by_name("c0");
    std::vector<NodeId> candidates;
    for (const auto& r : job->ranks) {
      const NodeId id = static_cast<NodeId>(std::stoul(r.node.substr(1)));
      if (id >= c.voters()) candidates.push_back(id);
    }
    LossRow row;
    row.victim = candidates[sim.rng().below(candidates.size())];
    row.from_round = job->round;
    // A random phase against the keepalive grid.
    if (!sim.run_for(Duration(sim.rng().below(200'000'000)))) {
      return fail(sim.violation().value_or("?"));
    }
    const TimePoint killed = sim.now();
    const std::int64_t killed_wall = clock.wall_ms();
    c.lose(row.victim);
    // The survivors: the new round's members. It is the first round after the loss; it may be
    // followed by a grow onto a spare before it ran (the job runs again then in that one).
    const elastic::rendezvous::RankMap before = job->ranks;
    const std::string victim_name = "d" + std::to_string(row.victim);
    const auto recovered = [&] {
      job = c.job_by_name("c0");
      return job && job->state == elastic::rendezvous::JobState::kRunning &&
             job->round > row.from_round &&
             std::none_of(job->ranks.begin(), job->ranks.end(),
                          [&](const auto& r) { return r.node == victim_name; });
    };
    while (!recovered()) {
      if (sim.now() - killed > 2min) return fail("no recovery after losing d" +
                                                 std::to_string(row.victim));
      if (!sim.run_for(50ms)) return fail(sim.violation().value_or("?"));
    }
    row.to_round = row.from_round + 1;
    row.ran_in = job->round;
    const auto leader = c.leader();
    if (!leader) return fail("no leader after the recovery");
    const auto& incidents = c.process(*leader)->core().rounds().incidents();
    const auto incident =
        std::find_if(incidents.rbegin(), incidents.rend(), [&](const auto& i) {
          return i.node == "d" + std::to_string(row.victim) && i.cause == "node_lost";
        });
    if (incident == incidents.rend() || !incident->detected_s) {
      return fail("the leader has no node_lost incident for d" + std::to_string(row.victim));
    }
    const double detected_wall = static_cast<double>(incident->at_ms) + *incident->detected_s * 1e3;
    row.detected_ms = detected_wall - static_cast<double>(killed_wall);
    const TimePoint detected = killed + std::chrono::duration_cast<Duration>(
                                            std::chrono::duration<double, std::milli>(row.detected_ms));
    const auto committed = c.committed(row.to_round);
    if (!committed) return fail("round " + std::to_string(row.to_round) + " never applied");
    row.committed_ms = to_ms(*committed - detected);
    TimePoint last = *committed;
    for (const auto& r : before) {
      if (r.node == victim_name) continue;
      const NodeId id = static_cast<NodeId>(std::stoul(r.node.substr(1)));
      const auto& starts = c.starts(row.to_round);
      const auto it = starts.find(id);
      if (it != starts.end()) {
        last = std::max(last, it->second);
      } else if (id != *leader) {  // the leader's own member hears of the round in-process
        return fail("d" + std::to_string(id) + " has no RoundStart");
      }
      ++row.members;
    }
    row.members_ms = to_ms(last - detected);
    row.total_ms = to_ms(last - killed);
    row.log_bytes = c.open_bytes(row.to_round).value_or(0);
    rows.push_back(row);
    const std::string ran_in = row.ran_in == row.to_round ? ""
                                                          : " (ran again in grow round " +
                                                                std::to_string(row.ran_in) + ")";
    std::printf(
        "  loss %d: d%u, round %llu -> %llu%s: detected %.0f ms, committed +%.1f ms, at "
        "all %zu members +%.1f ms; OpenRound %zu bytes (%.0f s wall)\n",
        k + 1, static_cast<unsigned>(row.victim), static_cast<unsigned long long>(row.from_round),
        static_cast<unsigned long long>(row.to_round), ran_in.c_str(), row.detected_ms,
        row.committed_ms, row.members, row.members_ms, row.log_bytes, wall_now());
    std::fflush(stdout);
    if (!sim.run_for(5s)) return fail(sim.violation().value_or("?"));
  }

  const std::vector<double> cpu_after = step_seconds();
  const double phase_s = std::chrono::duration<double>(sim.now() - phase_start).count();
  double member_sum = 0, member_max = 0;
  std::size_t counted = 0;
  for (NodeId id = 0; id < o.daemons; ++id) {
    if (c.lost(id) || (phase_leader && id == *phase_leader)) continue;
    const double share = (cpu_after[id] - cpu_before[id]) / phase_s;
    member_sum += share;
    member_max = std::max(member_max, share);
    ++counted;
  }
  const bool same_leader = phase_leader && c.leader() == phase_leader;
  if (const auto* lp = phase_leader ? c.process(*phase_leader) : nullptr; lp != nullptr) {
    const auto& leader = lp->core().rounds().leader();
    std::printf(
        "the leader's planning passes: the job planned %llu times, skipped as settled "
        "%llu times\n",
        static_cast<unsigned long long>(leader.jobs_planned()),
        static_cast<unsigned long long>(leader.jobs_skipped()));
  }
  std::printf("\ndaemon CPU over the %.1f simulated s of losses (real time in NodeCore::step per "
              "simulated second): the Raft leader d%u %.1f%%%s; other daemons mean %.2f%%, "
              "busiest %.2f%%\n",
              phase_s, phase_leader ? static_cast<unsigned>(*phase_leader) : 0u,
              phase_leader ? 100 * (cpu_after[*phase_leader] - cpu_before[*phase_leader]) / phase_s
                           : 0.0,
              same_leader ? "" : " (the leader changed)", 100 * member_sum / counted,
              100 * member_max);

  std::vector<double> detected, committed, members, total, bytes, start_bytes;
  for (const LossRow& r : rows) {
    detected.push_back(r.detected_ms);
    committed.push_back(r.committed_ms);
    members.push_back(r.members_ms);
    total.push_back(r.total_ms);
    bytes.push_back(static_cast<double>(r.log_bytes));
    start_bytes.push_back(static_cast<double>(c.bytes_of_[r.to_round]) / 1024.0);
  }
  std::printf("\n| measure (%zu losses; median / p99 / max) | value |\n|---|---|\n", rows.size());
  std::printf("| kill -> the leader holds the loss report | %s ms |\n", stat_cell(detected).c_str());
  std::printf("| report -> new round committed (applied at the leader) | %s ms |\n",
              stat_cell(committed).c_str());
  std::printf("| report -> RoundStart at every member of the new round | %s ms |\n",
              stat_cell(members).c_str());
  std::printf("| kill -> RoundStart at every member | %s ms |\n", stat_cell(total).c_str());
  std::printf("| Raft log bytes of the new round's OpenRound | %s |\n", stat_cell(bytes).c_str());
  std::printf("| RoundStart bytes delivered for the new round, all members together | %s KiB |\n",
              stat_cell(start_bytes).c_str());
  std::printf(
      "\nRoundStarts delivered: %llu (%.1f MiB); of the job, per round (starts/in "
      "full/KiB):",
      static_cast<unsigned long long>(c.counters().round_starts),
      static_cast<double>(c.counters().round_start_bytes) / (1024.0 * 1024.0));
  for (const auto& [round, n] : c.starts_of_) {
    std::printf(" %llu:%llu/%llu/%.0f", static_cast<unsigned long long>(round),
                static_cast<unsigned long long>(n),
                static_cast<unsigned long long>(c.full_of_[round]),
                static_cast<double>(c.bytes_of_[round]) / 1024.0);
  }
  std::printf("\n");
  std::printf("\nsimulated %.1f s, %llu events, wall %.0f s, CPU %.0f s\nverdict: ok\n",
              std::chrono::duration<double>(sim.now() - started).count(),
              static_cast<unsigned long long>(sim.events_processed()), wall_now(),
              elastic::bench::cpu_seconds() - cpu_start);
  return 0;
}
