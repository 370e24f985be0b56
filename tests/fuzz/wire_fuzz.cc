// libFuzzer target for the wire codecs (envelope, membership, Raft, forwarded requests, round
// starts, round reports, the job tier, leases, and the job table's commands): hostile bytes must
// never
// crash, hang or allocate without bound, and anything that decodes must re-encode to bytes that
// decode to the same value. Built with clang++ -fsanitize=fuzzer,address,undefined by
// tests/fuzz/CMakeLists.txt.
// Memory is a property too: ASan's malloc hooks track the live heap, and a
// decoder of a small message type (an envelope, a probe, a vote, a job-tier message) must never
// hold more than a small fixed amount beyond its input, whatever the bytes declare; the seed
// corpus has MessagePack bombs for it.
#include <sanitizer/allocator_interface.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "daemon/consensus/raft_codec.h"
#include "daemon/node/forward_codec.h"
#include "daemon/node/round_codec.h"
#include "daemon/node/round_report.h"
#include "daemon/rendezvous/job_codec.h"
#include "daemon/rendezvous/job_table.h"
#include "daemon/wire/codec.h"
#include "tests/fuzz/wire_fuzz_held.h"

namespace {

using namespace elastic::wire;

constexpr MsgType kTypes[] = {
    MsgType::kPing,           MsgType::kAck,           MsgType::kPingReq,       MsgType::kNack,
    MsgType::kPushPullDigest, MsgType::kPushPullState, MsgType::kControlRequest};
constexpr MsgType kRaftTypes[] = {
    MsgType::kRaftVoteRequest, MsgType::kRaftVoteReply,       MsgType::kRaftAppendEntries,
    MsgType::kRaftAppendReply, MsgType::kRaftInstallSnapshot, MsgType::kRaftInstallSnapshotReply};

[[noreturn]] void property_failed(const char* what) {
  std::fprintf(stderr, "round-trip property failed: %s\n", what);
  std::abort();
}

// The live heap and its peak since the last reset (ASan's hooks; libFuzzer runs one input at a
// time on one thread, but ASan may call the hooks from any).
std::atomic<std::int64_t> live_bytes{0};
std::atomic<std::int64_t> peak_bytes{0};
void on_malloc(const volatile void*, std::size_t size) {
  const std::int64_t now = live_bytes += static_cast<std::int64_t>(size);
  std::int64_t peak = peak_bytes.load();
  while (now > peak && !peak_bytes.compare_exchange_weak(peak, now)) {
  }
}
void on_free(const volatile void* p) {
  live_bytes -= static_cast<std::int64_t>(__sanitizer_get_allocated_size(const_cast<void*>(p)));
}
const bool hooks_installed = __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free) != 0;

// What decoding a small message type may hold beyond a copy of its input: its value budget
// (wire::kMaxFixedValues + kMaxPiggybackUpdates * kValuesPerUpdate values of 24 bytes, under
// 400 KB) and the decoded strings, with room. Without the budgets, a 100 KB bomb held 2.4 MB.
constexpr std::int64_t kSmallDecodeBytes = 2 << 20;

