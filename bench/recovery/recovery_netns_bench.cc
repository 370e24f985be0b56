// recovery_netns_bench: how long a running job is without training after an incident, in real
// elasticd daemons on three namespaced hosts (tests/netns) with elasticd's DEFAULT settings (the
// values of conf/elasticd.toml: job keepalive 200 ms, job peer timeout 600 ms, lease 3 s,
// election timeout 1 s, last call 10 s, stop grace 10 s; only checkpoint.root is set) and real
// elastic-trainer Gloo workers (Fashion-MNIST, 1 worker per host, 1 thread each). Issue 5's
// numbers:
//  - idle: with no job, each daemon's CPU (utime + stime from /proc/<pid>/stat over IDLE
//    seconds, as % of one core) and RSS (VmRSS); after the incidents also the peak (VmHWM);
//  - incidents, INCIDENTS each: (i) kill -9 of a daemon that is not the Raft leader (its worker
//    dies with it), (ii) kill -9 of one worker (of a non-leader host); each measured from the
//    kill to the first training step of the next round, split at these milestones (all on this
//    machine's clock, which every daemon shares):
//      detect      the first sign anywhere: a survivor's job tier "peer <victim> (gen G) lost"
//                  (daemon kill) or the victim's daemon reaping its worker "(pid P) killed by
//                  signal 9" (worker crash), spdlog's millisecond timestamps; or the leader's
//                  decision below if that came first (after a daemon kill the survivors'
//                  trainers usually fail their collective and exit within ~0.2 s, before the job
//                  tier's ~0.4 s)
//      decide      -> the job's first event after the kill in its event log (at_ms: the leader's
//                  clock when it decided "recovering" or opened the next round); a lost node's
//                  work is re-placed only once its 3 s lease has run out, and a worker failure
//                  waits out the job's restart backoff (1 s by default)
//      rendezvous  -> the next round's "running" event (every daemon of the round started it)
//      spawn       -> the trainer's "start" line (process start, data set, store, Gloo,
//                  checkpoint load; the resume line comes just before it), or with live
//                  re-formation (the default) the first "reform" line: the survivors re-formed
//                  in place (new store and group, step agreement, state transfer)
//      load        -> the first "step" or "reformed_step" line (the first step)
//      stop        (overlaps the others; from the kill) every worker of the broken round that
//                  does not carry on is gone (with re-formation in place: the victim's),
//                  polled in /proc every ~10 ms; "kept" counts those that carried on
//    KINDS=hang adds (iii) SIGSTOP of one worker (of a non-leader host) in a job with the shortest
//    hang_timeout (kHangTimeout): detect is its daemon's "is hung" line, and the first step is
//    the survivors' (the target: hang_timeout + 1 s).
//    After a daemon kill, also the node's return: the bench restarts the daemon and measures
//    the running ranks' pause while the job grows back (their last step line before the grown
//    round -> its first). LIVE=0 passes --no-live to the trainer: the stop-and-restart path.
//    Trainer lines are timed when the bench reads them (tailing every log every ~10 ms), so
//    they are late by at most the poll interval plus the pipe to the log file.
//    After each daemon kill the daemon is restarted (same state dir) and the bench waits until
//    the job is back on 3 nodes and training before the next incident.
//
//   recovery_netns_bench [--incidents N] [--idle SECONDS]
//
// Prints Markdown tables on stdout, progress on stderr; exit 1 on a failed run (after the
// namespaces are removed: failures unwind instead of exiting). Needs root.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
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
using elastic::netns::JobView;
using elastic::netns::NetnsCluster;
using elastic::netns::WorkerProc;
using namespace std::chrono_literals;
using Wall = std::chrono::system_clock;

constexpr int kHosts = 3;
// Steps a round trains before the next incident: past its start-up and two regular checkpoints
// (every 10 steps), so the steps lost are those of a round in its stride.
constexpr std::int64_t kSettleSteps = 25;

std::atomic<bool> g_stop{false};
extern "C" void on_signal(int) { g_stop.store(true); }

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] void fail(const std::string& message) { throw Failure(message); }

