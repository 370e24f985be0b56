#include "daemon/rendezvous/job_codec.h"

#include <chrono>
#include <utility>

#include "daemon/wire/msgpack_schema.h"

namespace elastic::rendezvous {

using wire::internal::Like;
using wire::internal::MapReader;
using wire::internal::Need;
using wire::internal::Packer;
using wire::internal::Via;

// ---------------------------------------------------------------------------------------------
// The schema (daemon/wire/msgpack_schema.h): keys in wire order. Every field is required.

namespace {

// A lease longer than a day is not a lease; it also keeps the nanosecond Duration far from
// overflow.
constexpr std::uint64_t kMaxLeaseMillis = 24ULL * 3600 * 1000;

// A lease duration in whole milliseconds.
struct LeaseMillis {
  static void pack(Packer& p, Duration duration) {
    const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(duration).count();
    p.pack_uint64(millis < 0 ? 0 : static_cast<std::uint64_t>(millis));
  }
  static void read(MapReader& r, std::string_view key, Need need, Duration* out) {
    std::uint64_t millis = 0;
    r.uint(key, &millis, need);
    if (!r.ok()) return;
    if (millis > kMaxLeaseMillis) {
      // Checked before converting: nanoseconds of a hostile value would overflow.
      r.fail("has a lease duration of " + std::to_string(millis) + " ms, more than a day");
      return;
    }
    *out = std::chrono::milliseconds(static_cast<std::int64_t>(millis));
  }
};

}  // namespace

// Every job message starts with the round it is about.
template <typename V, Like<JobRoundRef> M>
void visit_fields(V& v, M& ref) {
  v.field("j", ref.job);
  v.field("t", ref.term);
  v.field("r", ref.round);
}
template <typename V, Like<JobKeepalive> M>
void visit_fields(V& v, M& m) {
  visit_fields(v, m.ref);
  v.field("p", m.probe);
}
template <typename V, Like<JobKeepaliveAck> M>
void visit_fields(V& v, M& m) {
  visit_fields(v, m.ref);
  v.field("p", m.probe);
}
template <typename V, Like<JobProbeRequest> M>
void visit_fields(V& v, M& m) {
  visit_fields(v, m.ref);
  v.field("p", m.probe);
  v.field("n", m.target);
  v.field("g", m.target_generation);
}
template <typename V, Like<JobProbeReply> M>
void visit_fields(V& v, M& m) {
  visit_fields(v, m.ref);
  v.field("p", m.probe);
  v.field("n", m.target);
  v.field("g", m.target_generation);
  v.field("a", m.alive);
}
template <typename V, Like<JobLossNotice> M>
void visit_fields(V& v, M& m) {
  visit_fields(v, m.ref);
  v.field("n", m.target);
  v.field("g", m.target_generation);
}
template <typename V, Like<LeaseRequest> M>
void visit_fields(V& v, M& m) {
  v.field("n", m.node);
  v.field("g", m.generation);
  v.field("i", m.request);
  v.field("k", m.known_term);
}
template <typename V, Like<LeaseGrant> M>
void visit_fields(V& v, M& m) {
  v.field("n", m.node);
  v.field("g", m.generation);
  v.field("i", m.request);
  v.field("t", m.term);
  v.field("d", m.duration, Via<LeaseMillis>{});
}

namespace {

using wire::DecodeError;
using wire::MsgType;
using wire::internal::Failure;

template <typename Variant, typename T>
Result<Variant> decode_as(std::string_view body, const char* name, DecodeError* reason) {
  const std::string what = std::string("The ") + name + " body";
  Failure failure;
  if (body.size() > kMaxJobBodyBytes) {
    failure = {DecodeError::kOversized, what + " has " + std::to_string(body.size()) +
                                            " bytes, more than the limit of " +
                                            std::to_string(kMaxJobBodyBytes) + "."};
  } else {
    T typed;
    if (wire::internal::decode_fields(body, {wire::kMaxFixedValues, 0}, what, &failure, typed)) {
      return Variant{std::move(typed)};
    }
  }
  if (reason != nullptr) *reason = failure.reason;
  return Error{std::move(failure.message)};
}

template <typename Message>
std::string encode_variant(const Message& message) {
  return std::visit([](const auto& m) { return wire::internal::encode_fields(m); }, message);
}

template <typename T>
Result<T> not_of_kind(MsgType type, const char* kind, DecodeError* reason) {
  if (reason != nullptr) *reason = DecodeError::kMalformed;
  return Error{"Message type " + std::to_string(static_cast<unsigned>(type)) + " is not a " + kind +
               " message."};
}

}  // namespace

wire::MsgType job_message_type(const JobMessage& message) {
  struct Visitor {
    MsgType operator()(const JobKeepalive&) const { return MsgType::kJobKeepalive; }
    MsgType operator()(const JobKeepaliveAck&) const { return MsgType::kJobKeepaliveAck; }
    MsgType operator()(const JobProbeRequest&) const { return MsgType::kJobProbeRequest; }
    MsgType operator()(const JobProbeReply&) const { return MsgType::kJobProbeReply; }
    MsgType operator()(const JobLossNotice&) const { return MsgType::kJobLossNotice; }
  };
  return std::visit(Visitor{}, message);
}

bool is_job_type(wire::MsgType type) {
  return type == MsgType::kJobKeepalive || type == MsgType::kJobKeepaliveAck ||
         type == MsgType::kJobProbeRequest || type == MsgType::kJobProbeReply ||
         type == MsgType::kJobLossNotice;
}

std::string encode_job(const JobMessage& message) { return encode_variant(message); }

Result<JobMessage> decode_job(wire::MsgType type, std::string_view body, DecodeError* reason) {
  switch (type) {
    case MsgType::kJobKeepalive:
      return decode_as<JobMessage, JobKeepalive>(body, "JobKeepalive", reason);
    case MsgType::kJobKeepaliveAck:
      return decode_as<JobMessage, JobKeepaliveAck>(body, "JobKeepaliveAck", reason);
    case MsgType::kJobProbeRequest:
      return decode_as<JobMessage, JobProbeRequest>(body, "JobProbeRequest", reason);
    case MsgType::kJobProbeReply:
      return decode_as<JobMessage, JobProbeReply>(body, "JobProbeReply", reason);
    case MsgType::kJobLossNotice:
      return decode_as<JobMessage, JobLossNotice>(body, "JobLossNotice", reason);
    default:
      break;
  }
  return not_of_kind<JobMessage>(type, "job-tier", reason);
}

wire::MsgType lease_message_type(const LeaseMessage& message) {
  return std::holds_alternative<LeaseRequest>(message) ? MsgType::kLeaseRequest
                                                       : MsgType::kLeaseGrant;
}

bool is_lease_type(wire::MsgType type) {
  return type == MsgType::kLeaseRequest || type == MsgType::kLeaseGrant;
}

std::string encode_lease(const LeaseMessage& message) { return encode_variant(message); }

Result<LeaseMessage> decode_lease(wire::MsgType type, std::string_view body, DecodeError* reason) {
  switch (type) {
    case MsgType::kLeaseRequest:
      return decode_as<LeaseMessage, LeaseRequest>(body, "LeaseRequest", reason);
    case MsgType::kLeaseGrant:
      return decode_as<LeaseMessage, LeaseGrant>(body, "LeaseGrant", reason);
    default:
      break;
  }
  return not_of_kind<LeaseMessage>(type, "lease", reason);
}

}  // namespace elastic::rendezvous
