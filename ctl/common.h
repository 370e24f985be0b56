// elasticctl's shared parts: exit codes and timeouts, JSON access that never throws (replies
// are decoded defensively), table printing, and asking the daemon (the local control socket,
// or with --connect a remote daemon over CURVE), once or patiently across a daemon restart.
// The verbs are in one file per family (ctl/main.cc lists them in --help's order).
// Thread safety: none (one thread). Errors: ask() returns an Answer with the exit code and the
// sentence to print.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "ctl/job_file.h"
#include "daemon/config/config.h"
#include "daemon/control/client.h"
#include "daemon/control/protocol.h"
#include "daemon/rendezvous/job_spec.h"
#include "daemon/transport/control_client.h"
#include "daemon/transport/curve_keys.h"
#include "elastic/version.h"

namespace elastic::ctl {

namespace cfg = elastic::config;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

inline constexpr int kExitRefused = 1;
inline constexpr int kExitJobFailed = 3;
inline constexpr int kExitJobCancelled = 4;
inline constexpr int kExitSoftware = 70;      // EX_SOFTWARE
inline constexpr int kExitCantCreate = 73;    // EX_CANTCREAT
inline constexpr int kExitNoPermission = 77;  // EX_NOPERM

inline constexpr milliseconds kLocalTimeout{5000};
// Job verbs may wait for a leader election and a commit (the daemon gives up after 10 s).
inline constexpr milliseconds kLeaderTimeout{15000};
// --wait and --follow poll this often: fast enough to feel live, cheap for the leader.
inline constexpr milliseconds kPollInterval{300};
// How long --wait/--follow keep retrying a daemon that stopped answering: a local daemon
// restart or a leader election takes seconds, a host without its daemon is gone for good.
inline constexpr std::chrono::seconds kReconnectWindow{60};
inline constexpr std::uint64_t kLogChunk = 64 * 1024;
inline constexpr std::uint64_t kFollowChunk = 256 * 1024;
// --round and --all read whole files in chunks of the most a daemon sends at once.
inline constexpr std::uint64_t kMaxListedChunk = 1 << 20;
// Ranks probed for a job without a current round (its logs outlive the round).
inline constexpr std::uint32_t kMaxDiscoveredRanks = 4096;

struct Answer {
  int code = 0;       // 0, or the exit code for `error`
  json reply;         // the daemon's reply object (also for refusals)
  std::string error;  // the line to print after "elasticctl: "
  bool answered() const { return code == 0 || code == kExitRefused; }
};

std::string str(const json& j, const char* key, std::string fallback = "");
std::int64_t num(const json& j, const char* key, std::int64_t fallback = 0);
double real(const json& j, const char* key, double fallback = 0);
bool flag(const json& j, const char* key, bool fallback = false);
const json& member(const json& j, const char* key);
std::string cell(const json& j, const char* key);
// Pretty JSON for --json output; invalid UTF-8 from a worker's output is replaced, not thrown.
inline std::string dump(const json& j) {
  return j.dump(2, ' ', false, json::error_handler_t::replace);
}

// The job's world size (its current round's ranks) and its member count, from a job object.
std::uint64_t world_of(const json& job);
std::size_t nodes_of(const json& job);

// ---- output helpers ---------------------------------------------------------------------------

std::string host_name();
std::string ago(double ms);
std::string local_time(std::int64_t ms);
// Rows as lines of left-aligned columns two spaces apart (the first row is the header).
std::vector<std::string> format_table(const std::vector<std::vector<std::string>>& rows);
void print_table(const std::vector<std::vector<std::string>>& rows);
bool is_terminal(const std::string& state);
// The --json flag every verb that talks to a daemon takes.
void add_json_flag(CLI::App* command, bool& as_json);
Answer unreachable(const std::string& socket_path, const std::string& detail);
extern std::optional<elastic::transport::RemoteControlClient> remote_daemon;
int refusal_exit_code(const json& reply);
Answer ask(const std::string& socket, const json& request, milliseconds timeout);
int ask_or_report(const std::string& socket, const json& request, milliseconds timeout,
                  json& reply);

// Asks until answered, for loops that must survive a daemon restart or a leader election:
// retries any failure for kReconnectWindow (saying so once), then gives up with its code.
class PatientAsker {
 public:
  // An impatient asker (one-shot commands) returns the first failure as is.
  PatientAsker(std::string socket, bool patient) : socket_(std::move(socket)), patient_(patient) {}

  Answer ask(const json& request) {
    while (true) {
      Answer answer = ctl::ask(socket_, request, kLeaderTimeout);
      // A refusal that is not about availability (unknown job, bad rank) will not heal.
      if (answer.code == 0 || !patient_ ||
          (answer.code == kExitRefused && !transient(answer.error))) {
        if (failing_since_) std::cerr << "elasticctl: the daemon answers again\n";
        failing_since_.reset();
        return answer;
      }
      const auto now = Clock::now();
      if (!failing_since_) {
        failing_since_ = now;
        std::cerr << "elasticctl: " << answer.error << "; retrying for " << kReconnectWindow.count()
                  << "s\n";
      }
      if (now - *failing_since_ >= kReconnectWindow) return answer;
      std::this_thread::sleep_for(kPollInterval);
    }
  }

 private:
  static bool transient(const std::string& error) {
    for (const char* word : {"leader", "Leader", "timed out", "Timed out", "unavailable",
                             "not reachable", "try again"}) {
      if (error.find(word) != std::string::npos) return true;
    }
    return false;
  }

  std::string socket_;
  bool patient_;
  std::optional<Clock::time_point> failing_since_;
};

}  // namespace elastic::ctl
