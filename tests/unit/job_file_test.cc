// Job files (ctl/job_file.h): a good file becomes an exact JSON spec; every class of bad input
// gets its exact "<file>:<line>: <key>: <problem>" message; flags override the file; relative
// paths resolve against the caller's cwd; the shipped examples/*.toml parse and validate;
// hostile bytes never throw.
#include "ctl/job_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "daemon/core/duration.h"
#include "tests/support/temp_dir.h"

namespace elastic::ctl {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const Caller kAlice{.user = "alice", .uid = 1000, .gid = 1000, .cwd = "/home/alice/run"};

// Flags with only what `set` sets (designated initializers would have to name every field).
template <typename Set>
JobOverrides flags(Set set) {
  JobOverrides f;
  set(f);
  return f;
}

// The problems of parsing `text` as "job.toml", one per line: the error when it is not TOML,
// else the file's own problems (empty when it has none).
std::string parse_error(const std::string& text) {
  auto file = parse_job_toml(text, "job.toml");
  if (!file) return file.error().message;
  std::string problems;
  for (const std::string& p : file->problems) problems += (problems.empty() ? "" : "\n") + p;
  return problems;
}

// The error of parsing and building `text` with `flags` (empty when both worked).
std::string build_error(const std::string& text, const JobOverrides& flags = {}) {
  auto file = parse_job_toml(text, "job.toml");
  if (!file) return file.error().message;
  auto spec = build_job_spec(&*file, flags, kAlice);
  return spec ? std::string() : spec.error().message;
}

rendezvous::JobSpec build(const std::string& text, const JobOverrides& flags = {}) {
  auto file = parse_job_toml(text, "job.toml");
  EXPECT_TRUE(file.ok()) << file.error().message;
  EXPECT_TRUE(file->problems.empty()) << parse_error(text);
  auto spec = build_job_spec(&*file, flags, kAlice);
  EXPECT_TRUE(spec.ok()) << spec.error().message;
  return spec.ok() ? *spec : rendezvous::JobSpec{};
}

TEST(JobFile, GoodFileGivesTheExactSpec) {
  const std::string text = R"(# a comment
name = "fmnist"
command = ["elastic-trainer", "--model", "fmnist"]
env = { OMP_PROC_BIND = "close", TAG = "x y" }
nodes = "2:4"
workers_per_node = 2
checkpoint_root = "/nfs/ck"
max_restarts = 5
restart_backoff = "10s"
last_call = "1m30s"
working_dir = "/scratch/run"
user = "alice"
)";
  const rendezvous::JobSpec spec = build(text);
  EXPECT_EQ(json::parse(rendezvous::to_json(spec)), json::parse(R"({
    "name": "fmnist", "command": ["elastic-trainer", "--model", "fmnist"],
    "env": {"OMP_PROC_BIND": "close", "TAG": "x y"}, "min_nodes": 2, "max_nodes": 4,
    "workers_per_node": 2, "checkpoint_root": "/nfs/ck", "max_restarts": 5,
    "restart_backoff": "10s", "last_call": "1m30s", "working_dir": "/scratch/run",
    "user": "alice", "uid": 1000, "gid": 1000})"));
}

TEST(JobFile, MinimalFileTakesTheDefaultsAndTheCwd) {
  const rendezvous::JobSpec spec = build("name = \"a\"\ncommand = [\"/bin/true\"]\n");
  EXPECT_EQ(json::parse(rendezvous::to_json(spec)), json::parse(R"({
    "name": "a", "command": ["/bin/true"], "env": {}, "min_nodes": 1, "max_nodes": 1,
    "workers_per_node": 0, "checkpoint_root": "", "max_restarts": 3, "restart_backoff": "1s",
    "working_dir": "/home/alice/run", "user": "alice", "uid": 1000, "gid": 1000})"));
}

TEST(JobFile, EnvAsATableAndNodeCountsAndTheAlias) {
  const rendezvous::JobSpec spec = build(
      "name = \"a\"\ncommand = [\"x\"]\nmin_nodes = 3\ngpus_per_node = 8\n[env]\nA = \"1\"\n");
  EXPECT_EQ(spec.min_nodes, 3U);
  EXPECT_EQ(spec.max_nodes, 3U);  // max defaults to min
  EXPECT_EQ(spec.workers_per_node, 8U);
  EXPECT_EQ(spec.env.at("A"), "1");
  EXPECT_EQ(build("name = \"a\"\ncommand = [\"x\"]\nmax_nodes = 4\n").min_nodes, 1U);
  EXPECT_EQ(build("name = \"a\"\ncommand = [\"x\"]\nnodes = 3\n").max_nodes, 3U);
  EXPECT_EQ(build("name = \"a\"\ncommand = [\"x\"]\nnodes = \"5\"\n").min_nodes, 5U);
}

