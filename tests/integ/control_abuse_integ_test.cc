// Integration tier, security: a real elasticd on loopback,
// attacked through its control socket by unprivileged users (played by fork + setuid or
// setpriv, so the root-only cases skip otherwise) and through its transport port by a process
// forging round reports.
//  - Malformed control requests get one error reply each, naming the field; the daemon stays up.
//  - Forged round reports are dropped and counted; the leader stays up.
//  - One uid holding many control connections does not lock out another uid; a request dribbled
//    byte by byte is closed at the request deadline although bytes keep coming.
//  - A user flooding submits hits their own cap (named with its config key); others submit on.
//  - `status JOB --json` and `jobs --json` show a job's env to its owner and root only.
// Nothing sleeps a fixed time except the dribbling client's pace: every expectation polls with a
// deadline. Only this test's TempDir is opened to other users.
#include <gmock/gmock.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "daemon/control/protocol.h"
#include "daemon/control/verbs.h"
#include "daemon/node/round_report.h"
#include "daemon/transport/zmq_transport.h"
#include "daemon/wire/messages.h"
#include "tests/integ/daemon_under_test.h"
#include "tests/support/process.h"
#include "tests/support/sockets.h"
#include "tests/support/temp_dir.h"

namespace elastic::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

// Two ordinary users without passwd entries or admin groups.
constexpr int kAlice = 65533;
constexpr int kBob = 65532;

bool is_root() { return ::geteuid() == 0; }

// A plain daemon (no CURVE: loopback only) whose control socket other uids can reach: only
// this test's own directories are opened, never their parents.
struct Node {
  TempDir dir;
  Daemon n1{dir, "n1", {}};

  explicit Node(const std::vector<std::string>& settings = {}) {
    n1.set("transport.curve=false");
    for (const std::string& setting : settings) n1.set(setting);
    n1.start();
    ::chmod(dir.path().c_str(), 0755);
    ::chmod(dir.file("n1").c_str(), 0755);
  }

  // elasticctl on the local socket, as root (uid < 0) or as uid/gid through setpriv.
  RunResult ctl(std::vector<std::string> args, int uid = -1) const {
    return elasticctl_on(n1, args, uid);
  }

  std::string submit(const std::string& name, int uid, std::vector<std::string> extra = {}) const {
    std::vector<std::string> args = {"submit", "--name", name, "--workdir", "/"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"--", "/bin/sleep", "600"});
    const RunResult r = ctl(args, uid);
    EXPECT_TRUE(r.status.exited_with(0)) << r.err;
    std::smatch match;
    return std::regex_search(r.out, match, std::regex("submitted (\\S+)")) ? std::string(match[1])
                                                                           : std::string();
  }

  bool answers() const { return ctl({"status", "--json"}).status.exited_with(0); }

  std::uint64_t undecodable() const {
    const json reply = json::parse(ctl({"nodes", "--json"}).out, nullptr, false);
    if (!reply.is_object() || !reply.contains("transport")) return 0;
    return reply["transport"].value("dropped_undecodable", std::uint64_t{0});
  }
};

bool have_setpriv() { return std::filesystem::exists("/usr/bin/setpriv"); }

