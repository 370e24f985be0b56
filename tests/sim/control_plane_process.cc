#include "tests/sim/control_plane_process.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <utility>

#include "daemon/rendezvous/node_ledger.h"
#include "tests/sim/raft_storage.h"

namespace elastic::sim {
namespace {

using consensus::Entry;
using consensus::EntryType;
using consensus::Index;
using consensus::Term;
using rendezvous::JobState;
using rendezvous::RoundFence;

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "control plane sim: %s\n", what);
  std::abort();
}

std::uint64_t fnv1a(std::string_view bytes) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

bool is_active(JobState state) {
  return state == JobState::kRendezvous || state == JobState::kRunning;
}

// "d<k>" -> k; the daemons' names are the harness's own.
NodeId node_of(const std::string& name) {
  if (name.size() < 2 || name[0] != 'd') die("not a daemon name");
  return static_cast<NodeId>(std::stoul(name.substr(1)));
}

std::string stamp_text(const rendezvous::RoundStamp& s) {
  return "(round " + std::to_string(s.round) + ", term " + std::to_string(s.term) + ")";
}

std::string ranks_text(const rendezvous::RankMap& ranks) {
  std::string out = "[";
  for (const auto& r : ranks) {
    if (out.size() > 1) out += " ";
    out += r.node + "/g" + std::to_string(r.generation);
  }
  return out + "]";
}

}  // namespace

// --- ControlPlaneProcess ----------------------------------------------------------------------

ControlPlaneProcess::ControlPlaneProcess(const NodeInfo& info, const ControlPlaneOptions& options,
                                         ControlPlaneObserver* observer)
    : info_(info), name_(name_for(info.id)), options_(options), observer_(observer) {}

rendezvous::WallTime ControlPlaneProcess::wall(TimePoint now) const {
  // Every daemon's wall clock is the virtual clock: replicated times stay comparable.
  return rendezvous::WallTime(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()));
}

void ControlPlaneProcess::start(SimContext& ctx) {
  next_heartbeat_ = ctx.now();
  if (info_.id >= options_.voters) return;
  consensus::Recovered recovered = recover_raft_state(ctx.storage());
  // The owner's side of a restart: the table comes back from the snapshot, the rest from the log.
  if (recovered.snapshot) {
    auto restored = rendezvous::JobTable::restore(recovered.snapshot->data);
    if (!restored.ok()) die("a stored snapshot does not restore");
    table_ = std::move(*restored);
    observer_->on_restored(info_.id, recovered.snapshot->last_index, table_);
  }
  std::vector<consensus::NodeId> voters;
  for (std::size_t i = 0; i < options_.voters; ++i) voters.push_back(i + 1);
  raft_.emplace(info_.id + 1, voters, options_.raft, std::move(recovered), info_.seed, ctx.now());
  next_plan_ = ctx.now() + options_.plan_interval;
}

TimePoint ControlPlaneProcess::next_deadline() const {
  TimePoint t = std::min(next_heartbeat_, next_plan_);
  if (raft_) t = std::min(t, raft_->next_deadline());
  return t;
}

void ControlPlaneProcess::on_timer(SimContext& ctx) {
  const TimePoint now = ctx.now();
  if (raft_ && now >= raft_->next_deadline()) {
    raft_->tick(now, effects_);
    carry_out(ctx);
  }
  if (now >= next_heartbeat_) {
    next_heartbeat_ = now + options_.heartbeat_interval;
    for (std::size_t v = 0; v < options_.voters; ++v) {
      if (v == info_.id) {
        heard_[name_] = {info_.generation, now};
        continue;
      }
      ctx.send(address_for(static_cast<NodeId>(v)),
               CpHeartbeat{name_, info_.generation, ctx.address()}, 32);
    }
  }
  if (raft_ && now >= next_plan_) {
    next_plan_ = now + options_.plan_interval;
    lead(ctx);
  }
}

