#include "daemon/rendezvous/planner.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>
#include <string_view>
#include <utility>

#include "daemon/core/duration.h"

namespace elastic::rendezvous {
namespace {

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "planner: broken invariant: %s\n", what);
  std::abort();
}

// t + d in whole milliseconds (rounded up, so a deadline is never early), saturating instead
// of overflowing: times come from replicated records and must not cause undefined behaviour.
WallTime after(WallTime t, Duration d) {
  const std::int64_t ms =
      std::chrono::ceil<std::chrono::milliseconds>(std::max(d, Duration::zero())).count();
  const std::int64_t base = t.time_since_epoch().count();
  if (base > std::numeric_limits<std::int64_t>::max() - ms) {
    return WallTime(std::chrono::milliseconds(std::numeric_limits<std::int64_t>::max()));
  }
  return WallTime(std::chrono::milliseconds(base + ms));
}

std::string truncated(std::string text) {
  if (text.size() > kMaxReasonBytes) text.resize(kMaxReasonBytes);
  return text;
}

std::string node_count(std::size_t n) { return std::to_string(n) + (n == 1 ? " node" : " nodes"); }

// One node chosen for a round, in rank order.
struct Pick {
  const Candidate* candidate;
  WallTime ready;  // when it became available for this round (gathering)
};

class Planner {
 public:
  explicit Planner(const PlannerInput& in) : in_(in), job_(*in.job) {
    for (const Candidate& c : in.candidates) by_name_.try_emplace(c.name, &c);
    last_call_ = job_.spec.last_call.value_or(in.config.last_call);
    // Members: alive ones keep their order; the others are lost.
    for (const RankAssignment& m : job_.ranks) {
      const Candidate* c = find(m.node, m.generation);
      if (c != nullptr && eligible(*c)) {
        alive_.push_back(Pick{c, job_.state_since});
      } else {
        lost_.push_back(m);
      }
    }
    // Waiters: eligible, not an alive member, each node once (its earliest entry).
    std::set<std::string_view> alive_names;
    for (const Pick& p : alive_) alive_names.insert(p.candidate->name);
    std::map<std::string_view, Pick> waiting;
    for (const Waiter& w : in.wait_list) {
      const Candidate* c = find(w.node, w.generation);
      if (c == nullptr || !eligible(*c) || alive_names.contains(w.node)) continue;
      auto [it, inserted] = waiting.try_emplace(c->name, Pick{c, w.since});
      if (!inserted && w.since < it->second.ready) it->second.ready = w.since;
    }
    for (const auto& [name, pick] : waiting) waiters_.push_back(pick);
    std::sort(waiters_.begin(), waiters_.end(), [](const Pick& a, const Pick& b) {
      if (a.ready != b.ready) return a.ready < b.ready;
      return a.candidate->name < b.candidate->name;
    });
  }

  Decision run() {
    const JobSpec& spec = job_.spec;
    switch (job_.state) {
      case JobState::kSucceeded:
      case JobState::kFailed:
      case JobState::kCancelled:
      case JobState::kSuspended:  // held: nothing to plan until it is resumed
        return Decision{};
      case JobState::kPending:
        return gather({}, RoundReason::kSubmitted);
      case JobState::kRecovering:
        if (job_.recovery_cause == RoundReason::kWorkerFailed) {
          // The recovery's reason names the failure (a worker that cannot start, a store port
          // in use): the job fails with it, not with a bare count.
          if (job_.restarts >= spec.max_restarts) return restarts_exhausted(job_.reason);
          const WallTime ready = after(job_.state_since, spec.restart_backoff);
          if (in_.now < ready) return wait_until(ready, "restart backoff");
          Decision d = gather(alive_, RoundReason::kWorkerFailed);
          if (d.kind == Decision::Kind::kOpenRound) d.failed_node = job_.failed_node;
          return d;
        }
        return gather(alive_, RoundReason::kMemberLost);
      case JobState::kRendezvous:
      case JobState::kRunning:
        return in_round();
    }
    die("unknown job state");
  }

