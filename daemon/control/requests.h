// The arguments of the control verbs that take any, as typed values (protocol.h carries a
// request's JSON text; the handlers read their arguments through these decoders only).
//
//   job, cancel      {"job": "<id>"}
//   submit           {"spec": {...}}                     (rendezvous/job_spec.h reads the spec)
//   events           {"job"?: "<id>", "limit"?: 1..}     (no job: every job)
//   voters           {"action"?: "add" | "remove", "node": "<name>" (with an action)}
//   drain, undrain   {"node": "<name>", "reason"?: "<text>"}
//   logs             {"node"?: "<name>", "job": "<id>", "rank": N, "round"?: R, "max_bytes"?: N,
//                     "offset"?: N}                      (no round: the newest round here)
//   log_files        {"node"?: "<name>", "job": "<id>", "round"?: R}   (no round: every round)
//
// A request that is not a JSON object, a missing required field, or a field of the wrong type
// or out of range is an Error with one sentence naming the verb, the field and what it must be,
// e.g. `The events request's "job" must be a string (a job id), not a number.` Unknown fields
// are ignored (protocol.h: fields are only ever added). An empty optional string is the same
// as an absent one.
//
// Errors: the decoders never throw, whatever the bytes (fuzzed in tests/fuzz/control_fuzz.cc).
// Who may run a verb is not decided here (credentials.h and the handlers do, from the peer's
// credentials). Thread safety: pure functions over values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "daemon/core/result.h"

namespace elastic::control {

// Job ids are a job name (64 bytes at most) and a number; node names are host names.
inline constexpr std::size_t kMaxRequestIdBytes = 256;
inline constexpr std::size_t kDefaultEventsLimit = 100;
inline constexpr std::size_t kMaxEventsLimit = 100'000;
inline constexpr std::uint64_t kDefaultLogBytes = 64 * 1024;
inline constexpr std::uint64_t kMaxLogBytes = 1 << 20;

struct JobRequest {  // job, cancel, suspend, resume
  std::string job;
};

struct PriorityRequest {  // priority
  std::string job;
  std::int32_t priority = 0;  // kMinPriority..kMaxPriority is the job table's rule
};

struct SubmitRequest {
  std::string spec;  // the "spec" object as JSON text
};

struct EventsRequest {
  std::string job;  // "" = every job
  std::size_t limit = kDefaultEventsLimit;
};

struct VotersRequest {
  enum class Action { kList, kAdd, kRemove };
  Action action = Action::kList;
  std::string node;  // set with kAdd and kRemove
};

struct DrainRequest {  // drain, undrain
  std::string node;
  std::string reason;
};

struct LogsRequest {
  std::string node;  // "" = the daemon that received the request
  std::string job;
  std::uint64_t rank = 0;
  std::optional<std::uint64_t> round;          // none: the newest round with this rank's log
  std::uint64_t max_bytes = kDefaultLogBytes;  // clamped to 1..kMaxLogBytes
  std::optional<std::uint64_t> offset;         // none: the last max_bytes
};

struct LogFilesRequest {
  std::string node;  // "" = the daemon that received the request
  std::string job;
  std::optional<std::uint64_t> round;  // none: every round
};

// `verb` names the request in error sentences; `text` is the whole request (Request::text).
Result<JobRequest> decode_job_request(std::string_view verb, std::string_view text);
Result<PriorityRequest> decode_priority_request(std::string_view text);
Result<SubmitRequest> decode_submit_request(std::string_view text);
Result<EventsRequest> decode_events_request(std::string_view text);
Result<VotersRequest> decode_voters_request(std::string_view text);
Result<DrainRequest> decode_drain_request(std::string_view verb, std::string_view text);
Result<LogsRequest> decode_logs_request(std::string_view text);
Result<LogFilesRequest> decode_log_files_request(std::string_view text);

}  // namespace elastic::control
