// DaemonConfig: every setting of elasticd and elasticctl, one struct per subsystem, and the
// loader that builds it from built-in defaults < a TOML file < `--set key=value` overrides.
//
// The defaults live next to each field below, and conf/elasticd.toml repeats every key with the
// same default and a one-line reason (a unit test keeps the two identical). Durations are
// std::chrono values here and strings such as "500ms" or "1m30s" in TOML (daemon/core/duration.h).
//
// Errors: load_config() never throws. It reports every problem it finds, not just the first:
// unknown sections and keys (with a did-you-mean), wrong TOML types (expected and actual),
// bad durations, TOML syntax errors, out-of-range values and cross-field violations. The
// Error's message has one line per problem, joined by '\n', each line
//     <source>: <section.key>: <reason>
// where <source> is `<file>:<line>` (or just `<file>` when the line is unknown), or
// `--set <key>=<value>` for an override. A cross-field violation names the source of the
// highest-precedence key involved, which is where the user has to look. Problems with the file
// as a whole have no key: `<file>: cannot read the config file: ...`,
// `<file>:<line>: TOML nested too deeply: ...` (toml_text.h: kMaxTomlNesting, checked before
// toml11 parses) and `<file>:<line>: TOML syntax error: ...` (toml11 stops at the first); a
// --set value nested too deeply is `--set <key>=...: <key>: TOML nested too deeply: ...`.
// Callers print the message to stderr and exit with kExitConfig (78, EX_CONFIG; systemd is told
// not to restart).
//
// Values documented as "" = derived (node.name, consensus.data_dir, spawner.log_dir, ...) stay
// "" here: the runtime that owns each resource derives it, so printing the effective config
// shows what the operator actually wrote.
//
// Ownership: plain values. Thread safety: load_config, validate, to_toml and to_json are pure
// apart from reading the one file; call them from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "daemon/core/result.h"

