// Integration tier, security: real elasticd processes on 127.0.0.1.
//  - Remote control (control.remote_listen): elasticctl --connect acts as the user its client
//    key names, with the same owner/admin rules as the local socket; an unknown key, an unknown
//    user and hostile bytes on that port are refused and counted while the daemon goes on.
//  - The local control socket: a user cannot cancel another's job, drain a node or reload the
//    daemon's configuration (exit 77); the owner, root and control.admin_group can; many
//    connections and half frames do not stop the daemon.
// Other users are played with setpriv (root only: those cases skip with the reason otherwise).
// Nothing sleeps a fixed time: every expectation polls with a deadline.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "tests/integ/daemon_under_test.h"
#include "tests/support/process.h"
#include "tests/support/sockets.h"
#include "tests/support/temp_dir.h"

namespace elastic::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

bool is_root() { return ::geteuid() == 0; }

// A one-node CURVE cluster with remote control on, admin_group "nogroup", and client keys:
// root.pub, daemon.pub (uid 1, an ordinary user), ghost.pub (no such user); outsider.key is
// not in the allow-list.
struct SecureNode {
  TempDir dir;
  Daemon n1{dir, "n1", {}};
  std::string clients = dir.file("clients");
  std::string control_endpoint;

  SecureNode() {
    keygen({"--dir", dir.file("keys"), "--name", "n1"});
    std::filesystem::create_directories(dir.file("allowed"));
    ::chmod(dir.file("allowed").c_str(), 0755);
    std::filesystem::copy_file(dir.file("keys/n1.pub"), dir.file("allowed/n1.pub"));
    std::filesystem::create_directories(clients);
    ::chmod(clients.c_str(), 0755);
    for (const char* user : {"root", "daemon", "ghost", "outsider"}) {
      keygen({"--dir", dir.file("mine"), "--client", user});
      if (std::string(user) != "outsider") {
        std::filesystem::copy_file(dir.file("mine/") + user + ".pub",
                                   clients + "/" + user + ".pub");
      }
    }
    n1.set("transport.curve=true");
    n1.set("transport.secret_key_file=" + dir.file("keys/n1.key"));
    n1.set("transport.public_keys_dir=" + dir.file("allowed"));
    n1.set("control.remote_listen=tcp://127.0.0.1:0");
    n1.set("control.client_keys_dir=" + clients);
    n1.set("control.admin_group=nogroup");
    n1.start();
    const std::regex listening("remote control listening on (tcp://\\S+)");
    std::smatch match;
    EXPECT_TRUE(wait_until(
        [&] {
          const std::string err = n1.process().err();
          if (!std::regex_search(err, match, listening)) return false;
          control_endpoint = match[1];
          return true;
        },
        kReady))
        << n1.process().err();
  }

  static void keygen(std::vector<std::string> args) {
    args.insert(args.begin(), {"-c", "", "keygen"});
    const RunResult r = elasticctl(args);
    EXPECT_TRUE(r.status.exited_with(0)) << r.err;
  }

  // elasticctl --connect as the owner of `key` (a file in <dir>/mine/).
  RunResult remote(const std::string& key, std::vector<std::string> args) const {
    std::vector<std::string> argv = {"-c",           "",
                                     "--connect",    control_endpoint,
                                     "--client-key", dir.file("mine/" + key + ".key"),
                                     "--server-key", dir.file("keys/n1.pub")};
    argv.insert(argv.end(), args.begin(), args.end());
    return run(
        [&] {
          std::vector<std::string> full = {ELASTICCTL_PATH};
          full.insert(full.end(), argv.begin(), argv.end());
          return full;
        }(),
        {}, std::chrono::seconds(30));
  }

  // elasticctl on the local socket, as root or (setpriv) as uid/gid.
  RunResult local(std::vector<std::string> args, int uid = -1, int gid = -1) const {
    return elasticctl_on(n1, args, uid, gid);
  }

  std::uint64_t counter(const std::string& key) const {
    const RunResult r = local({"nodes", "--json"});
    const json reply = json::parse(r.out, nullptr, false);
    if (!reply.is_object() || !reply.contains("transport") || !reply["transport"].contains(key)) {
      return 0;
    }
    return reply["transport"][key].get<std::uint64_t>();
  }

