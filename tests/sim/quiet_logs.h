// A test binary that includes this logs only warnings and errors (its many simulated daemons
// log every round), unless ELASTIC_SIM_LOG names a level (ELASTIC_SIM_LOG=info with
// ELASTIC_SIM_SEED to follow one run). Registered once per binary (an inline variable).
#pragma once

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <cstdlib>

namespace elastic::sim {

class QuietLogs : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* level = std::getenv("ELASTIC_SIM_LOG");
    spdlog::set_level(level != nullptr ? spdlog::level::from_str(level) : spdlog::level::warn);
  }
};
inline const auto* const kQuietLogs = ::testing::AddGlobalTestEnvironment(new QuietLogs);

}  // namespace elastic::sim
