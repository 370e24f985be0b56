// JobWatch rules with several instances, a tiny in-test router and manual time: keepalives,
// silence -> suspicion -> declaration, clearing through helpers, disconnects, worker exits,
// restarts, stale rounds, and exactly one declaration per peer per round.
#include "daemon/rendezvous/job_watch.h"

#include <gtest/gtest.h>

#include <chrono>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/support/result_assertions.h"

namespace elastic::rendezvous {
namespace {

using namespace std::chrono_literals;

constexpr Duration kLatency = 1ms;

// N daemons "d0".."d<n-1>" in one round of job "j"; messages arrive kLatency after sending.
class Round {
 public:
  explicit Round(int n, JobWatchConfig config = {}) {
    for (int i = 0; i < n; ++i) {
      peers_.push_back(JobPeer{name(i), 1, "addr-" + name(i)});
    }
    for (int i = 0; i < n; ++i) {
      watches_.emplace(name(i), JobWatch(name(i), 1, config, 100 + static_cast<std::uint64_t>(i)));
    }
    for (int i = 0; i < n; ++i) {
      JobWatchEffects out;
      EXPECT_OK(watches_.at(name(i)).set_round(now_, "j", 3, 7, peers_, out));
      absorb(name(i), out);
    }
  }

  static std::string name(int i) { return "d" + std::to_string(i); }
  JobWatch& at(int i) { return watches_.at(name(i)); }
  TimePoint now() const { return now_; }
  const std::vector<PeerLost>& lost(int i) { return lost_[name(i)]; }

  void crash(int i) { down_.insert(name(i)); }
  void pause(int i) { down_.insert(name(i)); }
  void resume(int i) { down_.erase(name(i)); }
  void block(int from, int to) { blocked_.insert({name(from), name(to)}); }

  // Injects a message as if `from` (at `generation`) had sent it now.
  void inject(int to, const std::string& from, std::uint64_t generation, JobMessage m) {
    queue_.push_back(Flight{now_ + kLatency, from, generation, name(to), std::move(m)});
  }
  void event(int at_node, int peer, PeerEventKind kind) {
    JobWatchEffects out;
    at(at_node).on_peer_event(now_, name(peer), kind, out);
    absorb(name(at_node), out);
  }

  // Advances time in 1 ms steps, delivering messages and running due timers.
  void run_for(Duration d) {
    const TimePoint end = now_ + d;
    while (now_ < end) {
      now_ += 1ms;
      // Take the due flights out first: handling them queues more.
      std::vector<Flight> due;
      for (auto it = queue_.begin(); it != queue_.end();) {
        if (it->at > now_) {
          ++it;
          continue;
        }
        due.push_back(std::move(*it));
        it = queue_.erase(it);
      }
      for (Flight& f : due) {
        if (down_.count(f.to) != 0 || blocked_.count({f.from, f.to}) != 0) continue;
        JobWatchEffects out;
        watches_.at(f.to).on_message(now_, f.from, f.generation, f.message, out);
        absorb(f.to, out);
      }
      for (auto& [n, w] : watches_) {
        if (down_.count(n) != 0 || w.next_deadline() > now_) continue;
        JobWatchEffects out;
        w.tick(now_, out);
        EXPECT_GT(w.next_deadline(), now_) << n;
        absorb(n, out);
      }
    }
  }

  std::size_t sent_by(int i) const { return sent_.count(name(i)) ? sent_.at(name(i)) : 0; }

 private:
  struct Flight {
    TimePoint at;
    std::string from;
    std::uint64_t generation;
    std::string to;
    JobMessage message;
  };
  void absorb(const std::string& from, JobWatchEffects& out) {
    for (auto& s : out.sends) {
      ++sent_[from];
      queue_.push_back(Flight{now_ + kLatency, from, 1, s.to, std::move(s.message)});
    }
    for (auto& l : out.lost) lost_[from].push_back(l);
    out = {};
  }

