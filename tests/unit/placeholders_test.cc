// Placeholders (daemon/rendezvous/placeholders.h): {job_id}, {checkpoint_dir} and {round}
// expanded, doubled braces halved, every other brace an error naming it; a job's command and
// env as one worker gets them.
#include "daemon/rendezvous/placeholders.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/support/result_assertions.h"

namespace elastic::rendezvous {
namespace {

const PlaceholderValues kValues{
    .job_id = "train-7", .checkpoint_dir = "/nfs/ck/train-7", .round = 3};

std::string expanded(const std::string& text) {
  Result<std::string> out = expand_placeholders(text, kValues);
  return out.ok() ? *out : "ERROR: " + out.error().message;
}

TEST(Placeholders, ExpandEveryKnownName) {
  EXPECT_EQ(expanded("{checkpoint_dir}/mine"), "/nfs/ck/train-7/mine");
  EXPECT_EQ(expanded("{job_id}-r{round}"), "train-7-r3");
  EXPECT_EQ(expanded("{round}{round}"), "33");
  EXPECT_EQ(expanded("no braces"), "no braces");
  EXPECT_EQ(expanded(""), "");
}

TEST(Placeholders, DoubledBracesAreLiteral) {
  EXPECT_EQ(expanded("{{job_id}}"), "{job_id}");
  EXPECT_EQ(expanded("{{\"lr\": 0.1}}"), "{\"lr\": 0.1}");
  EXPECT_EQ(expanded("{{{job_id}}}"), "{train-7}");
  EXPECT_EQ(placeholder_problem("{{"), "");
}

TEST(Placeholders, EveryOtherBraceIsAnErrorNamingIt) {
  const std::string known =
      " (the placeholders are {job_id}, {checkpoint_dir} and {round}; write {{ and }} for "
      "literal braces)";
  EXPECT_EQ(placeholder_problem("{jobid}"), "uses {jobid}, which is not a placeholder" + known);
  EXPECT_EQ(placeholder_problem("a{}b"), "uses {}, which is not a placeholder" + known);
  EXPECT_EQ(placeholder_problem("x{job_id"), "has a { that is never closed" + known);
  EXPECT_EQ(placeholder_problem("x}"), "has a } that closes no placeholder" + known);
  EXPECT_EQ(placeholder_problem("{ROUND}"), "uses {ROUND}, which is not a placeholder" + known);
  // A hostile name is shown bounded and printable.
  EXPECT_EQ(placeholder_problem("{" + std::string(100, 'a') + "\n}"),
            "uses {" + std::string(64, 'a') + "...}, which is not a placeholder" + known);
  EXPECT_EQ(expanded("{nope}"), "ERROR: uses {nope}, which is not a placeholder" + known);
}

TEST(Placeholders, CheckpointDirNeedsACheckpointRoot) {
  PlaceholderValues values = kValues;
  values.checkpoint_dir.reset();
  Result<std::string> out = expand_placeholders("{checkpoint_dir}", values);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().message,
            "uses {checkpoint_dir}, but neither the job's checkpoint_root nor this node's "
            "checkpoint.root is set");
  EXPECT_EQ(*expand_placeholders("{job_id}", values), "train-7");
}

TEST(Placeholders, AJobsTextLeavesTheProgramAndNamesWhereItFailed) {
  JobSpec spec;
  spec.command = {"/opt/{x}/python3", "train.py", "--save={checkpoint_dir}", "--run={job_id}"};
  spec.env = {{"TAG", "r{round}"}, {"PLAIN", "v"}};
  Result<JobText> text = expand_job_text(spec, kValues);
  ASSERT_OK(text);
  EXPECT_EQ(text->command, (std::vector<std::string>{"/opt/{x}/python3", "train.py",
                                                     "--save=/nfs/ck/train-7", "--run=train-7"}));
  EXPECT_EQ(text->env, (std::map<std::string, std::string>{{"PLAIN", "v"}, {"TAG", "r3"}}));

  PlaceholderValues no_root = kValues;
  no_root.checkpoint_dir.reset();
  text = expand_job_text(spec, no_root);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.error().message,
            "argument 2 uses {checkpoint_dir}, but neither the job's checkpoint_root nor this "
            "node's checkpoint.root is set");
  spec.command.resize(2);
  spec.env["CKPT"] = "{checkpoint_dir}";
  text = expand_job_text(spec, no_root);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.error().message,
            "the value of CKPT uses {checkpoint_dir}, but neither the job's checkpoint_root nor "
            "this node's checkpoint.root is set");
}

}  // namespace
}  // namespace elastic::rendezvous
