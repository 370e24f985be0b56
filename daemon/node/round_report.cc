#include "daemon/node/round_report.h"

#include <nlohmann/json.hpp>

#include <array>
#include <utility>

#include "daemon/control/json_fields.h"
#include "daemon/rendezvous/job_spec.h"

namespace elastic::node {

namespace {

using nlohmann::json;

constexpr std::array<std::pair<ReportKind, std::string_view>, 9> kVerbs = {{
    {ReportKind::kNodeInfo, "node_info"},
    {ReportKind::kNodeLeaving, "node_leaving"},
    {ReportKind::kRoundAck, "round_ack"},
    {ReportKind::kWorkersDone, "workers_done"},
    {ReportKind::kWorkersStopped, "workers_stopped"},
    {ReportKind::kWorkerFailed, "worker_failed"},
    {ReportKind::kPeerLost, "peer_lost"},
    {ReportKind::kProgress, "progress"},
    {ReportKind::kStorePortBusy, "store_port_busy"},
}};

bool is_progress_event(const std::string& event) {
  return event == "step" || event == "checkpoint" || event == "resume";
}

}  // namespace

std::string_view report_verb(ReportKind kind) {
  for (const auto& [k, verb] : kVerbs) {
    if (k == kind) return verb;
  }
  return "unknown";
}

std::optional<ReportKind> report_kind(std::string_view verb) {
  for (const auto& [kind, name] : kVerbs) {
    if (name == verb) return kind;
  }
  return std::nullopt;
}

Result<RoundReport> decode_round_report(std::string_view verb, std::string_view args) {
  const std::optional<ReportKind> kind = report_kind(verb);
  if (!kind) {
    // Bounded: the verb is the sender's text.
    return Error{"\"" + std::string(verb.substr(0, 64)) + "\" is not a round report."};
  }
  RoundReport report;
  report.kind = *kind;
  control::JsonFields fields("The " + std::string(verb) + " report", args);
  if (*kind == ReportKind::kNodeInfo) {
    std::uint64_t slots = 0;
    fields.unsigned_number("slots", /*required=*/true, "worker slots", slots,
                           rendezvous::kMaxWorkersPerNode);
    report.slots = static_cast<std::uint32_t>(slots);
    if (!fields.ok()) return Error{fields.error()};
    return report;
  }
  fields.string("job", /*required=*/true, kMaxReportIdBytes, "a job id", report.job);
  fields.unsigned_number("round", /*required=*/true, "a round", report.round);
  auto optional_unsigned = [&](const char* key, const char* what,
                               std::optional<std::uint64_t>& out) {
    if (!fields.has(key)) return;
    std::uint64_t value = 0;
    fields.unsigned_number(key, /*required=*/true, what, value);
    out = value;
  };
  auto optional_signed = [&](const char* key, const char* what, std::optional<std::int64_t>& out) {
    if (!fields.has(key)) return;
    std::int64_t value = 0;
    fields.signed_number(key, /*required=*/true, what, value);
    out = value;
  };
  switch (*kind) {
    case ReportKind::kWorkerFailed:
      fields.string("detail", /*required=*/false, kMaxReportTextBytes, "what failed",
                    report.detail);
      optional_unsigned("rank", "a rank", report.rank);
      optional_signed("at_ms", "a wall time in ms", report.at_ms);
      break;
    case ReportKind::kPeerLost:
      fields.string("peer", /*required=*/true, kMaxReportIdBytes, "a node name", report.peer);
      fields.unsigned_number("generation", /*required=*/true, "the peer's generation",
                             report.peer_generation);
      fields.string("reason", /*required=*/false, kMaxReportTextBytes, "why", report.reason);
      optional_signed("last_heard_ms", "a wall time in ms", report.last_heard_ms);
      break;
    case ReportKind::kProgress:
      fields.string("event", /*required=*/true, 16, "\"step\", \"checkpoint\" or \"resume\"",
                    report.event);
      if (fields.ok() && !is_progress_event(report.event)) {
        fields.fail(
            "The progress report's \"event\" must be \"step\", \"checkpoint\" or "
            "\"resume\".");
      }
      fields.signed_number("step", /*required=*/true, "a step", report.step);
      if (fields.ok() && report.step < 0) {
        fields.fail("The progress report's \"step\" must not be negative.");
      }
      if (fields.has("resumed_from")) {
        fields.signed_number("resumed_from", /*required=*/true, "a step or -1",
                             report.resumed_from);
      }
      optional_unsigned("rank", "a rank", report.rank);
      break;
    case ReportKind::kStorePortBusy: {
      std::uint64_t port = 0;
      fields.unsigned_number("port", /*required=*/true, "a TCP port", port, 65535);
      if (fields.ok() && port == 0) fields.fail("The store_port_busy report's \"port\" is 0.");
      report.port = static_cast<std::uint16_t>(port);
      fields.string("detail", /*required=*/false, kMaxReportTextBytes, "what holds it",
                    report.detail);
      break;
    }
    default:
      break;
  }
  if (!fields.ok()) return Error{fields.error()};
  return report;
}

std::string encode_round_report(const RoundReport& report) {
  json args = json::object();
  if (report.kind == ReportKind::kNodeInfo) {
    args["slots"] = report.slots;
    return args.dump();
  }
  args["job"] = report.job;
  args["round"] = report.round;
  if (report.rank) args["rank"] = *report.rank;
  switch (report.kind) {
    case ReportKind::kWorkerFailed:
      if (!report.detail.empty()) args["detail"] = report.detail;
      if (report.at_ms) args["at_ms"] = *report.at_ms;
      break;
    case ReportKind::kPeerLost:
      args["peer"] = report.peer;
      args["generation"] = report.peer_generation;
      if (!report.reason.empty()) args["reason"] = report.reason;
      if (report.last_heard_ms) args["last_heard_ms"] = *report.last_heard_ms;
      break;
    case ReportKind::kProgress:
      args["event"] = report.event;
      args["step"] = report.step;
      args["resumed_from"] = report.resumed_from;
      break;
    case ReportKind::kStorePortBusy:
      args["port"] = report.port;
      if (!report.detail.empty()) args["detail"] = report.detail;
      break;
    default:
      break;
  }
  // Names and details are other daemons' and workers' text: invalid UTF-8 is replaced.
  return args.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace elastic::node
