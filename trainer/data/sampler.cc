// Portable shuffling for ElasticSampler: every host must compute the same permutation, so the
// generator, the bounded draw and the shuffle are written out here rather than taken from
// <random>/<algorithm>, whose distributions and shuffle differ between standard libraries.
#include "trainer/data/sampler.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

namespace elastic::data {
namespace {

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "elastic: sampler: fatal: %s\n", message.c_str());
  std::abort();
}

// splitmix64 (Steele, Lea, Flood 2014): turns any 64-bit value into a well-mixed one; used to
// seed, so that nearby (seed, epoch) pairs give unrelated streams.
std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// xoshiro256** (Blackman, Vigna 2018).
class Xoshiro256 {
 public:
  Xoshiro256(std::uint64_t seed, std::uint64_t stream) {
    std::uint64_t mix = seed;
    const std::uint64_t seed_hash = splitmix64(mix);
    std::uint64_t state = seed_hash ^ (stream * 0xd1342543de82ef95ULL);
    // splitmix64 outputs are never all zero together, the one state xoshiro must avoid.
    for (std::uint64_t& word : s_) word = splitmix64(state);
  }

  std::uint64_t next() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, bound), bound >= 1, without modulo bias: reject the lowest 2^64 % bound
  // values so the rest splits into whole copies of [0, bound).
  std::uint64_t below(std::uint64_t bound) {
    const std::uint64_t threshold = (0 - bound) % bound;  // == 2^64 % bound
    for (;;) {
      const std::uint64_t r = next();
      if (r >= threshold) return r % bound;
    }
  }

 private:
  std::uint64_t s_[4];
};

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
  Xoshiro256 rng(seed_, static_cast<std::uint64_t>(epoch));
  for (std::size_t i = order.size() - 1; i > 0; --i) {
    const auto j = static_cast<std::size_t>(rng.below(i + 1));
    std::swap(order[i], order[j]);
  }
  cached_permutation_ = std::move(order);
  cached_epoch_ = epoch;
  return cached_permutation_;
}

}  // namespace elastic::data
