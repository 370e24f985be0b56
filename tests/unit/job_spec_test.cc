// JobSpec: validation messages name the field, JSON and MessagePack round trips, hostile input.
#include "daemon/rendezvous/job_spec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "daemon/core/rng.h"
#include "tests/support/result_assertions.h"

namespace elastic::rendezvous {
namespace {

using namespace std::chrono_literals;

JobSpec good_spec() {
  JobSpec s;
  s.name = "fmnist";
  s.command = {"elastic-trainer", "--model", "fmnist"};
  s.env = {{"NCCL_DEBUG", "INFO"}, {"OMP_PROC_BIND", "close"}};
  s.min_nodes = 2;
  s.max_nodes = 4;
  s.workers_per_node = 1;
  s.checkpoint_root = "/nfs/checkpoints";
  s.max_restarts = 5;
  s.restart_backoff = 2s;
  s.last_call = 1500ms;
  s.working_dir = "/home/alice";
  s.user = "alice";
  s.uid = 1000;
  s.gid = 1000;
  return s;
}

// Both encodings give `spec` back.
void expect_round_trips(const JobSpec& spec) {
  Result<JobSpec> from_json = job_spec_from_json(to_json(spec));
  ASSERT_OK(from_json);
  EXPECT_EQ(*from_json, spec);
  Result<JobSpec> from_msgpack = decode_job_spec(encode_job_spec(spec));
  ASSERT_OK(from_msgpack);
  EXPECT_EQ(*from_msgpack, spec);
}

TEST(JobSpecTest, GoodSpecIsValid) { EXPECT_OK(validate(good_spec())); }

struct BadCase {
  const char* label;
  std::function<void(JobSpec&)> mutate;
  const char* message;
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.label; }

class JobSpecValidation : public ::testing::TestWithParam<BadCase> {};

TEST_P(JobSpecValidation, NamesTheFieldAndTheProblem) {
  JobSpec spec = good_spec();
  GetParam().mutate(spec);
  const Status s = validate(spec);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, GetParam().message);
}

INSTANTIATE_TEST_SUITE_P(
    Rules, JobSpecValidation,
    ::testing::Values(
        BadCase{"MinAboveMax", [](JobSpec& s) { s.min_nodes = 3, s.max_nodes = 2; },
                "nodes: min 3 is greater than max 2"},
        BadCase{"MinZero", [](JobSpec& s) { s.min_nodes = 0; }, "min_nodes: must be at least 1"},
        BadCase{"MaxHuge", [](JobSpec& s) { s.max_nodes = kMaxNodesPerJob + 1; },
                "max_nodes: 100001 is more than the limit of 100000"},
        BadCase{"EmptyName", [](JobSpec& s) { s.name.clear(); }, "name: must not be empty"},
        BadCase{"NameWithSpace", [](JobSpec& s) { s.name = "my job"; },
                "name: 'my job' may contain only letters, digits, '.', '_' and '-'"},
        BadCase{"NameWithSlash", [](JobSpec& s) { s.name = "../x"; },
                "name: '../x' may contain only letters, digits, '.', '_' and '-'"},
        BadCase{"NameTooLong", [](JobSpec& s) { s.name = std::string(65, 'a'); },
                "name: 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...' is "
                "longer than 64 characters"},
        BadCase{"NoCommand", [](JobSpec& s) { s.command.clear(); },
                "command: must name the program to run"},
        BadCase{"EmptyProgram", [](JobSpec& s) { s.command = {""}; },
                "command: the program name is empty"},
        BadCase{"NulInArgument", [](JobSpec& s) { s.command[1] = std::string("a\0b", 3); },
                "command: argument 1 contains a NUL byte"},
        BadCase{"HugeArgument",
                [](JobSpec& s) { s.command.push_back(std::string(kMaxArgBytes + 1, 'x')); },
                "command: argument 3 is longer than 16384 bytes"},
        BadCase{"RankInEnv", [](JobSpec& s) { s.env["RANK"] = "3"; },
                "env: RANK is set by the daemon for every worker and cannot be overridden"},
        BadCase{"MasterPortInEnv", [](JobSpec& s) { s.env["MASTER_PORT"] = "1"; },
                "env: MASTER_PORT is set by the daemon for every worker and cannot be "
                "overridden"},
        BadCase{"CudaDevicesInEnv", [](JobSpec& s) { s.env["CUDA_VISIBLE_DEVICES"] = "0"; },
                "env: CUDA_VISIBLE_DEVICES is set by the daemon for every worker and cannot be "
                "overridden"},
        BadCase{"TorchelasticPrefix", [](JobSpec& s) { s.env["TORCHELASTIC_RUN_ID"] = "x"; },
                "env: TORCHELASTIC_RUN_ID is set by the daemon for every worker and cannot be "
                "overridden"},
        BadCase{"ElasticPrefix", [](JobSpec& s) { s.env["ELASTIC_ROUND"] = "x"; },
                "env: ELASTIC_ROUND is set by the daemon for every worker and cannot be "
                "overridden"},
        BadCase{"BadEnvName", [](JobSpec& s) { s.env["1X"] = "x"; },
                "env: '1X' is not a variable name (letters, digits and '_', not starting with a "
                "digit)"},
        BadCase{"RelativeCheckpointRoot", [](JobSpec& s) { s.checkpoint_root = "ck"; },
                "checkpoint_root: 'ck' is not an absolute path"},
        BadCase{"RelativeWorkingDir", [](JobSpec& s) { s.working_dir = "./run"; },
                "working_dir: './run' is not an absolute path"},
        BadCase{"NegativeBackoff", [](JobSpec& s) { s.restart_backoff = -1s; },
                "restart_backoff: must not be negative"},
        BadCase{"LongLastCall", [](JobSpec& s) { s.last_call = 2h; },
                "last_call: 2h is longer than the limit of 1h"},
        BadCase{"ShortHangTimeout", [](JobSpec& s) { s.hang_timeout = 2s; },
                "hang_timeout: 2s is shorter than the minimum of 5s (0s turns hang detection "
                "off)"},
        BadCase{"SubSecondHangTimeout", [](JobSpec& s) { s.hang_timeout = 500ms; },
                "hang_timeout: 500ms is shorter than the minimum of 5s (0s turns hang detection "
                "off)"},
        BadCase{"NegativeHangTimeout", [](JobSpec& s) { s.hang_timeout = -5s; },
                "hang_timeout: must not be negative"},
        BadCase{"LongHangTimeout", [](JobSpec& s) { s.hang_timeout = 25h; },
                "hang_timeout: 25h is longer than the limit of 24h"},
        BadCase{"TooManyWorkers", [](JobSpec& s) { s.workers_per_node = 5000; },
                "workers_per_node: 5000 is more than the limit of 1024"},
        BadCase{"TooManyRestarts", [](JobSpec& s) { s.max_restarts = kMaxRestartsLimit + 1; },
                "max_restarts: 1000001 is more than the limit of 1000000"},
        BadCase{"UserWithColon", [](JobSpec& s) { s.user = "a:b"; },
                "user: 'a:b' is not a valid user name"}),
    [](const auto& param_info) { return std::string(param_info.param.label); });

// Every broken rule at once, one line each in field order (one per run made
// a user resubmit seven times), each naming its field.
TEST(JobSpecTest, ValidateReportsEveryProblemAtOnce) {
  JobSpec spec = good_spec();
  spec.name = "my job";
  spec.command[1] = std::string("a\0b", 3);
  spec.env["RANK"] = "1";
  spec.env["1X"] = "x";
  spec.min_nodes = 0;
  spec.max_nodes = kMaxNodesPerJob + 1;
  spec.workers_per_node = 5000;
  spec.checkpoint_root = "ck";
  spec.working_dir = "./run";
  spec.max_restarts = kMaxRestartsLimit + 1;
  spec.restart_backoff = -1s;
  spec.last_call = 2h;
  spec.user = "a:b";
  const Status s = validate(spec);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message,
            "name: 'my job' may contain only letters, digits, '.', '_' and '-'\n"
            "command: argument 1 contains a NUL byte\n"
            "env: '1X' is not a variable name (letters, digits and '_', not starting with a "
            "digit)\n"
            "env: RANK is set by the daemon for every worker and cannot be overridden\n"
            "min_nodes: must be at least 1\n"
            "max_nodes: 100001 is more than the limit of 100000\n"
            "workers_per_node: 5000 is more than the limit of 1024\n"
            "checkpoint_root: 'ck' is not an absolute path\n"
            "working_dir: './run' is not an absolute path\n"
            "max_restarts: 1000001 is more than the limit of 1000000\n"
            "restart_backoff: must not be negative\n"
            "last_call: 2h is longer than the limit of 1h\n"
            "user: 'a:b' is not a valid user name");
  const std::vector<SpecProblem> problems = spec_problems(spec);
  ASSERT_EQ(problems.size(), 13u);
  EXPECT_EQ(problems[4], (SpecProblem{"min_nodes", "must be at least 1"}));
}

