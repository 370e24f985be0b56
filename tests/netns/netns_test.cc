// The namespace harness's own tests: hosts reach each other, cuts block and heals restore,
// loss drops about the share asked for, traffic cannot leave the namespaces, and everything the
// harness made is gone afterwards (also after a crashed run). Needs root; fails (not passes)
// when the kernel or iproute2 cannot do what the harness needs.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <sstream>

#include "tests/netns/namespaced_test.h"
#include "tests/netns/netns_cluster.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace elastic::netns {
namespace {

using namespace std::chrono_literals;
using testing::Process;
using testing::TempDir;

constexpr const char* kPort = "7000";

class NetnsTest : public NamespacedTest {
 protected:
  std::unique_ptr<NetnsCluster> make(int hosts) {
    auto cluster = NetnsCluster::create(hosts);
    EXPECT_TRUE(cluster.ok()) << cluster.error().message;
    return cluster.ok() ? std::move(cluster).value() : nullptr;
  }

  // Starts the probe server on `host` and waits until it listens.
  std::unique_ptr<Process> serve(NetnsCluster& cluster, int host) {
    auto server = cluster.run(host, {NETNS_PROBE_PATH, "serve", cluster.ip(host), kPort}, {},
                              logs_.path(), "serve" + std::to_string(host));
    EXPECT_TRUE(
        testing::wait_until([&] { return server->out().find("ready") != std::string::npos; }, 10s))
        << server->err();
    return server;
  }

  // UDP round trips from `from` to `to`: how many of `count` came back.
  int replies(NetnsCluster& cluster, int from, int to, int count, int wait_ms = 200) {
    const auto result = cluster.exec(from,
                                     {NETNS_PROBE_PATH, "ping", cluster.ip(to), kPort,
                                      std::to_string(count), std::to_string(wait_ms)},
                                     120s);
    EXPECT_TRUE(result.status.exited_with(0)) << result.err;
    std::smatch match;
    static const std::regex line("replies ([0-9]+) of");
    if (!std::regex_search(result.out, match, line)) return -1;
    return std::stoi(match[1].str());
  }

  bool tcp_connects(NetnsCluster& cluster, int from, const std::string& ip) {
    const auto result = cluster.exec(from, {NETNS_PROBE_PATH, "connect", ip, kPort, "1000"}, 30s);
    return result.status.exited_with(0);
  }

  static bool namespace_exists(const std::string& name) {
    return std::filesystem::exists("/run/netns/" + name);
  }

