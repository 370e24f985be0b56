#include "tests/sim/node_core_cluster.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <variant>

#include <nlohmann/json.hpp>

#include "daemon/rendezvous/job_spec.h"
#include "daemon/rendezvous/round_policy.h"

namespace elastic::sim {
namespace {

using namespace std::chrono_literals;
using rendezvous::JobState;

// How long a job must show a known liveness bug's signature to count as stuck in it: past the
// job tier's 30 s memory of a lost member and any restart backoff or quarantine step.
constexpr Duration kKnownStuckFor = std::chrono::seconds(60);

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "node core cluster: %s\n", what);
  std::abort();
}

std::uint64_t fnv1a(const std::string& bytes) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string ranks_text(const rendezvous::RankMap& ranks) {
  std::string out = "[";
  for (const auto& r : ranks) {
    if (out.size() > 1) out += " ";
    out += r.node + "/g" + std::to_string(r.generation) + ":" + std::to_string(r.first_rank) + "+" +
           std::to_string(r.slots);
  }
  return out + "]";
}

std::string ms(Duration d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) + " ms";
}

// "[<id> <state> r<round>, ...]" of the jobs of a reply (or of a committed state as JSON), for
// read violations.
std::string jobs_text(const nlohmann::json& jobs) {
  std::string out = "[";
  for (const nlohmann::json& job : jobs) {
    if (out.size() > 1) out += ", ";
    out += job.value("id", "?") + " " + job.value("state", "?") + " r" +
           std::to_string(job.value("round", std::uint64_t{0}));
  }
  return out + "]";
}

}  // namespace

NodeCoreClusterOptions default_cluster_options() {
  NodeCoreClusterOptions o;
  config::DaemonConfig& c = o.core.config;
  // tests/integ/daemon_under_test.h's kFastMembership.
  c.membership.probe_interval = 200ms;
  c.membership.probe_timeout = 50ms;
  c.membership.gossip_interval = 50ms;
  c.membership.suspicion_multiplier = 2;
  c.membership.suspicion_max_multiplier = 3;
  c.membership.push_pull_interval = 1s;
  c.membership.reconnect_interval = 1s;
  c.membership.rejoin_interval = 1s;
  c.membership.gossip_to_dead = 5s;
  c.transport.heartbeat_interval = 200ms;
  c.transport.heartbeat_timeout = 1s;
  c.consensus.election_timeout = 300ms;
  c.consensus.heartbeat_interval = 50ms;
  // Snapshots (and InstallSnapshot to lagging or restarted voters) happen in every scenario.
  c.consensus.snapshot_every_entries = 25;
  c.rendezvous.lease_duration = 1s;
  c.rendezvous.last_call = 300ms;
  // A job that waits for nodes never fails here: under the heaviest chaos a quarantined node
  // (back-off up to 10 min) can keep a 5-node cluster full for longer than the default 10 min.
  c.rendezvous.join_timeout = 1h;
  c.spawner.stop_grace = 1s;
  // No per-user caps: the scenarios' clients are one user submitting in bursts.
  c.control.max_active_jobs_per_user = 0;
  c.control.submits_per_minute_per_user = 0;
  c.control.submit_burst_per_user = 0;
  o.core.launcher.stop_grace = c.spawner.stop_grace;
  o.link.base_latency = 500us;
  o.link.jitter = 2ms;
  o.link.loss = 0.03;
  o.link.duplicate = 0.03;
  o.link.reorder_probability = 0.2;
  o.link.reorder_delay = 30ms;
  return o;
}

NodeCoreClusterOptions shipped_cluster_options(std::size_t daemons) {
  NodeCoreClusterOptions o;
  o.core.daemons = daemons;
  o.core.voters = 3;
  o.core.seeds = 3;
  o.core.config.control.max_active_jobs_per_user = 0;
  o.core.config.control.submits_per_minute_per_user = 0;
  o.core.config.control.submit_burst_per_user = 0;
  o.lease_check_every_event = false;
  return o;
}

NodeCoreCluster::NodeCoreCluster(std::uint64_t seed, NodeCoreClusterOptions options)
    : options_(std::move(options)), groups_(sim_), sim_(seed) {
  options_.core.state_root = dir_.path();
  options_.core.launcher.stop_grace = options_.core.config.spawner.stop_grace;
  options_.core.launcher.groups = &groups_;
  sim_.set_default_link(options_.link);
  for (NodeId id = 0; id < options_.core.daemons; ++id) {
    sim_.add_node(NodeCoreProcess::address_for(id), [this](const NodeInfo& info) {
      return std::make_unique<NodeCoreProcess>(info, options_.core, this, sim_);
    });
  }
  sim_.add_invariant([this] { return check(); });
  if (options_.check_reads) views_.emplace(0, TableView{});  // nothing applied yet: no jobs
}

NodeCoreCluster::~NodeCoreCluster() {
  // The processes go first, while the ledgers their launchers report to still exist.
  for (NodeId id = 0; id < options_.core.daemons; ++id) {
    if (sim_.is_up(id)) sim_.crash(id);
  }
}

NodeCoreProcess* NodeCoreCluster::process(NodeId id) {
  return static_cast<NodeCoreProcess*>(sim_.process(id));
}

const rendezvous::JobTable* NodeCoreCluster::table(NodeId id) {
  if (id >= options_.core.voters) return nullptr;
  const NodeCoreProcess* p = process(id);
  return p == nullptr ? nullptr : &p->core().jobs().table();
}

std::optional<NodeId> NodeCoreCluster::leader() {
  std::optional<NodeId> best;
  std::uint64_t best_term = 0;
  for (NodeId id = 0; id < options_.core.voters; ++id) {
    const NodeCoreProcess* p = process(id);
    if (p == nullptr || !p->core().leading()) continue;
    const std::uint64_t term = p->core().consensus().term();
    if (!best || term > best_term) {
      best = id;
      best_term = term;
    }
  }
  return best;
}

void NodeCoreCluster::count_stale_starts(NodeId id) {
  const NodeCoreProcess* p = process(id);
  if (p != nullptr) counters_.stale_starts += p->core().rounds().stale_starts();
}

void NodeCoreCluster::crash(NodeId id) {
  count_stale_starts(id);
  sim_.crash(id);
  ++counters_.crashes;
}

void NodeCoreCluster::restart(NodeId id) {
  if (lost_.contains(id)) die("restart of a permanently lost node");
  sim_.restart(id);
  ++counters_.restarts;
}

void NodeCoreCluster::lose(NodeId id) {
  if (sim_.is_up(id)) crash(id);
  lost_.insert(id);
  ++counters_.voters_lost;
}

void NodeCoreCluster::partition(const std::vector<std::vector<NodeId>>& groups) {
  sim_.partition(groups);
  ++counters_.partitions;
}

void NodeCoreCluster::restart_all() {
  for (NodeId id = 0; id < options_.core.daemons; ++id) {
    if (!sim_.is_up(id) && !lost_.contains(id)) restart(id);
  }
}

