#include "tests/support/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace elastic::testing {

bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  while (true) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return condition();
    std::this_thread::sleep_for(pause);  // polling interval, not a fixed wait for an outcome
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

Process::Process(const std::vector<std::string>& argv,
                 const std::map<std::string, std::string>& env, const std::string& log_dir,
                 const std::string& name)
    : out_path_(log_dir + "/" + name + ".out"), err_path_(log_dir + "/" + name + ".err") {
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) merged[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : env) merged[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : merged) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);
  const int out = ::open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int err = ::open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0 || err < 0) throw std::runtime_error("cannot create logs in " + log_dir);
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a crashed test leaves nothing behind
    if (::getppid() != parent) ::_exit(127);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(err, STDERR_FILENO);
    ::setpgid(0, 0);
    ::execve(args[0], args.data(), envp.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(out);
  ::close(err);
}

Process::~Process() {
  if (running()) {
    ::kill(pid_, SIGKILL);
    wait(std::chrono::seconds(30));
  }
}

void Process::signal(int sig) const {
  if (pid_ > 0) ::kill(pid_, sig);
}

bool Process::running() {
  if (status_ || pid_ <= 0) return false;
  return !wait(std::chrono::milliseconds(0)).has_value();
}

std::optional<ExitStatus> Process::wait(std::chrono::milliseconds timeout) {
  if (status_) return status_;
  int raw = 0;
  pid_t got = 0;
  wait_until(
      [&] {
        got = ::waitpid(pid_, &raw, WNOHANG);
        return got != 0;
      },
      timeout);
  if (got == pid_) {
    ExitStatus s;
    if (WIFEXITED(raw)) s.code = WEXITSTATUS(raw);
    if (WIFSIGNALED(raw)) s.signal = WTERMSIG(raw);
    status_ = s;
  } else if (got < 0) {
    status_ = ExitStatus{};
  }
  return status_;
}

std::string Process::out() const { return read_file(out_path_); }
std::string Process::err() const { return read_file(err_path_); }

RunResult run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
              std::chrono::milliseconds timeout) {
  TempDir logs;
  Process process(argv, env, logs.path(), "run");
  RunResult result;
  auto status = process.wait(timeout);
  if (!status) {
    result.timed_out = true;
    process.signal(SIGKILL);
    status = process.wait(std::chrono::seconds(30));
  }
  result.status = status.value_or(ExitStatus{});
  result.out = process.out();
  result.err = process.err();
  return result;
}

}  // namespace elastic::testing
