// Membership (SWIM + Lifeguard): a few instances driven by hand through a tiny in-test router
// with manual time (1 ms links, per-link blocking, crashes), plus single instances fed
// hand-made messages where a path must be controlled exactly. No simulator, no sleeps.
#include "daemon/membership/membership.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace elastic::membership {
namespace {

using namespace std::chrono_literals;
using wire::MemberState;
using wire::MemberUpdate;

const TimePoint kStart = TimePoint{} + 1000h;

config::MembershipConfig test_config() {
  config::MembershipConfig c;  // the defaults: 1 s probes, 300 ms timeout, 200 ms gossip
  c.reconnect_interval = 5s;
  c.rejoin_interval = 10s;
  return c;
}

const char* type_name(const wire::MembershipMessage& m) {
  static constexpr const char* kNames[] = {"Ping", "Ack", "PingReq", "Nack", "Digest", "State"};
  return kNames[m.index()];
}

// ---- the router ------------------------------------------------------------------------------

class Net {
 public:
  struct Node {
    std::string name;
    std::string address;
    std::unique_ptr<Membership> m;
    bool up = true;
    std::vector<std::pair<TimePoint, MemberEvent>> events;
  };

  explicit Net(config::MembershipConfig config = test_config()) : config_(std::move(config)) {}

  Membership& add(const std::string& name, std::uint64_t generation = 1,
                  std::optional<std::string> address = std::nullopt) {
    const std::string addr = address.value_or(name + ":1");
    Node& n = nodes_[addr];
    n.name = name;
    n.address = addr;
    n.up = true;
    n.m =
        std::make_unique<Membership>(Self{.name = name, .generation = generation, .address = addr},
                                     config_, std::hash<std::string>{}(addr) ^ generation, now);
    by_name_[name] = addr;
    return *n.m;
  }
  void join(const std::string& name, std::vector<std::string> seeds) {
    Node& n = node(name);
    Effects e;
    n.m->join(now, seeds, e);
    dispatch(n, e);
  }
  void leave(const std::string& name) {
    Node& n = node(name);
    Effects e;
    n.m->leave(now, e);
    dispatch(n, e);
  }
  void crash(const std::string& name) { node(name).up = false; }
  void block(const std::string& from, const std::string& to) {
    blocked_.insert({node(from).address, node(to).address});
  }
  void block_both(const std::string& x, const std::string& y) {
    block(x, y);
    block(y, x);
  }
  void unblock_all() { blocked_.clear(); }

  Node& node(const std::string& name) { return nodes_.at(by_name_.at(name)); }
  Membership& m(const std::string& name) { return *node(name).m; }
  std::optional<MemberView> view(const std::string& observer, const std::string& subject) {
    return m(observer).member(subject);
  }
  std::vector<MemberEvent> events_about(const std::string& observer, const std::string& subject) {
    std::vector<MemberEvent> out;
    for (const auto& [t, e] : node(observer).events) {
      if (e.name == subject) out.push_back(e);
    }
    return out;
  }
  std::optional<TimePoint> first_event(const std::string& observer, const std::string& subject,
                                       MemberState state) {
    for (const auto& [t, e] : node(observer).events) {
      if (e.name == subject && e.state == state) return t;
    }
    return std::nullopt;
  }

  void run_for(Duration d) {
    const TimePoint end = now + d;
    for (int steps = 0; steps < 5'000'000; ++steps) {
      const TimePoint next_msg = flights_.empty() ? kNever : flights_.begin()->first.first;
      TimePoint next_timer = kNever;
      for (auto& [addr, n] : nodes_) {
        if (n.up) next_timer = std::min(next_timer, n.m->next_deadline());
      }
      const TimePoint next = std::min(next_msg, next_timer);
      if (next > end) {
        now = end;
        return;
      }
      now = std::max(now, next);
      if (next_msg <= next_timer) {
        auto it = flights_.begin();
        Flight f = std::move(it->second);
        flights_.erase(it);
        auto dest = nodes_.find(f.to_address);
        if (dest == nodes_.end() || !dest->second.up) continue;
        Effects e;
        dest->second.m->on_message(now, f.in, e);
        dispatch(dest->second, e);
      } else {
        for (auto& [addr, n] : nodes_) {
          if (!n.up || n.m->next_deadline() > now) continue;
          Effects e;
          n.m->tick(now, e);
          if (n.m->next_deadline() <= now) deadline_in_past = true;
          dispatch(n, e);
        }
      }
    }
    ADD_FAILURE() << "the router did not reach the end time";
  }

  bool all_see_all_alive(const std::vector<std::string>& names) {
    for (const auto& o : names) {
      for (const auto& s : names) {
        const auto v = view(o, s);
        if (!v || v->state != MemberState::kAlive) return false;
      }
    }
    return true;
  }

  TimePoint now = kStart;
  bool deadline_in_past = false;
  std::string log;  // every send, for the determinism test
  std::vector<std::tuple<TimePoint, std::string, std::string, std::string>>
      sends;  // t,from,to,type

 private:
  struct Flight {
    std::string to_address;
    Inbound in;
  };

  void dispatch(Node& from, Effects& e) {
    for (auto& ev : e.events) from.events.emplace_back(now, ev);
    for (auto& s : e.sends) {
      std::ostringstream line;
      line << (now - kStart).count() << ' ' << from.address << "->" << s.to_address << ' '
           << type_name(s.message);
      if (const auto* p = std::get_if<wire::Ping>(&s.message)) {
        line << " probe=" << p->probe << " n=" << p->updates.size();
      } else if (const auto* a = std::get_if<wire::Ack>(&s.message)) {
        line << " probe=" << a->probe << " n=" << a->updates.size();
      }
      log += line.str() + '\n';
      sends.emplace_back(now, from.address, s.to_address, type_name(s.message));
      if (blocked_.contains({from.address, s.to_address})) continue;
      flights_.emplace(std::make_pair(now + 1ms, ++seq_),
                       Flight{.to_address = s.to_address,
                              .in = Inbound{.from = from.name,
                                            .from_generation = from.m->self().generation,
                                            .from_address = from.address,
                                            .message = std::move(s.message)}});
    }
  }

