// WorkerLogs: where this daemon keeps its workers' output, by job and round, and what it can
// tell about it (the files it holds, the job's owner) to `elasticctl logs`.
//
// Layout under one base directory (spawner.log_root when set, else spawner.log_dir, else
// <node.state_dir>/logs):
//   <base>/<job>/owner                    the uid that submitted the job, one decimal line
//   <base>/<job>/round-<R>/rank-<N>.log   rank N's stdout+stderr in round R (the spawner
//                                         rotates it to rank-<N>.log.1 ...)
//   <base>/<job>/standby-<node>-slot-<S>.log  what a warm job's standby interpreter on that
//                                         node's slot printed before a round took it
//                                         (warm_standbys.h; not listed)
// Every round of every rank keeps its own file, so a round's output (a traceback) survives the
// rounds after it, whichever node ran it. With spawner.log_root on storage every daemon mounts,
// all daemons write under one tree and any of them can serve any file, a dead host's included.
//
// Ownership: the owner file is written (write-temp-then-rename) when a round starts here, so
// the owner check of `elasticctl logs` (owner, root or control.admin_group) holds across a
// daemon restart. An owner file not owned by the daemon's own uid is ignored (nobody else may
// write under base; a forged one must not grant access).
//
// Disk use: when a round of a job starts here, that job's oldest round directories are removed
// until at most `rounds_kept` remain, the new one included (spawner.log_rounds_kept). Several
// daemons sharing a log_root prune the same tree; whatever another already removed is skipped.
//
// Security: paths are built only from a checked job id (is_job_id: the job table's characters,
// no "." or ".."), and from numbers; listing reads only names of that shape, so a request can
// never name a file outside base. The daemon (root) opens these files itself: base is a
// directory of the daemon's configuration, and the workers only ever write through their pipe.
//
// Every file operation goes through the Host it is given (host.h): the real file system in
// elasticd, memory in the simulator and the unit tests.
//
// Errors: start_round() returns a Status the caller logs (a round's workers still start: their
// log files are opened by the spawner, which reports its own failure); the readers treat a
// missing or unreadable entry as absent. Thread safety: none; the node's loop thread owns it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/core/result.h"
#include "daemon/node/host.h"

namespace elastic::node {

// True for a string the job table could have made a job id of: 1..88 bytes of letters,
// digits, '.', '_' and '-', and neither "." nor "..".
bool is_job_id(std::string_view id);

// One rank's log file of one round, as listed.
struct WorkerLogFile {
  std::uint64_t round = 0;
  std::uint32_t rank = 0;
  std::uint64_t size = 0;
  std::int64_t modified_ms = 0;  // wall ms of the last write
};

class WorkerLogs {
 public:
  // `self` (the node name) keeps the temporary files of daemons sharing a log_root apart.
  // `host` must outlive it.
  WorkerLogs(std::string base, int rounds_kept, std::string self, Host& host)
      : base_(std::move(base)), kept_(rounds_kept), self_(std::move(self)), host_(&host) {}

  const std::string& base() const { return base_; }
  // Where the files are (the `logs` verbs read them through it).
  const Host& host() const { return *host_; }

  // <base>/<job>/round-<round>/rank-<rank>.log (`job` must be is_job_id).
  std::string rank_path(const std::string& job, std::uint64_t round, std::uint32_t rank) const;
  // <base>/<job>/standby-<self>-slot-<slot>.log (`job` must be is_job_id).
  std::string standby_path(const std::string& job, std::uint32_t slot) const {
    return base_ + "/" + job + "/standby-" + self_ + "-slot-" + std::to_string(slot) + ".log";
  }

  // A round of `job` (submitted by `uid`) starts on this node: records the owner and removes
  // the job's oldest round directories beyond rounds_kept (counting `round`'s).
  Status start_round(const std::string& job, std::uint64_t round, std::uint32_t uid) const;

  // The job's owner from its owner file, if there is one owned by the daemon's own uid.
  std::optional<std::uint32_t> owner(const std::string& job) const;

  // The current (not rotated) log files of `job`, of one round or of all, by round then rank.
  std::vector<WorkerLogFile> files(const std::string& job,
                                   std::optional<std::uint64_t> round = std::nullopt) const;

 private:
  // The rounds of `job` that have a directory here, ascending.
  std::vector<std::uint64_t> rounds(const std::string& job) const;

  std::string base_;
  int kept_;
  std::string self_;
  Host* host_;
};

}  // namespace elastic::node
