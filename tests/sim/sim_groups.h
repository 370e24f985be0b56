// SimGroups: where the simulated trainers of one cluster meet to form their process groups, the
// simulator's stand-in for a round's c10d store and its collectives (the trainers themselves are
// modelled by SimLauncher, sim_launcher.h).
//
// A group is a (job, round). A worker arrives in it as one rank of a world size (a worker
// started cold, once it runs; a live worker, once its re-formation delay after the round's offer
// has passed). The group forms when every rank 0..world-1 has arrived, as a real rendezvous
// needs all of them; from that instant every member trains in it, and the launcher of each is
// told (SimLauncher::formed) and woken. A formed group that loses a member (one left for a newer
// round, or exited) is dead for good: its collectives failed, and a replacement joins a new
// round, never the old one. Until a group forms, an arrival may leave and another take its rank
// (the supervisor restarts a rank cold in the same round when an offer went unanswered).
//
// Every SimLauncher of the cluster attaches itself under its (node, generation) and detaches
// when it is destroyed (its workers left first). Ownership: the cluster owns it; launchers only
// point to it. Thread safety: none (the simulator's thread). Errors: none; an arrival whose world
// size differs from the round's first arrival's (no daemon should start such a worker) is kept
// out, so that group never forms.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "daemon/spawner/launcher.h"
#include "tests/sim/simulator.h"

namespace elastic::sim {

class SimLauncher;

// One simulated worker anywhere in the cluster: the launcher that runs it, and its id there.
struct SimWorkerKey {
  NodeId node = 0;
  std::uint64_t generation = 0;
  spawner::WorkerId id = 0;
  auto operator<=>(const SimWorkerKey&) const = default;
};

class SimGroups {
 public:
  explicit SimGroups(Simulator& sim) : sim_(&sim) {}
  SimGroups(const SimGroups&) = delete;
  SimGroups& operator=(const SimGroups&) = delete;

  void attach(NodeId node, std::uint64_t generation, SimLauncher* launcher);
  void detach(NodeId node, std::uint64_t generation);

  // `worker` is in (job, round) as `rank` of `world`. When that completes the group, it forms
  // (see above): each member's launcher is told now, and every member's node but `worker`'s
  // (whose launcher is calling) is rescheduled.
  void arrive(const SimWorkerKey& worker, const std::string& job, std::uint64_t round,
              std::uint32_t rank, std::uint64_t world);
  // `worker` is no longer in (job, round) (it abandoned it, or exited). No-op when it was not.
  void leave(const SimWorkerKey& worker, const std::string& job, std::uint64_t round);

  // Groups formed so far.
  std::uint64_t formed() const { return formed_; }

 private:
  struct Group {
    std::uint64_t world = 0;
    std::map<std::uint32_t, SimWorkerKey> ranks;  // rank -> the worker holding it
    bool formed = false;                          // once formed, never again (see above)
  };

  Simulator* sim_;
  std::map<std::pair<std::string, std::uint64_t>, Group> groups_;
  std::map<std::pair<NodeId, std::uint64_t>, SimLauncher*> launchers_;
  std::uint64_t formed_ = 0;
};

}  // namespace elastic::sim
