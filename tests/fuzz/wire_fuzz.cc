// libFuzzer target for the wire codecs (envelope, membership, Raft): hostile bytes must never
// crash, hang or allocate without bound, and anything that decodes must re-encode to bytes that
// decode to the same value. Built with clang++ -fsanitize=fuzzer,address,undefined by
// tests/fuzz/CMakeLists.txt.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "daemon/consensus/raft_codec.h"
#include "daemon/wire/codec.h"

namespace {

using namespace elastic::wire;

constexpr MsgType kTypes[] = {
    MsgType::kPing,           MsgType::kAck,           MsgType::kPingReq,       MsgType::kNack,
    MsgType::kPushPullDigest, MsgType::kPushPullState, MsgType::kControlRequest};
constexpr MsgType kRaftTypes[] = {MsgType::kRaftVoteRequest, MsgType::kRaftVoteReply,
                                  MsgType::kRaftAppendEntries, MsgType::kRaftAppendReply};

[[noreturn]] void property_failed(const char* what) {
  std::fprintf(stderr, "round-trip property failed: %s\n", what);
  std::abort();
}

void check_membership(MsgType type, std::string_view body) {
  elastic::Result<MembershipMessage> m = decode_membership(type, body);
  if (!m.ok()) return;
  if (message_type(*m) != type) property_failed("decoded message has another type");
  elastic::Result<MembershipMessage> again = decode_membership(type, encode_body(*m));
  if (!again.ok()) property_failed("re-encoded body does not decode");
  if (!(*again == *m)) property_failed("re-encoded body decodes to another value");
}

// raft.h's structs have no operator==; re-encoding is canonical (fixed key order, uint64 and
// bin widths chosen by value), so equal encodings mean equal values.
void check_raft(MsgType type, std::string_view body) {
  elastic::Result<elastic::consensus::Message> m = elastic::consensus::decode_raft(type, body);
  if (!m.ok()) return;
  if (elastic::consensus::raft_message_type(m->body) != type) {
    property_failed("decoded Raft message has another type");
  }
  const std::string encoded = elastic::consensus::encode_raft(*m);
  elastic::Result<elastic::consensus::Message> again =
      elastic::consensus::decode_raft(type, encoded);
  if (!again.ok()) property_failed("re-encoded Raft body does not decode");
  if (elastic::consensus::encode_raft(*again) != encoded) {
    property_failed("re-encoded Raft body decodes to another value");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  DecodeLimits limits;
  limits.cluster_id = "fuzz";
  limits.max_bytes = 1 << 20;

  elastic::Result<Envelope> e = decode_envelope(bytes, limits);
  if (e.ok()) {
    elastic::Result<Envelope> again = decode_envelope(encode_envelope(*e), limits);
    if (!again.ok()) property_failed("re-encoded envelope does not decode");
    const Envelope& a = *e;
    const Envelope& b = *again;
    if (a.version != b.version || a.cluster_id != b.cluster_id || a.sender != b.sender ||
        a.generation != b.generation || a.sender_address != b.sender_address || a.type != b.type ||
        a.seq != b.seq || a.body != b.body) {
      property_failed("re-encoded envelope decodes to another value");
    }
    check_membership(a.type, a.body);
    check_raft(a.type, a.body);
  }
  for (MsgType type : kTypes) check_membership(type, bytes);
  for (MsgType type : kRaftTypes) check_raft(type, bytes);
  return 0;
}
