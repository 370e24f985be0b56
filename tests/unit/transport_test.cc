// ZmqTransport over real ZeroMQ sockets on 127.0.0.1 (ports chosen by ZeroMQ), CURVE key files
// and the persisted generation. No fixed sleeps: every wait polls a condition with a deadline.
#include "daemon/transport/zmq_transport.h"

#include <grp.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <thread>
#include <zmq.hpp>

#include "daemon/control/credentials.h"
#include "daemon/transport/control_client.h"
#include "daemon/transport/curve_keys.h"
#include "daemon/transport/generation.h"
#include "daemon/wire/codec.h"
#include "tests/support/process.h"
#include "tests/support/result_assertions.h"
#include "tests/support/temp_dir.h"

// libzmq (and libsodium, which decrypts CURVE frames on libzmq's I/O thread) is not built with
// ThreadSanitizer: its lock-free pipes between the caller and the I/O thread synchronise in
// uninstrumented code, so TSAN reports every message buffer handed over. Only reports with
// frames in those libraries are suppressed; our code has no threads of its own.
extern "C" const char* __tsan_default_suppressions() {
  return "called_from_lib:libzmq.so.5\nrace:libzmq.so.5\ncalled_from_lib:libsodium.so.23\n"
         "race:libsodium.so.23\n";
}

namespace elastic::transport {
namespace {

using namespace std::chrono_literals;
using elastic::testing::Process;
using elastic::testing::TempDir;
using elastic::testing::wait_until;

TransportOptions options(const std::string& name, std::uint64_t generation) {
  TransportOptions o;
  o.bind = "tcp://127.0.0.1:*";
  o.name = name;
  o.generation = generation;
  o.cluster_id = "c1";
  o.heartbeat_interval = 200ms;
  o.heartbeat_timeout = 1s;
  return o;
}

std::unique_ptr<ZmqTransport> open_transport(const TransportOptions& o) {
  Result<std::unique_ptr<ZmqTransport>> t = ZmqTransport::open(o);
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message);
  return t.ok() ? std::move(t).value() : nullptr;
}

wire::Envelope nack(std::uint64_t probe) {
  wire::Envelope e;
  e.type = wire::MsgType::kNack;
  e.body = wire::encode_body(wire::Nack{probe});
  return e;
}

// Receives on `t` until `count` envelopes arrived or `timeout` passed. The transports in
// `senders` are pumped too: a sender retries its first messages to a peer (queued while the
// connection comes up) inside its own receive(), as the daemon's loop does all the time.
std::vector<wire::Envelope> receive_n(ZmqTransport& t, std::size_t count,
                                      std::vector<ZmqTransport*> senders = {},
                                      std::chrono::milliseconds timeout = 10s) {
  std::vector<wire::Envelope> got;
  wait_until(
      [&] {
        for (ZmqTransport* s : senders) (void)s->receive(Duration::zero());
        for (wire::Envelope& e : t.receive(20ms).envelopes) got.push_back(std::move(e));
        return got.size() >= count;
      },
      timeout);
  return got;
}

// Pumps `t` until all it has accepted is handed to ZeroMQ.
bool flush(ZmqTransport& t, std::uint64_t sent) {
  return wait_until(
      [&] {
        (void)t.receive(Duration::zero());
        return t.stats().sent >= sent;
      },
      10s);
}

std::uint64_t probe_of(const wire::Envelope& e) {
  Result<wire::MembershipMessage> m = wire::decode_membership(e.type, e.body);
  return m.ok() ? std::get<wire::Nack>(*m).probe : ~0ULL;
}

TEST(Transport, TwoTransportsExchangeEnvelopesBothWays) {
  auto a = open_transport(options("a", 1));
  auto b = open_transport(options("b", 7));
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->bound_endpoint().find("tcp://127.0.0.1:"), std::string::npos);
  EXPECT_NE(a->bound_endpoint(), "tcp://127.0.0.1:*");

  for (std::uint64_t i = 1; i <= 3; ++i) ASSERT_OK(a->send({b->bound_endpoint(), "b"}, nack(i)));
  std::vector<wire::Envelope> at_b = receive_n(*b, 3, {a.get()});
  ASSERT_EQ(at_b.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(at_b[i].sender, "a");
    EXPECT_EQ(at_b[i].generation, 1u);
    EXPECT_EQ(at_b[i].cluster_id, "c1");
    EXPECT_EQ(at_b[i].sender_address, a->bound_endpoint());
    EXPECT_EQ(at_b[i].seq, i + 1);
    EXPECT_EQ(probe_of(at_b[i]), i + 1);
  }

  // The reply goes to the sender's ROUTER through b's own DEALER.
  ASSERT_OK(b->send({at_b[0].sender_address, at_b[0].sender}, nack(100)));
  std::vector<wire::Envelope> at_a = receive_n(*a, 1, {b.get()});
  ASSERT_EQ(at_a.size(), 1u);
  EXPECT_EQ(at_a[0].sender, "b");
  EXPECT_EQ(at_a[0].generation, 7u);
  EXPECT_EQ(probe_of(at_a[0]), 100u);
  EXPECT_EQ(a->stats().sent, 3u);
  EXPECT_EQ(b->stats().received, 3u);
  EXPECT_EQ(a->stats().send_failures, 0u);
}

