// The web dashboard's routes: which paths exist, what each serves, and how an /api path becomes
// a control request. Pure (no sockets, no daemon state): the node (node.cc) serves the result
// through its HttpServer (node/http_server.h), the assets are compiled into the binary from
// daemon/dashboard/assets/ (assets.h), and the /api answers come from the control verbs, asked
// as an unprivileged reader (uid of nobody: a job's env stays hidden, as job_service.cc hides it
// from anyone but its owner and admins).
//
// Paths (GET or HEAD; anything else is refused by the server before routing, 405):
//   /                  the cluster page: nodes, state, slots and the jobs holding them, drained,
//                      Raft role and leader
//   /jobs              the jobs page: state, world size, priority, queue position and reason,
//                      restarts, samples/s
//   /job?id=JOB        one job: its rank map, events, incidents, training curves
//   /incidents         every incident as a timeline bar (detect, stop, rendezvous, first step)
//   /log?job=JOB&rank=N[&round=R][&node=NODE]   the tail of one rank's log (the job page links
//                      each rank's)
//   /dashboard.css, /dashboard.js
//   /api/status        the control verbs of the same name, as JSON (control/verbs.h): this
//   /api/nodes         daemon's status and members; the rest go to the Raft leader through
//   /api/jobs          this daemon, as `elasticctl` would
//   /api/job?id=JOB
//   /api/events[?job=JOB][&limit=N]   (events and incidents)
//   /api/drained, /api/voters
//   /api/logs?job=JOB&rank=N[&round=R][&node=NODE]   the last 64 KiB of that rank's log; for
//                      operators only (Route::operator_only): worker output is its job owner's,
//                      so the daemon serves it only behind dashboard.token_file, to the token's
//                      holder as an admin
//   anything else      404
// Query strings on other paths are ignored; an /api argument that does not decode is a 400
// naming it.
//
// Errors: none thrown. Thread safety: pure functions over values; the assets are constants.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace elastic::dashboard {

// The uid and gid the dashboard's reads run as (nobody): never an owner, never an admin.
inline constexpr std::uint32_t kReaderUid = 65534;
inline constexpr std::uint32_t kReaderGid = 65534;

struct Route {
  enum class Kind : std::uint8_t { kNotFound, kAsset, kApi, kBadRequest };
  Kind kind = Kind::kNotFound;
  // kAsset: the body and its Content-Type.
  std::string_view content_type;
  std::string_view body;
  // kApi: the control verb and the whole request as JSON text (control::Request::text).
  std::string verb;
  std::string request;
  // kApi: answered only to an operator (a daemon with dashboard.token_file set; see above).
  bool operator_only = false;
  // kBadRequest: why, in one sentence.
  std::string error;
};

// What `path` (without its query) and `query` name.
Route route(std::string_view path, std::string_view query);

// The HTTP status for a control reply served as /api JSON: 200 for {"ok":true,...} and for a
// refusal the daemon explains ({"ok":false,"error":...}: the page shows the sentence), 502 for a
// body that is not a JSON object (never expected).
int api_status(std::string_view reply);

}  // namespace elastic::dashboard
