// Test support for a JobSupervisor driven from the test thread with a real Spawner: steady time
// as the supervisor takes it, hand-built hosts and their slot plans, and a pump that runs the
// supervisor until a condition holds or a deadline passes (never a fixed sleep).
// Thread safety: everything here belongs to one test thread.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "daemon/core/time.h"
#include "daemon/node/job_supervisor.h"
#include "daemon/topology/topology.h"

namespace elastic::testing {

// The steady clock as a TimePoint, the time the supervisor is driven with.
TimePoint now();

bool contains(const std::string& text, const std::string& part);

// A host of `cores` single-PU cores in one package and one NUMA node (plans made with
// plan_for() do not bind, so the numbers need not exist on the test host), plus `gpus` GPUs
// local to it.
topology::Machine machine(unsigned cores, unsigned gpus = 0);

// The slot plan of `m` under `options` with CPU and memory binding off; an empty plan (and a
// failed test) when make_plan refuses.
topology::Plan plan_for(const topology::Machine& m, topology::PlanOptions options);

// `slots` CPU slots of two cores each (OMP_NUM_THREADS=2), on a machine() without GPUs.
topology::Plan cpu_plan(unsigned slots = 2);

// Runs supervisor.process() until `done` holds (checked after each call) or `timeout` passes;
// false on timeout. Between calls it waits on the supervisor's fd, at most 20 ms, so conditions
// on files that workers write (which do not wake the fd) are seen within that.
bool pump_until(node::JobSupervisor& supervisor, const std::function<bool()>& done,
                std::chrono::milliseconds timeout);

}  // namespace elastic::testing