TEST(Transport, ReceiveReturnsPromptlyWhenAMessageOrAWatchedFdIsReady) {
  auto a = open_transport(options("a", 1));
  auto b = open_transport(options("b", 1));
  ASSERT_TRUE(a && b);
  ASSERT_OK(a->send({b->bound_endpoint(), "b"}, nack(1)));
  ASSERT_TRUE(flush(*a, 1));
  auto start = std::chrono::steady_clock::now();
  Received r = b->receive(30s);
  EXPECT_EQ(r.envelopes.size(), 1u);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);

  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ASSERT_EQ(::write(fds[1], "x", 1), 1);
  start = std::chrono::steady_clock::now();
  r = b->receive(30s, {fds[0]});
  EXPECT_EQ(r.readable_fds, std::vector<int>{fds[0]});
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST(Transport, SendToAnAddressNobodyListensOnNeverBlocksAndIsCounted) {
  std::string dead_endpoint;
  {
    auto gone = open_transport(options("gone", 1));
    ASSERT_TRUE(gone);
    dead_endpoint = gone->bound_endpoint();
  }
  TransportOptions o = options("a", 1);
  o.heartbeat_timeout = 300ms;  // the connect grace for first messages
  auto a = open_transport(o);
  ASSERT_TRUE(a);
  const auto start = std::chrono::steady_clock::now();
  int refused = 0;
  for (int i = 0; i < 100; ++i) {
    if (!a->send({dead_endpoint, "gone"}, nack(static_cast<std::uint64_t>(i))).ok()) ++refused;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  EXPECT_GT(refused, 0);  // beyond the small pending queue, sends fail at once
  EXPECT_TRUE(wait_until(
      [&] {
        (void)a->receive(20ms);
        return a->stats().send_failures == 100;
      },
      10s))
      << a->stats().send_failures;
  EXPECT_EQ(a->stats().sent, 0u);
  // Once the grace is over, a send to the silent peer fails immediately.
  EXPECT_FALSE(a->send({dead_endpoint, "gone"}, nack(1)).ok());
}

TEST(Transport, HostileBytesFromARawDealerAreDroppedAndCountedByReason) {
  auto b = open_transport(options("b", 1));
  ASSERT_TRUE(b);
  zmq::context_t context;
  zmq::socket_t raw(context, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 0);
  raw.set(zmq::sockopt::routing_id, "raw/1");
  raw.connect(b->bound_endpoint());

  wire::Envelope e = nack(5);
  e.cluster_id = "other";
  e.sender = "raw";
  raw.send(zmq::buffer(wire::encode_envelope(e)), zmq::send_flags::none);
  e.cluster_id = "c1";
  e.version = wire::kProtocolVersion + 1;
  raw.send(zmq::buffer(wire::encode_envelope(e)), zmq::send_flags::none);
  raw.send(zmq::str_buffer("\xc1 definitely not msgpack"), zmq::send_flags::none);
  raw.send(zmq::str_buffer("two"), zmq::send_flags::sndmore);
  raw.send(zmq::str_buffer("parts"), zmq::send_flags::none);
  e.version = wire::kProtocolVersion;
  raw.send(zmq::buffer(wire::encode_envelope(e)), zmq::send_flags::none);  // the one good one

  std::vector<wire::Envelope> got = receive_n(*b, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].sender, "raw");
  const TransportStats s = b->stats();
  EXPECT_EQ(s.dropped_wrong_cluster, 1u);
  EXPECT_EQ(s.dropped_wrong_version, 1u);
  EXPECT_EQ(s.dropped_malformed, 2u);
  EXPECT_EQ(s.received, 1u);
}

TEST(Transport, IdlePeersAreClosedAfterIdlePeerClose) {
  TransportOptions o = options("a", 1);
  o.idle_peer_close = 60s;
  auto a = open_transport(o);
  auto b = open_transport(options("b", 1));
  auto c = open_transport(options("c", 1));
  ASSERT_TRUE(a && b && c);
  ASSERT_OK(a->send({b->bound_endpoint(), "b"}, nack(1)));
  const TimePoint after_b = std::chrono::steady_clock::now();
  ASSERT_OK(a->send({c->bound_endpoint(), "c"}, nack(2)));
  EXPECT_EQ(a->open_peers(), 2u);
  // Delivered, not just handed to ZeroMQ: closing a DEALER (LINGER 0) drops what it has not
  // written to TCP yet.
  ASSERT_EQ(receive_n(*b, 1, {a.get()}).size(), 1u);
  ASSERT_EQ(receive_n(*c, 1, {a.get()}).size(), 1u);
  a->close_idle(after_b + 30s);
  EXPECT_EQ(a->open_peers(), 2u);
  a->close_idle(std::chrono::steady_clock::now() + 61s);
  EXPECT_EQ(a->open_peers(), 0u);
  EXPECT_EQ(a->stats().peers_closed, 2u);
  // A closed peer is reopened by the next send.
  ASSERT_OK(a->send({b->bound_endpoint(), "b"}, nack(3)));
  EXPECT_EQ(a->open_peers(), 1u);
  EXPECT_EQ(receive_n(*b, 1, {a.get()}).size(), 1u);
}

TEST(Transport, ARestartedNodeReachesItsPeersUnderANewAndUnderTheSameRoutingId) {
  auto b = open_transport(options("b", 1));
  ASSERT_TRUE(b);
  {
    auto a1 = open_transport(options("a", 1));
    ASSERT_TRUE(a1);
    ASSERT_OK(a1->send({b->bound_endpoint(), "b"}, nack(1)));
    ASSERT_EQ(receive_n(*b, 1, {a1.get()}).size(), 1u);
  }
  for (std::uint64_t generation : {2u, 2u}) {  // new generation, then a reused routing id
    auto a = open_transport(options("a", generation));
    ASSERT_TRUE(a);
    ASSERT_OK(a->send({b->bound_endpoint(), "b"}, nack(10 + generation)));
    std::vector<wire::Envelope> got = receive_n(*b, 1, {a.get()});
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].sender, "a");
    EXPECT_EQ(got[0].generation, generation);
  }
}

// ---------------------------------------------------------------------------------------------
// Peer disconnects

