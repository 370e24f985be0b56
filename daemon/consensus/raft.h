// Raft: leader election, log replication, snapshots and single-server voter changes for the
// voter group, as a pure state machine.
//
// Like membership, it never touches a socket, a clock, a thread or the filesystem: the caller
// feeds it the time, inbound messages and client proposals, and carries out the Effects it
// returns. The daemon drives it over the ZeroMQ/CURVE transport with RaftLog for the disk;
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
//  - a FAST ELECTION when the owner's own failure detector says the leader is gone
//    (leader_unreachable(): its host was declared lost, its connection dropped): the follower
//    forgets the leader and campaigns (PreVote) after a short random delay instead of a whole
//    election timeout. Only a liveness shortcut: a pre-vote still needs a majority of voters
//    that do not hear the leader (the others refuse while it is alive), so a false suspicion at
//    one voter disrupts nothing. For an election timeout afterwards, an AppendEntries from that
//    leader in that term is applied but renews neither its lease nor this follower's election
//    timer: a heartbeat it sent just before it died, read after its connection's drop (the two
//    come over different connections), must not make this voter refuse the survivors' pre-votes
//    for a whole timeout. A live leader's heartbeats renew the lease again after that timeout;
//  - AppendEntries with the consistency check, truncation of a conflicting suffix (never of a
//    committed entry: that aborts) and fast backtracking (the reply carries conflict index and
//    term); heartbeats are AppendEntries from the follower's next index, so they also repair;
//    a refusal saying the follower's log ends below its match index (a voter that lost its
//    log and was rebuilt from its peers) lowers the match index, so the leader resends;
//  - the current-term commit rule: the leader advances its commit index by counting only for
//    an entry of its own term (earlier entries commit with it, Figure 8); a new leader appends a
//    no-op of its term at once;
//  - propose(bytes) on the leader appends and returns (index, term); elsewhere it returns the
//    known leader as a redirect hint;
//  - committed entries are handed out in index order, each once per process lifetime;
//  - READ INDEX (dissertation 6.4), linearizable reads without a log entry: read_index() on
//    the leader takes the commit index as the read's index, once this leader has committed an
//    entry of its term (before that the read waits: until then the leader does not know the
//    commit index). It then confirms it is still the leader: every AppendEntries carries the
//    latest read round (a counter bumped per read and sent out at once), every AppendReply
//    echoes the round of the AppendEntries it answers, and a read of round r is released
//    (Effects::reads_ready) once a majority of voters, this leader included while it is one,
//    echoed a round >= r in this term -- i.e. answered an AppendEntries sent after the read
//    began, so no later leader had been elected by then. A single voter releases at once. A
//    leader that steps down fails its waiting reads (Effects::reads_failed); a follower refuses
//    (the caller asks the leader). A lost AppendEntries delays the read to the next heartbeat.
//    Peers that do not echo rounds (older versions: the field decodes as 0) confirm no read;
//    reads then wait until the leader steps down or a majority echoes;
//  - SNAPSHOTS: the owner decides when (compact(upto, state machine bytes) for an applied
//    index); Raft keeps Snapshot{last_index, last_term, voters at that index, data} and drops
//    the entries it covers. The data is opaque: Raft never knows what the state machine is.
//    A follower whose next index lies inside the leader's snapshot gets it whole in one
//    InstallSnapshot (resent at most every election_timeout / 2 until acknowledged; data is
//    bounded by kMaxSnapshotBytes so the message fits the transport); it keeps its log suffix
//    if the entry at the snapshot's last index matches (dissertation 5.3), else discards its
//    log, and hands the snapshot to its owner in Effects::restore. A snapshot at or below the
//    receiver's commit index (stale, duplicate) changes nothing and is acknowledged;
//  - VOTER CHANGES, one server at a time (dissertation 4.1): a kConfig entry carries the whole
//    new voter list (encode_voters); every server uses the latest config entry in its log,
//    committed or not, from the moment it is appended, and reverts when that entry is
//    truncated (the config is always derivable: snapshot voters, then config entries of the
//    log, else the bootstrap voters). The leader accepts a change only after it has committed
//    an entry of its own term and while no other change is uncommitted (Ongaro's fix of the
//    single-server-change bug); removing the last voter is refused. Quorums and votes always
//    use the current config. A leader that removed itself keeps leading until the change
//    commits, then steps down; a node outside its current config never campaigns (a new voter
//    waits for the leader to reach it, by AppendEntries or InstallSnapshot).
// The apply index is volatile: after a restart the caller rebuilds its state machine from
// Recovered::snapshot, then Raft hands out the committed entries after it.
// Not yet: leadership transfer, learners, chunked snapshots.
//
// THE DURABILITY CONTRACT. Every call takes an Effects& that it clears first. The caller must
// carry the effects out in this order:
//   1. effects.persist: write hard_state (if set); then, if `snapshot` is set, store it durably
//      and drop every log entry with index <= snapshot->last_index; then drop every log entry
//      with index >= truncate_from (if set; nothing to drop is fine); then append `append` in
//      order; all of it durable (fsync) before step 2 -- a vote or an acknowledgement sent
//      before its state is on disk can be forgotten by a crash and break election safety or
//      lose a commit;
//   2. effects.sends: hand each message to the transport (any order, may be lost);
//   3. effects.restore: reset the state machine from restore->data (it then reflects every
//      entry up to restore->last_index);
//   4. effects.apply: apply the committed entries to the state machine in order (kNoop and
//      kConfig entries carry no command: skip them, but they do advance the applied index);
//   5. effects.leader_change: informational;
//   6. effects.reads_ready: each read may be answered from the state machine once it has
//      applied up to the read's index (on the leader it has, after step 4);
//      effects.reads_failed: answer those reads with an error (the client retries elsewhere).
// A leader counts its own log as replicated, which is sound because of step 1.
//
// Thread safety: none; one owner calls everything. Errors: the core has no environment
// failures; refusals (compact, propose_voter_change) say why in one sentence; a broken
// invariant (truncating a committed entry, a bad constructor argument, a config entry that
// does not decode) aborts loudly.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "daemon/consensus/voter_list.h"
#include "daemon/core/result.h"
#include "daemon/core/rng.h"
#include "daemon/core/time.h"

