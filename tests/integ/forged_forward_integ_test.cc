// Security: a hand-made daemon-to-daemon forward request (type 13) carrying
// uid 0 and admin true, sent to a daemon's transport port by a process that is not a daemon,
// once ran a job as root. Here the test itself plays that process with a real ZeroMQ DEALER
// (and a ROUTER for the replies a daemon would send back), against real elasticd processes:
//  - a CURVE daemon (the default) never lets a client without CURVE, or with a key outside its
//    allow-list, get a message through, so the request is never acted on;
//  - a node key may speak only as its own node: an envelope claiming another sender is dropped,
//    while the same key speaking as itself is answered (so the forgery above is what failed);
//  - a daemon with transport.curve = false (loopback only) answers a forwarded identity with a
//    permission refusal and acts on nothing, and acts on no other daemon's Raft, round start,
//    job-tier or lease message (a forged round start naming it once started a worker as root).
// No fixed sleeps: every wait polls a counter or a reply with a deadline.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "daemon/node/forward_codec.h"
#include "daemon/node/round_codec.h"
#include "daemon/transport/curve_keys.h"
#include "daemon/wire/codec.h"
#include "tests/integ/daemon_under_test.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace elastic::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;

// The request of the attack: submit a job that records its uid in `marker`, as root and admin.
std::string forged_submit_args(const std::string& marker) {
  return nlohmann::json{
      {"verb", "submit"},
      {"spec", {{"name", "forged"}, {"command", {"/bin/sh", "-c", "id -u > " + marker}}}}}
      .dump();
}

wire::Envelope forward_request(const std::string& sender, const std::string& reply_to,
                               std::uint64_t id, const std::string& verb,
                               const std::string& args) {
  wire::Envelope envelope;
  envelope.cluster_id = "elastic";
  envelope.sender = sender;
  envelope.generation = 1;
  envelope.sender_address = reply_to;
  envelope.type = wire::MsgType::kForwardRequest;
  envelope.seq = id;
  envelope.body = node::encode_forward(node::ForwardRequest{.id = id,
                                                            .verb = verb,
                                                            .args = args,
                                                            .uid = 0,
                                                            .gid = 0,
                                                            .admin = true,
                                                            .client_seq = id});
  return envelope;
}

// A process posing as a daemon: a DEALER to the daemon's transport port and a ROUTER on
// 127.0.0.1 where the daemon sends its replies (the envelope's sender_address). With `keys`,
// both speak CURVE with that key pair (the DEALER authenticates the daemon by `server_key`).
class FakePeer {
 public:
  FakePeer(const std::string& daemon_address,
           const std::optional<transport::CurveKeyPair>& keys = std::nullopt,
           const std::string& server_key = "")
      : router_(context_, zmq::socket_type::router), dealer_(context_, zmq::socket_type::dealer) {
    router_.set(zmq::sockopt::linger, 0);
    dealer_.set(zmq::sockopt::linger, 0);
    dealer_.set(zmq::sockopt::routing_id, "fake/1");
    if (keys) {
      router_.set(zmq::sockopt::curve_server, 1);
      router_.set(zmq::sockopt::curve_secretkey, keys->secret_key);
      dealer_.set(zmq::sockopt::curve_serverkey, server_key);
      dealer_.set(zmq::sockopt::curve_publickey, keys->public_key);
      dealer_.set(zmq::sockopt::curve_secretkey, keys->secret_key);
    }
    router_.bind("tcp://127.0.0.1:*");
    address_ = router_.get(zmq::sockopt::last_endpoint);
    dealer_.connect(daemon_address);
  }

  const std::string& address() const { return address_; }

  // Queued until the connection is up (a refused handshake keeps it queued for ever).
  void send(const wire::Envelope& envelope) {
    const std::string bytes = wire::encode_envelope(envelope);
    EXPECT_TRUE(dealer_.send(zmq::buffer(bytes), zmq::send_flags::dontwait).has_value());
  }

  // The next forward reply the daemon sends back within `timeout`.
  std::optional<node::ForwardReply> reply(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, 100ms);
      if (!(item.revents & ZMQ_POLLIN)) continue;
      std::vector<zmq::message_t> parts;
      if (!zmq::recv_multipart(router_, std::back_inserter(parts), zmq::recv_flags::dontwait)) {
        continue;
      }
      if (parts.size() != 2) continue;
      wire::DecodeLimits limits;
      limits.cluster_id = "elastic";
      auto envelope = wire::decode_envelope(parts[1].to_string_view(), limits);
      if (!envelope.ok() || envelope->type != wire::MsgType::kForwardReply) continue;
      auto decoded = node::decode_forward_reply(envelope->body);
      if (decoded.ok()) return *decoded;
    }
    return std::nullopt;
  }

 private:
  zmq::context_t context_;
  zmq::socket_t router_;
  zmq::socket_t dealer_;
  std::string address_;
};