// The dying peer runs in a child process, so SIGKILL closes its connections the way a crashed
// daemon's kernel does. The child is this test binary again: with kPeerEnv set it serves a
// transport from a static initializer (the end of this file) instead of running tests. It
// prints "endpoint <bound endpoint>" once, then "got <probe>" for each Nack it receives.
constexpr const char* kPeerEnv = "ELASTIC_TRANSPORT_TEST_PEER_BIND";
constexpr const char* kPeerSendEnv = "ELASTIC_TRANSPORT_TEST_PEER_SEND_TO";

class PeerProcess {
 public:
  // `send_to`: an endpoint the child also sends to, every 100 ms ("" = none).
  PeerProcess(const TempDir& logs, const std::string& name, const std::string& bind,
              const std::string& send_to = "")
      : process_({std::filesystem::read_symlink("/proc/self/exe").string()},
                 send_to.empty() ? std::map<std::string, std::string>{{kPeerEnv, bind}}
                                 : std::map<std::string, std::string>{{kPeerEnv, bind},
                                                                      {kPeerSendEnv, send_to}},
                 logs.path(), name) {}

  // The endpoint the child bound; "" if it did not say within the deadline.
  std::string endpoint() {
    std::string found;
    wait_until(
        [&] {
          const std::string out = process_.out();
          const std::size_t start = out.find("endpoint ");
          const std::size_t end = out.find('\n', start);
          if (start == std::string::npos || end == std::string::npos) return false;
          found = out.substr(start + 9, end - start - 9);
          return true;
        },
        10s);
    return found;
  }
  bool got(std::uint64_t probe) const {
    return process_.out().find("got " + std::to_string(probe) + "\n") != std::string::npos;
  }
  std::string err() const { return process_.err(); }
  void kill() {
    process_.signal(SIGKILL);
    ASSERT_TRUE(process_.wait(10s).has_value());
  }

 private:
  Process process_;
};

// Sends `probe` from `t` to the peer until the peer printed it: the send is refused while the
// DEALER (re)connects, and a delivered message proves the handshake that arms the report.
bool deliver(ZmqTransport& t, PeerProcess& peer, const PeerAddress& address, std::uint64_t probe) {
  bool sent = false;
  return wait_until(
      [&] {
        if (!sent) sent = t.send(address, nack(probe)).ok();
        (void)t.receive(20ms);
        return sent && peer.got(probe);
      },
      15s);
}

// Pumps `t` until at least `count` disconnects were reported (or the deadline passed).
std::vector<PeerDisconnect> disconnects(ZmqTransport& t, std::size_t count) {
  std::vector<PeerDisconnect> got;
  wait_until(
      [&] {
        (void)t.receive(20ms);
        for (PeerDisconnect& d : t.take_disconnects()) got.push_back(std::move(d));
        return got.size() >= count;
      },
      10s);
  return got;
}

TEST(TransportDisconnect, AKilledPeerIsReportedAtOnceAndAgainAfterItRestarts) {
  TempDir logs;
  auto a = open_transport(options("a", 1));
  ASSERT_TRUE(a);
  PeerProcess first(logs, "first", "tcp://127.0.0.1:*");
  const std::string endpoint = first.endpoint();
  ASSERT_FALSE(endpoint.empty()) << first.err();
  ASSERT_TRUE(deliver(*a, first, {endpoint, "peer"}, 1));
  EXPECT_TRUE(a->take_disconnects().empty());

  first.kill();
  const TimePoint killed = std::chrono::steady_clock::now();
  // Nothing else is ready, yet receive() returns as soon as the disconnect is seen, long
  // before its 20 s and before any heartbeat (200 ms interval, 1 s timeout) could notice.
  Received r = a->receive(20s);
  const Duration took = std::chrono::steady_clock::now() - killed;
  EXPECT_TRUE(r.envelopes.empty());
  EXPECT_LT(took, 5s);
  std::vector<PeerDisconnect> gone = a->take_disconnects();
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].name, "peer");
  EXPECT_EQ(gone[0].address, endpoint);
  EXPECT_GE(gone[0].at, killed);
  EXPECT_EQ(a->stats().disconnects, 1u);
  EXPECT_TRUE(a->take_disconnects().empty());  // taken once

  // The same daemon restarts on the same port: ZeroMQ reconnects the same DEALER, the new
  // handshake re-arms the report, and the second death is reported too.
  PeerProcess second(logs, "second", endpoint);
  ASSERT_EQ(second.endpoint(), endpoint) << second.err();
  ASSERT_TRUE(deliver(*a, second, {endpoint, "peer"}, 2));
  EXPECT_EQ(a->stats().peers_opened, 1u);
  EXPECT_TRUE(a->take_disconnects().empty());
  second.kill();
  gone = disconnects(*a, 1);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].name, "peer");
  EXPECT_EQ(a->stats().disconnects, 2u);
}

// A peer that only sends to this node (this node never dialled it: no DEALER, or its DEALER is
// down) is still reported when it dies: through the inbound connection its envelopes came by.
TEST(TransportDisconnect, APeerOnlySendingToUsIsReportedByItsInboundConnection) {
  TempDir logs;
  auto a = open_transport(options("a", 1));
  ASSERT_TRUE(a);
  PeerProcess sender(logs, "sender", "tcp://127.0.0.1:*", a->bound_endpoint());
  ASSERT_FALSE(sender.endpoint().empty()) << sender.err();
  ASSERT_FALSE(receive_n(*a, 1, {}).empty()) << "the sender's envelopes arrive";
  EXPECT_TRUE(a->take_disconnects().empty());
  EXPECT_EQ(a->open_peers(), 0u) << "a never dialled it";
  sender.kill();
  const std::vector<PeerDisconnect> gone = disconnects(*a, 1);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].name, "peer");
  EXPECT_EQ(gone[0].address, "") << "an inbound connection";
}

