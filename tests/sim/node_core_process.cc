#include "tests/sim/node_core_process.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "daemon/node/consensus_host.h"
#include "daemon/node/job_service.h"
#include "daemon/topology/topology.h"
#include "tests/sim/raft_storage.h"

namespace elastic::sim {
namespace {

// 2027-01-15T08:00:00Z, the simulated wall clock's origin.
constexpr std::int64_t kWallOrigin = 1'800'000'000'000;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "node core process: %s\n", what.c_str());
  std::abort();
}

// Raft's durable state in the node's simulator storage. The storage is looked up per persist:
// the simulator's node table may move while nodes are added.
class SimRaftStore final : public consensus::RaftStore {
 public:
  SimRaftStore(Simulator& sim, NodeId id, NodeCoreObserver* observer)
      : sim_(&sim), id_(id), observer_(observer) {}
  Status persist(const consensus::Persist& persist) override {
    SimContext ctx(*sim_, id_);
    persist_raft_state(ctx.storage(), persist);
    if (observer_ != nullptr) observer_->on_persist(id_, persist);
    return ok_status();
  }

 private:
  Simulator* sim_;
  NodeId id_;
  NodeCoreObserver* observer_;
};

// The JobService as ConsensusHost's state machine, with the observer told of the table after
// every entry applied and every snapshot restored (the table moves by nothing else).
class ObservedJobs final : public node::StateMachine {
 public:
  ObservedJobs(node::JobService& jobs, NodeId id, NodeCoreObserver* observer)
      : jobs_(&jobs), id_(id), observer_(observer) {}
  std::string apply(consensus::Index index, std::string_view command) override {
    std::string result = jobs_->apply(index, command);
    if (observer_ != nullptr) observer_->on_applied(id_, jobs_->table());
    return result;
  }
  std::string snapshot() const override { return jobs_->snapshot(); }
  Status restore(consensus::Index index, std::string_view bytes) override {
    Status restored = jobs_->restore(index, bytes);
    if (restored.ok() && observer_ != nullptr) observer_->on_applied(id_, jobs_->table());
    return restored;
  }

 private:
  node::JobService* jobs_;
  NodeId id_;
  NodeCoreObserver* observer_;
};

// `slots` CPU slots, one core each, unbound (no process runs on them).
topology::Plan synthetic_plan(std::uint32_t slots) {
  topology::Plan plan;
  plan.bind_cpus = false;
  plan.bind_memory = false;
  for (std::uint32_t i = 0; i < slots; ++i) {
    topology::Slot slot;
    slot.index = i;
    slot.cpus = {i};
    slot.mem_nodes = {0};
    slot.omp_threads = 1;
    slot.locality = "simulated";
    plan.slots.push_back(std::move(slot));
  }
  return plan;
}

// When logs are on (a test run with ELASTIC_SIM_LOG), their lines name the simulated daemon and
// time: every daemon of the simulation shares spdlog's default logger.
void log_as(const SimContext& ctx, const std::string& name) {
  if (!spdlog::should_log(spdlog::level::info)) return;
  const auto us =
      std::chrono::duration_cast<std::chrono::microseconds>(ctx.now().time_since_epoch()).count();
  char when[32];
  std::snprintf(when, sizeof when, "%lld.%06lld", static_cast<long long>(us / 1000000),
                static_cast<long long>(us % 1000000));
  spdlog::set_pattern(std::string("[") + when + "] [" + name + "/g" +
                      std::to_string(ctx.generation()) + "] [%l] %v");
}

}  // namespace

std::int64_t SimClock::wall_ms() const {
  return kWallOrigin +
         std::chrono::duration_cast<std::chrono::milliseconds>(sim_->now().time_since_epoch())
             .count();
}

std::string NodeCoreProcess::address_for(NodeId id) {
  return "tcp://10." + std::to_string(id >> 16) + "." + std::to_string((id >> 8) & 0xff) + "." +
         std::to_string(id & 0xff) + ":7946";
}

