// Membership on the simulator: the real elastic::membership::Membership state machine as a
// SimProcess, and MembershipCluster, a scenario harness that knows the ground truth (which
// node is up, at which generation and address) and turns the nodes' MemberEvents into checks.
//
// Packets carry the wire structs (wire::MembershipMessage) inside a MembershipPacket; bytes are
// counted with estimate_wire_bytes(), a MessagePack size model of the envelope plus body as
// daemon/wire/codec.h lays them out (keys, strings, integers; no TCP/IP or ZMTP framing).
//
// Ground truth used by the checks: a node is named "n<id>" for life; a crash ends its current
// generation; a restart starts generation + 1, at a new address if asked. A suspicion or death
// of a (name, generation) that is up when the event is emitted is false; deaths of an ended
// generation are correct.
//
// Ownership: the cluster owns its Simulator and, through it, every process. Thread safety:
// none (one thread). Errors: misuse (unknown node) aborts through the Simulator.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/config/config.h"
#include "daemon/membership/membership.h"
#include "daemon/wire/messages.h"
#include "tests/sim/simulator.h"

namespace elastic::sim {

using wire::MemberState;

struct MembershipPacket {
  std::string from;  // sender name; generation and address travel in the Packet
  wire::MembershipMessage message;
};

// Approximate encoded size of one envelope carrying `message` (see the header comment).
std::size_t estimate_wire_bytes(const std::string& sender, const std::string& sender_address,
                                const wire::MembershipMessage& message);

// One MemberEvent as emitted by one node, with the virtual time.
struct ObservedEvent {
  TimePoint time;
  NodeId observer = 0;
  std::uint64_t observer_generation = 0;
  membership::MemberEvent event;
};

class MembershipProcess : public SimProcess {
 public:
  using Sink = std::function<void(const ObservedEvent&)>;
  MembershipProcess(const NodeInfo& info, std::string name, const config::MembershipConfig& config,
                    std::vector<std::string> seed_addresses, Sink sink);

  void start(SimContext& ctx) override;
  void on_packet(SimContext& ctx, const Packet& packet) override;
  void on_timer(SimContext& ctx) override;
  TimePoint next_deadline() const override;

  membership::Membership& membership() { return *membership_; }
  const membership::Membership& membership() const { return *membership_; }

 private:
  void apply(SimContext& ctx, membership::Effects& effects);

  NodeInfo info_;
  std::string name_;
  config::MembershipConfig config_;
  std::vector<std::string> seed_addresses_;
  Sink sink_;
  std::optional<membership::Membership> membership_;
  membership::Effects effects_;  // reused buffer
};

struct ClusterOptions {
  config::MembershipConfig config{};
  // The first `seed_count` nodes are the seeds everyone joins through (node 0 starts alone).
  std::size_t seed_count = 3;
  // Nodes start one after another, spread uniformly over this window.
  Duration start_window = std::chrono::seconds(1);
  LinkModel link{};
};

class MembershipCluster {
 public:
  MembershipCluster(std::uint64_t seed, ClusterOptions options);

  Simulator& sim() { return sim_; }
  const ClusterOptions& options() const { return options_; }

  // Adds `n` nodes (starting them over options.start_window, running the simulator meanwhile).
  void start_nodes(std::size_t n);
  // Adds one node now that joins through the seeds.
  NodeId add_node();

  std::string name(NodeId id) const { return "n" + std::to_string(id); }
  static std::string address_for(NodeId id, std::uint32_t epoch);
  // nullptr while the node is down.
  membership::Membership* member(NodeId id);
  std::vector<NodeId> up_nodes() const;
  std::size_t size() const { return sim_.node_count(); }

  void crash(NodeId id);
  void restart(NodeId id, bool new_address = false);

  // Every up node sees every up node alive at its current generation and address, and no node
  // that is down as alive at its last generation.
  bool converged();
  // The first failure of converged() as a sentence, for test output.
  std::string convergence_problem();
  // Every up node (other than the target) sees (target's last generation) dead.
  bool all_see_dead(NodeId target, std::uint64_t generation);

  // Counters from the event stream (about up nodes = false).
  struct Tally {
    std::uint64_t false_suspicions = 0;
    std::uint64_t false_deaths = 0;
    std::uint64_t true_deaths = 0;
    std::uint64_t events = 0;
  };
  const Tally& tally() const { return tally_; }
  void reset_tally() { tally_ = Tally{}; }
  // The false deaths seen, as "observer: name gen" lines (for failure messages).
  const std::vector<std::string>& false_death_log() const { return false_death_log_; }

  // Extra consumer of every event (benchmarks measure dissemination with it).
  void set_observer(MembershipProcess::Sink observer) { observer_ = std::move(observer); }

  // Node ids from names ("n<id>"); nullopt for a name this cluster did not make.
  static std::optional<NodeId> id_of(const std::string& name);

 private:
  void on_event(const ObservedEvent& e);
  MembershipProcess::Sink sink();

  ClusterOptions options_;
  Simulator sim_;
  std::vector<std::uint32_t> address_epoch_;
  Tally tally_;
  std::vector<std::string> false_death_log_;
  MembershipProcess::Sink observer_;
};

// Lifeguard's worst-case time from a crash to every member marking it dead, from the config:
// a few probe intervals until someone probes it (plus the probe itself), the maximum suspicion
// timeout (no confirmations), and a dissemination allowance of gossip rounds.
Duration lifeguard_detection_bound(const config::MembershipConfig& config, std::size_t n);

}  // namespace elastic::sim
