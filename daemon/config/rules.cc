#include "daemon/config/rules.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <optional>
#include <set>
#include <string_view>
#include <type_traits>

#include "daemon/core/duration.h"

namespace elastic::config {

std::string quote(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (byte < 0x20 || byte == 0x7f) {
          constexpr char kHex[] = "0123456789abcdef";
          out += "\\u00";
          out += kHex[byte >> 4];
          out += kHex[byte & 0xf];
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

namespace {

struct HostPort {
  std::string host;
  int port = 0;
};

// "host:port" or "[v6addr]:port"; port 0..65535. nullopt when malformed.
std::optional<HostPort> parse_host_port(std::string_view text) {
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return std::nullopt;
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) return std::nullopt;  // unbracketed IPv6
  }
  if (host.empty() || port.empty() || port.size() > 5) return std::nullopt;
  for (char c : host) {
    if (c == '/' || c == ' ' || static_cast<unsigned char>(c) < 0x20) return std::nullopt;
  }
  int value = 0;
  for (char c : port) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  if (value > 65535) return std::nullopt;
  return HostPort{std::string(host), value};
}

std::optional<HostPort> parse_tcp_endpoint(std::string_view text) {
  constexpr std::string_view kScheme = "tcp://";
  if (text.substr(0, kScheme.size()) != kScheme) return std::nullopt;
  return parse_host_port(text.substr(kScheme.size()));
}

// A literal loopback address (127.0.0.0/8 or ::1). Names ("localhost", "lo") are not accepted:
// what they resolve to is not this file's to check.
bool is_loopback_host(const std::string& host) {
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return ::inet_pton(AF_INET6, host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

// Node and cluster names: letters, digits, '.', '_' and '-' ("" is allowed: it means derived).
bool is_node_name(std::string_view value) {
  return value.size() <= 253 && std::all_of(value.begin(), value.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
         });
}

class Checker {
 public:
  std::vector<Violation> violations;

  void require(bool ok, std::initializer_list<std::string_view> keys, std::string reason) {
    if (!ok)
      violations.push_back(Violation{std::vector<std::string_view>(keys), std::move(reason)});
  }
  void positive(std::string_view key, Duration value) {
    require(value > Duration::zero(), {key}, "must be greater than 0s");
  }
  void at_least(std::string_view key, std::int64_t value, std::int64_t minimum) {
    require(value >= minimum, {key},
            "must be at least " + std::to_string(minimum) + " (got " + std::to_string(value) + ")");
  }
  void absolute_path(std::string_view key, const std::string& value, bool may_be_empty) {
    if (may_be_empty && value.empty()) return;
    require(!value.empty() && value.front() == '/', {key},
            "must be an absolute path" + std::string(may_be_empty ? " or \"\"" : "") + " (got " +
                quote(value) + ")");
  }
  void name(std::string_view key, const std::string& value) {
    require(is_node_name(value), {key},
            quote(value) + " may contain only letters, digits, '.', '_' and '-' (at most 253)");
  }
  void port(std::string_view key, int value) {
    require(value >= 1 && value <= 65535, {key},
            std::to_string(value) + " must be a port number from 1 to 65535");
  }
  template <typename T>
  void unique(std::string_view key, const std::vector<T>& values, const std::string& what) {
    std::set<T> seen;
    for (const T& value : values) {
      if (!seen.insert(value).second) {
        if constexpr (std::is_same_v<T, std::string>) {
          require(false, {key}, quote(value) + " is listed twice");
        } else {
          require(false, {key}, what + " " + std::to_string(value) + " is listed twice");
        }
      }
    }
  }
};

std::string dur(Duration value) { return format_duration(value); }

}  // namespace

std::vector<Violation> check_rules(const DaemonConfig& c) {
  Checker k;

  // node
  k.name("node.name", c.node.name);
  k.require(!c.node.cluster_id.empty(), {"node.cluster_id"},
            "must not be empty (it keeps clusters that share a network apart)");
  k.name("node.cluster_id", c.node.cluster_id);
  k.absolute_path("node.state_dir", c.node.state_dir, false);
  for (int index : c.node.gpus.indices) {
    k.require(index >= 0, {"node.gpus"}, "GPU index " + std::to_string(index) + " is negative");
  }
  k.unique("node.gpus", c.node.gpus.indices, "GPU");
  k.at_least("node.cpu_slots", c.node.cpu_slots, 0);

  // transport
  const auto bind = parse_tcp_endpoint(c.transport.bind);
  k.require(bind.has_value(), {"transport.bind"},
            quote(c.transport.bind) + " must look like tcp://HOST:PORT (e.g. tcp://0.0.0.0:7946)");
  if (!c.transport.advertise.empty()) {
    const auto advertise = parse_tcp_endpoint(c.transport.advertise);
    const bool routable = advertise && advertise->port != 0 && advertise->host != "*" &&
                          advertise->host != "0.0.0.0" && advertise->host != "::";
    k.require(routable, {"transport.advertise"},
              quote(c.transport.advertise) +
                  " must be \"\" or tcp://HOST:PORT with a reachable host and a port from 1 "
                  "to 65535");
  }
  k.at_least("transport.send_hwm", c.transport.send_hwm, 1);
  k.at_least("transport.max_message_bytes", c.transport.max_message_bytes, 65536);
  k.positive("transport.tcp_max_retransmit_timeout", c.transport.tcp_max_retransmit_timeout);
  k.positive("transport.heartbeat_interval", c.transport.heartbeat_interval);
  k.positive("transport.heartbeat_timeout", c.transport.heartbeat_timeout);
  k.require(c.transport.heartbeat_timeout > c.transport.heartbeat_interval,
            {"transport.heartbeat_timeout", "transport.heartbeat_interval"},
            dur(c.transport.heartbeat_timeout) +
                " must be longer than transport.heartbeat_interval (" +
                dur(c.transport.heartbeat_interval) + ")");
  k.positive("transport.idle_peer_close", c.transport.idle_peer_close);
  k.at_least("transport.max_connections_per_address", c.transport.max_connections_per_address, 1);
  k.absolute_path("transport.secret_key_file", c.transport.secret_key_file, true);
  k.absolute_path("transport.public_keys_dir", c.transport.public_keys_dir, true);
  if (c.transport.curve) {
    k.require(!c.transport.secret_key_file.empty(),
              {"transport.secret_key_file", "transport.curve"},
              "must be set when transport.curve = true");
    k.require(!c.transport.public_keys_dir.empty(),
              {"transport.public_keys_dir", "transport.curve"},
              "must be set when transport.curve = true");
  } else {
    // Without CURVE nothing tells a daemon from any process that reaches the port, and a
    // daemon's messages steer the cluster; loopback keeps that to the users of this host.
    k.require(!bind || is_loopback_host(bind->host), {"transport.bind", "transport.curve"},
              quote(c.transport.bind) +
                  " must be a loopback address (tcp://127.0.0.1:PORT or tcp://[::1]:PORT) "
                  "when transport.curve = false: without CURVE anyone who reaches the port can "
                  "forge daemon messages; keep transport.curve = true (the default) with keys");
  }

  // membership: each seed is [NAME@]HOST:PORT. The name is the seed's node name, which CURVE
  // needs to pick the seed's public key (a bare address cannot be authenticated).
  for (const auto& seed : c.membership.seeds) {
    const auto at = seed.find('@');
    if (at == std::string::npos) {
      const auto parsed = parse_host_port(seed);
      k.require(parsed && parsed->port != 0, {"membership.seeds"},
                quote(seed) +
                    " must look like HOST:PORT with a port from 1 to 65535 (e.g. "
                    "\"node01:7946\")");
      k.require(!(parsed && parsed->port != 0) || !c.transport.curve,
                {"membership.seeds", "transport.curve"},
                quote(seed) +
                    " needs a node name (\"name@host:port\") when transport.curve = true, "
                    "because CURVE needs the seed's public key");
      continue;
    }
    const std::string name = seed.substr(0, at);
    const std::string address = seed.substr(at + 1);
    if (name.empty()) {
      k.require(false, {"membership.seeds"},
                quote(seed) + " has an empty node name before '@' (write \"name@host:port\")");
    } else {
      k.require(is_node_name(name), {"membership.seeds"},
                quote(seed) + ": the node name " + quote(name) +
                    " may contain only letters, digits, '.', '_' and '-' (at most 253)");
    }
    const auto parsed = parse_host_port(address);
    k.require(parsed && parsed->port != 0 && address.find('@') == std::string::npos,
              {"membership.seeds"},
              quote(seed) + ": " + quote(address) +
                  " after the node name must look like HOST:PORT with a port from 1 to 65535 "
                  "(e.g. \"node01@10.0.0.1:7946\")");
  }
  k.unique("membership.seeds", c.membership.seeds, "seed");
  k.positive("membership.probe_interval", c.membership.probe_interval);
  k.positive("membership.probe_timeout", c.membership.probe_timeout);
  k.require(c.membership.probe_timeout * 3 <= c.membership.probe_interval,
            {"membership.probe_timeout", "membership.probe_interval"},
            dur(c.membership.probe_timeout) +
                " must be at most a third of membership.probe_interval (" +
                dur(c.membership.probe_interval) + ") so that indirect probes fit in one period");
  k.at_least("membership.indirect_probes", c.membership.indirect_probes, 1);
  k.at_least("membership.suspicion_multiplier", c.membership.suspicion_multiplier, 1);
  k.at_least("membership.suspicion_max_multiplier", c.membership.suspicion_max_multiplier, 1);
  k.at_least("membership.awareness_max_multiplier", c.membership.awareness_max_multiplier, 1);
  k.at_least("membership.retransmit_multiplier", c.membership.retransmit_multiplier, 1);
  k.positive("membership.gossip_interval", c.membership.gossip_interval);
  k.at_least("membership.gossip_fanout", c.membership.gossip_fanout, 1);
  k.positive("membership.gossip_to_dead", c.membership.gossip_to_dead);
  k.positive("membership.push_pull_interval", c.membership.push_pull_interval);
  k.positive("membership.reconnect_interval", c.membership.reconnect_interval);
  k.positive("membership.rejoin_interval", c.membership.rejoin_interval);
  k.positive("membership.tombstone_ttl", c.membership.tombstone_ttl);
  k.require(c.membership.tombstone_ttl >= c.membership.gossip_to_dead,
            {"membership.tombstone_ttl", "membership.gossip_to_dead"},
            dur(c.membership.tombstone_ttl) + " must be at least membership.gossip_to_dead (" +
                dur(c.membership.gossip_to_dead) + ")");
  k.require(c.membership.tombstone_ttl > c.membership.reconnect_interval,
            {"membership.tombstone_ttl", "membership.reconnect_interval"},
            dur(c.membership.tombstone_ttl) +
                " must be longer than membership.reconnect_interval (" +
                dur(c.membership.reconnect_interval) +
                "), or failed members are forgotten before a reconnect is tried");

  // consensus
  const std::size_t voters = c.consensus.voters.size();
  k.require(voters == 0 || voters == 1 || voters == 3 || voters == 5, {"consensus.voters"},
            "has " + std::to_string(voters) +
                " voters; use 1, 3 or 5 (an even count adds no fault tolerance), or [] for this "
                "node alone");
  for (const auto& voter : c.consensus.voters) {
    k.require(!voter.empty(), {"consensus.voters"}, "voter names must not be empty");
  }
  k.unique("consensus.voters", c.consensus.voters, "voter");
  // Every node that joins others must agree on the voters; [] on several nodes would make each
  // the leader of its own job table (split brain by configuration).
  k.require(voters != 0 || c.membership.seeds.empty(), {"consensus.voters", "membership.seeds"},
            "is [] (this node alone) but membership.seeds joins other nodes; list the cluster's "
            "1, 3 or 5 voters by node name, the same on every node");
  k.positive("consensus.election_timeout", c.consensus.election_timeout);
  k.positive("consensus.heartbeat_interval", c.consensus.heartbeat_interval);
  k.require(c.consensus.heartbeat_interval * 3 <= c.consensus.election_timeout,
            {"consensus.heartbeat_interval", "consensus.election_timeout"},
            dur(c.consensus.heartbeat_interval) +
                " must be at most a third of consensus.election_timeout (" +
                dur(c.consensus.election_timeout) + ")");
  k.at_least("consensus.snapshot_every_entries", c.consensus.snapshot_every_entries, 1);
  k.absolute_path("consensus.data_dir", c.consensus.data_dir, true);

  // rendezvous
  k.positive("rendezvous.last_call", c.rendezvous.last_call);
  k.positive("rendezvous.join_timeout", c.rendezvous.join_timeout);
  k.require(c.rendezvous.last_call < c.rendezvous.join_timeout,
            {"rendezvous.last_call", "rendezvous.join_timeout"},
            dur(c.rendezvous.last_call) + " must be shorter than rendezvous.join_timeout (" +
                dur(c.rendezvous.join_timeout) + ")");
  k.positive("rendezvous.job_keepalive_interval", c.rendezvous.job_keepalive_interval);
  k.positive("rendezvous.job_peer_timeout", c.rendezvous.job_peer_timeout);
  k.positive("rendezvous.reform_timeout", c.rendezvous.reform_timeout);
  k.require(c.rendezvous.job_keepalive_interval < c.rendezvous.job_peer_timeout,
            {"rendezvous.job_keepalive_interval", "rendezvous.job_peer_timeout"},
            dur(c.rendezvous.job_keepalive_interval) +
                " must be shorter than rendezvous.job_peer_timeout (" +
                dur(c.rendezvous.job_peer_timeout) + ")");
  k.positive("rendezvous.lease_duration", c.rendezvous.lease_duration);
  k.require(c.rendezvous.lease_duration > c.consensus.election_timeout,
            {"rendezvous.lease_duration", "consensus.election_timeout"},
            dur(c.rendezvous.lease_duration) + " must be longer than consensus.election_timeout (" +
                dur(c.consensus.election_timeout) + "), or every leader change stops every job");
  k.port("rendezvous.store_port_min", c.rendezvous.store_port_min);
  k.port("rendezvous.store_port_max", c.rendezvous.store_port_max);
  k.require(c.rendezvous.store_port_min <= c.rendezvous.store_port_max,
            {"rendezvous.store_port_min", "rendezvous.store_port_max"},
            std::to_string(c.rendezvous.store_port_min) +
                " must not exceed rendezvous.store_port_max (" +
                std::to_string(c.rendezvous.store_port_max) + ")");

  // spawner
  k.positive("spawner.stop_grace", c.spawner.stop_grace);
  k.absolute_path("spawner.log_dir", c.spawner.log_dir, true);
  k.absolute_path("spawner.log_root", c.spawner.log_root, true);
  k.at_least("spawner.log_rounds_kept", c.spawner.log_rounds_kept, 1);
  k.at_least("spawner.log_max_bytes", c.spawner.log_max_bytes, 1);
  k.at_least("spawner.log_keep", c.spawner.log_keep, 0);
  // "auto" (the daemon's own delegated cgroup) is resolved by daemon/spawner/cgroup_root.h,
  // which also checks the directory: the host's cgroup layout is not the config's to know.
  k.require(
      c.spawner.cgroup_root.empty() || c.spawner.cgroup_root == "auto" ||
          c.spawner.cgroup_root.front() == '/',
      {"spawner.cgroup_root"},
      "must be an absolute path, \"auto\" or \"\" (got " + quote(c.spawner.cgroup_root) + ")");
  k.require(c.spawner.python_dir.empty() || c.spawner.python_dir == "auto" ||
                c.spawner.python_dir.front() == '/',
            {"spawner.python_dir"},
            "must be an absolute path, \"auto\" or \"\" (got " + quote(c.spawner.python_dir) + ")");

  // checkpoint
  k.absolute_path("checkpoint.root", c.checkpoint.root, true);
  k.at_least("checkpoint.keep", c.checkpoint.keep, 1);

  // control
  k.absolute_path("control.socket", c.control.socket, false);
  // sockaddr_un.sun_path is 108 bytes including the terminating NUL.
  k.require(c.control.socket.size() <= 107, {"control.socket"},
            "is " + std::to_string(c.control.socket.size()) +
                " bytes long; a unix socket path must be at most 107");
  if (!c.control.metrics_listen.empty()) {
    const auto listen = parse_host_port(c.control.metrics_listen);
    // Port 0 binds a free port (tests); the daemon logs and reports the one it got.
    k.require(
        listen.has_value(), {"control.metrics_listen"},
        quote(c.control.metrics_listen) +
            " must be \"\" (off) or HOST:PORT with a port from 0 to 65535 (0 = any free port)");
  }
  // Remote control authenticates clients with CURVE; without CURVE between the daemons anyone
  // reaching the transport port could forge the forwarded requests (which carry uid and admin),
  // so remote control is only offered on a CURVE cluster.
  k.absolute_path("control.client_keys_dir", c.control.client_keys_dir, true);
  if (!c.control.remote_listen.empty()) {
    k.require(parse_tcp_endpoint(c.control.remote_listen).has_value(), {"control.remote_listen"},
              quote(c.control.remote_listen) +
                  " must be \"\" (off) or tcp://HOST:PORT (e.g. tcp://0.0.0.0:7947)");
    k.require(c.transport.curve, {"control.remote_listen", "transport.curve"},
              "needs transport.curve = true (remote clients are authenticated with CURVE, and "
              "without it between the daemons forwarded requests could be forged)");
    k.require(!c.control.client_keys_dir.empty(),
              {"control.client_keys_dir", "control.remote_listen"},
              "must be set when control.remote_listen is set (it lists the allowed client keys)");
  }

  // dashboard: loopback unless a token guards it (the pages show every job and node).
  k.absolute_path("dashboard.token_file", c.dashboard.token_file, true);
  if (!c.dashboard.listen.empty()) {
    const auto listen = parse_host_port(c.dashboard.listen);
    k.require(listen.has_value(), {"dashboard.listen"},
              quote(c.dashboard.listen) +
                  " must be \"\" (off) or HOST:PORT with a port from 0 to 65535 (0 = any free "
                  "port)");
    if (listen.has_value()) {
      k.require(is_loopback_host(listen->host) || !c.dashboard.token_file.empty(),
                {"dashboard.token_file", "dashboard.listen"},
                "must be set when dashboard.listen (" + quote(c.dashboard.listen) +
                    ") is not a loopback address: anyone who reaches it would see every job "
                    "and node (or keep 127.0.0.1 and use an SSH tunnel)");
    }
  }

  // Above the job table's own cap of 10,000 active jobs a per-user cap would mean nothing.
  k.at_least("control.max_active_jobs_per_user", c.control.max_active_jobs_per_user, 0);
  k.require(c.control.max_active_jobs_per_user <= 10000, {"control.max_active_jobs_per_user"},
            "is " + std::to_string(c.control.max_active_jobs_per_user) +
                "; it must be 0 (no limit) to 10000 (the cluster's cap on active jobs)");
  k.at_least("control.submits_per_minute_per_user", c.control.submits_per_minute_per_user, 0);
  k.at_least("control.submit_burst_per_user", c.control.submit_burst_per_user, 0);
  k.require(c.control.submits_per_minute_per_user == 0 || c.control.submit_burst_per_user >= 1,
            {"control.submit_burst_per_user", "control.submits_per_minute_per_user"},
            "must be at least 1 when control.submits_per_minute_per_user is set (a burst of 0 "
            "would refuse every submit)");

  // limits (the entries of users and groups are checked as they are read)
  k.require(c.limits.priority_ceiling >= -1'000'000 && c.limits.priority_ceiling <= 1'000'000,
            {"limits.priority_ceiling"},
            "is " + std::to_string(c.limits.priority_ceiling) +
                "; it must be a job priority, -1000000 to 1000000");
  k.at_least("limits.max_nodes_per_user", c.limits.max_nodes_per_user, 0);
  k.at_least("limits.max_running_jobs_per_user", c.limits.max_running_jobs_per_user, 0);
  k.at_least("limits.max_nodes_per_group", c.limits.max_nodes_per_group, 0);
  k.at_least("limits.max_running_jobs_per_group", c.limits.max_running_jobs_per_group, 0);

  // logging
  k.absolute_path("logging.file", c.logging.file, true);
  return std::move(k.violations);
}

std::vector<std::string> validate(const DaemonConfig& config) {
  std::vector<std::string> lines;
  for (const Violation& violation : check_rules(config)) {
    lines.push_back(std::string(violation.keys.front()) + ": " + violation.reason);
  }
  return lines;
}

}  // namespace elastic::config
