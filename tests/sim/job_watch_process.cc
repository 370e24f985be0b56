#include "tests/sim/job_watch_process.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "daemon/rendezvous/job_codec.h"

namespace elastic::sim {
namespace {

using rendezvous::JobMessage;
using rendezvous::JobRoundRef;

// The envelope around a body: version, a short cluster id, sender, generation, address, type,
// seq and the bin header; keys included (see daemon/wire/codec.h).
constexpr std::size_t kEnvelopeOverhead = 48;

bool is_up_at(const Simulator& sim, NodeId id, std::uint64_t generation) {
  return sim.is_up(id) && sim.info(id).generation == generation;
}

std::optional<NodeId> id_of(const std::string& name) {
  if (name.size() < 2 || name[0] != 'd') return std::nullopt;
  NodeId id = 0;
  for (std::size_t i = 1; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    id = id * 10 + static_cast<NodeId>(name[i] - '0');
  }
  return id;
}

// Sends stale messages in a round member's name: what a daemon of an older round, a deposed
// leader's round or another job could still be sending.
class StaleGhost : public SimProcess {
 public:
  StaleGhost(std::string victim, std::vector<std::string> addresses, Duration every)
      : victim_(std::move(victim)), addresses_(std::move(addresses)), every_(every) {}

  void start(SimContext& ctx) override { next_ = ctx.now(); }
  void on_packet(SimContext&, const Packet&) override {}
  void on_timer(SimContext& ctx) override {
    const std::string job = JobWatchCluster::kJob;
    const std::uint64_t t = JobWatchCluster::kTerm;
    const std::uint64_t r = JobWatchCluster::kRound;
    const std::vector<JobMessage> stale = {
        rendezvous::JobKeepalive{JobRoundRef{job, t, r - 1}, 0},
        rendezvous::JobKeepalive{JobRoundRef{job, t + 1, r + 1}, 0},
        rendezvous::JobKeepaliveAck{JobRoundRef{job, t - 1, r}, 1},
        rendezvous::JobKeepalive{JobRoundRef{"job-2", t, r}, 5},
        rendezvous::JobProbeReply{JobRoundRef{job, t, r + 1}, 1, victim_, 1, true},
    };
    for (const std::string& to : addresses_) {
      const JobMessage& m = stale[count_++ % stale.size()];
      ctx.send(to, JobWatchPacket{victim_, m}, job_wire_bytes(victim_, m));
    }
    next_ = ctx.now() + every_;
  }
  TimePoint next_deadline() const override { return next_; }

