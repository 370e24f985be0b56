// elasticctl: the command-line client of elasticd. Every verb talks to the local daemon over
// its control socket (control.socket from the same config file and --set overrides the daemon
// uses; ELASTIC_CONTROL_SOCKET in the environment beats the file's control.socket but not
// --set control.socket); job verbs are forwarded by it to the Raft leader, `logs` to the daemon
// holding the rank. Human tables by default; --json (every verb) prints the daemon's JSON for
// scripts.
//   config                                the effective configuration (no daemon needed)
//   nodes [--topology]                    the member table; --topology: this host's binding plan
//   status [JOB]                          the local daemon (identity, Raft, rounds), or one job
//   jobs                                  every job the leader knows
//   submit [FILE.toml] [flags] [-- CMD..] submit a job (file < flags; prints its id); --wait
//                                         follows it until it ends; --dry-run only prints it
//   cancel JOB                            cancel a job (its owner, root or control.admin_group)
//   events [JOB] [--limit N]              job state changes, cluster events and recovery
//                                         incident timelines, oldest first
//   logs JOB [--rank N] [--follow]        worker output (all ranks prefixed, or one raw)
//   drain NODE [--reason T] / undrain NODE   stop / resume placing new rounds on a node (admins)
//   voters [add|remove NODE]              the Raft voters; change them one at a time (admins)
//   reload                                the local daemon re-reads its config file now and
//                                         says how it went; 78 if it refused the file (admins;
//                                         the systemd unit's ExecReload)
//   keygen --dir DIR [--name N]           a node's CURVE key pair
//   keygen --dir DIR --client USER        a remote control client's key pair
// Remote control (from a login node without a daemon): --connect tcp://HOST:PORT --client-key
// FILE --server-key FILE (or ELASTIC_CONNECT, ELASTIC_CLIENT_KEY, ELASTIC_SERVER_KEY) sends
// every verb to that daemon's control.remote_listen over CURVE; output and exit codes are the
// same, plus 77 when the daemon refuses the client key.
// Job files and their errors: ctl/job_file.h.
//
// Exit codes (sysexits.h where one fits): 0 ok; 1 the daemon refused the request (its sentence
// is printed: unknown job, no leader...); 3 `submit --wait`: the job failed (the
// reason is printed); 4 `submit --wait`: the job was cancelled; 64 bad command line; 65 bad job
// spec (file or flags; found before anything is sent); 66 the job file cannot be read; 69 no
// daemon answers at the control socket (or it went away for good during --wait/--follow);
// 70 internal error; 73 key files cannot be written; 77 permission denied (the control socket,
// or the daemon refused: not the job's owner, not an admin, or a refused --connect client key);
// 78 bad configuration: a bad --set, or a broken config file for `config` and `keygen`. The
// verbs that talk to a daemon print the file's problems, warn, and go on with the control
// socket they can read (--set, ELASTIC_CONTROL_SOCKET, the file's control.socket if that key is
// fine, else the default): the daemon runs on with its previous file, and `status` shows why.
//
// Thread safety: single-threaded. Replies are decoded without exceptions (a malformed reply is
// an error message, never a crash).
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

