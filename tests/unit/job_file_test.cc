// Job files (ctl/job_file.h): a good file becomes an exact JSON spec; every class of bad input
// gets its exact "<file>:<line>: <key>: <problem>" message; flags override the file; relative
// paths resolve against the caller's cwd; the shipped examples/*.toml parse and validate;
// hostile bytes never throw.
#include "ctl/job_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "daemon/core/duration.h"
#include "tests/support/result_assertions.h"
#include "tests/support/temp_dir.h"

namespace elastic::ctl {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const Caller kAlice{
    .user = "alice", .uid = 1000, .gid = 1000, .cwd = "/home/alice/run", .environment = {}};

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

// warm = true in the file, --warm/--no-warm over it; a command a warm interpreter cannot run is
// refused with the job spec's reason.
TEST(JobFile, WarmFromTheFileAndTheFlag) {
  const std::string python = "name = \"a\"\ncommand = [\"python3\", \"t.py\"]\n";
  EXPECT_FALSE(build(python).warm);
  EXPECT_TRUE(build(python + "warm = true\n").warm);
  JobOverrides no_warm;
  no_warm.warm = false;
  JobOverrides warm;
  warm.warm = true;
  EXPECT_FALSE(build(python + "warm = true\n", no_warm).warm);
  EXPECT_TRUE(build(python, warm).warm);
  EXPECT_EQ(
      build_error("name = \"a\"\ncommand = [\"x\"]\nwarm = true\n"),
      "job.toml:3: warm: needs a Python command: the command must start with a Python interpreter "
      "(python, python3, python3.11 or a path to one), not 'x'");
}

// The scheduling keys from the file and their flags (which win); bad values are one error
// each, blamed on the line or the flag.
TEST(JobFile, SchedulingKeysFromTheFileAndTheFlags) {
  const std::string base = "name = \"a\"\ncommand = [\"x\"]\n";
  const rendezvous::JobSpec plain = build(base);
  EXPECT_EQ(plain.priority, 0);
  EXPECT_FALSE(plain.preemptible);
  EXPECT_EQ(plain.scale, rendezvous::ScaleMode::kFixed);

  const rendezvous::JobSpec filed =
      build(base +
            "priority = -5\npreemptible = true\nscale = \"throughput\"\nscale_min_gain = "
            "0.1\nscale_window = \"2m\"\n");
  EXPECT_EQ(filed.priority, -5);
  EXPECT_TRUE(filed.preemptible);
  EXPECT_EQ(filed.scale, rendezvous::ScaleMode::kThroughput);
  EXPECT_EQ(filed.scale_min_gain, 0.1);
  EXPECT_EQ(filed.scale_window, std::chrono::minutes(2));
  EXPECT_EQ(build(base + "scale_min_gain = 1\n").scale_min_gain, 1.0);

  const rendezvous::JobSpec flagged =
      build(base + "priority = -5\npreemptible = true\n", flags([](JobOverrides& f) {
              f.priority = "12";
              f.preemptible = false;
              f.scale = "throughput";
              f.scale_min_gain = "0.2";
              f.scale_window = "30s";
            }));
  EXPECT_EQ(flagged.priority, 12);
  EXPECT_FALSE(flagged.preemptible);
  EXPECT_EQ(flagged.scale, rendezvous::ScaleMode::kThroughput);
  EXPECT_EQ(flagged.scale_min_gain, 0.2);
  EXPECT_EQ(flagged.scale_window, std::chrono::seconds(30));
  EXPECT_EQ(build(base, flags([](JobOverrides& f) { f.priority = "-1000000"; })).priority,
            -1000000);

  EXPECT_EQ(parse_error("priority = \"high\"\npreemptible = 1\nscale = \"fast\"\n"
                        "scale_min_gain = \"5%\"\nscale_window = 60\n"),
            "job.toml:1: priority: expected an integer, got a string (\"high\")\n"
            "job.toml:2: preemptible: expected true or false, got an integer (1)\n"
            "job.toml:3: scale: expected \"fixed\" or \"throughput\", got \"fast\"\n"
            "job.toml:4: scale_min_gain: expected a number such as 0.05, got a string (\"5%\")\n"
            "job.toml:5: scale_window: expected a duration string such as \"10s\", got an "
            "integer (60)");
  EXPECT_EQ(build_error(base + "priority = 2000000\nscale_window = \"5s\"\n"),
            "job.toml:3: priority: 2000000 is outside -1000000..1000000\n"
            "job.toml:4: scale_window: 5s is outside 10s..1h");
  EXPECT_EQ(build_error(base, flags([](JobOverrides& f) { f.priority = "ten"; })),
            "--priority: expected an integer such as 10 or -5, got \"ten\"");
  EXPECT_EQ(build_error(base, flags([](JobOverrides& f) { f.priority = "2000000"; })),
            "--priority: 2000000 is outside -1000000..1000000");
  EXPECT_EQ(build_error(base, flags([](JobOverrides& f) { f.scale = "fast"; })),
            "--scale: expected fixed or throughput, got \"fast\"");
  EXPECT_EQ(build_error(base, flags([](JobOverrides& f) { f.scale_min_gain = "0.1x"; })),
            "--scale-min-gain: expected a number such as 0.05, got \"0.1x\"");
  EXPECT_EQ(build_error(base, flags([](JobOverrides& f) { f.scale_min_gain = "2"; })),
            "--scale-min-gain: 2.0 is not a fraction above 0 and at most 1");
  EXPECT_EQ(build_error(base, flags([](JobOverrides& f) { f.scale_window = "2h"; })),
            "--scale-window: 2h is outside 10s..1h");
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
            "max_restarts, restart_backoff, last_call, hang_timeout, working_dir, user, "
            "export, warm, priority, preemptible, scale, scale_min_gain, scale_window)");
  EXPECT_EQ(parse_error("uid = 0\n"),
            "job.toml:1: uid: is taken from the submitting process's credentials and cannot be "
            "set in a job file");
}

