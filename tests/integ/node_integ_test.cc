// Integration tier: real elasticd processes on 127.0.0.1 form a cluster through the ZeroMQ
// transport and SWIM membership, and elasticctl reads each daemon's member table over its
// control socket. Every daemon binds port 0 (its address comes from its readiness line) and
// has its own state dir and control socket under a per-test TempDir, so cases run in parallel.
// Nothing sleeps a fixed time: each expectation polls with a deadline (wait_until).
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "tests/integ/daemon_under_test.h"
#include "tests/support/process.h"
#include "tests/support/sockets.h"
#include "tests/support/temp_dir.h"

namespace elastic::testing {
namespace {

using ::testing::HasSubstr;

// Three daemons converge; kill -9 of one is detected; its restart (a new generation) rejoins.
TEST(NodeInteg, ThreeNodesConvergeDetectDeathAndRejoin) {
  TempDir dir;
  Daemon n1(dir, "n1", {});
  n1.start();
  Daemon n2(dir, "n2", {n1.seed()});
  Daemon n3(dir, "n3", {n1.seed()});
  n2.start();
  n3.start();
  std::vector<Daemon*> all = {&n1, &n2, &n3};
  ASSERT_TRUE(wait_until([&] { return all_alive(all); }, kConverge)) << describe(all);

  // Human table: one header and one row per member.
  const RunResult table = elasticctl({"-c", "", "--set", "control.socket=" + n2.socket(), "nodes"});
  ASSERT_TRUE(table.status.exited_with(0)) << table.err;
  EXPECT_THAT(table.out, HasSubstr("NAME"));
  EXPECT_THAT(table.out, HasSubstr("LAST-HEARD"));
  EXPECT_THAT(table.out, HasSubstr(n3.address()));

  const std::uint64_t old_generation = n3.generation();
  n3.process().signal(SIGKILL);
  ASSERT_TRUE(n3.process().wait(std::chrono::seconds(5)).has_value());
  ASSERT_TRUE(
      wait_until([&] { return sees(n1, "n3", "dead") && sees(n2, "n3", "dead"); }, kConverge))
      << describe({&n1, &n2});
  EXPECT_THAT(n1.process().err(), HasSubstr("member n3 gen " + std::to_string(old_generation)));

  // Same state dir: the restart is generation + 1, and replaces the dead record.
  n3.start();
  EXPECT_EQ(n3.generation(), old_generation + 1);
  ASSERT_TRUE(wait_until([&] { return all_alive(all); }, kConverge)) << describe(all);
}

// SIGTERM is a graceful leave: exit 0 at once, and the others record "left", not "dead".
TEST(NodeInteg, SigtermLeavesGracefully) {
  TempDir dir;
  Daemon n1(dir, "n1", {});
  n1.start();
  Daemon n2(dir, "n2", {n1.seed()});
  Daemon n3(dir, "n3", {n1.seed()});
  n2.start();
  n3.start();
  std::vector<Daemon*> all = {&n1, &n2, &n3};
  ASSERT_TRUE(wait_until([&] { return all_alive(all); }, kConverge)) << describe(all);

  n2.process().signal(SIGTERM);
  const auto status = n2.process().wait(std::chrono::seconds(5));
  ASSERT_TRUE(status.has_value()) << "n2 did not exit on SIGTERM";
  EXPECT_TRUE(status->exited_with(0)) << n2.process().err();
  EXPECT_FALSE(std::filesystem::exists(n2.socket())) << "the control socket was left behind";
  ASSERT_TRUE(
      wait_until([&] { return sees(n1, "n2", "left") && sees(n3, "n2", "left"); }, kConverge))
      << describe({&n1, &n3});

  n1.process().signal(SIGINT);
  const auto interrupted = n1.process().wait(std::chrono::seconds(5));
  ASSERT_TRUE(interrupted.has_value()) << "n1 did not exit on SIGINT";
  EXPECT_TRUE(interrupted->exited_with(0));
}

// Connects to a unix socket, sends `bytes`, and returns what the daemon sent back before it
// closed the connection (nullopt if it did not close within the deadline).
std::optional<std::string> send_raw(const std::string& path, const std::string& bytes) {
  const int fd = connect_unix(path);
  if (fd < 0) return std::nullopt;
  timeval timeout{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  std::string received;
  char buffer[4096];
  while (true) {
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n == 0) break;  // closed by the daemon
    if (n < 0) {
      ::close(fd);
      return std::nullopt;  // timeout: the daemon kept the connection open
    }
    received.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return received;
}

std::string frame(const std::string& body) {
  const auto n = static_cast<std::uint32_t>(body.size());
  std::string header = {static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                        static_cast<char>(n >> 8), static_cast<char>(n)};
  return header + body;
}

// Hostile bytes on the control socket close that connection with a logged reason; the daemon
// goes on answering.
TEST(NodeInteg, HostileControlBytesCloseOnlyThatConnection) {
  TempDir dir;
  Daemon n1(dir, "n1", {});
  n1.start();

  // A 4 GiB frame header: closed without a reply.
  const auto oversized = send_raw(n1.socket(), std::string("\xff\xff\xff\xff", 4) + "junk");
  ASSERT_TRUE(oversized.has_value());
  EXPECT_EQ(*oversized, "");
  // Not JSON: an error reply, then closed.
  const auto garbage = send_raw(n1.socket(), frame("\x01\x02not json{{"));
  ASSERT_TRUE(garbage.has_value());
  EXPECT_THAT(*garbage, HasSubstr("\"ok\":false"));
  EXPECT_THAT(*garbage, HasSubstr("not valid JSON"));

  EXPECT_TRUE(wait_until(
      [&] {
        const std::string err = n1.process().err();
        return err.find("exceeds the limit") != std::string::npos &&
               err.find("not valid JSON") != std::string::npos;
      },
      std::chrono::seconds(5)))
      << n1.process().err();
  EXPECT_TRUE(n1.process().running());
  EXPECT_TRUE(sees(n1, "n1", "alive"));
}

TEST(NodeInteg, SecondDaemonOnTheSameControlSocketIsRefused) {
  TempDir dir;
  Daemon n1(dir, "n1", {});
  n1.start();
  std::vector<std::string> argv = n1.args();
  // Same socket, own state dir and port.
  for (auto& arg : argv) {
    if (arg.rfind("node.state_dir=", 0) == 0) arg = "node.state_dir=" + dir.file("other");
    if (arg.rfind("transport.bind=", 0) == 0) arg = "transport.bind=tcp://127.0.0.1:0";
  }
  const RunResult second = run(argv, {}, std::chrono::seconds(10));
  EXPECT_TRUE(second.status.exited_with(69)) << second.err;
  EXPECT_THAT(second.err, HasSubstr("Another daemon answers on the control socket " + n1.socket()));
  EXPECT_TRUE(sees(n1, "n1", "alive")) << "the first daemon lost its socket";
}

TEST(NodeInteg, StaleControlSocketIsReplaced) {
  TempDir dir;
  Daemon n1(dir, "n1", {});
  n1.start();
  n1.process().signal(SIGKILL);  // leaves ctl.sock behind
  ASSERT_TRUE(n1.process().wait(std::chrono::seconds(5)).has_value());
  ASSERT_TRUE(std::filesystem::exists(n1.socket()));
  n1.start();
  EXPECT_TRUE(sees(n1, "n1", "alive", n1.generation()));
}

TEST(NodeInteg, NodesWithoutADaemonExits69NamingTheSocket) {
  TempDir dir;
  const std::string socket = dir.file("nobody.sock");
  const RunResult r = elasticctl({"-c", "", "--set", "control.socket=" + socket, "nodes"});
  EXPECT_TRUE(r.status.exited_with(69)) << r.err;
  EXPECT_THAT(r.err, HasSubstr("no daemon answers at " + socket));
}

TEST(NodeInteg, UnwritableStateDirExits73) {
  TempDir dir;
  const std::string file = dir.write("not-a-dir", "x");
  const RunResult r =
      run({ELASTICD_PATH, "-c", "", "--set", "node.state_dir=" + file + "/state", "--set",
           "control.socket=" + dir.file("ctl.sock"), "--set", "transport.bind=tcp://127.0.0.1:0",
           "--set", "transport.curve=false"},
          {}, std::chrono::seconds(10));
  EXPECT_TRUE(r.status.exited_with(73)) << r.err;
  EXPECT_THAT(r.err, HasSubstr("node.state_dir"));
}

// ---- CURVE: only daemons whose keys are in the allow-list take part ------------------------

// Per-test keys made by `elasticctl keygen`: each node's pair in <dir>/keys/<name>/ (its secret
// key stays there), and the cluster's allow-list <dir>/allowed/ with the members' .pub files.
class CurveKeys {
 public:
  explicit CurveKeys(const TempDir& dir) : dir_(dir) {}

  std::string allow_list() const { return dir_.file("allowed"); }

  // Generates NAME's key pair; returns the secret key file.
  std::string generate(const std::string& name) const {
    const std::string keys = dir_.file("keys/" + name);
    const RunResult r = elasticctl({"-c", "", "keygen", "--dir", keys, "--name", name});
    EXPECT_TRUE(r.status.exited_with(0)) << r.err;
    return keys + "/" + name + ".key";
  }

  // Copies NAME's public key into `public_dir` (an allow-list).
  void publish(const std::string& name, const std::string& public_dir) const {
    std::filesystem::create_directories(public_dir);
    std::filesystem::copy_file(dir_.file("keys/" + name + "/" + name + ".pub"),
                               public_dir + "/" + name + ".pub");
  }

 private:
  const TempDir& dir_;
};

void use_curve(Daemon& daemon, const std::string& secret_key_file,
               const std::string& public_keys_dir) {
  daemon.set("transport.curve=true");
  daemon.set("transport.secret_key_file=" + secret_key_file);
  daemon.set("transport.public_keys_dir=" + public_keys_dir);
}

std::uint64_t unauthenticated(const Daemon& daemon) {
  return transport_counter(daemon, "dropped_unauthenticated").value_or(0);
}

bool anyone_sees(const std::vector<Daemon*>& observers, const std::string& name) {
  for (const Daemon* observer : observers) {
    const auto members = members_of(*observer);
    if (members && members->count(name) != 0) return true;
  }
  return false;
}

// Long enough for many join attempts (rejoin_interval 1s) and probe rounds (200 ms).
constexpr auto kStaysOut = std::chrono::seconds(4);

// Three CURVE daemons, keys in a shared allow-list, seeds as name@host:port.
struct CurveCluster {
  explicit CurveCluster(const TempDir& dir)
      : keys(dir), n1(dir, "n1", {}), n2(dir, "n2", {}), n3(dir, "n3", {}) {
    for (Daemon* d : all()) {
      const std::string secret = keys.generate(d->name());
      keys.publish(d->name(), keys.allow_list());
      use_curve(*d, secret, keys.allow_list());
    }
  }
  // Starts n1, then n2 and n3 seeded with n1; true once everyone sees everyone alive.
  bool start() {
    n1.start();
    n2.set("membership.seeds=[\"" + n1.named_seed() + "\"]");
    n3.set("membership.seeds=[\"" + n1.named_seed() + "\"]");
    n2.start();
    n3.start();
    return wait_until([&] { return all_alive(all()); }, kConverge);
  }
  std::vector<Daemon*> all() { return {&n1, &n2, &n3}; }

  CurveKeys keys;
  Daemon n1, n2, n3;
};

// n1's ZAP handler refuses `outsider`'s handshake and counts it, no member ever lists it, and it
// sees nobody but itself.
void expect_kept_out(CurveCluster& cluster, Daemon& outsider, std::uint64_t refused_before) {
  ASSERT_TRUE(wait_until([&] { return unauthenticated(cluster.n1) > refused_before; },
                         std::chrono::seconds(10)))
      << outsider.process().err();
  EXPECT_FALSE(wait_until([&] { return anyone_sees(cluster.all(), outsider.name()); }, kStaysOut))
      << describe(cluster.all());
  const auto its_view = members_of(outsider);
  ASSERT_TRUE(its_view.has_value());
  EXPECT_EQ(its_view->size(), 1u) << describe({&outsider});
}

TEST(NodeInteg, CurveClusterConvergesAndRefusesAKeyOutsideTheAllowList) {
  TempDir dir;
  CurveCluster cluster(dir);
  ASSERT_TRUE(cluster.start()) << describe(cluster.all());
  const std::uint64_t refused_before = unauthenticated(cluster.n1);

  // A fresh key that no member lists. Its own allow-list holds the members' keys, so it can
  // authenticate them as servers and get as far as the handshake.
  Daemon intruder(dir, "intruder", {});
  const std::string secret = cluster.keys.generate("intruder");
  const std::string its_keys = dir.file("intruder-pubs");
  for (const Daemon* d : cluster.all()) cluster.keys.publish(d->name(), its_keys);
  use_curve(intruder, secret, its_keys);
  intruder.set("membership.seeds=[\"" + cluster.n1.named_seed() + "\"]");
  intruder.start();

  expect_kept_out(cluster, intruder, refused_before);
  EXPECT_TRUE(all_alive(cluster.all())) << describe(cluster.all());
}

TEST(NodeInteg, CurveClusterRefusesAPlainNode) {
  TempDir dir;
  CurveCluster cluster(dir);
  ASSERT_TRUE(cluster.start()) << describe(cluster.all());
  const std::uint64_t refused_before = unauthenticated(cluster.n1);

  // curve = false: its NULL-mechanism handshake cannot meet a CURVE server.
  Daemon plain(dir, "plain", {cluster.n1.seed()});
  plain.set("transport.curve=false");
  plain.start();
  expect_kept_out(cluster, plain, refused_before);
}

// A ZMTP 3.0 greeting announcing `mechanism` as a client (RFC 23).
std::string zmtp_greeting(const std::string& mechanism) {
  std::string greeting("\xff\0\0\0\0\0\0\0\x01\x7f", 10);
  greeting += std::string("\x03\x00", 2);
  std::string padded = mechanism;
  padded.resize(20, '\0');
  greeting += padded;
  greeting += std::string(32, '\0');  // as-server = 0, filler
  return greeting;
}

TEST(NodeInteg, CurveDaemonSurvivesGarbageOnItsPort) {
  TempDir dir;
  CurveCluster cluster(dir);
  ASSERT_TRUE(cluster.start()) << describe(cluster.all());
  const std::uint64_t refused_before = unauthenticated(cluster.n1);

  std::string noise(4096, '\0');
  for (std::size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<char>((i * 131 + 7) % 251);
  // A CURVE HELLO command of the wrong size and contents.
  const std::string bad_hello =
      zmtp_greeting("CURVE") + std::string("\x04\x20\x05HELLO", 8) + std::string(26, '\x5a');
  // A short command frame claiming 2^63 bytes.
  const std::string huge_frame =
      zmtp_greeting("CURVE") + std::string("\x06\x7f\xff\xff\xff\xff\xff\xff\xff", 9);
  for (const std::string& bytes :
       {noise, zmtp_greeting("NULL") + noise, bad_hello, huge_frame, std::string("\xff", 1)}) {
    send_and_wait_closed(cluster.n1.port(), bytes, 5s);
  }

  EXPECT_TRUE(cluster.n1.process().running()) << cluster.n1.process().err();
  EXPECT_TRUE(wait_until([&] { return all_alive(cluster.all()); }, kConverge))
      << describe(cluster.all());
  // The handshakes it refused are counted, not just dropped silently.
  EXPECT_TRUE(wait_until([&] { return unauthenticated(cluster.n1) > refused_before; },
                         std::chrono::seconds(5)));
}

TEST(NodeInteg, KeygenWritesAKeyPair) {
  TempDir dir;
  const RunResult r =
      elasticctl({"-c", "", "keygen", "--dir", dir.file("keys"), "--name", "gpu01"});
  ASSERT_TRUE(r.status.exited_with(0)) << r.err;
  EXPECT_TRUE(std::filesystem::exists(dir.file("keys/gpu01.key")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("keys/gpu01.pub")));
  const auto perms = std::filesystem::status(dir.file("keys/gpu01.key")).permissions();
  EXPECT_EQ(perms & (std::filesystem::perms::group_all | std::filesystem::perms::others_all),
            std::filesystem::perms::none);
  // A second run refuses to overwrite the secret key.
  const RunResult again =
      elasticctl({"-c", "", "keygen", "--dir", dir.file("keys"), "--name", "gpu01"});
  EXPECT_TRUE(again.status.exited_with(73)) << again.err;
}

}  // namespace
}  // namespace elastic::testing