  TimePoint now_ = TimePoint{} + 1h;
  std::vector<JobPeer> peers_;
  std::map<std::string, JobWatch> watches_;
  std::deque<Flight> queue_;
  std::set<std::string> down_;
  std::set<std::pair<std::string, std::string>> blocked_;
  std::map<std::string, std::vector<PeerLost>> lost_;
  std::map<std::string, std::size_t> sent_;
};

TEST(JobWatch, DefaultsAreTheDocumentedOnes) {
  const JobWatchConfig c = JobWatchConfig::from(200ms, 600ms);
  EXPECT_EQ(c.keepalive_interval, 200ms);
  EXPECT_EQ(c.peer_timeout, 600ms);
  EXPECT_EQ(c.confirm_window, 400ms);
  EXPECT_EQ(c.helper_timeout, 150ms);
  EXPECT_EQ(c.confirm_window, JobWatchConfig{}.confirm_window);
  EXPECT_EQ(c.joiner_grace, 1s);
  EXPECT_OK(c.validate());
  JobWatchConfig bad = c;
  bad.helper_timeout = bad.confirm_window;
  EXPECT_FALSE(bad.validate().ok());
}

TEST(JobWatch, HealthyRoundSendsKeepalivesAndDeclaresNothing) {
  Round r(4);
  r.run_for(10s);
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(r.lost(i).empty()) << i;
    EXPECT_EQ(r.at(i).stats().suspicions, 0u);
    // 3 peers, one keepalive each per 200 ms (plus the first at set_round).
    EXPECT_EQ(r.at(i).stats().keepalives_sent, 3u * 51u);
  }
}

TEST(JobWatch, CrashedPeerIsDeclaredOnceWithinTimeoutPlusWindow) {
  Round r(5);
  r.run_for(1s);
  r.crash(2);
  r.run_for(2s);
  for (int i = 0; i < 5; ++i) {
    if (i == 2) continue;
    ASSERT_EQ(r.lost(i).size(), 1u) << i;
    const PeerLost& l = r.lost(i)[0];
    EXPECT_EQ(l.peer, "d2");
    EXPECT_EQ(l.job, "j");
    EXPECT_EQ(l.term, 3u);
    EXPECT_EQ(l.round, 7u);
    EXPECT_EQ(l.generation, 1u);
    EXPECT_EQ(l.reason, LostReason::kSilent);
    EXPECT_TRUE(r.at(i).lost("d2"));
    EXPECT_EQ(r.at(i).stats().notices_sent, 0u);  // a small round: no JobLossNotices
  }
  // Nothing more, however long it runs.
  r.run_for(10s);
  for (int i = 0; i < 5; ++i) {
    if (i == 2) continue;
    EXPECT_EQ(r.lost(i).size(), 1u);
  }
}

// A round that adds a node: the joiner's RoundStart may come a leader resend after the others',
// so its silence counts from joiner_grace later (a new generation of a peer, a restarted daemon,
// is a joiner too); a peer of the round watched before gets no such grace.
TEST(JobWatch, AJoinerGetsAGraceAMemberOfThePreviousRoundDoesNot) {
  const JobWatchConfig c;
  JobWatch w("d0", 1, c, 1);
  JobWatchEffects out;
  const TimePoint t0 = TimePoint{} + 1h;
  ASSERT_OK(w.set_round(t0, "j", 3, 7, {{"d0", 1, "a0"}, {"d1", 1, "a1"}, {"d3", 1, "a3"}}, out));
  // Round 8 adds d2 and d3's restarted daemon (generation 2); from now on nobody speaks.
  const TimePoint t1 = t0 + 200ms;
  ASSERT_OK(w.set_round(t1, "j", 3, 8,
                        {{"d0", 1, "a0"}, {"d1", 1, "a1"}, {"d2", 1, "a2"}, {"d3", 2, "a3"}}, out));
  std::map<std::string, Duration> declared;
  for (TimePoint t = t1; t < t1 + 5s; t += 1ms) {
    out = {};
    if (w.next_deadline() > t) continue;
    w.tick(t, out);
    for (const PeerLost& l : out.lost) declared.emplace(l.peer, t - t1);
  }
  ASSERT_EQ(declared.size(), 3u);
  EXPECT_LE(declared["d1"], c.peer_timeout + c.confirm_window);
  for (const char* joiner : {"d2", "d3"}) {
    EXPECT_GE(declared[joiner], c.joiner_grace + c.peer_timeout) << joiner;
    EXPECT_LE(declared[joiner], c.joiner_grace + c.peer_timeout + c.confirm_window) << joiner;
  }
}

TEST(JobWatch, DeclarationTimeIsBoundedByTimeoutPlusWindow) {
  Round r(3);
  r.run_for(1s);
  const TimePoint crashed = r.now();
  r.crash(0);
  Duration waited{};
  while (r.lost(1).empty() && waited < 5s) {
    r.run_for(1ms);
    waited += 1ms;
  }
  ASSERT_EQ(r.lost(1).size(), 1u);
  const JobWatchConfig c;
  EXPECT_LE(r.now() - crashed, c.peer_timeout + c.confirm_window + 2 * kLatency);
  EXPECT_GE(r.now() - crashed, c.peer_timeout - c.keepalive_interval + c.confirm_window);
}

TEST(JobWatch, OneWayBlockedPeerIsClearedThroughHelpers) {
  Round r(4);
  r.block(1, 0);  // d0 never hears d1 directly, but d2 and d3 do
  r.run_for(20s);
  EXPECT_GT(r.at(0).stats().suspicions, 0u);
  EXPECT_EQ(r.at(0).stats().suspicions, r.at(0).stats().suspicions_cleared);
  EXPECT_GT(r.at(2).stats().helper_probes + r.at(3).stats().helper_probes, 0u);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(r.lost(i).empty()) << i;
}

TEST(JobWatch, WithoutHelpersASilentLinkIsDeclared) {
  Round r(2);
  r.block(1, 0);
  r.run_for(2s);
  ASSERT_EQ(r.lost(0).size(), 1u);
  EXPECT_EQ(r.lost(0)[0].peer, "d1");
  EXPECT_TRUE(r.lost(1).empty());
}

TEST(JobWatch, PauseShorterThanTimeoutIsNotSuspected) {
  Round r(4);
  r.run_for(1s);
  r.pause(3);
  r.run_for(350ms);
  r.resume(3);
  r.run_for(5s);
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(r.lost(i).empty()) << i;
    EXPECT_EQ(r.at(i).stats().suspicions, 0u) << i;
  }
}

