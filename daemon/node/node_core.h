// NodeCore: everything one daemon decides, with no socket, file descriptor, signal or clock of
// its own. elasticd's shell (node.h) and the simulator (tests/sim/node_core_process.h) run the
// same NodeCore: they gather inputs (envelopes from peers, dropped connections, failed sends,
// client calls, worker progress, the passing of time) and carry out its outputs (sends to
// peers, replies to calls). Worker processes go through the spawner::Launcher seam
// (spawner/launcher.h: fork/exec in elasticd, simulated workers in the simulator), Raft's
// durable state through consensus::RaftStore (files in elasticd, the simulator's storage map),
// the machine (its users, the daemon's uid and environment, worker log and checkpoint files)
// through the Host seam (host.h), time and seeds only through the `now` of each call and the
// Clock given at construction.
//
// What it owns and how they talk (one direction each, wired here and nowhere else):
//   Membership (SWIM)            <- membership envelopes, failed sends; -> member events
//   ConsensusHost (Raft)         <- Raft envelopes; applies to JobService (the state machine)
//   JobService                   <- client calls served on the leader (submit, cancel, jobs...)
//   RoundService: RoundLeader    <- the applied job table, the members; proposes to Raft
//   RoundService: RoundMember    <- RoundStart, job-tier and lease envelopes; -> the supervisor
//   JobSupervisor                <- rounds to run and stop; -> reports to the leader
// A pass of step() runs them in the order elasticd always has: deliver the envelopes, let
// membership tick, Raft tick, the leader half plan (when due), the member half tick, the
// supervisor reap and report, then the leader identity is refreshed and client calls that
// waited too long are answered or retried.
//
// Leader identity lives in one place, leader(): Raft's own knowledge on a voter that knows the
// leader, else the newest hint (the highest term stamped on any envelope, or the last
// redirect). Every consumer (round reports, forwarded calls, the envelope stamp, status) reads
// it from there.
//
// Client calls (call()): a request for the Raft leader (submit, cancel, jobs, job, events,
// voters) or for one named daemon (logs). Served by the local leader, else forwarded
// (kForwardRequest) to the leader this core believes in, else to the voters in turn; each
// attempt waits kForwardAttemptTimeout, the whole call `timeout`, then it is answered with one
// sentence saying who did not answer. A redirect moves it to the named leader. Retries keep the
// call's (client id, sequence), so the job table applies a retried submission once. The reply
// (exactly one per call) comes out in CoreOutput::replies.
//
// Trust: with transport.curve = false the sender of an envelope is whoever reached the port, so
// only membership gossip and forwarded calls are taken from other daemons, and forwarded calls
// are refused (their uid and admin claims are unproven); see node.h. Round reports are not taken
// either (a claimed sender could fail, reopen or end anyone's round); one that does not decode
// is still counted as malformed.
//
// Thread safety: none; one thread owns the core (elasticd's loop thread; the simulator's).
// Errors: hostile bytes are counted and dropped (never thrown); a Raft store that fails makes
// raft_failed() true and the shell must stop (exit 74).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "daemon/config/config.h"
#include "daemon/core/clock.h"
#include "daemon/core/result.h"
#include "daemon/core/time.h"
#include "daemon/membership/membership.h"
#include "daemon/node/consensus_host.h"
#include "daemon/node/forward_codec.h"
#include "daemon/node/host.h"
#include "daemon/node/job_service.h"
#include "daemon/node/job_supervisor.h"
#include "daemon/node/round_service.h"
#include "daemon/spawner/launcher.h"
#include "daemon/topology/topology.h"
#include "daemon/wire/messages.h"

