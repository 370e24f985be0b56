// Security: hostile traffic on a real daemon's transport port.
//  - Decode bombs: 60 MB MessagePack messages of nested 100,000-element arrays, sent by a peer
//    holding a node key in the allow-list (so CURVE lets it through), once took a daemon from
//    16 MB to 1.44 GB and stalled its loop 1.3 s each, and three got it declared lost. Here
//    several are sent (in the envelope and in the bodies of the bulk types); the daemon's peak
//    memory stays small, its control socket keeps answering quickly, and its peer never
//    declares it dead.
//    Such a message travels as frames of at most 256 KiB (transport::kMaxFrameBytes), as a
//    daemon sends it; a peer without an allowed key cannot make the daemon read even one large
//    frame: its handshake is cut at the frame's header.
//  - Connection flood: ~1,800 TCP connections from one address took a daemon to its fd limit,
//    after which every accept failed in a loop. Here the daemon runs with a low fd limit and
//    one address opens many times that: the daemon sheds them (per-address cap), drops the
//    half-open ones it kept after the handshake timeout, keeps serving its control socket, and
//    logs only a few lines about it. It also raises its own soft fd limit at start. From many
//    addresses (under the cap each) the daemon runs out of fds: it stops listening for a while,
//    which drops the flood's connections, instead of failing accepts in a busy loop, and then
//    listens again.
// No fixed sleeps: every wait polls with a deadline.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <msgpack.hpp>
#include <optional>
#include <regex>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "daemon/transport/curve_keys.h"
#include "daemon/transport/zmq_transport.h"
#include "daemon/wire/codec.h"
#include "tests/integ/daemon_under_test.h"
#include "tests/support/process.h"
#include "tests/support/sockets.h"
#include "tests/support/temp_dir.h"

namespace elastic::testing {
namespace {

using namespace std::chrono_literals;
using Packer = msgpack::packer<msgpack::sbuffer>;

RunResult ctl(const Daemon& daemon, const std::vector<std::string>& args) {
  std::vector<std::string> all = {"-c", "", "--set", "control.socket=" + daemon.socket()};
  all.insert(all.end(), args.begin(), args.end());
  return elasticctl(all);
}

// A field of /proc/<pid>/status in kB (VmRSS, VmHWM); -1 when unreadable.
long status_kb(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  }
  return -1;
}

std::size_t open_fds(pid_t pid) {
  std::size_t n = 0;
  std::error_code ignored;
  for ([[maybe_unused]] const auto& entry :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ignored)) {
    ++n;
  }
  return n;
}

// `elasticctl nodes --json` on `daemon` answers within `limit`.
bool answers_within(const Daemon& daemon, std::chrono::milliseconds limit) {
  const auto start = std::chrono::steady_clock::now();
  const RunResult r = ctl(daemon, {"nodes", "--json"});
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(r.status.exited_with(0)) << r.err;
  EXPECT_LT(took, limit) << "elasticctl nodes took "
                         << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                         << " ms";
  return r.status.exited_with(0) && took < limit;
}

// ---- Decode bombs ------------------------------------------------------------------------------

