#include "tests/sim/sim_groups.h"

#include <vector>

#include "tests/sim/sim_launcher.h"

namespace elastic::sim {

void SimGroups::attach(NodeId node, std::uint64_t generation, SimLauncher* launcher) {
  launchers_[{node, generation}] = launcher;
}

void SimGroups::detach(NodeId node, std::uint64_t generation) {
  launchers_.erase({node, generation});
}

void SimGroups::arrive(const SimWorkerKey& worker, const std::string& job, std::uint64_t round,
                       std::uint32_t rank, std::uint64_t world) {
  Group& group = groups_[{job, round}];
  if (group.ranks.empty() && !group.formed) group.world = world;
  if (group.formed || world != group.world || rank >= world) return;
  group.ranks[rank] = worker;
  if (group.ranks.size() < group.world) return;
  group.formed = true;
  ++formed_;
  // Copied: a member's launcher may leave other groups while it is told.
  const std::map<std::uint32_t, SimWorkerKey> members = group.ranks;
  for (const auto& [member_rank, member] : members) {
    const auto it = launchers_.find({member.node, member.generation});
    if (it == launchers_.end()) continue;
    it->second->formed(member.id, job, round);
    if (member.node != worker.node) sim_->reschedule(member.node);
  }
}

void SimGroups::leave(const SimWorkerKey& worker, const std::string& job, std::uint64_t round) {
  const auto it = groups_.find({job, round});
  if (it == groups_.end()) return;
  Group& group = it->second;
  for (auto seat = group.ranks.begin(); seat != group.ranks.end(); ++seat) {
    if (seat->second != worker) continue;
    group.ranks.erase(seat);
    break;
  }
  // A group that never formed is forgotten once empty; a formed one is kept, so it never forms
  // again.
  if (group.ranks.empty() && !group.formed) groups_.erase(it);
}

}  // namespace elastic::sim
