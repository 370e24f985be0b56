// Runs the real elasticd and elasticctl binaries (fork/exec, stdout and stderr captured to files,
// exit status from waitpid) and checks --help, --version, config errors (78), usage errors (64),
// and that a plain start runs a node that becomes ready and exits 0 on SIGTERM. The cluster
// behaviour itself is tested in tests/integ/node_integ_test.cc.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include "tests/support/temp_dir.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon/config/config.h"
#include "elastic/version.h"

namespace elastic::config {
namespace {

using elastic::testing::TempDir;

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

struct Finished {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs `binary args...` to completion. Output goes to files rather than pipes so that a chatty
// child can never block on a full pipe while we wait for it.
Finished run_process(const char* binary, const std::vector<std::string>& args) {
  TempDir dir;
  const std::string out_path = dir.file("stdout");
  const std::string err_path = dir.file("stderr");
  std::vector<std::string> storage = {binary};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& arg : storage) argv.push_back(arg.data());
  argv.push_back(nullptr);

  const pid_t pid = fork();
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out < 0 || err < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) _exit(126);
    execv(binary, argv.data());
    _exit(127);
  }
  Finished result;
  EXPECT_GT(pid, 0) << "fork failed";
  if (pid <= 0) return result;
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status)) << binary << " did not exit normally (status " << status << ")";
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = read_file(out_path);
  result.err = read_file(err_path);
  return result;
}

Finished elasticd(const std::vector<std::string>& args) { return run_process(ELASTICD_PATH, args); }
Finished elasticctl(const std::vector<std::string>& args) {
  return run_process(ELASTICCTL_PATH, args);
}

const std::string kShippedConfig = std::string(ELASTIC_SOURCE_DIR) + "/conf/elasticd.toml";

// Parses TOML text the way the daemon would, for comparing printed configs.
Result<DaemonConfig> reload(const std::string& toml) {
  TempDir dir;
  auto loaded = load_config(LoadOptions{
      .file = dir.write("printed.toml", toml), .file_must_exist = true, .overrides = {}});
  if (!loaded.ok()) return loaded.error();
  return loaded->config;
}

// ---- elasticd -------------------------------------------------------------------------------

