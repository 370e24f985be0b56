// Raft on the simulator: the real elastic::consensus::Raft core as a SimProcess, and
// RaftCluster, a scenario harness that drives clients and checks Raft's safety properties after
// every simulator event.
//
// Durable state lives in the SimProcess storage (kept across crash and restart): "hard" holds
// (term, vote), "log/<index, zero-padded>" one entry each. RaftProcess carries out Effects in the
// contract's order -- persist, then send, then apply -- so a crash can never lose a vote or an
// acknowledged entry. A crash happens between simulator events, i.e. between whole Effects;
// crashes in the middle of a persist step (torn writes) are covered by RaftLog's unit tests,
// not here.
//
// Checks (registered as simulator invariants, so the first violation stops the run):
//  - election safety: at most one leader per term, ever (a term -> leader record);
//  - log matching: any two up nodes whose logs hold an entry of the same term at the same index
//    hold identical prefixes up to it;
//  - leader completeness: every entry seen committed (by any node's commit index, while that
//    node was in term T) is in the log of every leader of a term above T;
//  - state machine safety: no two nodes apply different entries at one index, and each node
//    applies indices 1, 2, 3, ... in order within a process lifetime;
//  - the client model (acknowledged_problem()): a proposal is acknowledged when the leader that
//    accepted it applies it at its (index, term); at the end every acknowledged payload is
//    applied exactly once by every up node, and no payload is applied twice anywhere.
//
// Node ids: sim node k is Raft voter k + 1 (Raft reserves 0), at address "raft-<k>".
// Ownership: the cluster owns its Simulator and, through it, every process. Thread safety: none.
// Errors: misuse aborts through the Simulator.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "daemon/consensus/raft.h"
#include "tests/sim/simulator.h"

namespace elastic::sim {

struct RaftPacket {
  consensus::Message message;
};

// Approximate encoded size of a Raft message (headers plus entry payloads).
std::size_t estimate_raft_bytes(const consensus::Message& message);

class RaftProcess : public SimProcess {
 public:
  using ApplySink = std::function<void(NodeId node, const consensus::Entry& entry)>;
  RaftProcess(const NodeInfo& info, std::vector<consensus::NodeId> voters,
              const consensus::RaftConfig& config, ApplySink sink);

  void start(SimContext& ctx) override;
  void on_packet(SimContext& ctx, const Packet& packet) override;
  void on_timer(SimContext& ctx) override;
  TimePoint next_deadline() const override { return raft_->next_deadline(); }

  // A client request handled outside any simulator event (the harness's client).
  consensus::ProposeOutcome propose(SimContext& ctx, std::string data);

  const consensus::Raft& raft() const { return *raft_; }
  // Bumped on every change of the log, so checkers can skip unchanged pairs.
  std::uint64_t log_version() const { return log_version_; }
  // Bumped when entries are removed (truncation) or the process starts: an unchanged value
  // means the log only grew.
  std::uint64_t prefix_version() const { return prefix_version_; }
  const std::vector<consensus::Entry>& applied() const { return applied_; }

  static std::string address_for(NodeId id) { return "raft-" + std::to_string(id); }

 private:
  void carry_out(SimContext& ctx);

  NodeInfo info_;
  std::vector<consensus::NodeId> voters_;
  consensus::RaftConfig config_;
  ApplySink sink_;
  std::optional<consensus::Raft> raft_;
  consensus::Effects effects_;
  std::uint64_t log_version_ = 0;
  std::uint64_t prefix_version_ = 0;
  std::vector<consensus::Entry> applied_;  // this process lifetime
};

struct RaftClusterOptions {
  std::size_t voters = 3;
  consensus::RaftConfig config{};
  LinkModel link{};
};

class RaftCluster {
 public:
  RaftCluster(std::uint64_t seed, RaftClusterOptions options);

  Simulator& sim() { return sim_; }
  std::size_t size() const { return options_.voters; }
  // nullptr while the node is down.
  RaftProcess* process(NodeId id);
  void crash(NodeId id) { sim_.crash(id); }
  void restart(NodeId id) { sim_.restart(id); }

  // The up node that is leader in the highest term, if any.
  std::optional<NodeId> leader();
  // One client request with a fresh payload to the current leader; true if accepted.
  bool propose();

  std::size_t proposals() const { return proposed_.size(); }
  std::size_t acknowledged() const { return acknowledged_.size(); }
  std::uint64_t max_term() const {
    return leader_of_term_.empty() ? 0 : leader_of_term_.rbegin()->first;
  }
  // Every up node has applied every acknowledged payload (for run_until_condition).
  bool all_acknowledged_applied();
  // The client-model check (see the header comment); nullopt if it holds.
  std::optional<std::string> acknowledged_problem();

 private:
  struct Proposal {
    NodeId node = 0;
    std::uint64_t generation = 0;
    consensus::Index index = 0;
    consensus::Term term = 0;
  };
  struct Committed {
    consensus::Entry entry;
    consensus::Term seen_in_term = 0;
  };
  void on_apply(NodeId node, const consensus::Entry& entry);
  std::optional<std::string> check();
  std::optional<std::string> check_log_matching(const RaftProcess& a, NodeId ida,
                                                const RaftProcess& b, NodeId idb);

  RaftClusterOptions options_;
  Simulator sim_;
  std::map<consensus::Term, NodeId> leader_of_term_;
  std::vector<Committed> committed_;  // index i at [i - 1]
  std::map<consensus::Index, consensus::Entry> applied_at_;
  // Per pair of nodes: log versions last checked, prefix versions, and how far the two logs
  // are known identical while neither lost entries since.
  struct PairCheck {
    std::uint64_t log_a = 0, log_b = 0, prefix_a = 0, prefix_b = 0;
    std::size_t identical = 0;
  };
  std::map<std::pair<NodeId, NodeId>, PairCheck> matched_;
  // Checker caches: (log version, index verified against committed_) per node, and the
  // (prefix version, term, committed count) a leader was last found complete at.
  std::map<NodeId, std::pair<std::uint64_t, consensus::Index>> verified_;
  std::map<NodeId, std::tuple<std::uint64_t, consensus::Term, std::size_t>> complete_leader_;
  std::map<std::string, Proposal> proposed_;  // payload -> where it went
  std::set<std::string> acknowledged_;
  std::optional<std::string> apply_violation_;
  std::uint64_t next_payload_ = 0;
};

}  // namespace elastic::sim