namespace {

namespace cfg = elastic::config;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr const char* kCommands =
    "cancel, config, drain, events, jobs, keygen, logs, nodes, reload, status, submit, undrain, "
    "voters";
constexpr int kExitRefused = 1;
constexpr int kExitJobFailed = 3;
constexpr int kExitJobCancelled = 4;
constexpr int kExitSoftware = 70;      // EX_SOFTWARE
constexpr int kExitCantCreate = 73;    // EX_CANTCREAT
constexpr int kExitNoPermission = 77;  // EX_NOPERM

constexpr milliseconds kLocalTimeout{5000};
// Job verbs may wait for a leader election and a commit (the daemon gives up after 10 s).
constexpr milliseconds kLeaderTimeout{15000};
// --wait and --follow poll this often: fast enough to feel live, cheap for the leader.
constexpr milliseconds kPollInterval{300};
// How long --wait/--follow keep retrying a daemon that stopped answering: a local daemon
// restart or a leader election takes seconds, a host without its daemon is gone for good.
constexpr std::chrono::seconds kReconnectWindow{60};
constexpr std::uint64_t kLogChunk = 64 * 1024;
constexpr std::uint64_t kFollowChunk = 256 * 1024;
// Ranks probed for a job without a current round (its logs outlive the round).
constexpr std::uint32_t kMaxDiscoveredRanks = 4096;

constexpr const char* kExitCodesHelp =
    "Exit codes: 0 ok; 1 the daemon refused the request (its reason is printed); 3 submit "
    "--wait: the job failed; 4 submit --wait: the job was cancelled; 64 bad command line; 65 "
    "bad job spec (file or flags); 66 job file unreadable; 69 no daemon answers at the control "
    "socket (or --connect's daemon did not answer); 70 internal error; 73 key files cannot be "
    "written; 77 permission denied (on the control socket, by the daemon: not your job, not an "
    "admin, or --connect's client key refused); 78 bad configuration (also: reload, the daemon "
    "refused its config file).\n\n"
    "Files: /etc/elastic/elasticd.toml (the config read with -c; its control.socket names the "
    "local daemon's socket, default /run/elastic/elasticd.sock).\n"
    "Environment: ELASTIC_CONTROL_SOCKET (the local daemon's socket; set by the Slurm "
    "TaskProlog; --set control.socket=... wins); ELASTIC_CONNECT, ELASTIC_CLIENT_KEY, "
    "ELASTIC_SERVER_KEY (remote control through CURVE, like --connect, --client-key, "
    "--server-key).";

// ---- JSON access that never throws (replies are decoded defensively) ------------------------

std::string str(const json& j, const char* key, std::string fallback = "") {
  if (!j.is_object()) return fallback;
  const auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return fallback;
  return it->get<std::string>();
}

std::int64_t num(const json& j, const char* key, std::int64_t fallback = 0) {
  if (!j.is_object()) return fallback;
  const auto it = j.find(key);
  if (it == j.end()) return fallback;
  if (it->is_number_integer()) return it->get<std::int64_t>();
  if (it->is_number_float()) return static_cast<std::int64_t>(it->get<double>());
  return fallback;
}

double real(const json& j, const char* key, double fallback = 0) {
  if (!j.is_object()) return fallback;
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

bool flag(const json& j, const char* key, bool fallback = false) {
  if (!j.is_object()) return fallback;
  const auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

const json& member(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  const auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

// A value for a table cell: strings as is, numbers as JSON, absent/null as "-".
std::string cell(const json& j, const char* key) {
  const json& v = member(j, key);
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>().empty() ? "-" : v.get<std::string>();
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string dump(const json& j) { return j.dump(2, ' ', false, json::error_handler_t::replace); }

// ---- output helpers ---------------------------------------------------------------------------

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

// "1.2s", "250ms", "-" (never heard), for the LAST-HEARD column.
std::string ago(double ms) {
  if (ms < 0) return "-";
  char text[32];
  if (ms < 1000) {
    std::snprintf(text, sizeof(text), "%.0fms", ms);
  } else {
    std::snprintf(text, sizeof(text), "%.1fs", ms / 1000);
  }
  return text;
}

// Local ISO 8601 with milliseconds and the UTC offset: "2026-11-26T08:51:43.120+01:00".
std::string local_time(std::int64_t ms) {
  ms = std::max<std::int64_t>(ms, 0);
  const std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm parts{};
  ::localtime_r(&seconds, &parts);
  char text[64];
  std::size_t n = std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%S", &parts);
  char zone[16] = "+0000";
  std::strftime(zone, sizeof(zone), "%z", &parts);
  std::snprintf(text + n, sizeof(text) - n, ".%03d%.3s:%.2s", static_cast<int>(ms % 1000), zone,
                zone + 3);
  return text;
}

void print_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()));
    for (std::size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    std::cout << line << "\n";
  }
}

bool is_terminal(const std::string& state) {
  return state == "succeeded" || state == "failed" || state == "cancelled";
}

// ---- talking to the daemon ----------------------------------------------------------------

struct Answer {
  int code = 0;       // 0, or the exit code for `error`
  json reply;         // the daemon's reply object (also for refusals)
  std::string error;  // the line to print after "elasticctl: "
  bool answered() const { return code == 0 || code == kExitRefused; }
};

// Why nobody answered: connects once more to learn errno (the client's sentence does not carry
// it) and tells the user what to do.
Answer unreachable(const std::string& socket_path, const std::string& detail) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof(address.sun_path)) {
    return {cfg::kExitUnavailable, {}, detail};
  }
  std::memcpy(address.sun_path, socket_path.c_str(), socket_path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {cfg::kExitUnavailable, {}, detail};
  const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  const int error = errno;
  ::close(fd);
  if (rc != 0 && (error == EACCES || error == EPERM)) {
    return {kExitNoPermission,
            {},
            "permission denied on the control socket " + socket_path +
                " (connect: " + std::strerror(error) +
                "); ask an administrator to add you to the socket's group, or run elasticctl "
                "as root"};
  }
  if (rc != 0) {
    return {cfg::kExitUnavailable,
            {},
            "no daemon answers at " + socket_path + " (connect: " + std::strerror(error) +
                "); is elasticd running? (systemctl status elasticd)"};
  }
  return {
      cfg::kExitUnavailable, {}, detail + " (the daemon accepts connections but did not answer)"};
}

// Remote control (--connect): when set, every verb goes to that daemon over CURVE instead of
// the local socket, acting as the user its client key names (transport/control_client.h).
std::optional<elastic::transport::RemoteControlClient> remote_daemon;

// The daemon's refusals for lack of rights (not the owner, not an admin) carry
// "code":"permission" and exit 77 like a refused socket; a configuration file the daemon
// refused to load (reload) carries "code":"config" and exits 78; every other refusal exits 1.
int refusal_exit_code(const json& reply) {
  const std::string code = str(reply, "code");
  if (code == "permission") return kExitNoPermission;
  return code == "config" ? cfg::kExitConfig : kExitRefused;
}

Answer ask(const std::string& socket, const json& request, milliseconds timeout) {
  const std::string verb = str(request, "verb");
  const elastic::control::Request call{.verb = verb, .text = request.dump()};
  if (remote_daemon) {
    elastic::transport::RemoteFailure failure = elastic::transport::RemoteFailure::kNone;
    auto answer = elastic::transport::call_remote(*remote_daemon, call, timeout, &failure);
    if (!answer.ok()) {
      const int code = failure == elastic::transport::RemoteFailure::kRefused ? kExitNoPermission
                       : failure == elastic::transport::RemoteFailure::kBadSetup
                           ? cfg::kExitUsage
                           : cfg::kExitUnavailable;
      return {code, {}, answer.error().message};
    }
    json reply = json::parse(*answer, nullptr, /*allow_exceptions=*/false);
    if (!reply.is_object()) {
      return {cfg::kExitUnavailable, {}, "the daemon's reply to " + verb + " is not a JSON object"};
    }
    if (!flag(reply, "ok")) {
      std::string error = str(reply, "error", "the daemon refused the request");
      const int code = refusal_exit_code(reply);
      return {code, std::move(reply), std::move(error)};
    }
    return {0, std::move(reply), ""};
  }
  auto answer = elastic::control::call(socket, call, timeout);
  if (!answer.ok()) return unreachable(socket, answer.error().message);
  json reply = json::parse(*answer, nullptr, /*allow_exceptions=*/false);
  if (!reply.is_object()) {
    return {cfg::kExitUnavailable, {}, "the daemon's reply to " + verb + " is not a JSON object"};
  }
  if (!flag(reply, "ok")) {
    std::string error = str(reply, "error", "the daemon refused the request");
    if (error.find("nknown verb") != std::string::npos ||
        error.find("nknown request") != std::string::npos) {
      error += " (is the daemon older than this elasticctl? elasticctl --version)";
    }
    const int code = refusal_exit_code(reply);
    return {code, std::move(reply), std::move(error)};
  }
  return {0, std::move(reply), ""};
}

// Asks once; prints the error and returns the exit code, or 0 with `reply` filled.
int ask_or_report(const std::string& socket, const json& request, milliseconds timeout,
                  json& reply) {
  Answer answer = ask(socket, request, timeout);
  if (answer.code != 0) {
    std::cerr << "elasticctl: " << answer.error << "\n";
    return answer.code;
  }
  reply = std::move(answer.reply);
  return 0;
}

// Asks until answered, for loops that must survive a daemon restart or a leader election:
// retries any failure for kReconnectWindow (saying so once), then gives up with its code.
class PatientAsker {
 public:
  // An impatient asker (one-shot commands) returns the first failure as is.
  PatientAsker(std::string socket, bool patient) : socket_(std::move(socket)), patient_(patient) {}

