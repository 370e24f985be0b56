#include "tests/sim/membership_process.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>

namespace elastic::sim {
namespace {

// MessagePack sizes (the codec writes the smallest form).
std::size_t str_bytes(std::size_t n) { return n + (n < 32 ? 1 : n < 256 ? 2 : n < 65536 ? 3 : 5); }
std::size_t uint_bytes(std::uint64_t v) {
  return v < 128 ? 1 : v < 256 ? 2 : v < 65536 ? 3 : v <= 0xffffffffULL ? 5 : 9;
}
std::size_t container_header(std::size_t n) { return n < 16 ? 1 : n < 65536 ? 3 : 5; }
std::size_t key(std::size_t key_length) { return 1 + key_length; }

std::size_t update_bytes(const wire::MemberUpdate& u) {
  std::size_t b = container_header(6) + key(1) + str_bytes(u.name.size()) + key(1) +
                  uint_bytes(u.generation) + key(1) + uint_bytes(u.incarnation) + key(1) + 1;
  b += key(1) + str_bytes(u.address.size());
  if (!u.from.empty()) b += key(1) + str_bytes(u.from.size());
  return b;
}
std::size_t updates_bytes(const std::vector<wire::MemberUpdate>& updates) {
  if (updates.empty()) return 0;
  std::size_t b = key(1) + container_header(updates.size());
  for (const auto& u : updates) b += update_bytes(u);
  return b;
}

std::size_t body_bytes(const wire::MembershipMessage& message) {
  return std::visit(
      [](const auto& m) -> std::size_t {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, wire::Ping>) {
          return container_header(4) + key(1) + uint_bytes(m.probe) + key(1) +
                 str_bytes(m.target.size()) + key(2) + uint_bytes(m.target_generation) +
                 updates_bytes(m.updates);
        } else if constexpr (std::is_same_v<T, wire::Ack>) {
          return container_header(2) + key(1) + uint_bytes(m.probe) + updates_bytes(m.updates);
        } else if constexpr (std::is_same_v<T, wire::PingReq>) {
          return container_header(6) + key(1) + uint_bytes(m.probe) + key(1) +
                 str_bytes(m.target.size()) + key(2) + uint_bytes(m.target_generation) + key(2) +
                 str_bytes(m.target_address.size()) + key(1) + 1 + updates_bytes(m.updates);
        } else if constexpr (std::is_same_v<T, wire::Nack>) {
          return container_header(1) + key(1) + uint_bytes(m.probe);
        } else if constexpr (std::is_same_v<T, wire::PushPullDigest>) {
          return container_header(3) + key(1) + uint_bytes(m.digest) + key(1) +
                 uint_bytes(m.members) + key(1) + 1;
        } else {
          static_assert(std::is_same_v<T, wire::PushPullState>);
          return container_header(3) + key(1) + container_header(m.members.size()) +
                 [&] {
                   std::size_t b = 0;
                   for (const auto& u : m.members) b += update_bytes(u);
                   return b;
                 }() +
                 key(1) + 1 + key(1) + 1;
        }
      },
      message);
}

bool is_up_at(Simulator& sim, NodeId id, std::uint64_t generation) {
  return sim.is_up(id) && sim.info(id).generation == generation;
}

}  // namespace

std::size_t estimate_wire_bytes(const std::string& sender, const std::string& sender_address,
                                const wire::MembershipMessage& message) {
  const std::size_t body = body_bytes(message);
  // v, c (a short cluster id), s, g, a, t, q (a per-sender counter), b (bin header + body).
  return container_header(8) + key(1) + 1 + key(1) + str_bytes(8) + key(1) +
         str_bytes(sender.size()) + key(1) + 2 + key(1) + str_bytes(sender_address.size()) +
         key(1) + 1 + key(1) + 5 + key(1) +
         (body < 256     ? 2
          : body < 65536 ? 3
                         : 5) +
         body;
}

// --- MembershipProcess ---------------------------------------------------------------------

MembershipProcess::MembershipProcess(const NodeInfo& info, std::string name,
                                     const config::MembershipConfig& config,
                                     std::vector<std::string> seed_addresses, Sink sink,
                                     std::shared_ptr<membership::NameTable> names,
                                     std::shared_ptr<const MemberList> bootstrap)
    : info_(info),
      name_(std::move(name)),
      config_(config),
      seed_addresses_(std::move(seed_addresses)),
      sink_(std::move(sink)),
      names_(std::move(names)),
      bootstrap_(std::move(bootstrap)) {}

void MembershipProcess::start(SimContext& ctx) {
  membership_.emplace(membership::Self{name_, info_.generation, info_.address}, config_, info_.seed,
                      ctx.now(), names_);
  effects_ = {};
  if (bootstrap_ != nullptr) {
    membership_->seed_members(ctx.now(), *bootstrap_);
    bootstrap_.reset();  // one list is shared by every node; this process is done with it
  } else if (!seed_addresses_.empty()) {
    membership_->join(ctx.now(), seed_addresses_, effects_);
  }
  apply(ctx, effects_);
}

