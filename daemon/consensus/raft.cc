#include "daemon/consensus/raft.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <type_traits>
#include <utility>
#include <variant>

namespace elastic::consensus {
namespace {

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "raft: broken invariant: %s\n", what);
  std::abort();
}

std::vector<NodeId> config_voters(const Entry& e) {
  auto voters = decode_voters(e.data);
  if (!voters) die("a config entry does not decode");
  return std::move(*voters);
}

}  // namespace

const char* role_name(Role role) {
  switch (role) {
    case Role::kFollower:
      return "follower";
    case Role::kPreCandidate:
      return "pre-candidate";
    case Role::kCandidate:
      return "candidate";
    case Role::kLeader:
      return "leader";
  }
  return "unknown";
}

Raft::Raft(NodeId self, std::vector<NodeId> voters, const RaftConfig& config, Recovered recovered,
           std::uint64_t seed, TimePoint now)
    : self_(self),
      bootstrap_voters_(std::move(voters)),
      config_(config),
      rng_(seed),
      hard_(recovered.hard_state),
      log_(std::move(recovered.log)) {
  std::sort(bootstrap_voters_.begin(), bootstrap_voters_.end());
  if (self_ == kNoNode) die("node id 0 is reserved for 'none'");
  if (bootstrap_voters_.empty() || bootstrap_voters_.size() > kMaxVoters) {
    die("the bootstrap voter set must have 1 to kMaxVoters members");
  }
  if (bootstrap_voters_.front() == kNoNode) die("voter id 0 is reserved for 'none'");
  if (std::adjacent_find(bootstrap_voters_.begin(), bootstrap_voters_.end()) !=
      bootstrap_voters_.end()) {
    die("duplicate voter id");
  }
  if (config_.election_timeout <= Duration::zero() ||
      config_.heartbeat_interval <= Duration::zero() || config_.max_entries_per_append == 0) {
    die("bad raft config");
  }
  if (recovered.snapshot && recovered.snapshot->last_index > 0) {
    snapshot_ = std::move(*recovered.snapshot);
    if (snapshot_.voters.empty()) die("recovered snapshot has no voters");
    std::sort(snapshot_.voters.begin(), snapshot_.voters.end());
    // A snapshot holds only committed, applied state; the owner restored it already.
    commit_ = applied_ = snapshot_.last_index;
  }
  for (std::size_t i = 0; i < log_.size(); ++i) {
    if (log_[i].index != snapshot_.last_index + i + 1) {
      die("recovered log is not contiguous from the snapshot");
    }
    if (log_[i].term < (i > 0 ? log_[i - 1].term : snapshot_.last_term)) {
      die("recovered log terms decrease");
    }
    if (log_[i].type == EntryType::kConfig) config_voters(log_[i]);  // aborts if malformed
  }
  if (last_term() > hard_.term) die("recovered log has a term above the hard state's");
  recompute_config();
  reset_election_deadline(now);
  deadline_ = election_deadline_;
}

bool Raft::is_voter(NodeId id) const {
  return std::binary_search(voters_.begin(), voters_.end(), id);
}

std::vector<NodeId> Raft::config_at(Index index) const {
  for (Index i = std::min(index, last_index()); i > snapshot_.last_index; --i) {
    if (entry(i).type == EntryType::kConfig) return config_voters(entry(i));
  }
  return snapshot_.last_index > 0 ? snapshot_.voters : bootstrap_voters_;
}

void Raft::recompute_config() {
  config_index_ = snapshot_.last_index;
  voters_ = snapshot_.last_index > 0 ? snapshot_.voters : bootstrap_voters_;
  for (auto it = log_.rbegin(); it != log_.rend(); ++it) {
    if (it->type == EntryType::kConfig) {
      voters_ = config_voters(*it);
      config_index_ = it->index;
      break;
    }
  }
  sync_progress();
}

// A leader tracks the voters of its current config other than itself. A new voter starts at
// the leader's log end and backtracks (or gets the snapshot) like any follower. A removed one
// is still sent entries, uncounted, until its removal commits, so that it learns of it and
// stops campaigning (it may still miss it; PreVote and the lease contain that).
void Raft::sync_progress() {
  if (role_ != Role::kLeader) return;
  const bool settled = commit_ >= config_index_;
  std::erase_if(progress_, [&](const auto& kv) { return !is_voter(kv.first) && settled; });
  for (NodeId v : voters_) {
    if (v != self_ && !progress_.contains(v)) progress_[v] = Progress{last_index() + 1, 0, true};
  }
}

