// elasticctl's job verbs: `status` (the local daemon: identity, members, Raft, its config, its
// rounds) or `status JOB` (one job: state, round, ranks, command, its state changes), `jobs`
// (every job the leader knows, with its priority and, for a waiting job, its queue position and
// why it waits; with --watch [--interval S] again every S until Ctrl-C), `cancel JOB`, `priority
// JOB N`, `suspend JOB` and `resume JOB` (its owner, root or control.admin_group; a priority
// above limits.priority_ceiling needs an admin) and `events [JOB] [--limit N]` (job state changes,
// the leader's cluster events and recovery incident timelines, oldest first). All but `status`
// without JOB are forwarded by the local daemon to the Raft leader. Each prints a human table, or
// the daemon's JSON with --json, and returns the exit code (ctl/main.cc lists them). The object
// binds its options to its own members: keep it in place from add_* to run().
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace elastic::ctl {

class JobVerbs {
 public:
  // Each adds one verb to `app` (ctl/main.cc calls them in --help's order).
  void add_status(CLI::App& app);
  void add_jobs(CLI::App& app);
  void add_cancel(CLI::App& app);
  void add_priority(CLI::App& app);
  void add_suspend(CLI::App& app);  // suspend and resume
  void add_events(CLI::App& app);

  // Whether the command line named one of these verbs.
  bool parsed() const;
  // Runs it against the daemon at `socket` (unused with --connect: common.h's remote_daemon).
  int run(const std::string& socket) const;

 private:
  CLI::App* status_ = nullptr;
  CLI::App* jobs_ = nullptr;
  CLI::App* cancel_ = nullptr;
  CLI::App* priority_ = nullptr;
  CLI::App* suspend_ = nullptr;
  CLI::App* resume_ = nullptr;
  std::string priority_text_;  // priority JOB N: checked by parse_priority for one clear error
  CLI::App* events_ = nullptr;
  std::string job_;             // status [JOB], cancel/priority/suspend/resume JOB, events [JOB]
  std::int64_t limit_ = 0;      // events --limit: 0 for all
  bool watch_ = false;          // jobs --watch
  std::string interval_ = "2";  // jobs --interval (ctl/refresh.h)
  bool as_json_ = false;
};

}  // namespace elastic::ctl