// A seed is first dialled by address only (membership's join); later sends name it. The
// connection learns the name, so its loss is attributed to that node (else the job tier could
// not use it and would wait for keepalive silence).
TEST(TransportDisconnect, APeerFirstDialledByAddressIsReportedByItsLaterName) {
  TempDir logs;
  auto a = open_transport(options("a", 1));
  ASSERT_TRUE(a);
  PeerProcess seed(logs, "seed", "tcp://127.0.0.1:*");
  const std::string endpoint = seed.endpoint();
  ASSERT_FALSE(endpoint.empty()) << seed.err();
  ASSERT_TRUE(deliver(*a, seed, {endpoint, ""}, 1));
  ASSERT_TRUE(deliver(*a, seed, {endpoint, "seed"}, 2));
  EXPECT_EQ(a->stats().peers_opened, 1u);  // the same DEALER
  seed.kill();
  const std::vector<PeerDisconnect> gone = disconnects(*a, 1);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].name, "seed");
  EXPECT_EQ(gone[0].address, endpoint);
}

TEST(TransportDisconnect, AnIdleClosedPeerReportsNothing) {
  auto a = open_transport(options("a", 1));
  auto b = open_transport(options("b", 1));
  auto c = open_transport(options("c", 1));
  ASSERT_TRUE(a && b && c);
  ASSERT_OK(a->send({b->bound_endpoint(), "b"}, nack(1)));
  ASSERT_EQ(receive_n(*b, 1, {a.get()}).size(), 1u);
  a->close_idle(std::chrono::steady_clock::now() + 61s);
  ASSERT_EQ(a->open_peers(), 0u);
  ASSERT_OK(a->send({c->bound_endpoint(), "c"}, nack(2)));
  ASSERT_EQ(receive_n(*c, 1, {a.get()}).size(), 1u);

  // b's connection went with its DEALER; c's is live. Both peers go away: only c is reported
  // (b had its chance first, so waiting for c's report covers it).
  b.reset();
  c.reset();
  std::vector<PeerDisconnect> gone = disconnects(*a, 1);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].name, "c");
  EXPECT_TRUE(a->take_disconnects().empty());
  EXPECT_EQ(a->stats().disconnects, 1u);
}

// ---------------------------------------------------------------------------------------------
// CURVE

class CurveTransport : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"a", "b"}) add_key(allowed_dir(), name);
    add_key(dir_ / "outsiders", "x");
  }
  void add_key(const std::string& dir, const std::string& name) {
    Result<CurveKeyPair> keys = generate_curve_keypair();
    ASSERT_OK(keys);
    ASSERT_OK(write_curve_keypair(dir, name, *keys));
    keys_[name] = *keys;
  }
  std::string allowed_dir() const { return dir_ / "keys"; }
  TransportOptions curve_options(const std::string& name, const std::string& key_dir) {
    TransportOptions o = options(name, 1);
    o.curve = CurveOptions{key_dir + "/" + name + ".key", allowed_dir()};
    return o;
  }

  TempDir dir_;
  std::map<std::string, CurveKeyPair> keys_;
};

TEST_F(CurveTransport, NodesInTheAllowListTalk) {
  auto a = open_transport(curve_options("a", allowed_dir()));
  auto b = open_transport(curve_options("b", allowed_dir()));
  ASSERT_TRUE(a && b);
  ASSERT_OK(a->send({b->bound_endpoint(), "b"}, nack(1)));
  std::vector<wire::Envelope> at_b = receive_n(*b, 1, {a.get()});
  ASSERT_EQ(at_b.size(), 1u);
  EXPECT_EQ(at_b[0].sender, "a");
  ASSERT_OK(b->send({at_b[0].sender_address, at_b[0].sender}, nack(2)));
  EXPECT_EQ(receive_n(*a, 1, {b.get()}).size(), 1u);
  EXPECT_EQ(b->stats().dropped_unauthenticated, 0u);
  // Without the peer's name there is no server key to dial with.
  EXPECT_FALSE(a->send({b->bound_endpoint(), ""}, nack(3)).ok());
  EXPECT_FALSE(a->send({b->bound_endpoint(), "nobody"}, nack(3)).ok());
}

// Envelopes longer than a frame travel as several (CURVE) or as one long frame (plain) and
// arrive whole either way.
TEST_F(CurveTransport, AnEnvelopeLongerThanAFrameArrivesWhole) {
  for (const bool curve : {true, false}) {
    SCOPED_TRACE(curve ? "curve" : "plain");
    auto a = open_transport(curve ? curve_options("a", allowed_dir()) : options("a", 1));
    auto b = open_transport(curve ? curve_options("b", allowed_dir()) : options("b", 1));
    ASSERT_TRUE(a && b);
    wire::Envelope big = nack(7);
    big.body = std::string(3 * kMaxFrameBytes + 123, 'x');
    ASSERT_OK(a->send({b->bound_endpoint(), "b"}, big));
    std::vector<wire::Envelope> at_b = receive_n(*b, 1, {a.get()});
    ASSERT_EQ(at_b.size(), 1u);
    EXPECT_EQ(at_b[0].body, big.body);
    EXPECT_EQ(b->stats().dropped_malformed + b->stats().dropped_oversized, 0u);
  }
}

// Services both ends until `server` has refused `client`'s handshake; whatever `server` received
// meanwhile lands in `got`. False if no refusal came within the deadline.
bool until_refused(ZmqTransport& server, ZmqTransport& client, std::vector<wire::Envelope>& got) {
  return wait_until(
      [&] {
        (void)client.receive(Duration::zero());
        for (wire::Envelope& e : server.receive(20ms).envelopes) got.push_back(std::move(e));
        return server.stats().dropped_unauthenticated > 0;
      },
      10s);
}

