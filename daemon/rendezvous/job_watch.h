// JobWatch: the fast job tier. The daemons of one running round watch each other directly and
// declare a round peer lost within about a second, while cluster membership (SWIM) stays slow
// and conservative.
//
// A pure state machine (STYLE.md rule 1): no sockets, clocks, threads or files. The daemon (and
// tests/sim/job_watch_process.h) feeds it the time, inbound messages and transport/worker
// events, and carries out the Effects it returns. One JobWatch per (daemon, job); set_round()
// moves it to the job's next round.
//
// Protocol (timings from JobWatchConfig):
//  - every keepalive_interval a JobKeepalive{job, term, round, probe = 0} goes to every round
//    peer not yet declared lost; nobody answers it: every peer sends its own, so silence is
//    seen from both sides;
//  - any message of the current round from a peer's current generation is evidence that it is
//    alive: it resets the peer's silence timer and clears a suspicion;
//  - a peer silent for peer_timeout, or reported disconnected by the transport, is suspected:
//    this node pings it directly (JobKeepalive{probe = n}, answered by JobKeepaliveAck{n}) and
//    asks `indirect_probes` random other live peers to do the same (JobProbeRequest); a helper
//    that hears the target within helper_timeout answers JobProbeReply{alive = true}, else
//    {alive = false}. The attempt is repeated once halfway through the window with fresh
//    helpers. A peer still unheard (directly or through a helper) confirm_window after the
//    suspicion began is declared lost;
//  - a worker-exit report that the peer's own daemon sent (the caller checks the source) is a
//    declaration at once, not a suspicion; so is a message from a newer generation of the peer
//    (it restarted, so the generation in the round is gone);
//  - messages of another job, term or round, or from an older generation, are dropped (stale);
//  - each peer is declared at most once per round (PeerLost), and a lost peer is neither
//    pinged nor used as a helper again in that round;
//  - confirm_peers() (a local worker of the round failed): every peer not declared lost gets a
//    direct probe at once; when each has acknowledged a probe sent at or after that moment, the
//    effects say so (peers_confirmed): every daemon of the round was alive after the failure,
//    so the failure is not a peer's loss seen early (its workers break on the dead peer's
//    connections before the loss is declared). A peer declared lost meanwhile, or a new round,
//    ends the confirmation without it. Not in a large round: a probe of every peer per failed
//    worker is O(n) messages, O(n^2) when a whole job's workers fail together (a plain job whose
//    peer died); there the leader waits its failure grace instead, and the ring's watchers
//    declare a dead peer within it.
// Worst case from a silent crash to a declaration: peer_timeout + confirm_window + latency
// (the peer's last keepalive may have left just before it died).
//
// Large rounds (more than JobWatchConfig::watch_all_up_to peers): keepalives to every peer
// would cost O(n) messages per daemon per interval (a 1,024-daemon round at 200 ms: 5,000 a
// second each). Instead every member of the round computes the same ring, a shuffle of the
// members by a hash of (job, term, round, name, generation), so it differs from round to round;
// a member sends its periodic keepalives only to the `watchers` members after it on the ring
// (its watchers), and only the `watchers` members before it (the peers it watches) have a
// silence timer here. Every member is watched by exactly `watchers` others and each daemon
// sends `watchers` keepalives per interval, whatever the round's size. Suspicion, direct and
// indirect probes (helpers are any live members) and the declaration are as above. A member
// that declares a peer from its own evidence (silent, restarted) sends a JobLossNotice to every
// other live member at once (one burst per loss, not a steady load); a member that learns a
// loss from a notice declares it too (reason kReported) and forwards the notice to the live
// members it sends keepalives to and to `notice_forwards` random live members, so a survivor
// misses the loss only if the first-hand copy and those of its ring predecessors and of random
// learners are all lost (at 5% loss, about once in a thousand losses of a 1,024-daemon round). A notice about this daemon itself, another generation or another round is ignored. In
// rounds up to watch_all_up_to peers everything is as before: keepalives to all, no notices.
//
// Thread safety: none; one owner calls everything. Randomness (helper choice) comes only from
// the seeded Rng. Errors: set_round() with a round not newer than the current one is refused
// with an Error (a stale RoundStart); messages are never errors, stale ones are counted.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "daemon/core/result.h"
#include "daemon/core/rng.h"
#include "daemon/core/time.h"