namespace elastic::consensus {

using NodeId = std::uint64_t;  // a voter; 0 means "none"
using Term = std::uint64_t;
using Index = std::uint64_t;  // log indices start at 1; 0 is "before the log"

inline constexpr NodeId kNoNode = 0;

using ReadId = std::uint64_t;  // one read_index() request, unique per Raft instance

// kConfig: data is encode_voters(the whole new voter list). Values are on disk and on the wire:
// append only.
enum class EntryType : std::uint8_t { kNoop = 0, kCommand = 1, kConfig = 2 };
inline constexpr std::uint8_t kMaxEntryType = 2;

struct Entry {
  Term term = 0;
  Index index = 0;
  EntryType type = EntryType::kCommand;
  std::string data;  // any length, opaque
  bool operator==(const Entry&) const = default;
};

// The state machine up to last_index, as opaque bytes, with what Raft needs to go on after it.
// data is bounded by kMaxSnapshotBytes, which keeps an InstallSnapshot (one message) below the
// transport's max_message_bytes (64 MiB by default; config.h) with room for the envelope.
inline constexpr std::size_t kMaxSnapshotBytes = 48 * 1024 * 1024;
struct Snapshot {
  Index last_index = 0;  // 0: no snapshot
  Term last_term = 0;
  std::vector<NodeId> voters;  // the config in force at last_index (sorted)
  std::string data;
  bool operator==(const Snapshot&) const = default;
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
  std::uint64_t read_round = 0;  // the leader's latest read round (READ INDEX above)
};

struct AppendReply {
  Term term = 0;
  bool success = false;
  Index match_index = 0;     // success: the last index known to match the leader's log
  Index conflict_index = 0;  // failure: where the leader should try next (fast backtracking)
  Term conflict_term = 0;    // failure: the follower's term at prev_log_index (0: log too short)
  std::uint64_t read_round = 0;  // echoes the answered AppendEntries' read_round
};

// The leader's whole snapshot, for a follower whose next index lies inside it.
struct InstallSnapshot {
  Term term = 0;
  Snapshot snapshot;
};

struct InstallSnapshotReply {
  Term term = 0;
  Index match_index = 0;  // the receiver holds (or has committed) everything up to here
};

using MessageBody = std::variant<VoteRequest, VoteReply, AppendEntries, AppendReply,
                                 InstallSnapshot, InstallSnapshotReply>;

struct Message {
  NodeId from = kNoNode;
  NodeId to = kNoNode;
  MessageBody body;
};

struct Persist {
  std::optional<HardState> hard_state;
  // Store durably (replacing any older one), then drop entries with index <= last_index.
  std::optional<Snapshot> snapshot = std::nullopt;
  std::optional<Index> truncate_from;  // drop entries with index >= this, before appending
  std::vector<Entry> append;
  bool empty() const { return !hard_state && !snapshot && !truncate_from && append.empty(); }
};

// Where a voter's durable state goes: RaftLog (raft_log.h) on disk in elasticd, the simulator's
// storage map in the sim tier. persist() carries out one Persist in the order of the durability
// contract above and returns only once it is durable; an Error means this voter can no longer
// promise durability (the caller stops it).
class RaftStore {
 public:
  virtual ~RaftStore() = default;
  virtual Status persist(const Persist& persist) = 0;
  // Removes the file `name` (no '/') from the store's directory; one that is not there is no
  // error. A store without files (the simulator's) has nothing to remove.
  virtual Status remove_file(const std::string& name) {
    (void)name;
    return ok_status();
  }
};

enum class Role : std::uint8_t { kFollower, kPreCandidate, kCandidate, kLeader };
const char* role_name(Role role);

struct LeaderChange {
  Term term = 0;
  NodeId leader = kNoNode;  // kNoNode: this node knows no leader now
};

// A confirmed read: answer it from the state machine once that has applied up to `index`.
struct ReadState {
  ReadId id = 0;
  Index index = 0;
  bool operator==(const ReadState&) const = default;
};

struct Effects {
  Persist persist;
  std::vector<Message> sends;
  std::optional<Snapshot> restore;  // reset the state machine from it before `apply`
  std::vector<Entry> apply;
  std::optional<LeaderChange> leader_change;
  std::vector<ReadState> reads_ready;
  std::vector<ReadId> reads_failed;  // this node stopped leading before confirming them
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

struct ReadOutcome {
  bool accepted = false;
  ReadId id = 0;  // accepted: comes back in reads_ready or reads_failed, exactly once
  NodeId leader_hint = kNoNode;  // not accepted: the leader this node believes in, if any
  std::string refusal;           // not accepted: why, one sentence
};

// Reads a leader holds unconfirmed at most; more are refused (a partitioned leader without
// CheckQuorum would otherwise collect them for ever).
inline constexpr std::size_t kMaxPendingReads = 4096;

struct VoterChange {
  enum class Kind : std::uint8_t { kAdd, kRemove };
  Kind kind = Kind::kAdd;
  NodeId node = kNoNode;
};

struct VoterChangeOutcome {
  bool accepted = false;
  Index index = 0;  // accepted: where the config entry sits; it commits like any entry
  Term term = 0;
  NodeId leader_hint = kNoNode;  // not accepted: the leader this node believes in, if any
  std::string refusal;           // not accepted: why, one sentence
};

// What a node starts from: its durable state (RaftLog::open, or the simulator's storage).
struct Recovered {
  HardState hard_state;
  // Indices snapshot.last_index + 1 .. n (1..n without a snapshot), contiguous.
  std::vector<Entry> log;
  // The owner restores its state machine from it before the first call; Raft starts with
  // commit and apply index at its last_index.
  std::optional<Snapshot> snapshot = std::nullopt;
};

class Raft {
 public:
  // `voters` is the bootstrap voter set (>= 1 distinct non-zero ids; others abort), in force
  // until a snapshot or a config entry says otherwise. `self` need not be in the current
  // config: then it follows but never campaigns.
  Raft(NodeId self, std::vector<NodeId> voters, const RaftConfig& config, Recovered recovered,
       std::uint64_t seed, TimePoint now);

