// The config loader: the shipped conf/elasticd.toml equals the built-in defaults and lists every
// field; precedence; --set parsing; and the exact text of every error message.
#include "daemon/config/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdlib.h>
#include <unistd.h>
#include "tests/support/temp_dir.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "daemon/config/schema.h"

namespace elastic::config {
namespace {

using elastic::testing::TempDir;

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::IsEmpty;

// ---- helpers ------------------------------------------------------------------------------

// Number of members of an aggregate, counted by brace-initialising it with ever more
// arguments that convert to anything (the technique of Boost.PFR). Lets a test notice a struct
// field that visit_config() does not list.
struct AnyField {
  template <typename T>
  operator T() const;  // NOLINT: implicit on purpose; never defined, only used unevaluated
};

template <typename T, typename... Fields>
constexpr std::size_t count_fields() {
  if constexpr (requires { T{Fields{}..., AnyField{}}; }) {
    return count_fields<T, Fields..., AnyField>();
  } else {
    return sizeof...(Fields);
  }
}

std::string source_file(const std::string& relative) {
  return std::string(ELASTIC_SOURCE_DIR) + "/" + relative;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Errors of loading `toml` (written to a file) followed by `overrides`; {} when it loads.
struct Outcome {
  std::string file;
  std::vector<std::string> errors;
};

Outcome load_text(const TempDir& dir, const std::string& toml,
                  std::vector<std::string> overrides = {}) {
  Outcome outcome;
  outcome.file = dir.write("elasticd.toml", toml);
  auto loaded = load_config(LoadOptions{
      .file = outcome.file, .file_must_exist = true, .overrides = std::move(overrides)});
  if (!loaded.ok()) outcome.errors = split_lines(loaded.error().message);
  return outcome;
}

std::vector<std::string> override_errors(std::vector<std::string> overrides) {
  auto loaded = load_config(
      LoadOptions{.file = "", .file_must_exist = true, .overrides = std::move(overrides)});
  if (loaded.ok()) return {};
  return split_lines(loaded.error().message);
}

Result<DaemonConfig> with_overrides(std::vector<std::string> overrides) {
  auto loaded = load_config(
      LoadOptions{.file = "", .file_must_exist = true, .overrides = std::move(overrides)});
  if (!loaded.ok()) return loaded.error();
  return loaded->config;
}

// ---- the shipped file and the key list -----------------------------------------------------

TEST(Defaults, AreValid) { EXPECT_THAT(validate(DaemonConfig{}), IsEmpty()); }

TEST(ShippedFile, EqualsTheBuiltInDefaults) {
  auto loaded = load_config(LoadOptions{
      .file = source_file("conf/elasticd.toml"), .file_must_exist = true, .overrides = {}});
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_TRUE(loaded->config == DaemonConfig{}) << to_toml(loaded->config);
  EXPECT_EQ(loaded->source, source_file("conf/elasticd.toml"));
  EXPECT_FALSE(loaded->file_missing);
}

// Every setting appears in the file, in schema order, each right under a comment line giving
// the reason; the file has no other settings (those would fail to load anyway).
TEST(ShippedFile, ListsEveryKeyInOrderWithAComment) {
  std::ifstream in(source_file("conf/elasticd.toml"));
  ASSERT_TRUE(in) << "cannot open conf/elasticd.toml";
  std::vector<std::string> keys;
  std::string section;
  std::string previous;
  for (std::string line; std::getline(in, line); previous = line) {
    if (line.empty() || line[0] == '#') continue;
    if (line[0] == '[') {
      section = line.substr(1, line.find(']') - 1);
      continue;
    }
    const auto equals = line.find(" = ");
    ASSERT_NE(equals, std::string::npos) << "unexpected line: " << line;
    const std::string key = section + "." + line.substr(0, equals);
    keys.push_back(key);
    EXPECT_TRUE(!previous.empty() && previous[0] == '#')
        << key << " needs a one-line comment right above it";
  }
  EXPECT_THAT(keys, ElementsAreArray(all_keys()));
}

struct SectionCounter {
  std::map<std::string, std::size_t> fields;
  std::string current;
  void section(const char* name) { current = name; }
  template <typename T>
  void field(const char*, const T&) {
    ++fields[current];
  }
};

TEST(Schema, ListsEveryStructField) {
  SectionCounter counter;
  const DaemonConfig config;
  visit_config(config, counter);
  EXPECT_EQ(counter.fields.size(), count_fields<DaemonConfig>());
  EXPECT_EQ(counter.fields["node"], count_fields<NodeConfig>());
  EXPECT_EQ(counter.fields["transport"], count_fields<TransportConfig>());
  EXPECT_EQ(counter.fields["membership"], count_fields<MembershipConfig>());
  EXPECT_EQ(counter.fields["consensus"], count_fields<ConsensusConfig>());
  EXPECT_EQ(counter.fields["rendezvous"], count_fields<RendezvousConfig>());
  EXPECT_EQ(counter.fields["spawner"], count_fields<SpawnerConfig>());
  EXPECT_EQ(counter.fields["checkpoint"], count_fields<CheckpointConfig>());
  EXPECT_EQ(counter.fields["control"], count_fields<ControlConfig>());
  EXPECT_EQ(counter.fields["limits"], count_fields<LimitsConfig>());
  EXPECT_EQ(counter.fields["logging"], count_fields<LoggingConfig>());
}

TEST(Schema, KeysAreUnique) {
  const auto keys = all_keys();
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()).size(), keys.size());
  EXPECT_EQ(keys.front(), "node.name");
  EXPECT_EQ(keys.back(), "logging.file");
}

// ---- sources and precedence ----------------------------------------------------------------

TEST(Load, NoFileMeansDefaults) {
  auto loaded = load_config(LoadOptions{.file = "", .file_must_exist = true, .overrides = {}});
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_TRUE(loaded->config == DaemonConfig{});
  EXPECT_EQ(loaded->source, "built-in defaults");
  EXPECT_FALSE(loaded->file_missing);
}

TEST(Load, MissingOptionalFileMeansDefaults) {
  TempDir dir;
  auto loaded = load_config(LoadOptions{
      .file = dir.path() + "/absent.toml", .file_must_exist = false, .overrides = {"node.name=a"}});
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_TRUE(loaded->file_missing);
  EXPECT_EQ(loaded->source, "built-in defaults + 1 --set override");
  EXPECT_EQ(loaded->config.node.name, "a");
}

TEST(Load, MissingRequiredFileIsAnError) {
  TempDir dir;
  const std::string file = dir.path() + "/absent.toml";
  auto loaded = load_config(LoadOptions{.file = file, .file_must_exist = true, .overrides = {}});
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.error().message, file + ": cannot read the config file: it does not exist");
}

TEST(Load, DirectoryIsAnError) {
  TempDir dir;
  auto loaded =
      load_config(LoadOptions{.file = dir.path(), .file_must_exist = false, .overrides = {}});
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.error().message,
            dir.path() + ": cannot read the config file: it is a directory");
}

TEST(Load, EmptyFileMeansDefaults) {
  TempDir dir;
  const auto outcome = load_text(dir, "");
  EXPECT_THAT(outcome.errors, IsEmpty());
}

