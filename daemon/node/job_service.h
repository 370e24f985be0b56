// JobService: the job table as the daemon serves it. It is the replicated state machine that
// ConsensusHost applies committed entries to (rendezvous::JobTable underneath), and on the
// leader it turns client requests (elasticctl verbs, local or forwarded from another daemon)
// into Raft proposals or reads.
//
// Verbs served here (all need the leader; node.cc forwards them there):
//   submit {spec}            -> validates, stamps the submitter's uid/gid/user and the time,
//                               checks the per-user limits (SubmitLimits), proposes SubmitJob;
//                               replies {"ok":true,"job":{...}} once applied
//                               a non-admin's spec.priority above limits.priority_ceiling
//                               is refused here with one sentence
//   cancel {job}             -> proposes CancelJob (owner or admin only)
//   priority {job, priority} -> proposes SetPriority with the caller's uid, admin flag and
//                               limits.priority_ceiling (owner or admin; above the ceiling
//                               admin only); replies like cancel
//   suspend {job}, resume {job} -> propose SuspendJob (owner or admin only)
//   jobs                     -> {"ok":true,"jobs":[...]} from the leader's applied table
//   job {job}                -> {"ok":true,"job":{...,"events":[...]}}
// Each job object (rendezvous::to_json: "priority" and "preemptible" included) has, when the
// queue hook (set_queue_info) knows the job, "position" (its place among the queued jobs, only
// when > 0) and "waiting" (why it waits, only when not empty).
// A job's spec.env is shown to its owner, root and admins only; others get the job without it
// and "env_hidden": true (env often carries tokens).
//   events [{job, limit}]    -> {"ok":true,"events":[...job state changes, replicated...],
//                               "cluster":[...],"incidents":[...]} (the last two from the
//                               events source: the leader's own memory, see incidents.h)
//   voters [{action, node}]  -> the current voters; with action "add"/"remove" (root or
//                               control.admin_group only) one voter change, answered once applied
// Reads (jobs, job, events, drained, voters without action) are linearizable: each waits for
// ConsensusHost::read() (Raft's read index) before answering from the applied table, so a
// leader deposed by a partition that does not know it yet answers no stale data; when the
// read cannot be confirmed (leadership lost) the reply is kRedirect and the caller retries at
// the new leader. Mutating verbs are proposals and need no such step.
// Arguments are decoded by daemon/control/requests.h: a malformed request gets one error reply.
// No exception leaves serve() nor a deferred read's answer: one that escapes a handler is
// caught, logged, counted (handler_failures()) and answered as an error, so no request can
// stop the leader.
// Submit limits (control.max_active_jobs_per_user, control.submits_per_minute_per_user,
// control.submit_burst_per_user; 0 = none) hold for every uid but root. Active jobs count the
// applied table plus this leader's submits not yet applied; the rate is a token bucket per uid
// in this leader's memory (a new leader starts every user with a full burst).
// Retries: every mutating request carries (client id, client sequence); the table remembers the
// last sequence per client, so a request retried through a new leader is applied once.
//
// Thread safety: none; the node's loop thread owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "daemon/config/config.h"
#include "daemon/core/clock.h"
#include "daemon/core/time.h"
#include "daemon/membership/membership.h"
#include "daemon/node/consensus_host.h"
#include "daemon/node/forward_codec.h"
#include "daemon/node/host.h"
#include "daemon/node/incidents.h"

namespace elastic::rendezvous {
class JobTable;
}

