// Writes the seed corpus of the wire fuzzer: one valid envelope per membership and Raft message
// and the bare bodies, so libFuzzer starts from inputs that reach deep into the decoder.
// Usage: wire_fuzz_corpus <dir>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>

#include "daemon/consensus/raft_codec.h"
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
  auto write = [&dir, &n](MsgType type, std::string body) {
    Envelope e;
    e.cluster_id = "fuzz";
    e.sender = "a";
    e.generation = 3;
    e.sender_address = "tcp://10.0.0.1:7946";
    e.type = type;
    e.seq = static_cast<std::uint64_t>(n);
    e.body = std::move(body);
    std::ofstream(dir + "/envelope-" + std::to_string(n), std::ios::binary) << encode_envelope(e);
    std::ofstream(dir + "/body-" + std::to_string(n), std::ios::binary) << e.body;
    ++n;
  };
  for (const MembershipMessage& m : messages) write(message_type(m), encode_body(m));

  namespace raft = elastic::consensus;
  const raft::Entry noop{4, 10, raft::EntryType::kNoop, ""};
  const raft::Entry command{4, 11, raft::EntryType::kCommand, std::string("cmd\0\x01\xff", 6)};
  const raft::Message raft_messages[] = {
      {1, 2, raft::VoteRequest{true, 5, 11, 4}},
      {2, 1, raft::VoteReply{false, 5, true}},
      {1, 3, raft::AppendEntries{4, 9, 3, {noop, command}, 9}},
      {3, 1, raft::AppendReply{4, false, 0, 7, 3}},
  };
  for (const raft::Message& m : raft_messages) {
    write(raft::raft_message_type(m.body), raft::encode_raft(m));
  }
  return 0;
}