namespace elastic::node {

// How long a client request may look for a Raft leader before it fails with a reason.
inline constexpr std::chrono::seconds kClientRequestTimeout{10};
// One forwarding attempt waits this long for an answer before trying another voter.
inline constexpr std::chrono::milliseconds kForwardAttemptTimeout{1000};

// Who this daemon is (node.h "Identity" says where each part comes from).
struct Identity {
  std::string name;
  std::uint64_t generation = 0;
  std::string address;  // where peers reach it
};

// One membership seed: its endpoint, and the name configured for it ("name@host:port"; "" when
// unnamed), which a CURVE transport needs to dial it.
struct SeedPeer {
  std::string endpoint;
  std::string name;
};

// What the shell opened for the core. `consensus` replicates into `jobs` (open it over *jobs).
struct CoreParts {
  std::unique_ptr<JobService> jobs;
  std::unique_ptr<ConsensusHost> consensus;
  std::unique_ptr<spawner::Launcher> launcher;
  topology::Plan plan;
  // Whether a TCP port is taken on this host (port_probe.h in elasticd; null: never checked).
  bool (*port_in_use)(std::uint16_t port) = nullptr;
  // Who the daemon runs as, its environment, users' accounts and the files of worker logs and
  // checkpoints (host.h: posix_host() in elasticd, memory in the simulator). Required; it must
  // outlive the core.
  Host* host = nullptr;
};

struct CoreInput {
  std::vector<wire::Envelope> envelopes;    // checked by the transport (version, cluster, size)
  std::vector<std::string> disconnected;    // peer names whose connection dropped
  std::vector<std::string> unreachable;     // addresses a membership send failed to
  std::vector<std::uint64_t> unsent_calls;  // calls whose forward (PeerSend::call) failed
};

struct PeerSend {
  std::string to;       // daemon name; "" for a seed not met yet (dial by address)
  std::string address;  // where to send it
  wire::Envelope envelope;
  // A membership message: a failure to send it goes back as CoreInput::unreachable.
  bool membership = false;
  // A client call's forward (non-zero): a failure to send it goes back as unsent_calls.
  std::uint64_t call = 0;
};

struct CallReply {
  std::uint64_t call = 0;
  ForwardOutcome outcome = ForwardOutcome::kOk;  // kOk: body is the reply JSON
  std::string body;                              // else one sentence
};

struct CoreOutput {
  std::vector<PeerSend> sends;
  std::vector<CallReply> replies;
  std::vector<membership::MemberEvent> member_events;  // already logged and recorded
  bool empty() const { return sends.empty() && replies.empty() && member_events.empty(); }
};

// Counters the shell's metrics and `nodes` show.
struct CoreCounters {
  std::uint64_t undecodable_bodies = 0;  // envelopes whose body did not decode
  // Forwarded calls refused because transport.curve = false (nobody vouches for them).
  std::uint64_t forwards_refused = 0;
  // Raft, round start, round report, job-tier and lease messages dropped because
  // transport.curve = false.
  std::uint64_t unauthenticated_peer_drops = 0;
};

class NodeCore {
 public:
  // `seed` feeds membership and the round service (Raft got its own when it was opened).
  NodeCore(Identity self, const config::DaemonConfig& config, CoreParts parts, Clock& clock,
           std::uint64_t seed);
  ~NodeCore();
  NodeCore(const NodeCore&) = delete;
  NodeCore& operator=(const NodeCore&) = delete;

  // Starts membership through `seeds` (this node's own entry already left out).
  CoreOutput join(TimePoint now, const std::vector<SeedPeer>& seeds);
  // One pass: `input` is delivered, then everything due at `now` runs (see the header comment).
  CoreOutput step(TimePoint now, CoreInput input);
  // The earliest time step() has work without new input.
  TimePoint next_deadline() const;

  // A client call (see the header comment); its reply comes out of a later step() (or this
  // call's output). `target` "" = the Raft leader, else the named daemon (node verbs).
  // `session` names the caller's session for exactly-once ("" for reads and node verbs); it must
  // be "<this daemon's name>/<generation>": a call forwarded to a leader is deduplicated there
  // as "<sender>/<generation>/<call id>", and the same call served here after a leader change
  // must carry the same client id, or the job table would apply it twice.
  std::uint64_t call(TimePoint now, ClientRequest request, const std::string& session,
                     const std::string& target, Duration timeout);
  // Output produced outside step() (by call(), drain(), on_progress()...), to carry out now.
  CoreOutput take_output();
  // Answers every waiting call with `sentence` (the daemon stops).
  void abandon_calls(const std::string& sentence);

  // Drain (SIGTERM): no new rounds, the leader is told, workers get SIGTERM. announce_leaving()
  // repeats the word to the leader (reports may be lost); kill_all() SIGKILLs what runs.
  void drain(TimePoint now);
  void announce_leaving();
  void kill_all(TimePoint now);
  bool draining() const { return draining_; }
  // Leaves membership gracefully (its goodbye sends come out in the returned output).
  CoreOutput leave(TimePoint now);
  // Stops every worker, blocking up to `grace` (the daemon exits).
  void shutdown(Duration grace);

  // A reload (reload.h): `config` replaces the running snapshot, and the parts that were handed
  // a value at start (submit limits, the launcher's limits) get the new one.
  void apply_config(const config::DaemonConfig& config);

  // A "progress" report from a local worker (JobSupervisor::on_progress).
  Status on_progress(TimePoint now, std::uint32_t uid, const std::string& request);
  // A node verb (logs, log_files) answered by this daemon; *denied on a refusal for rights.
  Result<std::string> serve_node_verb(const std::string& verb, const std::string& args,
                                      std::uint32_t uid, bool admin, bool* denied) const;