void ControlPlaneProcess::on_packet(SimContext& ctx, const Packet& packet) {
  const std::any& body = *packet.body;
  if (const auto* m = std::any_cast<CpRaft>(&body)) {
    if (!raft_) return;
    raft_->on_message(ctx.now(), m->message, effects_);
    carry_out(ctx);
  } else if (const auto* hb = std::any_cast<CpHeartbeat>(&body)) {
    if (!raft_) return;
    heard_[hb->name] = {hb->generation, ctx.now()};
    if (leading()) ctx.send(hb->address, CpHeartbeatAck{ctx.address()}, 16);
  } else if (const auto* ack = std::any_cast<CpHeartbeatAck>(&body)) {
    leader_address_ = ack->leader_address;
  } else if (const auto* submit = std::any_cast<CpSubmit>(&body)) {
    // Only a leader proposes; anyone else drops it and the client retries.
    if (leading()) propose_submit(ctx, *submit);
  } else if (const auto* reply = std::any_cast<CpSubmitReply>(&body)) {
    observer_->on_client_reply(*reply);
  } else if (const auto* start = std::any_cast<CpRoundStart>(&body)) {
    on_round_start(ctx, packet.from_address, *start);
  } else if (const auto* round_ack = std::any_cast<CpRoundAck>(&body)) {
    on_round_ack(*round_ack);
  } else {
    die("unknown packet");
  }
}

void ControlPlaneProcess::submit(SimContext& ctx, const std::string& client_id, std::uint64_t seq,
                                 const rendezvous::JobSpec& spec) {
  CpSubmit request{client_id, seq, spec, ctx.address()};
  if (leading()) {
    propose_submit(ctx, request);
    return;
  }
  std::string to = leader_address_;
  if (raft_) {
    to = raft_->leader() == consensus::kNoNode
             ? std::string()
             : address_for(static_cast<NodeId>(raft_->leader() - 1));
  }
  if (!to.empty()) ctx.send(to, std::move(request), 256);
}

void ControlPlaneProcess::propose_submit(SimContext& ctx, const CpSubmit& submit) {
  rendezvous::SubmitJob command{.client_id = submit.client_id,
                                .client_seq = submit.client_seq,
                                .spec = submit.spec,
                                .submitted_at = wall(ctx.now())};
  const TimePoint before = raft_->next_deadline();
  const auto outcome =
      raft_->propose(ctx.now(), rendezvous::encode_command(rendezvous::Command{command}), effects_);
  // Outside a simulator event the timer must not move (the simulator would not see it).
  if (raft_->next_deadline() != before) die("propose moved the Raft timer");
  if (outcome.accepted) {
    pending_[outcome.index] = Pending{outcome.term, submit.client_id, submit.reply_to};
  }
  carry_out(ctx);
}

void ControlPlaneProcess::reply(SimContext& ctx, const std::string& to, CpSubmitReply reply) {
  if (to == ctx.address()) {
    observer_->on_client_reply(reply);
  } else {
    ctx.send(to, std::move(reply), 64);
  }
}

bool ControlPlaneProcess::propose_command(SimContext& ctx, const std::string& job_id,
                                          const rendezvous::Command& command) {
  const auto outcome = raft_->propose(ctx.now(), rendezvous::encode_command(command), effects_);
  if (!outcome.accepted) return false;
  InFlight& flight = in_flight_[job_id];
  flight = InFlight{.index = outcome.index, .ranks = {}, .store_port = 0};
  if (const auto* open = std::get_if<rendezvous::OpenRound>(&command)) {
    flight.ranks = open->ranks;
    flight.store_port = rendezvous::endpoint_port(open->store_endpoint);
  }
  observer_->on_proposed(info_.id, outcome.index, outcome.term, command);
  carry_out(ctx);
  return true;
}

