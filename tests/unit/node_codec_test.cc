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

TEST(RoundStartCodec, RoundTripsTheCommittedOpenRound) {
  const RoundStart start = sample_start();
  auto decoded = decode_round_start(encode_round_start(start));
  ASSERT_TRUE(decoded.ok()) << decoded.error().message;
  EXPECT_EQ(decoded->term, start.term);
  EXPECT_EQ(decoded->state, start.state);
  EXPECT_EQ(decoded->round, start.round);
  EXPECT_EQ(decoded->spec, start.spec);
  EXPECT_EQ(decoded->restarts, start.restarts);
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

TEST(RoundStartCodec, ARankDeltaIsNoRoundToStart) {
  // Members act without a job table to resolve a delta against: only full maps go out.
  RoundStart start = sample_start();
  start.round.ranks.clear();
  start.round.delta = rendezvous::RankDelta{3, 3, {{.from = 0, .count = 2}}};
  auto decoded = decode_round_start(encode_round_start(start));
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.error().message,
            "The round start carries a rank delta instead of a full rank map.");
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
  EXPECT_EQ(unknown.error().message, "The round report has key 'k' with an unknown value 9.");
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
