// The body of kRoundStart, which the leader sends to the members of a job's round: the leader's
// term (the fencing token), the job's state, and the committed OpenRound command itself (its
// MessagePack encoding from rendezvous/job_table.h), so a member acts on exactly what the job
// table holds, plus what a member needs to start the workers without a copy of the job table
// (non-voters have none): the job's spec and its restart count; and for a grow round, whether
// members whose workers re-form in place hold their offer until the joiners are ready
// (RoundStart::hold_live). Map-encoded: t term, s state, o command (bin), j spec (bin,
// rendezvous/job_spec.h) or jd its digest, r restarts, h hold_live (written only when true).
//
// Two forms (issue 18: a 1,024-node round's full map is ~57 KB, to each of 1,024 members):
//  - full: the command carries the whole rank map and j the spec. decode_round_start(body)
//    reads only this form.
//  - delta: the command carries its rank map as a RankDelta (rendezvous/rank_delta.h) against
//    the job's round `base_round`, and jd the spec's digest (spec_digest) instead of the spec.
//    Only a member that holds that round (HeldRound: the newest round of the job it was sent,
//    and took part in) can read it; the leader sends it only to members that confirmed they hold
//    the base (a round_received or round_ack of it), and any resend in full.
//
// Decoding never throws; anything but a well-formed OpenRound whose rank map is full or resolves
// against the held round, with a spec or the held spec's digest, is an Error naming what is
// wrong. Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
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

// What a member holds of a job's newest round (the base of a delta-form RoundStart).
struct HeldRound {
  std::uint64_t round = 0;
  rendezvous::RankMap ranks;
  rendezvous::JobSpec spec;
  std::uint64_t spec_digest = 0;  // spec_digest(spec)
};

// A 64-bit digest (FNV-1a) of the spec's encoding: a delta-form RoundStart's stand-in for it.
std::uint64_t spec_digest(const rendezvous::JobSpec& spec);

// The full form.
std::string encode_round_start(const RoundStart& start);
// The delta form against `base`, the job's rank map at round `base_round` (a member's
// HeldRound), with `digest` = spec_digest(start.spec); nullopt when the map is no delta of the
// base (it keeps none of its entries: make_rank_delta).
std::optional<std::string> encode_round_start_delta(const RoundStart& start,
                                                    std::uint64_t base_round,
                                                    const rendezvous::RankMap& base,
                                                    std::uint64_t digest);

// The full form only (a delta form is an Error).
Result<RoundStart> decode_round_start(std::string_view body);
// Either form; a delta form resolves against held(job), the member's round of the body's job
// (nullptr: none), and is an Error when held is another round, the delta does not fit its map,
// or the digest is not that of its spec.
Result<RoundStart> decode_round_start(
    std::string_view body, const std::function<const HeldRound*(const std::string& job)>& held);

// The fields a fence check needs, from either form without a base (the simulator's checkers).
struct RoundStartStamp {
  std::uint64_t term = 0;
  rendezvous::JobState state = rendezvous::JobState::kRendezvous;
  std::string job;
  std::uint64_t round = 0;
  bool delta = false;
};
Result<RoundStartStamp> peek_round_start(std::string_view body);

}  // namespace elastic::node