double wall_ms() {
  return std::chrono::duration<double, std::milli>(Wall::now().time_since_epoch()).count();
}

std::vector<int> all_hosts() { return {0, 1, 2}; }

// ---- /proc

struct ProcSample {
  double cpu_s = 0;  // utime + stime
  double rss_mb = 0, hwm_mb = 0;
};

ProcSample sample(pid_t pid) {
  ProcSample s;
  const std::string stat = elastic::testing::read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto paren = stat.rfind(')');
  if (paren != std::string::npos) {
    std::istringstream fields(stat.substr(paren + 2));
    std::vector<std::string> f;
    std::string field;
    while (fields >> field) f.push_back(field);
    // Fields 14 and 15 of stat (utime, stime) are 12 and 13 after the state (field 3).
    if (f.size() > 12) {
      s.cpu_s = (std::stod(f[11]) + std::stod(f[12])) / static_cast<double>(::sysconf(_SC_CLK_TCK));
    }
  }
  std::istringstream status(
      elastic::testing::read_file("/proc/" + std::to_string(pid) + "/status"));
  std::string line;
  while (std::getline(status, line)) {
    long kb = 0;
    if (std::sscanf(line.c_str(), "VmRSS: %ld kB", &kb) == 1) s.rss_mb = kb / 1024.0;
    if (std::sscanf(line.c_str(), "VmHWM: %ld kB", &kb) == 1) s.hwm_mb = kb / 1024.0;
  }
  return s;
}

// ---- the trainers' lines, tailed

struct Line {
  std::string event;
  std::int64_t round = -1, step = -1;
  bool intact = false;  // a "reform" line: the rank left a healthy group at an agreed step
  double seen_ms = 0;   // wall clock when the bench read it
};

// Reads what was appended to every rank log of one job since the last poll.
class LogTail {
 public:
  LogTail(const DaemonCluster& daemons, std::string job)
      : daemons_(daemons), job_(std::move(job)) {}

  std::vector<Line> poll() {
    std::vector<Line> lines;
    const double now = wall_ms();
    for (int host = 0; host < kHosts; ++host) {
      std::error_code error;
      const std::string dir = daemons_.worker_log_dir(host) + "/" + job_;
      // <job>/round-<R>/rank-<N>.log (worker_logs.h).
      for (const auto& entry : std::filesystem::recursive_directory_iterator(dir, error)) {
        const std::string path = entry.path().string();
        if (path.size() < 4 || path.substr(path.size() - 4) != ".log") continue;
        File& file = files_[path];
        std::ifstream in(path, std::ios::binary);
        in.seekg(0, std::ios::end);
        const auto size = static_cast<std::uint64_t>(in.tellg());
        if (size < file.offset) file = File{};  // rotated: start over
        if (size == file.offset) continue;
        in.seekg(static_cast<std::streamoff>(file.offset));
        std::string chunk(size - file.offset, '\0');
        in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
        file.offset = size;
        file.partial += chunk;
        std::size_t start = 0, end = 0;
        while ((end = file.partial.find('\n', start)) != std::string::npos) {
          const std::string text(elastic::netns::without_log_stamp(
              std::string_view(file.partial).substr(start, end - start)));
          start = end + 1;
          if (text.empty() || text.front() != '{') continue;
          const auto json = nlohmann::json::parse(text, nullptr, false);
          if (json.is_discarded() || !json.is_object()) continue;
          Line line;
          line.event = json.value("event", "");
          line.round = json.value("round", std::int64_t{-1});
          line.step = json.value("step", std::int64_t{-1});
          line.intact = json.value("intact", false);
          line.seen_ms = now;
          lines.push_back(line);
        }
        file.partial.erase(0, start);
      }
    }
    return lines;
  }

 private:
  struct File {
    std::uint64_t offset = 0;
    std::string partial;
  };
  const DaemonCluster& daemons_;
  std::string job_;
  std::map<std::string, File> files_;
};