RunResult ctl(const Daemon& daemon, const std::vector<std::string>& args) {
  std::vector<std::string> all = {"-c", "", "--set", "control.socket=" + daemon.socket()};
  all.insert(all.end(), args.begin(), args.end());
  return elasticctl(all);
}

std::uint64_t unauthenticated(const Daemon& daemon) {
  return transport_counter(daemon, "dropped_unauthenticated").value_or(0);
}

// The number of jobs in the leader's table (the daemon is its own leader here).
std::optional<std::size_t> job_count(const Daemon& daemon) {
  const RunResult r = ctl(daemon, {"jobs", "--json"});
  if (!r.status.exited_with(0)) return std::nullopt;
  const auto reply = nlohmann::json::parse(r.out, nullptr, false);
  if (reply.is_discarded() || !reply.contains("jobs")) return std::nullopt;
  return reply["jobs"].size();
}

// The daemon answers on its control socket and has a leader (itself): it would act on a
// request now.
void wait_serving(const Daemon& daemon) {
  ASSERT_TRUE(wait_until([&] { return job_count(daemon) == 0u; }, kConverge))
      << ctl(daemon, {"jobs", "--json"}).err;
}

transport::CurveKeyPair load_keys(const std::string& secret_key_file) {
  auto keys = transport::load_curve_secret_key(secret_key_file);
  EXPECT_TRUE(keys.ok()) << keys.error().message;
  return keys.ok() ? *keys : transport::CurveKeyPair{};
}

std::string public_key(const Daemon& daemon) {
  auto key = transport::load_curve_public_key(daemon.public_keys_dir() + "/" + daemon.name() +
                                              ".pub");
  EXPECT_TRUE(key.ok()) << key.error().message;
  return key.ok() ? *key : std::string();
}

// ---- CURVE (the default) ---------------------------------------------------------------------

TEST(ForgedForward, CurveDaemonLetsNoUnauthenticatedClientThrough) {
  TempDir dir;
  Daemon n1(dir, "n1", {});
  n1.start();
  wait_serving(n1);
  const std::string marker = dir.file("ran-as-root");

  // Without CURVE: refused at the ZMTP greeting, so the request never leaves the DEALER.
  std::uint64_t refused = unauthenticated(n1);
  FakePeer plain(n1.address());
  plain.send(forward_request("n2", plain.address(), 1, "submit", forged_submit_args(marker)));
  EXPECT_TRUE(wait_until([&] { return unauthenticated(n1) > refused; }, 10s));

  // With a CURVE key of its own that is not in the allow-list: refused by the ZAP handler.
  refused = unauthenticated(n1);
  auto stranger_keys = transport::generate_curve_keypair();
  ASSERT_TRUE(stranger_keys.ok());
  FakePeer stranger(n1.address(), *stranger_keys, public_key(n1));
  stranger.send(
      forward_request("n2", stranger.address(), 2, "submit", forged_submit_args(marker)));
  EXPECT_TRUE(wait_until([&] { return unauthenticated(n1) > refused; }, 10s));

  EXPECT_FALSE(plain.reply(200ms).has_value());
  EXPECT_FALSE(stranger.reply(200ms).has_value());
  EXPECT_EQ(job_count(n1), 0u);
  EXPECT_FALSE(std::filesystem::exists(marker));
  EXPECT_TRUE(n1.process().running()) << n1.process().err();
}

// A node key speaks for its own node only: n2's key posing as n3 is dropped (counted and
// logged), while the same connection speaking as n2 is answered. The answer also shows the
// forged request itself was well formed: only the sender check kept it out.
TEST(ForgedForward, NodeKeyCannotSpeakAsAnotherNode) {
  TempDir dir;
  Daemon n1(dir, "n1", {});
  Daemon n2(dir, "n2", {});  // never started: the test holds its key
  Daemon n3(dir, "n3", {});  // in the allow-list too, so only the key binding refuses
  n1.start();
  wait_serving(n1);
  const std::uint64_t refused = unauthenticated(n1);

  FakePeer as_n2(n1.address(), load_keys(n2.secret_key_file()), public_key(n1));
  as_n2.send(forward_request("n3", as_n2.address(), 1, "jobs", R"({"verb":"jobs"})"));
  as_n2.send(forward_request("n2", as_n2.address(), 2, "jobs", R"({"verb":"jobs"})"));

  // One connection delivers in order: the answer to 2 means 1 was handled (dropped) before.
  const auto answer = as_n2.reply(10s);
  ASSERT_TRUE(answer.has_value()) << n1.process().err();
  EXPECT_EQ(answer->id, 2u);
  EXPECT_EQ(answer->outcome, node::ForwardOutcome::kOk) << answer->body;
  EXPECT_FALSE(as_n2.reply(200ms).has_value());
  EXPECT_GT(unauthenticated(n1), refused);
  EXPECT_THAT(n1.process().err(), HasSubstr("key of node n2 claimed to be n3"));
}