std::size_t NodeCoreCluster::submit(std::uint32_t min_nodes, std::uint32_t max_nodes,
                                    std::uint32_t workers_per_node, SubmitExtras extras) {
  const std::size_t n = requests_.size();
  Request request;
  request.spec.name = "c" + std::to_string(n);
  request.spec.command = {"/usr/bin/train"};
  request.spec.min_nodes = min_nodes;
  request.spec.max_nodes = max_nodes;
  request.spec.workers_per_node = workers_per_node;
  request.spec.max_restarts = options_.max_restarts;
  request.spec.restart_backoff = Duration::zero();
  request.spec.priority = extras.priority;
  request.spec.preemptible = extras.preemptible;
  if (extras.runtime) {
    request.spec.env["SIM_RUNTIME_MS"] = std::to_string(
        std::chrono::duration_cast<std::chrono::milliseconds>(*extras.runtime).count());
  }
  requests_.push_back(std::move(request));
  ++counters_.requests;
  std::vector<NodeId> up;
  for (NodeId id = 0; id < options_.core.daemons; ++id) {
    if (sim_.is_up(id)) up.push_back(id);
  }
  if (up.empty()) {
    requests_[n].next_try = sim_.now() + options_.client_retry;
  } else {
    attempt(n, up[sim_.rng().below(up.size())]);
  }
  return n;
}

void NodeCoreCluster::attempt(std::size_t index, NodeId via) {
  Request& request = requests_[index];
  // An unanswered call (its daemon crashed) is retried once the call would have timed out.
  request.next_try = sim_.now() + options_.call_timeout + options_.client_retry;
  ++counters_.attempts;
  // Each call is its own submission (NodeCore::call: client id <session>/<call>): a retry after
  // an unanswered call may create a second job, as a user re-running elasticctl submit would.
  // Its own name keeps checker 7 about one call.
  rendezvous::JobSpec spec = request.spec;
  if (request.attempts > 0) spec.name += "." + std::to_string(request.attempts);
  ++request.attempts;
  node::ClientRequest call;
  call.verb = "submit";
  // As elasticctl sends it (ctl/submit.cc): {"verb": "submit", "spec": {...}}.
  call.args =
      nlohmann::json{{"verb", "submit"}, {"spec", nlohmann::json::parse(rendezvous::to_json(spec))}}
          .dump();
  call.uid = static_cast<std::uint32_t>(::geteuid());
  call.gid = static_cast<std::uint32_t>(::getegid());
  SimContext ctx(sim_, via);
  // The session elasticd's control socket gives every call: "<daemon>/<generation>", the client
  // id prefix a forwarded call gets at the leader too (node.cc start_call, node_core.cc).
  const std::string session =
      NodeCoreProcess::name_for(via) + "/" + std::to_string(sim_.info(via).generation);
  const std::uint64_t id = process(via)->call(ctx, std::move(call), session, options_.call_timeout);
  calls_[{via, sim_.info(via).generation, id}] = std::make_pair(index, spec.name);
  sim_.reschedule(via);
}

void NodeCoreCluster::drive_clients() {
  for (std::size_t i = 0; i < requests_.size(); ++i) {
    Request& request = requests_[i];
    if (request.job_id || sim_.now() < request.next_try) continue;
    const NodeId via = static_cast<NodeId>(sim_.rng().below(options_.core.daemons));
    if (!sim_.is_up(via)) {
      request.next_try = sim_.now() + options_.client_retry;
      continue;
    }
    attempt(i, via);
  }
  if (options_.check_reads) prune_reads();
  if (!options_.lease_check_every_event) {
    std::set<NodeId> with_workers;
    for (const auto& [key, worker] : live_) with_workers.insert(key.first);
    for (NodeId id : with_workers) check_leases(id);
  }
}

bool NodeCoreCluster::crash_worker() {
  if (live_.empty()) return false;
  auto it = live_.begin();
  std::advance(it, static_cast<long>(sim_.rng().below(live_.size())));
  return fail_live_worker(it->first);
}

bool NodeCoreCluster::crash_worker_on(NodeId node) {
  const auto it = std::find_if(live_.begin(), live_.end(),
                               [&](const auto& entry) { return entry.first.first == node; });
  return it != live_.end() && fail_live_worker(it->first);
}

bool NodeCoreCluster::fail_live_worker(WorkerKey worker) {
  const auto [node, id] = worker;
  NodeCoreProcess* p = process(node);
  if (p == nullptr || !p->fail_worker(id, sim_.now(), 1)) return false;
  ++counters_.worker_crashes;
  sim_.reschedule(node);
  return true;
}

void NodeCoreCluster::read(NodeId via, const std::string& job) {
  if (!options_.check_reads) die("read() without options.check_reads");
  NodeCoreProcess* p = process(via);
  if (p == nullptr || !p->started()) die("read() at a daemon that is down");
  const std::uint64_t generation = sim_.info(via).generation;
  node::ClientRequest call;
  call.verb = job.empty() ? "jobs" : "job";
  // As elasticctl sends them (ctl/jobs.cc): {"verb": "jobs"}, {"verb": "job", "job": <id>}.
  nlohmann::json args{{"verb", call.verb}};
  if (!job.empty()) args["job"] = job;
  call.args = args.dump();
  call.uid = static_cast<std::uint32_t>(::geteuid());
  call.gid = static_cast<std::uint32_t>(::getegid());
  Read read{.verb = call.verb,
            .job = job,
            .who = "d" + std::to_string(via) + " (gen " + std::to_string(generation) + ")",
            .invoked = sim_.now(),
            .lo = views_.rbegin()->first};
  ++counters_.reads;
  if (led_.contains({via, generation}) && !p->core().leading()) ++counters_.reads_at_deposed;
  SimContext ctx(sim_, via);
  // Reads carry no session (they change nothing); the answer may come out of the call itself.
  in_read_call_ = true;
  const std::uint64_t id = p->call(ctx, std::move(call), "", options_.call_timeout);
  in_read_call_ = false;
  const CallKey key{via, generation, id};
  reads_.emplace(key, std::move(read));
  for (auto& [early, reply] : std::exchange(early_replies_, {})) {
    if (early == key) on_reply(via, generation, reply);
  }
  sim_.reschedule(via);
}

void NodeCoreCluster::read_random() {
  std::vector<NodeId> up;
  std::vector<NodeId> have_led;
  for (NodeId id = 0; id < options_.core.daemons; ++id) {
    if (process(id) == nullptr || !process(id)->started()) continue;
    up.push_back(id);
    if (led_.contains({id, sim_.info(id).generation})) have_led.push_back(id);
  }
  if (up.empty()) return;
  Rng& rng = sim_.rng();
  const NodeId via = !have_led.empty() && rng.unit() < 0.5 ? have_led[rng.below(have_led.size())]
                                                           : up[rng.below(up.size())];
  std::vector<const std::string*> acknowledged;
  for (const Request& r : requests_) {
    if (r.job_id) acknowledged.push_back(&*r.job_id);
  }
  const bool one = !acknowledged.empty() && rng.below(3) == 0;
  read(via, one ? *acknowledged[rng.below(acknowledged.size())] : std::string());
}

