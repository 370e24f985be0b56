// AsyncCheckpointer: rank 0's checkpoints off the training thread.
//
// At a step boundary checkpoint() copies the state into reused host buffers (StateSnapshot) and
// hands the copy to a BackgroundWriter, which serialises it, writes it with the store's atomic
// protocol (tmp dir, fsync, rename, LATEST) and publishes it fenced by round. The training
// thread waits only for the copy.
//
// Policies:
// - One write at a time. A checkpoint that comes due while the previous one is still being
//   written is skipped, not deferred: its copy would have to wait for the buffers anyway, and a
//   write slower than the interval would only build a backlog; the next due checkpoint is taken
//   as usual. The first skip is logged (stderr and a "checkpoint_skipped" event line); every
//   "checkpoint" event line counts the skips so far.
// - A failed write (I/O error, or this round is stale) does not stop training: it is logged
//   (stderr and a "checkpoint_failed" event line naming the step and the reason) and the next
//   due checkpoint tries again; the daemon's checkpoint age keeps growing meanwhile.
// - At exit finish() waits for the write in flight (bounded), then writes the final state unless
//   it is already published, and waits for that too: the process never ends with its final
//   checkpoint half written unless the wait runs out, which it reports (exit 74).
// - Round fencing (when the worker has a job id): each write first claims the job dir for its
//   round and publishes only while no newer round of the job has claimed it
//   (CheckpointStore::claim_round / check_round), so a stale round's rank 0 cannot move LATEST
//   past a newer round's.
//
// Event lines go to `emit` (the trainer's stdout), published checkpoints to `progress`; both on
// the training thread (poll() and finish() report what the writer finished). Thread safety: one
// training thread calls every method. Errors: reported as above, never thrown.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "trainer/background_writer.h"
#include "trainer/checkpointing.h"
#include "trainer/progress.h"

namespace elastic::trainer {

struct AsyncCheckpointOptions {
  std::string job_dir;
  int keep = 3;
  // The job whose rounds fence publication; empty (a run outside elasticd): no fencing.
  std::string job_id;
  // How long finish() waits for each write (the one in flight, then the final one).
  std::chrono::milliseconds exit_wait{std::chrono::minutes(10)};
  // Fault injection for tests: the writer pauses this long after each file it writes, so that a
  // test can kill the trainer while a write is in flight. Zero in production.
  std::chrono::milliseconds write_delay{0};
};

class AsyncCheckpointer {
 public:
  using Emit = std::function<void(const nlohmann::json&)>;

  AsyncCheckpointer(AsyncCheckpointOptions options, Emit emit, ProgressReporter& progress);
  ~AsyncCheckpointer();

  // A checkpoint of `state` is due: copies it and starts writing it, or skips it while the
  // previous write is still in flight.
  void checkpoint(const TrainState& state, const torch::nn::Module& module,
                  const torch::optim::Optimizer& optimizer);
  // Reports a write that finished since the last call. Cheap; call it every step.
  void poll();
  // Waits (up to exit_wait) for the write in flight and reports it; false when the wait ran out.
  // For fault injection: a test's kill at step N then leaves every checkpoint started before N
  // published, whatever the disk's speed.
  bool settle();
  // At exit. Waits for the write in flight; then, unless `final_state` is null or its step is
  // already published, writes it and waits. False when a wait ran out or the final write failed
  // (both logged).
  bool finish(const TrainState* final_state, const torch::nn::Module& module,
              const torch::optim::Optimizer& optimizer);

 private:
  struct Files;  // the Fs and store the writer thread uses, shared with its jobs

  bool start(const TrainState& state, const torch::nn::Module& module,
             const torch::optim::Optimizer& optimizer);
  // Reports one finished write; true when it was published.
  bool report(const BackgroundWriter::Outcome& outcome);

  AsyncCheckpointOptions options_;
  Emit emit_;
  ProgressReporter& progress_;
  std::shared_ptr<Files> files_;
  std::shared_ptr<StateSnapshot> snapshot_;
  std::int64_t writing_step_ = -1;    // the step of the write in flight (or last started)
  double writing_stall_s_ = 0;        // how long its copy held up training
  std::int64_t published_step_ = -1;  // the newest step this process published
  std::int64_t skipped_ = 0;
  BackgroundWriter writer_;  // last: destroyed first, while what its jobs share is still held
};

}  // namespace elastic::trainer
