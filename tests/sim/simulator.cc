#include "tests/sim/simulator.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

namespace elastic::sim {
namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "simulator: %s\n", what);
  std::abort();
}

std::uint64_t mix64(std::uint64_t h, std::uint64_t v) {
  // FNV-style fold of a splitmix-scrambled value: cheap and order-sensitive.
  v += 0x9e3779b97f4a7c15ULL;
  v = (v ^ (v >> 30)) * 0xbf58476d1ce4e5b9ULL;
  v = (v ^ (v >> 27)) * 0x94d049bb133111ebULL;
  v ^= v >> 31;
  return (h ^ v) * 0x100000001b3ULL;
}

Duration uniform(Rng& rng, Duration max) {
  if (max.count() <= 0) return Duration{0};
  return Duration{static_cast<Duration::rep>(rng.below(static_cast<std::uint64_t>(max.count())))};
}

}  // namespace

TimePoint SimContext::now() const { return sim_.now_; }
std::uint64_t SimContext::generation() const { return sim_.node(id_).info.generation; }
const std::string& SimContext::address() const { return sim_.node(id_).info.address; }
std::map<std::string, std::string>& SimContext::storage() { return sim_.node(id_).storage; }
void SimContext::send(const std::string& to_address, std::any body, std::size_t bytes) {
  sim_.send_from(id_, to_address, std::move(body), bytes);
}

Simulator::Simulator(std::uint64_t seed, TimePoint start) : seed_(seed), rng_(seed), now_(start) {}
Simulator::~Simulator() = default;

Simulator::Node& Simulator::node(NodeId id) {
  if (id >= nodes_.size()) fail("unknown node id");
  return nodes_[id];
}
const Simulator::Node& Simulator::node(NodeId id) const {
  if (id >= nodes_.size()) fail("unknown node id");
  return nodes_[id];
}

void Simulator::mix_trace(std::uint64_t value) { trace_hash_ = mix64(trace_hash_, value); }

NodeId Simulator::add_node(const std::string& address, ProcessFactory factory) {
  if (address_owner_.count(address) != 0) fail("address already bound by another node");
  const auto id = static_cast<NodeId>(nodes_.size());
  nodes_.emplace_back();
  Node& n = nodes_.back();
  n.info.id = id;
  n.info.address = address;
  n.factory = std::move(factory);
  address_owner_[address] = id;
  start_process(id);
  return id;
}

void Simulator::start_process(NodeId id) {
  Node& n = node(id);
  n.info.generation += 1;
  n.info.seed = mix64(mix64(seed_, id), n.info.generation);
  n.busy_until = now_;
  n.process = n.factory(n.info);
  if (!n.process) fail("process factory returned no process");
  SimContext ctx(*this, id);
  n.process->start(ctx);
  schedule_timer(id);
}

void Simulator::crash(NodeId id) {
  Node& n = node(id);
  if (!n.process) fail("crash of a node that is already down");
  n.process.reset();
  n.incarnation += 1;
  n.timer_token += 1;
  n.timer_at = kNever;
  mix_trace(0xc0ffee00ULL + id);
}

void Simulator::restart(NodeId id, std::optional<std::string> new_address) {
  Node& n = node(id);
  if (n.process) fail("restart of a node that is still running");
  if (new_address && *new_address != n.info.address) {
    if (address_owner_.count(*new_address) != 0) fail("new address already bound");
    address_owner_.erase(n.info.address);
    n.info.address = *new_address;
    address_owner_[n.info.address] = id;
  }
  start_process(id);
}

void Simulator::set_link(NodeId from, NodeId to, const LinkModel& link) {
  links_[{from, to}] = link;
}

void Simulator::partition(const std::vector<std::vector<NodeId>>& groups) {
  for (auto& n : nodes_) n.group = 0;
  std::uint32_t g = 1;
  for (const auto& group : groups) {
    for (NodeId id : group) node(id).group = g;
    ++g;
  }
  partitioned_ = true;
}

void Simulator::heal() {
  for (auto& n : nodes_) n.group = 0;
  partitioned_ = false;
  blocks_.clear();
}

void Simulator::block(NodeId from, NodeId to) { blocks_[{from, to}] = true; }

void Simulator::set_slow(NodeId id, double slowdown, Duration stall) {
  Node& n = node(id);
  n.slowdown = slowdown < 1.0 ? 1.0 : slowdown;
  n.stall = stall;
}

bool Simulator::blocked(NodeId from, NodeId to) const {
  if (partitioned_ && nodes_[from].group != nodes_[to].group) return true;
  return !blocks_.empty() && blocks_.count({from, to}) != 0;
}

const LinkModel& Simulator::link(NodeId from, NodeId to) const {
  if (links_.empty()) return default_link_;
  auto it = links_.find({from, to});
  return it == links_.end() ? default_link_ : it->second;
}

Duration Simulator::sample_latency(const LinkModel& l) {
  Duration d = l.base_latency + uniform(rng_, l.jitter);
  if (l.reorder_probability > 0 && rng_.unit() < l.reorder_probability) {
    d += uniform(rng_, l.reorder_delay);
  }
  return d;
}

void Simulator::push(TimePoint t, EventKind kind, NodeId n, std::uint64_t token, bool stalled) {
  queue_.push(Event{t, sequence_++, kind, stalled, n, token});
}

