// elasticctl submit [JOB.toml] [flags] [-- COMMAND ARGS...]: a job from a job file
// (ctl/job_file.h), flags that override it and a command after -- that replaces its command,
// resolved on the submitter's PATH; checked whole before anything is sent (65 for a bad spec, 66
// for an unreadable file). Prints the job's id; --dry-run prints the spec as JSON and sends
// nothing; --wait follows the job until it ends (0 succeeded, 3 failed, 4 cancelled; progress on
// stdout, or on stderr with --json so that stdout is the final job object). The object binds its
// options to its own members: keep it in place from add to run().
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ctl/job_file.h"

namespace elastic::ctl {

class SubmitVerb {
 public:
  void add(CLI::App& app);
  bool parsed() const;
  // Submits to the daemon at `socket` (unused with --connect: common.h's remote_daemon);
  // `command` is what followed "--" on the command line. Returns the exit code.
  int run(const std::string& socket, const std::optional<std::vector<std::string>>& command) const;

 private:
  // The flags given on the command line (absent ones leave the file's value or the default).
  JobOverrides overrides(const std::optional<std::vector<std::string>>& command) const;

  CLI::App* submit_ = nullptr;
  std::string job_file_;
  std::string name_, nodes_, restart_backoff_, last_call_, hang_timeout_, checkpoint_root_,
      working_dir_, export_setting_, priority_, scale_, scale_min_gain_, scale_window_;
  std::uint32_t workers_per_node_ = 0;
  std::uint32_t max_restarts_ = 0;
  bool warm_ = false;
  bool preemptible_ = false;
  std::vector<std::string> env_pairs_;
  // Whether each flag was given, for overrides().
  CLI::Option* name_opt_ = nullptr;
  CLI::Option* nodes_opt_ = nullptr;
  CLI::Option* workers_opt_ = nullptr;
  CLI::Option* restarts_opt_ = nullptr;
  CLI::Option* backoff_opt_ = nullptr;
  CLI::Option* last_call_opt_ = nullptr;
  CLI::Option* hang_opt_ = nullptr;
  CLI::Option* ckpt_opt_ = nullptr;
  CLI::Option* workdir_opt_ = nullptr;
  CLI::Option* export_opt_ = nullptr;
  CLI::Option* warm_opt_ = nullptr;
  CLI::Option* priority_opt_ = nullptr;
  CLI::Option* preemptible_opt_ = nullptr;
  CLI::Option* scale_opt_ = nullptr;
  CLI::Option* scale_gain_opt_ = nullptr;
  CLI::Option* scale_window_opt_ = nullptr;
  bool wait_ = false;
  bool dry_run_ = false;
  bool as_json_ = false;
};

}  // namespace elastic::ctl
