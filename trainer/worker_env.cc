#include "trainer/worker_env.h"

#include <charconv>
#include <climits>

extern char** environ;

namespace elastic::trainer {
namespace {

// Parses env[name] as an integer in [min, max]; leaves *out alone when the variable is unset.
Status read_int(const EnvMap& env, const char* name, std::int64_t min, std::int64_t max,
                std::int64_t* out) {
  auto it = env.find(name);
  if (it == env.end()) return ok_status();
  const std::string& text = it->second;
  std::int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return Error{std::string(name) + "=\"" + text + "\" is not an integer"};
  }
  if (value < min || value > max) {
    return Error{std::string(name) + "=" + text + " is out of range (" + std::to_string(min) +
                 " to " + std::to_string(max) + ")"};
  }
  *out = value;
  return ok_status();
}

std::string read_string(const EnvMap& env, const char* name, const std::string& fallback) {
  auto it = env.find(name);
  return it == env.end() || it->second.empty() ? fallback : it->second;
}

}  // namespace

Result<WorkerEnv> parse_worker_env(const EnvMap& env) {
  WorkerEnv w;
  std::int64_t rank = w.rank, local_rank = w.local_rank, world = w.world_size,
               local_world = w.local_world_size, group_rank = w.group_rank, port = w.master_port,
               restarts = w.restart_count, round = w.round;
  for (auto status : {read_int(env, "RANK", 0, INT_MAX - 1, &rank),
                      read_int(env, "LOCAL_RANK", 0, INT_MAX - 1, &local_rank),
                      read_int(env, "WORLD_SIZE", 1, INT_MAX, &world),
                      read_int(env, "LOCAL_WORLD_SIZE", 1, INT_MAX, &local_world),
                      read_int(env, "GROUP_RANK", 0, INT_MAX - 1, &group_rank),
                      read_int(env, "MASTER_PORT", 0, 65535, &port),
                      read_int(env, "TORCHELASTIC_RESTART_COUNT", 0, INT_MAX, &restarts),
                      read_int(env, "ELASTIC_ROUND", 0, INT64_MAX, &round)}) {
    if (!status) return status.error();
  }
  if (rank >= world) {
    return Error{"RANK=" + std::to_string(rank) +
                 " must be smaller than WORLD_SIZE=" + std::to_string(world)};
  }
  if (local_rank >= local_world) {
    return Error{"LOCAL_RANK=" + std::to_string(local_rank) +
                 " must be smaller than LOCAL_WORLD_SIZE=" + std::to_string(local_world)};
  }
  if (local_world > world) {
    return Error{"LOCAL_WORLD_SIZE=" + std::to_string(local_world) +
                 " must not exceed WORLD_SIZE=" + std::to_string(world)};
  }
  if (world > 1 && port == 0) {
    return Error{"MASTER_PORT must be set (1 to 65535) when WORLD_SIZE=" + std::to_string(world)};
  }
  w.rank = static_cast<int>(rank);
  w.local_rank = static_cast<int>(local_rank);
  w.world_size = static_cast<int>(world);
  w.local_world_size = static_cast<int>(local_world);
  w.group_rank = static_cast<int>(group_rank);
  w.master_port = static_cast<int>(port);
  w.restart_count = static_cast<int>(restarts);
  w.round = round;
  w.master_addr = read_string(env, "MASTER_ADDR", w.master_addr);
  w.run_id = read_string(env, "TORCHELASTIC_RUN_ID", "");
  w.job_id = read_string(env, "ELASTIC_JOB_ID", "");
  w.checkpoint_dir = read_string(env, "ELASTIC_CHECKPOINT_DIR", "");
  return w;
}

EnvMap current_environment() {
  EnvMap env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string entry(*e);
    auto eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return env;
}

}  // namespace elastic::trainer
