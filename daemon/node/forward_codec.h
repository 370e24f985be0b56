// The wire bodies of client requests that a daemon forwards to the Raft leader (message types
// kForwardRequest / kForwardReply), map-encoded MessagePack like every body (STYLE.md rule 5).
//
//   ForwardRequest: i id, v verb, a args (the control request's JSON text), u uid, g gid,
//                   ad admin, s call (the origin's call id)                    (all required)
//   ForwardReply:   i id, o outcome (0 ok, 1 error, 2 redirect), b body (the control reply's
//                   JSON on ok, the error sentence on error), l leader (name or "") (required)
//
// The leader names a forwarded request's client session "<sender>/<generation>/<call>" from the
// authenticated envelope, so a daemon cannot act under another's id, and the origin's retries
// of one call (same call id) are applied once. Decoding never throws;
// hostile bytes give an Error. Thread safety: pure functions on values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/core/result.h"

namespace elastic::node {

// Arguments of one request are small (a job spec); replies may carry a job list.
inline constexpr std::size_t kMaxForwardArgsBytes = 256 * 1024;
inline constexpr std::size_t kMaxForwardBodyBytes = 16 * 1024 * 1024;

struct ForwardRequest {
  std::uint64_t id = 0;
  std::string verb;
  std::string args;
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
  bool admin = false;
  std::uint64_t client_seq = 0;
  bool operator==(const ForwardRequest&) const = default;
};

// kDenied: a refusal for lack of rights (the client exits 77); kError: any other refusal.
enum class ForwardOutcome : std::uint8_t { kOk = 0, kError = 1, kRedirect = 2, kDenied = 3 };

struct ForwardReply {
  std::uint64_t id = 0;
  ForwardOutcome outcome = ForwardOutcome::kOk;
  std::string body;
  std::string leader;
  bool operator==(const ForwardReply&) const = default;
};

std::string encode_forward(const ForwardRequest& request);
std::string encode_forward(const ForwardReply& reply);
Result<ForwardRequest> decode_forward_request(std::string_view body);
Result<ForwardReply> decode_forward_reply(std::string_view body);

}  // namespace elastic::node