void Raft::reset_election_deadline(TimePoint now) {
  const auto t = static_cast<std::uint64_t>(config_.election_timeout.count());
  election_deadline_ =
      now + config_.election_timeout + Duration(static_cast<Duration::rep>(rng_.below(t)));
}

void Raft::set_hard_state(Term term, NodeId vote, Effects& out) {
  if (term < hard_.term) die("term went backwards");
  if (hard_.term == term && hard_.vote == vote) return;
  hard_ = HardState{term, vote};
  out.persist.hard_state = hard_;
}

void Raft::set_leader(NodeId leader, Effects& out) {
  if (leader_ == leader) return;
  leader_ = leader;
  out.leader_change = LeaderChange{hard_.term, leader};
}

void Raft::become_follower(TimePoint now, Term term, NodeId leader, Effects& out) {
  const bool new_term = term > hard_.term;
  if (new_term) set_hard_state(term, kNoNode, out);
  // Whatever made this node follow, it can no longer confirm that it leads.
  for (const PendingRead& read : reads_) out.reads_failed.push_back(read.id);
  reads_.clear();
  role_ = Role::kFollower;
  progress_.clear();
  votes_.clear();
  set_leader(leader, out);
  reset_election_deadline(now);
  deadline_ = election_deadline_;
}

void Raft::campaign(TimePoint now, Effects& out) {
  if (config_.pre_vote) {
    become_pre_candidate(now, out);
  } else {
    become_candidate(now, out);
  }
}

void Raft::become_pre_candidate(TimePoint now, Effects& out) {
  role_ = Role::kPreCandidate;
  set_leader(kNoNode, out);
  votes_ = {self_};
  reset_election_deadline(now);
  deadline_ = election_deadline_;
  if (votes_.size() >= quorum()) {
    become_candidate(now, out);
    return;
  }
  for (NodeId v : voters_) {
    if (v != self_) send(v, VoteRequest{true, hard_.term + 1, last_index(), last_term()}, out);
  }
}

void Raft::become_candidate(TimePoint now, Effects& out) {
  role_ = Role::kCandidate;
  set_hard_state(hard_.term + 1, self_, out);
  set_leader(kNoNode, out);
  votes_ = {self_};
  reset_election_deadline(now);
  deadline_ = election_deadline_;
  if (votes_.size() >= quorum()) {
    become_leader(now, out);
    return;
  }
  for (NodeId v : voters_) {
    if (v == self_) continue;
    send(v, VoteRequest{false, hard_.term, last_index(), last_term()}, out);
  }
}

void Raft::become_leader(TimePoint now, Effects& out) {
  role_ = Role::kLeader;
  votes_.clear();
  set_leader(self_, out);
  progress_.clear();
  sync_progress();
  // The no-op of the new term: committing it commits every earlier entry (Figure 8), and until
  // it commits this leader does not know the commit index.
  append_local(Entry{hard_.term, last_index() + 1, EntryType::kNoop, {}}, out);
  broadcast_append(now, out);
  maybe_commit(now, out);  // a single voter commits at once
  if (role_ != Role::kLeader) return;
  heartbeat_due_ = now + config_.heartbeat_interval;
  quorum_check_due_ = now + config_.election_timeout;
  deadline_ = std::min(heartbeat_due_, quorum_check_due_);
}

void Raft::append_local(Entry entry, Effects& out) {
  if (entry.index != last_index() + 1) die("append out of order");
  const bool config = entry.type == EntryType::kConfig;
  out.persist.append.push_back(entry);
  log_.push_back(std::move(entry));
  // A config is in force from the moment it is in the log, committed or not (4.1).
  if (config) recompute_config();
}

void Raft::truncate_local(Index from, Effects& out) {
  if (from <= commit_) die("truncation of a committed entry");
  if (from > last_index()) return;
  log_.resize(from - 1 - snapshot_.last_index);
  if (config_index_ >= from) recompute_config();  // back to the config before the lost entry
  auto& pending = out.persist.append;
  pending.erase(std::remove_if(pending.begin(), pending.end(),
                               [&](const Entry& e) { return e.index >= from; }),
                pending.end());
  out.persist.truncate_from =
      out.persist.truncate_from ? std::min(*out.persist.truncate_from, from) : from;
}

