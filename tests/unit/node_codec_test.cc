// The daemon-to-daemon bodies of daemon/node: forwarded client requests and replies, and
// RoundStart. Round trips, every truncation, byte flips and wrong types: decoding returns an
// Error and never throws or crashes.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <random>
#include <string>

#include "daemon/control/protocol.h"
#include "daemon/node/forward_codec.h"
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

}  // namespace
}  // namespace elastic::node