TEST(JobFile, RelativePathsResolveAgainstTheCallersCwd) {
  const rendezvous::JobSpec spec = build(
      "name = \"a\"\ncommand = [\"x\"]\ncheckpoint_root = \"ck\"\nworking_dir = \"../other/.\"\n");
  EXPECT_EQ(spec.checkpoint_root, "/home/alice/run/ck");
  EXPECT_EQ(spec.working_dir, "/home/alice/other/");
  // "" keeps the daemon's default (the user's home), unlike an absent key (the cwd).
  EXPECT_EQ(build("name = \"a\"\ncommand = [\"x\"]\nworking_dir = \"\"\n").working_dir, "");
  EXPECT_EQ(build_error("name = \"a\"\ncommand = [\"x\"]\nworking_dir = \"~/x\"\n"),
            "job.toml:3: working_dir: \"~/x\" starts with ~, which is not expanded; write the "
            "full path");
}

// ---- one exact message per class of bad input ----------------------------------------------

TEST(JobFile, UnknownKeysSuggestTheClosestKey) {
  EXPECT_EQ(parse_error("name = \"a\"\nnodse = 3\n"),
            "job.toml:2: nodse: unknown key (did you mean nodes?)");
  EXPECT_EQ(parse_error("workers_per_nod = 1\n"),
            "job.toml:1: workers_per_nod: unknown key (did you mean workers_per_node?)");
  EXPECT_EQ(parse_error("banana = 1\n"),
            "job.toml:1: banana: unknown key (job file keys are name, command, env, nodes, "
            "min_nodes, max_nodes, workers_per_node, gpus_per_node, checkpoint_root, "
            "max_restarts, restart_backoff, last_call, working_dir, user)");
  EXPECT_EQ(parse_error("uid = 0\n"),
            "job.toml:1: uid: is taken from the submitting process's credentials and cannot be "
            "set in a job file");
}

TEST(JobFile, WrongTypes) {
  EXPECT_EQ(parse_error("name = 3\n"), "job.toml:1: name: expected a string, got an integer (3)");
  EXPECT_EQ(parse_error("command = \"elastic-trainer --model fmnist\"\n"),
            "job.toml:1: command: expected an array of strings, got a string (\"elastic-trainer "
            "--model fmnist\"); write the program and each argument as its own string, e.g. "
            "[\"elastic-trainer\", \"--model\", \"fmnist\"]");
  EXPECT_EQ(parse_error("command = [\"a\",\n  2]\n"),
            "job.toml:2: command[1]: expected a string, got an integer (2)");
  EXPECT_EQ(parse_error("[env]\nA = \"1\"\nB = true\n"),
            "job.toml:3: env.B: expected a string, got a boolean (true)");
  EXPECT_EQ(parse_error("env = [\"A=1\"]\n"),
            "job.toml:1: env: expected a table of strings such as { OMP_PROC_BIND = \"close\" }, "
            "got an array");
  EXPECT_EQ(parse_error("max_restarts = 2.5\n"),
            "job.toml:1: max_restarts: expected a non-negative integer, got a float (2.5)");
  EXPECT_EQ(parse_error("restart_backoff = 10\n"),
            "job.toml:1: restart_backoff: expected a duration string such as \"10s\", got an "
            "integer (10)");
}

TEST(JobFile, BadValues) {
  EXPECT_EQ(parse_error("max_restarts = -1\n"),
            "job.toml:1: max_restarts: must not be negative (got -1)");
  EXPECT_EQ(parse_error("min_nodes = 5000000000\n"),
            "job.toml:1: min_nodes: 5000000000 is out of range");
  EXPECT_EQ(parse_error("nodes = \"2-4\"\n"),
            "job.toml:1: nodes: expected MIN:MAX or N (e.g. \"2:4\" or \"3\"), got \"2-4\"");
  EXPECT_EQ(parse_error("last_call = \"5 sec\"\n"),
            "job.toml:1: last_call: " + parse_duration("5 sec").error().message);
  EXPECT_EQ(parse_error("nodes = \"2:3\"\nmax_nodes = 3\n"),
            "job.toml:1: nodes: give either nodes or min_nodes/max_nodes, not both");
  EXPECT_EQ(parse_error("workers_per_node = 1\ngpus_per_node = 2\n"),
            "job.toml:2: gpus_per_node: is another name for workers_per_node; give only one of "
            "them");
}