// The job's hang_timeout for KINDS=hang: the shortest a job may set.
constexpr const char* kHangTimeout = "5s";

// ---- one incident

// The steps each round logged: first and last, by round.
struct Progress {
  struct Range {
    std::int64_t first = -1, last = -1;
    double first_ms = -1, last_ms = -1;  // when the bench read its first and last step line
  };
  std::map<std::uint64_t, Range> rounds;
  std::set<std::uint64_t> intact;  // rounds a rank switched to from a healthy group (no abort)
  void add(const Line& line) {
    if (line.event == "reform" && line.intact && line.round >= 0) {
      intact.insert(static_cast<std::uint64_t>(line.round));
    }
    // "reformed_step": each rank's first step after re-forming in place (rank 0 alone prints
    // "step" lines).
    if ((line.event != "step" && line.event != "reformed_step") || line.round < 0) return;
    Range& range = rounds[static_cast<std::uint64_t>(line.round)];
    if (range.first < 0 || line.step < range.first) range.first = line.step;
    range.last = std::max(range.last, line.step);
    if (range.first_ms < 0) range.first_ms = line.seen_ms;
    range.last_ms = line.seen_ms;
  }
  // Steps the round has trained so far (0 if none logged).
  std::int64_t trained(std::uint64_t round) const {
    const auto found = rounds.find(round);
    return found == rounds.end() || found->second.first < 0
               ? 0
               : found->second.last - found->second.first + 1;
  }
  std::int64_t last(std::uint64_t round) const {
    const auto found = rounds.find(round);
    return found == rounds.end() ? -1 : found->second.last;
  }
};

struct Incident {
  std::string kind, victim;
  std::uint64_t from_round = 0, to_round = 0;
  // Milliseconds since the kill.
  double detect = -1, decided = -1, running = -1, start = -1, step = -1, stop = -1;
  std::int64_t last_step = -1, resumed = -1;
  std::string cause;           // the reason of the first event after the kill
  std::uint64_t restarts = 0;  // the job's restarts after the incident
  std::size_t kept = 0;        // workers of the broken round that re-formed in place
  double grow_pause = -1;      // after a daemon kill: the running ranks' pause when it returned
  bool grow_intact = false;    // ... and they switched at an agreed step (no abort)
};

// The wall-clock time (ms since the epoch) of a daemon log line, or nullopt.
std::optional<double> line_time_ms(const std::string& line) {
  return elastic::bench::log_line_ms(line);
}

// The earliest time at or after `t0` (ms) of a line in `hosts`' daemon logs containing every
// one of `parts`; -1 if none.
double first_log_line(const DaemonCluster& daemons, const std::vector<int>& hosts, double t0,
                      const std::vector<std::string>& parts) {
  double first = -1;
  for (const int host : hosts) {
    std::istringstream lines(daemons.log(host));
    std::string line;
    while (std::getline(lines, line)) {
      if (!std::all_of(parts.begin(), parts.end(), [&](const std::string& part) {
            return line.find(part) != std::string::npos;
          })) {
        continue;
      }
      const auto at = line_time_ms(line);
      // spdlog stamps whole milliseconds; the kill's own millisecond counts.
      if (at && *at >= std::floor(t0) && (first < 0 || *at < first)) first = *at;
    }
  }
  return first;
}

int leader_host(DaemonCluster& daemons, const std::vector<int>& hosts) {
  const std::string leader = daemons.wait_leader(hosts, 60s);
  if (leader.empty()) fail("no leader:\n" + daemons.describe_raft(hosts));
  return daemons.host_of(leader);
}

// Waits until the job runs on `nodes` nodes and has logged a step of its current round.
JobView wait_training(const DaemonCluster& daemons, int through, const std::string& id,
                      LogTail& tail, Progress& steps, std::size_t nodes,
                      std::chrono::milliseconds timeout) {
  JobView view;
  const bool ok = elastic::testing::wait_until(
      [&] {
        for (const auto& line : tail.poll()) steps.add(line);
        auto seen = daemons.job(through, id);
        if (!seen.ok()) return false;
        view = *seen;
        return g_stop.load() || (view.state == "running" && view.ranks.size() == nodes &&
                                 steps.trained(view.round) >= kSettleSteps);
      },
      timeout);
  if (g_stop.load()) fail("interrupted");
  if (!ok)
    fail("job " + id + " is not training on " + std::to_string(nodes) +
         " nodes: " + view.summary());
  return view;
}

