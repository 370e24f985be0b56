// WorkerLink (daemon/worker_channel/worker_link.h): every input in every state against the
// header's table, what each accepted offer and stop sends, stale answers, deadlines, and the
// transition lines for the log. Manual time: no clock.
#include "daemon/worker_channel/worker_link.h"

#include <gtest/gtest.h>

#include <array>
#include <functional>
#include <optional>
#include <string>

namespace elastic::worker_channel {
namespace {

using namespace std::chrono_literals;
using S = LinkState;

constexpr TimePoint kStart{};
constexpr Duration kTimeout = 2s;

RoundOffer round_of(std::uint64_t round, std::uint64_t term) {
  RoundOffer m;
  m.job = "j";
  m.round = round;
  m.term = term;
  m.world_size = 2;
  m.rank = 1;
  m.master_addr = "h";
  m.master_port = 1234;
  return m;
}

// A link brought into `state` at kStart + 1s, with round 4 term 2 as its offer where it has one.
WorkerLink link_in(S state) {
  WorkerLink link(kStart);
  const TimePoint t = kStart + 1s;
  auto offered = [&] {
    (void)link.on_message(t, Hello{1, true});
    (void)link.offer(t, round_of(4, 2), kTimeout);
  };
  switch (state) {
    case S::kUnknown:
      break;
    case S::kPlain:
      (void)link.on_message(t, Hello{1, false});
      break;
    case S::kReady:
      (void)link.on_message(t, Hello{1, true});
      break;
    case S::kOffered:
      offered();
      break;
    case S::kJoined:
      offered();
      (void)link.on_message(t, Joined{4, 2});
      break;
    case S::kLate:
      offered();
      (void)link.tick(t + kTimeout);
      break;
    case S::kStopped:
      (void)link.on_message(t, Hello{1, true});
      (void)link.stop(t, "cancelled");
      break;
    case S::kGone:
      (void)link.on_closed(t);
      break;
  }
  EXPECT_EQ(link.state(), state) << "could not reach " << to_string(state);
  return link;
}

// The inputs, in the columns' order.
enum Input {
  kHelloLive,
  kHelloNotLive,
  kJoinedOffered,  // joined round 4 term 2 (the offer, where there is one)
  kJoinedOther,    // joined round 3 term 2
  kUnknown,
  kBad,
  kOffer,  // round 5 term 2
  kTick,   // the far future
  kStop,
  kClose,
  kInputs
};

std::optional<LinkStep> feed(WorkerLink& link, Input input, TimePoint t) {
  switch (input) {
    case kHelloLive:
      return link.on_message(t, Hello{1, true});
    case kHelloNotLive:
      return link.on_message(t, Hello{1, false});
    case kJoinedOffered:
      return link.on_message(t, Joined{4, 2});
    case kJoinedOther:
      return link.on_message(t, Joined{3, 2});
    case kUnknown:
      return link.on_message(t, UnknownMessage{"progress"});
    case kBad:
      return link.on_bad_frame(t, "not JSON");
    case kOffer:
      return link.offer(t, round_of(5, 2), kTimeout);
    case kTick:
      return link.tick(t + 1h);
    case kStop:
      return link.stop(t, "cancelled");
    case kClose:
      return link.on_closed(t);
    case kInputs:
      break;
  }
  return std::nullopt;
}

// What an input does in a state: the state after it, or "=" for ignored, or "-" for no step
// at all (a tick with no deadline due).
struct Row {
  S state;
  std::array<const char*, kInputs> after;
};

const char* name(S s) { return to_string(s); }

TEST(WorkerLinkTest, EveryInputInEveryStateFollowsTheTable) {
  // clang-format off
  //        hello(live) hello(not)  joined(off) joined(oth) unknown  bad      offer      tick    stop       close
  const std::array<Row, 8> table = {{
    {S::kUnknown, {"ready",   "plain",    "plain",    "plain",    "=",     "plain", "=",       "-",     "=",       "gone"}},
    {S::kPlain,   {"=",       "=",        "=",        "=",        "=",     "=",     "=",       "-",     "=",       "gone"}},
    {S::kReady,   {"=",       "=",        "=",        "=",        "=",     "plain", "offered", "-",     "stopped", "gone"}},
    {S::kOffered, {"=",       "=",        "joined",   "=",        "=",     "plain", "offered", "late",  "stopped", "gone"}},
    {S::kJoined,  {"=",       "=",        "=",        "=",        "=",     "plain", "offered", "-",     "stopped", "gone"}},
    {S::kLate,    {"=",       "=",        "=",        "=",        "=",     "=",     "=",       "-",     "stopped", "gone"}},
    {S::kStopped, {"=",       "=",        "=",        "=",        "=",     "=",     "=",       "-",     "=",       "gone"}},
    {S::kGone,    {"=",       "=",        "=",        "=",        "=",     "=",     "=",       "-",     "=",       "="}},
  }};
  // clang-format on
  for (const Row& row : table) {
    for (int input = 0; input < kInputs; ++input) {
      WorkerLink link = link_in(row.state);
      const std::string expected = row.after[static_cast<std::size_t>(input)];
      const std::optional<LinkStep> step = feed(link, static_cast<Input>(input), kStart + 3s);
      const std::string where = std::string(name(row.state)) + " input " + std::to_string(input);
      if (expected == "-") {
        EXPECT_FALSE(step.has_value()) << where;
        EXPECT_EQ(link.state(), row.state) << where;
        continue;
      }
      ASSERT_TRUE(step.has_value()) << where;
      EXPECT_EQ(step->from, row.state) << where;
      if (expected == "=") {
        EXPECT_TRUE(step->ignored) << where;
        EXPECT_EQ(link.state(), row.state) << where;
        EXPECT_FALSE(step->send.has_value()) << where << ": an ignored input sends nothing";
      } else {
        EXPECT_FALSE(step->ignored) << where;
        EXPECT_EQ(std::string(name(link.state())), expected) << where;
        EXPECT_EQ(step->to, link.state()) << where;
      }
    }
  }
}

TEST(WorkerLinkTest, AnAcceptedOfferSendsTheRoundAndSetsItsDeadline) {
  WorkerLink link = link_in(S::kReady);
  EXPECT_TRUE(link.live());
  EXPECT_EQ(link.next_deadline(), kNever);
  const TimePoint t = kStart + 5s;
  const LinkStep step = link.offer(t, round_of(5, 2), kTimeout);
  ASSERT_TRUE(step.send.has_value());
  ASSERT_TRUE(std::holds_alternative<RoundOffer>(*step.send));
  EXPECT_EQ(std::get<RoundOffer>(*step.send).round, 5u);
  EXPECT_EQ(link.next_deadline(), t + kTimeout);
  EXPECT_FALSE(link.live());  // waiting for this offer's answer
  EXPECT_FALSE(link.tick(t + kTimeout - 1ns).has_value());
  const auto late = link.tick(t + kTimeout);
  ASSERT_TRUE(late.has_value());
  EXPECT_EQ(link.state(), S::kLate);
  EXPECT_EQ(late->time_in_from, kTimeout);
}

TEST(WorkerLinkTest, AWorkerThatNeverSaidHelloIsOfferedNothing) {
  WorkerLink link(kStart);
  EXPECT_FALSE(link.live());
  const LinkStep step = link.offer(kStart + 1s, round_of(1, 1), kTimeout);
  EXPECT_TRUE(step.ignored);
  EXPECT_FALSE(step.send.has_value());
  EXPECT_FALSE(link.offered().has_value());
  EXPECT_EQ(link.next_deadline(), kNever);
  EXPECT_FALSE(link.stop(kStart + 1s, "x").send.has_value());
  // Ignored inputs do not restart the time it has been in unknown.
  EXPECT_EQ(link.on_closed(kStart + 3s).time_in_from, 3s);
}

TEST(WorkerLinkTest, ANewerOfferSupersedesAndTheOldAnswerIsStale) {
  WorkerLink link = link_in(S::kOffered);  // round 4 term 2
  (void)link.offer(kStart + 2s, round_of(5, 2), kTimeout);
  EXPECT_EQ(link.next_deadline(), kStart + 2s + kTimeout);
  const LinkStep stale = link.on_message(kStart + 3s, Joined{4, 2});
  EXPECT_EQ(stale.event, LinkEvent::kJoinedStale);
  EXPECT_TRUE(stale.ignored);
  EXPECT_EQ(link.state(), S::kOffered);
  // The same round of another term is not an answer either.
  EXPECT_TRUE(link.on_message(kStart + 3s, Joined{5, 3}).ignored);
  const LinkStep joined = link.on_message(kStart + 3s, Joined{5, 2});
  EXPECT_EQ(joined.event, LinkEvent::kJoined);
  EXPECT_EQ(link.state(), S::kJoined);
  ASSERT_TRUE(link.joined().has_value());
  EXPECT_EQ(link.joined()->round, 5u);
  EXPECT_TRUE(link.live());
}

TEST(WorkerLinkTest, StopSendsTheReasonToAWorkerThatSpokeTheChannel) {
  WorkerLink link = link_in(S::kJoined);
  const LinkStep step = link.stop(kStart + 2s, "job cancelled");
  ASSERT_TRUE(step.send.has_value());
  EXPECT_EQ(std::get<Stop>(*step.send).reason, "job cancelled");
}

TEST(WorkerLinkTest, TheHelloVersionIsKeptFromTheFirstHello) {
  WorkerLink link(kStart);
  (void)link.on_message(kStart, Hello{3, true});
  (void)link.on_message(kStart, Hello{1, true});
  EXPECT_EQ(link.version(), 3u);
}

TEST(WorkerLinkTest, TransitionsDescribeThemselvesForTheLog) {
  WorkerLink link(kStart);
  const LinkStep hello = link.on_message(kStart + 12ms, Hello{1, true});
  EXPECT_EQ(describe(hello), "hello(live) version 1: unknown->ready (12 ms)");
  const LinkStep offer = link.offer(kStart + 20ms, round_of(4, 2), kTimeout);
  EXPECT_EQ(describe(offer), "offer round 4 term 2: ready->offered (8 ms)");
  const LinkStep stale = link.on_message(kStart + 25ms, Joined{3, 2});
  EXPECT_EQ(describe(stale), "joined(stale) round 3 term 2: ignored in offered (5 ms)");
  const LinkStep bad = link.on_bad_frame(kStart + 30ms, "worker w's channel: not JSON");
  EXPECT_EQ(describe(bad), "bad frame worker w's channel: not JSON: offered->plain (10 ms)");
}

}  // namespace
}  // namespace elastic::worker_channel