// 600 arrays of 100,000 one-byte integers: 60 MB, the bomb that once took a daemon to 1.44 GB
// (msgpack objects).
std::string bomb_value() {
  msgpack::sbuffer buffer;
  Packer p(buffer);
  p.pack_array(600);
  const std::string ones(100'000, '\x01');
  for (int i = 0; i < 600; ++i) {
    p.pack_array(100'000);
    buffer.write(ones.data(), ones.size());
  }
  return std::string(buffer.data(), buffer.size());
}

// A body {"x": bomb} (every body decoder parses before it reads keys).
std::string body_bomb(const std::string& bomb) { return std::string("\x81\xa1x", 3) + bomb; }

// A valid envelope from `sender` of `type`, plus an unknown key "x" holding `extra` (raw
// MessagePack) when it is not empty: unknown keys are ignored by design, so only the decode
// budget stops a bomb there.
std::string envelope(const std::string& sender, wire::MsgType type, const std::string& body,
                     const std::string& extra = "") {
  wire::Envelope e;
  e.cluster_id = "elastic";
  e.sender = sender;
  e.generation = 1;
  e.sender_address = "tcp://127.0.0.1:1";
  e.type = type;
  e.seq = 1;
  e.body = body;
  std::string bytes = wire::encode_envelope(e);
  if (extra.empty()) return bytes;
  EXPECT_EQ(static_cast<unsigned char>(bytes[0]), 0x88u);  // a fixmap of 8 keys
  bytes[0] = static_cast<char>(0x89);
  return bytes + std::string("\xa1x", 2) + extra;
}

// `bytes` as a daemon sends an envelope: frames of transport::kMaxFramePayloadBytes.
bool send_frames(zmq::socket_t& dealer, const std::string& bytes) {
  using transport::kMaxFramePayloadBytes;
  for (std::size_t offset = 0; offset < bytes.size(); offset += kMaxFramePayloadBytes) {
    const std::size_t n = std::min(kMaxFramePayloadBytes, bytes.size() - offset);
    const bool last = offset + n == bytes.size();
    if (!dealer.send(zmq::buffer(bytes.data() + offset, n),
                     last ? zmq::send_flags::none : zmq::send_flags::sndmore)) {
      return false;
    }
  }
  return true;
}

// Connects `dealer` to `to`'s transport as a CURVE client with `as`'s node key (published in
// the allow-list, never started: the attacker holds a node key, or is a compromised node).
bool connect_as(zmq::socket_t& dealer, const Daemon& as, const Daemon& to) {
  auto keys = transport::load_curve_secret_key(as.secret_key_file());
  EXPECT_TRUE(keys.ok()) << keys.error().message;
  auto server_key =
      transport::load_curve_public_key(to.public_keys_dir() + "/" + to.name() + ".pub");
  EXPECT_TRUE(server_key.ok()) << server_key.error().message;
  if (!keys.ok() || !server_key.ok()) return false;
  dealer.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::routing_id, as.name() + "/1");
  dealer.set(zmq::sockopt::curve_serverkey, *server_key);
  dealer.set(zmq::sockopt::curve_publickey, keys->public_key);
  dealer.set(zmq::sockopt::curve_secretkey, keys->secret_key);
  dealer.connect(to.address());
  return true;
}

std::uint64_t drops(const Daemon& daemon) {
  return transport_counter(daemon, "dropped_oversized").value_or(0) +
         transport_counter(daemon, "dropped_malformed").value_or(0) +
         transport_counter(daemon, "dropped_undecodable").value_or(0);
}

TEST(TransportFlood, DecodeBombsFromAnAllowedKeyLeaveTheDaemonHealthy) {
  TempDir dir;
  // Every key is published before the daemons start. mallory is a third key in the allow-list,
  // never started: the attacker holds a node key, or is a compromised node.
  Daemon n1(dir, "n1", {});
  Daemon n2(dir, "n2", {});
  Daemon mallory(dir, "mallory", {});
  // A 60 MB message takes longer to arrive and decrypt on a loaded test machine than the fast
  // heartbeat timeout (1 s) allows, and ZeroMQ counts only whole messages as traffic.
  n1.set("transport.heartbeat_timeout=10s");
  n1.start();
  n2.set("membership.seeds=[\"" + n1.seed() + "\"]");  // the last --set wins
  n2.start();
  ASSERT_TRUE(wait_until([&] { return all_alive({&n1, &n2}); }, kConverge)) << describe({&n1, &n2});
  zmq::context_t context;
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  ASSERT_TRUE(connect_as(dealer, mallory, n1));

  // The channel works: a small valid message from mallory is received.
  const std::uint64_t received = transport_counter(n1, "received").value_or(0);
  const std::uint64_t refused = transport_counter(n1, "dropped_unauthenticated").value_or(0);
  ASSERT_TRUE(dealer
                  .send(zmq::buffer(envelope("mallory", wire::MsgType::kNack,
                                             wire::encode_body(wire::Nack{1}))),
                        zmq::send_flags::none)
                  .has_value());
  ASSERT_TRUE(
      wait_until([&] { return transport_counter(n1, "received").value_or(0) > received + 0; }, 10s))
      << "refused " << transport_counter(n1, "dropped_unauthenticated").value_or(0) - refused;

  const std::string bomb = bomb_value();
  ASSERT_GT(bomb.size(), 60'000'000u);
  const std::vector<std::string> messages = {
      envelope("mallory", wire::MsgType::kPing, "", bomb),
      envelope("mallory", wire::MsgType::kPushPullState, body_bomb(bomb)),
      envelope("mallory", wire::MsgType::kRaftAppendEntries, body_bomb(bomb)),
      envelope("mallory", wire::MsgType::kPing, "", bomb),
      envelope("mallory", wire::MsgType::kForwardReply, body_bomb(bomb)),
  };
  const long rss_before_kb = status_kb(n1.process().pid(), "VmRSS");
  ASSERT_GT(rss_before_kb, 0);
  for (std::size_t i = 0; i < messages.size(); ++i) {
    SCOPED_TRACE("bomb " + std::to_string(i));
    const std::uint64_t dropped = drops(n1);
    const std::size_t err_before = n1.process().err().size();
    ASSERT_TRUE(send_frames(dealer, messages[i]));
    // Each is refused (counted as a drop), and the daemon answers its control socket quickly
    // meanwhile.
    EXPECT_TRUE(wait_until(
        [&] {
          answers_within(n1, 2s);
          return drops(n1) > dropped;
        },
        30s))
        << ctl(n1, {"nodes", "--json"}).out << n1.process().err().substr(err_before);
    EXPECT_TRUE(n1.process().running()) << n1.process().err();
  }
  // ZeroMQ holds each 60 MB message while it arrives; the decoders add next to nothing (it was
  // 1.44 GB per message before the budgets).
  const long peak_kb = status_kb(n1.process().pid(), "VmHWM");
  RecordProperty("rss_before_kb", std::to_string(rss_before_kb));
  RecordProperty("peak_rss_kb", std::to_string(peak_kb));
  EXPECT_LT(peak_kb - rss_before_kb, 400L * 1024) << "peak " << peak_kb << " kB";
  EXPECT_TRUE(sees(n2, "n1", "alive", n1.generation())) << describe({&n1, &n2});
  EXPECT_TRUE(all_alive({&n1, &n2})) << describe({&n1, &n2});
}

// ---- Connection flood --------------------------------------------------------------------------

std::size_t count_matches(const std::string& text, const std::regex& pattern) {
  return static_cast<std::size_t>(std::distance(
      std::sregex_iterator(text.begin(), text.end(), pattern), std::sregex_iterator()));
}

TEST(TransportFlood, ConnectionsFromOneAddressCannotExhaustTheDaemonsFds) {
  TempDir dir;
  Daemon n1(dir, "n1", {});
  // Started with a soft fd limit of 1,024 under a higher hard one (a shell outside systemd):
  // the daemon raises its soft limit itself.
  rlimit mine{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &mine), 0);
  // The test itself holds 1,536 connections.
  if (mine.rlim_max < 4096) GTEST_SKIP() << "needs a hard fd limit of 4096, have " << mine.rlim_max;
  rlimit low = mine;
  low.rlim_cur = 1024;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  n1.start();
  rlimit enough = mine;
  enough.rlim_cur = std::max<rlim_t>(mine.rlim_cur, 4096);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &enough), 0);
  ASSERT_TRUE(wait_until(
      [&] {
        return ctl(n1, {"nodes", "--json"}).status.exited_with(0);
      },
      kReady));
  rlimit daemons{};
  ASSERT_EQ(::prlimit(n1.process().pid(), RLIMIT_NOFILE, nullptr, &daemons), 0);
  EXPECT_EQ(daemons.rlim_cur, std::min<rlim_t>(mine.rlim_max, rlim_t{1} << 20));
  EXPECT_NE(n1.process().err().find("open file limit raised from 1024"), std::string::npos)
      << n1.process().err();

  // Now give it only 512 fds, and open three times as many connections from 127.0.0.1 that
  // never send a byte (the attacker keeps its ends open).
  const rlimit tight{512, 512};
  ASSERT_EQ(::prlimit(n1.process().pid(), RLIMIT_NOFILE, &tight, nullptr), 0);
  const std::size_t fds_before = open_fds(n1.process().pid());
  const std::size_t log_before = n1.process().err().size();
  std::vector<int> flood;
  for (int i = 0; i < 1536; ++i) {
    const int fd = connect_loopback(n1.port(), 2s);
    if (fd >= 0) flood.push_back(fd);
  }
  EXPECT_GT(flood.size(), 1000u);

  // The daemon keeps serving: its control socket answers quickly, repeatedly.
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(answers_within(n1, 2s));
  // It holds at most the cap (64) of them, and after the handshake timeout (5 s) not even
  // those: the attacker's half-open connections cost it nothing for long.
  EXPECT_LT(open_fds(n1.process().pid()), fds_before + 64 + 16);
  EXPECT_TRUE(wait_until([&] { return open_fds(n1.process().pid()) <= fds_before + 8; }, 15s))
      << open_fds(n1.process().pid()) << " fds open, " << fds_before << " before";
  EXPECT_TRUE(answers_within(n1, 2s));
  EXPECT_TRUE(n1.process().running()) << n1.process().err();

  // A few lines about it, not one per connection (or per failed accept).
  const std::string log = n1.process().err().substr(log_before);
  const std::string tail = log.substr(log.size() > 4000 ? log.size() - 4000 : 0);  // for failures
  EXPECT_GE(count_matches(log, std::regex("refused \\d+ connection")), 1u) << tail;
  EXPECT_LE(count_matches(log, std::regex("refused \\d+ connection|cannot accept|Too many open "
                                          "files|EMFILE")),
            10u)
      << tail;
  for (int fd : flood) ::close(fd);
}

