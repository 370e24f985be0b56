// The daemon-to-daemon bodies of daemon/node: forwarded client requests and replies, RoundStart
// and round reports. Round trips, every truncation, byte flips and wrong types: decoding returns
// an Error and never throws or crashes.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "daemon/control/protocol.h"
#include "daemon/node/forward_codec.h"
#include "daemon/node/round_report.h"
#include "daemon/node/round_service.h"

namespace elastic::node {
namespace {

ForwardRequest sample_request() {
  return ForwardRequest{.id = 42,
                        .verb = "submit",
                        .args = R"({"verb":"submit","spec":{"name":"a","command":["x"]}})",
                        .uid = 1000,
                        .gid = 100,
                        .admin = true,
                        .client_seq = 7};
}

RoundStart sample_start() {
  RoundStart start;
  start.term = 9;
  start.state = rendezvous::JobState::kRunning;
  start.round.job_id = "fmnist-3";
  start.round.round = 4;
  start.round.expected_prev_round = 3;
  start.round.ranks = {{"n1", 2, 1, 0}, {"n2", 5, 1, 1}};
  start.round.store_endpoint = "10.0.0.1:29504";
  start.round.reason = rendezvous::RoundReason::kMemberLost;
  start.round.detail = "node n3 (generation 1) was lost";
  start.round.at = rendezvous::WallTime(std::chrono::milliseconds(1'790'000'000'000));
  start.spec.name = "fmnist";
  start.spec.command = {"elastic-trainer", "--model", "fmnist"};
  start.spec.env = {{"GLOO_SOCKET_IFNAME", "eth0"}};
  start.spec.min_nodes = 2;
  start.spec.max_nodes = 3;
  start.spec.uid = 1000;
  start.restarts = 2;
  return start;
}

TEST(ForwardCodec, RequestAndReplyRoundTrip) {
  const ForwardRequest request = sample_request();
  auto decoded = decode_forward_request(encode_forward(request));
  ASSERT_TRUE(decoded.ok()) << decoded.error().message;
  EXPECT_EQ(*decoded, request);
  for (const ForwardOutcome outcome : {ForwardOutcome::kOk, ForwardOutcome::kError,
                                       ForwardOutcome::kRedirect, ForwardOutcome::kDenied}) {
    const ForwardReply reply{.id = 3, .outcome = outcome, .body = "{\"ok\":true}", .leader = "n2"};
    auto back = decode_forward_reply(encode_forward(reply));
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(*back, reply);
  }
}

// A refusal for lack of rights is marked for the client (elasticctl exits 77 on it alone).
TEST(ControlReply, APermissionRefusalCarriesItsCode) {
  const auto denied = nlohmann::json::parse(
      control::encode_error_reply("Only root may.", control::ErrorCode::kPermission));
  EXPECT_EQ(denied,
            nlohmann::json({{"ok", false}, {"error", "Only root may."}, {"code", "permission"}}));
  const auto other = nlohmann::json::parse(control::encode_error_reply("No job \"x\" is known."));
  EXPECT_FALSE(other.contains("code"));
  EXPECT_EQ(other["error"], "No job \"x\" is known.");
}

TEST(ForwardCodec, EveryTruncationIsAnError) {
  const std::string request = encode_forward(sample_request());
  const std::string reply = encode_forward(
      ForwardReply{.id = 1, .outcome = ForwardOutcome::kOk, .body = "x", .leader = "n1"});
  for (std::size_t n = 0; n < request.size(); ++n) {
    EXPECT_FALSE(decode_forward_request(request.substr(0, n)).ok()) << n;
  }
  for (std::size_t n = 0; n < reply.size(); ++n) {
    EXPECT_FALSE(decode_forward_reply(reply.substr(0, n)).ok()) << n;
  }
}

TEST(ForwardCodec, WrongBodiesAreErrorsNamingTheMessage) {
  // A reply is not a request (missing keys), an unknown outcome is refused.
  auto wrong =
      decode_forward_request(encode_forward(ForwardReply{.id = 1, .body = "", .leader = ""}));
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.error().message.rfind("The forwarded request", 0), 0u) << wrong.error().message;
  std::string reply = encode_forward(
      ForwardReply{.id = 1, .outcome = ForwardOutcome::kRedirect, .body = "", .leader = ""});
  const auto at = reply.find(static_cast<char>(2));  // the outcome's fixint
  ASSERT_NE(at, std::string::npos);
  reply[at] = 9;
  auto unknown = decode_forward_reply(reply);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("unknown outcome 9"), std::string::npos)
      << unknown.error().message;
}