namespace elastic::rendezvous {

// ---------------------------------------------------------------------------------------------
// Wire structs (daemon/rendezvous/job_codec.h encodes them). Every one names the round it is
// about, so a receiver drops messages of any other (job, term, round).

struct JobRoundRef {
  std::string job;
  std::uint64_t term = 0;   // the leader term that created the round (its fencing token)
  std::uint64_t round = 0;  // the job's round number
  bool operator==(const JobRoundRef&) const = default;
};

// Periodic keepalive (probe = 0, never answered) or a direct probe (probe != 0, answered by a
// JobKeepaliveAck with the same number).
struct JobKeepalive {
  JobRoundRef ref;
  std::uint64_t probe = 0;
  bool operator==(const JobKeepalive&) const = default;
};

struct JobKeepaliveAck {
  JobRoundRef ref;
  std::uint64_t probe = 0;
  bool operator==(const JobKeepaliveAck&) const = default;
};

// "Probe this round peer for me": the receiver pings `target` and answers a JobProbeReply.
struct JobProbeRequest {
  JobRoundRef ref;
  std::uint64_t probe = 0;  // the requester's number, echoed in the reply
  std::string target;
  std::uint64_t target_generation = 0;
  bool operator==(const JobProbeRequest&) const = default;
};

struct JobProbeReply {
  JobRoundRef ref;
  std::uint64_t probe = 0;
  std::string target;
  std::uint64_t target_generation = 0;
  bool alive = false;  // false: the target stayed silent for the helper's timeout
  bool operator==(const JobProbeReply&) const = default;
};

// "`target` is lost for this round": sent by a member of a large round that declared it (see
// the protocol above), and forwarded by a few of those that learn it this way.
struct JobLossNotice {
  JobRoundRef ref;
  std::string target;
  std::uint64_t target_generation = 0;
  bool operator==(const JobLossNotice&) const = default;
};

using JobMessage = std::variant<JobKeepalive, JobKeepaliveAck, JobProbeRequest, JobProbeReply,
                                JobLossNotice>;

// ---------------------------------------------------------------------------------------------
// The state machine

struct JobWatchConfig {
  // How often every round peer gets a keepalive. 200 ms: small messages on connections that
  // already exist; eight peers cost 40 messages/s per daemon.
  Duration keepalive_interval = std::chrono::milliseconds(200);
  // Silence after which a peer is suspected: three keepalive intervals, so one or two lost
  // keepalives (5% loss: 1 in 400 / 8000) never start a suspicion.
  Duration peer_timeout = std::chrono::milliseconds(600);
  // From suspicion to declaration. Two keepalive intervals: two more keepalives, two direct
  // pings and 2 * indirect_probes helper probes must all fail before a live peer is declared.
  Duration confirm_window = std::chrono::milliseconds(400);
  // How long a helper waits for the target before answering alive = false.
  Duration helper_timeout = std::chrono::milliseconds(150);
  // Helpers asked per probe attempt (two attempts per suspicion).
  int indirect_probes = 3;
  // Extra silence allowed at the start of a round to a peer that was not in the round watched
  // before (a joiner, or a restarted daemon's new generation): its RoundStart may come one
  // leader resend (1 s) after the others', when the first delivery met a connection still being
  // made, and it sends nothing for the round before that.
  Duration joiner_grace = std::chrono::seconds(1);
  // Large rounds (see the protocol): a round of more than watch_all_up_to peers (this daemon not
  // counted) watches through the ring, each member watched by `watchers` others, and spreads
  // declarations with JobLossNotices, each learner forwarding a copy to its watchers and
  // `notice_forwards` to random members. Three
  // watchers at 200 ms: 15 keepalives sent and 15 received per daemon per second.
  std::size_t watch_all_up_to = 8;
  int watchers = 3;
  int notice_forwards = 2;

