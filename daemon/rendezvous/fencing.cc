#include "daemon/rendezvous/fencing.h"

namespace elastic::rendezvous {

bool is_older(const RoundStamp& a, const RoundStamp& b) {
  if (a.round != b.round) return a.round < b.round;
  return a.term < b.term;
}

RoundFence::Verdict RoundFence::check(std::string_view job_id, RoundStamp stamp) const {
  const auto it = highest_.find(job_id);
  if (it == highest_.end()) return Verdict::kNewer;
  if (stamp == it->second) return Verdict::kSame;
  return is_older(stamp, it->second) ? Verdict::kStale : Verdict::kNewer;
}

RoundFence::Verdict RoundFence::observe(std::string_view job_id, RoundStamp stamp) {
  const Verdict verdict = check(job_id, stamp);
  if (verdict == Verdict::kNewer) {
    const auto it = highest_.find(job_id);
    if (it == highest_.end()) {
      highest_.emplace(std::string(job_id), stamp);
    } else {
      it->second = stamp;
    }
  }
  return verdict;
}

std::optional<RoundStamp> RoundFence::highest(std::string_view job_id) const {
  const auto it = highest_.find(job_id);
  if (it == highest_.end()) return std::nullopt;
  return it->second;
}

void RoundFence::forget(std::string_view job_id) {
  const auto it = highest_.find(job_id);
  if (it != highest_.end()) highest_.erase(it);
}

const char* to_string(RoundFence::Verdict verdict) {
  switch (verdict) {
    case RoundFence::Verdict::kNewer:
      return "newer";
    case RoundFence::Verdict::kSame:
      return "same";
    case RoundFence::Verdict::kStale:
      return "stale";
  }
  return "unknown";
}

}  // namespace elastic::rendezvous
