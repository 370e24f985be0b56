// The reports a member daemon sends the leader about its rounds (RoundLeader::on_report), as
// the body of a kRoundReport envelope: one map-encoded struct whose kind says which of the
// fields below it carries. Keys (daemon/wire/msgpack_schema.h), in this order; k, j and r are
// always written, every other key only when its value is not the default (0, "", unset, -1 for
// resumed_from), and an absent one reads as that default:
//
//   k kind, j job, r round                      every report (job "" and round 0 for node_info)
//   sl slots        node_info                   worker slots this node offers
//   d detail        worker_failed, store_port_busy   what failed / what holds the port
//   rk rank         worker_failed, progress
//   at at_ms        worker_failed               when the worker failed (wall ms)
//   p peer, g generation, rs reason             peer_lost
//   lh last_heard_ms  peer_lost                 when the reporter last heard the peer (wall ms)
//   e event, s step, rf resumed_from            progress
//   pt port         store_port_busy             the round's store port, in use on the reporter
//   sm samples      progress                    samples trained on so far (see the field)
//   ls loss         progress                    the newest training loss (a finite float)
//   lv live         round_ack, peer_lost        the reporter's workers of the round re-form in
//                                               place (they speak the worker channel, live)
//   pa peers_alive  worker_failed               every other daemon of the round answered the
//                                               reporter after the failure (see the field)
//
// node_leaving, workers_done, workers_stopped and round_received carry only k, j and r. Wall times
// and steps are signed (msgpack int); everything else is unsigned.
//
// Decoding: an unknown kind, a missing k, j or r, a field of the wrong type, a job that is
// empty (but for node_info), slots above rendezvous::kMaxWorkersPerNode, a peer_lost without a
// peer, a progress event other than "step", "checkpoint" or "resume" or with a negative step or
// sample count, a store_port_busy with port 0, or a string above its bound (kMaxReportTextBytes;
// ids kMaxReportIdBytes) is an Error with one sentence. Unknown keys are ignored; a key of another
// kind is read and left alone (the leader reads only its kind's fields). A report comes from
// another daemon: decoding never throws, whatever the bytes (fuzzed in tests/fuzz/wire_fuzz.cc).
// encode_round_report() writes bytes a decoder reads back to the same value.
// Thread safety: pure functions over values.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "daemon/core/result.h"

namespace elastic::node {

inline constexpr std::size_t kMaxReportIdBytes = 256;
inline constexpr std::size_t kMaxReportTextBytes = 4096;
// A whole report body: its two texts at their bounds and the keys and numbers around them.
inline constexpr std::size_t kMaxRoundReportBytes = 16 * 1024;
// A daemon sends node_info to the leader it believes in when that changes, and again this
// often; a new leader waits this long for a member's slots before it plans without it.
inline constexpr std::chrono::seconds kNodeInfoResend{10};

// Wire numbers: only ever appended.
enum class ReportKind : std::uint8_t {
  kNodeInfo = 0,
  kNodeLeaving = 1,
  kRoundAck = 2,
  kWorkersDone = 3,
  kWorkersStopped = 4,
  kWorkerFailed = 5,
  kPeerLost = 6,
  kProgress = 7,
  kStorePortBusy = 8,
  // The member holds the round's RoundStart (sent for every one it takes part in, resends too,
  // before its workers run): the leader resends the start quickly only to members that have not
  // said so (RoundLeader::send_starts), and sends the next round as a delta to those that did.
  kRoundReceived = 9,
};
inline constexpr ReportKind kLastReportKind = ReportKind::kRoundReceived;

struct RoundReport {
  ReportKind kind = ReportKind::kRoundAck;
  std::string job;
  std::uint64_t round = 0;
  std::uint32_t slots = 0;                    // node_info
  std::string detail;                         // worker_failed, store_port_busy ("" = none)
  std::optional<std::uint64_t> rank;          // worker_failed, progress
  std::optional<std::int64_t> at_ms;          // worker_failed: when the worker failed
  std::string peer;                           // peer_lost
  std::uint64_t peer_generation = 0;          // peer_lost
  std::string reason;                         // peer_lost
  std::optional<std::int64_t> last_heard_ms;  // peer_lost
  std::string event;                          // progress: "step", "checkpoint" or "resume"
  std::int64_t step = 0;                      // progress
  std::int64_t resumed_from = -1;             // progress
  std::uint16_t port = 0;                     // store_port_busy: 1..65535
  // round_ack, peer_lost: every local worker of the round said hello(live) on its channel, so
  // the job's workers re-form in place and publish checkpoints fenced by round (the leader
  // need not wait out a lost member's lease, RoundLeader::plan_job).
  bool live = false;
  // progress "step": samples the whole job trained on as the reporting rank counted them since
  // its process started (only differences within a round mean anything: throughput scaling's
  // samples per second). Unset: the worker does not count them.
  std::optional<std::int64_t> samples;
  // progress "step": the newest training loss the worker reported (finite). Unset: none.
  std::optional<double> loss;
  // worker_failed: every other daemon of the round answered a probe this reporter sent after
  // the worker failed (JobWatch::confirm_peers), so no member is lost and the failure is the
  // worker's own: the leader acts on it at once instead of waiting out the job tier's
  // detection time (RoundLeader::plan_job). Sent as a second report after the first.
  bool peers_alive = false;
  bool operator==(const RoundReport&) const = default;
};

// "round_ack", "worker_failed", ... (logs and tests); "unknown" past the last kind.
std::string_view report_name(ReportKind kind);

// The report of `kind` about `job`'s round `round`, every other field at its default.
RoundReport round_report(ReportKind kind, std::string job, std::uint64_t round);

Result<RoundReport> decode_round_report(std::string_view body);
std::string encode_round_report(const RoundReport& report);

}  // namespace elastic::node