TEST(JobWatch, DisconnectSuspectsButALivePeerIsCleared) {
  Round r(4);
  r.run_for(1s);
  r.event(0, 1, PeerEventKind::kDisconnected);
  EXPECT_TRUE(r.at(0).suspected("d1"));
  r.run_for(50ms);
  EXPECT_FALSE(r.at(0).suspected("d1"));
  r.run_for(5s);
  EXPECT_TRUE(r.lost(0).empty());
}

TEST(JobWatch, DisconnectOfACrashedPeerDeclaresAfterTheWindowOnly) {
  Round r(4);
  r.run_for(1s);
  r.crash(1);
  r.run_for(5ms);  // its last keepalives, already on the wire, still arrive
  r.event(0, 1, PeerEventKind::kDisconnected);
  r.run_for(JobWatchConfig{}.confirm_window - 2ms);
  EXPECT_TRUE(r.lost(0).empty());
  r.run_for(4ms);
  ASSERT_EQ(r.lost(0).size(), 1u);
  EXPECT_EQ(r.lost(0)[0].reason, LostReason::kSilent);
}

TEST(JobWatch, WorkerExitIsImmediateAndOnce) {
  Round r(3);
  r.run_for(1s);
  r.event(0, 2, PeerEventKind::kWorkerExited);
  ASSERT_EQ(r.lost(0).size(), 1u);
  EXPECT_EQ(r.lost(0)[0].reason, LostReason::kWorkerExited);
  r.event(0, 2, PeerEventKind::kWorkerExited);
  r.event(0, 2, PeerEventKind::kDisconnected);
  r.crash(2);
  r.run_for(3s);
  EXPECT_EQ(r.lost(0).size(), 1u);
}

TEST(JobWatch, NewerGenerationMeansRestarted) {
  Round r(3);
  r.run_for(1s);
  r.inject(0, "d1", 2, JobKeepalive{JobRoundRef{"j", 3, 7}, 0});
  r.run_for(5ms);
  ASSERT_EQ(r.lost(0).size(), 1u);
  EXPECT_EQ(r.lost(0)[0].peer, "d1");
  EXPECT_EQ(r.lost(0)[0].reason, LostReason::kRestarted);
  r.run_for(2s);
  EXPECT_EQ(r.lost(0).size(), 1u);
}

