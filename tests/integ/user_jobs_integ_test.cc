// Integration tier: jobs of an unprivileged user (uid 65534) in a real elasticd running as root,
// as in production.
//  - After a kill -9 of the daemon, the user's worker must be gone: the spawner's
//    PR_SET_PDEATHSIG was armed before the switch to the user, the kernel cleared it, and the
//    worker trained on as an orphan (PPid 1), with and without spawner.cgroup_root.
//  - The metrics show a job's checkpoint step only where the job's user may read it: a
//    checkpoint directory planted as a symlink to a root-only directory showed that directory's
//    step (the daemon read <root>/<job>/LATEST as root).
// Skipped unless the test runs as root. Only this test's own temp dir is opened to the user;
// every wait has a deadline; processes are ended by pid.
#include <linux/magic.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/types.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/integ/daemon_under_test.h"
#include "tests/support/sockets.h"

namespace elastic::testing {
namespace {

constexpr uid_t kUser = 65534;

// A field of /proc/<pid>/status ("" when the process is gone).
std::string status_field(pid_t pid, const std::string& key) {
  std::istringstream in(read_file("/proc/" + std::to_string(pid) + "/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key + ":", 0) == 0) {
      const auto value = line.find_first_not_of(" \t", key.size() + 1);
      return value == std::string::npos ? "" : line.substr(value);
    }
  }
  return "";
}

// Gone = no such process, or a zombie (its parent, possibly init, has not reaped it yet).
bool gone(pid_t pid) {
  const std::string state = status_field(pid, "State");
  return state.empty() || state[0] == 'Z';
}

// The children of `parent` that run as `uid` (the daemon's workers of that user).
std::vector<pid_t> children_of(pid_t parent, uid_t uid) {
  std::vector<pid_t> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = std::stoi(name);
    if (status_field(pid, "PPid") == std::to_string(parent) &&
        status_field(pid, "Uid").rfind(std::to_string(uid) + "\t", 0) == 0) {
      found.push_back(pid);
    }
  }
  return found;
}

// elasticctl as uid 65534 (no supplementary groups) against `daemon`.
RunResult as_user(const Daemon& daemon, const std::vector<std::string>& args) {
  return elasticctl_on(daemon, args, kUser, kUser, std::chrono::seconds(20));
}

// Submits a sleeping job as the user, SIGKILLs the daemon, and expects the worker to be gone.
void expect_the_users_worker_dies_with_the_daemon(const std::vector<std::string>& settings) {
  TempDir dir;
  // The user must reach the control socket in <dir>/n1: open this test's own directory only.
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
  Daemon n1(dir, "n1", {});
  for (const std::string& setting : settings) n1.set(setting);
  n1.start();
  const pid_t daemon_pid = n1.process().pid();

  const RunResult submitted =
      as_user(n1, {"submit", "--name", "orphan", "--workdir", "/", "--", "/bin/sleep", "600"});
  ASSERT_TRUE(submitted.status.exited_with(0)) << submitted.out << submitted.err;
  std::vector<pid_t> workers;
  ASSERT_TRUE(wait_until(
      [&] {
        workers = children_of(daemon_pid, kUser);
        return !workers.empty();
      },
      kConverge))
      << "no worker of uid " << kUser << " started:\n"
      << n1.process().err();
  ASSERT_EQ(workers.size(), 1u);
  const pid_t worker = workers[0];

  n1.process().signal(SIGKILL);
  ASSERT_TRUE(n1.process().wait(std::chrono::seconds(10)).has_value());
  EXPECT_TRUE(wait_until([&] { return gone(worker); }, std::chrono::seconds(10)))
      << "worker " << worker << " of uid " << kUser << " outlived its daemon (PPid "
      << status_field(worker, "PPid") << ")";
  if (!gone(worker)) ::kill(worker, SIGKILL);
}

TEST(UserJobs, AUsersWorkerDiesWithAKilledDaemon) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a job as another user";
  expect_the_users_worker_dies_with_the_daemon({});
}

