// What elasticctl's live views (`top`, `jobs --watch`) share: their --interval option and the
// signals that end them.
//
// --interval takes seconds as a plain number ("2", "0.5", as `watch -n` and `top -d` do) or a
// duration with its unit ("500ms", "1m"; daemon/core/duration.h), from kMinRefresh to
// kMaxRefresh; anything else is one sentence naming the value, and CLI11 turns it into exit 64.
//
// StopSignals makes SIGINT, SIGTERM and SIGHUP (and, when asked, SIGWINCH) pollable: while one
// exists their handlers only write the signal's number into a pipe, so the loop ends or
// redraws between two refreshes, restores the terminal and exits 0 (an interrupt is how a
// watch is meant to end). The previous handlers come back when it is destroyed. Only one may
// exist at a time (the handlers share one pipe); a broken pipe() aborts (out of descriptors
// before the first request). Thread safety: the thread that made it waits on it.
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <string>
#include <string_view>

#include "daemon/core/result.h"

namespace elastic::ctl {

inline constexpr std::chrono::milliseconds kDefaultRefresh{2000};
// Faster than this is a load on the leader (every refresh reads the job table) for nothing a
// person can read; slower than an hour is not a live view.
inline constexpr std::chrono::milliseconds kMinRefresh{100};
inline constexpr std::chrono::milliseconds kMaxRefresh{3600 * 1000};

// "2" -> 2000ms, "0.5" -> 500ms, "500ms" -> 500ms; an Error sentence otherwise.
Result<std::chrono::milliseconds> parse_interval(std::string_view text);

// Adds --interval to `command`, kept as written in `text` (parse_interval reads it in run()).
void add_interval_option(CLI::App* command, std::string& text);

class StopSignals {
 public:
  enum class Wake { kTimeout, kStop, kResize, kInput };

  // Catches SIGINT, SIGTERM, SIGHUP and, with `resize`, SIGWINCH.
  explicit StopSignals(bool resize = false);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // Waits up to `timeout` for a signal or for `input` (a descriptor, -1 for none) to be
  // readable. kStop wins over the others once a stop signal came, and stays: every later
  // wait() returns it at once.
  Wake wait(std::chrono::milliseconds timeout, int input = -1);
  bool stopped() const { return stopped_; }

 private:
  bool resize_;
  bool stopped_ = false;
  struct sigaction previous_[4];
};

}  // namespace elastic::ctl