TEST(JobWatch, StaleMessagesDoNotKeepAPeerAlive) {
  Round r(2);
  r.run_for(1s);
  r.crash(1);
  // Someone keeps talking in d1's name, but about other rounds, terms, jobs or generations.
  for (int i = 0; i < 60; ++i) {
    r.inject(0, "d1", 1, JobKeepalive{JobRoundRef{"j", 3, 6}, 0});
    r.inject(0, "d1", 1, JobKeepalive{JobRoundRef{"j", 2, 7}, 0});
    r.inject(0, "d1", 1, JobKeepaliveAck{JobRoundRef{"other", 3, 7}, 5});
    r.inject(0, "d1", 0, JobKeepalive{JobRoundRef{"j", 3, 7}, 0});
    r.inject(0, "zz", 1, JobKeepalive{JobRoundRef{"j", 3, 7}, 0});
    r.run_for(25ms);
  }
  ASSERT_EQ(r.lost(0).size(), 1u);
  EXPECT_EQ(r.lost(0)[0].reason, LostReason::kSilent);
  EXPECT_GE(r.at(0).stats().stale_dropped, 300u);
}

TEST(JobWatch, SetRoundRefusesOlderRoundsAndResets) {
  JobWatch w("a", 1, JobWatchConfig{}, 1);
  const TimePoint t0 = TimePoint{} + 1h;
  const std::vector<JobPeer> peers = {{"a", 1, "x"}, {"b", 1, "y"}};
  JobWatchEffects out;
  EXPECT_EQ(w.next_deadline(), kNever);
  ASSERT_OK(w.set_round(t0, "j", 2, 5, peers, out));
  EXPECT_EQ(out.sends.size(), 1u);  // one keepalive to b, none to itself
  EXPECT_EQ(out.sends[0].to, "b");
  EXPECT_EQ(out.sends[0].to_address, "y");
  EXPECT_FALSE(w.set_round(t0, "j", 2, 5, peers, out).ok());
  EXPECT_FALSE(w.set_round(t0, "j", 9, 4, peers, out).ok());
  EXPECT_FALSE(w.set_round(t0, "j", 1, 5, peers, out).ok());
  ASSERT_OK(w.set_round(t0, "j", 3, 5, peers, out));  // same round number, newer term
  ASSERT_OK(w.set_round(t0, "j", 1, 6, peers, out));
  EXPECT_EQ(w.round(), (JobRoundRef{"j", 1, 6}));
  w.clear_round();
  EXPECT_FALSE(w.active());
  EXPECT_EQ(w.next_deadline(), kNever);
  out = {};
  w.on_message(t0, "b", 1, JobKeepalive{JobRoundRef{"j", 1, 6}, 9}, out);
  EXPECT_TRUE(out.sends.empty());
  EXPECT_EQ(w.stats().stale_dropped, 1u);
}

TEST(JobWatch, DirectProbeIsAnsweredWithAnAck) {
  JobWatch w("a", 1, JobWatchConfig{}, 1);
  const TimePoint t0 = TimePoint{} + 1h;
  JobWatchEffects out;
  ASSERT_OK(w.set_round(t0, "j", 1, 1, {{"a", 1, "x"}, {"b", 1, "y"}}, out));
  out = {};
  w.on_message(t0, "b", 1, JobKeepalive{JobRoundRef{"j", 1, 1}, 42}, out);
  ASSERT_EQ(out.sends.size(), 1u);
  EXPECT_EQ(out.sends[0].to, "b");
  EXPECT_EQ(std::get<JobKeepaliveAck>(out.sends[0].message).probe, 42u);
}

