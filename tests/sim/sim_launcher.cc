#include "tests/sim/sim_launcher.h"

#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <variant>

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

// elastic-trainer's exit statuses (trainer/main.cc): a lost peer or no round in time; stopped.
constexpr int kExitUnavailable = 69;
constexpr int kExitStopped = 75;

}  // namespace

SimLauncher::SimLauncher(NodeId node, std::uint64_t generation, SimLauncherOptions options,
                         SimWorkerObserver* observer, const Simulator& sim, std::uint64_t seed)
    : node_(node),
      generation_(generation),
      options_(options),
      observer_(observer),
      sim_(&sim),
      rng_(seed) {
  if (options_.groups != nullptr) options_.groups->attach(node_, generation_, this);
}

SimLauncher::~SimLauncher() {
  // The daemon is gone: so are its workers (PDEATHSIG in elasticd).
  for (auto& [id, running] : workers_) {
    leave_all(running);
    spawner::WorkerExit exit;
    exit.id = id;
    exit.pid = static_cast<int>(1000 + id);
    exit.signaled = true;
    exit.status = SIGKILL;
    exit.stopped = true;
    exit.at = sim_->now();
    if (observer_ != nullptr) observer_->on_exit(running.worker, exit);
  }
  if (options_.groups != nullptr) options_.groups->detach(node_, generation_);
}

Result<spawner::WorkerId> SimLauncher::spawn(TimePoint now, const spawner::WorkerSpec& spec) {
  Result<spawner::Spawned> spawned = launch(now, spec, /*channel=*/false);
  if (!spawned.ok()) return spawned.error();
  return spawned->id;
}

Result<spawner::Spawned> SimLauncher::start(TimePoint now, const spawner::WorkerSpec& spec) {
  return launch(now, spec, spec.channel && options_.groups != nullptr);
}

Result<spawner::Spawned> SimLauncher::launch(TimePoint now, const spawner::WorkerSpec& spec,
                                             bool channel) {
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
  UniqueFd daemon_end;
  UniqueFd worker_end;
  if (channel) {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, fds) != 0) {
      return Error{"The simulated launcher could not make a worker channel for " + spec.label +
                   ": " + std::strerror(errno) + "."};
    }
    daemon_end.reset(fds[0]);
    worker_end.reset(fds[1]);
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
                             .started = now,
                             .live = channel && rng_.unit() < options_.live_workers};
  running.exit.id = id;
  running.exit.pid = static_cast<int>(1000 + id);
  const auto runtime_ms = number(spec, "SIM_RUNTIME_MS");
  running.runtime = runtime_ms ? std::chrono::milliseconds(*runtime_ms) : options_.job_runtime;
  if (running.runtime > Duration::zero()) schedule(running, now + running.runtime, false, 0);
  // A plain worker ignores its channel, holding its end open as a plain command would.
  running.trainer.end = std::move(worker_end);
  const auto [it, inserted] = workers_.emplace(id, std::move(running));
  Running& worker = it->second;
  if (worker.worker.live && options_.hello_delay > Duration::zero()) {
    worker.trainer.hello_at = now + options_.hello_delay;
  } else if (worker.worker.live) {
    write(now, worker, worker_channel::Hello{.version = 1, .live = true});
  }
  if (observer_ != nullptr) observer_->on_spawn(worker.worker);
  // Started cold: it is in its round's group at once (which may form now).
  if (options_.groups != nullptr) {
    worker.trainer.arrived = worker.worker.round;
    options_.groups->arrive(key(worker), worker.worker.job, worker.worker.round, worker.worker.rank,
                            worker.worker.world);
  }
  return spawner::Spawned{id, std::move(daemon_end)};
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
  // SIGKILL ends its part in any group now; the exit is only reaped at the next process().
  leave_all(it->second);
  it->second.trainer.dead = true;
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

bool SimLauncher::lose_peer(spawner::WorkerId id, std::uint64_t round, TimePoint at) {
  const auto it = workers_.find(id);
  if (it == workers_.end()) return false;
  Running& running = it->second;
  if (!running.worker.live) return fail(id, at, kExitUnavailable);
  Trainer& t = running.trainer;
  if (t.dead) return true;
  // One that has left the round already (an offer) has nothing to lose there.
  if (!t.seats.contains(round) && t.arrived != round) return true;
  if (at < t.lost_at || t.lost_round != round) {
    t.lost_round = round;
    t.lost_at = at;
  }
  return true;
}

