// A worker that speaks the worker channel through trainer/worker_channel.h, for
// worker_channel_integ_test: hello(live), wait for a round, print what it was told, joined,
// then wait for a stop (exit 0) or the daemon's end of file (exit 3). Exit 2: no channel or a
// failure, with the sentence on stderr (the test reads the worker's log).
// With CHANNEL_WORKER_ALIVE="MODE,MODE,..." (one per RANK) it also plays a training loop's
// "alive" messages for hang detection: steps 1..5 every 20 ms, then for ever by its rank's
// mode: "wait" (still at step 5, waiting for its peers, alive every 100 ms), "busy" (the same,
// not waiting: stuck in its own work), "silent" (no more alive: a frozen process), "step"
// (a step every 100 ms: healthy).
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "trainer/worker_channel.h"

int main() {
  using namespace elastic::trainer;
  const EnvMap env = current_environment();
  auto current = parse_worker_env(env);
  if (!current.ok()) {
    std::fprintf(stderr, "environment: %s\n", current.error().message.c_str());
    return 2;
  }
  auto channel = WorkerChannel::from_env(env);
  if (!channel.ok() || !channel->has_value()) {
    std::fprintf(stderr, "no channel: %s\n",
                 channel.ok() ? "ELASTIC_WORKER_FD is not set" : channel.error().message.c_str());
    return 2;
  }
  WorkerChannel& link = **channel;
  if (auto hello = link.hello(/*live=*/true); !hello.ok()) {
    std::fprintf(stderr, "hello: %s\n", hello.error().message.c_str());
    return 2;
  }
  std::printf("said hello on fd %d\n", link.fd());
  std::fflush(stdout);
  std::string mode;
  if (const auto it = env.find("CHANNEL_WORKER_ALIVE"); it != env.end()) {
    std::istringstream modes(it->second);
    std::vector<std::string> by_rank;
    for (std::string m; std::getline(modes, m, ',');) by_rank.push_back(m);
    if (current->rank >= 0 && static_cast<std::size_t>(current->rank) < by_rank.size()) {
      mode = by_rank[static_cast<std::size_t>(current->rank)];
    }
  }
  std::uint64_t step = 0;
  const auto started = std::chrono::steady_clock::now();
  auto step_at = started;
  while (true) {
    if (!mode.empty()) {
      const auto t = std::chrono::steady_clock::now();
      bool stepped = false;
      if (step < 5 || mode == "step") {
        ++step;
        step_at = t;
        stepped = true;
      }
      if (stepped || mode != "silent") {
        const auto idle =
            std::chrono::duration_cast<std::chrono::milliseconds>(t - step_at).count();
        (void)link.alive({.step = step,
                          .idle_ms = static_cast<std::uint64_t>(idle),
                          .waiting = mode == "wait"});
      }
      if (std::chrono::steady_clock::now() - started > std::chrono::minutes(2)) {
        std::fprintf(stderr, "no instruction within 2 minutes\n");
        return 2;
      }
    }
    const auto slice = mode.empty() ? std::chrono::milliseconds(std::chrono::minutes(2))
                       : step < 5   ? std::chrono::milliseconds(20)
                                    : std::chrono::milliseconds(100);
    auto instruction = link.receive(slice, *current);
    if (!instruction.ok()) {
      std::printf("channel ended: %s\n", instruction.error().message.c_str());
      return 3;
    }
    if (!instruction->has_value()) {
      if (!mode.empty()) continue;
      std::fprintf(stderr, "no instruction within 2 minutes\n");
      return 2;
    }
    if (const auto* stop = std::get_if<StopRequest>(&**instruction)) {
      std::printf("stop: %s\n", stop->reason.c_str());
      return 0;
    }
    const NextRound& next = std::get<NextRound>(**instruction);
    const WorkerEnv& e = next.env;
    std::printf(
        "round %lld term %llu rank %d of %d local %d/%d group %d store %s:%d restarts %d "
        "job %s run %s%s\n",
        static_cast<long long>(e.round), static_cast<unsigned long long>(next.term), e.rank,
        e.world_size, e.local_rank, e.local_world_size, e.group_rank, e.master_addr.c_str(),
        e.master_port, e.restart_count, e.job_id.c_str(), e.run_id.c_str(),
        next.intact ? " intact" : "");
    std::fflush(stdout);
    *current = e;
    if (auto joined = link.joined(e.round, next.term); !joined.ok()) {
      std::fprintf(stderr, "joined: %s\n", joined.error().message.c_str());
      return 2;
    }
  }
}
