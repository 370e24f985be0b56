// The body of kRoundStart, which the leader sends to the members of a job's round: the leader's
// term (the fencing token), the job's state, and the committed OpenRound command itself (its
// MessagePack encoding from rendezvous/job_table.h), so a member acts on exactly what the job
// table holds. Map-encoded: t term, s state, o command (bin). Decoding never throws; anything
// but a well-formed OpenRound is an Error. Thread safety: pure functions on values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/core/result.h"
#include "daemon/rendezvous/job_table.h"

namespace elastic::node {

inline constexpr std::size_t kMaxRoundStartBytes = 4 * 1024 * 1024;

struct RoundStart {
  std::uint64_t term = 0;
  rendezvous::JobState state = rendezvous::JobState::kRendezvous;
  rendezvous::OpenRound round;
};

std::string encode_round_start(const RoundStart& start);
Result<RoundStart> decode_round_start(std::string_view body);

}  // namespace elastic::node