// A hostile spec breaking a rule per variable gets a bounded message, not 1,024 lines.
TEST(JobSpecTest, ReportsAreBoundedAndCountTheRest) {
  JobSpec spec = good_spec();
  for (int i = 0; i < 1000; ++i) spec.env["ELASTIC_" + std::to_string(i)] = "x";
  const std::vector<SpecProblem> problems = spec_problems(spec);
  ASSERT_EQ(problems.size(), kMaxSpecProblems + 1);
  EXPECT_EQ(problems.back(), (SpecProblem{"spec", "and " + std::to_string(1000 - kMaxSpecProblems) +
                                                      " more problems"}));
}

// The daemon's JSON decoding reports every bad field too.
TEST(JobSpecTest, JsonReportsEveryBadField) {
  Result<JobSpec> spec = job_spec_from_json(
      R"({"command":"x","min_nodes":"2","env":{"A":1},"last_call":10,"min_node":2})");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.error().message,
            "name: is required\n"
            "command: expected an array of strings, got string\n"
            "env.A: expected a string, got number\n"
            "last_call: expected a duration string such as \"10s\", got number\n"
            "spec: unknown field 'min_node'\n"
            "min_nodes: expected a non-negative integer, got string");
}

TEST(JobSpecTest, EmptyPathsMeanDaemonDefaults) {
  JobSpec spec = good_spec();
  spec.checkpoint_root.clear();
  spec.working_dir.clear();
  spec.last_call.reset();
  EXPECT_OK(validate(spec));
}