TEST(ForwardCodec, RandomByteFlipsNeverCrash) {
  std::mt19937_64 rng(7);
  const std::string request = encode_forward(sample_request());
  const std::string start = encode_round_start(sample_start());
  for (int i = 0; i < 5000; ++i) {
    std::string a = request;
    std::string b = start;
    for (int k = 0; k < 3; ++k) {
      a[rng() % a.size()] = static_cast<char>(rng());
      b[rng() % b.size()] = static_cast<char>(rng());
    }
    (void)decode_forward_request(a);
    (void)decode_forward_reply(a);
    (void)decode_round_start(b);
    (void)decode_round_start(a);
  }
}

// `decoded` is `start`, field by field.
void expect_same_start(const Result<RoundStart>& decoded, const RoundStart& start) {
  ASSERT_TRUE(decoded.ok()) << decoded.error().message;
  EXPECT_EQ(decoded->term, start.term);
  EXPECT_EQ(decoded->state, start.state);
  EXPECT_EQ(decoded->round, start.round);
  EXPECT_EQ(decoded->spec, start.spec);
  EXPECT_EQ(decoded->restarts, start.restarts);
  EXPECT_EQ(decoded->hold_live, start.hold_live);
}

TEST(RoundStartCodec, RoundTripsTheCommittedOpenRound) {
  const RoundStart start = sample_start();
  auto decoded = decode_round_start(encode_round_start(start));
  expect_same_start(decoded, start);
  EXPECT_FALSE(decoded->hold_live);
  RoundStart held = start;
  held.hold_live = true;
  auto decoded_held = decode_round_start(encode_round_start(held));
  ASSERT_TRUE(decoded_held.ok()) << decoded_held.error().message;
  EXPECT_TRUE(decoded_held->hold_live);
}

TEST(RoundStartCodec, TruncatedOrForeignBodiesAreErrors) {
  const std::string bytes = encode_round_start(sample_start());
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(decode_round_start(bytes.substr(0, n)).ok()) << n;
  }
  auto foreign = decode_round_start(encode_forward(sample_request()));
  ASSERT_FALSE(foreign.ok());
  EXPECT_EQ(foreign.error().message.rfind("The round start", 0), 0u) << foreign.error().message;
}

TEST(RoundStartCodec, ARankDeltaNeedsTheRoundItIsAgainst) {
  // The full-form decoder has no round to resolve a delta against.
  RoundStart start = sample_start();
  start.round.ranks.clear();
  start.round.delta = rendezvous::RankDelta{3, 3, {{.from = 0, .count = 2}}};
  auto decoded = decode_round_start(encode_round_start(start));
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.error().message,
            "The round start of job fmnist-3 round 4 is a delta against round 3, and this daemon "
            "holds no round of the job.");
}

// Round 3 of sample_start()'s job as a member holds it: n1, n2 and n3.
HeldRound held_round_3() {
  const RoundStart start = sample_start();
  HeldRound held;
  held.round = 3;
  held.ranks = {{"n1", 2, 1, 0}, {"n2", 5, 1, 1}, {"n3", 1, 1, 2}};
  held.spec = start.spec;
  held.spec_digest = spec_digest(start.spec);
  return held;
}