TEST(JobFile, WrongTypes) {
  EXPECT_EQ(parse_error("name = 3\n"), "job.toml:1: name: expected a string, got an integer (3)");
  EXPECT_EQ(parse_error("warm = \"yes\"\n"),
            "job.toml:1: warm: expected true or false, got a string (\"yes\")");
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

// hang_timeout in a job file and as --hang-timeout (which wins); absent (the daemon's default)
// by default, "0s" off; a value under 5s, a number or a bad duration is one error naming where
// it came from.
TEST(JobFile, HangTimeoutFromTheFileOrTheFlag) {
  const std::string base = "name = \"a\"\ncommand = [\"x\"]\n";
  EXPECT_FALSE(build(base).hang_timeout.has_value());
  EXPECT_EQ(build(base + "hang_timeout = \"0s\"\n").hang_timeout, Duration::zero());
  EXPECT_EQ(build(base + "hang_timeout = \"90s\"\n").hang_timeout, std::chrono::seconds(90));
  EXPECT_EQ(build(base + "hang_timeout = \"90s\"\n",
                  flags([](JobOverrides& f) { f.hang_timeout = "2m"; }))
                .hang_timeout,
            std::chrono::minutes(2));
  EXPECT_EQ(build(base + "hang_timeout = \"90s\"\n",
                  flags([](JobOverrides& f) { f.hang_timeout = "0s"; }))
                .hang_timeout,
            Duration::zero())
      << "0s on the command line turns a file's hang detection off";
  EXPECT_EQ(build_error(base + "hang_timeout = \"2s\"\n"),
            "job.toml:3: hang_timeout: 2s is shorter than the minimum of 5s (0s turns hang "
            "detection off)");
  EXPECT_EQ(build_error(base, flags([](JobOverrides& f) { f.hang_timeout = "1s"; })),
            "--hang-timeout: 1s is shorter than the minimum of 5s (0s turns hang detection off)");
  EXPECT_EQ(build_error(base, flags([](JobOverrides& f) { f.hang_timeout = "soon"; })),
            "--hang-timeout: " + parse_duration("soon").error().message);
  EXPECT_EQ(parse_error("hang_timeout = 60\n"),
            "job.toml:1: hang_timeout: expected a duration string such as \"10s\", got an "
            "integer (60)");
  EXPECT_EQ(build_error(base + "hang_timeout = \"2d\"\n"),
            "job.toml:3: hang_timeout: " + parse_duration("2d").error().message);
}

// A file breaking seven rules used to report one per run. Every rule the
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
                               .hang_timeout = "45s",
                               .working_dir = "sub",
                               .export_setting = {},
                               .warm = false,
                               .priority = {},
                               .preemptible = {},
                               .scale = {},
                               .scale_min_gain = {},
                               .scale_window = {}});
  EXPECT_EQ(json::parse(rendezvous::to_json(spec)), json::parse(R"({
    "name": "b", "command": ["y", "--from-flags"],
    "env": {"A": "file", "B": "flag", "C": "flag=with=equals"}, "min_nodes": 4, "max_nodes": 4,
    "workers_per_node": 2, "checkpoint_root": "/home/alice/run/ck", "max_restarts": 7,
    "restart_backoff": "2s", "last_call": "3s", "hang_timeout": "45s",
    "working_dir": "/home/alice/run/sub", "user": "alice", "uid": 1000, "gid": 1000})"));
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
  // A plain PyTorch script's job, with hang detection.
  auto ddp = read_job_file(std::string(ELASTIC_SOURCE_DIR) + "/examples/ddp_script.toml");
  ASSERT_TRUE(ddp.ok()) << ddp.error().message;
  auto ddp_spec = build_job_spec(&*ddp, {}, kAlice);
  ASSERT_TRUE(ddp_spec.ok()) << ddp_spec.error().message;
  EXPECT_EQ(ddp_spec->command.at(0), "python3");
  EXPECT_EQ(ddp_spec->command.at(1), "examples/train_ddp.py");
  EXPECT_TRUE(
      std::filesystem::exists(std::string(ELASTIC_SOURCE_DIR) + "/" + ddp_spec->command.at(1)));
  EXPECT_EQ(ddp_spec->hang_timeout, std::chrono::seconds(60));
  EXPECT_EQ(ddp_spec->env.at("PYTHONFAULTHANDLER"), "1");
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