TEST(JobSpecTest, CommandAndEnvTogetherAreBounded) {
  JobSpec spec = good_spec();
  for (int i = 0; i < 40; ++i) spec.env["V" + std::to_string(i)] = std::string(8000, 'v');
  const Status s = validate(spec);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(s.error().message.starts_with("command: and env together take "))
      << s.error().message;
}

TEST(JobSpecTest, DaemonOwnedNames) {
  for (const char* name :
       {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
        "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "TORCHELASTIC_RESTART_COUNT", "ELASTIC_JOB_ID",
        "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "CUDA_DEVICE_ORDER"}) {
    EXPECT_TRUE(is_daemon_owned_env(name)) << name;
  }
  for (const char* name : {"PATH", "NCCL_DEBUG", "OMP_NUM_THREADS_X", "MY_RANK", "ELASTIC"}) {
    EXPECT_FALSE(is_daemon_owned_env(name)) << name;
  }
}

TEST(JobSpecTest, JsonRoundTrip) {
  const JobSpec spec = good_spec();
  Result<JobSpec> back = job_spec_from_json(to_json(spec));
  ASSERT_OK(back);
  EXPECT_EQ(*back, spec);

  JobSpec no_last_call = spec;
  no_last_call.last_call.reset();
  Result<JobSpec> back2 = job_spec_from_json(to_json(no_last_call));
  ASSERT_OK(back2);
  EXPECT_EQ(*back2, no_last_call);
}

// hang_timeout is absent (the daemon's default) by default and when absent from either
// encoding (entries written before it existed); "0s" is off and encodes as 0; 5s is the
// shortest otherwise, and it round-trips.
TEST(JobSpecTest, HangTimeoutIsOptionalAndRoundTrips) {
  EXPECT_FALSE(JobSpec{}.hang_timeout.has_value());
  JobSpec spec = good_spec();
  spec.hang_timeout = 5s;
  EXPECT_OK(validate(spec));
  spec.hang_timeout = 24h;
  EXPECT_OK(validate(spec));
  spec.hang_timeout = 90s;
  EXPECT_NE(to_json(spec).find(R"("hang_timeout":"1m30s")"), std::string::npos) << to_json(spec);
  expect_round_trips(spec);
  // Absent: no key in either encoding, so older daemons' entries and views stay the same.
  const JobSpec absent = good_spec();
  EXPECT_EQ(to_json(absent).find("hang_timeout"), std::string::npos);
  EXPECT_EQ(encode_job_spec(absent).find("ht"), std::string::npos);
  Result<JobSpec> absent_back = decode_job_spec(encode_job_spec(absent));
  ASSERT_OK(absent_back);
  EXPECT_FALSE(absent_back->hang_timeout.has_value());
  Result<JobSpec> bad = job_spec_from_json(R"({"name":"x","command":["x"],"hang_timeout":60})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message,
            "hang_timeout: expected a duration string such as \"10s\", got number");
}

// "0s" turns hang detection off: valid, kept apart from absent in both encodings.
TEST(JobSpecTest, HangTimeoutZeroIsOffAndDistinctFromAbsent) {
  JobSpec off = good_spec();
  off.hang_timeout = Duration::zero();
  EXPECT_OK(validate(off));
  EXPECT_NE(to_json(off).find(R"("hang_timeout":"0s")"), std::string::npos) << to_json(off);
  expect_round_trips(off);
  EXPECT_NE(encode_job_spec(off), encode_job_spec(good_spec()));
  Result<JobSpec> from_json =
      job_spec_from_json(R"({"name":"x","command":["x"],"hang_timeout":"0s"})");
  ASSERT_OK(from_json);
  EXPECT_EQ(from_json->hang_timeout, Duration::zero());
}

// The scheduling fields: defaults, both encodings, and a spec that sets none of them keeps
// the bytes it had before they existed (Raft logs and snapshots written by older daemons).
TEST(JobSpecTest, SchedulingFieldsRoundTripAndDefaultsKeepOldBytes) {
  const JobSpec defaults;
  EXPECT_EQ(defaults.priority, 0);
  EXPECT_FALSE(defaults.preemptible);
  EXPECT_EQ(defaults.scale, ScaleMode::kFixed);
  EXPECT_EQ(defaults.scale_min_gain, 0.05);
  EXPECT_EQ(defaults.scale_window, 60s);

  // good_spec() as an older daemon encoded it: exactly these keys, nothing after "gi".
  const std::string old_bytes = encode_job_spec(good_spec());
  for (const char* key : {"pr", "pe", "sm", "sg", "sw"}) {
    EXPECT_EQ(old_bytes.find(std::string("\xa2") + key), std::string::npos) << key;
  }
  const std::string json = to_json(good_spec());
  for (const char* key : {"priority", "preemptible", "scale"}) {
    EXPECT_EQ(json.find(key), std::string::npos) << key << " in " << json;
  }

  JobSpec spec = good_spec();
  spec.priority = -7;
  spec.preemptible = true;
  spec.scale = ScaleMode::kThroughput;
  spec.scale_min_gain = 0.125;
  spec.scale_window = 2min;
  EXPECT_OK(validate(spec));
  expect_round_trips(spec);
  EXPECT_EQ(encode_job_spec(*decode_job_spec(encode_job_spec(spec))), encode_job_spec(spec));
  for (const char* pair : {R"("preemptible":true)", R"("priority":-7)", R"("scale":"throughput")",
                           R"("scale_min_gain":0.125)", R"("scale_window":"2m")"}) {
    EXPECT_NE(to_json(spec).find(pair), std::string::npos) << pair << " in " << to_json(spec);
  }
  spec.priority = kMaxPriority;
  expect_round_trips(spec);
  spec.priority = kMinPriority;
  expect_round_trips(spec);
  spec.scale_min_gain = 1.0;
  expect_round_trips(spec);
}

TEST(JobSpecTest, SchedulingFieldsAreValidatedByName) {
  const auto problem = [](const std::function<void(JobSpec&)>& mutate) {
    JobSpec spec = good_spec();
    mutate(spec);
    const Status s = validate(spec);
    return s.ok() ? std::string("(valid)") : s.error().message;
  };
  EXPECT_EQ(problem([](JobSpec& s) { s.priority = kMaxPriority + 1; }),
            "priority: 1000001 is outside -1000000..1000000");
  EXPECT_EQ(problem([](JobSpec& s) { s.priority = kMinPriority - 1; }),
            "priority: -1000001 is outside -1000000..1000000");
  EXPECT_EQ(problem([](JobSpec& s) { s.scale_min_gain = 0; }),
            "scale_min_gain: 0.0 is not a fraction above 0 and at most 1");
  EXPECT_EQ(problem([](JobSpec& s) { s.scale_min_gain = 1.5; }),
            "scale_min_gain: 1.5 is not a fraction above 0 and at most 1");
  EXPECT_EQ(problem([](JobSpec& s) { s.scale_min_gain = std::nan(""); }),
            "scale_min_gain: NaN is not a fraction above 0 and at most 1");
  EXPECT_EQ(problem([](JobSpec& s) { s.scale_window = 9s; }),
            "scale_window: 9s is outside 10s..1h");
  EXPECT_EQ(problem([](JobSpec& s) { s.scale_window = 61min; }),
            "scale_window: 1h1m is outside 10s..1h");
  EXPECT_EQ(problem([](JobSpec& s) { s.scale = static_cast<ScaleMode>(2); }),
            "scale: must be \"fixed\" or \"throughput\"");
  EXPECT_EQ(problem([](JobSpec& s) {
              s.scale_window = 10s;
              s.scale_min_gain = 1;
              s.priority = -1000000;
            }),
            "(valid)");
}

TEST(JobSpecTest, SchedulingFieldsJsonErrorsNameTheField) {
  const auto error = [](const std::string& fields) {
    Result<JobSpec> spec = job_spec_from_json(R"({"name":"x","command":["x"],)" + fields + "}");
    return spec.ok() ? std::string("(parsed)") : spec.error().message;
  };
  EXPECT_EQ(error(R"("priority":"high")"), "priority: expected an integer, got string");
  EXPECT_EQ(error(R"("priority":1.5)"), "priority: expected an integer, got a fraction");
  EXPECT_EQ(error(R"("priority":3000000000)"), "priority: 3000000000 is out of range");
  EXPECT_EQ(error(R"("priority":-3000000000)"), "priority: -3000000000 is out of range");
  EXPECT_EQ(error(R"("preemptible":1)"), "preemptible: expected true or false, got number");
  EXPECT_EQ(error(R"("scale":"fast")"), "scale: 'fast' is not \"fixed\" or \"throughput\"");
  EXPECT_EQ(error(R"("scale_min_gain":"5%")"), "scale_min_gain: expected a number, got string");
  EXPECT_EQ(error(R"("scale_window":60)"),
            "scale_window: expected a duration string such as \"10s\", got number");
  EXPECT_EQ(error(R"("scale":"fixed","priority":-3,"scale_min_gain":1)"), "(parsed)");
}

// Hostile MessagePack for the new keys: a priority out of int32 range or of the wrong type, a
// gain that is not a float and an unknown scale are one error each, never a crash.
TEST(JobSpecTest, SchedulingFieldsMsgpackRejectsWrongTypes) {
  const std::string good = encode_job_spec(good_spec());
  ASSERT_EQ(static_cast<unsigned char>(good[0]) & 0xf0, 0x80);  // a fixmap
  const auto with = [&](const std::string& key_and_value) {
    std::string bytes = good;
    bytes[0] = static_cast<char>(bytes[0] + 1);
    return decode_job_spec(bytes + key_and_value);
  };
  EXPECT_OK(with(std::string("\xa2pr\xd0\xf9", 5)));  // int8 -7
  EXPECT_EQ(with(std::string("\xa2pr\xd3\x80\0\0\0\0\0\0\0", 12)).ok(), false);
  EXPECT_EQ(with(std::string("\xa2pr\xa1x", 5)).ok(), false);
  EXPECT_EQ(with(std::string("\xa2sg\xc3", 4)).ok(), false);  // true
  EXPECT_EQ(with(std::string("\xa2sm\x02", 4)).ok(), false);
  Result<JobSpec> big = with(std::string("\xa2pr\xce\x80\0\0\0", 8));
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.error().message.find("'pr' that is not a 32-bit integer"), std::string::npos)
      << big.error().message;
}

