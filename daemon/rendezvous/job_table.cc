#include "daemon/rendezvous/job_table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <set>
#include <utility>

#include "daemon/rendezvous/job_table_internal.h"
#include "daemon/rendezvous/msgpack_fields.h"

namespace elastic::rendezvous {

// ---------------------------------------------------------------------------------------------
// Vocabulary (types.h)

const char* to_string(JobState state) {
  switch (state) {
    case JobState::kPending:
      return "pending";
    case JobState::kRendezvous:
      return "rendezvous";
    case JobState::kRunning:
      return "running";
    case JobState::kRecovering:
      return "recovering";
    case JobState::kSucceeded:
      return "succeeded";
    case JobState::kFailed:
      return "failed";
    case JobState::kCancelled:
      return "cancelled";
    case JobState::kSuspended:
      return "suspended";
  }
  return "unknown";
}

bool is_terminal(JobState state) {
  return state == JobState::kSucceeded || state == JobState::kFailed ||
         state == JobState::kCancelled;
}

const char* to_string(RoundReason reason) {
  switch (reason) {
    case RoundReason::kSubmitted:
      return "submitted";
    case RoundReason::kMemberLost:
      return "member_lost";
    case RoundReason::kWorkerFailed:
      return "worker_failed";
    case RoundReason::kGrow:
      return "grow";
    case RoundReason::kPreempted:
      return "preempted";
    case RoundReason::kScaled:
      return "scaled";
  }
  return "unknown";
}

std::uint64_t world_size(const RankMap& ranks) {
  std::uint64_t total = 0;
  for (const RankAssignment& r : ranks) total += r.slots;
  return total;
}
namespace {

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "job table: broken invariant: %s\n", what);
  std::abort();
}

using table_internal::drain_node_problem;
using table_internal::kMaxClientIdBytes;
using table_internal::kMaxJobIdBytes;
using table_internal::kMaxNodeNameBytes;

ApplyResult rejected(std::string job_id, std::string message) {
  return ApplyResult{ApplyCode::kRejected, std::move(job_id), std::move(message), false};
}

ApplyResult denied(std::string job_id, std::string message) {
  return ApplyResult{ApplyCode::kDenied, std::move(job_id), std::move(message), false};
}

bool negative(WallTime t) { return t.time_since_epoch().count() < 0; }

// Checks an OpenRound's rank map against the spec; "" when it is well formed.
std::string rank_map_problem(const RankMap& ranks, const JobSpec& spec) {
  if (ranks.size() < spec.min_nodes || ranks.size() > spec.max_nodes) {
    return "its rank map has " + std::to_string(ranks.size()) + " nodes, outside the job's " +
           std::to_string(spec.min_nodes) + ".." + std::to_string(spec.max_nodes);
  }
  std::set<std::string_view> names;
  std::uint64_t next_rank = 0;
  for (const RankAssignment& r : ranks) {
    if (r.node.empty() || r.node.size() > kMaxNodeNameBytes) {
      return "its rank map has an empty or too long node name";
    }
    if (!names.insert(r.node).second) return "its rank map names node " + r.node + " twice";
    if (r.slots == 0) return "its rank map gives node " + r.node + " no slots";
    if (spec.workers_per_node != 0 && r.slots != spec.workers_per_node) {
      return "its rank map gives node " + r.node + " " + std::to_string(r.slots) +
             " slots, not the job's workers_per_node " + std::to_string(spec.workers_per_node);
    }
    if (r.first_rank != next_rank) {
      return "its rank map starts node " + r.node + " at rank " + std::to_string(r.first_rank) +
             " instead of " + std::to_string(next_rank);
    }
    next_rank += r.slots;
    if (next_rank > std::numeric_limits<std::uint32_t>::max()) {
      return "its rank map has more ranks than fit in 32 bits";
    }
  }
  return "";
}