  Answer ask(const json& request) {
    while (true) {
      Answer answer = ::ask(socket_, request, kLeaderTimeout);
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

// ---- nodes, status, jobs, events ----------------------------------------------------------

int nodes_command(const std::string& socket, bool as_json) {
  json reply;
  if (int code = ask_or_report(socket, {{"verb", "nodes"}}, kLocalTimeout, reply)) return code;
  if (as_json) {
    std::cout << dump(reply) << "\n";
    return 0;
  }
  const std::string self = str(member(reply, "self"), "name");
  std::vector<std::vector<std::string>> rows = {
      {"NAME", "STATE", "SLOTS", "DRAINED", "INCARNATION", "GENERATION", "ADDRESS", "LAST-HEARD"}};
  const json& members = member(reply, "members");
  if (members.is_array()) {
    for (const json& m : members) {
      const std::string name = str(m, "name");
      const bool is_self = name == self;
      const json& drained = member(m, "drained");
      rows.push_back({name + (is_self ? " (self)" : ""), cell(m, "state"), cell(m, "slots"),
                      drained.is_boolean() ? (drained.get<bool>() ? "yes" : "no") : "-",
                      cell(m, "incarnation"), cell(m, "generation"), cell(m, "address"),
                      is_self ? "-" : ago(real(m, "last_heard_ms_ago", -1))});
    }
  }
  print_table(rows);
  return 0;
}

int topology_command(const std::string& socket, bool as_json) {
  json reply;
  if (int code = ask_or_report(socket, {{"verb", "topology"}}, kLocalTimeout, reply)) return code;
  if (as_json) {
    std::cout << dump(reply) << "\n";
    return 0;
  }
  const json& topo = member(reply, "topology");
  std::cout << "node " << str(reply, "node", "?") << ": binding plan from "
            << str(topo, "source", "?")
            << " (bind cpus: " << (flag(topo, "bind_cpus") ? "yes" : "no")
            << ", bind memory: " << (flag(topo, "bind_memory") ? "yes" : "no") << ")\n";
  std::vector<std::vector<std::string>> rows = {
      {"SLOT", "GPU", "PCI-BUS", "CPUS", "MEM-NODES", "OMP-THREADS", "LOCALITY"}};
  const json& slots = member(topo, "slots");
  if (slots.is_array()) {
    for (const json& s : slots) {
      rows.push_back({cell(s, "index"), cell(s, "gpu"), cell(s, "pci_bus_id"), cell(s, "cpus"),
                      cell(s, "mem_nodes"), cell(s, "omp_threads"), cell(s, "locality")});
    }
  }
  print_table(rows);
  const json& gpus = member(topo, "gpus");
  const auto plural = [](std::int64_t n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  };
  std::cout << plural(num(topo, "packages"), "package", "packages") << ", "
            << plural(num(topo, "numa_nodes"), "NUMA node", "NUMA nodes") << ", "
            << plural(num(topo, "cores"), "core", "cores") << ", "
            << plural(num(topo, "pus"), "PU", "PUs") << ", "
            << plural(gpus.is_array() ? static_cast<std::int64_t>(gpus.size()) : 0, "GPU", "GPUs")
            << "\n";
  if (!str(topo, "shared_cpus").empty()) {
    std::cout << "shared cpus (daemon, unbound work): " << str(topo, "shared_cpus") << "\n";
  }
  return 0;
}

int status_command(const std::string& socket, bool as_json) {
  json raw;
  if (int code = ask_or_report(socket, {{"verb", "status"}}, kLocalTimeout, raw)) return code;
  if (as_json) {
    std::cout << dump(raw) << "\n";
    return 0;
  }
  auto status = elastic::control::decode_status_reply(raw.dump());
  if (!status.ok()) {
    std::cerr << "elasticctl: " << status.error().message << "\n";
    return cfg::kExitUnavailable;
  }
  std::cout << "name:       " << status->self.name << "\n"
            << "generation: " << status->self.generation << "\n"
            << "address:    " << status->self.address << "\n"
            << "cluster:    " << status->self.cluster_id << "\n"
            << "uptime:     " << ago(status->self.uptime_s * 1000) << "\n"
            << "members:    " << status->alive << " alive, " << status->suspect << " suspect, "
            << status->dead << " dead, " << status->left << " left\n";
  const elastic::control::ConsensusInfo& raft = status->consensus;
  std::string voters;
  for (const std::string& voter : raft.voters) voters += (voters.empty() ? "" : ",") + voter;
  std::cout << "leader:     " << (raft.leader.empty() ? "unknown" : raft.leader) << "\n";
  if (raft.voter) {
    std::cout << "raft:       " << raft.role << ", term " << raft.term << ", commit "
              << raft.commit_index << " of " << raft.last_index << ", voters " << voters << "\n";
  } else {
    std::cout << "raft:       not a voter (voters " << voters << ")\n";
  }
  // The daemon's configuration, and a refused reload (it runs on with the previous file).
  const json& config = member(raw, "config");
  const json& last_reload = member(config, "last_reload");
  if (config.is_object()) {
    std::cout << "config:     " << str(config, "source", "?");
    if (last_reload.is_object()) {
      std::cout << "; last reload " << local_time(num(last_reload, "at_ms")) << ": "
                << (flag(last_reload, "ok") ? "" : "REFUSED: ") << str(last_reload, "message");
    }
    std::cout << "\n";
  }
  for (const auto& r : status->rounds) {
    std::cout << "round:      job " << r.job << " round " << r.round << " (term " << r.term
              << "): ranks " << r.first_rank << ".." << r.first_rank + r.slots - 1 << " of "
              << r.world << ", store " << r.store_endpoint << (r.fenced ? ", FENCED" : "")
              << "; job tier: " << r.suspicions << " suspicions (" << r.suspicions_cleared
              << " cleared), " << r.declared << " lost\n";
  }
  return 0;
}

std::uint64_t world_of(const json& job) {
  if (member(job, "world_size").is_number_integer()) {
    return static_cast<std::uint64_t>(std::max<std::int64_t>(num(job, "world_size"), 0));
  }
  std::uint64_t world = 0;
  const json& ranks = member(job, "ranks");
  if (ranks.is_array()) {
    for (const json& r : ranks) world += static_cast<std::uint64_t>(num(r, "slots"));
  }
  return world;
}

std::size_t nodes_of(const json& job) {
  const json& ranks = member(job, "ranks");
  return ranks.is_array() ? ranks.size() : 0;
}

int jobs_command(const std::string& socket, bool as_json) {
  json reply;
  if (int code = ask_or_report(socket, {{"verb", "jobs"}}, kLeaderTimeout, reply)) return code;
  if (as_json) {
    std::cout << dump(reply) << "\n";
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {
      {"JOB", "STATE", "ROUND", "NODES", "WORLD", "RESTARTS", "USER", "REASON"}};
  const json& jobs = member(reply, "jobs");
  if (jobs.is_array()) {
    for (const json& job : jobs) {
      rows.push_back({cell(job, "id"), cell(job, "state"), cell(job, "round"),
                      std::to_string(nodes_of(job)), std::to_string(world_of(job)),
                      cell(job, "restarts"), cell(member(job, "spec"), "user"),
                      cell(job, "reason")});
    }
  }
  print_table(rows);
  return 0;
}

void print_event_line(const json& event, const std::string& job) {
  std::cout << "  " << local_time(num(event, "at_ms")) << "  " << (job.empty() ? "" : job + "  ")
            << "round " << cell(event, "round") << "  " << cell(event, "from") << " -> "
            << cell(event, "to") << "  " << str(event, "reason") << "\n";
}

// A job's command as one shell-like line: arguments with spaces, quotes or nothing in them are
// single-quoted, so what `status` shows can be read back and run.
std::string command_line(const json& command) {
  if (!command.is_array()) return "-";
  std::string line;
  for (const json& arg : command) {
    std::string text = arg.is_string() ? arg.get<std::string>() : arg.dump();
    if (text.empty() || text.find_first_of(" \t\n'\"\\$`*?;&|<>()[]{}#~") != std::string::npos) {
      std::string quoted = "'";
      for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
      text = quoted + "'";
    }
    line += (line.empty() ? "" : " ") + text;
  }
  return line;
}

int job_status_command(const std::string& socket, const std::string& id, bool as_json) {
  json reply;
  if (int code = ask_or_report(socket, {{"verb", "job"}, {"job", id}}, kLeaderTimeout, reply)) {
    return code;
  }
  const json& job = member(reply, "job");
  if (as_json) {
    std::cout << dump(job) << "\n";
    return 0;
  }
  const json& spec = member(job, "spec");
  std::cout << "job:      " << cell(job, "id") << "\n"
            << "state:    " << cell(job, "state") << " (" << cell(job, "reason") << ")\n"
            << "round:    " << cell(job, "round") << ", " << nodes_of(job) << " nodes, world "
            << world_of(job) << ", store " << cell(job, "store_endpoint") << "\n"
            << "restarts: " << cell(job, "restarts") << " of " << cell(spec, "max_restarts") << "\n"
            << "user:     " << cell(spec, "user") << "\n"
            << "command:  " << command_line(member(spec, "command")) << "\n";
  // RESTARTS: the node's TORCHELASTIC_RESTART_COUNT (counted per node, as torchrun's agents).
  std::vector<std::vector<std::string>> rows = {
      {"NODE", "GENERATION", "SLOTS", "FIRST-RANK", "RESTARTS"}};
  const json& ranks = member(job, "ranks");
  if (ranks.is_array()) {
    for (const json& r : ranks) {
      rows.push_back({cell(r, "node"), cell(r, "generation"), cell(r, "slots"),
                      cell(r, "first_rank"), cell(r, "restarts")});
    }
  }
  if (rows.size() > 1) print_table(rows);
  const json& events = member(job, "events");
  if (events.is_array()) {
    for (const json& event : events) print_event_line(event, "");
  }
  return 0;
}

// One recovery incident as a timeline (seconds after its earliest evidence; "-" unknown).
void print_incident(const json& i) {
  const auto point = [&](const char* key) -> std::string {
    const json& value = member(i, key);
    if (!value.is_number()) return "-";
    char text[32];
    std::snprintf(text, sizeof(text), "+%.2f s", value.get<double>());
    return text;
  };
  const auto padded = [](std::string text) {
    text.resize(std::max<std::size_t>(text.size(), 10), ' ');
    return text;
  };
  std::cout << "\nincident " << cell(i, "id") << "  job " << str(i, "job") << "  "
            << str(i, "cause") << (str(i, "node").empty() ? "" : " " + str(i, "node")) << "  round "
            << cell(i, "from_round") << "  at " << local_time(num(i, "at_ms")) << "\n";
  std::cout << "  detected      " << point("detected_s") << "\n";
  std::cout << "  stopped       " << point("stopped_s") << "\n";
  std::cout << "  rendezvous    " << padded(point("rendezvous_s"));
  if (num(i, "to_round") > 0) {
    std::cout << "  (round " << cell(i, "to_round") << ", " << cell(i, "to_nodes")
              << (num(i, "to_nodes") == 1 ? " node)" : " nodes)");
  }
  std::cout << "\n  first step    " << padded(point("first_step_s"));
  if (member(i, "resumed_from").is_number_integer()) {
    const std::int64_t from = num(i, "resumed_from");
    std::cout << "  ("
              << (from < 0 ? std::string("started fresh")
                           : "resumed from step " + std::to_string(from));
    if (member(i, "steps_lost").is_number_integer()) {
      std::cout << "; " << num(i, "steps_lost") << " steps lost";
    }
    std::cout << ")";
  } else if (member(i, "progress_reports").is_boolean() && !flag(i, "progress_reports") &&
             member(i, "rendezvous_s").is_number()) {
    // A script that reports no progress has no first step to wait for (issue 16 item 6).
    std::cout << "  (no progress reports: the workers started at the rendezvous)";
  } else if (flag(i, "given_up")) {
    std::cout << "  (given up: no first step reported)";
  } else if (!flag(i, "complete")) {
    std::cout << "  (in progress)";
  }
  std::cout << "\n";
}

int events_command(const std::string& socket, const std::string& job, std::int64_t limit,
                   bool as_json) {
  json request{{"verb", "events"}};
  if (!job.empty()) request["job"] = job;
  if (limit > 0) request["limit"] = limit;
  json reply;
  if (int code = ask_or_report(socket, request, kLeaderTimeout, reply)) return code;
  if (as_json) {
    std::cout << dump(reply) << "\n";
    return 0;
  }
  // Job state changes and the leader's cluster events, merged by time.
  std::vector<std::pair<std::int64_t, std::vector<std::string>>> lines;
  const json& events = member(reply, "events");
  if (events.is_array()) {
    for (const json& e : events) {
      lines.push_back(
          {num(e, "at_ms"),
           {local_time(num(e, "at_ms")), str(e, "job", job.empty() ? "-" : job), cell(e, "round"),
            cell(e, "from") + "->" + cell(e, "to"), str(e, "reason")}});
    }
  }
  const json& cluster = member(reply, "cluster");
  if (cluster.is_array()) {
    for (const json& e : cluster) {
      const std::string node = str(e, "node");
      lines.push_back({num(e, "at_ms"),
                       {local_time(num(e, "at_ms")), str(e, "job").empty() ? "-" : str(e, "job"),
                        "-", str(e, "kind") + (node.empty() ? "" : " " + node), str(e, "detail")}});
    }
  }
  std::stable_sort(lines.begin(), lines.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::vector<std::string>> rows = {{"TIME", "JOB", "ROUND", "CHANGE", "REASON"}};
  for (auto& line : lines) rows.push_back(std::move(line.second));
  print_table(rows);
  const json& incidents = member(reply, "incidents");
  if (incidents.is_array()) {
    for (const json& i : incidents) print_incident(i);
  }
  return 0;
}

// ---- submit --wait ------------------------------------------------------------------------

// "fmnist-1: running (round 2, 3 nodes)"; the reason joins states where it explains them.
std::string progress_line(const json& job) {
  const std::string state = str(job, "state", "?");
  std::string line = str(job, "id", "?") + ": " + state;
  const std::int64_t round = num(job, "round");
  const std::size_t nodes = nodes_of(job);
  if (round > 0 || nodes > 0) {
    line += " (round " + std::to_string(round) + ", " + std::to_string(nodes) +
            (nodes == 1 ? " node)" : " nodes)");
  }
  const std::string reason = str(job, "reason");
  if (!reason.empty() && state != "running") line += ": " + reason;
  return line;
}

// Polls the job until it ends. Progress goes to stdout, or to stderr with --json so that stdout
// is one JSON document (the final job object).
int wait_for_job(const std::string& socket, const std::string& id, bool as_json) {
  PatientAsker asker(socket, /*patient=*/true);
  std::string last;
  std::ostream& progress = as_json ? std::cerr : std::cout;
  while (true) {
    const Answer answer = asker.ask({{"verb", "job"}, {"job", id}});
    if (answer.code != 0) {
      std::cerr << "elasticctl: " << answer.error << "\n";
      if (answer.code == cfg::kExitUnavailable) {
        std::cerr << "elasticctl: gave up waiting for " << id
                  << "; it may still be running (elasticctl status " << id << ")\n";
      }
      return answer.code;
    }
    const json& job = member(answer.reply, "job");
    const std::string line = progress_line(job);
    if (line != last) {
      progress << line << std::endl;
      last = line;
    }
    const std::string state = str(job, "state");
    if (is_terminal(state)) {
      if (as_json) std::cout << dump(job) << "\n";
      if (state == "succeeded") return 0;
      if (state == "failed") {
        std::cerr << "elasticctl: job " << id << " failed: " << str(job, "reason", "no reason")
                  << "\n";
        return kExitJobFailed;
      }
      std::cerr << "elasticctl: job " << id << " was cancelled: " << str(job, "reason", "-")
                << "\n";
      return kExitJobCancelled;
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

// ---- logs ---------------------------------------------------------------------------------

// One rank's position in its current log file, and the tail of a line not yet ended.
struct RankCursor {
  std::optional<std::uint64_t> offset;  // nullopt: start at the last kLogChunk bytes
  std::string partial;
  std::string node;  // whose file the offset is in: a rank can move in a new round
};

class LogReader {
 public:
  LogReader(std::string socket, std::string job, std::optional<std::uint32_t> only_rank,
            bool follow, bool as_json)
      : socket_(std::move(socket)),
        job_(std::move(job)),
        only_rank_(only_rank),
        follow_(follow),
        as_json_(as_json),
        asker_(socket_, /*patient=*/follow) {}

  int run() {
    std::vector<json> replies;  // --json without --follow: one document at the end
    while (true) {
      const Answer status = asker_.ask({{"verb", "job"}, {"job", job_}});
      if (status.code != 0) return fail(status);
      const json& job = member(status.reply, "job");
      const bool terminal = is_terminal(str(job, "state"));
      const std::uint64_t world = world_of(job);
      // Which daemon runs each rank of the job's current (or last) round: its logs are there.
      rank_nodes_.clear();
      if (const auto ranks = job.find("ranks"); ranks != job.end() && ranks->is_array()) {
        for (const json& entry : *ranks) {
          const auto first = static_cast<std::uint32_t>(num(entry, "first_rank"));
          const auto slots = static_cast<std::uint32_t>(num(entry, "slots"));
          for (std::uint32_t r = first; r < first + slots && r < first + 4096; ++r) {
            rank_nodes_[r] = str(entry, "node");
          }
        }
      }
      if (only_rank_ && world > 0 && *only_rank_ >= world && !follow_) {
        std::cerr << "elasticctl: job " << job_ << " has ranks 0.." << world - 1 << " (world "
                  << world << "), no rank " << *only_rank_ << "\n";
        return kExitRefused;
      }
      bool got_data = false;
      std::vector<std::uint32_t> ranks;
      if (only_rank_) {
        ranks.push_back(*only_rank_);
      } else {
        for (std::uint32_t r = 0; r < world; ++r) ranks.push_back(r);
      }
      if (ranks.empty() && (terminal || !follow_)) {
        // No current round (the job ended or waits for nodes): the logs of its last round may
        // still be there; ask rank after rank until one has none.
        bool missing = false;
        for (std::uint32_t r = 0; r < kMaxDiscoveredRanks && !missing; ++r) {
          const int code = read_rank(r, got_data, replies, &missing);
          if (code != 0) return code;
        }
        if (cursors_.empty() && !follow_ && !as_json_) {
          std::cerr << "elasticctl: job " << job_ << " has no worker logs yet (state "
                    << str(job, "state", "?") << ")\n";
          return 0;
        }
      }
      for (std::uint32_t rank : ranks) {
        const int code = read_rank(rank, got_data, replies, nullptr);
        if (code != 0) return code;
      }
      if (!follow_ || (terminal && !got_data)) break;
      if (!got_data) std::this_thread::sleep_for(kPollInterval);
    }
    // The job ended (or one pass was asked for): lines left without a newline are shown too.
    for (auto& [rank, cursor] : cursors_) {
      if (!cursor.partial.empty()) emit(rank, "\n", cursor);
    }
    if (as_json_ && !follow_) {
      std::cout << dump(json{{"ok", true}, {"job", job_}, {"logs", replies}}) << "\n";
    }
    std::cout.flush();
    return 0;
  }

 private:
  int fail(const Answer& answer) {
    std::cerr << "elasticctl: " << answer.error << "\n";
    return answer.code;
  }

  // Reads what is new in one rank's log (everything new when following, in chunks).
  // With `missing`, any refusal (no such rank, no log) only sets *missing: ranks are being
  // discovered.
  int read_rank(std::uint32_t rank, bool& got_data, std::vector<json>& replies, bool* missing) {
    for (int chunk = 0; chunk < 64; ++chunk) {  // bounded: other ranks get their turn
      json request{{"verb", "logs"},
                   {"job", job_},
                   {"rank", rank},
                   {"max_bytes", follow_ ? kFollowChunk : kLogChunk}};
      if (const auto known = cursors_.find(rank); known != cursors_.end()) {
        if (known->second.offset) request["offset"] = *known->second.offset;
      }
      if (const auto node = rank_nodes_.find(rank); node != rank_nodes_.end()) {
        request["node"] = node->second;
      }
      const Answer answer = asker_.ask(request);
      if (missing != nullptr && answer.code == kExitRefused &&
          (answer.error.find("no log") != std::string::npos ||
           answer.error.find("rank") != std::string::npos)) {
        *missing = true;
        return 0;
      }
      if (answer.code == kExitRefused && answer.error.find("no log yet") != std::string::npos) {
        if (!follow_ && only_rank_) {
          std::cerr << "elasticctl: " << answer.error << "\n";
          return kExitRefused;
        }
        return 0;  // not started yet: all ranks show up once they write
      }
      if (answer.code != 0) return fail(answer);
      const json& reply = answer.reply;
      RankCursor& cursor = cursors_[rank];
      const std::string node = str(reply, "node");
      if (!cursor.node.empty() && node != cursor.node && cursor.offset) {
        // The rank now runs elsewhere: our offset means nothing in that node's file.
        cursor.node = node;
        cursor.offset = 0;
        if (!cursor.partial.empty() && !as_json_) emit(rank, "\n", cursor);
        continue;
      }
      cursor.node = node;
      if (as_json_) {
        if (follow_) {
          std::cout << reply.dump(-1, ' ', false, json::error_handler_t::replace) << std::endl;
        } else {
          replies.push_back(reply);
        }
      }
      const std::string data = str(reply, "data");
      if (flag(reply, "rotated") && !cursor.partial.empty() && !as_json_) {
        // The rest of that line went to the rotated file: show what we have.
        emit(rank, "\n", cursor);
      }
      const std::uint64_t next = static_cast<std::uint64_t>(std::max<std::int64_t>(
          num(reply, "offset", static_cast<std::int64_t>(cursor.offset.value_or(0))), 0));
      const std::uint64_t size =
          static_cast<std::uint64_t>(std::max<std::int64_t>(num(reply, "size"), 0));
      cursor.offset = next;
      if (!data.empty()) {
        got_data = true;
        if (!as_json_) emit(rank, data, cursor);
      }
      if (!follow_ || data.empty() || next >= size) return 0;
    }
    return 0;
  }

  // Prints `data`: raw for one rank; otherwise whole lines prefixed "[rank N] ", keeping an
  // unfinished line until its newline arrives so lines of different ranks never mix.
  void emit(std::uint32_t rank, const std::string& data, RankCursor& cursor) {
    if (only_rank_) {
      std::cout << data;
      std::cout.flush();
      return;
    }
    std::string text = cursor.partial + data;
    cursor.partial.clear();
    std::size_t start = 0;
    while (start < text.size()) {
      const auto newline = text.find('\n', start);
      if (newline == std::string::npos) {
        cursor.partial = text.substr(start);
        break;
      }
      std::cout << "[rank " << rank << "] " << std::string_view(text).substr(start, newline - start)
                << "\n";
      start = newline + 1;
    }
    std::cout.flush();
  }

  std::string socket_;
  std::string job_;
  std::optional<std::uint32_t> only_rank_;
  bool follow_;
  bool as_json_;
  PatientAsker asker_;
  std::map<std::uint32_t, RankCursor> cursors_;
  std::map<std::uint32_t, std::string> rank_nodes_;  // rank -> the daemon that runs it
};

// ---- keygen -------------------------------------------------------------------------------

int keygen_command(const std::string& dir, const std::string& name, bool client) {
  auto keys = elastic::transport::generate_curve_keypair();
  if (!keys.ok()) {
    std::cerr << "elasticctl: " << keys.error().message << "\n";
    return cfg::kExitUnavailable;
  }
  const elastic::Status written = elastic::transport::write_curve_keypair(dir, name, *keys);
  if (!written.ok()) {
    std::cerr << "elasticctl: " << written.error().message << "\n";
    return kExitCantCreate;
  }
  if (client) {
    std::cout << "wrote " << dir << "/" << name << ".key (your secret key for elasticctl "
              << "--client-key, mode 0600) and " << dir << "/" << name << ".pub (an admin "
              << "copies it into the daemon's control.client_keys_dir as " << name
              << ".pub; the file name is the user the key acts as)\n";
    return 0;
  }
  std::cout << "wrote " << dir << "/" << name << ".key (secret, mode 0600) and " << dir << "/"
            << name << ".pub (public: copy it into every node's transport.public_keys_dir)\n";
  return 0;
}

// ---- the command line ---------------------------------------------------------------------

int run(int argc, char** argv) {
  // Everything after the first "--" is the job's command, taken before CLI11 sees it: its
  // positional JOBFILE would otherwise swallow the program name.
  std::vector<std::string> args;
  std::optional<std::vector<std::string>> command_after_dashes;
  for (int i = 1; i < argc; ++i) {
    if (!command_after_dashes && std::string_view(argv[i]) == "--") {
      command_after_dashes.emplace();
      continue;
    }
    (command_after_dashes ? *command_after_dashes : args).push_back(argv[i]);
  }
  std::reverse(args.begin(), args.end());  // CLI11 parses a reversed vector

  CLI::App app{"elasticctl: control the elastic training daemons.", "elasticctl"};
  app.set_version_flag("--version", std::string("elasticctl ") + elastic::kVersion);
  app.footer(kExitCodesHelp);
  std::string config_path = cfg::kDefaultConfigPath;
  CLI::Option* config_option =
      app.add_option("-c,--config", config_path,
                     "elasticd's TOML config file (to find the daemon); '' for none")
          ->capture_default_str();
  std::vector<std::string> overrides;
  app.add_option("--set", overrides, "Override one setting (repeatable)")
      ->type_name("SECTION.KEY=VALUE")
      ->allow_extra_args(false);
  elastic::transport::RemoteControlClient remote;
  CLI::Option* connect_option =
      app.add_option("--connect", remote.endpoint,
                     "Talk to the daemon at this control.remote_listen (tcp://HOST:PORT) over "
                     "CURVE instead of the local socket, e.g. from a login node")
          ->envname("ELASTIC_CONNECT");
  app.add_option("--client-key", remote.client_key_file,
                 "With --connect: your secret key (elasticctl keygen --client USER); the daemon "
                 "acts as the user its USER.pub in control.client_keys_dir names")
      ->envname("ELASTIC_CLIENT_KEY");
  app.add_option("--server-key", remote.server_key_file,
                 "With --connect: the daemon's public key (its transport NODE.pub)")
      ->envname("ELASTIC_SERVER_KEY");
  app.fallthrough();  // -c and --set may also follow the command
  app.require_subcommand(1);
  bool as_json = false;
  const auto json_flag = [&](CLI::App* command) {
    command->add_flag("--json", as_json, "Print JSON (the daemon's reply) instead of a table");
  };

  CLI::App* config_cmd =
      app.add_subcommand("config", "Print the effective configuration (TOML, or JSON with --json)");
  config_cmd->add_flag("--json", as_json, "Print JSON instead of TOML");

  CLI::App* nodes_cmd = app.add_subcommand(
      "nodes",
      "Show every member the local daemon knows: state, slots, drained, incarnation, "
      "generation, address, last heard");
  bool topology = false;
  nodes_cmd->add_flag("--topology", topology,
                      "Show this host's binding plan instead: slot, GPU, PCI bus, CPUs, memory "
                      "nodes, OMP threads");
  json_flag(nodes_cmd);

  CLI::App* status_cmd = app.add_subcommand(
      "status", "Show the local daemon (identity, members, Raft, rounds), or one job");
  std::string job_id;
  status_cmd->add_option("job", job_id, "Show this job instead of the daemon");
  json_flag(status_cmd);

  CLI::App* submit_cmd = app.add_subcommand(
      "submit",
      "Submit a job: elasticctl submit [JOB.toml] [flags] [-- COMMAND ARGS...]; flags override "
      "the file, -- COMMAND replaces its command");
  std::string job_file;
  std::string job_name, node_range, restart_backoff, last_call, checkpoint_root, working_dir;
  std::uint32_t workers_per_node = 0;
  std::uint32_t max_restarts = 0;
  std::vector<std::string> env_pairs;
  bool wait = false;
  bool dry_run = false;
  submit_cmd->add_option("jobfile", job_file, "A TOML job file (examples/*.toml)");
  CLI::Option* name_opt =
      submit_cmd->add_option("--name", job_name, "Job name ([A-Za-z0-9._-], at most 64)");
  CLI::Option* nodes_opt = submit_cmd->add_option("--nodes", node_range,
                                                  "MIN:MAX nodes, or N for exactly N (default 1)");
  CLI::Option* workers_opt = submit_cmd->add_option(
      "--workers-per-node,--gpus-per-node", workers_per_node,
      "Workers per node; 0 = one per GPU, or per CPU slot on hosts without GPUs (default 0)");
  CLI::Option* restarts_opt = submit_cmd->add_option(
      "--max-restarts", max_restarts, "Worker failures tolerated before the job fails (default 3)");
  CLI::Option* backoff_opt = submit_cmd->add_option("--restart-backoff", restart_backoff,
                                                    "Pause after a worker failure (default 1s)");
  CLI::Option* last_call_opt = submit_cmd->add_option(
      "--last-call", last_call, "Wait this long for more nodes past MIN (default: the daemon's)");
  CLI::Option* ckpt_opt = submit_cmd->add_option(
      "--checkpoint-root", checkpoint_root,
      "Shared checkpoint directory; relative to the cwd (default: the daemon's checkpoint.root)");
  CLI::Option* workdir_opt = submit_cmd->add_option(
      "--workdir,--working-dir", working_dir,
      "Workers' working directory; relative to the cwd (default: the cwd; '' = the user's home)");
  submit_cmd->add_option("--env", env_pairs, "NAME=VALUE for the workers (repeatable)")
      ->allow_extra_args(false);
  std::string export_setting;
  CLI::Option* export_opt = submit_cmd->add_option(
      "--export", export_setting,
      "Your environment to pass to the workers, as sbatch: ALL (default), NONE or VAR,VAR,... "
      "(never host-specific ones such as HOSTNAME, SSH_*, DISPLAY, SLURM_*); --env beats it");
  submit_cmd->add_flag("--wait", wait,
                       "Follow the job until it ends: exit 0 succeeded, 3 failed, 4 cancelled");
  submit_cmd->add_flag("--dry-run", dry_run,
                       "Check the spec and print it as JSON; send nothing to the daemon");
  json_flag(submit_cmd);

  CLI::App* jobs_cmd = app.add_subcommand("jobs", "List the jobs the leader knows");
  json_flag(jobs_cmd);

  CLI::App* cancel_cmd = app.add_subcommand("cancel", "Cancel a job");
  cancel_cmd->add_option("job", job_id, "The job id (elasticctl jobs)")->required();
  json_flag(cancel_cmd);

  CLI::App* events_cmd =
      app.add_subcommand("events",
                         "Show job state changes (replicated), the leader's cluster events "
                         "(members, elections, drains, rounds) and recovery incident timelines, "
                         "oldest first; cluster events and incidents are the leader's memory, "
                         "lost when leadership moves");
  events_cmd->add_option("job", job_id, "Only this job");
  std::int64_t limit = 0;
  events_cmd->add_option("--limit", limit, "At most the last N events")->check(CLI::PositiveNumber);
  json_flag(events_cmd);

  CLI::App* logs_cmd = app.add_subcommand(
      "logs",
      "Show a job's worker output: every rank of the current round, each line prefixed "
      "[rank N], or one rank raw");
  std::uint32_t rank = 0;
  bool follow = false;
  logs_cmd->add_option("job", job_id, "The job id")->required();
  CLI::Option* rank_opt = logs_cmd->add_option("--rank", rank, "Only this rank, unprefixed");
  logs_cmd->add_flag("-f,--follow", follow, "Keep printing new output until the job ends");
  json_flag(logs_cmd);

  CLI::App* drain_cmd = app.add_subcommand(
      "drain", "Place no new rounds on a node (its running jobs keep running; admins only)");
  std::string node_name;
  std::string drain_reason;
  drain_cmd->add_option("node", node_name, "The daemon's node name")->required();
  drain_cmd->add_option("--reason", drain_reason, "Why (shown in nodes and events)");
  json_flag(drain_cmd);
  CLI::App* undrain_cmd = app.add_subcommand("undrain", "Let a drained node take rounds again");
  undrain_cmd->add_option("node", node_name, "The daemon's node name")->required();
  json_flag(undrain_cmd);

  CLI::App* voters_cmd = app.add_subcommand(
      "voters", "Show the Raft voters, or change them one at a time: voters add|remove NODE");
  std::string voter_action;
  std::string voter_node;
  voters_cmd->add_option("action", voter_action, "add or remove")
      ->check(CLI::IsMember({"add", "remove"}));
  voters_cmd->add_option("node", voter_node, "The daemon's node name");
  json_flag(voters_cmd);

  CLI::App* reload_cmd = app.add_subcommand(
      "reload",
      "Make the local daemon re-read its config file now and print the outcome; exits 78 when "
      "it refuses the file (it keeps running with the previous one). Root and "
      "control.admin_group only; `systemctl reload elasticd` runs this");
  json_flag(reload_cmd);

  CLI::App* keygen_cmd = app.add_subcommand(
      "keygen", "Write a node's CURVE key pair: DIR/NAME.key (secret) and DIR/NAME.pub");
  std::string key_dir;
  std::string key_name;
  keygen_cmd->add_option("--dir", key_dir, "Directory for the key files (created)")->required();
  CLI::Option* key_name_opt = keygen_cmd->add_option(
      "--name", key_name, "Node name (default: node.name, else the hostname)");
  std::string client_user;
  keygen_cmd
      ->add_option("--client", client_user,
                   "Write a remote control client key pair for this user instead "
                   "(DIR/USER.key for --client-key, DIR/USER.pub for control.client_keys_dir)")
      ->excludes(key_name_opt);

  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    const auto remaining = app.remaining();
    if (app.get_subcommands().empty() && !remaining.empty() && remaining.front()[0] != '-') {
      std::cerr << "elasticctl: unknown command \"" << remaining.front()
                << "\" (commands: " << kCommands << ")\n";
    } else if (app.get_subcommands().empty() && remaining.empty() &&
               dynamic_cast<const CLI::RequiredError*>(&e) != nullptr) {
      std::cerr << "elasticctl: a command is required (commands: " << kCommands << ")\n";
    } else {
      std::cerr << "elasticctl: " << e.what() << "\n";
    }
    std::cerr << "Run 'elasticctl --help' for usage.\n";
    return cfg::kExitUsage;
  }
  if (command_after_dashes && !submit_cmd->parsed()) {
    std::cerr << "elasticctl: only submit takes a command after --\n"
              << "Run 'elasticctl --help' for usage.\n";
    return cfg::kExitUsage;
  }

  const cfg::LoadOptions load_options{
      .file = config_path, .file_must_exist = config_option->count() > 0, .overrides = overrides};
  auto loaded = cfg::load_config(load_options);
  bool file_is_broken = false;
  if (!loaded.ok()) {
    // While the file is broken the daemon runs on with its previous configuration (a refused
    // reload), and `status` is where it says so: verbs that only talk to the daemon still reach
    // it, through the control socket that can be read (--set, the environment, the file's own
    // control.socket if that key is fine, else the default). `config` and `keygen` use the
    // configuration itself, and a broken --set was typed right here: those stop.
    auto without_file = cfg::load_config(
        cfg::LoadOptions{.file = "", .file_must_exist = false, .overrides = overrides});
    std::cerr << loaded.error().message << "\n";
    if (config_cmd->parsed() || keygen_cmd->parsed() || !without_file.ok()) {
      std::cerr << "elasticctl: invalid configuration; exiting with status " << cfg::kExitConfig
                << " (EX_CONFIG)\n";
      return cfg::kExitConfig;
    }
    loaded = std::move(without_file);
    loaded->config.control.socket = cfg::readable_values(load_options).control.socket;
    file_is_broken = true;
  }
  // ELASTIC_CONTROL_SOCKET (exported by the Slurm TaskProlog for the allocation's own daemon,
  // and set for every worker) beats the config file but not an explicit --set control.socket.
  if (const char* env_socket = std::getenv("ELASTIC_CONTROL_SOCKET");
      env_socket != nullptr && *env_socket != '\0' &&
      std::none_of(overrides.begin(), overrides.end(),
                   [](const std::string& o) { return o.rfind("control.socket=", 0) == 0; })) {
    loaded->config.control.socket = env_socket;
  }
  if (file_is_broken) {
    std::cerr << "elasticctl: warning: " << config_path
              << " is not a valid configuration (see above); going on with "
              << (remote.endpoint.empty() ? "the control socket " + loaded->config.control.socket
                                          : "--connect " + remote.endpoint)
              << "\n";
  }

  if (config_cmd->parsed()) {
    if (loaded->file_missing) {
      std::cerr << "elasticctl: " << config_path << " not found; showing built-in defaults\n";
    }
    std::cout << (as_json ? cfg::to_json(loaded->config) : cfg::to_toml(loaded->config));
    return 0;
  }
  (void)connect_option;
  if (!remote.endpoint.empty() && !keygen_cmd->parsed() && !config_cmd->parsed()) {
    if (remote.client_key_file.empty() || remote.server_key_file.empty()) {
      std::cerr << "elasticctl: --connect needs --client-key FILE and --server-key FILE (or "
                   "ELASTIC_CLIENT_KEY and ELASTIC_SERVER_KEY)\n";
      return cfg::kExitUsage;
    }
    remote_daemon = remote;
  }
  const std::string& socket = loaded->config.control.socket;
  if (nodes_cmd->parsed()) {
    return topology ? topology_command(socket, as_json) : nodes_command(socket, as_json);
  }
  if (status_cmd->parsed()) {
    return job_id.empty() ? status_command(socket, as_json)
                          : job_status_command(socket, job_id, as_json);
  }
  if (jobs_cmd->parsed()) return jobs_command(socket, as_json);
  if (events_cmd->parsed()) return events_command(socket, job_id, limit, as_json);
  if (logs_cmd->parsed()) {
    std::optional<std::uint32_t> only_rank;
    if (rank_opt->count() > 0) only_rank = rank;
    return LogReader(socket, job_id, only_rank, follow, as_json).run();
  }
  if (drain_cmd->parsed() || undrain_cmd->parsed()) {
    const bool drain = drain_cmd->parsed();
    json request{{"verb", drain ? "drain" : "undrain"}, {"node", node_name}};
    if (drain && !drain_reason.empty()) request["reason"] = drain_reason;
    json reply;
    if (int code = ask_or_report(socket, request, kLeaderTimeout, reply)) return code;
    if (as_json) {
      std::cout << dump(reply) << "\n";
    } else {
      std::cout << (drain ? "drained " : "undrained ") << str(reply, "node", node_name) << "\n";
    }
    return 0;
  }
  if (voters_cmd->parsed()) {
    if (!voter_action.empty() && voter_node.empty()) {
      std::cerr << "elasticctl: voters " << voter_action << " needs a NODE name\n";
      return cfg::kExitUsage;
    }
    json request{{"verb", "voters"}};
    if (!voter_action.empty()) {
      request["action"] = voter_action;
      request["node"] = voter_node;
    }
    json reply;
    if (int code = ask_or_report(socket, request, kLeaderTimeout, reply)) return code;
    if (as_json) {
      std::cout << dump(reply) << "\n";
      return 0;
    }
    std::string voters;
    const json& list = member(reply, "voters");
    if (list.is_array()) {
      for (const json& v : list) {
        if (v.is_string()) voters += (voters.empty() ? "" : " ") + v.get<std::string>();
      }
    }
    std::cout << "voters: " << voters << "\n";
    return 0;
  }
  if (reload_cmd->parsed()) {
    json reply;
    if (int code = ask_or_report(socket, {{"verb", "reload"}}, kLocalTimeout, reply)) return code;
    if (as_json) {
      std::cout << dump(reply) << "\n";
    } else {
      std::cout << "reloaded " << str(reply, "source") << ": " << str(reply, "message") << "\n";
    }
    return 0;
  }
  if (cancel_cmd->parsed()) {
    json reply;
    const int code =
        ask_or_report(socket, {{"verb", "cancel"}, {"job", job_id}}, kLeaderTimeout, reply);
    if (code != 0) return code;
    if (as_json) {
      std::cout << dump(reply) << "\n";
    } else {
      std::cout << "cancelled " << job_id << "\n";
    }
    return 0;
  }
  if (submit_cmd->parsed()) {
    std::optional<elastic::ctl::JobFile> file;
    if (!job_file.empty()) {
      elastic::ctl::JobFileError kind = elastic::ctl::JobFileError::kInvalid;
      auto read = elastic::ctl::read_job_file(job_file, &kind);
      if (!read.ok()) {
        std::cerr << read.error().message << "\n";
        if (kind == elastic::ctl::JobFileError::kInvalid) {
          std::cerr << "elasticctl: the job spec is invalid; nothing was submitted\n";
        }
        if (kind == elastic::ctl::JobFileError::kUnreadable && !job_file.ends_with(".toml")) {
          std::cerr << "elasticctl: (a job's command goes after --: elasticctl submit --name N "
                       "-- "
                    << job_file << " ...)\n";
        }
        return kind == elastic::ctl::JobFileError::kUnreadable ? elastic::ctl::kExitNoInput
                                                               : elastic::ctl::kExitDataError;
      }
      file = std::move(*read);
    }
    elastic::ctl::JobOverrides flags;
    if (name_opt->count() > 0) flags.name = job_name;
    if (command_after_dashes) flags.command = *command_after_dashes;
    flags.env = env_pairs;
    if (nodes_opt->count() > 0) flags.nodes = node_range;
    if (workers_opt->count() > 0) flags.workers_per_node = workers_per_node;
    if (restarts_opt->count() > 0) flags.max_restarts = max_restarts;
    if (backoff_opt->count() > 0) flags.restart_backoff = restart_backoff;
    if (last_call_opt->count() > 0) flags.last_call = last_call;
    if (ckpt_opt->count() > 0) flags.checkpoint_root = checkpoint_root;
    if (workdir_opt->count() > 0) flags.working_dir = working_dir;
    if (export_opt->count() > 0) flags.export_setting = export_setting;
    auto caller = elastic::ctl::current_caller();
    if (!caller.ok()) {
      std::cerr << "elasticctl: " << caller.error().message << "\n";
      return elastic::ctl::kExitDataError;
    }
    auto spec = elastic::ctl::build_job_spec(file ? &*file : nullptr, flags, *caller);
    // The program as the submitter's shell would find it (a venv's python3, not the daemon's).
    if (spec.ok()) {
      if (elastic::Status resolved = elastic::ctl::resolve_command(&*spec, *caller);
          !resolved.ok()) {
        spec = resolved.error();
      }
    }
    if (!spec.ok()) {
      std::cerr << spec.error().message << "\n"
                << "elasticctl: the job spec is invalid; nothing was submitted\n";
      return elastic::ctl::kExitDataError;
    }
    const json spec_json = json::parse(elastic::rendezvous::to_json(*spec), nullptr, false);
    const json submit_request{{"verb", "submit"}, {"spec", spec_json}};
    // The daemon closes a connection whose request is over the frame limit: say why here.
    if (const std::string too_big = elastic::ctl::oversized_request_problem(
            *spec, submit_request.dump().size(), elastic::control::kMaxRequestBytes);
        !too_big.empty()) {
      std::cerr << too_big << "\n"
                << "elasticctl: the job spec is invalid; nothing was submitted\n";
      return elastic::ctl::kExitDataError;
    }
    if (dry_run) {
      std::cout << dump(spec_json) << "\n";
      return 0;
    }
    json reply;
    const int code = ask_or_report(socket, submit_request, kLeaderTimeout, reply);
    if (code != 0) return code;
    const std::string id = str(member(reply, "job"), "id");
    if (as_json && !wait) {
      std::cout << dump(reply) << "\n";
      return 0;
    }
    (as_json ? std::cerr : std::cout)
        << "submitted " << id << (flag(reply, "duplicate") ? " (already submitted)" : "")
        << std::endl;
    return wait ? wait_for_job(socket, id, as_json) : 0;
  }
  if (keygen_cmd->parsed()) {
    if (key_name.empty()) key_name = loaded->config.node.name;
    if (key_name.empty()) key_name = host_name();
    if (!client_user.empty()) return keygen_command(key_dir, client_user, /*client=*/true);
    return keygen_command(key_dir, key_name, /*client=*/false);
  }
  return cfg::kExitUsage;  // unreachable: require_subcommand(1)
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "elasticctl: " << e.what() << "\n";
    return kExitSoftware;
  }
}
