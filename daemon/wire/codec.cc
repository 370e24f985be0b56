#include "daemon/wire/codec.h"

#include <type_traits>
#include <utility>

#include "daemon/wire/msgpack_schema.h"

namespace elastic::wire {

// ---------------------------------------------------------------------------------------------
// The schema of every message (daemon/wire/msgpack_schema.h): keys in wire order.

using internal::Items;
using internal::kOptional;
using internal::Like;
using internal::When;

template <typename V, Like<Envelope> M>
void visit_fields(V& v, M& e) {
  v.field("v", e.version);
  v.field("c", e.cluster_id);
  v.field("s", e.sender);
  v.field("g", e.generation);
  v.field("a", e.sender_address);
  v.field("t", e.type);
  v.field("q", e.seq);
  v.field("b", e.body, internal::AsBin{});
  // Both only with a hint, so envelopes without one keep the bytes of daemons before hints.
  const bool hint = !e.leader_hint.empty();
  v.field("lh", e.leader_hint, When{hint});
  v.field("lt", e.leader_term, When{hint});
}

template <typename V, Like<MemberUpdate> M>
void visit_fields(V& v, M& u) {
  v.field("n", u.name);
  v.field("g", u.generation);
  v.field("i", u.incarnation);
  v.field("s", u.state);
  v.field("a", u.address, kOptional);
  v.field("f", u.from, kOptional);
}
void check_fields(internal::MapReader& r, const MemberUpdate& u) {
  if (u.state > MemberState::kLeft) {
    r.fail("has an unknown member state " + std::to_string(static_cast<unsigned>(u.state)));
  }
}

// Piggybacked updates ("u") are optional; a PushPullState's member list ("m") is not.
constexpr Items kUpdates{"member update", kMaxMembers};

template <typename V, Like<Ping> M>
void visit_fields(V& v, M& m) {
  v.field("p", m.probe);
  v.field("t", m.target);
  v.field("tg", m.target_generation);
  v.field("u", m.updates, kOptional, kUpdates);
}
template <typename V, Like<Ack> M>
void visit_fields(V& v, M& m) {
  v.field("p", m.probe);
  v.field("u", m.updates, kOptional, kUpdates);
}
template <typename V, Like<PingReq> M>
void visit_fields(V& v, M& m) {
  v.field("p", m.probe);
  v.field("t", m.target);
  v.field("tg", m.target_generation);
  v.field("ta", m.target_address);
  v.field("w", m.want_nack, kOptional);
  v.field("u", m.updates, kOptional, kUpdates);
}
template <typename V, Like<Nack> M>
void visit_fields(V& v, M& m) {
  v.field("p", m.probe);
}
template <typename V, Like<PushPullDigest> M>
void visit_fields(V& v, M& m) {
  v.field("d", m.digest);
  v.field("m", m.members);
  v.field("r", m.reply, kOptional);
}
template <typename V, Like<PushPullState> M>
void visit_fields(V& v, M& m) {
  v.field("m", m.members, kUpdates);
  v.field("j", m.join, kOptional);
  v.field("r", m.reply, kOptional);
}

namespace {

using internal::Failure;
using internal::MapReader;
using internal::Need;
using internal::Packer;
using internal::parse;

// The envelope's fields through the schema, with its checks run where the header says: the
// version right after "v" and the cluster right after "c" (so their classes win over any later
// problem), and the body's size for its type before "b" is copied.
class EnvelopeReader {
 public:
  EnvelopeReader(MapReader& r, const DecodeLimits& limits, const Envelope& e)
      : r_(r), fields_(r), limits_(limits), e_(e) {}

  template <typename T, typename... Options>
  void field(std::string_view key, T& value, const Options&... options) {
    if (key == "b") check_body_size();
    fields_.field(key, value, options...);
    if (key == "v") check_version();
    if (key == "c") check_cluster();
  }

 private:
  void check_version() {
    if (r_.ok() && e_.version != limits_.protocol_version) {
      r_.fail("has protocol version " + std::to_string(e_.version) + " but this node speaks " +
                  std::to_string(limits_.protocol_version),
              DecodeError::kWrongVersion);
    }
  }
  void check_cluster() {
    if (r_.ok() && e_.cluster_id != limits_.cluster_id) {
      r_.fail("is from cluster '" + e_.cluster_id + "', not '" + limits_.cluster_id + "'",
              DecodeError::kWrongCluster);
    }
  }
  void check_body_size() {
    if (limits_.max_body_bytes == nullptr || !r_.ok()) return;
    const auto type = static_cast<unsigned>(e_.type);
    const std::size_t max_body = limits_.max_body_bytes(e_.type);
    const msgpack::object* body = r_.find("b", Need::kRequired);
    if (body != nullptr && body->type == msgpack::type::BIN && body->via.bin.size > max_body) {
      r_.fail("of type " + std::to_string(type) + " has a " + std::to_string(body->via.bin.size) +
                  "-byte body, more than the limit of " + std::to_string(max_body) +
                  " for that type",
              DecodeError::kOversized);
    }
  }