void NodeCoreCluster::prune_reads() {
  // A read whose daemon went down is never answered; the core answers every other one within
  // its timeout.
  std::erase_if(reads_, [&](const auto& entry) {
    return sim_.now() > entry.second.invoked + options_.call_timeout + options_.client_retry;
  });
  // States older than every outstanding read's lo can no longer be shown (nor can any but the
  // newest to a read called from now on).
  consensus::Index keep = views_.rbegin()->first;
  for (const auto& [key, read] : reads_) keep = std::min(keep, read.lo);
  views_.erase(views_.begin(), views_.lower_bound(keep));
}

bool NodeCoreCluster::settle(Duration limit, Duration poll) {
  heal();
  restart_all();
  return sim_.run_until_condition(
      [&] {
        drive_clients();
        return !unsettled().has_value();
      },
      sim_.now() + limit, poll);
}

bool NodeCoreCluster::all_acknowledged() const {
  return std::all_of(requests_.begin(), requests_.end(),
                     [](const Request& r) { return r.job_id.has_value(); });
}

void NodeCoreCluster::note_violation(std::string problem) {
  if (!violation_) violation_ = std::move(problem);
}

// --- observer -------------------------------------------------------------------------------

void NodeCoreCluster::on_reply(NodeId node, std::uint64_t generation,
                               const node::CallReply& reply) {
  const auto call = calls_.find({node, generation, reply.call});
  if (call == calls_.end()) {
    const CallKey key{node, generation, reply.call};
    if (const auto read = reads_.find(key); read != reads_.end()) {
      check_read(read->second, reply);
      reads_.erase(read);
    } else if (in_read_call_) {
      early_replies_.emplace_back(key, reply);
    }
    return;
  }
  Request& request = requests_[call->second.first];
  const std::string name = call->second.second;
  calls_.erase(call);
  if (reply.outcome != node::ForwardOutcome::kOk) {
    ++counters_.error_replies;
    request.last_error = reply.body;
    if (!request.job_id) request.next_try = sim_.now() + options_.client_retry;
    return;
  }
  const auto body = nlohmann::json::parse(reply.body, nullptr, false);
  if (body.is_discarded() || !body.contains("job") || !body["job"].contains("id") ||
      !body["job"]["id"].is_string()) {
    note_violation("d" + std::to_string(node) + " acknowledged " + name +
                   " with a reply naming no job: " + reply.body);
    return;
  }
  const std::string id = body["job"]["id"].get<std::string>();
  if (request.job_id && *request.job_id != id) {
    note_violation("request " + request.spec.name + " was acknowledged as " + *request.job_id +
                   " and as " + id);
  }
  if (!request.job_id) {
    request.job_id = id;
    request.acknowledged_name = name;
    ++counters_.acknowledged;
  }
}

void NodeCoreCluster::on_round_start(NodeId node, std::uint64_t generation,
                                     const node::RoundStartStamp& start, std::size_t bytes,
                                     bool taken) {
  ++counters_.round_starts;
  counters_.round_start_bytes += bytes;
  // A delta the member could not read (it lacked the round it is against) told it nothing.
  if (start.delta && !taken) return;
  const rendezvous::RoundStamp stamp{start.term, start.round};
  auto& seen = seen_[{node, generation, start.job}];
  if (rendezvous::is_older(seen, stamp)) seen = stamp;
  auto& term = round_terms_[{node, generation, start.job, start.round}];
  term = std::max(term, start.term);
}

void NodeCoreCluster::on_persist(NodeId node, const consensus::Persist& persist) {
  if (persist.append.empty()) return;
  const NodeCoreProcess* p = process(node);
  // Only a leader appends entries it did not receive: its own proposals.
  if (p == nullptr || !p->started() || !p->core().leading()) return;
  for (const consensus::Entry& entry : persist.append) {
    if (entry.type != consensus::EntryType::kCommand) continue;
    const auto command = rendezvous::decode_command(entry.data);
    if (!command.ok() || !std::holds_alternative<rendezvous::OpenRound>(*command)) continue;
    ++counters_.open_proposals;
    ++open_proposals_by_[node];
    if (crash_arm_ == 1) {
      crash_now_ = node;
    } else if (crash_arm_ == 2) {
      crash_watch_ = std::make_pair(node, entry.index);
    }
    crash_arm_ = 0;
  }
}

void NodeCoreCluster::on_applied(NodeId, const rendezvous::JobTable& table) {
  const consensus::Index index = table.applied_index();
  if (committed_watcher_ && index > watched_index_) {
    watched_index_ = index;
    committed_watcher_(table);
  }
  if (!options_.check_reads) return;
  // Every daemon applies the same committed entries: the first to reach an index shows it.
  if (index <= views_.rbegin()->first) return;
  const TableView& before = views_.rbegin()->second;
  TableView view;
  for (const auto& [id, job] : table.jobs()) {
    const auto same = before.find(id);
    if (same != before.end() && same->second->record == job) {
      view.emplace(id, same->second);
    } else {
      view.emplace(id, std::make_shared<const ViewedJob>(
                           ViewedJob{.record = job, .listed = {}, .shown = {}}));
    }
  }
  views_.emplace(index, std::move(view));
  if (reads_.empty()) views_.erase(views_.begin(), std::prev(views_.end()));
}

void NodeCoreCluster::on_spawn(const SimWorker& worker) {
  ++counters_.spawns;
  ++spawns_by_job_[worker.job];
  const auto [slot, free] = slots_.emplace(std::make_pair(worker.node, worker.slot), worker.id);
  if (!free) {
    const auto& other = live_.at({worker.node, slot->second});
    note_violation(worker.daemon + " started " + worker.job + " round " +
                   std::to_string(worker.round) + " rank " + std::to_string(worker.rank) +
                   " on slot " + std::to_string(worker.slot) + ", where " + other.job + " round " +
                   std::to_string(other.round) + " rank " + std::to_string(other.rank) +
                   " still runs");
  }
  live_[{worker.node, worker.id}] = worker;
  carried_.erase({worker.node, worker.id});  // a new process holds no state
  counters_.live_spawns += worker.live;
  unchecked_spawns_.push_back(worker);
  stale_dirty_ = true;
  // A rank that joins a round one of whose ranks is already gone never completes it.
  if (options_.peer_loss_exit != Duration::zero() && broken_.contains({worker.job, worker.round})) {
    // The launcher is still inside spawn(): its worker exits at the next process().
    if (NodeCoreProcess* p = process(worker.node); p != nullptr && p->started()) {
      pending_peer_loss_.push_back({{worker.node, worker.id}, worker.round});
    }
  }
}

