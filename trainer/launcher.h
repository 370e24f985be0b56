// Standalone launcher: `elastic-trainer --standalone N ...` starts N local ranks of itself, like
// `torchrun --standalone --nproc-per-node N`, for a quick run or a test without a daemon.
//
// Children get RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR,
// MASTER_PORT (a free loopback port) and die with the launcher (PR_SET_PDEATHSIG). SIGTERM and
// SIGINT are forwarded. When one rank fails the others are sent SIGTERM, then SIGKILL after a
// grace period. Returns the exit status to use: 0 if all ranks exited 0, else the first failure's
// code (128 + signal for a signalled rank). Must run before LibTorch starts threads.
#pragma once

#include <string>
#include <vector>

namespace elastic::trainer {

int run_standalone(int ranks, const std::vector<std::string>& child_args);

}  // namespace elastic::trainer
