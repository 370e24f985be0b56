// Placement on a real elasticd (one voter, CPU slots, 127.0.0.1):
//   - slots are never given twice: three one-slot jobs become placeable in one planning pass
//     (the node is drained while they are submitted, then undrained) while another job runs on
//     the two-slot node: one at a time runs beside it, the others queue, the running job keeps
//     its round;
//   - store ports: two jobs with rank 0 on one node get different ports whose stores both
//     listen; a port range held by another process does not make a job loop: it moves off the
//     held ports at no restart and, with every port held, fails after its restarts naming the
//     port;
//   - a job whose command can never start fails after its restarts with the reason (the node's
//     quarantine once turned the failures into "node lost" rounds that never counted).
// The "other process" holding ports is this test (a bind clashes whoever owns the socket).
// Nothing sleeps a fixed time: every expectation polls with a deadline.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/integ/daemon_under_test.h"
#include "tests/support/process.h"
#include "tests/support/sockets.h"
#include "tests/support/temp_dir.h"

namespace elastic::testing {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

constexpr auto kSettle = std::chrono::seconds(60);

std::vector<std::string> ctl_args(const Daemon& daemon, std::vector<std::string> args) {
  std::vector<std::string> argv = {"-c", "", "--set", "control.socket=" + daemon.socket()};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

// Submits (retrying while the daemon has no leader yet); returns the job id.
std::string submit(const Daemon& daemon, std::vector<std::string> args) {
  std::vector<std::string> argv = {"submit"};
  argv.insert(argv.end(), args.begin(), args.end());
  RunResult r;
  EXPECT_TRUE(wait_until(
      [&] {
        r = elasticctl(ctl_args(daemon, argv));
        return r.status.exited_with(0);
      },
      kConverge))
      << r.out << r.err;
  const std::string prefix = "submitted ";
  if (r.out.rfind(prefix, 0) != 0) return "";
  return r.out.substr(prefix.size(), r.out.find('\n') - prefix.size());
}

json job_of(const Daemon& daemon, const std::string& id) {
  const RunResult r = elasticctl(ctl_args(daemon, {"status", id, "--json"}));
  if (!r.status.exited_with(0)) return nullptr;
  const auto job = json::parse(r.out, nullptr, false);
  return job.is_discarded() ? nullptr : job;
}

// Every job by id, from one `jobs --json` reply: one state of the leader's table, so jobs read
// together are never seen at different moments (a job read after another may already have
// taken the slot the first one freed in between).
std::map<std::string, json> jobs_of(const Daemon& daemon) {
  const RunResult r = elasticctl(ctl_args(daemon, {"jobs", "--json"}));
  std::map<std::string, json> jobs;
  if (!r.status.exited_with(0)) return jobs;
  const auto reply = json::parse(r.out, nullptr, false);
  if (reply.is_discarded()) return jobs;
  for (const auto& job : reply.value("jobs", json::array())) {
    jobs[job.value("id", "")] = job;
  }
  return jobs;
}

// Polls the job until it is in `state` (or the deadline); returns what it saw last.
json wait_for_state(const Daemon& daemon, const std::string& id, const std::string& state,
                    std::chrono::seconds limit) {
  json job;
  wait_until(
      [&] {
        job = job_of(daemon, id);
        return !job.is_null() && job["state"] == state;
      },
      limit);
  return job;
}

std::uint16_t store_port(const json& job) {
  const std::string endpoint = job.value("store_endpoint", "");
  const auto colon = endpoint.rfind(':');
  return colon == std::string::npos
             ? 0
             : static_cast<std::uint16_t>(std::stoi(endpoint.substr(colon + 1)));
}

bool holds_a_round(const json& job) {
  const std::string state = job.value("state", "");
  return job.value("round", 0) > 0 &&
         (state == "rendezvous" || state == "running" || state == "recovering");
}

// A listening IPv4 TCP socket on 0.0.0.0:port, as a user's server would hold it; -1 if taken.
int listen_on(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(port);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0 ||
      ::listen(fd, 4) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// `count` consecutive ports held by this process (the "other user"); released at the end.
class HeldPorts {
 public:
  explicit HeldPorts(int count) {
    // The kernel's port 0 pick, then its neighbours, until a whole run is free.
    for (int attempt = 0; attempt < 200 && fds_.empty(); ++attempt) {
      const int probe = listen_on(0);
      sockaddr_in bound{};
      socklen_t size = sizeof(bound);
      ::getsockname(probe, reinterpret_cast<sockaddr*>(&bound), &size);
      ::close(probe);
      const int base = ntohs(bound.sin_port);
      if (base + count > 65535) continue;
      std::vector<int> fds;
      for (int i = 0; i < count; ++i) {
        const int fd = listen_on(static_cast<std::uint16_t>(base + i));
        if (fd < 0) break;
        fds.push_back(fd);
      }
      if (static_cast<int>(fds.size()) == count) {
        fds_ = fds;
        base_ = base;
      } else {
        for (int fd : fds) ::close(fd);
      }
    }
    EXPECT_EQ(static_cast<int>(fds_.size()), count) << "no run of free ports";
  }
  ~HeldPorts() { release(); }
  void release() {
    for (int fd : fds_) ::close(fd);
    fds_.clear();
  }
  int first() const { return base_; }
  int last() const { return base_ + static_cast<int>(fds_.empty() ? 0 : fds_.size()) - 1; }

 private:
  std::vector<int> fds_;
  int base_ = 0;
};

// `count` consecutive ports free a moment ago (first, last).
std::pair<int, int> free_range(int count) {
  HeldPorts range(count);
  return {range.first(), range.last()};
}

bool connects(std::uint16_t port) {
  const int fd = connect_loopback(port);
  if (fd >= 0) ::close(fd);
  return fd >= 0;
}

// One daemon with two CPU slots whose store ports are `first`..`last`.
struct Node {
  TempDir dir;
  Daemon n1{dir, "n1", {}};
  Node(int first, int last) {
    n1.set("node.cpu_slots=2");
    n1.set("rendezvous.store_port_min=" + std::to_string(first));
    n1.set("rendezvous.store_port_max=" + std::to_string(last));
    n1.start();
  }
};

// The leader used to count the used slots only once per planning pass, so all three jobs
// opened rounds on the one free slot; the running job then looked lost and was SIGKILLed.
TEST(PlacementInteg, ThreeJobsInOnePassNeverShareASlotAndTheRunningJobKeepsItsRound) {
  const auto [first, last] = free_range(10);
  Node node(first, last);
  Daemon& n1 = node.n1;
  const std::string running = submit(n1, {"--name", "running", "--nodes", "1", "--workers-per-node",
                                          "1", "--", "/bin/sleep", "600"});
  const json job = wait_for_state(n1, running, "running", kConverge);
  ASSERT_EQ(job["state"], "running") << job.dump();
  // Drained, n1 takes no new work: the three jobs wait, then become placeable in one pass.
  RunResult r = elasticctl(ctl_args(n1, {"drain", "n1", "--reason", "test"}));
  ASSERT_TRUE(r.status.exited_with(0)) << r.err;
  std::vector<std::string> queued;
  for (const char* name : {"b", "c", "d"}) {
    queued.push_back(submit(n1, {"--name", name, "--nodes", "1:2", "--workers-per-node", "1",
                                 "--max-restarts", "0", "--", "/bin/sleep", "1"}));
  }
  r = elasticctl(ctl_args(n1, {"undrain", "n1"}));
  ASSERT_TRUE(r.status.exited_with(0)) << r.err;

  std::map<std::string, json> seen;
  std::string problem;
  const bool all_done = wait_until(
      [&] {
        std::uint32_t held = 0;
        bool done = true;
        const std::map<std::string, json> jobs = jobs_of(n1);
        for (const std::string& id : queued) {
          const auto it = jobs.find(id);
          if (it == jobs.end()) return false;
          const json& j = it->second;
          seen[id] = j;
          if (holds_a_round(j)) ++held;
          done = done && j["state"] == "succeeded";
        }
        const auto it = jobs.find(running);
        if (it == jobs.end()) return false;
        const json& r0 = it->second;
        seen[running] = r0;
        if (r0["state"] != "running" || r0["round"] != 1 || r0["restarts"] != 0) {
          problem = "the running job was disturbed: " + r0.dump();
          return true;
        }
        if (held > 1) {
          problem = std::to_string(held) +
                    " one-slot jobs hold rounds beside the running job "
                    "on a two-slot node";
          return true;
        }
        return done;
      },
      kSettle);
  std::string dump;
  for (const auto& [id, j] : seen) dump += id + ": " + j.dump() + "\n";
  EXPECT_TRUE(problem.empty()) << problem << "\n" << dump;
  EXPECT_TRUE(all_done) << dump;
  for (const std::string& id : queued) {
    EXPECT_EQ(seen[id]["restarts"], 0) << dump;
    EXPECT_EQ(seen[id]["round"], 1) << dump;
  }
}

// MASTER_PORT once came from the round number only, so two jobs with rank 0 on
// one node both got the range's port for round 1 and the second store failed.
TEST(PlacementInteg, TwoJobsWithRankZeroOnOneNodeGetDifferentWorkingPorts) {
  const auto [first, last] = free_range(10);
  Node node(first, last);
  std::vector<std::string> ids;
  for (const char* name : {"one", "two"}) {
    ids.push_back(submit(node.n1, {"--name", name, "--nodes", "1", "--workers-per-node", "1", "--",
                                   STORE_WORKER_PATH}));
  }
  std::vector<json> jobs(2);
  ASSERT_TRUE(wait_until(
      [&] {
        for (std::size_t i = 0; i < ids.size(); ++i) {
          jobs[i] = job_of(node.n1, ids[i]);
          if (jobs[i].is_null() || jobs[i]["state"] != "running") return false;
        }
        return true;
      },
      kConverge))
      << jobs[0].dump() << "\n"
      << jobs[1].dump();
  const std::uint16_t p0 = store_port(jobs[0]);
  const std::uint16_t p1 = store_port(jobs[1]);
  EXPECT_NE(p0, p1) << jobs[0].dump() << "\n" << jobs[1].dump();
  for (std::uint16_t port : {p0, p1}) {
    EXPECT_GE(port, first);
    EXPECT_LE(port, last);
  }
  // Both stores listen (the workers bound their MASTER_PORT), and neither job restarted.
  EXPECT_TRUE(wait_until([&] { return connects(p0) && connects(p1); }, kConverge));
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const json j = job_of(node.n1, ids[i]);
    EXPECT_EQ(j["restarts"], 0) << j.dump();
    EXPECT_EQ(j["round"], 1) << j.dump();
  }
}

// Another user holding ports of the range. Some held: the round moves off
// them at no restart and runs. All held: the job fails after its restarts, naming the port,
// instead of looping for ever.
TEST(PlacementInteg, HeldStorePortsMoveTheRoundAndAFullyHeldRangeFailsTheJob) {
  HeldPorts held(3);
  ASSERT_GT(held.first(), 0);
  // The range: the three held ports and one free one after them.
  const int free_port = held.last() + 1;
  const int spare = listen_on(static_cast<std::uint16_t>(free_port));
  ASSERT_GE(spare, 0) << "port " << free_port << " is taken";
  ::close(spare);
  {
    Node node(held.first(), free_port);
    const std::string id = submit(node.n1, {"--name", "moves", "--nodes", "1", "--max-restarts",
                                            "1", "--", STORE_WORKER_PATH});
    const json job = wait_for_state(node.n1, id, "running", kSettle);
    EXPECT_EQ(job["state"], "running") << job.dump();
    EXPECT_EQ(store_port(job), free_port) << job.dump();
    EXPECT_EQ(job["restarts"], 0) << job.dump();
    EXPECT_TRUE(
        wait_until([&] { return connects(static_cast<std::uint16_t>(free_port)); }, kConverge));
  }
  Node node(held.first(), held.last());
  const std::string id = submit(node.n1, {"--name", "held", "--nodes", "1", "--max-restarts", "2",
                                          "--restart-backoff", "0s", "--", STORE_WORKER_PATH});
  const json job = wait_for_state(node.n1, id, "failed", kSettle);
  ASSERT_EQ(job["state"], "failed") << job.dump();
  EXPECT_EQ(job["restarts"], 2) << job.dump();
  EXPECT_THAT(job.value("reason", ""), HasSubstr("is in use by another process")) << job.dump();
  EXPECT_THAT(job.value("reason", ""), HasSubstr("used all 2 restarts")) << job.dump();
}

// After the node's quarantine, failures were once relabelled "node ... was lost"
// and "restarts: 1 of 3" never moved: a worker that can never start kept the job for ever.
TEST(PlacementInteg, AJobWhoseWorkerCannotStartFailsAfterItsRestartsWithTheReason) {
  const auto [first, last] = free_range(10);
  Node node(first, last);
  const std::string id =
      submit(node.n1, {"--name", "never", "--nodes", "1", "--max-restarts", "2",
                       "--restart-backoff", "0s", "--", "/nonexistent/elastic-test-command"});
  const json job = wait_for_state(node.n1, id, "failed", kSettle);
  ASSERT_EQ(job["state"], "failed") << job.dump();
  EXPECT_EQ(job["restarts"], 2) << job.dump();
  EXPECT_THAT(job.value("reason", ""), HasSubstr("used all 2 restarts")) << job.dump();
  EXPECT_THAT(job.value("reason", ""), HasSubstr("could not start")) << job.dump();
}

}  // namespace
}  // namespace elastic::testing