void MembershipProcess::on_packet(SimContext& ctx, const Packet& packet) {
  const auto& body = std::any_cast<const MembershipPacket&>(*packet.body);
  membership::Inbound in;
  in.from = body.from;
  in.from_generation = packet.from_generation;
  in.from_address = packet.from_address;
  in.message = body.message;
  membership_->on_message(ctx.now(), in, effects_);
  apply(ctx, effects_);
}

void MembershipProcess::on_timer(SimContext& ctx) {
  membership_->tick(ctx.now(), effects_);
  apply(ctx, effects_);
}

TimePoint MembershipProcess::next_deadline() const { return membership_->next_deadline(); }

void MembershipProcess::apply(SimContext& ctx, membership::Effects& effects) {
  for (auto& out : effects.sends) {
    const std::size_t bytes = estimate_wire_bytes(name_, info_.address, out.message);
    ctx.send(out.to_address, MembershipPacket{name_, std::move(out.message)}, bytes);
  }
  if (sink_) {
    for (auto& ev : effects.events) {
      sink_(ObservedEvent{ctx.now(), ctx.id(), info_.generation, std::move(ev)});
    }
  }
  effects.sends.clear();
  effects.events.clear();
}

// --- MembershipCluster ---------------------------------------------------------------------

MembershipCluster::MembershipCluster(std::uint64_t seed, ClusterOptions options)
    : options_(std::move(options)), sim_(seed) {
  sim_.set_default_link(options_.link);
}

std::string MembershipCluster::address_for(NodeId id, std::uint32_t epoch) {
  return "10." + std::to_string(epoch) + "." + std::to_string(id / 256) + "." +
         std::to_string(id % 256) + ":7946";
}

std::optional<NodeId> MembershipCluster::id_of(const std::string& name) {
  if (name.size() < 2 || name[0] != 'n') return std::nullopt;
  NodeId id = 0;
  for (std::size_t i = 1; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    id = id * 10 + static_cast<NodeId>(name[i] - '0');
  }
  return id;
}

MembershipProcess::Sink MembershipCluster::sink() {
  return [this](const ObservedEvent& e) { on_event(e); };
}

void MembershipCluster::on_event(const ObservedEvent& e) {
  tally_.events += 1;
  sim_.mix_trace((static_cast<std::uint64_t>(e.observer) << 40) ^
                 (static_cast<std::uint64_t>(e.event.state) << 32) ^
                 std::hash<std::string>{}(e.event.name) ^ e.event.generation);
  if (e.event.state == MemberState::kSuspect || e.event.state == MemberState::kDead) {
    const auto subject = id_of(e.event.name);
    const bool up =
        subject && *subject < sim_.node_count() && is_up_at(sim_, *subject, e.event.generation);
    if (e.event.state == MemberState::kSuspect && up) tally_.false_suspicions += 1;
    if (e.event.state == MemberState::kDead) {
      if (up) {
        tally_.false_deaths += 1;
        if (false_death_log_.size() < 20) {
          false_death_log_.push_back(name(e.observer) + " declared " + e.event.name + " gen " +
                                     std::to_string(e.event.generation) + " dead at t+" +
                                     std::to_string(to_ms(e.time - TimePoint{}) / 1000.0) + "s");
        }
      } else {
        tally_.true_deaths += 1;
      }
    }
  }
  if (observer_) observer_(e);
}

NodeId MembershipCluster::add_node() { return add_node_with(nullptr); }

void MembershipCluster::start_nodes_bulk(std::size_t n) {
  if (sim_.node_count() != 0) std::abort();  // the list below is the whole cluster
  auto list = std::make_shared<MembershipProcess::MemberList>();
  list->reserve(n);
  for (NodeId id = 0; id < n; ++id) {
    list->push_back(wire::MemberUpdate{.name = name(id),
                                       .generation = 1,
                                       .incarnation = 0,
                                       .state = MemberState::kAlive,
                                       .address = address_for(id, 0),
                                       .from = {}});
  }
  for (std::size_t i = 0; i < n; ++i) add_node_with(list);
}

