// RoundSource: where a running worker learns the next round it belongs to (its rank, the world
// size, the store endpoint and the round number), so that it can re-form its process group in
// place instead of exiting. The daemon's worker channel is one source; FileRoundSource is the
// simplest one (tests, or a person driving a worker by hand).
//
// The trainer asks at every step boundary with poll() (and intact()), which must cost next to
// nothing, and,
// after a collective failed, with wait(), which blocks until a newer round is announced or the
// deadline passes. A worker without a source keeps today's behaviour: a failure ends it.
//
// FileRoundSource reads one file that holds the worker contract's variables of the next round,
// one KEY=VALUE a line (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ELASTIC_ROUND, ...; blank
// lines and lines starting with '#' are ignored). They override the process environment and are
// checked by parse_worker_env(). Writers replace the file atomically (write, then rename); a
// poll() costs one stat() unless the file changed. A file that cannot be parsed, is larger than
// kMaxFileBytes or announces a round not newer than the current one is not a new round; the
// first problem with each version of the file is logged once to stderr.
//
// Thread safety: one training thread uses a source; waiting() may also be called from the
// thread that aborts a stuck collective.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "daemon/core/result.h"
#include "trainer/worker_env.h"

namespace elastic::trainer {

class RoundSource {
 public:
  virtual ~RoundSource() = default;
  // A round newer than `current_round` if one has been announced; never blocks.
  virtual std::optional<WorkerEnv> poll(std::int64_t current_round) = 0;
  // Blocks until a round newer than `current_round` is announced (returned) or `deadline`
  // passes (nullopt).
  virtual std::optional<WorkerEnv> wait(std::int64_t current_round,
                                        std::chrono::steady_clock::time_point deadline) = 0;
  // Whether the announced round `round` keeps every rank of the current group, going on from
  // the step it is at, with none of them failed (a grow of a healthy job): the trainer then
  // leaves the group at a step boundary all its ranks agree on instead of at once. False when
  // the source cannot tell (always correct: the group is then aborted).
  virtual bool intact(std::int64_t round) const {
    (void)round;
    return false;
  }
  // The trainer re-formed into `env`'s round (a source that answers its announcer says so).
  virtual void joined(const WorkerEnv& env) { (void)env; }
  // The trainer has built its model and data and is about to join its first group: a source
  // whose announcer waits for that (the worker channel's hello) says so now.
  virtual void ready() {}
  // What the training thread does, for a source that tells its announcer (the worker channel's
  // "alive", which the daemon's hang detection reads): `step` steps are done (after each step,
  // and when a re-formation moves the state to another step); waiting(true) while it waits for
  // its peers (a collective, the next round) rather than in its own work. Never blocks.
  virtual void progress(std::int64_t step) { (void)step; }
  // The training thread advanced in a long phase that is no step (an evaluation chunk): its
  // clock restarts as for a step, without changing the step.
  virtual void working() {}
  virtual void waiting(bool on) { (void)on; }
};

class FileRoundSource final : public RoundSource {
 public:
  static constexpr std::size_t kMaxFileBytes = 64 * 1024;
  static constexpr std::chrono::milliseconds kWaitInterval{2};

  // `base` is the process environment the file's variables override.
  FileRoundSource(std::string path, EnvMap base);

  std::optional<WorkerEnv> poll(std::int64_t current_round) override;
  std::optional<WorkerEnv> wait(std::int64_t current_round,
                                std::chrono::steady_clock::time_point deadline) override;

  // The worker environment a file's text announces (exposed for tests).
  static Result<WorkerEnv> parse(const std::string& text, const EnvMap& base);

 private:
  std::string path_;
  EnvMap base_;
  // Identity of the version of the file last read, so an unchanged file is not read again.
  ino_t inode_ = 0;
  std::int64_t mtime_ns_ = -1;
  off_t size_ = -1;
  std::optional<WorkerEnv> last_;  // what that version announced, if it parsed
};

}  // namespace elastic::trainer