TEST(UserJobs, AUsersWorkerInACgroupDiesWithAKilledDaemon) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a job as another user";
  // A writable cgroup v2 directory of this test's own, removed at the end.
  std::string root;
  for (const char* base : {"/sys/fs/cgroup/unified", "/sys/fs/cgroup"}) {
    const std::string candidate =
        std::string(base) + "/elastic-user-jobs-test-" + std::to_string(::getpid());
    struct statfs fs {};
    if (::statfs(base, &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC &&
        ::mkdir(candidate.c_str(), 0755) == 0) {
      root = candidate;
      break;
    }
  }
  if (root.empty()) GTEST_SKIP() << "no writable cgroup v2 hierarchy";
  expect_the_users_worker_dies_with_the_daemon({"spawner.cgroup_root=" + root});
  // The killed daemon left its worker's (now empty) cgroup behind; a restart would remove it.
  EXPECT_TRUE(wait_until(
      [&] {
        for (const auto& entry : std::filesystem::directory_iterator(root)) {
          if (entry.is_directory()) ::rmdir(entry.path().c_str());
        }
        return ::rmdir(root.c_str()) == 0;
      },
      std::chrono::seconds(10)))
      << root;
}

// One GET /metrics of the daemon's endpoint (its port from the readiness line): the body, or ""
// when it did not answer.
std::string scrape(Daemon& daemon) {
  static const std::regex ready("elasticd ready: [^\n]* metrics=\\S+:(\\d+)");
  std::smatch match;
  const std::string err = daemon.process().err();
  if (!std::regex_search(err, match, ready)) return "";
  const int fd = connect_loopback(std::stoi(match[1].str()));
  if (fd < 0) return "";
  const std::string request = "GET /metrics HTTP/1.0\r\n\r\n";
  std::string reply;
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
      static_cast<ssize_t>(request.size())) {
    char buffer[4096];
    for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) reply.append(buffer, n);
  }
  ::close(fd);
  return reply;
}

TEST(UserJobs, TheMetricsShowACheckpointStepOnlyWhereTheUserMayRead) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a job as another user";
  TempDir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
  // Only root may enter <dir>/secret; <dir>/mine is the user's to read; <dir>/ck is the
  // checkpoint root the user names, where the user plants <job id> as a symlink.
  const std::string secret = dir.file("secret"), mine = dir.file("mine"), ck = dir.file("ck");
  for (const std::string& d : {secret, mine, ck}) std::filesystem::create_directories(d);
  std::ofstream(secret + "/LATEST") << "step-000000042\n";
  std::ofstream(mine + "/LATEST") << "step-000000007\n";
  ASSERT_EQ(::chmod(secret.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(ck.c_str(), 0777), 0);
  Daemon n1(dir, "n1", {});
  n1.set("control.metrics_listen=127.0.0.1:0");
  n1.start();

  const RunResult submitted = as_user(n1, {"submit", "--name", "peek", "--workdir", "/",
                                           "--checkpoint-root", ck, "--", "/bin/sleep", "600"});
  ASSERT_TRUE(submitted.status.exited_with(0)) << submitted.out << submitted.err;
  std::smatch match;
  ASSERT_TRUE(std::regex_search(submitted.out, match, std::regex("submitted (\\S+)")))
      << submitted.out;
  const std::string job = match[1].str();
  ASSERT_TRUE(
      wait_until([&] { return !children_of(n1.process().pid(), kUser).empty(); }, kConverge))
      << n1.process().err();
  const std::string series = "elastic_checkpoint_step{job=\"" + job + "\"}";

  std::filesystem::create_directory_symlink(secret, ck + "/" + job);
  const std::string shown = scrape(n1);
  ASSERT_NE(shown.find("elastic_checkpoint_step"), std::string::npos) << shown;
  EXPECT_EQ(shown.find(series), std::string::npos) << "the root-only directory's step is shown:\n"
                                                   << shown.substr(shown.find(series));
  // The same path to a directory the user may read is shown: the negative above was no accident.
  std::filesystem::remove(ck + "/" + job);
  std::filesystem::create_directory_symlink(mine, ck + "/" + job);
  std::string readable;
  EXPECT_TRUE(wait_until(
      [&] {
        readable = scrape(n1);
        return readable.find(series + " 7") != std::string::npos;
      },
      std::chrono::seconds(10)))
      << readable;
}

}  // namespace
}  // namespace elastic::testing
