#include "ctl/commands.h"

#include "ctl/common.h"

namespace elastic::ctl {

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
  std::string node;                    // whose file the offset is in: a rank can move
  std::optional<std::uint64_t> round;  // and each round has its own file
  // What the offset was asked for with (the job's rank map then): when the map moves on,
  // --follow finishes that file first.
  std::string asked_node;
  std::optional<std::uint64_t> asked_round;
};

// Where one rank's log file of one round is (a row of a daemon's log_files reply).
struct ListedLog {
  std::string node;
  std::uint64_t size = 0;
};

class LogReader {
 public:
  LogReader(std::string socket, std::string job, const LogsOptions& options)
      : socket_(std::move(socket)),
        job_(std::move(job)),
        only_rank_(options.rank),
        follow_(options.follow),
        as_json_(options.as_json),
        round_(options.round),
        all_(options.all),
        asker_(socket_, /*patient=*/options.follow) {}

  int run() {
    if (round_ || all_) return run_rounds();
    std::vector<json> replies;  // --json without --follow: one document at the end
    while (true) {
      const Answer status = asker_.ask({{"verb", "job"}, {"job", job_}});
      if (status.code != 0) return fail(status);
      const json& job = member(status.reply, "job");
      const bool terminal = is_terminal(str(job, "state"));
      const std::uint64_t world = world_of(job);
      // Which daemon runs each rank of the job's current (or last) round: its logs are there.
      rank_nodes_.clear();
      job_round_.reset();
      if (const auto ranks = job.find("ranks"); ranks != job.end() && ranks->is_array()) {
        for (const json& entry : *ranks) {
          const auto first = static_cast<std::uint32_t>(num(entry, "first_rank"));
          const auto slots = static_cast<std::uint32_t>(num(entry, "slots"));
          for (std::uint32_t r = first; r < first + slots && r < first + 4096; ++r) {
            rank_nodes_[r] = str(entry, "node");
          }
        }
        if (const auto round = job.find("round");
            round != job.end() && round->is_number_unsigned()) {
          job_round_ = round->get<std::uint64_t>();
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

  json logs_request(std::uint32_t rank, const std::string& node, std::optional<std::uint64_t> round,
                    std::uint64_t max_bytes) const {
    json request{{"verb", "logs"}, {"job", job_}, {"rank", rank}, {"max_bytes", max_bytes}};
    if (round) request["round"] = *round;
    if (!node.empty()) request["node"] = node;
    return request;
  }

  // --follow: the rank moved to another round (or node) since it was last read; the rest of
  // its old file (a traceback) is shown before the new one starts.
  void finish_old_file(std::uint32_t rank, RankCursor& cursor, bool& got_data,
                       const std::string& node, std::optional<std::uint64_t> round) {
    for (int chunk = 0; chunk < 64 && cursor.offset; ++chunk) {
      json request = logs_request(rank, cursor.asked_node, cursor.asked_round, kFollowChunk);
      request["offset"] = *cursor.offset;
      const Answer answer = asker_.ask(request);
      if (answer.code != 0 || flag(answer.reply, "rotated")) break;
      const std::string data = str(answer.reply, "data");
      if (data.empty()) break;
      got_data = true;
      if (as_json_) {
        std::cout << answer.reply.dump(-1, ' ', false, json::error_handler_t::replace) << std::endl;
      } else {
        emit(rank, data, cursor);
      }
      cursor.offset = static_cast<std::uint64_t>(std::max<std::int64_t>(
          num(answer.reply, "offset", static_cast<std::int64_t>(*cursor.offset)), 0));
    }
    if (!cursor.partial.empty() && !as_json_) emit(rank, "\n", cursor);
    // The new file from its start (also when it does not exist yet).
    cursor.offset = 0;
    cursor.node = cursor.asked_node = node;
    cursor.round = cursor.asked_round = round;
  }

  // Reads what is new in one rank's log (everything new when following, in chunks).
  // With `missing`, any refusal (no such rank, no log) only sets *missing: ranks are being
  // discovered.
  int read_rank(std::uint32_t rank, bool& got_data, std::vector<json>& replies, bool* missing) {
    std::string node;
    std::optional<std::uint64_t> round;
    if (const auto known = rank_nodes_.find(rank); known != rank_nodes_.end()) {
      node = known->second;
      round = job_round_;
    }
    if (const auto known = cursors_.find(rank);
        follow_ && known != cursors_.end() && known->second.offset && round &&
        (known->second.asked_node != node || known->second.asked_round != round)) {
      finish_old_file(rank, known->second, got_data, node, round);
    }
    for (int chunk = 0; chunk < 64; ++chunk) {  // bounded: other ranks get their turn
      json request = logs_request(rank, node, round, follow_ ? kFollowChunk : kLogChunk);
      if (const auto known = cursors_.find(rank); known != cursors_.end()) {
        if (known->second.offset) request["offset"] = *known->second.offset;
      }
      const Answer answer = asker_.ask(request);
      if (missing != nullptr && answer.code == kExitRefused &&
          (answer.error.find("no log") != std::string::npos ||
           answer.error.find("rank") != std::string::npos)) {
        *missing = true;
        return 0;
      }
      // A round's file is made when its worker starts: until then the rank has none.
      if (answer.code == kExitRefused && (answer.error.find("no log yet") != std::string::npos ||
                                          answer.error.find("has no log") != std::string::npos)) {
        if (!follow_ && only_rank_) {
          std::cerr << "elasticctl: " << answer.error << "\n";
          return kExitRefused;
        }
        return 0;  // not started yet: all ranks show up once they write
      }
      if (answer.code != 0) return fail(answer);
      const json& reply = answer.reply;
      RankCursor& cursor = cursors_[rank];
      const std::string served_by = str(reply, "node");
      std::optional<std::uint64_t> served_round = round;  // a daemon before rounds says none
      if (const auto r = reply.find("round"); r != reply.end() && r->is_number_unsigned()) {
        served_round = r->get<std::uint64_t>();
      }
      if (!cursor.node.empty() && (served_by != cursor.node || served_round != cursor.round) &&
          cursor.offset) {
        // Another file than the one our offset is in (another node or round): start it over.
        cursor.node = served_by;
        cursor.round = served_round;
        cursor.offset = 0;
        if (!cursor.partial.empty() && !as_json_) emit(rank, "\n", cursor);
        continue;
      }
      cursor.node = served_by;
      cursor.round = served_round;
      cursor.asked_node = node;
      cursor.asked_round = round;
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
    emit_lines("[rank " + std::to_string(rank) + "] ", data, cursor.partial);
  }

  // Whole lines of `partial` + `data`, each after `prefix`; an unfinished one stays in partial.
  static void emit_lines(const std::string& prefix, const std::string& data, std::string& partial) {
    std::string text = partial + data;
    partial.clear();
    std::size_t start = 0;
    while (start < text.size()) {
      const auto newline = text.find('\n', start);
      if (newline == std::string::npos) {
        partial = text.substr(start);
        break;
      }
      std::cout << prefix << std::string_view(text).substr(start, newline - start) << "\n";
      start = newline + 1;
    }
    std::cout.flush();
  }

  // ---- --round R and --all: the files of every member daemon, whatever round they are of

  // Adds a log_files reply's files to `found` ((round, rank) -> where; the first node to list
  // a file serves it).
  void add_listed(const json& reply,
                  std::map<std::pair<std::uint64_t, std::uint32_t>, ListedLog>& found) const {
    const std::string node = str(reply, "node");
    const json& files = member(reply, "files");
    if (!files.is_array()) return;
    for (const json& file : files) {
      const auto rank = static_cast<std::uint32_t>(num(file, "rank", -1));
      if (only_rank_ && rank != *only_rank_) continue;
      const auto round = static_cast<std::uint64_t>(num(file, "round"));
      found.emplace(std::pair{round, rank},
                    ListedLog{.node = node, .size = static_cast<std::uint64_t>(num(file, "size"))});
    }
  }

  json log_files_request(const std::string& node) const {
    json request{{"verb", "log_files"}, {"job", job_}};
    if (round_) request["round"] = *round_;
    if (!node.empty()) request["node"] = node;
    return request;
  }

  int run_rounds() {
    const Answer status = asker_.ask({{"verb", "job"}, {"job", job_}});
    if (status.code != 0) return fail(status);
    std::map<std::pair<std::uint64_t, std::uint32_t>, ListedLog> found;
    std::vector<std::string> unanswered;  // "h2 (why)", for the warning line
    json unanswered_json = json::array();
    const auto note = [&](const std::string& node, std::string why) {
      if (why.ends_with('.')) why.pop_back();  // a sentence inside the warning's parentheses
      unanswered.push_back(node + " (" + why + ")");
      unanswered_json.push_back({{"node", node}, {"error", why}});
    };
    // The local daemon first: with spawner.log_root its list is every daemon's.
    const Answer local = asker_.ask(log_files_request(""));
    if (local.code != 0) return fail(local);
    add_listed(local.reply, found);
    if (!flag(local.reply, "shared")) {
      const Answer nodes = asker_.ask({{"verb", "nodes"}});
      if (nodes.code != 0) return fail(nodes);
      const std::string self = str(local.reply, "node");
      const json& members = member(nodes.reply, "members");
      for (const json& m : members.is_array() ? members : json::array()) {
        const std::string name = str(m, "name");
        if (name.empty() || name == self) continue;
        const std::string state = str(m, "state");
        if (state == "dead" || state == "left") {  // it would only time out
          note(name, state + ", not asked");
          continue;
        }
        const Answer listed = asker_.ask(log_files_request(name));
        if (listed.code == kExitNoPermission) return fail(listed);
        if (listed.code != 0) {
          note(name, listed.error);
          continue;
        }
        add_listed(listed.reply, found);
      }
    }
    std::vector<json> replies;
    for (const auto& [key, where] : found) {
      const int code = print_file(key.first, key.second, where.node, replies, note);
      if (code != 0) return code;
    }
    if (as_json_) {
      std::cout << dump(json{{"ok", true},
                             {"job", job_},
                             {"logs", replies},
                             {"unanswered", unanswered_json}})
                << "\n";
    }
    std::cout.flush();
    if (!unanswered.empty()) {
      std::cerr << "elasticctl: warning: no logs from ";
      for (std::size_t i = 0; i < unanswered.size(); ++i) {
        std::cerr << (i > 0 ? ", " : "") << unanswered[i];
      }
      std::cerr << "; what they hold is not shown\n";
    }
    if (found.empty() && !as_json_) {
      std::cerr << "elasticctl: job " << job_ << " has no worker logs"
                << (round_ ? " of round " + std::to_string(*round_) : std::string())
                << (only_rank_ ? " of rank " + std::to_string(*only_rank_) : std::string())
                << (unanswered.empty() ? "" : " on the nodes that answered") << "\n";
      return round_ ? kExitRefused : 0;
    }
    return 0;
  }

  // Prints one round's file of one rank whole, from the node that listed it.
  template <typename Note>
  int print_file(std::uint64_t round, std::uint32_t rank, const std::string& node,
                 std::vector<json>& replies, const Note& note) {
    const bool raw = round_ && only_rank_;
    const std::string prefix =
        all_ ? "[round " + std::to_string(round) + " rank " + std::to_string(rank) + "] "
             : "[rank " + std::to_string(rank) + "] ";
    std::string partial;
    std::uint64_t offset = 0;
    std::optional<std::uint64_t> end;  // the size when first read: a live file is not chased
    for (;;) {
      json request = logs_request(rank, node, round, kMaxListedChunk);
      request["offset"] = offset;
      const Answer answer = asker_.ask(request);
      if (answer.code == kExitNoPermission) return fail(answer);
      if (answer.code != 0) {
        note(node, answer.error);
        break;
      }
      if (as_json_) replies.push_back(answer.reply);
      const std::string data = str(answer.reply, "data");
      if (!end)
        end = static_cast<std::uint64_t>(std::max<std::int64_t>(num(answer.reply, "size"), 0));
      offset = static_cast<std::uint64_t>(std::max<std::int64_t>(
          num(answer.reply, "offset", static_cast<std::int64_t>(offset)), 0));
      if (!as_json_) {
        if (raw) {
          std::cout << data;
        } else {
          emit_lines(prefix, data, partial);
        }
      }
      if (data.empty() || offset >= *end || flag(answer.reply, "rotated")) break;
    }
    if (!partial.empty()) emit_lines(prefix, "\n", partial);
    std::cout.flush();
    return 0;
  }

  std::string socket_;
  std::string job_;
  std::optional<std::uint32_t> only_rank_;
  bool follow_;
  bool as_json_;
  std::optional<std::uint64_t> round_;  // --round
  bool all_;                            // --all
  PatientAsker asker_;
  std::map<std::uint32_t, RankCursor> cursors_;
  std::map<std::uint32_t, std::string> rank_nodes_;  // rank -> the daemon that runs it
  std::optional<std::uint64_t> job_round_;           // the round of that rank map
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

// ---- logs -------------------------------------------------------------------------------------

int logs_command(const std::string& socket, const std::string& job, const LogsOptions& options) {
  return LogReader(socket, job, options).run();
}

}  // namespace elastic::ctl