// ---- the submitter's environment and PATH ----------------------------------------------

// alice submitting from a shell with a venv, PYTHONPATH and NCCL settings, inside a Slurm
// allocation, over ssh, with a bash function exported.
Caller alice_in_a_shell() {
  Caller caller = kAlice;
  caller.environment = {{"PATH", "/home/alice/venv/bin:/usr/bin:/bin"},
                        {"VIRTUAL_ENV", "/home/alice/venv"},
                        {"PYTHONPATH", "/home/alice/lib"},
                        {"NCCL_DEBUG", "INFO"},
                        {"NCCL_SOCKET_IFNAME", "eth0"},
                        {"LANG", "C.UTF-8"},
                        {"OMP_NUM_THREADS", "4"},
                        {"HOME", "/home/alice"},
                        {"USER", "alice"},
                        {"HOSTNAME", "login1"},
                        {"PWD", "/home/alice/run"},
                        {"SSH_AUTH_SOCK", "/tmp/ssh-x/agent.1"},
                        {"SSH_CONNECTION", "10.0.0.1 5 10.0.0.2 22"},
                        {"DISPLAY", ":0"},
                        {"XDG_RUNTIME_DIR", "/run/user/1000"},
                        {"DBUS_SESSION_BUS_ADDRESS", "unix:path=/run/user/1000/bus"},
                        {"SLURM_PROCID", "3"},
                        {"SLURM_JOB_ID", "77"},
                        {"CUDA_VISIBLE_DEVICES", "1"},
                        {"ROCR_VISIBLE_DEVICES", "1"},
                        {"LOCAL_RANK", "1"},
                        {"MASTER_PORT", "1234"},
                        {"TORCHELASTIC_RUN_ID", "other"},
                        {"ELASTIC_CONTROL_SOCKET", "/run/elastic/elasticd.sock"},
                        {"BASH_FUNC_module%%", "() { eval x; }"},
                        {"_", "/usr/bin/elasticctl"}};
  return caller;
}

