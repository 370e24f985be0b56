// ElasticSampler: which samples each rank trains on, as a pure function of
// (epoch, global position, world size, rank), so that training can continue after a change of
// world size from the same global position: within an epoch no sample is repeated or skipped.
//
// Each epoch has its own permutation of [0, dataset_size), derived from (seed, epoch) with a
// portable PRNG (identical on every host and compiler). A global step at position `p` of an
// epoch covers permutation entries [p, p + G), G = min(world * per_rank_batch, size - p). They
// are split into `world` contiguous slices, rank order; when G is not a multiple of world the
// first G % world ranks get one sample more (a rank may get none at the very end of an epoch).
// The epoch ends when p reaches dataset_size; the next position is (epoch + 1, 0).
//
// Errors: every argument is computed by the caller, so a bad one is a programming error and
// aborts with a message on stderr (STYLE.md rule 6): dataset_size < 1, world < 1, rank outside
// [0, world), per_rank_batch < 1, a negative epoch, or a position outside [0, dataset_size).
//
// The permutation: a xoshiro256** generator seeded through splitmix64 from (seed, epoch) drives
// a Fisher-Yates shuffle with unbiased bounded draws (rejection sampling); all of it is our own
// integer arithmetic, so no standard library's distribution or shuffle can change it. Memory:
// one int64 per sample for the cached epoch.
//
// Thread safety: const methods are safe to call concurrently; permutation() caches one epoch.
#pragma once

#include <cstdint>
#include <vector>

namespace elastic::data {

struct SamplerPosition {
  std::int64_t epoch = 0;
  std::int64_t position = 0;  // samples of this epoch already consumed by all ranks together
  bool operator==(const SamplerPosition&) const = default;
};

class ElasticSampler {
 public:
  ElasticSampler(std::int64_t dataset_size, std::uint64_t seed);

  std::int64_t dataset_size() const { return dataset_size_; }
  // Samples in the global step that starts at `at`.
  std::int64_t global_batch(SamplerPosition at, int world, std::int64_t per_rank_batch) const;
  // Dataset indices rank `rank` of `world` trains on in the global step that starts at `at`.
  std::vector<std::int64_t> indices(SamplerPosition at, int world, int rank,
                                    std::int64_t per_rank_batch);
  // The position after that step (rolls over to the next epoch at its end).
  SamplerPosition advance(SamplerPosition at, int world, std::int64_t per_rank_batch) const;
  // The whole permutation of `epoch`.
  const std::vector<std::int64_t>& permutation(std::int64_t epoch);

 private:
  std::int64_t dataset_size_;
  std::uint64_t seed_;
  std::int64_t cached_epoch_ = -1;
  std::vector<std::int64_t> cached_permutation_;
};

}  // namespace elastic::data