void NodeCoreCluster::on_exit(const SimWorker& worker, const spawner::WorkerExit& exit) {
  ++counters_.exits;
  live_.erase({worker.node, worker.id});
  offered_.erase({worker.node, worker.id});
  carried_.erase({worker.node, worker.id});
  const auto slot = slots_.find({worker.node, worker.slot});
  if (slot != slots_.end() && slot->second == worker.id) slots_.erase(slot);
  stale_dirty_ = true;
  if (options_.peer_loss_exit == Duration::zero() || (!exit.signaled && exit.status == 0)) return;
  broken_.insert({worker.job, worker.round});
  // The other ranks of the round lose their peer. A crashing daemon's own workers are going
  // with it (its process is already gone from the simulator).
  for (const auto& [key, other] : live_) {
    if (other.job != worker.job || other.round != worker.round) continue;
    NodeCoreProcess* p = process(key.first);
    if (p == nullptr || !p->started()) continue;
    if (p->lose_peer(key.second, worker.round, sim_.now() + options_.peer_loss_exit)) {
      ++counters_.peer_losses;
      sim_.reschedule(key.first);
    }
  }
}

void NodeCoreCluster::on_offer(const SimWorker& worker, const worker_channel::RoundOffer& offer) {
  ++counters_.offers;
  if (offer.intact) {
    ++counters_.intact_offers;
    if (broken_.contains({worker.job, worker.round})) ++counters_.intact_but_broken;
  }
  offered_[{worker.node, worker.id}] = offer.round;
  stale_dirty_ = true;
}

void NodeCoreCluster::on_reform(const SimWorker& worker, std::uint64_t /*old_round*/) {
  ++counters_.reforms;
  const WorkerKey key{worker.node, worker.id};
  live_[key] = worker;
  offered_.erase(key);
  stale_dirty_ = true;
  unchecked_reforms_.push_back(worker);
}

void NodeCoreCluster::on_training(const SimWorker& worker, const SimSeat& seat, bool training) {
  const WorkerKey key{worker.node, worker.id};
  const auto id = std::make_pair(worker.job, seat.round);
  if (training) {
    TrainingGroup& group = training_[id];
    if (group.held.empty()) group.world = seat.world;
    group.held[seat.rank] = key;
    if (!group.training && group.held.size() == group.world &&
        group.held.rbegin()->first + 1 == group.world) {
      group_trains(worker.job, seat.round);
    }
    return;
  }
  const auto it = training_.find(id);
  if (it == training_.end()) return;
  if (it->second.training) group_stops(worker.job, seat.round);
  const auto held = it->second.held.find(seat.rank);
  if (held != it->second.held.end() && held->second == key) it->second.held.erase(held);
  if (it->second.held.empty()) training_.erase(it);
}

// --- checkers -------------------------------------------------------------------------------

void NodeCoreCluster::group_trains(const std::string& job, std::uint64_t round) {
  TrainingGroup& group = training_.at({job, round});
  JobSteps& steps = steps_[job];
  const std::string what = "job " + job + " round " + std::to_string(round);
  // Checker 9a: one training group per job (an older one may end within the allowance).
  for (auto other = training_.lower_bound({job, 0});
       other != training_.end() && other->first.first == job; ++other) {
    if (other->first.second == round || !other->second.training) continue;
    if (other->first.second > round || group_overlap_allowed() == Duration::zero()) {
      note_violation("two groups of job " + job + " train at once " + seed_text() + ": round " +
                     std::to_string(round) + " formed while round " +
                     std::to_string(other->first.second) + " still trains (since " +
                     ms(sim_.now() - other->second.since) + " ago)");
    } else {
      overlaps_.emplace(std::make_tuple(job, other->first.second, round), sim_.now());
      ++counters_.group_overlaps;
    }
  }
  // Checker 9b: a superseded round never trains again.
  if (round < steps.newest_trained) {
    note_violation(what + " trains after round " + std::to_string(steps.newest_trained) +
                   " of the job trained " + seed_text());
  }
  steps.newest_trained = std::max(steps.newest_trained, round);
  // The step it continues from (see checker 9 in the header).
  std::optional<Carried> agreed;
  for (const auto& [rank, key] : group.held) {
    const auto carried = carried_.find(key);
    if (carried == carried_.end()) continue;
    const Carried& c = carried->second;
    if (!agreed || c.round > agreed->round || (c.round == agreed->round && c.step < agreed->step)) {
      agreed = c;
    }
  }
  // Checker 9c: live state is only ever the newest branch of the job's steps.
  if (agreed && agreed->round < steps.top_round) {
    note_violation(what + " continues from step " + std::to_string(agreed->step) + " of round " +
                   std::to_string(agreed->round) + ", which round " +
                   std::to_string(steps.top_round) + " superseded (it trained after it, to step " +
                   std::to_string(steps.top) + "): the steps after " +
                   std::to_string(agreed->step) + " are applied twice, once on each branch " +
                   seed_text());
  }
  group.base = agreed ? agreed->step : steps.checkpoint;
  if (steps.top > group.base) {
    counters_.steps_rolled_back += static_cast<std::uint64_t>(steps.top - group.base);
  }
  steps.top = group.base;
  steps.top_round = round;
  group.training = true;
  group.since = sim_.now();
  ++counters_.groups_trained;
}

Duration NodeCoreCluster::group_overlap_allowed() const {
  if (options_.group_overlap) return *options_.group_overlap;
  // The cut-off side's lease, which a deposed leader on its side may still renew until it steps
  // down (CheckQuorum: up to two election timeouts, the granter's margin, rendezvous/lease.h),
  // and the fence's own reaction (its timer, the stop).
  return options_.core.config.rendezvous.lease_duration +
         2 * options_.core.config.consensus.election_timeout + 200ms;
}

void NodeCoreCluster::check_overlaps() {
  for (auto it = overlaps_.begin(); it != overlaps_.end();) {
    const auto& [job, older, newer] = it->first;
    const auto training = [&](std::uint64_t round) {
      const auto group = training_.find({job, round});
      return group != training_.end() && group->second.training;
    };
    const Duration lasted = sim_.now() - it->second;
    if (!training(older) || !training(newer)) {
      counters_.longest_overlap = std::max(counters_.longest_overlap, lasted);
      it = overlaps_.erase(it);
      continue;
    }
    if (lasted > group_overlap_allowed()) {
      const auto holders = [&](std::uint64_t round) {
        std::string text;
        for (const auto& [rank, key] : training_.at({job, round}).held) {
          text += " r" + std::to_string(rank) + "=d" + std::to_string(key.first) + "/w" +
                  std::to_string(key.second);
        }
        return text;
      };
      note_violation("two groups of job " + job + " train at once " + seed_text() + ": round " +
                     std::to_string(older) + " still trains " + ms(lasted) + " after round " +
                     std::to_string(newer) + " formed (allowed: " + ms(group_overlap_allowed()) +
                     ", the cut-off side's lease); round " + std::to_string(older) + ":" +
                     holders(older) + ", round " + std::to_string(newer) + ":" + holders(newer));
      return;
    }
    ++it;
  }
}

