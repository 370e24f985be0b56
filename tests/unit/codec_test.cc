// The wire codec: round trips, tolerance of unknown keys, every error class, and hostile bytes
// (every truncation, thousands of seeded byte flips) that must never throw or crash.
#include "daemon/wire/codec.h"

#include <gtest/gtest.h>

#include <msgpack.hpp>
#include <random>

#include "tests/support/result_assertions.h"

namespace elastic::wire {
namespace {

MemberUpdate update(int i) {
  MemberUpdate u;
  u.name = "node-" + std::to_string(i);
  u.generation = 1000 + i;
  u.incarnation = static_cast<std::uint32_t>(i * 7);
  u.state = static_cast<MemberState>(i % 4);
  u.address = "tcp://10.0." + std::to_string(i % 256) + ".1:7946";
  u.from = i % 2 ? "node-0" : "";
  return u;
}

std::vector<MemberUpdate> updates(int n) {
  std::vector<MemberUpdate> out;
  for (int i = 0; i < n; ++i) out.push_back(update(i));
  return out;
}

std::vector<MembershipMessage> every_message() {
  Ping ping{42, "b", 7, updates(3)};
  Ack ack{43, updates(2)};
  PingReq req{44, "c", 9, "tcp://10.0.0.3:7946", false, updates(1)};
  Nack nack{45};
  PushPullDigest digest{0xdeadbeefcafef00dULL, 12, true};
  PushPullState state{updates(50), true, false};
  return {ping, ack, req, nack, digest, state};
}

Envelope envelope_with(const MembershipMessage& m) {
  Envelope e;
  e.cluster_id = "c1";
  e.sender = "a";
  e.generation = 3;
  e.sender_address = "tcp://127.0.0.1:5555";
  e.type = message_type(m);
  e.seq = 99;
  e.body = encode_body(m);
  return e;
}

DecodeLimits limits() {
  DecodeLimits l;
  l.cluster_id = "c1";
  return l;
}

bool same(const Envelope& a, const Envelope& b) {
  return a.version == b.version && a.cluster_id == b.cluster_id && a.sender == b.sender &&
         a.generation == b.generation && a.sender_address == b.sender_address && a.type == b.type &&
         a.seq == b.seq && a.body == b.body;
}

// Packs a map from (key, packer callback) pairs, for hand-made and hostile inputs.
using Field = std::pair<std::string, std::function<void(msgpack::packer<msgpack::sbuffer>&)>>;
std::string pack_map(const std::vector<Field>& fields) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> p(buffer);
  p.pack_map(static_cast<std::uint32_t>(fields.size()));
  for (const auto& [key, value] : fields) {
    p.pack(key);
    value(p);
  }
  return std::string(buffer.data(), buffer.size());
}

std::vector<Field> envelope_fields(const std::string& body) {
  return {{"v", [](auto& p) { p.pack_uint32(1); }},
          {"c", [](auto& p) { p.pack(std::string("c1")); }},
          {"s", [](auto& p) { p.pack(std::string("a")); }},
          {"g", [](auto& p) { p.pack_uint64(3); }},
          {"a", [](auto& p) { p.pack(std::string("tcp://x:1")); }},
          {"t", [](auto& p) { p.pack_uint16(1); }},
          {"q", [](auto& p) { p.pack_uint64(5); }},
          {"b", [body](auto& p) {
             p.pack_bin(static_cast<std::uint32_t>(body.size()));
             p.pack_bin_body(body.data(), static_cast<std::uint32_t>(body.size()));
           }}};
}

TEST(Codec, EveryMessageRoundTripsInsideAnEnvelope) {
  for (const MembershipMessage& m : every_message()) {
    const Envelope sent = envelope_with(m);
    Result<Envelope> got = decode_envelope(encode_envelope(sent), limits());
    ASSERT_OK(got);
    EXPECT_TRUE(same(sent, *got));
    Result<MembershipMessage> body = decode_membership(got->type, got->body);
    ASSERT_OK(body);
    EXPECT_EQ(*body, m) << "type " << static_cast<int>(got->type);
  }
}

TEST(Codec, LargeStateWithManyUpdatesRoundTrips) {
  PushPullState state{updates(20'000), false, true};
  const Envelope sent = envelope_with(state);
  Result<Envelope> got = decode_envelope(encode_envelope(sent), limits());
  ASSERT_OK(got);
  Result<MembershipMessage> body = decode_membership(got->type, got->body);
  ASSERT_OK(body);
  EXPECT_EQ(std::get<PushPullState>(*body), state);
}

TEST(Codec, UnknownKeysAreIgnoredAndOptionalFieldsDefault) {
  std::vector<Field> fields =
      envelope_fields(pack_map({{"p", [](auto& p) { p.pack_uint64(8); }},
                                {"t", [](auto& p) { p.pack(std::string("b")); }},
                                {"tg", [](auto& p) { p.pack_uint64(2); }},
                                {"future", [](auto& p) {
                                   p.pack_array(2);
                                   p.pack(std::string("x"));
                                   p.pack_map(0);
                                 }}}));
  fields.push_back({"zz", [](auto& p) { p.pack_double(1.5); }});
  Result<Envelope> e = decode_envelope(pack_map(fields), limits());
  ASSERT_OK(e);
  Result<MembershipMessage> m = decode_membership(e->type, e->body);
  ASSERT_OK(m);
  EXPECT_EQ(std::get<Ping>(*m), (Ping{8, "b", 2, {}}));

  // PingReq's want_nack defaults to true when absent.
  Result<MembershipMessage> req = decode_membership(
      MsgType::kPingReq, pack_map({{"p", [](auto& p) { p.pack_uint64(1); }},
                                   {"t", [](auto& p) { p.pack(std::string("b")); }},
                                   {"tg", [](auto& p) { p.pack_uint64(2); }},
                                   {"ta", [](auto& p) { p.pack(std::string("tcp://b:1")); }}}));
  ASSERT_OK(req);
  EXPECT_TRUE(std::get<PingReq>(*req).want_nack);
}

DecodeError envelope_error(const std::string& bytes, DecodeLimits l = limits()) {
  DecodeError reason = DecodeError::kMalformed;
  Result<Envelope> e = decode_envelope(bytes, l, &reason);
  EXPECT_FALSE(e.ok());
  if (!e.ok()) {
    EXPECT_FALSE(e.error().message.empty());
  }
  return reason;
}

TEST(Codec, EachErrorClass) {
  const std::string good = encode_envelope(envelope_with(Nack{1}));
  DecodeLimits small = limits();
  small.max_bytes = good.size() - 1;
  EXPECT_EQ(envelope_error(good, small), DecodeError::kOversized);

  DecodeLimits other_cluster = limits();
  other_cluster.cluster_id = "c2";
  EXPECT_EQ(envelope_error(good, other_cluster), DecodeError::kWrongCluster);

  Envelope v2 = envelope_with(Nack{1});
  v2.version = 2;
  EXPECT_EQ(envelope_error(encode_envelope(v2)), DecodeError::kWrongVersion);
  // The version is judged first: a v2 envelope from another cluster is still wrong-version.
  v2.cluster_id = "zz";
  EXPECT_EQ(envelope_error(encode_envelope(v2)), DecodeError::kWrongVersion);

  EXPECT_EQ(envelope_error(""), DecodeError::kMalformed);
  EXPECT_EQ(envelope_error("garbage!"), DecodeError::kMalformed);
  EXPECT_EQ(envelope_error(good + "x"), DecodeError::kMalformed);  // trailing bytes
}

TEST(Codec, MissingKeysWrongTypesAndBadEnumsAreMalformed) {
  std::vector<Field> fields = envelope_fields("");
  for (std::size_t drop = 0; drop < fields.size(); ++drop) {
    std::vector<Field> less = fields;
    less.erase(less.begin() + static_cast<std::ptrdiff_t>(drop));
    EXPECT_EQ(envelope_error(pack_map(less)), DecodeError::kMalformed) << fields[drop].first;
  }
  std::vector<Field> wrong = fields;
  wrong[2].second = [](auto& p) { p.pack_uint64(5); };  // sender as a number
  EXPECT_EQ(envelope_error(pack_map(wrong)), DecodeError::kMalformed);
  wrong = fields;
  wrong[5].second = [](auto& p) { p.pack_uint64(70000); };  // type beyond 16 bits
  EXPECT_EQ(envelope_error(pack_map(wrong)), DecodeError::kMalformed);
  wrong = fields;
  wrong[6].second = [](auto& p) { p.pack_int64(-1); };  // negative seq
  EXPECT_EQ(envelope_error(pack_map(wrong)), DecodeError::kMalformed);

  auto member = [](std::uint64_t state) {
    return pack_map({{"m", [state](auto& p) {
                        p.pack_array(1);
                        p.pack_map(4);
                        p.pack(std::string("n"));
                        p.pack(std::string("x"));
                        p.pack(std::string("g"));
                        p.pack_uint64(1);
                        p.pack(std::string("i"));
                        p.pack_uint64(1);
                        p.pack(std::string("s"));
                        p.pack_uint64(state);
                      }}});
  };
  EXPECT_OK(decode_membership(MsgType::kPushPullState, member(3)));
  DecodeError reason = DecodeError::kOversized;
  EXPECT_FALSE(decode_membership(MsgType::kPushPullState, member(4), &reason).ok());
  EXPECT_EQ(reason, DecodeError::kMalformed);
  EXPECT_FALSE(decode_membership(MsgType::kPushPullState, pack_map({})).ok());
  EXPECT_FALSE(decode_membership(MsgType::kControlRequest, pack_map({})).ok());
  EXPECT_FALSE(decode_membership(static_cast<MsgType>(9999), pack_map({})).ok());
  // A float where an integer belongs.
  EXPECT_FALSE(
      decode_membership(MsgType::kNack, pack_map({{"p", [](auto& p) { p.pack_double(1.5); }}}))
          .ok());
}

TEST(Codec, AbsurdSizesAreRejectedWithoutAllocating) {
  // An array header claiming 4 billion members in a few bytes.
  std::string huge_array = pack_map({{"m", [](auto&) {}}});
  huge_array += std::string("\xdd\xff\xff\xff\xff", 5);
  DecodeError reason = DecodeError::kMalformed;
  EXPECT_FALSE(decode_membership(MsgType::kPushPullState, huge_array, &reason).ok());
  EXPECT_EQ(reason, DecodeError::kOversized);
  // A string header claiming 4 GiB.
  std::string huge_string = pack_map({{"t", [](auto&) {}}});
  huge_string += std::string("\xdb\xff\xff\xff\xff", 5);
  EXPECT_FALSE(decode_membership(MsgType::kPing, huge_string).ok());
  // A name longer than any real one.
  EXPECT_FALSE(decode_membership(
                   MsgType::kPing,
                   pack_map({{"p", [](auto& p) { p.pack_uint64(1); }},
                             {"t", [](auto& p) { p.pack(std::string(kMaxNameBytes + 1, 'x')); }},
                             {"tg", [](auto& p) { p.pack_uint64(1); }}}))
                   .ok());
  // Nesting deeper than the limit.
  std::string deep(100, '\x91');
  EXPECT_FALSE(decode_envelope(deep + '\xc0', limits()).ok());
}

TEST(Codec, EveryTruncationIsRejected) {
  for (const MembershipMessage& m : every_message()) {
    const std::string bytes = encode_envelope(envelope_with(m));
    for (std::size_t n = 0; n < bytes.size(); ++n) {
      EXPECT_FALSE(decode_envelope(std::string_view(bytes).substr(0, n), limits()).ok()) << n;
    }
    const std::string body = encode_body(m);
    for (std::size_t n = 0; n < body.size(); ++n) {
      EXPECT_FALSE(decode_membership(message_type(m), std::string_view(body).substr(0, n)).ok());
    }
  }
}

TEST(Codec, RandomByteFlipsNeverCrashAndDecodedValuesRoundTrip) {
  std::mt19937_64 rng(20240611);
  const std::vector<MembershipMessage> messages = every_message();
  int decoded = 0;
  for (int round = 0; round < 5000; ++round) {
    const MembershipMessage& m = messages[round % messages.size()];
    std::string bytes = round % 2 ? encode_envelope(envelope_with(m)) : encode_body(m);
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      bytes[rng() % bytes.size()] = static_cast<char>(rng());
    }
    if (round % 2) {
      Result<Envelope> e = decode_envelope(bytes, limits());
      if (e.ok()) {
        ++decoded;
        Result<Envelope> again = decode_envelope(encode_envelope(*e), limits());
        ASSERT_OK(again);
        EXPECT_TRUE(same(*e, *again));
      }
    } else {
      Result<MembershipMessage> d = decode_membership(message_type(m), bytes);
      if (d.ok()) {
        ++decoded;
        Result<MembershipMessage> again = decode_membership(message_type(m), encode_body(*d));
        ASSERT_OK(again);
        EXPECT_EQ(*d, *again);
      }
    }
  }
  // Flipping a string's content keeps it decodable, so some must survive: the property was used.
  EXPECT_GT(decoded, 0);
}

}  // namespace
}  // namespace elastic::wire