config::DaemonConfig NodeCoreProcess::daemon_config(const NodeCoreOptions& options, NodeId id) {
  config::DaemonConfig config = options.config;
  config.node.name = name_for(id);
  config.node.state_dir = options.state_root + "/" + config.node.name;
  config.node.cpu_slots = static_cast<int>(options.slots_per_node);
  // The simulated network is trusted: its envelopes are what the daemons sent (as CURVE proves).
  config.transport.curve = true;
  config.transport.advertise = address_for(id);
  config.consensus.voters.clear();
  for (NodeId v = 0; v < options.voters; ++v) config.consensus.voters.push_back(name_for(v));
  config.membership.seeds.clear();
  const std::size_t seeds = options.seeds == 0 ? options.daemons : options.seeds;
  for (NodeId s = 0; s < seeds && s < options.daemons; ++s) {
    if (s != id) config.membership.seeds.push_back(name_for(s) + "@" + address_for(s));
  }
  return config;
}

NodeCoreProcess::NodeCoreProcess(const NodeInfo& info, const NodeCoreOptions& options,
                                 NodeCoreObserver* observer, Simulator& sim)
    : info_(info),
      options_(&options),
      observer_(observer),
      sim_(&sim),
      clock_(sim, info.seed),
      config_(daemon_config(options, info.id)) {
  // Root's daemon, whose users include root (jobs are submitted as this process's uid).
  host_.accounts[0] =
      control::Account{.name = "root", .gid = 0, .home = "/root", .shell = "/bin/sh"};
}

NodeCoreProcess::~NodeCoreProcess() = default;

void NodeCoreProcess::start(SimContext& ctx) {
  const std::string self = name_for(info_.id);
  log_as(ctx, self);
  auto jobs = std::make_unique<node::JobService>(clock_, host_);
  machine_ = std::make_unique<ObservedJobs>(*jobs, info_.id, observer_);
  node::OpenFailure failure;
  consensus::RaftConfig raft;
  raft.election_timeout = config_.consensus.election_timeout;
  raft.heartbeat_interval = config_.consensus.heartbeat_interval;
  auto consensus = node::ConsensusHost::start(
      self, config_.consensus.voters, raft,
      static_cast<std::uint64_t>(std::max(1, config_.consensus.snapshot_every_entries)),
      recover_raft_state(ctx.storage()), std::make_unique<SimRaftStore>(*sim_, info_.id, observer_),
      *machine_, clock_.seed() ^ info_.generation, ctx.now(), failure);
  if (!consensus) die(self + ": " + failure.message);
  auto launcher = std::make_unique<SimLauncher>(
      info_.id, info_.generation, options_->launcher, observer_, *sim_,
      // Its own stream: the core's draws stay as they were.
      info_.seed ^ 0x6c61756e63686572ULL);
  launcher_ = launcher.get();
  // No port probe: a simulated host has no TCP ports, and this one's belong to the test run.
  node::CoreParts parts{.jobs = std::move(jobs),
                        .consensus = std::move(consensus),
                        .launcher = std::move(launcher),
                        .plan = synthetic_plan(options_->slots_per_node),
                        .port_in_use = nullptr,
                        .host = &host_};
  core_ = std::make_unique<node::NodeCore>(
      node::Identity{.name = self, .generation = info_.generation, .address = ctx.address()},
      config_, std::move(parts), clock_, clock_.seed());
  core_->set_verify_leader_skips(options_->verify_leader_skips);
  // membership.seeds as elasticd reads them: "name@endpoint".
  std::vector<node::SeedPeer> seeds;
  for (const std::string& seed : config_.membership.seeds) {
    const auto at = seed.find('@');
    seeds.push_back(node::SeedPeer{.endpoint = seed.substr(at + 1), .name = seed.substr(0, at)});
  }
  carry_out(ctx, core_->join(ctx.now(), seeds));
}

