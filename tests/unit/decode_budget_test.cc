// Hostile MessagePack against every decoder that reads daemon-to-daemon bytes:
// a 60 MB bomb of nested 100,000-element arrays once took a daemon from 16 MB to 1.44 GB and
// stalled its loop 1.3 s per message. Each bomb here must be refused quickly, with the peak
// resident memory of the process (the kernel's high-water mark, reset before each decode)
// growing by far less than the bomb's size; declared lengths the bytes cannot hold are refused
// before anything is allocated. The largest legitimate messages must still decode.
// Also the per-address accounting of inbound transport connections, which is pure.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <msgpack.hpp>
#include <optional>
#include <string>
#include <vector>

#include "daemon/consensus/raft_codec.h"
#include "daemon/rendezvous/job_codec.h"
#include "daemon/rendezvous/job_spec.h"
#include "daemon/rendezvous/job_table.h"
#include "daemon/transport/inbound_connections.h"
#include "daemon/wire/codec.h"

namespace elastic {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;
using wire::DecodeError;
using wire::MsgType;

// One element of that bomb: an array of 100,000 one-byte integers (100 KB on the wire,
// 2.4 MB as msgpack-c objects).
constexpr std::size_t kBombArray = 100'000;
// 240 of them: 24 MB on the wire (about 580 MB of objects for a decoder without a budget).
constexpr std::size_t kBombArrays = 240;
// What a refused bomb may add to the peak resident memory (the input is allocated before).
constexpr long kMaxGrowthBytes = 16L << 20;
// How long refusing one may take; generous for sanitizer builds (the old decoder took seconds).
constexpr auto kMaxDecodeTime = std::chrono::milliseconds(500);

void key(Packer& p, const char* k) {
  p.pack_str(static_cast<std::uint32_t>(std::strlen(k)))
      .pack_str_body(k, static_cast<std::uint32_t>(std::strlen(k)));
}

// `arrays` arrays of kBombArray one-byte integers, as one array value.
void pack_bomb(msgpack::sbuffer& buffer, std::size_t arrays) {
  Packer p(buffer);
  p.pack_array(static_cast<std::uint32_t>(arrays));
  const std::string ones(kBombArray, '\x01');
  for (std::size_t i = 0; i < arrays; ++i) {
    p.pack_array(kBombArray);
    buffer.write(ones.data(), ones.size());
  }
}

// A map whose only key "x" holds the bomb: any body decoder must parse it before reading keys.
std::string body_bomb(std::size_t arrays = kBombArrays) {
  msgpack::sbuffer buffer;
  Packer p(buffer);
  p.pack_map(1);
  key(p, "x");
  pack_bomb(buffer, arrays);
  return std::string(buffer.data(), buffer.size());
}

// A valid Ping envelope of cluster "test" with one more key, "x", holding the bomb (unknown keys
// are ignored by design, so only a budget stops it).
std::string envelope_bomb() {
  msgpack::sbuffer buffer;
  Packer p(buffer);
  p.pack_map(9);
  key(p, "v");
  p.pack_uint64(wire::kProtocolVersion);
  key(p, "c");
  p.pack_str(4).pack_str_body("test", 4);
  key(p, "s");
  p.pack_str(4).pack_str_body("evil", 4);
  key(p, "g");
  p.pack_uint64(1);
  key(p, "a");
  p.pack_str(17).pack_str_body("tcp://127.0.0.1:1", 17);
  key(p, "t");
  p.pack_uint64(static_cast<std::uint64_t>(MsgType::kPing));
  key(p, "q");
  p.pack_uint64(1);
  key(p, "b");
  p.pack_bin(0);
  key(p, "x");
  pack_bomb(buffer, kBombArrays);
  return std::string(buffer.data(), buffer.size());
}

long status_kb(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::stol(line.substr(std::strlen(field)));
  }
  return -1;
}

struct Cost {
  long growth_bytes;  // peak RSS while decoding minus RSS before
  std::chrono::steady_clock::duration time;
};

// Runs `decode` with the kernel's peak-RSS mark reset first (clear_refs "5", Linux >= 4.0).
Cost measure(const std::function<void()>& decode) {
  { std::ofstream("/proc/self/clear_refs") << "5"; }
  const long before = status_kb("VmRSS:");
  const auto start = std::chrono::steady_clock::now();
  decode();
  const auto time = std::chrono::steady_clock::now() - start;
  return {(status_kb("VmHWM:") - before) * 1024, time};
}

struct Outcome {
  bool ok = false;
  std::optional<DecodeError> reason;  // when the decoder reports one
  std::string message;
};