void NodeCoreCluster::group_stops(const std::string& job, std::uint64_t round) {
  TrainingGroup& group = training_.at({job, round});
  JobSteps& steps = steps_[job];
  group.training = false;
  const std::int64_t applied = (sim_.now() - group.since) / options_.step_time;
  const std::int64_t reached = group.base + applied;
  counters_.steps_applied += static_cast<std::uint64_t>(applied);
  // Every member keeps the state it reached (a member that exits loses it, on_exit).
  for (const auto& [rank, key] : group.held) carried_[key] = Carried{reached, round};
  if (steps.top_round == round) steps.top = reached;
  // Rank 0 checkpoints every checkpoint_steps; publication is fenced by round.
  const std::int64_t published = reached / options_.checkpoint_steps * options_.checkpoint_steps;
  if (round >= steps.checkpoint_round && published > group.base) {
    steps.checkpoint = published;
    steps.checkpoint_round = round;
  }
}

void NodeCoreCluster::record_table(NodeId id, const rendezvous::JobTable& table) {
  const consensus::Index index = table.applied_index();
  const std::string who =
      "d" + std::to_string(id) + " (applied index " + std::to_string(index) + ")";
  // Checker 4.
  const std::uint64_t digest = fnv1a(table.snapshot());
  const auto [it, inserted] = digests_.emplace(index, std::make_pair(digest, id));
  if (!inserted && it->second.first != digest) {
    note_violation("d" + std::to_string(id) + "'s job table at applied index " +
                   std::to_string(index) + " differs from d" + std::to_string(it->second.second) +
                   "'s at the same index");
  }
  std::map<std::string, int> by_name;
  std::map<std::string, std::uint32_t> held;
  std::map<std::string, std::string> holders;
  for (const auto& [job_id, job] : table.jobs()) {
    // Checker 7.
    if (++by_name[job.spec.name] > 1) {
      std::string sessions;
      for (const auto& [client, session] : table.clients()) {
        if (table.job(session.job_id) != nullptr &&
            table.job(session.job_id)->spec.name == job.spec.name) {
          sessions += " " + session.job_id + " by client " + client;
        }
      }
      note_violation(who + "'s table holds two jobs for the one call that submitted " +
                     job.spec.name + ":" + sessions);
    }
    if (rendezvous::is_terminal(job.state) && !ended_.contains(job_id)) {
      ended_[job_id] = sim_.now();
      stale_dirty_ = true;
    }
    if (job.round == 0) continue;
    // Checker 1.
    const auto [r, fresh] = ranks_.emplace(std::make_pair(job_id, job.round), job.ranks);
    if (fresh) {
      ++counters_.rounds_opened;
    } else if (r->second != job.ranks) {
      note_violation("job " + job_id + " round " + std::to_string(job.round) +
                     " has two rank maps: " + ranks_text(r->second) + " and " +
                     ranks_text(job.ranks) + " (" + who + ")");
    }
    auto& newest = newest_round_[job_id];
    if (job.round > newest.first) {
      newest = {job.round, sim_.now()};
      stale_dirty_ = true;
    }
    // Checker 5, committed half: a round holds its slots until the job's next round or end, or
    // until it is put away (suspended, or requeued: pending again).
    if (!rendezvous::is_active_round_state(job.state)) continue;
    for (const auto& rank : job.ranks) {
      held[rank.node] += rank.slots;
      holders[rank.node] +=
          " " + job_id + "/r" + std::to_string(job.round) + "x" + std::to_string(rank.slots);
    }
  }
  for (const auto& [node_name, slots] : held) {
    if (slots > options_.core.slots_per_node) {
      note_violation("node " + node_name + " has " + std::to_string(options_.core.slots_per_node) +
                     " slots but committed rounds hold " + std::to_string(slots) + ":" +
                     holders[node_name] + " (" + who + ")");
    }
  }
}

void NodeCoreCluster::check_committed(const SimWorker& w, const std::string& verb) {
  const std::string who = w.daemon + " (gen " + std::to_string(w.generation) + ")";
  const std::string what = "job " + w.job + " round " + std::to_string(w.round);
  // Checker 2.
  const auto committed = ranks_.find({w.job, w.round});
  const rendezvous::RankAssignment* entry = nullptr;
  if (committed != ranks_.end()) {
    for (const auto& r : committed->second) {
      if (r.node == w.daemon && r.generation == w.generation) entry = &r;
    }
  }
  if (entry == nullptr) {
    note_violation(who + " " + verb + " a worker of " + what +
                   (committed == ranks_.end()
                        ? ", which no table committed"
                        : " although the committed rank map " + ranks_text(committed->second) +
                              " does not name it"));
  } else if (w.rank < entry->first_rank || w.rank >= entry->first_rank + entry->slots ||
             w.local_rank != w.rank - entry->first_rank ||
             w.world != rendezvous::world_size(committed->second)) {
    note_violation(who + " " + verb + " rank " + std::to_string(w.rank) + " (local " +
                   std::to_string(w.local_rank) + ", world " + std::to_string(w.world) + ") of " +
                   what + ", not what the committed rank map " + ranks_text(committed->second) +
                   " gives it");
  }
}

void NodeCoreCluster::check_spawn(const SimWorker& w) {
  check_committed(w, "started");
  const std::string who = w.daemon + " (gen " + std::to_string(w.generation) + ")";
  const std::string what = "job " + w.job + " round " + std::to_string(w.round);
  // Checker 3.
  // A round the leader started on itself came through no packet: its term is unknown, and only
  // round numbers are compared.
  const auto term = round_terms_.find({w.node, w.generation, w.job, w.round});
  const bool known = term != round_terms_.end();
  const rendezvous::RoundStamp stamp{known ? term->second : 0, w.round};
  const auto older = [&](const rendezvous::RoundStamp& other) {
    return known ? rendezvous::is_older(stamp, other) : w.round < other.round;
  };
  const auto text = [](const rendezvous::RoundStamp& s) {
    return "(term " + std::to_string(s.term) + ", round " + std::to_string(s.round) + ")";
  };
  const auto seen = seen_.find({w.node, w.generation, w.job});
  if (seen != seen_.end() && older(seen->second)) {
    note_violation(who + " started a worker of " + what + " " + text(stamp) +
                   " after it received " + text(seen->second));
  }
  auto& acted = acted_[{w.daemon, w.job}];
  if (older(acted)) {
    note_violation(who + " started a worker of " + what + " " + text(stamp) +
                   " after it acted on " + text(acted));
  } else if (known) {
    acted = stamp;
  } else {
    acted.round = w.round;
  }
}

