// JobSupervisor's live rounds (job_supervisor.h, "Live rounds"): offering a new round to workers
// that re-form in place, over their worker channels, and what their answers change.
#include <sys/epoll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#include "daemon/core/duration.h"
#include "daemon/node/job_supervisor.h"
#include "daemon/node/round_report.h"
#include "daemon/rendezvous/node_ledger.h"

namespace elastic::node {
namespace {

using worker_channel::LinkEvent;
using worker_channel::LinkState;

// A worker that may be offered a round: it said hello(live) and is not gone. One still
// answering an older offer may be offered the newer round (it supersedes the old one).
bool offerable(const worker_channel::WorkerLink& link) {
  return link.state() == LinkState::kReady || link.state() == LinkState::kJoined ||
         link.state() == LinkState::kOffered;
}

}  // namespace

std::optional<JobSupervisor::OfferPlan> JobSupervisor::plan_offer(Job& job,
                                                                  const RoundStart& start) {
  if (!job.current || !job.started || job.done) return std::nullopt;
  // A store port conflict started no worker; a worker failure leaves the others running.
  if (job.failure && job.failure->kind != ReportKind::kWorkerFailed) return std::nullopt;
  // Workers that missed a round of their job (it trained without them: cut off, or its starts
  // never came) hold older state than the job's newest checkpoint may: they start again from it.
  // A grow round they were held for is no such round: it could not form without them.
  if (start.round.expected_prev_round != job.current->round.round &&
      (job.held == 0 || start.round.expected_prev_round != job.held)) {
    return std::nullopt;
  }
  std::uint32_t group_rank = 0;
  const rendezvous::RankAssignment* entry = self_entry(start, self_, &group_rank);
  if (entry == nullptr) return std::nullopt;
  OfferPlan plan;
  plan.entry = entry;
  plan.group_rank = group_rank;
  for (Worker& w : job.workers) {
    if (w.exit || w.stopping) continue;  // the crashed, and older rounds' stopping workers
    if (w.round != job.current->round.round || !w.channel || !offerable(w.channel->link)) {
      return std::nullopt;
    }
    plan.keep.push_back(&w);
  }
  if (plan.keep.empty() || plan.keep.size() > entry->slots) return std::nullopt;
  // Rank 0's worker hosts the new round's store on the new port: a port another process holds
  // is reported by the restart path (store_port_busy), which moves the round.
  if (entry->first_rank == 0 && port_in_use_) {
    const std::uint16_t port = rendezvous::endpoint_port(start.round.store_endpoint);
    if (port != 0 && port_in_use_(port)) return std::nullopt;
  }
  // Local ranks the new round adds here start cold, on free slots.
  const std::set<std::uint32_t> busy = busy_slots();
  for (const topology::Slot& slot : plan_.slots) {
    if (!busy.contains(slot.index)) plan.free.push_back(slot.index);
  }
  if (plan.free.size() < entry->slots - plan.keep.size()) return std::nullopt;
  std::sort(plan.keep.begin(), plan.keep.end(),
            [](const Worker* a, const Worker* b) { return a->rank < b->rank; });
  return plan;
}

bool JobSupervisor::offer_round(TimePoint now, const std::string& id, Job& job,
                                const RoundStart& start) {
  std::optional<OfferPlan> plan = plan_offer(job, start);
  if (!plan) return false;
  const rendezvous::RankAssignment* entry = plan->entry;
  const std::uint32_t group_rank = plan->group_rank;
  const std::uint64_t old_round = job.current->round.round;
  const std::vector<Worker*>& keep = plan->keep;
  const std::vector<std::uint32_t>& free = plan->free;
  const std::size_t cold = entry->slots - keep.size();
  if (Status logs = logs_.start_round(id, start.round.round, start.spec.uid); !logs.ok()) {
    spdlog::warn("job {} round {}: {}", id, start.round.round, logs.error().message);
  }
  const Duration timeout = config_.get().rendezvous.reform_timeout;
  // The grow these workers were held for (RoundStart::hold_live) follows the round they run and
  // adds ranks only, and none of them failed here: their group is whole, and they may leave it
  // at a step boundary they agree on instead of aborting it (worker_channel/messages.h). A
  // failure elsewhere opens another round (not the held one); one racing with this offer makes
  // the group's collectives fail, which the worker handles as it does every failure.
  const bool intact = job.held != 0 && job.held == start.round.round &&
                      start.round.reason == rendezvous::RoundReason::kGrow &&
                      start.round.expected_prev_round == old_round && !job.failure;
  job.held = 0;
  job.current = start;
  job.started = true;
  job.failure.reset();
  job.done = false;
  job.joining.clear();
  job.live_acked = false;
  for (std::uint32_t local = 0; local < keep.size(); ++local) {
    Worker& w = *keep[local];
    const std::uint32_t rank = entry->first_rank + local;
    const worker_channel::RoundOffer offer{
        .job = id,
        .round = start.round.round,
        .term = start.term,
        .rank = rank,
        .local_rank = local,
        .world_size = static_cast<std::uint32_t>(rendezvous::world_size(start.round.ranks)),
        .local_world_size = entry->slots,
        .group_rank = group_rank,
        .master_addr = rendezvous::endpoint_host(start.round.store_endpoint),
        .master_port = rendezvous::endpoint_port(start.round.store_endpoint),
        .restart_count = entry->restarts,
        .intact = intact};
    const std::string label = id + " rank " + std::to_string(rank);
    if (Status moved = spawner_->move_log(w.id, label, logs_.rank_path(id, start.round.round, rank));
        !moved.ok()) {
      spdlog::warn("job {} round {}: {}", id, start.round.round, moved.error().message);
    }
    spawner_->note(w.id, "round " + std::to_string(start.round.round) +
                             " offered over the worker channel: rank " + std::to_string(rank) +
                             " of " + std::to_string(offer.world_size) +
                             (intact ? " (its group is intact)" : ""));
    on_link_step(id, job, w, w.channel->link.offer(now, offer, timeout));
    worker_gone(id, job, w.round);  // it left the old round (its last one sends workers_stopped)
    w.round = start.round.round;
    w.rank = rank;
    ++job.live[w.round];
    job.joining.insert(w.id);
  }
  spdlog::info("job {} round {}: offered to {} running worker(s) here, which re-form in place "
               "(they ran round {}){}",
               id, start.round.round, keep.size(), old_round,
               cold > 0 ? "; " + std::to_string(cold) + " rank(s) start cold" : "");
  for (std::size_t i = 0; i < cold; ++i) {
    if (!start_rank(now, id, job, static_cast<std::uint32_t>(keep.size() + i), free[i])) break;
  }
  if (start.spec.warm) job.standbys_at = now + kStandbyDelay;
  return true;
}

void JobSupervisor::pump_channels(TimePoint now) {
  for (auto& [id, job] : jobs_) {
    for (Worker& w : job.workers) {
      if (!w.channel) continue;
      Worker::Channel& channel = *w.channel;
      for (worker_channel::ChannelInput& input : channel.endpoint.read()) {
        switch (input.kind) {
          case worker_channel::ChannelInput::Kind::kMessage:
            on_link_step(id, job, w, channel.link.on_message(now, input.message));
            break;
          case worker_channel::ChannelInput::Kind::kBadFrame:
            on_link_step(id, job, w, channel.link.on_bad_frame(now, std::move(input.error)));
            break;
          case worker_channel::ChannelInput::Kind::kClosed:
            on_link_step(id, job, w, channel.link.on_closed(now));
            break;
        }
      }
      if (std::optional<worker_channel::LinkStep> due = channel.link.tick(now)) {
        on_link_step(id, job, w, *due);
      }
      if (channel.endpoint.wants_write()) {
        if (Status flushed = channel.endpoint.flush(); !flushed.ok()) {
          spdlog::warn("job {}: {}", id, flushed.error().message);
        }
      }
      if (channel.endpoint.open()) watch_channel(channel, /*added=*/false);
    }
    // An offer that ran late restarts the round here the old way.
    const bool late = std::any_of(job.workers.begin(), job.workers.end(), [&](const Worker& w) {
      return job.joining.contains(w.id) && !w.exit && w.channel &&
             w.channel->link.state() == LinkState::kLate;
    });
    if (late && job.current) {
      ++live_fallbacks_;
      spdlog::warn(
          "job {} round {}: a worker here did not join the round offered over its channel "
          "within {} (rendezvous.reform_timeout); restarting this node's workers",
          id, job.current->round.round, format_duration(config_.get().rendezvous.reform_timeout));
      end_progress_round(now, job);
      stop_workers(now, job, StopMode::kKill);
      job.started = false;
      job.joining.clear();
      job.live_acked = false;
      continue;
    }
    ack_if_live(id, job);
  }
}

void JobSupervisor::on_link_step(const std::string& id, Job& job, Worker& w,
                                 const worker_channel::LinkStep& step) {
  if (step.event == LinkEvent::kAlive) return;  // read by hang detection; twice a second
  const std::string line = worker_channel::describe(step);
  if (step.event == LinkEvent::kBadFrame || step.event == LinkEvent::kUnknownType ||
      step.to == LinkState::kLate) {
    spdlog::warn("job {} rank {} (pid {}): channel: {}", id, w.rank, w.pid, line);
  } else {
    spdlog::debug("job {} rank {} (pid {}): channel: {}", id, w.rank, w.pid, line);
  }
  if (step.send && w.channel) {
    if (Status sent = w.channel->endpoint.send(*step.send); !sent.ok()) {
      spdlog::warn("job {}: {}", id, sent.error().message);
    }
    if (w.channel->endpoint.open()) watch_channel(*w.channel, /*added=*/false);
  }
  if (step.event == LinkEvent::kJoined && !step.ignored && job.joining.erase(w.id) > 0) {
    ++live_reforms_;
    spawner_->note(w.id, "joined round " + std::to_string(w.round) + " in place (" + line + ")");
  }
  // A worker that stopped speaking the protocol cannot join what it was offered.
  if (step.to == LinkState::kPlain && job.joining.contains(w.id) && job.current) {
    spdlog::warn("job {} round {}: rank {} left the channel protocol while joining; restarting it",
                 id, job.current->round.round, w.rank);
    spawner_->kill(w.id);
    w.stopping = true;
  }
}

void JobSupervisor::ack_if_live(const std::string& id, Job& job) {
  if (!job.current || !job.started || job.failure || job.done || job.live_acked) return;
  const std::uint64_t round = job.current->round.round;
  std::size_t running = 0;
  for (const Worker& w : job.workers) {
    if (w.round != round || w.exit || w.stopping) continue;
    if (job.joining.contains(w.id) || !w.channel || !w.channel->link.live()) return;
    ++running;
  }
  std::uint32_t group_rank = 0;
  const rendezvous::RankAssignment* entry = self_entry(*job.current, self_, &group_rank);
  if (entry == nullptr || running != entry->slots) return;
  job.live_acked = true;
  RoundReport ack = round_report(ReportKind::kRoundAck, id, round);
  ack.live = true;
  reports_.push_back(std::move(ack));
}

void JobSupervisor::watch_channel(Worker::Channel& channel, bool added) {
  const bool out = channel.endpoint.wants_write();
  if (!added && out == channel.epoll_out) return;
  channel.epoll_out = out;
  if (!epoll_.valid()) {
    epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_.valid()) {
      spdlog::error("cannot create the supervisor's epoll set: {}; worker channels are read on "
                    "timers only",
                    std::strerror(errno));
      return;
    }
    epoll_event spawner_event{};
    spawner_event.events = EPOLLIN;
    spawner_event.data.fd = spawner_->fd();
    if (spawner_->fd() >= 0) ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, spawner_->fd(), &spawner_event);
  }
  epoll_event event{};
  event.events = EPOLLIN | (out ? EPOLLOUT : 0u);
  event.data.fd = channel.endpoint.fd();
  // Closing a descriptor takes it out of the set; a reused number is added anew.
  if (::epoll_ctl(epoll_.get(), added ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, channel.endpoint.fd(),
                  &event) != 0 &&
      errno == ENOENT) {
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, channel.endpoint.fd(), &event);
  }
}

}  // namespace elastic::node