// The SetJobState transitions (suspended and cancelled come only from their own commands).
bool transition_allowed(JobState from, JobState to) {
  switch (to) {
    case JobState::kRunning:
      return from == JobState::kRendezvous;
    case JobState::kPending:  // a preemptible job requeued (cause preempted)
      return from == JobState::kRendezvous || from == JobState::kRunning ||
             from == JobState::kRecovering;
    case JobState::kRecovering:
    case JobState::kSucceeded:
      return from == JobState::kRendezvous || from == JobState::kRunning;
    case JobState::kFailed:
      return !is_terminal(from);
    default:
      return false;  // rendezvous comes only from OpenRound
  }
}

// "" when `ranks` keeps only nodes of `current` (same name and generation): a preemption shrinks
// a round, it never moves it.
std::string shrink_problem(const RankMap& ranks, const RankMap& current) {
  for (const RankAssignment& r : ranks) {
    const bool kept = std::any_of(current.begin(), current.end(), [&](const RankAssignment& c) {
      return c.node == r.node && c.generation == r.generation;
    });
    if (!kept) {
      return "a preempted or scaled round only shrinks the current one, and node " + r.node + " (generation " +
             std::to_string(r.generation) + ") is not in the current one";
    }
  }
  return "";
}

std::string by_whom(std::uint32_t uid, bool is_admin) {
  return "by uid " + std::to_string(uid) + (is_admin ? " (admin)" : "");
}

}  // namespace

std::string table_internal::drain_node_problem(const std::string& node) {
  if (node.empty()) return "The node name is empty.";
  if (node.size() > kMaxDrainNodeBytes) {
    return "The node name is " + std::to_string(node.size()) + " bytes long, more than the " +
           std::to_string(kMaxDrainNodeBytes) + " a node name may have.";
  }
  const bool host_name = std::all_of(node.begin(), node.end(), [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '.' || ch == '_' || ch == '-';
  });
  if (!host_name) {
    return "The node name may hold only letters, digits, '.', '_' and '-', as host names do.";
  }
  return "";
}

// ---------------------------------------------------------------------------------------------
// The table

const JobRecord* JobTable::job(std::string_view id) const {
  const auto it = jobs_.find(std::string(id));
  return it == jobs_.end() ? nullptr : &it->second;
}

ApplyResult JobTable::apply(Index index, std::string_view command_bytes) {
  if (index <= applied_index_) die("apply() with an index not above the last applied one");
  Result<Command> command = decode_command(command_bytes);
  if (!command) {
    applied_index_ = index;
    jobs_index_.index = index;
    return ApplyResult{ApplyCode::kMalformed, "", command.error().message, false};
  }
  return apply(index, *command);
}

ApplyResult JobTable::apply(Index index, const Command& command) {
  if (index <= applied_index_) die("apply() with an index not above the last applied one");
  applied_index_ = index;
  if (!std::holds_alternative<RecordHistory>(command)) jobs_index_.index = index;
  return std::visit(
      [&](const auto& c) -> ApplyResult {
        using T = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<T, SubmitJob>) {
          return apply_submit(index, c);
        } else if constexpr (std::is_same_v<T, CancelJob>) {
          return apply_cancel(index, c);
        } else if constexpr (std::is_same_v<T, OpenRound>) {
          return apply_open(index, c);
        } else if constexpr (std::is_same_v<T, SetJobState>) {
          return apply_set(index, c);
        } else if constexpr (std::is_same_v<T, DrainNode>) {
          return apply_drain(index, c);
        } else if constexpr (std::is_same_v<T, SetPriority>) {
          return apply_priority(index, c);
        } else if constexpr (std::is_same_v<T, SuspendJob>) {
          return apply_suspend(index, c);
        } else if constexpr (std::is_same_v<T, SetScale>) {
          return apply_scale(index, c);
        } else {
          static_assert(std::is_same_v<T, RecordHistory>);
          return apply_history(c);
        }
      },
      command);
}

ApplyResult JobTable::remember(Index index, const std::string& client_id, std::uint64_t seq,
                               ApplyResult result) {
  auto [it, inserted] = clients_.try_emplace(client_id);
  it->second = ClientSession{seq, result.code, result.job_id, result.message, index};
  if (inserted && clients_.size() > kMaxClientSessions) {
    auto oldest = clients_.begin();
    for (auto c = clients_.begin(); c != clients_.end(); ++c) {
      if (c->second.last_index < oldest->second.last_index) oldest = c;
    }
    clients_.erase(oldest);
  }
  return result;
}

