// JobWatch on the simulator: the real elastic::rendezvous::JobWatch state machine as a
// SimProcess, and JobWatchCluster, a scenario harness for one running round of N daemons that
// knows the ground truth (which daemon is up, at which generation) and checks declarations.
//
// Packets carry the wire structs (rendezvous::JobMessage) inside a JobWatchPacket; their size is
// the real codec's body (encode_job) plus an envelope estimate. Transport events (a ZeroMQ
// disconnect seen after a kill -9 closes the peer's sockets) reach a process as a
// TransportNotice packet it sends itself (over a lossless self-link), so the simulator
// reschedules its timers as after any packet.
//
// Scenario controls: crash (silent, as a power cut; or with disconnect notices to every
// survivor, as kill -9 on a live host), pause (SIGSTOP: the daemon runs no timer and reads no
// packet for a while; what arrives meanwhile waits in its socket and is read on resume, before
// its overdue timers run), and a ghost that keeps sending stale-round messages under a round
// member's name.
//
// Ground truth for the checks: a declaration about a (name, generation) that is up when it is
// made is false; the daemon names are "d<id>" and the round is (job "job-1", term 1, round 1).
//
// Ownership: the cluster owns its Simulator and, through it, every process. Thread safety: none
// (one thread). Errors: misuse (unknown node) aborts through the Simulator.
#pragma once

#include <any>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/rendezvous/job_watch.h"
#include "tests/sim/simulator.h"

namespace elastic::sim {

struct JobWatchPacket {
  std::string from;  // sender name; generation and address travel in the Packet
  rendezvous::JobMessage message;
};

// What the local transport tells the daemon about a peer (a self-addressed packet).
struct TransportNotice {
  std::string peer;
  rendezvous::PeerEventKind kind = rendezvous::PeerEventKind::kDisconnected;
};

// Stop the receiving daemon for `duration` from its arrival (a self-addressed packet).
struct PauseNotice {
  Duration duration{};
};

// Approximate bytes on the wire of one envelope carrying `message` from `sender`.
std::size_t job_wire_bytes(const std::string& sender, const rendezvous::JobMessage& message);

struct Declaration {
  TimePoint time;
  NodeId observer = 0;
  rendezvous::PeerLost lost;
};

class JobWatchProcess : public SimProcess {
 public:
  using Sink = std::function<void(const Declaration&)>;
  JobWatchProcess(const NodeInfo& info, std::string name, const rendezvous::JobWatchConfig& config,
                  std::vector<rendezvous::JobPeer> peers, Sink sink);

  void start(SimContext& ctx) override;
  void on_packet(SimContext& ctx, const Packet& packet) override;
  void on_timer(SimContext& ctx) override;
  TimePoint next_deadline() const override;

  rendezvous::JobWatch& watch() { return *watch_; }
  bool paused() const { return paused_until_ != TimePoint{}; }

 private:
  void handle(SimContext& ctx, const Packet& packet);
  void apply(SimContext& ctx);

  NodeInfo info_;
  std::string name_;
  rendezvous::JobWatchConfig config_;
  std::vector<rendezvous::JobPeer> peers_;
  Sink sink_;
  std::optional<rendezvous::JobWatch> watch_;
  rendezvous::JobWatchEffects effects_;  // reused buffer
  TimePoint paused_until_{};             // TimePoint{} = running
  std::vector<Packet> backlog_;          // what arrived while paused, in arrival order
};

struct JobWatchClusterOptions {
  std::size_t nodes = 8;
  rendezvous::JobWatchConfig config{};
  LinkModel link{};
};

class JobWatchCluster {
 public:
  static constexpr const char* kJob = "job-1";
  static constexpr std::uint64_t kTerm = 1;
  static constexpr std::uint64_t kRound = 1;

  // Creates and starts every daemon of the round at once (all in the round from the start).
  JobWatchCluster(std::uint64_t seed, JobWatchClusterOptions options);

  Simulator& sim() { return sim_; }
  const JobWatchClusterOptions& options() const { return options_; }
  static std::string name(NodeId id) { return "d" + std::to_string(id); }
  static std::string address(NodeId id) { return "sim://d" + std::to_string(id); }
  rendezvous::JobWatch* watch(NodeId id);  // nullptr while down

  // Silent crash; with `disconnect_after`, the transport of every survivor that had a
  // connection to it (all of a small round; a large round's ring neighbours) reports the peer
  // disconnected that long after the crash (kill -9: the kernel closes its connections).
  void crash(NodeId id, std::optional<Duration> disconnect_after = std::nullopt);
  // SIGSTOP now, SIGCONT after `d` (the caller runs the simulator).
  void pause(NodeId id, Duration d);
  // Adds a node (not a round member) that every `every` sends stale messages under `victim`'s
  // name and generation to every member: other rounds, terms and jobs.
  NodeId add_stale_ghost(NodeId victim, Duration every);

  // Every up member other than `target` has declared `target` lost.
  bool all_survivors_declared(NodeId target) const;
  std::size_t up_members() const;

  const std::vector<Declaration>& declarations() const { return declarations_; }
  std::uint64_t false_declarations() const { return false_declarations_; }
  // "observer declared peer (reason)" for each false declaration, for failure messages.
  const std::vector<std::string>& false_log() const { return false_log_; }
  // Declarations of `target` by up observers, per observer (more than one would be a bug).
  std::size_t declarations_of(NodeId target, NodeId observer) const;

 private:
  void on_declaration(const Declaration& d);
  // Sends `notice` from member `id` to itself, arriving after `delay`, never lost.
  void notify_self(NodeId id, std::any notice, Duration delay);

  JobWatchClusterOptions options_;
  Simulator sim_;
  std::vector<rendezvous::JobPeer> peers_;
  std::size_t members_ = 0;
  std::vector<Declaration> declarations_;
  std::map<std::string, std::set<NodeId>> observers_;  // declared peer -> who declared it
  std::uint64_t false_declarations_ = 0;
  std::vector<std::string> false_log_;
};

}  // namespace elastic::sim