Incident measure(DaemonCluster& daemons, const std::string& id, const std::string& kind,
                 LogTail& tail, Progress& steps) {
  const int leader = leader_host(daemons, all_hosts());
  // Status goes through the leader, unless the leader's host is the victim ("leader").
  const int through = kind == "leader" ? (leader + 1) % kHosts : leader;
  const JobView before = wait_training(daemons, through, id, tail, steps, 3, 300s);
  Incident incident;
  incident.kind = kind;
  incident.from_round = before.round;
  int victim = -1;
  for (const auto& rank : before.ranks) {
    const int host = daemons.host_of(rank.node);
    if (kind == "leader" ? host == leader : host != leader) victim = host;
  }
  if (victim < 0) fail("no " + std::string(kind == "leader" ? "" : "non-") + "leader node in " +
                       before.summary());
  incident.victim = DaemonCluster::name(victim);
  const std::vector<WorkerProc> old_workers = elastic::netns::find_workers(id);
  std::optional<WorkerProc> target;
  for (const auto& worker : old_workers) {
    if (worker.node == incident.victim) target = worker;
  }
  if (!target) fail("no worker of " + id + " on " + incident.victim);

  const double t0 = wall_ms();
  if (kind == "hang") {
    // Its daemon ends it (SIGABRT, SIGCONT, SIGKILL); SIGKILL works on a stopped process too,
    // should the bench fail first.
    ::kill(target->pid, SIGSTOP);
  } else if (kind != "worker") {
    daemons.daemon(victim).signal(SIGKILL);
  } else {
    ::kill(target->pid, SIGKILL);
  }
  // When each worker of the broken round was seen gone (those that re-form in place never are).
  std::map<pid_t, double> gone_ms;
  std::optional<double> start_seen, step_seen;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  auto next_status = std::chrono::steady_clock::now();
  JobView after;
  while (!(step_seen && after.round > before.round && after.state == "running")) {
    if (std::chrono::steady_clock::now() > deadline || g_stop.load()) {
      fail(kind + " incident on " + incident.victim +
           ": no first step of a new round within 120 s; " + after.summary());
    }
    for (const WorkerProc& w : old_workers) {
      if (!gone_ms.contains(w.pid) && elastic::netns::process_gone(w.pid)) {
        gone_ms[w.pid] = wall_ms() - t0;
      }
    }
    for (const auto& line : tail.poll()) {
      if (line.round < 0) continue;
      const auto round = static_cast<std::uint64_t>(line.round);
      steps.add(line);
      if (round <= before.round) continue;
      // "start": a new process resumed from the checkpoint; "reform": a rank re-formed in
      // place (its step is the agreed one).
      if ((line.event == "start" || line.event == "reform") && !start_seen) {
        start_seen = line.seen_ms;
        incident.resumed = line.step;
      }
      if ((line.event == "step" || line.event == "reformed_step") && !step_seen) {
        step_seen = line.seen_ms;
      }
    }
    if (std::chrono::steady_clock::now() >= next_status) {
      // Through the leader (never the victim); elasticctl costs a few ms of CPU, so not on
      // every pass: the event times come from the job's log, not from this poll.
      if (auto seen = daemons.job(through, id); seen.ok()) after = *seen;
      next_status = std::chrono::steady_clock::now() + 200ms;
    }
    std::this_thread::sleep_for(10ms);
  }
  incident.to_round = after.round;
  incident.last_step = steps.last(before.round);
  // Stop: the last worker of the broken round that did not carry on was gone (the victim's
  // with live re-formation; every one with restarts).
  for (const WorkerProc& w : old_workers) {
    if (!gone_ms.contains(w.pid) && elastic::netns::process_gone(w.pid)) {
      gone_ms[w.pid] = wall_ms() - t0;
    }
    if (!gone_ms.contains(w.pid)) ++incident.kept;
  }
  for (const auto& [pid, at] : gone_ms) incident.stop = std::max(incident.stop, at);
  incident.start = *start_seen - t0;
  incident.step = *step_seen - t0;
  for (const auto& event : after.events) {
    const double at = static_cast<double>(event.at_ms) - t0;
    if (static_cast<double>(event.at_ms) < std::floor(t0)) continue;  // before the kill
    if (incident.decided < 0) {
      incident.decided = at;
      incident.cause = event.reason;
    }
    // The first round after the kill to run (a worker crash may shrink, then grow at once).
    if (event.to == "running" && event.round > before.round && incident.running < 0) {
      incident.running = at;
    }
  }
  std::vector<int> survivors;
  for (int host = 0; host < kHosts; ++host) {
    if (host != victim) survivors.push_back(host);
  }
  const double detected =
      kind == "hang"
          ? first_log_line(daemons, {victim}, t0, {"on node " + incident.victim, "is hung"})
      : kind != "worker"
          ? first_log_line(daemons, survivors, t0, {"peer " + incident.victim + " (gen", " lost"})
          : first_log_line(daemons, {victim}, t0,
                           {"(pid " + std::to_string(target->pid) + ")", "killed by signal"});
  // Whichever knew first: the log line, or the leader's decision (on a daemon kill the
  // survivors' trainers often see their Gloo connections to the dead peer reset and exit before
  // the job tier declares it lost).
  incident.detect = detected < 0 ? incident.decided : std::min(detected - t0, incident.decided);
  incident.restarts = after.restarts;
  if (kind != "worker" && kind != "hang") {
    std::cerr << "  restarting " << incident.victim << "\n";
    if (const auto started = daemons.start(victim, 60s); !started.ok()) {
      fail(started.error().message);
    }
  }
  // The job grows back to 3 (the returning daemon, or the crashed worker's node once the others
  // went on without it): how long the running ranks stop training for it (the last step line
  // before the grown round -> its first).
  const JobView grown = wait_training(daemons, through, id, tail, steps, 3, 120s);
  const auto regrown = steps.rounds.find(grown.round);
  if (grown.round > before.round + 1 && regrown != steps.rounds.end() &&
      regrown != steps.rounds.begin() && std::prev(regrown)->first > before.round) {
    incident.grow_pause = regrown->second.first_ms - std::prev(regrown)->second.last_ms;
    incident.grow_intact = steps.intact.contains(grown.round);
  }
  return incident;
}

