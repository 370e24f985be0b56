// Liveness (daemon/worker_channel/liveness.h): arming, the step-time average and the default
// timeout, the three ways a worker counts as hung (silent, stuck in its own work, the whole
// group waiting), and WorkerLink's handling of "alive". Manual time: no clock.
#include "daemon/worker_channel/liveness.h"

#include <gtest/gtest.h>

#include "daemon/worker_channel/worker_link.h"

namespace elastic::worker_channel {
namespace {

using namespace std::chrono_literals;

constexpr TimePoint kStart = TimePoint{} + 1000s;
constexpr Duration kTimeout = 10s;

// A worker that reported steps 0, 1, ... `steps` at 100 ms each (alive after each step).
Liveness stepping(std::uint64_t steps, bool waiting = false) {
  std::optional<Liveness> l;
  for (std::uint64_t s = 0; s <= steps; ++s) {
    l = observe(l, kStart + s * 100ms, Alive{s, 0, waiting});
  }
  return *l;
}

TEST(WorkerLivenessTest, LoadingIsNoHangUntilTheStepFirstChanges) {
  const Liveness first = observe(std::nullopt, kStart, Alive{0, 20'000, false});
  EXPECT_FALSE(first.armed);
  // Only a silence of the whole timeout counts before the first step.
  EXPECT_EQ(hang_due(first, kTimeout), kStart + kTimeout);
  // The same step again (still loading), much later: still not armed.
  const Liveness again = observe(first, kStart + 60s, Alive{0, 80'000, false});
  EXPECT_EQ(hang_due(again, kTimeout), kStart + 60s + kTimeout);
  EXPECT_NE(hang_reason(again, kTimeout, kStart + 60s + kTimeout).find("answered nothing"),
            std::string::npos);
  const Liveness moved = observe(again, kStart + 61s, Alive{1, 200, false});
  EXPECT_TRUE(moved.armed);
  EXPECT_EQ(moved.step_at, kStart + 61s - 200ms);
  EXPECT_EQ(hang_due(moved, kTimeout), kStart + 61s - 200ms + kTimeout);
}

TEST(WorkerLivenessTest, StuckInItsOwnWorkIsHungAfterTheTimeout) {
  Liveness l = stepping(5);
  const TimePoint last = kStart + 500ms;
  // Still alive every half second, not waiting, step 5 for ever.
  for (int i = 1; i <= 30; ++i) l = observe(l, last + i * 500ms, Alive{5, 500u * i, false});
  EXPECT_EQ(hang_due(l, kTimeout), last + kTimeout);
  EXPECT_EQ(hang_reason(l, kTimeout, last + kTimeout - 1ms), "");
  const std::string why = hang_reason(l, kTimeout, last + kTimeout);
  EXPECT_NE(why.find("stuck in its own work"), std::string::npos) << why;
  EXPECT_NE(why.find("step 5"), std::string::npos) << why;
}

TEST(WorkerLivenessTest, AWorkerWaitingForAPeerIsNotBlamedWhileItAnswers) {
  Liveness l = stepping(5, /*waiting=*/true);
  const TimePoint last = kStart + 500ms;
  for (int i = 1; i <= 30; ++i) l = observe(l, last + i * 500ms, Alive{5, 500u * i, true});
  // Heard at last + 15 s: past the timeout, but it waits and answers: due only if silent now.
  EXPECT_EQ(hang_due(l, kTimeout), last + 15s + kStaleAfter);
  EXPECT_EQ(hang_reason(l, kTimeout, last + 15500ms), "");
  for (int i = 31; i <= 40; ++i) l = observe(l, last + i * 500ms, Alive{5, 500u * i, true});
  // Still answering at twice the timeout: the whole group is stuck; it is hung too.
  EXPECT_EQ(hang_due(l, kTimeout), last + 2 * kTimeout);
  const std::string why = hang_reason(l, kTimeout, last + 2 * kTimeout);
  EXPECT_NE(why.find("every rank of the group"), std::string::npos) << why;
}

TEST(WorkerLivenessTest, ASilentWorkerIsHungAtTheTimeoutOrWhenItFellSilentLater) {
  // Stopped right after its last step: due at the timeout.
  const Liveness stopped = stepping(5, /*waiting=*/true);
  EXPECT_EQ(hang_due(stopped, kTimeout), kStart + 500ms + kTimeout);
  const std::string why = hang_reason(stopped, kTimeout, kStart + 500ms + kTimeout);
  EXPECT_NE(why.find("answered nothing"), std::string::npos) << why;
  // Waited (alive) 9.5 s, then fell silent: due once silent for kStaleAfter.
  Liveness later = stopped;
  later = observe(later, kStart + 10s, Alive{5, 9'500, true});
  EXPECT_EQ(hang_due(later, kTimeout), kStart + 10s + kStaleAfter);
  // A short timeout shortens the silence that counts, to half of it.
  const Liveness brief = observe(stopped, kStart + 3s, Alive{5, 2'500, true});
  EXPECT_EQ(hang_due(brief, 3s), kStart + 3s + 1500ms);
}

TEST(WorkerLivenessTest, TheDefaultTimeoutFollowsTheStepTimeWithAFloor) {
  const Liveness fast = stepping(20);
  EXPECT_EQ(fast.step_time, 100ms);
  EXPECT_EQ(hang_timeout(fast, Duration::zero()), kDefaultMinimum);
  EXPECT_EQ(hang_timeout(fast, 7s), 7s);
  // Slow steps: 10 s each, reported every second step (20 s apart).
  std::optional<Liveness> slow;
  for (std::uint64_t s = 0; s <= 10; s += 2) slow = observe(slow, kStart + s * 10s, Alive{s, 0, false});
  EXPECT_EQ(slow->step_time, 10s);
  EXPECT_EQ(hang_timeout(*slow, Duration::zero()), 10s * kDefaultStepsPerTimeout);
  // One slow step (an evaluation) moves the average a fifth of the way, not all of it.
  Liveness eval = observe(fast, kStart + 2s + 30s, Alive{21, 0, false});
  EXPECT_EQ(eval.step_time, (100ms * 4 + 30s) / 5);
}

TEST(WorkerLivenessTest, AStepGoingBackAfterARollbackRearmsWithoutAnAverage) {
  Liveness l = stepping(10);
  const Duration before = l.step_time;
  // A re-formation agreed on step 8: the step changed (the clock restarts), the average stays.
  l = observe(l, kStart + 5s, Alive{8, 100, true});
  EXPECT_EQ(l.step, 8u);
  EXPECT_EQ(l.step_at, kStart + 5s - 100ms);
  EXPECT_EQ(l.step_time, before);
}

TEST(WorkerLivenessTest, WorkOnTheSameStepRestartsTheClockNotTheAverage) {
  Liveness l = stepping(10);
  const Duration average = l.step_time;
  // An evaluation after step 10: alive every 500 ms, each chunk of work resets the idle time.
  for (int i = 1; i <= 100; ++i) l = observe(l, kStart + 1s + i * 500ms, Alive{10, 100, false});
  EXPECT_EQ(l.step_at, kStart + 1s + 100 * 500ms - 100ms);
  EXPECT_EQ(hang_due(l, kTimeout), l.step_at + kTimeout);
  EXPECT_EQ(l.step_time, average);
  // An idle time reaching back before the last change (a late message) moves nothing back.
  const Liveness late = observe(l, kStart + 52s, Alive{10, 30'000, false});
  EXPECT_EQ(late.step_at, l.step_at);
}

TEST(WorkerLivenessTest, TheLinkRecordsAliveInEveryStateButGoneWithoutATransition) {
  WorkerLink link(kStart);
  EXPECT_FALSE(link.liveness().has_value());
  (void)link.on_message(kStart, Hello{1, true});
  const LinkStep step = link.on_message(kStart + 1s, Alive{3, 10, true});
  EXPECT_EQ(step.event, LinkEvent::kAlive);
  EXPECT_FALSE(step.ignored);
  EXPECT_EQ(step.from, LinkState::kReady);
  EXPECT_EQ(step.to, LinkState::kReady);
  EXPECT_EQ(describe(step), "alive step 3, waiting: ready->ready (1000 ms)");
  ASSERT_TRUE(link.liveness().has_value());
  EXPECT_EQ(link.liveness()->step, 3u);
  EXPECT_TRUE(link.live());
  (void)link.on_closed(kStart + 2s);
  const LinkStep late = link.on_message(kStart + 3s, Alive{4, 10, true});
  EXPECT_TRUE(late.ignored);
  EXPECT_EQ(link.liveness()->step, 3u);
}

TEST(WorkerLivenessTest, JoiningANewRoundRestartsTheStepClockNotTheAverage) {
  // Step 10 done at +1 s, then it waited for a hung peer and re-formed: the join at +7 s is
  // where its clock starts again (CI: the survivors were blamed for their own re-formation).
  Liveness l = stepping(10);
  const Duration average = l.step_time;
  const Liveness r = restarted(l, kStart + 7s);
  EXPECT_EQ(r.step_at, kStart + 7s);
  EXPECT_EQ(r.step_time, average);
  EXPECT_EQ(hang_due(r, kTimeout), kStart + 7s + kTimeout);
  // An idle time counted from the old step moves it back no further.
  EXPECT_EQ(observe(r, kStart + 7500ms, Alive{10, 6'500, false}).step_at, kStart + 7s);
  // Never backwards.
  EXPECT_EQ(restarted(r, kStart).step_at, kStart + 7s);

  WorkerLink link(kStart);
  (void)link.on_message(kStart, Hello{1, true});
  (void)link.on_message(kStart + 1s, Alive{3, 0, false});
  (void)link.on_message(kStart + 2s, Alive{4, 0, false});
  RoundOffer offer;
  offer.round = 4;
  offer.term = 2;
  (void)link.offer(kStart + 6s, offer, 30s);
  (void)link.on_message(kStart + 6500ms, Alive{4, 4'500, false});
  EXPECT_EQ(link.liveness()->step_at, kStart + 2s);  // offered: the offer's deadline watches it
  (void)link.on_message(kStart + 9s, Joined{4, 2});
  EXPECT_EQ(link.state(), LinkState::kJoined);
  EXPECT_EQ(link.liveness()->step_at, kStart + 9s);
  // A stale join restarts nothing.
  (void)link.on_message(kStart + 12s, Joined{3, 2});
  EXPECT_EQ(link.liveness()->step_at, kStart + 9s);
}

}  // namespace
}  // namespace elastic::worker_channel