  // Submits a sleeping job (as root locally, or remotely with `key`); returns its id.
  std::string submit(const std::string& name, const std::string& key = "") const {
    const std::vector<std::string> args = {"submit", "--name", name,         "--workdir",
                                           "/",      "--",     "/bin/sleep", "600"};
    const RunResult r = key.empty() ? local(args) : remote(key, args);
    EXPECT_TRUE(r.status.exited_with(0)) << r.err;
    std::smatch match;
    const std::regex submitted("submitted (\\S+)");
    return std::regex_search(r.out, match, submitted) ? std::string(match[1]) : std::string();
  }
};

// A ZMTP 3.0 client greeting announcing `mechanism` (RFC 23).
std::string zmtp_greeting(const std::string& mechanism) {
  std::string greeting("\xff\0\0\0\0\0\0\0\x01\x7f\x03\x00", 12);
  std::string padded = mechanism;
  padded.resize(20, '\0');
  return greeting + padded + std::string(32, '\0');
}

TEST(SecurityInteg, RemoteControlActsAsTheKeysUserWithTheSameRules) {
  if (!is_root()) GTEST_SKIP() << "needs root: the daemon maps client keys to real users";
  if (::getpwnam("daemon") == nullptr) GTEST_SKIP() << "no user \"daemon\" on this host";
  SecureNode node;
  ASSERT_FALSE(node.control_endpoint.empty());

  // Every verb works remotely with the same output as locally.
  const RunResult nodes = node.remote("root", {"nodes"});
  ASSERT_TRUE(nodes.status.exited_with(0)) << nodes.err;
  EXPECT_THAT(nodes.out, HasSubstr("n1 (self)"));
  EXPECT_EQ(node.local({"nodes", "--json"}).status.code, 0);
  EXPECT_TRUE(wait_until([&] { return node.counter("control_received") >= 1; }, 5s));

  // root (remote) submits; "daemon" (remote, not an admin) may neither cancel it nor drain.
  const std::string root_job = node.submit("rootjob", "root");
  ASSERT_FALSE(root_job.empty());
  const RunResult foreign = node.remote("daemon", {"cancel", root_job});
  EXPECT_TRUE(foreign.status.exited_with(77)) << foreign.err;
  EXPECT_THAT(foreign.err, HasSubstr("may not cancel job " + root_job));
  const RunResult drain = node.remote("daemon", {"drain", "n1"});
  EXPECT_TRUE(drain.status.exited_with(77)) << drain.err;
  EXPECT_THAT(drain.err, HasSubstr("Only root or members of control.admin_group"));
  // Its own job it may cancel; the job runs as "daemon", not as the caller of elasticctl.
  const std::string own = node.submit("own", "daemon");
  ASSERT_FALSE(own.empty());
  const RunResult job = node.local({"status", own, "--json"});
  EXPECT_THAT(job.out, HasSubstr("\"user\": \"daemon\"")) << job.out;
  EXPECT_TRUE(node.remote("daemon", {"cancel", own}).status.exited_with(0));
  // root's key may cancel anyone's job.
  const RunResult by_root = node.remote("root", {"cancel", root_job});
  EXPECT_TRUE(by_root.status.exited_with(0)) << by_root.err;

  // A key whose file names no user: refused with a sentence, exit 1.
  const RunResult ghost = node.remote("ghost", {"nodes"});
  EXPECT_TRUE(ghost.status.exited_with(1)) << ghost.err;
  EXPECT_THAT(ghost.err, HasSubstr("\"ghost\" named by this client key is not known"));

  // A key outside the allow-list: ZAP refuses the handshake, elasticctl says so and exits 77.
  const std::uint64_t refused_before = node.counter("control_unauthenticated");
  const RunResult outsider = node.remote("outsider", {"nodes"});
  EXPECT_TRUE(outsider.status.exited_with(77)) << outsider.err;
  EXPECT_THAT(outsider.err, HasSubstr("refused this client key"));
  EXPECT_TRUE(
      wait_until([&] { return node.counter("control_unauthenticated") > refused_before; }, 5s));

  // A wrong server key: no answer, a bounded wait that ends with a sentence saying why.
  std::vector<std::string> argv = {ELASTICCTL_PATH,
                                   "-c",
                                   "",
                                   "--connect",
                                   node.control_endpoint,
                                   "--client-key",
                                   node.dir.file("mine/root.key"),
                                   "--server-key",
                                   node.dir.file("mine/outsider.pub"),
                                   "nodes"};
  const RunResult wrong_server = run(argv, {}, std::chrono::seconds(30));
  EXPECT_TRUE(wrong_server.status.exited_with(69) || wrong_server.status.exited_with(77))
      << wrong_server.err;
  EXPECT_THAT(wrong_server.err, ::testing::AnyOf(HasSubstr("did not accept this client key"),
                                                 HasSubstr("handshake")));

  // Missing key flags: a usage error before anything is sent.
  const RunResult usage =
      run({ELASTICCTL_PATH, "-c", "", "--connect", node.control_endpoint, "nodes"}, {}, 10s);
  EXPECT_TRUE(usage.status.exited_with(64)) << usage.err;
}

