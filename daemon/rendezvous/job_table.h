// JobTable: the replicated state machine of jobs and rounds. The Raft leader proposes
// commands (encode_command); every daemon applies the committed ones in log order (apply);
// the table is snapshotted with the Raft log and restored from it.
//
// Commands (all decisions the leader makes are commands, so a new leader knows them all):
//   SubmitJob    validates the spec and creates job "<name>-<n>" (n counts submissions that
//                created a job, from 1) in state pending.
//   CancelJob    owner (by_uid == spec.uid) or admin only; not for terminal jobs -> cancelled.
//   OpenRound    applies only when expected_prev_round equals the job's round and round is
//                greater: two leaders deciding from the same state cannot both apply, and one
//                (job, round) never gets two rank maps. The rank map must hold min..max nodes,
//                distinct names, slots >= 1 and contiguous ranks from 0. State -> rendezvous.
//                Reason kWorkerFailed consumes a restart and is refused once restarts reached
//                max_restarts (the planner fails the job instead). The per-node restart
//                counts in the rank map are the leader's (make_open_round) and kept as given.
//                Not for a suspended job. A requeued job (pending with rounds before) opens
//                its next round like any pending one.
//                Reason kPreempted (a shrink for a job of higher priority) applies only to a
//                rendezvous or running job, and only when every node of the new rank map is
//                in the current one (same name and generation); it consumes no restart.
//                In the log the rank map is either the full map (key "rm") or, when the
//                leader found it smaller, a delta against the job's current map (key "dl",
//                rank_delta.h): copies of runs of the current entries and new entries. The
//                compare-and-set above makes the job's current map the delta's base on every
//                daemon; apply resolves it (a delta that does not fit that map is refused) and
//                then checks and keeps the full map exactly as if "rm" had carried it.
//   SetJobState  for the job's current round only (stale and future rounds refused):
//                  running     from rendezvous
//                  recovering  from rendezvous or running; `cause` says why the round broke
//                              (and failed_node whose worker, for worker_failed); not
//                              preempted
//                  pending     from rendezvous, running or recovering, with cause preempted
//                              only: a preemptible job the leader suspends to make room and
//                              requeues. It keeps submitted_at (so its place in the queue),
//                              counts a preemption and consumes no restart.
//                  succeeded   from rendezvous or running
//                  failed      from any non-terminal state (round 0 = before any round)
//                Terminal states are final.
//   SetPriority  owner or admin; not for terminal jobs. Sets spec.priority
//                (kMinPriority..kMaxPriority). A non-admin may not raise a priority above
//                `ceiling` (the leader fills it from limits.priority_ceiling): kDenied.
//   SuspendJob   owner or admin. Suspend: a non-terminal job that is not suspended ->
//                suspended (its round ends: its daemons stop its workers; round and rank map
//                are kept as a terminal job keeps them). Resume: suspended -> pending.
//   SetScale     the leader's throughput-scaling step (scheduler.h scale_step()) for a job with
//                scale "throughput" that is not terminal, for its current round only: the
//                new state (size and good within min_nodes..max_nodes or 0, at most
//                max_nodes rates, each finite and >= 0) and the measurement that decided it
//                as the event's reason. Appends an event ("scale: ..."); the state stays.
//   RecordHistory  the leader's batch of what it observed (history.h): training series points
//                of jobs (a point for a job the table no longer has is dropped), complete
//                recovery incidents and cluster events, appended within history.h's bounds.
//                Refused whole when a series value is not finite or a rate is negative, or an
//                incident is not complete.
//   DrainNode    admin only; marks a node drained (no new rounds are placed on it; jobs
//                already on it keep running) or clears the mark. Draining a drained node or
//                undraining one that is not drained applies and changes nothing, so an
//                operator can repeat either without an error. The node need not be a member:
//                a node can be drained before it joins.
// Every state change, every opened round and every priority change appends to the job's event
// log (the last kMaxEventsPerJob are kept).
//
// Exactly-once for clients: SubmitJob, CancelJob, DrainNode, SetPriority and SuspendJob carry
// (client_id, client_seq). The
// table keeps, per client, the last applied seq and its result; a command whose seq is <= that
// returns the remembered result (duplicate = true) and changes nothing, so a client retrying
// through a new leader never submits twice. The table remembers kMaxClientSessions clients,
// forgetting the one whose last command is oldest. Clients must number their commands
// 1, 2, 3... and send one at a time.
//
// Bounds: at most kMaxActiveJobs non-terminal jobs (a SubmitJob beyond is refused) and
// kMaxTerminalJobs terminal ones (the one that ended first is forgotten); at most
// kMaxDrainedNodes drained nodes (draining one more is refused).
//
// Determinism: apply depends only on the table and its arguments (times come in the commands),
// so the same commands in the same order give byte-identical snapshot(), and
// restore(snapshot()).snapshot() is byte-identical.
//
// Compatibility: snapshots are map-encoded, so fields are added without a version bump. The
// drained nodes are written only when there are some, so a table without drains snapshots to
// the bytes daemons wrote before DrainNode existed, and restore() reads those bytes. Likewise a
// failed node ("fn"), a rank entry's restart count ("rc"), a job's preemptions ("pe") and its
// scale state ("sc") and series ("sr") are written only when set, and the table's history ("hi")
// only when it has any. Older daemons refuse a DrainNode, SetPriority,
// SuspendJob or SetScale entry as an unknown kind (kMalformed), and a suspended state or a
// preempted or scaled reason as unknown values, so upgrade every daemon before using them.
// An OpenRound with a rank delta ("dl") has no "rm": a daemon from before deltas refuses it as
// missing its rank map (kMalformed) rather than apply it without one. Leaders write deltas
// on their own (encode_command_against), so a cluster must not mix daemons from before
// deltas with newer leaders: the older ones would not open those rounds. Snapshots always hold
// full maps.
//
// Errors: garbage, truncated, unknown-version or unknown-kind command bytes return an
// ApplyResult with code kMalformed and leave the table unchanged; refused commands return
// kRejected with one sentence, also unchanged. restore() returns an Error for bytes that are
// not a snapshot. Neither throws nor crashes on hostile bytes. apply() with an index not
// greater than the last applied one is a broken invariant (Raft applies each index once, in
// order) and aborts.
//
// Ownership: a plain value (copyable). Thread safety: none; the Raft apply loop owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "daemon/core/result.h"
#include "daemon/rendezvous/history.h"
#include "daemon/rendezvous/job_spec.h"
#include "daemon/rendezvous/rank_delta.h"
#include "daemon/rendezvous/types.h"

