#include "daemon/node/round_codec.h"

#include "daemon/wire/msgpack_map.h"

namespace elastic::node {

std::string encode_round_start(const RoundStart& start) {
  msgpack::sbuffer buffer;
  wire::internal::Packer p(buffer);
  p.pack_map(5);
  wire::internal::put_uint(p, "t", start.term);
  wire::internal::put_uint(p, "s", static_cast<std::uint64_t>(start.state));
  wire::internal::put_bin(p, "o", rendezvous::encode_command(start.round));
  wire::internal::put_bin(p, "j", rendezvous::encode_job_spec(start.spec));
  wire::internal::put_uint(p, "r", start.restarts);
  return std::string(buffer.data(), buffer.size());
}

Result<RoundStart> decode_round_start(std::string_view body) {
  const std::string what = "The round start";
  wire::internal::Failure failure;
  msgpack::object_handle handle;
  if (!wire::internal::parse(body, {wire::kMaxFixedValues, kMaxRoundStartBytes}, what, &handle,
                             &failure)) {
    return Error{failure.message};
  }
  wire::internal::MapReader r(handle.get(), what, &failure);
  RoundStart start;
  std::uint8_t state = 0;
  std::string command;
  std::string spec;
  r.uint("t", &start.term);
  r.uint("s", &state);
  r.bin("o", &command, wire::internal::Need::kRequired, kMaxRoundStartBytes);
  r.bin("j", &spec, wire::internal::Need::kRequired, kMaxRoundStartBytes);
  r.uint("r", &start.restarts);
  if (!r.ok()) return Error{failure.message};
  if (state > rendezvous::kMaxJobState) return Error{what + " has an unknown job state."};
  start.state = static_cast<rendezvous::JobState>(state);
  auto decoded = rendezvous::decode_command(command);
  if (!decoded.ok()) return Error{what + ": " + decoded.error().message};
  const auto* open = std::get_if<rendezvous::OpenRound>(&*decoded);
  if (open == nullptr) return Error{what + " does not carry an OpenRound command."};
  start.round = *open;
  auto decoded_spec = rendezvous::decode_job_spec(spec);
  if (!decoded_spec.ok()) return Error{what + ": " + decoded_spec.error().message};
  start.spec = std::move(*decoded_spec);
  return start;
}

}  // namespace elastic::node