TEST(JobWatch, HelperAnswersTimeoutWhenTheTargetStaysSilent) {
  JobWatch w("h", 1, JobWatchConfig{}, 1);
  const TimePoint t0 = TimePoint{} + 1h;
  JobWatchEffects out;
  ASSERT_OK(w.set_round(t0, "j", 1, 1, {{"h", 1, "x"}, {"r", 1, "y"}, {"t", 1, "z"}}, out));
  out = {};
  w.on_message(t0, "r", 1, JobProbeRequest{JobRoundRef{"j", 1, 1}, 77, "t", 1}, out);
  ASSERT_EQ(out.sends.size(), 1u);
  EXPECT_EQ(out.sends[0].to, "t");
  const auto ping = std::get<JobKeepalive>(out.sends[0].message);
  EXPECT_NE(ping.probe, 0u);
  EXPECT_LE(w.next_deadline(), t0 + JobWatchConfig{}.helper_timeout);
  out = {};
  w.tick(t0 + JobWatchConfig{}.helper_timeout, out);
  bool replied = false;
  for (const auto& s : out.sends) {
    if (const auto* reply = std::get_if<JobProbeReply>(&s.message)) {
      EXPECT_EQ(s.to, "r");
      EXPECT_EQ(reply->probe, 77u);
      EXPECT_FALSE(reply->alive);
      replied = true;
    }
  }
  EXPECT_TRUE(replied);
  // And an ack from the target before the timeout is answered alive at once.
  out = {};
  w.on_message(t0 + 1s, "r", 1, JobProbeRequest{JobRoundRef{"j", 1, 1}, 78, "t", 1}, out);
  const auto ping2 = std::get<JobKeepalive>(out.sends.back().message);
  out = {};
  w.on_message(t0 + 1s + 1ms, "t", 1, JobKeepaliveAck{JobRoundRef{"j", 1, 1}, ping2.probe}, out);
  ASSERT_EQ(out.sends.size(), 1u);
  const auto reply = std::get<JobProbeReply>(out.sends[0].message);
  EXPECT_EQ(reply.probe, 78u);
  EXPECT_TRUE(reply.alive);
}

// The direct probe number sent to each peer in `out` (the last one per peer).
std::map<std::string, std::uint64_t> probes_in(const JobWatchEffects& out) {
  std::map<std::string, std::uint64_t> probes;
  for (const auto& s : out.sends) {
    if (const auto* k = std::get_if<JobKeepalive>(&s.message); k && k->probe != 0) {
      probes[s.to] = k->probe;
    }
  }
  return probes;
}

// Daemon a watching round 1 of job j with peers b and c, its first keepalives taken away.
struct ThreePeers {
  JobWatch w{"a", 1, JobWatchConfig{}, 1};
  const TimePoint t0 = TimePoint{} + 1h;
  const JobRoundRef ref{"j", 1, 1};
  JobWatchEffects out;
  ThreePeers() {
    EXPECT_OK(w.set_round(t0, "j", 1, 1, {{"a", 1, "x"}, {"b", 1, "y"}, {"c", 1, "z"}}, out));
    out = {};
  }
};

// confirm_peers(): a probe to every peer; peers_confirmed once each answered a probe sent at or
// after that moment. An answer to an older probe (sent before the failure) proves nothing.
TEST(JobWatch, ConfirmPeersNeedsAnAnswerToAProbeSentAfterTheFailure) {
  ThreePeers p;
  auto& [w, t0, ref, out] = p;
  // An older probe to b (a suspicion's), answered only after the failure.
  out = {};
  w.on_peer_event(t0, "b", PeerEventKind::kDisconnected, out);
  const std::uint64_t old_probe = probes_in(out)["b"];
  ASSERT_NE(old_probe, 0u);
  out = {};
  w.confirm_peers(out);
  EXPECT_FALSE(out.peers_confirmed);
  std::map<std::string, std::uint64_t> probes = probes_in(out);
  ASSERT_EQ(probes.size(), 2u);
  EXPECT_GT(probes["b"], old_probe);
  EXPECT_NE(probes["c"], 0u);
  out = {};
  w.on_message(t0 + 1ms, "b", 1, JobKeepaliveAck{ref, old_probe}, out);
  w.on_message(t0 + 1ms, "c", 1, JobKeepaliveAck{ref, probes["c"]}, out);
  w.on_message(t0 + 1ms, "b", 1, JobKeepalive{ref, 0}, out);
  EXPECT_FALSE(out.peers_confirmed) << "b answered nothing sent after the failure";
  w.on_message(t0 + 2ms, "b", 1, JobKeepaliveAck{ref, probes["b"]}, out);
  ASSERT_TRUE(out.peers_confirmed);
  EXPECT_EQ(*out.peers_confirmed, ref);
  // Once: a late duplicate answer confirms nothing more.
  out = {};
  w.on_message(t0 + 3ms, "c", 1, JobKeepaliveAck{ref, probes["c"]}, out);
  EXPECT_FALSE(out.peers_confirmed);
}

