// Worker leases: expiry stops workers; a grant's expiry counts from the request's send time so
// delay can only shorten it; stale terms and unknown requests are ignored; a new leader waits;
// and, over random delays, losses and partitions, a cut-off holder has stopped its workers
// before the leader may re-place its work.
#include "daemon/rendezvous/lease.h"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <random>
#include <string>

namespace elastic::rendezvous {
namespace {

using namespace std::chrono_literals;

constexpr Duration kLease = 10s;
constexpr Duration kMargin = 3s;
const TimePoint kT0 = TimePoint{} + 1h;

TEST(LeaseHolder, NoLeaseMeansNoWorkers) {
  LeaseHolder h("n1", 4, kLease);
  EXPECT_FALSE(h.may_run(kT0));
  EXPECT_EQ(h.next_deadline(), kNever);
  LeaseHolderEffects out;
  h.want(kT0, out);
  ASSERT_EQ(out.requests.size(), 1u);
  EXPECT_EQ(out.requests[0].node, "n1");
  EXPECT_EQ(out.requests[0].generation, 4u);
  EXPECT_EQ(out.requests[0].known_term, 0u);
  EXPECT_FALSE(h.may_run(kT0));
  EXPECT_EQ(h.next_deadline(), kT0 + kLease / kRenewalsPerLease);
}

TEST(LeaseHolder, RenewsEveryThirdAndStopsWorkersOnExpiry) {
  LeaseHolder h("n1", 1, kLease);
  LeaseGranter g(kLease, kMargin);
  g.become_leader(5, kT0);
  LeaseHolderEffects out;
  h.want(kT0, out);
  auto grant = g.on_request(kT0 + 5ms, out.requests.at(0), true);
  ASSERT_TRUE(grant.has_value());
  EXPECT_EQ(grant->term, 5u);
  EXPECT_EQ(grant->duration, kLease);
  out = {};
  h.on_grant(kT0 + 10ms, *grant, out);
  EXPECT_TRUE(h.may_run(kT0 + 10ms));
  EXPECT_EQ(h.expiry(), kT0 + kLease);  // from the send time, not receipt
  EXPECT_EQ(h.known_term(), 5u);

  // Renewal at lease/3, answered: the lease moves on.
  h.tick(kT0 + kLease / kRenewalsPerLease, out);
  ASSERT_EQ(out.requests.size(), 1u);
  EXPECT_FALSE(out.stop_workers);
  grant = g.on_request(kT0 + kLease / kRenewalsPerLease, out.requests[0], true);
  h.on_grant(kT0 + kLease / kRenewalsPerLease + 1ms, *grant, out);
  EXPECT_EQ(h.expiry(), kT0 + kLease / kRenewalsPerLease + kLease);

  // Then the leader goes silent: two more requests go unanswered and the workers stop exactly at
  // the expiry, once.
  const TimePoint expiry = h.expiry();
  int requests = 0;
  bool stopped = false;
  for (TimePoint t = kT0 + kLease / kRenewalsPerLease + 1ms; t <= expiry + 10s; t += 1ms) {
    if (h.next_deadline() > t) continue;
    out = {};
    h.tick(t, out);
    requests += static_cast<int>(out.requests.size());
    if (out.stop_workers) {
      EXPECT_FALSE(stopped);
      EXPECT_EQ(t, expiry);
      stopped = true;
    }
    EXPECT_EQ(h.may_run(t), t < expiry);
  }
  EXPECT_TRUE(stopped);
  EXPECT_GE(requests, 3);  // it keeps asking
}

TEST(LeaseHolder, DelayedGrantCannotExtendBeyondRequestTimePlusDuration) {
  LeaseHolder h("n1", 1, kLease);
  LeaseGranter g(kLease, kMargin);
  g.become_leader(1, kT0);
  LeaseHolderEffects out;
  h.want(kT0, out);
  const LeaseRequest request = out.requests.at(0);
  // The request sits in a queue for 4 s, the grant for another 3 s.
  const auto grant = g.on_request(kT0 + 4s, request, true);
  h.on_grant(kT0 + 7s, *grant, out);
  EXPECT_EQ(h.expiry(), kT0 + kLease);
  EXPECT_TRUE(h.may_run(kT0 + kLease - 1ns));
  EXPECT_FALSE(h.may_run(kT0 + kLease));
  // A grant that arrives after its lease would have ended gives nothing.
  LeaseHolder late("n2", 1, kLease);
  out = {};
  late.want(kT0, out);
  const auto late_grant = g.on_request(kT0 + 1s, out.requests.at(0), true);
  late.on_grant(kT0 + kLease + 1s, *late_grant, out);
  EXPECT_FALSE(late.may_run(kT0 + kLease + 1s));
  EXPECT_EQ(late.grants_ignored(), 1u);
}

TEST(LeaseHolder, ShorterGrantWinsAndForeignOrStaleGrantsAreIgnored) {
  LeaseHolder h("n1", 2, kLease);
  LeaseHolderEffects out;
  h.want(kT0, out);
  const std::uint64_t id = out.requests.at(0).request;
  // The leader accounts for only 4 s: the holder must not assume 10.
  h.on_grant(kT0 + 1ms, LeaseGrant{"n1", 2, id, 3, 4s}, out);
  EXPECT_EQ(h.expiry(), kT0 + 4s);
  // Wrong node, generation, unknown request, older term, zero duration: all ignored.
  out = {};
  h.tick(kT0 + kLease / kRenewalsPerLease, out);
  const std::uint64_t id2 = out.requests.at(0).request;
  EXPECT_EQ(out.requests[0].known_term, 3u);
  h.on_grant(kT0 + 4s, LeaseGrant{"n9", 2, id2, 3, kLease}, out);
  h.on_grant(kT0 + 4s, LeaseGrant{"n1", 1, id2, 3, kLease}, out);
  h.on_grant(kT0 + 4s, LeaseGrant{"n1", 2, id2 + 100, 3, kLease}, out);
  h.on_grant(kT0 + 4s, LeaseGrant{"n1", 2, id2, 2, kLease}, out);
  h.on_grant(kT0 + 4s, LeaseGrant{"n1", 2, id2, 3, 0s}, out);
  EXPECT_EQ(h.grants_ignored(), 5u);
  EXPECT_EQ(h.expiry(), kT0 + 4s);
  // Released: grants for earlier requests no longer count.
  h.release();
  h.on_grant(kT0 + 4s, LeaseGrant{"n1", 2, id2, 3, kLease}, out);
  EXPECT_FALSE(h.may_run(kT0 + 4s));
  EXPECT_EQ(h.next_deadline(), kNever);
}

TEST(LeaseGranter, OnlyALeaderGrantsAndOnlyToEligibleDaemons) {
  LeaseGranter g(kLease, kMargin);
  const LeaseRequest r{"n1", 1, 1, 0};
  EXPECT_FALSE(g.on_request(kT0, r, true).has_value());
  g.become_leader(2, kT0);
  EXPECT_FALSE(g.on_request(kT0, r, false).has_value());
  EXPECT_TRUE(g.on_request(kT0, r, true).has_value());
  // A holder that already saw term 3 is talking to a deposed leader.
  EXPECT_FALSE(g.on_request(kT0, LeaseRequest{"n1", 1, 2, 3}, true).has_value());
  g.step_down();
  EXPECT_FALSE(g.on_request(kT0, r, true).has_value());
  EXPECT_FALSE(g.may_replace("n1", kT0 + 1h));
  EXPECT_EQ(g.replace_after("n1"), kNever);
}

TEST(LeaseGranter, NewLeaderWaitsLeasePlusMarginSinceElectionThenTracksItsGrants) {
  LeaseGranter g(kLease, kMargin);
  g.become_leader(7, kT0);
  EXPECT_FALSE(g.may_replace("never-granted", kT0 + kLease + kMargin - 1ns));
  EXPECT_TRUE(g.may_replace("never-granted", kT0 + kLease + kMargin));
  // A grant pushes the node's time out.
  ASSERT_TRUE(g.on_request(kT0 + 20s, LeaseRequest{"n1", 1, 1, 0}, true).has_value());
  // Its own grant is known exactly: only the rate margin (1/50 of a lease) is added to it.
  const Duration rate = kLease / kRateMarginDivisor;
  EXPECT_FALSE(g.may_replace("n1", kT0 + 20s + rate + kLease - 1ns));
  EXPECT_TRUE(g.may_replace("n1", kT0 + 20s + rate + kLease));
  // A grant soon after the election: a deposed leader's grants may still be later.
  ASSERT_TRUE(g.on_request(kT0 + 1s, LeaseRequest{"n2", 1, 1, 0}, true).has_value());
  EXPECT_EQ(g.replace_after("n2"), kT0 + kMargin + kLease);
  // Re-election restarts the wait for everyone.
  g.become_leader(8, kT0 + 40s);
  EXPECT_FALSE(g.may_replace("n1", kT0 + 40s + kLease));
  EXPECT_TRUE(g.may_replace("n1", kT0 + 40s + kLease + kMargin));
}

// Property: a holder cut off from the leader at a random moment (requests and grants delayed,
// reordered or lost at random before that) has stopped its workers -- may_run false and
// stop_workers emitted -- strictly before the leader's may_replace turns true for it. Holder and
// leader clocks run at rates differing by up to 100 ppm (their offset is irrelevant: each side
// measures intervals on its own monotonic clock).
TEST(LeaseProperty, CutOffHolderStopsBeforeTheMajorityMayReplace) {
  std::mt19937_64 rng(20261126);
  auto uniform = [&](Duration lo, Duration hi) {
    std::uniform_int_distribution<std::int64_t> d(lo.count(), hi.count());
    return Duration(d(rng));
  };
  for (int trial = 0; trial < 2000; ++trial) {
    const Duration lease = uniform(1s, 20s);
    const Duration margin = lease / 1000 + 1ms;  // covers 100 ppm both ways, with room
    const double holder_rate =
        1.0 + static_cast<double>(static_cast<std::int64_t>(rng() % 201) - 100) * 1e-6;
    // Global ("true") time -> the holder's monotonic clock.
    const TimePoint holder_epoch = TimePoint{} + std::chrono::hours(1 + trial % 7);
    auto holder_clock = [&](Duration global) {
      return holder_epoch +
             Duration(static_cast<std::int64_t>(static_cast<double>(global.count()) * holder_rate));
    };
    LeaseHolder h("n1", 1, lease);
    LeaseGranter g(lease, margin);
    const TimePoint leader_epoch = kT0;  // leader clock = global time + this offset
    g.become_leader(1, leader_epoch);
    const Duration cut = uniform(0s, 5 * lease);  // the partition starts here
    const Duration max_delay = uniform(0s, lease);
    const double loss = static_cast<double>(rng() % 50) / 100.0;
    std::uniform_real_distribution<double> coin(0.0, 1.0);

    // Events in global time: pending grants (delivery time, grant).
    std::vector<std::pair<Duration, LeaseGrant>> in_flight;
    LeaseHolderEffects out;
    h.want(holder_clock(0s), out);
    Duration now = 0s;
    Duration stopped_at = Duration::max();
    const Duration step = lease / 200;
    for (; now < cut + 3 * lease; now += step) {
      const TimePoint hnow = holder_clock(now);
      // Deliver grants due by now (only those sent before the cut; the cut also drops replies).
      for (auto it = in_flight.begin(); it != in_flight.end();) {
        if (it->first > now) {
          ++it;
          continue;
        }
        h.on_grant(hnow, it->second, out);
        it = in_flight.erase(it);
      }
      h.tick(hnow, out);
      for (const LeaseRequest& r : out.requests) {
        if (now >= cut || coin(rng) < loss) continue;
        const Duration arrive = now + uniform(0s, max_delay);
        if (arrive >= cut) continue;  // the partition swallowed it
        auto grant = g.on_request(leader_epoch + arrive, r, true);
        if (!grant) continue;
        const Duration back = arrive + uniform(0s, max_delay);
        if (back >= cut || coin(rng) < loss) continue;
        in_flight.emplace_back(back, *grant);
      }
      if (out.stop_workers && stopped_at == Duration::max()) stopped_at = now;
      out = {};
      if (now >= cut && stopped_at == Duration::max() && h.may_run(hnow)) {
        ASSERT_FALSE(g.may_replace("n1", leader_epoch + now))
            << "trial " << trial << ": the leader may re-place n1 at " << to_ms(now)
            << " ms while its lease still runs";
      }
    }
    // Whether it ever held a lease or not, it may not run by the time the leader may re-place.
    const Duration replace = g.replace_after("n1") - leader_epoch;
    if (h.expiry() != TimePoint{}) {
      const double expiry_global =
          static_cast<double>((h.expiry() - holder_epoch).count()) / holder_rate;
      EXPECT_LT(expiry_global, static_cast<double>(replace.count())) << "trial " << trial;
    }
    EXPECT_FALSE(h.may_run(holder_clock(replace))) << "trial " << trial;
    if (stopped_at != Duration::max()) {
      EXPECT_LT(stopped_at, replace + step) << "trial " << trial;
    }
  }
}

}  // namespace
}  // namespace elastic::rendezvous
