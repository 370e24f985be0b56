// Node::render_metrics: everything the metrics endpoint exports, gathered at scrape time from
// the subsystems' own counters (nothing is sampled in between). Which daemon exports what:
//  - every daemon: node info and uptime, membership, its Raft view, transport and control
//    counters, its own worker processes and the checkpoints of jobs with workers here;
//  - voters (every daemon of a cluster without consensus.voters): the job table (jobs by state,
//    restarts and round per job) -- non-voters hold no copy of the table;
//  - the Raft leader only: rounds opened and the recovery histogram (RoundLeader's state
//    is volatile: a new leader starts both from zero, so Prometheus sees a counter reset).
#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "daemon/control/server.h"
#include "daemon/node/http_server.h"
#include "daemon/node/metrics.h"
#include "daemon/node/node.h"
#include "daemon/rendezvous/job_table.h"
#include "daemon/transport/zmq_transport.h"
#include "elastic/version.h"

namespace elastic::node {

namespace {

// Control verbs get their own label only while there are few of them, so a local client
// sending made-up verbs cannot grow the series without bound.
constexpr std::size_t kMaxControlVerbLabels = 32;

// The label of a wire message type; nullptr for numbers that name no type.
const char* message_type_name(wire::MsgType type) {
  switch (type) {
    case wire::MsgType::kPing:
      return "ping";
    case wire::MsgType::kAck:
      return "ack";
    case wire::MsgType::kPingReq:
      return "ping_req";
    case wire::MsgType::kNack:
      return "nack";
    case wire::MsgType::kPushPullDigest:
      return "push_pull_digest";
    case wire::MsgType::kPushPullState:
      return "push_pull_state";
    case wire::MsgType::kRaftVoteRequest:
      return "raft_vote_request";
    case wire::MsgType::kRaftVoteReply:
      return "raft_vote_reply";
    case wire::MsgType::kRaftAppendEntries:
      return "raft_append_entries";
    case wire::MsgType::kRaftAppendReply:
      return "raft_append_reply";
    case wire::MsgType::kRaftInstallSnapshot:
      return "raft_install_snapshot";
    case wire::MsgType::kRaftInstallSnapshotReply:
      return "raft_install_snapshot_reply";
    case wire::MsgType::kForwardRequest:
      return "forward_request";
    case wire::MsgType::kForwardReply:
      return "forward_reply";
    case wire::MsgType::kJobKeepalive:
      return "job_keepalive";
    case wire::MsgType::kJobKeepaliveAck:
      return "job_keepalive_ack";
    case wire::MsgType::kJobProbeRequest:
      return "job_probe_request";
    case wire::MsgType::kJobProbeReply:
      return "job_probe_reply";
    case wire::MsgType::kRoundStart:
      return "round_start";
    case wire::MsgType::kLeaseRequest:
      return "lease_request";
    case wire::MsgType::kLeaseGrant:
      return "lease_grant";
    case wire::MsgType::kRoundReport:
      return "round_report";
    case wire::MsgType::kJobLossNotice:
      return "job_loss_notice";
    case wire::MsgType::kControlRequest:
      return "control_request";
    case wire::MsgType::kControlReply:
      return "control_reply";
  }
  return nullptr;
}

// One counter family of per-type message counts: every named type (zeros too, so rates work
// from the first scrape) and "unknown" for numbers that name none, when there were any.
void message_family(
    MetricsText& m, const char* name, const char* help,
    const std::array<std::uint64_t, transport::TransportStats::kTypeSlots>& counts) {
  m.family(name, MetricType::kCounter, help);
  std::uint64_t unknown = 0;
  for (std::size_t slot = 0; slot < counts.size(); ++slot) {
    const char* type = message_type_name(static_cast<wire::MsgType>(slot));
    if (type == nullptr || slot == counts.size() - 1) {
      unknown += counts[slot];
      continue;
    }
    m.sample(static_cast<double>(counts[slot]), {{"type", type}});
  }
  if (unknown > 0) m.sample(static_cast<double>(unknown), {{"type", "unknown"}});
}

double as_double(std::uint64_t value) { return static_cast<double>(value); }

// Leader-only: RoundLeader's incidents and rounds (volatile leader memory, incidents.h).
void leader_families(MetricsText& m, const RoundService& rounds, bool leading) {
  m.family("elastic_rounds_opened_total", MetricType::kCounter,
           "Rounds this daemon committed as Raft leader since it became leader (leader only).");
  if (leading) m.sample(as_double(rounds.rounds_opened()));
  m.family("elastic_preemptions_total", MetricType::kCounter,
           "Jobs this daemon shrank or requeued as Raft leader to make room for a job of higher "
           "priority, since it became leader (leader only).");
  if (leading) m.sample(as_double(rounds.leader().preemptions()));
  m.family("elastic_jobs_queued", MetricType::kGauge,
           "Jobs waiting in the queue for nodes, at the leader's last scheduling pass (leader "
           "only).");
  if (leading) m.sample(as_double(rounds.leader().queued_jobs()));
  m.family("elastic_job_samples_per_second", MetricType::kGauge,
           "Samples per second the whole job trains on, from its rank 0's progress reports "
           "(elastic-trainer, or elastic_worker.step(samples=...)): the last full scale_window "
           "of its current round for a job with scale \"throughput\", else the current round so "
           "far (leader only).");
  if (leading) {
    for (const std::string& job : rounds.leader().measured_jobs()) {
      if (const std::optional<double> rate = rounds.leader().samples_per_second(job)) {
        m.sample(*rate, {{"job", job}});
      }
    }
  }
  m.family("elastic_recovery_seconds", MetricType::kHistogram,
           "Seconds from the first evidence of a failure to the job's first training step after "
           "recovery, per completed incident, by cause (node_left: a drained or stopped daemon, "
           "planned; leader only).");
  if (leading) {
    for (const auto& [cause, stats] : rounds.recovery_stats()) {
      m.histogram(RecoveryStats::kBuckets, stats.counts, stats.sum, {{"cause", cause}});
    }
  }
  m.family("elastic_recovery_incidents", MetricType::kGauge,
           "Recovery incidents the leader remembers, by whether they are complete (leader only).");
  if (leading) {
    std::uint64_t complete = 0, open = 0;
    for (const Incident& incident : rounds.incidents()) ++(incident.complete ? complete : open);
    m.sample(as_double(open), {{"complete", "false"}});
    m.sample(as_double(complete), {{"complete", "true"}});
  }
}

void checkpoint_families(MetricsText& m, const JobSupervisor& supervisor, std::int64_t now_ms) {
  const std::vector<CheckpointInfo> checkpoints = supervisor.checkpoints();
  m.family("elastic_checkpoint_age_seconds", MetricType::kGauge,
           "Seconds since the newest complete checkpoint of each job with workers on this node "
           "(absent until the job has one).");
  for (const CheckpointInfo& c : checkpoints) {
    if (c.step >= 0) m.sample(static_cast<double>(now_ms - c.at_ms) / 1000.0, {{"job", c.job}});
  }
  m.family("elastic_checkpoint_step", MetricType::kGauge,
           "Training step of the newest complete checkpoint of each job with workers on this "
           "node.");
  for (const CheckpointInfo& c : checkpoints) {
    if (c.step >= 0) m.sample(static_cast<double>(c.step), {{"job", c.job}});
  }
}

// An HTTP server's counters (http_server.h): answered, and refused or failed by reason.
void http_server_families(MetricsText& m, const HttpServerStats& e, std::string_view answered,
                          std::string_view answered_help, std::string_view rejected,
                          std::string_view rejected_help) {
  m.family(answered, MetricType::kCounter, answered_help);
  m.sample(as_double(e.served));
  m.family(rejected, MetricType::kCounter, rejected_help);
  m.sample(as_double(e.not_found), {{"reason", "not_found"}});
  m.sample(as_double(e.bad_requests), {{"reason", "bad_request"}});
  m.sample(as_double(e.unauthorized), {{"reason", "unauthorized"}});
  m.sample(as_double(e.failed), {{"reason", "failed"}});
  m.sample(as_double(e.timeouts), {{"reason", "timeout"}});
  m.sample(as_double(e.evicted), {{"reason", "too_many_connections"}});
}

}  // namespace

void Node::count_control_request(const std::string& verb) {
  const bool plain = !verb.empty() && verb.size() <= 32 &&
                     std::all_of(verb.begin(), verb.end(),
                                 [](char c) { return (c >= 'a' && c <= 'z') || c == '_'; });
  const auto known = control_requests_.find(verb);
  if (plain &&
      (known != control_requests_.end() || control_requests_.size() < kMaxControlVerbLabels)) {
    ++control_requests_[verb];
  } else {
    ++control_requests_other_;
  }
}

std::string Node::render_metrics(TimePoint now) const {
  MetricsText m;

  m.family("elastic_node_info", MetricType::kGauge,
           "Always 1; the labels name this daemon, its generation (restart count), version and "
           "cluster.");
  m.sample(1, {{"name", name_},
               {"generation", std::to_string(generation_)},
               {"version", kVersion},
               {"cluster", core_->config().node.cluster_id}});
  m.family("elastic_uptime_seconds", MetricType::kGauge, "Seconds since this daemon started.");
  m.sample(static_cast<double>(to_ms(now - started_)) / 1000.0);

  // Membership: this daemon's view of the cluster (SWIM).
  std::map<std::string, std::uint64_t> by_state = {
      {"alive", 0}, {"suspect", 0}, {"dead", 0}, {"left", 0}};
  std::uint32_t incarnation = 0;
  for (const membership::MemberView& member : core_->membership().members()) {
    ++by_state[wire::member_state_name(member.state)];
    if (member.name == name_ && member.generation == generation_) incarnation = member.incarnation;
  }
  m.family("elastic_members", MetricType::kGauge,
           "Cluster members this daemon knows, by state (itself included).");
  for (const auto& [state, count] : by_state) m.sample(as_double(count), {{"state", state}});
  m.family("elastic_membership_incarnation", MetricType::kGauge,
           "This daemon's SWIM incarnation (raised each time it refutes a suspicion).");
  m.sample(incarnation);
  const membership::Stats& s = core_->membership().stats();
  const std::pair<const char*, std::pair<const char*, std::uint64_t>> membership_counters[] = {
      {"elastic_membership_probes_total", {"Direct SWIM probes sent.", s.probes}},
      {"elastic_membership_probe_timeouts_total",
       {"Direct probes not answered within membership.probe_timeout.", s.probe_timeouts}},
      {"elastic_membership_indirect_probes_total",
       {"Indirect probes (ping-req) sent through other members.", s.indirect_probes}},
      {"elastic_membership_nacks_received_total",
       {"Lifeguard nacks received from relays of indirect probes.", s.nacks_received}},
      {"elastic_membership_suspicions_total",
       {"Members this daemon started suspecting.", s.suspicions}},
      {"elastic_membership_deaths_total", {"Members this daemon declared dead.", s.deaths}},
      {"elastic_membership_refutations_total",
       {"Times this daemon refuted a suspicion of itself.", s.refutations}},
  };
  for (const auto& [name, counter] : membership_counters) {
    m.family(name, MetricType::kCounter, counter.first);
    m.sample(as_double(counter.second));
  }
  m.family("elastic_membership_local_health", MetricType::kGauge,
           "Lifeguard local health multiplier (0 = healthy; higher = this daemon is slow).");
  m.sample(s.local_health);

  // Consensus.
  const RaftStatus raft = core_->consensus().status();
  const std::string leader = core_->leader();
  m.family("elastic_raft_voter", MetricType::kGauge, "1 when this daemon is a Raft voter.");
  m.sample(raft.voter ? 1 : 0);
  m.family("elastic_raft_leader", MetricType::kGauge,
           "1 when this daemon is the Raft leader (the cluster leader).");
  m.sample(core_->consensus().is_leader() ? 1 : 0);
  m.family("elastic_raft_leader_known", MetricType::kGauge,
           "1 when this daemon knows a leader (from Raft on a voter, from gossip elsewhere).");
  m.sample(leader.empty() ? 0 : 1);
  m.family("elastic_raft_term", MetricType::kGauge,
           "Raft term: a voter's own; elsewhere the term of the leader hint it gossips.");
  m.sample(as_double(raft.voter ? raft.term : core_->leader_term()));
  if (raft.voter) {
    m.family("elastic_raft_commit_index", MetricType::kGauge,
             "Index of the newest committed Raft log entry (voters only).");
    m.sample(as_double(raft.commit_index));
  }

  // The job table (voters hold a copy).
  if (raft.voter) {
    std::array<std::uint64_t, rendezvous::kMaxJobState + 1> jobs{};
    for (const auto& [id, job] : core_->jobs().table().jobs())
      ++jobs[static_cast<std::size_t>(job.state)];
    m.family("elastic_jobs", MetricType::kGauge,
             "Jobs in the job table by state (terminal jobs while the table retains them; "
             "voters only).");
    for (std::size_t state = 0; state < jobs.size(); ++state) {
      m.sample(as_double(jobs[state]),
               {{"state", rendezvous::to_string(static_cast<rendezvous::JobState>(state))}});
    }
    m.family("elastic_job_restarts_total", MetricType::kCounter,
             "Restarts (worker-failure rounds) each job has used (voters only).");
    for (const auto& [id, job] : core_->jobs().table().jobs()) {
      m.sample(job.restarts, {{"job", id}});
    }
    m.family("elastic_job_round", MetricType::kGauge,
             "Current rendezvous round of each job (0 before its first; voters only).");
    for (const auto& [id, job] : core_->jobs().table().jobs()) {
      m.sample(as_double(job.round), {{"job", id}});
    }
  }
  leader_families(m, core_->rounds(), core_->consensus().is_leader());
  m.family("elastic_stale_round_starts_total", MetricType::kCounter,
           "Round starts this daemon ignored as stale (an older round or a deposed leader's).");
  m.sample(as_double(core_->rounds().stale_starts()));

  // Workers on this node.
  std::map<std::string, std::uint64_t> workers = {{"running", 0}, {"stopping", 0}, {"exited", 0}};
  for (const WorkerRow& w : core_->supervisor().workers()) ++workers[w.state];
  m.family("elastic_workers", MetricType::kGauge, "Worker processes on this node by state.");
  for (const auto& [state, count] : workers) m.sample(as_double(count), {{"state", state}});
  m.family("elastic_worker_slots", MetricType::kGauge,
           "Worker slots (GPUs, or CPU slots) this node offers.");
  m.sample(core_->supervisor().slots());
  m.family("elastic_worker_reformations_total", MetricType::kCounter,
           "Rounds offered to this node's running workers over their worker channels: joined in "
           "place, or not joined within rendezvous.reform_timeout (the workers were restarted).");
  m.sample(as_double(core_->supervisor().live_reforms()), {{"outcome", "in_place"}});
  m.sample(as_double(core_->supervisor().live_fallbacks()), {{"outcome", "restarted"}});
  m.family("elastic_hung_workers_total", MetricType::kCounter,
           "Workers this daemon found hung (hang_timeout) and ended.");
  m.sample(as_double(core_->supervisor().hung_workers()));
  checkpoint_families(m, core_->supervisor(), clock_->wall_ms());
  m.family("elastic_progress_reports_total", MetricType::kCounter,
           "Progress reports of this node's workers: forwarded to the leader, or coalesced "
           "(replaced by a newer one of the same job and kind within 100 ms, never sent).");
  m.sample(as_double(core_->supervisor().progress_forwarded()), {{"outcome", "forwarded"}});
  m.sample(as_double(core_->supervisor().progress_coalesced()), {{"outcome", "coalesced"}});

  // Transport.
  const transport::TransportStats t = transport_->stats();
  message_family(m, "elastic_messages_sent_total",
                 "Messages to other daemons accepted for sending, by message type.",
                 t.sent_by_type);
  message_family(m, "elastic_messages_received_total",
                 "Messages from other daemons received and decoded, by message type.",
                 t.received_by_type);
  m.family("elastic_messages_dropped_total", MetricType::kCounter,
           "Inbound messages dropped, by reason.");
  const std::pair<const char*, std::uint64_t> drops[] = {
      {"malformed", t.dropped_malformed},
      {"oversized", t.dropped_oversized},
      {"wrong_version", t.dropped_wrong_version},
      {"wrong_cluster", t.dropped_wrong_cluster},
      {"unauthenticated", t.dropped_unauthenticated},
      {"undecodable", core_->counters().undecodable_bodies},
      {"malformed_report", core_->rounds().malformed_reports()},
      {"forward_without_curve", core_->counters().forwards_refused},
      {"peer_without_curve", core_->counters().unauthenticated_peer_drops},
  };
  for (const auto& [reason, count] : drops) m.sample(as_double(count), {{"reason", reason}});
  m.family("elastic_send_failures_total", MetricType::kCounter,
           "Messages that could not be sent (peer unreachable, queue full, too large).");
  m.sample(as_double(t.send_failures));
  m.family("elastic_peer_disconnects_total", MetricType::kCounter,
           "Connections to peers that dropped after their handshake (a peer process died).");
  m.sample(as_double(t.disconnects));
  m.family("elastic_open_peers", MetricType::kGauge,
           "Outbound peer connections open now (closed after transport.idle_peer_close).");
  m.sample(as_double(transport_->open_peers()));
  m.family("elastic_inbound_connections", MetricType::kGauge,
           "Inbound transport connections open now (per address at most "
           "transport.max_connections_per_address).");
  m.sample(as_double(t.connections_open));
  m.family("elastic_inbound_connections_refused_total", MetricType::kCounter,
           "Inbound transport connections shut down when accepted: their address already held "
           "transport.max_connections_per_address.");
  m.sample(as_double(t.connections_refused));
  m.family("elastic_transport_accept_failures_total", MetricType::kCounter,
           "Failed accepts on the transport port (EMFILE: the daemon is out of file descriptors).");
  m.sample(as_double(t.accept_failures));
  m.family("elastic_transport_accept_pauses_total", MetricType::kCounter,
           "Times the transport port stopped listening for a while after a failed accept, "
           "dropping its inbound connections (peers reconnect).");
  m.sample(as_double(t.accept_pauses));

  // Control socket and this endpoint.
  m.family("elastic_control_requests_total", MetricType::kCounter,
           "Control-socket requests this daemon handled, by verb (\"other\" for unknown verbs "
           "beyond the first few).");
  for (const auto& [verb, count] : control_requests_) m.sample(as_double(count), {{"verb", verb}});
  if (control_requests_other_ > 0) {
    m.sample(as_double(control_requests_other_), {{"verb", "other"}});
  }
  m.family("elastic_control_connections", MetricType::kGauge,
           "Control-socket connections open now.");
  m.sample(as_double(control_->connection_count()));
  const control::ServerStats& c = control_->stats();
  m.family("elastic_control_rejected_total", MetricType::kCounter,
           "Control requests and connections refused or closed for what the client did, by "
           "reason (too_many_connections: the global or the per-uid cap; request_timeout: no "
           "whole request in time; remote_refused: a remote request for an unknown user, not "
           "JSON, or beyond the pending limit).");
  m.sample(as_double(c.too_many_connections), {{"reason", "too_many_connections"}});
  m.sample(as_double(c.oversized), {{"reason", "oversized"}});
  m.sample(as_double(c.malformed), {{"reason", "malformed"}});
  m.sample(as_double(c.request_timeout), {{"reason", "request_timeout"}});
  m.sample(as_double(control_->remote_refused()), {{"reason", "remote_refused"}});
  m.family("elastic_control_accept_errors_total", MetricType::kCounter,
           "accept() failures on the control socket (EMFILE, ENFILE: out of descriptors; the "
           "waiting connection is answered and closed, or listening pauses for 1 s).");
  m.sample(as_double(c.accept_errors));
  m.family("elastic_handler_errors_total", MetricType::kCounter,
           "Requests and reports whose handler failed with an exception, caught and answered "
           "with an error (a bug to report: the daemon went on), by where.");
  m.sample(as_double(c.handler_errors), {{"where", "control"}});
  m.sample(as_double(core_->jobs().handler_failures()), {{"where", "job_service"}});
  if (metrics_) {
    http_server_families(m, metrics_->stats(), "elastic_metrics_scrapes_total",
                         "Scrapes of this endpoint answered (this one included).",
                         "elastic_metrics_rejected_total",
                         "HTTP requests and connections of this endpoint refused, by reason.");
  }
  if (dashboard_) {
    http_server_families(m, dashboard_->stats(), "elastic_dashboard_requests_total",
                         "Dashboard requests answered with 200 (pages, files and /api reads).",
                         "elastic_dashboard_rejected_total",
                         "Dashboard requests and connections refused or failed, by reason.");
  }
  return m.take();
}

}  // namespace elastic::node