TEST(JobWatch, ConfirmPeersNeverConfirmsALostPeer) {
  ThreePeers p;
  auto& [w, t0, ref, out] = p;
  out = {};
  w.confirm_peers(out);
  std::map<std::string, std::uint64_t> probes = probes_in(out);
  // c is declared lost (its daemon reported its workers gone) before it answers.
  out = {};
  w.on_peer_event(t0 + 1ms, "c", PeerEventKind::kWorkerExited, out);
  ASSERT_EQ(out.lost.size(), 1u);
  w.on_message(t0 + 2ms, "b", 1, JobKeepaliveAck{ref, probes["b"]}, out);
  w.on_message(t0 + 2ms, "c", 1, JobKeepaliveAck{ref, probes["c"]}, out);
  EXPECT_FALSE(out.peers_confirmed);
  // A new confirmation with a lost peer in the round ends at once, unconfirmed.
  out = {};
  w.confirm_peers(out);
  EXPECT_FALSE(out.peers_confirmed);
  EXPECT_TRUE(out.sends.empty());
}

TEST(JobWatch, ConfirmPeersWithoutPeersConfirmsAtOnceAndANewRoundEndsIt) {
  JobWatch alone("a", 1, JobWatchConfig{}, 1);
  const TimePoint t0 = TimePoint{} + 1h;
  JobWatchEffects out;
  ASSERT_OK(alone.set_round(t0, "j", 1, 1, {{"a", 1, "x"}}, out));
  out = {};
  alone.confirm_peers(out);
  ASSERT_TRUE(out.peers_confirmed);
  EXPECT_EQ(*out.peers_confirmed, (JobRoundRef{"j", 1, 1}));

  JobWatch w("a", 1, JobWatchConfig{}, 1);
  ASSERT_OK(w.set_round(t0, "j", 1, 1, {{"a", 1, "x"}, {"b", 1, "y"}}, out));
  out = {};
  w.confirm_peers(out);
  const std::uint64_t probe = std::get<JobKeepalive>(out.sends.at(0).message).probe;
  ASSERT_OK(w.set_round(t0 + 1ms, "j", 1, 2, {{"a", 1, "x"}, {"b", 1, "y"}}, out));
  out = {};
  w.on_message(t0 + 2ms, "b", 1, JobKeepaliveAck{JobRoundRef{"j", 1, 2}, probe}, out);
  EXPECT_FALSE(out.peers_confirmed) << "the confirmation was of round 1";
  // Without a round nothing happens.
  w.clear_round();
  out = {};
  w.confirm_peers(out);
  EXPECT_TRUE(out.sends.empty());
  EXPECT_FALSE(out.peers_confirmed);
}

// Large rounds (more than watch_all_up_to peers): a ring per round, `watchers` watchers each.

std::vector<JobPeer> members(int n) {
  std::vector<JobPeer> peers;
  for (int i = 0; i < n; ++i) peers.push_back(JobPeer{"d" + std::to_string(i), 1, "a"});
  return peers;
}

std::set<std::string> watched_set(const JobWatch& w, int n) {
  std::set<std::string> out;
  for (int i = 0; i < n; ++i) {
    if (w.watches("d" + std::to_string(i))) out.insert("d" + std::to_string(i));
  }
  return out;
}

