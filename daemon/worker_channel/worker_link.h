// WorkerLink: what the daemon knows of one worker's channel (messages.h), as a pure state
// machine. It takes (now, input) and returns a LinkStep: the transition for the log, and the
// message to send to the worker, if any. It never reads a clock or touches the socket; the
// shell (endpoint.h) feeds it what the socket delivered and writes what it returns.
//
// States:
//   unknown   spawned; nothing heard yet. A plain command stays here for ever (it ignores its
//             ELASTIC_WORKER_FD) and keeps today's stop-and-restart path.
//   plain     it will not re-form in place: its hello said live=false, or it sent a frame that
//             is not of the protocol (it does not speak the channel; it is not killed for it).
//   ready     its hello said live=true: a round may be offered.
//   offered   a round was sent; waiting for its "joined" until the offer's deadline.
//   joined    it re-formed into the offered round (a later round may be offered again).
//   late      the offer's deadline passed first: the caller falls back to a restart.
//   stopped   a stop was sent (a worker that spoke the channel).
//   gone      the channel reached end of file or failed: the worker is gone (or closed it).
//
// Transitions (every pair not listed leaves the state as it is and is reported as ignored):
//   unknown   hello(live) -> ready; hello(not live), joined, bad frame -> plain
//   ready     offer -> offered; bad frame -> plain
//   offered   joined(the offered round and term) -> joined; offer -> offered (a newer round
//             supersedes); deadline -> late; bad frame -> plain
//   joined    offer -> offered; bad frame -> plain
//   ready, offered, joined, late                       stop -> stopped
//   every state but gone                                closed -> gone
// A joined for another round or term than the one offered is ignored (a stale answer).
// "alive" changes no state: it updates liveness() (liveness.h) in every state but gone; joined
// restarts its step clock (liveness.h restarted()).
//
// Thread safety: none; one owner. Errors: none (every input is legal in every state).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "daemon/core/time.h"
#include "daemon/worker_channel/liveness.h"
#include "daemon/worker_channel/messages.h"

namespace elastic::worker_channel {

enum class LinkState { kUnknown, kPlain, kReady, kOffered, kJoined, kLate, kStopped, kGone };

enum class LinkEvent {
  kHelloLive,
  kHelloNotLive,
  kJoined,       // joined the offered round and term
  kJoinedStale,  // joined another round or term
  kAlive,        // an "alive" (no transition)
  kUnknownType,  // a message type of a newer protocol
  kBadFrame,
  kOffer,
  kDeadline,
  kStop,
  kClosed,
};

const char* to_string(LinkState state);
const char* to_string(LinkEvent event);

// One input's outcome.
struct LinkStep {
  LinkEvent event = LinkEvent::kClosed;
  LinkState from = LinkState::kUnknown;
  LinkState to = LinkState::kUnknown;
  Duration time_in_from{};            // how long it had been in `from`
  bool ignored = false;               // no transition for (from, event): the state stayed
  std::optional<DaemonMessage> send;  // to write to the worker
  std::string detail;                 // the round, the bad frame's error, the stop's reason
};

// "hello(live): unknown->ready (12 ms)", "joined round 4 term 2: ignored in late (1503 ms)".
std::string describe(const LinkStep& step);

class WorkerLink {
 public:
  // `now`: when the worker was spawned (its time in unknown counts from there).
  explicit WorkerLink(TimePoint now) : since_(now) {}

  LinkState state() const { return state_; }
  // A round may be offered: it said hello(live) and is not waiting for another offer's answer.
  bool live() const { return state_ == LinkState::kReady || state_ == LinkState::kJoined; }
  // The protocol version of its hello (0 before one).
  std::uint64_t version() const { return version_; }
  // The round last offered, and the one it last joined.
  const std::optional<RoundOffer>& offered() const { return offered_; }
  const std::optional<Joined>& joined() const { return joined_; }
  // What its "alive" messages said (nullopt: it sent none: it does not support hang detection
  // per worker).
  const std::optional<Liveness>& liveness() const { return liveness_; }
  // The offer's deadline while offered, else kNever.
  TimePoint next_deadline() const { return state_ == LinkState::kOffered ? deadline_ : kNever; }

  // A frame the worker sent, decoded.
  LinkStep on_message(TimePoint now, const WorkerMessage& message);
  // A frame that is not of the protocol; `error` says what was wrong.
  LinkStep on_bad_frame(TimePoint now, std::string error);
  // End of file (or an error) on the channel.
  LinkStep on_closed(TimePoint now);
  // Offers `round`, to be joined by now + timeout. Sends it unless ignored (not live).
  LinkStep offer(TimePoint now, const RoundOffer& round, Duration timeout);
  // Tells a worker that spoke the channel to end (ignored for the others).
  LinkStep stop(TimePoint now, std::string reason);
  // The offer's deadline, when it is due.
  std::optional<LinkStep> tick(TimePoint now);

 private:
  LinkStep apply(TimePoint now, LinkEvent event, std::string detail);

  LinkState state_ = LinkState::kUnknown;
  TimePoint since_;
  TimePoint deadline_ = kNever;
  std::uint64_t version_ = 0;
  std::optional<RoundOffer> offered_;
  std::optional<Joined> joined_;
  std::optional<Liveness> liveness_;
};

}  // namespace elastic::worker_channel
