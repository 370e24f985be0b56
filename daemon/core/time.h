// Time as the pure state machines see it: a point on a monotonic timeline that the caller
// supplies (the daemon's steady clock, or the simulator's virtual clock). Pure code never reads
// a clock itself (STYLE.md rules 1 and 2).
#pragma once

#include <chrono>

namespace elastic {

using Duration = std::chrono::nanoseconds;
using TimePoint = std::chrono::time_point<std::chrono::steady_clock, Duration>;

inline constexpr TimePoint kNever = TimePoint::max();

// Milliseconds as a double, for logs and JSON.
inline double to_ms(Duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

}  // namespace elastic
