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
// Worker output: every rank prefixed "[rank N] ", or one rank raw; --follow keeps reading.
int logs_command(const std::string& socket, const std::string& job,
                 std::optional<std::uint32_t> only_rank, bool follow, bool as_json);
// Writes a CURVE key pair (a node's, or with `client` a remote-control user's); needs no daemon.
int keygen_command(const std::string& dir, const std::string& name, bool client);

}  // namespace elastic::ctl
