// The wall clock as a child process reads it (Python's time.time(), a log line's time stamp), for
// tests that compare when a worker printed a line with when the test saw it. Every other wait in
// a test uses steady time (wait_until); this is only for such cross-process comparisons.
// Header-only so every tier can use it without a library.
#pragma once

#include <chrono>

namespace elastic::testing {

// Seconds since the Unix epoch, with the clock's sub-second precision.
inline double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace elastic::testing
