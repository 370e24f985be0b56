#include "ctl/submit.h"

#include "ctl/common.h"

namespace elastic::ctl {
namespace {

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

}  // namespace

void SubmitVerb::add(CLI::App& app) {
  submit_ = app.add_subcommand(
      "submit",
      "Submit a job: elasticctl submit [JOB.toml] [flags] [-- COMMAND ARGS...]; flags override "
      "the file, -- COMMAND replaces its command");
  submit_->add_option("jobfile", job_file_, "A TOML job file (examples/*.toml)");
  name_opt_ = submit_->add_option("--name", name_, "Job name ([A-Za-z0-9._-], at most 64)");
  nodes_opt_ =
      submit_->add_option("--nodes", nodes_, "MIN:MAX nodes, or N for exactly N (default 1)");
  workers_opt_ = submit_->add_option(
      "--workers-per-node,--gpus-per-node", workers_per_node_,
      "Workers per node; 0 = one per GPU, or per CPU slot on hosts without GPUs (default 0)");
  restarts_opt_ = submit_->add_option("--max-restarts", max_restarts_,
                                      "Worker failures tolerated before the job fails (default 3)");
  backoff_opt_ = submit_->add_option("--restart-backoff", restart_backoff_,
                                     "Pause after a worker failure (default 1s)");
  last_call_opt_ = submit_->add_option(
      "--last-call", last_call_, "Wait this long for more nodes past MIN (default: the daemon's)");
  hang_opt_ = submit_->add_option(
      "--hang-timeout", hang_timeout_,
      "Fail a rank that is stuck this long after its last step (at least 5s). Default: for "
      "workers that send alive (elastic-trainer) 10 step times, at least 30s; for others, "
      "which only report progress, off; 0s turns it off for both");
  ckpt_opt_ = submit_->add_option(
      "--checkpoint-root", checkpoint_root_,
      "Shared checkpoint directory; relative to the cwd (default: the daemon's checkpoint.root)");
  workdir_opt_ = submit_->add_option(
      "--workdir,--working-dir", working_dir_,
      "Workers' working directory; relative to the cwd (default: the cwd; '' = the user's home)");
  submit_->add_option("--env", env_pairs_, "NAME=VALUE for the workers (repeatable)")
      ->allow_extra_args(false);
  export_opt_ = submit_->add_option(
      "--export", export_setting_,
      "Your environment to pass to the workers, as sbatch: ALL (default), NONE or VAR,VAR,... "
      "(never host-specific ones such as HOSTNAME, SSH_*, DISPLAY, SLURM_*); --env beats it");
  warm_opt_ = submit_->add_flag(
      "--warm,!--no-warm", warm_,
      "Keep a started Python interpreter (torch imported) per slot for the next round; the "
      "command must be python [OPTIONS] SCRIPT|-m MODULE [ARGS]");
  priority_opt_ = submit_->add_option(
      "--priority", priority_,
      "Higher is served first and may take nodes from lower ones (default 0; above the "
      "daemon's limits.priority_ceiling needs an admin)");
  preemptible_opt_ = submit_->add_flag(
      "--preemptible,!--no-preemptible", preemptible_,
      "A job of higher priority may suspend this one whole (requeued, resumed from its "
      "checkpoint); otherwise it is only shrunk to its min");
  scale_opt_ = submit_->add_option(
      "--scale", scale_,
      "fixed (default: as many nodes as it gets, up to MAX) or throughput (from MIN, one node at "
      "a time while samples per second improve)");
  scale_gain_opt_ = submit_->add_option(
      "--scale-min-gain", scale_min_gain_,
      "throughput: the gain an added node must bring, a fraction above 0 and at most 1 "
      "(default 0.05)");
  scale_window_opt_ =
      submit_->add_option("--scale-window", scale_window_,
                          "throughput: how long each size is measured, 10s..1h (default 60s)");
  submit_->add_flag("--wait", wait_,
                    "Follow the job until it ends: exit 0 succeeded, 3 failed, 4 cancelled");
  submit_->add_flag("--dry-run", dry_run_,
                    "Check the spec and print it as JSON; send nothing to the daemon");
  add_json_flag(submit_, as_json_);
}

bool SubmitVerb::parsed() const { return submit_->parsed(); }

JobOverrides SubmitVerb::overrides(const std::optional<std::vector<std::string>>& command) const {
  JobOverrides flags;
  if (name_opt_->count() > 0) flags.name = name_;
  if (command) flags.command = *command;
  flags.env = env_pairs_;
  if (nodes_opt_->count() > 0) flags.nodes = nodes_;
  if (workers_opt_->count() > 0) flags.workers_per_node = workers_per_node_;
  if (restarts_opt_->count() > 0) flags.max_restarts = max_restarts_;
  if (backoff_opt_->count() > 0) flags.restart_backoff = restart_backoff_;
  if (last_call_opt_->count() > 0) flags.last_call = last_call_;
  if (hang_opt_->count() > 0) flags.hang_timeout = hang_timeout_;
  if (ckpt_opt_->count() > 0) flags.checkpoint_root = checkpoint_root_;
  if (workdir_opt_->count() > 0) flags.working_dir = working_dir_;
  if (export_opt_->count() > 0) flags.export_setting = export_setting_;
  if (warm_opt_->count() > 0) flags.warm = warm_;
  if (priority_opt_->count() > 0) flags.priority = priority_;
  if (preemptible_opt_->count() > 0) flags.preemptible = preemptible_;
  if (scale_opt_->count() > 0) flags.scale = scale_;
  if (scale_gain_opt_->count() > 0) flags.scale_min_gain = scale_min_gain_;
  if (scale_window_opt_->count() > 0) flags.scale_window = scale_window_;
  return flags;
}

int SubmitVerb::run(const std::string& socket,
                    const std::optional<std::vector<std::string>>& command) const {
  std::optional<JobFile> file;
  if (!job_file_.empty()) {
    JobFileError kind = JobFileError::kInvalid;
    auto read = read_job_file(job_file_, &kind);
    if (!read.ok()) {
      std::cerr << read.error().message << "\n";
      if (kind == JobFileError::kInvalid) {
        std::cerr << "elasticctl: the job spec is invalid; nothing was submitted\n";
      }
      if (kind == JobFileError::kUnreadable && !job_file_.ends_with(".toml")) {
        std::cerr << "elasticctl: (a job's command goes after --: elasticctl submit --name N "
                     "-- "
                  << job_file_ << " ...)\n";
      }
      return kind == JobFileError::kUnreadable ? kExitNoInput : kExitDataError;
    }
    file = std::move(*read);
  }
  auto caller = current_caller();
  if (!caller.ok()) {
    std::cerr << "elasticctl: " << caller.error().message << "\n";
    return kExitDataError;
  }
  auto spec = build_job_spec(file ? &*file : nullptr, overrides(command), *caller);
  // The program as the submitter's shell would find it (a venv's python3, not the daemon's).
  if (spec.ok()) {
    if (elastic::Status resolved = resolve_command(&*spec, *caller); !resolved.ok()) {
      spec = resolved.error();
    }
  }
  if (!spec.ok()) {
    std::cerr << spec.error().message << "\n"
              << "elasticctl: the job spec is invalid; nothing was submitted\n";
    return kExitDataError;
  }
  const json spec_json = json::parse(elastic::rendezvous::to_json(*spec), nullptr, false);
  const json submit_request{{"verb", "submit"}, {"spec", spec_json}};
  // The daemon closes a connection whose request is over the frame limit: say why here.
  if (const std::string too_big = oversized_request_problem(*spec, submit_request.dump().size(),
                                                            elastic::control::kMaxRequestBytes);
      !too_big.empty()) {
    std::cerr << too_big << "\n"
              << "elasticctl: the job spec is invalid; nothing was submitted\n";
    return kExitDataError;
  }
  if (dry_run_) {
    std::cout << dump(spec_json) << "\n";
    return 0;
  }
  json reply;
  const int code = ask_or_report(socket, submit_request, kLeaderTimeout, reply);
  if (code != 0) return code;
  const std::string id = str(member(reply, "job"), "id");
  if (as_json_ && !wait_) {
    std::cout << dump(reply) << "\n";
    return 0;
  }
  (as_json_ ? std::cerr : std::cout)
      << "submitted " << id << (flag(reply, "duplicate") ? " (already submitted)" : "")
      << std::endl;
  return wait_ ? wait_for_job(socket, id, as_json_) : 0;
}

}  // namespace elastic::ctl