// The delta form of round 4 (n3 lost) against round 3 reads back as the full round, with the
// member's spec; it is a fraction of the full form, and of a 1,024-node round a few hundred bytes.
TEST(RoundStartCodec, TheDeltaFormReadsBackAsTheFullRound) {
  const RoundStart start = sample_start();
  const HeldRound held = held_round_3();
  const auto lookup = [&](const std::string& job) { return job == "fmnist-3" ? &held : nullptr; };
  const auto delta = encode_round_start_delta(start, 3, held.ranks, held.spec_digest);
  ASSERT_TRUE(delta.has_value());
  expect_same_start(decode_round_start(*delta, lookup), start);
  // The full form reads the same through the lookup (which it does not need).
  auto full = decode_round_start(encode_round_start(start), lookup);
  ASSERT_TRUE(full.ok()) << full.error().message;
  EXPECT_EQ(full->round, start.round);
  auto stamp = peek_round_start(*delta);
  ASSERT_TRUE(stamp.ok()) << stamp.error().message;
  EXPECT_EQ(stamp->term, 9u);
  EXPECT_EQ(stamp->job, "fmnist-3");
  EXPECT_EQ(stamp->round, 4u);
  EXPECT_TRUE(stamp->delta);
  EXPECT_FALSE(peek_round_start(encode_round_start(start))->delta);

  // Sent again to a member that holds round 4 itself: a delta against the round itself.
  HeldRound held4 = held;
  held4.round = 4;
  held4.ranks = start.round.ranks;
  RoundStart again = start;
  again.hold_live = true;
  const auto itself = encode_round_start_delta(again, 4, held4.ranks, held4.spec_digest);
  ASSERT_TRUE(itself.has_value());
  auto decoded_again = decode_round_start(*itself, [&](const std::string&) { return &held4; });
  ASSERT_TRUE(decoded_again.ok()) << decoded_again.error().message;
  EXPECT_EQ(decoded_again->round, start.round);
  EXPECT_TRUE(decoded_again->hold_live);

  // 1,024 nodes, one lost: the whole map against a few runs.
  RoundStart big = start;
  HeldRound before = held;
  before.ranks.clear();
  big.round.ranks.clear();
  for (std::uint32_t i = 0; i < 1024; ++i) {
    before.ranks.push_back({"node-" + std::to_string(i), 1, 8, 8 * i});
    if (i != 500) {
      big.round.ranks.push_back({"node-" + std::to_string(i), 1, 8,
                                 static_cast<std::uint32_t>(big.round.ranks.size() * 8)});
    }
  }
  const std::string big_full = encode_round_start(big);
  const auto big_delta = encode_round_start_delta(big, 3, before.ranks, before.spec_digest);
  ASSERT_TRUE(big_delta.has_value());
  EXPECT_GT(big_full.size(), 20'000u);
  EXPECT_LT(big_delta->size(), 400u) << "full: " << big_full.size();
  auto big_decoded = decode_round_start(*big_delta, [&](const std::string&) { return &before; });
  ASSERT_TRUE(big_decoded.ok()) << big_decoded.error().message;
  EXPECT_EQ(big_decoded->round.ranks, big.round.ranks);
}

TEST(RoundStartCodec, ADeltaAgainstAnotherRoundOrSpecIsAnError) {
  const RoundStart start = sample_start();
  const HeldRound held = held_round_3();
  const auto delta = encode_round_start_delta(start, 3, held.ranks, held.spec_digest);
  ASSERT_TRUE(delta.has_value());
  // The member holds round 2, or no round of the job.
  HeldRound older = held;
  older.round = 2;
  auto other_round = decode_round_start(*delta, [&](const std::string&) { return &older; });
  ASSERT_FALSE(other_round.ok());
  EXPECT_EQ(other_round.error().message,
            "The round start of job fmnist-3 round 4 is a delta against round 3, and this daemon "
            "holds round 2.");
  EXPECT_FALSE(decode_round_start(*delta, [](const std::string&) { return nullptr; }).ok());
  EXPECT_FALSE(decode_round_start(*delta, nullptr).ok());
  // A map that is not the one the delta was made against (a run copies past its end).
  HeldRound shorter = held;
  shorter.ranks.pop_back();
  shorter.ranks.pop_back();
  auto misfit = decode_round_start(*delta, [&](const std::string&) { return &shorter; });
  ASSERT_FALSE(misfit.ok());
  EXPECT_EQ(misfit.error().message.rfind("The round start of job fmnist-3 round 4: ", 0), 0u)
      << misfit.error().message;
  // The spec changed since (a new priority): its digest is not the held spec's.
  HeldRound stale_spec = held;
  stale_spec.spec_digest ^= 1;
  auto spec = decode_round_start(*delta, [&](const std::string&) { return &stale_spec; });
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.error().message,
            "The round start of job fmnist-3 round 4 names a spec by a digest this daemon does "
            "not hold.");
  // The full-form decoder refuses a digest in place of the spec.
  auto no_spec = decode_round_start(*delta);
  ASSERT_FALSE(no_spec.ok());
  // No delta of a map that keeps no entry of the base.
  rendezvous::RankMap unrelated = {{"x1", 1, 1, 0}};
  EXPECT_FALSE(encode_round_start_delta(start, 3, unrelated, held.spec_digest).has_value());
}