namespace {

// The remembered answer when (client_id, seq) was applied already, else nullopt; a refusal
// for a command without a usable client identity.
std::optional<ApplyResult> dedupe(const std::map<std::string, ClientSession>& clients,
                                  const std::string& client_id, std::uint64_t seq) {
  if (client_id.empty() || client_id.size() > kMaxClientIdBytes || seq == 0) {
    return rejected("",
                    "The command has no client id or sequence number, so it could not be "
                    "applied exactly once.");
  }
  const auto it = clients.find(client_id);
  if (it == clients.end() || seq > it->second.last_seq) return std::nullopt;
  return ApplyResult{it->second.code, it->second.job_id, it->second.message, true};
}

}  // namespace

ApplyResult JobTable::apply_submit(Index index, const SubmitJob& c) {
  if (std::optional<ApplyResult> seen = dedupe(clients_, c.client_id, c.client_seq)) {
    return *seen;
  }
  auto refuse = [&](std::string message) {
    return remember(index, c.client_id, c.client_seq, rejected("", std::move(message)));
  };
  if (Status valid = validate(c.spec); !valid) return refuse(valid.error().message);
  if (negative(c.submitted_at)) return refuse("The submission time is before 1970.");
  const auto active = static_cast<std::size_t>(std::count_if(
      jobs_.begin(), jobs_.end(), [](const auto& kv) { return !is_terminal(kv.second.state); }));
  if (active >= kMaxActiveJobs) {
    return refuse("The cluster already has " + std::to_string(active) +
                  " active jobs, the most it keeps; wait for some to finish.");
  }
  ++jobs_created_;
  JobRecord job;
  job.id = c.spec.name + "-" + std::to_string(jobs_created_);
  job.spec = c.spec;
  job.state = JobState::kPending;
  job.submitted_at = c.submitted_at;
  job.state_since = c.submitted_at;
  job.reason = "submitted by " + (c.spec.user.empty() ? std::string() : c.spec.user + " ") +
               "(uid " + std::to_string(c.spec.uid) + ")";
  job.created_index = index;
  job.events.push_back(
      JobEvent{c.submitted_at, 0, JobState::kPending, JobState::kPending, job.reason});
  const std::string id = job.id;
  if (!jobs_.emplace(id, std::move(job)).second) die("a new job id is already taken");
  return remember(index, c.client_id, c.client_seq,
                  ApplyResult{ApplyCode::kApplied, id, "", false});
}

ApplyResult JobTable::apply_cancel(Index index, const CancelJob& c) {
  if (std::optional<ApplyResult> seen = dedupe(clients_, c.client_id, c.client_seq)) {
    return *seen;
  }
  auto refuse = [&](std::string message) {
    return remember(index, c.client_id, c.client_seq, rejected(c.job_id, std::move(message)));
  };
  const auto it = jobs_.find(c.job_id);
  if (it == jobs_.end()) return refuse("There is no job " + c.job_id + ".");
  JobRecord& job = it->second;
  if (is_terminal(job.state)) {
    return refuse("Job " + c.job_id + " has already " +
                  (job.state == JobState::kCancelled ? std::string("been cancelled")
                                                     : std::string(to_string(job.state))) +
                  ".");
  }
  if (!c.is_admin && c.by_uid != job.spec.uid) {
    return remember(index, c.client_id, c.client_seq,
                    denied(c.job_id, "uid " + std::to_string(c.by_uid) + " may not cancel job " +
                                         c.job_id + " of uid " + std::to_string(job.spec.uid) +
                                         "; only its owner or an admin may."));
  }
  if (negative(c.at)) return refuse("The cancel time is before 1970.");
  change_state(index, job, JobState::kCancelled, c.at,
               "cancelled by uid " + std::to_string(c.by_uid) + (c.is_admin ? " (admin)" : ""));
  const std::string id = c.job_id;
  forget_old_terminal_jobs();
  return remember(index, c.client_id, c.client_seq,
                  ApplyResult{ApplyCode::kApplied, id, "", false});
}

