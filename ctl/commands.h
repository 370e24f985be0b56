// elasticctl's commands that talk to a daemon (ctl/main.cc parses the command line and calls
// them): each prints a human table, or the daemon's JSON with as_json, and returns the exit
// code (ctl/main.cc lists them). `socket` is the local daemon's control socket (unused with
// --connect: common.h's remote_daemon).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace elastic::ctl {

int nodes_command(const std::string& socket, bool as_json);
int topology_command(const std::string& socket, bool as_json);
int status_command(const std::string& socket, bool as_json);
int jobs_command(const std::string& socket, bool as_json);
int job_status_command(const std::string& socket, const std::string& id, bool as_json);
int events_command(const std::string& socket, const std::string& job, std::int64_t limit,
                   bool as_json);
// Polls the job until it ends (submit --wait): 0 succeeded, 3 failed, 4 cancelled.
int wait_for_job(const std::string& socket, const std::string& id, bool as_json);
// What `elasticctl logs` shows (ctl/main.cc checks the combinations first).
struct LogsOptions {
  std::optional<std::uint32_t> rank;   // --rank: only this rank
  std::optional<std::uint64_t> round;  // --round: this round's files, from every member daemon
  bool all = false;                    // --all: every round's files, from every member daemon
  bool follow = false;                 // --follow (current round only)
  bool as_json = false;
};
// Worker output. The current round's by default: every rank prefixed "[rank N] ", or one rank
// raw; --follow keeps reading (a rank's old file is finished before its new round's). With
// --round or --all: the files every member daemon lists for the job (log_files; the local
// daemon's list alone when spawner.log_root shares them), each file whole, in round then rank
// order, prefixed "[rank N] " (--round), "[round R rank N] " (--all), raw for --round with
// --rank. A member that is dead or does not answer is named in one warning line on stderr and
// does not change the exit status; --round of a round nobody has logs of exits 1.
int logs_command(const std::string& socket, const std::string& job, const LogsOptions& options);
// Writes a CURVE key pair (a node's, or with `client` a remote-control user's); needs no daemon.
int keygen_command(const std::string& dir, const std::string& name, bool client);

}  // namespace elastic::ctl