TEST_F(CurveTransport, AKeyOutsideTheAllowListCannotDeliver) {
  auto b = open_transport(curve_options("b", allowed_dir()));
  auto x = open_transport(curve_options("x", dir_ / "outsiders"));
  ASSERT_TRUE(b && x);
  ASSERT_OK(x->send({b->bound_endpoint(), "b"}, nack(1)));
  std::vector<wire::Envelope> got;
  EXPECT_TRUE(until_refused(*b, *x, got));
  // Keep receiving a little longer: x's retries must not get through either.
  auto a = open_transport(curve_options("a", allowed_dir()));
  ASSERT_TRUE(a);
  ASSERT_OK(a->send({b->bound_endpoint(), "b"}, nack(2)));
  for (wire::Envelope& e : receive_n(*b, 1, {a.get(), x.get()})) got.push_back(std::move(e));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].sender, "a");
  // b closes every refused connection, but x never got through a handshake: not a disconnect.
  EXPECT_TRUE(x->take_disconnects().empty());
  EXPECT_EQ(x->stats().disconnects, 0u);
}

TEST_F(CurveTransport, ACurvePeerThatGoesAwayIsReported) {
  auto a = open_transport(curve_options("a", allowed_dir()));
  auto b = open_transport(curve_options("b", allowed_dir()));
  ASSERT_TRUE(a && b);
  ASSERT_OK(a->send({b->bound_endpoint(), "b"}, nack(1)));
  ASSERT_EQ(receive_n(*b, 1, {a.get()}).size(), 1u);
  const std::string endpoint = b->bound_endpoint();
  b.reset();
  std::vector<PeerDisconnect> gone = disconnects(*a, 1);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].name, "b");
  EXPECT_EQ(gone[0].address, endpoint);
}

TEST_F(CurveTransport, APlainClientCannotDeliverToACurveServer) {
  auto b = open_transport(curve_options("b", allowed_dir()));
  auto plain = open_transport(options("a", 1));  // claims an allowed name, has no keys
  ASSERT_TRUE(b && plain);
  ASSERT_OK(plain->send({b->bound_endpoint(), "b"}, nack(1)));
  std::vector<wire::Envelope> got;
  EXPECT_TRUE(until_refused(*b, *plain, got));
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(b->stats().received, 0u);
}

TEST_F(CurveTransport, AnAllowedNodePosingAsAnotherIsDropped) {
  auto b = open_transport(curve_options("b", allowed_dir()));
  ASSERT_TRUE(b);
  zmq::context_t context;
  zmq::socket_t raw(context, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 0);
  raw.set(zmq::sockopt::curve_serverkey, keys_["b"].public_key);
  raw.set(zmq::sockopt::curve_publickey, keys_["a"].public_key);
  raw.set(zmq::sockopt::curve_secretkey, keys_["a"].secret_key);
  raw.connect(b->bound_endpoint());
  wire::Envelope e = nack(1);
  e.cluster_id = "c1";
  e.sender = "b";  // a's key, b's name
  raw.send(zmq::buffer(wire::encode_envelope(e)), zmq::send_flags::none);
  e.sender = "a";
  raw.send(zmq::buffer(wire::encode_envelope(e)), zmq::send_flags::none);
  std::vector<wire::Envelope> got = receive_n(*b, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].sender, "a");
  EXPECT_EQ(b->stats().dropped_unauthenticated, 1u);
}

// Nodes join and leave the allow-list without restarting the others: a running transport
// re-reads public_keys_dir when it changes (a .pub added or removed).
TEST_F(CurveTransport, ANodeAddedToTheAllowListLaterIsAcceptedBothWays) {
  auto b = open_transport(curve_options("b", allowed_dir()));
  ASSERT_TRUE(b);
  add_key(allowed_dir(), "c");  // after b read the list
  auto c = open_transport(curve_options("c", allowed_dir()));
  ASSERT_TRUE(c);
  ASSERT_OK(c->send({b->bound_endpoint(), "b"}, nack(1)));
  std::vector<wire::Envelope> at_b = receive_n(*b, 1, {c.get()});
  ASSERT_EQ(at_b.size(), 1u);
  EXPECT_EQ(at_b[0].sender, "c");
  // b dials c by name: its server key comes from the re-read list too.
  ASSERT_OK(b->send({at_b[0].sender_address, "c"}, nack(2)));
  EXPECT_EQ(receive_n(*c, 1, {b.get()}).size(), 1u);
  EXPECT_EQ(b->stats().dropped_unauthenticated, 0u);
}

TEST_F(CurveTransport, ANodeRemovedFromTheAllowListIsRefusedAtItsNextHandshake) {
  auto b = open_transport(curve_options("b", allowed_dir()));
  ASSERT_TRUE(b);
  // a's secret key stays (outside the list now); only its .pub leaves b's allow-list.
  std::filesystem::create_directories(dir_ / "removed");
  std::filesystem::rename(allowed_dir() + "/a.key", dir_ / "removed/a.key");
  std::filesystem::remove(allowed_dir() + "/a.pub");
  TransportOptions a_options = curve_options("a", dir_ / "removed");
  auto a = open_transport(a_options);
  ASSERT_TRUE(a);
  ASSERT_OK(a->send({b->bound_endpoint(), "b"}, nack(1)));
  std::vector<wire::Envelope> got;
  EXPECT_TRUE(until_refused(*b, *a, got));
  EXPECT_TRUE(got.empty());
}

