// JobSpec: what a user submits, its validation, and its two encodings:
// JSON for the control API (elasticctl <-> elasticd) and MessagePack inside Raft commands.
//
// Validation (validate()) runs on the daemon that receives the submission and again when the
// job table applies a SubmitJob, so a bad spec never becomes a job. It reports every broken
// rule at once, one line "<field>: <problem>" each (joined by '\n', in field order), naming the
// field as written in JSON, e.g.
//   "nodes: min 3 is greater than max 2"
//   "env: RANK is set by the daemon for every worker and cannot be overridden"
// At most kMaxSpecProblems lines, then "spec: and N more problems".
//
// JSON (an object; every key optional except name and command; unknown keys are errors so a
// typo is never silently ignored):
//   name "fmnist", command ["elastic-trainer", "--model", "fmnist"], env {"NAME": "value"},
//   exported_env {"NAME": "value"} (only when not empty),
//   min_nodes 1, max_nodes 1, workers_per_node 0, checkpoint_root "/nfs/ck",
//   max_restarts 3, restart_backoff "10s", last_call "5s" (absent = the config's),
//   hang_timeout "60s" (only when set: absent = the daemon's default, see job_supervisor.h;
//   "0s" = off), working_dir "/home/alice", user "alice", uid 1000, gid 1000, warm true (only
//   when true), priority 10, preemptible true, scale "throughput", scale_min_gain 0.1,
//   scale_window "2m" (each of these five only when not its default)
// Durations are strings as in the config ("500ms", "1m30s"). The daemon must overwrite user,
// uid and gid from the control socket's peer credentials; the JSON carries them only so that
// `elasticctl status --json` shows them.
//
// MessagePack: a map with short keys (listed in msgpack_fields.h), encoded and decoded by the
// schema codec of daemon/wire/msgpack_schema.h. Decoding checks structure and limits, not the rules
// of validate(); the job table validates separately.
//
// Errors: decoders never throw (nlohmann exceptions are caught inside) and never crash on
// hostile input. Thread safety: pure functions on values.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/core/result.h"
#include "daemon/core/time.h"

namespace elastic::rendezvous {

// Limits that keep one job's spec (and so each Raft entry and snapshot) small. Argument and
// environment sizes follow Linux's exec limits (MAX_ARG_STRLEN 128 KiB) with margin.
inline constexpr std::size_t kMaxJobNameBytes = 64;
inline constexpr std::size_t kMaxCommandArgs = 1024;
inline constexpr std::size_t kMaxArgBytes = 16 * 1024;
inline constexpr std::size_t kMaxEnvVars = 1024;
inline constexpr std::size_t kMaxEnvNameBytes = 256;
inline constexpr std::size_t kMaxEnvValueBytes = 16 * 1024;
inline constexpr std::size_t kMaxCommandAndEnvBytes = 256 * 1024;  // argv + env in all
inline constexpr std::size_t kMaxPathBytes = 4096;                 // PATH_MAX
inline constexpr std::size_t kMaxUserBytes = 256;
inline constexpr std::uint32_t kMaxNodesPerJob = 100'000;
// MessagePack values a decoded spec may hold (the decode budget of daemon/wire/msgpack_map.h):
// its fixed fields, one per argument, two per environment variable, and room for new keys.
inline constexpr std::size_t kMaxJobSpecValues = 64 + kMaxCommandArgs + 2 * kMaxEnvVars;
inline constexpr std::uint32_t kMaxWorkersPerNode = 1024;
inline constexpr std::uint32_t kMaxRestartsLimit = 1'000'000;
inline constexpr Duration kMaxRestartBackoff = std::chrono::hours(1);
inline constexpr Duration kMaxLastCall = std::chrono::hours(1);
// hang_timeout: shorter would mistake one slow step (a checkpoint write, the first step's
// compilation) for a hang; longer than a day is no detection at all.
inline constexpr Duration kMinHangTimeout = std::chrono::seconds(5);
inline constexpr Duration kMaxHangTimeout = std::chrono::hours(24);
// priority: wide enough for any site's scheme, narrow enough that no arithmetic on it overflows.
inline constexpr std::int32_t kMinPriority = -1'000'000;
inline constexpr std::int32_t kMaxPriority = 1'000'000;
// scale_window: shorter cannot average over enough steps (and a round change) to tell a gain
// from noise; longer than an hour never settles.
inline constexpr Duration kMinScaleWindow = std::chrono::seconds(10);
inline constexpr Duration kMaxScaleWindow = std::chrono::hours(1);

// How a job chooses its size between min_nodes and max_nodes (daemon/rendezvous/scheduler.h).
enum class ScaleMode : std::uint8_t {
  kFixed = 0,       // as many nodes as it can get, up to max_nodes ("fixed")
  kThroughput = 1,  // from min_nodes, one node at a time while throughput pays ("throughput")
};
inline constexpr std::uint8_t kMaxScaleMode = 1;
// "fixed", "throughput".
std::string_view scale_mode_name(ScaleMode mode);
// The mode named `name`; nullopt when it names none.
std::optional<ScaleMode> parse_scale_mode(std::string_view name);

struct JobSpec {
  // Job ids are "<name>-<n>"; [A-Za-z0-9._-]{1,64}.
  std::string name;
  // argv; argv[0] is looked up in PATH by the spawner like execvp (elasticctl sends it
  // resolved: an absolute path found in the submitter's PATH). The arguments after it may hold
  // placeholders (placeholders.h).
  std::vector<std::string> command;
  // Added to the workers' environment (--env, the job file's env); sorted by name so encodings
  // are deterministic. Values may hold placeholders (placeholders.h).
  std::map<std::string, std::string> env;
  // The submitter's environment as elasticctl exported it (--export, the job file's export),
  // without the variables is_unexported_env() names. Passed on verbatim (no placeholders);
  // `env` overrides it. Counts against the same limits as `env` (kMaxEnvVars variables and
  // kMaxCommandAndEnvBytes with the command, the two together).
  std::map<std::string, std::string> exported_env;
  std::uint32_t min_nodes = 1;
  std::uint32_t max_nodes = 1;
  // 0 = one worker per local GPU, or per CPU slot on hosts without GPUs.
  std::uint32_t workers_per_node = 0;
  // Absolute; "" = the daemon's checkpoint.root (the daemon fills it before submitting).
  std::string checkpoint_root;
  // Worker failures tolerated before the job fails; lost nodes do not count.
  std::uint32_t max_restarts = 3;
  // Wait this long after a worker failure before the next round (a crash loop costs little).
  Duration restart_backoff = std::chrono::seconds(1);
  // Overrides rendezvous.last_call for this job.
  std::optional<Duration> last_call;
  // Hang detection (JobSupervisor): once a node's workers of a round sent a progress "step",
  // no newer one for this long fails the round like a crash. Absent = the daemon's default
  // (job_supervisor.h: from the step time for workers that send "alive", off for others);
  // 0 = off; otherwise kMinHangTimeout..kMaxHangTimeout.
  std::optional<Duration> hang_timeout;
  // Absolute; "" = the submitting user's home directory (chosen by the spawner).
  std::string working_dir;
  // Keep a started Python interpreter per slot for the next round (node/warm_standbys.h); the
  // command must be one python_command.h accepts.
  bool warm = false;
  // Scheduling (daemon/rendezvous/scheduler.h). Higher priorities are served first and may
  // take nodes from lower ones; kMinPriority..kMaxPriority.
  std::int32_t priority = 0;
  // A job of higher priority may suspend this one entirely (requeued, resumed later from its
  // checkpoint, not counted as a restart); otherwise it is only ever shrunk to min_nodes.
  bool preemptible = false;
  ScaleMode scale = ScaleMode::kFixed;
  // kThroughput: an added node must raise samples per second by at least this fraction
  // (0 < x <= 1), measured over scale_window (kMinScaleWindow..kMaxScaleWindow).
  double scale_min_gain = 0.05;
  Duration scale_window = std::chrono::seconds(60);
  // The submitting user, from the control socket's peer credentials.
  std::string user;
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;

