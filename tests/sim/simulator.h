// Simulator: a deterministic discrete-event simulator for the daemon's pure protocols.
//
// Thousands of simulated nodes live in one process and one thread. Virtual time jumps from one
// event to the next (a packet arriving, a node's timer falling due), so half an hour of a
// 1,000-node cluster costs only the CPU its protocol logic needs. Every random choice (latency,
// loss, duplication, reordering, stalls, the nodes' own seeds) derives from the one seed given
// to the constructor, and events are ordered by (time, insertion sequence), so a run reproduces
// exactly from its seed; trace_hash() fingerprints a run to prove it.
//
// Nodes are protocol-agnostic SimProcess objects (membership today, Raft and rendezvous later).
// The network routes opaque packets by address and applies a LinkModel per link; partitions,
// one-way blocks, crashes (inbound traffic and timers vanish), restarts with persisted state
// (generation + 1, optionally a new address) and a "slow CPU" per node are scenario controls.
//
// Safety checkers: add_invariant() registers a callback run after every event; the first
// violation stops the run and is kept in violation().
//
// Ownership: the Simulator owns its processes. Thread safety: none; one thread drives it.
// Errors: scenario misuse (unknown node id, address already bound) aborts loudly.
#pragma once

#include <any>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/core/rng.h"
#include "daemon/core/time.h"

namespace elastic::sim {

using NodeId = std::uint32_t;

// Per-link delivery behaviour. Latency = base_latency + uniform[0, jitter); with probability
// reorder_probability a packet gets an extra uniform[0, reorder_delay) so it overtakes or falls
// behind others; loss and duplication are independent per packet (a duplicate draws its own
// latency).
struct LinkModel {
  Duration base_latency = std::chrono::microseconds(200);
  Duration jitter = std::chrono::microseconds(300);
  double loss = 0.0;
  double duplicate = 0.0;
  double reorder_probability = 0.0;
  Duration reorder_delay = std::chrono::milliseconds(20);
};

// A packet in flight. `body` is shared so duplicates cost nothing; `bytes` is the size the
// sender declared (for bandwidth accounting only).
struct Packet {
  NodeId from = 0;
  std::uint64_t from_generation = 0;
  std::string from_address;
  std::string to_address;
  std::shared_ptr<const std::any> body;
  std::size_t bytes = 0;
};

class Simulator;

// What a process sees of the world while one of its callbacks runs.
class SimContext {
 public:
  SimContext(Simulator& sim, NodeId id) : sim_(sim), id_(id) {}
  TimePoint now() const;
  NodeId id() const { return id_; }
  std::uint64_t generation() const;
  const std::string& address() const;
  // Survives crash and restart (a daemon's state directory); starts empty.
  std::map<std::string, std::string>& storage();
  // Queues a packet to whatever node holds `to_address` when it arrives; a packet to an
  // address nobody holds is dropped silently, as a datagram would be.
  void send(const std::string& to_address, std::any body, std::size_t bytes);

 private:
  Simulator& sim_;
  NodeId id_;
};

class SimProcess {
 public:
  virtual ~SimProcess() = default;
  // Called once when the node starts (and again, on a fresh process, after each restart).
  virtual void start(SimContext& ctx) = 0;
  virtual void on_packet(SimContext& ctx, const Packet& packet) = 0;
  // Runs whatever is due at ctx.now(); called at (or, on a slow node, after) next_deadline().
  virtual void on_timer(SimContext& ctx) = 0;
  // The next time on_timer() has work; kNever for none. Re-read after every callback.
  virtual TimePoint next_deadline() const = 0;
};

struct NodeInfo {
  NodeId id = 0;
  std::uint64_t generation = 0;  // 1 at first start, +1 per restart (persisted)
  std::string address;
  std::uint64_t seed = 0;  // for the process's own Rng; differs per (node, generation)
};

using ProcessFactory = std::function<std::unique_ptr<SimProcess>(const NodeInfo&)>;

struct NodeCounters {
  std::uint64_t packets_sent = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t packets_received = 0;
  std::uint64_t bytes_received = 0;
};

struct NetworkCounters {
  std::uint64_t sent = 0;
  std::uint64_t delivered = 0;
  std::uint64_t lost = 0;  // link loss
  std::uint64_t duplicated = 0;
  std::uint64_t partitioned = 0;  // dropped by a partition or block
  std::uint64_t unroutable = 0;   // no node holds the address (or it is down)
};

// Returns an error sentence when the invariant is broken, nullopt when it holds.
using Invariant = std::function<std::optional<std::string>()>;

class Simulator {
 public:
  Simulator(std::uint64_t seed, TimePoint start = TimePoint{} + std::chrono::hours(1));
  ~Simulator();
  Simulator(const Simulator&) = delete;
  Simulator& operator=(const Simulator&) = delete;

  TimePoint now() const { return now_; }
  std::uint64_t seed() const { return seed_; }

  // Creates a node bound to `address` and starts it now.
  NodeId add_node(const std::string& address, ProcessFactory factory);
  std::size_t node_count() const { return nodes_.size(); }
  bool is_up(NodeId id) const { return node(id).process != nullptr; }
  const NodeInfo& info(NodeId id) const { return node(id).info; }
  // The running process (nullptr while crashed); callers downcast to their protocol's type.
  SimProcess* process(NodeId id) { return node(id).process.get(); }
  const NodeCounters& counters(NodeId id) const { return node(id).counters; }
  const NetworkCounters& network_counters() const { return network_; }