ApplyResult JobTable::apply_open(Index index, const OpenRound& c) {
  const auto it = jobs_.find(c.job_id);
  if (it == jobs_.end()) return rejected(c.job_id, "There is no job " + c.job_id + ".");
  JobRecord& job = it->second;
  const std::string round = "round " + std::to_string(c.round) + " of job " + c.job_id;
  if (is_terminal(job.state) || job.state == JobState::kSuspended) {
    return rejected(c.job_id,
                    "Cannot open " + round + ": the job is " + to_string(job.state) + ".");
  }
  if (c.expected_prev_round != job.round) {
    return rejected(c.job_id, "Cannot open " + round + ": it was decided at round " +
                                  std::to_string(c.expected_prev_round) +
                                  " but the job is at round " + std::to_string(job.round) + ".");
  }
  if (c.round <= job.round) {
    return rejected(c.job_id, "Cannot open " + round + ": round numbers must increase past " +
                                  std::to_string(job.round) + ".");
  }
  if (static_cast<std::uint8_t>(c.reason) > kMaxRoundReason) {
    return rejected(c.job_id, "Cannot open " + round + ": its reason is unknown.");
  }
  // A delta's base is the job's current map: the compare-and-set above fixed its round.
  RankMap resolved;
  if (c.delta) {
    if (!c.ranks.empty()) {
      return rejected(c.job_id, "Cannot open " + round + ": it has both a rank map and a delta.");
    }
    if (std::string problem = resolve_rank_delta(*c.delta, job.round, job.ranks, &resolved);
        !problem.empty()) {
      return rejected(c.job_id, "Cannot open " + round + ": " + problem + ".");
    }
  }
  const RankMap& ranks = c.delta ? resolved : c.ranks;
  if (std::string problem = rank_map_problem(ranks, job.spec); !problem.empty()) {
    return rejected(c.job_id, "Cannot open " + round + ": " + problem + ".");
  }
  if (c.store_endpoint.empty() || c.store_endpoint.size() > kMaxEndpointBytes) {
    return rejected(c.job_id,
                    "Cannot open " + round + ": its store endpoint is empty or too long.");
  }
  if (c.detail.size() > kMaxReasonBytes || negative(c.at)) {
    return rejected(c.job_id, "Cannot open " + round +
                                  ": its detail is too long or its time is "
                                  "before 1970.");
  }
  if (c.reason == RoundReason::kPreempted || c.reason == RoundReason::kScaled) {
    if (job.state != JobState::kRendezvous && job.state != JobState::kRunning) {
      return rejected(c.job_id, "Cannot open " + round + " (" + to_string(c.reason) +
                                    "): the job is " +
                                    to_string(job.state) + ", not rendezvous or running.");
    }
    if (std::string problem = shrink_problem(ranks, job.ranks); !problem.empty()) {
      return rejected(c.job_id, "Cannot open " + round + ": " + problem + ".");
    }
  }
  if (c.reason == RoundReason::kWorkerFailed) {
    if (job.restarts >= job.spec.max_restarts) {
      return rejected(c.job_id, "Cannot open " + round + ": the job has used all " +
                                    std::to_string(job.spec.max_restarts) + " restarts.");
    }
    ++job.restarts;
  }
  job.round = c.round;
  job.ranks = ranks;
  job.store_endpoint = c.store_endpoint;
  job.round_reason = c.reason;
  job.round_opened_at = c.at;
  job.failed_node.clear();
  std::string reason = "round " + std::to_string(c.round) + " opened (" + to_string(c.reason);
  if (c.reason == RoundReason::kWorkerFailed) {
    reason += ", restart " + std::to_string(job.restarts) + " of " +
              std::to_string(job.spec.max_restarts);
  }
  reason += ")";
  if (!c.detail.empty()) reason += ": " + c.detail;
  change_state(index, job, JobState::kRendezvous, c.at, std::move(reason));
  return ApplyResult{ApplyCode::kApplied, c.job_id, "", false};
}

