#include "daemon/consensus/raft.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <utility>
#include <variant>

namespace elastic::consensus {
namespace {

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "raft: broken invariant: %s\n", what);
  std::abort();
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
      voters_(std::move(voters)),
      config_(config),
      rng_(seed),
      hard_(recovered.hard_state),
      log_(std::move(recovered.log)) {
  std::sort(voters_.begin(), voters_.end());
  if (self_ == kNoNode) die("node id 0 is reserved for 'none'");
  if (voters_.size() != 1 && voters_.size() != 3 && voters_.size() != 5) {
    die("the voter set must have 1, 3 or 5 members");
  }
  if (std::adjacent_find(voters_.begin(), voters_.end()) != voters_.end()) {
    die("duplicate voter id");
  }
  if (!std::binary_search(voters_.begin(), voters_.end(), self_)) die("self is not a voter");
  if (config_.election_timeout <= Duration::zero() ||
      config_.heartbeat_interval <= Duration::zero() || config_.max_entries_per_append == 0) {
    die("bad raft config");
  }
  for (std::size_t i = 0; i < log_.size(); ++i) {
    if (log_[i].index != i + 1) die("recovered log is not contiguous from 1");
    if (i > 0 && log_[i].term < log_[i - 1].term) die("recovered log terms decrease");
  }
  if (last_term() > hard_.term) die("recovered log has a term above the hard state's");
  reset_election_deadline(now);
  deadline_ = election_deadline_;
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
    if (v == self_) continue;
    send(v, VoteRequest{true, hard_.term + 1, last_index(), last_term()}, out);
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
  for (NodeId v : voters_) {
    if (v == self_) continue;
    progress_[v] = Progress{last_index() + 1, 0, true};
  }
  // The no-op of the new term: committing it commits every earlier entry (Figure 8), and until
  // it commits this leader does not know the commit index.
  append_local(Entry{hard_.term, last_index() + 1, EntryType::kNoop, {}}, out);
  broadcast_append(out);
  maybe_commit(out);  // a single voter commits at once
  heartbeat_due_ = now + config_.heartbeat_interval;
  quorum_check_due_ = now + config_.election_timeout;
  deadline_ = std::min(heartbeat_due_, quorum_check_due_);
}

void Raft::append_local(Entry entry, Effects& out) {
  if (entry.index != log_.size() + 1) die("append out of order");
  out.persist.append.push_back(entry);
  log_.push_back(std::move(entry));
}

void Raft::truncate_local(Index from, Effects& out) {
  if (from <= commit_) die("truncation of a committed entry");
  if (from > log_.size()) return;
  log_.resize(from - 1);
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

void Raft::send_append(NodeId to, Effects& out) {
  Progress& p = progress_.at(to);
  AppendEntries m;
  m.term = hard_.term;
  m.prev_log_index = p.next - 1;
  m.prev_log_term = term_at(m.prev_log_index);
  m.leader_commit = commit_;
  for (Index i = p.next; i <= last_index() && m.entries.size() < config_.max_entries_per_append;
       ++i) {
    m.entries.push_back(entry(i));
  }
  send(to, std::move(m), out);
}

void Raft::broadcast_append(Effects& out) {
  for (auto& [id, p] : progress_) send_append(id, out);
}

bool Raft::log_up_to_date(Index index, Term term) const {
  return term > last_term() || (term == last_term() && index >= last_index());
}

bool Raft::in_lease(TimePoint now) const {
  if (role_ == Role::kLeader) return true;
  return leader_ != kNoNode && now < last_leader_contact_ + config_.election_timeout;
}

void Raft::maybe_commit(Effects& out) {
  if (role_ != Role::kLeader) return;
  for (Index n = last_index(); n > commit_; --n) {
    // The current-term rule: never commit an older term's entry by counting (Figure 8).
    if (term_at(n) != hard_.term) break;
    std::size_t count = 1;  // this leader; its log is durable before anything it sends
    for (const auto& [id, p] : progress_) count += p.match >= n ? 1 : 0;
    if (count >= quorum()) {
      advance_commit(n, out);
      return;
    }
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

void Raft::tick(TimePoint now, Effects& out) {
  out.clear();
  if (role_ == Role::kLeader) {
    if (config_.check_quorum && now >= quorum_check_due_) {
      std::size_t active = 1;
      for (auto& [id, p] : progress_) {
        active += p.recent_active ? 1 : 0;
        p.recent_active = false;
      }
      if (active < quorum()) {
        become_follower(now, hard_.term, kNoNode, out);
        return;
      }
      quorum_check_due_ = now + config_.election_timeout;
    }
    if (now >= heartbeat_due_) {
      broadcast_append(out);
      heartbeat_due_ = now + config_.heartbeat_interval;
    }
    deadline_ = config_.check_quorum ? std::min(heartbeat_due_, quorum_check_due_) : heartbeat_due_;
    return;
  }
  if (now >= election_deadline_) campaign(now, out);
  if (role_ != Role::kLeader) deadline_ = election_deadline_;
}

ProposeOutcome Raft::propose(TimePoint /*now*/, std::string data, Effects& out) {
  out.clear();
  if (role_ != Role::kLeader) return ProposeOutcome{false, 0, 0, leader_};
  const Index index = last_index() + 1;
  append_local(Entry{hard_.term, index, EntryType::kCommand, std::move(data)}, out);
  broadcast_append(out);
  maybe_commit(out);
  return ProposeOutcome{true, index, hard_.term, self_};
}

void Raft::on_message(TimePoint now, const Message& message, Effects& out) {
  out.clear();
  const NodeId from = message.from;
  if (from == self_ || message.to != self_ ||
      !std::binary_search(voters_.begin(), voters_.end(), from)) {
    return;  // not for us, or not a voter: ignore
  }
  std::visit(
      [&](const auto& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, VoteRequest>) {
          handle_vote_request(now, from, m, out);
        } else if constexpr (std::is_same_v<T, VoteReply>) {
          handle_vote_reply(now, from, m, out);
        } else if constexpr (std::is_same_v<T, AppendEntries>) {
          handle_append(now, from, m, out);
        } else {
          handle_append_reply(now, from, m, out);
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
  if (!m.granted) return;
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
  if (m.term > hard_.term || role_ != Role::kFollower || leader_ != from) {
    if (role_ == Role::kLeader && m.term == hard_.term) die("two leaders in one term");
    become_follower(now, m.term, from, out);
  }
  last_leader_contact_ = now;
  reset_election_deadline(now);

  AppendReply reply{hard_.term, false, 0, 0, 0};
  if (m.prev_log_index > last_index()) {
    reply.conflict_index = last_index() + 1;
    send(from, reply, out);
    return;
  }
  if (term_at(m.prev_log_index) != m.prev_log_term) {
    reply.conflict_term = term_at(m.prev_log_index);
    Index first = m.prev_log_index;
    while (first > 1 && term_at(first - 1) == reply.conflict_term) --first;
    reply.conflict_index = first;
    send(from, reply, out);
    return;
  }
  for (const Entry& e : m.entries) {
    if (e.index <= last_index()) {
      if (term_at(e.index) == e.term) continue;  // already there (a duplicate or reordered AE)
      truncate_local(e.index, out);
    }
    append_local(e, out);
  }
  const Index match = m.prev_log_index + m.entries.size();
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
  Progress& p = progress_.at(from);
  p.recent_active = true;
  if (m.success) {
    if (m.match_index > last_index()) die("follower matched beyond the leader's log");
    if (m.match_index > p.match) p.match = m.match_index;
    p.next = std::max(p.next, p.match + 1);
    maybe_commit(out);
    if (p.next <= last_index()) send_append(from, out);
    return;
  }
  // Fast backtracking: skip the follower's whole conflicting term, or to its log end.
  Index next = m.conflict_index;
  if (m.conflict_term != 0) {
    for (Index i = last_index(); i > 0; --i) {
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
  send_append(from, out);
}

}  // namespace elastic::consensus
