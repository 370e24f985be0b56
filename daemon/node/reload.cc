#include "daemon/node/reload.h"

#include <functional>
#include <nlohmann/json.hpp>
#include <utility>

namespace elastic::node {
namespace {

// Live key -> copies that one field from the loaded config into the one to run with.
using Copy = std::function<void(config::DaemonConfig& to, const config::DaemonConfig& from)>;

const std::vector<std::pair<std::string_view, Copy>>& live_keys() {
  static const std::vector<std::pair<std::string_view, Copy>> keys = {
      {"logging.level",
       [](config::DaemonConfig& to, const config::DaemonConfig& from) {
         to.logging.level = from.logging.level;
       }},
      {"control.admin_group",
       [](config::DaemonConfig& to, const config::DaemonConfig& from) {
         to.control.admin_group = from.control.admin_group;
       }},
      // The job service reads these per submit (JobService::set_submit_limits).
      {"control.max_active_jobs_per_user",
       [](config::DaemonConfig& to, const config::DaemonConfig& from) {
         to.control.max_active_jobs_per_user = from.control.max_active_jobs_per_user;
       }},
      {"control.submits_per_minute_per_user",
       [](config::DaemonConfig& to, const config::DaemonConfig& from) {
         to.control.submits_per_minute_per_user = from.control.submits_per_minute_per_user;
       }},
      {"control.submit_burst_per_user",
       [](config::DaemonConfig& to, const config::DaemonConfig& from) {
         to.control.submit_burst_per_user = from.control.submit_burst_per_user;
       }},
      // The spawner reads these per stop() and per log write (Spawner::set_limits).
      {"spawner.stop_grace",
       [](config::DaemonConfig& to, const config::DaemonConfig& from) {
         to.spawner.stop_grace = from.spawner.stop_grace;
       }},
      {"spawner.log_max_bytes",
       [](config::DaemonConfig& to, const config::DaemonConfig& from) {
         to.spawner.log_max_bytes = from.spawner.log_max_bytes;
       }},
      {"spawner.log_keep",
       [](config::DaemonConfig& to, const config::DaemonConfig& from) {
         to.spawner.log_keep = from.spawner.log_keep;
       }},
      // The leader reads the limits from the running config at every planning pass and every
      // priority change (limits.priority_ceiling), so the whole section is live.
      {"limits.priority_ceiling",
       [](config::DaemonConfig& to, const config::DaemonConfig& from) {
         to.limits.priority_ceiling = from.limits.priority_ceiling;
       }},
      {"limits.max_nodes_per_user",
       [](config::DaemonConfig& to, const config::DaemonConfig& from) {
         to.limits.max_nodes_per_user = from.limits.max_nodes_per_user;
       }},
      {"limits.max_running_jobs_per_user",
       [](config::DaemonConfig& to, const config::DaemonConfig& from) {
         to.limits.max_running_jobs_per_user = from.limits.max_running_jobs_per_user;
       }},
      {"limits.max_nodes_per_group",
       [](config::DaemonConfig& to, const config::DaemonConfig& from) {
         to.limits.max_nodes_per_group = from.limits.max_nodes_per_group;
       }},
      {"limits.max_running_jobs_per_group",
       [](config::DaemonConfig& to, const config::DaemonConfig& from) {
         to.limits.max_running_jobs_per_group = from.limits.max_running_jobs_per_group;
       }},
      {"limits.users",
       [](config::DaemonConfig& to, const config::DaemonConfig& from) {
         to.limits.users = from.limits.users;
       }},
      {"limits.groups",
       [](config::DaemonConfig& to, const config::DaemonConfig& from) {
         to.limits.groups = from.limits.groups;
       }},
  };
  return keys;
}

}  // namespace

bool is_live_key(std::string_view key) {
  for (const auto& [name, copy] : live_keys()) {
    if (name == key) return true;
  }
  return false;
}

ReloadPlan plan_reload(const config::DaemonConfig& running, const config::DaemonConfig& loaded) {
  ReloadPlan plan;
  plan.apply = running;
  // Compared through the JSON form so every key of the schema is covered, including keys added
  // after this file was written (they land in needs_restart).
  const nlohmann::json before = nlohmann::json::parse(config::to_json(running), nullptr, false);
  const nlohmann::json after = nlohmann::json::parse(config::to_json(loaded), nullptr, false);
  for (const auto& [section, keys] : after.items()) {
    for (const auto& [key, value] : keys.items()) {
      const std::string name = section + "." + key;
      const nlohmann::json* old_value = nullptr;
      if (before.contains(section) && before[section].contains(key)) {
        old_value = &before[section][key];
      }
      if (old_value != nullptr && *old_value == value) continue;
      bool live = false;
      for (const auto& [live_name, copy] : live_keys()) {
        if (live_name != name) continue;
        copy(plan.apply, loaded);
        live = true;
      }
      if (live) {
        plan.applied.push_back(name + ": " + (old_value ? old_value->dump() : "unset") + " -> " +
                               value.dump());
      } else {
        plan.needs_restart.push_back(name);
      }
    }
  }
  return plan;
}

}  // namespace elastic::node