TEST(JobSpecTest, JsonMinimalUsesDefaults) {
  Result<JobSpec> spec = job_spec_from_json(R"({"name":"a","command":["/bin/true"]})");
  ASSERT_OK(spec);
  EXPECT_EQ(spec->min_nodes, 1u);
  EXPECT_EQ(spec->max_nodes, 1u);
  EXPECT_EQ(spec->restart_backoff, JobSpec{}.restart_backoff);
  EXPECT_FALSE(spec->last_call.has_value());
  EXPECT_OK(validate(*spec));
}

struct JsonCase {
  const char* label;
  const char* json;
  const char* message;
};

void PrintTo(const JsonCase& c, std::ostream* os) { *os << c.label; }

class JobSpecJson : public ::testing::TestWithParam<JsonCase> {};

TEST_P(JobSpecJson, ErrorsNameTheField) {
  Result<JobSpec> spec = job_spec_from_json(GetParam().json);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.error().message, GetParam().message);
}

INSTANTIATE_TEST_SUITE_P(
    Errors, JobSpecJson,
    ::testing::Values(JsonCase{"NotJson", "{", "spec: the text is not valid JSON"},
                      JsonCase{"NotObject", "[1]", "spec: expected a JSON object, got array"},
                      JsonCase{"NoName", R"({"command":["x"]})", "name: is required"},
                      JsonCase{"NoCommand", R"({"name":"x"})", "command: is required"},
                      JsonCase{"MinNodesString", R"({"name":"x","command":["x"],"min_nodes":"2"})",
                               "min_nodes: expected a non-negative integer, got string"},
                      JsonCase{"MinNodesNegative", R"({"name":"x","command":["x"],"min_nodes":-2})",
                               "min_nodes: -2 is negative"},
                      JsonCase{"MaxNodesFraction",
                               R"({"name":"x","command":["x"],"max_nodes":2.5})",
                               "max_nodes: expected a non-negative integer, got a fraction"},
                      JsonCase{"UidTooBig", R"({"name":"x","command":["x"],"uid":4294967296})",
                               "uid: 4294967296 is out of range"},
                      JsonCase{"CommandNotArray", R"({"name":"x","command":"x"})",
                               "command: expected an array of strings, got string"},
                      JsonCase{"CommandElement", R"({"name":"x","command":["x",3]})",
                               "command[1]: expected a string, got number"},
                      JsonCase{"EnvValue", R"({"name":"x","command":["x"],"env":{"A":1}})",
                               "env.A: expected a string, got number"},
                      JsonCase{"DurationNumber", R"({"name":"x","command":["x"],"last_call":10})",
                               "last_call: expected a duration string such as \"10s\", got number"},
                      JsonCase{"UnknownField", R"({"name":"x","command":["x"],"min_node":2})",
                               "spec: unknown field 'min_node'"}),
    [](const auto& param_info) { return std::string(param_info.param.label); });