template <typename R>
Outcome outcome(const Result<R>& r, std::optional<DecodeError> reason = std::nullopt) {
  return {r.ok(), reason, r.ok() ? std::string() : r.error().message};
}

using Decoder = std::function<Outcome(const std::string&)>;

// A decoder that reports the class of its error through a DecodeError* (its last argument).
template <typename Decode>
Decoder classified(Decode decode) {
  return [decode](const std::string& bytes) {
    DecodeError reason{};
    const auto result = decode(bytes, &reason);
    return outcome(result, reason);
  };
}

// A body decoder of message type `type` (membership or Raft).
template <typename Result, Result (*decode)(MsgType, std::string_view, DecodeError*)>
Decoder of_type(MsgType type) {
  return classified([type](const std::string& b, DecodeError* r) { return decode(type, b, r); });
}

// Every decoder of bytes that arrive from another daemon (or its Raft log), by name.
std::vector<std::pair<std::string, Decoder>> decoders() {
  using Membership = Result<wire::MembershipMessage>;
  using Raft = Result<consensus::Message>;
  constexpr auto membership = &of_type<Membership, wire::decode_membership>;
  constexpr auto raft = &of_type<Raft, consensus::decode_raft>;
  return {
      {"envelope", classified([](const std::string& b, DecodeError* r) {
         wire::DecodeLimits limits;
         limits.cluster_id = "test";
         return wire::decode_envelope(b, limits, r);
       })},
      {"Ping", membership(MsgType::kPing)},
      {"PushPullState", membership(MsgType::kPushPullState)},
      {"AppendEntries", raft(MsgType::kRaftAppendEntries)},
      {"InstallSnapshot", raft(MsgType::kRaftInstallSnapshot)},
      {"VoteRequest", raft(MsgType::kRaftVoteRequest)},
      {"job command", [](const std::string& b) { return outcome(rendezvous::decode_command(b)); }},
      {"job spec", [](const std::string& b) { return outcome(rendezvous::decode_job_spec(b)); }},
      {"job table snapshot",
       [](const std::string& b) { return outcome(rendezvous::JobTable::restore(b)); }},
  };
}

// Runs `decode` on `bytes`, checks that it refused them within the time and memory bounds, and
// returns what it said.
Outcome refused_cheaply(const Decoder& decode, const std::string& bytes) {
  Outcome result;
  const Cost cost = measure([&] { result = decode(bytes); });
  EXPECT_FALSE(result.ok);
  EXPECT_LT(cost.growth_bytes, kMaxGrowthBytes);
  EXPECT_LT(cost.time, kMaxDecodeTime);
  return result;
}

// Over a limit, where the decoder reports a class.
void expect_oversized(const Outcome& result) {
  if (result.reason) {
    EXPECT_EQ(*result.reason, DecodeError::kOversized) << result.message;
  }
}

TEST(DecodeBudget, EnvelopeBombIsRefusedFastWithBoundedMemory) {
  const std::string bomb = envelope_bomb();
  ASSERT_GT(bomb.size(), 20u << 20);
  const Outcome result = refused_cheaply(decoders()[0].second, bomb);
  EXPECT_EQ(result.reason, DecodeError::kOversized);
  EXPECT_NE(result.message.find("MessagePack values"), std::string::npos) << result.message;
}

TEST(DecodeBudget, BodyBombIsRefusedFastWithBoundedMemoryByEveryDecoder) {
  const std::string bomb = body_bomb();
  for (const auto& [name, decode] : decoders()) {
    SCOPED_TRACE(name);
    const Outcome result = refused_cheaply(decode, bomb);
    expect_oversized(result);
    EXPECT_NE(result.message.find("MessagePack values"), std::string::npos) << result.message;
  }
}