void NodeCoreCluster::check_read(const Read& read, const node::CallReply& reply) {
  const consensus::Index hi = views_.rbegin()->first;
  const std::string no_job = "No job \"" + read.job + "\" is known.";
  // What the answer claims: the whole list, one job, or that the job does not exist.
  const bool absent =
      read.verb == "job" && reply.outcome == node::ForwardOutcome::kError && reply.body == no_job;
  if (reply.outcome != node::ForwardOutcome::kOk && !absent) {
    ++counters_.read_errors;
    return;
  }
  const auto when = [](TimePoint t) {
    const auto at = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch());
    char text[32];
    std::snprintf(text, sizeof text, "%lld.%03lld s", static_cast<long long>(at.count() / 1000),
                  static_cast<long long>(at.count() % 1000));
    return std::string(text);
  };
  const std::string call = "\"" + read.verb + "\"" + (read.job.empty() ? "" : " " + read.job) +
                           " called at " + read.who + " at " + when(read.invoked) +
                           " (committed up to index " + std::to_string(read.lo) + ")";
  nlohmann::json body;
  if (!absent) {
    body = nlohmann::json::parse(reply.body, nullptr, false);
    const char* key = read.verb == "jobs" ? "jobs" : "job";
    if (body.is_discarded() || !body.contains(key) ||
        (read.verb == "jobs" ? !body[key].is_array() : !body[key].is_object())) {
      note_violation(call + " was answered with no " + key + ": " + reply.body);
      return;
    }
    body = std::move(body[key]);
    // A queued job's position and reason are the leader's last scheduling pass, not the table:
    // they are not part of what is checked for linearizability.
    const auto volatile_fields = [](nlohmann::json& job) {
      if (!job.is_object()) return;
      job.erase("position");
      job.erase("waiting");
    };
    if (read.verb == "jobs") {
      for (nlohmann::json& job : body) volatile_fields(job);
    } else {
      volatile_fields(body);
    }
  }
  std::vector<std::string> listed;  // a "jobs" answer, job by job as compared
  if (read.verb == "jobs") {
    for (const nlohmann::json& job : body) listed.push_back(job.dump());
  }
  const std::string shown = read.verb == "job" && !absent ? body.dump() : std::string();
  // The JSON JobService answers with for a job (rendezvous::to_json, env included: the
  // simulated client submitted every job): "jobs" lists no events, "job" its last 20.
  const auto as_listed = [](const ViewedJob& job) -> const std::string& {
    if (!job.listed) job.listed = nlohmann::json::parse(rendezvous::to_json(job.record, 0)).dump();
    return *job.listed;
  };
  const auto as_shown = [](const ViewedJob& job) -> const std::string& {
    if (!job.shown) job.shown = nlohmann::json::parse(rendezvous::to_json(job.record, 20)).dump();
    return *job.shown;
  };
  const auto matches = [&](const TableView& view) {
    if (read.verb == "job") {
      const auto job = view.find(read.job);
      if (absent) return job == view.end();
      return job != view.end() && as_shown(*job->second) == shown;
    }
    if (view.size() != listed.size()) return false;
    std::size_t k = 0;
    for (const auto& [id, job] : view) {
      if (as_listed(*job) != listed[k++]) return false;
    }
    return true;
  };
  const auto view_text = [&](const TableView& view) {
    nlohmann::json jobs = nlohmann::json::array();
    for (const auto& [id, job] : view) jobs.push_back(nlohmann::json::parse(as_listed(*job)));
    return jobs_text(jobs);
  };
  const auto first = views_.find(read.lo);
  if (first == views_.end()) die("checker 8 lost the state a read was called at");
  for (auto it = first; it != views_.end(); ++it) {
    if (matches(it->second)) {
      ++counters_.reads_checked;
      if (read.lo < hi) ++counters_.reads_during_writes;
      return;
    }
  }
  std::string answer;
  if (absent) {
    answer = "\"" + no_job + "\"";
  } else if (read.verb == "jobs") {
    answer = jobs_text(body);
  } else {
    answer = jobs_text(nlohmann::json::array({body})) + " (" + shown + ")";
  }
  note_violation(
      "stale read (seed=" + std::to_string(sim_.seed()) + "): " + call + ", answered at " +
      when(sim_.now()) + " (committed up to index " + std::to_string(hi) + ") with " + answer +
      ", which no committed table between those indices shows: at " + std::to_string(read.lo) +
      " it was " + view_text(first->second) +
      (read.lo == hi ? std::string()
                     : ", at " + std::to_string(hi) + " " + view_text(views_.rbegin()->second)));
}

void NodeCoreCluster::check_stale_workers() {
  const config::DaemonConfig& c = options_.core.config;
  const Duration allowance =
      c.rendezvous.lease_duration + c.spawner.stop_grace + options_.stale_slack;
  // The time by which `w` must be gone (kNever: its round still stands).
  // A live worker that accepted an offer is in the offered round: its daemon moved it there.
  auto round_of = [&](const WorkerKey& key, const SimWorker& w) {
    const auto offered = offered_.find(key);
    return offered == offered_.end() ? w.round : std::max(w.round, offered->second);
  };
  auto due = [&](const WorkerKey& key, const SimWorker& w) -> std::pair<TimePoint, std::string> {
    TimePoint at = kNever;
    std::string why;
    const auto newest = newest_round_.find(w.job);
    if (newest != newest_round_.end() && newest->second.first > round_of(key, w)) {
      at = newest->second.second + allowance;
      why = "round " + std::to_string(newest->second.first) + " was applied at +" +
            ms(newest->second.second - w.started) + " after it started";
    }
    const auto ended = ended_.find(w.job);
    if (ended != ended_.end() && ended->second + allowance < at) {
      at = ended->second + allowance;
      why = "the job ended";
    }
    return {at, why};
  };
  if (stale_dirty_) {
    stale_due_ = kNever;
    for (const auto& [key, w] : live_) stale_due_ = std::min(stale_due_, due(key, w).first);
    stale_dirty_ = false;
  }
  if (sim_.now() <= stale_due_) return;
  stale_due_ = kNever;
  for (const auto& [key, w] : live_) {
    const auto [at, why] = due(key, w);
    if (sim_.now() <= at) {
      stale_due_ = std::min(stale_due_, at);
      continue;
    }
    // Its daemon may still believe the round stands (no RoundStart told it otherwise) and hold
    // a valid lease for it: the fence is the lease, so that worker may run until the lease runs
    // out (check_leases) or the daemon learns better. Looked at again in a while.
    const NodeCoreProcess* p = process(key.first);
    bool believed = false;
    if (p != nullptr && p->started()) {
      for (const node::MemberRound& m : p->core().rounds().member_rounds()) {
        believed = believed || (m.job == w.job && m.round == round_of(key, w) && !m.fenced);
      }
      // A grow that holds its running workers in their round until the joiners are ready
      // (RoundStart::hold_live): the leader bounds the hold, and a joiner that never comes is
      // lost to the job tier, which opens a round without it.
      believed = believed || p->core().supervisor().held_round(w.job) > round_of(key, w);
    }
    if (believed) {
      stale_due_ = std::min(stale_due_, sim_.now() + 100ms);
      continue;
    }
    note_violation(w.daemon + " (gen " + std::to_string(w.generation) + ") still runs job " +
                   w.job + " round " + std::to_string(w.round) + " rank " + std::to_string(w.rank) +
                   " " + ms(sim_.now() - at + allowance) + " after " + why +
                   " (allowed: lease + stop grace + slack = " + ms(allowance) + ")");
    return;
  }
}