TEST(JobFile, EveryProblemIsReportedInFileOrder) {
  EXPECT_EQ(parse_error("name = 1\nnodes = \"x\"\nnmae = \"a\"\n"),
            "job.toml:1: name: expected a string, got an integer (1)\n"
            "job.toml:2: nodes: expected MIN:MAX or N (e.g. \"2:4\" or \"3\"), got \"x\"\n"
            "job.toml:3: nmae: unknown key (did you mean name?)");
}

TEST(JobFile, SyntaxErrorsNameTheLine) {
  const std::string error = parse_error("name = \"a\"\ncommand = [\"x\"\n");
  EXPECT_THAT(error, StartsWith("job.toml:"));
  EXPECT_THAT(error, HasSubstr(": TOML syntax error: "));
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;  // one line
}

TEST(JobFile, RuleViolationsAreBlamedOnTheirSource) {
  EXPECT_EQ(build_error("name = \"a\"\ncommand = [\"x\"]\nnodes = \"3:2\"\n"),
            "job.toml:3: nodes: min 3 is greater than max 2");
  EXPECT_EQ(build_error("name = \"a b\"\ncommand = [\"x\"]\n"),
            "job.toml:1: name: 'a b' may contain only letters, digits, '.', '_' and '-'");
  EXPECT_EQ(build_error("name = \"a\"\ncommand = [\"x\"]\n\n[env]\nRANK = \"3\"\n"),
            "job.toml:5: env: RANK is set by the daemon for every worker and cannot be "
            "overridden");
  EXPECT_EQ(build_error("name = \"a\"\ncommand = []\n"),
            "job.toml:2: command: must name the program to run");
  EXPECT_EQ(build_error("name = \"a\"\ncommand = [\"x\"]\n",
                        flags([](JobOverrides& f) { f.nodes = "3:2"; })),
            "--nodes: min 3 is greater than max 2");
  EXPECT_EQ(build_error("name = \"a\"\ncommand = [\"x\"]\n",
                        flags([](JobOverrides& f) { f.env = {"ELASTIC_ROUND=1"}; })),
            "--env: ELASTIC_ROUND is set by the daemon for every worker and cannot be overridden");
  EXPECT_EQ(build_error("name = \"a\"\ncommand = [\"x\"]\n",
                        flags([](JobOverrides& f) { f.env = {"NOEQUALS"}; })),
            "--env: expected NAME=VALUE, got \"NOEQUALS\"");
  EXPECT_EQ(build_error("name = \"a\"\ncommand = [\"x\"]\n",
                        flags([](JobOverrides& f) { f.restart_backoff = "soon"; })),
            "--restart-backoff: " + parse_duration("soon").error().message);
}

// Issue 13 item 16: a file breaking seven rules used to report one per run. Every rule the
// merged spec breaks is reported at once, each blamed on its key's line, in field order.
TEST(JobFile, EveryRuleViolationIsReportedAtOnce) {
  const std::string text = R"(name = "my job"
command = ["", "--model", "fmnist"]
nodes = "3:2"
workers_per_node = 5000
max_restarts = 2000000
restart_backoff = "2h"
last_call = "2h"
[env]
RANK = "3"
)";
  EXPECT_EQ(build_error(text),
            "job.toml:1: name: 'my job' may contain only letters, digits, '.', '_' and '-'\n"
            "job.toml:2: command: the program name is empty\n"
            "job.toml:9: env: RANK is set by the daemon for every worker and cannot be "
            "overridden\n"
            "job.toml:3: nodes: min 3 is greater than max 2\n"
            "job.toml:4: workers_per_node: 5000 is more than the limit of 1024\n"
            "job.toml:5: max_restarts: 2000000 is more than the limit of 1000000\n"
            "job.toml:6: restart_backoff: 2h is longer than the limit of 1h\n"
            "job.toml:7: last_call: 2h is longer than the limit of 1h");
}