void Raft::send(NodeId to, MessageBody body, Effects& out) {
  out.sends.push_back(Message{self_, to, std::move(body)});
}

void Raft::send_append(TimePoint now, NodeId to, Effects& out) {
  Progress& p = progress_.at(to);
  if (p.next <= snapshot_.last_index) {
    // The entry before next is compacted: only the snapshot can bring this follower forward.
    // It may be large, so it is not resent with every heartbeat; half an election timeout
    // still reaches the follower before its election timer fires on a healthy link.
    if (now < p.snapshot_due) return;
    p.snapshot_due = now + config_.election_timeout / 2;
    send(to, InstallSnapshot{hard_.term, snapshot_}, out);
    return;
  }
  AppendEntries m;
  m.term = hard_.term;
  m.prev_log_index = p.next - 1;
  m.prev_log_term = term_at(m.prev_log_index);
  m.leader_commit = commit_;
  m.read_round = read_round_;
  for (Index i = p.next; i <= last_index() && m.entries.size() < config_.max_entries_per_append;
       ++i) {
    m.entries.push_back(entry(i));
  }
  send(to, std::move(m), out);
}

void Raft::broadcast_append(TimePoint now, Effects& out) {
  for (auto& [id, p] : progress_) send_append(now, id, out);
}

bool Raft::log_up_to_date(Index index, Term term) const {
  return term > last_term() || (term == last_term() && index >= last_index());
}

bool Raft::in_lease(TimePoint now) const {
  if (role_ == Role::kLeader) return true;
  return leader_ != kNoNode && now < last_leader_contact_ + config_.election_timeout;
}

void Raft::maybe_commit(TimePoint now, Effects& out) {
  if (role_ != Role::kLeader) return;
  for (Index n = last_index(); n > commit_; --n) {
    // The current-term rule: never commit an older term's entry by counting (Figure 8).
    if (term_at(n) != hard_.term) break;
    // This leader counts only while it is a voter; its log is durable before anything it sends.
    std::size_t count = is_voter(self_) ? 1 : 0;
    for (const auto& [id, p] : progress_) count += p.match >= n && is_voter(id) ? 1 : 0;
    if (count >= quorum()) {
      advance_commit(n, out);
      start_waiting_reads(now, out);  // n is of this term: the commit index is known now
      if (commit_ >= config_index_) sync_progress();  // drops removed voters for good
      break;
    }
  }
  if (!is_voter(self_) && commit_ >= config_index_) {
    // The change that removed this leader is committed: tell the others (so they learn the
    // commit index now), then leave the cluster's leadership to them (dissertation 4.2.2).
    broadcast_append(now, out);
    become_follower(now, hard_.term, kNoNode, out);
  }
}

void Raft::advance_commit(Index commit, Effects& out) {
  if (commit <= commit_) return;
  if (commit > last_index()) die("commit beyond the log");
  commit_ = commit;
  while (applied_ < commit_) {
    ++applied_;
    out.apply.push_back(entry(applied_));
  }
}

void Raft::start_waiting_reads(TimePoint now, Effects& out) {
  // Before this leader's first commit of its term every read waits; after it none does.
  if (reads_.empty() || reads_.front().round != 0) return;
  ++read_round_;
  for (PendingRead& read : reads_) {
    read.index = commit_;
    read.round = read_round_;
  }
  broadcast_append(now, out);
  release_reads(out);
}

void Raft::release_reads(Effects& out) {
  if (reads_.empty() || role_ != Role::kLeader) return;
  // The highest round a majority of the current voters has echoed: this leader counts with
  // every round it started, the others with what they echoed in this term.
  std::vector<std::uint64_t> echoed;
  if (is_voter(self_)) echoed.push_back(read_round_);
  for (const auto& [id, p] : progress_) {
    if (is_voter(id)) echoed.push_back(p.read_round);
  }
  if (echoed.size() < quorum()) return;
  std::nth_element(echoed.begin(), echoed.begin() + static_cast<std::ptrdiff_t>(quorum() - 1),
                   echoed.end(), std::greater<>());
  const std::uint64_t confirmed = echoed[quorum() - 1];
  std::size_t released = 0;
  while (released < reads_.size() && reads_[released].round != 0 &&
         reads_[released].round <= confirmed) {
    out.reads_ready.push_back(ReadState{reads_[released].id, reads_[released].index});
    ++released;
  }
  reads_.erase(reads_.begin(), reads_.begin() + static_cast<std::ptrdiff_t>(released));
}

