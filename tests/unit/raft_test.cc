// Raft core rules (table-driven, manual time, a hand-steered message queue) and the durable log
// (real files in a TempDir): vote granting, stepping down, log matching and truncation, the
// current-term commit rule with the Raft paper's Figure 8 scripted step by step, PreVote,
// CheckQuorum, persistence round trips, torn tails, bad CRCs, odd payload lengths, bootstrap;
// snapshots (compaction, term lookups at the boundary, InstallSnapshot to a lagging follower,
// stale and duplicate ones, the snapshot file's crash points and CRC) and one-at-a-time voter
// changes (refusals, a new voter catching up by snapshot, removing a follower or the leader,
// reverting a truncated config).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "daemon/consensus/raft.h"
#include "daemon/consensus/raft_log.h"
#include "tests/support/temp_dir.h"

namespace elastic::consensus {
namespace {

using namespace std::chrono_literals;

const TimePoint kStart = TimePoint{} + 1h;

std::vector<Entry> log_of_terms(const std::vector<Term>& terms) {
  std::vector<Entry> log;
  for (std::size_t i = 0; i < terms.size(); ++i) {
    log.push_back(Entry{terms[i], i + 1, EntryType::kCommand, "e" + std::to_string(i + 1)});
  }
  return log;
}

// A small cluster with durable state kept as the contract says (persist, then send).
// Nodes 1..n are the bootstrap voters; `extra` more nodes n+1.. start outside the config (they
// know the bootstrap voters and wait to be added).
class Cluster {
 public:
  Cluster(std::size_t n, RaftConfig config, std::size_t extra = 0) : config_(config) {
    for (NodeId id = 1; id <= n; ++id) bootstrap_.push_back(id);
    for (NodeId id = 1; id <= n + extra; ++id) ids_.push_back(id);
    for (NodeId id : ids_) restart(id);
  }
  // Starts (or restarts) `id` from its durable state; messages in flight to it are dropped.
  void restart(NodeId id) {
    auto& n = nodes_[id];
    n.raft = std::make_unique<Raft>(id, bootstrap_, config_, Recovered{n.hard, n.log, n.snapshot},
                                    100 + id + seed_++, now_);
    n.restored = n.snapshot;  // the owner rebuilds its state machine from the snapshot
    n.applied.clear();
    n.up = true;
    drop([&](const Message& m) { return m.to == id; });
  }
  void crash(NodeId id) {
    nodes_[id].up = false;
    drop([&](const Message& m) { return m.to == id || m.from == id; });
  }
  // Forgets `id`'s durable state, as a voter rebuilt from its peers starts (consensus_host.h).
  void wipe(NodeId id) {
    auto& n = nodes_[id];
    n.hard = HardState{};
    n.log.clear();
    n.snapshot.reset();
  }
  Raft& raft(NodeId id) { return *nodes_.at(id).raft; }
  const std::vector<Entry>& applied(NodeId id) { return nodes_.at(id).applied; }
  const std::vector<Entry>& durable_log(NodeId id) { return nodes_.at(id).log; }
  const std::optional<Snapshot>& durable_snapshot(NodeId id) { return nodes_.at(id).snapshot; }
  // The last snapshot the node's state machine was reset from (restart or InstallSnapshot).
  const std::optional<Snapshot>& restored(NodeId id) { return nodes_.at(id).restored; }
  bool up(NodeId id) { return nodes_.at(id).up; }
  TimePoint now() const { return now_; }

  void carry_out(NodeId id, Effects& e) {
    auto& n = nodes_.at(id);
    if (e.persist.hard_state) n.hard = *e.persist.hard_state;
    if (e.persist.snapshot) {
      n.snapshot = e.persist.snapshot;
      std::erase_if(n.log, [&](const Entry& x) { return x.index <= n.snapshot->last_index; });
    }
    if (e.persist.truncate_from) {
      std::erase_if(n.log, [&](const Entry& x) { return x.index >= *e.persist.truncate_from; });
    }
    for (const auto& entry : e.persist.append) n.log.push_back(entry);
    for (auto& m : e.sends) queue_.push_back(m);
    if (e.restore) {
      n.restored = e.restore;
      n.applied.clear();
    }
    for (auto& entry : e.apply) n.applied.push_back(entry);
    for (const ReadState& read : e.reads_ready) {
      // Step 6 of the contract: a released read's index is applied by now (on the leader).
      EXPECT_GE(n.raft->last_applied(), read.index) << "read " << read.id << " of node " << id;
      n.reads_ready.push_back(read);
    }
    for (ReadId read : e.reads_failed) n.reads_failed.push_back(read);
  }
  // Compacts `id`'s log up to what it applied, with a state machine blob naming the index.
  void compact(NodeId id) {
    Effects e;
    const Index upto = raft(id).last_applied();
    ASSERT_TRUE(raft(id).compact(upto, "sm@" + std::to_string(upto), e).ok());
    carry_out(id, e);
  }
  VoterChangeOutcome change(NodeId id, VoterChange change) {
    Effects e;
    auto outcome = raft(id).propose_voter_change(now_, change, e);
    carry_out(id, e);
    return outcome;
  }
  // Fires `id`'s election timer (or leader timers) now.
  void fire(NodeId id) {
    now_ = std::max(now_, raft(id).next_deadline());
    Effects e;
    raft(id).tick(now_, e);
    carry_out(id, e);
  }
  ReadOutcome read(NodeId id) {
    Effects e;
    const TimePoint before = raft(id).next_deadline();
    auto outcome = raft(id).read_index(now_, e);
    EXPECT_EQ(raft(id).next_deadline(), before) << "read_index moved the timer";
    carry_out(id, e);
    return outcome;
  }
  // Reads `id` released (reads_ready) or failed since it started.
  const std::vector<ReadState>& reads_ready(NodeId id) { return nodes_.at(id).reads_ready; }
  const std::vector<ReadId>& reads_failed(NodeId id) { return nodes_.at(id).reads_failed; }
  ProposeOutcome propose(NodeId id, std::string data) {
    Effects e;
    auto outcome = raft(id).propose(now_, std::move(data), e);
    carry_out(id, e);
    return outcome;
  }
  // Delivers queued messages matching `pred` (and whatever they cause, if it matches too)
  // until none is left; others stay queued.
  void deliver(const std::function<bool(const Message&)>& pred) {
    bool progress = true;
    while (progress) {
      progress = false;
      for (auto it = queue_.begin(); it != queue_.end(); ++it) {
        if (!pred(*it) || !nodes_[it->to].up) continue;
        Message m = *it;
        queue_.erase(it);
        Effects e;
        raft(m.to).on_message(now_, m, e);
        carry_out(m.to, e);
        progress = true;
        break;
      }
    }
  }
  void deliver_between(std::vector<NodeId> group) {
    auto in = [group](NodeId x) { return std::find(group.begin(), group.end(), x) != group.end(); };
    deliver([in](const Message& m) { return in(m.from) && in(m.to); });
  }
  void drop(const std::function<bool(const Message&)>& pred) { std::erase_if(queue_, pred); }
  void drop_all() { queue_.clear(); }
  const std::deque<Message>& queued() const { return queue_; }
  // Advances time in small steps, firing due timers and delivering every message within
  // `group` (the others are dropped: a partition).
  void run(Duration d, std::vector<NodeId> group) {
    const TimePoint end = now_ + d;
    auto in = [&](NodeId x) { return std::find(group.begin(), group.end(), x) != group.end(); };
    while (now_ < end) {
      now_ += 1ms;
      for (NodeId id : ids_) {
        if (nodes_[id].up && raft(id).next_deadline() <= now_) {
          Effects e;
          raft(id).tick(now_, e);
          carry_out(id, e);
        }
      }
      deliver([&](const Message& m) { return in(m.from) && in(m.to); });
      drop_all();
    }
  }
  void run(Duration d) { run(d, ids_); }
  std::optional<NodeId> leader() {
    std::optional<NodeId> best;
    for (NodeId id : ids_) {
      if (nodes_[id].up && raft(id).role() == Role::kLeader &&
          (!best || raft(id).term() > raft(*best).term())) {
        best = id;
      }
    }
    return best;
  }
  const std::vector<NodeId>& ids() const { return ids_; }