// The README's example: the file's own problems (unknown key, a negative count), a rule the
// file breaks and one a flag breaks, all in one run.
TEST(JobFile, FileProblemsFlagProblemsAndRulesComeTogether) {
  const std::string text =
      "name = \"a\"\ncommand = [\"x\"]\nnodse = 3\nmax_restarts = -1\n[env]\nRANK = \"3\"\n";
  EXPECT_EQ(build_error(text, flags([](JobOverrides& f) { f.nodes = "3:2"; })),
            "job.toml:3: nodse: unknown key (did you mean nodes?)\n"
            "job.toml:4: max_restarts: must not be negative (got -1)\n"
            "job.toml:6: env: RANK is set by the daemon for every worker and cannot be "
            "overridden\n"
            "--nodes: min 3 is greater than max 2");
  // Flags that cannot be read are reported together too, and the values they meant to replace
  // are not judged again.
  EXPECT_EQ(
      build_error("name = \"a\"\ncommand = [\"x\"]\nnodes = \"3:2\"\n", flags([](JobOverrides& f) {
                    f.env = {"NOEQUALS", "ELASTIC_ROUND=1"};
                    f.nodes = "lots";
                    f.restart_backoff = "soon";
                    f.working_dir = "~/run";
                  })),
      "--env: expected NAME=VALUE, got \"NOEQUALS\"\n"
      "--nodes: expected MIN:MAX or N (e.g. \"2:4\" or \"3\"), got \"lots\"\n"
      "--restart-backoff: " +
          parse_duration("soon").error().message +
          "\n"
          "--workdir: \"~/run\" starts with ~, which is not expanded; write the full path\n"
          "--env: ELASTIC_ROUND is set by the daemon for every worker and cannot be "
          "overridden");
}

// A key the file got wrong keeps its default; the rules do not complain about that default
// (name = 1 is not also "name: must not be empty"), unless a flag replaced the value.
TEST(JobFile, AWrongValueIsReportedOnce) {
  EXPECT_EQ(build_error("name = 1\ncommand = \"x\"\n"),
            "job.toml:1: name: expected a string, got an integer (1)\n"
            "job.toml:2: command: expected an array of strings, got a string (\"x\"); write the "
            "program and each argument as its own string, e.g. [\"elastic-trainer\", "
            "\"--model\", \"fmnist\"]");
  EXPECT_EQ(
      build_error("name = 1\ncommand = [\"x\"]\n", flags([](JobOverrides& f) { f.name = "a b"; })),
      "job.toml:1: name: expected a string, got an integer (1)\n"
      "--name: 'a b' may contain only letters, digits, '.', '_' and '-'");
}

TEST(JobFile, RequiredFields) {
  EXPECT_EQ(build_error("command = [\"x\"]\n"),
            "name: is required; give name = \"...\" in the job file or --name");
  EXPECT_EQ(build_error("name = \"a\"\n"),
            "command: is required; give command = [\"program\", \"arg\", ...] in the job file or "
            "-- PROGRAM ARGS after the flags");
}

TEST(JobFile, AnotherUserIsRefusedTheCallerIsFine) {
  EXPECT_EQ(build_error("name = \"a\"\ncommand = [\"x\"]\nuser = \"bob\"\n"),
            "job.toml:3: user: jobs run as the user who submits them, and that is alice, not "
            "bob; submit as bob (e.g. sudo -u bob elasticctl submit ...) or remove the key");
  EXPECT_EQ(build("name = \"a\"\ncommand = [\"x\"]\nuser = \"alice\"\n").user, "alice");
  EXPECT_EQ(build("name = \"a\"\ncommand = [\"x\"]\nuser = \"1000\"\n").uid, 1000U);
}

TEST(JobFile, FlagsOverrideTheFile) {
  const std::string text = R"(name = "a"
command = ["x", "--from-file"]
env = { A = "file", B = "file" }
nodes = "2:3"
workers_per_node = 1
max_restarts = 1
restart_backoff = "5s"
working_dir = "/file"
checkpoint_root = "/file-ck"
)";
  const rendezvous::JobSpec spec =
      build(text, JobOverrides{.name = "b",
                               .command = std::vector<std::string>{"y", "--from-flags"},
                               .env = {"B=flag", "C=flag=with=equals"},
                               .nodes = "4",
                               .workers_per_node = 2,
                               .checkpoint_root = "ck",
                               .max_restarts = 7,
                               .restart_backoff = "2s",
                               .last_call = "3s",
                               .working_dir = "sub"});
  EXPECT_EQ(json::parse(rendezvous::to_json(spec)), json::parse(R"({
    "name": "b", "command": ["y", "--from-flags"],
    "env": {"A": "file", "B": "flag", "C": "flag=with=equals"}, "min_nodes": 4, "max_nodes": 4,
    "workers_per_node": 2, "checkpoint_root": "/home/alice/run/ck", "max_restarts": 7,
    "restart_backoff": "2s", "last_call": "3s", "working_dir": "/home/alice/run/sub",
    "user": "alice", "uid": 1000, "gid": 1000})"));
}