// Declared counts and lengths that the rest of the input cannot hold: refused as malformed at
// the header, before msgpack-c allocates the 24 bytes per declared element.
TEST(DecodeBudget, DeclaredLengthsBeyondTheInputAreRefusedBeforeAllocating) {
  // Sixteen nested arrays that each declare 100,000 elements (2.4 MB of objects apiece), in 80
  // bytes; then maps, strings, bins and exts that declare more than follows.
  std::string nested;
  for (int i = 0; i < 16; ++i) nested += std::string("\xdd\x00\x01\x86\xa0", 5);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"nested arrays", nested},
      {"array32", std::string("\xdd\x00\x01\x86\xa0\x01\x02", 7)},
      {"map32", std::string("\xdf\x00\x00\x03\xff\xa1x\x01", 8)},
      {"str32", std::string("\x81\xa1x\xdb\x00\x00\xff\xff"
                            "abc",
                            11)},
      {"bin32", std::string("\x81\xa1x\xc6\x00\x10\x00\x00"
                            "abc",
                            11)},
      {"ext32", std::string("\x81\xa1x\xc9\x00\x00\x10\x00\x01"
                            "abc",
                            12)},
  };
  for (const auto& [shape, bytes] : cases) {
    for (const auto& [name, decode] : decoders()) {
      SCOPED_TRACE(shape + " to " + name);
      const Outcome result = refused_cheaply(decode, bytes);
      // "but only N bytes follow", or over the decoder's own limit for that kind of value.
      EXPECT_TRUE(result.message.find("bytes follow") != std::string::npos ||
                  result.message.find("more than the limit") != std::string::npos)
          << result.message;
    }
  }
}

