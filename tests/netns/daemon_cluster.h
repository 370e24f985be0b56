// DaemonCluster: one real elasticd per host of a NetnsCluster, and what each one sees.
//
// Host i runs `elasticd --set node.name=h<i> --set transport.bind=tcp://<ip>:7946
// --set membership.seeds=[every other host] --set node.state_dir=<dir>/h<i>/state
// --set control.socket=<dir>/h<i>/ctl.sock --set consensus.voters=[...]` plus the timer overrides
// given (short_timers() and short_raft_timers() for tests). Every daemon lists the same Raft
// voters (a config rule once seeds are set): by default the first min(3, N) hosts, h0 h1 h2;
// set_voters() changes them before the first start(). A restarted daemon keeps its state dir, so
// it keeps its Raft log. Views are read with `elasticctl --set control.socket=... nodes --json`
// run inside the host's namespace, so the tests see exactly what an operator would. The Raft and
// job verbs (raft(), submit(), job_ids(), ctl()) run elasticctl without entering the namespace:
// the control socket is a filesystem path, reachable from any namespace, and skipping
// `ip netns exec` keeps the benchmark's per-call overhead to elasticctl's own.
//
// Ownership: borrows the NetnsCluster (which must outlive it) and owns the daemon Processes;
// the destructor SIGKILLs any still running (by pid) after SIGCONT, so none is left stopped.
// Errors: start()/view()/raft() return Result with a sentence including the daemon's stderr.
// Thread safety: one test thread; ctl(), submit(), raft() and job_ids() only run elasticctl and
// read immutable members, so a benchmark may call them from several threads at once.
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

// Raft timers as --set overrides.
struct RaftTimers {
  std::chrono::milliseconds election_timeout{1000};  // randomised in [t, 2t) by the daemon
  std::chrono::milliseconds heartbeat_interval{100};
  bool defaults = true;  // true: pass no consensus timer overrides at all
  std::vector<std::string> overrides() const;
};

RaftTimers default_raft_timers();  // elasticd's built-in values: 1 s election, 100 ms heartbeat
RaftTimers short_raft_timers();    // the tests' timers: 300 ms election, 50 ms heartbeat

// One daemon's Raft state (the "consensus" object of `elasticctl status --json`).
struct RaftView {
  bool voter = false;
  std::string role;    // leader, candidate, follower ("" on a non-voter)
  std::string leader;  // "" when it knows none
  std::uint64_t term = 0;
  std::uint64_t commit_index = 0;
  std::uint64_t last_index = 0;
  std::uint64_t jobs = 0;  // jobs in this daemon's own applied table (0 on a non-voter)
};

// What one `elasticctl submit` did.
struct Submitted {
  int exit_code = -1;  // 0 accepted, 1 refused, -1 killed by a signal or timed out
  std::string id;      // the job id on exit 0
  std::string output;  // stdout + stderr, for failure messages
};

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
                std::string work_dir, Timers timers, RaftTimers raft = default_raft_timers());
  ~DaemonCluster();
  DaemonCluster(const DaemonCluster&) = delete;
  DaemonCluster& operator=(const DaemonCluster&) = delete;

  // Starts the daemon on `host` and waits for its "elasticd ready" line.
  Status start(int host, std::chrono::milliseconds timeout = std::chrono::seconds(30));
  Status start_all(std::chrono::milliseconds timeout = std::chrono::seconds(30));

  static std::string name(int host) { return "h" + std::to_string(host); }
  // The host index of daemon `name` ("h3" -> 3), or -1.
  int host_of(const std::string& name) const;
  // The Raft voters (host indices); call before the first start(). Default: 0 .. min(3, N)-1.
  void set_voters(std::vector<int> voters) { voters_ = std::move(voters); }
  const std::vector<int>& voters() const { return voters_; }
  bool is_voter(int host) const;
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

  // elasticctl <args> against `host`'s control socket (outside the namespace, see above).
  testing::RunResult ctl(int host, const std::vector<std::string>& args,
                         std::chrono::milliseconds timeout = std::chrono::seconds(30)) const;
  // `host`'s Raft state now.
  Result<RaftView> raft(int host) const;
  // `elasticctl submit --name <job_name> --nodes 1 -- /bin/true` through `host`.
  Submitted submit(int host, const std::string& job_name) const;
  // The ids of `elasticctl jobs --json` through `host` (the leader's table).
  Result<std::vector<std::string>> job_ids(int host) const;
  // The leader that every voter among `hosts` that answers names, if that leader is among
  // `hosts` and itself answers in role leader; otherwise "". (A killed voter does not answer,
  // so the survivors decide.)
  std::string agreed_leader(const std::vector<int>& hosts) const;
  // Polls agreed_leader(hosts) until it is not ""; "" after `timeout`.
  std::string wait_leader(const std::vector<int>& hosts, std::chrono::milliseconds timeout) const;
  // One line of Raft state per daemon of `hosts`, for failure messages.
  std::string describe_raft(const std::vector<int>& hosts) const;

 private:
  NetnsCluster& hosts_;
  std::string elasticd_, elasticctl_, work_dir_;
  Timers timers_;
  RaftTimers raft_timers_;
  std::vector<int> voters_;
  std::vector<std::unique_ptr<testing::Process>> daemons_;
};

// "state" of `name` in `view`, or "" if unknown.
std::string state_of(const View& view, const std::string& name);

}  // namespace elastic::netns