NodeId MembershipCluster::add_node_with(
    std::shared_ptr<const MembershipProcess::MemberList> bootstrap) {
  const auto id = static_cast<NodeId>(sim_.node_count());
  address_epoch_.push_back(0);
  // The process is created again on every restart; it joins through the seeds' addresses at
  // that moment (a daemon's configured seeds): the earlier seeds on first start (node 0 founds
  // the cluster), every other seed after a restart.
  return sim_.add_node(address_for(id, 0), [this, id, bootstrap](const NodeInfo& info) {
    std::vector<std::string> seeds;
    const NodeId limit = info.generation == 1
                             ? std::min<NodeId>(id, static_cast<NodeId>(options_.seed_count))
                             : static_cast<NodeId>(options_.seed_count);
    for (NodeId s = 0; s < limit && s < sim_.node_count(); ++s) {
      if (s != id) seeds.push_back(sim_.info(s).address);
    }
    // The member list only on the first start; a restarted node joins like a daemon would.
    return std::make_unique<MembershipProcess>(info, name(id), options_.config, std::move(seeds),
                                               sink(), names_,
                                               info.generation == 1 ? bootstrap : nullptr);
  });
}

void MembershipCluster::start_nodes(std::size_t n) {
  const TimePoint begin = sim_.now();
  for (std::size_t i = 0; i < n; ++i) {
    const TimePoint at = begin + options_.start_window * static_cast<Duration::rep>(i) /
                                     static_cast<Duration::rep>(n);
    sim_.run_until(at);
    add_node();
  }
}

membership::Membership* MembershipCluster::member(NodeId id) {
  auto* p = static_cast<MembershipProcess*>(sim_.process(id));
  return p == nullptr ? nullptr : &p->membership();
}

std::vector<NodeId> MembershipCluster::up_nodes() const {
  std::vector<NodeId> up;
  for (NodeId id = 0; id < sim_.node_count(); ++id) {
    if (sim_.is_up(id)) up.push_back(id);
  }
  return up;
}

void MembershipCluster::crash(NodeId id) { sim_.crash(id); }

void MembershipCluster::restart(NodeId id, bool new_address) {
  std::optional<std::string> address;
  if (new_address) address = address_for(id, ++address_epoch_[id]);
  sim_.restart(id, address);
}

void MembershipCluster::inject_suspicion(NodeId accuser, NodeId target) {
  membership::Membership* subject = member(target);
  if (subject == nullptr || member(accuser) == nullptr) std::abort();  // scenario misuse
  const auto view = subject->member(name(target));
  wire::MembershipMessage message =
      wire::Ack{.probe = 0,
                .updates = {wire::MemberUpdate{.name = name(target),
                                               .generation = view->generation,
                                               .incarnation = view->incarnation,
                                               .state = MemberState::kSuspect,
                                               .address = view->address,
                                               .from = name(accuser)}}};
  const std::size_t bytes = estimate_wire_bytes(name(accuser), sim_.info(accuser).address, message);
  SimContext ctx(sim_, accuser);
  ctx.send(sim_.info(target).address, MembershipPacket{name(accuser), std::move(message)}, bytes);
}

std::string MembershipCluster::convergence_problem() {
  const std::size_t n = sim_.node_count();
  for (NodeId a = 0; a < n; ++a) {
    if (!sim_.is_up(a)) continue;
    const membership::Membership& m = *member(a);
    for (NodeId b = 0; b < n; ++b) {
      const auto v = m.member(name(b));
      const auto& truth = sim_.info(b);
      if (sim_.is_up(b)) {
        if (!v) return name(a) + " does not know " + name(b);
        if (v->generation != truth.generation || v->state != MemberState::kAlive ||
            v->address != truth.address) {
          return name(a) + " sees " + name(b) + " as gen " + std::to_string(v->generation) +
                 " state " + std::to_string(static_cast<int>(v->state)) + " at " + v->address +
                 " (truth: gen " + std::to_string(truth.generation) + " alive at " + truth.address +
                 ")";
        }
      } else if (v && v->generation == truth.generation &&
                 (v->state == MemberState::kAlive || v->state == MemberState::kSuspect)) {
        return name(a) + " still sees crashed " + name(b) + " gen " +
               std::to_string(truth.generation) + " as alive or suspect";
      }
    }
  }
  return "";
}

bool MembershipCluster::converged() { return convergence_problem().empty(); }

bool MembershipCluster::all_see_dead(NodeId target, std::uint64_t generation) {
  const std::string target_name = name(target);
  for (NodeId a = 0; a < sim_.node_count(); ++a) {
    if (a == target || !sim_.is_up(a)) continue;
    const auto v = member(a)->member(target_name);
    const bool dead = v && (v->generation > generation ||
                            (v->generation == generation &&
                             (v->state == MemberState::kDead || v->state == MemberState::kLeft)));
    if (!dead) return false;
  }
  return true;
}

Duration lifeguard_detection_bound(const config::MembershipConfig& config, std::size_t n) {
  // No confirmations: the longest suspicion the config allows.
  const Duration max_suspicion = membership::Membership::suspicion_timeout(config, n, 0);
  const int retransmits = membership::Membership::retransmit_limit(config, n);
  return 3 * config.probe_interval + max_suspicion + config.gossip_interval * retransmits +
         std::chrono::seconds(2);
}

}  // namespace elastic::sim
