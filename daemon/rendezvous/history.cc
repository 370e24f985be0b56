#include "daemon/rendezvous/history.h"

#include <algorithm>
#include <utility>

namespace elastic::rendezvous {

void RecoveryStats::observe(double value) {
  std::size_t bucket = kBuckets.size();
  for (std::size_t i = 0; i < kBuckets.size(); ++i) {
    if (value <= kBuckets[i]) {
      bucket = i;
      break;
    }
  }
  ++counts[bucket];
  sum += value;
  ++count;
}

std::map<std::string, RecoveryStats> empty_recovery_stats() {
  return {{"node_left", {}}, {"node_lost", {}}, {"worker_failed", {}}};
}

void History::add(Incident incident) {
  if (incident.complete && !incident.given_up && incident.first_step_s &&
      incident.cause != "grow") {
    stats[incident.cause].observe(*incident.first_step_s);
  }
  incidents.push_back(std::move(incident));
  if (incidents.size() > kMaxIncidents) {
    incidents.erase(incidents.begin(), incidents.end() - kMaxIncidents);
  }
}

void History::add(ClusterEvent event) {
  events.push_back(std::move(event));
  if (events.size() > kMaxEvents) events.erase(events.begin(), events.end() - kMaxEvents);
}

std::uint64_t History::last_incident_id() const {
  std::uint64_t last = 0;
  for (const Incident& i : incidents) last = std::max(last, i.id);
  return last;
}

void add_point(std::vector<SeriesPoint>& series, const SeriesPoint& point) {
  if (!series.empty() && point.at <= series.back().at) return;
  series.push_back(point);
  if (series.size() < kMaxSeriesPoints) return;
  // Full: keep every second point, the newest always.
  std::vector<SeriesPoint> thinned;
  thinned.reserve(kMaxSeriesPoints / 2 + 1);
  for (std::size_t i = series.size() % 2 == 0 ? 1 : 0; i < series.size(); i += 2) {
    thinned.push_back(series[i]);
  }
  series = std::move(thinned);
}

}  // namespace elastic::rendezvous
