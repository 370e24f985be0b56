#include "ctl/jobs.h"

#include "ctl/common.h"
#include "ctl/job_file.h"
#include "ctl/refresh.h"
#include "daemon/core/duration.h"
#include "daemon/rendezvous/job_spec.h"

namespace elastic::ctl {
namespace {

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

// Why a job waits, with its place in the queue ("#2: waiting for 3 nodes, 1 free fits"), when
// the leader's scheduler says so; "" otherwise.
std::string waiting_text(const json& job) {
  const std::string waiting = str(job, "waiting");
  const std::int64_t position = num(job, "position");
  if (position <= 0) return waiting;
  return "#" + std::to_string(position) + (waiting.empty() ? "" : ": " + waiting);
}

void print_jobs_table(const json& reply) {
  std::vector<std::vector<std::string>> rows = {
      {"JOB", "STATE", "PRIO", "ROUND", "NODES", "WORLD", "RESTARTS", "USER", "REASON"}};
  const json& jobs = member(reply, "jobs");
  if (jobs.is_array()) {
    for (const json& job : jobs) {
      // A waiting job's reason is why it waits; the last state change says less.
      const std::string waiting = waiting_text(job);
      rows.push_back({cell(job, "id"), cell(job, "state"), std::to_string(num(job, "priority")),
                      cell(job, "round"), std::to_string(nodes_of(job)),
                      std::to_string(world_of(job)), cell(job, "restarts"),
                      cell(member(job, "spec"), "user"),
                      waiting.empty() ? cell(job, "reason") : waiting});
    }
  }
  print_table(rows);
}

int jobs_command(const std::string& socket, bool as_json) {
  json reply;
  if (int code = ask_or_report(socket, {{"verb", "jobs"}}, kLeaderTimeout, reply)) return code;
  if (as_json) {
    std::cout << dump(reply) << "\n";
    return 0;
  }
  print_jobs_table(reply);
  return 0;
}

// jobs --watch: the table again every `interval` until a stop signal (exit 0). On a terminal
// each refresh replaces the screen; into a pipe or file refreshes follow each other, each
// after a line with the time. --json prints one compact reply per line instead. A daemon that
// does not answer the first request ends the watch with its exit code; later failures are
// printed (stderr) and the watch goes on, as `watch` does across a daemon restart. Requests
// have the local timeout: Ctrl-C waits for the one in flight, and during an election the
// watch says so and tries again at the next refresh rather than hanging 15 s.
int watch_jobs(const std::string& socket, std::chrono::milliseconds interval, bool as_json) {
  StopSignals signals;
  const bool screen = !as_json && ::isatty(STDOUT_FILENO) == 1;
  for (bool first = true; !signals.stopped(); first = false) {
    Answer answer = ask(socket, {{"verb", "jobs"}}, kLocalTimeout);
    if (first && !answer.answered()) {
      std::cerr << "elasticctl: " << answer.error << "\n";
      return answer.code;
    }
    if (as_json) {
      if (answer.code == 0) {
        std::cout << answer.reply.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
      }
    } else {
      if (screen) std::cout << "\x1b[H\x1b[2J";
      const auto now_ms = std::chrono::duration_cast<milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
      std::cout << "every " << format_duration(interval) << ": elasticctl jobs  "
                << local_time(now_ms) << "\n";
      if (answer.code == 0) print_jobs_table(answer.reply);
      if (!screen) std::cout << "\n";
    }
    std::cout << std::flush;
    if (answer.code != 0) std::cerr << "elasticctl: " << answer.error << "\n";
    signals.wait(interval);
  }
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

std::string rate_text(double rate) {
  char text[32];
  std::snprintf(text, sizeof(text), rate >= 100 ? "%.0f" : "%.1f", rate);
  return text;
}

// "throughput: 2 nodes, settled (samples/s 320 at 1, 640 at 2, 641 at 3)"; "" for a fixed job.
std::string scale_text(const json& job) {
  const json& scale = member(job, "scale");
  if (!scale.is_object()) return "";
  std::string text = "throughput: " + std::to_string(num(scale, "size")) +
                     (num(scale, "size") == 1 ? " node" : " nodes") +
                     (flag(scale, "settled") ? ", settled" : ", measuring");
  const json& rates = member(scale, "samples_per_s");
  if (rates.is_object() && !rates.empty()) {
    std::vector<std::pair<long long, double>> sorted;
    for (const auto& [nodes, rate] : rates.items()) {
      if (rate.is_number()) sorted.emplace_back(std::atoll(nodes.c_str()), rate.get<double>());
    }
    std::sort(sorted.begin(), sorted.end());
    text += " (samples/s";
    for (std::size_t i = 0; i < sorted.size(); ++i) {
      text += (i == 0 ? " " : ", ") + rate_text(sorted[i].second) + " at " +
              std::to_string(sorted[i].first);
    }
    text += ")";
  }
  return text;
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
            << "priority: " << num(job, "priority")
            << (flag(job, "preemptible") ? " (preemptible)" : "") << "\n";
  if (const std::string waiting = waiting_text(job); !waiting.empty()) {
    std::cout << "waiting:  " << waiting << "\n";
  }
  if (const std::string scale = scale_text(job); !scale.empty()) {
    std::cout << "scale:    " << scale << "\n";
  }
  if (const json& rate = member(job, "samples_per_s"); rate.is_number()) {
    std::cout << "speed:    " << rate_text(rate.get<double>()) << " samples/s\n";
  }
  std::cout << "user:     " << cell(spec, "user") << "\n"
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
    // A script that reports no progress has no first step to wait for.
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

// cancel, suspend, resume and priority: one request about one job, answered with the job;
// `done` is what to print ("cancelled train-3").
int job_change_command(const std::string& socket, const json& request, const std::string& done,
                       bool as_json) {
  json reply;
  const int code = ask_or_report(socket, request, kLeaderTimeout, reply);
  if (code != 0) return code;
  if (as_json) {
    std::cout << dump(reply) << "\n";
  } else {
    std::cout << done << "\n";
  }
  return 0;
}

int cancel_command(const std::string& socket, const std::string& id, bool as_json) {
  return job_change_command(socket, {{"verb", "cancel"}, {"job", id}}, "cancelled " + id, as_json);
}

int priority_command(const std::string& socket, const std::string& id, const std::string& text,
                     bool as_json) {
  const Result<std::int32_t> priority = parse_priority(text);
  if (!priority.ok()) {
    std::cerr << "elasticctl: priority: " << priority.error().message << "\n";
    return cfg::kExitUsage;
  }
  if (*priority < rendezvous::kMinPriority || *priority > rendezvous::kMaxPriority) {
    std::cerr << "elasticctl: priority: " << *priority << " is outside " << rendezvous::kMinPriority
              << ".." << rendezvous::kMaxPriority << "\n";
    return cfg::kExitUsage;
  }
  return job_change_command(socket, {{"verb", "priority"}, {"job", id}, {"priority", *priority}},
                            "priority of " + id + " is now " + std::to_string(*priority), as_json);
}

}  // namespace

void JobVerbs::add_status(CLI::App& app) {
  status_ = app.add_subcommand(
      "status", "Show the local daemon (identity, members, Raft, rounds), or one job");
  status_->add_option("job", job_, "Show this job instead of the daemon");
  add_json_flag(status_, as_json_);
}

void JobVerbs::add_jobs(CLI::App& app) {
  jobs_ = app.add_subcommand(
      "jobs", "List the jobs the leader knows; --watch: again every --interval until Ctrl-C");
  CLI::Option* watch =
      jobs_->add_flag("--watch", watch_,
                      "Print the list again every --interval until Ctrl-C (exit 0); with --json "
                      "one reply per line");
  add_interval_option(jobs_, interval_);
  jobs_->get_option("--interval")->needs(watch);
  add_json_flag(jobs_, as_json_);
}

void JobVerbs::add_cancel(CLI::App& app) {
  cancel_ = app.add_subcommand("cancel", "Cancel a job");
  cancel_->add_option("job", job_, "The job id (elasticctl jobs)")->required();
  add_json_flag(cancel_, as_json_);
}

void JobVerbs::add_priority(CLI::App& app) {
  priority_ =
      app.add_subcommand("priority",
                         "Change a job's priority (its owner, root or control.admin_group; above "
                         "limits.priority_ceiling admins only)");
  priority_->add_option("job", job_, "The job id (elasticctl jobs)")->required();
  priority_->add_option("priority", priority_text_, "The new priority, -1000000..1000000")
      ->required();
  add_json_flag(priority_, as_json_);
}

void JobVerbs::add_suspend(CLI::App& app) {
  suspend_ = app.add_subcommand(
      "suspend",
      "Hold a job: its workers stop and it waits, keeping its place and checkpoint, until resumed "
      "(its owner, root or control.admin_group)");
  suspend_->add_option("job", job_, "The job id (elasticctl jobs)")->required();
  add_json_flag(suspend_, as_json_);
  resume_ = app.add_subcommand("resume", "Queue a suspended job again (from its checkpoint)");
  resume_->add_option("job", job_, "The job id (elasticctl jobs)")->required();
  add_json_flag(resume_, as_json_);
}

void JobVerbs::add_events(CLI::App& app) {
  events_ = app.add_subcommand("events",
                               "Show job state changes (replicated), the leader's cluster events "
                               "(members, elections, drains, rounds) and recovery incident "
                               "timelines, oldest first; cluster events and incidents are the "
                               "leader's memory, lost when leadership moves");
  events_->add_option("job", job_, "Only this job");
  events_->add_option("--limit", limit_, "At most the last N events")->check(CLI::PositiveNumber);
  add_json_flag(events_, as_json_);
}

bool JobVerbs::parsed() const {
  return status_->parsed() || jobs_->parsed() || cancel_->parsed() || priority_->parsed() ||
         suspend_->parsed() || resume_->parsed() || events_->parsed();
}

int JobVerbs::run(const std::string& socket) const {
  if (status_->parsed()) {
    return job_.empty() ? status_command(socket, as_json_)
                        : job_status_command(socket, job_, as_json_);
  }
  if (jobs_->parsed() && watch_) return watch_jobs(socket, *parse_interval(interval_), as_json_);
  if (jobs_->parsed()) return jobs_command(socket, as_json_);
  if (cancel_->parsed()) return cancel_command(socket, job_, as_json_);
  if (priority_->parsed()) return priority_command(socket, job_, priority_text_, as_json_);
  if (suspend_->parsed() || resume_->parsed()) {
    const bool resume = resume_->parsed();
    return job_change_command(socket, {{"verb", resume ? "resume" : "suspend"}, {"job", job_}},
                              (resume ? "resumed " : "suspended ") + job_, as_json_);
  }
  return events_command(socket, job_, limit_, as_json_);
}

}  // namespace elastic::ctl