  // keepalive_interval and peer_timeout from the daemon's RendezvousConfig; confirm_window is
  // two thirds of peer_timeout and helper_timeout three eighths of confirm_window (the
  // defaults above for 200 ms / 600 ms).
  static JobWatchConfig from(Duration keepalive_interval, Duration peer_timeout);
  // An Error naming the first bad field (non-positive durations, helper_timeout not below
  // confirm_window, indirect_probes < 0, watchers < 1 or above watch_all_up_to, notice_forwards
  // < 0).
  Status validate() const;
};

struct JobPeer {
  std::string name;
  std::uint64_t generation = 0;
  std::string address;
  bool operator==(const JobPeer&) const = default;
};

enum class PeerEventKind {
  kDisconnected,  // the transport lost its connection to the peer (suspect it)
  kWorkerExited,  // the peer's own daemon reported that its workers of this round exited
};

enum class LostReason {
  kSilent,        // suspected (silence or disconnect) and unconfirmed through the window
  kWorkerExited,  // its daemon reported its workers gone
  kRestarted,     // a newer generation of it spoke: the round's generation is gone
  kReported,      // a large round's JobLossNotice: another member declared it
};
const char* to_string(LostReason reason);

// A declaration: `peer` is lost for this round of the job. Emitted at most once per peer per
// round.
struct PeerLost {
  std::string job;
  std::uint64_t term = 0;
  std::uint64_t round = 0;
  std::string peer;
  std::uint64_t generation = 0;
  LostReason reason = LostReason::kSilent;
  bool operator==(const PeerLost&) const = default;
};

struct JobOutgoing {
  std::string to;  // peer name
  std::string to_address;
  JobMessage message;
};

struct JobWatchEffects {
  std::vector<JobOutgoing> sends;
  std::vector<PeerLost> lost;
  // The round whose peers all answered a confirm_peers() probe (see the protocol above).
  std::optional<JobRoundRef> peers_confirmed;
};

struct JobWatchStats {
  std::uint64_t keepalives_sent = 0;
  std::uint64_t messages_received = 0;
  std::uint64_t stale_dropped = 0;  // another job, term, round or an older generation
  std::uint64_t suspicions = 0;
  std::uint64_t suspicions_cleared = 0;
  std::uint64_t direct_probes = 0;
  std::uint64_t indirect_requests = 0;  // JobProbeRequests this node sent
  std::uint64_t helper_probes = 0;      // JobProbeRequests this node served
  std::uint64_t declared = 0;
  std::uint64_t notices_sent = 0;      // JobLossNotices sent (first-hand and forwarded)
  std::uint64_t notices_received = 0;  // JobLossNotices that were news (the peer was not lost)
};

class JobWatch {
 public:
  // `self` is this daemon's name and generation; `seed` feeds the helper choice.
  JobWatch(std::string self, std::uint64_t self_generation, const JobWatchConfig& config,
           std::uint64_t seed);
  // Movable, not copyable: it keeps pointers into its own peer map (a moved map keeps its nodes).
  JobWatch(const JobWatch&) = delete;
  JobWatch& operator=(const JobWatch&) = delete;
  JobWatch(JobWatch&&) noexcept = default;
  JobWatch& operator=(JobWatch&&) noexcept = default;

  // Starts watching a round: `peers` may include this daemon (skipped). The first keepalives
  // go out at once and every peer counts as heard at `now`, a joiner (not in the round watched
  // before, by name and generation) at `now` + joiner_grace. A round that is not newer than the
  // current one (same job; round number, then term) is refused. A different job is a caller
  // bug and aborts.
  Status set_round(TimePoint now, const std::string& job, std::uint64_t term, std::uint64_t round,
                   const std::vector<JobPeer>& peers, JobWatchEffects& out);
  // Stops watching (the round ended or this daemon left it); every later message is stale.
  void clear_round();

