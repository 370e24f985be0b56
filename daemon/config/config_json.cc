// to_json(): kept apart from config.cc so that nlohmann/json and toml11 are each included by one
// file only (STYLE.md rule 8).
#include <nlohmann/json.hpp>

#include "daemon/config/config.h"
#include "daemon/config/schema.h"
#include "daemon/core/duration.h"

namespace elastic::config {
namespace {

nlohmann::json json_value(const std::string& v) { return v; }
nlohmann::json json_value(bool v) { return v; }
nlohmann::json json_value(int v) { return v; }
nlohmann::json json_value(std::int64_t v) { return v; }
// Durations stay strings, as in the TOML file, so both outputs read the same.
nlohmann::json json_value(Duration v) { return format_duration(v); }
nlohmann::json json_value(LogLevel v) { return to_string(v); }
nlohmann::json json_value(LogFormat v) { return to_string(v); }
nlohmann::json json_value(const std::vector<std::string>& v) { return v; }
nlohmann::json json_value(const GpuSelection& v) {
  if (v.detect) return "auto";
  return v.indices;
}

nlohmann::json json_value(const std::map<std::string, LimitEntry>& entries, bool groups) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, entry] : entries) {
    out[name] = {{"max_nodes", entry.max_nodes}, {"max_running_jobs", entry.max_running_jobs}};
    if (groups) out[name]["gid"] = entry.gid;
  }
  return out;
}
nlohmann::json json_value(const UserLimits& v) { return json_value(v.entries, false); }
nlohmann::json json_value(const GroupLimits& v) { return json_value(v.entries, true); }

struct JsonWriter {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  std::string current;
  void section(const char* name) {
    current = name;
    out[current] = nlohmann::ordered_json::object();
  }
  template <typename T>
  void field(const char* key, const T& value) {
    out[current][key] = json_value(value);
  }
};

}  // namespace

std::string to_json(const DaemonConfig& config) {
  JsonWriter writer;
  visit_config(config, writer);
  // Config strings may hold any bytes; replace invalid UTF-8 rather than throw.
  return writer.out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace elastic::config