TEST(RoundStartCodec, DeltaFormByteFlipsNeverCrash) {
  const HeldRound held = held_round_3();
  const std::string delta =
      *encode_round_start_delta(sample_start(), 3, held.ranks, held.spec_digest);
  std::mt19937_64 rng(11);
  for (int i = 0; i < 5000; ++i) {
    std::string b = delta;
    for (int k = 0; k < 3; ++k) b[rng() % b.size()] = static_cast<char>(rng());
    (void)decode_round_start(b, [&](const std::string&) { return &held; });
    (void)peek_round_start(b);
  }
  for (std::size_t n = 0; n < delta.size(); ++n) {
    EXPECT_FALSE(
        decode_round_start(delta.substr(0, n), [&](const std::string&) { return &held; }).ok())
        << n;
  }
}

// One report of each kind, every field of its kind set.
std::vector<RoundReport> sample_reports() {
  std::vector<RoundReport> reports;
  RoundReport info = round_report(ReportKind::kNodeInfo, "", 0);
  info.slots = 8;
  reports.push_back(info);
  for (ReportKind kind : {ReportKind::kNodeLeaving, ReportKind::kRoundAck, ReportKind::kWorkersDone,
                          ReportKind::kWorkersStopped}) {
    reports.push_back(round_report(kind, "train-1", 4));
  }
  reports[2].live = true;  // the round_ack of workers that re-form in place
  RoundReport failed = round_report(ReportKind::kWorkerFailed, "train-1", 4);
  failed.detail = "rank 3 on node n2 exited 1";
  failed.rank = 3;
  failed.at_ms = 1'700'000'000'000;
  failed.peers_alive = true;  // the repeat after every round peer answered
  reports.push_back(failed);
  RoundReport lost = round_report(ReportKind::kPeerLost, "train-1", 4);
  lost.peer = "n3";
  lost.peer_generation = 7;
  lost.reason = "keepalive timeout";
  lost.last_heard_ms = 1'700'000'000'000;
  lost.live = true;
  reports.push_back(lost);
  RoundReport progress = round_report(ReportKind::kProgress, "train-1", 1ULL << 40);
  progress.rank = 0;
  progress.event = "step";
  progress.step = 1200;
  progress.resumed_from = -1;
  progress.samples = 38'400;
  progress.loss = 0.4375;
  reports.push_back(progress);
  RoundReport port_busy = round_report(ReportKind::kStorePortBusy, "train-1", 4);
  port_busy.port = 29501;
  port_busy.detail = "another process on node n1 holds TCP port 29501";
  reports.push_back(port_busy);
  reports.push_back(round_report(ReportKind::kRoundReceived, "train-1", 4));
  return reports;
}

TEST(RoundReportCodec, EveryKindRoundTrips) {
  const std::vector<RoundReport> reports = sample_reports();
  ASSERT_EQ(reports.size(), static_cast<std::size_t>(kLastReportKind) + 1);
  for (const RoundReport& report : reports) {
    const std::string name(report_name(report.kind));
    auto decoded = decode_round_report(encode_round_report(report));
    ASSERT_TRUE(decoded.ok()) << name << ": " << decoded.error().message;
    EXPECT_EQ(*decoded, report) << name;
  }
  // Wall times before the epoch and the extremes of a signed 64-bit number survive.
  RoundReport failed = reports[5];
  ASSERT_EQ(failed.kind, ReportKind::kWorkerFailed);
  for (const std::int64_t at : {std::int64_t{-1}, std::numeric_limits<std::int64_t>::min(),
                                std::numeric_limits<std::int64_t>::max()}) {
    failed.at_ms = at;
    auto decoded = decode_round_report(encode_round_report(failed));
    ASSERT_TRUE(decoded.ok()) << decoded.error().message;
    EXPECT_EQ(decoded->at_ms, at);
  }
}