// A re-read that fails (here: the directory became writable by others) keeps the last good
// list: the cluster keeps talking, and a key added meanwhile is not trusted.
TEST_F(CurveTransport, AnUnsafeAllowListOnReReadKeepsTheLastGoodOne) {
  auto b = open_transport(curve_options("b", allowed_dir()));
  auto a = open_transport(curve_options("a", allowed_dir()));
  add_key(allowed_dir(), "c");
  auto c = open_transport(curve_options("c", allowed_dir()));
  ASSERT_TRUE(a && b && c);
  ASSERT_EQ(::chmod(allowed_dir().c_str(), 0777), 0);  // after every open: open checks it too
  ASSERT_OK(a->send({b->bound_endpoint(), "b"}, nack(1)));
  std::vector<wire::Envelope> got = receive_n(*b, 1, {a.get()});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].sender, "a");
  ASSERT_OK(c->send({b->bound_endpoint(), "b"}, nack(2)));
  got.clear();
  EXPECT_TRUE(until_refused(*b, *c, got));
  EXPECT_TRUE(got.empty());
  ::chmod(allowed_dir().c_str(), 0755);
}

TEST_F(CurveTransport, ASecretKeyReadableByOthersIsRefused) {
  const std::string path = allowed_dir() + "/a.key";
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  Result<CurveKeyPair> loaded = load_curve_secret_key(path);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.error().message.find(path), std::string::npos) << loaded.error().message;
  EXPECT_NE(loaded.error().message.find("0644"), std::string::npos) << loaded.error().message;
  Result<std::unique_ptr<ZmqTransport>> t = ZmqTransport::open(curve_options("a", allowed_dir()));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find(path), std::string::npos);
}

TEST_F(CurveTransport, KeyFilesRoundTripAndTheAllowListHoldsEveryPublicKey) {
  Result<CurveKeyPair> a = load_curve_secret_key(allowed_dir() + "/a.key");
  ASSERT_OK(a);
  EXPECT_EQ(a->public_key, keys_["a"].public_key);
  EXPECT_EQ(a->secret_key, keys_["a"].secret_key);
  Result<std::map<std::string, std::string>> allowed = load_curve_allow_list(allowed_dir());
  ASSERT_OK(allowed);
  EXPECT_EQ(allowed->size(), 2u);
  EXPECT_EQ(allowed->at("b"), keys_["b"].public_key);
  // An existing secret key is never overwritten.
  EXPECT_FALSE(write_curve_keypair(allowed_dir(), "a", keys_["b"]).ok());
  // A corrupt public key file is an error naming it.
  TempDir other;
  other.write("bad.pub", "not a key\n");
  Result<std::map<std::string, std::string>> bad = load_curve_allow_list(other.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("bad.pub"), std::string::npos);
}

TEST_F(CurveTransport, AnAllowListWritableByOthersIsRefused) {
  ASSERT_EQ(::chmod(allowed_dir().c_str(), 0777), 0);
  Result<std::unique_ptr<ZmqTransport>> t = ZmqTransport::open(curve_options("a", allowed_dir()));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("0777"), std::string::npos) << t.error().message;
  EXPECT_NE(t.error().message.find("chmod go-w " + allowed_dir()), std::string::npos);
  ASSERT_EQ(::chmod(allowed_dir().c_str(), 0755), 0);
  const std::string pub = allowed_dir() + "/b.pub";
  ASSERT_EQ(::chmod(pub.c_str(), 0666), 0);
  Result<std::map<std::string, std::string>> list = load_curve_allow_list(allowed_dir());
  ASSERT_FALSE(list.ok());
  EXPECT_NE(list.error().message.find(pub), std::string::npos) << list.error().message;
  ASSERT_EQ(::chmod(pub.c_str(), 0644), 0);
  EXPECT_TRUE(load_curve_allow_list(allowed_dir()).ok());
}

TEST_F(CurveTransport, KeysOwnedByAnotherUserAreRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to chown the key files to another user";
  const std::string pub = allowed_dir() + "/b.pub";
  ASSERT_EQ(::chown(pub.c_str(), 65534, 65534), 0);
  Result<std::map<std::string, std::string>> list = load_curve_allow_list(allowed_dir());
  ASSERT_FALSE(list.ok());
  EXPECT_NE(list.error().message.find("owned by uid 65534"), std::string::npos)
      << list.error().message;
  const std::string secret = allowed_dir() + "/a.key";
  ASSERT_EQ(::chown(secret.c_str(), 65534, 65534), 0);
  Result<CurveKeyPair> loaded = load_curve_secret_key(secret);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.error().message.find("owned by uid 65534"), std::string::npos)
      << loaded.error().message;
}

// ---------------------------------------------------------------------------------------------
// Remote control socket (control.remote_listen) and its client

class RemoteControl : public CurveTransport {
 protected:
  void SetUp() override {
    CurveTransport::SetUp();
    add_key(clients_dir(), "alice");
    add_key(dir_ / "strangers", "mallory");
  }
  std::string clients_dir() const { return dir_ / "clients"; }
  TransportOptions server_options() {
    TransportOptions o = curve_options("a", allowed_dir());
    o.remote_control = RemoteControlOptions{"tcp://127.0.0.1:0", clients_dir()};
    return o;
  }
  RemoteControlClient client(const std::string& user, const std::string& key_dir,
                             const ZmqTransport& server) {
    return RemoteControlClient{server.control_endpoint(), key_dir + "/" + user + ".key",
                               allowed_dir() + "/a.pub"};
  }
  // Runs call_remote on a thread while `server` is serviced here, answering each request with
  // {"ok":true,"user":USER,"verb":...}; returns the call's result.
  Result<std::string> call(ZmqTransport& server, const RemoteControlClient& c,
                           RemoteFailure* failure, std::vector<ControlRequest>* seen = nullptr,
                           std::chrono::milliseconds timeout = 3s) {
    std::optional<Result<std::string>> result;
    std::atomic<bool> done{false};
    std::thread caller([&] {
      result = call_remote(c, control::Request{.verb = "nodes", .text = ""}, timeout, failure);
      done = true;
    });
    while (!done) {
      for (ControlRequest& r : server.receive(10ms).control_requests) {
        (void)server.send_control_reply(r.route, "{\"ok\":true,\"user\":\"" + r.user + "\"}");
        if (seen) seen->push_back(std::move(r));
      }
    }
    caller.join();
    return std::move(*result);
  }
};

