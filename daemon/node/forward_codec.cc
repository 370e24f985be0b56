#include "daemon/node/forward_codec.h"

#include "daemon/wire/msgpack_map.h"

namespace elastic::node {
namespace {

using wire::internal::MapReader;
using wire::internal::Need;
using wire::internal::Packer;

std::string finish(const msgpack::sbuffer& buffer) {
  return std::string(buffer.data(), buffer.size());
}

}  // namespace

std::string encode_forward(const ForwardRequest& request) {
  msgpack::sbuffer buffer;
  Packer p(buffer);
  p.pack_map(7);
  wire::internal::put_uint(p, "i", request.id);
  wire::internal::put_str(p, "v", request.verb);
  wire::internal::put_bin(p, "a", request.args);
  wire::internal::put_uint(p, "u", request.uid);
  wire::internal::put_uint(p, "g", request.gid);
  wire::internal::put_bool(p, "ad", request.admin);
  wire::internal::put_uint(p, "s", request.client_seq);
  return finish(buffer);
}

std::string encode_forward(const ForwardReply& reply) {
  msgpack::sbuffer buffer;
  Packer p(buffer);
  p.pack_map(4);
  wire::internal::put_uint(p, "i", reply.id);
  wire::internal::put_uint(p, "o", static_cast<std::uint64_t>(reply.outcome));
  wire::internal::put_bin(p, "b", reply.body);
  wire::internal::put_str(p, "l", reply.leader);
  return finish(buffer);
}

Result<ForwardRequest> decode_forward_request(std::string_view body) {
  const std::string what = "The forwarded request";
  wire::internal::Failure failure;
  msgpack::object_handle handle;
  if (wire::internal::parse(body, {wire::kMaxFixedValues, kMaxForwardArgsBytes}, what, &handle,
                            &failure)) {
    MapReader r(handle.get(), what, &failure);
    ForwardRequest request;
    r.uint("i", &request.id);
    r.str("v", &request.verb);
    r.bin("a", &request.args, Need::kRequired, kMaxForwardArgsBytes);
    r.uint("u", &request.uid);
    r.uint("g", &request.gid);
    r.boolean("ad", &request.admin, Need::kRequired);
    r.uint("s", &request.client_seq);
    if (r.ok()) return request;
  }
  return Error{std::move(failure.message)};
}

Result<ForwardReply> decode_forward_reply(std::string_view body) {
  const std::string what = "The forwarded reply";
  wire::internal::Failure failure;
  msgpack::object_handle handle;
  if (wire::internal::parse(body, {wire::kMaxFixedValues, kMaxForwardBodyBytes}, what, &handle,
                            &failure)) {
    MapReader r(handle.get(), what, &failure);
    ForwardReply reply;
    std::uint8_t outcome = 0;
    r.uint("i", &reply.id);
    r.uint("o", &outcome);
    r.bin("b", &reply.body, Need::kRequired, kMaxForwardBodyBytes);
    r.str("l", &reply.leader);
    if (r.ok() && outcome > static_cast<std::uint8_t>(ForwardOutcome::kDenied)) {
      r.fail("has an unknown outcome " + std::to_string(outcome));
    }
    if (r.ok()) {
      reply.outcome = static_cast<ForwardOutcome>(outcome);
      return reply;
    }
  }
  return Error{std::move(failure.message)};
}

}  // namespace elastic::node
