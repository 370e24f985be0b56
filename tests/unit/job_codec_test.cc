// The job-tier and lease codec: round trips of every message (also inside an envelope), unknown
// keys ignored, missing keys / wrong types / oversized bodies rejected, and hostile bytes (every
// truncation, seeded byte flips) that never throw or crash.
#include "daemon/rendezvous/job_codec.h"

#include <gtest/gtest.h>

#include <msgpack.hpp>
#include <random>
#include <string>
#include <vector>

#include "tests/support/result_assertions.h"

namespace elastic::rendezvous {
namespace {

using namespace std::chrono_literals;
using wire::DecodeError;
using wire::MsgType;

const JobRoundRef kRef{"job-42", 9, 1234567};

std::vector<JobMessage> job_samples() {
  return {JobKeepalive{kRef, 0},
          JobKeepalive{kRef, 0xffffffffffffffffULL},
          JobKeepaliveAck{kRef, 17},
          JobProbeRequest{kRef, 3, "host-7", 12},
          JobProbeReply{kRef, 3, "host-7", 12, true},
          JobProbeReply{JobRoundRef{"", 0, 0}, 0, "", 0, false},
          JobLossNotice{kRef, "host-7", 12},
          JobProbeRequest{JobRoundRef{std::string(wire::kMaxNameBytes, 'j'), 1, 2}, 4,
                          std::string(wire::kMaxNameBytes, 't'), 5}};
}

std::vector<LeaseMessage> lease_samples() {
  return {LeaseRequest{"host-1", 3, 99, 7}, LeaseRequest{"", 0, 0, 0},
          LeaseGrant{"host-1", 3, 99, 8, 10s}, LeaseGrant{"h", 1, 1, 1, 1ms}};
}

TEST(JobCodec, TypesAreTheReservedNumbers) {
  EXPECT_EQ(job_message_type(JobKeepalive{}), MsgType::kJobKeepalive);
  EXPECT_EQ(job_message_type(JobKeepaliveAck{}), MsgType::kJobKeepaliveAck);
  EXPECT_EQ(job_message_type(JobProbeRequest{}), MsgType::kJobProbeRequest);
  EXPECT_EQ(job_message_type(JobProbeReply{}), MsgType::kJobProbeReply);
  EXPECT_EQ(job_message_type(JobLossNotice{}), MsgType::kJobLossNotice);
  EXPECT_EQ(static_cast<int>(MsgType::kJobLossNotice), 23);
  EXPECT_TRUE(is_job_type(MsgType::kJobLossNotice));
  EXPECT_EQ(lease_message_type(LeaseRequest{}), MsgType::kLeaseRequest);
  EXPECT_EQ(lease_message_type(LeaseGrant{}), MsgType::kLeaseGrant);
  EXPECT_TRUE(is_job_type(MsgType::kJobProbeReply));
  EXPECT_FALSE(is_job_type(MsgType::kLeaseGrant));
  EXPECT_TRUE(is_lease_type(MsgType::kLeaseRequest));
  EXPECT_FALSE(is_lease_type(MsgType::kPing));
  DecodeError reason = DecodeError::kOversized;
  EXPECT_FALSE(decode_job(MsgType::kPing, encode_job(JobKeepalive{}), &reason).ok());
  EXPECT_EQ(reason, DecodeError::kMalformed);
  EXPECT_FALSE(decode_lease(MsgType::kJobKeepalive, encode_job(JobKeepalive{})).ok());
}

TEST(JobCodec, EveryMessageRoundTrips) {
  for (const JobMessage& m : job_samples()) {
    const auto decoded = decode_job(job_message_type(m), encode_job(m));
    ASSERT_OK(decoded);
    EXPECT_EQ(*decoded, m);
  }
  for (const LeaseMessage& m : lease_samples()) {
    const auto decoded = decode_lease(lease_message_type(m), encode_lease(m));
    ASSERT_OK(decoded);
    EXPECT_EQ(*decoded, m);
  }
}

TEST(JobCodec, RoundTripsInsideAnEnvelope) {
  const JobMessage m = JobProbeRequest{kRef, 3, "host-7", 12};
  wire::Envelope e;
  e.cluster_id = "c";
  e.sender = "host-1";
  e.generation = 4;
  e.sender_address = "tcp://10.0.0.1:7946";
  e.type = job_message_type(m);
  e.body = encode_job(m);
  wire::DecodeLimits limits;
  limits.cluster_id = "c";
  const auto envelope = wire::decode_envelope(wire::encode_envelope(e), limits);
  ASSERT_OK(envelope);
  const auto decoded = decode_job(envelope->type, envelope->body);
  ASSERT_OK(decoded);
  EXPECT_EQ(*decoded, m);
}

TEST(JobCodec, GrantDurationIsWholeMilliseconds) {
  const auto decoded =
      decode_lease(MsgType::kLeaseGrant, encode_lease(LeaseGrant{"a", 1, 1, 1, 1500us}));
  ASSERT_OK(decoded);
  EXPECT_EQ(std::get<LeaseGrant>(*decoded).duration, 1ms);  // rounded down, never up
}

std::string pack_map(const std::vector<std::pair<std::string, msgpack::object>>& fields) {
  msgpack::sbuffer b;
  msgpack::packer<msgpack::sbuffer> p(b);
  p.pack_map(static_cast<std::uint32_t>(fields.size()));
  for (const auto& [k, v] : fields) {
    p.pack(k);
    p.pack(v);
  }
  return std::string(b.data(), b.size());
}

TEST(JobCodec, UnknownKeysAreIgnored) {
  msgpack::zone z;
  const std::string body = pack_map({{"j", msgpack::object("job", z)},
                                     {"t", msgpack::object(1)},
                                     {"r", msgpack::object(2)},
                                     {"p", msgpack::object(3)},
                                     {"zz-future", msgpack::object("whatever", z)}});
  const auto decoded = decode_job(MsgType::kJobKeepalive, body);
  ASSERT_OK(decoded);
  EXPECT_EQ(std::get<JobKeepalive>(*decoded), (JobKeepalive{{"job", 1, 2}, 3}));
}

TEST(JobCodec, MissingKeysWrongTypesAndRangesAreMalformed) {
  msgpack::zone z;
  DecodeError reason = DecodeError::kOversized;
  // No "p".
  auto r = decode_job(
      MsgType::kJobKeepalive,
      pack_map(
          {{"j", msgpack::object("job", z)}, {"t", msgpack::object(1)}, {"r", msgpack::object(2)}}),
      &reason);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(reason, DecodeError::kMalformed);
  EXPECT_NE(r.error().message.find("'p'"), std::string::npos) << r.error().message;
  // "a" is required in a reply.
  EXPECT_FALSE(decode_job(MsgType::kJobProbeReply, pack_map({{"j", msgpack::object("job", z)},
                                                             {"t", msgpack::object(1)},
                                                             {"r", msgpack::object(2)},
                                                             {"p", msgpack::object(3)},
                                                             {"n", msgpack::object("x", z)},
                                                             {"g", msgpack::object(1)}}))
                   .ok());
  // A negative term, a string round.
  EXPECT_FALSE(decode_job(MsgType::kJobKeepalive, pack_map({{"j", msgpack::object("job", z)},
                                                            {"t", msgpack::object(-1)},
                                                            {"r", msgpack::object(2)},
                                                            {"p", msgpack::object(3)}}))
                   .ok());
  EXPECT_FALSE(decode_job(MsgType::kJobKeepalive, pack_map({{"j", msgpack::object("job", z)},
                                                            {"t", msgpack::object(1)},
                                                            {"r", msgpack::object("2", z)},
                                                            {"p", msgpack::object(3)}}))
                   .ok());
  // Not a map at all; trailing bytes.
  EXPECT_FALSE(decode_job(MsgType::kJobKeepalive, std::string("\x93\x01\x02\x03", 4)).ok());
  EXPECT_FALSE(
      decode_job(MsgType::kJobKeepalive, encode_job(JobKeepalive{kRef, 1}) + std::string(1, '\0'))
          .ok());
  // A lease of more than a day.
  const auto grant =
      decode_lease(MsgType::kLeaseGrant, pack_map({{"n", msgpack::object("a", z)},
                                                   {"g", msgpack::object(1)},
                                                   {"i", msgpack::object(1)},
                                                   {"t", msgpack::object(1)},
                                                   {"d", msgpack::object(1ULL << 62)}}));
  ASSERT_FALSE(grant.ok());
  EXPECT_NE(grant.error().message.find("more than a day"), std::string::npos);
}

TEST(JobCodec, OversizedBodiesAndNamesAreRejected) {
  DecodeError reason = DecodeError::kMalformed;
  const std::string big(kMaxJobBodyBytes + 1, '\x90');
  EXPECT_FALSE(decode_job(MsgType::kJobKeepalive, big, &reason).ok());
  EXPECT_EQ(reason, DecodeError::kOversized);
  EXPECT_FALSE(decode_lease(MsgType::kLeaseRequest, big, &reason).ok());
  EXPECT_EQ(reason, DecodeError::kOversized);
  // A name over the limit.
  const JobMessage m =
      JobKeepalive{JobRoundRef{std::string(wire::kMaxNameBytes + 1, 'x'), 1, 1}, 0};
  EXPECT_FALSE(decode_job(MsgType::kJobKeepalive, encode_job(m)).ok());
}

TEST(JobCodec, EveryTruncationIsRejected) {
  for (const JobMessage& m : job_samples()) {
    const std::string bytes = encode_job(m);
    for (std::size_t n = 0; n < bytes.size(); ++n) {
      EXPECT_FALSE(decode_job(job_message_type(m), bytes.substr(0, n)).ok()) << n;
    }
  }
  for (const LeaseMessage& m : lease_samples()) {
    const std::string bytes = encode_lease(m);
    for (std::size_t n = 0; n < bytes.size(); ++n) {
      EXPECT_FALSE(decode_lease(lease_message_type(m), bytes.substr(0, n)).ok()) << n;
    }
  }
}

TEST(JobCodec, RandomByteFlipsNeverCrashAndDecodedValuesRoundTrip) {
  std::mt19937_64 rng(4);
  int decoded = 0;
  for (int i = 0; i < 20000; ++i) {
    const bool job = (i % 2) == 0;
    std::string bytes;
    MsgType type;
    if (job) {
      const auto samples = job_samples();
      const JobMessage& m = samples[rng() % samples.size()];
      bytes = encode_job(m);
      type = job_message_type(m);
    } else {
      const auto samples = lease_samples();
      const LeaseMessage& m = samples[rng() % samples.size()];
      bytes = encode_lease(m);
      type = lease_message_type(m);
    }
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      bytes[rng() % bytes.size()] = static_cast<char>(rng() & 0xff);
    }
    if (job) {
      const auto r = decode_job(type, bytes);
      if (r.ok()) {
        ++decoded;
        const auto again = decode_job(job_message_type(*r), encode_job(*r));
        ASSERT_OK(again);
        EXPECT_EQ(*again, *r);
      }
    } else {
      const auto r = decode_lease(type, bytes);
      if (r.ok()) {
        ++decoded;
        const auto again = decode_lease(lease_message_type(*r), encode_lease(*r));
        ASSERT_OK(again);
        EXPECT_EQ(*again, *r);
      }
    }
  }
  EXPECT_GT(decoded, 0);
}

}  // namespace
}  // namespace elastic::rendezvous
