// Live state after a round change: which step the new group continues from, and which rank
// sends the training state (model, optimizer, sampler position, RNG) to which others.
//
// When a round changes, every rank of the new group reports its RankFacts (all-gathered over the
// new group, so every rank computes the same plan from the same input):
//   - the ranks that hold live state of the newest round any of them trained in (the old round)
//     are its survivors. A step counts only if every survivor completed it, so the agreed step is
//     the smallest step a survivor completed. A collective that failed on one rank may have
//     completed on another, so a survivor can be one step (or more) ahead;
//   - a survivor at the agreed step keeps its state; the lowest-ranked one is the source;
//   - a rank ahead of the agreed step restores its rollback copy if it holds one of exactly that
//     step, and otherwise receives the state;
//   - a rank without state (a joiner, a crashed rank's replacement) receives the state, and so
//     does a rank whose state is from an older round than the survivors' (it missed a round).
// With no rank holding state (every rank is new) there is nothing to agree on: the result is an
// Error, and the job starts from its checkpoint (or from scratch) as it always did.
//
// Facts travel as kFactWords int64 words per rank; decode_facts() checks every word, so a
// malformed or hostile vector is an Error naming the rank and the field, never a crash.
// Pure: no LibTorch, no I/O. Thread safety: plain values.
#pragma once

#include <cstdint>
#include <vector>

#include "daemon/core/result.h"

namespace elastic::trainer {

struct RankFacts {
  bool has_state = false;            // holds model + optimizer state in memory
  std::int64_t completed_step = -1;  // the last step it completed (its state's step)
  std::int64_t state_round = -1;     // the round whose group it completed that step in
  std::int64_t rollback_step = -1;   // the step of its rollback copy; -1: it keeps none
  bool operator==(const RankFacts&) const = default;
};

struct TransferPlan {
  std::int64_t step = 0;       // the agreed step: every rank continues from here
  std::int64_t round = 0;      // the round the survivors trained in
  int source = 0;              // the rank whose state the receivers get
  std::vector<int> receivers;  // ranks that get the state from `source` (ascending)
  std::vector<int> rollbacks;  // ranks that restore their rollback copy (ascending)
  bool operator==(const TransferPlan&) const = default;
};

// The plan for a new group whose rank i reported facts[i]. Error when facts is empty, a fact is
// inconsistent (state at a negative step, a rollback copy ahead of its state), or no rank holds
// state.
Result<TransferPlan> plan_state_transfer(const std::vector<RankFacts>& facts);

inline constexpr int kFactWords = 4;
// The words one rank contributes to the all-gather.
std::vector<std::int64_t> encode_facts(const RankFacts& facts);
// Every rank's facts from the gathered words (kFactWords per rank, `world` ranks).
Result<std::vector<RankFacts>> decode_facts(const std::vector<std::int64_t>& words, int world);

}  // namespace elastic::trainer
