#include "tests/sim/sim_launcher.h"

#include <csignal>
#include <cstdlib>
#include <utility>

namespace elastic::sim {
namespace {

// The variable `name` of `spec` as a number, if it is one.
std::optional<std::uint64_t> number(const spawner::WorkerSpec& spec, const std::string& name) {
  const auto it = spec.env.find(name);
  if (it == spec.env.end() || it->second.empty()) return std::nullopt;
  char* end = nullptr;
  const std::uint64_t value = std::strtoull(it->second.c_str(), &end, 10);
  if (end == nullptr || *end != '\0') return std::nullopt;
  return value;
}

std::string text(const spawner::WorkerSpec& spec, const std::string& name) {
  const auto it = spec.env.find(name);
  return it == spec.env.end() ? std::string() : it->second;
}

}  // namespace

SimLauncher::SimLauncher(NodeId node, std::uint64_t generation, SimLauncherOptions options,
                         SimWorkerObserver* observer, const Simulator& sim)
    : node_(node), generation_(generation), options_(options), observer_(observer), sim_(&sim) {}

SimLauncher::~SimLauncher() {
  // The daemon is gone: so are its workers (PDEATHSIG in elasticd).
  for (auto& [id, running] : workers_) {
    spawner::WorkerExit exit;
    exit.id = id;
    exit.pid = static_cast<int>(1000 + id);
    exit.signaled = true;
    exit.status = SIGKILL;
    exit.stopped = true;
    exit.at = sim_->now();
    if (observer_ != nullptr) observer_->on_exit(running.worker, exit);
  }
}

Result<spawner::WorkerId> SimLauncher::spawn(TimePoint now, const spawner::WorkerSpec& spec) {
  const auto round = number(spec, "ELASTIC_ROUND");
  const auto rank = number(spec, "RANK");
  const auto local_rank = number(spec, "LOCAL_RANK");
  const auto slot = number(spec, "ELASTIC_SLOT");
  const auto world = number(spec, "WORLD_SIZE");
  const std::string job = text(spec, "ELASTIC_JOB_ID");
  if (!round || !rank || !local_rank || !slot || !world || job.empty()) {
    return Error{"The simulated launcher got a spec without the worker variables (" + spec.label +
                 ")."};
  }
  const spawner::WorkerId id = next_id_++;
  Running running;
  running.worker = SimWorker{.node = node_,
                             .generation = generation_,
                             .id = id,
                             .daemon = text(spec, "ELASTIC_NODE"),
                             .job = job,
                             .round = *round,
                             .rank = static_cast<std::uint32_t>(*rank),
                             .local_rank = static_cast<std::uint32_t>(*local_rank),
                             .slot = static_cast<std::uint32_t>(*slot),
                             .world = *world,
                             .started = now};
  running.exit.id = id;
  running.exit.pid = static_cast<int>(1000 + id);
  if (options_.job_runtime > Duration::zero()) {
    schedule(running, now + options_.job_runtime, false, 0);
  }
  const auto [it, inserted] = workers_.emplace(id, std::move(running));
  if (observer_ != nullptr) observer_->on_spawn(it->second.worker);
  return id;
}

void SimLauncher::schedule(Running& running, TimePoint at, bool signaled, int status) {
  if (at >= running.exit_at) return;
  running.exit_at = at;
  running.exit.signaled = signaled;
  running.exit.status = status;
}

void SimLauncher::stop(TimePoint now, spawner::WorkerId id) {
  stop(now, id, SIGTERM, options_.stop_grace);
}

void SimLauncher::stop(TimePoint now, spawner::WorkerId id, int signal, Duration grace) {
  const auto it = workers_.find(id);
  if (it == workers_.end() || it->second.exit.stopped) return;  // the first deadline stands
  Running& running = it->second;
  running.exit.stopped = true;
  if (options_.term_exit < grace) {
    schedule(running, now + options_.term_exit, true, signal);
  } else {
    schedule(running, now + grace, true, SIGKILL);
  }
}

void SimLauncher::kill(spawner::WorkerId id) {
  const auto it = workers_.find(id);
  if (it == workers_.end()) return;
  it->second.exit.stopped = true;
  schedule(it->second, TimePoint::min(), true, SIGKILL);
}

bool SimLauncher::fail(spawner::WorkerId id, TimePoint at, int status) {
  const auto it = workers_.find(id);
  if (it == workers_.end()) return false;
  Running& running = it->second;
  const bool clean = !running.exit.signaled && running.exit.status == 0 && !running.exit.stopped;
  if (at < running.exit_at) {
    schedule(running, at, false, status);
  } else if (clean) {
    // Its last steps are collectives too: a rank cannot finish once it has failed.
    running.exit.status = status;
  }
  return true;
}

Status SimLauncher::hand_off(spawner::WorkerId /*id*/, std::string_view /*payload*/,
                             const std::string& /*label*/, const std::string& /*log_path*/) {
  return Error{"Simulated workers take no hand-off."};
}

void SimLauncher::set_limits(Duration stop_grace, std::uint64_t /*log_max_bytes*/,
                             int /*log_keep*/) {
  options_.stop_grace = stop_grace;
}

void SimLauncher::reap(TimePoint now, Running& running, std::vector<spawner::WorkerExit>* exits) {
  running.exit.at = now;
  if (observer_ != nullptr) observer_->on_exit(running.worker, running.exit);
  exits->push_back(running.exit);
}

void SimLauncher::process(TimePoint now, std::vector<spawner::WorkerExit>* exits) {
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (it->second.exit_at <= now) {
      reap(now, it->second, exits);
      it = workers_.erase(it);
    } else {
      ++it;
    }
  }
}

TimePoint SimLauncher::next_deadline() const {
  TimePoint next = kNever;
  for (const auto& [id, running] : workers_) {
    if (running.exit_at < next) next = running.exit_at;
  }
  return next;
}

std::optional<int> SimLauncher::pid(spawner::WorkerId id) const {
  if (!workers_.contains(id)) return std::nullopt;
  return static_cast<int>(1000 + id);
}

void SimLauncher::shutdown(Duration /*grace*/, std::vector<spawner::WorkerExit>* exits) {
  // SIGTERM: every simulated worker exits within its term_exit, so nothing needs the SIGKILL.
  const TimePoint now = sim_->now();
  for (auto& [id, running] : workers_) {
    running.exit.stopped = true;
    schedule(running, now, true, SIGTERM);
    reap(now, running, exits);
  }
  workers_.clear();
}

}  // namespace elastic::sim