TEST(JobSpecTest, JsonBadDurationQuotesTheParser) {
  Result<JobSpec> spec =
      job_spec_from_json(R"({"name":"x","command":["x"],"restart_backoff":"10"})");
  ASSERT_FALSE(spec.ok());
  EXPECT_TRUE(spec.error().message.starts_with("restart_backoff: ")) << spec.error().message;
  EXPECT_GT(spec.error().message.size(), std::string("restart_backoff: ").size());
}

TEST(JobSpecTest, MsgpackRoundTrip) {
  for (bool with_last_call : {true, false}) {
    JobSpec spec = good_spec();
    if (!with_last_call) spec.last_call.reset();
    const std::string bytes = encode_job_spec(spec);
    Result<JobSpec> back = decode_job_spec(bytes);
    ASSERT_OK(back);
    EXPECT_EQ(*back, spec);
    EXPECT_EQ(encode_job_spec(*back), bytes);
  }
}

// The exported environment round-trips in both encodings; an entry written before
// it existed (no "xe" key) reads back as none.
TEST(JobSpecTest, ExportedEnvRoundTripsAndIsOptionalOnTheWire) {
  JobSpec spec = good_spec();
  spec.exported_env = {{"PYTHONPATH", "/home/alice/lib"}, {"NCCL_DEBUG", "WARN"}};
  expect_round_trips(spec);
  EXPECT_OK(validate(spec));

  const JobSpec old = good_spec();
  EXPECT_EQ(encode_job_spec(old).find("xe"), std::string::npos);
  Result<JobSpec> back = decode_job_spec(encode_job_spec(old));
  ASSERT_OK(back);
  EXPECT_TRUE(back->exported_env.empty());
}