 private:
  Decision in_round() {
    const JobSpec& spec = job_.spec;
    if (!lost_.empty()) {
      const RankAssignment& first = lost_.front();
      std::string detail =
          "node " + first.node + " (generation " + std::to_string(first.generation) + ")";
      if (lost_.size() > 1) detail += " and " + std::to_string(lost_.size() - 1) + " more";
      detail += lost_.size() > 1 ? " were lost" : " was lost";
      if (alive_.size() + waiters_.size() >= spec.min_nodes) {
        return open(with_waiters(alive_), RoundReason::kMemberLost, detail);
      }
      Decision d;
      d.kind = Decision::Kind::kRecover;
      d.reason = RoundReason::kMemberLost;
      d.detail = truncated(detail + "; " + std::to_string(alive_.size() + waiters_.size()) +
                           " of the " + node_count(spec.min_nodes) + " needed remain");
      return d;
    }
    const std::optional<WorkerFailure>& failure = in_.worker_failure;
    if (failure && failure->round == job_.round) {
      if (job_.restarts >= spec.max_restarts) return restarts_exhausted(failure->detail);
      if (survivors_live(failure->node)) {
        // Nothing to back off from: the survivors keep their processes and re-form in place,
        // only the failed node's ranks start again. Without that node while the others reach
        // min_nodes (it joins again by growing, once its replacement can start), else with it.
        std::vector<Pick> others;
        for (const Pick& p : alive_) {
          if (p.candidate->name != failure->node) others.push_back(p);
        }
        Decision d = others.size() < alive_.size() && others.size() >= spec.min_nodes
                         ? open(others, RoundReason::kWorkerFailed, failure->detail)
                         : open(with_waiters(alive_), RoundReason::kWorkerFailed, failure->detail);
        d.failed_node = failure->node;
        return d;
      }
      if (spec.restart_backoff <= Duration::zero()) {
        Decision d = open(with_waiters(alive_), RoundReason::kWorkerFailed, failure->detail);
        d.failed_node = failure->node;
        return d;
      }
      Decision d;
      d.kind = Decision::Kind::kRecover;
      d.reason = RoundReason::kWorkerFailed;
      d.detail = truncated(failure->detail.empty() ? "a worker failed" : failure->detail);
      d.failed_node = failure->node;
      return d;
    }
    if (job_.state == JobState::kRunning && !waiters_.empty() && alive_.size() < spec.max_nodes) {
      const std::string detail =
          node_count(std::min<std::size_t>(waiters_.size(), spec.max_nodes - alive_.size())) +
          " joined";
      if (alive_.size() + waiters_.size() >= spec.max_nodes) {
        return open(with_waiters(alive_), RoundReason::kGrow, detail);
      }
      const WallTime at = after(waiters_.front().ready, last_call_);
      if (in_.now >= at) return open(with_waiters(alive_), RoundReason::kGrow, detail);
      return wait_until(at, "last call before growing");
    }
    return Decision{};
  }

  // Whether every alive member but `failed` re-forms in place (PlannerInput::live); false when
  // the failed node is unknown.
  bool survivors_live(const std::string& failed) const {
    if (failed.empty() || in_.live.empty()) return false;
    return std::all_of(alive_.begin(), alive_.end(), [&](const Pick& p) {
      return p.candidate->name == failed || in_.live.contains(p.candidate->name);
    });
  }

  // A round from `members` (kept first, in order) and the waiters, or a wait, or a failure.
  Decision gather(const std::vector<Pick>& members, RoundReason reason) {
    const JobSpec& spec = job_.spec;
    const std::vector<Pick> picks = with_waiters(members);
    const std::string detail =
        reason == RoundReason::kSubmitted ? node_count(picks.size()) + " joined"
        : reason == RoundReason::kWorkerFailed
            ? "restart after a worker failure with " + node_count(picks.size())
            : node_count(picks.size()) + " available after a lost member";
    if (members.size() >= spec.min_nodes || picks.size() >= spec.max_nodes) {
      return open(picks, reason, detail);
    }
    if (members.size() + waiters_.size() >= spec.min_nodes) {
      // The moment min_nodes were there, then the last call for more.
      std::vector<WallTime> ready;
      for (const Pick& p : members) ready.push_back(p.ready);
      for (const Pick& p : waiters_) ready.push_back(p.ready);
      std::sort(ready.begin(), ready.end());
      const WallTime at = after(ready[spec.min_nodes - 1], last_call_);
      if (in_.now >= at) return open(picks, reason, detail);
      return wait_until(at, "last call");
    }
    const WallTime deadline = after(job_.state_since, in_.config.join_timeout);
    if (in_.now >= deadline) {
      Decision d;
      d.kind = Decision::Kind::kFail;
      d.detail = truncated("only " + std::to_string(members.size() + waiters_.size()) + " of the " +
                           node_count(spec.min_nodes) + " needed joined within " +
                           format_duration(in_.config.join_timeout));
      return d;
    }
    return wait_until(deadline, "join timeout");
  }

  std::vector<Pick> with_waiters(const std::vector<Pick>& members) const {
    std::vector<Pick> picks = members;
    for (const Pick& w : waiters_) {
      if (picks.size() >= job_.spec.max_nodes) break;
      picks.push_back(w);
    }
    return picks;
  }

  Decision open(const std::vector<Pick>& picks, RoundReason reason, const std::string& detail) {
    Decision d;
    d.kind = Decision::Kind::kOpenRound;
    d.reason = reason;
    d.detail = truncated(detail);
    std::uint32_t next_rank = 0;
    for (const Pick& p : picks) {
      const std::uint32_t slots = workers(*p.candidate);
      d.ranks.push_back(
          RankAssignment{p.candidate->name, p.candidate->generation, slots, next_rank});
      next_rank += slots;
    }
    if (picks.empty()) die("a round without nodes");
    const Candidate& rank0 = *picks.front().candidate;
    const bool ipv6 = rank0.address.find(':') != std::string::npos;
    d.store_endpoint =
        (ipv6 ? "[" + rank0.address + "]" : rank0.address) + ":" + std::to_string(rank0.store_port);
    return d;
  }