namespace elastic::node {

struct ClientRequest {
  std::string verb;
  std::string args;  // the control request's JSON text
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
  bool admin = false;
  // Exactly-once: every client request is its own session "<daemon>/<generation>/<call id>"
  // with sequence 1, whether served where it arrived or forwarded, so its retries dedupe.
  std::string client_id;
  std::uint64_t client_seq = 1;
};

// Per-user submit limits; 0 = no limit. The node sets them from control.* at start and on reload.
struct SubmitLimits {
  std::uint32_t max_active_jobs_per_user = 0;
  std::uint32_t submits_per_minute_per_user = 0;
  std::uint32_t submit_burst_per_user = 0;  // >= 1 when submits_per_minute_per_user > 0
  bool operator==(const SubmitLimits&) const = default;
};
SubmitLimits submit_limits(const config::ControlConfig& control);

// What the scheduler says about a job that waits (rendezvous/scheduler.h, JobPlan): its place in
// the queue (1-based; 0 = not queued) and why it waits ("" = nothing holds it back).
struct QueueInfo {
  std::size_t position = 0;
  std::string reason;
  std::optional<double> samples_per_s;  // the leader's measure of the job's samples/s
};
// The leader's answer for one job id; nullopt when it has none (not the leader, or no plan yet).
using QueueInfoSource = std::function<std::optional<QueueInfo>(std::string_view job_id)>;

// kOk: `body` is the control reply JSON; kError: one sentence for the user (final); kRedirect:
// this node is not (or no longer) the leader, `body` says why and the caller tries elsewhere.
using ServeDone = std::function<void(ForwardOutcome outcome, std::string body)>;

class JobService : public StateMachine {
 public:
  // Submit times and job events are stamped with `clock`'s wall time (core/clock.h); user names
  // (a submitted job's `user`, refusals addressed to a person) come from `host`'s accounts
  // (host.h). Both must outlive it.
  explicit JobService(const Clock& clock = system_clock(), const Host& host = posix_host());
  ~JobService() override;
  std::string apply(consensus::Index index, std::string_view command) override;
  std::string snapshot() const override;
  Status restore(consensus::Index index, std::string_view bytes) override;
  // On the leader only. Calls done exactly once (maybe before returning; a read, later, once
  // the consensus confirmed it).
  void serve(TimePoint now, const ClientRequest& request, ConsensusHost& consensus, ServeDone done);
  const rendezvous::JobTable& table() const { return *table_; }
  // What the leader reads beside the table (both owned by the node core, which outlives this):
  // cluster membership, to check that a voter to add is an alive member, and the leader's
  // cluster events and incidents for the events verb. Null: neither is consulted.
  void set_views(const membership::Membership* members, const IncidentLog* incidents) {
    members_ = members;
    incidents_ = incidents;
  }
  std::size_t job_count() const;
  void set_submit_limits(const SubmitLimits& limits);
  // limits.priority_ceiling: the highest priority a non-admin may submit or set. The node sets it
  // at start and on reload.
  void set_priority_ceiling(std::int32_t ceiling) { priority_ceiling_ = ceiling; }
  // Where `jobs` and `job` read each job's queue position and waiting reason; unset (or empty):
  // the replies have neither field. Called on the loop thread while a reply is built.
  void set_queue_info(QueueInfoSource source) { queue_info_ = std::move(source); }
  // Requests whose handler threw (caught in serve(), answered with an error).
  std::uint64_t handler_failures() const { return handler_failures_; }

 private:
  const Clock* clock_;
  const Host* host_;
  void serve_request(TimePoint now, const ClientRequest& request, ConsensusHost& consensus,
                     const ServeDone& done);
  void serve_voters(TimePoint now, const ClientRequest& request, ConsensusHost& consensus,
                    const ServeDone& done);
  // Runs `answer` (which replies through `done`) once consensus.read() confirmed the read;
  // kRedirect with the reason when it cannot be.
  void after_read_index(TimePoint now, const ClientRequest& request, ConsensusHost& consensus,
                        const ServeDone& done, std::function<void()> answer);
  void answer_events(const std::string& only, std::size_t limit, const ServeDone& done);
  // Runs `handler`; an exception it throws is logged, counted and answered through `done`.
  void guarded(const ClientRequest& request, const ServeDone& done,
               const std::function<void()>& handler);
  // An Error naming the cap and its config key when `uid` may not submit now.
  Status admit_submit(TimePoint now, std::uint32_t uid);

  std::unique_ptr<rendezvous::JobTable> table_;
  const membership::Membership* members_ = nullptr;
  const IncidentLog* incidents_ = nullptr;
  SubmitLimits limits_;
  std::int32_t priority_ceiling_ = 0;
  QueueInfoSource queue_info_;
  struct Bucket {
    double tokens = 0;
    TimePoint at{};
  };
  static constexpr std::size_t kMaxSubmitBuckets = 4096;
  std::map<std::uint32_t, Bucket> buckets_;               // by uid
  std::map<std::uint32_t, std::size_t> pending_submits_;  // by uid: proposed, not yet applied
  std::uint64_t handler_failures_ = 0;
};

}  // namespace elastic::node