// Runs `decode` and fails if the heap grew by more than `limit` at any moment during it.
template <typename F>
void bounded(const char* what, std::int64_t limit, F&& decode) {
  const std::int64_t base = live_bytes.load();
  peak_bytes = base;
  decode();
  if (hooks_installed && peak_bytes.load() - base > limit) {
    std::fprintf(stderr, "%s held %lld bytes while decoding (limit %lld)\n", what,
                 static_cast<long long>(peak_bytes.load() - base), static_cast<long long>(limit));
    property_failed("a decode held more memory than its budget allows");
  }
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

// The daemon-to-daemon bodies beyond membership and Raft, and the Raft commands of the job
// table (an entry's bytes are as hostile as a message's if a voter's disk lies).
void check_daemon_bodies(std::string_view body) {
  if (auto r = elastic::node::decode_forward_request(body); r.ok()) {
    auto again = elastic::node::decode_forward_request(elastic::node::encode_forward(*r));
    if (!again.ok() || !(*again == *r)) property_failed("forward request round trip");
  }
  if (auto r = elastic::node::decode_forward_reply(body); r.ok()) {
    auto again = elastic::node::decode_forward_reply(elastic::node::encode_forward(*r));
    if (!again.ok() || !(*again == *r)) property_failed("forward reply round trip");
  }
  if (auto r = elastic::node::decode_round_start(body); r.ok()) {
    auto again = elastic::node::decode_round_start(elastic::node::encode_round_start(*r));
    if (!again.ok() || !(again->round == r->round)) property_failed("round start round trip");
  }
  // The delta form, against the round the corpus's delta start was made from (wire_fuzz_corpus.cc).
  static const elastic::node::HeldRound held = fuzz_held_round();
  const auto lookup = [](const std::string&) { return &held; };
  if (auto r = elastic::node::decode_round_start(body, lookup); r.ok()) {
    if (!elastic::node::peek_round_start(body).ok()) property_failed("round start peek");
    auto again = elastic::node::decode_round_start(elastic::node::encode_round_start(*r));
    if (!again.ok() || !(again->round == r->round)) property_failed("delta round start round trip");
  }
  if (auto r = elastic::node::decode_round_report(body); r.ok()) {
    auto again = elastic::node::decode_round_report(elastic::node::encode_round_report(*r));
    if (!again.ok() || !(*again == *r)) property_failed("round report round trip");
  }
  for (MsgType type : {MsgType::kJobKeepalive, MsgType::kJobKeepaliveAck, MsgType::kJobProbeRequest,
                       MsgType::kJobProbeReply, MsgType::kJobLossNotice}) {
    if (auto r = elastic::rendezvous::decode_job(type, body); r.ok()) {
      auto again = elastic::rendezvous::decode_job(type, elastic::rendezvous::encode_job(*r));
      if (!again.ok() || !(*again == *r)) property_failed("job tier round trip");
    }
  }
  for (MsgType type : {MsgType::kLeaseRequest, MsgType::kLeaseGrant}) {
    if (auto r = elastic::rendezvous::decode_lease(type, body); r.ok()) {
      auto again = elastic::rendezvous::decode_lease(type, elastic::rendezvous::encode_lease(*r));
      if (!again.ok() || !(*again == *r)) property_failed("lease round trip");
    }
  }
  if (auto r = elastic::rendezvous::decode_command(body); r.ok()) {
    auto again = elastic::rendezvous::decode_command(elastic::rendezvous::encode_command(*r));
    if (!again.ok() || !(*again == *r)) property_failed("job table command round trip");
    elastic::rendezvous::JobTable table;
    (void)table.apply(1, body);  // the rules must refuse, never crash
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
  // Memory bounds of the small types (the bulk ones may legitimately hold ~24x their input).
  const auto input = static_cast<std::int64_t>(size);
  bounded("the envelope", input + kSmallDecodeBytes, [&] { (void)decode_envelope(bytes, limits); });
  for (MsgType type : {MsgType::kPing, MsgType::kAck, MsgType::kPingReq, MsgType::kNack}) {
    bounded("a probe", input + kSmallDecodeBytes, [&] { (void)decode_membership(type, bytes); });
  }
  bounded("a vote", input + kSmallDecodeBytes,
          [&] { (void)elastic::consensus::decode_raft(MsgType::kRaftVoteRequest, bytes); });
  bounded("a forwarded request", input + kSmallDecodeBytes,
          [&] { (void)elastic::node::decode_forward_request(bytes); });
  bounded("a round report", input + kSmallDecodeBytes,
          [&] { (void)elastic::node::decode_round_report(bytes); });

  for (MsgType type : kTypes) check_membership(type, bytes);
  for (MsgType type : kRaftTypes) check_raft(type, bytes);
  check_daemon_bodies(bytes);
  if (e.ok()) check_daemon_bodies(e->body);
  return 0;
}