TEST(ControlAbuseInteg, MalformedRequestsFromAUserGetOneErrorEachAndTheDaemonStaysUp) {
  if (!is_root()) GTEST_SKIP() << "needs root: the requests come from another uid";
  Node node;
  const std::string job = node.submit("mine", kAlice);
  ASSERT_FALSE(job.empty());
  struct Case {
    json request;
    std::string error;
  };
  const std::vector<Case> cases = {
      {{{"verb", "events"}, {"job", 1}}, "The events request's \"job\" must be a string"},
      {{{"verb", "voters"}, {"action", 1}}, "The voters request's \"action\" must be a string"},
      // Admin verbs: a user is refused before the arguments are read.
      {{{"verb", "drain"}, {"node", "n1"}, {"reason", 1}},
       "Only root or members of control.admin_group may drain nodes."},
      {{{"verb", "voters"}, {"action", "add"}, {"node", json::array({1})}},
       "The voters request's \"node\" must be a string (a node name), not an array"},
      {{{"verb", "events"}, {"limit", "all"}}, "The events request's \"limit\" must be"},
      {{{"verb", "job"}, {"job", json::object()}}, "The job request's \"job\" must be a string"},
      {{{"verb", "cancel"}, {"job", true}}, "The cancel request's \"job\" must be a string"},
      {{{"verb", "undrain"}, {"node", nullptr}},
       "Only root or members of control.admin_group may undrain nodes."},
      {{{"verb", "reload"}}, "Only root or members of control.admin_group may reload"},
      {{{"verb", "submit"}, {"spec", "x"}}, "The submit request's \"spec\" must be an object"},
      {{{"verb", "logs"}, {"job", job}, {"rank", -1}}, "The logs request's \"rank\" must be"},
      {{{"verb", "logs"}, {"job", job}, {"rank", 0}, {"node", 7}},
       "The logs request's \"node\" must be a string"},
  };
  for (const Case& c : cases) {
    const std::string reply =
        framed_request_as(kAlice, kAlice, node.n1.socket(), c.request.dump(), 20s);
    const json parsed = json::parse(reply, nullptr, false);
    ASSERT_TRUE(parsed.is_object()) << c.request.dump() << " got no reply: " << reply << "\n"
                                    << node.n1.process().err();
    EXPECT_EQ(parsed.value("ok", true), false) << reply;
    EXPECT_THAT(parsed.value("error", ""), HasSubstr(c.error)) << c.request.dump();
    ASSERT_TRUE(node.n1.process().running()) << c.request.dump() << " stopped the daemon\n"
                                             << node.n1.process().err();
  }
  EXPECT_TRUE(node.answers());
  EXPECT_TRUE(node.ctl({"status", job}, kAlice).status.exited_with(0));

  // From an admin (root), the admin verbs' arguments are checked like the others'.
  const std::vector<Case> admin_cases = {
      {{{"verb", "drain"}, {"node", "n1"}, {"reason", 1}},
       "The drain request's \"reason\" must be a string"},
      {{{"verb", "undrain"}, {"node", nullptr}}, "The undrain request needs \"node\""},
  };
  for (const Case& c : admin_cases) {
    const json parsed = json::parse(
        framed_request_as(0, 0, node.n1.socket(), c.request.dump(), 20s), nullptr, false);
    ASSERT_TRUE(parsed.is_object()) << c.request.dump() << "\n" << node.n1.process().err();
    EXPECT_THAT(parsed.value("error", ""), HasSubstr(c.error)) << c.request.dump();
  }
}

// Every verb of the protocol's table (control/verbs.h) has a handler: none is answered as
// unknown, from a user or from root, and an unknown verb's answer names all of them.
TEST(ControlAbuseInteg, EveryVerbOfTheTableIsServedAndAnUnknownOneListsThemAll) {
  if (!is_root()) GTEST_SKIP() << "needs root: the requests also come from another uid";
  Node node;
  for (const control::Verb& verb : control::verbs()) {
    for (const int uid : {0, kAlice}) {
      SCOPED_TRACE(std::string(verb.name) + " as uid " + std::to_string(uid));
      const std::string reply =
          framed_request_as(uid, uid, node.n1.socket(), json{{"verb", verb.name}}.dump(), 20s);
      const json parsed = json::parse(reply, nullptr, false);
      ASSERT_TRUE(parsed.is_object()) << reply << "\n" << node.n1.process().err();
      EXPECT_THAT(parsed.value("error", ""), Not(HasSubstr("Unknown request"))) << reply;
      if (verb.caller == control::Caller::kAdmin && uid != 0) {
        EXPECT_EQ(parsed.value("error", ""), control::admin_only_message(verb));
      }
    }
  }
  const json unknown = json::parse(
      framed_request_as(kAlice, kAlice, node.n1.socket(), R"({"verb":"frobnicate"})", 20s), nullptr,
      false);
  ASSERT_TRUE(unknown.is_object());
  for (const control::Verb& verb : control::verbs()) {
    EXPECT_THAT(unknown.value("error", ""), HasSubstr("\"" + std::string(verb.name) + "\""));
  }
  EXPECT_TRUE(node.n1.process().running()) << node.n1.process().err();
}

