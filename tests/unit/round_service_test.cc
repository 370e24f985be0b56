// RoundService's routing between its halves (round_service.h, round_send.h): what the member
// half makes for this very daemon reaches its own leader half and never leaves the daemon;
// what it makes for another daemon leaves as a message.
#include "daemon/node/round_service.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "daemon/core/clock.h"
#include "daemon/node/round_codec.h"
#include "daemon/node/round_report.h"
#include "daemon/rendezvous/job_codec.h"
#include "daemon/rendezvous/job_watch.h"
#include "daemon/wire/messages.h"

namespace elastic::node {
namespace {

using namespace std::chrono_literals;

constexpr std::uint64_t kGeneration = 7;

struct Fixture {
  ManualClock clock{TimePoint(1h), 1'790'000'000'000, 1};
  config::Current config{config::DaemonConfig{}};
  RoundService rounds{"a", kGeneration, config, 42, clock};
  TimePoint now = TimePoint(1h);
};

// A RoundStart of job j1's round 1, on this daemon alone, as `sender` sends it.
wire::Envelope round_start(const std::string& sender, const std::string& address) {
  RoundStart start;
  start.term = 3;
  start.state = rendezvous::JobState::kRendezvous;
  start.round.job_id = "j1";
  start.round.round = 1;
  start.round.ranks = {{"a", kGeneration, 1, 0}};
  start.round.store_endpoint = "10.0.0.1:29500";
  start.spec.name = "j";
  start.spec.command = {"/bin/true"};
  start.spec.min_nodes = 1;
  start.spec.max_nodes = 1;
  wire::Envelope envelope;
  envelope.type = wire::MsgType::kRoundStart;
  envelope.body = encode_round_start(start);
  envelope.sender = sender;
  envelope.sender_address = address;
  envelope.generation = 1;
  return envelope;
}

// Fixture `f`'s daemon a is a member, with c, of job j1's round 1, led by b; what that start
// sent and ordered is taken away.
void join_round_with_c(Fixture& f) {
  wire::Envelope start = round_start("b", "tcp://10.0.0.2:7946");
  RoundStart decoded = *decode_round_start(start.body);
  decoded.round.ranks = {{"a", kGeneration, 1, 0}, {"c", 1, 1, 1}};
  start.body = encode_round_start(decoded);
  f.rounds.set_leader(f.now, "b", "tcp://10.0.0.2:7946");
  f.rounds.on_envelope(f.now, start);
  (void)f.rounds.take_orders();
  (void)f.rounds.take_sends();
}

std::vector<RoundService::Send> of_type(std::vector<RoundService::Send> sends, wire::MsgType type) {
  std::erase_if(sends, [&](const RoundService::Send& s) { return s.envelope.type != type; });
  return sends;
}

TEST(RoundService, NodeInfoForItselfReachesItsOwnLeaderHalf) {
  Fixture f;
  f.rounds.set_slots(4);
  f.rounds.set_leader(f.now, "a", "");
  EXPECT_TRUE(f.rounds.take_sends().empty()) << "nothing leaves the daemon";
  ASSERT_TRUE(f.rounds.node_slots().contains("a"));
  EXPECT_EQ(f.rounds.node_slots().at("a"), std::make_pair(kGeneration, std::uint32_t{4}));
}

TEST(RoundService, NodeInfoForAnotherLeaderLeavesAsARoundReport) {
  Fixture f;
  f.rounds.set_slots(4);
  f.rounds.set_leader(f.now, "b", "tcp://10.0.0.2:7946");
  const std::vector<RoundService::Send> sends = f.rounds.take_sends();
  ASSERT_EQ(sends.size(), 1u);
  EXPECT_EQ(sends[0].to, "b");
  EXPECT_EQ(sends[0].address, "tcp://10.0.0.2:7946");
  EXPECT_FALSE(sends[0].report.has_value());
  ASSERT_EQ(sends[0].envelope.type, wire::MsgType::kRoundReport);
  auto report = decode_round_report(sends[0].envelope.body);
  ASSERT_TRUE(report.ok()) << report.error().message;
  EXPECT_EQ(report->kind, ReportKind::kNodeInfo);
  EXPECT_EQ(report->slots, 4u);
  EXPECT_TRUE(f.rounds.node_slots().empty()) << "this daemon's leader half heard nothing";
}

TEST(RoundService, ARoundFromItselfAsksItsOwnLeaderHalfForTheLease) {
  Fixture f;
  f.rounds.on_envelope(f.now, round_start("a", ""));
  const std::vector<RoundService::WorkerOrder> orders = f.rounds.take_orders();
  ASSERT_EQ(orders.size(), 1u);
  EXPECT_EQ(orders[0].kind, RoundService::WorkerOrder::Kind::kRun);
  // The request went to the leader half, which does not lead and grants nothing.
  const std::vector<RoundService::Send> sends = f.rounds.take_sends();
  EXPECT_TRUE(of_type(sends, wire::MsgType::kLeaseRequest).empty());
  EXPECT_TRUE(of_type(sends, wire::MsgType::kLeaseGrant).empty());
}

TEST(RoundService, ARoundFromAnotherLeaderAsksThatLeaderForTheLease) {
  Fixture f;
  f.rounds.on_envelope(f.now, round_start("b", "tcp://10.0.0.2:7946"));
  ASSERT_EQ(f.rounds.take_orders().size(), 1u);
  const std::vector<RoundService::Send> requests =
      of_type(f.rounds.take_sends(), wire::MsgType::kLeaseRequest);
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].to, "b");
  EXPECT_EQ(requests[0].address, "tcp://10.0.0.2:7946");
}