void ControlPlaneProcess::carry_out(SimContext& ctx) {
  // The durability contract's order: persist, send, restore, apply.
  persist_raft_state(ctx.storage(), effects_.persist);
  for (auto& m : effects_.sends) {
    std::size_t bytes = 48;
    if (const auto* ae = std::get_if<consensus::AppendEntries>(&m.body)) {
      for (const auto& e : ae->entries) bytes += 20 + e.data.size();
    }
    ctx.send(address_for(static_cast<NodeId>(m.to - 1)), CpRaft{std::move(m)}, bytes);
  }
  if (effects_.restore) {
    auto restored = rendezvous::JobTable::restore(effects_.restore->data);
    if (!restored.ok()) die("an installed snapshot does not restore");
    table_ = std::move(*restored);
    observer_->on_restored(info_.id, effects_.restore->last_index, table_);
  }
  // apply_entry may propose nothing, but move the entries out first: effects_ is reused.
  std::vector<Entry> apply = std::move(effects_.apply);
  effects_.clear();
  for (const auto& e : apply) apply_entry(ctx, e);
  // The owner's compaction policy (config.consensus.snapshot_every_entries in the daemon).
  if (options_.compact_every > 0 &&
      raft_->last_applied() >= raft_->snapshot_index() + options_.compact_every) {
    consensus::Effects compaction;
    if (!raft_->compact(raft_->last_applied(), table_.snapshot(), compaction).ok()) {
      die("compaction refused");
    }
    persist_raft_state(ctx.storage(), compaction.persist);
  }
}

void ControlPlaneProcess::apply_entry(SimContext& ctx, const Entry& entry) {
  std::optional<rendezvous::ApplyResult> result;
  if (entry.type == EntryType::kCommand) result = table_.apply(entry.index, entry.data);
  observer_->on_applied(info_.id, entry.index, entry, result, table_);
  // Answer the client whose proposal this is, if the entry is the one proposed (same term).
  for (auto it = pending_.begin(); it != pending_.end() && it->first <= entry.index;) {
    if (it->first == entry.index && it->second.term == entry.term && result) {
      reply(ctx, it->second.reply_to, CpSubmitReply{it->second.client_id, *result});
    }
    it = pending_.erase(it);
  }
}

