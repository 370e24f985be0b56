// The node verbs of worker logs (control/verbs.h, Route::kNode), answered by the daemon the
// request names, from its own WorkerLogs (worker_logs.h), for a local client or forwarded from
// another daemon:
//   logs       {job, rank, round?, max_bytes?, offset?}: max_bytes of one rank's log file of
//              one round (no round: the newest round with a file for that rank here), from
//              offset (none: the last max_bytes). Reply {ok, node, job, rank, round, path,
//              offset (where the next read starts), size, rotated (offset was past the end:
//              read from 0), data}.
//   log_files  {job, round?}: the rank log files this node holds for the job (one round or
//              every round). Reply {ok, node, job, shared (spawner.log_root is set: the files
//              are every daemon's), files: [{round, rank, size, modified_ms}] by round then rank,
//              truncated (more than kMaxListedFiles)}.
// Requests are decoded by control/requests.h; the job id must be one the job table could make
// (worker_logs.h's is_job_id) and the rank in range, so no request can name a path outside the
// daemon's log directory. Who may read: logs hold whatever the workers print, so a job's own
// user (its owner file or the rounds this daemon ran), root and control.admin_group; anyone
// else is refused with *denied set. A node that holds nothing of the job says so to anyone
// (an empty list, or "has no log"), so asking every member never fails for want of rights.
//
// Errors: a Result with one sentence. Thread safety: the node's loop thread (it reads files,
// through the Host of the supervisor's WorkerLogs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "daemon/core/result.h"
#include "daemon/node/job_supervisor.h"

namespace elastic::node {

inline constexpr std::size_t kMaxListedFiles = 100'000;

// Who asks: the caller's uid and whether it is an admin (root or control.admin_group).
struct LogCaller {
  std::uint32_t uid = 0;
  bool admin = false;
};

// The daemon a "logs" or "log_files" request names ("" = the one that received it), or the
// request's decoding error.
Result<std::string> worker_log_verb_node(const std::string& verb, const std::string& args);

// `verb` is "logs" or "log_files"; `node` is this daemon's name (in replies and sentences).
Result<std::string> serve_worker_log_verb(const std::string& verb, const std::string& args,
                                          const JobSupervisor& supervisor, const std::string& node,
                                          bool shared, LogCaller caller, bool* denied);

}  // namespace elastic::node
