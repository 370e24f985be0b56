// Writes the seed corpus of the worker channel fuzzer (worker_channel_fuzz.cc): a worker's
// stream of framed hello and joined messages (with a piece-size byte before each chunk), and the
// daemon's round and stop messages, each prefixed with the selector byte the fuzzer reads first.
// Usage: worker_channel_fuzz_corpus <dir>
#include <cstdio>
#include <fstream>
#include <string>

#include "daemon/worker_channel/messages.h"

using namespace elastic::worker_channel;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <dir>\n", argv[0]);
    return 64;
  }
  const std::string dir = argv[1];
  int n = 0;
  auto write = [&](char selector, const std::string& body) {
    std::ofstream out(dir + "/seed-" + std::to_string(n++), std::ios::binary);
    out << selector << body;
  };
  const std::string hello = frame(encode(WorkerMessage(Hello{1, true})));
  const std::string joined = frame(encode(WorkerMessage(Joined{1, 0})));
  write('\0', hello + joined);
  write('\0', frame(encode(WorkerMessage(Hello{1, false}))));
  write('\0', hello + frame(encode(WorkerMessage(UnknownMessage{"progress"}))) + joined);
  write('\0', std::string("\xff\xff\xff\xff", 4) + hello);
  write('\0', hello + frame(encode(WorkerMessage(Alive{12, 480, true}))) +
                  frame(encode(WorkerMessage(Alive{13, 3, false}))));
  const RoundOffer round{.job = "fmnist-1",
                         .round = 4,
                         .term = 2,
                         .rank = 3,
                         .local_rank = 1,
                         .world_size = 8,
                         .local_world_size = 2,
                         .group_rank = 1,
                         .master_addr = "10.0.0.1",
                         .master_port = 29500,
                         .restart_count = 3};
  write('\1', encode(DaemonMessage(round)));
  RoundOffer grow = round;
  grow.intact = true;
  write('\1', encode(DaemonMessage(grow)));
  write('\1', encode(DaemonMessage(Stop{"job cancelled"})));
  return 0;
}