void ControlPlaneProcess::lead(SimContext& ctx) {
  if (!leading()) {
    leading_term_ = 0;
    leader_jobs_.clear();
    in_flight_.clear();
    return;
  }
  if (raft_->term() != leading_term_) {
    leading_term_ = raft_->term();
    leader_jobs_.clear();
    in_flight_.clear();
  }
  const TimePoint now = ctx.now();
  const rendezvous::WallTime at = wall(now);
  std::erase_if(in_flight_, [&](const auto& f) { return f.second.index <= raft_->last_applied(); });
  // Like RoundService::lead: plan only once an entry of this term is applied (an earlier
  // leader's round may still commit and hold slots this table does not show yet).
  const bool caught_up = raft_->term_at(raft_->last_applied()) == raft_->term();

  std::map<std::string, std::uint64_t> alive;  // name -> generation
  for (const auto& [name, heard] : heard_) {
    if (now - heard.second <= options_.alive_window) {
      alive[name] = heard.first;
      first_seen_.try_emplace({name, heard.first}, at);
    }
  }
  // The daemon's slot and store-port accounting (rendezvous/node_ledger.h), as RoundService
  // feeds it: every daemon offers slots_per_node; the table's rounds, the proposals in flight
  // and each round decided in this pass hold them.
  rendezvous::NodeLedger ledger;
  for (NodeId id = 0; id < options_.daemons; ++id) {
    ledger.set_capacity(name_for(id), options_.slots_per_node);
  }
  ledger.hold_table(table_);
  for (const auto& [id, flight] : in_flight_) ledger.hold(id, flight.ranks, flight.store_port);
  const rendezvous::PortRange ports{29500, 29599};

  std::vector<std::pair<std::string, rendezvous::Command>> proposals;
  for (const auto& [id, job] : table_.jobs()) {
    LeaderJob& state = leader_jobs_[id];
    if (state.round_seen != job.round) state = LeaderJob{job.round, {}, {}};
    if (rendezvous::is_terminal(job.state)) continue;
    if (is_active(job.state)) send_starts(ctx, job, state);
    if (in_flight_.contains(id) || !caught_up) continue;
    if (job.state == JobState::kRendezvous) {
      const bool all_acked = std::all_of(job.ranks.begin(), job.ranks.end(), [&](const auto& r) {
        return state.acked.contains({r.node, r.generation});
      });
      if (all_acked) {
        proposals.emplace_back(
            id, rendezvous::SetJobState{.job_id = id,
                                        .round = job.round,
                                        .state = JobState::kRunning,
                                        .cause = rendezvous::RoundReason::kMemberLost,
                                        .reason = "every daemon of the round started it",
                                        .at = at});
        continue;
      }
    }
    rendezvous::PlannerInput input;
    input.job = &job;
    input.now = at;
    input.config = options_.rendezvous;
    for (const auto& [name, generation] : alive) {
      input.candidates.push_back(
          rendezvous::Candidate{.name = name,
                                .generation = generation,
                                .slots = ledger.free_slots(name, id),
                                .alive = true,
                                .address = "10.0.0." + std::to_string(node_of(name) + 1),
                                .store_port = ledger.free_port(name, job.round + 1, ports)});
      const bool member = std::any_of(job.ranks.begin(), job.ranks.end(), [&](const auto& a) {
        return a.node == name && a.generation == generation;
      });
      if (!member) {
        input.wait_list.push_back(
            rendezvous::Waiter{name, generation, first_seen_[{name, generation}]});
      }
    }
    const rendezvous::Decision decision = rendezvous::plan(input);
    switch (decision.kind) {
      case rendezvous::Decision::Kind::kOpenRound:
        proposals.emplace_back(id, rendezvous::make_open_round(job, decision, at));
        // Held now, so the next job of this pass sees it.
        ledger.hold(id, decision.ranks, rendezvous::endpoint_port(decision.store_endpoint));
        break;
      case rendezvous::Decision::Kind::kRecover:
      case rendezvous::Decision::Kind::kFail:
        proposals.emplace_back(id, rendezvous::make_set_state(job, decision, at));
        break;
      case rendezvous::Decision::Kind::kNone:
      case rendezvous::Decision::Kind::kWaitUntil:
        // Nothing to fix: a job that has run long enough "exits 0".
        if (job.state == JobState::kRunning && options_.job_runtime > Duration::zero() &&
            at - job.state_since >= options_.job_runtime) {
          proposals.emplace_back(id, rendezvous::SetJobState{.job_id = id,
                                                             .round = job.round,
                                                             .state = JobState::kSucceeded,
                                                             .cause = {},
                                                             .reason = "every rank exited 0",
                                                             .at = at});
        }
        break;
    }
  }
  // Proposed after the loop: proposing never applies here (3 voters), but stay safe if it did.
  for (const auto& [id, command] : proposals) {
    if (!propose_command(ctx, id, command)) break;
  }
}

void ControlPlaneProcess::send_starts(SimContext& ctx, const rendezvous::JobRecord& job,
                                      LeaderJob& state) {
  if (ctx.now() < state.next_start) return;
  state.next_start = ctx.now() + options_.start_resend;
  const CpRoundStart start{.term = raft_->term(),
                           .state = job.state,
                           .round = rendezvous::OpenRound{.job_id = job.id,
                                                          .round = job.round,
                                                          .expected_prev_round = 0,
                                                          .ranks = job.ranks,
                                                          .store_endpoint = job.store_endpoint,
                                                          .reason = job.round_reason,
                                                          .detail = "",
                                                          .at = job.round_opened_at}};
  for (const auto& member : job.ranks) {
    if (state.acked.contains({member.node, member.generation})) continue;
    if (member.node == name_) {
      on_round_start(ctx, ctx.address(), start);
    } else {
      ctx.send(address_for(node_of(member.node)), start, 128);
    }
  }
}

