// Clock: where the node layer gets time and seeds, so the same code runs on the real clock in
// elasticd and on a virtual one in tests and the simulator. Nothing in daemon/node reads
// std::chrono clocks or std::random_device itself.
//  - now():      the monotonic timeline every timer and deadline is measured on (TimePoint);
//  - wall_ms():  Unix time in milliseconds, for what users read (job events, incident
//                timelines, checkpoint ages, reload times); never for a deadline;
//  - seed():     a fresh 64-bit seed for a randomized protocol (membership, Raft timeouts).
// SystemClock is the daemon's: steady_clock, system_clock and std::random_device. ManualClock
// is the tests' and the simulator's: time moves only when advanced, and seeds come from a
// splitmix64 stream of its own seed, so a run repeats exactly.
// Thread safety: SystemClock's now() and wall_ms() may be called from any thread; seed() and
// everything of ManualClock from one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <random>

#include "daemon/core/rng.h"
#include "daemon/core/time.h"

namespace elastic {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimePoint now() const = 0;
  virtual std::int64_t wall_ms() const = 0;
  virtual std::uint64_t seed() = 0;
};

// The wall time (ms) at which steady time `then` was, seen from steady `now` on `clock`.
inline std::int64_t wall_ms_at(const Clock& clock, TimePoint now, TimePoint then) {
  return clock.wall_ms() -
         std::chrono::duration_cast<std::chrono::milliseconds>(now - then).count();
}

class SystemClock final : public Clock {
 public:
  TimePoint now() const override {
    return std::chrono::time_point_cast<Duration>(std::chrono::steady_clock::now());
  }
  std::int64_t wall_ms() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  std::uint64_t seed() override {
    std::random_device entropy;
    return (std::uint64_t{entropy()} << 32) ^ entropy();
  }
};

// The process's SystemClock (the default for the node layer's classes).
inline SystemClock& system_clock() {
  static SystemClock clock;
  return clock;
}

class ManualClock final : public Clock {
 public:
  explicit ManualClock(TimePoint start, std::int64_t wall_ms, std::uint64_t seed)
      : now_(start), wall_ms_(wall_ms), seeds_(seed) {}
  TimePoint now() const override { return now_; }
  // Wall time moves with now(), from where it started.
  std::int64_t wall_ms() const override {
    return wall_ms_ + std::chrono::duration_cast<std::chrono::milliseconds>(now_ - start_).count();
  }
  std::uint64_t seed() override { return splitmix64(seeds_); }
  void advance(Duration d) { now_ += d; }
  void set(TimePoint t) { now_ = t; }

 private:
  TimePoint now_;
  TimePoint start_ = now_;
  std::int64_t wall_ms_;
  std::uint64_t seeds_;
};

}  // namespace elastic
