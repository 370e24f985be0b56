// progress_worker: a sleep-like worker for the integration tests that speaks the worker
// progress protocol through elastic-trainer's own client (trainer/progress.h), without
// LibTorch. Rank 0 reports a "step" every 100 ms (the client sends at most one a second, and
// the first at once). Round 1 starts fresh; later rounds "resume" from step 5.
// Environment (besides the daemon's worker contract):
//   CRASH_RANK=N      in round 1, rank N exits 3 after CRASH_AFTER_MS (default 1500) ms
//   PROGRESS_ONCE=1   send one step report, print nothing, exit 0 (the client logs a refusal)
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <string>

#include "trainer/progress.h"

extern char** environ;

int main() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const auto eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  const auto number = [&](const char* name, long fallback) {
    const auto it = env.find(name);
    return it == env.end() ? fallback : std::strtol(it->second.c_str(), nullptr, 10);
  };
  elastic::trainer::ProgressReporter reporter(env);
  if (env.contains("PROGRESS_ONCE")) {
    reporter.step(1, -1);
    return 0;
  }
  const long round = number("ELASTIC_ROUND", 0);
  const long rank = number("RANK", 0);
  const long crash_rank = number("CRASH_RANK", -1);
  const auto crash_after = std::chrono::milliseconds(number("CRASH_AFTER_MS", 1500));
  const std::int64_t resumed = round <= 1 ? -1 : 5;
  std::int64_t step = resumed < 0 ? 0 : resumed;
  const auto start = std::chrono::steady_clock::now();
  while (true) {
    ++step;
    if (rank == 0) reporter.step(step, resumed);
    if (round == 1 && rank == crash_rank &&
        std::chrono::steady_clock::now() - start > crash_after) {
      return 3;
    }
    ::usleep(100'000);  // one "training step"
  }
}