  // The process stops now: its timers and every packet still travelling to it are lost.
  void crash(NodeId id);
  // Starts a fresh process with generation + 1 and the persisted storage, at `new_address` if
  // given (the old address is released). The node must be crashed.
  void restart(NodeId id, std::optional<std::string> new_address = std::nullopt);
  // Re-reads a process's next_deadline() after the scenario called into it outside any event
  // (a client request, a worker crash), so its timer fires when that needs it.
  void reschedule(NodeId id) { schedule_timer(id); }

  // Links: the default applies to every pair without an override (overrides are one-way).
  void set_default_link(const LinkModel& link) { default_link_ = link; }
  void set_link(NodeId from, NodeId to, const LinkModel& link);
  // Partition: nodes talk only within their group. Unlisted nodes form group 0.
  void partition(const std::vector<std::vector<NodeId>>& groups);
  void heal();                         // one group again, and every one-way block lifted
  void block(NodeId from, NodeId to);  // one-way: packets from -> to are dropped

  // Slow CPU (a starved process): every packet waits an extra
  // (slowdown - 1) * stall * uniform[0.5, 1.5) before the node handles it, one at a time (its
  // socket backlog); timers fire late by (slowdown - 1) * stall * uniform[0, 0.5), not queued
  // behind that backlog. So a starved prober's probe timeouts often run before it reads the acks
  // already waiting for it, which is the false-suspicion source Lifeguard addresses.
  // slowdown 1 = normal.
  void set_slow(NodeId id, double slowdown, Duration stall = std::chrono::milliseconds(100));

  // Safety checkers run after every event; the first violation stops every run_* call.
  void add_invariant(Invariant invariant) { invariants_.push_back(std::move(invariant)); }
  const std::optional<std::string>& violation() const { return violation_; }

  // Processes every event up to and including `until`, then sets now() to `until`.
  // Returns false if an invariant was violated.
  bool run_until(TimePoint until);
  bool run_for(Duration d) { return run_until(now_ + d); }
  // Runs until `condition` holds (checked every `poll` of virtual time) or `deadline`; true if
  // it held. Stops early on a violation (returns false).
  bool run_until_condition(const std::function<bool()>& condition, TimePoint deadline,
                           Duration poll = std::chrono::milliseconds(100));

  // Fingerprint of everything that happened (deliveries, timers, mixed-in protocol facts).
  std::uint64_t trace_hash() const { return trace_hash_; }
  void mix_trace(std::uint64_t value);
  std::uint64_t events_processed() const { return events_processed_; }

  // The simulator's own randomness, for scenario choices (which node to crash...).
  Rng& rng() { return rng_; }

 private:
  friend class SimContext;
  enum class EventKind : std::uint8_t { kPacket, kTimer };
  struct Event {
    TimePoint time;
    std::uint64_t sequence;
    EventKind kind;
    bool stalled;         // already delayed once by a slow CPU
    NodeId node;          // timer: the node; packet: unused
    std::uint64_t token;  // timer: the node's timer token; packet: slab index
    bool operator>(const Event& o) const {
      return time != o.time ? time > o.time : sequence > o.sequence;
    }
  };
  struct Node {
    NodeInfo info;
    ProcessFactory factory;
    std::unique_ptr<SimProcess> process;
    std::map<std::string, std::string> storage;
    NodeCounters counters;
    std::uint64_t timer_token = 0;  // bumped when the scheduled timer is superseded
    TimePoint timer_at = kNever;
    std::uint64_t incarnation = 0;  // bumped on crash, so packets in flight to it are dropped
    std::uint32_t group = 0;
    double slowdown = 1.0;
    Duration stall{};
    TimePoint busy_until{};  // slow node: handles one event at a time
  };
  struct InFlight {
    Packet packet;
    NodeId to = 0;
    std::uint64_t to_incarnation = 0;
  };

  Node& node(NodeId id);
  const Node& node(NodeId id) const;
  void push(TimePoint t, EventKind kind, NodeId node, std::uint64_t token, bool stalled = false);
  void send_from(NodeId from, const std::string& to_address, std::any body, std::size_t bytes);
  void schedule_timer(NodeId id);
  void start_process(NodeId id);
  bool step();  // one event; false when the queue is empty
  bool maybe_stall(const Event& e, Node& n);
  bool blocked(NodeId from, NodeId to) const;
  const LinkModel& link(NodeId from, NodeId to) const;
  Duration sample_latency(const LinkModel& link);
  bool check_invariants();

  std::uint64_t seed_;
  Rng rng_;
  TimePoint now_;
  std::uint64_t sequence_ = 0;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> queue_;
  std::vector<Node> nodes_;
  std::unordered_map<std::string, NodeId> address_owner_;
  std::vector<InFlight> slab_;
  std::vector<std::uint64_t> slab_free_;
  LinkModel default_link_;
  std::map<std::pair<NodeId, NodeId>, LinkModel> links_;
  std::map<std::pair<NodeId, NodeId>, bool> blocks_;
  bool partitioned_ = false;
  NetworkCounters network_;
  std::vector<Invariant> invariants_;
  std::optional<std::string> violation_;
  std::uint64_t trace_hash_ = 0xcbf29ce484222325ULL;
  std::uint64_t events_processed_ = 0;
};

}  // namespace elastic::sim