// A ZMTP 3.0 greeting from a client that asks for CURVE (64 bytes: signature, version 3.0,
// the mechanism's name padded to 20 bytes, as-server 0, filler).
std::string zmtp_curve_greeting() {
  std::string g(64, '\0');
  g[0] = '\xff';
  g[9] = '\x7f';
  g[10] = 3;
  g[11] = 0;
  std::memcpy(&g[12], "CURVE", 5);
  return g;
}

TEST(TransportFlood, APeerWithoutAnAllowedKeyCannotMakeTheDaemonReadALargeFrame) {
  TempDir dir;
  Daemon n1(dir, "n1", {});
  n1.start();
  ASSERT_TRUE(wait_until(
      [&] {
        return ctl(n1, {"nodes", "--json"}).status.exited_with(0);
      },
      kReady));
  // Its greeting, then a command frame (its HELLO) whose header claims 48 MiB, then the bytes.
  // Before the frame limit the daemon read all of it (MAXMSGSIZE was 64 MiB) before CURVE
  // could refuse it; now the header alone ends the connection.
  const int fd = connect_loopback(n1.port(), 5s);
  ASSERT_GE(fd, 0);
  constexpr std::uint64_t kClaimed = 48ull << 20;
  std::string header = zmtp_curve_greeting();
  header += '\x06';  // a command frame with an 8-byte size
  for (int shift = 56; shift >= 0; shift -= 8) header += static_cast<char>(kClaimed >> shift);
  const long rss_before_kb = status_kb(n1.process().pid(), "VmRSS");
  std::uint64_t sent = 0;
  bool closed = false;
  const std::string chunk(64 * 1024, '\0');
  const std::string* next = &header;
  while (sent < kClaimed) {
    const ssize_t n = ::send(fd, next->data(), next->size(), MSG_NOSIGNAL);
    if (n < 0) {
      closed = errno == EPIPE || errno == ECONNRESET;
      break;
    }
    sent += static_cast<std::uint64_t>(n);
    next = &chunk;
  }
  ::close(fd);
  RecordProperty("bytes_sent_before_close", std::to_string(sent));
  EXPECT_TRUE(closed) << "sent " << sent << " bytes without the daemon closing the connection";
  // What the kernel's socket buffers hold on loopback, far below the 48 MiB claimed.
  EXPECT_LT(sent, 16ull << 20);
  EXPECT_LT(status_kb(n1.process().pid(), "VmHWM") - rss_before_kb, 16L * 1024);
  EXPECT_TRUE(answers_within(n1, 2s));
  EXPECT_TRUE(n1.process().running()) << n1.process().err();
}

