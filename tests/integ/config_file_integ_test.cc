// Broken and hostile config files against the real binaries:
//   - TOML nested 10,000 deep crashed `elasticd --check-config`, `elasticctl submit
//     --dry-run` and a running daemon on SIGHUP (SIGSEGV, its worker with it). Each is refused
//     now with one line naming the file, the line and the limit; the daemon and its worker run
//     on, and the refusal is what `elasticctl status` reports as the last reload;
//   - `elasticctl status --json` exited 78 while the config file was broken, so the
//     `last_reload` it documents could not be read: it reaches the daemon through the socket
//     that can be read (the file's own control.socket, the environment, --set) with a warning.
// Labelled security (hostile input) as well as integ. Nothing sleeps a fixed time.
#include <signal.h>
#include <sys/types.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/integ/daemon_under_test.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace elastic::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kTooDeep =
    "TOML nested too deeply: more than 32 levels of arrays and inline tables (the limit is 32)";

std::string arrays(std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// The text from the start of `text` to the first newline.
std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

std::string describe(const ExitStatus& status) {
  return status.signal != 0 ? "killed by signal " + std::to_string(status.signal)
                            : "exit " + std::to_string(status.code);
}

RunResult elasticctl_with(const std::vector<std::string>& args,
                          const std::map<std::string, std::string>& env = {}) {
  std::vector<std::string> argv = {ELASTICCTL_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv, env, std::chrono::seconds(30));
}

// An elasticd under test reading `file` (-c FILE instead of the harness's -c ""); the harness's
// --set overrides still win over the file, so the file is what a reload re-reads.
std::unique_ptr<Process> start_with_file(Daemon& daemon, const TempDir& dir,
                                         const std::string& file) {
  std::vector<std::string> argv = daemon.args();
  argv[2] = file;  // args() = {elasticd, "-c", "", ...}
  auto process = std::make_unique<Process>(argv, std::map<std::string, std::string>{},
                                           dir.file(daemon.name()), daemon.name() + "-with-file");
  EXPECT_TRUE(wait_until(
      [&] { return process->err().find("elasticd ready: ") != std::string::npos; }, kReady))
      << process->err();
  return process;
}

// `elasticctl status --json` through `socket`; null when it did not answer with JSON.
json status_of(const std::string& socket) {
  const RunResult r =
      elasticctl_with({"-c", "", "--set", "control.socket=" + socket, "status", "--json"});
  if (!r.status.exited_with(0)) return nullptr;
  const json reply = json::parse(r.out, nullptr, false);
  return reply.is_discarded() ? nullptr : reply;
}

bool alive(pid_t pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM); }

// ---- deeply nested TOML --------------------------------------------------------------

