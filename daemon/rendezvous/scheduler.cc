#include "daemon/rendezvous/scheduler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <utility>

namespace elastic::rendezvous {
namespace {

constexpr std::uint32_t kNoLimit = std::numeric_limits<std::uint32_t>::max();

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "scheduler: broken invariant: %s\n", what);
  std::abort();
}

bool ahead(const SchedJob& a, const SchedJob& b) {
  if (a.priority != b.priority) return a.priority > b.priority;
  if (a.submitted_at != b.submitted_at) return a.submitted_at < b.submitted_at;
  return a.id < b.id;
}

// Preemption victims: lowest priority first, then newest, then id.
bool preempted_first(const SchedJob* a, const SchedJob* b) {
  if (a->priority != b->priority) return a->priority < b->priority;
  if (a->submitted_at != b->submitted_at) return a->submitted_at > b->submitted_at;
  return a->id < b->id;
}

std::uint32_t least_slots(const SchedJob& job) { return std::max(1u, job.workers_per_node); }

std::string counted(std::size_t n, const char* what) {
  return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}
std::string nodes_text(std::size_t n) { return counted(n, "node"); }

// "a, b, c and 4 more": event reasons have a size bound, rank maps do not.
std::string name_list(const std::vector<std::string>& names) {
  constexpr std::size_t kShown = 8;
  std::string text;
  for (std::size_t i = 0; i < names.size() && i < kShown; ++i) {
    text += (i == 0 ? "" : ", ") + names[i];
  }
  if (names.size() > kShown) text += " and " + std::to_string(names.size() - kShown) + " more";
  return text;
}

// The most nodes a job may want before limits: max_nodes, or the throughput size when set
// (never below min_nodes: a size under min cannot run).
std::uint32_t size_want(const SchedJob& job) {
  if (job.size_cap == 0) return job.max_nodes;
  return std::clamp(job.size_cap, job.min_nodes, job.max_nodes);
}

struct Usage {
  std::uint32_t jobs = 0;
  std::uint32_t nodes = 0;
};

// One side (user or group) of the limits that apply to a job.
struct Bound {
  std::string who;        // "user alice", "group physics"
  std::string jobs_key;   // the config key of its running-jobs limit
  std::string nodes_key;  // ... and of its node limit
  LimitValues values;
  Usage* usage;
};

