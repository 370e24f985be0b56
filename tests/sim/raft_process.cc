#include "tests/sim/raft_process.h"

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <utility>

namespace elastic::sim {
namespace {

using consensus::Entry;
using consensus::EntryType;
using consensus::Index;
using consensus::Term;

std::string log_key(Index index) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "log/%016" PRIu64, index);
  return buffer;
}

void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
std::uint64_t get_u64(const std::string& in, std::size_t at) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) {
    v |= static_cast<std::uint64_t>(static_cast<unsigned char>(in.at(at + i))) << (8 * i);
  }
  return v;
}

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
  return bytes;
}

// --- RaftProcess -----------------------------------------------------------------------------

RaftProcess::RaftProcess(const NodeInfo& info, std::vector<consensus::NodeId> voters,
                         const consensus::RaftConfig& config, ApplySink sink)
    : info_(info), voters_(std::move(voters)), config_(config), sink_(std::move(sink)) {}

void RaftProcess::start(SimContext& ctx) {
  consensus::Recovered recovered;
  auto& storage = ctx.storage();
  if (auto it = storage.find("hard"); it != storage.end()) {
    recovered.hard_state = consensus::HardState{get_u64(it->second, 0), get_u64(it->second, 8)};
  }
  for (auto it = storage.lower_bound("log/"); it != storage.end() && it->first.starts_with("log/");
       ++it) {
    const std::string& v = it->second;
    Entry e;
    e.term = get_u64(v, 0);
    e.index = recovered.log.size() + 1;
    e.type = static_cast<EntryType>(v.at(8));
    e.data = v.substr(9);
    if (it->first != log_key(e.index)) {
      std::fprintf(stderr, "raft sim: stored log is not contiguous at %s\n", it->first.c_str());
      std::abort();
    }
    recovered.log.push_back(std::move(e));
  }
  raft_.emplace(info_.id + 1, voters_, config_, std::move(recovered), info_.seed, ctx.now());
  applied_.clear();
  log_version_ = ++g_log_versions;
  prefix_version_ = log_version_;
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

void RaftProcess::carry_out(SimContext& ctx) {
  // 1. Persist (the storage map is the disk: durable as soon as written).
  auto& storage = ctx.storage();
  const auto& persist = effects_.persist;
  if (persist.hard_state) {
    std::string v;
    put_u64(v, persist.hard_state->term);
    put_u64(v, persist.hard_state->vote);
    storage["hard"] = v;
  }
  if (persist.truncate_from) {
    storage.erase(storage.lower_bound(log_key(*persist.truncate_from)),
                  storage.lower_bound("log0"));  // '0' follows '/': the end of the log keys
  }
  for (const auto& e : persist.append) {
    std::string v;
    put_u64(v, e.term);
    v.push_back(static_cast<char>(e.type));
    v += e.data;
    storage[log_key(e.index)] = std::move(v);
  }
  if (persist.truncate_from || !persist.append.empty()) log_version_ = ++g_log_versions;
  if (persist.truncate_from) prefix_version_ = log_version_;
  // 2. Send.
  for (auto& m : effects_.sends) {
    const std::size_t bytes = estimate_raft_bytes(m);
    ctx.send(address_for(static_cast<NodeId>(m.to - 1)), RaftPacket{std::move(m)}, bytes);
  }
  // 3. Apply.
  for (const auto& e : effects_.apply) {
    applied_.push_back(e);
    if (sink_) sink_(info_.id, e);
  }
  effects_.clear();
}

// --- RaftCluster -----------------------------------------------------------------------------

RaftCluster::RaftCluster(std::uint64_t seed, RaftClusterOptions options)
    : options_(options), sim_(seed) {
  sim_.set_default_link(options_.link);
  std::vector<consensus::NodeId> voters;
  for (std::size_t i = 0; i < options_.voters; ++i) voters.push_back(i + 1);
  for (std::size_t i = 0; i < options_.voters; ++i) {
    const auto config = options_.config;
    sim_.add_node(RaftProcess::address_for(static_cast<NodeId>(i)), [this, voters,
                                                                     config](const NodeInfo& info) {
      return std::make_unique<RaftProcess>(
          info, voters, config, [this](NodeId node, const Entry& e) { on_apply(node, e); });
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

void RaftCluster::on_apply(NodeId node, const Entry& e) {
  auto* p = process(node);
  if (p != nullptr && p->applied().size() != e.index && !apply_violation_) {
    apply_violation_ = "n" + std::to_string(node) + " applied " + describe(e) + " as its entry " +
                       std::to_string(p->applied().size()) + " (out of order)";
  }
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
  const auto& la = a.raft().log();
  const auto& lb = b.raft().log();
  std::size_t i = std::min(la.size(), lb.size());
  while (i > seen.identical && la[i - 1].term != lb[i - 1].term) --i;
  for (std::size_t k = seen.identical; k < i; ++k) {
    if (!(la[k] == lb[k])) {
      return "log matching: n" + std::to_string(ida) + " and n" + std::to_string(idb) +
             " agree on the term at index " + std::to_string(i) + " but differ at index " +
             std::to_string(k + 1) + ": " + describe(la[k]) + " vs " + describe(lb[k]);
    }
  }
  seen = PairCheck{a.log_version(), b.log_version(), a.prefix_version(), b.prefix_version(),
                   std::max(seen.identical, i)};
  return std::nullopt;
}

std::optional<std::string> RaftCluster::check() {
  if (apply_violation_) return apply_violation_;
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
      committed_.push_back(Committed{r.entry(i), r.term()});
    }
    // Only what this node has not been checked against yet (its log unchanged since).
    auto& verified = verified_[id];
    if (verified.first != process(id)->prefix_version()) {
      verified = {process(id)->prefix_version(), 0};
    }
    const Index upto = std::min<Index>(r.commit_index(), committed_.size());
    for (Index i = verified.second + 1; i <= upto; ++i) {
      if (!(r.entry(i) == committed_[i - 1].entry)) {
        return "n" + std::to_string(id) + " holds " + describe(r.entry(i)) +
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
      if (i > r.last_index() || !(r.entry(i) == c.entry)) {
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
  for (NodeId id = 0; id < size(); ++id) {
    auto* p = process(id);
    if (p == nullptr) continue;
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
      if (!count.contains(payload)) {
        return "n" + std::to_string(id) + " never applied acknowledged " + payload;
      }
    }
  }
  return std::nullopt;
}

}  // namespace elastic::sim