TEST(DeepToml, CheckConfigRefusesItWithFileLineAndLimit) {
  TempDir dir;
  const std::string path =
      dir.write("elasticd.toml", "[node]\nname = \"n1\"\ngpus = " + arrays(10'000) + "\n");
  RunResult r = run({ELASTICD_PATH, "--check-config", "-c", path}, {}, std::chrono::seconds(30));
  EXPECT_TRUE(r.status.exited_with(78)) << describe(r.status) << "\n" << r.err;
  EXPECT_EQ(first_line(r.err), path + ":3: " + kTooDeep);
  EXPECT_THAT(r.err, HasSubstr("elasticd: invalid configuration; exiting with status 78"));

  // The same value given with --set.
  r = run({ELASTICD_PATH, "--check-config", "-c", "", "--set", "node.gpus=" + arrays(10'000)}, {},
          std::chrono::seconds(30));
  EXPECT_TRUE(r.status.exited_with(78)) << describe(r.status) << "\n" << r.err;
  EXPECT_EQ(first_line(r.err), "--set node.gpus=...: node.gpus: " + kTooDeep);
}

TEST(DeepToml, SubmitDryRunRefusesADeepJobFileAndSurvivesADeepConfig) {
  TempDir dir;
  const std::string job = dir.write("job.toml", "name = \"a\"\ncommand = " + arrays(10'000) + "\n");
  RunResult r = elasticctl_with({"-c", "", "submit", job, "--dry-run"});
  EXPECT_TRUE(r.status.exited_with(65)) << describe(r.status) << "\n" << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, job + ":2: " + kTooDeep +
                       "\nelasticctl: the job spec is invalid; nothing was submitted\n");

  // elasticctl reads the daemon's config too: a deep one is reported, and a dry run (which
  // needs no daemon) still prints the spec.
  const std::string config =
      dir.write("elasticd.toml", "[control]\nsocket = " + arrays(10'000) + "\n");
  r = elasticctl_with({"-c", config, "submit", "--name", "a", "--dry-run", "--", "/bin/true"});
  EXPECT_TRUE(r.status.exited_with(0)) << describe(r.status) << "\n" << r.err;
  EXPECT_EQ(json::parse(r.out, nullptr, false).value("name", ""), "a") << r.out;
  EXPECT_EQ(first_line(r.err), config + ":2: " + kTooDeep);
  // `config` shows the configuration itself: that still stops.
  r = elasticctl_with({"-c", config, "config"});
  EXPECT_TRUE(r.status.exited_with(78)) << describe(r.status) << "\n" << r.err;
}

TEST(DeepToml, ReloadRefusesItAndTheDaemonAndItsWorkerRunOn) {
  TempDir dir;
  Daemon n1(dir, "n1", {});
  n1.set("spawner.stop_grace=2s");
  const std::string file = dir.write("elasticd.toml", "[checkpoint]\nkeep = 3\n");
  auto daemon = start_with_file(n1, dir, file);

  // A worker of a job, to see that it survives the reload too.
  const std::string pid_file = dir.file("worker.pid");
  RunResult r =
      elasticctl_with({"-c", "", "--set", "control.socket=" + n1.socket(), "submit", "--name",
                       "sleeper", "--env", "PID_FILE=" + pid_file, "--", "/bin/sh", "-c",
                       "echo $$ > \"$PID_FILE.tmp\" && mv "
                       "\"$PID_FILE.tmp\" \"$PID_FILE\"; exec sleep 600"});
  ASSERT_TRUE(r.status.exited_with(0)) << r.err;
  pid_t worker = 0;
  ASSERT_TRUE(wait_until(
      [&] {
        worker = static_cast<pid_t>(std::atoi(read_file(pid_file).c_str()));
        return worker > 0;
      },
      kConverge))
      << daemon->err();

  dir.write("elasticd.toml", "[checkpoint]\nkeep = " + arrays(10'000) + "\n");
  daemon->signal(SIGHUP);
  json status;
  ASSERT_TRUE(wait_until(
      [&] {
        status = status_of(n1.socket());
        return !status.is_null() && status["config"]["last_reload"].is_object();
      },
      kReady))
      << daemon->err();
  EXPECT_EQ(status["config"]["last_reload"]["ok"], false) << status.dump();
  EXPECT_EQ(status["config"]["last_reload"]["message"], file + ":2: " + kTooDeep);
  EXPECT_TRUE(daemon->running());
  EXPECT_TRUE(alive(worker));
  EXPECT_THAT(daemon->err(), HasSubstr("reload failed: " + file + ":2: " + kTooDeep +
                                       "; still running with the previous configuration"));

  // An operator's elasticctl reading the same file reaches the daemon anyway (the file names
  // no socket it could read: the environment's is used) and shows the refusal.
  r = elasticctl_with({"-c", file, "status"}, {{"ELASTIC_CONTROL_SOCKET", n1.socket()}});
  EXPECT_TRUE(r.status.exited_with(0)) << describe(r.status) << "\n" << r.err;
  EXPECT_THAT(r.out, HasSubstr("REFUSED: " + file + ":2: " + kTooDeep));

  // The fixed file applies; the worker ran through all of it.
  dir.write("elasticd.toml", "[checkpoint]\nkeep = 4\n");
  daemon->signal(SIGHUP);
  ASSERT_TRUE(wait_until(
      [&] {
        status = status_of(n1.socket());
        return !status.is_null() && status["config"]["last_reload"]["ok"] == true;
      },
      kReady))
      << daemon->err();
  EXPECT_TRUE(alive(worker));
  daemon->signal(SIGTERM);
  const auto ended = daemon->wait(std::chrono::seconds(20));
  ASSERT_TRUE(ended);
  EXPECT_TRUE(ended->exited_with(0)) << describe(*ended) << "\n" << daemon->err();
}

// ---- status while the config file is broken -----------------------------------------------------

TEST(BrokenConfig, StatusJsonStillReachesTheDaemonAndShowsTheRefusedReload) {
  TempDir dir;
  Daemon n1(dir, "n1", {});
  const std::string good = "[control]\nsocket = \"" + n1.socket() + "\"\n";
  const std::string file = dir.write("elasticd.toml", good);
  auto daemon = start_with_file(n1, dir, file);

  // The operator breaks one key and reloads: refused, the daemon runs on.
  dir.write("elasticd.toml", good + "[logging]\nlevel = \"loud\"\n");
  daemon->signal(SIGHUP);
  ASSERT_TRUE(wait_until(
      [&] {
        const json status = status_of(n1.socket());
        return !status.is_null() && status["config"]["last_reload"].is_object();
      },
      kReady))
      << daemon->err();

  // elasticctl with that same file: the file's control.socket is fine, so it is used; the
  // broken key is reported, and the daemon's last_reload says why the reload was refused.
  RunResult r = elasticctl_with({"-c", file, "status", "--json"});
  ASSERT_TRUE(r.status.exited_with(0)) << describe(r.status) << "\n" << r.err;
  const json status = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(status.is_object()) << r.out;
  EXPECT_EQ(status["config"]["last_reload"]["ok"], false) << status.dump();
  EXPECT_THAT(status["config"]["last_reload"]["message"].get<std::string>(),
              StartsWith(file + ":4: logging.level: \"loud\" is not one of"));
  EXPECT_THAT(r.err, StartsWith(file + ":4: logging.level: "));
  EXPECT_THAT(r.err, HasSubstr("elasticctl: warning: " + file +
                               " is not a valid configuration (see above); going on with the "
                               "control socket " +
                               n1.socket() + "\n"));

  // A file that is not TOML at all: the socket comes from the environment, or from --set.
  dir.write("elasticd.toml", good + "[logging\n");
  r = elasticctl_with({"-c", file, "status", "--json"}, {{"ELASTIC_CONTROL_SOCKET", n1.socket()}});
  EXPECT_TRUE(r.status.exited_with(0)) << describe(r.status) << "\n" << r.err;
  EXPECT_THAT(r.err, HasSubstr("TOML syntax error"));
  r = elasticctl_with({"-c", file, "--set", "control.socket=" + n1.socket(), "status", "--json"});
  EXPECT_TRUE(r.status.exited_with(0)) << describe(r.status) << "\n" << r.err;
  // Without any socket it can read, it tries the default one and says where it looked.
  r = elasticctl_with({"-c", file, "status", "--json"});
  EXPECT_THAT(r.err, HasSubstr("going on with the control socket /run/elastic/elasticd.sock"));

  // What needs the configuration itself still stops with 78, as does a broken --set.
  r = elasticctl_with({"-c", file, "config"});
  EXPECT_TRUE(r.status.exited_with(78)) << describe(r.status) << "\n" << r.err;
  r = elasticctl_with({"-c", file, "--set", "checkpoint.keep=0", "status", "--json"});
  EXPECT_TRUE(r.status.exited_with(78)) << describe(r.status) << "\n" << r.err;

  daemon->signal(SIGTERM);
  const auto ended = daemon->wait(std::chrono::seconds(20));
  ASSERT_TRUE(ended);
  EXPECT_TRUE(ended->exited_with(0)) << describe(*ended) << "\n" << daemon->err();
}

}  // namespace
}  // namespace elastic::testing