void ControlPlaneProcess::on_round_start(SimContext& ctx, const std::string& from,
                                         const CpRoundStart& start) {
  if (!is_active(start.state)) return;  // the leader sends active rounds only
  const rendezvous::RoundStamp stamp{start.term, start.round.round};
  const RoundFence::Verdict verdict = fence_.observe(start.round.job_id, stamp);
  const bool named = std::any_of(
      start.round.ranks.begin(), start.round.ranks.end(),
      [&](const auto& a) { return a.node == name_ && a.generation == info_.generation; });
  const bool act = verdict != RoundFence::Verdict::kStale && named;
  observer_->on_round_start(info_.id, info_.generation, start, verdict, act);
  if (!act) return;
  CpRoundAck ack{start.round.job_id, start.round.round, name_, info_.generation};
  if (from == ctx.address()) {
    on_round_ack(ack);
  } else {
    ctx.send(from, std::move(ack), 48);
  }
}

void ControlPlaneProcess::on_round_ack(const CpRoundAck& ack) {
  if (!leading()) return;
  const auto it = leader_jobs_.find(ack.job_id);
  if (it == leader_jobs_.end() || it->second.round_seen != ack.round) return;  // stale ack
  it->second.acked.insert({ack.node, ack.generation});
}

// --- ControlPlaneCluster ----------------------------------------------------------------------

ControlPlaneCluster::ControlPlaneCluster(std::uint64_t seed, ControlPlaneOptions options)
    : options_(std::move(options)), sim_(seed) {
  sim_.set_default_link(options_.link);
  for (std::size_t i = 0; i < options_.daemons; ++i) {
    sim_.add_node(ControlPlaneProcess::address_for(static_cast<NodeId>(i)),
                  [this](const NodeInfo& info) {
                    return std::make_unique<ControlPlaneProcess>(info, options_, this);
                  });
  }
  sim_.add_invariant([this]() -> std::optional<std::string> {
    // Scenario hook: crash a leader right after the event that proposed (or applied) an
    // OpenRound. Crashing here is safe: the event's callback has returned.
    if (crash_now_) {
      const NodeId id = *crash_now_;
      crash_now_.reset();
      if (sim_.is_up(id)) {
        crash(id);
        crash_fired_ = true;
      }
    }
    return violation_;
  });
}

ControlPlaneProcess* ControlPlaneCluster::process(NodeId id) {
  return static_cast<ControlPlaneProcess*>(sim_.process(id));
}

std::optional<NodeId> ControlPlaneCluster::leader() {
  std::optional<NodeId> best;
  for (NodeId id = 0; id < options_.voters; ++id) {
    auto* p = process(id);
    if (p == nullptr || !p->leading()) continue;
    if (!best || p->raft().term() > process(*best)->raft().term()) best = id;
  }
  return best;
}

void ControlPlaneCluster::crash(NodeId id) {
  sim_.crash(id);
  ++counters_.crashes;
}

void ControlPlaneCluster::restart(NodeId id) {
  if (lost_.contains(id)) die("restart of a permanently lost node");
  sim_.restart(id);
  ++counters_.restarts;
}

void ControlPlaneCluster::lose(NodeId id) {
  if (sim_.is_up(id)) crash(id);
  lost_.insert(id);
  ++counters_.voters_lost;
}

void ControlPlaneCluster::partition(const std::vector<std::vector<NodeId>>& groups) {
  sim_.partition(groups);
  ++counters_.partitions;
}

void ControlPlaneCluster::restart_all() {
  for (NodeId id = 0; id < options_.daemons; ++id) {
    if (!sim_.is_up(id) && !lost_.contains(id)) restart(id);
  }
}

std::size_t ControlPlaneCluster::submit(std::uint32_t min_nodes, std::uint32_t max_nodes,
                                        std::uint32_t workers_per_node) {
  const std::size_t n = requests_.size();
  Request request;
  request.spec.name = "c" + std::to_string(n);
  request.spec.command = {"train"};
  request.spec.min_nodes = min_nodes;
  request.spec.max_nodes = max_nodes;
  request.spec.workers_per_node = workers_per_node;
  request.spec.max_restarts = 3;
  request.spec.restart_backoff = Duration::zero();
  request.spec.user = "alice";
  request.spec.uid = 1000;
  request.spec.gid = 1000;
  // The client id is the first daemon's, as the real daemon names it ("<daemon>/<call>").
  std::vector<NodeId> up;
  for (NodeId id = 0; id < options_.daemons; ++id) {
    if (sim_.is_up(id)) up.push_back(id);
  }
  const NodeId first = up.empty() ? 0 : up[sim_.rng().below(up.size())];
  request.client_id = ControlPlaneProcess::name_for(first) + "/" + std::to_string(++calls_);
  request_by_client_[request.client_id] = n;
  requests_.push_back(request);
  ++counters_.requests;
  if (!up.empty()) {
    ++counters_.attempts;
    SimContext ctx(sim_, first);
    process(first)->submit(ctx, request.client_id, 1, request.spec);
  }
  requests_[n].next_try = sim_.now() + options_.client_retry;
  return n;
}