void SimLauncher::formed(spawner::WorkerId id, const std::string& job, std::uint64_t round) {
  const auto it = workers_.find(id);
  if (it == workers_.end()) return;
  Running& running = it->second;
  Trainer& t = running.trainer;
  SimWorker& w = running.worker;
  if (t.dead || w.job != job || t.arrived != round) return;
  const TimePoint now = sim_->now();
  t.arrived.reset();
  if (t.target && t.target->round == round) {
    // A re-formation in place: the same process goes on as the offered rank.
    const worker_channel::RoundOffer offer = *t.target;
    t.target.reset();
    t.give_up_at = kNever;
    const std::uint64_t old_round = w.round;
    w.round = offer.round;
    w.rank = offer.rank;
    w.local_rank = offer.local_rank;
    w.world = offer.world_size;
    write(now, running, worker_channel::Joined{.round = offer.round, .term = offer.term});
    if (running.runtime > Duration::zero()) schedule(running, now + running.runtime, false, 0);
    if (observer_ != nullptr) observer_->on_reform(w, old_round);
  }
  const SimSeat seat{.round = round, .rank = w.rank, .world = w.world};
  t.seats[round] = seat;
  if (observer_ != nullptr) observer_->on_training(w, seat, true);
}

void SimLauncher::cancel_clean_exit(Running& running) {
  const spawner::WorkerExit& exit = running.exit;
  if (!exit.stopped && !exit.signaled && exit.status == 0) running.exit_at = kNever;
}

void SimLauncher::stop_training(Running& running, std::uint64_t round) {
  const auto seat = running.trainer.seats.find(round);
  if (seat == running.trainer.seats.end()) return;
  const SimSeat left = seat->second;
  running.trainer.seats.erase(seat);
  if (options_.groups != nullptr) {
    options_.groups->leave(key(running), running.worker.job, round);
  }
  if (observer_ != nullptr) observer_->on_training(running.worker, left, false);
}

void SimLauncher::leave_all(Running& running) {
  Trainer& t = running.trainer;
  while (!t.seats.empty()) stop_training(running, t.seats.begin()->first);
  if (t.arrived && options_.groups != nullptr) {
    options_.groups->leave(key(running), running.worker.job, *t.arrived);
  }
  t.arrived.reset();
  t.target.reset();
  t.lost_round.reset();
  t.arrive_at = t.give_up_at = t.lost_at = kNever;
}

void SimLauncher::write(TimePoint now, Running& running,
                        const worker_channel::WorkerMessage& message) {
  if (!running.trainer.end.valid()) return;
  running.trainer.outbox += worker_channel::frame(worker_channel::encode(message));
  flush(now, running);
}