template <typename R>
std::string error_of(const R& result) {
  return result.ok() ? std::string("(no error)") : result.error().message;
}
#define EXPECT_ERROR_CONTAINS(expr, text) \
  EXPECT_NE(error_of(expr).find(text), std::string::npos) << error_of(expr)

// Warm interpreters: the flag round-trips in both encodings (absent on the wire when false, so
// entries written before it existed read back as cold), and needs a Python command.
TEST(JobSpecTest, WarmRoundTripsAndNeedsAPythonCommand) {
  JobSpec spec = good_spec();
  spec.command = {"/home/alice/venv/bin/python3", "-u", "train.py", "--epochs", "3"};
  spec.warm = true;
  EXPECT_OK(validate(spec));
  expect_round_trips(spec);

  spec.warm = false;
  EXPECT_EQ(to_json(spec).find("warm"), std::string::npos);
  Result<JobSpec> cold = decode_job_spec(encode_job_spec(spec));
  ASSERT_OK(cold);
  EXPECT_FALSE(cold->warm);

  spec = good_spec();  // elastic-trainer ...
  spec.warm = true;
  EXPECT_ERROR_CONTAINS(validate(spec),
                        "warm: needs a Python command: the command must start with a Python "
                        "interpreter (python, python3, python3.11 or a path to one), not "
                        "'elastic-trainer'");
  spec.command = {"python3", "-c", "print(1)"};
  EXPECT_ERROR_CONTAINS(validate(spec),
                        "warm: needs a Python command: the interpreter option '-c'");
  Result<JobSpec> bad = job_spec_from_json(R"({"name":"a","command":["python3","x.py"],"warm":1})");
  EXPECT_ERROR_CONTAINS(bad, "warm: expected true or false, got number");
}