  void tick(TimePoint now, Effects& out);
  void on_message(TimePoint now, const Message& message, Effects& out);
  ProposeOutcome propose(TimePoint now, std::string data, Effects& out);
  // Leader only: appends a kConfig entry with the changed voter list (see the header comment
  // for the refusals). Never moves next_deadline().
  VoterChangeOutcome propose_voter_change(TimePoint now, VoterChange change, Effects& out);
  // Leader only: starts a linearizable read (READ INDEX in the header comment). Refused on a
  // follower or with kMaxPendingReads waiting. Never moves next_deadline().
  ReadOutcome read_index(TimePoint now, Effects& out);
  // The owner's failure detector says `leader` is gone. A follower that follows exactly it
  // forgets it (Effects::leader_change), stops counting it as heard (so it grants pre-votes
  // and votes as after an election timeout) and campaigns in its turn, unless its timer fires
  // sooner: slot * election_timeout / 8 plus a random delay below election_timeout / 16, where
  // slot is its place in the voter list with `leader` left out (so survivors that learn of the
  // loss together campaign at least election_timeout / 16 apart and do not split the vote).
  // Anything else (a leader, a candidate, a follower of another or no leader, `leader` being
  // this node) is a no-op. An AppendEntries from a leader that is alive after all makes the
  // node follow it again. Never persists anything.
  void leader_unreachable(TimePoint now, NodeId leader, Effects& out);
  // Replaces the entries up to `upto` (<= last_applied()) with a snapshot holding
  // `state_machine`, the caller's state after applying exactly the entries up to `upto`.
  // Effects carry only persist.snapshot. A no-op (ok, empty effects) if `upto` is not above the
  // current snapshot; an Error if `upto` is not applied yet or the data is over
  // kMaxSnapshotBytes. Any role.
  Status compact(Index upto, std::string state_machine, Effects& out);
  // The next time tick() has work (in the past only if the caller ran late).
  TimePoint next_deadline() const { return deadline_; }

