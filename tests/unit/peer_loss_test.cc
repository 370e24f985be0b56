// The lost-peer classifier on the texts Gloo and c10d raise (the first two as a survivor printed
// them when its peer was SIGKILLed, trainer_integ's TheSurvivorOfAKilledPeerExits69EveryTime;
// the rest as Gloo's tcp transport and c10d's sockets format them), and on failures that are
// not a lost peer.
#include "trainer/peer_loss.h"

#include <gtest/gtest.h>

namespace elastic::trainer {
namespace {

TEST(PeerLoss, GlooAndC10dTextsOfALostPeerAreRecognised) {
  for (const char* what : {
           // Gloo's tcp transport: EOF, RST, EPIPE, a blocking read or write that timed out.
           "[./gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:24240",
           "[./gloo/transport/tcp/pair.cc:589] Read error [127.0.0.1]:2451: Connection reset by "
           "peer",
           "[gloo/transport/tcp/pair.cc:377] writev [127.0.0.1]:41285: Broken pipe",
           "[gloo/transport/tcp/pair.cc:420] Read timeout [127.0.0.1]:41285",
           "[gloo/transport/tcp/pair.cc:301] Write timeout [127.0.0.1]:41285",
           "[gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 60000ms for recv "
           "operation to complete",
           "[gloo/transport/tcp/pair.cc:811] Socket closed [127.0.0.1]:41285",
           "[gloo/transport/tcp/pair.cc:128] Socket unexpectedly closed [127.0.0.1]:41285",
           "[gloo/transport/tcp/pair.cc:271] connect [127.0.0.1]:41285: Connection refused",
           // c10d's store and sockets.
           "Socket Timeout",
           "Connection reset by peer",
           "failed to recv, got 0 bytes",
           "The client socket has timed out after 60000ms while trying to connect to "
           "(127.0.0.1, 29500).",
           "connect() to 10.0.0.7:29500 failed: No route to host",
           "sendBytes failed: Network is unreachable",
       }) {
    EXPECT_TRUE(says_a_peer_was_lost(what)) << what;
  }
}

TEST(PeerLoss, OtherFailuresAreNotALostPeer) {
  for (const char* what : {
           "",
           "The size of tensor a (3) must match the size of tensor b (4) at non-singleton "
           "dimension 1",
           "expected scalar type Float but found Double",
           "basic_string::_M_create",
           "std::bad_alloc",
           "[enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: can't allocate "
           "memory",
           "cannot open /data/train-images-idx3-ubyte: No such file or directory",
       }) {
    EXPECT_FALSE(says_a_peer_was_lost(what)) << what;
  }
}

TEST(PeerLoss, CaseDoesNotMatter) {
  EXPECT_TRUE(says_a_peer_was_lost("CONNECTION RESET BY PEER"));
  EXPECT_TRUE(says_a_peer_was_lost("broken PIPE"));
}

}  // namespace
}  // namespace elastic::trainer