TEST(JobSpecTest, ExportedEnvCarriesNoHostVariablesAndSharesEnvsLimits) {
  JobSpec spec = good_spec();
  spec.exported_env = {{"HOSTNAME", "login1"}, {"RANK", "3"}, {"SLURM_PROCID", "1"}, {"OK", "1"}};
  Status s = validate(spec);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message,
            "exported_env: HOSTNAME describes the submitting host or session and is never "
            "exported (set it in env to pass it on)\n"
            "exported_env: RANK is set by the daemon for every worker and cannot be overridden\n"
            "exported_env: SLURM_PROCID describes the submitting host or session and is never "
            "exported (set it in env to pass it on)");
  // env may still name them (RANK excepted), and exported values are not placeholders.
  spec = good_spec();
  spec.env["HOSTNAME"] = "h";
  spec.exported_env["PS_FORMAT"] = "{unknown} }";
  EXPECT_OK(validate(spec));

  spec = good_spec();
  for (std::size_t i = 0; i + 1 < kMaxEnvVars; ++i) spec.exported_env["V" + std::to_string(i)] = "";
  s = validate(spec);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message,
            "exported_env: has 1023 variables, with env's 2 more than the limit of 1024");

  spec = good_spec();
  for (int i = 0; i < 20; ++i) spec.exported_env["V" + std::to_string(i)] = std::string(16000, 'v');
  s = validate(spec);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message,
            "command: with env and exported_env takes 320157 bytes, more than the limit of "
            "262144");
}