Result<rendezvous::JobSpec> build_as(const Caller& caller, const std::string& text,
                                     const JobOverrides& flags = {}) {
  auto file = parse_job_toml(text, "job.toml");
  if (!file) return file.error();
  return build_job_spec(&*file, flags, caller);
}

const std::string kPython = "name = \"a\"\ncommand = [\"python3\", \"train.py\"]\n";

TEST(JobFileExport, AllIsTheDefaultLessWhatMustNotCrossHosts) {
  auto spec = build_as(alice_in_a_shell(), kPython);
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  EXPECT_EQ(spec->exported_env, (std::map<std::string, std::string>{
                                    {"LANG", "C.UTF-8"},
                                    {"NCCL_DEBUG", "INFO"},
                                    {"NCCL_SOCKET_IFNAME", "eth0"},
                                    {"OMP_NUM_THREADS", "4"},
                                    {"PATH", "/home/alice/venv/bin:/usr/bin:/bin"},
                                    {"PYTHONPATH", "/home/alice/lib"},
                                    {"VIRTUAL_ENV", "/home/alice/venv"},
                                }));
  EXPECT_OK(rendezvous::validate(*spec));
  // The spec's JSON carries it (status --json shows it to the owner).
  EXPECT_EQ(json::parse(rendezvous::to_json(*spec))["exported_env"]["NCCL_DEBUG"], "INFO");
}

TEST(JobFileExport, NoneAndAListAndTheFlagBeatsTheFile) {
  const Caller caller = alice_in_a_shell();
  auto none = build_as(caller, kPython, flags([](JobOverrides& f) { f.export_setting = "NONE"; }));
  ASSERT_TRUE(none.ok()) << none.error().message;
  EXPECT_TRUE(none->exported_env.empty());
  EXPECT_FALSE(json::parse(rendezvous::to_json(*none)).contains("exported_env"));

  // A listed variable that is not set is left out, as with sbatch.
  auto listed =
      build_as(caller, kPython,
               flags([](JobOverrides& f) { f.export_setting = "PYTHONPATH, NCCL_DEBUG,NOT_SET"; }));
  ASSERT_TRUE(listed.ok()) << listed.error().message;
  EXPECT_EQ(listed->exported_env, (std::map<std::string, std::string>{
                                      {"NCCL_DEBUG", "INFO"}, {"PYTHONPATH", "/home/alice/lib"}}));

  auto from_file = build_as(caller, kPython + "export = [\"PYTHONPATH\"]\n");
  ASSERT_TRUE(from_file.ok()) << from_file.error().message;
  EXPECT_EQ(from_file->exported_env,
            (std::map<std::string, std::string>{{"PYTHONPATH", "/home/alice/lib"}}));
  auto file_none = build_as(caller, kPython + "export = \"none\"\n");
  ASSERT_TRUE(file_none.ok()) << file_none.error().message;
  EXPECT_TRUE(file_none->exported_env.empty());
  auto flag_wins = build_as(caller, kPython + "export = \"NONE\"\n",
                            flags([](JobOverrides& f) { f.export_setting = "ALL"; }));
  ASSERT_TRUE(flag_wins.ok()) << flag_wins.error().message;
  EXPECT_EQ(flag_wins->exported_env.at("NCCL_DEBUG"), "INFO");
}