  void on_message(TimePoint now, const std::string& from, std::uint64_t from_generation,
                  const JobMessage& message, JobWatchEffects& out);
  void on_peer_event(TimePoint now, const std::string& peer, PeerEventKind kind,
                     JobWatchEffects& out);
  // A local worker of the watched round failed: probe every peer not declared lost now and
  // report peers_confirmed once all of them answered (at once when there is none). Ends a
  // confirmation still open. Without a round, or in a large round, nothing happens.
  void confirm_peers(JobWatchEffects& out);
  // Runs every timer that is due at `now`.
  void tick(TimePoint now, JobWatchEffects& out);
  // When tick() next has something to do (kNever without a round). It may be earlier than
  // necessary after on_message (a harmless early tick); after tick it is later than `now`.
  TimePoint next_deadline() const { return next_deadline_; }

  bool active() const { return active_; }
  const JobRoundRef& round() const { return ref_; }
  bool suspected(const std::string& peer) const;
  bool lost(const std::string& peer) const;
  // Large rounds: whether this daemon watches `peer`'s silence, and whether it sends `peer`
  // keepalives (so `peer` watches it). Both true for every peer of a small round.
  bool watches(const std::string& peer) const;
  bool watched_by(const std::string& peer) const;
  bool large_round() const { return peers_.size() > config_.watch_all_up_to; }
  const JobWatchStats& stats() const { return stats_; }
  const JobWatchConfig& config() const { return config_; }

 private:
  struct Peer {
    JobPeer info;
    TimePoint last_heard{};
    bool lost = false;
    // Suspicion: a deadline, the next probe attempt and the attempts made.
    bool suspected = false;
    TimePoint suspected_at{};
    TimePoint retry_at = kNever;
    int attempts = 0;
    // confirm_peers(): the first probe number sent for the open confirmation (0: none open or
    // this peer answered it already).
    std::uint64_t confirm_probe = 0;
    // Large rounds: this daemon watches its silence / sends it keepalives (both in small ones).
    bool watched = true;
    bool watcher = true;
    bool timed = false;  // in timed_
  };
  // A JobProbeRequest this node serves: its own probe number maps to the requester's.
  struct Relay {
    std::string requester;
    std::uint64_t requester_probe = 0;
    std::string target;
    std::uint64_t target_generation = 0;
    TimePoint expires{};
  };

  const Peer* find(const std::string& peer) const;  // nullptr: not a peer of the round
  void send(JobWatchEffects& out, const Peer& to, JobMessage message);
  void send_keepalives(JobWatchEffects& out);
  void heard(TimePoint now, Peer& p);
  void suspect(TimePoint now, Peer& p, JobWatchEffects& out);
  void probe_attempt(TimePoint now, Peer& p, JobWatchEffects& out);
  void declare(Peer& p, LostReason reason, JobWatchEffects& out);
  void build_ring();
  void index_peers();
  void spread_loss(const Peer& lost, LostReason reason, JobWatchEffects& out);
  // Moves min(k, size) distinct random entries of `from` (the seeded Rng) to its front; returns
  // how many.
  std::size_t pick_random(std::vector<const Peer*>& from, int k);
  void answer_relays_for(const std::string& target, JobWatchEffects& out);
  void recompute_deadline();
  void lower_deadline(TimePoint t);
  void end_confirmation();
  void finish_confirmation(JobWatchEffects& out);

  std::string self_;
  std::uint64_t self_generation_ = 0;
  JobWatchConfig config_;
  Rng rng_;
  JobWatchStats stats_;

  bool active_ = false;
  JobRoundRef ref_;
  std::map<std::string, Peer> peers_;  // ordered: iteration (and so the trace) is stable
  // What tick() and the deadline look at, so their work per call does not grow with a large
  // round: the watched peers (every peer of a small round) in name order, then any other that
  // was suspected (a disconnect), in the order of its suspicion. And the peers keepalives go to.
  std::vector<Peer*> timed_;
  std::vector<Peer*> keepalive_to_;
  std::map<std::uint64_t, Relay> relays_;
  std::uint64_t next_probe_ = 1;  // probe numbers; 0 marks a periodic keepalive
  bool confirming_ = false;       // a confirm_peers() is open
  TimePoint next_keepalive_ = kNever;
  TimePoint next_deadline_ = kNever;
};

}  // namespace elastic::rendezvous
