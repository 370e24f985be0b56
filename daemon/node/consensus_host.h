// ConsensusHost: the daemon's side of Raft. It owns the durable log (RaftLog), the pure Raft core
// and the replicated state machine, and carries out the core's Effects in the order raft.h
// demands: persist (fsync'ed) -> sends -> apply -> leader change.
//
// Who runs Raft: every daemon. consensus.voters (the same list on every node; [] means a
// one-node cluster of this node) is the INITIAL voter set, bootstrapped once; later changes are
// one-at-a-time config entries in the Raft log (change_voter(), `elasticctl voters add|remove`),
// so the current set lives in the log, not the config. A daemon outside the current set runs a
// passive Raft: it never campaigns and receives nothing until a leader adds it, then it catches
// up (by snapshot if the log was compacted). Non-voters learn the leader from redirects (see
// node.cc's forwarding).
//
// Node ids: Raft numbers voters; we derive a voter's id from its name (64-bit FNV-1a, never 0),
// so every daemon agrees without coordination and a voter keeps its id across restarts and
// address changes. open() refuses a voter list whose ids collide; names of voters added later
// are learned from membership (learn_name()).
//
// First start and restarts (the "bootstrap twice" trap of research/libraft.md P8): the Raft
// directory (consensus.data_dir, default <state_dir>/raft) is bootstrapped with the configured
// voters only when it holds no Raft state AND this is the node's first generation (a state
// directory that never ran a daemon). A node that ran before and finds no Raft state refuses to
// start: a voter that forgot its vote can elect a second leader in the same term. A directory
// bootstrapped with another voter list also refuses (config error): the configured list must
// stay the initial one. Both are kExitConfig (78) with a sentence naming the directory and
// what to do.
//
// Damaged Raft files (RaftLog::open refuses: a corrupt record, a log cut short of its mark)
// stop the node with kExitIoError (74) and a sentence naming the file, byte offset and record,
// plus how to rebuild. Rebuilding a voter from its peers: the operator creates an empty
// `<data_dir>/rebuild` (kRebuildFile) and starts the node. open() moves the Raft files into
// `<data_dir>/before-rebuild-<unix time>/`, bootstraps afresh (whatever the generation), writes
// a note into the marker (so a restart while catching up keeps the new state), and the voter
// catches up from the leader by log or snapshot like a new one. Because it forgot its votes,
// while the marker exists it answers no vote request (pre-vote or vote) until a leader has
// reached it, and none for a term up to that leader's; the marker is removed once a later term
// begins. The cluster's only bootstrap voter cannot be rebuilt (no peers): kExitConfig.
//
// Proposals: propose() hands bytes to Raft on the leader and calls the completion exactly once:
// with the state machine's result when the entry commits and is applied here, or with an Error
// when this node is not the leader, loses leadership first, or the entry is overwritten. An
// Error does not mean "not applied" (a lost leader's entry may still commit): clients retry
// with the same (client id, sequence) and the state machine deduplicates.
//
// Reads: read() makes a read of the state machine linearizable (Raft's read index, raft.h):
// done(ok) once this leader confirmed, with a heartbeat round answered by a majority, that it
// still led after the call, and the state machine here has applied up to the commit index it
// had then -- so the state machine reflects every write acknowledged to anyone before the call.
// done(Error) when this node is not the leader or stops leading first (the caller retries at
// the leader). Without a majority the read waits: until CheckQuorum deposes this leader (within
// an election timeout), when it fails. done runs exactly once, never before read() returns when
// there are other voters (a single voter answers at once).
//
// Snapshots: once consensus.snapshot_every_entries entries were applied since the last
// snapshot, the state machine's bytes become the new snapshot and the log before it is dropped
// (RaftLog rewrites its file). A follower too far behind gets the leader's snapshot
// (InstallSnapshot) and the state machine is restored from it; so is a restart from disk.
//
// Errors: a persist failure (EIO, ENOSPC) means this voter can no longer promise durability:
// failed() turns true, the node must exit (74) and the cluster carries on without it.
// Thread safety: none; the node's loop thread owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/config/config.h"
#include "daemon/consensus/raft.h"
#include "daemon/consensus/raft_log.h"
#include "daemon/core/clock.h"
#include "daemon/core/result.h"
#include "daemon/core/time.h"
#include "daemon/wire/messages.h"

namespace elastic::node {

inline constexpr int kExitIoError = 74;  // EX_IOERR: the Raft log cannot be written

// What the replicated state machine must offer. apply() must be deterministic: the same entries
// in the same order give the same state and results on every voter.
class StateMachine {
 public:
  virtual ~StateMachine() = default;
  // Applies one committed command; returns the result handed to the proposer (opaque bytes).
  virtual std::string apply(consensus::Index index, std::string_view command) = 0;
  // The whole state as bytes (Raft compacts its log into it) and back. restore() replaces the
  // state with one that reflects every entry up to `index`; bad bytes are an Error.
  virtual std::string snapshot() const = 0;
  virtual Status restore(consensus::Index index, std::string_view bytes) = 0;
};

consensus::NodeId voter_id(std::string_view name);

// The directory Raft keeps its state in (consensus.data_dir, or <state_dir>/raft).
std::string raft_dir(const config::DaemonConfig& config);

// The voter names a config runs with: consensus.voters, or just `self` when it is empty.
std::vector<std::string> effective_voters(const config::DaemonConfig& config,
                                          const std::string& self);

struct OpenFailure {
  int exit_code = 1;
  std::string message;
};

struct RaftStatus {
  bool voter = false;
  std::string role;    // "follower", "pre-candidate", "candidate", "leader"
  std::string leader;  // "" = unknown
  std::uint64_t term = 0;
  std::uint64_t commit_index = 0;
  std::uint64_t last_index = 0;
  std::uint64_t applied_index = 0;
  std::vector<std::string> voters;
};

// For a node outside consensus.voters: an OpenFailure when its Raft directory holds state.
std::optional<OpenFailure> check_non_voter(const config::DaemonConfig& config,
                                           const std::string& self);

class ConsensusHost {
 public:
  // In consensus.data_dir: asks (empty) for a rebuild from the peers, then marks one under way.
  static constexpr const char* kRebuildFile = "rebuild";
  using Completion = std::function<void(Result<std::string>)>;
  using ReadDone = std::function<void(Status)>;
  // A message to a voter, by name; the node resolves its address.
  struct Outgoing {
    std::string to;
    wire::Envelope envelope;
  };