// What a forged report's sender controls: each of these is one sentence, never an exception
// (they stopped the leader when reports were JSON and the leader read fields unchecked).
TEST(RoundReportCodec, ForgedReportsAreErrorsNamingTheProblem) {
  auto error_of = [](const RoundReport& report) {
    auto decoded = decode_round_report(encode_round_report(report));
    return decoded.ok() ? std::string("(decoded)") : decoded.error().message;
  };
  RoundReport info = round_report(ReportKind::kNodeInfo, "", 0);
  info.slots = rendezvous::kMaxWorkersPerNode + 1;
  EXPECT_EQ(error_of(info), "The round report offers 1025 worker slots, more than 1024.");
  EXPECT_EQ(error_of(round_report(ReportKind::kRoundAck, "", 1)), "The round report names no job.");
  EXPECT_EQ(error_of(round_report(ReportKind::kPeerLost, "j", 1)),
            "The round report names no lost peer.");
  RoundReport progress = round_report(ReportKind::kProgress, "j", 1);
  progress.event = "explode";
  EXPECT_EQ(error_of(progress),
            "The round report has an event other than \"step\", \"checkpoint\" or \"resume\".");
  progress.event = "step";
  progress.step = -5;
  EXPECT_EQ(error_of(progress), "The round report has a negative step.");
  progress.step = 5;
  progress.samples = -1;
  EXPECT_EQ(error_of(progress), "The round report has a negative sample count.");
  progress.samples.reset();
  progress.loss = std::numeric_limits<double>::infinity();
  EXPECT_EQ(error_of(progress), "The round report has key 'ls' that is not finite.");
  progress.loss.reset();
  EXPECT_EQ(error_of(round_report(ReportKind::kStorePortBusy, "j", 1)),
            "The round report names port 0.");
  RoundReport long_job =
      round_report(ReportKind::kRoundAck, std::string(kMaxReportIdBytes + 1, 'j'), 1);
  EXPECT_NE(error_of(long_job).find("'j'"), std::string::npos) << error_of(long_job);
  RoundReport long_detail = round_report(ReportKind::kWorkerFailed, "j", 1);
  long_detail.detail = std::string(kMaxReportTextBytes + 1, 'd');
  EXPECT_NE(error_of(long_detail).find("'d'"), std::string::npos) << error_of(long_detail);
  // A kind past the last one: "k" is the first key, its value the byte after "\xa1k".
  std::string bytes = encode_round_report(round_report(ReportKind::kRoundAck, "j", 1));
  const auto at = bytes.find("\xa1k");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 2] = static_cast<char>(static_cast<int>(kLastReportKind) + 1);
  auto unknown = decode_round_report(bytes);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().message, "The round report has key 'k' with an unknown value 10.");
  // Another message's body is not a report.
  auto foreign = decode_round_report(encode_forward(sample_request()));
  ASSERT_FALSE(foreign.ok());
  EXPECT_EQ(foreign.error().message.rfind("The round report", 0), 0u) << foreign.error().message;
}

TEST(RoundReportCodec, TruncationsAndByteFlipsAreErrorsNeverCrashes) {
  std::mt19937_64 rng(11);
  for (const RoundReport& report : sample_reports()) {
    const std::string bytes = encode_round_report(report);
    for (std::size_t n = 0; n < bytes.size(); ++n) {
      EXPECT_FALSE(decode_round_report(bytes.substr(0, n)).ok()) << n;
    }
    for (int i = 0; i < 500; ++i) {
      std::string flipped = bytes;
      for (int k = 0; k < 3; ++k) flipped[rng() % flipped.size()] = static_cast<char>(rng());
      (void)decode_round_report(flipped);
    }
  }
}

}  // namespace
}  // namespace elastic::node