ApplyResult JobTable::apply_set(Index index, const SetJobState& c) {
  const auto it = jobs_.find(c.job_id);
  if (it == jobs_.end()) return rejected(c.job_id, "There is no job " + c.job_id + ".");
  JobRecord& job = it->second;
  const std::string what = "Job " + c.job_id + " cannot become " + to_string(c.state);
  if (is_terminal(job.state)) {
    return rejected(c.job_id, what + ": it has already " + to_string(job.state) + ".");
  }
  if (c.round != job.round) {
    return rejected(c.job_id, what + " for round " + std::to_string(c.round) +
                                  ": the job is at round " + std::to_string(job.round) + ".");
  }
  if (static_cast<std::uint8_t>(c.state) > kMaxJobState ||
      static_cast<std::uint8_t>(c.cause) > kMaxRoundReason ||
      !transition_allowed(job.state, c.state)) {
    return rejected(c.job_id, what + " from " + to_string(job.state) + ".");
  }
  if (c.reason.size() > kMaxReasonBytes || negative(c.at)) {
    return rejected(c.job_id, what + ": the reason is too long or the time is before 1970.");
  }
  // Preempted is the cause of a requeue and of nothing else.
  if (c.state == JobState::kPending && c.cause != RoundReason::kPreempted) {
    return rejected(c.job_id, what + " with cause " + to_string(c.cause) +
                                  ": only a preempted job is requeued.");
  }
  if (c.state == JobState::kRecovering && c.cause == RoundReason::kPreempted) {
    return rejected(c.job_id, what +
                                  " with cause preempted: a preempted job shrinks (a new round) "
                                  "or is requeued (pending).");
  }
  if (c.state == JobState::kRecovering) {
    job.recovery_cause = c.cause;
    job.failed_node = c.cause == RoundReason::kWorkerFailed ? c.failed_node : "";
  }
  if (c.state == JobState::kPending) ++job.preemptions;
  change_state(index, job, c.state, c.at, c.reason);
  if (is_terminal(c.state)) forget_old_terminal_jobs();
  return ApplyResult{ApplyCode::kApplied, c.job_id, "", false};
}

ApplyResult JobTable::apply_drain(Index index, const DrainNode& c) {
  if (std::optional<ApplyResult> seen = dedupe(clients_, c.client_id, c.client_seq)) {
    return *seen;
  }
  auto refuse = [&](std::string message) {
    return remember(index, c.client_id, c.client_seq, rejected("", std::move(message)));
  };
  if (!c.is_admin) {
    return remember(index, c.client_id, c.client_seq,
                    denied("", "Only root or members of control.admin_group may drain nodes."));
  }
  if (std::string problem = drain_node_problem(c.node); !problem.empty()) return refuse(problem);
  if (c.reason.size() > kMaxReasonBytes) {
    return refuse("The drain reason is longer than " + std::to_string(kMaxReasonBytes) + " bytes.");
  }
  if (negative(c.at)) return refuse("The drain time is before 1970.");
  const auto it = drained_.find(c.node);
  if (c.drained && it == drained_.end()) {
    if (drained_.size() >= kMaxDrainedNodes) {
      return refuse("The cluster already has " + std::to_string(drained_.size()) +
                    " drained nodes, the most it keeps; undrain some first.");
    }
    drained_.emplace(c.node, NodeDrain{c.reason, c.at, c.by_uid});
  } else if (!c.drained && it != drained_.end()) {
    drained_.erase(it);
  }
  // Otherwise already as asked: the first drain's reason and time stay, so `nodes` keeps
  // saying since when the node has been out of service.
  return remember(index, c.client_id, c.client_seq, ApplyResult{});
}

