// RoundService: turns the replicated job table into rounds on real daemons, as two halves it
// owns and nothing else: the leader half (RoundLeader, round_leader.h: planning, proposals,
// RoundStart, lease grants, members' reports; run by the Raft leader) and the member half
// (RoundMember, round_member.h: the fence, the job tier's watch, the lease, reports to the
// leader; run by every daemon). The policy they apply is pure (rendezvous/planner.h,
// rendezvous/round_policy.h).
//
// What it adds to the halves is the routing between them: a message either half makes for
// this daemon itself (round_send.h) is handed to the other half before the next message of the
// same batch, depth first, so what leaves the daemon comes out in the order it was made; and
// envelopes from the node are dispatched to the half that takes them. Reports a member half
// makes outside a timed call (acknowledge, report_for, announce_leaving) reach its own leader
// half at the latest time this service was given.
//
// Draining (announce_leaving()): the leader of each round this daemon is in is told
// "node_leaving"; call it again every second or so while draining (reports may be lost). The
// leader then places no new work on this (node, generation), excuses worker failures of the
// rounds it is in (a drain stops workers on purpose; elastic-trainer's other ranks exit 75 with
// it), keeps its rounds until it leaves membership, and then re-plans them without it as a lost
// member (no restart counted) without waiting for its lease: a node leaves only once its
// workers are gone.
//
// Thread safety: none; the node's loop thread owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "daemon/config/config.h"
#include "daemon/core/clock.h"
#include "daemon/core/time.h"
#include "daemon/membership/membership.h"
#include "daemon/node/consensus_host.h"
#include "daemon/node/incidents.h"
#include "daemon/node/round_codec.h"
#include "daemon/node/round_leader.h"
#include "daemon/node/round_member.h"
#include "daemon/node/round_report.h"
#include "daemon/node/round_send.h"
#include "daemon/rendezvous/job_table.h"
#include "daemon/wire/messages.h"

namespace elastic::node {

class RoundService {
 public:
  // An envelope (type and body set) for another daemon, at `address` ("" = its last known one).
  using Send = RoundSend;
  using WorkerOrder = RoundMember::WorkerOrder;

  // `config` is read where used (a reload replaces it); it must outlive this service. `seed`
  // seeds the member half's job watches; wall times come from `clock`.
  RoundService(std::string self, std::uint64_t generation, const config::Current& config,
               std::uint64_t seed, const Clock& clock = system_clock());

  // Output of the calls since the last take, in the order it was made. Sends never name this
  // daemon (those went to the other half).
  std::vector<Send> take_sends() { return std::exchange(sends_, {}); }
  std::vector<WorkerOrder> take_orders() { return member_.take_orders(); }
  std::vector<std::string> take_lost_peers() { return member_.take_lost_peers(); }
  // RoundMember::acknowledge.
  void acknowledge(const RoundStart& start);

  // Leader half: RoundLeader::lead, lead_due and on_report (call on_report only while leading).
  void lead(TimePoint now, bool leading, const rendezvous::JobTable& table,
            const std::vector<membership::MemberView>& members, ConsensusHost* consensus);
  bool lead_due(TimePoint now, bool leading) const { return leader_.lead_due(now, leading); }
  void on_report(TimePoint now, const wire::Envelope& envelope);
  std::uint64_t malformed_reports() const { return leader_.malformed_reports(); }

  // kRoundStart, the job tier's messages and leases: kLeaseRequest to the leader half, the rest
  // to the member half.
  void on_envelope(TimePoint now, const wire::Envelope& envelope);
  // RoundMember::on_peer_disconnected.
  void on_peer_disconnected(TimePoint now, const std::string& peer);
  // Both halves' timers.
  void tick(TimePoint now);
  TimePoint next_deadline() const;

  // Member half: see the header comment (draining) and round_member.h.
  void announce_leaving();
  void report_for(TimePoint now, const RoundReport& report);
  void set_leader(TimePoint now, const std::string& leader, const std::string& address);
  void set_slots(std::uint32_t slots) { member_.set_slots(slots); }
  std::vector<MemberRound> member_rounds() const { return member_.member_rounds(); }
  std::uint64_t stale_starts() const { return member_.stale_starts(); }

  // Leader half's memory (round_leader.h says what is volatile).
  const std::map<std::string, std::pair<std::uint64_t, std::uint32_t>>& node_slots() const {
    return leader_.node_slots();
  }
  using Incident = node::Incident;
  using RecoveryStats = node::RecoveryStats;
  const std::deque<Incident>& incidents() const { return leader_.incidents(); }
  const std::map<std::string, RecoveryStats>& recovery_stats() const {
    return leader_.recovery_stats();
  }
  std::uint64_t rounds_opened() const { return leader_.rounds_opened(); }
  void record_event(ClusterEvent event) { leader_.record_event(std::move(event)); }
  const IncidentLog& incident_log() const { return leader_.incident_log(); }

  const RoundLeader& leader() const { return leader_; }
  // For tests and benchmarks: RoundLeader::set_verify_skips.
  void set_verify_skips(bool on) { leader_.set_verify_skips(on); }
  const RoundMember& member() const { return member_; }

 private:
  // Moves each half's sends out: to other daemons into sends_, to this daemon into the other
  // half (then that half's new sends at once). `now` stamps envelopes handed over; reports go
  // with last_now_.
  void route_leader(TimePoint now);
  void route_member(TimePoint now);

  std::string self_;
  std::uint64_t generation_;
  RoundLeader leader_;
  RoundMember member_;
  std::vector<Send> sends_;
  TimePoint last_now_{};  // the latest time this service was given (reports to itself)
};

}  // namespace elastic::node