  NodeId self() const { return self_; }
  Role role() const { return role_; }
  Term term() const { return hard_.term; }
  NodeId vote() const { return hard_.vote; }
  NodeId leader() const { return leader_; }
  Index commit_index() const { return commit_; }
  Index last_applied() const { return applied_; }
  Index last_index() const { return snapshot_.last_index + log_.size(); }
  Term last_term() const { return log_.empty() ? snapshot_.last_term : log_.back().term; }
  // The first index still in the log (snapshot_index() + 1).
  Index first_index() const { return snapshot_.last_index + 1; }
  Index snapshot_index() const { return snapshot_.last_index; }
  // 0 outside [snapshot_index(), last_index()] (0 itself, compacted or beyond the end).
  Term term_at(Index index) const {
    if (index == snapshot_.last_index) return snapshot_.last_term;
    return index < snapshot_.last_index || index > last_index() ? 0 : entry(index).term;
  }
  // index in [first_index(), last_index()]; anything else aborts (std::out_of_range).
  const Entry& entry(Index index) const { return log_.at(index - snapshot_.last_index - 1); }
  // The entries from first_index() on.
  const std::vector<Entry>& log() const { return log_; }
  const Snapshot& snapshot() const { return snapshot_; }
  // The current config (sorted) and the index of the entry it came from (snapshot_index() or 0
  // when it comes from the snapshot or the bootstrap list).
  const std::vector<NodeId>& voters() const { return voters_; }
  Index config_index() const { return config_index_; }
  bool is_voter(NodeId id) const;

 private:
  struct Progress {
    Index next = 1;
    Index match = 0;
    bool recent_active = false;
    TimePoint snapshot_due{};      // no InstallSnapshot to this follower before then
    std::uint64_t read_round = 0;  // the highest read round it echoed in this term
  };
  struct PendingRead {
    ReadId id = 0;
    Index index = 0;
    std::uint64_t round = 0;  // 0: waits for this leader's first commit in its term
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
  void recompute_config();
  void sync_progress();
  std::vector<NodeId> config_at(Index index) const;
  void send(NodeId to, MessageBody body, Effects& out);
  void send_append(TimePoint now, NodeId to, Effects& out);
  void broadcast_append(TimePoint now, Effects& out);
  bool log_up_to_date(Index last_index, Term last_term) const;
  bool in_lease(TimePoint now) const;
  void maybe_commit(TimePoint now, Effects& out);
  void advance_commit(Index commit, Effects& out);
  void start_waiting_reads(TimePoint now, Effects& out);
  void release_reads(Effects& out);

  void handle_vote_request(TimePoint now, NodeId from, const VoteRequest& m, Effects& out);
  void handle_vote_reply(TimePoint now, NodeId from, const VoteReply& m, Effects& out);
  void handle_append(TimePoint now, NodeId from, const AppendEntries& m, Effects& out);
  void handle_append_reply(TimePoint now, NodeId from, const AppendReply& m, Effects& out);
  void handle_install_snapshot(TimePoint now, NodeId from, const InstallSnapshot& m, Effects& out);
  void handle_install_snapshot_reply(TimePoint now, NodeId from, const InstallSnapshotReply& m,
                                     Effects& out);

  NodeId self_;
  std::vector<NodeId> bootstrap_voters_;
  std::vector<NodeId> voters_;  // the current config
  Index config_index_ = 0;
  RaftConfig config_;
  Rng rng_;
  HardState hard_;
  Snapshot snapshot_;
  std::vector<Entry> log_;  // entries snapshot_.last_index + 1 ..
  Role role_ = Role::kFollower;
  NodeId leader_ = kNoNode;
  Index commit_ = 0;
  Index applied_ = 0;
  TimePoint deadline_;
  TimePoint election_deadline_;
  TimePoint last_leader_contact_{};  // follower: last AppendEntries from the current leader
  // The leader this follower's failure detector last declared gone (leader_unreachable), in
  // which term, and when: for an election timeout after that, an AppendEntries from it in that
  // term renews no lease (see handle_append).
  NodeId unreachable_leader_ = kNoNode;
  Term unreachable_term_ = 0;
  TimePoint unreachable_at_{};
  // Leader only.
  std::map<NodeId, Progress> progress_;
  TimePoint heartbeat_due_{};
  TimePoint quorum_check_due_{};
  // Unconfirmed reads in request order (rounds never decrease along it).
  std::vector<PendingRead> reads_;
  // Any role: read ids and rounds only grow in one process, so no echo of an earlier
  // leadership can confirm a later read (replies are also checked against the term).
  ReadId next_read_id_ = 1;
  std::uint64_t read_round_ = 0;
  // (Pre-)candidate only.
  std::set<NodeId> votes_;
};

}  // namespace elastic::consensus