// The job `c` names when the caller may change it: the job exists, is not terminal, and the
// caller owns it or is an admin. Otherwise the refusal to remember (`verb` names the action in
// it: "change the priority of").
template <typename C>
std::variant<JobRecord*, ApplyResult> JobTable::owned_job(const C& c, const char* verb) {
  const auto it = jobs_.find(c.job_id);
  if (it == jobs_.end()) return rejected(c.job_id, "There is no job " + c.job_id + ".");
  JobRecord& job = it->second;
  if (is_terminal(job.state)) {
    return rejected(c.job_id, "Job " + c.job_id + " has already " + to_string(job.state) + ".");
  }
  if (!c.is_admin && c.by_uid != job.spec.uid) {
    return denied(c.job_id, "uid " + std::to_string(c.by_uid) + " may not " + verb + " job " +
                                c.job_id + " of uid " + std::to_string(job.spec.uid) +
                                "; only its owner or an admin may.");
  }
  if (negative(c.at)) return rejected(c.job_id, "The command's time is before 1970.");
  return &job;
}

ApplyResult JobTable::apply_priority(Index index, const SetPriority& c) {
  if (std::optional<ApplyResult> seen = dedupe(clients_, c.client_id, c.client_seq)) {
    return *seen;
  }
  const auto answer = [&](ApplyResult result) {
    return remember(index, c.client_id, c.client_seq, std::move(result));
  };
  auto owned = owned_job(c, "change the priority of");
  if (ApplyResult* refusal = std::get_if<ApplyResult>(&owned)) return answer(*refusal);
  JobRecord& job = *std::get<JobRecord*>(owned);
  const std::int32_t old_priority = job.spec.priority;
  if (c.priority < kMinPriority || c.priority > kMaxPriority) {
    return answer(rejected(c.job_id, "Priority " + std::to_string(c.priority) + " is outside " +
                                         std::to_string(kMinPriority) + ".." +
                                         std::to_string(kMaxPriority) + "."));
  }
  if (!c.is_admin && c.priority > c.ceiling && c.priority > old_priority) {
    return answer(denied(
        c.job_id, "Priority " + std::to_string(c.priority) + " is above limits.priority_ceiling (" +
                      std::to_string(c.ceiling) + "); only an admin may raise a job above it."));
  }
  job.spec.priority = c.priority;
  add_event(job, JobEvent{c.at, job.round, job.state, job.state,
                          "priority " + std::to_string(old_priority) + " -> " +
                              std::to_string(c.priority) + " " + by_whom(c.by_uid, c.is_admin)});
  return answer(ApplyResult{ApplyCode::kApplied, c.job_id, "", false});
}

ApplyResult JobTable::apply_suspend(Index index, const SuspendJob& c) {
  if (std::optional<ApplyResult> seen = dedupe(clients_, c.client_id, c.client_seq)) {
    return *seen;
  }
  const auto answer = [&](ApplyResult result) {
    return remember(index, c.client_id, c.client_seq, std::move(result));
  };
  auto owned = owned_job(c, c.resume ? "resume" : "suspend");
  if (ApplyResult* refusal = std::get_if<ApplyResult>(&owned)) return answer(*refusal);
  JobRecord& job = *std::get<JobRecord*>(owned);
  const bool suspended = job.state == JobState::kSuspended;
  if (c.resume != suspended) {
    return answer(rejected(c.job_id, "Job " + c.job_id + " is " +
                                         (suspended ? "already suspended." : "not suspended.")));
  }
  if (c.resume) {
    change_state(index, job, JobState::kPending, c.at, "resumed " + by_whom(c.by_uid, c.is_admin));
  } else {
    change_state(index, job, JobState::kSuspended, c.at,
                 "suspended " + by_whom(c.by_uid, c.is_admin));
  }
  return answer(ApplyResult{ApplyCode::kApplied, c.job_id, "", false});
}