TEST(JobSpecTest, HostVariablesAreNeverExported) {
  for (const char* name : {"HOSTNAME",
                           "HOME",
                           "USER",
                           "LOGNAME",
                           "SHELL",
                           "PWD",
                           "OLDPWD",
                           "SHLVL",
                           "_",
                           "DISPLAY",
                           "XAUTHORITY",
                           "XDG_RUNTIME_DIR",
                           "XDG_SESSION_ID",
                           "DBUS_SESSION_BUS_ADDRESS",
                           "SSH_AUTH_SOCK",
                           "SSH_CONNECTION",
                           "TMUX",
                           "NOTIFY_SOCKET",
                           "SLURM_JOB_ID",
                           "PMI_RANK",
                           "PMIX_RANK",
                           "OMPI_COMM_WORLD_RANK",
                           "NODE_RANK",
                           "ROCR_VISIBLE_DEVICES",
                           "NVIDIA_VISIBLE_DEVICES",
                           "RANK",
                           "LOCAL_RANK",
                           "MASTER_ADDR",
                           "CUDA_VISIBLE_DEVICES",
                           "TORCHELASTIC_RUN_ID",
                           "ELASTIC_CONTROL_SOCKET"}) {
    EXPECT_TRUE(is_unexported_env(name)) << name;
  }
  for (const char* name : {"PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "CONDA_PREFIX",
                           "NCCL_DEBUG", "NCCL_SOCKET_IFNAME", "OMP_NUM_THREADS", "LANG", "TERM",
                           "HF_HOME", "OMPI_MCA_btl", "SSH"}) {
    EXPECT_FALSE(is_unexported_env(name)) << name;
  }
}

// Placeholders are checked where a spec is validated (elasticctl at submit, the daemon again).
TEST(JobSpecTest, UnknownPlaceholdersNameTheVariableOrArgument) {
  JobSpec spec = good_spec();
  spec.env["CKPT"] = "{checkpoint_dir}/mine";
  spec.env["TAG"] = "{job_id}-r{round} {{literal}}";
  spec.command = {"/opt/{odd}/python3", "--save", "{checkpoint_dir}", "{{\"lr\": 0.1}}"};
  EXPECT_OK(validate(spec));  // the program itself is never expanded

  spec.env["BAD"] = "{ckpt}/x";
  spec.command.push_back("{\"lr\": 0.1}");
  spec.command.push_back("a}b");
  const Status s = validate(spec);
  ASSERT_FALSE(s.ok());
  // Arguments are taken as they are (only the placeholders themselves are replaced), so JSON
  // and stray braces there are fine; env values are checked.
  EXPECT_EQ(s.error().message,
            "env: the value of BAD uses {ckpt}, which is not a placeholder (the placeholders are "
            "{job_id}, {checkpoint_dir} and {round}; write {{ and }} for literal braces)");
}

TEST(JobSpecTest, MsgpackTruncationsAreErrors) {
  const std::string bytes = encode_job_spec(good_spec());
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(decode_job_spec(bytes.substr(0, n)).ok()) << n;
  }
}

TEST(JobSpecTest, HostileBytesNeverCrash) {
  const std::string bytes = encode_job_spec(good_spec());
  Rng rng(7);
  for (int i = 0; i < 3000; ++i) {
    std::string mutated = bytes;
    const int flips = 1 + static_cast<int>(rng.below(4));
    for (int f = 0; f < flips; ++f) {
      mutated[rng.below(mutated.size())] = static_cast<char>(rng.below(256));
    }
    (void)decode_job_spec(mutated);
    std::string random(rng.below(200), '\0');
    for (char& c : random) c = static_cast<char>(rng.below(256));
    (void)decode_job_spec(random);
    (void)job_spec_from_json(random);
    std::string json = to_json(good_spec());
    json[rng.below(json.size())] = static_cast<char>(rng.below(256));
    (void)job_spec_from_json(json);
  }
  // Deep nesting and huge inputs are refused without recursion trouble.
  EXPECT_FALSE(job_spec_from_json(std::string(100000, '[')).ok());
  EXPECT_FALSE(job_spec_from_json(std::string(2 * 1024 * 1024, ' ')).ok());
}

}  // namespace
}  // namespace elastic::rendezvous
