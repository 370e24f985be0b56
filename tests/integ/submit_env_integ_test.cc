// Integration tier: what `elasticctl submit` takes from the submitter's
// shell, through a real elasticd on 127.0.0.1 to a real worker:
//   - the environment (--export ALL by default: PYTHONPATH, a venv's PATH and VIRTUAL_ENV,
//     NCCL_* reach the worker; host variables such as HOSTNAME, SSH_* and SLURM_* never do;
//     --export NONE sends nothing; --env still wins);
//   - the command, resolved in the submitter's PATH: a venv-like directory first in PATH with
//     its own python3 shim is what runs, and `status` shows the resolved path;
//   - {job_id}, {checkpoint_dir} and {round} in --env values and arguments, expanded per worker;
//     an unknown placeholder, a command not in PATH or an environment too large for the
//     control socket is refused at submit (exit 65).
// The worker's output is read back with `elasticctl logs`. Every wait polls with a deadline.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "tests/integ/daemon_under_test.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace elastic::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using json = nlohmann::json;

constexpr auto kJob = std::chrono::seconds(60);

class SubmitEnvInteg : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_.set("checkpoint.root=" + checkpoints_);
    daemon_.start();
    // A venv-like directory: bin/python3 is a shim that says it ran, then runs the real one.
    std::filesystem::create_directories(dir_ / "venv/bin");
    const std::string shim = dir_.write(
        "venv/bin/python3", "#!/bin/sh\necho \"venv shim ran\"\nexec /usr/bin/python3 \"$@\"\n");
    std::filesystem::permissions(shim, std::filesystem::perms(0755));
  }

  // The submitter's shell: a venv first in PATH, PYTHONPATH, NCCL settings, and variables of
  // the submitting host and session that must not cross.
  std::map<std::string, std::string> shell() const {
    return {{"PATH", dir_ / "venv/bin" + ":/usr/bin:/bin"},
            {"VIRTUAL_ENV", dir_ / "venv"},
            {"PYTHONPATH", dir_ / "lib"},
            {"NCCL_SOCKET_IFNAME", "lo"},
            {"NCCL_DEBUG", "INFO"},
            {"HOSTNAME", "submit-host"},
            {"SSH_CONNECTION", "10.9.8.7 5000 10.9.8.6 22"},
            {"SLURM_PROCID", "7"}};
  }

  // elasticctl on the daemon with `env` added to (or replacing in) this process's environment.
  RunResult ctl(const std::vector<std::string>& args,
                const std::map<std::string, std::string>& env = {}) const {
    std::vector<std::string> argv = {ELASTICCTL_PATH, "-c", "", "--set",
                                     "control.socket=" + daemon_.socket()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run(argv, env, kJob);
  }

  // Submits with --wait (the job must succeed) and returns its id.
  std::string submit_and_wait(const std::vector<std::string>& args,
                              const std::map<std::string, std::string>& env) {
    std::vector<std::string> full = {"submit", "--nodes",        "1", "--workers-per-node",
                                     "1",      "--max-restarts", "0", "--wait"};
    full.insert(full.end(), args.begin(), args.end());
    const RunResult r = ctl(full, env);
    EXPECT_TRUE(r.status.exited_with(0)) << r.out << r.err << daemon_.process().err();
    std::smatch match;
    const std::regex submitted("submitted (\\S+)");
    return std::regex_search(r.out, match, submitted) ? match[1].str() : "";
  }

  std::string logs(const std::string& id) const {
    const RunResult r = ctl({"logs", id, "--rank", "0"});
    EXPECT_TRUE(r.status.exited_with(0)) << r.err;
    return r.out;
  }

  TempDir dir_;
  std::string checkpoints_ = dir_ / "ck";
  Daemon daemon_{dir_, "n1", {}};
};

const std::string kPrintEnv =
    "import os\n"
    "for k in ('PATH', 'VIRTUAL_ENV', 'PYTHONPATH', 'NCCL_SOCKET_IFNAME', 'NCCL_DEBUG',\n"
    "          'HOSTNAME', 'SSH_CONNECTION', 'SLURM_PROCID'):\n"
    "    print(k + '=' + os.environ.get(k, '<unset>'))\n";

TEST_F(SubmitEnvInteg, TheSubmittersEnvironmentAndVenvPythonReachTheWorker) {
  const std::string id = submit_and_wait(
      {"--name", "venv", "--env", "NCCL_DEBUG=WARN", "--", "python3", "-c", kPrintEnv}, shell());
  ASSERT_FALSE(id.empty());
  const std::string out = logs(id);
  EXPECT_THAT(out, HasSubstr("venv shim ran\n"));
  EXPECT_THAT(out, HasSubstr("PATH=" + dir_ / "venv/bin" + ":/usr/bin:/bin\n"));
  EXPECT_THAT(out, HasSubstr("VIRTUAL_ENV=" + dir_ / "venv" + "\n"));
  EXPECT_THAT(out, HasSubstr("PYTHONPATH=" + dir_ / "lib" + "\n"));
  EXPECT_THAT(out, HasSubstr("NCCL_SOCKET_IFNAME=lo\n"));
  EXPECT_THAT(out, HasSubstr("NCCL_DEBUG=WARN\n"));  // --env beats the exported value
  // Variables of the submitting host and session never cross.
  EXPECT_THAT(out, Not(HasSubstr("submit-host")));
  EXPECT_THAT(out, HasSubstr("SSH_CONNECTION=<unset>\n"));
  EXPECT_THAT(out, HasSubstr("SLURM_PROCID=<unset>\n"));

  // status shows the command as resolved at submit.
  const RunResult status = ctl({"status", id});
  ASSERT_TRUE(status.status.exited_with(0)) << status.err;
  EXPECT_THAT(status.out, HasSubstr("command:  " + dir_ / "venv/bin/python3" + " -c '"));
  const RunResult as_json = ctl({"status", id, "--json"});
  const json job = json::parse(as_json.out, nullptr, false);
  ASSERT_TRUE(job.is_object()) << as_json.out;
  EXPECT_EQ(job["spec"]["command"][0], dir_ / "venv/bin/python3");
  EXPECT_EQ(job["spec"]["exported_env"]["PYTHONPATH"], dir_ / "lib");
  EXPECT_FALSE(job["spec"]["exported_env"].contains("HOSTNAME"));
}

