// membership_netns_bench: real elasticd daemons, one per network namespace (tests/netns), and
// the numbers the membership issue asks for:
//  - detection: time from kill -9 of one daemon until every other daemon reports it dead
//    (`elasticctl nodes --json`, polled; resolution is one polling round over the observers,
//    printed with the result), REPEATS times per timer set, the victim restarted in between;
//  - idle cost: CPU (% of one core, utime+stime from /proc/<pid>/stat over IDLE_SECONDS) and
//    VmRSS per daemon with the cluster converged and idle.
// Both for elasticd's default timers and the short timers of the namespace tests.
//
//   membership_netns_bench [--hosts N] [--repeats R] [--idle-seconds S] [--timers
//   default|short|both]
//
// Prints Markdown tables on stdout, progress on stderr. Needs root.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/stats.h"
#include "tests/netns/daemon_cluster.h"
#include "tests/netns/netns_cluster.h"
#include "tests/support/temp_dir.h"

namespace {

using elastic::bench::format;

using namespace std::chrono_literals;
using elastic::netns::DaemonCluster;
using elastic::netns::NetnsCluster;
using elastic::netns::Timers;
using Clock = std::chrono::steady_clock;

struct Options {
  int hosts = 5;
  int repeats = 5;
  int idle_seconds = 60;
  std::string timers = "both";
};

[[noreturn]] void die(const std::string& message) {
  std::cerr << "membership_netns_bench: " << message << "\n";
  std::exit(1);
}

std::vector<int> hosts_except(int count, int excluded) {
  std::vector<int> hosts;
  for (int host = 0; host < count; ++host) {
    if (host != excluded) hosts.push_back(host);
  }
  return hosts;
}

// utime + stime in clock ticks (fields 14 and 15 of /proc/<pid>/stat).
long cpu_ticks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');  // the command name may contain spaces
  if (close == std::string::npos) return -1;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  long utime = 0, stime = 0;
  for (int index = 3; fields >> field; ++index) {
    if (index == 14) utime = std::stol(field);
    if (index == 15) {
      stime = std::stol(field);
      break;
    }
  }
  return utime + stime;
}

double rss_mib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return -1;
}

struct SetResult {
  std::string label;
  double median_s = 0, min_s = 0, max_s = 0, resolution_ms = 0;
  std::string each;  // every repetition, in seconds
  std::vector<double> cpu_percent, rss_mib;
};

struct Detection {
  double ms = 0;
  double resolution_ms = 0;  // duration of the last polling round
};

// kill -9 `victim`, then poll the others until all report it dead.
Detection measure_kill(DaemonCluster& daemons, int hosts, int victim, std::chrono::seconds limit) {
  const auto observers = hosts_except(hosts, victim);
  std::vector<bool> saw(hosts, false);
  const auto start = Clock::now();
  daemons.daemon(victim).signal(SIGKILL);
  Detection result;
  while (Clock::now() - start < limit) {
    const auto round = Clock::now();
    bool all = true;
    for (const int observer : observers) {
      if (saw[observer]) continue;
      const auto view = daemons.view(observer);
      if (view.ok() && elastic::netns::state_of(*view, DaemonCluster::name(victim)) == "dead") {
        saw[observer] = true;
      } else {
        all = false;
      }
    }
    result.resolution_ms = std::chrono::duration<double, std::milli>(Clock::now() - round).count();
    if (all) {
      result.ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
      daemons.daemon(victim).wait(10s);
      return result;
    }
  }
  die("daemon " + DaemonCluster::name(victim) + " was not reported dead within the limit:\n" +
      daemons.describe(observers));
}