void NodeCoreProcess::on_packet(SimContext& ctx, const Packet& packet) {
  const auto* envelope = std::any_cast<wire::Envelope>(packet.body.get());
  // What the transport would refuse never reaches the core.
  if (envelope == nullptr || envelope->version != wire::kProtocolVersion ||
      envelope->cluster_id != config_.node.cluster_id) {
    return;
  }
  log_as(ctx, name_for(info_.id));
  std::optional<node::RoundStartStamp> start;
  if (envelope->type == wire::MsgType::kRoundStart && observer_ != nullptr) {
    if (auto stamp = node::peek_round_start(envelope->body); stamp.ok()) start = std::move(*stamp);
  }
  const std::size_t bytes = envelope->body.size();
  node::CoreInput input;
  input.envelopes.push_back(*envelope);
  carry_out(ctx, timed_step(ctx.now(), std::move(input)));
  if (start && core_) {
    bool taken = false;
    for (const node::MemberRound& m : core_->rounds().member_rounds()) {
      taken = taken || (m.job == start->job && m.round == start->round);
    }
    observer_->on_round_start(info_.id, info_.generation, *start, bytes, taken);
  }
}

void NodeCoreProcess::on_timer(SimContext& ctx) {
  log_as(ctx, name_for(info_.id));
  carry_out(ctx, timed_step(ctx.now(), node::CoreInput{}));
}

node::CoreOutput NodeCoreProcess::timed_step(TimePoint now, node::CoreInput input) {
  const auto start = std::chrono::steady_clock::now();
  node::CoreOutput output = core_->step(now, std::move(input));
  step_seconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return output;
}

TimePoint NodeCoreProcess::next_deadline() const { return core_ ? core_->next_deadline() : kNever; }

std::uint64_t NodeCoreProcess::call(SimContext& ctx, node::ClientRequest request,
                                    const std::string& session, Duration timeout) {
  log_as(ctx, name_for(info_.id));
  if (options_->reads_skip_read_index && request.verb == "jobs" && info_.id < options_->voters) {
    return answer_locally();
  }
  const std::uint64_t id = core_->call(ctx.now(), std::move(request), session, "", timeout);
  carry_out(ctx, core_->take_output());
  return id;
}

std::uint64_t NodeCoreProcess::answer_locally() {
  // Far above the core's own call ids (counted from 1), so the two never meet.
  const std::uint64_t id = (std::uint64_t{1} << 63) | ++local_answers_;
  nlohmann::json jobs = nlohmann::json::array();
  for (const auto& [job_id, job] : core_->jobs().table().jobs()) {
    jobs.push_back(nlohmann::json::parse(rendezvous::to_json(job, 0)));
  }
  if (observer_ != nullptr) {
    observer_->on_reply(
        info_.id, info_.generation,
        node::CallReply{.call = id,
                        .outcome = node::ForwardOutcome::kOk,
                        .body = nlohmann::json{{"ok", true}, {"jobs", std::move(jobs)}}.dump()});
  }
  return id;
}

bool NodeCoreProcess::fail_worker(spawner::WorkerId id, TimePoint at, int status) {
  return launcher_->fail(id, at, status);
}

bool NodeCoreProcess::lose_peer(spawner::WorkerId id, std::uint64_t round, TimePoint at) {
  return launcher_->lose_peer(id, round, at);
}

void NodeCoreProcess::carry_out(SimContext& ctx, node::CoreOutput output) {
  // Output made outside step() (a reply the core had ready...) goes out with this pass's.
  node::CoreOutput extra = core_->take_output();
  for (auto* out : {&output, &extra}) {
    for (node::PeerSend& send : out->sends) {
      if (send.address.empty()) continue;  // nowhere to dial (an unknown member)
      wire::Envelope& envelope = send.envelope;
      envelope.cluster_id = config_.node.cluster_id;
      envelope.sender = name_for(info_.id);
      envelope.generation = info_.generation;
      envelope.sender_address = ctx.address();
      envelope.seq = ++seq_;
      envelope.leader_hint = stamped_hint_.first;
      envelope.leader_term = stamped_hint_.second;
      const std::size_t bytes = envelope.body.size() + 64;
      ctx.send(send.address, std::any(std::move(envelope)), bytes);
    }
    if (observer_ != nullptr) {
      for (const node::CallReply& reply : out->replies) {
        observer_->on_reply(info_.id, info_.generation, reply);
      }
    }
  }
  // As elasticd's loop does after each pass: the newest leader this daemon believes in is
  // stamped on what it sends from now on (a gossip hint for non-voters).
  std::pair<std::string, std::uint64_t> hint{core_->leader(), core_->leader_term()};
  if (!hint.first.empty()) stamped_hint_ = std::move(hint);
}

}  // namespace elastic::sim