void Raft::tick(TimePoint now, Effects& out) {
  out.clear();
  if (role_ == Role::kLeader) {
    if (config_.check_quorum && now >= quorum_check_due_) {
      std::size_t active = is_voter(self_) ? 1 : 0;
      for (auto& [id, p] : progress_) {
        active += p.recent_active && is_voter(id) ? 1 : 0;
        p.recent_active = false;
      }
      if (active < quorum()) {
        become_follower(now, hard_.term, kNoNode, out);
        return;
      }
      quorum_check_due_ = now + config_.election_timeout;
    }
    if (now >= heartbeat_due_) {
      broadcast_append(now, out);
      heartbeat_due_ = now + config_.heartbeat_interval;
    }
    deadline_ = config_.check_quorum ? std::min(heartbeat_due_, quorum_check_due_) : heartbeat_due_;
    return;
  }
  if (now >= election_deadline_) {
    if (is_voter(self_)) {
      campaign(now, out);
    } else {
      // Not in the config (yet, or any more): follow whoever leads, never campaign.
      role_ = Role::kFollower;
      votes_.clear();
      reset_election_deadline(now);
    }
  }
  if (role_ != Role::kLeader) deadline_ = election_deadline_;
}

void Raft::leader_unreachable(TimePoint now, NodeId leader, Effects& out) {
  out.clear();
  if (role_ != Role::kFollower || leader == kNoNode || leader == self_ || leader_ != leader) {
    return;
  }
  set_leader(kNoNode, out);
  last_leader_contact_ = TimePoint{};
  unreachable_leader_ = leader;
  unreachable_term_ = hard_.term;
  unreachable_at_ = now;
  if (!is_voter(self_)) return;  // it never campaigns; its normal timer keeps running
  // Survivors usually learn of the loss at the same moment (the leader's connection drops at
  // all of them), so each waits for its turn: its place among the other voters, a step of
  // election_timeout / 8 each, plus a random part of half a step. Two turns are at least half
  // a step apart, far more than a vote's round trip, so they do not split the vote.
  std::uint64_t slot = 0;
  for (const NodeId voter : voters_) {
    if (voter == self_) break;
    if (voter != leader) ++slot;
  }
  const auto step = static_cast<std::uint64_t>(config_.election_timeout.count() / 8);
  const std::uint64_t jitter = step / 2 == 0 ? 0 : rng_.below(step / 2);
  const TimePoint soon = now + Duration(static_cast<Duration::rep>(slot * step + jitter));
  election_deadline_ = std::min(election_deadline_, soon);
  deadline_ = election_deadline_;
}

ProposeOutcome Raft::propose(TimePoint now, std::string data, Effects& out) {
  out.clear();
  if (role_ != Role::kLeader) return ProposeOutcome{false, 0, 0, leader_};
  const Index index = last_index() + 1;
  append_local(Entry{hard_.term, index, EntryType::kCommand, std::move(data)}, out);
  broadcast_append(now, out);
  maybe_commit(now, out);
  return ProposeOutcome{true, index, hard_.term, self_};
}

ReadOutcome Raft::read_index(TimePoint now, Effects& out) {
  out.clear();
  ReadOutcome outcome;
  outcome.leader_hint = leader_;
  if (role_ != Role::kLeader) {
    outcome.refusal = "This node is not the Raft leader.";
    return outcome;
  }
  if (reads_.size() >= kMaxPendingReads) {
    outcome.refusal = "The leader has " + std::to_string(reads_.size()) +
                      " reads waiting for a majority to confirm it leads; retry shortly.";
    return outcome;
  }
  outcome.accepted = true;
  outcome.id = next_read_id_++;
  if (term_at(commit_) != hard_.term) {
    // Until its no-op commits, this leader's commit index may lag what an earlier leader
    // committed: the read waits for it (start_waiting_reads), and so does every later read.
    reads_.push_back(PendingRead{outcome.id, 0, 0});
    return outcome;
  }
  // A new round: only replies to AppendEntries sent from now on confirm this read.
  reads_.push_back(PendingRead{outcome.id, commit_, ++read_round_});
  broadcast_append(now, out);
  release_reads(out);  // a single voter confirms at once
  return outcome;
}

