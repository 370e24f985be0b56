// `elasticctl top [--interval S]`: a live view of the nodes and jobs, refreshed every S (2 s by
// default) from the same requests `status`, `nodes` and `jobs` make (all three to the local
// daemon, which forwards `jobs` to the leader). The frame, its sorting and its keys are
// ctl/top_view.h; this is the terminal around it.
//
// On a terminal (stdin and stdout both ttys) it takes the alternate screen in non-canonical,
// no-echo mode and redraws in place; q quits with exit 0, and Ctrl-C (SIGINT), SIGTERM and
// SIGHUP end it with exit 0 the same way (Ctrl-Z is off while it runs: stopped, it would leave
// the terminal raw). The terminal's settings and screen come back on every way out. A daemon
// that stops answering is shown in the frame while the view keeps trying; only one that does
// not answer before the first frame ends it, with its exit code (69, 77).
// Anywhere else (a pipe, a file, cron) it prints one frame without escapes or size limits and
// exits 0, or with the exit code when the local daemon did not answer.
// The object binds its options to its own members: keep it in place from add() to run().
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace elastic::ctl {

class TopVerb {
 public:
  void add(CLI::App& app);
  bool parsed() const;
  // Runs it against the daemon at `socket` (unused with --connect: common.h's remote_daemon).
  int run(const std::string& socket) const;

 private:
  CLI::App* top_ = nullptr;
  std::string interval_ = "2";
};

}  // namespace elastic::ctl