  MapReader& r_;
  internal::FieldReader fields_;
  const DecodeLimits& limits_;
  const Envelope& e_;
};

template <typename T>
Result<MembershipMessage> decode_as(std::string_view body, const char* name, DecodeError* reason) {
  const std::string what = std::string("The ") + name + " body";
  Failure failure;
  // A PushPullState carries the whole member list; the probes only piggybacked updates.
  constexpr std::size_t updates =
      std::is_same_v<T, PushPullState> ? kMaxMembers : kMaxPiggybackUpdates;
  T message;
  if (internal::decode_fields(
          body, {kMaxFixedValues + updates * kValuesPerUpdate, kMaxUnknownStringBytes}, what,
          &failure, message)) {
    return MembershipMessage(std::move(message));
  }
  if (reason != nullptr) *reason = failure.reason;
  return Error{std::move(failure.message)};
}

}  // namespace

const char* to_string(DecodeError error) {
  switch (error) {
    case DecodeError::kMalformed:
      return "malformed";
    case DecodeError::kOversized:
      return "oversized";
    case DecodeError::kWrongVersion:
      return "wrong_version";
    case DecodeError::kWrongCluster:
      return "wrong_cluster";
  }
  return "unknown";
}

std::string encode_envelope(const Envelope& e) {
  msgpack::sbuffer buffer(64 + e.body.size());
  Packer p(buffer);
  internal::pack_fields(p, e);
  return std::string(buffer.data(), buffer.size());
}

Result<Envelope> decode_envelope(std::string_view bytes, const DecodeLimits& limits,
                                 DecodeError* reason) {
  const std::string what = "The envelope";
  Failure failure;
  auto failed = [&]() -> Result<Envelope> {
    if (reason != nullptr) *reason = failure.reason;
    return Error{std::move(failure.message)};
  };
  if (bytes.size() > limits.max_bytes) {
    failure = {DecodeError::kOversized, "The " + std::to_string(bytes.size()) +
                                            "-byte message exceeds the limit of " +
                                            std::to_string(limits.max_bytes) + " bytes."};
    return failed();
  }
  msgpack::object_handle handle;
  if (!parse(bytes, {kMaxEnvelopeValues, limits.max_bytes}, what, &handle, &failure)) {
    return failed();
  }

  MapReader r(handle.get(), what, &failure);
  Envelope e;
  EnvelopeReader reader(r, limits, e);
  visit_fields(reader, e);
  if (!r.ok()) return failed();
  return e;
}

MsgType message_type(const MembershipMessage& message) {
  struct Visitor {
    MsgType operator()(const Ping&) const { return MsgType::kPing; }
    MsgType operator()(const Ack&) const { return MsgType::kAck; }
    MsgType operator()(const PingReq&) const { return MsgType::kPingReq; }
    MsgType operator()(const Nack&) const { return MsgType::kNack; }
    MsgType operator()(const PushPullDigest&) const { return MsgType::kPushPullDigest; }
    MsgType operator()(const PushPullState&) const { return MsgType::kPushPullState; }
  };
  return std::visit(Visitor{}, message);
}

bool is_membership_type(MsgType type) {
  switch (type) {
    case MsgType::kPing:
    case MsgType::kAck:
    case MsgType::kPingReq:
    case MsgType::kNack:
    case MsgType::kPushPullDigest:
    case MsgType::kPushPullState:
      return true;
    default:
      return false;
  }
}

bool is_raft_type(MsgType type) {
  switch (type) {
    case MsgType::kRaftVoteRequest:
    case MsgType::kRaftVoteReply:
    case MsgType::kRaftAppendEntries:
    case MsgType::kRaftAppendReply:
    case MsgType::kRaftInstallSnapshot:
    case MsgType::kRaftInstallSnapshotReply:
      return true;
    default:
      return false;
  }
}

std::string encode_body(const MembershipMessage& message) {
  msgpack::sbuffer buffer;
  Packer p(buffer);
  std::visit([&p](const auto& m) { internal::pack_fields(p, m); }, message);
  return std::string(buffer.data(), buffer.size());
}

Result<MembershipMessage> decode_membership(MsgType type, std::string_view body,
                                            DecodeError* reason) {
  switch (type) {
    case MsgType::kPing:
      return decode_as<Ping>(body, "Ping", reason);
    case MsgType::kAck:
      return decode_as<Ack>(body, "Ack", reason);
    case MsgType::kPingReq:
      return decode_as<PingReq>(body, "PingReq", reason);
    case MsgType::kNack:
      return decode_as<Nack>(body, "Nack", reason);
    case MsgType::kPushPullDigest:
      return decode_as<PushPullDigest>(body, "PushPullDigest", reason);
    case MsgType::kPushPullState:
      return decode_as<PushPullState>(body, "PushPullState", reason);
    default:
      break;
  }
  if (reason != nullptr) *reason = DecodeError::kMalformed;
  return Error{"Message type " + std::to_string(static_cast<unsigned>(type)) +
               " is not a membership message."};
}

}  // namespace elastic::wire
