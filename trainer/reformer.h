// Re-forming the process group in place: a running rank gives up its broken (or superseded)
// group and joins the group of the next round without leaving the process, keeping the model,
// the optimizer, the sampler position and the RNG in memory.
//
//   abandon_group(old)            abort the old group (Gloo: close its connections, so every
//                                 collective still waiting on this rank fails at once on its
//                                 peers too; NCCL: abort the communicators), then destroy it,
//                                 waiting at most `bound` for its collectives to return
//   GroupReleaser::release(old)   the same for a healthy group every rank left after the same
//                                 step (an intact round), on a thread of its own: its teardown is
//                                 not part of the pause
//   reform_group(next, ...)       1. a new store connection and group for `next` (rank 0 of the
//                                    new round hosts the store; keys carry the round)
//                                 2. the step agreement: an all-gather of every rank's RankFacts,
//                                    then plan_state_transfer() (trainer/live_state.h)
//                                 3. when some rank lacks the state: a broadcast from the plan's
//                                    source of the step and sampler position, the parameters and
//                                    buffers, the optimizer state and the CPU RNG state
// A joiner runs reform_group() too (with no state), so both sides issue the same collectives.
// The sampler is a pure function of (global position, world, rank), so once the position is
// agreed each rank of the new world continues from the same global position.
//
// Every rank takes part in the broadcasts (they are collectives); ranks that already hold the
// state overwrite it with identical bytes. No rollback copy is kept: a rank one step ahead of the
// agreed step (its collective completed, a peer's failed) receives the state instead, which the
// broadcast to joiners costs anyway; so the facts this trainer reports never offer a copy.
//
// Errors: a group that cannot be formed or a collective that fails during the re-formation is an
// Error (the new group is abandoned first); the caller may try a newer round. With no rank
// holding state the result has no plan and the new group is kept: the caller starts from its
// checkpoint over it. Supported optimizers: torch::optim::Adam (and subclasses) and SGD.
// Thread safety: the training thread only.
#pragma once

#include <chrono>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include "daemon/core/result.h"
#include "trainer/checkpointing.h"
#include "trainer/dist.h"
#include "trainer/live_state.h"
#include "trainer/worker_env.h"

namespace elastic::trainer {

// What a rank carries from one group to the next; the trainer owns all of it.
struct LiveModel {
  torch::nn::Module& module;
  torch::optim::Optimizer& optimizer;
  TrainState& state;  // step and sampler position
};

struct Reformed {
  Dist dist;
  std::optional<TransferPlan> plan;  // nullopt: no rank held state
  std::string no_plan_reason;        // why, when there is no plan
  double form_seconds = 0;           // store + process group
  double agree_seconds = 0;          // the all-gather of the facts
  double transfer_seconds = 0;       // the broadcasts (0 when nothing moved)
};

// Aborts and destroys `dist` (left empty), waiting at most `bound` for its collectives to end;
// a group that does not finish in time is left to finish on a thread of its own (logged).
// Returns the seconds it took.
double abandon_group(Dist& dist, std::chrono::milliseconds bound);

// Aborts and destroys groups in the background. A group handed to release() must be one nothing
// of this process uses any more and no peer still needs: the trainer hands over a group all of
// whose ranks left it after the same completed step, once they have formed the next group
// (which proves every one of them is past the old one). Each release runs on a thread of its
// own, so a re-formation that comes while one is still under way is not held up by it; the
// destructor waits for the releases still running, at most `bound` for each, and leaves one
// that takes longer to end on its own (logged), as abandon_group() does.
// Thread safety: one thread calls release() and destroys it.
class GroupReleaser {
 public:
  explicit GroupReleaser(std::chrono::milliseconds bound) : bound_(bound) {}
  ~GroupReleaser();
  GroupReleaser(const GroupReleaser&) = delete;
  GroupReleaser& operator=(const GroupReleaser&) = delete;

  // Takes `dist` (left empty) and starts its release.
  void release(Dist& dist);

 private:
  struct Release {
    std::thread thread;
    std::future<void> done;
  };
  std::chrono::milliseconds bound_;
  std::vector<Release> running_;  // finished ones are joined at the next release()
};

// Forms the group of `next` and brings every rank to the agreed step; `mine` is this rank's
// facts. See above.
Result<Reformed> reform_group(const WorkerEnv& next, const DistOptions& options, LiveModel& live,
                              const RankFacts& mine);

}  // namespace elastic::trainer