namespace elastic::rendezvous {

inline constexpr std::uint32_t kCommandVersion = 1;
inline constexpr std::uint32_t kSnapshotVersion = 1;
inline constexpr std::size_t kMaxEventsPerJob = 1000;
inline constexpr std::size_t kMaxActiveJobs = 10'000;
inline constexpr std::size_t kMaxTerminalJobs = 1000;
inline constexpr std::size_t kMaxClientSessions = 10'000;
inline constexpr std::size_t kMaxReasonBytes = 1024;  // longer reasons are refused
inline constexpr std::size_t kMaxEndpointBytes = 1024;
// More than any cluster we target; also the wire's array limit (wire::kMaxMembers), so a
// snapshot of a full table still decodes.
inline constexpr std::size_t kMaxDrainedNodes = 100'000;
// Node names are host names: letters, digits, '.', '_' and '-'.
inline constexpr std::size_t kMaxDrainNodeBytes = 256;
// MessagePack values a decoded command may hold (the decode budget of daemon/wire/msgpack_map.h):
// the largest is a SubmitJob (a spec) or an OpenRound of kMaxNodesPerJob rank entries (a map of
// 5 keys is 11 values; 16 leaves room for new keys) or of a delta of as many runs (a run is a
// map of at most 7 keys, and never more than one of "rm" and "dl" decodes), plus the fixed
// fields.
inline constexpr std::size_t kValuesPerRankEntry = 16;
inline constexpr std::size_t kMaxCommandValues =
    64 + (kMaxJobSpecValues > kMaxNodesPerJob * kValuesPerRankEntry
              ? kMaxJobSpecValues
              : kMaxNodesPerJob * kValuesPerRankEntry);
// A snapshot comes only from this node's disk or the Raft leader (which can commit any command
// anyway), and a legitimate one of kMaxSnapshotBytes may hold ~16M values (jobs with full event
// histories), so its budget is that: at most ~400 MB while it is decoded, never unbounded.
inline constexpr std::size_t kMaxSnapshotValues = 16 * 1024 * 1024;

// ---------------------------------------------------------------------------------------------
// Commands

struct SubmitJob {
  std::string client_id;
  std::uint64_t client_seq = 0;
  JobSpec spec;
  WallTime submitted_at{};  // stamped by the leader
  bool operator==(const SubmitJob&) const = default;
};

struct CancelJob {
  std::string client_id;
  std::uint64_t client_seq = 0;
  std::string job_id;
  std::uint32_t by_uid = 0;  // from the caller's peer credentials
  bool is_admin = false;     // root or control.admin_group
  WallTime at{};
  bool operator==(const CancelJob&) const = default;
};

struct OpenRound {
  std::string job_id;
  std::uint64_t round = 0;
  std::uint64_t expected_prev_round = 0;
  RankMap ranks;
  std::string store_endpoint;  // "host:port" of the rank-0 node's c10d store
  RoundReason reason = RoundReason::kSubmitted;
  std::string detail;  // a human sentence for the event log ("node b (gen 3) was lost")
  WallTime at{};
  std::string failed_node{};  // reason kWorkerFailed: the node whose worker failed ("" = unknown)
  // Set only by decode_command for a command written as a delta: `ranks` is then empty, and
  // apply() resolves the delta against the job's current rank map (rank_delta.h). The leader
  // never sets it: it proposes the full map and encode_command_against(command, base) picks the
  // encoding.
  std::optional<RankDelta> delta{};
  bool operator==(const OpenRound&) const = default;
};

struct SetJobState {
  std::string job_id;
  std::uint64_t round = 0;
  JobState state = JobState::kRunning;           // running, recovering, succeeded or failed
  RoundReason cause = RoundReason::kMemberLost;  // read only for recovering
  std::string reason;
  WallTime at{};
  std::string failed_node{};  // recovering with cause worker_failed: whose worker failed
  bool operator==(const SetJobState&) const = default;
};

struct DrainNode {
  std::string client_id;
  std::uint64_t client_seq = 0;
  std::string node;
  bool drained = true;       // false = undrain
  std::string reason;        // the operator's words, shown by `elasticctl nodes`
  std::uint32_t by_uid = 0;  // from the caller's peer credentials
  bool is_admin = false;     // root or control.admin_group
  WallTime at{};             // stamped by the leader
  bool operator==(const DrainNode&) const = default;
};

struct SetPriority {
  std::string client_id;
  std::uint64_t client_seq = 0;
  std::string job_id;
  std::int32_t priority = 0;
  // limits.priority_ceiling of the leader that proposed it: the most a non-admin may set.
  std::int32_t ceiling = 0;
  std::uint32_t by_uid = 0;  // from the caller's peer credentials
  bool is_admin = false;     // root or control.admin_group
  WallTime at{};             // stamped by the leader
  bool operator==(const SetPriority&) const = default;
};

struct SuspendJob {
  std::string client_id;
  std::uint64_t client_seq = 0;
  std::string job_id;
  bool resume = false;       // false = suspend
  std::uint32_t by_uid = 0;  // from the caller's peer credentials
  bool is_admin = false;     // root or control.admin_group
  WallTime at{};             // stamped by the leader
  bool operator==(const SuspendJob&) const = default;
};

struct SetScale {
  std::string job_id;
  std::uint64_t round = 0;  // the job's current round (what was measured)
  ScaleState state;
  std::string reason;  // "samples/s 1790 at 2 nodes vs 1000 at 1 (+79%): trying 3"
  WallTime at{};
  bool operator==(const SetScale&) const = default;
};

struct JobPoint {
  std::string job_id;
  SeriesPoint point;
  bool operator==(const JobPoint&) const = default;
};

struct RecordHistory {
  std::vector<JobPoint> points;        // at most kMaxHistoryBatch
  std::vector<Incident> incidents;     // complete ones, at most kMaxHistoryBatch
  std::vector<ClusterEvent> events;    // at most kMaxHistoryBatch
  bool operator==(const RecordHistory&) const = default;
};

// Kinds are only ever appended (the encoded kind number follows the order).
using Command = std::variant<SubmitJob, CancelJob, OpenRound, SetJobState, DrainNode, SetPriority,
                             SuspendJob, SetScale, RecordHistory>;

// Map-encoded MessagePack with the version and kind first (the schema in job_table_codec.cc).
// An OpenRound is written as it is: its full rank map, or its delta when it has one.
std::string encode_command(const Command& command);
// What the leader proposes: the same, except that an OpenRound without a delta is written as a
// delta against `base` when that is fewer bytes. `base` must be the rank map the job has at the
// OpenRound's expected_prev_round: the job table's own map (JobRecord::ranks), not a planner's
// edited copy; a delta against another map is refused when applied, or worse, means another
// map. Other commands ignore `base`.
std::string encode_command_against(const Command& command, const RankMap& base);
// Structure and limits only; the rules are apply()'s. Never throws.
Result<Command> decode_command(std::string_view bytes);

// ---------------------------------------------------------------------------------------------
// Records

struct JobEvent {
  WallTime at{};
  std::uint64_t round = 0;  // the job's round after the event
  JobState from = JobState::kPending;
  JobState to = JobState::kPending;
  std::string reason;
  bool operator==(const JobEvent&) const = default;
};

struct JobRecord {
  std::string id;
  JobSpec spec;
  JobState state = JobState::kPending;
  WallTime submitted_at{};
  WallTime state_since{};  // when the current state began (join timeout, backoff)
  std::string reason;      // of the latest state change ("restarts exhausted (3 of 3)")
  // Why the job is recovering; meaningful in state recovering only.
  RoundReason recovery_cause = RoundReason::kMemberLost;
  // Recovering from a worker failure: the node whose worker failed ("" = unknown); the next
  // round counts a restart for that node only (RankAssignment::restarts).
  std::string failed_node{};
  std::uint32_t restarts = 0;     // worker-failure rounds so far (the job's max_restarts budget)
  std::uint32_t preemptions = 0;  // times it was suspended and requeued for another job
  ScaleState scale;               // scale "throughput": the last committed SetScale
  std::vector<SeriesPoint> series;  // training series, oldest first (history.h bounds)
  // The current round; 0 = none yet.
  std::uint64_t round = 0;
  RankMap ranks;
  std::string store_endpoint;
  RoundReason round_reason = RoundReason::kSubmitted;
  WallTime round_opened_at{};
  Index created_index = 0;       // the log index of its SubmitJob
  Index ended_index = 0;         // the log index that made it terminal; 0 while active
  std::vector<JobEvent> events;  // oldest first, at most kMaxEventsPerJob
  bool operator==(const JobRecord&) const = default;
};

enum class ApplyCode : std::uint8_t {
  kApplied = 0,    // the command changed the table
  kRejected = 1,   // a valid command the rules refuse (message says why)
  kMalformed = 2,  // bytes that are not a command (message says why)
  kDenied = 3,     // the caller may not do this: not the job's owner, not an admin (message)
};

struct ApplyResult {
  ApplyCode code = ApplyCode::kApplied;
  std::string job_id;      // the job concerned (the new id for SubmitJob), when known
  std::string message;     // one sentence for kRejected and kMalformed
  bool duplicate = false;  // answered from the client's remembered result
  bool ok() const { return code == ApplyCode::kApplied; }
  bool operator==(const ApplyResult&) const = default;
};

// Why and since when a node is drained.
struct NodeDrain {
  std::string reason;
  WallTime at{};
  std::uint32_t by_uid = 0;
  bool operator==(const NodeDrain&) const = default;
};

// What the table remembers per client.
struct ClientSession {
  std::uint64_t last_seq = 0;
  ApplyCode code = ApplyCode::kApplied;
  std::string job_id;
  std::string message;
  Index last_index = 0;  // for forgetting the least recently active client
  bool operator==(const ClientSession&) const = default;
};

class JobTable {
 public:
  JobTable() = default;