void Simulator::send_from(NodeId from, const std::string& to_address, std::any body,
                          std::size_t bytes) {
  Node& src = node(from);
  src.counters.packets_sent += 1;
  src.counters.bytes_sent += bytes;
  network_.sent += 1;
  auto owner = address_owner_.find(to_address);
  if (owner == address_owner_.end() || !nodes_[owner->second].process) {
    network_.unroutable += 1;
    return;
  }
  const NodeId to = owner->second;
  const LinkModel& l = link(from, to);
  if (l.loss > 0 && rng_.unit() < l.loss) {
    network_.lost += 1;
    return;
  }
  int copies = 1;
  if (l.duplicate > 0 && rng_.unit() < l.duplicate) {
    copies = 2;
    network_.duplicated += 1;
  }
  auto shared = std::make_shared<const std::any>(std::move(body));
  for (int c = 0; c < copies; ++c) {
    std::uint64_t slot;
    if (!slab_free_.empty()) {
      slot = slab_free_.back();
      slab_free_.pop_back();
    } else {
      slot = slab_.size();
      slab_.emplace_back();
    }
    InFlight& f = slab_[slot];
    f.packet.from = from;
    f.packet.from_generation = src.info.generation;
    f.packet.from_address = src.info.address;
    f.packet.to_address = to_address;
    f.packet.body = shared;
    f.packet.bytes = bytes;
    f.to = to;
    f.to_incarnation = nodes_[to].incarnation;
    push(now_ + sample_latency(l), EventKind::kPacket, to, slot);
  }
}

void Simulator::schedule_timer(NodeId id) {
  Node& n = node(id);
  if (!n.process) return;
  const TimePoint d = n.process->next_deadline();
  if (d == n.timer_at) return;
  n.timer_token += 1;
  n.timer_at = d;
  if (d != kNever) push(d < now_ ? now_ : d, EventKind::kTimer, id, n.timer_token);
}

// A slow node handles an event only after a stall, one event at a time. Returns true when the
// event was deferred (re-queued) instead of handled now.
bool Simulator::maybe_stall(const Event& e, Node& n) {
  if (n.slowdown <= 1.0 || e.stalled) return false;
  const bool packet = e.kind == EventKind::kPacket;
  const double factor = (n.slowdown - 1.0) * (packet ? 0.5 + rng_.unit() : 0.5 * rng_.unit());
  const auto stall =
      Duration{static_cast<Duration::rep>(static_cast<double>(n.stall.count()) * factor)};
  TimePoint at = now_ + stall;
  if (packet) {
    if (at < n.busy_until) at = n.busy_until;
    n.busy_until = at;
  }
  push(at, e.kind, e.node, e.token, /*stalled=*/true);
  return true;
}

bool Simulator::step() {
  if (queue_.empty()) return false;
  const Event e = queue_.top();
  queue_.pop();
  now_ = e.time;
  if (e.kind == EventKind::kTimer) {
    Node& n = nodes_[e.node];
    if (!n.process || e.token != n.timer_token) return true;  // superseded or crashed
    if (maybe_stall(e, n)) return true;
    n.timer_at = kNever;
    events_processed_ += 1;
    mix_trace(mix64(static_cast<std::uint64_t>(now_.time_since_epoch().count()), e.node));
    SimContext ctx(*this, e.node);
    n.process->on_timer(ctx);
    // A deadline that did not move forward would spin; nudge it past now.
    if (n.process && n.process->next_deadline() <= now_) {
      n.timer_token += 1;
      n.timer_at = n.process->next_deadline();
      push(now_ + std::chrono::microseconds(1), EventKind::kTimer, e.node, n.timer_token);
    } else {
      schedule_timer(e.node);
    }
    return true;
  }
  InFlight& f = slab_[e.token];
  Node& n = nodes_[f.to];
  if (!n.process || n.incarnation != f.to_incarnation) {
    network_.unroutable += 1;
    f.packet.body.reset();
    slab_free_.push_back(e.token);
    return true;
  }
  if (blocked(f.packet.from, f.to)) {
    network_.partitioned += 1;
    f.packet.body.reset();
    slab_free_.push_back(e.token);
    return true;
  }
  if (maybe_stall(e, n)) return true;
  network_.delivered += 1;
  n.counters.packets_received += 1;
  n.counters.bytes_received += f.packet.bytes;
  events_processed_ += 1;
  mix_trace(mix64(mix64(static_cast<std::uint64_t>(now_.time_since_epoch().count()), f.to),
                  (static_cast<std::uint64_t>(f.packet.from) << 32) ^ f.packet.bytes));
  const Packet packet = std::move(f.packet);
  const NodeId to = f.to;
  f.packet = Packet{};
  slab_free_.push_back(e.token);  // the slot may be reused by sends made while handling
  SimContext ctx(*this, to);
  n.process->on_packet(ctx, packet);
  schedule_timer(to);
  return true;
}

bool Simulator::check_invariants() {
  for (auto& inv : invariants_) {
    if (auto broken = inv()) {
      violation_ = *broken;
      return false;
    }
  }
  return true;
}

bool Simulator::run_until(TimePoint until) {
  if (violation_) return false;
  while (!queue_.empty() && queue_.top().time <= until) {
    step();
    if (!invariants_.empty() && !check_invariants()) return false;
  }
  if (now_ < until) now_ = until;
  return true;
}

bool Simulator::run_until_condition(const std::function<bool()>& condition, TimePoint deadline,
                                    Duration poll) {
  while (true) {
    if (violation_) return false;
    if (condition()) return true;
    if (now_ >= deadline) return false;
    TimePoint next = now_ + poll;
    if (next > deadline) next = deadline;
    if (!run_until(next)) return false;
  }
}

}  // namespace elastic::sim