TEST(Load, FileOverridesDefaultsAndSetOverridesFile) {
  TempDir dir;
  const std::string file = dir.write("elasticd.toml",
                                     "[node]\nname = \"from-file\"\ncluster_id = \"c1\"\n"
                                     "[membership]\nprobe_interval = \"2s\"\n");
  auto loaded = load_config(LoadOptions{
      .file = file,
      .file_must_exist = true,
      .overrides = {"node.name=from-set", "node.name=last-wins", "logging.level=debug"}});
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(loaded->config.node.name, "last-wins");
  EXPECT_EQ(loaded->config.node.cluster_id, "c1");
  EXPECT_EQ(loaded->config.membership.probe_interval, std::chrono::seconds(2));
  EXPECT_EQ(loaded->config.logging.level, LogLevel::kDebug);
  EXPECT_EQ(loaded->config.node.state_dir, "/var/lib/elastic");  // untouched default
  EXPECT_EQ(loaded->source, file + " + 3 --set overrides");
}

TEST(Load, SetValuesAreTomlWhenTheyParse) {
  auto config = with_overrides({
      R"(membership.seeds=["a@a:1","b@b:2"])",
      "spawner.bind_cpus=false",
      "transport.curve=true",
      "transport.secret_key_file=/etc/elastic/curve/secret",
      R"(transport.public_keys_dir="/etc/elastic/curve/public")",
      "node.name=123",  // a number, but node.name is a string: taken verbatim
      R"(node.cluster_id="quoted")",
      "membership.probe_interval=2s",
      R"(membership.probe_timeout="500ms")",
      "node.gpus=[0, 2]",
      "checkpoint.keep=7",
      "spawner.log_max_bytes=4096",
      "logging.format=json",
      R"(consensus.voters=["a", "b", "c"])",
  });
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_THAT(config->membership.seeds, ElementsAre("a@a:1", "b@b:2"));
  EXPECT_FALSE(config->spawner.bind_cpus);
  EXPECT_TRUE(config->transport.curve);
  EXPECT_EQ(config->transport.secret_key_file, "/etc/elastic/curve/secret");
  EXPECT_EQ(config->transport.public_keys_dir, "/etc/elastic/curve/public");
  EXPECT_EQ(config->node.name, "123");
  EXPECT_EQ(config->node.cluster_id, "quoted");
  EXPECT_EQ(config->membership.probe_interval, std::chrono::seconds(2));
  EXPECT_EQ(config->membership.probe_timeout, std::chrono::milliseconds(500));
  EXPECT_FALSE(config->node.gpus.detect);
  EXPECT_THAT(config->node.gpus.indices, ElementsAre(0, 2));
  EXPECT_EQ(config->checkpoint.keep, 7);
  EXPECT_EQ(config->spawner.log_max_bytes, 4096);
  EXPECT_EQ(config->logging.format, LogFormat::kJson);

  auto gpus = with_overrides({"node.gpus=[1]", "node.gpus=auto"});
  ASSERT_TRUE(gpus.ok()) << gpus.error().message;
  EXPECT_TRUE(gpus->node.gpus == GpuSelection{});
  auto none = with_overrides({"node.gpus=[]"});
  ASSERT_TRUE(none.ok()) << none.error().message;
  EXPECT_FALSE(none->node.gpus.detect);
  EXPECT_THAT(none->node.gpus.indices, IsEmpty());
}

TEST(Load, SetCannotSmuggleExtraKeysThroughANewline) {
  // Valid TOML, but two keys: not one value, so it is taken as a string (and rejected as a name).
  auto config = with_overrides({"node.nmae=1", "node.name=\"a\"\nlogging.level = \"debug\""});
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(split_lines(config.error().message),
              ElementsAre("--set node.nmae=1: node.nmae: unknown key (did you mean node.name?)",
                          "--set node.name=\"a\"\\nlogging.level = \"debug\": node.name: "
                          "\"\\\"a\\\"\\nlogging.level = \\\"debug\\\"\" may contain only "
                          "letters, digits, '.', '_' and '-' (at most 253)"));
}

// ---- writers -------------------------------------------------------------------------------

DaemonConfig unusual_config() {
  DaemonConfig c;
  c.node.name = "gpu-017.cluster";
  c.node.cluster_id = "prod_A";
  c.node.gpus = GpuSelection{.detect = false, .indices = {3, 1}};
  c.node.cpu_slots = 2;
  c.transport.advertise = "tcp://10.0.0.17:7946";
  c.transport.max_message_bytes = 5'000'000'000;
  c.transport.tcp_max_retransmit_timeout = std::chrono::milliseconds(1500);
  c.transport.curve = true;
  c.transport.secret_key_file = "/etc/elastic/key \"with\" quotes\\";
  c.transport.public_keys_dir = "/etc/elastic/keys";
  c.membership.seeds = {"n1@[fe80::1]:7946", "head@head:7946"};
  c.membership.tombstone_ttl = std::chrono::hours(48) + std::chrono::nanoseconds(1);
  c.consensus.voters = {"a", "b", "c"};
  c.spawner.bind_memory = false;
  c.control.admin_group = "hpc admins\t";
  c.control.metrics_listen = "0.0.0.0:9100";
  c.control.remote_listen = "tcp://0.0.0.0:7947";
  c.control.client_keys_dir = "/etc/elastic/clients";
  c.logging.level = LogLevel::kTrace;
  c.logging.format = LogFormat::kJson;
  c.logging.file = "/var/log/elastic/elasticd.log";
  return c;
}

TEST(ToToml, RoundTripsDefaultsAndUnusualValues) {
  TempDir dir;
  for (const DaemonConfig& config : {DaemonConfig{}, unusual_config()}) {
    ASSERT_THAT(validate(config), IsEmpty());
    const std::string file = dir.write("printed.toml", to_toml(config));
    auto loaded = load_config(LoadOptions{.file = file, .file_must_exist = true, .overrides = {}});
    ASSERT_TRUE(loaded.ok()) << loaded.error().message << "\n" << to_toml(config);
    EXPECT_TRUE(loaded->config == config) << to_toml(config);
  }
}

TEST(ToToml, PrintsSectionsAndCanonicalDurations) {
  const std::string text = to_toml(DaemonConfig{});
  EXPECT_EQ(text.rfind("[node]\nname = \"\"\ncluster_id = \"elastic\"\n", 0), 0u) << text;
  EXPECT_NE(text.find("\n[membership]\nseeds = []\nprobe_interval = \"1s\"\n"
                      "probe_timeout = \"300ms\"\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("gpus = \"auto\"\n"), std::string::npos);
  EXPECT_NE(text.find("tombstone_ttl = \"24h\"\n"), std::string::npos);
  EXPECT_NE(to_toml(unusual_config()).find("gpus = [3, 1]\n"), std::string::npos);
}

