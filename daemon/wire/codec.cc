#include "daemon/wire/codec.h"

#include <type_traits>
#include <utility>

#include "daemon/wire/msgpack_map.h"

namespace elastic::wire {
namespace {

using internal::Failure;
using internal::MapReader;
using internal::Need;
using internal::Packer;
using internal::parse;
using internal::put_bool;
using internal::put_key;
using internal::put_str;
using internal::put_uint;

// ---------------------------------------------------------------------------------------------
// Encoding

void put_updates(Packer& p, std::string_view key, const std::vector<MemberUpdate>& updates) {
  put_key(p, key);
  p.pack_array(static_cast<std::uint32_t>(updates.size()));
  for (const MemberUpdate& u : updates) {
    p.pack_map(6);
    put_str(p, "n", u.name);
    put_uint(p, "g", u.generation);
    put_uint(p, "i", u.incarnation);
    put_uint(p, "s", static_cast<std::uint64_t>(u.state));
    put_str(p, "a", u.address);
    put_str(p, "f", u.from);
  }
}

void pack_message(Packer& p, const Ping& m) {
  p.pack_map(4);
  put_uint(p, "p", m.probe);
  put_str(p, "t", m.target);
  put_uint(p, "tg", m.target_generation);
  put_updates(p, "u", m.updates);
}
void pack_message(Packer& p, const Ack& m) {
  p.pack_map(2);
  put_uint(p, "p", m.probe);
  put_updates(p, "u", m.updates);
}
void pack_message(Packer& p, const PingReq& m) {
  p.pack_map(6);
  put_uint(p, "p", m.probe);
  put_str(p, "t", m.target);
  put_uint(p, "tg", m.target_generation);
  put_str(p, "ta", m.target_address);
  put_bool(p, "w", m.want_nack);
  put_updates(p, "u", m.updates);
}
void pack_message(Packer& p, const Nack& m) {
  p.pack_map(1);
  put_uint(p, "p", m.probe);
}
void pack_message(Packer& p, const PushPullDigest& m) {
  p.pack_map(3);
  put_uint(p, "d", m.digest);
  put_uint(p, "m", m.members);
  put_bool(p, "r", m.reply);
}
void pack_message(Packer& p, const PushPullState& m) {
  p.pack_map(3);
  put_updates(p, "m", m.members);
  put_bool(p, "j", m.join);
  put_bool(p, "r", m.reply);
}

// ---------------------------------------------------------------------------------------------
// Decoding: parse with limits, then walk the object tree with checks that cannot throw.

void read_updates(MapReader& reader, std::string_view key, std::vector<MemberUpdate>* out,
                  Need need = Need::kOptional) {
  const msgpack::object_array* array = reader.array(key, kMaxMembers, need);
  if (array == nullptr) return;
  // No reserve(): a vector sized from the count would cost ~150 bytes per 1-byte element.
  out->clear();
  for (std::uint32_t i = 0; i < array->size; ++i) {
    MapReader r(array->ptr[i], "member update " + std::to_string(i) + " of " + reader.what(),
                reader.failure());
    MemberUpdate u;
    std::uint8_t state = 0;
    r.str("n", &u.name);
    r.uint("g", &u.generation);
    r.uint("i", &u.incarnation);
    r.uint("s", &state);
    r.str("a", &u.address, Need::kOptional);
    r.str("f", &u.from, Need::kOptional);
    if (r.ok() && state > static_cast<std::uint8_t>(MemberState::kLeft)) {
      r.fail("has an unknown member state " + std::to_string(state));
    }
    if (!r.ok()) {
      reader.mark_failed();
      return;
    }
    u.state = static_cast<MemberState>(state);
    out->push_back(std::move(u));
  }
}

void read_message(MapReader& r, Ping* m) {
  r.uint("p", &m->probe);
  r.str("t", &m->target);
  r.uint("tg", &m->target_generation);
  read_updates(r, "u", &m->updates);
}
void read_message(MapReader& r, Ack* m) {
  r.uint("p", &m->probe);
  read_updates(r, "u", &m->updates);
}
void read_message(MapReader& r, PingReq* m) {
  r.uint("p", &m->probe);
  r.str("t", &m->target);
  r.uint("tg", &m->target_generation);
  r.str("ta", &m->target_address);
  r.boolean("w", &m->want_nack);
  read_updates(r, "u", &m->updates);
}
void read_message(MapReader& r, Nack* m) { r.uint("p", &m->probe); }
void read_message(MapReader& r, PushPullDigest* m) {
  r.uint("d", &m->digest);
  r.uint("m", &m->members);
  r.boolean("r", &m->reply);
}
void read_message(MapReader& r, PushPullState* m) {
  read_updates(r, "m", &m->members, Need::kRequired);
  r.boolean("j", &m->join);
  r.boolean("r", &m->reply);
}

template <typename T>
Result<MembershipMessage> decode_as(std::string_view body, const char* name, DecodeError* reason) {
  const std::string what = std::string("The ") + name + " body";
  Failure failure;
  msgpack::object_handle handle;
  // A PushPullState carries the whole member list; the probes only piggybacked updates.
  constexpr std::size_t updates =
      std::is_same_v<T, PushPullState> ? kMaxMembers : kMaxPiggybackUpdates;
  if (parse(body, {kMaxFixedValues + updates * kValuesPerUpdate, kMaxUnknownStringBytes}, what,
            &handle, &failure)) {
    MapReader r(handle.get(), what, &failure);
    T message;
    read_message(r, &message);
    if (r.ok()) return MembershipMessage(std::move(message));
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
  const bool hint = !e.leader_hint.empty();
  p.pack_map(hint ? 10 : 8);
  put_uint(p, "v", e.version);
  put_str(p, "c", e.cluster_id);
  put_str(p, "s", e.sender);
  put_uint(p, "g", e.generation);
  put_str(p, "a", e.sender_address);
  put_uint(p, "t", static_cast<std::uint64_t>(e.type));
  put_uint(p, "q", e.seq);
  put_key(p, "b");
  p.pack_bin(static_cast<std::uint32_t>(e.body.size()));
  p.pack_bin_body(e.body.data(), static_cast<std::uint32_t>(e.body.size()));
  if (hint) {
    put_str(p, "lh", e.leader_hint);
    put_uint(p, "lt", e.leader_term);
  }
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
  r.uint("v", &e.version);
  if (r.ok() && e.version != limits.protocol_version) {
    r.fail("has protocol version " + std::to_string(e.version) + " but this node speaks " +
               std::to_string(limits.protocol_version),
           DecodeError::kWrongVersion);
  }
  r.str("c", &e.cluster_id);
  if (r.ok() && e.cluster_id != limits.cluster_id) {
    r.fail("is from cluster '" + e.cluster_id + "', not '" + limits.cluster_id + "'",
           DecodeError::kWrongCluster);
  }
  std::uint16_t type = 0;
  r.str("s", &e.sender);
  r.uint("g", &e.generation);
  r.str("a", &e.sender_address);
  r.uint("t", &type);
  r.uint("q", &e.seq);
  if (limits.max_body_bytes != nullptr && r.ok()) {
    const std::size_t max_body = limits.max_body_bytes(static_cast<MsgType>(type));
    const msgpack::object* body = r.find("b", Need::kRequired);
    if (body != nullptr && body->type == msgpack::type::BIN && body->via.bin.size > max_body) {
      r.fail("of type " + std::to_string(type) + " has a " + std::to_string(body->via.bin.size) +
                 "-byte body, more than the limit of " + std::to_string(max_body) +
                 " for that type",
             DecodeError::kOversized);
    }
  }
  r.bin("b", &e.body);
  r.str("lh", &e.leader_hint, Need::kOptional);
  r.uint("lt", &e.leader_term, Need::kOptional);
  if (!r.ok()) return failed();
  e.type = static_cast<MsgType>(type);
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
  std::visit([&p](const auto& m) { pack_message(p, m); }, message);
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