  bool operator==(const JobSpec&) const = default;
};

// One broken rule: the field as written in JSON ("nodes", "env", ...) and what is wrong.
struct SpecProblem {
  std::string field;
  std::string problem;
  bool operator==(const SpecProblem&) const = default;
};
// Reports past this many problems are only counted (a hostile spec could break 2,000 rules).
inline constexpr std::size_t kMaxSpecProblems = 32;

// Every rule of the header comment that `spec` breaks, in field order; empty when it is valid.
// Each argument and environment variable is checked on its own (its first problem).
std::vector<SpecProblem> spec_problems(const JobSpec& spec);
// spec_problems() as one Status: every problem, one "<field>: <problem>" line each.
Status validate(const JobSpec& spec);

// Letters, digits and '_', not starting with a digit (what env and exported_env accept).
bool is_env_name(std::string_view name);

// True for the variables the daemon sets for every worker (RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, CUDA_VISIBLE_DEVICES, TORCHELASTIC_*,
// ELASTIC_*): a job cannot override them.
bool is_daemon_owned_env(std::string_view name);

// True for the variables an exported environment never carries (elasticctl leaves them out;
// validate() refuses them in exported_env): the daemon-owned ones above; the ones the daemon
// sets from each host's passwd entry (HOME, USER, LOGNAME, SHELL); and the ones that describe
// the submitting host, session or launcher rather than the job: HOSTNAME, HOST, PWD, OLDPWD,
// SHLVL, _, DISPLAY, XAUTHORITY, XDG_RUNTIME_DIR, XDG_SESSION_*, XDG_SEAT, XDG_VTNR,
// DBUS_SESSION_BUS_ADDRESS, SSH_*, TMUX, TMUX_PANE, STY, WINDOW, the systemd service variables
// (NOTIFY_SOCKET, LISTEN_FDS, LISTEN_PID, LISTEN_FDNAMES, INVOCATION_ID, JOURNAL_STREAM,
// MANAGERPID, SYSTEMD_EXEC_PID), another launcher's rank and device variables (SLURM_*,
// PMI_*, PMIX_*, OMPI_COMM_WORLD_*, NODE_RANK, *_VISIBLE_DEVICES, GPU_DEVICE_ORDINAL: a
// library that reads them would take a wrong rank or device). `env` may still set any of the
// non-daemon-owned ones explicitly.
bool is_unexported_env(std::string_view name);

// JSON text of one object (keys as in the header comment; last_call only when set).
std::string to_json(const JobSpec& spec);
// Parses the JSON object; the error names the field ("min_nodes: expected an unsigned
// integer, got a string"), one line per bad field. Does not run validate().
Result<JobSpec> job_spec_from_json(std::string_view json_text);

// MessagePack (map-encoded) of the spec, and back. decode runs no validate().
std::string encode_job_spec(const JobSpec& spec);
Result<JobSpec> decode_job_spec(std::string_view bytes);

}  // namespace elastic::rendezvous