// The kinds of the round reports among `sends`, in order.
std::vector<ReportKind> report_kinds(const std::vector<RoundService::Send>& sends) {
  std::vector<ReportKind> kinds;
  for (const auto& send : of_type(sends, wire::MsgType::kRoundReport)) {
    auto report = decode_round_report(send.envelope.body);
    if (report.ok()) kinds.push_back(report->kind);
  }
  return kinds;
}

// A member answers every RoundStart of a round it is in with round_received, at once (before
// its workers run), to the sender: the leader resends quickly only to members that did not.
TEST(RoundService, AMemberSaysAtOnceThatItHoldsTheRound) {
  Fixture f;
  const wire::Envelope start = round_start("b", "tcp://10.0.0.2:7946");
  f.rounds.on_envelope(f.now, start);
  std::vector<RoundService::Send> sends = f.rounds.take_sends();
  std::vector<ReportKind> kinds = report_kinds(sends);
  ASSERT_EQ(std::count(kinds.begin(), kinds.end(), ReportKind::kRoundReceived), 1);
  for (const auto& send : of_type(sends, wire::MsgType::kRoundReport)) EXPECT_EQ(send.to, "b");
  // A resend (its answer was lost) is answered again.
  f.rounds.on_envelope(f.now + 250ms, start);
  kinds = report_kinds(f.rounds.take_sends());
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), ReportKind::kRoundReceived), 1);
}

// The next round as a delta against the one the member holds: taken as the full round would be;
// against a round it does not hold: dropped unanswered (the leader resends it in full).
TEST(RoundService, ADeltaRoundStartIsTakenOnlyAgainstTheHeldRound) {
  Fixture f;
  join_round_with_c(f);
  RoundStart next = *decode_round_start(round_start("b", "").body);
  next.round.round = 2;
  next.round.expected_prev_round = 1;
  next.round.ranks = {{"a", kGeneration, 1, 0}};  // c lost
  const rendezvous::RankMap round1 = {{"a", kGeneration, 1, 0}, {"c", 1, 1, 1}};
  const std::uint64_t digest = spec_digest(next.spec);
  wire::Envelope envelope = round_start("b", "tcp://10.0.0.2:7946");
  // Against round 5, which a does not hold.
  envelope.body = *encode_round_start_delta(next, 5, round1, digest);
  f.rounds.on_envelope(f.now + 1s, envelope);
  EXPECT_TRUE(f.rounds.take_orders().empty());
  EXPECT_TRUE(report_kinds(f.rounds.take_sends()).empty()) << "an unreadable start was answered";
  // Against round 1, which it holds.
  envelope.body = *encode_round_start_delta(next, 1, round1, digest);
  ASSERT_LT(envelope.body.size(), encode_round_start(next).size());
  f.rounds.on_envelope(f.now + 2s, envelope);
  const std::vector<RoundService::WorkerOrder> orders = f.rounds.take_orders();
  ASSERT_EQ(orders.size(), 1u);
  ASSERT_TRUE(orders[0].start.has_value());
  EXPECT_EQ(orders[0].start->round.round, 2u);
  EXPECT_EQ(orders[0].start->round.ranks, next.round.ranks);
  EXPECT_EQ(orders[0].start->spec, next.spec);
  const std::vector<ReportKind> kinds = report_kinds(f.rounds.take_sends());
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), ReportKind::kRoundReceived), 1);
  ASSERT_EQ(f.rounds.member_rounds().size(), 1u);
  EXPECT_EQ(f.rounds.member_rounds()[0].round, 2u);
}