VoterChangeOutcome Raft::propose_voter_change(TimePoint now, VoterChange change, Effects& out) {
  out.clear();
  VoterChangeOutcome outcome;
  outcome.leader_hint = leader_;
  auto refuse = [&](std::string why) {
    outcome.refusal = std::move(why);
    return outcome;
  };
  if (role_ != Role::kLeader) return refuse("This node is not the Raft leader.");
  if (change.node == kNoNode) return refuse("Node id 0 cannot be a voter.");
  if (term_at(commit_) != hard_.term) {
    // Ongaro's fix for the single-server-change bug: a leader that has not committed in its
    // term may hold a stale config entry that a concurrent change in an older term overrode.
    return refuse("The leader has not yet committed an entry of its term " +
                  std::to_string(hard_.term) + "; retry shortly.");
  }
  if (config_index_ > commit_) {
    return refuse("The voter change at index " + std::to_string(config_index_) +
                  " is not committed yet; only one change may be in flight.");
  }
  std::vector<NodeId> next = voters_;
  const bool member = is_voter(change.node);
  if (change.kind == VoterChange::Kind::kAdd) {
    if (member) return refuse("Node " + std::to_string(change.node) + " is already a voter.");
    if (next.size() >= kMaxVoters) return refuse("The voter set is full.");
    next.push_back(change.node);
    std::sort(next.begin(), next.end());
  } else {
    if (!member) return refuse("Node " + std::to_string(change.node) + " is not a voter.");
    if (next.size() == 1) return refuse("The last voter cannot be removed.");
    std::erase(next, change.node);
  }
  const Index index = last_index() + 1;
  append_local(Entry{hard_.term, index, EntryType::kConfig, encode_voters(next)}, out);
  broadcast_append(now, out);
  maybe_commit(now, out);
  outcome.accepted = true;
  outcome.index = index;
  outcome.term = hard_.term;
  outcome.leader_hint = self_;
  return outcome;
}

Status Raft::compact(Index upto, std::string state_machine, Effects& out) {
  out.clear();
  if (upto <= snapshot_.last_index) return ok_status();
  if (upto > applied_) {
    return Error{"Cannot compact the Raft log up to index " + std::to_string(upto) +
                 ": only entries up to " + std::to_string(applied_) + " are applied."};
  }
  if (state_machine.size() > kMaxSnapshotBytes) {
    return Error{"Cannot compact the Raft log: the state machine snapshot has " +
                 std::to_string(state_machine.size()) + " bytes, over the limit of " +
                 std::to_string(kMaxSnapshotBytes) + "."};
  }
  Snapshot snapshot{upto, term_at(upto), config_at(upto), std::move(state_machine)};
  log_.erase(log_.begin(), log_.begin() + static_cast<std::ptrdiff_t>(upto - snapshot_.last_index));
  snapshot_ = std::move(snapshot);
  out.persist.snapshot = snapshot_;
  return ok_status();
}

void Raft::on_message(TimePoint now, const Message& message, Effects& out) {
  out.clear();
  const NodeId from = message.from;
  // Senders are not checked against the config: a new voter hears from a leader it may not
  // know yet, and a leader that removed itself still leads until the change commits. Replies
  // count only from voters of the current config (handlers below).
  if (from == self_ || from == kNoNode || message.to != self_) return;  // not for us
  std::visit(
      [&](const auto& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, VoteRequest>) {
          handle_vote_request(now, from, m, out);
        } else if constexpr (std::is_same_v<T, VoteReply>) {
          handle_vote_reply(now, from, m, out);
        } else if constexpr (std::is_same_v<T, AppendEntries>) {
          handle_append(now, from, m, out);
        } else if constexpr (std::is_same_v<T, AppendReply>) {
          handle_append_reply(now, from, m, out);
        } else if constexpr (std::is_same_v<T, InstallSnapshot>) {
          handle_install_snapshot(now, from, m, out);
        } else {
          handle_install_snapshot_reply(now, from, m, out);
        }
      },
      message.body);
  if (role_ != Role::kLeader) deadline_ = election_deadline_;
}