  TempDir logs_;
};

TEST_F(NetnsTest, TwoHostsReachEachOtherOverUdpAndTcp) {
  auto cluster = make(2);
  ASSERT_NE(cluster, nullptr);
  EXPECT_NE(cluster->ip(0), cluster->ip(1));
  auto server = serve(*cluster, 1);
  EXPECT_EQ(replies(*cluster, 0, 1, 20), 20);
  EXPECT_TRUE(tcp_connects(*cluster, 0, cluster->ip(1)));
}

TEST_F(NetnsTest, CutBlocksOnlyThatPairAndHealRestoresIt) {
  auto cluster = make(3);
  ASSERT_NE(cluster, nullptr);
  auto server1 = serve(*cluster, 1);
  auto server2 = serve(*cluster, 2);
  ASSERT_TRUE(cluster->cut(0, 1).ok());
  EXPECT_EQ(replies(*cluster, 0, 1, 10, 100), 0);
  EXPECT_FALSE(tcp_connects(*cluster, 0, cluster->ip(1)));
  EXPECT_EQ(replies(*cluster, 0, 2, 10), 10);  // other pairs unaffected
  EXPECT_EQ(replies(*cluster, 2, 1, 10), 10);
  ASSERT_TRUE(cluster->heal(0, 1).ok());
  EXPECT_EQ(replies(*cluster, 0, 1, 10), 10);
  EXPECT_TRUE(tcp_connects(*cluster, 0, cluster->ip(1)));
}

TEST_F(NetnsTest, PartitionSplitsTheSidesAndHealAllJoinsThem) {
  auto cluster = make(4);
  ASSERT_NE(cluster, nullptr);
  std::vector<std::unique_ptr<Process>> servers;
  for (int host = 0; host < 4; ++host) servers.push_back(serve(*cluster, host));
  ASSERT_TRUE(cluster->partition({0, 1}, {2, 3}).ok());
  EXPECT_EQ(replies(*cluster, 0, 1, 5), 5);
  EXPECT_EQ(replies(*cluster, 2, 3, 5), 5);
  for (const auto& [from, to] : std::vector<std::pair<int, int>>{{0, 2}, {0, 3}, {1, 2}, {3, 1}}) {
    EXPECT_EQ(replies(*cluster, from, to, 5, 100), 0) << from << " -> " << to;
  }
  ASSERT_TRUE(cluster->heal_all().ok());
  for (const auto& [from, to] : std::vector<std::pair<int, int>>{{0, 2}, {0, 3}, {1, 2}, {3, 1}}) {
    EXPECT_EQ(replies(*cluster, from, to, 5), 5) << from << " -> " << to;
  }
}

TEST_F(NetnsTest, LossDropsAboutThatShareOfPackets) {
  auto cluster = make(2);
  ASSERT_NE(cluster, nullptr);
  auto server = serve(*cluster, 1);
  ASSERT_TRUE(cluster->set_loss(0, 30).ok());
  // Only host 0's requests cross the lossy egress: about 70% come back. 400 trials put the
  // binomial's 6-sigma band inside [200, 360].
  const int got = replies(*cluster, 0, 1, 400, 50);
  EXPECT_GE(got, 200);
  EXPECT_LE(got, 360);
  // Removing the rule restores every packet; 100% drops all of them.
  ASSERT_TRUE(cluster->set_loss(0, 0).ok());
  EXPECT_EQ(replies(*cluster, 0, 1, 50), 50);
  ASSERT_TRUE(cluster->set_loss(0, 100).ok());
  EXPECT_EQ(replies(*cluster, 0, 1, 10, 50), 0);
  ASSERT_TRUE(cluster->heal_all().ok());
  EXPECT_EQ(replies(*cluster, 0, 1, 10), 10);
}

TEST_F(NetnsTest, HostsCannotReachAddressesOutsideTheirNamespaces) {
  auto cluster = make(1);
  ASSERT_NE(cluster, nullptr);
  // 192.0.2.1 (TEST-NET-1) and the root namespace's loopback-facing world: no route at all.
  const auto result =
      cluster->exec(0, {NETNS_PROBE_PATH, "connect", "192.0.2.1", kPort, "500"}, 30s);
  EXPECT_TRUE(result.status.exited_with(1));
  EXPECT_NE(result.out.find("unreachable"), std::string::npos) << result.out;
  const auto routes = cluster->exec(0, {ip_binary(), "-4", "route", "show"}, 30s);
  EXPECT_EQ(routes.out.find("default"), std::string::npos) << routes.out;
}

// netem where the kernel has it, else the netns_delay line (this dev VM has no sch_netem).
TEST_F(NetnsTest, DelayHoldsEveryPacketAndRemovalRestoresFastReplies) {
  auto cluster = make(2);
  ASSERT_NE(cluster, nullptr);
  auto server = serve(*cluster, 1);
  ASSERT_TRUE(cluster->set_delay(0, 100ms).ok());
  EXPECT_TRUE(cluster->delayed(0));
  EXPECT_FALSE(cluster->delayed(1));
  EXPECT_EQ(replies(*cluster, 0, 1, 3, 50), 0);  // each round trip now takes >= 100 ms
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(replies(*cluster, 0, 1, 3, 1000), 3);  // but still arrives
  EXPECT_GE(std::chrono::steady_clock::now() - start, 300ms);
  EXPECT_TRUE(tcp_connects(*cluster, 0, cluster->ip(1)));
  // A new delay replaces the old one.
  ASSERT_TRUE(cluster->set_delay(0, 40ms).ok());
  EXPECT_EQ(replies(*cluster, 0, 1, 3, 20), 0);
  EXPECT_EQ(replies(*cluster, 0, 1, 3, 1000), 3);
  const pid_t line = cluster->delay_line_pid(0);
  ASSERT_TRUE(cluster->set_delay(0, 0ms).ok());
  EXPECT_FALSE(cluster->delayed(0));
  EXPECT_EQ(replies(*cluster, 0, 1, 3, 50), 3);
  if (line > 0) {
    // The line is gone and the switch is as create() built it.
    EXPECT_NE(::kill(line, 0), 0);
    const auto links =
        testing::run({ip_binary(), "-n", cluster->switch_netns(), "-o", "link"}, {}, 10s);
    EXPECT_EQ(links.out.find(" r0@"), std::string::npos) << links.out;
    EXPECT_EQ(links.out.find(" d0@"), std::string::npos) << links.out;
    EXPECT_NE(links.out.find("master br0"), std::string::npos) << links.out;
  }
  ASSERT_TRUE(cluster->set_delay(0, 0ms).ok());  // removing twice is fine
}

TEST_F(NetnsTest, DelayWithJitterKeepsEveryPacketAndRejectsTooMuchJitter) {
  auto cluster = make(2);
  ASSERT_NE(cluster, nullptr);
  auto server = serve(*cluster, 1);
  EXPECT_FALSE(cluster->set_delay(0, 10ms, 20ms).ok());
  ASSERT_TRUE(cluster->set_delay(0, 60ms, 20ms).ok());
  EXPECT_EQ(replies(*cluster, 0, 1, 3, 30), 0);  // at least 40 ms each
  EXPECT_EQ(replies(*cluster, 0, 1, 5, 1000), 5);
}

TEST_F(NetnsTest, DelayOnOneHostAndCutsAndLossOnOthersAllApply) {
  auto cluster = make(4);
  ASSERT_NE(cluster, nullptr);
  std::vector<std::unique_ptr<Process>> servers;
  for (int host = 0; host < 4; ++host) servers.push_back(serve(*cluster, host));
  ASSERT_TRUE(cluster->set_delay(0, 100ms).ok());
  ASSERT_TRUE(cluster->cut(0, 2).ok());         // on the delayed host itself
  ASSERT_TRUE(cluster->set_loss(3, 100).ok());  // on another host
  EXPECT_EQ(replies(*cluster, 0, 2, 3, 500), 0);
  EXPECT_EQ(replies(*cluster, 2, 0, 3, 500), 0);
  EXPECT_EQ(replies(*cluster, 3, 1, 3, 100), 0);
  EXPECT_EQ(replies(*cluster, 1, 3, 3, 100), 0);  // 3's answers are lost too
  EXPECT_EQ(replies(*cluster, 1, 2, 5), 5);       // untouched pair: fast
  EXPECT_EQ(replies(*cluster, 1, 0, 3, 50), 0);   // 0's answers are late
  EXPECT_EQ(replies(*cluster, 1, 0, 3, 1000), 3);
  // Healing removes the cuts and the loss but keeps the delay.
  ASSERT_TRUE(cluster->heal_all().ok());
  EXPECT_EQ(replies(*cluster, 0, 2, 3, 50), 0);
  EXPECT_EQ(replies(*cluster, 0, 2, 3, 1000), 3);
  EXPECT_EQ(replies(*cluster, 3, 1, 5), 5);
  EXPECT_TRUE(cluster->delayed(0));
}

TEST_F(NetnsTest, EverythingIsRemovedWhenTheClusterEndsEvenWithProcessesInside) {
  std::vector<std::string> names;
  pid_t inside = -1;
  pid_t line = -1;
  {
    auto cluster = make(3);
    ASSERT_NE(cluster, nullptr);
    names = cluster->namespaces();
    ASSERT_EQ(names.size(), 4u);
    for (const auto& name : names) EXPECT_TRUE(namespace_exists(name)) << name;
    // A process the test still owns when the cluster goes: the cluster kills it by pid.
    auto server = serve(*cluster, 2);
    inside = server->pid();
    // An active delay: its line (where netem is missing) and extra links must go as well.
    ASSERT_TRUE(cluster->set_delay(1, 50ms).ok());
    line = cluster->delay_line_pid(1);
    if (!NetnsCluster::netem_available()) {
      EXPECT_GT(line, 0);
    }
    cluster.reset();
    EXPECT_TRUE(server->wait(10s).has_value());
  }
  for (const auto& name : names) EXPECT_FALSE(namespace_exists(name)) << name;
  EXPECT_NE(::kill(inside, 0), 0);
  if (line > 0) {
    EXPECT_NE(::kill(line, 0), 0);
  }
  // Nothing was ever made in the root namespace.
  const auto links = testing::run({ip_binary(), "-o", "link"}, {}, 10s);
  for (const auto& name : names) {
    const auto prefix = name.substr(0, name.rfind('-'));
    EXPECT_EQ(links.out.find(prefix), std::string::npos) << links.out;
  }
}

TEST_F(NetnsTest, LeftoversOfACrashedRunAreRemovedAndOthersAreNot) {
  // A pid that surely does not run any more: a child we reaped.
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ASSERT_GT(dead, 0);
  ::waitpid(dead, nullptr, 0);
  const std::string leftover = "elxn" + std::to_string(dead) + "c0-h0";
  const std::string not_ours = "elxnx" + std::to_string(dead) + "-h0";
  ASSERT_TRUE(testing::run({ip_binary(), "netns", "add", leftover}, {}, 10s).status.exited_with(0));
  ASSERT_TRUE(testing::run({ip_binary(), "netns", "add", not_ours}, {}, 10s).status.exited_with(0));
  // (A parallel test process may remove it first: only the outcome is asserted.)
  NetnsCluster::remove_leftovers();
  EXPECT_FALSE(namespace_exists(leftover));
  EXPECT_TRUE(namespace_exists(not_ours));
  testing::run({ip_binary(), "netns", "delete", not_ours}, {}, 10s);
}

TEST_F(NetnsTest, ACrashedRunsDelayLineAndLinksAreRemovedToo) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // A run that crashes with a delay active: no destructor runs.
    ::close(pipe_fds[0]);
    auto cluster = NetnsCluster::create(2);
    std::string report;
    if (cluster.ok() && (*cluster)->set_delay(0, 50ms).ok()) {
      report = (*cluster)->switch_netns() + " " + std::to_string((*cluster)->delay_line_pid(0));
    }
    (void)!::write(pipe_fds[1], report.data(), report.size());
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  std::string report;
  char buffer[256];
  for (ssize_t got; (got = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0;) {
    report.append(buffer, static_cast<std::size_t>(got));
  }
  ::close(pipe_fds[0]);
  ::waitpid(child, nullptr, 0);
  std::istringstream in(report);
  std::string switch_netns;
  pid_t line = -1;
  ASSERT_TRUE(in >> switch_netns >> line) << "the crashing child could not set a delay";
  // (A parallel test process may remove it first: only the outcome is asserted.)
  NetnsCluster::remove_leftovers();
  EXPECT_FALSE(namespace_exists(switch_netns));
  const auto prefix = switch_netns.substr(0, switch_netns.rfind('-'));
  EXPECT_FALSE(
      std::filesystem::exists(std::filesystem::temp_directory_path() / (prefix + "-delay-logs")));
  if (line > 0) {
    EXPECT_TRUE(testing::wait_until([&] { return ::kill(line, 0) != 0; }, 10s));
  }
}

TEST_F(NetnsTest, ClustersBuiltSideBySideAreIndependent) {
  auto first = make(2);
  auto second = make(2);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  EXPECT_NE(first->prefix(), second->prefix());
  auto server = serve(*second, 1);
  ASSERT_TRUE(first->cut(0, 1).ok());  // a fault in one cluster does not touch the other
  EXPECT_EQ(replies(*second, 0, 1, 5), 5);
}

}  // namespace
}  // namespace elastic::netns
