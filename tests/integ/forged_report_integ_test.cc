// Security: round reports (wire type kRoundReport) forged by a local user who is not root, sent
// to a real elasticd's transport port while one of its jobs runs. A report is a member daemon
// telling the leader about a round (its workers run, failed, finished; a peer is lost; the node
// drains), so an accepted forgery fails, reopens or ends someone else's job.
//  - transport.curve = false (loopback only): whoever reaches the port names any sender, so
//    every well-formed report from the port is dropped (one log line, the first of every 100),
//    whoever it claims to be, the job's own node included; a malformed one is counted as
//    malformed; the job keeps its round and the daemon keeps serving.
//  - CURVE (the default): the attacker cannot read the node's secret key, so its connection is
//    refused at the handshake, without a key and with a key of its own (the ZAP handler logs
//    the refusal); nothing reaches the round service.
// The attacker is a child process that drops to uid/gid 65534 (nobody) before it opens a
// socket, so the cases need root and skip otherwise. Every wait polls with a deadline.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "daemon/node/round_report.h"
#include "daemon/transport/curve_keys.h"
#include "daemon/wire/codec.h"
#include "tests/integ/daemon_under_test.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace elastic::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;

constexpr uid_t kNobody = 65534;
// In every forged detail and reason: a log that quotes it shows the forgery was acted on.
constexpr const char* kForged = "forged by a local user";

bool is_root() { return ::geteuid() == 0; }

// Runs `attack` in a child process as uid/gid nobody with no supplementary groups; its exit
// status (0: the attack ran as nobody and sent everything it meant to).
int run_as_nobody(const std::function<int()>& attack) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) {
      _exit(2);
    }
    if (::geteuid() != kNobody || ::setuid(0) == 0) _exit(3);  // no way back to root
    _exit(attack());
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Sends `envelopes` in order on one DEALER to `address` (with `keys`, as a CURVE client of the
// server key `server_key`), waiting up to `linger` for them to leave. Returns an exit status.
int send_envelopes(const std::string& address, const std::vector<wire::Envelope>& envelopes,
                   const std::optional<transport::CurveKeyPair>& keys,
                   const std::string& server_key, std::chrono::milliseconds linger) {
  zmq::context_t context;
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, static_cast<int>(linger.count()));
  dealer.set(zmq::sockopt::routing_id, "mallory/1");
  if (keys) {
    dealer.set(zmq::sockopt::curve_serverkey, server_key);
    dealer.set(zmq::sockopt::curve_publickey, keys->public_key);
    dealer.set(zmq::sockopt::curve_secretkey, keys->secret_key);
  }
  dealer.connect(address);
  for (const wire::Envelope& envelope : envelopes) {
    const std::string bytes = wire::encode_envelope(envelope);
    if (!dealer.send(zmq::buffer(bytes), zmq::send_flags::dontwait)) return 5;
  }
  dealer.close();
  context.close();  // waits (up to linger) until the queued messages went out
  return 0;
}

wire::Envelope report_from(const std::string& sender, std::uint64_t generation,
                           const std::string& body, std::uint64_t seq) {
  wire::Envelope envelope;
  envelope.cluster_id = "elastic";
  envelope.sender = sender;
  envelope.generation = generation;
  envelope.sender_address = "tcp://127.0.0.1:9";  // nothing answers a report
  envelope.type = wire::MsgType::kRoundReport;
  envelope.seq = seq;
  envelope.body = body;
  return envelope;
}

// Every report that would disturb `job`'s round `round` on `node` (generation `generation`),
// from a stranger ("mallory") and posing as the job's own node, then one that does not decode
// (a round_ack without a job), which the daemon counts: once it is counted, the daemon has
// handled all the others (one connection delivers in order).
std::vector<wire::Envelope> forged_reports(const std::string& job, std::uint64_t round,
                                           const std::string& node, std::uint64_t generation) {
  using node::ReportKind;
  node::RoundReport failed = node::round_report(ReportKind::kWorkerFailed, job, round);
  failed.rank = 0;
  failed.detail = kForged;
  node::RoundReport lost = node::round_report(ReportKind::kPeerLost, job, round);
  lost.peer = node;
  lost.peer_generation = generation;
  lost.reason = kForged;
  node::RoundReport busy = node::round_report(ReportKind::kStorePortBusy, job, round);
  busy.port = 1;
  busy.detail = kForged;
  node::RoundReport info = node::round_report(ReportKind::kNodeInfo, "", 0);
  info.slots = 64;
  std::vector<wire::Envelope> envelopes;
  std::uint64_t seq = 0;
  for (const auto& [sender, gen] : {std::pair<std::string, std::uint64_t>{"mallory", 1},
                                    std::pair<std::string, std::uint64_t>{node, generation}}) {
    for (const node::RoundReport& report :
         {failed, lost, busy, info, node::round_report(ReportKind::kRoundAck, job, round),
          node::round_report(ReportKind::kWorkersDone, job, round),
          node::round_report(ReportKind::kNodeLeaving, "", 0)}) {
      envelopes.push_back(report_from(sender, gen, node::encode_round_report(report), ++seq));
    }
  }
  envelopes.push_back(report_from(
      "mallory", 1, node::encode_round_report(node::round_report(ReportKind::kRoundAck, "", 1)),
      ++seq));
  return envelopes;
}

