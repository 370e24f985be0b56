// DaemonClusterTest: the gtest fixture of the namespaced daemon tests (membership, consensus, job
// and torchrun_script _netns_test.cc): NamespacedTest's checks (root, the test's own
// prerequisites, the kernel and iproute2; namespaced_test.h), then options().hosts hosts as
// network namespaces (NetnsCluster::create, which first removes leftovers of crashed earlier
// runs) and one DaemonCluster over them (daemon_cluster.h) in a fresh temp dir work_, with
// options().timers and options().raft. The daemons are not started: the derived SetUp or the test
// sets its overrides, then calls start_converged() (or DaemonCluster::start_all()).
// options().share_work_dir makes work_ 0755 (mkdtemp's is 0700), for tests whose workers or
// elasticctl run as another user: work_ holds the control sockets.
//
// A derived SetUp calls DaemonClusterTest::SetUp() first and returns at once when IsSkipped() or
// HasFatalFailure(); likewise after start_converged().
//
// Clean-up (TearDown): after a failure, failure_context() (a hook for the test's own state: its
// jobs, Raft) and every daemon's stderr (its last options().log_tail bytes, or all of it) go to
// stderr. Then the daemons are killed by pid (their workers die with them) before the namespaces
// go (NetnsCluster's destructor kills by pid whatever is still inside them, then deletes them),
// and work_ is removed last with everything in it. Nothing outside work_ and the cluster's own
// namespaces is touched.
//
// Parallel runs: every case makes its own namespaces (elxn<pid>c<n>: per process and cluster),
// subnet and temp dir ($TMPDIR/elastic-test-XXXXXX); its daemons bind only inside their own
// namespaces and their control sockets live in work_, so cases of one binary or of several run
// at the same time without meeting (ctest's PROCESSORS only keeps a small machine from being
// overloaded).
//
// Header-only, like tests/integ/daemon_under_test.h: it needs ELASTICD_PATH and ELASTICCTL_PATH,
// which elastic_test(... DAEMON) defines. Thread safety: a fixture belongs to its case's thread.
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <cstddef>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "tests/netns/daemon_cluster.h"
#include "tests/netns/namespaced_test.h"
#include "tests/netns/netns_cluster.h"
#include "tests/support/temp_dir.h"

namespace elastic::netns {

struct DaemonClusterOptions {
  int hosts = 3;
  Timers timers = short_timers();
  RaftTimers raft = short_raft_timers();
  // chmod 0755 work_ so that other users reach the sockets and files in it.
  bool share_work_dir = false;
  // Bytes of each daemon's stderr printed after a failure ("..." and its end); 0: all of it.
  std::size_t log_tail = 0;
};

// `text`'s last `bytes` bytes after "...", or all of it when it is not longer.
inline std::string tail(const std::string& text, std::size_t bytes) {
  return text.size() <= bytes ? text : "..." + text.substr(text.size() - bytes);
}

class DaemonClusterTest : public NamespacedTest {
 protected:
  explicit DaemonClusterTest(DaemonClusterOptions options) : options_(std::move(options)) {}

  void SetUp() override {
    NamespacedTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto hosts = NetnsCluster::create(options_.hosts);
    ASSERT_TRUE(hosts.ok()) << hosts.error().message;
    hosts_ = std::move(hosts).value();
    if (options_.share_work_dir) ::chmod(work_.path().c_str(), 0755);
    daemons_ = std::make_unique<DaemonCluster>(*hosts_, ELASTICD_PATH, ELASTICCTL_PATH,
                                               work_.path(), options_.timers, options_.raft);
  }

  void TearDown() override {
    if (HasFailure() && daemons_) {
      failure_context(std::cerr);
      for (int host = 0; host < options_.hosts; ++host) {
        const std::string log = daemons_->log(host);
        std::cerr << "---- elasticd h" << host << " ----\n"
                  << (options_.log_tail == 0 ? log : tail(log, options_.log_tail)) << "\n";
      }
    }
    daemons_.reset();  // daemons first (their workers die with them), then their namespaces
    hosts_.reset();
  }

  // What a failed case prints before the daemons' logs (nothing by default).
  virtual void failure_context(std::ostream& /*out*/) {}

  // Starts every daemon and waits (kConverge) until each sees all of them alive; a fatal failure
  // with every daemon's view otherwise.
  void start_converged() {
    const auto started = daemons_->start_all();
    ASSERT_TRUE(started.ok()) << started.error().message;
    ASSERT_TRUE(daemons_->wait_all_see(all_hosts(), all_hosts(), "alive", kConverge))
        << "the daemons did not converge:\n"
        << daemons_->describe(all_hosts());
  }

  const DaemonClusterOptions& options() const { return options_; }
  const Timers& timers() const { return options_.timers; }
  // 0 .. options().hosts - 1.
  std::vector<int> all_hosts() const {
    std::vector<int> hosts;
    for (int host = 0; host < options_.hosts; ++host) hosts.push_back(host);
    return hosts;
  }

  // Daemons converge within seconds; the slack is for a loaded 2-core machine.
  static constexpr std::chrono::milliseconds kConverge = std::chrono::seconds(30);

  testing::TempDir work_;  // first, so it is removed after the daemons and namespaces are gone
  std::unique_ptr<NetnsCluster> hosts_;
  std::unique_ptr<DaemonCluster> daemons_;

 private:
  DaemonClusterOptions options_;
};

}  // namespace elastic::netns