  // Applies the committed entry at `index` (> applied_index()).
  ApplyResult apply(Index index, std::string_view command_bytes);
  // The same for an already decoded command (tests, the simulator).
  ApplyResult apply(Index index, const Command& command);

  std::string snapshot() const;
  static Result<JobTable> restore(std::string_view bytes);

  // Jobs by id (sorted), active and retained terminal ones.
  const std::map<std::string, JobRecord>& jobs() const { return jobs_; }
  const JobRecord* job(std::string_view id) const;
  const std::map<std::string, ClientSession>& clients() const { return clients_; }
  // Drained nodes by name. The leader places no new round on them.
  const std::map<std::string, NodeDrain>& drained() const { return drained_; }
  Index applied_index() const { return applied_index_; }
  // The last applied entry that was not a RecordHistory (or a restore's index). A RecordHistory
  // changes only the history and the jobs' series points: a reader of anything else (states,
  // rounds, specs, drains) can skip work while this stays. Not in snapshots.
  Index non_history_index() const { return jobs_index_.index; }
  // Recovery incidents, cluster events and recovery durations the leaders replicated.
  const History& history() const { return history_; }
  std::uint64_t jobs_created() const { return jobs_created_; }

  bool operator==(const JobTable&) const = default;

 private:
  ApplyResult apply_submit(Index index, const SubmitJob& c);
  ApplyResult apply_cancel(Index index, const CancelJob& c);
  ApplyResult apply_open(Index index, const OpenRound& c);
  ApplyResult apply_set(Index index, const SetJobState& c);
  ApplyResult apply_drain(Index index, const DrainNode& c);
  ApplyResult apply_priority(Index index, const SetPriority& c);
  ApplyResult apply_suspend(Index index, const SuspendJob& c);
  ApplyResult apply_scale(Index index, const SetScale& c);
  ApplyResult apply_history(const RecordHistory& c);
  ApplyResult remember(Index index, const std::string& client_id, std::uint64_t seq,
                       ApplyResult result);
  template <typename C>
  std::variant<JobRecord*, ApplyResult> owned_job(const C& c, const char* verb);
  void change_state(Index index, JobRecord& job, JobState to, WallTime at, std::string reason);
  static void add_event(JobRecord& job, JobEvent event);
  void forget_old_terminal_jobs();

