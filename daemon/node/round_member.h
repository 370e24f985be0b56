// RoundMember: a member daemon's half of round handling; every daemon runs one (the leader's
// half is round_leader.h; RoundService, round_service.h, composes the two).
//
//  - RoundStart (kRoundStart, either form of round_codec.h: a delta resolves against the job's
//    round this daemon holds) passes the RoundFence (a stale round or a deposed leader's copy
//    is ignored); a member of the round asks the job supervisor to run its workers (kRun order)
//    and watches its peers with JobWatch (keepalives, indirect probes, kJobKeepalive..
//    kJobProbeReply, codec in rendezvous/job_codec.h), and reports a declared loss to the
//    leader (peer_lost, repeated each second while the round stands). A RoundStart of a job
//    that ended or is recovering, or of a round without this daemon, stops its workers (kStop).
//  - each RoundStart of a round it is a member of is answered at once with "round_received"
//    (before the workers run): the leader resends a start quickly only to members that did not
//    answer, and sends them the next round as a delta.
//  - while in an active round it holds a lease (LeaseHolder) renewed from the leader that sent
//    the round (kLeaseRequest / kLeaseGrant); when the lease runs out it logs, marks its rounds
//    fenced and stops their workers, and tells the leader, as this node's worker failure
//    (repeated each second while the round stands), so the round is re-planned.
//  - the job supervisor's reports (round_ack through acknowledge(), worker_failed,
//    workers_done, workers_stopped, progress through report_for()) go to the leader of their
//    job's round as kRoundReport messages (round_report.h); this node's slots (node_info) to the
//    leader it believes in (set_leader()), at once when it changes and every kNodeInfoResend;
//    node_leaving when it drains (announce_leaving()). peer_lost carries last_heard_ms (the
//    wall time of the lost peer's last job-tier message here) and worker_failed at_ms, for
//    incidents (incidents.h). After a local worker_failed the job tier probes every round peer;
//    once all answered, the failure goes again with peers_alive (round_report.h).
//
// Output: take_sends() (in the order it was made; a message to this daemon itself is for its
// leader half, round_send.h) and take_orders() for the job supervisor.
//
// Thread safety: none; the node's loop thread owns it. Errors: a message that does not decode
// is dropped (a RoundStart logged at debug).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "daemon/config/config.h"
#include "daemon/core/clock.h"
#include "daemon/core/time.h"
#include "daemon/node/round_codec.h"
#include "daemon/node/round_report.h"
#include "daemon/node/round_send.h"
#include "daemon/rendezvous/fencing.h"
#include "daemon/rendezvous/job_watch.h"
#include "daemon/rendezvous/lease.h"
#include "daemon/wire/messages.h"

namespace elastic::node {

// What a member knows of one job's round (for status and tests).
struct MemberRound {
  std::string job;
  std::uint64_t term = 0;
  std::uint64_t round = 0;
  std::uint32_t first_rank = 0;
  std::uint32_t slots = 0;
  std::uint64_t world = 0;
  std::string store_endpoint;
  bool fenced = false;              // the lease ran out: the workers must not run
  rendezvous::JobWatchStats watch;  // the job tier's counters for this round
};

class RoundMember {
 public:
  // What the member asks of the job supervisor. kRun: a round naming this daemon passed the
  // fence (when its workers run, the caller acknowledges it: acknowledge()). kStop: the job has
  // no round for this daemon any more (ended, recovering, not a member, fenced); `final` when
  // it will have none again here (it ended, or its new round leaves this daemon out).
  struct WorkerOrder {
    enum class Kind { kRun, kStop } kind = Kind::kRun;
    std::optional<RoundStart> start;  // kRun
    std::string job;                  // kStop
    bool graceful = false;
    std::string why;
    bool final = false;
  };

  // Wall times it stamps on reports come from `clock`. `config` is read where used (a reload
  // replaces it); it must outlive this object. `seed` seeds each round's JobWatch.
  RoundMember(std::string self, std::uint64_t generation, const config::Current& config,
              std::uint64_t seed, const Clock& clock);