ApplyResult JobTable::apply_scale(Index /*index*/, const SetScale& c) {
  const auto it = jobs_.find(c.job_id);
  if (it == jobs_.end()) return rejected(c.job_id, "There is no job " + c.job_id + ".");
  JobRecord& job = it->second;
  const std::string what = "Cannot scale job " + c.job_id;
  if (is_terminal(job.state)) {
    return rejected(c.job_id, what + ": it has already " + to_string(job.state) + ".");
  }
  if (job.spec.scale != ScaleMode::kThroughput) {
    return rejected(c.job_id, what + ": its scale is not \"throughput\".");
  }
  if (c.round != job.round) {
    return rejected(c.job_id, what + " for round " + std::to_string(c.round) +
                                  ": the job is at round " + std::to_string(job.round) + ".");
  }
  const auto in_range = [&](std::uint32_t n) {
    return n >= job.spec.min_nodes && n <= job.spec.max_nodes;
  };
  const ScaleState& s = c.state;
  if ((s.size != 0 && !in_range(s.size)) || (s.good != 0 && !in_range(s.good))) {
    return rejected(c.job_id, what + ": size " + std::to_string(s.size) + " or good size " +
                                  std::to_string(s.good) + " is outside min_nodes " +
                                  std::to_string(job.spec.min_nodes) + " to max_nodes " +
                                  std::to_string(job.spec.max_nodes) + ".");
  }
  for (const auto& [nodes, rate] : s.rate) {
    if (!in_range(nodes) || !std::isfinite(rate) || rate < 0) {
      return rejected(c.job_id, what + ": its rate at " + std::to_string(nodes) +
                                    " nodes is not a finite number >= 0 for a size within "
                                    "min_nodes to max_nodes.");
    }
  }
  if (c.reason.size() > kMaxReasonBytes || negative(c.at)) {
    return rejected(c.job_id, what + ": the reason is too long or the time is before 1970.");
  }
  job.scale = s;
  add_event(job, JobEvent{c.at, job.round, job.state, job.state, "scale: " + c.reason});
  return ApplyResult{ApplyCode::kApplied, c.job_id, "", false};
}

ApplyResult JobTable::apply_history(const RecordHistory& c) {
  for (const JobPoint& p : c.points) {
    const bool rate_ok = !p.point.samples_per_s ||
                         (std::isfinite(*p.point.samples_per_s) && *p.point.samples_per_s >= 0);
    const bool loss_ok = !p.point.loss || std::isfinite(*p.point.loss);
    if (!rate_ok || !loss_ok || negative(p.point.at)) {
      return rejected(p.job_id, "Cannot record the history: a point of job " + p.job_id +
                                    " has a samples/s or loss that is not a finite number (or a "
                                    "negative rate), or a time before 1970.");
    }
  }
  for (const Incident& i : c.incidents) {
    if (!i.complete) {
      return rejected(i.job, "Cannot record the history: incident " + std::to_string(i.id) +
                                 " of job " + i.job + " is not complete.");
    }
  }
  for (const JobPoint& p : c.points) {
    const auto it = jobs_.find(p.job_id);
    if (it != jobs_.end()) add_point(it->second.series, p.point);
  }
  for (const Incident& i : c.incidents) history_.add(i);
  for (const ClusterEvent& e : c.events) history_.add(e);
  return ApplyResult{ApplyCode::kApplied, "", "", false};
}

void JobTable::add_event(JobRecord& job, JobEvent event) {
  job.events.push_back(std::move(event));
  if (job.events.size() > kMaxEventsPerJob) job.events.erase(job.events.begin());
}

void JobTable::change_state(Index index, JobRecord& job, JobState to, WallTime at,
                            std::string reason) {
  add_event(job, JobEvent{at, job.round, job.state, to, reason});
  job.state = to;
  job.state_since = at;
  job.reason = std::move(reason);
  if (is_terminal(to)) job.ended_index = index;
}

void JobTable::forget_old_terminal_jobs() {
  std::size_t terminal = 0;
  for (const auto& [id, job] : jobs_) terminal += is_terminal(job.state) ? 1 : 0;
  while (terminal > kMaxTerminalJobs) {
    auto oldest = jobs_.end();
    for (auto it = jobs_.begin(); it != jobs_.end(); ++it) {
      if (!is_terminal(it->second.state)) continue;
      if (oldest == jobs_.end() || it->second.ended_index < oldest->second.ended_index) oldest = it;
    }
    jobs_.erase(oldest);
    --terminal;
  }
}

}  // namespace elastic::rendezvous
