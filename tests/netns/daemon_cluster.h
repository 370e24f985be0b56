// DaemonCluster: one real elasticd per host of a NetnsCluster, and what each one sees.
//
// Host i runs `elasticd --config <file> --set node.name=h<i> --set node.state_dir=<dir>/h<i>/state
// --set transport.bind=tcp://<ip>:7946 --set membership.seeds=[every other host as h<j>@<ip>:7946]
// --set control.socket=<dir>/h<i>/ctl.sock --set consensus.voters=[...]` with CURVE as in
// production (every host's key pair made by `elasticctl keygen` at the first start:
// <dir>/keys/h<i>.key, the .pub files in the shared allow-list <dir>/public_keys/) plus the
// timer overrides
// given (short_timers() and short_raft_timers() for tests) and set_overrides()'s. The file is
// /dev/null (the built-in defaults) unless set_config_file() names one. Every daemon lists the
// same Raft voters (a config rule once seeds are set): by default the first min(3, N) hosts,
// h0 h1 h2; set_voters() changes them before the first start(). A restarted daemon keeps its
// state dir, so it keeps its Raft log. Views are read with `elasticctl --set control.socket=...
// nodes --json` run inside the host's namespace, so the tests see exactly what an operator would.
// The Raft and job verbs (raft(), submit(), job_ids(), ctl()) run elasticctl without entering the
// namespace: the control socket is a filesystem path, reachable from any namespace, and skipping
// `ip netns exec` keeps the benchmark's per-call overhead to elasticctl's own.
//
// Jobs: submit_job() runs `elasticctl submit <args>`, job() reads one job through
// `elasticctl status JOB --json` (state, round, restarts, rank map and the event log), and the
// workers are observed without trusting the daemon: find_workers() scans /proc for processes
// whose environment (as exec'd by the spawner) carries ELASTIC_JOB_ID, and trainer_lines()
// parses the JSON lines elastic-trainer wrote into every host's worker logs
// (<state_dir>/logs/<job>/round-<R>/rank-<N>.log, the default log_dir). Every host's files are
// on this one machine, so the logs of a killed host stay readable.
//
// Ownership: borrows the NetnsCluster (which must outlive it) and owns the daemon Processes;
// the destructor SIGKILLs any still running (by pid) after SIGCONT, so none is left stopped.
// Errors: start()/view()/raft() return Result with a sentence including the daemon's stderr.
// Thread safety: one test thread; ctl(), submit(), raft() and job_ids() only run elasticctl and
// read immutable members, so a benchmark may call them from several threads at once.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
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

// One node of a job's current round (a "ranks" row of the job JSON).
struct RankView {
  std::string node;
  std::uint64_t generation = 0;
  std::uint32_t slots = 0;
  std::uint32_t first_rank = 0;
};

// One entry of a job's event log.
struct JobEventView {
  std::int64_t at_ms = 0;  // wall clock of the leader that decided it (this machine's clock)
  std::uint64_t round = 0;
  std::string from, to, reason;
};

// A job as `elasticctl status JOB --json` shows it.
struct JobView {
  std::string id, state, reason;
  std::uint64_t round = 0;
  std::uint64_t restarts = 0;
  std::uint64_t world_size = 0;
  std::vector<RankView> ranks;
  std::vector<JobEventView> events;  // oldest first
  std::string json;                  // the whole reply, for failure messages

  // succeeded, failed or cancelled.
  bool terminal() const;
  // Whether `node` holds ranks in the current round.
  bool has_node(const std::string& node) const;
  // The nodes of the current round, in rank order.
  std::vector<std::string> nodes() const;
  // One line: "fmnist-1 running round 3 (h0,h1) restarts 1: <reason>".
  std::string summary() const;
};

// A worker process found in /proc (its environment is the one the spawner exec'd it with).
struct WorkerProc {
  pid_t pid = -1;
  std::string job, node;     // ELASTIC_JOB_ID, ELASTIC_NODE
  int rank = -1;             // RANK
  std::uint64_t round = 0;   // ELASTIC_ROUND
  std::string slot;          // ELASTIC_SLOT ("" if unset)
  std::string cuda_devices;  // CUDA_VISIBLE_DEVICES ("" if unset)
  std::string omp_threads;   // OMP_NUM_THREADS
  uid_t uid = 0;             // real uid (/proc/<pid>/status Uid)
  gid_t gid = 0;
  std::string cpus;  // Cpus_allowed_list, e.g. "0-1"
};

// Every live (not zombie) process on this machine whose environment has ELASTIC_JOB_ID=job_id,
// by pid. Reads /proc/<pid>/environ, so it needs root for other users' processes.
std::vector<WorkerProc> find_workers(const std::string& job_id);
// True when `pid` no longer exists or is a zombie (dead, only not reaped yet).
bool process_gone(pid_t pid);
// "1,4-6" of a Cpus_allowed_list as a set of cpu numbers (empty on a parse error).
std::set<int> parse_cpu_list(const std::string& list);

