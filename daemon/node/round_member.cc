#include "daemon/node/round_member.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "daemon/rendezvous/job_codec.h"
#include "daemon/rendezvous/round_policy.h"

namespace elastic::node {
namespace {

using rendezvous::is_active_round_state;
using rendezvous::JobState;

constexpr std::chrono::seconds kReportResend{1};
// A live round_ack goes out this many more times, kReportResend apart (see Watched::live_ack).
constexpr int kLiveAckRepeats = 2;

// A "peer_lost" report to the leader; last_heard_ms: when this daemon last heard from the peer
// (wall ms), the incident's earliest evidence.
RoundReport lost_report(const rendezvous::PeerLost& lost, std::int64_t last_heard_ms,
                        std::uint64_t live_round) {
  RoundReport report = round_report(ReportKind::kPeerLost, lost.job, lost.round);
  report.live = live_round == lost.round;
  report.peer = lost.peer;
  report.peer_generation = lost.generation;
  report.reason = rendezvous::to_string(lost.reason);
  if (last_heard_ms > 0) report.last_heard_ms = last_heard_ms;
  return report;
}

}  // namespace

RoundMember::RoundMember(std::string self, std::uint64_t generation, const config::Current& config,
                         std::uint64_t seed, const Clock& clock)
    : clock_(&clock),
      self_(std::move(self)),
      generation_(generation),
      config_(config),
      seed_(seed),
      holder_(self_, generation, config.get().rendezvous.lease_duration) {}

void RoundMember::on_envelope(TimePoint now, const wire::Envelope& envelope) {
  if (envelope.type == wire::MsgType::kRoundStart) {
    on_round_start(now, envelope);
    return;
  }
  if (rendezvous::is_job_type(envelope.type)) {
    auto message = rendezvous::decode_job(envelope.type, envelope.body);
    if (!message.ok()) return;
    const std::string& job =
        std::visit([](const auto& m) -> const std::string& { return m.ref.job; }, *message);
    const auto it = watched_.find(job);
    if (it == watched_.end() || !it->second.watch) return;
    it->second.heard[envelope.sender] = now;
    rendezvous::JobWatchEffects effects;
    it->second.watch->on_message(now, envelope.sender, envelope.generation, *message, effects);
    carry_out(now, effects);
    return;
  }
  if (envelope.type == wire::MsgType::kLeaseGrant) {
    auto message = rendezvous::decode_lease(envelope.type, envelope.body);
    if (!message.ok()) return;
    if (const auto* grant = std::get_if<rendezvous::LeaseGrant>(&*message)) {
      rendezvous::LeaseHolderEffects effects;
      holder_.on_grant(now, *grant, effects);
      carry_out_lease(now, effects);
    }
  }
}

void RoundMember::on_peer_disconnected(TimePoint now, const std::string& peer) {
  for (auto& [job, watched] : watched_) {
    if (!watched.watch || peer == self_) continue;
    rendezvous::JobWatchEffects effects;
    watched.watch->on_peer_event(now, peer, rendezvous::PeerEventKind::kDisconnected, effects);
    carry_out(now, effects);
  }
}

void RoundMember::on_round_start(TimePoint now, const wire::Envelope& envelope) {
  auto start = decode_round_start(envelope.body, [this](const std::string& job) {
    const auto it = held_.find(job);
    return it == held_.end() ? nullptr : &it->second;
  });
  if (!start.ok()) {
    spdlog::debug("dropped a round start from {}: {}", envelope.sender, start.error().message);
    return;
  }
  const rendezvous::OpenRound& round = start->round;
  const rendezvous::RoundStamp stamp{.term = start->term, .round = round.round};
  if (!is_active_round_state(start->state)) {
    if (fence_.check(round.job_id, stamp) == rendezvous::RoundFence::Verdict::kStale) return;
    const auto it = watched_.find(round.job_id);
    if (it != watched_.end() && it->second.info.round <= round.round) {
      spdlog::info("job {} round {}: {}; this daemon stops watching it", round.job_id, round.round,
                   rendezvous::to_string(start->state));
      watched_.erase(it);
      update_lease_want(now);
    }
    // Cancelled or suspended by its owner, or requeued by a preemption (pending again): the
    // round is healthy, so the workers get TERM and a grace period to checkpoint; a recovering
    // or failed round's collectives are broken: kill at once.
    const bool healthy = start->state == JobState::kCancelled ||
                         start->state == JobState::kSuspended ||
                         start->state == JobState::kPending;
    orders_.push_back(
        WorkerOrder{.kind = WorkerOrder::Kind::kStop,
                    .start = std::nullopt,
                    .job = round.job_id,
                    .graceful = healthy,
                    .why = std::string("the job is ") + rendezvous::to_string(start->state),
                    .final = rendezvous::is_terminal(start->state)});
    if (rendezvous::is_terminal(start->state)) {
      fence_.forget(round.job_id);
      held_.erase(round.job_id);
    }
    return;
  }
  const auto verdict = fence_.observe(round.job_id, stamp);
  if (verdict == rendezvous::RoundFence::Verdict::kStale) {
    ++stale_starts_;
    spdlog::info("job {}: ignored a stale start of round {} (term {}) from {}", round.job_id,
                 round.round, start->term, envelope.sender);
    return;
  }
  const auto self = std::find_if(round.ranks.begin(), round.ranks.end(), [&](const auto& a) {
    return a.node == self_ && a.generation == generation_;
  });
  if (self == round.ranks.end()) {
    if (watched_.erase(round.job_id) > 0) update_lease_want(now);
    held_.erase(round.job_id);
    // Left out by a shrink the scheduler chose (a preemption, throughput scaling): the round was
    // healthy, so TERM and the grace period; otherwise this node is out after a failure.
    const bool chosen = round.reason == rendezvous::RoundReason::kPreempted ||
                        round.reason == rendezvous::RoundReason::kScaled;
    orders_.push_back(
        WorkerOrder{.kind = WorkerOrder::Kind::kStop,
                    .start = std::nullopt,
                    .job = round.job_id,
                    .graceful = chosen,
                    .why = "round " + std::to_string(round.round) + " does not include this node",
                    .final = true});
    return;
  }
  // The fence passed: the sender leads the newest term this daemon knows of.
  lease_leader_ = envelope.sender;
  lease_leader_address_ = envelope.sender_address;
  Watched& watched = watched_[round.job_id];
  watched.leader = envelope.sender;
  watched.leader_address = envelope.sender_address;
  if (watched.info.round != round.round || !watched.watch) {
    watched.info = MemberRound{.job = round.job_id,
                               .term = start->term,
                               .round = round.round,
                               .first_rank = self->first_rank,
                               .slots = self->slots,
                               .world = rendezvous::world_size(round.ranks),
                               .store_endpoint = round.store_endpoint,
                               .fenced = false,
                               .watch = {}};
    watched.declared.clear();
    const auto& r = config_.get().rendezvous;
    watched.watch = std::make_unique<rendezvous::JobWatch>(
        self_, generation_,
        rendezvous::JobWatchConfig::from(r.job_keepalive_interval, r.job_peer_timeout),
        seed_ ^ round.round);
    std::vector<rendezvous::JobPeer> peers;
    for (const auto& member : round.ranks) {
      peers.push_back(rendezvous::JobPeer{member.node, member.generation, ""});
    }
    rendezvous::JobWatchEffects effects;
    (void)watched.watch->set_round(now, round.job_id, start->term, round.round, peers, effects);
    spdlog::info("job {} round {} (term {}): ranks {}..{} of {} on this node, store {}",
                 round.job_id, round.round, start->term, self->first_rank,
                 self->first_rank + self->slots - 1, watched.info.world, round.store_endpoint);
    carry_out(now, effects);
  }
  update_lease_want(now);
  // The leader's next round may come as a delta against this one, and resends of this one stop.
  // (Its spec's digest is computed only when the held round changes, not for every resend.)
  HeldRound& held = held_[round.job_id];
  if (held.round != round.round || held.spec != start->spec) {
    held = HeldRound{.round = round.round,
                     .ranks = round.ranks,
                     .spec = start->spec,
                     .spec_digest = spec_digest(start->spec)};
  }
  report(watched, round_report(ReportKind::kRoundReceived, round.job_id, round.round));
  // The leader counts the round as started once the workers run; the supervisor acknowledges
  // later through report_for() when it must first stop an older round's workers.
  // A round this daemon fenced itself out of stays stopped: its lease may already count as run
  // out at the leader, which can re-place the work at any moment.
  if (watched.info.fenced) return;
  orders_.push_back(WorkerOrder{.kind = WorkerOrder::Kind::kRun,
                                .start = std::move(*start),
                                .job = round.job_id,
                                .graceful = false,
                                .why = "",
                                .final = false});
}

void RoundMember::acknowledge(const RoundStart& start) {
  const auto it = watched_.find(start.round.job_id);
  if (it == watched_.end() || it->second.info.round != start.round.round ||
      it->second.info.fenced) {
    return;
  }
  report(it->second, round_report(ReportKind::kRoundAck, start.round.job_id, start.round.round));
}

void RoundMember::announce_leaving() {
  for (const auto& [job, watched] : watched_) {
    report(watched, round_report(ReportKind::kNodeLeaving, job, watched.info.round));
  }
}

void RoundMember::report_for(TimePoint now, const RoundReport& report) {
  const auto it = watched_.find(report.job);
  if (it != watched_.end()) {
    Watched& watched = it->second;
    if (report.kind == ReportKind::kRoundAck && report.live && report.round == watched.info.round) {
      watched.live_round = report.round;
      watched.live_ack = report;
      watched.live_ack_repeats = kLiveAckRepeats;
      next_report_ = std::min(next_report_, now + kReportResend);
    }
    this->report(watched, report);
    // A local worker failed: ask every round peer whether it is alive now, so the leader need
    // not wait out the job tier's detection time in case the failure is a peer's loss seen
    // early (carry_out sends the failure again with peers_alive once they all answered).
    if (report.kind == ReportKind::kWorkerFailed && !report.peers_alive && watched.watch &&
        report.round == watched.info.round && !watched.info.fenced) {
      watched.confirming = report;
      rendezvous::JobWatchEffects effects;
      watched.watch->confirm_peers(effects);
      carry_out(now, effects);
    }
    return;
  }
  // A stop is reported after this daemon stopped watching the job (it ended, is recovering or
  // left this node out): to the leader it believes in.
  if (report.kind != ReportKind::kWorkersStopped || leader_.empty()) return;
  send_report(leader_, leader_address_, report);
}

void RoundMember::set_leader(TimePoint now, const std::string& leader, const std::string& address) {
  if (leader.empty()) return;
  if (leader != leader_ || (address != leader_address_ && !address.empty())) {
    // A new leader has not heard this daemon's pending reports (a declared loss, a fenced
    // round): they go to it at the next tick, not a kReportResend later. When the old leader's
    // host is the one lost, this is what lets the new leader plan the recovery at once.
    if (leader != leader_ && !leader_.empty()) {
      next_report_ = std::min(next_report_, now);
      // It has not heard which rounds re-form in place here either.
      for (auto& [job, watched] : watched_) {
        if (watched.live_ack) watched.live_ack_repeats = kLiveAckRepeats;
      }
    }
    leader_ = leader;
    leader_address_ = address;
    next_node_info_ = now;
  }
  if (now < next_node_info_) return;
  next_node_info_ = now + kNodeInfoResend;
  RoundReport info = round_report(ReportKind::kNodeInfo, "", 0);
  info.slots = slots_;
  send_report(leader_, leader_address_, info);
}

void RoundMember::report(const Watched& watched, const RoundReport& report) {
  send_report(watched.leader, watched.leader_address, report);
  // The round's leader may be the daemon that is gone: the leader this daemon believes in now
  // hears it too (a leader takes a report of a round only from its table, and twice is as once).
  if (!leader_.empty() && leader_ != watched.leader) send_report(leader_, leader_address_, report);
}

void RoundMember::send_report(const std::string& leader, const std::string& address,
                              const RoundReport& report) {
  if (leader == self_) {
    sends_.push_back(RoundSend{.to = leader, .address = address, .envelope = {}, .report = report});
    return;
  }
  wire::Envelope envelope;
  envelope.type = wire::MsgType::kRoundReport;
  envelope.body = encode_round_report(report);
  sends_.push_back(RoundSend{
      .to = leader, .address = address, .envelope = std::move(envelope), .report = std::nullopt});
}

void RoundMember::carry_out(TimePoint now, rendezvous::JobWatchEffects& effects) {
  for (rendezvous::JobOutgoing& out : effects.sends) {
    wire::Envelope envelope;
    envelope.type = rendezvous::job_message_type(out.message);
    envelope.body = rendezvous::encode_job(out.message);
    sends_.push_back(RoundSend{.to = out.to,
                               .address = out.to_address,
                               .envelope = std::move(envelope),
                               .report = std::nullopt});
  }
  if (effects.peers_confirmed) {
    const auto it = watched_.find(effects.peers_confirmed->job);
    if (it != watched_.end() && it->second.confirming &&
        it->second.confirming->round == effects.peers_confirmed->round) {
      RoundReport confirmed = *std::exchange(it->second.confirming, std::nullopt);
      confirmed.peers_alive = true;
      report(it->second, confirmed);
    }
  }
  for (const rendezvous::PeerLost& lost : effects.lost) {
    const auto it = watched_.find(lost.job);
    if (it == watched_.end() || it->second.info.round != lost.round) continue;
    spdlog::warn("job {} round {}: peer {} (gen {}) lost ({})", lost.job, lost.round, lost.peer,
                 lost.generation, rendezvous::to_string(lost.reason));
    it->second.declared.push_back(lost);
    // Learnt from another member's notice (a large round): the member that declared it reports
    // it, so the leader does not get one report per survivor. Nor is it a hint for Raft's fast
    // election: one member's word (a notice) would make every voter of the round forget a
    // healthy leader at once, and voters that forgot it grant each other's pre-votes. A lost
    // leader's host is still found first-hand by its ring watchers, by membership (dead) or by
    // the election timeout.
    if (lost.reason == rendezvous::LostReason::kReported) continue;
    lost_peers_.push_back(lost.peer);
    const auto heard = it->second.heard.find(lost.peer);
    report(it->second, lost_report(lost,
                                   heard == it->second.heard.end()
                                       ? 0
                                       : wall_ms_at(*clock_, now, heard->second),
                                   it->second.live_round));
    next_report_ = now + kReportResend;
  }
}

void RoundMember::tick(TimePoint now) {
  for (auto& [job, watched] : watched_) {
    if (!watched.watch) continue;
    rendezvous::JobWatchEffects effects;
    watched.watch->tick(now, effects);
    carry_out(now, effects);
  }
  if (now >= next_report_) {
    next_report_ = kNever;
    for (auto& [job, watched] : watched_) {
      if (watched.live_ack && watched.live_ack->round == watched.info.round &&
          watched.live_ack_repeats > 0) {
        report(watched, *watched.live_ack);
        if (--watched.live_ack_repeats > 0) next_report_ = now + kReportResend;
      }
      for (const rendezvous::PeerLost& lost : watched.declared) {
        if (lost.reason == rendezvous::LostReason::kReported) continue;  // see carry_out
        const auto heard = watched.heard.find(lost.peer);
        report(watched, lost_report(lost,
                                    heard == watched.heard.end()
                                        ? 0
                                        : wall_ms_at(*clock_, now, heard->second),
                                    watched.live_round));
        next_report_ = now + kReportResend;
      }
      // A round this daemon fenced itself out of (its lease ran out) has no workers here any
      // more, and no member may notice: the leader hears it as this node's worker failure, so
      // it opens a new round (which names this node again when it is usable) instead of keeping
      // a running job without workers. Repeated while the round stands, like other failures.
      if (watched.info.fenced) {
        RoundReport failed = round_report(ReportKind::kWorkerFailed, job, watched.info.round);
        failed.rank = watched.info.first_rank;
        failed.detail = "this node's lease from the leader ran out (no renewal for " +
                        std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                           config_.get().rendezvous.lease_duration)
                                           .count()) +
                        " ms); its workers were stopped (self-fencing)";
        failed.at_ms = clock_->wall_ms();
        report(watched, failed);
        next_report_ = now + kReportResend;
      }
    }
  }
  rendezvous::LeaseHolderEffects effects;
  holder_.tick(now, effects);
  carry_out_lease(now, effects);
}