// A daemon running one job of root's (a sleep) in round `round`.
struct Victim {
  TempDir dir;
  Daemon n1{dir, "n1", {}};
  std::string job = "victim-1";
  std::uint64_t round = 0;

  explicit Victim(bool curve) {
    if (!curve) n1.set("transport.curve=false");
    n1.start();
    const RunResult submitted = elasticctl_on(n1, {"submit", "--name", "victim", "--nodes", "1",
                                                   "--workdir", "/", "--", "/bin/sleep", "600"});
    EXPECT_TRUE(submitted.status.exited_with(0)) << submitted.err;
    json status;
    EXPECT_TRUE(wait_until(
        [&] {
          status = ctl_json(n1, {"status", job, "--json"});
          return !status.is_null() && status["state"] == "running";
        },
        kConverge))
        << status.dump() << "\n"
        << n1.process().err();
    if (!status.is_null()) round = status.value("round", std::uint64_t{0});
  }

  // One of the daemon's transport counters (0 while it does not answer).
  std::uint64_t counter(const std::string& key) const {
    return transport_counter(n1, key).value_or(0);
  }

  // The job runs in the round it ran in before the attack, and the daemon answers.
  void expect_undisturbed() {
    ASSERT_TRUE(n1.process().running()) << n1.process().err();
    const json status = ctl_json(n1, {"status", job, "--json"});
    ASSERT_FALSE(status.is_null()) << n1.process().err();
    EXPECT_EQ(status["state"], "running") << status.dump();
    EXPECT_EQ(status.value("round", std::uint64_t{0}), round) << status.dump();
    EXPECT_THAT(n1.process().err(), Not(HasSubstr(kForged)));
    EXPECT_THAT(n1.process().err(), Not(HasSubstr("rendezvous: mallory")));
    EXPECT_THAT(n1.process().err(),
                Not(HasSubstr("n1 (gen " + std::to_string(n1.generation()) + ") drains")));
  }
};

TEST(ForgedReportInteg, PlainLoopbackDaemonActsOnNoReportFromTheNetwork) {
  if (!is_root()) GTEST_SKIP() << "needs root: the attacker runs as uid 65534 (nobody)";
  Victim victim(/*curve=*/false);
  ASSERT_GT(victim.round, 0u);
  const std::uint64_t before = victim.counter("dropped_undecodable");
  const std::vector<wire::Envelope> reports =
      forged_reports(victim.job, victim.round, "n1", victim.n1.generation());
  const std::string address = victim.n1.address();
  ASSERT_EQ(run_as_nobody([&] { return send_envelopes(address, reports, std::nullopt, "", 10s); }),
            0);
  // The malformed report at the end is counted: every forged one before it was handled.
  EXPECT_TRUE(wait_until([&] { return victim.counter("dropped_undecodable") > before; }, kConverge))
      << victim.n1.process().err();
  victim.expect_undisturbed();
  // One line says what was dropped and why (the first of every 100).
  EXPECT_THAT(victim.n1.process().err(),
              HasSubstr("dropped a message of type " +
                        std::to_string(static_cast<int>(wire::MsgType::kRoundReport)) +
                        " from mallory: with transport.curve = false"));
}

TEST(ForgedReportInteg, CurveDaemonRefusesTheAttackerAtTheHandshake) {
  if (!is_root()) GTEST_SKIP() << "needs root: the attacker runs as uid 65534 (nobody)";
  Victim victim(/*curve=*/true);
  ASSERT_GT(victim.round, 0u);
  const std::vector<wire::Envelope> reports =
      forged_reports(victim.job, victim.round, "n1", victim.n1.generation());
  const std::string address = victim.n1.address();
  const std::string secret_key_file = victim.n1.secret_key_file();
  auto server_key = transport::load_curve_public_key(victim.n1.public_keys_dir() + "/n1.pub");
  ASSERT_TRUE(server_key.ok()) << server_key.error().message;
  auto own_keys = transport::generate_curve_keypair();
  ASSERT_TRUE(own_keys.ok());

  // Without CURVE, and with a key pair of its own that no allow-list holds. The node's secret
  // key is out of its reach (what CURVE's guarantee rests on).
  for (const std::optional<transport::CurveKeyPair>& keys :
       {std::optional<transport::CurveKeyPair>(), std::optional(*own_keys)}) {
    const std::uint64_t before = victim.counter("dropped_unauthenticated");
    ASSERT_EQ(run_as_nobody([&] {
                if (::open(secret_key_file.c_str(), O_RDONLY | O_CLOEXEC) >= 0) return 6;
                return send_envelopes(address, reports, keys, *server_key, 2s);
              }),
              0);
    EXPECT_TRUE(
        wait_until([&] { return victim.counter("dropped_unauthenticated") > before; }, kConverge))
        << victim.n1.process().err();
  }
  EXPECT_THAT(victim.n1.process().err(), HasSubstr("refused a CURVE key that is not in"));
  victim.expect_undisturbed();
}

}  // namespace
}  // namespace elastic::testing