TEST(SecurityInteg, HostileBytesOnTheRemoteControlPortAreCountedAndTheDaemonGoesOn) {
  if (!is_root()) GTEST_SKIP() << "needs root: the daemon maps client keys to real users";
  SecureNode node;
  ASSERT_FALSE(node.control_endpoint.empty());
  const int port = std::stoi(node.control_endpoint.substr(node.control_endpoint.rfind(':') + 1));
  const std::uint64_t refused_before = node.counter("control_unauthenticated");

  std::string noise(8192, '\0');
  for (std::size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<char>((i * 131 + 7) % 251);
  const std::vector<std::string> hostile = {
      noise,
      zmtp_greeting("NULL") + noise,  // a client without CURVE
      zmtp_greeting("CURVE") + std::string("\x04\x20\x05HELLO", 8) + std::string(26, 'Z'),
      zmtp_greeting("CURVE") + std::string("\x06\x7f\xff\xff\xff\xff\xff\xff\xff", 9),
      zmtp_greeting("CURVE"),  // then silence: the handshake limit ends it
      std::string("\xff", 1)};
  for (const std::string& bytes : hostile) send_and_wait_closed(port, bytes, 3s);

  EXPECT_TRUE(node.n1.process().running()) << node.n1.process().err();
  EXPECT_TRUE(
      wait_until([&] { return node.counter("control_unauthenticated") > refused_before; }, 10s));
  const RunResult after = node.remote("root", {"status"});
  EXPECT_TRUE(after.status.exited_with(0)) << after.err;
  // The daemon-to-daemon port was not affected either.
  EXPECT_EQ(node.counter("dropped_malformed"), 0u);
}

TEST(SecurityInteg, UsersCancelOnlyTheirOwnJobsAndOnlyAdminsDrain) {
  if (!is_root()) GTEST_SKIP() << "needs root: setpriv plays other users";
  if (::getgrnam("nogroup") == nullptr) GTEST_SKIP() << "no group \"nogroup\" on this host";
  if (!std::filesystem::exists("/usr/bin/setpriv")) GTEST_SKIP() << "no /usr/bin/setpriv";
  TempDir dir;
  Daemon n1(dir, "n1", {});
  n1.set("control.admin_group=nogroup");
  n1.start();
  // A setpriv'd elasticctl must reach the socket inside the test's private TempDir (0700).
  if (const std::string closed = dir.share_with_others(n1.socket()); !closed.empty()) {
    GTEST_SKIP() << closed << " does not let other users through (set TMPDIR to one that does)";
  }
  const gid_t nogroup = ::getgrnam("nogroup")->gr_gid;
  auto ctl = [&](std::vector<std::string> args, int uid = -1, int gid = -1) {
    std::vector<std::string> argv;
    if (uid >= 0) {
      argv = {"/usr/bin/setpriv", "--reuid=" + std::to_string(uid),
              "--regid=" + std::to_string(gid), "--clear-groups"};
    }
    argv.insert(argv.end(), {ELASTICCTL_PATH, "-c", "", "--set", "control.socket=" + n1.socket()});
    argv.insert(argv.end(), args.begin(), args.end());
    return run(argv, {}, std::chrono::seconds(30));
  };
  auto submit = [&](const std::string& name, int uid = -1, int gid = -1) {
    const RunResult r =
        ctl({"submit", "--name", name, "--workdir", "/", "--", "/bin/sleep", "600"}, uid, gid);
    EXPECT_TRUE(r.status.exited_with(0)) << r.err;
    std::smatch match;
    return std::regex_search(r.out, match, std::regex("submitted (\\S+)")) ? std::string(match[1])
                                                                           : std::string();
  };
  constexpr int kUser = 65533;  // no passwd entry, no admin group: an ordinary user
  const std::string root_job = submit("rootjob");
  const std::string user_job = submit("userjob", kUser, kUser);
  ASSERT_FALSE(root_job.empty());
  ASSERT_FALSE(user_job.empty());

  // A user sees every job with its owner (like squeue), but cancels only their own.
  const RunResult jobs = ctl({"jobs", "--json"}, kUser, kUser);
  ASSERT_TRUE(jobs.status.exited_with(0)) << jobs.err;
  EXPECT_THAT(jobs.out, HasSubstr(root_job));
  const RunResult foreign = ctl({"cancel", root_job}, kUser, kUser);
  EXPECT_TRUE(foreign.status.exited_with(77)) << foreign.err;
  EXPECT_THAT(foreign.err, HasSubstr("uid 65533 may not cancel job " + root_job));
  const RunResult drain = ctl({"drain", "n1"}, kUser, kUser);
  EXPECT_TRUE(drain.status.exited_with(77)) << drain.err;
  const RunResult voters = ctl({"voters", "add", "n2"}, kUser, kUser);
  EXPECT_TRUE(voters.status.exited_with(77)) << voters.err;
  // Nor make the daemon re-read its configuration (the unit's ExecReload).
  const RunResult reload = ctl({"reload"}, kUser, kUser);
  EXPECT_TRUE(reload.status.exited_with(77)) << reload.err;
  EXPECT_THAT(reload.err, HasSubstr("Only root or members of control.admin_group may reload"));
  // The JSON cannot claim another uid or admin rights: identity comes from SO_PEERCRED.
  const std::string forged = framed_request_as(kUser, kUser, n1.socket(),
                                               json{{"verb", "cancel"},
                                                    {"job", root_job},
                                                    {"uid", 0},
                                                    {"gid", 0},
                                                    {"admin", true},
                                                    {"is_admin", true},
                                                    {"by_uid", 0}}
                                                   .dump(),
                                               20s);
  EXPECT_THAT(forged, HasSubstr("\"ok\":false"));
  EXPECT_THAT(forged, HasSubstr("uid 65533 may not cancel"));
  EXPECT_TRUE(ctl({"cancel", user_job}, kUser, kUser).status.exited_with(0));

  // A member of control.admin_group (primary gid) drains and cancels others' jobs.
  const RunResult admin_drain = ctl({"drain", "n1", "--reason", "test"}, kUser, nogroup);
  EXPECT_TRUE(admin_drain.status.exited_with(0)) << admin_drain.err;
  EXPECT_TRUE(ctl({"undrain", "n1"}).status.exited_with(0));
  const RunResult admin_cancel = ctl({"cancel", root_job}, kUser, nogroup);
  EXPECT_TRUE(admin_cancel.status.exited_with(0)) << admin_cancel.err;
  const RunResult admin_reload = ctl({"reload"}, kUser, nogroup);
  EXPECT_TRUE(admin_reload.status.exited_with(0)) << admin_reload.err;
}

TEST(SecurityInteg, ManyConnectionsAndHalfFramesOnTheControlSocketDoNotStopTheDaemon) {
  TempDir dir;
  Daemon n1(dir, "n1", {});
  n1.start();
  std::vector<int> fds;
  // More than Server::kMaxConnections (64): the extra ones are closed at once.
  for (int i = 0; i < 80; ++i) {
    const int fd = connect_unix(n1.socket());
    if (fd >= 0) fds.push_back(fd);
  }
  // Half frames: a length prefix alone, and a prefix promising more than is sent.
  ::send(fds[0], "\x00\x00", 2, MSG_NOSIGNAL);
  ::send(fds[1], "\x00\x00\x01\x00{\"verb\":", 12, MSG_NOSIGNAL);
  EXPECT_TRUE(wait_until(
      [&] { return n1.process().err().find("connections open") != std::string::npos; }, 10s))
      << n1.process().err();
  for (const int fd : fds) ::close(fd);
  EXPECT_TRUE(n1.process().running());
  const RunResult after =
      elasticctl({"-c", "", "--set", "control.socket=" + n1.socket(), "status", "--json"});
  EXPECT_TRUE(after.status.exited_with(0)) << after.err;
}

}  // namespace
}  // namespace elastic::testing