 private:
  std::string victim_;
  std::vector<std::string> addresses_;
  Duration every_;
  TimePoint next_ = kNever;
  std::size_t count_ = 0;
};

}  // namespace

std::size_t job_wire_bytes(const std::string& sender, const JobMessage& message) {
  return kEnvelopeOverhead + 2 * sender.size() + rendezvous::encode_job(message).size();
}

// --- JobWatchProcess -----------------------------------------------------------------------

JobWatchProcess::JobWatchProcess(const NodeInfo& info, std::string name,
                                 const rendezvous::JobWatchConfig& config,
                                 std::vector<rendezvous::JobPeer> peers, Sink sink)
    : info_(info),
      name_(std::move(name)),
      config_(config),
      peers_(std::move(peers)),
      sink_(std::move(sink)) {}

void JobWatchProcess::start(SimContext& ctx) {
  watch_.emplace(name_, info_.generation, config_, info_.seed);
  effects_ = {};
  const Status s = watch_->set_round(ctx.now(), JobWatchCluster::kJob, JobWatchCluster::kTerm,
                                     JobWatchCluster::kRound, peers_, effects_);
  if (!s.ok()) std::abort();  // a fresh JobWatch accepts any round
  apply(ctx);
}

void JobWatchProcess::on_packet(SimContext& ctx, const Packet& packet) {
  if (const auto* pause = std::any_cast<PauseNotice>(packet.body.get())) {
    paused_until_ = ctx.now() + pause->duration;
    return;
  }
  if (paused()) {
    backlog_.push_back(packet);
    return;
  }
  handle(ctx, packet);
}

void JobWatchProcess::handle(SimContext& ctx, const Packet& packet) {
  if (const auto* notice = std::any_cast<TransportNotice>(packet.body.get())) {
    watch_->on_peer_event(ctx.now(), notice->peer, notice->kind, effects_);
  } else {
    const auto& body = std::any_cast<const JobWatchPacket&>(*packet.body);
    watch_->on_message(ctx.now(), body.from, packet.from_generation, body.message, effects_);
  }
  apply(ctx);
}

void JobWatchProcess::on_timer(SimContext& ctx) {
  if (paused()) {
    if (ctx.now() < paused_until_) return;
    // SIGCONT: the socket's backlog is read first, then the overdue timers run.
    paused_until_ = TimePoint{};
    std::vector<Packet> backlog = std::move(backlog_);
    backlog_.clear();
    for (const Packet& p : backlog) handle(ctx, p);
  }
  watch_->tick(ctx.now(), effects_);
  apply(ctx);
}

TimePoint JobWatchProcess::next_deadline() const {
  return paused() ? paused_until_ : watch_->next_deadline();
}

void JobWatchProcess::apply(SimContext& ctx) {
  for (auto& out : effects_.sends) {
    const std::size_t bytes = job_wire_bytes(name_, out.message);
    ctx.send(out.to_address, JobWatchPacket{name_, std::move(out.message)}, bytes);
  }
  if (sink_) {
    for (auto& lost : effects_.lost) {
      sink_(Declaration{ctx.now(), ctx.id(), std::move(lost)});
    }
  }
  effects_.sends.clear();
  effects_.lost.clear();
}

// --- JobWatchCluster -----------------------------------------------------------------------

JobWatchCluster::JobWatchCluster(std::uint64_t seed, JobWatchClusterOptions options)
    : options_(std::move(options)), sim_(seed) {
  sim_.set_default_link(options_.link);
  members_ = options_.nodes;
  for (NodeId id = 0; id < members_; ++id) peers_.push_back({name(id), 1, address(id)});
  for (NodeId id = 0; id < members_; ++id) {
    const NodeId added = sim_.add_node(address(id), [this, id](const NodeInfo& info) {
      return std::make_unique<JobWatchProcess>(info, name(id), options_.config, peers_,
                                               [this](const Declaration& d) { on_declaration(d); });
    });
    if (added != id) std::abort();  // ids are the member indices
  }
}

rendezvous::JobWatch* JobWatchCluster::watch(NodeId id) {
  if (id >= members_ || !sim_.is_up(id)) return nullptr;
  return &static_cast<JobWatchProcess*>(sim_.process(id))->watch();
}

void JobWatchCluster::notify_self(NodeId id, std::any notice, Duration delay) {
  LinkModel self;
  self.base_latency = delay;
  self.jitter = std::chrono::microseconds(1);
  sim_.set_link(id, id, self);
  SimContext ctx(sim_, id);
  ctx.send(address(id), std::move(notice), 0);
}

void JobWatchCluster::crash(NodeId id, std::optional<Duration> disconnect_after) {
  sim_.crash(id);
  if (!disconnect_after) return;
  // Only daemons that had a connection to it see one close: in a large round its ring
  // neighbours (keepalives flow both ways between them and it), in a small one everybody.
  for (NodeId s = 0; s < members_; ++s) {
    if (s == id || !sim_.is_up(s)) continue;
    const rendezvous::JobWatch* w = watch(s);
    if (w->large_round() && !w->watches(name(id)) && !w->watched_by(name(id))) continue;
    notify_self(s, TransportNotice{name(id), rendezvous::PeerEventKind::kDisconnected},
                *disconnect_after);
  }
}

void JobWatchCluster::pause(NodeId id, Duration d) {
  notify_self(id, PauseNotice{d}, Duration::zero());
}

NodeId JobWatchCluster::add_stale_ghost(NodeId victim, Duration every) {
  std::vector<std::string> addresses;
  for (NodeId id = 0; id < members_; ++id) {
    if (id != victim) addresses.push_back(address(id));
  }
  const NodeId ghost_id = static_cast<NodeId>(sim_.node_count());
  return sim_.add_node("sim://ghost" + std::to_string(ghost_id),
                       [victim, addresses, every](const NodeInfo&) {
                         return std::make_unique<StaleGhost>(name(victim), addresses, every);
                       });
}

bool JobWatchCluster::all_survivors_declared(NodeId target) const {
  const auto by = observers_.find(name(target));
  for (NodeId id = 0; id < members_; ++id) {
    if (id == target || !sim_.is_up(id)) continue;
    if (by == observers_.end() || !by->second.contains(id)) return false;
  }
  return true;
}

std::size_t JobWatchCluster::up_members() const {
  std::size_t n = 0;
  for (NodeId id = 0; id < members_; ++id) n += sim_.is_up(id) ? 1 : 0;
  return n;
}

std::size_t JobWatchCluster::declarations_of(NodeId target, NodeId observer) const {
  return static_cast<std::size_t>(std::count_if(
      declarations_.begin(), declarations_.end(),
      [&](const Declaration& d) { return d.observer == observer && d.lost.peer == name(target); }));
}

void JobWatchCluster::on_declaration(const Declaration& d) {
  declarations_.push_back(d);
  observers_[d.lost.peer].insert(d.observer);
  sim_.mix_trace(std::hash<std::string>{}(d.lost.peer) ^ d.observer);
  const auto target = id_of(d.lost.peer);
  if (target && *target < members_ && is_up_at(sim_, *target, d.lost.generation)) {
    ++false_declarations_;
    false_log_.push_back(name(d.observer) + " declared " + d.lost.peer + " (" +
                         rendezvous::to_string(d.lost.reason) + ")");
  }
}

}  // namespace elastic::sim