  // `generation` is this node's restart counter (1 = the state directory is new).
  static std::unique_ptr<ConsensusHost> open(const config::DaemonConfig& config,
                                             const std::string& self, std::uint64_t generation,
                                             StateMachine& machine, Clock& clock,
                                             OpenFailure& failure);

  // A voter whose durable state is `store` (no files of its own: the simulator's storage),
  // starting from `recovered` with `voters` as the bootstrap set; open() ends here too.
  static std::unique_ptr<ConsensusHost> start(
      const std::string& self, const std::vector<std::string>& voters,
      const consensus::RaftConfig& raft, std::uint64_t snapshot_every,
      consensus::Recovered recovered, std::unique_ptr<consensus::RaftStore> store,
      StateMachine& machine, std::uint64_t seed, TimePoint now, OpenFailure& failure);

  void tick(TimePoint now);
  // This daemon's failure detection says the node `name` is gone (job tier, membership, a
  // dropped connection). If Raft here follows that node, it forgets it and campaigns soon
  // (Raft::leader_unreachable: safe on a false suspicion); otherwise nothing happens.
  void leader_unreachable(TimePoint now, const std::string& name);
  // A Raft envelope from the transport; undecodable or foreign ones are counted and dropped.
  void on_envelope(TimePoint now, const wire::Envelope& envelope);
  void propose(TimePoint now, std::string command, Completion done);
  // A linearizable read (see "Reads" above): done(ok) once the state machine may be read.
  void read(TimePoint now, ReadDone done);
  // On the leader: adds or removes one voter (by name); done() once the change is applied here,
  // or with the refusal / the reason it did not commit.
  void change_voter(TimePoint now, bool add, const std::string& name, Completion done);
  // A daemon name seen in membership, so a voter added later can be addressed by name.
  void learn_name(const std::string& name);
  bool is_voter() const { return raft_->is_voter(self_id_); }

  TimePoint next_deadline() const { return raft_->next_deadline(); }
  std::vector<Outgoing> take_sends() { return std::exchange(sends_, {}); }
  bool failed() const { return failed_; }
  bool is_leader() const { return raft_->role() == consensus::Role::kLeader; }
  // This node applied an entry of its current term (a leader: its no-op): every entry an earlier
  // leader left that may still commit is applied, so the state machine is all there is.
  bool applied_own_term() const { return raft_->term_at(raft_->last_applied()) == raft_->term(); }
  std::vector<std::string> voters() const;
  consensus::Term term() const { return raft_->term(); }
  // The leader's name, "" when unknown.
  std::string leader() const;
  RaftStatus status() const;
  std::uint64_t dropped() const { return dropped_; }

 private:
  ConsensusHost() = default;
  void carry_out(TimePoint now, consensus::Effects& effects);
  std::string name_of(consensus::NodeId id) const;
  // Why this node cannot take a leader's request: names the leader it believes in, if any.
  std::string not_leader(consensus::NodeId hint) const;
  // Answers the confirmed reads whose index the state machine has applied.
  void answer_applied_reads();
  // Fails every proposal and read still waiting (this voter cannot write its log).
  void fail_all_waiting();
  // While rebuilding: learns the first leader's term, and ends the rebuild after it.
  void note_rebuild_progress();

  std::string self_;
  consensus::NodeId self_id_ = consensus::kNoNode;
  std::map<consensus::NodeId, std::string> names_;  // voter id -> name
  std::unique_ptr<consensus::RaftStore> store_;     // RaftLog in elasticd
  std::unique_ptr<consensus::Raft> raft_;
  StateMachine* machine_ = nullptr;
  std::vector<Outgoing> sends_;
  // Proposals of this leader awaiting their entry: index -> (term, completion).
  std::map<consensus::Index, std::pair<consensus::Term, Completion>> pending_;
  // Reads waiting for Raft to confirm this leader, by read id; then for the state machine to
  // apply their index, by index.
  std::map<consensus::ReadId, ReadDone> unconfirmed_reads_;
  std::multimap<consensus::Index, ReadDone> confirmed_reads_;
  std::uint64_t snapshot_every_ = 10000;
  bool failed_ = false;
  std::uint64_t dropped_ = 0;
  std::string dir_;  // consensus.data_dir
  bool rebuilding_ = false;
  consensus::Term rebuild_leader_term_ = 0;  // 0: no leader has reached the rebuilt voter yet
};

}  // namespace elastic::node