void NodeCoreCluster::check_leases(NodeId id) {
  const NodeCoreProcess* p = process(id);
  if (p == nullptr || !p->started()) return;
  const std::uint64_t generation = sim_.info(id).generation;
  for (const node::MemberRound& round : p->core().rounds().member_rounds()) {
    if (!round.fenced) continue;
    const auto [since, fresh] =
        fenced_.emplace(std::make_tuple(id, generation, round.job, round.round), sim_.now());
    // The supervisor SIGKILLs a fenced round's workers in the same pass; a little slack for a
    // check that runs only every poll.
    if (sim_.now() - since->second < 200ms) continue;
    for (const auto& [key, w] : live_) {
      if (key.first == id && w.job == round.job && w.round == round.round) {
        note_violation(w.daemon + " (gen " + std::to_string(generation) + ") still runs job " +
                       w.job + " round " + std::to_string(w.round) + " rank " +
                       std::to_string(w.rank) + " " + ms(sim_.now() - since->second) +
                       " after its lease ran out (the round is fenced)");
        return;
      }
    }
  }
}

std::optional<std::string> NodeCoreCluster::check() {
  for (NodeId id = 0; id < options_.core.voters; ++id) {
    const NodeCoreProcess* p = process(id);
    if (p == nullptr || !p->started()) continue;
    if (options_.check_reads && p->core().leading()) led_.emplace(id, sim_.info(id).generation);
    if (const std::uint64_t wrong = p->core().rounds().leader().skip_mismatches(); wrong > 0) {
      return "d" + std::to_string(id) + "'s leader skipped " + std::to_string(wrong) +
             " job(s) as settled whose plan was not empty " + seed_text();
    }
    const rendezvous::JobTable& t = p->core().jobs().table();
    const auto key = std::make_pair(sim_.info(id).generation, t.applied_index());
    auto& recorded = recorded_[id];
    if (recorded != key) {
      recorded = key;
      record_table(id, t);
    }
  }
  for (const SimWorker& w : unchecked_spawns_) check_spawn(w);
  unchecked_spawns_.clear();
  for (const SimWorker& w : unchecked_reforms_) check_committed(w, "re-formed");
  unchecked_reforms_.clear();
  check_overlaps();
  for (const auto& [worker, round] : pending_peer_loss_) {
    const auto [node, id] = worker;
    if (NodeCoreProcess* p = process(node); p != nullptr && p->started()) {
      if (p->lose_peer(id, round, sim_.now() + options_.peer_loss_exit)) {
        ++counters_.peer_losses;
        sim_.reschedule(node);
      }
    }
  }
  pending_peer_loss_.clear();
  check_stale_workers();
  if (options_.lease_check_every_event) {
    NodeId last = static_cast<NodeId>(-1);
    for (const auto& [key, w] : live_) {
      if (key.first != last) check_leases(key.first);
      last = key.first;
    }
  }
  if (crash_watch_) {
    const rendezvous::JobTable* t = table(crash_watch_->first);
    if (t == nullptr) {
      crash_watch_.reset();  // it went down some other way
    } else if (t->applied_index() >= crash_watch_->second) {
      crash_now_ = crash_watch_->first;
      crash_watch_.reset();
    }
  }
  if (crash_now_) {
    if (sim_.is_up(*crash_now_)) crash(*crash_now_);
    crash_now_.reset();
    crash_fired_ = true;
  }
  return violation_;
}

// --- end of run -----------------------------------------------------------------------------

std::optional<rendezvous::JobRecord> NodeCoreCluster::job_by_name(const std::string& name) {
  const auto l = leader();
  if (!l) return std::nullopt;
  for (const auto& [id, job] : table(*l)->jobs()) {
    if (job.spec.name == name) return job;
  }
  return std::nullopt;
}

