// Reload: which settings a SIGHUP can apply to a running elasticd and which need a restart.
// A pure function of the running configuration and the newly loaded (already valid) one.
//
// Applied live (the node swaps the value in and the next use sees it):
//   logging.level        spdlog's level is a global the daemon sets again
//   control.admin_group  read on every control request (Node::is_admin)
//   control.max_active_jobs_per_user, control.submits_per_minute_per_user,
//   control.submit_burst_per_user
//                        handed to the job service (JobService::set_submit_limits); the next
//                        submit is checked against them (a changed rate refills every bucket)
//   spawner.stop_grace, spawner.log_max_bytes, spawner.log_keep
//                        handed to the spawner (Spawner::set_limits); the next stop() and log
//                        write use them (a running TERM -> KILL escalation keeps its deadline)
//   limits.*             read by the Raft leader at every planning pass and priority change
//                        (the scheduler's limits, limits.priority_ceiling)
// Everything else needs a restart and keeps its running value, either because it is identity
// or a bound resource (node.name, node.cluster_id, node.state_dir, transport.*, control.socket,
// consensus.voters/data_dir, curve keys: changing them under a running node would split it from
// its own history), or because it is copied into a running subsystem at start and has no safe
// way in yet (membership.* timers, rendezvous.* timings and the lease, spawner paths/binding,
// checkpoint.*, logging.format/file, node.gpus/cpu_slots). Keys added to DaemonConfig later
// need a restart until listed here: a key nobody thought about is never half-applied.
//
// Thread safety: pure. Errors: none (the new config was validated by load_config).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "daemon/config/config.h"

namespace elastic::node {

struct ReloadPlan {
  // The configuration to run with: the running one with every live key taken from the new one.
  config::DaemonConfig apply;
  // One line per live key that changed: "logging.level: \"info\" -> \"debug\"".
  std::vector<std::string> applied;
  // "section.key" of every changed key that takes effect only after a restart.
  std::vector<std::string> needs_restart;
  bool changed() const { return !applied.empty() || !needs_restart.empty(); }
};

// True for the keys listed above as applied live.
bool is_live_key(std::string_view key);

ReloadPlan plan_reload(const config::DaemonConfig& running, const config::DaemonConfig& loaded);

}  // namespace elastic::node
