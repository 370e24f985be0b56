// The reports a member daemon sends the leader about its rounds (RoundService::on_report): the
// verb of a kForwardRequest (forward_codec.h) and its JSON args, decoded into one typed value
// before the leader acts on any field.
//
//   node_info        {"slots": N}                               worker slots this node offers
//   node_leaving     {"job", "round"}                            this node drains
//   round_ack        {"job", "round"}                            its workers run the round
//   workers_done     {"job", "round"}                            they all exited 0
//   workers_stopped  {"job", "round"}                            they are stopped (incidents)
//   worker_failed    {"job", "round", "detail"?, "rank"?, "at_ms"?}
//   peer_lost        {"job", "round", "peer", "generation", "reason"?, "last_heard_ms"?}
//   progress         {"job", "round", "event", "step", "resumed_from"?, "rank"?}
//   store_port_busy  {"job", "round", "port", "detail"?}       the round's store port is in use
//
// "job" is a non-empty string and "round" a number >= 0 in every report but node_info. Any other
// verb, args that are not a JSON object, a missing required field, a field of the wrong type,
// out of range (slots above rendezvous::kMaxWorkersPerNode) or a string above its bound
// (kMaxReportTextBytes; ids kMaxReportIdBytes) is an Error with one sentence naming the verb and
// the field; unknown fields are ignored. A report comes from another daemon: decoding never
// throws, whatever the bytes (fuzzed in tests/fuzz/control_fuzz.cc).
//
// encode_round_report() writes the args a decoder reads back to the same value.
// Thread safety: pure functions over values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "daemon/core/result.h"

namespace elastic::node {

inline constexpr std::size_t kMaxReportIdBytes = 256;
inline constexpr std::size_t kMaxReportTextBytes = 4096;

enum class ReportKind {
  kNodeInfo,
  kNodeLeaving,
  kRoundAck,
  kWorkersDone,
  kWorkersStopped,
  kWorkerFailed,
  kPeerLost,
  kProgress,
  kStorePortBusy,
};

struct RoundReport {
  ReportKind kind = ReportKind::kRoundAck;
  std::string job;
  std::uint64_t round = 0;
  std::uint32_t slots = 0;                    // node_info
  std::string detail;                         // worker_failed ("" = none given)
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
  bool operator==(const RoundReport&) const = default;
};

std::string_view report_verb(ReportKind kind);
// The kind a verb above names; nullopt for any other verb (a client request, not a report).
std::optional<ReportKind> report_kind(std::string_view verb);

Result<RoundReport> decode_round_report(std::string_view verb, std::string_view args);
std::string encode_round_report(const RoundReport& report);  // the args; the verb is kind's

}  // namespace elastic::node
