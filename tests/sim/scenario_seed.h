// Seeds for simulator scenarios (gtest only).
//
// Every scenario test runs once per seed from scenario_seeds(): its fixed defaults, or only the
// seed in ELASTIC_SIM_SEED when that is set, so a failing run reproduces exactly. A SeedReport
// prints "SIM FAILED seed=<n> (rerun: ELASTIC_SIM_SEED=<n> ctest -R <test>)" if the test has
// failed by the time it goes out of scope. Thread safety: test thread only.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace elastic::sim {

// The seed in ELASTIC_SIM_SEED, if set.
inline std::optional<std::uint64_t> env_seed() {
  if (const char* env = std::getenv("ELASTIC_SIM_SEED"); env != nullptr && *env != '\0') {
    return std::strtoull(env, nullptr, 10);
  }
  return std::nullopt;
}

inline std::vector<std::uint64_t> scenario_seeds(std::initializer_list<std::uint64_t> defaults) {
  if (const auto seed = env_seed()) return {*seed};
  return defaults;
}

// `count` seeds from `first` on, for scenarios run over many seeds (or ELASTIC_SIM_SEED's).
inline std::vector<std::uint64_t> scenario_seed_range(std::uint64_t first, std::size_t count) {
  if (const auto seed = env_seed()) return {*seed};
  std::vector<std::uint64_t> seeds;
  for (std::size_t i = 0; i < count; ++i) seeds.push_back(first + i);
  return seeds;
}

// The ctest name of the running test: binary prefix "sim." + suite + "." + name.
inline std::string current_ctest_name() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  if (info == nullptr) return "sim";
  return std::string("sim.") + info->test_suite_name() + "." + info->name();
}

class SeedReport {
 public:
  explicit SeedReport(std::uint64_t seed)
      : seed_(seed), failed_before_(::testing::Test::HasFailure()) {}
  ~SeedReport() {
    if (::testing::Test::HasFailure() && !failed_before_) {
      std::fprintf(stderr, "SIM FAILED seed=%llu (rerun: ELASTIC_SIM_SEED=%llu ctest -R '%s$')\n",
                   static_cast<unsigned long long>(seed_), static_cast<unsigned long long>(seed_),
                   current_ctest_name().c_str());
    }
  }
  SeedReport(const SeedReport&) = delete;
  SeedReport& operator=(const SeedReport&) = delete;

 private:
  std::uint64_t seed_;
  bool failed_before_;
};

}  // namespace elastic::sim
