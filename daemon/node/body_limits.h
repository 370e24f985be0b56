// The largest body each daemon-to-daemon message type may carry, for the transport to check on
// the envelope before a body is copied or parsed (wire::DecodeLimits::max_body_bytes).
//
// Why here: daemon/wire knows the message types but none of the subsystems' limits; the node
// links every codec, so this one table takes each limit from the codec that enforces it. A type
// that is always small (a probe, a vote, a keepalive) cannot then be used to carry 64 MB; only
// the types that legitimately carry bulk (PushPullState, AppendEntries, InstallSnapshot, the
// forwarded reply) get more than kMaxSmallBodyBytes. Types this daemon does not know (appended
// by a newer peer) get kMaxSmallBodyBytes: it cannot decode them anyway.
//
// Thread safety: a pure function.
#pragma once

#include <cstddef>

#include "daemon/wire/messages.h"

namespace elastic::node {

// Membership probes carry at most ~1 KiB of piggybacked updates; votes, acks, the job tier and
// leases a few names and numbers.
inline constexpr std::size_t kMaxSmallBodyBytes = 64 * 1024;

std::size_t max_body_bytes(wire::MsgType type);

}  // namespace elastic::node