TEST_F(RemoteControl, AListedClientKeyIsServedAsItsUser) {
  auto server = open_transport(server_options());
  ASSERT_TRUE(server);
  ASSERT_FALSE(server->control_endpoint().empty());
  RemoteFailure failure = RemoteFailure::kBadSetup;
  std::vector<ControlRequest> seen;
  Result<std::string> reply =
      call(*server, client("alice", clients_dir(), *server), &failure, &seen);
  ASSERT_OK(reply);
  EXPECT_EQ(failure, RemoteFailure::kNone);
  EXPECT_EQ(*reply, "{\"ok\":true,\"user\":\"alice\"}");
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].user, "alice");
  EXPECT_EQ(seen[0].body, "{\"verb\":\"nodes\"}");
  EXPECT_EQ(server->stats().control_received, 1u);
}

TEST_F(RemoteControl, AnUnknownClientKeyIsRefusedAndCounted) {
  auto server = open_transport(server_options());
  ASSERT_TRUE(server);
  RemoteFailure failure = RemoteFailure::kNone;
  std::vector<ControlRequest> seen;
  Result<std::string> reply =
      call(*server, client("mallory", dir_ / "strangers", *server), &failure, &seen);
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(failure, RemoteFailure::kRefused) << reply.error().message;
  EXPECT_NE(reply.error().message.find("refused this client key"), std::string::npos);
  EXPECT_TRUE(seen.empty());
  EXPECT_GE(server->stats().control_unauthenticated, 1u);
  EXPECT_EQ(server->stats().dropped_unauthenticated, 0u);  // the node port's counter
  // Adding mallory's key to the directory lets it in without a restart.
  std::filesystem::copy_file(dir_ / "strangers/mallory.pub", clients_dir() + "/mallory.pub");
  EXPECT_TRUE(wait_until(
      [&] {
        RemoteFailure again = RemoteFailure::kNone;
        return call(*server, client("mallory", dir_ / "strangers", *server), &again).ok();
      },
      10s));
}

TEST_F(RemoteControl, PlainClientsAndJunkFramesDeliverNothing) {
  auto server = open_transport(server_options());
  ASSERT_TRUE(server);
  zmq::context_t context;
  zmq::socket_t plain(context, zmq::socket_type::dealer);
  plain.set(zmq::sockopt::linger, 0);
  plain.connect(server->control_endpoint());
  plain.send(zmq::str_buffer("{\"verb\":\"nodes\"}"), zmq::send_flags::dontwait);
  EXPECT_TRUE(wait_until(
      [&] {
        EXPECT_TRUE(server->receive(10ms).control_requests.empty());
        return server->stats().control_unauthenticated >= 1;
      },
      10s));
  // An allowed client sending two-part frames: dropped and counted, the next good one served.
  const Result<CurveKeyPair> alice = load_curve_secret_key(clients_dir() + "/alice.key");
  ASSERT_OK(alice);
  zmq::socket_t junk(context, zmq::socket_type::dealer);
  junk.set(zmq::sockopt::linger, 0);
  junk.set(zmq::sockopt::curve_serverkey, keys_["a"].public_key);
  junk.set(zmq::sockopt::curve_publickey, alice->public_key);
  junk.set(zmq::sockopt::curve_secretkey, alice->secret_key);
  junk.connect(server->control_endpoint());
  junk.send(zmq::str_buffer("two"), zmq::send_flags::sndmore);
  junk.send(zmq::str_buffer("parts"), zmq::send_flags::none);
  junk.send(zmq::str_buffer("{\"verb\":\"status\"}"), zmq::send_flags::none);
  std::vector<ControlRequest> got;
  EXPECT_TRUE(wait_until(
      [&] {
        for (ControlRequest& r : server->receive(10ms).control_requests) got.push_back(r);
        return !got.empty();
      },
      10s));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].body, "{\"verb\":\"status\"}");
  EXPECT_EQ(server->stats().control_dropped, 1u);
}

TEST_F(RemoteControl, NeedsCurveAndASafeClientKeysDir) {
  TransportOptions plain = options("a", 1);
  plain.remote_control = RemoteControlOptions{"tcp://127.0.0.1:0", clients_dir()};
  Result<std::unique_ptr<ZmqTransport>> t = ZmqTransport::open(plain);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("transport.curve"), std::string::npos) << t.error().message;
  ASSERT_EQ(::chmod(clients_dir().c_str(), 0775), 0);
  t = ZmqTransport::open(server_options());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("control.client_keys_dir"), std::string::npos)
      << t.error().message;
}

TEST_F(RemoteControl, NobodyListeningIsABoundedNoAnswer) {
  auto server = open_transport(server_options());
  ASSERT_TRUE(server);
  RemoteControlClient c = client("alice", clients_dir(), *server);
  server.reset();  // the port is closed now
  RemoteFailure failure = RemoteFailure::kNone;
  const auto started = std::chrono::steady_clock::now();
  Result<std::string> reply =
      call_remote(c, control::Request{.verb = "nodes", .text = ""}, 300ms, &failure);
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(failure, RemoteFailure::kNoAnswer);
  EXPECT_NE(reply.error().message.find("did not accept this client key (or did not answer) "
                                       "within 0.3 s"),
            std::string::npos)
      << reply.error().message;
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);
  // Unsafe or missing key files fail before anything is sent.
  c.client_key_file = dir_ / "nope.key";
  EXPECT_FALSE(call_remote(c, control::Request{.verb = "nodes", .text = ""}, 300ms, &failure).ok());
  EXPECT_EQ(failure, RemoteFailure::kBadSetup);
}