TEST(JobWatch, ALargeRoundWatchesThroughOneRingThatEveryMemberComputesAlike) {
  constexpr int kN = 40;
  const JobWatchConfig c;
  std::vector<JobWatch> ws;
  for (int i = 0; i < kN; ++i) {
    ws.emplace_back("d" + std::to_string(i), 1, c, 7 + static_cast<std::uint64_t>(i));
    JobWatchEffects out;
    ASSERT_OK(ws.back().set_round(TimePoint{} + 1h, "j", 3, 7, members(kN), out));
    EXPECT_TRUE(ws.back().large_round());
    // The first keepalives go to its watchers only.
    EXPECT_EQ(out.sends.size(), static_cast<std::size_t>(c.watchers));
    for (const JobOutgoing& o : out.sends) EXPECT_TRUE(ws.back().watched_by(o.to)) << o.to;
  }
  for (int a = 0; a < kN; ++a) {
    int watching = 0;
    int watched_by = 0;
    for (int b = 0; b < kN; ++b) {
      if (a == b) continue;
      const std::string na = "d" + std::to_string(a);
      const std::string nb = "d" + std::to_string(b);
      // a sends keepalives to b exactly when b watches a's silence.
      EXPECT_EQ(ws[a].watched_by(nb), ws[b].watches(na)) << na << " " << nb;
      watching += ws[a].watches(nb) ? 1 : 0;
      watched_by += ws[b].watches(na) ? 1 : 0;
    }
    EXPECT_EQ(watching, c.watchers) << a;
    EXPECT_EQ(watched_by, c.watchers) << a;
  }
  // The next round shuffles the ring again: d0 watches others than before.
  JobWatchEffects out;
  const std::set<std::string> before = watched_set(ws[0], kN);
  ASSERT_OK(ws[0].set_round(TimePoint{} + 2h, "j", 3, 8, members(kN), out));
  EXPECT_NE(watched_set(ws[0], kN), before);
  EXPECT_EQ(watched_set(ws[0], kN).size(), static_cast<std::size_t>(c.watchers));
  // A round at the limit is a small one: every peer both ways.
  JobWatch small("d0", 1, c, 1);
  ASSERT_OK(small.set_round(TimePoint{} + 1h, "j", 3, 7,
                            members(static_cast<int>(c.watch_all_up_to) + 1), out));
  EXPECT_FALSE(small.large_round());
  EXPECT_TRUE(small.watches("d8") && small.watched_by("d8"));
}

// A failed worker in a large round probes no peer (n - 1 probes per failure, n^2 when every
// worker fails together) and confirms nothing: the leader waits its failure grace instead.
// A round at the limit still confirms.
TEST(JobWatch, ALargeRoundConfirmsNoFailure) {
  const JobWatchConfig c;
  JobWatchEffects out;
  JobWatch large("d0", 1, c, 1);
  ASSERT_OK(large.set_round(TimePoint{} + 1h, "j", 3, 7, members(40), out));
  out = {};
  large.confirm_peers(out);
  EXPECT_TRUE(out.sends.empty()) << out.sends.size() << " probes";
  EXPECT_FALSE(out.peers_confirmed);
  EXPECT_EQ(large.stats().direct_probes, 0u);
  JobWatch small("d0", 1, c, 1);
  ASSERT_OK(small.set_round(TimePoint{} + 1h, "j", 3, 7,
                            members(static_cast<int>(c.watch_all_up_to) + 1), out));
  out = {};
  small.confirm_peers(out);
  EXPECT_EQ(out.sends.size(), c.watch_all_up_to) << "every peer gets a probe";
}

TEST(JobWatch, ALargeRoundsLoadPerDaemonDoesNotGrowWithItsSize) {
  for (int n : {12, 40}) {
    Round r(n);
    r.run_for(10s);
    for (int i = 0; i < n; ++i) {
      EXPECT_TRUE(r.lost(i).empty()) << i;
      EXPECT_EQ(r.at(i).stats().suspicions, 0u) << i;
      // Three watchers, one keepalive each per 200 ms (plus the first at set_round).
      EXPECT_EQ(r.at(i).stats().keepalives_sent, 3u * 51u) << n << " " << i;
      EXPECT_EQ(r.sent_by(i), 3u * 51u) << n << " " << i;
    }
  }
}