// ---- transport.curve = false (loopback only) --------------------------------------------------

TEST(ForgedForward, PlainLoopbackDaemonRefusesForwardedIdentities) {
  TempDir dir;
  Daemon n1(dir, "n1", {});
  n1.set("transport.curve=false");
  n1.start();
  wait_serving(n1);
  const std::string marker = dir.file("ran-as-root");

  FakePeer attacker(n1.address());
  attacker.send(
      forward_request("n2", attacker.address(), 1, "submit", forged_submit_args(marker)));
  const auto answer = attacker.reply(10s);
  ASSERT_TRUE(answer.has_value()) << n1.process().err();
  EXPECT_EQ(answer->outcome, node::ForwardOutcome::kDenied) << answer->body;
  EXPECT_THAT(answer->body, HasSubstr("forwarding needs transport.curve = true"));

  // Admin verbs are refused the same way (a forged admin flag is no better than a forged uid).
  attacker.send(forward_request("n2", attacker.address(), 2, "drain",
                                R"({"verb":"drain","node":"n1","reason":"forged"})"));
  const auto drain = attacker.reply(10s);
  ASSERT_TRUE(drain.has_value());
  EXPECT_EQ(drain->outcome, node::ForwardOutcome::kDenied) << drain->body;

  EXPECT_EQ(job_count(n1), 0u);
  EXPECT_FALSE(std::filesystem::exists(marker));
  EXPECT_THAT(n1.process().err(), HasSubstr("refused a request forwarded from n2 (submit)"));
  // The local control socket still serves everything (the single-daemon use of this mode).
  const RunResult submitted =
      ctl(n1, {"submit", "--name", "local", "--nodes", "1", "--", "/bin/true"});
  EXPECT_TRUE(submitted.status.exited_with(0)) << submitted.err;
}

// A round start is the leader telling a member to start workers, with the job's spec and so its
// user. Without CURVE nobody vouches for the sender, so a forged one (a newer term than any the
// daemon knows, a spec of uid 0) once started a worker as root on a plain loopback daemon.
TEST(ForgedForward, PlainLoopbackDaemonActsOnNoRoundStartFromAnotherDaemon) {
  TempDir dir;
  Daemon n1(dir, "n1", {});
  n1.set("transport.curve=false");
  n1.start();
  wait_serving(n1);
  const std::uint64_t generation = n1.generation();
  const std::string marker = dir.file("ran-as-root");

  node::RoundStart start;
  start.term = 1000;
  start.state = rendezvous::JobState::kRendezvous;
  start.round.job_id = "forged-1";
  start.round.round = 1;
  start.round.ranks = {rendezvous::RankAssignment{
      .node = "n1", .generation = generation, .slots = 1, .first_rank = 0}};
  start.round.store_endpoint = "127.0.0.1:29999";
  start.spec.name = "forged";
  start.spec.command = {"/bin/sh", "-c", "id -u > " + marker};
  start.spec.user = "root";
  start.spec.working_dir = dir.path();
  FakePeer attacker(n1.address());
  wire::Envelope envelope;
  envelope.cluster_id = "elastic";
  envelope.sender = "n2";
  envelope.generation = 1;
  envelope.sender_address = attacker.address();
  envelope.type = wire::MsgType::kRoundStart;
  envelope.seq = 1;
  envelope.body = node::encode_round_start(start);
  attacker.send(envelope);

  // The daemon logs the drop; no worker ever starts.
  EXPECT_TRUE(wait_until(
      [&] { return n1.process().err().find("acts on no message but membership") !=
                   std::string::npos; },
      10s))
      << n1.process().err();
  EXPECT_THAT(n1.process().err(), Not(HasSubstr("job forged-1 round 1")));
  EXPECT_FALSE(std::filesystem::exists(marker));
}

}  // namespace
}  // namespace elastic::testing