// ---------------------------------------------------------------------------------------------
// Who a control caller is (daemon/control/credentials.h; here because remote callers are named
// by their key files).

TEST(Credentials, UsersMapToTheirUidAndUnknownUsersAreRefused) {
  Result<control::PeerCredentials> root = control::user_credentials("root");
  ASSERT_OK(root);
  EXPECT_EQ(root->uid, 0u);
  EXPECT_EQ(root->remote_user, "root");
  Result<control::PeerCredentials> ghost = control::user_credentials("no-such-user-x7");
  ASSERT_FALSE(ghost.ok());
  EXPECT_NE(ghost.error().message.find("\"no-such-user-x7\""), std::string::npos);
}

TEST(Credentials, AdminIsRootThePrimaryGidOrASupplementaryGroup) {
  EXPECT_TRUE(control::is_admin({.pid = 1, .uid = 0, .gid = 0, .remote_user = ""}, ""));
  const control::PeerCredentials user{.pid = 1, .uid = 65533, .gid = 65533, .remote_user = ""};
  EXPECT_FALSE(control::is_admin(user, ""));
  EXPECT_FALSE(control::is_admin(user, "no-such-group-x7"));
  const group* root_group = ::getgrgid(0);
  ASSERT_NE(root_group, nullptr);
  EXPECT_TRUE(control::is_admin({.pid = 1, .uid = 65533, .gid = 0, .remote_user = ""},
                                root_group->gr_name));
  // A user listed as a supplementary member of a group that is not their primary group: the
  // primary gid SO_PEERCRED reports is not enough, the group database decides.
  ::setgrent();
  std::optional<std::pair<std::string, passwd>> found;
  while (const group* g = ::getgrent()) {
    for (char** member = g->gr_mem; *member != nullptr && !found; ++member) {
      const passwd* pw = ::getpwnam(*member);
      if (pw != nullptr && pw->pw_gid != g->gr_gid && pw->pw_uid != 0) {
        found.emplace(g->gr_name, *pw);
      }
    }
    if (found) break;
  }
  ::endgrent();
  if (!found) GTEST_SKIP() << "no user on this host is a supplementary member of a group";
  EXPECT_TRUE(control::is_admin(
      {.pid = 1, .uid = found->second.pw_uid, .gid = found->second.pw_gid, .remote_user = ""},
      found->first))
      << found->first;
}

// ---------------------------------------------------------------------------------------------
// Generation

TEST(Generation, CountsUpFromOneAndPersists) {
  TempDir dir;
  const std::string state = dir.file("state/nested");
  for (std::uint64_t expected = 1; expected <= 3; ++expected) {
    Result<std::uint64_t> g = next_generation(state);
    ASSERT_OK(g);
    EXPECT_EQ(*g, expected);
  }
  EXPECT_EQ(elastic::testing::read_file(state + "/generation"), "3\n");
  EXPECT_FALSE(std::filesystem::exists(state + "/generation.tmp"));
}

TEST(Generation, AGarbledFileIsAnErrorNamingIt) {
  TempDir dir;
  dir.write("generation", "12abc\n");
  Result<std::uint64_t> g = next_generation(dir.path());
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.error().message.find(dir / "generation"), std::string::npos) << g.error().message;
}

TEST(Generation, AnUncreatableDirectoryIsAnErrorNamingIt) {
  TempDir dir;
  dir.write("file", "x");
  Result<std::uint64_t> g = next_generation(dir.file("file/state"));
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.error().message.find(dir / "file"), std::string::npos) << g.error().message;
}

// A start that fails before it commits (a port in use) leaves the generation
// as it was, so its retry is still the node's first start.
TEST(Generation, AReservationCountsOnlyOnceCommitted) {
  TempDir dir;
  const std::string state = dir.file("state");
  for (int attempt = 0; attempt < 2; ++attempt) {
    Result<std::uint64_t> g = reserve_generation(state);
    ASSERT_OK(g);
    EXPECT_EQ(*g, 1u);
    EXPECT_FALSE(std::filesystem::exists(state + "/generation"));
  }
  ASSERT_TRUE(commit_generation(state).ok());
  EXPECT_EQ(elastic::testing::read_file(state + "/generation"), "1\n");
  Result<std::uint64_t> g = reserve_generation(state);
  ASSERT_OK(g);
  EXPECT_EQ(*g, 2u);
  EXPECT_EQ(elastic::testing::read_file(state + "/generation"), "1\n");
}

// Peer mode of this binary (see PeerProcess). It runs before main(), so the child never
// reaches gtest; SIGKILL from the test is its only way out.
[[noreturn]] void serve_as_peer(const char* bind) {
  TransportOptions o = options("peer", 1);
  o.bind = bind;
  Result<std::unique_ptr<ZmqTransport>> t = ZmqTransport::open(o);
  if (!t.ok()) {
    std::fprintf(stderr, "%s\n", t.error().message.c_str());
    std::_Exit(1);
  }
  std::printf("endpoint %s\n", (*t)->bound_endpoint().c_str());
  std::fflush(stdout);
  // With kPeerSendEnv: it also sends to that endpoint (as node "a") every 100 ms.
  const char* send_to = std::getenv(kPeerSendEnv);
  std::uint64_t sent = 1000;
  for (;;) {
    if (send_to != nullptr) (void)(*t)->send({send_to, "a"}, nack(++sent));
    for (const wire::Envelope& e : (*t)->receive(send_to != nullptr ? 100ms : 1s).envelopes) {
      std::printf("got %llu\n", static_cast<unsigned long long>(probe_of(e)));
      std::fflush(stdout);
    }
  }
}

[[maybe_unused]] const bool kServesAsPeer = [] {
  if (const char* bind = std::getenv(kPeerEnv)) serve_as_peer(bind);
  return false;
}();

}  // namespace
}  // namespace elastic::transport
