// Test support: run real processes, capture their output, wait for conditions with deadlines.
//
// Used by the integration tier (and later by the namespace harness). Never sleeps a fixed
// time: wait_until() polls a condition until its deadline. Processes are ended by PID only.
// Thread safety: a Process belongs to one test thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"

namespace elastic::testing {

using namespace std::chrono_literals;

// Polls `condition` every few milliseconds until it holds or `timeout` passes.
bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout);

struct ExitStatus {
  int code = -1;   // exit code, or -1 if signalled
  int signal = 0;  // terminating signal, or 0
  bool exited_with(int c) const { return signal == 0 && code == c; }
};

class Process {
 public:
  // Starts argv[0] (a path) with the current environment plus/overridden by `env`; stdout and
  // stderr go to files in `log_dir`, named after `name`.
  Process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
          const std::string& log_dir, const std::string& name);
  ~Process();  // SIGKILLs the process if it still runs, then reaps it
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  void signal(int sig) const;
  // Waits for the exit; nullopt if it did not exit within `timeout`.
  std::optional<ExitStatus> wait(std::chrono::milliseconds timeout);
  bool running();
  std::string out() const;
  std::string err() const;

 private:
  pid_t pid_ = -1;
  std::optional<ExitStatus> status_;
  std::string out_path_, err_path_;
};

// Runs to completion (or kills it after `timeout`, failing the current test).
struct RunResult {
  ExitStatus status;
  std::string out, err;
  bool timed_out = false;
};
RunResult run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
              std::chrono::milliseconds timeout);

std::string read_file(const std::string& path);

}  // namespace elastic::testing
