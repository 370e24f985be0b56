// plan_reload (daemon/node/reload.h): which changed settings a SIGHUP applies live and which
// wait for a restart, table-driven over real DaemonConfig values.
#include "daemon/node/reload.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

namespace elastic::node {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using namespace std::chrono_literals;

TEST(Reload, NothingChangedAppliesNothing) {
  const config::DaemonConfig running;
  const ReloadPlan plan = plan_reload(running, running);
  EXPECT_FALSE(plan.changed());
  EXPECT_THAT(plan.applied, IsEmpty());
  EXPECT_THAT(plan.needs_restart, IsEmpty());
  EXPECT_EQ(plan.apply, running);
}

TEST(Reload, LiveKeysAreAppliedAndDescribed) {
  config::DaemonConfig running;
  running.control.admin_group = "hpc-admins";
  config::DaemonConfig loaded = running;
  loaded.logging.level = config::LogLevel::kDebug;
  loaded.control.admin_group = "";
  const ReloadPlan plan = plan_reload(running, loaded);
  EXPECT_THAT(plan.applied, ElementsAre("control.admin_group: \"hpc-admins\" -> \"\"",
                                        "logging.level: \"info\" -> \"debug\""));
  EXPECT_THAT(plan.needs_restart, IsEmpty());
  EXPECT_EQ(plan.apply, loaded);
}

// The per-user submit limits are reloadable: an operator under a submit flood
// lowers them with a SIGHUP, no restart.
TEST(Reload, SubmitLimitsApplyLive) {
  const config::DaemonConfig running;
  config::DaemonConfig loaded = running;
  loaded.control.max_active_jobs_per_user = 50;
  loaded.control.submits_per_minute_per_user = 60;
  loaded.control.submit_burst_per_user = 5;
  const ReloadPlan plan = plan_reload(running, loaded);
  EXPECT_THAT(plan.applied, ElementsAre("control.max_active_jobs_per_user: 1000 -> 50",
                                        "control.submit_burst_per_user: 100 -> 5",
                                        "control.submits_per_minute_per_user: 600 -> 60"));
  EXPECT_THAT(plan.needs_restart, IsEmpty());
  EXPECT_EQ(plan.apply, loaded);
}

struct RestartCase {
  const char* key;
  std::function<void(config::DaemonConfig&)> change;
};

// Identity, bound resources and values copied into running subsystems keep their running value.
TEST(Reload, RestartKeysKeepTheRunningValue) {
  const std::vector<RestartCase> cases = {
      {"node.name", [](config::DaemonConfig& c) { c.node.name = "other"; }},
      {"node.cluster_id", [](config::DaemonConfig& c) { c.node.cluster_id = "b"; }},
      {"node.state_dir", [](config::DaemonConfig& c) { c.node.state_dir = "/tmp/x"; }},
      {"transport.bind", [](config::DaemonConfig& c) { c.transport.bind = "tcp://0.0.0.0:1"; }},
      {"transport.curve", [](config::DaemonConfig& c) { c.transport.curve = false; }},
      {"transport.secret_key_file",
       [](config::DaemonConfig& c) { c.transport.secret_key_file = "/k"; }},
      {"control.socket", [](config::DaemonConfig& c) { c.control.socket = "/tmp/s"; }},
      {"consensus.voters",
       [](config::DaemonConfig& c) {
         c.consensus.voters = {"a", "b", "c"};
       }},
      {"membership.probe_interval",
       [](config::DaemonConfig& c) { c.membership.probe_interval = 2s; }},
      {"rendezvous.lease_duration",
       [](config::DaemonConfig& c) { c.rendezvous.lease_duration = 9s; }},
      {"spawner.log_dir", [](config::DaemonConfig& c) { c.spawner.log_dir = "/tmp/logs"; }},
      {"spawner.log_root", [](config::DaemonConfig& c) { c.spawner.log_root = "/shared/logs"; }},
      {"logging.file", [](config::DaemonConfig& c) { c.logging.file = "/tmp/log"; }},
      {"logging.format",
       [](config::DaemonConfig& c) { c.logging.format = config::LogFormat::kJson; }},
  };
  for (const RestartCase& c : cases) {
    SCOPED_TRACE(c.key);
    EXPECT_FALSE(is_live_key(c.key));
    const config::DaemonConfig running;
    config::DaemonConfig loaded = running;
    c.change(loaded);
    const ReloadPlan plan = plan_reload(running, loaded);
    EXPECT_THAT(plan.needs_restart, ElementsAre(c.key));
    EXPECT_THAT(plan.applied, IsEmpty());
    EXPECT_EQ(plan.apply, running);
  }
}

TEST(Reload, MixedChangesSplit) {
  const config::DaemonConfig running;
  config::DaemonConfig loaded = running;
  loaded.logging.level = config::LogLevel::kWarn;
  loaded.node.name = "renamed";
  loaded.spawner.log_keep = 9;
  loaded.spawner.bind_cpus = false;
  const ReloadPlan plan = plan_reload(running, loaded);
  EXPECT_THAT(plan.applied,
              ElementsAre("logging.level: \"info\" -> \"warn\"", "spawner.log_keep: 5 -> 9"));
  EXPECT_THAT(plan.needs_restart, ElementsAre("node.name", "spawner.bind_cpus"));
  EXPECT_EQ(plan.apply.logging.level, config::LogLevel::kWarn);
  EXPECT_EQ(plan.apply.node.name, running.node.name);
  EXPECT_EQ(plan.apply.spawner.log_keep, 9);
  EXPECT_EQ(plan.apply.spawner.bind_cpus, running.spawner.bind_cpus);
}

// Every key of the schema is classified: changing any one of them lands in exactly one list.
TEST(Reload, EveryKeyIsClassified) {
  std::size_t live = 0;
  for (const std::string& key : config::all_keys()) live += is_live_key(key) ? 1 : 0;
  EXPECT_EQ(live, 15u);
  for (const char* key :
       {"logging.level", "control.admin_group", "spawner.stop_grace", "spawner.log_max_bytes",
        "spawner.log_keep", "control.max_active_jobs_per_user",
        "control.submits_per_minute_per_user", "control.submit_burst_per_user",
        "limits.priority_ceiling", "limits.max_nodes_per_user", "limits.max_running_jobs_per_user",
        "limits.max_nodes_per_group", "limits.max_running_jobs_per_group", "limits.users",
        "limits.groups"}) {
    EXPECT_TRUE(is_live_key(key)) << key;
  }
}

// The limits section applies live, entries included.
TEST(Reload, LimitsApplyLive) {
  config::DaemonConfig running;
  config::DaemonConfig loaded = running;
  loaded.limits.priority_ceiling = 5;
  loaded.limits.max_running_jobs_per_user = 2;
  loaded.limits.users.entries["alice"] = config::LimitEntry{8, 1, 0};
  const ReloadPlan plan = plan_reload(running, loaded);
  EXPECT_TRUE(plan.needs_restart.empty());
  EXPECT_EQ(plan.applied.size(), 3u);
  EXPECT_TRUE(plan.apply == loaded);
}

}  // namespace
}  // namespace elastic::node