struct NodeState {
  const SchedNode* node;
  std::uint32_t free = 0;                // slots not held, granted or reserved in this pass
  std::uint32_t reserved = 0;            // of the slots taken in this pass, those reserved
  std::vector<std::string> reserved_by;  // jobs that reserved slots here, in pass order
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerInput& in) : limits_(in.limits) {
    std::set<std::string> ids;
    for (const SchedNode& n : in.nodes) {
      if (!nodes_.try_emplace(n.name, NodeState{&n, n.slots, 0, {}}).second) {
        die("two nodes with one name");
      }
    }
    for (const SchedJob& job : in.jobs) {
      if (job.min_nodes == 0 || job.max_nodes < job.min_nodes) die("job size out of range");
      if (job.state == SchedState::kHeld) continue;
      if (!ids.insert(job.id).second) die("two jobs with one id");
      order_.push_back(&job);
      if (job.state == SchedState::kQueued) ++queued_;
      if (job.state != SchedState::kRunning) continue;
      count(job, static_cast<std::uint32_t>(job.holdings.size()), true);
      for (const auto& [name, slots] : job.holdings) {
        auto it = nodes_.find(name);
        if (it != nodes_.end()) it->second.free -= std::min(it->second.free, slots);
      }
    }
    std::sort(order_.begin(), order_.end(), [](auto* a, auto* b) { return ahead(*a, *b); });
  }

  SchedulerOutput run() {
    std::size_t position = 0;
    for (const SchedJob* job : order_) {
      if (job->state == SchedState::kQueued) {
        place(*job, ++position);
      } else if (!out_.plans.contains(job->id)) {  // a victim's plan is set when preempted
        grow(*job);
      }
    }
    return std::move(out_);
  }

 private:
  std::array<Bound, 2> bounds(const SchedJob& job) {
    const auto user = limits_.users.find(job.user);
    const auto group = limits_.groups.find(job.gid);
    const auto named = limits_.group_names.find(job.gid);
    const std::string group_name =
        named != limits_.group_names.end() ? named->second : std::to_string(job.gid);
    const bool own_user = user != limits_.users.end();
    const bool own_group = group != limits_.groups.end();
    const std::string user_entry = "limits.users." + job.user;
    const std::string group_entry = "limits.groups." + group_name;
    return {
        Bound{"user " + job.user,
              own_user ? user_entry + ".max_running_jobs" : "limits.max_running_jobs_per_user",
              own_user ? user_entry + ".max_nodes" : "limits.max_nodes_per_user",
              own_user ? user->second : limits_.per_user, &users_[job.user]},
        Bound{"group " + group_name,
              own_group ? group_entry + ".max_running_jobs" : "limits.max_running_jobs_per_group",
              own_group ? group_entry + ".max_nodes" : "limits.max_nodes_per_group",
              own_group ? group->second : limits_.per_group, &groups_[job.gid]},
    };
  }

  // Why a queued job may not start now under the limits ("" when it may).
  std::string limit_reason(const SchedJob& job) {
    for (const Bound& b : bounds(job)) {
      const LimitValues& v = b.values;
      if (v.max_running_jobs != 0 && b.usage->jobs >= v.max_running_jobs) {
        return b.who + " runs " + counted(b.usage->jobs, "job") + ", the limit (" + b.jobs_key +
               ")";
      }
      if (v.max_nodes != 0 && std::uint64_t{b.usage->nodes} + job.min_nodes > v.max_nodes) {
        return b.who + " holds " + nodes_text(b.usage->nodes) + " and the job needs " +
               std::to_string(job.min_nodes) + ", past the limit of " +
               std::to_string(v.max_nodes) + " (" + b.nodes_key + ")";
      }
    }
    return "";
  }

  // How many more nodes the job's user and group may hold, and the sentence naming the bound
  // that allows the fewest.
  std::pair<std::uint32_t, std::string> node_room(const SchedJob& job) {
    std::pair<std::uint32_t, std::string> room{kNoLimit, ""};
    for (const Bound& b : bounds(job)) {
      if (b.values.max_nodes == 0) continue;
      const std::uint32_t left = b.values.max_nodes - std::min(b.values.max_nodes, b.usage->nodes);
      if (left < room.first) {
        room = {left, b.who + " holds " + nodes_text(b.usage->nodes) + ", the limit (" +
                          b.nodes_key + ")"};
      }
    }
    return room;
  }

  // Adds a job's nodes (and the job itself when it runs from now on) to its user and group.
  void count(const SchedJob& job, std::uint32_t nodes, bool started) {
    for (const Bound& b : bounds(job)) {
      b.usage->nodes += nodes;
      if (started) ++b.usage->jobs;
    }
  }

  static bool holds(const SchedJob& job, const std::string& name) {
    return std::any_of(job.holdings.begin(), job.holdings.end(),
                       [&](const auto& h) { return h.first == name; });
  }

  bool fits(const SchedJob& job, const NodeState& n) const {
    return n.node->usable && n.free >= least_slots(job) && !holds(job, n.node->name) &&
           !job.avoid.contains(n.node->name);
  }

  std::vector<NodeState*> fitting(const SchedJob& job) {
    std::vector<NodeState*> out;
    for (auto& [name, n] : nodes_) {
      if (fits(job, n)) out.push_back(&n);
    }
    return out;
  }

  // Takes the job's need from the node's free slots (all of them when workers_per_node is 0).
  static void take(const SchedJob& job, NodeState& n) {
    n.free -= job.workers_per_node == 0 ? n.free : std::min(n.free, job.workers_per_node);
  }

  // ", others reserved for job X ahead of it" when a reservation keeps the job off a node it
  // could otherwise use.
  std::string reserved_text(const SchedJob& job) const {
    for (const auto& [name, n] : nodes_) {
      if (n.reserved_by.empty() || fits(job, n) || !n.node->usable || holds(job, name)) continue;
      if (n.free + n.reserved >= least_slots(job)) {
        return ", others reserved for job " + n.reserved_by.front() + " ahead of it";
      }
    }
    return "";
  }

  void place(const SchedJob& job, std::size_t position) {
    JobPlan& plan = out_.plans[job.id];
    plan.position = position;
    const std::string position_text =
        " (position " + std::to_string(position) + " of " + std::to_string(queued_) + ")";
    if (std::string limited = limit_reason(job); !limited.empty()) {
      plan.reason = limited + position_text;
      return;  // no reservation: a job the limits hold back must not delay the ones after it
    }
    std::vector<NodeState*> fit = fitting(job);
    if (fit.size() >= job.min_nodes) {
      const std::uint32_t want = std::min(size_want(job), node_room(job).first);
      for (std::size_t i = 0; i < fit.size() && plan.allowed.size() < want; ++i) {
        take(job, *fit[i]);
        plan.allowed.insert(fit[i]->node->name);
      }
      plan.cap = static_cast<std::uint32_t>(plan.allowed.size());
      count(job, plan.cap, true);
      return;
    }
    const std::string waiting = "waiting for " + nodes_text(job.min_nodes) + ", " +
                                std::to_string(fit.size()) + (fit.size() == 1 ? " fits" : " fit");
    std::string reserved = reserved_text(job);
    // What fits is reserved either way: for the preemption below, or as rule 2 wants.
    for (NodeState* n : fit) reserve(job, *n, plan);
    if (preempt(job, fit.size(), plan)) return;
    plan.reason = waiting + reserved + position_text;
  }

  void reserve(const SchedJob& job, NodeState& n, JobPlan& plan) {
    const std::uint32_t before = n.free;
    take(job, n);
    n.reserved += before - n.free;
    n.reserved_by.push_back(job.id);
    plan.reserved.insert(n.node->name);
  }

  void grow(const SchedJob& job) {
    JobPlan& plan = out_.plans[job.id];
    // A holding on a node that is not working (lost, leaving) stays allowed -- the job's planner
    // sees its member there and replaces it -- but does not count toward the want, so the
    // replacement is granted in the same pass as the loss is handled.
    std::uint32_t held = 0;
    for (const auto& h : job.holdings) {
      plan.allowed.insert(h.first);
      const auto n = nodes_.find(h.first);
      if (n != nodes_.end() && (n->second.node->usable || n->second.node->working)) ++held;
    }
    const auto want = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(size_want(job), std::uint64_t{held} + node_room(job).first));
    std::uint32_t have = held;
    if (held < want) {
      for (NodeState* n : fitting(job)) {
        if (have >= want) break;
        take(job, *n);
        plan.allowed.insert(n->node->name);
        ++have;
      }
    }
    count(job, have - held, false);
    plan.cap = std::clamp(have, job.min_nodes, size_want(job));
    if (have < want) {
      plan.reason = "holds " + std::to_string(plan.allowed.size()) + " of " + nodes_text(want) +
                    ", no more free fits" + reserved_text(job);
    } else if (have < size_want(job) && want < size_want(job)) {
      plan.reason = node_room(job).second;
    }
  }

  // What one queued job would take from lower-priority running jobs.
  struct Taking {
    const SchedJob* victim;
    std::size_t keep;  // rank map entries it keeps (0 with suspend)
    bool suspend = false;
  };

  // Rule 5: takes what the job lacks (needs more nodes than `fit` free ones) from running jobs
  // of lower priority, if they can give enough; the job's plan reserves the nodes they free.
  bool preempt(const SchedJob& job, std::size_t fit, JobPlan& plan) {
    std::vector<const SchedJob*> victims;
    for (const SchedJob* v : order_) {
      if (v->state == SchedState::kRunning && v->priority < job.priority &&
          !out_.plans.contains(v->id)) {
        victims.push_back(v);
      }
    }
    std::sort(victims.begin(), victims.end(), preempted_first);

    const std::size_t lacking = job.min_nodes - fit;
    std::map<std::string, std::uint32_t> released_slots;
    std::vector<std::string> gained;  // nodes that fit the job once released
    auto release = [&](const SchedJob& victim, std::size_t entry) {
      const auto& [name, slots] = victim.holdings[entry];
      released_slots[name] += slots;
      auto it = nodes_.find(name);
      if (it == nodes_.end() || plan.reserved.contains(name)) return;
      const NodeState& n = it->second;
      if (n.node->usable && !job.avoid.contains(name) &&
          n.free + released_slots[name] >= least_slots(job) &&
          std::find(gained.begin(), gained.end(), name) == gained.end()) {
        gained.push_back(name);
      }
    };
    std::vector<Taking> takings;
    for (const SchedJob* v : victims) {  // shrinks: what each holds above its min
      // Entries released after the last one that gave the job a node go back: a victim never
      // gives up what the job cannot use.
      std::size_t keep = v->holdings.size();
      auto kept_slots = released_slots;
      for (std::size_t next = keep; gained.size() < lacking && next > v->min_nodes;) {
        const std::size_t had = gained.size();
        release(*v, --next);
        if (gained.size() > had) keep = next, kept_slots = released_slots;
      }
      released_slots = std::move(kept_slots);
      if (keep < v->holdings.size()) takings.push_back({v, keep});
    }
    for (const SchedJob* v : victims) {  // then suspensions of preemptible jobs
      if (gained.size() >= lacking) break;
      if (!v->preemptible) continue;
      auto it =
          std::find_if(takings.begin(), takings.end(), [&](auto& t) { return t.victim == v; });
      const std::size_t had = gained.size();
      auto kept_slots = released_slots;
      for (std::size_t e = it == takings.end() ? v->holdings.size() : it->keep; e > 0; --e) {
        release(*v, e - 1);
      }
      if (gained.size() == had) {  // nothing of it is of use to the job: it keeps running
        released_slots = std::move(kept_slots);
        continue;
      }
      if (it == takings.end()) it = takings.insert(takings.end(), {v, 0});
      it->keep = 0;
      it->suspend = true;
    }
    if (gained.size() < lacking) return false;  // nothing is preempted for it

    std::vector<std::string> names;
    for (const Taking& t : takings) {
      names.push_back(t.victim->id);
      record(job, t);
    }
    for (const std::string& name : gained) reserve(job, nodes_.at(name), plan);
    plan.reason = "waiting for " + std::string(names.size() == 1 ? "job " : "jobs ") +
                  name_list(names) + " to release " + nodes_text(gained.size()) +
                  " (preempted for it)";
    return true;
  }

  void record(const SchedJob& job, const Taking& t) {
    const SchedJob& v = *t.victim;
    Preemption p;
    p.victim = v.id;
    p.kind = t.suspend ? Preemption::Kind::kSuspend : Preemption::Kind::kShrink;
    p.for_job = job.id;
    for (std::size_t i = 0; i < v.holdings.size(); ++i) {
      (i < t.keep ? p.keep : p.released).push_back(v.holdings[i].first);
    }
    p.reason = "preempted for job " + job.id + " (priority " + std::to_string(job.priority) +
               " > " + std::to_string(v.priority) + "): " + (t.suspend ? "suspended, " : "") +
               "gives up " + (p.released.size() == 1 ? "node " : "nodes ") + name_list(p.released);
    if (!t.suspend) {
      p.reason += " and keeps " + std::to_string(t.keep) +
                  (t.keep == v.min_nodes ? " (its min_nodes)" : "");
    }
    JobPlan& plan = out_.plans[v.id];
    plan.allowed = std::set<std::string>(p.keep.begin(), p.keep.end());
    plan.cap = static_cast<std::uint32_t>(t.keep);
    plan.reason = t.suspend
                      ? "suspended for job " + job.id + " (preempted)"
                      : "shrinks to " + nodes_text(t.keep) + " for job " + job.id + " (preempted)";
    out_.preemptions.push_back(std::move(p));
  }

  std::map<std::string, NodeState> nodes_;  // by name: the pass visits nodes in name order
  std::vector<const SchedJob*> order_;      // queued and running jobs, in order
  std::size_t queued_ = 0;
  const Limits& limits_;
  std::map<std::string, Usage> users_;
  std::map<std::uint32_t, Usage> groups_;
  SchedulerOutput out_;
};

