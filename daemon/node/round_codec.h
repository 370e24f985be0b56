// The body of kRoundStart, which the leader sends to the members of a job's round: the leader's
// term (the fencing token), the job's state, and the committed OpenRound command itself (its
// MessagePack encoding from rendezvous/job_table.h), so a member acts on exactly what the job
// table holds, plus what a member needs to start the workers without a copy of the job table
// (non-voters have none): the job's spec and its restart count; and for a grow round, whether
// members whose workers re-form in place hold their offer until the joiners are ready
// (RoundStart::hold_live). Map-encoded: t term, s state, o command (bin), j spec (bin,
// rendezvous/job_spec.h), r restarts, h hold_live (written only when true). Decoding never throws;
// anything but a well-formed OpenRound with a full rank map (never a rank delta: a member may
// have no job table to resolve it against) and spec is an Error. Thread safety: pure functions.
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
  rendezvous::JobSpec spec;
  // The job's worker-failure restarts (its max_restarts budget). A worker's
  // TORCHELASTIC_RESTART_COUNT is its node's count in the rank map (RankAssignment::restarts).
  std::uint32_t restarts = 0;
  // A grow round whose new members' workers are not ready yet: a member whose running workers
  // re-form in place keeps them training in the old round (their offer waits) until the leader
  // sends the round again without it. Growing then costs the running ranks only the re-formation
  // (not the joiners' start-up). Members that start workers cold ignore it.
  bool hold_live = false;
};

std::string encode_round_start(const RoundStart& start);
Result<RoundStart> decode_round_start(std::string_view body);

}  // namespace elastic::node
