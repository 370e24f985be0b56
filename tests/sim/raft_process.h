// Raft on the simulator: the real elastic::consensus::Raft core as a SimProcess, and
// RaftCluster, a scenario harness that drives clients and checks Raft's safety properties after
// every simulator event.
//
// Durable state lives in the SimProcess storage (kept across crash and restart), laid out by
// tests/sim/raft_storage.h: "hard" holds (term, vote), "snapshot" the latest snapshot,
// "log/<index, zero-padded>" one entry each after it. RaftProcess carries out Effects in the
// contract's order -- persist, then send, then restore, then apply -- so a crash can never lose a
// vote or an acknowledged entry. The state machine is the sequence of applied entries itself
// (applied()); its snapshot bytes encode that sequence, so a node restored from a snapshot
// (InstallSnapshot, or its own after a restart) holds the same sequence the checkers compare. Every
// node compacts once it has applied `compact_every` entries past its snapshot, so InstallSnapshot
// and restarts from a snapshot happen all the time. A crash happens between simulator events, i.e.
// between whole Effects; crashes in the middle of a persist step (torn writes) are covered by
// RaftLog's unit tests, not here.
//
// Checks (registered as simulator invariants, so the first violation stops the run):
//  - election safety: at most one leader per term, ever (a term -> leader record);
//  - log matching: any two up nodes whose logs hold an entry of the same term at the same index
//    hold identical prefixes up to it;
//  - leader completeness: every entry seen committed (by any node's commit index, while that
//    node was in term T) is in the log of every leader of a term above T;
//  - state machine safety: no two nodes apply different entries at one index, and each node
//    applies indices 1, 2, 3, ... in order within a process lifetime (a restored snapshot
//    counts as applying its whole sequence, checked entry by entry the same way);
//  - the client model (acknowledged_problem()): a proposal is acknowledged when the leader that
//    accepted it applies it at its (index, term); at the end every acknowledged payload is
//    applied exactly once by every up node of the final config, and no payload is applied
//    twice anywhere;
//  - linearizable reads (read_at_leaders()): a read asked of any node that believes it leads (a
//    deposed one that does not know it yet included) records, when it begins, the highest
//    index any node had seen committed -- everything a client could have been told is written.
//    A read released (reads_ready) must have an index at or above it, and the releasing
//    node's state machine must hold that index then: the answer it would give includes every
//    write acknowledged before the read began. Each read resolves at most once per process
//    lifetime.
// Entries a node compacted are checked through its state machine (applied()), which holds them.
//
// Node ids: sim node k is Raft node k + 1 (Raft reserves 0), at address "raft-<k>". Nodes
// 0 .. voters-1 are the bootstrap voters; the others (up to `nodes`) start outside the config
// and join through voter changes (change_voters).
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

// The state machine's snapshot bytes: the applied entries, in order from index 1.
std::string encode_applied(const std::vector<consensus::Entry>& applied);
std::vector<consensus::Entry> decode_applied(const std::string& bytes);

class RaftProcess : public SimProcess {
 public:
  using ApplySink = std::function<void(NodeId node, const consensus::Entry& entry)>;
  // Called after the state machine was reset from a snapshot (applied() holds its sequence).
  using RestoreSink =
      std::function<void(NodeId node, const std::vector<consensus::Entry>& applied)>;
  // A read released (released, at index) or failed, after the effects' apply step.
  using ReadSink =
      std::function<void(NodeId node, consensus::ReadId id, bool released, consensus::Index index)>;
  RaftProcess(const NodeInfo& info, std::vector<consensus::NodeId> voters,
              const consensus::RaftConfig& config, std::size_t compact_every, ApplySink sink,
              RestoreSink restore_sink, ReadSink read_sink = nullptr);

  void start(SimContext& ctx) override;
  void on_packet(SimContext& ctx, const Packet& packet) override;
  void on_timer(SimContext& ctx) override;
  TimePoint next_deadline() const override { return raft_->next_deadline(); }

  // A client request handled outside any simulator event (the harness's client).
  consensus::ProposeOutcome propose(SimContext& ctx, std::string data);
  consensus::VoterChangeOutcome change_voters(SimContext& ctx, consensus::VoterChange change);
  consensus::ReadOutcome read(SimContext& ctx);

