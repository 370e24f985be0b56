// Rng: the injected source of randomness of the pure state machines (probe order, gossip
// targets, jitter). Deterministic for a seed on every platform (xoshiro256** seeded with
// splitmix64), so a simulator run reproduces exactly from its seed. Not thread safe.
#pragma once

#include <cstdint>

namespace elastic {

// splitmix64 (Steele, Lea, Flood 2014): advances `state` and returns a well-mixed value; used to
// seed generators, so nearby seeds give unrelated streams.
inline std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// xoshiro256** (Blackman, Vigna 2018).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) {
    for (auto& s : state_) s = splitmix64(seed);
  }

  std::uint64_t next() {
    const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const std::uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }

  // Uniform in [0, bound), without modulo bias; bound > 0.
  std::uint64_t below(std::uint64_t bound) {
    const std::uint64_t limit = -bound % bound;  // 2^64 mod bound
    while (true) {
      const std::uint64_t r = next();
      if (r >= limit) return r % bound;
    }
  }

  // Uniform in [0, 1).
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t state_[4];
};

}  // namespace elastic
