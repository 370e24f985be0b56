// The one list of config keys: visit_config() names every field of DaemonConfig with its TOML
// section and key, in the order of conf/elasticd.toml. The TOML reader, the TOML and JSON
// writers, the did-you-mean table and the tests are all driven by it, so adding a field means
// adding one line here (config_test fails if a struct field is missing from this list).
//
// A visitor provides
//   void section(const char* name);            // called before the section's fields
//   template <typename T> void field(const char* key, T& value);  // T possibly const
// and is called synchronously; nothing is retained. Internal to daemon/config and its tests.
#pragma once

#include <type_traits>

#include "daemon/config/config.h"

namespace elastic::config {

template <typename Config, typename Visitor>
requires std::is_same_v<std::remove_const_t<Config>, DaemonConfig>
void visit_config(Config& c, Visitor& v) {
  v.section("node");
  v.field("name", c.node.name);
  v.field("cluster_id", c.node.cluster_id);
  v.field("state_dir", c.node.state_dir);
  v.field("gpus", c.node.gpus);
  v.field("cpu_slots", c.node.cpu_slots);

  v.section("transport");
  v.field("bind", c.transport.bind);
  v.field("advertise", c.transport.advertise);
  v.field("send_hwm", c.transport.send_hwm);
  v.field("max_message_bytes", c.transport.max_message_bytes);
  v.field("tcp_max_retransmit_timeout", c.transport.tcp_max_retransmit_timeout);
  v.field("heartbeat_interval", c.transport.heartbeat_interval);
  v.field("heartbeat_timeout", c.transport.heartbeat_timeout);
  v.field("idle_peer_close", c.transport.idle_peer_close);
  v.field("max_connections_per_address", c.transport.max_connections_per_address);
  v.field("curve", c.transport.curve);
  v.field("secret_key_file", c.transport.secret_key_file);
  v.field("public_keys_dir", c.transport.public_keys_dir);

  v.section("membership");
  v.field("seeds", c.membership.seeds);
  v.field("probe_interval", c.membership.probe_interval);
  v.field("probe_timeout", c.membership.probe_timeout);
  v.field("indirect_probes", c.membership.indirect_probes);
  v.field("suspicion_multiplier", c.membership.suspicion_multiplier);
  v.field("suspicion_max_multiplier", c.membership.suspicion_max_multiplier);
  v.field("awareness_max_multiplier", c.membership.awareness_max_multiplier);
  v.field("retransmit_multiplier", c.membership.retransmit_multiplier);
  v.field("gossip_interval", c.membership.gossip_interval);
  v.field("gossip_fanout", c.membership.gossip_fanout);
  v.field("gossip_to_dead", c.membership.gossip_to_dead);
  v.field("push_pull_interval", c.membership.push_pull_interval);
  v.field("reconnect_interval", c.membership.reconnect_interval);
  v.field("rejoin_interval", c.membership.rejoin_interval);
  v.field("tombstone_ttl", c.membership.tombstone_ttl);

  v.section("consensus");
  v.field("voters", c.consensus.voters);
  v.field("election_timeout", c.consensus.election_timeout);
  v.field("heartbeat_interval", c.consensus.heartbeat_interval);
  v.field("snapshot_every_entries", c.consensus.snapshot_every_entries);
  v.field("data_dir", c.consensus.data_dir);

  v.section("rendezvous");
  v.field("last_call", c.rendezvous.last_call);
  v.field("join_timeout", c.rendezvous.join_timeout);
  v.field("job_keepalive_interval", c.rendezvous.job_keepalive_interval);
  v.field("job_peer_timeout", c.rendezvous.job_peer_timeout);
  v.field("lease_duration", c.rendezvous.lease_duration);
  v.field("reform_timeout", c.rendezvous.reform_timeout);
  v.field("store_port_min", c.rendezvous.store_port_min);
  v.field("store_port_max", c.rendezvous.store_port_max);

  v.section("spawner");
  v.field("stop_grace", c.spawner.stop_grace);
  v.field("log_dir", c.spawner.log_dir);
  v.field("log_root", c.spawner.log_root);
  v.field("log_rounds_kept", c.spawner.log_rounds_kept);
  v.field("log_max_bytes", c.spawner.log_max_bytes);
  v.field("log_keep", c.spawner.log_keep);
  v.field("log_timestamps", c.spawner.log_timestamps);
  v.field("bind_cpus", c.spawner.bind_cpus);
  v.field("bind_memory", c.spawner.bind_memory);
  v.field("cgroup_root", c.spawner.cgroup_root);
  v.field("python_dir", c.spawner.python_dir);

  v.section("checkpoint");
  v.field("root", c.checkpoint.root);
  v.field("keep", c.checkpoint.keep);

  v.section("control");
  v.field("socket", c.control.socket);
  v.field("admin_group", c.control.admin_group);
  v.field("metrics_listen", c.control.metrics_listen);
  v.field("remote_listen", c.control.remote_listen);
  v.field("client_keys_dir", c.control.client_keys_dir);
  v.field("max_active_jobs_per_user", c.control.max_active_jobs_per_user);
  v.field("submits_per_minute_per_user", c.control.submits_per_minute_per_user);
  v.field("submit_burst_per_user", c.control.submit_burst_per_user);

  v.section("dashboard");
  v.field("listen", c.dashboard.listen);
  v.field("token_file", c.dashboard.token_file);

  v.section("limits");
  v.field("priority_ceiling", c.limits.priority_ceiling);
  v.field("max_nodes_per_user", c.limits.max_nodes_per_user);
  v.field("max_running_jobs_per_user", c.limits.max_running_jobs_per_user);
  v.field("max_nodes_per_group", c.limits.max_nodes_per_group);
  v.field("max_running_jobs_per_group", c.limits.max_running_jobs_per_group);
  v.field("users", c.limits.users);
  v.field("groups", c.limits.groups);

  v.section("logging");
  v.field("level", c.logging.level);
  v.field("format", c.logging.format);
  v.field("file", c.logging.file);
}

}  // namespace elastic::config