TEST(ControlAbuseInteg, ForgedRoundReportsAreDroppedAndCounted) {
  Node node;
  const std::uint64_t before = node.undecodable();
  // Any local process can reach a loopback transport port and claim to be a daemon; without
  // CURVE a report is not acted on, but one that does not decode is still counted
  // (forged_report_integ_test.cc has the well-formed forgeries).
  transport::TransportOptions options;
  options.bind = "tcp://127.0.0.1:*";
  options.name = "mallory";
  options.generation = 1;
  options.cluster_id = "elastic";  // the default node.cluster_id
  auto forger = transport::ZmqTransport::open(options);
  ASSERT_TRUE(forger.ok()) << forger.error().message;
  // Bodies that do not decode: wrong types, rules of a kind broken, and no MessagePack at all.
  node::RoundReport info = node::round_report(node::ReportKind::kNodeInfo, "", 0);
  info.slots = 100'000;
  node::RoundReport progress = node::round_report(node::ReportKind::kProgress, "j", 1);
  progress.event = "explode";
  const std::vector<std::string> reports = {
      node::encode_round_report(node::round_report(node::ReportKind::kRoundAck, "", 1)),
      node::encode_round_report(info),
      node::encode_round_report(node::round_report(node::ReportKind::kPeerLost, "j", 0)),
      node::encode_round_report(progress),
      std::string("\x83\xa1k\x05\xa1j\x01\xa1r\x01", 10),  // worker_failed, job a number
      R"({"job":"j","round":1})",
  };
  // Sent again until counted: reports reach the round service only once n1 leads.
  auto forge = [&] {
    for (const std::string& body : reports) {
      wire::Envelope envelope;
      envelope.type = wire::MsgType::kRoundReport;
      envelope.body = body;
      EXPECT_TRUE((*forger)->send({.address = node.n1.address(), .name = "n1"}, envelope).ok());
    }
  };
  EXPECT_TRUE(wait_until(
      [&] {
        forge();
        (void)(*forger)->receive(std::chrono::milliseconds(20));
        return !node.n1.process().running() || node.undecodable() >= before + reports.size();
      },
      kConverge))
      << node.n1.process().err();
  ASSERT_TRUE(node.n1.process().running()) << "a forged report stopped the leader:\n"
                                           << node.n1.process().err();
  EXPECT_TRUE(node.answers());
}

TEST(ControlAbuseInteg, OneUsersConnectionsDoNotLockOutAnotherAndDribblersAreCutOff) {
  if (!is_root()) GTEST_SKIP() << "needs root: the connections come from two uids";
  if (!have_setpriv()) GTEST_SKIP() << "no /usr/bin/setpriv";
  Node node;
  // Alice opens more connections than the daemon once held in all (64) and keeps them.
  int ready[2];
  int release[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(release), 0);
  const pid_t alice = ::fork();
  if (alice == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(kAlice) != 0 || ::setuid(kAlice) != 0) _exit(2);
    std::vector<int> fds;
    for (int i = 0; i < 80; ++i) fds.push_back(connect_unix(node.n1.socket()));
    // Each sends a byte, as a slowloris client does to look alive.
    for (const int fd : fds) {
      if (fd >= 0) (void)::send(fd, "\0", 1, MSG_NOSIGNAL);
    }
    if (::write(ready[1], "r", 1) != 1) _exit(3);
    char byte = 0;
    (void)::read(release[0], &byte, 1);
    _exit(0);
  }
  ::close(ready[1]);
  ::close(release[0]);
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  // Bob (and root) are still served while Alice's connections are open.
  const RunResult bob = node.ctl({"status"}, kBob);
  EXPECT_TRUE(bob.status.exited_with(0)) << bob.err << "\n" << node.n1.process().err();
  EXPECT_TRUE(node.answers());
  ASSERT_EQ(::write(release[1], "x", 1), 1);
  int status = 0;
  ::waitpid(alice, &status, 0);
  ::close(ready[0]);
  ::close(release[1]);

  // A request dribbled one byte every 300 ms is closed about kRequestTimeout (5 s) after the
  // connect, although a byte arrived a moment before.
  const int slow = connect_unix(node.n1.socket());
  ASSERT_GE(slow, 0);
  const auto connected = std::chrono::steady_clock::now();
  const std::string frame = control::frame_header(1000) + std::string(1000, ' ');
  bool closed = false;
  for (std::size_t i = 0; i < frame.size() && !closed; ++i) {
    if (::send(slow, &frame[i], 1, MSG_NOSIGNAL) != 1) break;
    closed = read_until_closed(slow, std::chrono::milliseconds(300));
    if (std::chrono::steady_clock::now() - connected > std::chrono::seconds(12)) break;
  }
  const auto lasted = std::chrono::steady_clock::now() - connected;
  ::close(slow);
  EXPECT_TRUE(closed) << "the dribbling connection was still open after 12 s";
  EXPECT_GE(lasted, std::chrono::seconds(4));
  EXPECT_LT(lasted, std::chrono::seconds(9));
  EXPECT_THAT(node.n1.process().err(), HasSubstr("no whole request within 5 s"));
  EXPECT_TRUE(node.answers());
}

