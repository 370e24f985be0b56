// The job table's JSON views for the control API (job_table.h: to_json, drained_to_json), kept
// apart from the state machine and its MessagePack codec: what users read may change without
// touching what Raft replicates.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <nlohmann/json.hpp>

#include "daemon/rendezvous/job_table.h"

namespace elastic::rendezvous {
namespace {

// nlohmann only throws here for a broken invariant (strings are replaced, not rejected).
[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "job table: broken invariant: %s\n", what);
  std::abort();
}

}  // namespace

std::string to_json(const JobRecord& job, std::size_t max_events) {
  using nlohmann::json;
  try {
    json j = json::object();
    j["id"] = job.id;
    j["state"] = to_string(job.state);
    j["reason"] = job.reason;
    j["state_since_ms"] = job.state_since.time_since_epoch().count();
    j["submitted_at_ms"] = job.submitted_at.time_since_epoch().count();
    j["restarts"] = job.restarts;
    if (job.preemptions != 0) j["preemptions"] = job.preemptions;
    // Always, unlike in the spec (which writes them only when not default): `jobs` shows them.
    j["priority"] = job.spec.priority;
    j["preemptible"] = job.spec.preemptible;
    j["round"] = job.round;
    j["round_reason"] = to_string(job.round_reason);
    j["round_opened_at_ms"] = job.round_opened_at.time_since_epoch().count();
    j["store_endpoint"] = job.store_endpoint;
    j["world_size"] = world_size(job.ranks);
    if (job.state == JobState::kRecovering) j["recovery_cause"] = to_string(job.recovery_cause);
    if (job.spec.scale == ScaleMode::kThroughput) {
      json rates = json::object();
      for (const auto& [nodes, rate] : job.scale.rate) rates[std::to_string(nodes)] = rate;
      j["scale"] = {{"size", job.scale.size == 0 ? job.spec.min_nodes : job.scale.size},
                    {"good", job.scale.good},
                    {"settled", job.scale.settled},
                    {"samples_per_s", std::move(rates)}};
    }
    if (!job.series.empty()) {
      json rates = json::array();
      json losses = json::array();
      for (const SeriesPoint& p : job.series) {
        const auto at = p.at.time_since_epoch().count();
        if (p.samples_per_s) rates.push_back({at, *p.samples_per_s});
        if (p.loss) losses.push_back({at, *p.loss});
      }
      j["series"] = {{"samples_per_s", std::move(rates)}, {"loss", std::move(losses)}};
    }
    json ranks = json::array();
    for (const RankAssignment& r : job.ranks) {
      ranks.push_back({{"node", r.node},
                       {"generation", r.generation},
                       {"slots", r.slots},
                       {"first_rank", r.first_rank},
                       {"restarts", r.restarts}});
    }
    j["ranks"] = std::move(ranks);
    j["spec"] = json::parse(to_json(job.spec), nullptr, false);
    json events = json::array();
    const std::size_t first = job.events.size() > max_events ? job.events.size() - max_events : 0;
    for (std::size_t i = first; i < job.events.size(); ++i) {
      const JobEvent& e = job.events[i];
      events.push_back({{"at_ms", e.at.time_since_epoch().count()},
                        {"round", e.round},
                        {"from", to_string(e.from)},
                        {"to", to_string(e.to)},
                        {"reason", e.reason}});
    }
    j["events"] = std::move(events);
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
  } catch (const std::exception&) {
    die("a job record could not be written as JSON");
  }
}

std::string drained_to_json(const JobTable& table) {
  using nlohmann::json;
  try {
    json j = json::object();
    for (const auto& [node, d] : table.drained()) {
      j[node] = {
          {"reason", d.reason}, {"at_ms", d.at.time_since_epoch().count()}, {"by_uid", d.by_uid}};
    }
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
  } catch (const std::exception&) {
    die("the drained nodes could not be written as JSON");
  }
}

}  // namespace elastic::rendezvous