// The peer_lost reports of a member whose round leader is gone: the leader it believes in now
// hears them too, at once when it changes (not a resend interval later), and the loss is handed
// out for Raft (take_lost_peers) in case the lost peer was its leader's host.
TEST(RoundService, AMembersLossReportsFollowANewLeaderAtOnce) {
  Fixture f;
  join_round_with_c(f);
  // c is never heard: the job tier declares it lost.
  TimePoint t = f.now;
  std::vector<RoundService::Send> lost;
  while (lost.empty() && t < f.now + 30s) {
    t += 50ms;
    f.rounds.tick(t);
    for (auto& send : of_type(f.rounds.take_sends(), wire::MsgType::kRoundReport)) {
      auto report = decode_round_report(send.envelope.body);
      if (report.ok() && report->kind == ReportKind::kPeerLost) lost.push_back(send);
    }
  }
  ASSERT_EQ(lost.size(), 1u) << "c was never declared lost";
  EXPECT_EQ(lost[0].to, "b");
  EXPECT_EQ(f.rounds.take_lost_peers(), std::vector<std::string>{"c"});
  EXPECT_TRUE(f.rounds.take_lost_peers().empty()) << "handed out once";

  // b is gone; d leads now. The very next tick tells d (and b, the round's leader).
  f.rounds.set_leader(t, "d", "tcp://10.0.0.4:7946");
  (void)f.rounds.take_sends();  // node_info for d
  t += 1ms;
  f.rounds.tick(t);
  std::vector<std::string> told;
  for (auto& send : of_type(f.rounds.take_sends(), wire::MsgType::kRoundReport)) {
    auto report = decode_round_report(send.envelope.body);
    if (report.ok() && report->kind == ReportKind::kPeerLost && report->peer == "c") {
      told.push_back(send.to);
    }
  }
  std::sort(told.begin(), told.end());
  EXPECT_EQ(told, (std::vector<std::string>{"b", "d"}));
}

// In a large round (more than JobWatchConfig::watch_all_up_to peers) a member that learns a loss
// from another member's notice declares it but neither reports it nor hands it to Raft as a
// fast-election hint: one member's word must not make every voter forget its leader.
TEST(RoundService, ALossLearntFromANoticeIsNoElectionHint) {
  Fixture f;
  wire::Envelope start = round_start("b", "tcp://10.0.0.2:7946");
  RoundStart decoded = *decode_round_start(start.body);
  decoded.round.ranks.clear();
  decoded.round.ranks.push_back({"a", kGeneration, 1, 0});
  for (std::uint32_t i = 1; i < 12; ++i) {
    decoded.round.ranks.push_back({"p" + std::to_string(i), 1, 1, i});
  }
  start.body = encode_round_start(decoded);
  f.rounds.set_leader(f.now, "b", "tcp://10.0.0.2:7946");
  f.rounds.on_envelope(f.now, start);
  (void)f.rounds.take_orders();
  (void)f.rounds.take_sends();
  rendezvous::JobLossNotice notice{
      rendezvous::JobRoundRef{"j1", 3, 1}, "p5", 1};
  wire::Envelope envelope;
  envelope.type = rendezvous::job_message_type(notice);
  envelope.body = rendezvous::encode_job(notice);
  envelope.sender = "p7";
  envelope.sender_address = "tcp://10.0.0.7:7946";
  envelope.generation = 1;
  f.rounds.on_envelope(f.now + 10ms, envelope);
  f.rounds.tick(f.now + 20ms);
  EXPECT_TRUE(f.rounds.take_lost_peers().empty()) << "a notice became an election hint";
  const std::vector<RoundService::Send> sends = f.rounds.take_sends();
  for (const auto& send : of_type(sends, wire::MsgType::kRoundReport)) {
    auto report = decode_round_report(send.envelope.body);
    ASSERT_TRUE(report.ok());
    EXPECT_NE(report->kind, ReportKind::kPeerLost) << "a notice was reported to the leader";
  }
  // It was declared here all the same: the notice goes on to this member's watchers.
  EXPECT_FALSE(of_type(sends, rendezvous::job_message_type(notice)).empty())
      << "the notice was not taken (no forwards)";
}

