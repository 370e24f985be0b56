// Raft: leader election and log replication for the voter group, as a pure state machine.
//
// Like membership, it never touches a socket, a clock, a thread or the filesystem: the caller
// feeds it the time, inbound messages and client proposals, and carries out the Effects it
// returns. The daemon will drive it over the ZeroMQ/CURVE transport with RaftLog for the disk;
// tests/sim drives it with virtual time, a lossy network and a map as its "disk".
//
// What it implements (Ongaro's dissertation, with etcd's PreVote and CheckQuorum):
//  - roles follower / pre-candidate / candidate / leader; election timeout randomized in
//    [t, 2t) from the injected Rng, re-drawn at every reset;
//  - PreVote: an election first asks for pre-votes at term + 1 without bumping its own term; a
//    voter grants one only if the candidate's log is at least as up to date as its own and it
//    has not heard from a leader within the election timeout (a leader never grants). So a node
//    returning from a partition cannot disrupt a stable leader;
//  - RequestVote with the log up-to-date check; one vote per term (persisted); a real vote
//    request from a higher term is ignored while the voter is in a leader lease (CheckQuorum on);
//  - CheckQuorum: every election timeout a leader counts the voters it heard from since the
//    last check (itself included); short of a majority it steps down to follower;
//  - AppendEntries with the consistency check, truncation of a conflicting suffix (never of a
//    committed entry: that aborts) and fast backtracking (the reply carries conflict index and
//    term); heartbeats are AppendEntries from the follower's next index, so they also repair;
//  - the current-term commit rule: the leader advances its commit index by counting only for
//    an entry of its own term (earlier entries commit with it, Figure 8); a new leader appends a
//    no-op of its term at once;
//  - propose(bytes) on the leader appends and returns (index, term); elsewhere it returns the
//    known leader as a redirect hint;
//  - committed entries are handed out in index order, each once per process lifetime (the
//    apply index is volatile: after a restart the caller's state machine is rebuilt from the
//    log, since snapshots do not exist yet).
// Not yet: membership changes (the voter set is fixed at construction: 1, 3 or 5 voters),
// snapshots / InstallSnapshot, leadership transfer, a wire codec for these message structs.
//
// THE DURABILITY CONTRACT. Every call takes an Effects& that it clears first. The caller must
// carry the effects out in this order:
//   1. effects.persist: write hard_state (if set), then drop every log entry with index >=
//      truncate_from (if set; nothing to drop is fine), then append `append` in order; all of it
//      durable (fsync) before step 2 -- a vote or an acknowledgement sent before its state is
//      on disk can be forgotten by a crash and break election safety or lose a commit;
//   2. effects.sends: hand each message to the transport (any order, may be lost);
//   3. effects.apply: apply the committed entries to the state machine in order;
//   4. effects.leader_change: informational.
// A leader counts its own log as replicated, which is sound because of step 1.
//
// Thread safety: none; one owner calls everything. Errors: the core has no environment
// failures; a broken invariant (truncating a committed entry, a bad constructor argument)
// aborts loudly.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "daemon/core/rng.h"
#include "daemon/core/time.h"

namespace elastic::consensus {

using NodeId = std::uint64_t;  // a voter; 0 means "none"
using Term = std::uint64_t;
using Index = std::uint64_t;  // log indices start at 1; 0 is "before the log"

inline constexpr NodeId kNoNode = 0;

enum class EntryType : std::uint8_t { kNoop = 0, kCommand = 1 };

struct Entry {
  Term term = 0;
  Index index = 0;
  EntryType type = EntryType::kCommand;
  std::string data;  // any length, opaque
  bool operator==(const Entry&) const = default;
};

// What must survive a crash besides the log.
struct HardState {
  Term term = 0;
  NodeId vote = kNoNode;  // whom this node voted for in `term`
  bool operator==(const HardState&) const = default;
};

// RequestVote and its PreVote twin (pre_vote = true: term is the candidate's term + 1, nobody
// changes its own term for it).
struct VoteRequest {
  bool pre_vote = false;
  Term term = 0;
  Index last_log_index = 0;
  Term last_log_term = 0;
};

struct VoteReply {
  bool pre_vote = false;
  Term term = 0;  // a grant echoes the request's term; a refusal carries the voter's term
  bool granted = false;
};

struct AppendEntries {
  Term term = 0;
  Index prev_log_index = 0;
  Term prev_log_term = 0;
  std::vector<Entry> entries;
  Index leader_commit = 0;
};

struct AppendReply {
  Term term = 0;
  bool success = false;
  Index match_index = 0;     // success: the last index known to match the leader's log
  Index conflict_index = 0;  // failure: where the leader should try next (fast backtracking)
  Term conflict_term = 0;    // failure: the follower's term at prev_log_index (0: log too short)
};

using MessageBody = std::variant<VoteRequest, VoteReply, AppendEntries, AppendReply>;

struct Message {
  NodeId from = kNoNode;
  NodeId to = kNoNode;
  MessageBody body;
};

struct Persist {
  std::optional<HardState> hard_state;
  std::optional<Index> truncate_from;  // drop entries with index >= this, before appending
  std::vector<Entry> append;
  bool empty() const { return !hard_state && !truncate_from && append.empty(); }
};

enum class Role : std::uint8_t { kFollower, kPreCandidate, kCandidate, kLeader };
const char* role_name(Role role);

struct LeaderChange {
  Term term = 0;
  NodeId leader = kNoNode;  // kNoNode: this node knows no leader now
};

struct Effects {
  Persist persist;
  std::vector<Message> sends;
  std::vector<Entry> apply;
  std::optional<LeaderChange> leader_change;
  void clear() { *this = Effects{}; }
};

struct RaftConfig {
  // t of the randomized election timeout [t, 2t); also the CheckQuorum period and the lease.
  Duration election_timeout = std::chrono::milliseconds(300);
  // A leader sends AppendEntries (heartbeat or repair) to each follower this often; well below t.
  Duration heartbeat_interval = std::chrono::milliseconds(30);
  // Caps one AppendEntries so a lagging follower catches up in bounded messages.
  std::size_t max_entries_per_append = 64;
  bool pre_vote = true;
  bool check_quorum = true;
};

struct ProposeOutcome {
  bool accepted = false;
  Index index = 0;  // accepted: where the entry sits; committed iff applied at (index, term)
  Term term = 0;
  NodeId leader_hint = kNoNode;  // not accepted: the leader this node believes in, if any
};

// What a node starts from: its durable state (RaftLog::open, or the simulator's storage).
struct Recovered {
  HardState hard_state;
  std::vector<Entry> log;  // indices 1..n, contiguous
};

class Raft {
 public:
  // `voters` holds every voter including `self` (1, 3 or 5 of them; others abort).
  Raft(NodeId self, std::vector<NodeId> voters, const RaftConfig& config, Recovered recovered,
       std::uint64_t seed, TimePoint now);

