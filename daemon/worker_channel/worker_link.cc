#include "daemon/worker_channel/worker_link.h"

#include <array>
#include <cmath>

namespace elastic::worker_channel {
namespace {

struct Transition {
  LinkState from;
  LinkEvent event;
  LinkState to;
};

using S = LinkState;
using E = LinkEvent;

// The header's table, row for row.
constexpr std::array kTransitions = {
    Transition{S::kUnknown, E::kHelloLive, S::kReady},
    Transition{S::kUnknown, E::kHelloNotLive, S::kPlain},
    Transition{S::kUnknown, E::kJoined, S::kPlain},
    Transition{S::kUnknown, E::kJoinedStale, S::kPlain},
    Transition{S::kUnknown, E::kBadFrame, S::kPlain},
    Transition{S::kReady, E::kOffer, S::kOffered},
    Transition{S::kReady, E::kBadFrame, S::kPlain},
    Transition{S::kOffered, E::kJoined, S::kJoined},
    Transition{S::kOffered, E::kOffer, S::kOffered},
    Transition{S::kOffered, E::kDeadline, S::kLate},
    Transition{S::kOffered, E::kBadFrame, S::kPlain},
    Transition{S::kJoined, E::kOffer, S::kOffered},
    Transition{S::kJoined, E::kBadFrame, S::kPlain},
    Transition{S::kReady, E::kStop, S::kStopped},
    Transition{S::kOffered, E::kStop, S::kStopped},
    Transition{S::kJoined, E::kStop, S::kStopped},
    Transition{S::kLate, E::kStop, S::kStopped},
    Transition{S::kUnknown, E::kClosed, S::kGone},
    Transition{S::kPlain, E::kClosed, S::kGone},
    Transition{S::kReady, E::kClosed, S::kGone},
    Transition{S::kOffered, E::kClosed, S::kGone},
    Transition{S::kJoined, E::kClosed, S::kGone},
    Transition{S::kLate, E::kClosed, S::kGone},
    Transition{S::kStopped, E::kClosed, S::kGone},
};

std::optional<LinkState> next_state(LinkState from, LinkEvent event) {
  for (const Transition& t : kTransitions) {
    if (t.from == from && t.event == event) return t.to;
  }
  return std::nullopt;
}

std::string round_text(std::uint64_t round, std::uint64_t term) {
  return "round " + std::to_string(round) + " term " + std::to_string(term);
}

}  // namespace

const char* to_string(LinkState state) {
  switch (state) {
    case S::kUnknown:
      return "unknown";
    case S::kPlain:
      return "plain";
    case S::kReady:
      return "ready";
    case S::kOffered:
      return "offered";
    case S::kJoined:
      return "joined";
    case S::kLate:
      return "late";
    case S::kStopped:
      return "stopped";
    case S::kGone:
      return "gone";
  }
  return "?";
}

const char* to_string(LinkEvent event) {
  switch (event) {
    case E::kHelloLive:
      return "hello(live)";
    case E::kHelloNotLive:
      return "hello(not live)";
    case E::kJoined:
      return "joined";
    case E::kJoinedStale:
      return "joined(stale)";
    case E::kAlive:
      return "alive";
    case E::kUnknownType:
      return "unknown message";
    case E::kBadFrame:
      return "bad frame";
    case E::kOffer:
      return "offer";
    case E::kDeadline:
      return "deadline";
    case E::kStop:
      return "stop";
    case E::kClosed:
      return "closed";
  }
  return "?";
}

std::string describe(const LinkStep& step) {
  std::string out = to_string(step.event);
  if (!step.detail.empty()) out += " " + step.detail;
  out += ": ";
  out += step.ignored ? std::string("ignored in ") + to_string(step.from)
                      : std::string(to_string(step.from)) + "->" + to_string(step.to);
  out += " (" + std::to_string(std::llround(to_ms(step.time_in_from))) + " ms)";
  return out;
}

LinkStep WorkerLink::apply(TimePoint now, LinkEvent event, std::string detail) {
  LinkStep step;
  step.event = event;
  step.from = state_;
  step.time_in_from = now - since_;
  step.detail = std::move(detail);
  const std::optional<LinkState> to = next_state(state_, event);
  step.ignored = !to.has_value();
  step.to = to.value_or(state_);
  // A new offer restarts the clock of offered; an ignored input changes nothing.
  if (!step.ignored && (step.to != state_ || event == E::kOffer)) since_ = now;
  state_ = step.to;
  return step;
}

LinkStep WorkerLink::on_message(TimePoint now, const WorkerMessage& message) {
  if (const auto* hello = std::get_if<Hello>(&message)) {
    const bool first = state_ == S::kUnknown;
    LinkStep step = apply(now, hello->live ? E::kHelloLive : E::kHelloNotLive,
                          "version " + std::to_string(hello->version));
    if (first) version_ = hello->version;
    return step;
  }
  if (const auto* joined = std::get_if<Joined>(&message)) {
    const bool answers = state_ == S::kOffered && offered_ && offered_->round == joined->round &&
                         offered_->term == joined->term;
    LinkStep step =
        apply(now, answers ? E::kJoined : E::kJoinedStale, round_text(joined->round, joined->term));
    if (answers) {
      joined_ = *joined;
      // Hang detection counts from here: the wait for the failed peer and the re-formation are
      // no hang (while offered, the offer's deadline watches it instead).
      if (liveness_) liveness_ = restarted(*liveness_, now);
    }
    return step;
  }
  if (const auto* alive = std::get_if<Alive>(&message)) {
    // No transition: the step says what the worker does, for hang detection only.
    LinkStep step;
    step.event = E::kAlive;
    step.from = step.to = state_;
    step.time_in_from = now - since_;
    step.detail = "step " + std::to_string(alive->step) + (alive->waiting ? ", waiting" : "");
    step.ignored = state_ == S::kGone;
    if (!step.ignored) liveness_ = observe(liveness_, now, *alive);
    return step;
  }
  return apply(now, E::kUnknownType, "\"" + std::get<UnknownMessage>(message).type + "\"");
}

LinkStep WorkerLink::on_bad_frame(TimePoint now, std::string error) {
  return apply(now, E::kBadFrame, std::move(error));
}

LinkStep WorkerLink::on_closed(TimePoint now) { return apply(now, E::kClosed, ""); }

LinkStep WorkerLink::offer(TimePoint now, const RoundOffer& round, Duration timeout) {
  LinkStep step = apply(now, E::kOffer, round_text(round.round, round.term));
  if (step.ignored) return step;
  offered_ = round;
  deadline_ = now + timeout;
  step.send = DaemonMessage(round);
  return step;
}

LinkStep WorkerLink::stop(TimePoint now, std::string reason) {
  LinkStep step = apply(now, E::kStop, reason);
  if (!step.ignored) step.send = DaemonMessage(Stop{std::move(reason)});
  return step;
}

std::optional<LinkStep> WorkerLink::tick(TimePoint now) {
  if (state_ != S::kOffered || now < deadline_) return std::nullopt;
  return apply(now, E::kDeadline, round_text(offered_->round, offered_->term));
}

}  // namespace elastic::worker_channel