std::optional<std::string> NodeCoreCluster::unsettled() {
  if (violation_) return violation_;
  for (const Request& r : requests_) {
    if (!r.job_id) {
      return "request " + r.spec.name + " is not acknowledged yet" +
             (r.last_error.empty() ? "" : " (last error: " + r.last_error + ")");
    }
  }
  const auto l = leader();
  if (!l) return "no leader";
  const node::RaftStatus leader_status = process(*l)->core().consensus().status();
  for (NodeId id = 0; id < options_.core.voters; ++id) {
    const NodeCoreProcess* p = process(id);
    if (p == nullptr) continue;
    const std::uint64_t applied = p->core().consensus().status().applied_index;
    if (applied != leader_status.commit_index) {
      return "d" + std::to_string(id) + " has applied " + std::to_string(applied) + " of " +
             std::to_string(leader_status.commit_index);
    }
  }
  // (node, job, round) -> live workers.
  std::map<std::tuple<std::string, std::string, std::uint64_t>, std::uint32_t> running;
  for (const auto& [key, w] : live_) ++running[{w.daemon, w.job, w.round}];
  // What a member up in the generation its rank map names knows of the job's round.
  const auto member_round = [&](const rendezvous::RankAssignment& r, const std::string& job,
                                std::uint64_t round) -> std::optional<node::MemberRound> {
    const NodeId node = static_cast<NodeId>(std::stoul(r.node.substr(1)));
    if (!sim_.is_up(node) || sim_.info(node).generation != r.generation) return std::nullopt;
    for (const node::MemberRound& m : process(node)->core().rounds().member_rounds()) {
      if (m.job == job && m.round == round) return m;
    }
    return std::nullopt;
  };
  known_stuck_.clear();
  // A job counts as stuck in a known bug only once it has shown the signature for
  // kKnownStuckFor without a break (a passing state, e.g. a failure inside its grace, does not).
  std::map<std::string, TimePoint> still;
  const auto stuck = [&](const std::string& id, std::string why) {
    const auto earlier = stuck_since_.find(id);
    const TimePoint since = earlier == stuck_since_.end() ? sim_.now() : earlier->second;
    still[id] = since;
    if (sim_.now() - since < kKnownStuckFor) return false;
    known_stuck_[id] = std::move(why);
    return true;
  };
  // Called on every return below: signatures not seen in this pass start over.
  const auto done = [&](std::optional<std::string> result) {
    stuck_since_ = std::move(still);
    return result;
  };
  std::vector<std::pair<std::string, std::string>> waiting;  // jobs not running yet: (id, why)
  std::optional<std::string> first;                          // the first problem found
  for (const auto& [id, job] : table(*l)->jobs()) {
    if (job.state == JobState::kSucceeded) {
      const bool ran = std::any_of(job.events.begin(), job.events.end(),
                                   [](const auto& e) { return e.to == JobState::kRunning; });
      if (!ran && !first) first = "job " + id + " succeeded without ever running";
      continue;
    }
    // Known liveness bug 1 (see tolerate_known_stuck_rounds): a member fenced itself out of the
    // job's round when its lease ran out, and nothing ever re-plans the round.
    if (options_.tolerate_known_stuck_rounds &&
        (job.state == JobState::kRendezvous || job.state == JobState::kRunning)) {
      const bool fenced = std::any_of(job.ranks.begin(), job.ranks.end(), [&](const auto& r) {
        const auto m = member_round(r, id, job.round);
        return m && m->fenced;
      });
      if (fenced && stuck(id, "a member fenced itself out of round " + std::to_string(job.round))) {
        continue;
      }
    }
    if (job.state != JobState::kRunning) {
      waiting.emplace_back(
          id, "job " + id + " is " + rendezvous::to_string(job.state) + " (" + job.reason + ")");
      continue;
    }
    std::optional<std::string> problem;
    bool waits_for_lease = false;
    for (const auto& r : job.ranks) {
      const NodeId node = static_cast<NodeId>(std::stoul(r.node.substr(1)));
      if (!sim_.is_up(node) || sim_.info(node).generation != r.generation) {
        problem = "job " + id + " runs round " + std::to_string(job.round) + " on " + r.node +
                  " (gen " + std::to_string(r.generation) + "), which is not up in that generation";
        break;
      }
      const auto live = running.find({r.node, id, job.round});
      const std::uint32_t n = live == running.end() ? 0 : live->second;
      if (n != r.slots) {
        problem = "job " + id + " is running round " + std::to_string(job.round) + " but " +
                  r.node + " runs " + std::to_string(n) + " of its " + std::to_string(r.slots) +
                  " workers";
        // Known liveness bug 2: its workers failed, but the member still runs the round under
        // a lease the leader keeps renewing, and the leader waits for that lease to run out.
        const auto m = member_round(r, id, job.round);
        waits_for_lease = waits_for_lease || (m && !m->fenced && n == 0);
        if (m && m->fenced) *problem += " (it fenced itself out of the round: lease ran out)";
        if (m && !m->fenced && n == 0) *problem += " (it still holds the round)";
      }
    }
    if (problem && options_.tolerate_known_stuck_rounds && waits_for_lease &&
        stuck(id, "its workers failed while its members still hold the round")) {
      continue;
    }
    if (problem && !first) first = problem;
  }
  // Every job was looked at (so each signature's clock runs); the first problem is the answer.
  if (first || waiting.empty()) return done(first);
  if (!options_.tolerate_known_stuck_rounds || known_stuck_.empty()) {
    return done(waiting.front().second);
  }
  // A stuck round keeps its slots. Once the stuck rounds are the only ones left, a job that
  // cannot get min_nodes nodes with its workers' slots besides theirs waits on them for good.
  const rendezvous::JobTable& t = *table(*l);
  std::map<std::string, std::uint32_t> held;  // node -> slots the stuck rounds hold
  for (const auto& [id, job] : t.jobs()) {
    if (job.state != JobState::kRendezvous && job.state != JobState::kRunning) continue;
    if (!known_stuck_.contains(id)) return done(waiting.front().second);  // a round moves
    for (const auto& r : job.ranks) held[r.node] += r.slots;
  }
  const std::uint32_t slots = options_.core.slots_per_node;
  for (const auto& [id, why] : waiting) {
    const rendezvous::JobRecord& job = *t.job(id);
    const std::uint32_t needs = job.spec.workers_per_node == 0 ? slots : job.spec.workers_per_node;
    std::uint32_t fit = 0;
    for (NodeId n = 0; n < options_.core.daemons; ++n) {
      const auto h = held.find(NodeCoreProcess::name_for(n));
      fit += sim_.is_up(n) && slots - (h == held.end() ? 0 : h->second) >= needs;
    }
    const bool blocked = fit < job.spec.min_nodes &&
                         stuck(id, "waits for slots that stuck rounds hold (" + why + ")");
    if (!blocked && !first) first = why;
  }
  return done(first);
}

std::string NodeCoreCluster::describe_jobs() {
  const auto l = leader();
  if (!l) return "no leader";
  std::string out;
  for (const auto& [id, job] : table(*l)->jobs()) {
    if (rendezvous::is_terminal(job.state)) continue;
    out += "\n  " + id + " " + rendezvous::to_string(job.state) + " round " +
           std::to_string(job.round) + " " + ranks_text(job.ranks) + " (" + job.reason + ")";
  }
  return out.empty() ? "every job ended"
                     : "unfinished jobs in d" + std::to_string(*l) + "'s table:" + out;
}

std::optional<std::string> NodeCoreCluster::final_problem() {
  if (violation_) return violation_;
  std::optional<std::string> reference;
  NodeId reference_node = 0;
  for (NodeId id = 0; id < options_.core.voters; ++id) {
    const rendezvous::JobTable* t = table(id);
    if (t == nullptr) continue;
    for (const Request& request : requests_) {
      if (!request.job_id) continue;
      const rendezvous::JobRecord* job = t->job(*request.job_id);
      if (job == nullptr || job->spec.name != request.acknowledged_name) {
        return "acknowledged job " + *request.job_id + " (" + request.acknowledged_name +
               ") is missing from d" + std::to_string(id) + "'s table";
      }
    }
    const std::string snapshot = t->snapshot();
    if (!reference) {
      reference = snapshot;
      reference_node = id;
    } else if (*reference != snapshot) {
      return "the job tables of d" + std::to_string(reference_node) + " and d" +
             std::to_string(id) + " differ after settling";
    }
  }
  if (!reference) return "no voter is up";
  return std::nullopt;
}

std::string NodeCoreCluster::summary() {
  std::uint64_t stale = counters_.stale_starts;
  for (NodeId id = 0; id < options_.core.daemons; ++id) {
    const NodeCoreProcess* p = process(id);
    if (p != nullptr && p->started()) stale += p->core().rounds().stale_starts();
  }
  const auto& c = counters_;
  const auto u = [](std::uint64_t v) { return static_cast<unsigned long long>(v); };
  char buffer[1024];
  std::snprintf(buffer, sizeof buffer,
                "requests %llu (attempts %llu, error replies %llu, acknowledged %llu), rounds "
                "opened %llu (OpenRound proposals %llu), RoundStarts %llu (%llu stale ignored), "
                "workers %llu started / %llu exited (%llu crashed, %llu peer-loss exits "
                "scheduled), faults: crashes %llu, "
                "restarts %llu, partitions %llu, voters lost %llu; live workers %llu, offers %llu, "
                "re-formed in place %llu, groups trained %llu, steps %llu (%llu rolled back); "
                "%llu events, trace %016llx",
                u(c.requests), u(c.attempts), u(c.error_replies), u(c.acknowledged),
                u(c.rounds_opened), u(c.open_proposals), u(c.round_starts), u(stale), u(c.spawns),
                u(c.exits), u(c.worker_crashes), u(c.peer_losses), u(c.crashes), u(c.restarts),
                u(c.partitions), u(c.voters_lost), u(c.live_spawns), u(c.offers), u(c.reforms),
                u(c.groups_trained), u(c.steps_applied), u(c.steps_rolled_back),
                u(sim_.events_processed()), u(sim_.trace_hash()));
  return buffer;
}

}  // namespace elastic::sim
