#include "daemon/node/job_supervisor.h"

#include <algorithm>
#include <cmath>
#include <cctype>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <utility>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "daemon/core/duration.h"
#include "daemon/node/round_report.h"
#include "daemon/node/warm_standbys.h"
#include "daemon/rendezvous/node_ledger.h"
#include "daemon/rendezvous/placeholders.h"
#include "daemon/rendezvous/python_command.h"

namespace elastic::node {
namespace {

using json = nlohmann::json;

struct UserInfo {
  std::string name;
  std::string home;
  std::string shell;
};

UserInfo user_info(const Host& host, std::uint32_t uid) {
  UserInfo info{.name = std::to_string(uid), .home = "/", .shell = "/bin/sh"};
  if (const std::optional<control::Account> account = host.account(uid)) {
    info.name = account->name;
    if (!account->home.empty()) info.home = account->home;
    if (!account->shell.empty()) info.shell = account->shell;
  }
  return info;
}

// Who the job's workers run as, with its supplementary groups' name: the submitting user under a
// root daemon, else the daemon's own uid (a daemon that is not root runs workers as itself).
spawner::RunAs run_as_owner(const Host& host, const rendezvous::JobSpec& spec) {
  const bool root = host.euid() == 0;
  spawner::RunAs as{
      .uid = root ? spec.uid : host.euid(), .gid = root ? spec.gid : host.egid(), .user = ""};
  if (const std::optional<control::Account> account = host.account(as.uid)) {
    as.user = account->name;
  }
  return as;
}

}  // namespace

const rendezvous::RankAssignment* self_entry(const RoundStart& start, const std::string& self,
                                             std::uint32_t* group_rank) {
  for (std::size_t i = 0; i < start.round.ranks.size(); ++i) {
    if (start.round.ranks[i].node == self) {
      *group_rank = static_cast<std::uint32_t>(i);
      return &start.round.ranks[i];
    }
  }
  return nullptr;
}

namespace {

// The step and mtime of <dir>/LATEST ("step-000001200"), if it names one. The directory is the
// user's: it is read as the job's user (any symlink on the way, or a directory the user may not
// enter, gets the user's answer, not root's), the last component is not followed and a FIFO
// planted there does not block (read_file_as), and only a number is taken from the file.
std::optional<CheckpointInfo> read_latest(const Host& host, const std::string& dir,
                                          const spawner::RunAs& user) {
  const Result<spawner::FileBytes> file = host.read_file_as(user, dir + "/LATEST", 127);
  if (!file.ok()) return std::nullopt;
  const std::string& line = file->bytes;
  constexpr std::string_view kPrefix = "step-";
  if (line.rfind(kPrefix, 0) != 0) return std::nullopt;
  std::int64_t step = 0;
  std::size_t digits = 0;
  for (std::size_t i = kPrefix.size();
       i < line.size() && std::isdigit(static_cast<unsigned char>(line[i])); ++i) {
    if (++digits > 18) return std::nullopt;
    step = step * 10 + (line[i] - '0');
  }
  if (digits == 0) return std::nullopt;
  return CheckpointInfo{.job = "", .step = step, .at_ms = file->mtime_ms};
}

}  // namespace

JobSupervisor::JobSupervisor(std::string self, const config::Current& config,
                             std::unique_ptr<spawner::Launcher> spawner, topology::Plan plan,
                             PortProbe port_in_use, const Clock& clock, Host& host)
    : clock_(&clock),
      host_(&host),
      self_(std::move(self)),
      config_(config),
      spawner_(std::move(spawner)),
      plan_(std::move(plan)),
      port_in_use_(std::move(port_in_use)),
      // spawner.log_root (shared by every daemon) wins over this daemon's own log_dir.
      logs_(!config.get().spawner.log_root.empty() ? config.get().spawner.log_root
            : config.get().spawner.log_dir.empty() ? config.get().node.state_dir + "/logs"
                                                   : config.get().spawner.log_dir,
            config.get().spawner.log_rounds_kept, self_, host) {
  const std::string exe = host.executable();
  python_dir_ = resolve_python_dir(config_.get().spawner.python_dir, exe, host);
  if (config_.get().spawner.python_dir == "auto" && python_dir_.empty()) {
    spdlog::debug(
        "spawner.python_dir = \"auto\": no elastic_worker.py installed next to {}; "
        "workers' PYTHONPATH gets nothing added",
        exe);
  }
}

std::string resolve_python_dir(const std::string& setting, const std::string& exe,
                               const Host& host) {
  if (setting != "auto") return setting;
  if (exe.empty()) return "";
  const std::filesystem::path dir =
      (std::filesystem::path(exe).parent_path().parent_path() / "share/elastic/python")
          .lexically_normal();
  const std::optional<FileInfo> module =
      host.stat((dir / "elastic_worker.py").string(), Follow::kYes);
  return module && module->kind == FileInfo::Kind::kRegular ? dir.string() : "";
}

bool JobSupervisor::on_round(TimePoint now, const RoundStart& start) {
  const std::string& id = start.round.job_id;
  if (owners_.size() >= 10'000 && !owners_.contains(id)) owners_.erase(owners_.begin());
  owners_[id] = start.spec.uid;
  Job& job = jobs_[id];
  if (job.current && job.current->round.round == start.round.round) {
    return job.started && !job.failure;
  }
  if (job.current && job.current->round.round > start.round.round) return false;
  if (start.hold_live && plan_offer(job, start)) {
    if (job.held != start.round.round) {
      job.held = start.round.round;
      spdlog::info("job {} round {}: this node's workers keep training in round {} until the "
                   "round's new members are ready",
                   id, start.round.round, job.current->round.round);
    }
    return false;
  }
  // A grow, or a shrink the scheduler chose (a preemption, throughput scaling), changes a healthy
  // round: its workers get TERM and the grace to checkpoint. After a failure the old round's
  // collectives are broken: SIGKILL at once.
  const auto reason = start.round.reason;
  const StopMode mode = reason == rendezvous::RoundReason::kGrow ||
                                reason == rendezvous::RoundReason::kPreempted ||
                                reason == rendezvous::RoundReason::kScaled
                            ? StopMode::kGraceful
                            : StopMode::kKill;
  // The old round's newest progress still counts (the leader measures steps lost with it).
  end_progress_round(now, job);
  if (offer_round(now, id, job, start)) return false;  // acknowledged once they joined
  job.held = 0;
  stop_workers(now, job, mode);
  job.current = start;
  job.standbys_at = kNever;
  for (auto& [slot, standby] : standbys_) {
    if (standby.job == id) standby.linger_until = kNever;  // this round may take them
  }
  job.started = false;
  job.failure.reset();
  job.done = false;
  job.joining.clear();
  job.live_acked = false;
  try_start(now, id, job);
  return job.started && !job.failure;
}

void JobSupervisor::stop_job(TimePoint now, const std::string& id, StopMode mode,
                             const std::string& why, bool final) {
  if (final) {
    end_standbys(id, why);
  } else {
    for (auto& [slot, standby] : standbys_) {
      if (standby.job == id)
        standby.linger_until = std::min(standby.linger_until, now + kStandbyLinger);
    }
  }
  const auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  Job& job = it->second;
  job.standbys_at = kNever;
  const bool any = std::any_of(job.workers.begin(), job.workers.end(),
                               [](const Worker& w) { return !w.exit && !w.stopping; });
  if (any) {
    spdlog::info("job {}: stopping this node's workers ({}; {})", id, why,
                 mode == StopMode::kKill ? "SIGKILL now" : "SIGTERM, SIGKILL after the grace");
  }
  end_progress_round(now, job);
  job.current.reset();
  job.held = 0;
  job.started = false;
  job.failure.reset();
  job.done = false;
  stop_workers(now, job, mode);
  // Workers that had exited already are done with; the job is forgotten once the rest exit.
  std::erase_if(job.workers, [](const Worker& w) { return w.exit.has_value(); });
}

void JobSupervisor::stop_workers(TimePoint now, Job& job, StopMode mode) {
  for (Worker& w : job.workers) {
    if (w.exit) continue;
    if (mode == StopMode::kKill) {
      // A hung worker's SIGKILL is due at the end of its abort grace: its stacks get printed.
      if (!w.aborting) spawner_->kill(w.id);
    } else if (!w.stopping) {
      spawner_->stop(now, w.id);
    }
    w.stopping = true;
  }
}

std::set<std::uint32_t> JobSupervisor::busy_slots() const {
  std::set<std::uint32_t> busy;
  for (const auto& [id, job] : jobs_) {
    for (const Worker& w : job.workers) {
      if (!w.exit) busy.insert(w.slot);
    }
  }
  return busy;
}

void JobSupervisor::try_start(TimePoint now, const std::string& id, Job& job) {
  if (!job.current || job.started) return;
  // The old round's workers must be gone first (see the header comment).
  for (const Worker& w : job.workers) {
    if (!w.exit) return;
  }
  job.workers.clear();
  const RoundStart& start = *job.current;
  std::uint32_t group_rank = 0;
  const rendezvous::RankAssignment* entry = self_entry(start, self_, &group_rank);
  if (entry == nullptr) return;
  const std::set<std::uint32_t> busy = busy_slots();
  std::vector<std::uint32_t> free;
  for (const topology::Slot& slot : plan_.slots) {
    if (!busy.contains(slot.index)) free.push_back(slot.index);
  }
  // A warm job takes the slots that hold its standbys first.
  auto holds_standby = [&](std::uint32_t slot) {
    const auto s = standbys_.find(slot);
    return s != standbys_.end() && s->second.job == id;
  };
  std::stable_partition(free.begin(), free.end(), holds_standby);
  if (free.size() < entry->slots) {
    // Another job's old workers are still stopping; their exits call try_start again. A
    // leader that planned more slots than this node has is reported as a failure.
    if (entry->slots > plan_.slots.size()) {
      job.started = true;
      fail(now, id, job, start.round.round, entry->first_rank,
           "node " + self_ + " has " + std::to_string(plan_.slots.size()) + " slots, not " +
               std::to_string(entry->slots));
    }
    return;
  }
  job.started = true;
  // The store runs in rank 0's worker: a port another process holds would fail it and cost the
  // job a restart for someone else's socket. The leader picks another port instead.
  if (entry->first_rank == 0 && port_in_use_) {
    const std::uint16_t port = rendezvous::endpoint_port(start.round.store_endpoint);
    if (port != 0 && port_in_use_(port)) {
      const std::string detail = "another process on node " + self_ + " holds TCP port " +
                                 std::to_string(port) + " before rank 0's store could bind it";
      spdlog::warn("job {} round {}: {}; starting no workers", id, start.round.round, detail);
      RoundReport conflict = round_report(ReportKind::kStorePortBusy, id, start.round.round);
      conflict.detail = detail;
      conflict.port = port;
      job.failure = conflict;
      reports_.push_back(std::move(conflict));
      next_report_ = std::min(next_report_, now + kReportResend);
      return;
    }
  }
  // The owner file and the bound on kept rounds; the workers start either way (the spawner
  // reports a log it cannot open).
  if (Status logs = logs_.start_round(id, start.round.round, start.spec.uid); !logs.ok()) {
    spdlog::warn("job {} round {}: {}", id, start.round.round, logs.error().message);
  }
  for (std::uint32_t local = 0; local < entry->slots; ++local) {
    if (!start_rank(now, id, job, local, free[local])) return;
  }
  if (start.spec.warm) job.standbys_at = now + kStandbyDelay;
  reports_.push_back(round_report(ReportKind::kRoundAck, id, start.round.round));
}

bool JobSupervisor::start_rank(TimePoint now, const std::string& id, Job& job, std::uint32_t local,
                               std::uint32_t slot) {
  const RoundStart& start = *job.current;
  std::uint32_t group_rank = 0;
  const std::uint32_t rank = self_entry(start, self_, &group_rank)->first_rank + local;
  // Another job's standby would share the slot's GPU with this rank.
  const auto standby = standbys_.find(slot);
  if (standby != standbys_.end() && standby->second.job != id) {
    end_standby(slot, "job " + id + " takes its slot");
  }
  auto spec = worker_spec(start, local, slot);
  std::optional<spawner::WorkerId> warm;
  if (spec.ok() && start.spec.warm) warm = hand_to_standby(id, slot, *spec);
  Result<spawner::Spawned> spawned = warm        ? Result<spawner::Spawned>(spawner::Spawned{*warm, {}})
                                     : spec.ok() ? spawner_->start(now, *spec)
                                                 : Result<spawner::Spawned>(spec.error());
  if (!spawned.ok()) {
    const std::string detail = "rank " + std::to_string(rank) + " on node " + self_ +
                               " could not start: " + spawned.error().message;
    spdlog::error("job {} round {}: {}", id, start.round.round, detail);
    fail(now, id, job, start.round.round, rank, detail);
    return false;
  }
  Worker w;
  w.id = spawned->id;
  w.round = start.round.round;
  w.rank = rank;
  w.slot = slot;
  w.pid = spawner_->pid(w.id).value_or(0);
  if (spawned->channel.valid()) {
    w.channel = std::make_shared<Worker::Channel>(Worker::Channel{
        worker_channel::WorkerEndpoint(id + " rank " + std::to_string(rank),
                                       std::move(spawned->channel)),
        worker_channel::WorkerLink(now)});
    watch_channel(*w.channel, /*added=*/true);
  }
  job.workers.push_back(w);
  ++job.live[w.round];
  spdlog::info("job {} round {}: rank {} started (pid {}, slot {}{})", id, start.round.round, rank,
               w.pid, slot, warm ? ", in its warm standby" : "");
  return true;
}

Result<spawner::WorkerSpec> JobSupervisor::worker_spec(const RoundStart& start, std::uint32_t local,
                                                       std::uint32_t slot) const {
  const rendezvous::JobSpec& spec = start.spec;
  const std::string& id = start.round.job_id;
  std::uint32_t group_rank = 0;
  const rendezvous::RankAssignment* entry = self_entry(start, self_, &group_rank);
  const std::uint32_t rank = entry->first_rank + local;
  const std::uint32_t euid = host_->euid();
  const std::uint32_t egid = host_->egid();
  const bool root = euid == 0;
  const std::uint32_t uid = root ? spec.uid : euid;
  const std::uint32_t gid = root ? spec.gid : egid;
  const UserInfo user = user_info(*host_, uid);
  const topology::Slot& plan_slot = plan_.slots.at(slot);

  spawner::WorkerSpec w;
  w.label = id + " rank " + std::to_string(rank);
  w.argv = spec.command;
  const std::optional<std::string> path = host_->env("PATH");
  w.env["PATH"] = path && !path->empty() ? *path : "/usr/local/bin:/usr/bin:/bin";
  w.env["HOME"] = user.home;
  w.env["USER"] = user.name;
  w.env["LOGNAME"] = user.name;
  w.env["SHELL"] = user.shell;
  if (const std::optional<std::string> lang = host_->env("LANG")) w.env["LANG"] = *lang;
  const std::string master_addr = rendezvous::endpoint_host(start.round.store_endpoint);
  const std::uint16_t master_port = rendezvous::endpoint_port(start.round.store_endpoint);
  const std::uint64_t world = rendezvous::world_size(start.round.ranks);
  w.env["RANK"] = std::to_string(rank);
  w.env["LOCAL_RANK"] = std::to_string(local);
  w.env["WORLD_SIZE"] = std::to_string(world);
  w.env["LOCAL_WORLD_SIZE"] = std::to_string(entry->slots);
  w.env["GROUP_RANK"] = std::to_string(group_rank);
  w.env["GROUP_WORLD_SIZE"] = std::to_string(start.round.ranks.size());
  w.env["ROLE_RANK"] = std::to_string(rank);
  w.env["ROLE_WORLD_SIZE"] = std::to_string(world);
  w.env["ROLE_NAME"] = "default";
  w.env["MASTER_ADDR"] = master_addr;
  w.env["MASTER_PORT"] = std::to_string(master_port);
  // Per node, as torchrun counts per agent (rendezvous/planner.h, make_open_round).
  w.env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(entry->restarts);
  w.env["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(spec.max_restarts);
  w.env["TORCHELASTIC_RUN_ID"] = id;
  w.env["ELASTIC_JOB_ID"] = id;
  w.env["ELASTIC_ROUND"] = std::to_string(start.round.round);
  w.env["ELASTIC_NODE"] = self_;
  w.env["ELASTIC_SLOT"] = std::to_string(slot);
  w.env["ELASTIC_CONTROL_SOCKET"] = config_.get().control.socket;
  w.env["OMP_NUM_THREADS"] = std::to_string(std::max(1u, plan_slot.omp_threads));
  if (plan_slot.gpu) {
    w.env["CUDA_VISIBLE_DEVICES"] = std::to_string(*plan_slot.gpu);
    w.env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID";
  }
  const std::string checkpoint_root =
      spec.checkpoint_root.empty() ? config_.get().checkpoint.root : spec.checkpoint_root;
  // The worker creates the directory itself, as the job's user: a daemon running as root must
  // never create or chown paths under a root the user chose (a planted symlink named after the
  // next job id would hand the user whatever it points at).
  if (!checkpoint_root.empty()) w.env["ELASTIC_CHECKPOINT_DIR"] = checkpoint_root + "/" + id;
  // Python block-buffers a stdout that is a pipe: print() output would reach the log only 8 KiB
  // at a time or at exit. torchrun and srun users see lines as they come; a value the submitter
  // exported or the job's env sets wins (set below).
  w.env["PYTHONUNBUFFERED"] = "1";
  // The submitter's exported environment (its PATH, PYTHONPATH, NCCL_*...) beats the daemon's
  // defaults (PATH, LANG, OMP_NUM_THREADS) but not the variables validate() keeps for the
  // daemon; the job's own env beats both.
  for (const auto& [name, value] : spec.exported_env) w.env[name] = value;
  const rendezvous::PlaceholderValues placeholders{
      .job_id = id,
      .checkpoint_dir =
          checkpoint_root.empty() ? std::nullopt : std::optional(checkpoint_root + "/" + id),
      .round = start.round.round};
  Result<rendezvous::JobText> expanded = rendezvous::expand_job_text(spec, placeholders);
  if (!expanded.ok()) return expanded.error();
  w.argv = std::move(expanded->command);
  for (auto& [name, value] : expanded->env) w.env[name] = std::move(value);
  // Last: the user's own modules (their PYTHONPATH) win over ours.
  if (!python_dir_.empty()) {
    std::string& python_path = w.env["PYTHONPATH"];
    python_path = python_path.empty() ? python_dir_ : python_path + ":" + python_dir_;
  }
  w.working_dir = spec.working_dir;
  if (w.working_dir.empty()) {
    const std::optional<FileInfo> home = host_->stat(user.home, Follow::kYes);
    w.working_dir = home && home->kind == FileInfo::Kind::kDirectory ? user.home : "/";
  }
  if (uid != euid || gid != egid) {
    w.run_as = spawner::RunAs{.uid = uid, .gid = gid, .user = user.name};
  } else if (!root && spec.uid != uid) {
    return Error{"elasticd runs as uid " + std::to_string(uid) +
                 " and cannot start workers for uid " + std::to_string(spec.uid) +
                 "; run elasticd as root, or submit as uid " + std::to_string(uid)};
  }
  w.cpus = plan_slot.cpus;
  w.mem_nodes = plan_slot.mem_nodes;
  w.channel = true;  // a worker that can re-form in place says so there (see "Live rounds")
  w.log_path = logs_.rank_path(id, start.round.round, rank);
  return w;
}

std::optional<spawner::WorkerId> JobSupervisor::hand_to_standby(const std::string& id,
                                                                std::uint32_t slot,
                                                                const spawner::WorkerSpec& spec) {
  const auto it = standbys_.find(slot);
  if (it == standbys_.end() || it->second.job != id) return std::nullopt;
  const spawner::WorkerId standby = it->second.id;
  Status handed = [&]() -> Status {
    Result<rendezvous::PythonCommand> python = rendezvous::parse_python_command(spec.argv);
    if (!python.ok()) return python.error();
    Result<std::string> payload = encode_handoff(*python, spec.env, spec.working_dir);
    if (!payload.ok()) return payload.error();
    return spawner_->hand_off(standby, *payload, spec.label, spec.log_path);
  }();
  standbys_.erase(it);
  if (!handed.ok()) {
    spdlog::warn("job {}: {}; starting it cold", id, handed.error().message);
    spawner_->kill(standby);
    return std::nullopt;
  }
  ++warm_starts_;
  return standby;
}

void JobSupervisor::start_standbys(TimePoint now, const std::string& id, Job& job) {
  job.standbys_at = kNever;
  if (!job.current || !job.started || job.failure || job.done) return;
  const RoundStart& start = *job.current;
  std::uint32_t group_rank = 0;
  const rendezvous::RankAssignment* entry = self_entry(start, self_, &group_rank);
  if (entry == nullptr) return;
  for (const Worker& w : job.workers) {
    if (w.round != start.round.round || w.exit || w.stopping || standbys_.contains(w.slot))
      continue;
    const std::string label = id + " standby slot " + std::to_string(w.slot);
    Result<spawner::WorkerSpec> worker = worker_spec(start, w.rank - entry->first_rank, w.slot);
    Result<spawner::WorkerSpec> spec =
        worker.ok() ? standby_spec(std::move(*worker), label, logs_.standby_path(id, w.slot))
                    : Result<spawner::WorkerSpec>(worker.error());
    Result<spawner::WorkerId> spawned =
        spec.ok() ? spawner_->spawn(now, *spec) : Result<spawner::WorkerId>(spec.error());
    if (!spawned.ok()) {
      spdlog::warn("job {}: no warm standby on slot {}: {}", id, w.slot, spawned.error().message);
      continue;
    }
    const int pid = spawner_->pid(*spawned).value_or(0);
    standbys_[w.slot] = Standby{.job = id, .id = *spawned, .pid = pid};
    spdlog::info("job {}: warm standby started on slot {} (pid {})", id, w.slot, pid);
  }
}

void JobSupervisor::end_standby(std::uint32_t slot, const std::string& why) {
  const auto it = standbys_.find(slot);
  if (it == standbys_.end()) return;
  spdlog::info("job {}: warm standby on slot {} (pid {}) ended: {}", it->second.job, slot,
               it->second.pid, why);
  spawner_->kill(it->second.id);
  standbys_.erase(it);
}

void JobSupervisor::end_standbys(const std::string& job, const std::string& why) {
  std::vector<std::uint32_t> slots;
  for (const auto& [slot, standby] : standbys_) {
    if (standby.job == job) slots.push_back(slot);
  }
  for (std::uint32_t slot : slots) end_standby(slot, why);
}

void JobSupervisor::expire_standbys(TimePoint now) {
  std::vector<std::uint32_t> slots;
  for (const auto& [slot, standby] : standbys_) {
    if (standby.linger_until <= now) slots.push_back(slot);
  }
  for (std::uint32_t slot : slots) end_standby(slot, "no new round of the job came");
}

int JobSupervisor::fd() const { return epoll_.valid() ? epoll_.get() : spawner_->fd(); }

void JobSupervisor::process(TimePoint now) {
  std::vector<spawner::WorkerExit> exits;
  spawner_->process(now, &exits);
  // What a worker said before it exited is heard first (its last "joined").
  pump_channels(now);
  for (const spawner::WorkerExit& exit : exits) on_exit(now, exit);
  // Jobs whose old workers are now gone may start; forget jobs with nothing left.
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    Job& job = it->second;
    try_start(now, it->first, job);
    if (job.standbys_at <= now) start_standbys(now, it->first, job);
    if (!job.current && job.workers.empty()) {
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
  expire_standbys(now);
  if (now >= next_report_) send_reports(now);
  if (now >= next_progress_) {
    next_progress_ = kNever;
    for (auto& [id, job] : jobs_) flush_progress(now, job, /*all=*/false);
  }
  for (auto& [id, job] : jobs_) {
    if (now >= hang_deadline(job)) hang(now, id, job);
  }
}

std::vector<std::pair<std::size_t, Duration>> JobSupervisor::watched_workers(
    const Job& job) const {
  std::vector<std::pair<std::size_t, Duration>> watched;
  // "0s": the job turned hang detection off, the step-time default included.
  if (job.current->spec.hang_timeout == Duration::zero()) return watched;
  for (std::size_t i = 0; i < job.workers.size(); ++i) {
    const Worker& w = job.workers[i];
    if (w.round != job.current->round.round || w.exit || w.stopping || !w.channel) continue;
    if (const auto& liveness = w.channel->link.liveness()) {
      watched.emplace_back(
          i, worker_channel::hang_timeout(
                 *liveness, job.current->spec.hang_timeout.value_or(Duration::zero())));
    }
  }
  return watched;
}

bool JobSupervisor::re_forming(const Worker& w) {
  return w.channel && w.channel->link.state() == worker_channel::LinkState::kOffered;
}

TimePoint JobSupervisor::hang_deadline(const Job& job) const {
  if (!job.current || !job.started || job.failure || job.done) return kNever;
  // A worker of the round that exited 0 means the node is finishing, not hung.
  for (const Worker& w : job.workers) {
    if (w.round == job.current->round.round && w.exit && !w.exit->signaled && w.exit->status == 0) {
      return kNever;
    }
  }
  const auto watched = watched_workers(job);
  if (!watched.empty()) {
    TimePoint due = kNever;
    for (const auto& [index, timeout] : watched) {
      const Worker& w = job.workers[index];
      if (re_forming(w)) continue;
      due = std::min(due, worker_channel::hang_due(*w.channel->link.liveness(), timeout));
    }
    return due;
  }
  // Workers that send no "alive" are watched only when the job sets a timeout.
  const Duration timeout = job.current->spec.hang_timeout.value_or(Duration::zero());
  if (!job.last_report || timeout <= Duration::zero()) return kNever;
  return *job.last_report + timeout;
}

void JobSupervisor::hang(TimePoint now, const std::string& id, Job& job) {
  const std::uint64_t round = job.current->round.round;
  std::vector<Worker*> hung;
  std::string detail;
  const auto watched = watched_workers(job);
  if (!watched.empty()) {
    for (const auto& [index, timeout] : watched) {
      Worker* w = &job.workers[index];
      if (re_forming(*w)) continue;
      const std::string why =
          worker_channel::hang_reason(*w->channel->link.liveness(), timeout, now);
      if (why.empty()) continue;
      if (hung.empty()) {
        detail = "rank " + std::to_string(w->rank) + " on node " + self_ + " is hung (hang_timeout " +
                 format_duration(timeout) +
                 (job.current->spec.hang_timeout ? "" : ", from its step time") +
                 "): " + why;
      }
      hung.push_back(w);
    }
    if (hung.empty()) return;
    if (hung.size() > 1) detail += "; " + std::to_string(hung.size() - 1) + " more rank(s) here too";
  } else {
    for (Worker& w : job.workers) {
      if (w.round == round && !w.exit && !w.stopping) hung.push_back(&w);
    }
    const std::string ranks = hung.empty()       ? ""
                              : hung.size() == 1 ? "rank " + std::to_string(hung.front()->rank)
                                                 : "ranks " + std::to_string(hung.front()->rank) +
                                                       "-" + std::to_string(hung.back()->rank);
    detail = "no progress report for " + format_duration(*job.current->spec.hang_timeout) +
             " (hang_timeout) from " + (ranks.empty() ? "the workers" : ranks) + " on node " +
             self_ + "; the last step reported was " + std::to_string(job.last_step);
  }
  spdlog::warn("job {} round {}: {}: SIGABRT to the hung worker(s), SIGKILL {} s later", id, round,
               detail, kHangAbortGrace.count());
  job.last_report.reset();
  fail(now, id, job, round, hung.empty() ? 0 : hung.front()->rank, detail);
  hung_workers_ += hung.size();
  for (Worker* w : hung) {
    spawner_->note(w->id, detail + ": SIGABRT now (a faulthandler prints the stacks), SIGKILL " +
                              std::to_string(kHangAbortGrace.count()) + " s later");
    spawner_->stop(now, w->id, SIGABRT, kHangAbortGrace);
    w->stopping = true;
    w->aborting = true;
  }
}

void JobSupervisor::on_exit(TimePoint now, const spawner::WorkerExit& exit) {
  for (auto it = standbys_.begin(); it != standbys_.end(); ++it) {
    if (it->second.id != exit.id) continue;
    spdlog::warn("job {}: warm standby on slot {} (pid {}) {} before a round came; see its log",
                 it->second.job, it->first, it->second.pid, exit.describe());
    standbys_.erase(it);
    return;
  }
  for (auto& [id, job] : jobs_) {
    for (auto it = job.workers.begin(); it != job.workers.end(); ++it) {
      if (it->id != exit.id) continue;
      it->exit = exit;
      worker_gone(id, job, it->round);
      const bool current = job.current && job.current->round.round == it->round && job.started;
      spdlog::info("job {} round {}: rank {} (pid {}) {}", id, it->round, it->rank, it->pid,
                   exit.describe());
      if (!current || it->stopping) {
        job.workers.erase(it);
        return;
      }
      if (exit.signaled || exit.status != 0) {
        if (!job.failure) {
          fail(now, id, job, it->round, it->rank,
               "rank " + std::to_string(it->rank) + " on node " + self_ + " " + exit.describe());
        }
        return;
      }
      const bool all_zero = std::all_of(
          job.workers.begin(), job.workers.end(),
          [](const Worker& w) { return w.exit && !w.exit->signaled && w.exit->status == 0; });
      if (all_zero && !job.done && !job.failure) {
        job.done = true;
        reports_.push_back(round_report(ReportKind::kWorkersDone, id, job.current->round.round));
        next_report_ = std::min(next_report_, now + kReportResend);
      }
      return;
    }
  }
}

void JobSupervisor::fail(TimePoint now, const std::string& id, Job& job, std::uint64_t round,
                         std::uint32_t rank, const std::string& detail) {
  RoundReport failed = round_report(ReportKind::kWorkerFailed, id, round);
  failed.rank = rank;
  failed.detail = detail;
  failed.at_ms = clock_->wall_ms();
  job.failure = failed;
  reports_.push_back(std::move(failed));
  next_report_ = std::min(next_report_, now + kReportResend);
}

void JobSupervisor::send_reports(TimePoint now) {
  next_report_ = kNever;
  for (const auto& [id, job] : jobs_) {
    if (!job.current) continue;
    if (job.failure) {
      reports_.push_back(*job.failure);
    } else if (job.done) {
      reports_.push_back(round_report(ReportKind::kWorkersDone, id, job.current->round.round));
    } else {
      continue;
    }
    next_report_ = now + kReportResend;
  }
}

TimePoint JobSupervisor::next_deadline() const {
  TimePoint next = std::min({spawner_->next_deadline(), next_report_, next_progress_});
  for (const auto& [id, job] : jobs_) {
    for (const Worker& w : job.workers) {
      if (w.channel) next = std::min(next, w.channel->link.next_deadline());
    }
  }
  for (const auto& [id, job] : jobs_) next = std::min(next, job.standbys_at);
  for (const auto& [slot, standby] : standbys_) next = std::min(next, standby.linger_until);
  for (const auto& [id, job] : jobs_) next = std::min(next, hang_deadline(job));
  return next;
}

void JobSupervisor::shutdown(Duration grace) {
  if (spawner_->running() > 0) {
    spdlog::info("stopping {} worker(s) before exit (grace {} ms)", spawner_->running(),
                 std::chrono::duration_cast<std::chrono::milliseconds>(grace).count());
  }
  spawner_->shutdown(grace, nullptr);
  jobs_.clear();
  standbys_.clear();
}

void JobSupervisor::drain(TimePoint now) {
  while (!standbys_.empty()) end_standby(standbys_.begin()->first, "this daemon drains");
  std::vector<std::string> ids;
  for (const auto& [id, job] : jobs_) ids.push_back(id);
  for (const std::string& id : ids) stop_job(now, id, StopMode::kGraceful, "this daemon drains");
}

void JobSupervisor::kill_all(TimePoint now) {
  std::vector<std::string> ids;
  for (const auto& [id, job] : jobs_) ids.push_back(id);
  for (const std::string& id : ids) stop_job(now, id, StopMode::kKill, "the drain's grace is over");
}

std::vector<WorkerRow> JobSupervisor::workers() const {
  std::vector<WorkerRow> rows;
  for (const auto& [id, job] : jobs_) {
    for (const Worker& w : job.workers) {
      rows.push_back(WorkerRow{.job = id,
                               .round = w.round,
                               .rank = w.rank,
                               .slot = w.slot,
                               .pid = w.pid,
                               .state = w.exit       ? "exited"
                                        : w.stopping ? "stopping"
                                                     : "running",
                               .detail = w.exit ? w.exit->describe() : ""});
    }
  }
  return rows;
}

std::optional<std::uint32_t> JobSupervisor::job_owner(const std::string& job) const {
  const auto it = owners_.find(job);
  if (it != owners_.end()) return it->second;
  return logs_.owner(job);
}

}  // namespace elastic::node

namespace elastic::node {

void JobSupervisor::worker_gone(const std::string& id, Job& job, std::uint64_t round) {
  const auto it = job.live.find(round);
  if (it == job.live.end() || --it->second > 0) return;
  job.live.erase(it);
  reports_.push_back(round_report(ReportKind::kWorkersStopped, id, round));
}

Status JobSupervisor::on_progress(TimePoint now, std::uint32_t uid, const std::string& request) {
  const json args = json::parse(request, nullptr, /*allow_exceptions=*/false);
  if (!args.is_object()) return Error{"The progress request is not a JSON object."};
  const json job_id = args.value("job", json());
  const json round = args.value("round", json());
  const json event = args.value("event", json());
  const json step = args.value("step", json());
  const json resumed = args.value("resumed_from", json(-1));
  const json rank = args.value("rank", json(std::uint64_t{0}));
  const json samples = args.value("samples", json());
  const json loss = args.value("loss", json());
  if (!job_id.is_string() || job_id.get<std::string>().empty()) {
    return Error{"The progress request needs a \"job\" (a job id)."};
  }
  const std::string id = job_id.get<std::string>();
  if (!round.is_number_unsigned()) {
    return Error{"The progress request for job " + id + " needs a \"round\" (a number)."};
  }
  if (!event.is_string() || (event != "step" && event != "checkpoint" && event != "resume")) {
    return Error{"The progress request for job " + id +
                 " needs an \"event\": \"step\", \"checkpoint\" or \"resume\"."};
  }
  if (!step.is_number_integer() || step.get<std::int64_t>() < 0 || !resumed.is_number_integer() ||
      !rank.is_number_unsigned()) {
    return Error{"The progress request for job " + id +
                 " needs a \"step\" >= 0 (and a numeric \"rank\" and \"resumed_from\", if any)."};
  }
  if (!samples.is_null() && (!samples.is_number_integer() || samples.get<std::int64_t>() < 0)) {
    return Error{"The progress request for job " + id +
                 " has a \"samples\" that is not a whole number >= 0 (samples trained on so far)."};
  }
  if (!loss.is_null() && (!loss.is_number() || !std::isfinite(loss.get<double>()))) {
    return Error{"The progress request for job " + id +
                 " has a \"loss\" that is not a finite number."};
  }
  const auto found = jobs_.find(id);
  if (found == jobs_.end() || !found->second.current || !found->second.started) {
    return Error{"Job " + id + " runs no workers on node " + self_ + "."};
  }
  Job& job = found->second;
  const RoundStart& current = *job.current;
  if (uid != 0 && uid != current.spec.uid) {
    return Error{"Only the owner of job " + id + " (uid " + std::to_string(current.spec.uid) +
                 ") or root may report its progress, not uid " + std::to_string(uid) + "."};
  }
  if (round.get<std::uint64_t>() != current.round.round) {
    return Error{"Round " + std::to_string(round.get<std::uint64_t>()) + " of job " + id +
                 " is over; node " + self_ + " runs round " + std::to_string(current.round.round) +
                 "."};
  }
  // Hang detection watches the round from its first step on (see the header comment).
  if (event == "step" || job.last_report) {
    job.last_report = now;
    if (event == "step") job.last_step = step.get<std::int64_t>();
  }
  if (event == "checkpoint") {
    job.checkpoint =
        CheckpointInfo{.job = id, .step = step.get<std::int64_t>(), .at_ms = clock_->wall_ms()};
  }
  RoundReport report = round_report(ReportKind::kProgress, id, current.round.round);
  report.rank = rank.get<std::uint64_t>();
  report.event = event.get<std::string>();
  report.step = step.get<std::int64_t>();
  report.resumed_from = resumed.get<std::int64_t>();
  if (!samples.is_null()) report.samples = samples.get<std::int64_t>();
  if (!loss.is_null()) report.loss = loss.get<double>();
  Job::ProgressOut& out = job.progress[event.get<std::string>()];
  const bool first_step = event == "step" && !job.first_step_sent;
  if (first_step || now >= out.last_sent + kProgressInterval) {
    if (event == "step") job.first_step_sent = true;
    if (out.held) ++progress_coalesced_;  // an older held one, superseded before it was due
    out.held = std::move(report);
    forward_held(now, out);
  } else {
    if (out.held) ++progress_coalesced_;  // the one it replaces is never sent
    out.held = std::move(report);
    next_progress_ = std::min(next_progress_, out.last_sent + kProgressInterval);
  }
  return ok_status();
}

void JobSupervisor::flush_progress(TimePoint now, Job& job, bool all) {
  for (auto& [event, out] : job.progress) {
    if (!out.held) continue;
    if (all || now >= out.last_sent + kProgressInterval) {
      forward_held(now, out);
    } else {
      next_progress_ = std::min(next_progress_, out.last_sent + kProgressInterval);
    }
  }
}

void JobSupervisor::forward_held(TimePoint now, Job::ProgressOut& out) {
  out.last_sent = now;
  ++progress_forwarded_;
  reports_.push_back(std::move(*out.held));
  out.held.reset();
}

void JobSupervisor::end_progress_round(TimePoint now, Job& job) {
  flush_progress(now, job, /*all=*/true);
  job.progress.clear();
  job.first_step_sent = false;
  job.last_report.reset();
  job.last_step = -1;
}

std::vector<CheckpointInfo> JobSupervisor::checkpoints() const {
  std::vector<CheckpointInfo> found;
  for (const auto& [id, job] : jobs_) {
    if (!job.current) continue;
    std::optional<CheckpointInfo> newest = job.checkpoint;
    if (!newest) {
      const rendezvous::JobSpec& spec = job.current->spec;
      const std::string root =
          spec.checkpoint_root.empty() ? config_.get().checkpoint.root : spec.checkpoint_root;
      if (!root.empty()) newest = read_latest(*host_, root + "/" + id, run_as_owner(*host_, spec));
    }
    if (!newest) continue;
    newest->job = id;
    found.push_back(*newest);
  }
  return found;
}

std::map<std::string, int> JobSupervisor::worker_state_counts() const {
  std::map<std::string, int> counts{{"running", 0}, {"stopping", 0}, {"exited", 0}};
  for (const WorkerRow& row : workers()) ++counts[row.state];
  return counts;
}

}  // namespace elastic::node
