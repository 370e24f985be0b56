// WorkerEnv: the worker contract as the trainer reads it from its environment.
//
// The daemon (or torchrun, or a test) sets the torchrun-compatible variables RANK, LOCAL_RANK,
// WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT,
// TORCHELASTIC_RUN_ID and the elastic ones ELASTIC_JOB_ID, ELASTIC_ROUND, ELASTIC_CHECKPOINT_DIR.
// With none of them set, the worker is a world of one (rank 0, 127.0.0.1, a free port).
// Pure: reads only the map it is given. Errors name the variable and its bad value.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "daemon/core/result.h"

namespace elastic::trainer {

struct WorkerEnv {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int group_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: a world of one picks a free port itself
  int restart_count = 0;
  std::string run_id;
  std::string job_id;
  std::int64_t round = 0;
  std::string checkpoint_dir;  // empty: no checkpoints unless a flag names a directory
};

using EnvMap = std::map<std::string, std::string>;

// Reads the worker contract; every inconsistency (rank >= world size, a port out of range, a
// non-number) is an Error naming the variable.
Result<WorkerEnv> parse_worker_env(const EnvMap& env);

// The process's own environment as a map.
EnvMap current_environment();

}  // namespace elastic::trainer
