#include "daemon/node/body_limits.h"

#include "daemon/consensus/raft.h"
#include "daemon/consensus/raft_codec.h"
#include "daemon/node/forward_codec.h"
#include "daemon/node/round_codec.h"
#include "daemon/node/round_report.h"
#include "daemon/rendezvous/job_codec.h"

namespace elastic::node {
namespace {
// Keys, numbers and names around a body's bulk field.
constexpr std::size_t kEnvelopeOfBulk = 64 * 1024;
}  // namespace

std::size_t max_body_bytes(wire::MsgType type) {
  using wire::MsgType;
  switch (type) {
    case MsgType::kPushPullState:  // the whole member list: the transport's max_message_bytes
      return static_cast<std::size_t>(-1);
    case MsgType::kRaftAppendEntries:
      return consensus::kMaxRaftEntriesTotalBytes + kEnvelopeOfBulk +
             consensus::kMaxRaftEntriesPerMessage * 64;  // per-entry keys and numbers
    case MsgType::kRaftInstallSnapshot:
      return consensus::kMaxSnapshotBytes + kEnvelopeOfBulk;
    case MsgType::kForwardRequest:
      return kMaxForwardArgsBytes + kEnvelopeOfBulk;
    case MsgType::kForwardReply:
      return kMaxForwardBodyBytes + kEnvelopeOfBulk;
    case MsgType::kRoundStart:  // its command and its spec may each be kMaxRoundStartBytes
      return 2 * kMaxRoundStartBytes + kEnvelopeOfBulk;
    case MsgType::kRoundReport:
      return kMaxRoundReportBytes;
    case MsgType::kJobKeepalive:
    case MsgType::kJobKeepaliveAck:
    case MsgType::kJobProbeRequest:
    case MsgType::kJobProbeReply:
    case MsgType::kJobLossNotice:
    case MsgType::kLeaseRequest:
    case MsgType::kLeaseGrant:
      return rendezvous::kMaxJobBodyBytes;
    default:  // probes, votes, replies, and types a newer peer appended
      return kMaxSmallBodyBytes;
  }
}

}  // namespace elastic::node