TEST(JobWatch, ASilentCrashInALargeRoundIsDeclaredByItsWatchersAndNoticedByEveryone) {
  constexpr int kN = 40;
  const JobWatchConfig c;
  Round r(kN);
  r.run_for(1s);
  r.crash(5);
  r.run_for(c.peer_timeout + c.confirm_window + 5ms);
  int first_hand = 0;
  for (int i = 0; i < kN; ++i) {
    if (i == 5) continue;
    ASSERT_EQ(r.lost(i).size(), 1u) << i;
    EXPECT_EQ(r.lost(i)[0].peer, "d5");
    if (r.lost(i)[0].reason == LostReason::kSilent) {
      ++first_hand;
      EXPECT_TRUE(r.at(i).watches("d5")) << i << " declared a peer it does not watch";
    } else {
      EXPECT_EQ(r.lost(i)[0].reason, LostReason::kReported) << i;
    }
  }
  EXPECT_GE(first_hand, 1);
  EXPECT_LE(first_hand, c.watchers);
  r.run_for(10s);
  std::uint64_t notices = 0;
  for (int i = 0; i < kN; ++i) {
    if (i == 5) continue;
    EXPECT_EQ(r.lost(i).size(), 1u) << i;
    notices += r.at(i).stats().notices_sent;
  }
  // Each first-hand declarer tells the 38 other survivors; each learner forwards five (its
  // three watchers and two random members).
  EXPECT_LE(notices, static_cast<std::uint64_t>(first_hand) * (kN - 2) + 5u * (kN - 1));
}

TEST(JobWatch, ALossNoticeCountsOnlyForALivePeerOfThisRoundAndGeneration) {
  constexpr int kN = 20;
  const JobWatchConfig c;
  JobWatch w("d0", 1, c, 3);
  JobWatchEffects out;
  const TimePoint t = TimePoint{} + 1h;
  ASSERT_OK(w.set_round(t, "j", 3, 7, members(kN), out));
  const JobRoundRef ref{"j", 3, 7};
  out = {};
  w.on_message(t, "d1", 1, JobLossNotice{ref, "d0", 1}, out);  // about this daemon
  w.on_message(t, "d1", 1, JobLossNotice{ref, "d2", 2}, out);  // another generation
  const JobRoundRef older{"j", 3, 6};
  w.on_message(t, "d1", 1, JobLossNotice{older, "d2", 1}, out);  // an older round
  w.on_message(t, "d1", 1, JobLossNotice{ref, "d99", 1}, out);  // not a member
  EXPECT_TRUE(out.lost.empty());
  EXPECT_TRUE(out.sends.empty());
  EXPECT_EQ(w.stats().stale_dropped, 1u);
  w.on_message(t, "d1", 1, JobLossNotice{ref, "d2", 1}, out);
  ASSERT_EQ(out.lost.size(), 1u);
  EXPECT_EQ(out.lost[0].peer, "d2");
  EXPECT_EQ(out.lost[0].reason, LostReason::kReported);
  EXPECT_TRUE(w.lost("d2"));
  // Forwarded to its live watchers and notice_forwards random live members, never the lost one.
  std::size_t watchers = 0;
  for (int i = 1; i < kN; ++i) {
    const std::string peer = "d" + std::to_string(i);
    if (peer != "d2" && w.watched_by(peer)) ++watchers;
  }
  ASSERT_EQ(out.sends.size(), watchers + static_cast<std::size_t>(c.notice_forwards));
  for (const JobOutgoing& o : out.sends) {
    EXPECT_NE(o.to, "d2");
    EXPECT_EQ(std::get<JobLossNotice>(o.message), (JobLossNotice{ref, "d2", 1}));
  }
  // A second copy changes nothing.
  out = {};
  w.on_message(t, "d3", 1, JobLossNotice{ref, "d2", 1}, out);
  EXPECT_TRUE(out.lost.empty());
  EXPECT_TRUE(out.sends.empty());
  EXPECT_EQ(w.stats().notices_received, 1u);
}

TEST(JobWatch, WatchersMustBeAtLeastOneAndFitASmallRound) {
  JobWatchConfig c;
  c.watchers = 0;
  EXPECT_FALSE(c.validate().ok());
  c.watchers = static_cast<int>(c.watch_all_up_to) + 1;
  EXPECT_FALSE(c.validate().ok());
  c.watchers = 3;
  c.notice_forwards = -1;
  EXPECT_FALSE(c.validate().ok());
}

}  // namespace
}  // namespace elastic::rendezvous