TEST(TransportFlood, ConnectionsFromManyAddressesMakeTheDaemonPauseNotSpin) {
  TempDir dir;
  Daemon n1(dir, "n1", {});
  Daemon mallory(dir, "mallory", {});  // an allowed key, to check the port listens again
  n1.start();
  ASSERT_TRUE(wait_until(
      [&] {
        return ctl(n1, {"nodes", "--json"}).status.exited_with(0);
      },
      kReady));
  rlimit mine{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &mine), 0);
  if (mine.rlim_max < 2048) GTEST_SKIP() << "needs a hard fd limit of 2048, have " << mine.rlim_max;
  rlimit enough = mine;
  enough.rlim_cur = std::max<rlim_t>(mine.rlim_cur, 2048);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &enough), 0);
  // 48 fds more than the daemon uses for the flood; connections come from ever more addresses,
  // 4 from each (far under the per-address cap of 64), until the daemon runs out. The flood is
  // sent in batches of 32, each once the daemon's counters answer: connecting faster than the
  // daemon accepts overflows the kernel's listen backlog, and the overflow reaches the daemon
  // only with the SYN-ACK retries, over seconds, while the handshake timeout (5 s) closes what
  // it accepted earlier, so a fixed burst filled its fds only in some runs.
  const std::size_t fds_before = open_fds(n1.process().pid());
  const rlim_t limit = static_cast<rlim_t>(fds_before) + 48;
  const rlimit tight{limit, limit};
  ASSERT_EQ(::prlimit(n1.process().pid(), RLIMIT_NOFILE, &tight, nullptr), 0);
  const std::size_t log_before = n1.process().err().size();
  const auto paused = [&] { return transport_counter(n1, "accept_pauses").value_or(0) > 0; };
  std::vector<int> flood;
  for (int host = 2; host < 250 && !paused(); host += 8) {
    for (int h = host; h < host + 8; ++h) {
      const std::string source = "127.0.0." + std::to_string(h);
      for (int i = 0; i < 4; ++i) {
        const int fd = connect_loopback_from(n1.port(), source.c_str(), 2s);
        if (fd >= 0) flood.push_back(fd);
      }
    }
  }
  RecordProperty("flood_connections", std::to_string(flood.size()));
  ASSERT_TRUE(wait_until(paused, 10s))
      << flood.size() << " connections made; accept failures: " << transport_counter(n1, "accept_failures").value_or(0);
  // With the flood's connections still open on the attacker's side, failed accepts stop
  // growing (ZeroMQ alone would retry the accept in a busy loop, thousands a second).
  std::uint64_t last = transport_counter(n1, "accept_failures").value_or(0);
  int unchanged = 0;
  EXPECT_TRUE(wait_until(
      [&] {
        const std::uint64_t now = transport_counter(n1, "accept_failures").value_or(0);
        unchanged = now == last ? unchanged + 1 : 0;
        last = now;
        return unchanged >= 5;
      },
      15s))
      << "accept failures still growing: " << last;
  RecordProperty("accept_failures", std::to_string(last));
  RecordProperty("accept_pauses",
                 std::to_string(transport_counter(n1, "accept_pauses").value_or(0)));

  EXPECT_TRUE(answers_within(n1, 2s));
  // The pause dropped the inbound connections, the flood's among them.
  EXPECT_TRUE(wait_until([&] { return open_fds(n1.process().pid()) <= fds_before + 8; }, 15s))
      << open_fds(n1.process().pid()) << " fds open, " << fds_before << " before";

  // It listens again: an allowed peer's message arrives.
  zmq::context_t context;
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  ASSERT_TRUE(connect_as(dealer, mallory, n1));
  const std::uint64_t received = transport_counter(n1, "received").value_or(0);
  ASSERT_TRUE(send_frames(
      dealer, envelope("mallory", wire::MsgType::kNack, wire::encode_body(wire::Nack{1}))));
  EXPECT_TRUE(
      wait_until([&] { return transport_counter(n1, "received").value_or(0) > received; }, 15s));
  EXPECT_TRUE(n1.process().running()) << n1.process().err();
  const std::string log = n1.process().err().substr(log_before);
  EXPECT_LE(count_matches(log, std::regex("cannot accept|cannot listen")), 10u)
      << log.substr(log.size() > 4000 ? log.size() - 4000 : 0);
  for (int fd : flood) ::close(fd);
}

}  // namespace
}  // namespace elastic::testing
