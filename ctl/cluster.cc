#include "ctl/cluster.h"

#include "ctl/common.h"

namespace elastic::ctl {
namespace {

int nodes_command(const std::string& socket, bool as_json) {
  json reply;
  if (int code = ask_or_report(socket, {{"verb", "nodes"}}, kLocalTimeout, reply)) return code;
  if (as_json) {
    std::cout << dump(reply) << "\n";
    return 0;
  }
  const std::string self = str(member(reply, "self"), "name");
  std::vector<std::vector<std::string>> rows = {
      {"NAME", "STATE", "SLOTS", "DRAINED", "INCARNATION", "GENERATION", "ADDRESS", "LAST-HEARD"}};
  const json& members = member(reply, "members");
  if (members.is_array()) {
    for (const json& m : members) {
      const std::string name = str(m, "name");
      const bool is_self = name == self;
      const json& drained = member(m, "drained");
      rows.push_back({name + (is_self ? " (self)" : ""), cell(m, "state"), cell(m, "slots"),
                      drained.is_boolean() ? (drained.get<bool>() ? "yes" : "no") : "-",
                      cell(m, "incarnation"), cell(m, "generation"), cell(m, "address"),
                      is_self ? "-" : ago(real(m, "last_heard_ms_ago", -1))});
    }
  }
  print_table(rows);
  return 0;
}

int topology_command(const std::string& socket, bool as_json) {
  json reply;
  if (int code = ask_or_report(socket, {{"verb", "topology"}}, kLocalTimeout, reply)) return code;
  if (as_json) {
    std::cout << dump(reply) << "\n";
    return 0;
  }
  const json& topo = member(reply, "topology");
  std::cout << "node " << str(reply, "node", "?") << ": binding plan from "
            << str(topo, "source", "?")
            << " (bind cpus: " << (flag(topo, "bind_cpus") ? "yes" : "no")
            << ", bind memory: " << (flag(topo, "bind_memory") ? "yes" : "no") << ")\n";
  std::vector<std::vector<std::string>> rows = {
      {"SLOT", "GPU", "PCI-BUS", "CPUS", "MEM-NODES", "OMP-THREADS", "LOCALITY"}};
  const json& slots = member(topo, "slots");
  if (slots.is_array()) {
    for (const json& s : slots) {
      rows.push_back({cell(s, "index"), cell(s, "gpu"), cell(s, "pci_bus_id"), cell(s, "cpus"),
                      cell(s, "mem_nodes"), cell(s, "omp_threads"), cell(s, "locality")});
    }
  }
  print_table(rows);
  const json& gpus = member(topo, "gpus");
  const auto plural = [](std::int64_t n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  };
  std::cout << plural(num(topo, "packages"), "package", "packages") << ", "
            << plural(num(topo, "numa_nodes"), "NUMA node", "NUMA nodes") << ", "
            << plural(num(topo, "cores"), "core", "cores") << ", "
            << plural(num(topo, "pus"), "PU", "PUs") << ", "
            << plural(gpus.is_array() ? static_cast<std::int64_t>(gpus.size()) : 0, "GPU", "GPUs")
            << "\n";
  if (!str(topo, "shared_cpus").empty()) {
    std::cout << "shared cpus (daemon, unbound work): " << str(topo, "shared_cpus") << "\n";
  }
  return 0;
}

}  // namespace

void ClusterVerbs::add_nodes(CLI::App& app) {
  nodes_ = app.add_subcommand(
      "nodes",
      "Show every member the local daemon knows: state, slots, drained, incarnation, "
      "generation, address, last heard");
  nodes_->add_flag("--topology", topology_,
                   "Show this host's binding plan instead: slot, GPU, PCI bus, CPUs, memory "
                   "nodes, OMP threads");
  add_json_flag(nodes_, as_json_);
}

void ClusterVerbs::add_drain(CLI::App& app) {
  drain_ = app.add_subcommand(
      "drain", "Place no new rounds on a node (its running jobs keep running; admins only)");
  drain_->add_option("node", node_, "The daemon's node name")->required();
  drain_->add_option("--reason", drain_reason_, "Why (shown in nodes and events)");
  add_json_flag(drain_, as_json_);
  undrain_ = app.add_subcommand("undrain", "Let a drained node take rounds again");
  undrain_->add_option("node", node_, "The daemon's node name")->required();
  add_json_flag(undrain_, as_json_);
}

void ClusterVerbs::add_voters(CLI::App& app) {
  voters_ = app.add_subcommand(
      "voters", "Show the Raft voters, or change them one at a time: voters add|remove NODE");
  voters_->add_option("action", voter_action_, "add or remove")
      ->check(CLI::IsMember({"add", "remove"}));
  voters_->add_option("node", voter_node_, "The daemon's node name");
  add_json_flag(voters_, as_json_);
}

void ClusterVerbs::add_reload(CLI::App& app) {
  reload_ = app.add_subcommand(
      "reload",
      "Make the local daemon re-read its config file now and print the outcome; exits 78 when "
      "it refuses the file (it keeps running with the previous one). Root and "
      "control.admin_group only; `systemctl reload elasticd` runs this");
  add_json_flag(reload_, as_json_);
}

bool ClusterVerbs::parsed() const {
  return nodes_->parsed() || drain_->parsed() || undrain_->parsed() || voters_->parsed() ||
         reload_->parsed();
}

int ClusterVerbs::run(const std::string& socket) const {
  if (nodes_->parsed()) {
    return topology_ ? topology_command(socket, as_json_) : nodes_command(socket, as_json_);
  }
  if (voters_->parsed()) return run_voters(socket);
  if (reload_->parsed()) return run_reload(socket);
  return run_drain(socket);
}

int ClusterVerbs::run_drain(const std::string& socket) const {
  const bool drain = drain_->parsed();
  json request{{"verb", drain ? "drain" : "undrain"}, {"node", node_}};
  if (drain && !drain_reason_.empty()) request["reason"] = drain_reason_;
  json reply;
  if (int code = ask_or_report(socket, request, kLeaderTimeout, reply)) return code;
  if (as_json_) {
    std::cout << dump(reply) << "\n";
  } else {
    std::cout << (drain ? "drained " : "undrained ") << str(reply, "node", node_) << "\n";
  }
  return 0;
}

int ClusterVerbs::run_voters(const std::string& socket) const {
  if (!voter_action_.empty() && voter_node_.empty()) {
    std::cerr << "elasticctl: voters " << voter_action_ << " needs a NODE name\n";
    return cfg::kExitUsage;
  }
  json request{{"verb", "voters"}};
  if (!voter_action_.empty()) {
    request["action"] = voter_action_;
    request["node"] = voter_node_;
  }
  json reply;
  if (int code = ask_or_report(socket, request, kLeaderTimeout, reply)) return code;
  if (as_json_) {
    std::cout << dump(reply) << "\n";
    return 0;
  }
  std::string voters;
  const json& list = member(reply, "voters");
  if (list.is_array()) {
    for (const json& v : list) {
      if (v.is_string()) voters += (voters.empty() ? "" : " ") + v.get<std::string>();
    }
  }
  std::cout << "voters: " << voters << "\n";
  return 0;
}

int ClusterVerbs::run_reload(const std::string& socket) const {
  json reply;
  if (int code = ask_or_report(socket, {{"verb", "reload"}}, kLocalTimeout, reply)) return code;
  if (as_json_) {
    std::cout << dump(reply) << "\n";
  } else {
    std::cout << "reloaded " << str(reply, "source") << ": " << str(reply, "message") << "\n";
  }
  return 0;
}

}  // namespace elastic::ctl
