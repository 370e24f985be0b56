#include "trainer/live_state.h"

#include <algorithm>
#include <string>

namespace elastic::trainer {
namespace {

std::string rank_name(std::size_t rank) { return "rank " + std::to_string(rank); }

Status check(const RankFacts& f, std::size_t rank) {
  if (!f.has_state) return ok_status();
  if (f.completed_step < 0) {
    return Error{rank_name(rank) + " holds state but reports step " +
                 std::to_string(f.completed_step) + " (must be >= 0)"};
  }
  if (f.state_round < 0) {
    return Error{rank_name(rank) + " holds state but reports round " +
                 std::to_string(f.state_round) + " (must be >= 0)"};
  }
  if (f.rollback_step > f.completed_step) {
    return Error{rank_name(rank) + " reports a rollback copy of step " +
                 std::to_string(f.rollback_step) + ", ahead of its state at step " +
                 std::to_string(f.completed_step)};
  }
  return ok_status();
}

}  // namespace

Result<TransferPlan> plan_state_transfer(const std::vector<RankFacts>& facts) {
  if (facts.empty()) return Error{"a group of no ranks has no state to agree on"};
  for (std::size_t r = 0; r < facts.size(); ++r) {
    if (auto s = check(facts[r], r); !s) return s.error();
  }
  // The old round: the newest round any rank holds state from. Its ranks are the survivors.
  std::int64_t round = -1;
  for (const auto& f : facts) {
    if (f.has_state) round = std::max(round, f.state_round);
  }
  if (round < 0) {
    return Error{"none of the " + std::to_string(facts.size()) +
                 " ranks holds live state (all are new); start from the checkpoint"};
  }
  auto survivor = [&](const RankFacts& f) { return f.has_state && f.state_round == round; };
  TransferPlan plan;
  plan.round = round;
  plan.step = -1;
  for (const auto& f : facts) {
    if (survivor(f) && (plan.step < 0 || f.completed_step < plan.step))
      plan.step = f.completed_step;
  }
  plan.source = -1;
  for (std::size_t r = 0; r < facts.size(); ++r) {
    const RankFacts& f = facts[r];
    const int rank = static_cast<int>(r);
    if (survivor(f) && f.completed_step == plan.step) {
      if (plan.source < 0) plan.source = rank;
    } else if (survivor(f) && f.rollback_step == plan.step) {
      plan.rollbacks.push_back(rank);
    } else {
      plan.receivers.push_back(rank);
    }
  }
  return plan;
}

std::vector<std::int64_t> encode_facts(const RankFacts& facts) {
  return {facts.has_state ? 1 : 0, facts.completed_step, facts.state_round, facts.rollback_step};
}

Result<std::vector<RankFacts>> decode_facts(const std::vector<std::int64_t>& words, int world) {
  if (world < 1) return Error{"cannot decode the facts of " + std::to_string(world) + " ranks"};
  const auto expected = static_cast<std::size_t>(world) * kFactWords;
  if (words.size() != expected) {
    return Error{"the gathered facts hold " + std::to_string(words.size()) + " words, not " +
                 std::to_string(expected) + " (" + std::to_string(kFactWords) + " for each of " +
                 std::to_string(world) + " ranks)"};
  }
  std::vector<RankFacts> facts(static_cast<std::size_t>(world));
  for (std::size_t r = 0; r < facts.size(); ++r) {
    const std::int64_t* w = words.data() + r * kFactWords;
    if (w[0] != 0 && w[0] != 1) {
      return Error{rank_name(r) + " reports has_state=" + std::to_string(w[0]) +
                   " (must be 0 or 1)"};
    }
    for (int i = 1; i < kFactWords; ++i) {
      if (w[i] < -1) {
        static const char* const kNames[] = {"has_state", "step", "round", "rollback step"};
        return Error{rank_name(r) + " reports " + kNames[i] + " " + std::to_string(w[i]) +
                     " (must be >= -1)"};
      }
    }
    facts[r] = RankFacts{w[0] == 1, w[1], w[2], w[3]};
    if (auto s = check(facts[r], r); !s) return s.error();
  }
  return facts;
}

}  // namespace elastic::trainer
