#include "daemon/control/requests.h"

#include <algorithm>
#include <limits>

#include "daemon/control/json_fields.h"
#include "daemon/control/protocol.h"

namespace elastic::control {

namespace {

// Every decoder reads with this: fields name the request ("The events request's ...").
class Fields : public JsonFields {
 public:
  Fields(std::string_view verb, std::string_view text)
      : JsonFields("The " + std::string(verb) + " request", text) {}
};

// The optional "round" of the logs verbs: a round number.
std::optional<std::uint64_t> optional_round(Fields& fields) {
  if (!fields.has("round")) return std::nullopt;
  std::uint64_t round = 0;
  fields.unsigned_number("round", /*required=*/true, "a round number", round);
  return round;
}

}  // namespace

Result<JobRequest> decode_job_request(std::string_view verb, std::string_view text) {
  Fields fields(verb, text);
  JobRequest request;
  fields.string("job", /*required=*/true, kMaxRequestIdBytes, "a job id", request.job);
  if (!fields.ok()) return Error{fields.error()};
  return request;
}

Result<PriorityRequest> decode_priority_request(std::string_view text) {
  Fields fields("priority", text);
  PriorityRequest request;
  fields.string("job", /*required=*/true, kMaxRequestIdBytes, "a job id", request.job);
  std::int64_t priority = 0;
  fields.signed_number("priority", /*required=*/true, "the job's new priority", priority);
  if (fields.ok() && (priority < std::numeric_limits<std::int32_t>::min() ||
                      priority > std::numeric_limits<std::int32_t>::max())) {
    fields.fail("The \"priority\" request's \"priority\" " + std::to_string(priority) +
                " is out of range.");
  }
  if (!fields.ok()) return Error{fields.error()};
  request.priority = static_cast<std::int32_t>(priority);
  return request;
}

Result<SubmitRequest> decode_submit_request(std::string_view text) {
  Fields fields("submit", text);
  SubmitRequest request;
  fields.object("spec", "the job spec", request.spec);
  if (!fields.ok()) return Error{fields.error()};
  return request;
}

Result<EventsRequest> decode_events_request(std::string_view text) {
  Fields fields("events", text);
  EventsRequest request;
  fields.string("job", /*required=*/false, kMaxRequestIdBytes, "a job id", request.job);
  std::uint64_t limit = kDefaultEventsLimit;
  fields.unsigned_number("limit", /*required=*/false, "how many events", limit);
  if (!fields.ok()) return Error{fields.error()};
  // Asking for more than there can be is not an error: the reply holds what there is.
  request.limit = static_cast<std::size_t>(std::clamp<std::uint64_t>(limit, 1, kMaxEventsLimit));
  return request;
}

Result<VotersRequest> decode_voters_request(std::string_view text) {
  Fields fields("voters", text);
  VotersRequest request;
  std::string action;
  fields.string("action", /*required=*/false, 16, "\"add\" or \"remove\"", action);
  if (fields.ok() && !action.empty()) {
    if (action == "add") {
      request.action = VotersRequest::Action::kAdd;
    } else if (action == "remove") {
      request.action = VotersRequest::Action::kRemove;
    } else {
      fields.fail("The voters request's \"action\" must be \"add\" or \"remove\", not \"" + action +
                  "\".");
    }
  }
  if (request.action != VotersRequest::Action::kList) {
    fields.string("node", /*required=*/true, kMaxRequestIdBytes, "a node name", request.node);
  }
  if (!fields.ok()) return Error{fields.error()};
  return request;
}

Result<DrainRequest> decode_drain_request(std::string_view verb, std::string_view text) {
  Fields fields(verb, text);
  DrainRequest request;
  fields.string("node", /*required=*/true, kMaxRequestIdBytes, "a node name", request.node);
  // Bounded by the frame (kMaxRequestBytes); the job table refuses reasons above its own limit
  // with a sentence of its own.
  fields.string("reason", /*required=*/false, kMaxRequestBytes, "why", request.reason);
  if (!fields.ok()) return Error{fields.error()};
  return request;
}

Result<LogsRequest> decode_logs_request(std::string_view text) {
  Fields fields("logs", text);
  LogsRequest request;
  fields.string("node", /*required=*/false, kMaxRequestIdBytes, "a node name", request.node);
  fields.string("job", /*required=*/true, kMaxRequestIdBytes, "a job id", request.job);
  fields.unsigned_number("rank", /*required=*/true, "a rank", request.rank);
  request.round = optional_round(fields);
  fields.unsigned_number("max_bytes", /*required=*/false, "how many bytes", request.max_bytes);
  if (fields.has("offset")) {
    std::uint64_t offset = 0;
    fields.unsigned_number("offset", /*required=*/true, "a byte offset", offset);
    request.offset = offset;
  }
  if (!fields.ok()) return Error{fields.error()};
  request.max_bytes = std::clamp<std::uint64_t>(request.max_bytes, 1, kMaxLogBytes);
  return request;
}

Result<LogFilesRequest> decode_log_files_request(std::string_view text) {
  Fields fields("log_files", text);
  LogFilesRequest request;
  fields.string("node", /*required=*/false, kMaxRequestIdBytes, "a node name", request.node);
  fields.string("job", /*required=*/true, kMaxRequestIdBytes, "a job id", request.job);
  request.round = optional_round(fields);
  if (!fields.ok()) return Error{fields.error()};
  return request;
}

}  // namespace elastic::control
