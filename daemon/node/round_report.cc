#include "daemon/node/round_report.h"

#include <array>
#include <limits>
#include <utility>

#include "daemon/rendezvous/job_spec.h"
#include "daemon/rendezvous/msgpack_fields.h"
#include "daemon/wire/msgpack_schema.h"

namespace elastic::node {

using wire::internal::EnumMax;
using wire::internal::Like;
using wire::internal::MapReader;
using wire::internal::MaxBytes;
using wire::internal::Need;
using wire::internal::Packer;
using wire::internal::Via;
using wire::internal::When;

namespace {

constexpr std::array<std::string_view, 10> kNames = {
    "node_info",     "node_leaving", "round_ack", "workers_done",    "workers_stopped",
    "worker_failed", "peer_lost",    "progress",  "store_port_busy", "round_received",
};
static_assert(kNames.size() == static_cast<std::size_t>(kLastReportKind) + 1);

// Wall times and steps are signed (msgpack int), the loss a finite float: the job table's
// converters.
using Signed = rendezvous::internal::Signed64;
using Finite = rendezvous::internal::FiniteFloat;

bool is_progress_event(const std::string& event) {
  return event == "step" || event == "checkpoint" || event == "resume";
}

}  // namespace

// The schema: keys in the order of the header's table. A key is written only when its value
// differs from the default, so what a report of one kind leaves at the defaults costs nothing
// and any decoded value encodes back to itself; check_fields() holds each kind to its own rules.
template <typename V, Like<RoundReport> M>
void visit_fields(V& v, M& m) {
  v.field("k", m.kind, EnumMax{static_cast<std::uint8_t>(kLastReportKind)});
  v.field("j", m.job, MaxBytes{kMaxReportIdBytes});
  v.field("r", m.round);
  v.field("sl", m.slots, When{m.slots != 0});
  v.field("d", m.detail, MaxBytes{kMaxReportTextBytes}, When{!m.detail.empty()});
  v.field("rk", m.rank);
  v.field("at", m.at_ms, Via<Signed>{});
  v.field("p", m.peer, MaxBytes{kMaxReportIdBytes}, When{!m.peer.empty()});
  v.field("g", m.peer_generation, When{m.peer_generation != 0});
  v.field("rs", m.reason, MaxBytes{kMaxReportTextBytes}, When{!m.reason.empty()});
  v.field("lh", m.last_heard_ms, Via<Signed>{});
  v.field("e", m.event, MaxBytes{16}, When{!m.event.empty()});
  v.field("s", m.step, Via<Signed>{}, When{m.step != 0});
  v.field("rf", m.resumed_from, Via<Signed>{}, When{m.resumed_from != -1});
  v.field("pt", m.port, When{m.port != 0});
  v.field("lv", m.live, When{m.live});
  v.field("sm", m.samples, Via<Signed>{});
  v.field("ls", m.loss, Via<Finite>{});
  v.field("pa", m.peers_alive, When{m.peers_alive});
}

void check_fields(MapReader& r, const RoundReport& m) {
  switch (m.kind) {
    case ReportKind::kNodeInfo:
      if (m.slots > rendezvous::kMaxWorkersPerNode) {
        r.fail("offers " + std::to_string(m.slots) + " worker slots, more than " +
               std::to_string(rendezvous::kMaxWorkersPerNode));
      }
      return;
    case ReportKind::kPeerLost:
      if (m.peer.empty()) r.fail("names no lost peer");
      break;
    case ReportKind::kProgress:
      if (!is_progress_event(m.event)) {
        r.fail("has an event other than \"step\", \"checkpoint\" or \"resume\"");
      } else if (m.step < 0) {
        r.fail("has a negative step");
      } else if (m.samples && *m.samples < 0) {
        r.fail("has a negative sample count");
      }
      break;
    case ReportKind::kStorePortBusy:
      if (m.port == 0) r.fail("names port 0");
      break;
    default:
      break;
  }
  if (m.job.empty()) r.fail("names no job");
}

std::string_view report_name(ReportKind kind) {
  const auto index = static_cast<std::size_t>(kind);
  return index < kNames.size() ? kNames[index] : "unknown";
}

RoundReport round_report(ReportKind kind, std::string job, std::uint64_t round) {
  RoundReport report;
  report.kind = kind;
  report.job = std::move(job);
  report.round = round;
  return report;
}

Result<RoundReport> decode_round_report(std::string_view body) {
  wire::internal::Failure failure;
  RoundReport report;
  if (!wire::internal::decode_fields(body, {wire::kMaxFixedValues, kMaxRoundReportBytes},
                                     "The round report", &failure, report)) {
    return Error{std::move(failure.message)};
  }
  return report;
}

std::string encode_round_report(const RoundReport& report) {
  return wire::internal::encode_fields(report);
}

}  // namespace elastic::node