TEST(JobFileExport, EnvStillOverridesAndMaySetAHostVariableExplicitly) {
  auto spec = build_as(alice_in_a_shell(), kPython, flags([](JobOverrides& f) {
                         f.env = {"NCCL_DEBUG=WARN", "DISPLAY=:1"};
                       }));
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  EXPECT_EQ(spec->exported_env.at("NCCL_DEBUG"), "INFO");
  EXPECT_EQ(spec->env.at("NCCL_DEBUG"), "WARN");  // the worker gets env's (job_supervisor)
  EXPECT_EQ(spec->env.at("DISPLAY"), ":1");
  EXPECT_FALSE(spec->exported_env.contains("DISPLAY"));
}

TEST(JobFileExport, BadSettingsNameWhatIsWrongAndWhere) {
  const Caller caller = alice_in_a_shell();
  const auto error = [&](const std::string& text, const JobOverrides& f = {}) {
    auto spec = build_as(caller, text, f);
    return spec.ok() ? std::string() : spec.error().message;
  };
  EXPECT_EQ(
      error(kPython, flags([](JobOverrides& f) { f.export_setting = "PYTHONPATH,HOSTNAME"; })),
      "--export: HOSTNAME describes the submitting host or session and is never exported "
      "(pass it with --env HOSTNAME=VALUE if the workers need it)");
  EXPECT_EQ(error(kPython, flags([](JobOverrides& f) { f.export_setting = "RANK"; })),
            "--export: RANK is set by the daemon for every worker and is never exported");
  EXPECT_EQ(error(kPython, flags([](JobOverrides& f) { f.export_setting = "A B"; })),
            "--export: expected ALL, NONE or a comma-separated list of variable names, got "
            "\"A B\" (\"A B\" is not a variable name)");
  EXPECT_EQ(error(kPython, flags([](JobOverrides& f) { f.export_setting = "ALL,PATH"; })),
            "--export: expected ALL, NONE or a comma-separated list of variable names, got "
            "\"ALL,PATH\" (ALL and NONE stand alone)");
  EXPECT_EQ(error(kPython + "export = \"SSH_AUTH_SOCK\"\n"),
            "job.toml:3: export: SSH_AUTH_SOCK describes the submitting host or session and is "
            "never exported (pass it with --env SSH_AUTH_SOCK=VALUE if the workers need it)");
  EXPECT_EQ(error(kPython + "export = true\n"),
            "job.toml:3: export: expected \"ALL\", \"NONE\" or the variables to pass on (\"A,B\" "
            "or [\"A\", \"B\"]), got a boolean (true)");
  EXPECT_EQ(error(kPython + "export = [\"A\", 1]\n"),
            "job.toml:3: export: expected \"ALL\", \"NONE\" or the variables to pass on (\"A,B\" "
            "or [\"A\", \"B\"]), got an array");
}

TEST(JobFileExport, ATooLargeEnvironmentNamesTheLimitAndTheLargestVariables) {
  Caller caller = alice_in_a_shell();
  caller.environment["HUGE"] = std::string(rendezvous::kMaxEnvValueBytes + 1, 'x');
  auto spec = build_as(caller, kPython);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.error().message,
            "export (the default, ALL): the limit for one variable is 16384 bytes, and the "
            "environment to export has 1 longer: HUGE (16391 bytes); unset what the workers do "
            "not need before submitting, or name what to pass with --export NAME,... (or NONE)");

  caller = alice_in_a_shell();
  for (int i = 0; i < 20; ++i) {
    caller.environment["BIG" + std::to_string(i)] = std::string(16000 - i, 'x');
  }
  spec = build_as(caller, kPython, flags([](JobOverrides& f) { f.env = {"A=1"}; }));
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.error().message,
              StartsWith("export (the default, ALL): the environment to export takes "));
  EXPECT_THAT(spec.error().message,
              HasSubstr("bytes, more than the limit of 262144; the largest: BIG0 (16006 bytes), "
                        "BIG1 (16005 bytes) and BIG2 (16004 bytes); unset what the workers do not "
                        "need"));
  // Exporting less is the way out.
  spec = build_as(caller, kPython, flags([](JobOverrides& f) { f.export_setting = "PYTHONPATH"; }));
  EXPECT_TRUE(spec.ok()) << spec.error().message;

  caller = kAlice;
  for (int i = 0; i < 1100; ++i) caller.environment["V" + std::to_string(i)] = "1";
  spec = build_as(caller, kPython);
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.error().message,
              StartsWith("export (the default, ALL): the environment to export has 1100 "
                         "variables; with env that is more than the limit of 1024"));
}

