#include "daemon/node/forward_codec.h"

#include "daemon/wire/msgpack_schema.h"

namespace elastic::node {

using wire::internal::AsBin;
using wire::internal::Like;

template <typename V, Like<ForwardRequest> M>
void visit_fields(V& v, M& m) {
  v.field("i", m.id);
  v.field("v", m.verb);
  v.field("a", m.args, AsBin{kMaxForwardArgsBytes});
  v.field("u", m.uid);
  v.field("g", m.gid);
  v.field("ad", m.admin);
  v.field("s", m.client_seq);
}

template <typename V, Like<ForwardReply> M>
void visit_fields(V& v, M& m) {
  v.field("i", m.id);
  v.field("o", m.outcome);
  v.field("b", m.body, AsBin{kMaxForwardBodyBytes});
  v.field("l", m.leader);
}
void check_fields(wire::internal::MapReader& r, const ForwardReply& m) {
  if (m.outcome > ForwardOutcome::kDenied) {
    r.fail("has an unknown outcome " + std::to_string(static_cast<unsigned>(m.outcome)));
  }
}

namespace {

template <typename T>
Result<T> decode_as(std::string_view body, const std::string& what, std::size_t max_bin_bytes) {
  wire::internal::Failure failure;
  T message;
  if (wire::internal::decode_fields(body, {wire::kMaxFixedValues, max_bin_bytes}, what, &failure,
                                    message)) {
    return message;
  }
  return Error{std::move(failure.message)};
}

}  // namespace

std::string encode_forward(const ForwardRequest& request) {
  return wire::internal::encode_fields(request);
}

std::string encode_forward(const ForwardReply& reply) {
  return wire::internal::encode_fields(reply);
}

Result<ForwardRequest> decode_forward_request(std::string_view body) {
  return decode_as<ForwardRequest>(body, "The forwarded request", kMaxForwardArgsBytes);
}

Result<ForwardReply> decode_forward_reply(std::string_view body) {
  return decode_as<ForwardReply>(body, "The forwarded reply", kMaxForwardBodyBytes);
}

}  // namespace elastic::node
