// The wire codec: Envelope and membership messages <-> map-encoded MessagePack bytes.
//
// Format (STYLE.md rule 5): every value is a MessagePack map with short string keys, so fields
// can be added. A decoder ignores keys it does not know, fills absent optional fields with the
// struct's default, and rejects missing required keys, wrong types, out-of-range numbers and
// enums, absurd sizes and trailing bytes. The envelope carries the body as `bin`.
//   Envelope:      v version, c cluster id, s sender, g generation, a sender address,
//                  t message type, q seq, b body            (all required)
//   MemberUpdate:  n name, g generation, i incarnation, s state (required); a address, f from
//   Ping:          p probe, t target, tg target generation (required); u updates
//   Ack:           p probe (required); u updates
//   PingReq:       p probe, t target, tg target generation, ta target address (required);
//                  w want_nack (default true), u updates
//   Nack:          p probe (required)
//   PushPullDigest d digest, m members (required); r reply
//   PushPullState  m members (required); j join, r reply
//
// Hostile bytes: decoding never throws, never crashes, and holds at most a fixed budget of
// MessagePack values per message type (msgpack_map.h ParseLimits: about 24 bytes each), however
// many the bytes declare: an envelope kMaxEnvelopeValues, a probe message (Ping, Ack, PingReq,
// Nack, PushPullDigest) kMaxFixedValues plus kMaxPiggybackUpdates updates, a PushPullState
// kMaxMembers updates. An allocation-free scan refuses a message over its budget, or one whose
// declared lengths the bytes cannot hold, before msgpack-c allocates anything; msgpack-c then
// parses with an unpack_limit and its exceptions are caught here; everything after that is
// type-checked object walking that cannot throw. Errors come back as a Result whose sentence
// names the problem, plus a DecodeError class so callers can count drops per reason.
//
// Envelope checks run in this order, so the class is meaningful: size (kOversized), MessagePack
// structure and limits (kMalformed, or kOversized for a limit overflow), protocol version
// (kWrongVersion, checked before anything else in the map so a future version may change the
// rest), cluster id (kWrongCluster), then every other field (kMalformed), then the body's size
// against DecodeLimits::max_body_bytes for its type (kOversized; before the body is copied, so
// a message type that is always small cannot be used to carry 64 MB). The envelope accepts
// any 16-bit message type, so types appended by newer peers reach dispatch; decode_membership
// rejects the types it does not know.
// Every message's fields are listed once (a visit_fields in codec.cc) and one generic encoder
// and decoder are driven by that list (the internal daemon/wire/msgpack_schema.h, on top of the
// bounded parse and MapReader of daemon/wire/msgpack_map.h); the other subsystems' codecs use
// the same two headers.
//
// Thread safety: pure functions on values; call from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/core/result.h"
#include "daemon/wire/messages.h"

namespace elastic::wire {

enum class DecodeError { kMalformed, kOversized, kWrongVersion, kWrongCluster };

// For logs and metric labels: "malformed", "oversized", "wrong_version", "wrong_cluster".
const char* to_string(DecodeError error);

// Limits on what any decoded value may hold, whatever the message size allows.
inline constexpr std::size_t kMaxMembers = 100'000;  // updates / members per message
inline constexpr std::size_t kMaxNameBytes = 1024;   // names, cluster ids, addresses
inline constexpr std::size_t kMaxMapEntries = 1024;  // keys per map, unknown ones included
inline constexpr std::size_t kMaxUnknownStringBytes = 64 * 1024;
inline constexpr std::size_t kMaxDepth = 16;  // nesting, unknown values included

// Value budgets (see the top): what each message can legitimately hold, with room for keys a
// newer peer adds. A member update is 13 values (a map of 6 keys).
inline constexpr std::size_t kMaxEnvelopeValues = 64;      // 10 keys and their values, 21 values
inline constexpr std::size_t kMaxFixedValues = 64;         // any body of fixed fields
inline constexpr std::size_t kValuesPerUpdate = 16;        // one member update
inline constexpr std::size_t kMaxPiggybackUpdates = 1024;  // on one probe (senders put <= 16)

struct DecodeLimits {
  // Bigger inputs are rejected before parsing (matches transport.max_message_bytes).
  std::size_t max_bytes = 64 * 1024 * 1024;
  // The largest body a message of `type` may carry (the daemon's table covers every type:
  // daemon/node/body_limits.h); nullptr = max_bytes for every type.
  std::size_t (*max_body_bytes)(MsgType type) = nullptr;
  // Envelopes of another cluster are kWrongCluster.
  std::string cluster_id;
  // Envelopes of another protocol version are kWrongVersion.
  std::uint32_t protocol_version = kProtocolVersion;
};

std::string encode_envelope(const Envelope& envelope);

// On failure `*reason` (when given) is set to the class of the error.
Result<Envelope> decode_envelope(std::string_view bytes, const DecodeLimits& limits,
                                 DecodeError* reason = nullptr);

// The message type that carries `message`.
MsgType message_type(const MembershipMessage& message);
// True for the membership types (kPing..kPushPullState).
bool is_membership_type(MsgType type);
// True for the Raft types (kRaftVoteRequest..kRaftAppendReply); their bodies are encoded by
// daemon/consensus/raft_codec.h, so this library needs no consensus types.
bool is_raft_type(MsgType type);

// The body bytes of `message`, to put in an Envelope of type message_type(message).
std::string encode_body(const MembershipMessage& message);

// Decodes the body of an envelope of `type`. A non-membership type is kMalformed. The body is
// already bounded by the envelope's limit; element counts are bounded by the constants above.
Result<MembershipMessage> decode_membership(MsgType type, std::string_view body,
                                            DecodeError* reason = nullptr);

}  // namespace elastic::wire