// One JSON line elastic-trainer printed (in a worker log).
struct TrainerLine {
  int host = -1;      // whose log dir it is in
  int rank = -1;      // from the file name rank-<N>.log
  std::string event;  // start, resume, step, checkpoint, epoch, summary
  std::int64_t step = -1;
  std::int64_t round = -1;  // -1 on lines without one (checkpoint)
  std::int64_t world_size = 0;
  std::optional<double> test_accuracy;
  std::string text;  // the line itself
};

// argv of elastic-trainer (`trainer`, its path) on a small Fashion-MNIST subset, quick to load on
// a CPU: one thread, batches of 32, 8192 training images, no evaluation, a JSON line per step
// (for trainer_lines()) and a checkpoint every `checkpoint_interval` steps, for `epochs` epochs.
// The namespace job tests and the recovery bench run it.
std::vector<std::string> small_fmnist_trainer(const std::string& trainer, int checkpoint_interval,
                                              int epochs);

// A worker log line without the time stamp the spawner starts it with
// ("2026-11-26T21:47:31.123Z ", spawner.log_timestamps, on by default); other lines as they are.
std::string_view without_log_stamp(std::string_view line);

class DaemonCluster {
 public:
  DaemonCluster(NetnsCluster& hosts, std::string elasticd, std::string elasticctl,
                std::string work_dir, Timers timers, RaftTimers raft = default_raft_timers());
  ~DaemonCluster();
  DaemonCluster(const DaemonCluster&) = delete;
  DaemonCluster& operator=(const DaemonCluster&) = delete;

  // The config file every daemon reads (default "/dev/null": the built-in defaults, which
  // conf/elasticd.toml repeats). Call before start().
  void set_config_file(std::string path) { config_file_ = std::move(path); }
  // Extra --set overrides ("section.key=value") for every daemon, after the harness's own (so
  // they win), e.g. "node.cpu_slots=2" or "rendezvous.lease_duration=2s". Before start().
  void set_overrides(std::vector<std::string> sets) { overrides_ = std::move(sets); }
  // Extra overrides for one host only, after set_overrides()'s.
  void set_host_overrides(int host, std::vector<std::string> sets) {
    host_overrides_[host] = std::move(sets);
  }

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

  // ---- jobs
  // <work_dir>/h<i>: the host's state dir ("state"), control socket ("ctl.sock") and the
  // daemon's stdout/stderr ("elasticd.out", "elasticd.err").
  std::string dir(int host) const { return work_dir_ + "/" + name(host); }
  // `host`'s CURVE secret key, and the allow-list every daemon reads (see the top).
  std::string secret_key_file(int host) const { return work_dir_ + "/keys/" + name(host) + ".key"; }
  std::string public_keys_dir() const { return work_dir_ + "/public_keys"; }
  std::string socket(int host) const { return dir(host) + "/ctl.sock"; }
  // Where the spawner of `host` writes worker logs (spawner.log_dir's default).
  std::string worker_log_dir(int host) const { return dir(host) + "/state/logs"; }
  // Every round's log file of `job` rank `rank` on `host`, in round order ("" if none).
  std::string worker_log(int host, const std::string& job, int rank) const;
  // Every trainer JSON line of `job` in every host's rank logs (per file in file order; files by
  // host, round, then rank), read past the spawner's time stamps (without_log_stamp).
  std::vector<TrainerLine> trainer_lines(const std::string& job) const;
  // Every daemon line ("[elasticd ...") of `job`'s worker logs on `host`, "round-R/rank-N.log: "
  // first.
  std::string daemon_log_lines(int host, const std::string& job) const;

  // elasticctl <args> against `host`'s socket as uid/gid (setpriv; the socket is 0666).
  testing::RunResult ctl_as(uid_t uid, gid_t gid, int host, const std::vector<std::string>& args,
                            std::chrono::milliseconds timeout = std::chrono::seconds(30)) const;
  // `elasticctl submit <args>` through `host` (args: flags, "--", the command), as root or,
  // with `as_uid`, as that user (its gid = the uid). The id is parsed from the reply.
  Submitted submit_job(int host, const std::vector<std::string>& args,
                       std::optional<uid_t> as_uid = std::nullopt) const;
  // The job as `host` sees it (the verb is answered by the leader).
  Result<JobView> job(int host, const std::string& id) const;
  // Polls job() until `condition` holds; false after `timeout`. `last` gets the last view read.
  bool wait_job(int host, const std::string& id,
                const std::function<bool(const JobView&)>& condition,
                std::chrono::milliseconds timeout, JobView* last = nullptr) const;

 private:
  // Makes `host`'s key pair and publishes its .pub, unless it exists (a restart keeps its key).
  Status ensure_keys(int host) const;

  NetnsCluster& hosts_;
  std::string elasticd_, elasticctl_, work_dir_;
  Timers timers_;
  RaftTimers raft_timers_;
  std::vector<int> voters_;
  std::string config_file_ = "/dev/null";
  std::vector<std::string> overrides_;
  std::map<int, std::vector<std::string>> host_overrides_;
  std::vector<std::unique_ptr<testing::Process>> daemons_;
};

// "state" of `name` in `view`, or "" if unknown.
std::string state_of(const View& view, const std::string& name);

}  // namespace elastic::netns