TEST_F(SubmitEnvInteg, ExportNoneSendsNothingOfTheShell) {
  const std::string id =
      submit_and_wait({"--name", "bare", "--export", "NONE", "--", "/usr/bin/env"}, shell());
  ASSERT_FALSE(id.empty());
  const std::string out = logs(id);
  EXPECT_THAT(out, HasSubstr("RANK=0\n"));  // the worker ran and printed its environment
  EXPECT_THAT(out, Not(HasSubstr("PYTHONPATH=")));
  EXPECT_THAT(out, Not(HasSubstr("NCCL_")));
  EXPECT_THAT(out, Not(HasSubstr("VIRTUAL_ENV=")));
  EXPECT_THAT(out, Not(HasSubstr(dir_ / "venv/bin")));
  EXPECT_THAT(out, Not(HasSubstr("submit-host")));

  // A list sends only what it names.
  const std::string listed = submit_and_wait(
      {"--name", "listed", "--export", "PYTHONPATH", "--", "/usr/bin/env"}, shell());
  ASSERT_FALSE(listed.empty());
  const std::string listed_out = logs(listed);
  EXPECT_THAT(listed_out, HasSubstr("PYTHONPATH=" + dir_ / "lib" + "\n"));
  EXPECT_THAT(listed_out, Not(HasSubstr("NCCL_")));
}

TEST_F(SubmitEnvInteg, PlaceholdersAreExpandedInEnvAndArguments) {
  const std::string id = submit_and_wait(
      {"--name", "ph", "--env", "CKPT={checkpoint_dir}/mine", "--env", "TAG={job_id}-r{round}",
       "--env", "LIT={{x}}", "--", "/bin/sh", "-c",
       "echo \"CKPT=$CKPT TAG=$TAG LIT=$LIT ARG=$0 ROUND=$ELASTIC_ROUND\"", "{job_id}"},
      shell());
  ASSERT_FALSE(id.empty());
  const std::string out = logs(id);
  std::smatch match;
  ASSERT_TRUE(std::regex_search(out, match, std::regex("ROUND=(\\d+)"))) << out;
  const std::string round = match[1];
  EXPECT_THAT(out, HasSubstr("CKPT=" + checkpoints_ + "/" + id + "/mine TAG=" + id + "-r" + round +
                             " LIT={x} ARG=" + id + " ROUND=" + round + "\n"));
}

TEST_F(SubmitEnvInteg, BadInputIsRefusedAtSubmitSayingWhatIsWrong) {
  RunResult r = ctl({"submit", "--name", "bad", "--env", "CKPT={ckpt}/x", "--", "/bin/true"});
  EXPECT_TRUE(r.status.exited_with(65)) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("--env: the value of CKPT uses {ckpt}, which is not a "
                               "placeholder (the placeholders are {job_id}, {checkpoint_dir} "
                               "and {round}; write {{ and }} for literal braces)"));
  // Arguments are not checked for braces: JSON and shell text pass as they are.
  r = ctl({"submit", "--name", "json", "--", "/bin/echo", "{\"lr\": 1}", "${HOME}"});
  EXPECT_TRUE(r.status.exited_with(0)) << r.out << r.err;

  r = ctl({"submit", "--name", "bad", "--", "elastic-no-such-program"},
          {{"PATH", dir_ / "venv/bin" + ":/usr/bin:/bin"}});
  EXPECT_TRUE(r.status.exited_with(65)) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("command: \"elastic-no-such-program\" was not found in PATH (" +
                               dir_ / "venv/bin" + ":/usr/bin:/bin); give its full path"));
  // An environment too large for the control socket's request frame.
  std::map<std::string, std::string> big = shell();
  for (int i = 0; i < 5; ++i) big["BIG_" + std::to_string(i)] = std::string(15000, 'x');
  r = ctl({"submit", "--name", "bad", "--", "/bin/true"}, big);
  EXPECT_TRUE(r.status.exited_with(65)) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("bytes, more than the control socket's limit of 65536; the "
                               "largest exported variables: BIG_0 (15007 bytes), "));
  EXPECT_THAT(r.err, HasSubstr("--export NAME,... (or NONE)"));
  r = ctl({"submit", "--name", "small", "--export", "PYTHONPATH", "--dry-run", "--", "/bin/true"},
          big);
  EXPECT_TRUE(r.status.exited_with(0)) << r.out << r.err;
  // Nothing was submitted.
  const RunResult jobs = ctl({"jobs", "--json"});
  ASSERT_TRUE(jobs.status.exited_with(0)) << jobs.err;
  EXPECT_THAT(jobs.out, Not(HasSubstr("bad-")));
}

}  // namespace
}  // namespace elastic::testing
