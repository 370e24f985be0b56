#include "daemon/node/round_service.h"

#include <algorithm>

namespace elastic::node {

RoundService::RoundService(std::string self, std::uint64_t generation,
                           const config::Current& config, std::uint64_t seed, const Clock& clock)
    : self_(self),
      generation_(generation),
      leader_(self, generation, config, clock),
      member_(std::move(self), generation, config, seed, clock) {}

void RoundService::route_leader(TimePoint now) {
  for (RoundSend& send : leader_.take_sends()) {
    if (send.to != self_) {
      sends_.push_back(std::move(send));
      continue;
    }
    member_.on_envelope(now, send.envelope);
    route_member(now);
  }
}

void RoundService::route_member(TimePoint now) {
  for (RoundSend& send : member_.take_sends()) {
    if (send.to != self_) {
      sends_.push_back(std::move(send));
      continue;
    }
    if (send.report) {
      leader_.on_report(last_now_, self_, generation_, *send.report);
    } else {
      leader_.on_lease_request(now, send.envelope);
    }
    route_leader(now);
  }
}

void RoundService::lead(TimePoint now, bool leading, const rendezvous::JobTable& table,
                        const std::vector<membership::MemberView>& members,
                        ConsensusHost* consensus) {
  last_now_ = now;
  leader_.lead(now, leading, table, members, consensus);
  route_leader(now);
}

void RoundService::on_report(TimePoint now, const wire::Envelope& envelope) {
  leader_.on_report(now, envelope);
  route_leader(now);
}

void RoundService::on_envelope(TimePoint now, const wire::Envelope& envelope) {
  last_now_ = now;
  if (envelope.type == wire::MsgType::kLeaseRequest) {
    leader_.on_lease_request(now, envelope);
    route_leader(now);
    return;
  }
  member_.on_envelope(now, envelope);
  route_member(now);
}

void RoundService::on_peer_disconnected(TimePoint now, const std::string& peer) {
  member_.on_peer_disconnected(now, peer);
  route_member(now);
}

void RoundService::tick(TimePoint now) {
  last_now_ = now;
  member_.tick(now);
  route_member(now);
  leader_.tick(now);
}

TimePoint RoundService::next_deadline() const {
  return std::min(member_.next_deadline(), leader_.next_deadline());
}

void RoundService::acknowledge(const RoundStart& start) {
  member_.acknowledge(start);
  route_member(last_now_);
}

void RoundService::announce_leaving() {
  member_.announce_leaving();
  route_member(last_now_);
}

void RoundService::report_for(TimePoint now, const RoundReport& report) {
  member_.report_for(now, report);
  route_member(last_now_);
}

void RoundService::set_leader(TimePoint now, const std::string& leader,
                              const std::string& address) {
  last_now_ = std::max(last_now_, now);
  member_.set_leader(now, leader, address);
  route_member(now);
}

}  // namespace elastic::node