  const consensus::Raft& raft() const { return *raft_; }
  // Bumped on every change of the log, so checkers can skip unchanged pairs.
  std::uint64_t log_version() const { return log_version_; }
  // Bumped when entries are removed (truncation) or the process starts: an unchanged value
  // means the log only grew.
  std::uint64_t prefix_version() const { return prefix_version_; }
  const std::vector<consensus::Entry>& applied() const { return applied_; }
  // The entry at `index` (1 .. raft().last_index()): from the log, or from the state machine
  // for a compacted index.
  const consensus::Entry& entry_at(consensus::Index index) const;
  // InstallSnapshots this process lifetime reset its state machine from.
  std::size_t installed_snapshots() const { return installed_snapshots_; }

  static std::string address_for(NodeId id) { return "raft-" + std::to_string(id); }

 private:
  void carry_out(SimContext& ctx);
  void persist(SimContext& ctx, const consensus::Persist& persist);

  NodeInfo info_;
  std::vector<consensus::NodeId> voters_;
  consensus::RaftConfig config_;
  std::size_t compact_every_;
  ApplySink sink_;
  RestoreSink restore_sink_;
  ReadSink read_sink_;
  std::size_t installed_snapshots_ = 0;
  std::optional<consensus::Raft> raft_;
  consensus::Effects effects_;
  std::uint64_t log_version_ = 0;
  std::uint64_t prefix_version_ = 0;
  std::vector<consensus::Entry> applied_;  // the state machine: entries 1 .. last applied
};

struct RaftClusterOptions {
  std::size_t voters = 3;          // the bootstrap voters
  std::size_t nodes = 0;           // all nodes, voters or not (0: just the voters)
  std::size_t compact_every = 20;  // 0: never compact
  consensus::RaftConfig config{};
  LinkModel link{};
};

class RaftCluster {
 public:
  RaftCluster(std::uint64_t seed, RaftClusterOptions options);

  Simulator& sim() { return sim_; }
  // All nodes, voters or not.
  std::size_t size() const { return std::max(options_.nodes, options_.voters); }
  // nullptr while the node is down.
  RaftProcess* process(NodeId id);
  void crash(NodeId id) { sim_.crash(id); }
  void restart(NodeId id) { sim_.restart(id); }

  // The up node that is leader in the highest term, if any.
  std::optional<NodeId> leader();
  // One client request with a fresh payload to the current leader; true if accepted.
  bool propose();
  // A voter change at the current leader (refused without one). Raft node ids (sim id + 1).
  consensus::VoterChangeOutcome change_voters(consensus::VoterChange change);
  // The config of the current leader (Raft node ids), or empty without one.
  std::vector<consensus::NodeId> leader_config();
  // Sim ids of the up nodes in the current leader's config (every up node without a leader).
  std::vector<NodeId> up_members();

  std::size_t proposals() const { return proposed_.size(); }
  std::size_t acknowledged() const { return acknowledged_.size(); }
  std::uint64_t max_term() const {
    return leader_of_term_.empty() ? 0 : leader_of_term_.rbegin()->first;
  }
  // Every up node has applied every acknowledged payload (for run_until_condition).
  bool all_acknowledged_applied();
  // The client-model check (see the header comment); nullopt if it holds.
  std::optional<std::string> acknowledged_problem();

  // Starts one read at every up node in the leader role; returns how many accepted it.
  std::size_t read_at_leaders();
  std::size_t reads_started() const { return reads_started_; }
  std::size_t reads_released() const { return reads_released_; }
  std::size_t reads_failed() const { return reads_failed_; }
  // Reads accepted by a leader that a leader of a higher term had already superseded (it did
  // not know yet): the evidence that a scenario asked stale leaders at all.
  std::size_t reads_at_deposed_leaders() const { return reads_at_deposed_; }
  // Reads still waiting at a node that is up in the process lifetime that took them.
  std::size_t reads_waiting();

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
  void on_restore(NodeId node, const std::vector<consensus::Entry>& applied);
  void on_read(NodeId node, consensus::ReadId id, bool released, consensus::Index index);
  void record_applied(NodeId node, const consensus::Entry& entry);
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
  struct Read {
    consensus::Index floor = 0;  // the highest index seen committed when it began
  };
  // (node, process generation, read id) -> the read.
  std::map<std::tuple<NodeId, std::uint64_t, consensus::ReadId>, Read> reads_;
  std::map<std::pair<NodeId, std::uint64_t>, consensus::ReadId> read_ids_;  // accepted so far
  std::optional<std::string> read_violation_;
  std::size_t reads_started_ = 0;
  std::size_t reads_released_ = 0;
  std::size_t reads_failed_ = 0;
  std::size_t reads_at_deposed_ = 0;
  std::uint64_t next_payload_ = 0;
};

}  // namespace elastic::sim
