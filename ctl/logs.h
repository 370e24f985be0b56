// elasticctl logs JOB [--rank N] [--follow] | --round R | --all: a job's worker output.
// The current round's by default: every rank prefixed "[rank N] ", or one rank raw; --follow
// keeps reading (a rank's old file is finished before its new round's) and rides out a daemon
// restart or a leader election. With --round or --all: the files every member daemon lists for
// the job (log_files; the local daemon's list alone when spawner.log_root shares them), each
// file whole, in round then rank order, prefixed "[rank N] " (--round), "[round R rank N] "
// (--all), raw for --round with --rank. A member that is dead or does not answer is named in one
// warning line on stderr and does not change the exit status; --round of a round nobody has logs
// of exits 1. A bad --round, --round with --all, or --follow with either exits 64 before
// anything is asked. The object binds its options to its own members: keep it in place from
// add to run().
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace elastic::ctl {

class LogsVerb {
 public:
  void add(CLI::App& app);
  bool parsed() const;
  // Runs it against the daemon at `socket` (unused with --connect: common.h's remote_daemon);
  // returns the exit code.
  int run(const std::string& socket) const;

 private:
  CLI::App* logs_ = nullptr;
  std::string job_;
  CLI::Option* rank_opt_ = nullptr;
  std::uint32_t rank_ = 0;
  CLI::Option* round_opt_ = nullptr;
  std::string round_;  // checked in run(): CLI11's own number error would not say what a round is
  bool all_ = false;
  bool follow_ = false;
  bool as_json_ = false;
};

}  // namespace elastic::ctl
