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
// Memory: every node's Membership interns names and addresses in one NameTable owned by the
// cluster, so 10,000 nodes x 10,000 records store each string once (start_nodes_bulk).
//
// Ownership: the cluster owns its Simulator and, through it, every process. Thread safety:
// none (one thread). Errors: misuse (unknown node) aborts through the Simulator.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
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
  using MemberList = std::vector<wire::MemberUpdate>;
  // `names` may be shared between processes (one thread drives them all). `bootstrap`, when
  // given, is handed to Membership::seed_members() at start instead of joining the seeds.
  MembershipProcess(const NodeInfo& info, std::string name, const config::MembershipConfig& config,
                    std::vector<std::string> seed_addresses, Sink sink,
                    std::shared_ptr<membership::NameTable> names = nullptr,
                    std::shared_ptr<const MemberList> bootstrap = nullptr);

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
  std::shared_ptr<membership::NameTable> names_;
  std::shared_ptr<const MemberList> bootstrap_;
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
  // Bulk bootstrap: adds `n` nodes at once, each starting with the full member list (all n alive
  // at generation 1, incarnation 0, their addresses) through Membership::seed_members(), so no
  // join storm runs (10,000 joins cost ~N^2 CPU). The cluster is converged at once. Only on an
  // empty cluster. A node that restarts later joins through the seeds as usual.
  void start_nodes_bulk(std::size_t n);

  std::string name(NodeId id) const { return "n" + std::to_string(id); }
  static std::string address_for(NodeId id, std::uint32_t epoch);
  // nullptr while the node is down.
  membership::Membership* member(NodeId id);
  std::vector<NodeId> up_nodes() const;
  std::size_t size() const { return sim_.node_count(); }

  void crash(NodeId id);
  void restart(NodeId id, bool new_address = false);

  // Sends, through the simulated network from `accuser` to `target`, the message an accuser
  // sends a member it suspects (an Ack carrying "target suspect at its current incarnation").
  // The target refutes by gossiping alive at incarnation + 1: a one-source update for
  // dissemination measurements. Both must be up; `accuser` need not really suspect it.
  void inject_suspicion(NodeId accuser, NodeId target);

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
  NodeId add_node_with(std::shared_ptr<const MembershipProcess::MemberList> bootstrap);

  ClusterOptions options_;
  std::shared_ptr<membership::NameTable> names_ = std::make_shared<membership::NameTable>();
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