// "1840", "12.5": samples per second as a person reads them.
std::string rate_text(double rate) {
  char text[32];
  std::snprintf(text, sizeof text, rate >= 100 ? "%.0f" : "%.3g", rate);
  return text;
}

// "+2.8%", "+79%", "-4.0%".
std::string percent_text(double fraction) {
  char text[32];
  const double pct = fraction * 100;
  std::snprintf(text, sizeof text, std::fabs(pct) < 10 ? "%+.1f%%" : "%+.0f%%", pct);
  return text;
}

// "5%": the configured scale_min_gain as written.
std::string gain_text(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%g%%", fraction * 100);
  return text;
}

}  // namespace

SchedulerOutput schedule(const SchedulerInput& input) { return Scheduler(input).run(); }

ScaleDecision scale_step(const ScaleInput& in) {
  if (in.min_nodes == 0 || in.max_nodes < in.min_nodes) die("scale size out of range");
  ScaleDecision d{in.state, false, ""};
  ScaleState& s = d.next;
  auto decide = [&](std::string reason) {
    d.changed = s != in.state;
    if (d.changed) d.reason = std::move(reason);
    return d;
  };
  // A state from before max_nodes or min_nodes changed is brought back into range first.
  if (s.size == 0 || s.size < in.min_nodes || s.size > in.max_nodes) {
    s.size = std::clamp(s.size, in.min_nodes, in.max_nodes);
    s.good = std::min(s.good, s.size);
    return decide(in.state.size == 0
                      ? "starting at " + nodes_text(s.size) + " (min_nodes)"
                      : "size " + std::to_string(in.state.size) +
                            " is outside min_nodes..max_nodes: now " + nodes_text(s.size));
  }
  if (s.settled) {
    const std::uint32_t last = std::max(s.good, in.min_nodes);
    if (!in.cluster_changed || last >= in.max_nodes) return d;
    s.settled = false;
    s.size = last + 1;
    s.rate.erase(s.size);  // measured on another cluster
    return decide("the cluster changed: trying " + nodes_text(s.size));
  }
  if (in.measured && in.measured->first == s.size) {
    const auto [size, rate] = *in.measured;
    s.rate[size] = rate;
    if (s.good == 0 || size <= s.good) {
      // The first window (at min_nodes) sets the baseline.
      s.good = size;
      if (size >= in.max_nodes) {
        s.settled = true;
        return decide("samples/s " + rate_text(rate) + " at " + nodes_text(size) +
                      ": at max_nodes");
      }
      s.size = size + 1;
      return decide("samples/s " + rate_text(rate) + " at " + nodes_text(size) + ": trying " +
                    std::to_string(s.size));
    }
    const double base = in.state.rate.contains(s.good) ? in.state.rate.at(s.good) : 0;
    // No baseline rate (a state from an older leader): any work at all pays off.
    const double gain = base > 0   ? (rate - base) / base / (size - s.good)
                        : rate > 0 ? std::numeric_limits<double>::infinity()
                                   : 0;
    const std::string compared = "samples/s " + rate_text(rate) + " at " + nodes_text(size) +
                                 " vs " + rate_text(base) + " at " + std::to_string(s.good) + " (" +
                                 percent_text(gain);
    if (gain < in.min_gain) {
      s.size = s.good;
      s.settled = true;
      return decide(compared + ", below the " + gain_text(in.min_gain) +
                    " scale_min_gain): back to " + nodes_text(s.size));
    }
    s.good = size;
    if (size >= in.max_nodes) {
      s.settled = true;
      return decide(compared + "): at max_nodes");
    }
    s.size = size + 1;
    return decide(compared + "): trying " + std::to_string(s.size));
  }
  if (in.short_of_nodes) {
    s.size = std::max(s.good, in.min_nodes);
    s.settled = true;
    return decide("no node came for size " + std::to_string(in.state.size) +
                  " within a window: " + (s.size == in.state.size ? "stays at " : "back to ") +
                  nodes_text(s.size) + " until the cluster changes");
  }
  return d;
}

}  // namespace elastic::rendezvous
