#include "daemon/rendezvous/lease.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

namespace elastic::rendezvous {

// ---------------------------------------------------------------------------------------------
// LeaseHolder

LeaseHolder::LeaseHolder(std::string node, std::uint64_t generation, Duration lease_duration)
    : node_(std::move(node)), generation_(generation), lease_duration_(lease_duration) {
  if (lease_duration_ <= Duration::zero()) {
    std::fprintf(stderr, "LeaseHolder: lease_duration must be positive\n");
    std::abort();
  }
}

void LeaseHolder::want(TimePoint now, LeaseHolderEffects& out) {
  if (wanted_) return;
  wanted_ = true;
  request(now, out);
}

void LeaseHolder::release() {
  wanted_ = false;
  running_ = false;
  expiry_ = TimePoint{};
  next_request_ = kNever;
  outstanding_.clear();
}

void LeaseHolder::request(TimePoint now, LeaseHolderEffects& out) {
  const std::uint64_t id = next_request_id_++;
  outstanding_[id] = now;
  while (outstanding_.size() > kMaxOutstanding) outstanding_.erase(outstanding_.begin());
  out.requests.push_back(LeaseRequest{node_, generation_, id, known_term_});
  // Three tries per lease: one lost request or grant never costs the lease.
  next_request_ = now + lease_duration_ / kRenewalsPerLease;
}

void LeaseHolder::on_grant(TimePoint now, const LeaseGrant& grant, LeaseHolderEffects& out) {
  auto sent = outstanding_.find(grant.request);
  if (!wanted_ || grant.node != node_ || grant.generation != generation_ ||
      sent == outstanding_.end() || grant.term < known_term_ ||
      grant.duration <= Duration::zero()) {
    ++grants_ignored_;
    return;
  }
  // From the request's send time, never from receipt: a delayed grant only shortens the lease.
  const TimePoint expiry = sent->second + std::min(lease_duration_, grant.duration);
  known_term_ = grant.term;
  // Older requests can only yield earlier expiries.
  outstanding_.erase(outstanding_.begin(), std::next(sent));
  if (expiry <= now) {
    ++grants_ignored_;  // arrived after the lease it stood for had already run out
    return;
  }
  expiry_ = std::max(expiry_, expiry);
  running_ = true;
}

void LeaseHolder::tick(TimePoint now, LeaseHolderEffects& out) {
  if (running_ && now >= expiry_) {
    running_ = false;
    out.stop_workers = true;
  }
  if (wanted_ && now >= next_request_) request(now, out);
}

TimePoint LeaseHolder::next_deadline() const {
  TimePoint next = wanted_ ? next_request_ : kNever;
  if (running_) next = std::min(next, expiry_);
  return next;
}

// ---------------------------------------------------------------------------------------------
// LeaseGranter

LeaseGranter::LeaseGranter(Duration lease_duration, Duration margin)
    : lease_duration_(lease_duration), margin_(margin) {
  if (lease_duration_ <= Duration::zero() || margin_ < Duration::zero()) {
    std::fprintf(stderr, "LeaseGranter: lease_duration must be positive and margin >= 0\n");
    std::abort();
  }
}

void LeaseGranter::become_leader(std::uint64_t term, TimePoint now) {
  leader_ = true;
  term_ = term;
  elected_at_ = now;
  // Grants of earlier terms (ours included) are accounted for by elected_at_.
  last_grant_.clear();
}

void LeaseGranter::step_down() {
  leader_ = false;
  last_grant_.clear();
}

std::optional<LeaseGrant> LeaseGranter::on_request(TimePoint now, const LeaseRequest& request,
                                                   bool eligible) {
  // A holder that accepted a newer term's grant is talking to a deposed leader: no grant.
  if (!leader_ || !eligible || request.known_term > term_) return std::nullopt;
  TimePoint& last = last_grant_[request.node];
  last = std::max(last, now);
  // The wire carries milliseconds: round down so the holder never gets more than we count.
  const Duration duration = std::chrono::floor<std::chrono::milliseconds>(lease_duration_);
  return LeaseGrant{request.node, request.generation, request.request, term_, duration};
}

TimePoint LeaseGranter::replace_after(const std::string& node) const {
  if (!leader_) return kNever;
  // Grants of earlier terms are unknown here, but a deposed leader stops granting within
  // `margin` of this election; this leader's own grants are known exactly, so after one of them
  // only the clocks' rate difference is left to cover.
  TimePoint base = elected_at_ + margin_;
  if (auto it = last_grant_.find(node); it != last_grant_.end()) {
    base = std::max(base, it->second + lease_duration_ / kRateMarginDivisor);
  }
  return base + lease_duration_;
}

bool LeaseGranter::may_replace(const std::string& node, TimePoint now) const {
  return leader_ && now >= replace_after(node);
}

}  // namespace elastic::rendezvous
