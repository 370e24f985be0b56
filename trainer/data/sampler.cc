// Portable shuffling for ElasticSampler: every host must compute the same permutation, so the
// generator, the bounded draw and the shuffle are written out here rather than taken from
// <random>/<algorithm>, whose distributions and shuffle differ between standard libraries.
#include "trainer/data/sampler.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "daemon/core/rng.h"

namespace elastic::data {
namespace {

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "elastic: sampler: fatal: %s\n", message.c_str());
  std::abort();
}

// The stream of (seed, epoch): splitmix64 of the seed, mixed with the epoch, seeds xoshiro256**.
Rng epoch_generator(std::uint64_t seed, std::uint64_t epoch) {
  std::uint64_t mix = seed;
  return Rng(splitmix64(mix) ^ (epoch * 0xd1342543de82ef95ULL));
}

void check_step_arguments(std::int64_t dataset_size, SamplerPosition at, int world,
                          std::int64_t per_rank_batch) {
  if (world < 1) die("world size must be >= 1, got " + std::to_string(world) + ".");
  if (per_rank_batch < 1) {
    die("per-rank batch must be >= 1, got " + std::to_string(per_rank_batch) + ".");
  }
  if (at.epoch < 0) die("epoch must be >= 0, got " + std::to_string(at.epoch) + ".");
  if (at.position < 0 || at.position >= dataset_size) {
    die("position must be in [0, " + std::to_string(dataset_size) + "), got " +
        std::to_string(at.position) + ".");
  }
}

}  // namespace

ElasticSampler::ElasticSampler(std::int64_t dataset_size, std::uint64_t seed)
    : dataset_size_(dataset_size), seed_(seed) {
  if (dataset_size_ < 1) {
    die("dataset size must be >= 1, got " + std::to_string(dataset_size_) + ".");
  }
}

std::int64_t ElasticSampler::global_batch(SamplerPosition at, int world,
                                          std::int64_t per_rank_batch) const {
  check_step_arguments(dataset_size_, at, world, per_rank_batch);
  const std::int64_t remaining = dataset_size_ - at.position;
  // world * per_rank_batch could overflow only for absurd batches; compare by division.
  if (per_rank_batch >= remaining / world + 1) return remaining;
  return std::min(remaining, static_cast<std::int64_t>(world) * per_rank_batch);
}

std::vector<std::int64_t> ElasticSampler::indices(SamplerPosition at, int world, int rank,
                                                  std::int64_t per_rank_batch) {
  const std::int64_t global = global_batch(at, world, per_rank_batch);
  if (rank < 0 || rank >= world) {
    die("rank must be in [0, " + std::to_string(world) + "), got " + std::to_string(rank) + ".");
  }
  const std::int64_t base = global / world;
  const std::int64_t extra = global % world;  // the first `extra` ranks get one more
  const std::int64_t begin = at.position + rank * base + std::min<std::int64_t>(rank, extra);
  const std::int64_t count = base + (rank < extra ? 1 : 0);
  const std::vector<std::int64_t>& order = permutation(at.epoch);
  return std::vector<std::int64_t>(order.begin() + begin, order.begin() + begin + count);
}

SamplerPosition ElasticSampler::advance(SamplerPosition at, int world,
                                        std::int64_t per_rank_batch) const {
  const std::int64_t next = at.position + global_batch(at, world, per_rank_batch);
  if (next == dataset_size_) return SamplerPosition{at.epoch + 1, 0};
  return SamplerPosition{at.epoch, next};
}

const std::vector<std::int64_t>& ElasticSampler::permutation(std::int64_t epoch) {
  if (epoch < 0) die("epoch must be >= 0, got " + std::to_string(epoch) + ".");
  if (epoch == cached_epoch_) return cached_permutation_;
  std::vector<std::int64_t> order(static_cast<std::size_t>(dataset_size_));
  for (std::int64_t i = 0; i < dataset_size_; ++i) order[static_cast<std::size_t>(i)] = i;
  Rng rng = epoch_generator(seed_, static_cast<std::uint64_t>(epoch));
  for (std::size_t i = order.size() - 1; i > 0; --i) {
    const auto j = static_cast<std::size_t>(rng.below(i + 1));
    std::swap(order[i], order[j]);
  }
  cached_permutation_ = std::move(order);
  cached_epoch_ = epoch;
  return cached_permutation_;
}

}  // namespace elastic::data