namespace elastic::config {

using std::chrono_literals::operator""ms;
using std::chrono_literals::operator""s;
using std::chrono_literals::operator""min;
using std::chrono_literals::operator""h;

// sysexits.h codes shared by elasticd and elasticctl.
inline constexpr int kExitUsage = 64;        // EX_USAGE: bad command line
inline constexpr int kExitUnavailable = 69;  // EX_UNAVAILABLE: cannot do the job (yet)
inline constexpr int kExitConfig = 78;       // EX_CONFIG: bad configuration

inline constexpr const char* kDefaultConfigPath = "/etc/elastic/elasticd.toml";

using Duration = std::chrono::nanoseconds;

// Which GPUs this node offers to jobs. TOML: "auto" or an array of CUDA device indices
// (e.g. [0, 1, 2, 3]); [] offers none, which makes the node CPU-only.
struct GpuSelection {
  bool detect = true;        // "auto": every GPU the driver reports
  std::vector<int> indices;  // used only when detect is false
  bool operator==(const GpuSelection&) const = default;
};

enum class LogLevel { kTrace, kDebug, kInfo, kWarn, kError };
enum class LogFormat { kText, kJson };

struct NodeConfig {
  // Identity in membership and Raft; "" = the hostname, already unique in an HPC cluster.
  std::string name = "";
  // Messages carrying another cluster id are dropped, so two clusters can share a network.
  std::string cluster_id = "elastic";
  // Node generation, Raft log and worker logs live here; must survive reboots.
  std::string state_dir = "/var/lib/elastic";
  GpuSelection gpus = {};
  // Worker slots on a host without GPUs (Gloo jobs); 0 = one per NUMA node.
  int cpu_slots = 0;
  bool operator==(const NodeConfig&) const = default;
};

struct TransportConfig {
  // The one ROUTER socket every peer and the rendezvous talk to (ZeroMQ endpoint).
  std::string bind = "tcp://0.0.0.0:7946";
  // Endpoint peers should dial; "" = derived from bind and the host's management address.
  std::string advertise = "";
  // Per-peer queue bound (ZMQ_SNDHWM); a full queue fails a send instead of blocking the node.
  int send_hwm = 1000;
  // The largest envelope: a full-state push-pull of thousands of members fits; garbage does not.
  // With CURVE it travels as frames of transport::kMaxFrameBytes (ZMQ_MAXMSGSIZE).
  std::int64_t max_message_bytes = 64 * 1024 * 1024;
  // ZMQ_TCP_MAXRT: a powered-off peer fails in seconds instead of the kernel's ~15 minutes.
  Duration tcp_max_retransmit_timeout = 15s;
  // ZMTP heartbeats find dead connections on idle links.
  Duration heartbeat_interval = 1s;
  Duration heartbeat_timeout = 3s;
  // Close an outbound connection unused this long: fd count follows active peers, not N.
  Duration idle_peer_close = 60s;
  // Inbound connections one address may hold (127.0.0.0/8 and ::1 count as one address, an IPv6
  // /64 as one): each peer dials us once, so more is a flood that would use up the fds.
  int max_connections_per_address = 64;
  // CURVE: daemons authenticate each other by key before any message is acted on (a node key
  // may speak for every user, so without it anyone reaching the port is root). false is
  // allowed only with a loopback bind: a single-user test box.
  bool curve = true;
  // This node's secret key (mode 0600, owned by the daemon's user); make install creates it.
  std::string secret_key_file = "/etc/elastic/node.key";
  // The allow-list: <node name>.pub for every node of the cluster (re-read when it changes).
  std::string public_keys_dir = "/etc/elastic/nodes";
  bool operator==(const TransportConfig&) const = default;
};

// SWIM + Lifeguard (research/membership-anchors.md §4.5; memberlist's LAN values unless noted).
struct MembershipConfig {
  // "[name@]host:port" of daemons to join through (the name is required with transport.curve);
  // [] = start a new cluster.
  std::vector<std::string> seeds = {};
  // One probe per interval: constant load per node, detection time scales with it.
  Duration probe_interval = 1s;
  // p99.9 RTT under NCCL load; SWIM needs probe_interval >= 3 x probe_timeout.
  Duration probe_timeout = 300ms;
  // Peers asked to probe on our behalf, so one bad link cannot kill a node.
  int indirect_probes = 3;
  // Suspicion timeout = multiplier * log10(N) * probe_interval (16 s at 10k nodes).
  int suspicion_multiplier = 4;
  // Without confirmations the timeout starts this many times higher (Lifeguard).
  int suspicion_max_multiplier = 6;
  // Lifeguard local health: an overloaded node probes up to this many times slower.
  int awareness_max_multiplier = 8;
  // Each update is piggybacked multiplier * log10(N+1) times.
  int retransmit_multiplier = 4;
  Duration gossip_interval = 200ms;
  int gossip_fanout = 3;
  // Keep gossiping to a dead node this long so a false death can be refuted.
  Duration gossip_to_dead = 30s;
  // Anti-entropy full-state exchange, scaled with log2(N) above 32 nodes.
  Duration push_pull_interval = 30s;
  // Try a failed member again (Serf-style), so healed partitions merge.
  Duration reconnect_interval = 30s;
  // Re-join through a seed this often while the seeds are not members.
  Duration rejoin_interval = 60s;
  // Dead members are remembered per (node, generation) this long.
  Duration tombstone_ttl = 24h;
  bool operator==(const MembershipConfig&) const = default;
};

struct ConsensusConfig {
  // Raft voters by node name: 1, 3 or 5 stable hosts; [] = this node alone (one-host cluster).
  std::vector<std::string> voters = {};
  // etcd's 1 s; randomised in [t, 2t); >= 10 x the RTT between voters.
  Duration election_timeout = 1s;
  // etcd's 100 ms; the leader's heartbeat, at most a third of the election timeout.
  Duration heartbeat_interval = 100ms;
  // Compact the log into a snapshot after this many entries.
  int snapshot_every_entries = 10000;
  // "" = <node.state_dir>/raft.
  std::string data_dir = "";
  bool operator==(const ConsensusConfig&) const = default;
};

struct RendezvousConfig {
  // Once min_nodes have gathered, wait this long for more (first round, growth, recovery
  // below min); a round that only replaces a lost node opens at once.
  Duration last_call = 10s;
  // Give up a round that never reaches min_nodes (torchelastic's join timeout).
  Duration join_timeout = 10min;
  // Daemons sharing a running job send each other a keepalive this often (the fast job tier);
  // 200 ms keeps kill -9 -> every peer knowing under 1 s (bench/consensus/job_watch_bench).
  Duration job_keepalive_interval = 200ms;
  // Silence after which a job peer is suspected and confirmed by indirect probes (3 keepalives:
  // no false declaration in 13 simulated daemon-hours at 5% loss).
  Duration job_peer_timeout = 600ms;
  // Workers run under a leader lease; a daemon that loses it stops them (self-fencing).
  // A lost node's work is re-placed only after its lease (+ one election timeout)
  // has run out, so this bounds recovery from a node loss; renewed every quarter.
  Duration lease_duration = 3s;
  // A worker that speaks the worker channel and can re-form in place (elastic-trainer) is
  // offered the next round instead of being restarted; one that has not joined it within this
  // long (its peers included: the slowest rank starting cold) is restarted after all.
  Duration reform_timeout = 60s;
  // The rank-0 node's c10d store port (MASTER_PORT) is chosen from this range.
  int store_port_min = 29500;
  int store_port_max = 29599;
  bool operator==(const RendezvousConfig&) const = default;
};

struct SpawnerConfig {
  // SIGTERM, then SIGKILL after this; workers stuck in NCCL ignore TERM, so keep it short.
  Duration stop_grace = 10s;
  // Per-worker stdout/stderr files; "" = <node.state_dir>/logs.
  std::string log_dir = "";
  // A directory on storage every daemon mounts (NFS): when set, every daemon writes its
  // workers' logs there instead of log_dir, so any daemon can serve any rank's output of any
  // round, a dead host's included. "" = each daemon keeps its own under log_dir.
  std::string log_root = "";
  // Rounds of worker logs kept per job (<job>/round-<R>/): the oldest round's are removed when a
  // new round starts, so a job that restarts all day cannot fill the disk.
  int log_rounds_kept = 20;
  // Rotate a worker log at this size and keep this many rotated files.
  std::int64_t log_max_bytes = 100 * 1024 * 1024;
  int log_keep = 5;
  // Start each line of worker output with the UTC time the daemon read it, so a log shows when
  // a line was printed; off for scripts whose own logging stamps every line already.
  bool log_timestamps = true;
  // hwloc: pin each worker to disjoint cores near its GPU, and its memory to that NUMA node.
  bool bind_cpus = true;
  bool bind_memory = true;
  // Delegated cgroup v2 subtree for workers, so no orphan outlives a job; "auto" = the
  // daemon's own cgroup (the unit's, with Delegate=yes, on a unified or hybrid host);
  // "" = process groups + PR_SET_PDEATHSIG only.
  std::string cgroup_root = "";
  // Appended to the end of every worker's PYTHONPATH so `import elastic_worker` (the progress
  // module, python/ in the source tree) works with no set-up; the user's own entries come first.
  // "auto" = <elasticd's directory>/../share/elastic/python (where make install puts it), when
  // that holds elastic_worker.py; "" = off.
  std::string python_dir = "auto";
  bool operator==(const SpawnerConfig&) const = default;
};

struct CheckpointConfig {
  // Shared filesystem root for <root>/<job>/step-*; "" = each job must name its own.
  std::string root = "";
  // Complete checkpoints kept per job; older ones are deleted after a new one is published.
  int keep = 3;
  bool operator==(const CheckpointConfig&) const = default;
};

struct ControlConfig {
  // elasticctl talks to the local daemon here (peer credentials checked).
  std::string socket = "/run/elastic/elasticd.sock";
  // Members of this group may run admin verbs; "" = root only.
  std::string admin_group = "";
  // Prometheus text endpoint "host:port"; "" = off.
  std::string metrics_listen = "";
  // Remote control through CURVE for login nodes without a daemon: "tcp://HOST:PORT" (ROUTER,
  // this node's transport keypair); "" = off. Needs transport.curve = true.
  std::string remote_listen = "";
  // Allow-list of remote control clients: one <user>.pub per client key; the file name is the
  // user the key speaks for. Must not be writable by group or others.
  std::string client_keys_dir = "";
  // Per-user submit limits (root is exempt; 0 = no limit; reloadable), so one user cannot fill
  // the cluster's 10,000 active jobs or flood the Raft log. Active (not ended) jobs per user:
  int max_active_jobs_per_user = 1000;
  // Submits per minute per user, sustained (a token bucket on the leader),
  int submits_per_minute_per_user = 600;
  // after a burst of this many at once.
  int submit_burst_per_user = 100;
  bool operator==(const ControlConfig&) const = default;
};

// One user's or group's own caps ([limits.users.NAME], [limits.groups.NAME]); 0 = no limit.
struct LimitEntry {
  int max_nodes = 0;
  int max_running_jobs = 0;
  // Groups only: the gid the name resolved to (getgrnam_r) when the config was loaded; an
  // unknown group is a config error. Not written in TOML.
  std::uint32_t gid = 0;
  bool operator==(const LimitEntry&) const = default;
};
// By user name.
struct UserLimits {
  std::map<std::string, LimitEntry> entries;
  bool operator==(const UserLimits&) const = default;
};
// By group name (each entry knows its gid).
struct GroupLimits {
  std::map<std::string, LimitEntry> entries;
  bool operator==(const GroupLimits&) const = default;
};

// What the cluster scheduler (daemon/rendezvous/scheduler.h) holds users and groups to; all
// reloadable. A user's or group's own entry wins over the defaults; 0 = no limit. A job over a
// limit waits with that reason.
// The read-only web dashboard (daemon/dashboard/dashboard.h), served by every daemon.
struct DashboardConfig {
  // "HOST:PORT"; loopback by default so only this host's users (and SSH tunnels:
  // `ssh -L 8474:127.0.0.1:8474 host`) reach it; "" = off; port 0 picks a free port (logged).
  std::string listen = "127.0.0.1:8474";
  // A file holding a bearer token; when set every request needs "Authorization: Bearer
  // <token>". Required for a listen address that is not loopback. "" = no token.
  std::string token_file = "";
  bool operator==(const DashboardConfig&) const = default;
};

struct LimitsConfig {
  // The highest priority a non-admin may give a job (submit, `elasticctl priority`), so users
  // cannot all outbid each other; admins may go up to 1000000.
  int priority_ceiling = 0;
  // Nodes held by one user's running jobs, and running jobs per user.
  int max_nodes_per_user = 0;
  int max_running_jobs_per_user = 0;
  // The same per Unix group (a job counts for the primary group of its submitter).
  int max_nodes_per_group = 0;
  int max_running_jobs_per_group = 0;
  // Entries for single users and groups: [limits.users.alice] / [limits.groups.physics] with
  // max_nodes and max_running_jobs.
  UserLimits users = {};
  GroupLimits groups = {};
  bool operator==(const LimitsConfig&) const = default;
};

struct LoggingConfig {
  LogLevel level = LogLevel::kInfo;
  // text for people, json for log shippers.
  LogFormat format = LogFormat::kText;
  // "" = stderr (journald under systemd).
  std::string file = "";
  bool operator==(const LoggingConfig&) const = default;
};

struct DaemonConfig {
  NodeConfig node;
  TransportConfig transport;
  MembershipConfig membership;
  ConsensusConfig consensus;
  RendezvousConfig rendezvous;
  SpawnerConfig spawner;
  CheckpointConfig checkpoint;
  ControlConfig control;
  DashboardConfig dashboard;
  LimitsConfig limits;
  LoggingConfig logging;
  bool operator==(const DaemonConfig&) const = default;
};

struct LoadOptions {
  // TOML file to read; "" = none (built-in defaults and overrides only).
  std::string file;
  // False for the default path: a missing file then means "use the built-in defaults".
  // An explicitly given path that does not exist is an error.
  bool file_must_exist = true;
  // "section.key=value" strings from --set, applied in order after the file. The value is read
  // as a TOML value when it is one (`["a:1","b:2"]`, `false`, `42`, `"x"`); for string-valued
  // keys (strings, durations, enums, node.gpus = auto) unparseable text is taken verbatim.
  std::vector<std::string> overrides;
};

struct LoadedConfig {
  DaemonConfig config;
  // Where the values came from, for logs and `--check-config`: e.g.
  // "/etc/elastic/elasticd.toml", "built-in defaults", plus " + 2 --set overrides".
  std::string source;
  // True when a file was requested with file_must_exist = false and was not there.
  bool file_missing = false;
};

// Reads, overrides and validates. See the header comment for the error format.
Result<LoadedConfig> load_config(const LoadOptions& options);

// What load_config could still read when it fails: every value of the file and the overrides
// that has no problem of its own (a broken one keeps its default; cross-field rules are not
// checked; a file that does not parse gives nothing). For elasticctl, which needs only
// control.socket to reach a daemon while its config file is being fixed; never to run a
// daemon with. Never throws.
DaemonConfig readable_values(const LoadOptions& options);

// Single-field and cross-field rules alone (load_config runs them too). Each returned line is
// "<section.key>: <reason>" without a source.
std::vector<std::string> validate(const DaemonConfig& config);

// The effective config as TOML that load_config reads back to an equal DaemonConfig.
std::string to_toml(const DaemonConfig& config);

// The same as a JSON object (sections -> keys; durations as strings), for `elasticctl --json`.
std::string to_json(const DaemonConfig& config);

// "section.key" of every setting, in declaration order (for docs and tests).
std::vector<std::string> all_keys();

// Names used in TOML for the enums ("info", "json").
const char* to_string(LogLevel level);
const char* to_string(LogFormat format);

// The configuration a running daemon uses: one snapshot, replaced whole by a reload (SIGHUP or
// `elasticctl reload`, node/reload.h), so every part reads the same values and none keeps a copy
// that could drift. Parts keep a reference to the Current and call get() where they read a
// value; they never hold on to the DaemonConfig it returns across a call.
// Thread safety: none; the daemon's loop thread owns it.
class Current {
 public:
  explicit Current(DaemonConfig config)
      : snapshot_(std::make_shared<const DaemonConfig>(std::move(config))) {}
  const DaemonConfig& get() const { return *snapshot_; }
  void replace(DaemonConfig config) {
    snapshot_ = std::make_shared<const DaemonConfig>(std::move(config));
  }

 private:
  std::shared_ptr<const DaemonConfig> snapshot_;
};

}  // namespace elastic::config
