// The step agreement and state-transfer decisions after a round change (trainer/live_state.h),
// table-driven, and the round file a FileRoundSource reads.
#include "trainer/live_state.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/temp_dir.h"
#include "trainer/round_source.h"

namespace elastic::trainer {
namespace {

// Shorthands for one rank's facts.
RankFacts at(std::int64_t step, std::int64_t round, std::int64_t rollback = -1) {
  return RankFacts{true, step, round, rollback};
}
RankFacts joiner() { return RankFacts{}; }

struct PlanCase {
  const char* name;
  std::vector<RankFacts> facts;
  std::int64_t step;
  int source;
  std::vector<int> receivers;
  std::vector<int> rollbacks;
};

TEST(LiveState, PlansFollowTheRule) {
  const std::vector<PlanCase> cases = {
      {"shrink after a crash between steps: both survivors agree, nothing moves",
       {at(10, 1), at(10, 1)},
       10,
       0,
       {},
       {}},
      {"shrink after a crash mid-step: the collective completed on rank 1 only, which receives",
       {at(10, 1), at(11, 1)},
       10,
       0,
       {1},
       {}},
      {"the rank ahead is rank 0: the source is the lowest rank at the agreed step",
       {at(11, 1), at(10, 1), at(10, 1)},
       10,
       1,
       {0},
       {}},
      {"a rank ahead with a rollback copy of the agreed step restores it",
       {at(11, 1, 10), at(10, 1)},
       10,
       1,
       {},
       {0}},
      {"a rollback copy of another step is no use: receive",
       {at(12, 1, 11), at(10, 1)},
       10,
       1,
       {0},
       {}},
      {"no rollback copy anywhere: every rank ahead receives",
       {at(7, 2), at(8, 2), at(8, 2)},
       7,
       0,
       {1, 2},
       {}},
      {"grow with joiners: the survivors' state goes to the new ranks",
       {at(20, 3), at(20, 3), joiner(), joiner()},
       20,
       0,
       {2, 3},
       {}},
      {"a joiner at rank 0 (a crashed rank's replacement): the source is the first survivor",
       {joiner(), at(5, 1), at(5, 1)},
       5,
       1,
       {0},
       {}},
      {"ranks at different steps and a joiner: the slowest survivor decides",
       {at(30, 4), joiner(), at(29, 4), at(31, 4, 29)},
       29,
       2,
       {0, 1},
       {3}},
      {"a rank that missed a round (older state) is not a survivor and receives, even if ahead",
       {at(50, 2), at(40, 3), at(40, 3)},
       40,
       1,
       {0},
       {}},
      {"one survivor and a replacement", {at(0, 0), joiner()}, 0, 0, {1}, {}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto plan = plan_state_transfer(c.facts);
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    EXPECT_EQ(plan->step, c.step);
    EXPECT_EQ(plan->source, c.source);
    EXPECT_EQ(plan->receivers, c.receivers);
    EXPECT_EQ(plan->rollbacks, c.rollbacks);
  }
}

TEST(LiveState, TheRoundOfThePlanIsTheSurvivorsRound) {
  auto plan = plan_state_transfer({at(50, 2), at(40, 3), joiner()});
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(plan->round, 3);
}

struct ErrorCase {
  const char* name;
  std::vector<RankFacts> facts;
  const char* says;
};

TEST(LiveState, NoUsableStateIsAnErrorThatSaysWhy) {
  const std::vector<ErrorCase> cases = {
      {"everyone a joiner: start from the checkpoint",
       {joiner(), joiner(), joiner()},
       "none of the 3 ranks holds live state"},
      {"an empty group", {}, "no ranks"},
      {"state at a negative step",
       {RankFacts{true, -1, 1, -1}, joiner()},
       "rank 0 holds state but reports step -1"},
      {"state of a negative round",
       {at(3, 1), RankFacts{true, 3, -1, -1}},
       "rank 1 holds state but reports round -1"},
      {"a rollback copy ahead of the state",
       {at(3, 1, 4)},
       "rank 0 reports a rollback copy of step 4, ahead of its state at step 3"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto plan = plan_state_transfer(c.facts);
    ASSERT_FALSE(plan.ok());
    EXPECT_NE(plan.error().message.find(c.says), std::string::npos) << plan.error().message;
  }
}

TEST(LiveState, FactsRoundTripThroughTheGatheredWords) {
  const std::vector<RankFacts> facts = {at(12, 3, 11), joiner(), at(0, 0)};
  std::vector<std::int64_t> words;
  for (const auto& f : facts) {
    auto w = encode_facts(f);
    ASSERT_EQ(w.size(), static_cast<std::size_t>(kFactWords));
    words.insert(words.end(), w.begin(), w.end());
  }
  auto decoded = decode_facts(words, 3);
  ASSERT_TRUE(decoded.ok()) << decoded.error().message;
  EXPECT_EQ(*decoded, facts);
}

TEST(LiveState, HostileWordsAreOneClearError) {
  struct HostileCase {
    std::vector<std::int64_t> words;
    int world;
    const char* says;
  };
  const std::vector<HostileCase> cases = {
      {{1, 2, 3}, 1, "hold 3 words, not 4"},
      {{1, 2, 3, 4, 5}, 1, "hold 5 words, not 4"},
      {{2, 5, 1, -1}, 1, "rank 0 reports has_state=2"},
      {{0, -1, -1, -1, 1, -7, 1, -1}, 2, "rank 1 reports step -7"},
      {{1, 5, 1, 9}, 1, "rollback copy of step 9"},
      {{1, 5, INT64_MIN, -1}, 1, "rank 0 reports round"},
      {{}, 0, "facts of 0 ranks"},
  };
  for (const auto& [words, world, says] : cases) {
    auto decoded = decode_facts(words, world);
    ASSERT_FALSE(decoded.ok()) << says;
    EXPECT_NE(decoded.error().message.find(says), std::string::npos) << decoded.error().message;
  }
}

TEST(RoundFile, AnnouncesTheNextRoundOverTheBaseEnvironment) {
  const EnvMap base = {{"ELASTIC_JOB_ID", "j"},
                       {"RANK", "2"},
                       {"WORLD_SIZE", "3"},
                       {"MASTER_PORT", "1000"},
                       {"ELASTIC_ROUND", "1"}};
  auto env = FileRoundSource::parse(
      "# round 2: rank 2 left\nRANK=1\nWORLD_SIZE=2\r\n\nMASTER_PORT=2000\nELASTIC_ROUND=2\n",
      base);
  ASSERT_TRUE(env.ok()) << env.error().message;
  EXPECT_EQ(env->rank, 1);
  EXPECT_EQ(env->world_size, 2);
  EXPECT_EQ(env->master_port, 2000);
  EXPECT_EQ(env->round, 2);
  EXPECT_EQ(env->job_id, "j");
}

TEST(RoundFile, BadFilesAreOneClearError) {
  const EnvMap base = {{"ELASTIC_ROUND", "1"}};
  const std::vector<std::pair<std::string, const char*>> cases = {
      {"RANK=0\nWORLD_SIZE=1\n", "names no ELASTIC_ROUND"},
      {"ELASTIC_ROUND=2\nnonsense\n", "line 2 of the round file is not KEY=VALUE"},
      {"=3\n", "line 1"},
      {"ELASTIC_ROUND=2\nRANK=4\nWORLD_SIZE=2\nMASTER_PORT=5\n", "RANK=4 must be smaller"},
      {"ELASTIC_ROUND=x\n", "ELASTIC_ROUND=\"x\" is not an integer"},
      {std::string(FileRoundSource::kMaxFileBytes + 1, '#'), "more than"},
  };
  for (const auto& [text, says] : cases) {
    auto env = FileRoundSource::parse(text, base);
    ASSERT_FALSE(env.ok()) << says;
    EXPECT_NE(env.error().message.find(says), std::string::npos) << env.error().message;
  }
}

TEST(RoundFile, PollSeesOnlyNewerRoundsAndRereadsAReplacedFile) {
  testing::TempDir dir;
  const std::string path = dir / "round";
  FileRoundSource source(path, {});
  EXPECT_FALSE(source.poll(1).has_value()) << "no file yet";
  dir.write("round.tmp", "ELASTIC_ROUND=1\n");
  std::rename((dir / "round.tmp").c_str(), path.c_str());
  EXPECT_FALSE(source.poll(1).has_value()) << "round 1 is not newer than round 1";
  dir.write("round.tmp", "ELASTIC_ROUND=3\nRANK=0\n");
  std::rename((dir / "round.tmp").c_str(), path.c_str());
  auto next = source.poll(1);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->round, 3);
  EXPECT_FALSE(source.poll(3).has_value());
  dir.write("round.tmp", "ELASTIC_ROUND=oops\n");
  std::rename((dir / "round.tmp").c_str(), path.c_str());
  EXPECT_FALSE(source.poll(1).has_value()) << "a bad file announces nothing";
  // wait() returns at once when the round is there and at its deadline when it is not.
  dir.write("round.tmp", "ELASTIC_ROUND=4\n");
  std::rename((dir / "round.tmp").c_str(), path.c_str());
  auto now = std::chrono::steady_clock::now();
  ASSERT_TRUE(source.wait(3, now).has_value());
  EXPECT_FALSE(source.wait(4, now).has_value());
}

}  // namespace
}  // namespace elastic::trainer