TEST(DecodeBudget, DeepNestingIsRefused) {
  const std::string deep = std::string(100'000, '\x91') + "\x01";
  for (const auto& [name, decode] : decoders()) {
    SCOPED_TRACE(name);
    expect_oversized(refused_cheaply(decode, deep));
  }
}

// Many small values where the message has only a few fields: an envelope of 1,000 unknown keys.
TEST(DecodeBudget, ManySmallValuesInAFixedMessageAreRefused) {
  wire::Envelope e;
  e.cluster_id = "test";
  e.sender = "a";
  e.sender_address = "tcp://127.0.0.1:1";
  std::string bytes = wire::encode_envelope(e);
  // Rewrite the map header (fixmap of 8) as a map16 of 8 + 1,000 entries, then add them.
  ASSERT_EQ(static_cast<unsigned char>(bytes[0]), 0x88);
  const std::uint16_t entries = 8 + 1000;
  bytes = std::string("\xde") + static_cast<char>(entries >> 8) +
          static_cast<char>(entries & 0xff) + bytes.substr(1);
  for (int i = 0; i < 1000; ++i)
    bytes += std::string("\xa1") + static_cast<char>(i % 64 + '0') + '\x01';
  DecodeError reason{};
  wire::DecodeLimits limits;
  limits.cluster_id = "test";
  auto r = wire::decode_envelope(bytes, limits, &reason);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(reason, DecodeError::kOversized);
  EXPECT_NE(r.error().message.find("MessagePack values"), std::string::npos) << r.error().message;
}

// A type that is always small cannot carry a big body: refused on the envelope, before the
// body is copied (the daemon's table is daemon/node/body_limits.h; a small one here).
TEST(DecodeBudget, PerTypeBodyLimitIsCheckedOnTheEnvelope) {
  wire::Envelope e;
  e.cluster_id = "test";
  e.sender = "a";
  e.sender_address = "tcp://127.0.0.1:1";
  e.type = MsgType::kPing;
  e.body = std::string(1 << 20, 'x');
  wire::DecodeLimits limits;
  limits.cluster_id = "test";
  limits.max_body_bytes = [](MsgType type) -> std::size_t {
    return type == MsgType::kPing ? 64 * 1024 : std::size_t{1} << 30;
  };
  DecodeError reason{};
  auto r = wire::decode_envelope(wire::encode_envelope(e), limits, &reason);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(reason, DecodeError::kOversized);
  EXPECT_NE(r.error().message.find("type 1 has a 1048576-byte body"), std::string::npos)
      << r.error().message;
  e.type = MsgType::kPushPullState;
  EXPECT_TRUE(wire::decode_envelope(wire::encode_envelope(e), limits).ok());
}

// The budgets leave room for the largest legitimate messages.
TEST(DecodeBudget, LargestLegitimateMessagesStillDecode) {
  wire::PushPullState state;
  for (int i = 0; i < 50'000; ++i) {
    state.members.push_back(
        {"node-" + std::to_string(i), 1, 2, wire::MemberState::kAlive, "tcp://10.0.0.1:7946", ""});
  }
  auto members = wire::decode_membership(MsgType::kPushPullState, wire::encode_body(state));
  ASSERT_TRUE(members.ok()) << members.error().message;

  consensus::AppendEntries append{1, 0, 0, {}, 0};
  for (std::size_t i = 0; i < consensus::kMaxRaftEntriesPerMessage; ++i) {
    append.entries.push_back({1, i + 1, consensus::EntryType::kCommand, "c"});
  }
  const consensus::Message message{1, 2, append};
  auto entries =
      consensus::decode_raft(MsgType::kRaftAppendEntries, consensus::encode_raft(message));
  ASSERT_TRUE(entries.ok()) << entries.error().message;

  rendezvous::JobSpec spec;
  spec.name = "big";
  for (std::size_t i = 0; i < rendezvous::kMaxCommandArgs; ++i) spec.command.push_back("a");
  for (std::size_t i = 0; i < rendezvous::kMaxEnvVars; ++i) spec.env["V" + std::to_string(i)] = "v";
  auto decoded = rendezvous::decode_job_spec(rendezvous::encode_job_spec(spec));
  ASSERT_TRUE(decoded.ok()) << decoded.error().message;

  rendezvous::OpenRound open;
  open.job_id = "big-1";
  open.round = 1;
  for (std::uint32_t i = 0; i < rendezvous::kMaxNodesPerJob; ++i) {
    open.ranks.push_back({"n" + std::to_string(i), 1, 1, i});
  }
  auto command = rendezvous::decode_command(rendezvous::encode_command(open));
  ASSERT_TRUE(command.ok()) << command.error().message;
  // The same as a delta of as many new entries, every key of a run set.
  open.ranks.clear();
  open.delta = rendezvous::RankDelta{.base_round = 0, .base_size = 0, .runs = {}};
  for (std::uint32_t i = 0; i < rendezvous::kMaxNodesPerJob; ++i) {
    open.delta->runs.push_back(
        {.node = "n" + std::to_string(i), .generation = 1ULL << 40, .slots = 8, .restarts = 3});
  }
  auto delta = rendezvous::decode_command(rendezvous::encode_command(open));
  ASSERT_TRUE(delta.ok()) << delta.error().message;
}

// ---------------------------------------------------------------------------------------------
// Inbound connections per address.

// The accounting key of the address `text` (IPv4 or IPv6).
std::string key_of(const char* text) {
  sockaddr_storage s{};
  auto& in4 = reinterpret_cast<sockaddr_in&>(s);
  if (::inet_pton(AF_INET, text, &in4.sin_addr) == 1) {
    in4.sin_family = AF_INET;
    return transport::address_key(s, sizeof(sockaddr_in));
  }
  auto& in6 = reinterpret_cast<sockaddr_in6&>(s);
  in6.sin6_family = AF_INET6;
  EXPECT_EQ(::inet_pton(AF_INET6, text, &in6.sin6_addr), 1) << text;
  return transport::address_key(s, sizeof(sockaddr_in6));
}

TEST(InboundConnections, AddressKeysGroupWhatOneAttackerControls) {
  EXPECT_EQ(key_of("10.1.2.3"), "10.1.2.3");
  // Any local user can bind any of 127.0.0.0/8: one key.
  EXPECT_EQ(key_of("127.0.0.1"), "127.0.0.0/8");
  EXPECT_EQ(key_of("127.45.6.7"), "127.0.0.0/8");
  EXPECT_EQ(key_of("::1"), "127.0.0.0/8");
  EXPECT_EQ(key_of("::ffff:10.1.2.3"), "10.1.2.3");
  EXPECT_EQ(key_of("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64");
  EXPECT_EQ(key_of("2001:db8:1:2:bbbb::9"), "2001:db8:1:2::/64");
  sockaddr_storage unix_socket{};
  unix_socket.ss_family = AF_UNIX;
  EXPECT_EQ(transport::address_key(unix_socket, sizeof(sockaddr_storage)), "");
}

TEST(InboundConnections, CapsEachAddressAndFreesOnDisconnect) {
  transport::InboundConnections inbound(2);
  EXPECT_TRUE(inbound.accepted(10, "a"));
  EXPECT_TRUE(inbound.accepted(11, "a"));
  EXPECT_FALSE(inbound.accepted(12, "a"));  // over the cap: not counted
  EXPECT_TRUE(inbound.accepted(13, "b"));
  EXPECT_EQ(inbound.open_from("a"), 2u);
  EXPECT_EQ(inbound.open(), 3u);
  inbound.disconnected(12);  // the refused one: ignored
  EXPECT_EQ(inbound.open_from("a"), 2u);
  inbound.disconnected(10);
  EXPECT_TRUE(inbound.accepted(14, "a"));
  // An fd still counted is reused (its DISCONNECTED was missed): the stale entry goes.
  EXPECT_TRUE(inbound.accepted(13, "c"));
  EXPECT_EQ(inbound.open_from("b"), 0u);
  EXPECT_EQ(inbound.open_from("c"), 1u);
  EXPECT_FALSE(inbound.accepted(15, "a"));
}

}  // namespace
}  // namespace elastic
