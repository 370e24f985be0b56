// DaemonCluster: one real elasticd per host of a NetnsCluster, and what each one sees.
//
// Host i runs `elasticd --set node.name=h<i> --set transport.bind=tcp://<ip>:7946
// --set membership.seeds=[every other host] --set node.state_dir=<dir>/h<i>/state
// --set control.socket=<dir>/h<i>/ctl.sock` plus the timer overrides given (short_timers() for
// tests). Views are read with `elasticctl --set control.socket=... nodes --json` run inside the
// host's namespace, so the tests see exactly what an operator would.
//
// Ownership: borrows the NetnsCluster (which must outlive it) and owns the daemon Processes;
// the destructor SIGKILLs any still running (by pid) after SIGCONT, so none is left stopped.
// Errors: start()/view() return Result with a sentence including the daemon's stderr.
// Thread safety: one test thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/core/result.h"
#include "tests/netns/netns_cluster.h"
#include "tests/support/process.h"

namespace elastic::netns {

inline constexpr int kDaemonPort = 7946;

// Membership timers as --set overrides.
struct Timers {
  std::chrono::milliseconds probe_interval{1000};
  std::chrono::milliseconds probe_timeout{300};
  std::chrono::milliseconds gossip_interval{200};
  std::chrono::milliseconds push_pull_interval{30000};
  std::chrono::milliseconds reconnect_interval{30000};
  std::chrono::milliseconds rejoin_interval{60000};
  int suspicion_multiplier = 4;
  int suspicion_max_multiplier = 6;
  bool defaults = true;  // true: pass no membership timer overrides at all

  // The shortest and longest suspicion timeout for `members` nodes (membership.h's formula:
  // suspicion_multiplier * log10(max(N, 1)) * probe_interval, times up to max_multiplier).
  std::chrono::milliseconds min_suspicion(int members) const;
  std::chrono::milliseconds max_suspicion(int members) const;
  std::vector<std::string> overrides() const;
};

Timers default_timers();  // elasticd's built-in values (config.h), no overrides
Timers short_timers();    // the tests' timers: 500 ms probes, 1-2 s reconnects

// One member as a node sees it (a row of `elasticctl nodes --json`).
struct MemberSeen {
  std::string state;  // alive, suspect, dead, left
  std::uint32_t incarnation = 0;
  std::uint64_t generation = 0;
};

struct View {
  std::string self;
  std::map<std::string, MemberSeen> members;  // by name, self included
  std::uint64_t deaths = 0;                   // members this node declared dead
  std::uint64_t suspicions = 0;
  std::uint64_t refutations = 0;
  std::uint64_t probe_timeouts = 0;  // direct probes unanswered in time
};

class DaemonCluster {
 public:
  DaemonCluster(NetnsCluster& hosts, std::string elasticd, std::string elasticctl,
                std::string work_dir, Timers timers);
  ~DaemonCluster();
  DaemonCluster(const DaemonCluster&) = delete;
  DaemonCluster& operator=(const DaemonCluster&) = delete;

  // Starts the daemon on `host` and waits for its "elasticd ready" line.
  Status start(int host, std::chrono::milliseconds timeout = std::chrono::seconds(30));
  Status start_all(std::chrono::milliseconds timeout = std::chrono::seconds(30));

  static std::string name(int host) { return "h" + std::to_string(host); }
  testing::Process& daemon(int host) { return *daemons_.at(host); }
  bool running(int host) { return daemons_.at(host) && daemons_.at(host)->running(); }
  std::string log(int host) const;  // the daemon's stderr so far

  // What `host`'s daemon sees now.
  Result<View> view(int host);
  // Polls `host`'s view until `condition` holds; false after `timeout`.
  bool wait_view(int host, const std::function<bool(const View&)>& condition,
                 std::chrono::milliseconds timeout);
  // Every host in `observers` sees every host in `targets` in `state`.
  bool wait_all_see(const std::vector<int>& observers, const std::vector<int>& targets,
                    const std::string& state, std::chrono::milliseconds timeout);
  // A one-line summary of every running daemon's view, for failure messages.
  std::string describe(const std::vector<int>& hosts);

 private:
  NetnsCluster& hosts_;
  std::string elasticd_, elasticctl_, work_dir_;
  Timers timers_;
  std::vector<std::unique_ptr<testing::Process>> daemons_;
};

// "state" of `name` in `view`, or "" if unknown.
std::string state_of(const View& view, const std::string& name);

}  // namespace elastic::netns
