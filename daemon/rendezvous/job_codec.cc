#include "daemon/rendezvous/job_codec.h"

#include <chrono>
#include <utility>

#include "daemon/wire/msgpack_map.h"

namespace elastic::rendezvous {
namespace {

using wire::DecodeError;
using wire::MsgType;
using wire::internal::Failure;
using wire::internal::MapReader;
using wire::internal::Packer;
using wire::internal::put_bool;
using wire::internal::put_str;
using wire::internal::put_uint;

// A lease longer than a day is not a lease; it also keeps the nanosecond Duration far from
// overflow.
constexpr std::uint64_t kMaxLeaseMillis = 24ULL * 3600 * 1000;

// ---------------------------------------------------------------------------------------------
// Encoding. Every job body is the round ref (3 keys) plus its own fields.

constexpr std::uint32_t kRefFields = 3;

void put_ref(Packer& p, const JobRoundRef& ref) {
  put_str(p, "j", ref.job);
  put_uint(p, "t", ref.term);
  put_uint(p, "r", ref.round);
}

void pack(Packer& p, const JobKeepalive& m) {
  p.pack_map(kRefFields + 1);
  put_ref(p, m.ref);
  put_uint(p, "p", m.probe);
}
void pack(Packer& p, const JobKeepaliveAck& m) {
  p.pack_map(kRefFields + 1);
  put_ref(p, m.ref);
  put_uint(p, "p", m.probe);
}
void pack(Packer& p, const JobProbeRequest& m) {
  p.pack_map(kRefFields + 3);
  put_ref(p, m.ref);
  put_uint(p, "p", m.probe);
  put_str(p, "n", m.target);
  put_uint(p, "g", m.target_generation);
}
void pack(Packer& p, const JobProbeReply& m) {
  p.pack_map(kRefFields + 4);
  put_ref(p, m.ref);
  put_uint(p, "p", m.probe);
  put_str(p, "n", m.target);
  put_uint(p, "g", m.target_generation);
  put_bool(p, "a", m.alive);
}
void pack(Packer& p, const LeaseRequest& m) {
  p.pack_map(4);
  put_str(p, "n", m.node);
  put_uint(p, "g", m.generation);
  put_uint(p, "i", m.request);
  put_uint(p, "k", m.known_term);
}
void pack(Packer& p, const LeaseGrant& m) {
  p.pack_map(5);
  put_str(p, "n", m.node);
  put_uint(p, "g", m.generation);
  put_uint(p, "i", m.request);
  put_uint(p, "t", m.term);
  const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(m.duration).count();
  put_uint(p, "d", millis < 0 ? 0 : static_cast<std::uint64_t>(millis));
}

// ---------------------------------------------------------------------------------------------
// Decoding

void read_ref(MapReader& r, JobRoundRef* ref) {
  r.str("j", &ref->job);
  r.uint("t", &ref->term);
  r.uint("r", &ref->round);
}

void read(MapReader& r, JobKeepalive* m) {
  read_ref(r, &m->ref);
  r.uint("p", &m->probe);
}
void read(MapReader& r, JobKeepaliveAck* m) {
  read_ref(r, &m->ref);
  r.uint("p", &m->probe);
}
void read(MapReader& r, JobProbeRequest* m) {
  read_ref(r, &m->ref);
  r.uint("p", &m->probe);
  r.str("n", &m->target);
  r.uint("g", &m->target_generation);
}
void read(MapReader& r, JobProbeReply* m) {
  read_ref(r, &m->ref);
  r.uint("p", &m->probe);
  r.str("n", &m->target);
  r.uint("g", &m->target_generation);
  r.boolean("a", &m->alive, wire::internal::Need::kRequired);
}
void read(MapReader& r, LeaseRequest* m) {
  r.str("n", &m->node);
  r.uint("g", &m->generation);
  r.uint("i", &m->request);
  r.uint("k", &m->known_term);
}
void read(MapReader& r, LeaseGrant* m) {
  r.str("n", &m->node);
  r.uint("g", &m->generation);
  r.uint("i", &m->request);
  r.uint("t", &m->term);
  std::uint64_t millis = 0;
  r.uint("d", &millis);
  if (!r.ok()) return;
  if (millis > kMaxLeaseMillis) {
    // Checked before converting: nanoseconds of a hostile value would overflow.
    r.fail("has a lease duration of " + std::to_string(millis) + " ms, more than a day");
    return;
  }
  m->duration = std::chrono::milliseconds(static_cast<std::int64_t>(millis));
}

template <typename Variant, typename T>
Result<Variant> decode_as(std::string_view body, const char* name, DecodeError* reason) {
  const std::string what = std::string("The ") + name + " body";
  Failure failure;
  if (body.size() > kMaxJobBodyBytes) {
    failure = {DecodeError::kOversized, what + " has " + std::to_string(body.size()) +
                                            " bytes, more than the limit of " +
                                            std::to_string(kMaxJobBodyBytes) + "."};
  } else {
    msgpack::object_handle handle;
    if (wire::internal::parse(body, {wire::kMaxFixedValues, 0}, what, &handle, &failure)) {
      MapReader r(handle.get(), what, &failure);
      T typed;
      read(r, &typed);
      if (r.ok()) return Variant{std::move(typed)};
    }
  }
  if (reason != nullptr) *reason = failure.reason;
  return Error{std::move(failure.message)};
}

template <typename Message>
std::string encode_variant(const Message& message) {
  msgpack::sbuffer buffer;
  Packer p(buffer);
  std::visit([&p](const auto& m) { pack(p, m); }, message);
  return std::string(buffer.data(), buffer.size());
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
  };
  return std::visit(Visitor{}, message);
}

bool is_job_type(wire::MsgType type) {
  return type == MsgType::kJobKeepalive || type == MsgType::kJobKeepaliveAck ||
         type == MsgType::kJobProbeRequest || type == MsgType::kJobProbeReply;
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
