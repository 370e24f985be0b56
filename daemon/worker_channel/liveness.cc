#include "daemon/worker_channel/liveness.h"

#include <algorithm>

#include "daemon/core/duration.h"

namespace elastic::worker_channel {
namespace {

// The silence that counts as a stopped process; below a short timeout, half of it.
Duration stale_after(Duration timeout) { return std::min(kStaleAfter, timeout / 2); }

}  // namespace

Liveness observe(const std::optional<Liveness>& previous, TimePoint now, const Alive& alive) {
  Liveness next = previous.value_or(Liveness{});
  next.heard = now;
  next.waiting = alive.waiting;
  // idle_ms is bounded by the decoder (ten years): it cannot reach before the clock's epoch in
  // any real run, and a time before the previous change is a reordering to ignore.
  TimePoint step_at = now - std::chrono::milliseconds(alive.idle_ms);
  if (!previous) {
    next.step = alive.step;
    next.step_at = step_at;
    return next;
  }
  step_at = std::max(step_at, previous->step_at);
  // The same step, worked on (a long evaluation): the clock restarts, the average stays.
  if (alive.step == previous->step) {
    next.step_at = step_at;
    return next;
  }
  if (previous->armed && alive.step > previous->step) {
    // Steps between two reports share the interval; the average forgets a slow step (a
    // checkpoint, an evaluation) within a few seconds of steady steps.
    const Duration per_step = (step_at - previous->step_at) /
                              static_cast<std::int64_t>(alive.step - previous->step);
    next.step_time = previous->step_time == Duration::zero()
                         ? per_step
                         : (previous->step_time * 4 + per_step) / 5;
  }
  next.step = alive.step;
  next.step_at = step_at;
  next.armed = true;
  return next;
}

Liveness restarted(Liveness liveness, TimePoint now) {
  liveness.step_at = std::max(liveness.step_at, now);
  return liveness;
}

Duration hang_timeout(const Liveness& liveness, Duration configured) {
  if (configured > Duration::zero()) return configured;
  return std::max(kDefaultMinimum, liveness.step_time * kDefaultStepsPerTimeout);
}

TimePoint hang_due(const Liveness& liveness, Duration timeout) {
  if (timeout <= Duration::zero()) return kNever;
  // Silent for the whole timeout: frozen, whatever it was doing (loading included: its alive
  // thread would still answer).
  if (!liveness.armed) return liveness.heard + timeout;
  const TimePoint stuck = liveness.step_at + timeout;
  if (!liveness.waiting) return stuck;
  // Waiting for a peer: hung once silent as well, or once the whole group waited 2 timeouts.
  const TimePoint silent = std::max(stuck, liveness.heard + stale_after(timeout));
  return std::min(silent, liveness.step_at + 2 * timeout);
}

std::string hang_reason(const Liveness& liveness, Duration timeout, TimePoint now) {
  if (now < hang_due(liveness, timeout)) return "";
  const std::string last = "it completed step " + std::to_string(liveness.step) + " " +
                           format_duration(now - liveness.step_at) + " ago";
  if (now - liveness.heard >= stale_after(timeout)) {
    return "its process has answered nothing for " + format_duration(now - liveness.heard) +
           " (stopped or frozen); " + last;
  }
  if (!liveness.waiting) return "it is stuck in its own work, not waiting for its peers; " + last;
  return "it has waited for its peers in a collective for " +
         format_duration(now - liveness.step_at) +
         ", twice the timeout, as has every rank of the group; " + last;
}

}  // namespace elastic::worker_channel
