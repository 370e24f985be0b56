#include "tests/sim/raft_process.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <utility>

#include "tests/sim/raft_storage.h"

namespace elastic::sim {
namespace {

using consensus::Entry;
using consensus::EntryType;
using consensus::Index;

// Log versions are unique across processes, so a restarted node never repeats a version a
// checker has cached.
std::uint64_t g_log_versions = 0;

std::string describe(const Entry& e) {
  return "(index " + std::to_string(e.index) + ", term " + std::to_string(e.term) + ", " +
         (e.type == EntryType::kNoop ? std::string("no-op") : "\"" + e.data + "\"") + ")";
}

}  // namespace

std::size_t estimate_raft_bytes(const consensus::Message& message) {
  std::size_t bytes = 48;  // envelope and fixed fields
  if (const auto* ae = std::get_if<consensus::AppendEntries>(&message.body)) {
    for (const auto& e : ae->entries) bytes += 20 + e.data.size();
  }
  if (const auto* is = std::get_if<consensus::InstallSnapshot>(&message.body)) {
    bytes += 9 * is->snapshot.voters.size() + is->snapshot.data.size();
  }
  return bytes;
}

std::string encode_applied(const std::vector<Entry>& applied) {
  std::string out;
  for (const Entry& e : applied) {
    put_u64(out, e.term);
    out.push_back(static_cast<char>(e.type));
    put_u64(out, e.data.size());
    out += e.data;
  }
  return out;
}

std::vector<Entry> decode_applied(const std::string& bytes) {
  std::vector<Entry> applied;
  std::size_t at = 0;
  while (at < bytes.size()) {
    Entry e;
    e.term = get_u64(bytes, at);
    e.type = static_cast<EntryType>(bytes.at(at + 8));
    const std::uint64_t length = get_u64(bytes, at + 9);
    e.data = bytes.substr(at + 17, length);
    e.index = applied.size() + 1;
    at += 17 + length;
    applied.push_back(std::move(e));
  }
  return applied;
}

// --- RaftProcess -----------------------------------------------------------------------------

RaftProcess::RaftProcess(const NodeInfo& info, std::vector<consensus::NodeId> voters,
                         const consensus::RaftConfig& config, std::size_t compact_every,
                         ApplySink sink, RestoreSink restore_sink, ReadSink read_sink)
    : info_(info),
      voters_(std::move(voters)),
      config_(config),
      compact_every_(compact_every),
      sink_(std::move(sink)),
      restore_sink_(std::move(restore_sink)),
      read_sink_(std::move(read_sink)) {}

const Entry& RaftProcess::entry_at(Index index) const {
  if (index > raft_->snapshot_index()) return raft_->entry(index);
  return applied_.at(index - 1);
}

void RaftProcess::start(SimContext& ctx) {
  consensus::Recovered recovered = recover_raft_state(ctx.storage());
  // The owner's side of a restart: rebuild the state machine from the snapshot first.
  applied_ = recovered.snapshot ? decode_applied(recovered.snapshot->data) : std::vector<Entry>{};
  raft_.emplace(info_.id + 1, voters_, config_, std::move(recovered), info_.seed, ctx.now());
  installed_snapshots_ = 0;
  log_version_ = ++g_log_versions;
  prefix_version_ = log_version_;
  if (!applied_.empty() && restore_sink_) restore_sink_(info_.id, applied_);
}

void RaftProcess::on_packet(SimContext& ctx, const Packet& packet) {
  const auto& body = std::any_cast<const RaftPacket&>(*packet.body);
  raft_->on_message(ctx.now(), body.message, effects_);
  carry_out(ctx);
}

void RaftProcess::on_timer(SimContext& ctx) {
  raft_->tick(ctx.now(), effects_);
  carry_out(ctx);
}

consensus::ProposeOutcome RaftProcess::propose(SimContext& ctx, std::string data) {
  const TimePoint before = raft_->next_deadline();
  auto outcome = raft_->propose(ctx.now(), std::move(data), effects_);
  carry_out(ctx);
  // The simulator re-reads deadlines only after its own events; propose must not move it.
  if (raft_->next_deadline() != before) {
    std::fprintf(stderr, "raft sim: propose moved the timer\n");
    std::abort();
  }
  return outcome;
}

consensus::VoterChangeOutcome RaftProcess::change_voters(SimContext& ctx,
                                                         consensus::VoterChange change) {
  const TimePoint before = raft_->next_deadline();
  auto outcome = raft_->propose_voter_change(ctx.now(), change, effects_);
  carry_out(ctx);
  if (raft_->next_deadline() != before) {
    std::fprintf(stderr, "raft sim: propose_voter_change moved the timer\n");
    std::abort();
  }
  return outcome;
}

consensus::ReadOutcome RaftProcess::read(SimContext& ctx) {
  const TimePoint before = raft_->next_deadline();
  auto outcome = raft_->read_index(ctx.now(), effects_);
  carry_out(ctx);
  if (raft_->next_deadline() != before) {
    std::fprintf(stderr, "raft sim: read_index moved the timer\n");
    std::abort();
  }
  return outcome;
}

void RaftProcess::persist(SimContext& ctx, const consensus::Persist& persist) {
  persist_raft_state(ctx.storage(), persist);
  if (persist.truncate_from || !persist.append.empty() || persist.snapshot) {
    log_version_ = ++g_log_versions;
  }
  if (persist.truncate_from) prefix_version_ = log_version_;
}

void RaftProcess::carry_out(SimContext& ctx) {
  // 1. Persist.
  persist(ctx, effects_.persist);
  // An installed snapshot may replace the log: checkers start over for this node.
  if (effects_.restore) prefix_version_ = log_version_ = ++g_log_versions;
  // 2. Send.
  for (auto& m : effects_.sends) {
    const std::size_t bytes = estimate_raft_bytes(m);
    ctx.send(address_for(static_cast<NodeId>(m.to - 1)), RaftPacket{std::move(m)}, bytes);
  }
  // 3. Restore.
  if (effects_.restore) {
    applied_ = decode_applied(effects_.restore->data);
    if (applied_.size() != effects_.restore->last_index) {
      std::fprintf(stderr, "raft sim: a snapshot's state machine does not end at its index\n");
      std::abort();
    }
    ++installed_snapshots_;
    if (restore_sink_) restore_sink_(info_.id, applied_);
  }
  // 4. Apply.
  for (const auto& e : effects_.apply) {
    applied_.push_back(e);
    if (sink_) sink_(info_.id, e);
  }
  // 6. Reads, answerable now from applied_.
  if (read_sink_) {
    for (const auto& read : effects_.reads_ready) read_sink_(info_.id, read.id, true, read.index);
    for (const auto id : effects_.reads_failed) read_sink_(info_.id, id, false, 0);
  }
  effects_.clear();
  // The owner's compaction policy (config.consensus.snapshot_every_entries in the daemon).
  if (compact_every_ > 0 && raft_->last_applied() >= raft_->snapshot_index() + compact_every_) {
    consensus::Effects compaction;
    const Index upto = raft_->last_applied();
    if (!raft_->compact(upto, encode_applied(applied_), compaction).ok()) {
      std::fprintf(stderr, "raft sim: compaction refused\n");
      std::abort();
    }
    persist(ctx, compaction.persist);
  }
}

// --- RaftCluster -----------------------------------------------------------------------------

RaftCluster::RaftCluster(std::uint64_t seed, RaftClusterOptions options)
    : options_(options), sim_(seed) {
  sim_.set_default_link(options_.link);
  std::vector<consensus::NodeId> voters;
  for (std::size_t i = 0; i < options_.voters; ++i) voters.push_back(i + 1);
  for (std::size_t i = 0; i < size(); ++i) {
    const auto config = options_.config;
    const std::size_t compact_every = options_.compact_every;
    sim_.add_node(
        RaftProcess::address_for(static_cast<NodeId>(i)),
        [this, voters, config, compact_every](const NodeInfo& info) {
          return std::make_unique<RaftProcess>(
              info, voters, config, compact_every,
              [this](NodeId node, const Entry& e) { on_apply(node, e); },
              [this](NodeId node, const std::vector<Entry>& applied) { on_restore(node, applied); },
              [this](NodeId node, consensus::ReadId id, bool released, Index index) {
                on_read(node, id, released, index);
              });
        });
  }
  sim_.add_invariant([this] { return check(); });
}

RaftProcess* RaftCluster::process(NodeId id) { return static_cast<RaftProcess*>(sim_.process(id)); }

std::optional<NodeId> RaftCluster::leader() {
  std::optional<NodeId> best;
  for (NodeId id = 0; id < size(); ++id) {
    auto* p = process(id);
    if (p == nullptr || p->raft().role() != consensus::Role::kLeader) continue;
    if (!best || p->raft().term() > process(*best)->raft().term()) best = id;
  }
  return best;
}

bool RaftCluster::propose() {
  auto id = leader();
  if (!id) return false;
  const std::string payload = "cmd-" + std::to_string(next_payload_++);
  SimContext ctx(sim_, *id);
  auto outcome = process(*id)->propose(ctx, payload);
  if (!outcome.accepted) return false;
  proposed_[payload] = Proposal{*id, sim_.info(*id).generation, outcome.index, outcome.term};
  // A single voter may commit (and apply) inside propose().
  for (const auto& e : process(*id)->applied()) {
    if (e.data == payload && e.index == outcome.index && e.term == outcome.term) {
      acknowledged_.insert(payload);
    }
  }
  return true;
}

consensus::VoterChangeOutcome RaftCluster::change_voters(consensus::VoterChange change) {
  auto id = leader();
  if (!id) return consensus::VoterChangeOutcome{false, 0, 0, 0, "No leader."};
  SimContext ctx(sim_, *id);
  return process(*id)->change_voters(ctx, change);
}

std::vector<consensus::NodeId> RaftCluster::leader_config() {
  auto id = leader();
  if (!id) return {};
  return process(*id)->raft().voters();
}

std::vector<NodeId> RaftCluster::up_members() {
  const auto config = leader_config();
  std::vector<NodeId> members;
  for (NodeId id = 0; id < size(); ++id) {
    if (process(id) == nullptr) continue;
    if (config.empty() || std::find(config.begin(), config.end(), id + 1) != config.end()) {
      members.push_back(id);
    }
  }
  return members;
}

void RaftCluster::on_restore(NodeId node, const std::vector<Entry>& applied) {
  // A restored state machine applied its whole sequence at once: check each entry.
  for (const Entry& e : applied) record_applied(node, e);
}

void RaftCluster::on_apply(NodeId node, const Entry& e) {
  auto* p = process(node);
  if (p != nullptr && p->applied().size() != e.index && !apply_violation_) {
    apply_violation_ = "n" + std::to_string(node) + " applied " + describe(e) + " as its entry " +
                       std::to_string(p->applied().size()) + " (out of order)";
  }
  record_applied(node, e);
}

void RaftCluster::record_applied(NodeId node, const Entry& e) {
  auto [it, inserted] = applied_at_.emplace(e.index, e);
  if (!inserted && !(it->second == e) && !apply_violation_) {
    apply_violation_ = "state machine safety: n" + std::to_string(node) + " applied " +
                       describe(e) + " where another node applied " + describe(it->second);
  }
  if (auto prop = proposed_.find(e.data);
      e.type == EntryType::kCommand && prop != proposed_.end()) {
    const Proposal& pr = prop->second;
    if (pr.node == node && pr.generation == sim_.info(node).generation && pr.index == e.index &&
        pr.term == e.term) {
      acknowledged_.insert(e.data);
    }
  }
}

std::optional<std::string> RaftCluster::check_log_matching(const RaftProcess& a, NodeId ida,
                                                           const RaftProcess& b, NodeId idb) {
  auto& seen = matched_[{ida, idb}];
  if (seen.log_a == a.log_version() && seen.log_b == b.log_version()) return std::nullopt;
  if (seen.prefix_a != a.prefix_version() || seen.prefix_b != b.prefix_version()) {
    seen.identical = 0;  // one of them lost entries (or restarted): check from the start
  }
  Index i = std::min(a.raft().last_index(), b.raft().last_index());
  while (i > seen.identical && a.entry_at(i).term != b.entry_at(i).term) --i;
  for (Index k = seen.identical + 1; k <= i; ++k) {
    if (!(a.entry_at(k) == b.entry_at(k))) {
      return "log matching: n" + std::to_string(ida) + " and n" + std::to_string(idb) +
             " agree on the term at index " + std::to_string(i) + " but differ at index " +
             std::to_string(k) + ": " + describe(a.entry_at(k)) + " vs " + describe(b.entry_at(k));
    }
  }
  seen = PairCheck{a.log_version(), b.log_version(), a.prefix_version(), b.prefix_version(),
                   std::max(seen.identical, i)};
  return std::nullopt;
}

std::size_t RaftCluster::read_at_leaders() {
  // What a client may have been told is written: every index some node has seen committed.
  Index floor = committed_.size();
  for (NodeId id = 0; id < size(); ++id) {
    if (auto* p = process(id)) floor = std::max(floor, p->raft().commit_index());
  }
  std::size_t accepted = 0;
  for (NodeId id = 0; id < size(); ++id) {
    auto* p = process(id);
    if (p == nullptr || p->raft().role() != consensus::Role::kLeader) continue;
    const bool deposed = max_term() > p->raft().term();
    SimContext ctx(sim_, id);
    // Recorded before the call (a single voter releases inside it), under the id Raft hands
    // out next: 1, 2, 3... per process lifetime, one per accepted read.
    const std::uint64_t generation = sim_.info(id).generation;
    auto& taken = read_ids_[{id, generation}];
    const auto key = std::make_tuple(id, generation, taken + 1);
    reads_[key] = Read{floor};
    const consensus::ReadOutcome outcome = p->read(ctx);
    if (!outcome.accepted) {
      reads_.erase(key);
      continue;
    }
    ++taken;
    if (outcome.id != taken && !read_violation_) {
      read_violation_ = "n" + std::to_string(id) + " gave its read the id " +
                        std::to_string(outcome.id) + ", not " + std::to_string(taken);
    }
    ++accepted;
    ++reads_started_;
    if (deposed) ++reads_at_deposed_;
  }
  return accepted;
}

void RaftCluster::on_read(NodeId node, consensus::ReadId id, bool released, Index index) {
  const auto found = reads_.find(std::make_tuple(node, sim_.info(node).generation, id));
  if (found == reads_.end()) {
    if (!read_violation_) {
      read_violation_ = "n" + std::to_string(node) + " resolved read " + std::to_string(id) +
                        " that it never took or resolved already";
    }
    return;
  }
  const Index floor = found->second.floor;
  reads_.erase(found);
  if (!released) {
    ++reads_failed_;
    return;
  }
  ++reads_released_;
  auto* p = process(node);
  if (read_violation_) return;
  if (index < floor) {
    read_violation_ = "linearizable reads: n" + std::to_string(node) + " released read " +
                      std::to_string(id) + " at index " + std::to_string(index) + ", below index " +
                      std::to_string(floor) +
                      " seen committed before the read began (a stale answer)";
  } else if (p == nullptr || p->applied().size() < index) {
    read_violation_ = "linearizable reads: n" + std::to_string(node) + " released read " +
                      std::to_string(id) + " at index " + std::to_string(index) +
                      " before applying it";
  }
}

std::size_t RaftCluster::reads_waiting() {
  std::size_t waiting = 0;
  for (const auto& [key, read] : reads_) {
    const NodeId node = std::get<0>(key);
    if (sim_.is_up(node) && sim_.info(node).generation == std::get<1>(key)) ++waiting;
  }
  return waiting;
}

std::optional<std::string> RaftCluster::check() {
  if (apply_violation_) return apply_violation_;
  if (read_violation_) return read_violation_;
  std::vector<NodeId> up;
  for (NodeId id = 0; id < size(); ++id) {
    if (process(id) != nullptr) up.push_back(id);
  }
  for (NodeId id : up) {
    const auto& r = process(id)->raft();
    // Election safety.
    if (r.role() == consensus::Role::kLeader) {
      auto [it, inserted] = leader_of_term_.emplace(r.term(), id);
      if (!inserted && it->second != id) {
        return "election safety: n" + std::to_string(it->second) + " and n" + std::to_string(id) +
               " both led term " + std::to_string(r.term());
      }
    }
    // Committed entries, first sightings.
    for (Index i = committed_.size() + 1; i <= r.commit_index(); ++i) {
      committed_.push_back(Committed{process(id)->entry_at(i), r.term()});
    }
    // Only what this node has not been checked against yet (its log unchanged since).
    auto& verified = verified_[id];
    if (verified.first != process(id)->prefix_version()) {
      verified = {process(id)->prefix_version(), 0};
    }
    const Index upto = std::min<Index>(r.commit_index(), committed_.size());
    for (Index i = verified.second + 1; i <= upto; ++i) {
      if (!(process(id)->entry_at(i) == committed_[i - 1].entry)) {
        return "n" + std::to_string(id) + " holds " + describe(process(id)->entry_at(i)) +
               " as committed where " + describe(committed_[i - 1].entry) + " was committed";
      }
    }
    verified.second = std::max(verified.second, upto);
  }
  // Leader completeness.
  for (NodeId id : up) {
    const auto& r = process(id)->raft();
    if (r.role() != consensus::Role::kLeader) continue;
    // A leader's entries are checked once per (lifetime and prefix, term): it only appends.
    auto& [prefix, term, checked] = complete_leader_[id];
    if (prefix != process(id)->prefix_version() || term != r.term()) checked = 0;
    for (Index i = checked + 1; i <= committed_.size(); ++i) {
      const auto& c = committed_[i - 1];
      if (r.term() <= c.seen_in_term) continue;
      if (i > r.last_index() || !(process(id)->entry_at(i) == c.entry)) {
        return "leader completeness: n" + std::to_string(id) + ", leader of term " +
               std::to_string(r.term()) + ", lacks committed " + describe(c.entry);
      }
    }
  }
  for (NodeId id : up) {
    const auto& r = process(id)->raft();
    if (r.role() == consensus::Role::kLeader) {
      complete_leader_[id] =
          std::make_tuple(process(id)->prefix_version(), r.term(), committed_.size());
    }
  }
  // Log matching.
  for (std::size_t x = 0; x < up.size(); ++x) {
    for (std::size_t y = x + 1; y < up.size(); ++y) {
      if (auto problem = check_log_matching(*process(up[x]), up[x], *process(up[y]), up[y])) {
        return problem;
      }
    }
  }
  return std::nullopt;
}

bool RaftCluster::all_acknowledged_applied() {
  for (NodeId id : up_members()) {
    auto* p = process(id);
    std::set<std::string> applied;
    for (const auto& e : p->applied()) applied.insert(e.data);
    for (const auto& payload : acknowledged_) {
      if (!applied.contains(payload)) return false;
    }
  }
  return true;
}

std::optional<std::string> RaftCluster::acknowledged_problem() {
  for (NodeId id = 0; id < size(); ++id) {
    auto* p = process(id);
    if (p == nullptr) continue;
    const auto members = up_members();
    const bool member = std::find(members.begin(), members.end(), id) != members.end();
    std::map<std::string, int> count;
    for (const auto& e : p->applied()) {
      if (e.type == EntryType::kCommand) ++count[e.data];
    }
    for (const auto& [payload, n] : count) {
      if (n > 1)
        return "n" + std::to_string(id) + " applied " + payload + " " + std::to_string(n) +
               " times";
    }
    for (const auto& payload : acknowledged_) {
      if (member && !count.contains(payload)) {
        return "n" + std::to_string(id) + " never applied acknowledged " + payload;
      }
    }
  }
  return std::nullopt;
}

}  // namespace elastic::sim
