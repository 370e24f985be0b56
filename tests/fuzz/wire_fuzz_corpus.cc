// Writes the seed corpus of the wire fuzzer: one valid envelope per membership message and the
// bare bodies, so libFuzzer starts from inputs that reach deep into the decoder.
// Usage: wire_fuzz_corpus <dir>
#include <cstdio>
#include <fstream>
#include <string>

#include "daemon/wire/codec.h"

using namespace elastic::wire;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <dir>\n", argv[0]);
    return 64;
  }
  const std::string dir = argv[1];
  MemberUpdate alive{"a", 3, 1, MemberState::kAlive, "tcp://10.0.0.1:7946", ""};
  MemberUpdate dead{"b", 2, 4, MemberState::kDead, "tcp://10.0.0.2:7946", "a"};
  const MembershipMessage messages[] = {
      Ping{1, "b", 2, {alive, dead}},
      Ack{1, {alive}},
      PingReq{2, "c", 5, "tcp://10.0.0.3:7946", true, {dead}},
      Nack{3},
      PushPullDigest{0x1234567890abcdefULL, 2, false},
      PushPullState{{alive, dead}, true, false},
  };
  int n = 0;
  for (const MembershipMessage& m : messages) {
    Envelope e;
    e.cluster_id = "fuzz";
    e.sender = "a";
    e.generation = 3;
    e.sender_address = "tcp://10.0.0.1:7946";
    e.type = message_type(m);
    e.seq = static_cast<std::uint64_t>(n);
    e.body = encode_body(m);
    std::ofstream(dir + "/envelope-" + std::to_string(n), std::ios::binary) << encode_envelope(e);
    std::ofstream(dir + "/body-" + std::to_string(n), std::ios::binary) << e.body;
    ++n;
  }
  return 0;
}