  config::MembershipConfig config_;
  std::map<std::string, Node> nodes_;  // by address
  std::map<std::string, std::string> by_name_;
  std::set<std::pair<std::string, std::string>> blocked_;
  std::map<std::pair<TimePoint, std::uint64_t>, Flight> flights_;
  std::uint64_t seq_ = 0;
};

void start_cluster(Net& net, const std::vector<std::string>& names) {
  for (const auto& n : names) net.add(n);
  net.join(names[0], {});
  for (std::size_t i = 1; i < names.size(); ++i) net.join(names[i], {names[0] + ":1"});
  net.run_for(5s);
  ASSERT_TRUE(net.all_see_all_alive(names));
}

// ---- hand-driven helpers ----------------------------------------------------------------------

MemberUpdate alive(const std::string& name, std::uint64_t gen = 1, std::uint32_t inc = 0) {
  return MemberUpdate{.name = name,
                      .generation = gen,
                      .incarnation = inc,
                      .state = MemberState::kAlive,
                      .address = name + ":1",
                      .from = {}};
}
MemberUpdate verdict(MemberState state, const std::string& name, const std::string& from,
                     std::uint64_t gen = 1, std::uint32_t inc = 0) {
  MemberUpdate u = alive(name, gen, inc);
  u.state = state;
  u.from = from;
  return u;
}
Inbound from(const std::string& name, wire::MembershipMessage message, std::uint64_t gen = 1) {
  return Inbound{.from = name,
                 .from_generation = gen,
                 .from_address = name + ":1",
                 .message = std::move(message)};
}
Inbound gossip(const std::string& sender, std::vector<MemberUpdate> updates) {
  return from(sender, wire::Ack{.probe = 0, .updates = std::move(updates)});
}
MemberState state_of(const Membership& m, const std::string& name) {
  const auto v = m.member(name);
  EXPECT_TRUE(v.has_value()) << name;
  return v ? v->state : MemberState::kDead;
}

// Ticks `m` at its deadlines until `pred` holds for a send; returns that send and the time.
template <typename Pred>
std::optional<std::pair<TimePoint, Outgoing>> tick_until_send(Membership& m, TimePoint& now,
                                                              Pred pred, TimePoint limit) {
  while (true) {
    const TimePoint t = std::max(now, m.next_deadline());
    if (t > limit) return std::nullopt;
    now = t;
    Effects e;
    m.tick(now, e);
    for (auto& s : e.sends) {
      if (pred(s)) return std::make_pair(now, s);
    }
  }
}

// ---- tests ------------------------------------------------------------------------------------

TEST(MembershipTest, JoinThroughSeedConverges) {
  Net net;
  start_cluster(net, {"a", "b", "c"});
  for (const auto* o : {"a", "b", "c"}) {
    EXPECT_EQ(net.m(o).alive_count(), 3u) << o;
    EXPECT_EQ(net.m(o).members().size(), 3u) << o;
    for (const auto* s : {"a", "b", "c"}) {
      if (std::string(o) == s) continue;
      const auto events = net.events_about(o, s);
      ASSERT_EQ(events.size(), 1u) << o << " about " << s;
      EXPECT_EQ(events[0].state, MemberState::kAlive);
      EXPECT_EQ(events[0].address, std::string(s) + ":1");
    }
  }
  EXPECT_FALSE(net.deadline_in_past);
}

TEST(MembershipTest, SilentMemberIsSuspectedThenDeclaredDeadWithinTheTimeout) {
  Net net;
  start_cluster(net, {"a", "b", "c"});
  const TimePoint crashed = net.now;
  net.crash("c");
  net.run_for(15s);
  // N = 3: fewer than K + 2 members, so no confirmations are awaited: timeout = min = 4 s.
  const Duration timeout = Membership::suspicion_timeout(test_config(), 3, 0);
  EXPECT_EQ(timeout, 4s);
  int own_verdicts = 0;
  for (const auto* o : {"a", "b"}) {
    const auto suspected = net.first_event(o, "c", MemberState::kSuspect);
    const auto dead = net.first_event(o, "c", MemberState::kDead);
    ASSERT_TRUE(suspected && dead) << o;
    EXPECT_LE(*dead - *suspected, timeout) << o;
    // Found within two probe rounds (two peers, round-robin), then the suspicion timeout.
    EXPECT_LT(*dead - crashed, 3s + timeout + 500ms) << o;
    EXPECT_EQ(state_of(net.m(o), "c"), MemberState::kDead);
    if (net.m(o).stats().deaths == 1) {
      ++own_verdicts;
      EXPECT_EQ(*dead - *suspected, timeout) << o << " fired its own timer exactly";
    }
    EXPECT_EQ(net.m(o).alive_count(), 2u);
  }
  EXPECT_GE(own_verdicts, 1);
  EXPECT_FALSE(net.deadline_in_past);
}

TEST(MembershipTest, IndirectProbeSucceedsWhenOnlyTheDirectPathIsBroken) {
  Net net;
  start_cluster(net, {"a", "b", "c"});
  net.block_both("a", "c");
  const auto before = net.m("a").stats();
  net.run_for(30s);
  for (const auto* o : {"a", "b", "c"}) {
    for (const auto* s : {"a", "b", "c"}) {
      EXPECT_EQ(net.events_about(o, s).size(), std::string(o) == s ? 0u : 1u)
          << o << " about " << s << " changed state";
    }
    EXPECT_EQ(net.m(o).stats().suspicions, 0u) << o;
  }
  EXPECT_GT(net.m("a").stats().probe_timeouts, before.probe_timeouts);
  EXPECT_GT(net.m("a").stats().indirect_probes, before.indirect_probes);
  EXPECT_EQ(net.m("a").stats().local_health, 0);
  EXPECT_FALSE(net.deadline_in_past);
}

// A node that knows b, c and d; probes go nowhere, so the test answers (or not) by hand.
struct Prober {
  TimePoint now = kStart;
  config::MembershipConfig config = test_config();
  Membership a{Self{.name = "a", .generation = 1, .address = "a:1"}, config, 7, kStart};
  Prober() {
    Effects e;
    a.on_message(now,
                 from("b", wire::PushPullState{.members = {alive("b"), alive("c"), alive("d")},
                                               .join = false,
                                               .reply = true}),
                 e);
  }
  std::pair<TimePoint, wire::Ping> next_ping() {
    auto sent = tick_until_send(
        a, now, [](const Outgoing& o) { return std::holds_alternative<wire::Ping>(o.message); },
        now + 10s);
    EXPECT_TRUE(sent.has_value());
    return {sent->first, std::get<wire::Ping>(sent->second.message)};
  }
  std::vector<std::pair<std::string, wire::PingReq>> next_ping_reqs(TimePoint expected_at) {
    std::vector<std::pair<std::string, wire::PingReq>> reqs;
    while (reqs.empty()) {
      const TimePoint t = a.next_deadline();
      EXPECT_LE(t, expected_at);
      if (t > expected_at) break;
      now = t;
      Effects e;
      a.tick(now, e);
      for (auto& s : e.sends) {
        if (auto* r = std::get_if<wire::PingReq>(&s.message)) reqs.emplace_back(s.to, *r);
      }
    }
    EXPECT_EQ(now, expected_at);
    return reqs;
  }
  void run_until(TimePoint t, Effects& e) {
    while (a.next_deadline() <= t) {
      now = std::max(now, a.next_deadline());
      a.tick(now, e);
    }
    now = t;
  }
};

TEST(MembershipTest, RelayNacksKeepLocalHealthWhenTheTargetIsSilent) {
  Prober p;
  const auto [pinged_at, ping] = p.next_ping();
  const auto reqs = p.next_ping_reqs(pinged_at + p.config.probe_timeout);
  ASSERT_EQ(reqs.size(), 2u);  // the two members that are not the target (k = 3, only 2 exist)
  for (const auto& [to, req] : reqs) {
    EXPECT_EQ(req.target, ping.target);
    EXPECT_EQ(req.probe, ping.probe);
    EXPECT_TRUE(req.want_nack);
    EXPECT_NE(to, ping.target);
    Effects e;
    p.a.on_message(p.now, from(to, wire::Nack{.probe = req.probe}), e);
  }
  Effects e;
  p.run_until(pinged_at + p.config.probe_interval, e);
  EXPECT_EQ(p.a.stats().nacks_received, 2u);
  EXPECT_EQ(p.a.stats().local_health, 0);  // the relays answered: the target is the problem
  EXPECT_EQ(state_of(p.a, ping.target), MemberState::kSuspect);
  ASSERT_FALSE(e.events.empty());
  EXPECT_EQ(e.events[0].name, ping.target);
  EXPECT_EQ(e.events[0].state, MemberState::kSuspect);
}

TEST(MembershipTest, MissingNacksRaiseLocalHealthAndSlowTheNextProbe) {
  Prober p;
  const auto [pinged_at, ping] = p.next_ping();
  const auto reqs = p.next_ping_reqs(pinged_at + p.config.probe_timeout);
  ASSERT_EQ(reqs.size(), 2u);
  // No relay answers: two expected nacks are missing.
  const auto [second_at, second] = p.next_ping();
  EXPECT_EQ(second_at, pinged_at + p.config.probe_interval);
  EXPECT_EQ(p.a.stats().local_health, 2);
  // The scaled timeout: (1 + LHM) x probe_timeout before the indirect round.
  const auto before = p.a.stats().probe_timeouts;
  while (p.a.stats().probe_timeouts == before) {
    p.now = p.a.next_deadline();
    Effects e;
    p.a.tick(p.now, e);
  }
  EXPECT_EQ(p.now, second_at + 3 * p.config.probe_timeout);
  // A successful probe lowers the multiplier again.
  Effects e;
  p.a.on_message(p.now, from(second.target, wire::Ack{.probe = second.probe, .updates = {}}), e);
  EXPECT_EQ(p.a.stats().local_health, 1);
  // The maximum is awareness_max_multiplier - 1.
  for (int i = 0; i < 20; ++i) {
    p.next_ping();
  }
  EXPECT_EQ(p.a.stats().local_health, p.config.awareness_max_multiplier - 1);
}

TEST(MembershipTest, UnreachableTargetStartsTheIndirectRoundAtOnce) {
  Prober p;
  const auto [pinged_at, ping] = p.next_ping();
  Effects e;
  p.a.on_unreachable(p.now, ping.target + ":1", e);
  int reqs = 0;
  for (const auto& s : e.sends) reqs += std::holds_alternative<wire::PingReq>(s.message);
  EXPECT_EQ(reqs, 2);
  EXPECT_EQ(p.a.stats().probe_timeouts, 1u);
  EXPECT_EQ(state_of(p.a, ping.target), MemberState::kAlive);  // evidence, not a verdict
}

TEST(MembershipTest, RelayForwardsTheTargetsAckOrNacks) {
  TimePoint now = kStart;
  Membership b(Self{.name = "b", .generation = 1, .address = "b:1"}, test_config(), 3, now);
  Effects e;
  b.on_message(now,
               from("a", wire::PingReq{.probe = 41,
                                       .target = "c",
                                       .target_generation = 1,
                                       .target_address = "c:1",
                                       .want_nack = true,
                                       .updates = {alive("c")}}),
               e);
  ASSERT_EQ(e.sends.size(), 1u);
  const auto* ping = std::get_if<wire::Ping>(&e.sends[0].message);
  ASSERT_NE(ping, nullptr);
  EXPECT_EQ(e.sends[0].to_address, "c:1");
  Effects forwarded;
  b.on_message(now + 5ms, from("c", wire::Ack{.probe = ping->probe, .updates = {}}), forwarded);
  ASSERT_EQ(forwarded.sends.size(), 1u);
  EXPECT_EQ(forwarded.sends[0].to_address, "a:1");
  EXPECT_EQ(std::get<wire::Ack>(forwarded.sends[0].message).probe, 41u);

  // A second request whose target stays silent gets a Nack at 0.8 x probe_timeout.
  Effects e2;
  b.on_message(now,
               from("a", wire::PingReq{.probe = 42,
                                       .target = "c",
                                       .target_generation = 1,
                                       .target_address = "c:1",
                                       .want_nack = true,
                                       .updates = {}}),
               e2);
  EXPECT_LE(b.next_deadline(), now + test_config().probe_timeout * 4 / 5);
  TimePoint t = now;
  auto nack = tick_until_send(
      b, t, [](const Outgoing& o) { return std::holds_alternative<wire::Nack>(o.message); },
      now + 1s);
  ASSERT_TRUE(nack.has_value());
  EXPECT_EQ(nack->first, now + test_config().probe_timeout * 4 / 5);
  EXPECT_EQ(std::get<wire::Nack>(nack->second.message).probe, 42u);
}

TEST(MembershipTest, SuspectedNodeRefutesWithAHigherIncarnation) {
  Net net;
  start_cluster(net, {"a", "b", "c"});
  net.block("a", "c");
  net.block("b", "c");
  net.run_for(3500ms);  // c hears nothing: its probers suspect it (timeout 4 s, not yet dead)
  ASSERT_TRUE(net.first_event("a", "c", MemberState::kSuspect) ||
              net.first_event("b", "c", MemberState::kSuspect));
  net.unblock_all();
  net.run_for(10s);
  EXPECT_GE(net.m("c").stats().refutations, 1u);
  const auto self_view = net.view("c", "c");
  ASSERT_TRUE(self_view);
  EXPECT_GE(self_view->incarnation, 1u);
  for (const auto* o : {"a", "b"}) {
    const auto v = net.view(o, "c");
    ASSERT_TRUE(v);
    EXPECT_EQ(v->state, MemberState::kAlive) << o;
    EXPECT_EQ(v->incarnation, self_view->incarnation) << o;
    EXPECT_FALSE(net.first_event(o, "c", MemberState::kDead)) << o;
    EXPECT_EQ(net.events_about(o, "c").back().state, MemberState::kAlive);
  }
  EXPECT_FALSE(net.deadline_in_past);
}

TEST(MembershipTest, SuspicionTimeoutFollowsLifeguardFormula) {
  const auto c = test_config();  // multiplier 4, max multiplier 6, probe interval 1 s
  EXPECT_EQ(Membership::suspicion_timeout(c, 1, 0), 4s);
  EXPECT_EQ(Membership::suspicion_timeout(c, 3, 0), 4s);  // n - 2 < K: no confirmations awaited
  EXPECT_EQ(Membership::suspicion_timeout(c, 100, 0), 48s);
  EXPECT_EQ(Membership::suspicion_timeout(c, 100, 1), 22762ms);  // 48 - 40 ln2/ln3, floored
  EXPECT_EQ(Membership::suspicion_timeout(c, 100, 2), 8s);
  EXPECT_EQ(Membership::suspicion_timeout(c, 100, 5), 8s);
  EXPECT_EQ(Membership::suspicion_timeout(c, 1000, 0), 72s);
  EXPECT_EQ(Membership::suspicion_timeout(c, 1000, 1), 34144ms);  // 72 - 60 ln2/ln3
  EXPECT_EQ(Membership::suspicion_timeout(c, 1000, 2), 12s);
  EXPECT_EQ(Membership::retransmit_limit(c, 3), 4);
  EXPECT_EQ(Membership::retransmit_limit(c, 11), 8);
  EXPECT_EQ(Membership::retransmit_limit(c, 1000), 16);  // ceil(log10(1001)) = 4
  EXPECT_EQ(Membership::push_pull_period(c, 32), 30s);
  EXPECT_EQ(Membership::push_pull_period(c, 33), 60s);
  EXPECT_EQ(Membership::push_pull_period(c, 64), 60s);
  EXPECT_EQ(Membership::push_pull_period(c, 4096), 240s);
}

TEST(MembershipTest, IndependentConfirmationsShortenTheSuspicion) {
  TimePoint now = kStart;
  Membership a(Self{.name = "a", .generation = 1, .address = "a:1"}, test_config(), 11, now);
  std::vector<MemberUpdate> others;
  for (int i = 1; i < 100; ++i) others.push_back(alive("m" + std::to_string(i)));
  Effects e;
  a.on_message(now,
               from("m1", wire::PushPullState{.members = others, .join = false, .reply = true}), e);
  ASSERT_EQ(a.alive_count(), 100u);
  const TimePoint t1 = now + 1ms;
  // y: accused by three distinct members -> C = 2 = K -> min (8 s).
  for (const auto* accuser : {"m1", "m2", "m3"}) {
    a.on_message(t1, gossip(accuser, {verdict(MemberState::kSuspect, "m50", accuser)}), e);
  }
  // x: accused by m1, re-accused by m1 (not independent), confirmed by m2 one second later.
  a.on_message(t1, gossip("m1", {verdict(MemberState::kSuspect, "m60", "m1")}), e);
  a.on_message(t1 + 500ms, gossip("m1", {verdict(MemberState::kSuspect, "m60", "m1")}), e);
  a.on_message(t1 + 1s, gossip("m2", {verdict(MemberState::kSuspect, "m60", "m2")}), e);
  const auto tick_at = [&](TimePoint t) {
    Effects te;
    a.tick(t, te);
  };
  tick_at(t1 + 8s - 1ms);
  EXPECT_EQ(state_of(a, "m50"), MemberState::kSuspect);
  tick_at(t1 + 8s);
  EXPECT_EQ(state_of(a, "m50"), MemberState::kDead);
  EXPECT_EQ(state_of(a, "m60"), MemberState::kSuspect);
  tick_at(t1 + 22762ms - 1ms);
  EXPECT_EQ(state_of(a, "m60"), MemberState::kSuspect);
  tick_at(t1 + 22762ms);
  EXPECT_EQ(state_of(a, "m60"), MemberState::kDead);
  EXPECT_EQ(a.stats().deaths, 2u);
}

// Regression (membership_bench, 500 nodes at 5% loss: ~5 false deaths per 1k node-hours): a
// node whose copy of the suspect's refutation was lost in the epidemic's tail kept its
// unconfirmed suspicion for the full maximum timeout and declared a live node dead. It now
// Pings the suspect with its verdict kSuspicionLastCalls probe_timeouts before the deadline; the
// answer carries the refutation.
TEST(MembershipTest, SuspicionMakesLastCallsToTheSuspectBeforeItsDeadline) {
  const config::MembershipConfig config = test_config();
  for (const bool suspect_answers : {true, false}) {
    TimePoint now = kStart;
    Membership a(Self{.name = "a", .generation = 1, .address = "a:1"}, config, 11, now);
    std::vector<MemberUpdate> others;
    for (int i = 1; i < 100; ++i) others.push_back(alive("m" + std::to_string(i)));
    Effects e;
    a.on_message(
        now, from("m1", wire::PushPullState{.members = others, .join = false, .reply = true}), e);
    const TimePoint t1 = now + 1ms;
    a.on_message(t1, gossip("m1", {verdict(MemberState::kSuspect, "m60", "m1")}), e);
    ASSERT_EQ(state_of(a, "m60"), MemberState::kSuspect);
    const TimePoint deadline = t1 + Membership::suspicion_timeout(config, 100, 0);
    std::vector<TimePoint> calls;
    while (true) {
      const TimePoint t = a.next_deadline();
      ASSERT_GT(t, now);
      if (t > deadline) break;
      now = t;
      Effects te;
      a.tick(now, te);
      for (const auto& out : te.sends) {
        const auto* ping = std::get_if<wire::Ping>(&out.message);
        if (out.to != "m60" || ping == nullptr || ping->target != "m60") continue;
        // The verdict rides first, so the suspect can refute.
        ASSERT_FALSE(ping->updates.empty());
        EXPECT_EQ(ping->updates.front().name, "m60");
        EXPECT_EQ(ping->updates.front().state, MemberState::kSuspect);
        calls.push_back(now);
        if (suspect_answers) {
          // m60 refuted long ago (incarnation 1); the Ack re-sends that refutation.
          a.on_message(
              now + 1ms,
              from("m60", wire::Ack{.probe = ping->probe, .updates = {alive("m60", 1, 1)}}), te);
        }
      }
      if (state_of(a, "m60") != MemberState::kSuspect) break;
    }
    ASSERT_FALSE(calls.empty()) << "no last call before the deadline";
    EXPECT_EQ(calls.front(), deadline - config.probe_timeout * Membership::kSuspicionLastCalls);
    if (suspect_answers) {
      EXPECT_EQ(calls.size(), 1u);
      EXPECT_EQ(state_of(a, "m60"), MemberState::kAlive);
      Effects te;
      a.tick(deadline, te);
      EXPECT_EQ(state_of(a, "m60"), MemberState::kAlive);
      EXPECT_EQ(a.stats().deaths, 0u);
    } else {
      // Silence: every last call made, then dead exactly at the deadline (not later).
      EXPECT_EQ(calls.size(), static_cast<std::size_t>(Membership::kSuspicionLastCalls));
      EXPECT_EQ(calls.back(), deadline - config.probe_timeout);
      Effects te;
      a.tick(deadline, te);
      EXPECT_EQ(state_of(a, "m60"), MemberState::kDead);
      EXPECT_EQ(a.stats().deaths, 1u);
    }
  }
}

TEST(MembershipTest, RestartedNodeReplacesItsTombstoneWithANewAddress) {
  Net net;
  start_cluster(net, {"a", "b", "c"});
  net.crash("c");
  net.run_for(15s);
  ASSERT_EQ(state_of(net.m("a"), "c"), MemberState::kDead);
  ASSERT_EQ(state_of(net.m("b"), "c"), MemberState::kDead);
  net.add("c", 2, "c:2");
  net.join("c", {"a:1"});
  net.run_for(5s);
  for (const auto* o : {"a", "b"}) {
    const auto v = net.view(o, "c");
    ASSERT_TRUE(v);
    EXPECT_EQ(v->state, MemberState::kAlive) << o;
    EXPECT_EQ(v->generation, 2u) << o;
    EXPECT_EQ(v->address, "c:2") << o;
    const auto last = net.events_about(o, "c").back();
    EXPECT_EQ(last.state, MemberState::kAlive);
    EXPECT_EQ(last.generation, 2u);
  }
  EXPECT_TRUE(net.all_see_all_alive({"a", "b", "c"}));
  EXPECT_FALSE(net.deadline_in_past);
}

TEST(MembershipTest, DeadGenerationNeverRevivesFromStaleAlive) {
  TimePoint now = kStart;
  Membership a(Self{.name = "a", .generation = 1, .address = "a:1"}, test_config(), 5, now);
  Effects e;
  a.on_message(now, gossip("b", {alive("c", 1, 0)}), e);
  a.on_message(now, gossip("b", {verdict(MemberState::kDead, "c", "b", 1, 0)}), e);
  ASSERT_EQ(state_of(a, "c"), MemberState::kDead);
  Effects after;
  a.on_message(now, gossip("b", {alive("c", 1, 0)}), after);  // replayed alive, same version
  a.on_message(now, gossip("b", {alive("c", 0, 9)}), after);  // an older generation
  a.on_message(now, gossip("b", {verdict(MemberState::kSuspect, "c", "b", 1, 0)}), after);
  EXPECT_EQ(state_of(a, "c"), MemberState::kDead);
  EXPECT_TRUE(after.events.empty());
  // A ping from the dead generation itself does not revive it; the answer tells it the verdict.
  Effects pinged;
  a.on_message(
      now, from("c", wire::Ping{.probe = 9, .target = "a", .target_generation = 1, .updates = {}}),
      pinged);
  EXPECT_EQ(state_of(a, "c"), MemberState::kDead);
  ASSERT_EQ(pinged.sends.size(), 1u);
  const auto& ack = std::get<wire::Ack>(pinged.sends[0].message);
  ASSERT_FALSE(ack.updates.empty());
  EXPECT_EQ(ack.updates[0], verdict(MemberState::kDead, "c", "b", 1, 0));
  // Its own refutation (a higher incarnation) does.
  Effects refuted;
  a.on_message(now, gossip("b", {alive("c", 1, 1)}), refuted);
  EXPECT_EQ(state_of(a, "c"), MemberState::kAlive);
  ASSERT_EQ(refuted.events.size(), 1u);
  // A dead for generation 1 never applies to generation 2.
  a.on_message(now, gossip("b", {alive("c", 2, 0)}), e);
  a.on_message(now, gossip("b", {verdict(MemberState::kDead, "c", "b", 1, 7)}), e);
  EXPECT_EQ(state_of(a, "c"), MemberState::kAlive);
  EXPECT_EQ(a.member("c")->generation, 2u);
  // Messages from the older generation are stale and dropped unanswered.
  Effects stale;
  a.on_message(
      now,
      from("c", wire::Ping{.probe = 10, .target = "a", .target_generation = 1, .updates = {}}, 1),
      stale);
  EXPECT_TRUE(stale.sends.empty());
  // A tombstone heard about a member never seen also blocks its replayed alive.
  a.on_message(now, gossip("b", {verdict(MemberState::kDead, "z", "b", 3, 2)}), e);
  a.on_message(now, gossip("b", {alive("z", 3, 2)}), e);
  EXPECT_EQ(state_of(a, "z"), MemberState::kDead);
}

TEST(MembershipTest, GracefulLeaveIsLeftEverywhereNotDead) {
  Net net;
  start_cluster(net, {"a", "b", "c"});
  net.leave("c");
  const TimePoint left_at = net.now;
  net.run_for(20s);
  for (const auto* o : {"a", "b"}) {
    EXPECT_EQ(state_of(net.m(o), "c"), MemberState::kLeft) << o;
    EXPECT_FALSE(net.first_event(o, "c", MemberState::kDead)) << o;
    EXPECT_FALSE(net.first_event(o, "c", MemberState::kSuspect)) << o;
    EXPECT_EQ(net.events_about(o, "c").back().state, MemberState::kLeft) << o;
    EXPECT_EQ(net.m(o).alive_count(), 2u);
  }
  EXPECT_EQ(state_of(net.m("c"), "c"), MemberState::kLeft);
  int late_pings = 0;
  for (const auto& [t, f, to, type] : net.sends) {
    if (t > left_at + 2s && to == "c:1" && type == std::string("Ping")) ++late_pings;
  }
  EXPECT_EQ(late_pings, 0);
  EXPECT_FALSE(net.deadline_in_past);
}

TEST(MembershipTest, PushPullDigestMismatchExchangesFullStateToTheSameView) {
  config::MembershipConfig c = test_config();
  c.push_pull_interval = 100ms;
  c.probe_interval = 1h;  // nothing but push-pull in the way
  c.gossip_interval = 1h;
  TimePoint now = kStart;
  Membership a(Self{.name = "a", .generation = 1, .address = "a:1"}, c, 1, now);
  Membership b(Self{.name = "b", .generation = 1, .address = "b:1"}, c, 2, now);
  Effects e;
  a.on_message(now, gossip("b", {alive("x", 1, 2)}), e);
  b.on_message(now, gossip("a", {alive("x", 1, 0), alive("z", 1, 0)}), e);
  ASSERT_NE(a.digest(), b.digest());
  auto digest = tick_until_send(
      a, now,
      [](const Outgoing& o) {
        return o.to == "b" && std::holds_alternative<wire::PushPullDigest>(o.message);
      },
      now + 10s);
  ASSERT_TRUE(digest);
  Effects r1;
  b.on_message(now, from("a", digest->second.message), r1);
  ASSERT_EQ(r1.sends.size(), 1u);
  const auto& state = std::get<wire::PushPullState>(r1.sends[0].message);
  EXPECT_FALSE(state.reply);
  Effects r2;
  a.on_message(now, from("b", r1.sends[0].message), r2);
  ASSERT_EQ(r2.sends.size(), 1u);  // a knew more than b: it sends its state back
  EXPECT_TRUE(std::get<wire::PushPullState>(r2.sends[0].message).reply);
  Effects r3;
  b.on_message(now, from("a", r2.sends[0].message), r3);
  EXPECT_TRUE(r3.sends.empty());  // a reply is never answered
  EXPECT_EQ(a.digest(), b.digest());
  const auto va = a.members();
  const auto vb = b.members();
  ASSERT_EQ(va.size(), 4u);
  ASSERT_EQ(vb.size(), 4u);
  for (std::size_t i = 0; i < va.size(); ++i) {
    EXPECT_EQ(va[i].name, vb[i].name);
    EXPECT_EQ(va[i].generation, vb[i].generation);
    EXPECT_EQ(va[i].incarnation, vb[i].incarnation);
    EXPECT_EQ(va[i].state, vb[i].state);
  }
  EXPECT_EQ(a.member("x")->incarnation, 2u);
  // Equal digests: the receiver stays silent.
  Effects quiet;
  b.on_message(now,
               from("a", wire::PushPullDigest{.digest = a.digest(), .members = 4, .reply = false}),
               quiet);
  EXPECT_TRUE(quiet.sends.empty());
}

TEST(MembershipTest, PushPullDeadAboutALiveMemberOnlyStartsASuspicion) {
  TimePoint now = kStart;
  Membership a(Self{.name = "a", .generation = 1, .address = "a:1"}, test_config(), 1, now);
  Effects e;
  a.on_message(now, gossip("b", {alive("w")}), e);
  Effects merged;
  a.on_message(
      now,
      from("b", wire::PushPullState{.members = {alive("b"), verdict(MemberState::kDead, "w", "b")},
                                    .join = false,
                                    .reply = true}),
      merged);
  EXPECT_EQ(state_of(a, "w"), MemberState::kSuspect);
  ASSERT_EQ(merged.events.size(), 1u);
  EXPECT_EQ(merged.events[0].state, MemberState::kSuspect);
  EXPECT_EQ(a.stats().deaths, 0u);
}

// Counts how often each update was sent until the queue drains.
std::map<std::string, int> drain_gossip(Membership& a, TimePoint& now,
                                        std::size_t& max_per_message) {
  std::map<std::string, int> transmissions;
  for (int i = 0; i < 10000 && a.queued_updates() > 0; ++i) {
    now = std::max(now, a.next_deadline());
    Effects e;
    a.tick(now, e);
    for (const auto& s : e.sends) {
      std::visit(
          [&](const auto& m) {
            if constexpr (requires { m.updates; }) {
              max_per_message = std::max(max_per_message, m.updates.size());
              for (const auto& u : m.updates) ++transmissions[u.name];
            }
          },
          s.message);
    }
  }
  return transmissions;
}

TEST(MembershipTest, RetransmitLimitIsHonouredAndMessagesStaySmall) {
  for (const int peers : {10, 40}) {
    config::MembershipConfig c = test_config();
    c.probe_interval = 1h;
    c.push_pull_interval = 1h;
    c.reconnect_interval = 1h;
    TimePoint now = kStart;
    Membership a(Self{.name = "a", .generation = 1, .address = "a:1"}, c, 9, now);
    std::vector<MemberUpdate> updates;
    for (int i = 1; i < peers; ++i) updates.push_back(alive("m" + std::to_string(i)));
    Effects e;
    a.on_message(
        now, from("m0", wire::PushPullState{.members = updates, .join = false, .reply = true}), e);
    ASSERT_EQ(a.alive_count(), static_cast<std::size_t>(peers) + 1);
    ASSERT_EQ(a.queued_updates(), static_cast<std::size_t>(peers));
    std::size_t max_per_message = 0;
    const auto transmissions = drain_gossip(a, now, max_per_message);
    EXPECT_EQ(a.queued_updates(), 0u);
    const int limit = Membership::retransmit_limit(c, peers + 1);
    EXPECT_EQ(limit, 8);
    ASSERT_EQ(transmissions.size(), static_cast<std::size_t>(peers));
    for (const auto& [name, count] : transmissions) EXPECT_EQ(count, limit) << name;
    EXPECT_LE(max_per_message, Membership::kMaxPiggybackUpdates);
    if (peers == 40) {
      EXPECT_EQ(max_per_message, Membership::kMaxPiggybackUpdates);
    }
  }
}

TEST(MembershipTest, NewerUpdateReplacesTheQueuedOne) {
  config::MembershipConfig c = test_config();
  c.probe_interval = 1h;
  TimePoint now = kStart;
  Membership a(Self{.name = "a", .generation = 1, .address = "a:1"}, c, 9, now);
  Effects e;
  a.on_message(now, gossip("b", {alive("c")}), e);
  const auto queued = a.queued_updates();
  a.on_message(now, gossip("b", {verdict(MemberState::kDead, "c", "b")}), e);
  EXPECT_EQ(a.queued_updates(), queued);
  std::size_t max_per_message = 0;
  std::vector<MemberUpdate> about_c;
  for (int i = 0; i < 100 && a.queued_updates() > 0; ++i) {
    now = std::max(now, a.next_deadline());
    Effects te;
    a.tick(now, te);
    for (const auto& s : te.sends) {
      if (const auto* ack = std::get_if<wire::Ack>(&s.message)) {
        for (const auto& u : ack->updates) {
          if (u.name == "c") about_c.push_back(u);
        }
      }
    }
  }
  (void)max_per_message;
  ASSERT_FALSE(about_c.empty());
  for (const auto& u : about_c) EXPECT_EQ(u.state, MemberState::kDead);
}

TEST(MembershipTest, HealedPartitionMerges) {
  Net net;
  start_cluster(net, {"a", "b", "c", "d"});
  for (const auto* x : {"a", "b"}) {
    for (const auto* y : {"c", "d"}) net.block_both(x, y);
  }
  net.run_for(30s);
  ASSERT_EQ(state_of(net.m("a"), "c"), MemberState::kDead);
  ASSERT_EQ(state_of(net.m("c"), "a"), MemberState::kDead);
  net.unblock_all();
  net.run_for(60s);
  EXPECT_TRUE(net.all_see_all_alive({"a", "b", "c", "d"}));
  EXPECT_FALSE(net.deadline_in_past);
}

// Above 64 members random picks sample instead of shuffling; crash three, restart them.
TEST(MembershipTest, EightyNodesConvergeDetectCrashesAndReadmitRestarts) {
  Net net;
  std::vector<std::string> names;
  for (int i = 0; i < 80; ++i) names.push_back("n" + std::to_string(i));
  for (const auto& n : names) net.add(n);
  net.join(names[0], {});
  for (std::size_t i = 1; i < names.size(); ++i) net.join(names[i], {names[0] + ":1"});
  // Gossip alone may miss a pair in a join storm (each update is sent a bounded number of
  // times); push-pull (every 30 s) repairs it.
  net.run_for(35s);
  ASSERT_TRUE(net.all_see_all_alive(names));
  for (const auto& o : names) EXPECT_EQ(net.m(o).stats().suspicions, 0u) << o;
  const std::vector<std::string> crashed = {"n7", "n42", "n79"};
  for (const auto& n : crashed) net.crash(n);
  // log10(80) = 1.9: min 7.6 s, max 45.6 s; confirmations arrive from the many probers.
  net.run_for(40s);
  for (const auto& o : names) {
    if (std::find(crashed.begin(), crashed.end(), o) != crashed.end()) continue;
    for (const auto& c : crashed) {
      EXPECT_EQ(state_of(net.m(o), c), MemberState::kDead) << o << " about " << c;
    }
    EXPECT_EQ(net.m(o).alive_count(), 77u) << o;
  }
  for (const auto& n : crashed) {
    net.add(n, 2);
    net.join(n, {"n0:1"});
  }
  net.run_for(35s);
  EXPECT_TRUE(net.all_see_all_alive(names));
  for (const auto& o : names) {
    for (const auto& m : net.m(o).members()) {
      EXPECT_EQ(m.generation,
                std::find(crashed.begin(), crashed.end(), m.name) != crashed.end() ? 2u : 1u);
    }
  }
  EXPECT_FALSE(net.deadline_in_past);
}

TEST(MembershipTest, SameSeedGivesTheSameSends) {
  const auto run = [] {
    Net net;
    for (const auto* n : {"a", "b", "c", "d", "e"}) net.add(n);
    net.join("a", {});
    for (const auto* n : {"b", "c", "d", "e"}) net.join(n, {"a:1"});
    net.run_for(5s);
    net.crash("d");
    net.block_both("a", "e");
    net.run_for(30s);
    return net.log;
  };
  const std::string first = run();
  EXPECT_GT(first.size(), 1000u);
  EXPECT_EQ(first, run());
}

TEST(MembershipTest, NextDeadlineIsNeverInThePastAfterTick) {
  Net net;
  start_cluster(net, {"a", "b", "c", "d"});
  net.crash("b");
  net.run_for(40s);
  EXPECT_FALSE(net.deadline_in_past);
  TimePoint now = kStart;
  Membership alone(Self{.name = "x", .generation = 1, .address = "x:1"}, test_config(), 1, now);
  for (int i = 0; i < 200; ++i) {
    now = std::max(now, alone.next_deadline());
    Effects e;
    alone.tick(now, e);
    ASSERT_GT(alone.next_deadline(), now);
  }
}

TEST(MembershipTest, RejoinsSeedsUntilOneIsAMember) {
  Net net;
  net.add("a");
  net.add("b");
  net.join("a", {});
  net.block("b", "a");  // b's first join is lost
  net.join("b", {"a:1"});
  net.run_for(2s);
  EXPECT_FALSE(net.view("b", "a"));
  net.unblock_all();
  net.run_for(test_config().rejoin_interval + 2s);
  EXPECT_TRUE(net.all_see_all_alive({"a", "b"}));
}

TEST(MembershipTest, TombstonesExpireAfterTheirTtl) {
  config::MembershipConfig c = test_config();
  c.tombstone_ttl = 10min;
  TimePoint now = kStart;
  Membership a(Self{.name = "a", .generation = 1, .address = "a:1"}, c, 5, now);
  Effects e;
  a.on_message(now, gossip("b", {alive("c"), verdict(MemberState::kDead, "c", "b")}), e);
  ASSERT_EQ(state_of(a, "c"), MemberState::kDead);
  while (now < kStart + 10min) {
    now = a.next_deadline();
    a.tick(now, e);
  }
  EXPECT_FALSE(a.member("c"));
  EXPECT_TRUE(a.member("b"));
}

TEST(MembershipTest, NameTableStoresEachStringOnceAndFreesItWithItsLastRef) {
  NameTable table;
  {
    const NameTable::Ref a = table.intern("gpu-node-0001.cluster.example");
    NameTable::Ref b = table.intern(std::string("gpu-node-0001.cluster.example"));
    const NameTable::Ref c = table.intern("gpu-node-0002.cluster.example");
    EXPECT_EQ(a, b);
    EXPECT_FALSE(a == c);
    EXPECT_EQ(a.str(), "gpu-node-0001.cluster.example");
    EXPECT_EQ(a.hash(), NameTable::hash_of("gpu-node-0001.cluster.example"));
    EXPECT_EQ(table.size(), 2u);
    b = c;  // a still holds the first string
    EXPECT_EQ(table.size(), 2u);
    EXPECT_FALSE(table.intern(""));
    EXPECT_EQ(table.intern("").str(), "");
  }
  EXPECT_EQ(table.size(), 0u);
}

std::vector<MemberUpdate> numbered_members(std::size_t n, const std::string& prefix = "m") {
  std::vector<MemberUpdate> list;
  for (std::size_t i = 0; i < n; ++i) list.push_back(alive(prefix + std::to_string(i)));
  return list;
}

TEST(MembershipTest, SeedMembersBootstrapsSilentlyAndTheNodeWorksAsUsual) {
  TimePoint now = kStart;
  Membership a(Self{.name = "m0", .generation = 1, .address = "m0:1"}, test_config(), 5, now);
  std::vector<MemberUpdate> list = numbered_members(200);  // includes a itself (m0)
  list.push_back(list[7]);                                 // a duplicate is skipped
  list.push_back(verdict(MemberState::kDead, "gone", "m3"));
  list.push_back(MemberUpdate{});  // an empty name is skipped
  a.seed_members(now, list);
  EXPECT_EQ(a.member_count(), 201u);  // 200 + the tombstone of "gone"
  EXPECT_EQ(a.alive_count(), 200u);
  EXPECT_EQ(a.queued_updates(), 0u);  // nothing to gossip: a quiet start
  EXPECT_EQ(state_of(a, "gone"), MemberState::kDead);
  EXPECT_EQ(a.member("m150")->address, "m150:1");
  const auto views = a.members();
  EXPECT_TRUE(
      std::is_sorted(views.begin(), views.end(),
                     [](const MemberView& x, const MemberView& y) { return x.name < y.name; }));

  // It probes the seeded members, and a suspicion about itself is refuted and gossiped.
  // (Nobody answers here, so its probes time out and slow down: two in 5 s.)
  std::set<std::string> probed;
  while (now < kStart + 5s) {
    now = a.next_deadline();
    Effects e;
    a.tick(now, e);
    for (const auto& s : e.sends) {
      if (std::holds_alternative<wire::Ping>(s.message)) probed.insert(s.to);
    }
  }
  EXPECT_GE(probed.size(), 2u);
  for (const auto& name : probed) EXPECT_TRUE(a.member(name)) << name;
  Effects e;
  a.on_message(now, gossip("m9", {verdict(MemberState::kSuspect, "m0", "m9")}), e);
  EXPECT_EQ(a.member("m0")->incarnation, 1u);
  EXPECT_GE(a.queued_updates(), 1u);
}

// The open-addressing index with backward-shift deletion: many removals and slot reuse must keep
// every member findable and every removed one gone.
TEST(MembershipTest, RecordIndexSurvivesRemovalsAndReuse) {
  config::MembershipConfig c = test_config();
  c.tombstone_ttl = 1min;
  TimePoint now = kStart;
  Membership a(Self{.name = "self", .generation = 1, .address = "self:1"}, c, 9, now);
  a.seed_members(now, numbered_members(600));
  Effects e;
  std::vector<MemberUpdate> deaths;
  for (std::size_t i = 0; i < 600; i += 3) {
    deaths.push_back(verdict(MemberState::kDead, "m" + std::to_string(i), "m1"));
  }
  a.on_message(now, gossip("m1", deaths), e);
  while (now < kStart + 2min) {
    now = a.next_deadline();
    a.tick(now, e);
  }
  for (std::size_t i = 0; i < 600; ++i) {
    EXPECT_EQ(a.member("m" + std::to_string(i)).has_value(), i % 3 != 0) << i;
  }
  EXPECT_EQ(a.member_count(), 401u);
  a.seed_members(now, numbered_members(450, "new"));  // reuses the 200 free slots, then grows
  EXPECT_EQ(a.member_count(), 851u);
  for (std::size_t i = 0; i < 450; ++i) EXPECT_TRUE(a.member("new" + std::to_string(i))) << i;
  for (std::size_t i = 1; i < 600; i += 3) EXPECT_TRUE(a.member("m" + std::to_string(i))) << i;
  EXPECT_FALSE(a.member("m0"));
  EXPECT_EQ(a.members().size(), 851u);
}

TEST(MembershipTest, InstancesSharingANameTableStoreEachNameOnce) {
  auto table = std::make_shared<NameTable>();
  {
    std::vector<std::unique_ptr<Membership>> nodes;
    const auto list = numbered_members(50);
    for (std::size_t i = 0; i < 50; ++i) {
      const std::string name = "m" + std::to_string(i);
      nodes.push_back(
          std::make_unique<Membership>(Self{.name = name, .generation = 1, .address = name + ":1"},
                                       test_config(), i, kStart, table));
      nodes.back()->seed_members(kStart, list);
    }
    EXPECT_EQ(table->size(), 100u);  // 50 names and 50 addresses, for 2,500 records
    EXPECT_EQ(nodes[3]->digest(), nodes[40]->digest());  // the same view, order-independent
  }
  EXPECT_EQ(table->size(), 0u);
}

}  // namespace
}  // namespace elastic::membership