void Raft::handle_vote_request(TimePoint now, NodeId from, const VoteRequest& m, Effects& out) {
  const bool up_to_date = log_up_to_date(m.last_log_index, m.last_log_term);
  if (m.pre_vote) {
    // Nobody's term changes for a pre-vote. Grant only what a real vote could get, and never
    // while a leader is known to be alive.
    const bool grant = m.term > hard_.term && up_to_date && !in_lease(now);
    send(from, VoteReply{true, grant ? m.term : hard_.term, grant}, out);
    return;
  }
  if (m.term > hard_.term) {
    // A leader's lease: a disruptive candidate's term is not adopted while the leader is alive.
    if (config_.check_quorum && in_lease(now)) return;
    become_follower(now, m.term, kNoNode, out);
  }
  bool grant = false;
  if (m.term == hard_.term && (hard_.vote == kNoNode || hard_.vote == from) && up_to_date &&
      role_ == Role::kFollower) {
    grant = true;
    set_hard_state(hard_.term, from, out);
    reset_election_deadline(now);
  }
  send(from, VoteReply{false, hard_.term, grant}, out);
}

void Raft::handle_vote_reply(TimePoint now, NodeId from, const VoteReply& m, Effects& out) {
  if (m.term > hard_.term && !(m.pre_vote && m.granted)) {
    become_follower(now, m.term, kNoNode, out);
    return;
  }
  if (!m.granted || !is_voter(from)) return;
  if (m.pre_vote && role_ == Role::kPreCandidate && m.term == hard_.term + 1) {
    votes_.insert(from);
    if (votes_.size() >= quorum()) become_candidate(now, out);
  } else if (!m.pre_vote && role_ == Role::kCandidate && m.term == hard_.term) {
    votes_.insert(from);
    if (votes_.size() >= quorum()) become_leader(now, out);
  }
}

void Raft::handle_append(TimePoint now, NodeId from, const AppendEntries& m, Effects& out) {
  if (m.term < hard_.term) {
    // A stale leader: tell it the current term so it steps down.
    send(from, AppendReply{hard_.term, false, 0, 0, 0}, out);
    return;
  }
  // From the leader this node just declared gone, in that term: maybe a message it sent before it
  // died, read after its connection dropped. Applied, but no lease and no timer reset (header).
  const bool doubted = from == unreachable_leader_ && m.term == unreachable_term_ &&
                       now < unreachable_at_ + config_.election_timeout;
  if (m.term > hard_.term || role_ != Role::kFollower || leader_ != from) {
    if (role_ == Role::kLeader && m.term == hard_.term) die("two leaders in one term");
    const TimePoint soon = election_deadline_;
    become_follower(now, m.term, from, out);
    if (doubted) {
      election_deadline_ = std::min(election_deadline_, soon);
      deadline_ = election_deadline_;
    }
  }
  if (!doubted) {
    last_leader_contact_ = now;
    reset_election_deadline(now);
  }

  AppendReply reply{hard_.term, false, 0, 0, 0, m.read_round};
  Index prev_index = m.prev_log_index;
  Term prev_term = m.prev_log_term;
  std::size_t skip = 0;
  if (prev_index < snapshot_.last_index) {
    // Everything up to the snapshot is committed, so identical in this leader's log (leader
    // completeness): skip what it covers and check from the snapshot's last entry.
    skip = static_cast<std::size_t>(
        std::min<Index>(snapshot_.last_index - prev_index, m.entries.size()));
    prev_index = snapshot_.last_index;
    prev_term = snapshot_.last_term;
  }
  if (prev_index > last_index()) {
    reply.conflict_index = last_index() + 1;
    send(from, reply, out);
    return;
  }
  if (term_at(prev_index) != prev_term) {
    reply.conflict_term = term_at(prev_index);
    Index first = prev_index;
    while (first > first_index() && term_at(first - 1) == reply.conflict_term) --first;
    reply.conflict_index = first;
    send(from, reply, out);
    return;
  }
  for (std::size_t k = skip; k < m.entries.size(); ++k) {
    const Entry& e = m.entries[k];
    if (e.index <= last_index()) {
      if (term_at(e.index) == e.term) continue;  // already there (a duplicate or reordered AE)
      truncate_local(e.index, out);
    }
    append_local(e, out);
  }
  const Index match = std::max<Index>(m.prev_log_index + m.entries.size(), prev_index);
  advance_commit(std::min(m.leader_commit, match), out);
  reply.success = true;
  reply.match_index = match;
  send(from, reply, out);
}