  std::vector<RoundSend> take_sends() { return std::exchange(sends_, {}); }
  std::vector<WorkerOrder> take_orders() { return std::exchange(orders_, {}); }
  // The peers the job tier declared lost since the last call (names; the caller tells Raft, in
  // case one of them is its leader: ConsensusHost::leader_unreachable).
  std::vector<std::string> take_lost_peers() { return std::exchange(lost_peers_, {}); }

  // kRoundStart, the job tier's messages and kLeaseGrant (others are ignored).
  void on_envelope(TimePoint now, const wire::Envelope& envelope);
  // The transport saw the connection to `peer` drop: its round watches suspect it at once.
  void on_peer_disconnected(TimePoint now, const std::string& peer);
  void tick(TimePoint now);
  TimePoint next_deadline() const;

  // The workers of `start`'s round run here (a kRun order was carried out): the leader is told
  // ("round_ack") while that round still stands for this daemon.
  void acknowledge(const RoundStart& start);
  // "node_leaving" to the leader of each of this daemon's rounds (round_service.h says what
  // the leader does with it).
  void announce_leaving();
  // A report about `report.job` to the leader of its round; dropped when this daemon has no
  // round of that job, but for workers_stopped, which goes to the leader it believes in.
  void report_for(TimePoint now, const RoundReport& report);
  // The leader this daemon believes in: it is sent this node's slots ("node_info") when it
  // changes and every kNodeInfoResend.
  void set_leader(TimePoint now, const std::string& leader, const std::string& address);
  void set_slots(std::uint32_t slots) { slots_ = slots; }

  std::vector<MemberRound> member_rounds() const;
  // RoundStarts the fence refused.
  std::uint64_t stale_starts() const { return stale_starts_; }

 private:
  struct Watched {
    MemberRound info;
    std::unique_ptr<rendezvous::JobWatch> watch;
    std::vector<rendezvous::PeerLost> declared;  // re-reported while the round stands
    std::map<std::string, TimePoint> heard;      // peer -> its last job-tier message (incidents)
    std::string leader;
    std::string leader_address;
    // The round whose workers here said they re-form in place (a live round_ack went out for
    // it): this node's loss reports about that round say so (RoundReport::live).
    std::uint64_t live_round = 0;
    // A local worker failure of the round whose peers are being asked (JobWatch::confirm_peers);
    // sent again with peers_alive once they all answered.
    std::optional<RoundReport> confirming;
    // The live round_ack of the current round and how often it is still sent again (one per
    // kReportResend): the leader skips a lost member's lease only when it knows every kept
    // member re-forms in place, and in a large round the members that learn a loss by notice
    // send no report that would tell it again (a lost ack was final before).
    std::optional<RoundReport> live_ack;
    int live_ack_repeats = 0;
  };

  void on_round_start(TimePoint now, const wire::Envelope& envelope);
  void carry_out(TimePoint now, rendezvous::JobWatchEffects& effects);
  void report(const Watched& watched, const RoundReport& report);
  // To the leader at `address` as a kRoundReport, or, when this daemon leads, as it is to its
  // own leader half.
  void send_report(const std::string& leader, const std::string& address,
                   const RoundReport& report);
  void carry_out_lease(TimePoint now, rendezvous::LeaseHolderEffects& effects);
  void update_lease_want(TimePoint now);

  const Clock* clock_;
  std::string self_;
  std::uint64_t generation_;
  const config::Current& config_;
  std::uint64_t seed_;
  std::vector<RoundSend> sends_;
  std::vector<WorkerOrder> orders_;
  std::vector<std::string> lost_peers_;

  rendezvous::RoundFence fence_;
  std::map<std::string, Watched> watched_;
  // Per job, the newest round this daemon was sent and is a member of, kept while the job
  // recovers between rounds: the base of a delta-form RoundStart (round_codec.h).
  std::map<std::string, HeldRound> held_;
  rendezvous::LeaseHolder holder_;
  // The leader that sent the newest round that passed the fence: leases are asked of it.
  std::string lease_leader_;
  std::string lease_leader_address_;
  std::uint64_t stale_starts_ = 0;
  TimePoint next_report_{};
  std::uint32_t slots_ = 0;
  std::string leader_;
  std::string leader_address_;
  TimePoint next_node_info_{};
};

}  // namespace elastic::node