  Index applied_index_ = 0;
  // See non_history_index(). A reader's hint, not the table's value: a restored table starts
  // it at its applied index, so it takes no part in ==.
  struct Hint {
    Index index = 0;
    bool operator==(const Hint&) const { return true; }
  };
  Hint jobs_index_;
  std::uint64_t jobs_created_ = 0;
  std::map<std::string, JobRecord> jobs_;
  std::map<std::string, ClientSession> clients_;
  std::map<std::string, NodeDrain> drained_;
  History history_;
};

// JSON of a record for the control API (`elasticctl status --json`): id, state, reason,
// round, ranks, store endpoint, restarts, preemptions (only when not 0), priority, preemptible,
// scale (scale "throughput" only: {"size", "good", "settled", "samples_per_s": {"<nodes>": x}}),
// series (when it has points: {"samples_per_s": [[at_ms, x], ...], "loss": [[at_ms, x], ...]}),
// times (ms since the epoch), the spec, and the last `max_events` events.
std::string to_json(const JobRecord& job, std::size_t max_events = kMaxEventsPerJob);

// JSON of the drained nodes for the control API:
// {"<node>": {"reason": ..., "at_ms": <ms since the epoch>, "by_uid": ...}, ...}.
std::string drained_to_json(const JobTable& table);

}  // namespace elastic::rendezvous
