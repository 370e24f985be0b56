// NodeCoreProcess: one elasticd on the simulator. It owns the PRODUCTION per-daemon core,
// node::NodeCore (daemon/node/node_core.h: membership, Raft, the job table, the round service
// and the job supervisor), and plays the shell's part around it:
//  - time: a SimClock whose now() is the simulator's, wall_ms() derived from it and seed() a
//    stream of the node's NodeInfo seed, so a run repeats from the scenario seed;
//  - Raft's durable state: a consensus::RaftStore over the simulator's per-node storage (laid
//    out by tests/sim/raft_storage.h), which survives crash and restart like a state directory;
//  - workers: a SimLauncher (sim_launcher.h) behind the JobSupervisor;
//  - the network: a PeerSend becomes a simulator packet whose body is the wire::Envelope with
//    the sender's name, generation, address, cluster, sequence and leader hint (the newest
//    leader the core believed in after a pass, as elasticd's loop sets it) filled in as the
//    transport does; a packet's envelope is checked like the transport checks it (version, cluster)
//    and handed to NodeCore::step. The simulated network is trusted (transport.curve = true, as
//    with CURVE keys), a datagram network: no CoreInput::unreachable and no disconnects;
//  - a synthetic topology::Plan of `slots_per_node` CPU slots.
// Daemons are "d<k>" at "tcp://10.<k/65536>.<k/256%256>.<k%256>:7946"; d0 .. d<voters-1> are the
// Raft voters; each joins membership through the others (or the first `seeds` daemons).
// Its state_dir is <state_root>/d<k>; the machine the supervisor sees (users, the daemon's uid,
// worker log and checkpoint files) is a FakeHost (tests/unit/fake_host.h) of root's daemon with
// only root's account and an empty file tree, so no file is written. That tree is the
// process's: a restart starts a fresh one, as on a host whose log directory is on tmpfs
// (nothing the checkers read is in it).
// What it sees goes to a NodeCoreObserver: call replies, RoundStarts received (decoded, before
// the core sees them), Raft persists, the job table after each committed entry it applies (the
// process stands between ConsensusHost and the JobService as the state machine) and, through
// the launcher, worker spawns and exits.
// NodeCoreOptions::reads_skip_read_index breaks reads on purpose (see there): a scenario checks
// with it that the cluster's linearizable-read checker catches a stale read.
// Ownership: the Simulator owns the process; the process owns its NodeCore; the observer and
// the simulator outlive it. Thread safety: none (the simulator's thread).
// Errors: a core that cannot start (ConsensusHost refuses) aborts loudly (a scenario bug).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "daemon/config/config.h"
#include "daemon/consensus/raft.h"
#include "daemon/core/clock.h"
#include "daemon/node/node_core.h"
#include "daemon/node/round_codec.h"
#include "daemon/rendezvous/job_table.h"
#include "tests/sim/sim_launcher.h"
#include "tests/sim/simulator.h"
#include "tests/unit/fake_host.h"

