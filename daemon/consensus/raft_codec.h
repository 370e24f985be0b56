// The wire encoding of Raft messages: consensus::Message <-> the body of a wire::Envelope.
//
// Layering: daemon/wire knows nothing of consensus types; this codec lives in the consensus
// library and lists its fields for the internal schema codec of daemon/wire/msgpack_schema.h,
// so Raft bodies are packed and checked exactly like membership bodies (map-encoded MessagePack
// with short keys; unknown keys ignored; missing required keys, wrong types, out-of-range numbers
// and enums, over-limit sizes and trailing bytes rejected). The envelope carries the sender's name
// and address; the body carries the Raft node ids so the receiver can check `to` against itself.
//   every body:     fr from, to to                                             (required)
//   VoteRequest:    pv pre_vote, t term, li last_log_index, lt last_log_term   (required)
//   VoteReply:      pv pre_vote, t term, ok granted                            (required)
//   AppendEntries:  t term, pi prev_log_index, pt prev_log_term, c leader_commit,
//                   e entries (array of Entry)                                 (required)
//                   rs read_round                              (optional, absent = 0)
//   Entry:          t term, i index, y type (0 no-op, 1 command), d data (bin) (required)
//   AppendReply:    t term, ok success, m match_index, ci conflict_index, ct conflict_term
//                                                                              (required)
//                   rs read_round (the echo)                   (optional, absent = 0)
//   InstallSnapshot: t term, li last_index, lt last_term, v voters (array of uint, 1 to
//                   kMaxVoters distinct non-zero ids), d data (bin, <= kMaxSnapshotBytes)
//                                                                              (required)
//   InstallSnapshotReply: t term, m match_index                                (required)
// Entry type 2 (kConfig) must carry a valid encode_voters() list in d, so Raft can trust it.
// Every field is required (a defaulted pre_vote or success would silently change meaning) but
// those added later, marked optional: a peer of an older version does not send them, and their
// 0 is safe (read_round 0 confirms no read; raft.h READ INDEX).
//
// Hostile bytes: decoding never throws, never crashes and allocates at most a bounded multiple
// of the input (entry data references the input until it is copied into its Entry).
//
// Thread safety: pure functions on values; call from any thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "daemon/consensus/raft.h"
#include "daemon/core/result.h"
#include "daemon/wire/codec.h"
#include "daemon/wire/messages.h"

namespace elastic::consensus {

// Limits on a decoded AppendEntries, whatever the envelope's size limit allows. Too many
// entries, a too-large entry or too many bytes in all are kOversized. The encoder does not
// enforce them: the leader must batch below them (see fits_raft_limits).
inline constexpr std::size_t kMaxRaftEntriesPerMessage = 65'536;
inline constexpr std::size_t kMaxRaftEntryBytes = 16 * 1024 * 1024;
inline constexpr std::size_t kMaxRaftEntriesTotalBytes = 48 * 1024 * 1024;
// MessagePack values one entry may take in the decode budget (wire/codec.h): a map of 4 keys is
// 9, the rest is room for keys a newer peer adds.
inline constexpr std::size_t kValuesPerEntry = 16;

// True when `message` decodes on the receiving side: its entries are within the limits above.
// An InstallSnapshot fits when its data is within kMaxSnapshotBytes (raft.h) and it has at most
// kMaxVoters voters; the whole message then stays below the transport's 64 MiB default.
bool fits_raft_limits(const Message& message);

// The wire message type that carries `body` (one of the wire::MsgType::kRaft* types).
wire::MsgType raft_message_type(const MessageBody& body);

// The body bytes of `message`, to put in an Envelope of type raft_message_type(message.body).
std::string encode_raft(const Message& message);

// Decodes the body of an envelope of `type`. A non-Raft type is kMalformed. On failure
// `*reason` (when given) is set to the class of the error.
Result<Message> decode_raft(wire::MsgType type, std::string_view body,
                            wire::DecodeError* reason = nullptr);

}  // namespace elastic::consensus
