// NamespacedTest: the gtest fixture at the root of every namespace-tier test (tests/netns/*_test.cc
// derive from it directly, like netns_test.cc, or through DaemonClusterTest in
// daemon_cluster_test.h). Its SetUp, in this order:
//   - skips unless the process runs as root: namespaces, veths and the bridge need
//     CAP_SYS_ADMIN + CAP_NET_ADMIN. CI runs this tier as root; an unprivileged developer's
//     ctest skips it rather than fails;
//   - skips when missing_prerequisite() (a hook, "" by default) names something else the test
//     needs, e.g. torch for python3;
//   - fails (never skips) when NetnsCluster::check_environment() finds the kernel or iproute2
//     lacking: as root that is a broken machine, which the test must report.
// It makes nothing, so it cleans nothing up. A derived SetUp calls it first and returns at once
// when IsSkipped() or HasFatalFailure(). Header-only, so the harness's own tests need no daemon.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "tests/netns/netns_cluster.h"

namespace elastic::netns {

class NamespacedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "The namespace harness needs root (CI runs as root).";
    const std::string missing = missing_prerequisite();
    if (!missing.empty()) GTEST_SKIP() << missing;
    const auto environment = NetnsCluster::check_environment();
    ASSERT_TRUE(environment.ok()) << environment.error().message;
  }

  // Why this test cannot run here, beyond the harness's own needs ("" when it can).
  virtual std::string missing_prerequisite() { return ""; }
};

}  // namespace elastic::netns
