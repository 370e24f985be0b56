// The wire encoding of the job-tier messages (JobWatch) and the worker-lease messages
// (LeaseHolder / LeaseGranter): rendezvous structs <-> the body of a wire::Envelope.
//
// Layering as daemon/consensus/raft_codec.h: daemon/wire knows nothing of rendezvous types; this
// codec lists its fields for the internal schema codec of daemon/wire/msgpack_schema.h, so these
// bodies are packed and checked exactly like membership bodies (map-encoded MessagePack with short
// keys; unknown keys ignored; missing required keys, wrong types, out-of-range numbers, strings
// over wire::kMaxNameBytes and trailing bytes rejected). Every field is required: a defaulted
// `alive` or `probe` would silently change meaning.
//   round ref (every job message):  j job, t term, r round
//   JobKeepalive:     p probe
//   JobKeepaliveAck:  p probe
//   JobProbeRequest:  p probe, n target, g target generation
//   JobProbeReply:    p probe, n target, g target generation, a alive
//   JobLossNotice:    n target, g target generation
//   LeaseRequest:     n node, g generation, i request, k known term
//   LeaseGrant:       n node, g generation, i request, t term, d duration (milliseconds)
//
// Hostile bytes: decoding never throws or crashes; a body longer than kMaxJobBodyBytes is
// kOversized before parsing, so no decode allocates more than a small bounded amount.
//
// Thread safety: pure functions on values; call from any thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "daemon/core/result.h"
#include "daemon/rendezvous/job_watch.h"
#include "daemon/rendezvous/lease.h"
#include "daemon/wire/codec.h"
#include "daemon/wire/messages.h"

namespace elastic::rendezvous {

// The largest body these messages can have (three names of kMaxNameBytes plus numbers and keys,
// rounded up); anything bigger is hostile or broken.
inline constexpr std::size_t kMaxJobBodyBytes = 4 * 1024;

// kJobKeepalive .. kJobProbeReply, kJobLossNotice.
wire::MsgType job_message_type(const JobMessage& message);
bool is_job_type(wire::MsgType type);
std::string encode_job(const JobMessage& message);
Result<JobMessage> decode_job(wire::MsgType type, std::string_view body,
                              wire::DecodeError* reason = nullptr);

// kLeaseRequest, kLeaseGrant.
wire::MsgType lease_message_type(const LeaseMessage& message);
bool is_lease_type(wire::MsgType type);
std::string encode_lease(const LeaseMessage& message);
Result<LeaseMessage> decode_lease(wire::MsgType type, std::string_view body,
                                  wire::DecodeError* reason = nullptr);

}  // namespace elastic::rendezvous
