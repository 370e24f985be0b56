// Raft core rules (table-driven, manual time, a hand-steered message queue) and the durable log
// (real files in a TempDir): vote granting, stepping down, log matching and truncation, the
// current-term commit rule with the Raft paper's Figure 8 scripted step by step, PreVote,
// CheckQuorum, persistence round trips, torn tails, bad CRCs, odd payload lengths, bootstrap.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <deque>
#include <filesystem>
#include <functional>
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
class Cluster {
 public:
  Cluster(std::size_t n, RaftConfig config) : config_(config) {
    for (NodeId id = 1; id <= n; ++id) ids_.push_back(id);
    for (NodeId id : ids_) restart(id);
  }
  // Starts (or restarts) `id` from its durable state; messages in flight to it are dropped.
  void restart(NodeId id) {
    auto& n = nodes_[id];
    n.raft = std::make_unique<Raft>(id, ids_, config_, Recovered{n.hard, n.log}, 100 + id + seed_++,
                                    now_);
    n.applied.clear();
    n.up = true;
    drop([&](const Message& m) { return m.to == id; });
  }
  void crash(NodeId id) {
    nodes_[id].up = false;
    drop([&](const Message& m) { return m.to == id || m.from == id; });
  }
  Raft& raft(NodeId id) { return *nodes_.at(id).raft; }
  const std::vector<Entry>& applied(NodeId id) { return nodes_.at(id).applied; }
  const std::vector<Entry>& durable_log(NodeId id) { return nodes_.at(id).log; }
  TimePoint now() const { return now_; }

  void carry_out(NodeId id, Effects& e) {
    auto& n = nodes_.at(id);
    if (e.persist.hard_state) n.hard = *e.persist.hard_state;
    if (e.persist.truncate_from && *e.persist.truncate_from <= n.log.size()) {
      n.log.resize(*e.persist.truncate_from - 1);
    }
    for (const auto& entry : e.persist.append) n.log.push_back(entry);
    for (auto& m : e.sends) queue_.push_back(m);
    for (auto& entry : e.apply) n.applied.push_back(entry);
  }
  // Fires `id`'s election timer (or leader timers) now.
  void fire(NodeId id) {
    now_ = std::max(now_, raft(id).next_deadline());
    Effects e;
    raft(id).tick(now_, e);
    carry_out(id, e);
  }
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
    for (NodeId id : ids_) {
      if (nodes_[id].up && raft(id).role() == Role::kLeader) return id;
    }
    return std::nullopt;
  }

 private:
  struct Node {
    std::unique_ptr<Raft> raft;
    HardState hard;
    std::vector<Entry> log;
    std::vector<Entry> applied;
    bool up = false;
  };
  RaftConfig config_;
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
  {
    auto log = RaftLog::open(dir.path());
    ASSERT_TRUE(log.ok());
    Persist p;
    p.hard_state = HardState{1, 1};
    p.append = {entries[0], entries[1], entries[2]};
    ASSERT_TRUE((*log)->persist(p).ok());
    size_before_last = std::filesystem::file_size(dir / RaftLog::kLogFile);
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
  EXPECT_NE(log.error().message.find("byte offset 26"), std::string::npos) << log.error().message;
  EXPECT_NE(log.error().message.find("CRC"), std::string::npos) << log.error().message;
}

TEST(RaftLog, BadCrcOnTheLastRecordIsATornWrite) {
  testing::TempDir dir;
  ASSERT_TRUE(RaftLog::bootstrap(dir.path(), {1}).ok());
  const auto entries = odd_entries(1, 1, 3);
  {
    auto log = RaftLog::open(dir.path());
    ASSERT_TRUE(log.ok());
    Persist p;
    p.hard_state = HardState{1, 1};
    p.append = entries;
    ASSERT_TRUE((*log)->persist(p).ok());
  }
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

}  // namespace
}  // namespace elastic::consensus
