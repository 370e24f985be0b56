// RankDelta: a round's rank map written as a change of the job's previous one, so that an
// OpenRound in the Raft log costs bytes in proportion to what changed, not to the job's size
// (issue 18: a round change of a 1,024-node job in at most 4 KiB; the full map is ~56 KiB).
//
// The delta is the new map as runs, in rank order, each either
//   a copy   of the base entries [from, from + count), each with add_restarts more restarts
//            (a member-lost round counts a restart for every kept node: planner.h), or
//   an entry (count 0): one node, generation, slots and restart count, new or changed.
// first_rank is not carried: ranks are contiguous from 0, so resolving recomputes them.
//
// The base is the job's rank map at base_round. OpenRound applies only when its
// expected_prev_round is the job's current round (job_table.h), and only OpenRound changes a
// rank map, so at apply time the base is exactly the job's current map on every daemon.
//
// Errors: resolve_rank_delta() returns one phrase (as job_table.cc's rank map checks do, for
// "Cannot open round R of job J: <phrase>.") when a delta does not fit its base; it never aborts
// on hostile values and does O(base + runs) work. Pure functions on values; thread safety as for
// any value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "daemon/rendezvous/types.h"

namespace elastic::rendezvous {

struct RankRun {
  std::uint32_t from = 0;          // a copy: the first base entry
  std::uint32_t count = 0;         // a copy: how many base entries; 0 = an entry (below)
  std::uint32_t add_restarts = 0;  // a copy: added to each copied entry's restart count
  std::string node{};              // an entry: as RankAssignment, without first_rank
  std::uint64_t generation = 0;
  std::uint32_t slots = 0;
  std::uint32_t restarts = 0;
  bool operator==(const RankRun&) const = default;
};

struct RankDelta {
  std::uint64_t base_round = 0;  // the round whose rank map is the base
  std::uint32_t base_size = 0;   // that map's entries (a check that the base is the one meant)
  std::vector<RankRun> runs{};   // at most kMaxNodesPerJob
  bool operator==(const RankDelta&) const = default;
};

// The delta that makes `ranks` of `base` (the job's rank map at `base_round`), or nullopt when
// no delta is one: it would copy no base entry, or `ranks` is not what any delta resolves to
// (first ranks that are not contiguous from 0), so that a delta always means exactly `ranks`.
std::optional<RankDelta> make_rank_delta(std::uint64_t base_round, const RankMap& base,
                                         const RankMap& ranks);

// Writes to *out the rank map `delta` makes of `base`, the job's rank map at `base_round`, and
// returns ""; or returns why it does not fit, as a phrase ("run 3 of its rank delta copies base
// entry 7 again"): a delta against another round or map size, an empty run, a run that is both a
// copy and an entry, a copy out of range or of an entry already copied, a restart count or a rank
// past 32 bits, or more than kMaxNodesPerJob entries. The map's other rules (names, slots, the
// job's min..max) are the caller's (JobTable::apply checks a resolved map as a full one).
std::string resolve_rank_delta(const RankDelta& delta, std::uint64_t base_round,
                               const RankMap& base, RankMap* out);

}  // namespace elastic::rendezvous