TEST(ToJson, MirrorsTheToml) {
  const auto json = nlohmann::json::parse(to_json(unusual_config()));
  EXPECT_EQ(json.size(), 11u);
  EXPECT_EQ(json["membership"]["probe_timeout"], "300ms");
  EXPECT_EQ(json["membership"]["tombstone_ttl"], "48h0.000000001s");
  EXPECT_EQ(json["node"]["gpus"], nlohmann::json::array({3, 1}));
  EXPECT_EQ(json["transport"]["max_message_bytes"], 5'000'000'000);
  EXPECT_EQ(json["transport"]["curve"], true);
  EXPECT_EQ(json["consensus"]["voters"], nlohmann::json::array({"a", "b", "c"}));
  EXPECT_EQ(json["logging"]["level"], "trace");
  EXPECT_EQ(nlohmann::json::parse(to_json(DaemonConfig{}))["node"]["gpus"], "auto");
  std::size_t keys = 0;
  for (const auto& [section, values] : json.items()) keys += values.size();
  EXPECT_EQ(keys, all_keys().size());
}

// ---- limits -----------------------------------------------------------------------------------

// The limits section: defaults, entries for users and groups (as tables or inline), group names
// resolved to gids, and every problem on its own line naming the key and the line.
TEST(Limits, UsersAndGroupsAreReadAndGroupsResolved) {
  TempDir dir;
  const auto outcome = load_text(dir,
                                 "[limits]\n"
                                 "priority_ceiling = 10\n"
                                 "max_nodes_per_user = 8\n"
                                 "max_running_jobs_per_group = 3\n"
                                 "[limits.users.alice]\n"
                                 "max_nodes = 16\n"
                                 "[limits.users.bob]\n"
                                 "max_running_jobs = 1\n"
                                 "max_nodes = 0\n"
                                 "[limits.groups.root]\n"
                                 "max_nodes = 2\n");
  ASSERT_THAT(outcome.errors, IsEmpty());
  auto loaded =
      load_config(LoadOptions{.file = outcome.file, .file_must_exist = true, .overrides = {}});
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  const LimitsConfig& limits = loaded->config.limits;
  EXPECT_EQ(limits.priority_ceiling, 10);
  EXPECT_EQ(limits.max_nodes_per_user, 8);
  EXPECT_EQ(limits.max_running_jobs_per_user, 0);
  EXPECT_EQ(limits.max_running_jobs_per_group, 3);
  ASSERT_EQ(limits.users.entries.size(), 2u);
  EXPECT_EQ(limits.users.entries.at("alice"), (LimitEntry{16, 0, 0}));
  EXPECT_EQ(limits.users.entries.at("bob"), (LimitEntry{0, 1, 0}));
  ASSERT_EQ(limits.groups.entries.size(), 1u);
  EXPECT_EQ(limits.groups.entries.at("root"), (LimitEntry{2, 0, 0})) << "root's gid is 0";

  // Inline tables through --set, and the TOML and JSON writers give them back.
  Result<DaemonConfig> set =
      with_overrides({"limits.users={ \"carol d\" = { max_nodes = 4, max_running_jobs = 2 } }",
                      "limits.groups={ root = { max_running_jobs = 5 } }"});
  ASSERT_TRUE(set.ok()) << set.error().message;
  EXPECT_EQ(set->limits.users.entries.at("carol d"), (LimitEntry{4, 2, 0}));
  EXPECT_EQ(set->limits.groups.entries.at("root"), (LimitEntry{0, 5, 0}));
  const std::string file = dir.write("printed.toml", to_toml(*set));
  auto printed = load_config(LoadOptions{.file = file, .file_must_exist = true, .overrides = {}});
  ASSERT_TRUE(printed.ok()) << printed.error().message << "\n" << to_toml(*set);
  EXPECT_TRUE(printed->config == *set) << to_toml(*set);
  EXPECT_NE(
      to_toml(*set).find("users = { \"carol d\" = { max_nodes = 4, max_running_jobs = 2 } }\n"),
      std::string::npos)
      << to_toml(*set);
  const auto json = nlohmann::json::parse(to_json(*set));
  EXPECT_EQ(json["limits"]["groups"]["root"]["gid"], 0);
  EXPECT_EQ(json["limits"]["users"]["carol d"]["max_running_jobs"], 2);
}

TEST(Limits, ProblemsNameTheKeyAndTheLine) {
  TempDir dir;
  const auto outcome = load_text(dir,
                                 "[limits]\n"
                                 "priority_ceiling = 2000000\n"
                                 "max_nodes_per_user = -1\n"
                                 "[limits.users.alice]\n"
                                 "max_nodes = -2\n"
                                 "max_jobs = 1\n"
                                 "[limits.groups.no-such-group-elastic-test]\n"
                                 "max_nodes = 1\n"
                                 "[limits.groups.root]\n"
                                 "max_running_jobs = \"3\"\n");
  const std::string f = outcome.file;
  EXPECT_THAT(outcome.errors,
              ElementsAre(f + ":5: limits.users.alice.max_nodes: must be at least 0 (got -2)",
                          f + ":6: limits.users.alice.max_jobs: unknown key (an entry has "
                              "max_nodes and max_running_jobs)",
                          f + ":7: limits.groups.no-such-group-elastic-test: there is no group "
                              "\"no-such-group-elastic-test\" on this host",
                          f + ":10: limits.groups.root.max_running_jobs: expected an integer, "
                              "got a string (\"3\")",
                          f + ":2: limits.priority_ceiling: is 2000000; it must be a job "
                              "priority, -1000000 to 1000000",
                          f + ":3: limits.max_nodes_per_user: must be at least 0 (got -1)"));
  EXPECT_THAT(override_errors({"limits.users=3"}),
              ElementsAre("--set limits.users=3: limits.users: expected a table of user names, "
                          "each with max_nodes and max_running_jobs, got an integer (3)"));
  EXPECT_THAT(override_errors({"limits.groups={ nosuchgroup-elastic = { max_nodes = 1 } }"}),
              ElementsAre("--set limits.groups={ nosuchgroup-elastic = { max_nodes = 1 } }: "
                          "limits.groups: nosuchgroup-elastic: there is no group "
                          "\"nosuchgroup-elastic\" on this host"));
}

// ---- file errors: one exact line each ------------------------------------------------------

struct FileCase {
  const char* name;
  const char* toml;
  std::vector<const char*> errors;  // "@" stands for the file path
};

// gtest prints parameters into ctest's test names: the case's name, not raw bytes.
void PrintTo(const FileCase& c, std::ostream* out) { *out << c.name; }

class FileErrors : public ::testing::TestWithParam<FileCase> {};

TEST_P(FileErrors, ExactMessages) {
  TempDir dir;
  const auto outcome = load_text(dir, GetParam().toml);
  std::vector<std::string> expected;
  for (const char* line : GetParam().errors) {
    std::string text = line;
    if (text.rfind("@", 0) == 0) text = outcome.file + text.substr(1);
    expected.push_back(text);
  }
  EXPECT_THAT(outcome.errors, ElementsAreArray(expected));
}

INSTANTIATE_TEST_SUITE_P(
    Table, FileErrors,
    ::testing::Values(
        FileCase{"UnknownKeyTypo",
                 "[transport]\nbnid = \"tcp://0.0.0.0:1\"\n",
                 {"@:2: transport.bnid: unknown key (did you mean transport.bind?)"}},
        FileCase{"UnknownKeyInWrongSection",
                 "[node]\nseeds = []\n",
                 {"@:2: node.seeds: unknown key (did you mean membership.seeds?)"}},
        FileCase{"UnknownKeyNoSuggestion",
                 "[transport]\nzzzzzzzz = 1\n",
                 {"@:2: transport.zzzzzzzz: unknown key"}},
        FileCase{"UnknownSectionTypo",
                 "[membershp]\nseeds = []\n",
                 {"@:1: membershp: unknown section (did you mean [membership]?)"}},
        FileCase{"UnknownSectionNoSuggestion",
                 "[gpu]\nx = 1\n",
                 {"@:1: gpu: unknown section (sections are node, transport, membership, "
                  "consensus, rendezvous, spawner, checkpoint, control, dashboard, limits, logging)"}},
        FileCase{"TopLevelKey",
                 "name = \"a\"\n",
                 {"@:1: name: unknown top-level key (did you mean node.name?)"}},
        FileCase{"SectionIsNotATable",
                 "node = 1\n",
                 {"@:1: node: expected a table ([node]), got an integer (1)"}},
        FileCase{"NestedTable", "[node.extra]\nx = 1\n", {"@:1: node.extra: unknown key"}},
        FileCase{"StringExpected",
                 "[node]\nname = 5\n",
                 {"@:2: node.name: expected a string, got an integer (5)"}},
        FileCase{"StringExpectedGotTable",
                 "[node]\nname = { first = \"a\" }\n",
                 {"@:2: node.name: expected a string, got a table"}},
        FileCase{"IntegerExpected",
                 "[checkpoint]\nkeep = \"3\"\n",
                 {"@:2: checkpoint.keep: expected an integer, got a string (\"3\")"}},
        FileCase{"IntegerExpectedGotFloat",
                 "[checkpoint]\nkeep = 3.5\n",
                 {"@:2: checkpoint.keep: expected an integer, got a float (3.5)"}},
        FileCase{"IntegerOutOfRange",
                 "[transport]\nsend_hwm = 99999999999\n",
                 {"@:2: transport.send_hwm: 99999999999 is out of range (at most 2147483647)"}},
        FileCase{"BooleanExpected",
                 "[spawner]\nbind_cpus = \"yes\"\n",
                 {"@:2: spawner.bind_cpus: expected a boolean (true or false), got a string "
                  "(\"yes\")"}},
        FileCase{"DurationExpected",
                 "[membership]\nprobe_interval = 1\n",
                 {"@:2: membership.probe_interval: expected a duration string such as "
                  "\"500ms\" or \"30s\", got an integer (1)"}},
        FileCase{"BadDuration",
                 "[membership]\nprobe_timeout = \"5x\"\n",
                 {"@:2: membership.probe_timeout: \"5x\" is not a duration: unknown unit \"x\" "
                  "(use e.g. \"500ms\", \"30s\", \"1m30s\"; units: ns, us, ms, s, m, h)"}},
        FileCase{"DurationWithoutUnit",
                 "[consensus]\nelection_timeout = \"1000\"\n",
                 {"@:2: consensus.election_timeout: \"1000\" is not a duration: missing unit "
                  "after 1000 (use e.g. \"500ms\", \"30s\", \"1m30s\"; units: ns, us, ms, s, m, "
                  "h)"}},
        FileCase{"StringArrayExpected",
                 "[membership]\nseeds = \"a:1\"\n",
                 {"@:2: membership.seeds: expected an array of strings, got a string (\"a:1\")"}},
        FileCase{"StringArrayElement",
                 "[membership]\nseeds = [\"a:1\", 7]\n",
                 {"@:2: membership.seeds: expected an array of strings, but element 2 is an "
                  "integer (7)"}},
        FileCase{"EnumValue",
                 "[logging]\nlevel = \"verbose\"\nformat = \"xml\"\n",
                 {"@:2: logging.level: \"verbose\" is not one of trace, debug, info, warn, error",
                  "@:3: logging.format: \"xml\" is not one of text, json"}},
        FileCase{"EnumType",
                 "[logging]\nlevel = 3\n",
                 {"@:2: logging.level: expected one of trace, debug, info, warn, error, got an "
                  "integer (3)"}},
        FileCase{"GpusWord",
                 "[node]\ngpus = \"all\"\n",
                 {"@:2: node.gpus: expected \"auto\" or an array of GPU indices such as [0, 1], "
                  "got a string (\"all\")"}},
        FileCase{"GpusElement",
                 "[node]\ngpus = [0, \"1\"]\n",
                 {"@:2: node.gpus: expected \"auto\" or an array of GPU indices such as [0, 1], "
                  "but element 2 is a string (\"1\")"}},
        FileCase{"SyntaxMissingEquals",
                 "[node]\nname  \"a\"\n",
                 {"@:2: TOML syntax error: missing key-value separator `=` (should be `=`)"}},
        FileCase{"SyntaxUnterminatedString",
                 "[node]\nname = \"a\n",
                 {"@:2: TOML syntax error: the next token is not a valid string"}},
        FileCase{"SyntaxDuplicateKey",
                 "[node]\nname = \"a\"\nname = \"b\"\n",
                 {"@:3: TOML syntax error: value (\"name\") already exists. (value defined "
                  "twice)"}},
        FileCase{"SyntaxUnquotedDuration",
                 "[membership]\nprobe_interval = 2s\n",
                 {"@:2: TOML syntax error: invalid line format (expected newline, but got "
                  "'s'.)"}},
        FileCase{"CrossFieldFromFile",
                 "[membership]\nprobe_interval = \"1s\"\nprobe_timeout = \"500ms\"\n",
                 {"@:3: membership.probe_timeout: 500ms must be at most a third of "
                  "membership.probe_interval (1s) so that indirect probes fit in one period"}},
        // Blame goes to the key the file set, even when the line names the other key.
        FileCase{"CrossFieldBlamesTheSetKey",
                 "[consensus]\n\nelection_timeout = \"200ms\"\n",
                 {"@:3: consensus.heartbeat_interval: 100ms must be at most a third of "
                  "consensus.election_timeout (200ms)"}},
        // A value that cannot be read is reported once; rules that involve it stay quiet.
        FileCase{"UnreadableValueSuppressesRules",
                 "[membership]\nprobe_timeout = \"2\"\nprobe_interval = \"100ms\"\n",
                 {"@:2: membership.probe_timeout: \"2\" is not a duration: missing unit after 2 "
                  "(use e.g. \"500ms\", \"30s\", \"1m30s\"; units: ns, us, ms, s, m, h)"}},
        FileCase{"AllErrorsInFileOrder",
                 "[node]\nname = 1\ncolor = \"red\"\n\n[checkpoint]\nkeep = 0\n"
                 "[membership]\nprobe_timeout = \"1h\"\n[logging]\nlevel = \"loud\"\n",
                 {"@:2: node.name: expected a string, got an integer (1)",
                  "@:3: node.color: unknown key",
                  "@:10: logging.level: \"loud\" is not one of trace, debug, info, warn, error",
                  "@:8: membership.probe_timeout: 1h must be at most a third of "
                  "membership.probe_interval (1s) so that indirect probes fit in one period",
                  "@:6: checkpoint.keep: must be at least 1 (got 0)"}},
        // CURVE needs every seed's name; the file's seeds line is where the user must look.
        FileCase{"CurveSeedWithoutNameFromFile",
                 "[transport]\ncurve = true\nsecret_key_file = \"/k/n1.key\"\n"
                 "public_keys_dir = \"/k\"\n[consensus]\nvoters = [\"n2\"]\n[membership]\n"
                 "seeds = [\"n2@10.0.0.2:7946\", \"10.0.0.1:7946\"]\n",
                 {"@:8: membership.seeds: \"10.0.0.1:7946\" needs a node name "
                  "(\"name@host:port\") when transport.curve = true, because CURVE needs the "
                  "seed's public key"}}),
    [](const auto& test_case) { return std::string(test_case.param.name); });

TEST(FileErrors, LaterSetFixesTheValueButTheFileErrorStands) {
  TempDir dir;
  const auto outcome =
      load_text(dir, "[membership]\nprobe_timeout = \"5x\"\n", {"membership.probe_timeout=900ms"});
  ASSERT_EQ(outcome.errors.size(), 2u);
  EXPECT_EQ(outcome.errors[0].rfind(outcome.file + ":2: membership.probe_timeout: \"5x\"", 0), 0u);
  // The --set value is now in force, so the cross-field rule sees 900ms and blames --set.
  EXPECT_EQ(outcome.errors[1],
            "--set membership.probe_timeout=900ms: membership.probe_timeout: 900ms must be at "
            "most a third of membership.probe_interval (1s) so that indirect probes fit in one "
            "period");
}

// Seeds written for a plain cluster, CURVE turned on from the command line: the --set is blamed.
TEST(FileErrors, CurveTurnedOnBySetBlamesTheSet) {
  TempDir dir;
  const auto outcome =
      load_text(dir, "[membership]\nseeds = [\"10.0.0.1:7946\"]\n",
                {R"(consensus.voters=["n1"])", "transport.secret_key_file=/k/n1.key",
                 "transport.public_keys_dir=/k", "transport.curve=true"});
  EXPECT_THAT(outcome.errors,
              ElementsAre("--set transport.curve=true: membership.seeds: \"10.0.0.1:7946\" "
                          "needs a node name (\"name@host:port\") when transport.curve = true, "
                          "because CURVE needs the seed's public key"));
}

// ---- --set errors and every validation rule ------------------------------------------------

struct SetCase {
  const char* name;
  std::vector<std::string> overrides;
  std::vector<std::string> errors;
};

void PrintTo(const SetCase& c, std::ostream* out) { *out << c.name; }

class SetErrors : public ::testing::TestWithParam<SetCase> {};

TEST_P(SetErrors, ExactMessages) {
  EXPECT_THAT(override_errors(GetParam().overrides), ElementsAreArray(GetParam().errors));
}

// clang-format off
INSTANTIATE_TEST_SUITE_P(Table, SetErrors, ::testing::Values(
    // --set syntax and keys
    SetCase{"NoEquals", {"node.name"}, {"--set node.name: expected section.key=value"}},
    SetCase{"NoKey", {"=x"}, {"--set =x: expected section.key=value"}},
    SetCase{"SectionOnly", {"node=x"}, {"--set node=x: node: name a key, e.g. node.name=..."}},
    SetCase{"TopLevelTypo", {"nmae=x"}, {"--set nmae=x: nmae: unknown top-level key (did you mean node.name?)"}},
    SetCase{"UnknownKey", {"transport.bnid=tcp://a:1"},
            {"--set transport.bnid=tcp://a:1: transport.bnid: unknown key (did you mean transport.bind?)"}},
    SetCase{"UnknownSection", {"swim.gossip_fanout=3"},
            {"--set swim.gossip_fanout=3: swim.gossip_fanout: unknown key (did you mean membership.gossip_fanout?)"}},
    SetCase{"UnknownSectionAndKey", {"foo.qqqqqqqqqq=1"},
            {"--set foo.qqqqqqqqqq=1: foo.qqqqqqqqqq: unknown key (sections are node, transport, "
             "membership, consensus, rendezvous, spawner, checkpoint, control, dashboard, limits, logging)"}},
    SetCase{"BooleanNotTomlValue", {"spawner.bind_cpus=yes"},
            {"--set spawner.bind_cpus=yes: spawner.bind_cpus: expected a boolean (true or false), got a string (\"yes\")"}},
    SetCase{"IntegerNotTomlValue", {"checkpoint.keep=three"},
            {"--set checkpoint.keep=three: checkpoint.keep: expected an integer, got a string (\"three\")"}},
    SetCase{"BadDuration", {"membership.probe_timeout=5x"},
            {"--set membership.probe_timeout=5x: membership.probe_timeout: \"5x\" is not a duration: unknown unit \"x\" "
             "(use e.g. \"500ms\", \"30s\", \"1m30s\"; units: ns, us, ms, s, m, h)"}},
    SetCase{"DurationAsNumber", {"membership.probe_timeout=300"},
            {"--set membership.probe_timeout=300: membership.probe_timeout: \"300\" is not a duration: missing unit after 300 "
             "(use e.g. \"500ms\", \"30s\", \"1m30s\"; units: ns, us, ms, s, m, h)"}},
    SetCase{"GpusNumber", {"node.gpus=0"},
            {"--set node.gpus=0: node.gpus: expected \"auto\" or an array of GPU indices such as [0, 1], got a string (\"0\")"}},
    SetCase{"SeedsNotArray", {"membership.seeds=a:1"},
            {"--set membership.seeds=a:1: membership.seeds: expected an array of strings, got a string (\"a:1\")"}},
    SetCase{"EveryBadSetReported", {"node.nme=a", "checkpoint.keep=x", "node.name=ok"},
            {"--set node.nme=a: node.nme: unknown key (did you mean node.name?)",
             "--set checkpoint.keep=x: checkpoint.keep: expected an integer, got a string (\"x\")"}},

    // node
    SetCase{"NodeName", {"node.name=a b"},
            {"--set node.name=a b: node.name: \"a b\" may contain only letters, digits, '.', '_' and '-' (at most 253)"}},
    SetCase{"ClusterIdEmpty", {"node.cluster_id="},
            {"--set node.cluster_id=: node.cluster_id: must not be empty (it keeps clusters that share a network apart)"}},
    SetCase{"StateDirRelative", {"node.state_dir=var/lib"},
            {"--set node.state_dir=var/lib: node.state_dir: must be an absolute path (got \"var/lib\")"}},
    SetCase{"GpusNegativeAndTwice", {"node.gpus=[-1, 2, 2]"},
            {"--set node.gpus=[-1, 2, 2]: node.gpus: GPU index -1 is negative",
             "--set node.gpus=[-1, 2, 2]: node.gpus: GPU 2 is listed twice"}},
    SetCase{"CpuSlots", {"node.cpu_slots=-1"},
            {"--set node.cpu_slots=-1: node.cpu_slots: must be at least 0 (got -1)"}},

    // transport
    SetCase{"Bind", {"transport.bind=udp://0.0.0.0:1"},
            {"--set transport.bind=udp://0.0.0.0:1: transport.bind: \"udp://0.0.0.0:1\" must look like tcp://HOST:PORT (e.g. tcp://0.0.0.0:7946)"}},
    SetCase{"BindPort", {"transport.bind=tcp://host:70000"},
            {"--set transport.bind=tcp://host:70000: transport.bind: \"tcp://host:70000\" must look like tcp://HOST:PORT (e.g. tcp://0.0.0.0:7946)"}},
    SetCase{"Advertise", {"transport.advertise=tcp://0.0.0.0:7946"},
            {"--set transport.advertise=tcp://0.0.0.0:7946: transport.advertise: \"tcp://0.0.0.0:7946\" must be \"\" or "
             "tcp://HOST:PORT with a reachable host and a port from 1 to 65535"}},
    SetCase{"SendHwm", {"transport.send_hwm=0"},
            {"--set transport.send_hwm=0: transport.send_hwm: must be at least 1 (got 0)"}},
    SetCase{"MaxMessageBytes", {"transport.max_message_bytes=1000"},
            {"--set transport.max_message_bytes=1000: transport.max_message_bytes: must be at least 65536 (got 1000)"}},
    SetCase{"ZeroDuration", {"transport.tcp_max_retransmit_timeout=0s"},
            {"--set transport.tcp_max_retransmit_timeout=0s: transport.tcp_max_retransmit_timeout: must be greater than 0s"}},
    SetCase{"HeartbeatTimeout", {"transport.heartbeat_timeout=1s"},
            {"--set transport.heartbeat_timeout=1s: transport.heartbeat_timeout: 1s must be longer than transport.heartbeat_interval (1s)"}},
    SetCase{"CurveNeedsKeys", {"transport.secret_key_file=", "transport.public_keys_dir="},
            {"--set transport.secret_key_file=: transport.secret_key_file: must be set when transport.curve = true",
             "--set transport.public_keys_dir=: transport.public_keys_dir: must be set when transport.curve = true"}},
    // Without CURVE anyone reaching the port could forge daemon messages: only
    // a loopback bind is allowed, and a name (even "localhost") is not a loopback address.
    SetCase{"PlainNeedsLoopbackBind", {"transport.curve=false"},
            {"--set transport.curve=false: transport.bind: \"tcp://0.0.0.0:7946\" must be a loopback address "
             "(tcp://127.0.0.1:PORT or tcp://[::1]:PORT) when transport.curve = false: without CURVE anyone who "
             "reaches the port can forge daemon messages; keep transport.curve = true (the default) with keys"}},
    SetCase{"PlainBindBlamed", {"transport.curve=false", "transport.bind=tcp://localhost:7946"},
            {"--set transport.bind=tcp://localhost:7946: transport.bind: \"tcp://localhost:7946\" must be a "
             "loopback address (tcp://127.0.0.1:PORT or tcp://[::1]:PORT) when transport.curve = false: without "
             "CURVE anyone who reaches the port can forge daemon messages; keep transport.curve = true (the "
             "default) with keys"}},
    SetCase{"PlainRoutableBind", {"transport.bind=tcp://10.0.0.1:7946", "transport.curve=false"},
            {"--set transport.bind=tcp://10.0.0.1:7946: transport.bind: \"tcp://10.0.0.1:7946\" must be a loopback address "
             "(tcp://127.0.0.1:PORT or tcp://[::1]:PORT) when transport.curve = false: without CURVE anyone who "
             "reaches the port can forge daemon messages; keep transport.curve = true (the default) with keys"}},
    SetCase{"KeyFileRelative", {"transport.secret_key_file=key"},
            {"--set transport.secret_key_file=key: transport.secret_key_file: must be an absolute path or \"\" (got \"key\")"}},

    // membership
    // Unnamed seeds are valid only without CURVE (so on loopback).
    SetCase{"Seeds", {"transport.curve=false", "transport.bind=tcp://127.0.0.1:7946", R"(consensus.voters=["v"])",
                      R"(membership.seeds=["n1", "n2:0", "[::1:7946", "n3:7946", "n3:7946"])"},
            {R"(--set membership.seeds=["n1", "n2:0", "[::1:7946", "n3:7946", "n3:7946"]: membership.seeds: "n1" must look like HOST:PORT with a port from 1 to 65535 (e.g. "node01:7946"))",
             R"(--set membership.seeds=["n1", "n2:0", "[::1:7946", "n3:7946", "n3:7946"]: membership.seeds: "n2:0" must look like HOST:PORT with a port from 1 to 65535 (e.g. "node01:7946"))",
             R"(--set membership.seeds=["n1", "n2:0", "[::1:7946", "n3:7946", "n3:7946"]: membership.seeds: "[::1:7946" must look like HOST:PORT with a port from 1 to 65535 (e.g. "node01:7946"))",
             R"(--set membership.seeds=["n1", "n2:0", "[::1:7946", "n3:7946", "n3:7946"]: membership.seeds: "n3:7946" is listed twice)"}},
    SetCase{"SeedNames", {R"(consensus.voters=["v"])", R"(membership.seeds=["@n1:7946", "a b@n2:7946", "n3@n3", "n4@x@h:1", "n5@h:0", "n6@"])"},
            {R"(--set membership.seeds=["@n1:7946", "a b@n2:7946", "n3@n3", "n4@x@h:1", "n5@h:0", "n6@"]: membership.seeds: "@n1:7946" has an empty node name before '@' (write "name@host:port"))",
             R"(--set membership.seeds=["@n1:7946", "a b@n2:7946", "n3@n3", "n4@x@h:1", "n5@h:0", "n6@"]: membership.seeds: "a b@n2:7946": the node name "a b" may contain only letters, digits, '.', '_' and '-' (at most 253))",
             R"(--set membership.seeds=["@n1:7946", "a b@n2:7946", "n3@n3", "n4@x@h:1", "n5@h:0", "n6@"]: membership.seeds: "n3@n3": "n3" after the node name must look like HOST:PORT with a port from 1 to 65535 (e.g. "node01@10.0.0.1:7946"))",
             R"(--set membership.seeds=["@n1:7946", "a b@n2:7946", "n3@n3", "n4@x@h:1", "n5@h:0", "n6@"]: membership.seeds: "n4@x@h:1": "x@h:1" after the node name must look like HOST:PORT with a port from 1 to 65535 (e.g. "node01@10.0.0.1:7946"))",
             R"(--set membership.seeds=["@n1:7946", "a b@n2:7946", "n3@n3", "n4@x@h:1", "n5@h:0", "n6@"]: membership.seeds: "n5@h:0": "h:0" after the node name must look like HOST:PORT with a port from 1 to 65535 (e.g. "node01@10.0.0.1:7946"))",
             R"(--set membership.seeds=["@n1:7946", "a b@n2:7946", "n3@n3", "n4@x@h:1", "n5@h:0", "n6@"]: membership.seeds: "n6@": "" after the node name must look like HOST:PORT with a port from 1 to 65535 (e.g. "node01@10.0.0.1:7946"))"}},
    SetCase{"SeedNamedTwice", {R"(consensus.voters=["v"])", R"(membership.seeds=["n1@h:1", "n1@h:1"])"},
            {R"(--set membership.seeds=["n1@h:1", "n1@h:1"]: membership.seeds: "n1@h:1" is listed twice)"}},
    SetCase{"CurveSeedNeedsName",
            {"transport.curve=true", "transport.secret_key_file=/k/n1.key", "transport.public_keys_dir=/k",
             R"(consensus.voters=["n2"])",
             R"(membership.seeds=["n2@10.0.0.2:7946", "10.0.0.1:7946", "[fe80::1]:7946"])"},
            {R"(--set membership.seeds=["n2@10.0.0.2:7946", "10.0.0.1:7946", "[fe80::1]:7946"]: membership.seeds: "10.0.0.1:7946" needs a node name ("name@host:port") when transport.curve = true, because CURVE needs the seed's public key)",
             R"(--set membership.seeds=["n2@10.0.0.2:7946", "10.0.0.1:7946", "[fe80::1]:7946"]: membership.seeds: "[fe80::1]:7946" needs a node name ("name@host:port") when transport.curve = true, because CURVE needs the seed's public key)"}},
    SetCase{"ProbeTimeout", {"membership.probe_timeout=400ms"},
            {"--set membership.probe_timeout=400ms: membership.probe_timeout: 400ms must be at most a third of "
             "membership.probe_interval (1s) so that indirect probes fit in one period"}},
    SetCase{"ProbeIntervalBlamed", {"membership.probe_interval=600ms"},
            {"--set membership.probe_interval=600ms: membership.probe_timeout: 300ms must be at most a third of "
             "membership.probe_interval (600ms) so that indirect probes fit in one period"}},
    SetCase{"Counts", {"membership.indirect_probes=0", "membership.suspicion_multiplier=0",
                       "membership.suspicion_max_multiplier=0", "membership.awareness_max_multiplier=0",
                       "membership.retransmit_multiplier=0", "membership.gossip_fanout=0"},
            {"--set membership.indirect_probes=0: membership.indirect_probes: must be at least 1 (got 0)",
             "--set membership.suspicion_multiplier=0: membership.suspicion_multiplier: must be at least 1 (got 0)",
             "--set membership.suspicion_max_multiplier=0: membership.suspicion_max_multiplier: must be at least 1 (got 0)",
             "--set membership.awareness_max_multiplier=0: membership.awareness_max_multiplier: must be at least 1 (got 0)",
             "--set membership.retransmit_multiplier=0: membership.retransmit_multiplier: must be at least 1 (got 0)",
             "--set membership.gossip_fanout=0: membership.gossip_fanout: must be at least 1 (got 0)"}},
    SetCase{"TombstoneVsGossipToDead", {"membership.tombstone_ttl=20s", "membership.reconnect_interval=10s"},
            {"--set membership.tombstone_ttl=20s: membership.tombstone_ttl: 20s must be at least membership.gossip_to_dead (30s)"}},
    SetCase{"TombstoneVsReconnect", {"membership.reconnect_interval=24h"},
            {"--set membership.reconnect_interval=24h: membership.tombstone_ttl: 24h must be longer than "
             "membership.reconnect_interval (24h), or failed members are forgotten before a reconnect is tried"}},

    // consensus
    SetCase{"VotersEven", {R"(consensus.voters=["a","b"])"},
            {R"(--set consensus.voters=["a","b"]: consensus.voters: has 2 voters; use 1, 3 or 5 (an even count adds no fault tolerance), or [] for this node alone)"}},
    SetCase{"SeedsWithoutVoters", {R"(membership.seeds=["h1@h1:7946"])"},
            {R"(--set membership.seeds=["h1@h1:7946"]: consensus.voters: is [] (this node alone) but membership.seeds joins other nodes; list the cluster's 1, 3 or 5 voters by node name, the same on every node)"}},
    SetCase{"VotersDuplicateAndEmpty", {R"(consensus.voters=["a","","a"])"},
            {R"(--set consensus.voters=["a","","a"]: consensus.voters: voter names must not be empty)",
             R"(--set consensus.voters=["a","","a"]: consensus.voters: "a" is listed twice)"}},
    SetCase{"Heartbeat", {"consensus.heartbeat_interval=2s"},
            {"--set consensus.heartbeat_interval=2s: consensus.heartbeat_interval: 2s must be at most a third of "
             "consensus.election_timeout (1s)"}},
    SetCase{"SnapshotEvery", {"consensus.snapshot_every_entries=0"},
            {"--set consensus.snapshot_every_entries=0: consensus.snapshot_every_entries: must be at least 1 (got 0)"}},
    SetCase{"DataDir", {"consensus.data_dir=raft"},
            {"--set consensus.data_dir=raft: consensus.data_dir: must be an absolute path or \"\" (got \"raft\")"}},

    // rendezvous
    SetCase{"LastCall", {"rendezvous.last_call=10m"},
            {"--set rendezvous.last_call=10m: rendezvous.last_call: 10m must be shorter than rendezvous.join_timeout (10m)"}},
    SetCase{"Keepalive", {"rendezvous.job_keepalive_interval=600ms"},
            {"--set rendezvous.job_keepalive_interval=600ms: rendezvous.job_keepalive_interval: 600ms must be shorter than "
             "rendezvous.job_peer_timeout (600ms)"}},
    SetCase{"Lease", {"rendezvous.lease_duration=1s"},
            {"--set rendezvous.lease_duration=1s: rendezvous.lease_duration: 1s must be longer than "
             "consensus.election_timeout (1s), or every leader change stops every job"}},
    SetCase{"LeaseBlamesElection", {"rendezvous.lease_duration=5s", "consensus.election_timeout=6s"},
            {"--set rendezvous.lease_duration=5s: rendezvous.lease_duration: 5s must be longer than "
             "consensus.election_timeout (6s), or every leader change stops every job"}},
    SetCase{"Ports", {"rendezvous.store_port_min=0", "rendezvous.store_port_max=70000"},
            {"--set rendezvous.store_port_min=0: rendezvous.store_port_min: 0 must be a port number from 1 to 65535",
             "--set rendezvous.store_port_max=70000: rendezvous.store_port_max: 70000 must be a port number from 1 to 65535"}},
    SetCase{"PortOrder", {"rendezvous.store_port_min=30000"},
            {"--set rendezvous.store_port_min=30000: rendezvous.store_port_min: 30000 must not exceed "
             "rendezvous.store_port_max (29599)"}},

    // spawner, checkpoint, control, logging
    SetCase{"StopGrace", {"spawner.stop_grace=0s"},
            {"--set spawner.stop_grace=0s: spawner.stop_grace: must be greater than 0s"}},
    SetCase{"LogSizes", {"spawner.log_max_bytes=0", "spawner.log_keep=-1"},
            {"--set spawner.log_max_bytes=0: spawner.log_max_bytes: must be at least 1 (got 0)",
             "--set spawner.log_keep=-1: spawner.log_keep: must be at least 0 (got -1)"}},
    SetCase{"LogRoot", {"spawner.log_root=shared/logs", "spawner.log_rounds_kept=0"},
            {"--set spawner.log_root=shared/logs: spawner.log_root: must be an absolute path or \"\" (got \"shared/logs\")",
             "--set spawner.log_rounds_kept=0: spawner.log_rounds_kept: must be at least 1 (got 0)"}},
    SetCase{"CgroupRoot", {"spawner.cgroup_root=elastic.slice"},
            {"--set spawner.cgroup_root=elastic.slice: spawner.cgroup_root: must be an absolute path, \"auto\" or \"\" (got \"elastic.slice\")"}},
    SetCase{"PythonDir", {"spawner.python_dir=python"},
            {"--set spawner.python_dir=python: spawner.python_dir: must be an absolute path, \"auto\" or \"\" (got \"python\")"}},
    SetCase{"CheckpointKeep", {"checkpoint.keep=0"},
            {"--set checkpoint.keep=0: checkpoint.keep: must be at least 1 (got 0)"}},
    SetCase{"CheckpointRoot", {"checkpoint.root=ckpt"},
            {"--set checkpoint.root=ckpt: checkpoint.root: must be an absolute path or \"\" (got \"ckpt\")"}},
    SetCase{"SocketRelative", {"control.socket=elasticd.sock"},
            {"--set control.socket=elasticd.sock: control.socket: must be an absolute path (got \"elasticd.sock\")"}},
    SetCase{"SocketTooLong", {"control.socket=/" + std::string(120, 's')},
            {"--set control.socket=/" + std::string(120, 's') +
             ": control.socket: is 121 bytes long; a unix socket path must be at most 107"}},
    SetCase{"MetricsListen", {"control.metrics_listen=9100"},
            {"--set control.metrics_listen=9100: control.metrics_listen: \"9100\" must be \"\" (off) or HOST:PORT with a port from 0 to 65535 (0 = any free port)"}},
    SetCase{"DashboardListen", {"dashboard.listen=8474"},
            {"--set dashboard.listen=8474: dashboard.listen: \"8474\" must be \"\" (off) or HOST:PORT with a port from 0 to 65535 (0 = any free port)"}},
    SetCase{"DashboardWildcardNeedsToken", {"dashboard.listen=0.0.0.0:8474"},
            {"--set dashboard.listen=0.0.0.0:8474: dashboard.token_file: must be set when dashboard.listen (\"0.0.0.0:8474\") is not a loopback address: anyone who reaches it would see every job and node (or keep 127.0.0.1 and use an SSH tunnel)"}},
    SetCase{"DashboardTokenFile", {"dashboard.token_file=token"},
            {"--set dashboard.token_file=token: dashboard.token_file: must be an absolute path or \"\" (got \"token\")"}},
    SetCase{"RemoteListen", {"control.remote_listen=7947"},
            {"--set control.remote_listen=7947: control.remote_listen: \"7947\" must be \"\" (off) or tcp://HOST:PORT (e.g. tcp://0.0.0.0:7947)",
             "--set control.remote_listen=7947: control.client_keys_dir: must be set when control.remote_listen is set (it lists the allowed client keys)"}},
    SetCase{"RemoteListenNeedsCurve",
            {"transport.curve=false", "transport.bind=tcp://127.0.0.1:7946", "control.client_keys_dir=/k",
             "control.remote_listen=tcp://127.0.0.1:7947"},
            {"--set control.remote_listen=tcp://127.0.0.1:7947: control.remote_listen: needs transport.curve = true (remote clients are authenticated with CURVE, and without it between the daemons forwarded requests could be forged)"}},
    SetCase{"LogFile", {"logging.file=elasticd.log"},
            {"--set logging.file=elasticd.log: logging.file: must be an absolute path or \"\" (got \"elasticd.log\")"}}),
    [](const auto& test_case) { return std::string(test_case.param.name); });
// clang-format on

TEST(Validate, ReturnsKeyAndReasonWithoutSource) {
  DaemonConfig config;
  config.checkpoint.keep = 0;
  config.consensus.heartbeat_interval = std::chrono::seconds(1);
  EXPECT_THAT(validate(config),
              ElementsAre("consensus.heartbeat_interval: 1s must be at most a third of "
                          "consensus.election_timeout (1s)",
                          "checkpoint.keep: must be at least 1 (got 0)"));
}

TEST(Validate, AcceptsValidEdgeValues) {
  auto config = with_overrides({
      "transport.bind=tcp://*:0",  // port 0: the kernel picks one (tests)
      R"(membership.seeds=["a@[fe80::1]:7946", "b@node01:1", "c@10.0.0.1:65535"])",
      R"(consensus.voters=["a","b","c","d","e"])",
      "consensus.heartbeat_interval=333ms",
      "consensus.election_timeout=999ms",
      "membership.probe_timeout=1s",
      "membership.probe_interval=3s",
      "rendezvous.store_port_min=29599",
      "node.gpus=[]",
      "spawner.log_keep=0",
      "control.metrics_listen=[::]:9100",
      "dashboard.listen=[::1]:0",  // loopback: no token needed
  });
  EXPECT_TRUE(config.ok()) << config.error().message;
  config = with_overrides({"dashboard.listen=10.0.0.1:8474", "dashboard.token_file=/etc/t"});
  EXPECT_TRUE(config.ok()) << config.error().message;
  config = with_overrides({"dashboard.listen="});
  EXPECT_TRUE(config.ok()) << config.error().message;
}

// Names are optional without CURVE (and unused), required and accepted with it.
TEST(Validate, AcceptsNamedSeeds) {
  auto plain = with_overrides({"transport.curve=false", "transport.bind=tcp://127.0.0.1:7946",
                               R"(membership.seeds=["n1@10.0.0.1:7946", "10.0.0.2:7946"])",
                               R"(consensus.voters=["n1"])"});
  EXPECT_TRUE(plain.ok()) << plain.error().message;
  auto curve = with_overrides({
      "transport.curve=true",
      "transport.secret_key_file=/k/n1.key",
      "transport.public_keys_dir=/k",
      R"(membership.seeds=["gpu-01.rack_2@[fe80::1]:7946", "n2@node02:1", "n3@10.0.0.3:65535"])",
      R"(consensus.voters=["n2"])",
  });
  EXPECT_TRUE(curve.ok()) << curve.error().message;
}

// CURVE is the default, with the key paths make install fills.
TEST(Defaults, CurveIsOnWithKeysUnderEtc) {
  const DaemonConfig defaults;
  EXPECT_TRUE(defaults.transport.curve);
  EXPECT_EQ(defaults.transport.secret_key_file, "/etc/elastic/node.key");
  EXPECT_EQ(defaults.transport.public_keys_dir, "/etc/elastic/nodes");
}

// transport.curve = false is for a single-user test box: loopback binds only, IPv4 or IPv6.
TEST(Validate, AcceptsPlainTransportOnLoopbackOnly) {
  for (const char* bind : {"tcp://127.0.0.1:0", "tcp://127.0.0.2:7946", "tcp://[::1]:7946"}) {
    auto config = with_overrides({"transport.curve=false", std::string("transport.bind=") + bind});
    EXPECT_TRUE(config.ok()) << bind << ": " << config.error().message;
  }
  for (const char* bind : {"tcp://0.0.0.0:7946", "tcp://*:7946", "tcp://[::]:7946",
                           "tcp://128.0.0.1:7946", "tcp://lo:7946", "tcp://[::ffff:127.0.0.1]:1"}) {
    auto config = with_overrides({"transport.curve=false", std::string("transport.bind=") + bind});
    EXPECT_FALSE(config.ok()) << bind;
  }
}

}  // namespace
}  // namespace elastic::config