void ControlPlaneCluster::drive_clients() {
  for (auto& request : requests_) {
    if (request.job_id || sim_.now() < request.next_try) continue;
    request.next_try = sim_.now() + options_.client_retry;
    const NodeId id = static_cast<NodeId>(sim_.rng().below(options_.daemons));
    if (!sim_.is_up(id)) continue;
    ++counters_.attempts;
    SimContext ctx(sim_, id);
    process(id)->submit(ctx, request.client_id, 1, request.spec);
  }
}

bool ControlPlaneCluster::all_acknowledged() const {
  return std::all_of(requests_.begin(), requests_.end(),
                     [](const Request& r) { return r.job_id.has_value(); });
}

void ControlPlaneCluster::note_violation(std::string problem) {
  if (!violation_) violation_ = std::move(problem);
}

void ControlPlaneCluster::record_table(NodeId node, Index index,
                                       const rendezvous::JobTable& table) {
  // Check 4: equal applied index, byte-identical table.
  const std::uint64_t digest = fnv1a(table.snapshot());
  const auto [it, inserted] = digests_.emplace(index, std::make_pair(digest, node));
  if (!inserted && it->second.first != digest) {
    note_violation("d" + std::to_string(node) + "'s job table at applied index " +
                   std::to_string(index) + " differs from d" + std::to_string(it->second.second) +
                   "'s at the same index");
  }
  // Check 6: never two workers on a slot. A job's round holds its slots from its commit until
  // the job's next round or its end (members start and stop workers on that alone), so the
  // committed rounds of unfinished jobs may not ask any node for more slots than it has.
  std::map<std::string, std::uint32_t> held;
  std::map<std::string, std::string> holders;
  for (const auto& [id, job] : table.jobs()) {
    if (rendezvous::is_terminal(job.state) || job.round == 0) continue;
    for (const auto& r : job.ranks) {
      held[r.node] += r.slots;
      holders[r.node] +=
          " " + id + "/r" + std::to_string(job.round) + "x" + std::to_string(r.slots);
    }
  }
  for (const auto& [node_name, slots] : held) {
    if (slots > options_.slots_per_node) {
      note_violation("node " + node_name + " has " + std::to_string(options_.slots_per_node) +
                     " slots but committed rounds hold " + std::to_string(slots) + ":" +
                     holders[node_name] + " (d" + std::to_string(node) + ", index " +
                     std::to_string(index) + ")");
    }
  }
  // Check 1 over the whole table (rank maps change only through OpenRound, but a restored
  // table must agree too).
  for (const auto& [id, job] : table.jobs()) {
    if (job.round == 0) continue;
    const auto [r, fresh] = ranks_.emplace(std::make_pair(id, job.round), job.ranks);
    if (fresh) {
      ++counters_.rounds_opened;
    } else if (r->second != job.ranks) {
      note_violation("job " + id + " round " + std::to_string(job.round) + " has two rank maps: " +
                     ranks_text(r->second) + " and " + ranks_text(job.ranks) + " (d" +
                     std::to_string(node) + ", index " + std::to_string(index) + ")");
    }
  }
}