  // The leader this daemon believes in ("" = none known) and the term of that belief.
  std::string leader() const;
  std::uint64_t leader_term() const;
  bool leading() const { return consensus_->is_leader(); }
  bool raft_failed() const { return consensus_->failed(); }

  const Identity& self() const { return self_; }
  // The running configuration: one snapshot every part reads (config::Current).
  const config::DaemonConfig& config() const { return config_.get(); }
  const membership::Membership& membership() const { return *membership_; }
  const ConsensusHost& consensus() const { return *consensus_; }
  const JobService& jobs() const { return *jobs_; }
  const RoundService& rounds() const { return *rounds_; }
  // For tests and benchmarks: the leader half plans the jobs it finds settled anyway and counts
  // the plans that were not empty (RoundLeader::set_verify_skips).
  void set_verify_leader_skips(bool on) { rounds_->set_verify_skips(on); }
  const JobSupervisor& supervisor() const { return *supervisor_; }
  int launcher_fd() const { return supervisor_->fd(); }
  const CoreCounters& counters() const { return counters_; }
  // The address a member was last seen at ("" when unknown).
  std::string address_of(const std::string& name) const;

 private:
  struct Call {
    ClientRequest request;
    TimePoint deadline{};          // give up and answer with an error
    TimePoint attempt_deadline{};  // the current forward got no answer: try another voter
    bool in_flight = false;        // forwarded, or being served by the local leader
    std::string last_error;
    std::string target;      // a node verb's daemon; "" = the leader
    std::string attempt_to;  // whom the current attempt went to
  };

  void deliver(TimePoint now, std::vector<wire::Envelope>& envelopes);
  void on_membership(TimePoint now, membership::Effects effects);
  // The member list for the leader's pass: Membership::members() again only after a member
  // event, or kMembersRefresh after the last build (for changes that make no event, such as a
  // reaped record); a pass in between reuses it, so a 10,000-node list is not copied and
  // sorted for every message the leader receives.
  const std::vector<membership::MemberView>& leader_members(TimePoint now);
  void log_events(const std::vector<membership::MemberEvent>& events);
  void flush_consensus();
  // Carries the round service's orders to the supervisor and the supervisor's reports back,
  // and queues their sends (node_core.cc), until nothing new comes of it.
  void settle(TimePoint now);
  void observe_hint(const wire::Envelope& envelope);
  bool send_to(const std::string& name, wire::Envelope envelope);
  void send_at(const std::string& name, const std::string& address, wire::Envelope envelope);
  void dispatch(TimePoint now, std::uint64_t id);
  // The call's attempt did not go out or was turned away: `why` is what its final error quotes,
  // and expire_calls() dispatches it again at `at`.
  void retry_after(Call& call, TimePoint at, std::string why);
  // Whom the call's attempt was for could not be reached: the leader call forgets its hint.
  void retry_unreachable(TimePoint now, Call& call, std::string why);
  void finish_call(std::uint64_t id, ForwardOutcome outcome, std::string body);
  void expire_calls(TimePoint now);
  void on_forward_request(TimePoint now, const wire::Envelope& envelope);
  void on_forward_reply(TimePoint now, const wire::Envelope& envelope);

  Identity self_;
  config::Current config_;  // before the parts that read it
  Clock* clock_;
  std::unique_ptr<JobService> jobs_;
  std::unique_ptr<ConsensusHost> consensus_;
  std::unique_ptr<membership::Membership> membership_;
  std::unique_ptr<JobSupervisor> supervisor_;
  std::unique_ptr<RoundService> rounds_;
  std::vector<std::string> voters_;                // the configured initial voters
  std::map<std::string, std::string> seed_names_;  // seed endpoint -> configured name
  std::map<std::string, std::string> addresses_;   // member name -> last address
  // The leader hint: from envelopes' stamps (highest term wins) and redirects.
  std::string hint_;
  std::uint64_t hint_term_ = 0;
  std::map<std::pair<std::string, std::uint64_t>, membership::MemberState> logged_states_;
  std::map<std::uint64_t, Call> calls_;
  std::uint64_t next_call_ = 1;
  std::size_t next_voter_ = 0;
  bool draining_ = false;
  TimePoint last_now_{};
  std::vector<membership::MemberView> leader_members_;  // see leader_members()
  bool members_changed_ = true;
  TimePoint members_built_{};
  CoreOutput out_;
  CoreCounters counters_;
};

}  // namespace elastic::node