// ---- report

std::string cell(const std::vector<double>& values) {
  if (values.empty()) return "-";
  return format(quantile(values, 0.5) / 1000, 2) + " / " +
         format(*std::max_element(values.begin(), values.end()) / 1000, 2);
}

void report(const std::string& title, const std::vector<Incident>& incidents) {
  std::vector<double> total, detect, decide, rendezvous, spawn, load, stop, lost, pause;
  std::size_t kept = 0, intact = 0;
  for (const auto& i : incidents) {
    kept += i.kept;
    if (i.grow_pause >= 0) pause.push_back(i.grow_pause);
    if (i.grow_pause >= 0 && i.grow_intact) ++intact;
    total.push_back(i.step);
    detect.push_back(i.detect);
    decide.push_back(i.decided - i.detect);
    rendezvous.push_back(i.running - i.decided);
    spawn.push_back(i.start - i.running);
    load.push_back(i.step - i.start);
    stop.push_back(i.stop);
    lost.push_back(static_cast<double>(i.last_step - i.resumed) * 1000);
  }
  std::cout << "\n"
            << title << " (" << incidents.size() << " incidents; seconds, p50 / max)\n\n"
            << "| total: kill -> first step | detect | decide | rendezvous | spawn | load | "
               "stop (from the kill) | steps lost |\n"
            << "|---|---|---|---|---|---|---|---|\n"
            << "| " << cell(total) << " | " << cell(detect) << " | " << cell(decide) << " | "
            << cell(rendezvous) << " | " << cell(spawn) << " | " << cell(load) << " | "
            << cell(stop) << " | " << format(quantile(lost, 0.5) / 1000, 0) << " / "
            << format(*std::max_element(lost.begin(), lost.end()) / 1000, 0) << " |\n";
  std::cout << "\nWorkers of the broken rounds that re-formed in place: " << kept
            << " (spawn is then the re-formation: the \"reform\" line instead of \"start\")."
            << (pause.empty()
                    ? std::string()
                    : " The node's return -> running ranks' pause: " + cell(pause) +
                          " s (p50 / max); " + std::to_string(intact) + " of " +
                          std::to_string(pause.size()) + " grows switched intact (no abort).")
            << "\n";
  std::cout << "\n<details><summary>each incident (ms since the kill)</summary>\n\n"
            << "| # | victim | rounds | detect | decided | running | start line | first step | "
               "stop | last step -> resumed | restarts | first event |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  int n = 0;
  for (const auto& i : incidents) {
    std::cout << "| " << ++n << " | " << i.victim << " | " << i.from_round << " -> " << i.to_round
              << " | " << format(i.detect, 0) << " | " << format(i.decided, 0) << " | "
              << format(i.running, 0) << " | " << format(i.start, 0) << " | " << format(i.step, 0)
              << " | " << format(i.stop, 0) << " | " << i.last_step << " -> " << i.resumed << " | "
              << i.restarts << " | " << i.cause << " |\n";
  }
  std::cout << "\n</details>\n";
}