void ControlPlaneCluster::on_applied(NodeId node, Index index, const Entry& entry,
                                     const std::optional<rendezvous::ApplyResult>& result,
                                     const rendezvous::JobTable& table) {
  if (result && result->duplicate) ++counters_.deduplicated;
  if (result && result->ok() && !result->duplicate) {
    auto command = rendezvous::decode_command(entry.data);
    if (!command.ok()) {
      note_violation("an applied command does not decode: " + command.error().message);
    } else if (const auto* submit = std::get_if<rendezvous::SubmitJob>(&*command)) {
      const int n = ++creates_[{node, sim_.info(node).generation, submit->client_id}];
      if (n > 1) {
        note_violation("d" + std::to_string(node) + " created a job twice for client " +
                       submit->client_id + " (index " + std::to_string(index) + ")");
      }
    }
  }
  record_table(node, index, table);
  if (crash_watch_ && crash_watch_->first == node && crash_watch_->second == index) {
    crash_watch_.reset();
    crash_now_ = node;
  }
}

void ControlPlaneCluster::on_restored(NodeId node, Index index, const rendezvous::JobTable& table) {
  // A table rebuilt from a snapshot starts a new count of creations.
  std::erase_if(creates_, [&](const auto& c) {
    return std::get<0>(c.first) == node && std::get<1>(c.first) == sim_.info(node).generation;
  });
  record_table(node, index, table);
}

void ControlPlaneCluster::on_round_start(NodeId node, std::uint64_t generation,
                                         const CpRoundStart& start, RoundFence::Verdict verdict,
                                         bool acted) {
  const rendezvous::RoundStamp stamp{start.term, start.round.round};
  const std::string& job = start.round.job_id;
  auto& seen = seen_[{node, generation, job}];
  if (verdict == RoundFence::Verdict::kStale) ++counters_.stale_starts;
  if (acted) {
    ++counters_.acts;
    const std::string who =
        "d" + std::to_string(node) + " (gen " + std::to_string(generation) + ")";
    if (rendezvous::is_older(stamp, seen)) {
      note_violation(who + " acted on job " + job + " " + stamp_text(stamp) + " after seeing " +
                     stamp_text(seen));
    }
    auto& acted_stamp = acted_[{node, job}];
    if (rendezvous::is_older(stamp, acted_stamp)) {
      note_violation(who + " acted on job " + job + " " + stamp_text(stamp) + " after acting on " +
                     stamp_text(acted_stamp));
    } else {
      acted_stamp = stamp;
    }
    const auto committed = ranks_.find({job, start.round.round});
    if (committed == ranks_.end() || committed->second != start.round.ranks) {
      note_violation(who + " acted on job " + job + " round " + std::to_string(start.round.round) +
                     " with rank map " + ranks_text(start.round.ranks) +
                     " that no table committed");
    }
  }
  if (rendezvous::is_older(seen, stamp)) seen = stamp;
}

void ControlPlaneCluster::on_client_reply(const CpSubmitReply& reply) {
  const auto it = request_by_client_.find(reply.client_id);
  if (it == request_by_client_.end()) return;
  Request& request = requests_[it->second];
  if (!reply.result.ok()) {
    note_violation("client " + reply.client_id +
                   "'s submission was refused: " + reply.result.message);
    return;
  }
  if (request.job_id && *request.job_id != reply.result.job_id) {
    note_violation("client " + reply.client_id + " was acknowledged as " + *request.job_id +
                   " and as " + reply.result.job_id);
  }
  if (!request.job_id) {
    request.job_id = reply.result.job_id;
    ++counters_.acknowledged;
  }
}

void ControlPlaneCluster::on_proposed(NodeId node, Index index, Term /*term*/,
                                      const rendezvous::Command& command) {
  if (!std::holds_alternative<rendezvous::OpenRound>(command)) return;
  ++counters_.open_proposals;
  ++open_proposals_by_[node];
  if (crash_arm_ == 1) {
    crash_now_ = node;
  } else if (crash_arm_ == 2) {
    crash_watch_ = std::make_pair(node, index);
  }
  crash_arm_ = 0;
}

