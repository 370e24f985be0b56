// ProgressReporter: the worker's end of the optional progress protocol (README, "Events and
// incident timelines"). A worker tells its node's elasticd how far training got, so the leader
// can close a recovery incident at the first step of the new round and count the steps it lost,
// and the metrics can show each job's checkpoint age.
//
// Frames go to $ELASTIC_CONTROL_SOCKET in the control protocol's framing (a 4-byte big-endian
// length, then JSON; daemon/control/protocol.h):
//   {"verb":"progress","job":J,"round":R,"rank":N,"event":"step","step":S,"resumed_from":F,
//    "first":true|false[,"samples":C][,"loss":L]}
//   {"verb":"progress","job":J,"round":R,"rank":N,"event":"checkpoint","step":S}
// J, R and N come from ELASTIC_JOB_ID, ELASTIC_ROUND and RANK. F is the step the run resumed
// from (-1: it started fresh). A worker outside elasticd (no socket or no job id in the
// environment) reports nothing.
//
// Never in training's way: each report connects, writes and reads the reply with a short
// timeout (kTimeout); a failure is logged once to stderr and later ones are silent; after a
// failure no report is tried for kBackoff. Steps are rate-limited to one per kStepInterval
// (the first step of a run and every checkpoint always go out).
//
// Dependency-free on purpose (POSIX and the standard library only): the trainer is also built
// on GPU hosts without the daemon's libraries. Thread safety: none; one training thread uses it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace elastic::trainer {

class ProgressReporter {
 public:
  static constexpr std::chrono::milliseconds kTimeout{100};
  static constexpr std::chrono::seconds kBackoff{10};
  // Short enough that an incident's "steps lost" (newest reported step - resumed step) is off by
  // at most 0.1 s of training; ten small unix-socket round trips a second cost rank 0 nothing.
  static constexpr std::chrono::milliseconds kStepInterval{100};

  // Reads ELASTIC_CONTROL_SOCKET, ELASTIC_JOB_ID, ELASTIC_ROUND and RANK from `env`.
  // `step_interval`: the step rate limit (tests pass a long one, so a slow machine cannot let a
  // second step through).
  explicit ProgressReporter(const std::map<std::string, std::string>& env,
                            std::chrono::steady_clock::duration step_interval = kStepInterval);

  bool enabled() const { return !socket_.empty() && !job_.empty(); }
  // A training step finished (`step` is the global step count after it). `resumed_from`: the
  // checkpoint step this run resumed from, -1 when it started fresh. `samples`: the samples the
  // whole job trained on since this process started (its counter goes on across re-formations;
  // throughput scaling reads its rate), -1 when not counted.
  // `loss`: the newest training loss (sent when finite).
  void step(std::int64_t step, std::int64_t resumed_from, std::int64_t samples = -1,
            std::optional<double> loss = std::nullopt);
  // A checkpoint of `step` was published.
  void checkpoint(std::int64_t step);

  // The frame's JSON for a report (exposed for tests).
  std::string frame_json(const std::string& event, std::int64_t step, std::int64_t resumed_from,
                         bool first, std::int64_t samples = -1,
                         std::optional<double> loss = std::nullopt) const;

 private:
  // Sends one frame and reads the reply; false (after one log line per reporter) on failure.
  bool send(const std::string& json);

  std::string socket_;
  std::string job_;
  std::int64_t round_ = 0;
  std::int64_t rank_ = 0;
  std::chrono::steady_clock::duration step_interval_;
  bool first_sent_ = false;
  bool logged_ = false;
  std::chrono::steady_clock::time_point next_step_{};
  std::chrono::steady_clock::time_point paused_until_{};
};

}  // namespace elastic::trainer
