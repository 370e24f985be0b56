#include "trainer/worker_env.h"

#include <ostream>

#include <gtest/gtest.h>

namespace elastic::trainer {
namespace {

TEST(WorkerEnv, EmptyEnvironmentIsAWorldOfOne) {
  auto env = parse_worker_env({});
  ASSERT_TRUE(env.ok()) << env.error().message;
  EXPECT_EQ(env->rank, 0);
  EXPECT_EQ(env->world_size, 1);
  EXPECT_EQ(env->master_addr, "127.0.0.1");
  EXPECT_EQ(env->master_port, 0);
  EXPECT_EQ(env->round, 0);
  EXPECT_TRUE(env->checkpoint_dir.empty());
}

TEST(WorkerEnv, ReadsTheTorchrunAndElasticVariables) {
  auto env = parse_worker_env({{"RANK", "3"},
                               {"LOCAL_RANK", "1"},
                               {"WORLD_SIZE", "4"},
                               {"LOCAL_WORLD_SIZE", "2"},
                               {"GROUP_RANK", "1"},
                               {"MASTER_ADDR", "10.1.0.7"},
                               {"MASTER_PORT", "29400"},
                               {"TORCHELASTIC_RESTART_COUNT", "2"},
                               {"TORCHELASTIC_RUN_ID", "job-7"},
                               {"ELASTIC_JOB_ID", "fmnist"},
                               {"ELASTIC_ROUND", "12"},
                               {"ELASTIC_CHECKPOINT_DIR", "/nfs/ckpt/fmnist"}});
  ASSERT_TRUE(env.ok()) << env.error().message;
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_world_size, 2);
  EXPECT_EQ(env->group_rank, 1);
  EXPECT_EQ(env->master_addr, "10.1.0.7");
  EXPECT_EQ(env->master_port, 29400);
  EXPECT_EQ(env->restart_count, 2);
  EXPECT_EQ(env->run_id, "job-7");
  EXPECT_EQ(env->job_id, "fmnist");
  EXPECT_EQ(env->round, 12);
  EXPECT_EQ(env->checkpoint_dir, "/nfs/ckpt/fmnist");
}

struct BadCase {
  EnvMap env;
  std::string message;
};

// gtest prints the parameter into ctest's test names: the expected message, not raw bytes.
void PrintTo(const BadCase& bad, std::ostream* out) { *out << bad.message; }

class WorkerEnvErrors : public ::testing::TestWithParam<BadCase> {};

TEST_P(WorkerEnvErrors, NameTheVariable) {
  auto env = parse_worker_env(GetParam().env);
  ASSERT_FALSE(env.ok());
  EXPECT_EQ(env.error().message, GetParam().message);
}

INSTANTIATE_TEST_SUITE_P(
    All, WorkerEnvErrors,
    ::testing::Values(
        BadCase{{{"RANK", "x"}}, "RANK=\"x\" is not an integer"},
        BadCase{{{"RANK", "1x"}}, "RANK=\"1x\" is not an integer"},
        BadCase{{{"RANK", ""}}, "RANK=\"\" is not an integer"},
        BadCase{{{"WORLD_SIZE", "0"}}, "WORLD_SIZE=0 is out of range (1 to 2147483647)"},
        BadCase{{{"RANK", "-1"}}, "RANK=-1 is out of range (0 to 2147483646)"},
        BadCase{{{"MASTER_PORT", "70000"}}, "MASTER_PORT=70000 is out of range (0 to 65535)"},
        BadCase{{{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}},
                "RANK=2 must be smaller than WORLD_SIZE=2"},
        BadCase{{{"LOCAL_RANK", "1"}}, "LOCAL_RANK=1 must be smaller than LOCAL_WORLD_SIZE=1"},
        BadCase{{{"LOCAL_WORLD_SIZE", "3"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}},
                "LOCAL_WORLD_SIZE=3 must not exceed WORLD_SIZE=2"},
        BadCase{{{"WORLD_SIZE", "2"}}, "MASTER_PORT must be set (1 to 65535) when WORLD_SIZE=2"},
        BadCase{{{"ELASTIC_ROUND", "-3"}},
                "ELASTIC_ROUND=-3 is out of range (0 to 9223372036854775807)"}));

}  // namespace
}  // namespace elastic::trainer