TEST(JobFile, FlagsAloneMakeASpec) {
  auto spec = build_job_spec(nullptr, flags([](JobOverrides& f) {
                               f.name = "f";
                               f.command = std::vector<std::string>{"/bin/true"};
                             }),
                             kAlice);
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  EXPECT_EQ(spec->working_dir, "/home/alice/run");
  EXPECT_EQ(spec->min_nodes, 1U);
}

TEST(JobFile, NodeRanges) {
  EXPECT_EQ(*parse_node_range("2:4"), std::pair(2U, 4U));
  EXPECT_EQ(*parse_node_range("3"), std::pair(3U, 3U));
  for (const char* bad : {"", ":", "2:", ":4", "a", "2:4:6", "-1", "1234567890", " 2"}) {
    EXPECT_FALSE(parse_node_range(bad).ok()) << bad;
  }
}

TEST(JobFile, ReadingFiles) {
  elastic::testing::TempDir dir;
  JobFileError kind = JobFileError::kInvalid;
  auto missing = read_job_file(dir.file("nope.toml"), &kind);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(kind, JobFileError::kUnreadable);
  EXPECT_EQ(missing.error().message,
            dir.file("nope.toml") + ": cannot read the job file: it does not exist");
  auto directory = read_job_file(dir.path(), &kind);
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(kind, JobFileError::kUnreadable);
  // A file with wrong values is read, its problems kept for build_job_spec to report with the
  // rest; only a file that is not TOML fails here.
  const std::string bad = dir.write("bad.toml", "name = 1\n");
  auto wrong = read_job_file(bad, &kind);
  ASSERT_TRUE(wrong.ok()) << wrong.error().message;
  EXPECT_THAT(wrong->problems,
              ::testing::ElementsAre(bad + ":1: name: expected a string, got an integer (1)"));
  const std::string broken = dir.write("broken.toml", "name = \"a\"\ncommand = [\n");
  auto invalid = read_job_file(broken, &kind);
  ASSERT_FALSE(invalid.ok());
  EXPECT_EQ(kind, JobFileError::kInvalid);
  EXPECT_THAT(invalid.error().message, StartsWith(broken + ":"));
}

TEST(JobFile, ShippedExamplesParseAndValidate) {
  for (const char* name : {"fmnist.toml", "gpu-gpt.toml"}) {
    const std::string path = std::string(ELASTIC_SOURCE_DIR) + "/examples/" + name;
    auto file = read_job_file(path);
    ASSERT_TRUE(file.ok()) << file.error().message;
    auto spec = build_job_spec(&*file, {}, kAlice);
    ASSERT_TRUE(spec.ok()) << spec.error().message;
    EXPECT_EQ(spec->command.front(), "elastic-trainer") << name;
  }
  auto fmnist = read_job_file(std::string(ELASTIC_SOURCE_DIR) + "/examples/fmnist.toml");
  ASSERT_TRUE(fmnist.ok());
  EXPECT_EQ(fmnist->spec.min_nodes, 2U);
  EXPECT_EQ(fmnist->spec.max_nodes, 3U);
  auto gpt = read_job_file(std::string(ELASTIC_SOURCE_DIR) + "/examples/gpu-gpt.toml");
  ASSERT_TRUE(gpt.ok());
  EXPECT_EQ(gpt->spec.workers_per_node, 0U);
  EXPECT_EQ(gpt->spec.env.at("NCCL_NVLS_ENABLE"), "0");
}

// Hostile bytes: random mutations of a good file never throw or crash, and a failure is one or
// more "job.toml..." lines.
TEST(JobFile, HostileBytesNeverThrow) {
  const std::string good =
      "name = \"a\"\ncommand = [\"x\", \"y\"]\nenv = { A = \"1\" }\nnodes = \"2:4\"\n"
      "restart_backoff = \"1s\"\n[env2]\nz = 1\n";
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::string text = good;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = rng() % text.size();
      switch (rng() % 3) {
        case 0:
          text[at] = static_cast<char>(rng() % 256);
          break;
        case 1:
          text.erase(at, 1 + rng() % 8);
          break;
        default:
          text.insert(at, 1, "[]{}=\",\n\\'#:."[rng() % 14]);
      }
      if (text.empty()) text = "x";
    }
    auto file = parse_job_toml(text, "job.toml");
    if (!file.ok()) {
      EXPECT_THAT(file.error().message, StartsWith("job.toml")) << text;
    } else {
      (void)build_job_spec(&*file, {}, kAlice);
    }
  }
}

}  // namespace
}  // namespace elastic::ctl