 private:
  struct Node {
    std::unique_ptr<Raft> raft;
    HardState hard;
    std::vector<Entry> log;
    std::optional<Snapshot> snapshot;
    std::optional<Snapshot> restored;
    std::vector<Entry> applied;  // since the last restart or restore
    std::vector<ReadState> reads_ready;
    std::vector<ReadId> reads_failed;
    bool up = false;
  };
  RaftConfig config_;
  std::vector<NodeId> bootstrap_;
  std::vector<NodeId> ids_;
  std::map<NodeId, Node> nodes_;
  std::deque<Message> queue_;
  TimePoint now_ = kStart;
  std::uint64_t seed_ = 0;
};

// --- vote granting ------------------------------------------------------------------------

struct VoteCase {
  const char* name;
  Term voter_term;
  NodeId voter_vote;
  std::vector<Term> voter_log;
  VoteRequest request;
  bool granted;
  Term reply_term;
};

TEST(RaftVote, GrantingTable) {
  const std::vector<VoteCase> cases = {
      {"fresh voter grants", 1, kNoNode, {1}, {false, 2, 1, 1}, true, 2},
      {"same term, already voted for another", 2, 3, {1}, {false, 2, 1, 1}, false, 2},
      {"same term, already voted for this one", 2, 2, {1}, {false, 2, 1, 1}, true, 2},
      {"stale candidate term", 3, kNoNode, {1}, {false, 2, 5, 2}, false, 3},
      {"candidate's last term older", 2, kNoNode, {1, 2}, {false, 3, 5, 1}, false, 3},
      {"same last term, shorter log", 2, kNoNode, {1, 2, 2}, {false, 3, 2, 2}, false, 3},
      {"same last term, equal log", 2, kNoNode, {1, 2, 2}, {false, 3, 3, 2}, true, 3},
      {"newer last term, shorter log", 2, kNoNode, {1, 1, 1}, {false, 3, 1, 2}, true, 3},
      {"pre-vote granted, term not bumped", 1, kNoNode, {1}, {true, 2, 1, 1}, true, 2},
      {"pre-vote for a stale term", 2, kNoNode, {1}, {true, 2, 1, 1}, false, 2},
      {"pre-vote, candidate log behind", 1, kNoNode, {1, 1}, {true, 2, 1, 1}, false, 1},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Raft r(1, {1, 2, 3}, RaftConfig{},
           Recovered{{c.voter_term, c.voter_vote}, log_of_terms(c.voter_log)}, 7, kStart);
    Effects e;
    r.on_message(kStart, Message{2, 1, c.request}, e);
    ASSERT_EQ(e.sends.size(), 1u);
    const auto& reply = std::get<VoteReply>(e.sends[0].body);
    EXPECT_EQ(reply.granted, c.granted);
    EXPECT_EQ(reply.term, c.reply_term);
    EXPECT_EQ(reply.pre_vote, c.request.pre_vote);
    if (c.request.pre_vote) {
      EXPECT_EQ(r.term(), c.voter_term) << "a pre-vote never changes the voter's term";
      EXPECT_FALSE(e.persist.hard_state.has_value());
    } else if (c.granted && !(c.voter_term == c.request.term && c.voter_vote == 2)) {
      // The vote is persisted in the same Effects, before the reply goes out (a repeated
      // grant to the same candidate is already durable).
      ASSERT_TRUE(e.persist.hard_state.has_value());
      EXPECT_EQ(e.persist.hard_state->vote, 2u);
      EXPECT_EQ(e.persist.hard_state->term, c.request.term);
    }
  }
}

TEST(RaftVote, HigherTermMakesALeaderStepDown) {
  Cluster c(3, RaftConfig{});
  c.run(2s);
  auto leader = c.leader();
  ASSERT_TRUE(leader.has_value());
  const Term term = c.raft(*leader).term();
  // An AppendReply of a higher term (a follower that moved on) deposes the leader.
  const NodeId other = *leader == 1 ? 2 : 1;
  Effects e;
  c.raft(*leader).on_message(c.now(),
                             Message{other, *leader, AppendReply{term + 5, false, 0, 0, 0}}, e);
  EXPECT_EQ(c.raft(*leader).role(), Role::kFollower);
  EXPECT_EQ(c.raft(*leader).term(), term + 5);
  ASSERT_TRUE(e.persist.hard_state.has_value());
  EXPECT_EQ(e.persist.hard_state->term, term + 5);
  EXPECT_EQ(e.persist.hard_state->vote, kNoNode);
}

// --- log matching ---------------------------------------------------------------------------

struct AppendCase {
  const char* name;
  std::vector<Term> follower_log;
  AppendEntries request;
  bool success;
  Index match_or_conflict_index;
  Term conflict_term;
  std::vector<Term> log_after;
  std::optional<Index> truncated_from;
};

TEST(RaftAppend, ConsistencyCheckTable) {
  auto entries = [](Index first, std::vector<Term> terms) {
    std::vector<Entry> v;
    for (Term t : terms) v.push_back(Entry{t, first++, EntryType::kCommand, "x"});
    return v;
  };
  const std::vector<AppendCase> cases = {
      {"append at the end", {1, 1}, {3, 2, 1, entries(3, {3}), 0}, true, 3, 0, {1, 1, 3}, {}},
      {"log too short: hint is its end", {1, 1}, {3, 5, 3, {}, 0}, false, 3, 0, {1, 1}, {}},
      {"conflicting prev: hint skips the term",
       {1, 2, 2, 2},
       {3, 4, 3, {}, 0},
       false,
       2,
       2,
       {1, 2, 2, 2},
       {}},
      {"conflict truncates the suffix",
       {1, 1, 2, 2},
       {3, 2, 1, entries(3, {3}), 0},
       true,
       3,
       0,
       {1, 1, 3},
       3},
      {"duplicate (stale) AE truncates nothing",
       {1, 1, 3, 3},
       {3, 1, 1, entries(2, {1}), 0},
       true,
       2,
       0,
       {1, 1, 3, 3},
       {}},
      {"heartbeat on a matching log", {1, 1}, {3, 2, 1, {}, 0}, true, 2, 0, {1, 1}, {}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Raft r(1, {1, 2, 3}, RaftConfig{}, Recovered{{3, kNoNode}, log_of_terms(c.follower_log)}, 7,
           kStart);
    Effects e;
    r.on_message(kStart, Message{2, 1, c.request}, e);
    ASSERT_EQ(e.sends.size(), 1u);
    const auto& reply = std::get<AppendReply>(e.sends[0].body);
    EXPECT_EQ(reply.success, c.success);
    if (c.success) {
      EXPECT_EQ(reply.match_index, c.match_or_conflict_index);
    } else {
      EXPECT_EQ(reply.conflict_index, c.match_or_conflict_index);
      EXPECT_EQ(reply.conflict_term, c.conflict_term);
    }
    std::vector<Term> terms;
    for (const auto& entry : r.log()) terms.push_back(entry.term);
    EXPECT_EQ(terms, c.log_after);
    EXPECT_EQ(e.persist.truncate_from, c.truncated_from);
    EXPECT_EQ(r.leader(), 2u);
  }
}

TEST(RaftAppend, FollowerCommitsUpToWhatItMatches) {
  Raft r(1, {1, 2, 3}, RaftConfig{}, Recovered{{2, kNoNode}, log_of_terms({1, 1, 2, 2, 2})}, 7,
         kStart);
  Effects e;
  // The leader's commit (5) is beyond what this AE proves matching (3): commit only 3.
  r.on_message(kStart, Message{2, 1, AppendEntries{2, 3, 2, {}, 5}}, e);
  EXPECT_EQ(r.commit_index(), 3u);
  ASSERT_EQ(e.apply.size(), 3u);
  EXPECT_EQ(e.apply[2].index, 3u);
}

TEST(RaftAppend, StaleLeaderIsToldTheTerm) {
  Raft r(1, {1, 2, 3}, RaftConfig{}, Recovered{{5, kNoNode}, {}}, 7, kStart);
  Effects e;
  r.on_message(kStart, Message{2, 1, AppendEntries{3, 0, 0, {}, 0}}, e);
  ASSERT_EQ(e.sends.size(), 1u);
  const auto& reply = std::get<AppendReply>(e.sends[0].body);
  EXPECT_FALSE(reply.success);
  EXPECT_EQ(reply.term, 5u);
}

// --- commit rule: Figure 8 -----------------------------------------------------------------

bool is_vote(const Message& m) {
  return std::holds_alternative<VoteRequest>(m.body) || std::holds_alternative<VoteReply>(m.body);
}

// The Raft paper's Figure 8, scripted with real messages on 5 servers (PreVote and CheckQuorum
// off: it is plain Raft's scenario; max one entry per AppendEntries so (c) is exact).
TEST(RaftCommit, Figure8OldTermEntryIsNotCommittedByCounting) {
  RaftConfig config;
  config.pre_vote = false;
  config.check_quorum = false;
  config.max_entries_per_append = 1;
  Cluster c(5, config);
  auto to = [](std::vector<NodeId> peers) {
    return [peers](const Message& m) {
      return std::find(peers.begin(), peers.end(), m.to) != peers.end() ||
             std::find(peers.begin(), peers.end(), m.from) != peers.end();
    };
  };
  // Setup: S1 leads term 1 and commits index 1 everywhere.
  c.fire(1);
  c.deliver([](const Message&) { return true; });
  ASSERT_EQ(c.raft(1).role(), Role::kLeader);
  c.fire(1);  // heartbeat carries the commit index
  c.deliver([](const Message&) { return true; });
  for (NodeId id = 1; id <= 5; ++id) ASSERT_EQ(c.raft(id).commit_index(), 1u) << id;

  // (a) S1 crashes and restarts; it wins term 2 (votes S2, S3) and replicates index 2 (its
  // term-2 no-op) only to S2.
  c.crash(1);
  c.restart(1);
  c.fire(1);
  c.deliver([&](const Message& m) { return is_vote(m) && (m.to == 2 || m.to == 3 || m.to == 1); });
  ASSERT_EQ(c.raft(1).role(), Role::kLeader);
  ASSERT_EQ(c.raft(1).term(), 2u);
  c.drop([](const Message& m) { return m.from == 1 && m.to != 2; });
  c.deliver(to({2}));
  c.drop_all();
  ASSERT_EQ(c.raft(2).last_index(), 2u);
  ASSERT_EQ(c.raft(2).term_at(2), 2u);

  // (b) S1 crashes; S5 wins term 3 with S3 and S4 (after a failed try in term 2, where S3 had
  // voted for S1) and appends index 2 of term 3 locally only.
  c.crash(1);
  c.fire(5);
  c.deliver([](const Message& m) { return is_vote(m) && (m.to == 3 || m.to == 4 || m.to == 5); });
  ASSERT_NE(c.raft(5).role(), Role::kLeader);
  c.fire(5);
  c.deliver([](const Message& m) { return is_vote(m) && (m.to == 3 || m.to == 4 || m.to == 5); });
  ASSERT_EQ(c.raft(5).role(), Role::kLeader);
  ASSERT_EQ(c.raft(5).term(), 3u);
  c.drop_all();
  ASSERT_EQ(c.raft(5).term_at(2), 3u);

  // (c) S5 crashes; S1 restarts and wins term 4 (S2, S3), appends its no-op at index 3, and
  // replicates index 2 (term 2) to S3. Index 2 is now on a majority (S1, S2, S3) and S1 knows
  // it ...
  c.crash(5);
  c.restart(1);
  c.fire(1);  // term 3: S3 and S4 voted for S5 in term 3
  c.deliver([](const Message& m) { return is_vote(m) && (m.to == 2 || m.to == 3 || m.to == 1); });
  ASSERT_NE(c.raft(1).role(), Role::kLeader);
  c.fire(1);  // term 4
  c.deliver([](const Message& m) { return is_vote(m) && (m.to == 2 || m.to == 3 || m.to == 1); });
  ASSERT_EQ(c.raft(1).role(), Role::kLeader);
  ASSERT_EQ(c.raft(1).term(), 4u);
  ASSERT_EQ(c.raft(1).term_at(3), 4u);
  // S2 acks: S1 now knows S2 holds index 2 (S2 also takes the term-4 no-op, on 2 of 5 only;
  // the paper's figure leaves it on S1 alone, which would hide index 2 on S2 from S1).
  c.deliver(
      [](const Message& m) { return (m.from == 1 && m.to == 2) || (m.from == 2 && m.to == 1); });
  c.drop([](const Message& m) { return m.from == 1 && m.to != 3; });
  ASSERT_EQ(c.raft(2).term_at(3), 4u);
  // S3 refuses (no index 2), S1 backs up and sends index 2 alone and S3 acks it; every
  // AppendEntries that would give S3 the term-4 entry is lost.
  auto without_term4 = [&c](const Message& m) {
    if (const auto* ae = std::get_if<AppendEntries>(&m.body);
        ae != nullptr && ae->prev_log_index <= c.raft(3).last_index()) {
      for (const auto& e : ae->entries) {
        if (e.term == 4) return false;
      }
    }
    return m.to == 3 || (m.from == 3 && m.to == 1);
  };
  c.deliver(without_term4);
  c.drop_all();
  ASSERT_EQ(c.raft(3).term_at(2), 2u);
  c.drop_all();
  // ... but it is not of the current term: it must not be committed by counting.
  EXPECT_LT(c.raft(1).commit_index(), 2u) << "Figure 8: index 2 of term 2 committed by counting";
  for (NodeId id = 1; id <= 5; ++id) {
    for (const auto& e : c.applied(id)) EXPECT_LT(e.index, 2u) << "S" << id << " applied";
  }

  // (d) S1 crashes; S5 restarts and wins term 5 (S3, S4: its last term 3 beats their 2) and
  // overwrites index 2 everywhere (S2 included) with its term-3 entry. Had index 2 (term 2) been
  // committed in (c), this would be a state machine safety violation.
  c.crash(1);
  c.restart(5);
  for (int attempt = 0; attempt < 3 && c.raft(5).role() != Role::kLeader; ++attempt) {
    c.fire(5);
    c.deliver([](const Message& m) { return m.from != 1 && m.to != 1; });
  }
  ASSERT_EQ(c.raft(5).role(), Role::kLeader);
  for (int i = 0; i < 10; ++i) {
    c.fire(5);
    c.deliver([](const Message& m) { return m.from != 1 && m.to != 1; });
  }
  EXPECT_EQ(c.raft(5).commit_index(), c.raft(5).last_index());
  for (NodeId id : {2, 3, 4, 5}) {
    EXPECT_EQ(c.raft(id).term_at(2), 3u) << "S" << id;
    EXPECT_EQ(c.durable_log(id).at(1).term, 3u) << "S" << id;
  }

  // (e) The other branch: S1, not S5, comes back, and this time its term-4 entry reaches a
  // majority: then index 2 (term 2) commits together with it.
}

TEST(RaftCommit, Figure8EntryCommitsWithACurrentTermEntry) {
  RaftConfig config;
  config.pre_vote = false;
  config.check_quorum = false;
  Raft leader(1, {1, 2, 3, 4, 5}, config, Recovered{{3, 1}, log_of_terms({1, 2})}, 7, kStart);
  Effects e;
  leader.tick(leader.next_deadline(), e);  // candidate of term 4
  ASSERT_EQ(leader.role(), Role::kCandidate);
  const TimePoint t = leader.next_deadline() - 1ms;
  for (NodeId v : {2, 3}) leader.on_message(t, Message{v, 1, VoteReply{false, 4, true}}, e);
  ASSERT_EQ(leader.role(), Role::kLeader);
  ASSERT_EQ(leader.term_at(3), 4u);  // the no-op
  // S2 and S3 hold index 2 (term 2): counting would commit it; the rule forbids it.
  for (NodeId v : {2, 3}) leader.on_message(t, Message{v, 1, AppendReply{4, true, 2, 0, 0}}, e);
  EXPECT_EQ(leader.commit_index(), 0u);
  // Once the term-4 no-op is on a majority, everything up to it commits, in order.
  leader.on_message(t, Message{2, 1, AppendReply{4, true, 3, 0, 0}}, e);
  EXPECT_EQ(leader.commit_index(), 0u);
  leader.on_message(t, Message{3, 1, AppendReply{4, true, 3, 0, 0}}, e);
  EXPECT_EQ(leader.commit_index(), 3u);
  ASSERT_EQ(e.apply.size(), 3u);
  for (Index i = 0; i < 3; ++i) EXPECT_EQ(e.apply[i].index, i + 1);
}

// --- elections, PreVote, CheckQuorum ----------------------------------------------------------

TEST(RaftElection, ThreeVotersElectOneLeaderAndReplicate) {
  Cluster c(3, RaftConfig{});
  c.run(2s);
  auto leader = c.leader();
  ASSERT_TRUE(leader.has_value());
  const NodeId follower = *leader == 1 ? 2 : 1;
  auto redirected = c.propose(follower, "x");
  EXPECT_FALSE(redirected.accepted);
  EXPECT_EQ(redirected.leader_hint, *leader);
  auto outcome = c.propose(*leader, std::string(13, 'q'));
  ASSERT_TRUE(outcome.accepted);
  c.run(200ms);
  for (NodeId id = 1; id <= 3; ++id) {
    ASSERT_FALSE(c.applied(id).empty());
    EXPECT_EQ(c.applied(id).back().index, outcome.index);
    EXPECT_EQ(c.applied(id).back().data, std::string(13, 'q'));
  }
}

TEST(RaftElection, SingleVoterCommitsAlone) {
  Cluster c(1, RaftConfig{});
  c.run(1s);
  ASSERT_EQ(c.leader(), NodeId{1});
  auto outcome = c.propose(1, "solo");
  ASSERT_TRUE(outcome.accepted);
  ASSERT_FALSE(c.applied(1).empty());
  EXPECT_EQ(c.applied(1).back().data, "solo");
}

TEST(RaftElection, ElectionTimeoutIsRandomizedWithinOneToTwoT) {
  RaftConfig config;
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    Raft r(1, {1, 2, 3}, config, Recovered{}, seed, kStart);
    const Duration d = r.next_deadline() - kStart;
    EXPECT_GE(d, config.election_timeout);
    EXPECT_LT(d, 2 * config.election_timeout);
  }
}

// The ids 1..n except `left_out`.
std::vector<NodeId> all_but(NodeId left_out, NodeId n) {
  std::vector<NodeId> ids;
  for (NodeId id = 1; id <= n; ++id) {
    if (id != left_out) ids.push_back(id);
  }
  return ids;
}

TEST(RaftPreVote, IsolatedNodeDoesNotDisruptAStableLeader) {
  Cluster c(3, RaftConfig{});
  c.run(2s);
  auto leader = c.leader();
  ASSERT_TRUE(leader.has_value());
  const Term term = c.raft(*leader).term();
  const NodeId isolated = *leader == 3 ? 2 : 3;
  const std::vector<NodeId> majority = all_but(isolated, 3);
  c.run(5s, majority);
  EXPECT_EQ(c.raft(isolated).term(), term) << "pre-votes must not bump the term";
  EXPECT_NE(c.raft(isolated).role(), Role::kLeader);
  c.run(5s);  // healed: its pre-votes are refused (the others hear the leader)
  EXPECT_EQ(c.leader(), leader);
  EXPECT_EQ(c.raft(*leader).term(), term);
  EXPECT_EQ(c.raft(isolated).leader(), *leader);
}

TEST(RaftPreVote, WithoutPreVoteTheIsolatedNodeBumpsTerms) {
  // The contrast that shows why PreVote is on: the returning node's term forces an election.
  RaftConfig config;
  config.pre_vote = false;
  config.check_quorum = false;
  Cluster c(3, config);
  c.run(2s);
  auto leader = c.leader();
  ASSERT_TRUE(leader.has_value());
  const Term term = c.raft(*leader).term();
  const NodeId isolated = *leader == 3 ? 2 : 3;
  const std::vector<NodeId> majority = all_but(isolated, 3);
  c.run(5s, majority);
  EXPECT_GT(c.raft(isolated).term(), term);
}

TEST(RaftCheckQuorum, LeaderCutOffFromTheMajorityStepsDown) {
  Cluster c(3, RaftConfig{});
  c.run(2s);
  auto leader = c.leader();
  ASSERT_TRUE(leader.has_value());
  c.run(3 * RaftConfig{}.election_timeout, {*leader});
  EXPECT_EQ(c.raft(*leader).role(), Role::kFollower);
  EXPECT_EQ(c.raft(*leader).leader(), kNoNode);
}

TEST(RaftCheckQuorum, LeaderWithAMajorityStays) {
  Cluster c(5, RaftConfig{});
  c.run(2s);
  auto leader = c.leader();
  ASSERT_TRUE(leader.has_value());
  std::vector<NodeId> side = {*leader};
  for (NodeId id = 1; id <= 5 && side.size() < 3; ++id) {
    if (id != *leader) side.push_back(id);
  }
  const Term term = c.raft(*leader).term();
  c.run(5s, side);
  EXPECT_EQ(c.raft(*leader).role(), Role::kLeader);
  EXPECT_EQ(c.raft(*leader).term(), term);
}

// --- fast election on a detected leader loss ------------------------------------------------

// Crashes the leader of a settled 3-voter cluster; the survivors' failure detectors report it
// at `detected` after the crash (both at once, the worst case for a split vote). Returns how
// long after the crash a survivor led.
Duration fast_election_after_leader_crash(std::uint64_t runs_before, Duration detected) {
  Cluster c(3, RaftConfig{});
  c.run(2s + Duration(std::chrono::milliseconds(static_cast<std::int64_t>(runs_before))));
  const auto old = c.leader();
  EXPECT_TRUE(old.has_value());
  c.crash(*old);
  const TimePoint crashed = c.now();
  const std::vector<NodeId> survivors = all_but(*old, 3);
  c.run(detected, survivors);
  for (NodeId id : survivors) {
    Effects e;
    c.raft(id).leader_unreachable(c.now(), *old, e);
    EXPECT_TRUE(e.leader_change.has_value()) << "node " << id << " forgot no leader";
    c.carry_out(id, e);
  }
  while (!c.leader() && c.now() - crashed < 10s) c.run(1ms, survivors);
  EXPECT_TRUE(c.leader().has_value());
  return c.now() - crashed;
}

TEST(RaftFastElection, SurvivorsElectWithinAnEighthTimeoutOfTheDetection) {
  const Duration t = RaftConfig{}.election_timeout;
  std::vector<Duration> took;
  for (std::uint64_t k = 0; k < 40; ++k) took.push_back(fast_election_after_leader_crash(k * 7, 20ms));
  std::sort(took.begin(), took.end());
  // Without the shortcut a survivor campaigns a whole election timeout after the leader's last
  // heartbeat at the earliest: [t, 2t) after it. The first survivor's turn ends at t / 16; a
  // pre-vote and a vote take a few message times.
  EXPECT_LT(took.back(), 20ms + t / 8) << "slowest";
  // Both learn of the loss at once, yet their turns never split the vote (a split falls back
  // to the normal timer, >= t).
  const auto slow = std::count_if(took.begin(), took.end(), [&](Duration d) { return d >= t; });
  EXPECT_EQ(slow, 0) << "of " << took.size();
}

TEST(RaftFastElection, OneVoterSuspectingALiveLeaderDisruptsNothing) {
  Cluster c(3, RaftConfig{});
  c.run(2s);
  const auto leader = c.leader();
  ASSERT_TRUE(leader.has_value());
  const Term term = c.raft(*leader).term();
  const NodeId suspicious = *leader == 3 ? 2 : 3;
  Effects e;
  c.raft(suspicious).leader_unreachable(c.now(), *leader, e);
  c.carry_out(suspicious, e);
  EXPECT_EQ(c.raft(suspicious).leader(), kNoNode);
  c.run(5s);  // its pre-votes are refused by the voter that hears the leader
  EXPECT_EQ(c.leader(), leader);
  EXPECT_EQ(c.raft(*leader).term(), term);
  EXPECT_EQ(c.raft(suspicious).leader(), *leader) << "follows the live leader again";
}

// The dead leader's last heartbeat, read by a survivor after its failure detector declared the
// leader gone (the heartbeat came over the leader's connection to it, the drop was seen on the
// survivor's own): applied, but it renews no lease, so the survivors still elect within the fast
// election's turns instead of waiting out a whole timeout (seen on the GPU machine: ~1.7 s).
TEST(RaftFastElection, ALateHeartbeatOfTheDeadLeaderRenewsNoLease) {
  const Duration t = RaftConfig{}.election_timeout;
  Cluster c(3, RaftConfig{});
  c.run(2s);
  const auto old = c.leader();
  ASSERT_TRUE(old.has_value());
  const Term term = c.raft(*old).term();
  c.crash(*old);
  const TimePoint crashed = c.now();
  const std::vector<NodeId> survivors = all_but(*old, 3);
  c.run(20ms, survivors);
  for (NodeId id : survivors) {
    Effects e;
    c.raft(id).leader_unreachable(c.now(), *old, e);
    c.carry_out(id, e);
    // Then its heartbeat arrives: this term, the log the survivor has.
    Effects late;
    AppendEntries heartbeat;
    heartbeat.term = term;
    heartbeat.prev_log_index = c.raft(id).last_index();
    heartbeat.prev_log_term = c.raft(id).last_term();
    heartbeat.leader_commit = c.raft(id).commit_index();
    c.raft(id).on_message(c.now(), Message{*old, id, heartbeat}, late);
    c.carry_out(id, late);
    EXPECT_EQ(c.raft(id).leader(), *old) << "it follows the leader it heard";
  }
  while (!c.leader() && c.now() - crashed < 10s) c.run(1ms, survivors);
  ASSERT_TRUE(c.leader().has_value());
  EXPECT_NE(*c.leader(), *old);
  EXPECT_LT(c.now() - crashed, 20ms + t / 8) << "the late heartbeat held the election up";
}

TEST(RaftFastElection, NoOpUnlessFollowingExactlyThatLeaderTable) {
  Cluster c(3, RaftConfig{});
  c.run(2s);
  const auto leader = c.leader();
  ASSERT_TRUE(leader.has_value());
  const NodeId follower = *leader == 1 ? 2 : 1;
  const NodeId other = 6 - *leader - follower;
  struct Case {
    const char* name;
    NodeId at;
    NodeId suspect;
  };
  const Case cases[] = {
      {"the leader told its own host is gone", *leader, *leader},
      {"the leader told a follower is gone", *leader, follower},
      {"a follower told of another node", follower, other},
      {"a follower told of itself", follower, follower},
      {"a follower told of no node", follower, kNoNode},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    const Role role = c.raft(k.at).role();
    const NodeId follows = c.raft(k.at).leader();
    const TimePoint deadline = c.raft(k.at).next_deadline();
    Effects e;
    c.raft(k.at).leader_unreachable(c.now(), k.suspect, e);
    EXPECT_FALSE(e.leader_change.has_value());
    EXPECT_TRUE(e.sends.empty());
    EXPECT_EQ(c.raft(k.at).role(), role);
    EXPECT_EQ(c.raft(k.at).leader(), follows);
    EXPECT_EQ(c.raft(k.at).next_deadline(), deadline);
  }
}

// --- read index -----------------------------------------------------------------------------

// The read round an AppendEntries carries or an AppendReply echoes; nullopt for other messages.
std::optional<std::uint64_t> read_round(const Message& m) {
  if (const auto* ae = std::get_if<AppendEntries>(&m.body)) return ae->read_round;
  if (const auto* reply = std::get_if<AppendReply>(&m.body)) return reply->read_round;
  return std::nullopt;
}

// The highest read round among queued AppendEntries (0 if none).
std::uint64_t latest_round(const Cluster& c) {
  std::uint64_t round = 0;
  for (const Message& m : c.queued()) {
    if (std::holds_alternative<AppendEntries>(m.body)) round = std::max(round, *read_round(m));
  }
  return round;
}

// A cluster of `n` voters with a settled leader that committed one command; nothing queued.
NodeId settle(Cluster& c) {
  c.run(2s);
  const auto leader = c.leader();
  EXPECT_TRUE(leader.has_value());
  if (!leader) return kNoNode;
  EXPECT_TRUE(c.propose(*leader, "w").accepted);
  c.run(200ms);
  c.drop_all();
  return *leader;
}

TEST(RaftRead, ConfirmedByAMajorityOfVotersTable) {
  struct Case {
    const char* name;
    std::size_t voters;
    std::size_t answering;  // followers that exchange messages with the leader after the read
    bool released;
  };
  const std::vector<Case> cases = {
      {"3 voters, both followers answer", 3, 2, true},
      {"3 voters, one follower answers (a majority with the leader)", 3, 1, true},
      {"3 voters, none answers", 3, 0, false},
      {"5 voters, one follower answers", 5, 1, false},
      {"5 voters, two followers answer", 5, 2, true},
      {"5 voters, all answer", 5, 4, true},
  };
  for (const auto& k : cases) {
    SCOPED_TRACE(k.name);
    Cluster c(k.voters, RaftConfig{});
    const NodeId leader = settle(c);
    ASSERT_NE(leader, kNoNode);
    const Index commit = c.raft(leader).commit_index();
    ASSERT_GE(commit, 2u);  // the no-op and "w"
    const ReadOutcome read = c.read(leader);
    ASSERT_TRUE(read.accepted) << read.refusal;
    EXPECT_TRUE(c.reads_ready(leader).empty()) << "released before any follower answered";
    std::vector<NodeId> side = {leader};
    for (NodeId id : c.ids()) {
      if (id != leader && side.size() < k.answering + 1) side.push_back(id);
    }
    c.deliver_between(side);  // no time passes: only the read's own round can confirm it
    if (k.released) {
      EXPECT_EQ(c.reads_ready(leader), (std::vector<ReadState>{{read.id, commit}}));
    } else {
      EXPECT_TRUE(c.reads_ready(leader).empty());
      // It waits, not fails: the rest of the voters answering releases it.
      c.deliver_between(c.ids());
      EXPECT_EQ(c.reads_ready(leader), (std::vector<ReadState>{{read.id, commit}}));
    }
    EXPECT_TRUE(c.reads_failed(leader).empty());
  }
}

TEST(RaftRead, RepliesToAppendEntriesSentBeforeTheReadDoNotConfirmIt) {
  Cluster c(3, RaftConfig{});
  const NodeId leader = settle(c);
  ASSERT_NE(leader, kNoNode);
  // Entries sent (and acknowledged) before the read was asked for prove nothing about the time
  // after it: a new leader may have been elected in between.
  ASSERT_TRUE(c.propose(leader, "before").accepted);
  const std::uint64_t before = latest_round(c);
  const Index commit = c.raft(leader).commit_index();
  const ReadOutcome read = c.read(leader);
  ASSERT_TRUE(read.accepted);
  ASSERT_GT(latest_round(c), before);
  c.deliver([&](const Message& m) { return read_round(m) == before; });
  EXPECT_GT(c.raft(leader).commit_index(), commit) << "the earlier round committed \"before\"";
  EXPECT_TRUE(c.reads_ready(leader).empty());
  c.deliver_between(c.ids());
  // The read index is the commit index when the read was asked for.
  EXPECT_EQ(c.reads_ready(leader), (std::vector<ReadState>{{read.id, commit}}));
}

TEST(RaftRead, PartitionedLeaderThatDoesNotKnowItIsDeposedNeverReleases) {
  Cluster c(3, RaftConfig{});
  const NodeId old_leader = settle(c);
  ASSERT_NE(old_leader, kNoNode);
  const Term old_term = c.raft(old_leader).term();
  const std::vector<NodeId> majority = all_but(old_leader, 3);
  // The majority elects a new leader and commits a write; the old leader hears nothing of it
  // (it is not even ticked, so CheckQuorum cannot tell it either).
  std::optional<NodeId> new_leader;
  for (int round = 0; round < 20 && !new_leader; ++round) {
    c.fire(majority[round % 2]);
    c.deliver_between(majority);
    c.drop_all();
    for (NodeId id : majority) {
      if (c.raft(id).role() == Role::kLeader) new_leader = id;
    }
  }
  ASSERT_TRUE(new_leader.has_value());
  ASSERT_TRUE(c.propose(*new_leader, "newer").accepted);
  c.deliver_between(majority);
  const Index newer = c.raft(*new_leader).commit_index();
  ASSERT_EQ(c.raft(old_leader).role(), Role::kLeader);
  ASSERT_EQ(c.raft(old_leader).term(), old_term);
  ASSERT_LT(c.raft(old_leader).commit_index(), newer) << "the old leader's table is stale";

  const ReadOutcome read = c.read(old_leader);
  ASSERT_TRUE(read.accepted) << "it still believes it leads";
  EXPECT_TRUE(c.reads_ready(old_leader).empty());
  // Healed: its heartbeat round reaches the majority, whose replies carry the newer term.
  c.deliver_between(c.ids());
  EXPECT_TRUE(c.reads_ready(old_leader).empty()) << "a stale read was released";
  EXPECT_EQ(c.reads_failed(old_leader), (std::vector<ReadId>{read.id}));
  EXPECT_NE(c.raft(old_leader).role(), Role::kLeader);
  // The new leader answers the same read with the newer write in it.
  const ReadOutcome again = c.read(*new_leader);
  ASSERT_TRUE(again.accepted);
  c.deliver_between(c.ids());
  EXPECT_EQ(c.reads_ready(*new_leader), (std::vector<ReadState>{{again.id, newer}}));
}

TEST(RaftRead, ReadBeforeTheLeadersNoOpCommitsWaitsForIt) {
  Cluster c(3, RaftConfig{});
  // Elect node 1 but hold back its AppendEntries: its no-op is not committed yet.
  c.fire(1);
  c.deliver([](const Message& m) {
    return std::holds_alternative<VoteRequest>(m.body) || std::holds_alternative<VoteReply>(m.body);
  });
  ASSERT_EQ(c.raft(1).role(), Role::kLeader);
  ASSERT_EQ(c.raft(1).commit_index(), 0u);
  const Index noop = c.raft(1).last_index();
  const ReadOutcome read = c.read(1);
  ASSERT_TRUE(read.accepted) << read.refusal;
  EXPECT_EQ(latest_round(c), 0u) << "no round starts before the commit index is known";
  // The no-op's round-0 AppendEntries commit it; only then does the read's round start.
  c.deliver([](const Message& m) { return read_round(m) == 0u; });
  EXPECT_EQ(c.raft(1).commit_index(), noop);
  EXPECT_TRUE(c.reads_ready(1).empty());
  EXPECT_GT(latest_round(c), 0u);
  c.deliver_between(c.ids());
  EXPECT_EQ(c.reads_ready(1), (std::vector<ReadState>{{read.id, noop}}));
}

TEST(RaftRead, SteppingDownFailsEveryPendingReadTable) {
  struct Case {
    const char* name;
    std::function<void(Cluster&, NodeId leader)> depose;
  };
  const std::vector<Case> cases = {
      {"an AppendReply of a higher term",
       [](Cluster& c, NodeId leader) {
         const NodeId other = leader == 1 ? 2 : 1;
         Effects e;
         c.raft(leader).on_message(
             c.now(),
             Message{other, leader, AppendReply{c.raft(leader).term() + 1, false, 0, 0, 0, 0}}, e);
         c.carry_out(leader, e);
       }},
      {"CheckQuorum, cut off from the others",
       [](Cluster& c, NodeId leader) { c.run(3 * RaftConfig{}.election_timeout, {leader}); }},
  };
  for (const auto& k : cases) {
    SCOPED_TRACE(k.name);
    Cluster c(3, RaftConfig{});
    const NodeId leader = settle(c);
    ASSERT_NE(leader, kNoNode);
    const ReadOutcome first = c.read(leader);
    const ReadOutcome second = c.read(leader);
    ASSERT_TRUE(first.accepted && second.accepted);
    EXPECT_NE(first.id, second.id);
    k.depose(c, leader);
    ASSERT_NE(c.raft(leader).role(), Role::kLeader);
    EXPECT_TRUE(c.reads_ready(leader).empty());
    EXPECT_EQ(c.reads_failed(leader), (std::vector<ReadId>{first.id, second.id}));
    // The replies to its last round, arriving late, release nothing.
    c.deliver_between(c.ids());
    EXPECT_TRUE(c.reads_ready(leader).empty());
  }
}

TEST(RaftRead, SingleVoterReleasesAtOnce) {
  Cluster c(1, RaftConfig{});
  c.run(1s);
  ASSERT_EQ(c.leader(), NodeId{1});
  ASSERT_TRUE(c.propose(1, "solo").accepted);
  const ReadOutcome read = c.read(1);
  ASSERT_TRUE(read.accepted);
  EXPECT_EQ(c.reads_ready(1), (std::vector<ReadState>{{read.id, c.raft(1).commit_index()}}));
  EXPECT_TRUE(c.queued().empty());
}

TEST(RaftRead, FollowerRefusesAndNamesTheLeader) {
  Cluster c(3, RaftConfig{});
  const NodeId leader = settle(c);
  ASSERT_NE(leader, kNoNode);
  const NodeId follower = leader == 1 ? 2 : 1;
  const ReadOutcome read = c.read(follower);
  EXPECT_FALSE(read.accepted);
  EXPECT_EQ(read.leader_hint, leader);
  EXPECT_EQ(read.refusal, "This node is not the Raft leader.");
  EXPECT_TRUE(c.queued().empty());
}

TEST(RaftRead, ALeaderHoldsAtMostkMaxPendingReads) {
  Cluster c(3, RaftConfig{});
  const NodeId leader = settle(c);
  ASSERT_NE(leader, kNoNode);
  for (std::size_t i = 0; i < kMaxPendingReads; ++i) {
    c.drop_all();  // nobody answers, but to the last round
    ASSERT_TRUE(c.read(leader).accepted) << i;
  }
  const ReadOutcome refused = c.read(leader);
  EXPECT_FALSE(refused.accepted);
  EXPECT_NE(refused.refusal.find("4096 reads waiting"), std::string::npos) << refused.refusal;
  EXPECT_EQ(refused.leader_hint, leader);
  // The answered last round confirms every earlier read too.
  c.deliver_between(c.ids());
  EXPECT_EQ(c.reads_ready(leader).size(), kMaxPendingReads);
  EXPECT_TRUE(c.read(leader).accepted);
}

// --- snapshots ------------------------------------------------------------------------------

// A follower of a 3-voter group (leader 2, term 3) that has applied `terms.size()` entries.
Raft applied_follower(const std::vector<Term>& terms) {
  Raft r(1, {1, 2, 3}, RaftConfig{}, Recovered{{3, kNoNode}, log_of_terms(terms)}, 7, kStart);
  Effects e;
  r.on_message(kStart,
               Message{2, 1, AppendEntries{3, terms.size(), terms.back(), {}, terms.size()}}, e);
  EXPECT_EQ(r.last_applied(), terms.size());
  return r;
}

TEST(RaftSnapshot, CompactionTable) {
  struct Case {
    const char* name;
    Index upto;
    std::size_t data_bytes;
    bool ok;
    Index snapshot_after;  // r.snapshot_index() afterwards
    bool persists;
  };
  const std::vector<Case> cases = {
      {"compact the applied prefix", 3, 3, true, 3, true},
      {"compact everything applied", 5, 0, true, 5, true},
      {"beyond the applied index", 6, 3, false, 0, false},
      {"nothing to compact", 0, 3, true, 0, false},
      {"over the size limit", 3, kMaxSnapshotBytes + 1, false, 0, false},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Raft r = applied_follower({1, 1, 2, 2, 3});
    Effects e;
    const Status status = r.compact(c.upto, std::string(c.data_bytes, 'm'), e);
    EXPECT_EQ(status.ok(), c.ok);
    if (!status.ok()) {
      EXPECT_FALSE(status.error().message.empty());
    }
    EXPECT_EQ(r.snapshot_index(), c.snapshot_after);
    EXPECT_EQ(e.persist.snapshot.has_value(), c.persists);
    EXPECT_TRUE(e.sends.empty());
    EXPECT_EQ(r.last_index(), 5u);
    EXPECT_EQ(r.last_term(), 3u);
    if (c.persists) {
      EXPECT_EQ(*e.persist.snapshot,
                (Snapshot{c.upto, r.term_at(c.upto), {1, 2, 3}, std::string(c.data_bytes, 'm')}));
      EXPECT_EQ(r.first_index(), c.upto + 1);
      EXPECT_EQ(r.log().size(), 5 - c.upto);
    }
  }
  // A second compaction at or below the first is a no-op.
  Raft r = applied_follower({1, 1, 2, 2, 3});
  Effects e;
  ASSERT_TRUE(r.compact(4, "a", e).ok());
  ASSERT_TRUE(r.compact(3, "b", e).ok());
  EXPECT_FALSE(e.persist.snapshot.has_value());
  EXPECT_EQ(r.snapshot().data, "a");
}

TEST(RaftSnapshot, TermLookupsAtTheSnapshotBoundary) {
  Raft r = applied_follower({1, 1, 2, 2, 3});
  Effects e;
  ASSERT_TRUE(r.compact(4, "sm", e).ok());
  EXPECT_EQ(r.term_at(4), 2u) << "the snapshot's last term stays known";
  EXPECT_EQ(r.term_at(3), 0u) << "compacted";
  EXPECT_EQ(r.term_at(5), 3u);
  EXPECT_EQ(r.entry(5).term, 3u);
  struct Case {
    const char* name;
    AppendEntries request;
    bool success;
    Index match_or_conflict;
    std::vector<Term> log_after;  // terms from first_index() on
  };
  auto entries = [](Index first, std::vector<Term> terms) {
    std::vector<Entry> v;
    for (Term t : terms) v.push_back(Entry{t, first++, EntryType::kCommand, "x"});
    return v;
  };
  const std::vector<Case> cases = {
      {"prev at the boundary", {3, 4, 2, entries(5, {3, 3}), 5}, true, 6, {3, 3}},
      {"prev below the boundary: covered entries skipped",
       {3, 2, 1, entries(3, {2, 2, 3, 3}), 5},
       true,
       6,
       {3, 3}},
      {"entirely inside the snapshot", {3, 1, 1, entries(2, {1, 2}), 5}, true, 4, {3}},
      {"prev beyond the log", {3, 7, 3, {}, 5}, false, 6, {3}},
      {"conflict right after the boundary: hint stops at the first index",
       {3, 5, 4, {}, 5},
       false,
       5,
       {3}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Raft f = applied_follower({1, 1, 2, 2, 3});
    Effects x;
    ASSERT_TRUE(f.compact(4, "sm", x).ok());
    f.on_message(kStart, Message{2, 1, c.request}, x);
    ASSERT_EQ(x.sends.size(), 1u);
    const auto& reply = std::get<AppendReply>(x.sends[0].body);
    EXPECT_EQ(reply.success, c.success);
    EXPECT_EQ(c.success ? reply.match_index : reply.conflict_index, c.match_or_conflict);
    std::vector<Term> terms;
    for (const auto& entry : f.log()) terms.push_back(entry.term);
    EXPECT_EQ(terms, c.log_after);
  }
}

TEST(RaftSnapshot, InstallSnapshotTable) {
  struct Case {
    const char* name;
    std::vector<Term> follower_log;
    Index follower_commit;
    Snapshot snapshot;
    bool installed;
    Index reply_match;
    std::optional<Index> truncated_from;
    Index last_index_after;
  };
  const Snapshot at10{10, 2, {1, 2, 3, 4}, "sm10"};
  const std::vector<Case> cases = {
      {"short log: replaced", {1, 1, 2}, 3, at10, true, 10, {}, 10},
      {"stale (below commit): ignored", {1, 1, 2}, 3, {2, 1, {1, 2, 3}, "old"}, false, 3, {}, 3},
      {"matching entry: suffix kept", {1, 1, 2, 2, 2}, 0, {3, 2, {1, 2}, "s3"}, true, 3, {}, 5},
      {"conflicting entry: log discarded", {1, 1, 1, 1}, 0, {2, 2, {1, 2}, "s2"}, true, 2, 3, 2},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Raft r(1, {1, 2, 3}, RaftConfig{}, Recovered{{3, kNoNode}, log_of_terms(c.follower_log)}, 7,
           kStart);
    Effects e;
    if (c.follower_commit > 0) {
      r.on_message(kStart,
                   Message{2, 1,
                           AppendEntries{3,
                                         c.follower_commit,
                                         c.follower_log[c.follower_commit - 1],
                                         {},
                                         c.follower_commit}},
                   e);
      ASSERT_EQ(r.commit_index(), c.follower_commit);
    }
    r.on_message(kStart, Message{2, 1, InstallSnapshot{3, c.snapshot}}, e);
    ASSERT_EQ(e.sends.size(), 1u);
    EXPECT_EQ(std::get<InstallSnapshotReply>(e.sends[0].body).match_index, c.reply_match);
    EXPECT_EQ(e.persist.snapshot.has_value(), c.installed);
    EXPECT_EQ(e.restore.has_value(), c.installed);
    EXPECT_EQ(e.persist.truncate_from, c.truncated_from);
    EXPECT_TRUE(e.apply.empty());
    EXPECT_EQ(r.last_index(), c.last_index_after);
    if (c.installed) {
      EXPECT_EQ(*e.restore, c.snapshot);
      EXPECT_EQ(r.commit_index(), c.snapshot.last_index);
      EXPECT_EQ(r.last_applied(), c.snapshot.last_index);
      EXPECT_EQ(r.voters(), c.snapshot.voters) << "the snapshot's config is in force";
      // The same snapshot again (a duplicate) changes nothing and is acknowledged.
      r.on_message(kStart, Message{2, 1, InstallSnapshot{3, c.snapshot}}, e);
      EXPECT_TRUE(e.persist.empty());
      EXPECT_FALSE(e.restore.has_value());
      ASSERT_EQ(e.sends.size(), 1u);
      EXPECT_EQ(std::get<InstallSnapshotReply>(e.sends[0].body).match_index, c.snapshot.last_index);
    }
  }
  // A snapshot from a stale term is refused with the current term.
  Raft r(1, {1, 2, 3}, RaftConfig{}, Recovered{{5, kNoNode}, {}}, 7, kStart);
  Effects e;
  r.on_message(kStart, Message{2, 1, InstallSnapshot{4, at10}}, e);
  EXPECT_FALSE(e.restore.has_value());
  ASSERT_EQ(e.sends.size(), 1u);
  EXPECT_EQ(std::get<InstallSnapshotReply>(e.sends[0].body).term, 5u);
}

TEST(RaftSnapshot, LaggingFollowerCatchesUpByInstallSnapshot) {
  Cluster c(3, RaftConfig{});
  c.run(2s);
  auto leader = c.leader();
  ASSERT_TRUE(leader.has_value());
  const NodeId lagging = *leader == 3 ? 2 : 3;
  c.crash(lagging);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(c.propose(*leader, "p" + std::to_string(i)).accepted);
  c.run(300ms, all_but(lagging, 3));
  for (NodeId id : all_but(lagging, 3)) c.compact(id);
  const Index snap = c.raft(*leader).snapshot_index();
  ASSERT_GE(snap, 11u);
  c.restart(lagging);
  c.run(1s);
  ASSERT_TRUE(c.restored(lagging).has_value()) << "the follower got InstallSnapshot";
  EXPECT_EQ(c.restored(lagging)->last_index, snap);
  EXPECT_EQ(c.restored(lagging)->data, "sm@" + std::to_string(snap));
  ASSERT_TRUE(c.durable_snapshot(lagging).has_value()) << "persisted before it was used";
  EXPECT_EQ(c.durable_snapshot(lagging)->last_index, snap);
  EXPECT_EQ(c.raft(lagging).commit_index(), c.raft(*leader).commit_index());
  // Applying continues right after the snapshot.
  auto outcome = c.propose(*leader, "after");
  ASSERT_TRUE(outcome.accepted);
  c.run(300ms);
  ASSERT_FALSE(c.applied(lagging).empty());
  EXPECT_EQ(c.applied(lagging).front().index, snap + 1);
  EXPECT_EQ(c.applied(lagging).back().data, "after");
  // A restart rebuilds from the durable snapshot, then the log.
  c.crash(lagging);
  c.restart(lagging);
  EXPECT_EQ(c.raft(lagging).last_applied(), snap);
  EXPECT_EQ(c.raft(lagging).first_index(), snap + 1);
  c.run(300ms);
  EXPECT_EQ(c.applied(lagging).back().data, "after");
}

// A voter that lost its log (rebuilt from its peers) is caught up again: the leader had it
// matched at the end of the log and used to keep sending from there, refused for ever.
TEST(RaftReplication, AFollowerThatLostItsLogIsCaughtUpAgain) {
  Cluster c(3, RaftConfig{});
  c.run(2s);
  auto leader = c.leader();
  ASSERT_TRUE(leader.has_value());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(c.propose(*leader, "p" + std::to_string(i)).accepted);
  c.run(300ms);
  const NodeId wiped = *leader == 3 ? 2 : 3;
  ASSERT_EQ(c.raft(wiped).last_index(), c.raft(*leader).last_index());
  c.crash(wiped);
  c.wipe(wiped);
  c.restart(wiped);
  c.run(1s);
  EXPECT_EQ(c.leader(), leader);
  EXPECT_EQ(c.raft(wiped).last_index(), c.raft(*leader).last_index());
  EXPECT_EQ(c.durable_log(wiped), c.durable_log(*leader));
  EXPECT_EQ(c.raft(wiped).commit_index(), c.raft(*leader).commit_index());
  // And it counts again: with the other follower gone, the leader commits with it.
  const NodeId other = 6 - *leader - wiped;
  c.crash(other);
  const auto outcome = c.propose(*leader, "with the rebuilt one");
  ASSERT_TRUE(outcome.accepted);
  c.run(300ms, all_but(other, 3));
  EXPECT_GE(c.raft(*leader).commit_index(), outcome.index);
}

// A follower answers an AppendEntries of an older term (a late copy sent while this same node
// led an earlier term) with its current term and no conflict. The leader of that term must learn
// nothing from it: it used to read it as "the follower's log ends before index 1", set the
// follower's match index to 0 - 1 (wrapping around to the largest index) and so count the
// follower as holding every entry -- a commit without a majority. Found by the node-core
// simulator (long delays, seed 26 of RandomFaultsWithLongDelays).
TEST(RaftReplication, AStaleTermRefusalTeachesTheLeaderNothing) {
  Cluster c(3, RaftConfig{});
  c.run(2s);
  const auto leader = c.leader();
  ASSERT_TRUE(leader.has_value());
  const NodeId f1 = *leader % 3 + 1;
  const NodeId f2 = f1 % 3 + 1;
  c.crash(f1);
  c.crash(f2);
  const Index committed = c.raft(*leader).commit_index();
  const auto outcome = c.propose(*leader, "only on the leader");
  ASSERT_TRUE(outcome.accepted);
  Effects e;
  c.raft(*leader).on_message(
      c.now(),
      Message{.from = f1,
              .to = *leader,
              .body = AppendReply{c.raft(*leader).term(), false, 0, 0, 0, 0}},
      e);
  c.carry_out(*leader, e);
  EXPECT_EQ(c.raft(*leader).commit_index(), committed);
  // The follower, back, is caught up by ordinary AppendEntries and then counts again.
  c.restart(f1);
  c.run(500ms, all_but(f2, 3));
  EXPECT_GE(c.raft(*leader).commit_index(), outcome.index);
  EXPECT_EQ(c.raft(f1).last_index(), c.raft(*leader).last_index());
}

// --- voter changes --------------------------------------------------------------------------

TEST(RaftVoterChange, RefusalsAndTheOneChangeRule) {
  // A fresh 3-voter leader elected by hand; nothing of its term committed yet.
  Raft r(1, {1, 2, 3}, RaftConfig{}, Recovered{}, 7, kStart);
  Effects e;
  const TimePoint t = r.next_deadline();
  r.tick(t, e);
  r.on_message(t, Message{2, 1, VoteReply{true, 1, true}}, e);
  r.on_message(t, Message{2, 1, VoteReply{false, 1, true}}, e);
  ASSERT_EQ(r.role(), Role::kLeader);
  using K = VoterChange::Kind;
  struct Step {
    const char* name;
    std::function<void()> before;
    VoterChange change;
    bool accepted;
    const char* refusal;  // a substring
  };
  const std::vector<Step> steps = {
      {"before its term has a commit", [] {}, {K::kAdd, 4}, false, "not yet committed an entry"},
      {"after the no-op commits",
       [&] {
         r.on_message(t, Message{2, 1, AppendReply{1, true, 1, 0, 0}}, e);
       },
       {K::kAdd, 4},
       true,
       ""},
      {"a second change while the first is uncommitted",
       [] {},
       {K::kAdd, 5},
       false,
       "not committed yet"},
      {"still uncommitted with 2 of 4",
       [&] {
         r.on_message(t, Message{2, 1, AppendReply{1, true, 2, 0, 0}}, e);
       },
       {K::kRemove, 2},
       false,
       "not committed yet"},
      {"committed with 3 of 4",
       [&] {
         r.on_message(t, Message{3, 1, AppendReply{1, true, 2, 0, 0}}, e);
       },
       {K::kAdd, 4},
       false,
       "already a voter"},
      {"remove a non-voter", [] {}, {K::kRemove, 9}, false, "not a voter"},
      {"node id 0", [] {}, {K::kAdd, 0}, false, "id 0"},
      {"remove a follower", [] {}, {K::kRemove, 4}, true, ""},
  };
  for (const auto& step : steps) {
    SCOPED_TRACE(step.name);
    step.before();
    auto outcome = r.propose_voter_change(t, step.change, e);
    EXPECT_EQ(outcome.accepted, step.accepted) << outcome.refusal;
    EXPECT_NE(outcome.refusal.find(step.refusal), std::string::npos) << outcome.refusal;
    if (outcome.accepted) {
      ASSERT_EQ(e.persist.append.size(), 1u);
      EXPECT_EQ(e.persist.append[0].type, EntryType::kConfig);
      EXPECT_EQ(r.config_index(), outcome.index) << "in force as soon as appended";
      EXPECT_EQ(decode_voters(e.persist.append[0].data), r.voters());
    }
  }
  EXPECT_EQ(r.voters(), (std::vector<NodeId>{1, 2, 3}));

  // A follower redirects; a lone voter cannot remove itself.
  Raft follower(2, {1, 2, 3}, RaftConfig{}, Recovered{}, 7, kStart);
  auto redirected = follower.propose_voter_change(t, {K::kAdd, 4}, e);
  EXPECT_FALSE(redirected.accepted);
  EXPECT_NE(redirected.refusal.find("not the Raft leader"), std::string::npos);
  Raft solo(1, {1}, RaftConfig{}, Recovered{}, 7, kStart);
  solo.tick(solo.next_deadline(), e);
  ASSERT_EQ(solo.role(), Role::kLeader);
  auto last = solo.propose_voter_change(t, {K::kRemove, 1}, e);
  EXPECT_FALSE(last.accepted);
  EXPECT_NE(last.refusal.find("last voter"), std::string::npos);
  // A lone voter may add a second; from then on commits need both.
  auto add = solo.propose_voter_change(t, {K::kAdd, 2}, e);
  EXPECT_TRUE(add.accepted) << add.refusal;
  EXPECT_EQ(solo.commit_index(), add.index - 1);
}

TEST(RaftVoterChange, NodeOutsideTheConfigNeverCampaigns) {
  Raft r(4, {1, 2, 3}, RaftConfig{}, Recovered{}, 7, kStart);
  TimePoint t = kStart;
  for (int i = 0; i < 20; ++i) {
    t = r.next_deadline();
    Effects e;
    r.tick(t, e);
    EXPECT_TRUE(e.sends.empty());
    EXPECT_TRUE(e.persist.empty());
  }
  EXPECT_EQ(r.role(), Role::kFollower);
  EXPECT_EQ(r.term(), 0u);
  // It follows a leader it hears from, and a config entry naming it makes it a voter.
  Effects e;
  r.on_message(t,
               Message{1, 4,
                       AppendEntries{2,
                                     0,
                                     0,
                                     {Entry{2, 1, EntryType::kNoop, ""},
                                      Entry{2, 2, EntryType::kConfig, encode_voters({1, 2, 3, 4})}},
                                     0}},
               e);
  EXPECT_EQ(r.leader(), 1u);
  EXPECT_TRUE(r.is_voter(4));
  EXPECT_EQ(r.config_index(), 2u);
}

TEST(RaftVoterChange, TruncatedConfigEntryRevertsToThePreviousConfig) {
  Raft r(1, {1, 2, 3}, RaftConfig{}, Recovered{{2, kNoNode}, log_of_terms({1, 1})}, 7, kStart);
  Effects e;
  r.on_message(
      kStart,
      Message{2, 1,
              AppendEntries{2, 2, 1, {Entry{2, 3, EntryType::kConfig, encode_voters({1, 2})}}, 2}},
      e);
  EXPECT_EQ(r.voters(), (std::vector<NodeId>{1, 2}));
  EXPECT_EQ(r.config_index(), 3u);
  // A leader of term 3 overwrites index 3: back to the bootstrap config.
  r.on_message(kStart,
               Message{3, 1, AppendEntries{3, 2, 1, {Entry{3, 3, EntryType::kNoop, ""}}, 2}}, e);
  EXPECT_EQ(e.persist.truncate_from, 3u);
  EXPECT_EQ(r.voters(), (std::vector<NodeId>{1, 2, 3}));
  EXPECT_EQ(r.config_index(), 0u);
}

// Proposals until `id` applied one more entry; returns false if it never does.
bool commit_one(Cluster& c, NodeId leader, NodeId observer, const std::string& data) {
  if (!c.propose(leader, data).accepted) return false;
  c.run(300ms);
  return !c.applied(observer).empty() && c.applied(observer).back().data == data;
}

TEST(RaftVoterChange, AddedVoterCatchesUpBySnapshot) {
  Cluster c(3, RaftConfig{}, 1);
  c.run(2s);
  auto leader = c.leader();
  ASSERT_TRUE(leader.has_value());
  EXPECT_EQ(c.raft(4).term(), 0u) << "node 4 is outside the config and stays quiet";
  EXPECT_EQ(c.raft(4).role(), Role::kFollower);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(c.propose(*leader, "p" + std::to_string(i)).accepted);
  c.run(300ms);
  for (NodeId id = 1; id <= 3; ++id) c.compact(id);
  auto outcome = c.change(*leader, {VoterChange::Kind::kAdd, 4});
  ASSERT_TRUE(outcome.accepted) << outcome.refusal;
  c.run(1s);
  ASSERT_TRUE(c.restored(4).has_value()) << "node 4 caught up by InstallSnapshot";
  EXPECT_EQ(c.restored(4)->last_index, c.raft(*leader).snapshot_index());
  EXPECT_GE(c.raft(*leader).commit_index(), outcome.index);
  for (NodeId id = 1; id <= 4; ++id) {
    EXPECT_EQ(c.raft(id).voters(), (std::vector<NodeId>{1, 2, 3, 4})) << id;
  }
  EXPECT_TRUE(commit_one(c, *leader, 4, "with four"));
  // Four voters need three: with node 4 and one other down, nothing commits.
  const NodeId other = *leader == 1 ? 2 : 1;
  c.crash(4);
  c.crash(other);
  EXPECT_FALSE(commit_one(c, *leader, *leader, "needs three"));
}

TEST(RaftVoterChange, RemovedFollowerStopsCampaigning) {
  Cluster c(3, RaftConfig{});
  c.run(2s);
  auto leader = c.leader();
  ASSERT_TRUE(leader.has_value());
  const NodeId removed = *leader == 3 ? 2 : 3;
  auto outcome = c.change(*leader, {VoterChange::Kind::kRemove, removed});
  ASSERT_TRUE(outcome.accepted) << outcome.refusal;
  c.run(300ms);
  ASSERT_GE(c.raft(*leader).commit_index(), outcome.index);
  EXPECT_FALSE(c.raft(removed).is_voter(removed));
  const Term term = c.raft(removed).term();
  c.run(5s, all_but(removed, 3));  // cut off: a voter would campaign
  EXPECT_EQ(c.raft(removed).term(), term);
  EXPECT_EQ(c.raft(removed).role(), Role::kFollower);
  // The two remaining voters commit on their own.
  c.crash(removed);
  EXPECT_TRUE(commit_one(c, *leader, *leader, "two voters"));
}

TEST(RaftVoterChange, RemovedLeaderStepsDownOnceCommitted) {
  Cluster c(3, RaftConfig{});
  c.run(2s);
  auto leader = c.leader();
  ASSERT_TRUE(leader.has_value());
  const Term term = c.raft(*leader).term();
  auto outcome = c.change(*leader, {VoterChange::Kind::kRemove, *leader});
  ASSERT_TRUE(outcome.accepted) << outcome.refusal;
  EXPECT_EQ(c.raft(*leader).role(), Role::kLeader) << "it leads until the change commits";
  c.run(3s);
  EXPECT_NE(c.raft(*leader).role(), Role::kLeader);
  auto next = c.leader();
  ASSERT_TRUE(next.has_value());
  EXPECT_NE(*next, *leader);
  EXPECT_GT(c.raft(*next).term(), term);
  EXPECT_EQ(c.raft(*next).voters(), all_but(*leader, 3));
  EXPECT_GE(c.raft(*next).commit_index(), outcome.index);
  EXPECT_FALSE(c.raft(*leader).is_voter(*leader));
  c.run(3s);
  EXPECT_EQ(c.leader(), next) << "the removed leader does not campaign";
  EXPECT_TRUE(commit_one(c, *next, *next, "without the old leader"));
}

// --- durable log ----------------------------------------------------------------------------

std::vector<Entry> odd_entries(Term term, Index first, std::size_t n) {
  std::vector<Entry> v;
  for (std::size_t i = 0; i < n; ++i) {
    // Lengths 0, 1, 3, 5, 7, 9, ... and one large: never only multiples of 8.
    const std::size_t length = i == n - 1 ? 100003 : 2 * i + (i == 0 ? 0 : 1);
    std::string data(length, '\0');
    for (std::size_t k = 0; k < length; ++k) data[k] = static_cast<char>((k * 31 + i) & 0xff);
    v.push_back(Entry{term, first + i, i == 0 ? EntryType::kNoop : EntryType::kCommand, data});
  }
  return v;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void append_bytes_raw(const std::string& path, std::size_t keep) {
  std::filesystem::resize_file(path, keep);
}

TEST(RaftLog, Crc32cKnownAnswer) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283U);
  EXPECT_EQ(crc32c(""), 0U);
}

TEST(RaftLog, RoundTripWithOddPayloadLengthsAndTruncation) {
  testing::TempDir dir;
  ASSERT_TRUE(RaftLog::bootstrap(dir.path(), {1, 2, 3}).ok());
  std::vector<Entry> expected = odd_entries(1, 1, 9);
  {
    auto log = RaftLog::open(dir.path());
    ASSERT_TRUE(log.ok()) << log.error().message;
    EXPECT_EQ((*log)->voters(), (std::vector<NodeId>{1, 2, 3}));
    Persist p;
    p.hard_state = HardState{2, 3};
    p.append = expected;
    ASSERT_TRUE((*log)->persist(p).ok());
    // Truncate 6.. and append two of term 2.
    Persist q;
    q.truncate_from = 6;
    q.append = odd_entries(2, 6, 2);
    ASSERT_TRUE((*log)->persist(q).ok());
    expected.resize(5);
    for (auto& e : q.append) expected.push_back(e);
    EXPECT_EQ((*log)->entries(), expected);
  }
  auto reopened = RaftLog::open(dir.path());
  ASSERT_TRUE(reopened.ok()) << reopened.error().message;
  EXPECT_EQ((*reopened)->hard_state(), (HardState{2, 3}));
  EXPECT_EQ((*reopened)->entries(), expected);
  EXPECT_EQ((*reopened)->repaired_bytes(), 0u);
  // The recovered state starts a Raft core.
  Raft r(3, (*reopened)->voters(), RaftConfig{}, (*reopened)->recovered(), 1, kStart);
  EXPECT_EQ(r.last_index(), expected.size());
  EXPECT_EQ(r.term(), 2u);
}

TEST(RaftLog, TornTailIsCutOffAndTheLogStaysUsable) {
  testing::TempDir dir;
  ASSERT_TRUE(RaftLog::bootstrap(dir.path(), {1}).ok());
  const auto entries = odd_entries(1, 1, 4);
  std::uintmax_t size_before_last = 0;
  std::string mark_before_last;
  {
    auto log = RaftLog::open(dir.path());
    ASSERT_TRUE(log.ok());
    Persist p;
    p.hard_state = HardState{1, 1};
    p.append = {entries[0], entries[1], entries[2]};
    ASSERT_TRUE((*log)->persist(p).ok());
    size_before_last = std::filesystem::file_size(dir / RaftLog::kLogFile);
    mark_before_last = read_all(dir / RaftLog::kMarkFile);
    Persist q;
    q.append = {entries[3]};
    ASSERT_TRUE((*log)->persist(q).ok());
  }
  const auto full = std::filesystem::file_size(dir / RaftLog::kLogFile);
  // Cuts inside the payload, inside the header, and right after the header.
  for (std::uintmax_t keep : {full - 1, size_before_last + 3, size_before_last + 8}) {
    SCOPED_TRACE(keep);
    testing::TempDir copy;
    std::filesystem::copy(dir.path(), copy.path(),
                          std::filesystem::copy_options::recursive |
                              std::filesystem::copy_options::overwrite_existing);
    append_bytes_raw(copy / RaftLog::kLogFile, keep);
    // The crash came before the last write's fdatasync returned, so before its mark.
    copy.write(RaftLog::kMarkFile, mark_before_last);
    auto log = RaftLog::open(copy.path());
    ASSERT_TRUE(log.ok()) << log.error().message;
    EXPECT_EQ((*log)->repaired_bytes(), keep - size_before_last);
    EXPECT_EQ((*log)->entries(), (std::vector<Entry>{entries[0], entries[1], entries[2]}));
    EXPECT_EQ(std::filesystem::file_size(copy / RaftLog::kLogFile), size_before_last);
    Persist again;
    again.append = {entries[3]};
    ASSERT_TRUE((*log)->persist(again).ok());
    log = Error{"closed"};
    auto reopened = RaftLog::open(copy.path());
    ASSERT_TRUE(reopened.ok());
    EXPECT_EQ((*reopened)->entries(), entries);
  }
}

TEST(RaftLog, BadCrcInTheMiddleIsAnErrorNamingFileAndOffset) {
  testing::TempDir dir;
  ASSERT_TRUE(RaftLog::bootstrap(dir.path(), {1}).ok());
  {
    auto log = RaftLog::open(dir.path());
    ASSERT_TRUE(log.ok());
    Persist p;
    p.hard_state = HardState{1, 1};
    p.append = odd_entries(1, 1, 3);
    ASSERT_TRUE((*log)->persist(p).ok());
  }
  // Flip a byte in the second record's payload (record 1 is the 18-byte no-op: 8 + 18 bytes).
  const std::string path = dir / RaftLog::kLogFile;
  const int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  char byte = 0;
  ASSERT_EQ(::pread(fd, &byte, 1, 26 + 8 + 10), 1);
  byte = static_cast<char>(byte ^ 0x40);
  ASSERT_EQ(::pwrite(fd, &byte, 1, 26 + 8 + 10), 1);
  ::close(fd);
  auto log = RaftLog::open(dir.path());
  ASSERT_FALSE(log.ok());
  EXPECT_NE(log.error().message.find(path), std::string::npos) << log.error().message;
  EXPECT_NE(log.error().message.find("byte offset 26 (record 2)"), std::string::npos)
      << log.error().message;
  EXPECT_NE(log.error().message.find("CRC"), std::string::npos) << log.error().message;
}

TEST(RaftLog, BadCrcOnTheLastRecordIsATornWrite) {
  testing::TempDir dir;
  ASSERT_TRUE(RaftLog::bootstrap(dir.path(), {1}).ok());
  const auto entries = odd_entries(1, 1, 3);
  std::string mark_before_last;
  {
    auto log = RaftLog::open(dir.path());
    ASSERT_TRUE(log.ok());
    Persist p;
    p.hard_state = HardState{1, 1};
    p.append = {entries[0], entries[1]};
    ASSERT_TRUE((*log)->persist(p).ok());
    mark_before_last = read_all(dir / RaftLog::kMarkFile);
    Persist q;
    q.append = {entries[2]};
    ASSERT_TRUE((*log)->persist(q).ok());
  }
  // The crash came before the last write's fdatasync returned, so before its mark.
  dir.write(RaftLog::kMarkFile, mark_before_last);
  // The last record's length made it to disk but its payload did not (a zero-filled block).
  const std::string path = dir / RaftLog::kLogFile;
  const auto size = std::filesystem::file_size(path);
  const int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const char zero = 0;
  ASSERT_EQ(::pwrite(fd, &zero, 1, static_cast<off_t>(size - 5)), 1);
  ::close(fd);
  auto log = RaftLog::open(dir.path());
  ASSERT_TRUE(log.ok()) << log.error().message;
  EXPECT_EQ((*log)->entries(), (std::vector<Entry>{entries[0], entries[1]}));
  EXPECT_GT((*log)->repaired_bytes(), 100000u);
}

// --- damage that is not a torn write ----------------------------------------------------------

// Entries 1..n of term 1 (small, of varied lengths), one persist each as a voter writes them.
// Returns the byte offset at which each record starts: offsets[k - 1] for record k.
std::vector<std::uintmax_t> write_entries(const std::string& dir, Index first, std::size_t n,
                                          Term term = 1) {
  std::vector<std::uintmax_t> offsets;
  auto log = RaftLog::open(dir);
  EXPECT_TRUE(log.ok()) << log.error().message;
  if (!log.ok()) return offsets;
  for (std::size_t i = 0; i < n; ++i) {
    offsets.push_back(std::filesystem::file_size(dir + "/" + RaftLog::kLogFile));
    Persist p;
    if (i == 0) p.hard_state = HardState{term, 1};
    const Index index = first + i;
    p.append = {Entry{term, index, EntryType::kCommand,
                      "job " + std::to_string(index) + std::string(index % 7, '.')}};
    EXPECT_TRUE((*log)->persist(p).ok());
  }
  return offsets;
}

void write_u32_at(const std::string& path, std::uintmax_t offset, std::uint32_t value) {
  const int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  char bytes[4];
  for (int i = 0; i < 4; ++i) bytes[i] = static_cast<char>((value >> (8 * i)) & 0xff);
  ASSERT_EQ(::pwrite(fd, bytes, 4, static_cast<off_t>(offset)), 4);
  ::close(fd);
}

// The reproduction: record 10 of 71 gets a length that runs past the end. Cutting there as if
// it were a torn tail lost 62 acknowledged entries; it must refuse and leave the file alone.
TEST(RaftLog, LengthRunningPastTheEndInTheMiddleIsDamageNotATornTail) {
  testing::TempDir dir;
  ASSERT_TRUE(RaftLog::bootstrap(dir.path(), {1}).ok());
  const auto offsets = write_entries(dir.path(), 1, 71);
  ASSERT_EQ(offsets.size(), 71u);
  const std::string path = dir / RaftLog::kLogFile;
  write_u32_at(path, offsets[9], 0x00ffffffU);
  const std::string damaged = read_all(path);
  auto log = RaftLog::open(dir.path());
  ASSERT_FALSE(log.ok()) << "opened with " << (*log)->entries().size() << " entries";
  const std::string& message = log.error().message;
  EXPECT_NE(message.find("Raft log " + path + " is corrupt at byte offset " +
                         std::to_string(offsets[9]) + " (record 10)"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("its length 16777215 runs past the end"), std::string::npos) << message;
  EXPECT_NE(message.find("entry 71 (term 1)"), std::string::npos) << message;
  EXPECT_EQ(read_all(path), damaged) << "a refused open must not cut the file";
}

// A length that stays inside the file lands in the middle of later records: a CRC mismatch with
// records after it (and one that happens to end exactly at the end of the file).
TEST(RaftLog, WrongLengthInsideTheFileIsDamage) {
  testing::TempDir dir;
  ASSERT_TRUE(RaftLog::bootstrap(dir.path(), {1}).ok());
  const auto offsets = write_entries(dir.path(), 1, 20);
  const std::string path = dir / RaftLog::kLogFile;
  const auto size = std::filesystem::file_size(path);
  for (const std::uintmax_t length : {offsets[7] - offsets[4] - 8, size - offsets[4] - 8}) {
    SCOPED_TRACE(length);
    testing::TempDir copy;
    std::filesystem::copy(dir.path(), copy.path(), std::filesystem::copy_options::recursive);
    write_u32_at(copy / RaftLog::kLogFile, offsets[4], static_cast<std::uint32_t>(length));
    auto log = RaftLog::open(copy.path());
    ASSERT_FALSE(log.ok());
    EXPECT_NE(log.error().message.find("byte offset " + std::to_string(offsets[4]) + " (record 5)"),
              std::string::npos)
        << log.error().message;
  }
}

// Whole records gone from the end (the reproduction cut the log of a single voter to half) are
// not a torn write: open() refuses, at a record boundary and inside a record alike.
TEST(RaftLog, LogCutShortOfItsMarkIsRefused) {
  testing::TempDir dir;
  ASSERT_TRUE(RaftLog::bootstrap(dir.path(), {1}).ok());
  const auto offsets = write_entries(dir.path(), 1, 71);
  ASSERT_EQ(offsets.size(), 71u);
  {
    testing::TempDir copy;
    std::filesystem::copy(dir.path(), copy.path(), std::filesystem::copy_options::recursive);
    std::filesystem::resize_file(copy / RaftLog::kLogFile, offsets[35]);
    auto log = RaftLog::open(copy.path());
    ASSERT_FALSE(log.ok()) << "opened with " << (*log)->entries().size() << " entries";
    const std::string& message = log.error().message;
    EXPECT_NE(message.find("Raft log " + copy / RaftLog::kLogFile +
                           " ends at index 35 after 35 "
                           "records"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("entry 71 (term 1), which " + copy / RaftLog::kMarkFile),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("cut short or replaced"), std::string::npos) << message;
  }
  {
    testing::TempDir copy;
    std::filesystem::copy(dir.path(), copy.path(), std::filesystem::copy_options::recursive);
    std::filesystem::resize_file(copy / RaftLog::kLogFile, offsets[35] + 12);
    auto log = RaftLog::open(copy.path());
    ASSERT_FALSE(log.ok()) << "opened with " << (*log)->entries().size() << " entries";
    EXPECT_NE(
        log.error().message.find("byte offset " + std::to_string(offsets[35]) + " (record 36)"),
        std::string::npos)
        << log.error().message;
    EXPECT_EQ(std::filesystem::file_size(copy / RaftLog::kLogFile), offsets[35] + 12);
  }
}

// Raft's own truncations (a follower's conflicting suffix) and snapshots move entries out of
// the log legitimately: the mark stays met across reopens.
TEST(RaftLog, TruncationsAndSnapshotsKeepTheMarkMet) {
  testing::TempDir dir;
  ASSERT_TRUE(RaftLog::bootstrap(dir.path(), {1, 2, 3}).ok());
  write_entries(dir.path(), 1, 10);
  auto reopen = [&] {
    auto log = RaftLog::open(dir.path());
    EXPECT_TRUE(log.ok()) << log.error().message;
    return log;
  };
  {
    auto log = reopen();
    ASSERT_TRUE(log.ok());
    Persist conflict;  // a new leader of term 2 overwrites 8..10 with 8..9
    conflict.hard_state = HardState{2, 2};
    conflict.truncate_from = 8;
    conflict.append = {Entry{2, 8, EntryType::kNoop, ""}, Entry{2, 9, EntryType::kCommand, "x"}};
    ASSERT_TRUE((*log)->persist(conflict).ok());
  }
  {
    auto log = reopen();
    ASSERT_TRUE(log.ok());
    EXPECT_EQ((*log)->entries().back(), (Entry{2, 9, EntryType::kCommand, "x"}));
    Persist cut;  // a truncation alone leaves the mark behind it
    cut.truncate_from = 9;
    ASSERT_TRUE((*log)->persist(cut).ok());
  }
  {
    auto log = reopen();
    ASSERT_TRUE(log.ok());
    EXPECT_EQ((*log)->entries().size(), 8u);
    Persist install;  // a snapshot of term 3 replaces the conflicting log
    install.snapshot = Snapshot{12, 3, {1, 2, 3}, "sm12"};
    ASSERT_TRUE((*log)->persist(install).ok());
  }
  {
    auto log = reopen();
    ASSERT_TRUE(log.ok());
    EXPECT_TRUE((*log)->entries().empty());
    Persist next;
    next.append = {Entry{3, 13, EntryType::kCommand, "thirteen"}};
    ASSERT_TRUE((*log)->persist(next).ok());
  }
  auto log = reopen();
  ASSERT_TRUE(log.ok());
  EXPECT_EQ((*log)->entries().size(), 1u);
  EXPECT_FALSE((*log)->mark_was_missing());
}

// A directory from before marks opens (the check starts then), and so does a mark with one
// damaged copy (a power cut during its in-place write); two damaged copies are an error.
TEST(RaftLog, MissingOrHalfDamagedMarkOpensAndABrokenOneIsAnError) {
  testing::TempDir dir;
  ASSERT_TRUE(RaftLog::bootstrap(dir.path(), {1}).ok());
  const auto offsets = write_entries(dir.path(), 1, 10);
  const std::string mark = read_all(dir / RaftLog::kMarkFile);
  ASSERT_EQ(mark.size(), 100u);
  {
    testing::TempDir copy;
    std::filesystem::copy(dir.path(), copy.path(), std::filesystem::copy_options::recursive);
    std::filesystem::remove(copy / RaftLog::kMarkFile);
    {
      auto log = RaftLog::open(copy.path());
      ASSERT_TRUE(log.ok()) << log.error().message;
      EXPECT_TRUE((*log)->mark_was_missing());
      EXPECT_EQ((*log)->entries().size(), 10u);
    }
    std::filesystem::resize_file(copy / RaftLog::kLogFile, offsets[5]);
    EXPECT_FALSE(RaftLog::open(copy.path()).ok()) << "the new mark guards the log from now on";
  }
  for (const std::size_t flip : {std::size_t{20}, std::size_t{64 + 20}}) {
    SCOPED_TRACE(flip);
    testing::TempDir copy;
    std::filesystem::copy(dir.path(), copy.path(), std::filesystem::copy_options::recursive);
    std::string damaged = mark;
    damaged[flip] = static_cast<char>(damaged[flip] ^ 0x10);
    copy.write(RaftLog::kMarkFile, damaged);
    auto log = RaftLog::open(copy.path());
    ASSERT_TRUE(log.ok()) << log.error().message;
    EXPECT_EQ((*log)->entries().size(), 10u);
  }
  testing::TempDir copy;
  std::filesystem::copy(dir.path(), copy.path(), std::filesystem::copy_options::recursive);
  std::string damaged = mark;
  damaged[20] = static_cast<char>(damaged[20] ^ 0x10);
  damaged[64 + 20] = static_cast<char>(damaged[64 + 20] ^ 0x10);
  copy.write(RaftLog::kMarkFile, damaged);
  auto log = RaftLog::open(copy.path());
  ASSERT_FALSE(log.ok());
  EXPECT_NE(log.error().message.find(copy / RaftLog::kMarkFile), std::string::npos)
      << log.error().message;
}

TEST(RaftLog, BootstrapTwiceIsRefused) {
  testing::TempDir dir;
  ASSERT_TRUE(RaftLog::bootstrap(dir.path(), {1, 2, 3}).ok());
  const auto again = RaftLog::bootstrap(dir.path(), {1, 2, 3});
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.error().message.find("Refusing to bootstrap"), std::string::npos);
  EXPECT_NE(again.error().message.find(dir.path()), std::string::npos);
  // The refusal left the state alone.
  auto log = RaftLog::open(dir.path());
  ASSERT_TRUE(log.ok());
  EXPECT_EQ((*log)->voters(), (std::vector<NodeId>{1, 2, 3}));
}

TEST(RaftLog, OpenWithoutBootstrapIsAnError) {
  testing::TempDir dir;
  auto log = RaftLog::open(dir.path());
  ASSERT_FALSE(log.ok());
  EXPECT_NE(log.error().message.find("bootstrap"), std::string::npos);
}

TEST(RaftLog, CorruptStateFileIsAnError) {
  testing::TempDir dir;
  ASSERT_TRUE(RaftLog::bootstrap(dir.path(), {1}).ok());
  dir.write(RaftLog::kStateFile, "ELRAFTS1 garbage that is long enough to parse..");
  auto log = RaftLog::open(dir.path());
  ASSERT_FALSE(log.ok());
  EXPECT_NE(log.error().message.find(dir / RaftLog::kStateFile), std::string::npos);
}

// --- durable snapshots -----------------------------------------------------------------------

// Entries 1..n of term 1, with a config entry at `config_at` (0: none).
std::vector<Entry> entries_with_config(std::size_t n, Index config_at,
                                       const std::vector<NodeId>& voters) {
  std::vector<Entry> v = odd_entries(1, 1, n);
  if (config_at > 0) {
    v[config_at - 1].type = EntryType::kConfig;
    v[config_at - 1].data = encode_voters(voters);
  }
  return v;
}

TEST(RaftLog, SnapshotCompactsTheLogAndSurvivesAReopen) {
  testing::TempDir dir;
  ASSERT_TRUE(RaftLog::bootstrap(dir.path(), {1, 2, 3}).ok());
  const auto entries = entries_with_config(10, 4, {1, 2, 3, 4});
  const Snapshot snap{6, 1, {1, 2, 3, 4}, std::string("state\0machine", 13)};
  {
    auto log = RaftLog::open(dir.path());
    ASSERT_TRUE(log.ok()) << log.error().message;
    Persist p;
    p.hard_state = HardState{2, 1};
    p.append = entries;
    ASSERT_TRUE((*log)->persist(p).ok());
    EXPECT_EQ((*log)->current_voters(), (std::vector<NodeId>{1, 2, 3, 4}));
    const auto before = std::filesystem::file_size(dir / RaftLog::kLogFile);
    Persist q;
    q.snapshot = snap;
    ASSERT_TRUE((*log)->persist(q).ok());
    EXPECT_LT(std::filesystem::file_size(dir / RaftLog::kLogFile), before)
        << "the entries up to 6 left the log file";
    // The log stays appendable after the rewrite.
    Persist r;
    r.append = {Entry{2, 11, EntryType::kCommand, "eleven"}};
    ASSERT_TRUE((*log)->persist(r).ok());
  }
  auto reopened = RaftLog::open(dir.path());
  ASSERT_TRUE(reopened.ok()) << reopened.error().message;
  ASSERT_TRUE((*reopened)->snapshot().has_value());
  EXPECT_EQ(*(*reopened)->snapshot(), snap);
  std::vector<Entry> expected(entries.begin() + 6, entries.end());
  expected.push_back(Entry{2, 11, EntryType::kCommand, "eleven"});
  EXPECT_EQ((*reopened)->entries(), expected);
  EXPECT_EQ((*reopened)->voters(), (std::vector<NodeId>{1, 2, 3})) << "bootstrap list kept";
  EXPECT_EQ((*reopened)->current_voters(), (std::vector<NodeId>{1, 2, 3, 4}));
  Raft raft(2, (*reopened)->voters(), RaftConfig{}, (*reopened)->recovered(), 1, kStart);
  EXPECT_EQ(raft.first_index(), 7u);
  EXPECT_EQ(raft.term_at(6), 1u);
  EXPECT_EQ(raft.last_index(), 11u);
  EXPECT_EQ(raft.commit_index(), 6u);
  EXPECT_EQ(raft.voters(), (std::vector<NodeId>{1, 2, 3, 4}));
}

// Every crash point of persist(snapshot): the files it replaces atomically are either old or
// new, and leftover .tmp files of any content may lie beside them.
TEST(RaftLog, SnapshotCrashPointsRecoverConsistently) {
  struct Case {
    const char* name;
    std::vector<Entry> log;  // before
    Persist persist;         // with a snapshot
  };
  const auto ten = entries_with_config(10, 0, {});
  Persist compaction;
  compaction.snapshot = Snapshot{6, 1, {1, 2, 3}, "sm6"};
  Persist install_conflicting;  // the follower's entry at 6 has term 1, the snapshot says 2
  install_conflicting.snapshot = Snapshot{6, 2, {1, 2}, "sm6-term2"};
  install_conflicting.truncate_from = 7;
  Persist install_beyond;  // past the end of the log
  install_beyond.snapshot = Snapshot{20, 2, {1, 2, 3}, "sm20"};
  Persist install_matching;  // keeps the suffix
  install_matching.snapshot = Snapshot{8, 1, {1, 2, 3}, "sm8"};
  const std::vector<Case> cases = {
      {"compaction", ten, compaction},
      {"install over a conflicting log", ten, install_conflicting},
      {"install beyond the log", ten, install_beyond},
      {"install over a matching log", ten, install_matching},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    testing::TempDir dir;
    ASSERT_TRUE(RaftLog::bootstrap(dir.path(), {1, 2, 3}).ok());
    std::vector<Entry> after_entries;
    std::optional<Snapshot> after_snapshot;
    {
      auto log = RaftLog::open(dir.path());
      ASSERT_TRUE(log.ok());
      Persist p;
      p.hard_state = HardState{2, 1};
      p.append = c.log;
      ASSERT_TRUE((*log)->persist(p).ok());
    }
    const std::string old_log = read_all(dir / RaftLog::kLogFile);
    const std::string old_mark = read_all(dir / RaftLog::kMarkFile);
    {
      auto log = RaftLog::open(dir.path());
      ASSERT_TRUE(log.ok());
      ASSERT_TRUE((*log)->persist(c.persist).ok());
      after_entries = (*log)->entries();
      after_snapshot = (*log)->snapshot();
    }
    const std::string new_log = read_all(dir / RaftLog::kLogFile);
    const std::string new_snapshot = read_all(dir / RaftLog::kSnapshotFile);
    const std::string new_mark = read_all(dir / RaftLog::kMarkFile);
    ASSERT_TRUE(after_snapshot.has_value());
    struct Point {
      const char* name;
      bool snapshot_renamed;
      bool log_renamed;
      const std::string* mark;  // nullptr: a directory from before marks
    };
    // The mark moves (durably) to the snapshot between the two renames, then to the new last
    // entry: these are the marks each point can leave.
    for (const Point& point : {Point{"before the snapshot rename", false, false, &old_mark},
                               Point{"between the renames, old mark", true, false, &old_mark},
                               Point{"between the renames, new mark", true, false, &new_mark},
                               Point{"after both renames", true, true, &new_mark},
                               Point{"after both renames, no mark", true, true, nullptr}}) {
      SCOPED_TRACE(point.name);
      testing::TempDir crash;
      std::filesystem::copy_file(dir / RaftLog::kStateFile, crash / RaftLog::kStateFile);
      if (point.mark != nullptr) crash.write(RaftLog::kMarkFile, *point.mark);
      crash.write(RaftLog::kLogFile, point.log_renamed ? new_log : old_log);
      if (point.snapshot_renamed) crash.write(RaftLog::kSnapshotFile, new_snapshot);
      // Half-written temporaries of the next step.
      crash.write(std::string(RaftLog::kSnapshotFile) + ".tmp", new_snapshot.substr(0, 17));
      crash.write(std::string(RaftLog::kLogFile) + ".tmp", new_log.substr(0, 5));
      auto log = RaftLog::open(crash.path());
      ASSERT_TRUE(log.ok()) << log.error().message;
      if (point.snapshot_renamed) {
        EXPECT_EQ((*log)->snapshot(), after_snapshot);
        EXPECT_EQ((*log)->entries(), after_entries);
      } else {
        EXPECT_FALSE((*log)->snapshot().has_value());
        EXPECT_EQ((*log)->entries(), c.log);
      }
      // The recovered state starts a Raft core, and the log keeps working across a reopen.
      Raft raft(1, (*log)->voters(), RaftConfig{}, (*log)->recovered(), 1, kStart);
      const Index next = raft.last_index() + 1;
      Persist more;
      more.append = {Entry{2, next, EntryType::kCommand, "next"}};
      ASSERT_TRUE((*log)->persist(more).ok());
      std::vector<Entry> expected = (*log)->entries();
      log = Error{"closed"};
      auto again = RaftLog::open(crash.path());
      ASSERT_TRUE(again.ok()) << again.error().message;
      EXPECT_EQ((*again)->entries(), expected);
      EXPECT_EQ((*again)->entries().back().index, next);
    }
  }
}

TEST(RaftLog, CorruptSnapshotIsAnErrorNamingFileAndOffset) {
  testing::TempDir dir;
  ASSERT_TRUE(RaftLog::bootstrap(dir.path(), {1}).ok());
  {
    auto log = RaftLog::open(dir.path());
    ASSERT_TRUE(log.ok());
    Persist p;
    p.hard_state = HardState{1, 1};
    p.append = odd_entries(1, 1, 3);
    ASSERT_TRUE((*log)->persist(p).ok());
    Persist q;
    q.snapshot = Snapshot{2, 1, {1}, std::string(1000, 'd')};
    ASSERT_TRUE((*log)->persist(q).ok());
  }
  const std::string path = dir / RaftLog::kSnapshotFile;
  const std::string good = read_all(path);
  struct Case {
    const char* name;
    std::string bytes;
    std::string offset;
    const char* why;
  };
  std::string flipped = good;
  flipped[500] = static_cast<char>(flipped[500] ^ 0x01);
  std::string bad_magic = good;
  bad_magic[0] = 'X';
  const std::vector<Case> cases = {
      {"a flipped data byte", flipped, std::to_string(good.size() - 4), "CRC"},
      {"cut short", good.substr(0, good.size() - 10), "", "data length"},
      {"bad magic", bad_magic, "0", "magic"},
      {"empty", "", "0", "too short"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    testing::TempDir copy;
    std::filesystem::copy(dir.path(), copy.path(),
                          std::filesystem::copy_options::recursive |
                              std::filesystem::copy_options::overwrite_existing);
    copy.write(RaftLog::kSnapshotFile, c.bytes);
    auto log = RaftLog::open(copy.path());
    ASSERT_FALSE(log.ok());
    const std::string& message = log.error().message;
    EXPECT_NE(message.find(copy / RaftLog::kSnapshotFile), std::string::npos) << message;
    EXPECT_NE(message.find("byte offset " + c.offset), std::string::npos) << message;
    EXPECT_NE(message.find(c.why), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace elastic::consensus