int run(int incidents, int idle_s) {
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
  leader_host(daemons, all_hosts());

  // ---- idle
  std::cerr << "idle: " << idle_s << " s with no job\n";
  std::vector<ProcSample> first;
  for (int h = 0; h < kHosts; ++h) first.push_back(sample(daemons.daemon(h).pid()));
  const auto idle_start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - idle_start < std::chrono::seconds(idle_s) &&
         !g_stop.load()) {
    std::this_thread::sleep_for(200ms);  // a measurement window, not a wait for an outcome
  }
  const double idle_elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - idle_start).count();
  std::vector<ProcSample> idle;
  for (int h = 0; h < kHosts; ++h) idle.push_back(sample(daemons.daemon(h).pid()));

  // ---- the incidents: a fresh job for each, so that one incident's consequences (a restart
  // counted, a node quarantined or kept out of the job for a while) never shape the next one.
  std::vector<Incident> kills, crashes, leader_kills, hangs;
  // A failed incident ends the incidents but not the report: what was measured is printed,
  // with the failure.
  std::string failed;
  int serial = 0;
  // KINDS: which incidents, in order (default "daemon worker"; "leader" kills the Raft
  // leader's host, which also runs a worker of the job).
  std::vector<std::string> kinds;
  {
    const char* env = std::getenv("KINDS");
    std::istringstream words(env != nullptr && *env != '\0' ? env : "daemon worker");
    for (std::string word; words >> word;) {
      if (word != "daemon" && word != "worker" && word != "leader" && word != "hang") {
        fail("KINDS: \"" + word + "\" is not daemon, worker, leader or hang");
      }
      kinds.push_back(word);
    }
  }
  for (const std::string& kind : kinds) {
    for (int i = 0; i < incidents && !g_stop.load() && failed.empty(); ++i) {
      std::cerr << kind << " incident " << i + 1 << "/" << incidents << "\n";
      try {
        std::vector<std::string> submit = {"--name",
                                           "bench" + std::to_string(++serial),
                                           "--nodes",
                                           "2:3",
                                           "--max-restarts",
                                           "1000",
                                           "--"};
        if (kind == "hang") {
          submit.insert(submit.end() - 1, {std::string("--hang-timeout"), std::string(kHangTimeout)});
        }
        for (auto& arg : elastic::netns::small_fmnist_trainer(ELASTIC_TRAINER_PATH, 10, 100000)) {
          submit.push_back(arg);
        }
        // LIVE=0: the restart path (the trainer ignores the worker channel), for comparison.
        if (const char* live = std::getenv("LIVE"); live != nullptr && std::string(live) == "0") {
          submit.push_back("--no-live");
        }
        const auto submitted = daemons.submit_job(leader_host(daemons, all_hosts()), submit);
        if (submitted.exit_code != 0 || submitted.id.empty()) fail("submit: " + submitted.output);
        const std::string id = submitted.id;
        LogTail tail(daemons, id);
        Progress steps;
        Incident incident = measure(daemons, id, kind, tail, steps);
        std::cerr << "  " << incident.victim << ": round " << incident.from_round << " -> "
                  << incident.to_round << ", first step after " << format(incident.step / 1000, 2)
                  << " s\n";
        (kind == "daemon"   ? kills
         : kind == "leader" ? leader_kills
         : kind == "hang"   ? hangs
                            : crashes)
            .push_back(incident);
        // Cancel it and let the cluster settle: no worker left, every daemon alive again.
        (void)daemons.ctl(leader_host(daemons, all_hosts()), {"cancel", id});
        if (!elastic::testing::wait_until([&] { return elastic::netns::find_workers(id).empty(); },
                                          60s)) {
          fail("job " + id + " still has workers 60 s after its cancel");
        }
        if (!daemons.wait_all_see(all_hosts(), all_hosts(), "alive", 120s)) {
          fail("the daemons did not converge again:\n" + daemons.describe(all_hosts()));
        }
      } catch (const Failure& failure) {
        failed = failure.what();
        std::cerr << "recovery_netns_bench: " << failed << "\n";
      }
    }
  }
  std::vector<ProcSample> end;
  for (int h = 0; h < kHosts; ++h) end.push_back(sample(daemons.daemon(h).pid()));

  // ---- tables
  std::cout << "### Daemon idle CPU and memory (3 daemons, no job, " << format(idle_elapsed, 0)
            << " s)\n\n| daemon | CPU (% of a core) | RSS idle (MB) | peak RSS after the "
               "incidents (MB) |\n|---|---|---|---|\n";
  for (int h = 0; h < kHosts; ++h) {
    std::cout << "| " << DaemonCluster::name(h) << " | "
              << format((idle[h].cpu_s - first[h].cpu_s) / idle_elapsed * 100, 2) << " | "
              << format(idle[h].rss_mb, 1) << " | " << format(end[h].hwm_mb, 1) << " |\n";
  }
  std::cout << "\n(The peak of a restarted daemon covers only its own lifetime.)\n";
  if (!kills.empty()) report("### kill -9 of a daemon (not the leader) and its worker", kills);
  if (!crashes.empty()) report("### kill -9 of one worker", crashes);
  if (!hangs.empty()) {
    report(std::string("### SIGSTOP of one worker (hang_timeout ") + kHangTimeout + ")", hangs);
  }
  if (!leader_kills.empty()) {
    report("### kill -9 of the Raft leader's daemon and its worker", leader_kills);
  }
  if (!failed.empty()) {
    std::cout << "\nINCOMPLETE: " << kills.size() << " daemon kills and " << crashes.size()
              << " worker crashes measured, then: " << failed << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int incidents = 10, idle_s = 60;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--incidents" && i + 1 < argc) {
      incidents = std::atoi(argv[++i]);
    } else if (arg == "--idle" && i + 1 < argc) {
      idle_s = std::atoi(argv[++i]);
    } else {
      std::cerr << "usage: recovery_netns_bench [--incidents N] [--idle SECONDS]\n";
      return 64;
    }
  }
  ::signal(SIGINT, on_signal);
  ::signal(SIGTERM, on_signal);
  try {
    return run(incidents, idle_s);
  } catch (const Failure& failure) {
    std::cerr << "recovery_netns_bench: " << failure.what() << "\n";
    return 1;
  }
}