namespace elastic::sim {

struct NodeCoreOptions {
  std::size_t daemons = 5;
  std::size_t voters = 3;
  std::size_t seeds = 0;  // membership seeds per daemon: 0 = all others, else the first `seeds`
  std::uint32_t slots_per_node = 1;
  // Shared settings; node.name, state_dir, consensus.voters and membership.seeds are per daemon.
  config::DaemonConfig config;
  SimLauncherOptions launcher;
  std::string state_root;  // a directory the daemons' state_dirs go under (the test's)
  // A stale-read bug, made on purpose: a "jobs" call at a Raft voter is answered at once from
  // that voter's own applied table (as JobService words it), with no forwarding and no read
  // index, so a deposed leader or a lagging follower answers with what it has.
  bool reads_skip_read_index = false;
  // Every daemon's leader half checks that the jobs it skips as settled had nothing to plan
  // (NodeCore::set_verify_leader_skips; the cluster's checker 10). Off in benchmarks that time
  // the leader.
  bool verify_leader_skips = true;
};

class NodeCoreObserver : public SimWorkerObserver {
 public:
  // The reply to a call() made at `node` in `generation`.
  virtual void on_reply(NodeId node, std::uint64_t generation, const node::CallReply& reply) = 0;
  // A RoundStart of `bytes` reached `node` (whether or not the fence lets it through, in either
  // form of round_codec.h); `taken`: after it, the node's member half is in that round (it was
  // a member, and could read the start: a delta needs the round it is against).
  virtual void on_round_start(NodeId node, std::uint64_t generation,
                              const node::RoundStartStamp& start, std::size_t bytes,
                              bool taken) = 0;
  // `node` made its Raft state durable (before the messages that depend on it leave).
  virtual void on_persist(NodeId node, const consensus::Persist& persist) = 0;
  // `node`'s job table right after it applied a committed entry or restored a snapshot.
  virtual void on_applied(NodeId node, const rendezvous::JobTable& table) = 0;
};

// The simulator's time as a Clock.
class SimClock final : public Clock {
 public:
  SimClock(const Simulator& sim, std::uint64_t seed) : sim_(&sim), seeds_(seed) {}
  TimePoint now() const override { return sim_->now(); }
  // A fixed Unix epoch offset plus the simulated time: dates look real, runs repeat.
  std::int64_t wall_ms() const override;
  std::uint64_t seed() override { return splitmix64(seeds_); }

 private:
  const Simulator* sim_;
  std::uint64_t seeds_;
};

class NodeCoreProcess : public SimProcess {
 public:
  NodeCoreProcess(const NodeInfo& info, const NodeCoreOptions& options, NodeCoreObserver* observer,
                  Simulator& sim);
  ~NodeCoreProcess() override;

  void start(SimContext& ctx) override;
  void on_packet(SimContext& ctx, const Packet& packet) override;
  void on_timer(SimContext& ctx) override;
  TimePoint next_deadline() const override;

  // A client call at this daemon outside any simulator event (the control socket's part); the
  // reply reaches the observer. Call Simulator::reschedule(id) after it.
  std::uint64_t call(SimContext& ctx, node::ClientRequest request, const std::string& session,
                     Duration timeout);
  // SimLauncher::fail on this daemon's launcher; false when the worker is not running. Call
  // Simulator::reschedule(id) after it.
  bool fail_worker(spawner::WorkerId id, TimePoint at, int status);
  // SimLauncher::lose_peer on this daemon's launcher, likewise.
  bool lose_peer(spawner::WorkerId id, std::uint64_t round, TimePoint at);

  // False only while start() builds the core.
  bool started() const { return core_ != nullptr; }
  const node::NodeCore& core() const { return *core_; }
  // Real (wall) seconds this process spent in NodeCore::step, since it started: the daemon's
  // CPU for the messages and timers it handled (the simulator's own work not counted).
  double step_seconds() const { return step_seconds_; }

  static std::string name_for(NodeId id) { return "d" + std::to_string(id); }
  static std::string address_for(NodeId id);
  // The DaemonConfig daemon `id` runs with.
  static config::DaemonConfig daemon_config(const NodeCoreOptions& options, NodeId id);

 private:
  void carry_out(SimContext& ctx, node::CoreOutput output);
  node::CoreOutput timed_step(TimePoint now, node::CoreInput input);
  // The reads_skip_read_index answer to a "jobs" call.
  std::uint64_t answer_locally();

  NodeInfo info_;
  const NodeCoreOptions* options_;
  NodeCoreObserver* observer_;
  Simulator* sim_;
  SimClock clock_;
  config::DaemonConfig config_;
  SimLauncher* launcher_ = nullptr;  // owned by the core's supervisor
  testing::FakeHost host_;           // before core_, which uses it until it is destroyed
  // The state machine ConsensusHost applies to: the core's JobService, observed. Declared before
  // the core, which holds the ConsensusHost that refers to it.
  std::unique_ptr<node::StateMachine> machine_;
  std::unique_ptr<node::NodeCore> core_;
  std::uint64_t seq_ = 0;
  double step_seconds_ = 0;
  std::uint64_t local_answers_ = 0;  // reads_skip_read_index calls (ids beside the core's)
  std::pair<std::string, std::uint64_t> stamped_hint_;  // (leader, term) stamped on envelopes
};

}  // namespace elastic::sim
