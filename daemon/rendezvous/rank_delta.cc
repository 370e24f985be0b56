#include "daemon/rendezvous/rank_delta.h"

#include <limits>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "daemon/rendezvous/job_spec.h"

namespace elastic::rendezvous {

std::optional<RankDelta> make_rank_delta(std::uint64_t base_round, const RankMap& base,
                                         const RankMap& ranks) {
  if (base.size() > kMaxNodesPerJob) return std::nullopt;
  std::unordered_map<std::string_view, std::uint32_t> index_of;
  for (std::uint32_t i = 0; i < base.size(); ++i) index_of.emplace(base[i].node, i);
  RankDelta delta{
      .base_round = base_round, .base_size = static_cast<std::uint32_t>(base.size()), .runs = {}};
  std::vector<bool> copied(base.size(), false);
  bool copies = false;
  for (const RankAssignment& entry : ranks) {
    const auto found = index_of.find(entry.node);
    const std::uint32_t from = found == index_of.end() ? 0 : found->second;
    // The same daemon instance with the same slots, its restarts never fewer: a copy.
    const bool copy = found != index_of.end() && !copied[from] &&
                      base[from].generation == entry.generation &&
                      base[from].slots == entry.slots && entry.restarts >= base[from].restarts;
    if (!copy) {
      delta.runs.push_back(RankRun{.node = entry.node,
                                   .generation = entry.generation,
                                   .slots = entry.slots,
                                   .restarts = entry.restarts});
      continue;
    }
    copied[from] = true;
    copies = true;
    const std::uint32_t add = entry.restarts - base[from].restarts;
    RankRun* last = delta.runs.empty() ? nullptr : &delta.runs.back();
    if (last != nullptr && last->count != 0 && last->from + last->count == from &&
        last->add_restarts == add) {
      ++last->count;
    } else {
      delta.runs.push_back(RankRun{.from = from, .count = 1, .add_restarts = add});
    }
  }
  if (!copies) return std::nullopt;
  // Only a map the delta means exactly (first ranks are recomputed, not carried).
  RankMap resolved;
  if (!resolve_rank_delta(delta, base_round, base, &resolved).empty() || resolved != ranks) {
    return std::nullopt;
  }
  return delta;
}

std::string resolve_rank_delta(const RankDelta& delta, std::uint64_t base_round,
                               const RankMap& base, RankMap* out) {
  if (delta.base_round != base_round) {
    return "its rank delta is against round " + std::to_string(delta.base_round) +
           ", not the job's round " + std::to_string(base_round);
  }
  if (delta.base_size != base.size()) {
    return "its rank delta is against a rank map of " + std::to_string(delta.base_size) +
           " nodes, but round " + std::to_string(base_round) + " has " +
           std::to_string(base.size());
  }
  RankMap ranks;
  std::vector<bool> copied(base.size(), false);
  std::uint64_t next_rank = 0;
  // Appends one entry at the next rank; false when that rank is past 32 bits.
  auto append = [&](RankAssignment entry) {
    if (next_rank > std::numeric_limits<std::uint32_t>::max()) return false;
    entry.first_rank = static_cast<std::uint32_t>(next_rank);
    next_rank += entry.slots;
    ranks.push_back(std::move(entry));
    return true;
  };
  const std::string too_many_ranks = "its rank map has more ranks than fit in 32 bits";
  for (std::size_t i = 0; i < delta.runs.size(); ++i) {
    const RankRun& run = delta.runs[i];
    const std::string what = "run " + std::to_string(i) + " of its rank delta";
    const bool copy_fields = run.count != 0 || run.from != 0 || run.add_restarts != 0;
    const bool entry_fields =
        !run.node.empty() || run.generation != 0 || run.slots != 0 || run.restarts != 0;
    if (run.count == 0 && run.node.empty()) {
      return what + " is empty (it copies no entries and names no node)";
    }
    if (copy_fields && entry_fields) return what + " is both a copy and a new entry";
    const std::uint64_t entries = run.count == 0 ? 1 : run.count;
    if (ranks.size() + entries > kMaxNodesPerJob) {
      return "its rank delta makes more than " + std::to_string(kMaxNodesPerJob) + " entries";
    }
    if (run.count == 0) {
      if (!append(RankAssignment{.node = run.node,
                                 .generation = run.generation,
                                 .slots = run.slots,
                                 .first_rank = 0,
                                 .restarts = run.restarts})) {
        return too_many_ranks;
      }
      continue;
    }
    const std::uint64_t end = std::uint64_t{run.from} + run.count;
    if (end > base.size()) {
      return what + " copies base entries " + std::to_string(run.from) + ".." +
             std::to_string(end - 1) + ", but round " + std::to_string(base_round) + " has " +
             std::to_string(base.size());
    }
    for (std::uint32_t k = run.from; k < end; ++k) {
      if (copied[k]) return what + " copies base entry " + std::to_string(k) + " again";
      copied[k] = true;
      RankAssignment entry = base[k];
      if (entry.restarts > std::numeric_limits<std::uint32_t>::max() - run.add_restarts) {
        return what + " gives node " + entry.node + " more restarts than fit in 32 bits";
      }
      entry.restarts += run.add_restarts;
      if (!append(std::move(entry))) return too_many_ranks;
    }
  }
  *out = std::move(ranks);
  return "";
}

}  // namespace elastic::rendezvous
