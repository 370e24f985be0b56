// Liveness: what a worker's "alive" messages (messages.h) tell the daemon's hang detection, and
// when a worker counts as hung. Pure: every function takes the time it is asked about.
//
// Why per worker: every rank of a job stops making progress when one of them hangs (the others
// wait for it in their next collective), so "no progress" alone cannot say which rank is at
// fault, and a daemon that acts on it aborts its healthy workers. A worker that sends "alive"
// from a thread of its own says more:
//   - silence (no "alive" for stale_after): its process is stopped or frozen as a whole;
//   - alive, not waiting, its step unchanged: it is stuck in its own work (a data loader, a
//     kernel, a loop), while its peers wait for it;
//   - alive and waiting in a collective: it waits for a peer; the peer's daemon acts on the
//     peer. Only when the whole group has waited twice the timeout (a deadlock, a lost
//     connection with no lost node) does every daemon act on its own waiting workers.
// Detection is armed once the worker's step changed after its first "alive" (loading a model
// and data is no hang) and its clock restarts at every change of step, or when the worker says
// it works on the same step (idle_ms back near 0: a long evaluation). Before that only a
// silence of the whole timeout counts (the process froze while loading, or within its first
// step, before an "alive" told its step).
//
// The timeout is the job's hang_timeout when set; otherwise it follows the worker's observed
// step time: kDefaultStepsPerTimeout steps, never less than kDefaultMinimum.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "daemon/core/time.h"
#include "daemon/worker_channel/messages.h"

namespace elastic::worker_channel {

struct Liveness {
  TimePoint heard{};         // when the last "alive" arrived
  std::uint64_t step = 0;    // steps done, as last reported
  TimePoint step_at{};       // when the step last changed (heard - idle_ms)
  bool waiting = false;      // in a collective, as last reported
  bool armed = false;        // the step changed since the first "alive"
  Duration step_time{};      // a moving average of the time per step (0 until armed)
};

inline constexpr Duration kDefaultMinimum = std::chrono::seconds(30);
inline constexpr std::int64_t kDefaultStepsPerTimeout = 10;
// Silence longer than this is a stopped process (several alive periods, for a loaded host).
inline constexpr Duration kStaleAfter = std::chrono::seconds(2);

// `previous` updated with an "alive" received at `now`.
Liveness observe(const std::optional<Liveness>& previous, TimePoint now, const Alive& alive);

// The hang timeout of a worker: `configured` when > 0, else from its step time (see above).
Duration hang_timeout(const Liveness& liveness, Duration configured);

// `liveness` of a worker that re-formed into a new round at `now`: its step clock restarts there
// (the time it spent waiting for the failed peer and re-forming is no hang); the average stays.
Liveness restarted(Liveness liveness, TimePoint now);

// When the worker counts as hung with `timeout` if nothing else is heard (kNever: not armed).
TimePoint hang_due(const Liveness& liveness, Duration timeout);

// Why a worker that is due at `now` counts as hung: "its process has answered nothing for
// 12.5 s (stopped or frozen); it completed step 40 30.0 s ago". Empty when it is not due.
std::string hang_reason(const Liveness& liveness, Duration timeout, TimePoint now);

}  // namespace elastic::worker_channel
