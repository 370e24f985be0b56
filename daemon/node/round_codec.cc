#include "daemon/node/round_codec.h"

#include <utility>

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
  std::string spec;
  std::uint32_t restarts = 0;
  bool hold = false;
};
template <typename V, Like<RoundStartBody> M>
void visit_fields(V& v, M& b) {
  v.field("t", b.term);
  v.field("s", b.state);
  v.field("o", b.command, AsBin{kMaxRoundStartBytes});
  v.field("j", b.spec, AsBin{kMaxRoundStartBytes});
  v.field("r", b.restarts);
  v.field("h", b.hold, wire::internal::When{b.hold});
}
void check_fields(wire::internal::MapReader& r, const RoundStartBody& b) {
  if (static_cast<std::uint8_t>(b.state) > rendezvous::kMaxJobState) {
    r.fail("has an unknown job state");
  }
}

}  // namespace

std::string encode_round_start(const RoundStart& start) {
  return wire::internal::encode_fields(
      RoundStartBody{start.term, start.state, rendezvous::encode_command(start.round),
                     rendezvous::encode_job_spec(start.spec), start.restarts, start.hold_live});
}

Result<RoundStart> decode_round_start(std::string_view body) {
  const std::string what = "The round start";
  wire::internal::Failure failure;
  RoundStartBody b;
  if (!wire::internal::decode_fields(body, {wire::kMaxFixedValues, kMaxRoundStartBytes}, what,
                                     &failure, b)) {
    return Error{failure.message};
  }
  RoundStart start;
  start.term = b.term;
  start.state = b.state;
  start.restarts = b.restarts;
  start.hold_live = b.hold;
  auto decoded = rendezvous::decode_command(b.command);
  if (!decoded.ok()) return Error{what + ": " + decoded.error().message};
  const auto* open = std::get_if<rendezvous::OpenRound>(&*decoded);
  if (open == nullptr) return Error{what + " does not carry an OpenRound command."};
  // Members act on the round without a job table to resolve a delta against.
  if (open->delta) return Error{what + " carries a rank delta instead of a full rank map."};
  start.round = *open;
  auto decoded_spec = rendezvous::decode_job_spec(b.spec);
  if (!decoded_spec.ok()) return Error{what + ": " + decoded_spec.error().message};
  start.spec = std::move(*decoded_spec);
  return start;
}

}  // namespace elastic::node
