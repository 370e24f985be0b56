#include "daemon/node/round_codec.h"

#include <utility>

#include "daemon/rendezvous/job_spec.h"
#include "daemon/rendezvous/rank_delta.h"
#include "daemon/wire/msgpack_schema.h"

namespace elastic::node {

using wire::internal::AsBin;
using wire::internal::Like;

namespace {

// What goes on the wire: the command and the spec as their own encodings (bins), so a member
// decodes them exactly as the job table does.
struct RoundStartBody {
  std::uint64_t term = 0;
  rendezvous::JobState state = rendezvous::JobState::kRendezvous;
  std::string command;
  std::string spec;                          // the full form ("" only in the delta form)
  std::optional<std::uint64_t> spec_digest;  // the delta form
  std::uint32_t restarts = 0;
  bool hold = false;
};
template <typename V, Like<RoundStartBody> M>
void visit_fields(V& v, M& b) {
  v.field("t", b.term);
  v.field("s", b.state);
  v.field("o", b.command, AsBin{kMaxRoundStartBytes});
  v.field("j", b.spec, AsBin{kMaxRoundStartBytes}, wire::internal::When{!b.spec.empty()});
  v.field("jd", b.spec_digest);
  v.field("r", b.restarts);
  v.field("h", b.hold, wire::internal::When{b.hold});
}
void check_fields(wire::internal::MapReader& r, const RoundStartBody& b) {
  if (static_cast<std::uint8_t>(b.state) > rendezvous::kMaxJobState) {
    r.fail("has an unknown job state");
  }
  if (b.spec.empty() && !b.spec_digest) r.fail("lacks the required key 'j'");
  if (!b.spec.empty() && b.spec_digest) r.fail("has both a spec and a spec digest");
}

Result<RoundStartBody> decode_body(std::string_view body) {
  wire::internal::Failure failure;
  RoundStartBody b;
  if (!wire::internal::decode_fields(body, {wire::kMaxFixedValues, kMaxRoundStartBytes},
                                     "The round start", &failure, b)) {
    return Error{failure.message};
  }
  return b;
}

// The OpenRound the body's command holds (full or delta); an Error for another command.
Result<rendezvous::OpenRound> decode_open_round(const RoundStartBody& b) {
  auto decoded = rendezvous::decode_command(b.command);
  if (!decoded.ok()) return Error{"The round start: " + decoded.error().message};
  auto* open = std::get_if<rendezvous::OpenRound>(&*decoded);
  if (open == nullptr) return Error{"The round start does not carry an OpenRound command."};
  return std::move(*open);
}

}  // namespace

std::uint64_t spec_digest(const rendezvous::JobSpec& spec) {
  std::uint64_t hash = 14695981039346656037ull;
  for (const unsigned char c : rendezvous::encode_job_spec(spec)) {
    hash = (hash ^ c) * 1099511628211ull;
  }
  return hash;
}

std::string encode_round_start(const RoundStart& start) {
  return wire::internal::encode_fields(RoundStartBody{
      start.term, start.state, rendezvous::encode_command(start.round),
      rendezvous::encode_job_spec(start.spec), std::nullopt, start.restarts, start.hold_live});
}

std::optional<std::string> encode_round_start_delta(const RoundStart& start,
                                                    std::uint64_t base_round,
                                                    const rendezvous::RankMap& base,
                                                    std::uint64_t digest) {
  auto delta = rendezvous::make_rank_delta(base_round, base, start.round.ranks);
  if (!delta) return std::nullopt;
  rendezvous::OpenRound as_delta = start.round;
  as_delta.ranks.clear();
  as_delta.delta = std::move(delta);
  return wire::internal::encode_fields(RoundStartBody{start.term, start.state,
                                                      rendezvous::encode_command(as_delta), "",
                                                      digest, start.restarts, start.hold_live});
}

namespace {

Result<RoundStart> resolve(const RoundStartBody& b,
                           const std::function<const HeldRound*(const std::string&)>& held_of) {
  auto open = decode_open_round(b);
  if (!open.ok()) return open.error();
  const HeldRound* held = nullptr;
  if ((open->delta || b.spec_digest) && held_of) held = held_of(open->job_id);
  RoundStart start;
  start.term = b.term;
  start.state = b.state;
  start.restarts = b.restarts;
  start.hold_live = b.hold;
  start.round = std::move(*open);
  const std::string what = "The round start of job " + start.round.job_id + " round " +
                           std::to_string(start.round.round);
  if (start.round.delta) {
    const rendezvous::RankDelta& delta = *start.round.delta;
    if (held == nullptr || held->round != delta.base_round) {
      return Error{what + " is a delta against round " + std::to_string(delta.base_round) +
                   ", and this daemon holds " +
                   (held == nullptr ? std::string("no round of the job")
                                    : "round " + std::to_string(held->round)) +
                   "."};
    }
    rendezvous::RankMap ranks;
    const std::string problem =
        rendezvous::resolve_rank_delta(delta, delta.base_round, held->ranks, &ranks);
    if (!problem.empty()) return Error{what + ": " + problem + "."};
    start.round.ranks = std::move(ranks);
    start.round.delta.reset();
  }
  if (b.spec_digest) {
    if (held == nullptr || *b.spec_digest != held->spec_digest) {
      return Error{what + " names a spec by a digest this daemon does not hold."};
    }
    start.spec = held->spec;
    return start;
  }
  auto decoded_spec = rendezvous::decode_job_spec(b.spec);
  if (!decoded_spec.ok()) return Error{"The round start: " + decoded_spec.error().message};
  start.spec = std::move(*decoded_spec);
  return start;
}

}  // namespace

Result<RoundStart> decode_round_start(std::string_view body) {
  auto b = decode_body(body);
  if (!b.ok()) return b.error();
  if (b->spec_digest) return Error{"The round start carries a spec digest instead of a spec."};
  return resolve(*b, nullptr);
}

Result<RoundStart> decode_round_start(
    std::string_view body, const std::function<const HeldRound*(const std::string& job)>& held) {
  auto b = decode_body(body);
  if (!b.ok()) return b.error();
  return resolve(*b, held);
}

Result<RoundStartStamp> peek_round_start(std::string_view body) {
  auto b = decode_body(body);
  if (!b.ok()) return b.error();
  auto open = decode_open_round(*b);
  if (!open.ok()) return open.error();
  return RoundStartStamp{.term = b->term,
                         .state = b->state,
                         .job = open->job_id,
                         .round = open->round,
                         .delta = open->delta.has_value()};
}

}  // namespace elastic::node
