// Worker leases: self-fencing of a daemon cut off from the leader.
//
// Workers run under a lease from the leader. A daemon that cannot renew it stops its workers
// (LeaseHolder), and the leader re-places that daemon's work only once the lease must have run
// out (LeaseGranter::may_replace), so the minority side of a partition has stopped before the
// majority side starts the same work elsewhere.
//
// Timing argument (why skew and delay can only shorten a lease):
//  - the holder computes a grant's expiry from the moment it SENT the request it answers:
//    expiry = request_sent + min(own lease_duration, the grant's duration). The request left
//    before the leader granted, so on the holder's monotonic clock the lease ends no later than
//    grant_time + duration would, whatever the delays; a wall-clock offset does not matter
//    (each side only measures intervals on its own monotonic clock);
//  - the granter may re-place a daemon's work at max(election + margin, last_grant +
//    lease_duration / kRateMarginDivisor) + lease_duration. `margin` covers the time a deposed
//    leader may still grant before CheckQuorum makes it step down (up to two election timeouts
//    after it lost its majority, and its successor may be elected at once by a fast election):
//    its grants are unknown to the new leader, but none comes later than that. After a grant
//    of its own, the leader knows the last one exactly and only the clocks' rate difference over
//    a lease is left (ppm; 2% is allowed). The daemon passes 2 x consensus.election_timeout.
//  - grants carry the leader's term; a holder ignores grants of a term older than one it has
//    already accepted.
// One lease per daemon covers all of its workers (the leader grants while the daemon is a member
// of some running round).
//
// Pure state machines: no clocks, sockets or threads; the caller passes `now` (its steady clock)
// and routes LeaseRequests to whoever is the leader. Thread safety: none; one owner each.
// Errors: a malformed or stale grant is ignored (counted), never an error.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "daemon/core/time.h"

namespace elastic::rendezvous {

// ---------------------------------------------------------------------------------------------
// Wire structs (daemon/rendezvous/job_codec.h encodes them).

struct LeaseRequest {
  std::string node;  // the requesting daemon
  std::uint64_t generation = 0;
  std::uint64_t request = 0;     // the holder's request number, echoed in the grant
  std::uint64_t known_term = 0;  // the newest leader term the holder has accepted a grant from
  bool operator==(const LeaseRequest&) const = default;
};

struct LeaseGrant {
  std::string node;
  std::uint64_t generation = 0;
  std::uint64_t request = 0;
  std::uint64_t term = 0;  // the granting leader's term
  Duration duration{};     // the lease length the leader accounts for (millisecond precision)
  bool operator==(const LeaseGrant&) const = default;
};

using LeaseMessage = std::variant<LeaseRequest, LeaseGrant>;

// ---------------------------------------------------------------------------------------------
// Daemon side

struct LeaseHolderEffects {
  std::vector<LeaseRequest> requests;  // to the current leader (the caller routes them)
  bool stop_workers = false;           // the lease ran out: stop every worker now
};

class LeaseHolder {
 public:
  LeaseHolder(std::string node, std::uint64_t generation, Duration lease_duration);

  // The daemon has (or is about to start) workers: request a lease now and keep renewing it
  // every lease_duration / kRenewalsPerLease.
  void want(TimePoint now, LeaseHolderEffects& out);
  // No workers any more: stop renewing; the lease (if any) is dropped.
  void release();

  void on_grant(TimePoint now, const LeaseGrant& grant, LeaseHolderEffects& out);
  void tick(TimePoint now, LeaseHolderEffects& out);
  TimePoint next_deadline() const;

  // True while the lease is unexpired: workers may run (and be started) only then.
  bool may_run(TimePoint now) const { return wanted_ && now < expiry_; }
  TimePoint expiry() const { return expiry_; }
  bool wanted() const { return wanted_; }
  std::uint64_t known_term() const { return known_term_; }
  std::uint64_t grants_ignored() const { return grants_ignored_; }

  // Requests older than this many renewals are forgotten (their grants would be useless).
  static constexpr std::size_t kMaxOutstanding = 8;

 private:
  void request(TimePoint now, LeaseHolderEffects& out);

  std::string node_;
  std::uint64_t generation_ = 0;
  Duration lease_duration_;
  bool wanted_ = false;
  TimePoint expiry_{};    // TimePoint{} = no lease
  bool running_ = false;  // a lease was held and stop_workers not yet emitted for its loss
  TimePoint next_request_ = kNever;
  std::uint64_t next_request_id_ = 1;
  std::map<std::uint64_t, TimePoint> outstanding_;  // request number -> when it was sent
  std::uint64_t known_term_ = 0;
  std::uint64_t grants_ignored_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Leader side

// Renewals per lease: a lost daemon's last grant is at most lease_duration / 4 old, so its work
// can be re-placed within 1.27 leases of its loss, and a leader election (about 1-2 s) ends
// well before a 3 s lease renewed every 0.75 s runs out.
inline constexpr int kRenewalsPerLease = 4;

// A lease may run this much (1/50) longer on the granter's clock than on the holder's.
inline constexpr int kRateMarginDivisor = 50;

class LeaseGranter {
 public:
  LeaseGranter(Duration lease_duration, Duration margin);

  // This node won the election of `term` at `now`: it grants from now on, and may re-place
  // anyone's work only after now + lease_duration + margin (earlier leaders' grants are
  // unknown to it).
  void become_leader(std::uint64_t term, TimePoint now);
  void step_down();
  bool leader() const { return leader_; }

  // A grant for `request`, or nullopt when this node is not the leader or the daemon is not a
  // member of a running round (`eligible`, decided by the caller's job table).
  std::optional<LeaseGrant> on_request(TimePoint now, const LeaseRequest& request, bool eligible);

  // True when `node` (any generation) can no longer be running workers under a lease from
  // this leader or an earlier one, so its work may be placed elsewhere. Always false when not
  // the leader.
  bool may_replace(const std::string& node, TimePoint now) const;
  // The earliest time may_replace(node, ...) can turn true (kNever when not leader).
  TimePoint replace_after(const std::string& node) const;

 private:
  Duration lease_duration_;
  Duration margin_;
  bool leader_ = false;
  std::uint64_t term_ = 0;
  TimePoint elected_at_{};
  std::map<std::string, TimePoint> last_grant_;
};

}  // namespace elastic::rendezvous