SetResult run_timer_set(const std::string& label, const Timers& timers, const Options& options) {
  auto hosts = NetnsCluster::create(options.hosts);
  if (!hosts.ok()) die(hosts.error().message);
  elastic::testing::TempDir work;
  DaemonCluster daemons(**hosts, ELASTICD_PATH, ELASTICCTL_PATH, work.path(), timers);
  const auto everyone = hosts_except(options.hosts, -1);
  if (auto started = daemons.start_all(); !started.ok()) die(started.error().message);
  if (!daemons.wait_all_see(everyone, everyone, "alive", 60s)) {
    die("the daemons did not converge:\n" + daemons.describe(everyone));
  }
  std::cerr << label << ": " << options.hosts << " daemons converged\n";

  // Idle first, on a cluster that has not seen a failure yet.
  std::this_thread::sleep_for(5s);  // let the join traffic settle before measuring idle
  std::vector<long> ticks_before;
  for (int host = 0; host < options.hosts; ++host) {
    ticks_before.push_back(cpu_ticks(daemons.daemon(host).pid()));
  }
  const auto idle_start = Clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(options.idle_seconds));
  const double idle_s = std::chrono::duration<double>(Clock::now() - idle_start).count();
  const double ticks_per_s = static_cast<double>(::sysconf(_SC_CLK_TCK));
  std::vector<double> cpu_percent, rss;
  for (int host = 0; host < options.hosts; ++host) {
    const pid_t pid = daemons.daemon(host).pid();
    cpu_percent.push_back(100.0 * static_cast<double>(cpu_ticks(pid) - ticks_before[host]) /
                          ticks_per_s / idle_s);
    rss.push_back(rss_mib(pid));
  }

  std::vector<Detection> detections;
  for (int repeat = 0; repeat < options.repeats; ++repeat) {
    const int victim = 1 + repeat % (options.hosts - 1);
    const auto limit = std::chrono::duration_cast<std::chrono::seconds>(
        timers.probe_interval * options.hosts + timers.max_suspicion(options.hosts) + 60s);
    detections.push_back(measure_kill(daemons, options.hosts, victim, limit));
    std::cerr << label << ": kill -9 " << DaemonCluster::name(victim) << " -> dead everywhere in "
              << format(detections.back().ms, 0) << " ms\n";
    // Restart it (a new generation) and wait for one view again before the next repetition.
    if (auto restarted = daemons.start(victim); !restarted.ok()) die(restarted.error().message);
    if (!daemons.wait_all_see(everyone, everyone, "alive", 120s)) {
      die("the restarted daemon did not rejoin:\n" + daemons.describe(everyone));
    }
  }

  SetResult result;
  result.label = label;
  std::vector<double> ms;
  for (const auto& d : detections) {
    ms.push_back(d.ms);
    result.resolution_ms = std::max(result.resolution_ms, d.resolution_ms);
    result.each += (result.each.empty() ? "" : ", ") + format(d.ms / 1000.0, 1);
  }
  std::sort(ms.begin(), ms.end());
  result.median_s = ms[ms.size() / 2] / 1000.0;
  result.min_s = ms.front() / 1000.0;
  result.max_s = ms.back() / 1000.0;
  result.cpu_percent = cpu_percent;
  result.rss_mib = rss;
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--hosts")
      options.hosts = std::atoi(value.c_str());
    else if (flag == "--repeats")
      options.repeats = std::atoi(value.c_str());
    else if (flag == "--idle-seconds")
      options.idle_seconds = std::atoi(value.c_str());
    else if (flag == "--timers")
      options.timers = value;
    else
      die("unknown flag " + flag);
  }
  if (options.hosts < 2 || options.repeats < 1 || options.idle_seconds < 1) die("bad arguments");
  if (auto environment = NetnsCluster::check_environment(); !environment.ok()) {
    die(environment.error().message);
  }
  std::vector<SetResult> results;
  if (options.timers == "default" || options.timers == "both") {
    results.push_back(run_timer_set("default (probe_interval 1 s, probe_timeout 300 ms)",
                                    elastic::netns::default_timers(), options));
  }
  if (options.timers == "short" || options.timers == "both") {
    results.push_back(
        run_timer_set("short test timers (probe_interval 500 ms, probe_timeout 150 ms)",
                      elastic::netns::short_timers(), options));
  }
  std::cout << "| timers | kill -9 until every other daemon marks it dead: median | min .. max | "
               "each repetition (s) | polling round |\n|---|---|---|---|---|\n";
  for (const auto& r : results) {
    std::cout << "| " << r.label << " | " << format(r.median_s, 1) << " s | " << format(r.min_s, 1)
              << " .. " << format(r.max_s, 1) << " s | " << r.each << " | "
              << format(r.resolution_ms, 0) << " ms |\n";
  }
  std::cout << "\n| timers | idle CPU per daemon, % of one core (" << options.idle_seconds
            << " s) | max | VmRSS per daemon (MiB) | max |\n|---|---|---|---|---|\n";
  for (const auto& r : results) {
    std::string cpu, rss;
    for (size_t i = 0; i < r.cpu_percent.size(); ++i) {
      cpu += (i ? ", " : "") + format(r.cpu_percent[i], 2);
      rss += (i ? ", " : "") + format(r.rss_mib[i], 1);
    }
    std::cout << "| " << r.label << " | " << cpu << " | "
              << format(*std::max_element(r.cpu_percent.begin(), r.cpu_percent.end()), 2) << " | "
              << rss << " | " << format(*std::max_element(r.rss_mib.begin(), r.rss_mib.end()), 1)
              << " |\n";
  }
  return 0;
}