void SimLauncher::flush(TimePoint now, Running& running) {
  Trainer& t = running.trainer;
  const std::size_t before = t.outbox.size();
  while (t.end.valid() && !t.outbox.empty()) {
    const ssize_t n =
        ::send(t.end.get(), t.outbox.data(), t.outbox.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      t.outbox.erase(0, static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      break;  // the rest goes at the next process()
    } else {
      t.outbox.clear();  // the daemon closed its end: nobody reads it any more
      t.end.reset();
    }
  }
  if (t.outbox.size() < before) t.wake_at = std::min(t.wake_at, now);
}

bool SimLauncher::unread(const Running& running) const {
  const Trainer& t = running.trainer;
  if (!running.worker.live || !t.end.valid()) return false;
  int pending = 0;
  return ::ioctl(t.end.get(), FIONREAD, &pending) == 0 && pending > 0;
}

void SimLauncher::read_channel(TimePoint now, Running& running) {
  Trainer& t = running.trainer;
  char buffer[4096];
  while (t.end.valid()) {
    const ssize_t n = ::recv(t.end.get(), buffer, sizeof buffer, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {
      // The daemon closed its end (or the socket failed): no offer can come any more.
      t.end.reset();
      t.outbox.clear();
      break;
    }
    t.frames.append(buffer, static_cast<std::size_t>(n));
  }
  while (true) {
    Result<std::optional<std::string>> json = t.frames.next();
    if (!json.ok() || !json->has_value()) break;  // a broken stream is read and dropped
    Result<worker_channel::DaemonMessage> message = worker_channel::decode_daemon_message(**json);
    if (!message.ok()) continue;  // not of the protocol: ignored, as the trainer skips it
    if (const auto* offer = std::get_if<worker_channel::RoundOffer>(&*message)) {
      on_offer(now, running, *offer);
    } else if (std::holds_alternative<worker_channel::Stop>(*message)) {
      // elastic-trainer stops as on SIGTERM: a last checkpoint, then exit 75.
      schedule(running, now + options_.term_exit, false, kExitStopped);
    }
  }
}

void SimLauncher::on_offer(TimePoint now, Running& running,
                           const worker_channel::RoundOffer& offer) {
  Trainer& t = running.trainer;
  SimWorker& w = running.worker;
  // The trainer's round source hands on only rounds newer than the one it is in or joining.
  const std::uint64_t current = t.target ? std::max(w.round, t.target->round) : w.round;
  if (offer.job != w.job || offer.round <= current) return;
  if (observer_ != nullptr) observer_->on_offer(w, offer);
  if (!options_.keep_old_group) {
    while (!t.seats.empty()) stop_training(running, t.seats.begin()->first);
  }
  if (t.arrived && options_.groups != nullptr) {
    options_.groups->leave(key(running), w.job, *t.arrived);
  }
  t.arrived.reset();
  t.lost_round.reset();
  t.lost_at = kNever;
  cancel_clean_exit(running);
  t.target = offer;
  const Duration spread = options_.reform_max - options_.reform_min;
  t.arrive_at =
      now + options_.reform_min + std::chrono::duration_cast<Duration>(spread * rng_.unit());
  t.give_up_at = now + options_.reform_timeout;
}

void SimLauncher::run_trainer(TimePoint now, Running& running) {
  Trainer& t = running.trainer;
  if (t.wake_at <= now) t.wake_at = kNever;
  if (!running.worker.live) return;
  if (t.dead) return;
  if (t.hello_at <= now) {
    t.hello_at = kNever;
    write(now, running, worker_channel::Hello{.version = 1, .live = true});
  }
  flush(now, running);
  read_channel(now, running);
  if (t.lost_at <= now) {
    // Its collective failed: it leaves the group and waits for the next round's offer.
    const std::uint64_t round = *t.lost_round;
    t.lost_round.reset();
    t.lost_at = kNever;
    if (t.seats.contains(round) || t.arrived == round) {
      stop_training(running, round);
      if (t.arrived == round && options_.groups != nullptr) {
        options_.groups->leave(key(running), running.worker.job, round);
        t.arrived.reset();
      }
      cancel_clean_exit(running);
      if (!t.target) t.give_up_at = now + options_.reform_timeout;
    }
  }
  if (t.target && !t.arrived && t.arrive_at <= now) {
    t.arrive_at = kNever;
    t.arrived = t.target->round;
    if (options_.groups != nullptr) {
      options_.groups->arrive(key(running), running.worker.job, t.target->round, t.target->rank,
                              t.target->world_size);
    }
  }
  if (t.give_up_at <= now) {
    t.give_up_at = kNever;
    schedule(running, now, false, kExitUnavailable);
  }
}

void SimLauncher::reap(TimePoint now, Running& running, std::vector<spawner::WorkerExit>* exits) {
  leave_all(running);
  running.trainer.end.reset();  // the daemon reads end of file
  running.exit.at = now;
  if (observer_ != nullptr) observer_->on_exit(running.worker, running.exit);
  exits->push_back(running.exit);
}

void SimLauncher::process(TimePoint now, std::vector<spawner::WorkerExit>* exits) {
  for (auto& [id, running] : workers_) run_trainer(now, running);
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
    const Trainer& t = running.trainer;
    next = std::min(
        {next, running.exit_at, t.arrive_at, t.give_up_at, t.lost_at, t.wake_at, t.hello_at});
    if (unread(running)) next = std::min(next, sim_->now());
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
    leave_all(running);
    running.exit.stopped = true;
    schedule(running, now, true, SIGTERM);
    reap(now, running, exits);
  }
  workers_.clear();
}

}  // namespace elastic::sim