void Raft::handle_append_reply(TimePoint now, NodeId from, const AppendReply& m, Effects& out) {
  if (m.term > hard_.term) {
    become_follower(now, m.term, kNoNode, out);
    return;
  }
  if (role_ != Role::kLeader || m.term != hard_.term) return;
  auto it = progress_.find(from);
  if (it == progress_.end()) return;  // not a voter of this leader's config (any more)
  Progress& p = it->second;
  p.recent_active = true;
  // An echo above the latest round did not come from this leader's AppendEntries: ignored.
  if (m.read_round > p.read_round && m.read_round <= read_round_) {
    p.read_round = m.read_round;
    release_reads(out);
  }
  if (m.success) {
    if (m.match_index > last_index()) die("follower matched beyond the leader's log");
    if (m.match_index > p.match) p.match = m.match_index;
    p.next = std::max(p.next, p.match + 1);
    maybe_commit(now, out);
    if (role_ == Role::kLeader && p.next <= last_index()) send_append(now, from, out);
    return;
  }
  if (m.conflict_index == 0) {
    // No conflict named: the answer to an AppendEntries of an older term (a late copy this node
    // sent when it led before), which the follower refuses with its current term -- ours. A real
    // refusal always names an index >= 1; this one says nothing about the follower's log.
    return;
  }
  if (m.conflict_term == 0 && m.conflict_index <= p.match) {
    // The follower's log ends below what it had matched: it lost its log (a voter rebuilt from
    // its peers). Lowering match only makes commits wait; a stale refusal costs one resend.
    p.match = m.conflict_index - 1;
  }
  // Fast backtracking: skip the follower's whole conflicting term, or to its log end.
  Index next = m.conflict_index;
  if (m.conflict_term != 0) {
    for (Index i = last_index(); i > snapshot_.last_index; --i) {
      if (term_at(i) == m.conflict_term) {
        next = i + 1;
        break;
      }
      if (term_at(i) < m.conflict_term) break;
    }
  }
  // Never below what is known to match, and a stale refusal never moves next forward.
  next = std::max<Index>(next, p.match + 1);
  p.next = std::min(p.next, next);
  send_append(now, from, out);
}

void Raft::handle_install_snapshot(TimePoint now, NodeId from, const InstallSnapshot& m,
                                   Effects& out) {
  if (m.term < hard_.term) {
    send(from, InstallSnapshotReply{hard_.term, 0}, out);
    return;
  }
  if (m.term > hard_.term || role_ != Role::kFollower || leader_ != from) {
    if (role_ == Role::kLeader && m.term == hard_.term) die("two leaders in one term");
    become_follower(now, m.term, from, out);
  }
  last_leader_contact_ = now;
  reset_election_deadline(now);
  const Snapshot& s = m.snapshot;
  if (s.last_index <= commit_ || s.voters.empty() || s.last_term > m.term) {
    // Stale or duplicate: this node has everything up to its commit index already. (An empty
    // voter list or a term above the sender's is not a snapshot a leader makes: ignored.)
    send(from, InstallSnapshotReply{hard_.term, commit_}, out);
    return;
  }
  if (s.last_index <= last_index() && term_at(s.last_index) == s.last_term) {
    // The log matches at the snapshot's last entry: keep what follows it (5.3).
    log_.erase(log_.begin(),
               log_.begin() + static_cast<std::ptrdiff_t>(s.last_index - snapshot_.last_index));
  } else {
    if (last_index() > s.last_index) out.persist.truncate_from = s.last_index + 1;
    log_.clear();
  }
  snapshot_ = s;
  std::sort(snapshot_.voters.begin(), snapshot_.voters.end());
  commit_ = applied_ = s.last_index;
  recompute_config();
  out.persist.snapshot = snapshot_;
  out.restore = snapshot_;
  send(from, InstallSnapshotReply{hard_.term, s.last_index}, out);
}

void Raft::handle_install_snapshot_reply(TimePoint now, NodeId from, const InstallSnapshotReply& m,
                                         Effects& out) {
  if (m.term > hard_.term) {
    become_follower(now, m.term, kNoNode, out);
    return;
  }
  if (role_ != Role::kLeader || m.term != hard_.term) return;
  auto it = progress_.find(from);
  if (it == progress_.end()) return;
  Progress& p = it->second;
  p.recent_active = true;
  if (m.match_index > last_index()) die("follower matched beyond the leader's log");
  p.match = std::max(p.match, m.match_index);
  p.next = std::max(p.next, p.match + 1);
  p.snapshot_due = TimePoint{};
  maybe_commit(now, out);
  if (role_ == Role::kLeader && p.next <= last_index()) send_append(now, from, out);
}

}  // namespace elastic::consensus
