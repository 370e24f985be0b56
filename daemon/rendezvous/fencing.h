// RoundFence: each daemon's memory of the newest (term, round) it has seen per job, so that a
// message about an older round (a delayed START from a deposed leader, a retransmission) is
// never acted on.
//
// Order: (round, term) compared round first. A higher round always wins, whatever its term:
// round numbers come from committed entries, so a higher round was decided later. For the
// same round the term must be >= the highest seen: one (job, round) has one committed rank
// map, but a new leader may resend its START with its own higher term, and the old leader's
// copy is then stale. Equal (term, round) is accepted as kSame (a retransmission; the caller
// acts on it idempotently).
//
// Ownership: a plain value owned by the daemon's node loop. Thread safety: none.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "daemon/rendezvous/types.h"

namespace elastic::rendezvous {

struct RoundStamp {
  Term term = 0;
  std::uint64_t round = 0;
  bool operator==(const RoundStamp&) const = default;
};

// True when `a` is older than `b` in the order above.
bool is_older(const RoundStamp& a, const RoundStamp& b);

class RoundFence {
 public:
  enum class Verdict {
    kNewer,  // first message of a newer (term, round): recorded, act on it
    kSame,   // the highest seen exactly: act idempotently
    kStale,  // older than the highest seen: ignore
  };

  // Checks and, unless stale, records `stamp` as the highest for `job_id`.
  Verdict observe(std::string_view job_id, RoundStamp stamp);
  // Checks without recording (for messages that must not advance the fence, e.g. leases).
  Verdict check(std::string_view job_id, RoundStamp stamp) const;

  std::optional<RoundStamp> highest(std::string_view job_id) const;
  // Drops a finished job; a later message about it starts from nothing.
  void forget(std::string_view job_id);
  std::size_t size() const { return highest_.size(); }

 private:
  std::map<std::string, RoundStamp, std::less<>> highest_;
};

const char* to_string(RoundFence::Verdict verdict);

}  // namespace elastic::rendezvous