void RoundMember::update_lease_want(TimePoint now) {
  const bool member = std::any_of(watched_.begin(), watched_.end(),
                                  [](const auto& w) { return !w.second.info.fenced; });
  if (member && !holder_.wanted()) {
    rendezvous::LeaseHolderEffects effects;
    holder_.want(now, effects);
    carry_out_lease(now, effects);
  } else if (!member && holder_.wanted()) {
    holder_.release();
  }
}

void RoundMember::carry_out_lease(TimePoint now, rendezvous::LeaseHolderEffects& effects) {
  for (const rendezvous::LeaseRequest& request : effects.requests) {
    if (lease_leader_.empty()) continue;
    wire::Envelope envelope;
    envelope.type = wire::MsgType::kLeaseRequest;
    envelope.body = rendezvous::encode_lease(request);
    if (lease_leader_ == self_) {
      // For this daemon's own leader half (round_send.h).
      envelope.sender = self_;
      envelope.generation = generation_;
    }
    sends_.push_back(RoundSend{.to = lease_leader_,
                               .address = lease_leader_address_,
                               .envelope = std::move(envelope),
                               .report = std::nullopt});
  }
  if (effects.stop_workers) {
    for (auto& [job, watched] : watched_) {
      if (watched.info.fenced) continue;
      watched.info.fenced = true;
      spdlog::warn(
          "job {} round {}: the leader's lease ran out; this daemon's workers must stop "
          "(self-fencing) until a new round names it",
          job, watched.info.round);
      orders_.push_back(WorkerOrder{.kind = WorkerOrder::Kind::kStop,
                                    .start = std::nullopt,
                                    .job = job,
                                    .graceful = false,
                                    .why = "the leader's lease ran out",
                                    .final = false});
      next_report_ = std::min(next_report_, now);  // the next tick tells the leader (see tick)
    }
  }
}

TimePoint RoundMember::next_deadline() const {
  TimePoint deadline = std::min(holder_.next_deadline(), next_report_);
  for (const auto& [job, watched] : watched_) {
    if (watched.watch) deadline = std::min(deadline, watched.watch->next_deadline());
  }
  return deadline;
}

std::vector<MemberRound> RoundMember::member_rounds() const {
  std::vector<MemberRound> rounds;
  for (const auto& [job, watched] : watched_) {
    rounds.push_back(watched.info);
    if (watched.watch) rounds.back().watch = watched.watch->stats();
  }
  return rounds;
}

}  // namespace elastic::node