// The control socket's frame (64 KiB) is what a big exported environment meets first.
TEST(JobFileExport, AnOversizedRequestNamesTheSocketsLimitAndTheLargestVariables) {
  rendezvous::JobSpec spec;
  spec.exported_env = {{"SMALL", "1"}, {"BIG", std::string(30000, 'x')}, {"MID", "12345"}};
  EXPECT_EQ(oversized_request_problem(spec, 65536, 65536), "");
  EXPECT_EQ(oversized_request_problem(spec, 70000, 65536),
            "export: the submit request takes 70000 bytes, more than the control socket's limit "
            "of 65536; the largest exported variables: BIG (30005 bytes), MID (10 bytes) and "
            "SMALL (8 bytes); unset what the workers do not need before submitting, or name what "
            "to pass with --export NAME,... (or NONE)");
  spec.exported_env.clear();
  spec.env = {{"E", "v"}};
  EXPECT_EQ(oversized_request_problem(spec, 70000, 65536),
            "env: the submit request takes 70000 bytes, more than the control socket's limit of "
            "65536; the largest variables of env: E (4 bytes)");
}

// A venv-like directory first in PATH: its python3 (a link, kept as a link) is the one chosen.
TEST(ResolveCommand, UsesTheCallersPathAndCwd) {
  testing::TempDir dir;
  std::filesystem::create_directories(dir / "venv/bin");
  std::filesystem::create_directories(dir / "usr/bin");
  const std::string system_python = dir.write("usr/bin/python3", "#!/bin/sh\n");
  std::filesystem::permissions(system_python, std::filesystem::perms(0755));
  std::filesystem::create_symlink(system_python, dir / "venv/bin/python3");
  const std::string plain = dir.write("usr/bin/notes", "text\n");  // not executable

  Caller caller = kAlice;
  caller.cwd = dir.path();
  caller.environment["PATH"] = dir / "venv/bin" + ":" + dir / "usr/bin";
  rendezvous::JobSpec spec;
  spec.command = {"python3", "train.py"};
  ASSERT_OK(resolve_command(&spec, caller));
  EXPECT_EQ(spec.command, (std::vector<std::string>{dir / "venv/bin/python3", "train.py"}));

  // A relative PATH entry and an empty one (the cwd) as execvp reads them.
  caller.environment["PATH"] = "usr/bin";
  spec.command = {"python3"};
  ASSERT_OK(resolve_command(&spec, caller));
  EXPECT_EQ(spec.command[0], dir / "usr/bin/python3");
  caller.environment["PATH"] = "/nonexistent::/bin";
  spec.command = {"usr/bin/python3"};  // has a '/': relative to the cwd, not searched
  ASSERT_OK(resolve_command(&spec, caller));
  EXPECT_EQ(spec.command[0], dir / "usr/bin/python3");
  spec.command = {"/already/absolute"};
  ASSERT_OK(resolve_command(&spec, caller));
  EXPECT_EQ(spec.command[0], "/already/absolute");

  caller.environment["PATH"] = dir / "venv/bin";
  spec.command = {"no-such-program"};
  Status missing = resolve_command(&spec, caller);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message,
            "command: \"no-such-program\" was not found in PATH (" + dir / "venv/bin" +
                "); give its full path, or submit from the environment (venv, conda, module) "
                "that provides it");
  caller.environment["PATH"] = dir / "usr/bin";
  spec.command = {"notes"};
  Status refused = resolve_command(&spec, caller);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().message, "command: \"notes\" was found in PATH only as " + plain +
                                         ", which you may not execute; make it executable or "
                                         "give the full path of another");
}

}  // namespace
}  // namespace elastic::ctl