  Decision wait_until(WallTime at, const char* why) const {
    Decision d;
    d.kind = Decision::Kind::kWaitUntil;
    d.wake_at = at;
    d.detail = why;
    return d;
  }

  Decision restarts_exhausted(const std::string& failure) const {
    Decision d;
    d.kind = Decision::Kind::kFail;
    d.detail = truncated("workers failed and the job has used all " +
                         std::to_string(job_.spec.max_restarts) + " restarts" +
                         (failure.empty() ? "" : ": " + failure));
    return d;
  }

  const Candidate* find(const std::string& name, std::uint64_t generation) const {
    const auto it = by_name_.find(name);
    if (it == by_name_.end() || it->second->generation != generation) return nullptr;
    return it->second;
  }

  bool eligible(const Candidate& c) const {
    const std::uint32_t per_node = job_.spec.workers_per_node;
    return c.alive && c.store_port != 0 && c.slots >= 1 && (per_node == 0 || c.slots >= per_node);
  }

  std::uint32_t workers(const Candidate& c) const {
    return job_.spec.workers_per_node != 0 ? job_.spec.workers_per_node : c.slots;
  }

  const PlannerInput& in_;
  const JobRecord& job_;
  Duration last_call_{};
  std::map<std::string_view, const Candidate*> by_name_;
  std::vector<Pick> alive_;
  std::vector<RankAssignment> lost_;
  std::vector<Pick> waiters_;
};

const RankAssignment* member_of(const RankMap& ranks, const RankAssignment& m) {
  for (const RankAssignment& r : ranks) {
    if (r.node == m.node && r.generation == m.generation) return &r;
  }
  return nullptr;
}

// Each node's TORCHELASTIC_RESTART_COUNT in round `c` (see make_open_round in planner.h).
void set_restart_counts(const JobRecord& job, OpenRound& c) {
  bool member_missing = false;
  for (const RankAssignment& old : job.ranks) {
    member_missing = member_missing || member_of(c.ranks, old) == nullptr;
  }
  for (RankAssignment& m : c.ranks) {
    const RankAssignment* old = member_of(job.ranks, m);
    m.restarts = old != nullptr ? old->restarts : 0;
    if (old == nullptr) continue;
    bool restarted = false;
    if (c.reason == RoundReason::kWorkerFailed) {
      restarted = c.failed_node.empty() || c.failed_node == m.node;
    } else if (c.reason == RoundReason::kMemberLost) {
      restarted = member_missing || job.state == JobState::kRecovering;
    }
    if (restarted) ++m.restarts;
  }
}

}  // namespace

const char* to_string(Decision::Kind kind) {
  switch (kind) {
    case Decision::Kind::kNone:
      return "none";
    case Decision::Kind::kOpenRound:
      return "open_round";
    case Decision::Kind::kRecover:
      return "recover";
    case Decision::Kind::kWaitUntil:
      return "wait_until";
    case Decision::Kind::kFail:
      return "fail";
  }
  return "unknown";
}

Decision plan(const PlannerInput& input) {
  if (input.job == nullptr) die("plan() without a job");
  return Planner(input).run();
}

OpenRound make_open_round(const JobRecord& job, const Decision& decision, WallTime at) {
  if (decision.kind != Decision::Kind::kOpenRound) die("make_open_round() for another decision");
  OpenRound c;
  c.job_id = job.id;
  c.round = job.round + 1;
  c.expected_prev_round = job.round;
  c.ranks = decision.ranks;
  c.store_endpoint = decision.store_endpoint;
  c.reason = decision.reason;
  c.detail = truncated(decision.detail);
  c.at = at;
  if (decision.reason == RoundReason::kWorkerFailed) {
    c.failed_node = decision.failed_node.empty() ? job.failed_node : decision.failed_node;
  }
  set_restart_counts(job, c);
  return c;
}

SetJobState make_set_state(const JobRecord& job, const Decision& decision, WallTime at) {
  SetJobState c;
  c.job_id = job.id;
  c.round = job.round;
  c.at = at;
  c.reason = truncated(decision.detail);
  if (decision.kind == Decision::Kind::kRecover) {
    c.state = JobState::kRecovering;
    c.cause = decision.reason;
    if (decision.reason == RoundReason::kWorkerFailed) c.failed_node = decision.failed_node;
  } else if (decision.kind == Decision::Kind::kFail) {
    c.state = JobState::kFailed;
  } else {
    die("make_set_state() for a decision that changes no state");
  }
  return c;
}

}  // namespace elastic::rendezvous