TEST(Elasticd, Version) {
  const Finished r = elasticd({"--version"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, std::string("elasticd ") + kVersion + "\n");
}

TEST(Elasticd, Help) {
  const Finished r = elasticd({"--help"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* option :
       {"--config", "--set", "--check-config", "--print-config", "--version"}) {
    EXPECT_THAT(r.out, HasSubstr(option));
  }
  EXPECT_THAT(r.out, HasSubstr(kDefaultConfigPath));
}

TEST(Elasticd, CheckConfigOnTheShippedFile) {
  const Finished r = elasticd({"-c", kShippedConfig, "--check-config"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "config OK (" + kShippedConfig + ")\n");
}

TEST(Elasticd, CheckConfigNamesTheOverrides) {
  const Finished r = elasticd({"--config", kShippedConfig, "--set", "node.name=gpu01", "--set",
                               "logging.level=warn", "--check-config"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "config OK (" + kShippedConfig + " + 2 --set overrides)\n");
}

TEST(Elasticd, PrintConfigReadsBackAsTheDefaults) {
  for (const std::string& file : {std::string(), kShippedConfig}) {
    const Finished r = elasticd({"-c", file, "--print-config"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto printed = reload(r.out);
    ASSERT_TRUE(printed.ok()) << printed.error().message << "\n" << r.out;
    EXPECT_TRUE(*printed == DaemonConfig{}) << r.out;
  }
}

TEST(Elasticd, PrintConfigShowsOverrides) {
  const Finished r =
      elasticd({"-c", "", "--set", R"(membership.seeds=["n1@h1:7946","n2@h2:7946"])", "--set",
                R"(consensus.voters=["n1"])", "--set", "spawner.bind_cpus=false", "--print-config"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto printed = reload(r.out);
  ASSERT_TRUE(printed.ok()) << printed.error().message;
  EXPECT_THAT(printed->membership.seeds, ElementsAre("n1@h1:7946", "n2@h2:7946"));
  EXPECT_FALSE(printed->spawner.bind_cpus);
}

TEST(Elasticd, BadConfigFileExits78WithEveryError) {
  TempDir dir;
  const std::string file = dir.write("bad.toml",
                                     "[membership]\n"
                                     "probe_timeout = \"5x\"\n"
                                     "[transport]\n"
                                     "bnid = \"tcp://0.0.0.0:7946\"\n");
  const Finished r = elasticd({"-c", file, "--check-config"});
  EXPECT_EQ(r.exit_code, 78);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(split_lines(r.err),
              ElementsAre(file + ":2: membership.probe_timeout: \"5x\" is not a duration: unknown "
                                 "unit \"x\" (use e.g. \"500ms\", \"30s\", \"1m30s\"; units: ns, "
                                 "us, ms, s, m, h)",
                          file + ":4: transport.bnid: unknown key (did you mean transport.bind?)",
                          "elasticd: invalid configuration; exiting with status 78 (EX_CONFIG)"));
}

TEST(Elasticd, SyntaxErrorExits78WithFileAndLine) {
  TempDir dir;
  const std::string file = dir.write("bad.toml", "[node]\nname = \"a\n");
  const Finished r = elasticd({"-c", file});
  EXPECT_EQ(r.exit_code, 78);
  EXPECT_THAT(r.err, StartsWith(file + ":2: TOML syntax error: "));
}

TEST(Elasticd, UnknownKeyViaSetExits78) {
  const Finished r = elasticd({"-c", kShippedConfig, "--set", "transport.bnid=tcp://0.0.0.0:1"});
  EXPECT_EQ(r.exit_code, 78);
  EXPECT_THAT(split_lines(r.err),
              ElementsAre("--set transport.bnid=tcp://0.0.0.0:1: transport.bnid: unknown key "
                          "(did you mean transport.bind?)",
                          "elasticd: invalid configuration; exiting with status 78 (EX_CONFIG)"));
}

TEST(Elasticd, CrossFieldViolationViaSetExits78) {
  const Finished r =
      elasticd({"-c", "", "--set", "consensus.heartbeat_interval=2s", "--check-config"});
  EXPECT_EQ(r.exit_code, 78);
  EXPECT_THAT(split_lines(r.err),
              ElementsAre("--set consensus.heartbeat_interval=2s: consensus.heartbeat_interval: "
                          "2s must be at most a third of consensus.election_timeout (1s)",
                          "elasticd: invalid configuration; exiting with status 78 (EX_CONFIG)"));
}

// Without CURVE a daemon may listen on loopback only; anything else is a
// configuration error (78) that names transport.bind and says why, before anything is bound.
TEST(Elasticd, PlainTransportOnAWildcardBindExits78) {
  const Finished r = elasticd({"-c", kShippedConfig, "--set", "transport.curve=false"});
  EXPECT_EQ(r.exit_code, 78);
  EXPECT_THAT(split_lines(r.err),
              ElementsAre("--set transport.curve=false: transport.bind: \"tcp://0.0.0.0:7946\" must "
                          "be a loopback address (tcp://127.0.0.1:PORT or tcp://[::1]:PORT) when "
                          "transport.curve = false: without CURVE anyone who reaches the port can "
                          "forge daemon messages; keep transport.curve = true (the default) with keys",
                          "elasticd: invalid configuration; exiting with status 78 (EX_CONFIG)"));
}

// spawner.cgroup_root is checked against this host's cgroup layout wherever the
// config is: --check-config and a start both exit 78 naming the key, its source and the layout
// (they used to say "config OK" and exit 69 after opening the transport and the Raft log, which
// the unit restarted every 5 s for ever). A path no host has: /sys/fs/cgroup/<unique>.
TEST(Elasticd, CgroupRootThisHostDoesNotHaveExits78AtCheckAndAtStart) {
  TempDir dir;
  const std::string missing =
      "/sys/fs/cgroup/system.slice/elastic-cli-test-" + std::to_string(::getpid()) + ".service";
  const std::string setting = "spawner.cgroup_root=" + missing;
  const std::vector<std::vector<std::string>> runs = {
      {"-c", "", "--set", setting, "--check-config"},
      {"-c", "", "--set", "node.state_dir=" + dir.file("state"), "--set",
       "control.socket=" + dir.file("ctl.sock"), "--set", "transport.bind=tcp://127.0.0.1:0",
       "--set", "transport.curve=false", "--set", setting}};
  for (const auto& args : runs) {
    const Finished r = elasticd(args);
    EXPECT_EQ(r.exit_code, 78) << r.out << r.err;
    EXPECT_EQ(r.out, "");
    const auto lines = split_lines(r.err);
    ASSERT_EQ(lines.size(), 2u) << r.err;
    EXPECT_THAT(lines[0], StartsWith("--set " + setting + ": spawner.cgroup_root: '" + missing +
                                     "' is not a writable cgroup v2 directory: "));
    EXPECT_EQ(lines[1], "elasticd: invalid configuration; exiting with status 78 (EX_CONFIG)");
  }
  // Nothing half-started: the start stopped before the state dir or the socket existed.
  EXPECT_FALSE(std::filesystem::exists(dir.file("state")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("ctl.sock")));
}

bool host_has_cgroup2() {
  return read_file("/proc/self/mountinfo").find(" - cgroup2 ") != std::string::npos;
}

TEST(Elasticd, CheckConfigSaysWhatCgroupRootAutoUses) {
  if (!host_has_cgroup2()) GTEST_SKIP() << "no cgroup2 mounted on this host (v1 only)";
  const Finished r = elasticd({"-c", "", "--set", "spawner.cgroup_root=auto", "--check-config"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const auto lines = split_lines(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  EXPECT_EQ(lines[0], "config OK (built-in defaults + 1 --set override)");
  EXPECT_THAT(lines[1], StartsWith("spawner.cgroup_root: \"auto\": the daemon's own cgroup below "));
}

TEST(Elasticd, MissingExplicitConfigExits78) {
  TempDir dir;
  const std::string file = dir.file("absent.toml");
  const Finished r = elasticd({"-c", file, "--check-config"});
  EXPECT_EQ(r.exit_code, 78);
  EXPECT_THAT(r.err, StartsWith(file + ": cannot read the config file: it does not exist\n"));
}

TEST(Elasticd, MissingDefaultConfigMeansBuiltInDefaults) {
  if (std::filesystem::exists(kDefaultConfigPath)) {
    GTEST_SKIP() << kDefaultConfigPath << " exists on this machine";
  }
  const Finished r = elasticd({"--check-config"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "config OK (built-in defaults)\n");
  EXPECT_THAT(r.err, HasSubstr(std::string("config file ") + kDefaultConfigPath +
                               " not found; using built-in defaults"));
}

// Starts `binary args...` in the background with stderr to `err_path`; returns its pid.
pid_t spawn(const char* binary, const std::vector<std::string>& args, const std::string& err_path) {
  std::vector<std::string> storage = {binary};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& arg : storage) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int null = open("/dev/null", O_WRONLY);
    if (err < 0 || null < 0 || dup2(null, 1) < 0 || dup2(err, 2) < 0) _exit(126);
    execv(binary, argv.data());
    _exit(127);
  }
  return pid;
}

// Polls `condition` until it holds or `timeout` passes (no fixed waits for an outcome).
bool poll_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

TEST(Elasticd, PlainStartRunsTheNodeAndExits0OnSigterm) {
  TempDir dir;
  const std::string socket = dir.file("ctl.sock");
  const std::string err_path = dir.file("stderr");
  const pid_t pid = spawn(ELASTICD_PATH,
                          {"-c", kShippedConfig, "--set", "node.name=cli-test", "--set",
                           "node.state_dir=" + dir.file("state"), "--set",
                           "control.socket=" + socket, "--set", "transport.bind=tcp://127.0.0.1:0",
                           "--set", "transport.curve=false",
                           // Not the shipped 8474: other tests' daemons share this loopback.
                           "--set", "dashboard.listen=127.0.0.1:0"},
                          err_path);
  ASSERT_GT(pid, 0);
  const bool ready = poll_until(
      [&] {
        return read_file(err_path).find(
                   "elasticd ready: name=cli-test generation=1 address=tcp://"
                   "127.0.0.1:") != std::string::npos;
      },
      std::chrono::seconds(10));
  EXPECT_TRUE(ready) << read_file(err_path);
  EXPECT_THAT(read_file(err_path), HasSubstr("control=" + socket));
  EXPECT_TRUE(std::filesystem::exists(dir.file("state/generation")));
  kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << "\n"
                                                             << read_file(err_path);
  EXPECT_THAT(read_file(err_path), HasSubstr("SIGTERM received"));
  EXPECT_FALSE(std::filesystem::exists(socket));
}

TEST(Elasticd, JsonLogFormatWritesOneObjectPerLine) {
  TempDir dir;
  const std::string log = dir.file("elasticd.log");
  const pid_t pid =
      spawn(ELASTICD_PATH,
            {"-c", "", "--set", "node.name=json-node", "--set", "logging.format=json", "--set",
             "logging.file=" + log, "--set", "node.state_dir=" + dir.file("state"), "--set",
             "control.socket=" + dir.file("ctl.sock"), "--set", "transport.bind=tcp://127.0.0.1:0",
             "--set", "transport.curve=false", "--set", "dashboard.listen=127.0.0.1:0"},
            dir.file("stderr"));
  ASSERT_GT(pid, 0);
  const bool ready =
      poll_until([&] { return read_file(log).find("elasticd ready") != std::string::npos; },
                 std::chrono::seconds(10));
  kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(ready) << read_file(log) << read_file(dir.file("stderr"));
  for (const std::string& line : split_lines(read_file(log))) {
    const auto object = nlohmann::json::parse(line, nullptr, false);
    ASSERT_TRUE(object.is_object()) << line;
    EXPECT_TRUE(object.contains("time") && object.contains("level") && object.contains("msg"));
  }
}

TEST(Elasticd, BadUsageExits64) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--bogus"}, {"extra"}, {"-c"}, {"--check-config", "--print-config"}, {"--set"}}) {
    const Finished r = elasticd(args);
    EXPECT_EQ(r.exit_code, 64) << args.front() << ": " << r.err;
    EXPECT_THAT(r.err, StartsWith("elasticd: ")) << args.front();
    EXPECT_THAT(r.err, HasSubstr("Run 'elasticd --help' for usage.")) << args.front();
  }
  EXPECT_THAT(elasticd({"--bogus"}).err, HasSubstr("--bogus"));
}

// ---- elasticctl -----------------------------------------------------------------------------

TEST(Elasticctl, Version) {
  const Finished r = elasticctl({"--version"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, std::string("elasticctl ") + kVersion + "\n");
}

TEST(Elasticctl, Help) {
  const Finished r = elasticctl({"--help"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* text : {"--config", "--set", "--version", "config", "nodes", "keygen", "submit",
                           "events", "logs", "drain", "undrain"}) {
    EXPECT_THAT(r.out, HasSubstr(text));
  }
  // The exit codes are part of the help text.
  EXPECT_THAT(r.out, HasSubstr("Exit codes: 0 ok; 1 the daemon refused the request"));
  EXPECT_THAT(r.out, HasSubstr("69 no daemon answers at the control socket"));
}

TEST(Elasticctl, SubmitHelpNamesTheJobFileAndWait) {
  const Finished r = elasticctl({"submit", "--help"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* text :
       {"jobfile", "--wait", "--dry-run", "--nodes", "--gpus-per-node", "--workdir", "--env"}) {
    EXPECT_THAT(r.out, HasSubstr(text));
  }
}

TEST(Elasticctl, DryRunPrintsTheSpecWithoutADaemon) {
  TempDir dir;
  const std::string file = dir.write("job.toml", "name = \"dry\"\ncommand = [\"/bin/true\"]\n");
  const Finished r = elasticctl({"-c", "", "--set", "control.socket=" + dir.file("none.sock"),
                                 "submit", file, "--nodes", "2:3", "--dry-run"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto spec = nlohmann::json::parse(r.out);
  EXPECT_EQ(spec["name"], "dry");
  EXPECT_EQ(spec["min_nodes"], 2);
  EXPECT_EQ(spec["max_nodes"], 3);
}

TEST(Elasticctl, DryRunCarriesTheSchedulingFlags) {
  TempDir dir;
  const Finished r = elasticctl(
      {"-c", "", "--set", "control.socket=" + dir.file("none.sock"), "submit", "--name", "s",
       "--priority", "-7", "--preemptible", "--scale", "throughput", "--scale-min-gain", "0.2",
       "--scale-window", "90s", "--hang-timeout", "0s", "--dry-run", "--", "/bin/true"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto spec = nlohmann::json::parse(r.out);
  EXPECT_EQ(spec["priority"], -7);
  EXPECT_EQ(spec["preemptible"], true);
  EXPECT_EQ(spec["scale"], "throughput");
  EXPECT_EQ(spec["scale_min_gain"], 0.2);
  EXPECT_EQ(spec["scale_window"], "1m30s");
  EXPECT_EQ(spec["hang_timeout"], "0s");
  const Finished bad = elasticctl({"-c", "", "--set", "control.socket=" + dir.file("none.sock"),
                                   "submit", "--name", "s", "--scale", "fast", "--dry-run", "--",
                                   "/bin/true"});
  EXPECT_EQ(bad.exit_code, 65);
  EXPECT_THAT(bad.err, HasSubstr("--scale: expected fixed or throughput, got \"fast\""));
}

// priority, suspend and resume check their arguments before asking a daemon (none runs here).
TEST(Elasticctl, PrioritySuspendAndResumeArguments) {
  TempDir dir;
  const std::vector<std::string> at = {"-c", "", "--set",
                                       "control.socket=" + dir.file("none.sock")};
  const auto with = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = at;
    argv.insert(argv.end(), args.begin(), args.end());
    return elasticctl(argv);
  };
  Finished r = with({"priority", "train-1", "high"});
  EXPECT_EQ(r.exit_code, 64);
  EXPECT_EQ(r.err,
            "elasticctl: priority: expected an integer such as 10 or -5, got \"high\"\n");
  r = with({"priority", "train-1", "1000001"});
  EXPECT_EQ(r.exit_code, 64);
  EXPECT_EQ(r.err, "elasticctl: priority: 1000001 is outside -1000000..1000000\n");
  r = with({"priority", "train-1"});
  EXPECT_EQ(r.exit_code, 64);
  EXPECT_THAT(r.err, StartsWith("elasticctl: priority is required\n"));
  r = with({"suspend"});
  EXPECT_EQ(r.exit_code, 64);
  EXPECT_THAT(r.err, StartsWith("elasticctl: job is required\n"));
  // Well-formed (a negative priority included): they get as far as the missing daemon.
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"priority", "train-1", "-5"},
                                             {"suspend", "train-1"},
                                             {"resume", "train-1"}}) {
    EXPECT_EQ(with(args).exit_code, 69) << args.front();
  }
}

TEST(Elasticctl, CommandAfterDashesOnlyForSubmit) {
  const Finished r = elasticctl({"jobs", "--", "x"});
  EXPECT_EQ(r.exit_code, 64);
  EXPECT_EQ(r.err,
            "elasticctl: only submit takes a command after --\n"
            "Run 'elasticctl --help' for usage.\n");
}

TEST(Elasticctl, ConfigPrintsTomlThatReadsBack) {
  const Finished r = elasticctl({"-c", kShippedConfig, "config"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto printed = reload(r.out);
  ASSERT_TRUE(printed.ok()) << printed.error().message;
  EXPECT_TRUE(*printed == DaemonConfig{});
}

TEST(Elasticctl, ConfigJson) {
  // Options may also follow the command.
  const Finished r = elasticctl({"config", "--json", "-c", "", "--set", "checkpoint.keep=5"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto json = nlohmann::json::parse(r.out);
  EXPECT_EQ(json["checkpoint"]["keep"], 5);
  EXPECT_EQ(json["membership"]["probe_interval"], "1s");
  EXPECT_EQ(json["control"]["socket"], "/run/elastic/elasticd.sock");
}

TEST(Elasticctl, BadConfigExits78) {
  const Finished r = elasticctl({"-c", "", "--set", "checkpoint.keep=0", "config"});
  EXPECT_EQ(r.exit_code, 78);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(split_lines(r.err),
              ElementsAre("--set checkpoint.keep=0: checkpoint.keep: must be at least 1 (got 0)",
                          "elasticctl: invalid configuration; exiting with status 78 (EX_CONFIG)"));
}

TEST(Elasticctl, UnknownCommandExits64) {
  const Finished r = elasticctl({"frobnicate"});
  EXPECT_EQ(r.exit_code, 64);
  EXPECT_EQ(r.err,
            "elasticctl: unknown command \"frobnicate\" (commands: cancel, config, drain, events, "
            "jobs, keygen, logs, nodes, priority, reload, resume, status, submit, suspend, top, "
            "undrain, voters)\n"
            "Run 'elasticctl --help' for usage.\n");
}

TEST(Elasticctl, MissingCommandExits64) {
  const Finished r = elasticctl({});
  EXPECT_EQ(r.exit_code, 64);
  EXPECT_EQ(r.err,
            "elasticctl: a command is required (commands: cancel, config, drain, events, jobs, "
            "keygen, logs, nodes, priority, reload, resume, status, submit, suspend, top, "
            "undrain, voters)\n"
            "Run 'elasticctl --help' for usage.\n");
}

TEST(Elasticctl, BadOptionExits64) {
  const Finished r = elasticctl({"config", "--yaml"});
  EXPECT_EQ(r.exit_code, 64);
  EXPECT_THAT(r.err, StartsWith("elasticctl: "));
  EXPECT_THAT(r.err, HasSubstr("--yaml"));
}

}  // namespace
}  // namespace elastic::config
