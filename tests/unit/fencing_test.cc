// RoundFence: the (round, term) order, stale STARTs ignored, per-job independence.
#include "daemon/rendezvous/fencing.h"

#include <gtest/gtest.h>

#include <ostream>
#include <string>

namespace elastic::rendezvous {
namespace {

using V = RoundFence::Verdict;

struct OrderCase {
  RoundStamp a;
  RoundStamp b;
  bool a_older;
};

void PrintTo(const OrderCase& c, std::ostream* os) {
  *os << "(t" << c.a.term << ",r" << c.a.round << ") vs (t" << c.b.term << ",r" << c.b.round << ")";
}

class FenceOrder : public ::testing::TestWithParam<OrderCase> {};

TEST_P(FenceOrder, RoundFirstThenTerm) {
  EXPECT_EQ(is_older(GetParam().a, GetParam().b), GetParam().a_older);
}

INSTANTIATE_TEST_SUITE_P(
    Table, FenceOrder,
    ::testing::Values(OrderCase{{1, 1}, {1, 2}, true},    // lower round
                      OrderCase{{9, 1}, {1, 2}, true},    // lower round, whatever the term
                      OrderCase{{1, 3}, {9, 2}, false},   // higher round wins with a lower term
                      OrderCase{{1, 2}, {2, 2}, true},    // same round, lower term
                      OrderCase{{2, 2}, {1, 2}, false},   // same round, higher term
                      OrderCase{{2, 2}, {2, 2}, false}),  // equal is not older
    [](const auto& param_info) {
      const OrderCase& c = param_info.param;
      return "t" + std::to_string(c.a.term) + "r" + std::to_string(c.a.round) + "_vs_t" +
             std::to_string(c.b.term) + "r" + std::to_string(c.b.round);
    });

TEST(RoundFenceTest, FirstMessageOfAJobIsNewer) {
  RoundFence fence;
  EXPECT_FALSE(fence.highest("j").has_value());
  EXPECT_EQ(fence.observe("j", {3, 1}), V::kNewer);
  EXPECT_EQ(fence.highest("j"), (RoundStamp{3, 1}));
}

TEST(RoundFenceTest, StaleStartIsIgnoredAndDoesNotLowerTheFence) {
  RoundFence fence;
  EXPECT_EQ(fence.observe("j", {5, 4}), V::kNewer);
  EXPECT_EQ(fence.observe("j", {5, 3}), V::kStale);  // a delayed START of an older round
  EXPECT_EQ(fence.observe("j", {9, 3}), V::kStale);  // a newer term does not revive it
  EXPECT_EQ(fence.observe("j", {4, 4}), V::kStale);  // the deposed leader's copy of round 4
  EXPECT_EQ(fence.highest("j"), (RoundStamp{5, 4}));
}

TEST(RoundFenceTest, RetransmissionIsSameAndNewerTermOfTheSameRoundAdvances) {
  RoundFence fence;
  EXPECT_EQ(fence.observe("j", {5, 4}), V::kNewer);
  EXPECT_EQ(fence.observe("j", {5, 4}), V::kSame);
  EXPECT_EQ(fence.observe("j", {6, 4}), V::kNewer);  // a new leader resends round 4
  EXPECT_EQ(fence.observe("j", {5, 4}), V::kStale);
  EXPECT_EQ(fence.observe("j", {2, 5}), V::kNewer);  // a higher round always wins
  EXPECT_EQ(fence.highest("j"), (RoundStamp{2, 5}));
}

TEST(RoundFenceTest, CheckDoesNotRecord) {
  RoundFence fence;
  EXPECT_EQ(fence.check("j", {1, 1}), V::kNewer);
  EXPECT_EQ(fence.size(), 0u);
  fence.observe("j", {1, 2});
  EXPECT_EQ(fence.check("j", {1, 3}), V::kNewer);
  EXPECT_EQ(fence.check("j", {1, 2}), V::kSame);
  EXPECT_EQ(fence.check("j", {1, 1}), V::kStale);
  EXPECT_EQ(fence.highest("j"), (RoundStamp{1, 2}));
}

TEST(RoundFenceTest, JobsAreIndependentAndForgettable) {
  RoundFence fence;
  fence.observe("a", {1, 7});
  EXPECT_EQ(fence.observe("b", {1, 1}), V::kNewer);
  EXPECT_EQ(fence.size(), 2u);
  fence.forget("a");
  fence.forget("missing");
  EXPECT_EQ(fence.size(), 1u);
  EXPECT_EQ(fence.observe("a", {1, 1}), V::kNewer);
  EXPECT_STREQ(to_string(V::kStale), "stale");
}

// Whatever order (term, round) stamps arrive in, the fence ends at their maximum and never
// accepts a stamp older than one it accepted before.
TEST(RoundFenceTest, NeverActsOnAnOlderRoundThanSeen) {
  std::uint64_t state = 12345;
  for (int trial = 0; trial < 200; ++trial) {
    RoundFence fence;
    RoundStamp best{0, 0};
    bool any = false;
    for (int i = 0; i < 50; ++i) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      const RoundStamp s{(state >> 33) % 5, (state >> 45) % 8};
      const V v = fence.observe("j", s);
      if (any && is_older(s, best)) {
        EXPECT_EQ(v, V::kStale);
      } else {
        EXPECT_NE(v, V::kStale);
        best = s;
        any = true;
      }
      EXPECT_EQ(fence.highest("j"), best);
    }
  }
}

}  // namespace
}  // namespace elastic::rendezvous