std::optional<std::string> ControlPlaneCluster::unsettled() {
  if (violation_) return violation_;
  if (!all_acknowledged()) return "not every client request is acknowledged yet";
  const auto l = leader();
  if (!l) return "no leader";
  const auto& lr = process(*l)->raft();
  for (NodeId id = 0; id < options_.voters; ++id) {
    auto* p = process(id);
    if (p == nullptr) continue;
    if (p->raft().last_applied() != lr.commit_index()) {
      return "d" + std::to_string(id) + " has applied " + std::to_string(p->raft().last_applied()) +
             " of " + std::to_string(lr.commit_index());
    }
  }
  // Check 5 on the leader's table.
  for (const auto& [id, job] : process(*l)->table().jobs()) {
    if (job.state == JobState::kSucceeded) {
      const bool ran = std::any_of(job.events.begin(), job.events.end(),
                                   [](const auto& e) { return e.to == JobState::kRunning; });
      if (!ran) return "job " + id + " succeeded without ever running";
      continue;
    }
    if (job.state != JobState::kRunning) {
      return "job " + id + " is " + rendezvous::to_string(job.state) + " (" + job.reason + ")";
    }
    for (const auto& r : job.ranks) {
      const NodeId node = node_of(r.node);
      if (!sim_.is_up(node) || sim_.info(node).generation != r.generation) {
        return "job " + id + " runs round " + std::to_string(job.round) + " on " + r.node +
               " (gen " + std::to_string(r.generation) + "), which is not up in that generation";
      }
    }
  }
  return std::nullopt;
}

std::optional<std::string> ControlPlaneCluster::final_problem() {
  if (violation_) return violation_;
  std::optional<std::string> reference;
  NodeId reference_node = 0;
  for (NodeId id = 0; id < options_.voters; ++id) {
    auto* p = process(id);
    if (p == nullptr) continue;
    const auto& table = p->table();
    std::map<std::string, int> by_name;
    for (const auto& [job_id, job] : table.jobs()) ++by_name[job.spec.name];
    for (const auto& [name, n] : by_name) {
      if (n > 1) {
        return "d" + std::to_string(id) + "'s table holds " + std::to_string(n) + " jobs for " +
               "request " + name;
      }
    }
    for (const auto& request : requests_) {
      if (!request.job_id) continue;
      const auto* job = table.job(*request.job_id);
      if (job == nullptr || job->spec.name != request.spec.name) {
        return "acknowledged job " + *request.job_id + " (client " + request.client_id +
               ") is missing from d" + std::to_string(id) + "'s table";
      }
    }
    const std::string snapshot = table.snapshot();
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

std::uint64_t ControlPlaneCluster::open_rounds_in_table(NodeId node) {
  auto* p = process(node);
  if (p == nullptr || !p->is_voter()) return 0;
  std::uint64_t rounds = 0;
  for (const auto& [id, job] : p->table().jobs()) rounds += job.round;
  return rounds;
}

std::string ControlPlaneCluster::summary() const {
  const auto& c = counters_;
  char buffer[640];
  std::snprintf(
      buffer, sizeof buffer,
      "requests %llu (attempts %llu, acknowledged %llu, deduplicated applies %llu), "
      "rounds opened %llu "
      "(OpenRound proposals %llu), acts %llu, stale starts ignored %llu, faults: "
      "crashes %llu, restarts %llu, partitions %llu, voters lost %llu; %llu events, trace %016llx",
      static_cast<unsigned long long>(c.requests), static_cast<unsigned long long>(c.attempts),
      static_cast<unsigned long long>(c.acknowledged),
      static_cast<unsigned long long>(c.deduplicated),
      static_cast<unsigned long long>(c.rounds_opened),
      static_cast<unsigned long long>(c.open_proposals), static_cast<unsigned long long>(c.acts),
      static_cast<unsigned long long>(c.stale_starts), static_cast<unsigned long long>(c.crashes),
      static_cast<unsigned long long>(c.restarts), static_cast<unsigned long long>(c.partitions),
      static_cast<unsigned long long>(c.voters_lost),
      static_cast<unsigned long long>(sim_.events_processed()),
      static_cast<unsigned long long>(sim_.trace_hash()));
  return buffer;
}

}  // namespace elastic::sim
