// The Raft wire codec: round trips of every message (empty and large entry lists, binary data),
// unknown-key tolerance, missing keys and wrong types, limits, and hostile bytes (every
// truncation, seeded byte flips) that must never throw or crash.
#include "daemon/consensus/raft_codec.h"

#include <gtest/gtest.h>

#include <functional>
#include <msgpack.hpp>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "tests/support/result_assertions.h"

namespace elastic::consensus {
namespace {

using wire::DecodeError;
using wire::MsgType;

// raft.h's structs have no operator== (not ours to add); compare field by field.
bool same(const VoteRequest& a, const VoteRequest& b) {
  return a.pre_vote == b.pre_vote && a.term == b.term && a.last_log_index == b.last_log_index &&
         a.last_log_term == b.last_log_term;
}
bool same(const VoteReply& a, const VoteReply& b) {
  return a.pre_vote == b.pre_vote && a.term == b.term && a.granted == b.granted;
}
bool same(const AppendEntries& a, const AppendEntries& b) {
  return a.term == b.term && a.prev_log_index == b.prev_log_index &&
         a.prev_log_term == b.prev_log_term && a.entries == b.entries &&
         a.leader_commit == b.leader_commit && a.read_round == b.read_round;
}
bool same(const AppendReply& a, const AppendReply& b) {
  return a.term == b.term && a.success == b.success && a.match_index == b.match_index &&
         a.conflict_index == b.conflict_index && a.conflict_term == b.conflict_term &&
         a.read_round == b.read_round;
}
bool same(const InstallSnapshot& a, const InstallSnapshot& b) {
  return a.term == b.term && a.snapshot == b.snapshot;
}
bool same(const InstallSnapshotReply& a, const InstallSnapshotReply& b) {
  return a.term == b.term && a.match_index == b.match_index;
}
bool same(const Message& a, const Message& b) {
  if (a.from != b.from || a.to != b.to || a.body.index() != b.body.index()) return false;
  return std::visit(
      [&b](const auto& x) { return same(x, std::get<std::decay_t<decltype(x)>>(b.body)); }, a.body);
}

// Binary data with zero bytes, every byte value and an odd length.
std::string binary(std::size_t n, unsigned seed) {
  std::string out(n, '\0');
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<char>((i * 131 + seed) % 256);
  if (n > 2) out[n / 2] = '\0';
  return out;
}

std::vector<Entry> entries(std::size_t n, std::size_t bytes_each) {
  std::vector<Entry> out;
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(Entry{3 + i / 10, 100 + i, i % 7 == 0 ? EntryType::kNoop : EntryType::kCommand,
                        i % 7 == 0 ? std::string() : binary(bytes_each + i % 3, unsigned(i))});
  }
  return out;
}

Message message(MessageBody body) { return Message{1, 0xffff'ffff'ffff'fff0ULL, std::move(body)}; }

std::vector<Message> every_message() {
  return {
      message(VoteRequest{true, 8, 120, 7}),
      message(VoteRequest{false, 9, 0, 0}),
      message(VoteReply{true, 8, true}),
      message(VoteReply{false, 10, false}),
      message(AppendEntries{7, 99, 6, {}, 98}),
      message(AppendEntries{7, 99, 6, entries(5, 33), 98}),
      message(AppendReply{7, true, 104, 0, 0}),
      message(AppendReply{7, false, 0, 50, 4}),
      message(AppendEntries{7, 99, 6, {}, 98, 0xffff'ffff'ffff'fff1ULL}),
      message(AppendReply{7, true, 104, 0, 0, 12}),
      message(AppendEntries{
          7, 99, 6, {Entry{7, 100, EntryType::kConfig, encode_voters({5, 1, 9})}}, 98}),
      message(InstallSnapshot{9, Snapshot{120, 8, {1, 2, 3}, binary(1000, 5)}}),
      message(InstallSnapshot{9, Snapshot{1, 1, {0xffff'ffff'ffff'fff0ULL}, {}}}),
      message(InstallSnapshotReply{9, 120}),
      message(InstallSnapshotReply{10, 0}),
  };
}

Result<Message> round_trip(const Message& m) {
  return decode_raft(raft_message_type(m.body), encode_raft(m));
}

// Packs a map from (key, packer callback) pairs, for hand-made and hostile inputs.
using Packer = msgpack::packer<msgpack::sbuffer>;
using Field = std::pair<std::string, std::function<void(Packer&)>>;
std::string pack_map(const std::vector<Field>& fields) {
  msgpack::sbuffer buffer;
  Packer p(buffer);
  p.pack_map(static_cast<std::uint32_t>(fields.size()));
  for (const auto& [key, value] : fields) {
    p.pack(key);
    value(p);
  }
  return std::string(buffer.data(), buffer.size());
}
std::function<void(Packer&)> u(std::uint64_t v) {
  return [v](Packer& p) { p.pack_uint64(v); };
}
std::function<void(Packer&)> b(bool v) {
  return [v](Packer& p) { v ? p.pack_true() : p.pack_false(); };
}
std::function<void(Packer&)> bin(std::string v) {
  return [v](Packer& p) {
    p.pack_bin(static_cast<std::uint32_t>(v.size()));
    p.pack_bin_body(v.data(), static_cast<std::uint32_t>(v.size()));
  };
}
std::function<void(Packer&)> str(std::string v) {
  return [v](Packer& p) { p.pack(v); };
}
std::vector<Field> entry_fields() {
  return {{"t", u(2)}, {"i", u(5)}, {"y", u(1)}, {"d", bin(std::string("a\0b", 3))}};
}
std::vector<Field> append_fields(std::vector<std::vector<Field>> es) {
  std::vector<std::string> packed;
  for (const auto& e : es) packed.push_back(pack_map(e));
  return {{"fr", u(1)},
          {"to", u(2)},
          {"t", u(3)},
          {"pi", u(4)},
          {"pt", u(2)},
          {"c", u(4)},
          {"e", [packed](Packer& p) {
             p.pack_array(static_cast<std::uint32_t>(packed.size()));
             // Pre-packed maps are spliced in raw (the packer's str body writes bytes verbatim).
             for (const std::string& m : packed) {
               p.pack_str_body(m.data(), static_cast<std::uint32_t>(m.size()));
             }
           }}};
}

std::vector<Field> without(std::vector<Field> fields, const std::string& key) {
  std::erase_if(fields, [&key](const Field& f) { return f.first == key; });
  return fields;
}
std::vector<Field> replaced(std::vector<Field> fields, const std::string& key,
                            std::function<void(Packer&)> value) {
  for (Field& f : fields) {
    if (f.first == key) f.second = std::move(value);
  }
  return fields;
}

TEST(RaftCodec, TypesAreRaftAndNotMembership) {
  for (MsgType t : {MsgType::kRaftVoteRequest, MsgType::kRaftVoteReply, MsgType::kRaftAppendEntries,
                    MsgType::kRaftAppendReply, MsgType::kRaftInstallSnapshot,
                    MsgType::kRaftInstallSnapshotReply}) {
    EXPECT_TRUE(wire::is_raft_type(t));
    EXPECT_FALSE(wire::is_membership_type(t));
  }
  EXPECT_FALSE(wire::is_raft_type(MsgType::kPing));
  EXPECT_FALSE(wire::is_raft_type(MsgType::kControlRequest));
  EXPECT_EQ(static_cast<int>(MsgType::kRaftVoteRequest), 7);
  EXPECT_EQ(static_cast<int>(MsgType::kRaftAppendReply), 10);
  EXPECT_EQ(static_cast<int>(MsgType::kRaftInstallSnapshot), 11);
  EXPECT_EQ(static_cast<int>(MsgType::kRaftInstallSnapshotReply), 12);
  EXPECT_EQ(static_cast<int>(MsgType::kControlRequest), 100);
}

TEST(RaftCodec, EveryMessageRoundTrips) {
  for (const Message& m : every_message()) {
    EXPECT_TRUE(wire::is_raft_type(raft_message_type(m.body)));
    Result<Message> got = round_trip(m);
    ASSERT_OK(got);
    EXPECT_TRUE(same(*got, m)) << "variant " << m.body.index();
  }
}

TEST(RaftCodec, RoundTripsInsideAnEnvelope) {
  const Message m = message(AppendEntries{7, 99, 6, entries(3, 17), 98});
  wire::Envelope e;
  e.cluster_id = "c1";
  e.sender = "a";
  e.type = raft_message_type(m.body);
  e.body = encode_raft(m);
  wire::DecodeLimits limits;
  limits.cluster_id = "c1";
  Result<wire::Envelope> got = wire::decode_envelope(wire::encode_envelope(e), limits);
  ASSERT_OK(got);
  Result<Message> body = decode_raft(got->type, got->body);
  ASSERT_OK(body);
  EXPECT_TRUE(same(*body, m));
  // The membership decoder refuses Raft types, and the Raft decoder membership ones.
  EXPECT_FALSE(wire::decode_membership(got->type, got->body).ok());
  DecodeError reason = DecodeError::kOversized;
  EXPECT_FALSE(decode_raft(MsgType::kPing, got->body, &reason).ok());
  EXPECT_EQ(reason, DecodeError::kMalformed);
}

TEST(RaftCodec, LargeAndBinaryEntryListsRoundTrip) {
  // Many small entries, then a few large ones with odd lengths and zero bytes.
  for (const auto& [n, size] : std::vector<std::pair<std::size_t, std::size_t>>{
           {10'000, 3}, {4, 1'000'001}, {1, 0}, {1, 1}}) {
    const Message m = message(AppendEntries{9, 1, 1, entries(n, size), 5});
    ASSERT_TRUE(fits_raft_limits(m));
    Result<Message> got = round_trip(m);
    ASSERT_OK(got);
    EXPECT_TRUE(same(*got, m)) << n << " entries of ~" << size << " bytes";
  }
  const Message zeros = message(
      AppendEntries{1, 0, 0, {Entry{1, 1, EntryType::kCommand, std::string(257, '\0')}}, 0});
  Result<Message> got = round_trip(zeros);
  ASSERT_OK(got);
  EXPECT_EQ(std::get<AppendEntries>(got->body).entries[0].data, std::string(257, '\0'));
}

TEST(RaftCodec, UnknownKeysAreIgnored) {
  std::vector<Field> fields = append_fields({entry_fields()});
  fields.push_back({"future", [](Packer& p) {
                      p.pack_array(2);
                      p.pack(std::string("x"));
                      p.pack_map(0);
                    }});
  std::vector<Field> entry = entry_fields();
  entry.push_back({"zz", [](Packer& p) { p.pack_double(1.5); }});
  fields = replaced(fields, "e", [packed = pack_map(entry)](Packer& p) {
    p.pack_array(1);
    p.pack_str_body(packed.data(), static_cast<std::uint32_t>(packed.size()));
  });
  Result<Message> m = decode_raft(MsgType::kRaftAppendEntries, pack_map(fields));
  ASSERT_OK(m);
  EXPECT_EQ(m->from, 1u);
  EXPECT_EQ(m->to, 2u);
  const auto& ae = std::get<AppendEntries>(m->body);
  ASSERT_EQ(ae.entries.size(), 1u);
  EXPECT_EQ(ae.entries[0], (Entry{2, 5, EntryType::kCommand, std::string("a\0b", 3)}));

  Result<Message> vote = decode_raft(MsgType::kRaftVoteRequest, pack_map({{"fr", u(1)},
                                                                          {"to", u(2)},
                                                                          {"pv", b(true)},
                                                                          {"t", u(4)},
                                                                          {"li", u(3)},
                                                                          {"lt", u(2)},
                                                                          {"new", str("x")}}));
  ASSERT_OK(vote);
  EXPECT_TRUE(same(std::get<VoteRequest>(vote->body), VoteRequest{true, 4, 3, 2}));
}

TEST(RaftCodec, MissingKeysAndWrongTypesAreMalformed) {
  const std::vector<Field> good = append_fields({entry_fields()});
  ASSERT_OK(decode_raft(MsgType::kRaftAppendEntries, pack_map(good)));
  std::vector<std::string> bad;
  for (const Field& f : good) {
    bad.push_back(pack_map(without(good, f.first)));
    bad.push_back(pack_map(replaced(good, f.first, str("x"))));
  }
  for (const Field& f : entry_fields()) {
    bad.push_back(pack_map(append_fields({without(entry_fields(), f.first)})));
    bad.push_back(pack_map(append_fields({replaced(entry_fields(), f.first, b(true))})));
  }
  // data as a string, not bin; an unknown entry type; a negative term; an entry that is no map.
  bad.push_back(pack_map(append_fields({replaced(entry_fields(), "d", str("abc"))})));
  bad.push_back(pack_map(append_fields({replaced(entry_fields(), "y", u(2))})));
  bad.push_back(pack_map(append_fields({replaced(entry_fields(), "y", u(256))})));
  bad.push_back(pack_map(replaced(good, "t", [](Packer& p) { p.pack_int64(-1); })));
  bad.push_back(pack_map(replaced(good, "e", [](Packer& p) {
    p.pack_array(1);
    p.pack_uint8(1);
  })));
  bad.push_back(pack_map(replaced(good, "e", u(1))));
  for (std::size_t i = 0; i < bad.size(); ++i) {
    DecodeError reason = DecodeError::kOversized;
    Result<Message> m = decode_raft(MsgType::kRaftAppendEntries, bad[i], &reason);
    ASSERT_FALSE(m.ok()) << "case " << i;
    EXPECT_EQ(reason, DecodeError::kMalformed) << "case " << i << ": " << m.error().message;
    EXPECT_FALSE(m.error().message.empty());
  }

  // Flags are required: a defaulted pre_vote or granted would change the meaning.
  const std::vector<Field> reply = {
      {"fr", u(1)}, {"to", u(2)}, {"pv", b(false)}, {"t", u(4)}, {"ok", b(true)}};
  ASSERT_OK(decode_raft(MsgType::kRaftVoteReply, pack_map(reply)));
  for (const char* key : {"fr", "to", "pv", "t", "ok"}) {
    EXPECT_FALSE(decode_raft(MsgType::kRaftVoteReply, pack_map(without(reply, key))).ok()) << key;
    EXPECT_FALSE(
        decode_raft(MsgType::kRaftVoteReply, pack_map(replaced(reply, key, str("1")))).ok())
        << key;
  }
  EXPECT_FALSE(decode_raft(MsgType::kRaftVoteReply, pack_map(replaced(reply, "pv", u(1)))).ok());
  EXPECT_FALSE(decode_raft(MsgType::kRaftVoteReply, pack_map(replaced(reply, "ok", u(0)))).ok());
  const std::vector<Field> append_reply = {{"fr", u(1)},     {"to", u(2)}, {"t", u(4)},
                                           {"ok", b(false)}, {"m", u(0)},  {"ci", u(3)},
                                           {"ct", u(1)}};
  ASSERT_OK(decode_raft(MsgType::kRaftAppendReply, pack_map(append_reply)));
  for (const Field& f : append_reply) {
    EXPECT_FALSE(
        decode_raft(MsgType::kRaftAppendReply, pack_map(without(append_reply, f.first))).ok())
        << f.first;
  }
  // Not a map at all; trailing bytes.
  EXPECT_FALSE(decode_raft(MsgType::kRaftVoteReply, std::string("\x93\x01\x02\x03", 4)).ok());
  EXPECT_FALSE(decode_raft(MsgType::kRaftVoteReply, pack_map(reply) + "x").ok());
  EXPECT_FALSE(decode_raft(MsgType::kRaftVoteReply, "").ok());
}

TEST(RaftCodec, ReadRoundIsOptionalSoOlderPeersStillDecode) {
  // A peer of a version before read rounds sends no "rs": it decodes as round 0, which confirms
  // no read. Present, it must still be an unsigned integer.
  const std::vector<Field> append = append_fields({entry_fields()});
  const std::vector<Field> reply = {{"fr", u(1)}, {"to", u(2)}, {"t", u(4)}, {"ok", b(true)},
                                    {"m", u(5)},  {"ci", u(0)}, {"ct", u(0)}};
  struct Case {
    const char* name;
    MsgType type;
    std::vector<Field> fields;
    std::optional<std::uint64_t> round;  // nullopt: malformed
  };
  auto with = [](std::vector<Field> fields, std::function<void(Packer&)> value) {
    fields.push_back({"rs", std::move(value)});
    return fields;
  };
  const std::vector<Case> cases = {
      {"AppendEntries without rs", MsgType::kRaftAppendEntries, append, 0},
      {"AppendEntries with rs", MsgType::kRaftAppendEntries, with(append, u(9)), 9},
      {"AppendEntries with a string rs", MsgType::kRaftAppendEntries, with(append, str("9")),
       std::nullopt},
      {"AppendReply without rs", MsgType::kRaftAppendReply, reply, 0},
      {"AppendReply with rs", MsgType::kRaftAppendReply, with(reply, u(7)), 7},
      {"AppendReply with a negative rs", MsgType::kRaftAppendReply,
       with(reply, [](Packer& p) { p.pack_int64(-1); }), std::nullopt},
  };
  for (const auto& k : cases) {
    SCOPED_TRACE(k.name);
    DecodeError reason = DecodeError::kOversized;
    Result<Message> m = decode_raft(k.type, pack_map(k.fields), &reason);
    if (!k.round) {
      ASSERT_FALSE(m.ok());
      EXPECT_EQ(reason, DecodeError::kMalformed);
      continue;
    }
    ASSERT_OK(m);
    if (const auto* ae = std::get_if<AppendEntries>(&m->body)) {
      EXPECT_EQ(ae->read_round, *k.round);
    } else {
      EXPECT_EQ(std::get<AppendReply>(m->body).read_round, *k.round);
    }
  }
}

TEST(RaftCodec, LimitsAreOversized) {
  // Too many entries.
  std::string many;
  {
    msgpack::sbuffer buffer;
    Packer p(buffer);
    const std::string entry = pack_map(entry_fields());
    p.pack_map(7);
    for (const char* k : {"fr", "to", "t", "pi", "pt", "c"}) {
      p.pack(std::string(k));
      p.pack_uint8(1);
    }
    p.pack(std::string("e"));
    p.pack_array(static_cast<std::uint32_t>(kMaxRaftEntriesPerMessage + 1));
    for (std::size_t i = 0; i <= kMaxRaftEntriesPerMessage; ++i) {
      p.pack_str_body(entry.data(), static_cast<std::uint32_t>(entry.size()));
    }
    many.assign(buffer.data(), buffer.size());
  }
  DecodeError reason = DecodeError::kMalformed;
  Result<Message> m = decode_raft(MsgType::kRaftAppendEntries, many, &reason);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(reason, DecodeError::kOversized) << m.error().message;

  // One entry over the per-entry limit.
  const Message big = message(AppendEntries{
      1, 0, 0, {Entry{1, 1, EntryType::kCommand, std::string(kMaxRaftEntryBytes + 1, 'x')}}, 0});
  EXPECT_FALSE(fits_raft_limits(big));
  reason = DecodeError::kMalformed;
  m = decode_raft(MsgType::kRaftAppendEntries, encode_raft(big), &reason);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(reason, DecodeError::kOversized) << m.error().message;

  // Each entry within its limit, the total over.
  const std::size_t n = kMaxRaftEntriesTotalBytes / kMaxRaftEntryBytes + 1;
  const Message total = message(AppendEntries{
      1, 0, 0,
      std::vector<Entry>(n, Entry{1, 1, EntryType::kCommand, std::string(kMaxRaftEntryBytes, 'y')}),
      0});
  EXPECT_FALSE(fits_raft_limits(total));
  reason = DecodeError::kMalformed;
  m = decode_raft(MsgType::kRaftAppendEntries, encode_raft(total), &reason);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(reason, DecodeError::kOversized) << m.error().message;
  EXPECT_NE(m.error().message.find("bytes of entry data"), std::string::npos);
}

TEST(RaftCodec, VoterListsAreChecked) {
  // Config entries: the data must be a valid voter list.
  for (const std::string& data :
       {std::string(), std::string("abc"), encode_voters({}), encode_voters({1, 1}),
        encode_voters({0, 2}), encode_voters({1, 2}) + "x"}) {
    DecodeError reason = DecodeError::kOversized;
    const Message m =
        message(AppendEntries{7, 99, 6, {Entry{7, 100, EntryType::kConfig, data}}, 98});
    Result<Message> got = decode_raft(MsgType::kRaftAppendEntries, encode_raft(m), &reason);
    ASSERT_FALSE(got.ok()) << data.size();
    EXPECT_EQ(reason, DecodeError::kMalformed);
    EXPECT_NE(got.error().message.find("voter list"), std::string::npos) << got.error().message;
  }
  // InstallSnapshot voters: required, non-empty, unsigned, distinct, non-zero, bounded.
  auto install = [](std::function<void(Packer&)> voters) {
    std::vector<Field> fields = {{"fr", u(1)}, {"to", u(2)}, {"t", u(3)},
                                 {"li", u(9)}, {"lt", u(2)}, {"d", bin("state")}};
    if (voters) fields.push_back({"v", std::move(voters)});
    return pack_map(fields);
  };
  auto ids = [](std::vector<std::uint64_t> v) {
    return [v](Packer& p) {
      p.pack_array(static_cast<std::uint32_t>(v.size()));
      for (auto id : v) p.pack_uint64(id);
    };
  };
  Result<Message> good = decode_raft(MsgType::kRaftInstallSnapshot, install(ids({3, 1, 2})));
  ASSERT_OK(good);
  EXPECT_EQ(std::get<InstallSnapshot>(good->body).snapshot,
            (Snapshot{9, 2, {1, 2, 3}, std::string("state")}));
  for (const auto& bad : {install(nullptr), install(ids({})), install(ids({1, 1})),
                          install(ids({0, 1})), install(str("1")), install([](Packer& p) {
                            p.pack_array(1);
                            p.pack_int64(-1);
                          })}) {
    DecodeError reason = DecodeError::kOversized;
    EXPECT_FALSE(decode_raft(MsgType::kRaftInstallSnapshot, bad, &reason).ok());
    EXPECT_EQ(reason, DecodeError::kMalformed);
  }
  std::vector<std::uint64_t> many;
  for (std::uint64_t i = 1; i <= kMaxVoters + 1; ++i) many.push_back(i);
  DecodeError reason = DecodeError::kMalformed;
  EXPECT_FALSE(decode_raft(MsgType::kRaftInstallSnapshot, install(ids(many)), &reason).ok());
  EXPECT_EQ(reason, DecodeError::kOversized);
  // The reply: both fields required.
  const std::vector<Field> reply = {{"fr", u(1)}, {"to", u(2)}, {"t", u(4)}, {"m", u(3)}};
  ASSERT_OK(decode_raft(MsgType::kRaftInstallSnapshotReply, pack_map(reply)));
  for (const Field& f : reply) {
    EXPECT_FALSE(
        decode_raft(MsgType::kRaftInstallSnapshotReply, pack_map(without(reply, f.first))).ok())
        << f.first;
  }
}

TEST(RaftCodec, LargeSnapshotsRoundTripAndOversizedAreRejected) {
  const Message big =
      message(InstallSnapshot{4, Snapshot{1000, 3, {1, 2, 3, 4, 5}, binary(20'000'001, 9)}});
  ASSERT_TRUE(fits_raft_limits(big));
  Result<Message> got = round_trip(big);
  ASSERT_OK(got);
  EXPECT_TRUE(same(*got, big));
  const Message over =
      message(InstallSnapshot{4, Snapshot{1000, 3, {1}, std::string(kMaxSnapshotBytes + 1, 's')}});
  EXPECT_FALSE(fits_raft_limits(over));
  DecodeError reason = DecodeError::kMalformed;
  EXPECT_FALSE(decode_raft(MsgType::kRaftInstallSnapshot, encode_raft(over), &reason).ok());
  EXPECT_EQ(reason, DecodeError::kOversized);
}

TEST(RaftCodec, EveryTruncationOfInstallSnapshotIsRejected) {
  for (const Message& m : {message(InstallSnapshot{9, Snapshot{120, 8, {1, 2, 3}, binary(40, 1)}}),
                           message(InstallSnapshotReply{9, 120})}) {
    const std::string bytes = encode_raft(m);
    for (std::size_t n = 0; n < bytes.size(); ++n) {
      EXPECT_FALSE(decode_raft(raft_message_type(m.body), bytes.substr(0, n)).ok())
          << "prefix of " << n << " bytes";
    }
  }
}

TEST(RaftCodec, EveryTruncationOfAppendEntriesIsRejected) {
  const std::string bytes = encode_raft(message(AppendEntries{7, 99, 6, entries(6, 9), 98}));
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    Result<Message> m = decode_raft(MsgType::kRaftAppendEntries, bytes.substr(0, n));
    EXPECT_FALSE(m.ok()) << "prefix of " << n << " bytes";
  }
}

TEST(RaftCodec, RandomByteFlipsNeverCrashAndDecodedValuesRoundTrip) {
  const std::vector<Message> messages = every_message();
  std::mt19937_64 rng(20261126);
  int decoded = 0;
  for (int round = 0; round < 20'000; ++round) {
    const Message& original = messages[rng() % messages.size()];
    const MsgType type = raft_message_type(original.body);
    std::string bytes = encode_raft(original);
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      bytes[rng() % bytes.size()] = static_cast<char>(rng());
    }
    Result<Message> m = decode_raft(type, bytes);
    if (!m.ok()) {
      EXPECT_FALSE(m.error().message.empty());
      continue;
    }
    ++decoded;
    EXPECT_EQ(raft_message_type(m->body), type);
    Result<Message> again = round_trip(*m);
    ASSERT_OK(again);
    EXPECT_TRUE(same(*again, *m));
  }
  EXPECT_GT(decoded, 0);  // some flips only change values
}

}  // namespace
}  // namespace elastic::consensus
