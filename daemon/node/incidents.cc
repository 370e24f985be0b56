#include "daemon/node/incidents.h"

#include <algorithm>
#include <climits>
#include <nlohmann/json.hpp>

namespace elastic::node {
namespace {

using json = nlohmann::json;

// Which cause explains an incident best: a lost node makes its peers' workers fail.
int weight(const std::string& cause) {
  if (cause == "node_lost" || cause == "node_left") return 2;
  if (cause == "worker_failed") return 1;
  return 0;
}

bool is_node_cause(const std::string& cause) { return weight(cause) == 2; }

double seconds(Duration d) { return std::chrono::duration<double>(d).count(); }

json optional_json(const std::optional<double>& value) {
  return value ? json(*value) : json(nullptr);
}

json optional_json(const std::optional<std::int64_t>& value) {
  return value ? json(*value) : json(nullptr);
}

// How many early stop reports a job keeps (rounds): reports only precede a loss by moments.
constexpr std::size_t kEarlyStopRounds = 4;

}  // namespace

RecoveryStats IncidentLog::stats() const {
  RecoveryStats total;
  for (const auto& [cause, stats] : stats_) {
    for (std::size_t i = 0; i < total.counts.size(); ++i) total.counts[i] += stats.counts[i];
    total.sum += stats.sum;
    total.count += stats.count;
  }
  return total;
}

Incident* IncidentLog::find(std::uint64_t id) {
  for (auto it = incidents_.rbegin(); it != incidents_.rend(); ++it) {
    if (it->id == id) return &*it;
  }
  return nullptr;
}

void IncidentLog::on_loss(TimePoint now, std::int64_t wall_ms, const std::string& job,
                          std::uint64_t round, const std::set<std::string>& members,
                          const std::string& cause, const std::string& node,
                          std::optional<std::int64_t> evidence_ms) {
  const auto it = open_.find(job);
  if (it != open_.end()) {
    Incident* incident = find(it->second.id);
    if (incident == nullptr) {
      open_.erase(it);  // evicted by newer incidents: start over
    } else if (incident->from_round == round && incident->to_round == 0) {
      // More evidence about the same loss.
      Open& state = it->second;
      if (is_node_cause(cause)) state.lost.insert(node);
      if (weight(cause) > weight(incident->cause)) {
        incident->cause = cause;
        incident->node = node;
      }
      if (evidence_ms && *evidence_ms < incident->at_ms) incident->at_ms = *evidence_ms;
      check_stopped(state);
      refresh(*incident, state);
      return;
    } else if (round > incident->from_round) {
      // A newer round failed before its first step: this recovery is over, a new one starts.
      finish(job, /*given_up=*/true);
    } else {
      return;  // late evidence about a round already replaced
    }
  }
  if (const auto last = last_from_round_.find(job);
      last != last_from_round_.end() && round <= last->second) {
    return;  // that round's incident exists (or existed) already
  }
  open(now, wall_ms, job, round, members, cause, node, evidence_ms);
}

void IncidentLog::open(TimePoint now, std::int64_t wall_ms, const std::string& job,
                       std::uint64_t round, const std::set<std::string>& members,
                       const std::string& cause, const std::string& node,
                       std::optional<std::int64_t> evidence_ms) {
  Incident incident;
  incident.id = ++next_id_;
  incident.job = job;
  incident.cause = cause;
  incident.node = node;
  incident.from_round = round;
  incident.progress_reports = last_step_.contains(job);
  incident.at_ms = evidence_ms ? std::min(*evidence_ms, wall_ms) : wall_ms;
  Open state;
  state.id = incident.id;
  state.detected = now;
  state.detected_wall = wall_ms;
  state.members = members;
  if (is_node_cause(cause)) state.lost.insert(node);
  if (const auto early = early_stops_.find(job); early != early_stops_.end()) {
    if (const auto reports = early->second.find(round); reports != early->second.end()) {
      state.stopped = reports->second;
    }
  }
  if (const auto step = last_step_.find(job);
      step != last_step_.end() && step->second.first <= round) {
    state.last_step = step->second.second;
  }
  last_from_round_[job] = round;
  check_stopped(state);
  refresh(incident, state);
  incidents_.push_back(std::move(incident));
  while (incidents_.size() > kMaxIncidents) incidents_.pop_front();
  record(ClusterEvent{.at_ms = wall_ms,
                      .kind = "incident",
                      .node = node,
                      .job = job,
                      .detail = "incident " + std::to_string(state.id) + " opened: " + cause +
                                " in round " + std::to_string(round)});
  open_[job] = std::move(state);
}

void IncidentLog::on_round_committed(TimePoint now, std::int64_t wall_ms, const std::string& job,
                                     std::uint64_t from_round, std::uint64_t round,
                                     std::uint32_t nodes, bool grow,
                                     const std::set<std::string>& old_members) {
  auto it = open_.find(job);
  if (it != open_.end()) {
    const Incident* incident = find(it->second.id);
    if (incident != nullptr && incident->to_round != 0 && round > incident->to_round &&
        it->second.rendezvous_at) {
      // The recovery's round stood (every member acknowledged it) with no first step before
      // this newer round: the recovery ended there, and this round (say a grow once the lost
      // node is back) is not part of it.
      finish(job, /*given_up=*/true);
      it = open_.end();
    }
  }
  if (it == open_.end() && grow && from_round != 0) {
    open(now, wall_ms, job, from_round, old_members, "grow", "", std::nullopt);
    it = open_.find(job);
  }
  if (it == open_.end()) return;
  Incident* incident = find(it->second.id);
  if (incident == nullptr || round <= incident->from_round) return;
  if (incident->to_round != round) {
    // A later round committed before the new one's rendezvous (say a grow right after the
    // recovery) restarts the rendezvous wait.
    incident->to_round = round;
    incident->to_nodes = nodes;
    it->second.rendezvous_at.reset();
    it->second.early_step_resumed_from.reset();
  }
  refresh(*incident, it->second);
}

void IncidentLog::on_round_acked(TimePoint now, const std::string& job, std::uint64_t round) {
  const auto it = open_.find(job);
  if (it == open_.end() || it->second.rendezvous_at) return;
  Incident* incident = find(it->second.id);
  if (incident == nullptr || incident->to_round != round) return;
  it->second.rendezvous_at = now;
  refresh(*incident, it->second);
  if (it->second.early_step_resumed_from) {
    first_step(now, job, *it->second.early_step_resumed_from);
  }
}

void IncidentLog::on_workers_stopped(TimePoint now, const std::string& job, std::uint64_t round,
                                     const std::string& node) {
  const auto it = open_.find(job);
  Incident* incident = it == open_.end() ? nullptr : find(it->second.id);
  if (incident != nullptr && round == incident->from_round) {
    it->second.stopped.emplace(node, now);
    check_stopped(it->second);
    refresh(*incident, it->second);
    return;
  }
  if (incident != nullptr && round < incident->from_round) return;
  auto& rounds = early_stops_[job];
  rounds[round].emplace(node, now);
  while (rounds.size() > kEarlyStopRounds) rounds.erase(rounds.begin());
}

void IncidentLog::check_stopped(Open& state) {
  if (state.stopped_at) return;
  TimePoint last{};
  for (const std::string& member : state.members) {
    if (state.lost.contains(member)) continue;
    const auto found = state.stopped.find(member);
    if (found == state.stopped.end()) return;
    last = std::max(last, found->second);
  }
  state.stopped_at = std::max(last, state.detected);
}

void IncidentLog::on_progress(TimePoint now, const std::string& job, std::uint64_t round,
                              const std::string& event, std::int64_t step,
                              std::int64_t resumed_from) {
  auto& newest = last_step_[job];
  if (std::make_pair(round, step) > newest) newest = {round, step};
  const auto it = open_.find(job);
  if (it == open_.end()) return;
  Open& state = it->second;
  Incident* incident = find(state.id);
  if (incident == nullptr) return;
  incident->progress_reports = true;
  if (round <= incident->from_round) {
    if (!state.last_step || step > *state.last_step) state.last_step = step;
    return;
  }
  if (event != "step" || incident->to_round == 0 || round != incident->to_round) return;
  if (!state.rendezvous_at) {
    if (!state.early_step_resumed_from) state.early_step_resumed_from = resumed_from;
    return;
  }
  first_step(now, job, resumed_from);
}

void IncidentLog::first_step(TimePoint now, const std::string& job, std::int64_t resumed_from) {
  Open& state = open_.at(job);
  Incident* incident = find(state.id);
  if (incident == nullptr) return;
  state.first_step_at = now;
  incident->resumed_from = resumed_from;
  if (state.last_step) {
    // The newest reported step trails the true last step by up to one report interval, so a
    // grow's on-demand checkpoint can be newer than it: nothing was lost then, never less.
    incident->steps_lost =
        std::max<std::int64_t>(0, *state.last_step - std::max<std::int64_t>(resumed_from, 0));
  }
  refresh(*incident, state);
  finish(job, /*given_up=*/false);
}

void IncidentLog::on_job_ended(TimePoint now, const std::string& job) {
  if (open_.contains(job)) finish(job, /*given_up=*/true);
  early_stops_.erase(job);
  last_step_.erase(job);
  last_from_round_.erase(job);
}

void IncidentLog::tick(TimePoint now) {
  std::vector<std::string> due;
  for (const auto& [job, state] : open_) {
    if (now >= state.detected + kGiveUp) due.push_back(job);
  }
  for (const std::string& job : due) finish(job, /*given_up=*/true);
}

void IncidentLog::abandon_open() {
  while (!open_.empty()) finish(open_.begin()->first, /*given_up=*/true);
}

TimePoint IncidentLog::next_deadline() const {
  TimePoint deadline = kNever;
  for (const auto& [job, state] : open_) deadline = std::min(deadline, state.detected + kGiveUp);
  return deadline;
}

void IncidentLog::finish(const std::string& job, bool given_up) {
  const auto it = open_.find(job);
  if (it == open_.end()) return;
  Incident* incident = find(it->second.id);
  open_.erase(it);
  if (incident == nullptr) return;
  incident->complete = true;
  incident->given_up = given_up || !incident->first_step_s;
  if (!incident->given_up && incident->cause != "grow") {
    stats_[incident->cause].observe(*incident->first_step_s);
  }
}

void IncidentLog::refresh(Incident& incident, const Open& state) const {
  // A member's clock ahead of the leader's must not make the evidence come after detection.
  incident.at_ms = std::min(incident.at_ms, state.detected_wall);
  const double base = static_cast<double>(state.detected_wall - incident.at_ms) / 1000.0;
  const auto offset = [&](const std::optional<TimePoint>& t) -> std::optional<double> {
    if (!t) return std::nullopt;
    return base + seconds(*t - state.detected);
  };
  incident.detected_s = base;
  incident.stopped_s = offset(state.stopped_at);
  incident.rendezvous_s = offset(state.rendezvous_at);
  incident.first_step_s = offset(state.first_step_at);
}

void IncidentLog::record(ClusterEvent event) {
  events_.push_back(std::move(event));
  ++events_recorded_;
  while (events_.size() > kMaxEvents) events_.pop_front();
}

void IncidentLog::seed(const rendezvous::History& history) {
  const std::int64_t newest = history.events.empty() ? INT64_MIN : history.events.back().at_ms;
  std::deque<ClusterEvent> own_events;
  for (const ClusterEvent& e : events_) {
    if (e.at_ms > newest) own_events.push_back(e);
  }
  events_.assign(history.events.begin(), history.events.end());
  events_recorded_ = events_.size();
  events_replicated_ = events_recorded_;
  for (ClusterEvent& e : own_events) record(std::move(e));
  std::deque<Incident> own = std::move(incidents_);
  incidents_.assign(history.incidents.begin(), history.incidents.end());
  replicated_incidents_.clear();
  for (const Incident& i : incidents_) replicated_incidents_.insert(i.id);
  stats_ = history.stats;
  next_id_ = std::max(next_id_, history.last_incident_id());
  for (Incident& i : own) {
    const std::uint64_t old_id = i.id;
    i.id = ++next_id_;
    for (auto& [job, state] : open_) {
      if (state.id == old_id) state.id = i.id;
    }
    // Its "incident N opened" event (not replicated yet) names the new number.
    const std::string old_name = "incident " + std::to_string(old_id) + " opened";
    for (ClusterEvent& e : events_) {
      if (e.kind == "incident" && e.job == i.job && e.detail.rfind(old_name, 0) == 0) {
        e.detail = "incident " + std::to_string(i.id) + " opened" + e.detail.substr(old_name.size());
      }
    }
    if (i.complete && !i.given_up && i.first_step_s && i.cause != "grow") {
      stats_[i.cause].observe(*i.first_step_s);
    }
    incidents_.push_back(std::move(i));
  }
  while (incidents_.size() > kMaxIncidents) incidents_.pop_front();
}

void IncidentLog::step_down() {
  abandon_open();
  incidents_.clear();
  replicated_incidents_.clear();
  stats_ = rendezvous::empty_recovery_stats();
  last_from_round_.clear();
  last_step_.clear();
  early_stops_.clear();
}

IncidentLog::Unreplicated IncidentLog::unreplicated() const {
  Unreplicated batch;
  for (const Incident& i : incidents_) {
    if (batch.incidents.size() >= rendezvous::kMaxHistoryBatch) break;
    if (i.complete && !replicated_incidents_.contains(i.id)) batch.incidents.push_back(i);
  }
  // Sequence number of events_[k]: events_recorded_ - (size - 1 - k).
  const std::uint64_t first_seq = events_recorded_ + 1 - events_.size();
  batch.events_through = events_replicated_;
  for (std::size_t k = 0; k < events_.size(); ++k) {
    const std::uint64_t seq = first_seq + k;
    if (seq <= events_replicated_) continue;
    if (batch.events.size() >= rendezvous::kMaxHistoryBatch) break;
    batch.events.push_back(events_[k]);
    batch.events_through = seq;
  }
  return batch;
}

void IncidentLog::mark_replicated(const Unreplicated& batch) {
  for (const Incident& i : batch.incidents) replicated_incidents_.insert(i.id);
  std::erase_if(replicated_incidents_, [&](std::uint64_t id) {
    return std::none_of(incidents_.begin(), incidents_.end(),
                        [&](const Incident& i) { return i.id == id; });
  });
  events_replicated_ = std::max(events_replicated_, batch.events_through);
}

std::string IncidentLog::to_json(const std::string& job, std::size_t limit) const {
  json cluster = json::array();
  for (const ClusterEvent& e : events_) {
    if (!job.empty() && e.job != job) continue;
    cluster.push_back({{"at_ms", e.at_ms},
                       {"kind", e.kind},
                       {"node", e.node},
                       {"job", e.job},
                       {"detail", e.detail}});
  }
  json incidents = json::array();
  for (const Incident& i : incidents_) {
    if (!job.empty() && i.job != job) continue;
    incidents.push_back({{"id", i.id},
                         {"job", i.job},
                         {"cause", i.cause},
                         {"node", i.node},
                         {"from_round", i.from_round},
                         {"to_round", i.to_round},
                         {"to_nodes", i.to_nodes},
                         {"at_ms", i.at_ms},
                         {"detected_s", optional_json(i.detected_s)},
                         {"stopped_s", optional_json(i.stopped_s)},
                         {"rendezvous_s", optional_json(i.rendezvous_s)},
                         {"first_step_s", optional_json(i.first_step_s)},
                         {"resumed_from", optional_json(i.resumed_from)},
                         {"steps_lost", optional_json(i.steps_lost)},
                         {"complete", i.complete},
                         {"given_up", i.given_up},
                         {"progress_reports", i.progress_reports}});
  }
  const auto newest = [limit](json& array) {
    if (array.size() > limit) {
      array.erase(array.begin(), array.end() - static_cast<std::ptrdiff_t>(limit));
    }
  };
  newest(cluster);
  newest(incidents);
  return json{{"cluster", std::move(cluster)}, {"incidents", std::move(incidents)}}.dump();
}

}  // namespace elastic::node