// A local worker's failure goes to the leader at once, and the job tier probes every round
// peer; once they all answered, the failure goes again with peers_alive (the leader then acts
// without waiting out a possible peer loss). A peer that stays silent gets no second report.
// The live round_ack (the workers re-form in place) goes to the leader twice more, a second
// apart, and once more to a new leader: the leader skips a lost member's lease only when every
// kept member's live ack reached it, and one lost ack would otherwise cost that lease wait.
TEST(RoundService, ALiveAckIsSentAgainTwiceAndToANewLeader) {
  Fixture f;
  join_round_with_c(f);
  RoundReport ack = round_report(ReportKind::kRoundAck, "j1", 1);
  ack.live = true;
  f.rounds.report_for(f.now, ack);
  const auto acks_to = [&](const std::string& leader) {
    std::size_t n = 0;
    for (auto& send : of_type(f.rounds.take_sends(), wire::MsgType::kRoundReport)) {
      auto report = decode_round_report(send.envelope.body);
      if (report.ok() && report->kind == ReportKind::kRoundAck && report->live &&
          send.to == leader) {
        ++n;
      }
    }
    return n;
  };
  EXPECT_EQ(acks_to("b"), 1u);
  std::size_t again = 0;
  for (TimePoint t = f.now; t < f.now + 5s; t += 100ms) {
    f.rounds.tick(t);
    again += acks_to("b");
  }
  EXPECT_EQ(again, 2u);
  f.rounds.set_leader(f.now + 6s, "c", "tcp://10.0.0.3:7946");
  std::size_t to_new = 0;
  for (TimePoint t = f.now + 6s; t < f.now + 10s; t += 100ms) {
    f.rounds.tick(t);
    to_new += acks_to("c");
  }
  EXPECT_EQ(to_new, 2u) << "the new leader hears it again, twice";
}

TEST(RoundService, AWorkerFailureIsRepeatedWithPeersAliveOnceEveryPeerAnswered) {
  for (const bool answers : {true, false}) {
    SCOPED_TRACE(answers ? "c answers" : "c stays silent");
    Fixture f;
    join_round_with_c(f);

    RoundReport failed = round_report(ReportKind::kWorkerFailed, "j1", 1);
    failed.rank = 0;
    failed.detail = "rank 0 on node a killed by signal 9 (SIGKILL)";
    f.rounds.report_for(f.now, failed);
    std::vector<RoundReport> to_b;
    std::uint64_t probe = 0;
    for (auto& send : f.rounds.take_sends()) {
      if (send.envelope.type == wire::MsgType::kRoundReport && send.to == "b") {
        to_b.push_back(*decode_round_report(send.envelope.body));
      } else if (send.envelope.type == wire::MsgType::kJobKeepalive && send.to == "c") {
        auto message = rendezvous::decode_job(send.envelope.type, send.envelope.body);
        ASSERT_TRUE(message.ok());
        probe = std::get<rendezvous::JobKeepalive>(*message).probe;
      }
    }
    ASSERT_EQ(to_b.size(), 1u);
    EXPECT_EQ(to_b[0], failed) << "the failure itself is not held back";
    ASSERT_NE(probe, 0u) << "c was probed";

    if (answers) {
      wire::Envelope ack;
      ack.type = wire::MsgType::kJobKeepaliveAck;
      ack.body = rendezvous::encode_job(rendezvous::JobKeepaliveAck{{"j1", 3, 1}, probe});
      ack.sender = "c";
      ack.generation = 1;
      f.rounds.on_envelope(f.now + 1ms, ack);
    } else {
      f.rounds.tick(f.now + 300ms);
    }
    std::vector<RoundReport> again;
    for (auto& send : of_type(f.rounds.take_sends(), wire::MsgType::kRoundReport)) {
      auto report = decode_round_report(send.envelope.body);
      if (report.ok() && report->kind == ReportKind::kWorkerFailed) again.push_back(*report);
    }
    if (answers) {
      ASSERT_EQ(again.size(), 1u);
      RoundReport expected = failed;
      expected.peers_alive = true;
      EXPECT_EQ(again[0], expected);
    } else {
      EXPECT_TRUE(again.empty());
    }
  }
}

}  // namespace
}  // namespace elastic::node
