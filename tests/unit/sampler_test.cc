// ElasticSampler: per-epoch permutations, the split of a global step among ranks, and the
// property that matters: however the world size changes, every epoch sees every sample once.
#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "trainer/data/sampler.h"

namespace elastic::data {
namespace {

bool is_permutation_of_range(const std::vector<std::int64_t>& order, std::int64_t size) {
  if (static_cast<std::int64_t>(order.size()) != size) return false;
  std::vector<bool> seen(static_cast<std::size_t>(size), false);
  for (std::int64_t index : order) {
    if (index < 0 || index >= size || seen[static_cast<std::size_t>(index)]) return false;
    seen[static_cast<std::size_t>(index)] = true;
  }
  return true;
}

// Checks one global step as every rank sees it (each rank with its own sampler, as in training)
// and returns the indices of all ranks, rank order.
std::vector<std::int64_t> check_step(std::int64_t dataset_size, std::uint64_t seed,
                                     SamplerPosition at, int world, std::int64_t batch) {
  ElasticSampler reference(dataset_size, seed);
  const std::int64_t global = reference.global_batch(at, world, batch);
  EXPECT_EQ(global, std::min<std::int64_t>(world * batch, dataset_size - at.position));
  std::vector<std::int64_t> all;
  std::size_t previous_size = SIZE_MAX;
  for (int rank = 0; rank < world; ++rank) {
    ElasticSampler sampler(dataset_size, seed);
    const std::vector<std::int64_t> mine = sampler.indices(at, world, rank, batch);
    EXPECT_LE(static_cast<std::int64_t>(mine.size()), batch);
    // Balanced, the larger slices first.
    EXPECT_LE(mine.size(), previous_size);
    if (previous_size != SIZE_MAX) {
      EXPECT_LE(previous_size - mine.size(), 1u);
    }
    previous_size = mine.size();
    all.insert(all.end(), mine.begin(), mine.end());
  }
  const std::vector<std::int64_t>& order = reference.permutation(at.epoch);
  EXPECT_EQ(all, std::vector<std::int64_t>(order.begin() + at.position,
                                           order.begin() + at.position + global));
  const SamplerPosition next = reference.advance(at, world, batch);
  if (at.position + global == dataset_size) {
    EXPECT_EQ(next, (SamplerPosition{at.epoch + 1, 0}));
  } else {
    EXPECT_EQ(next, (SamplerPosition{at.epoch, at.position + global}));
  }
  return all;
}

// Trains `epochs` epochs with the world size `world_at` picks before each step; checks that each
// epoch covers every sample exactly once.
template <typename WorldAt>
void train(std::int64_t dataset_size, std::uint64_t seed, std::int64_t batch, int epochs,
           WorldAt world_at) {
  ElasticSampler sampler(dataset_size, seed);
  SamplerPosition at;
  std::int64_t step = 0;
  while (at.epoch < epochs) {
    SCOPED_TRACE("epoch " + std::to_string(at.epoch) + " position " + std::to_string(at.position));
    std::vector<int> seen(static_cast<std::size_t>(dataset_size), 0);
    const std::int64_t epoch = at.epoch;
    while (at.epoch == epoch) {
      const int world = world_at(step, at);
      for (std::int64_t index : check_step(dataset_size, seed, at, world, batch)) {
        ++seen[static_cast<std::size_t>(index)];
      }
      at = sampler.advance(at, world, batch);
      ++step;
      if (::testing::Test::HasFailure()) return;
    }
    EXPECT_EQ(at, (SamplerPosition{epoch + 1, 0}));
    for (std::int64_t index = 0; index < dataset_size; ++index) {
      ASSERT_EQ(seen[static_cast<std::size_t>(index)], 1)
          << "sample " << index << " in epoch " << epoch;
    }
  }
}

TEST(SamplerTest, PermutationIsAPermutation) {
  for (std::int64_t size : {1, 2, 3, 17, 1003, 65536}) {
    ElasticSampler sampler(size, 7);
    for (std::int64_t epoch : {0, 1, 99}) {
      EXPECT_TRUE(is_permutation_of_range(sampler.permutation(epoch), size))
          << "size " << size << " epoch " << epoch;
    }
  }
}

TEST(SamplerTest, PermutationIsDeterministicPerSeedAndEpoch) {
  ElasticSampler a(1003, 42);
  ElasticSampler b(1003, 42);
  const std::vector<std::int64_t> epoch0 = a.permutation(0);
  const std::vector<std::int64_t> epoch1 = a.permutation(1);
  EXPECT_EQ(b.permutation(1), epoch1);
  EXPECT_EQ(b.permutation(0), epoch0);  // the cache switches back and forth
  EXPECT_EQ(a.permutation(0), epoch0);
  EXPECT_NE(epoch0, epoch1);
  ElasticSampler other_seed(1003, 43);
  EXPECT_NE(other_seed.permutation(0), epoch0);
  // Not the identity.
  std::vector<std::int64_t> identity(1003);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(epoch0, identity);
}

// Pins the exact permutation: it must never change between hosts, compilers or versions, or a
// resumed job would train on different samples than its checkpoint assumed.
TEST(SamplerTest, PermutationIsPinned) {
  ElasticSampler sampler(16, 42);
  EXPECT_EQ(sampler.permutation(0),
            (std::vector<std::int64_t>{7, 6, 3, 4, 12, 9, 5, 13, 10, 0, 15, 2, 1, 14, 8, 11}));
  EXPECT_EQ(sampler.permutation(1),
            (std::vector<std::int64_t>{5, 9, 4, 7, 12, 2, 14, 1, 3, 0, 8, 11, 15, 6, 10, 13}));
}

TEST(SamplerTest, ShuffleIsRoughlyUniform) {
  // All 6 orders of 3 samples, over 6000 epochs: about 1000 each (sd ~ 29).
  ElasticSampler three(3, 1);
  std::map<std::vector<std::int64_t>, int> orders;
  for (std::int64_t epoch = 0; epoch < 6000; ++epoch) ++orders[three.permutation(epoch)];
  EXPECT_EQ(orders.size(), 6u);
  for (const auto& [order, count] : orders) {
    EXPECT_GT(count, 850);
    EXPECT_LT(count, 1150);
  }
  // Where sample 0 lands among 10 positions, over 10000 epochs: about 1000 each.
  ElasticSampler ten(10, 2);
  std::vector<int> where(10, 0);
  for (std::int64_t epoch = 0; epoch < 10000; ++epoch) {
    const std::vector<std::int64_t>& order = ten.permutation(epoch);
    ++where[static_cast<std::size_t>(std::find(order.begin(), order.end(), 0) - order.begin())];
  }
  for (int count : where) {
    EXPECT_GT(count, 850);
    EXPECT_LT(count, 1150);
  }
}

TEST(SamplerTest, SplitGivesContiguousSlicesInRankOrder) {
  ElasticSampler sampler(100, 5);
  const std::vector<std::int64_t>& order = sampler.permutation(0);
  const std::vector<std::int64_t> expected0(order.begin() + 20, order.begin() + 24);
  const std::vector<std::int64_t> expected2(order.begin() + 28, order.begin() + 32);
  EXPECT_EQ(sampler.indices({0, 20}, 3, 0, 4), expected0);
  EXPECT_EQ(sampler.indices({0, 20}, 3, 2, 4), expected2);
  EXPECT_EQ(sampler.global_batch({0, 20}, 3, 4), 12);
  EXPECT_EQ(sampler.advance({0, 20}, 3, 4), (SamplerPosition{0, 32}));
}

TEST(SamplerTest, LastPartialStepGivesTheRemainderToTheFirstRanks) {
  // 1003 = 15 * 64 + 43: the last step of world 4 has 43 samples: 11, 11, 11, 10.
  ElasticSampler sampler(1003, 3);
  const SamplerPosition last{0, 960};
  EXPECT_EQ(sampler.global_batch(last, 4, 16), 43);
  const std::vector<std::size_t> sizes = {
      sampler.indices(last, 4, 0, 16).size(), sampler.indices(last, 4, 1, 16).size(),
      sampler.indices(last, 4, 2, 16).size(), sampler.indices(last, 4, 3, 16).size()};
  EXPECT_EQ(sizes, (std::vector<std::size_t>{11, 11, 11, 10}));
  EXPECT_EQ(sampler.advance(last, 4, 16), (SamplerPosition{1, 0}));
  check_step(1003, 3, last, 4, 16);
}

TEST(SamplerTest, DatasetSmallerThanOneGlobalBatch) {
  ElasticSampler sampler(5, 9);
  EXPECT_EQ(sampler.global_batch({0, 0}, 4, 16), 5);
  EXPECT_EQ(sampler.indices({0, 0}, 4, 0, 16).size(), 2u);
  EXPECT_EQ(sampler.indices({0, 0}, 4, 3, 16).size(), 1u);
  EXPECT_EQ(sampler.advance({0, 0}, 4, 16), (SamplerPosition{1, 0}));
  check_step(5, 9, {0, 0}, 4, 16);
  train(5, 9, 16, 4, [](std::int64_t, SamplerPosition) { return 4; });
}

TEST(SamplerTest, WorldLargerThanRemainingLeavesSomeRanksEmpty) {
  ElasticSampler sampler(10, 11);
  EXPECT_EQ(sampler.advance({0, 0}, 4, 2), (SamplerPosition{0, 8}));
  const SamplerPosition tail{0, 8};
  EXPECT_EQ(sampler.global_batch(tail, 4, 2), 2);
  EXPECT_EQ(sampler.indices(tail, 4, 0, 2).size(), 1u);
  EXPECT_EQ(sampler.indices(tail, 4, 1, 2).size(), 1u);
  EXPECT_TRUE(sampler.indices(tail, 4, 2, 2).empty());
  EXPECT_TRUE(sampler.indices(tail, 4, 3, 2).empty());
  EXPECT_EQ(sampler.advance(tail, 4, 2), (SamplerPosition{1, 0}));
  check_step(10, 11, tail, 4, 2);

  ElasticSampler one(1, 0);
  EXPECT_EQ(one.indices({3, 0}, 3, 0, 8), std::vector<std::int64_t>{0});
  EXPECT_TRUE(one.indices({3, 0}, 3, 2, 8).empty());
  EXPECT_EQ(one.advance({3, 0}, 3, 8), (SamplerPosition{4, 0}));
}

TEST(SamplerTest, HugeBatchDoesNotOverflow) {
  ElasticSampler sampler(1003, 1);
  EXPECT_EQ(sampler.global_batch({0, 3}, 1 << 30, INT64_MAX / 2), 1000);
  EXPECT_EQ(sampler.advance({0, 3}, 1 << 30, INT64_MAX / 2), (SamplerPosition{1, 0}));
}

// THE property: 1003 samples, 16 per rank, the world going 4 -> 3 -> 5 and back at awkward
// moments: mid-epoch, exactly at an epoch boundary, and right before the last partial step.
TEST(SamplerTest, ElasticTrainingSeesEverySampleOncePerEpoch) {
  constexpr std::int64_t kSize = 1003;
  constexpr std::int64_t kBatch = 16;
  bool changed_mid_epoch = false;
  bool changed_at_boundary = false;
  bool changed_before_partial_step = false;
  int previous_world = 0;
  auto world_at = [&](std::int64_t, SamplerPosition at) {
    const std::int64_t remaining = kSize - at.position;
    int world = 4;
    switch (at.epoch) {
      case 0:  // 4 until 320, then 3; the partial last step (11 samples) runs with 5
        world = at.position < 320 ? 4 : 3;
        if (remaining < 3 * kBatch) world = 5;
        break;
      case 1:  // starts with 3 (a change at the boundary), 5 from 500 on
        world = at.position < 500 ? 3 : 5;
        break;
      default:  // 5, 4 from 100 on, 3 for the last partial step
        world = at.position < 100 ? 5 : 4;
        if (remaining < 4 * kBatch) world = 3;
        break;
    }
    if (previous_world != 0 && world != previous_world) {
      if (at.position == 0) {
        changed_at_boundary = true;
      } else if (remaining < world * kBatch || remaining < previous_world * kBatch) {
        changed_before_partial_step = true;
      } else {
        changed_mid_epoch = true;
      }
    }
    previous_world = world;
    return world;
  };
  train(kSize, 2024, kBatch, 3, world_at);
  EXPECT_TRUE(changed_mid_epoch);
  EXPECT_TRUE(changed_at_boundary);
  EXPECT_TRUE(changed_before_partial_step);
}

// The same property over many random datasets, batches and world sequences (fixed seed).
TEST(SamplerTest, RandomWorldSequencesSeeEverySampleOncePerEpoch) {
  std::mt19937_64 rng(20240601);  // the engine is exactly specified; we avoid distributions
  for (int trial = 0; trial < 300; ++trial) {
    const auto size = static_cast<std::int64_t>(1 + rng() % 700);
    const auto batch = static_cast<std::int64_t>(1 + rng() % 40);
    const std::uint64_t seed = rng();
    int world = static_cast<int>(1 + rng() % 8);
    SCOPED_TRACE("trial " + std::to_string(trial) + ": size " + std::to_string(size) + ", batch " +
                 std::to_string(batch));
    train(size, seed, batch, 3, [&](std::int64_t, SamplerPosition) {
      if (rng() % 4 == 0) world = static_cast<int>(1 + rng() % 9);
      return world;
    });
    if (HasFailure()) return;
  }
}

TEST(SamplerDeathTest, InvalidArgumentsAbortLoudly) {
  ElasticSampler sampler(10, 1);
  EXPECT_DEATH(ElasticSampler(0, 1), "dataset size must be >= 1, got 0");
  EXPECT_DEATH((void)sampler.indices({0, 0}, 0, 0, 4), "world size must be >= 1, got 0");
  EXPECT_DEATH((void)sampler.indices({0, 0}, 4, 4, 4), "rank must be in \\[0, 4\\), got 4");
  EXPECT_DEATH((void)sampler.indices({0, 0}, 4, -1, 4), "rank must be in \\[0, 4\\), got -1");
  EXPECT_DEATH((void)sampler.indices({0, 0}, 4, 0, 0), "per-rank batch must be >= 1, got 0");
  EXPECT_DEATH((void)sampler.global_batch({0, 0}, -2, 4), "world size must be >= 1");
  EXPECT_DEATH((void)sampler.advance({0, 0}, 4, -1), "per-rank batch must be >= 1");
  EXPECT_DEATH((void)sampler.advance({0, 10}, 4, 1), "position must be in \\[0, 10\\), got 10");
  EXPECT_DEATH((void)sampler.indices({0, -1}, 4, 0, 1), "position must be in");
  EXPECT_DEATH((void)sampler.permutation(-1), "epoch must be >= 0, got -1");
  EXPECT_DEATH((void)sampler.indices({-1, 0}, 4, 0, 1), "epoch must be >= 0");
}

}  // namespace
}  // namespace elastic::data