  void tick(TimePoint now, Effects& out);
  void on_message(TimePoint now, const Message& message, Effects& out);
  ProposeOutcome propose(TimePoint now, std::string data, Effects& out);
  // The next time tick() has work (in the past only if the caller ran late).
  TimePoint next_deadline() const { return deadline_; }

  NodeId self() const { return self_; }
  Role role() const { return role_; }
  Term term() const { return hard_.term; }
  NodeId vote() const { return hard_.vote; }
  NodeId leader() const { return leader_; }
  Index commit_index() const { return commit_; }
  Index last_applied() const { return applied_; }
  Index last_index() const { return log_.size(); }
  Term last_term() const { return log_.empty() ? 0 : log_.back().term; }
  Term term_at(Index index) const {
    return index == 0 || index > log_.size() ? 0 : entry(index).term;
  }
  const Entry& entry(Index index) const { return log_.at(index - 1); }
  const std::vector<Entry>& log() const { return log_; }
  const std::vector<NodeId>& voters() const { return voters_; }

 private:
  struct Progress {
    Index next = 1;
    Index match = 0;
    bool recent_active = false;
  };

  std::size_t quorum() const { return voters_.size() / 2 + 1; }
  void reset_election_deadline(TimePoint now);
  void set_hard_state(Term term, NodeId vote, Effects& out);
  void become_follower(TimePoint now, Term term, NodeId leader, Effects& out);
  void become_pre_candidate(TimePoint now, Effects& out);
  void become_candidate(TimePoint now, Effects& out);
  void become_leader(TimePoint now, Effects& out);
  void set_leader(NodeId leader, Effects& out);
  void campaign(TimePoint now, Effects& out);
  void append_local(Entry entry, Effects& out);
  void truncate_local(Index from, Effects& out);
  void send(NodeId to, MessageBody body, Effects& out);
  void send_append(NodeId to, Effects& out);
  void broadcast_append(Effects& out);
  bool log_up_to_date(Index last_index, Term last_term) const;
  bool in_lease(TimePoint now) const;
  void maybe_commit(Effects& out);
  void advance_commit(Index commit, Effects& out);

  void handle_vote_request(TimePoint now, NodeId from, const VoteRequest& m, Effects& out);
  void handle_vote_reply(TimePoint now, NodeId from, const VoteReply& m, Effects& out);
  void handle_append(TimePoint now, NodeId from, const AppendEntries& m, Effects& out);
  void handle_append_reply(TimePoint now, NodeId from, const AppendReply& m, Effects& out);

  NodeId self_;
  std::vector<NodeId> voters_;
  RaftConfig config_;
  Rng rng_;
  HardState hard_;
  std::vector<Entry> log_;
  Role role_ = Role::kFollower;
  NodeId leader_ = kNoNode;
  Index commit_ = 0;
  Index applied_ = 0;
  TimePoint deadline_;
  TimePoint election_deadline_;
  TimePoint last_leader_contact_{};  // follower: last AppendEntries from the current leader
  // Leader only.
  std::map<NodeId, Progress> progress_;
  TimePoint heartbeat_due_{};
  TimePoint quorum_check_due_{};
  // (Pre-)candidate only.
  std::set<NodeId> votes_;
};

}  // namespace elastic::consensus
