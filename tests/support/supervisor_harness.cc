#include "tests/support/supervisor_harness.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace elastic::testing {

using namespace std::chrono_literals;

TimePoint now() { return TimePoint(std::chrono::steady_clock::now().time_since_epoch()); }

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

topology::Machine machine(unsigned cores, unsigned gpus) {
  topology::Machine m;
  m.source = "hand-built";
  m.packages = 1;
  topology::NumaNode numa{0, 0, {}};
  for (unsigned c = 0; c < cores; ++c) {
    m.cores.push_back(topology::Core{0, 0, {c}});
    numa.pus.push_back(c);
  }
  m.numa_nodes = {numa};
  for (unsigned g = 0; g < gpus; ++g) {
    m.gpus.push_back(topology::Gpu{g, "0000:0" + std::to_string(g + 1) + ":00.0", 0, 0, numa.pus,
                                   std::vector<unsigned>{0}});
  }
  return m;
}

topology::Plan plan_for(const topology::Machine& m, topology::PlanOptions options) {
  options.bind_cpus = false;
  options.bind_memory = false;
  auto plan = topology::make_plan(m, options);
  if (!plan.ok()) ADD_FAILURE() << plan.error().message;
  return plan.ok() ? std::move(plan).value() : topology::Plan{};
}

topology::Plan cpu_plan(unsigned slots) {
  topology::PlanOptions options;
  options.gpus.detect = false;
  options.cpu_slots = slots;
  return plan_for(machine(2 * slots), options);
}

bool pump_until(node::JobSupervisor& supervisor, const std::function<bool()>& done,
                std::chrono::milliseconds timeout) {
  const TimePoint deadline = now() + timeout;
  while (true) {
    supervisor.process(now());
    if (done()) return true;
    const TimePoint t = now();
    if (t >= deadline) return false;
    const TimePoint wake = std::min({deadline, supervisor.next_deadline(), t + 20ms});
    const auto ms = std::clamp<std::int64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(wake - t).count(), 1, 20);
    pollfd fd{supervisor.fd(), POLLIN, 0};
    ::poll(&fd, 1, static_cast<int>(ms));
  }
}

}  // namespace elastic::testing