TEST(ControlAbuseInteg, ASubmitFloodHitsTheUsersCapAndOthersSubmitOn) {
  if (!is_root()) GTEST_SKIP() << "needs root: the submits come from two uids";
  if (!have_setpriv()) GTEST_SKIP() << "no /usr/bin/setpriv";
  Node node({"control.max_active_jobs_per_user=3", "control.submits_per_minute_per_user=0"});
  for (int i = 0; i < 3; ++i)
    ASSERT_FALSE(node.submit("flood" + std::to_string(i), kAlice).empty());
  const RunResult refused =
      node.ctl({"submit", "--name", "flood3", "--workdir", "/", "--", "/bin/sleep", "600"}, kAlice);
  EXPECT_FALSE(refused.status.exited_with(0));
  EXPECT_THAT(refused.err, HasSubstr("has 3 active jobs, the most "
                                     "control.max_active_jobs_per_user (3) allows"));
  EXPECT_FALSE(node.submit("other", kBob).empty());
  // Root is not capped.
  EXPECT_FALSE(node.submit("ops", -1).empty());
  // A cancelled job frees its place.
  const RunResult jobs = node.ctl({"jobs", "--json"}, kAlice);
  const json list = json::parse(jobs.out, nullptr, false);
  ASSERT_TRUE(list.is_object() && list.contains("jobs")) << jobs.out << jobs.err;
  std::string first;
  for (const json& j : list["jobs"]) {
    if (j["spec"].value("uid", 0) == kAlice) first = j.value("id", "");
  }
  ASSERT_FALSE(first.empty()) << jobs.out;
  EXPECT_TRUE(node.ctl({"cancel", first}, kAlice).status.exited_with(0));
  EXPECT_FALSE(node.submit("flood4", kAlice).empty());
}

TEST(ControlAbuseInteg, ASubmitBurstHitsTheUsersRateAndOthersSubmitOn) {
  if (!is_root()) GTEST_SKIP() << "needs root: the submits come from two uids";
  if (!have_setpriv()) GTEST_SKIP() << "no /usr/bin/setpriv";
  // One submit a minute after a burst of two: the third at once is refused.
  Node node({"control.submits_per_minute_per_user=1", "control.submit_burst_per_user=2"});
  ASSERT_FALSE(node.submit("a", kAlice).empty());
  ASSERT_FALSE(node.submit("b", kAlice).empty());
  const RunResult refused =
      node.ctl({"submit", "--name", "c", "--workdir", "/", "--", "/bin/sleep", "600"}, kAlice);
  EXPECT_FALSE(refused.status.exited_with(0));
  EXPECT_THAT(refused.err, HasSubstr("control.submit_burst_per_user (2)"));
  EXPECT_THAT(refused.err, HasSubstr("control.submits_per_minute_per_user (1)"));
  EXPECT_FALSE(node.submit("d", kBob).empty());
}

TEST(ControlAbuseInteg, AJobsEnvIsShownToItsOwnerAndRootOnly) {
  if (!is_root()) GTEST_SKIP() << "needs root: the job and its readers are different uids";
  if (!have_setpriv()) GTEST_SKIP() << "no /usr/bin/setpriv";
  Node node;
  // The submitter's environment goes with the job (--export ALL) and is hidden the same way.
  ::setenv("EXPORTED_TOKEN", "hunter3", 1);
  const std::string job = node.submit("secret", kAlice, {"--env", "API_TOKEN=hunter2"});
  ::unsetenv("EXPORTED_TOKEN");
  ASSERT_FALSE(job.empty());
  const RunResult owner = node.ctl({"status", job, "--json"}, kAlice);
  ASSERT_TRUE(owner.status.exited_with(0)) << owner.err;
  EXPECT_THAT(owner.out, HasSubstr("hunter2"));
  EXPECT_THAT(owner.out, HasSubstr("hunter3"));
  const RunResult by_root = node.ctl({"status", job, "--json"});
  EXPECT_THAT(by_root.out, HasSubstr("hunter2"));

  const RunResult other = node.ctl({"status", job, "--json"}, kBob);
  ASSERT_TRUE(other.status.exited_with(0)) << other.err;
  EXPECT_THAT(other.out, Not(HasSubstr("hunter2")));
  EXPECT_THAT(other.out, Not(HasSubstr("API_TOKEN")));
  EXPECT_THAT(other.out, Not(HasSubstr("hunter3")));
  const json seen = json::parse(other.out, nullptr, false);
  ASSERT_TRUE(seen.is_object()) << other.out;
  EXPECT_EQ(seen["spec"].value("env_hidden", false), true) << other.out;
  // Everything else of the job is still shown (like squeue).
  EXPECT_EQ(seen.value("id", ""), job);
  const RunResult list = node.ctl({"jobs", "--json"}, kBob);
  ASSERT_TRUE(list.status.exited_with(0)) << list.err;
  EXPECT_THAT(list.out, HasSubstr(job));
  EXPECT_THAT(list.out, Not(HasSubstr("hunter2")));
  EXPECT_THAT(list.out, Not(HasSubstr("hunter3")));
}

}  // namespace
}  // namespace elastic::testing
